//! CUPTI activity records decoded into wire records. Besides `cupti`, the one module that
//! names cudarc's CUPTI types: only the record layouts, for their field offsets (no CUPTI call
//! is made here). Fields are read one at a time, by offset, as the integers they are.

use std::collections::HashMap;
use std::ffi::{c_char, CStr};

use cudarc::cupti::sys as cu;
use gaptop_wire as w;

use crate::limits::{MAX_OPEN_RANGES, MAX_RANGE_NAMES};
use crate::state::{Collector, Markers, OpenRange};

/// One CUPTI activity record as gaptop keeps it.
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    Op(w::Op),
    /// Host timing of a call seen by CUPTI's activity API, without a stack: a synchronization
    /// (no thread either) or, with GAPTOP_API_ACTIVITY, a launch.
    Api(w::Api),
    /// An NVTX range, once its end marker is decoded.
    Range(w::Range),
}

/// Reads a kernel record's name; records replayed in tests carry names fixed up the same way.
///
/// # Safety
/// `p` must be null or point to a NUL-terminated string.
pub(crate) unsafe fn kernel_name(p: *const c_char) -> String {
    if p.is_null() {
        "kernel".into()
    } else {
        // SAFETY: non-null, so a NUL-terminated string (the contract above).
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// A record's kind, its first field.
///
/// # Safety
/// `rec` must point to at least 4 readable bytes (any alignment).
pub(crate) unsafe fn record_kind(rec: *const u8) -> u32 {
    // SAFETY: the contract above.
    unsafe { std::ptr::read_unaligned(rec as *const u32) }
}

/// The string pointer fields of a record, for GAPTOP_DUMP's fix-ups: each field's offset
/// within the record and the string it points at (a kernel's name; a marker's message and
/// domain, where not null). Empty for other kinds.
///
/// # Safety
/// `rec` must point to a complete activity record of the kind its first field says, whose
/// string fields are null or NUL-terminated strings.
pub(crate) unsafe fn string_fields(rec: *const u8) -> Vec<(usize, String)> {
    type M = cu::CUpti_ActivityMarker2;
    // SAFETY: `rec` is a complete record (the contract above), so its kind can be read.
    let offsets: &[usize] = match unsafe { record_kind(rec) } {
        10 | 3 => &[std::mem::offset_of!(cu::CUpti_ActivityKernel10, name)],
        12 => &[
            std::mem::offset_of!(M, name),
            std::mem::offset_of!(M, domain),
        ],
        _ => &[],
    };
    offsets
        .iter()
        .filter_map(|&off| {
            // SAFETY: a record of this kind holds a string pointer at `off` (the contract).
            let p = unsafe { std::ptr::read_unaligned(rec.add(off) as *const *const c_char) };
            // SAFETY: non-null, so a NUL-terminated string (the contract above).
            (!p.is_null()).then(|| (off, unsafe { kernel_name(p) }))
        })
        .collect()
}

/// Turns one CUPTI activity record into a wire record (None for kinds gaptop does not keep).
/// Kernel names are interned by pointer: CUPTI shares one name string among all records of a
/// kernel, so a new pointer is a new name, sent once.
///
/// # Safety
/// `rec` must point to a complete activity record of the kind its first field says.
pub(crate) unsafe fn decode_record(
    c: &Collector,
    names: &mut HashMap<usize, u32>,
    rec: *const u8,
) -> Option<Decoded> {
    // Fields are read one at a time, as the integers they are: materializing a whole record
    // would also read its enum fields, and a value this build does not know (a newer CUPTI)
    // must not be undefined behaviour.
    macro_rules! get {
        ($ty:ty, $field:ident) => {{
            let off = std::mem::offset_of!($ty, $field);
            // Only for the field's type; nothing is read through it.
            let like = std::mem::MaybeUninit::<$ty>::uninit();
            // SAFETY: `rec` is a complete record of layout `$ty` (this function's contract),
            // so it holds the field at `off`; the field is a plain integer or pointer.
            // `like` is only used to name the field's type: no read goes through it.
            unsafe { read_field(rec, off, std::ptr::addr_of!((*like.as_ptr()).$field)) }
        }};
    }
    // The GPU op fields every kernel, memcpy and memset record has.
    macro_rules! op {
        ($ty:ty, $name:expr, $kind:expr) => {
            w::Op {
                start: get!($ty, start),
                end: get!($ty, end),
                corr: get!($ty, correlationId),
                name: $name,
                stream: get!($ty, streamId),
                graph: get!($ty, graphId),
                device: get!($ty, deviceId) as u16,
                kind: $kind,
                flags: 0,
            }
        };
    }
    // SAFETY: a complete record starts with its kind (this function's contract).
    let kind = unsafe { record_kind(rec) };
    Some(Decoded::Op(match kind {
        // CONCURRENT_KERNEL / KERNEL
        10 | 3 => {
            let np: *const c_char = get!(cu::CUpti_ActivityKernel10, name);
            let name = match names.get(&(np as usize)) {
                Some(&id) => id,
                None => {
                    // SAFETY: a kernel record's name is null or CUPTI's NUL-terminated string,
                    // alive as long as the record (replayed records carry fixed-up names).
                    let id = c.names.name(&unsafe { kernel_name(np) });
                    names.insert(np as usize, id);
                    id
                }
            };
            op!(cu::CUpti_ActivityKernel10, name, w::OP_KERNEL)
        }
        1 => {
            let copy: u8 = get!(cu::CUpti_ActivityMemcpy6, copyKind);
            let name = c.calls().copies[(copy as usize).min(10)];
            op!(cu::CUpti_ActivityMemcpy6, name, w::OP_MEMCPY)
        }
        2 => op!(cu::CUpti_ActivityMemset4, c.calls().memset, w::OP_MEMSET),
        // SYNCHRONIZATION (both record versions share this prefix)
        38 => {
            type S = cu::CUpti_ActivitySynchronization;
            let off = std::mem::offset_of!(S, type_);
            // SAFETY: a synchronization record holds its type, a u32, at `off`.
            let t = unsafe { std::ptr::read_unaligned(rec.add(off) as *const u32) }.min(4) as usize;
            return Some(Decoded::Api(w::Api {
                start: get!(S, start),
                end: get!(S, end),
                corr: get!(S, correlationId),
                tid: 0,
                name: c.calls().syncs[t],
                stack: 0,
                outer_corr: 0,
                kind: if t == 2 { w::API_WAIT } else { w::API_SYNC },
            }));
        }
        // MARKER (NVTX: push/pop, start/end, marks): a range goes out once its end is decoded.
        12 => {
            type M = cu::CUpti_ActivityMarker2;
            // The flag and object-kind fields are enums: read as the integers they are.
            // SAFETY: a marker record holds u32s at these offsets (this function's contract);
            // `objectId` starts with the thread's `{processId, threadId}` for thread objects.
            let u32_at =
                |off: usize| unsafe { std::ptr::read_unaligned(rec.add(off) as *const u32) };
            let flags = u32_at(std::mem::offset_of!(M, flags));
            let on_thread = u32_at(std::mem::offset_of!(M, objectKind)) == 2;
            let tid = if on_thread {
                u32_at(std::mem::offset_of!(M, objectId) + 4)
            } else {
                0
            };
            let name: *const c_char = get!(M, name);
            let domain: *const c_char = get!(M, domain);
            let at = (get!(M, timestamp), get!(M, id), tid);
            // SAFETY: a marker's name and domain are null or CUPTI's NUL-terminated strings,
            // alive as long as the record.
            return unsafe { marker(c, flags, at, name, domain) }.map(Decoded::Range);
        }
        // DRIVER / RUNTIME API records (GAPTOP_API_ACTIVITY): the calls gaptop times, by the
        // names and kinds its callback table gives them.
        4 | 5 => {
            type A = cu::CUpti_ActivityAPI;
            let cbid: u32 = get!(A, cbid);
            let di = (kind == 5) as usize;
            let &(name, api_kind) = c.calls().api[di].get(cbid as usize)?;
            if name == 0 {
                return None;
            }
            return Some(Decoded::Api(w::Api {
                start: get!(A, start),
                end: get!(A, end),
                corr: get!(A, correlationId),
                tid: get!(A, threadId),
                name,
                stack: 0,
                outer_corr: 0,
                kind: api_kind,
            }));
        }
        _ => return None,
    }))
}

/// One NVTX marker record, `(timestamp, marker id, thread)`: a range's start is kept (at most
/// MAX_OPEN_RANGES, then dropped and counted), its end returns the whole range; marks and
/// records without a time give nothing. Takes `buffers.markers` (under `kernel_names`), and
/// `names.defs` inside it for a new message.
///
/// # Safety
/// `name` and `domain` must be null or NUL-terminated strings.
unsafe fn marker(
    c: &Collector,
    flags: u32,
    (ts, id, tid): (u64, u32, u32),
    name: *const c_char,
    domain: *const c_char,
) -> Option<w::Range> {
    const START: u32 = cu::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_MARKER_START as u32;
    const END: u32 = cu::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_MARKER_END as u32;
    if ts == 0 {
        return None;
    }
    let mut m = c.buffers.markers.lock().unwrap_or_else(|e| e.into_inner());
    if flags & START != 0 {
        if m.open.len() >= MAX_OPEN_RANGES && !m.open.contains_key(&id) {
            drop(m);
            c.count_drop(1);
            return None;
        }
        // SAFETY: both null or NUL-terminated (the contract above).
        let (name, domain) = unsafe {
            (
                message_id(c, &mut m, name, "(unnamed NVTX range)"),
                message_id(c, &mut m, domain, ""),
            )
        };
        let (start, name, domain) = (ts, name, domain);
        m.open.insert(
            id,
            OpenRange {
                start,
                tid,
                name,
                domain,
            },
        );
        None
    } else if flags & END != 0 {
        let o = m.open.remove(&id)?;
        Some(w::Range {
            start: o.start,
            end: ts.max(o.start),
            tid: o.tid,
            name: o.name,
            domain: o.domain,
        })
    } else {
        None
    }
}

/// The name id of an NVTX message (or domain), named on first sight; `none` names a null one
/// ("" is id 0: no name). Past MAX_RANGE_NAMES distinct ones, one shared name says so.
///
/// # Safety
/// `p` must be null or a NUL-terminated string.
unsafe fn message_id(c: &Collector, m: &mut Markers, p: *const c_char, none: &str) -> u32 {
    let bytes = if p.is_null() {
        none.as_bytes()
    } else {
        // SAFETY: non-null, so a NUL-terminated string (the contract above).
        unsafe { CStr::from_ptr(p) }.to_bytes()
    };
    if bytes.is_empty() {
        return 0;
    }
    if let Some(&id) = m.names.get(bytes) {
        return id;
    }
    if m.names.len() >= MAX_RANGE_NAMES {
        if m.overflow == 0 {
            m.overflow = c.names.name("(NVTX messages past gaptop's limit)");
        }
        return m.overflow;
    }
    let id = c.names.name(&String::from_utf8_lossy(bytes));
    m.names.insert(bytes.into(), id);
    id
}

/// Reads a plain field of type `T` at `off` in a record; `_like` only names the type.
///
/// # Safety
/// `rec + off` must hold a `T` (any alignment); `T` must be valid for every bit pattern.
unsafe fn read_field<T: Copy>(rec: *const u8, off: usize, _like: *const T) -> T {
    // SAFETY: the contract above.
    unsafe { std::ptr::read_unaligned(rec.add(off) as *const T) }
}

/// Encoded records of one activity buffer.
#[derive(Default)]
pub(crate) struct Decodedbuf {
    pub(crate) ops: Vec<u8>,
    pub(crate) n_ops: usize,
    pub(crate) syncs: Vec<u8>,
    pub(crate) n_syncs: usize,
    pub(crate) ranges: Vec<u8>,
    pub(crate) n_ranges: usize,
    pub(crate) oldest_end: u64,
}

/// Decodes a buffer's records (given by address, as CUPTI's iterator yields them).
///
/// # Safety
/// Every address must point to a complete activity record.
pub(crate) unsafe fn decode_records(
    c: &Collector,
    names: &mut HashMap<usize, u32>,
    recs: impl Iterator<Item = *const u8>,
    out: &mut Decodedbuf,
) {
    out.oldest_end = u64::MAX;
    for rec in recs {
        // SAFETY: each address is a complete record (the contract above).
        match unsafe { decode_record(c, names, rec) } {
            Some(Decoded::Op(op)) => {
                out.oldest_end = out.oldest_end.min(op.end);
                w::put_op(&mut out.ops, &op);
                out.n_ops += 1;
            }
            Some(Decoded::Api(a)) => {
                w::put_api(&mut out.syncs, &a);
                out.n_syncs += 1;
            }
            Some(Decoded::Range(r)) => {
                w::put_range(&mut out.ranges, &r);
                out.n_ranges += 1;
            }
            None => {}
        }
    }
}

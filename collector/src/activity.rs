//! CUPTI activity buffers: handed out from a pool, decoded into wire records when complete,
//! queued for the sender (or dumped for replay tests).

use super::*;

pub(crate) unsafe extern "C" fn buffer_requested(
    buf: *mut *mut u8,
    size: *mut usize,
    max: *mut usize,
) {
    *max = 0;
    *buf = std::ptr::null_mut();
    *size = 0;
    let Some(c) = COLLECTOR.get() else {
        return;
    };
    if c.buffers_out.fetch_add(1, Relaxed) >= MAX_BUFFERS {
        // Over the cap: CUPTI drops the records and counts them; we read that count.
        c.buffers_out.fetch_sub(1, Relaxed);
        return;
    }
    let reused = c.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let p = match reused {
        Some(p) => p as *mut u8,
        // Buffers CUPTI expects zeroed (see `zeroed`) come zeroed from calloc or the pool.
        None if c.zeroed => libc::calloc(1, BUF_SIZE) as *mut u8,
        None => libc::malloc(BUF_SIZE) as *mut u8,
    };
    if p.is_null() {
        c.buffers_out.fetch_sub(1, Relaxed);
        return;
    }
    *buf = p;
    *size = BUF_SIZE;
}

/// Gives a finished activity buffer back to the pool, or frees it when the pool is full.
pub(crate) unsafe fn release_buffer(c: &Collector, buffer: *mut u8) {
    c.buffers_out.fetch_sub(1, Relaxed);
    let keep = c.pool.lock().unwrap_or_else(|e| e.into_inner()).len() < POOL_KEEP;
    if keep && c.zeroed {
        // Zeroed here, on CUPTI's completion thread, so that CUPTI does not clear it on the
        // launching thread when it takes it again.
        std::ptr::write_bytes(buffer, 0, BUF_SIZE);
    }
    let mut pool = c.pool.lock().unwrap_or_else(|e| e.into_inner());
    if keep && pool.len() < POOL_KEEP {
        pool.push(buffer as usize);
    } else {
        drop(pool);
        libc::free(buffer as *mut c_void);
    }
}

pub(crate) unsafe extern "C" fn buffer_completed(
    ctx: cudarc::driver::sys::CUcontext,
    stream: u32,
    buffer: *mut u8,
    size: usize,
    valid: usize,
) {
    let r =
        std::panic::catch_unwind(|| unsafe { completed_inner(ctx, stream, buffer, size, valid) });
    if r.is_err() {
        if let Some(c) = COLLECTOR.get() {
            go_quiet(c, "internal error while reading CUPTI records");
        }
    }
}

/// One CUPTI activity record as gaptop keeps it.
#[derive(Debug, PartialEq)]
pub(crate) enum Decoded {
    Op(w::Op),
    /// Host timing of a call seen by CUPTI's activity API, without a stack: a synchronization
    /// (no thread either) or, with GAPTOP_API_ACTIVITY, a launch.
    Api(w::Api),
}

/// Reads a kernel record's name; records replayed in tests carry names fixed up the same way.
pub(crate) unsafe fn kernel_name(p: *const c_char) -> String {
    if p.is_null() {
        "kernel".into()
    } else {
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
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
            read_field(rec, off, std::ptr::addr_of!((*like.as_ptr()).$field))
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
    let kind = std::ptr::read_unaligned(rec as *const u32);
    Some(Decoded::Op(match kind {
        // CONCURRENT_KERNEL / KERNEL
        10 | 3 => {
            let np: *const c_char = get!(cu::CUpti_ActivityKernel10, name);
            let name = match names.get(&(np as usize)) {
                Some(&id) => id,
                None => {
                    let id = c.new_name(&kernel_name(np));
                    names.insert(np as usize, id);
                    id
                }
            };
            op!(cu::CUpti_ActivityKernel10, name, w::OP_KERNEL)
        }
        1 => {
            let copy: u8 = get!(cu::CUpti_ActivityMemcpy6, copyKind);
            let name = c.copy_names[(copy as usize).min(10)];
            op!(cu::CUpti_ActivityMemcpy6, name, w::OP_MEMCPY)
        }
        2 => op!(cu::CUpti_ActivityMemset4, c.memset_name, w::OP_MEMSET),
        // SYNCHRONIZATION (both record versions share this prefix)
        38 => {
            type S = cu::CUpti_ActivitySynchronization;
            let off = std::mem::offset_of!(S, type_);
            let t = std::ptr::read_unaligned(rec.add(off) as *const u32).min(4) as usize;
            return Some(Decoded::Api(w::Api {
                start: get!(S, start),
                end: get!(S, end),
                corr: get!(S, correlationId),
                tid: 0,
                name: c.sync_names[t],
                stack: 0,
                outer_corr: 0,
                kind: if t == 2 { w::API_WAIT } else { w::API_SYNC },
            }));
        }
        // DRIVER / RUNTIME API records (GAPTOP_API_ACTIVITY): the calls gaptop times, by the
        // names and kinds its callback table gives them.
        4 | 5 => {
            type A = cu::CUpti_ActivityAPI;
            let cbid: u32 = get!(A, cbid);
            let di = (kind == 5) as usize;
            let &(name, api_kind) = c.api_table[di].get(cbid as usize)?;
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

/// Reads a plain field of type `T` at `off` in a record; `_like` only names the type.
///
/// # Safety
/// `rec + off` must hold a `T` (any alignment); `T` must be valid for every bit pattern.
unsafe fn read_field<T: Copy>(rec: *const u8, off: usize, _like: *const T) -> T {
    std::ptr::read_unaligned(rec.add(off) as *const T)
}

/// Encoded records of one activity buffer.
#[derive(Default)]
pub(crate) struct Decodedbuf {
    pub(crate) ops: Vec<u8>,
    pub(crate) n_ops: usize,
    pub(crate) syncs: Vec<u8>,
    pub(crate) n_syncs: usize,
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
        match decode_record(c, names, rec) {
            Some(Decoded::Op(op)) => {
                out.oldest_end = out.oldest_end.min(op.end);
                w::put_op(&mut out.ops, &op);
                out.n_ops += 1;
            }
            Some(Decoded::Api(a)) => {
                w::put_api(&mut out.syncs, &a);
                out.n_syncs += 1;
            }
            None => {}
        }
    }
}

/// Queues an encoded batch for the sender unless collection stopped or the queue is full;
/// returns false when the batch was dropped (the caller counts it).
pub(crate) fn enqueue(q: &mut Queue, active: bool, batch: Batch, cap: usize) -> bool {
    if !active || q.bytes + batch.bytes.len() > cap {
        return false;
    }
    q.bytes += batch.bytes.len();
    q.batches.push_back(batch);
    true
}

/// Appends an API record to a thread's buffer unless that would grow it; false when dropped.
pub(crate) fn append_api(buf: &mut Vec<u8>, rec: &w::Api) -> bool {
    if buf.len() + w::API_SIZE > buf.capacity() {
        return false;
    }
    w::put_api(buf, rec);
    true
}

/// Dump format for replay tests, one entry per completed buffer: b"GCB1", valid bytes (u64),
/// record count (u32) and offsets (u32 each, as CUPTI's iterator gave them), name fix-ups
/// (count u32, then per kernel record: offset of its name field u32, length u32, bytes), then
/// the buffer's valid bytes.
pub(crate) unsafe fn dump_buffer(
    c: &Collector,
    buffer: *const u8,
    valid: usize,
    recs: &[*const u8],
) {
    let mut d = c.dump.lock().unwrap_or_else(|e| e.into_inner());
    let Some((file, budget)) = d.as_mut() else {
        return;
    };
    if valid > *budget {
        return;
    }
    let mut out = Vec::with_capacity(valid + 16 * recs.len() + 64);
    out.extend_from_slice(b"GCB1");
    out.extend_from_slice(&(valid as u64).to_le_bytes());
    out.extend_from_slice(&(recs.len() as u32).to_le_bytes());
    let mut fix = Vec::new();
    let mut nfix = 0u32;
    for &r in recs {
        let off = r as usize - buffer as usize;
        out.extend_from_slice(&(off as u32).to_le_bytes());
        let kind = std::ptr::read_unaligned(r as *const u32);
        if kind == 10 || kind == 3 {
            let name_off = std::mem::offset_of!(cu::CUpti_ActivityKernel10, name);
            let name = kernel_name(std::ptr::read_unaligned(
                r.add(name_off) as *const *const c_char
            ));
            let field = off + name_off;
            fix.extend_from_slice(&(field as u32).to_le_bytes());
            fix.extend_from_slice(&(name.len() as u32).to_le_bytes());
            fix.extend_from_slice(name.as_bytes());
            nfix += 1;
        }
    }
    out.extend_from_slice(&nfix.to_le_bytes());
    out.extend_from_slice(&fix);
    out.extend_from_slice(std::slice::from_raw_parts(buffer, valid));
    use std::io::Write;
    if file.write_all(&out).is_ok() {
        *budget -= valid;
    } else {
        *d = None;
    }
}

pub(crate) unsafe fn completed_inner(
    ctx: cudarc::driver::sys::CUcontext,
    stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let Some(c) = COLLECTOR.get() else {
        libc::free(buffer as *mut c_void);
        return;
    };
    let mut out = Decodedbuf::default();
    {
        let mut q = c.queue.lock().unwrap_or_else(|e| e.into_inner());
        out.ops = q.free.pop().unwrap_or_default();
    }
    out.ops.clear();
    if valid > 0 && !FORKED.load(Relaxed) {
        let mut names = c.kernel_names.lock().unwrap_or_else(|e| e.into_inner());
        let next = || {
            let mut rec: *mut cu::CUpti_Activity = std::ptr::null_mut();
            std::iter::from_fn(move || {
                (cu::cuptiActivityGetNextRecord(buffer, valid, &mut rec)
                    == cu::CUptiResult::CUPTI_SUCCESS)
                    .then_some(rec as *const u8)
            })
        };
        if c.dump.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            let recs: Vec<*const u8> = next().collect();
            dump_buffer(c, buffer, valid, &recs);
        }
        decode_records(c, &mut names, next(), &mut out);
    }
    let mut dropped: usize = 0;
    if cu::cuptiActivityGetNumDroppedRecords(ctx, stream, &mut dropped)
        == cu::CUptiResult::CUPTI_SUCCESS
        && dropped > 0
    {
        c.cupti_dropped.fetch_add(dropped as u64, Relaxed);
    }
    release_buffer(c, buffer);
    c.last_completed_ms
        .store(c.started.elapsed().as_millis() as u64, Relaxed);
    let oldest_end = out.oldest_end;
    for (tag, bytes, records) in [
        (w::TAG_OPS, out.ops, out.n_ops),
        (w::TAG_APIS, out.syncs, out.n_syncs),
    ] {
        if records == 0 {
            continue;
        }
        let batch = Batch {
            tag,
            bytes,
            records,
            oldest_end,
        };
        let mut q = c.queue.lock().unwrap_or_else(|e| e.into_inner());
        let queued = enqueue(&mut q, c.active.load(Relaxed), batch, QUEUE_CAP);
        drop(q);
        if queued {
            c.wake.notify_one();
        } else {
            c.count_drop(records as u64);
        }
    }
}

//! Python frames without the GIL: a one-time calibration (as a CPython pending call) finds
//! the interpreter's structure offsets, after which the launching thread's frames are read
//! directly. The pending call itself, which sets `LAYOUT` from what is found here, is
//! `pycalib`'s.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::OnceLock;

use gaptop_pystack::memory::LastiFn;
use gaptop_pystack::{Instr, Layout, Memory, Process};

// PyTorch releases the GIL before it launches a kernel, so the launching thread cannot use the
// CPython API at that moment. Its own frames are frozen while it is inside the launch, though,
// and can be read directly, the way out-of-process samplers do. The struct offsets are not
// hard-coded: a one-time calibration runs as a pending call (GIL held, main thread) and finds
// them by comparing raw memory with what the CPython API returns, reading memory only through
// a checked read. Walking starts only once every offset is confirmed; otherwise launches simply
// carry no Python stack.

pub(crate) type FnPtr = unsafe extern "C" fn() -> *mut c_void;
pub(crate) type FnPtrPtr = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
pub(crate) type FnPtrInt = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(crate) type FnDec = unsafe extern "C" fn(*mut c_void);
pub(crate) type FnAttr = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
pub(crate) type FnUtf8 = unsafe extern "C" fn(*mut c_void, *mut isize) -> *const c_char;
pub(crate) type FnAddr2Line = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
pub(crate) type FnPending =
    unsafe extern "C" fn(unsafe extern "C" fn(*mut c_void) -> c_int, *mut c_void) -> c_int;

/// The process's symbol `name`, as a `T` (None where no loaded object has it).
///
/// # Safety
/// `T` must be a function pointer type with the symbol's C signature (or, for data, a
/// pointer-sized type the symbol's address may be read as).
pub(crate) unsafe fn sym<T: Copy>(name: &CStr) -> Option<T> {
    // SAFETY: a lookup by a NUL-terminated name.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    if p.is_null() {
        None
    } else {
        // SAFETY: `T` is pointer-sized and has the symbol's signature (the contract above).
        Some(unsafe { std::mem::transmute_copy::<*mut c_void, T>(&p) })
    }
}

/// What calibration found: the frames' layout (`gaptop_pystack::Layout`; its `instr` is
/// `Api` where the interpreter has `PyUnstable_InterpreterFrame_GetLasti`), and the functions
/// the walk may call without the GIL.
#[derive(Clone, Copy)]
pub(crate) struct Calibrated {
    pub(crate) frames: Layout,
    pub(crate) this_tstate: FnPtr,
    /// `PyUnstable_InterpreterFrame_GetLasti`, for `Instr::Api`.
    pub(crate) lasti: Option<LastiFn>,
    pub(crate) addr2line: Option<FnAddr2Line>,
}

pub(crate) static LAYOUT: OnceLock<Calibrated> = OnceLock::new();

/// Reads 8 bytes from `addr` without risking a fault (process_vm_readv on ourselves).
pub(crate) fn checked_read(addr: usize) -> Option<usize> {
    if !addr.is_multiple_of(8) {
        return None;
    }
    Process::current().word(addr)
}

/// Finds the frame layout from the running frame and its caller.
///
/// # Safety
/// Call with the GIL held, from a thread running Python code.
pub(crate) unsafe fn calibrate_inner() -> Result<Calibrated, &'static str> {
    type FnVoid = unsafe extern "C" fn();
    // SAFETY: each symbol is taken at the type of its declaration in CPython's C API (the
    // type objects below only by address, which is only compared).
    let (this_tstate, get_frame, frame_code, frame_back, lineno) = unsafe {
        (
            sym::<FnPtr>(c"PyGILState_GetThisThreadState")
                .ok_or("no PyGILState_GetThisThreadState")?,
            sym::<FnPtr>(c"PyEval_GetFrame").ok_or("no PyEval_GetFrame")?,
            sym::<FnPtrPtr>(c"PyFrame_GetCode").ok_or("no PyFrame_GetCode")?,
            sym::<FnPtrPtr>(c"PyFrame_GetBack").ok_or("no PyFrame_GetBack")?,
            sym::<FnPtrInt>(c"PyFrame_GetLineNumber").ok_or("no PyFrame_GetLineNumber")?,
        )
    };
    // SAFETY: as above.
    let (decref, getattr, utf8, err_clear) = unsafe {
        (
            sym::<FnDec>(c"Py_DecRef").ok_or("no Py_DecRef")?,
            sym::<FnAttr>(c"PyObject_GetAttrString").ok_or("no PyObject_GetAttrString")?,
            sym::<FnUtf8>(c"PyUnicode_AsUTF8AndSize").ok_or("no PyUnicode_AsUTF8AndSize")?,
            sym::<FnVoid>(c"PyErr_Clear").ok_or("no PyErr_Clear")?,
        )
    };
    // SAFETY: as above.
    let (code_type, unicode_type) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, c"PyCode_Type".as_ptr()) as usize,
            libc::dlsym(libc::RTLD_DEFAULT, c"PyUnicode_Type".as_ptr()) as usize,
        )
    };
    if code_type == 0 || unicode_type == 0 {
        return Err("no PyCode_Type");
    }
    // SAFETY: as above. `Py_None` is this object in every version read; 0 where the symbol is
    // not exported, and the walk then ends at a 3.13 entry frame as before.
    let none_object =
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_Py_NoneStruct".as_ptr()) as usize };
    // SAFETY: as above.
    let (lasti, addr2line) = unsafe {
        (
            sym::<LastiFn>(c"PyUnstable_InterpreterFrame_GetLasti"),
            sym::<FnAddr2Line>(c"PyCode_Addr2Line"),
        )
    };
    // The frame layouts to try, (code, previous) offsets: 3.10's frame objects, 3.11's and
    // 3.12's interpreter frames. The version picks one when it is known: with no caller frame
    // to check against, two layouts could both seem to fit.
    let minor = python_minor();
    let layouts: &[(usize, usize)] = match minor {
        Some(m) if m <= 10 => &[(32, 24)],
        Some(11) => &[(32, 48)],
        Some(_) => &[(0, 8)],
        None => &[(0, 8), (32, 48), (32, 24)],
    };
    // SAFETY: the GIL is held and Python code is running (the contract above), so these are
    // valid calls: the thread state, its running frame (borrowed), that frame's code and
    // caller. Each new reference is given back once; the code objects stay alive through
    // their frames, which outlive this call.
    let (ts, frame, code, back_code, back_line) = unsafe {
        let ts = this_tstate() as usize;
        let frame = get_frame();
        if ts == 0 || frame.is_null() {
            return Err("no running Python frame to calibrate on");
        }
        let code = frame_code(frame) as usize;
        decref(code as *mut c_void);
        let back = frame_back(frame);
        let (back_code, back_line) = if back.is_null() {
            (0, 0)
        } else {
            let c = frame_code(back) as usize;
            let line = lineno(back);
            decref(c as *mut c_void);
            decref(back);
            (c, line)
        };
        (ts, frame, code, back_code, back_line)
    };
    // The interpreter frame: tstate -> (cframe ->) frame, whose code field is `code`, and whose
    // `previous` chain reaches the caller's code within a few (shim) steps.
    let mut found = None;
    'search: for ts_off in (0..=1024).step_by(8) {
        let Some(p) = checked_read(ts + ts_off) else {
            continue;
        };
        for indirect in [Some(0usize), Some(8), None] {
            let f = match indirect {
                Some(o) => match checked_read(p + o) {
                    Some(f) => f,
                    None => continue,
                },
                None => p,
            };
            for &(code_off, prev_off) in layouts {
                if checked_read(f + code_off) != Some(code) {
                    continue;
                }
                if back_code != 0 && caller_frame(f, code_off, prev_off, back_code).is_none() {
                    continue;
                }
                found = Some((ts_off, indirect, f, code_off, prev_off));
                break 'search;
            }
        }
    }
    let (ts_off, indirect, iframe, code_off, prev_off) =
        found.ok_or("frame layout not recognized")?;
    // Code object fields, found by identity with the attribute values.
    // co_name and co_qualname may be the same object (module-level code), so collect every
    // offset that holds the value and keep the qualname's that is not the name's.
    let fields = |name: &CStr| -> Result<(Vec<usize>, usize), &'static str> {
        // SAFETY: the GIL is held; `code` is a live code object and `name` NUL-terminated. The
        // new reference is given back at once: the code object keeps the value alive.
        let v = unsafe {
            let v = getattr(code as *mut c_void, name.as_ptr()) as usize;
            if v == 0 {
                err_clear();
                return Err("code attribute missing");
            }
            decref(v as *mut c_void);
            v
        };
        let offs: Vec<usize> = (16..=512)
            .step_by(8)
            .filter(|off| checked_read(code + off) == Some(v))
            .collect();
        if offs.is_empty() {
            return Err("code layout not recognized");
        }
        Ok((offs, v))
    };
    let (file_offs, fname) = fields(c"co_filename")?;
    let filename_off = file_offs[0];
    let (name_offs, _) = fields(c"co_name")?;
    let name_off = name_offs[0];
    let qualname_off = match fields(c"co_qualname") {
        Ok((q, _)) => q
            .iter()
            .copied()
            .find(|&o| o != name_off)
            .unwrap_or(name_off),
        Err(_) => name_off,
    };
    // Where an ASCII string keeps its bytes.
    let mut n: isize = 0;
    // SAFETY: the GIL is held; `fname` is the code object's file name, a str it keeps alive.
    // CPython returns its UTF-8 bytes, `n` of them, which live as long as the str.
    let want = unsafe {
        let s = utf8(fname as *mut c_void, &mut n);
        if s.is_null() || n <= 0 {
            err_clear();
            return Err("cannot read a file name");
        }
        std::slice::from_raw_parts(s as *const u8, n as usize)
    };
    let mut ascii_data_off = 0;
    for off in (24..=128).step_by(8) {
        if checked_bytes(fname + off, want.len()).is_some_and(|buf| buf == want) {
            ascii_data_off = off;
            break;
        }
    }
    if ascii_data_off == 0 {
        return Err("string layout not recognized");
    }
    if let (Some(l), Some(a)) = (lasti, addr2line) {
        // SAFETY: the GIL is held; `iframe` is the running frame's interpreter frame (found
        // above), `code` its code object, `frame` the running frame.
        if unsafe { a(code as *mut c_void, l(iframe as *mut c_void)) != lineno(frame) } {
            return Err("line numbers do not match");
        }
    }
    let instr = match (lasti, addr2line) {
        (Some(_), _) => Instr::Api,
        (None, Some(a)) => {
            // The caller's frame (past any shim frames), to confirm on a second frame what
            // the first one suggests.
            let back_frame = (back_code != 0)
                .then(|| caller_frame(iframe, code_off, prev_off, back_code))
                .flatten()
                .map(|g| (g, back_code, back_line));
            // SAFETY: the GIL is held; `frame` is the running frame.
            let here = (iframe, code, unsafe { lineno(frame) });
            let taken = [code_off, prev_off];
            // SAFETY: the GIL is held; `code` is the running frame's live code object, the
            // calibration frames are live (this thread is running this call) and `a` is
            // PyCode_Addr2Line; the CPython functions passed are those found above.
            match unsafe { code_bytes(getattr, err_clear, decref, code) } {
                Some(b) => {
                    // 3.11 on: a pointer; 3.10: an index; 3.9: an offset in bytes.
                    let kind = match minor {
                        Some(m) if m <= 9 => Some(1),
                        Some(10) => Some(2),
                        _ => None,
                    };
                    // SAFETY: as just above.
                    unsafe { find_lines(kind, a, &b, (here, back_frame), &taken) }
                }
                None => Instr::Unknown,
            }
        }
        (None, None) => Instr::Unknown,
    };
    Ok(Calibrated {
        frames: Layout {
            ts_frame: ts_off,
            ts_frame_indirect: indirect,
            frame_code: code_off,
            frame_prev: prev_off,
            instr,
            code_type,
            unicode_type,
            none_object,
            code_filename: filename_off,
            code_qualname: qualname_off,
            str_ascii_data: ascii_data_off,
        },
        this_tstate,
        lasti,
        addr2line,
    })
}

/// The interpreter frame of the caller of frame `f`, which runs `back_code`: the first frame
/// with that code within a few `previous` steps (past the interpreter's shim frames).
pub(crate) fn caller_frame(
    f: usize,
    code_off: usize,
    prev_off: usize,
    back_code: usize,
) -> Option<usize> {
    let mut g = f;
    for _ in 0..4 {
        g = match checked_read(g + prev_off) {
            Some(x) if x != 0 => x,
            _ => return None,
        };
        if checked_read(g + code_off) == Some(back_code) {
            return Some(g);
        }
    }
    None
}

/// A code object's `co_code` (its bytecode as Python shows it), copied.
///
/// # Safety
/// The GIL must be held; `code` must be a live code object and the functions CPython's
/// `PyObject_GetAttrString`, `PyErr_Clear` and `Py_DecRef`.
unsafe fn code_bytes(
    getattr: FnAttr,
    err_clear: unsafe extern "C" fn(),
    decref: FnDec,
    code: usize,
) -> Option<Vec<u8>> {
    type FnSize = unsafe extern "C" fn(*mut c_void) -> isize;
    type FnData = unsafe extern "C" fn(*mut c_void) -> *const u8;
    // SAFETY: both taken at their C API declarations' types.
    let (size, data) = unsafe {
        (
            sym::<FnSize>(c"PyBytes_Size")?,
            sym::<FnData>(c"PyBytes_AsString")?,
        )
    };
    // SAFETY: the contract above: GIL held, a live code object. `co_code` is a new reference
    // to a bytes object, whose `n` bytes at `p` are copied before it is given back.
    unsafe {
        let b = getattr(code as *mut c_void, c"co_code".as_ptr());
        if b.is_null() {
            err_clear();
            return None;
        }
        let (n, p) = (size(b), data(b));
        let out =
            (n > 0 && !p.is_null()).then(|| std::slice::from_raw_parts(p, n as usize).to_vec());
        if out.is_none() {
            err_clear();
        }
        decref(b);
        out
    }
}

/// Reads `n` bytes at `addr` without risking a fault.
fn checked_bytes(addr: usize, n: usize) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; n];
    Process::current().read(addr, &mut buf).then_some(buf)
}

/// Whether `live` (a code object's running bytecode, which 3.11 specializes in place and whose
/// inline caches it fills) is `shown` (`co_code`): every real instruction's argument agrees.
/// Caches (opcode 0 in `co_code`) and the opcodes themselves may differ.
fn same_bytecode(shown: &[u8], live: &[u8]) -> bool {
    let mut compared = 0;
    for (s, l) in shown.chunks_exact(2).zip(live.chunks_exact(2)) {
        if s[0] != 0 {
            if s[1] != l[1] {
                return false;
            }
            compared += 1;
        }
    }
    compared >= 3
}

/// A calibration frame: the frame, its code object and its line as the CPython API gives it.
type Known = (usize, usize, c_int);

/// The first offset, of those not `taken`, at which `lasti` (the byte offset `addr2line` takes,
/// as read from a frame at that offset) gives `frame` its known line, and `back` too when there
/// is one. Offsets at or past `limit` do not count for `frame`.
///
/// # Safety
/// The GIL must be held, `addr2line` must be `PyCode_Addr2Line` and the code objects of
/// `frame` and `back` live.
unsafe fn first_fitting(
    addr2line: FnAddr2Line,
    offsets: impl Iterator<Item = usize>,
    taken: &[usize],
    (frame, back): (Known, Option<Known>),
    limit: usize,
    lasti: impl Fn(usize, usize, usize) -> Option<usize>,
) -> Option<usize> {
    let fits = |(f, code, line): Known, fo: usize, limit: usize| {
        lasti(f, code, fo).is_some_and(|b| {
            // SAFETY: the contract above; PyCode_Addr2Line maps any offset to a line or -1.
            b < limit && unsafe { addr2line(code as *mut c_void, b as c_int) } == line
        })
    };
    offsets
        .filter(|o| !taken.contains(o))
        .find(|&fo| fits(frame, fo, limit) && back.is_none_or(|b| fits(b, fo, 1 << 24)))
}

/// Finds where a frame keeps its current instruction, for interpreters without
/// `PyUnstable_InterpreterFrame_GetLasti`. 3.11 (`unit` None): an instruction pointer into the
/// bytecode, which starts where `co_code`'s arguments are found inside the code object; 3.10
/// and 3.9: an int field holding the instruction's index, in units of `unit` bytes (3.10's 2,
/// 3.9's 1). Either way, the frame field that gives each calibration frame its known line.
/// `taken` are frame offsets known to hold something else.
///
/// # Safety
/// As `first_fitting`.
unsafe fn find_lines(
    unit: Option<usize>,
    addr2line: FnAddr2Line,
    bytecode: &[u8],
    known: (Known, Option<Known>),
    taken: &[usize],
) -> Instr {
    let limit = bytecode.len();
    if let Some(unit) = unit {
        let index = |f: usize, _code: usize, fo: usize| {
            let word = checked_read((f + fo) & !7)?;
            let v = (word >> (8 * ((f + fo) & 7))) as u32 as i32;
            (v >= 0).then(|| v as usize * unit)
        };
        // SAFETY: this function's contract, which is `first_fitting`'s.
        return unsafe {
            first_fitting(addr2line, (40..=160).step_by(4), taken, known, limit, index)
        }
        .map_or(Instr::Unknown, |frame_off| match unit {
            1 => Instr::Offset { frame_off },
            _ => Instr::Index { frame_off },
        });
    }
    let (_, code, _) = known.0;
    let probe = limit.min(128) & !1;
    let Some(cs) = (48..=512).step_by(2).find(|&cs| {
        checked_bytes(code + cs, probe).is_some_and(|live| same_bytecode(&bytecode[..probe], &live))
    }) else {
        return Instr::Unknown;
    };
    let instr = |f: usize, code: usize, fo: usize| {
        let p = checked_read(f + fo)?;
        let start = code + cs;
        (p >= start && (p - start).is_multiple_of(2)).then(|| p - start)
    };
    // SAFETY: this function's contract, which is `first_fitting`'s.
    unsafe { first_fitting(addr2line, (0..=96).step_by(8), taken, known, limit, instr) }.map_or(
        Instr::Unknown,
        |fo| Instr::Pointer {
            frame_off: fo,
            code_off: cs,
        },
    )
}

/// The running interpreter's minor version (3.x), if it says.
pub(crate) fn python_minor() -> Option<u32> {
    type FnVersion = unsafe extern "C" fn() -> *const c_char;
    // SAFETY: taken at its C API declaration's type; Py_GetVersion may be called without the
    // GIL and returns a static NUL-terminated string (or null, checked).
    let text = unsafe {
        let v = sym::<FnVersion>(c"Py_GetVersion")?();
        if v.is_null() {
            return None;
        }
        CStr::from_ptr(v)
    }
    .to_str()
    .ok()?;
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    let major: u32 = parts.next()?.parse().ok()?;
    let minor: u32 = parts.next()?.parse().ok()?;
    (major == 3).then_some(minor)
}

//! The frame layout for a reader outside the process: the viewer's CPU sampler reads the
//! program's Python frames at sample time (`gaptop_core::sources::cpu::python`), as out-of-process
//! samplers do, with `process_vm_readv`. It needs what calibration found, plus where the
//! interpreter keeps its threads and how a frame's line is found without calling CPython.
//! Once calibration has run (GIL held), this writes them as `key value` lines into
//! `python-<pid>` beside the viewer's socket, once: no further work in the program.
//!
//! What is found here, each confirmed against what the CPython API returns:
//! - the interpreter (`PyInterpreterState_Head`) and where it keeps its first thread state:
//!   the offset `PyInterpreterState_ThreadHead` reads (its machine code, one load, decoded),
//!   confirmed by the value there; else the one word of the interpreter's first 16 KiB that
//!   holds the head (3.13 keeps it past 7 KiB, and a word before it, the thread state that
//!   handles pending calls, holds the same while calibration runs as one);
//! - a state's `next` (the word after `prev`, checked by the `interp` field that follows) and
//!   its native thread id: after `thread_id` (which is `pthread_self()`) from 3.11
//!   (`native_thread_id`); on 3.9 and 3.10, which keep none, in the thread's `struct pthread`
//!   (which `thread_id` points to): the one int of its first 2 KiB that is this thread's
//!   `gettid()`, at the same offset in a thread started for the purpose;
//! - where a frame's current instruction is: a pointer into the code object's bytecode (3.11's
//!   and 3.13's are found by calibration already; 3.12's from
//!   `PyUnstable_InterpreterFrame_GetLasti` on the running frame and its caller), or 3.10's
//!   index and 3.9's offset, an int in the frame object (found by calibration too);
//! - a code object's line table (`co_linetable`, 3.9's `co_lnotab`; by identity) and
//!   `co_firstlineno` (by value, on the running code, its caller's, and two empty code objects
//!   made with unlikely first lines), and where a bytes object keeps its size and bytes;
//! - the GIL ([`find_gil`]): the struct, in `_PyRuntime` (to 3.11) or the interpreter (3.12
//!   on), that reads as held by this thread, with a switch interval, as the version's layout
//!   (`gaptop_pystack::gil`) has it.

use std::ffi::c_void;

use gaptop_pystack::{Instr, LineFields, Memory, ProcessLayout, Threads, TidAt};

use crate::pyframes::{
    caller_frame, checked_read, python_minor, sym, Calibrated, FnAttr, FnDec, FnPtr, FnPtrPtr,
};

/// The remote layout, as its published text (`gaptop_pystack::ProcessLayout::to_text`).
///
/// # Safety
/// Call with the GIL held, from a thread running Python code, after `c` was calibrated.
pub(crate) unsafe fn remote_layout(c: &Calibrated) -> Result<String, &'static str> {
    let l = &c.frames;
    type FnLong = unsafe extern "C" fn(*mut c_void) -> std::ffi::c_long;
    type FnVoid = unsafe extern "C" fn();
    type FnNewEmpty = unsafe extern "C" fn(
        *const std::ffi::c_char,
        *const std::ffi::c_char,
        std::ffi::c_int,
    ) -> *mut c_void;
    // SAFETY: each symbol is taken at its C API declaration's type.
    let (interp_head, thread_head, get_frame, frame_code, frame_back, getattr, decref) = unsafe {
        (
            sym::<FnPtr>(c"PyInterpreterState_Head").ok_or("no PyInterpreterState_Head")?,
            sym::<FnPtrPtr>(c"PyInterpreterState_ThreadHead")
                .ok_or("no PyInterpreterState_ThreadHead")?,
            sym::<FnPtr>(c"PyEval_GetFrame").ok_or("no PyEval_GetFrame")?,
            sym::<FnPtrPtr>(c"PyFrame_GetCode").ok_or("no PyFrame_GetCode")?,
            sym::<FnPtrPtr>(c"PyFrame_GetBack").ok_or("no PyFrame_GetBack")?,
            sym::<FnAttr>(c"PyObject_GetAttrString").ok_or("no PyObject_GetAttrString")?,
            sym::<FnDec>(c"Py_DecRef").ok_or("no Py_DecRef")?,
        )
    };
    // SAFETY: as above.
    let (as_long, err_clear, bytes_data, new_empty) = unsafe {
        (
            sym::<FnLong>(c"PyLong_AsLong").ok_or("no PyLong_AsLong")?,
            sym::<FnVoid>(c"PyErr_Clear").ok_or("no PyErr_Clear")?,
            sym::<FnPtrPtr>(c"PyBytes_AsString").ok_or("no PyBytes_AsString")?,
            sym::<FnNewEmpty>(c"PyCode_NewEmpty").ok_or("no PyCode_NewEmpty")?,
        )
    };
    // SAFETY: the GIL is held (the contract above): the interpreter, this thread's state and
    // the interpreter's first thread state are live.
    let (interp, ts, head) = unsafe {
        let interp = interp_head() as usize;
        (
            interp,
            (c.this_tstate)() as usize,
            thread_head(interp as *mut c_void) as usize,
        )
    };
    if interp == 0 || ts == 0 || head == 0 {
        return Err("no interpreter or thread state");
    }
    let threads_head = threads_head(thread_head as usize, interp, head)?;
    // PyThreadState starts with prev, next, interp (3.9 to 3.13).
    if checked_read(ts + 16) != Some(interp) {
        return Err("thread state layout not recognized");
    }
    let tid = thread_tid(ts)?;
    // The running frame and its caller, as interpreter frames (the collector's walk) and as
    // the API gives their code objects.
    let mut f = checked_read(ts + l.ts_frame).ok_or("no frame")?;
    if let Some(o) = l.ts_frame_indirect {
        f = checked_read(f + o).ok_or("no frame")?;
    }
    // SAFETY: the GIL is held and Python code is running: the frame and its caller are live;
    // each new reference is given back, the code objects staying alive through their frames.
    let (code, back_code) = unsafe {
        let frame = get_frame();
        if frame.is_null() {
            return Err("no running frame");
        }
        let code = frame_code(frame) as usize;
        decref(code as *mut c_void);
        let back = frame_back(frame);
        let back_code = if back.is_null() {
            0
        } else {
            let c = frame_code(back) as usize;
            decref(c as *mut c_void);
            decref(back);
            c
        };
        (code, back_code)
    };
    // The API's frame is the innermost complete one: the thread's own may be a shim or entry
    // frame above it (3.12's, 3.13's, where C called back into Python), a few steps up.
    if checked_read(f + l.frame_code) != Some(code) {
        f = caller_frame(f, l.frame_code, l.frame_prev, code)
            .ok_or("the running frame is not where calibration found it")?;
    }
    let back_frame = caller_frame(f, l.frame_code, l.frame_prev, back_code);
    // A code object's attribute, as a new reference given back at once (the code keeps it).
    let attr = |c: usize, name: &std::ffi::CStr| -> usize {
        // SAFETY: the GIL is held; `c` is a live code object, `name` NUL-terminated.
        unsafe {
            let v = getattr(c as *mut c_void, name.as_ptr()) as usize;
            if v == 0 {
                err_clear();
            } else {
                decref(v as *mut c_void);
            }
            v
        }
    };
    // Where a frame's instruction is, for 3.12 (whose calibration leaves it to this): the word
    // of the frame that points into its code's bytecode at `PyUnstable_InterpreterFrame_GetLasti`.
    // With a caller, the offset that reads so on both frames, the bytecode's place in a code
    // object the same for both; without one (calibration ran at a script's top level), on the
    // running frame alone, the bytecode's place taken from the code type's `__basicsize__`
    // (`offsetof(PyCodeObject, co_code_adaptive)` from 3.11) and matched exactly.
    let instr = match (l.instr, c.lasti) {
        (Instr::Pointer { .. } | Instr::Index { .. } | Instr::Offset { .. }, _) => Some(l.instr),
        (Instr::Api, Some(lasti)) => match back_frame {
            Some(b) => {
                // SAFETY: `lasti` is PyUnstable_InterpreterFrame_GetLasti; both frames are live.
                let (la, lb) = unsafe { (lasti(f as *mut c_void), lasti(b as *mut c_void)) };
                (0..=96).step_by(8).find_map(|fo| {
                    let pa = checked_read(f + fo)?;
                    let pb = checked_read(b + fo)?;
                    let cs = pa.checked_sub(code + la as usize)?;
                    ((48..=512).contains(&cs)
                        && pb.checked_sub(back_code + lb as usize) == Some(cs))
                    .then_some(Instr::Pointer {
                        frame_off: fo,
                        code_off: cs,
                    })
                })
            }
            None => {
                // SAFETY: as above; the running frame is live.
                let la = unsafe { lasti(f as *mut c_void) };
                let ty = attr(code, c"__class__");
                let size = if ty != 0 {
                    attr(ty, c"__basicsize__")
                } else {
                    0
                };
                // SAFETY: a live int object (a small one, which the interpreter keeps).
                let cs = (size != 0).then(|| unsafe { as_long(size as *mut c_void) });
                cs.filter(|cs| (48..=512).contains(cs) && la >= 0)
                    .and_then(|cs| {
                        let at = code + cs as usize + la as usize;
                        (0..=96)
                            .step_by(8)
                            .find(|&fo| checked_read(f + fo) == Some(at))
                            .map(|fo| Instr::Pointer {
                                frame_off: fo,
                                code_off: cs as usize,
                            })
                    })
            }
        },
        _ => None,
    };
    let minor = python_minor();
    let table = attr(
        code,
        match minor {
            Some(m) if m <= 9 => c"co_lnotab",
            _ => c"co_linetable",
        },
    );
    let linetable = (16..=512)
        .step_by(8)
        .find(|o| table != 0 && checked_read(code + o) == Some(table));
    // SAFETY: `table` is a live bytes object (its code object holds it).
    let bytes_at = (table != 0)
        .then(|| unsafe { bytes_data(table as *mut c_void) } as usize)
        .and_then(|p| p.checked_sub(table));
    let first = |c: usize| {
        let v = attr(c, c"co_firstlineno");
        // SAFETY: a live int object (the GIL is held).
        (v != 0).then(|| unsafe { as_long(v as *mut c_void) })
    };
    let (fa, fb) = (
        first(code),
        (back_code != 0).then(|| first(back_code)).flatten(),
    );
    let int_at = |c: usize, o: usize| {
        let w = checked_read((c + o) & !7)?;
        Some((w >> (8 * ((c + o) & 7))) as u32 as i32 as i64)
    };
    // Two empty code objects made for the purpose, whose first lines are unlike any other
    // field's value: the running code's first line alone (1, at module level, with no caller)
    // may be another field's too.
    let probes: Vec<(usize, i64)> = [40_961, 70_687]
        .into_iter()
        .filter_map(|n| {
            // SAFETY: the GIL is held; PyCode_NewEmpty takes NUL-terminated names and returns
            // a new reference (given back below) or null, with an error then cleared.
            let p = unsafe { new_empty(c"<gaptop>".as_ptr(), c"<gaptop>".as_ptr(), n) } as usize;
            if p == 0 {
                // SAFETY: as above.
                unsafe { err_clear() };
            }
            (p != 0).then_some((p, n as i64))
        })
        .collect();
    let firstlineno = fa.filter(|_| probes.len() == 2).and_then(|fa| {
        (16..256).step_by(4).find(|&o| {
            int_at(code, o) == Some(fa)
                && fb.is_none_or(|b| int_at(back_code, o) == Some(b))
                && probes.iter().all(|&(p, n)| int_at(p, o) == Some(n))
        })
    });
    for (p, _) in probes {
        // SAFETY: the GIL is held; the new reference made above, given back once.
        unsafe { decref(p as *mut c_void) };
    }
    let lines = match (linetable, firstlineno, bytes_at) {
        (Some(linetable), Some(firstlineno), Some(bytes_data)) => Some(LineFields {
            linetable,
            firstlineno,
            bytes_size: 16,
            bytes_data,
        }),
        _ => None,
    };
    let published = ProcessLayout {
        minor,
        threads: Threads {
            interp,
            head: threads_head,
            next: 8,
            tid,
        },
        frames: gaptop_pystack::Layout {
            instr: instr.unwrap_or(Instr::Unknown),
            ..*l
        },
        lines,
        gil: minor.and_then(|m| find_gil(m, interp, ts)),
    };
    Ok(published.to_text())
}

/// Where the interpreter `interp` keeps its first thread state, `head` now: the offset that
/// `PyInterpreterState_ThreadHead` (at `thread_head`) reads, where its code is one load
/// (x86-64, aarch64) and that offset holds `head`; else the one word of the first 16 KiB that
/// holds it (read a page at a time). Two words holding it, and no code to tell which, is
/// refused: a reader of the wrong one would list no threads, or one.
fn threads_head(thread_head: usize, interp: usize, head: usize) -> Result<usize, &'static str> {
    let mut code = [0u8; 16];
    let mem = gaptop_pystack::Process::current();
    if mem.read(thread_head, &mut code) {
        if let Some(o) = load_offset(&code).filter(|o| checked_read(interp + o) == Some(head)) {
            return Ok(o);
        }
    }
    const PAGE: usize = 4096;
    let mut page = vec![0u8; PAGE];
    let mut found = Vec::new();
    for at in (0..4 * PAGE).step_by(PAGE) {
        if !mem.read(interp + at, &mut page) {
            break;
        }
        found.extend(
            page.chunks_exact(8)
                .enumerate()
                .filter(|(_, w)| usize::from_ne_bytes((*w).try_into().unwrap()) == head)
                .map(|(i, _)| at + 8 * i),
        );
    }
    match found[..] {
        [o] => Ok(o),
        [] => Err("interpreter layout not recognized"),
        _ => Err("the interpreter's thread list is ambiguous"),
    }
}

/// The offset a function loads its result from, its first argument being the base, where its
/// machine code is that one load and a return: x86-64's `mov rax, [rdi + d]; ret` (after an
/// `endbr64`, if any) with an 8- or 32-bit displacement, aarch64's `ldr x0, [x0, #d]; ret`.
fn load_offset(code: &[u8]) -> Option<usize> {
    if cfg!(target_arch = "x86_64") {
        let c = code.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa]).unwrap_or(code);
        match c {
            [0x48, 0x8b, 0x47, d, 0xc3, ..] => usize::try_from(*d as i8).ok(),
            [0x48, 0x8b, 0x87, a, b, c, d, 0xc3, ..] => {
                usize::try_from(i32::from_le_bytes([*a, *b, *c, *d])).ok()
            }
            _ => None,
        }
    } else if cfg!(target_arch = "aarch64") {
        let word = |i: usize| u32::from_le_bytes(code[4 * i..4 * i + 4].try_into().unwrap());
        // LDR (immediate, unsigned offset), 64-bit, Rn = Rt = x0; then RET (x30).
        let (ldr, ret) = (word(0), word(1));
        (ldr & 0xffc0_03ff == 0xf940_0000 && ret == 0xd65f_03c0)
            .then(|| ((ldr >> 10) & 0xfff) as usize * 8)
    } else {
        None
    }
}

/// Where a thread state keeps what names its thread natively, from the calling thread's
/// state `ts`: its `native_thread_id` (3.11 on: right after `thread_id`, which is
/// `pthread_self()`), else `thread_id` and the offset of the thread id in the C library's
/// `struct pthread` ([`pthread_tid`]).
fn thread_tid(ts: usize) -> Result<TidAt, &'static str> {
    // SAFETY: plain calls with no preconditions. gettid through syscall(2): glibc's wrapper
    // is 2.30's, and the wheel's collector links against glibc 2.17.
    let (me, tid) = unsafe {
        (
            libc::pthread_self() as usize,
            libc::syscall(libc::SYS_gettid) as usize,
        )
    };
    let thread_id = (24..1024)
        .step_by(8)
        .find(|o| checked_read(ts + o) == Some(me))
        .ok_or("thread id not found in the thread state")?;
    if checked_read(ts + thread_id + 8) == Some(tid) {
        return Ok(TidAt::State(thread_id + 8));
    }
    Ok(TidAt::Pthread {
        thread_id,
        pthread_tid: pthread_tid().ok_or("thread id not found in the thread's pthread")?,
    })
}

/// Where the C library's `struct pthread` (what `pthread_self()` points to, in glibc and musl)
/// keeps its thread's id (an int, as `gettid()` returns it): the offsets of the first 2 KiB
/// that hold it, in the calling thread and in a thread started for the purpose (whose id
/// is not the process's, which old glibc keeps beside it); exactly one must be in both. Where
/// no thread can be started, the calling thread's one offset, if it has one only.
fn pthread_tid() -> Option<usize> {
    fn hits() -> Vec<usize> {
        // SAFETY: as in `thread_tid`.
        let (me, tid) = unsafe {
            (
                libc::pthread_self() as usize,
                libc::syscall(libc::SYS_gettid) as u32,
            )
        };
        let mut b = vec![0u8; 2048];
        if me == 0 || !gaptop_pystack::Process::current().read(me, &mut b) {
            return Vec::new();
        }
        b.chunks_exact(4)
            .enumerate()
            .filter(|(_, w)| u32::from_ne_bytes((*w).try_into().unwrap()) == tid)
            .map(|(i, _)| 4 * i)
            .collect()
    }
    let here = hits();
    let there = std::thread::Builder::new()
        .name("gaptop-calib".into())
        .spawn(hits)
        .ok()
        .and_then(|h| h.join().ok());
    let both: Vec<usize> = match there {
        Some(t) => here.into_iter().filter(|o| t.contains(o)).collect(),
        None => here,
    };
    match both[..] {
        [o] => Some(o),
        _ => None,
    }
}

/// Where the GIL lies: the first struct in the first MiB of `_PyRuntime` (3.9 to 3.11 keep it
/// in `ceval`) or of the interpreter (3.12 on: `_gil`) that reads as held by thread state `ts`
/// (`gaptop_pystack::gil::held_by`: a switch interval, `ts`, locked), as it is while this
/// thread runs Python code. Read a page at a time, stopping at one that cannot be read.
pub(crate) fn find_gil(minor: u32, interp: usize, ts: usize) -> Option<usize> {
    use gaptop_pystack::{gil, Memory};
    let l = gil::layout(minor)?;
    // SAFETY: dlsym with a NUL-terminated name; the address is only read through
    // process_vm_readv, which fails where nothing is mapped.
    let runtime = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_PyRuntime".as_ptr()) } as usize;
    let mem = gaptop_pystack::Process::current();
    const PAGE: usize = 4096;
    let mut page = vec![0u8; PAGE + 32];
    for base in [runtime, interp] {
        if base == 0 {
            continue;
        }
        for at in (base..base + (1 << 20)).step_by(PAGE) {
            if !mem.read(at, &mut page) {
                break;
            }
            let word = |o: usize| usize::from_ne_bytes(page[o..o + 8].try_into().unwrap());
            let hit = (0..PAGE).step_by(8).find(|&o| {
                word(o + l.last_holder) == ts
                    && word(o + l.locked) as u32 == 1
                    && gil::held_by(&mem, at + o, &l, ts)
            });
            if let Some(o) = hit {
                return Some(at + o);
            }
        }
    }
    None
}

/// The remote layout's text, once calibration found it, or why it found none
/// (`gaptop_pystack::unavailable_text`), for each viewer that attaches later.
static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Finds the remote layout (once, at calibration) and writes it beside the viewer's socket
/// (`GAPTOP_SOCKET`'s folder, or `GAPTOP_PYTHON_LAYOUT_DIR`) when there is one already. Where it
/// cannot be found, writes why instead, which the viewer says (and the collector too, with
/// GAPTOP_VERBOSE).
///
/// # Safety
/// As [`remote_layout`].
pub(crate) unsafe fn publish(c: &Calibrated) {
    // SAFETY: this function's contract, which is `remote_layout`'s.
    match unsafe { remote_layout(c) } {
        Ok(t) => publish_text(t),
        Err(e) => {
            if std::env::var_os("GAPTOP_VERBOSE").is_some() {
                say!("python frames for CPU samples unavailable: {e}");
            }
            publish_unavailable(e);
        }
    }
}

/// Publishes why this process has no remote layout (calibration failed, or found no layout
/// that a reader outside can use): the viewer says it instead of showing samples without
/// their Python frames silently.
pub(crate) fn publish_unavailable(reason: &str) {
    publish_text(gaptop_pystack::unavailable_text(reason));
}

fn publish_text(text: String) {
    if TEXT.set(text).is_err() {
        return;
    }
    match std::env::var_os("GAPTOP_PYTHON_LAYOUT_DIR") {
        Some(d) => write_into(std::path::Path::new(&d)),
        None => {
            if let Some(s) = std::env::var_os("GAPTOP_SOCKET") {
                publish_beside(&s.to_string_lossy());
            }
        }
    }
}

/// Writes the layout (or why there is none), once calibration ran, beside the viewer's socket `socket` (an
/// attaching viewer's private folder): no CPython call, only a small file.
pub(crate) fn publish_beside(socket: &str) {
    if let Some(dir) = std::path::Path::new(socket).parent() {
        write_into(dir);
    }
}

/// `python-<pid>` in `dir`, through a temporary file renamed into place.
fn write_into(dir: &std::path::Path) {
    let Some(text) = TEXT.get() else {
        return;
    };
    let pid = std::process::id();
    let tmp = dir.join(format!(".python-{pid}.tmp"));
    let done = dir.join(format!("python-{pid}"));
    if std::fs::write(&tmp, text).is_err() || std::fs::rename(&tmp, &done).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

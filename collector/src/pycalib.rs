//! The Python frames' calibration as the program runs it: `schedule_calibration` (at start)
//! asks CPython to run `calibrate` as a pending call, which finds the frame layout
//! (`pyframes`), sets `LAYOUT` for the launch stacks' walk, and publishes the layout for the
//! viewer's CPU sampler (`pyremote`). A module of its own, above both: `pyremote` builds on
//! what `pyframes` finds, so the call that runs one and then the other cannot be in `pyframes`.

use std::ffi::{c_int, c_void};

use gaptop_pystack::Instr;

use crate::pyframes::{calibrate_inner, sym, FnPending, LAYOUT};
use crate::pyremote::publish;

/// Calibrates the Python frame layout from inside the interpreter, when it next runs.
pub(crate) fn schedule_calibration() {
    type FnInit = unsafe extern "C" fn() -> c_int;
    // SAFETY: both symbols are taken at their C API declarations' types; both may be called
    // from any thread without the GIL. `calibrate` then runs as a pending call, with the GIL
    // held and Python code running, as its contract asks.
    unsafe {
        let init: Option<FnInit> = sym(c"Py_IsInitialized");
        let pending: Option<FnPending> = sym(c"Py_AddPendingCall");
        if let (Some(init), Some(pending)) = (init, pending) {
            if init() != 0 {
                pending(calibrate, std::ptr::null_mut());
            }
        }
    }
}

/// Calibration, run by CPython as a pending call: the GIL is held and Python code is running.
///
/// # Safety
/// Call with the GIL held, from a thread running Python code.
pub(crate) unsafe extern "C" fn calibrate(_: *mut c_void) -> c_int {
    // SAFETY: the GIL is held and Python code is running (the contract above).
    let r = std::panic::catch_unwind(|| unsafe { calibrate_inner() });
    match r {
        Ok(Ok(l)) => {
            let _ = LAYOUT.set(l);
            // SAFETY: still inside the pending call: the GIL is held, Python code running.
            if std::panic::catch_unwind(|| unsafe { publish(&l) }).is_err() {
                crate::pyremote::publish_unavailable("publishing the layout failed");
            }
            if std::env::var_os("GAPTOP_VERBOSE").is_some() {
                let f = &l.frames;
                say!(
                    "python frames: tstate+{} {} code@{} prev@{} file@{} qual@{} lines {}",
                    f.ts_frame,
                    match f.ts_frame_indirect {
                        Some(o) => format!("via cframe+{o}"),
                        None => "direct".into(),
                    },
                    f.frame_code,
                    f.frame_prev,
                    f.code_filename,
                    f.code_qualname,
                    match f.instr {
                        Instr::Api => "by PyUnstable_InterpreterFrame_GetLasti".to_string(),
                        Instr::Pointer {
                            frame_off,
                            code_off,
                        } => format!("by instr@{frame_off} - code+{code_off}"),
                        Instr::Index { frame_off } => format!("by lasti@{frame_off}"),
                        Instr::Offset { frame_off } => format!("by lasti@{frame_off} (bytes)"),
                        Instr::Unknown => "unknown (functions' first lines)".to_string(),
                    }
                );
            }
        }
        Ok(Err(e)) => {
            say!("python stacks unavailable: {e}");
            crate::pyremote::publish_unavailable(&format!("calibration: {e}"));
        }
        Err(_) => {
            say!("python stacks unavailable: calibration failed");
            crate::pyremote::publish_unavailable("calibration failed");
        }
    }
    0
}

//! Self-test hooks: they let a test drive the Python stack walk without a GPU (or CUPTI: no
//! CUPTI call is made here). Call `gaptop_selftest_calibrate` with the GIL held (ctypes.PyDLL),
//! then `gaptop_selftest_stack` with it released (ctypes.CDLL), which is the state PyTorch's
//! launches are in.

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::OnceLock;

use gaptop_wire as w;

use crate::native::native_map;
use crate::pycalib::calibrate;
use crate::pyframes::LAYOUT;
use crate::state::{Collector, Parts};

static SELFTEST: OnceLock<Collector> = OnceLock::new();
static SELFTEST_NATIVE: OnceLock<Collector> = OnceLock::new();

/// Calibrates the frame layout now. Returns 1 on success.
///
/// # Safety
/// Call from Python with the GIL held.
#[no_mangle]
pub unsafe extern "C" fn gaptop_selftest_calibrate() -> c_int {
    // SAFETY: the GIL is held and Python code is running (the contract above).
    unsafe { calibrate(std::ptr::null_mut()) };
    LAYOUT.get().is_some() as c_int
}

/// Finds the GIL as calibration does (`pyremote::find_gil`): 1 where the struct that reads as
/// held by this thread was found, 0 where not, -1 where the interpreter does not say its
/// version or its thread state.
///
/// # Safety
/// Call from Python with the GIL held.
#[no_mangle]
pub unsafe extern "C" fn gaptop_selftest_gil() -> c_int {
    use crate::pyframes::{python_minor, sym, FnPtr};
    // SAFETY: each symbol at its C API declaration's type; the GIL is held (the contract
    // above), so the interpreter and this thread's state are live.
    let (interp, ts) = unsafe {
        match (
            sym::<FnPtr>(c"PyInterpreterState_Head"),
            sym::<FnPtr>(c"PyThreadState_Get"),
        ) {
            (Some(head), Some(this)) => (head() as usize, this() as usize),
            _ => return -1,
        }
    };
    match python_minor() {
        Some(minor) if ts != 0 => crate::pyremote::find_gil(minor, interp, ts).is_some() as c_int,
        _ => -1,
    }
}

/// Walks the calling thread's Python stack and writes its frames, outermost first, one a line,
/// into `out`. Returns the length written, or -1.
///
/// # Safety
/// `out` must point to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gaptop_selftest_stack(out: *mut u8, cap: usize) -> isize {
    let c = SELFTEST.get_or_init(|| Collector::new(Parts::offline(1)));
    // SAFETY: `out` and `cap` as the caller promised (the contract above).
    unsafe { selftest_write(c, out, cap) }
}

/// As `gaptop_selftest_stack`, with native frames after the Python ones (`--native`).
///
/// # Safety
/// `out` must point to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gaptop_selftest_stack_native(out: *mut u8, cap: usize) -> isize {
    let c = SELFTEST_NATIVE.get_or_init(|| {
        Collector::new(Parts {
            native: Some(native_map()),
            ..Parts::offline(1)
        })
    });
    // SAFETY: as in `gaptop_selftest_stack`.
    unsafe { selftest_write(c, out, cap) }
}

/// A wire decoder fed a hello and then `bytes`, as a viewer sees a connection.
pub(crate) fn decoder_after_hello(bytes: &[u8]) -> w::Decoder {
    let mut d = w::Decoder::new();
    let mut hello = Vec::new();
    w::encode_hello(&mut hello, &w::Hello::new(0, -1, ""));
    d.feed(&hello);
    d.feed(bytes);
    d
}

/// # Safety
/// `out` must point to `cap` writable bytes.
unsafe fn selftest_write(c: &Collector, out: *mut u8, cap: usize) -> isize {
    let mut frames = Vec::new();
    let mut native = Vec::new();
    // The self-test goes through a per-thread cache as launches do, so that the tests that
    // walk from several stacks in turn also check what the cache hands back. Two slots, so
    // that their stacks also collide in it.
    thread_local! {
        static RECENT: RefCell<[(u64, u32); 2]> = const { RefCell::new([(0, 0); 2]) };
    }
    // SAFETY: called from Python through ctypes: the thread is inside a C call, so its Python
    // frames hold still while they are walked.
    let id = RECENT
        .with(|r| unsafe { c.launch_stack(&mut frames, &mut native, &mut r.borrow_mut()[..], 0) });
    if id == 0 {
        return -1;
    }
    // Rebuild the stack from the definitions it emitted.
    let defs = c
        .names
        .defs
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let mut names = HashMap::new();
    let mut nodes = HashMap::new();
    let mut d = decoder_after_hello(&defs);
    while let Ok(Some(f)) = d.next_frame() {
        match f {
            w::Frame::Name { id, text } => {
                names.insert(id, text);
            }
            w::Frame::Stack { id, parent, frame } => {
                nodes.insert(id, (parent, frame));
            }
            _ => {}
        }
    }
    let mut lines = Vec::new();
    let mut s = id;
    while let Some(&(p, f)) = nodes.get(&s) {
        lines.push(names.get(&f).cloned().unwrap_or_default());
        s = p;
    }
    lines.reverse();
    let text = lines.join("\n");
    let n = text.len().min(cap);
    // SAFETY: `out` holds `cap` writable bytes (the contract above) and `n <= cap`; `text` is
    // a separate allocation.
    unsafe { std::ptr::copy_nonoverlapping(text.as_ptr(), out, n) };
    n as isize
}

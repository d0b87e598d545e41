//! gaptop's injected collector: loaded into the profiled process through
//! `CUDA_INJECTION64_PATH`, it turns CUPTI activity records and launch callbacks into compact
//! wire records and ships them to the viewer over a Unix socket.
//!
//! Rules it keeps, because it runs inside somebody else's program:
//! - the program never blocks on gaptop: app threads only append to their own buffer; a sender
//!   thread does all socket I/O; whatever cannot be kept is dropped and counted;
//! - only the callbacks that matter are enabled (launches, syncs, copies, waits), never whole
//!   API domains;
//! - Python stacks are walked through the CPython API and interned: each distinct stack is
//!   named once, and a launch carries only a stack id;
//! - if the viewer or CUPTI is missing, or CUPTI refuses, it says so once on stderr and stays
//!   out of the way; it never exits, never installs signal handlers and never writes to stdout.
//!
//! This crate is the only place in gaptop with `unsafe` code.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use cudarc::cupti::sys as cu;
use gaptop_wire as w;

/// Bytes of API records a thread may hold before the sender takes them (then records drop).
/// Each thread's buffer is allocated once at this size and never grows inside a callback.
const THREAD_CAP: usize = 2 << 20;
/// Bytes of encoded GPU records waiting for the sender (then batches drop).
const QUEUE_CAP: usize = 128 << 20;
/// CUPTI activity buffer size and the most buffers outstanding at once.
const BUF_SIZE: usize = 4 << 20;
const MAX_BUFFERS: usize = 48;
/// Completed activity buffers kept for reuse instead of being freed (their pages stay mapped,
/// so CUPTI does not fault in fresh ones on the launching thread).
const POOL_KEEP: usize = 8;
const MAX_DEPTH: usize = 96;
/// Native frames kept per launch (between the interpreter, or the thread's base, and CUDA).
const MAX_NATIVE: usize = 48;
/// A launch from a known (Python stack, kernel) pair reuses the native frames of the last
/// walk for that pair, and walks again every this many launches.
const NATIVE_REWALK: u32 = 64;
/// Distinct stacks and frames interned before new ones are no longer named (launches then
/// carry no stack, and are counted).
const MAX_STACKS: u32 = 1 << 20;
const SEND_PERIOD: Duration = Duration::from_millis(100);
const FLUSH_PERIOD: Duration = Duration::from_millis(200);

macro_rules! say {
    ($($t:tt)*) => {
        eprintln!("gaptop collector [pid {}]: {}", std::process::id(), format!($($t)*))
    };
}

// ------------------------------------------------------------------ CPython access
//
// PyTorch releases the GIL before it launches a kernel, so the launching thread cannot use the
// CPython API at that moment. Its own frames are frozen while it is inside the launch, though,
// and can be read directly, the way out-of-process samplers do. The struct offsets are not
// hard-coded: a one-time calibration runs as a pending call (GIL held, main thread) and finds
// them by comparing raw memory with what the CPython API returns, reading memory only through
// a checked read. Walking starts only once every offset is confirmed; otherwise launches simply
// carry no Python stack.

type FnPtr = unsafe extern "C" fn() -> *mut c_void;
type FnPtrPtr = unsafe extern "C" fn(*mut c_void) -> *mut c_void;
type FnPtrInt = unsafe extern "C" fn(*mut c_void) -> c_int;
type FnDec = unsafe extern "C" fn(*mut c_void);
type FnAttr = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;
type FnUtf8 = unsafe extern "C" fn(*mut c_void, *mut isize) -> *const c_char;
type FnAddr2Line = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;
type FnPending =
    unsafe extern "C" fn(unsafe extern "C" fn(*mut c_void) -> c_int, *mut c_void) -> c_int;

unsafe fn sym<T: Copy>(name: &CStr) -> Option<T> {
    let p = libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
    if p.is_null() {
        None
    } else {
        Some(std::mem::transmute_copy::<*mut c_void, T>(&p))
    }
}

/// Offsets found by calibration, and the functions the walk may call without the GIL.
#[derive(Clone, Copy)]
struct Layout {
    this_tstate: FnPtr,
    lasti: Option<FnPtrInt>,
    addr2line: Option<FnAddr2Line>,
    code_type: usize,
    unicode_type: usize,
    /// tstate + ts_off holds a pointer; through `indirect` more (3.12's cframe) it is the
    /// current interpreter frame.
    ts_off: usize,
    /// Offset of the current frame inside 3.11/3.12's `_PyCFrame`, when there is one.
    indirect: Option<usize>,
    code_off: usize,
    prev_off: usize,
    filename_off: usize,
    qualname_off: usize,
    /// Where a compact ASCII string's bytes start.
    ascii_data_off: usize,
}

static LAYOUT: OnceLock<Layout> = OnceLock::new();

/// Reads 8 bytes from `addr` without risking a fault (process_vm_readv on ourselves).
unsafe fn checked_read(addr: usize) -> Option<usize> {
    if addr < 4096 || !addr.is_multiple_of(8) {
        return None;
    }
    let mut v: usize = 0;
    let local = libc::iovec {
        iov_base: &mut v as *mut usize as *mut c_void,
        iov_len: 8,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: 8,
    };
    let n = libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0);
    (n == 8).then_some(v)
}

unsafe fn rd(addr: usize) -> usize {
    std::ptr::read(addr as *const usize)
}

/// Calibration, run by CPython as a pending call: the GIL is held and Python code is running.
unsafe extern "C" fn calibrate(_: *mut c_void) -> c_int {
    let r = std::panic::catch_unwind(|| unsafe { calibrate_inner() });
    match r {
        Ok(Ok(l)) => {
            let _ = LAYOUT.set(l);
            if std::env::var_os("GAPTOP_VERBOSE").is_some() {
                say!(
                    "python frames: tstate+{} {} code@{} prev@{} file@{} qual@{}",
                    l.ts_off,
                    match l.indirect {
                        Some(o) => format!("via cframe+{o}"),
                        None => "direct".into(),
                    },
                    l.code_off,
                    l.prev_off,
                    l.filename_off,
                    l.qualname_off
                );
            }
        }
        Ok(Err(e)) => say!("python stacks unavailable: {e}"),
        Err(_) => say!("python stacks unavailable: calibration failed"),
    }
    0
}

unsafe fn calibrate_inner() -> Result<Layout, &'static str> {
    let this_tstate: FnPtr =
        sym(c"PyGILState_GetThisThreadState").ok_or("no PyGILState_GetThisThreadState")?;
    let get_frame: FnPtr = sym(c"PyEval_GetFrame").ok_or("no PyEval_GetFrame")?;
    let frame_code: FnPtrPtr = sym(c"PyFrame_GetCode").ok_or("no PyFrame_GetCode")?;
    let frame_back: FnPtrPtr = sym(c"PyFrame_GetBack").ok_or("no PyFrame_GetBack")?;
    let lineno: FnPtrInt = sym(c"PyFrame_GetLineNumber").ok_or("no PyFrame_GetLineNumber")?;
    let decref: FnDec = sym(c"Py_DecRef").ok_or("no Py_DecRef")?;
    let getattr: FnAttr = sym(c"PyObject_GetAttrString").ok_or("no PyObject_GetAttrString")?;
    let utf8: FnUtf8 = sym(c"PyUnicode_AsUTF8AndSize").ok_or("no PyUnicode_AsUTF8AndSize")?;
    let err_clear: unsafe extern "C" fn() = sym(c"PyErr_Clear").ok_or("no PyErr_Clear")?;
    let code_type = libc::dlsym(libc::RTLD_DEFAULT, c"PyCode_Type".as_ptr()) as usize;
    let unicode_type = libc::dlsym(libc::RTLD_DEFAULT, c"PyUnicode_Type".as_ptr()) as usize;
    if code_type == 0 || unicode_type == 0 {
        return Err("no PyCode_Type");
    }
    let lasti: Option<FnPtrInt> = sym(c"PyUnstable_InterpreterFrame_GetLasti");
    let addr2line: Option<FnAddr2Line> = sym(c"PyCode_Addr2Line");
    let ts = this_tstate() as usize;
    let frame = get_frame();
    if ts == 0 || frame.is_null() {
        return Err("no running Python frame to calibrate on");
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
            for (code_off, prev_off) in [(0usize, 8usize), (32, 48)] {
                if checked_read(f + code_off) != Some(code) {
                    continue;
                }
                if back_code != 0 {
                    let mut g = f;
                    let mut ok = false;
                    for _ in 0..4 {
                        g = match checked_read(g + prev_off) {
                            Some(x) if x != 0 => x,
                            _ => break,
                        };
                        if checked_read(g + code_off) == Some(back_code) {
                            ok = true;
                            break;
                        }
                    }
                    if !ok {
                        continue;
                    }
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
        let v = getattr(code as *mut c_void, name.as_ptr()) as usize;
        if v == 0 {
            err_clear();
            return Err("code attribute missing");
        }
        decref(v as *mut c_void);
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
    let s = utf8(fname as *mut c_void, &mut n);
    if s.is_null() || n <= 0 {
        err_clear();
        return Err("cannot read a file name");
    }
    let want = std::slice::from_raw_parts(s as *const u8, n as usize);
    let mut ascii_data_off = 0;
    for off in (24..=128).step_by(8) {
        let mut buf = vec![0u8; want.len()];
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut c_void,
            iov_len: buf.len(),
        };
        let remote = libc::iovec {
            iov_base: (fname + off) as *mut c_void,
            iov_len: buf.len(),
        };
        if libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) == buf.len() as isize
            && buf == want
        {
            ascii_data_off = off;
            break;
        }
    }
    if ascii_data_off == 0 {
        return Err("string layout not recognized");
    }
    if let (Some(l), Some(a)) = (lasti, addr2line) {
        if a(code as *mut c_void, l(iframe as *mut c_void)) != lineno(frame) {
            return Err("line numbers do not match");
        }
    }
    Ok(Layout {
        this_tstate,
        lasti,
        addr2line,
        code_type,
        unicode_type,
        ts_off,
        indirect,
        code_off,
        prev_off,
        filename_off,
        qualname_off,
        ascii_data_off,
    })
}

/// Decodes a str object's text without the GIL (compact strings only).
unsafe fn read_str(l: &Layout, s: usize) -> String {
    if s == 0 || rd(s + 8) != l.unicode_type {
        return "?".into();
    }
    let len = rd(s + 16).min(4096);
    let state = std::ptr::read((s + 32) as *const u32);
    let kind = (state >> 2) & 7;
    let compact = (state >> 5) & 1 == 1;
    let ascii = (state >> 6) & 1 == 1;
    if !compact {
        return "?".into();
    }
    if ascii {
        let b = std::slice::from_raw_parts((s + l.ascii_data_off) as *const u8, len);
        return String::from_utf8_lossy(b).into_owned();
    }
    let data = s + l.ascii_data_off + 16;
    (0..len)
        .map(|i| {
            let cp = match kind {
                1 => *((data + i) as *const u8) as u32,
                2 => *((data + 2 * i) as *const u16) as u32,
                _ => *((data + 4 * i) as *const u32),
            };
            char::from_u32(cp).unwrap_or('?')
        })
        .collect()
}

// ------------------------------------------------------------------ shared state

/// Encoded records waiting for the sender: wire tag (ops or API calls), records, how many, and
/// the earliest end time among them (for the lag report).
struct Batch {
    tag: u8,
    bytes: Vec<u8>,
    records: usize,
    oldest_end: u64,
}

#[derive(Default)]
struct Queue {
    batches: VecDeque<Batch>,
    bytes: usize,
    free: Vec<Vec<u8>>,
}

#[derive(Default)]
struct StackCache {
    by_hash: HashMap<u64, u32>,
    nodes: HashMap<(u32, u32), u32>,
    frames: HashMap<(usize, i32), u32>,
    native: HashMap<usize, u32>,
    /// Native walks remembered per (Python stack, call site): the stack id they gave and how
    /// often the memo was used since the last walk.
    native_memo: HashMap<u64, (u32, u32)>,
    next_stack: u32,
    /// Launches that got no stack because the tables were full.
    full: u64,
}

/// What a code address belongs to, for the native walk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Region {
    /// gaptop, CUPTI and the CUDA libraries: frames above the caller, skipped.
    Plumbing,
    /// The Python interpreter: the native walk stops here (the Python frames take over).
    Interpreter,
}

/// Address ranges of the modules the native walk treats specially, found once at start.
#[derive(Default)]
struct NativeMap {
    regions: Vec<(usize, usize, Region)>,
}

impl NativeMap {
    fn region(&self, ip: usize) -> Option<Region> {
        self.regions
            .iter()
            .find(|r| r.0 <= ip && ip < r.1)
            .map(|r| r.2)
    }
}

struct Collector {
    fd: c_int,
    py_stacks: bool,
    /// Native frames at launches (`gaptop run --native`), with the module map for the walk.
    native: Option<NativeMap>,
    /// Free activity buffers for reuse (addresses), at most POOL_KEEP.
    pool: Mutex<Vec<usize>>,
    /// Name ids for synchronization records, by CUPTI synchronization type.
    sync_names: [u32; 5],
    /// Most lag (ns) seen in sends since the last stats frame.
    lag_ns: AtomicU64,
    /// Time spent inside the API callback and calls to it (GAPTOP_VERBOSE only).
    timing: bool,
    cb_ns: AtomicU64,
    cb_calls: AtomicU64,
    /// Raw CUPTI buffers written here for replay tests (GAPTOP_DUMP), with a byte budget.
    dump: Mutex<Option<(std::fs::File, usize)>>,
    next_name: AtomicU32,
    /// Name and stack definitions not yet sent; always sent before the records taken with them.
    defs: Mutex<Vec<u8>>,
    kernel_names: Mutex<HashMap<usize, u32>>,
    stacks: Mutex<StackCache>,
    queue: Mutex<Queue>,
    wake: Condvar,
    threads: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
    /// Per domain (driver = 0, runtime = 1): cbid -> (name id, wire kind), name id 0 = off.
    api_table: [Vec<(u32, u8)>; 2],
    copy_names: [u32; 11],
    memset_name: u32,
    active: AtomicBool,
    shutting_down: AtomicBool,
    dropped: AtomicU64,
    cupti_dropped: AtomicU64,
    sent: AtomicU64,
    buffers_out: AtomicUsize,
    /// Milliseconds (since start) when a buffer last completed.
    last_completed_ms: AtomicU64,
    started: Instant,
    subscriber: AtomicUsize,
    done: (Mutex<bool>, Condvar),
}

static COLLECTOR: OnceLock<Collector> = OnceLock::new();
static FORKED: AtomicBool = AtomicBool::new(false);

struct Local {
    buf: Arc<Mutex<Vec<u8>>>,
    tid: u32,
    /// Open API calls on this thread: (start, corr, stack, name, kind).
    open: Vec<(u64, u32, u32, u32, u8)>,
    frames: Vec<(usize, c_int)>,
    native: Vec<usize>,
    /// The sender was asked to empty this thread's buffer early; reset when it has.
    asked: bool,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

fn timestamp() -> u64 {
    let mut t = 0u64;
    unsafe {
        cu::cuptiGetTimestamp(&mut t);
    }
    t
}

impl Collector {
    fn bare(fd: c_int, next_name: AtomicU32) -> Collector {
        Collector {
            fd,
            py_stacks: std::env::var("GAPTOP_PYSTACKS")
                .map(|v| v != "0")
                .unwrap_or(true),
            native: None,
            pool: Mutex::new(Vec::with_capacity(POOL_KEEP)),
            sync_names: [0; 5],
            lag_ns: AtomicU64::new(0),
            timing: std::env::var_os("GAPTOP_VERBOSE").is_some(),
            cb_ns: AtomicU64::new(0),
            cb_calls: AtomicU64::new(0),
            dump: Mutex::new(None),
            next_name,
            defs: Mutex::new(Vec::new()),
            kernel_names: Mutex::new(HashMap::new()),
            stacks: Mutex::new(StackCache::default()),
            queue: Mutex::new(Queue::default()),
            wake: Condvar::new(),
            threads: Mutex::new(Vec::new()),
            api_table: [Vec::new(), Vec::new()],
            copy_names: [0; 11],
            memset_name: 0,
            active: AtomicBool::new(true),
            shutting_down: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            cupti_dropped: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            buffers_out: AtomicUsize::new(0),
            last_completed_ms: AtomicU64::new(0),
            started: Instant::now(),
            subscriber: AtomicUsize::new(0),
            done: (Mutex::new(false), Condvar::new()),
        }
    }

    fn new_name(&self, text: &str) -> u32 {
        let id = self.next_name.fetch_add(1, Relaxed);
        let mut d = self.defs.lock().unwrap_or_else(|e| e.into_inner());
        w::encode_name(&mut d, id, text);
        id
    }

    fn count_drop(&self, n: u64) {
        self.dropped.fetch_add(n, Relaxed);
    }

    /// Walks the calling thread's Python frames (and native frames, when asked) and returns an
    /// interned stack id (0 if none). Known stacks cost one walk, one hash and one lookup; only
    /// a new stack names its frames.
    ///
    /// `site` identifies what is being called (API and kernel): native walks are costly (µs),
    /// so one is reused for launches of the same site from the same Python stack, and redone
    /// every NATIVE_REWALK launches.
    unsafe fn launch_stack(
        &self,
        frames: &mut Vec<(usize, c_int)>,
        native: &mut Vec<usize>,
        site: u64,
    ) -> u32 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mix = |h: u64, v: u64| (h ^ v).wrapping_mul(0x100_0000_01b3);
        frames.clear();
        native.clear();
        let layout = if self.py_stacks { LAYOUT.get() } else { None };
        if let Some(l) = layout {
            let ts = (l.this_tstate)() as usize;
            let mut f = if ts == 0 { 0 } else { rd(ts + l.ts_off) };
            if let (Some(o), true) = (l.indirect, f != 0) {
                f = rd(f + o);
            }
            while f != 0 && frames.len() < MAX_DEPTH {
                let code = rd(f + l.code_off);
                if code == 0 || rd(code + 8) != l.code_type {
                    break;
                }
                let at = match l.lasti {
                    Some(g) => g(f as *mut c_void),
                    None => -1,
                };
                frames.push((code, at));
                h = mix(h, code as u64);
                h = mix(h, at as u32 as u64);
                h = mix(h, rd(code + l.filename_off) as u64);
                h = mix(h, rd(code + l.qualname_off) as u64);
                f = rd(f + l.prev_off);
            }
        }
        let memo_key = mix(h, site);
        if let Some(map) = &self.native {
            {
                let mut c = self.stacks.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((s, n)) = c.native_memo.get_mut(&memo_key) {
                    *n += 1;
                    if *n < NATIVE_REWALK {
                        return *s;
                    }
                }
            }
            walk_native(map, native);
            for &ip in native.iter() {
                h = mix(h, ip as u64);
            }
        }
        if frames.is_empty() && native.is_empty() {
            return 0;
        }
        let mut c = self.stacks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&s) = c.by_hash.get(&h) {
            if self.native.is_some() && c.native_memo.len() < MAX_STACKS as usize {
                c.native_memo.insert(memo_key, (s, 0));
            }
            return s;
        }
        if c.next_stack >= MAX_STACKS {
            c.full += 1;
            return 0;
        }
        // New stack: name its frames, outermost first, and intern the chain: the Python frames,
        // then the native frames from the interpreter down to the CUDA call.
        let mut parent = 0u32;
        if let Some(l) = layout {
            for &(code, at) in frames.iter().rev() {
                let frame = match c.frames.get(&(code, at)) {
                    Some(&0) => continue,
                    Some(&id) => id,
                    None => {
                        let file = read_str(l, rd(code + l.filename_off));
                        let qual = read_str(l, rd(code + l.qualname_off));
                        if file.starts_with('<') && qual.starts_with('<') && file != "<stdin>" {
                            // CPython's own entry shims ("<shim>", "<interpreter trampoline>").
                            c.frames.insert((code, at), 0);
                            continue;
                        }
                        let line = match l.addr2line {
                            Some(a2l) => a2l(code as *mut c_void, at),
                            None => 0,
                        };
                        let id = self.new_name(&format!("{file}({line}): {qual}"));
                        c.frames.insert((code, at), id);
                        id
                    }
                };
                parent = self.intern_node(&mut c, parent, frame);
            }
        }
        for &ip in native.iter().rev() {
            let frame = match c.native.get(&ip) {
                Some(&id) => id,
                None => {
                    let id = self.new_name(&native_name(ip));
                    c.native.insert(ip, id);
                    id
                }
            };
            parent = self.intern_node(&mut c, parent, frame);
        }
        c.by_hash.insert(h, parent);
        if self.native.is_some() && c.native_memo.len() < MAX_STACKS as usize {
            c.native_memo.insert(memo_key, (parent, 0));
        }
        parent
    }

    fn intern_node(&self, c: &mut StackCache, parent: u32, frame: u32) -> u32 {
        match c.nodes.get(&(parent, frame)) {
            Some(&s) => s,
            None => {
                c.next_stack += 1;
                let s = c.next_stack;
                c.nodes.insert((parent, frame), s);
                let mut d = self.defs.lock().unwrap_or_else(|e| e.into_inner());
                w::encode_stack(&mut d, s, parent, frame);
                s
            }
        }
    }
}

// ------------------------------------------------------------------ native frames
//
// The walk uses the unwinder the process already has (libgcc's, which finds unwind tables
// through glibc without a global lock), stops at the Python interpreter, and skips the frames of
// gaptop, CUPTI and the CUDA libraries above the caller. No symbol is looked up here: a frame is
// named by its module's path and offset, and the viewer resolves it.

extern "C" {
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

struct Walk<'a> {
    map: &'a NativeMap,
    out: &'a mut Vec<usize>,
    started: bool,
}

unsafe extern "C" fn walk_step(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    const CONTINUE: c_int = 0;
    const STOP: c_int = 4;
    let w = &mut *(arg as *mut Walk);
    let ip = _Unwind_GetIP(ctx);
    if ip == 0 {
        return STOP;
    }
    match w.map.region(ip) {
        Some(Region::Plumbing) if !w.started => CONTINUE,
        Some(Region::Interpreter) => STOP,
        _ => {
            w.started = true;
            w.out.push(ip);
            if w.out.len() >= MAX_NATIVE {
                STOP
            } else {
                CONTINUE
            }
        }
    }
}

/// Fills `out` with return addresses, innermost first.
unsafe fn walk_native(map: &NativeMap, out: &mut Vec<usize>) {
    let mut w = Walk {
        map,
        out,
        started: false,
    };
    _Unwind_Backtrace(walk_step, &mut w as *mut Walk as *mut c_void);
}

/// Loaded modules: (first address, end, load base, path).
unsafe fn modules() -> Vec<(usize, usize, usize, String)> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        let v = &mut *(data as *mut Vec<(usize, usize, usize, String)>);
        let i = &*info;
        let base = i.dlpi_addr as usize;
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        for k in 0..i.dlpi_phnum as usize {
            let ph = &*i.dlpi_phdr.add(k);
            if ph.p_type == libc::PT_LOAD {
                lo = lo.min(base + ph.p_vaddr as usize);
                hi = hi.max(base + (ph.p_vaddr + ph.p_memsz) as usize);
            }
        }
        let name = if i.dlpi_name.is_null() {
            String::new()
        } else {
            CStr::from_ptr(i.dlpi_name).to_string_lossy().into_owned()
        };
        if lo < hi {
            v.push((lo, hi, base, name));
        }
        0
    }
    let mut v: Vec<(usize, usize, usize, String)> = Vec::new();
    libc::dl_iterate_phdr(Some(each), &mut v as *mut _ as *mut c_void);
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    for m in &mut v {
        if m.3.is_empty() {
            m.3 = exe.clone();
        }
    }
    v
}

/// The modules the walk skips (gaptop, CUPTI, libcuda, libcudart) and the interpreter's.
unsafe fn native_map() -> NativeMap {
    let mods = modules();
    let here = native_map as *const () as usize;
    let interp = libc::dlsym(libc::RTLD_DEFAULT, c"_PyEval_EvalFrameDefault".as_ptr()) as usize;
    let mut regions = Vec::new();
    for (lo, hi, _, path) in &mods {
        let file = path.rsplit('/').next().unwrap_or(path);
        let inside = |a: usize| a != 0 && *lo <= a && a < *hi;
        if inside(here)
            || file.starts_with("libcupti")
            || file.starts_with("libcuda.so")
            || file.starts_with("libcudart")
        {
            regions.push((*lo, *hi, Region::Plumbing));
        } else if inside(interp) || file.starts_with("libpython3") {
            regions.push((*lo, *hi, Region::Interpreter));
        }
    }
    NativeMap { regions }
}

/// `native:<module path>+0x<offset>`: what the viewer resolves to a symbol. The address is a
/// return address, so the offset names the call instruction (one byte back).
unsafe fn native_name(ip: usize) -> String {
    let at = ip.saturating_sub(1);
    for (lo, hi, base, path) in modules() {
        if lo <= at && at < hi {
            return format!("native:{path}+0x{:x}", at - base);
        }
    }
    format!("native:?+0x{at:x}")
}

// ------------------------------------------------------------------ API callbacks

unsafe extern "C" fn on_api(
    ud: *mut c_void,
    domain: cu::CUpti_CallbackDomain,
    cbid: cu::CUpti_CallbackId,
    data: *const c_void,
) {
    // A panic must never unwind into CUDA (it would abort the program): contain it.
    let timed = COLLECTOR
        .get()
        .filter(|c| c.timing)
        .map(|c| (c, Instant::now()));
    let _ = std::panic::catch_unwind(|| unsafe { api_inner(ud, domain, cbid, data) });
    if let Some((c, t0)) = timed {
        c.cb_ns.fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        c.cb_calls.fetch_add(1, Relaxed);
    }
}

unsafe fn api_inner(
    _ud: *mut c_void,
    domain: cu::CUpti_CallbackDomain,
    cbid: cu::CUpti_CallbackId,
    data: *const c_void,
) {
    if FORKED.load(Relaxed) {
        return;
    }
    let Some(c) = COLLECTOR.get() else { return };
    if !c.active.load(Relaxed) || data.is_null() {
        return;
    }
    let di = match domain {
        cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API => 0,
        cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API => 1,
        _ => return,
    };
    let Some(&(name, kind)) = c.api_table[di].get(cbid as usize) else {
        return;
    };
    if name == 0 {
        return;
    }
    let d = &*(data as *const cu::CUpti_CallbackData);
    let enter = matches!(d.callbackSite, cu::CUpti_ApiCallbackSite::CUPTI_API_ENTER);
    let _ = LOCAL.try_with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else {
            return;
        };
        // A thread's first timed call sets up its buffers, once, at their final sizes.
        let l = l.get_or_insert_with(|| {
            let buf = Arc::new(Mutex::new(Vec::with_capacity(THREAD_CAP)));
            c.threads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(buf.clone());
            Local {
                buf,
                tid: libc::syscall(libc::SYS_gettid) as u32,
                open: Vec::with_capacity(8),
                frames: Vec::with_capacity(MAX_DEPTH),
                native: Vec::with_capacity(MAX_NATIVE),
                asked: false,
            }
        });
        if enter {
            // A driver call made by a runtime call shares its stack and its start time: it
            // is only recorded so that either correlation id finds the launch.
            let (start, stack) = match l.open.last() {
                Some(o) => (o.0, o.2),
                None => {
                    let site = ((cbid as u64) << 48) ^ d.symbolName as u64;
                    (
                        timestamp(),
                        c.launch_stack(&mut l.frames, &mut l.native, site),
                    )
                }
            };
            l.open.push((start, d.correlationId, stack, name, kind));
        } else {
            let Some((start, corr, stack, name, kind)) = l.open.pop() else {
                return;
            };
            let outer = l.open.last().map(|o| o.1).unwrap_or(0);
            let end = if outer != 0 { start } else { timestamp() };
            let rec = w::Api {
                start,
                end,
                corr,
                tid: l.tid,
                name,
                stack,
                outer_corr: outer,
                kind,
            };
            let mut b = l.buf.lock().unwrap_or_else(|e| e.into_inner());
            let kept = append_api(&mut b, &rec);
            if b.len() <= w::API_SIZE {
                l.asked = false;
            }
            // Half full: wake the sender now rather than at its next period (once per fill).
            let wake = b.len() > b.capacity() / 2 && !l.asked;
            l.asked |= wake;
            drop(b);
            if !kept {
                c.count_drop(1);
            }
            if wake {
                c.wake.notify_one();
            }
        }
    });
}

// ------------------------------------------------------------------ activity buffers

unsafe extern "C" fn buffer_requested(buf: *mut *mut u8, size: *mut usize, max: *mut usize) {
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
unsafe fn release_buffer(c: &Collector, buffer: *mut u8) {
    c.buffers_out.fetch_sub(1, Relaxed);
    let mut pool = c.pool.lock().unwrap_or_else(|e| e.into_inner());
    if pool.len() < POOL_KEEP {
        pool.push(buffer as usize);
    } else {
        drop(pool);
        libc::free(buffer as *mut c_void);
    }
}

unsafe extern "C" fn buffer_completed(
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
enum Decoded {
    Op(w::Op),
    /// A synchronization seen by CUPTI's activity API: host timing without a thread or stack.
    Sync(w::Api),
}

/// Reads a kernel record's name; records replayed in tests carry names fixed up the same way.
unsafe fn kernel_name(p: *const c_char) -> String {
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
unsafe fn decode_record(
    c: &Collector,
    names: &mut HashMap<usize, u32>,
    rec: *const u8,
) -> Option<Decoded> {
    let kind = std::ptr::read_unaligned(rec as *const u32);
    Some(Decoded::Op(match kind {
        // CONCURRENT_KERNEL / KERNEL
        10 | 3 => {
            let k = std::ptr::read_unaligned(rec as *const cu::CUpti_ActivityKernel10);
            let ptr = k.name as usize;
            let name = match names.get(&ptr) {
                Some(&id) => id,
                None => {
                    let id = c.new_name(&kernel_name(k.name));
                    names.insert(ptr, id);
                    id
                }
            };
            w::Op {
                start: k.start,
                end: k.end,
                corr: k.correlationId,
                name,
                stream: k.streamId,
                graph: k.graphId,
                device: k.deviceId as u16,
                kind: w::OP_KERNEL,
                flags: 0,
            }
        }
        1 => {
            let m = std::ptr::read_unaligned(rec as *const cu::CUpti_ActivityMemcpy6);
            w::Op {
                start: m.start,
                end: m.end,
                corr: m.correlationId,
                name: c.copy_names[(m.copyKind as usize).min(10)],
                stream: m.streamId,
                graph: m.graphId,
                device: m.deviceId as u16,
                kind: w::OP_MEMCPY,
                flags: 0,
            }
        }
        2 => {
            let m = std::ptr::read_unaligned(rec as *const cu::CUpti_ActivityMemset4);
            w::Op {
                start: m.start,
                end: m.end,
                corr: m.correlationId,
                name: c.memset_name,
                stream: m.streamId,
                graph: m.graphId,
                device: m.deviceId as u16,
                kind: w::OP_MEMSET,
                flags: 0,
            }
        }
        // SYNCHRONIZATION (both record versions share this prefix)
        38 => {
            let r = std::ptr::read_unaligned(rec as *const cu::CUpti_ActivitySynchronization);
            let t = (r.type_ as u32).min(4) as usize;
            return Some(Decoded::Sync(w::Api {
                start: r.start,
                end: r.end,
                corr: r.correlationId,
                tid: 0,
                name: c.sync_names[t],
                stack: 0,
                outer_corr: 0,
                kind: if t == 2 { w::API_WAIT } else { w::API_SYNC },
            }));
        }
        _ => return None,
    }))
}

/// Encoded records of one activity buffer.
#[derive(Default)]
struct Decodedbuf {
    ops: Vec<u8>,
    n_ops: usize,
    syncs: Vec<u8>,
    n_syncs: usize,
    oldest_end: u64,
}

/// Decodes a buffer's records (given by address, as CUPTI's iterator yields them).
///
/// # Safety
/// Every address must point to a complete activity record.
unsafe fn decode_records(
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
            Some(Decoded::Sync(a)) => {
                w::put_api(&mut out.syncs, &a);
                out.n_syncs += 1;
            }
            None => {}
        }
    }
}

/// Queues an encoded batch for the sender unless collection stopped or the queue is full;
/// returns false when the batch was dropped (the caller counts it).
fn enqueue(q: &mut Queue, active: bool, batch: Batch, cap: usize) -> bool {
    if !active || q.bytes + batch.bytes.len() > cap {
        return false;
    }
    q.bytes += batch.bytes.len();
    q.batches.push_back(batch);
    true
}

/// Appends an API record to a thread's buffer unless that would grow it; false when dropped.
fn append_api(buf: &mut Vec<u8>, rec: &w::Api) -> bool {
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
unsafe fn dump_buffer(c: &Collector, buffer: *const u8, valid: usize, recs: &[*const u8]) {
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
            let k = std::ptr::read_unaligned(r as *const cu::CUpti_ActivityKernel10);
            let name = kernel_name(k.name);
            let field = off + std::mem::offset_of!(cu::CUpti_ActivityKernel10, name);
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

unsafe fn completed_inner(
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

// ------------------------------------------------------------------ sender

fn send_all(fd: c_int, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        let r = unsafe { libc::send(fd, b.as_ptr() as *const c_void, b.len(), libc::MSG_NOSIGNAL) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        b = &b[r as usize..];
    }
    true
}

/// Wraps raw records into frames no larger than the wire limit.
fn frame_records(out: &mut Vec<u8>, tag: u8, recs: &[u8], size: usize) {
    let per = (w::MAX_FRAME - 16) / size * size;
    for chunk in recs.chunks(per) {
        out.extend_from_slice(&((chunk.len() + 1) as u32).to_le_bytes());
        out.push(tag);
        out.extend_from_slice(chunk);
    }
}

/// One send's bytes: definitions first, then the threads' API records, then the queued GPU
/// batches. Returns the number of records and the oldest end time among the batches.
fn compose(out: &mut Vec<u8>, defs: &[u8], apis: &[Vec<u8>], batches: &[Batch]) -> (u64, u64) {
    out.clear();
    out.extend_from_slice(defs);
    let mut nrec = 0u64;
    for b in apis {
        frame_records(out, w::TAG_APIS, b, w::API_SIZE);
        nrec += (b.len() / w::API_SIZE) as u64;
    }
    let mut oldest = u64::MAX;
    for b in batches {
        let size = if b.tag == w::TAG_OPS {
            w::OP_SIZE
        } else {
            w::API_SIZE
        };
        frame_records(out, b.tag, &b.bytes, size);
        nrec += b.records as u64;
        oldest = oldest.min(b.oldest_end);
    }
    (nrec, oldest)
}

fn sender(c: &'static Collector) {
    let flush_period = match std::env::var("GAPTOP_FLUSH_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        Some(0) => None,
        Some(ms) => Some(Duration::from_millis(ms)),
        None => Some(FLUSH_PERIOD),
    };
    let mut last_flush = Instant::now();
    let mut last_stats = Instant::now();
    let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
    loop {
        let stopping = c.shutting_down.load(Acquire);
        {
            let q = c.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.batches.is_empty() && !stopping {
                let _ = c.wake.wait_timeout(q, SEND_PERIOD);
            }
        }
        // Flush only when buffers are not filling on their own: under load they complete
        // every few hundred ms anyway, and a forced flush competes with the launching threads.
        let quiet_ms = (c.started.elapsed().as_millis() as u64)
            .saturating_sub(c.last_completed_ms.load(Relaxed));
        let due = |p: Duration| last_flush.elapsed() >= p && quiet_ms >= p.as_millis() as u64;
        if flush_period.is_some_and(due) && !stopping {
            unsafe {
                cu::cuptiActivityFlushAll(0);
            }
            last_flush = Instant::now();
        }
        // Records first, then the definitions they may use: a definition is always written
        // before any record that refers to it, so it is in this take or an earlier one.
        let batches: Vec<Batch> = {
            let mut q = c.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.bytes = 0;
            q.batches.drain(..).collect()
        };
        let threads: Vec<Arc<Mutex<Vec<u8>>>> =
            c.threads.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let mut apis: Vec<Vec<u8>> = Vec::new();
        for t in &threads {
            let mut b = t.lock().unwrap_or_else(|e| e.into_inner());
            if !b.is_empty() {
                // The replacement is allocated here, on the sender thread, at the thread's
                // fixed size, so the launching thread never allocates for its records.
                let cap = b.capacity().max(THREAD_CAP);
                apis.push(std::mem::replace(&mut *b, Vec::with_capacity(cap)));
            }
        }
        let defs = std::mem::take(&mut *c.defs.lock().unwrap_or_else(|e| e.into_inner()));
        let (nrec, oldest) = compose(&mut out, &defs, &apis, &batches);
        if oldest != u64::MAX {
            let lag = timestamp().saturating_sub(oldest);
            c.lag_ns.fetch_max(lag, Relaxed);
        }
        if last_stats.elapsed() >= Duration::from_millis(500) || stopping {
            w::encode_stats(
                &mut out,
                &w::Stats {
                    collector_dropped: c.dropped.load(Relaxed),
                    cupti_dropped: c.cupti_dropped.load(Relaxed),
                    sent: c.sent.load(Relaxed) + nrec,
                    lag_ns: c.lag_ns.swap(0, Relaxed),
                },
            );
            last_stats = Instant::now();
        }
        if c.active.load(Relaxed) {
            if send_all(c.fd, &out) {
                c.sent.fetch_add(nrec, Relaxed);
            } else {
                c.count_drop(nrec);
                go_quiet(c, "the viewer went away");
            }
        } else {
            c.count_drop(nrec);
        }
        {
            let mut q = c.queue.lock().unwrap_or_else(|e| e.into_inner());
            for mut b in batches {
                if q.free.len() < 8 && b.tag == w::TAG_OPS {
                    b.bytes.clear();
                    q.free.push(b.bytes);
                }
            }
        }
        if stopping {
            if c.active.load(Relaxed) {
                let mut bye = Vec::new();
                w::encode_bye(&mut bye, 0);
                send_all(c.fd, &bye);
            }
            let (m, cv) = &c.done;
            *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
            return;
        }
    }
}

/// Stops collecting for good: callbacks off, activity off. The program runs on untouched.
fn go_quiet(c: &Collector, why: &str) {
    if c.active.swap(false, AcqRel) {
        say!("{why}; collection stopped, the program continues");
        unsafe {
            let sub = c.subscriber.load(Relaxed) as cu::CUpti_SubscriberHandle;
            if !sub.is_null() {
                cu::cuptiEnableDomain(
                    0,
                    sub,
                    cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
                );
                cu::cuptiEnableDomain(0, sub, cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API);
            }
            for k in ACTIVITY_KINDS {
                cu::cuptiActivityDisable(k);
            }
        }
    }
}

const ACTIVITY_KINDS: [cu::CUpti_ActivityKind; 4] = [
    cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY,
    cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET,
    cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
];

extern "C" fn at_exit() {
    let Some(c) = COLLECTOR.get() else { return };
    if FORKED.load(Relaxed) {
        return;
    }
    unsafe {
        cu::cuptiActivityFlushAll(1);
    }
    c.shutting_down.store(true, Release);
    c.wake.notify_all();
    let (m, cv) = &c.done;
    let g = m.lock().unwrap_or_else(|e| e.into_inner());
    let _ = cv.wait_timeout_while(g, Duration::from_secs(3), |d| !*d);
    if c.timing {
        let calls = c.cb_calls.load(Relaxed);
        let ns = c.cb_ns.load(Relaxed);
        let st = c.stacks.lock().unwrap_or_else(|e| e.into_inner());
        say!(
            "{calls} API callbacks, {:.1} ms inside gaptop ({} ns a call); {} stack nodes, {} \
             distinct stacks, {} launches over the stack limit",
            ns as f64 / 1e6,
            ns.checked_div(calls).unwrap_or(0),
            st.next_stack,
            st.by_hash.len(),
            st.full
        );
    }
}

extern "C" fn in_forked_child() {
    FORKED.store(true, Relaxed);
}

fn label() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&x| x == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

fn connect(path: &str) -> Result<c_int, String> {
    use std::os::fd::IntoRawFd;
    let s = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| format!("cannot reach the viewer at {path}: {e}"))?;
    Ok(s.into_raw_fd())
}

unsafe fn check(r: cu::CUptiResult, what: &str) -> Result<(), String> {
    if r == cu::CUptiResult::CUPTI_SUCCESS {
        Ok(())
    } else {
        let mut s: *const c_char = std::ptr::null();
        cu::cuptiGetResultString(r, &mut s);
        let msg = if s.is_null() {
            format!("{r:?}")
        } else {
            CStr::from_ptr(s).to_string_lossy().into_owned()
        };
        Err(format!("{what} failed: {msg}"))
    }
}

unsafe fn start() -> Result<(), String> {
    let path =
        std::env::var("GAPTOP_SOCKET").map_err(|_| "GAPTOP_SOCKET is not set".to_string())?;
    if !cu::is_culib_present() {
        return Err("libcupti was not found (put its folder on LD_LIBRARY_PATH)".into());
    }
    let fd = connect(&path)?;
    let mut sub: cu::CUpti_SubscriberHandle = std::ptr::null_mut();
    if let Err(e) = check(
        cu::cuptiSubscribe(&mut sub, Some(on_api), std::ptr::null_mut()),
        "cuptiSubscribe (is another profiler attached?)",
    ) {
        libc::close(fd);
        return Err(e);
    }
    let next_name = AtomicU32::new(1);
    let mut defs = Vec::new();
    let mut name = |s: &str| {
        let id = next_name.fetch_add(1, Relaxed);
        w::encode_name(&mut defs, id, s);
        id
    };
    // Enable exactly the callbacks we time, by name, whatever this CUPTI numbers them.
    let mut api_table: [Vec<(u32, u8)>; 2] = [vec![(0, 0); 2048], vec![(0, 0); 2048]];
    let domains = [
        cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
        cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
    ];
    let mut enabled = 0;
    let flag = |k: &str| std::env::var(k).map(|v| v != "0").unwrap_or(true);
    let want_domain = [
        flag("GAPTOP_DRIVER_CB") && flag("GAPTOP_API"),
        flag("GAPTOP_RUNTIME_CB") && flag("GAPTOP_API"),
    ];
    for (di, &dom) in domains.iter().enumerate() {
        if !want_domain[di] {
            continue;
        }
        for cbid in 1..2048u32 {
            let mut p: *const c_char = std::ptr::null();
            if cu::cuptiGetCallbackName(dom, cbid, &mut p) != cu::CUptiResult::CUPTI_SUCCESS
                || p.is_null()
            {
                continue;
            }
            let n = CStr::from_ptr(p).to_string_lossy();
            let kind = w::api_kind(&n);
            if kind != w::API_OTHER
                && cu::cuptiEnableCallback(1, sub, dom, cbid) == cu::CUptiResult::CUPTI_SUCCESS
            {
                api_table[di][cbid as usize] = (name(&n), kind);
                enabled += 1;
            }
        }
    }
    let copy_kinds = [
        "Memcpy",
        "Memcpy HtoD",
        "Memcpy DtoH",
        "Memcpy HtoA",
        "Memcpy AtoH",
        "Memcpy AtoA",
        "Memcpy AtoD",
        "Memcpy DtoA",
        "Memcpy DtoD",
        "Memcpy HtoH",
        "Memcpy PtoP",
    ];
    let mut copy_names = [0u32; 11];
    for (i, k) in copy_kinds.iter().enumerate() {
        copy_names[i] = name(k);
    }
    let memset_name = name("Memset");
    let sync_names = [
        "Synchronize",
        "Event synchronize",
        "Stream wait event",
        "Stream synchronize",
        "Context synchronize",
    ]
    .map(&mut name);
    let mut hello = Vec::new();
    let rank = std::env::var("RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(-1);
    w::encode_hello(
        &mut hello,
        &w::Hello::new(std::process::id(), rank, &label()),
    );
    hello.extend_from_slice(&defs);
    if !send_all(fd, &hello) {
        cu::cuptiUnsubscribe(sub);
        libc::close(fd);
        return Err("the viewer closed the connection".into());
    }
    let mut c = Collector::bare(fd, next_name);
    c.api_table = api_table;
    c.copy_names = copy_names;
    c.memset_name = memset_name;
    c.sync_names = sync_names;
    if flag("GAPTOP_NATIVE") && std::env::var_os("GAPTOP_NATIVE").is_some() {
        c.native = Some(native_map());
    }
    if let Some(p) = std::env::var_os("GAPTOP_DUMP") {
        let budget = std::env::var("GAPTOP_DUMP_BYTES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(1 << 20);
        match std::fs::File::create(&p) {
            Ok(f) => *c.dump.lock().unwrap_or_else(|e| e.into_inner()) = Some((f, budget)),
            Err(e) => say!("cannot write CUPTI buffers to {}: {e}", p.to_string_lossy()),
        }
    }
    c.subscriber = AtomicUsize::new(sub as usize);
    if COLLECTOR.set(c).is_err() {
        return Err("initialized twice".into());
    }
    let c = COLLECTOR.get().expect("just set");
    check(
        cu::cuptiActivityRegisterCallbacks(Some(buffer_requested), Some(buffer_completed)),
        "cuptiActivityRegisterCallbacks",
    )?;
    for k in &ACTIVITY_KINDS[..3] {
        check(cu::cuptiActivityEnable(*k), "cuptiActivityEnable")?;
    }
    // Synchronization records add host timing for syncs the callbacks do not see; without
    // them gaptop still works, so a refusal is only mentioned.
    if flag("GAPTOP_SYNC_ACTIVITY") {
        if let Err(e) = check(
            cu::cuptiActivityEnable(ACTIVITY_KINDS[3]),
            "cuptiActivityEnable(SYNCHRONIZATION)",
        ) {
            if c.timing {
                say!("{e}");
            }
        }
    }
    std::thread::Builder::new()
        .name("gaptop-sender".into())
        .spawn(move || sender(c))
        .map_err(|e| format!("cannot start the sender thread: {e}"))?;
    libc::atexit(at_exit);
    if c.py_stacks {
        // Calibrate the Python frame layout from inside the interpreter, when it next runs.
        let init: Option<unsafe extern "C" fn() -> c_int> = sym(c"Py_IsInitialized");
        let pending: Option<FnPending> = sym(c"Py_AddPendingCall");
        if let (Some(init), Some(pending)) = (init, pending) {
            if init() != 0 {
                pending(calibrate, std::ptr::null_mut());
            }
        }
    }
    libc::pthread_atfork(None, None, Some(in_forked_child));
    if std::env::var_os("GAPTOP_VERBOSE").is_some() {
        say!(
            "collecting: {enabled} API callbacks, kernels, memcpy, memset, syncs{} -> {path}",
            if c.native.is_some() {
                ", native frames"
            } else {
                ""
            }
        );
    }
    Ok(())
}

/// Entry point CUDA calls when `CUDA_INJECTION64_PATH` names this library.
///
/// # Safety
/// Called once by the CUDA driver during initialization.
#[no_mangle]
pub unsafe extern "C" fn InitializeInjection() -> c_int {
    let r = std::panic::catch_unwind(|| unsafe { start() });
    match r {
        Ok(Ok(())) => 1,
        Ok(Err(e)) => {
            say!("{e}; not collecting, the program runs unchanged");
            if let Some(c) = COLLECTOR.get() {
                go_quiet(c, "setup failed");
            }
            1
        }
        Err(_) => {
            say!("internal error during setup; not collecting");
            1
        }
    }
}

// ------------------------------------------------------------------ self-test hooks
//
// These let a test drive the Python stack walk without a GPU: call `gaptop_selftest_calibrate`
// with the GIL held (ctypes.PyDLL), then `gaptop_selftest_stack` with it released (ctypes.CDLL),
// which is the state PyTorch's launches are in.

static SELFTEST: OnceLock<Collector> = OnceLock::new();

/// Calibrates the frame layout now. Returns 1 on success.
///
/// # Safety
/// Call from Python with the GIL held.
#[no_mangle]
pub unsafe extern "C" fn gaptop_selftest_calibrate() -> c_int {
    calibrate(std::ptr::null_mut());
    LAYOUT.get().is_some() as c_int
}

/// Walks the calling thread's Python stack and writes its frames, outermost first, one a line,
/// into `out`. Returns the length written, or -1.
///
/// # Safety
/// `out` must point to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gaptop_selftest_stack(out: *mut u8, cap: usize) -> isize {
    let c = SELFTEST.get_or_init(|| Collector::bare(-1, AtomicU32::new(1)));
    selftest_write(c, out, cap)
}

static SELFTEST_NATIVE: OnceLock<Collector> = OnceLock::new();

/// As `gaptop_selftest_stack`, with native frames after the Python ones (`--native`).
///
/// # Safety
/// `out` must point to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn gaptop_selftest_stack_native(out: *mut u8, cap: usize) -> isize {
    let c = SELFTEST_NATIVE.get_or_init(|| {
        let mut c = Collector::bare(-1, AtomicU32::new(1));
        c.native = Some(native_map());
        c
    });
    selftest_write(c, out, cap)
}

unsafe fn selftest_write(c: &Collector, out: *mut u8, cap: usize) -> isize {
    let mut frames = Vec::new();
    let mut native = Vec::new();
    let id = c.launch_stack(&mut frames, &mut native, 0);
    if id == 0 {
        return -1;
    }
    // Rebuild the stack from the definitions it emitted.
    let defs = c.defs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut names = HashMap::new();
    let mut nodes = HashMap::new();
    let mut d = w::Decoder::new();
    let mut hello = Vec::new();
    w::encode_hello(&mut hello, &w::Hello::new(0, -1, ""));
    d.feed(&hello);
    d.feed(&defs);
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
    std::ptr::copy_nonoverlapping(text.as_ptr(), out, n);
    n as isize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decoded_op(d: Option<Decoded>) -> w::Op {
        match d {
            Some(Decoded::Op(op)) => op,
            other => panic!("expected a GPU op, got {other:?}"),
        }
    }

    /// CUPTI records decoded without a GPU: records built in memory as CUPTI lays them out.
    #[test]
    fn decodes_kernel_memcpy_and_memset_records() {
        let mut c = Collector::bare(-1, AtomicU32::new(100));
        c.copy_names = [0, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20];
        c.memset_name = 30;
        let mut names = HashMap::new();
        let kname = std::ffi::CString::new("_Z6kernelPf").unwrap();
        unsafe {
            let mut k: cu::CUpti_ActivityKernel10 = std::mem::zeroed();
            k.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
            k.start = 1_000;
            k.end = 2_500;
            k.correlationId = 42;
            k.streamId = 7;
            k.deviceId = 1;
            k.graphId = 9;
            k.name = kname.as_ptr();
            let op = decoded_op(decode_record(&c, &mut names, &k as *const _ as *const u8));
            assert_eq!(
                (op.start, op.end, op.corr, op.stream, op.device, op.graph, op.kind),
                (1_000, 2_500, 42, 7, 1, 9, w::OP_KERNEL)
            );
            assert_eq!(op.name, 100);
            // The same name pointer is not named again.
            let again = decoded_op(decode_record(&c, &mut names, &k as *const _ as *const u8));
            assert_eq!(again.name, 100);
            let defs = c.defs.lock().unwrap().clone();
            let mut d = w::Decoder::new();
            let mut hello = Vec::new();
            w::encode_hello(&mut hello, &w::Hello::new(1, -1, ""));
            d.feed(&hello);
            d.feed(&defs);
            d.next_frame().unwrap();
            assert_eq!(
                d.next_frame().unwrap(),
                Some(w::Frame::Name {
                    id: 100,
                    text: "_Z6kernelPf".into()
                })
            );
            assert_eq!(d.next_frame().unwrap(), None, "named once");

            let mut m: cu::CUpti_ActivityMemcpy6 = std::mem::zeroed();
            m.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
            m.copyKind = 1; // HtoD
            m.start = 10;
            m.end = 20;
            m.correlationId = 5;
            let op = decoded_op(decode_record(&c, &mut names, &m as *const _ as *const u8));
            assert_eq!((op.kind, op.name, op.corr), (w::OP_MEMCPY, 11, 5));

            let mut s: cu::CUpti_ActivityMemset4 = std::mem::zeroed();
            s.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET;
            s.start = 30;
            s.end = 31;
            let op = decoded_op(decode_record(&c, &mut names, &s as *const _ as *const u8));
            assert_eq!((op.kind, op.name), (w::OP_MEMSET, 30));

            let mut y: cu::CUpti_ActivitySynchronization = std::mem::zeroed();
            y.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
            y.type_ = cu::CUpti_ActivitySynchronizationType::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
            y.start = 5;
            y.end = 9;
            y.correlationId = 77;
            c.sync_names = [40, 41, 42, 43, 44];
            let Some(Decoded::Sync(a)) = decode_record(&c, &mut names, &y as *const _ as *const u8)
            else {
                panic!("a synchronization record decodes as a host call");
            };
            assert_eq!(
                (a.start, a.end, a.corr, a.name, a.kind, a.tid, a.stack),
                (5, 9, 77, 42, w::API_WAIT, 0, 0)
            );

            // Kinds gaptop does not keep are skipped.
            let other: [u32; 16] = [39, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            assert!(decode_record(&c, &mut names, other.as_ptr() as *const u8).is_none());
        }
    }

    /// The queue and the thread buffers drop (and let the caller count) instead of growing.
    #[test]
    fn full_queues_drop_instead_of_blocking_or_growing() {
        let batch = |n: usize| Batch {
            tag: w::TAG_OPS,
            bytes: vec![0; n],
            records: 1,
            oldest_end: 0,
        };
        let mut q = Queue::default();
        assert!(enqueue(&mut q, true, batch(60), 100));
        assert!(!enqueue(&mut q, true, batch(60), 100), "over the cap");
        assert!(enqueue(&mut q, true, batch(40), 100));
        assert_eq!((q.bytes, q.batches.len()), (100, 2));
        assert!(
            !enqueue(&mut q, false, batch(1), 1000),
            "collection stopped"
        );

        let cap = 3 * w::API_SIZE;
        let mut buf = Vec::with_capacity(cap);
        let cap = buf.capacity() / w::API_SIZE * w::API_SIZE;
        let rec = w::Api::default();
        let kept = (0..cap / w::API_SIZE + 2)
            .filter(|_| append_api(&mut buf, &rec))
            .count();
        assert_eq!(kept, cap / w::API_SIZE);
        assert_eq!(buf.len(), cap, "never grown past its first allocation");
    }

    #[test]
    fn large_record_runs_split_into_legal_frames() {
        let recs = vec![7u8; w::API_SIZE * 300_000];
        let mut out = Vec::new();
        frame_records(&mut out, w::TAG_APIS, &recs, w::API_SIZE);
        let mut d = w::Decoder::new();
        let mut hello = Vec::new();
        w::encode_hello(&mut hello, &w::Hello::new(1, -1, ""));
        d.feed(&hello);
        d.feed(&out);
        let mut n = 0;
        while let Some(f) = d.next_frame().unwrap() {
            if let w::Frame::Apis(a) = f {
                n += a.len();
            }
        }
        assert_eq!(n, 300_000);
    }

    /// One activity buffer as GAPTOP_DUMP wrote it, with its kernel names fixed up to point at
    /// strings owned here (CUPTI's pointers died with the process that recorded it).
    struct Dumped {
        bytes: Vec<u8>,
        offsets: Vec<usize>,
        _names: Vec<std::ffi::CString>,
    }

    fn read_dump(path: &std::path::Path) -> Vec<Dumped> {
        let b = std::fs::read(path).unwrap();
        let mut rest: &[u8] = &b;
        let mut take = |n: usize| {
            let (s, r) = rest.split_at(n);
            rest = r;
            s
        };
        let u32_at = |s: &[u8]| u32::from_le_bytes(s.try_into().unwrap()) as usize;
        let mut out = Vec::new();
        let mut left = b.len();
        while left > 0 {
            assert_eq!(take(4), b"GCB1");
            let valid = u64::from_le_bytes(take(8).try_into().unwrap()) as usize;
            let n = u32_at(take(4));
            let offsets: Vec<usize> = (0..n).map(|_| u32_at(take(4))).collect();
            let nfix = u32_at(take(4));
            let mut fixes = Vec::new();
            for _ in 0..nfix {
                let field = u32_at(take(4));
                let len = u32_at(take(4));
                fixes.push((field, std::ffi::CString::new(take(len)).unwrap()));
            }
            let mut bytes = take(valid).to_vec();
            for (field, name) in &fixes {
                let p = (name.as_ptr() as usize).to_le_bytes();
                bytes[*field..*field + 8].copy_from_slice(&p);
            }
            left -= 4
                + 8
                + 4
                + 4 * n
                + 4
                + fixes
                    .iter()
                    .map(|f| 8 + f.1.as_bytes().len())
                    .sum::<usize>()
                + valid;
            out.push(Dumped {
                bytes,
                offsets,
                _names: fixes.into_iter().map(|f| f.1).collect(),
            });
        }
        out
    }

    /// Ops (with their kernel names) and API calls as a viewer would receive them.
    fn received(frames: impl Iterator<Item = w::Frame>) -> (Vec<(w::Op, String)>, Vec<w::Api>) {
        let mut names = HashMap::new();
        let mut ops = Vec::new();
        let mut apis = Vec::new();
        for f in frames {
            match f {
                w::Frame::Name { id, text } => {
                    names.insert(id, text);
                }
                w::Frame::Ops(v) => ops.extend(v),
                w::Frame::Apis(v) => apis.extend(v),
                _ => {}
            }
        }
        let mut ops: Vec<(w::Op, String)> = ops
            .into_iter()
            .map(|o| {
                let n = names.get(&o.name).cloned().unwrap_or_default();
                (w::Op { name: 0, ..o }, n)
            })
            .collect();
        ops.sort_by_key(|o| (o.0.corr, o.0.start));
        apis.sort_by_key(|a| a.corr);
        (ops, apis)
    }

    /// Replays CUPTI activity buffers recorded on an H200 (planted.py, GAPTOP_DUMP) through the
    /// collector's decoder, queue and framing, and compares with what the live viewer recorded
    /// from the same buffers in the same run: the same kernels, times, streams, correlation ids,
    /// names and synchronizations.
    #[test]
    fn replayed_cupti_buffers_give_what_the_live_viewer_received() {
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let dumps = read_dump(&data.join("planted.cuptibuf"));
        let mut c = Collector::bare(-1, AtomicU32::new(1 << 20));
        c.sync_names = [1, 2, 3, 4, 5];
        let mut kernel_names = HashMap::new();
        let mut q = Queue::default();
        let mut total = 0;
        for d in &dumps {
            let mut out = Decodedbuf::default();
            let base = d.bytes.as_ptr();
            unsafe {
                decode_records(
                    &c,
                    &mut kernel_names,
                    d.offsets.iter().map(|&o| base.add(o)),
                    &mut out,
                );
            }
            total += out.n_ops + out.n_syncs;
            for (tag, bytes, records) in [
                (w::TAG_OPS, out.ops, out.n_ops),
                (w::TAG_APIS, out.syncs, out.n_syncs),
            ] {
                let b = Batch {
                    tag,
                    bytes,
                    records,
                    oldest_end: out.oldest_end,
                };
                assert!(enqueue(&mut q, true, b, QUEUE_CAP));
            }
        }
        let batches: Vec<Batch> = q.batches.drain(..).collect();
        let defs = c.defs.lock().unwrap().clone();
        let mut bytes = Vec::new();
        let (nrec, oldest) = compose(&mut bytes, &defs, &[], &batches);
        assert_eq!(nrec as usize, total);
        let mut dec = w::Decoder::new();
        let mut hello = Vec::new();
        w::encode_hello(&mut hello, &w::Hello::new(1, -1, "replay"));
        // The sync names the live collector defined at start.
        for (id, n) in c.sync_names.iter().zip([
            "Synchronize",
            "Event synchronize",
            "Stream wait event",
            "Stream synchronize",
            "Context synchronize",
        ]) {
            w::encode_name(&mut hello, *id, n);
        }
        dec.feed(&hello);
        dec.feed(&bytes);
        let replay = received(std::iter::from_fn(|| dec.next_frame().unwrap()));

        let f = std::fs::File::open(data.join("planted_dump.rec")).unwrap();
        let mut r = gaptop::collect::recording::Reader::new(f).unwrap();
        let live = received(std::iter::from_fn(|| r.next_entry().unwrap().map(|e| e.1)));

        assert_eq!(replay.0.len(), 59, "kernels in the recorded buffer");
        assert_eq!(replay.0, live.0, "kernels as the live viewer received them");
        assert_eq!(
            replay
                .0
                .iter()
                .filter(|o| o.1.contains("vectorized_elementwise_kernel"))
                .count(),
            58
        );
        assert_eq!(oldest, replay.0.iter().map(|o| o.0.end).min().unwrap());
        // The live recording also holds the callbacks' API calls (with threads); the activity
        // API's synchronizations (no thread) must match the replayed ones exactly.
        let live_syncs: Vec<w::Api> = live.1.iter().filter(|a| a.tid == 0).copied().collect();
        assert_eq!(replay.1.len(), 5);
        let strip = |v: &[w::Api]| -> Vec<(u64, u64, u32, u8)> {
            v.iter().map(|a| (a.start, a.end, a.corr, a.kind)).collect()
        };
        assert_eq!(strip(&replay.1), strip(&live_syncs));
        // Each synchronization was also timed by a callback with the same correlation id.
        for s in &replay.1 {
            assert!(
                live.1.iter().any(|a| a.tid != 0 && a.corr == s.corr),
                "{s:?}"
            );
        }
    }

    /// The same buffers through a queue that can hold only part of them: what does not fit is
    /// dropped whole and counted, never delivered half.
    #[test]
    fn replayed_buffers_over_a_full_queue_are_counted_not_lost() {
        let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
        let dumps = read_dump(&data.join("planted.cuptibuf"));
        let c = Collector::bare(-1, AtomicU32::new(1));
        let mut names = HashMap::new();
        let mut q = Queue::default();
        let (mut queued, mut dropped) = (0usize, 0usize);
        for _ in 0..10 {
            let mut out = Decodedbuf::default();
            let base = dumps[0].bytes.as_ptr();
            unsafe {
                decode_records(
                    &c,
                    &mut names,
                    dumps[0].offsets.iter().map(|&o| base.add(o)),
                    &mut out,
                );
            }
            let n = out.n_ops;
            let b = Batch {
                tag: w::TAG_OPS,
                bytes: out.ops,
                records: n,
                oldest_end: out.oldest_end,
            };
            if enqueue(&mut q, true, b, 4 * n * w::OP_SIZE) {
                queued += n;
            } else {
                dropped += n;
            }
        }
        assert_eq!((queued, dropped), (4 * 59, 6 * 59));
        let batches: Vec<Batch> = q.batches.drain(..).collect();
        let mut bytes = Vec::new();
        compose(&mut bytes, &[], &[], &batches);
        let mut dec = w::Decoder::new();
        let mut hello = Vec::new();
        w::encode_hello(&mut hello, &w::Hello::new(1, -1, ""));
        dec.feed(&hello);
        dec.feed(&bytes);
        let (ops, _) = received(std::iter::from_fn(|| dec.next_frame().unwrap()));
        assert_eq!(ops.len(), queued);
    }
}

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
/// Slots in each thread's cache of recent stacks (a power of two): a transformer layer's
/// launches come from a few dozen distinct stacks.
const RECENT_STACKS: usize = 256;
const SEND_PERIOD: Duration = Duration::from_millis(100);
const FLUSH_PERIOD: Duration = Duration::from_millis(200);

/// Names of CUPTI's synchronization types, in `CUpti_ActivitySynchronizationType` order.
const SYNC_NAMES: [&str; 5] = [
    "Synchronize",
    "Event synchronize",
    "Stream wait event",
    "Stream synchronize",
    "Context synchronize",
];

macro_rules! say {
    ($($t:tt)*) => {
        eprintln!("gaptop collector [pid {}]: {}", std::process::id(), format!($($t)*))
    };
}

mod activity;
mod native;
mod pyframes;
mod sender;
mod switches;

use activity::*;
use native::*;
use pyframes::*;
use sender::*;
use switches::*;

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
    /// Loaded modules as last read, for naming native frames.
    modules: Vec<Module>,
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
    /// The environment switches, read at start.
    sw: Switches,
    py_stacks: bool,
    /// Native frames at launches (`gaptop run --native`), with the module map for the walk.
    native: Option<NativeMap>,
    /// Free activity buffers for reuse (addresses), at most POOL_KEEP.
    pool: Mutex<Vec<usize>>,
    /// CUPTI was told its buffers arrive zeroed (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER),
    /// so it does not clear each new buffer itself on the thread that needs it.
    zeroed: bool,
    /// Name ids for synchronization records, by CUPTI synchronization type.
    sync_names: [u32; 5],
    /// Most lag (ns) seen in sends since the last stats frame.
    lag_ns: AtomicU64,
    /// Time spent inside the API callback and calls to it (GAPTOP_VERBOSE only).
    timing: bool,
    cb_ns: AtomicU64,
    cb_calls: AtomicU64,
    /// GAPTOP_VERBOSE: time in the launches' stack walks (part of `cb_ns`), and their count.
    walk_ns: AtomicU64,
    walks: AtomicU64,
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
/// Diagnostics (GAPTOP_CB_NOOP=1): callbacks stay enabled but return at once, to measure what
/// CUPTI's callback machinery costs without gaptop's work in them.
static CB_NOOP: AtomicBool = AtomicBool::new(false);
/// Counts the windows in which API callbacks are on, with sampled stacks (GAPTOP_STACK_DUTY):
/// a call entered in an earlier window may never see its exit.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// An API call whose entry callback ran and whose exit has not yet.
#[derive(Clone, Copy, Debug, PartialEq)]
struct OpenCall {
    start: u64,
    corr: u32,
    stack: u32,
    name: u32,
    kind: u8,
    /// The callback window (see `EPOCH`) the entry was seen in.
    epoch: u32,
}

/// A thread's open API calls, innermost last. With sampled stacks, callbacks are switched off
/// and on while calls are in flight, so an entry may never see its exit, and an exit may come
/// without its entry; both are handled here.
#[derive(Default)]
struct OpenCalls(Vec<OpenCall>);

impl OpenCalls {
    /// The call a new entry is nested in (a runtime call's own driver call), if any. Calls
    /// left open by an earlier callback window have lost their exits: they are forgotten.
    fn enclosing(&mut self, epoch: u32) -> Option<&OpenCall> {
        while self.0.last().is_some_and(|o| o.epoch != epoch) {
            self.0.pop();
        }
        self.0.last()
    }

    /// Closes the call `corr` (and anything left open inside it); None if it was never seen.
    fn close(&mut self, corr: u32) -> Option<OpenCall> {
        let at = self.0.iter().rposition(|o| o.corr == corr)?;
        let call = self.0[at];
        self.0.truncate(at);
        Some(call)
    }
}

struct Local {
    buf: Arc<Mutex<Vec<u8>>>,
    tid: u32,
    open: OpenCalls,
    frames: Vec<(usize, c_int)>,
    native: Vec<usize>,
    /// Stacks this thread launched from lately (see `launch_stack`).
    recent: Box<[(u64, u32); RECENT_STACKS]>,
    /// The sender was asked to empty this thread's buffer early; reset when it has.
    asked: bool,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

/// Spreads a walk hash's high bits into its low ones (the walk's multiply-xor mixing leaves
/// the low bits depending only on the inputs' low bits).
fn fold(h: u64) -> u64 {
    let h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
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
        let sw = Switches::from_env();
        Collector {
            fd,
            py_stacks: sw.py_stacks,
            native: None,
            pool: Mutex::new(Vec::with_capacity(POOL_KEEP)),
            zeroed: false,
            sync_names: [0; 5],
            lag_ns: AtomicU64::new(0),
            timing: sw.verbose,
            cb_ns: AtomicU64::new(0),
            cb_calls: AtomicU64::new(0),
            walk_ns: AtomicU64::new(0),
            walks: AtomicU64::new(0),
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
            sw,
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
    ///
    /// `recent` is the calling thread's own small cache of stacks it has launched from (by
    /// walk hash, direct-mapped; empty for none): a hit costs neither the shared lock nor a
    /// SipHash lookup. Ids never change once given, so a thread's copy cannot go stale.
    unsafe fn launch_stack(
        &self,
        frames: &mut Vec<(usize, c_int)>,
        native: &mut Vec<usize>,
        recent: &mut [(u64, u32)],
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
                let at = frame_lasti(l, f, code);
                frames.push((code, at));
                h = mix(h, code as u64);
                h = mix(h, at as u32 as u64);
                h = mix(h, rd(code + l.filename_off) as u64);
                h = mix(h, rd(code + l.qualname_off) as u64);
                f = rd(f + l.prev_off);
            }
        }
        let memo_key = mix(h, site);
        // Only Python stacks are cached per thread: with native frames the shared memo
        // decides when a walk is redone.
        let slot = if self.native.is_none() && !frames.is_empty() && !recent.is_empty() {
            let i = (fold(h) as usize) & (recent.len() - 1);
            if recent[i].0 == h && recent[i].1 != 0 {
                return recent[i].1;
            }
            Some(i)
        } else {
            None
        };
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
            if let Some(i) = slot {
                recent[i] = (h, s);
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
                    let id = self.new_name(&native_name(ip, &mut c.modules));
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
        if let Some(i) = slot {
            recent[i] = (h, parent);
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

// ------------------------------------------------------------------ API callbacks

unsafe extern "C" fn on_api(
    ud: *mut c_void,
    domain: cu::CUpti_CallbackDomain,
    cbid: cu::CUpti_CallbackId,
    data: *const c_void,
) {
    if CB_NOOP.load(Relaxed) {
        return;
    }
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
                open: OpenCalls(Vec::with_capacity(8)),
                frames: Vec::with_capacity(MAX_DEPTH),
                native: Vec::with_capacity(MAX_NATIVE),
                recent: Box::new([(0, 0); RECENT_STACKS]),
                asked: false,
            }
        });
        let epoch = EPOCH.load(Relaxed);
        if enter {
            // A driver call made by a runtime call shares its stack and its start time: it
            // is only recorded so that either correlation id finds the launch.
            let (start, stack) = match l.open.enclosing(epoch) {
                Some(o) => (o.start, o.stack),
                None => {
                    let site = ((cbid as u64) << 48) ^ d.symbolName as u64;
                    let start = timestamp();
                    let t0 = c.timing.then(Instant::now);
                    let stack =
                        c.launch_stack(&mut l.frames, &mut l.native, &mut l.recent[..], site);
                    if let Some(t0) = t0 {
                        c.walk_ns.fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
                        c.walks.fetch_add(1, Relaxed);
                    }
                    (start, stack)
                }
            };
            l.open.0.push(OpenCall {
                start,
                corr: d.correlationId,
                stack,
                name,
                kind,
                epoch,
            });
        } else {
            let Some(call) = l.open.close(d.correlationId) else {
                return;
            };
            let outer = l.open.0.last().map(|o| o.corr).unwrap_or(0);
            if w::repeats_outer_call(call.corr, outer) {
                return;
            }
            let end = if outer != 0 { call.start } else { timestamp() };
            let rec = w::Api {
                start: call.start,
                end,
                corr: call.corr,
                tid: l.tid,
                name: call.name,
                stack: call.stack,
                outer_corr: outer,
                kind: call.kind,
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

/// Switches the API callbacks gaptop enabled on or off.
unsafe fn set_callbacks(c: &Collector, on: bool) {
    let sub = c.subscriber.load(Relaxed) as cu::CUpti_SubscriberHandle;
    if sub.is_null() {
        return;
    }
    for (di, dom) in DOMAINS.iter().enumerate() {
        if !on {
            // Off for the whole domain, not callback by callback (no cheaper: docs/perf.md).
            cu::cuptiEnableDomain(0, sub, *dom);
            continue;
        }
        for (cbid, &(name, _)) in c.api_table[di].iter().enumerate() {
            if name != 0 {
                cu::cuptiEnableCallback(on as u32, sub, *dom, cbid as cu::CUpti_CallbackId);
            }
        }
    }
}

/// Sampled stacks, a diagnostic (GAPTOP_STACK_DUTY): API callbacks on for `on`, off for `off`,
/// repeatedly; kernels launched while they are off have no launch call or stack. On the H200
/// this barely lowered the cost of the run (docs/perf.md): once launch callbacks have been on
/// next to kernel records, launches stay slower, so it is not offered as an option.
fn duty_cycle(c: &'static Collector, on: Duration, off: Duration) {
    let running = || c.active.load(Relaxed) && !c.shutting_down.load(Relaxed);
    loop {
        std::thread::sleep(on);
        if !running() {
            return;
        }
        unsafe { set_callbacks(c, false) };
        std::thread::sleep(off);
        if !running() {
            return;
        }
        EPOCH.fetch_add(1, Relaxed);
        unsafe { set_callbacks(c, true) };
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

/// The callback domains gaptop uses, in `api_table` order.
const DOMAINS: [cu::CUpti_CallbackDomain; 2] = [
    cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
    cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
];

/// Sets the CUPTI activity attributes asked for with GAPTOP_CUPTI_ATTRS (a measuring aid,
/// docs/perf.md), before any activity kind is enabled. A refusal is said and tracing goes on
/// with CUPTI's own value.
unsafe fn set_cupti_attrs(sw: &Switches) {
    use cu::CUpti_ActivityAttribute as K;
    use switches::CuptiAttr as A;
    for item in &sw.bad_attrs {
        say!(
            "GAPTOP_CUPTI_ATTRS: cannot read {item:?} (names: {}; flags take 0 or 1)",
            A::ALL.map(|(n, _)| n).join(", ")
        );
    }
    for &(attr, value) in &sw.cupti_attrs {
        let key = match attr {
            A::DeviceBuffer => K::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE,
            A::DeviceBufferPool => K::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT,
            A::DeviceBufferPrealloc => K::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE,
            A::HostPinned => K::CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED,
            A::PerThread => K::CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER,
        };
        let (mut flag, mut size) = (value as u8, value);
        let (mut len, ptr) = if attr.is_flag() {
            (1, &mut flag as *mut u8 as *mut c_void)
        } else {
            (
                std::mem::size_of::<usize>(),
                &mut size as *mut usize as *mut c_void,
            )
        };
        let r = cu::cuptiActivitySetAttribute(key, &mut len, ptr);
        if r != cu::CUptiResult::CUPTI_SUCCESS {
            say!("CUPTI refused {}={value} ({r:?})", attr.name());
        } else if sw.verbose {
            say!("CUPTI attribute {}={value}", attr.name());
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
        let (walks, walk_ns) = (c.walks.load(Relaxed), c.walk_ns.load(Relaxed));
        // What timing one interval costs by itself, to read the figures above net of it.
        let t0 = Instant::now();
        let mut spent = 0u64;
        for _ in 0..10_000 {
            let t = Instant::now();
            spent += t.elapsed().as_nanos() as u64;
        }
        std::hint::black_box(spent);
        let timer = t0.elapsed().as_nanos() as u64 / 10_000;
        let st = c.stacks.lock().unwrap_or_else(|e| e.into_inner());
        say!(
            "{calls} API callbacks, {:.1} ms inside gaptop ({} ns a call); {walks} stack walks \
             inside those, {} ns each (both figures include {timer} ns of timing); {} stack \
             nodes, {} distinct stacks, {} launches over the stack limit",
            ns as f64 / 1e6,
            ns.checked_div(calls).unwrap_or(0),
            walk_ns.checked_div(walks).unwrap_or(0),
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
    let mut enabled = 0;
    let sw = Switches::from_env();
    let mut timed: Vec<(usize, u32)> = Vec::new();
    let mut untimed: Vec<(usize, u32)> = Vec::new();
    for (di, &dom) in DOMAINS.iter().enumerate() {
        if !sw.domains[di] {
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
            let plan = plan_call(&n, &sw);
            if plan.callback
                && cu::cuptiEnableCallback(1, sub, dom, cbid) != cu::CUptiResult::CUPTI_SUCCESS
            {
                continue;
            }
            if plan.callback || plan.recorded {
                api_table[di][cbid as usize] = (name(&n), plan.kind);
                enabled += 1;
            }
            if plan.recorded {
                timed.push((di, cbid));
            } else if plan.kind == w::API_OTHER {
                untimed.push((di, cbid));
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
    let sync_names = SYNC_NAMES.map(&mut name);
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
    c.sw = sw;
    // Hand CUPTI zeroed buffers, so that it does not clear each new 4 MiB buffer itself on the
    // thread that filled the last one (a launching thread).
    if c.sw.zeroed {
        let mut one: u8 = 1;
        let mut len = std::mem::size_of::<u8>();
        c.zeroed = cu::cuptiActivitySetAttribute(
            cu::CUpti_ActivityAttribute::CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER,
            &mut len,
            &mut one as *mut u8 as *mut c_void,
        ) == cu::CUptiResult::CUPTI_SUCCESS;
    }
    set_cupti_attrs(&c.sw);
    c.api_table = api_table;
    c.copy_names = copy_names;
    c.memset_name = memset_name;
    c.sync_names = sync_names;
    if c.sw.native {
        c.native = Some(native_map());
    }
    if let Some((p, budget)) = &c.sw.dump {
        match std::fs::File::create(p) {
            Ok(f) => *c.dump.lock().unwrap_or_else(|e| e.into_inner()) = Some((f, *budget)),
            Err(e) => say!("cannot write CUPTI buffers to {}: {e}", p.display()),
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
    // Off by default: hardware kernel timestamps (CUPTI's HES) instead of instrumenting each
    // launch. CUPTI offers them on Blackwell and later; the H200 refused, and collection went
    // on with the default tracing.
    if c.sw.hwtrace {
        if let Err(e) = check(
            cu::cuptiActivityEnableHWTrace(1),
            "cuptiActivityEnableHWTrace",
        ) {
            say!("{e}; using CUPTI's default kernel tracing");
        }
    }
    if c.sw.api_activity > 0 {
        enable_api_records(c.sw.api_activity, &timed, &untimed);
    }
    CB_NOOP.store(c.sw.cb_noop, Relaxed);
    for k in &ACTIVITY_KINDS[..c.sw.gpu_kinds] {
        check(cu::cuptiActivityEnable(*k), "cuptiActivityEnable")?;
    }
    // Synchronization records (GAPTOP_SYNC_ACTIVITY=1) add host timing for syncs the callbacks
    // do not see, at a high price on launch-bound programs; a refusal is only mentioned.
    if c.sw.sync_activity {
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
    // Diagnostic (GAPTOP_CB_DELAY_MS): callbacks first switched on only after a delay, to
    // tell whether launches are slowed by callbacks being on, or by their having been on
    // while the program set up its context and loaded its kernels.
    let (duty, delay) = (c.sw.duty, c.sw.cb_delay);
    if delay.is_some() {
        set_callbacks(c, false);
    }
    if duty.is_some() || delay.is_some() {
        std::thread::Builder::new()
            .name("gaptop-duty".into())
            .spawn(move || {
                if let Some(d) = delay {
                    std::thread::sleep(d);
                    if !c.active.load(Relaxed) {
                        return;
                    }
                    EPOCH.fetch_add(1, Relaxed);
                    unsafe { set_callbacks(c, true) };
                }
                if let Some((on, off)) = duty {
                    duty_cycle(c, on, off);
                }
            })
            .map_err(|e| format!("cannot start the sampling thread: {e}"))?;
    }
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
    if c.sw.verbose {
        say!("{}", clock_probe());
        say!(
            "collecting: {enabled} API callbacks{}, kernels, memcpy, memset{}{}{} -> {path}",
            match duty {
                Some((on, off)) => format!(" ({on:?} of every {:?})", on + off),
                None => String::new(),
            },
            if c.sw.sync_activity {
                ", sync records"
            } else {
                ""
            },
            if c.native.is_some() {
                ", native frames"
            } else {
                ""
            },
            if c.zeroed { ", zeroed buffers" } else { "" }
        );
    }
    Ok(())
}

/// GAPTOP_VERBOSE: what a CUPTI timestamp costs against the vDSO's clocks, and which clock it
/// follows (its offset from each), for deciding whether callbacks could read a clock directly.
fn clock_probe() -> String {
    const N: u32 = 20_000;
    let clock = |id: libc::clockid_t| {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        unsafe { libc::clock_gettime(id, &mut t) };
        t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128
    };
    let t0 = Instant::now();
    let mut x = 0u64;
    for _ in 0..N {
        x = x.wrapping_add(timestamp());
    }
    let cupti_ns = t0.elapsed().as_nanos() as f64 / N as f64;
    let t0 = Instant::now();
    let mut y = 0i128;
    for _ in 0..N {
        y = y.wrapping_add(clock(libc::CLOCK_MONOTONIC_RAW));
    }
    let raw_ns = t0.elapsed().as_nanos() as f64 / N as f64;
    std::hint::black_box((x, y));
    let c = timestamp() as i128;
    let off = |id| (c - clock(id)) as f64 / 1e3;
    format!(
        "clock probe: cuptiGetTimestamp {cupti_ns:.1} ns a call, clock_gettime(MONOTONIC_RAW) \
         {raw_ns:.1} ns; CUPTI minus REALTIME {:.1} us, MONOTONIC {:.1} us, MONOTONIC_RAW {:.1} us",
        off(libc::CLOCK_REALTIME),
        off(libc::CLOCK_MONOTONIC),
        off(libc::CLOCK_MONOTONIC_RAW)
    )
}

/// What the collector does with one CUDA API call, by its name.
#[derive(Debug, PartialEq)]
struct CallPlan {
    /// Its wire kind (`API_OTHER` for calls gaptop does not time).
    kind: u8,
    /// A callback at its entry and exit (with the stack walk at the entry).
    callback: bool,
    /// Timed by CUPTI's API records instead (GAPTOP_API_ACTIVITY).
    recorded: bool,
}

/// By default the launches, syncs, copies and waits get callbacks and nothing else does; with
/// GAPTOP_API_ACTIVITY they get API records instead; GAPTOP_CB_ONLY picks the callbacks by name.
fn plan_call(name: &str, sw: &Switches) -> CallPlan {
    let kind = w::api_kind(name);
    let timed = kind != w::API_OTHER;
    CallPlan {
        kind,
        callback: match &sw.cb_only {
            Some(names) => names.iter().any(|p| name.starts_with(p.as_str())),
            None => timed && sw.api_activity == 0,
        },
        recorded: timed && sw.api_activity > 0,
    }
}

/// GAPTOP_API_ACTIVITY: CUPTI's API records for the `timed` calls (see `start`). What CUPTI
/// refuses is said once; the run goes on with what it accepted.
unsafe fn enable_api_records(mode: u8, timed: &[(usize, u32)], untimed: &[(usize, u32)]) {
    let per_call = |di: usize, cbid: u32, on: u8| {
        if di == 0 {
            cu::cuptiActivityEnableDriverApi(cbid, on)
        } else {
            cu::cuptiActivityEnableRuntimeApi(cbid, on)
        }
    };
    cu::cuptiSetThreadIdType(cu::CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM);
    if mode >= 2 {
        for k in [
            cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_DRIVER,
            cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME,
        ] {
            if let Err(e) = check(cu::cuptiActivityEnable(k), "cuptiActivityEnable(API)") {
                say!("{e}");
            }
        }
    }
    let apply = |calls: &[(usize, u32)], on: u8| {
        let refused = calls
            .iter()
            .filter(|&&(di, cbid)| per_call(di, cbid, on) != cu::CUptiResult::CUPTI_SUCCESS)
            .count();
        if refused > 0 {
            say!(
                "CUPTI refused to switch {refused} of {} API records {}",
                calls.len(),
                ["off", "on"][on as usize]
            );
        }
    };
    if mode >= 2 {
        apply(untimed, 0);
    }
    apply(timed, 1);
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

/// A wire decoder fed a hello and then `bytes`, as a viewer sees a connection.
fn decoder_after_hello(bytes: &[u8]) -> w::Decoder {
    let mut d = w::Decoder::new();
    let mut hello = Vec::new();
    w::encode_hello(&mut hello, &w::Hello::new(0, -1, ""));
    d.feed(&hello);
    d.feed(bytes);
    d
}

unsafe fn selftest_write(c: &Collector, out: *mut u8, cap: usize) -> isize {
    let mut frames = Vec::new();
    let mut native = Vec::new();
    // The self-test goes through a per-thread cache as launches do, so that the tests that
    // walk from several stacks in turn also check what the cache hands back. Two slots, so
    // that their stacks also collide in it.
    thread_local! {
        static RECENT: RefCell<[(u64, u32); 2]> = const { RefCell::new([(0, 0); 2]) };
    }
    let id = RECENT.with(|r| c.launch_stack(&mut frames, &mut native, &mut r.borrow_mut()[..], 0));
    if id == 0 {
        return -1;
    }
    // Rebuild the stack from the definitions it emitted.
    let defs = c.defs.lock().unwrap_or_else(|e| e.into_inner()).clone();
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
    fn decodes_gpu_op_sync_and_api_records() {
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
            let mut d = decoder_after_hello(&defs);
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
            let Some(Decoded::Api(a)) = decode_record(&c, &mut names, &y as *const _ as *const u8)
            else {
                panic!("a synchronization record decodes as a host call");
            };
            assert_eq!(
                (a.start, a.end, a.corr, a.name, a.kind, a.tid, a.stack),
                (5, 9, 77, 42, w::API_WAIT, 0, 0)
            );

            // A runtime API record (GAPTOP_API_ACTIVITY) for a call gaptop times, and one
            // for a call it does not.
            c.api_table[1] = vec![(0, 0); 300];
            c.api_table[1][211] = (50, w::API_LAUNCH);
            let mut r: cu::CUpti_ActivityAPI = std::mem::zeroed();
            r.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME;
            r.cbid = 211;
            r.start = 100;
            r.end = 104;
            r.threadId = 4242;
            r.correlationId = 9;
            let Some(Decoded::Api(a)) = decode_record(&c, &mut names, &r as *const _ as *const u8)
            else {
                panic!("an API record decodes as a host call");
            };
            assert_eq!(
                (a.start, a.end, a.corr, a.name, a.kind, a.tid, a.stack),
                (100, 104, 9, 50, w::API_LAUNCH, 4242, 0)
            );
            r.cbid = 10;
            assert!(decode_record(&c, &mut names, &r as *const _ as *const u8).is_none());
            r.cbid = 5000;
            assert!(decode_record(&c, &mut names, &r as *const _ as *const u8).is_none());

            // Kinds gaptop does not keep are skipped.
            let other: [u32; 16] = [39, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
            assert!(decode_record(&c, &mut names, other.as_ptr() as *const u8).is_none());
        }
    }

    /// A record whose other fields hold values this build has no names for (a newer CUPTI's
    /// enum values, padding garbage) decodes from the fields gaptop reads, by offset.
    #[test]
    fn records_with_unknown_field_values_decode_by_offset() {
        type K = cu::CUpti_ActivityKernel10;
        let mut raw = vec![0xABu8; std::mem::size_of::<K>()];
        let kname = std::ffi::CString::new("k_unknown_fields").unwrap();
        let fields: [(usize, &[u8]); 6] = [
            (0, &10u32.to_le_bytes()),
            (std::mem::offset_of!(K, start), &100u64.to_le_bytes()),
            (std::mem::offset_of!(K, end), &250u64.to_le_bytes()),
            (std::mem::offset_of!(K, correlationId), &9u32.to_le_bytes()),
            (std::mem::offset_of!(K, streamId), &13u32.to_le_bytes()),
            (
                std::mem::offset_of!(K, name),
                &(kname.as_ptr() as usize).to_le_bytes(),
            ),
        ];
        for (off, b) in fields {
            raw[off..off + b.len()].copy_from_slice(b);
        }
        let c = Collector::bare(-1, AtomicU32::new(7));
        let mut names = HashMap::new();
        let op = decoded_op(unsafe { decode_record(&c, &mut names, raw.as_ptr()) });
        assert_eq!(
            (op.start, op.end, op.corr, op.stream, op.name),
            (100, 250, 9, 13, 7)
        );
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

    fn call(corr: u32, epoch: u32) -> OpenCall {
        OpenCall {
            start: corr as u64 * 10,
            corr,
            stack: corr + 100,
            name: 1,
            kind: 0,
            epoch,
        }
    }

    /// Nested calls, and calls cut by switching callbacks off and on (sampled stacks).
    #[test]
    fn open_calls_survive_callbacks_switched_off_mid_call() {
        let mut o = OpenCalls::default();
        // A runtime launch and the driver call it makes, in one window.
        assert!(o.enclosing(0).is_none());
        o.0.push(call(1, 0));
        assert_eq!(
            o.enclosing(0).map(|c| c.corr),
            Some(1),
            "nested in the runtime call"
        );
        o.0.push(call(2, 0));
        assert_eq!(o.close(2).map(|c| c.corr), Some(2));
        assert_eq!(
            o.0.last().map(|c| c.corr),
            Some(1),
            "the outer call stays open"
        );
        assert_eq!(o.close(1).map(|c| c.corr), Some(1));
        assert!(o.0.is_empty());

        // Callbacks went off after an entry: its exit never came. In the next window a new
        // call is not taken for a nested one, and the lost call is forgotten.
        o.0.push(call(3, 0));
        assert!(o.enclosing(1).is_none());
        assert!(o.0.is_empty());

        // An exit whose entry was never seen (callbacks came on mid-call) changes nothing.
        o.0.push(call(4, 1));
        assert!(o.close(99).is_none());
        assert_eq!(o.0.len(), 1);
        // An exit that skips an inner call whose exit was lost closes both.
        o.0.push(call(5, 1));
        assert_eq!(o.close(4).map(|c| c.stack), Some(104));
        assert!(o.0.is_empty());
    }

    /// Which calls get callbacks or API records, by default and under the diagnostics.
    #[test]
    fn calls_are_planned_by_name() {
        let plan = |name: &str, sw: &Switches| {
            let p = plan_call(name, sw);
            (p.kind, p.callback, p.recorded)
        };
        let default = Switches::read(|_| None);
        assert_eq!(
            plan("cudaLaunchKernel_v7000", &default),
            (w::API_LAUNCH, true, false)
        );
        assert_eq!(
            plan("cuLaunchKernelEx", &default),
            (w::API_LAUNCH, true, false)
        );
        assert_eq!(
            plan("cudaGraphLaunch_v10000", &default),
            (w::API_GRAPH_LAUNCH, true, false)
        );
        assert_eq!(
            plan("cudaStreamSynchronize_v3020", &default),
            (w::API_SYNC, true, false)
        );
        assert_eq!(
            plan("cudaGetLastError_v3020", &default),
            (w::API_OTHER, false, false)
        );
        assert_eq!(
            plan("cuCtxGetCurrent", &default),
            (w::API_OTHER, false, false)
        );

        let records = Switches::read(|k| (k == "GAPTOP_API_ACTIVITY").then(|| "1".into()));
        assert_eq!(
            plan("cudaLaunchKernel_v7000", &records),
            (w::API_LAUNCH, false, true)
        );
        assert_eq!(
            plan("cudaGetLastError_v3020", &records),
            (w::API_OTHER, false, false)
        );

        let only = Switches::read(|k| (k == "GAPTOP_CB_ONLY").then(|| "cudaGetLastError".into()));
        assert_eq!(
            plan("cudaGetLastError_v3020", &only),
            (w::API_OTHER, true, false)
        );
        assert_eq!(
            plan("cudaLaunchKernel_v7000", &only),
            (w::API_LAUNCH, false, false)
        );
    }

    /// Buffers promised to CUPTI as zeroed come back to the pool zeroed; the pool is capped.
    #[test]
    fn pooled_buffers_are_zeroed_when_cupti_expects_it() {
        for zeroed in [true, false] {
            let mut c = Collector::bare(-1, AtomicU32::new(1));
            c.zeroed = zeroed;
            let bufs: Vec<*mut u8> = (0..POOL_KEEP + 2)
                .map(|_| unsafe {
                    let p = libc::malloc(BUF_SIZE) as *mut u8;
                    assert!(!p.is_null());
                    std::ptr::write_bytes(p, 0xab, BUF_SIZE);
                    p
                })
                .collect();
            c.buffers_out.store(bufs.len(), Relaxed);
            for &p in &bufs {
                unsafe { release_buffer(&c, p) };
            }
            assert_eq!(c.buffers_out.load(Relaxed), 0);
            let pool = c.pool.lock().unwrap().clone();
            assert_eq!(pool.len(), POOL_KEEP, "the rest were freed");
            for p in pool {
                let b = unsafe { std::slice::from_raw_parts(p as *const u8, BUF_SIZE) };
                if zeroed {
                    assert!(b.iter().all(|&x| x == 0), "a pooled buffer was not cleared");
                } else {
                    assert_eq!(b[BUF_SIZE - 1], 0xab, "cleared without need");
                }
                unsafe { libc::free(p as *mut c_void) };
            }
        }
    }

    #[test]
    fn large_record_runs_split_into_legal_frames() {
        let recs = vec![7u8; w::API_SIZE * 300_000];
        let mut out = Vec::new();
        frame_records(&mut out, w::TAG_APIS, &recs, w::API_SIZE);
        let mut d = decoder_after_hello(&out);
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
        // The sync names the live collector defined at start, then the replayed records.
        let mut stream = Vec::new();
        for (id, n) in c.sync_names.iter().zip(SYNC_NAMES) {
            w::encode_name(&mut stream, *id, n);
        }
        stream.extend_from_slice(&bytes);
        let mut dec = decoder_after_hello(&stream);
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
        let mut dec = decoder_after_hello(&bytes);
        let (ops, _) = received(std::iter::from_fn(|| dec.next_frame().unwrap()));
        assert_eq!(ops.len(), queued);
    }
}

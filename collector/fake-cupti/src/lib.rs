//! A stand-in for libcupti, for tests without a GPU. It exports the CUPTI calls gaptop's
//! collector makes, and a few `fake_*` calls that play the CUDA program's part: a "launch"
//! runs the subscriber's callbacks as CUPTI would (the runtime call, with the driver call it
//! makes nested inside) and queues a kernel record; records go out through the collector's
//! buffer callbacks when a buffer fills or on a flush, as CUPTI's do.
//!
//! It models only what the collector relies on, and no GPU: kernels run one after another on
//! one stream, each starting a little after its launch call returned and after the previous one.
//!
//! As CUPTI does, it attaches itself to the process at the first CUPTI call made (lazily) and
//! leaves it at `cuptiFinalize`, which ends every subscription, callback, activity kind and
//! registration; `fake_cupti_attached` and `fake_finalizes` let a test see whether a dormant
//! collector left CUPTI alone, and whether it finalized at an API exit as CUPTI asks.
//!
//! NVTX calls (`fake_nvtx_*`) give marker records, as CUPTI's NVTX support does, only when
//! marker records are on and NVTX_INJECTION64_PATH names this library; their threads are the
//! system's ids only once the collector asked for those (CUPTI's default ids are pthread's).

#![allow(non_snake_case, clippy::missing_safety_doc)]

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};

use cu::CUptiResult as R;
use cudarc::cupti::sys as cu;

const RUNTIME: u32 = cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API as u32;
const DRIVER: u32 = cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API as u32;

/// The calls this fake knows, by (domain, callback id): what CUPTI 13 numbers them.
const CALLS: [(u32, u32, &str); 5] = [
    (RUNTIME, 211, "cudaLaunchKernel_v7000"),
    (RUNTIME, 165, "cudaDeviceSynchronize_v3020"),
    (RUNTIME, 10, "cudaGetLastError_v3020"),
    (DRIVER, 307, "cuLaunchKernel"),
    (DRIVER, 17, "cuCtxSynchronize"),
];
const RT_LAUNCH: u32 = 211;
const RT_SYNC: u32 = 165;
const DRV_LAUNCH: u32 = 307;

type Record = cu::CUpti_ActivityKernel10;
/// Every record takes one slot this long (a kernel record's, the longest kind made here).
const RECORD: usize = std::mem::size_of::<Record>();

#[derive(Default)]
struct State {
    callback:
        Option<unsafe extern "C" fn(*mut c_void, cu::CUpti_CallbackDomain, u32, *const c_void)>,
    userdata: usize,
    enabled: HashSet<(u32, u32)>,
    request: cu::CUpti_BuffersCallbackRequestFunc,
    complete: cu::CUpti_BuffersCallbackCompleteFunc,
    kernels_on: bool,
    markers_on: bool,
    /// cuptiSetThreadIdType(SYSTEM) was called.
    system_tids: bool,
    /// The last NVTX marker id given.
    marker_id: u32,
    /// The buffer being filled: address, size, bytes used.
    buffer: Option<(usize, usize, usize)>,
    dropped: usize,
    corr: u32,
    /// When the fake GPU is next free (CUPTI timestamp, ns).
    gpu_free: u64,
    names: HashMap<String, CString>,
    call_names: HashMap<(u32, u32), CString>,
}

fn state() -> &'static Mutex<State> {
    static S: OnceLock<Mutex<State>> = OnceLock::new();
    S.get_or_init(|| {
        let mut s = State {
            corr: 1,
            ..Default::default()
        };
        for (d, id, n) in CALLS {
            s.call_names.insert((d, id), CString::new(n).unwrap());
        }
        Mutex::new(s)
    })
}

fn lock() -> std::sync::MutexGuard<'static, State> {
    state().lock().unwrap_or_else(|e| e.into_inner())
}

/// Attached to the process: a CUPTI call was made since the start or the last finalize.
static ATTACHED: AtomicBool = AtomicBool::new(false);
/// `cuptiFinalize` calls made at an API callback's exit site, and elsewhere.
static FINALIZES: AtomicU32 = AtomicU32::new(0);
static FINALIZES_ELSEWHERE: AtomicU32 = AtomicU32::new(0);
/// Kernel records made (kernel records on at the launch), for a test to match against what
/// a viewer got.
static KERNEL_RECORDS: AtomicU32 = AtomicU32::new(0);

thread_local! {
    /// This thread is inside the subscriber's callback for an API call's exit.
    static IN_EXIT_CALLBACK: Cell<bool> = const { Cell::new(false) };
}

/// Every CUPTI call attaches CUPTI, as the real one initializes itself on first use.
fn touch() {
    ATTACHED.store(true, Relaxed);
}

/// CUPTI's clock, as the real one keeps it on Linux: CLOCK_REALTIME in nanoseconds (the
/// viewer's CPU samples are stamped on the same clock).
fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

// ------------------------------------------------------------------ the CUPTI calls

#[no_mangle]
pub unsafe extern "C" fn cuptiSubscribe(
    sub: *mut cu::CUpti_SubscriberHandle,
    cb: cu::CUpti_CallbackFunc,
    ud: *mut c_void,
) -> R {
    touch();
    // Only where a test asks for it: loaded by mistake (it is built as target/*/libcupti.so),
    // it must not pass for CUPTI.
    if std::env::var("GAPTOP_FAKE_CUPTI").map_or(true, |v| v != "1") {
        return R::CUPTI_ERROR_NOT_INITIALIZED;
    }
    let mut s = lock();
    // FAKE_CUPTI_BUSY=1: another profiler holds CUPTI.
    if s.callback.is_some() || std::env::var_os("FAKE_CUPTI_BUSY").is_some() {
        return R::CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    }
    s.callback = cb;
    s.userdata = ud as usize;
    *sub = 1 as cu::CUpti_SubscriberHandle;
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuptiUnsubscribe(_: cu::CUpti_SubscriberHandle) -> R {
    touch();
    let mut s = lock();
    s.callback = None;
    s.enabled.clear();
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuptiGetCallbackName(
    domain: cu::CUpti_CallbackDomain,
    cbid: u32,
    name: *mut *const c_char,
) -> R {
    touch();
    match lock().call_names.get(&(domain as u32, cbid)) {
        Some(n) => {
            *name = n.as_ptr();
            R::CUPTI_SUCCESS
        }
        None => R::CUPTI_ERROR_INVALID_PARAMETER,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuptiEnableCallback(
    on: u32,
    _: cu::CUpti_SubscriberHandle,
    domain: cu::CUpti_CallbackDomain,
    cbid: u32,
) -> R {
    touch();
    let mut s = lock();
    if on != 0 {
        s.enabled.insert((domain as u32, cbid));
    } else {
        s.enabled.remove(&(domain as u32, cbid));
    }
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuptiEnableDomain(
    on: u32,
    _: cu::CUpti_SubscriberHandle,
    domain: cu::CUpti_CallbackDomain,
) -> R {
    touch();
    let mut s = lock();
    let d = domain as u32;
    if on == 0 {
        s.enabled.retain(|&(dd, _)| dd != d);
    } else {
        for (dd, id, _) in CALLS {
            if dd == d {
                s.enabled.insert((dd, id));
            }
        }
    }
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuptiActivityRegisterCallbacks(
    request: cu::CUpti_BuffersCallbackRequestFunc,
    complete: cu::CUpti_BuffersCallbackCompleteFunc,
) -> R {
    touch();
    let mut s = lock();
    s.request = request;
    s.complete = complete;
    R::CUPTI_SUCCESS
}

fn set_activity(kind: cu::CUpti_ActivityKind, on: bool) {
    use cu::CUpti_ActivityKind as K;
    let mut s = lock();
    match kind {
        K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL => s.kernels_on = on,
        K::CUPTI_ACTIVITY_KIND_MARKER => s.markers_on = on,
        _ => {}
    }
}

#[no_mangle]
pub extern "C" fn cuptiActivityEnable(kind: cu::CUpti_ActivityKind) -> R {
    touch();
    set_activity(kind, true);
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuptiActivityDisable(kind: cu::CUpti_ActivityKind) -> R {
    touch();
    set_activity(kind, false);
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuptiActivityFlushAll(flag: u32) -> R {
    touch();
    // FAKE_FLUSH_DELAY_MS=N: an unforced flush takes its buffer, then hands it over N ms later,
    // as a slow completion would: another flush meanwhile finds no buffer to complete.
    let delay = std::env::var("FAKE_FLUSH_DELAY_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|_| flag == 0);
    match delay {
        Some(ms) => {
            let buf = lock().buffer.take();
            std::thread::sleep(std::time::Duration::from_millis(ms));
            complete(buf);
        }
        None => flush(),
    }
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuptiActivityGetNextRecord(
    buffer: *mut u8,
    valid: usize,
    rec: *mut *mut cu::CUpti_Activity,
) -> R {
    touch();
    let next = if (*rec).is_null() {
        buffer
    } else {
        ((*rec) as *mut u8).add(RECORD)
    };
    if next.add(RECORD) > buffer.add(valid) {
        return R::CUPTI_ERROR_MAX_LIMIT_REACHED;
    }
    *rec = next as *mut cu::CUpti_Activity;
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuptiActivityGetNumDroppedRecords(
    _: cudarc::driver::sys::CUcontext,
    _: u32,
    dropped: *mut usize,
) -> R {
    touch();
    let mut s = lock();
    *dropped = std::mem::take(&mut s.dropped);
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuptiGetTimestamp(t: *mut u64) -> R {
    touch();
    *t = now();
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub unsafe extern "C" fn cuptiGetResultString(_: R, s: *mut *const c_char) -> R {
    touch();
    *s = c"gaptop's test double of libcupti (tests set GAPTOP_FAKE_CUPTI=1)".as_ptr();
    R::CUPTI_SUCCESS
}

/// Checks each attribute's value size as CUPTI does (uint8_t flags, size_t sizes), refuses a
/// device-buffer pre-allocation over the default pool limit (250) as CUPTI documents, and logs
/// what it accepted under FAKE_ATTR_LOG.
#[no_mangle]
pub unsafe extern "C" fn cuptiActivitySetAttribute(
    attr: cu::CUpti_ActivityAttribute,
    size: *mut usize,
    value: *mut c_void,
) -> R {
    touch();
    use cu::CUpti_ActivityAttribute as A;
    if size.is_null() || value.is_null() {
        return R::CUPTI_ERROR_INVALID_PARAMETER;
    }
    let flag = matches!(
        attr,
        A::CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER
            | A::CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED
            | A::CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER
    );
    let v = match (flag, *size) {
        (true, 1) => *(value as *const u8) as usize,
        (false, n) if n == std::mem::size_of::<usize>() => *(value as *const usize),
        _ => return R::CUPTI_ERROR_INVALID_PARAMETER,
    };
    if attr == A::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE && v >= 250 {
        return R::CUPTI_ERROR_INVALID_PARAMETER;
    }
    if std::env::var_os("FAKE_ATTR_LOG").is_some() {
        eprintln!("FAKE attribute {}={v}", attr as u32);
    }
    R::CUPTI_SUCCESS
}

#[no_mangle]
pub extern "C" fn cuptiActivityEnableHWTrace(_: u8) -> R {
    touch();
    R::CUPTI_ERROR_NOT_SUPPORTED
}

#[no_mangle]
pub extern "C" fn cuptiActivityEnableRuntimeApi(_: u32, _: u8) -> R {
    touch();
    R::CUPTI_ERROR_NOT_SUPPORTED
}

#[no_mangle]
pub extern "C" fn cuptiActivityEnableDriverApi(_: u32, _: u8) -> R {
    touch();
    R::CUPTI_ERROR_NOT_SUPPORTED
}

#[no_mangle]
pub extern "C" fn cuptiSetThreadIdType(t: cu::CUpti_ActivityThreadIdType) -> R {
    touch();
    lock().system_tids = t == cu::CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM;
    R::CUPTI_SUCCESS
}

/// Detaches CUPTI from the process: everything the subscriber set up ends (a buffer being
/// filled is handed back first). Counted apart when not made at an API exit callback, the
/// place CUPTI documents.
#[no_mangle]
pub extern "C" fn cuptiFinalize() -> R {
    flush();
    {
        let mut s = lock();
        s.callback = None;
        s.enabled.clear();
        s.kernels_on = false;
        s.markers_on = false;
        s.request = None;
        s.complete = None;
    }
    if IN_EXIT_CALLBACK.with(|c| c.get()) {
        FINALIZES.fetch_add(1, Relaxed);
    } else {
        FINALIZES_ELSEWHERE.fetch_add(1, Relaxed);
    }
    ATTACHED.store(false, Relaxed);
    R::CUPTI_SUCCESS
}

// ------------------------------------------------------------------ the program's side

/// Runs the subscriber's callback for one site of a call, if enabled. Called without the lock:
/// the callback may call back into CUPTI.
unsafe fn callback(domain: u32, cbid: u32, enter: bool, corr: u32, symbol: *const c_char) {
    let (cb, ud, on, name) = {
        let s = lock();
        (
            s.callback,
            s.userdata,
            s.enabled.contains(&(domain, cbid)),
            s.call_names.get(&(domain, cbid)).map(|n| n.as_ptr()),
        )
    };
    let (Some(cb), true) = (cb, on) else { return };
    let data = cu::CUpti_CallbackData {
        callbackSite: if enter {
            cu::CUpti_ApiCallbackSite::CUPTI_API_ENTER
        } else {
            cu::CUpti_ApiCallbackSite::CUPTI_API_EXIT
        },
        functionName: name.unwrap_or(std::ptr::null()),
        functionParams: std::ptr::null(),
        functionReturnValue: std::ptr::null_mut(),
        symbolName: symbol,
        context: std::ptr::null_mut(),
        contextUid: 1,
        correlationData: std::ptr::null_mut(),
        correlationId: corr,
    };
    let dom: cu::CUpti_CallbackDomain = std::mem::transmute(domain);
    IN_EXIT_CALLBACK.with(|c| c.set(!enter));
    cb(
        ud as *mut c_void,
        dom,
        cbid,
        &data as *const _ as *const c_void,
    );
    IN_EXIT_CALLBACK.with(|c| c.set(false));
}

/// Hands the buffer being filled to the collector.
fn flush() {
    let buf = lock().buffer.take();
    complete(buf);
}

/// Hands a buffer taken from the state (address, size, used) to the collector.
fn complete(buf: Option<(usize, usize, usize)>) {
    let complete = lock().complete;
    if let (Some(complete), Some((p, size, used))) = (complete, buf) {
        unsafe { complete(std::ptr::null_mut(), 0, p as *mut u8, size, used) };
    }
}

/// Appends a record in a slot of its own, asking for a buffer when there is none or the current
/// one is full.
fn record<T: Copy>(k: &T) {
    const { assert!(std::mem::size_of::<T>() <= RECORD) };
    for _ in 0..2 {
        let want = {
            let mut s = lock();
            match s.buffer {
                Some((p, size, used)) if used + RECORD <= size => {
                    unsafe {
                        std::ptr::write_bytes((p + used) as *mut u8, 0, RECORD);
                        std::ptr::write_unaligned((p + used) as *mut T, *k);
                    }
                    s.buffer = Some((p, size, used + RECORD));
                    return;
                }
                Some(_) => None,
                None => s.request,
            }
        };
        match want {
            None => flush(),
            Some(request) => {
                let (mut p, mut size, mut max) = (std::ptr::null_mut(), 0usize, 0usize);
                unsafe { request(&mut p, &mut size, &mut max) };
                let mut s = lock();
                if p.is_null() || size < RECORD {
                    s.dropped += 1;
                    return;
                }
                s.buffer = Some((p as usize, size, 0));
            }
        }
    }
}

/// A kernel launch through the runtime API: `cudaLaunchKernel`'s callbacks, with the driver's
/// `cuLaunchKernel` nested inside, then the kernel's record (when kernel records are on). The
/// kernel starts 2 µs after the call returns or when the previous one ends, and runs `dur_ns`.
/// Returns the launch's correlation id.
#[no_mangle]
pub unsafe extern "C" fn fake_launch(kernel: *const c_char, dur_ns: u64) -> u32 {
    let name = CStr::from_ptr(kernel).to_string_lossy().into_owned();
    let (corr, symbol) = {
        let mut s = lock();
        let corr = s.corr;
        s.corr += 2;
        let sym = s
            .names
            .entry(name.clone())
            .or_insert_with(|| CString::new(name).unwrap())
            .as_ptr();
        (corr, sym)
    };
    // CUPTI gives the driver call a runtime call makes the runtime call's correlation id (as
    // every recording from the H200 shows); FAKE_DRIVER_OWN_CORR=1 gives it one of its own.
    let inner = if std::env::var("FAKE_DRIVER_OWN_CORR").is_ok_and(|v| v == "1") {
        corr + 1
    } else {
        corr
    };
    callback(RUNTIME, RT_LAUNCH, true, corr, symbol);
    callback(DRIVER, DRV_LAUNCH, true, inner, symbol);
    callback(DRIVER, DRV_LAUNCH, false, inner, symbol);
    callback(RUNTIME, RT_LAUNCH, false, corr, symbol);
    let returned = now();
    let (on, start) = {
        let mut s = lock();
        let start = s.gpu_free.max(returned + 2_000);
        s.gpu_free = start + dur_ns;
        (s.kernels_on, start)
    };
    if on {
        let mut k: Record = std::mem::zeroed();
        k.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k.start = start;
        k.end = start + dur_ns;
        k.correlationId = corr;
        k.streamId = 7;
        k.deviceId = 0;
        k.contextId = 1;
        k.name = symbol;
        record(&k);
        KERNEL_RECORDS.fetch_add(1, Relaxed);
    }
    corr
}

/// `cudaDeviceSynchronize`: its callbacks around a wait for the fake GPU to be free.
#[no_mangle]
pub unsafe extern "C" fn fake_synchronize() {
    let corr = {
        let mut s = lock();
        s.corr += 1;
        s.corr - 1
    };
    callback(RUNTIME, RT_SYNC, true, corr, std::ptr::null());
    loop {
        let free = lock().gpu_free;
        let t = now();
        if t >= free {
            break;
        }
        std::thread::sleep(std::time::Duration::from_nanos(free - t));
    }
    callback(RUNTIME, RT_SYNC, false, corr, std::ptr::null());
}

/// How many callbacks are enabled (for tests of the collector's choices).
#[no_mangle]
pub extern "C" fn fake_enabled_callbacks() -> u32 {
    lock().enabled.len() as u32
}

/// 1 while CUPTI is attached to the process (a CUPTI call since the start or the last
/// finalize), else 0.
#[no_mangle]
pub extern "C" fn fake_cupti_attached() -> u32 {
    ATTACHED.load(Relaxed) as u32
}

/// `cuptiFinalize` calls made at an API exit callback; with `elsewhere`, those made anywhere
/// else.
#[no_mangle]
pub extern "C" fn fake_finalizes(elsewhere: u32) -> u32 {
    if elsewhere != 0 {
        FINALIZES_ELSEWHERE.load(Relaxed)
    } else {
        FINALIZES.load(Relaxed)
    }
}

/// Kernel records made since the start.
#[no_mangle]
pub extern "C" fn fake_kernel_records() -> u32 {
    KERNEL_RECORDS.load(Relaxed)
}

// ------------------------------------------------------------------ NVTX

/// Whether NVTX would reach CUPTI: NVTX_INJECTION64_PATH names the file this library was
/// loaded from (as NVTX loads the library it names and hands it its calls).
fn nvtx_injected() -> bool {
    static INJECTED: OnceLock<bool> = OnceLock::new();
    *INJECTED.get_or_init(|| {
        let Some(named) = std::env::var_os("NVTX_INJECTION64_PATH") else {
            return false;
        };
        let here = nvtx_injected as *const () as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let loaded = maps.lines().find_map(|l| {
            let (range, rest) = l.split_once(' ')?;
            let (a, b) = range.split_once('-')?;
            let (a, b) = (
                usize::from_str_radix(a, 16).ok()?,
                usize::from_str_radix(b, 16).ok()?,
            );
            (a <= here && here < b).then(|| rest.split_whitespace().nth(4).map(str::to_string))?
        });
        let canon = |p: &std::path::Path| std::fs::canonicalize(p).ok();
        loaded.is_some_and(|l| canon(l.as_ref()) == canon(named.as_ref()))
    })
}

/// The calling thread's system id.
fn gettid() -> u32 {
    std::fs::read_link("/proc/thread-self")
        .ok()
        .and_then(|p| p.file_name()?.to_str()?.parse().ok())
        .unwrap_or(0)
}

thread_local! {
    /// Marker ids of the ranges this thread pushed and has not popped, innermost last.
    static PUSHED: std::cell::RefCell<Vec<u32>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One NVTX marker record, when NVTX would reach CUPTI and marker records are on.
unsafe fn marker(
    flags: cu::CUpti_ActivityFlag,
    id: u32,
    name: *const c_char,
    domain: *const c_char,
) {
    let (on, system) = {
        let s = lock();
        (s.markers_on, s.system_tids)
    };
    if !on || !nvtx_injected() {
        return;
    }
    let keep = |p: *const c_char| -> *const c_char {
        if p.is_null() {
            return p;
        }
        let text = CStr::from_ptr(p).to_string_lossy().into_owned();
        lock()
            .names
            .entry(text.clone())
            .or_insert_with(|| CString::new(text).unwrap())
            .as_ptr()
    };
    let tid = gettid();
    let mut m: cu::CUpti_ActivityMarker2 = std::mem::zeroed();
    m.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MARKER;
    m.flags = flags;
    m.timestamp = now();
    m.id = id;
    m.objectKind = cu::CUpti_ActivityObjectKind::CUPTI_ACTIVITY_OBJECT_THREAD;
    m.objectId = cu::CUpti_ActivityObjectKindId {
        pt: cu::CUpti_ActivityObjectKindId__bindgen_ty_1 {
            processId: std::process::id(),
            // CUPTI's default thread ids are pthread_self()'s, not the system's.
            threadId: if system { tid } else { !tid },
        },
    };
    m.name = keep(name);
    m.domain = keep(domain);
    record(&m);
}

fn next_marker_id() -> u32 {
    let mut s = lock();
    s.marker_id += 1;
    s.marker_id
}

/// `nvtxRangePushA` (or `nvtxDomainRangePushEx` with `domain` not null): a start marker.
/// Returns the range's marker id.
#[no_mangle]
pub unsafe extern "C" fn fake_nvtx_push(name: *const c_char, domain: *const c_char) -> u32 {
    let id = next_marker_id();
    PUSHED.with(|p| p.borrow_mut().push(id));
    marker(
        cu::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_MARKER_START,
        id,
        name,
        domain,
    );
    id
}

/// `nvtxRangePop`: the end marker of this thread's innermost pushed range (none if it has none).
#[no_mangle]
pub unsafe extern "C" fn fake_nvtx_pop() {
    if let Some(id) = PUSHED.with(|p| p.borrow_mut().pop()) {
        marker(
            cu::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_MARKER_END,
            id,
            std::ptr::null(),
            std::ptr::null(),
        );
    }
}

/// `nvtxMarkA`: an instantaneous marker.
#[no_mangle]
pub unsafe extern "C" fn fake_nvtx_mark(name: *const c_char) {
    let id = next_marker_id();
    marker(
        cu::CUpti_ActivityFlag::CUPTI_ACTIVITY_FLAG_MARKER_INSTANTANEOUS,
        id,
        name,
        std::ptr::null(),
    );
}

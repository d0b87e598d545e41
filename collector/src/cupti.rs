//! The safe CUPTI layer: the only module that calls into libcupti (`cudarc::cupti::sys`).
//! Each function wraps one CUPTI call (or a few of one kind) and returns what CUPTI said as a
//! `Result`; callers decide, visibly, which refusals they ignore. (`records` names CUPTI's
//! record types too, for their layouts only.)
//!
//! Rules for every caller (each call site says which one it keeps):
//! - libcupti is loaded on first use: nothing here may be called before `is_present` said
//!   yes (it would panic). `setup::start` asks first; every other caller runs only once
//!   `COLLECTOR` is set, which `start` does after asking.
//! - CUPTI calls gaptop back: API callbacks and buffer requests on the launching threads,
//!   buffer completions on CUPTI's own thread or inside a flush, on the flushing thread. Those
//!   callbacks take the collector's locks, so no call that can lead CUPTI to call back
//!   (switching callbacks or activity kinds, flushing) is made with a collector lock held.
//!   Only the buffer walk (`Records`), which never calls back, runs under one: `kernel_names`.
//! - Inside gaptop's own callbacks only `timestamp`, the buffer walk and `dropped_records`
//!   are called, plus `go_quiet`'s switches in the completion callback's panic path; never a
//!   flush, which runs completions itself and could re-enter the one that is running.

use std::borrow::Cow;
use std::ffi::{c_char, c_void, CStr};
use std::fmt;

use cudarc::cupti::sys as cu;

use crate::switches::CuptiAttr;

/// What CUPTI answered when it did not succeed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Error(cu::CUptiResult);

pub(crate) type Result<T> = std::result::Result<T, Error>;

#[inline]
fn check(r: cu::CUptiResult) -> Result<()> {
    if r == cu::CUptiResult::CUPTI_SUCCESS {
        Ok(())
    } else {
        Err(Error(r))
    }
}

impl Error {
    /// CUPTI's own words for the error (`cuptiGetResultString`), or the code's name.
    pub(crate) fn message(self) -> String {
        let mut s: *const c_char = std::ptr::null();
        // SAFETY: `s` is a valid out-pointer for the call; CUPTI leaves it null or points it at
        // a static NUL-terminated string, which is only read here.
        unsafe {
            cu::cuptiGetResultString(self.0, &mut s);
        }
        if s.is_null() {
            format!("{:?}", self.0)
        } else {
            // SAFETY: non-null, so CUPTI pointed it at its static NUL-terminated message.
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        }
    }

    /// `"{what} failed: {message}"`, as gaptop says a refused set-up step.
    pub(crate) fn failed(self, what: &str) -> String {
        format!("{what} failed: {}", self.message())
    }
}

/// The result code's name (`CUPTI_ERROR_...`).
impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

/// Whether libcupti can be loaded (from the library path, as CUDA finds it).
pub(crate) fn is_present() -> bool {
    // SAFETY: this only tries to load libcupti, running its initializers, as CUDA itself does
    // before calling an injected library; nothing else is called.
    unsafe { cu::is_culib_present() }
}

/// CUPTI's clock, in ns (the timebase of its activity records); 0 if CUPTI cannot read it.
/// On the API callbacks' hot path (twice per timed call): one CUPTI call, nothing else.
#[inline]
pub(crate) fn timestamp() -> u64 {
    let mut t = 0u64;
    // SAFETY: `t` is a valid out-pointer; CUPTI writes one u64 there or nothing.
    unsafe {
        cu::cuptiGetTimestamp(&mut t);
    }
    t
}

// ------------------------------------------------------------------ API callbacks

/// The API callback domains gaptop subscribes to, driver first (as `CallNames::api` is
/// indexed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Domain {
    Driver,
    Runtime,
}

impl Domain {
    pub(crate) const ALL: [Domain; 2] = [Domain::Driver, Domain::Runtime];

    fn raw(self) -> cu::CUpti_CallbackDomain {
        match self {
            Domain::Driver => cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API,
            Domain::Runtime => cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API,
        }
    }
}

/// A callback domain as CUPTI passes it to an API callback.
pub(crate) type RawDomain = cu::CUpti_CallbackDomain;
/// A callback id within its domain.
pub(crate) type CallbackId = cu::CUpti_CallbackId;

/// What CUPTI tells an API callback about the call (its `CUpti_CallbackData`), read in place.
#[derive(Clone, Copy)]
pub(crate) struct ApiCall<'a>(&'a cu::CUpti_CallbackData);

/// The call an API callback is about: its domain's index in `Domain::ALL` and CUPTI's data
/// for it. None for other domains (whose data is laid out otherwise) and for null data.
///
/// # Safety
/// `domain` and `data` must be as CUPTI passed them to the callback that is running, and the
/// result must not outlive that callback.
#[inline]
pub(crate) unsafe fn api_call<'a>(
    domain: RawDomain,
    data: *const c_void,
) -> Option<(usize, ApiCall<'a>)> {
    let di = match domain {
        cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_DRIVER_API => 0,
        cu::CUpti_CallbackDomain::CUPTI_CB_DOMAIN_RUNTIME_API => 1,
        _ => return None,
    };
    // SAFETY: in the driver and runtime domains a non-null `data` is CUPTI's
    // `CUpti_CallbackData` for the call, valid and unchanged while the callback runs (the
    // contract above).
    let d = unsafe { (data as *const cu::CUpti_CallbackData).as_ref() }?;
    Some((di, ApiCall(d)))
}

impl ApiCall<'_> {
    /// The callback at the call's entry (else at its exit).
    #[inline]
    pub(crate) fn is_enter(self) -> bool {
        matches!(
            self.0.callbackSite,
            cu::CUpti_ApiCallbackSite::CUPTI_API_ENTER
        )
    }

    #[inline]
    pub(crate) fn correlation_id(self) -> u32 {
        self.0.correlationId
    }

    /// The launched kernel's symbol, by address (0 for calls that launch none); only
    /// compared, never read.
    #[inline]
    pub(crate) fn symbol(self) -> usize {
        self.0.symbolName as usize
    }
}

/// The API callback CUPTI calls (`CUpti_CallbackFunc`).
pub(crate) type ApiCallback =
    unsafe extern "C" fn(*mut c_void, RawDomain, CallbackId, *const c_void);

/// gaptop's CUPTI subscriber. Only `subscribe` makes one and only `unsubscribe` ends it, so a
/// live value is a live handle (kept as an address: CUPTI's handle is an opaque token that may
/// be used from any thread).
pub(crate) struct Subscriber(usize);

/// Subscribes `callback` to CUPTI's callbacks (none enabled yet). CUPTI takes one subscriber
/// per process: this fails when another profiler holds it.
pub(crate) fn subscribe(callback: ApiCallback) -> Result<Subscriber> {
    let mut sub: cu::CUpti_SubscriberHandle = std::ptr::null_mut();
    // SAFETY: `sub` is a valid out-pointer; `callback` has CUPTI's callback signature and
    // lives for the whole process, and its user data (null) is never read.
    check(unsafe { cu::cuptiSubscribe(&mut sub, Some(callback), std::ptr::null_mut()) })?;
    Ok(Subscriber(sub as usize))
}

impl Subscriber {
    fn handle(&self) -> cu::CUpti_SubscriberHandle {
        self.0 as cu::CUpti_SubscriberHandle
    }

    /// Ends the subscription (set-up failing after it).
    pub(crate) fn unsubscribe(self) -> Result<()> {
        // SAFETY: the handle is live (see `Subscriber`) and not used again: `self` is consumed.
        check(unsafe { cu::cuptiUnsubscribe(self.handle()) })
    }

    /// The subscription `finalize` ended: the handle is dead and is dropped unused.
    pub(crate) fn finalized(self) {}

    /// Switches one API callback on or off.
    pub(crate) fn enable_callback(&self, domain: Domain, cbid: u32, on: bool) -> Result<()> {
        // SAFETY: the handle is live (see `Subscriber`); the other arguments are plain values
        // CUPTI checks.
        check(unsafe { cu::cuptiEnableCallback(on as u32, self.handle(), domain.raw(), cbid) })
    }

    /// Switches a whole domain's callbacks off.
    pub(crate) fn disable_domain(&self, domain: Domain) -> Result<()> {
        // SAFETY: as in `enable_callback`.
        check(unsafe { cu::cuptiEnableDomain(0, self.handle(), domain.raw()) })
    }
}

/// Detaches CUPTI from the process (`cuptiFinalize`): every subscription, enabled callback
/// and activity kind ends, and the program runs on as if CUPTI had never been loaded; any
/// later CUPTI call attaches it again. CUPTI asks for it to be called at the exit site of a
/// CUDA API callback, once activity is off and its buffers flushed: `callbacks::on_api` calls
/// it there, at most once per detach (see `dormant`). The subscriber it ended must be dropped
/// with `Subscriber::finalized`.
pub(crate) fn finalize() -> Result<()> {
    // SAFETY: takes no arguments; its preconditions (activity off, buffers flushed, called
    // from an API exit callback) are kept by its only caller.
    check(unsafe { cu::cuptiFinalize() })
}

/// The name of callback `cbid` in `domain` (None where this CUPTI has no such callback).
pub(crate) fn callback_name(domain: Domain, cbid: u32) -> Option<Cow<'static, str>> {
    let mut p: *const c_char = std::ptr::null();
    // SAFETY: `p` is a valid out-pointer; CUPTI checks the domain and id.
    let r = check(unsafe { cu::cuptiGetCallbackName(domain.raw(), cbid, &mut p) });
    if r.is_err() || p.is_null() {
        return None;
    }
    // SAFETY: CUPTI pointed `p` at a NUL-terminated name in its static tables, which live as
    // long as libcupti, which is never unloaded.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy())
}

// ------------------------------------------------------------------ activity

/// The activity kinds gaptop enables. `GPU` lists the GPU ones in the order
/// `Switches::gpu_kinds` counts them (kernels, copies, memsets), then synchronizations and NVTX
/// markers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Activity {
    Kernel,
    Memcpy,
    Memset,
    Synchronization,
    /// NVTX ranges and marks, which CUPTI records once NVTX_INJECTION64_PATH names libcupti.
    Marker,
    /// API records (GAPTOP_API_ACTIVITY=2).
    Driver,
    Runtime,
}

impl Activity {
    /// What `go_quiet` switches off.
    pub(crate) const GPU: [Activity; 5] = [
        Activity::Kernel,
        Activity::Memcpy,
        Activity::Memset,
        Activity::Synchronization,
        Activity::Marker,
    ];

    fn raw(self) -> cu::CUpti_ActivityKind {
        use cu::CUpti_ActivityKind as K;
        match self {
            Activity::Kernel => K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
            Activity::Memcpy => K::CUPTI_ACTIVITY_KIND_MEMCPY,
            Activity::Memset => K::CUPTI_ACTIVITY_KIND_MEMSET,
            Activity::Synchronization => K::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
            Activity::Marker => K::CUPTI_ACTIVITY_KIND_MARKER,
            Activity::Driver => K::CUPTI_ACTIVITY_KIND_DRIVER,
            Activity::Runtime => K::CUPTI_ACTIVITY_KIND_RUNTIME,
        }
    }
}

pub(crate) fn enable_activity(kind: Activity) -> Result<()> {
    // SAFETY: a plain value CUPTI checks.
    check(unsafe { cu::cuptiActivityEnable(kind.raw()) })
}

pub(crate) fn disable_activity(kind: Activity) -> Result<()> {
    // SAFETY: a plain value CUPTI checks.
    check(unsafe { cu::cuptiActivityDisable(kind.raw()) })
}

/// Switches CUPTI's API records on or off for one call (GAPTOP_API_ACTIVITY).
pub(crate) fn enable_api_record(domain: Domain, cbid: u32, on: bool) -> Result<()> {
    // SAFETY: plain values CUPTI checks.
    check(unsafe {
        match domain {
            Domain::Driver => cu::cuptiActivityEnableDriverApi(cbid, on as u8),
            Domain::Runtime => cu::cuptiActivityEnableRuntimeApi(cbid, on as u8),
        }
    })
}

/// API and marker records carry the system's thread ids (as the callbacks' records do).
pub(crate) fn use_system_thread_ids() -> Result<()> {
    // SAFETY: a plain value CUPTI checks.
    check(unsafe {
        cu::cuptiSetThreadIdType(
            cu::CUpti_ActivityThreadIdType::CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM,
        )
    })
}

/// Hardware kernel timestamps instead of instrumented launches (GAPTOP_HWTRACE).
pub(crate) fn enable_hw_trace() -> Result<()> {
    // SAFETY: a plain value CUPTI checks.
    check(unsafe { cu::cuptiActivityEnableHWTrace(1) })
}

/// CUPTI activity attributes gaptop sets: zeroed buffers (always asked for), and those
/// GAPTOP_CUPTI_ATTRS names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Attribute {
    ZeroedBuffers,
    Switch(CuptiAttr),
}

/// An attribute's value, at the size CUPTI reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AttrValue {
    /// A uint8_t.
    Flag(u8),
    /// A size_t.
    Size(usize),
}

/// Sets an activity attribute; before any activity kind is enabled, for those CUPTI reads
/// only then.
pub(crate) fn set_attribute(attr: Attribute, value: AttrValue) -> Result<()> {
    use cu::CUpti_ActivityAttribute as K;
    let key = match attr {
        Attribute::ZeroedBuffers => K::CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER,
        Attribute::Switch(a) => match a {
            CuptiAttr::DeviceBuffer => K::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE,
            CuptiAttr::DeviceBufferPool => K::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_POOL_LIMIT,
            CuptiAttr::DeviceBufferPrealloc => {
                K::CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_PRE_ALLOCATE_VALUE
            }
            CuptiAttr::HostPinned => K::CUPTI_ACTIVITY_ATTR_MEM_ALLOCATION_TYPE_HOST_PINNED,
            CuptiAttr::PerThread => K::CUPTI_ACTIVITY_ATTR_PER_THREAD_ACTIVITY_BUFFER,
        },
    };
    let (mut flag, mut size): (u8, usize);
    let (mut len, ptr) = match value {
        AttrValue::Flag(v) => {
            flag = v;
            (1, &mut flag as *mut u8 as *mut c_void)
        }
        AttrValue::Size(v) => {
            size = v;
            (
                std::mem::size_of::<usize>(),
                &mut size as *mut usize as *mut c_void,
            )
        }
    };
    // SAFETY: `ptr` points to `len` bytes of a live local of the size CUPTI reads for `key`;
    // `len` is a valid in/out pointer.
    check(unsafe { cu::cuptiActivitySetAttribute(key, &mut len, ptr) })
}

/// CUPTI's buffer-request callback (`CUpti_BuffersCallbackRequestFunc`).
pub(crate) type BufferRequested = unsafe extern "C" fn(*mut *mut u8, *mut usize, *mut usize);
/// The context a completed buffer's records came from (null for device-independent ones).
pub(crate) type Context = cudarc::driver::sys::CUcontext;
/// CUPTI's buffer-completion callback (`CUpti_BuffersCallbackCompleteFunc`).
pub(crate) type BufferCompleted = unsafe extern "C" fn(Context, u32, *mut u8, usize, usize);

/// Hands CUPTI the functions that give it activity buffers and take them back full.
pub(crate) fn register_buffers(
    requested: BufferRequested,
    completed: BufferCompleted,
) -> Result<()> {
    // SAFETY: both have CUPTI's signatures and live for the whole process.
    check(unsafe { cu::cuptiActivityRegisterCallbacks(Some(requested), Some(completed)) })
}

/// Held through a flush: one flush at a time. A detach's flush that ran beside the sender's
/// could find the buffer already taken by it and return before that buffer's records were
/// queued; collection then went off and they were dropped. Waiting here, the detach's flush
/// starts once the sender's records are queued. Never taken inside a completion (which calls
/// no flush), and every caller holds no other lock of ours.
static FLUSHING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Asks CUPTI to complete its buffers now; `forced` also completes those still being
/// filled. CUPTI may run the completion callback on this thread, inside this call.
pub(crate) fn flush_all(forced: bool) -> Result<()> {
    let _one = FLUSHING.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: a plain flag (CUPTI_ACTIVITY_FLAG_FLUSH_FORCED is 1).
    check(unsafe { cu::cuptiActivityFlushAll(forced as u32) })
}

/// The records of one completed activity buffer, by address, in CUPTI's order.
pub(crate) struct Records {
    buffer: *mut u8,
    valid: usize,
    at: *mut cu::CUpti_Activity,
}

impl Records {
    /// # Safety
    /// `buffer` must be a buffer CUPTI handed to the completion callback, with `valid` bytes
    /// of records, alive and unchanged while the iterator and the records it gives are used.
    pub(crate) unsafe fn new(buffer: *mut u8, valid: usize) -> Records {
        Records {
            buffer,
            valid,
            at: std::ptr::null_mut(),
        }
    }
}

impl Iterator for Records {
    type Item = *const u8;

    /// May run with `kernel_names` held: it only walks the buffer and never calls back.
    fn next(&mut self) -> Option<*const u8> {
        // SAFETY: `buffer` and `valid` describe a completed CUPTI buffer (`Records::new`), and
        // `at` is null or the record CUPTI's last step gave, as the call expects.
        let r = unsafe { cu::cuptiActivityGetNextRecord(self.buffer, self.valid, &mut self.at) };
        check(r).ok().map(|()| self.at as *const u8)
    }
}

/// How many records CUPTI dropped for `ctx`'s `stream` (its buffers were not there in time).
///
/// # Safety
/// `ctx` and `stream` must be as CUPTI passed them to the completion callback.
pub(crate) unsafe fn dropped_records(ctx: Context, stream: u32) -> Result<usize> {
    let mut dropped = 0usize;
    // SAFETY: `ctx` is CUPTI's own handle (contract above); `dropped` is a valid out-pointer.
    check(unsafe { cu::cuptiActivityGetNumDroppedRecords(ctx, stream, &mut dropped) })?;
    Ok(dropped)
}

//! The API callbacks: CUPTI calls `on_api` at the entry and exit of each CUDA call gaptop
//! follows, on the thread making the call. This is the hot path (tens of ns a call): after a
//! thread's first callback it allocates nothing, takes no lock but its own buffer's (and the
//! stack table's for a stack it has not launched from lately), calls CUPTI only for the time,
//! and never blocks on the sender.

use std::cell::RefCell;
use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gaptop_pystack::MAX_DEPTH;
use gaptop_wire as w;

use crate::cupti::{self, ApiCall, CallbackId, Domain, RawDomain};
use crate::limits::{MAX_NATIVE, RECENT_STACKS, THREAD_CAP};
use crate::state::Collector;
use crate::{CB_NOOP, COLLECTOR, EPOCH, FORKED};

/// An API call whose entry callback ran and whose exit has not yet.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct OpenCall {
    pub(crate) start: u64,
    pub(crate) corr: u32,
    pub(crate) stack: u32,
    pub(crate) name: u32,
    pub(crate) kind: u8,
    /// The callback window (see `EPOCH`) the entry was seen in.
    pub(crate) epoch: u32,
}

/// A thread's open API calls, innermost last. With sampled stacks, callbacks are switched off
/// and on while calls are in flight, so an entry may never see its exit, and an exit may come
/// without its entry; both are handled here.
#[derive(Default)]
pub(crate) struct OpenCalls(pub(crate) Vec<OpenCall>);

impl OpenCalls {
    /// The call a new entry is nested in (a runtime call's own driver call), if any. Calls
    /// left open by an earlier callback window have lost their exits: they are forgotten.
    pub(crate) fn enclosing(&mut self, epoch: u32) -> Option<&OpenCall> {
        while self.0.last().is_some_and(|o| o.epoch != epoch) {
            self.0.pop();
        }
        self.0.last()
    }

    /// Closes the call `corr` (and anything left open inside it); None if it was never seen.
    pub(crate) fn close(&mut self, corr: u32) -> Option<OpenCall> {
        let at = self.0.iter().rposition(|o| o.corr == corr)?;
        let call = self.0[at];
        self.0.truncate(at);
        Some(call)
    }
}

/// What a thread keeps for its callbacks, set up at its first one.
struct Local {
    /// Its API records; the sender swaps it for an empty one of the same size. Locked only to
    /// append one record (here) or to swap (the sender).
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

/// Appends an API record to a thread's buffer unless that would grow it; false when dropped.
pub(crate) fn append_api(buf: &mut Vec<u8>, rec: &w::Api) -> bool {
    if buf.len() + w::API_SIZE > buf.capacity() {
        return false;
    }
    w::put_api(buf, rec);
    true
}

/// CUPTI's API callback.
///
/// # Safety
/// As CUPTI calls it: `data` is the callback data of an API-domain callback (or null).
pub(crate) unsafe extern "C" fn on_api(
    _ud: *mut c_void,
    domain: RawDomain,
    cbid: CallbackId,
    data: *const c_void,
) {
    if CB_NOOP.load(Relaxed) {
        return;
    }
    let timed = COLLECTOR
        .get()
        .filter(|c| c.times.on)
        .map(|c| (c, Instant::now()));
    // SAFETY: `domain` and `data` as CUPTI passed them (the contract above); the view of the
    // data does not outlive this callback.
    let call = unsafe { cupti::api_call(domain, data) };
    // A panic must never unwind into CUDA (it would abort the program): contain it.
    let _ = std::panic::catch_unwind(|| api_inner(cbid, call));
    if let Some((c, t0)) = timed {
        c.times
            .cb_ns
            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
        c.times.cb_calls.fetch_add(1, Relaxed);
    }
}

/// `call`: the domain's index and CUPTI's data, None for calls gaptop does not follow.
fn api_inner(cbid: CallbackId, call: Option<(usize, ApiCall)>) {
    // Relaxed loads: these flags only switch the callbacks off, and a callback that runs just
    // after one changed does no harm (FORKED: the child is a single thread when it is set).
    if FORKED.load(Relaxed) {
        return;
    }
    let Some(c) = COLLECTOR.get() else { return };
    let Some((di, d)) = call else { return };
    // A detach waiting for an API exit to finalize CUPTI at (the place CUPTI asks for).
    if let Some(s) = &c.session {
        if !d.is_enter() && s.finalize_due() {
            s.finalize_here();
            return;
        }
    }
    if !c.active.load(Relaxed) {
        return;
    }
    let Some(&(name, kind)) = c.calls().api[di].get(cbid as usize) else {
        return;
    };
    if name == 0 {
        return;
    }
    let enter = d.is_enter();
    let _ = LOCAL.try_with(|l| {
        let Ok(mut l) = l.try_borrow_mut() else {
            return;
        };
        // A thread's first timed call sets up its buffers, once, at their final sizes.
        let l = l.get_or_insert_with(|| {
            let buf = Arc::new(Mutex::new(Vec::with_capacity(THREAD_CAP)));
            c.out
                .threads
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(buf.clone());
            Local {
                buf,
                // SAFETY: gettid takes no arguments and cannot fail.
                tid: unsafe { libc::syscall(libc::SYS_gettid) } as u32,
                open: OpenCalls(Vec::with_capacity(8)),
                frames: Vec::with_capacity(MAX_DEPTH),
                native: Vec::with_capacity(MAX_NATIVE),
                recent: Box::new([(0, 0); RECENT_STACKS]),
                asked: false,
            }
        });
        // Relaxed: what publishes a new window to this thread is the CUPTI call that switched
        // its callbacks back on, made after the increment (see `duty_cycle`).
        let epoch = EPOCH.load(Relaxed);
        if enter {
            // A driver call made by a runtime call shares its stack and its start time: it
            // is only recorded so that either correlation id finds the launch.
            let (start, stack) = match l.open.enclosing(epoch) {
                Some(o) => (o.start, o.stack),
                None => {
                    let site = ((cbid as u64) << 48) ^ d.symbol() as u64;
                    // The one CUPTI call made in a callback; no lock is held.
                    let start = cupti::timestamp();
                    let t0 = c.times.on.then(Instant::now);
                    // SAFETY: this thread is inside the CUDA call CUPTI is calling back for,
                    // so its Python frames hold still while they are walked.
                    let stack = unsafe {
                        c.launch_stack(&mut l.frames, &mut l.native, &mut l.recent[..], site)
                    };
                    if let Some(t0) = t0 {
                        c.times
                            .walk_ns
                            .fetch_add(t0.elapsed().as_nanos() as u64, Relaxed);
                        c.times.walks.fetch_add(1, Relaxed);
                    }
                    (start, stack)
                }
            };
            l.open.0.push(OpenCall {
                start,
                corr: d.correlation_id(),
                stack,
                name,
                kind,
                epoch,
            });
        } else {
            let Some(call) = l.open.close(d.correlation_id()) else {
                return;
            };
            let outer = l.open.0.last().map(|o| o.corr).unwrap_or(0);
            if w::repeats_outer_call(call.corr, outer) {
                return;
            }
            // Before the buffer is locked: no CUPTI call is made with a lock held.
            let end = if outer != 0 {
                call.start
            } else {
                cupti::timestamp()
            };
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
                c.out.wake.notify_one();
            }
        }
    });
}

/// Switches the API callbacks gaptop enabled on or off. Never from inside a callback, and
/// with no collector lock held: CUPTI may be calling `on_api` on other threads meanwhile, and
/// those take the collector's locks.
pub(crate) fn set_callbacks(c: &Collector, on: bool) {
    // Never taken by a callback (see `state`), so held across the CUPTI calls.
    let sub = c.subscriber.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sub) = &*sub else {
        return;
    };
    for (di, &dom) in Domain::ALL.iter().enumerate() {
        if !on {
            // Off for the whole domain, not callback by callback (no cheaper: docs/perf.md).
            let _ = sub.disable_domain(dom);
            continue;
        }
        for (cbid, &(name, _)) in c.calls().api[di].iter().enumerate() {
            if name != 0 {
                let _ = sub.enable_callback(dom, cbid as u32, on);
            }
        }
    }
}

/// Sampled stacks, a diagnostic (GAPTOP_STACK_DUTY): API callbacks on for `on`, off for `off`,
/// repeatedly; kernels launched while they are off have no launch call or stack. On the H200
/// this barely lowered the cost of the run (docs/perf.md): once launch callbacks have been on
/// next to kernel records, launches stay slower, so it is not offered as an option.
pub(crate) fn duty_cycle(c: &'static Collector, on: Duration, off: Duration) {
    let running = || c.active.load(Relaxed) && !c.shutting_down.load(Relaxed);
    loop {
        std::thread::sleep(on);
        if !running() {
            return;
        }
        set_callbacks(c, false);
        std::thread::sleep(off);
        if !running() {
            return;
        }
        // A new window before the callbacks come back on: CUPTI's enable call orders the
        // increment before the callbacks it lets through (hence Relaxed here and there).
        EPOCH.fetch_add(1, Relaxed);
        set_callbacks(c, true);
    }
}

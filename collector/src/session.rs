//! A dormant collector (`GAPTOP_DORMANT=1`, `gaptop run --dormant`, `gaptop env`): loaded into
//! the program, it makes no CUPTI call and enables nothing until a viewer attaches through its
//! control socket (`control`); each attach turns collection on for a fresh connection, each
//! detach turns it off again.
//!
//! The attach state machine, driven by the control thread alone (which is the only one to
//! change CUPTI's state here):
//!
//! ```text
//! dormant --attach--> attached --detach | viewer gone | attacher's connection ends--> dormant
//! ```
//!
//! - **attach**: settle the last detach (below); subscribe (CUPTI then attaches itself to the
//!   process) and name the calls followed (the first time); connect to the viewer and send it
//!   the hello and every name and stack defined so far (`Link::history`), so a viewer attached
//!   mid-run names everything it gets; a new callback window (`EPOCH`); callbacks on; `active`
//!   on; activity on.
//! - **detach**: activity off, a forced flush (the records so far go out), `active` off, the
//!   sender sends the rest, says bye and closes; then CUPTI leaves the process: by default
//!   `cuptiFinalize`, which CUPTI asks to be called at the exit of a CUDA API callback, so the
//!   detach marks it due and the next API exit on any thread calls it (`finalize_here`);
//!   GAPTOP_DETACH=keep switches the callbacks off instead and stays subscribed (to compare the
//!   two costs; docs/perf.md).
//! - an attach while a finalize is due cancels it (CUPTI is still subscribed, its callbacks
//!   on); one that finds it running waits for it and subscribes afresh.
//!
//! What never happens: a program thread waits for the control thread or the viewer; a CUPTI
//! call while dormant (the sender's flushes and the exit flush only run while `active`).

use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU8};
use std::time::{Duration, Instant};

use crate::callbacks::{on_api, set_callbacks};
use crate::cupti::{self, Activity};
use crate::native::native_map;
use crate::sender::send_all;
use crate::setup::{
    call_names, close, connect, enable_activities, enable_calls, enable_kinds, hello, open_dump,
    plan_calls, register_handlers, set_buffer_attrs, start_sender, Followed,
};
use crate::state::{Collector, Names, Parts};
use crate::switches::Switches;
use crate::{COLLECTOR, EPOCH};

/// `Session::finalize`'s states.
const IDLE: u8 = 0;
/// A detach left CUPTI subscribed with its callbacks on: the next API exit finalizes.
const DUE: u8 = 1;
/// An API exit is in `cuptiFinalize`.
const RUNNING: u8 = 2;
/// CUPTI finalized; the control thread drops the subscriber.
const DONE: u8 = 3;
/// CUPTI refused to finalize; the control thread switches the callbacks off instead.
const FAILED: u8 = 4;

/// How long a detach waits for the sender to send the rest and close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// A send to an attached viewer that takes longer than this counts as the viewer gone.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);

/// What the collector's threads share about attaching (`Collector::session`).
pub(crate) struct Session {
    /// The control socket, removed at exit.
    pub(crate) socket: PathBuf,
    /// A detach's `cuptiFinalize` (IDLE, DUE, RUNNING, DONE, FAILED).
    finalize: AtomicU8,
    /// The sender found the viewer gone (its connection closed): the control thread detaches.
    lost: AtomicBool,
    /// Stopped for good after an internal error: attaches are refused.
    broken: AtomicBool,
    /// Detach by `cuptiFinalize` (else callbacks off, still subscribed).
    pub(crate) finalize_on_detach: bool,
}

impl Session {
    pub(crate) fn new(socket: PathBuf, finalize_on_detach: bool) -> Session {
        Session {
            socket,
            finalize: AtomicU8::new(IDLE),
            lost: AtomicBool::new(false),
            broken: AtomicBool::new(false),
            finalize_on_detach,
        }
    }

    /// Whether an API exit should finalize CUPTI now (one Relaxed load: on the hot path).
    #[inline]
    pub(crate) fn finalize_due(&self) -> bool {
        self.finalize.load(Relaxed) == DUE
    }

    /// At an API exit, inside CUPTI's callback, no lock held: calls `cuptiFinalize` if no one
    /// else has (or cancelled it) meanwhile. The one CUPTI call a callback makes besides the
    /// clock, and the place CUPTI documents for it.
    pub(crate) fn finalize_here(&self) {
        if self
            .finalize
            .compare_exchange(DUE, RUNNING, Acquire, Relaxed)
            .is_ok()
        {
            let done = cupti::finalize().is_ok();
            // Release: the control thread (Acquire) sees CUPTI's state as this thread left it.
            self.finalize
                .store(if done { DONE } else { FAILED }, Release);
        }
    }

    /// The sender closed the viewer's connection after a failed send.
    pub(crate) fn viewer_lost(&self) {
        self.lost.store(true, Relaxed);
    }

    /// An internal error (`go_quiet`): collection off now, as far as it can be without CUPTI
    /// calls from this thread (which may be inside CUPTI), and no attach from now on; the
    /// control thread switches CUPTI off.
    pub(crate) fn stop_for_good(&self, c: &Collector, why: &str) {
        if !self.broken.swap(true, AcqRel) {
            say!("{why}; collection stopped for good, the program continues");
        }
        c.active.store(false, Relaxed);
        self.lost.store(true, Relaxed);
    }

    pub(crate) fn remove_socket(&self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// CUPTI as the control thread left it.
#[derive(Default)]
pub(crate) struct CuptiState {
    /// The calls followed, named at the first attach.
    plan: Option<Followed>,
    /// Subscribed (our subscriber is in `Collector::subscriber`).
    subscribed: bool,
    /// The planned callbacks are enabled.
    callbacks_on: bool,
    /// Activity buffers registered with this subscription.
    registered: bool,
    /// CUPTI was finalized since it last named kernels: their name pointers may be reused.
    finalized: bool,
}

/// Starts a dormant collector: the control socket, the collector (collecting nothing, no
/// CUPTI call made), its sender and control threads and handlers. An error is said once by
/// `InitializeInjection`, and the program runs without gaptop.
pub(crate) fn start_dormant() -> Result<(), String> {
    // Loads libcupti without calling it: a missing one is said now, not at the first attach.
    if !crate::cupti::is_present() {
        return Err("libcupti was not found (put its folder on LD_LIBRARY_PATH)".into());
    }
    let sw = Switches::from_env();
    let (listener, socket) = crate::control::listen(&sw)?;
    let native = sw.native.then(native_map);
    let dump = open_dump(&sw);
    let finalize = sw.detach_finalize;
    let c = Collector::new(Parts {
        fd: -1,
        sw,
        native,
        subscriber: None,
        names: Names::starting_at(1),
        calls: None,
        zeroed: false,
        dump,
        session: Some(Session::new(socket.clone(), finalize)),
    });
    if COLLECTOR.set(c).is_err() {
        let _ = std::fs::remove_file(&socket);
        return Err("initialized twice".into());
    }
    let c = COLLECTOR.get().expect("just set");
    start_sender(c)?;
    std::thread::Builder::new()
        .name("gaptop-control".into())
        .spawn(move || crate::control::serve(c, listener))
        .map_err(|e| format!("cannot start the control thread: {e}"))?;
    register_handlers(c);
    if c.sw.verbose {
        say!(
            "dormant: `gaptop attach {}` turns collection on (control socket {})",
            std::process::id(),
            socket.display()
        );
    }
    Ok(())
}

/// Brings CUPTI back to a known state after the last detach. `attaching`: a finalize still
/// due is cancelled (CUPTI stays subscribed, its callbacks on) and one running is waited for.
/// Always: one done drops the subscriber; one refused switches the callbacks off.
pub(crate) fn settle(c: &Collector, st: &mut CuptiState, attaching: bool) {
    let Some(s) = &c.session else { return };
    if attaching {
        if s.finalize
            .compare_exchange(DUE, IDLE, AcqRel, Acquire)
            .is_ok()
        {
            return;
        }
        let t = Instant::now();
        while s.finalize.load(Acquire) == RUNNING && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    match s.finalize.load(Acquire) {
        DONE => {
            if let Some(sub) = c
                .subscriber
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
            {
                sub.finalized();
            }
            st.subscribed = false;
            st.callbacks_on = false;
            st.registered = false;
            st.finalized = true;
            s.finalize.store(IDLE, Relaxed);
        }
        FAILED => {
            say!("CUPTI refused to detach (cuptiFinalize); its callbacks are off instead");
            set_callbacks(c, false);
            st.callbacks_on = false;
            s.finalize.store(IDLE, Relaxed);
        }
        _ => {}
    }
}

/// Whether a viewer is to be detached: the sender found it gone, or an internal error.
pub(crate) fn take_lost(c: &Collector) -> bool {
    c.session
        .as_ref()
        .is_some_and(|s| s.lost.swap(false, Relaxed))
}

/// Sets `SO_SNDTIMEO` on the viewer's socket, so a viewer that stops reading counts as gone.
fn send_timeout(fd: c_int, t: Duration) {
    let tv = libc::timeval {
        tv_sec: t.as_secs() as libc::time_t,
        tv_usec: t.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `fd` is an open socket; `tv` is a live timeval of the size passed.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_SNDTIMEO,
            &tv as *const libc::timeval as *const libc::c_void,
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        );
    }
}

/// Subscribes (when not), naming the calls followed the first time. Nothing enabled yet.
fn subscribe(c: &Collector, st: &mut CuptiState) -> Result<(), String> {
    if st.subscribed {
        return Ok(());
    }
    let sub = cupti::subscribe(on_api)
        .map_err(|e| e.failed("cuptiSubscribe (is another profiler attached?)"))?;
    if st.plan.is_none() {
        let plan = plan_calls(&c.sw, &c.names);
        let _ = c.calls.set(call_names(plan.table.clone(), &c.names));
        st.plan = Some(plan);
    }
    let zeroed = set_buffer_attrs(&c.sw);
    c.buffers.zeroed.store(zeroed, Relaxed);
    if st.finalized {
        // CUPTI's kernel name strings went with it; new ones may reuse their addresses.
        c.buffers
            .kernel_names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        st.finalized = false;
    }
    *c.subscriber.lock().unwrap_or_else(|e| e.into_inner()) = Some(sub);
    st.subscribed = true;
    st.callbacks_on = false;
    st.registered = false;
    Ok(())
}

/// Records left from the last window (a callback that passed `active` as it went off), so a
/// fresh window starts empty.
fn clear_leftovers(c: &Collector) {
    {
        let mut q = c.out.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.batches.clear();
        q.bytes = 0;
    }
    let threads = c
        .out
        .threads
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    for t in threads {
        t.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }
}

/// Connects to the viewer at `socket` and sends the hello and the history; the sender sends
/// on it from its next pass. Under `link`, so that no definition kept meanwhile is missed.
fn install(c: &Collector, socket: &str) -> Result<(), String> {
    let fd = connect(socket)?;
    send_timeout(fd, SEND_TIMEOUT);
    let mut l = c.link();
    let mut first = hello();
    first.extend_from_slice(l.history.as_deref().unwrap_or_default());
    if !send_all(fd, &first) {
        drop(l);
        close(fd);
        return Err(format!("the viewer at {socket} closed the connection"));
    }
    l.fd = fd;
    l.closing = false;
    drop(l);
    // Where the Python frames are, for the viewer's CPU samples (a file beside its socket).
    crate::pyremote::publish_beside(socket);
    Ok(())
}

/// Turns collection on for the viewer listening at `socket` (the state machine's attach).
pub(crate) fn attach(c: &Collector, st: &mut CuptiState, socket: &str) -> Result<(), String> {
    let Some(s) = &c.session else {
        return Err("not a dormant collector".into());
    };
    if s.broken.load(Relaxed) {
        return Err("collection stopped for good after an internal error".into());
    }
    settle(c, st, true);
    subscribe(c, st)?;
    clear_leftovers(c);
    if let Err(e) = install(c, socket) {
        leave_cupti(c, st);
        return Err(e);
    }
    // A new callback window: calls left open by the last one are forgotten. The enable calls
    // below publish it to the callbacks.
    EPOCH.fetch_add(1, Relaxed);
    let plan = st.plan.as_mut().expect("planned at subscribe");
    if !st.callbacks_on {
        let sub = c.subscriber.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(sub) = &*sub {
            enable_calls(sub, plan);
        }
        st.callbacks_on = true;
    }
    s.lost.store(false, Relaxed);
    c.active.store(true, Relaxed);
    let on = if st.registered {
        enable_kinds(c, &plan.timed, &plan.untimed)
    } else {
        enable_activities(c, &plan.timed, &plan.untimed)
    };
    st.registered = true;
    if let Err(e) = on {
        detach(c, st);
        return Err(e);
    }
    Ok(())
}

/// Turns collection off (the state machine's detach): what was collected goes out, the
/// connection closes, and CUPTI leaves the process (or its callbacks go off).
pub(crate) fn detach(c: &Collector, st: &mut CuptiState) {
    if c.session.is_none() {
        return;
    }
    settle(c, st, false);
    if st.subscribed {
        for k in Activity::GPU
            .into_iter()
            .chain([Activity::Driver, Activity::Runtime])
        {
            let _ = cupti::disable_activity(k);
        }
        // No lock held: the completions run here and queue what CUPTI still had.
        let _ = cupti::flush_all(true);
    }
    c.active.store(false, Relaxed);
    let mut l = c.link();
    if l.fd >= 0 {
        l.closing = true;
        c.out.wake.notify_all();
        l = c
            .link_closed
            .wait_timeout_while(l, CLOSE_WAIT, |l| l.fd >= 0)
            .map(|(l, _)| l)
            .unwrap_or_else(|e| e.into_inner().0);
    }
    drop(l);
    leave_cupti(c, st);
}

/// Takes CUPTI out of the process after collection stopped: marks `cuptiFinalize` due at the
/// next API exit (the callbacks on until then: CUPTI's documented place for it), or with
/// GAPTOP_DETACH=keep switches the callbacks off.
fn leave_cupti(c: &Collector, st: &mut CuptiState) {
    let Some(s) = &c.session else { return };
    if !st.subscribed {
        return;
    }
    if s.finalize_on_detach {
        if !st.callbacks_on {
            if let (Some(sub), Some(plan)) = (
                &*c.subscriber.lock().unwrap_or_else(|e| e.into_inner()),
                st.plan.as_mut(),
            ) {
                enable_calls(sub, plan);
            }
            st.callbacks_on = true;
        }
        s.finalize.store(DUE, Release);
    } else {
        set_callbacks(c, false);
        st.callbacks_on = false;
    }
}

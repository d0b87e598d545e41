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
//!
//! What the threads share about it (`Session`, the finalize states) is in `session`; how a
//! dormant collector starts (`start_dormant`) is in `setup`; the control thread that drives
//! the machine is in `control`.

use std::ffi::c_int;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::time::{Duration, Instant};

use crate::callbacks::{on_api, set_callbacks};
use crate::cupti::{self, Activity};
use crate::enable::{
    call_names, enable_activities, enable_calls, enable_kinds, plan_calls, set_buffer_attrs,
    Followed,
};
use crate::sender::send_all;
use crate::session::{DONE, DUE, FAILED, IDLE, RUNNING};
use crate::state::Collector;
use crate::viewer::{close, connect, hello};
use crate::EPOCH;

/// How long a detach waits for the sender to send the rest and close.
const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// How long a detach waits for completions running on other threads.
const COMPLETION_WAIT: Duration = Duration::from_secs(2);
/// A send to an attached viewer that takes longer than this counts as the viewer gone.
const SEND_TIMEOUT: Duration = Duration::from_secs(2);

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
        // A completion still running on another thread (CUPTI's own) queues its records
        // only while collection is on.
        let t = Instant::now();
        while c.buffers.completing.load(Acquire) > 0 && t.elapsed() < COMPLETION_WAIT {
            std::thread::sleep(Duration::from_millis(1));
        }
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

//! How the collector's life ends: `go_quiet` stops collecting for good (an internal error, the
//! viewer gone, set-up failing), `at_exit` sends what is left, and a forked child collects
//! nothing; `register_handlers` installs the exit and fork handlers (and schedules the Python
//! frames' calibration). A module of its own, below the sender and the activity buffers, which
//! call `go_quiet` from deep inside (the sender's loop, CUPTI's completion callback), and below
//! set-up, which registers the handlers.

use std::sync::atomic::Ordering::{AcqRel, Relaxed, Release};
use std::time::Duration;

use crate::cupti::{self, Activity, Domain};
use crate::diag;
use crate::pycalib::schedule_calibration;
use crate::state::Collector;
use crate::{COLLECTOR, FORKED};

/// What every collector registers once it is set: the exit handler, the Python frames'
/// calibration, the fork handler.
pub(crate) fn register_handlers(c: &Collector) {
    // SAFETY: `at_exit` is an `extern "C" fn()` that lives for the whole process.
    unsafe { libc::atexit(at_exit) };
    if c.sw.py_stacks {
        schedule_calibration();
    }
    // SAFETY: `in_forked_child` is an `extern "C" fn()` that lives for the whole process and
    // only stores an atomic (async-signal-safe, as a fork child handler must be).
    unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
}

/// Stops collecting for good: callbacks off, activity off. The program runs on untouched.
/// Called from the sender, from set-up, and from inside CUPTI's completion callback (a
/// panic there), never with a collector lock held; it only switches things off, never
/// flushes. A dormant collector's control thread does the switching instead (`dormant`), and
/// refuses further attaches.
pub(crate) fn go_quiet(c: &Collector, why: &str) {
    if let Some(s) = &c.session {
        s.stop_for_good(&c.active, why);
        return;
    }
    // AcqRel swap: exactly one caller says why and switches off; the callbacks' and
    // completions' Relaxed loads of `active` may see it late, which only costs a few records.
    if c.active.swap(false, AcqRel) {
        say!("{why}; collection stopped, the program continues");
        // try_lock: whoever holds it is switching callbacks, which `active` now silences.
        if let Ok(sub) = c.subscriber.try_lock() {
            if let Some(sub) = &*sub {
                let _ = sub.disable_domain(Domain::Runtime);
                let _ = sub.disable_domain(Domain::Driver);
            }
        }
        for k in Activity::GPU {
            let _ = cupti::disable_activity(k);
        }
    }
}

pub(crate) extern "C" fn at_exit() {
    let Some(c) = COLLECTOR.get() else { return };
    if FORKED.load(Relaxed) {
        return;
    }
    if let Some(s) = &c.session {
        s.remove_socket();
    }
    // Forced flush first, with no lock held: CUPTI may complete buffers on this thread inside
    // the call, and the completion takes the queue and the name locks. Only while collecting:
    // a dormant collector makes no CUPTI call (one would attach CUPTI again).
    if c.active.load(Relaxed) {
        let _ = cupti::flush_all(true);
    }
    // Release, read with Acquire by the sender: its last pass then finds in the queue what
    // the flush completed.
    c.shutting_down.store(true, Release);
    c.out.wake.notify_all();
    let (m, cv) = &c.out.done;
    let g = m.lock().unwrap_or_else(|e| e.into_inner());
    let _ = cv.wait_timeout_while(g, Duration::from_secs(3), |d| !*d);
    if c.times.on {
        diag::say_exit_stats(c);
    }
}

/// The fork child handler: a forked child collects nothing (its CUPTI state is not its own).
extern "C" fn in_forked_child() {
    FORKED.store(true, Relaxed);
}

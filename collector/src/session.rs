//! What a dormant collector's threads share about attaching: `Session`, one of the
//! `Collector`'s parts (`Collector::session`), and the states of a detach's `cuptiFinalize`.
//! The callbacks finalize through it at an API exit, the sender marks the viewer lost through
//! it, `go_quiet` stops for good through it; the attach state machine that drives it is in
//! `dormant`. A module of its own, below `state`, so that the state can hold it without
//! importing the machine (which acts on the whole collector).

use std::path::PathBuf;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU8};

use crate::cupti;

/// `Session::finalize`'s states.
pub(crate) const IDLE: u8 = 0;
/// A detach left CUPTI subscribed with its callbacks on: the next API exit finalizes.
pub(crate) const DUE: u8 = 1;
/// An API exit is in `cuptiFinalize`.
pub(crate) const RUNNING: u8 = 2;
/// CUPTI finalized; the control thread drops the subscriber.
pub(crate) const DONE: u8 = 3;
/// CUPTI refused to finalize; the control thread switches the callbacks off instead.
pub(crate) const FAILED: u8 = 4;

/// What the collector's threads share about attaching (`Collector::session`).
pub(crate) struct Session {
    /// The control socket, removed at exit.
    pub(crate) socket: PathBuf,
    /// A detach's `cuptiFinalize` (IDLE, DUE, RUNNING, DONE, FAILED).
    pub(crate) finalize: AtomicU8,
    /// The sender found the viewer gone (its connection closed): the control thread detaches.
    pub(crate) lost: AtomicBool,
    /// Stopped for good after an internal error: attaches are refused.
    pub(crate) broken: AtomicBool,
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

    /// An internal error (`go_quiet`): collection off now (`active`: the collector's), as far
    /// as it can be without CUPTI calls from this thread (which may be inside CUPTI), and no
    /// attach from now on; the control thread switches CUPTI off.
    pub(crate) fn stop_for_good(&self, active: &AtomicBool, why: &str) {
        if !self.broken.swap(true, AcqRel) {
            say!("{why}; collection stopped for good, the program continues");
        }
        active.store(false, Relaxed);
        self.lost.store(true, Relaxed);
    }

    pub(crate) fn remove_socket(&self) {
        let _ = std::fs::remove_file(&self.socket);
    }
}

//! The replay: the capture rebuilt as a graph of dependencies and run again from durations
//! alone, so that a change (a site's launches fused, its host work removed, a sync dropped)
//! says what the steps would become, not what its gaps summed to.
//!
//! The model ([`Model`], built by [`build`]) holds, for a block of the capture's steps:
//!
//! - each launching thread's CUDA calls in order: the CPU time before each call since the
//!   thread's previous call returned (`seg`), the call's own time (`own`), and for a call that
//!   waited for the GPU (a stream, device or event sync, a blocking copy) the op it waited for
//!   and how long after that op's end it returned (`tail`);
//! - each stream's ops in order: an op starts at the latest of its launch call's start plus its
//!   launch latency (`lat`), the previous op's end plus the spacing between them (`gap`), and
//!   the end of an op on another stream it waited for (`dep`, an event wait);
//! - collectives across ranks: the kernels of one collective end together, a rank's own time
//!   after the last rank arrives.
//!
//! Which term bound an op is read off the capture (an op whose stream was busy when it could
//! have started was queued; otherwise its launch bound it), and the other terms take the
//! typical value of its stream, so that replaying the model unchanged gives back every
//! measured time while a change moves what depends on it, and nothing else ([`run`] never
//! copies a measured start, except for work outside the block: a constant).
//!
//! [`whatif`] changes the model by a site's pattern; [`estimate`] replays each site's change
//! over the steady steps and puts the difference on its advice; [`step_picture`] draws one
//! step as measured and with a site's fix, for the UI.

mod build;
mod run;
mod view;
mod whatif;

pub use build::{build, REPLAY_MAX_OPS};
pub use run::{run, Times};
pub use view::{short as whatif_short, step_picture, StepPicture};
pub use whatif::{estimate, replay_site, Estimate, ReplayJson, SiteEstimate, SiteReplay, WhatIf};

use crate::collect::model::records::{ApiKind, Ns};

/// No index.
pub const NONE: u32 = u32::MAX;

/// A CUDA call of a launching thread.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// Its thread ([`Model::threads`]).
    pub thread: u32,
    /// Measured start and end (for anchors and the first call of a thread, which starts when it
    /// was measured to).
    pub start: Ns,
    pub end: Ns,
    /// CPU time between the thread's previous call's end and this call's start.
    pub seg: Ns,
    /// The call's own time.
    pub own: Ns,
    /// The op it waited for ([`NONE`]: it did not wait), and its time after that op's end.
    pub wait: u32,
    pub tail: Ns,
    pub kind: ApiKind,
    /// Its site, an index into [`Model::sites`] ([`NONE`]: none).
    pub site: u32,
}

/// A GPU op.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    /// Its lane sequence ([`Model::lanes`]).
    pub lane: u32,
    pub start: Ns,
    pub end: Ns,
    /// Its launch call ([`NONE`]: launched outside the block, or unknown).
    pub call: u32,
    /// Launch latency: from its call's start to the earliest it can start.
    pub lat: Ns,
    /// Spacing after the previous op on its stream.
    pub gap: Ns,
    /// An op of another stream it waited for, and the spacing after that op's end.
    pub dep: u32,
    pub dep_gap: Ns,
    /// Its duration; for a collective's kernel, its time after the last rank arrived.
    pub dur: Ns,
    /// Earliest start fixed by work outside the block (`Ns::MIN`: none).
    pub floor: Ns,
    /// Its collective ([`NONE`]: none).
    pub group: u32,
}

/// A launching thread's calls.
#[derive(Clone, Debug)]
pub struct Thread {
    pub proc: u32,
    pub tid: u32,
    /// Its calls, `calls[first..last]`.
    pub first: u32,
    pub last: u32,
}

/// A stream's ops.
#[derive(Clone, Debug)]
pub struct LaneSeq {
    /// The store's lane.
    pub lane: usize,
    pub first: u32,
    pub last: u32,
    /// The measured end of the op before the block on this stream (a constant).
    pub before_end: Option<Ns>,
}

/// The capture as a graph of dependencies, over a block of its steps.
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub calls: Vec<Call>,
    pub ops: Vec<Op>,
    pub threads: Vec<Thread>,
    pub lanes: Vec<LaneSeq>,
    /// Each collective's member ops.
    pub groups: Vec<Vec<u32>>,
    /// The site keys of calls (advice's `site_key_of`).
    pub sites: Vec<String>,
    /// The block: its first and last time.
    pub lo: Ns,
    pub hi: Ns,
}

impl Model {
    /// The thread of a call and the lane of an op.
    pub fn thread_of(&self, call: u32) -> &Thread {
        &self.threads[self.calls[call as usize].thread as usize]
    }
}

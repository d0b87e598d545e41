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

mod anchors;
mod build;
mod cost;
mod graph;
mod loading;
mod mirror;
mod model;
mod results;
mod run;
#[cfg(test)]
mod tests;
mod view;
mod whatif;

pub use build::{build, REPLAY_MAX_OPS};
pub use cost::PerCall;
pub use model::{Call, LaneSeq, Model, Op, Thread, NONE};
pub use run::{run, Times};
pub use view::{short as whatif_short, step_picture, StepPicture};
pub use whatif::{
    estimate, replay_site, slow_kernel, Estimate, ReplayJson, SiteEstimate, SiteReplay, WhatIf,
    SYNCS_OF,
};

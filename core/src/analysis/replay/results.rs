//! What a replay says: the what-ifs it models, each site's estimate and the window's figures
//! (the JSON `replay` object and the advice rows' replayed fields).

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use super::model::Model;
use super::run::Times;
use crate::model::records::{NameId, Ns, StackId};

/// The fix a site's pattern calls for, as a change of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WhatIf {
    /// Each call of the site's launches fused into one kernel: one launch, no spacing.
    Fuse,
    /// The site's CPU time during its gaps removed: the CPU time before each launch, by as
    /// much as the device sat idle before its op, down to the thread's typical time between
    /// two calls.
    HostWork,
    /// Per-shape planning: as host work (each shape planned once, outside the steady steps).
    Planning,
    /// The site's launch calls as fast as the thread's typical launch.
    SlowLaunch,
    /// The syncs before the site's launches removed.
    Sync,
    /// Loading before the site's launches moved to enough workers.
    Input,
}

impl WhatIf {
    /// What the what-if assumes, in a line.
    pub fn assumes(self) -> &'static str {
        match self {
            WhatIf::Fuse => "each call's launches fused into one kernel of the same GPU time, launched once; where the trace ties backward ops to it, each run of its backward's launches too",
            WhatIf::HostWork => "its CPU time during its gaps removed (the CPU before each launch, by as much as the GPU sat idle before its op, down to the thread's typical time between two calls)",
            WhatIf::Planning => "each shape planned once, before the steady steps: its plans (CPU time before its launches of 10x its usual and over 1ms) removed",
            WhatIf::SlowLaunch => "its launch calls as fast as the thread's typical launch",
            WhatIf::Sync => "the syncs before its launches removed (the CPU no longer waits for the GPU there)",
            WhatIf::Input => "loading moved to enough DataLoader workers that it overlaps the steps",
        }
    }
}

/// A site's replayed fix.
#[derive(Clone, Debug, Serialize)]
pub struct SiteEstimate {
    /// Mean over the replayed steps of the step before less the step after (advice's
    /// `saving_ns`).
    #[serde(skip)]
    pub saving_ns: Ns,
    /// The median of that over the steps it changed, and how many it changed (by more than
    /// a hundredth).
    pub saving_changed_ns: Ns,
    pub steps_changed: usize,
    /// The GPU's busy share of the replayed step after the fix.
    pub busy_after: f64,
    pub whatif: &'static str,
    /// Input-bound: the DataLoader workers that would remove the wait.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workers: Option<u32>,
    /// Input-bound: the helper processes (DataLoader workers) seen loading beside it.
    #[serde(skip_serializing_if = "is_zero")]
    pub workers_seen: usize,
    /// A stack and API of the site's calls (to name a site no gap is charged to: a sync's).
    #[serde(skip)]
    pub call: (StackId, NameId),
    /// With several ranks: the ranks whose calls or ops the fix changes, of how many.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<i32>,
    #[serde(skip_serializing_if = "is_zero")]
    pub of_ranks: usize,
    /// Host work: the mean saving a step when the work is overlapped with the GPU on its own
    /// thread rather than removed from it: no step shorter than the busiest launching
    /// thread's CPU time in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub saving_overlapped_ns: Option<Ns>,
    /// Fused: the backward calls of its forward ops, which its fix fuses too (the calls
    /// other than syncs that the trace ties to it, in the replayed steps).
    #[serde(skip_serializing_if = "is_zero")]
    pub backward_calls: usize,
    /// A backward site whose calls the trace ties to a forward site that is replayed fused
    /// too: that site's key (its fix fuses these launches with its own).
    #[serde(skip)]
    pub forward_key: Option<String>,
    /// That forward site, as advice names it (set by advice).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fused_with: Option<String>,
    /// A launch site whose gaps follow another function's syncs (a `.item()` before them):
    /// the key of the site whose syncs its fix removes, which holds most of their wait.
    #[serde(skip)]
    pub sync_key: Option<String>,
    /// That site, as advice names it (set by advice): the line to change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_in: Option<String>,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The JSON `replay` object.
#[derive(Clone, Debug, Serialize)]
pub struct ReplayJson {
    /// Median over the replayed steps of |replayed − measured| / measured, unchanged.
    pub baseline_error: f64,
    /// Steps and ops replayed (the last steady steps, up to [`REPLAY_MAX_OPS`] ops).
    pub steps: usize,
    pub ops: usize,
    pub calls: usize,
    /// Items whose dependencies could not be met in order, taken as measured.
    pub forced: u32,
    /// The median measured step and the median replayed one, and the mean measured step.
    pub measured_median_ns: Ns,
    pub replayed_median_ns: Ns,
    pub measured_mean_ns: Ns,
    /// Each step's launches between its syncs captured as one CUDA graph
    /// ([`GRAPH_ASSUMES`]): the mean saving a step, and the GPU's busy share after it.
    pub graph_saving_ns: Ns,
    pub graph_busy_after: f64,
    pub graph_whatif: &'static str,
    /// gaptop's own cost, taken out of the model before every what-if (a recording's probe
    /// measured it): the savings and the step they are a share of are the program's without
    /// gaptop. None for a trace, an older recording, or where the probe measured nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiler: Option<ProfilerCost>,
    /// Why the probe measured nothing, where it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profiler_unmeasured: Option<String>,
}

/// What gaptop added to the recorded run, as the replay takes it out.
#[derive(Clone, Debug, Serialize)]
pub struct ProfilerCost {
    /// One callback, and CUPTI's record of an op (see `cost::PerCall`).
    pub callback_ns: Ns,
    pub record_ns: Ns,
    /// A runtime launch's (`cudaLaunchKernel`): four callbacks and a record.
    pub launch_ns: Ns,
    /// The mean replayed step less the same without gaptop's cost, and the median replayed
    /// step without it.
    pub step_ns: Ns,
    pub replayed_median_ns: Ns,
}

/// What the whole-step CUDA graph what-if assumes, in a line.
pub const GRAPH_ASSUMES: &str = "each step's launches between its syncs captured as one CUDA graph: the CPU time between them (Python, dispatch, launch calls) gone, one graph launch each, the GPU's work and the syncs as measured";

/// A window's estimates: the replay's figures and each site's fix.
#[derive(Clone, Debug)]
pub struct Estimate {
    pub json: ReplayJson,
    pub sites: HashMap<String, SiteEstimate>,
    /// The steps replayed (indexes into the steps) and, per step, measured and replayed start
    /// and end, for drawing.
    pub steps: std::ops::Range<usize>,
    pub model: Model,
    pub baseline: Times,
}

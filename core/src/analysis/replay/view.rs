//! One step of the replayed block as the UI draws it: its GPU ops as measured, and the same
//! ops replayed with a site's fix applied, each from its own step's start, so that the two
//! rows share an axis and the second shows what the step would become.

use super::whatif::{replay_site, Estimate, WhatIf};
use crate::analysis::steps::Steps;
use crate::model::records::Ns;
use crate::model::store::Store;

/// A step measured and replayed with a fix.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepPicture {
    /// The step: an index into the steps the estimate was made from (the median by measured
    /// wall time of the block's steps that the fix changes, else of them all).
    pub step: usize,
    /// Its measured wall time, and its wall time replayed with the fix.
    pub measured_ns: Ns,
    pub fixed_ns: Ns,
    /// Its GPU ops (those that start in it as measured), as measured and as replayed with the
    /// fix: `(start, end)` from the step's start, in the same order.
    pub measured: Vec<(Ns, Ns)>,
    pub fixed: Vec<(Ns, Ns)>,
}

/// What the what-if does, in a few words, for a title.
pub fn short(w: WhatIf) -> &'static str {
    match w {
        WhatIf::Fuse => "its launches fused",
        WhatIf::HostWork => "its host work removed",
        WhatIf::Planning => "each shape planned once",
        WhatIf::SlowLaunch => "its launches as fast as typical",
        WhatIf::Sync => "its syncs removed",
        WhatIf::Input => "loading moved to workers",
    }
}

/// A typical step of the block of `est` (made from `store` and `steps`) that the fix changes,
/// measured and replayed with site `site_key`'s fix `w`. None when the site has no call in the
/// block.
pub fn step_picture(
    est: &Estimate,
    store: &Store,
    steps: &Steps,
    site_key: &str,
    w: WhatIf,
) -> Option<StepPicture> {
    let r = replay_site(est, store, steps, site_key, w)?;
    // The steps the fix changes (by more than a hundredth of the unchanged replay), else all.
    let walls = |v: &[(Ns, Ns)]| -> Vec<Ns> { v.iter().map(|s| s.1 - s.0).collect() };
    let (before, after) = (walls(&r.baseline_spans), walls(&r.spans));
    let mut order: Vec<usize> = (0..before.len())
        .filter(|&i| (before[i] - after[i]) * 100 > before[i])
        .collect();
    if order.is_empty() {
        order = (0..before.len()).collect();
    }
    order.sort_by_key(|&i| (steps.steps[est.steps.start + i].wall(), i));
    let i = *order.get((order.len().max(1) - 1) / 2)?;
    let k = est.steps.start + i;
    let st = &steps.steps[k];
    let (f0, f1) = r.spans[i];
    let t = &r.times;
    let mut measured = Vec::new();
    let mut fixed = Vec::new();
    for (j, o) in est.model.ops.iter().enumerate() {
        if o.start < st.start || o.start >= st.end {
            continue;
        }
        measured.push((o.start - st.start, o.end - st.start));
        let (a, b) = (t.op_start[j] - f0, t.op_end[j] - f0);
        fixed.push((a.max(0), b.max(a.max(0))));
    }
    Some(StepPicture {
        step: k,
        measured_ns: st.wall(),
        fixed_ns: (f1 - f0).max(0),
        measured,
        fixed,
    })
}

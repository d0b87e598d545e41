//! Where the replayed steps are read: the block of steps replayed, and each step's start and
//! end moved as the event at (or before) it moved.

use rustc_hash::FxHashMap as HashMap;

use super::build::REPLAY_MAX_OPS;
use super::model::Model;
use super::model::NONE;
use super::run::Times;
use crate::analysis::steps::{quantile, StepSource, Steps};
use crate::model::records::Ns;
use crate::model::store::Store;

/// Where the steps' boundaries are read: on the GPU (steps found from ops) or on the CPU (spans
/// and ranges).
pub(super) fn cpu_anchored(src: &StepSource) -> bool {
    matches!(src, StepSource::ProfilerStep | StepSource::Spans(_))
}

/// The threads and lanes anchors are read on: the thread with the most launches and the lanes
/// of the device with the most ops.
pub(super) struct Anchors {
    pub(super) thread: usize,
    pub(super) lanes: Vec<usize>,
    pub(super) cpu: bool,
}

impl Anchors {
    pub(super) fn new(m: &Model, store: &Store, cpu: bool) -> Anchors {
        let mut launches = vec![0usize; m.threads.len()];
        for o in m.ops.iter().filter(|o| o.call != NONE) {
            launches[m.calls[o.call as usize].thread as usize] += 1;
        }
        let thread = (0..m.threads.len())
            .max_by_key(|&t| (launches[t], std::cmp::Reverse(t)))
            .unwrap_or(0);
        let mut by_dev: HashMap<(u32, u32), (usize, Vec<usize>)> = HashMap::default();
        for (s, l) in m.lanes.iter().enumerate() {
            let k = store.lanes[l.lane].key;
            let e = by_dev.entry((k.proc, k.device)).or_default();
            e.0 += (l.last - l.first) as usize;
            e.1.push(s);
        }
        let mut devs: Vec<_> = by_dev.into_iter().collect();
        devs.sort_by_key(|d| (std::cmp::Reverse(d.1 .0), d.0));
        let lanes = devs.into_iter().next().map(|d| d.1 .1).unwrap_or_default();
        Anchors { thread, lanes, cpu }
    }

    /// The replayed time of measured time `b`: `b` moved as the first event at or after it
    /// moved (`end`: as the last event ending at or before it).
    fn at(&self, m: &Model, t: &Times, b: Ns, end: bool) -> Ns {
        if self.cpu && self.thread < m.threads.len() {
            let th = &m.threads[self.thread];
            let calls = &m.calls[th.first as usize..th.last as usize];
            if end {
                let i = calls.partition_point(|c| c.end <= b);
                if i > 0 {
                    let c = th.first as usize + i - 1;
                    return b + t.call_end[c] - m.calls[c].end;
                }
            } else {
                let i = calls.partition_point(|c| c.start < b);
                if i < calls.len() {
                    let c = th.first as usize + i;
                    return b + t.call_start[c] - m.calls[c].start;
                }
            }
            return b;
        }
        let mut best: Option<(Ns, usize, bool)> = None;
        for &s in &self.lanes {
            let l = &m.lanes[s];
            let ops = &m.ops[l.first as usize..l.last as usize];
            if end {
                // The latest end at or before b (ends follow starts on a stream).
                let i = ops.partition_point(|o| o.start < b);
                for (q, o) in ops[..i].iter().enumerate().rev().take(4) {
                    if o.end <= b && best.is_none_or(|x| o.end > x.0) {
                        best = Some((o.end, l.first as usize + q, true));
                    }
                }
            } else {
                let i = ops.partition_point(|o| o.start < b);
                if let Some(o) = ops.get(i) {
                    if best.is_none_or(|x| o.start < x.0) {
                        best = Some((o.start, l.first as usize + i, false));
                    }
                }
            }
        }
        match best {
            Some((_, j, true)) => b + t.op_end[j] - m.ops[j].end,
            Some((_, j, false)) => b + t.op_start[j] - m.ops[j].start,
            None => b,
        }
    }
}

/// The replayed wall time of each step of `range`: a step lasts from its start to the next
/// one's (an iteration's period: what a range leaves out between two steps, such as loading
/// the next batch, is the step's too); the last one to its end.
pub(super) fn walls(
    m: &Model,
    t: &Times,
    a: &Anchors,
    steps: &Steps,
    range: std::ops::Range<usize>,
) -> Vec<Ns> {
    spans(m, t, a, steps, range)
        .into_iter()
        .map(|(s, e)| e - s)
        .collect()
}

/// The measured periods of the steps of `range`, as [`walls`] replays them.
pub(super) fn periods(steps: &Steps, range: std::ops::Range<usize>) -> Vec<Ns> {
    range
        .clone()
        .map(|k| {
            let s = &steps.steps[k];
            match steps.steps.get(k + 1) {
                Some(n) if k + 1 < range.end => n.start - s.start,
                _ => s.wall(),
            }
        })
        .collect()
}

/// The steps replayed: the last steady steps, up to [`REPLAY_MAX_OPS`] ops (at least one).
pub(super) fn block(steps: &Steps) -> std::ops::Range<usize> {
    let steady = steps.steady();
    let mut first = steady.end;
    let mut ops = 0u64;
    while first > steady.start {
        let n = steps.steps[first - 1].launches;
        if first < steady.end && ops + n > REPLAY_MAX_OPS as u64 {
            break;
        }
        ops += n;
        first -= 1;
    }
    first..steady.end
}

/// Where the block's calls start: the first step's start, or the launch of its first op when
/// that came earlier (the CPU runs ahead of the GPU).
pub(super) fn block_lo(store: &Store, start: Ns, end: Ns) -> Ns {
    let mut lo = start;
    for (li, lane) in store.lanes.iter().enumerate() {
        let i = lane.lower_bound(start);
        if let Some(op) = lane.get(i).filter(|o| o.start < end) {
            if let Some(a) = store.api_of(li, &op) {
                lo = lo.min(a.start);
            }
        }
    }
    lo
}

/// Each step of `range`'s replayed start and end, read as [`walls`] reads them.
pub(super) fn spans(
    m: &Model,
    t: &Times,
    a: &Anchors,
    steps: &Steps,
    range: std::ops::Range<usize>,
) -> Vec<(Ns, Ns)> {
    range
        .clone()
        .map(|k| {
            let s = &steps.steps[k];
            let end = match steps.steps.get(k + 1) {
                Some(n) if k + 1 < range.end => a.at(m, t, n.start, false),
                _ => a.at(m, t, s.end, true),
            };
            (a.at(m, t, s.start, false), end)
        })
        .collect()
}

/// The median (the lower middle of an even count; 0 for none): the steps' quantile.
pub(super) fn median(v: Vec<Ns>) -> Ns {
    quantile(v, 0.5)
}

//! One device's ops in a window, its streams merged by start: the sequence whose period
//! gives the steps when nothing names them (`period`), listed whole or only in the parts
//! finding the period needs.

use crate::model::lane::Lane;
use crate::model::records::{GpuOp, NameId, Ns, StackId};
use crate::model::store::Store;
use std::ops::Range;

/// One device's ops in the window, all its streams merged by start.
pub struct DeviceSeq {
    /// The device's process.
    pub proc: u32,
    pub starts: Vec<Ns>,
    pub ends: Vec<Ns>,
    pub names: Vec<NameId>,
    pub corrs: Vec<u32>,
}

impl DeviceSeq {
    /// The ops of `lanes` starting in `[lo, hi)`, by start: each lane's a sorted run, merged
    /// (on equal starts the earlier lane's first, as a stable sort of the runs one after
    /// another puts them), straight into lists of their exact length.
    pub fn new(store: &Store, lanes: &[usize], lo: Ns, hi: Ns) -> Self {
        let n = merged_len(store, lanes, lo, hi);
        let mut d = DeviceSeq {
            proc: lanes.first().map_or(0, |&l| store.lanes[l].key.proc),
            starts: Vec::with_capacity(n),
            ends: Vec::with_capacity(n),
            names: Vec::with_capacity(n),
            corrs: Vec::with_capacity(n),
        };
        merged(store, lanes, lo, hi, |o| {
            d.starts.push(o.start);
            d.ends.push(o.end);
            d.names.push(o.name);
            d.corrs.push(o.corr);
        });
        d
    }

    /// What finding the period needs of the ops [`DeviceSeq::new`] lists, and no more: their
    /// names and the device idle before each ([`DeviceSeq::idle_before`]), 12 bytes an op
    /// where the whole sequence and its idle take 32.
    pub fn names_idle(store: &Store, lanes: &[usize], lo: Ns, hi: Ns) -> (Vec<NameId>, Vec<Ns>) {
        let n = merged_len(store, lanes, lo, hi);
        let mut names = Vec::with_capacity(n);
        let mut idle = Vec::with_capacity(n);
        let mut max_end = Ns::MIN;
        merged(store, lanes, lo, hi, |o| {
            names.push(o.name);
            idle.push(if max_end == Ns::MIN {
                0
            } else {
                (o.start - max_end).max(0)
            });
            max_end = max_end.max(o.end);
        });
        (names, idle)
    }

    /// Each op's launch stack ([`DeviceSeq::stack`]) of the ops [`DeviceSeq::new`] lists.
    pub fn stacks(store: &Store, lanes: &[usize], lo: Ns, hi: Ns) -> Vec<StackId> {
        let p = &store.procs[lanes.first().map_or(0, |&l| store.lanes[l].key.proc) as usize];
        let mut st = Vec::with_capacity(merged_len(store, lanes, lo, hi));
        merged(store, lanes, lo, hi, |o| {
            st.push(
                Some(o.corr)
                    .filter(|&c| c != 0)
                    .and_then(|c| p.api_by_corr(c))
                    .map_or(0, |a| a.stack),
            )
        });
        st
    }

    /// The launch stack of op `i` (0 when its launch is not known).
    pub fn stack(&self, store: &Store, i: usize) -> StackId {
        let p = &store.procs[self.proc as usize];
        self.corrs
            .get(i)
            .filter(|&&c| c != 0)
            .and_then(|&c| p.api_by_corr(c))
            .map_or(0, |a| a.stack)
    }

    /// The device with the most ops starting in `[lo, hi)`; `None` when there are none.
    pub fn busiest(store: &Store, lo: Ns, hi: Ns) -> Option<Self> {
        Some(Self::new(store, &busiest_lanes(store, lo, hi)?, lo, hi))
    }

    /// Device idle before each op: its start past the latest end of the ops before it (0 for
    /// the first).
    pub fn idle_before(&self) -> Vec<Ns> {
        let mut max_end = Ns::MIN;
        self.starts
            .iter()
            .zip(&self.ends)
            .map(|(&s, &e)| {
                let idle = if max_end == Ns::MIN {
                    0
                } else {
                    (s - max_end).max(0)
                };
                max_end = max_end.max(e);
                idle
            })
            .collect()
    }

    /// Op index ranges as times: from the first op's start to the next range's first op's
    /// start when it starts where this one ends, else to the latest end of its ops.
    pub fn times(&self, steps: &[Range<usize>]) -> Vec<(Ns, Ns)> {
        times_of(
            steps,
            self.starts.len(),
            |_, r| self.starts[r.start],
            |_, r| self.starts[r.end],
            |_, r| {
                self.ends[r.clone()]
                    .iter()
                    .copied()
                    .max()
                    .unwrap_or(self.starts[r.start])
            },
        )
    }
}

/// The lanes of the device with the most ops starting in `[lo, hi)`; `None` when there are
/// none.
pub fn busiest_lanes(store: &Store, lo: Ns, hi: Ns) -> Option<Vec<usize>> {
    let (_, lanes) = store
        .devices()
        .into_iter()
        .map(|(_, lanes)| (merged_len(store, &lanes, lo, hi), lanes))
        .filter(|(n, _)| *n > 0)
        .max_by_key(|(n, _)| *n)?;
    Some(lanes)
}

/// How many ops of `lanes` start in `[lo, hi)`.
fn merged_len(store: &Store, lanes: &[usize], lo: Ns, hi: Ns) -> usize {
    lanes
        .iter()
        .map(|&l| {
            let lane = &store.lanes[l];
            lane.lower_bound(hi) - lane.lower_bound(lo)
        })
        .sum()
}

/// The ops of `lanes` starting in `[lo, hi)`, by start, each lane's sorted run merged (on
/// equal starts the earlier lane's first), to `push`.
fn merged(store: &Store, lanes: &[usize], lo: Ns, hi: Ns, mut push: impl FnMut(GpuOp)) {
    let mut runs: Vec<(&Lane, usize, usize)> = lanes
        .iter()
        .map(|&l| {
            let lane = &store.lanes[l];
            (lane, lane.lower_bound(lo), lane.lower_bound(hi))
        })
        .collect();
    if let [(lane, a, b)] = runs[..] {
        lane.range(a..b).for_each(push);
        return;
    }
    loop {
        let mut first: Option<(Ns, usize)> = None;
        for (k, &(lane, i, end)) in runs.iter().enumerate() {
            if i < end && first.is_none_or(|(t, _)| lane.start_of(i) < t) {
                first = Some((lane.start_of(i), k));
            }
        }
        let Some((_, k)) = first else { break };
        let (lane, i, _) = runs[k];
        push(lane.op(i));
        runs[k].1 += 1;
    }
}

/// What guessed steps (op index ranges of the sequence [`DeviceSeq::new`] lists, sorted and
/// apart) need of it, found in one pass without listing it: each step's times
/// ([`DeviceSeq::times`]), and its first op's name and launch stack (for the `--step`
/// suggestion). 48 bytes a step at most, where the sequence takes 24 an op.
pub struct Heads {
    pub times: Vec<(Ns, Ns)>,
    /// Each step's first op's name (0 past the sequence's end).
    pub names: Vec<NameId>,
    /// Each step's first op's launch stack ([`DeviceSeq::stack`]).
    pub stacks: Vec<StackId>,
}

impl Heads {
    pub fn of(store: &Store, lanes: &[usize], lo: Ns, hi: Ns, steps: &[Range<usize>]) -> Self {
        let m = steps.len();
        let p = &store.procs[lanes.first().map_or(0, |&l| store.lanes[l].key.proc) as usize];
        let mut names = vec![0; m];
        let mut stacks = vec![0; m];
        // Each step's first op's start, the start of the op at its end index, its ops'
        // latest end.
        let mut first = vec![0; m];
        let mut next = vec![0; m];
        let mut last_end = vec![Ns::MIN; m];
        let (mut ka, mut kb, mut kc, mut i) = (0, 0, 0, 0);
        merged(store, lanes, lo, hi, |o| {
            while ka < m && steps[ka].start < i {
                ka += 1;
            }
            let mut k = ka;
            while k < m && steps[k].start == i {
                first[k] = o.start;
                names[k] = o.name;
                stacks[k] = Some(o.corr)
                    .filter(|&c| c != 0)
                    .and_then(|c| p.api_by_corr(c))
                    .map_or(0, |a| a.stack);
                k += 1;
            }
            while kb < m && steps[kb].end < i {
                kb += 1;
            }
            let mut k = kb;
            while k < m && steps[k].end == i {
                next[k] = o.start;
                k += 1;
            }
            while kc < m && steps[kc].end <= i {
                kc += 1;
            }
            if kc < m && steps[kc].start <= i {
                last_end[kc] = last_end[kc].max(o.end);
            }
            i += 1;
        });
        let times = times_of(
            steps,
            i,
            |k, _| first[k],
            |k, _| next[k],
            |k, _| last_end[k],
        );
        Heads {
            times,
            names,
            stacks,
        }
    }
}

/// [`DeviceSeq::times`] from each non-empty step's (index and range) first op's start, the
/// start of the op at its end index (read only below `n`, the ops' count), and its ops'
/// latest end.
fn times_of(
    steps: &[Range<usize>],
    n: usize,
    first: impl Fn(usize, &Range<usize>) -> Ns,
    next: impl Fn(usize, &Range<usize>) -> Ns,
    last: impl Fn(usize, &Range<usize>) -> Ns,
) -> Vec<(Ns, Ns)> {
    let mut out = Vec::with_capacity(steps.iter().filter(|r| !r.is_empty()).count());
    out.extend(
        steps
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .map(|(k, r)| {
                let s = first(k, r);
                let e = match steps.get(k + 1) {
                    Some(x) if x.start == r.end && r.end < n => next(k, r),
                    _ => last(k, r),
                };
                (s, e.max(s + 1))
            }),
    );
    out
}

/// Each op's name of the sequence [`DeviceSeq::new`] lists, in its order, to `f`.
pub fn each_name(store: &Store, lanes: &[usize], lo: Ns, hi: Ns, mut f: impl FnMut(NameId)) {
    merged(store, lanes, lo, hi, |o| f(o.name));
}

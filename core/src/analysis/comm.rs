//! Communication stalls across ranks.
//!
//! NCCL kernels of one collective start on every rank and finish together, so a rank that
//! reaches the collective late makes the others wait inside their NCCL kernel: that time looks
//! like GPU work but is a stall. Collectives are matched across processes by order (the k-th
//! communication kernel of each rank is the same collective, as in data-parallel training); the
//! rank whose kernel started last is the late one, and every other rank's wait is the time from
//! its own start to the late rank's start.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::records::{Ns, StackId, FLAG_COMM};
use crate::model::store::Store;

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct RankStall {
    pub rank: i32,
    pub pid: u32,
    /// Time this rank's NCCL kernels spent waiting for a later rank.
    pub wait_ns: Ns,
    /// Collectives this rank arrived last at, and by how much in total.
    pub late_count: u64,
    pub late_ns: Ns,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct LateSite {
    pub rank: i32,
    /// The late process (the store's index: ranks may be unknown, all -1).
    #[serde(skip)]
    pub proc: u32,
    pub count: u64,
    pub late_ns: Ns,
    /// What made the rank late, found on its own timeline since its previous collective:
    /// `host_gap` (its GPU idle, waiting for the launch after the longest gap: `frames` is that
    /// launch's stack), `slow_kernel` (a kernel that ran `ratio` times the other ranks' median
    /// over the same stretch: `kernel`), or `collective` (neither: `frames` is the collective's
    /// launch stack).
    pub cause: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ratio: Option<f64>,
    /// The longest such gap, or the slow kernel's time over the others' median, per arrival
    /// (the last one seen).
    pub cause_ns: Ns,
    /// Launch stack, outermost first.
    pub frames: Vec<String>,
}

/// A kernel this many times the other ranks' median over the same stretch is slow.
pub const SLOW_KERNEL_RATIO: f64 = 1.5;

/// What made rank `late` late at collective `k`: its timeline (all its lanes) since its
/// previous collective, against the other ranks' over theirs.
fn late_cause(
    store: &Store,
    lanes: &[Vec<usize>],
    lists: &[&Vec<(Ns, Ns, StackId)>],
    late: usize,
    k: usize,
    lo: Ns,
) -> (&'static str, Option<(String, f64)>, Ns, StackId) {
    // Since the previous collective, or the window's start.
    let window = |i: usize| {
        let from = if k == 0 {
            lo
        } else {
            lists[i][k - 1].1.max(lo)
        };
        (from, lists[i][k].0)
    };
    // Kernel time by name over each rank's stretch.
    let kernels = |i: usize| {
        let (a, b) = window(i);
        let mut m: BTreeMap<u32, Ns> = BTreeMap::new();
        for &l in &lanes[i] {
            let lane = &store.lanes[l];
            for op in lane.range(lane.lower_bound(a)..lane.lower_bound(b)) {
                if op.flags & FLAG_COMM == 0 {
                    *m.entry(op.name).or_default() += op.dur();
                }
            }
        }
        m
    };
    let mine = kernels(late);
    let others: Vec<BTreeMap<u32, Ns>> = (0..lists.len())
        .filter(|&i| i != late)
        .map(kernels)
        .collect();
    let mut slow: Option<(u32, Ns, f64)> = None;
    for (&name, &ns) in &mine {
        let mut v: Vec<Ns> = others
            .iter()
            .map(|m| m.get(&name).copied().unwrap_or(0))
            .collect();
        v.sort_unstable();
        let med = v[(v.len() - 1) / 2];
        if med > 0 && ns as f64 >= SLOW_KERNEL_RATIO * med as f64 {
            let excess = ns - med;
            if slow.is_none_or(|s| excess > s.1) {
                slow = Some((name, excess, ns as f64 / med as f64));
            }
        }
    }
    // The longest stretch with nothing running on the late rank's device, and the launch after.
    let (a, b) = window(late);
    let mut ops: Vec<(Ns, Ns, usize, u32)> = Vec::new();
    for &l in &lanes[late] {
        let lane = &store.lanes[l];
        for op in lane.range(lane.lower_bound(a)..lane.lower_bound(b)) {
            ops.push((op.start, op.end, l, op.corr));
        }
    }
    ops.sort_unstable();
    let mut reach = if k == 0 {
        ops.first().map_or(b, |o| o.0)
    } else {
        a
    };
    let mut gap: Option<(Ns, usize, u32)> = None;
    for &(s, e, l, corr) in &ops {
        if s - reach > gap.map_or(0, |g| g.0) {
            gap = Some((s - reach, l, corr));
        }
        reach = reach.max(e);
    }
    let stack_of = |l: usize, corr: u32| {
        let p = &store.procs[store.lanes[l].key.proc as usize];
        p.api_by_corr(corr).map_or(0, |x| x.stack)
    };
    match (slow, gap) {
        (Some((name, excess, ratio)), g) if g.is_none_or(|g| excess > g.0) => (
            "slow_kernel",
            Some((store.names.get(name).to_string(), ratio)),
            excess,
            0,
        ),
        (_, Some((ns, l, corr))) => ("host_gap", None, ns, stack_of(l, corr)),
        _ => ("collective", None, 0, lists[late][k].2),
    }
}

#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct CommReport {
    pub ranks: usize,
    pub collectives: u64,
    pub comm_kernels: u64,
    pub per_rank: Vec<RankStall>,
    /// Where late ranks were when they finally launched, most late time first.
    pub late_sites: Vec<LateSite>,
}

/// Analyses communication kernels between `lo` and `hi` (absolute ns). Empty when fewer than
/// two processes ran communication kernels.
pub fn analyse(store: &Store, lo: Ns, hi: Ns) -> CommReport {
    // Per process: its comm ops in time order, with their launch stack.
    let mut per_proc: BTreeMap<u32, Vec<(Ns, Ns, StackId)>> = BTreeMap::new();
    for lane in &store.lanes {
        let proc = &store.procs[lane.key.proc as usize];
        let a = lane.lower_bound(lo);
        let b = lane.lower_bound(hi);
        for op in lane.range(a..b) {
            if op.flags & FLAG_COMM != 0 {
                let stack = proc.api_by_corr(op.corr).map(|x| x.stack).unwrap_or(0);
                per_proc
                    .entry(lane.key.proc)
                    .or_default()
                    .push((op.start, op.end, stack));
            }
        }
    }
    let mut r = CommReport {
        comm_kernels: per_proc.values().map(|v| v.len() as u64).sum(),
        ..Default::default()
    };
    if per_proc.len() < 2 {
        return r;
    }
    let procs: Vec<u32> = per_proc.keys().copied().collect();
    for v in per_proc.values_mut() {
        v.sort();
    }
    r.ranks = procs.len();
    r.per_rank = procs
        .iter()
        .map(|&p| RankStall {
            rank: store.procs[p as usize].rank,
            pid: store.procs[p as usize].pid,
            ..Default::default()
        })
        .collect();
    let n = per_proc.values().map(|v| v.len()).min().unwrap_or(0);
    // Each rank's lanes.
    let lanes: Vec<Vec<usize>> = procs
        .iter()
        .map(|&p| {
            (0..store.lanes.len())
                .filter(|&l| store.lanes[l].key.proc == p)
                .collect()
        })
        .collect();
    // Per (rank, cause, kernel or stack): arrivals, late time, the cause's figure and ratio.
    type Key = (usize, &'static str, String, StackId);
    let mut sites: BTreeMap<Key, (u64, Ns, Ns, f64)> = BTreeMap::new();
    let lists: Vec<&Vec<(Ns, Ns, StackId)>> = procs.iter().map(|p| &per_proc[p]).collect();
    for k in 0..n {
        let starts: Vec<(Ns, Ns, StackId)> = lists.iter().map(|l| l[k]).collect();
        let (late_i, late) = starts
            .iter()
            .enumerate()
            .max_by_key(|(_, s)| s.0)
            .map(|(i, s)| (i, *s))
            .expect("at least two ranks");
        let earliest = starts.iter().map(|s| s.0).min().unwrap_or(late.0);
        r.collectives += 1;
        for (i, s) in starts.iter().enumerate() {
            if i != late_i {
                r.per_rank[i].wait_ns += (late.0 - s.0).min(s.1 - s.0).max(0);
            }
        }
        let by = late.0 - earliest;
        if by > 0 {
            r.per_rank[late_i].late_count += 1;
            r.per_rank[late_i].late_ns += by;
            let (cause, kernel, cause_ns, stack) = late_cause(store, &lanes, &lists, late_i, k, lo);
            let (name, ratio) = kernel.unwrap_or_default();
            let e = sites.entry((late_i, cause, name, stack)).or_default();
            e.0 += 1;
            e.1 += by;
            e.2 = cause_ns;
            e.3 = ratio;
        }
    }
    let mut v: Vec<_> = sites.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1 .1));
    r.late_sites = v
        .into_iter()
        .take(10)
        .map(
            |((i, cause, kernel, stack), (count, late_ns, cause_ns, ratio))| LateSite {
                rank: r.per_rank[i].rank,
                proc: procs[i],
                count,
                late_ns,
                cause,
                kernel: (!kernel.is_empty()).then_some(kernel),
                ratio: (ratio > 0.0).then_some(ratio),
                cause_ns,
                frames: store.frame_strings(stack),
            },
        )
        .collect();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::records::{ApiCall, ApiKind, GpuOp, LaneKey, OpKind};

    /// Two ranks, three all-reduces; rank 1 arrives 5 µs late at the first two (launched from
    /// `late_allreduce`), rank 0 arrives 1 µs late at the third.
    #[test]
    fn the_late_rank_is_named_and_the_others_wait() {
        let mut st = Store::default();
        let name = st.names.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
        let api = st.names.intern("cudaLaunchKernel");
        let f = st.names.intern("ddp.py(20): late_allreduce");
        let late_stack = st.stacks.intern(0, f);
        for (rank, starts) in [(0, [100, 200, 301]), (1, [105, 205, 300])] {
            let p = st.add_process(1000 + rank as u32, rank, "ddp.py");
            let lane = st.lane_id(LaneKey {
                proc: p,
                device: rank as u32,
                stream: 20,
            });
            for (k, s) in starts.iter().enumerate() {
                let mut op = GpuOp::new(
                    s * 1000,
                    400_000 + k as i64 * 100_000,
                    OpKind::Kernel,
                    name,
                    k as u32 + 1,
                );
                op.flags |= FLAG_COMM;
                st.add_op(lane, op);
                let stack = if rank == 1 { late_stack } else { 0 };
                st.add_api(
                    p,
                    ApiCall {
                        start: s * 1000 - 500,
                        end: s * 1000 - 400,
                        corr: k as u32 + 1,
                        tid: 1,
                        name: api,
                        stack,
                        kind: ApiKind::Launch,
                    },
                );
            }
        }
        let r = analyse(&st, 0, i64::MAX);
        assert_eq!(r.ranks, 2);
        assert_eq!(r.collectives, 3);
        assert_eq!(r.per_rank[0].wait_ns, 5_000 + 5_000);
        assert_eq!(r.per_rank[1].wait_ns, 1_000);
        assert_eq!(
            (r.per_rank[1].late_count, r.per_rank[1].late_ns),
            (2, 10_000)
        );
        assert_eq!(
            (r.per_rank[0].late_count, r.per_rank[0].late_ns),
            (1, 1_000)
        );
        assert_eq!(r.late_sites[0].rank, 1);
        assert_eq!(
            r.late_sites[0].frames,
            vec!["ddp.py(20): late_allreduce".to_string()]
        );
    }
}

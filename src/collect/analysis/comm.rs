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

use crate::collect::model::records::{Ns, StackId, FLAG_COMM};
use crate::collect::model::store::Store;

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

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct LateSite {
    pub rank: i32,
    pub count: u64,
    pub late_ns: Ns,
    /// Launch stack of the late rank's collective, outermost first.
    pub frames: Vec<String>,
}

#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
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
pub fn analyze(store: &Store, lo: Ns, hi: Ns) -> CommReport {
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
    let mut sites: BTreeMap<(usize, StackId), (u64, Ns)> = BTreeMap::new();
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
            let e = sites.entry((late_i, late.2)).or_default();
            e.0 += 1;
            e.1 += by;
        }
    }
    let mut v: Vec<_> = sites.into_iter().collect();
    v.sort_by_key(|e| std::cmp::Reverse(e.1 .1));
    r.late_sites = v
        .into_iter()
        .take(10)
        .map(|((i, stack), (count, late_ns))| LateSite {
            rank: r.per_rank[i].rank,
            count,
            late_ns,
            frames: store.frame_strings(stack),
        })
        .collect();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::model::records::{ApiCall, ApiKind, GpuOp, LaneKey, OpKind};

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
        let r = analyze(&st, 0, i64::MAX);
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

//! The ranks of a window side by side: for each, how long its devices sat idle, how long its
//! NCCL kernels waited for later ranks, how often and how late it was the last to arrive,
//! and what made it late most (the communication analysis' late sites). The UI's rank
//! summary reads it; with 64 ranks it is the one place the straggler stands out.

use super::comm::{CommReport, LateSite};
use super::gaps::device_idle;
use crate::frames::{pretty_frame, short_kernel};
use crate::model::records::Ns;
use crate::model::store::Store;

/// One rank of the window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankRow {
    pub rank: i32,
    /// The store's process (ranks may be unknown: -1).
    pub proc: u32,
    /// Time its devices ran nothing, summed over its devices.
    pub idle_ns: Ns,
    /// Time its NCCL kernels waited for a later rank.
    pub wait_ns: Ns,
    /// Collectives it arrived last at, and by how much in all.
    pub late_count: u64,
    pub late_ns: Ns,
    /// What made it late most, in a few words (empty when it never was, or no cause is
    /// known: only the ten largest late sites are kept).
    pub cause: String,
}

/// A row a process of `store` with GPU work in `[lo, hi)`, in rank order, with `comm`'s
/// figures (None: no collectives, waits and lateness 0). Empty for fewer than two ranks.
pub fn summarize(store: &Store, lo: Ns, hi: Ns, comm: Option<&CommReport>) -> Vec<RankRow> {
    if store.rank_count() < 2 {
        return Vec::new();
    }
    let mut rows: Vec<RankRow> = Vec::new();
    for ((proc, _), lanes) in store.devices() {
        let mut idle = 0;
        device_idle(store, &lanes, lo, hi, |a, b| idle += b - a);
        match rows.iter_mut().find(|r| r.proc == proc) {
            Some(r) => r.idle_ns += idle,
            None => rows.push(RankRow {
                rank: store.procs[proc as usize].rank,
                proc,
                idle_ns: idle,
                ..Default::default()
            }),
        }
    }
    if let Some(c) = comm {
        for r in rows.iter_mut() {
            let rank = store.procs[r.proc as usize].rank;
            let pid = store.procs[r.proc as usize].pid;
            if let Some(s) = c.per_rank.iter().find(|s| s.rank == rank && s.pid == pid) {
                r.wait_ns = s.wait_ns;
                r.late_count = s.late_count;
                r.late_ns = s.late_ns;
            }
            // The late sites come most late time first.
            if let Some(site) = c.late_sites.iter().find(|s| s.proc == r.proc) {
                r.cause = cause_text(site);
            }
        }
    }
    rows.sort_by_key(|r| (r.rank, r.proc));
    rows
}

/// A late site's cause in a few words: the code before the long host gap, the slow kernel
/// and how slow, or the collective's own launch.
pub fn cause_text(site: &LateSite) -> String {
    let frame = site
        .frames
        .last()
        .map(|f| pretty_frame(f))
        .unwrap_or_default();
    match (site.cause, &site.kernel) {
        ("slow_kernel", Some(k)) => format!(
            "slow GPU: {} {:.1}x",
            short_kernel(k),
            site.ratio.unwrap_or(0.0)
        ),
        ("host_gap", _) if !frame.is_empty() => format!("CPU late: {frame}"),
        ("host_gap", _) => "CPU late (no stack)".to_string(),
        _ if !frame.is_empty() => format!("late launch: {frame}"),
        _ => "late launch".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_read_as_a_few_words() {
        let mut s = LateSite {
            cause: "host_gap",
            frames: vec![
                "train.py(10): main".into(),
                "model.py(55): Model.stall".into(),
            ],
            ..Default::default()
        };
        assert_eq!(cause_text(&s), "CPU late: Model.stall  model.py:55");
        s.frames.clear();
        assert_eq!(cause_text(&s), "CPU late (no stack)");
        s.cause = "slow_kernel";
        s.kernel = Some("layer_kernel_0(float*)".into());
        s.ratio = Some(3.04);
        assert_eq!(cause_text(&s), "slow GPU: layer_kernel_0 3.0x");
        s.cause = "collective";
        assert_eq!(cause_text(&s), "late launch");
    }
}

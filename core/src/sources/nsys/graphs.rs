//! CUDA graph nodes (`CUDA_GRAPH_NODE_EVENTS`, `--cuda-graph-trace=node`): where and when each
//! node was made, followed from an instantiated graph's clone back to the node the program
//! made; an op replayed from such a node gets a correlation id of its own, and, once the
//! calls have their stacks, a call of its own: its replay's `cudaGraphLaunch` with the
//! launch's stack, then [`CAPTURED_AT`] and the stack of the call the node was made in. A
//! module of its own because it joins ops, calls and stacks across the whole export.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::calls::CLASS_BACKTRACE;
use super::db::{corr_of, proc_key, tid_of};
use super::import::{Import, Replayed};
use crate::model::records::{ApiCall, Ns, StackId};

/// Correlation ids from here up are gaptop's own (CUPTI's count up from 1 in a process).
const OWN_CORR: u32 = 0xC000_0000;

/// The frame between a replayed node's launch stack and the stack it was captured at.
pub const CAPTURED_AT: &str = "(graph node captured at)";

impl Import {
    /// Reads `CUDA_GRAPH_NODE_EVENTS` (`--cuda-graph-trace=node`): each node's making, and the
    /// original each instantiated node was cloned from, followed back to the node the program
    /// made (by stream capture or a `cudaGraphAdd*Node` call).
    pub(super) fn graph_nodes(&mut self) -> anyhow::Result<()> {
        let t = "CUDA_GRAPH_NODE_EVENTS";
        if !self.db.has(t) {
            return Ok(());
        }
        let rows = self.db.ints(
            t,
            &["start!", "globalTid", "graphNodeId!", "originalGraphNodeId"],
        )?;
        let mut parent: HashMap<(i64, i64), i64> = HashMap::default();
        let mut made: HashMap<(i64, i64), (i64, Ns)> = HashMap::default();
        for [start, gtid, node, original] in rows {
            let (Some(start), Some(gtid), Some(node)) = (start, gtid, node) else {
                continue;
            };
            let key = (proc_key(gtid), node);
            match original {
                Some(o) if o != node => {
                    parent.insert(key, o);
                }
                _ => {
                    made.insert(key, (gtid, start));
                }
            }
        }
        // Only a node made inside a call of the export can be placed: the others keep their
        // replay's launch (and its correlation id).
        let mut spans: HashMap<i64, Vec<(Ns, Ns)>> = HashMap::default();
        let threads: HashSet<i64> = made.values().map(|m| m.0).collect();
        for t in ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"] {
            if threads.is_empty() || !self.db.has(t) {
                continue;
            }
            for [start, end, gtid, class] in self
                .db
                .ints(t, &["start!", "end!", "globalTid", "eventClass"])?
            {
                if let (Some(a), Some(b), Some(g)) = (start, end, gtid) {
                    if threads.contains(&g) && !class.is_some_and(|c| CLASS_BACKTRACE.contains(&c))
                    {
                        spans.entry(g).or_default().push((a, b));
                    }
                }
            }
        }
        for v in spans.values_mut() {
            // By start, each with the latest end so far: a call holds t when the latest end
            // among those started by t reaches it.
            v.sort_unstable();
            let mut reach = Ns::MIN;
            for s in v.iter_mut() {
                reach = reach.max(s.1);
                s.1 = reach;
            }
        }
        made.retain(|_, &mut (g, t)| {
            spans.get(&g).is_some_and(|v| {
                let i = v.partition_point(|s| s.0 <= t);
                i > 0 && v[i - 1].1 >= t
            })
        });
        for &(pk, node) in made.keys().chain(parent.keys()) {
            // Clones of clones lead back to the original; a loop leads nowhere.
            let mut n = node;
            for _ in 0..64 {
                if let Some(&m) = made.get(&(pk, n)) {
                    self.node_origin.insert((pk, node), m);
                    break;
                }
                match parent.get(&(pk, n)) {
                    Some(&o) => n = o,
                    None => break,
                }
            }
        }
        Ok(())
    }

    /// A correlation id of its own for an op replayed from graph node `node` whose original's
    /// making is known.
    pub(super) fn replay(&mut self, gpid: i64, node: i64, launch: Option<i64>) -> Option<u32> {
        let made = *self.node_origin.get(&(proc_key(gpid), node))?;
        let corr = OWN_CORR.checked_add(self.replayed.len() as u32)?;
        let proc = self.proc(gpid);
        self.replayed.push(Replayed {
            proc,
            launch: corr_of(launch),
            corr,
            made,
        });
        Some(corr)
    }
}

/// A call of its own for each replayed graph node whose making is known: its replay's
/// `cudaGraphLaunch` (times, thread, name), with the launch's stack, then [`CAPTURED_AT`], then
/// the stack of the call its original node was made in (the launch captured into the graph,
/// under its NVTX ranges and call chain), so that a graph's gaps name the code each node came
/// from. A node whose replay or making call is not in the export keeps its launch's stack.
pub(super) fn captured_calls(
    im: &mut Import,
    calls: &[(u32, ApiCall)],
    replayed: &[Replayed],
) -> Vec<(u32, ApiCall)> {
    if replayed.is_empty() {
        // Most exports: no graph node to place, so no index of every call to build.
        return Vec::new();
    }
    let mut by_corr: HashMap<(u32, u32), usize> = HashMap::default();
    let mut by_thread: HashMap<(u32, u32), Vec<usize>> = HashMap::default();
    for (i, (proc, c)) in calls.iter().enumerate() {
        if c.corr != 0 {
            by_corr.insert((*proc, c.corr), i);
        }
        by_thread.entry((*proc, c.tid)).or_default().push(i);
    }
    for v in by_thread.values_mut() {
        v.sort_by_key(|&i| calls[i].1.start);
    }
    let marker = im.store.names.intern(CAPTURED_AT);
    let mut memo: HashMap<(StackId, StackId), StackId> = HashMap::default();
    let mut out = Vec::with_capacity(replayed.len());
    for r in replayed {
        let Some(&li) = by_corr.get(&(r.proc, r.launch)) else {
            continue;
        };
        let launch = calls[li].1;
        let (gtid, t) = r.made;
        let maker = im.procs.get(&proc_key(gtid)).and_then(|&p| {
            let v = by_thread.get(&(p, tid_of(gtid)))?;
            let i = v.partition_point(|&i| calls[i].1.start <= t);
            v[..i]
                .iter()
                .rev()
                .map(|&i| calls[i].1)
                .find(|c| c.end >= t)
        });
        let stack = match maker {
            Some(m) => *memo.entry((launch.stack, m.stack)).or_insert_with(|| {
                let s = im.store.stacks.intern(launch.stack, marker);
                let frames = im.store.stacks.frames(m.stack);
                im.store.stacks.intern_path(s, frames)
            }),
            None => launch.stack,
        };
        out.push((
            r.proc,
            ApiCall {
                corr: r.corr,
                stack,
                ..launch
            },
        ));
    }
    out
}

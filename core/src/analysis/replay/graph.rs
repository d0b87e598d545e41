//! The whole step as CUDA graphs, as a change of the replay's model (beside the sites' fixes
//! of `whatif`).

use super::model::{op_of_calls, Model, NONE};
use crate::analysis::steps::Steps;
use crate::model::records::{ApiKind, Ns};

/// What [`graphs`] replaced: a call's CPU time before and in it, an op's latency.
pub(super) struct GraphUndo {
    calls: Vec<(u32, Ns, Ns)>,
    ops: Vec<(u32, Ns)>,
}

impl GraphUndo {
    pub(super) fn revert(self, m: &mut Model) {
        for (c, seg, own) in self.calls {
            let x = &mut m.calls[c as usize];
            (x.seg, x.own) = (seg, own);
        }
        for (j, lat) in self.ops {
            m.ops[j as usize].lat = lat;
        }
    }
}

/// Each step's launches between its syncs as one CUDA graph, in place: on every thread, a run
/// of launches and copies whose ops lie in one step (`range` of `steps`), with no call between
/// them that waited for the GPU, keeps its first call; the others take no CPU time before or
/// in them, and their ops are ready when the first one's was (a graph launch makes all its
/// kernels ready at once; they still run in order on their streams, spaced as measured).
pub(super) fn graphs(m: &mut Model, steps: &Steps, range: std::ops::Range<usize>) -> GraphUndo {
    // At most every call and op changes, each once: room for them at once, and only for the
    // fields this changes (a whole call and op each would be 4x as much, at the report's peak).
    let mut u = GraphUndo {
        calls: Vec::with_capacity(m.calls.len()),
        ops: Vec::with_capacity(m.ops.len()),
    };
    let starts: Vec<Ns> = steps.steps[range].iter().map(|s| s.start).collect();
    let op_of = op_of_calls(m);
    for t in 0..m.threads.len() {
        let (first, last) = (m.threads[t].first, m.threads[t].last);
        // The open graph: its first call and op, and their step.
        let mut open: Option<(u32, u32, usize)> = None;
        for c in first..last {
            let call = m.calls[c as usize];
            let j = op_of[c as usize];
            let capturable = matches!(call.kind, ApiKind::Launch | ApiKind::Copy)
                && call.wait == NONE
                && j != NONE;
            if !capturable {
                open = None;
                continue;
            }
            let step = starts.partition_point(|&s| s <= m.ops[j as usize].start);
            match open {
                Some((c0, j0, s0)) if s0 == step => {
                    let lat = m.ops[j0 as usize].lat - m.calls[c0 as usize].own;
                    let x = &mut m.calls[c as usize];
                    u.calls.push((c, x.seg, x.own));
                    x.seg = 0;
                    x.own = 0;
                    let o = &mut m.ops[j as usize];
                    u.ops.push((j, o.lat));
                    o.lat = lat;
                }
                _ => open = Some((c, j, step)),
            }
        }
    }
    u
}

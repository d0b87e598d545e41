//! The GPU ops: kernels, memory copies and memsets (`CUPTI_ACTIVITY_KIND_KERNEL`, `_MEMCPY`,
//! `_MEMSET`), one lane per (process, device, stream), and the CUDA graphs traced whole
//! (`_GRAPH_TRACE`, one op per replay). An op of a graph belongs to the graph launch it came
//! from; one replayed from a node whose making is known gets a correlation id of its own
//! (`graphs.rs`).

use super::db::corr_of;
use super::import::Import;
use crate::frames::is_comm_kernel;
use crate::model::plausible::{self, What};
use crate::model::records::{GpuOp, LaneKey, NameId, OpKind, FLAG_COMM};

impl Import {
    /// Adds one GPU op; `None` when its times cannot be right (counted as skipped).
    #[allow(clippy::too_many_arguments)]
    fn op(
        &mut self,
        gpid: Option<i64>,
        device: Option<i64>,
        stream: Option<i64>,
        start: Option<i64>,
        end: Option<i64>,
        kind: OpKind,
        name: NameId,
        corr: Option<i64>,
        graph: bool,
        as_corr: Option<u32>,
    ) {
        let (Some(start), Some(end)) = (start, end) else {
            self.store.skip("GPU op without a start or an end");
            return;
        };
        if let Some(v) = plausible::shape(What::GpuOp, start, end) {
            self.store.drop_implausible(What::GpuOp, v, name);
            return;
        }
        let proc = self.proc(gpid.unwrap_or(0));
        let lane = self.store.lane_id(LaneKey {
            proc,
            device: device.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
            stream: stream.unwrap_or(0).clamp(0, u32::MAX as i64) as u32,
        });
        let corr = corr_of(corr);
        let mut op = GpuOp::new(start, end, kind, name, as_corr.unwrap_or(corr));
        if graph {
            op.graph = corr.max(1);
        }
        if kind == OpKind::Kernel && is_comm_kernel(self.store.names.get(name)) {
            op.flags |= FLAG_COMM;
        }
        self.store.push_op_unsorted(lane, op);
    }

    /// The GPU ops of the kernel, memcpy and memset tables, and of the graphs traced whole.
    pub(super) fn ops(&mut self) -> anyhow::Result<()> {
        // Each table with its graph column and the two columns its ops are named by.
        let tables = [
            (
                "CUPTI_ACTIVITY_KIND_KERNEL",
                Some(OpKind::Kernel),
                ["graphNodeId", "demangledName", "shortName"],
            ),
            (
                "CUPTI_ACTIVITY_KIND_MEMCPY",
                Some(OpKind::Memcpy),
                ["graphNodeId", "copyKind", "copyKind"],
            ),
            (
                "CUPTI_ACTIVITY_KIND_MEMSET",
                Some(OpKind::Memset),
                ["graphNodeId", "value", "value"],
            ),
            (
                "CUPTI_ACTIVITY_KIND_GRAPH_TRACE",
                None,
                ["graphId", "graphId", "graphExecId"],
            ),
        ];
        for (t, kind, [graph, a, b]) in tables {
            if !self.db.has(t) {
                continue;
            }
            let cols = [
                "start!",
                "end!",
                "deviceId",
                "streamId",
                "correlationId",
                "globalPid",
                graph,
                a,
                b,
            ];
            let rows = self.db.ints(t, &cols)?;
            if kind.is_none() && !rows.is_empty() {
                self.note(
                    "CUDA graphs traced whole (--cuda-graph-trace=graph): each replay is one op"
                        .into(),
                );
            }
            for [start, end, dev, stream, corr, gpid, graph, a, b] in rows {
                // A graph traced whole has no nodes.
                let node = graph.filter(|_| kind.is_some());
                let (name, kind) = match kind {
                    Some(OpKind::Kernel) => match self.strings.name(&mut self.store, a) {
                        0 => (self.strings.name(&mut self.store, b), OpKind::Kernel),
                        n => (n, OpKind::Kernel),
                    },
                    Some(OpKind::Memcpy) => {
                        let kinds = &gaptop_wire::COPY_KINDS;
                        let k = a.unwrap_or(0).clamp(0, kinds.len() as i64 - 1) as usize;
                        (self.store.names.intern(kinds[k]), OpKind::Memcpy)
                    }
                    Some(k) => (self.store.names.intern("Memset"), k),
                    None => {
                        let n = format!("CUDA graph {}", graph.unwrap_or(0));
                        (self.store.names.intern(&n), OpKind::Kernel)
                    }
                };
                let in_graph = graph.is_some();
                let as_corr = match (node, gpid) {
                    (Some(node), Some(gpid)) => self.replay(gpid, node, corr),
                    _ => None,
                };
                self.op(
                    gpid, dev, stream, start, end, kind, name, corr, in_graph, as_corr,
                );
            }
        }
        Ok(())
    }
}

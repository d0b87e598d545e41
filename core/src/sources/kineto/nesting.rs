//! The CPU spans, once every event is in: each thread's sorted and nested, every nesting a
//! call stack, `user_annotation`s also kept as ranges, and each API call without a stack of
//! its own given the stack of the span around it. The store's lanes and calls are sorted
//! and indexed last.

use super::builder::{Builder, RawSpan};
use crate::model::ranges::Range;
use crate::model::records::Span;
use crate::model::store::Store;

impl Builder {
    /// Builds span nesting and stacks, attaches a stack to every API call, sorts lanes.
    pub fn finish(mut self) -> Store {
        let st = &mut self.store;
        for ((proc, device, stream), v) in self.gpu_annotations.drain() {
            st.procs[proc as usize].set_gpu_ranges(device, stream, v);
        }
        let mut links = crate::sources::fwdbwd::Links::default();
        for ((proc, tid), mut raw) in self.spans.drain() {
            raw.sort_by(|a, b| {
                a.start
                    .cmp(&b.start)
                    .then(b.end.cmp(&a.end))
                    .then(a.rank.cmp(&b.rank))
            });
            st.procs[proc as usize].set_ranges(tid, user_annotations(&raw));
            let mut out: Vec<Span> = Vec::with_capacity(raw.len());
            let mut seqs: Vec<crate::sources::fwdbwd::Seq> = Vec::with_capacity(raw.len());
            let mut open: Vec<u32> = Vec::new();
            for r in raw {
                while let Some(&top) = open.last() {
                    let t = &out[top as usize];
                    if t.end >= r.end && t.start <= r.start {
                        break;
                    }
                    open.pop();
                }
                let (parent, pstack) = match open.last() {
                    Some(&p) => (p, out[p as usize].stack),
                    // An outermost span sits in the Python stack it names, if it names one.
                    None => (u32::MAX, r.pystack),
                };
                let stack = st.stacks.intern(pstack, r.name);
                let pseq = open.last().map(|&p| seqs[p as usize]);
                links.span(proc, r.seq, pseq, r.start, stack);
                seqs.push(r.seq);
                out.push(Span {
                    start: r.start,
                    end: r.end,
                    stack,
                    parent,
                });
                open.push((out.len() - 1) as u32);
            }
            st.procs[proc as usize].spans.insert(tid, out);
        }
        links.resolve(st);
        for p in st.procs.iter_mut() {
            p.stacks_from_spans();
        }
        st.fold_stacks();
        st.finish_bulk();
        self.store
    }
}

/// A thread's `user_annotation` spans (torch.profiler's `record_function`, NVTX-like), as ranges.
fn user_annotations(raw: &[RawSpan]) -> Vec<Range> {
    raw.iter()
        .filter(|r| r.rank == 1)
        .map(|r| Range::new(r.start, r.end, r.name, 0))
        .collect()
}

//! Backward ops linked to the forward ops that made them, in torch.profiler (Kineto) traces.
//!
//! Autograd numbers the nodes it makes in the forward pass: an op's `Sequence number` argument
//! is the number the next node will take, and the backward op that runs a node (Kineto's
//! `autograd::engine::evaluate_function: MulBackward0` and the `MulBackward0` op inside it, on
//! the backward thread, with a nonzero `Fwd thread id`) carries the node's number. So the
//! forward op that made a node is an outermost op with its number (outermost: not inside an op
//! with the same number, which is the same op's dispatch): the one the node names
//! (`NativeLayerNormBackward0`: `aten::layer_norm`), else the last (ops that make no node share
//! the number). Its stack (its Python frames, then the op) says in words what the backward's
//! launches mirror: "backward of mul (forward: mul in Net.forward  model.py:5)". Links go to
//! `Store::forward_of`, by the backward op's stack.

use std::collections::HashMap;

use crate::model::records::{Ns, StackId};
use crate::model::store::Store;

/// The sequence-number arguments of a span: its number, and whether it runs a backward node.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Seq {
    /// `Sequence number`, -1 without one.
    pub nr: i64,
    /// `Fwd thread id` is there and nonzero: the span runs a backward node.
    pub backward: bool,
}

impl Seq {
    pub const NONE: Seq = Seq {
        nr: -1,
        backward: false,
    };
}

/// A forward span: its start, its stack, and whether it is outermost (not inside a span of
/// the same number: the same op's dispatch).
type Fwd = (Ns, StackId, bool);

/// Forward and backward spans by sequence number, per process, until [`Links::resolve`].
#[derive(Default)]
pub struct Links {
    /// (process, number) to the forward spans of that number.
    forward: HashMap<(u32, i64), Vec<Fwd>>,
    /// Backward spans: process, number, stack.
    backward: Vec<(u32, i64, StackId)>,
}

impl Links {
    /// A span of process `proc`, starting at `start`, whose stack (its own frame included) is
    /// `stack`; `parent` is its parent span's numbers (None at the top).
    pub fn span(&mut self, proc: u32, seq: Seq, parent: Option<Seq>, start: Ns, stack: StackId) {
        if seq.nr < 0 {
            return;
        }
        if seq.backward {
            self.backward.push((proc, seq.nr, stack));
        } else {
            let outermost = parent.is_none_or(|p| p.nr != seq.nr || p.backward);
            self.forward
                .entry((proc, seq.nr))
                .or_default()
                .push((start, stack, outermost));
        }
    }

    /// Writes each backward op's forward op to the store, by the backward op's stack. For a
    /// node that names an op (`NativeLayerNormBackward0`), the latest forward op of its number
    /// of that name (`aten::layer_norm`; `aten::addmm` inside `aten::linear` for
    /// `AddmmBackward0`), as its outermost op; none when no op of its number has that name (its
    /// forward is outside the trace). For other nodes (`AccumulateGrad`), the latest outermost
    /// op of its number. Where one stack runs several nodes, the forward stack most of them
    /// have ([`Store::forward_split`] keeps them all).
    pub fn resolve(self, store: &mut Store) {
        let mut votes: HashMap<StackId, HashMap<StackId, u32>> = HashMap::new();
        for (proc, nr, stack) in self.backward {
            let Some(cands) = self.forward.get(&(proc, nr)) else {
                continue;
            };
            let name = |s: StackId| store.names.get(store.stacks.node(s).frame);
            let want =
                crate::frames::backward_node(name(stack)).and_then(crate::frames::forward_op);
            let latest = |keep: &dyn Fn(&Fwd) -> bool| {
                cands
                    .iter()
                    .filter(|c| keep(c))
                    .max_by_key(|c| c.0)
                    .map(|c| c.1)
            };
            let found = match &want {
                Some(w) => latest(&|c| names_op(w, name(c.1))).map(|s| outermost(store, s, cands)),
                None => latest(&|c| c.2),
            };
            if let Some(f) = found {
                *votes.entry(stack).or_default().entry(f).or_default() += 1;
            }
        }
        for (bwd, v) in votes {
            if let Some((&f, _)) = v.iter().max_by_key(|(&f, &n)| (n, std::cmp::Reverse(f))) {
                store.forward_of.insert(bwd, f);
            }
            if v.len() > 1 {
                let mut all: Vec<(StackId, u32)> = v.into_iter().collect();
                all.sort_unstable();
                store.forward_split.insert(bwd, all);
            }
        }
    }
}

/// Whether a node's forward op `want` (`native_layer_norm`) and an op's name
/// (`aten::layer_norm`, `aten::mul_`) name the same op: the words of one are a run of the
/// other's (`t` is not `native_layer_norm`'s).
fn names_op(want: &str, op: &str) -> bool {
    let words = |s: &str| -> Vec<String> {
        s.trim_start_matches("aten::")
            .split('_')
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect()
    };
    let (a, b) = (words(want), words(op));
    let within = |x: &[String], y: &[String]| !x.is_empty() && y.windows(x.len()).any(|w| w == x);
    within(&a, &b) || within(&b, &a)
}

/// The outermost forward span of the same number that holds the span of stack `s`: the nearest
/// of its stack's ancestors (itself first) that is an outermost one's.
fn outermost(store: &Store, s: StackId, cands: &[Fwd]) -> StackId {
    let mut at = s;
    while at != 0 {
        if cands.iter().any(|c| c.2 && c.1 == at) {
            return at;
        }
        at = store.stacks.node(at).parent;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backward_op_links_to_the_forward_op_its_node_names() {
        let mut st = Store::default();
        let mut n = |s: &str| st.names.intern(s);
        let (py, copy, conv, inner, bwd) = (
            n("model.py(3): Net.forward"),
            n("aten::copy_"),
            n("aten::conv2d"),
            n("aten::cudnn_convolution"),
            n("Conv2DBackward"),
        );
        let (acc, cudnn_bwd, mm) = (
            n("torch::autograd::AccumulateGrad"),
            n("CudnnConvolutionBackward"),
            n("MmBackward0"),
        );
        let py_s = st.stacks.intern(0, py);
        let copy_s = st.stacks.intern(py_s, copy);
        let conv_s = st.stacks.intern(py_s, conv);
        let inner_s = st.stacks.intern(conv_s, inner);
        let [bwd_s, acc_s, cudnn_s, mm_s] =
            [bwd, acc, cudnn_bwd, mm].map(|f| st.stacks.intern(0, f));
        let fwd = |nr| Seq {
            nr,
            backward: false,
        };
        let back = |nr| Seq { nr, backward: true };
        let mut l = Links::default();
        // Copies made no node and share the number, before and after the conv that made it
        // (its dispatch inside it): the node names the conv.
        l.span(0, fwd(7), None, 10, copy_s);
        l.span(0, fwd(7), None, 20, conv_s);
        l.span(0, fwd(7), Some(fwd(7)), 21, inner_s);
        l.span(0, fwd(7), None, 25, copy_s);
        l.span(0, Seq::NONE, None, 30, py_s);
        l.span(0, back(7), None, 100, bwd_s);
        // Another process's number 7 is another node.
        l.span(1, back(7), None, 100, acc_s);
        // A node of no op (AccumulateGrad): the latest outermost op of its number.
        l.span(0, fwd(8), None, 40, conv_s);
        l.span(0, fwd(8), Some(fwd(8)), 41, inner_s);
        l.span(0, fwd(8), None, 50, copy_s);
        l.span(0, back(8), None, 100, acc_s);
        // A node whose op runs inside another (cudnn_convolution inside conv2d): the outer one.
        l.span(0, back(8), None, 100, cudnn_s);
        // A node whose op is not among its number's (its forward is outside the trace): none.
        l.span(0, back(8), None, 100, mm_s);
        l.resolve(&mut st);
        assert_eq!(st.forward_of.get(&bwd_s), Some(&conv_s));
        assert_eq!(st.forward_of.get(&acc_s), Some(&copy_s));
        assert_eq!(st.forward_of.get(&cudnn_s), Some(&conv_s));
        assert_eq!(st.forward_of.get(&mm_s), None);
        assert_eq!(st.forward_of.len(), 3, "{:?}", st.forward_of);
    }

    #[test]
    fn a_nodes_op_is_named_by_whole_words() {
        assert!(names_op("native_layer_norm", "aten::layer_norm"));
        assert!(names_op("mul", "aten::mul_"));
        assert!(names_op("max_pool2d_with_indices", "aten::max_pool2d"));
        assert!(!names_op("native_layer_norm", "aten::t"));
        assert!(!names_op("addmm", "aten::add"));
        assert!(!names_op("mul", ""));
    }
}

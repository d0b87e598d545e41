//! Numbered spans of one family as one frame: `ProfilerStep#1009` and `ProfilerStep#1010`,
//! `step 3` and `step 4`, are one frame (`ProfilerStep#`, `step #`) wherever gaps are added up
//! by their launch stacks (the call tree, the top stacks, the sites, the late sites, a diff).
//! A source calls [`Store::fold_stacks`] once its stacks are in: each stack gets its folded
//! twin ([`StackTable::folded`]) and the API calls take it. The CPU spans keep their own names
//! (the timeline, the steps, a single gap's CPU frames show the step's number).

use gaptop_wire::stackframe::StackFrame;
use rustc_hash::FxHashMap as HashMap;

use super::ranges::{family, is_step_name};
use super::records::{NameId, StackId};
use super::stacks::Interner;
use super::store::Store;

/// The frame a numbered span of a family folds into, if `name` is one: its trailing number
/// after `#` or a space (`ProfilerStep#12`, `step 12`, `forward 3`: a numbered frame), or after
/// anything when the family names an iteration (`iteration_3`). Not `aten::conv2d` or
/// `nn.Module: Linear_0`.
pub fn numbered(name: &str) -> Option<String> {
    numbered_frame(StackFrame::parse(name))
}

fn numbered_frame(frame: StackFrame<'_>) -> Option<String> {
    match frame {
        StackFrame::Numbered { base, .. } if base.ends_with('#') => Some(base.to_string()),
        StackFrame::Numbered { base, .. } => Some(format!("{base}#")),
        StackFrame::Op(name) => {
            let fam = family(name);
            (fam != name && is_step_name(&fam)).then(|| fam.into_owned())
        }
        _ => None,
    }
}

fn fold_name(names: &mut Interner, memo: &mut HashMap<NameId, NameId>, f: NameId) -> NameId {
    if let Some(&g) = memo.get(&f) {
        return g;
    }
    let g = match numbered_frame(names.frame(f)) {
        Some(fam) => names.intern(&fam),
        None => f,
    };
    memo.insert(f, g);
    g
}

impl Store {
    /// Folds every stack not folded yet (see the module) and gives each API call its stack's
    /// folded twin. Stacks interned later fold to themselves until the next call.
    pub fn fold_stacks(&mut self) {
        let mut memo = HashMap::default();
        let mut i = self.stacks.fold.len();
        // Parents come before their children, and a twin is interned after the stack it
        // folds, so one pass in order folds every node, twins to themselves.
        while i < self.stacks.len() {
            let id = i as StackId;
            let node = self.stacks.node(id);
            let parent = if i == 0 {
                0
            } else {
                self.stacks.fold[node.parent as usize]
            };
            let frame = fold_name(&mut self.names, &mut memo, node.frame);
            let twin = if i == 0 || (parent == node.parent && frame == node.frame) {
                id
            } else {
                self.stacks.intern(parent, frame)
            };
            self.stacks.fold.push(twin);
            i += 1;
        }
        let fold = &self.stacks.fold;
        if fold.iter().enumerate().all(|(i, &t)| t as usize == i) {
            return;
        }
        let stacks = &self.stacks;
        for p in &mut self.procs {
            p.calls.update(|a| a.stack = stacks.folded(a.stack));
        }
        self.generation += 1;
    }
}

impl Store {
    /// The launch stack of op `op` of lane `lane` with its step's number, for a single gap:
    /// `stack` (its folded launch stack) unfolded to the CPU spans around its launching call
    /// when they fold to it, else `stack` as it is.
    pub fn numbered_stack(&self, lane: usize, op: usize, stack: StackId) -> StackId {
        let Some(l) = self.lanes.get(lane) else {
            return stack;
        };
        let proc = &self.procs[l.key.proc as usize];
        match proc.api_by_corr(l.op(op).corr) {
            Some(a) => {
                let raw = proc.span_stack_at(a.tid, a.start);
                if raw != 0 && raw != stack && self.stacks.folded(raw) == stack {
                    raw
                } else {
                    stack
                }
            }
            None => stack,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_spans_of_a_family_fold_and_others_do_not() {
        assert_eq!(
            numbered("ProfilerStep#1009").as_deref(),
            Some("ProfilerStep#")
        );
        assert_eq!(numbered("step 12").as_deref(), Some("step #"));
        assert_eq!(numbered("iteration_3").as_deref(), Some("iteration_#"));
        for keep in [
            "aten::conv2d",
            "nn.Module: Linear_0",
            "ProfilerStep#",
            "12",
            "fc1",
            "a.py(3): f",
        ] {
            assert_eq!(numbered(keep), None, "{keep}");
        }
    }

    #[test]
    fn stacks_under_numbered_steps_fold_into_one() {
        let mut st = Store::default();
        let f = st.names.intern("model.py(3): forward");
        let mut leaves = Vec::new();
        for n in ["ProfilerStep#7", "ProfilerStep#8"] {
            let s = st.names.intern(n);
            let top = st.stacks.intern(0, s);
            leaves.push(st.stacks.intern(top, f));
        }
        st.fold_stacks();
        let (a, b) = (st.stacks.folded(leaves[0]), st.stacks.folded(leaves[1]));
        assert_eq!(a, b);
        assert_eq!(
            st.frame_strings(a),
            ["ProfilerStep#", "model.py(3): forward"]
        );
        assert_eq!(st.stacks.folded(a), a);
        assert_eq!(st.frame_strings(leaves[0])[0], "ProfilerStep#7");
    }
}

//! Interned names and call stacks: every frame, op and API name is a `NameId` into one
//! [`Interner`], and every call stack a `StackId` into one [`StackTable`] of (parent, frame)
//! nodes, so a million calls from a few hundred code paths cost a few hundred stacks. A module
//! of its own because every record type points into it and nothing in it points back.

use std::sync::Arc;

use gaptop_wire::stackframe::{Shape, StackFrame};
use rustc_hash::FxHashMap as HashMap;

use super::records::{NameId, StackId};

/// Names, each once, and what each says it is as a frame (read when it is interned: see
/// `gaptop_wire::stackframe`).
#[derive(Default, Clone)]
pub struct Interner {
    map: HashMap<Arc<str>, NameId>,
    strs: Vec<Arc<str>>,
    shapes: Vec<Shape>,
}

impl Interner {
    pub fn new() -> Self {
        let mut i = Interner::default();
        i.intern("");
        i
    }
    pub fn intern(&mut self, s: &str) -> NameId {
        if let Some(&id) = self.map.get(s) {
            return id;
        }
        let a: Arc<str> = Arc::from(s);
        let id = self.strs.len() as NameId;
        self.shapes.push(Shape::of(s));
        self.strs.push(a.clone());
        self.map.insert(a, id);
        id
    }
    pub fn get(&self, id: NameId) -> &str {
        self.strs.get(id as usize).map(|s| &**s).unwrap_or("?")
    }
    /// The name as a typed frame, read when it was interned.
    pub fn frame(&self, id: NameId) -> StackFrame<'_> {
        match (self.strs.get(id as usize), self.shapes.get(id as usize)) {
            (Some(s), Some(shape)) => shape.view(s),
            _ => StackFrame::Op("?"),
        }
    }
    pub fn lookup(&self, s: &str) -> Option<NameId> {
        self.map.get(s).copied()
    }
    pub fn len(&self) -> usize {
        self.strs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.strs.len() <= 1
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackNode {
    pub parent: StackId,
    pub frame: NameId,
    pub depth: u32,
}

/// Stacks as a prefix tree: a stack is its innermost node, and shares its outer frames with
/// every other stack that has them.
#[derive(Clone)]
pub struct StackTable {
    nodes: Vec<StackNode>,
    map: HashMap<(StackId, NameId), StackId>,
    /// Each stack's twin with its numbered spans folded (`model::fold`), for the
    /// stacks folded so far.
    pub(super) fold: Vec<StackId>,
}

impl Default for StackTable {
    fn default() -> Self {
        StackTable {
            nodes: vec![StackNode {
                parent: 0,
                frame: 0,
                depth: 0,
            }],
            map: HashMap::default(),
            fold: Vec::new(),
        }
    }
}

impl StackTable {
    /// The stack of `frames`, outermost first, under `parent`.
    pub fn intern_path(
        &mut self,
        parent: StackId,
        frames: impl IntoIterator<Item = NameId>,
    ) -> StackId {
        frames.into_iter().fold(parent, |p, f| self.intern(p, f))
    }

    pub fn intern(&mut self, parent: StackId, frame: NameId) -> StackId {
        if let Some(&id) = self.map.get(&(parent, frame)) {
            return id;
        }
        let depth = self.node(parent).depth + 1;
        let id = self.nodes.len() as StackId;
        self.nodes.push(StackNode {
            parent,
            frame,
            depth,
        });
        self.map.insert((parent, frame), id);
        id
    }
    pub fn node(&self, id: StackId) -> StackNode {
        self.nodes
            .get(id as usize)
            .copied()
            .unwrap_or(self.nodes[0])
    }
    /// Frame name ids, outermost first.
    pub fn frames(&self, mut id: StackId) -> Vec<NameId> {
        let mut v = Vec::with_capacity(self.node(id).depth as usize);
        while id != 0 && (id as usize) < self.nodes.len() {
            let n = self.nodes[id as usize];
            v.push(n.frame);
            id = n.parent;
        }
        v.reverse();
        v
    }
    /// The stack with its numbered spans folded into their family (`ProfilerStep#12` as
    /// `ProfilerStep#`), as `model::fold` made it; the stack itself if not folded.
    pub fn folded(&self, id: StackId) -> StackId {
        self.fold.get(id as usize).copied().unwrap_or(id)
    }
    pub fn len(&self) -> usize {
        self.nodes.len()
    }
    pub fn is_empty(&self) -> bool {
        self.nodes.len() <= 1
    }
}

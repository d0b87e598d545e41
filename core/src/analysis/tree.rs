//! The call tree of a window's gaps: each launch stack's frames as nodes with the gap time
//! and count charged under them (inclusive), and the CPU samples taken during the gaps under a
//! marker frame. What the UI's tree pane and the report's stacks read.

use rustc_hash::FxHashMap as HashMap;

use super::gaps::Gap;
use crate::model::records::{GpuOp, NameId, Ns, StackId};
use crate::model::store::Store;

/// One rank's part of a leaf's gaps: those the call tree holds (at or over the threshold).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RankShare {
    pub rank: i32,
    pub gaps: u64,
    pub gap_ns: Ns,
}

impl RankShare {
    pub fn of(rank: i32) -> RankShare {
        RankShare {
            rank,
            ..Default::default()
        }
    }
}

/// A leaf's gaps differ by rank when one rank has this many times the ranks' median.
pub const RANK_DIFFERS: f64 = 1.5;

/// One call-tree node: a frame, with inclusive totals.
#[derive(Clone, Debug, Default)]
pub struct TreeNode {
    pub frame: NameId,
    pub parent: usize,
    pub children: Vec<usize>,
    pub gap_ns: Ns,
    pub gaps: u64,
    pub launches: u64,
    pub kernel_ns: Ns,
}

/// Call tree of gap time. Node 0 is the root. Built top-down from the gaps' stacks
/// (launch stack + API + op name); [`CallTree::inverted`] builds the bottom-up view.
#[derive(Clone, Debug)]
pub struct CallTree {
    pub nodes: Vec<TreeNode>,
    index: HashMap<(usize, NameId), usize>,
    leaf_cache: HashMap<(StackId, NameId, NameId), usize>,
}

impl Default for CallTree {
    fn default() -> Self {
        CallTree {
            nodes: vec![TreeNode {
                parent: usize::MAX,
                ..Default::default()
            }],
            index: HashMap::default(),
            leaf_cache: HashMap::default(),
        }
    }
}

impl CallTree {
    fn child(&mut self, parent: usize, frame: NameId) -> usize {
        if let Some(&c) = self.index.get(&(parent, frame)) {
            return c;
        }
        let id = self.nodes.len();
        self.nodes.push(TreeNode {
            frame,
            parent,
            ..Default::default()
        });
        self.nodes[parent].children.push(id);
        self.index.insert((parent, frame), id);
        id
    }

    /// Path of frames for a gap key: stack frames, then the API, then the op name.
    fn path(store: &Store, stack: StackId, api: NameId, op: NameId) -> Vec<NameId> {
        let mut v = store.stacks.frames(stack);
        if api != 0 {
            v.push(api);
        }
        v.push(op);
        v
    }

    fn leaf(&mut self, store: &Store, stack: StackId, api: NameId, op: NameId) -> usize {
        if let Some(&n) = self.leaf_cache.get(&(stack, api, op)) {
            return n;
        }
        let mut n = 0;
        for f in Self::path(store, stack, api, op) {
            n = self.child(n, f);
        }
        self.leaf_cache.insert((stack, api, op), n);
        n
    }

    /// Adds values to a leaf and all its ancestors.
    fn add(&mut self, mut n: usize, gap_ns: Ns, gaps: u64, launches: u64, kernel_ns: Ns) {
        loop {
            let node = &mut self.nodes[n];
            node.gap_ns += gap_ns;
            node.gaps += gaps;
            node.launches += launches;
            node.kernel_ns += kernel_ns;
            if n == 0 {
                break;
            }
            n = node.parent;
        }
    }

    pub fn add_gap(&mut self, store: &Store, g: &Gap) {
        let n = self.leaf(store, g.stack, g.api, g.op_name);
        self.add(n, g.dur(), 1, 0, 0);
    }

    /// Under the gap's launch, the CPU samples taken during it: a marker frame, then each
    /// sample's frames from the outermost in, the gap's time shared out among the samples (the
    /// launch's own totals stay as they are).
    pub fn add_cpu(&mut self, store: &Store, g: &Gap, samples: &[StackId]) {
        let leaf = self.leaf(store, g.stack, g.api, g.op_name);
        let marker = self.child(leaf, store.cpu_marker);
        let n = samples.len() as Ns;
        for (i, &s) in samples.iter().enumerate() {
            // Whole nanoseconds: the first samples take the remainder.
            let part = g.dur() / n + Ns::from((i as Ns) < g.dur() % n);
            let mut node = marker;
            for f in store.stacks.frames(s) {
                node = self.child(node, f);
            }
            loop {
                self.nodes[node].gap_ns += part;
                if node == marker {
                    break;
                }
                node = self.nodes[node].parent;
            }
        }
    }

    pub fn add_op(&mut self, store: &Store, stack: StackId, api: NameId, op: &GpuOp, clip: Ns) {
        let n = self.leaf(store, stack, api, op.name);
        self.add(n, 0, 0, 1, clip);
    }

    /// Where ranks differ, a level of ranks under the leaves: a leaf whose gaps some of the
    /// capture's `ranks` ranks lack, or one rank has at least [`RANK_DIFFERS`] times the
    /// ranks' median of, gets a child a rank that has its gaps (frame `frame(rank)`, skipped
    /// where it gives none), with that rank's gap time and count. A leaf the ranks share
    /// alike stays as it is: 64 equal rows would only hide the one that differs.
    pub fn add_rank_level(
        &mut self,
        shares: &HashMap<(StackId, NameId, NameId), Vec<RankShare>>,
        ranks: usize,
        frame: impl Fn(i32) -> Option<NameId>,
    ) {
        if ranks < 2 {
            return;
        }
        let mut leaves: Vec<(usize, &Vec<RankShare>)> = self
            .leaf_cache
            .iter()
            .filter_map(|(k, &n)| Some((n, shares.get(k)?)))
            .collect();
        leaves.sort_unstable_by_key(|l| l.0);
        for (leaf, v) in leaves {
            let mut ns: Vec<Ns> = v.iter().map(|r| r.gap_ns).filter(|&t| t > 0).collect();
            if ns.is_empty() {
                continue;
            }
            ns.resize(ranks.max(ns.len()), 0);
            ns.sort_unstable();
            let median = ns[(ns.len() - 1) / 2];
            let top = ns[ns.len() - 1];
            if ns[0] > 0 && (top as f64) < RANK_DIFFERS * median as f64 {
                continue;
            }
            for r in v.iter().filter(|r| r.gap_ns > 0) {
                let Some(f) = frame(r.rank) else { continue };
                let c = self.child(leaf, f);
                self.nodes[c].gap_ns += r.gap_ns;
                self.nodes[c].gaps += r.gaps;
            }
        }
    }

    /// Leaf node for a gap (to highlight its path).
    pub fn node_of(&self, stack: StackId, api: NameId, op: NameId) -> Option<usize> {
        self.leaf_cache.get(&(stack, api, op)).copied()
    }

    /// Every (launch stack, API, op name) the tree was built from, with its leaf node.
    pub fn leaves(&self) -> impl Iterator<Item = ((StackId, NameId, NameId), usize)> + '_ {
        self.leaf_cache.iter().map(|(&k, &n)| (k, n))
    }

    /// Frames from the root to `n` (exclusive of the root).
    pub fn path_to(&self, mut n: usize) -> Vec<usize> {
        let mut v = Vec::new();
        while n != 0 && n < self.nodes.len() {
            v.push(n);
            n = self.nodes[n].parent;
        }
        v.reverse();
        v
    }

    /// Self values (exclusive) of each node: inclusive minus children.
    fn self_values(&self, n: usize) -> (Ns, u64, u64, Ns) {
        let node = &self.nodes[n];
        let mut v = (node.gap_ns, node.gaps, node.launches, node.kernel_ns);
        for &c in &node.children {
            let cn = &self.nodes[c];
            v.0 -= cn.gap_ns;
            v.1 -= cn.gaps;
            v.2 -= cn.launches;
            v.3 -= cn.kernel_ns;
        }
        v
    }

    /// The bottom-up view: roots are the innermost frames (op names), children their callers.
    pub fn inverted(&self) -> CallTree {
        let mut t = CallTree::default();
        for n in 1..self.nodes.len() {
            let (g, c, l, k) = self.self_values(n);
            if g == 0 && c == 0 && l == 0 && k == 0 {
                continue;
            }
            let mut path = self.path_to(n);
            path.reverse();
            let mut cur = 0;
            for m in path {
                cur = t.child(cur, self.nodes[m].frame);
            }
            t.add(cur, g, c, l, k);
        }
        t
    }

    /// The same tree with its frames mapped: `f(frame, parent)` gives the frame a node shows
    /// under its (mapped) parent's frame, or `None` to fold the node into its parent. Nodes
    /// that map to the same frame under one parent become one, their values summed; the
    /// gap keys' leaves follow. (The call tree's by-function view and its folding of native
    /// frames.)
    pub fn mapped(&self, mut f: impl FnMut(NameId, Option<NameId>) -> Option<NameId>) -> CallTree {
        let mut t = CallTree::default();
        let mut new_of = vec![0usize; self.nodes.len()];
        // Parents come before their children in `nodes`.
        for n in 1..self.nodes.len() {
            let p = new_of[self.nodes[n].parent];
            let parent_frame = (p != 0).then(|| t.nodes[p].frame);
            new_of[n] = match f(self.nodes[n].frame, parent_frame) {
                Some(m) => t.child(p, m),
                None => p,
            };
            let (g, c, l, k) = self.self_values(n);
            t.add(new_of[n], g, c, l, k);
        }
        t.leaf_cache = self
            .leaf_cache
            .iter()
            .map(|(&key, &leaf)| (key, new_of[leaf]))
            .collect();
        t
    }

    /// Children of a node sorted by gap time, largest first.
    pub fn sorted_children(&self, n: usize) -> Vec<usize> {
        let mut v = self.nodes[n].children.clone();
        v.sort_by(|&a, &b| {
            self.nodes[b]
                .gap_ns
                .cmp(&self.nodes[a].gap_ns)
                .then(self.nodes[b].kernel_ns.cmp(&self.nodes[a].kernel_ns))
                .then(a.cmp(&b))
        });
        v
    }
}

//! The call tree as the pane shows it: its rows (plumbing frames folded away, at most 50
//! children a level), each node's share, and the identifiers that keep a selection on its
//! frames when the tree is rebuilt. Made from a call tree alone; selection, search, inversion
//! and the node filter that `n`/`N` walk are the `App`'s (`tree_nav`).

use gaptop_core::analysis::tree::CallTree;
use gaptop_core::frames::{display, is_plumbing};
use gaptop_core::model::store::Store;
use gaptop_core::units::fmt_short;

/// One row of the call tree pane and the rows under it.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeRow {
    /// The widget's identifier (see [`path_ids`]).
    pub id: usize,
    /// Gap time and share, right-aligned: `  75us 100%  `.
    pub head: String,
    /// The frame, as people read it.
    pub name: String,
    /// Gaps and kernel time: what a narrow pane cuts.
    pub counts: String,
    pub children: Vec<TreeRow>,
}

/// Most children shown under a tree node, and the deepest level shown.
const TREE_CHILDREN: usize = 50;
const TREE_DEPTH: usize = 64;

/// Visible children of a node: hidden (plumbing) children are replaced by their own visible
/// children, sorted by gap time.
fn visible_children(store: &Store, t: &CallTree, n: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let mut stack = t.sorted_children(n);
    stack.reverse();
    while let Some(c) = stack.pop() {
        if is_plumbing(store.names.get(t.nodes[c].frame)) && !t.nodes[c].children.is_empty() {
            let mut k = t.sorted_children(c);
            k.reverse();
            stack.extend(k);
        } else {
            out.push(c);
        }
    }
    out.sort_by(|&a, &b| t.nodes[b].gap_ns.cmp(&t.nodes[a].gap_ns).then(a.cmp(&b)));
    out
}

/// An identifier for every node from the frames on its path from the root (plumbing frames
/// too, so that two shown siblings never share one), by node index. Parents come before their
/// children in `nodes`, so one pass does it.
pub(super) fn path_ids(t: &CallTree) -> Vec<usize> {
    let mut ids = vec![0usize; t.nodes.len()];
    for (n, node) in t.nodes.iter().enumerate().skip(1) {
        let parent = ids.get(node.parent).copied().unwrap_or(0) as u64;
        // splitmix64 of the parent's identifier and the frame.
        let mut z =
            (parent.rotate_left(17) ^ node.frame as u64).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ids[n] = (z ^ (z >> 31)) as usize;
    }
    ids
}

/// A tree node's share (%) of the gap time the tree holds: all of the window's gaps, or with a
/// threshold those at or over it. The tree's rows and the node details both show it.
pub fn tree_share(t: &CallTree, n: usize) -> f64 {
    let total = t.nodes[0].gap_ns;
    if total > 0 {
        100.0 * t.nodes[n].gap_ns as f64 / total as f64
    } else {
        0.0
    }
}

/// The tree's rows, children sorted by gap time, at most 50 a level.
pub(super) fn build_rows(
    store: &Store,
    t: &CallTree,
    ids: &[usize],
    by_function: bool,
) -> Vec<TreeRow> {
    fn row(
        store: &Store,
        t: &CallTree,
        ids: &[usize],
        n: usize,
        depth: usize,
        by_fn: bool,
    ) -> TreeRow {
        let node = &t.nodes[n];
        let share = tree_share(t, n);
        let (text, frame) = (store.names.get(node.frame), store.names.frame(node.frame));
        let mut name = match frame.unnamed_binary() {
            Some(lib) => format!("{lib} (frames without symbols)"),
            None if by_fn => display::pretty_function(frame, text),
            None => display::pretty(frame, text),
        };
        name = display::cut(&name, 90);
        let children = if depth < TREE_DEPTH {
            visible_children(store, t, n)
                .into_iter()
                .take(TREE_CHILDREN)
                .map(|c| row(store, t, ids, c, depth + 1, by_fn))
                .collect()
        } else {
            Vec::new()
        };
        // The frame comes right after gap time and share, so that it stays visible under the
        // tree's indentation on deep stacks; the counts follow it, and are what a narrow pane
        // cuts.
        TreeRow {
            id: ids[n],
            head: format!("{:>6} {:>3.0}%  ", fmt_short(node.gap_ns), share),
            name,
            // The node's gaps (the count its details give) and the kernel time of the ops it
            // launched.
            counts: format!(
                "  {} · {} kernel",
                gaptop_core::units::count(node.gaps, "gap"),
                fmt_short(node.kernel_ns),
            ),
            children,
        }
    }
    visible_children(store, t, 0)
        .into_iter()
        .take(TREE_CHILDREN)
        .map(|c| row(store, t, ids, c, 1, by_function))
        .collect()
}

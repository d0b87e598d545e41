//! Moving about the call tree: the selected node, revealing a gap's node, search, inversion,
//! the frames as shown (by function, native frames hidden) and the node filter that `n`/`N`
//! walk. The `App` side of the tree; `tree` makes its rows from a call tree alone.

use std::collections::HashSet;

use tui_tree_widget::TreeState;

use super::cache::Cache;
use super::state::{App, Focus, GapKey, NodeFilter};
use super::tree::TreeRow;
use gaptop_core::analysis::gaps::Gap;
use gaptop_core::frames::{is_plumbing, pretty_frame};
use gaptop_core::model::records::NameId;

impl App {
    /// The tree node selected in the call tree pane (an index into `cache.tree.nodes`).
    pub fn selected_node(&self) -> Option<usize> {
        let id = self.tree_state.selected().last()?;
        self.cache.as_ref()?.tree_nodes.get(id).copied()
    }

    /// Opens the tree along the gap's path and selects its node.
    pub(super) fn reveal_in_tree(&mut self, g: &Gap) {
        let Some(c) = &self.cache else { return };
        let path: Vec<usize> = if self.inverted {
            let frames = self.inverted_frames((g.stack, g.api, g.op_name));
            let mut node = 0;
            let mut p = Vec::new();
            for f in frames {
                match c.tree.nodes[node]
                    .children
                    .iter()
                    .find(|&&k| c.tree.nodes[k].frame == f)
                {
                    Some(&k) => {
                        p.push(k);
                        node = k;
                    }
                    None => break,
                }
            }
            p
        } else {
            match c.tree.node_of(g.stack, g.api, g.op_name) {
                Some(n) => c.tree.path_to(n),
                None => Vec::new(),
            }
        };
        self.open_tree_path(path);
    }

    /// Opens the tree along `path` (node indices from the root) and selects its last node;
    /// the plumbing nodes on it are not rows of their own.
    fn open_tree_path(&mut self, path: Vec<usize>) {
        let Some(c) = &self.cache else { return };
        let path: Vec<usize> = path
            .into_iter()
            .filter(|&n| {
                let t = &c.tree;
                !is_plumbing(self.store.names.get(t.nodes[n].frame))
                    || t.nodes[n].children.is_empty()
            })
            .map(|n| c.tree_ids[n])
            .collect();
        for i in 1..path.len() {
            self.tree_state.open(path[..i].to_vec());
        }
        if !path.is_empty() {
            self.tree_state.select(path);
        }
    }

    /// Selects the current match of the call tree search: the frames whose name holds the
    /// query (any case), in the order the tree shows them; says which of how many it is.
    pub(super) fn find_in_tree(&mut self) {
        let (Some(q), Some(c)) = (self.search.clone(), &self.cache) else {
            return;
        };
        if q.is_empty() {
            self.message = "type part of a frame's name; enter: next match, esc: done".into();
            return;
        }
        let needle = q.to_lowercase();
        let hits: Vec<usize> = display_order(c)
            .into_iter()
            .filter(|&n| {
                self.store
                    .names
                    .get(c.tree.nodes[n].frame)
                    .to_lowercase()
                    .contains(&needle)
            })
            .collect();
        if hits.is_empty() {
            self.message = "not in the call tree".into();
            return;
        }
        self.search_hit %= hits.len();
        let path = c.tree.path_to(hits[self.search_hit]);
        self.open_tree_path(path);
        self.message = format!(
            "{} of {} (enter: next, esc: done)",
            self.search_hit + 1,
            hits.len()
        );
    }

    /// `i`: the tree the other way up, its first row selected.
    pub(super) fn invert_tree(&mut self) {
        self.inverted = !self.inverted;
        self.tree_state = TreeState::default();
        self.refresh(true);
        // The widget's own select_first knows only the rows it last drew (the other
        // tree's): select the new tree's first row by its identifier.
        if let Some(first) = self.cache.as_ref().and_then(|c| c.rows.first()) {
            self.tree_state.select(vec![first.id]);
        }
        self.message = if self.inverted {
            "call tree: bottom-up".into()
        } else {
            "call tree: top-down".into()
        };
    }

    /// Makes `n`/`N` walk only the gaps under the selected tree node.
    pub(super) fn filter_selected_node(&mut self) {
        let (Some(node), Some(c)) = (self.selected_node(), &self.cache) else {
            self.message = "select a tree node first".into();
            return;
        };
        let t = &c.tree;
        let under = |mut n: usize| loop {
            if n == node {
                return true;
            }
            if n == 0 || n >= t.nodes.len() {
                return false;
            }
            n = t.nodes[n].parent;
        };
        // A rank row lies below its leaf (the rank level): that leaf's site.
        let above: HashSet<usize> = std::iter::successors(Some(node), |&n| {
            (n != 0 && n < t.nodes.len()).then(|| t.nodes[n].parent)
        })
        .collect();
        // Every launch site of the window (not only those of the list's longest gaps) whose
        // displayed path passes through the node.
        let keys: HashSet<_> = c
            .top_down()
            .leaves()
            .filter(|&(key, leaf)| {
                if self.inverted {
                    self.inverted_path_has(key, node)
                } else {
                    under(leaf) || above.contains(&leaf)
                }
            })
            .map(|(key, _)| key)
            .collect();
        let name = pretty_frame(self.store.names.get(t.nodes[node].frame));
        // Under a rank of the rank level (the node itself or a frame above it): that rank's.
        let rank = {
            let mut n = node;
            loop {
                let frame = self.store.names.get(t.nodes[n].frame);
                if let Some(r) = frame
                    .strip_prefix("[rank ")
                    .and_then(|x| x.strip_suffix(']'))
                    .and_then(|x| x.parse::<i32>().ok())
                    .filter(|&r| self.store.rank_frame(r) == Some(t.nodes[n].frame))
                {
                    break Some(r);
                }
                if n == 0 || n >= t.nodes.len() {
                    break None;
                }
                n = t.nodes[n].parent;
            }
        };
        self.node_filter = Some(NodeFilter {
            name: name.clone(),
            keys,
            rank,
        });
        self.refresh_filter();
        let count = self.filtered_total().unwrap_or(0);
        self.message = format!(
            "walking {} under {name} (n/N go round; esc clears)",
            gaptop_core::units::count(count, "gap")
        );
        self.focus = Focus::Gaps;
    }

    /// A gap's path in the bottom-up tree: op name, API, then the stack from the inside out,
    /// its frames as the tree shows them (see [`App::frame_map`]).
    fn inverted_frames(&self, (stack, api, op): GapKey) -> Vec<NameId> {
        let mut raw = self.store.stacks.frames(stack);
        if api != 0 {
            raw.push(api);
        }
        raw.push(op);
        let mut map = self.frame_map();
        let mut frames: Vec<NameId> = Vec::with_capacity(raw.len());
        for f in raw {
            if let Some(m) = map(f, frames.last().copied()) {
                frames.push(m);
            }
        }
        frames.reverse();
        frames
    }

    /// How the tree shows a frame under its parent's: `None` folds it into the parent (a
    /// native frame while they are hidden, or an unnamed native frame of the same library as
    /// its parent: a run of them is one row); by function, every line of a Python function
    /// is the function's one frame (the lowest name id of its lines).
    pub(super) fn frame_map(&self) -> impl FnMut(NameId, Option<NameId>) -> Option<NameId> + '_ {
        let names = &self.store.names;
        let function = |id| names.frame(id).py_source().map(|p| (p.file, p.function));
        let mut reps: std::collections::HashMap<(&str, &str), NameId> = Default::default();
        if self.tree_by_function {
            for id in 0..names.len() as NameId {
                if let Some(k) = function(id) {
                    reps.entry(k).or_insert(id);
                }
            }
        }
        let hide_native = self.hide_native;
        move |f, parent| {
            let frame = names.frame(f);
            if hide_native && frame.is_native() {
                return None;
            }
            if let Some(lib) = frame.unnamed_binary() {
                if parent.and_then(|p| names.frame(p).unnamed_binary()) == Some(lib) {
                    return None;
                }
            }
            Some(match function(f) {
                Some(k) if !reps.is_empty() => reps.get(&k).copied().unwrap_or(f),
                _ => f,
            })
        }
    }

    fn inverted_path_has(&self, key: GapKey, node: usize) -> bool {
        let Some(c) = &self.cache else { return false };
        let path = c.tree.path_to(node);
        let frames = self.inverted_frames(key);
        path.iter()
            .zip(frames.iter())
            .all(|(&n, &f)| c.tree.nodes[n].frame == f)
            && frames.len() >= path.len()
    }
}

/// The nodes the tree shows, in the order it shows them when every node is open: read from
/// its rows, so it is the tree's own order.
fn display_order(c: &Cache) -> Vec<usize> {
    fn walk(c: &Cache, rows: &[TreeRow], out: &mut Vec<usize>) {
        for r in rows {
            out.extend(c.tree_nodes.get(&r.id));
            walk(c, &r.children, out);
        }
    }
    let mut out = Vec::new();
    walk(c, &c.rows, &mut out);
    out
}

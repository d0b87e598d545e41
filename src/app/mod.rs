//! The UI model: state, actions and the one `update` that changes state.
//!
//! Views (`crate::views`) are functions of this state; the terminal loop (`term`) turns input
//! into [`Action`]s and source events into store changes.

pub mod keymap;
pub mod term;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::time::Instant;

use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use tui_tree_widget::{TreeItem, TreeState};

use crate::collect::analysis::{self, CallTree, Category, Config, Gap, Reason, Summary, Window};
use crate::collect::store::{NameId, Ns, StackId, Store};
use crate::units::fmt_ns;
pub use keymap::{Action, KeyMap};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    Timeline,
    Gaps,
    Tree,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GapSort {
    Duration,
    Time,
}

/// Where the data comes from, and whether it is still arriving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceState {
    /// A file: everything is there.
    File,
    /// Live (a program or the demo): still running.
    Live,
    /// Live, but the program has ended (the text says how).
    Ended(String),
}

/// A selected gap, kept by time so that eviction (which shifts indices) cannot move it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SelGap {
    pub lane: usize,
    pub start: Ns,
    pub end: Ns,
}

/// Analysis of the current window, recomputed when the window or the data changes.
pub struct Cache {
    pub key: (Ns, Ns, Ns, bool, u64),
    pub summary: Summary,
    /// Gaps in the window at or over the threshold, longest first (at most `MAX_GAPS`).
    pub gaps: Vec<Gap>,
    pub gaps_total: u64,
    /// The tree as displayed (top-down or inverted).
    pub tree: CallTree,
    /// Each node's identifier in the tree widget (by node index) and the way back. Identifiers
    /// come from the frames on the node's path, so an opened or selected row stays on the same
    /// frames when the window or the data changes and the tree is rebuilt with other indices.
    pub tree_ids: Vec<usize>,
    pub tree_nodes: HashMap<usize, usize>,
    pub items: Vec<TreeItem<'static, usize>>,
    pub built: Instant,
    /// The part of the window the panes describe (all of it unless it held too many ops).
    pub analyzed: (Ns, Ns),
    /// Communication stalls across ranks in that part (None with fewer than two ranks).
    pub comm: Option<crate::collect::comm::CommReport>,
    /// Why the GPU waited, per launching function, most gap time first.
    pub advice: Vec<crate::advice::Advice>,
}

pub const MAX_GAPS: usize = 2000;
/// Most ops the panes analyse per refresh; a wider window is analysed around the cursor so the
/// UI never stalls (the timeline and the rate pane stay exact at any width).
pub const ANALYSIS_CAP: usize = 200_000;
const MIN_WIDTH: Ns = 1_000;

pub struct App {
    /// Shared only with an export that is copying its window out (see
    /// [`crate::export::export_window`]); new data waits until it is done.
    pub store: std::sync::Arc<Store>,
    pub cfg: Config,
    pub keys: KeyMap,
    pub source: SourceState,
    /// Visible window [lo, hi).
    pub lo: Ns,
    pub hi: Ns,
    /// Follow the newest data (live, not paused).
    pub follow: bool,
    /// While following, show the whole capture (until the user zooms).
    pub auto_width: bool,
    pub paused: bool,
    pub cursor: Ns,
    pub focus: Focus,
    pub sort: GapSort,
    pub gap_sel: usize,
    pub selected: Option<SelGap>,
    pub min_gap: Ns,
    pub inverted: bool,
    pub tree_state: TreeState<usize>,
    /// Leaf keys of the tree node whose gaps `n`/`N` walk.
    pub node_filter: Option<(String, HashSet<GapKey>)>,
    /// The call tree search being typed (`/`), and which of its matches is selected.
    pub search: Option<String>,
    search_hit: usize,
    pub help: bool,
    pub message: String,
    pub export_dir: PathBuf,
    /// The export being written in the background, if any.
    pub export_job: Option<crate::export::ExportJob>,
    /// Times the user asked to stop the profiled program (each asks harder).
    pub stop_requests: u32,
    pub cache: Option<Cache>,
    pub quit: bool,
    /// Last lines the profiled program printed.
    pub output: std::collections::VecDeque<String>,
    /// Timeline columns of the last draw (for mouse zoom).
    pub timeline_x: (u16, u16),
}

/// What a gap is charged to in the call tree: launch stack, API and op name.
pub type GapKey = (StackId, NameId, NameId);

fn tree_key(g: &Gap) -> GapKey {
    (g.stack, g.api, g.op_name)
}

impl App {
    pub fn new(store: impl Into<std::sync::Arc<Store>>, source: SourceState) -> App {
        let store = store.into();
        let (lo, hi) = store.span().unwrap_or((0, 1));
        let live = source == SourceState::Live;
        App {
            store,
            cfg: Config::default(),
            keys: KeyMap::default(),
            source,
            lo,
            hi: hi.max(lo + MIN_WIDTH),
            follow: live,
            auto_width: true,
            paused: false,
            cursor: lo + (hi - lo) / 2,
            focus: Focus::Gaps,
            sort: GapSort::Duration,
            gap_sel: 0,
            selected: None,
            min_gap: 0,
            inverted: false,
            tree_state: TreeState::default(),
            search: None,
            search_hit: 0,
            node_filter: None,
            help: false,
            message: String::new(),
            export_dir: PathBuf::from("."),
            export_job: None,
            stop_requests: 0,
            cache: None,
            quit: false,
            output: Default::default(),
            timeline_x: (0, 0),
        }
    }

    pub fn width(&self) -> Ns {
        self.hi - self.lo
    }

    pub fn is_live(&self) -> bool {
        self.source != SourceState::File
    }

    /// Says how the background export ended, once it has.
    fn poll_export(&mut self) {
        let Some(j) = &self.export_job else {
            return;
        };
        if let Some(r) = j.poll() {
            self.message = match r {
                Ok(_) => format!("exported {}", j.path.display()),
                Err(e) => format!("export failed: {e:#}"),
            };
            self.export_job = None;
        } else if self.message.starts_with("exporting to ") {
            // (A message that came since stays.) Live, say while new data waits for the copy.
            let copying = std::sync::Arc::strong_count(&self.store) > 1 && self.is_live();
            self.message = if copying {
                format!(
                    "exporting to {}: copying the window (new data waits)…",
                    j.path.display()
                )
            } else {
                format!("exporting to {}…", j.path.display())
            };
        }
    }

    /// Waits for an export still being written (before quitting: a half-written file would
    /// look like a broken trace). Returns what to tell the user, if anything.
    pub fn finish_export(&mut self) -> Option<String> {
        let j = self.export_job.take()?;
        let path = j.path.clone();
        Some(match j.wait() {
            Ok(_) => format!("exported {}", path.display()),
            Err(e) => format!("export of {} failed: {e:#}", path.display()),
        })
    }

    /// Moves the window to follow new data (live and not paused) and refreshes the cache.
    pub fn tick(&mut self) {
        self.poll_export();
        if let Some((slo, shi)) = self.store.span() {
            if self.follow && !self.paused {
                let w = if self.auto_width {
                    (shi - slo).max(MIN_WIDTH)
                } else {
                    self.width().max(MIN_WIDTH)
                };
                self.hi = shi.max(slo + w);
                self.lo = self.hi - w;
                // The panes describe the newest data.
                self.cursor = self.hi - w / 8;
            }
        }
        self.refresh(false);
    }

    /// Recomputes the window's analysis when the window, threshold or data changed. Live data
    /// refreshes at most four times a second.
    pub fn refresh(&mut self, force: bool) {
        let key = (
            self.lo,
            self.hi,
            self.min_gap,
            self.inverted,
            self.store.generation,
        );
        if let Some(c) = &self.cache {
            if c.key == key && !force {
                return;
            }
            let same_view =
                c.key.0 == key.0 && c.key.1 == key.1 && c.key.2 == key.2 && c.key.3 == key.3;
            if same_view && !force && c.built.elapsed().as_millis() < 250 {
                return;
            }
        }
        let (alo, ahi) = self.analysis_window();
        let mut summary = analysis::summarize_top(
            &self.store,
            Window::new(alo, ahi),
            &self.cfg,
            MAX_GAPS,
            self.min_gap.max(1),
        );
        let gaps = std::mem::take(&mut summary.top_gaps);
        let total = summary.top_eligible;
        let tree = if self.inverted {
            summary.tree.inverted()
        } else {
            std::mem::take(&mut summary.tree)
        };
        let tree_ids = path_ids(&tree);
        let tree_nodes = tree_ids
            .iter()
            .enumerate()
            .map(|(n, &id)| (id, n))
            .collect();
        let items = build_items(&self.store, &tree, &tree_ids);
        let advice = crate::advice::advise(&self.store, &summary, usize::MAX);
        self.cache = Some(Cache {
            advice,
            key,
            summary,
            gaps,
            gaps_total: total,
            tree,
            tree_ids,
            tree_nodes,
            items,
            built: Instant::now(),
            analyzed: (alo, ahi),
            comm: {
                let c = crate::collect::comm::analyze(&self.store, alo, ahi);
                (c.ranks >= 2).then_some(c)
            },
        });
        self.apply_sort();
        self.sync_gap_sel();
    }

    /// The window, or the part of it around the cursor that holds about [`ANALYSIS_CAP`] ops.
    fn analysis_window(&self) -> (Ns, Ns) {
        let count = |lo: Ns, hi: Ns| -> usize {
            self.store
                .lanes
                .iter()
                .map(|l| l.lower_bound(hi) - l.lower_bound(lo))
                .sum()
        };
        let n = count(self.lo, self.hi);
        if n <= ANALYSIS_CAP {
            return (self.lo, self.hi);
        }
        let mut w = ((self.width() as f64) * ANALYSIS_CAP as f64 / n as f64) as Ns;
        let c = self.cursor.clamp(self.lo, self.hi);
        loop {
            let lo = (c - w / 2).max(self.lo);
            let hi = (lo + w).min(self.hi);
            if count(lo, hi) <= ANALYSIS_CAP * 5 / 4 || w <= MIN_WIDTH {
                return (lo, hi);
            }
            w /= 2;
        }
    }

    fn apply_sort(&mut self) {
        let sort = self.sort;
        if let Some(c) = &mut self.cache {
            match sort {
                GapSort::Duration => c
                    .gaps
                    .sort_by(|a, b| b.dur().cmp(&a.dur()).then(a.start.cmp(&b.start))),
                GapSort::Time => c.gaps.sort_by_key(|g| (g.start, g.lane)),
            }
        }
    }

    /// Whether `g` is the selected gap (a gap is known by its lane and the op that ends it).
    pub fn is_selected(&self, g: &Gap) -> bool {
        self.selected
            .is_some_and(|s| s.lane == g.lane && s.end == g.end)
    }

    /// Puts the gap list's row back on the selected gap after the list was rebuilt or sorted
    /// (its index moves with the window and the data); without one there, keeps it in range.
    fn sync_gap_sel(&mut self) {
        match self.gaps().iter().position(|g| self.is_selected(g)) {
            Some(i) => self.gap_sel = i,
            None => self.gap_sel = self.gap_sel.min(self.gaps().len().saturating_sub(1)),
        }
    }

    pub fn gaps(&self) -> &[Gap] {
        self.cache.as_ref().map(|c| &c.gaps[..]).unwrap_or(&[])
    }

    /// The selected gap, re-derived from the store (None if it left the store).
    pub fn selected_gap(&self) -> Option<Gap> {
        let s = self.selected?;
        let lane = self.store.lanes.get(s.lane)?;
        let next = lane.lower_bound(s.end);
        if next == 0 || next >= lane.ops.len() || lane.ops[next].start != s.end {
            return None;
        }
        let mut g = analysis::classify(&self.store, s.lane, next - 1, next, &self.cfg)?;
        g.start = s.start.max(g.start);
        Some(g)
    }

    fn select(&mut self, g: &Gap) {
        self.selected = Some(SelGap {
            lane: g.lane,
            start: g.start,
            end: g.end,
        });
        self.cursor = g.start + g.dur() / 2;
        // Looking at a gap holds the window: following would move the cursor off it and,
        // live, scroll it away. `z` (or pause and resume) follows again.
        self.follow = false;
        if self.cursor < self.lo || self.cursor >= self.hi {
            let w = self.width();
            self.lo = self.cursor - w / 2;
            self.hi = self.lo + w;
        }
        self.reveal_in_tree(g);
    }

    /// Opens the tree along the gap's path and selects its node.
    fn reveal_in_tree(&mut self, g: &Gap) {
        let Some(c) = &self.cache else { return };
        let path: Vec<usize> = if self.inverted {
            let frames = self.inverted_frames(g);
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
    fn find_in_tree(&mut self) {
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

    fn zoom(&mut self, factor: f64, around: Ns) {
        self.auto_width = false;
        let (slo, shi) = self.store.span().unwrap_or((self.lo, self.hi));
        let span = (shi - slo).max(MIN_WIDTH);
        let w = ((self.width() as f64 * factor) as Ns).clamp(MIN_WIDTH, span.max(MIN_WIDTH));
        let rel = if self.width() > 0 {
            (around - self.lo) as f64 / self.width() as f64
        } else {
            0.5
        };
        self.lo = around - (w as f64 * rel.clamp(0.0, 1.0)) as Ns;
        self.hi = self.lo + w;
        if factor < 1.0 && self.is_live() {
            // Zooming in to look at something stops following.
            self.follow = false;
            self.paused = true;
        }
        self.clamp_window();
    }

    fn clamp_window(&mut self) {
        if let Some((slo, shi)) = self.store.span() {
            let w = self.width();
            if w >= shi - slo {
                // The whole capture fits: show all of it, never a window off its end.
                self.lo = slo;
                self.hi = slo + w;
                return;
            }
            if self.lo < slo {
                self.lo = slo;
                self.hi = slo + w;
            }
            if self.hi > shi {
                self.hi = shi;
                self.lo = shi - w;
            }
        }
    }

    fn pan(&mut self, dir: i64) {
        let step = (self.width() / 4).max(1) * dir;
        self.lo += step;
        self.hi += step;
        self.cursor += step;
        if self.is_live() {
            self.follow = false;
            self.paused = true;
        }
        self.clamp_window();
        self.cursor = self.cursor.clamp(self.lo, self.hi);
    }

    /// Zooms so the gap fills the middle with a neighbour op on each side.
    fn zoom_to_gap(&mut self, g: &Gap) {
        let lane = &self.store.lanes[g.lane];
        let prev = &lane.ops[g.prev];
        let next = &lane.ops[g.next];
        let lo = prev.start.min(g.start);
        let hi = next.end.max(g.end);
        let pad = ((hi - lo) / 10).max(100);
        self.lo = lo - pad;
        self.hi = (hi + pad).max(self.lo + MIN_WIDTH);
        self.cursor = g.start + g.dur() / 2;
        if self.is_live() {
            self.follow = false;
            self.paused = true;
        }
    }

    fn gap_matches(&self, g: &Gap) -> bool {
        if g.dur() < self.min_gap.max(1) {
            return false;
        }
        match &self.node_filter {
            Some((_, keys)) => keys.contains(&tree_key(g)),
            None => true,
        }
    }

    /// The next (dir > 0) or previous gap after the selected gap (or the cursor), over the
    /// whole store, honouring the threshold and the tree-node filter.
    fn step_gap(&mut self, dir: i64) {
        let from = match self.selected {
            Some(s) => s.start,
            None => self.cursor,
        };
        let mut best: Option<Gap> = None;
        for lane in 0..self.store.lanes.len() {
            let ops = &self.store.lanes[lane].ops;
            if ops.len() < 2 {
                continue;
            }
            let start = self.store.lanes[lane].lower_bound(from);
            let mut scanned = 0usize;
            let mut i = if dir > 0 {
                start.max(1)
            } else {
                start.min(ops.len() - 1)
            };
            while (1..ops.len()).contains(&i) && scanned < 5_000_000 {
                scanned += 1;
                if let Some(g) = analysis::classify(&self.store, lane, i - 1, i, &self.cfg) {
                    let ok = if dir > 0 {
                        g.start > from
                    } else {
                        g.start < from
                    };
                    if ok && self.gap_matches(&g) {
                        let better = match &best {
                            None => true,
                            Some(b) => {
                                (dir > 0 && g.start < b.start) || (dir < 0 && g.start > b.start)
                            }
                        };
                        if better {
                            best = Some(g);
                        }
                        break;
                    }
                }
                if dir > 0 {
                    i += 1;
                } else {
                    i -= 1;
                }
            }
        }
        match best {
            Some(g) => {
                self.select(&g);
                self.message = format!("gap {} at {}", fmt_ns(g.dur()), self.rel(g.start));
            }
            None => self.message = "no more gaps that way".into(),
        }
    }

    /// Time relative to the capture start, formatted.
    pub fn rel(&self, t: Ns) -> String {
        let origin = self.store.span().map(|s| s.0).unwrap_or(0);
        fmt_ns(t - origin)
    }

    /// The tree node selected in the call tree pane (an index into `cache.tree.nodes`).
    pub fn selected_node(&self) -> Option<usize> {
        let id = self.tree_state.selected().last()?;
        self.cache.as_ref()?.tree_nodes.get(id).copied()
    }

    /// Applies one action. This is the only place state changes in response to input.
    pub fn update(&mut self, a: Action) {
        if self.help && !matches!(a, Action::Help | Action::Clear | Action::Quit) {
            self.help = false;
        }
        match a {
            Action::Quit => self.quit = true,
            Action::StopProgram => {
                if self.source == SourceState::Live {
                    // The terminal loop, which holds the program, sends the signal.
                    self.stop_requests += 1;
                } else {
                    self.message = "no program to stop".into();
                }
            }
            Action::Help => self.help = !self.help,
            Action::Clear => {
                self.help = false;
                if self.node_filter.take().is_some() {
                    self.message = "tree-node filter cleared".into();
                }
            }
            Action::Pause => {
                if self.is_live() {
                    self.paused = !self.paused;
                    self.follow = !self.paused;
                    self.message = if self.paused {
                        "paused (collection goes on)".into()
                    } else {
                        "live".into()
                    };
                } else {
                    self.message = "nothing to pause: a file does not change".into();
                }
            }
            Action::ZoomIn => self.zoom(0.5, self.cursor),
            Action::ZoomOut => self.zoom(2.0, self.cursor),
            Action::PanLeft => self.pan(-1),
            Action::PanRight => self.pan(1),
            Action::Left | Action::Right => {
                if self.focus == Focus::Tree {
                    if a == Action::Left {
                        self.tree_state.key_left();
                    } else {
                        self.tree_state.key_right();
                    }
                } else {
                    self.pan(if a == Action::Left { -1 } else { 1 });
                }
            }
            Action::Up | Action::Down => {
                let down = a == Action::Down;
                match self.focus {
                    Focus::Tree => {
                        if down {
                            self.tree_state.key_down();
                        } else {
                            self.tree_state.key_up();
                        }
                    }
                    Focus::Gaps | Focus::Timeline => {
                        let n = self.gaps().len();
                        if n > 0 {
                            self.gap_sel = if down {
                                (self.gap_sel + 1).min(n - 1)
                            } else {
                                self.gap_sel.saturating_sub(1)
                            };
                            let g = self.gaps()[self.gap_sel];
                            self.select(&g);
                        }
                    }
                }
            }
            Action::NextGap => self.step_gap(1),
            Action::PrevGap => self.step_gap(-1),
            Action::BiggestGap => {
                let best = self
                    .gaps()
                    .iter()
                    .copied()
                    .max_by_key(|g| (g.dur(), -g.start));
                match best {
                    Some(g) => {
                        self.select(&g);
                        self.gap_sel = self.gaps().iter().position(|x| *x == g).unwrap_or(0);
                        self.message = format!("biggest gap: {}", fmt_ns(g.dur()));
                    }
                    None => self.message = "no gaps in the window".into(),
                }
            }
            Action::Enter => {
                if self.focus == Focus::Tree {
                    self.filter_selected_node();
                } else if let Some(g) = self.selected_gap() {
                    self.zoom_to_gap(&g);
                    self.message = format!("zoomed to the {} gap", fmt_ns(g.dur()));
                } else {
                    self.message = "select a gap first (n, b or ↑/↓)".into();
                }
            }
            Action::ZoomAll => {
                if let Some((slo, shi)) = self.store.span() {
                    self.lo = slo;
                    self.hi = shi.max(slo + MIN_WIDTH);
                    self.cursor = slo + (shi - slo) / 2;
                    self.follow = self.is_live() && !self.paused;
                    self.auto_width = true;
                }
            }
            Action::FocusNext | Action::FocusPrev => {
                let order = [Focus::Timeline, Focus::Gaps, Focus::Tree];
                let i = order.iter().position(|f| *f == self.focus).unwrap_or(0);
                let j = if a == Action::FocusNext {
                    (i + 1) % 3
                } else {
                    (i + 2) % 3
                };
                self.focus = order[j];
                if self.focus == Focus::Tree && self.tree_state.selected().is_empty() {
                    self.tree_state.select_first();
                }
            }
            Action::Invert => {
                self.inverted = !self.inverted;
                self.tree_state = TreeState::default();
                self.refresh(true);
                // The widget's own select_first knows only the rows it last drew (the other
                // tree's): select the new tree's first row by its identifier.
                if let Some(first) = self.cache.as_ref().and_then(|c| c.items.first()) {
                    self.tree_state.select(vec![*first.identifier()]);
                }
                self.message = if self.inverted {
                    "call tree: bottom-up".into()
                } else {
                    "call tree: top-down".into()
                };
            }
            Action::Export => {
                if let Some(j) = &self.export_job {
                    self.message = format!("still writing {}", j.path.display());
                } else {
                    match crate::export::export_window(self) {
                        Ok(j) => {
                            self.message = format!("exporting to {}…", j.path.display());
                            self.export_job = Some(j);
                        }
                        Err(e) => self.message = format!("export failed: {e:#}"),
                    }
                }
            }
            Action::ThresholdUp => {
                self.min_gap = if self.min_gap == 0 {
                    1_000
                } else {
                    self.min_gap * 2
                };
                self.message = format!("hiding gaps under {}", fmt_ns(self.min_gap));
            }
            Action::ThresholdDown => {
                self.min_gap = if self.min_gap <= 1_000 {
                    0
                } else {
                    self.min_gap / 2
                };
                self.message = if self.min_gap == 0 {
                    "showing all gaps".into()
                } else {
                    format!("hiding gaps under {}", fmt_ns(self.min_gap))
                };
            }
            Action::Search => {
                self.search = Some(String::new());
                self.search_hit = 0;
                self.focus = Focus::Tree;
                self.find_in_tree();
            }
            Action::SearchChar(ch) => {
                if let Some(q) = &mut self.search {
                    q.push(ch);
                    self.search_hit = 0;
                    self.find_in_tree();
                }
            }
            Action::SearchBack => {
                if let Some(q) = &mut self.search {
                    q.pop();
                    self.search_hit = 0;
                    self.find_in_tree();
                }
            }
            Action::SearchNext => {
                self.search_hit += 1;
                self.find_in_tree();
            }
            Action::SearchEnd => {
                if let Some(q) = self.search.take() {
                    self.message = format!("search for {q:?} ended");
                }
            }
            Action::Sort => {
                self.sort = match self.sort {
                    GapSort::Duration => GapSort::Time,
                    GapSort::Time => GapSort::Duration,
                };
                self.gap_sel = 0;
                self.apply_sort();
                self.sync_gap_sel();
            }
        }
        self.refresh(false);
    }

    /// Makes `n`/`N` walk only the gaps under the selected tree node.
    fn filter_selected_node(&mut self) {
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
        let mut keys = HashSet::new();
        // Keys of gaps in the window whose displayed path passes through the node.
        for g in &c.gaps {
            let leaf = if self.inverted {
                None
            } else {
                t.node_of(g.stack, g.api, g.op_name)
            };
            let inside = match leaf {
                Some(l) => under(l),
                None => self.inverted && self.inverted_path_has(g, node),
            };
            if inside {
                keys.insert(tree_key(g));
            }
        }
        let name = self.store.names.get(t.nodes[node].frame).to_string();
        let count = c
            .gaps
            .iter()
            .filter(|g| keys.contains(&tree_key(g)))
            .count();
        self.message = format!("walking {count} gaps under {name} (n/N; esc clears)");
        self.node_filter = Some((name, keys));
        self.focus = Focus::Gaps;
    }

    /// A gap's path in the bottom-up tree: op name, API, then the stack from the inside out.
    fn inverted_frames(&self, g: &Gap) -> Vec<NameId> {
        let mut frames = vec![g.op_name];
        if g.api != 0 {
            frames.push(g.api);
        }
        let mut st = self.store.stacks.frames(g.stack);
        st.reverse();
        frames.extend(st);
        frames
    }

    fn inverted_path_has(&self, g: &Gap, node: usize) -> bool {
        let Some(c) = &self.cache else { return false };
        let path = c.tree.path_to(node);
        let frames = self.inverted_frames(g);
        path.iter()
            .zip(frames.iter())
            .all(|(&n, &f)| c.tree.nodes[n].frame == f)
            && frames.len() >= path.len()
    }

    /// Whether a gap belongs to the tree-node filter (for highlighting).
    pub fn highlighted(&self, g: &Gap) -> bool {
        self.node_filter
            .as_ref()
            .is_some_and(|(_, k)| k.contains(&tree_key(g)))
    }

    /// Short label of a gap's cause, with the reason when it says more than HTA's category.
    pub fn cause_label(g: &Gap) -> &'static str {
        match (g.reason, g.category) {
            (Reason::Sync, _) => "sync",
            (Reason::EventWait, _) => "event_wait",
            (Reason::Graph, _) => "graph",
            (_, Category::HostWait) => "host_wait",
            (_, Category::KernelWait) => "kernel_wait",
            (_, Category::Other) => "other",
        }
    }
}

/// A Python frame `dir/file.py(42): Class.method` shown as `Class.method  file.py:42`, the
/// function first so that narrow panes keep what matters; other frames unchanged.
pub fn pretty_frame(f: &str) -> String {
    if let Some((loc, qual)) = f.split_once("): ") {
        if let Some((path, line)) = loc.rsplit_once('(') {
            if path.ends_with(".py") && line.chars().all(|c| c.is_ascii_digit() || c == '-') {
                let file = path.rsplit('/').next().unwrap_or(path);
                return format!("{qual}  {file}:{line}");
            }
        }
    }
    f.to_string()
}

/// A native frame from `--native`: `symbol [libfoo.so]`, or `libfoo.so+0x1a2b` when the
/// library had no symbol for it.
pub fn is_native_frame(frame: &str) -> bool {
    (frame.ends_with(']') && frame.contains(" [")) || is_unnamed_native(frame)
}

/// A native frame the viewer could not name (a stripped library).
pub fn is_unnamed_native(frame: &str) -> bool {
    match frame.rsplit_once("+0x") {
        Some((lib, off)) => {
            !lib.contains(' ')
                && lib.contains(".so")
                && !off.is_empty()
                && off.chars().all(|c| c.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// Frames of framework plumbing that every module call passes through; the tree hides them so
/// the user's modules are what shows (their totals flow into the nearest shown ancestor).
pub fn is_plumbing(frame: &str) -> bool {
    frame.starts_with("torch/nn/modules/module.py(")
        || frame.starts_with("transformers/utils/generic.py(")
        || frame.starts_with("transformers/utils/output_capturing.py(")
        || frame.starts_with("torch/utils/_contextlib.py(")
        || (frame.starts_with("transformers/modeling_layers.py(")
            && frame.ends_with("GradientCheckpointingLayer.__call__"))
        // How `python -m` and runpy-based launchers reach a script's code.
        || frame.starts_with("<frozen runpy>(")
        || frame == "<built-in function exec>"
}

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
fn path_ids(t: &CallTree) -> Vec<usize> {
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

/// Most children shown under a tree node, and the deepest level shown.
const TREE_CHILDREN: usize = 50;
const TREE_DEPTH: usize = 64;

/// The nodes the tree shows, in the order it shows them when every node is open: read from
/// its items, so it is the tree's own order.
fn display_order(c: &Cache) -> Vec<usize> {
    fn walk(c: &Cache, items: &[TreeItem<'static, usize>], out: &mut Vec<usize>) {
        for it in items {
            out.extend(c.tree_nodes.get(it.identifier()));
            walk(c, it.children(), out);
        }
    }
    let mut out = Vec::new();
    walk(c, &c.items, &mut out);
    out
}

/// Tree items for tui-tree-widget, children sorted by gap time, at most 50 a level.
fn build_items(store: &Store, t: &CallTree, ids: &[usize]) -> Vec<TreeItem<'static, usize>> {
    fn item(
        store: &Store,
        t: &CallTree,
        ids: &[usize],
        n: usize,
        depth: usize,
    ) -> TreeItem<'static, usize> {
        let node = &t.nodes[n];
        let share = tree_share(t, n);
        let mut name = pretty_frame(store.names.get(node.frame));
        if name.chars().count() > 90 {
            name = name.chars().take(89).collect::<String>() + "…";
        }
        // The frame comes right after gap time and share, so that it stays visible under the
        // tree's indentation on deep stacks; the counts follow it, dimmed, and are what a
        // narrow pane cuts.
        let text = Line::from(vec![
            Span::raw(format!(
                "{:>6} {:>3.0}%  ",
                crate::units::fmt_short(node.gap_ns),
                share,
            )),
            Span::raw(name),
            Span::styled(
                format!(
                    "  {} gaps · {} launches · {} kernel",
                    node.gaps,
                    node.launches,
                    crate::units::fmt_short(node.kernel_ns),
                ),
                Style::default().fg(Color::DarkGray),
            ),
        ]);
        let children: Vec<_> = if depth < TREE_DEPTH {
            visible_children(store, t, n)
                .into_iter()
                .take(TREE_CHILDREN)
                .map(|c| item(store, t, ids, c, depth + 1))
                .collect()
        } else {
            Vec::new()
        };
        let id = ids[n];
        TreeItem::new(id, text.clone(), children).unwrap_or_else(|_| TreeItem::new_leaf(id, text))
    }
    visible_children(store, t, 0)
        .into_iter()
        .take(TREE_CHILDREN)
        .map(|c| item(store, t, ids, c, 1))
        .collect()
}

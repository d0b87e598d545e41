//! The UI model: state, the messages that change it, and the one `update` that applies them.
//!
//! Everything that changes the state arrives as a [`Msg`]: keys (as [`Action`]s), the mouse,
//! a resize, what the last draw laid out, data from the source, the periodic tick. `update`
//! applies it and returns the [`Effect`]s that reach outside the model (starting an export
//! thread, signalling the program), which the terminal loop (`term`) carries out. After each
//! message `refresh` recomputes the window's analysis (when it changed) and the view model, so
//! that the views (`crate::views`) only lay out and colour what is there.
//!
//! - `window`: the visible time window: zoom, pan, follow.
//! - `gaps`: the gap list and walking gaps.
//! - `filter`: the gap list's filters (a tree node's sites, typed text) over the whole window.
//! - `tree`: the call tree's rows, selection and search.
//! - `view`: the view model the panes draw.
//! - `layout`: where the panes go on a screen.

pub mod analyze;
pub mod ending;
pub mod filter;
pub mod fix;
pub mod gaps;
pub mod keymap;
pub mod lane;
pub mod layout;
pub mod term;
pub mod tree;
pub mod view;
pub mod window;

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tui_tree_widget::TreeState;

use crate::collect::analysis::advice::Diagnosis;
use crate::collect::analysis::gaps::{Basis, Category, Config, Gap, Reason};
use crate::collect::model::records::{NameId, Ns, StackId};
use crate::collect::model::store::Store;
use crate::collect::sources::ingest::Ingest;
use crate::collect::sources::live::LiveEvent;
use crate::export::{ExportJob, ExportRequest};
use crate::units::fmt_ns;
pub use analyze::Cache;
pub use keymap::{Action, KeyMap};
pub use view::ViewModel;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Focus {
    Timeline,
    Gaps,
    Tree,
    /// The what-to-fix rows of the details pane (while it shows them).
    Fix,
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

/// Why a gap happened, as the UI tells causes apart (by colour and label): the reason where it
/// says more than HTA's category, else the category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    Sync,
    EventWait,
    Graph,
    HostWait,
    KernelWait,
    Other,
}

impl Cause {
    pub fn of(g: &Gap) -> Cause {
        match (g.reason, g.category) {
            (Reason::Sync, _) => Cause::Sync,
            (Reason::EventWait, _) => Cause::EventWait,
            (Reason::Graph, _) => Cause::Graph,
            (_, Category::HostWait) => Cause::HostWait,
            (_, Category::KernelWait) => Cause::KernelWait,
            (_, Category::Other) => Cause::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Cause::Sync => "sync",
            Cause::EventWait => "event_wait",
            Cause::Graph => "graph",
            Cause::HostWait => "host_wait",
            Cause::KernelWait => "kernel_wait",
            Cause::Other => "other",
        }
    }
}

/// A mouse event, as the model needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MouseKind {
    ScrollUp,
    ScrollDown,
    /// The left button pressed.
    Click,
    Other,
}

/// Where the last draw put what the mouse can point at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitAreas {
    /// The timeline's cells: first column and width.
    pub timeline_x: (u16, u16),
}

/// What a draw hands back: its hit areas, and the tree widget's state, which the widget
/// updates while rendering (its scroll offset and the rows it showed, which its keys use).
pub struct Drawn {
    pub hits: HitAreas,
    pub tree_state: TreeState<usize>,
}

/// Everything that changes the model.
pub enum Msg {
    Action(Action),
    Mouse {
        column: u16,
        row: u16,
        kind: MouseKind,
    },
    /// The terminal's size, before each draw (and on a resize): the view model is laid out
    /// for it when anything changed since it last was.
    Resize(u16, u16),
    Drawn(Drawn),
    /// Data from the source (live runs and the demo).
    Source(LiveEvent),
    /// The program under `gaptop run` ended (the text says how).
    ProgramEnded(String),
    /// Before each draw: follow new data, see how a background export went.
    Tick,
    /// The loop started (or failed to start) the export asked for.
    ExportStarted(anyhow::Result<ExportJob>),
    /// What the loop did for an effect, for the status line.
    Said(String),
}

impl From<Action> for Msg {
    fn from(a: Action) -> Msg {
        Msg::Action(a)
    }
}

/// What `update` asks the terminal loop to do outside the model.
pub enum Effect {
    /// Write this window to a file on a thread of its own.
    Export(ExportRequest),
    /// Signal the program under `gaptop run`, harder the nth time (SIGINT, SIGTERM, SIGKILL).
    StopProgram(u32),
    /// Put this text on the terminal's clipboard (OSC 52, which works over ssh and in tmux).
    Copy(String),
    /// Open `$EDITOR` (or vi) at this line of this source file, the UI suspended meanwhile.
    Edit { path: String, line: u32 },
}

pub const MAX_GAPS: usize = 2000;
const MIN_WIDTH: Ns = 1_000;

pub struct App {
    /// Shared only with an export that is copying its window out (see
    /// [`crate::export::start`]); new data waits until it is done.
    pub store: Arc<Store>,
    /// Turns live frames into store changes.
    pub ingest: Ingest,
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
    /// The details at full size, wrapped, with the whole launch stack (`d`).
    pub details_full: bool,
    /// How far the full-size details are scrolled, in lines.
    pub details_scroll: u16,
    /// The call tree by function (a Python function's lines as one frame), as py-spy's `L`.
    pub tree_by_function: bool,
    /// The call tree without native frames.
    pub hide_native: bool,
    pub tree_state: TreeState<usize>,
    /// Leaf keys of the tree node whose gaps `n`/`N` walk.
    pub node_filter: Option<(String, HashSet<GapKey>)>,
    /// The call tree search being typed (`/`), and which of its matches is selected.
    pub search: Option<String>,
    search_hit: usize,
    /// The typed search filters the gap list rather than searching the tree (`/` started in
    /// the gap list or the timeline).
    pub search_gaps: bool,
    /// The gap list's text filter (any case): gaps whose cause, op, API or launch stack hold it.
    pub gap_query: Option<String>,
    pub help: bool,
    pub message: String,
    pub export_dir: PathBuf,
    /// The export being written in the background, if any.
    pub export_job: Option<ExportJob>,
    /// Times the user asked to stop the profiled program (each asks harder).
    pub stop_requests: u32,
    /// The window's analysis (`app::analyze`): its gaps and call tree.
    pub cache: Option<Cache>,
    /// The same analysis's steps, verdicts and what to fix.
    pub diagnosis: Option<Diagnosis>,
    /// The capture's steps, and the data and step rule they were found for.
    pub capture_steps: Option<analyze::CaptureSteps>,
    /// An analysis being made on its own thread (a window of many ops), and what for.
    pub(super) analysis_job: Option<(
        std::sync::mpsc::Receiver<analyze::Analysed>,
        analyze::AnalysisKey,
    )>,
    /// When the last analysis was taken in, and how long it took.
    pub(super) last_analysis: Option<(Instant, std::time::Duration)>,
    /// What delimits steps (`--step NAME`), else found automatically.
    pub step_by: Option<String>,
    /// The details pane shows what to fix although a gap is selected (`w`).
    pub show_fix: bool,
    /// The what-to-fix row chosen (with the focus on it).
    pub fix_sel: usize,
    /// A second capture compared with this one (`gaptop open A --compare B`), and whether the
    /// details pane shows the comparison (`w` cycles the gap, what to fix and it).
    pub compare: Option<crate::diff::DiffJson>,
    pub show_compare: bool,
    /// The call tree shows CPU samples during each site's gaps (`c`).
    pub cpu_tree: bool,
    /// What the panes show, for the last known screen size.
    pub view: ViewModel,
    /// The selected gap as the store has it now (None if it left the store).
    current: Option<Gap>,
    /// The terminal's size, as last told.
    pub size: (u16, u16),
    /// Something changed since the view model was laid out.
    view_stale: bool,
    /// Where the last draw put the timeline's cells.
    pub hits: HitAreas,
    pub quit: bool,
    /// Last lines the profiled program printed.
    pub output: VecDeque<String>,
    /// Whether a program runs whose output the output pane shows (not in the demo).
    pub program: bool,
}

/// What a gap is charged to in the call tree: launch stack, API and op name.
pub type GapKey = (StackId, NameId, NameId);

fn tree_key(g: &Gap) -> GapKey {
    (g.stack, g.api, g.op_name)
}

impl App {
    pub fn new(store: impl Into<Arc<Store>>, source: SourceState) -> App {
        let store = store.into();
        let (lo, hi) = store.span().unwrap_or((0, 1));
        let live = source == SourceState::Live;
        // A recording cut short says so at once, not only once the UI has gone.
        let message = store
            .skipped
            .keys()
            .find(|k| k.starts_with("recording cut at byte"))
            .map(|k| format!("{k}: showing what comes before it"))
            // Damaged frames a recording's checks found and skipped.
            .or_else(|| {
                let damaged = |n: &&String| n.contains(" damaged frame");
                store.notes.iter().find(damaged).cloned()
            })
            // Records dropped for their times.
            .or_else(|| {
                let lines = store.dropped_times.lines();
                (!lines.is_empty()).then(|| lines.join("; "))
            })
            // What a source lacked (an Nsight Systems export without call chains or NVTX).
            .or_else(|| {
                let lacks: Vec<&str> = store
                    .notes
                    .iter()
                    .filter(|n| n.starts_with("no "))
                    .map(|n| n.as_str())
                    .collect();
                (!lacks.is_empty()).then(|| lacks.join("; "))
            })
            .unwrap_or_default();
        App {
            store,
            ingest: Ingest::new(),
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
            details_full: false,
            details_scroll: 0,
            tree_by_function: false,
            hide_native: false,
            tree_state: TreeState::default(),
            search: None,
            search_gaps: false,
            gap_query: None,
            search_hit: 0,
            node_filter: None,
            help: false,
            message,
            export_dir: PathBuf::from("."),
            export_job: None,
            stop_requests: 0,
            cache: None,
            diagnosis: None,
            capture_steps: None,
            analysis_job: None,
            last_analysis: None,
            step_by: None,
            show_fix: false,
            fix_sel: 0,
            compare: None,
            show_compare: false,
            cpu_tree: false,
            view: ViewModel::default(),
            current: None,
            size: (0, 0),
            view_stale: true,
            hits: HitAreas::default(),
            quit: false,
            output: Default::default(),
            program: live,
        }
    }

    pub fn width(&self) -> Ns {
        self.hi - self.lo
    }

    pub fn is_live(&self) -> bool {
        self.source != SourceState::File
    }

    /// A gap's length whole, and how much of it the window holds when the window cuts it.
    pub fn gap_whole_text(&self, g: &Gap) -> String {
        let (ws, we) = g.whole(&self.store);
        if (ws, we) == (g.start, g.end) {
            fmt_ns(g.dur())
        } else {
            format!(
                "{} ({} of it in the window)",
                fmt_ns(we - ws),
                fmt_ns(g.dur())
            )
        }
    }

    /// Time relative to the capture start, formatted.
    pub fn rel(&self, t: Ns) -> String {
        let origin = self.store.origin();
        fmt_ns(t - origin)
    }

    /// Whether the store is free to take new data (an export copying its window out shares it).
    pub fn store_free(&mut self) -> bool {
        Arc::get_mut(&mut self.store).is_some()
    }

    /// Says how the background export ended, once it has.
    fn poll_export(&mut self) {
        let Some(j) = &self.export_job else {
            return;
        };
        if let Some(r) = j.poll() {
            self.message = match r {
                Ok(w) => w.said(&j.path),
                Err(e) => format!("export failed: {e:#}"),
            };
            self.export_job = None;
        } else if self.message.starts_with("exporting to ") {
            // (A message that came since stays.) Live, say while new data waits for the copy.
            let copying = Arc::strong_count(&self.store) > 1 && self.is_live();
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
            Ok(w) => w.said(&path),
            Err(e) => format!("export of {} failed: {e:#}", path.display()),
        })
    }

    /// Follows new data and refreshes: what the loop does before each draw.
    pub fn tick(&mut self) {
        self.update(Msg::Tick);
    }

    /// The selected gap, as the store has it now (None if it left the store).
    pub fn selected_gap(&self) -> Option<Gap> {
        self.current
    }

    /// Short label of a gap's cause, with the reason when it says more than HTA's category.
    pub fn cause_label(g: &Gap) -> &'static str {
        Cause::of(g).label()
    }

    /// Applies one message. This is the only place state changes; what reaches outside the
    /// model comes back as effects.
    pub fn update(&mut self, msg: impl Into<Msg>) -> Vec<Effect> {
        let mut fx = Vec::new();
        match msg.into() {
            Msg::Action(a) => self.act(a, &mut fx),
            Msg::Mouse { column, row, kind } => self.mouse(column, row, kind, &mut fx),
            Msg::Resize(w, h) => {
                self.lay_out((w, h));
                return fx;
            }
            Msg::Drawn(d) => {
                // The widget's own bookkeeping of what it drew: the view model does not change.
                self.hits = d.hits;
                self.tree_state = d.tree_state;
                return fx;
            }
            Msg::Source(ev) => {
                self.apply_source(ev);
                return fx;
            }
            Msg::ProgramEnded(how) => self.source = SourceState::Ended(how),
            Msg::Tick => {
                self.poll_export();
                self.follow_data();
            }
            Msg::ExportStarted(r) => match r {
                Ok(j) => {
                    self.message = format!("exporting to {}…", j.path.display());
                    self.export_job = Some(j);
                }
                Err(e) => self.message = format!("export failed: {e:#}"),
            },
            Msg::Said(s) => self.message = s,
        }
        self.refresh(false);
        fx
    }

    /// Applies one source event to the store (the caller has checked that it is free).
    fn apply_source(&mut self, ev: LiveEvent) {
        match ev {
            LiveEvent::Frames(conn, frames) => {
                if let Some(store) = Arc::get_mut(&mut self.store) {
                    let dropped = store.dropped_times.total();
                    for f in frames {
                        self.ingest.apply(store, conn, f);
                    }
                    // Records dropped for their times are said as they come.
                    if store.dropped_times.total() != dropped {
                        self.message = store.dropped_times.lines().join("; ");
                    }
                }
            }
            LiveEvent::Closed(conn, why) => {
                if let Some(store) = Arc::get_mut(&mut self.store) {
                    self.ingest.close(store, conn);
                }
                if let Some(w) = why {
                    self.message = format!("connection {conn} closed: {w}");
                }
            }
            LiveEvent::Output(line) => {
                self.output.push_back(line);
                while self.output.len() > 500 {
                    self.output.pop_front();
                }
            }
            LiveEvent::Exited(s) => self.source = SourceState::Ended(s),
            LiveEvent::Notice(s) => {
                if let Some(store) = Arc::get_mut(&mut self.store) {
                    store.sampling_note = Some(s.clone());
                }
                self.message = s;
            }
        }
    }

    /// The mouse, by where the last view put the panes: over the timeline a click or the wheel
    /// moves the cursor there (the wheel zooms around it); a click on a gap row picks that gap,
    /// on a tree row that row (a second click opens or closes it); the wheel scrolls the list
    /// or tree it is over.
    fn mouse(&mut self, column: u16, row: u16, kind: MouseKind, fx: &mut Vec<Effect>) {
        use ratatui::layout::Position;
        if self.help {
            // Over the help, a click or the wheel closes it, as a key does, and does no more.
            self.help = matches!(kind, MouseKind::Other);
            return;
        }
        let at = Position::new(column, row);
        let s = self.view.screen;
        let over_timeline = s.timeline.contains(at);
        if over_timeline || !matches!(kind, MouseKind::Click) {
            let (x0, w) = self.hits.timeline_x;
            if over_timeline && w > 0 && column >= x0 && column < x0 + w {
                self.cursor =
                    self.lo + ((self.hi - self.lo) as f64 * (column - x0) as f64 / w as f64) as i64;
            }
        }
        let rows = layout::inner(s.gaps);
        match kind {
            MouseKind::Click if rows.contains(at) && row > rows.y => {
                self.focus = Focus::Gaps;
                let i = self.view.gaps.first + (row - rows.y - 1) as usize;
                let listed = self.listed_gaps();
                if let Some(g) = listed.get(i).copied() {
                    self.gap_sel = i;
                    self.select(&g);
                }
            }
            MouseKind::Click if s.tree.contains(at) => {
                self.focus = Focus::Tree;
                self.tree_state.click_at(at);
            }
            MouseKind::Click if over_timeline => self.focus = Focus::Timeline,
            MouseKind::ScrollUp | MouseKind::ScrollDown if rows.contains(at) => {
                let up = matches!(kind, MouseKind::ScrollUp);
                self.move_gap_rows(if up { -3 } else { 3 });
            }
            MouseKind::ScrollUp | MouseKind::ScrollDown if s.tree.contains(at) => {
                if matches!(kind, MouseKind::ScrollUp) {
                    self.tree_state.scroll_up(3);
                } else {
                    self.tree_state.scroll_down(3);
                }
            }
            MouseKind::ScrollUp => self.act(Action::ZoomIn, fx),
            MouseKind::ScrollDown => self.act(Action::ZoomOut, fx),
            _ => {}
        }
    }

    /// Applies one action.
    fn act(&mut self, a: Action, fx: &mut Vec<Effect>) {
        // The help open, a key closes it and does nothing else (q still quits).
        if self.help && a != Action::Quit {
            self.help = false;
            return;
        }
        // The details at full size scroll like a pager while they are open.
        if self.details_full {
            let page = (self.view.screen.details.y + self.view.screen.details.height)
                .saturating_sub(self.view.screen.gaps.y + 3)
                .max(1);
            let lines = self.view.stack.len() as u16 + 16;
            let by: i32 = match a {
                Action::Up => -1,
                Action::Down => 1,
                Action::PageUp => -(page as i32),
                Action::PageDown => page as i32,
                Action::Top => -(u16::MAX as i32),
                Action::Bottom => u16::MAX as i32,
                _ => 0,
            };
            if by != 0 {
                self.details_scroll =
                    (self.details_scroll as i32 + by).clamp(0, lines as i32) as u16;
                return;
            }
        }
        match a {
            Action::Quit => self.quit = true,
            Action::StopProgram => {
                if self.source == SourceState::Live {
                    // The terminal loop, which holds the program, sends the signal.
                    self.stop_requests += 1;
                    fx.push(Effect::StopProgram(self.stop_requests));
                } else {
                    self.message = "no program to stop".into();
                }
            }
            Action::Help => self.help = !self.help,
            Action::Clear => {
                self.help = false;
                self.details_full = false;
                if self.gap_query.take().is_some() {
                    self.message = "gap list filter cleared".into();
                    self.refresh_filter();
                    return;
                }
                if self.node_filter.take().is_some() {
                    self.message = "tree-node filter cleared".into();
                    self.refresh_filter();
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
                    Focus::Gaps | Focus::Timeline => self.move_in_gap_list(down),
                    Focus::Fix => {
                        let n = self.diagnosis.as_ref().map_or(0, |d| d.advice.len());
                        self.fix_sel = if down {
                            (self.fix_sel + 1).min(n.saturating_sub(1))
                        } else {
                            self.fix_sel.saturating_sub(1)
                        };
                    }
                }
            }
            Action::NextGap => self.step_gap(1),
            Action::PrevGap => self.step_gap(-1),
            Action::BiggestGap => self.select_biggest(),
            Action::Enter => {
                if self.focus == Focus::Fix {
                    self.filter_fix_row();
                } else if self.focus == Focus::Tree {
                    self.filter_selected_node();
                } else if let Some(g) = self.selected_gap() {
                    self.zoom_to_gap(&g);
                    self.message = format!("zoomed to the {} gap", fmt_ns(g.dur()));
                } else {
                    self.message = "select a gap first (n, b or ↑/↓)".into();
                }
            }
            Action::ZoomAll => {
                self.zoom_all();
                self.message = "the whole capture".into();
            }
            Action::FocusNext | Action::FocusPrev => {
                // The what-to-fix rows take the focus while the details pane shows them.
                let mut order = vec![Focus::Timeline, Focus::Gaps, Focus::Tree];
                if (self.current.is_none() || self.show_fix) && !self.show_compare {
                    order.push(Focus::Fix);
                }
                let n = order.len();
                let i = order.iter().position(|f| *f == self.focus).unwrap_or(0);
                let j = if a == Action::FocusNext {
                    (i + 1) % n
                } else {
                    (i + n - 1) % n
                };
                self.focus = order[j];
                if self.focus == Focus::Tree && self.tree_state.selected().is_empty() {
                    self.tree_state.select_first();
                }
            }
            Action::Invert => self.invert_tree(),
            Action::Export => {
                if let Some(j) = &self.export_job {
                    self.message = format!("still writing {}", j.path.display());
                } else {
                    fx.push(Effect::Export(ExportRequest {
                        store: Arc::clone(&self.store),
                        lo: self.lo,
                        hi: self.hi,
                        cfg: self.cfg,
                        dir: self.export_dir.clone(),
                    }));
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
            Action::Search | Action::FilterGaps => {
                self.search = Some(String::new());
                self.search_hit = 0;
                self.search_gaps = a == Action::FilterGaps;
                if self.search_gaps {
                    self.focus = Focus::Gaps;
                    self.filter_gaps_by_text();
                } else {
                    self.focus = Focus::Tree;
                    self.find_in_tree();
                }
            }
            Action::SearchChar(ch) => {
                if let Some(q) = &mut self.search {
                    q.push(ch);
                    self.search_hit = 0;
                    self.searched();
                }
            }
            Action::SearchBack => {
                if let Some(q) = &mut self.search {
                    q.pop();
                    self.search_hit = 0;
                    self.searched();
                }
            }
            Action::SearchNext if self.search_gaps => self.end_gap_filter_typing(),
            Action::SearchNext => {
                self.search_hit += 1;
                self.find_in_tree();
            }
            Action::SearchEnd if self.search_gaps => self.end_gap_filter_typing(),
            Action::SearchEnd => {
                if let Some(q) = self.search.take() {
                    self.message = format!("search for {q:?} ended");
                }
            }
            Action::Sort => self.toggle_sort(),
            Action::Basis => {
                self.cfg.basis = match self.cfg.basis {
                    Basis::Device => Basis::Stream,
                    Basis::Stream => Basis::Device,
                };
                self.refresh(true);
                self.message = match self.cfg.basis {
                    Basis::Device => "gaps: device idle (no stream of the device running)".into(),
                    Basis::Stream => "gaps: each stream's own idle (HTA's)".into(),
                };
            }
            Action::WhatToFix if self.show_compare => {
                // From the comparison back to the gap (or what to fix, with none selected).
                self.show_compare = false;
                self.show_fix = false;
            }
            Action::WhatToFix
                if self.compare.is_some() && (self.show_fix || self.current.is_none()) =>
            {
                // What to fix was shown: the comparison next.
                self.show_compare = true;
                if self.focus == Focus::Fix {
                    self.focus = Focus::Gaps;
                }
            }
            Action::WhatToFix => {
                self.show_fix = !self.show_fix;
                if self.show_fix {
                    self.focus = Focus::Fix;
                } else if self.focus == Focus::Fix {
                    self.focus = Focus::Gaps;
                }
                if !self.show_fix && self.current.is_none() {
                    self.message = "no gap selected: n, b or ↑/↓ picks one".into();
                }
            }
            Action::PageUp | Action::PageDown | Action::Top | Action::Bottom => {
                // A page is the gap list's height as last laid out.
                let page = (self.view.screen.gaps.height.saturating_sub(3) as i64).max(1);
                let rows = match a {
                    Action::PageUp => -page,
                    Action::PageDown => page,
                    Action::Top => i64::MIN / 2,
                    _ => i64::MAX / 2,
                };
                match self.focus {
                    Focus::Tree => {
                        let n = rows.unsigned_abs().min(10_000) as usize;
                        for _ in 0..n {
                            let moved = if rows < 0 {
                                self.tree_state.key_up()
                            } else {
                                self.tree_state.key_down()
                            };
                            if !moved {
                                break;
                            }
                        }
                    }
                    Focus::Fix => {
                        let n = self.diagnosis.as_ref().map_or(0, |d| d.advice.len()) as i64;
                        self.fix_sel =
                            (self.fix_sel as i64 + rows).clamp(0, (n - 1).max(0)) as usize;
                    }
                    Focus::Gaps | Focus::Timeline => self.move_gap_rows(rows),
                }
            }
            Action::Details => {
                self.details_full = !self.details_full;
                self.details_scroll = 0;
            }
            Action::CopyStack => {
                let frames = self.selected_frames();
                if frames.is_empty() {
                    self.message = "select a gap or a tree node first: its stack is copied".into();
                } else {
                    let text =
                        crate::frames::traceback(frames.iter().map(|&f| self.store.names.get(f)));
                    self.message = format!(
                        "copied {} to the clipboard (through the terminal: tmux needs \
                         set-clipboard on)",
                        crate::units::count(frames.len() as u64, "frame")
                    );
                    fx.push(Effect::Copy(text));
                }
            }
            Action::Edit => {
                // The innermost frame of the user's code: not framework plumbing, and a file.
                let target = self.selected_frames().iter().rev().find_map(|&f| {
                    let name = self.store.names.get(f);
                    if crate::frames::is_plumbing(name) {
                        return None;
                    }
                    crate::frames::python_location(name)
                });
                match target {
                    Some((path, line)) => fx.push(Effect::Edit {
                        path: path.to_string(),
                        line,
                    }),
                    None => {
                        self.message = "no Python source line in the selected stack to open".into()
                    }
                }
            }
            Action::ByFunction => {
                self.tree_by_function = !self.tree_by_function;
                self.message = if self.tree_by_function {
                    "call tree: by function (a function's lines as one)".into()
                } else {
                    "call tree: by line".into()
                };
                self.refresh(true);
            }
            Action::HideNative => {
                self.hide_native = !self.hide_native;
                self.message = if self.hide_native {
                    "call tree: native frames hidden".into()
                } else {
                    "call tree: native frames shown (runs without symbols folded)".into()
                };
                self.refresh(true);
            }
            Action::NextStep => self.step_to(1),
            Action::PrevStep => self.step_to(-1),
            Action::CpuSamples => {
                self.cpu_tree = !self.cpu_tree;
                self.cfg.cpu_tree = self.cpu_tree;
                self.message = if self.store.cpu_sample_count() == 0 {
                    "no CPU samples in this capture (gaptop run and record take them)".into()
                } else if self.cpu_tree {
                    "call tree: CPU samples during each site's gaps shown".into()
                } else {
                    "call tree: CPU samples hidden".into()
                };
                self.refresh(true);
            }
        }
    }
}

//! The UI model's state: [`App`], every field the panes and keys read and change, and the small
//! types it holds (the focused pane, the gap list's order, where the data comes from, the
//! selected gap, where the last draw put the timeline). A module of its own, below the code
//! that changes the state (`update`, `act`, `window`, `gaps`, `tree_nav`, `filter`,
//! `analysing`) and the view model's builders (`viewmodel`): each of those imports `App` from here.

use std::collections::{HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use tui_tree_widget::TreeState;

use super::cache::{Analysed, AnalysisKey, Cache, CaptureSteps};
use super::cause::Cause;
use super::keymap::KeyMap;
use super::viewmodel::model::ViewModel;
use crate::export::ExportJob;
use gaptop_core::analysis::advice::Diagnosis;
use gaptop_core::analysis::gaps::{Config, Gap};
use gaptop_core::analysis::replay::StepPicture;
use gaptop_core::model::records::{NameId, Ns, StackId};
use gaptop_core::model::store::Store;
use gaptop_core::sources::ingest::Ingest;
use gaptop_core::units::fmt_ns;

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

/// The rank summary's order: most late time, most waiting, most idle first, or by rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RankSort {
    #[default]
    Late,
    Waits,
    Idle,
    Rank,
}

impl RankSort {
    /// The order after this one (`s`).
    pub fn next(self) -> RankSort {
        match self {
            RankSort::Late => RankSort::Waits,
            RankSort::Waits => RankSort::Idle,
            RankSort::Idle => RankSort::Rank,
            RankSort::Rank => RankSort::Late,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            RankSort::Late => "late time",
            RankSort::Waits => "waits",
            RankSort::Idle => "idle",
            RankSort::Rank => "rank",
        }
    }
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

/// Where the last draw put what the mouse can point at.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HitAreas {
    /// The timeline's cells: first column and width.
    pub timeline_x: (u16, u16),
}

/// A step drawn measured and replayed with a What-to-fix row's fix (`r`), in the timeline's
/// place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplayStep {
    /// The step's number among the capture's steps (from 1).
    pub number: usize,
    /// The code whose fix was replayed, and the fix in a few words.
    pub site: String,
    pub fix: &'static str,
    /// ` without gaptop's ~2.1µs a launch` where the replay took gaptop's own cost out (the
    /// row "with the fix" is then the program's without gaptop), else empty.
    pub without: String,
    pub picture: StepPicture,
}

pub const MAX_GAPS: usize = 2000;
pub(super) const MIN_WIDTH: Ns = 1_000;

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
    /// The gap list leaves out one-offs (warm-up, code that does not recur) (`o`... see keys).
    pub hide_one_offs: bool,
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
    /// The tree node (or What-to-fix row) whose gaps `n`/`N` walk.
    pub node_filter: Option<NodeFilter>,
    /// The call tree search being typed (`/`), and which of its matches is selected.
    pub search: Option<String>,
    pub(super) search_hit: usize,
    /// The typed search filters the gap list rather than searching the tree (`/` started in
    /// the gap list or the timeline).
    pub search_gaps: bool,
    /// The gap list's text filter (any case): gaps whose cause, op, API or launch stack hold it.
    pub gap_query: Option<String>,
    pub help: bool,
    pub message: String,
    /// Where `e` writes: a file, or a folder for a new `gaptop-<source>-<time>.json.gz` in it
    /// (`-o`, as `gaptop export -o`).
    pub export_to: PathBuf,
    /// The window whose export was found too big for the viewers and not written: `e` again
    /// on the same window writes it.
    pub export_asked: Option<(Ns, Ns)>,
    /// The JSON an export may write before `e` asks first (what ui.perfetto.dev opens).
    pub export_ask_over: u64,
    /// The export being written in the background, if any.
    pub export_job: Option<ExportJob>,
    /// Times the user asked to stop the profiled program (each asks harder).
    pub stop_requests: u32,
    /// The window's analysis (`app::analysing`): its gaps and call tree.
    pub cache: Option<Cache>,
    /// The same analysis's steps, verdicts and what to fix.
    pub diagnosis: Option<Diagnosis>,
    /// The capture's steps, and the data and step rule they were found for.
    pub capture_steps: Option<CaptureSteps>,
    /// An analysis being made on its own thread (a window of many ops), and what for.
    pub(crate) analysis_job: Option<(std::sync::mpsc::Receiver<Analysed>, AnalysisKey)>,
    /// When the last analysis was taken in, and how long it took.
    pub(crate) last_analysis: Option<(Instant, std::time::Duration)>,
    /// What delimits steps (`--step NAME`), else found automatically.
    pub step_by: Option<String>,
    /// The details pane shows what to fix although a gap is selected (`w`).
    pub show_fix: bool,
    /// The what-to-fix row chosen (with the focus on it).
    pub fix_sel: usize,
    /// A step measured and replayed with a row's fix, drawn in the timeline's place (`r`).
    pub replay_step: Option<ReplayStep>,
    /// A second capture compared with this one (`gaptop open A --compare B`), and whether the
    /// details pane shows the comparison (`w` cycles the gap, what to fix and it).
    pub compare: Option<crate::diff::DiffJson>,
    pub show_compare: bool,
    /// The call tree shows CPU samples during each site's gaps (`c`).
    pub cpu_tree: bool,
    /// The rank summary is shown in place of the gap list and the call tree (`R`), in this
    /// order, this row (of the order shown) selected.
    pub ranks_shown: bool,
    pub rank_sort: RankSort,
    pub rank_sel: usize,
    /// What the panes show, for the last known screen size.
    pub view: ViewModel,
    /// The selected gap as the store has it now (None if it left the store).
    pub(super) current: Option<Gap>,
    /// The terminal's size, as last told.
    pub size: (u16, u16),
    /// Something changed since the view model was laid out.
    pub(super) view_stale: bool,
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

pub(super) fn tree_key(g: &Gap) -> GapKey {
    (g.stack, g.api, g.op_name)
}

/// The gaps `n`/`N` walk: those launched from one of `keys`, and where the node lies under a
/// rank of the tree's rank level, from that rank alone (ranks share their stacks).
pub struct NodeFilter {
    pub name: String,
    pub keys: HashSet<GapKey>,
    pub rank: Option<i32>,
}

impl NodeFilter {
    pub(super) fn holds(&self, store: &Store, g: &Gap) -> bool {
        self.keys.contains(&tree_key(g))
            && self.rank.is_none_or(|r| {
                let proc = store.lanes[g.lane].key.proc as usize;
                store.procs.get(proc).is_some_and(|p| p.rank == r)
            })
    }
}

impl App {
    pub fn new(store: impl Into<Arc<Store>>, source: SourceState) -> App {
        let mut store = store.into();
        // Ranks as frames, for the call tree's rank level.
        if let Some(st) = Arc::get_mut(&mut store) {
            st.name_ranks();
        }
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
            // One rank's trace of a run of several: the others' traces show its waits.
            .or_else(|| {
                let ranks = gaptop_core::sources::kineto::OTHER_RANKS;
                store.notes.iter().find(|n| n.contains(ranks)).cloned()
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
            hide_one_offs: false,
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
            export_to: PathBuf::from("."),
            export_asked: None,
            export_ask_over: crate::export::PERFETTO_UI_BYTES,
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
            replay_step: None,
            compare: None,
            show_compare: false,
            cpu_tree: false,
            ranks_shown: false,
            rank_sort: RankSort::default(),
            rank_sel: 0,
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

    /// A window's edge relative to the capture start, to the window's thousandth (a window of
    /// seconds never starts at "1ns").
    pub fn rel_edge(&self, t: Ns) -> String {
        let res = (self.width() / 1000).max(1);
        let d = t - self.store.origin();
        fmt_ns(d / res * res)
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

    /// The selected gap, as the store has it now (None if it left the store).
    pub fn selected_gap(&self) -> Option<Gap> {
        self.current
    }

    /// Short label of a gap's cause, with the reason when it says more than HTA's category.
    pub fn cause_label(g: &Gap) -> &'static str {
        Cause::of(g).label()
    }
}

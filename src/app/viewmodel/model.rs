//! The view model's types: what each pane shows, as text and cells that say what they are
//! (a [`Tone`], a [`Cause`], a kind of cell) and leave the colours to the views. Apart from
//! the code that builds them so that the state can hold a [`ViewModel`] and the views read it
//! without importing that code.

use crate::app::cause::Cause;
use crate::app::lane::RangeRow;
use crate::app::layout::Screen;

/// What a piece of text is, for its colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    Plain,
    Bold,
    Dim,
    /// A launch stack, or a node's callers.
    Stack,
    /// A verdict and its fix.
    Verdict,
    /// Named native frames.
    Native,
    /// What the CPU did.
    Cpu,
    /// A comparison's change for the better (less time), and for the worse.
    Better,
    Worse,
}

/// What kind of op fills a busy timeline cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpTone {
    Kernel,
    Memcpy,
    Memset,
    Comm,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CellKind {
    /// Busy for this many eighths of the cell.
    Busy(u8, OpTone),
    /// Idle, in a gap at or over the threshold.
    Gap(Cause),
    /// Idle, in a gap under the threshold.
    Short,
    Empty,
}

/// One timeline cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cell {
    pub kind: CellKind,
    /// A busy cell that holds one of the window's big gaps: drawn on the gap's colour.
    pub mark: Option<Cause>,
    /// In a gap of the tree-node filter.
    pub highlighted: bool,
    /// Overlaps the selected gap.
    pub selected: bool,
    pub cursor: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaneRow {
    pub label: String,
    pub cells: Vec<Cell>,
    /// Op names drawn over their busy cells where an op is wide enough for its name (zoomed
    /// in, as nsys does): first column and the name, cut to its width.
    pub names: Vec<(u16, String)>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimelineVm {
    pub title: String,
    /// The NVTX ranges lane, first, when the capture has ranges (`app::lane`).
    pub ranges: Option<RangeRow>,
    pub rows: Vec<LaneRow>,
    /// Under the rows when not every lane fits.
    pub more: Option<String>,
    /// Axis labels by column (from the first cell).
    pub ticks: Vec<(u16, String)>,
    pub cursor_col: Option<u16>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct RateVm {
    pub title: String,
    /// Eighths of a cell for each bin.
    pub launches: Vec<u64>,
    pub busy: Vec<u64>,
    /// With steps: for each bin, the step at its middle: eighths of the longest step in the
    /// window its wall time is, whether it is an odd step (to tell neighbours apart), and
    /// whether the cursor is in it. None where no step is.
    pub steps: Option<Vec<Option<StepCell>>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepCell {
    pub eighths: u8,
    pub odd: bool,
    pub current: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct GapRow {
    pub text: String,
    pub cause: Cause,
    pub highlighted: bool,
    pub selected: bool,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct GapListVm {
    pub title: String,
    /// The columns' names.
    pub header: String,
    /// The rows that fit, around the selected one.
    pub rows: Vec<GapRow>,
    /// The index in the list of the first row shown.
    pub first: usize,
}

/// One row of the rank summary.
#[derive(Clone, Debug, PartialEq)]
pub struct RankRowVm {
    pub text: String,
    /// It arrived last at some collective; `worst`: the most late time of all ranks.
    pub late: bool,
    pub worst: bool,
    pub selected: bool,
}

/// The rank summary (`R`), in place of the gap list and the call tree.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RankListVm {
    pub title: String,
    pub header: String,
    /// The rows that fit, around the selected one.
    pub rows: Vec<RankRowVm>,
    /// Why there are none, when there are none.
    pub empty: String,
}

/// One "what to fix" row.
#[derive(Clone, Debug, PartialEq)]
pub struct FixRow {
    /// What the rows are ordered by: the code's idle a step (`3.31ms/step`) where it recurs
    /// in the steps, else its gap time.
    pub head: String,
    /// Its share of the window's gap time: ` 33%`.
    pub share: String,
    /// The code.
    pub site: String,
    /// The verdict, the cause where a pattern names it, what a fix saves a step and how often
    /// it idles: `host_work (input-bound) · saves ~3.31ms/step · in 676/676 steps`.
    pub verdict: String,
    /// The fix.
    pub fix: String,
    /// The chosen row (the first while the rows do not have the focus).
    pub selected: bool,
    pub chosen: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub enum DetailsVm {
    /// The selected gap: its first line (duration, where, cause), then lines in their tones.
    Gap {
        dur: String,
        at: String,
        cause_text: String,
        cause: Cause,
        lines: Vec<(Tone, String)>,
    },
    /// The selected call tree node, while the tree has the focus.
    Node(Vec<(Tone, String)>),
    /// No gap selected: what to fix first (its title says in what order), then a hint.
    Fix {
        title: String,
        rows: Vec<FixRow>,
        hint: String,
    },
    /// This capture compared with another (`--compare`): a title and lines.
    Compare {
        title: String,
        lines: Vec<(Tone, String)>,
    },
    /// Nothing to show yet, and why.
    Waiting(String),
}

impl Default for DetailsVm {
    fn default() -> Self {
        DetailsVm::Waiting(String::new())
    }
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatusVm {
    /// While a tree search or a gap list filter is typed: its query (the line is its prompt).
    pub search: Option<String>,
    /// The query filters the gap list (else it searches the tree).
    pub search_gaps: bool,
    /// The key that started it (`\` filters, `/` searches, as the key map has them).
    pub prompt: String,
    pub mode: String,
    pub middle: String,
    pub lost: String,
    /// Some op was dropped or evicted.
    pub lost_any: bool,
    pub lag: Option<String>,
    pub zoom: String,
    pub message: Option<String>,
}

/// What the panes show.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ViewModel {
    pub screen: Screen,
    pub timeline: TimelineVm,
    pub rate: RateVm,
    pub gaps: GapListVm,
    /// The rank summary, while it is shown.
    pub ranks: Option<RankListVm>,
    pub tree_title: String,
    pub details: DetailsVm,
    pub status: StatusVm,
    /// The key bar: (keys, what they do) for the focused pane, then those of every pane.
    pub key_bar: Vec<(String, &'static str)>,
    /// The selected gap's launch stack (or the selected tree node's path), every frame,
    /// innermost first, for the details at full size (`d`).
    pub stack: Vec<String>,
}

//! The window's analysis as the panes read it: [`Cache`] (its gaps, its call tree and the tree
//! pane's rows, a filter's gaps), and what an analysis is of ([`AnalysisKey`]) and found
//! ([`Analysed`]). Apart from `analysing`, which makes them, so that the state can hold them and
//! the code that reads them does not import the code that makes them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::tree::TreeRow;
use gaptop_core::analysis::comm::CommReport;
use gaptop_core::analysis::gaps::{Config, Gap};
use gaptop_core::analysis::ranks::RankRow;
use gaptop_core::analysis::steps::Steps;
use gaptop_core::analysis::summary::Summary;
use gaptop_core::analysis::tree::CallTree;
use gaptop_core::analysis::Analysis;
use gaptop_core::units::Ns;

/// What an analysis is of: the window, the threshold, the gaps' basis, how steps are found,
/// and the data.
#[derive(Clone, Debug, PartialEq)]
pub struct AnalysisKey {
    pub lo: Ns,
    pub hi: Ns,
    pub min: Ns,
    pub cfg: Config,
    pub step_by: Option<String>,
    pub generation: u64,
}

/// The capture's steps (None: none found), and the data generation and step rule they were
/// found for.
pub type CaptureSteps = ((u64, Option<String>), Option<Steps>);

/// How the call tree is shown: inverted, by function, native frames hidden.
pub type DisplayKey = (bool, bool, bool);

/// What an analysis found.
pub struct Analysed {
    pub key: AnalysisKey,
    /// The analysis of the part of the window analysed (all of it unless it held too many
    /// ops: `Analysis::span`).
    pub analysis: Analysis,
    /// The capture's steps, found for the key's data and step rule.
    pub capture_steps: Option<Steps>,
    pub took: Duration,
}

/// The window's analysis as the panes use it.
pub struct Cache {
    pub key: AnalysisKey,
    pub display: DisplayKey,
    /// The summary of the analysed span (its tree and longest gaps moved out, below).
    pub summary: Summary,
    /// Gaps in the span at or over the threshold, longest first (at most `MAX_GAPS`).
    pub gaps: Vec<Gap>,
    /// How many such gaps there are.
    pub gaps_total: u64,
    /// The call tree as analysed (top-down, every frame), and as shown: frames mapped (by
    /// function, native frames folded) top-down, then the displayed tree (top-down or
    /// inverted).
    pub raw_tree: CallTree,
    pub top: CallTree,
    pub tree: CallTree,
    /// Each node's identifier in the tree widget (by node index) and the way back. Identifiers
    /// come from the frames on the node's path, so an opened or selected row stays on the same
    /// frames when the window or the data changes and the tree is rebuilt with other indices.
    pub tree_ids: Vec<usize>,
    pub tree_nodes: HashMap<usize, usize>,
    /// The tree pane's rows.
    pub rows: Vec<TreeRow>,
    pub built: Instant,
    /// The part of the window the panes describe (all of it unless it held too many ops).
    pub analysed: (Ns, Ns),
    /// Communication stalls across ranks in that part (None with fewer than two ranks).
    pub comm: Option<CommReport>,
    /// The ranks side by side in that part, in rank order (empty with fewer than two): the
    /// rank summary's rows.
    pub ranks: Vec<RankRow>,
    /// With a filter (a tree node's, a what-to-fix row's, typed text): every gap of the
    /// window it holds at or over the threshold (`app::filter`).
    pub filtered: Option<Filtered>,
}

impl Cache {
    /// The top-down tree (its frames as shown), whichever way the tree is shown.
    pub fn top_down(&self) -> &CallTree {
        &self.top
    }

    /// The gap time the tree holds: every gap of the span at or over the threshold.
    pub fn gap_ns(&self) -> Ns {
        self.top.nodes[0].gap_ns
    }
}

/// The window's gaps a filter holds at or over the threshold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filtered {
    /// The longest of them, longest first (at most `MAX_GAPS`; sorted as the list is).
    pub gaps: Vec<Gap>,
    /// How many there are, and their time.
    pub count: u64,
    pub ns: i64,
}

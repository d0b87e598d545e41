//! The rank summary (`R`): one row a rank of the window's analysis (idle, waits at
//! collectives, late time, what made it late), in place of the gap list and the call tree,
//! sorted by late time, waits, idle or rank (`s`). Its rows are the analysis' (`Cache::ranks`);
//! this is their order, the selected row and the keys that move and sort them.

use super::keymap::Action;
use super::state::{App, RankSort};
use gaptop_core::analysis::ranks::RankRow;

impl App {
    /// Shows or hides the rank summary; a capture of one rank has none, and says so.
    pub(super) fn toggle_ranks(&mut self) {
        if !self.ranks_shown && self.store.rank_count() < 2 {
            self.message = "one rank: no rank summary (it needs the ranks of a run)".into();
            return;
        }
        self.ranks_shown = !self.ranks_shown;
        self.rank_sel = 0;
        self.message = if self.ranks_shown {
            format!("ranks by {} (s sorts)", self.rank_sort.label())
        } else {
            "rank summary closed".into()
        };
    }

    /// The window's ranks in the order shown.
    pub fn rank_rows(&self) -> Vec<&RankRow> {
        let mut v: Vec<&RankRow> = self.cache.iter().flat_map(|c| c.ranks.iter()).collect();
        let by = |r: &RankRow| match self.rank_sort {
            RankSort::Late => -r.late_ns,
            RankSort::Waits => -r.wait_ns,
            RankSort::Idle => -r.idle_ns,
            RankSort::Rank => 0,
        };
        // Ties (and the rank order) by rank, then process.
        v.sort_by_key(|r| (by(r), r.rank, r.proc));
        v
    }

    /// What a key does while the rank summary is shown: moving, sorting and closing it.
    /// False for a key it leaves to the rest of the UI.
    pub(super) fn rank_key(&mut self, a: Action) -> bool {
        let n = self.cache.as_ref().map_or(0, |c| c.ranks.len());
        let page = self.view.screen.gaps.height.saturating_sub(3).max(1) as i64;
        let by: i64 = match a {
            Action::Up => -1,
            Action::Down => 1,
            Action::PageUp => -page,
            Action::PageDown => page,
            Action::Top => -(n as i64),
            Action::Bottom => n as i64,
            Action::Sort => {
                self.rank_sort = self.rank_sort.next();
                self.rank_sel = 0;
                self.message = format!("ranks by {}", self.rank_sort.label());
                return true;
            }
            Action::Clear => {
                self.ranks_shown = false;
                self.message = "rank summary closed".into();
                return true;
            }
            _ => return false,
        };
        let last = n.saturating_sub(1) as i64;
        self.rank_sel = (self.rank_sel as i64 + by).clamp(0, last) as usize;
        true
    }
}

//! The rank summary's part of the view model: a row a rank in the order chosen, the rows that
//! fit around the selected one.

use ratatui::layout::Rect;

use super::model::{RankListVm, RankRowVm};
use crate::app::state::App;
use gaptop_core::units::fmt_short;

impl App {
    /// The rank summary for a pane of `area` (inside its frame), while it is shown.
    pub(super) fn rank_list_vm(&self, area: Rect) -> Option<RankListVm> {
        if !self.ranks_shown {
            return None;
        }
        let rows = self.rank_rows();
        let worst = rows.iter().map(|r| r.late_ns).max().unwrap_or(0);
        let fit = (area.height as usize).saturating_sub(1).max(1);
        let sel = self.rank_sel.min(rows.len().saturating_sub(1));
        let first = (sel + 1).saturating_sub(fit);
        let shown = rows
            .iter()
            .enumerate()
            .skip(first)
            .take(fit)
            .map(|(i, r)| RankRowVm {
                text: format!(
                    "{:>5} {:>8} {:>8} {:>8} {:>6}  {}",
                    r.rank,
                    fmt_short(r.idle_ns),
                    fmt_short(r.wait_ns),
                    fmt_short(r.late_ns),
                    format!("{}x", r.late_count),
                    if r.cause.is_empty() { "—" } else { &r.cause }
                ),
                late: r.late_ns > 0,
                worst: worst > 0 && r.late_ns == worst,
                selected: i == sel,
            })
            .collect();
        Some(RankListVm {
            title: format!(
                " Ranks {} · by {} (s sorts) · {} of {} ",
                rows.len(),
                self.rank_sort.label(),
                sel + 1,
                rows.len()
            ),
            header: format!(
                "{:>5} {:>8} {:>8} {:>8} {:>6}  top cause of its lateness",
                "rank", "idle", "waits", "late", "times"
            ),
            rows: shown,
            empty: if self.cache.is_none() {
                "analysing…".into()
            } else {
                "no rank ran GPU work in this window".into()
            },
        })
    }
}

//! The gap list's view model: its title (count, time, filters, order), the column names and
//! the rows that fit around the selected one.

use ratatui::layout::Rect;

use super::model::{GapListVm, GapRow};
use crate::app::cause::Cause;
use crate::app::state::{App, GapSort};
use crate::collect::analysis::gaps::Gap;
use crate::frames::{pretty_frame, short_kernel};
use crate::units::fmt_short;

impl App {
    /// The innermost Python frame of a gap's launch stack (not the profiler's), or the API name.
    fn launch_site(&self, g: &Gap) -> String {
        let frames = self.store.stacks.frames(g.stack);
        let names: Vec<&str> = frames.iter().map(|&f| self.store.names.get(f)).collect();
        if let Some(f) = crate::collect::analysis::patterns::python_site(&names) {
            return f.to_string();
        }
        frames
            .last()
            .map(|f| self.store.names.get(*f).to_string())
            .unwrap_or_else(|| self.store.names.get(g.api).to_string())
    }

    /// The window's gaps, longest first or in time order: the rows that fit.
    pub(super) fn gap_list_vm(&self, inner: Rect) -> GapListVm {
        let listed = self.listed_gaps();
        let gaps = &listed[..];
        // How many gaps the list holds and their time: every gap of the window at or over the
        // threshold (the tree's total), or with a filter every gap of the window it holds.
        let (total, total_ns) = match self.cache.as_ref() {
            Some(c) => match &c.filtered {
                Some(f) => (f.count, f.ns),
                None => (c.gaps_total, c.gap_ns()),
            },
            None => (0, 0),
        };
        let title = format!(
            " Gaps{} {} · {}{}{} · {}by {} ",
            if self.min_gap > 0 {
                format!(" ≥{}", fmt_short(self.min_gap))
            } else {
                String::new()
            },
            total,
            fmt_short(total_ns),
            match &self.node_filter {
                Some((n, _)) => format!(" under {}", crate::frames::cut(n, 32)),
                None => String::new(),
            },
            match &self.gap_query {
                Some(q) => format!(" holding {:?}", crate::frames::cut(q, 16)),
                None => String::new(),
            },
            if (gaps.len() as u64) < total {
                format!("top {} ", gaps.len())
            } else {
                String::new()
            },
            match self.sort {
                GapSort::Duration => "duration",
                GapSort::Time => "time",
            }
        );
        // Where the selected row is in the list.
        let title = match gaps.iter().position(|g| self.is_selected(g)) {
            Some(i) => format!("{title}· {} of {} ", i + 1, gaps.len()),
            None => title,
        };
        // The first row names the columns.
        let h = (inner.height as usize).saturating_sub(1);
        let first = self
            .gap_sel
            .saturating_sub(h / 2)
            .min(gaps.len().saturating_sub(h));
        // One-offs (warm-up, code that does not recur) are marked: not what a fix of the
        // recurring code removes. The title's legend shows while a row is marked.
        let mut one_off = self.one_off_test();
        let marks: Vec<bool> = gaps.iter().skip(first).take(h).map(&mut one_off).collect();
        let hide = self
            .keys
            .keys_for(crate::app::keymap::Action::HideOneOffs)
            .into_iter()
            .next()
            .map(|k| format!(", {k} hides"))
            .unwrap_or_default();
        let title = if self.hide_one_offs {
            format!("{title}· one-offs hidden ")
        } else if marks.contains(&true) {
            format!("{title}· ◦ one-off{hide} ")
        } else {
            title
        };
        let rows = gaps
            .iter()
            .skip(first)
            .take(h)
            .zip(marks)
            .map(|(g, marked)| {
                let lane = &self.store.lanes[g.lane];
                let next = short_kernel(self.store.names.get(lane.op(g.next).name));
                let site = pretty_frame(&self.launch_site(g));
                // A gap the window cuts is marked on the side it goes on: «3ms, 3ms», «3ms».
                let (ws, we) = g.whole(&self.store);
                let dur = format!(
                    "{}{}{}{}",
                    if marked { "◦" } else { "" },
                    if ws < g.start { "«" } else { "" },
                    fmt_short(g.dur()),
                    if we > g.end { "»" } else { "" }
                );
                GapRow {
                    text: format!(
                        "{:>8} {:<11} {:>8} {} {}",
                        dur,
                        App::cause_label(g),
                        self.rel(g.start),
                        crate::frames::cut(&next, 14),
                        site
                    ),
                    cause: Cause::of(g),
                    highlighted: self.highlighted(g),
                    selected: self.is_selected(g),
                }
            })
            .collect();
        let header = format!(
            "{:>8} {:<11} {:>8} {:<14} {}",
            "gap", "cause", "at", "before", "launched from"
        );
        GapListVm {
            title,
            header,
            rows,
            first,
        }
    }
}

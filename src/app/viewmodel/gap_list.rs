//! The gap list's view model: its title (count, time, filters, order), the column names and
//! the rows that fit around the selected one.

use ratatui::layout::Rect;

use super::model::{GapListVm, GapRow};
use crate::app::cause::Cause;
use crate::app::state::{App, GapSort};
use gaptop_core::analysis::gaps::Gap;
use gaptop_core::frames::{pretty_frame, short_kernel};
use gaptop_core::units::fmt_short;

impl App {
    /// The innermost Python frame of a gap's launch stack (not the profiler's), or the API name.
    fn launch_site(&self, g: &Gap) -> String {
        let frames = self.store.stacks.frames(g.stack);
        let names: Vec<&str> = frames.iter().map(|&f| self.store.names.get(f)).collect();
        if let Some(f) = gaptop_core::analysis::patterns::python_site(&names) {
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
                Some(f) => format!(" under {}", gaptop_core::frames::cut(&f.name, 32)),
                None => String::new(),
            },
            match &self.gap_query {
                Some(q) => format!(" holding {:?}", gaptop_core::frames::cut(q, 16)),
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
        // What a row is (its time, where it was launched) outlives why: on a narrow pane the
        // cause column goes first (the row's colour still says it), then the op before.
        let cols = Columns::fit(inner.width as usize);
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
                    text: cols.row(&dur, App::cause_label(g), &self.rel(g.start), &next, &site),
                    cause: Cause::of(g),
                    highlighted: self.highlighted(g),
                    selected: self.is_selected(g),
                }
            })
            .collect();
        let header = cols.row("gap", "cause", "at", "before", "launched from");
        GapListVm {
            title,
            header,
            rows,
            first,
        }
    }
}

/// The gap list's columns that fit a pane `width` wide: the gap and where it was launched
/// always, then its time, the op it ends before and its cause while the launch site keeps
/// [`Columns::SITE`] characters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Columns {
    at: bool,
    before: bool,
    cause: bool,
    /// What is left for the launch site.
    site: usize,
}

impl Columns {
    /// The fewest characters the launch site keeps.
    const SITE: usize = 24;

    pub(crate) fn fit(width: usize) -> Columns {
        let mut c = Columns {
            at: false,
            before: false,
            cause: false,
            site: width.saturating_sub(9),
        };
        for (col, w) in [(0, 9), (1, 15), (2, 12)] {
            if c.site < w + Self::SITE {
                break;
            }
            c.site -= w;
            match col {
                0 => c.at = true,
                1 => c.before = true,
                _ => c.cause = true,
            }
        }
        c
    }

    /// A row (or the header) of these columns; the launch site cut in its middle, keeping
    /// its line number.
    pub(crate) fn row(&self, dur: &str, cause: &str, at: &str, before: &str, site: &str) -> String {
        let mut s = format!("{dur:>8} ");
        if self.cause {
            s += &format!("{cause:<11} ");
        }
        if self.at {
            s += &format!("{at:>8} ");
        }
        if self.before {
            s += &format!("{:<14} ", gaptop_core::frames::cut(before, 14));
        }
        s + &gaptop_core::frames::cut_frame(site, self.site.max(1))
    }
}

#[cfg(test)]
mod tests {
    use super::Columns;

    #[test]
    fn the_cause_column_goes_first_and_the_launch_site_stays() {
        let row = |w| {
            Columns::fit(w).row(
                "15.2µs",
                "host_wait",
                "1.20s",
                "vectorized_elementwise",
                "<module>  llama_decode.py:12",
            )
        };
        // 80x24's pane: the gap and where it was launched, whole.
        assert_eq!(row(38), "  15.2µs <module>  llama_decode.py:12");
        // Narrower: the site is cut in its middle, keeping its line.
        assert_eq!(row(30), "  15.2µs <module>  …code.py:12");
        // Wider: its time, then the op before.
        assert_eq!(row(48), "  15.2µs    1.20s <module>  llama_decode.py:12");
        // Wide: every column.
        assert_eq!(
            row(80),
            "  15.2µs host_wait      1.20s vectorized_el… <module>  llama_decode.py:12"
        );
        assert!(!row(58).contains("host_wait") && row(58).contains("vectorized_el…"));
    }
}

//! Building the view model: `refresh` after each change, laying it out once a frame for the
//! screen's size, the frames the details are about, the key bar, the tree's title and the
//! status line. Each pane's own part is built in a module of its own.

use ratatui::layout::Rect;

use super::model::{StatusVm, ViewModel};
use crate::app::keymap::Action;
use crate::app::layout;
use crate::app::state::{App, Focus, SourceState};
use gaptop_core::frames::pretty_frame;
use gaptop_core::model::records::NameId;
use gaptop_core::units::fmt_short;

impl App {
    /// Recomputes the window's analysis when the window, threshold or data changed (live data
    /// at most four times a second), then the view model.
    ///
    /// The view model is laid out once a frame, before the draw ([`Msg::Resize`](crate::app::msg::Msg::Resize)): here
    /// it is only marked stale.
    pub fn refresh(&mut self, force: bool) {
        self.refresh_analysis(force);
        self.current = self.derive_selected();
        self.view_stale = true;
    }

    /// Lays the view model out for a screen of `size` if anything changed since it was.
    pub(in crate::app) fn lay_out(&mut self, size: (u16, u16)) {
        if self.view_stale || self.size != size {
            self.size = size;
            self.view = self.build_view();
            self.view_stale = false;
        }
    }

    pub(in crate::app) fn build_view(&self) -> ViewModel {
        let (w, h) = self.size;
        let area = Rect::new(0, 0, w, h);
        if layout::too_small(area) {
            return ViewModel::default();
        }
        let steps = self.steps_of_capture();
        let ranges_lane = self.store.procs.iter().any(|p| p.has_ranges()) as u16;
        let mut rows = self.store.lanes.len() as u16 + ranges_lane;
        if self.replay_step.is_some() {
            // A step measured and with a fix: two rows.
            rows = rows.max(2);
        }
        let screen = layout::screen(
            area,
            rows,
            self.focus == Focus::Tree,
            self.is_live() && self.program,
            steps.is_some(),
        );
        ViewModel {
            screen,
            timeline: self.timeline_vm(layout::inner(screen.timeline)),
            rate: self.rate_vm(layout::inner(screen.rate)),
            gaps: self.gap_list_vm(layout::inner(screen.gaps)),
            ranks: self.rank_list_vm(layout::inner(screen.gaps.union(screen.tree))),
            tree_title: self.tree_title(),
            details: self.details_vm(),
            status: self.status_vm(),
            key_bar: self.key_bar_vm(),
            stack: self
                .selected_frames()
                .iter()
                .rev()
                .map(|&f| pretty_frame(self.store.names.get(f)))
                .collect(),
        }
    }

    /// The frames the details are about, outermost first: the selected tree node's path while
    /// the tree has the focus, else the selected gap's launch stack (empty without either).
    pub fn selected_frames(&self) -> Vec<NameId> {
        if self.focus == Focus::Tree {
            if let (Some(n), Some(c)) = (self.selected_node(), self.cache.as_ref()) {
                return c
                    .tree
                    .path_to(n)
                    .iter()
                    .map(|&m| c.tree.nodes[m].frame)
                    .collect();
            }
        }
        match self.current {
            Some(g) if !self.show_fix => self.store.stacks.frames(g.stack),
            _ => Vec::new(),
        }
    }

    /// The key bar's entries, from the key map in use: what the focused pane's keys do, then
    /// help, panes, zoom, export and quit.
    fn key_bar_vm(&self) -> Vec<(String, &'static str)> {
        use crate::app::keymap::Action as A;
        let mut v: Vec<(A, &'static str)> = vec![(A::Help, "Help")];
        match self.focus {
            _ if self.ranks_shown => v.extend([(A::Sort, "Sort ranks"), (A::Ranks, "Close")]),
            Focus::Tree => v.extend([
                (A::Enter, "Its gaps"),
                (A::Invert, "Invert"),
                (A::ByFunction, "By func"),
                (A::Search, "Search"),
            ]),
            Focus::Timeline => v.extend([
                (A::ZoomIn, "Zoom in"),
                (A::ZoomOut, "Out"),
                (A::PanLeft, "Pan"),
                (A::PanRight, "Pan"),
                (A::BiggestGap, "Biggest"),
                (A::NextGap, "Next gap"),
            ]),
            Focus::Fix => v.extend([
                (A::Enter, "Its gaps"),
                (A::Replay, "Replay fix"),
                (A::WhatToFix, "Hide"),
            ]),
            _ if self.store.rank_count() >= 2 => v.extend([
                (A::BiggestGap, "Biggest"),
                (A::NextGap, "Next gap"),
                (A::Ranks, "Ranks"),
                (A::FilterGaps, "Filter"),
                (A::Sort, "Sort"),
            ]),
            _ => v.extend([
                (A::BiggestGap, "Biggest"),
                (A::NextGap, "Next gap"),
                (A::Enter, "Zoom in"),
                (A::FilterGaps, "Filter"),
                (A::Sort, "Sort"),
            ]),
        }
        v.push((A::FocusNext, "Pane"));
        v.push((A::Details, "Details"));
        v.push((A::ZoomAll, "All"));
        if self.source == SourceState::Live {
            v.push((A::Pause, if self.paused { "Resume" } else { "Pause" }));
        }
        v.extend([(A::Export, "Export"), (A::Quit, "Quit")]);
        v.into_iter()
            .filter_map(|(a, what)| {
                let keys = self.keys.keys_for(a);
                // The shortest key for it, a letter first: `b` rather than a longer name.
                let k = keys
                    .iter()
                    .min_by_key(|k| {
                        let c = k.chars().next().unwrap_or(' ');
                        (k.chars().count(), !c.is_ascii_alphabetic())
                    })?
                    .clone();
                Some((k, what))
            })
            .collect()
    }

    /// The tree's title: which way up, its gap time (every gap of the window at or over the
    /// threshold: the gap list's total), and what a row says.
    fn tree_title(&self) -> String {
        format!(
            " Call tree ({}{}) · {} · gap, share, frame · gaps, kernel time ",
            if self.inverted {
                "bottom-up"
            } else {
                "top-down"
            },
            if self.min_gap > 0 {
                format!(", gaps ≥{}", fmt_short(self.min_gap))
            } else {
                String::new()
            },
            fmt_short(self.cache.as_ref().map_or(0, |c| c.gap_ns())),
        )
    }

    /// Why there is nothing to show yet, when no GPU op has arrived at all: the first seconds
    /// of a live run (the program is still importing, or has not touched CUDA), a program that
    /// ended without GPU work, or a source without ops.
    pub(in crate::app) fn nothing_yet(&self) -> Option<String> {
        let s = &self.store;
        if s.op_count() > 0 || s.evicted_ops > 0 {
            return None;
        }
        let who = match s.procs.len() {
            0 => String::new(),
            1 => format!("pid {}", s.procs[0].pid),
            n => format!("{n} processes"),
        };
        Some(match (&self.source, s.procs.is_empty()) {
            (SourceState::Live, true) => "Waiting for the program to start CUDA: its collector \
                connects then (imports and model loading come first)."
                .to_string(),
            (SourceState::Live, false) => {
                format!("{who} connected; no GPU work has arrived yet.")
            }
            (SourceState::Ended(_), true) => "The program ended without starting CUDA, or its \
                collector could not start: its output says why."
                .to_string(),
            (SourceState::Ended(_), false) => {
                format!("The program ended; {who} connected but sent no GPU work.")
            }
            (SourceState::File, _) => "This source holds no GPU ops.".to_string(),
        })
    }

    /// Source, span, ops kept and dropped, mode, window and the last message.
    fn status_vm(&self) -> StatusVm {
        let st = &self.store;
        let span = st.span().map(|(a, b)| b - a).unwrap_or(0);
        let mode = match &self.source {
            SourceState::File => "FILE".to_string(),
            SourceState::Live if self.paused => "PAUSED".into(),
            SourceState::Live if self.follow => "LIVE".into(),
            SourceState::Live => "LIVE, held (z follows)".into(),
            SourceState::Ended(s) => format!("ENDED ({s})"),
        };
        // How far behind the GPU the live view is, as the collectors last measured it.
        let lag = st
            .procs
            .iter()
            .filter(|p| !p.ended)
            .map(|p| p.stats.lag_ns)
            .max();
        let lag = match (&self.source, lag.filter(|&l| l > 0)) {
            (SourceState::Live, Some(lag)) => Some(format!(
                " │ lag {}",
                fmt_short(lag.min(i64::MAX as u64) as i64)
            )),
            _ => None,
        };
        StatusVm {
            search: self.search.clone(),
            search_gaps: self.search_gaps,
            prompt: {
                let a = if self.search_gaps {
                    Action::FilterGaps
                } else {
                    Action::Search
                };
                // The shortest of its keys.
                let keys = self.keys.keys_for(a);
                keys.into_iter()
                    .min_by_key(|k| k.chars().count())
                    .unwrap_or_default()
            },
            mode: format!(" {} ", mode),
            middle: format!(
                " {} │ {} │ {} ops │ ",
                gaptop_core::frames::cut(&st.source, 20),
                fmt_short(span),
                st.capture_ops()
            ),
            lost: if st.evicted_ops > 0 {
                format!("{} dropped {} evicted", st.dropped, st.evicted_ops)
            } else {
                format!("{} dropped", st.dropped)
            },
            lost_any: st.dropped + st.evicted_ops > 0,
            lag,
            zoom: format!(" │ zoom {} │ ", fmt_short(self.width())),
            message: (!self.message.is_empty()).then(|| self.message.clone()),
        }
    }
}

//! The one `update` that applies a [`Msg`]: the source's data into the store, the mouse by
//! where the last draw put the panes, the tick (a background export's progress, following new
//! data), then a refresh. Keys go on to `act`; what reaches outside the model comes back as
//! [`Effect`]s.

use std::sync::Arc;

use super::keymap::Action;
use super::layout;
use super::msg::{Effect, MouseKind, Msg};
use super::state::{App, Focus, SourceState};
use gaptop_core::sources::live::LiveEvent;

impl App {
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
        } else if self.message.starts_with(&j.doing()) {
            // (A message that came since stays.) Live, say while new data waits for the copy.
            let copying = Arc::strong_count(&self.store) > 1 && self.is_live();
            self.message = if copying {
                format!("{}: copying the window (new data waits)…", j.doing())
            } else {
                format!("{}…", j.doing())
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

    /// Applies one message. This is the only place state changes; what reaches outside the
    /// model comes back as effects.
    pub fn update(&mut self, msg: impl Into<Msg>) -> Vec<Effect> {
        let mut fx = Vec::new();
        // A replayed step is drawn in the timeline's place until the user moves the window.
        let window = (self.lo, self.hi);
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
                    self.message = format!("{}…", j.doing());
                    self.export_job = Some(j);
                }
                Err(e) => self.message = format!("export failed: {e:#}"),
            },
            Msg::Said(s) => self.message = s,
        }
        if (self.lo, self.hi) != window && !self.follow {
            self.replay_step = None;
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
                    let procs = store.procs.len();
                    for f in frames {
                        self.ingest.apply(store, conn, f);
                    }
                    if store.procs.len() != procs {
                        store.name_ranks();
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
        // The rank summary covers the gap list and the tree: a click there picks nothing.
        let covered = s.gaps.contains(at) || s.tree.contains(at);
        if self.ranks_shown && covered && matches!(kind, MouseKind::Click) {
            return;
        }
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
}

//! What each key does: `act` applies one [`Action`] to the state (the help and the full-size
//! details first take the keys they use), asking the terminal loop for what reaches outside
//! the model (an export, a signal to the program, the clipboard, the editor) as [`Effect`]s.
//! A module of its own: the key map says which key is which action, this says what it does.

use std::sync::Arc;

use super::keymap::Action;
use super::msg::Effect;
use super::state::{App, Focus, SourceState};
use crate::export::ExportRequest;
use gaptop_core::analysis::gaps::Basis;
use gaptop_core::units::fmt_ns;

impl App {
    /// Applies one action.
    pub(super) fn act(&mut self, a: Action, fx: &mut Vec<Effect>) {
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
        // The rank summary shown, it takes the keys that move and sort it.
        if self.ranks_shown && self.rank_key(a) {
            return;
        }
        // A message describes what the last key did: one that changes the view (zoom, pan,
        // step, pane, row) leaves none behind it unless it says something of its own.
        if matches!(
            a,
            Action::ZoomIn
                | Action::ZoomOut
                | Action::PanLeft
                | Action::PanRight
                | Action::Left
                | Action::Right
                | Action::Up
                | Action::Down
                | Action::PageUp
                | Action::PageDown
                | Action::Top
                | Action::Bottom
                | Action::FocusNext
                | Action::FocusPrev
                | Action::Invert
                | Action::Sort
        ) {
            self.message.clear();
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
                if self.replay_step.take().is_some() {
                    self.message = "back to the timeline".into();
                    return;
                }
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
            Action::BiggestGap => self.select_biggest_recurring(),
            Action::BiggestOfAll => self.select_biggest(),
            Action::HideOneOffs => {
                self.hide_one_offs = !self.hide_one_offs;
                self.message = if self.hide_one_offs {
                    "gap list: one-offs (◦: warm-up, code that does not recur) hidden".into()
                } else {
                    "gap list: one-offs shown, marked ◦".into()
                };
                self.sync_gap_sel();
            }
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
                    self.export(fx);
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
                    let text = gaptop_core::frames::traceback(
                        frames.iter().map(|&f| self.store.names.get(f)),
                    );
                    self.message = format!(
                        "copied {} to the clipboard (through the terminal: tmux needs \
                         set-clipboard on)",
                        gaptop_core::units::count(frames.len() as u64, "frame")
                    );
                    fx.push(Effect::Copy(text));
                }
            }
            Action::Edit => {
                // The innermost frame of the user's code: not framework plumbing, and a file.
                let target = self.selected_frames().iter().rev().find_map(|&f| {
                    if gaptop_core::frames::is_plumbing(self.store.names.get(f)) {
                        return None;
                    }
                    let p = self.store.names.frame(f).py_source()?;
                    Some((p.file, p.line()?))
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
            Action::Replay => self.toggle_replay(),
            Action::Ranks => self.toggle_ranks(),
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
    /// `e`: the window's export, started; or, where it would be more JSON than the viewers
    /// open (ui.perfetto.dev, chrome://tracing), not yet: its size, what opens it and how to
    /// export less are said, and `e` again on the same window writes it.
    fn export(&mut self, fx: &mut Vec<Effect>) {
        let window = (self.lo, self.hi);
        let est = crate::export::estimate(&self.store, self.lo, self.hi, &self.cfg);
        if est.json_bytes > self.export_ask_over && self.export_asked != Some(window) {
            self.export_asked = Some(window);
            let key = self
                .keys
                .keys_for(Action::Export)
                .into_iter()
                .next()
                .unwrap_or_else(|| "e".into());
            self.message = format!(
                "not written: this window exports {}, {}; {key} again writes it, or zoom in to \
                 export a shorter window",
                est,
                crate::export::opens_with(est.json_bytes)
            );
            return;
        }
        self.export_asked = None;
        fx.push(Effect::Export(ExportRequest {
            store: Arc::clone(&self.store),
            lo: self.lo,
            hi: self.hi,
            cfg: self.cfg,
            to: self.export_to.clone(),
            large: crate::export::large(&est),
        }));
    }
}

//! The view model: what every pane shows, computed in [`App::refresh`] from the store and the
//! window's analysis for the screen's layout. The views only lay it out and colour it: each
//! piece of text here says what it is (a [`Tone`], a [`Cause`], a kind of cell), and the views
//! choose the colours.

use std::collections::HashMap;

use ratatui::layout::Rect;

use super::layout::{self, Screen, LABEL_W};
use super::tree::tree_share;
use super::{App, Cache, Cause, Focus, GapSort, SourceState};
use crate::collect::analysis::advice;
use crate::collect::analysis::gaps::{self, Gap};
use crate::collect::analysis::oncpu;
use crate::collect::model::records::{NameId, OpKind, FLAG_COMM};
use crate::frames::{is_native_frame, is_plumbing, is_unnamed_native, pretty_frame, short_kernel};
use crate::units::{fmt_ns, fmt_short, Ns};

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
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct TimelineVm {
    pub title: String,
    /// The NVTX ranges lane, first, when the capture has ranges (`app::lane`).
    pub ranges: Option<super::lane::RangeRow>,
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

pub use super::fix::FixRow;

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
    pub tree_title: String,
    pub details: DetailsVm,
    pub status: StatusVm,
    /// The key bar: (keys, what they do) for the focused pane, then those of every pane.
    pub key_bar: Vec<(String, &'static str)>,
    /// The selected gap's launch stack (or the selected tree node's path), every frame,
    /// innermost first, for the details at full size (`d`).
    pub stack: Vec<String>,
}

/// The details pane's comparison with another capture: what a step takes in each, then the
/// launching functions whose idle a step changed most.
fn compare_details(d: &crate::diff::DiffJson) -> DetailsVm {
    let tone = |delta: Ns| match delta {
        0 => Tone::Plain,
        n if n < 0 => Tone::Better,
        _ => Tone::Worse,
    };
    let mut lines = vec![(Tone::Bold, crate::diff::headline(d))];
    if let Some(note) = &d.note {
        lines.push((Tone::Dim, note.clone()));
    }
    lines.push((
        Tone::Dim,
        format!(
            "idle a {} by the code that launched, this capture → the other, biggest change first:",
            d.per
        ),
    ));
    lines.extend(
        d.sites
            .iter()
            .take(12)
            .map(|s| (tone(s.delta_per_step_ns), crate::diff::site_line(s))),
    );
    lines.push((
        Tone::Dim,
        "gaptop diff prints all of it, with the GPU ops whose time changed".into(),
    ));
    DetailsVm::Compare {
        title: format!(
            " Compared with {}: a {} at a time (w: what to fix, the gap) ",
            crate::frames::cut(&d.b.source, 60),
            d.per
        ),
        lines,
    }
}

/// Eighths of a one-row sparkline cell for a fraction of its full height: the nearest eighth,
/// but never none for a value above zero (a GPU 10% busy must not look idle).
pub fn spark_ticks(frac: f64) -> u64 {
    if frac.is_nan() || frac <= 0.0 {
        return 0;
    }
    ((frac * 8.0).round() as u64).clamp(1, 8)
}

impl App {
    /// Recomputes the window's analysis when the window, threshold or data changed (live data
    /// at most four times a second), then the view model.
    ///
    /// The view model is laid out once a frame, before the draw ([`super::Msg::Resize`]): here
    /// it is only marked stale.
    pub fn refresh(&mut self, force: bool) {
        self.refresh_analysis(force);
        self.current = self.derive_selected();
        self.view_stale = true;
    }

    /// Lays the view model out for a screen of `size` if anything changed since it was.
    pub(super) fn lay_out(&mut self, size: (u16, u16)) {
        if self.view_stale || self.size != size {
            self.size = size;
            self.view = self.build_view();
            self.view_stale = false;
        }
    }

    pub(super) fn build_view(&self) -> ViewModel {
        let (w, h) = self.size;
        let area = Rect::new(0, 0, w, h);
        if layout::too_small(area) {
            return ViewModel::default();
        }
        let steps = self.steps_of_capture();
        let ranges_lane = self.store.procs.iter().any(|p| p.has_ranges()) as u16;
        let screen = layout::screen(
            area,
            self.store.lanes.len() as u16 + ranges_lane,
            self.focus == Focus::Tree,
            self.is_live() && self.program,
            steps.is_some(),
        );
        ViewModel {
            screen,
            timeline: self.timeline_vm(layout::inner(screen.timeline)),
            rate: self.rate_vm(layout::inner(screen.rate)),
            gaps: self.gap_list_vm(layout::inner(screen.gaps)),
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
        use super::Action as A;
        let mut v: Vec<(A, &'static str)> = vec![(A::Help, "Help")];
        match self.focus {
            Focus::Tree => v.extend([
                (A::Enter, "Its gaps"),
                (A::Invert, "Invert"),
                (A::ByFunction, "By func"),
                (A::Search, "Search"),
            ]),
            Focus::Fix => v.extend([(A::Enter, "Its gaps"), (A::WhatToFix, "Hide")]),
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
        if self.source == super::SourceState::Live {
            v.push((A::Pause, "Pause"));
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

    /// One row per lane: busy blocks, gaps by cause, the cursor and the selected gap.
    fn timeline_vm(&self, inner: Rect) -> TimelineVm {
        let origin = self.store.origin();
        // A window narrow beside its distance from the capture start (a deep zoom) reads its
        // ticks from the window's start, as nsys and Perfetto do, and its start precisely.
        let relative = self.width().saturating_mul(50) < self.lo - origin;
        let cursor = format!("▲ cursor {}", self.rel(self.cursor));
        let mut vm = TimelineVm {
            title: if relative {
                format!(
                    " GPU timeline  {} + {}  (ticks from the window start)  {cursor} {}",
                    crate::units::fmt_at(self.lo - origin, self.width() / 100),
                    fmt_ns(self.width()),
                    self.panes_note()
                        .map(|n| format!("· {n} "))
                        .unwrap_or_default()
                )
            } else {
                format!(
                    " GPU timeline  {} .. {}  (window {})  {cursor} {}",
                    self.rel(self.lo),
                    self.rel(self.hi),
                    fmt_ns(self.width()),
                    self.panes_note()
                        .map(|n| format!("· {n} "))
                        .unwrap_or_default()
                )
            },
            ..Default::default()
        };
        if inner.height < 2 || inner.width < 20 {
            return vm;
        }
        let cols = inner.width - LABEL_W;
        let (lo, hi) = (self.lo, self.hi);
        let w = (hi - lo).max(1) as f64;
        let t_at = |c: u16| lo + (w * c as f64 / cols as f64) as i64;
        let order = self.store.lane_order();
        let mut lane_rows = (inner.height - 1) as usize;
        // The ranges lane takes the first row when a GPU lane is left beside it.
        if lane_rows >= 2 {
            let selected = self.current.as_ref().map(|g| {
                let lane = &self.store.lanes[g.lane];
                let p = &self.store.procs[lane.key.proc as usize];
                let tid = lane
                    .get(g.next)
                    .and_then(|o| p.api_by_corr(o.corr))
                    .map(|a| a.tid);
                (lane.key.proc, tid)
            });
            vm.ranges = super::lane::ranges_row(&self.store, selected, self.lo, self.hi, cols);
            lane_rows -= vm.ranges.is_some() as usize;
        }
        // When not every lane fits, the last row says so, unless that would leave none.
        let shown = if order.len() > lane_rows && lane_rows >= 2 {
            lane_rows - 1
        } else {
            order.len().min(lane_rows)
        };
        let sel = self.current;
        // When not every lane fits, the rows start where the selected gap's lane shows.
        let first = sel
            .as_ref()
            .and_then(|g| order.iter().position(|&l| l == g.lane))
            .map_or(0, |i| (i + 1).saturating_sub(shown));
        let cursor_col = ((self.cursor - lo) as f64 / w * cols as f64) as i64;
        // The window's longest gaps (the gap list) marked by column, so that a big gap inside a
        // cell full of short kernels still shows: the cell keeps its busy block on the gap's
        // colour.
        let mut marks: HashMap<(usize, u16), Cause> = Default::default();
        let col_of = |t: i64| {
            (((t - lo) as f64 / w * cols as f64).floor() as i64).clamp(0, cols as i64 - 1) as u16
        };
        // Big means at least a twentieth of a cell (smaller ones are part of the busy texture).
        let big = ((w / cols as f64) / 20.0) as i64;
        for g in self.gaps().iter().take(500) {
            if g.end <= lo || g.start >= hi || g.dur() < big.max(self.min_gap) {
                continue;
            }
            for c in col_of(g.start)..=col_of(g.end - 1) {
                marks.entry((g.lane, c)).or_insert_with(|| Cause::of(g));
            }
        }
        for &lane in order.iter().skip(first).take(shown) {
            let l = &self.store.lanes[lane];
            let mut cells = Vec::with_capacity(cols as usize);
            for c in 0..cols {
                let (t0, t1) = (t_at(c), t_at(c + 1).max(t_at(c) + 1));
                let mid = t0 + (t1 - t0) / 2;
                let busy = l.busy_in(t0, t1) as f64 / (t1 - t0) as f64;
                let mut cell = Cell {
                    kind: CellKind::Empty,
                    mark: None,
                    highlighted: false,
                    selected: sel
                        .as_ref()
                        .is_some_and(|s| s.lane == lane && s.end > t0 && s.start < t1),
                    cursor: c as i64 == cursor_col,
                };
                if busy > 0.0 {
                    let eighths = ((busy * 8.0).ceil() as u8).clamp(1, 8);
                    let i = l.lower_bound(mid + 1).saturating_sub(1);
                    let op = match l.get(i) {
                        Some(o) if o.flags & FLAG_COMM != 0 => OpTone::Comm,
                        Some(o) if o.kind == OpKind::Memcpy => OpTone::Memcpy,
                        Some(o) if o.kind == OpKind::Memset => OpTone::Memset,
                        _ => OpTone::Kernel,
                    };
                    cell.kind = CellKind::Busy(eighths, op);
                    cell.mark = marks.get(&(lane, c)).copied();
                } else {
                    let next = l.lower_bound(mid);
                    let gap = (next > 0 && next < l.len())
                        .then(|| gaps::classify(&self.store, lane, next - 1, next, &self.cfg))
                        .flatten();
                    match gap {
                        Some(g) if g.dur() >= self.min_gap => {
                            cell.kind = CellKind::Gap(Cause::of(&g));
                            cell.highlighted = self.highlighted(&g);
                        }
                        Some(_) => cell.kind = CellKind::Short,
                        None => {}
                    }
                }
                cells.push(cell);
            }
            vm.rows.push(LaneRow {
                label: crate::frames::cut(&self.store.lane_label(lane), (LABEL_W - 1) as usize),
                cells,
            });
        }
        if order.len() > shown {
            vm.more = Some(if first == 0 {
                format!("+{} more lanes", order.len() - shown)
            } else {
                format!(
                    "lanes {}-{} of {} (the selected gap's)",
                    first + 1,
                    first + shown,
                    order.len()
                )
            });
        }
        // Axis with ticks every ~16 columns, relative to the capture start (or, deep in, to
        // the window's start). A tick the cursor's mark would cover is left out.
        vm.cursor_col = (0..cols as i64)
            .contains(&cursor_col)
            .then_some(cursor_col as u16);
        let mut c = 0u16;
        while c + 8 < cols {
            let label = if relative {
                format!("|+{}", fmt_short(t_at(c) - lo))
            } else {
                format!("|{}", fmt_short(t_at(c) - origin))
            };
            let n = label.chars().count() as u16;
            if vm.cursor_col.is_none_or(|k| k < c || k >= c + n) {
                vm.ticks.push((c, label));
            }
            c += 16.max(n + 2);
        }
        vm
    }

    /// Launches per second and busy fraction over the window.
    fn rate_vm(&self, inner: Rect) -> RateVm {
        let (ops, busy, idle) = self
            .cache
            .as_ref()
            .map(|c| {
                let s = &c.summary;
                let secs = (s.hi - s.lo).max(1) as f64 / 1e9;
                let devs = self.store.devices().len().max(1) as f64;
                let span = (s.hi - s.lo).max(1) as f64 * devs;
                (
                    s.gpu_ops as f64 / secs,
                    100.0 * s.busy_ns as f64 / span,
                    s.device_idle_ns,
                )
            })
            .unwrap_or((0.0, 0.0, 0));
        // With several ranks, time inside NCCL spent waiting for a late rank is a stall, not
        // work.
        let comm = self
            .cache
            .as_ref()
            .and_then(|c| c.comm.as_ref())
            .map(|c| {
                let wait: i64 = c.per_rank.iter().map(|r| r.wait_ns).sum();
                let late = c.per_rank.iter().max_by_key(|r| r.late_ns);
                match late {
                    Some(l) if l.late_ns > 0 => format!(
                        " · NCCL wait {} (rank {} late {}x)",
                        fmt_short(wait),
                        l.rank,
                        l.late_count
                    ),
                    _ => format!(" · NCCL wait {}", fmt_short(wait)),
                }
            })
            .unwrap_or_default();
        // The window's steps (those whole in it) in the title; the strip shows the capture's
        // steps wherever the window holds them, a step the window cuts too.
        let steps_title = self
            .diagnosis
            .as_ref()
            .and_then(|d| d.steps.as_ref())
            .map(|st| {
                format!(
                    " · {} steps, median {}",
                    st.steps.len(),
                    fmt_short(st.median_ns())
                )
            })
            .unwrap_or_default();
        let steps = self.steps_of_capture();
        let mut vm = RateVm {
            // Idle: the time no stream of a device ran anything in the window (summed over the
            // devices), which the device gaps of the gap list and the tree add up to (each
            // stream's own gaps, on the stream basis, add up to more: it says "device").
            title: format!(
                " launches/s {:.0} · GPU busy {:.1}%, {}idle {}{comm}{steps_title} ",
                ops,
                busy,
                match self.cfg.basis {
                    gaps::Basis::Device => "",
                    gaps::Basis::Stream => "device ",
                },
                fmt_short(idle)
            ),
            ..Default::default()
        };
        if inner.width < 10 || inner.height < 2 {
            return vm;
        }
        let n = (inner.width - LABEL_W) as usize;
        let bins = gaps::rate_bins(&self.store, self.lo, self.hi, n);
        let most = bins.iter().map(|b| b.ops).max().unwrap_or(0).max(1) as f64;
        vm.launches = bins
            .iter()
            .map(|b| spark_ticks(b.ops as f64 / most))
            .collect();
        vm.busy = bins.iter().map(|b| spark_ticks(b.busy)).collect();
        if let Some(st) = steps {
            let width = (self.hi - self.lo).max(1) as f64 / n.max(1) as f64;
            let at: Vec<Option<usize>> = (0..n)
                .map(|i| st.step_of(self.lo + ((i as f64 + 0.5) * width) as Ns))
                .collect();
            // Heights against the longest steady step in view: a warm-up step many times as
            // long fills its cells rather than flattening the rest.
            let steady = st.steady();
            let longest = at
                .iter()
                .flatten()
                .filter(|i| steady.contains(i))
                .map(|&i| st.steps[i].end - st.steps[i].start)
                .max()
                .unwrap_or(1)
                .max(1);
            let cur = st.step_of(self.cursor);
            vm.steps = Some(
                at.into_iter()
                    .map(|s| {
                        s.map(|i| {
                            let wall = st.steps[i].end - st.steps[i].start;
                            StepCell {
                                eighths: spark_ticks(wall as f64 / longest as f64).min(8) as u8,
                                odd: i % 2 == 1,
                                current: Some(i) == cur,
                            }
                        })
                    })
                    .collect(),
            );
        }
        vm
    }

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
    fn gap_list_vm(&self, inner: Rect) -> GapListVm {
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
        let rows = gaps
            .iter()
            .skip(first)
            .take(h)
            .map(|g| {
                let lane = &self.store.lanes[g.lane];
                let next = short_kernel(self.store.names.get(lane.op(g.next).name));
                let site = pretty_frame(&self.launch_site(g));
                // A gap the window cuts is marked on the side it goes on: «3ms, 3ms», «3ms».
                let (ws, we) = g.whole(&self.store);
                let dur = format!(
                    "{}{}{}",
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

    /// The details pane: the selected tree node while the tree has the focus, else the
    /// selected gap, else what to fix first.
    fn details_vm(&self) -> DetailsVm {
        if self.focus == Focus::Tree {
            if let (Some(n), Some(c)) = (self.selected_node(), self.cache.as_ref()) {
                return DetailsVm::Node(self.node_details(c, n));
            }
        }
        match (self.current, &self.compare) {
            (Some(g), _) if !self.show_fix && !self.show_compare => self.gap_details(&g),
            (_, Some(d)) if self.show_compare => compare_details(d),
            _ => self.what_to_fix(),
        }
    }

    /// The selected gap: times, cause, launch, neighbours and stacks.
    fn gap_details(&self, g: &Gap) -> DetailsVm {
        let lane = &self.store.lanes[g.lane];
        let prev = &self.store.lanes[g.prev_lane].op(g.prev);
        let next = &lane.op(g.next);
        let mut lines = Vec::new();
        let api = if g.api != 0 {
            format!(
                "launched by {}, latency {} (call start → op start)",
                self.store.names.get(g.api),
                fmt_ns(g.launch_latency)
            )
        } else {
            "launching call not in this source".into()
        };
        lines.push((Tone::Plain, api));
        let frames = self.store.frame_strings(g.stack);
        // Python (and API) frames on one line, native ones (`--native`) on the next; native
        // frames that could not be named say nothing and are left out.
        let (native, rest): (Vec<&String>, Vec<&String>) =
            frames.iter().partition(|f| is_native_frame(f));
        let launch: Vec<String> = rest
            .iter()
            .rev()
            .filter(|f| !is_plumbing(f))
            .map(|f| pretty_frame(f))
            .collect();
        let stack = if launch.is_empty() {
            // A launch from a thread without Python frames (a C++ thread: DDP's reducer, a
            // runtime's own thread): what is known is the thread and the call.
            let proc = &self.store.procs[lane.key.proc as usize];
            match proc.api_by_corr(next.corr) {
                Some(a) => format!(
                    "launch stack: none (thread {} called {}, no Python frames on it)",
                    a.tid,
                    self.store.names.get(a.name)
                ),
                None => "launch stack: not in this source".into(),
            }
        } else {
            format!("launch stack: {}", launch.join(" ‹ "))
        };
        lines.push((Tone::Stack, stack));
        // What the gaps charged to this code have in common, and the usual fix: from the whole
        // capture's diagnosis, so that zooming does not change it.
        if let Some(text) = self.verdict_line(g) {
            lines.push((Tone::Verdict, text));
        }
        let named: Vec<&str> = native
            .iter()
            .rev()
            .filter(|f| !is_unnamed_native(f))
            .map(|f| f.as_str())
            .collect();
        if !named.is_empty() {
            lines.push((Tone::Native, format!("native: {}", named.join(" ‹ "))));
        }
        // Shown after the stack and the verdict: on a short pane, those matter more.
        lines.push((
            Tone::Plain,
            format!(
                "before: {} ({})  after: {} ({})",
                short_kernel(self.store.names.get(prev.name)),
                fmt_short(prev.dur()),
                short_kernel(self.store.names.get(next.name)),
                fmt_short(next.dur())
            ),
        ));
        let cpu = self.store.frame_strings(g.cpu_stack);
        let proc = &self.store.procs[lane.key.proc as usize];
        let launch = proc.api_by_corr(next.corr);
        let sampled = self.store.cpu_sample_count() > 0;
        let cpu_text = if let Some(d) = oncpu::during(&self.store, g) {
            // The deepest named frame most of the gap's samples hold, and its callers.
            let shared: Vec<(&str, f64)> = d
                .shared
                .iter()
                .map(|&(f, share)| (self.store.names.get(f), share))
                .filter(|(f, _)| !is_plumbing(f) && !is_unnamed_native(f))
                .collect();
            match crate::collect::analysis::oncpu::headline(&shared) {
                Some(line) => format!(
                    "CPU during gap: {line} ({} samples), on CPU {:.0}% of the gap",
                    d.samples,
                    100.0 * d.on_cpu
                ),
                None => format!(
                    "CPU during gap: {} samples with no frame in half of them, on CPU {:.0}% \
                     of the gap",
                    d.samples,
                    100.0 * d.on_cpu
                ),
            }
        } else if sampled && cpu.is_empty() {
            "CPU during gap: no samples: the launching thread was off the CPU (waiting or \
             asleep)"
                .into()
        } else if cpu.is_empty() {
            // Without CPU spans (gaptop's recordings), the launching thread's own CUDA calls
            // still say how long it worked outside them before this launch.
            match launch.map(|a| (a, proc.call_before(next.corr, 4096))) {
                Some((a, Some(p))) => format!(
                    "CPU during gap: {} outside CUDA on the launching thread, after its {} ({})",
                    fmt_short(a.start - p.end),
                    self.store.names.get(p.name),
                    fmt_short(p.end - p.start)
                ),
                Some((_, None)) => {
                    "CPU during gap: no earlier CUDA call of the launching thread here".into()
                }
                None => "CPU during gap: not known from this source".to_string(),
            }
        } else {
            let v: Vec<String> = cpu.iter().rev().take(3).map(|f| pretty_frame(f)).collect();
            format!("CPU during gap: {}", v.join(" ‹ "))
        };
        lines.push((Tone::Cpu, cpu_text));
        DetailsVm::Gap {
            dur: format!("gap {} ", self.gap_whole_text(g)),
            at: format!(
                "at {} on {}  cause ",
                self.rel(g.whole(&self.store).0),
                self.store.lane_label(g.lane)
            ),
            cause_text: format!("{} ({})", g.category.as_str(), g.reason.as_str()),
            cause: Cause::of(g),
            lines,
        }
    }

    /// The selected call tree node: its frame in full (the row is cut on a narrow pane), what
    /// is charged to it, and its path to the root.
    fn node_details(&self, c: &Cache, n: usize) -> Vec<(Tone, String)> {
        let t = &c.tree;
        let node = &t.nodes[n];
        let frame = self.store.names.get(node.frame);
        let share = tree_share(t, n);
        let mut lines = vec![
            (Tone::Bold, pretty_frame(frame)),
            (
                Tone::Plain,
                format!(
                    "{} of gap time ({share:.1}%) in {}, {} of kernel time",
                    fmt_short(node.gap_ns),
                    crate::units::count(node.gaps, "gap"),
                    fmt_short(node.kernel_ns)
                ),
            ),
        ];
        if pretty_frame(frame) != frame {
            // The source location as the trace gives it, to open in an editor.
            lines.push((Tone::Dim, format!("at {frame}")));
        }
        let mut path: Vec<String> = t
            .path_to(node.parent)
            .into_iter()
            .rev()
            .map(|p| self.store.names.get(t.nodes[p].frame))
            .filter(|name| !is_plumbing(name))
            .map(pretty_frame)
            .collect();
        // Top-down, the node's ancestors are its callers, nearest first; bottom-up they are
        // what it calls, down to the kernel: written the other way round, so that ‹ always
        // reads "called by".
        let text = if path.is_empty() {
            "at the root of the tree".to_string()
        } else if self.inverted {
            path.reverse();
            format!("leads to: {} ‹ (this)", path.join(" ‹ "))
        } else {
            format!("called from: {}", path.join(" ‹ "))
        };
        lines.push((Tone::Stack, text));
        // A function that launches: what its gaps have in common, over all its call paths.
        let advice = self
            .diagnosis
            .as_ref()
            .map(|d| &d.advice[..])
            .unwrap_or(&[]);
        // (Its verdict and fix, without the function's own counts: those are over every call
        // path of the function, and the node has one count, the one above.)
        if let Some(a) = advice::frame_key(frame).and_then(|k| advice.iter().find(|a| a.key == k)) {
            let cause = a
                .cause_name
                .as_ref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default();
            lines.push((
                Tone::Verdict,
                format!(
                    "its function, every call path: {}{cause}: {}",
                    a.verdict.as_str(),
                    a.fix
                ),
            ));
        }
        lines.push((
            Tone::Dim,
            "Enter: walk this node's gaps with n/N · ←/→ collapse/expand · i inverts the tree"
                .into(),
        ));
        lines
    }

    /// Why there is nothing to show yet, when no GPU op has arrived at all: the first seconds
    /// of a live run (the program is still importing, or has not touched CUDA), a program that
    /// ended without GPU work, or a source without ops.
    pub(super) fn nothing_yet(&self) -> Option<String> {
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
                    super::Action::FilterGaps
                } else {
                    super::Action::Search
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
                crate::frames::cut(&st.source, 20),
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

#[cfg(test)]
mod tests {
    use super::spark_ticks;

    #[test]
    fn sparkline_cells_show_any_activity() {
        assert_eq!(spark_ticks(0.0), 0);
        assert_eq!(spark_ticks(f64::NAN), 0);
        assert_eq!(spark_ticks(0.001), 1, "a little is not nothing");
        assert_eq!(spark_ticks(0.101), 1);
        assert_eq!(spark_ticks(0.5), 4);
        assert_eq!(spark_ticks(0.94), 8);
        assert_eq!(spark_ticks(1.7), 8);
    }
}

//! The timeline pane's view model: a row of cells per lane (busy by op kind, idle by the
//! cause of its gap, the window's big gaps marked), the NVTX ranges lane, and the axis.

use std::collections::HashMap;

use ratatui::layout::Rect;

use super::model::{Cell, CellKind, LaneRow, OpTone, TimelineVm};
use crate::app::cause::Cause;
use crate::app::layout::LABEL_W;
use crate::app::state::App;
use gaptop_core::analysis::gaps;
use gaptop_core::model::records::{OpKind, FLAG_COMM};
use gaptop_core::units::{fmt_ns, fmt_short};

/// The fewest columns an op needs for its name to be drawn on it.
const NAME_MIN_COLS: u16 = 6;
/// The fewest columns a name is drawn cut in.
const NAME_CUT_COLS: usize = 12;

impl App {
    /// The names of a lane's ops in the window that are wide enough for them, only when the
    /// window holds few enough ops that some can be (zoomed in).
    fn op_names(&self, lane: usize, cols: u16, col_of: &dyn Fn(i64) -> u16) -> Vec<(u16, String)> {
        let l = &self.store.lanes[lane];
        let (a, b) = (
            l.lower_bound(self.lo).saturating_sub(1),
            l.lower_bound(self.hi),
        );
        if b.saturating_sub(a) > cols as usize {
            return Vec::new();
        }
        let mut names = Vec::new();
        let mut free = 0u16;
        for i in a..b {
            let Some(o) = l.get(i) else { continue };
            if o.end <= self.lo || o.start >= self.hi {
                continue;
            }
            let (c0, c1) = (col_of(o.start).max(free), col_of(o.end - 1) + 1);
            if c1 >= c0 + NAME_MIN_COLS {
                let name = gaptop_core::frames::short_kernel(self.store.names.get(o.name));
                // Whole, or cut where enough of it is left to read.
                let w = (c1 - c0) as usize;
                if name.chars().count() <= w || w >= NAME_CUT_COLS {
                    names.push((c0, gaptop_core::frames::cut(&name, w)));
                    free = c1;
                }
            }
        }
        names
    }

    /// One row per lane: busy blocks, gaps by cause, the cursor and the selected gap.
    pub(super) fn timeline_vm(&self, inner: Rect) -> TimelineVm {
        if let Some(r) = &self.replay_step {
            return super::replay::replay_vm(inner, r);
        }
        let origin = self.store.origin();
        // A window narrow beside its distance from the capture start (a deep zoom) reads its
        // ticks from the window's start, as nsys and Perfetto do, and its start precisely.
        let relative = self.width().saturating_mul(50) < self.lo - origin;
        let cursor = format!("▲ cursor {}", self.rel(self.cursor));
        let mut vm = TimelineVm {
            title: if relative {
                format!(
                    " GPU timeline  {} + {}  (ticks from the window start)  {cursor} {}",
                    gaptop_core::units::fmt_at(self.lo - origin, self.width() / 100),
                    fmt_ns(self.width()),
                    self.panes_note()
                        .map(|n| format!("· {n} "))
                        .unwrap_or_default()
                )
            } else {
                format!(
                    " GPU timeline  {} .. {}  (window {})  {cursor} {}",
                    self.rel_edge(self.lo),
                    self.rel_edge(self.hi),
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
            vm.ranges = crate::app::lane::ranges_row(&self.store, selected, self.lo, self.hi, cols);
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
                label: gaptop_core::frames::cut(
                    &self.store.lane_label(lane),
                    (LABEL_W - 1) as usize,
                ),
                cells,
                names: self.op_names(lane, cols, &col_of),
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
}

//! The timeline's place while a step is replayed with a fix (`r`): the step's GPU ops as
//! measured on one row and replayed with the fix on the next, on one axis from the step's
//! start, so that the second row shows the step the fix would leave (shorter, denser).

use ratatui::layout::Rect;

use super::model::{Cell, CellKind, LaneRow, OpTone, TimelineVm};
use crate::app::layout::LABEL_W;
use crate::app::state::ReplayStep;
use gaptop_core::model::records::Ns;
use gaptop_core::units::fmt_short;

/// The intervals as disjoint ones, in order.
fn union(ops: &[(Ns, Ns)]) -> Vec<(Ns, Ns)> {
    let mut v: Vec<(Ns, Ns)> = ops.to_vec();
    v.sort_unstable();
    let mut out: Vec<(Ns, Ns)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(l) if a <= l.1 => l.1 = l.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// A row of `cols` cells over `[0, span)`: busy where the ops run (by the share of the cell),
/// idle inside the step (`end`), empty after it. Also the busy time.
fn row(ops: &[(Ns, Ns)], end: Ns, span: Ns, cols: u16) -> (Vec<Cell>, Ns) {
    let busy = union(ops);
    let t_at = |c: u16| (span as f64 * c as f64 / cols as f64) as Ns;
    let mut k = 0;
    let cells = (0..cols)
        .map(|c| {
            let (t0, t1) = (t_at(c), t_at(c + 1).max(t_at(c) + 1));
            while k < busy.len() && busy[k].1 <= t0 {
                k += 1;
            }
            let on: Ns = busy[k..]
                .iter()
                .take_while(|b| b.0 < t1)
                .map(|b| b.1.min(t1) - b.0.max(t0))
                .sum();
            let kind = if on > 0 {
                let e = ((on as f64 / (t1 - t0) as f64 * 8.0).ceil() as u8).clamp(1, 8);
                CellKind::Busy(e, OpTone::Kernel)
            } else if t0 < end {
                CellKind::Short
            } else {
                CellKind::Empty
            };
            Cell {
                kind,
                mark: None,
                highlighted: false,
                selected: false,
                cursor: false,
            }
        })
        .collect();
    (cells, busy.iter().map(|b| b.1 - b.0).sum())
}

/// The two rows, the axis from the step's start, and a title with both times.
pub(super) fn replay_vm(inner: Rect, r: &ReplayStep) -> TimelineVm {
    let p = &r.picture;
    let mut vm = TimelineVm {
        title: format!(
            " step {} measured {} · with the fix {} (replayed{}: {}, {}) ",
            r.number,
            fmt_short(p.measured_ns),
            fmt_short(p.fixed_ns),
            r.without,
            r.site,
            r.fix
        ),
        ..Default::default()
    };
    if inner.height < 2 || inner.width < 20 {
        return vm;
    }
    let cols = inner.width - LABEL_W;
    let span = p.measured_ns.max(p.fixed_ns).max(1);
    let (measured, busy_m) = row(&p.measured, p.measured_ns, span, cols);
    let (fixed, busy_f) = row(&p.fixed, p.fixed_ns, span, cols);
    let pct = |b: Ns, w: Ns| 100 * b / w.max(1);
    vm.title.push_str(&format!(
        "· GPU busy {}% → {}% ",
        pct(busy_m, p.measured_ns),
        pct(busy_f, p.fixed_ns)
    ));
    vm.rows.push(LaneRow {
        label: "measured".into(),
        cells: measured,
        names: Vec::new(),
    });
    // Under the measured row: the fixed one, or (a single row) where it would be.
    if inner.height >= 3 {
        vm.rows.push(LaneRow {
            label: "with the fix".into(),
            cells: fixed,
            names: Vec::new(),
        });
    } else {
        vm.more = Some("(the step with the fix needs a taller timeline)".into());
    }
    let mut c = 0u16;
    while c + 8 < cols {
        let label = format!(
            "|{}",
            fmt_short((span as f64 * c as f64 / cols as f64) as Ns)
        );
        let n = label.chars().count() as u16;
        vm.ticks.push((c, label));
        c += 16.max(n + 2);
    }
    vm
}

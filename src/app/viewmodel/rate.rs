//! The rate strip's view model: launches a second and the GPU's busy share as sparklines over
//! the window, the steps beneath them, and the title's totals (idle, NCCL waits, steps).

use ratatui::layout::Rect;

use super::model::{RateVm, StepCell};
use crate::app::layout::LABEL_W;
use crate::app::state::App;
use gaptop_core::analysis::{gaps, rate};
use gaptop_core::units::{fmt_short, Ns};

/// Eighths of a one-row sparkline cell for a fraction of its full height: the nearest eighth,
/// but never none for a value above zero (a GPU 10% busy must not look idle).
pub fn spark_ticks(frac: f64) -> u64 {
    if frac.is_nan() || frac <= 0.0 {
        return 0;
    }
    ((frac * 8.0).round() as u64).clamp(1, 8)
}

impl App {
    /// Launches per second and busy fraction over the window.
    pub(super) fn rate_vm(&self, inner: Rect) -> RateVm {
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
        let bins = rate::rate_bins(&self.store, self.lo, self.hi, n);
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

//! The visible time window: following live data, zoom, pan, and the part of a wide window the
//! panes analyse.

use super::analysing::MAX_ANALYSED_OPS;
use super::state::{App, MIN_WIDTH};
use gaptop_core::analysis::gaps::Gap;
use gaptop_core::model::records::Ns;
use gaptop_core::units::fmt_ns;

impl App {
    /// Moves the window to follow new data (live and not paused).
    pub(super) fn follow_data(&mut self) {
        if let Some((slo, shi)) = self.store.span() {
            if self.follow && !self.paused {
                let w = if self.auto_width {
                    (shi - slo).max(MIN_WIDTH)
                } else {
                    self.width().max(MIN_WIDTH)
                };
                self.hi = shi.max(slo + w);
                self.lo = self.hi - w;
                // The panes describe the newest data.
                self.cursor = self.hi - w / 8;
            }
        }
    }

    /// The window, or the part of it around the cursor that holds about [`MAX_ANALYSED_OPS`] ops.
    pub(super) fn analysis_window(&self) -> (Ns, Ns) {
        let count = |lo: Ns, hi: Ns| -> usize {
            self.store
                .lanes
                .iter()
                .map(|l| l.lower_bound(hi) - l.lower_bound(lo))
                .sum()
        };
        let n = count(self.lo, self.hi);
        if n <= MAX_ANALYSED_OPS {
            return (self.lo, self.hi);
        }
        let mut w = ((self.width() as f64) * MAX_ANALYSED_OPS as f64 / n as f64) as Ns;
        let c = self.cursor.clamp(self.lo, self.hi);
        loop {
            let lo = (c - w / 2).max(self.lo);
            let hi = (lo + w).min(self.hi);
            if count(lo, hi) <= MAX_ANALYSED_OPS * 5 / 4 || w <= MIN_WIDTH {
                return (lo, hi);
            }
            w /= 2;
        }
    }

    /// Shows `[lo, hi)` (clipped to the capture; at least the narrowest zoom), the cursor in
    /// its middle, and stops following.
    pub fn set_window(&mut self, lo: Ns, hi: Ns) {
        let (slo, shi) = self.store.span().unwrap_or((lo, hi));
        let lo = lo.clamp(slo, shi);
        let hi = hi.clamp(lo, shi).max(lo + MIN_WIDTH);
        self.auto_width = false;
        self.follow = false;
        (self.lo, self.hi) = (lo, hi);
        self.cursor = lo + (hi - lo) / 2;
        self.refresh(true);
    }

    pub(super) fn zoom(&mut self, factor: f64, around: Ns) {
        self.auto_width = false;
        let (slo, shi) = self.store.span().unwrap_or((self.lo, self.hi));
        let span = (shi - slo).max(MIN_WIDTH);
        let w = ((self.width() as f64 * factor) as Ns).clamp(MIN_WIDTH, span.max(MIN_WIDTH));
        let rel = if self.width() > 0 {
            (around - self.lo) as f64 / self.width() as f64
        } else {
            0.5
        };
        self.lo = around - (w as f64 * rel.clamp(0.0, 1.0)) as Ns;
        self.hi = self.lo + w;
        if factor < 1.0 && self.is_live() {
            // Zooming in to look at something stops following.
            self.follow = false;
            self.paused = true;
        }
        self.clamp_window();
    }

    fn clamp_window(&mut self) {
        if let Some((slo, shi)) = self.store.span() {
            let w = self.width();
            if w >= shi - slo {
                // The whole capture fits: show all of it, never a window off its end.
                self.lo = slo;
                self.hi = slo + w;
                return;
            }
            if self.lo < slo {
                self.lo = slo;
                self.hi = slo + w;
            }
            if self.hi > shi {
                self.hi = shi;
                self.lo = shi - w;
            }
        }
    }

    pub(super) fn pan(&mut self, dir: i64) {
        let step = (self.width() / 4).max(1) * dir;
        self.lo += step;
        self.hi += step;
        self.cursor += step;
        if self.is_live() {
            self.follow = false;
            self.paused = true;
        }
        self.clamp_window();
        self.cursor = self.cursor.clamp(self.lo, self.hi);
    }

    /// Zooms so the gap fills the middle with a neighbour op on each side.
    pub(super) fn zoom_to_gap(&mut self, g: &Gap) {
        let lane = &self.store.lanes[g.lane];
        let prev = &self.store.lanes[g.prev_lane].op(g.prev);
        let next = &lane.op(g.next);
        let lo = prev.start.min(g.start);
        let hi = next.end.max(g.end);
        let pad = ((hi - lo) / 10).max(100);
        self.lo = lo - pad;
        self.hi = (hi + pad).max(self.lo + MIN_WIDTH);
        // Near the capture's ends the padding stays inside it, the gap still in view.
        self.clamp_window();
        self.cursor = g.start + g.dur() / 2;
        if self.is_live() {
            self.follow = false;
            self.paused = true;
        }
    }

    /// Zooms to the step after (dir > 0) or before the one at the cursor.
    pub(super) fn step_to(&mut self, dir: i64) {
        let Some(steps) = self.steps_of_capture() else {
            self.message =
                "no steps found in this capture (--step NAME says what a step is)".into();
            return;
        };
        let n = steps.steps.len();
        let at = steps.steps.partition_point(|s| s.start <= self.cursor);
        // `at` is the first step starting after the cursor; the cursor's own step is at - 1.
        let i = if dir > 0 {
            at.min(n - 1)
        } else {
            at.saturating_sub(2)
        };
        let st = steps.steps[i];
        let pad = ((st.end - st.start) / 20).max(100);
        self.lo = st.start - pad;
        self.hi = (st.end + pad).max(self.lo + MIN_WIDTH);
        self.cursor = st.start;
        self.auto_width = false;
        if self.is_live() {
            self.follow = false;
            self.paused = true;
        }
        self.message = format!(
            "step {} of {n}: {}, GPU busy {}, device idle {}, {} ops",
            i + 1,
            fmt_ns(st.end - st.start),
            fmt_ns(st.busy_ns),
            fmt_ns(st.idle_ns),
            st.launches
        );
    }

    /// The capture's steps, as last found (`app::analysing`).
    pub fn steps_of_capture(&self) -> Option<&gaptop_core::analysis::steps::Steps> {
        self.capture_steps.as_ref().and_then(|(_, s)| s.as_ref())
    }

    /// The whole capture; live, following the newest data again.
    pub(super) fn zoom_all(&mut self) {
        if let Some((slo, shi)) = self.store.span() {
            self.lo = slo;
            self.hi = shi.max(slo + MIN_WIDTH);
            self.cursor = slo + (shi - slo) / 2;
            self.follow = self.is_live() && !self.paused;
            self.auto_width = true;
        }
    }
}

//! The replayed step (`r` on a What-to-fix row): the median step of the window's replayed
//! block, measured and replayed with that row's fix, drawn in the timeline's place until the
//! same key or Esc.

use super::state::{App, Focus, ReplayStep};
use gaptop_core::analysis::advice;
use gaptop_core::analysis::replay::{step_picture, whatif_short};

impl App {
    /// The What-to-fix row the replay is of: the chosen one with the focus on the rows, the
    /// first while the details show them without it; None while they show something else.
    fn replay_row(&self) -> Option<usize> {
        if self.focus == Focus::Fix {
            Some(self.fix_sel)
        } else if (self.current.is_none() || self.show_fix) && !self.show_compare {
            Some(0)
        } else {
            None
        }
    }

    /// Draws the chosen row's fix replayed on a step under the measured step, or goes back to
    /// the timeline when it is drawn.
    pub(super) fn toggle_replay(&mut self) {
        if self.replay_step.take().is_some() {
            self.message = "back to the timeline".into();
            return;
        }
        self.message = match self.replay_of_row() {
            Ok(r) => {
                let m = "the step replayed with the fix (same key or Esc: the timeline)".into();
                self.replay_step = Some(r);
                m
            }
            Err(why) => why,
        };
    }

    fn replay_of_row(&self) -> Result<ReplayStep, String> {
        let row = self
            .replay_row()
            .ok_or("choose a What-to-fix row first (w shows them)")?;
        let d = self
            .diagnosis
            .as_ref()
            .ok_or("the window is being analysed")?;
        let a = d.advice.get(row).ok_or("no What-to-fix row to replay")?;
        let site = a.site.split("  ").next().unwrap_or(&a.site).to_string();
        let (Some(est), Some(steps)) = (&d.replay, &d.steps) else {
            return Err("nothing replayed: the window holds no steady steps".into());
        };
        let w = advice::whatif_of(a).ok_or_else(|| {
            format!(
                "{site}: no fix of its pattern ({}) is replayed",
                a.verdict.as_str()
            )
        })?;
        let picture = step_picture(est, &self.store, steps, &a.key, w)
            .ok_or_else(|| format!("{site} makes no call in the replayed steps"))?;
        let start = steps.steps[picture.step].start;
        let number = self
            .steps_of_capture()
            .and_then(|c| c.step_of(start))
            .unwrap_or(picture.step)
            + 1;
        let without = match &est.json.profiler {
            Some(p) => format!(
                " without gaptop's ~{} a launch",
                gaptop_core::units::fmt_short(p.launch_ns)
            ),
            None => String::new(),
        };
        Ok(ReplayStep {
            number,
            site,
            fix: whatif_short(w),
            without,
            picture,
        })
    }
}

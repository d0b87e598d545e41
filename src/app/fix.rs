//! The details pane's "what to fix": the window's launching code, most worth fixing first (in
//! `advice::advise`'s order, which the title says), a row each: what it costs a step (the
//! order's key), its share of the idle and the code, then its verdict, the cause a pattern
//! names, what a fix saves a step, and the fix.

use super::state::{App, Focus};
use super::viewmodel::model::{DetailsVm, FixRow};
use gaptop_core::analysis::advice::{self, Advice};
use gaptop_core::analysis::gaps::Gap;
use gaptop_core::units::fmt_short;

/// The title: what the rows are, in what order.
pub fn title(steps: bool) -> &'static str {
    if steps {
        " What to fix in the window, by idle a step (recurring first) "
    } else {
        " What to fix in the window, by gap time (one-offs apart) "
    }
}

/// A row for one launching function.
pub fn row(a: &Advice, steady: u32) -> FixRow {
    let mut verdict = a.verdict.as_str().to_string();
    if let Some(c) = &a.cause_name {
        verdict.push_str(&format!(" ({c})"));
    }
    let head = match (a.steps_present, a.per_step_ns) {
        (Some(n), Some(per)) if a.recurring => {
            if let Some(s) = a.saving_ns.filter(|&s| s > 0) {
                verdict.push_str(&format!(" · saves ~{}/step", fmt_short(s)));
            }
            verdict.push_str(&format!(" · in {n}/{steady} steps"));
            format!("{}/step", fmt_short(per))
        }
        (Some(n), _) => {
            verdict.push_str(&format!(" · not recurring: in {n}/{steady} steps"));
            fmt_short(a.gap_ns)
        }
        _ => {
            if a.one_off_ns > 0 {
                verdict.push_str(&format!(" · {} of it one-off", fmt_short(a.one_off_ns)));
            }
            fmt_short(a.gap_ns - a.one_off_ns)
        }
    };
    FixRow {
        head,
        share: format!("{:>3.0}%", 100.0 * a.share),
        // The program's own code whose CPU work delays the launches leads, where known.
        site: match &a.code {
            Some(c) => format!("{c}, before {}", a.site),
            None => a.site.clone(),
        },
        verdict,
        fix: a.fix.to_string(),
        selected: false,
        chosen: false,
    }
}

/// A gap's own verdict, in the words of a site's: its reason where it waited on something
/// (a sync, an event, a graph), else by its length as a site's typical gap is judged
/// (launch overhead below `HOST_WORK_NS`, host work at or above it).
pub fn gap_verdict(g: &Gap, store: &gaptop_core::model::store::Store) -> &'static str {
    use crate::app::cause::Cause;
    use gaptop_core::analysis::verdict::{Verdict, HOST_WORK_NS};
    let (ws, we) = g.whole(store);
    match Cause::of(g) {
        Cause::Sync => Verdict::Sync.as_str(),
        Cause::EventWait => Verdict::EventWait.as_str(),
        Cause::Graph => Verdict::Graph.as_str(),
        Cause::HostWait if we - ws < HOST_WORK_NS => Verdict::LaunchBound.as_str(),
        Cause::HostWait => Verdict::HostWork.as_str(),
        c => c.label(),
    }
}

impl App {
    /// A gap's verdict line: its code's verdict and usual fix in the window, said as a one-off
    /// where the gap is not part of its code's recurring pattern: in the capture's warm-up
    /// steps, of code that does not recur in the window's steps, or (without steps) far longer
    /// than its code's typical gap. A gap of a steady step that the window cuts is its code's
    /// as much as those of the steps the window holds whole.
    pub(super) fn verdict_line(&self, g: &Gap) -> Option<String> {
        let d = self.diagnosis.as_ref()?;
        let a = d.advice_for(&self.store, g)?;
        let pattern = advice::summary_line(a);
        let steady = d.steady_steps();
        let usual = |pattern: String| match advice::steps_line(a, steady) {
            Some(l) => format!("{l}; {pattern}"),
            None => pattern,
        };
        // Where the gap is among the capture's steps: which, of how many, and whether steady.
        let in_capture = self.steps_of_capture().and_then(|st| {
            let i = st.step_of(g.start)?;
            Some((i, st.steps.len(), st.steady().contains(&i)))
        });
        // The gap by its own verdict first, where it differs from its code's usual one.
        let own = gap_verdict(g, &self.store);
        let this = format!("this gap {own} ({})", fmt_short(g.dur()));
        let differs = own != a.verdict.as_str();
        let one_off = |why: String| match differs {
            true => format!(
                "one-off ({why}): {this}, not what the usual fix removes; its code usually \
                 {pattern}"
            ),
            false => format!("one-off ({why}): not what the usual fix removes; usually {pattern}"),
        };
        Some(match (&d.steps, in_capture) {
            (_, Some((i, n, false))) => one_off(format!("warm-up, step {} of {n}", i + 1)),
            (Some(_), _) if a.recurring && own != a.verdict.as_str() => {
                format!("{this}; its code {}", usual(pattern.clone()))
            }
            (Some(_), _) if a.recurring => usual(pattern.clone()),
            (Some(_), Some(_)) => one_off(format!(
                "its code idles in only {} of {steady} steps",
                a.steps_present.unwrap_or(0)
            )),
            (Some(_), None) => one_off("outside the steps".to_string()),
            // Without steps in the window: a gap far longer than its code's usual ones.
            (None, _) if advice::one_off(g.dur(), a.typical_gap_ns, a.gaps).is_some() => {
                format!(
                    "one-off, {}x the typical {} here (first-call setup, allocation or \
                     compilation?); usually {pattern}",
                    g.dur() / a.typical_gap_ns.max(1),
                    fmt_short(a.typical_gap_ns)
                )
            }
            (None, _) if own != a.verdict.as_str() => format!("{this}; its code usually {pattern}"),
            (None, _) => pattern,
        })
    }

    /// With no gap selected, what to fix first in the window.
    pub(super) fn what_to_fix(&self) -> DetailsVm {
        let hint = if self.focus == Focus::Fix {
            "↑/↓ choose, Enter lists that code's gaps, r replays a step with its fix, Tab moves on, ? for help."
        } else {
            "n/N walks gaps, b picks the biggest, Tab goes to the call tree, ? for help."
        };
        let d = self.diagnosis.as_ref();
        let advice = d.map(|d| &d.advice[..]).unwrap_or(&[]);
        let steady = d.map_or(0, |d| d.steady_steps());
        let focused = self.focus == Focus::Fix;
        // Every row (↑/↓ reach each one the focus can choose).
        let rows: Vec<FixRow> = advice
            .iter()
            .enumerate()
            .map(|(i, a)| FixRow {
                selected: focused && i == self.fix_sel,
                chosen: i == if focused { self.fix_sel } else { 0 },
                ..row(a, steady)
            })
            .collect();
        let title = title(steady > 0).to_string();
        match (rows.is_empty(), self.nothing_yet()) {
            (true, Some(why)) => DetailsVm::Waiting(why),
            (true, None) => DetailsVm::Fix {
                title,
                rows,
                hint: format!("No gap selected: {hint}"),
            },
            (false, _) => DetailsVm::Fix {
                title,
                rows,
                hint: hint.to_string(),
            },
        }
    }
}

//! The one analysis of a window, for every reader: the report and `diff`, `serve`'s metrics
//! and the terminal UI all call [`analyse()`], and [`Options`] says what each needs beyond the
//! gaps' summary (what to fix and its replay, the stalls between ranks, the rank summary) and
//! where the steps are found (in the window, or over the capture with those whole in the window
//! kept, as the UI's steps strip reads them).

use std::borrow::Cow;

use crate::analysis::advice::{advise, replay_advice, Diagnosis};
use crate::analysis::comm::{self, CommReport};
use crate::analysis::gaps::Config;
use crate::analysis::ranks::{self, RankRow};
use crate::analysis::steps::{self, Steps};
use crate::analysis::summary;
use crate::model::store::Store;
use crate::model::window::Window;
use crate::units::Ns;

/// Where an analysis finds the window's steps.
#[derive(Clone, Copy, Debug, Default)]
pub enum StepsOver<'a> {
    /// In the window alone (the report, `diff`, `serve`).
    #[default]
    Window,
    /// Over the whole capture, keeping those whole in the window (the UI, whose steps strip
    /// and `<`/`>` walk the capture's steps); `Some` gives the capture's steps found before
    /// (`None` inside: none were found).
    Capture(Option<&'a Option<Steps>>),
}

/// What to analyse and how. `Options::default()` is the gaps' summary with the steps found in
/// the window and what to fix, keeping no longest gaps.
#[derive(Clone, Copy, Debug)]
pub struct Options<'a> {
    /// How gaps are classified and on which basis they are charged.
    pub config: Config,
    /// How many of the longest gaps to keep (`Summary::top_gaps`).
    pub top: usize,
    /// The shortest gap kept among the longest (the UI's threshold; 0 for every gap).
    pub min_gap: Ns,
    /// How steps are found: a span, Python function or op name (see [`steps::find`]), else
    /// as they are found without one.
    pub step_by: Option<&'a str>,
    pub steps: StepsOver<'a>,
    /// What to fix, each site's advice with the replay of its fix (`serve` needs none).
    pub advice: bool,
    /// The stalls between ranks ([`CommReport`], when there are two or more).
    pub comm: bool,
    /// The ranks side by side (the UI's rank summary; with `comm`).
    pub rank_rows: bool,
    /// Keep each site's per-step figures in the summary (the UI's details read them); without,
    /// their memory goes before the replay's.
    pub per_step: bool,
}

impl Default for Options<'_> {
    fn default() -> Self {
        Options {
            config: Config::default(),
            top: 0,
            min_gap: 0,
            step_by: None,
            steps: StepsOver::Window,
            advice: true,
            comm: false,
            rank_rows: false,
            per_step: false,
        }
    }
}

/// What [`analyse()`] found in a window.
pub struct Analysis {
    /// The window within the capture's span: what the summary covers.
    pub span: (Ns, Ns),
    /// The summary with each gap placed in its step, the window's steps, what to fix and the
    /// replay (no advice or replay unless asked).
    pub diagnosis: Diagnosis,
    /// The capture's steps, when they were found over the capture and not given.
    pub capture_steps: Option<Option<Steps>>,
    /// The stalls between ranks, when asked and there are two ranks or more.
    pub comm: Option<CommReport>,
    /// The ranks side by side, when asked (empty with fewer than two).
    pub ranks: Vec<RankRow>,
}

/// Analyses window `w` of the store as `o` says: the gaps' summary, each gap placed in the
/// window's steps (found as [`StepsOver`] says, beside the summary), what to fix with the
/// replay of each fix, and the stalls between ranks (on a thread of its own meanwhile).
pub fn analyse(store: &Store, w: Window, o: &Options) -> Analysis {
    let span = w.clipped(store);
    let (lo, hi) = span;
    std::thread::scope(|scope| {
        let comm = o.comm.then(|| scope.spawn(|| comm::analyse(store, lo, hi)));
        let mut found: Option<Option<Steps>> = None;
        let (summary, steps) = {
            let found = &mut found;
            let find = move || match o.steps {
                StepsOver::Window => steps::find(store, w, o.step_by).map(Cow::Owned),
                StepsOver::Capture(known) => {
                    let all = match known {
                        Some(all) => all,
                        None => found.insert(steps::find(store, Window::all(), o.step_by)),
                    };
                    all.as_ref()
                        .and_then(|all| steps_within(all, lo, hi))
                        .map(Cow::Owned)
                }
            };
            summary::summarize_finding(store, w, &o.config, o.top, o.min_gap, find)
        };
        let capture_steps = match o.steps {
            StepsOver::Capture(None) => {
                Some(found.unwrap_or_else(|| steps::find(store, Window::all(), o.step_by)))
            }
            _ => None,
        };
        let steps = steps.map(Cow::into_owned);
        let mut advice = if o.advice {
            advise(store, &summary, usize::MAX)
        } else {
            Vec::new()
        };
        let mut summary = summary;
        if !o.per_step {
            for leaf in summary.leaves.values_mut() {
                leaf.per_step = Default::default();
            }
        }
        let replay = match &steps {
            Some(st) if o.advice => replay_advice(store, st, &mut advice),
            _ => None,
        };
        let comm = comm
            .map(|c| c.join().expect("comm thread"))
            .filter(|c| c.ranks >= 2);
        let ranks = if o.rank_rows {
            ranks::summarize(store, lo, hi, comm.as_ref())
        } else {
            Vec::new()
        };
        Analysis {
            span,
            diagnosis: Diagnosis {
                steps,
                summary,
                advice,
                replay,
            },
            capture_steps,
            comm,
            ranks,
        }
    })
}

/// The steps of `all` that lie in `[lo, hi)` whole; None without any.
pub fn steps_within(all: &Steps, lo: Ns, hi: Ns) -> Option<Steps> {
    let a = all.steps.partition_point(|s| s.start < lo);
    let inside: Vec<_> = all.steps[a..]
        .iter()
        .take_while(|s| s.end <= hi)
        .copied()
        .collect();
    (!inside.is_empty()).then(|| Steps {
        source: all.source.clone(),
        steps: inside,
        devices: all.devices,
        suggest: all.suggest.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::steps::{Step, StepSource};

    #[test]
    fn the_windows_steps_are_those_whole_in_it() {
        let step = |start, end| Step {
            start,
            end,
            ..Default::default()
        };
        let all = Steps {
            source: StepSource::Auto,
            steps: vec![step(0, 10), step(10, 20), step(20, 30), step(30, 40)],
            devices: 1,
            suggest: None,
        };
        let w = steps_within(&all, 5, 30).unwrap();
        assert_eq!(w.steps, vec![step(10, 20), step(20, 30)]);
        assert_eq!(steps_within(&all, 0, 40).unwrap().steps.len(), 4);
        assert!(steps_within(&all, 12, 18).is_none(), "none whole inside");
    }
}

//! A capture's steps as found: where they came from, each step's extent and its busy and idle
//! time, and the figures read off them (median, p90, the steady steps after warm-up). The
//! types every way of finding steps produces.

use std::ops::Range;

use serde::Serialize;

use crate::model::records::Ns;

/// Where a capture's steps came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepSource {
    /// torch.profiler's `ProfilerStep#N` spans.
    ProfilerStep,
    /// CPU spans or NVTX ranges named this.
    Spans(String),
    /// Calls of this Python function.
    Function(String),
    /// Occurrences of this GPU op.
    Op(String),
    /// Calls of this Python function, found from the program's structure (the launch stacks)
    /// without a name to go by.
    Structure(String),
    /// The period of the repeating op sequence: guessed from the ops.
    Auto,
}

impl StepSource {
    /// The JSON `source` field.
    pub fn as_str(&self) -> &'static str {
        match self {
            StepSource::ProfilerStep => "profiler_step",
            StepSource::Spans(_) => "range",
            StepSource::Function(_) => "function",
            StepSource::Op(_) => "op",
            StepSource::Structure(_) => "structure",
            StepSource::Auto => "auto",
        }
    }

    /// The name the steps were asked by, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            StepSource::Spans(n)
            | StepSource::Function(n)
            | StepSource::Op(n)
            | StepSource::Structure(n) => Some(n),
            _ => None,
        }
    }
}

/// One iteration.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Step {
    pub start: Ns,
    pub end: Ns,
    /// Time some op ran (union of the ops' intervals per device), summed over the devices.
    pub busy_ns: Ns,
    /// Time no stream of a device ran anything ([`device_idle`]), summed over the devices.
    pub idle_ns: Ns,
    /// GPU ops that start in the step, on every device.
    pub launches: u64,
}

impl Step {
    /// Wall time.
    pub fn wall(&self) -> Ns {
        self.end - self.start
    }
}

/// A capture's steps, sorted by start and not overlapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Steps {
    pub source: StepSource,
    pub steps: Vec<Step>,
    /// Devices whose busy and idle time the steps sum.
    pub devices: usize,
    /// Steps guessed from the ops: the `--step` name that would give them (the op that
    /// starts each of them), when one does.
    pub suggest: Option<String>,
}

/// The JSON `steps` object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepsJson {
    pub count: usize,
    /// Steps in the steady state (the per-step figures of advice are over these).
    pub steady: usize,
    /// Leading steps that are warm-up (the steps before the steady state).
    pub warmup: usize,
    pub source: &'static str,
    /// The steps were guessed from the repeating op sequence (no marker, no Python stacks).
    pub guessed: bool,
    /// With guessed steps, the option that would give them by name (`--step NAME`), when
    /// one does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suggest: Option<String>,
    /// The span, range family, function or op the steps were found by.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub median_ns: Ns,
    pub p90_ns: Ns,
    pub busy_median_ns: Ns,
    pub idle_median_ns: Ns,
}

/// Exact nearest-rank quantile: the smallest value with at least `q` of the values at or below
/// it (the median of an even count is the lower middle value). 0 for no values.
pub fn quantile(mut v: Vec<Ns>, q: f64) -> Ns {
    if v.is_empty() {
        return 0;
    }
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    *v.select_nth_unstable(rank - 1).1
}

/// Steps whose wall time is more than this many times the median are warm-up when they lead.
pub const WARMUP_FACTOR: Ns = 3;

impl Steps {
    fn stat(&self, f: impl Fn(&Step) -> Ns, q: f64) -> Ns {
        quantile(self.steps.iter().map(f).collect(), q)
    }
    /// Median wall time over all steps.
    pub fn median_ns(&self) -> Ns {
        self.stat(Step::wall, 0.5)
    }
    /// 90th percentile of wall time over all steps.
    pub fn p90_ns(&self) -> Ns {
        self.stat(Step::wall, 0.9)
    }
    pub fn busy_median_ns(&self) -> Ns {
        self.stat(|s| s.busy_ns, 0.5)
    }
    pub fn idle_median_ns(&self) -> Ns {
        self.stat(|s| s.idle_ns, 0.5)
    }

    /// The step that holds time `t`, if any.
    pub fn step_of(&self, t: Ns) -> Option<usize> {
        let i = self.steps.partition_point(|s| s.start <= t);
        (i > 0 && t < self.steps[i - 1].end).then(|| i - 1)
    }

    /// [`Steps::step_of`], looking first where the last time looked up was (`at`, kept up to
    /// date): times looked up in order are mostly in the same step or the next.
    pub fn step_of_from(&self, t: Ns, at: &mut usize) -> Option<usize> {
        let v = &self.steps;
        // The first step starting after t is `i` when the one before `i` starts at or before
        // it and `i` itself after it: check the last answer and the one after.
        let fits = |i: usize| (i == 0 || v[i - 1].start <= t) && (i == v.len() || v[i].start > t);
        let i = if *at <= v.len() && fits(*at) {
            *at
        } else if *at < v.len() && fits(*at + 1) {
            *at + 1
        } else {
            v.partition_point(|s| s.start <= t)
        };
        *at = i;
        (i > 0 && t < v[i - 1].end).then(|| i - 1)
    }

    /// The steady state: all steps but the leading ones whose wall time is more than
    /// [`WARMUP_FACTOR`] times the median wall time (first calls, allocator and autotuning
    /// warm-up, lazy loading). A slow step after a normal one is part of the steady state (a
    /// recurring hiccup is the steady state's business), and since at most half of the steps
    /// can be above the median, at least half are steady.
    pub fn steady(&self) -> Range<usize> {
        let m = self.median_ns();
        let first = self
            .steps
            .iter()
            .position(|s| s.wall() <= WARMUP_FACTOR.saturating_mul(m))
            .unwrap_or(self.steps.len());
        first..self.steps.len()
    }

    pub fn json(&self) -> StepsJson {
        let steady = self.steady();
        StepsJson {
            count: self.steps.len(),
            steady: steady.len(),
            warmup: steady.start,
            source: self.source.as_str(),
            guessed: self.source == StepSource::Auto,
            suggest: self.suggest.as_ref().map(|n| format!("--step {n}")),
            name: self.source.name().map(str::to_string),
            median_ns: self.median_ns(),
            p90_ns: self.p90_ns(),
            busy_median_ns: self.busy_median_ns(),
            idle_median_ns: self.idle_median_ns(),
        }
    }
}

//! Steps: the program's iterations in a capture (a decode loop's tokens, a training loop's
//! iterations), so that gaps can be told apart as recurring (in most steps) or one-off (warm-up,
//! first calls, model loading).
//!
//! Where the steps come from, in [`find`]'s order:
//!
//! - `by = Some(NAME)`: CPU spans or NVTX ranges named NAME (a `user_annotation`, `cpu_op` or
//!   `python_function` span, an NVTX range, exactly; a NAME ending in `#`, or `ProfilerStep`, is a
//!   prefix, so `ProfilerStep#` takes every `ProfilerStep#N`, and a family, so `step #` takes
//!   `step 1`, `step 2`, … (see [`family`])); else the calls of the Python function NAME (see
//!   [`frame_matches`]); else the GPU op NAME, each occurrence starting a step.
//! - `by = None`: torch.profiler's `ProfilerStep#N` spans when the capture has them; else NVTX
//!   ranges ([`range_steps`]): the outermost ranges of a step-like family (`step`, `step N`,
//!   `iteration N`, `decode_step`, … see [`is_step_name`]) are the steps, exactly; failing that,
//!   the outermost family that repeats most (the earliest of a tie: an iteration's first range)
//!   delimits them, each occurrence starting a step; else the period of the repeating op
//!   sequence ([`detect_period`]).
//!
//! Ranges by name go through [`from_ranges`], as CPU spans do: the ranges are the steps,
//! exactly.
//!
//! Times: a range's step is the range itself. Steps found on the GPU timeline (automatic, an op,
//! a function's calls) start at an op's start and end where the next step starts; the last one
//! ends with the last op of its period. Steps are half-open, `[start, end)`, sorted and do not
//! overlap, so a gap that ends at a step's first op lies in the step before it.
//!
//! Several devices (ranks, GPUs of one process): the steps are found on one device's sequence
//! (the device with the most ops in the window, which in lockstep runs is any of them), and each
//! step's `busy_ns` and `idle_ns` are the sums over every device with ops in the window;
//! [`Steps::devices`] says how many, so `idle_ns / devices` is the mean per device.

use std::ops::Range;

use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use super::gaps::device_idle;
use crate::collect::model::process::Process;
use crate::collect::model::ranges::{family, is_step_name, Range as NvtxRange};
use crate::collect::model::records::{NameId, Ns, StackId};
use crate::collect::model::store::Store;
use crate::frames::short_kernel;

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
    /// The period of the repeating op sequence.
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
            StepSource::Auto => "auto",
        }
    }

    /// The name the steps were asked by, if any.
    pub fn name(&self) -> Option<&str> {
        match self {
            StepSource::Spans(n) | StepSource::Function(n) | StepSource::Op(n) => Some(n),
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
}

/// The JSON `steps` object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StepsJson {
    pub count: usize,
    /// Steps in the steady state (the per-step figures of advice are over these).
    pub steady: usize,
    pub source: &'static str,
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
        StepsJson {
            count: self.steps.len(),
            steady: self.steady().len(),
            source: self.source.as_str(),
            name: self.source.name().map(str::to_string),
            median_ns: self.median_ns(),
            p90_ns: self.p90_ns(),
            busy_median_ns: self.busy_median_ns(),
            idle_median_ns: self.idle_median_ns(),
        }
    }
}

/// Finds the steps of the window `[lo, hi)` as the module's comment says, from the ranges that
/// overlap it (clipped to it) or the ops that start in it. `Ns::MIN, Ns::MAX` is the whole
/// capture. The window is first clipped to the capture's span (`Store::span`: its ops', or
/// the window a source fixed): a CPU span or NVTX range that starts before the first GPU op
/// or ends after the last (ranges of a whole run whose first ops were evicted, say) does not
/// make steps outside it, so the steps never add up to more than the capture. `None` when
/// there are none: no span, call or op of that name, or no clear repetition.
pub fn find(store: &Store, lo: Ns, hi: Ns, by: Option<&str>) -> Option<Steps> {
    let (lo, hi) = match store.span() {
        Some((a, b)) => (lo.max(a), hi.min(b)),
        None => (lo, hi),
    };
    if hi <= lo {
        return None;
    }
    match by {
        Some(name) => {
            let prefix = name == "ProfilerStep" || name.ends_with('#');
            let want = if name == "ProfilerStep" {
                "ProfilerStep#"
            } else {
                name
            };
            let ranges = span_ranges(store, lo, hi, |s| {
                s == want || (prefix && (s.starts_with(want) || family(s) == want))
            });
            if !ranges.is_empty() {
                let src = if want == "ProfilerStep#" {
                    StepSource::ProfilerStep
                } else {
                    StepSource::Spans(name.to_string())
                };
                return from_ranges(store, src, &ranges, lo, hi);
            }
            if let Some(r) = function_ranges(store, lo, hi, name) {
                return from_ranges(store, StepSource::Function(name.to_string()), &r, lo, hi);
            }
            let r = op_ranges(store, lo, hi, name)?;
            from_ranges(store, StepSource::Op(name.to_string()), &r, lo, hi)
        }
        None => {
            let ranges = span_ranges(store, lo, hi, |s| s.starts_with("ProfilerStep#"));
            if !ranges.is_empty() {
                return from_ranges(store, StepSource::ProfilerStep, &ranges, lo, hi);
            }
            if let Some((name, r)) = range_steps(store, lo, hi) {
                return from_ranges(store, StepSource::Spans(name), &r, lo, hi);
            }
            let seq = DeviceSeq::busiest(store, lo, hi)?;
            let stacks: Vec<StackId> = if store.stacks.len() > 1 {
                (0..seq.names.len()).map(|i| seq.stack(store, i)).collect()
            } else {
                Vec::new()
            };
            let mut memo: HashMap<(StackId, StackId), Option<StackTurn>> = HashMap::default();
            let p = detect_period_with(&seq.names, &seq.idle_before(), |i| {
                if i == 0 || i >= stacks.len() {
                    return None;
                }
                let key = (stacks[i - 1], stacks[i]);
                *memo
                    .entry(key)
                    .or_insert_with(|| stack_turn(store, key.0, key.1))
            })?;
            let r = seq.times(&p.steps);
            from_ranges(store, StepSource::Auto, &r, lo, hi)
        }
    }
}

/// Steps from ranges (CPU spans, NVTX ranges, anything with a start and an end): sorted, each
/// clipped to `[lo, hi)` and to the next one's start, empty ones dropped, then measured. `None`
/// when none is left.
pub fn from_ranges(
    store: &Store,
    source: StepSource,
    ranges: &[(Ns, Ns)],
    lo: Ns,
    hi: Ns,
) -> Option<Steps> {
    let mut r: Vec<(Ns, Ns)> = ranges
        .iter()
        .map(|&(s, e)| (s.max(lo), e.min(hi)))
        .filter(|(s, e)| e > s)
        .collect();
    r.sort_unstable();
    for i in 1..r.len() {
        let next = r[i].0;
        r[i - 1].1 = r[i - 1].1.min(next);
    }
    r.retain(|(s, e)| e > s);
    if r.is_empty() {
        return None;
    }
    let devices: Vec<Vec<usize>> = store
        .devices()
        .into_iter()
        .map(|(_, lanes)| lanes)
        .filter(|lanes| lanes.iter().any(|&l| lane_active(store, l, lo, hi)))
        .collect();
    let steps = r
        .iter()
        .map(|&(s, e)| {
            let mut st = Step {
                start: s,
                end: e,
                ..Default::default()
            };
            for lanes in &devices {
                let mut idle = 0;
                device_idle(store, lanes, s, e, |a, b| idle += b - a);
                st.idle_ns += idle;
                st.busy_ns += (e - s) - idle;
                for &l in lanes {
                    let lane = &store.lanes[l];
                    st.launches += (lane.lower_bound(e) - lane.lower_bound(s)) as u64;
                }
            }
            st
        })
        .collect();
    Some(Steps {
        source,
        steps,
        devices: devices.len(),
    })
}

/// Whether a lane has an op overlapping `[lo, hi)`.
fn lane_active(store: &Store, lane: usize, lo: Ns, hi: Ns) -> bool {
    let l = &store.lanes[lane];
    let i = l.lower_bound(lo);
    i < l.lower_bound(hi) || (i > 0 && l.op(i - 1).end > lo)
}

/// Memoized string tests over interned names.
struct NameTest<'a, F: Fn(&str) -> bool> {
    store: &'a Store,
    memo: Vec<u8>,
    f: F,
}

impl<'a, F: Fn(&str) -> bool> NameTest<'a, F> {
    fn new(store: &'a Store, f: F) -> Self {
        NameTest {
            store,
            memo: vec![0; store.names.len()],
            f,
        }
    }
    fn test(&mut self, id: NameId) -> bool {
        let Some(m) = self.memo.get_mut(id as usize) else {
            return false;
        };
        if *m == 0 {
            *m = 1 + (self.f)(self.store.names.get(id)) as u8;
        }
        *m == 2
    }
}

/// The outermost CPU spans whose own name passes `test` and that overlap `[lo, hi)`, on the
/// one thread that has the most of them (the program's main loop runs on one thread; several
/// threads' spans would overlap).
fn span_ranges(store: &Store, lo: Ns, hi: Ns, test: impl Fn(&str) -> bool) -> Vec<(Ns, Ns)> {
    let mut names = NameTest::new(store, test);
    let mut best: Vec<(Ns, Ns)> = Vec::new();
    for p in &store.procs {
        let mut tids: Vec<u32> = p.spans.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let spans = &p.spans[&tid];
            // Whether a span or one of its ancestors matched (parents come before children).
            let mut under = vec![false; spans.len()];
            let mut found = Vec::new();
            for (i, s) in spans.iter().enumerate() {
                let inside = s.parent != u32::MAX && under.get(s.parent as usize) == Some(&true);
                let me = names.test(store.stacks.node(s.stack).frame);
                under[i] = inside || me;
                if me && !inside && s.start < hi && s.end > lo {
                    found.push((s.start, s.end));
                }
            }
            if found.len() > best.len() {
                best = found;
            }
        }
        let mut tids: Vec<u32> = p.ranges.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            // A matching range inside a matching one is part of it.
            let mut outer_end = Ns::MIN;
            let mut found = Vec::new();
            for r in p.ranges_of(tid) {
                if r.start < outer_end || !names.test(r.name) {
                    continue;
                }
                outer_end = r.end;
                if r.start < hi && r.end > lo {
                    found.push((r.start, r.end));
                }
            }
            if found.len() > best.len() {
                best = found;
            }
        }
    }
    best
}

/// Steps from NVTX ranges (or user annotations) without a name to go by: on the thread with the
/// most outermost ranges overlapping `[lo, hi)`, the ranges grouped by [`family`], those of two
/// or more. A step-like family (the most frequent) gives its ranges as the steps; else the most
/// frequent family (the earliest of a tie) delimits them: a step from each occurrence's start to
/// the next one's, the last one as long as the others' median (or its range). A numbered family
/// whose numbers repeat (`layer 0` … `layer 23`, again each iteration) counts something inside
/// an iteration and is passed over. Returns the family's name and the steps' extents.
pub fn range_steps(store: &Store, lo: Ns, hi: Ns) -> Option<(String, Vec<(Ns, Ns)>)> {
    // The program's own ranges first: libraries annotate their calls in domains of their own
    // (NCCL, cuDNN, Nsight Systems' MPI and OS runtime tracing), a call each, not a phase.
    range_steps_of(store, lo, hi, true).or_else(|| range_steps_of(store, lo, hi, false))
}

/// [`range_steps`] among the ranges of NVTX's default domain only, or of all domains.
fn range_steps_of(
    store: &Store,
    lo: Ns,
    hi: Ns,
    default_domain: bool,
) -> Option<(String, Vec<(Ns, Ns)>)> {
    let mut outer: Vec<&NvtxRange> = Vec::new();
    for p in &store.procs {
        let mut tids: Vec<u32> = p.ranges.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            // Outermost within the domain: a default-domain range inside a library's call
            // still counts as the program's outermost.
            let mut open: Vec<&NvtxRange> = Vec::new();
            let mut v: Vec<&NvtxRange> = Vec::new();
            for (_, r) in Process::overlapping(p.ranges_of(tid), lo, hi) {
                if default_domain && r.domain != 0 {
                    continue;
                }
                open.retain(|o| o.end > r.start);
                if open.is_empty() {
                    v.push(r);
                }
                open.push(r);
            }
            if v.len() > outer.len() {
                outer = v;
            }
        }
    }
    // Families in the order of their first range, with their ranges and numbers.
    struct Family {
        name: String,
        ranges: Vec<(Ns, Ns)>,
        numbers: Vec<u64>,
    }
    let mut fams: Vec<Family> = Vec::new();
    for r in outer {
        let name = store.names.get(r.name);
        let fam = family(name);
        let digits = name.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let i = match fams.iter().position(|f| f.name == fam) {
            Some(i) => i,
            None => {
                fams.push(Family {
                    name: fam.into_owned(),
                    ranges: Vec::new(),
                    numbers: Vec::new(),
                });
                fams.len() - 1
            }
        };
        fams[i].ranges.push((r.start, r.end));
        fams[i].numbers.extend(name[digits..].parse::<u64>().ok());
    }
    fams.retain(|f| {
        let mut n = f.numbers.clone();
        n.sort_unstable();
        n.dedup();
        f.ranges.len() >= 2 && n.len() == f.numbers.len()
    });
    let most = |pick: &dyn Fn(&str) -> bool| {
        let mut best: Option<&Family> = None;
        for f in fams.iter().filter(|f| pick(&f.name)) {
            if best.is_none_or(|b| f.ranges.len() > b.ranges.len()) {
                best = Some(f);
            }
        }
        best
    };
    if let Some(f) = most(&|f| is_step_name(f)) {
        return Some((f.name.clone(), f.ranges.clone()));
    }
    let Family {
        name, ranges: r, ..
    } = most(&|_| true)?;
    let mut steps: Vec<(Ns, Ns)> = r.windows(2).map(|w| (w[0].0, w[1].0)).collect();
    let typical = quantile(steps.iter().map(|(s, e)| e - s).collect(), 0.5);
    let (s, e) = r[r.len() - 1];
    steps.push((s, e.max(s.saturating_add(typical)).min(hi)));
    Some((name.clone(), steps))
}

/// Splits a Python frame `path/file.py(12): Class.method` into its path and its function.
fn split_frame(frame: &str) -> Option<(&str, &str)> {
    let i = frame.rfind("): ")?;
    let loc = &frame[..i];
    let path = &loc[..loc.rfind('(')?];
    Some((path, &frame[i + 3..]))
}

/// Whether a frame is the Python function `name`. Frames read `path/file.py(LINE): QUALNAME`.
/// `name` matches when it is the whole frame; or QUALNAME, or the end of it after a dot
/// (`method` and `Class.method` both match `Class.method`, and `late_allreduce` matches
/// `main.<locals>.late_allreduce`); or `FILE:FUNC`, FILE being the path or its end after a `/`
/// (`file.py:method`, `pkg/file.py:Class.method`) and FUNC matching QUALNAME as above.
pub fn frame_matches(frame: &str, name: &str) -> bool {
    if frame == name {
        return true;
    }
    let Some((path, func)) = split_frame(frame) else {
        return false;
    };
    let func_is = |want: &str| {
        !want.is_empty()
            && (func == want
                || (func.len() > want.len()
                    && func.ends_with(want)
                    && func.as_bytes()[func.len() - want.len() - 1] == b'.'))
    };
    if func_is(name) {
        return true;
    }
    if name.contains("::") {
        return false;
    }
    let Some((file, want)) = name.rsplit_once(':') else {
        return false;
    };
    let file_ok = path == file
        || (path.len() > file.len()
            && path.ends_with(file)
            && path.as_bytes()[path.len() - file.len() - 1] == b'/');
    !file.is_empty() && file_ok && func_is(want)
}

/// Per process, the ops launched in `[lo, hi)` by correlation id: first start, last end.
fn ops_by_corr(store: &Store, lo: Ns, hi: Ns) -> Vec<HashMap<u32, (Ns, Ns)>> {
    let mut m: Vec<HashMap<u32, (Ns, Ns)>> = vec![HashMap::default(); store.procs.len()];
    for l in &store.lanes {
        let map = &mut m[l.key.proc as usize];
        for o in l.range(l.lower_bound(lo)..l.lower_bound(hi)) {
            if o.corr == 0 {
                continue;
            }
            let e = map.entry(o.corr).or_insert((o.start, o.end));
            e.0 = e.0.min(o.start);
            e.1 = e.1.max(o.end);
        }
    }
    m
}

/// A thread's run of launches inside the function: the caller's stack, the function's frame
/// at the first launch of the current call, and at the latest launch.
#[derive(Clone, Copy)]
struct Run {
    caller: StackId,
    entry: StackId,
    last: StackId,
}

/// One call: the first start and last end of the ops it launched.
#[derive(Clone, Copy)]
struct Call {
    first: Ns,
    last: Ns,
}

/// Steps at the calls of a Python function: each outermost call starts a step at its first
/// op's start; a step ends where the next starts, the last one with its call's last op.
///
/// Calls are the function's CPU spans when the capture has them (Kineto's `python_function`):
/// each span is a call. Otherwise they come from the launch stacks: consecutive launches of a
/// thread whose stacks hold the function's frame (outermost) under the same caller frames,
/// with no launch outside the function between them, are one call, except that a launch that
/// brings the function's frame back to the line of the call's first launch after other lines
/// starts a new call. Python frames carry their current line, so back-to-back calls from one
/// loop are told apart by the function's line going back to its first launching line; the
/// price is that a loop in the function's body that launches from that line first splits each
/// of its iterations, and a function that launches from one line only cannot be split (its
/// back-to-back calls are one). The thread with the most calls is used. `None` when the
/// function launched nothing in the window.
fn function_ranges(store: &Store, lo: Ns, hi: Ns, name: &str) -> Option<Vec<(Ns, Ns)>> {
    let mut names = NameTest::new(store, |f| frame_matches(f, name));
    // Outermost matching node on each stack's path (0: none). Parents precede children.
    let mut anc: Vec<StackId> = vec![0; store.stacks.len()];
    let mut any = false;
    for id in 1..store.stacks.len() {
        let n = store.stacks.node(id as StackId);
        let up = anc.get(n.parent as usize).copied().unwrap_or(0);
        anc[id] = if up != 0 {
            up
        } else if names.test(n.frame) {
            any = true;
            id as StackId
        } else {
            0
        };
    }
    if !any {
        return None;
    }
    let ops = ops_by_corr(store, lo, hi);
    let mut best: Vec<Call> = Vec::new();
    // Spans first.
    for (pi, p) in store.procs.iter().enumerate() {
        let mut tids: Vec<u32> = p.spans.keys().copied().collect();
        tids.sort_unstable();
        let apis: Vec<_> = p.apis().collect();
        for tid in tids {
            let mut calls = Vec::new();
            for s in &p.spans[&tid] {
                if anc.get(s.stack as usize) != Some(&s.stack) {
                    continue;
                }
                let i = apis.partition_point(|a| a.start < s.start);
                let mut c: Option<Call> = None;
                for a in apis[i..].iter().take_while(|a| a.start <= s.end) {
                    if a.tid != tid {
                        continue;
                    }
                    if let Some(&(f, l)) = ops[pi].get(&a.corr) {
                        let c = c.get_or_insert(Call { first: f, last: l });
                        c.first = c.first.min(f);
                        c.last = c.last.max(l);
                    }
                }
                calls.extend(c);
            }
            if calls.len() > best.len() {
                best = calls;
            }
        }
    }
    if best.is_empty() {
        // Launch stacks: runs per thread.
        for (pi, p) in store.procs.iter().enumerate() {
            let mut per_tid: HashMap<u32, (Option<Run>, Vec<Call>)> = HashMap::default();
            for a in p.apis() {
                let Some(&(f, l)) = ops[pi].get(&a.corr).filter(|_| a.corr != 0) else {
                    continue;
                };
                let (run, calls) = per_tid.entry(a.tid).or_default();
                let node = anc.get(a.stack as usize).copied().unwrap_or(0);
                if node == 0 {
                    *run = None;
                    continue;
                }
                let caller = store.stacks.node(node).parent;
                match run {
                    Some(r) if r.caller == caller && !(node == r.entry && r.last != r.entry) => {
                        r.last = node;
                        let c = calls.last_mut().expect("a call is open");
                        c.first = c.first.min(f);
                        c.last = c.last.max(l);
                    }
                    _ => {
                        *run = Some(Run {
                            caller,
                            entry: node,
                            last: node,
                        });
                        calls.push(Call { first: f, last: l });
                    }
                }
            }
            let mut tids: Vec<_> = per_tid.into_iter().collect();
            tids.sort_unstable_by_key(|(t, _)| *t);
            for (_, (_, calls)) in tids {
                if calls.len() > best.len() {
                    best = calls;
                }
            }
        }
    }
    if best.is_empty() {
        return None;
    }
    best.sort_unstable_by_key(|c| c.first);
    let mut r: Vec<(Ns, Ns)> = best.windows(2).map(|w| (w[0].first, w[1].first)).collect();
    let last = best[best.len() - 1];
    r.push((last.first, last.last.max(last.first + 1)));
    Some(r)
}

/// Steps at the occurrences of a GPU op (its full name or its short form, [`short_kernel`]),
/// on the device that runs it most: each occurrence starts a step, which ends where the next
/// starts; the last one spans as many ops as the steps' median and ends with the last of them.
fn op_ranges(store: &Store, lo: Ns, hi: Ns, name: &str) -> Option<Vec<(Ns, Ns)>> {
    let mut names = NameTest::new(store, |n| n == name || short_kernel(n) == name);
    let mut best: Option<(usize, Vec<usize>)> = None;
    for (_, lanes) in store.devices() {
        let mut count = 0;
        for &l in &lanes {
            let lane = &store.lanes[l];
            for o in lane.range(lane.lower_bound(lo)..lane.lower_bound(hi)) {
                count += names.test(o.name) as usize;
            }
        }
        if count > 0 && best.as_ref().is_none_or(|(c, _)| count > *c) {
            best = Some((count, lanes));
        }
    }
    let (_, lanes) = best?;
    let seq = DeviceSeq::new(store, &lanes, lo, hi);
    let at: Vec<usize> = (0..seq.names.len())
        .filter(|&i| names.test(seq.names[i]))
        .collect();
    let mut diffs: Vec<usize> = at.windows(2).map(|w| w[1] - w[0]).collect();
    let d = if diffs.is_empty() {
        seq.names.len() - at[0]
    } else {
        let k = (diffs.len() - 1) / 2;
        *diffs.select_nth_unstable(k).1
    };
    let mut steps: Vec<Range<usize>> = at.windows(2).map(|w| w[0]..w[1]).collect();
    let last = at[at.len() - 1];
    steps.push(last..(last + d).min(seq.names.len()));
    Some(seq.times(&steps))
}

/// One device's ops in the window, all its streams merged by start.
pub struct DeviceSeq {
    /// The device's process.
    pub proc: u32,
    pub starts: Vec<Ns>,
    pub ends: Vec<Ns>,
    pub names: Vec<NameId>,
    pub corrs: Vec<u32>,
}

impl DeviceSeq {
    /// The ops of `lanes` starting in `[lo, hi)`, by start.
    pub fn new(store: &Store, lanes: &[usize], lo: Ns, hi: Ns) -> Self {
        let mut v: Vec<(Ns, Ns, NameId, u32)> = Vec::new();
        for &l in lanes {
            let lane = &store.lanes[l];
            v.extend(
                lane.range(lane.lower_bound(lo)..lane.lower_bound(hi))
                    .map(|o| (o.start, o.end, o.name, o.corr)),
            );
        }
        if lanes.len() > 1 {
            // Each lane is a sorted run: the stable sort merges the runs.
            v.sort_by_key(|o| o.0);
        }
        DeviceSeq {
            proc: lanes.first().map_or(0, |&l| store.lanes[l].key.proc),
            starts: v.iter().map(|o| o.0).collect(),
            ends: v.iter().map(|o| o.1).collect(),
            names: v.iter().map(|o| o.2).collect(),
            corrs: v.iter().map(|o| o.3).collect(),
        }
    }

    /// The launch stack of op `i` (0 when its launch is not known).
    pub fn stack(&self, store: &Store, i: usize) -> StackId {
        let p = &store.procs[self.proc as usize];
        self.corrs
            .get(i)
            .filter(|&&c| c != 0)
            .and_then(|&c| p.api_by_corr(c))
            .map_or(0, |a| a.stack)
    }

    /// The device with the most ops starting in `[lo, hi)`; `None` when there are none.
    pub fn busiest(store: &Store, lo: Ns, hi: Ns) -> Option<Self> {
        let (_, lanes) = store
            .devices()
            .into_iter()
            .map(|(_, lanes)| {
                let n: usize = lanes
                    .iter()
                    .map(|&l| {
                        let lane = &store.lanes[l];
                        lane.lower_bound(hi) - lane.lower_bound(lo)
                    })
                    .sum();
                (n, lanes)
            })
            .filter(|(n, _)| *n > 0)
            .max_by_key(|(n, _)| *n)?;
        Some(Self::new(store, &lanes, lo, hi))
    }

    /// Device idle before each op: its start past the latest end of the ops before it (0 for
    /// the first).
    pub fn idle_before(&self) -> Vec<Ns> {
        let mut max_end = Ns::MIN;
        self.starts
            .iter()
            .zip(&self.ends)
            .map(|(&s, &e)| {
                let idle = if max_end == Ns::MIN {
                    0
                } else {
                    (s - max_end).max(0)
                };
                max_end = max_end.max(e);
                idle
            })
            .collect()
    }

    /// Op index ranges as times: from the first op's start to the next range's first op's
    /// start when it starts where this one ends, else to the latest end of its ops.
    pub fn times(&self, steps: &[Range<usize>]) -> Vec<(Ns, Ns)> {
        steps
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .map(|(k, r)| {
                let s = self.starts[r.start];
                let e = match steps.get(k + 1) {
                    Some(n) if n.start == r.end && r.end < self.starts.len() => self.starts[r.end],
                    _ => self.ends[r.clone()].iter().copied().max().unwrap_or(s),
                };
                (s, e.max(s + 1))
            })
            .collect()
    }
}

/// The line number of a Python frame `path(LINE): func`.
fn frame_line(frame: &str) -> Option<u32> {
    let loc = &frame[..frame.rfind("): ")?];
    loc[loc.rfind('(')? + 1..].parse().ok()
}

/// How the code moved from one launch stack to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackTurn {
    /// Depth of the deepest frame the two stacks share (0: none).
    pub depth: u32,
    /// The first frames in which they differ are the same Python function, at an earlier line
    /// in the second: its loop started over, or its caller called it again (Python frames
    /// carry their current line).
    pub back: bool,
}

/// The turn from stack `a` to stack `b`; `None` when either is unknown (0).
pub fn stack_turn(store: &Store, a: StackId, b: StackId) -> Option<StackTurn> {
    if a == 0 || b == 0 {
        return None;
    }
    let st = &store.stacks;
    let (mut x, mut y) = (a, b);
    while st.node(x).depth > st.node(y).depth {
        x = st.node(x).parent;
    }
    while st.node(y).depth > st.node(x).depth {
        y = st.node(y).parent;
    }
    if x == y {
        // One holds the other.
        return Some(StackTurn {
            depth: st.node(x).depth,
            back: false,
        });
    }
    while st.node(x).parent != st.node(y).parent {
        x = st.node(x).parent;
        y = st.node(y).parent;
    }
    let (fx, fy) = (
        store.names.get(st.node(x).frame),
        store.names.get(st.node(y).frame),
    );
    let back = match (
        split_frame(fx),
        split_frame(fy),
        frame_line(fx),
        frame_line(fy),
    ) {
        (Some(px), Some(py), Some(lx), Some(ly)) => px == py && ly < lx,
        _ => false,
    };
    Some(StackTurn {
        depth: st.node(x).depth - 1,
        back,
    })
}

/// A repeating op sequence: each step as a range of op indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period {
    /// Ops in a typical step.
    pub len: usize,
    pub steps: Vec<Range<usize>>,
}

/// Fewest steps automatic detection gives.
pub const MIN_STEPS: usize = 3;
/// Share of a marker's spacings that must be within tolerance of their median.
const REGULAR: f64 = 0.8;
/// Share of the window's ops a marker's regular run must span.
const COVERAGE: f64 = 0.5;
/// Least mean similarity of successive periods (their op names as multisets).
const FIDELITY: f64 = 0.8;
/// A finer period is systematically broken when its successive periods differ by more than
/// this share of their ops in at least half of the coarser periods.
const DEFECT: f64 = 0.04;
/// Most candidate periods verified against the sequence.
const MAX_VERIFY: usize = 24;

/// Spacing tolerance for a period of `d` ops: 10%, at least one op.
fn tol(d: usize) -> usize {
    (d / 10).max(1)
}

/// A marker: a symbol that occurs once a period in a regular run.
#[derive(Clone, Copy, Debug)]
struct Cand {
    sym: u32,
    /// Median spacing: the period.
    d: usize,
    /// The run: occurrences `lo..=hi` of the symbol's positions.
    lo: usize,
    hi: usize,
    /// Spacings within tolerance in the run.
    good: usize,
}

/// Finds the period of a repeating op sequence (`names`, with the device idle before each op)
/// and returns its steps, or `None` when there is no clear repetition of at least
/// [`MIN_STEPS`] periods.
///
/// 1. Markers: a symbol (op name) occurring at least 3 times whose spacings (in ops) are, in
///    one run from its first to its last spacing within 10% of their median, at least 80%
///    within it, the run spanning at least half of the sequence. Leading and trailing
///    occurrences with other spacings (warm-up iterations that differ, a tail) are left out.
/// 2. Markers are grouped by period, coarsest first; the coarsest whose successive periods
///    are similar (mean multiset similarity of op names ≥ 0.8) is taken.
/// 3. A coarse period can be a multiple of the iteration (a checkpoint every 16 tokens): a
///    finer verified period replaces it when its own periods repeat faithfully inside the
///    coarse ones (no difference above 4% of the ops in half of the coarse periods or more).
///    A decode loop's layers do not replace its tokens: the layer holding the per-token ops
///    differs from the others in every token.
/// 4. Phase: with launch stacks ([`detect_period_with`]), the outermost place where the code
///    goes back to an earlier line once a period starts the steps. Otherwise, among the
///    period's markers (those in a run of about as many periods as the group's lead), the one
///    with the longest median device idle before it (a loop's sync or host work between
///    iterations); on a tie (a busy GPU), the one that occurs first.
///
/// Steps run from one boundary to the next. Before the first boundary and after the last, a
/// period's worth of ops (less the tolerance) that is similar to its neighbour (≥ 0.8) is a step
/// too: the first and last iterations when the boundary marker is not the loop's first op. The
/// last step ends with the last op of its period, not at the window's end. Costs O(n) beyond a
/// sort of the markers, with at most 24 verifications of O(n).
pub fn detect_period(names: &[u32], idle_before: &[Ns]) -> Option<Period> {
    detect_period_with(names, idle_before, |_| None)
}

/// [`detect_period`], with the launch stacks' say on the phase: `turn(i)` is how the code moved
/// from op `i - 1`'s launch to op `i`'s ([`stack_turn`]; `None` when unknown). When, at some
/// depth, the code goes back to an earlier line once in most periods (the loop's body starting
/// over, a function called again from its loop), the outermost such depth starts the steps, at
/// whichever op it comes, marker or not, and so does any turn above that depth (the same code
/// called from another loop); otherwise the markers' idle rule decides.
pub fn detect_period_with(
    names: &[u32],
    idle_before: &[Ns],
    mut turn: impl FnMut(usize) -> Option<StackTurn>,
) -> Option<Period> {
    let n = names.len();
    if n < 2 * MIN_STEPS {
        return None;
    }
    // Dense symbols.
    let max = names.iter().copied().max().unwrap_or(0) as usize;
    let mut dense: Vec<u32> = Vec::with_capacity(n);
    let mut m = 0u32;
    if max < (1 << 24) {
        let mut map = vec![u32::MAX; max + 1];
        for &s in names {
            let e = &mut map[s as usize];
            if *e == u32::MAX {
                *e = m;
                m += 1;
            }
            dense.push(*e);
        }
    } else {
        let mut map: HashMap<u32, u32> = HashMap::default();
        for &s in names {
            let e = *map.entry(s).or_insert_with(|| {
                m += 1;
                m - 1
            });
            dense.push(e);
        }
    }
    let m = m as usize;
    // Positions grouped by symbol.
    let mut off = vec![0usize; m + 1];
    for &s in &dense {
        off[s as usize + 1] += 1;
    }
    for i in 0..m {
        off[i + 1] += off[i];
    }
    let mut pos = vec![0u32; n];
    let mut fill = off.clone();
    for (i, &s) in dense.iter().enumerate() {
        pos[fill[s as usize]] = i as u32;
        fill[s as usize] += 1;
    }
    let positions = |s: u32| &pos[off[s as usize]..off[s as usize + 1]];

    let mut scratch: Vec<usize> = Vec::new();
    let mut cands: Vec<Cand> = (0..m as u32)
        .filter_map(|s| marker(s, positions(s), n, &mut scratch))
        .collect();
    if cands.is_empty() {
        return None;
    }
    cands.sort_unstable_by(|a, b| b.d.cmp(&a.d).then(b.good.cmp(&a.good)));
    // Groups of markers with about the same period, coarsest first; each led by the marker
    // with the most regular spacings.
    let mut groups: Vec<Vec<Cand>> = Vec::new();
    for c in cands {
        match groups.last_mut() {
            Some(g) if g[0].d.abs_diff(c.d) <= tol(g[0].d) => g.push(c),
            _ => groups.push(vec![c]),
        }
    }
    for g in &mut groups {
        g.sort_by(|a, b| b.good.cmp(&a.good).then(a.d.cmp(&b.d)));
    }
    let mut counts = vec![0u32; m];
    let bounds = |c: &Cand| -> Vec<usize> {
        positions(c.sym)[c.lo..=c.hi]
            .iter()
            .map(|&p| p as usize)
            .collect()
    };
    let mut verified = 0;
    let mut chosen: Option<(usize, Vec<usize>)> = None;
    for (gi, g) in groups.iter().enumerate() {
        if verified >= MAX_VERIFY {
            break;
        }
        verified += 1;
        let b = bounds(&g[0]);
        if fidelity(&dense, &b, &mut counts) >= FIDELITY {
            chosen = Some((gi, b));
            break;
        }
    }
    let (mut gi, mut coarse) = chosen?;
    // Refinement to a finer period that the coarse one is a multiple of.
    let mut fi = gi + 1;
    while fi < groups.len() && verified < MAX_VERIFY {
        verified += 1;
        let fb = bounds(&groups[fi][0]);
        if fidelity(&dense, &fb, &mut counts) >= FIDELITY
            && !systematic(&dense, &coarse, &fb, &mut counts)
        {
            gi = fi;
            coarse = fb;
        }
        fi += 1;
    }
    // Phase among the markers: the longest idle, then the first to occur.
    let g = &groups[gi];
    let lead = g[0].hi - g[0].lo + 1;
    let mut best: Option<((std::cmp::Reverse<Ns>, usize), Cand)> = None;
    for c in g.iter().filter(|c| (c.hi - c.lo + 1) * 10 >= lead * 9) {
        let p = &positions(c.sym)[c.lo..=c.hi];
        let idle = quantile(
            p.iter()
                .map(|&i| idle_before.get(i as usize).copied().unwrap_or(0))
                .collect(),
            0.5,
        );
        let key = (std::cmp::Reverse(idle), p[0] as usize);
        if best.as_ref().is_none_or(|(k, _)| key < *k) {
            best = Some((key, *c));
        }
    }
    let (_, c) = best.expect("the group's lead qualifies");
    let (d, t) = (c.d, tol(c.d));
    let mut b = bounds(&c);
    // Phase from the stacks, first: the outermost loop-back found once in most periods.
    if let Some(lb) = loop_back_bounds(&b, d, n, &mut turn) {
        b = lb;
    }
    let mut steps: Vec<Range<usize>> = Vec::with_capacity(b.len() + 1);
    let first = b[0];
    if first + t >= d {
        let s = first.saturating_sub(d);
        if similarity(&dense[s..first], &dense[first..b[1]], &mut counts) >= FIDELITY {
            steps.push(s..first);
        }
    }
    steps.extend(b.windows(2).map(|w| w[0]..w[1]));
    let last = b[b.len() - 1];
    if n - last + t >= d {
        let e = (last + d).min(n);
        let prev = &dense[b[b.len() - 2]..last];
        if similarity(&dense[last..e], prev, &mut counts) >= FIDELITY {
            steps.push(last..e);
        }
    }
    (steps.len() >= MIN_STEPS).then_some(Period { len: c.d, steps })
}

/// Boundaries where the code goes back to an earlier line at the outermost depth at which it
/// does so exactly once in at least 80% of the periods between the marker boundaries `b`, or
/// turns above that depth (looked for from half a period before the first boundary to a
/// period after the last); `None` when no depth does.
fn loop_back_bounds(
    b: &[usize],
    d: usize,
    n: usize,
    turn: &mut impl FnMut(usize) -> Option<StackTurn>,
) -> Option<Vec<usize>> {
    let lo = b[0].saturating_sub(d / 2);
    let hi = (b[b.len() - 1] + d).min(n);
    let turns: Vec<(usize, StackTurn)> = (lo..hi).filter_map(|i| Some((i, turn(i)?))).collect();
    let periods = b.len() - 1;
    let mut backs: Vec<u32> = turns
        .iter()
        .filter(|(_, t)| t.back)
        .map(|(_, t)| t.depth)
        .collect();
    backs.sort_unstable();
    let mut depths: Vec<(u32, usize)> = Vec::new();
    for x in backs {
        match depths.last_mut() {
            Some((d, c)) if *d == x => *c += 1,
            _ => depths.push((x, 1)),
        }
    }
    for (depth, _) in depths
        .into_iter()
        .filter(|&(_, c)| c as f64 >= REGULAR * periods as f64)
        .take(3)
    {
        let pos: Vec<usize> = turns
            .iter()
            .filter(|(_, t)| t.depth < depth || (t.back && t.depth == depth))
            .map(|&(i, _)| i)
            .collect();
        let mut once = 0;
        for w in b.windows(2) {
            let i = pos.partition_point(|&p| p < w[0]);
            let j = pos.partition_point(|&p| p < w[1]);
            once += (j - i == 1) as usize;
        }
        if once as f64 >= REGULAR * periods as f64 && pos.len() >= 2 {
            return Some(pos);
        }
    }
    None
}

/// Whether a symbol's occurrences make a marker (see [`detect_period`]).
fn marker(sym: u32, p: &[u32], n: usize, diffs: &mut Vec<usize>) -> Option<Cand> {
    if p.len() < MIN_STEPS {
        return None;
    }
    diffs.clear();
    diffs.extend(p.windows(2).map(|w| (w[1] - w[0]) as usize));
    let mut sorted = diffs.clone();
    let k = (sorted.len() - 1) / 2;
    let d = *sorted.select_nth_unstable(k).1;
    let t = tol(d);
    let good = |x: usize| x.abs_diff(d) <= t;
    let a = diffs.iter().position(|&x| good(x))?;
    let z = diffs.iter().rposition(|&x| good(x))?;
    let periods = z - a + 1;
    let ok = diffs[a..=z].iter().filter(|&&x| good(x)).count();
    if periods + 1 < MIN_STEPS || (ok as f64) < REGULAR * periods as f64 {
        return None;
    }
    let span = (p[z + 1] - p[a]) as usize + d;
    if (span as f64) < COVERAGE * n as f64 {
        return None;
    }
    Some(Cand {
        sym,
        d,
        lo: a,
        hi: z + 1,
        good: ok,
    })
}

/// Multiset similarity of two runs of symbols: shared ops over the longer run's length.
fn similarity(a: &[u32], b: &[u32], counts: &mut [u32]) -> f64 {
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    for &s in a {
        counts[s as usize] += 1;
    }
    let mut shared = 0;
    for &s in b {
        let c = &mut counts[s as usize];
        if *c > 0 {
            *c -= 1;
            shared += 1;
        }
    }
    for &s in a {
        counts[s as usize] = 0;
    }
    shared as f64 / longest as f64
}

/// Mean similarity of successive periods between boundaries.
fn fidelity(seq: &[u32], b: &[usize], counts: &mut [u32]) -> f64 {
    if b.len() < 3 {
        // Two boundaries make one full period: nothing to compare it with; the tail after
        // the last boundary stands in for the second.
        if b.len() == 2 {
            let d = b[1] - b[0];
            let tail = &seq[b[1]..(b[1] + d).min(seq.len())];
            return similarity(&seq[b[0]..b[1]], tail, counts);
        }
        return 0.0;
    }
    let mut sum = 0.0;
    for w in b.windows(3) {
        sum += similarity(&seq[w[0]..w[1]], &seq[w[1]..w[2]], counts);
    }
    sum / (b.len() - 2) as f64
}

/// Whether the finer periods (boundaries `fine`) differ systematically inside the coarse
/// ones: in at least half of the coarse periods that hold finer pairs, some successive finer
/// periods differ by more than [`DEFECT`] of their ops.
fn systematic(seq: &[u32], coarse: &[usize], fine: &[usize], counts: &mut [u32]) -> bool {
    let mut worst = vec![0f64; coarse.len().saturating_sub(1)];
    let mut seen = vec![false; worst.len()];
    for w in fine.windows(3) {
        let j = coarse.partition_point(|&c| c <= w[0]);
        if j == 0 || j >= coarse.len() {
            continue;
        }
        let d = 1.0 - similarity(&seq[w[0]..w[1]], &seq[w[1]..w[2]], counts);
        worst[j - 1] = worst[j - 1].max(d);
        seen[j - 1] = true;
    }
    let held = seen.iter().filter(|&&s| s).count();
    let broken = worst.iter().filter(|&&d| d > DEFECT).count();
    held == 0 || broken * 2 >= held
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `reps` copies of `body`, after `prefix`.
    fn repeat(prefix: &[u32], body: &[u32], reps: usize) -> Vec<u32> {
        let mut v = prefix.to_vec();
        for _ in 0..reps {
            v.extend_from_slice(body);
        }
        v
    }

    fn lens(p: &Period) -> Vec<usize> {
        p.steps.iter().map(|r| r.len()).collect()
    }

    #[test]
    fn exact_repetition_gives_every_period() {
        let body: Vec<u32> = (1..=20).collect();
        let seq = repeat(&[], &body, 10);
        let p = detect_period(&seq, &vec![0; seq.len()]).unwrap();
        assert_eq!(p.len, 20);
        assert_eq!(lens(&p), vec![20; 10]);
        assert_eq!(p.steps[0].start, 0, "busy GPU: the first op of the period");
    }

    #[test]
    fn phase_follows_the_longest_idle() {
        let body: Vec<u32> = (1..=10).collect();
        let seq = repeat(&[], &body, 8);
        // Idle before symbol 4 (index 3 in the body) in every period.
        let idle: Vec<Ns> = (0..seq.len())
            .map(|i| if i % 10 == 3 { 500 } else { 10 })
            .collect();
        let p = detect_period(&seq, &idle).unwrap();
        assert_eq!(p.steps[0].start, 3);
        assert!(p.steps.iter().all(|r| seq[r.start] == 4));
        // 8 periods from index 3: 7 full ones, and the last 7 ops are less than a period.
        assert_eq!(lens(&p), vec![10; 7]);
    }

    #[test]
    fn layers_do_not_replace_tokens() {
        // 12 layers of 6 ops, then 4 per-token ops: tokens, not layers.
        let mut token = Vec::new();
        for _ in 0..12 {
            token.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
        }
        token.extend_from_slice(&[7, 8, 9, 10]);
        let seq = repeat(&[], &token, 30);
        let p = detect_period(&seq, &vec![0; seq.len()]).unwrap();
        assert_eq!(p.len, 76);
        assert_eq!(p.steps.len(), 30);
    }

    #[test]
    fn a_multiple_of_the_period_is_refined() {
        // An op every 5 tokens (3 occurrences cover most of the run): still tokens.
        let token: Vec<u32> = (1..=40).collect(); // 1 op in 41 is 2.4% of a token
        let mut seq = Vec::new();
        for t in 0..18 {
            if t % 5 == 2 {
                seq.push(99);
            }
            seq.extend_from_slice(&token);
        }
        let p = detect_period(&seq, &vec![0; seq.len()]).unwrap();
        assert_eq!(p.len, 40);
        assert!((17..=18).contains(&p.steps.len()), "{}", p.steps.len());
    }

    #[test]
    fn random_sequence_has_no_period() {
        let mut x: u64 = 0x9e3779b97f4a7c15;
        let seq: Vec<u32> = (0..20_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 40) as u32
            })
            .collect();
        assert_eq!(detect_period(&seq, &vec![0; seq.len()]), None);
        assert_eq!(detect_period(&[1, 2, 1, 2], &[0; 4]), None);
        // Two periods are not a repetition.
        let two = repeat(&[], &(1..=30).collect::<Vec<_>>(), 2);
        assert_eq!(detect_period(&two, &vec![0; two.len()]), None);
    }

    #[test]
    fn quantiles_are_exact_nearest_rank() {
        assert_eq!(quantile(vec![5, 1, 3, 2, 4], 0.5), 3);
        assert_eq!(quantile(vec![4, 1, 3, 2], 0.5), 2);
        assert_eq!(quantile((1..=10).collect(), 0.9), 9);
        assert_eq!(quantile((1..=11).collect(), 0.9), 10);
        assert_eq!(quantile(vec![], 0.5), 0);
        assert_eq!(quantile(vec![7], 0.9), 7);
    }

    /// Looking up from the last answer finds what a binary search finds, in order or not.
    #[test]
    fn steps_are_found_from_the_last_one_as_by_search() {
        let mut st = steps_of(&[10, 5, 30, 1, 7, 100]);
        // A hole between two steps.
        st.steps[2].end -= 4;
        let mut at = 0;
        let times: Vec<Ns> = (-3..160).chain([50, 2, 200, 0, 17, 17, 44]).collect();
        for t in times {
            assert_eq!(st.step_of_from(t, &mut at), st.step_of(t), "t {t}");
        }
    }

    fn steps_of(walls: &[Ns]) -> Steps {
        let mut t = 0;
        let steps = walls
            .iter()
            .map(|&w| {
                let s = Step {
                    start: t,
                    end: t + w,
                    ..Default::default()
                };
                t += w;
                s
            })
            .collect();
        Steps {
            source: StepSource::Auto,
            steps,
            devices: 1,
        }
    }

    #[test]
    fn steady_state_skips_slow_leading_steps_only() {
        let s = steps_of(&[1000, 400, 100, 100, 110, 90, 500, 100]);
        assert_eq!(s.median_ns(), 100);
        assert_eq!(s.steady(), 2..8);
        assert_eq!(steps_of(&[100, 100, 100]).steady(), 0..3);
        assert_eq!(steps_of(&[]).steady(), 0..0);
    }

    #[test]
    fn step_of_finds_the_holding_step() {
        let mut s = steps_of(&[10, 10, 10]);
        s.steps[2].start = 25; // a hole from 20 to 25
        assert_eq!(s.step_of(0), Some(0));
        assert_eq!(s.step_of(9), Some(0));
        assert_eq!(s.step_of(10), Some(1));
        assert_eq!(s.step_of(22), None);
        assert_eq!(s.step_of(25), Some(2));
        assert_eq!(s.step_of(30), None);
        assert_eq!(s.step_of(-1), None);
    }

    #[test]
    fn python_frames_match_by_function_name() {
        let f = "torch/nn/modules/module.py(1790): Module._call_impl";
        assert!(frame_matches(f, "_call_impl"));
        assert!(frame_matches(f, "Module._call_impl"));
        assert!(frame_matches(f, "module.py:_call_impl"));
        assert!(frame_matches(f, "modules/module.py:Module._call_impl"));
        assert!(frame_matches(f, f));
        assert!(!frame_matches(f, "call_impl"));
        assert!(!frame_matches(f, "odule.py:_call_impl"));
        assert!(!frame_matches(f, "other.py:_call_impl"));
        assert!(!frame_matches(f, "Module"));
        let g = "launchbound.py(25): main.<locals>.late_allreduce";
        assert!(frame_matches(g, "late_allreduce"));
        assert!(frame_matches("probes/launchbound.py(6): rope", "rope"));
        assert!(!frame_matches("aten::mm", "mm"));
        assert!(!frame_matches(
            "<built-in method cat of type object>",
            "cat"
        ));
    }

    #[test]
    fn short_op_names() {
        assert_eq!(
            short_kernel("void at::native::vectorized_elementwise_kernel<4, F>(int, F)"),
            "vectorized_elementwise_kernel"
        );
        assert_eq!(short_kernel("Memset (Device)"), "Memset");
    }
}

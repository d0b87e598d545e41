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
//!   delimits them, each occurrence starting a step; else, with Python stacks on the launches,
//!   the calls of the outermost function called once an iteration that holds most of the GPU
//!   work (the program's structure, see the `structure` module); else, for captures without
//!   stacks, the period of the repeating op sequence ([`detect_period`]): guessed, so the
//!   report says so and names the op that starts each step (`--step NAME`, when that op gives
//!   the same steps). A guessed step of a handful of ops next to a median of hundreds (less
//!   than [`SLIVER`] of it) is merged into the step before it (or after it, for the first).
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

mod named;
mod period;
mod seq;
mod step;
mod structure;

pub use named::{frame_matches, range_steps};
pub use period::{detect_period, detect_period_with, stack_turn, Period, StackTurn, MIN_STEPS};
pub use seq::{busiest_lanes, DeviceSeq};
pub use step::{quantile, Step, StepSource, Steps, StepsJson, WARMUP_FACTOR};
pub use structure::COVER;

use named::{function_ranges, op_ranges, span_ranges};

use rustc_hash::FxHashMap as HashMap;

use crate::analysis::gaps::device_idle;
use crate::model::ranges::family;
use std::ops::Range;

use crate::frames::short_kernel;
use crate::model::records::{NameId, Ns, StackId};
use crate::model::store::Store;
use crate::model::window::Window;

/// A guessed step with fewer ops than this share of the median step's is a sliver.
pub const SLIVER: f64 = 0.25;

/// Where the steady steps of window `w` lie: the first steady step's start and the last
/// step's end, if steps are found and some are steady (the demo replays them lap after lap:
/// `sources::demo::Steady`).
pub fn steady_span(store: &Store, w: Window) -> Option<(Ns, Ns)> {
    let s = find(store, w, None)?;
    let steady = s.steady();
    let last = s.steps.last()?;
    (!steady.is_empty()).then(|| (s.steps[steady.start].start, last.end))
}

/// Finds the steps of window `w` as the module's comment says, from the ranges that overlap
/// it (clipped to it) or the ops that start in it. `Window::all()` is the whole capture. The window is first clipped to the capture's span (`Store::span`: its ops', or
/// the window a source fixed): a CPU span or NVTX range that starts before the first GPU op
/// or ends after the last (ranges of a whole run whose first ops were evicted, say) does not
/// make steps outside it, so the steps never add up to more than the capture. `None` when
/// there are none: no span, call or op of that name, or no clear repetition.
pub fn find(store: &Store, w: Window, by: Option<&str>) -> Option<Steps> {
    let (lo, hi) = (w.lo(), w.hi());
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
                return from_ranges(store, src, ranges, lo, hi);
            }
            // Its launches alone first; where they tell too few calls apart, with its syncs
            // and copies as turns too, if that tells more.
            let plain = function_ranges(store, lo, hi, name, false);
            let r = match plain {
                Some(r) if r.len() >= period::MIN_STEPS => Some(r),
                plain => {
                    let n = plain.as_ref().map_or(0, Vec::len);
                    function_ranges(store, lo, hi, name, true)
                        .filter(|m| m.len() > n)
                        .or(plain)
                }
            };
            if let Some(r) = r {
                return from_ranges(store, StepSource::Function(name.to_string()), r, lo, hi);
            }
            let r = op_ranges(store, lo, hi, name)?;
            from_ranges(store, StepSource::Op(name.to_string()), r, lo, hi)
        }
        None => {
            let ranges = span_ranges(store, lo, hi, |s| s.starts_with("ProfilerStep#"));
            if !ranges.is_empty() {
                return from_ranges(store, StepSource::ProfilerStep, ranges, lo, hi);
            }
            if let Some((name, r)) = range_steps(store, lo, hi) {
                return from_ranges(store, StepSource::Spans(name), r, lo, hi);
            }
            if let Some((name, r)) = structure::structure_steps(store, lo, hi) {
                return from_ranges(store, StepSource::Structure(name), r, lo, hi);
            }
            // The period is found on the ops' names, idle and stacks alone; their times and
            // the rest are listed once it is found (memory: the store's lanes hold them all).
            let lanes = busiest_lanes(store, lo, hi)?;
            let (names, idle) = DeviceSeq::names_idle(store, &lanes, lo, hi);
            // The stacks are listed when first asked for, after the markers' lists are freed.
            let mut stacks: Option<Vec<StackId>> = None;
            let mut memo: HashMap<(StackId, StackId), Option<StackTurn>> = HashMap::default();
            let p = detect_period_with(names, &idle, |i| {
                if store.stacks.len() <= 1 {
                    return None;
                }
                let stacks = stacks.get_or_insert_with(|| DeviceSeq::stacks(store, &lanes, lo, hi));
                if i == 0 || i >= stacks.len() {
                    return None;
                }
                let key = (stacks[i - 1], stacks[i]);
                *memo
                    .entry(key)
                    .or_insert_with(|| stack_turn(store, key.0, key.1))
            });
            drop((idle, stacks, memo));
            let steps = merge_slivers(p?.steps);
            let heads = seq::Heads::of(store, &lanes, lo, hi, &steps);
            let suggest = suggest_span(store, &heads.stacks, lo, hi).or_else(|| {
                suggest_op(store, &heads.names, |f| {
                    seq::each_name(store, &lanes, lo, hi, f)
                })
            });
            drop(steps);
            let mut found = from_ranges(store, StepSource::Auto, heads.times, lo, hi)?;
            found.suggest = suggest;
            Some(found)
        }
    }
}

/// Steps from ranges (CPU spans, NVTX ranges, anything with a start and an end): sorted, each
/// clipped to `[lo, hi)` and to the next one's start, empty ones dropped, then measured. `None`
/// when none is left.
pub fn from_ranges(
    store: &Store,
    source: StepSource,
    ranges: Vec<(Ns, Ns)>,
    lo: Ns,
    hi: Ns,
) -> Option<Steps> {
    // Clipped in place: a capture's steps can be a third of its ops.
    let mut r = ranges;
    for x in &mut r {
        *x = (x.0.max(lo), x.1.min(hi));
    }
    r.retain(|(s, e)| e > s);
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
        suggest: None,
    })
}

/// Guessed steps (op index ranges, in order) with the slivers merged into a neighbour that
/// touches them, or dropped when none does.
fn merge_slivers(steps: Vec<Range<usize>>) -> Vec<Range<usize>> {
    let median = quantile(steps.iter().map(|r| r.len() as Ns).collect(), 0.5);
    let sliver = |r: &Range<usize>| (r.len() as f64) < SLIVER * median as f64;
    let mut out: Vec<Range<usize>> = Vec::with_capacity(steps.len());
    // A leading sliver waits for the step after it.
    let mut pending: Option<Range<usize>> = None;
    for r in steps {
        if sliver(&r) {
            match out.last_mut() {
                Some(prev) if prev.end == r.start => prev.end = r.end,
                _ => {
                    pending = match pending {
                        Some(p) if p.end == r.start => Some(p.start..r.end),
                        _ => Some(r),
                    }
                }
            }
            continue;
        }
        let start = match pending.take() {
            Some(p) if p.end == r.start => p.start,
            _ => r.start,
        };
        out.push(start..r.end);
    }
    if out.is_empty() {
        out.extend(pending);
    }
    out
}

/// The `--step` name that gives guessed steps from the CPU: the outermost frame of the launch
/// stack of the op that starts most of them (a Kineto `cpu_op` such as `aten::embedding`), when
/// the spans of that name are as many as the steps (±1).
fn suggest_span(store: &Store, firsts: &[StackId], lo: Ns, hi: Ns) -> Option<String> {
    let steps = firsts;
    let mut roots: HashMap<NameId, usize> = HashMap::default();
    for &first in firsts {
        let mut s = first;
        if s == 0 {
            continue;
        }
        while store.stacks.node(s).depth > 1 {
            s = store.stacks.node(s).parent;
        }
        *roots.entry(store.stacks.node(s).frame).or_default() += 1;
    }
    let (&id, &n) = roots
        .iter()
        .max_by_key(|&(&id, &n)| (n, std::cmp::Reverse(id)))?;
    if n * 2 < steps.len() {
        return None;
    }
    let name = store.names.get(id);
    let spans = span_ranges(store, lo, hi, |s| s == name).len();
    (spans.abs_diff(steps.len()) <= 1).then(|| name.to_string())
}

/// The `--step` name that gives guessed steps: the GPU op that starts most of them, when it
/// occurs once a step (as many times as there are steps, ±1); its short name when that is
/// as telling, else its full name.
fn suggest_op(
    store: &Store,
    steps: &[NameId],
    each_name: impl FnOnce(&mut dyn FnMut(NameId)),
) -> Option<String> {
    let mut firsts: HashMap<NameId, usize> = HashMap::default();
    for &first in steps {
        *firsts.entry(first).or_default() += 1;
    }
    let (&id, &n) = firsts
        .iter()
        .max_by_key(|&(&id, &n)| (n, std::cmp::Reverse(id)))?;
    if n * 2 < steps.len() {
        return None;
    }
    let full = store.names.get(id);
    let short = short_kernel(full);
    let (mut exact, mut by_short) = (0usize, 0usize);
    // 0: not looked at, 1: another short name, 2: the same.
    let mut memo: Vec<u8> = vec![0; store.names.len()];
    each_name(&mut |x| {
        exact += (x == id) as usize;
        if let Some(m) = memo.get_mut(x as usize) {
            if *m == 0 {
                *m = 1 + (short_kernel(store.names.get(x)) == short) as u8;
            }
            by_short += (*m == 2) as usize;
        }
    });
    let once = |k: usize| k.abs_diff(steps.len()) <= 1;
    if once(by_short) {
        Some(short)
    } else if once(exact) {
        Some(full.to_string())
    } else {
        None
    }
}

/// Whether a lane has an op overlapping `[lo, hi)`.
fn lane_active(store: &Store, lane: usize, lo: Ns, hi: Ns) -> bool {
    let l = &store.lanes[lane];
    let i = l.lower_bound(lo);
    i < l.lower_bound(hi) || (i > 0 && l.op(i - 1).end > lo)
}

#[cfg(test)]
mod tests;

//! NVTX ranges, and the annotations of traces that are the same thing (Kineto's
//! `user_annotation`, `gpu_user_annotation`): per thread, sorted by start, each with the number
//! of ranges of its thread open around it.
//!
//! Every source puts them in [`Process::ranges`] (GPU-side ones in [`Process::gpu_ranges`]),
//! where the timeline's ranges lane and the automatic steps read them:
//!
//! - live collectors and recordings, whose launches carry their own Python stacks, call
//!   [`Store::add_ranges`] as ranges arrive (a range is sent once it closed, after the calls it
//!   encloses): it also puts the ranges around each enclosed call as the outermost frames of
//!   that call's stack, each by its [`family`] (`step 12` is the frame `step #`, so that the
//!   tree sums every step's gaps under one node), and the call tree reads
//!   `step # › layer # › <module> › … › launch`;
//! - traces, whose calls get their stacks from CPU spans that already hold the annotations
//!   (Kineto's `finish`, the nsys importer), call [`Process::set_ranges`], which leaves stacks
//!   alone.

use std::cmp::Reverse;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::records::{ApiCall, NameId, Ns};

/// One range of a thread (or, in `gpu_ranges`, of a stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: Ns,
    pub end: Ns,
    pub name: NameId,
    /// NVTX domain's name (0: NVTX's default domain, and traces' annotations).
    pub domain: NameId,
    /// Ranges of the same thread open when this one opened (0: outermost). Set by the store.
    pub depth: u16,
}

impl Range {
    pub fn new(start: Ns, end: Ns, name: NameId, domain: NameId) -> Range {
        Range {
            start,
            end: end.max(start),
            name,
            domain,
            depth: 0,
        }
    }
}

/// Most ranges kept per thread; past it the oldest quarter leaves, counted in
/// `Store::evicted_ranges`.
pub const MAX_THREAD_RANGES: usize = 1 << 20;

/// Ranges sort by start, the longer first, so that an enclosing range comes before those it
/// encloses.
pub(super) fn key(r: &Range) -> (Ns, Reverse<Ns>) {
    (r.start, Reverse(r.end))
}

/// Indices of the ranges of `v` open at `v[i].start` (or at `t` when `i == v.len()`), outermost
/// first, found by walking back from `i`: nothing before an outermost range that has closed by
/// then can still be open.
pub(super) fn open_before(v: &[Range], i: usize, t: Ns) -> Vec<usize> {
    let mut open = Vec::new();
    for j in (0..i).rev() {
        if v[j].end > t {
            open.push(j);
        }
        if v[j].depth == 0 {
            break;
        }
    }
    open.reverse();
    open
}

/// Sets the depths of `v[from..]` (`v` sorted; those before `from` already nested).
pub(super) fn nest_from(v: &mut [Range], from: usize) {
    if from >= v.len() {
        return;
    }
    let mut open = open_before(v, from, v[from].start);
    for k in from..v.len() {
        let s = v[k].start;
        open.retain(|&j| v[j].end > s);
        v[k].depth = open.len().min(u16::MAX as usize) as u16;
        open.push(k);
    }
}

/// Sorts and nests a thread's ranges.
pub(super) fn nested(mut v: Vec<Range>) -> Vec<Range> {
    v.sort_by_key(key);
    nest_from(&mut v, 0);
    v
}

/// What a process whose ranges become frames of its calls' stacks keeps: its calls' sequence
/// numbers per thread, by start (to find the calls a new range encloses), each range name's
/// frame (its family), the names that are range frames (to take the old ones off a stack
/// before the new ones go on), and each thread's latest range end (a call after it is in no
/// known range).
#[derive(Clone, Debug, Default)]
pub struct RangeFrames {
    pub(super) calls: HashMap<u32, Vec<u64>>,
    pub(super) frame_of: HashMap<NameId, NameId>,
    pub(super) names: HashSet<NameId>,
    pub(super) last_end: HashMap<u32, Ns>,
}

impl RangeFrames {
    /// Indexes a call stored as `seq`.
    pub(crate) fn add_call(&mut self, seq: u64, a: &ApiCall, start_of: impl Fn(u64) -> Ns) {
        let v = self.calls.entry(a.tid).or_default();
        if v.last().is_none_or(|&s| start_of(s) <= a.start) {
            v.push(seq);
        } else {
            let i = v.partition_point(|&s| start_of(s) <= a.start);
            v.insert(i, seq);
        }
    }
}

/// A range's name as a family: trailing digits (an iteration's number) become `#`, so that
/// `step 12` reads `step #`, `iteration_3` `iteration_#` and `ProfilerStep#4` `ProfilerStep#`.
pub fn family(name: &str) -> std::borrow::Cow<'_, str> {
    let base = name.trim_end_matches(|c: char| c.is_ascii_digit());
    if base.len() == name.len() || base.is_empty() {
        return name.into();
    }
    if base.ends_with('#') {
        base.into()
    } else {
        format!("{base}#").into()
    }
}

/// Whether a range family names a whole iteration: `step`, `iteration`, `iter`, `batch` or a
/// `…_step` of training, decoding or generation, with or without its number.
pub fn is_step_name(family: &str) -> bool {
    let base = family
        .trim_end_matches(['#', ' ', '_', '-', ':', '.', '='])
        .to_ascii_lowercase();
    matches!(
        base.as_str(),
        "step"
            | "iteration"
            | "iter"
            | "batch"
            | "train_step"
            | "training_step"
            | "decode_step"
            | "eval_step"
            | "generate_step"
            | "inference_step"
            | "profilerstep"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::process::Process;
    use crate::model::records::ApiKind;
    use crate::model::store::Store;

    fn r(start: Ns, end: Ns, name: NameId) -> Range {
        Range::new(start, end, name, 0)
    }

    #[test]
    fn depths_count_the_enclosing_ranges() {
        let v = nested(vec![
            r(10, 20, 2),
            r(0, 100, 1),
            r(20, 30, 2),
            r(22, 25, 3),
            r(100, 200, 1),
        ]);
        let d: Vec<(Ns, u16)> = v.iter().map(|x| (x.start, x.depth)).collect();
        assert_eq!(d, [(0, 0), (10, 1), (20, 1), (22, 2), (100, 0)]);
        let open: Vec<Ns> = open_before(&v, 4, 24).iter().map(|&j| v[j].start).collect();
        assert_eq!(open, [0, 20, 22]);
        let over: Vec<(usize, Ns)> = Process::overlapping(&v, 23, 101)
            .map(|(i, x)| (i, x.start))
            .collect();
        assert_eq!(over, [(0, 0), (2, 20), (3, 22), (4, 100)]);
    }

    #[test]
    fn families_and_step_names() {
        assert_eq!(family("step 12"), "step #");
        assert_eq!(family("iteration_3"), "iteration_#");
        assert_eq!(family("ProfilerStep#4"), "ProfilerStep#");
        assert_eq!(family("forward"), "forward");
        assert_eq!(family("42"), "42");
        for n in [
            "step #",
            "step",
            "Iteration #",
            "decode_step",
            "ProfilerStep#",
            "iter_#",
        ] {
            assert!(is_step_name(n), "{n}");
        }
        for n in ["forward", "Optimizer.step#SGD.step", "layer #", "steps"] {
            assert!(!is_step_name(n), "{n}");
        }
    }

    /// Ranges that close after the calls they enclose become those calls' outermost frames, by
    /// family; an outer range arriving later goes around the inner ones; a call after every
    /// known range keeps its stack, and one arriving after its range gets it.
    #[test]
    fn ranges_become_the_outermost_frames_of_the_calls_they_enclose() {
        let mut st = Store::default();
        let p = st.add_process(1, -1, "p");
        let f = st.names.intern("model.py(3): forward");
        let py = st.stacks.intern(0, f);
        for (i, t) in [5, 15, 25, 150].into_iter().enumerate() {
            st.add_api(
                p,
                ApiCall {
                    start: t,
                    end: t + 1,
                    corr: i as u32 + 1,
                    tid: 7,
                    name: 0,
                    stack: py,
                    kind: ApiKind::Launch,
                },
            );
        }
        let step = st.names.intern("step");
        let (l1, l2) = (st.names.intern("layer 1"), st.names.intern("layer 2"));
        let frames = |st: &Store, corr: u32| -> Vec<String> {
            let a = st.procs[0].api_by_corr(corr).unwrap();
            st.frame_strings(a.stack)
        };
        st.add_ranges(p, 7, vec![r(10, 20, l1), r(20, 30, l2)]);
        assert_eq!(frames(&st, 2), ["layer #", "model.py(3): forward"]);
        assert_eq!(frames(&st, 1), ["model.py(3): forward"]);
        st.add_ranges(p, 7, vec![r(0, 100, step)]);
        assert_eq!(frames(&st, 1), ["step", "model.py(3): forward"]);
        assert_eq!(frames(&st, 2), ["step", "layer #", "model.py(3): forward"]);
        assert_eq!(frames(&st, 3), frames(&st, 2), "both layers are one frame");
        assert_eq!(frames(&st, 4), ["model.py(3): forward"]);
        assert_eq!(st.with_range_frames(p, 7, 200, py), py, "after every range");
        assert_eq!(st.with_range_frames(p, 8, 15, py), py, "another thread");
        let late = st.with_range_frames(p, 7, 27, py);
        assert_eq!(
            st.frame_strings(late),
            ["step", "layer #", "model.py(3): forward"]
        );
        let d: Vec<u16> = st.procs[0].ranges_of(7).iter().map(|x| x.depth).collect();
        assert_eq!(d, [0, 1, 1]);
    }

    /// Nested ranges arriving in end order, in batches of any size, some calls before and some
    /// after the ranges around them: every call ends with the ranges that enclose it, found by
    /// brute force, outermost first, then its own stack; evicted calls are skipped.
    #[test]
    fn incremental_range_frames_match_brute_force() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..20 {
            let mut st = Store::new(if round % 4 == 3 { 60 * 64 } else { usize::MAX });
            let p = st.add_process(1, -1, "p");
            let py = {
                let f = st.names.intern("model.py(3): forward");
                st.stacks.intern(0, f)
            };
            // A random tree of ranges: each level splits its parent's time.
            let mut ranges: Vec<(Ns, Ns, String)> = Vec::new();
            let mut todo = vec![(0 as Ns, 100_000 as Ns, 0u32)];
            while let Some((a, b, d)) = todo.pop() {
                if d > 0 {
                    ranges.push((a, b, format!("r{d} {}", rnd(5))));
                }
                if d < 3 && b - a > 100 {
                    let mut t = a + 1 + rnd(((b - a) / 4) as u64) as Ns;
                    while t + 20 < b {
                        let e = (t + 10 + rnd(((b - t) / 2) as u64) as Ns).min(b - 1);
                        todo.push((t, e, d + 1));
                        t = e + 1 + rnd(50) as Ns;
                    }
                }
            }
            // Calls by arrival: a third of them arrive late, some after their ranges closed.
            let mut arrivals: Vec<(Ns, Ns)> = (0..200)
                .map(|_| {
                    let t = rnd(100_000) as Ns;
                    let late = if rnd(3) == 0 { rnd(3_000) as Ns } else { 0 };
                    (t + late, t)
                })
                .collect();
            arrivals.sort_unstable();
            let sorted: Vec<Ns> = arrivals.iter().map(|a| a.1).collect();
            let mut by_end = ranges.clone();
            by_end.sort_by_key(|r| r.1);
            let call = |st: &mut Store, i: usize, t: Ns| {
                let stack = st.with_range_frames(p, 7, t, py);
                st.add_api(
                    p,
                    ApiCall {
                        start: t,
                        end: t,
                        corr: i as u32 + 1,
                        tid: 7,
                        name: 0,
                        stack,
                        kind: ApiKind::Launch,
                    },
                );
            };
            // Calls and ranges interleaved by time: a call arrives at its start, a range at
            // its end (sometimes held back a while, in a batch).
            let (mut ci, mut ri) = (0, 0);
            let mut batch: Vec<Range> = Vec::new();
            while ci < sorted.len() || ri < by_end.len() {
                let next_call = arrivals.get(ci).map_or(Ns::MAX, |a| a.0);
                let next_range = by_end.get(ri).map_or(Ns::MAX, |r| r.1);
                if next_call <= next_range {
                    call(&mut st, ci, sorted[ci]);
                    ci += 1;
                } else {
                    let (a, b, n) = &by_end[ri];
                    let id = st.names.intern(n);
                    batch.push(Range::new(*a, *b, id, 0));
                    ri += 1;
                    if rnd(3) == 0 {
                        st.add_ranges(p, 7, std::mem::take(&mut batch));
                    }
                }
            }
            st.add_ranges(p, 7, batch);
            for (i, &t) in sorted.iter().enumerate() {
                let Some(a) = st.procs[0].api_by_corr(i as u32 + 1) else {
                    assert_eq!(round % 4, 3, "only a small budget evicts");
                    continue;
                };
                let mut around: Vec<&(Ns, Ns, String)> =
                    ranges.iter().filter(|r| r.0 <= t && t < r.1).collect();
                around.sort_by_key(|r| (r.0, std::cmp::Reverse(r.1)));
                let mut want: Vec<String> =
                    around.iter().map(|r| family(&r.2).into_owned()).collect();
                want.push("model.py(3): forward".into());
                assert_eq!(
                    st.frame_strings(a.stack),
                    want,
                    "round {round}, call at {t}"
                );
            }
        }
    }
}

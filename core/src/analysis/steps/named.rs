//! Steps by name: CPU spans or NVTX ranges named so (or the outermost step-like ranges), the
//! calls of a Python function, or each occurrence of a GPU op, as `[start, end)` ranges that
//! `find` turns into steps.

use std::ops::Range;

use rustc_hash::FxHashMap as HashMap;

use crate::frames::short_kernel;
use crate::model::process::Process;
use crate::model::ranges::{family, is_step_name, Range as NvtxRange};
use crate::model::records::{ApiCall, ApiKind, NameId, Ns, StackId};
use crate::model::store::Store;

use super::seq::DeviceSeq;
use super::step::quantile;

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
            // Listed at the first test: one byte for each of the store's names, which a
            // capture without spans never needs.
            memo: Vec::new(),
            f,
        }
    }
    fn test(&mut self, id: NameId) -> bool {
        if self.memo.is_empty() {
            self.memo = vec![0; self.store.names.len()];
        }
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
pub(super) fn span_ranges(
    store: &Store,
    lo: Ns,
    hi: Ns,
    test: impl Fn(&str) -> bool,
) -> Vec<(Ns, Ns)> {
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

/// Whether a frame is the Python function `name`. Frames read `path/file.py(LINE): QUALNAME`.
/// `name` matches when it is the whole frame; or QUALNAME, or the end of it after a dot
/// (`method` and `Class.method` both match `Class.method`, and `late_allreduce` matches
/// `main.<locals>.late_allreduce`); or `FILE:FUNC`, FILE being the path or its end after a `/`
/// (`file.py:method`, `pkg/file.py:Class.method`) and FUNC matching QUALNAME as above.
pub fn frame_matches(frame: &str, name: &str) -> bool {
    if frame == name {
        return true;
    }
    let Some(p) = crate::frames::frame(frame).python() else {
        return false;
    };
    let (path, func) = (p.file, p.function);
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

/// Whether a call that launched nothing in the window marks a turn of its thread's stack:
/// one the collector timed (a sync, a wait, a copy) in the window.
pub(super) fn marks(a: &ApiCall, lo: Ns, hi: Ns) -> bool {
    !matches!(
        a.kind,
        ApiKind::Other | ApiKind::Launch | ApiKind::GraphLaunch
    ) && a.start >= lo
        && a.start < hi
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
pub(super) fn function_ranges(
    store: &Store,
    lo: Ns,
    hi: Ns,
    name: &str,
    with_marks: bool,
) -> Option<Vec<(Ns, Ns)>> {
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
            // A call that launched nothing (a sync, a copy) with a stack marks where the
            // thread was: outside the function it ends the call; at another line of it, it is
            // the call's latest line, so that a launch back at the first line starts the next
            // call. It opens no call itself.
            let mark = |run: &mut Option<Run>, stack: StackId| {
                let node = anc.get(stack as usize).copied().unwrap_or(0);
                let caller = store.stacks.node(node).parent;
                match run {
                    Some(r) if node != 0 && r.caller == caller && node != r.entry => r.last = node,
                    Some(r) if node != 0 && r.caller == caller => {}
                    _ => *run = None,
                }
            };
            for a in p.apis() {
                let op = ops[pi].get(&a.corr).filter(|_| a.corr != 0);
                if op.is_none() && !(with_marks && a.stack != 0 && marks(&a, lo, hi)) {
                    continue;
                }
                let (run, calls) = per_tid.entry(a.tid).or_default();
                let Some(&(f, l)) = op else {
                    mark(run, a.stack);
                    continue;
                };
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
pub(super) fn op_ranges(store: &Store, lo: Ns, hi: Ns, name: &str) -> Option<Vec<(Ns, Ns)>> {
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

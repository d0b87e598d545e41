//! Steps from the program's structure: with Python stacks on the launches and no marker to go
//! by, the steps are the calls of the outermost function that is called once an iteration and
//! holds most of the GPU work (`LlamaForCausalLM.forward` under `generate`, a training loop's
//! `train_step`).
//!
//! The rule, on the launching thread with the most launches that have a stack:
//!
//! 1. Calls. One pass over the thread's launches in order counts every Python function's calls,
//!    from the turns between consecutive launch stacks: the frames below the deepest one the two
//!    stacks share are new calls, except that the first differing frame continues its call when
//!    it is the same function at another line (Python frames carry their current line), unless
//!    it comes back to the line of the call's first launch (the rule of
//!    [`function_ranges`](super::named::function_ranges), which then gives the chosen function's
//!    calls exactly). A function already open above is not a new call (recursion), and such a
//!    function is *re-entrant*: a dispatcher (`Module._call_impl`) or a decorator's wrapper used
//!    at several levels, never a step. Each call also counts the launches made during it.
//! 2. Candidates: the functions with at least [`MIN_STEPS`] calls whose calls together hold at
//!    least [`COVER`] of the thread's launches, and that are not re-entrant and not inside a
//!    model call: an `nn.Module` called from within another module's call (the frames of
//!    `torch/nn/modules/module.py` mark each module call) is a part of the model (a layer, an
//!    attention), not an iteration of the program.
//! 3. The outermost candidate (no other candidate above its calls on the stacks), then, going
//!    inward one candidate at a time, the inner one when it is called repeatedly in each call
//!    (at least twice as many calls: an epoch's iterations) or when it is the same calls under
//!    another name (as many calls holding nearly as many launches and syncs: a wrapper's
//!    callee, whose name says what it does).
//!
//! Where the launches alone tell no function's calls apart, the pass runs again with the calls
//! that launch nothing but are timed (syncs, copies, waits) as turns of the stack, without
//! counting as launches and opening no call: a sync at another line of a function whose
//! launches all come from one line (`for l in layers: l.forward()` then `.item()`) tells
//! where one of its calls ends and the next begins. Only then: a sync inside a loop of a
//! function's body (gradient accumulation) would split its calls.
//!
//! Costs a pass over the launches with work per frame that changes between consecutive stacks
//! (memoized by pair of stacks), plus a pass over the distinct stacks.

use rustc_hash::FxHashMap as HashMap;

use crate::model::records::{Ns, StackId};
use crate::model::store::Store;

use super::named::{function_ranges, marks};
use super::period::MIN_STEPS;

/// Least share of the thread's launches that a candidate's calls hold.
pub const COVER: f64 = 0.5;
/// An inner function with as many calls is the same calls when it holds this share of the
/// outer one's launches.
const SAME: f64 = 0.9;
/// A candidate with fewer calls than this is a loop around the steps (epochs) when another
/// candidate is called repeatedly inside its calls.
const FEW_CALLS: usize = 8;
/// Most candidates weighed (the busiest first).
const MAX_CANDS: usize = 64;

/// A function: a Python frame's path and qualified name, without its line.
struct Func {
    path: String,
    qual: String,
    /// A frame of PyTorch's module dispatch (`torch/nn/modules/module.py`).
    module: bool,
}

/// Per function, on one thread.
#[derive(Clone, Copy, Default)]
struct Acc {
    calls: u32,
    /// Launches made during its calls, and calls that only marked a turn (syncs, copies).
    launches: u64,
    marks: u64,
    /// Open frames of it right now (recursion when more than one).
    open: u32,
    reentrant: bool,
}

/// An open frame of the current stack.
#[derive(Clone, Copy)]
struct Open {
    node: StackId,
    func: u32,
    /// The frame at the call's first launch.
    entry: StackId,
    /// Outermost frame of its function: a call.
    counted: bool,
    /// Launch index at its first launch, and the marks' count then.
    first: u64,
    first_mark: u64,
}

/// One thread's pass.
#[derive(Default)]
struct Thread {
    open: Vec<Open>,
    prev: StackId,
    launches: u64,
    marks: u64,
    acc: Vec<Acc>,
}

/// The steps' function and its calls' extents; `None` without Python stacks or a candidate.
pub(super) fn structure_steps(store: &Store, lo: Ns, hi: Ns) -> Option<(String, Vec<(Ns, Ns)>)> {
    let st = &store.stacks;
    if st.len() <= 1 {
        return None;
    }
    // Functions of the stacks' nodes (u32::MAX: not a Python frame).
    let mut funcs: Vec<Func> = Vec::new();
    let mut by_key: HashMap<(&str, &str), u32> = HashMap::default();
    let mut by_name: Vec<u32> = vec![u32::MAX - 1; store.names.len()];
    let mut node_func: Vec<u32> = vec![u32::MAX; st.len()];
    for (id, nf) in node_func.iter_mut().enumerate().skip(1) {
        let frame = st.node(id as StackId).frame;
        let Some(f) = by_name.get_mut(frame as usize) else {
            continue;
        };
        if *f == u32::MAX - 1 {
            *f = match store.names.frame(frame).python() {
                Some(p) => *by_key.entry((p.file, p.function)).or_insert_with(|| {
                    funcs.push(Func {
                        path: p.file.to_string(),
                        qual: p.function.to_string(),
                        module: p.file.ends_with("torch/nn/modules/module.py"),
                    });
                    funcs.len() as u32 - 1
                }),
                None => u32::MAX,
            };
        }
        *nf = *f;
    }
    if funcs.is_empty() {
        return None;
    }
    // Launches alone first; where they tell no function's calls apart, with the calls that
    // launch nothing as turns too (a sync that ends each call of a function whose launches all
    // come from one line). Not both at once: a sync inside a loop of a function's body would
    // split its calls where its launches alone do not.
    let attempt = |with_marks: bool| -> Option<(String, Vec<(Ns, Ns)>)> {
        // The pass, per launching thread of each process; the thread with the most stacked
        // launches is kept.
        let mut best: Option<(u64, Thread)> = None;
        let mut memo: HashMap<(StackId, StackId), u32> = HashMap::default();
        for (pi, p) in store.procs.iter().enumerate() {
            let in_window = Corrs::of(store, pi as u32, lo, hi);
            if !p.spans.is_empty() {
                // A trace's Python spans are its calls, exactly.
                for (total, acc) in span_threads(store, &node_func, funcs.len(), pi, &in_window) {
                    if best.as_ref().is_none_or(|(n, _)| total > *n) {
                        let t = Thread {
                            acc,
                            launches: total,
                            ..Default::default()
                        };
                        best = Some((total, t));
                    }
                }
                continue;
            }
            let mut threads: HashMap<u32, Thread> = HashMap::default();
            for a in p.apis() {
                if a.stack == 0 {
                    continue;
                }
                // A launch of an op in the window counts; another call with a stack in it (a
                // sync, a copy) only marks where the thread's stack turned, which tells a new
                // call of a function whose launches all come from one line.
                let launch = a.corr != 0 && in_window.has(a.corr);
                let turn = with_marks && marks(&a, lo, hi);
                if !(launch || turn) {
                    continue;
                }
                let t = threads.entry(a.tid).or_insert_with(|| Thread {
                    acc: vec![Acc::default(); funcs.len()],
                    ..Default::default()
                });
                step(store, &node_func, &mut memo, t, a.stack, launch);
            }
            let mut tids: Vec<_> = threads.into_iter().collect();
            tids.sort_unstable_by_key(|(tid, _)| *tid);
            for (_, mut t) in tids {
                close(&mut t, 0);
                if best.as_ref().is_none_or(|(n, _)| t.launches > *n) {
                    best = Some((t.launches, t));
                }
            }
        }
        let (total, t) = best?;
        let name = choose(store, &node_func, &funcs, &t.acc, total)?;
        let r = function_ranges(store, lo, hi, &name, with_marks)?;
        (r.len() >= MIN_STEPS).then_some((name, r))
    };
    // Turns matter only on launch stacks: a trace's spans are its calls whatever they are.
    let stacks_only = store.procs.iter().any(|p| p.spans.is_empty());
    attempt(false).or_else(|| stacks_only.then(|| attempt(true)).flatten())
}

/// Per thread of a process with CPU spans (a trace's `python_function` events): each
/// function's calls (its spans not inside a span of the same function, which make it
/// re-entrant) and the launches in them, with the thread's launches in the window.
fn span_threads(
    store: &Store,
    node_func: &[u32],
    funcs: usize,
    pi: usize,
    in_window: &Corrs,
) -> Vec<(u64, Vec<Acc>)> {
    let p = &store.procs[pi];
    let mut launches: HashMap<u32, Vec<Ns>> = HashMap::default();
    for a in p.apis() {
        if a.corr != 0 && in_window.has(a.corr) {
            launches.entry(a.tid).or_default().push(a.start);
        }
    }
    let mut tids: Vec<u32> = p.spans.keys().copied().collect();
    tids.sort_unstable();
    let mut out = Vec::new();
    for tid in tids {
        let Some(mut times) = launches.remove(&tid) else {
            continue;
        };
        times.sort_unstable();
        let spans = &p.spans[&tid];
        let func_of = |i: usize| {
            node_func
                .get(spans[i].stack as usize)
                .copied()
                .unwrap_or(u32::MAX)
        };
        let mut acc = vec![Acc::default(); funcs];
        for (i, sp) in spans.iter().enumerate() {
            let f = func_of(i);
            if f == u32::MAX {
                continue;
            }
            let mut up = sp.parent;
            let mut nested = false;
            while (up as usize) < spans.len() {
                if func_of(up as usize) == f {
                    nested = true;
                    break;
                }
                up = spans[up as usize].parent;
            }
            let a = &mut acc[f as usize];
            if nested {
                a.reentrant = true;
                continue;
            }
            let n =
                times.partition_point(|&t| t < sp.end) - times.partition_point(|&t| t < sp.start);
            a.calls += 1;
            a.launches += n as u64;
        }
        out.push((times.len() as u64, acc));
    }
    out
}

/// The correlation ids of a process's ops that start in a window: a bitset when the ids are
/// dense enough, else a set.
enum Corrs {
    Bits(Vec<u64>),
    Set(rustc_hash::FxHashSet<u32>),
}

impl Corrs {
    fn of(store: &Store, proc: u32, lo: Ns, hi: Ns) -> Self {
        let lanes: Vec<_> = store.lanes.iter().filter(|l| l.key.proc == proc).collect();
        let ops = || {
            lanes
                .iter()
                .flat_map(|l| l.range(l.lower_bound(lo)..l.lower_bound(hi)))
                .map(|o| o.corr)
        };
        let (mut n, mut max) = (0usize, 0u32);
        for c in ops() {
            n += 1;
            max = max.max(c);
        }
        if (max as usize) <= 64 * n + 4096 {
            let mut b = vec![0u64; max as usize / 64 + 1];
            for c in ops() {
                b[c as usize / 64] |= 1 << (c % 64);
            }
            Corrs::Bits(b)
        } else {
            Corrs::Set(ops().collect())
        }
    }
    fn has(&self, c: u32) -> bool {
        match self {
            Corrs::Bits(b) => b
                .get(c as usize / 64)
                .is_some_and(|w| w & (1 << (c % 64)) != 0),
            Corrs::Set(s) => s.contains(&c),
        }
    }
}

/// Depth of the deepest frame stacks `a` and `b` share (0: none).
fn shared_depth(store: &Store, a: StackId, b: StackId) -> u32 {
    let st = &store.stacks;
    let (mut x, mut y) = (a, b);
    while st.node(x).depth > st.node(y).depth {
        x = st.node(x).parent;
    }
    while st.node(y).depth > st.node(x).depth {
        y = st.node(y).parent;
    }
    while x != y {
        x = st.node(x).parent;
        y = st.node(y).parent;
    }
    st.node(x).depth
}

/// Depth of the deepest frame `stack` shares with the thread's last stack (memoized by pair).
fn shared_with_prev(
    store: &Store,
    memo: &mut HashMap<(StackId, StackId), u32>,
    t: &Thread,
    stack: StackId,
) -> usize {
    if t.prev == 0 {
        return 0;
    }
    *memo
        .entry((t.prev, stack))
        .or_insert_with(|| shared_depth(store, t.prev, stack)) as usize
}

/// Closes the thread's open frames deeper than `depth`.
fn close(t: &mut Thread, depth: usize) {
    while t.open.len() > depth {
        let o = t.open.pop().expect("deeper than depth");
        if o.func == u32::MAX {
            continue;
        }
        let a = &mut t.acc[o.func as usize];
        a.open -= 1;
        if o.counted {
            a.calls += 1;
            a.launches += t.launches - o.first;
            a.marks += t.marks - o.first_mark;
        }
    }
}

/// One call from `stack` on thread `t`: a launch (counted), or a call that only marks a turn.
fn step(
    store: &Store,
    node_func: &[u32],
    memo: &mut HashMap<(StackId, StackId), u32>,
    t: &mut Thread,
    stack: StackId,
    launch: bool,
) {
    let st = &store.stacks;
    if !launch {
        mark(store, node_func, memo, t, stack);
        return;
    }
    if stack != t.prev {
        let depth = st.node(stack).depth as usize;
        let shared = shared_with_prev(store, memo, t, stack);
        // The new stack's frames below the shared ones, outermost first.
        let mut new: Vec<StackId> = Vec::with_capacity(depth - shared);
        let mut n = stack;
        for _ in shared..depth {
            new.push(n);
            n = st.node(n).parent;
        }
        new.reverse();
        let mut from = 0;
        if let (Some(&y), Some(o)) = (new.first(), t.open.get_mut(shared)) {
            let f = node_func[y as usize];
            // The same function at another line continues its call, unless it comes back to
            // the line of the call's first launch.
            if f != u32::MAX && f == o.func && !(y == o.entry && o.node != o.entry) {
                o.node = y;
                from = 1;
            }
        }
        close(t, shared + from);
        for &y in &new[from..] {
            let f = node_func[y as usize];
            let counted = f != u32::MAX && {
                let a = &mut t.acc[f as usize];
                a.reentrant |= a.open > 0;
                a.open += 1;
                a.open == 1
            };
            t.open.push(Open {
                node: y,
                func: f,
                entry: y,
                counted,
                first: t.launches,
                first_mark: t.marks,
            });
        }
        t.prev = stack;
    }
    t.launches += 1;
}

/// A call that launched nothing, from `stack` on thread `t`: where the thread is, for its
/// next launch to read, as `function_ranges` reads it. The frames below the ones it shares
/// with the thread's stack close, but the first, when it is the same function: that call
/// goes on at the marker's line (at its first launch's line, it goes on as it was). It opens
/// no call.
fn mark(
    store: &Store,
    node_func: &[u32],
    memo: &mut HashMap<(StackId, StackId), u32>,
    t: &mut Thread,
    stack: StackId,
) {
    if stack != t.prev {
        let shared = shared_with_prev(store, memo, t, stack);
        let st = &store.stacks;
        let mut y = stack;
        let depth = st.node(stack).depth as usize;
        for _ in shared + 1..depth {
            y = st.node(y).parent;
        }
        let mut keep = shared;
        if let Some(o) = t.open.get_mut(shared).filter(|_| depth > shared) {
            let f = node_func[y as usize];
            if f != u32::MAX && f == o.func {
                if y != o.entry {
                    o.node = y;
                }
                keep = shared + 1;
            }
        }
        close(t, keep);
        t.prev = t.open.last().map_or(0, |o| o.node);
    }
    t.marks += 1;
}

/// The function whose calls are the steps, by the module's rule, as a name
/// [`function_ranges`] takes: its qualified name, with its path when another function has the
/// same one.
fn choose(
    store: &Store,
    node_func: &[u32],
    funcs: &[Func],
    acc: &[Acc],
    total: u64,
) -> Option<String> {
    let st = &store.stacks;
    let mut cands: Vec<u32> = (0..funcs.len() as u32)
        .filter(|&f| {
            let a = acc[f as usize];
            !funcs[f as usize].module
                && !a.reentrant
                && a.calls as usize >= MIN_STEPS
                && a.launches as f64 >= COVER * total as f64
        })
        .collect();
    cands.sort_unstable_by_key(|&f| std::cmp::Reverse(acc[f as usize].launches));
    cands.truncate(MAX_CANDS);
    if cands.is_empty() {
        return None;
    }
    let mut bit: Vec<u64> = vec![0; funcs.len()];
    for (i, &f) in cands.iter().enumerate() {
        bit[f as usize] = 1 << i;
    }
    // Per node: the candidates on its path (`mask`), and the module calls above it (a run of
    // module frames is one call). Parents precede children.
    let mut mask: Vec<u64> = vec![0; st.len()];
    let mut calls_in: Vec<u8> = vec![0; st.len()];
    // Per candidate: the candidates above its outermost frames; the fewest module calls above
    // them.
    let mut above: Vec<u64> = vec![0; cands.len()];
    let mut modules: Vec<u8> = vec![u8::MAX; cands.len()];
    let is_module = |id: StackId| {
        let f = node_func[id as usize];
        f != u32::MAX && funcs[f as usize].module
    };
    for id in 1..st.len() {
        let parent = st.node(id as StackId).parent as usize;
        let f = node_func[id];
        let b = if f == u32::MAX { 0 } else { bit[f as usize] };
        mask[id] = mask[parent] | b;
        let entering = is_module(id as StackId) && (parent == 0 || !is_module(parent as StackId));
        calls_in[id] = calls_in[parent].saturating_add(entering as u8);
        if b != 0 && mask[parent] & b == 0 {
            let i = b.trailing_zeros() as usize;
            above[i] |= mask[parent];
            modules[i] = modules[i].min(calls_in[parent]);
        }
    }
    // Inside a model call: more than its own module call above it.
    let part_of_model = |i: usize| modules[i] != u8::MAX && modules[i] >= 2;
    let ok: u64 = (0..cands.len())
        .filter(|&i| !part_of_model(i))
        .fold(0, |m, i| m | (1 << i));
    // The outermost among `set`: no other of the set above it; the busiest, then the fewest
    // calls.
    let outermost = |set: u64| -> Option<usize> {
        (0..cands.len())
            .filter(|&i| set & (1 << i) != 0 && above[i] & set & !(1 << i) == 0)
            .max_by_key(|&i| {
                let a = acc[cands[i] as usize];
                (a.launches, std::cmp::Reverse(a.calls))
            })
    };
    let mut cur = outermost(ok)?;
    loop {
        let a = acc[cands[cur] as usize];
        let inner: u64 = (0..cands.len())
            .filter(|&i| ok & (1 << i) != 0 && i != cur && above[i] & (1 << cur) != 0)
            .fold(0, |m, i| m | (1 << i));
        let Some(next) = outermost(inner) else { break };
        let b = acc[cands[next] as usize];
        // An epoch's iterations: a candidate of few calls holding repeated calls (one of many
        // calls is a step already, and what it repeats inside is its layers).
        let repeated = b.calls >= 2 * a.calls && (a.calls as usize) < FEW_CALLS;
        // The same calls: as many, with nearly all the outer one's launches and the calls
        // that marked turns (a sync in the outer function, outside the inner one, says the
        // inner one's calls are parts of the outer one's, merged where their stacks repeat).
        // A script's top level is no function called an iteration: its "calls" are its loop's
        // turns, so the function it calls each turn is the step, whatever else the loop does
        // (syncs at its own line).
        let top = funcs[cands[cur] as usize].qual == "<module>";
        let same = b.calls == a.calls
            && b.launches as f64 >= SAME * a.launches as f64
            && (top || b.marks as f64 >= SAME * a.marks as f64);
        if !(repeated || same) {
            break;
        }
        cur = next;
    }
    let f = &funcs[cands[cur] as usize];
    let shared = funcs
        .iter()
        .filter(|g| g.qual == f.qual || g.qual.ends_with(&format!(".{}", f.qual)))
        .count();
    Some(if shared > 1 {
        format!("{}:{}", f.path, f.qual)
    } else {
        f.qual.clone()
    })
}

#[cfg(test)]
#[path = "structure_tests.rs"]
mod tests;

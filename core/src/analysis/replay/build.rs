//! The model of a block of the capture: its calls by thread, its ops by stream, which term
//! bound each op and each sync, and its collectives (see the parent module).

use rustc_hash::FxHashMap as HashMap;

use super::model::{Call, LaneSeq, Model, Op, Thread, NONE};
use crate::analysis::steps::quantile;
use crate::model::records::{ApiCall, ApiKind, NameId, Ns, Span, StackId, FLAG_COMM};
use crate::model::store::Store;

/// Most ops a replay takes: a longer capture is replayed over its last steps up to this many
/// ops (what the per-step figures are over).
pub const REPLAY_MAX_OPS: usize = 50_000;

/// Spacing between two queued ops of a stream when the capture shows none (a microsecond, about
/// what a GPU takes between kernels of one stream).
const DEFAULT_GAP: Ns = 1_000;

/// Longest spacing taken as a queued op's (the typical one is a microsecond or two).
const MAX_SPACING: Ns = 20_000;

/// An op that started this much later than its launch and its stream allowed waited for
/// something else (an event of another stream).
const SLACK: Ns = 1_000;

/// Calls looked back over for the op a sync waited for.
const SYNC_LOOKBACK: usize = 4096;

/// The median of a list (the lower middle of an even count), None for none.
fn median(v: Vec<Ns>) -> Option<Ns> {
    (!v.is_empty()).then(|| quantile(v, 0.5))
}

/// The calls of a process that start in `[lo, hi)`, in their stored order (by start), but
/// for those of no kind the replay models.
fn calls_in(store: &Store, proc: usize, lo: Ns, hi: Ns) -> Vec<ApiCall> {
    let p = &store.procs[proc];
    let end = p.calls.next_seq();
    let base = end - p.calls.len() as u64;
    let at = |t: Ns| {
        let (mut a, mut b) = (base, end);
        while a < b {
            let m = a + (b - a) / 2;
            if p.calls.start_of(m).is_some_and(|s| s < t) {
                a = m + 1;
            } else {
                b = m;
            }
        }
        a
    };
    // Calls that launch, copy, wait or sync; the rest (`cudaGetDevice`, `cudaMalloc`, …) are
    // the thread's CPU time like any other work.
    p.calls
        .range(at(lo), at(hi))
        .filter(|a| a.kind != ApiKind::Other)
        .collect()
}

/// Builds the model of the ops that start in `[lo, hi)` and the calls that start in it (but
/// launches of ops outside it), keying each call's site with `key(stack, api, op)`.
pub fn build(
    store: &Store,
    lo: Ns,
    hi: Ns,
    key: &mut dyn FnMut(StackId, NameId, NameId) -> String,
) -> Model {
    let mut m = Model {
        lo,
        hi,
        ..Default::default()
    };
    // Calls by thread, and where each launch's id leads.
    let mut by_corr: HashMap<(u32, u32), u32> = HashMap::default();
    let mut site_ids: HashMap<(StackId, NameId, NameId), u32> = HashMap::default();
    let mut key_ids: HashMap<String, u32> = HashMap::default();
    let mut launched_op: HashMap<(u32, u32), NameId> = HashMap::default();
    let mut runtime: HashMap<NameId, bool> = HashMap::default();
    // Each call's process, stack, API and id, for its site.
    let mut origin: Vec<(u32, StackId, NameId, u32)> = Vec::new();
    // The ops of the block: those that start in it. A call that launched an op outside it
    // (after its end) is left out with its op, as a window's copy of the store leaves it.
    let mut in_block: rustc_hash::FxHashSet<(u32, u32)> = Default::default();
    for lane in &store.lanes {
        let (a, b) = (lane.lower_bound(lo), lane.lower_bound(hi));
        in_block.extend(lane.range(a..b).map(|o| (lane.key.proc, o.corr)));
    }
    let launches = |k: ApiKind| matches!(k, ApiKind::Launch | ApiKind::GraphLaunch | ApiKind::Copy);
    for (pi, _) in store.procs.iter().enumerate() {
        let mut calls = calls_in(store, pi, lo, hi);
        calls.retain(|a| !launches(a.kind) || in_block.contains(&(pi as u32, a.corr)));
        if calls.is_empty() {
            continue;
        }
        // Every one of them becomes a call: room for them at once (doubling would leave up to
        // as much again unused).
        m.calls.reserve_exact(calls.len());
        let mut tids: Vec<u32> = calls.iter().map(|a| a.tid).collect();
        tids.sort_unstable();
        tids.dedup();
        for tid in tids {
            let first = m.calls.len() as u32;
            let thread = m.threads.len() as u32;
            let mut prev_end: Option<Ns> = None;
            let spans = store.procs[pi]
                .spans
                .get(&tid)
                .filter(|v| !v.is_empty())
                .map(|v| (v, python_spans(store, v)));
            for a in calls.iter().filter(|a| a.tid == tid) {
                let idx = m.calls.len() as u32;
                if a.corr != 0 {
                    by_corr.insert((pi as u32, a.corr), idx);
                }
                origin.push((pi as u32, a.stack, a.name, a.corr));
                m.calls.push(Call {
                    thread,
                    start: a.start,
                    end: a.end.max(a.start),
                    seg: prev_end.map_or(0, |e| a.start - e),
                    own: a.end.max(a.start) - a.start,
                    wait: NONE,
                    tail: 0,
                    kind: a.kind,
                    runtime: *runtime
                        .entry(a.name)
                        .or_insert_with(|| store.names.get(a.name).starts_with("cuda")),
                    site: NONE,
                    after: NONE,
                    after_gap: 0,
                    inv: match &spans {
                        Some((v, py)) => python_span_at(v, py, a.start),
                        None => a.stack,
                    },
                    fwd: NONE,
                });
                prev_end = Some(a.end.max(a.start));
            }
            m.threads.push(Thread {
                proc: pi as u32,
                tid,
                first,
                last: m.calls.len() as u32,
                spans: spans.is_some(),
            });
        }
    }
    // Ops by stream: those launched by the block's calls, and those of the block's time that
    // were launched before it (constants) or by no call seen.
    m.ops.reserve_exact(
        store
            .lanes
            .iter()
            .map(|l| l.lower_bound(hi) - l.lower_bound(lo))
            .sum(),
    );
    for (li, lane) in store.lanes.iter().enumerate() {
        let proc = lane.key.proc;
        let mut i = lane.lower_bound(lo);
        let first = m.ops.len() as u32;
        let before_end = (i > 0).then(|| lane.op(i - 1).end);
        let seq = m.lanes.len() as u32;
        let mut raw: Vec<(u32, Ns, Ns, Ns)> = Vec::new(); // call, start, end, launch start
        while i < lane.len() {
            let op = lane.op(i);
            if op.start >= hi {
                break;
            }
            let call = by_corr.get(&(proc, op.corr)).copied().unwrap_or(NONE);
            if call != NONE {
                launched_op.insert((proc, op.corr), op.name);
            }
            let l = if call == NONE {
                Ns::MIN
            } else {
                m.calls[call as usize].start
            };
            raw.push((call, op.start, op.end.max(op.start), l));
            m.ops.push(Op {
                lane: seq,
                start: op.start,
                end: op.end.max(op.start),
                call,
                lat: 0,
                gap: 0,
                dep: NONE,
                dep_gap: 0,
                dur: op.end.max(op.start) - op.start,
                floor: Ns::MIN,
                group: NONE,
                name: op.name,
                idle_before: 0,
            });
            if op.flags & FLAG_COMM != 0 {
                m.ops.last_mut().expect("pushed").group = NONE - 1; // a collective, grouped below
            }
            i += 1;
        }
        if raw.is_empty() {
            continue;
        }
        m.lanes.push(LaneSeq {
            lane: li,
            first,
            last: m.ops.len() as u32,
            before_end,
        });
        bind_lane(&mut m.ops[first as usize..], &raw, before_end);
    }
    idle_before(&mut m, store);
    bind_wakes(&mut m);
    bind_deps(&mut m, store);
    bind_syncs(&mut m);
    bind_blocking_copies(&mut m, store);
    group_collectives(&mut m, store);
    // Sites of the calls.
    let mut sites = Vec::new();
    let mut site_calls = Vec::new();
    let mut site_syncs: Vec<Option<(StackId, NameId)>> = Vec::new();
    for (c, &(proc, stack, api, corr)) in origin.iter().enumerate() {
        let op = launched_op.get(&(proc, corr)).copied().unwrap_or(0);
        let id = *site_ids.entry((stack, api, op)).or_insert_with(|| {
            let k = key(stack, api, op);
            let n = key_ids.len() as u32;
            *key_ids.entry(k.clone()).or_insert_with(|| {
                sites.push(k);
                site_calls.push((stack, api));
                n
            })
        });
        m.calls[c].site = id;
        // A site's syncs are named by the first of them (a function's `.item()` line).
        let waits = m.calls[c].kind == ApiKind::Sync || m.calls[c].wait != NONE;
        if waits && site_syncs.len() <= id as usize {
            site_syncs.resize(id as usize + 1, None);
        }
        if waits && site_syncs[id as usize].is_none() {
            site_syncs[id as usize] = Some((stack, api));
        }
    }
    site_syncs.resize(sites.len(), None);
    // Backward calls: the site of their forward op, where the trace ties them and that site
    // has calls of its own here. A backward stack whose nodes came from several functions'
    // ops (one stack runs every layer's `AddmmBackward0`) is tied only where one function
    // made nine in ten of them.
    if !store.forward_of.is_empty() {
        let mut fwd_of: HashMap<StackId, u32> = HashMap::default();
        for (c, &(_, stack, _, _)) in origin.iter().enumerate() {
            let f = *fwd_of.entry(stack).or_insert_with(|| {
                let mut by: HashMap<u32, u32> = HashMap::default();
                let mut all = 0;
                for (f, n) in store.forward_stacks(stack) {
                    all += n;
                    if let Some(&id) = key_ids.get(&key(f, 0, 0)) {
                        *by.entry(id).or_default() += n;
                    }
                }
                by.into_iter()
                    .find(|&(_, n)| 10 * n >= 9 * all)
                    .map_or(NONE, |(id, _)| id)
            });
            // Not a site's own forward ops (a node run on the forward's thread).
            m.calls[c].fwd = if f == m.calls[c].site { NONE } else { f };
        }
    } else {
        super::mirror::mirror_backward(&mut m, store, &origin);
    }
    m.sites = sites;
    m.site_calls = site_calls;
    m.site_syncs = site_syncs;
    m
}

/// Which of a thread's spans are Python functions' (`file.py(line): name`).
fn python_spans(store: &Store, spans: &[Span]) -> Vec<bool> {
    let mut memo: HashMap<StackId, bool> = HashMap::default();
    spans
        .iter()
        .map(|s| {
            *memo.entry(s.stack).or_insert_with(|| {
                let frames = store.stacks.frames(s.stack);
                frames
                    .last()
                    .is_some_and(|&f| store.names.frame(f).py_source().is_some())
            })
        })
        .collect()
}

/// The innermost Python span of a thread around time `t` ([`NONE`]: none): the last span
/// to start by `t`, or the first of its enclosing spans (spans nest) that holds `t` and is a
/// Python function's.
fn python_span_at(spans: &[Span], python: &[bool], t: Ns) -> u32 {
    let mut j = spans.partition_point(|s| s.start <= t).wrapping_sub(1);
    while j < spans.len() {
        if spans[j].end > t && python[j] {
            return j as u32;
        }
        j = spans[j].parent as usize;
    }
    NONE
}

/// Each op's device idle before it: from the latest end of the ops of its device that started
/// before it (the op before the block on each stream too) to its start.
fn idle_before(m: &mut Model, store: &Store) {
    let mut by_dev: HashMap<(u32, u32), Vec<u32>> = HashMap::default();
    let mut reach: HashMap<(u32, u32), Ns> = HashMap::default();
    for l in &m.lanes {
        let k = store.lanes[l.lane].key;
        by_dev
            .entry((k.proc, k.device))
            .or_default()
            .extend(l.first..l.last);
        if let Some(e) = l.before_end {
            let r = reach.entry((k.proc, k.device)).or_insert(Ns::MIN);
            *r = (*r).max(e);
        }
    }
    for (dev, mut v) in by_dev {
        v.sort_unstable_by_key(|&j| (m.ops[j as usize].start, j));
        let mut r = reach.get(&dev).copied().unwrap_or(Ns::MIN);
        for j in v {
            let o = &mut m.ops[j as usize];
            o.idle_before = if r == Ns::MIN {
                0
            } else {
                (o.start - r).max(0)
            };
            r = r.max(o.end);
        }
    }
}

/// A thread idle for this long before a call was woken by another, when one of its process's
/// other threads made a call meanwhile.
const WAKE_NS: Ns = 200_000;

/// Calls after a long idle of their thread follow the last call another thread of their
/// process ended during that idle (the thread that woke it): exact as measured, and the
/// woken thread moves when the other does.
fn bind_wakes(m: &mut Model) {
    let mut by_proc: HashMap<u32, Vec<(Ns, u32)>> = HashMap::default();
    for (c, call) in m.calls.iter().enumerate() {
        let proc = m.threads[call.thread as usize].proc;
        by_proc.entry(proc).or_default().push((call.end, c as u32));
    }
    if by_proc.values().all(|v| {
        let t = m.calls[v[0].1 as usize].thread;
        v.iter().all(|&(_, c)| m.calls[c as usize].thread == t)
    }) {
        return;
    }
    for v in by_proc.values_mut() {
        v.sort_unstable();
    }
    for t in 0..m.threads.len() {
        let (proc, first, last) = (m.threads[t].proc, m.threads[t].first, m.threads[t].last);
        let ends = &by_proc[&proc];
        for c in first + 1..last {
            let call = m.calls[c as usize];
            if call.seg < WAKE_NS {
                continue;
            }
            let idle_from = m.calls[c as usize - 1].end;
            let i = ends.partition_point(|&(e, _)| e <= call.start);
            let woke = ends[..i]
                .iter()
                .rev()
                .take_while(|&&(e, _)| e >= idle_from)
                .find(|&&(_, d)| m.calls[d as usize].thread != t as u32);
            if let Some(&(e, d)) = woke {
                let x = &mut m.calls[c as usize];
                x.after = d;
                x.after_gap = call.start - e;
            }
        }
    }
}

/// Which term bound each op of a stream: queued behind the op before it (its stream was busy
/// when its launch would have let it start), or its launch. The bound term is exact, the other
/// the stream's typical value, never more than the measured one.
fn bind_lane(ops: &mut [Op], raw: &[(u32, Ns, Ns, Ns)], before_end: Option<Ns>) {
    let prev_end = |k: usize| {
        if k == 0 {
            before_end
        } else {
            Some(raw[k - 1].2)
        }
    };
    // The typical latency: of ops launched while their stream was idle.
    let lat = median(
        raw.iter()
            .enumerate()
            .filter(|(k, r)| r.0 != NONE && prev_end(*k).is_none_or(|e| e <= r.3))
            .map(|(_, r)| (r.1 - r.3).max(0))
            .collect(),
    )
    .or_else(|| {
        raw.iter()
            .filter(|r| r.0 != NONE)
            .map(|r| (r.1 - r.3).max(0))
            .min()
    })
    .unwrap_or(0);
    // The typical spacing: of ops launched while their stream was busy.
    let gap = median(
        raw.iter()
            .enumerate()
            .filter_map(|(k, r)| {
                let e = prev_end(k)?;
                // A queued op's spacing is a microsecond or two; longer, it waited for
                // something else (an event), which says nothing of the spacing.
                let spacing = (r.1 - e).max(0);
                (r.0 != NONE && e > r.3 + lat && spacing <= MAX_SPACING).then_some(spacing)
            })
            .collect(),
    )
    .unwrap_or(DEFAULT_GAP);
    for (k, (op, &(call, start, _, l))) in ops.iter_mut().zip(raw).enumerate() {
        let before = prev_end(k);
        if call == NONE {
            // Launched outside the block: it starts no earlier than it did.
            op.floor = start;
            op.gap = before.map_or(0, |e| (start - e).min(gap));
            continue;
        }
        let queued = before.is_some_and(|e| e + gap >= l + lat);
        match before {
            Some(e) if queued => {
                op.lat = (start - l).min(lat);
                op.gap = start - e;
            }
            Some(e) => {
                op.lat = start - l;
                op.gap = (start - e).min(gap);
            }
            None => op.lat = start - l,
        }
        // Kept for the dependencies' search: what bound it, were it not its launch.
        op.dep_gap = gap;
    }
}

/// Ops that started later than their launch and stream allowed, right after an op of another
/// stream of their device ended, waited for that op (an event wait).
fn bind_deps(m: &mut Model, store: &Store) {
    // Lanes by device.
    let mut by_dev: HashMap<(u32, u32), Vec<u32>> = HashMap::default();
    for (s, l) in m.lanes.iter().enumerate() {
        let k = store.lanes[l.lane].key;
        by_dev.entry((k.proc, k.device)).or_default().push(s as u32);
    }
    for s in 0..m.lanes.len() {
        let k = store.lanes[m.lanes[s].lane].key;
        let peers = &by_dev[&(k.proc, k.device)];
        if peers.len() < 2 {
            for j in m.lanes[s].first..m.lanes[s].last {
                m.ops[j as usize].dep_gap = 0;
            }
            continue;
        }
        let lat = typical_latency(m, s);
        for j in m.lanes[s].first..m.lanes[s].last {
            let op = m.ops[j as usize];
            let typical_gap = op.dep_gap;
            m.ops[j as usize].dep_gap = 0;
            if op.call == NONE {
                continue;
            }
            let l = m.calls[op.call as usize].start;
            // Launch-bound ops whose latency is far above the typical one.
            let prev = if j > m.lanes[s].first {
                Some(m.ops[j as usize - 1].end)
            } else {
                m.lanes[s].before_end
            };
            let bound = prev.map_or(Ns::MIN, |e| e + typical_gap);
            if op.start - l <= SLACK || op.start <= bound + SLACK {
                continue;
            }
            let window = (2 * typical_gap).max(2 * SLACK);
            let mut best: Option<(Ns, u32)> = None;
            for &p in peers.iter().filter(|&&p| p as usize != s) {
                let (a, b) = (m.lanes[p as usize].first, m.lanes[p as usize].last);
                let ops = &m.ops[a as usize..b as usize];
                let at = ops.partition_point(|o| o.start < op.start);
                for (q, o) in ops[..at].iter().enumerate().rev().take(8) {
                    if o.end <= op.start && op.start - o.end <= window && o.end >= l {
                        let cand = (o.end, a + q as u32);
                        best = Some(best.map_or(cand, |b| b.max(cand)));
                    }
                }
            }
            if let Some((e, d)) = best {
                let o = &mut m.ops[j as usize];
                o.dep = d;
                o.dep_gap = op.start - e;
                // Neither its launch nor the op before it explains its start: the typical
                // latency and spacing.
                o.lat = (op.start - l).min(lat);
                if let Some(p) = prev {
                    o.gap = (op.start - p).min(typical_gap);
                }
            }
        }
    }
}

/// A stream's typical launch latency as bound: the median of its ops' latencies.
fn typical_latency(m: &Model, s: usize) -> Ns {
    let l = &m.lanes[s];
    median(
        m.ops[l.first as usize..l.last as usize]
            .iter()
            .filter(|o| o.call != NONE)
            .map(|o| o.lat)
            .collect(),
    )
    .unwrap_or(0)
}

/// The op each sync waited for: of the ops its process launched before it, the last to end
/// before it returned. A sync that returned after that op ended by more than its own cost
/// did not wait; it keeps its time and the op, with the typical time after it.
fn bind_syncs(m: &mut Model) {
    // Per process: launches by start.
    let mut launches: HashMap<u32, Vec<(Ns, u32)>> = HashMap::default();
    for (j, o) in m.ops.iter().enumerate() {
        if o.call != NONE {
            let c = &m.calls[o.call as usize];
            let proc = m.threads[c.thread as usize].proc;
            launches.entry(proc).or_default().push((c.start, j as u32));
        }
    }
    for v in launches.values_mut() {
        v.sort_unstable();
    }
    let mut waited_tails = Vec::new();
    let mut idle: Vec<(u32, u32, Ns)> = Vec::new();
    for c in 0..m.calls.len() {
        let call = m.calls[c];
        if call.kind != ApiKind::Sync {
            continue;
        }
        let proc = m.threads[call.thread as usize].proc;
        let Some(v) = launches.get(&proc) else {
            continue;
        };
        let at = v.partition_point(|&(l, _)| l <= call.start);
        let mut best: Option<(Ns, u32)> = None;
        for &(_, j) in v[..at].iter().rev().take(SYNC_LOOKBACK) {
            let e = m.ops[j as usize].end;
            if e <= call.end {
                best = Some(best.map_or((e, j), |b| b.max((e, j))));
            }
        }
        let Some((e, j)) = best else {
            continue;
        };
        if e > call.start {
            let c = &mut m.calls[c];
            c.wait = j;
            c.tail = call.end - e;
            c.own = c.tail;
            waited_tails.push(c.tail);
        } else {
            idle.push((c as u32, j, e));
        }
    }
    let tail = median(waited_tails).unwrap_or(0);
    for (c, j, e) in idle {
        let c = &mut m.calls[c as usize];
        c.wait = j;
        c.tail = tail.min(c.end - e);
    }
}

/// A copy to the host that returned only after its op ended waited for it (a
/// `cudaMemcpyAsync` into pageable memory, as `.item()` and `.cpu()` make, is synchronous):
/// its call waits for its own op, which waits for the stream's work before it, and returns
/// its measured time after the op's end. An asynchronous copy returns before its op ends.
fn bind_blocking_copies(m: &mut Model, store: &Store) {
    let mut to_host: HashMap<u32, bool> = HashMap::default();
    for j in 0..m.ops.len() {
        let o = m.ops[j];
        if o.call == NONE {
            continue;
        }
        let call = m.calls[o.call as usize];
        if call.kind != ApiKind::Copy || call.wait != NONE || call.end < o.end {
            continue;
        }
        let dtoh = *to_host
            .entry(o.name)
            .or_insert_with(|| store.names.get(o.name).contains("DtoH"));
        if dtoh {
            let c = &mut m.calls[o.call as usize];
            c.wait = j as u32;
            c.tail = call.end - o.end;
            c.own = c.tail;
        }
    }
}

/// The kernels of one collective across ranks: the k-th collective of a name on each device.
/// A group is kept when every member ended at or after the last member's start (clocks that
/// agree); each member's time is then its end less that start.
fn group_collectives(m: &mut Model, store: &Store) {
    if !m.ops.iter().any(|o| o.group == NONE - 1) {
        return;
    }
    // Occurrences before the block, per device and name.
    let mut seen: HashMap<(u32, u32, NameId), u32> = HashMap::default();
    // Per (process, device): each op's start, index and name.
    type DevOps = HashMap<(u32, u32), Vec<(Ns, u32, NameId)>>;
    let mut dev_ops: DevOps = HashMap::default();
    for l in &m.lanes {
        let lane = &store.lanes[l.lane];
        let k = lane.key;
        let first_in_block = lane.lower_bound(m.lo);
        for op in lane.range(..first_in_block) {
            if op.flags & FLAG_COMM != 0 {
                *seen.entry((k.proc, k.device, op.name)).or_default() += 1;
            }
        }
        let base = first_in_block;
        for (q, j) in (l.first..l.last).enumerate() {
            if m.ops[j as usize].group == NONE - 1 {
                let name = lane.op(base + q).name;
                dev_ops.entry((k.proc, k.device)).or_default().push((
                    m.ops[j as usize].start,
                    j,
                    name,
                ));
            }
        }
    }
    let mut groups: HashMap<(NameId, u32), Vec<u32>> = HashMap::default();
    let mut devs: Vec<_> = dev_ops.into_iter().collect();
    devs.sort_unstable_by_key(|d| d.0);
    for ((proc, dev), mut v) in devs {
        v.sort_unstable();
        for (_, j, name) in v {
            let n = seen.entry((proc, dev, name)).or_default();
            groups.entry((name, *n)).or_default().push(j);
            *n += 1;
        }
    }
    for o in m.ops.iter_mut().filter(|o| o.group == NONE - 1) {
        o.group = NONE;
    }
    let mut keys: Vec<_> = groups.into_iter().filter(|g| g.1.len() >= 2).collect();
    keys.sort_unstable_by_key(|g| g.0);
    for (_, members) in keys {
        let last = members
            .iter()
            .map(|&j| m.ops[j as usize].start)
            .max()
            .unwrap_or(0);
        if members.iter().any(|&j| m.ops[j as usize].end < last) {
            continue;
        }
        let g = m.groups.len() as u32;
        for &j in &members {
            let o = &mut m.ops[j as usize];
            o.group = g;
            o.dur = o.end - last;
        }
        m.groups.push(members);
    }
}

//! What-ifs: a site's fix applied to the model by its pattern, replayed over the steady
//! steps, and the steps before and after compared.

use rustc_hash::FxHashMap as HashMap;

use super::anchors::{block, block_lo, cpu_anchored, median, periods, spans, walls, Anchors};
use super::build::build;
use super::cost::{without_profiler, PerCall};
use super::graph::graphs;
use super::loading::loading;
use super::model::{op_of_calls, Model, NONE};
use super::results::GRAPH_ASSUMES;
pub use super::results::{Estimate, ProfilerCost, ReplayJson, SiteEstimate, WhatIf};
use super::run::{run, Times};
use crate::analysis::steps::Steps;
use crate::model::records::{ApiKind, NameId, Ns, StackId};
use crate::model::store::Store;

/// The site of the syncs a sync what-if of site `s` removed that waited longest, where that
/// is another site (a launch site's gaps that follow a `.item()` elsewhere).
fn sync_owner(u: &Undo, s: u32) -> Option<u32> {
    let mut waited: HashMap<u32, Ns> = HashMap::default();
    for (_, old) in u.calls.iter().filter(|(_, c)| c.kind == ApiKind::Sync) {
        *waited.entry(old.site).or_default() += old.end - old.start;
    }
    let (owner, _) = waited
        .into_iter()
        .max_by_key(|&(site, w)| (w, std::cmp::Reverse(site)))?;
    (owner != s && owner != NONE).then_some(owner)
}

/// The ranks a change touches: those holding at least a tenth of the time it removes (CPU
/// before and in calls, GPU time of ops), the largest share first.
fn touched(m: &Model, store: &Store, u: &Undo) -> Vec<i32> {
    let mut by: std::collections::BTreeMap<i32, Ns> = Default::default();
    for (c, old) in &u.calls {
        let new = &m.calls[*c as usize];
        let p = m.threads[new.thread as usize].proc;
        let cut = (old.seg - new.seg).max(0) + (old.own - new.own).max(0) + 1;
        *by.entry(store.procs[p as usize].rank).or_default() += cut;
    }
    for (j, old) in &u.ops {
        let new = &m.ops[*j as usize];
        let p = store.lanes[m.lanes[new.lane as usize].lane].key.proc;
        let cut = (old.dur - new.dur).max(0) + (old.gap - new.gap).max(0) + 1;
        *by.entry(store.procs[p as usize].rank).or_default() += cut;
    }
    let total: Ns = by.values().sum();
    let mut r: Vec<(Ns, i32)> = by
        .into_iter()
        .filter(|&(_, n)| n * 10 >= total)
        .map(|(r, n)| (n, r))
        .collect();
    r.sort_unstable_by(|a, b| b.cmp(a));
    r.into_iter().map(|(_, r)| r).collect()
}

/// Each thread's typical time between two calls and typical launch.
fn typical(m: &Model) -> (Vec<Ns>, Vec<Ns>) {
    let seg = m
        .threads
        .iter()
        .map(|t| {
            median(
                m.calls[t.first as usize + 1..t.last as usize]
                    .iter()
                    .map(|c| c.seg)
                    .collect(),
            )
        })
        .collect();
    let own = m
        .threads
        .iter()
        .map(|t| {
            median(
                m.calls[t.first as usize..t.last as usize]
                    .iter()
                    .filter(|c| c.kind == ApiKind::Launch)
                    .map(|c| c.own)
                    .collect(),
            )
        })
        .collect();
    (seg, own)
}

/// A per-shape plan: CPU time before a launch of at least this many times the site's usual,
/// and at least this long.
const PLAN_FACTOR: Ns = 10;
const PLAN_MIN_NS: Ns = 1_000_000;

/// Sync sites replayed beside the sites asked for.
const SYNC_SITES: usize = 4;

/// The key of a site's syncs replayed apart from its own fix: the site's key and this.
pub const SYNCS_OF: &str = "\u{1}syncs";

/// What a change replaced, to put back.
#[derive(Default)]
struct Undo {
    calls: Vec<(u32, super::model::Call)>,
    ops: Vec<(u32, super::model::Op)>,
}

impl Undo {
    fn call<'a>(&mut self, m: &'a mut Model, c: u32) -> &'a mut super::model::Call {
        self.calls.push((c, m.calls[c as usize]));
        &mut m.calls[c as usize]
    }
    fn op<'a>(&mut self, m: &'a mut Model, j: u32) -> &'a mut super::model::Op {
        self.ops.push((j, m.ops[j as usize]));
        &mut m.ops[j as usize]
    }
    /// Puts back what the change replaced, last first.
    fn revert(self, m: &mut Model) {
        for (c, v) in self.calls.into_iter().rev() {
            m.calls[c as usize] = v;
        }
        for (j, v) in self.ops.into_iter().rev() {
            m.ops[j as usize] = v;
        }
    }
}

/// The mean over the steps of the step before less the step after.
fn mean_diff(before: &[Ns], after: &[Ns]) -> Ns {
    let n = after.len().max(1) as Ns;
    before.iter().zip(after).map(|(b, a)| b - a).sum::<Ns>() / n
}

/// The GPU's busy share of the replayed steps `after`.
fn busy_share(busy: &[Ns], after: &[Ns]) -> f64 {
    let total: Ns = after.iter().sum::<Ns>().max(1);
    (busy.iter().sum::<Ns>() as f64 / total as f64).min(1.0)
}

/// Applies site `s`'s fix to the model in place; the returned undo puts it back.
fn apply(m: &mut Model, s: u32, w: WhatIf, seg: &[Ns], own: &[Ns]) -> Undo {
    let mut u = Undo::default();
    match w {
        WhatIf::Fuse => {
            // The op each call launched, to join a call's kernels on their stream.
            let op_of = op_of_calls(m);
            for t in 0..m.threads.len() {
                let (first, last, spans) =
                    (m.threads[t].first, m.threads[t].last, m.threads[t].spans);
                // The current call of the site: its first launch (call, op), its `inv`, and
                // whether it is a run of the site's backward calls.
                let mut open: Option<(u32, u32, u32, bool)> = None;
                let mut prev_inv = NONE;
                for c in first..last {
                    let call = m.calls[c as usize];
                    // The backward of the site's forward ops, where the trace ties them: a
                    // compiler that fuses a function fuses its backward too.
                    let bwd = call.site != s && call.fwd == s;
                    let mine = (call.site == s || bwd) && call.kind != ApiKind::Sync;
                    let j = op_of[c as usize];
                    // A new call of the function: another Python span, or (stacks) back at
                    // the first launch's line. A run of backward calls (nothing else of the
                    // thread between them, and no wake: the next step's backward) is one.
                    let same_call = open.is_some_and(|(_, _, inv, was_bwd)| {
                        if bwd || was_bwd {
                            bwd && was_bwd && call.after == NONE
                        } else if spans {
                            call.inv == inv && inv != NONE
                        } else {
                            !(call.inv == inv && prev_inv != inv)
                        }
                    });
                    prev_inv = call.inv;
                    if !mine {
                        open = None;
                        continue;
                    }
                    match open {
                        Some((c0, j0, _, _)) if same_call => {
                            let x = u.call(m, c);
                            x.seg = 0;
                            x.own = 0;
                            if j != NONE {
                                // Ready when the call's first kernel was; right after the
                                // kernel before it on its stream when that is the same call's.
                                let lat = if j0 != NONE {
                                    m.ops[j0 as usize].lat - m.calls[c0 as usize].own
                                } else {
                                    m.ops[j as usize].lat
                                };
                                let lane_first = m.lanes[m.ops[j as usize].lane as usize].first;
                                let joined = j > lane_first && {
                                    let p = m.ops[j as usize - 1].call;
                                    p != NONE && p >= c0 && p < c
                                };
                                let o = u.op(m, j);
                                o.lat = lat;
                                if joined {
                                    o.gap = 0;
                                }
                            }
                        }
                        _ => {
                            // A call that launched nothing starts one only where none is
                            // open, or the open one is the other kind (forward, backward).
                            if j != NONE || open.is_none_or(|o| o.3 != bwd) {
                                open = Some((c, j, call.inv, bwd));
                            }
                        }
                    }
                }
            }
        }
        WhatIf::Planning => {
            // A plan is a call's CPU time far above the site's usual one: each goes down to it.
            let usual = median(
                m.calls
                    .iter()
                    .filter(|c| c.site == s)
                    .map(|c| c.seg)
                    .collect(),
            );
            let plan = (PLAN_FACTOR * usual.max(1)).max(PLAN_MIN_NS);
            for c in 0..m.calls.len() as u32 {
                let call = m.calls[c as usize];
                if call.site == s && call.seg > plan {
                    let x = u.call(m, c);
                    x.after_gap = (x.after_gap - (call.seg - usual)).max(0);
                    x.seg = usual;
                }
            }
        }
        WhatIf::HostWork | WhatIf::Input => {
            // Its CPU time during its gaps: each launch's CPU time before it, down to the
            // thread's typical, by no more than the device sat idle before its op.
            // A graph launch's ops share its call: the idle before the first of them.
            let mut idle = vec![0; m.calls.len()];
            for o in m.ops.iter().filter(|o| o.call != NONE) {
                let i = &mut idle[o.call as usize];
                *i = (*i).max(o.idle_before);
            }
            for c in 0..m.calls.len() as u32 {
                let call = m.calls[c as usize];
                let floor = seg[call.thread as usize].max(0);
                let cut = (call.seg - floor).min(idle[c as usize]);
                if call.site == s && cut > 0 {
                    let x = u.call(m, c);
                    x.seg = call.seg - cut;
                    // A call woken by another thread starts after that one's call.
                    x.after_gap = (x.after_gap - cut).max(0);
                }
            }
        }
        WhatIf::SlowLaunch => {
            for c in 0..m.calls.len() as u32 {
                let call = m.calls[c as usize];
                let typical = own[call.thread as usize];
                if call.site == s && call.kind == ApiKind::Launch && call.own > typical {
                    u.call(m, c).own = typical;
                }
            }
        }
        WhatIf::Sync => {
            for t in 0..m.threads.len() {
                let (first, last) = (m.threads[t].first, m.threads[t].last);
                for c in first..last {
                    let call = m.calls[c as usize];
                    // A sync right before one of the site's launches or copies is in its
                    // way; one right before a sync of the site (or a copy that waited) is
                    // not: that sync, `torch.cuda.synchronize()` after an `.item()`, waits
                    // for nothing, and the one before it is another site's to remove.
                    let before_mine = c + 1 < last && {
                        let next = &m.calls[c as usize + 1];
                        let waits = next.kind == ApiKind::Sync
                            || (next.kind == ApiKind::Copy && next.wait != NONE);
                        next.site == s && !waits
                    };
                    if call.kind == ApiKind::Sync && (call.site == s || before_mine) {
                        let x = u.call(m, c);
                        x.wait = NONE;
                        x.own = 0;
                    } else if call.kind == ApiKind::Copy && call.wait != NONE && call.site == s {
                        // A blocking copy made asynchronous (the value read later): its
                        // own time after the op, no wait.
                        let x = u.call(m, c);
                        x.wait = NONE;
                        x.own = call.tail;
                    }
                }
            }
        }
    }
    u
}

/// Per step of `range`, the CPU time of its busiest launching thread: the time before and in
/// each call, less what a call spent waiting for the GPU (a call that waited counts its time
/// after the op it waited for). Calls belong to the step their measured start lies in (the
/// last step ends at its end), and count their time before them from the step's start only.
fn cpu_busy(m: &Model, steps: &Steps, range: std::ops::Range<usize>) -> Vec<Ns> {
    let starts: Vec<Ns> = steps.steps[range.clone()].iter().map(|s| s.start).collect();
    let end = steps.steps[range.end - 1].end;
    let mut out = vec![0; range.len()];
    for t in &m.threads {
        let mut mine = vec![0; range.len()];
        for c in &m.calls[t.first as usize..t.last as usize] {
            let k = starts.partition_point(|&s| s <= c.start);
            if k == 0 || c.start >= end {
                continue;
            }
            let busy = if c.wait == NONE { c.own } else { c.tail };
            mine[k - 1] += c.seg.min(c.start - starts[k - 1]) + busy;
        }
        for (o, x) in out.iter_mut().zip(mine) {
            *o = (*o).max(x);
        }
    }
    out
}

/// Replays the steady steps of `store` unchanged and with each site's fix (`sites`: a site's
/// key, as advice's `site_key_of` gives it, and its what-if), with `key` giving a call's site
/// key. None without steps or calls.
pub fn estimate(
    store: &Store,
    steps: &Steps,
    sites: &[(String, WhatIf)],
    key: &mut dyn FnMut(StackId, NameId, NameId) -> String,
) -> Option<Estimate> {
    let range = block(steps);
    if range.is_empty() {
        return None;
    }
    let (first, last) = (&steps.steps[range.start], &steps.steps[range.end - 1]);
    let cpu = cpu_anchored(&steps.source);
    let lo = if cpu {
        first.start
    } else {
        block_lo(store, first.start, first.end)
    };
    let mut model = build(store, lo, last.end, key);
    if model.calls.is_empty() || model.ops.is_empty() {
        return None;
    }
    let anchors = Anchors::new(&model, store, cpu);
    let mut baseline = run(&model);
    let before = walls(&model, &baseline, &anchors, steps, range.clone());
    let measured = periods(steps, range.clone());
    let errors: Vec<f64> = before
        .iter()
        .zip(&measured)
        .map(|(&r, &m)| (r - m).abs() as f64 / m.max(1) as f64)
        .collect();
    let mut sorted = errors.clone();
    sorted.sort_by(f64::total_cmp);
    let baseline_error = sorted
        .get((sorted.len().max(1) - 1) / 2)
        .copied()
        .unwrap_or(0.0);
    let replayed_median_ns = median(before.clone());
    // gaptop's own cost out of the model (a recording's probe): every what-if below, and
    // the step it is a share of, are of the program as it runs without gaptop.
    let (before, profiler) = match store.launch_cost.as_ref().and_then(PerCall::of) {
        Some(pc) => {
            without_profiler(&mut model, pc);
            // What the fixes are compared with, here and in the UI's picture of a fix.
            baseline = run(&model);
            let bare = walls(&model, &baseline, &anchors, steps, range.clone());
            let cost = ProfilerCost {
                callback_ns: pc.callback_ns,
                record_ns: pc.record_ns,
                launch_ns: pc.of_call(true, true),
                step_ns: mean_diff(&before, &bare).max(0),
                replayed_median_ns: median(bare.clone()),
            };
            (bare, Some(cost))
        }
        None => (before, None),
    };
    let unmeasured = match (&profiler, &store.launch_cost) {
        (None, Some(c)) => Some(c.note.clone()),
        _ => None,
    };
    let busy: Vec<Ns> = range
        .clone()
        .map(|k| steps.steps[k].busy_ns / steps.devices.max(1) as Ns)
        .collect();
    let (seg, own) = typical(&model);
    let cpu = cpu_busy(&model, steps, range.clone());
    let index: HashMap<String, u32> = model
        .sites
        .iter()
        .enumerate()
        .map(|(i, k)| (k.clone(), i as u32))
        .collect();
    // With several ranks, which ones each fix changes.
    let of_ranks = match store.rank_count() {
        n if n >= 2 => n,
        _ => 0,
    };
    let mut out = HashMap::default();
    // The syncs' own sites too (`.item()`, `.cpu()`: they launch nothing, so no gap is charged
    // to them), the ones that waited longest first.
    let mut waited: HashMap<u32, Ns> = HashMap::default();
    for c in model
        .calls
        .iter()
        .filter(|c| c.kind == ApiKind::Sync && c.site != NONE)
    {
        *waited.entry(c.site).or_default() += c.end - c.start;
    }
    let mut syncs: Vec<(u32, Ns)> = waited.into_iter().collect();
    syncs.sort_unstable_by_key(|&(s, w)| (std::cmp::Reverse(w), s));
    let asked: HashMap<&str, WhatIf> = sites.iter().map(|(k, w)| (k.as_str(), *w)).collect();
    // A sync at a site asked with another fix (a function that launches and then reads a
    // value back, `.item()`) is replayed as well, under its own key ([`SYNCS_OF`]).
    let sites: Vec<(String, WhatIf)> = sites
        .iter()
        .cloned()
        .chain(
            syncs
                .into_iter()
                .map(|(s, _)| model.sites[s as usize].clone())
                .filter_map(|k| match asked.get(k.as_str()) {
                    None => Some(k),
                    Some(WhatIf::Sync) => None,
                    Some(_) => Some(format!("{k}{SYNCS_OF}")),
                })
                .take(SYNC_SITES)
                .map(|k| (k, WhatIf::Sync)),
        )
        .collect();
    for (k, w) in &sites {
        let Some(&s) = index.get(k.strip_suffix(SYNCS_OF).unwrap_or(k)) else {
            continue;
        };
        let undo = apply(&mut model, s, *w, &seg, &own);
        let sync_key = match *w {
            WhatIf::Sync => sync_owner(&undo, s).map(|o| model.sites[o as usize].clone()),
            _ => None,
        };
        let ranks = if of_ranks == 0 {
            Vec::new()
        } else {
            touched(&model, store, &undo)
        };
        let t = run(&model);
        let after = walls(&model, &t, &anchors, steps, range.clone());
        drop(t);
        undo.revert(&mut model);
        let diffs: Vec<Ns> = before.iter().zip(&after).map(|(b, a)| b - a).collect();
        let n = diffs.len().max(1) as Ns;
        let saving = mean_diff(&before, &after).max(0);
        let moved: Vec<Ns> = diffs
            .iter()
            .zip(&before)
            .filter(|(d, b)| **d * 100 > **b)
            .map(|(d, _)| *d)
            .collect();
        let after_total: Ns = after.iter().sum::<Ns>().max(1);
        let busy_after = busy_share(&busy, &after);
        let saving_overlapped_ns = (*w == WhatIf::HostWork).then(|| {
            let cut: Ns = before
                .iter()
                .zip(&after)
                .zip(&cpu)
                .map(|((b, a), c)| (b - a.max(c)).max(0))
                .sum();
            cut / n
        });
        let step_after = after_total / n;
        let load = (*w == WhatIf::Input).then(|| loading(&model, store, s, &seg, diffs.len()));
        let workers = load.and_then(|l| l.workers_for(step_after));
        let workers_seen = load.map_or(0, |l| l.helpers);
        let backward_calls = match *w {
            WhatIf::Fuse => model
                .calls
                .iter()
                .filter(|c| c.fwd == s && c.site != s && c.kind != ApiKind::Sync)
                .count(),
            _ => 0,
        };
        let forward_key = match *w {
            WhatIf::Fuse => forward_of_site(&model, s)
                .map(|f| model.sites[f as usize].clone())
                .filter(|f| asked.get(f.as_str()) == Some(&WhatIf::Fuse)),
            _ => None,
        };
        out.insert(
            k.clone(),
            SiteEstimate {
                saving_ns: saving,
                saving_changed_ns: median(moved.clone()),
                steps_changed: moved.len(),
                busy_after,
                whatif: w.assumes(),
                workers,
                workers_seen,
                call: match *w {
                    WhatIf::Sync => model.site_syncs[s as usize],
                    _ => None,
                }
                .unwrap_or(model.site_calls[s as usize]),
                ranks,
                of_ranks,
                saving_overlapped_ns,
                backward_calls,
                forward_key,
                fused_with: None,
                sync_key,
                sync_in: None,
            },
        );
    }
    // The whole step as CUDA graphs.
    let undo = graphs(&mut model, steps, range.clone());
    let t = run(&model);
    let after = walls(&model, &t, &anchors, steps, range.clone());
    drop(t);
    undo.revert(&mut model);
    let graph_saving_ns = mean_diff(&before, &after).max(0);
    let graph_busy_after = busy_share(&busy, &after);
    Some(Estimate {
        json: ReplayJson {
            graph_saving_ns,
            graph_busy_after,
            graph_whatif: GRAPH_ASSUMES,
            baseline_error,
            steps: range.len(),
            ops: model.ops.len(),
            calls: model.calls.len(),
            forced: baseline.forced,
            measured_mean_ns: measured.iter().sum::<Ns>() / measured.len().max(1) as Ns,
            measured_median_ns: median(measured),
            replayed_median_ns,
            profiler,
            profiler_unmeasured: unmeasured,
        },
        sites: out,
        steps: range,
        model,
        baseline,
    })
}

/// The forward site most of site `s`'s calls are the backward of, where at least half are.
fn forward_of_site(m: &Model, s: u32) -> Option<u32> {
    let mut by: HashMap<u32, usize> = HashMap::default();
    let mut all = 0;
    for c in m.calls.iter().filter(|c| c.site == s) {
        all += 1;
        if c.fwd != NONE {
            *by.entry(c.fwd).or_default() += 1;
        }
    }
    let (f, n) = by
        .into_iter()
        .max_by_key(|&(f, n)| (n, std::cmp::Reverse(f)))?;
    (2 * n >= all).then_some(f)
}

/// A site's fix replayed over the block, for drawing.
#[derive(Clone, Debug)]
pub struct SiteReplay {
    /// The replayed times with the fix.
    pub times: Times,
    /// Each step of the block's replayed start and end, with the fix and unchanged.
    pub spans: Vec<(Ns, Ns)>,
    pub baseline_spans: Vec<(Ns, Ns)>,
}

/// Site `site_key`'s fix (`w`) replayed over the block of `est` (made from `store` and
/// `steps`), for drawing. None when the site has no call in the block.
pub fn replay_site(
    est: &Estimate,
    store: &Store,
    steps: &Steps,
    site_key: &str,
    w: WhatIf,
) -> Option<SiteReplay> {
    let m = &est.model;
    let s = m.sites.iter().position(|k| k == site_key)? as u32;
    let (seg, own) = typical(m);
    let mut changed = m.clone();
    apply(&mut changed, s, w, &seg, &own);
    let times = run(&changed);
    let cpu = cpu_anchored(&steps.source);
    let a = Anchors::new(&changed, store, cpu);
    let b = Anchors::new(m, store, cpu);
    Some(SiteReplay {
        spans: spans(&changed, &times, &a, steps, est.steps.clone()),
        baseline_spans: spans(m, &est.baseline, &b, steps, est.steps.clone()),
        times,
    })
}

/// A slow GPU's kernels at the other ranks' speed: the ops named `name` of process `proc`
/// (not collectives) `ratio` times shorter. Returns the mean saving a step of that alone, and,
/// with `also` (another site's fix), what it adds once that fix is in: one late rank's slack
/// can hide another's slow kernel, whose fix then saves nothing until the first is fixed.
pub fn slow_kernel(
    est: &mut Estimate,
    store: &Store,
    steps: &Steps,
    kernel: (u32, NameId, f64),
    also: Option<(&str, WhatIf)>,
) -> (Ns, Option<Ns>) {
    let (proc, name, ratio) = kernel;
    let cpu = cpu_anchored(&steps.source);
    let range = est.steps.clone();
    let m = &mut est.model;
    let anchors = Anchors::new(m, store, cpu);
    let before = walls(m, &est.baseline, &anchors, steps, range.clone());
    let (seg, own) = typical(m);
    let site = also.and_then(|(k, w)| Some((m.sites.iter().position(|x| x == k)? as u32, w)));
    let saving = |m: &mut Model, kernels: bool, fix: Option<(u32, WhatIf)>| {
        let mut u = match fix {
            Some((s, w)) => apply(m, s, w, &seg, &own),
            None => Undo::default(),
        };
        if kernels {
            for j in 0..m.ops.len() as u32 {
                let o = m.ops[j as usize];
                let p = store.lanes[m.lanes[o.lane as usize].lane].key.proc;
                if p == proc && o.name == name && o.group == NONE {
                    u.op(m, j).dur = (o.dur as f64 / ratio) as Ns;
                }
            }
        }
        let t = run(m);
        let after = walls(m, &t, &anchors, steps, range.clone());
        u.revert(m);
        mean_diff(&before, &after)
    };
    let alone = saving(m, true, None).max(0);
    let added = site.map(|fix| (saving(m, true, Some(fix)) - saving(m, false, Some(fix))).max(0));
    (alone, added)
}

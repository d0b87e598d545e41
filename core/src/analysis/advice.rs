//! What to fix: the gap time of a window grouped by the code that launched it (the innermost
//! Python frame, else the innermost frame; never the profiler's own, see [`site_of`]), with a
//! verdict on why the GPU waited there (`analysis::verdict`), the cause a pattern of its
//! evidence names (`analysis::patterns`), what a fix would save a step, and the fix: the
//! pattern's, else the usual remedy for the verdict in the framework the code runs on.
//!
//! With steps (the program's iterations, `analysis::steps`), a site whose gaps occur in at least
//! half of the steady steps is *recurring* and ranked by its idle a step; gaps outside the
//! steady state or of sites that do not recur are *one-offs*, counted apart and never ranked
//! above a recurring site. Without steps, a gap of a millisecond or more and 50 times its
//! site's typical gap stands out as a one-off.
//!
//! The saving a step (`saving_ns`) is the median over the steady steps of what the usual fix
//! removes from the site's gaps in that step: each gap less [`gaps::GRAPH_GAP_NS`] (the spacing that
//! stays between kernels replayed from a CUDA graph) for `launch_bound`; all of it for
//! `host_work`, `sync` and `slow_launch`; nothing for `busy`, `event_wait`, `graph` and
//! `unknown`, and nothing for sites that do not recur.

use std::collections::HashMap;

pub use crate::analysis::advice_row::Advice;
use crate::analysis::gaps::Gap;
use crate::analysis::oncpu::JsonCpu;
use crate::analysis::patterns;
use crate::analysis::replay;
use crate::analysis::site::{LeafAcc, Site};
use crate::analysis::steps::Steps;
use crate::analysis::summary::Summary;
use crate::analysis::threadstate;
use crate::analysis::verdict::{self as vd, GapFigure};
use crate::analysis::verdict::{fix, Framework, Verdict};
use crate::frames::display::function_at;
use crate::model::records::{NameId, Ns, StackId};
use crate::model::store::Store;
use crate::units::fmt_short;

/// The frame a launch stack is charged to: its innermost non-plumbing Python frame outside
/// the profiler's own frames (what runs inside `record_function.__enter__` or the profiler's
/// `step` is the code that called it), else any such frame; without Python frames, the
/// innermost backward node (a trace's `MulBackward0`, autograd's `…::MulBackward0::apply`)
/// unless a collective is launched under it; else its innermost frame (0 for no stack).
pub fn site_of(store: &Store, stack: StackId) -> NameId {
    let frames = store.stacks.frames(stack);
    let name = |f: &&NameId| store.names.get(**f);
    let read = |&f: &NameId| (store.names.get(f), store.names.frame(f));
    crate::frames::hide::innermost_python(&frames, read, false)
        .or_else(|| {
            // Not for a collective launched from a node's hook: that is named by its op.
            let other = |f: &NameId| {
                store.names.frame(*f).py_source().is_some()
                    || patterns::is_comm_frame(store.names.get(*f))
            };
            let node = |f: &&NameId| crate::frames::backward_node(name(f)).is_some();
            (!frames.iter().any(other))
                .then(|| frames.iter().rev().find(node))
                .flatten()
        })
        .or(frames.last())
        .copied()
        .unwrap_or(0)
}

/// A site's function, without its line: `(file, function)` for a Python frame
/// (`/x/model.py(12): Model.forward`), else the frame as it is.
fn function_of(frame: &str) -> (String, String, Option<u32>) {
    match crate::frames::frame(frame).python() {
        Some(p) if p.line().is_some() => (p.file.to_string(), p.function.to_string(), p.line()),
        _ => (String::new(), frame.to_string(), None),
    }
}

/// The key advice groups a gap under (its launch site's function).
pub fn site_key(store: &Store, g: &Gap) -> String {
    let (file, qual, _) = site_function(store, Site::of(g));
    key_of(&file, &qual)
}

/// [`site_key`] of the gaps charged to a launch stack, API and op.
pub fn site_key_of(store: &Store, stack: StackId, api: NameId, op: NameId) -> String {
    let (file, qual, _) = site_function(store, Site::of_key(stack, api, op));
    key_of(&file, &qual)
}

/// The key advice groups a function's gaps under, for a frame of the call tree (`file(line):
/// qual`); None for frames that are not a Python function (APIs, kernels, native frames).
pub fn frame_key(frame: &str) -> Option<String> {
    match function_of(frame) {
        (file, qual, Some(_)) => Some(key_of(&file, &qual)),
        _ => None,
    }
}

/// Where a site stands across the steps: `recurring: in 48 of 50 steps, 51ms a step`.
pub fn steps_line(a: &Advice, steady_steps: u32) -> Option<String> {
    let (present, per) = (a.steps_present?, a.per_step_ns?);
    Some(if a.recurring {
        let fused_with = a.replay.as_ref().and_then(|r| r.fused_with.as_deref());
        let sync_in = a.replay.as_ref().and_then(|r| r.sync_in.as_deref());
        let save = match (a.saving_ns, fused_with, sync_in) {
            (Some(s), _, Some(x)) if s > 0 => format!(
                ", removing the sync before them ({x}) saves ~{} a step",
                fmt_short(s)
            ),
            (Some(s), Some(f), _) if s > 0 => format!(
                ", a fix saves ~{} a step, which its forward's fix ({f}) saves too",
                fmt_short(s)
            ),
            (Some(s), None, _) if s > 0 => format!(", a fix saves ~{} a step", fmt_short(s)),
            (_, Some(f), _) => format!(", in the saving of its forward's fix ({f})"),
            _ => String::new(),
        };
        format!(
            "recurring: in {present} of {steady_steps} steps, {} a step{save}",
            fmt_short(per)
        )
    } else {
        format!("not recurring: in {present} of {steady_steps} steps")
    })
}

/// What the CPU did during a site's gaps, in a line: its deepest frame in at least half of the
/// samples (`CPU during its gaps: 93% deflate [libz.so.1] (412 samples, on CPU 97%)`).
pub fn cpu_line(a: &Advice) -> Option<String> {
    if let Some(l) = a.thread_state.as_deref().and_then(threadstate::line) {
        return Some(l);
    }
    let c = a.cpu.as_ref()?;
    let frames: Vec<(&str, f64)> = c
        .frames
        .iter()
        .map(|f| (f.frame.as_str(), f.share))
        .collect();
    Some(format!(
        "CPU during its gaps: {} ({} samples, on CPU {:.0}% of the gaps)",
        crate::analysis::oncpu::headline(&frames)?,
        c.samples,
        100.0 * c.on_cpu
    ))
}

/// One line on a function's gaps: the verdict, the cause where a pattern names it, the fix,
/// and the figure the verdict went by.
pub fn summary_line(a: &Advice) -> String {
    let cause = match &a.cause_name {
        Some(c) => format!(" ({c})"),
        None => String::new(),
    };
    format!(
        "{}{cause}: {} ({} gap{} here, {}; {} of gap time)",
        a.verdict.as_str(),
        a.fix,
        a.gaps,
        if a.gaps == 1 { "" } else { "s" },
        a.figure.phrase(),
        fmt_short(a.gap_ns)
    )
}

fn key_of(file: &str, qual: &str) -> String {
    format!("{file}\u{1f}{qual}")
}

/// A site's key as it reads, without line numbers (which move between versions of the code):
/// `function  file.py`, or the function alone.
pub fn key_name(key: &str) -> String {
    match key.split_once('\u{1f}') {
        Some(("", qual)) => qual.to_string(),
        Some((file, qual)) => function_at(qual, file, ""),
        None => key.to_string(),
    }
}

/// `(file, function, line)` of a launch site. Without a stack, the function says so, with
/// the launching API and the op's short name (template arguments dropped, so that a kernel's
/// variants group together).
fn site_function(store: &Store, site: Site) -> (String, String, Option<u32>) {
    match site_of(store, site.stack) {
        0 => {
            let op = crate::frames::short_kernel(store.names.get(site.op));
            let what = match site.api {
                0 => format!("(launch call not seen) {op}"),
                // A sync's site has no op: the call alone.
                api if op.is_empty() => format!("(no Python stack) {}", store.names.get(api)),
                api => format!("(no Python stack) {} → {op}", store.names.get(api)),
            };
            (String::new(), what, None)
        }
        f => function_of(store.names.get(f)),
    }
}

/// One function's gaps, its gap time per line, its file and name, and its sites.
struct FnAcc {
    acc: LeafAcc,
    lines: HashMap<Option<u32>, Ns>,
    file: String,
    qual: String,
    /// Its launch sites, with the gap time charged to each.
    sites: Vec<(Site, Ns)>,
}

/// Gaps a function needs before any of them can stand out as a one-off (without steps).
const ONE_OFF_MIN_GAPS: u64 = 3;

/// The shortest gap that stands out as a one-off next to gaps of `typical`: a millisecond, or
/// 50 times the typical gap if longer.
fn one_off_floor(typical: Ns) -> Ns {
    (50 * typical.max(1)).max(1_000_000)
}

/// Without steps: how many times its code's typical gap a gap is, when it stands out as a
/// one-off: at least a millisecond, 50 times the typical gap, and its code has other gaps to
/// compare with.
pub fn one_off(gap: Ns, typical: Ns, gaps_at_site: u64) -> Option<u64> {
    (gaps_at_site >= ONE_OFF_MIN_GAPS && gap >= one_off_floor(typical))
        .then(|| (gap / typical.max(1)) as u64)
}

/// The framework a function's code runs on: from its frames and its ops, else from what the
/// whole capture names.
fn framework_of(store: &Store, f: &FnAcc, everywhere: Framework) -> Framework {
    let mut names = f
        .sites
        .iter()
        .flat_map(|(s, _)| {
            store
                .stacks
                .frames(s.stack)
                .into_iter()
                .chain([s.api, s.op])
        })
        .chain(f.acc.ops.iter().copied());
    names
        .find_map(|n| Framework::of_name(store.names.get(n)))
        .unwrap_or(everywhere)
}

/// What the capture as a whole runs on: the first framework any of its names points to (its
/// frames and ops; JAX and CuPy before PyTorch, whose names can appear beside theirs).
fn capture_framework(store: &Store) -> Framework {
    let mut found: Option<Framework> = None;
    for id in 0..store.names.len() as NameId {
        match Framework::of_name(store.names.get(id)) {
            Some(f @ (Framework::Jax | Framework::CuPy)) => return f,
            Some(f) if found.is_none() => found = Some(f),
            _ => {}
        }
    }
    found.unwrap_or(Framework::Cuda)
}

/// The exact median of a list of values (the lower middle of an even count).
fn median(mut v: Vec<Ns>) -> Ns {
    if v.is_empty() {
        return 0;
    }
    let mid = (v.len() - 1) / 2;
    *v.select_nth_unstable(mid).1
}

/// The `n` functions to fix first in the summary's window, most worth it first: with steps,
/// recurring sites by their idle a step, then the rest; without, by gap time less one-offs.
pub fn advise(store: &Store, s: &Summary, n: usize) -> Vec<Advice> {
    // Per function: what its gaps were like, and gap time per line.
    let mut by_fn: HashMap<String, FnAcc> = HashMap::new();
    for (&site, acc) in &s.leaves {
        let (file, qual, line) = site_function(store, site);
        let e = by_fn.entry(key_of(&file, &qual)).or_insert_with(|| FnAcc {
            acc: LeafAcc::default(),
            lines: HashMap::new(),
            file,
            qual,
            sites: Vec::new(),
        });
        e.acc.merge(acc);
        *e.lines.entry(line).or_default() += acc.gap_ns;
        e.sites.push((site, acc.gap_ns));
    }
    let total = s.charged_ns().max(1);
    let devices = store.devices().len().max(1) as f64;
    let busy_frac = s.busy_ns as f64 / ((s.hi - s.lo).max(1) as f64 * devices);
    let everywhere = capture_framework(store);
    let steady = s.steady_steps;
    let mut out: Vec<Advice> = by_fn
        .into_iter()
        .map(|(key, f)| {
            let a = &f.acc;
            let mean_op = a.next_ns / a.gaps.max(1) as Ns;
            let verdict = vd::verdict(a, busy_frac);
            let framework = framework_of(store, &f, everywhere);
            // The cause a pattern names, with its fix; else the verdict's usual fix.
            let found = patterns::find(&patterns::Evidence {
                store,
                launches: &f.sites,
                acc: a,
                qual: &f.qual,
                verdict,
            });
            let fix = found.as_ref().map_or(fix(verdict, framework), |c| c.fix);
            let cause = found.as_ref().map(|c| (c.name.as_str(), c.reason.as_str()));
            let states = threadstate::site_states(store, a.steady_cpu(), a.steady_states());
            let text = match (&found, states.as_deref()) {
                // What the thread was doing, where its states name the cause.
                (Some(c), Some(s)) if patterns::is_state_cause(c.id) => {
                    let what = threadstate::off_cpu_words(s);
                    format!("{what}. Cause: {}: {}. Fix: {fix}.", c.name, c.reason)
                }
                _ => vd::text(verdict, a, mean_op, fix, cause),
            };
            let mut lines: Vec<(Option<u32>, Ns)> = f.lines.into_iter().collect();
            lines.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            let shown: Vec<String> = lines
                .iter()
                .filter_map(|l| l.0)
                .take(4)
                .map(|l| l.to_string())
                .collect();
            let site = if shown.is_empty() {
                f.qual.clone()
            } else {
                let more = if lines.len() > shown.len() {
                    ",…"
                } else {
                    ""
                };
                function_at(&f.qual, &f.file, &format!("{}{more}", shown.join(",")))
            };
            // Across the steady steps: how often, how much a step, and what a fix saves.
            let (recurring, steps_present, per_step_ns, saving_ns, one_offs) = if steady > 0 {
                // Each steady step's gap time (none: 0), then what a fix would remove of it,
                // one list at a time: a capture's steps can be a third of its ops.
                let each = |removable: bool| {
                    let mut each = vec![0; steady as usize];
                    for (site, _) in &f.sites {
                        if let Some(leaf) = s.leaves.get(site) {
                            leaf.per_step.add_one(&mut each, removable);
                        }
                    }
                    each
                };
                let gaps = each(false);
                let present = gaps.iter().filter(|&&v| v > 0).count() as u32;
                let per_step_gap = median(gaps);
                let recurring = 2 * present >= steady;
                let saving = match verdict {
                    _ if !recurring => 0,
                    Verdict::LaunchBound => median(each(true)),
                    Verdict::HostWork | Verdict::Sync | Verdict::SlowLaunch => per_step_gap,
                    _ => 0,
                };
                let one_offs = if recurring {
                    a.outside
                } else {
                    (a.gaps, a.gap_ns)
                };
                (
                    recurring,
                    Some(present),
                    Some(per_step_gap),
                    Some(saving),
                    one_offs,
                )
            } else {
                let one_offs = if a.gaps >= ONE_OFF_MIN_GAPS {
                    a.at_least(one_off_floor(a.typical_gap()))
                } else {
                    (0, 0)
                };
                (false, None, None, None, one_offs)
            };
            // A recurring site's CPU is what it does in the steady steps, not the warm-up's
            // imports and loading that its one-off gaps may hold.
            let cpu = {
                let steady_ns: Ns = a.steady_hist_ns.iter().sum();
                let (c, over) = if recurring && a.cpu_steady.samples > 0 {
                    (&a.cpu_steady, steady_ns)
                } else {
                    (&a.cpu, a.gap_ns)
                };
                (c.samples > 0).then(|| JsonCpu {
                    samples: c.samples,
                    on_cpu: (c.cpu_ns as f64 / over.max(1) as f64).min(1.0),
                    frames: c.innermost(store, 8),
                })
            };
            Advice {
                code: crate::analysis::advice_row::code_to_fix(
                    &site,
                    verdict,
                    found.is_some(),
                    cpu.as_ref(),
                ),
                site,
                key,
                one_offs: one_offs.0,
                one_off_ns: one_offs.1,
                gaps: a.gaps,
                gap_ns: a.gap_ns,
                share: a.gap_ns as f64 / total as f64,
                typical_gap_ns: a.typical_gap(),
                typical_exact: a.is_exact(),
                verdict_gap_ns: GapFigure::of(a).ns,
                figure: GapFigure::of(a),
                mean_op_ns: mean_op,
                verdict,
                framework,
                recurring,
                steps_present,
                per_step_ns,
                saving_ns,
                gap_sum_ns: saving_ns,
                replay: None,
                cpu,
                thread_state: states,
                cause: found.as_ref().map(|c| c.id),
                reason: found.as_ref().map(|c| c.reason.clone()),
                cause_name: found.map(|c| c.name),
                text,
                fix,
            }
        })
        .collect();
    out.sort_by(|x, y| {
        let rank = |a: &Advice| {
            (
                a.recurring,
                a.per_step_ns.unwrap_or(0),
                a.gap_ns - a.one_off_ns,
            )
        };
        rank(y)
            .cmp(&rank(x))
            .then(y.gap_ns.cmp(&x.gap_ns))
            .then(x.key.cmp(&y.key))
    });
    out.truncate(n);
    out
}

/// A window's diagnosis: its steps, its summary with each gap placed in its step, what to fix
/// first, and what to tell a one-off by.
pub struct Diagnosis {
    pub steps: Option<Steps>,
    pub summary: Summary,
    /// Every launching function, most worth fixing first.
    pub advice: Vec<Advice>,
    /// The replay of the steady steps, and each replayed site's fix (None without steps).
    pub replay: Option<replay::Estimate>,
}

impl Diagnosis {
    /// The advice entry that a gap is charged to.
    pub fn advice_for(&self, store: &Store, g: &Gap) -> Option<&Advice> {
        let key = site_key(store, g);
        self.advice.iter().find(|a| a.key == key)
    }

    /// Whether a gap is a one-off: with steps, outside the steady state or of a site that does
    /// not recur; without, far longer than its site's typical gap.
    pub fn is_one_off(&self, store: &Store, g: &Gap) -> bool {
        let a = self.advice_for(store, g);
        match &self.steps {
            Some(st) => {
                // The summary's steady steps, the last of the steps (as `Steps::steady`).
                let n = st.steps.len();
                let steady = n - (self.summary.steady_steps as usize).min(n)..n;
                let inside = st.step_of(g.start).is_some_and(|i| steady.contains(&i));
                !inside || a.is_some_and(|a| !a.recurring)
            }
            None => a.is_some_and(|a| one_off(g.dur(), a.typical_gap_ns, a.gaps).is_some()),
        }
    }

    /// The steady steps the per-step figures are over (0 without steps).
    pub fn steady_steps(&self) -> u32 {
        self.summary.steady_steps
    }
}

/// The fix of a sync that the replay found worth removing.
const SYNC_FIX: &str = "defer the sync (read the value a step later, or every N steps), or make the copy non-blocking (`.to(\"cpu\", non_blocking=True)` into pinned memory)";

/// Advice on a sync no gap is charged to (a `.item()` or `.cpu()` launches nothing): the
/// function that called it, with the replayed saving of its removal.
fn sync_advice(store: &Store, key: &str, e: &replay::SiteEstimate) -> Advice {
    let (stack, api) = e.call;
    let (file, qual, line) = site_function(store, Site::of_key(stack, api, 0));
    let site = match line {
        Some(l) => function_at(&qual, &file, &l.to_string()),
        None => qual.clone(),
    };
    let text = format!(
        "A sync ({}) makes the CPU wait for the GPU, which then waits for the next launch. Fix: {SYNC_FIX}.",
        store.names.get(api)
    );
    Advice::replayed(
        site,
        key.to_string(),
        Verdict::Sync,
        Framework::of_name(&qual).unwrap_or(Framework::Cuda),
        e.saving_ns,
        Some(e.clone()),
        None,
        text,
        SYNC_FIX,
    )
}

/// What to check on a GPU slower than its peers.
const SLOW_GPU_FIX: &str = "check that GPU: its clocks and throttling (nvidia-smi -q -d CLOCK,PERFORMANCE), other processes on it, its placement (nvidia-smi topo -m)";

/// A rank whose kernel ran far slower than the same kernel on the other ranks, where that made
/// it late at a collective (`comm`'s late sites): advice of its own, its saving replayed with
/// the kernel at the others' speed, and, where another rank's fix is first, what it adds once
/// that one is in.
fn slow_gpus(
    store: &Store,
    steps: &Steps,
    est: &mut replay::Estimate,
    advice: &[Advice],
) -> Vec<Advice> {
    if store.procs.len() < 2 {
        return Vec::new();
    }
    let (lo, hi) = (
        steps.steps[est.steps.start].start,
        steps.steps[est.steps.end - 1].end,
    );
    let comm = crate::analysis::comm::analyse(store, lo, hi);
    let first = advice.iter().find(|a| {
        a.replay
            .as_ref()
            .is_some_and(|r| r.ranks.len() == 1 && r.saving_ns > 0)
    });
    let also = first.and_then(|a| Some((a.key.as_str(), whatif_of(a)?)));
    let mut out = Vec::new();
    for l in comm
        .late_sites
        .iter()
        .filter(|l| l.cause == "slow_kernel")
        .take(2)
    {
        let (Some(kernel), Some(ratio)) = (&l.kernel, l.ratio) else {
            continue;
        };
        let proc = l.proc as usize;
        let Some(name) = (0..store.names.len() as NameId).find(|&n| store.names.get(n) == kernel)
        else {
            continue;
        };
        let (alone, added) =
            replay::slow_kernel(est, store, steps, (proc as u32, name, ratio), also);
        let short = crate::frames::short_kernel(kernel);
        let then = match (first, added) {
            (Some(f), Some(add)) if alone * 10 < add => format!(
                " Its fix saves nothing until {}{} is fixed (that rank's slack hides it); then ~{} a step.",
                first_rank(f),
                f.site.split("  ").next().unwrap_or(&f.site),
                fmt_short(add)
            ),
            _ => String::new(),
        };
        let text = format!(
            "rank {}'s GPU runs {short} {ratio:.1}x slower than the others' median, which makes it late at {} collectives.{then} Fix: {SLOW_GPU_FIX}.",
            l.rank, l.count
        );
        out.push(Advice::replayed(
            format!("rank {}'s GPU: {short}", l.rank),
            format!("\u{1f}slow-gpu {} {kernel}", l.rank),
            Verdict::Busy,
            Framework::Cuda,
            alone,
            None,
            Some((
                "slow_gpu",
                format!("a slow GPU ({ratio:.1}x the others' median)"),
            )),
            text,
            SLOW_GPU_FIX,
        ));
    }
    out
}

/// `rank 3's ` for a site whose fix changes one rank.
fn first_rank(a: &Advice) -> String {
    match a.replay.as_ref().map(|r| r.ranks.as_slice()) {
        Some(&[r]) => format!("rank {r}'s "),
        _ => String::new(),
    }
}

/// Sites replayed with their fix: the first this many recurring ones.
const REPLAYED_SITES: usize = 12;

/// The what-if of a site's pattern: its cause's, else its verdict's; None where no fix is
/// modelled.
pub fn whatif_of(a: &Advice) -> Option<replay::WhatIf> {
    use replay::WhatIf as W;
    match (a.cause, a.verdict) {
        (Some("per_shape_planning"), _) => Some(W::Planning),
        (Some("input_bound" | "waiting_for_input"), _) => Some(W::Input),
        (_, Verdict::LaunchBound) => Some(W::Fuse),
        (_, Verdict::HostWork) => Some(W::HostWork),
        (_, Verdict::SlowLaunch) => Some(W::SlowLaunch),
        (_, Verdict::Sync) => Some(W::Sync),
        _ => None,
    }
}

/// Replays the steady steps with each of the first recurring sites' fix, puts the replayed
/// saving on their advice (the summed one stays in `gap_sum_ns`) and ranks them by it.
pub fn replay_advice(
    store: &Store,
    steps: &Steps,
    advice: &mut Vec<Advice>,
) -> Option<replay::Estimate> {
    let sites: Vec<(String, replay::WhatIf)> = advice
        .iter()
        .filter(|a| a.recurring)
        .filter_map(|a| Some((a.key.clone(), whatif_of(a)?)))
        .take(REPLAYED_SITES)
        .collect();
    let mut key = |stack, api, op| site_key_of(store, stack, api, op);
    let mut est = replay::estimate(store, steps, &sites, &mut key)?;
    // A row replayed with its own fix; a row not asked (a site whose gaps need no fix) whose
    // function also syncs gets a sync row of its own below.
    let asked = |a: &Advice| sites.iter().any(|(k, _)| k == &a.key);
    for a in advice.iter_mut() {
        if let Some(e) = est.sites.get(&a.key).filter(|_| asked(a)) {
            a.saving_ns = Some(e.saving_ns);
            a.replay = Some(e.clone());
        }
    }
    // Syncs whose removal saves time, where no gap names them (or only a row not asked).
    let mut extra: Vec<Advice> = est
        .sites
        .iter()
        .filter(|(_, e)| e.saving_ns > 0)
        .filter_map(|(k, e)| {
            let key = match advice.iter().find(|a| &a.key == k) {
                Some(a) if asked(a) => return None,
                Some(_) => format!("{k}{}", replay::SYNCS_OF),
                None => k.clone(),
            };
            Some(sync_advice(store, &key, e))
        })
        .collect();
    extra.sort_by(|x, y| x.key.cmp(&y.key));
    advice.extend(extra);
    // Rows whose saving is another row's fix, named by that row: a backward site fused with
    // its forward; a launch site whose gaps follow another function's sync (that function is
    // the line to change, and ranks before it where their savings are the same).
    let names: HashMap<String, String> = advice
        .iter()
        .map(|a| (a.key.clone(), a.site.clone()))
        .collect();
    for a in advice.iter_mut() {
        let Some(r) = a.replay.as_mut() else {
            continue;
        };
        r.fused_with = r.forward_key.as_ref().and_then(|k| names.get(k)).cloned();
        // The row of that site's syncs where the site also launches (`.item()` in a function
        // that launches: its syncs have a row of their own), else the site's.
        r.sync_in = r.sync_key.as_ref().and_then(|k| {
            names
                .get(&format!("{k}{}", replay::SYNCS_OF))
                .or_else(|| names.get(k))
                .cloned()
        });
        if let Some(s) = &r.sync_in {
            let said = format!(" The sync: {s}, which its fix removes.");
            match a.text.find(" Fix: ") {
                Some(i) => a.text.insert_str(i, &said),
                None => a.text.push_str(&said),
            }
        }
    }
    advice.extend(slow_gpus(store, steps, &mut est, advice));
    advice.sort_by(|x, y| {
        let rank = |a: &Advice| {
            let primary = a
                .replay
                .as_ref()
                .is_none_or(|r| r.sync_in.is_none() && r.fused_with.is_none());
            (a.recurring, a.saving_ns.unwrap_or(0), primary)
        };
        rank(y).cmp(&rank(x))
    });
    Some(est)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::gaps::Reason;

    #[test]
    fn one_off_time_is_split_from_the_typical_gaps() {
        // 100 gaps of 20 µs and two of 30 ms and 61.8 ms: the typical gap stays ~20 µs and the
        // two long ones are counted apart, to within their buckets.
        let mut gaps = vec![(20_000, Reason::Launch); 100];
        gaps.push((30_000_000, Reason::Launch));
        gaps.push((61_800_000, Reason::Launch));
        let a = acc(&gaps);
        let typical = a.typical_gap();
        assert!((18_000..=22_000).contains(&typical), "{typical}");
        assert_eq!(a.at_least(one_off_floor(typical)), (2, 91_800_000));
        assert_eq!(a.at_least(0), (102, a.gap_ns), "every gap is at least 0");
        assert_eq!(a.at_least(100_000_000), (0, 0));
    }

    #[test]
    fn one_offs_are_long_rare_and_far_from_typical() {
        let ms = 1_000_000;
        assert_eq!(one_off(60 * ms, 20_000, 100), Some(3000));
        assert_eq!(one_off(999_999, 1_000, 100), None, "under a millisecond");
        assert_eq!(one_off(2 * ms, 50_000, 100), None, "only 40x");
        assert_eq!(one_off(60 * ms, 20_000, 2), None, "too few gaps to compare");
        assert_eq!(one_off(60 * ms, 0, 10), Some(60 * ms as u64));
    }

    fn acc(gaps: &[(Ns, Reason)]) -> LeafAcc {
        let mut a = LeafAcc::default();
        for &(g, r) in gaps {
            a.add(g, r, 1_000);
        }
        a
    }
}

//! `gaptop report`: the headless summary, as text or JSON.

mod headline;
mod json;
mod text;

pub use json::{JsonBucket, JsonGap, JsonProcess, JsonReport, JsonStack, JsonWindow, Percentiles};
pub use text::{text, MAX_LINES};

use gaptop_core::analysis::comm::CommReport;
use gaptop_core::analysis::gaps::{Category, Config, Gap, Reason};
use gaptop_core::analysis::summary::Summary;
use gaptop_core::analysis::{analyse, Options};
use gaptop_core::frames::StackFrame;
use gaptop_core::model::records::{NameId, Ns, StackId};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;

/// Percentiles of a histogram, with its exact maximum (the histogram's own is rounded up to
/// its precision, and would read above the longest gap listed).
fn pct(h: &hdrhistogram::Histogram<u64>, max: Ns) -> Percentiles {
    if h.is_empty() {
        return Percentiles {
            p50: 0,
            p90: 0,
            p99: 0,
            max: 0,
        };
    }
    Percentiles {
        p50: h.value_at_quantile(0.5).min(max.max(0) as u64),
        p90: h.value_at_quantile(0.9).min(max.max(0) as u64),
        p99: h.value_at_quantile(0.99).min(max.max(0) as u64),
        max: max.max(0) as u64,
    }
}

/// A launch stack as reports write it: its frames, outermost first, then the launching API
/// (when known) and the op.
fn stack_frames(store: &Store, stack: StackId, api: NameId, op: NameId) -> Vec<String> {
    let mut frames = store.frame_strings(stack);
    if api != 0 {
        frames.push(store.names.get(api).to_string());
    }
    frames.push(store.names.get(op).to_string());
    frames
}

pub fn gap_json(store: &Store, g: &Gap, origin: Ns) -> JsonGap {
    let l = &store.lanes[g.lane];
    let name = |i: usize| store.names.get(l.op(i).name).to_string();
    let stack = store.numbered_stack(g.lane, g.next, g.stack);
    let frames = stack_frames(store, stack, g.api, g.op_name);
    let mut j = JsonGap {
        start_ns: g.start - origin,
        duration_ns: g.dur(),
        cause: g.category.as_str(),
        reason: g.reason.as_str(),
        device: l.key.device,
        stream: l.key.stream,
        pid: store.procs[l.key.proc as usize].pid,
        rank: (store.rank_count() > 1).then_some(store.procs[l.key.proc as usize].rank),
        prev_op: store
            .names
            .get(store.lanes[g.prev_lane].op(g.prev).name)
            .to_string(),
        next_op: name(g.next),
        launch_latency_ns: g.launch_latency,
        frames,
        cpu_frames: store.frame_strings(g.cpu_stack),
        cpu_samples: None,
        cpu_share: None,
        on_cpu: None,
    };
    if let Some(d) = gaptop_core::analysis::oncpu::during(store, g) {
        if j.cpu_frames.is_empty() {
            // Outermost first, as the other frame lists.
            j.cpu_frames = d
                .shared
                .iter()
                .rev()
                .map(|&(f, _)| store.names.get(f).to_string())
                .collect();
        }
        j.cpu_samples = Some(d.samples);
        j.cpu_share = d.shared.first().map(|x| x.1);
        j.on_cpu = Some(d.on_cpu);
    }
    j
}

/// Top stacks by gap time: (frames, gaps, gap_ns).
pub fn top_stacks(store: &Store, s: &Summary, n: usize) -> Vec<JsonStack> {
    let mut v: Vec<_> = s.stacks.iter().collect();
    v.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then(a.0.cmp(b.0)));
    v.into_iter()
        .take(n)
        .map(|(&(stack, api, op), &(gaps, gap_ns))| JsonStack {
            frames: stack_frames(store, stack, api, op),
            gaps,
            gap_ns,
            ranks: s.ranks_of(&(stack, api, op)),
        })
        .collect()
}

/// Gap time by launch stack in the folded format flame graph tools read (flamegraph.pl,
/// inferno, speedscope): one line per stack, `outermost;...;innermost;API;op NANOSECONDS`,
/// heaviest first. Framework plumbing frames are left out, as in the UI's tree; a `;` inside a
/// name becomes `:`.
pub fn folded(store: &Store, s: &Summary) -> String {
    let mut lines: Vec<(Ns, String)> = s
        .stacks
        .iter()
        .filter(|(_, &(_, gap_ns))| gap_ns > 0)
        .map(|(&(stack, api, op), &(_, gap_ns))| {
            let path: Vec<String> = stack_frames(store, stack, api, op)
                .iter()
                .filter(|f| !gaptop_core::frames::is_plumbing(f))
                .map(|f| f.replace(';', ":").replace(['\n', '\r'], " "))
                .collect();
            (gap_ns, path.join(";"))
        })
        .collect();
    lines.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut out = String::new();
    for (ns, path) in lines {
        out.push_str(&format!("{path} {ns}\n"));
    }
    out
}

/// Folded stacks of the gap time with what the CPU did during it: each launch's path, then the
/// CPU samples taken during its gaps (the gap time shared among them) under
/// `(CPU during these gaps)`; gaps without samples end at their launch. `s` must have been
/// summarized with `Config::cpu_tree`.
pub fn folded_cpu(store: &Store, s: &Summary) -> String {
    let t = &s.tree;
    let mut lines: Vec<(Ns, String)> = Vec::new();
    for n in 1..t.nodes.len() {
        let own = t.nodes[n].gap_ns
            - t.nodes[n]
                .children
                .iter()
                .map(|&c| t.nodes[c].gap_ns)
                .sum::<Ns>();
        if own <= 0 {
            continue;
        }
        let path: Vec<String> = t
            .path_to(n)
            .into_iter()
            .map(|p| store.names.get(t.nodes[p].frame))
            .filter(|f| !gaptop_core::frames::is_plumbing(f))
            .map(|f| f.replace(';', ":").replace(['\n', '\r'], " "))
            .collect();
        lines.push((own, path.join(";")));
    }
    lines.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    lines
        .into_iter()
        .map(|(ns, path)| format!("{path} {ns}\n"))
        .collect()
}

/// The report of window `w` (ns from the capture's origin) and its summary, keeping the `top`
/// longest gaps, with the steps found by `step_by` (a span, Python function or op name; see
/// `analysis::steps::find`), or as they are found without one.
pub fn build(
    store: &Store,
    w: Window,
    cfg: &Config,
    top: usize,
    step_by: Option<&str>,
) -> (Summary, JsonReport) {
    let origin = store.origin();
    let abs = Window {
        from: w.from.map(|f| f + origin),
        to: w.to.map(|t| t + origin),
    };
    // Enough of the longest gaps to find the one-offs among them, as well as `top`. The
    // launches' coverage needs no analysis: it is found on a second thread meanwhile.
    let options = Options {
        config: *cfg,
        top: top.max(200),
        step_by,
        comm: true,
        ..Options::default()
    };
    let (a, launches) = std::thread::scope(|scope| {
        let side = scope.spawn(|| {
            let (lo, hi) = abs.clipped(store);
            launch_coverage(store, lo, hi)
        });
        let a = analyse(store, abs, &options);
        (a, side.join().expect("report thread"))
    });
    let (d, comm) = (a.diagnosis, a.comm);
    let (comm, comm_unknown) = unaligned_comm(store, comm);
    let one_off_gaps: Vec<JsonGap> = d
        .summary
        .top_gaps
        .iter()
        .filter(|g| d.is_one_off(store, g))
        .take(10)
        .map(|g| gap_json(store, g, origin))
        .collect();
    let mut s = d.summary;
    s.top_gaps.truncate(top);
    let mut idle = std::collections::BTreeMap::new();
    for c in Category::ALL {
        let b = s.idle(c);
        idle.insert(
            c.as_str(),
            JsonBucket {
                count: b.count,
                total_ns: b.total_ns,
            },
        );
    }
    let mut reasons = std::collections::BTreeMap::new();
    for r in [
        Reason::Launch,
        Reason::Sync,
        Reason::EventWait,
        Reason::Graph,
        Reason::Unknown,
    ] {
        let b = s.reasons.get(&r).copied().unwrap_or_default();
        reasons.insert(
            r.as_str(),
            JsonBucket {
                count: b.count,
                total_ns: b.total_ns,
            },
        );
    }
    let j = JsonReport {
        source: store.source.clone(),
        notes: store.notes_and_drops(),
        origin_ns: origin,
        window: JsonWindow {
            from_ns: s.lo - origin,
            to_ns: s.hi - origin,
        },
        gpu_ops: s.gpu_ops,
        kernels: s.kernels,
        busy_ns: s.busy_ns,
        kernel_ns: s.kernel_ns,
        device_idle_ns: s.device_idle_ns,
        charged_ns: s.charged_ns(),
        idle,
        overlapping: (s.overlapping.count > 0).then_some(JsonBucket {
            count: s.overlapping.count,
            total_ns: s.overlapping.total_ns,
        }),
        reasons,
        gap_percentiles_ns: pct(&s.gap_hist, s.gap_max_ns),
        kernel_percentiles_ns: pct(&s.kernel_hist, s.kernel_max_ns),
        basis: s.basis.as_str(),
        steps: d.steps.as_ref().map(|st| st.json()),
        replay: d.replay.as_ref().map(|r| r.json.clone()),
        advice: d.advice.into_iter().take(10).collect(),
        one_off_gaps,
        top_stacks: top_stacks(store, &s, 20),
        top_gaps: s
            .top_gaps
            .iter()
            .map(|g| gap_json(store, g, origin))
            .collect(),
        kernels_with_launch: launches.iter().map(|p| p.kernels_with_launch).sum(),
        kernels_with_stack: launches.iter().map(|p| p.kernels_with_stack).sum(),
        kernels_with_python: launches.iter().map(|p| p.kernels_with_python).sum(),
        kernels_with_native: launches.iter().map(|p| p.kernels_with_native).sum(),
        processes: launches,
        clocks: store.clocks.clone(),
        dropped: store.dropped,
        evicted_ops: store.evicted_ops,
        skipped: store.skipped.clone(),
        comm,
        comm_unknown,
    };
    (s, j)
}

/// The communication section when some ranks' clocks could not be aligned
/// (`Store::unaligned`): its counts only, and why nothing more is said. Late arrivals and
/// waits are differences between the ranks' clocks, so they would be guesses.
fn unaligned_comm(store: &Store, comm: Option<CommReport>) -> (Option<CommReport>, Option<String>) {
    let Some(mut c) = comm else {
        return (None, None);
    };
    if store.unaligned.is_empty() {
        return (Some(c), None);
    }
    let who: Vec<String> = store
        .unaligned
        .iter()
        .map(|&r| match r {
            r if r >= 0 => format!("rank {r}"),
            _ => "a process without a rank".to_string(),
        })
        .collect();
    let why = format!(
        "the clocks of {} could not be aligned with the others' (their collectives end at no one offset): which rank arrived late at a collective, and how long the others waited, cannot be told",
        who.join(", ")
    );
    for r in &mut c.per_rank {
        (r.wait_ns, r.late_count, r.late_ns) = (0, 0, 0);
    }
    c.late_sites.clear();
    (Some(c), Some(why))
}

/// Per process with kernels in [lo, hi): its kernels, those whose launch call is known, and
/// of those the ones with a launch stack, with Python frames in it, or native frames only.
fn launch_coverage(store: &Store, lo: Ns, hi: Ns) -> Vec<JsonProcess> {
    let mut per: Vec<JsonProcess> = store
        .procs
        .iter()
        .map(|p| JsonProcess {
            pid: p.pid,
            rank: (p.rank >= 0).then_some(p.rank),
            label: p.label.clone(),
            kernels: 0,
            kernels_with_launch: 0,
            kernels_with_stack: 0,
            kernels_with_python: 0,
            kernels_with_native: 0,
            dropped: p.stats.collector_dropped + p.stats.cupti_dropped,
        })
        .collect();
    // What each launch stack holds: (a Python frame, a native frame).
    let mut kinds: std::collections::HashMap<StackId, (bool, bool)> = Default::default();
    for lane in &store.lanes {
        let i = lane.key.proc as usize;
        let p = &store.procs[i];
        for op in lane.range(lane.lower_bound(lo)..) {
            if op.start >= hi {
                break;
            }
            if op.kind != gaptop_core::model::records::OpKind::Kernel {
                continue;
            }
            per[i].kernels += 1;
            if let Some(a) = p.api_by_corr(op.corr) {
                per[i].kernels_with_launch += 1;
                if a.stack == 0 {
                    continue;
                }
                per[i].kernels_with_stack += 1;
                let (python, native) = *kinds.entry(a.stack).or_insert_with(|| {
                    let frames = store.stacks.frames(a.stack);
                    let any =
                        |f: fn(StackFrame) -> bool| frames.iter().any(|&n| f(store.names.frame(n)));
                    (any(|f| f.py_source().is_some()), any(|f| f.is_native()))
                });
                per[i].kernels_with_python += python as u64;
                per[i].kernels_with_native += (native && !python) as u64;
            }
        }
    }
    per.retain(|p| p.kernels > 0);
    // In rank order (0, 1, 2, …, 10, numerically), those without a rank after, by pid.
    per.sort_by_key(|p| (p.rank.is_none(), p.rank, p.pid));
    per
}

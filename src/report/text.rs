//! The text form of `gaptop report`: a three-line headline (`headline`), the capture in a few
//! lines, its steps, what to fix, the one-offs and the top stacks, under [`MAX_LINES`] lines;
//! `--full` adds the percentiles, the top stacks' frames and the top gaps. Every duration has
//! three significant figures at most (`units::fmt_short`); every share of gap time is of one
//! figure, the gap time charged to launches (`charged_ns`), which the titles name.

use super::headline::{self, denominator, Said};
use super::json::{JsonGap, JsonProcess, JsonReport, JsonStack};
use gaptop_core::frames::cut as short;
use gaptop_core::units::fmt_short as t;

/// The most lines the report writes without `--full`.
pub const MAX_LINES: usize = 59;

/// Frames of a top stack `--full` prints (innermost ones; JSON has them all).
const TEXT_STACK_FRAMES: usize = 8;

/// A count of gaps for a right-aligned column: `12 gaps`, `1 gap ` (the noun's column kept).
fn gaps_n(n: u64) -> String {
    format!(
        "{:<w$}",
        gaptop_core::units::count(n, "gap"),
        w = n.to_string().len() + 5
    )
}

fn pctf(a: i64, b: i64) -> f64 {
    if b > 0 {
        100.0 * a as f64 / b as f64
    } else {
        0.0
    }
}

/// A part of the report: its lines (a title first), and whether a report short of room may
/// leave it out.
struct Section {
    lines: Vec<String>,
    optional: bool,
}

impl Section {
    fn new(optional: bool) -> Section {
        Section {
            lines: Vec::new(),
            optional,
        }
    }
    fn line(&mut self, l: impl Into<String>) {
        self.lines.push(l.into());
    }
}

/// The text report; `full` for all of it.
pub fn text(j: &JsonReport, full: bool) -> String {
    let mut parts = vec![
        head(j),
        capture(j),
        idle(j),
        steps(j),
        what_to_fix(j),
        one_offs(j, if full { 5 } else { 3 }),
        top_stacks(j, full),
    ];
    if full {
        parts.push(percentiles(j));
        parts.push(top_gaps(j));
    }
    parts.push(comm(j));
    parts.push(skipped(j));
    parts.retain(|p| !p.lines.is_empty());
    let mut lines: Vec<String> = Vec::new();
    if full {
        for p in &parts {
            if !lines.is_empty() {
                lines.push(String::new());
            }
            lines.extend(p.lines.iter().cloned());
        }
        return lines.join("\n") + "\n";
    }
    let more = format!(
        "More with --full: percentiles, {} top gaps, the top stacks' frames.",
        j.top_gaps.len()
    );
    // Room for the sections, a blank line before each but the first, and the last line.
    let size = |ps: &[Section]| ps.iter().map(|p| p.lines.len() + 1).sum::<usize>();
    while size(&parts) + 1 > MAX_LINES {
        match parts.iter().rposition(|p| p.optional) {
            Some(i) => {
                parts.remove(i);
            }
            None => break,
        }
    }
    for p in &parts {
        if !lines.is_empty() {
            lines.push(String::new());
        }
        lines.extend(p.lines.iter().cloned());
    }
    if lines.len() + 2 > MAX_LINES {
        let cut = lines.len() + 2 - MAX_LINES;
        lines.truncate(MAX_LINES - 2);
        lines.push(format!("… {cut} more lines"));
    }
    lines.push(String::new());
    lines.push(more);
    lines.join("\n") + "\n"
}

fn head(j: &JsonReport) -> Section {
    let mut s = Section::new(false);
    for l in headline::lines(j) {
        s.line(l);
    }
    s
}

/// What was launched from where: `launch calls found for 4 of 4 kernels: 4 with a Python call
/// stack`; a Kineto trace without `with_stack` has CPU op names only (`aten::mm`), and says so.
fn coverage(j: &JsonReport) -> String {
    let mut kinds = Vec::new();
    let ops = j.kernels_with_stack - j.kernels_with_python - j.kernels_with_native;
    if j.kernels_with_python > 0 {
        kinds.push(format!(
            "{} with a Python call stack",
            j.kernels_with_python
        ));
    }
    if j.kernels_with_native > 0 {
        kinds.push(format!("{} with native frames only", j.kernels_with_native));
    }
    if ops > 0 {
        // A Kineto trace without `with_stack`, or NVTX ranges of an Nsight Systems export.
        kinds.push(format!(
            "{ops} with CPU op or range names only, no Python stack"
        ));
    }
    if kinds.is_empty() {
        kinds.push("none with a call stack or CPU op".into());
    } else if j.kernels_with_stack < j.kernels_with_launch {
        kinds.push(format!(
            "{} with neither",
            j.kernels_with_launch - j.kernels_with_stack
        ));
    }
    // A Kineto trace (JSON) without Python stacks: how to capture them.
    let kineto = j.source.contains(".json");
    let hint = if kineto && j.kernels_with_python == 0 && j.kernels > 0 {
        "; torch.profiler.profile(with_stack=True) records the Python stacks that name the code"
    } else {
        ""
    };
    format!(
        "launch calls found for {} of {} kernels: {}{hint}",
        j.kernels_with_launch,
        j.kernels,
        kinds.join(", ")
    )
}

fn capture(j: &JsonReport) -> Section {
    let mut s = Section::new(false);
    let span = j.window.to_ns - j.window.from_ns;
    s.line(format!(
        "gaptop report: {}  window {} .. {} ({})",
        j.source,
        t(j.window.from_ns),
        t(j.window.to_ns),
        t(span)
    ));
    let all = j.busy_ns + j.device_idle_ns;
    s.line(format!(
        "GPU ops {}  kernels {}  busy {} ({:.1}%)  device idle {} ({:.1}%)",
        j.gpu_ops,
        j.kernels,
        t(j.busy_ns),
        pctf(j.busy_ns, all),
        t(j.device_idle_ns),
        pctf(j.device_idle_ns, all),
    ));
    if j.kernels_with_launch > 0 {
        s.line(coverage(j));
    }
    for n in &j.notes {
        s.line(format!("note: {n}"));
    }
    if j.processes.len() > 1 || j.processes.iter().any(|p| p.dropped > 0) {
        s.line("Processes");
        processes(&mut s, &j.processes);
        if let Some(c) = &j.clocks {
            s.line(format!("  clocks: {c}"));
        }
    }
    if j.dropped > 0 || j.evicted_ops > 0 {
        s.line(format!(
            "DROPPED records {}  evicted ops {}",
            j.dropped, j.evicted_ops
        ));
    }
    s
}

/// More processes than this are summed up in a line, and only those that stand out listed.
const MAX_PROCESS_LINES: usize = 8;

fn process_line(p: &JsonProcess) -> String {
    format!(
        "  pid {:<7} {:<8} {:>9} kernels, {} with launch, {} with stack ({} Python), {} dropped  {}",
        p.pid,
        p.rank.map(|r| format!("rank {r}")).unwrap_or_default(),
        p.kernels,
        p.kernels_with_launch,
        p.kernels_with_stack,
        p.kernels_with_python,
        p.dropped,
        short(&p.label, 60)
    )
}

/// The processes (in rank order, as the JSON has them): a line each, or past
/// [`MAX_PROCESS_LINES`] a line for all of them and one for each that stands out (records
/// dropped, kernels 10% off the median, fewer launches or stacks found than the others).
fn processes(s: &mut Section, ps: &[JsonProcess]) {
    if ps.len() <= MAX_PROCESS_LINES {
        for p in ps {
            s.line(process_line(p));
        }
        return;
    }
    fn share(a: u64, b: u64) -> f64 {
        if b > 0 {
            a as f64 / b as f64
        } else {
            0.0
        }
    }
    let median = |f: fn(&JsonProcess) -> f64| {
        let mut v: Vec<f64> = ps.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let kernels = median(|p| p.kernels as f64);
    let launch = median(|p| share(p.kernels_with_launch, p.kernels));
    let stack = median(|p| share(p.kernels_with_stack, p.kernels));
    let odd: Vec<&JsonProcess> = ps
        .iter()
        .filter(|p| {
            p.dropped > 0
                || (p.kernels as f64 - kernels).abs() > 0.1 * kernels
                || share(p.kernels_with_launch, p.kernels) < launch - 0.05
                || share(p.kernels_with_stack, p.kernels) < stack - 0.05
        })
        .collect();
    let ranks: Vec<i32> = ps.iter().filter_map(|p| p.rank).collect();
    let who = match (ranks.first(), ranks.last()) {
        (Some(a), Some(b)) if ranks.len() == ps.len() => format!("ranks {a}..{b}"),
        _ => format!("{} processes", ps.len()),
    };
    s.line(format!(
        "  {} processes ({who}): median {kernels:.0} kernels, {:.0}% with launch, {:.0}% with stack, {} dropped in all; {}",
        ps.len(),
        100.0 * launch,
        100.0 * stack,
        ps.iter().map(|p| p.dropped).sum::<u64>(),
        match odd.len() {
            0 => "none stands out".to_string(),
            n => format!("{n} stand{} out:", if n == 1 { "s" } else { "" }),
        }
    ));
    for p in odd.iter().take(MAX_PROCESS_LINES) {
        s.line(process_line(p));
    }
    if odd.len() > MAX_PROCESS_LINES {
        s.line(format!(
            "  … {} more (all in the JSON)",
            odd.len() - MAX_PROCESS_LINES
        ));
    }
}

fn idle(j: &JsonReport) -> Section {
    let mut s = Section::new(true);
    s.line("Idle per stream (HTA categories; % of all streams' idle)");
    let total: i64 = j.idle.values().map(|b| b.total_ns).sum();
    for c in ["host_wait", "kernel_wait", "other"] {
        let b = &j.idle[c];
        s.line(format!(
            "  {:<12} {:>13}  {:>7}  {:5.1}%",
            c,
            gaps_n(b.count),
            t(b.total_ns),
            pctf(b.total_ns, total)
        ));
    }
    let reasons: Vec<String> = j
        .reasons
        .iter()
        .filter(|(_, b)| b.count > 0)
        .map(|(k, b)| format!("{k} {} ({})", b.count, t(b.total_ns)))
        .collect();
    s.line(format!("  why: {}", reasons.join(", ")));
    if let Some(b) = &j.overlapping {
        s.line(format!(
            "  {:<12} {:>8} ops   {:>7}  started before the work before them on their stream ended (not gaps; HTA counts them as kernel_wait of negative length)",
            "overlapping",
            b.count,
            t(b.total_ns)
        ));
    }
    s
}

fn steps(j: &JsonReport) -> Section {
    let mut s = Section::new(false);
    if let Some(st) = &j.steps {
        let warmup = if st.warmup > 0 {
            format!(" ({} warm-up)", st.warmup)
        } else {
            String::new()
        };
        s.line(format!(
            "Steps ({}): {}{warmup}, median {} (p90 {}), GPU busy {} and device idle {} a step (medians)",
            match &st.name {
                Some(n) => format!("{} {n:?}", st.source),
                None => st.source.to_string(),
            },
            st.count,
            t(st.median_ns),
            t(st.p90_ns),
            t(st.busy_median_ns),
            t(st.idle_median_ns)
        ));
        if st.guessed {
            s.line(format!(
                "  guessed from the repeating ops (no step marker, {}){}",
                if j.kernels_with_python > 0 {
                    "and the Python stacks tell no call of one function from the next"
                } else {
                    "no Python stacks"
                },
                match &st.suggest {
                    Some(x) => format!("; to set them: {x}"),
                    None => String::new(),
                }
            ));
        }
        match j.replay.as_ref().map(|r| (&r.profiler, &r.profiler_unmeasured)) {
            Some((Some(p), _)) => s.line(format!(
                "  replayed without gaptop's own cost: ~{} a launch (CUPTI's record {}, {} a callback; measured where it was recorded, before the program ran), {} of the {} step as recorded",
                t(p.launch_ns),
                t(p.record_ns),
                t(p.callback_ns),
                t(p.step_ns),
                t(j.replay.as_ref().map_or(0, |r| r.measured_mean_ns))
            )),
            Some((None, Some(why))) => s.line(format!(
                "  gaptop's own cost is in the estimates: the probe measured none ({why})"
            )),
            _ => {}
        }
    }
    s
}

fn what_to_fix(j: &JsonReport) -> Section {
    let mut s = Section::new(false);
    if j.advice.is_empty() {
        return s;
    }
    let order = if j.steps.is_some() {
        "by saving a step, recurring code first"
    } else {
        "by gap time, one-offs aside"
    };
    s.line(format!(
        "What to fix, {order} (% of {} {} charged to launches)",
        t(j.charged_ns),
        denominator(j)
    ));
    let steady = j.steps.as_ref().map_or(0, |s| s.steady) as u32;
    let mut said = Said::after_headline(j);
    let mut one_offs_said = false;
    for (i, a) in j.advice.iter().take(5).enumerate() {
        let label = format!("#{}", i + 1);
        s.line(format!(
            "{label:<3}{:>7} {:5.1}%  {:>11}  {}  [{}{}]",
            t(a.gap_ns),
            100.0 * a.share,
            gaps_n(a.gaps),
            a.site,
            a.verdict.as_str(),
            a.cause.map(|c| format!(", {c}")).unwrap_or_default()
        ));
        if let Some(c) = &a.code {
            s.line(format!(
                "      The code to fix: `{c}`, the CPU work before these launches"
            ));
        }
        let one_off = (a.one_offs > 0).then(|| {
            let why = if one_offs_said {
                String::new()
            } else if j.steps.is_some() {
                " (outside the steady state or not recurring: warm-up, first calls, loading)".into()
            } else {
                " (over 50x the typical gap: a first call's setup, allocation or compilation?)"
                    .into()
            };
            one_offs_said = true;
            format!(
                "{} of it in {}{why}, which the fix does not remove",
                t(a.one_off_ns),
                gaptop_core::units::count(a.one_offs, "one-off gap")
            )
        });
        match (
            gaptop_core::analysis::advice::steps_line(a, steady),
            one_off,
        ) {
            (Some(l), Some(o)) => s.line(format!("      {l}; {o}")),
            (Some(l), None) => s.line(format!("      {l}")),
            (None, Some(o)) => s.line(format!("      {o}")),
            (None, None) => {}
        }
        if let Some(l) = gaptop_core::analysis::advice::cpu_line(a) {
            s.line(format!("      {}", short(&l, 120)));
        }
        s.line(format!("      {}", said.sentence(a, &label)));
    }
    s
}

fn one_offs(j: &JsonReport, n: usize) -> Section {
    let mut s = Section::new(true);
    if j.one_off_gaps.is_empty() {
        return s;
    }
    s.line("One-offs (outside recurring patterns), longest first");
    for g in j.one_off_gaps.iter().take(n) {
        let at = gaptop_core::analysis::patterns::python_site(&g.frames)
            .or(g.frames.first().map(String::as_str))
            .map(|f| short(f, 70))
            .unwrap_or_default();
        s.line(format!(
            "  {:>7} at {:>7}  {}{} ({})  before {}  {}",
            t(g.duration_ns),
            t(g.start_ns),
            rank_label(g.rank),
            g.cause,
            g.reason,
            short(&g.next_op, 40),
            at
        ));
    }
    s
}

/// A launch API (`cudaLaunchKernel`, `cuLaunchKernelEx`, `cudaMemsetAsync_v3020`).
fn is_api(f: &str) -> bool {
    f.starts_with("cuda")
        || f.strip_prefix("cu")
            .is_some_and(|r| r.starts_with(|c: char| c.is_ascii_uppercase()))
}

/// Where a stack launched from, in a line: its innermost Python frame, else its innermost frame
/// above the launch API and the op.
fn launched_from(s: &JsonStack) -> String {
    let shown: Vec<&str> = s
        .frames
        .iter()
        .map(String::as_str)
        .filter(|f| !gaptop_core::frames::is_plumbing(f))
        .collect();
    if let Some(f) = gaptop_core::analysis::patterns::python_site(&shown) {
        return gaptop_core::frames::pretty_frame(f);
    }
    let above = &s.frames[..s.frames.len().saturating_sub(1)];
    above
        .iter()
        .rev()
        .find(|f| !is_api(f) && !gaptop_core::frames::is_plumbing(f))
        .cloned()
        .unwrap_or_else(|| "(no stack)".into())
}

/// `rank 3 ` for a line of one rank's (nothing in a capture of one rank).
fn rank_label(rank: Option<i32>) -> String {
    rank.map(|r| format!("rank {r} ")).unwrap_or_default()
}

/// `rank 3 ` for a stack of one rank's, `8 ranks ` for one of several (nothing in a capture
/// of one rank).
fn ranks_label(ranks: &[i32]) -> String {
    match ranks {
        [] => String::new(),
        [r] => format!("rank {r} "),
        v => format!("{} ranks ", v.len()),
    }
}

fn top_stacks(j: &JsonReport, full: bool) -> Section {
    let mut s = Section::new(true);
    if j.top_stacks.is_empty() {
        return s;
    }
    s.line(format!(
        "Top stacks by gap time (% of {} {} charged to launches)",
        t(j.charged_ns),
        denominator(j)
    ));
    for st in j.top_stacks.iter().take(if full { 8 } else { 5 }) {
        let share = pctf(st.gap_ns, j.charged_ns);
        if !full {
            let op = st.frames.last().map(String::as_str).unwrap_or_default();
            s.line(format!(
                "  {:>7} {share:5.1}%  {:>11}  {}{} → {}",
                t(st.gap_ns),
                gaps_n(st.gaps),
                ranks_label(&st.ranks),
                short(&launched_from(st), 70),
                short(op, 40)
            ));
            continue;
        }
        let line = format!(
            "  {:>7} {share:5.1}%  {:>11}  {}",
            t(st.gap_ns),
            gaps_n(st.gaps),
            ranks_label(&st.ranks).trim_end()
        );
        s.line(line.trim_end().to_string());
        // The innermost frames, framework plumbing left out as in the UI's tree, so that the
        // modules that launched show rather than nn.Module's call machinery.
        let shown: Vec<&String> = st
            .frames
            .iter()
            .filter(|f| !gaptop_core::frames::is_plumbing(f))
            .collect();
        let n = shown.len();
        let skip = n.saturating_sub(TEXT_STACK_FRAMES);
        if skip > 0 {
            s.line(format!("        … {skip} outer frames"));
        }
        for (i, f) in shown.iter().enumerate().skip(skip) {
            s.line(format!(
                "      {}{}",
                if i + 1 == n { "└ " } else { "  " },
                short(f, 100)
            ));
        }
    }
    s
}

fn percentiles(j: &JsonReport) -> Section {
    let mut s = Section::new(true);
    let g = &j.gap_percentiles_ns;
    let k = &j.kernel_percentiles_ns;
    s.line("Percentiles     p50      p90      p99      max");
    for (name, p) in [("gap", g), ("kernel", k)] {
        s.line(format!(
            "  {name:<8} {:>7}  {:>7}  {:>7}  {:>7}",
            t(p.p50 as i64),
            t(p.p90 as i64),
            t(p.p99 as i64),
            t(p.max as i64)
        ));
    }
    s
}

fn top_gap(s: &mut Section, g: &JsonGap) {
    s.line(format!(
        "  {:>7} at {:>7}  {}gpu{} s{}  {} ({})  before {}",
        t(g.duration_ns),
        t(g.start_ns),
        rank_label(g.rank),
        g.device,
        g.stream,
        g.cause,
        g.reason,
        short(&g.next_op, 50)
    ));
    if let Some(f) = gaptop_core::analysis::patterns::python_site(&g.frames) {
        s.line(format!("      launched from {}", short(f, 90)));
    }
    let named = g
        .cpu_frames
        .iter()
        .rev()
        .find(|f| !gaptop_core::frames::is_unnamed_native(f));
    if let Some(f) = named {
        match (g.cpu_samples, g.cpu_share, g.on_cpu) {
            (Some(n), Some(share), Some(on)) => s.line(format!(
                "      CPU during gap: {:.0}% {} ({n} samples, on CPU {:.0}% of the gap)",
                100.0 * share,
                short(f, 80),
                100.0 * on
            )),
            _ => s.line(format!("      CPU during gap: {}", short(f, 90))),
        }
    }
}

fn top_gaps(j: &JsonReport) -> Section {
    let mut s = Section::new(true);
    if j.top_gaps.is_empty() {
        return s;
    }
    // All that the short report's last line promises (`--top`'s count).
    s.line("Top gaps");
    for g in &j.top_gaps {
        top_gap(&mut s, g);
    }
    s
}

fn comm(j: &JsonReport) -> Section {
    let mut s = Section::new(false);
    let Some(c) = &j.comm else {
        return s;
    };
    s.line(format!(
        "Communication: {} collectives over {} ranks ({} NCCL kernels)",
        c.collectives, c.ranks, c.comm_kernels
    ));
    if let Some(why) = &j.comm_unknown {
        s.line(format!("  cannot tell: {why}"));
        return s;
    }
    for r in &c.per_rank {
        s.line(format!(
            "  rank {:>2} (pid {}): waited {} inside NCCL for later ranks; arrived last {} times, {} late in all",
            r.rank,
            r.pid,
            t(r.wait_ns),
            r.late_count,
            t(r.late_ns)
        ));
    }
    for l in c.late_sites.iter().take(3) {
        // The innermost frame that is the user's code rather than the framework's.
        let site = l
            .frames
            .iter()
            .rev()
            .find(|f| !f.starts_with("torch/"))
            .or(l.frames.last())
            .map(|f| short(f, 80))
            .unwrap_or_else(|| "no Python stack (a C++ thread, e.g. DDP's reducer)".into());
        let why = match (l.cause, &l.kernel, l.ratio) {
            ("slow_kernel", Some(k), Some(r)) => format!(
                "its GPU ran {} {r:.1}x the other ranks' median ({} more)",
                short(k, 50),
                t(l.cause_ns)
            ),
            ("host_gap", _, _) => {
                format!("its GPU idle {} before a launch from {site}", t(l.cause_ns))
            }
            _ => format!("launching the collective from {site}"),
        };
        s.line(format!(
            "  late: rank {} {} times ({}): {why}",
            l.rank,
            l.count,
            t(l.late_ns),
        ));
    }
    s
}

fn skipped(j: &JsonReport) -> Section {
    let mut s = Section::new(false);
    if !j.skipped.is_empty() {
        let v: Vec<String> = j.skipped.iter().map(|(k, v)| format!("{k}: {v}")).collect();
        s.line(format!("Skipped events: {}", v.join(", ")));
    }
    s
}

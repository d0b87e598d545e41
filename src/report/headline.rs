//! The text report's first three lines: what to fix first (its site, why the GPU waited there,
//! what a fix saves a step and the fix), why, and what else is worth doing with the capture in
//! a line; and the sentences of the rows below, each fix and each cause said once.

use gaptop_core::analysis::advice::Advice;
use gaptop_core::analysis::verdict::Verdict;
use gaptop_core::frames::cut as short;
use gaptop_core::units::fmt_short as t;

use super::json::JsonReport;

/// A site as a sentence reads it: `Linear.forward (linear.py:134)`; sites that are not a
/// Python function as they are.
pub fn site_words(site: &str) -> String {
    match site.split_once("  ") {
        Some((f, at)) if !f.is_empty() && !at.is_empty() => format!("{f} ({at})"),
        _ => site.to_string(),
    }
}

/// A site's function alone: `Linear.forward`; of a site without a Python stack, its op
/// (`(no Python stack) cudaLaunchKernel → gemmk1_kernel` is `gemmk1_kernel`).
fn function(site: &str) -> &str {
    if site.starts_with('(') {
        if let Some((_, op)) = site.rsplit_once(" → ").or_else(|| site.split_once(") ")) {
            return op;
        }
    }
    site.split_once("  ").map_or(site, |(f, _)| f)
}

/// What the shares of gap time are of, in words: the title of every column of shares.
pub fn denominator(j: &JsonReport) -> &'static str {
    if j.basis == "device" {
        "device idle"
    } else {
        "the streams' idle"
    }
}

fn share_pct(j: &JsonReport, ns: i64) -> f64 {
    100.0 * ns as f64 / j.charged_ns.max(1) as f64
}

/// A site's sentence without its cause and fix: what its gaps were.
fn what(a: &Advice) -> &str {
    let end = a
        .text
        .find(" Cause: ")
        .or_else(|| a.text.find(" Fix: "))
        .unwrap_or(a.text.len());
    &a.text[..end]
}

/// Whether a site's sentence gives a fix (busy sites, other streams' events, graphs and
/// unseen launches have none).
fn has_fix(a: &Advice) -> bool {
    a.text.contains(" Fix: ")
}

/// What a fix of the site gains: `saves ~5.2ms of a 10.0ms step (52%)`, or without steps its
/// gap time and share.
fn gain(j: &JsonReport, a: &Advice) -> String {
    let median = j.steps.as_ref().map_or(0, |s| s.median_ns);
    if let (Some(r), Some(rj)) = (&a.replay, &j.replay) {
        if r.saving_ns > 0 {
            let with = match r.workers {
                Some(n) => format!(
                    " with {n} loader worker{}{}",
                    if n == 1 { "" } else { "s" },
                    match r.workers_seen {
                        0 => String::new(),
                        k => format!(" ({k} seen loading now)"),
                    }
                ),
                None if r.backward_calls > 0 => " with its backward".to_string(),
                None => String::new(),
            };
            // Overlapped on its own thread, host work saves less where that thread's CPU
            // time then makes the step (said where the samples show it working through the
            // gaps, not waiting).
            let working = a.cpu.as_ref().is_some_and(|c| c.on_cpu >= 0.5);
            let overlapped = match r.saving_overlapped_ns {
                Some(o) if working && (o as f64) < 0.8 * r.saving_ns as f64 => {
                    format!("; ~{} if overlapped on its own thread instead", t(o))
                }
                _ => String::new(),
            };
            let then = format!(
                "replayed{with}{}; the GPU then busy {:.0}%{overlapped}",
                without_gaptop(rj),
                100.0 * r.busy_after
            );
            return if r.steps_changed * 10 < rj.steps * 9 && r.steps_changed > 0 {
                format!(
                    "saves ~{} a step on average, ~{} in the {} of {} steps it changes ({then})",
                    t(r.saving_ns),
                    t(r.saving_changed_ns),
                    r.steps_changed,
                    rj.steps
                )
            } else {
                // The mean step of the replayed steps: the saving is a mean over them.
                let step = bare_step(rj);
                format!(
                    "saves ~{} of a {} step ({:.0}%; {then})",
                    t(r.saving_ns),
                    t(step),
                    100.0 * r.saving_ns as f64 / step.max(1) as f64
                )
            };
        }
    }
    match (a.saving_ns, a.per_step_ns) {
        (Some(s), _) if s > 0 && median > 0 => format!(
            "saves ~{} of a {} step ({:.0}%)",
            t(s),
            t(median),
            100.0 * s as f64 / median as f64
        ),
        (_, Some(per)) if a.recurring => format!("{} a step, which its fix does not save", t(per)),
        _ => format!(
            "{} of idle, {:.0}% of {}{}",
            t(a.gap_ns),
            share_pct(j, a.gap_ns),
            denominator(j),
            if j.steps.is_some() {
                ", not in most steps"
            } else {
                ""
            }
        ),
    }
}

/// The mean measured step less what gaptop added to it (the replay's, where a recording's
/// probe measured that): the step a saving is a share of.
fn bare_step(rj: &gaptop_core::analysis::replay::ReplayJson) -> i64 {
    rj.measured_mean_ns - rj.profiler.as_ref().map_or(0, |p| p.step_ns)
}

/// `, without gaptop's ~2.1µs a launch` where the replay took gaptop's own cost out.
fn without_gaptop(rj: &gaptop_core::analysis::replay::ReplayJson) -> String {
    match &rj.profiler {
        Some(p) if p.launch_ns > 0 => format!(" without gaptop's ~{} a launch", t(p.launch_ns)),
        _ => String::new(),
    }
}

/// `rank 3's ` when the site's fix changes one rank of several (a straggler's cause).
fn rank_of(a: &Advice) -> String {
    match a.replay.as_ref().map(|r| (r.ranks.as_slice(), r.of_ranks)) {
        Some((&[r], n)) if n >= 2 => format!("rank {r}'s "),
        _ => String::new(),
    }
}

/// `makes 7 ranks wait at their collectives, ` for a straggler's cause.
fn waits(a: &Advice) -> String {
    match a.replay.as_ref().map(|r| (r.ranks.len(), r.of_ranks)) {
        Some((1, n)) if n >= 2 => format!(
            "makes {} other rank{} wait at the collectives, ",
            n - 1,
            if n == 2 { "" } else { "s" }
        ),
        _ => String::new(),
    }
}

/// What the whole capture would take after the first site's replayed fix, in words: `after it,
/// the capture's 1.78s would take ~0.92s`.
fn capture_after(j: &JsonReport, a: &Advice) -> Option<String> {
    let r = a.replay.as_ref().filter(|r| r.saving_ns > 0)?;
    let steady = j.steps.as_ref()?.steady as i64;
    let span = j.window.to_ns - j.window.from_ns;
    let gaptop = j.replay.as_ref().and_then(|rj| rj.profiler.as_ref());
    let after = (span - (r.saving_ns + gaptop.map_or(0, |p| p.step_ns)) * steady).max(0);
    Some(format!(
        "After it the capture's {} would take ~{}{}",
        t(span),
        t(after),
        if gaptop.is_some() {
            " (its steps without gaptop's cost)"
        } else {
            ""
        }
    ))
}

/// What capturing each step's launches as CUDA graphs would save, where the first site is
/// launch-bound or the graphs would save at least twice its fix: ` A CUDA graph of …`.
fn graph_line(j: &JsonReport, a: &Advice) -> Option<String> {
    let r = j.replay.as_ref().filter(|r| r.graph_saving_ns > 0)?;
    let launch_bound = a.verdict == Verdict::LaunchBound;
    if !launch_bound && r.graph_saving_ns < 2 * a.saving_ns.unwrap_or(0) {
        return None;
    }
    Some(format!(
        " A CUDA graph of each step's launches (between its syncs) would save ~{} of the {} step (replayed; the GPU then busy {:.0}%).",
        t(r.graph_saving_ns),
        t(bare_step(r)),
        100.0 * r.graph_busy_after
    ))
}

/// The three headline lines.
pub fn lines(j: &JsonReport) -> [String; 3] {
    let span = j.window.to_ns - j.window.from_ns;
    let busy = 100.0 * j.busy_ns as f64 / (j.busy_ns + j.device_idle_ns).max(1) as f64;
    let capture = match &j.steps {
        Some(s) => format!(
            "GPU busy {busy:.1}% of {}; {} steps{}{}, median {}",
            t(span),
            s.count,
            if s.warmup > 0 {
                format!(" ({} warm-up)", s.warmup)
            } else {
                String::new()
            },
            if s.guessed { " (guessed)" } else { "" },
            t(s.median_ns)
        ),
        None => format!(
            "GPU busy {busy:.1}% of {}, device idle {}; no steps found",
            t(span),
            t(j.device_idle_ns)
        ),
    };
    let Some(a) = j.advice.first() else {
        return [
            "Nothing to fix: no idle time charged to a launch in this window.".into(),
            format!("Why: {capture}."),
            format!(
                "Kernels: {} in {} GPU ops, {} of kernel time.",
                j.kernels,
                j.gpu_ops,
                t(j.kernel_ns)
            ),
        ];
    };
    let why = match &a.cause_name {
        // A cause the launching thread's states name says what it was doing.
        Some(c)
            if a.cause
                .is_some_and(gaptop_core::analysis::patterns::is_state_cause) =>
        {
            c.clone()
        }
        Some(c) => format!("{}: {c}", a.verdict.words()),
        None => a.verdict.words().to_string(),
    };
    // Where the launches wait on the program's own CPU work, that code leads, and the site
    // says whose launches it delays.
    let (lead, why) = match &a.code {
        Some(c) => (
            site_words(c),
            format!("CPU work before the launches of {}", site_words(&a.site)),
        ),
        None => (site_words(&a.site), why),
    };
    let first = if has_fix(a) {
        format!(
            "Fix first: {}{lead} — {why}, {}{}{}: {}",
            rank_of(a),
            waits(a),
            gain(j, a),
            if rank_of(a).is_empty() {
                ""
            } else {
                " on every rank"
            },
            a.fix
        )
    } else {
        format!(
            "Nothing clear to fix: the most idle is at {} — {why}, {}",
            site_words(&a.site),
            gain(j, a)
        )
    };
    let mut second = match &a.reason {
        Some(r) => format!("Why: {r}."),
        None => format!("Why: {}", what(a)),
    };
    if let Some(c) = gaptop_core::analysis::advice::cpu_line(a) {
        let c = short(&c, 110);
        let stop = if c.ends_with('…') { "" } else { "." };
        second.push_str(&format!(" {c}{stop}"));
    }
    // A saving worth naming: at least 1µs and 0.5% of the step.
    let step = j
        .replay
        .as_ref()
        .map_or(j.steps.as_ref().map_or(0, |s| s.median_ns), |r| {
            r.measured_mean_ns
        });
    let worth = (step / 200).max(1_000);
    let others: Vec<String> = j
        .advice
        .iter()
        .skip(1)
        // Only sites with something to save: a replayed saving with steps, and without them
        // any verdict but a busy GPU's.
        .filter(|b| match j.steps {
            Some(_) => b.saving_ns.is_some_and(|s| s >= worth),
            None => b.verdict != Verdict::Busy,
        })
        .take(3)
        .map(|b| {
            let fig = match b.saving_ns {
                Some(s) if s > 0 => format!("~{} a step", t(s)),
                _ => format!("{:.0}%", share_pct(j, b.gap_ns)),
            };
            // A row whose saving is the first one's fix: said so, not as a second fix.
            let r = b.replay.as_ref();
            let why = if r.and_then(|r| r.sync_in.as_deref()) == Some(a.site.as_str()) {
                "its gaps follow that sync: the same fix"
            } else if r.and_then(|r| r.fused_with.as_deref()) == Some(a.site.as_str()) {
                "its backward: in that fix"
            } else {
                b.verdict.words()
            };
            format!("{} {fig} ({why})", short(function(&b.site), 40))
        })
        .collect();
    let after = match capture_after(j, a) {
        Some(x) => format!(" {x}."),
        None => String::new(),
    };
    let graph = graph_line(j, a).unwrap_or_default();
    let third = if others.is_empty() {
        format!("Then: nothing else.{graph}{after} {capture}.")
    } else {
        format!("Then: {}.{graph}{after} {capture}.", others.join(", "))
    };
    [first, second, third]
}

/// What the report has said already, so that a fix or a cause is given once and then referred
/// to: `as in the headline`, `as in #2` (a row of What to fix).
#[derive(Default)]
pub struct Said {
    fixes: Vec<(&'static str, String)>,
    causes: Vec<(String, String)>,
    texts: Vec<(String, String)>,
}

impl Said {
    /// What the headline said about the first site.
    pub fn after_headline(j: &JsonReport) -> Said {
        let mut s = Said::default();
        if let Some(a) = j.advice.first() {
            if has_fix(a) {
                s.fixes.push((a.fix, "the headline".into()));
            }
            if let (Some(c), Some(_)) = (&a.cause_name, &a.reason) {
                s.causes.push((c.clone(), "the headline".into()));
            }
        }
        s
    }

    /// A row's sentence: what its gaps were, its cause and its fix, each of the two given in
    /// full the first time and referred to after.
    pub fn sentence(&mut self, a: &Advice, label: &str) -> String {
        if !has_fix(a) && a.cause_name.is_none() {
            // A fixed sentence (another stream's event, graphs, unseen launches) or a busy
            // site's: said once too.
            if let Some((_, at)) = self.texts.iter().find(|(x, _)| *x == a.text) {
                return format!("{}: as in {at}.", what_or_verdict(a));
            }
            self.texts.push((a.text.clone(), label.into()));
            return a.text.clone();
        }
        let mut out = what(a).to_string();
        if let Some(c) = &a.cause_name {
            match self.causes.iter().find(|(x, _)| x == c) {
                Some((_, at)) => out.push_str(&format!(" Cause: {c}, as in {at}.")),
                None => {
                    match &a.reason {
                        Some(r) => out.push_str(&format!(" Cause: {c}: {r}.")),
                        None => out.push_str(&format!(" Cause: {c}.")),
                    }
                    self.causes.push((c.clone(), label.into()));
                }
            }
        }
        if has_fix(a) {
            match self.fixes.iter().find(|(x, _)| *x == a.fix) {
                Some((_, at)) => out.push_str(&format!(" Fix: as in {at}.")),
                None => {
                    out.push_str(&format!(" Fix: {}.", a.fix));
                    self.fixes.push((a.fix, label.into()));
                }
            }
        }
        out
    }
}

/// A short stand-in for a sentence said before: the verdict's words.
fn what_or_verdict(a: &Advice) -> &'static str {
    a.verdict.words()
}

//! `gaptop diff A B`: two captures of the same program (before and after a fix: eager against
//! torch.compile, cuDNN's attention on and off) analysed alike and compared a step at a time.
//!
//! Both are diagnosed as `gaptop report` does (steps found the same way, `--step NAME` for
//! both, gaps on the same basis). Then, per step:
//!
//! - **steps**: the medians over each capture's steady steps of the step's wall time, its
//!   device idle, its GPU ops launched and its GPU busy time;
//! - **sites**: each launching function's idle a step (the report's `per_step_ns`: its median
//!   over the steady steps) in A and in B and the change, biggest change first; a site found in
//!   one capture only has 0 in the other;
//! - **kernels**: as Holistic Trace Analysis' trace diff compares ops, the GPU ops by name
//!   (kernels, copies, sets) whose count or time a step changed most: their mean count and
//!   time a step over the steady steps (an op in the step that launched it, where the steps are
//!   the CPU's: profiler steps, ranges, calls).
//!
//! Where either capture has no steps, every figure is per second of capture instead (totals
//! over the capture's duration), and the comparison says so.

use std::collections::HashMap;

use serde::Serialize;

use gaptop_core::analysis::advice::{self, Diagnosis};
use gaptop_core::analysis::gaps::Config;
use gaptop_core::analysis::steps::{quantile, StepsJson};
use gaptop_core::analysis::{analyse, Options};
use gaptop_core::frames::display::cut_middle;
use gaptop_core::frames::short_kernel;
use gaptop_core::model::records::{NameId, Ns};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;
use gaptop_core::units::fmt_short;

/// One capture, as the comparison names it.
#[derive(Serialize)]
pub struct CaptureJson {
    pub source: String,
    pub duration_ns: Ns,
    pub gpu_ops: u64,
    pub kernels: u64,
    pub busy_ns: Ns,
    pub device_idle_ns: Ns,
    /// Its steps, when they could be found.
    pub steps: Option<StepsJson>,
}

/// What a step takes in A and in B: medians over the steady steps (`per` = `step`), or per
/// second of capture (`per` = `second`; then the step medians are those found, null for none).
#[derive(Serialize)]
pub struct StepsDiff {
    pub a_median_ns: Option<Ns>,
    pub b_median_ns: Option<Ns>,
    pub a_idle_ns: Ns,
    pub b_idle_ns: Ns,
    pub a_launches: f64,
    pub b_launches: f64,
    pub a_busy_ns: Ns,
    pub b_busy_ns: Ns,
}

/// A launching function's idle a step (or a second) in A and B.
#[derive(Serialize)]
pub struct SiteDiff {
    /// `function  file.py`, as the report's advice names it, without line numbers.
    pub site: String,
    pub a_per_step_ns: Ns,
    pub b_per_step_ns: Ns,
    pub delta_per_step_ns: Ns,
    /// Its whole gap time in each capture.
    pub a_gap_ns: Ns,
    pub b_gap_ns: Ns,
    /// The report's verdict on it in each capture (null where it did not launch).
    pub a_verdict: Option<&'static str>,
    pub b_verdict: Option<&'static str>,
}

/// A GPU op's count and time a step (or a second) in A and B.
#[derive(Serialize)]
pub struct KernelDiff {
    pub kernel: String,
    pub a_count: f64,
    pub b_count: f64,
    pub a_per_step_ns: Ns,
    pub b_per_step_ns: Ns,
    pub delta_per_step_ns: Ns,
    /// `+` more of it a step in B, `-` fewer, `=` as many (HTA's change categories).
    pub count_change: &'static str,
}

#[derive(Serialize)]
pub struct DiffJson {
    pub a: CaptureJson,
    pub b: CaptureJson,
    /// The gaps the sites are made of: `device` idle or each `stream`'s own.
    pub basis: &'static str,
    /// What the figures are for: a `step`, or a `second` of capture where a side has no steps.
    pub per: &'static str,
    /// Why the figures are per second, where they are.
    pub note: Option<String>,
    pub steps: StepsDiff,
    /// Biggest change first.
    pub sites: Vec<SiteDiff>,
    /// The GPU ops whose time a step changed most, biggest change first.
    pub kernels: Vec<KernelDiff>,
    /// The regression gate's verdict (`--fail-if-slower`), absent without it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<crate::gate::GateJson>,
}

/// The narrowest terminal the text form fits itself to.
const MIN_WIDTH: usize = 60;

/// How many GPU ops the JSON lists.
const KERNELS: usize = 50;

/// One capture's diagnosis, with what the comparison takes from it.
struct Side<'a> {
    store: &'a Store,
    d: Diagnosis,
}

impl Side<'_> {
    fn duration(&self) -> Ns {
        self.d.summary.hi - self.d.summary.lo
    }

    /// Steady steps' (start, end), where there are steps.
    fn steady(&self) -> Vec<(Ns, Ns)> {
        self.d.steps.as_ref().map_or(Vec::new(), |st| {
            st.steps[st.steady()]
                .iter()
                .map(|s| (s.start, s.end))
                .collect()
        })
    }

    /// The median of a step's figure over the steady steps (0 without steps).
    fn median(&self, f: impl Fn(&gaptop_core::analysis::steps::Step) -> Ns) -> Ns {
        self.d.steps.as_ref().map_or(0, |st| {
            quantile(st.steps[st.steady()].iter().map(f).collect(), 0.5)
        })
    }

    /// A total over the capture, per second of it.
    fn per_second(&self, total: f64) -> f64 {
        total * 1e9 / self.duration().max(1) as f64
    }

    /// What the regression gate takes from this side, with its ops by name (`ops`).
    fn gate_input(&self, ops: &HashMap<NameId, (f64, f64)>) -> crate::gate::Input {
        let st = self.d.steps.as_ref();
        crate::gate::Input {
            steps: st.map(|st| st.steps[st.steady()].iter().map(|s| s.wall()).collect()),
            step_source: st.map(|st| match st.source.name() {
                Some(n) => format!("{} {n}", st.source.as_str()),
                None => st.source.as_str().to_string(),
            }),
            ops: ops
                .iter()
                .map(|(n, v)| (self.store.names.get(*n).to_string(), v.1))
                .collect(),
        }
    }

    fn capture(&self) -> CaptureJson {
        let s = &self.d.summary;
        CaptureJson {
            source: self.store.source.clone(),
            duration_ns: self.duration(),
            gpu_ops: s.gpu_ops,
            kernels: s.kernels,
            busy_ns: s.busy_ns,
            device_idle_ns: s.device_idle_ns,
            steps: self.d.steps.as_ref().map(|st| st.json()),
        }
    }

    /// GPU ops by name: how many and how long, in the steady steps (per step) or over the
    /// capture (per second). Steps of the CPU's (profiler steps, ranges, function calls) hold
    /// the ops launched in them, as HTA counts an iteration's kernels, wherever the GPU ran
    /// them; steps found on the GPU hold the ops that start in them.
    fn ops(&self, per_step: bool) -> HashMap<NameId, (f64, f64)> {
        use gaptop_core::analysis::steps::StepSource;
        let steady = self.steady();
        let by_launch = self.d.steps.as_ref().is_some_and(|st| {
            matches!(
                st.source,
                StepSource::ProfilerStep
                    | StepSource::Spans(_)
                    | StepSource::Function(_)
                    | StepSource::Structure(_)
            )
        });
        let (lo, hi) = (self.d.summary.lo, self.d.summary.hi);
        let mut m: HashMap<NameId, (f64, f64)> = HashMap::new();
        for lane in &self.store.lanes {
            let proc = &self.store.procs[lane.key.proc as usize];
            for op in lane.range(lane.lower_bound(lo)..lane.lower_bound(hi)) {
                let t = match proc.api_by_corr(op.corr) {
                    Some(a) if by_launch => a.start,
                    _ => op.start,
                };
                let inside = !per_step || {
                    let i = steady.partition_point(|s| s.0 <= t);
                    i > 0 && t < steady[i - 1].1
                };
                if inside {
                    let e = m.entry(op.name).or_default();
                    e.0 += 1.0;
                    e.1 += op.dur() as f64;
                }
            }
        }
        let n = if per_step {
            steady.len().max(1) as f64
        } else {
            self.duration().max(1) as f64 / 1e9
        };
        for v in m.values_mut() {
            *v = (v.0 / n, v.1 / n);
        }
        m
    }
}

/// Compares two captures, each over its whole span, on `cfg`'s basis, with steps found by
/// `step_by` (see `analysis::steps::find`) or as the report finds them; with a
/// `gate` threshold (a fraction), judges whether B's steps are slower beyond it
/// (`crate::gate`).
pub fn diff(
    a: &Store,
    b: &Store,
    cfg: &Config,
    step_by: Option<&str>,
    gate: Option<f64>,
) -> DiffJson {
    let side = |store| Side {
        store,
        d: analyse(
            store,
            Window::all(),
            &Options {
                config: *cfg,
                step_by,
                ..Options::default()
            },
        )
        .diagnosis,
    };
    let (a, b) = (side(a), side(b));
    let per_step = a.d.steps.is_some() && b.d.steps.is_some();
    let note = (!per_step).then(|| {
        let missing: Vec<&str> = [("A", &a), ("B", &b)]
            .iter()
            .filter(|(_, s)| s.d.steps.is_none())
            .map(|(n, _)| *n)
            .collect();
        let what = match step_by {
            Some(name) => format!("no steps named {name:?}"),
            None => "no steps found".to_string(),
        };
        format!(
            "{what} in {}: every figure is per second of capture instead",
            missing.join(" and ")
        )
    });
    let step_figures = |s: &Side| -> (Option<Ns>, Ns, f64, Ns) {
        let median = s.d.steps.as_ref().map(|_| s.median(|x| x.wall()));
        if per_step {
            (
                median,
                s.median(|x| x.idle_ns),
                s.median(|x| x.launches as Ns) as f64,
                s.median(|x| x.busy_ns),
            )
        } else {
            let sum = &s.d.summary;
            (
                median,
                s.per_second(sum.device_idle_ns as f64) as Ns,
                s.per_second(sum.gpu_ops as f64),
                s.per_second(sum.busy_ns as f64) as Ns,
            )
        }
    };
    let (fa, fb) = (step_figures(&a), step_figures(&b));
    let steps = StepsDiff {
        a_median_ns: fa.0,
        b_median_ns: fb.0,
        a_idle_ns: fa.1,
        b_idle_ns: fb.1,
        a_launches: fa.2,
        b_launches: fb.2,
        a_busy_ns: fa.3,
        b_busy_ns: fb.3,
    };
    let (oa, ob) = (a.ops(per_step), b.ops(per_step));
    let sites = sites(&a, &b, per_step);
    let gate = gate.map(|t| {
        let grew: Vec<crate::gate::Grew> = sites
            .iter()
            .map(|s| crate::gate::Grew {
                site: s.site.clone(),
                a_per_step_ns: s.a_per_step_ns,
                b_per_step_ns: s.b_per_step_ns,
                delta_per_step_ns: s.delta_per_step_ns,
            })
            .collect();
        crate::gate::judge(&a.gate_input(&oa), &b.gate_input(&ob), &grew, t)
    });
    DiffJson {
        kernels: kernels(&a, &b, oa, ob),
        sites,
        gate,
        a: a.capture(),
        b: b.capture(),
        basis: cfg.basis.as_str(),
        per: if per_step { "step" } else { "second" },
        note,
        steps,
    }
}

/// Every launching function of either capture, biggest change in its idle a step first.
fn sites(a: &Side, b: &Side, per_step: bool) -> Vec<SiteDiff> {
    // Per site key: its advice in A and in B.
    let mut by_key: HashMap<&str, [Option<&advice::Advice>; 2]> = HashMap::new();
    for (i, s) in [a, b].iter().enumerate() {
        for ad in &s.d.advice {
            by_key.entry(ad.key.as_str()).or_default()[i] = Some(ad);
        }
    }
    let value = |s: &Side, ad: Option<&advice::Advice>| -> Ns {
        match ad {
            None => 0,
            Some(ad) if per_step => ad.per_step_ns.unwrap_or(0),
            Some(ad) => s.per_second(ad.gap_ns as f64) as Ns,
        }
    };
    let mut out: Vec<(Ns, SiteDiff)> = by_key
        .into_iter()
        .map(|(key, [x, y])| {
            let (va, vb) = (value(a, x), value(b, y));
            let gap = |ad: Option<&advice::Advice>| ad.map_or(0, |ad| ad.gap_ns);
            // Ties (sites whose median a step is 0 on both sides) by their whole gap time's
            // change, for the capture's length.
            let whole = (b.per_second(gap(y) as f64) - a.per_second(gap(x) as f64)).abs() as Ns;
            (
                whole,
                SiteDiff {
                    site: advice::key_name(key),
                    a_per_step_ns: va,
                    b_per_step_ns: vb,
                    delta_per_step_ns: vb - va,
                    a_gap_ns: gap(x),
                    b_gap_ns: gap(y),
                    a_verdict: x.map(|ad| ad.verdict.as_str()),
                    b_verdict: y.map(|ad| ad.verdict.as_str()),
                },
            )
        })
        .collect();
    out.sort_by(|(wx, x), (wy, y)| {
        y.delta_per_step_ns
            .abs()
            .cmp(&x.delta_per_step_ns.abs())
            .then(wy.cmp(wx))
            .then(x.site.cmp(&y.site))
    });
    out.into_iter().map(|(_, s)| s).collect()
}

/// The GPU ops whose time a step changed most, matched by name across the captures.
fn kernels(
    a: &Side,
    b: &Side,
    oa: HashMap<NameId, (f64, f64)>,
    ob: HashMap<NameId, (f64, f64)>,
) -> Vec<KernelDiff> {
    let mut by_name: HashMap<&str, [(f64, f64); 2]> = HashMap::new();
    for (i, (s, ops)) in [(a, oa), (b, ob)].into_iter().enumerate() {
        for (name, v) in ops {
            by_name.entry(s.store.names.get(name)).or_default()[i] = v;
        }
    }
    let mut out: Vec<KernelDiff> = by_name
        .into_iter()
        .map(|(name, [x, y])| {
            // Counts a step to a hundredth, so that 2.0 and 2.004 read as the same.
            let (ca, cb) = ((x.0 * 100.0).round(), (y.0 * 100.0).round());
            KernelDiff {
                kernel: name.to_string(),
                a_count: ca / 100.0,
                b_count: cb / 100.0,
                a_per_step_ns: x.1 as Ns,
                b_per_step_ns: y.1 as Ns,
                delta_per_step_ns: y.1 as Ns - x.1 as Ns,
                count_change: match cb.total_cmp(&ca) {
                    std::cmp::Ordering::Greater => "+",
                    std::cmp::Ordering::Less => "-",
                    std::cmp::Ordering::Equal => "=",
                },
            }
        })
        .collect();
    out.sort_by(|x, y| {
        let dc = |k: &KernelDiff| (k.b_count - k.a_count).abs();
        y.delta_per_step_ns
            .abs()
            .cmp(&x.delta_per_step_ns.abs())
            .then(dc(y).total_cmp(&dc(x)))
            .then(x.kernel.cmp(&y.kernel))
    });
    out.truncate(KERNELS);
    out
}

/// A change as a signed time: `+950us`, `-35.4ms`, `0`.
fn signed(ns: Ns) -> String {
    match ns {
        0 => "0".into(),
        n if n > 0 => format!("+{}", fmt_short(n)),
        n => fmt_short(n),
    }
}

/// How much faster or slower B's step is than A's: `3.89x faster`.
fn speed(a: Ns, b: Ns) -> Option<String> {
    if b > 0 && a > b {
        Some(format!("{:.2}x faster", a as f64 / b as f64))
    } else if a > 0 && b > a {
        Some(format!("{:.2}x slower", b as f64 / a as f64))
    } else {
        None
    }
}

/// What a step (or a second) takes in A and in B, in a line: `a step: 43.5ms → 11.2ms (-74.3%,
/// 3.89x faster) · device idle 42.8ms → 10.5ms (-75.6%) · launches 351 → 351`.
pub fn headline(d: &DiffJson) -> String {
    let s = &d.steps;
    let head = match (s.a_median_ns, s.b_median_ns, d.per) {
        (Some(a), Some(b), "step") => {
            let x = speed(a, b).map(|x| format!(", {x}")).unwrap_or_default();
            format!(
                "a step: {} → {} ({}{x}) · ",
                fmt_short(a),
                fmt_short(b),
                percent(a as f64, b as f64)
            )
        }
        _ => "a second of capture: ".into(),
    };
    format!(
        "{head}device idle {} → {} ({}) · launches {:.0} → {:.0}",
        fmt_short(s.a_idle_ns),
        fmt_short(s.b_idle_ns),
        percent(s.a_idle_ns as f64, s.b_idle_ns as f64),
        s.a_launches,
        s.b_launches
    )
}

/// A site's change in a line: `  -35.4ms  36.1ms → 656us  sdpa_attention_forward  sdpa_attention.py`.
pub fn site_line(s: &SiteDiff) -> String {
    format!(
        "{:>9}  {:>7} → {:<7}  {}",
        signed(s.delta_per_step_ns),
        fmt_short(s.a_per_step_ns),
        fmt_short(s.b_per_step_ns),
        s.site
    )
}

/// B against A as a percentage: `-74.2%`; `new` where A had none.
fn percent(a: f64, b: f64) -> String {
    if a == 0.0 {
        return if b == 0.0 { "=".into() } else { "new".into() };
    }
    format!("{:+.1}%", 100.0 * (b - a) / a)
}

/// How wide the text form may be where it goes: stdout's width where it is a terminal, else
/// (a file, `-o`, or a pipe) no limit, so that no name is cut where it is kept or read by a
/// program.
pub fn width(output: Option<&std::path::Path>) -> Option<usize> {
    use std::io::IsTerminal;
    if output.is_some() || !std::io::stdout().is_terminal() {
        return None;
    }
    let (w, _) = crossterm::terminal::size().unwrap_or((MIN_WIDTH as u16, 0));
    Some((w as usize).max(MIN_WIDTH))
}

/// The text form: names whole, or where `width` is given (a terminal's), cut in the middle to
/// keep each line within it.
pub fn text(d: &DiffJson, width: Option<usize>) -> String {
    use std::fmt::Write;
    // A name in `room` characters after a line's first `used`.
    let fit = |s: &str, used: usize| match width {
        Some(w) => cut_middle(s, w.saturating_sub(used).max(8)),
        None => s.to_string(),
    };
    let mut o = String::new();
    let per = d.per;
    let _ = writeln!(
        o,
        "gaptop diff: before (A) against after (B), a {per} at a time"
    );
    for (n, c) in [("before (A)", &d.a), ("after (B) ", &d.b)] {
        let steps = match &c.steps {
            Some(s) => format!(", {} steps ({}, {} steady)", s.count, s.source, s.steady),
            None => ", no steps".into(),
        };
        let what = format!(
            ": {}, {} GPU ops{steps}",
            fmt_short(c.duration_ns),
            c.gpu_ops
        );
        let used = 4 + n.len() + what.chars().count();
        let _ = writeln!(o, "  {n}  {}{what}", fit(&c.source, used));
    }
    if let Some(note) = &d.note {
        let _ = writeln!(o, "  {note}");
    }
    let s = &d.steps;
    let head = if d.per == "step" {
        "\nA step (medians over the steady steps)"
    } else {
        "\nA second of capture"
    };
    let _ = writeln!(
        o,
        "{head}\n{:<16}{:>12}{:>12}  change",
        "", "before", "after"
    );
    let mut row = |name: &str, a: String, b: String, change: String| {
        let _ = writeln!(o, "  {name:<14}{a:>12}{b:>12}  {change}");
    };
    if let (Some(a), Some(b)) = (s.a_median_ns, s.b_median_ns) {
        let change = match speed(a, b) {
            Some(x) => format!("{}  ({x})", percent(a as f64, b as f64)),
            None => percent(a as f64, b as f64),
        };
        row("step time", fmt_short(a), fmt_short(b), change);
    }
    let times = [
        ("device idle", s.a_idle_ns, s.b_idle_ns),
        ("GPU busy", s.a_busy_ns, s.b_busy_ns),
    ];
    for (name, a, b) in times {
        row(
            name,
            fmt_short(a),
            fmt_short(b),
            percent(a as f64, b as f64),
        );
    }
    row(
        "launches",
        format!("{:.0}", s.a_launches),
        format!("{:.0}", s.b_launches),
        percent(s.a_launches, s.b_launches),
    );
    let basis = if d.basis == "device" {
        "device idle"
    } else {
        "each stream's own idle"
    };
    let _ = writeln!(
        o,
        "\nIdle a {per} by launching site ({basis}), biggest change first\n{:>11}{:>11}{:>11}  site",
        "before", "after", "change"
    );
    for x in d.sites.iter().take(10) {
        let _ = writeln!(
            o,
            "{:>11}{:>11}{:>11}  {}",
            fmt_short(x.a_per_step_ns),
            fmt_short(x.b_per_step_ns),
            signed(x.delta_per_step_ns),
            fit(&x.site, 35)
        );
    }
    if d.sites.len() > 10 {
        let _ = writeln!(o, "  … {} more sites (--format json)", d.sites.len() - 10);
    }
    // Two header rows: what each group of columns counts, then before / after in each.
    let groups = format!(
        "{:^27}{:^16}",
        format!("time a {per}"),
        format!("runs a {per}")
    );
    let _ = writeln!(
        o,
        "\nGPU ops by change in their time a {per} (means)\n{}\n{:>9}{:>9}{:>9}{:>9}{:>7}  op",
        groups.trim_end(),
        "before",
        "after",
        "change",
        "before",
        "after"
    );
    let shown = &d.kernels[..d.kernels.len().min(10)];
    for k in shown {
        // The short name, unless another row has it too (cutlass' `Kernel2`).
        let short = short_kernel(&k.kernel);
        let name = if shown
            .iter()
            .filter(|x| short_kernel(&x.kernel) == short)
            .count()
            > 1
        {
            k.kernel.trim_start_matches("void ").to_string()
        } else {
            short
        };
        let _ = writeln!(
            o,
            "{:>9}{:>9}{:>9}{:>9}{:>7}  {}",
            fmt_short(k.a_per_step_ns),
            fmt_short(k.b_per_step_ns),
            signed(k.delta_per_step_ns),
            count(k.a_count),
            count(k.b_count),
            fit(&name, 45)
        );
    }
    if let Some(g) = &d.gate {
        o.push_str(&crate::gate::text(g));
    }
    o
}

/// A count a step: whole where it is, else to a tenth.
fn count(n: f64) -> String {
    if n == n.trunc() {
        format!("{n:.0}")
    } else {
        format!("{n:.1}")
    }
}

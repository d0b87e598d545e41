//! Why the GPU waited at a site: its verdict, from the site's gap time by reason, its launches
//! and one gap figure ([`GapFigure`]: with steps, the length at which half of its steady idle
//! is in gaps at least that long; without, its median gap), which the site's text gives too;
//! and the usual fix for each verdict in each framework.
//!
//! Verdicts, in the order they are tried:
//! - `sync`: half or more of the time follows a synchronizing call of the launching thread;
//! - `event_wait`: half or more follows a wait on another stream's event;
//! - `graph`: half or more is inside CUDA graph replays;
//! - `unknown`: the launching call is not in the source;
//! - `slow_launch`: half or more of the time is spent inside the launching call itself, for
//!   far longer than a launch takes (lazy module loading on a kernel's first launch, the driver
//!   blocked): not CPU work before the launch;
//! - `busy`: the ops that waited run at least four times longer than the gap figure, and the
//!   device was busy at least half the time or the ops run 50 µs or more (longer than any
//!   launch overhead: the host keeps up with them): there is little to win;
//! - `launch_bound`: the host launched as fast as it could: a gap figure under 50 µs, the
//!   scale of launch overhead (3–15 µs a launch, plus the framework's per-op work);
//! - `host_work`: a gap figure of 50 µs or more: CPU work on the critical path.

use serde::Serialize;

use crate::analysis::gaps::Reason;
use crate::analysis::site::LeafAcc;
use crate::model::records::Ns;
use crate::units::fmt_short;

/// Typical gaps below this are launch overhead; at or above it, host work.
pub const HOST_WORK_NS: Ns = 50_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Busy,
    LaunchBound,
    HostWork,
    SlowLaunch,
    Sync,
    EventWait,
    Graph,
    Unknown,
}

impl Verdict {
    pub const ALL: [Verdict; 8] = [
        Verdict::Busy,
        Verdict::LaunchBound,
        Verdict::HostWork,
        Verdict::SlowLaunch,
        Verdict::Sync,
        Verdict::EventWait,
        Verdict::Graph,
        Verdict::Unknown,
    ];

    /// The verdicts' one vocabulary: each one's name (as the JSON, the report's rows, `diff`
    /// and the UI write it) and its words in a sentence (the report's headline).
    fn names(self) -> (&'static str, &'static str) {
        match self {
            Verdict::Busy => ("busy", "GPU busy"),
            Verdict::LaunchBound => ("launch_bound", "launch-bound"),
            Verdict::HostWork => ("host_work", "CPU work before launches"),
            Verdict::SlowLaunch => ("slow_launch", "slow launch calls"),
            Verdict::Sync => ("sync", "CPU waits for the GPU"),
            Verdict::EventWait => ("event_wait", "waits on another stream"),
            Verdict::Graph => ("graph", "inside CUDA graphs"),
            Verdict::Unknown => ("unknown", "launch call not seen"),
        }
    }

    /// Its name: `launch_bound`.
    pub fn as_str(self) -> &'static str {
        self.names().0
    }

    /// Its words in a sentence: `launch-bound`.
    pub fn words(self) -> &'static str {
        self.names().1
    }
}

/// What the code that launched runs on, for the fix that fits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Framework {
    PyTorch,
    Jax,
    CuPy,
    Triton,
    Cuda,
}

impl Framework {
    pub fn as_str(self) -> &'static str {
        match self {
            Framework::PyTorch => "pytorch",
            Framework::Jax => "jax",
            Framework::CuPy => "cupy",
            Framework::Triton => "triton",
            Framework::Cuda => "cuda",
        }
    }

    /// What a frame or an op name says about the framework, if anything.
    pub fn of_name(name: &str) -> Option<Framework> {
        let n = name;
        if n.contains("jax/")
            || n.contains("jaxlib")
            || n.contains("xla/")
            || n.ends_with("_fusion")
        {
            Some(Framework::Jax)
        } else if n.contains("cupy/") || n.starts_with("cupy_") || n.contains("cupy.") {
            Some(Framework::CuPy)
        } else if n.contains("torch/")
            || n.contains("at::native")
            || n.contains("at::cuda")
            || n.starts_with("void at::")
            || n.contains("c10::")
            || n.contains("libtorch")
        {
            Some(Framework::PyTorch)
        } else if n.starts_with("triton_") || n.contains("triton/") {
            Some(Framework::Triton)
        } else {
            None
        }
    }
}

/// The usual fix for a verdict, in a few words, for the framework the code runs on.
pub fn fix(v: Verdict, fw: Framework) -> &'static str {
    use Framework as F;
    use Verdict as V;
    match (v, fw) {
        (V::Busy, _) => "the GPU is mostly busy here",
        (V::LaunchBound, F::PyTorch) => {
            "fuse (torch.compile; mode=\"reduce-overhead\" adds CUDA graphs), fewer larger ops, or a CUDA graph"
        }
        (V::LaunchBound, F::Jax) => {
            "jax.jit the whole step; lax.scan or lax.fori_loop for the loop, so XLA launches one program"
        }
        (V::LaunchBound, F::CuPy) => {
            "fuse the chain (cupy.fuse or an ElementwiseKernel), or capture the loop in a CUDA graph"
        }
        (V::LaunchBound, F::Triton) => {
            "fuse these into one Triton kernel, or replay the launches from a CUDA graph"
        }
        (V::LaunchBound, F::Cuda) => {
            "fuse the kernels, or capture the sequence once in a CUDA graph (cudaStreamBeginCapture)"
        }
        (V::HostWork, F::PyTorch) => {
            "move CPU work off the launch path, or a CUDA graph where it is the framework's (torch.compile mode=\"reduce-overhead\"); static shapes"
        }
        (V::HostWork, F::Jax) => {
            "jax.jit the whole step so Python runs once; no NumPy or Python control flow on arrays in the loop"
        }
        (V::HostWork, F::CuPy) => {
            "keep the loop's work on the GPU (no NumPy round trips); move Python work off the launch path"
        }
        (V::HostWork, F::Triton) => {
            "move host work (autotuning, argument packing) off the launch path; reuse compiled kernels"
        }
        (V::HostWork, F::Cuda) => {
            "move host work off the launch path (another thread, or overlapped with the GPU)"
        }
        (V::SlowLaunch, _) => {
            "the launch call itself blocked (first launch loading its module?): warm up first, or CUDA_MODULE_LOADING=EAGER"
        }
        (V::Sync, F::PyTorch) => {
            "remove or defer the sync (.item(), .cpu(), .tolist(), print(tensor), torch.cuda.synchronize, a blocking copy)"
        }
        (V::Sync, F::Jax) => {
            "remove or defer the sync (block_until_ready, jax.device_get, float(x) or printing an array)"
        }
        (V::Sync, F::CuPy) => {
            "remove or defer the sync (cupy.asnumpy, .get(), .item(), Stream.synchronize)"
        }
        (V::Sync, F::Triton | F::Cuda) => {
            "remove or defer the sync (cudaDeviceSynchronize, cudaStreamSynchronize, a blocking cudaMemcpy): events and async copies"
        }
        (V::EventWait, _) => "check cross-stream dependencies",
        (V::Graph, _) => "inside a CUDA graph: the graph's own dependencies",
        (V::Unknown, _) => "launching call not in this source",
    }
}

/// The one gap length a site's verdict goes by, and that its text gives: with steps, where
/// its steady-state gap time is (half of it in gaps at least this long: a site with many
/// short gaps and one long one a step has its time, and so its cause, in the long ones);
/// without steps, its typical (median) gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GapFigure {
    pub ns: Ns,
    /// Weighted by the steady steps' gap time (else the median of all gaps).
    pub weighted: bool,
    /// Known exactly, not only to within its bucket.
    pub exact: bool,
}

impl GapFigure {
    pub fn of(a: &LeafAcc) -> GapFigure {
        match a.steady_weighted_gap() {
            0 => GapFigure {
                ns: a.typical_gap(),
                weighted: false,
                exact: a.is_exact(),
            },
            w => GapFigure {
                ns: w,
                weighted: true,
                exact: false,
            },
        }
    }

    /// The figure in words: `half of its steady idle in gaps of ~61.4µs or more`, or `gaps
    /// typically 22.4µs`.
    pub fn phrase(&self) -> String {
        let t = fmt_short(self.ns);
        let t = if self.exact { t } else { format!("~{t}") };
        if self.weighted {
            format!("half of its steady idle in gaps of {t} or more")
        } else {
            format!("gaps typically {t}")
        }
    }
}

/// A site's verdict, given how busy its device was (0..1).
pub fn verdict(a: &LeafAcc, busy_frac: f64) -> Verdict {
    let total = a.gap_ns.max(1);
    let share = |r: Reason| a.by_reason[r as usize] * 2 >= total;
    let gap = GapFigure::of(a).ns;
    let mean_op = a.next_ns / a.gaps.max(1) as Ns;
    if share(Reason::Sync) {
        Verdict::Sync
    } else if share(Reason::EventWait) {
        Verdict::EventWait
    } else if share(Reason::Graph) {
        Verdict::Graph
    } else if share(Reason::Unknown) {
        Verdict::Unknown
    } else if a.slow_launch_ns * 2 >= total {
        Verdict::SlowLaunch
    } else if mean_op >= 4 * gap && (busy_frac >= 0.5 || mean_op >= HOST_WORK_NS) {
        // Ops far longer than their gaps: on a busy device, or ops longer than any launch
        // overhead (the host keeps up with them; what is left is a small share of their time).
        Verdict::Busy
    } else if gap < HOST_WORK_NS {
        Verdict::LaunchBound
    } else {
        Verdict::HostWork
    }
}

/// A site's sentence: what its gaps were, by its verdict, with the verdict's figure; the cause
/// a pattern names (`analysis::patterns`) and why; and the fix.
pub fn text(
    v: Verdict,
    a: &LeafAcc,
    mean_op: Ns,
    fix: &str,
    cause: Option<(&str, &str)>,
) -> String {
    let fig = GapFigure::of(a).phrase();
    let plural = |n: u64, many: &'static str| if n == 1 { "" } else { many };
    let what = match v {
        Verdict::Busy => {
            let what = format!(
                "{} gap{} between ops averaging {} ({fig}): the GPU is mostly busy here",
                a.gaps,
                plural(a.gaps, "s"),
                fmt_short(mean_op)
            );
            return match cause {
                Some((name, why)) => format!("{what}. Cause: {name}: {why}. Fix: {fix}."),
                None => format!("{what}, little to win."),
            };
        }
        Verdict::EventWait => {
            return "launches wait on another stream's event: check the cross-stream \
                    dependencies and what the other stream is doing."
                .into()
        }
        Verdict::Graph => {
            return "gaps inside CUDA graph replays: launch overhead is already gone; these are \
                    the graph's own dependencies."
                .into()
        }
        Verdict::Unknown => {
            return "the launching call is not in this source (a trace without runtime events, \
                    or records dropped), so the code cannot be named."
                .into()
        }
        Verdict::LaunchBound => format!(
            "{} launch{} of ops averaging {}, {fig}: launch overhead.",
            a.gaps,
            plural(a.gaps, "es"),
            fmt_short(mean_op)
        ),
        Verdict::HostWork => format!("CPU work before its launches, on the critical path: {fig}."),
        Verdict::SlowLaunch => format!(
            "the launching call itself ran through {:.0}% of this time ({} gap{}, {fig}): not CPU \
             work before it.",
            100.0 * a.slow_launch_ns as f64 / a.gap_ns.max(1) as f64,
            a.gaps,
            plural(a.gaps, "s")
        ),
        Verdict::Sync => format!(
            "gaps after a sync ({:.0}% of this time): the CPU waited for the GPU, and so came \
             late to these launches.",
            100.0 * a.by_reason[Reason::Sync as usize] as f64 / a.gap_ns.max(1) as f64
        ),
    };
    match cause {
        Some((name, why)) => format!("{what} Cause: {name}: {why}. Fix: {fix}."),
        None => format!("{what} Fix: {fix}."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(gaps: &[(Ns, Reason)]) -> LeafAcc {
        let mut a = LeafAcc::default();
        for &(g, r) in gaps {
            a.add(g, r, 1_000);
        }
        a
    }

    #[test]
    fn verdicts_follow_reasons_then_typical_gap() {
        let launch = |g| (g, Reason::Launch);
        let verdict = |a: &LeafAcc| verdict(a, 1.0);
        assert_eq!(verdict(&acc(&[launch(10_000); 9])), Verdict::LaunchBound);
        // One long warm-up gap does not make a launch-bound site look like host work.
        let mut v = vec![launch(10_000); 9];
        v.push(launch(30_000_000));
        assert_eq!(verdict(&acc(&v)), Verdict::LaunchBound);
        assert_eq!(verdict(&acc(&[launch(200_000); 5])), Verdict::HostWork);
        let mixed = acc(&[(300_000, Reason::Sync), launch(10_000), launch(10_000)]);
        assert_eq!(
            verdict(&mixed),
            Verdict::Sync,
            "most of the time followed a sync"
        );
        assert_eq!(
            verdict(&acc(&[(5_000, Reason::Graph), (5_000, Reason::Graph)])),
            Verdict::Graph
        );
        assert_eq!(
            verdict(&acc(&[(5_000, Reason::EventWait)])),
            Verdict::EventWait
        );
        assert_eq!(verdict(&acc(&[(5_000, Reason::Unknown)])), Verdict::Unknown);
    }

    #[test]
    fn verdict_names_match_the_json_ones() {
        for v in Verdict::ALL {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
        // Each verdict has words of its own, and they are not its name.
        let words: std::collections::HashSet<_> = Verdict::ALL.iter().map(|v| v.words()).collect();
        assert_eq!(words.len(), Verdict::ALL.len());
        assert!(Verdict::ALL.iter().all(|v| v.words() != v.as_str()));
    }

    #[test]
    fn typical_gap_is_the_median_within_its_power_of_two() {
        let a = acc(&[
            (10_000, Reason::Launch),
            (12_000, Reason::Launch),
            (1 << 30, Reason::Launch),
        ]);
        let t = a.typical_gap();
        assert!((8_192..16_384).contains(&t), "{t}");
        assert_eq!(LeafAcc::default().typical_gap(), 0);
    }

    /// GPT-2's Conv1D.forward: most gaps ~22 µs apart, but half of the steady idle in gaps of
    /// ~61 µs or more. The verdict and its text go by the same figure, whichever it is.
    #[test]
    fn the_verdict_and_its_text_go_by_one_figure() {
        let mut gaps = vec![(22_000, Reason::Launch); 30];
        gaps.extend(vec![(61_000, Reason::Launch); 20]);
        let mut a = acc(&gaps);
        assert!(a.typical_gap() < HOST_WORK_NS, "{}", a.typical_gap());
        // Without steps: the median, under 50 µs, launch-bound, and the text says so.
        assert_eq!(GapFigure::of(&a).ns, a.typical_gap());
        assert_eq!(verdict(&a, 0.1), Verdict::LaunchBound);
        let t = text(Verdict::LaunchBound, &a, 1_000, "fuse", None);
        assert!(t.contains("gaps typically 22µs"), "{t}");
        // With steps, all of them steady: where the time is, 50 µs or more, host work.
        a.steady_hist_ns = a.hist_ns;
        let fig = GapFigure::of(&a);
        assert!(fig.weighted && fig.ns >= HOST_WORK_NS, "{fig:?}");
        assert_eq!(verdict(&a, 0.1), Verdict::HostWork);
        let t = text(Verdict::HostWork, &a, 1_000, "move it", None);
        assert!(t.contains(&fig.phrase()), "{t}");
        assert!(t.contains(&format!("~{}", fmt_short(fig.ns))), "{t}");
        assert!(
            !t.contains("22µs"),
            "the median is not the verdict's figure: {t}"
        );
    }

    /// Ops far longer than their gaps and longer than any launch overhead (an alexnet conv of
    /// 181 µs after gaps of 20 µs): the host keeps up, the gaps are a small share of the time:
    /// busy, not launch overhead, even on a device idle most of the time.
    #[test]
    fn long_ops_after_short_gaps_are_busy_not_launch_bound() {
        let mut a = LeafAcc::default();
        for _ in 0..10 {
            a.add(20_000, Reason::Launch, 181_000);
        }
        assert_eq!(verdict(&a, 0.1), Verdict::Busy);
        let t = text(Verdict::Busy, &a, 181_000, "", None);
        assert!(t.contains("averaging 181µs (gaps typically 20µs)"), "{t}");
        // Short ops after the same gaps: launch overhead.
        let mut b = LeafAcc::default();
        for _ in 0..10 {
            b.add(20_000, Reason::Launch, 2_000);
        }
        assert_eq!(verdict(&b, 0.1), Verdict::LaunchBound);
        // Ops of four times the gap: busy past 50 µs, else only on a busy device.
        let mut c = LeafAcc::default();
        for _ in 0..10 {
            c.add(20_000, Reason::Launch, 80_000);
        }
        assert_eq!(verdict(&c, 0.9), Verdict::Busy);
        assert_eq!(verdict(&c, 0.1), Verdict::Busy, "80 µs ops are past 50 µs");
        let mut d = LeafAcc::default();
        for _ in 0..10 {
            d.add(10_000, Reason::Launch, 45_000);
        }
        assert_eq!(verdict(&d, 0.9), Verdict::Busy);
        assert_eq!(verdict(&d, 0.1), Verdict::LaunchBound);
    }
}

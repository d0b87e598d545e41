//! What to fix: the gap time of a window grouped by the code that launched it (the innermost
//! Python frame, else the innermost frame), with a verdict on why the GPU waited there and the
//! usual remedy.
//!
//! Verdicts, from the site's gap time by reason and its typical (median) gap:
//! - `sync`: half or more of the time follows a synchronizing call of the launching thread;
//! - `event_wait`: half or more follows a wait on another stream's event;
//! - `graph`: half or more is inside CUDA graph replays;
//! - `busy`: the ops that waited run at least four times longer than the typical gap: the GPU
//!   is mostly busy here and there is little to win;
//! - `launch_bound`: the host launched as fast as it could: typical gaps under 50 µs, the
//!   scale of launch overhead (3–15 µs a launch, plus the framework's per-op work);
//! - `host_work`: typical gaps of 50 µs or more before launches: CPU work on the critical path;
//! - `unknown`: the launching call is not in the source.

use std::collections::HashMap;

use serde::Serialize;

use crate::collect::analysis::{Gap, LeafAcc, Reason, Site, Summary};
use crate::collect::store::{NameId, Ns, StackId, Store};

/// Typical gaps below this are launch overhead; at or above it, host work.
pub const HOST_WORK_NS: Ns = 50_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Busy,
    LaunchBound,
    HostWork,
    Sync,
    EventWait,
    Graph,
    Unknown,
}

#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// The code the gaps are charged to, as displayed (`fn  file.py:12`).
    pub site: String,
    /// What `site_key` gives for the launch stacks grouped here.
    #[serde(skip)]
    pub key: String,
    pub gaps: u64,
    pub gap_ns: Ns,
    /// Share of all gap time in the window.
    pub share: f64,
    pub typical_gap_ns: Ns,
    /// Mean duration of the ops that waited.
    pub mean_op_ns: Ns,
    pub verdict: Verdict,
    /// Gaps among these that stand out as one-offs (see `one_off`), and their time: the usual
    /// fix does not address them.
    pub one_offs: u64,
    pub one_off_ns: Ns,
    /// One sentence: what happened and what usually fixes it.
    pub text: String,
    /// The usual fix alone, for narrow places.
    pub fix: &'static str,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Busy => "busy",
            Verdict::LaunchBound => "launch_bound",
            Verdict::HostWork => "host_work",
            Verdict::Sync => "sync",
            Verdict::EventWait => "event_wait",
            Verdict::Graph => "graph",
            Verdict::Unknown => "unknown",
        }
    }
}

/// The usual fix for a verdict, in a few words.
pub fn fix(v: Verdict) -> &'static str {
    match v {
        Verdict::Busy => "the GPU is mostly busy here",
        Verdict::LaunchBound => "fuse (torch.compile), fewer larger ops, or a CUDA graph",
        Verdict::HostWork => "move CPU work off the launch path",
        Verdict::Sync => "remove or defer the synchronizing call",
        Verdict::EventWait => "check cross-stream dependencies",
        Verdict::Graph => "inside a CUDA graph: the graph's own dependencies",
        Verdict::Unknown => "launching call not in this source",
    }
}

/// The frame a launch stack is charged to: its innermost non-plumbing Python frame, else its
/// innermost frame (0 for no stack).
pub fn site_of(store: &Store, stack: StackId) -> NameId {
    let frames = store.stacks.frames(stack);
    frames
        .iter()
        .rev()
        .find(|&&f| {
            let s = store.names.get(f);
            s.contains(".py(") && !crate::frames::is_plumbing(s)
        })
        .or(frames.last())
        .copied()
        .unwrap_or(0)
}

/// A site's function, without its line: `(file, function)` for a Python frame
/// (`/x/model.py(12): Model.forward`), else the frame as it is.
fn function_of(frame: &str) -> (String, String, Option<u32>) {
    if let Some((loc, qual)) = frame.split_once("): ") {
        if let Some((file, line)) = loc.rsplit_once('(') {
            if let Ok(line) = line.parse::<u32>() {
                return (file.to_string(), qual.to_string(), Some(line));
            }
        }
    }
    (String::new(), frame.to_string(), None)
}

/// The key advice groups a gap under (its launch site's function).
pub fn site_key(store: &Store, g: &Gap) -> String {
    let (file, qual, _) = site_function(store, Site::of(g));
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

/// One line on a function's gaps: the verdict, its usual fix, and how its gaps looked.
pub fn summary_line(a: &Advice) -> String {
    format!(
        "{}: {} ({} gaps here, typically {} apart, {} of gap time)",
        a.verdict.as_str(),
        a.fix,
        a.gaps,
        crate::units::fmt_short(a.typical_gap_ns),
        crate::units::fmt_short(a.gap_ns)
    )
}

fn key_of(file: &str, qual: &str) -> String {
    format!("{file}\u{1f}{qual}")
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
                api => format!("(no Python stack) {} → {op}", store.names.get(api)),
            };
            (String::new(), what, None)
        }
        f => function_of(store.names.get(f)),
    }
}

fn verdict(a: &LeafAcc) -> Verdict {
    let total = a.gap_ns.max(1);
    let share = |r: Reason| a.by_reason[r as usize] * 2 >= total;
    if share(Reason::Sync) {
        Verdict::Sync
    } else if share(Reason::EventWait) {
        Verdict::EventWait
    } else if share(Reason::Graph) {
        Verdict::Graph
    } else if share(Reason::Unknown) {
        Verdict::Unknown
    } else if a.next_ns / a.gaps.max(1) as Ns >= 4 * a.typical_gap() {
        Verdict::Busy
    } else if a.typical_gap() < HOST_WORK_NS {
        Verdict::LaunchBound
    } else {
        Verdict::HostWork
    }
}

fn text(v: Verdict, a: &LeafAcc, mean_op: Ns) -> String {
    use crate::units::fmt_short as t;
    let gap = t(a.typical_gap());
    match v {
        Verdict::Busy => format!(
            "gaps of typically {gap} between ops averaging {}: the GPU is mostly busy here, \
             little to win.",
            t(mean_op)
        ),
        Verdict::LaunchBound => format!(
            "{} launches, typically {gap} apart, of ops averaging {}: launch overhead. Fuse these \
             ops (torch.compile), use fewer, larger ops, or capture this code in a CUDA graph.",
            a.gaps,
            t(mean_op)
        ),
        Verdict::HostWork => format!(
            "typically {gap} of CPU work before each launch here: Python or data preparation on \
             the critical path. Move it out of the loop, overlap it, or profile the CPU side."
        ),
        Verdict::Sync => format!(
            "the CPU waited for the GPU before launching ({:.0}% of this time): a synchronizing \
             call such as .item(), .cpu(), .tolist(), printing a tensor, torch.cuda.synchronize \
             or a blocking copy. Remove it from the loop or defer it.",
            100.0 * a.by_reason[Reason::Sync as usize] as f64 / a.gap_ns.max(1) as f64
        ),
        Verdict::EventWait => "launches wait on another stream's event: check the cross-stream \
             dependencies and what the other stream is doing."
            .into(),
        Verdict::Graph => "gaps inside CUDA graph replays: launch overhead is already gone; \
             these are the graph's own dependencies."
            .into(),
        Verdict::Unknown => "the launching call is not in this source (a trace without runtime \
             events, or records dropped), so the code cannot be named."
            .into(),
    }
}

/// One function's gaps, its gap time per line, its file and its name.
type FnAcc = (LeafAcc, HashMap<Option<u32>, Ns>, String, String);

/// Gaps a function needs before any of them can stand out as a one-off.
const ONE_OFF_MIN_GAPS: u64 = 3;

/// The shortest gap that stands out as a one-off next to gaps of `typical`: a millisecond, or
/// 50 times the typical gap if longer.
fn one_off_floor(typical: Ns) -> Ns {
    (50 * typical.max(1)).max(1_000_000)
}

/// How many times its code's typical gap a gap is, when it stands out as a one-off: at least
/// a millisecond, 50 times the typical gap, and its code has other gaps to compare with.
pub fn one_off(gap: Ns, typical: Ns, gaps_at_site: u64) -> Option<u64> {
    (gaps_at_site >= ONE_OFF_MIN_GAPS && gap >= one_off_floor(typical))
        .then(|| (gap / typical.max(1)) as u64)
}

/// The `n` functions with the most gap time in the summary's window, most first.
pub fn advise(store: &Store, s: &Summary, n: usize) -> Vec<Advice> {
    // Per function: what its gaps were like, and gap time per line.
    let mut by_fn: HashMap<String, FnAcc> = HashMap::new();
    for (&site, acc) in &s.leaves {
        let (file, qual, line) = site_function(store, site);
        let e = by_fn
            .entry(key_of(&file, &qual))
            .or_insert_with(|| (LeafAcc::default(), HashMap::new(), file, qual));
        e.0.merge(acc);
        *e.1.entry(line).or_default() += acc.gap_ns;
    }
    let total = s.total_gap_ns().max(1);
    let mut v: Vec<_> = by_fn.into_iter().collect();
    v.sort_by(|a, b| b.1 .0.gap_ns.cmp(&a.1 .0.gap_ns).then(a.0.cmp(&b.0)));
    v.into_iter()
        .take(n)
        .map(|(key, (a, lines, file, qual))| {
            let mean_op = a.next_ns / a.gaps.max(1) as Ns;
            let verdict = verdict(&a);
            let mut lines: Vec<(Option<u32>, Ns)> = lines.into_iter().collect();
            lines.sort_by(|x, y| y.1.cmp(&x.1).then(x.0.cmp(&y.0)));
            let shown: Vec<String> = lines
                .iter()
                .filter_map(|l| l.0)
                .take(4)
                .map(|l| l.to_string())
                .collect();
            let short_file = file.rsplit('/').next().unwrap_or(&file);
            let site = if shown.is_empty() {
                qual.clone()
            } else {
                let more = if lines.len() > shown.len() {
                    ",…"
                } else {
                    ""
                };
                format!("{qual}  {short_file}:{}{more}", shown.join(","))
            };
            let (one_offs, one_off_ns) = if a.gaps >= ONE_OFF_MIN_GAPS {
                a.at_least(one_off_floor(a.typical_gap()))
            } else {
                (0, 0)
            };
            Advice {
                site,
                key,
                one_offs,
                one_off_ns,
                gaps: a.gaps,
                gap_ns: a.gap_ns,
                share: a.gap_ns as f64 / total as f64,
                typical_gap_ns: a.typical_gap(),
                mean_op_ns: mean_op,
                verdict,
                text: text(verdict, &a, mean_op),
                fix: fix(verdict),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn verdicts_follow_reasons_then_typical_gap() {
        let launch = |g| (g, Reason::Launch);
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
        for v in [
            Verdict::Busy,
            Verdict::LaunchBound,
            Verdict::HostWork,
            Verdict::Sync,
            Verdict::EventWait,
            Verdict::Graph,
            Verdict::Unknown,
        ] {
            assert_eq!(serde_json::to_value(v).unwrap(), v.as_str());
        }
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
}

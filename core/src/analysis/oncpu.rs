//! What the CPU did during a gap: the CPU samples (`sources::cpu`, taken from outside the
//! program) of the thread that launched the op ending the gap, taken while the GPU waited.
//!
//! What a set of samples (one gap's, or all of a site's gaps') has in common is the frames that
//! at least half of them hold, ordered from the innermost: each frame's place is its median
//! distance from the samples' innermost frame, so stacks cut short at the outer end (a deep
//! stack that did not fit in the copy the kernel took) still line up. The first of them is the
//! *dominant* frame: the deepest code most of the samples were in.

use std::collections::HashMap;

use serde::Serialize;

use super::gaps::Gap;
use crate::model::records::{NameId, Ns, StackId};
use crate::model::store::Store;

/// The samples taken during a gap, on the thread that launched the op ending it.
pub fn gap_samples(store: &Store, g: &Gap) -> Vec<StackId> {
    let lane = &store.lanes[g.lane];
    let proc = &store.procs[lane.key.proc as usize];
    let Some(op) = lane.get(g.next) else {
        return Vec::new();
    };
    let Some(api) = proc.api_by_corr(op.corr) else {
        return Vec::new();
    };
    proc.samples_in(api.tid, g.start, g.end)
        .map(|s| s.stack)
        .collect()
}

/// The sampling period of the process whose op ends the gap (0 without samples).
pub fn period_of(store: &Store, g: &Gap) -> Ns {
    let lane = &store.lanes[g.lane];
    store.procs[lane.key.proc as usize].sample_period_ns
}

/// What one gap's samples say.
#[derive(Clone, Debug, PartialEq)]
pub struct During {
    pub samples: usize,
    /// The thread's time on a CPU as a share of the gap (samples × period / gap), at most 1.
    pub on_cpu: f64,
    /// The frames at least half of the samples hold, innermost first, with their shares.
    pub shared: Vec<(NameId, f64)>,
}

/// The gap's samples, summed up; None when none were taken during it.
pub fn during(store: &Store, g: &Gap) -> Option<During> {
    let stacks = gap_samples(store, g);
    if stacks.is_empty() {
        return None;
    }
    let period = period_of(store, g);
    Some(During {
        samples: stacks.len(),
        on_cpu: (stacks.len() as f64 * period as f64 / g.dur().max(1) as f64).min(1.0),
        shared: shared_frames(store, &stacks),
    })
}

/// The frames at least half of the samples hold (each counted once a sample), innermost first
/// by their median distance from a sample's innermost frame, with the share that holds each.
/// A Python function counts as one frame whatever line it was at (samples of a loop's body
/// spread over its lines), named by the line most of its samples were at.
pub fn shared_frames(store: &Store, stacks: &[StackId]) -> Vec<(NameId, f64)> {
    let n = stacks.len();
    let mut by_stack: HashMap<StackId, usize> = HashMap::new();
    for &s in stacks {
        *by_stack.entry(s).or_default() += 1;
    }
    // A frame's function: Python frames by file and function, others by their name.
    let mut keys: HashMap<NameId, usize> = HashMap::new();
    let mut functions: HashMap<(String, String), usize> = HashMap::new();
    let mut key_of = |f: NameId| -> usize {
        let next = keys.len() + functions.len() + 1;
        *keys
            .entry(f)
            .or_insert_with(|| match store.names.frame(f).python() {
                Some(p) if p.line().is_some() => *functions
                    .entry((p.file.to_string(), p.function.to_string()))
                    .or_insert(next),
                _ => next,
            })
    };
    // Per function: the samples that hold it and its distance from their innermost frame,
    // and how many samples each of its frames stands in.
    let mut seen: HashMap<usize, (Vec<usize>, HashMap<NameId, usize>)> = HashMap::new();
    for (&s, &times) in &by_stack {
        let frames = store.stacks.frames(s);
        let mut done: Vec<usize> = Vec::with_capacity(frames.len());
        for (d, &f) in frames.iter().rev().enumerate() {
            let k = key_of(f);
            if done.contains(&k) {
                continue;
            }
            done.push(k);
            let e = seen.entry(k).or_default();
            e.0.extend(std::iter::repeat_n(d, times));
            *e.1.entry(f).or_default() += times;
        }
    }
    // (function, frame named, share, median distance) of those at least half hold.
    let mut out: Vec<(usize, NameId, f64, usize)> = seen
        .into_iter()
        .filter(|(_, (d, _))| 2 * d.len() >= n && n > 0)
        .map(|(k, (mut d, lines))| {
            let mid = (d.len() - 1) / 2;
            let at = *d.select_nth_unstable(mid).1;
            let f = lines
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
                .map(|x| x.0)
                .unwrap_or_default();
            (k, f, d.len() as f64 / n as f64, at)
        })
        .collect();
    // Where the samples hold frames below them to different depths (a native leaf deep in
    // some, the caller itself running in others), a caller's median distance can be less
    // than its callee's. So the order is the one the stacks holding both agree on: a frame
    // goes before each frame it is inside of in most of them ([`inner_first`]); the median
    // distance orders only what the stacks leave untold.
    let wins = inner_first(
        store,
        &by_stack,
        &out.iter().map(|x| x.0).collect::<Vec<_>>(),
        &mut key_of,
    );
    out.sort_by(|a, b| {
        wins[&b.0]
            .cmp(&wins[&a.0])
            .then(a.3.cmp(&b.3))
            .then(b.2.total_cmp(&a.2))
            .then(a.1.cmp(&b.1))
    });
    out.into_iter().map(|(_, f, share, _)| (f, share)).collect()
}

/// For each of `kept` (functions, as `key_of` numbers them), how many of the others it lies
/// inside of (nearer the innermost frame) in most of the samples that hold both: for frames
/// that the stacks order the same way everywhere, the innermost gets the most. A count, not a
/// comparison, so that stacks that disagree cannot make the sort's order inconsistent.
fn inner_first(
    store: &Store,
    by_stack: &HashMap<StackId, usize>,
    kept: &[usize],
    key_of: &mut impl FnMut(NameId) -> usize,
) -> HashMap<usize, usize> {
    let index: HashMap<usize, usize> = kept.iter().enumerate().map(|(i, &k)| (k, i)).collect();
    let m = kept.len();
    // inner[a * m + b]: samples in which a lies inside b.
    let mut inner = vec![0usize; m * m];
    let mut at: Vec<usize> = Vec::with_capacity(m);
    for (&s, &times) in by_stack {
        at.clear();
        for &f in store.stacks.frames(s).iter().rev() {
            if let Some(&i) = index.get(&key_of(f)) {
                if !at.contains(&i) {
                    at.push(i);
                }
            }
        }
        for (x, &a) in at.iter().enumerate() {
            for &b in &at[x + 1..] {
                inner[a * m + b] += times;
            }
        }
    }
    kept.iter()
        .enumerate()
        .map(|(a, &k)| {
            let w = (0..m)
                .filter(|&b| inner[a * m + b] > inner[b * m + a])
                .count();
            (k, w)
        })
        .collect()
}

/// The CPU samples of a site's gaps (the first [`SITE_SAMPLES`] of them kept whole).
#[derive(Clone, Debug, Default)]
pub struct SiteSamples {
    pub samples: u64,
    /// Samples × period: the CPU time they stand for.
    pub cpu_ns: Ns,
    stacks: Vec<StackId>,
}

/// How many of a site's samples are kept for its dominant path.
pub const SITE_SAMPLES: usize = 50_000;

impl SiteSamples {
    /// Adds a gap's samples.
    pub fn add(&mut self, stacks: &[StackId], period: Ns) {
        self.samples += stacks.len() as u64;
        self.cpu_ns += period * stacks.len() as Ns;
        let room = SITE_SAMPLES.saturating_sub(self.stacks.len());
        self.stacks.extend(stacks.iter().take(room));
    }

    pub fn merge(&mut self, o: &SiteSamples) {
        self.samples += o.samples;
        self.cpu_ns += o.cpu_ns;
        let room = SITE_SAMPLES.saturating_sub(self.stacks.len());
        self.stacks.extend(o.stacks.iter().take(room));
    }

    /// The innermost `n` named frames that at least half of the samples hold, innermost first,
    /// with their shares (frames of stripped libraries, which say nothing, left out), and the
    /// innermost three Python frames among them wherever they stand.
    pub fn innermost(&self, store: &Store, n: usize) -> Vec<JsonFrameShare> {
        let mut python = 0;
        shared_frames(store, &self.stacks)
            .into_iter()
            .filter(|&(f, _)| store.names.frame(f).unnamed_binary().is_none())
            .enumerate()
            .filter(|&(i, (f, _))| {
                let py = store
                    .names
                    .frame(f)
                    .python()
                    .is_some_and(|p| p.line().is_some());
                python += py as usize;
                i < n || (py && python <= 3)
            })
            .map(|(_, (f, share))| (store.names.get(f), share))
            .map(|(f, share)| JsonFrameShare {
                frame: f.to_string(),
                share,
            })
            .collect()
    }
}

/// What the CPU did, in words: the frames most samples hold, innermost first, as
/// `(frame, share)`. With Python frames among them (the sampler puts them in place of the
/// interpreter's), the innermost Python function and two of its callers lead, then the native
/// code it was in: `91% blur  loader.py:14 ‹ Noisy.__getitem__  loader.py:20 ‹ …, in 62%
/// pocketfft::r2c [_pocketfft_umath.so]`; otherwise the innermost three frames.
pub fn headline(frames: &[(&str, f64)]) -> Option<String> {
    use crate::frames::{pretty_frame, python_parts};
    let first = frames.first()?;
    let chain = |from: usize| {
        frames[from..]
            .iter()
            .take(3)
            .map(|(f, _)| pretty_frame(f))
            .collect::<Vec<_>>()
            .join(" ‹ ")
    };
    Some(
        match frames.iter().position(|(f, _)| python_parts(f).is_some()) {
            Some(0) | None => format!("{:.0}% {}", 100.0 * first.1, chain(0)),
            Some(p) => format!(
                "{:.0}% {}, in {:.0}% {}",
                100.0 * frames[p].1,
                chain(p),
                100.0 * first.1,
                pretty_frame(first.0)
            ),
        },
    )
}

impl SiteSamples {
    /// What `pick` makes of each kept sample's innermost frame it accepts, counted over the
    /// samples, most first, with each one's share of all the kept samples.
    pub fn tally(
        &self,
        store: &Store,
        pick: impl Fn(&str) -> Option<String>,
    ) -> Vec<(String, f64)> {
        let mut by_stack: HashMap<StackId, usize> = HashMap::new();
        for &s in &self.stacks {
            *by_stack.entry(s).or_default() += 1;
        }
        let mut counts: HashMap<String, usize> = HashMap::new();
        for (s, n) in by_stack {
            let frames = store.stacks.frames(s);
            if let Some(k) = frames.iter().rev().find_map(|&f| pick(store.names.get(f))) {
                *counts.entry(k).or_default() += n;
            }
        }
        let all = self.stacks.len().max(1) as f64;
        let mut v: Vec<(String, f64)> = counts
            .into_iter()
            .map(|(k, n)| (k, n as f64 / all))
            .collect();
        v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }

    /// The share of the samples (of those kept) whose stack holds a frame `pred` accepts.
    pub fn share_holding(&self, store: &Store, pred: impl Fn(&str) -> bool) -> f64 {
        share_of(store, self.stacks.iter().map(|&s| (s, 1)), pred)
    }
}

/// What the launching thread's spans (a trace's CPU ops and Python functions) were at the
/// middle of each of a site's gaps, weighted by the gaps' time: the CPU side of a source
/// without samples.
#[derive(Clone, Debug, Default)]
pub struct SpanTime(HashMap<StackId, Ns>);

impl SpanTime {
    pub fn add(&mut self, stack: StackId, ns: Ns) {
        if stack != 0 {
            *self.0.entry(stack).or_default() += ns;
        }
    }

    pub fn merge(&mut self, o: &SpanTime) {
        for (&s, &ns) in &o.0 {
            self.add(s, ns);
        }
    }

    /// The share of that time whose span stack holds a frame `pred` accepts (0 without any).
    pub fn share_holding(&self, store: &Store, pred: impl Fn(&str) -> bool) -> f64 {
        share_of(store, self.0.iter().map(|(&s, &ns)| (s, ns)), pred)
    }
}

/// The weight of the stacks that hold a frame `pred` accepts, over all their weight.
fn share_of(
    store: &Store,
    stacks: impl Iterator<Item = (StackId, Ns)>,
    pred: impl Fn(&str) -> bool,
) -> f64 {
    // Each distinct stack is looked at once.
    let mut by: HashMap<StackId, Ns> = HashMap::new();
    for (s, w) in stacks {
        *by.entry(s).or_default() += w;
    }
    let (mut hit, mut all) = (0.0, 0.0);
    for (s, w) in by {
        all += w as f64;
        if store
            .stacks
            .frames(s)
            .iter()
            .any(|&f| pred(store.names.get(f)))
        {
            hit += w as f64;
        }
    }
    if all > 0.0 {
        hit / all
    } else {
        0.0
    }
}

/// A frame and the share of the samples that hold it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JsonFrameShare {
    pub frame: String,
    pub share: f64,
}

/// The program's own code among a site's CPU frames, the code to change where the CPU's work
/// delays the launches: the innermost Python frame of one of the program's files, where the
/// launching thread was on a CPU for at least half of the gaps. A file is the program's where
/// its path is whole: the ingest shortens packages' and the standard library's to their
/// package (`torch/nn/modules/linear.py`). A generator expression, comprehension or lambda
/// is passed over for the function that holds it. None where the CPU ran in libraries only,
/// or was mostly off it.
pub fn user_code(cpu: &JsonCpu) -> Option<&str> {
    if cpu.on_cpu < 0.5 {
        return None;
    }
    cpu.frames.iter().map(|f| f.frame.as_str()).find(|&f| {
        crate::frames::python_parts(f).is_some_and(|(file, _, function)| {
            // A whole path that `short_path` leaves whole: not a package's or the library's.
            file.starts_with('/')
                && crate::frames::display::short_path(file) == file
                // A comprehension's or lambda's code is its function's.
                && !["<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>"]
                    .iter()
                    .any(|c| function.ends_with(c))
        }) && !crate::frames::hide::is_plumbing(f)
            && !crate::frames::is_profiler_frame(f)
    })
}

/// What the CPU did during a site's gaps, for the JSON report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JsonCpu {
    pub samples: u64,
    /// The launching thread's CPU time during the gaps over their time.
    pub on_cpu: f64,
    /// The frames at least half of the samples hold, innermost (named) frame first, with the
    /// share of the samples that hold each.
    pub frames: Vec<JsonFrameShare>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_frames_most_samples_hold_innermost_first() {
        let mut st = Store::default();
        let start = st.names.intern("_start");
        let main = st.names.intern("main");
        let plan = st.names.intern("plan [libcudnn.so]");
        let (a, b) = (st.names.intern("a"), st.names.intern("b"));
        let s_start = st.stacks.intern(0, start);
        let s_main = st.stacks.intern(s_start, main);
        let s_plan = st.stacks.intern(s_main, plan);
        let s_a = st.stacks.intern(s_plan, a);
        let s_b = st.stacks.intern(s_plan, b);
        // A stack cut short at the outer end: no _start, main and plan still line up.
        let cut_plan = st.stacks.intern(0, plan);
        let cut = st.stacks.intern(cut_plan, a);
        // 10 samples: 9 in plan (4 in a, one of them cut short, 4 in b, 1 in plan itself),
        // 1 in main alone.
        let mut stacks = vec![s_a, s_a, s_a, cut];
        stacks.extend([s_b; 4]);
        stacks.extend([s_plan, s_main]);
        let shared = shared_frames(&st, &stacks);
        let names: Vec<NameId> = shared.iter().map(|x| x.0).collect();
        assert_eq!(names, vec![plan, main, start], "neither a nor b holds half");
        assert!((shared[0].1 - 0.9).abs() < 1e-9, "{shared:?}");
        assert!(
            (shared[2].1 - 0.9).abs() < 1e-9,
            "the cut stack has no _start"
        );
        let mut site = SiteSamples::default();
        site.add(&stacks, 2_000_000);
        let top = site.innermost(&st, 2);
        let names: Vec<&str> = top.iter().map(|f| f.frame.as_str()).collect();
        assert_eq!(names, ["plan [libcudnn.so]", "main"]);
        assert_eq!((site.samples, site.cpu_ns), (10, 20_000_000));
        // Half of the samples is enough.
        stacks[4] = s_a;
        assert_eq!(shared_frames(&st, &stacks)[0].0, a);
        assert!(shared_frames(&st, &[]).is_empty());
    }

    /// Half of the samples are deep in native code under `pick` (under `step`), the other half
    /// in `step` itself: `step`'s median distance from the innermost frame is 0, less than
    /// `pick`'s, yet every stack holding both has `pick` inside `step`, and so the order says.
    #[test]
    fn a_caller_some_samples_hold_alone_stays_outside_its_callee() {
        let mut st = Store::default();
        let mut chain = |names: &[&str]| {
            let mut s = 0;
            for n in names {
                let f = st.names.intern(n);
                s = st.stacks.intern(s, f);
            }
            s
        };
        let deep = chain(&[
            "main",
            "/w/a.py(30): <module>",
            "/w/a.py(25): step",
            "/w/a.py(15): Scheduler.pick",
            "builtin_sorted [python3.12]",
            "list_sort [python3.12]",
            "cmp [python3.12]",
            "lt [python3.12]",
        ]);
        let alone = chain(&["main", "/w/a.py(30): <module>", "/w/a.py(26): step"]);
        let mut stacks = vec![deep; 5];
        stacks.extend([alone; 5]);
        let shared = shared_frames(&st, &stacks);
        let names: Vec<&str> = shared.iter().map(|x| st.names.get(x.0)).collect();
        let at = |q: &str| names.iter().position(|n| n.ends_with(q)).unwrap();
        assert!(at("Scheduler.pick") < at("step"), "{names:?}");
        assert!(
            at("step") < at("<module>") && at("<module>") < at("main"),
            "{names:?}"
        );
        assert_eq!(names[0], "lt [python3.12]", "{names:?}");
    }

    #[test]
    fn the_code_to_fix_is_the_program_s_innermost_function() {
        let cpu = |on_cpu: f64, frames: &[&str]| JsonCpu {
            samples: 10,
            on_cpu,
            frames: frames
                .iter()
                .map(|f| JsonFrameShare {
                    frame: f.to_string(),
                    share: 0.9,
                })
                .collect(),
        };
        let frames = [
            "pocketfft::r2c [_pocketfft_umath.so]",
            "numpy/fft/_pocketfft.py(101): _raw_fft",
            "/w/load.py(14): blur.<locals>.<genexpr>",
            "/w/load.py(14): blur",
            "torch/utils/data/dataset.py(3): Dataset.fetch",
            "/w/load.py(40): main",
        ];
        assert_eq!(user_code(&cpu(0.9, &frames)), Some("/w/load.py(14): blur"));
        assert_eq!(user_code(&cpu(0.3, &frames)), None, "mostly off the CPU");
        assert_eq!(user_code(&cpu(0.9, &frames[..2])), None, "libraries only");
        // A package installed whole-path (not shortened) is still a library.
        let lib = [
            "/opt/venv/lib/python3.12/site-packages/x/y.py(3): f",
            "/w/a.py(9): g",
        ];
        assert_eq!(user_code(&cpu(0.9, &lib)), Some("/w/a.py(9): g"));
    }
}

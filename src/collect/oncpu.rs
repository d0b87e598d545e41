//! What the CPU did during a gap: the CPU samples (`collect::cpu`, taken from outside the
//! program) of the thread that launched the op ending the gap, taken while the GPU waited.
//!
//! For one gap, the *dominant* frame is the deepest frame that at least half of its samples
//! pass through: walking the samples' stacks from the outermost frame in, the heaviest child
//! while it holds half of them. For many gaps (a site's), each frame's share is the fraction of
//! their samples whose stack holds it.

use std::collections::HashMap;

use serde::Serialize;

use super::analysis::Gap;
use super::store::{NameId, Ns, StackId, Store};

/// The samples taken during a gap, on the thread that launched the op ending it.
pub fn gap_samples(store: &Store, g: &Gap) -> Vec<StackId> {
    let lane = &store.lanes[g.lane];
    let proc = &store.procs[lane.key.proc as usize];
    let Some(op) = lane.ops.get(g.next) else {
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
    /// Frames from the outermost down to the dominant one, and the share of the samples that
    /// pass through it.
    pub path: Vec<NameId>,
    pub share: f64,
}

/// The gap's samples, summed up; None when none were taken during it.
pub fn during(store: &Store, g: &Gap) -> Option<During> {
    let stacks = gap_samples(store, g);
    if stacks.is_empty() {
        return None;
    }
    let period = period_of(store, g);
    let (path, share) = dominant(store, &stacks);
    Some(During {
        samples: stacks.len(),
        on_cpu: (stacks.len() as f64 * period as f64 / g.dur().max(1) as f64).min(1.0),
        path,
        share,
    })
}

/// The deepest frame at least half of the samples pass through, with its path from the
/// outermost frame, and the share of the samples that hold it.
pub fn dominant(store: &Store, stacks: &[StackId]) -> (Vec<NameId>, f64) {
    let frames: Vec<Vec<NameId>> = stacks.iter().map(|&s| store.stacks.frames(s)).collect();
    let n = frames.len();
    let mut alive: Vec<usize> = (0..n).collect();
    let mut path = Vec::new();
    for depth in 0.. {
        let mut counts: HashMap<NameId, usize> = HashMap::new();
        for &i in &alive {
            if let Some(&f) = frames[i].get(depth) {
                *counts.entry(f).or_default() += 1;
            }
        }
        let Some((&f, &c)) = counts
            .iter()
            .max_by_key(|(&f, &c)| (c, std::cmp::Reverse(f)))
        else {
            break;
        };
        if 2 * c < n {
            break;
        }
        path.push(f);
        alive.retain(|&i| frames[i].get(depth) == Some(&f));
    }
    let share = if path.is_empty() {
        0.0
    } else {
        alive.len() as f64 / n.max(1) as f64
    };
    (path, share)
}

/// How often each frame appears in a set of samples (once a sample).
#[derive(Clone, Debug, Default)]
pub struct FrameShares {
    pub samples: u64,
    /// Samples × period: the CPU time they stand for.
    pub cpu_ns: Ns,
    counts: HashMap<NameId, (u64, usize)>,
}

impl FrameShares {
    /// Adds a gap's samples.
    pub fn add(&mut self, store: &Store, stacks: &[StackId], period: Ns) {
        for &s in stacks {
            self.samples += 1;
            self.cpu_ns += period;
            let frames = store.stacks.frames(s);
            let mut seen: Vec<NameId> = Vec::with_capacity(frames.len());
            for (depth, f) in frames.into_iter().enumerate() {
                if seen.contains(&f) {
                    continue;
                }
                seen.push(f);
                let e = self.counts.entry(f).or_insert((0, depth));
                e.0 += 1;
                e.1 = e.1.max(depth);
            }
        }
    }

    pub fn merge(&mut self, o: &FrameShares) {
        self.samples += o.samples;
        self.cpu_ns += o.cpu_ns;
        for (&f, &(c, d)) in &o.counts {
            let e = self.counts.entry(f).or_insert((0, d));
            e.0 += c;
            e.1 = e.1.max(d);
        }
    }

    /// The `n` innermost frames held by at least `min_share` of the samples, innermost first
    /// (by the deepest place each was seen at), with their shares.
    pub fn innermost(&self, store: &Store, n: usize, min_share: f64) -> Vec<JsonFrameShare> {
        let total = self.samples.max(1) as f64;
        let mut v: Vec<(&NameId, &(u64, usize))> = self
            .counts
            .iter()
            .filter(|(_, &(c, _))| c as f64 / total >= min_share)
            .collect();
        v.sort_by(|a, b| {
            b.1 .1
                .cmp(&a.1 .1)
                .then(b.1 .0.cmp(&a.1 .0))
                .then(a.0.cmp(b.0))
        });
        v.into_iter()
            .take(n)
            .map(|(&f, &(c, _))| JsonFrameShare {
                frame: store.names.get(f).to_string(),
                share: c as f64 / total,
            })
            .collect()
    }
}

/// A frame and the share of the samples that hold it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JsonFrameShare {
    pub frame: String,
    pub share: f64,
}

/// What the CPU did during a site's gaps, for the JSON report.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct JsonCpu {
    pub samples: u64,
    /// The launching thread's CPU time during the gaps over their time.
    pub on_cpu: f64,
    /// The innermost frames held by a tenth or more of the samples, innermost first, with
    /// their shares.
    pub frames: Vec<JsonFrameShare>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dominant_frame_is_the_deepest_half_of_the_samples_share() {
        let mut st = Store::default();
        let main = st.names.intern("main");
        let plan = st.names.intern("plan [libcudnn.so]");
        let (a, b) = (st.names.intern("a"), st.names.intern("b"));
        let s_main = st.stacks.intern(0, main);
        let s_plan = st.stacks.intern(s_main, plan);
        let s_a = st.stacks.intern(s_plan, a);
        let s_b = st.stacks.intern(s_plan, b);
        // 10 samples: 9 under plan (4 in a, 4 in b, 1 in plan itself), 1 in main alone.
        let mut stacks = vec![s_a; 4];
        stacks.extend([s_b; 4]);
        stacks.extend([s_plan, s_main]);
        let (path, share) = dominant(&st, &stacks);
        assert_eq!(path, vec![main, plan], "neither a nor b holds half");
        assert!((share - 0.9).abs() < 1e-9, "{share}");
        let mut shares = FrameShares::default();
        shares.add(&st, &stacks, 2_000_000);
        let top = shares.innermost(&st, 8, 0.1);
        let names: Vec<&str> = top.iter().map(|f| f.frame.as_str()).collect();
        assert_eq!(names, ["a", "b", "plan [libcudnn.so]", "main"]);
        assert!((top[2].share - 0.9).abs() < 1e-9);
        assert!((top[0].share - 0.4).abs() < 1e-9);
        // Half of the samples is enough.
        stacks[8] = s_a;
        assert_eq!(dominant(&st, &stacks).0, vec![main, plan, a]);
        assert_eq!(shares.cpu_ns, 20_000_000);
        assert_eq!(dominant(&st, &[]), (vec![], 0.0));
    }
}

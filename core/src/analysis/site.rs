//! A launch site (the code that launched the op after a gap) and what its gaps were like: by
//! reason, by step, in a histogram of lengths, with the CPU samples taken during them. What
//! advice, the verdicts and the patterns read of a site.

use super::gaps::{Gap, Reason};
use super::oncpu::{SiteSamples, SpanTime};
use super::threadstate::StateTime;
use crate::model::chunked::Chunked;
use crate::model::records::{NameId, Ns, StackId};

/// Where advice charges a gap: the stack of the call that launched the op after it; for a
/// launch without a stack (a C++ thread, a trace without stacks), the launching API and the
/// op's name instead (api 0 when the launch call was not seen at all).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Site {
    pub stack: StackId,
    pub api: NameId,
    pub op: NameId,
}

impl Site {
    pub fn of(g: &Gap) -> Site {
        Site::of_key(g.stack, g.api, g.op_name)
    }

    /// The site of gaps charged to launch stack `stack` (or, without one, to `api` and `op`).
    pub fn of_key(stack: StackId, api: NameId, op: NameId) -> Site {
        if stack != 0 {
            Site {
                stack,
                api: 0,
                op: 0,
            }
        } else {
            Site { stack: 0, api, op }
        }
    }
}

/// The gaps charged to one launch stack: how many, how long, why, and the ops after them.
#[derive(Clone, Debug)]
pub struct LeafAcc {
    pub gaps: u64,
    pub gap_ns: Ns,
    /// Gap time by reason, in `Reason` order.
    pub by_reason: [Ns; 5],
    /// Total duration of the ops the gaps were charged to.
    pub next_ns: Ns,
    /// Gap counts by duration: four buckets per power of two (within 25%).
    pub hist: [u32; HIST_BUCKETS],
    /// Gap time in each of those buckets.
    pub hist_ns: [Ns; HIST_BUCKETS],
    /// The first [`EXACT_GAPS`] gaps' durations, for exact typical values on small sites.
    pub exact: Vec<Ns>,
    /// Gap time in which the launching call itself ran for most of the gap (a slow launch:
    /// lazy module loading on a kernel's first launch, or the driver blocked).
    pub slow_launch_ns: Ns,
    /// With steps: per steady step (its index among the steady ones), the gap time and the gap
    /// time a launch-overhead fix can remove (each gap less [`GRAPH_GAP_NS`]).
    pub per_step: PerStep,
    /// With steps: gaps outside the steady state (warm-up, before the first or after the last
    /// step), and their time.
    pub outside: (u64, Ns),
    /// With steps: the gap time inside the steady steps, by the buckets of `hist`.
    pub steady_hist_ns: [Ns; HIST_BUCKETS],
    /// The first few distinct ops the gaps were charged to (what a site launches says which
    /// framework it is).
    pub ops: Vec<NameId>,
    /// The CPU samples of the launching threads during the gaps.
    pub cpu: SiteSamples,
    /// Those of the gaps inside the steady steps: what the CPU does every step, without the
    /// warm-up's imports and loading.
    pub cpu_steady: SiteSamples,
    /// The launching threads' spans at the gaps' middles (sources with CPU spans).
    pub cpu_spans: SpanTime,
    /// The launching threads' states through the gaps (`analysis::threadstate`),
    /// and through those inside the steady steps.
    pub states: StateTime,
    pub states_steady: StateTime,
}

/// A site's gap time in each steady step it has gaps in: the gap time and what a
/// launch-overhead fix can remove. Gaps come in time order, so a step's gaps are mostly
/// together: each run of them is one entry, added to the last one while the step stays the
/// same (a step may still hold several entries, which [`PerStep::each`] sums).
///
/// An entry is 12 bytes, (step, what a fix cannot remove, gap time), in chunks that grow
/// without copying: a capture of short steps has a third of its ops' count of them a site.
/// What a fix cannot remove is at most [`GRAPH_GAP_NS`] a gap, so it fits in 32 bits for
/// two million gaps, and a step's gap time for 4.29 s; a run that would pass either starts
/// another entry, and a gap that does not fit alone (or whose removable part is not within
/// it, none that [`LeafAcc`] adds) goes to a list of full-width entries.
#[derive(Clone, Debug, Default)]
pub struct PerStep {
    runs: Chunked<(u32, u32, u32)>,
    wide: Vec<(u32, Ns, Ns)>,
}

impl PerStep {
    pub fn add(&mut self, step: u32, gap: Ns, removable: Ns) {
        let (Ok(kept), Ok(g)) = (u32::try_from(gap - removable), u32::try_from(gap)) else {
            match self.wide.last_mut() {
                Some(e) if e.0 == step => {
                    e.1 += gap;
                    e.2 += removable;
                }
                _ => self.wide.push((step, gap, removable)),
            }
            return;
        };
        if let Some(e) = self
            .runs
            .len()
            .checked_sub(1)
            .and_then(|i| self.runs.get_mut(i))
        {
            if e.0 == step {
                if let (Some(k), Some(t)) = (e.1.checked_add(kept), e.2.checked_add(g)) {
                    e.1 = k;
                    e.2 = t;
                    return;
                }
            }
        }
        self.runs.push_back((step, kept, g));
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.runs.len() + self.wide.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Each of the first `steps` steps' figures (none: 0), summed over its entries.
    pub fn each(&self, steps: usize) -> Vec<(Ns, Ns)> {
        let mut each = vec![(0, 0); steps];
        self.add_each(&mut each);
        each
    }

    /// [`PerStep::add_each`] for one of the two figures: a step's gap time, or with
    /// `removable` what a fix would remove of it. Half the room of both, for a caller that
    /// needs one at a time.
    pub fn add_one(&self, each: &mut [Ns], removable: bool) {
        self.for_entries(|i, gap, rem| {
            if let Some(e) = each.get_mut(i) {
                *e += if removable { rem } else { gap };
            }
        });
    }

    /// Adds its entries to each step's figures in `each` (steps past its end left out): the
    /// figures of several sites together, without a list of all their entries.
    pub fn add_each(&self, each: &mut [(Ns, Ns)]) {
        self.for_entries(|i, gap, rem| {
            if let Some(e) = each.get_mut(i) {
                e.0 += gap;
                e.1 += rem;
            }
        });
    }

    /// Each entry as (step, gap time, what a fix would remove of it).
    fn for_entries(&self, mut f: impl FnMut(usize, Ns, Ns)) {
        for &(i, kept, gap) in self.runs.iter() {
            f(i as usize, gap as Ns, gap as Ns - kept as Ns);
        }
        for &(i, a, b) in &self.wide {
            f(i as usize, a, b);
        }
    }
}

/// How many distinct ops a site remembers.
pub const SITE_OPS: usize = 8;

/// A launching call that runs this long through a gap is slow in itself (launch calls take
/// microseconds): lazy module loading on a kernel's first launch, or the driver blocked.
pub const SLOW_LAUNCH_NS: Ns = 100_000;

/// How many gap durations a site keeps exactly.
pub const EXACT_GAPS: usize = 256;

/// The spacing that stays between back-to-back kernels once launch overhead is gone (replayed
/// from a CUDA graph, or fused): what a launch-overhead fix cannot remove from a gap.
pub const GRAPH_GAP_NS: Ns = 2_000;

impl Default for LeafAcc {
    fn default() -> Self {
        LeafAcc {
            gaps: 0,
            gap_ns: 0,
            by_reason: [0; 5],
            next_ns: 0,
            hist: [0; HIST_BUCKETS],
            hist_ns: [0; HIST_BUCKETS],
            exact: Vec::new(),
            slow_launch_ns: 0,
            per_step: PerStep::default(),
            outside: (0, 0),
            steady_hist_ns: [0; HIST_BUCKETS],
            ops: Vec::new(),
            cpu: Default::default(),
            cpu_steady: Default::default(),
            cpu_spans: Default::default(),
            states: Default::default(),
            states_steady: Default::default(),
        }
    }
}

impl LeafAcc {
    pub fn add(&mut self, gap: Ns, reason: Reason, next: Ns) {
        self.gaps += 1;
        self.gap_ns += gap;
        self.by_reason[reason as usize] += gap;
        self.next_ns += next.max(0);
        self.hist[bucket(gap)] += 1;
        self.hist_ns[bucket(gap)] += gap;
        if self.exact.len() < EXACT_GAPS {
            self.exact.push(gap);
        }
    }

    /// Adds another site's figures to these, all but its per-step list: that holds an entry a
    /// step (a third of a million on a long capture, for each site), so sites read together
    /// sum their own lists ([`PerStep::add_each`]) rather than copy them into one.
    pub fn merge(&mut self, o: &LeafAcc) {
        self.gaps += o.gaps;
        self.gap_ns += o.gap_ns;
        for i in 0..5 {
            self.by_reason[i] += o.by_reason[i];
        }
        self.next_ns += o.next_ns;
        for (a, b) in self.hist.iter_mut().zip(o.hist.iter()) {
            *a += b;
        }
        for (a, b) in self.hist_ns.iter_mut().zip(o.hist_ns.iter()) {
            *a += b;
        }
        let room = EXACT_GAPS.saturating_sub(self.exact.len());
        self.exact.extend(o.exact.iter().take(room));
        self.slow_launch_ns += o.slow_launch_ns;
        self.outside.0 += o.outside.0;
        self.outside.1 += o.outside.1;
        for (a, b) in self.steady_hist_ns.iter_mut().zip(o.steady_hist_ns.iter()) {
            *a += b;
        }
        for &op in &o.ops {
            self.note_op(op);
        }
        self.cpu.merge(&o.cpu);
        self.cpu_steady.merge(&o.cpu_steady);
        self.cpu_spans.merge(&o.cpu_spans);
        self.states.merge(&o.states);
        self.states_steady.merge(&o.states_steady);
    }

    /// The threads' states that say what the site does every step, as [`LeafAcc::steady_cpu`].
    pub fn steady_states(&self) -> &StateTime {
        if self.states_steady.gap_ns > 0 {
            &self.states_steady
        } else {
            &self.states
        }
    }

    /// The CPU samples that say what the site does every step: its steady gaps' where there
    /// are any (a warm-up's imports, in one long one-off gap, would outweigh them), else all.
    pub fn steady_cpu(&self) -> &SiteSamples {
        if self.cpu_steady.samples > 0 {
            &self.cpu_steady
        } else {
            &self.cpu
        }
    }

    /// Remembers an op the gaps were charged to (the first [`SITE_OPS`] distinct ones).
    pub fn note_op(&mut self, op: NameId) {
        if self.ops.len() < SITE_OPS && !self.ops.contains(&op) {
            self.ops.push(op);
        }
    }

    /// Where the steady state's gap time is: the gap length at which half of it is in gaps at
    /// least that long (to within a bucket), 0 without steps. A site with many short gaps and
    /// one long one a step has its time, and so its cause, in the long ones.
    pub fn steady_weighted_gap(&self) -> Ns {
        let total: Ns = self.steady_hist_ns.iter().sum();
        if total == 0 {
            return 0;
        }
        let mut seen = 0;
        for i in (0..HIST_BUCKETS).rev() {
            seen += self.steady_hist_ns[i];
            if 2 * seen >= total {
                let (lo, width) = bucket_range(i);
                return (lo + width / 2) as Ns;
            }
        }
        0
    }

    /// Whether every gap's duration is known exactly (not only its bucket).
    pub fn is_exact(&self) -> bool {
        self.exact.len() as u64 == self.gaps
    }

    /// Gaps of at least `min` (to within a bucket: those in buckets that start at `min` or
    /// later): how many, and their time.
    pub fn at_least(&self, min: Ns) -> (u64, Ns) {
        let mut n = 0u64;
        let mut ns = 0;
        for i in (0..HIST_BUCKETS).rev() {
            if (bucket_range(i).0 as Ns) < min {
                break;
            }
            n += self.hist[i] as u64;
            ns += self.hist_ns[i];
        }
        (n, ns)
    }

    /// The median gap: exact while every gap is known (the lower middle of an even count),
    /// else to within its bucket (the bucket's middle).
    pub fn typical_gap(&self) -> Ns {
        if self.is_exact() && !self.exact.is_empty() {
            let mut v = self.exact.clone();
            let mid = (v.len() - 1) / 2;
            return *v.select_nth_unstable(mid).1;
        }
        let half = self.gaps.div_ceil(2);
        let mut seen = 0u64;
        for (i, &n) in self.hist.iter().enumerate() {
            seen += n as u64;
            if n > 0 && seen >= half {
                let (lo, width) = bucket_range(i);
                return (lo + width / 2) as Ns;
            }
        }
        0
    }
}

const HIST_BUCKETS: usize = 4 * 48;

/// Bucket of a duration: the power of two below it and the next two bits.
pub(super) fn bucket(ns: Ns) -> usize {
    let v = ns.max(1) as u64;
    let k = 63 - v.leading_zeros() as usize;
    let sub = if k >= 2 {
        ((v >> (k - 2)) & 3) as usize
    } else {
        0
    };
    (k * 4 + sub).min(HIST_BUCKETS - 1)
}

/// First value and width of a bucket.
fn bucket_range(i: usize) -> (u64, u64) {
    let (k, sub) = (i / 4, (i % 4) as u64);
    if k < 2 {
        (1 << k, 1 << k)
    } else {
        ((4 + sub) << (k - 2), 1 << (k - 2))
    }
}

//! A window's summary: every gap of the window charged to its launch (the call tree, the
//! sites, the top gaps, the histograms, the idle by category and reason), per step where the
//! steps are known. What the report, the panes and advice are made of.

use rustc_hash::FxHashMap as HashMap;

use super::gaps::{
    device_gaps, device_idle, lane_between, Basis, Between, Bucket, Category, Config, Gap, Reason,
};

use super::site::{bucket, LeafAcc, Site, GRAPH_GAP_NS, SLOW_LAUNCH_NS};
use super::steps::Steps;
use super::tree::{CallTree, RankShare};
use crate::model::records::{NameId, Ns, StackId};
use crate::model::store::Store;
use crate::model::window::Window;

/// Aggregates for a window.
#[derive(Clone, Debug)]
pub struct Summary {
    pub lo: Ns,
    pub hi: Ns,
    pub gpu_ops: u64,
    pub kernels: u64,
    /// Per-device union busy time, summed over devices.
    pub busy_ns: Ns,
    pub kernel_ns: Ns,
    /// Time no stream of a device ran anything, summed over devices.
    pub device_idle_ns: Ns,
    /// Each stream's gaps by HTA's category, those of length 0 included.
    pub idle: [Bucket; 3],
    /// Ops that started before the work before them on their stream had ended, and by how
    /// much in all (counted apart from the gaps; see [`Between::Overlap`]).
    pub overlapping: Bucket,
    pub reasons: HashMap<Reason, Bucket>,
    pub tree: CallTree,
    /// Longest gaps, longest first (ties: earlier first).
    pub top_gaps: Vec<Gap>,
    /// Gaps long enough to be candidates for `top_gaps`.
    pub top_eligible: u64,
    pub gap_hist: hdrhistogram::Histogram<u64>,
    pub kernel_hist: hdrhistogram::Histogram<u64>,
    /// The longest gap and op exactly (the histograms keep 3 significant digits).
    pub gap_max_ns: Ns,
    pub kernel_max_ns: Ns,
    /// Per (stack, api, op) leaf: (gaps, gap_ns).
    pub stacks: HashMap<(StackId, NameId, NameId), (u64, Ns)>,
    /// Per (stack, api, op) leaf, the ranks its gaps came from, sorted, with each rank's
    /// gaps in the tree (only in a capture of several ranks: so that a line of one rank says
    /// which, and the UI's tree splits a leaf by rank where ranks differ).
    pub stack_ranks: HashMap<(StackId, NameId, NameId), Vec<RankShare>>,
    /// How many distinct ranks the capture's processes have.
    pub ranks: usize,
    /// Per launch site: what its gaps were like (for advice).
    pub leaves: HashMap<Site, LeafAcc>,
    /// The gaps the tree, the top gaps and advice are made of, and their time by cause.
    pub basis: Basis,
    pub charged: [Bucket; 3],
    /// Gaps shorter than this are left out of the tree and the top gaps.
    pub min_ns: Ns,
    pub top_n: usize,
    /// The steady steps the per-step figures are over (0: no steps known).
    pub steady_steps: u32,
    /// The tree holds the CPU samples taken during the gaps.
    pub cpu_tree: bool,
}

impl Summary {
    /// The ranks the gaps of a leaf came from, sorted.
    pub fn ranks_of(&self, key: &(StackId, NameId, NameId)) -> Vec<i32> {
        let v = self.stack_ranks.get(key).map_or(&[][..], |v| v.as_slice());
        v.iter().map(|r| r.rank).collect()
    }

    pub fn idle(&self, c: Category) -> Bucket {
        self.idle[c as usize]
    }
    pub fn total_gap_ns(&self) -> Ns {
        self.idle.iter().map(|b| b.total_ns).sum()
    }
    /// The time of the gaps charged to launches on the summary's basis (what shares are of).
    pub fn charged_ns(&self) -> Ns {
        self.charged.iter().map(|b| b.total_ns).sum()
    }
}

fn hist() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, 1_000_000_000_000, 3).expect("valid bounds")
}

/// Computes everything the report and the panes show for a window.
pub fn summarize(store: &Store, w: Window, cfg: &Config, top_n: usize) -> Summary {
    summarize_top(store, w, cfg, top_n, 0)
}

/// A gap ordered for the top-N heap: longer first, then earlier, then by lane and op.
struct Ranked(Gap);

impl Ranked {
    fn key(&self) -> (Ns, std::cmp::Reverse<Ns>, usize, usize) {
        (
            self.0.dur(),
            std::cmp::Reverse(self.0.start),
            self.0.lane,
            self.0.next,
        )
    }
}

impl PartialEq for Ranked {
    fn eq(&self, o: &Self) -> bool {
        self.key() == o.key()
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Ranked {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.key().cmp(&o.key())
    }
}

type TopGaps = std::collections::BinaryHeap<std::cmp::Reverse<Ranked>>;

/// The steps gaps are placed in, their steady range, and where the last gap was found (gaps
/// come in time order, so the next is mostly in the same step or the one after).
struct StepCursor<'a> {
    steps: &'a Steps,
    range: std::ops::Range<usize>,
    at: usize,
}

/// Charges a gap of the summary's basis to its launch: the call tree, the stacks, advice's
/// per-site accumulators and the top gaps.
fn charge(
    s: &mut Summary,
    top: &mut TopGaps,
    store: &Store,
    g: Gap,
    steady: Option<&mut StepCursor>,
) {
    let d = g.dur();
    let c = &mut s.charged[g.category as usize];
    c.count += 1;
    c.total_ns += d;
    if d >= s.min_ns {
        s.tree.add_gap(store, &g);
    }
    // What the launching thread did meanwhile, where the program was sampled.
    let samples = if store.cpu_samples > 0 {
        super::oncpu::gap_samples(store, &g)
    } else {
        Vec::new()
    };
    if s.cpu_tree && d >= s.min_ns && !samples.is_empty() {
        s.tree.add_cpu(store, &g, &samples);
    }
    let e = s.stacks.entry((g.stack, g.api, g.op_name)).or_default();
    e.0 += 1;
    e.1 += d;
    if s.ranks > 1 {
        let rank = store.procs[store.lanes[g.lane].key.proc as usize].rank;
        let v = s
            .stack_ranks
            .entry((g.stack, g.api, g.op_name))
            .or_default();
        let i = match v.binary_search_by_key(&rank, |r| r.rank) {
            Ok(i) => i,
            Err(i) => {
                v.insert(i, RankShare::of(rank));
                i
            }
        };
        if d >= s.min_ns {
            v[i].gaps += 1;
            v[i].gap_ns += d;
        }
    }
    let op = store.lanes[g.lane].op(g.next);
    let leaf = s.leaves.entry(Site::of(&g)).or_default();
    leaf.add(d, g.reason, op.dur());
    leaf.note_op(g.op_name);
    let period = if samples.is_empty() {
        0
    } else {
        let period = super::oncpu::period_of(store, &g);
        leaf.cpu.add(&samples, period);
        period
    };
    let states = super::threadstate::gap_states(store, &g).unwrap_or_default();
    leaf.states.add(&states);
    // Only where the CPU was on the critical path: the launch came after the gap began.
    if g.category == Category::HostWait {
        leaf.cpu_spans.add(store.stacks.folded(g.cpu_stack), d);
    }
    // The launching call itself ran through most of the gap, far longer than a launch takes.
    let proc = &store.procs[store.lanes[g.lane].key.proc as usize];
    if let Some(a) = proc.api_by_corr(op.corr) {
        let inside = a.end.min(g.end) - a.start.max(g.start);
        if 2 * inside >= d && inside >= SLOW_LAUNCH_NS {
            leaf.slow_launch_ns += d;
        }
    }
    if let Some(StepCursor { steps, range, at }) = steady {
        let range = range.clone();
        match steps
            .step_of_from(g.start, at)
            .filter(|i| range.contains(i))
        {
            Some(i) => {
                leaf.per_step
                    .add((i - range.start) as u32, d, (d - GRAPH_GAP_NS).max(0));
                leaf.steady_hist_ns[bucket(d)] += d;
                if !samples.is_empty() {
                    leaf.cpu_steady.add(&samples, period);
                }
                leaf.states_steady.add(&states);
            }
            None => {
                leaf.outside.0 += 1;
                leaf.outside.1 += d;
            }
        }
    }
    if d >= s.min_ns {
        s.top_eligible += 1;
        if s.top_n > 0 {
            let r = std::cmp::Reverse(Ranked(g));
            if top.len() < s.top_n {
                top.push(r);
            } else if top.peek().is_some_and(|m| r < *m) {
                top.pop();
                top.push(r);
            }
        }
    }
}

/// [`summarize`], keeping in `top_gaps` the `top_n` longest gaps of at least `min_ns` (and
/// counting all such gaps in `top_eligible`). The call tree's gap time counts only those gaps
/// too (its launches and kernel time count every op); the window's totals count every gap.
pub fn summarize_top(store: &Store, w: Window, cfg: &Config, top_n: usize, min_ns: Ns) -> Summary {
    summarize_steps(store, w, cfg, top_n, min_ns, None)
}

/// [`summarize_top`], with each charged gap also placed in its step: the sites' per-step
/// figures are over the steady steps, and what falls outside them is counted apart.
pub fn summarize_steps(
    store: &Store,
    w: Window,
    cfg: &Config,
    top_n: usize,
    min_ns: Ns,
    steps: Option<&Steps>,
) -> Summary {
    let given = || steps.map(std::borrow::Cow::Borrowed);
    summarize_finding(store, w, cfg, top_n, min_ns, given).0
}

/// [`summarize_steps`] with the steps `find` finds (on a second thread, beside the ops' part
/// of the summary, for a large store), which it returns.
pub fn summarize_finding<'a>(
    store: &Store,
    w: Window,
    cfg: &Config,
    top_n: usize,
    min_ns: Ns,
    find: impl FnOnce() -> Option<std::borrow::Cow<'a, Steps>> + Send,
) -> (Summary, Option<std::borrow::Cow<'a, Steps>>) {
    let (lo, hi) = w.clipped(store);
    let mut s = Summary::empty(lo, hi, cfg, top_n, min_ns);
    s.ranks = store.rank_count();
    let win = Window::new(lo, hi);
    let mut top = TopGaps::default();
    // On the device basis the streams' own gaps make only the breakdown: found in a summary
    // of its own (the same figures, found in the same order, as in turn).
    let device = cfg.basis == Basis::Device;
    let streams = || {
        let mut alone = Summary::empty(lo, hi, cfg, top_n, min_ns);
        let mut b = Breakdown(&mut alone);
        for lane in 0..store.lanes.len() {
            lane_between(store, lane, win, cfg, |x| {
                b.add(x);
            });
        }
        alone
    };
    // Each of those, and the steps, on a thread of its own for a large store.
    let apart = device && store.op_count() >= PARALLEL_OPS;
    let (steps, streams) = std::thread::scope(|scope| {
        let finder = if apart {
            Ok(scope.spawn(find))
        } else {
            Err(find)
        };
        let side = if apart {
            Ok(scope.spawn(streams))
        } else {
            Err(streams)
        };
        if device {
            summarize_lanes(store, win, cfg, &mut s, &mut top, None);
        }
        let steps = match finder {
            Ok(h) => h.join().expect("steps thread"),
            Err(find) => find(),
        };
        {
            let mut steady = steps.as_deref().map(|st| StepCursor {
                steps: st,
                range: st.steady(),
                at: 0,
            });
            s.steady_steps = steady.as_ref().map_or(0, |c| c.range.len() as u32);
            if device {
                for (_, lanes) in store.devices() {
                    device_gaps(store, &lanes, win, cfg, |g| {
                        charge(&mut s, &mut top, store, g, steady.as_mut())
                    });
                }
            } else {
                summarize_lanes(store, win, cfg, &mut s, &mut top, Some(steady.as_mut()));
            }
        }
        let streams = device.then(|| match side {
            Ok(h) => h.join().expect("breakdown thread"),
            Err(streams) => streams(),
        });
        (steps, streams)
    });
    if let Some(b) = streams {
        s.idle = b.idle;
        s.overlapping = b.overlapping;
        s.reasons = b.reasons;
        s.gap_hist = b.gap_hist;
        s.gap_max_ns = b.gap_max_ns;
    }
    // Ascending order of Reverse is descending order of gaps: longest first.
    s.top_gaps = top.into_sorted_vec().into_iter().map(|r| r.0 .0).collect();
    for (_, lanes) in store.devices() {
        let mut idle = 0;
        device_idle(store, &lanes, lo, hi, |a, b| idle += b - a);
        s.device_idle_ns += idle;
        s.busy_ns += (hi - lo) - idle;
    }
    (s, steps)
}

/// Ops from which a summary finds the streams' gaps on a second thread.
const PARALLEL_OPS: usize = 100_000;

/// The streams' gaps by category and reason (those of length 0 included), their lengths and
/// the overlaps, added to a summary.
struct Breakdown<'a>(&'a mut Summary);

impl Breakdown<'_> {
    /// Counts what lies before an op; the gap, if it holds time to charge.
    fn add(&mut self, b: Between) -> Option<Gap> {
        let s = &mut *self.0;
        let g = match b {
            Between::Gap(g) => g,
            Between::Overlap { ns, .. } => {
                s.overlapping.count += 1;
                s.overlapping.total_ns += ns;
                return None;
            }
        };
        // A gap of length 0 counts in the breakdown, as HTA counts it, and nowhere else:
        // it holds no time to charge to a launch, and would pull percentiles to 0.
        let d = g.dur();
        let b = &mut s.idle[g.category as usize];
        b.count += 1;
        b.total_ns += d;
        let r = s.reasons.entry(g.reason).or_default();
        r.count += 1;
        r.total_ns += d;
        if d == 0 {
            return None;
        }
        let _ = s.gap_hist.record(d as u64);
        s.gap_max_ns = s.gap_max_ns.max(d);
        Some(g)
    }
}

/// [`summarize_steps`]'s lanes: each one's ops, and with `stream` (the stream basis, with its
/// steady steps) its gaps, breakdown and all.
fn summarize_lanes(
    store: &Store,
    win: Window,
    cfg: &Config,
    s: &mut Summary,
    top: &mut TopGaps,
    mut stream: Option<Option<&mut StepCursor>>,
) {
    let (lo, hi) = (win.lo(), win.hi());
    for lane in 0..store.lanes.len() {
        let l = &store.lanes[lane];
        // Ops overlapping the window.
        let a = l.lower_bound(lo).saturating_sub(1);
        let b = l.lower_bound(hi);
        let proc = &store.procs[l.key.proc as usize];
        for op in l.range(a..b) {
            let clip = op.end.min(hi) - op.start.max(lo);
            if clip < 0 || (clip == 0 && op.start < lo) {
                continue;
            }
            s.gpu_ops += 1;
            if op.kind == crate::model::records::OpKind::Kernel {
                s.kernels += 1;
                s.kernel_ns += clip;
                let _ = s.kernel_hist.record(op.dur().max(1) as u64);
                s.kernel_max_ns = s.kernel_max_ns.max(op.dur());
            }
            let api = proc.api_by_corr(op.corr);
            let kernel_clip = if op.kind == crate::model::records::OpKind::Kernel {
                clip
            } else {
                0
            };
            s.tree.add_op(
                store,
                api.map(|a| a.stack).unwrap_or(0),
                api.map(|a| a.name).unwrap_or(0),
                &op,
                kernel_clip,
            );
        }
        if let Some(steady) = &mut stream {
            lane_between(store, lane, win, cfg, |x| {
                if let Some(g) = Breakdown(s).add(x) {
                    charge(s, top, store, g, steady.as_deref_mut());
                }
            });
        }
    }
}

impl Summary {
    /// A summary of `[lo, hi)` with nothing in it yet.
    fn empty(lo: Ns, hi: Ns, cfg: &Config, top_n: usize, min_ns: Ns) -> Summary {
        Summary {
            lo,
            hi,
            gpu_ops: 0,
            kernels: 0,
            busy_ns: 0,
            kernel_ns: 0,
            device_idle_ns: 0,
            idle: [Bucket::default(); 3],
            overlapping: Bucket::default(),
            reasons: HashMap::default(),
            tree: CallTree::default(),
            top_gaps: Vec::new(),
            top_eligible: 0,
            gap_hist: hist(),
            kernel_hist: hist(),
            gap_max_ns: 0,
            kernel_max_ns: 0,
            stacks: HashMap::default(),
            stack_ranks: HashMap::default(),
            ranks: 0,
            leaves: HashMap::default(),
            basis: cfg.basis,
            charged: [Bucket::default(); 3],
            min_ns,
            top_n,
            steady_steps: 0,
            cpu_tree: cfg.cpu_tree,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::gaps::{classify, lane_gaps};
    use crate::analysis::site::PerStep;
    use crate::model::records::ApiKind;
    use crate::model::records::{ApiCall, GpuOp, LaneKey, OpKind};

    /// Two kernels with a gap of 100 between them, the second launched at 101 after a sync of
    /// the same thread that ran from `sync_from` to 100.
    fn after_sync(sync_from: Ns) -> Gap {
        let mut st = Store::default();
        let p = st.add_process(1, -1, "t");
        let k = st.names.intern("k");
        let lane = st.lane_id(LaneKey {
            proc: p,
            device: 0,
            stream: 7,
        });
        st.add_op(lane, GpuOp::new(0, 10, OpKind::Kernel, k, 1));
        st.add_op(lane, GpuOp::new(110, 120, OpKind::Kernel, k, 3));
        let call = |start, end, corr, kind| ApiCall {
            start,
            end,
            corr,
            tid: 9,
            name: k,
            stack: 0,
            kind,
        };
        st.add_api(p, call(-5, -1, 1, ApiKind::Launch));
        st.add_api(p, call(sync_from, 100, 2, ApiKind::Sync));
        st.add_api(p, call(101, 105, 3, ApiKind::Launch));
        st.finish_bulk();
        classify(&st, lane, 0, 1, &Config::default()).unwrap()
    }

    #[test]
    fn per_step_sums_a_step_seen_in_several_runs() {
        // Two devices' gaps come one device after the other: step 1 is met twice.
        let mut p = PerStep::default();
        p.add(0, 10, 8);
        p.add(1, 5, 3);
        p.add(1, 7, 5);
        p.add(0, 1, 0);
        p.add(1, 2, 0);
        assert_eq!(p.len(), 4, "a run of one step's gaps is one entry");
        // Another site's list, added to the same steps' figures (as advice reads a function's
        // sites); step 9 lies past the steps asked for and is left out.
        let mut q = PerStep::default();
        q.add(2, 4, 2);
        q.add(9, 100, 100);
        let mut each = p.each(3);
        assert_eq!(each, vec![(11, 8), (14, 8), (0, 0)]);
        q.add_each(&mut each);
        assert_eq!(each, vec![(11, 8), (14, 8), (4, 2)]);
    }

    #[test]
    fn per_step_keeps_exact_sums_past_its_narrow_entries() {
        // What a fix cannot remove passes 32 bits in one step's run (a new entry), and a gap
        // whose removable part is larger than itself does not fit at all (the wide list).
        let mut p = PerStep::default();
        let big = u32::MAX as Ns;
        p.add(0, big, 0);
        p.add(0, 10, 0);
        p.add(0, 5, 9);
        p.add(1, 3_000, 1_000);
        p.add(1, big, big - 2_000);
        p.add(2, big + 1, big - 1_999);
        assert_eq!(p.len(), 6);
        assert_eq!(
            p.each(3),
            vec![
                (big + 15, 9),
                (big + 3_000, big - 1_000),
                (big + 1, big - 1_999)
            ]
        );
    }

    /// One stream: a [0,10], b [10,20] (starts as a ends), c [15,30] (starts 5 before b ends),
    /// d [40,50]; then e [60,70] and f [72,80], both replayed by one cudaGraphLaunch (no graph
    /// id). Every call is made long before its op.
    #[test]
    fn zero_length_gaps_overlaps_and_graph_replays() {
        let mut st = Store::default();
        let p = st.add_process(1, -1, "t");
        let k = st.names.intern("k");
        let graph = st.names.intern("cudaGraphLaunch");
        let lane = st.lane_id(LaneKey {
            proc: p,
            device: 0,
            stream: 7,
        });
        for (s, e, corr) in [
            (0, 10, 1),
            (10, 20, 2),
            (15, 30, 3),
            (40, 50, 4),
            (60, 70, 5),
            (72, 80, 5),
        ] {
            st.add_op(lane, GpuOp::new(s, e, OpKind::Kernel, k, corr));
        }
        for corr in 1..=5 {
            let (name, kind) = if corr == 5 {
                (graph, ApiKind::GraphLaunch)
            } else {
                (k, ApiKind::Launch)
            };
            st.add_api(
                p,
                ApiCall {
                    start: -100 + corr as Ns,
                    end: -99 + corr as Ns,
                    corr,
                    tid: 1,
                    name,
                    stack: 0,
                    kind,
                },
            );
        }
        let cfg = Config::default();
        let mut seen = Vec::new();
        lane_between(&st, lane, Window::all(), &cfg, |b| {
            seen.push(match b {
                Between::Gap(g) => format!("gap {} {:?} {:?}", g.dur(), g.category, g.reason),
                Between::Overlap { next, ns } => format!("overlap {next} {ns}"),
            })
        });
        assert_eq!(
            seen,
            [
                "gap 0 KernelWait Launch",
                "overlap 2 5",
                "gap 10 KernelWait Launch",
                "gap 10 KernelWait Launch",
                "gap 2 KernelWait Graph",
            ]
        );
        // The breakdown counts the gap of length 0 and not the overlap; lane_gaps (the UI's,
        // the export's) leaves out both.
        let s = summarize(&st, Window::all(), &cfg, 10);
        assert_eq!(s.idle(Category::KernelWait).count, 4);
        assert_eq!(s.idle(Category::KernelWait).total_ns, 22);
        assert_eq!((s.overlapping.count, s.overlapping.total_ns), (1, 5));
        assert_eq!(s.reasons[&Reason::Graph].count, 1);
        let mut n = 0;
        lane_gaps(&st, lane, Window::all(), &cfg, |_| n += 1);
        assert_eq!(n, 3);
    }

    #[test]
    fn a_sync_explains_a_gap_only_when_it_blocked_half_of_it() {
        // .item() on a busy GPU: the thread blocked from 0, the launch came right after.
        assert_eq!(after_sync(0).reason, Reason::Sync);
        assert_eq!(after_sync(50).reason, Reason::Sync, "exactly half");
        // A short sync, then CPU work: the work's gap.
        let g = after_sync(95);
        assert_eq!((g.category, g.reason), (Category::HostWait, Reason::Launch));
    }
}

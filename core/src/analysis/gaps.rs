//! Gap analysis over a store and a time window.
//!
//! Per stream, with Holistic Trace Analysis' definitions: a gap is the idle time before a GPU op
//! on its stream and is charged to that op. It is `host_wait` when the op's launching call began
//! after the previous op on the stream ended, `kernel_wait` when it is not and is shorter than
//! the threshold (30 µs), `other` otherwise. Beyond HTA, each gap gets a reason where the trace
//! shows one (the host was blocked in a sync, a cross-stream wait, a CUDA graph) and two stacks:
//! the launch stack of the op that ends it and what the CPU was doing during it.
//!
//! Per device, the idle time is the time no stream of the device runs anything.

use serde::Serialize;

use crate::model::records::{ApiKind, GpuOp, NameId, Ns, StackId};
use crate::model::store::Store;
use crate::model::window::Window;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    HostWait,
    KernelWait,
    Other,
}

impl Category {
    pub const ALL: [Category; 3] = [Category::HostWait, Category::KernelWait, Category::Other];
    pub fn as_str(self) -> &'static str {
        match self {
            Category::HostWait => "host_wait",
            Category::KernelWait => "kernel_wait",
            Category::Other => "other",
        }
    }
}

/// Why a gap happened, where the trace shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The host was busy before launching (Python, framework, launch overhead).
    Launch,
    /// The launching thread was blocked in a synchronizing call that returned during the gap.
    Sync,
    /// A cross-stream or event wait preceded the launch.
    EventWait,
    /// Inside a CUDA graph replay: no host launch between the two ops.
    Graph,
    /// The op's launching call is not in the trace.
    Unknown,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Launch => "launch",
            Reason::Sync => "sync",
            Reason::EventWait => "event_wait",
            Reason::Graph => "graph",
            Reason::Unknown => "unknown",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Gaps shorter than this that are not host_wait are kernel_wait.
    pub kernel_wait_ns: Ns,
    /// Which gaps the call tree, the top gaps and the advice are made of.
    pub basis: Basis,
    /// The call tree shows, under each launch, the CPU samples taken during its gaps.
    pub cpu_tree: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            kernel_wait_ns: 30_000,
            basis: Basis::Device,
            cpu_tree: false,
        }
    }
}

/// What counts as a gap for the call tree, the top gaps and the advice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// An interval in which no stream of the device runs anything, charged to the op that ends
    /// it (the first to start after it, on any stream): idle that a fix can turn into work.
    #[default]
    Device,
    /// Each stream's own idle before each of its ops, as HTA counts it: on a device with a busy
    /// stream beside it, much of it is not idle at all.
    Stream,
}

impl Basis {
    pub fn as_str(self) -> &'static str {
        match self {
            Basis::Device => "device",
            Basis::Stream => "stream",
        }
    }
}

/// One idle interval on one stream, charged to the op that ends it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gap {
    pub lane: usize,
    /// Start and end, clipped to the window.
    pub start: Ns,
    pub end: Ns,
    /// The op before the gap (lane and index: on another stream for a device gap) and the
    /// index in `lane` of the op after it, which it is charged to.
    pub prev_lane: usize,
    pub prev: usize,
    pub next: usize,
    pub category: Category,
    pub reason: Reason,
    /// Stack of the launching call (0 if unknown), its API name and the op's name.
    pub stack: StackId,
    pub api: NameId,
    pub op_name: NameId,
    /// What the launching thread was doing at the gap's midpoint (0 if unknown).
    pub cpu_stack: StackId,
    /// Launch latency: API start to op start (ns), -1 if unknown.
    pub launch_latency: Ns,
}

impl Gap {
    pub fn dur(&self) -> Ns {
        self.end - self.start
    }

    /// The gap whole, from the end of the op before it to the start of the op after it, where
    /// `start` and `end` are clipped to the window it was found in.
    pub fn whole(&self, store: &Store) -> (Ns, Ns) {
        let end = |l: usize, i: usize, f: fn(GpuOp) -> Ns| {
            store.lanes.get(l).and_then(|l| l.get(i)).map(f)
        };
        (
            end(self.prev_lane, self.prev, |o| o.end)
                .unwrap_or(self.start)
                .min(self.start),
            end(self.lane, self.next, |o| o.start)
                .unwrap_or(self.end)
                .max(self.end),
        )
    }
}

/// Classifies the gap before `lane.op(next)`, given the previous op. `None` if no gap.
pub fn classify(store: &Store, lane: usize, prev: usize, next: usize, cfg: &Config) -> Option<Gap> {
    let from = store.lanes[lane].op(prev).end;
    classify_from(store, lane, (lane, prev), next, from, cfg)
}

/// Classifies the idle time from `from` to the start of `lane.op(next)`, which follows the op
/// `prev` (a lane and an index: the same lane for a stream's gap, any lane of the device for a
/// device's). `None` if the op starts at or before `from`.
pub fn classify_from(
    store: &Store,
    lane: usize,
    prev: (usize, usize),
    next: usize,
    from: Ns,
    cfg: &Config,
) -> Option<Gap> {
    if store.lanes[lane].op(next).start <= from {
        return None;
    }
    Some(classify_at(store, lane, prev, next, from, cfg))
}

/// Classifies the interval from `from` to the start of `lane.op(next)`, which may be empty:
/// an op that starts exactly when the one before it ended follows a gap of length 0, which HTA
/// counts (as kernel_wait, unless its launch began after the previous op ended).
fn classify_at(
    store: &Store,
    lane: usize,
    prev: (usize, usize),
    next: usize,
    from: Ns,
    cfg: &Config,
) -> Gap {
    let n: &GpuOp = &store.lanes[lane].op(next);
    let p: &GpuOp = &store.lanes[prev.0].op(prev.1);
    let proc = &store.procs[store.lanes[lane].key.proc as usize];
    let api = proc.api_by_corr(n.corr);
    let dur = n.start - from;
    let (category, mut reason) = match api {
        Some(a) if a.start > from => (Category::HostWait, Reason::Launch),
        Some(_) if dur < cfg.kernel_wait_ns => (Category::KernelWait, Reason::Launch),
        Some(_) => (Category::Other, Reason::Launch),
        None if dur < cfg.kernel_wait_ns => (Category::KernelWait, Reason::Unknown),
        None => (Category::Other, Reason::Unknown),
    };
    let mut cpu_stack = 0;
    if let Some(a) = api {
        // Inside a replay: the op before it belongs to the same graph, by its id or (traces
        // without graph ids) by being replayed from the same cudaGraphLaunch call.
        let same_graph = (n.graph != 0 && p.graph == n.graph) || p.corr == n.corr;
        if a.kind == ApiKind::GraphLaunch && same_graph {
            reason = Reason::Graph;
        } else if category == Category::HostWait
            && proc
                .blocking_in(a.tid, from, a.start, ApiKind::Sync)
                // The wait explains the gap only when it was long enough to: removing a sync
                // lets the CPU run ahead by the time it blocked, no more. A short sync
                // followed by long CPU work is that work's gap.
                .is_some_and(|b| 2 * (b.end - b.start) >= dur)
        {
            reason = Reason::Sync;
        } else if category != Category::HostWait {
            let prev_launch = proc.api_by_corr(p.corr).map(|x| x.start).unwrap_or(p.start);
            if proc
                .blocking_in(a.tid, prev_launch, a.start, ApiKind::Wait)
                .is_some()
            {
                reason = Reason::EventWait;
            }
        }
        cpu_stack = proc.span_stack_at(a.tid, from + dur / 2);
    } else if n.graph != 0 && p.graph == n.graph {
        reason = Reason::Graph;
    }
    Gap {
        lane,
        start: from,
        end: n.start,
        prev_lane: prev.0,
        prev: prev.1,
        next,
        category,
        reason,
        stack: api.map(|a| a.stack).unwrap_or(0),
        api: api.map(|a| a.name).unwrap_or(0),
        op_name: n.name,
        cpu_stack,
        launch_latency: api.map(|a| n.start - a.start).unwrap_or(-1),
    }
}

/// The gap that ends at `lane.op(next)` on the given basis: on its stream, or on its device
/// (from the moment no stream of the device ran anything). `None` if there is none.
pub fn gap_ending_at(store: &Store, lane: usize, next: usize, cfg: &Config) -> Option<Gap> {
    if cfg.basis == Basis::Stream {
        return (next > 0)
            .then(|| classify(store, lane, next - 1, next, cfg))
            .flatten();
    }
    let t = store.lanes[lane].get(next)?.start;
    let key = store.lanes[lane].key;
    // The op that ended last before `t` on any stream of the device; ops of one stream never
    // overlap, so on each stream it can only be the last op to start before `t`.
    let mut prev: Option<(Ns, usize, usize)> = None;
    for (l, other) in store.lanes.iter().enumerate() {
        if other.key.proc != key.proc || other.key.device != key.device {
            continue;
        }
        let i = other.lower_bound(t);
        if i == 0 {
            continue;
        }
        let e = other.op(i - 1).end;
        if prev.is_none_or(|(pe, ..)| e > pe) {
            prev = Some((e, l, i - 1));
        }
    }
    let (from, pl, pi) = prev?;
    classify_from(store, lane, (pl, pi), next, from, cfg)
}

/// The ops of several lanes in order of start (a k-way merge), from the last op of each lane
/// that starts before `from`: (lane, index) pairs.
struct Merged<'a> {
    store: &'a Store,
    lanes: &'a [usize],
    idx: Vec<usize>,
}

impl<'a> Merged<'a> {
    fn new(store: &'a Store, lanes: &'a [usize], from: Ns) -> Self {
        let idx = lanes
            .iter()
            .map(|&l| store.lanes[l].lower_bound(from).saturating_sub(1))
            .collect();
        Merged { store, lanes, idx }
    }
}

impl Iterator for Merged<'_> {
    type Item = (usize, usize);

    fn next(&mut self) -> Option<(usize, usize)> {
        let mut best: Option<(Ns, usize)> = None;
        for (k, &l) in self.lanes.iter().enumerate() {
            if let Some(o) = self.store.lanes[l].get(self.idx[k]) {
                if best.is_none_or(|(s, _)| o.start < s) {
                    best = Some((o.start, k));
                }
            }
        }
        let (_, k) = best?;
        self.idx[k] += 1;
        Some((self.lanes[k], self.idx[k] - 1))
    }
}

/// Calls `f` for each device gap of the device whose lanes are `lanes` that overlaps the
/// window, clipped to it, in time order: each interval in which none of the lanes runs anything,
/// charged to the op that ends it.
pub fn device_gaps(
    store: &Store,
    lanes: &[usize],
    w: Window,
    cfg: &Config,
    mut f: impl FnMut(Gap),
) {
    // From the last op of each lane that starts before the window: what ran before it
    // decides where its first gap starts.
    let merged = Merged::new(store, lanes, w.lo());
    // The end of everything seen so far, and the op that reached it.
    let mut busy: Option<(Ns, usize, usize)> = None;
    for (lane, i) in merged {
        let o = store.lanes[lane].op(i);
        if let Some((end, pl, pi)) = busy {
            if end >= w.hi() {
                break;
            }
            if o.start > end {
                if let Some(mut g) = classify_from(store, lane, (pl, pi), i, end, cfg) {
                    g.start = g.start.max(w.lo());
                    g.end = g.end.min(w.hi());
                    if g.end > g.start {
                        f(g);
                    }
                }
            }
        }
        if busy.is_none_or(|(e, ..)| o.end >= e) {
            busy = Some((o.end, lane, i));
        }
    }
}

/// Calls `f` for each gap of `lane` that overlaps the window, clipped to it, in time order.
pub fn lane_gaps(store: &Store, lane: usize, w: Window, cfg: &Config, mut f: impl FnMut(Gap)) {
    lane_between(store, lane, w, cfg, |b| match b {
        Between::Gap(g) if g.dur() > 0 => f(g),
        _ => {}
    });
}

/// What lies before an op on its stream, after the ops before it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Between {
    /// A gap, of length 0 when the op starts exactly as the work before it ends (HTA counts
    /// those).
    Gap(Gap),
    /// The op (index `next` in the lane) started `ns` before the work before it on its stream
    /// had ended. CUDA runs a stream's ops in order, but traces show it: clocks of two
    /// engines, a record's rounding. HTA counts such a pair as a gap of negative length
    /// (kernel_wait, as it is under 30 µs); gaptop counts it apart.
    Overlap { next: usize, ns: Ns },
}

/// Calls `f` for what lies before each op of `lane` that starts inside the window (and after
/// the ops before it): a gap (clipped to the window; of length 0 when the op starts exactly as
/// the stream's work before it ends) or an overlap, in time order.
pub fn lane_between(
    store: &Store,
    lane: usize,
    w: Window,
    cfg: &Config,
    mut f: impl FnMut(Between),
) {
    let ops = &store.lanes[lane];
    if ops.len() < 2 {
        return;
    }
    // First candidate: the op before the first op starting at or after the window start.
    let first = ops.lower_bound(w.lo()).max(1);
    let mut max_end = ops.op(first - 1).end;
    let mut prev = first - 1;
    for (k, n) in ops.range(first..).enumerate() {
        let next = first + k;
        if max_end >= w.hi() {
            break;
        }
        if n.start >= max_end {
            // From the end of the stream's work so far: the op `prev` that reached it.
            let mut g = classify_at(store, lane, (lane, prev), next, max_end, cfg);
            g.start = g.start.max(w.lo());
            g.end = g.end.min(w.hi());
            // A gap of length 0 inside the window, or a clipped gap that keeps some length.
            if g.end > g.start || (n.start == max_end && n.start >= w.lo()) {
                f(Between::Gap(g));
            }
        } else if n.start >= w.lo() {
            f(Between::Overlap {
                next,
                ns: max_end - n.start,
            });
        }
        if n.end >= max_end {
            max_end = n.end;
            prev = next;
        }
    }
}

/// Calls `f` for every gap of the window on the configured basis (each stream's own, or each
/// device's), clipped to it: lane by lane, or device by device, in time order within each.
pub fn window_gaps(store: &Store, w: Window, cfg: &Config, mut f: impl FnMut(Gap)) {
    match cfg.basis {
        Basis::Stream => {
            for lane in 0..store.lanes.len() {
                lane_gaps(store, lane, w, cfg, &mut f);
            }
        }
        Basis::Device => {
            for (_, lanes) in store.devices() {
                device_gaps(store, &lanes, w, cfg, &mut f);
            }
        }
    }
}

/// Device-level idle: intervals inside `[lo, hi)` where no lane of the device runs anything.
pub fn device_idle(store: &Store, lanes: &[usize], lo: Ns, hi: Ns, mut f: impl FnMut(Ns, Ns)) {
    let merged = Merged::new(store, lanes, lo);
    let mut cursor = lo;
    for (lane, i) in merged {
        let o = store.lanes[lane].op(i);
        if o.start >= hi {
            break;
        }
        if o.start > cursor {
            f(cursor, o.start.min(hi));
        }
        cursor = cursor.max(o.end);
        if cursor >= hi {
            return;
        }
    }
    if cursor < hi && hi != Ns::MAX {
        f(cursor, hi);
    }
}

#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq, Eq)]
pub struct Bucket {
    pub count: u64,
    pub total_ns: Ns,
}

/// Calls `f` for each gap of the config's basis in the window, clipped to it: the gaps a
/// summary of the same window and config charges to their launches (each stream's own, or
/// each device's), for exports that need them one by one.
pub fn charged_gaps(store: &Store, w: Window, cfg: &Config, f: impl FnMut(Gap)) {
    let (lo, hi) = w.clipped(store);
    window_gaps(store, Window::new(lo, hi), cfg, f);
}

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

use rustc_hash::FxHashMap as HashMap;

use serde::Serialize;

use super::steps::Steps;
use crate::collect::model::records::{ApiKind, GpuOp, NameId, Ns, StackId};
use crate::collect::model::store::Store;

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

/// A time window [from, to); `None` bounds are open.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    pub from: Option<Ns>,
    pub to: Option<Ns>,
}

impl Window {
    pub fn all() -> Self {
        Window::default()
    }
    pub fn new(from: Ns, to: Ns) -> Self {
        Window {
            from: Some(from),
            to: Some(to),
        }
    }
    pub fn lo(&self) -> Ns {
        self.from.unwrap_or(Ns::MIN)
    }
    pub fn hi(&self) -> Ns {
        self.to.unwrap_or(Ns::MAX)
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

/// One call-tree node: a frame, with inclusive totals.
#[derive(Clone, Debug, Default)]
pub struct TreeNode {
    pub frame: NameId,
    pub parent: usize,
    pub children: Vec<usize>,
    pub gap_ns: Ns,
    pub gaps: u64,
    pub launches: u64,
    pub kernel_ns: Ns,
}

/// Call tree of gap time. Node 0 is the root. Built top-down from the gaps' stacks
/// (launch stack + API + op name); [`CallTree::inverted`] builds the bottom-up view.
#[derive(Clone, Debug)]
pub struct CallTree {
    pub nodes: Vec<TreeNode>,
    index: HashMap<(usize, NameId), usize>,
    leaf_cache: HashMap<(StackId, NameId, NameId), usize>,
}

impl Default for CallTree {
    fn default() -> Self {
        CallTree {
            nodes: vec![TreeNode {
                parent: usize::MAX,
                ..Default::default()
            }],
            index: HashMap::default(),
            leaf_cache: HashMap::default(),
        }
    }
}

impl CallTree {
    fn child(&mut self, parent: usize, frame: NameId) -> usize {
        if let Some(&c) = self.index.get(&(parent, frame)) {
            return c;
        }
        let id = self.nodes.len();
        self.nodes.push(TreeNode {
            frame,
            parent,
            ..Default::default()
        });
        self.nodes[parent].children.push(id);
        self.index.insert((parent, frame), id);
        id
    }

    /// Path of frames for a gap key: stack frames, then the API, then the op name.
    fn path(store: &Store, stack: StackId, api: NameId, op: NameId) -> Vec<NameId> {
        let mut v = store.stacks.frames(stack);
        if api != 0 {
            v.push(api);
        }
        v.push(op);
        v
    }

    fn leaf(&mut self, store: &Store, stack: StackId, api: NameId, op: NameId) -> usize {
        if let Some(&n) = self.leaf_cache.get(&(stack, api, op)) {
            return n;
        }
        let mut n = 0;
        for f in Self::path(store, stack, api, op) {
            n = self.child(n, f);
        }
        self.leaf_cache.insert((stack, api, op), n);
        n
    }

    /// Adds values to a leaf and all its ancestors.
    fn add(&mut self, mut n: usize, gap_ns: Ns, gaps: u64, launches: u64, kernel_ns: Ns) {
        loop {
            let node = &mut self.nodes[n];
            node.gap_ns += gap_ns;
            node.gaps += gaps;
            node.launches += launches;
            node.kernel_ns += kernel_ns;
            if n == 0 {
                break;
            }
            n = node.parent;
        }
    }

    pub fn add_gap(&mut self, store: &Store, g: &Gap) {
        let n = self.leaf(store, g.stack, g.api, g.op_name);
        self.add(n, g.dur(), 1, 0, 0);
    }

    /// Under the gap's launch, the CPU samples taken during it: a marker frame, then each
    /// sample's frames from the outermost in, the gap's time shared out among the samples (the
    /// launch's own totals stay as they are).
    pub fn add_cpu(&mut self, store: &Store, g: &Gap, samples: &[StackId]) {
        let leaf = self.leaf(store, g.stack, g.api, g.op_name);
        let marker = self.child(leaf, store.cpu_marker);
        let n = samples.len() as Ns;
        for (i, &s) in samples.iter().enumerate() {
            // Whole nanoseconds: the first samples take the remainder.
            let part = g.dur() / n + Ns::from((i as Ns) < g.dur() % n);
            let mut node = marker;
            for f in store.stacks.frames(s) {
                node = self.child(node, f);
            }
            loop {
                self.nodes[node].gap_ns += part;
                if node == marker {
                    break;
                }
                node = self.nodes[node].parent;
            }
        }
    }

    pub fn add_op(&mut self, store: &Store, stack: StackId, api: NameId, op: &GpuOp, clip: Ns) {
        let n = self.leaf(store, stack, api, op.name);
        self.add(n, 0, 0, 1, clip);
    }

    /// Leaf node for a gap (to highlight its path).
    pub fn node_of(&self, stack: StackId, api: NameId, op: NameId) -> Option<usize> {
        self.leaf_cache.get(&(stack, api, op)).copied()
    }

    /// Every (launch stack, API, op name) the tree was built from, with its leaf node.
    pub fn leaves(&self) -> impl Iterator<Item = ((StackId, NameId, NameId), usize)> + '_ {
        self.leaf_cache.iter().map(|(&k, &n)| (k, n))
    }

    /// Frames from the root to `n` (exclusive of the root).
    pub fn path_to(&self, mut n: usize) -> Vec<usize> {
        let mut v = Vec::new();
        while n != 0 && n < self.nodes.len() {
            v.push(n);
            n = self.nodes[n].parent;
        }
        v.reverse();
        v
    }

    /// Self values (exclusive) of each node: inclusive minus children.
    fn self_values(&self, n: usize) -> (Ns, u64, u64, Ns) {
        let node = &self.nodes[n];
        let mut v = (node.gap_ns, node.gaps, node.launches, node.kernel_ns);
        for &c in &node.children {
            let cn = &self.nodes[c];
            v.0 -= cn.gap_ns;
            v.1 -= cn.gaps;
            v.2 -= cn.launches;
            v.3 -= cn.kernel_ns;
        }
        v
    }

    /// The bottom-up view: roots are the innermost frames (op names), children their callers.
    pub fn inverted(&self) -> CallTree {
        let mut t = CallTree::default();
        for n in 1..self.nodes.len() {
            let (g, c, l, k) = self.self_values(n);
            if g == 0 && c == 0 && l == 0 && k == 0 {
                continue;
            }
            let mut path = self.path_to(n);
            path.reverse();
            let mut cur = 0;
            for m in path {
                cur = t.child(cur, self.nodes[m].frame);
            }
            t.add(cur, g, c, l, k);
        }
        t
    }

    /// The same tree with its frames mapped: `f(frame, parent)` gives the frame a node shows
    /// under its (mapped) parent's frame, or `None` to fold the node into its parent. Nodes
    /// that map to the same frame under one parent become one, their values summed; the
    /// gap keys' leaves follow. (The call tree's by-function view and its folding of native
    /// frames.)
    pub fn mapped(&self, mut f: impl FnMut(NameId, Option<NameId>) -> Option<NameId>) -> CallTree {
        let mut t = CallTree::default();
        let mut new_of = vec![0usize; self.nodes.len()];
        // Parents come before their children in `nodes`.
        for n in 1..self.nodes.len() {
            let p = new_of[self.nodes[n].parent];
            let parent_frame = (p != 0).then(|| t.nodes[p].frame);
            new_of[n] = match f(self.nodes[n].frame, parent_frame) {
                Some(m) => t.child(p, m),
                None => p,
            };
            let (g, c, l, k) = self.self_values(n);
            t.add(new_of[n], g, c, l, k);
        }
        t.leaf_cache = self
            .leaf_cache
            .iter()
            .map(|(&key, &leaf)| (key, new_of[leaf]))
            .collect();
        t
    }

    /// Children of a node sorted by gap time, largest first.
    pub fn sorted_children(&self, n: usize) -> Vec<usize> {
        let mut v = self.nodes[n].children.clone();
        v.sort_by(|&a, &b| {
            self.nodes[b]
                .gap_ns
                .cmp(&self.nodes[a].gap_ns)
                .then(self.nodes[b].kernel_ns.cmp(&self.nodes[a].kernel_ns))
                .then(a.cmp(&b))
        });
        v
    }
}

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
    pub cpu: super::oncpu::SiteSamples,
    /// Those of the gaps inside the steady steps: what the CPU does every step, without the
    /// warm-up's imports and loading.
    pub cpu_steady: super::oncpu::SiteSamples,
    /// The launching threads' spans at the gaps' middles (sources with CPU spans).
    pub cpu_spans: super::oncpu::SpanTime,
}

/// A site's gap time in each steady step it has gaps in: the gap time and what a
/// launch-overhead fix can remove. Gaps come in time order, so a step's gaps are mostly
/// together: each run of them is one entry, added to the last one while the step stays the
/// same (a step may still hold several entries, which [`PerStep::each`] sums).
#[derive(Clone, Debug, Default)]
pub struct PerStep(Vec<(u32, Ns, Ns)>);

impl PerStep {
    pub fn add(&mut self, step: u32, gap: Ns, removable: Ns) {
        match self.0.last_mut() {
            Some(e) if e.0 == step => {
                e.1 += gap;
                e.2 += removable;
            }
            _ => self.0.push((step, gap, removable)),
        }
    }

    pub fn merge(&mut self, o: &PerStep) {
        self.0.extend_from_slice(&o.0);
    }

    /// Each of the first `steps` steps' figures (none: 0), summed over its entries.
    pub fn each(&self, steps: usize) -> Vec<(Ns, Ns)> {
        let mut each = vec![(0, 0); steps];
        for &(i, a, b) in &self.0 {
            if let Some(e) = each.get_mut(i as usize) {
                e.0 += a;
                e.1 += b;
            }
        }
        each
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
        self.per_step.merge(&o.per_step);
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
    }

    /// The CPU samples that say what the site does every step: its steady gaps' where there
    /// are any (a warm-up's imports, in one long one-off gap, would outweigh them), else all.
    pub fn steady_cpu(&self) -> &super::oncpu::SiteSamples {
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
fn bucket(ns: Ns) -> usize {
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

impl Summary {
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
    // Only where the CPU was on the critical path: the launch came after the gap began.
    if g.category == Category::HostWait {
        leaf.cpu_spans.add(g.cpu_stack, d);
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
    let (lo, hi) = window_extent(store, w);
    let mut s = Summary::empty(lo, hi, cfg, top_n, min_ns);
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
            if op.kind == crate::collect::model::records::OpKind::Kernel {
                s.kernels += 1;
                s.kernel_ns += clip;
                let _ = s.kernel_hist.record(op.dur().max(1) as u64);
                s.kernel_max_ns = s.kernel_max_ns.max(op.dur());
            }
            let api = proc.api_by_corr(op.corr);
            let kernel_clip = if op.kind == crate::collect::model::records::OpKind::Kernel {
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

/// Calls `f` for each gap of the config's basis in the window, clipped to it: the gaps a
/// summary of the same window and config charges to their launches (each stream's own, or
/// each device's), for exports that need them one by one.
pub fn charged_gaps(store: &Store, w: Window, cfg: &Config, f: impl FnMut(Gap)) {
    let (lo, hi) = window_extent(store, w);
    window_gaps(store, Window::new(lo, hi), cfg, f);
}

/// The window clipped to the capture's span: what a summary of it covers (`Summary::lo`,
/// `Summary::hi`).
pub fn window_extent(store: &Store, w: Window) -> (Ns, Ns) {
    let (span_lo, span_hi) = store.span().unwrap_or((0, 0));
    let lo = w.lo().max(span_lo);
    (lo, w.hi().min(span_hi).max(lo))
}

/// Launch rate and busy fraction over time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RateBin {
    pub start: Ns,
    pub ops: u64,
    /// Busy fraction of the busiest device in the bin, 0..1.
    pub busy: f64,
}

/// Splits [lo, hi) into `n` bins and counts ops started and busy time in each. Costs
/// O(n · lanes · log ops).
pub fn rate_bins(store: &Store, lo: Ns, hi: Ns, n: usize) -> Vec<RateBin> {
    if n == 0 || hi <= lo {
        return Vec::new();
    }
    let width = ((hi - lo) as f64 / n as f64).max(1.0);
    let devices = store.devices();
    (0..n)
        .map(|i| {
            let a = lo + (i as f64 * width) as Ns;
            let b = lo + ((i + 1) as f64 * width) as Ns;
            let mut ops = 0;
            let mut busy = 0f64;
            for (_, lanes) in &devices {
                let mut dev_busy = 0;
                for &l in lanes {
                    let lane = &store.lanes[l];
                    ops += (lane.lower_bound(b) - lane.lower_bound(a)) as u64;
                    dev_busy += lane.busy_in(a, b);
                }
                busy = busy.max((dev_busy as f64 / (b - a).max(1) as f64).min(1.0));
            }
            RateBin {
                start: a,
                ops,
                busy,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::model::records::{ApiCall, GpuOp, LaneKey, OpKind};

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
        let mut q = PerStep::default();
        q.add(2, 4, 2);
        q.add(9, 100, 100);
        p.merge(&q);
        // Step 9 lies past the steps asked for and is left out.
        assert_eq!(p.each(3), vec![(11, 8), (14, 8), (4, 2)]);
        assert_eq!(p.0.len(), 6, "a run of one step's gaps is one entry");
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

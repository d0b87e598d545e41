//! The event store: GPU ops per lane (process, device, stream), host API calls per process, and
//! the interned names and stacks they point at.
//!
//! Every source (Kineto JSON, recordings, the live socket) fills the same store, and every view
//! and report reads it. Ops in a lane stay sorted by start time so a time window is two binary
//! searches, and the lane keeps its cumulative busy time every 32 ops, so the busy time of any
//! range is a subtraction: drawing costs grow with the screen, not with the trace. Ops are
//! packed in 24 bytes (`model::lane`) and calls in 32 (`model::calls`), found by
//! correlation id without a hash map; both are read as `GpuOp` and `ApiCall` values.
//!
//! Memory is bounded by a budget: when the estimate passes it, the oldest ops and API calls leave
//! first and are counted in [`Store::evicted_ops`] / [`Store::evicted_apis`].

use rustc_hash::FxHashMap as HashMap;

use super::lane::Lane;
use super::process::Process;
use super::records::{
    ApiCall, ApiKind, CpuSample, GpuOp, LaneKey, NameId, Ns, StackId, API_BYTES, CPU_MARKER,
    MAX_THREAD_SAMPLES, OP_BYTES,
};
use super::stacks::{Interner, StackTable};

pub struct Store {
    pub names: Interner,
    pub stacks: StackTable,
    pub lanes: Vec<Lane>,
    pub(super) lane_index: HashMap<LaneKey, usize>,
    pub procs: Vec<Process>,
    /// Memory budget in bytes for ops and API calls.
    pub budget: usize,
    pub(super) bytes: usize,
    pub evicted_ops: u64,
    pub evicted_apis: u64,
    /// Records the sources could not keep (collector queue, CUPTI, socket errors).
    pub dropped: u64,
    /// Events a source skipped as unknown or irrelevant, by reason.
    pub skipped: std::collections::BTreeMap<String, u64>,
    /// Records dropped because their times cannot be right (`model::plausible`), with an
    /// example of each cause (also counted in `skipped`).
    pub dropped_times: super::plausible::Drops,
    /// Total ops ever added.
    pub total_ops: u64,
    /// Bumped on every change; views use it to invalidate caches.
    pub generation: u64,
    /// Source description for status lines.
    pub source: String,
    /// The capture's extent when a source fixes it (an exported window); otherwise it is the
    /// span of its ops.
    pub window: Option<(Ns, Ns)>,
    /// Where the capture's times count from when a source says (a window exported from a
    /// longer capture keeps that capture's start); otherwise its span's start.
    pub origin: Option<Ns>,
    /// CPU samples kept, and those that left a full thread's buffer.
    pub cpu_samples: u64,
    pub evicted_samples: u64,
    /// NVTX ranges that left a full thread's list (`ranges::MAX_THREAD_RANGES`).
    pub evicted_ranges: u64,
    /// Why CPU samples could not be taken, when they could not (said once).
    pub sampling_note: Option<String>,
    /// The frame under which the call tree shows what the CPU did during a launch's gaps.
    pub cpu_marker: NameId,
    /// How the clocks of a capture joined from several traces were put together (None for a
    /// single source).
    pub clocks: Option<String>,
    /// The ranks (-1: a process without one) whose clocks could not be put on the others'
    /// (their collectives' ends agree on no one offset): which rank is late at a collective,
    /// and how long the others wait for it, cannot be told then.
    pub unaligned: Vec<i32>,
    /// What the source said about itself that a report should show: its format's version,
    /// and what it lacked and what that costs (an Nsight Systems export without call chains).
    pub notes: Vec<String>,
    /// What gaptop added to a CUDA call on the machine that recorded (a recording's probe, see
    /// `gaptop_wire::Cost`); None for a trace or an older recording. With several recordings,
    /// the first's.
    pub launch_cost: Option<gaptop_wire::Cost>,
    /// Recordings older than GAPTOPR5, which cannot be verified complete: file and why
    /// (`report` says so once, on stderr).
    pub unverified: Vec<String>,
    /// A backward op's span stack to the stack of the forward op that made its autograd node
    /// (Kineto's sequence numbers; `sources::fwdbwd`).
    pub forward_of: HashMap<StackId, StackId>,
    /// A backward stack whose nodes were made by forward ops of several stacks (autograd's
    /// thread has no Python frames: one `AddmmBackward0` stack runs every layer's node): each
    /// forward stack and how many of its nodes it made. `forward_of` holds the most common.
    pub forward_split: HashMap<StackId, Vec<(StackId, u32)>>,
}

impl Default for Store {
    fn default() -> Self {
        Self::new(usize::MAX)
    }
}

impl Store {
    pub fn new(budget: usize) -> Self {
        let mut names = Interner::new();
        let cpu_marker = names.intern(CPU_MARKER);
        Store {
            cpu_marker,
            names,
            stacks: StackTable::default(),
            lanes: Vec::new(),
            lane_index: HashMap::default(),
            procs: Vec::new(),
            budget,
            bytes: 0,
            evicted_ops: 0,
            evicted_apis: 0,
            dropped: 0,
            skipped: Default::default(),
            dropped_times: Default::default(),
            total_ops: 0,
            generation: 0,
            source: String::new(),
            window: None,
            origin: None,
            cpu_samples: 0,
            evicted_samples: 0,
            evicted_ranges: 0,
            sampling_note: None,
            clocks: None,
            unaligned: Vec::new(),
            notes: Vec::new(),
            unverified: Vec::new(),
            launch_cost: None,
            forward_of: HashMap::default(),
            forward_split: HashMap::default(),
        }
    }

    pub fn add_process(&mut self, pid: u32, rank: i32, label: &str) -> u32 {
        self.add_process_from(0, pid, rank, label)
    }

    /// [`Store::add_process`] for a source whose processes are those from index `from` on:
    /// a pid names only one of them (several nodes' recordings in one store, where two nodes'
    /// programs may have the same pid).
    pub fn add_process_from(&mut self, from: u32, pid: u32, rank: i32, label: &str) -> u32 {
        // A process first known from its CPU samples is the one its collector now names.
        let from = from as usize;
        if let Some(i) = self.procs[from..]
            .iter()
            .position(|p| p.pid == pid && p.from_samples)
            .map(|i| i + from)
        {
            let p = &mut self.procs[i];
            p.rank = rank;
            p.label = label.to_string();
            p.from_samples = false;
            return i as u32;
        }
        self.procs.push(Process {
            pid,
            rank,
            label: label.to_string(),
            ..Default::default()
        });
        (self.procs.len() - 1) as u32
    }

    /// The process of `pid` among those from index `from` on (the newest of that pid), created
    /// from samples if none is known.
    pub fn process_for_samples(&mut self, from: u32, pid: u32) -> u32 {
        match self.procs[from as usize..]
            .iter()
            .rposition(|p| p.pid == pid)
        {
            Some(i) => i as u32 + from,
            None => {
                let p = self.add_process_from(from, pid, -1, &format!("pid {pid}"));
                self.procs[p as usize].from_samples = true;
                p
            }
        }
    }

    /// Adds CPU samples of thread `tid` of process `proc` (samples arrive in time order, a
    /// batch at a time).
    pub fn add_samples(&mut self, proc: u32, tid: u32, samples: &[CpuSample]) {
        let v = self.procs[proc as usize].samples.entry(tid).or_default();
        for &x in samples {
            if v.back().is_some_and(|b| b.time > x.time) {
                // Out of order (a late batch): put it in its place.
                let i = v.partition_point(|s| s.time <= x.time);
                v.insert(i, x);
            } else {
                v.push_back(x);
            }
            if v.len() > MAX_THREAD_SAMPLES {
                v.pop_front();
                self.evicted_samples += 1;
            } else {
                self.cpu_samples += 1;
            }
        }
        self.generation += 1;
    }

    /// CPU samples kept.
    pub fn cpu_sample_count(&self) -> u64 {
        self.cpu_samples
    }

    pub fn lane_id(&mut self, key: LaneKey) -> usize {
        if let Some(&i) = self.lane_index.get(&key) {
            return i;
        }
        let i = self.lanes.len();
        self.lanes.push(Lane::new(key));
        self.lane_index.insert(key, i);
        i
    }

    pub fn lane_label(&self, lane: usize) -> String {
        let k = self.lanes[lane].key;
        let p = &self.procs[k.proc as usize];
        let who = if p.rank >= 0 {
            format!("r{}", p.rank)
        } else if self.procs.len() > 1 {
            format!("p{}", p.pid)
        } else {
            String::new()
        };
        if who.is_empty() {
            format!("gpu{} s{}", k.device, k.stream)
        } else {
            format!("{who} gpu{} s{}", k.device, k.stream)
        }
    }

    /// Appends an op, keeping the lane sorted (an out-of-order op is inserted in place).
    pub fn add_op(&mut self, lane: usize, op: GpuOp) {
        self.lanes[lane].insert(&op);
        self.total_ops += 1;
        self.bytes += OP_BYTES;
        self.generation += 1;
        self.enforce_budget();
    }

    /// Adds a batch of ops to a lane: appended when they come after what the lane holds (the
    /// usual case), merged with one sort of the affected tail when they do not.
    pub fn add_ops(&mut self, lane: usize, ops: &mut [GpuOp]) {
        if ops.is_empty() {
            return;
        }
        ops.sort_by_key(|o| (o.start, o.end));
        let l = &mut self.lanes[lane];
        let first = ops[0].start;
        if l.last().is_none_or(|b| b.start <= first) || ops.len() == 1 {
            for op in ops.iter() {
                self.add_op(lane, *op);
            }
            return;
        }
        l.merge(ops);
        self.total_ops += ops.len() as u64;
        self.bytes += OP_BYTES * ops.len();
        self.generation += 1;
        self.enforce_budget();
    }

    /// Keeps only the ops of lane `lane` for which `keep` holds; returns those that left.
    pub(crate) fn retain_ops(
        &mut self,
        lane: usize,
        keep: impl FnMut(&GpuOp) -> bool,
    ) -> Vec<GpuOp> {
        let gone = self.lanes[lane].retain(keep);
        self.total_ops -= gone.len() as u64;
        self.bytes -= OP_BYTES * gone.len();
        self.generation += !gone.is_empty() as u64;
        gone
    }

    /// Keeps only the calls of process `proc` for which `keep` holds, during a bulk load
    /// ([`Store::finish_bulk`] indexes them again); returns those that left.
    pub(crate) fn retain_calls(
        &mut self,
        proc: u32,
        keep: impl FnMut(&ApiCall) -> bool,
    ) -> Vec<ApiCall> {
        let p = &mut self.procs[proc as usize];
        let gone = p.calls.retain(keep);
        if !gone.is_empty() {
            p.bulk = true;
            self.bytes -= API_BYTES * gone.len();
        }
        gone
    }

    /// Adds ops in bulk without per-op bookkeeping; call [`Store::finish_bulk`] afterwards.
    pub fn push_op_unsorted(&mut self, lane: usize, op: GpuOp) {
        self.lanes[lane].push_unsorted(&op);
        self.total_ops += 1;
        self.bytes += OP_BYTES;
    }

    /// Adds an API call in bulk, unindexed; [`Store::finish_bulk`] sorts and indexes.
    pub fn push_api_unsorted(&mut self, proc: u32, api: ApiCall) {
        let p = &mut self.procs[proc as usize];
        p.calls.push_unindexed(&api);
        p.bulk = true;
        self.bytes += API_BYTES;
    }

    pub fn add_api(&mut self, proc: u32, api: ApiCall) {
        let p = &mut self.procs[proc as usize];
        let seq = p.calls.push(&api);
        if matches!(api.kind, ApiKind::Sync | ApiKind::Wait) {
            let i = p.blocking.partition_point(|a| a.end <= api.end);
            p.blocking.insert(i, api);
        }
        if let Some(f) = &mut p.range_frames {
            let calls = &p.calls;
            f.add_call(seq, &api, |s| calls.start_of(s).unwrap_or(Ns::MIN));
        }
        self.bytes += API_BYTES;
        self.generation += 1;
        self.enforce_budget();
    }

    /// Sorts lanes and blocking calls after a bulk load and recomputes the running sums.
    pub fn finish_bulk(&mut self) {
        for l in &mut self.lanes {
            l.finish_bulk();
        }
        for p in &mut self.procs {
            if std::mem::take(&mut p.bulk) {
                p.reindex();
            } else {
                p.blocking.sort_by_key(|a| a.end);
            }
        }
        self.generation += 1;
        self.enforce_budget();
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// How many distinct ranks the processes have (0 when none has one).
    pub fn rank_count(&self) -> usize {
        let mut r: Vec<i32> = self
            .procs
            .iter()
            .map(|p| p.rank)
            .filter(|&r| r >= 0)
            .collect();
        r.sort_unstable();
        r.dedup();
        r.len()
    }

    /// The frame under which the UI's call tree gives one rank's part of a launch site's
    /// gaps (`[rank 3]`), if the store has one: [`Store::name_ranks`] makes them.
    pub fn rank_frame(&self, rank: i32) -> Option<NameId> {
        self.names.lookup(&rank_frame_text(rank))
    }

    /// Names a frame for each rank of a capture of several ranks ([`Store::rank_frame`]).
    pub fn name_ranks(&mut self) {
        if self.rank_count() < 2 {
            return;
        }
        let mut ranks: Vec<i32> = self.procs.iter().map(|p| p.rank).collect();
        ranks.sort_unstable();
        ranks.dedup();
        for r in ranks.into_iter().filter(|&r| r >= 0) {
            self.names.intern(&rank_frame_text(r));
        }
    }

    pub fn op_count(&self) -> usize {
        self.lanes.iter().map(|l| l.len()).sum()
    }

    /// Ops of the capture: all of them, or those overlapping its window when a source fixes
    /// one (an exported window also holds the op just outside each of its edges).
    pub fn capture_ops(&self) -> usize {
        let Some((lo, hi)) = self.window else {
            return self.op_count();
        };
        self.lanes
            .iter()
            .map(|l| {
                l.range(l.lower_bound(lo).saturating_sub(1)..l.lower_bound(hi))
                    .filter(|o| o.end > lo)
                    .count()
            })
            .sum()
    }

    fn enforce_budget(&mut self) {
        while self.bytes > self.budget {
            // Oldest first: compare the oldest op front with the oldest API front.
            let lane = self
                .lanes
                .iter()
                .enumerate()
                .filter(|(_, l)| !l.is_empty())
                .map(|(i, l)| (l.start_of(0), i))
                .min();
            let api = self
                .procs
                .iter()
                .enumerate()
                .filter_map(|(i, p)| p.calls.front_start().map(|s| (s, i)))
                .min();
            match (lane, api) {
                (Some((to, li)), Some((ta, _))) if to <= ta => self.evict_op(li),
                (_, Some((_, pi))) => self.evict_api(pi),
                (Some((_, li)), None) => self.evict_op(li),
                (None, None) => break,
            }
        }
    }

    fn evict_op(&mut self, lane: usize) {
        if self.lanes[lane].pop_front().is_some() {
            self.bytes -= OP_BYTES;
            self.evicted_ops += 1;
        }
    }

    fn evict_api(&mut self, proc: usize) {
        let p = &mut self.procs[proc];
        if let Some(a) = p.calls.pop_front() {
            if matches!(a.kind, ApiKind::Sync | ApiKind::Wait) {
                if let Some(i) = p.blocking.iter().position(|b| *b == a) {
                    p.blocking.remove(i);
                }
            }
            self.bytes -= API_BYTES;
            self.evicted_apis += 1;
        }
    }

    /// Time span of the capture: the window a source fixed (an exported window), else the
    /// span of its ops (first start, last end).
    pub fn span(&self) -> Option<(Ns, Ns)> {
        if let Some(w) = self.window {
            return self.lanes.iter().any(|l| !l.is_empty()).then_some(w);
        }
        let mut lo = Ns::MAX;
        let mut hi = Ns::MIN;
        for l in self.lanes.iter().filter(|l| !l.is_empty()) {
            lo = lo.min(l.start_of(0));
            hi = hi.max(l.max_end());
        }
        (lo <= hi).then_some((lo, hi))
    }

    /// The time the capture's times are shown from: the start of the capture the data came
    /// from (see `origin`), else of its span, else 0.
    pub fn origin(&self) -> Ns {
        self.origin
            .or_else(|| self.span().map(|s| s.0))
            .unwrap_or(0)
    }

    /// What analysing and exporting the window [lo, hi) reads, copied: per lane the window's
    /// ops and the op next to each side of them, their launch calls, the syncs and waits that
    /// end from the earliest of those to the latest, every CPU span, all names and stacks.
    /// Lanes keep their numbers and the capture its span, so gaps, reasons and reports of the
    /// window come out the same. The UI exports from such a copy on another thread while the
    /// store goes on changing.
    pub fn window_copy(&self, lo: Ns, hi: Ns) -> Store {
        let mut c = Store::new(usize::MAX);
        c.names = self.names.clone();
        c.stacks = self.stacks.clone();
        c.source = self.source.clone();
        c.notes = self.notes.clone();
        c.unaligned = self.unaligned.clone();
        c.dropped_times = self.dropped_times.clone();
        c.forward_of = self.forward_of.clone();
        c.forward_split = self.forward_split.clone();
        c.launch_cost = self.launch_cost.clone();
        c.window = self.span();
        c.origin = Some(self.origin());
        for p in &self.procs {
            let i = c.add_process(p.pid, p.rank, &p.label) as usize;
            c.procs[i].spans = p.spans.clone();
            c.procs[i].ranges = p.ranges.clone();
            c.procs[i].gpu_ranges = p.gpu_ranges.clone();
            c.procs[i].ended = p.ended;
            c.procs[i].stats = p.stats;
        }
        let (mut t_lo, mut t_hi) = (Ns::MAX, Ns::MIN);
        let mut apis: Vec<Vec<ApiCall>> = vec![Vec::new(); self.procs.len()];
        for lane in &self.lanes {
            let li = c.lane_id(lane.key);
            let pi = lane.key.proc as usize;
            let a = lane.lower_bound(lo).saturating_sub(1);
            let b = (lane.lower_bound(hi) + 1).min(lane.len());
            for op in lane.range(a..b) {
                c.push_op_unsorted(li, op);
                t_lo = t_lo.min(op.start);
                t_hi = t_hi.max(op.end);
                if let Some(api) = self.procs[pi].api_by_corr(op.corr) {
                    apis[pi].push(api);
                    t_lo = t_lo.min(api.start);
                    t_hi = t_hi.max(api.end);
                }
            }
        }
        for (i, p) in self.procs.iter().enumerate() {
            let first = p.blocking.partition_point(|a| a.end < t_lo);
            let calls = &mut apis[i];
            calls.extend(p.blocking[first..].iter().take_while(|a| a.end <= t_hi));
            calls.sort_by_key(|a| (a.start, a.corr, a.end, a.tid));
            calls.dedup();
            for a in calls.drain(..) {
                c.push_api_unsorted(i as u32, a);
            }
        }
        c.finish_bulk();
        c
    }

    /// Moves everything of process `proc` (its ops, calls, CPU spans and samples) `by` ns
    /// later on the capture's clock: one rank's trace put on the clock of the others. Order,
    /// sums and indexes stay as they are.
    pub fn shift_process(&mut self, proc: u32, by: Ns) {
        if by == 0 {
            return;
        }
        // Saturating: a trace's times near the ends of the clock cannot wrap around.
        for l in self.lanes.iter_mut().filter(|l| l.key.proc == proc) {
            l.shift(by);
        }
        let p = &mut self.procs[proc as usize];
        p.shift_calls(by);
        for s in p.spans.values_mut().flatten() {
            s.start = s.start.saturating_add(by);
            s.end = s.end.saturating_add(by);
        }
        for s in p.samples.values_mut().flatten() {
            s.time = s.time.saturating_add(by);
        }
        self.generation += 1;
    }

    /// The API call that launched an op in this lane, if known.
    pub fn api_of(&self, lane: usize, op: &GpuOp) -> Option<ApiCall> {
        let p = &self.procs[self.lanes[lane].key.proc as usize];
        p.api_by_corr(op.corr)
    }

    pub fn skip(&mut self, why: &str) {
        *self.skipped.entry(why.to_string()).or_insert(0) += 1;
    }

    /// Devices as (proc, device) pairs with their lanes, sorted.
    pub fn devices(&self) -> Vec<((u32, u32), Vec<usize>)> {
        let mut m: std::collections::BTreeMap<(u32, u32), Vec<usize>> = Default::default();
        for (i, l) in self.lanes.iter().enumerate() {
            m.entry((l.key.proc, l.key.device)).or_default().push(i);
        }
        m.into_iter().collect()
    }

    /// Lanes in display order: by rank, process, device, stream.
    pub fn lane_order(&self) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.lanes.len()).collect();
        v.sort_by_key(|&i| {
            let k = self.lanes[i].key;
            let p = &self.procs[k.proc as usize];
            (p.rank, p.pid, k.device, k.stream)
        });
        v
    }

    /// The stack of the forward op whose autograd node a backward stack runs: the link
    /// ([`Store::forward_of`]) of the stack or its nearest linked parent; None without one.
    pub fn forward_stack(&self, stack: StackId) -> Option<StackId> {
        self.linked(stack).map(|b| self.forward_of[&b])
    }

    /// Every forward stack whose nodes a backward stack (or its nearest linked parent) runs,
    /// with how many: one where all its nodes came from one forward stack.
    pub fn forward_stacks(&self, stack: StackId) -> Vec<(StackId, u32)> {
        match self.linked(stack) {
            Some(b) => match self.forward_split.get(&b) {
                Some(v) => v.clone(),
                None => vec![(self.forward_of[&b], 1)],
            },
            None => Vec::new(),
        }
    }

    /// The stack itself or its nearest parent that [`Store::forward_of`] links.
    fn linked(&self, stack: StackId) -> Option<StackId> {
        std::iter::successors((stack != 0).then_some(stack), |&s| {
            let p = self.stacks.node(s).parent;
            (p != 0).then_some(p)
        })
        .find(|s| self.forward_of.contains_key(s))
    }

    /// Frame strings of a stack, outermost first.
    pub fn frame_strings(&self, stack: StackId) -> Vec<String> {
        self.stacks
            .frames(stack)
            .into_iter()
            .map(|f| self.names.get(f).to_string())
            .collect()
    }
}

/// How a rank reads as a frame of the call tree.
pub fn rank_frame_text(rank: i32) -> String {
    format!("[rank {rank}]")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::records::{OpKind, Span};

    fn op(s: Ns, e: Ns) -> GpuOp {
        GpuOp::new(s, e, OpKind::Kernel, 0, 0)
    }

    #[test]
    fn busy_prefix_sums_clip_windows() {
        let mut st = Store::default();
        st.add_process(1, -1, "p");
        let l = st.lane_id(LaneKey {
            proc: 0,
            device: 0,
            stream: 7,
        });
        for (s, e) in [(0, 10), (20, 30), (40, 45)] {
            st.add_op(l, op(s, e));
        }
        let lane = &st.lanes[l];
        assert_eq!(lane.busy_in(0, 100), 25);
        assert_eq!(lane.busy_in(5, 25), 10);
        assert_eq!(lane.busy_in(10, 20), 0);
        assert_eq!(lane.busy_in(42, 44), 2);
    }

    #[test]
    fn out_of_order_insert_keeps_sums() {
        let mut st = Store::default();
        st.add_process(1, -1, "p");
        let l = st.lane_id(LaneKey {
            proc: 0,
            device: 0,
            stream: 0,
        });
        st.add_op(l, op(20, 30));
        st.add_op(l, op(0, 10));
        st.add_op(l, op(40, 41));
        let starts: Vec<_> = st.lanes[l].iter().map(|o| o.start).collect();
        assert_eq!(starts, vec![0, 20, 40]);
        let bb: Vec<_> = (0..3).map(|i| st.lanes[l].busy_before(i)).collect();
        assert_eq!(bb, vec![0, 10, 20]);
    }

    #[test]
    fn budget_evicts_oldest_and_counts() {
        let mut st = Store::new(OP_BYTES * 3);
        st.add_process(1, -1, "p");
        let l = st.lane_id(LaneKey {
            proc: 0,
            device: 0,
            stream: 0,
        });
        for i in 0..10 {
            st.add_op(l, op(i * 10, i * 10 + 5));
        }
        assert_eq!(st.op_count(), 3);
        assert_eq!(st.evicted_ops, 7);
        assert_eq!(st.lanes[l].first().unwrap().start, 70);
        assert_eq!(st.total_ops, 10);
    }

    #[test]
    fn classify_api_names() {
        assert_eq!(ApiKind::classify("cudaLaunchKernel"), ApiKind::Launch);
        assert_eq!(ApiKind::classify("cudaLaunchKernel_v7000"), ApiKind::Launch);
        assert_eq!(ApiKind::classify("cuLaunchKernelEx"), ApiKind::Launch);
        assert_eq!(
            ApiKind::classify("cudaGraphLaunch_v10000"),
            ApiKind::GraphLaunch
        );
        assert_eq!(ApiKind::classify("cudaStreamSynchronize"), ApiKind::Sync);
        assert_eq!(ApiKind::classify("cudaMemcpy"), ApiKind::Sync);
        assert_eq!(ApiKind::classify("cudaMemcpyAsync"), ApiKind::Copy);
        assert_eq!(ApiKind::classify("cudaStreamWaitEvent"), ApiKind::Wait);
        assert_eq!(ApiKind::classify("cudaMalloc"), ApiKind::Other);
    }

    #[test]
    fn span_stack_lookup_walks_parents() {
        let mut st = Store::default();
        let p = st.add_process(1, -1, "p");
        let a = st.names.intern("a");
        let b = st.names.intern("b");
        let sa = st.stacks.intern(0, a);
        let sb = st.stacks.intern(sa, b);
        st.procs[p as usize].spans.insert(
            1,
            vec![
                Span {
                    start: 0,
                    end: 100,
                    stack: sa,
                    parent: u32::MAX,
                },
                Span {
                    start: 10,
                    end: 20,
                    stack: sb,
                    parent: 0,
                },
            ],
        );
        let pr = &st.procs[0];
        assert_eq!(pr.span_stack_at(1, 15), sb);
        assert_eq!(pr.span_stack_at(1, 50), sa);
        assert_eq!(pr.span_stack_at(1, 150), 0);
        assert_eq!(pr.span_stack_at(2, 15), 0);
    }
}

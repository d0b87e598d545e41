//! A process of the capture: its host API calls (found by correlation id), the blocking calls
//! that explain gaps, its threads' CPU spans (traces), CPU samples and NVTX ranges. The store
//! holds one per process (and per rank of a rank set).

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

use super::calls::Calls;
use super::ranges::{nested, open_before, Range, RangeFrames};
use super::records::{ApiCall, ApiKind, CpuSample, Ns, Span, StackId};
use super::states::{OffCpu, MAX_THREAD_STATES};

/// One process of the capture (a rank of a rank set, a node of a job).
#[derive(Clone, Debug, Default)]
pub struct Process {
    pub pid: u32,
    pub rank: i32,
    pub label: String,
    /// The calls in the order stored, found by correlation id (`model::calls`).
    pub(crate) calls: Calls,
    /// Sync and wait calls sorted by end (they explain gaps).
    pub blocking: Vec<ApiCall>,
    /// CPU spans per thread, sorted by start (from traces).
    pub spans: HashMap<u32, Vec<Span>>,
    pub ended: bool,
    /// Calls were added in bulk and are not indexed yet.
    pub(crate) bulk: bool,
    /// Collector statistics as last reported.
    pub stats: gaptop_wire::Stats,
    /// CPU samples per thread, in time order (`gaptop run` and `record` sample the program's
    /// threads from outside it), and the sampling period.
    pub samples: HashMap<u32, VecDeque<CpuSample>>,
    pub sample_period_ns: Ns,
    /// The process is known from CPU samples only (no collector has said hello for it yet).
    pub from_samples: bool,
    /// Its threads' time off a CPU, per thread by start (`model::states`), and
    /// whether its context switches were recorded (then time none covers was on a CPU).
    pub states: HashMap<u32, Vec<OffCpu>>,
    pub switches: bool,
    /// NVTX ranges (and traces' user annotations) per thread, sorted by start
    /// (`model::ranges`: live sources add them with `Store::add_ranges`, traces with
    /// `Process::set_ranges`), and GPU-side ones per (device, stream).
    pub ranges: HashMap<u32, Vec<Range>>,
    pub gpu_ranges: HashMap<(u32, u32), Vec<Range>>,
    /// Set once `Store::add_ranges` made ranges frames of this process's call stacks.
    pub(crate) range_frames: Option<RangeFrames>,
}

impl Process {
    /// Marks the process's context switches as recorded (time no stretch covers was on a CPU)
    /// and adds thread `tid`'s stretches off its CPU (`model::states`), which arrive
    /// in time order a batch at a time.
    pub fn add_states(&mut self, tid: u32, states: &[OffCpu]) {
        self.switches = true;
        if states.is_empty() {
            return;
        }
        let v = self.states.entry(tid).or_default();
        for &x in states {
            let i = v.partition_point(|s| s.start <= x.start);
            v.insert(i, x);
        }
        if v.len() > MAX_THREAD_STATES {
            v.drain(..v.len() - MAX_THREAD_STATES);
        }
    }

    /// Thread `tid`'s stretches off its CPU that overlap [t0, t1), in time order.
    pub fn states_in(&self, tid: u32, t0: Ns, t1: Ns) -> &[OffCpu] {
        let Some(v) = self.states.get(&tid) else {
            return &[];
        };
        // Stretches do not overlap one another: those that start before t1, from the first
        // that ends after t0.
        let hi = v.partition_point(|s| s.start < t1);
        let lo = v[..hi].partition_point(|s| s.end <= t0);
        &v[lo..hi]
    }

    /// The samples of thread `tid` taken in [t0, t1].
    pub fn samples_in(&self, tid: u32, t0: Ns, t1: Ns) -> impl Iterator<Item = &CpuSample> {
        let v = self.samples.get(&tid);
        let (a, b) = match v {
            Some(v) => (
                v.partition_point(|s| s.time < t0),
                v.partition_point(|s| s.time <= t1),
            ),
            None => (0, 0),
        };
        v.into_iter().flat_map(move |v| v.range(a..b))
    }

    /// The latest call with correlation id `corr`.
    pub fn api_by_corr(&self, corr: u32) -> Option<ApiCall> {
        self.calls.get(self.calls.find(corr)?)
    }
    /// The thread's CUDA call before the call with correlation id `corr`: the latest one that
    /// ended before it started, among the `limit` calls stored before it (calls are kept in
    /// each thread's order).
    pub fn call_before(&self, corr: u32, limit: usize) -> Option<ApiCall> {
        let seq = self.calls.find(corr)?;
        let a = self.calls.get(seq)?;
        self.calls
            .range(seq.saturating_sub(limit as u64), seq)
            .rev()
            .find(|b| b.tid == a.tid && b.end <= a.start)
    }
    pub fn apis(&self) -> impl DoubleEndedIterator<Item = ApiCall> + '_ {
        self.calls.iter()
    }

    /// The call stored `seq`-th, counting those evicted (None once it was).
    pub(crate) fn call_by_seq(&self, seq: u64) -> Option<ApiCall> {
        self.calls.get(seq)
    }

    /// Sets the stack of the call stored `seq`-th.
    pub(crate) fn set_call_stack(&mut self, seq: u64, stack: StackId) {
        self.calls.set_stack(seq, stack);
    }

    /// An index of the calls stored so far by thread and start, for range frames.
    pub(crate) fn index_calls(&self) -> RangeFrames {
        let mut f = RangeFrames::default();
        let first = self.calls.next_seq() - self.calls.len() as u64;
        for (i, a) in self.calls.iter().enumerate() {
            let start_of = |s: u64| self.calls.start_of(s).unwrap_or(Ns::MIN);
            f.add_call(first + i as u64, &a, start_of);
        }
        f
    }
    pub fn api_count(&self) -> usize {
        self.calls.len()
    }

    /// Moves every call `by` ns later (saturating).
    pub(crate) fn shift_calls(&mut self, by: Ns) {
        self.calls.update(|a| {
            a.start = a.start.saturating_add(by);
            a.end = a.end.saturating_add(by);
        });
        for a in self.blocking.iter_mut() {
            a.start = a.start.saturating_add(by);
            a.end = a.end.saturating_add(by);
        }
    }

    /// Gives each call without a stack the stack of the CPU span around its start.
    pub fn stacks_from_spans(&mut self) {
        if self.spans.is_empty() {
            return;
        }
        let spans = &self.spans;
        self.calls.update(|a| {
            if a.stack == 0 {
                a.stack = span_stack_at(spans, a.tid, a.start);
            }
        });
    }

    /// Sorts the calls by start and rebuilds the correlation index and the blocking list.
    pub(crate) fn reindex(&mut self) {
        self.calls.reindex();
        self.blocking = self
            .calls
            .iter()
            .filter(|a| matches!(a.kind, ApiKind::Sync | ApiKind::Wait))
            .collect();
        self.blocking.sort_by_key(|a| a.end);
    }

    /// Innermost CPU span stack on thread `tid` at time `t` (0 when none).
    pub fn span_stack_at(&self, tid: u32, t: Ns) -> StackId {
        span_stack_at(&self.spans, tid, t)
    }

    /// The latest blocking call (sync or wait) of `tid` that ended inside [t0, t1].
    pub fn blocking_in(&self, tid: u32, t0: Ns, t1: Ns, kind: ApiKind) -> Option<&ApiCall> {
        let hi = self.blocking.partition_point(|a| a.end <= t1);
        self.blocking[..hi]
            .iter()
            .rev()
            .take_while(|a| a.end >= t0)
            .find(|a| a.tid == tid && a.kind == kind)
    }
}

/// Innermost CPU span stack on thread `tid` at time `t` among `spans` (0 when none).
fn span_stack_at(spans: &HashMap<u32, Vec<Span>>, tid: u32, t: Ns) -> StackId {
    let Some(spans) = spans.get(&tid) else {
        return 0;
    };
    let i = spans.partition_point(|s| s.start <= t);
    if i == 0 {
        return 0;
    }
    let mut j = (i - 1) as u32;
    let mut guard = 0;
    while j != u32::MAX && guard < 4096 {
        let s = &spans[j as usize];
        if s.end >= t {
            return s.stack;
        }
        j = s.parent;
        guard += 1;
    }
    0
}

impl Process {
    /// Thread `tid`'s ranges, sorted by start.
    pub fn ranges_of(&self, tid: u32) -> &[Range] {
        self.ranges.get(&tid).map_or(&[], |v| v.as_slice())
    }

    /// Sets thread `tid`'s ranges from a trace (stacks are left alone: the trace's spans hold
    /// the ranges already).
    pub fn set_ranges(&mut self, tid: u32, v: Vec<Range>) {
        if !v.is_empty() {
            self.ranges.insert(tid, nested(v));
        }
    }

    /// Sets the GPU-side ranges of stream `stream` of device `device` (Kineto's
    /// `gpu_user_annotation`).
    pub fn set_gpu_ranges(&mut self, device: u32, stream: u32, v: Vec<Range>) {
        if !v.is_empty() {
            self.gpu_ranges.insert((device, stream), nested(v));
        }
    }

    /// The ranges of `v` that overlap `[lo, hi)`, in order, with their indices in `v`.
    pub fn overlapping(v: &[Range], lo: Ns, hi: Ns) -> impl Iterator<Item = (usize, &Range)> {
        let a = v.partition_point(|r| r.start < lo);
        let b = v.partition_point(|r| r.start < hi).max(a);
        let open = open_before(v, a, lo);
        open.into_iter()
            .chain(a..b)
            .map(move |j| (j, &v[j]))
            .filter(move |(_, r)| r.end > lo)
    }

    /// The ranges of thread `tid` open at `t` (start ≤ t < end), outermost first.
    pub fn ranges_at(&self, tid: u32, t: Ns) -> Vec<&Range> {
        let v = self.ranges_of(tid);
        let i = v.partition_point(|r| r.start <= t);
        open_before(v, i, t).into_iter().map(|j| &v[j]).collect()
    }

    /// Whether the process has ranges of any thread or stream.
    pub fn has_ranges(&self) -> bool {
        !self.ranges.is_empty() || !self.gpu_ranges.is_empty()
    }
}

#[cfg(test)]
mod states_tests {
    use super::*;

    fn off(start: Ns, end: Ns) -> OffCpu {
        OffCpu::blocked(start, end)
    }

    #[test]
    fn stretches_off_the_cpu_are_found_by_the_time_they_overlap() {
        let mut pr = Process::default();
        assert!(!pr.switches);
        pr.add_states(8, &[]);
        assert!(pr.switches, "an empty batch says they are recorded");
        pr.add_states(8, &[off(10, 20), off(30, 40)]);
        pr.add_states(8, &[off(25, 28)]);
        let starts = |t0, t1| {
            pr.states_in(8, t0, t1)
                .iter()
                .map(|x| x.start)
                .collect::<Vec<_>>()
        };
        assert_eq!(starts(0, 100), [10, 25, 30]);
        assert_eq!(starts(20, 30), [25]);
        assert_eq!(starts(15, 26), [10, 25]);
        assert_eq!(starts(40, 50), Vec::<Ns>::new());
        assert!(pr.states_in(9, 0, 100).is_empty());
    }
}

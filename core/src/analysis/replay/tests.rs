//! The replay on small stores built here: unchanged, it gives back every measured time; a
//! longer CPU segment, op or stall moves what depends on it by the right amount and nothing
//! else.

use super::*;
use crate::model::records::{
    ApiCall, ApiKind, GpuOp, LaneKey, NameId, Ns, OpKind, StackId, FLAG_COMM,
};
use crate::model::store::Store;

const US: Ns = 1_000;

/// A store and the ids it hands out.
struct Prog {
    st: Store,
    corr: u32,
}

impl Prog {
    fn new(procs: u32) -> Prog {
        let mut st = Store::default();
        for p in 0..procs {
            st.add_process(100 + p, p as i32, "t");
        }
        Prog { st, corr: 0 }
    }

    fn lane(&mut self, proc: u32, stream: u32) -> usize {
        self.st.lane_id(LaneKey {
            proc,
            device: 0,
            stream,
        })
    }

    fn call(&mut self, proc: u32, tid: u32, name: &str, kind: ApiKind, at: Ns, dur: Ns) -> u32 {
        self.corr += 1;
        let name = self.st.names.intern(name);
        self.st.add_api(
            proc,
            ApiCall {
                start: at,
                end: at + dur,
                corr: self.corr,
                tid,
                name,
                stack: 0,
                kind,
            },
        );
        self.corr
    }

    /// A launch call at `at` (2 µs) of an op on `lane` from `start` for `dur`.
    fn launch(&mut self, proc: u32, tid: u32, lane: usize, at: Ns, start: Ns, dur: Ns) {
        let corr = self.call(proc, tid, "cudaLaunchKernel", ApiKind::Launch, at, 2 * US);
        let name = self.st.names.intern("k");
        self.st.add_op(
            lane,
            GpuOp::new(start, start + dur, OpKind::Kernel, name, corr),
        );
    }

    fn comm(&mut self, proc: u32, lane: usize, at: Ns, start: Ns, end: Ns) {
        let corr = self.call(proc, 1, "cudaLaunchKernel", ApiKind::Launch, at, 2 * US);
        let name = self
            .st
            .names
            .intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL");
        let mut op = GpuOp::new(start, end, OpKind::Kernel, name, corr);
        op.flags = FLAG_COMM;
        self.st.add_op(lane, op);
    }

    fn model(&self) -> Model {
        let mut key = |_: StackId, _: NameId, _: NameId| String::new();
        build(&self.st, Ns::MIN, Ns::MAX, &mut key)
    }
}

/// The model's measured times.
fn measured(m: &Model) -> Times {
    Times {
        call_start: m.calls.iter().map(|c| c.start).collect(),
        call_end: m.calls.iter().map(|c| c.end).collect(),
        op_start: m.ops.iter().map(|o| o.start).collect(),
        op_end: m.ops.iter().map(|o| o.end).collect(),
        forced: 0,
    }
}

fn assert_same(a: &Times, b: &Times) {
    assert_eq!(a.call_start, b.call_start, "call starts");
    assert_eq!(a.call_end, b.call_end, "call ends");
    assert_eq!(a.op_start, b.op_start, "op starts");
    assert_eq!(a.op_end, b.op_end, "op ends");
}

/// `p`'s model, checked to replay unchanged to what was measured, and its first call of
/// `kind`.
fn checked(p: &Prog, kind: ApiKind) -> (Model, usize) {
    let m = p.model();
    assert_same(&run(&m), &measured(&m));
    let c = m.calls.iter().position(|c| c.kind == kind).unwrap();
    (m, c)
}

/// Two launching threads, each with its stream: thread 1 launch-bound (a 5 µs kernel every
/// 10 µs), thread 2 on another stream, 3 µs later each time.
fn two_threads() -> Prog {
    let mut p = Prog::new(1);
    let (a, b) = (p.lane(0, 7), p.lane(0, 8));
    for i in 0..8 {
        let t = i * 10 * US;
        p.launch(0, 1, a, t, t + 4 * US, 5 * US);
        p.launch(0, 2, b, t + 3 * US, t + 7 * US, 3 * US);
    }
    p
}

#[test]
fn unchanged_replay_gives_back_every_measured_time() {
    let p = two_threads();
    let m = p.model();
    assert_eq!((m.calls.len(), m.ops.len(), m.threads.len()), (16, 16, 2));
    let t = run(&m);
    assert_eq!(t.forced, 0);
    assert_same(&t, &measured(&m));
}

#[test]
fn a_longer_cpu_segment_moves_what_depends_on_it_and_nothing_else() {
    let p = two_threads();
    let mut m = p.model();
    let before = run(&m);
    // Thread 1's fourth call comes 50 µs later.
    let th = m.threads.iter().position(|t| t.tid == 1).unwrap();
    let (first, last) = (m.threads[th].first as usize, m.threads[th].last as usize);
    m.calls[first + 3].seg += 50 * US;
    let after = run(&m);
    for c in 0..m.calls.len() {
        let moved = (first + 3..last).contains(&c);
        let d = after.call_start[c] - before.call_start[c];
        assert_eq!(d, if moved { 50 * US } else { 0 }, "call {c}");
    }
    for (j, o) in m.ops.iter().enumerate() {
        let moved = o.call as usize >= first + 3 && (o.call as usize) < last;
        let d = after.op_start[j] - before.op_start[j];
        assert_eq!(d, if moved { 50 * US } else { 0 }, "op {j}");
        assert_eq!(after.op_end[j] - after.op_start[j], o.end - o.start);
    }
}

#[test]
fn a_queued_op_follows_the_op_before_it() {
    // Three launches 2 µs apart of 20 µs kernels: the second and third queue.
    let mut p = Prog::new(1);
    let a = p.lane(0, 7);
    p.launch(0, 1, a, 0, 4 * US, 20 * US);
    p.launch(0, 1, a, 3 * US, 25 * US, 20 * US);
    p.launch(0, 1, a, 6 * US, 46 * US, 20 * US);
    let mut m = p.model();
    assert_same(&run(&m), &measured(&m));
    // The first kernel 10 µs shorter: the queued ones start 10 µs earlier, the CPU is as it was.
    m.ops[0].dur -= 10 * US;
    let t = run(&m);
    assert_eq!(t.op_start, vec![4 * US, 15 * US, 36 * US]);
    assert_eq!(t.call_start, vec![0, 3 * US, 6 * US]);
}

/// `.item()`: a copy to pageable host memory (`cudaMemcpyAsync`, synchronous there) returns
/// after its op, which waited for the kernel before it; what follows waits for the copy. An
/// asynchronous copy (one that returned before its op ended) waits for nothing.
#[test]
fn a_blocking_copy_to_the_host_waits_for_its_op() {
    let mut p = Prog::new(1);
    let a = p.lane(0, 7);
    p.launch(0, 1, a, 0, 4 * US, 100 * US);
    // The copy's call at 10 µs; its op queued behind the kernel (104 to 106 µs); the call
    // returns 3 µs after it.
    let corr = p.call(0, 1, "cudaMemcpyAsync", ApiKind::Copy, 10 * US, 99 * US);
    let name = p.st.names.intern("Memcpy DtoH (Device -> Pageable)");
    p.st.add_op(
        a,
        GpuOp::new(104 * US, 106 * US, OpKind::Memcpy, name, corr),
    );
    p.launch(0, 1, a, 115 * US, 119 * US, 5 * US);
    let (mut m, copy) = checked(&p, ApiKind::Copy);
    assert_eq!(m.calls[copy].wait, 1, "the copy waited for its own op");
    assert_eq!(m.calls[copy].tail, 3 * US);
    // A longer kernel delays the copy, its return, and the launch after it.
    m.ops[0].dur += 20 * US;
    let t = run(&m);
    assert_eq!(t.call_end[copy], 129 * US);
    assert_eq!(t.call_start[copy + 1], 135 * US);
    assert_eq!(t.op_start[2], 139 * US);

    // The same copy returning before its op ended was asynchronous: no wait.
    let mut p = Prog::new(1);
    let a = p.lane(0, 7);
    p.launch(0, 1, a, 0, 4 * US, 100 * US);
    let corr = p.call(0, 1, "cudaMemcpyAsync", ApiKind::Copy, 10 * US, 3 * US);
    p.st.add_op(
        a,
        GpuOp::new(104 * US, 106 * US, OpKind::Memcpy, name, corr),
    );
    let (m, copy) = checked(&p, ApiKind::Copy);
    assert_eq!(m.calls[copy].wait, NONE);
}

#[test]
fn a_sync_waits_for_its_op_and_what_follows_waits_for_the_sync() {
    // A 100 µs kernel, a sync that returns 2 µs after it ends, then a launch.
    let mut p = Prog::new(1);
    let a = p.lane(0, 7);
    p.launch(0, 1, a, 0, 4 * US, 100 * US);
    p.call(
        0,
        1,
        "cudaStreamSynchronize",
        ApiKind::Sync,
        3 * US,
        103 * US,
    );
    p.launch(0, 1, a, 108 * US, 112 * US, 5 * US);
    let (mut m, sync) = checked(&p, ApiKind::Sync);
    assert_eq!(m.calls[sync].wait, 0, "the sync waited for the first op");
    m.ops[0].dur += 20 * US;
    let t = run(&m);
    assert_eq!(t.call_end[sync], 126 * US);
    assert_eq!(t.op_start[1], 132 * US);
    // Without the sync the launch follows the CPU: 2 µs after the sync's call began.
    m.calls[sync].wait = NONE;
    m.calls[sync].own = 0;
    let t = run(&m);
    assert_eq!(t.call_start[sync + 1], 3 * US + m.calls[sync + 1].seg);
}

#[test]
fn an_event_wait_on_another_stream_is_kept() {
    // Stream 8's op waits for stream 7's 50 µs op (it starts 1 µs after that one ends, long
    // after its launch).
    let mut p = Prog::new(1);
    let (a, b) = (p.lane(0, 7), p.lane(0, 8));
    p.launch(0, 1, a, 0, 4 * US, 50 * US);
    p.launch(0, 1, b, 3 * US, 7 * US, 2 * US);
    p.launch(0, 1, b, 6 * US, 55 * US, 5 * US);
    let mut m = p.model();
    assert_same(&run(&m), &measured(&m));
    let waits = m
        .ops
        .iter()
        .position(|o| o.dep != NONE)
        .expect("a dependency");
    assert_eq!(m.ops[waits].start, 55 * US);
    m.ops[0].dur += 30 * US;
    let t = run(&m);
    assert_eq!(t.op_start[waits], 85 * US);
}

#[test]
fn a_collective_ends_when_its_last_rank_arrives() {
    // Two ranks: rank 0 arrives at 4 µs, rank 1 at 54 µs; both end at 64 µs; each launches a
    // kernel at 70 µs after.
    let mut p = Prog::new(2);
    let (a, b) = (p.lane(0, 7), p.lane(1, 7));
    p.launch(1, 1, b, 0, 4 * US, US);
    p.comm(0, a, 0, 4 * US, 64 * US);
    p.comm(1, b, 50 * US, 54 * US, 64 * US);
    p.launch(0, 1, a, 70 * US, 74 * US, 5 * US);
    p.launch(1, 1, b, 70 * US, 74 * US, 5 * US);
    let mut m = p.model();
    assert_eq!(m.groups.len(), 1);
    assert_same(&run(&m), &measured(&m));
    // Rank 1 comes 30 µs later: both ranks' all-reduce ends 30 µs later.
    let late = m
        .calls
        .iter()
        .position(|c| m.threads[c.thread as usize].proc == 1 && c.start == 50 * US)
        .unwrap();
    m.calls[late].seg += 30 * US;
    let t = run(&m);
    let comm: Vec<usize> = (0..m.ops.len())
        .filter(|&j| m.ops[j].group != NONE)
        .collect();
    for &j in &comm {
        assert_eq!(t.op_end[j], 94 * US, "op {j}");
    }
}

#[test]
fn an_op_queued_behind_its_stream_and_waiting_on_another_follows_the_other() {
    // Stream 7: P runs to 100 µs; X, launched at 50 µs (its stream busy then), waits on an
    // event of stream 8's D, which ends at 500 µs: X starts at 501 µs.
    let mut p = Prog::new(1);
    let (a, b) = (p.lane(0, 7), p.lane(0, 8));
    p.launch(0, 1, a, 0, 4 * US, 96 * US);
    p.launch(0, 1, b, 10 * US, 14 * US, 486 * US);
    p.launch(0, 1, a, 50 * US, 501 * US, 5 * US);
    let mut m = p.model();
    assert_same(&run(&m), &measured(&m));
    let x = m.ops.iter().position(|o| o.start == 501 * US).unwrap();
    let d = m.ops.iter().position(|o| o.start == 14 * US).unwrap();
    assert_eq!(m.ops[x].dep, d as u32);
    // D 300 µs shorter: X follows it, 300 µs earlier.
    m.ops[d].dur -= 300 * US;
    let t = run(&m);
    assert_eq!(t.op_start[x], 201 * US);
}

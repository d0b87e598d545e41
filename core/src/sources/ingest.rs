//! Turns wire frames from collector connections into store records.
//!
//! Each connection (one profiled process) has its own name and stack id spaces; this maps them
//! onto the store's shared interner and stack table.

use std::collections::HashMap;

use gaptop_wire::{Frame, OP_MEMCPY, OP_MEMSET};

use crate::frames::display::{demangle, short_path, Demangled};
use crate::frames::is_comm_kernel;
use crate::model::plausible::{wire_ns, Track, What};
use crate::model::ranges::Range;
use crate::model::records::{
    ApiCall, ApiKind, CpuSample, GpuOp, LaneKey, NameId, Ns, OpKind, StackId, FLAG_COMM,
};
use crate::model::store::Store;
use gaptop_wire::stackframe::{is_native_address, StackFrame};

#[derive(Default)]
struct Conn {
    proc: Option<u32>,
    /// The viewer's CPU sampler's stream, and its sampling period.
    sampler: Option<u32>,
    names: HashMap<u32, NameId>,
    stacks: HashMap<u32, StackId>,
    comm: HashMap<u32, bool>,
    /// The plausible span of the connection's times (`model::plausible`).
    track: Track,
}

/// The times of a frame's records `Track::frame` reads: those of the records whose shape is
/// plausible, where the track places them.
fn frame_times(what: What, records: impl Iterator<Item = (u64, u64)>) -> Vec<Ns> {
    records
        .map(|(s, e)| (wire_ns(s), wire_ns(e)))
        .filter(|&(s, e)| crate::model::plausible::shape(what, s, e).is_none())
        .map(|(s, e)| Track::time_of(what, s, e))
        .collect()
}

#[derive(Default)]
pub struct Ingest {
    conns: HashMap<u32, Conn>,
    symbols: super::symbols::Symbolizer,
    /// The store's processes from this index on are this source's: its pids name only them.
    procs_from: u32,
}

impl Ingest {
    pub fn new() -> Self {
        Self::default()
    }

    /// An ingest of a source whose processes are added after `store`'s (one node's recording
    /// of several): its pids never name the processes already there.
    pub fn after(store: &Store) -> Self {
        Ingest {
            procs_from: store.procs.len() as u32,
            ..Self::default()
        }
    }

    /// The store process of a connection, once its hello arrived.
    pub fn proc_of(&self, conn: u32) -> Option<u32> {
        self.conns.get(&conn).and_then(|c| c.proc)
    }

    /// Applies one frame. Frames that reference unknown ids are kept with placeholders and
    /// counted under `store.skipped`.
    pub fn apply(&mut self, store: &mut Store, conn: u32, f: Frame) {
        let from = self.procs_from;
        if let Frame::Cost(cost) = f {
            store.launch_cost.get_or_insert(cost);
            return;
        }
        let c = self.conns.entry(conn).or_default();
        if let Frame::Sampler { period_ns } = f {
            if c.proc.is_none() && c.sampler.is_none() {
                c.sampler = Some(period_ns);
            } else {
                store.skip("repeated sampler hello");
            }
            return;
        }
        if let Some(period) = c.sampler {
            match f {
                Frame::Name { .. } | Frame::Stack { .. } => {}
                Frame::Samples { pid, samples } => {
                    Self::samples(c, store, from, pid, period, samples);
                    return;
                }
                Frame::States { pid, states } => {
                    Self::states(c, store, from, pid, states);
                    return;
                }
                _ => {
                    store.skip("collector frame on the sampler's stream");
                    return;
                }
            }
        }
        let proc = match (&f, c.proc) {
            (Frame::Hello(h), None) => {
                let p = store.add_process_from(from, h.pid, h.rank, &h.label);
                c.proc = Some(p);
                return;
            }
            (Frame::Hello(_), Some(_)) => {
                store.skip("repeated hello");
                return;
            }
            (_, Some(p)) => p,
            // A sampler's names and stacks need no process.
            (Frame::Name { .. } | Frame::Stack { .. }, None) if c.sampler.is_some() => 0,
            (_, None) => {
                store.skip("frame before hello");
                return;
            }
        };
        match f {
            Frame::Hello(_) | Frame::Cost(_) => {}
            Frame::Name { id, text } => {
                let d = if is_native_address(&text) {
                    self.symbols.resolve(&text)
                } else if StackFrame::parse(&text).py_source().is_some() {
                    short_path(&text)
                } else {
                    demangle(&text, Demangled::Whole)
                };
                c.comm.insert(id, is_comm_kernel(&d));
                let n = store.names.intern(&d);
                c.names.insert(id, n);
            }
            Frame::Stack { id, parent, frame } => {
                let p = if parent == 0 {
                    0
                } else {
                    match c.stacks.get(&parent) {
                        Some(&p) => p,
                        None => {
                            store.skip("unknown parent stack");
                            0
                        }
                    }
                };
                let fr = c.names.get(&frame).copied().unwrap_or(0);
                // CPython's entry shims carry no information: the stack is its parent's.
                let s = if store.names.get(fr).starts_with("<shim>") {
                    p
                } else {
                    store.stacks.intern(p, fr)
                };
                c.stacks.insert(id, s);
            }
            Frame::Ops(ops) => {
                let mut by_lane: Vec<(usize, Vec<GpuOp>)> = Vec::new();
                let mut times = frame_times(What::GpuOp, ops.iter().map(|o| (o.start, o.end)));
                c.track.frame(&mut times);
                for o in ops {
                    let kind = match o.kind {
                        OP_MEMCPY => OpKind::Memcpy,
                        OP_MEMSET => OpKind::Memset,
                        _ => OpKind::Kernel,
                    };
                    let (start, end) = (wire_ns(o.start), wire_ns(o.end));
                    if let Some(v) = c.track.judge(What::GpuOp, start, end) {
                        let name = match c.names.get(&o.name) {
                            Some(&n) => n,
                            None => store.names.intern(kind.as_str()),
                        };
                        store.drop_implausible(What::GpuOp, v, name);
                        continue;
                    }
                    let name = match c.names.get(&o.name) {
                        Some(&n) => n,
                        None => {
                            if o.name != 0 {
                                store.skip("unknown name id");
                            }
                            store.names.intern(kind.as_str())
                        }
                    };
                    let mut op = GpuOp::new(start, end, kind, name, o.corr);
                    op.graph = o.graph;
                    if c.comm.get(&o.name).copied().unwrap_or(false) {
                        op.flags |= FLAG_COMM;
                    }
                    let lane = store.lane_id(LaneKey {
                        proc,
                        device: o.device as u32,
                        stream: o.stream,
                    });
                    match by_lane.iter_mut().find(|(l, _)| *l == lane) {
                        Some((_, v)) => v.push(op),
                        None => by_lane.push((lane, vec![op])),
                    }
                }
                for (lane, mut v) in by_lane {
                    store.add_ops(lane, &mut v);
                }
            }
            Frame::Apis(apis) => {
                let mut times = frame_times(What::ApiCall, apis.iter().map(|a| (a.start, a.end)));
                c.track.frame(&mut times);
                for a in apis {
                    let (start, end) = (wire_ns(a.start), wire_ns(a.end));
                    if let Some(v) = c.track.judge(What::ApiCall, start, end) {
                        let name = c.names.get(&a.name).copied().unwrap_or(0);
                        store.drop_implausible(What::ApiCall, v, name);
                        continue;
                    }
                    // Recordings from collectors that still sent repeats of a runtime call.
                    if gaptop_wire::repeats_outer_call(a.corr, a.outer_corr) {
                        continue;
                    }
                    // A synchronization from CUPTI's activity records (no thread) that a
                    // callback already timed, with its thread and stack, is the same call.
                    if a.tid == 0 && store.procs[proc as usize].api_by_corr(a.corr).is_some() {
                        continue;
                    }
                    let name = c.names.get(&a.name).copied().unwrap_or(0);
                    let stack = if a.stack == 0 {
                        0
                    } else {
                        c.stacks.get(&a.stack).copied().unwrap_or(0)
                    };
                    let mut kind = ApiKind::from_wire(a.kind);
                    if kind == ApiKind::Other && name != 0 {
                        kind = ApiKind::classify(store.names.get(name));
                    }
                    let stack = store.with_range_frames(proc, a.tid, start, stack);
                    store.add_api(
                        proc,
                        ApiCall {
                            start,
                            end,
                            corr: a.corr,
                            tid: a.tid,
                            name,
                            stack,
                            kind,
                        },
                    );
                }
            }
            Frame::Stats(s) => {
                store.procs[proc as usize].stats = s;
                store.dropped = store
                    .procs
                    .iter()
                    .map(|p| p.stats.collector_dropped + p.stats.cupti_dropped)
                    .sum();
                store.generation += 1;
            }
            Frame::Bye { .. } => {
                store.procs[proc as usize].ended = true;
                store.generation += 1;
            }
            Frame::Ranges(ranges) => Self::ranges(c, store, proc, ranges),
            Frame::Sampler { .. } | Frame::Samples { .. } | Frame::States { .. } => {
                store.skip("sampler frame on a collector's stream");
            }
        }
    }

    /// Adds a collector's NVTX ranges to its process, thread by thread: they become frames of
    /// the calls they enclose (`Store::add_ranges`).
    fn ranges(c: &mut Conn, store: &mut Store, proc: u32, ranges: Vec<gaptop_wire::Range>) {
        let mut by_tid: Vec<(u32, Vec<Range>)> = Vec::new();
        let mut times = frame_times(What::Range, ranges.iter().map(|r| (r.start, r.end)));
        c.track.frame(&mut times);
        for r in ranges {
            let name = c.names.get(&r.name).copied().unwrap_or(0);
            let (start, end) = (wire_ns(r.start), wire_ns(r.end));
            if let Some(v) = c.track.judge(What::Range, start, end) {
                store.drop_implausible(What::Range, v, name);
                continue;
            }
            let domain = c.names.get(&r.domain).copied().unwrap_or(0);
            let x = Range::new(start, end, name, domain);
            match by_tid.iter_mut().find(|(t, _)| *t == r.tid) {
                Some((_, v)) => v.push(x),
                None => by_tid.push((r.tid, vec![x])),
            }
        }
        for (tid, v) in by_tid {
            store.add_ranges(proc, tid, v);
        }
    }

    /// Adds a batch of the sampler's CPU samples of process `pid` to the store.
    fn samples(
        c: &mut Conn,
        store: &mut Store,
        from: u32,
        pid: u32,
        period: u32,
        samples: Vec<gaptop_wire::Sample>,
    ) {
        let proc = store.process_for_samples(from, pid);
        store.procs[proc as usize].sample_period_ns = period as i64;
        let mut by_tid: Vec<(u32, Vec<CpuSample>)> = Vec::new();
        let mut times = frame_times(What::CpuSample, samples.iter().map(|x| (x.time, x.time)));
        c.track.frame(&mut times);
        for x in samples {
            let time = wire_ns(x.time);
            if let Some(v) = c.track.judge(What::CpuSample, time, time) {
                store.drop_implausible(What::CpuSample, v, 0);
                continue;
            }
            let stack = c.stacks.get(&x.stack).copied().unwrap_or(0);
            let s = CpuSample { time, stack };
            match by_tid.iter_mut().find(|(t, _)| *t == x.tid) {
                Some((_, v)) => v.push(s),
                None => by_tid.push((x.tid, vec![s])),
            }
        }
        for (tid, v) in by_tid {
            store.add_samples(proc, tid, &v);
        }
    }

    /// Adds the sampler's stretches of threads off their CPU (`model::states`), their
    /// names and stacks mapped to the store's; an empty batch marks the process's switches as
    /// recorded.
    fn states(
        c: &mut Conn,
        store: &mut Store,
        from: u32,
        pid: u32,
        states: Vec<gaptop_wire::ThreadState>,
    ) {
        use crate::model::states::{OffCpu, OffKind};
        let proc = store.process_for_samples(from, pid);
        let mut by_tid: Vec<(u32, Vec<OffCpu>)> = Vec::new();
        let mut times = frame_times(What::CpuSample, states.iter().map(|x| (x.start, x.end)));
        c.track.frame(&mut times);
        for x in states {
            let (start, end) = (wire_ns(x.start), wire_ns(x.end));
            if let Some(v) = c.track.judge(What::CpuSample, start, end) {
                store.drop_implausible(What::CpuSample, v, 0);
                continue;
            }
            let Some(kind) = OffKind::from_wire(x.kind) else {
                store.skip("thread state of an unknown kind");
                continue;
            };
            let name = |id: u32| c.names.get(&id).copied().unwrap_or(0);
            let stack = |id: u32| c.stacks.get(&id).copied().unwrap_or(0);
            let s = OffCpu {
                start,
                end,
                kind,
                call: name(x.call),
                stack: stack(x.stack),
                holder: x.holder,
                holder_name: name(x.holder_name),
                holder_stack: stack(x.holder_stack),
            };
            match by_tid.iter_mut().find(|(t, _)| *t == x.tid) {
                Some((_, v)) => v.push(s),
                None => by_tid.push((x.tid, vec![s])),
            }
        }
        let p = &mut store.procs[proc as usize];
        p.add_states(0, &[]);
        for (tid, v) in by_tid {
            p.add_states(tid, &v);
        }
        store.generation += 1;
    }

    /// Marks a connection's process as ended (its socket closed).
    pub fn close(&mut self, store: &mut Store, conn: u32) {
        if let Some(p) = self.proc_of(conn) {
            store.procs[p as usize].ended = true;
            store.generation += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store and an ingest with connection 1 greeted.
    fn connected() -> (Store, Ingest) {
        let mut st = Store::default();
        let mut ing = Ingest::new();
        ing.apply(
            &mut st,
            1,
            Frame::Hello(gaptop_wire::Hello::new(1, -1, "x")),
        );
        (st, ing)
    }

    /// Found by the fuzzer: ops with garbage timestamps overflowed the busy sums.
    #[test]
    fn implausible_timestamps_are_skipped_and_counted() {
        let (mut st, mut ing) = connected();
        let op = |start: u64, end: u64| gaptop_wire::Op {
            start,
            end,
            ..Default::default()
        };
        ing.apply(
            &mut st,
            1,
            Frame::Ops(vec![
                op(10, 20),
                op(u64::MAX - 5, u64::MAX),
                op(50, 40),
                op(0, 1 << 61),
                op(30, 35),
            ]),
        );
        assert_eq!(st.op_count(), 2);
        for why in [
            "with an implausible time",
            "ending before it starts",
            "longer than an hour",
        ] {
            assert_eq!(st.skipped.get(&format!("GPU op {why}")), Some(&1), "{why}");
        }
        assert_eq!(st.lanes[0].busy_in(0, 100), 15);
    }

    /// CUPTI's synchronization records (no thread) describe calls the callbacks usually timed
    /// already: those are not counted twice; the ones no callback saw are kept.
    #[test]
    fn activity_syncs_fill_in_only_what_callbacks_missed() {
        let (mut st, mut ing) = connected();
        let api = |corr: u32, tid: u32| gaptop_wire::Api {
            start: 100,
            end: 200,
            corr,
            tid,
            kind: gaptop_wire::API_SYNC,
            ..Default::default()
        };
        ing.apply(&mut st, 1, Frame::Apis(vec![api(7, 42)]));
        ing.apply(&mut st, 1, Frame::Apis(vec![api(7, 0), api(8, 0)]));
        let p = &st.procs[0];
        assert_eq!(p.api_count(), 2);
        assert_eq!(
            p.api_by_corr(7).unwrap().tid,
            42,
            "the callback's call, with its thread"
        );
        assert_eq!(p.api_by_corr(8).unwrap().tid, 0);
        assert_eq!(p.blocking.len(), 2);
    }

    /// Recordings of earlier collectors hold each runtime launch twice: the driver call it made,
    /// under the same correlation id, and the call itself. Only the call is kept; a driver call
    /// under an id of its own stays, and is found by it.
    #[test]
    fn nested_driver_calls_under_the_runtime_calls_id_are_dropped() {
        let (mut st, mut ing) = connected();
        let api = |corr: u32, outer_corr: u32, start: u64| gaptop_wire::Api {
            start,
            end: start + 50,
            corr,
            tid: 42,
            outer_corr,
            kind: gaptop_wire::API_LAUNCH,
            ..Default::default()
        };
        // The nested call's record arrives first (its exit comes first).
        ing.apply(&mut st, 1, Frame::Apis(vec![api(7, 7, 100), api(7, 0, 90)]));
        ing.apply(
            &mut st,
            1,
            Frame::Apis(vec![api(9, 8, 200), api(8, 0, 190)]),
        );
        let p = &st.procs[0];
        assert_eq!(p.api_count(), 3);
        assert_eq!(p.api_by_corr(7).unwrap().start, 90, "the runtime call");
        assert_eq!(
            p.api_by_corr(9).unwrap().start,
            200,
            "its own id, its own record"
        );
        assert_eq!(p.api_by_corr(8).unwrap().start, 190);
    }

    /// Native frames arrive as module+offset and are named by the viewer.
    #[test]
    fn native_frame_names_are_resolved_on_arrival() {
        let (mut st, mut ing) = connected();
        ing.apply(
            &mut st,
            1,
            Frame::Name {
                id: 5,
                text: "native:/nonexistent/libfoo.so+0x1f".into(),
            },
        );
        assert!(st.names.lookup("libfoo.so+0x1f").is_some());
        assert!(st
            .names
            .lookup("native:/nonexistent/libfoo.so+0x1f")
            .is_none());
    }
}

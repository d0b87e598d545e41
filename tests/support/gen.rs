//! A generator of captures whose truth is known: a small program (each rank's Python calls, CPU
//! work and CUDA calls, a tree of [`Node`]s) is simulated on the model below and written as
//! torch.profiler (Kineto) Chrome-trace JSON, one file a rank; then simulated again without
//! each planted thing, so that what each one costs is known exactly.
//!
//! The model (the truth):
//! - One launching thread a rank. Its clock moves by CPU work ([`Node::Cpu`]), by
//!   [`Timing::frame_ns`] on entering each Python call (so that no launch starts where a
//!   call starts), and by its CUDA calls.
//! - A launch costs the CPU `launch_ns`. Its op is ready `latency_ns` after the call starts,
//!   and starts at the latest of: ready; the end of the previous op on its stream plus
//!   `spacing_ns`; the end of the op it waits on through an event, plus `spacing_ns`.
//! - `cudaEventRecord` and `cudaStreamWaitEvent` cost `call_ns` each: the next op launched
//!   on the waiting stream waits for the recording stream's last op launched before the
//!   record. The trace has Kineto's `cuda_sync` "Stream Wait Event" for it
//!   (`wait_on_stream`, `wait_on_cuda_event_record_corr_id`).
//! - `cudaStreamSynchronize` returns at the later of `call_ns` after it starts and
//!   `sync_tail_ns` after the end of the stream's last op.
//! - Collectives: a rank's NCCL kernel starts as any op; the k-th collective's kernels on
//!   every rank end together, `transfer_ns` after the last rank's kernel starts.
//!
//! Steps are the calls of the step function ([`Spec::step_frame`]), measured on rank 0 as
//! gaptop measures steps found from a function's calls: a step starts at its first op's start
//! and ends where the next one starts; the last ends at its last op's end.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

pub type Ns = i64;

/// The costs of the simulated machine's calls and queues.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    pub launch_ns: Ns,
    pub latency_ns: Ns,
    pub spacing_ns: Ns,
    pub sync_tail_ns: Ns,
    pub call_ns: Ns,
    pub frame_ns: Ns,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            launch_ns: 5_000,
            latency_ns: 4_000,
            spacing_ns: 1_000,
            sync_tail_ns: 2_000,
            call_ns: 2_000,
            frame_ns: 100,
        }
    }
}

/// One thing a rank's thread does.
#[derive(Clone, Debug)]
pub enum Node {
    /// A call of the Python function of this frame (`model.py(40): Layer.forward`).
    Call(String, Vec<Node>),
    /// CPU work, ns.
    Cpu(Ns),
    /// `cudaLaunchKernel` of a kernel of this name and duration on a stream.
    Launch(String, Ns, u32),
    /// An NCCL all-reduce on a stream, whose data takes this long once every rank is in.
    AllReduce(Ns, u32),
    /// The next op on `stream` waits for the last op so far on `on` (an event).
    WaitEvent { stream: u32, on: u32 },
    /// `cudaStreamSynchronize` of a stream.
    Sync(u32),
    /// `cudaGraphLaunch` of a graph of these kernels (name, duration, stream): one launch, all
    /// of them ready at once, each running after the one before on its stream.
    Graph(Vec<(String, Ns, u32)>),
}

pub fn call(frame: &str, body: Vec<Node>) -> Node {
    Node::Call(frame.to_string(), body)
}

pub fn launch(kernel: &str, dur: Ns) -> Node {
    Node::Launch(kernel.to_string(), dur, MAIN)
}

/// The default stream, and the second one.
pub const MAIN: u32 = 7;
pub const SIDE: u32 = 8;

pub const NCCL: &str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";
/// Where the clock of the simulation starts (ns; 1,000 s).
pub const T0: Ns = 1_000_000_000_000;

/// What one rank's simulation made.
#[derive(Clone, Debug, Default)]
pub struct Timeline {
    pub ops: Vec<Op>,
    pub apis: Vec<Api>,
    pub spans: Vec<Span>,
    /// The `cudaStreamWaitEvent`s: (stream, its correlation, the stream waited on, the
    /// record's correlation, when).
    pub waits: Vec<(u32, u64, u32, u64, Ns)>,
}

#[derive(Clone, Debug)]
pub struct Op {
    pub name: String,
    pub stream: u32,
    pub start: Ns,
    pub end: Ns,
    pub corr: u64,
    coll: Option<usize>,
}

#[derive(Clone, Debug)]
pub struct Api {
    pub name: &'static str,
    pub start: Ns,
    pub end: Ns,
    pub corr: u64,
}

/// A Python call: its frame, times, and the ops launched during it (indices into `ops`).
#[derive(Clone, Debug)]
pub struct Span {
    pub frame: String,
    pub start: Ns,
    pub end: Ns,
    pub ops: std::ops::Range<usize>,
}

#[derive(Clone, Copy)]
enum Act<'a> {
    Enter(&'a str),
    Exit,
    Leaf(&'a Node),
}

fn flatten<'a>(nodes: &'a [Node], out: &mut Vec<Act<'a>>) {
    for n in nodes {
        match n {
            Node::Call(f, body) => {
                out.push(Act::Enter(f));
                flatten(body, out);
                out.push(Act::Exit);
            }
            _ => out.push(Act::Leaf(n)),
        }
    }
}

/// A collective: its transfer time, the ranks' kernel starts so far, and its end once all are in.
struct Coll {
    transfer: Ns,
    starts: Vec<Ns>,
    end: Option<Ns>,
}

/// One rank's thread being simulated.
struct Thread<'a> {
    acts: Vec<Act<'a>>,
    pc: usize,
    t: Ns,
    tl: Timeline,
    open: Vec<usize>,
    /// Each stream's last op, and the op its next op waits on.
    last: HashMap<u32, usize>,
    waits_on: HashMap<u32, usize>,
    corr: u64,
    colls: usize,
}

impl Thread<'_> {
    fn end(&self, i: usize, colls: &[Coll]) -> Option<Ns> {
        match self.tl.ops[i].coll {
            Some(k) => colls[k].end,
            None => Some(self.tl.ops[i].end),
        }
    }

    /// When an op launched now on `stream` can start; None while that waits on a collective
    /// whose end is not known yet.
    fn start_on(&self, stream: u32, tm: &Timing, colls: &[Coll]) -> Option<Ns> {
        let mut s = self.t + tm.latency_ns;
        for dep in [self.last.get(&stream), self.waits_on.get(&stream)]
            .into_iter()
            .flatten()
        {
            s = s.max(self.end(*dep, colls)? + tm.spacing_ns);
        }
        Some(s)
    }

    fn api(&mut self, name: &'static str, dur: Ns) -> u64 {
        self.corr += 1;
        self.tl.apis.push(Api {
            name,
            start: self.t,
            end: self.t + dur,
            corr: self.corr,
        });
        self.t += dur;
        self.corr
    }

    /// Launches an op that starts and ends at these times (a collective's end comes later).
    fn launch(
        &mut self,
        tm: &Timing,
        name: &str,
        stream: u32,
        start: Ns,
        end: Ns,
        coll: Option<usize>,
    ) {
        let corr = self.api("cudaLaunchKernel", tm.launch_ns);
        self.push_op(name, stream, start, end, corr, coll);
        self.waits_on.remove(&stream);
    }

    /// An op of launch `corr`, the last so far on its stream.
    fn push_op(
        &mut self,
        name: &str,
        stream: u32,
        start: Ns,
        end: Ns,
        corr: u64,
        coll: Option<usize>,
    ) {
        self.tl.ops.push(Op {
            name: name.to_string(),
            stream,
            start,
            end,
            corr,
            coll,
        });
        self.last.insert(stream, self.tl.ops.len() - 1);
    }

    /// Does the next act; false when blocked on a collective (or done).
    fn act(&mut self, tm: &Timing, colls: &mut Vec<Coll>, ranks: usize) -> bool {
        let Some(&act) = self.acts.get(self.pc) else {
            return false;
        };
        match act {
            Act::Enter(f) => {
                self.open.push(self.tl.spans.len());
                let n = self.tl.ops.len();
                self.tl.spans.push(Span {
                    frame: f.to_string(),
                    start: self.t,
                    end: self.t,
                    ops: n..n,
                });
                self.t += tm.frame_ns;
            }
            Act::Exit => {
                let i = self.open.pop().unwrap();
                let s = &mut self.tl.spans[i];
                s.end = self.t;
                s.ops.end = self.tl.ops.len();
            }
            Act::Leaf(Node::Cpu(ns)) => self.t += ns,
            Act::Leaf(Node::Launch(name, dur, stream)) => {
                let Some(start) = self.start_on(*stream, tm, colls) else {
                    return false;
                };
                self.launch(tm, name, *stream, start, start + dur, None);
            }
            Act::Leaf(Node::AllReduce(transfer, stream)) => {
                let Some(start) = self.start_on(*stream, tm, colls) else {
                    return false;
                };
                let k = self.colls;
                self.colls += 1;
                if colls.len() <= k {
                    colls.push(Coll {
                        transfer: *transfer,
                        starts: Vec::new(),
                        end: None,
                    });
                }
                let c = &mut colls[k];
                assert_eq!(c.transfer, *transfer, "ranks disagree on collective {k}");
                c.starts.push(start);
                if c.starts.len() == ranks {
                    c.end = Some(c.starts.iter().max().unwrap() + c.transfer);
                }
                self.launch(tm, NCCL, *stream, start, 0, Some(k));
            }
            Act::Leaf(Node::WaitEvent { stream, on }) => {
                let rec = self.api("cudaEventRecord", tm.call_ns);
                let at = self.t;
                let corr = self.api("cudaStreamWaitEvent", tm.call_ns);
                self.tl.waits.push((*stream, corr, *on, rec, at));
                if let Some(&p) = self.last.get(on) {
                    self.waits_on.insert(*stream, p);
                }
            }
            Act::Leaf(Node::Sync(stream)) => {
                let mut end = self.t + tm.call_ns;
                if let Some(&p) = self.last.get(stream) {
                    let Some(e) = self.end(p, colls) else {
                        return false;
                    };
                    end = end.max(e + tm.sync_tail_ns);
                }
                let d = end - self.t;
                self.api("cudaStreamSynchronize", d);
            }
            Act::Leaf(Node::Graph(kernels)) => {
                let ready = self.t + tm.latency_ns;
                let corr = self.api("cudaGraphLaunch", tm.launch_ns);
                for (name, dur, stream) in kernels {
                    let mut start = ready;
                    if let Some(&p) = self.last.get(stream) {
                        start = start.max(self.tl.ops[p].end + tm.spacing_ns);
                    }
                    self.push_op(name, *stream, start, start + dur, corr, None);
                }
            }
            Act::Leaf(Node::Call(..)) => unreachable!("calls are flattened"),
        }
        self.pc += 1;
        true
    }
}

/// Simulates each rank's program (one a rank, all with the same collectives in the same
/// order) from [`T0`].
pub fn simulate(programs: &[Vec<Node>], tm: &Timing) -> Vec<Timeline> {
    let mut threads: Vec<Thread> = programs
        .iter()
        .map(|p| {
            let mut acts = Vec::new();
            flatten(p, &mut acts);
            Thread {
                acts,
                pc: 0,
                t: T0,
                tl: Timeline::default(),
                open: Vec::new(),
                last: HashMap::new(),
                waits_on: HashMap::new(),
                corr: 0,
                colls: 0,
            }
        })
        .collect();
    let mut colls: Vec<Coll> = Vec::new();
    let ranks = threads.len();
    // Each thread runs until it needs a collective's end that the others have not made yet.
    loop {
        let mut moved = false;
        for th in threads.iter_mut() {
            while th.act(tm, &mut colls, ranks) {
                moved = true;
            }
        }
        if threads.iter().all(|th| th.pc == th.acts.len()) {
            break;
        }
        assert!(moved, "the ranks' collectives do not match");
    }
    threads
        .into_iter()
        .map(|mut th| {
            for op in th.tl.ops.iter_mut() {
                if let Some(k) = op.coll {
                    op.end = colls[k].end.expect("a collective some rank never joined");
                }
            }
            th.tl
        })
        .collect()
}

/// Microseconds with three decimals, as Kineto writes them: exact in ns.
fn us(ns: Ns) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// A rank's timeline as a Kineto trace (`ranks` > 1 adds its `distributedInfo`). Written as
/// text, not built as a `serde_json::Value`: 64 ranks' traces take a second, not ten.
pub fn kineto(tl: &Timeline, rank: usize, ranks: usize) -> String {
    let (pid, dev) = (1000 + rank, rank);
    let mut ev: Vec<String> = Vec::new();
    let mut x = |cat: &str, name: &str, at: (usize, u32), (a, b): (Ns, Ns), args: String| {
        ev.push(format!(
            r#"{{"ph":"X","cat":"{cat}","name":{},"pid":{},"tid":{},"ts":{},"dur":{},"args":{{{args}}}}}"#,
            Value::from(name),
            at.0,
            at.1,
            us(a),
            us(b - a)
        ))
    };
    for s in &tl.spans {
        let cat = match s.frame.starts_with("ProfilerStep#") {
            true => "user_annotation",
            false => "python_function",
        };
        x(
            cat,
            &s.frame,
            (pid, pid as u32),
            (s.start, s.end),
            String::new(),
        );
    }
    for a in &tl.apis {
        let args = format!(r#""correlation":{}"#, a.corr);
        x(
            "cuda_runtime",
            a.name,
            (pid, pid as u32),
            (a.start, a.end),
            args,
        );
    }
    for o in &tl.ops {
        let args = format!(
            r#""device":{dev},"stream":{},"correlation":{}"#,
            o.stream, o.corr
        );
        x("kernel", &o.name, (dev, o.stream), (o.start, o.end), args);
    }
    for &(stream, corr, on, rec, at) in &tl.waits {
        let args = format!(
            r#""cuda_sync_kind":"Stream Wait Event","device":{dev},"stream":{stream},"correlation":{corr},"wait_on_stream":{on},"wait_on_cuda_event_record_corr_id":{rec}"#
        );
        x(
            "cuda_sync",
            "Stream Wait Event",
            (dev, stream),
            (at, at),
            args,
        );
    }
    let dist = match ranks > 1 {
        true => {
            format!(r#""distributedInfo":{{"backend":"nccl","rank":{rank},"world_size":{ranks}}},"#)
        }
        false => String::new(),
    };
    format!(
        r#"{{"schemaVersion":1,{dist}"deviceProperties":[{{"id":{dev},"name":"NVIDIA H200"}}],"traceEvents":[
{}
]}}"#,
        ev.join(",\n")
    )
}

/// A slow-down planted at `layer`'s first op (a stall: CPU time before its launch, in
/// `Model.stall`; a slow kernel: its duration times `factor`), on one rank or all.
#[derive(Clone, Copy, Debug)]
pub struct Plant {
    pub rank: Option<usize>,
    pub layer: usize,
    pub ns: Ns,
    pub factor: Ns,
}

/// The program's shape: a training loop (`epochs` > 1 nests the steps in `train_epoch`
/// calls), or decoding (`generate` calls, each of `steps` forward calls).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Shape {
    Train { epochs: usize },
    Decode { generates: usize },
}

/// A program easy to describe: `steps` iterations (a shape's unit) of `layers` layers of
/// `kernels` kernels each, with what is planted in it. Its frames: `train.py(10): <module>` ›
/// [`train.py(12): train_epoch` ›] `train.py(20): train_step` › `model.py(30): Model.forward`
/// › `model.py(40): Layer.forward` (training), or `<module>` › `loop.py(20): generate` ›
/// `Model.forward` › `Layer.forward` (decoding). A stall runs in `model.py(55): Model.stall`
/// (which then launches the layer's first kernel), the sync in `model.py(60): Model.item` at
/// the step's end, each all-reduce in `distributed.py(70): all_reduce`.
#[derive(Clone, Debug)]
pub struct Spec {
    pub shape: Shape,
    pub steps: usize,
    pub layers: usize,
    pub kernels: usize,
    pub kernel_ns: Ns,
    /// CPU work before each launch, and at each step's start.
    pub cpu_ns: Ns,
    pub step_cpu_ns: Ns,
    /// The first `warmup` steps do `warmup_ns` more CPU work (after their first layer).
    pub warmup: usize,
    pub warmup_ns: Ns,
    pub stall: Option<Plant>,
    pub slow: Option<Plant>,
    /// `Model.item` syncs the main stream at the end of each step.
    pub sync: bool,
    /// Each layer ends with a kernel on a second stream, after an event wait on the main one.
    pub side_stream: bool,
    pub ranks: usize,
    /// Each layer ends with an all-reduce of this transfer time (ranks > 1).
    pub allreduce_ns: Option<Ns>,
    /// Each step inside torch.profiler's `ProfilerStep#N` span (a `user_annotation`).
    pub markers: bool,
    /// What-if: each layer's kernels fused into one of their summed duration, launched once.
    pub fused: bool,
    /// What-if: each step's kernels one CUDA graph, launched once after the CPU work before the
    /// step's first launch (one rank, one stream, nothing planted).
    pub graphed: bool,
    /// Noise: (seed, max): each step starts with up to `max` ns more CPU work, drawn from the
    /// seed, so that two captures of one program differ as two runs would.
    pub jitter: Option<(u64, Ns)>,
    pub timing: Timing,
}

impl Spec {
    /// A one-rank training loop of `steps` steps, with small kernels (GPU-bound: 8 µs kernels
    /// against 5 µs launches and 1 µs of CPU).
    pub fn new(steps: usize, layers: usize, kernels: usize) -> Spec {
        Spec {
            shape: Shape::Train { epochs: 1 },
            steps,
            layers,
            kernels,
            kernel_ns: 8_000,
            cpu_ns: 1_000,
            step_cpu_ns: 20_000,
            warmup: 0,
            warmup_ns: 0,
            stall: None,
            slow: None,
            sync: false,
            side_stream: false,
            ranks: 1,
            allreduce_ns: None,
            markers: false,
            fused: false,
            graphed: false,
            jitter: None,
            timing: Timing::default(),
        }
    }

    /// The frame of the function each step is a call of.
    pub fn step_frame(&self) -> &'static str {
        match self.shape {
            Shape::Train { .. } => "train.py(20): train_step",
            Shape::Decode { .. } => "model.py(30): Model.forward",
        }
    }

    /// How many steps there are in all.
    pub fn total_steps(&self) -> usize {
        match self.shape {
            Shape::Train { epochs } => epochs * self.steps,
            Shape::Decode { generates } => generates * self.steps,
        }
    }

    fn layer(&self, rank: usize, l: usize) -> Node {
        let hits =
            |p: &Option<Plant>| p.filter(|p| p.layer == l && p.rank.is_none_or(|r| r == rank));
        let mut durs = vec![self.kernel_ns; self.kernels];
        if let Some(p) = hits(&self.slow) {
            durs[0] *= p.factor;
        }
        if self.fused {
            durs = vec![durs.iter().sum()];
        }
        let mut body = Vec::new();
        for (j, &d) in durs.iter().enumerate() {
            let name = if self.fused {
                "layer_fused(float*)".to_string()
            } else {
                format!("layer_kernel_{j}(float*)")
            };
            let k = vec![Node::Cpu(self.cpu_ns), Node::Launch(name, d, MAIN)];
            match hits(&self.stall) {
                Some(p) if j == 0 => {
                    let mut v = vec![Node::Cpu(p.ns)];
                    v.extend(k);
                    body.push(call("model.py(55): Model.stall", v));
                }
                _ => body.extend(k),
            }
        }
        if self.side_stream {
            body.push(Node::WaitEvent {
                stream: SIDE,
                on: MAIN,
            });
            body.push(Node::Cpu(self.cpu_ns));
            body.push(Node::Launch(
                "side_kernel(float*)".into(),
                self.kernel_ns,
                SIDE,
            ));
        }
        if let Some(tr) = self.allreduce_ns {
            let v = vec![Node::Cpu(self.cpu_ns), Node::AllReduce(tr, MAIN)];
            body.push(call("distributed.py(70): all_reduce", v));
        }
        call("model.py(40): Layer.forward", body)
    }

    /// Step `i`'s call. A warm-up step's extra CPU work comes after its first layer, so that
    /// it lengthens that step (work before a step's first op would lengthen the step before).
    fn step(&self, rank: usize, i: usize) -> Node {
        let mut layers: Vec<Node> = (0..self.layers).map(|l| self.layer(rank, l)).collect();
        if i < self.warmup {
            layers.insert(1.min(layers.len()), Node::Cpu(self.warmup_ns));
        }
        let cpu = self.step_cpu_ns + self.jitter.map_or(0, |(seed, max)| noise(seed, i, max));
        let mut body = vec![Node::Cpu(cpu)];
        if self.graphed {
            let kernels = (0..self.layers * self.kernels)
                .map(|j| {
                    let name = format!("layer_kernel_{}(float*)", j % self.kernels);
                    (name, self.kernel_ns, MAIN)
                })
                .collect();
            body.extend([Node::Cpu(self.cpu_ns), Node::Graph(kernels)]);
            layers.clear();
        }
        match self.shape {
            Shape::Train { .. } => body.push(call("model.py(30): Model.forward", layers)),
            Shape::Decode { .. } => body.extend(layers),
        }
        if self.sync {
            body.push(call("model.py(60): Model.item", vec![Node::Sync(MAIN)]));
        }
        let step = call(self.step_frame(), body);
        if self.markers {
            call(&format!("ProfilerStep#{i}"), vec![step])
        } else {
            step
        }
    }

    /// Rank `rank`'s program.
    pub fn program(&self, rank: usize) -> Vec<Node> {
        let mut i = 0;
        let mut steps = |n: usize| -> Vec<Node> {
            let v = (i..i + n).map(|k| self.step(rank, k)).collect();
            i += n;
            v
        };
        let body = match self.shape {
            Shape::Train { epochs: 1 } => steps(self.steps),
            Shape::Train { epochs } => (0..epochs)
                .map(|_| call("train.py(12): train_epoch", steps(self.steps)))
                .collect(),
            Shape::Decode { generates } => (0..generates)
                .map(|_| {
                    let mut v = vec![Node::Cpu(50_000)];
                    v.extend(steps(self.steps));
                    call("loop.py(20): generate", v)
                })
                .collect(),
        };
        vec![call("train.py(10): <module>", body)]
    }

    pub fn simulate(&self) -> Vec<Timeline> {
        let programs: Vec<_> = (0..self.ranks).map(|r| self.program(r)).collect();
        simulate(&programs, &self.timing)
    }

    /// Each step's time on rank 0 (see the module's docs).
    pub fn step_times(&self) -> Vec<Ns> {
        let tls = self.simulate();
        step_times(&tls[0], self.step_frame())
    }

    /// The mean time of the steps after the warm-up.
    pub fn steady_mean(&self) -> f64 {
        let v = self.step_times();
        let s = &v[self.warmup..];
        s.iter().sum::<Ns>() as f64 / s.len() as f64
    }
}

/// A number in [0, max) drawn from (seed, i) (SplitMix64's finalizer).
fn noise(seed: u64, i: usize, max: Ns) -> Ns {
    let mut z = seed
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(i as u64 + 1);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z % max.max(1) as u64) as Ns
}

/// The steps of a timeline: the calls of `frame`, from first op to the next call's first op.
pub fn step_times(tl: &Timeline, frame: &str) -> Vec<Ns> {
    let calls: Vec<(Ns, Ns)> = tl
        .spans
        .iter()
        .filter(|s| s.frame == frame && !s.ops.is_empty())
        .map(|s| {
            let ops = &tl.ops[s.ops.clone()];
            let first = ops.iter().map(|o| o.start).min().unwrap();
            let last = ops.iter().map(|o| o.end).max().unwrap();
            (first, last)
        })
        .collect();
    (0..calls.len())
        .map(|i| calls.get(i + 1).map_or(calls[i].1, |n| n.0) - calls[i].0)
        .collect()
}

/// What the generator knows of a capture it wrote.
#[derive(Clone, Debug)]
pub struct Truth {
    /// The trace (one rank) or the folder of the ranks' traces.
    pub path: PathBuf,
    pub steps: usize,
    pub warmup: usize,
    /// Each step's time (rank 0) and the mean over the steps after the warm-up.
    pub step_ns: Vec<Ns>,
    pub steady_mean_ns: f64,
    /// What each planted thing costs a steady step: `stall`, `slow`, `sync`, and `fuse` (each
    /// layer's launches fused into one): the mean step with it less the mean step without.
    pub costs: Vec<(&'static str, f64)>,
}

impl Truth {
    pub fn cost(&self, what: &str) -> f64 {
        self.costs
            .iter()
            .find(|c| c.0 == what)
            .unwrap_or_else(|| panic!("no {what} planted"))
            .1
    }
}

/// Simulates `spec`, writes its traces into `dir` (`trace.json`, or `rank-R.json` a rank),
/// and works out its truth.
pub fn generate(spec: &Spec, dir: &Path) -> Truth {
    let tls = spec.simulate();
    for (r, tl) in tls.iter().enumerate() {
        let name = if spec.ranks == 1 {
            "trace.json".to_string()
        } else {
            format!("rank-{r}.json")
        };
        let doc = kineto(tl, r, spec.ranks);
        std::fs::write(dir.join(name), doc).unwrap();
    }
    let step_ns = step_times(&tls[0], spec.step_frame());
    assert_eq!(step_ns.len(), spec.total_steps());
    let steady = &step_ns[spec.warmup..];
    let steady_mean_ns = steady.iter().sum::<Ns>() as f64 / steady.len() as f64;
    let mut costs = Vec::new();
    let mut without = |what: &'static str, f: &dyn Fn(&mut Spec)| {
        let mut s = spec.clone();
        f(&mut s);
        costs.push((what, steady_mean_ns - s.steady_mean()));
    };
    if spec.stall.is_some() {
        without("stall", &|s| s.stall.as_mut().unwrap().ns = 0);
    }
    if spec.slow.is_some() {
        without("slow", &|s| s.slow.as_mut().unwrap().factor = 1);
    }
    if spec.sync {
        without("sync", &|s| s.sync = false);
    }
    if spec.kernels > 1 && !spec.fused {
        without("fuse", &|s| s.fused = true);
    }
    let plain = spec.stall.is_none() && spec.slow.is_none() && !spec.side_stream;
    if plain && spec.ranks == 1 && !spec.fused && !spec.graphed {
        without("graph", &|s| s.graphed = true);
    }
    let path = if spec.ranks == 1 {
        dir.join("trace.json")
    } else {
        dir.to_path_buf()
    };
    Truth {
        path,
        steps: step_ns.len(),
        warmup: spec.warmup,
        step_ns,
        steady_mean_ns,
        costs,
    }
}

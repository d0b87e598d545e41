//! Fixes by pattern: what a launching site's evidence says about the cause of its gaps, and
//! the fix for that cause, with its reason in a line. This table is the one place the
//! patterns are kept; `docs/patterns.md` lists them for users.
//!
//! The evidence of a site (the code advice charges gaps to, `analysis::advice`):
//! - its *launch stacks*: the frames of the calls that launched the ops after its gaps (Python
//!   frames, native frames, a trace's CPU ops), each weighted by the gap time charged to it;
//! - its *CPU during the gaps*: the CPU samples of the launching thread taken during the gaps
//!   (`analysis::oncpu`), or, in a trace without samples, the spans that thread was in at each
//!   gap's middle, weighted by the gap's time;
//! - the *ops* its gaps were charged to.
//!
//! A pattern *holds* in the launch stacks or in the CPU when at least half of the weight holds
//! one of its frames. Patterns are tried in the table's order and the first that matches
//! names the cause; each applies only to the verdicts listed (a site that waits on a sync or
//! on another stream keeps that verdict's fix):
//!
//! | id | matches | verdicts |
//! | --- | --- | --- |
//! | `collective` | most of its ops are collectives (NCCL kernels), or its launch stacks hold `c10d`, `ProcessGroupNCCL`, `all_reduce`, a trace's `nccl:` op | host work, launch-bound, slow launch, sync, busy (a collective's kernel runs while it waits) |
//! | `per_shape_planning` | cuDNN or cuBLAS planning in the launch stacks or the CPU (`nvrtcCompileProgram`, `cudnnBackendFinalize`, a cuDNN `finalize`, `cudnnFind…`, cuBLASLt heuristics); or attention run by cuDNN (`sdpa`, `scaled_dot_product`, `cudnn_attention` with cuDNN kernels or frames) whose gaps are host work | host work, launch-bound, slow launch |
//! | `input_bound` | a DataLoader or dataset fetch (`torch/utils/data/`, `DataLoader`, `_MapDatasetFetcher`, a `…Dataset.__getitem__`) in the launch stacks or the CPU | host work, launch-bound, slow launch, sync |
//! | `single_tensor_optimizer` | `torch/optim`'s per-parameter loops (`_single_tensor_adam`, `_single_tensor_sgd`, …) in the launch stacks or the CPU | host work, launch-bound |
//! | `backward` | launches under a backward op of a trace (`autograd::engine::evaluate_function: MulBackward0`, `MulBackward0`), or without Python frames under autograd's engine (`Engine::thread_main`, `Engine::evaluate_function`, `torch::autograd::generated::…`) in the launch stacks or the CPU | host work, launch-bound |
//!
//! Where the launching thread's states through the gaps were recorded
//! (`analysis::threadstate`: the viewer's sampler with the kernel's context-switch
//! records), what the thread was doing off its CPU is evidence too, and the patterns on it
//! come right after `collective`: `sync_in_loop` (in a CUDA sync for half the gap time or
//! more), `gil_contention` (waiting for the GIL, 30% or more), `waiting_for_input` (asleep on
//! a queue, a pipe or a socket, half or more, under a queue's or a loader's frame),
//! `io_on_launch_path` (asleep reading a file, half or more), `sleep_on_launch_path` (asleep
//! in a sleep, half or more), `oversubscribed_cpu` (runnable but not running, a quarter or
//! more) and `blocked_on_launch_path` (asleep in any other call, half or more).
//!
//! The backward pattern names the forward op from the node (`MulBackward0` → `mul`) and,
//! where the trace links the node to its forward op (`sources::fwdbwd`), the forward op's
//! code. Profiler frames (`torch/profiler/`, `torch/autograd/profiler.py`, gaptop's own) are
//! never a site: [`is_profiler_frame`].

use crate::analysis::site::{LeafAcc, Site};
use crate::analysis::verdict::Verdict;
use crate::frames::{backward_node, forward_op, is_profiler_frame, node_op, pretty_frame};
use crate::model::records::{NameId, Ns};
use crate::model::store::Store;

/// One pattern of the table.
pub struct Pattern {
    /// The cause's id, as the JSON report gives it.
    pub id: &'static str,
    /// The cause in words.
    pub name: &'static str,
    /// What it matches, in words (docs).
    pub matches: &'static str,
    /// The fix, in a few words.
    pub fix: &'static str,
    /// Why that fix, in a line.
    pub reason: &'static str,
    /// The verdicts it applies to.
    pub verdicts: &'static [Verdict],
    /// Whether it holds, and what it then adds to its name and its reason.
    test: fn(&Evidence) -> Option<Detail>,
}

/// What a match adds: the cause's name when the pattern names it itself (`backward of mul`),
/// and words added to the reason.
#[derive(Default)]
struct Detail {
    name: Option<String>,
    more: Option<String>,
}

/// A site's cause, as matched.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    pub id: &'static str,
    pub name: String,
    pub fix: &'static str,
    pub reason: String,
}

use Verdict::{Busy, HostWork, LaunchBound, SlowLaunch, Sync};

/// The table, in the order patterns are tried.
pub const PATTERNS: [Pattern; 12] = [
    Pattern {
        id: "collective",
        name: "communication or a late rank, not host work",
        matches: "collective kernels (NCCL) or c10d / ProcessGroupNCCL frames",
        fix: "overlap communication with compute (DDP: bucket_cap_mb, gradient_as_bucket_view=True, \
              static_graph=True) and check for a late rank (the communication section)",
        reason: "the collective waits for the network or for the slowest rank, which host work here does not change",
        // Busy too: a collective's kernel runs while it waits for the other ranks.
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync, Busy],
        test: collective,
    },
    Pattern {
        id: "sync_in_loop",
        name: "a sync in the loop",
        matches: "the launching thread inside a CUDA call that waits for the GPU for half of the gap time or more",
        fix: "defer the sync (read the value a step later, or every N steps), or make the copy \
              non-blocking (`.to(\"cpu\", non_blocking=True)` into pinned memory)",
        reason: "the line waits for the GPU to finish before the loop launches more work",
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync],
        test: states::sync_in_loop,
    },
    Pattern {
        id: "gil_contention",
        name: "GIL contention",
        matches: "the launching thread waiting for the GIL for 30% of the gap time or more",
        fix: "move that thread's work out of Python (code that releases the GIL: NumPy, a C \
              extension) or into a process (multiprocessing, DataLoader workers)",
        reason: "the launching thread waits for the GIL while another thread runs Python",
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync],
        test: states::gil,
    },
    Pattern {
        id: "waiting_for_input",
        name: "waiting for input",
        matches: "the launching thread asleep on a queue, a pipe or a socket (futex, poll, a pipe's read) for half of the gap time or more, under a queue's or a loader's frame",
        fix: "feed it faster: more producers (DataLoader num_workers), persistent_workers=True, a \
              larger prefetch_factor, or a faster dataset",
        reason: "the launching thread sleeps on its input queue while the producers fall behind",
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync],
        test: states::input_wait,
    },
    Pattern {
        id: "io_on_launch_path",
        name: "I/O on the launch path",
        matches: "the launching thread asleep reading a file (read, pread64, readv, openat) for half of the gap time or more",
        fix: "read ahead on another thread or in DataLoader workers, keep the data in memory, or \
              use faster storage",
        reason: "the launching thread waits for the disk before it launches",
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync],
        test: states::io,
    },
    Pattern {
        id: "sleep_on_launch_path",
        name: "a sleep on the launch path",
        matches: "the launching thread asleep in a sleep (nanosleep, clock_nanosleep) for half of the gap time or more",
        fix: "remove the sleep, or wait on an event that whoever it waits for sets",
        reason: "the launching thread sleeps for a fixed time while the GPU has nothing to do",
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync],
        test: states::sleep,
    },
    Pattern {
        id: "oversubscribed_cpu",
        name: "an oversubscribed CPU",
        matches: "the launching thread runnable but not running (preempted) for a quarter of the gap time or more",
        fix: "fewer threads than cores (OMP_NUM_THREADS, MKL_NUM_THREADS, torch.set_num_threads, \
              fewer DataLoader workers), and a core of its own for the launching thread \
              (os.sched_setaffinity, taskset)",
        reason: "the launching thread is ready to run but other threads hold the CPUs",
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync],
        test: states::oversubscribed,
    },
    Pattern {
        id: "blocked_on_launch_path",
        name: "blocked on the launch path",
        matches: "the launching thread asleep in a system call for half of the gap time or more (a lock, an event, a child process)",
        fix: "start what it waits for earlier, or move the wait off the launching thread",
        reason: "the launching thread sleeps in the kernel, not working, before it launches",
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync],
        test: states::blocked,
    },
    Pattern {
        id: "per_shape_planning",
        name: "per-shape planning",
        matches: "cuDNN/cuBLAS planning (nvrtcCompileProgram, finalize, heuristics) or attention on cuDNN",
        fix: "static shapes (pad to a few sizes), warm each shape up once, or another backend \
              (attention: torch.nn.attention.sdpa_kernel or torch.backends.cuda.enable_cudnn_sdp(False))",
        reason: "cuDNN/cuBLAS builds (and compiles) an execution plan for each new shape",
        verdicts: &[HostWork, LaunchBound, SlowLaunch],
        test: planning,
    },
    Pattern {
        id: "input_bound",
        name: "input-bound",
        matches: "a DataLoader or dataset fetch in the launch stack or the CPU during the gaps",
        fix: "DataLoader(num_workers=N, pin_memory=True, persistent_workers=True, prefetch_factor=2) \
              and .to(device, non_blocking=True)",
        reason: "the step waits while its own thread loads and collates the next batch",
        verdicts: &[HostWork, LaunchBound, SlowLaunch, Sync],
        test: input,
    },
    Pattern {
        id: "single_tensor_optimizer",
        name: "per-parameter optimizer loop",
        matches: "torch/optim's _single_tensor_* loops",
        fix: "foreach=True, or fused=True, on the optimizer",
        reason: "the single-tensor loop launches a few kernels for every parameter; foreach/fused launch one for all",
        verdicts: &[HostWork, LaunchBound],
        test: single_tensor,
    },
    Pattern {
        id: "backward",
        name: "backward",
        matches: "launches of autograd's backward (a trace's backward ops, Engine::thread_main frames)",
        fix: "fuse the forward ops (torch.compile compiles their backward too; mode=\"reduce-overhead\" \
              adds CUDA graphs), or capture the whole step in a CUDA graph",
        reason: "backward launches mirror the forward",
        verdicts: &[HostWork, LaunchBound],
        test: backward,
    },
];

/// The patterns on the launching thread's states (`analysis::threadstate`).
mod states {
    use crate::analysis::patterns::{Detail, Evidence};
    use crate::analysis::threadstate::{self as ts, JsonState, Shares};

    /// The site's states and their shares; None where none were recorded.
    fn read(e: &Evidence) -> Option<(Vec<JsonState>, Shares)> {
        let s = ts::json(e.store, e.acc.steady_states(), Vec::new())?;
        let sh = Shares::of(&s);
        Some((s, sh))
    }

    /// The state of most time that `pred` accepts.
    fn top(s: &[JsonState], pred: impl Fn(&JsonState) -> bool) -> Option<&JsonState> {
        s.iter()
            .filter(|x| pred(x))
            .max_by(|a, b| a.share.total_cmp(&b.share))
    }

    fn named(name: String, share: f64) -> Option<Detail> {
        Some(Detail {
            name: Some(name),
            more: Some(format!("{:.0}% of the gap time", 100.0 * share)),
        })
    }

    /// A state's call: its name, without what it read.
    fn call_of(x: &JsonState) -> &str {
        let c = x.call.as_deref().unwrap_or("");
        c.split(' ').next().unwrap_or(c)
    }

    /// ` in `Queue.get ‹ <module>`` where the state has frames.
    fn under(x: &JsonState) -> String {
        ts::in_frames(&x.frames)
    }

    pub(super) fn sync_in_loop(e: &Evidence) -> Option<Detail> {
        let (s, sh) = read(e)?;
        let x = top(&s, |x| x.state == "cuda_wait")?;
        (sh.cuda_wait >= 0.5).then_some(())?;
        named(
            format!(
                "a sync in the loop: {}{}",
                x.call.as_deref().unwrap_or("a CUDA sync"),
                under(x)
            ),
            sh.cuda_wait,
        )
    }

    pub(super) fn gil(e: &Evidence) -> Option<Detail> {
        let (s, sh) = read(e)?;
        (sh.gil >= 0.3).then_some(())?;
        let x = top(&s, |x| x.state == "gil")?;
        let by = match &x.holder {
            Some(h) => {
                let name = if h.name.is_empty() {
                    format!("thread {}", h.tid)
                } else {
                    format!("thread `{}` (tid {})", h.name, h.tid)
                };
                let what = ts::in_frames(&h.frames).replacen(" in ", ", running ", 1);
                format!(" with {name}{what}")
            }
            None => String::new(),
        };
        named(format!("GIL contention{by}"), sh.gil)
    }

    /// A queue's, a pipe's or a loader's frame: what a thread that waits for input sleeps
    /// under.
    fn is_queue_frame(f: &str) -> bool {
        [
            "queue.py",
            "Queue.get",
            "SimpleQueue",
            "Connection.recv",
            "_get_data",
        ]
        .iter()
        .any(|q| f.contains(q))
            || f.contains("multiprocessing/")
            || crate::analysis::patterns::is_input_frame(f)
    }

    pub(super) fn input_wait(e: &Evidence) -> Option<Detail> {
        let (s, sh) = read(e)?;
        let share = sh.blocked_in(ts::is_wait_call);
        (share >= 0.5).then_some(())?;
        let x = top(&s, |x| {
            x.state == "blocked" && x.frames.iter().any(|f| is_queue_frame(f))
        })?;
        // A DataLoader's own queue (`_MultiProcessingDataLoaderIter._get_data`): its workers
        // are what the thread waits for.
        let what = if x.frames.iter().any(|f| f.contains("DataLoaderIter")) {
            "waiting for DataLoader workers"
        } else {
            "waiting for input"
        };
        named(
            format!("{what}: blocked{} ({})", under(x), call_of(x)),
            share,
        )
    }

    pub(super) fn io(e: &Evidence) -> Option<Detail> {
        let (s, sh) = read(e)?;
        let share = sh.blocked_in(ts::is_read_call);
        (share >= 0.5).then_some(())?;
        let x = top(&s, |x| x.state == "blocked" && ts::is_read_call(call_of(x)))?;
        let call = x.call.as_deref().unwrap_or("read");
        named(format!("I/O on the launch path: {call}{}", under(x)), share)
    }

    pub(super) fn sleep(e: &Evidence) -> Option<Detail> {
        let (s, sh) = read(e)?;
        let share = sh.blocked_in(ts::is_sleep_call);
        (share >= 0.5).then_some(())?;
        let x = top(&s, |x| {
            x.state == "blocked" && ts::is_sleep_call(call_of(x))
        })?;
        named(
            format!("a sleep on the launch path{} ({})", under(x), call_of(x)),
            share,
        )
    }

    pub(super) fn oversubscribed(e: &Evidence) -> Option<Detail> {
        let (_, sh) = read(e)?;
        (sh.runnable >= 0.25).then_some(())?;
        named(
            format!(
                "an oversubscribed CPU: runnable but not running {:.0}% of the gap time",
                100.0 * sh.runnable
            ),
            sh.runnable,
        )
    }

    pub(super) fn blocked(e: &Evidence) -> Option<Detail> {
        let (s, sh) = read(e)?;
        let share: f64 = sh.blocked.iter().map(|b| b.1).sum();
        (share >= 0.5).then_some(())?;
        let x = top(&s, |x| x.state == "blocked")?;
        named(
            format!(
                "blocked on the launch path: {}{}",
                x.call.as_deref().unwrap_or("asleep in the kernel"),
                under(x)
            ),
            share,
        )
    }
}

/// Whether a cause is one the launching thread's states name: the site's sentence then says
/// what the thread was doing, not the verdict's words.
pub fn is_state_cause(id: &str) -> bool {
    PATTERNS
        .iter()
        .position(|p| p.id == id)
        .is_some_and(|i| (1..=7).contains(&i))
}

/// What a site shows, for the patterns to read.
pub struct Evidence<'a> {
    pub store: &'a Store,
    /// Its launch sites and the gap time charged to each.
    pub launches: &'a [(Site, Ns)],
    pub acc: &'a LeafAcc,
    /// The function the gaps are charged to (its qualified name).
    pub qual: &'a str,
    pub verdict: Verdict,
}

/// A pattern holds where at least this share of the weight holds its frames.
const HOLDS: f64 = 0.5;

impl Evidence<'_> {
    /// The names a launch site holds: its stack's frames (outermost first), else its API and op.
    fn frames(&self, site: &Site) -> Vec<&str> {
        let n = |id: NameId| self.store.names.get(id);
        if site.stack != 0 {
            self.store
                .stacks
                .frames(site.stack)
                .into_iter()
                .map(n)
                .collect()
        } else {
            [site.api, site.op]
                .into_iter()
                .filter(|&id| id != 0)
                .map(n)
                .collect()
        }
    }

    /// The share of the gap time whose launch stack `test` accepts.
    fn launch_share(&self, test: impl Fn(&[&str]) -> bool) -> f64 {
        let all: Ns = self.launches.iter().map(|l| l.1).sum();
        let hit: Ns = self
            .launches
            .iter()
            .filter(|(s, _)| test(&self.frames(s)))
            .map(|l| l.1)
            .sum();
        hit as f64 / all.max(1) as f64
    }

    /// The launch stacks hold a frame `pred` accepts.
    fn in_launches(&self, pred: impl Fn(&str) -> bool) -> bool {
        self.launch_share(|f| f.iter().any(|f| pred(f))) >= HOLDS
    }

    /// The CPU during the gaps (samples, else spans) holds a frame `pred` accepts: the steady
    /// steps' samples where there are any, else all of them (`LeafAcc::steady_cpu`).
    fn in_cpu(&self, pred: impl Fn(&str) -> bool + Copy) -> bool {
        self.acc.steady_cpu().share_holding(self.store, pred) >= HOLDS
            || self.acc.cpu_spans.share_holding(self.store, pred) >= HOLDS
    }

    fn anywhere(&self, pred: impl Fn(&str) -> bool + Copy) -> bool {
        self.in_launches(pred) || self.in_cpu(pred)
    }

    fn ops(&self) -> impl Iterator<Item = &str> {
        self.acc.ops.iter().map(|&o| self.store.names.get(o))
    }
}

/// The cause a site's evidence names, if a pattern of the table matches.
pub fn find(e: &Evidence) -> Option<Found> {
    PATTERNS.iter().find_map(|p| {
        if !p.verdicts.contains(&e.verdict) {
            return None;
        }
        let d = (p.test)(e)?;
        Some(Found {
            id: p.id,
            name: d.name.unwrap_or_else(|| p.name.to_string()),
            fix: p.fix,
            reason: match d.more {
                Some(m) => format!("{} ({m})", p.reason),
                None => p.reason.to_string(),
            },
        })
    })
}

fn yes() -> Option<Detail> {
    Some(Detail::default())
}

/// A Python frame of a `.py` file (`file.py(12): fn`).
fn is_python(frame: &str) -> bool {
    crate::frames::frame(frame).py_source().is_some()
}

/// The innermost Python frame of a launch stack (outermost first) that is not the
/// profiler's: one outside the profiler's frames first (what runs inside
/// `record_function.__enter__` is the code that called it), else any.
pub fn python_site<S: AsRef<str>>(frames: &[S]) -> Option<&str> {
    fn read<S: AsRef<str>>(f: &S) -> (&str, crate::frames::StackFrame<'_>) {
        (f.as_ref(), crate::frames::frame(f.as_ref()))
    }
    crate::frames::hide::innermost_python(frames, read, true).map(|f| f.as_ref())
}

/// A frame of a collective's launch path (c10d, NCCL's process group, a trace's `nccl:` op).
pub fn is_comm_frame(f: &str) -> bool {
    f.contains("c10d")
        || f.contains("ProcessGroupNCCL")
        || f.contains("all_reduce")
        || f.contains("allreduce")
        || f.starts_with("nccl:")
        || f.contains("record_param_comms")
}

fn collective(e: &Evidence) -> Option<Detail> {
    let ops: Vec<&str> = e.ops().collect();
    let comm = ops
        .iter()
        .filter(|o| crate::frames::is_comm_kernel(o))
        .count();
    let by_ops = !ops.is_empty() && 2 * comm >= ops.len();
    (by_ops || e.in_launches(is_comm_frame)).then(Detail::default)
}

/// Where cuDNN or cuBLAS plans for a shape: builds, finalizes (and compiles) an execution
/// plan, searches algorithms, or asks cuBLASLt's heuristics.
fn is_planning_frame(f: &str) -> bool {
    let l = f.to_ascii_lowercase();
    f.contains("nvrtcCompileProgram")
        || f.contains("cudnnBackendFinalize")
        || (l.contains("cudnn") && l.contains("finalize"))
        || f.contains("cudnnFind")
        || (l.contains("cublaslt") && l.contains("heuristic"))
}

fn is_attention(f: &str) -> bool {
    f.contains("sdpa") || f.contains("scaled_dot_product") || f.contains("cudnn_attention")
}

fn planning(e: &Evidence) -> Option<Detail> {
    if e.anywhere(is_planning_frame) {
        return yes();
    }
    // Attention on cuDNN whose gaps are host work: known from the site's name, its frames or
    // its ops (a trace's aten op names), with cuDNN's kernels or frames.
    let cudnn = |f: &str| f.to_ascii_lowercase().contains("cudnn");
    let attention =
        is_attention(e.qual) || e.in_launches(is_attention) || e.ops().any(is_attention);
    let on_cudnn = e.ops().any(cudnn) || e.in_launches(cudnn) || e.in_cpu(cudnn);
    (e.verdict == HostWork && attention && on_cudnn).then(Detail::default)
}

/// A DataLoader's or a dataset's frame.
fn is_input_frame(f: &str) -> bool {
    f.contains("torch/utils/data/")
        || f.contains("DataLoader")
        || f.contains("DatasetFetcher")
        || (f.contains("__getitem__") && f.contains("Dataset"))
}

fn input(e: &Evidence) -> Option<Detail> {
    e.anywhere(is_input_frame).then(Detail::default)
}

fn is_single_tensor_frame(f: &str) -> bool {
    f.contains("torch/optim/") && f.contains("_single_tensor_")
}

fn single_tensor(e: &Evidence) -> Option<Detail> {
    e.anywhere(is_single_tensor_frame).then(Detail::default)
}

/// A trace's backward op: `autograd::engine::evaluate_function: MulBackward0`, or the node's
/// own op (`MulBackward0`, `CudnnConvolutionBackward`).
fn is_backward_op(f: &str) -> bool {
    f.starts_with("autograd::engine::evaluate_function: ") || node_op(f).is_some()
}

/// A frame of autograd's engine running the backward pass (native frames).
fn is_engine_frame(f: &str) -> bool {
    f.contains("autograd::Engine::thread_main")
        || f.contains("autograd::Engine::evaluate_function")
        || f.contains("autograd::engine::evaluate_function")
        || f.contains("torch::autograd::generated::")
        || f.contains("PythonEngine::thread_init")
}

fn backward(e: &Evidence) -> Option<Detail> {
    let under_op = |f: &[&str]| f.iter().any(|f| is_backward_op(f));
    let native =
        |f: &[&str]| !f.iter().any(|f| is_python(f)) && f.iter().any(|f| is_engine_frame(f));
    let by_launch = e.launch_share(|f| under_op(f) || native(f)) >= HOLDS;
    let no_python = !e.launches.iter().any(|(s, _)| {
        s.stack != 0
            && e.store
                .stacks
                .frames(s.stack)
                .iter()
                .any(|&f| is_python(e.store.names.get(f)))
    });
    if !(by_launch || (no_python && e.in_cpu(is_engine_frame))) {
        return None;
    }
    // The node: the innermost in the launch stacks, else in the CPU samples' shared frames.
    let node = e
        .launches
        .iter()
        .max_by_key(|l| l.1)
        .and_then(|(s, _)| e.frames(s).into_iter().rev().find_map(backward_node))
        .map(str::to_string)
        .or_else(|| {
            e.acc
                .cpu
                .innermost(e.store, 64)
                .iter()
                .find_map(|f| backward_node(&f.frame).map(str::to_string))
        });
    let one = |n: &str| match forward_op(n) {
        Some(op) => op,
        None => n.to_string(),
    };
    let name = match node.as_deref() {
        Some(n) if forward_op(n).is_some() => format!("backward of {}", one(n)),
        Some(n) => format!("backward ({n})"),
        // No node in most samples: the nodes the samples were in, most first (a live run's
        // backward launches carry no Python stack, but its CPU samples show the node's apply).
        None => {
            let nodes = e
                .acc
                .steady_cpu()
                .tally(e.store, |f| backward_node(f).map(str::to_string));
            let top: Vec<String> = nodes
                .iter()
                .filter(|(_, share)| *share >= 0.05)
                .take(3)
                .map(|(n, share)| format!("{} {:.0}%", one(n), 100.0 * share))
                .collect();
            if top.is_empty() {
                "backward".to_string()
            } else {
                format!("backward of {} (of the CPU samples)", top.join(", "))
            }
        }
    };
    Some(Detail {
        name: Some(name),
        more: forward_site(e).map(|s| format!("forward: {s}")),
    })
}

/// Where the forward op of a site's backward launches ran, when the trace links them: its
/// innermost Python frame that is not the profiler's, else its op.
fn forward_site(e: &Evidence) -> Option<String> {
    let (site, _) = e.launches.iter().max_by_key(|l| l.1)?;
    let fwd = e.store.forward_stack(site.stack)?;
    let frames = e.store.stacks.frames(fwd);
    let name = |f: &NameId| e.store.names.get(*f);
    let py = frames
        .iter()
        .rev()
        .map(name)
        .find(|f| is_python(f) && !is_profiler_frame(f) && !crate::frames::is_plumbing(f));
    Some(match (py, frames.last().map(name)) {
        (Some(py), Some(op)) => format!(
            "{} in {}",
            op.trim_start_matches("aten::"),
            pretty_frame(py)
        ),
        (None, Some(op)) => op.to_string(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests;

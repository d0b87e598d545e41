//! Each pattern on a small store built here: launches with their stacks, the CPU samples or
//! spans of the launching thread during the gaps, and the ops' names.

use super::*;
use crate::analysis::advice::{self, Advice};
use crate::analysis::verdict;
use crate::analysis::{analyse, Options};
use crate::model::records::{ApiCall, ApiKind, CpuSample, GpuOp, LaneKey, OpKind, Span, StackId};
use crate::model::window::Window;

const US: Ns = 1_000;

/// One process, one stream, one launching thread (tid 1): ops launched one after another,
/// each after a gap of host time.
struct Fixture {
    st: Store,
    lane: usize,
    /// The end of the last op.
    t: Ns,
    corr: u32,
    samples: Vec<CpuSample>,
    spans: Vec<Span>,
}

impl Fixture {
    fn new() -> Self {
        let mut st = Store::default();
        let p = st.add_process(1, -1, "t");
        let lane = st.lane_id(LaneKey {
            proc: p,
            device: 0,
            stream: 7,
        });
        let mut f = Fixture {
            st,
            lane,
            t: 0,
            corr: 0,
            samples: Vec::new(),
            spans: Vec::new(),
        };
        // A first op, which the first gap follows.
        let s = f.stack(&["start.py(1): <module>"]);
        f.launch(s, "first", 10 * US, US);
        f
    }

    /// A stack of frames, outermost first.
    fn stack(&mut self, frames: &[&str]) -> StackId {
        let ids: Vec<NameId> = frames.iter().map(|f| self.st.names.intern(f)).collect();
        self.st.stacks.intern_path(0, ids)
    }

    /// Launches `op` from `stack` (0: none, the launching API alone) after `gap` of idle: the
    /// launch call comes just before the op, after the gap began (host_wait). Returns the gap's
    /// middle.
    fn launch(&mut self, stack: StackId, op: &str, gap: Ns, dur: Ns) -> Ns {
        self.corr += 1;
        let start = self.t + gap;
        let name = self.st.names.intern(op);
        let api = self.st.names.intern("cudaLaunchKernel");
        self.st.add_op(
            self.lane,
            GpuOp::new(start, start + dur, OpKind::Kernel, name, self.corr),
        );
        self.st.add_api(
            0,
            ApiCall {
                start: start - 2 * US.min(gap / 2),
                end: start - US.min(gap / 4),
                corr: self.corr,
                tid: 1,
                name: api,
                stack,
                kind: ApiKind::Launch,
            },
        );
        let mid = self.t + gap / 2;
        self.t = start + dur;
        mid
    }

    /// `n` launches of `op` from `stack`, each after `gap`, with a CPU sample of `cpu` (if not
    /// 0) in the middle of each gap.
    fn launches(&mut self, n: usize, stack: StackId, op: &str, gap: Ns, dur: Ns, cpu: StackId) {
        for _ in 0..n {
            let mid = self.launch(stack, op, gap, dur);
            if cpu != 0 {
                self.samples.push(CpuSample {
                    time: mid,
                    stack: cpu,
                });
            }
        }
    }

    /// A CPU span of the launching thread (a trace's CPU op or Python function) from `start`
    /// to `end`.
    fn span(&mut self, start: Ns, end: Ns, stack: StackId) {
        self.spans.push(Span {
            start,
            end,
            stack,
            parent: u32::MAX,
        });
    }

    /// The advice on the whole store.
    fn advise(mut self) -> (Store, Vec<Advice>) {
        if !self.samples.is_empty() {
            self.st.procs[0].sample_period_ns = US;
            let samples = std::mem::take(&mut self.samples);
            self.st.add_samples(0, 1, &samples);
        }
        if !self.spans.is_empty() {
            self.st.procs[0]
                .spans
                .insert(1, std::mem::take(&mut self.spans));
        }
        self.st.finish_bulk();
        let a = analyse(&self.st, Window::all(), &Options::default());
        (self.st, a.diagnosis.advice)
    }
}

fn site<'a>(advice: &'a [Advice], name: &str) -> &'a Advice {
    advice
        .iter()
        .find(|a| a.site.starts_with(name))
        .unwrap_or_else(|| panic!("{name} not in {:?}", sites(advice)))
}

fn sites(advice: &[Advice]) -> Vec<&str> {
    advice.iter().map(|a| a.site.as_str()).collect()
}

/// The pattern's cause, fix and reason reach the advice, its JSON and its text.
fn assert_cause(a: &Advice, id: &str, fix_has: &str) {
    assert_eq!(a.cause, Some(id), "{a:?}");
    assert!(a.fix.contains(fix_has), "{a:?}");
    let name = a.cause_name.as_deref().unwrap();
    let reason = a.reason.as_deref().unwrap();
    assert!(
        a.text
            .contains(&format!("Cause: {name}: {reason}. Fix: {}.", a.fix)),
        "{}",
        a.text
    );
    let j = serde_json::to_value(a).unwrap();
    assert_eq!(j["cause"], id);
    assert_eq!(j["fix"], a.fix);
    assert!(advice::summary_line(a).contains(&format!("({name})")));
}

fn assert_no_cause(a: &Advice) {
    assert_eq!(a.cause, None, "{a:?}");
    assert_eq!(
        a.fix,
        verdict::fix(a.verdict, a.framework),
        "the verdict's usual fix"
    );
    assert!(serde_json::to_value(a).unwrap().get("cause").is_none());
}

#[test]
fn a_dataloader_fetch_in_the_launch_stack_is_input_bound() {
    let mut f = Fixture::new();
    let s = f.stack(&[
        "train.py(10): main",
        "torch/utils/data/dataloader.py(733): _SingleProcessDataLoaderIter.__next__",
        "torch/utils/data/_utils/fetch.py(52): _MapDatasetFetcher.fetch",
        "data.py(14): Noisy.__getitem__",
    ]);
    f.launches(20, s, "fft_kernel", 300 * US, 5 * US, 0);
    let (_, advice) = f.advise();
    let a = site(&advice, "Noisy.__getitem__");
    assert_eq!(a.verdict, Verdict::HostWork);
    assert_cause(a, "input_bound", "num_workers");
    assert!(a.fix.contains("pin_memory=True") && a.fix.contains("persistent_workers"));
}

#[test]
fn a_dataloader_fetch_in_the_cpu_samples_or_spans_is_input_bound() {
    // Samples: the `.cuda()` copy's gaps, while its thread ran the dataset.
    let mut f = Fixture::new();
    let launch = f.stack(&["train.py(12): main"]);
    let cpu = f.stack(&[
        "main [python3.12]",
        "torch/utils/data/_utils/fetch.py(52): _MapDatasetFetcher.fetch",
        "pocketfft::c2c [numpy]",
    ]);
    f.launches(20, launch, "Memcpy HtoD", 2_000 * US, 50 * US, cpu);
    let (_, advice) = f.advise();
    assert_cause(
        site(&advice, "main  train.py"),
        "input_bound",
        "num_workers",
    );

    // Spans (a trace without samples): the thread was in the DataLoader's __next__.
    let mut f = Fixture::new();
    let launch = f.stack(&["train.py(12): main"]);
    let dl = f.stack(&["enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"]);
    for _ in 0..20 {
        let t0 = f.t;
        f.launch(launch, "Memcpy HtoD", 2_000 * US, 50 * US);
        f.span(t0 + 10 * US, t0 + 1_990 * US, dl);
    }
    let (_, advice) = f.advise();
    assert_cause(
        site(&advice, "main  train.py"),
        "input_bound",
        "num_workers",
    );

    // The same gaps with the CPU elsewhere: no cause, the usual fix.
    let mut f = Fixture::new();
    let launch = f.stack(&["train.py(12): main"]);
    let cpu = f.stack(&["main [python3.12]", "train.py(11): augment"]);
    f.launches(20, launch, "Memcpy HtoD", 2_000 * US, 50 * US, cpu);
    let (_, advice) = f.advise();
    assert_no_cause(site(&advice, "main  train.py"));
}

#[test]
fn torch_optims_single_tensor_loop_wants_foreach_or_fused() {
    let mut f = Fixture::new();
    let s = f.stack(&[
        "train.py(20): main",
        "torch/optim/optimizer.py(485): Optimizer.profile_hook_step.<locals>.wrapper",
        "torch/optim/adam.py(247): Adam.step",
        "torch/optim/adam.py(400): _single_tensor_adam",
    ]);
    f.launches(50, s, "vectorized_elementwise_kernel", 10 * US, US, 0);
    let (_, advice) = f.advise();
    let a = site(&advice, "_single_tensor_adam");
    assert_eq!(a.verdict, Verdict::LaunchBound);
    assert_cause(a, "single_tensor_optimizer", "foreach=True");
    assert!(a.fix.contains("fused=True"));
}

#[test]
fn a_traces_backward_op_names_its_forward_op_and_code() {
    let mut f = Fixture::new();
    let node = f.stack(&["autograd::engine::evaluate_function: MulBackward0"]);
    let s = f.stack(&[
        "autograd::engine::evaluate_function: MulBackward0",
        "MulBackward0",
        "aten::mul",
    ]);
    let fwd = f.stack(&["train.py(3): main", "model.py(5): Net.forward", "aten::mul"]);
    f.st.forward_of.insert(node, fwd);
    f.launches(30, s, "vectorized_elementwise_kernel", 20 * US, US, 0);
    let (_, advice) = f.advise();
    // Its site is the node, not the aten op it shares with the forward.
    let a = site(&advice, "MulBackward0");
    assert_cause(a, "backward", "torch.compile");
    assert_eq!(a.cause_name.as_deref(), Some("backward of mul"));
    assert_eq!(
        a.reason.as_deref(),
        Some("backward launches mirror the forward (forward: mul in Net.forward  model.py:5)")
    );
}

#[test]
fn backward_without_python_frames_is_known_by_autograds_engine() {
    // Live: no Python stack on autograd's thread; its samples are in the engine.
    let mut f = Fixture::new();
    let cpu = f.stack(&[
        "start_thread [libc.so.6]",
        "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&) [libtorch_cpu.so]",
        "torch::autograd::generated::NativeLayerNormBackward0::apply(std::vector<at::Tensor>&&) [libtorch_cpu.so]",
    ]);
    f.launches(30, 0, "layer_norm_grad_kernel", 200 * US, US, cpu);
    let (_, advice) = f.advise();
    let a = site(&advice, "(no Python stack) cudaLaunchKernel");
    assert_cause(a, "backward", "torch.compile");
    assert_eq!(
        a.cause_name.as_deref(),
        Some("backward of native_layer_norm")
    );

    // The same samples under a Python launch: not the backward's.
    let mut f = Fixture::new();
    let py = f.stack(&["train.py(7): main"]);
    let cpu = f.stack(&[
        "torch::autograd::Engine::thread_main(std::shared_ptr<torch::autograd::GraphTask> const&) [libtorch_cpu.so]",
    ]);
    f.launches(30, py, "k", 200 * US, US, cpu);
    let (_, advice) = f.advise();
    assert_no_cause(site(&advice, "main  train.py"));
}

#[test]
fn forward_ops_from_backward_nodes() {
    let fwd = |n: &str| forward_op(n);
    assert_eq!(fwd("MulBackward0").as_deref(), Some("mul"));
    assert_eq!(fwd("TBackward0").as_deref(), Some("t"));
    assert_eq!(
        fwd("NativeLayerNormBackward0").as_deref(),
        Some("native_layer_norm")
    );
    assert_eq!(
        fwd("MaxPool2DWithIndicesBackward").as_deref(),
        Some("max_pool2d_with_indices")
    );
    assert_eq!(
        fwd("CudnnConvolutionBackward").as_deref(),
        Some("cudnn_convolution")
    );
    assert_eq!(fwd("torch::autograd::AccumulateGrad"), None);
    assert_eq!(fwd("Backward0"), None);
    assert_eq!(
        backward_node("torch::autograd::generated::MulBackward0::apply(x) [libtorch_cpu.so]"),
        Some("MulBackward0")
    );
    assert_eq!(backward_node("aten::mul"), None);
    assert_eq!(backward_node("model.py(3): Backward"), None);
    // Native frames of a live run's CPU samples, as the H200 showed them.
    assert_eq!(
        backward_node("SigmoidBackward0_apply_functional [libtorch_cpu.so]"),
        Some("SigmoidBackward0")
    );
    assert_eq!(
        backward_node("torch::autograd::generated::details::fn [libtorch_cpu.so]"),
        None
    );
}

#[test]
fn collectives_are_communication_not_host_work() {
    // A stackless NCCL launch whose kernels run long (waiting for the other ranks): busy by
    // the verdict's rule, but a collective.
    let mut f = Fixture::new();
    f.launches(
        10,
        0,
        "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
        200 * US,
        5_000 * US,
        0,
    );
    // And a Python call into c10d launching an elementwise kernel.
    let s = f.stack(&[
        "train.py(9): main",
        "torch/distributed/distributed_c10d.py(3068): all_reduce",
    ]);
    f.launches(10, s, "elementwise_kernel", 300 * US, US, 0);
    let (_, advice) = f.advise();
    let nccl = site(
        &advice,
        "(no Python stack) cudaLaunchKernel → ncclDevKernel",
    );
    assert_eq!(nccl.verdict, Verdict::Busy);
    assert_cause(nccl, "collective", "gradient_as_bucket_view");
    assert!(!nccl.text.contains("little to win"), "{}", nccl.text);
    let c10d = site(&advice, "all_reduce  distributed_c10d.py");
    assert_eq!(c10d.verdict, Verdict::HostWork);
    assert_cause(c10d, "collective", "late rank");
}

#[test]
fn cudnn_planning_in_the_cpu_is_per_shape_planning() {
    let mut f = Fixture::new();
    let s = f.stack(&[
        "decode.py(30): step",
        "sdpa_attention.py(158): sdpa_attention_forward",
    ]);
    let cpu = f.stack(&[
        "at::native::run_cudnn_SDP_fprop [libtorch_cuda.so]",
        "cudnn::backend::ExecutionPlan::finalize_internal [libcudnn_graph.so.9]",
        "nvrtcCompileProgram [libnvrtc.so.13]",
    ]);
    f.launches(
        20,
        s,
        "cudnn_generated_fort_native_sdpa_sm90",
        30_000 * US,
        20 * US,
        cpu,
    );
    let (_, advice) = f.advise();
    let a = site(&advice, "sdpa_attention_forward");
    assert_cause(a, "per_shape_planning", "enable_cudnn_sdp(False)");
    assert!(a.fix.contains("static shapes"));
}

#[test]
fn cudnn_attention_known_only_by_a_traces_op_names_is_per_shape_planning() {
    // A trace without Python stacks or samples: aten's op names and cuDNN's kernel.
    let mut f = Fixture::new();
    let s = f.stack(&[
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_cudnn_attention",
    ]);
    f.launches(
        20,
        s,
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop",
        30_000 * US,
        20 * US,
        0,
    );
    // The same ops launched back to back: launch overhead, not planning.
    let s2 = f.stack(&["aten::_cudnn_attention_again"]);
    f.launches(
        20,
        s2,
        "cudnn_generated_fort_native_sdpa_sm90_flash_fprop",
        10 * US,
        US,
        0,
    );
    let (_, advice) = f.advise();
    let a = site(&advice, "aten::_scaled_dot_product_cudnn_attention");
    assert_eq!(a.verdict, Verdict::HostWork);
    assert_cause(a, "per_shape_planning", "enable_cudnn_sdp(False)");
    let b = site(&advice, "aten::_cudnn_attention_again");
    assert_eq!(b.verdict, Verdict::LaunchBound);
    assert_no_cause(b);
}

#[test]
fn the_profilers_own_frames_are_never_a_site() {
    let mut f = Fixture::new();
    // Kineto of 2021: record_function's __enter__ holds the ops of the step it names.
    let zero = f.stack(&[
        "resnet50_profiler_api.py(49): <module>",
        "/env/site-packages/torch/optim/optimizer.py(205): zero_grad",
        "/env/site-packages/torch/autograd/profiler.py(614): __enter__",
        "Optimizer.zero_grad#SGD.zero_grad",
        "aten::zero_",
    ]);
    f.launches(10, zero, "fill_kernel", 10 * US, US, 0);
    // torch.profiler's step (and whatever it calls) is the loop's.
    let step = f.stack(&[
        "train.py(40): main",
        "torch/profiler/profiler.py(790): profile.step",
        "torch/_ops.py(1158): OpOverloadPacket.__call__",
    ]);
    f.launches(10, step, "k", 10 * US, US, 0);
    let (_, advice) = f.advise();
    assert!(
        !advice
            .iter()
            .any(|a| a.site.contains("__enter__") || a.site.contains("profiler")),
        "{:?}",
        sites(&advice)
    );
    site(&advice, "zero_grad  optimizer.py:205");
    site(&advice, "main  train.py:40");
    assert_eq!(
        python_site(&[
            "a.py(1): f",
            "torch/autograd/profiler.py(614): __enter__",
            "torch/_ops.py(1): g"
        ]),
        Some("a.py(1): f")
    );
    assert_eq!(
        python_site(&["torch/profiler/profiler.py(1): step"]),
        None,
        "only the profiler's"
    );
}

#[test]
fn every_pattern_is_documented() {
    let doc = include_str!("../../../../docs/patterns.md");
    for p in &PATTERNS {
        assert!(doc.contains(&format!("`{}`", p.id)), "{} not in docs", p.id);
        assert!(!p.fix.is_empty() && !p.reason.is_empty() && !p.verdicts.is_empty());
    }
}

/// A site whose launching thread spent most of each gap off its CPU in the way `off` says
/// (the sampler's stretches, `model::states`): the advice on it.
fn off_cpu(
    kind: crate::model::states::OffKind,
    call: &str,
    frames: &[&str],
    holder: Option<(&str, &[&str])>,
) -> Advice {
    use crate::model::states::OffCpu;
    let mut f = Fixture::new();
    let s = f.stack(&["loop.py(30): <module>", "loop.py(12): forward"]);
    let stack = f.stack(frames);
    let call = f.st.names.intern(call);
    let (holder_name, holder_stack) = match holder {
        Some((name, frames)) => (f.st.names.intern(name), f.stack(frames)),
        None => (0, 0),
    };
    let mut v = Vec::new();
    for _ in 0..20 {
        let mid = f.launch(s, "small_kernel", 300 * US, 5 * US);
        v.push(OffCpu {
            start: mid - 140 * US,
            end: mid + 140 * US,
            kind,
            call,
            stack,
            holder: if holder.is_some() { 77 } else { 0 },
            holder_name,
            holder_stack,
        });
    }
    f.st.procs[0].add_states(1, &v);
    let (_, advice) = f.advise();
    site(&advice, "forward").clone()
}

#[test]
fn a_dataloader_s_queue_is_named_as_its_workers() {
    use crate::model::states::OffKind;
    let dataloader = [
        "loop.py(30): <module>",
        "torch/utils/data/dataloader.py(1473): _MultiProcessingDataLoaderIter._get_data",
        "torch/utils/data/dataloader.py(1310): _MultiProcessingDataLoaderIter._try_get_data",
        "queue.py(180): Queue.get",
    ];
    let a = off_cpu(OffKind::Blocked, "futex", &dataloader, None);
    assert_cause(&a, "waiting_for_input", "num_workers");
    let name = a.cause_name.as_deref().unwrap();
    assert!(
        name.starts_with("waiting for DataLoader workers: blocked in `Queue.get"),
        "{name}"
    );
    // A queue of the program's own is input, not DataLoader workers.
    let queue = ["loop.py(30): <module>", "queue.py(171): Queue.get"];
    let b = off_cpu(OffKind::Blocked, "futex", &queue, None);
    assert!(
        b.cause_name
            .as_deref()
            .unwrap()
            .starts_with("waiting for input: "),
        "{b:?}"
    );
}

#[test]
fn the_launching_thread_s_states_name_the_cause() {
    use crate::model::states::OffKind;
    let queue = ["loop.py(30): <module>", "queue.py(171): Queue.get"];
    let a = off_cpu(OffKind::Blocked, "futex", &queue, None);
    assert_cause(&a, "waiting_for_input", "num_workers");
    assert!(
        a.cause_name
            .as_deref()
            .unwrap()
            .contains("blocked in `Queue.get"),
        "{a:?}"
    );
    assert!(
        a.text
            .starts_with("the launching thread was on no CPU for 9"),
        "{}",
        a.text
    );
    let states = a.thread_state.as_ref().unwrap();
    assert_eq!(
        (states[0].state, states[0].call.as_deref()),
        ("blocked", Some("futex"))
    );
    assert!(states[0].share > 0.9, "{states:?}");

    let spin = ["threading.py(1002): Thread._bootstrap", "busy.py(7): spin"];
    let a = off_cpu(
        OffKind::Gil,
        "futex",
        &["loop.py(30): <module>"],
        Some(("busy_py", &spin)),
    );
    assert_cause(&a, "gil_contention", "into a process");
    let name = a.cause_name.as_deref().unwrap();
    assert!(
        name.contains("thread `busy_py` (tid 77)") && name.contains("spin"),
        "{name}"
    );
    let holder = a.thread_state.as_ref().unwrap()[0].holder.clone().unwrap();
    assert_eq!((holder.tid, holder.name.as_str()), (77, "busy_py"));

    let a = off_cpu(
        OffKind::Blocked,
        "clock_nanosleep",
        &["loop.py(9): pace"],
        None,
    );
    assert_cause(&a, "sleep_on_launch_path", "remove the sleep");
    let a = off_cpu(
        OffKind::Blocked,
        "pread64 /d/x.bin",
        &["loop.py(5): load"],
        None,
    );
    assert_cause(&a, "io_on_launch_path", "read ahead");
    assert!(a
        .cause_name
        .as_deref()
        .unwrap()
        .contains("pread64 /d/x.bin"));
    let a = off_cpu(OffKind::Runnable, "", &[], None);
    assert_cause(&a, "oversubscribed_cpu", "OMP_NUM_THREADS");
    let a = off_cpu(OffKind::Blocked, "wait4", &["loop.py(3): run"], None);
    assert_cause(&a, "blocked_on_launch_path", "earlier");
}

#[test]
fn without_recorded_switches_a_site_has_no_states() {
    let mut f = Fixture::new();
    let s = f.stack(&["loop.py(30): <module>", "loop.py(12): forward"]);
    f.launches(20, s, "small_kernel", 300 * US, 5 * US, 0);
    let (_, advice) = f.advise();
    assert!(site(&advice, "forward").thread_state.is_none());
}

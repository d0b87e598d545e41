//! Steps (the program's iterations) on stores built op by op, where the answers follow from the
//! construction, and on the real traces and recordings.

use std::path::Path;

use gaptop_core::analysis::steps::{self, StepSource, Steps};
use gaptop_core::model::records::{ApiCall, ApiKind, GpuOp, LaneKey, Ns, OpKind, Span, StackId};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;

/// Builds a one-process, one-stream store: ops one after another, each launched shortly
/// before it starts from a given stack.
struct Build {
    st: Store,
    lane: usize,
    /// End of the latest op.
    t: Ns,
    corr: u32,
    /// Launch stacks for a token's embedding, layers and head, when set.
    token_stacks: Option<[StackId; 3]>,
    /// Stack of the launches of `op`.
    cur: StackId,
}

const DUR: Ns = 5_000;
const GAP: Ns = 2_000;
const SYNC: Ns = 100_000;

impl Build {
    fn new() -> Self {
        let mut st = Store::default();
        st.add_process(1, -1, "test");
        let lane = st.lane_id(LaneKey {
            proc: 0,
            device: 0,
            stream: 7,
        });
        Build {
            st,
            lane,
            t: 1_000_000,
            corr: 0,
            token_stacks: None,
            cur: 0,
        }
    }

    fn stack(&mut self, frames: &[&str]) -> StackId {
        let mut s = 0;
        for f in frames {
            let id = self.st.names.intern(f);
            s = self.st.stacks.intern(s, id);
        }
        s
    }

    /// An op `gap` ns after the previous one ends, `dur` long, launched from `stack`.
    fn op_at(&mut self, name: &str, kind: OpKind, gap: Ns, dur: Ns, stack: StackId) -> Ns {
        let start = self.t + gap;
        self.corr += 1;
        let nm = self.st.names.intern(name);
        self.st.push_op_unsorted(
            self.lane,
            GpuOp::new(start, start + dur, kind, nm, self.corr),
        );
        let api = self.st.names.intern("cudaLaunchKernel");
        self.st.push_api_unsorted(
            0,
            ApiCall {
                start: start - 1_000,
                end: start - 500,
                corr: self.corr,
                tid: 1,
                name: api,
                stack,
                kind: ApiKind::Launch,
            },
        );
        self.t = start + dur;
        start
    }

    fn op(&mut self, name: &str, gap: Ns) -> Ns {
        self.op_at(name, OpKind::Kernel, gap, DUR, self.cur)
    }

    /// Launches from the token's part `k` (0 embedding, 1 layers, 2 head) from now on.
    fn part(&mut self, k: usize) {
        if let Some(s) = self.token_stacks {
            self.cur = s[k];
        }
    }

    fn finish(mut self) -> Store {
        self.st.finish_bulk();
        self.st
    }
}

/// One decode token: an embedding, 10 layers of 19 ops (the attention kernel's name changes
/// with the sequence length, every 16 tokens), 9 per-token ops at the end: 200 ops. The
/// embedding comes after a 100 µs sync; the ops are 5 µs long, 2 µs apart. With `memset`, an
/// allocator memset comes in the middle of the token; `stall` more idle comes before its 51st
/// op.
fn token(b: &mut Build, k: usize, memset: bool, stall: Ns) -> Ns {
    b.part(0);
    let start = b.op("void embedding_kernel<half>(half*)", SYNC);
    b.part(1);
    let attn = format!("flash_decode<{}>", 64 * (1 + k / 16));
    for layer in 0..10 {
        for i in 0..19 {
            let gap = if layer == 2 && i == 11 {
                GAP + stall
            } else {
                GAP
            };
            match i {
                5 => b.op(&attn, gap),
                _ => b.op(&format!("layer_op_{i}"), gap),
            };
            if memset && layer == 6 && i == 3 {
                b.op_at("Memset (Device)", OpKind::Memset, GAP, DUR, 0);
            }
        }
    }
    b.part(2);
    for name in [
        "final_norm",
        "lm_head_gemm",
        "softmax",
        "top_p",
        "void at::native::argmax_kernel<float>(float*)",
        "cat_token",
        "stop_check",
        "counter_add",
    ] {
        b.op(name, GAP);
    }
    b.op_at("Memcpy DtoH", OpKind::Memcpy, GAP, DUR, 0);
    start
}

/// 40 loading copies, 3 warm-up steps of other kernels (a prefill, two compiles), then
/// `tokens` tokens; the first token is 5 ms slower (a lazy initialization in its middle).
/// Returns the store and each token's first op start.
fn decode(tokens: usize, memset_every: Option<usize>) -> (Store, Vec<Ns>) {
    let mut b = Build::new();
    for _ in 0..40 {
        b.op_at("Memcpy HtoD", OpKind::Memcpy, GAP, 20_000, 0);
    }
    for (w, n) in [(0, 300), (1, 260), (2, 240)] {
        b.op(&format!("warmup{w}_first"), SYNC);
        for i in 1..n {
            b.op(&format!("warmup{w}_op{}", i % 25), GAP);
        }
    }
    let mut starts = Vec::new();
    for k in 0..tokens {
        let memset = memset_every.is_some_and(|e| k % e == 3);
        let stall = if k == 0 { 5_000_000 } else { 0 };
        starts.push(token(&mut b, k, memset, stall));
    }
    (b.finish(), starts)
}

fn auto(st: &Store) -> Option<Steps> {
    steps::find(st, Window::all(), None)
}

#[test]
fn decode_loop_gives_each_token_after_the_warm_up() {
    let (st, starts) = decode(50, None);
    let s = auto(&st).expect("steps found");
    assert_eq!(s.source, StepSource::Auto);
    assert_eq!(s.devices, 1);
    assert_eq!(s.steps.len(), 50);
    let got: Vec<Ns> = s.steps.iter().map(|x| x.start).collect();
    assert_eq!(got, starts, "each step starts at its token's embedding");
    // The first token: 200 ops, its stall in its idle time.
    let first = s.steps[0];
    assert_eq!(first.launches, 200);
    assert_eq!(first.busy_ns, 200 * DUR);
    assert_eq!(first.idle_ns, 199 * GAP + 5_000_000 + SYNC);
    for x in &s.steps[1..49] {
        assert_eq!(x.launches, 200);
        assert_eq!(x.busy_ns, 200 * DUR);
        assert_eq!(
            x.idle_ns,
            199 * GAP + SYNC,
            "the sync before the next token"
        );
        assert_eq!(x.wall(), 200 * DUR + 199 * GAP + SYNC);
    }
    // The last step ends with its last op, not at the window's end.
    let last = s.steps[49];
    assert_eq!(last.wall(), 200 * DUR + 199 * GAP);
    assert_eq!(last.end, st.span().unwrap().1);
    let j = s.json();
    assert_eq!(j.count, 50);
    assert_eq!(j.source, "auto");
    assert_eq!(j.median_ns, 200 * DUR + 199 * GAP + SYNC);
    assert_eq!(j.p90_ns, 200 * DUR + 199 * GAP + SYNC);
    assert_eq!(j.busy_median_ns, 200 * DUR);
    assert_eq!(j.idle_median_ns, 199 * GAP + SYNC);
    assert_eq!(s.steady(), 1..50, "the slow first token is warm-up");
    // Times map to steps; the warm-up is in none.
    assert_eq!(s.step_of(starts[7] + 10), Some(7));
    assert_eq!(s.step_of(starts[8] - 1), Some(7));
    assert_eq!(s.step_of(starts[0] - 1), None);
    assert_eq!(s.step_of(last.end), None);
    let json = serde_json::to_value(&j).unwrap();
    for k in [
        "count",
        "source",
        "median_ns",
        "p90_ns",
        "busy_median_ns",
        "idle_median_ns",
    ] {
        assert!(json.get(k).is_some(), "{k} in {json}");
    }
}

#[test]
fn an_occasional_extra_memset_does_not_hide_the_tokens() {
    let (st, starts) = decode(50, Some(7));
    let s = auto(&st).expect("steps found");
    assert_eq!(s.steps.len(), 50);
    let got: Vec<Ns> = s.steps.iter().map(|x| x.start).collect();
    assert_eq!(got, starts);
    for (k, x) in s.steps.iter().enumerate().skip(1).take(48) {
        let want = if k % 7 == 3 { 201 } else { 200 };
        assert_eq!(x.launches, want, "token {k}");
    }
}

/// Warm-up tokens that are the same token with more ops (autotuning, first-call memsets) are
/// left out, or the last of them counted: 50 steps, ±1.
#[test]
fn warm_up_tokens_with_extra_ops_are_within_one() {
    let mut b = Build::new();
    for (w, extra) in [(0, 120), (1, 60), (2, 30)] {
        b.op("void embedding_kernel<half>(half*)", SYNC);
        for i in 0..199 + extra {
            if i % 7 == 0 && i / 7 < extra {
                b.op(&format!("autotune{w}_{}", i % 5), GAP);
            } else {
                b.op(&format!("layer_op_{}", i % 19), GAP);
            }
        }
    }
    for k in 0..50 {
        token(&mut b, k, k % 5 == 1, 0);
    }
    let st = b.finish();
    let s = auto(&st).expect("steps found");
    assert!((49..=51).contains(&s.steps.len()), "{}", s.steps.len());
}

/// A training loop, GPU-bound (no idle between iterations): 24 layers forward and backward,
/// a loss, an optimizer; the first iteration also creates the optimizer's state.
#[test]
fn training_loop_iterations_are_found() {
    let mut b = Build::new();
    let iters = 40;
    for it in 0..iters {
        for _ in 0..24 {
            for n in ["sm90_gemm_fwd", "bias_add", "gelu"] {
                b.op(n, 500);
            }
        }
        b.op("cross_entropy_fwd", 500);
        b.op("cross_entropy_bwd", 500);
        for _ in 0..24 {
            for n in [
                "gelu_bwd",
                "sm90_gemm_dgrad",
                "sm90_gemm_wgrad",
                "reduce_bias",
            ] {
                b.op(n, 500);
            }
        }
        if it == 0 {
            for _ in 0..24 {
                b.op("zeros_like", 500);
            }
        }
        for _ in 0..4 {
            b.op("multi_tensor_apply_adam", 500);
        }
        b.op_at("Memset (Device)", OpKind::Memset, 500, DUR, 0);
    }
    let st = b.finish();
    let s = auto(&st).expect("steps found");
    assert!((39..=40).contains(&s.steps.len()), "{}", s.steps.len());
    let typical: Vec<u64> = s.steps[1..s.steps.len() - 1]
        .iter()
        .map(|x| x.launches)
        .collect();
    assert!(typical.iter().all(|&n| n == 175), "{typical:?}");
}

/// A loop whose longest idle comes before its last op (`c`, after host work) but whose code
/// starts over at `a` (line 51 after line 53): with launch stacks the steps start at `a`,
/// without them at `c`.
#[test]
fn launch_stacks_set_the_phase() {
    for stacks in [true, false] {
        let mut b = Build::new();
        let main = "loop.py(9): <module>";
        let line = |l: u32| format!("model.py({l}): step");
        let frames = [
            b.stack(&[main, &line(51)]),
            b.stack(&[main, &line(52), "model.py(20): Layer.forward"]),
            b.stack(&[main, &line(53)]),
        ];
        let mut firsts = Vec::new();
        for _ in 0..30 {
            b.cur = if stacks { frames[0] } else { 0 };
            firsts.push(b.op("a", GAP));
            b.cur = if stacks { frames[1] } else { 0 };
            for i in 0..6 {
                b.op(&format!("b{}", i % 3), GAP);
            }
            b.cur = if stacks { frames[2] } else { 0 };
            b.op("c", SYNC);
        }
        let st = b.finish();
        let s = auto(&st).unwrap();
        if stacks {
            assert_eq!(s.steps.len(), 30);
            let got: Vec<Ns> = s.steps.iter().map(|x| x.start).collect();
            assert_eq!(got, firsts);
        } else {
            // From each `c` to the next, after a first step from the first `a` to the first
            // `c` (a period's worth of ops, less one, like the others).
            assert_eq!(s.steps.len(), 30);
            assert_eq!(s.steps[0].start, firsts[0]);
            for (k, x) in s.steps.iter().enumerate().skip(1) {
                assert_eq!(x.start, firsts[k] - GAP - DUR, "the c before a {k}");
            }
        }
    }
}

#[test]
fn random_ops_have_no_steps() {
    let mut b = Build::new();
    let mut x: u64 = 0x2545f4914f6cdd1d;
    for _ in 0..5000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.op(&format!("kernel_{}", x % 60), (x >> 20) as Ns % 50_000);
    }
    let st = b.finish();
    assert_eq!(auto(&st), None);
    // A few repetitions are not a loop either.
    let mut b = Build::new();
    for _ in 0..2 {
        for i in 0..30 {
            b.op(&format!("k{i}"), GAP);
        }
    }
    assert_eq!(auto(&b.finish()), None);
}

/// 8 `ProfilerStep#N` spans (user annotations) on the main thread, each around a
/// `Model.forward` python_function span that launches 10 ops; a second thread has a span of
/// its own. The spans are the steps, exactly.
fn profiled() -> Store {
    let mut b = Build::new();
    let fwd = b.st.names.intern("model.py(10): Model.forward");
    let other = b.st.names.intern("worker.py(3): prefetch");
    let mut spans = Vec::new();
    let mut corr = 0;
    for k in 0..8 {
        let t0 = 10_000_000 + k as Ns * 1_000_000;
        let ps = b.st.names.intern(&format!("ProfilerStep#{k}"));
        let ps_stack = b.st.stacks.intern(0, ps);
        let fwd_stack = b.st.stacks.intern(ps_stack, fwd);
        spans.push(Span {
            start: t0,
            end: t0 + 800_000,
            stack: ps_stack,
            parent: u32::MAX,
        });
        spans.push(Span {
            start: t0 + 5_000,
            end: t0 + 700_000,
            stack: fwd_stack,
            parent: spans.len() as u32 - 1,
        });
        for i in 0..10 {
            corr += 1;
            let launch = t0 + 10_000 + i * 50_000;
            let nm = b.st.names.intern(&format!("op{i}"));
            b.st.push_op_unsorted(
                b.lane,
                GpuOp::new(launch + 5_000, launch + 25_000, OpKind::Kernel, nm, corr),
            );
            let api = b.st.names.intern("cudaLaunchKernel");
            b.st.push_api_unsorted(
                0,
                ApiCall {
                    start: launch,
                    end: launch + 1_000,
                    corr,
                    tid: 1,
                    name: api,
                    stack: fwd_stack,
                    kind: ApiKind::Launch,
                },
            );
        }
    }
    b.st.procs[0].spans.insert(1, spans);
    let os = b.st.stacks.intern(0, other);
    b.st.procs[0].spans.insert(
        2,
        vec![Span {
            start: 10_000_000,
            end: 20_000_000,
            stack: os,
            parent: u32::MAX,
        }],
    );
    b.finish()
}

#[test]
fn profiler_steps_are_the_steps_exactly() {
    let st = profiled();
    for by in [None, Some("ProfilerStep#"), Some("ProfilerStep")] {
        let s = steps::find(&st, Window::all(), by).expect("steps");
        assert_eq!(s.source, StepSource::ProfilerStep, "{by:?}");
        assert_eq!(s.json().source, "profiler_step");
        assert_eq!(s.steps.len(), 8);
        for (k, x) in s.steps.iter().enumerate() {
            // The spans, within the capture: from the first op's start (15 µs into the first
            // span) to the last op's end (485 µs into the last).
            let t0 = 10_000_000 + k as Ns * 1_000_000;
            let start = if k == 0 { t0 + 15_000 } else { t0 };
            let end = if k == 7 { t0 + 485_000 } else { t0 + 800_000 };
            assert_eq!((x.start, x.end), (start, end));
            assert_eq!(x.launches, 10);
            assert_eq!(x.busy_ns, 10 * 20_000);
            assert_eq!(x.idle_ns, end - start - 10 * 20_000);
        }
        assert_eq!(s.steady(), 0..8);
    }
    let one = steps::find(&st, Window::all(), Some("ProfilerStep#3")).unwrap();
    assert_eq!(one.source, StepSource::Spans("ProfilerStep#3".into()));
    assert_eq!(one.json().source, "range");
    assert_eq!(one.steps.len(), 1);
    assert_eq!(one.steps[0].start, 13_000_000);
    // A window takes the spans that overlap it, clipped to it.
    let w = steps::find(&st, Window::new(12_500_000, 14_400_000), None).unwrap();
    let got: Vec<(Ns, Ns)> = w.steps.iter().map(|x| (x.start, x.end)).collect();
    let want = [
        (12_500_000, 12_800_000),
        (13_000_000, 13_800_000),
        (14_000_000, 14_400_000),
    ];
    assert_eq!(got, want);
    // Ranges from elsewhere (NVTX) are measured the same way.
    let r = steps::from_ranges(
        &st,
        StepSource::Spans("nvtx".into()),
        vec![(11_000_000, 11_800_000), (10_000_000, 10_800_000)],
        Ns::MIN,
        Ns::MAX,
    )
    .unwrap();
    assert_eq!(r.steps.len(), 2);
    assert_eq!(r.steps[0].start, 10_000_000, "sorted");
    assert_eq!(r.steps[1].launches, 10);
}

#[test]
fn a_python_function_span_gives_its_calls() {
    let st = profiled();
    for name in ["forward", "Model.forward", "model.py:forward"] {
        let s = steps::find(&st, Window::all(), Some(name)).expect(name);
        assert_eq!(s.source, StepSource::Function(name.into()));
        assert_eq!(s.json().source, "function");
        assert_eq!(s.steps.len(), 8);
        for (k, x) in s.steps.iter().enumerate() {
            // From the call's first op to the next call's first op; the last to its last op.
            let first = 10_015_000 + k as Ns * 1_000_000;
            let end = if k < 7 {
                first + 1_000_000
            } else {
                first + 9 * 50_000 + 20_000
            };
            assert_eq!((x.start, x.end), (first, end), "{name} call {k}");
            assert_eq!(x.launches, 10);
        }
    }
    assert_eq!(steps::find(&st, Window::all(), Some("backward")), None);
    assert_eq!(steps::find(&st, Window::all(), Some("orward")), None);
}

/// Without spans (a live recording), a function's calls come from the launch stacks, whose
/// Python frames carry their current line: 20 calls of `decode_step` (2 from a warm-up loop,
/// 18 from the main loop), half of them separated by a launch outside the function, the other
/// half back to back.
#[test]
fn a_python_function_on_launch_stacks_gives_its_calls() {
    let mut b = Build::new();
    let mut firsts = Vec::new();
    for k in 0..20 {
        let main = if k < 2 {
            "loop.py(25): <module>"
        } else {
            "loop.py(30): <module>"
        };
        let line = |l: u32| format!("model.py({l}): Model.decode_step");
        let emb = b.stack(&[main, &line(51), "model.py(5): Embedding.forward"]);
        let layer = b.stack(&[main, &line(52), "model.py(20): Layer.forward"]);
        let head = b.stack(&[main, &line(53)]);
        firsts.push(b.op_at("embedding", OpKind::Kernel, SYNC, DUR, emb));
        for l in 0..5 {
            for i in 0..4 {
                b.op_at(
                    &format!("layer{}_{i}", l % 2),
                    OpKind::Kernel,
                    GAP,
                    DUR,
                    layer,
                );
            }
        }
        b.op_at("lm_head", OpKind::Kernel, GAP, DUR, head);
        b.op_at("argmax", OpKind::Kernel, GAP, DUR, head);
        if k % 2 == 0 {
            let out = b.stack(&[main]);
            b.op_at("copy_token", OpKind::Kernel, GAP, DUR, out);
        }
    }
    let st = b.finish();
    let s = steps::find(&st, Window::all(), Some("decode_step")).expect("calls");
    assert_eq!(s.source, StepSource::Function("decode_step".into()));
    let got: Vec<Ns> = s.steps.iter().map(|x| x.start).collect();
    assert_eq!(got, firsts);
    for (k, x) in s.steps.iter().enumerate().take(19) {
        let own = 23 + (k % 2 == 0) as u64;
        assert_eq!(x.launches, own, "call {k} and the copy after it");
    }
    assert_eq!(
        s.steps[19].launches, 23,
        "the last ends with its own last op"
    );
}

#[test]
fn an_op_name_delimits_steps() {
    let (st, starts) = decode(50, None);
    for name in [
        "argmax_kernel",
        "void at::native::argmax_kernel<float>(float*)",
    ] {
        let s = steps::find(&st, Window::all(), Some(name)).expect(name);
        assert_eq!(s.source, StepSource::Op(name.into()));
        assert_eq!(s.json().source, "op");
        assert_eq!(s.steps.len(), 50);
        for (k, x) in s.steps.iter().enumerate() {
            assert!(x.start > starts[k] && starts.get(k + 1).is_none_or(|&n| x.start < n));
        }
        for x in &s.steps[..49] {
            assert_eq!(x.launches, 200);
        }
        // The last one: the argmax and the 4 ops after it.
        assert_eq!(s.steps[49].launches, 5);
        assert_eq!(s.steps[49].end, st.span().unwrap().1);
    }
    assert_eq!(steps::find(&st, Window::all(), Some("no_such_op")), None);
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn load(p: &str) -> Store {
    gaptop_core::sources::load_path(&root().join(p), usize::MAX).unwrap()
}

/// The hand-made fixture: one call of `forward` (with `attn` and `mlp` in it), 6 ops; not a
/// loop. Busy and idle are the fixture's worked-out answers.
#[test]
fn multi_stream_fixture() {
    let st = load("tests/fixtures/multi_stream.json");
    assert_eq!(auto(&st), None);
    let s = steps::find(&st, Window::all(), Some("forward")).unwrap();
    assert_eq!(s.source, StepSource::Function("forward".into()));
    assert_eq!(s.steps.len(), 1);
    let x = s.steps[0];
    assert_eq!((x.start, x.end), (1_000_010_000, 1_000_160_000));
    assert_eq!((x.busy_ns, x.idle_ns, x.launches), (65_000, 85_000, 6));
    let a = steps::find(&st, Window::all(), Some("attn")).unwrap();
    assert_eq!(
        (a.steps[0].start, a.steps[0].end, a.steps[0].launches),
        (1_000_010_000, 1_000_050_000, 3)
    );
    // kernel_c(float*) by its short name: from it to the last op.
    let c = steps::find(&st, Window::all(), Some("kernel_c")).unwrap();
    assert_eq!(c.source, StepSource::Op("kernel_c".into()));
    assert_eq!(
        (c.steps[0].start, c.steps[0].end, c.steps[0].launches),
        (1_000_105_000, 1_000_160_000, 3)
    );
}

/// torch.profiler's trace of launchbound.py: 110 calls of `rope` (50 warm-up, 60 timed) of 64
/// kernels, each 8 rounds of the same 8 kernels. By the function: its 110 calls, the first
/// (CUDA's first launches) not steady; automatically the same, from the program's structure
/// (the op sequence alone repeats every 8 ops, the rounds).
#[test]
fn kineto_launchbound_trace() {
    let st = load("../shared/traces/kineto-launchbound.json.gz");
    let s = steps::find(&st, Window::all(), Some("rope")).unwrap();
    assert_eq!(s.source, StepSource::Function("rope".into()));
    assert_eq!(s.steps.len(), 110);
    assert!(s.steps.iter().all(|x| x.launches == 64));
    assert_eq!(s.steady(), 1..110);
    // Automatically: the trace's Python spans give rope's calls, as by name.
    let a = auto(&st).unwrap();
    assert_eq!(a.source, StepSource::Structure("rope".into()));
    assert_eq!(a.steps, s.steps);
}

/// GPT-2 recording: 25 forward passes (5 warm-up, 20 timed) of 283 ops, 12 layers each. The
/// automatic steps are the passes, not the layers, and start where the calls of
/// `GPT2LMHeadModel.forward` (from the launch stacks) do.
#[test]
fn gpt2_recording_forward_passes() {
    let st = load("assets/gpt2.rec");
    let a = auto(&st).unwrap();
    assert_eq!(a.steps.len(), 25);
    assert!(a.steps.iter().all(|x| x.launches == 283));
    let f = steps::find(&st, Window::all(), Some("GPT2LMHeadModel.forward")).unwrap();
    assert_eq!(f.steps.len(), 25);
    assert!(f.steps.iter().all(|x| x.launches == 283));
    let same = a
        .steps
        .iter()
        .zip(&f.steps)
        .filter(|(x, y)| x.start == y.start)
        .count();
    assert_eq!(same, 25, "auto and function starts agree on {same} of 25");
    assert_eq!(a.steady(), 1..25, "the first pass is the slow one");
}

/// The two-GPU DDP recording: 20 training steps on each rank; found on one device, busy and
/// idle summed over both.
#[test]
fn ddp_recording_training_steps() {
    let st = load("assets/ddp2.rec");
    let a = auto(&st).unwrap();
    assert_eq!(a.devices, 2);
    assert_eq!(a.steps.len(), 20);
    assert_eq!(a.steady().start, 1, "NCCL's first step is slow");
}

/// The planted recording: a warm-up call of `fast`, then 100 iterations of `fast`,
/// `host_stall`, `sync_then_launch` at the script's top level. `fast` is called once an
/// iteration and launches 4 of its 6 ops, so its calls are the steps: the warm-up call and the
/// 100 iterations.
#[test]
fn planted_recording_iterations() {
    let st = load("assets/planted.rec");
    let a = auto(&st).unwrap();
    assert_eq!(a.source, StepSource::Structure("fast".into()));
    assert_eq!(a.steps.len(), 101);
    // The last ends with its own call's last op.
    assert!(a.steps[1..100].iter().all(|x| x.launches == 6));
    assert_eq!(a.steps[100].launches, 4);
}

/// The Llama decode of ../shared/fixtures/llama-decode (see its README): a warm-up `generate`
/// of 8 tokens, then one of 16. From the recording's launch stacks the steps are the 24 calls
/// of `LlamaForCausalLM.forward`; the Kineto trace of the same run has no stacks, so its steps
/// are guessed from the ops, to 24 ± 1. Neither adds up to more than the capture.
#[test]
fn llama_decode_fixtures_give_the_forward_calls() {
    let st = load("../shared/fixtures/llama-decode/llama16-cudnn.rec");
    let s = auto(&st).unwrap();
    assert_eq!(
        s.source,
        StepSource::Structure("LlamaForCausalLM.forward".into())
    );
    assert!((23..=25).contains(&s.steps.len()), "{}", s.steps.len());
    let by = steps::find(&st, Window::all(), Some("LlamaForCausalLM.forward")).unwrap();
    assert_eq!(
        by.steps, s.steps,
        "as --step LlamaForCausalLM.forward gives"
    );
    let j = s.json();
    assert!(!j.guessed);
    let k = load("../shared/fixtures/llama-decode/kineto-llama16-cudnn.json.gz");
    let g = auto(&k).unwrap();
    assert_eq!(g.source, StepSource::Auto);
    assert!((23..=25).contains(&g.steps.len()), "{}", g.steps.len());
    assert!(g.json().guessed);
    for (s, st) in [(&s, &st), (&g, &k)] {
        let (lo, hi) = st.span().unwrap();
        let total: Ns = s.steps.iter().map(|x| x.wall()).sum();
        assert!(total <= hi - lo);
        let median = s.median_ns() as u64;
        let fewest = s.steps.iter().map(|x| x.launches).min().unwrap();
        let typical = steps::quantile(s.steps.iter().map(|x| x.launches as Ns).collect(), 0.5);
        assert!(
            fewest as Ns * 4 >= typical,
            "no sliver: {fewest} ops against a median of {typical} ({median} ns)"
        );
    }
}

/// Speed on a million ops (5,000 decode tokens of 200): run with
/// `cargo test --release --test steps -- --ignored --nocapture`.
#[test]
#[ignore]
fn speed_on_a_million_ops() {
    let mut b = Build::new();
    for k in 0..5000 {
        token(&mut b, k, k % 7 == 3, 0);
    }
    let st = b.finish();
    assert!(st.op_count() >= 1_000_000);
    let t = std::time::Instant::now();
    let s = auto(&st).unwrap();
    let el = t.elapsed();
    assert!((4999..=5001).contains(&s.steps.len()));
    println!(
        "decode, {} ops: {} steps in {el:?}",
        st.op_count(),
        s.steps.len()
    );

    // The same with launch stacks (Python frames with lines), whose turns set the phase.
    let mut b = Build::new();
    let main = "gen.py(40): <module>";
    let line = |l: u32| format!("model.py({l}): Model.decode_step");
    b.token_stacks = Some([
        b.stack(&[main, &line(51), "model.py(5): Embedding.forward"]),
        b.stack(&[main, &line(52), "model.py(20): Layer.forward"]),
        b.stack(&[main, &line(53)]),
    ]);
    let mut starts = Vec::new();
    for k in 0..5000 {
        starts.push(token(&mut b, k, k % 7 == 3, 0));
    }
    let st = b.finish();
    let t = std::time::Instant::now();
    let s = auto(&st).unwrap();
    let el = t.elapsed();
    assert_eq!(s.steps.len(), 5000);
    assert_eq!(s.steps[1].start, starts[1]);
    println!(
        "decode with stacks, {} ops: {} steps in {el:?}",
        st.op_count(),
        s.steps.len()
    );

    let mut b = Build::new();
    let mut x: u64 = 0x2545f4914f6cdd1d;
    for _ in 0..1_000_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b.op(&format!("kernel_{}", x % 300), GAP);
    }
    let st = b.finish();
    let t = std::time::Instant::now();
    assert_eq!(auto(&st), None);
    println!("random, {} ops: none in {:?}", st.op_count(), t.elapsed());
}

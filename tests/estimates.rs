//! Estimates against captures whose truth is known (issues 36 and 37): programs simulated and
//! written as Kineto traces by `support::gen`, whose steps and planted costs the generator
//! works out itself (a planted thing's cost: the mean steady step with it less the mean step
//! of the same program simulated without it).
//!
//! The report's contract checked here: `steps.count`, `steps.warmup` (leading warm-up steps),
//! `steps.source` (`structure` for steps found from the Python stacks), `steps.median_ns`;
//! `replay.baseline_error` (the median over steps of |replayed − measured| / measured); and
//! each `advice[]`'s `saving_ns` (the replayed step before less after the site's fix, a mean
//! over the steady steps), `gap_sum_ns` and `whatif`.

mod support;

use gaptop_core::sources::kineto;
use serde_json::Value;
use support::gen::{call, generate, launch, simulate, Node, Plant, Shape, Spec, Timing, MAIN, T0};
use support::{advice, report_json, tempdir};

/// Simulates `spec` into a fresh folder and reports it.
fn run(tag: &str, spec: &Spec) -> (support::gen::Truth, Value) {
    let t = generate(spec, &tempdir(tag));
    let j = report_json(&t.path, &[]);
    (t, j)
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * want.abs()
}

fn saving(a: &Value) -> f64 {
    a["saving_ns"]
        .as_f64()
        .unwrap_or_else(|| panic!("no saving: {a}"))
}

/// Stall `ns` of CPU before `layer`'s first launch, on `rank` (None: every rank).
fn stall(rank: Option<usize>, layer: usize, ns: i64) -> Option<Plant> {
    Some(Plant {
        rank,
        layer,
        ns,
        factor: 1,
    })
}

/// Steps found as the generator made them, from the program's structure.
fn assert_steps(j: &Value, t: &support::gen::Truth) {
    let s = &j["steps"];
    assert_eq!(s["count"], t.steps, "{s}");
    assert_eq!(s["warmup"], t.warmup, "{s}");
    assert_eq!(s["source"], "structure", "{s}");
}

// ---- The generator itself ----

/// A tiny program's exact times, worked out by hand from the default timing (launch 5 µs,
/// latency 4 µs, spacing 1 µs, sync tail 2 µs, other calls 2 µs, 0.1 µs a Python call).
#[test]
fn generator_simulates_a_tiny_program_exactly() {
    let tm = Timing::default();
    let p = vec![call(
        "m.py(1): f",
        vec![
            Node::Cpu(1_000),
            launch("a", 10_000),
            launch("b", 2_000),
            Node::Sync(7),
        ],
    )];
    let tl = &simulate(&[p], &tm)[0];
    // a: called at 1.1, ready at 5.1; b: called at 6.1, ready at 10.1, after a's end + 1.
    let ops: Vec<_> = tl.ops.iter().map(|o| (o.start - T0, o.end - T0)).collect();
    assert_eq!(ops, vec![(5_100, 15_100), (16_100, 18_100)]);
    let apis: Vec<_> = tl
        .apis
        .iter()
        .map(|a| (a.name, a.start - T0, a.end - T0))
        .collect();
    assert_eq!(
        apis,
        vec![
            ("cudaLaunchKernel", 1_100, 6_100),
            ("cudaLaunchKernel", 6_100, 11_100),
            // Returns 2 µs after b ends.
            ("cudaStreamSynchronize", 11_100, 20_100),
        ]
    );
    assert_eq!((tl.spans[0].start - T0, tl.spans[0].end - T0), (0, 20_100));

    // An event wait: the second stream's op starts 1 µs after the first one's op ends.
    let p = vec![
        launch("a", 10_000),
        Node::WaitEvent { stream: 8, on: 7 },
        Node::Launch("b".into(), 1_000, 8),
    ];
    let tl = &simulate(&[p], &tm)[0];
    let ops: Vec<_> = tl.ops.iter().map(|o| (o.start - T0, o.end - T0)).collect();
    assert_eq!(ops, vec![(4_000, 14_000), (15_000, 16_000)]);
    assert_eq!(tl.waits, vec![(8, 3, 7, 2, T0 + 7_000)]);

    // A collective: rank 1 arrives 5 µs later, both end 5 µs after it starts; rank 0's sync
    // waits for that.
    let r0 = vec![launch("k", 1_000), Node::AllReduce(5_000, 7), Node::Sync(7)];
    let r1 = vec![Node::Cpu(10_000), Node::AllReduce(5_000, 7)];
    let tls = simulate(&[r0, r1], &tm);
    let nccl = |r: usize| {
        let o = tls[r].ops.last().unwrap();
        (o.start - T0, o.end - T0)
    };
    assert_eq!(nccl(0), (9_000, 19_000));
    assert_eq!(nccl(1), (14_000, 19_000));
    assert_eq!(tls[0].apis[2].end - T0, 21_000);
}

/// What the generator writes is what it simulated, to the nanosecond, as gaptop reads it; its
/// steps and its truth follow the program.
#[test]
fn generator_writes_what_it_simulated() {
    let mut spec = Spec::new(5, 2, 3);
    spec.side_stream = true;
    spec.sync = true;
    let t = generate(&spec, &tempdir("gen-exact"));
    let tl = &spec.simulate()[0];
    let store = kineto::load(&t.path, usize::MAX).unwrap();
    let mut read: Vec<(i64, i64)> = store
        .lanes
        .iter()
        .flat_map(|l| l.iter().map(|o| (o.start, o.end)).collect::<Vec<_>>())
        .collect();
    let mut want: Vec<(i64, i64)> = tl.ops.iter().map(|o| (o.start, o.end)).collect();
    read.sort();
    want.sort();
    assert_eq!(read, want);
    assert_eq!(t.steps, 5);
    assert_eq!(t.step_ns.len(), 5);
    // Fused launches never cost more; a sync at each step's end does here.
    assert!(
        t.cost("fuse") >= 0.0 && t.cost("sync") > 0.0,
        "{:?}",
        t.costs
    );
    assert!(t.step_ns.iter().all(|&s| s > 0));
}

// ---- Steps ----

/// With torch.profiler's `ProfilerStep#N` markers, the steps are the markers.
#[test]
fn steps_of_profiler_step_markers() {
    let mut spec = Spec::new(12, 4, 4);
    spec.markers = true;
    let (t, j) = run("est-markers", &spec);
    assert_eq!(j["steps"]["count"], t.steps, "{}", j["steps"]);
    assert_eq!(j["steps"]["source"], "profiler_step");
}

/// Nested loops: 3 epochs of 10 steps, the first two steps warm-up.
#[test]
fn steps_of_nested_loops_with_warmup() {
    let mut spec = Spec::new(10, 6, 4);
    spec.shape = Shape::Train { epochs: 3 };
    spec.warmup = 2;
    spec.warmup_ns = 3_000_000;
    let (t, j) = run("est-nested", &spec);
    assert_eq!(t.steps, 30);
    assert_steps(&j, &t);
}

/// Two `generate` calls (a warm-up one of 8 tokens, then 16): a step is a forward call.
#[test]
fn steps_of_two_generate_calls() {
    let mut spec = Spec::new(12, 8, 4);
    spec.shape = Shape::Decode { generates: 2 };
    spec.warmup = 1;
    spec.warmup_ns = 3_000_000;
    let (t, j) = run("est-generate", &spec);
    assert_eq!(t.steps, 24);
    assert_steps(&j, &t);
}

/// The same loop with 8 and with 16 layers: the steps do not change with the layers.
#[test]
fn steps_of_8_and_16_layers() {
    for layers in [8, 16] {
        let mut spec = Spec::new(20, layers, 5);
        spec.sync = true;
        let (t, j) = run("est-layers", &spec);
        assert_eq!(t.steps, 20);
        assert_steps(&j, &t);
    }
}

// ---- Savings ----

/// A 300 µs CPU stall in `Model.stall` before layer 3's first launch, every step, with a sync
/// at each step's end (so the CPU does not run ahead of the GPU for good): the stall's site
/// comes first, and its replayed saving is the planted cost, within 2%.
#[test]
fn planted_stall_comes_first_with_its_cost() {
    let mut spec = Spec::new(30, 8, 6);
    spec.sync = true;
    spec.warmup = 2;
    spec.warmup_ns = 3_000_000;
    spec.stall = stall(None, 3, 300_000);
    let (t, j) = run("est-stall", &spec);
    let truth = t.cost("stall");
    // The CPU was ahead of the GPU: the stall costs less than its length.
    assert!(truth > 100_000.0 && truth < 300_000.0, "{truth}");
    let first = &j["advice"][0];
    assert!(
        first["site"].as_str().unwrap().starts_with("Model.stall"),
        "{}",
        j["advice"]
    );
    assert!(within(saving(first), truth, 0.02), "{first} vs {truth}");
    assert!(first["gap_sum_ns"].is_number(), "{first}");
    assert!(first["whatif"].as_str().is_some_and(|w| !w.is_empty()));
}

/// A stall overlapped with the GPU on its own thread saves what the GPU's slack can hide: all
/// of it where the GPU is the bottleneck (50 µs kernels: 3.2 ms of GPU a step against 1.2 ms
/// of CPU), almost none where the thread is (2 µs kernels against 6 µs of CPU a launch),
/// while removing it saves its cost in both.
#[test]
fn overlapped_host_work_saves_what_the_gpu_hides() {
    for (kernel_ns, gpu_bound) in [(50_000, true), (2_000, false)] {
        let mut spec = Spec::new(20, 8, 8);
        spec.kernel_ns = kernel_ns;
        spec.sync = true;
        // After the first layer: longer than the work the GPU has queued by then.
        spec.stall = stall(None, 1, 800_000);
        let (t, j) = run(&format!("est-overlap-{kernel_ns}"), &spec);
        let a = advice(&j, "Model.stall");
        let removed = saving(a);
        let overlapped = a["saving_overlapped_ns"]
            .as_f64()
            .unwrap_or_else(|| panic!("{a}"));
        assert!(within(removed, t.cost("stall"), 0.02), "{a}");
        assert!(overlapped <= removed, "{a}");
        if gpu_bound {
            assert!(overlapped >= 0.9 * removed, "{a}");
        } else {
            assert!(overlapped <= 0.1 * removed, "{a}");
        }
    }
}

/// `.item()` (`Model.item`, a `cudaStreamSynchronize`) once a step: removing it saves what the
/// generator measured without it, within 2%. `Model.item` launches nothing: the sync's site is
/// the function that made the call (the `cudaStreamSynchronize`'s stack).
#[test]
fn sync_saving_is_its_cost() {
    let mut spec = Spec::new(30, 8, 6);
    spec.sync = true;
    let (t, j) = run("est-sync", &spec);
    let truth = t.cost("sync");
    assert!(truth > 0.0);
    let a = advice(&j, "Model.item");
    assert!(within(saving(a), truth, 0.02), "{a} vs {truth}");
}

/// A launch-bound layer (8 kernels of 2 µs against 5 µs launches): its site's launches fused
/// into one a call save what the generator measured with them fused, within 2%.
#[test]
fn launch_bound_saving_is_the_fused_cost() {
    let mut spec = Spec::new(30, 8, 8);
    spec.kernel_ns = 2_000;
    let (t, j) = run("est-fuse", &spec);
    let truth = t.cost("fuse");
    assert!(truth > 0.0);
    let a = advice(&j, "Layer.forward");
    assert!(within(saving(a), truth, 0.02), "{a} vs {truth}");
}

/// The same launch-bound layers, each step ending in a sync, and then without it: each step's
/// launches captured as one CUDA graph save what the generator measured with one graph launch
/// a step, within 2%.
#[test]
fn whole_step_graph_saving_is_its_cost() {
    for sync in [true, false] {
        let mut spec = Spec::new(30, 8, 8);
        spec.kernel_ns = 2_000;
        spec.sync = sync;
        let (t, j) = run(if sync { "est-graph-sync" } else { "est-graph" }, &spec);
        let truth = t.cost("graph");
        assert!(truth > 0.0);
        let got = j["replay"]["graph_saving_ns"].as_f64().unwrap();
        assert!(within(got, truth, 0.02), "sync {sync}: {got} vs {truth}");
        // Launch-bound: the headline says it.
        let text = String::from_utf8(support::report_out(&t.path, "text", &[])).unwrap();
        assert!(text.contains("A CUDA graph of each step"), "{text}");
    }
}

/// Four ranks with an all-reduce after every layer; rank 2 stalls 400 µs before layer 5 (its
/// CPU is ~135 µs ahead of its GPU there), so every rank waits for it at that all-reduce: the
/// stall's site comes first, with the planted cost within 5%.
#[test]
fn late_rank_stall_comes_first_with_its_cost() {
    let spec = late_rank();
    let (t, j) = run("est-late", &spec);
    let truth = t.cost("stall");
    assert!(truth > 200_000.0 && truth < 400_000.0, "{truth}");
    let first = &j["advice"][0];
    assert!(
        first["site"].as_str().unwrap().starts_with("Model.stall"),
        "{}",
        j["advice"]
    );
    assert!(within(saving(first), truth, 0.05), "{first} vs {truth}");
}

fn late_rank() -> Spec {
    let mut spec = Spec::new(20, 8, 4);
    spec.ranks = 4;
    spec.allreduce_ns = Some(20_000);
    spec.sync = true;
    spec.stall = stall(Some(2), 5, 400_000);
    spec
}

/// Issue 37: 2, 8 and 64 ranks, the last one stalling before layer 5. The headline names that
/// rank and the function, and the replayed saving is the planted cost within 10%.
#[test]
fn many_ranks_name_the_late_rank() {
    for ranks in [2, 8, 64] {
        let mut spec = late_rank();
        spec.ranks = ranks;
        spec.stall = stall(Some(ranks - 1), 5, 400_000);
        let (t, j) = run("est-ranks", &spec);
        let truth = t.cost("stall");
        let first = &j["advice"][0];
        assert!(
            first["site"].as_str().unwrap().starts_with("Model.stall"),
            "{ranks} ranks: {}",
            j["advice"]
        );
        assert!(within(saving(first), truth, 0.10), "{first} vs {truth}");
        let text = String::from_utf8(support::report_out(&t.path, "text", &[])).unwrap();
        let head = text.lines().find(|l| l.contains("Fix first")).unwrap_or("");
        let rank = format!("rank {}", ranks - 1);
        assert!(
            head.contains(&rank) && head.contains("Model.stall"),
            "{ranks} ranks: {head}"
        );
    }
}

/// A second stream, each layer's side kernel waiting on the main stream through an event:
/// the replay of the capture unchanged reproduces it to rounding.
#[test]
fn second_stream_replays_exactly() {
    let mut spec = Spec::new(20, 6, 4);
    spec.side_stream = true;
    spec.sync = true;
    let (_, j) = run("est-side", &spec);
    assert_baseline(&j);
}

fn assert_baseline(j: &Value) {
    let e = j["replay"]["baseline_error"]
        .as_f64()
        .unwrap_or_else(|| panic!("no replay: {}", j["replay"]));
    assert!(e < 1e-3, "baseline error {e}");
}

// ---- Every generated capture ----

/// Every program the tests above generate, and a slow kernel (3x) on one of four ranks.
fn catalog() -> Vec<(&'static str, Spec)> {
    let mut v = Vec::new();
    let mut s = Spec::new(10, 6, 4);
    s.shape = Shape::Train { epochs: 3 };
    s.warmup = 2;
    s.warmup_ns = 3_000_000;
    v.push(("nested", s));
    let mut s = Spec::new(12, 8, 4);
    s.shape = Shape::Decode { generates: 2 };
    s.warmup = 1;
    s.warmup_ns = 3_000_000;
    v.push(("generate", s));
    let mut s = Spec::new(20, 16, 5);
    s.sync = true;
    v.push(("16-layers", s));
    let mut s = Spec::new(30, 8, 6);
    s.sync = true;
    s.stall = stall(None, 3, 300_000);
    v.push(("stall", s));
    let mut s = Spec::new(30, 8, 8);
    s.kernel_ns = 2_000;
    v.push(("launch-bound", s));
    v.push(("late-rank", late_rank()));
    let mut s = late_rank();
    s.stall = None;
    s.slow = Some(Plant {
        rank: Some(3),
        layer: 2,
        ns: 0,
        factor: 3,
    });
    v.push(("slow-kernel", s));
    let mut s = Spec::new(20, 6, 4);
    s.side_stream = true;
    s.sync = true;
    v.push(("side-stream", s));
    v
}

/// No advice's saving is larger than the median step, on any generated capture.
#[test]
fn no_saving_exceeds_the_step() {
    for (tag, spec) in catalog() {
        let (_, j) = run(tag, &spec);
        let median = j["steps"]["median_ns"].as_f64().expect("steps");
        for a in j["advice"].as_array().unwrap() {
            if let Some(s) = a["saving_ns"].as_f64() {
                assert!(s <= median, "{tag}: {a} saves more than a {median} ns step");
            }
        }
    }
}

/// The replay of every generated capture, unchanged, reproduces its steps to rounding.
#[test]
fn every_capture_replays_exactly() {
    for (tag, spec) in catalog() {
        let (_, j) = run(tag, &spec);
        assert_baseline(&j);
    }
}

/// The sync-bound loop of bench/workloads/item_sync.py: 2 ms of host work at each step's start,
/// then a GPU-heavy step (8 layers of 6 kernels of 100 µs), then `.item()`. The sync keeps the
/// next step's host work from running under this step's kernels, so removing it saves about
/// the host work: the report leads with `Model.item` as a sync, with that saving; the launch
/// site whose gaps follow it says the sync is in `Model.item` and ranks after it.
#[test]
fn a_sync_before_host_work_is_named_first() {
    let mut spec = Spec::new(20, 8, 6);
    spec.kernel_ns = 100_000;
    spec.step_cpu_ns = 2_000_000;
    spec.sync = true;
    let (t, j) = run("est-item", &spec);
    let truth = t.cost("sync");
    assert!(truth > 1_500_000.0, "{truth}");
    let first = &j["advice"][0];
    assert!(
        first["site"].as_str().unwrap().starts_with("Model.item"),
        "{first}"
    );
    assert_eq!(first["verdict"], "sync", "{first}");
    assert!(within(saving(first), truth, 0.05), "{first} vs {truth}");
    let launch = advice(&j, "Layer.forward");
    assert_eq!(launch["verdict"], "sync", "{launch}");
    assert_eq!(launch["sync_in"], first["site"], "{launch}");
    let text = launch["text"].as_str().unwrap();
    assert!(text.contains("The sync: Model.item"), "{text}");
    let out = String::from_utf8(support::report_out(&t.path, "text", &[])).unwrap();
    let head = out.lines().next().unwrap_or("");
    assert!(head.starts_with("Fix first: Model.item"), "{out}");
    // The launch site's saving is that fix's, said so rather than as a second fix.
    let then = out.lines().nth(2).unwrap_or("");
    assert!(
        then.contains("Layer.forward")
            && then.contains("(its gaps follow that sync: the same fix)"),
        "{out}"
    );
}

/// The same loop as item_sync.py writes it: the `.item()` in the step function, which also
/// launches (the loss's reduction), after the model's kernels; the host work in a sampler
/// before them; a `torch.cuda.synchronize()` after every fifth step (the loop's timing). The
/// syncs of a function that launches have a row of their own, which leads, and the model's
/// row names it as the sync to remove. The timing's sync, right after an `.item()`, waits for
/// nothing: its own what-if removes its syncs alone, not the `.item()` before it.
#[test]
fn a_sync_in_a_function_that_launches_is_named_first() {
    let program = |sync: bool| {
        let steps = (0..20)
            .flat_map(|k| {
                let layers = (0..48).map(|_| launch("gemm", 100_000)).collect();
                let mut body = vec![
                    call("sampler.py(5): Sampler.pick", vec![Node::Cpu(2_000_000)]),
                    call("model.py(30): Model.forward", layers),
                    Node::Cpu(3_000),
                    launch("mean", 5_000),
                ];
                if sync {
                    body.push(Node::Sync(MAIN));
                }
                let mut step = vec![call("train.py(20): train_step", body)];
                if k % 5 == 4 {
                    step.push(call("timing.py(8): synchronize", vec![Node::Sync(MAIN)]));
                }
                step
            })
            .collect();
        vec![call("train.py(10): <module>", steps)]
    };
    let mean = |sync: bool| {
        let tl = &simulate(&[program(sync)], &Timing::default())[0];
        let v = support::gen::step_times(tl, "train.py(20): train_step");
        v[10..].iter().sum::<i64>() as f64 / (v.len() - 10) as f64
    };
    let truth = mean(true) - mean(false);
    assert!(truth > 1_500_000.0, "{truth}");
    let dir = tempdir("est-item-launching");
    let tl = &simulate(&[program(true)], &Timing::default())[0];
    std::fs::write(dir.join("trace.json"), support::gen::kineto(tl, 0, 1)).unwrap();
    let j = report_json(&dir.join("trace.json"), &[]);
    let first = &j["advice"][0];
    assert!(
        first["site"].as_str().unwrap().starts_with("train_step"),
        "{}",
        j["advice"]
    );
    assert_eq!(first["verdict"], "sync", "{first}");
    assert!(within(saving(first), truth, 0.1), "{first} vs {truth}");
    let model = advice(&j, "Model.forward");
    assert_eq!(model["sync_in"], first["site"], "{model}");
    let timing = advice(&j, "synchronize");
    assert!(timing["sync_in"].is_null(), "{timing}");
    assert!(saving(timing) < 0.02 * truth, "{timing} vs {truth}");
}

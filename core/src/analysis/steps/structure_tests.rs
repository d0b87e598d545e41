//! Steps from the program's structure on stores built launch by launch from Python stacks,
//! where the answer follows from the program the stacks describe.

use crate::analysis::steps::{find, StepSource, Steps};
use crate::model::records::{ApiCall, ApiKind, GpuOp, LaneKey, Ns, OpKind, StackId};
use crate::model::store::Store;
use crate::model::window::Window;

const DUR: Ns = 5_000;
const GAP: Ns = 2_000;
const CALL: &str = "torch/nn/modules/module.py(1790): Module._call_impl";

/// A one-process, one-stream program: each launch from a stack of Python frames, its op
/// `gap` after the previous one ends.
struct Prog {
    st: Store,
    lane: usize,
    t: Ns,
    corr: u32,
    /// Stack frames as written, under which `launch` puts its frames.
    base: Vec<String>,
    /// Without stacks (a capture that has none).
    bare: bool,
}

impl Prog {
    fn new() -> Self {
        let mut st = Store::default();
        st.add_process(1, -1, "test");
        let lane = st.lane_id(LaneKey {
            proc: 0,
            device: 0,
            stream: 7,
        });
        Prog {
            st,
            lane,
            t: 1_000_000,
            corr: 0,
            base: Vec::new(),
            bare: false,
        }
    }

    fn stack(&mut self, frames: &[&str]) -> StackId {
        if self.bare {
            return 0;
        }
        let mut s = 0;
        for f in self
            .base
            .iter()
            .map(String::as_str)
            .chain(frames.iter().copied())
        {
            let id = self.st.names.intern(f);
            s = self.st.stacks.intern(s, id);
        }
        s
    }

    /// An op named `name` launched from `frames` (under `base`), `gap` after the last one;
    /// returns its start.
    fn launch(&mut self, name: &str, gap: Ns, frames: &[&str]) -> Ns {
        let stack = self.stack(frames);
        let start = self.t + gap;
        self.corr += 1;
        let nm = self.st.names.intern(name);
        self.st.push_op_unsorted(
            self.lane,
            GpuOp::new(start, start + DUR, OpKind::Kernel, nm, self.corr),
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
        self.t = start + DUR;
        start
    }

    /// A model's forward (an `nn.Module` call from `line` of the caller, whose frames are
    /// `base`): an embedding, `layers` layer modules of 3 launches, a head. Returns its first
    /// op's start.
    fn forward(&mut self, layers: usize, gap: Ns) -> Ns {
        let first = self.launch("embedding", gap, &[CALL, "model.py(10): Model.forward"]);
        for _ in 0..layers {
            for (i, line) in [20, 21, 22].into_iter().enumerate() {
                let f = format!("model.py({line}): Layer.forward");
                self.launch(
                    &format!("layer_op{i}"),
                    GAP,
                    &[CALL, "model.py(12): Model.forward", CALL, &f],
                );
            }
        }
        self.launch("lm_head", GAP, &[CALL, "model.py(14): Model.forward"]);
        first
    }

    /// `generate(tokens)` called from line `line` of the script: a launch that sets up its
    /// loop, then each token a forward and two sampling launches, after a sync. Returns the
    /// forwards' starts.
    fn generate(&mut self, line: u32, tokens: usize, layers: usize) -> Vec<Ns> {
        self.base = vec![
            format!("run.py({line}): <module>"),
            "gen.py(25): generate".into(),
        ];
        self.launch("fill_mask", GAP, &[]);
        let mut starts = Vec::new();
        for _ in 0..tokens {
            self.base = vec![
                format!("run.py({line}): <module>"),
                "gen.py(30): generate".into(),
            ];
            starts.push(self.forward(layers, 100_000));
            self.base[1] = "gen.py(32): generate".into();
            self.launch("argmax", GAP, &[]);
            self.base[1] = "gen.py(33): generate".into();
            self.launch("cat", GAP, &[]);
        }
        starts
    }

    /// A sync from `frames` (under `base`) that launches nothing, right after the last op.
    fn sync(&mut self, frames: &[&str]) {
        let stack = self.stack(frames);
        self.corr += 1;
        let api = self.st.names.intern("cudaDeviceSynchronize");
        self.st.push_api_unsorted(
            0,
            ApiCall {
                start: self.t - 500,
                end: self.t + 1_000,
                corr: self.corr,
                tid: 1,
                name: api,
                stack,
                kind: ApiKind::Sync,
            },
        );
        self.t += 1_000;
    }

    fn finish(mut self) -> Store {
        self.st.finish_bulk();
        self.st
    }
}

fn auto(st: &Store) -> Steps {
    find(st, Window::all(), None).expect("steps")
}

fn starts(s: &Steps) -> Vec<Ns> {
    s.steps.iter().map(|x| x.start).collect()
}

/// A warm-up `generate` of 8 tokens, then one of 16: the 24 forwards, not the 2 generate
/// calls, nor the layers.
#[test]
fn two_generate_calls_give_the_forward_calls() {
    let mut p = Prog::new();
    let mut want = p.generate(5, 8, 4);
    want.extend(p.generate(6, 16, 4));
    let st = p.finish();
    let s = auto(&st);
    assert_eq!(s.source, StepSource::Structure("Model.forward".into()));
    assert_eq!(starts(&s), want);
    for (k, x) in s.steps[..23].iter().enumerate() {
        // A forward, two sampling launches; the eighth also the second generate's setup.
        let want = 4 * 3 + 2 + 2 + (k == 7) as u64;
        assert_eq!(x.launches, want, "step {k}");
    }
    let j = s.json();
    assert_eq!((j.source, j.guessed, j.suggest), ("structure", false, None));
    assert_eq!(j.name.as_deref(), Some("Model.forward"));
    // The name given is one `--step` takes, to the same steps.
    let by = find(&st, Window::all(), Some("Model.forward")).unwrap();
    assert_eq!(by.steps, s.steps);
}

/// However many layers a forward has, against however many forwards, the steps are the
/// forwards.
#[test]
fn layers_are_never_the_steps() {
    for (tokens, layers) in [(3, 2), (5, 12), (4, 40), (30, 1)] {
        let mut p = Prog::new();
        let want = p.generate(5, tokens, layers);
        let s = auto(&p.finish());
        assert_eq!(s.source, StepSource::Structure("Model.forward".into()));
        assert_eq!(starts(&s), want, "{tokens} tokens of {layers} layers");
    }
}

/// `train()` runs `epochs` calls of `train_epoch`, each 10 calls of `train_step` (a forward,
/// a loss, an optimizer step) and an evaluation: the steps are the iterations, however few
/// the epochs.
#[test]
fn nested_loops_give_the_iterations() {
    for epochs in [2, 3, 5] {
        let mut p = Prog::new();
        let mut want = Vec::new();
        for _ in 0..epochs {
            for _ in 0..10 {
                p.base = vec![
                    "train.py(60): <module>".into(),
                    "train.py(50): train".into(),
                    "train.py(40): train_epoch".into(),
                    "train.py(20): train_step".into(),
                ];
                want.push(p.forward(6, 50_000));
                p.base[3] = "train.py(21): train_step".into();
                p.launch("loss", GAP, &[]);
                p.base[3] = "train.py(22): train_step".into();
                for _ in 0..4 {
                    p.launch("adam", GAP, &["optim.py(7): Adam.step"]);
                }
            }
            p.base = vec![
                "train.py(60): <module>".into(),
                "train.py(50): train".into(),
                "train.py(42): train_epoch".into(),
            ];
            p.launch("eval", 200_000, &["train.py(30): evaluate"]);
        }
        let s = auto(&p.finish());
        assert_eq!(
            s.source,
            StepSource::Structure("train_step".into()),
            "{epochs} epochs"
        );
        assert_eq!(starts(&s), want, "{epochs} epochs");
    }
}

/// A first forward with a lazy initialization in it is warm-up, and says so.
#[test]
fn a_slow_first_step_is_warm_up() {
    let mut p = Prog::new();
    p.base = vec!["run.py(5): <module>".into(), "gen.py(30): generate".into()];
    p.forward(4, 100_000);
    p.launch("init", 50_000_000, &[CALL, "model.py(14): Model.forward"]);
    p.base[1] = "gen.py(32): generate".into();
    p.launch("argmax", GAP, &[]);
    p.generate(5, 9, 4);
    let st = p.finish();
    let s = auto(&st);
    assert_eq!(s.steps.len(), 10);
    assert_eq!(s.steady(), 1..10);
    let j = s.json();
    assert_eq!((j.warmup, j.steady), (1, 9));
    let (lo, hi) = st.span().unwrap();
    let total: Ns = s.steps.iter().map(|x| x.wall()).sum();
    assert!(total <= hi - lo, "steps add up to no more than the capture");
}

/// 60 iterations of a loop, each waiting ~15 ms on `queue.get` (no launch) and then calling
/// `work`, which launches the same kernel from 6 lines: 60 steps of 6 ops, not 360 of 1.
#[test]
fn a_function_after_a_wait_gives_one_step_a_call() {
    let mut p = Prog::new();
    p.base = vec!["loop.py(12): main".into()];
    let mut want = Vec::new();
    for _ in 0..60 {
        for line in 3..9 {
            let f = format!("loop.py({line}): work");
            let gap = if line == 3 { 15_000_000 } else { GAP };
            let t = p.launch("fake_kernel", gap, &[&f]);
            if line == 3 {
                want.push(t);
            }
        }
    }
    let st = p.finish();
    let s = auto(&st);
    assert_eq!(s.source, StepSource::Structure("work".into()));
    assert_eq!(starts(&s), want);
    assert!(s.steps.iter().all(|x| x.launches == 6));
}

/// Functions that each hold a third of the work are not the steps: the period is, guessed.
#[test]
fn no_function_holding_most_of_the_work_leaves_the_period() {
    let mut p = Prog::new();
    p.base = vec!["loop.py(9): <module>".into()];
    for _ in 0..30 {
        for (f, n) in [("fast", 3), ("host_stall", 3), ("sync_then_launch", 3)] {
            for i in 0..n {
                let fr = format!("loop.py({}): {f}", 20 + i);
                p.launch(&format!("{f}_{i}"), GAP, &[&fr]);
            }
        }
    }
    let s = auto(&p.finish());
    assert_eq!(s.source, StepSource::Auto);
    assert_eq!(s.steps.len(), 30);
    let j = s.json();
    assert!(j.guessed);
    assert_eq!(j.suggest.as_deref(), Some("--step fast_0"));
}

/// Without stacks, a guessed step of a handful of ops is merged into its neighbour.
#[test]
fn slivers_are_merged() {
    use super::super::merge_slivers;
    let r = merge_slivers(vec![0..2, 2..100, 100..200, 200..201, 201..300, 300..400]);
    assert_eq!(r, vec![0..100, 100..201, 201..300, 300..400]);
    let r = merge_slivers(vec![0..100, 150..151, 151..250]);
    assert_eq!(
        r,
        vec![0..100, 150..250],
        "after a hole: into the step after it"
    );
    let r = merge_slivers(vec![0..100, 150..151, 160..260]);
    assert_eq!(
        r,
        vec![0..100, 160..260],
        "a sliver touching nothing is dropped"
    );
}

/// A loop whose launches all come from one line (`for l in layers: l.forward()`, each layer's
/// launches from one line too), then a sync at another line of the loop's function: the
/// stacks of every launch are the same, and only the sync's turn tells one call of `train`
/// from the next. The steps are `train`'s calls, named `train` (not `Layer.forward`, whose
/// back-to-back calls merge into one a step).
#[test]
fn a_sync_tells_calls_whose_launches_come_from_one_line() {
    let mut p = Prog::new();
    p.base = vec!["run.py(30): <module>".into()];
    let mut want = Vec::new();
    for _ in 0..12 {
        for layer in 0..6 {
            for k in 0..3 {
                let gap = if layer == 0 && k == 0 { 200_000 } else { GAP };
                let s = p.launch(
                    "gemm",
                    gap,
                    &["run.py(24): train", "run.py(20): Layer.forward"],
                );
                if layer == 0 && k == 0 {
                    want.push(s);
                }
            }
        }
        p.sync(&["run.py(26): train"]);
    }
    let st = p.finish();
    let s = auto(&st);
    assert_eq!(s.source, StepSource::Structure("train".into()));
    assert_eq!(starts(&s), want);
    assert!(s.steps.iter().all(|x| x.launches == 18));

    // Without the sync, nothing tells the calls apart: not steps from the structure.
    let mut p = Prog::new();
    p.base = vec!["run.py(30): <module>".into()];
    for _ in 0..12 {
        for k in 0..18 {
            let gap = if k == 0 { 200_000 } else { GAP };
            p.launch(
                "gemm",
                gap,
                &["run.py(24): train", "run.py(20): Layer.forward"],
            );
        }
    }
    let s = auto(&p.finish());
    assert!(
        !matches!(s.source, StepSource::Structure(_)),
        "{:?}",
        s.source
    );
}

/// A script's loop that calls `forward` (its launches all from one line), then syncs at its
/// own line: the sync's turns tell one call of `forward` from the next, and the steps are
/// `forward`'s calls, not the script's top level (whose loop turns they are, and which is no
/// function called an iteration).
#[test]
fn a_scripts_top_level_is_not_the_step() {
    let mut p = Prog::new();
    let mut want = Vec::new();
    for _ in 0..12 {
        for k in 0..6 {
            let gap = if k == 0 { 160_000 } else { GAP };
            let frames = ["loop.py(28): <module>", "loop.py(22): forward"];
            let s = p.launch("small", gap, &frames);
            if k == 0 {
                want.push(s);
            }
        }
        p.sync(&["loop.py(29): <module>"]);
    }
    let s = auto(&p.finish());
    assert_eq!(s.source, StepSource::Structure("forward".into()));
    assert_eq!(starts(&s), want);
}

/// Gradient accumulation: each `train_step` runs 4 micro-batches (`fwd_bwd` from line 20, a
/// sync at line 21 after each), then the optimizer (line 23). Its launches alone tell its
/// calls apart (back at line 20 after line 23), so its syncs are not read as turns: 12 steps,
/// not one a micro-batch.
#[test]
fn syncs_inside_a_calls_loop_do_not_split_it() {
    let mut p = Prog::new();
    p.base = vec!["train.py(40): <module>".into()];
    let mut want = Vec::new();
    for _ in 0..12 {
        for mb in 0..4 {
            for k in 0..3 {
                let gap = if mb == 0 && k == 0 { 200_000 } else { GAP };
                let s = p.launch(
                    "gemm",
                    gap,
                    &["train.py(20): train_step", "train.py(5): fwd_bwd"],
                );
                if mb == 0 && k == 0 {
                    want.push(s);
                }
            }
            p.sync(&["train.py(21): train_step"]);
        }
        for _ in 0..4 {
            p.launch("adam", GAP, &["train.py(23): train_step"]);
        }
    }
    let st = p.finish();
    let s = auto(&st);
    assert_eq!(s.source, StepSource::Structure("train_step".into()));
    assert_eq!(starts(&s), want);
    assert!(s.steps.iter().all(|x| x.launches == 16));
    // Asked for by name, the same.
    let by = find(&st, Window::all(), Some("train_step")).unwrap();
    assert_eq!(by.steps, s.steps);
}

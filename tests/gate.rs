//! `gaptop diff A B --fail-if-slower 5%`, the regression gate, on generated captures whose
//! truth is known (tests/support/gen.rs): two runs of one program within noise pass, a run
//! with a planted CPU stall 10% of a step fails naming the stall's function, and two different
//! programs (or too few steps) are not comparable; and on two real recordings of different
//! models.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::gen::{generate, Plant, Shape, Spec, Truth};
use support::{asset, bin, tempdir};

/// A CPU-bound training loop (15 µs of CPU a launch against 8 µs kernels) of 30 steps, whose
/// steps start with up to 8 µs of noise drawn from `seed`.
fn spec(seed: u64) -> Spec {
    let mut s = Spec::new(30, 4, 4);
    s.cpu_ns = 10_000;
    s.jitter = Some((seed, 8_000));
    s
}

fn make(tag: &str, s: &Spec) -> Truth {
    let dir = tempdir(tag);
    generate(s, &dir)
}

/// `gaptop diff A B --fail-if-slower 5% --format json`: its exit status, JSON and stderr.
fn gate(a: &Path, b: &Path) -> (i32, Value, String) {
    let o = Command::new(bin())
        .arg("diff")
        .arg(a)
        .arg(b)
        .args(["--fail-if-slower", "5%", "--format", "json"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    let d: Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (o.status.code().unwrap(), d, err)
}

fn text(a: &Path, b: &Path) -> (i32, String) {
    let o = Command::new(bin())
        .arg("diff")
        .arg(a)
        .arg(b)
        .args(["--fail-if-slower", "5%"])
        .output()
        .unwrap();
    (
        o.status.code().unwrap(),
        String::from_utf8(o.stdout).unwrap(),
    )
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn two_runs_of_one_program_within_noise_pass() {
    let (a, b) = (make("gate-same-a", &spec(1)), make("gate-same-b", &spec(2)));
    // The two differ step by step (the noise), not in their typical step.
    assert_ne!(a.step_ns, b.step_ns);
    let r = b.steady_mean_ns / a.steady_mean_ns;
    assert!((r - 1.0).abs() < 0.02, "{r}");
    let (code, d, err) = gate(&a.path, &b.path);
    let g = &d["gate"];
    assert_eq!(g["verdict"], "pass", "{g} {err}");
    assert_eq!(code, 0);
    assert_eq!(f(&g["threshold"]), 0.05);
    assert!(f(&g["p_value"]) > 0.05, "{g}");
    let ratio = f(&g["ratio"]);
    assert!((ratio - 1.0).abs() < 0.03, "{g}");
    let ci = g["ratio_ci95"].as_array().unwrap();
    assert!(f(&ci[0]) <= ratio && ratio <= f(&ci[1]), "{g}");
    assert_eq!(f(&g["overlap"]), 1.0);
    assert!(g["a_steps"].as_u64().unwrap() >= 25, "{g}");
    // The verdict's line goes to stderr too where stdout has the JSON.
    assert!(err.contains("gate: pass (exit 0)"), "{err}");
}

#[test]
fn a_run_ten_percent_slower_fails_and_names_the_stall() {
    let base = spec(1);
    let mut slow = spec(2);
    // A stall of a tenth of a step in Model.stall, before layer 1's first launch, every step.
    let stall = (base.steady_mean() * 0.10) as i64;
    slow.stall = Some(Plant {
        rank: None,
        layer: 1,
        ns: stall,
        factor: 1,
    });
    let (a, b) = (make("gate-slow-a", &base), make("gate-slow-b", &slow));
    let truth = b.steady_mean_ns / a.steady_mean_ns;
    assert!((truth - 1.10).abs() < 0.02, "{truth}");
    let (code, d, err) = gate(&a.path, &b.path);
    let g = &d["gate"];
    assert_eq!(g["verdict"], "slower", "{g} {err}");
    assert_eq!(code, 3);
    assert!(f(&g["p_value"]) < 0.001, "{g}");
    assert!((f(&g["ratio"]) - truth).abs() < 0.03, "{g} {truth}");
    // The CI holds the truth and lies wholly beyond the threshold.
    let ci = g["ratio_ci95"].as_array().unwrap();
    assert!(
        f(&ci[0]) > 1.05 && f(&ci[0]) <= truth && truth <= f(&ci[1]) + 0.01,
        "{g}"
    );
    // The site whose idle grew most is the stall's function, by about the stall.
    let first = &g["grew"][0];
    assert!(
        first["site"].as_str().unwrap().starts_with("Model.stall"),
        "{g}"
    );
    let delta = f(&first["delta_per_step_ns"]);
    assert!(delta > 0.8 * b.cost("stall"), "{delta} {}", b.cost("stall"));
    assert!(err.contains("gate: slower (exit 3)"), "{err}");

    // The text form ends with the verdict and the site.
    let (code, t) = text(&a.path, &b.path);
    assert_eq!(code, 3);
    let tail = &t[t.find("Regression gate").expect(&t)..];
    assert!(tail.contains("gate: slower (exit 3)"), "{tail}");
    assert!(tail.contains("Model.stall"), "{tail}");

    // The other way round it got faster, which passes.
    let (code, d, _) = gate(&b.path, &a.path);
    assert_eq!(d["gate"]["verdict"], "faster", "{}", d["gate"]);
    assert_eq!(code, 0);
}

#[test]
fn different_programs_or_too_few_steps_are_not_comparable() {
    let a = make("gate-nc-train", &spec(1));
    // Another program: decoding, each layer one fused kernel (none of A's kernels).
    let mut dec = spec(2);
    dec.shape = Shape::Decode { generates: 1 };
    dec.fused = true;
    let b = make("gate-nc-decode", &dec);
    let (code, d, _) = gate(&a.path, &b.path);
    let g = &d["gate"];
    assert_eq!(g["verdict"], "not_comparable", "{g}");
    assert_eq!(code, 4);
    assert_eq!(f(&g["overlap"]), 0.0);
    let reasons = g["reasons"].to_string();
    assert!(reasons.contains("not the same program"), "{reasons}");

    // Four steps (torch.profiler's, in both) are too few to judge.
    let mut marked = spec(1);
    marked.markers = true;
    let a = make("gate-nc-marked", &marked);
    let mut few = spec(3);
    (few.steps, few.markers) = (4, true);
    let c = make("gate-nc-few", &few);
    let (code, d, _) = gate(&a.path, &c.path);
    assert_eq!(code, 4, "{}", d["gate"]);
    let reasons = d["gate"]["reasons"].to_string();
    assert!(reasons.contains("fewer than 5"), "{reasons}");

    // Two real recordings of different models (Llama decoding, GPT-2) share almost no GPU time.
    let (l, g2): (PathBuf, PathBuf) = (asset("llama_decode.rec"), asset("gpt2.rec"));
    let (code, d, err) = gate(&l, &g2);
    let g = &d["gate"];
    assert_eq!(code, 4, "{g}");
    assert!(f(&g["overlap"]) < 0.1, "{g}");
    assert!(
        g["reasons"].to_string().contains("not the same program"),
        "{g}"
    );
    assert!(err.contains("not_comparable (exit 4)"), "{err}");
}

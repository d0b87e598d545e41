//! `gaptop diff A B` on real H200 recordings of the same program before and after a fix, on a
//! capture against itself and the other way round, and where steps are missing.

mod support;

use std::path::Path;
use std::process::Command;

use serde_json::Value;
use support::{asset, bin, fixture, tempdir};

/// `gaptop diff A B EXTRA...`'s stdout; it must succeed.
fn diff(a: &Path, b: &Path, extra: &[&str]) -> String {
    let o = Command::new(bin())
        .arg("diff")
        .arg(a)
        .arg(b)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

fn diff_json(a: &Path, b: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["--format", "json"];
    args.extend(extra);
    serde_json::from_str(&diff(a, b, &args)).unwrap()
}

fn ns(v: &Value) -> i64 {
    v.as_i64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// The site whose name starts with `name`.
fn site<'a>(d: &'a Value, name: &str) -> &'a Value {
    d["sites"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["site"].as_str().unwrap().starts_with(name))
        .unwrap_or_else(|| panic!("no site {name}"))
}

/// Llama 3.2 1B decoding on an H200 with cuDNN's attention (which builds an execution plan
/// for each new sequence length, ~36 ms of CPU work a token) and without it: the diff shows
/// the token time falling about fourfold, and that attention's idle accounts for it.
#[test]
fn cudnn_attention_off_removes_its_idle_a_token() {
    let (a, b) = (asset("llama_decode.rec"), asset("llama_decode_nocudnn.rec"));
    let d = diff_json(&a, &b, &[]);
    assert_eq!(d["per"], "step");
    assert!(d["note"].is_null());
    let s = &d["steps"];
    let (ma, mb) = (ns(&s["a_median_ns"]), ns(&s["b_median_ns"]));
    assert!(mb < ma / 3 && mb > ma / 6, "{ma} -> {mb}");
    assert!(ns(&s["b_idle_ns"]) < ns(&s["a_idle_ns"]) / 3);
    // The same model runs the same ops a token either way, in about the same GPU time.
    let (la, lb) = (
        s["a_launches"].as_f64().unwrap(),
        s["b_launches"].as_f64().unwrap(),
    );
    assert!((la - lb).abs() <= 0.05 * la, "{la} {lb}");
    let (ba, bb) = (ns(&s["a_busy_ns"]), ns(&s["b_busy_ns"]));
    assert!((ba - bb).abs() < ba / 5, "{ba} {bb}");

    // The biggest change is sdpa_attention_forward's idle: over 30 ms a token, nearly all gone,
    // most of the step time's fall.
    let first = &d["sites"][0];
    assert!(first["site"]
        .as_str()
        .unwrap()
        .starts_with("sdpa_attention_forward"));
    let delta = ns(&first["delta_per_step_ns"]);
    assert!(delta < -30_000_000, "{first}");
    assert_eq!(
        delta,
        ns(&first["b_per_step_ns"]) - ns(&first["a_per_step_ns"])
    );
    assert!(ns(&first["b_per_step_ns"]) < ns(&first["a_per_step_ns"]) / 10);
    assert!(-delta > (ma - mb) * 3 / 4, "{delta} of {}", ma - mb);
    // Every other site changes by less than a tenth of that.
    for x in d["sites"].as_array().unwrap().iter().skip(1) {
        assert!(ns(&x["delta_per_step_ns"]).abs() < -delta / 10, "{x}");
    }
    // Sorted by the size of the change.
    let deltas: Vec<i64> = d["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| ns(&x["delta_per_step_ns"]).abs())
        .collect();
    assert!(deltas.windows(2).all(|w| w[0] >= w[1]), "{deltas:?}");

    // The attention kernels: cuDNN's go, flash attention's come.
    let kernels = d["kernels"].as_array().unwrap();
    let gone = kernels
        .iter()
        .find(|k| k["kernel"].as_str().unwrap().contains("cudnn"))
        .expect("a cuDNN kernel");
    assert_eq!(gone["count_change"], "-");
    assert_eq!(gone["b_count"], 0.0);
    assert!(gone["a_count"].as_f64().unwrap() >= 1.0);
    let came = kernels
        .iter()
        .find(|k| k["kernel"].as_str().unwrap().contains("flash_fwd"))
        .expect("flash attention's kernel");
    assert_eq!(came["count_change"], "+");
    assert_eq!(came["a_count"], 0.0);

    let text = diff(&a, &b, &[]);
    assert!(text.contains("x faster"), "{text}");
    let sites = text.split("by launching site").nth(1).unwrap();
    let row = sites.lines().nth(2).unwrap();
    assert!(row.contains("sdpa_attention_forward"), "{text}");
}

/// Piped or written to a file, the text keeps every name whole; on a terminal it fits the
/// terminal's width, each name cut in its middle so that both its ends show. Its columns say
/// which capture each is and what it counts.
#[test]
fn names_are_whole_in_files_and_pipes_and_cut_in_the_middle_on_a_terminal() {
    let (a, b) = (asset("llama_decode.rec"), asset("llama_decode_nocudnn.rec"));
    let piped = diff(&a, &b, &[]);
    // (Only the line that counts the sites not listed has a `…`.)
    let mut cut_lines = piped.lines().filter(|l| l.contains('…'));
    assert!(cut_lines.all(|l| l.starts_with("  … ")), "{piped}");
    // cuDNN's attention kernel, over 100 characters, whole.
    let cudnn = piped
        .lines()
        .find_map(|l| l.split("  ").last().filter(|n| n.starts_with("cudnn_")))
        .unwrap_or_else(|| panic!("{piped}"));
    assert!(cudnn.chars().count() > 80, "{cudnn}");
    assert!(piped.lines().any(|l| l.chars().count() > 100), "{piped}");
    // The columns are named: before and after, and what the ops' counts are.
    assert!(
        piped.contains("gaptop diff: before (A) against after (B)"),
        "{piped}"
    );
    let ops = piped.split("GPU ops by change").nth(1).unwrap();
    let mut lines = ops.lines().skip(1);
    let groups = lines.next().unwrap();
    assert!(
        groups.contains("time a step") && groups.contains("runs a step"),
        "{ops}"
    );
    let heads: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        heads,
        ["before", "after", "change", "before", "after", "op"]
    );
    assert!(!piped.contains("A n") && !piped.contains("B n"), "{piped}");

    // Written with -o: the same text, names whole.
    let dir = tempdir("diff-text");
    let out = dir.join("diff.txt");
    let o = Command::new(bin())
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success() && o.stdout.is_empty());
    assert_eq!(std::fs::read_to_string(&out).unwrap(), piped);

    // On a terminal 80 columns wide: every line fits, and the cut name keeps its two ends.
    let load = |p: &Path| gaptop_core::sources::load_path(p, usize::MAX).unwrap();
    let cfg = gaptop_core::analysis::gaps::Config::default();
    let d = gaptop::diff::diff(&load(&a), &load(&b), &cfg, None, None);
    assert_eq!(gaptop::diff::text(&d, None), piped);
    for width in [80, 120] {
        let narrow = gaptop::diff::text(&d, Some(width));
        for line in narrow.lines() {
            assert!(
                line.chars().count() <= width,
                "too wide for {width}: {line}"
            );
        }
        let cut = narrow
            .lines()
            .find_map(|l| l.split("  ").last().filter(|n| n.starts_with("cudnn_")))
            .unwrap_or_else(|| panic!("{narrow}"));
        let (head, tail) = cut.split_once('…').unwrap_or_else(|| panic!("{cut}"));
        assert!(cudnn.starts_with(head) && cudnn.ends_with(tail), "{cut}");
        assert!(head.len() >= 10 && tail.len() >= 10, "{cut}");
        // The same rows as the whole text, only narrower.
        assert_eq!(narrow.lines().count(), piped.lines().count());
    }
}

/// B against A is A against B negated, and a capture against itself changes nothing.
#[test]
fn the_other_way_round_negates_and_the_same_capture_changes_nothing() {
    let (a, b) = (asset("gpt2.rec"), asset("gpt2_native.rec"));
    let ab = diff_json(&a, &b, &[]);
    let ba = diff_json(&b, &a, &[]);
    assert_eq!(ab["a"]["source"], ba["b"]["source"]);
    assert_eq!(ab["steps"]["a_median_ns"], ba["steps"]["b_median_ns"]);
    assert_eq!(
        ab["sites"].as_array().unwrap().len(),
        ba["sites"].as_array().unwrap().len()
    );
    for x in ab["sites"].as_array().unwrap() {
        let y = site(&ba, x["site"].as_str().unwrap());
        assert_eq!(x["a_per_step_ns"], y["b_per_step_ns"]);
        assert_eq!(ns(&x["delta_per_step_ns"]), -ns(&y["delta_per_step_ns"]));
        assert_eq!(x["a_verdict"], y["b_verdict"]);
    }
    for x in ab["kernels"].as_array().unwrap().iter().take(10) {
        let y = ba["kernels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|y| y["kernel"] == x["kernel"])
            .unwrap();
        assert_eq!(ns(&x["delta_per_step_ns"]), -ns(&y["delta_per_step_ns"]));
    }

    let same = diff_json(&a, &a, &[]);
    assert_eq!(same["steps"]["a_median_ns"], same["steps"]["b_median_ns"]);
    assert!(!same["sites"].as_array().unwrap().is_empty());
    for x in same["sites"].as_array().unwrap() {
        assert_eq!(ns(&x["delta_per_step_ns"]), 0, "{x}");
        assert_eq!(x["a_gap_ns"], x["b_gap_ns"]);
    }
    for k in same["kernels"].as_array().unwrap() {
        assert_eq!(
            (ns(&k["delta_per_step_ns"]), &k["count_change"]),
            (0, &"=".into())
        );
    }
    // The site figures are the report's: its advice's idle a step.
    let report: Value = serde_json::from_slice(&support::report_out(&a, "json", &[])).unwrap();
    let top = &report["advice"][0];
    let x = site(
        &same,
        top["site"].as_str().unwrap().split("  ").next().unwrap(),
    );
    assert_eq!(x["a_per_step_ns"], top["per_step_ns"]);
}

/// Without steps in a capture, the figures are per second of capture, and the diff says so; a
/// site found on one side only has 0 on the other.
#[test]
fn without_steps_the_figures_are_per_second() {
    let (a, b) = (fixture("multi_stream.json"), asset("gpt2.rec"));
    let d = diff_json(&a, &b, &[]);
    assert_eq!(d["per"], "second");
    assert!(
        d["note"].as_str().unwrap().contains("in A"),
        "{}",
        d["note"]
    );
    assert!(d["steps"]["a_median_ns"].is_null());
    assert!(ns(&d["steps"]["b_median_ns"]) > 0);
    // The fixture: 85 µs of device idle in 150 µs.
    assert_eq!(ns(&d["a"]["duration_ns"]), 150_000);
    assert_eq!(
        ns(&d["steps"]["a_idle_ns"]),
        85_000 * 1_000_000_000 / 150_000
    );
    let mlp = site(&d, "mlp");
    assert_eq!(
        ns(&mlp["a_per_step_ns"]),
        ns(&mlp["a_gap_ns"]) * 1_000_000_000 / 150_000
    );
    assert_eq!(ns(&mlp["b_per_step_ns"]), 0);
    assert!(mlp["b_verdict"].is_null() && mlp["a_verdict"].is_string());
    let conv = site(&d, "Conv1D.forward");
    assert_eq!(ns(&conv["a_per_step_ns"]), 0);
    assert!(ns(&conv["b_per_step_ns"]) > 0);
    let text = diff(&a, &b, &[]);
    assert!(text.contains("per second of capture"), "{text}");

    // Steps asked for by a name neither capture has.
    let g = asset("gpt2.rec");
    let d = diff_json(&g, &g, &["--step", "no_such_function"]);
    assert_eq!(d["per"], "second");
    assert!(d["note"].as_str().unwrap().contains("no_such_function"));
    // Each stream's own idle on request.
    assert_eq!(diff_json(&a, &b, &["--per-stream"])["basis"], "stream");
}

/// A missing file is a one-line error naming it; `-o` writes the comparison to a file.
#[test]
fn bad_input_is_an_error_and_output_can_go_to_a_file() {
    let g = asset("gpt2.rec");
    let o = Command::new(bin())
        .args(["diff"])
        .arg(&g)
        .arg("/no/such/capture.rec")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("/no/such/capture.rec") && err.lines().count() == 1,
        "{err}"
    );

    let d = tempdir("diff-out");
    let empty = d.join("empty.json");
    std::fs::write(&empty, r#"{"traceEvents": []}"#).unwrap();
    let o = Command::new(bin())
        .arg("diff")
        .arg(&empty)
        .arg(&g)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("empty.json") && err.lines().count() == 1,
        "{err}"
    );

    let out = d.join("diff.json");
    let o = Command::new(bin())
        .arg("diff")
        .arg(&g)
        .arg(&g)
        .args(["--format", "json", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success() && o.stdout.is_empty());
    let j: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    assert_eq!(j["per"], "step");
}

/// Holistic Trace Analysis' own trace-diff test traces: HTA finds one GPU op fewer in the test
/// trace's step 1010 (its change category `-`) and the rest alike; so does the diff, with the op
/// counted in the step that launched it although the GPU ran it after the step's end.
#[test]
fn hta_trace_diff_traces_differ_by_one_kernel() {
    let dir = fixture("hta_trace_compare");
    let d = diff_json(&dir.join("base.json.gz"), &dir.join("test.json.gz"), &[]);
    assert_eq!(d["per"], "step");
    assert_eq!(d["a"]["steps"]["source"], "profiler_step");
    let kernels = d["kernels"].as_array().unwrap();
    let changed: Vec<&Value> = kernels
        .iter()
        .filter(|k| k["count_change"] != "=")
        .collect();
    assert_eq!(changed.len(), 1, "{kernels:?}");
    let k = changed[0];
    assert_eq!(k["count_change"], "-");
    assert!(
        k["kernel"]
            .as_str()
            .unwrap()
            .contains("CUDAFunctor_add<int>"),
        "{k}"
    );
    // One launch fewer in one of the two steps: half an op a step.
    let (a, b) = (
        k["a_count"].as_f64().unwrap(),
        k["b_count"].as_f64().unwrap(),
    );
    assert_eq!(a - b, 0.5);
    assert!(ns(&k["delta_per_step_ns"]) < 0);
    assert_eq!(kernels.len(), 6, "the ops of both, by name");
}

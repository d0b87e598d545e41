//! One answer per run, and CPU lines that name the Python code: issue 29's workloads
//! (`bench/workloads/`) recorded by gaptop and traced by torch.profiler on the H200
//! (tests/data/kineto/README.md says how).

mod support;

use std::path::PathBuf;

use serde_json::Value;

fn kineto(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/data/kineto/{name}"))
}

/// The top advice's function and file (without the line, which the two sources take at
/// different instructions of the same call).
fn top_site(j: &Value) -> (String, String) {
    let site = j["advice"][0]["site"].as_str().unwrap();
    let (func, loc) = site.split_once("  ").unwrap_or((site, ""));
    let file = loc.split(':').next().unwrap_or("").to_string();
    (func.to_string(), file)
}

fn steps(j: &Value) -> i64 {
    j["steps"]["count"].as_i64().unwrap_or(-1)
}

/// The same program, recorded by gaptop and traced by torch.profiler: the same code first (by
/// its idle a step), and the same steps within one.
#[test]
fn a_recording_and_a_kineto_trace_of_one_program_agree() {
    let rec = support::report_json(&support::asset("shape_planning.rec"), &[]);
    let trace = support::report_json(&kineto("shape_planning.json.gz"), &[]);
    assert_eq!(
        top_site(&rec),
        top_site(&trace),
        "{}\n{}",
        rec["advice"][0],
        trace["advice"][0]
    );
    assert_eq!(top_site(&rec).0, "attend");
    let (a, b) = (steps(&rec), steps(&trace));
    assert!(a >= 30 && (a - b).abs() <= 1, "steps {a} and {b}");
    for j in [&rec, &trace] {
        assert_eq!(j["steps"]["source"], "range", "{}", j["steps"]);
        let window =
            j["window"]["to_ns"].as_i64().unwrap() - j["window"]["from_ns"].as_i64().unwrap();
        let median = j["steps"]["median_ns"].as_i64().unwrap();
        assert!(
            median * steps(j) <= window,
            "steps outlast the capture: {}",
            j["steps"]
        );
    }
}

/// The DataLoader's work, which ran in the launching thread between steps, is named in its
/// Python functions: the dataset's `__getitem__` and the `blur` it calls, in most samples.
#[test]
fn the_cpu_line_names_the_python_functions_doing_the_work() {
    let j = support::report_json(&support::asset("loader_train.rec"), &[]);
    let top = &j["advice"][0];
    let frames = top["cpu"]["frames"].as_array().unwrap();
    let share = |suffix: &str| {
        frames
            .iter()
            .find(|f| f["frame"].as_str().unwrap().ends_with(suffix))
            .map(|f| f["share"].as_f64().unwrap())
            .unwrap_or_else(|| panic!("no {suffix} in {frames:?}"))
    };
    assert!(share("): blur") >= 0.8, "{frames:?}");
    assert!(share("): Noisy.__getitem__") >= 0.8, "{frames:?}");
    // No interpreter frame is left where the Python frames stand.
    assert!(frames.iter().all(|f| !f["frame"]
        .as_str()
        .unwrap()
        .starts_with("_PyEval_EvalFrameDefault")));
    let text = std::process::Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["report"])
        .arg(support::asset("loader_train.rec"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("CPU during its gaps"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("blur  loader_train.py:"), "{line}");
}

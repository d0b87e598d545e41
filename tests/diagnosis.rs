//! The diagnosis on recordings taken on the H200 (docs/perf.md says how), each with CPU
//! samples: a Llama-style decode whose attention runs on cuDNN's SDPA, the same loop with that
//! backend off, and the planted decode loop.

mod support;

use support::advice;

use std::process::Command;

use serde_json::Value;

fn report(name: &str) -> Value {
    support::report_json(&support::asset(name), &[])
}

fn text(name: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .arg("report")
        .arg(support::asset(name))
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap()
}

/// cuDNN's SDPA builds and compiles an execution plan for every new sequence length: 49 ms a
/// token against 11 ms with the backend off, in the same run. The recurring stall, one a token
/// before the attention kernel, is ranked first by its cost a step, with the fix that removes
/// it and the CPU samples that show why.
#[test]
fn the_cudnn_sdpa_stall_is_recurring_first_and_named() {
    let j = report("llama_decode.rec");
    // 45 forward passes (a prompt, 4 warm-up tokens and 40 timed ones), ±1.
    let steps = j["steps"]["count"].as_i64().unwrap();
    assert!((44..=46).contains(&steps), "{}", j["steps"]);
    let first = &j["advice"][0];
    assert!(
        first["site"]
            .as_str()
            .unwrap()
            .starts_with("sdpa_attention_forward"),
        "{first}"
    );
    assert_eq!(first["recurring"], true);
    assert_eq!(first["verdict"], "host_work");
    assert_eq!(first["framework"], "pytorch");
    assert_eq!(first["cause"], "per_shape_planning", "{first}");
    assert!(
        first["fix"]
            .as_str()
            .unwrap()
            .contains("enable_cudnn_sdp(False)"),
        "{first}"
    );
    let steady = j["steps"]["steady"].as_i64().unwrap();
    assert_eq!(first["steps_present"].as_i64().unwrap(), steady);
    // About 36 ms of a 43 ms step.
    let per_step = first["per_step_ns"].as_i64().unwrap();
    assert!((30_000_000..42_000_000).contains(&per_step), "{first}");
    // The samples during its gaps: cuDNN finalizing a plan, compiling it with NVRTC.
    let frames: Vec<(String, f64)> = first["cpu"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["frame"].as_str().unwrap().to_string(),
                f["share"].as_f64().unwrap(),
            )
        })
        .collect();
    let share = |name: &str| {
        frames
            .iter()
            .find(|f| f.0.contains(name))
            .unwrap_or_else(|| panic!("no {name} in {frames:?}"))
            .1
    };
    assert!(share("nvrtcCompileProgram") >= 0.5, "{frames:?}");
    assert!(share("ExecutionPlan::finalize") >= 0.5, "{frames:?}");
    // The warm-up's first calls are one-offs, apart.
    assert!(first["one_offs"].as_i64().unwrap() > 0);
    let t = text("llama_decode.rec");
    assert!(t.contains("CPU during its gaps: "), "{t}");
    assert!(t.contains("nvrtcCompileProgram"), "{t}");
}

/// With cuDNN's SDPA off the same loop takes 11 ms a token, and what is left is the CPU's
/// work on the launch path spread over the layers (launch overhead and the framework's per-op
/// work, a few tens of microseconds a gap): nothing recurs at more than a few milliseconds a
/// step, and the fix is a CUDA graph or torch.compile.
#[test]
fn without_cudnn_sdpa_what_is_left_is_launch_overhead() {
    let on = report("llama_decode.rec");
    let off = report("llama_decode_nocudnn.rec");
    let median = |j: &Value| j["steps"]["median_ns"].as_i64().unwrap();
    assert!(
        median(&on) > 3 * median(&off),
        "{} {}",
        on["steps"],
        off["steps"]
    );
    let first = &off["advice"][0];
    let v = first["verdict"].as_str().unwrap();
    assert!(v == "launch_bound" || v == "host_work", "{first}");
    assert!(
        first["fix"].as_str().unwrap().contains("torch.compile"),
        "{first}"
    );
    assert!(
        first["per_step_ns"].as_i64().unwrap() < 5_000_000,
        "{first}"
    );
    // Its samples are the interpreter's and the framework's dispatch, not one stall.
    assert!(first["cpu"]["samples"].as_i64().unwrap() > 50, "{first}");
    assert!(!off["advice"]
        .as_array()
        .unwrap()
        .iter()
        .take(5)
        .any(|a| a["cause"] == "per_shape_planning"
            || a["fix"].as_str().unwrap().contains("enable_cudnn_sdp")));
}

/// The planted decode loop on the GPU: plan_attention's native call (zlib's deflate, ~11 ms a
/// token) recurs in every steady step and is ranked first; warmup_stall, in the first three
/// tokens only, is a one-off; the samples during plan_attention's gaps name deflate.
#[test]
fn the_planted_decode_loop_is_diagnosed_on_the_gpu() {
    let j = report("decode_planted.rec");
    assert_eq!(j["steps"]["count"], 40);
    let first = &j["advice"][0];
    assert!(
        first["site"]
            .as_str()
            .unwrap()
            .starts_with("plan_attention"),
        "{first}"
    );
    assert_eq!(first["recurring"], true);
    assert_eq!(first["verdict"], "host_work");
    // In every steady step but possibly the first: its gap comes before the step's first op,
    // so it lies in the step before (a warm-up one for the first steady step).
    let steady = j["steps"]["steady"].as_u64().unwrap();
    assert!(
        first["steps_present"].as_u64().unwrap() + 1 >= steady,
        "{first}"
    );
    let deflate = first["cpu"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["frame"].as_str().unwrap().starts_with("deflate"))
        .unwrap_or_else(|| panic!("{first}"));
    assert!(deflate["share"].as_f64().unwrap() >= 0.8, "{deflate}");
    let warm = advice(&j, "warmup_stall");
    assert_eq!(warm["recurring"], false);
    assert_eq!(warm["one_offs"], 3);
    assert_eq!(warm["gaps"], 3);
    let text = text("decode_planted.rec");
    assert!(text.contains("PKCS5_PBKDF2_HMAC"), "{text}");
}

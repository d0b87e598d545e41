//! `gaptop report` on fixtures whose answers were worked out by hand, on the real H200 trace,
//! and on malformed input.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use support::{bin, fixture, report_out};

fn report_json(path: &Path, extra: &[&str]) -> Value {
    serde_json::from_slice(&report_out(path, "json", extra)).unwrap()
}

#[test]
fn multi_stream_fixture_matches_hand_computed_answers() {
    // Each stream's own gaps, as HTA counts them.
    let j = report_json(&fixture("multi_stream.json"), &["--per-stream"]);
    assert_eq!(j["basis"], "stream");
    assert_eq!(j["gpu_ops"], 6);
    assert_eq!(j["kernels"], 5);
    assert_eq!(j["kernel_ns"], 62_000);
    assert_eq!(j["busy_ns"], 65_000);
    assert_eq!(j["device_idle_ns"], 85_000);
    assert_eq!(j["idle"]["host_wait"]["count"], 2);
    assert_eq!(j["idle"]["host_wait"]["total_ns"], 133_000);
    assert_eq!(j["idle"]["kernel_wait"]["count"], 1);
    assert_eq!(j["idle"]["kernel_wait"]["total_ns"], 5_000);
    assert_eq!(j["idle"]["other"]["count"], 1);
    assert_eq!(j["idle"]["other"]["total_ns"], 40_000);
    // The 75 µs gap's launching thread synchronized for 6 µs of it (43 to 49) and then worked
    // 52 µs before launching: the wait does not explain the gap, the CPU work does.
    assert_eq!(j["reasons"]["sync"]["count"], 0);
    assert_eq!(
        j["reasons"]["launch"]["total_ns"],
        75_000 + 58_000 + 5_000 + 40_000
    );
    assert_eq!(j["skipped"]["category \"foo_cat\""], 1);

    let top = &j["top_gaps"][0];
    assert_eq!(top["duration_ns"], 75_000);
    assert_eq!(top["start_ns"], 20_000, "relative to the first op at 10 µs");
    assert_eq!(top["cause"], "host_wait");
    assert_eq!(top["reason"], "launch");
    assert_eq!(top["stream"], 7);
    assert_eq!(top["launch_latency_ns"], 4_000);
    assert_eq!(
        top["frames"],
        serde_json::json!([
            "model.py(10): forward",
            "model.py(30): mlp",
            "cudaLaunchKernel",
            "kernel_c(float*)"
        ])
    );
    assert_eq!(
        top["cpu_frames"],
        serde_json::json!(["model.py(10): forward", "model.py(20): attn"])
    );
    let durations: Vec<i64> = j["top_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["duration_ns"].as_i64().unwrap())
        .collect();
    assert_eq!(durations, vec![75_000, 58_000, 40_000, 5_000]);

    let s0 = &j["top_stacks"][0];
    assert_eq!(s0["gap_ns"], 75_000);
    assert_eq!(s0["gaps"], 1);
    assert_eq!(s0["frames"][3], "kernel_c(float*)");
}

/// By default the gaps are the device's: the intervals in which neither stream runs anything
/// (fixture README), each charged to the op that ends it, on whichever stream. The HTA
/// breakdown stays as it was.
#[test]
fn multi_stream_device_gaps_match_hand_computed_answers() {
    let j = report_json(&fixture("multi_stream.json"), &[]);
    assert_eq!(j["basis"], "device");
    assert_eq!(
        j["idle"]["host_wait"]["total_ns"], 133_000,
        "HTA's, per stream"
    );
    let gaps: Vec<(i64, i64, String, String, i64)> = j["top_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            (
                g["duration_ns"].as_i64().unwrap(),
                g["start_ns"].as_i64().unwrap(),
                g["cause"].as_str().unwrap().to_string(),
                g["next_op"].as_str().unwrap().to_string(),
                g["stream"].as_i64().unwrap(),
            )
        })
        .collect();
    let want = |d, s, c: &str, op: &str, st| (d, s, c.to_string(), op.to_string(), st);
    assert_eq!(
        gaps,
        vec![
            // [50,105]: the memcpy on s8 ran until 50; kernel_c was launched at 101.
            want(55_000, 40_000, "host_wait", "kernel_c(float*)", 7),
            // [30,45]: after kernel_b, before the memcpy (launched at 40 from attn).
            want(
                15_000,
                20_000,
                "host_wait",
                "Memcpy HtoD (Pageable -> Device)",
                8
            ),
            // [140,150]: kernel_d on s8 ran until 140; kernel_e was launched at 106.
            want(10_000, 130_000, "kernel_wait", "kernel_e(float*)", 7),
            want(5_000, 10_000, "kernel_wait", "kernel_b(float*)", 7),
        ]
    );
    // They are the device idle between the first and the last op, all of it.
    let sum: i64 = gaps.iter().map(|g| g.0).sum();
    assert_eq!(sum, j["device_idle_ns"].as_i64().unwrap());
    // The 75 µs stream gap's sync returned at 49, before the device went idle at 50: the
    // device's gap is not the sync's.
    assert_eq!(j["top_gaps"][0]["reason"], "launch");
    let shares: f64 = j["advice"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["share"].as_f64().unwrap())
        .sum();
    assert!(
        (shares - 1.0).abs() < 1e-9,
        "shares of the charged idle: {shares}"
    );
}

#[test]
fn window_clips_gaps_and_busy_time() {
    // [40, 120) µs relative to the capture start at 10 µs, i.e. absolute [50, 130).
    let j = report_json(
        &fixture("multi_stream.json"),
        &["--from", "40us", "--to", "120us"],
    );
    assert_eq!(j["window"]["from_ns"], 40_000);
    assert_eq!(j["window"]["to_ns"], 120_000);
    // s7: gap [30,105] clipped to [50,105] = 55; gap [110,150] clipped to [110,130] = 20.
    // s8: gap [50,108] = 58, inside.
    assert_eq!(j["idle"]["host_wait"]["total_ns"], 55_000 + 58_000);
    assert_eq!(j["idle"]["other"]["total_ns"], 20_000);
    assert_eq!(j["idle"]["kernel_wait"]["count"], 0);
    // Busy: [105,110] ∪ [108,130] = [105,130] = 25; idle = 80 - 25.
    assert_eq!(j["busy_ns"], 25_000);
    assert_eq!(j["device_idle_ns"], 55_000);
}

#[test]
fn events_out_of_order_and_gzip_give_the_same_answer() {
    let text = std::fs::read_to_string(fixture("multi_stream.json")).unwrap();
    let mut doc: Value = serde_json::from_str(&text).unwrap();
    doc["traceEvents"].as_array_mut().unwrap().reverse();
    let dir = support::tempdir("report");
    let rev = dir.join("reversed.json");
    std::fs::write(&rev, serde_json::to_vec(&doc).unwrap()).unwrap();
    let gz = dir.join("fixture.json.gz");
    {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::fast(),
        );
        e.write_all(text.as_bytes()).unwrap();
        e.finish().unwrap();
    }
    let a = report_json(&fixture("multi_stream.json"), &[]);
    for p in [rev, gz] {
        let b = report_json(&p, &[]);
        assert_eq!(a["idle"], b["idle"], "{}", p.display());
        assert_eq!(a["top_gaps"], b["top_gaps"], "{}", p.display());
        assert_eq!(a["busy_ns"], b["busy_ns"]);
    }
}

/// The Llama decode of ../shared/fixtures/llama-decode: without `--step`, the recording's steps
/// come from its structure (the 24 forward calls) and SDPA's per-shape planning is the site to
/// fix first; the Kineto trace of the same run, without stacks, guesses its steps from the ops
/// and says so.
#[test]
fn llama_decode_steps_from_structure_put_sdpa_first() {
    let rec = support::shared_fixture("llama-decode/llama16-cudnn.rec");
    let j = report_json(&rec, &[]);
    let st = &j["steps"];
    assert_eq!(st["source"], "structure");
    assert_eq!(st["name"], "LlamaForCausalLM.forward");
    assert_eq!(st["guessed"], false);
    let n = st["count"].as_u64().unwrap();
    assert!((23..=25).contains(&n), "{n} steps");
    let top = j["advice"][0]["site"].as_str().unwrap();
    assert!(top.contains("sdpa_attention_forward"), "top site {top}");
    let text = String::from_utf8(report_out(&rec, "text", &[])).unwrap();
    assert!(
        text.starts_with("Fix first: sdpa_attention_forward"),
        "{text}"
    );
    assert!(text.contains("Steps (structure \"LlamaForCausalLM.forward\")"));
    let k = support::shared_fixture("llama-decode/kineto-llama16-cudnn.json.gz");
    let j = report_json(&k, &[]);
    let st = &j["steps"];
    assert_eq!(st["source"], "auto");
    assert_eq!(st["guessed"], true);
    let n = st["count"].as_u64().unwrap();
    assert!((23..=25).contains(&n), "{n} steps");
    let text = String::from_utf8(report_out(&k, "text", &[])).unwrap();
    assert!(text.contains("guessed from the repeating ops"), "{text}");
}

/// The reference trace from the H200: counts equal HTA's exact column, totals within 0.1%.
#[test]
fn h200_trace_matches_hta_reference() {
    let p = support::shared_trace("kineto-launchbound.json.gz");
    assert!(p.is_file(), "reference trace missing at {}", p.display());
    let j = report_json(&p, &[]);
    assert_eq!(j["gpu_ops"], 7043);
    assert_eq!(j["idle"]["host_wait"]["count"], 7041);
    assert_eq!(j["idle"]["kernel_wait"]["count"], 1);
    assert_eq!(j["idle"]["other"]["count"], 0);
    let close = |got: &Value, want: f64| {
        let g = got.as_f64().unwrap();
        assert!((g - want).abs() <= want * 0.001, "{g} vs {want}");
    };
    close(&j["idle"]["host_wait"]["total_ns"], 105_674_779.0);
    close(&j["idle"]["kernel_wait"]["total_ns"], 6_785.0);
    // The workload's own function is named in the top stack.
    let frames = j["top_stacks"][0]["frames"].to_string();
    assert!(frames.contains("rope"), "{frames}");
}

/// Writes `content` as `name` in a fresh directory.
fn input_file(name: &str, content: &[u8]) -> PathBuf {
    let p = support::tempdir("report").join(name);
    std::fs::write(&p, content).unwrap();
    p
}

/// `gaptop report` in text form.
fn report_text(path: &Path) -> String {
    let out = Command::new(bin())
        .arg("report")
        .arg(path)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn fails_with(content: &[u8], name: &str, want: &str) {
    let p = input_file(name, content);
    let out = Command::new(bin()).arg("report").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{name}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "{name}: one line, got {err}"
    );
    assert!(err.starts_with("gaptop: "), "{err}");
    assert!(err.contains(name), "{name} not named: {err}");
    assert!(err.contains(want), "{name}: wanted {want:?} in {err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn malformed_inputs_fail_with_one_line() {
    let good = std::fs::read(fixture("multi_stream.json")).unwrap();
    fails_with(&good[..good.len() / 2], "truncated.json", "truncated");
    let mut gz = Vec::new();
    {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(&mut gz, flate2::Compression::fast());
        e.write_all(&good).unwrap();
        e.finish().unwrap();
    }
    fails_with(&gz[..gz.len() / 2], "truncated.json.gz", "truncated");
    fails_with(
        b"{\"traceEvents\": [ {\"ph\": \"X\" ,, } ]}",
        "invalid.json",
        "unreadable event",
    );
    fails_with(
        b"{\"traceEvents\": [{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"dur\":1}]}",
        "missing.json",
        "missing ts",
    );
    fails_with(
        b"{\"traceEvents\": [{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":5,\"dur\":-1}]}",
        "negative.json",
        "dropped 1 GPU op that ends before it starts",
    );
    fails_with(b"{\"traceEvents\": []}", "empty.json", "no GPU ops");
    fails_with(b"", "zero.json", "empty file");
    fails_with(b"{\"hello\": 1}", "notatrace.json", "not a trace");
    fails_with(
        b"\x89PNG\r\n\x1a\n\0\0\0",
        "image.png",
        "not a trace or a recording (binary data starting 89 50 4e 47",
    );
    fails_with(b"GAPTOPR1", "empty.rec", "no GPU ops");
    let k = r#"{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"device":0,"stream":7}}"#;
    // A window that ends before it starts is an unreadable event: skipped, counted and named,
    // and the trace read without it.
    let window = input_file(
        "window.json",
        format!(r#"{{"traceEvents": [{{"ph":"M","name":"gaptop_window","args":{{"from_ns":5,"to_ns":1}}}},{k}]}}"#)
            .as_bytes(),
    );
    let out = Command::new(bin())
        .arg("report")
        .arg(&window)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("gaptop_window: needs from_ns < to_ns"),
        "{err}"
    );
    // Metadata gaptop does not own may be odd; it is passed over.
    let odd = input_file(
        "odd_meta.json",
        format!(r#"{{"traceEvents": [{{"ph":"M","name":5}},{{"ph":"M","name":"process_name","pid":1,"args":7}},{k}]}}"#)
            .as_bytes(),
    );
    assert_eq!(report_json(&odd, &[])["gpu_ops"], 1);
    let out = Command::new(bin())
        .args(["report", "/nonexistent/x.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot open"));
}

/// NCCL kernels are communication: flagged on import (the timeline draws them apart) and
/// counted as GPU ops like any kernel.
#[test]
fn nccl_kernels_are_marked_as_communication() {
    let doc = br#"{"traceEvents": [
      {"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)","pid":0,"tid":7,"ts":10,"dur":50,"args":{"device":0,"stream":7,"correlation":1}},
      {"ph":"X","cat":"kernel","name":"void at::native::vectorized_elementwise_kernel<4>(int)","pid":0,"tid":7,"ts":70,"dur":5,"args":{"device":0,"stream":7,"correlation":2}}
    ]}"#;
    let store = gaptop_core::sources::kineto::load_reader(&doc[..], "nccl", usize::MAX).unwrap();
    let ops: Vec<u8> = store.lanes[0].iter().map(|o| o.flags).collect();
    assert_eq!(ops, vec![gaptop_core::model::records::FLAG_COMM, 0]);
}

/// A recording of a 2-GPU data-parallel run on an H200 pair (bench/workloads/ddp.py), where
/// rank 1 is planted late at every collective: the report names rank 1 as the late rank, with
/// the planted function, and shows rank 0 waiting inside NCCL.
#[test]
fn two_gpu_recording_names_the_late_rank() {
    let p = support::asset("ddp2.rec");
    let j = report_json(&p, &[]);
    let c = &j["comm"];
    assert_eq!(c["ranks"], 2);
    let ranks = c["per_rank"].as_array().unwrap();
    let r1 = ranks.iter().find(|r| r["rank"] == 1).unwrap();
    let r0 = ranks.iter().find(|r| r["rank"] == 0).unwrap();
    assert!(r1["late_count"].as_u64().unwrap() > 50, "{r1}");
    assert!(
        r0["wait_ns"].as_i64().unwrap() > 10 * r1["wait_ns"].as_i64().unwrap(),
        "{c}"
    );
    // What made rank 1 late, by cause: in the training loop, its GPU idle before the launches
    // of `late_backward` (a host gap); in the all-reduce loop, nothing between two collectives
    // but the late launch from `late_allreduce` (the collective's own stack). The first of each
    // loop is late for reasons of its own (set-up, the first step).
    let planted = |f: &str, cause: &str| -> u64 {
        c["late_sites"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["frames"].to_string().contains(f) && s["cause"] == cause)
            .inspect(|s| assert_eq!(s["rank"], 1, "{s}"))
            .map(|s| s["count"].as_u64().unwrap())
            .sum()
    };
    assert!(planted("late_backward", "host_gap") >= 19, "{c}");
    assert!(planted("late_allreduce", "collective") >= 19, "{c}");
    // Each rank's process is listed with what arrived from it.
    let procs = j["processes"].as_array().unwrap();
    assert_eq!(procs.len(), 2, "{procs:?}");
    for p in procs {
        assert_eq!(p["kernels"], p["kernels_with_launch"], "{p}");
        assert_eq!(p["dropped"], 0, "{p}");
    }
    let text = report_text(&p);
    assert!(
        text.contains("\n  pid 615     rank 1         887 kernels, 887 with launch"),
        "{text}"
    );
    assert!(
        text.contains(
            "launching the collective from /work/main/gpu/ddp.py(25): main.<locals>.late_allreduce"
        ),
        "{text}"
    );
}

/// Kernels replayed from a CUDA graph carry the graph launch's correlation id: they are charged
/// to the graph launch, and the gaps between them are reported as inside the graph, not as host
/// launch overhead.
#[test]
fn graph_replays_are_attributed_to_the_graph_launch() {
    let doc = br#"{"traceEvents": [
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":0,"dur":2,"args":{"correlation":1}},
      {"ph":"X","cat":"kernel","name":"before","pid":0,"tid":7,"ts":5,"dur":5,"args":{"device":0,"stream":7,"correlation":1}},
      {"ph":"X","cat":"cuda_runtime","name":"cudaGraphLaunch","pid":1,"tid":1,"ts":20,"dur":3,"args":{"correlation":2}},
      {"ph":"X","cat":"kernel","name":"g1","pid":0,"tid":7,"ts":30,"dur":5,"args":{"device":0,"stream":7,"correlation":2,"graph id":5}},
      {"ph":"X","cat":"kernel","name":"g2","pid":0,"tid":7,"ts":37,"dur":5,"args":{"device":0,"stream":7,"correlation":2,"graph id":5}},
      {"ph":"X","cat":"kernel","name":"g3","pid":0,"tid":7,"ts":44,"dur":5,"args":{"device":0,"stream":7,"correlation":2,"graph id":5}}
    ]}"#;
    let p = input_file("graph.json", doc);
    let j = report_json(&p, &[]);
    assert_eq!(j["reasons"]["graph"]["count"], 2);
    assert_eq!(j["reasons"]["graph"]["total_ns"], 4_000);
    // The gap before the replay is the host's: the graph launch began after "before" ended.
    assert_eq!(j["reasons"]["launch"]["count"], 1);
    let stacks = j["top_stacks"].to_string();
    assert!(stacks.contains("cudaGraphLaunch"), "{stacks}");
    // Every kernel, the three replayed ones included, found the call that launched it.
    assert_eq!(j["kernels_with_launch"], 4);
}

#[test]
fn launch_coverage_counts_kernels_whose_launch_is_known() {
    let doc = br#"{"traceEvents": [
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":0,"dur":2,"args":{"correlation":1}},
      {"ph":"X","cat":"kernel","name":"a","pid":0,"tid":7,"ts":5,"dur":5,"args":{"device":0,"stream":7,"correlation":1}},
      {"ph":"X","cat":"kernel","name":"orphan","pid":0,"tid":7,"ts":20,"dur":5,"args":{"device":0,"stream":7,"correlation":9}},
      {"ph":"X","cat":"gpu_memcpy","name":"Memcpy HtoD","pid":0,"tid":7,"ts":30,"dur":5,"args":{"device":0,"stream":7,"correlation":1}}
    ]}"#;
    let p = input_file("cover.json", doc);
    let j = report_json(&p, &[]);
    assert_eq!(
        (j["kernels"].as_u64(), j["kernels_with_launch"].as_u64()),
        (Some(2), Some(1))
    );
    let text = report_text(&p);
    assert!(
        text.contains("launch calls found for 1 of 2 kernels"),
        "{text}"
    );
}

/// A recording taken on the H200 with `--native`: the Python frames come first, then the native
/// frames down to the CUDA call, named (at record time) from the libraries' symbol tables.
#[test]
fn native_recording_names_cpp_frames_below_python() {
    let p = support::asset("gpt2_native.rec");
    let j = report_json(&p, &[]);
    assert_eq!(j["kernels_with_stack"], j["kernels"]);
    let top: Vec<String> = j["top_stacks"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    let py = top.iter().rposition(|f| f.contains(".py(")).unwrap();
    let native = top.iter().position(|f| f.contains("[libtorch_")).unwrap();
    assert!(top[py].ends_with("Conv1D.forward"), "{top:?}");
    assert!(
        py < native,
        "native frames come below the Python ones: {top:?}"
    );
    assert!(top.iter().any(|f| f.starts_with("at::native::")), "{top:?}");
    assert!(!top.iter().any(|f| f.starts_with("native:")), "{top:?}");
}

/// The planted workload (recorded on the H200) puts a known cause in each function: `fast`
/// launches tiny kernels back to back, `sync_then_launch` synchronizes first, `host_stall`
/// burns 200 µs of CPU before launching. The advice names each function with its cause. The
/// sync comes when the GPU is all but done: it blocks about 3.5 µs of a gap of about 26 µs, the
/// rest being the launch itself, so that gap is launch overhead, not the sync's.
#[test]
fn advice_names_each_planted_cause() {
    let p = support::asset("planted.rec");
    let j = report_json(&p, &[]);
    let advice = j["advice"].as_array().unwrap();
    let verdict_of = |f: &str| {
        advice
            .iter()
            .find(|a| a["site"].as_str().unwrap().starts_with(f))
            .map(|a| a["verdict"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("{f} not in {advice:?}"))
    };
    assert_eq!(verdict_of("fast "), "launch_bound");
    assert_eq!(verdict_of("sync_then_launch "), "launch_bound");
    assert_eq!(verdict_of("host_stall "), "host_work");
    let stall = advice
        .iter()
        .find(|a| a["site"].as_str().unwrap().starts_with("host_stall"))
        .unwrap();
    let typical = stall["typical_gap_ns"].as_i64().unwrap();
    assert!((150_000..260_000).contains(&typical), "{typical}");
    let shares: f64 = advice.iter().map(|a| a["share"].as_f64().unwrap()).sum();
    assert!(
        (shares - 1.0).abs() < 1e-9,
        "the three functions hold all gap time: {shares}"
    );

    let lb = support::asset("launchbound.rec");
    let j = report_json(&lb, &[]);
    let top = &j["advice"][0];
    assert!(
        top["site"]
            .as_str()
            .unwrap()
            .starts_with("rope  launchbound.py:"),
        "{top}"
    );
    assert_eq!(top["verdict"], "launch_bound");
    assert!(top["share"].as_f64().unwrap() > 0.95);
}

/// Launches without a Python stack (a C++ thread, a trace taken without stacks) are not lumped
/// together: advice names the launching API and the kernel, with template variants grouped,
/// and says when the launch call was not seen at all.
#[test]
fn stackless_gaps_are_told_apart_by_api_and_kernel() {
    let doc = br#"{"traceEvents": [
      {"ph":"X","cat":"kernel","name":"first","pid":0,"tid":7,"ts":0,"dur":7,"args":{"device":0,"stream":7,"correlation":8}},
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":0,"dur":2,"args":{"correlation":1}},
      {"ph":"X","cat":"kernel","name":"void reduce<float>(float*)","pid":0,"tid":7,"ts":10,"dur":5,"args":{"device":0,"stream":7,"correlation":1}},
      {"ph":"X","cat":"cuda_driver","name":"cuLaunchKernelEx","pid":1,"tid":2,"ts":20,"dur":2,"args":{"correlation":2}},
      {"ph":"X","cat":"kernel","name":"ncclDevKernel_AllReduce_Sum_f32_RING_LL","pid":0,"tid":7,"ts":40,"dur":5,"args":{"device":0,"stream":7,"correlation":2}},
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":1,"tid":1,"ts":50,"dur":2,"args":{"correlation":3}},
      {"ph":"X","cat":"kernel","name":"void reduce<half>(half*)","pid":0,"tid":7,"ts":60,"dur":5,"args":{"device":0,"stream":7,"correlation":3}},
      {"ph":"X","cat":"kernel","name":"orphan","pid":0,"tid":7,"ts":100,"dur":5,"args":{"device":0,"stream":7,"correlation":9}}
    ]}"#;
    let p = input_file("stackless.json", doc);
    let j = report_json(&p, &[]);
    let advice = j["advice"].as_array().unwrap();
    let gaps_of = |site: &str| {
        advice
            .iter()
            .find(|a| a["site"] == site)
            .map(|a| (a["gaps"].as_u64().unwrap(), a["gap_ns"].as_i64().unwrap()))
            .unwrap_or_else(|| panic!("{site} not in {advice:?}"))
    };
    // reduce<float> and reduce<half> group as one kernel: the gaps 7..10 and 45..60 µs.
    assert_eq!(
        gaps_of("(no Python stack) cudaLaunchKernel → reduce"),
        (2, 18_000)
    );
    assert_eq!(
        gaps_of("(no Python stack) cuLaunchKernelEx → ncclDevKernel_AllReduce_Sum_f32_RING_LL"),
        (1, 25_000)
    );
    assert_eq!(gaps_of("(launch call not seen) orphan"), (1, 35_000));
}

/// GPT-2's Conv1D.forward gaps are typically ~22 µs, but half of their steady time is in gaps
/// of ~61 µs or more (the CPU work of cuBLASLt before its workspace memsets): host work. They
/// recur in every one of the 24 steady forward passes, but the two longest gaps of the run (61.8 and 47.9 ms, first
/// calls) fall in the warm-up pass: the advice counts that pass's gaps apart, and the text
/// says the usual fix does not remove them.
#[test]
fn advice_counts_one_off_gaps_apart() {
    let p = support::asset("gpt2.rec");
    let j = report_json(&p, &[]);
    let conv = support::advice(&j, "Conv1D.forward");
    assert_eq!(conv["verdict"], "host_work");
    assert!(
        conv["text"]
            .as_str()
            .unwrap()
            .contains("in gaps of ~61.4µs or more"),
        "{conv}"
    );
    let (n, ns, all) = (
        conv["one_offs"].as_u64().unwrap(),
        conv["one_off_ns"].as_i64().unwrap(),
        conv["gap_ns"].as_i64().unwrap(),
    );
    assert_eq!(j["steps"]["count"], 25, "GPT-2's forward passes");
    assert_eq!(j["steps"]["steady"], 24, "the first is warm-up");
    assert_eq!(conv["recurring"], true, "{conv}");
    assert_eq!(conv["steps_present"], 24, "{conv}");
    // The warm-up pass's gaps: Conv1D launches 96 a pass.
    assert_eq!(n, 96, "{conv}");
    assert!(ns >= 61_800_000 + 47_900_000 && ns < all, "{conv}");
    let text = report_text(&p);
    assert!(
        text.contains("in 96 one-off gaps (outside the steady state"),
        "{text}"
    );
    // They are listed apart, the longest first.
    let one_offs: Vec<i64> = j["one_off_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["duration_ns"].as_i64().unwrap())
        .collect();
    assert_eq!(&one_offs[..2], &[61_830_284, 47_878_097], "{one_offs:?}");
}

/// A verdict and its text go by one figure. GPT-2's Conv1D.forward has gaps typically ~22 µs
/// apart, but half of its steady idle is in gaps of ~61 µs or more: host work, and its text
/// (and the UI's verdict line) gives the ~61 µs, not the median. On every recording, a
/// launch-bound site's figure is under 50 µs and a host-work site's is not, as the rule says.
#[test]
fn each_verdict_and_its_text_give_the_figure_it_went_by() {
    let p = support::asset("gpt2.rec");
    let j = report_json(&p, &[]);
    let conv = support::advice(&j, "Conv1D.forward");
    assert!(conv["typical_gap_ns"].as_i64().unwrap() < 50_000, "{conv}");
    assert!(conv["verdict_gap_ns"].as_i64().unwrap() >= 50_000, "{conv}");
    assert_eq!(conv["verdict"], "host_work");
    for rec in [
        "gpt2.rec",
        "gpt2_native.rec",
        "planted.rec",
        "launchbound.rec",
        "decode_planted.rec",
        "llama_decode.rec",
        "ddp2.rec",
    ] {
        let j = report_json(&support::asset(rec), &[]);
        for a in j["advice"].as_array().unwrap() {
            let fig = a["verdict_gap_ns"].as_i64().unwrap();
            match a["verdict"].as_str().unwrap() {
                "launch_bound" => assert!(fig < 50_000, "{rec}: {a}"),
                "host_work" => assert!(fig >= 50_000, "{rec}: {a}"),
                _ => {}
            }
            let text = a["text"].as_str().unwrap();
            let shown = gaptop_core::units::fmt_short(fig);
            if matches!(
                a["verdict"].as_str().unwrap(),
                "launch_bound" | "host_work" | "busy" | "slow_launch"
            ) {
                assert!(text.contains(&shown), "{rec}: {shown} not in {text}");
            }
        }
    }
}

/// `--format folded`: gap time by launch stack for flame graph tools. Every gap's time is in
/// it once (the lines add up to the idle breakdown's total), heaviest first, each line
/// `frame;frame;...;API;op NANOSECONDS`, without the framework plumbing the UI hides.
#[test]
fn folded_stacks_carry_all_gap_time_for_flame_graphs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (path, expect) in [
        (
            root.join("assets/gpt2.rec"),
            "Conv1D.forward;cudaMemsetAsync",
        ),
        (
            root.join("../shared/traces/kineto-launchbound.json.gz"),
            "launchbound.py(6): rope;aten::mul;cudaLaunchKernel",
        ),
    ] {
        assert!(path.is_file(), "missing {}", path.display());
        let text = String::from_utf8(report_out(&path, "folded", &[])).unwrap();
        let mut total: u64 = 0;
        let mut last = u64::MAX;
        for line in text.lines() {
            let (stack, ns) = line.rsplit_once(' ').expect("`stack value`");
            let ns: u64 = ns.parse().expect("a whole number of ns");
            assert!(ns > 0 && ns <= last, "not heaviest first: {line}");
            assert!(stack.split(';').count() >= 2, "{line}");
            assert!(!stack.contains("torch/nn/modules/module.py("), "{line}");
            last = ns;
            total += ns;
        }
        assert!(text.contains(expect), "{expect} not in:\n{text}");
        let j = report_json(&path, &[]);
        let idle: u64 = ["host_wait", "kernel_wait", "other"]
            .iter()
            .map(|c| j["idle"][c]["total_ns"].as_u64().unwrap())
            .sum();
        assert_eq!(total, idle, "{}", path.display());
    }
}

/// `gaptop export SRC -o OUT [--from A --to B]`; the export must succeed.
fn export(src: &Path, out: &Path, window: &[&str]) {
    let o = Command::new(bin())
        .arg("export")
        .arg(src)
        .arg("-o")
        .arg(out)
        .args(window)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// A report with what names the source, and where its clock starts, taken out.
/// The replayed figures of a report, taken out of it: a window's copy (or an export) keeps
/// the calls that explain its gaps, not every call of the whole store, so the replay of the
/// same steps may differ by a few calls, by well under a percent.
fn replayed(j: &mut Value) -> Vec<f64> {
    let mut v = Vec::new();
    if let Some(r) = j.get_mut("replay").and_then(|r| r.as_object_mut()) {
        r.remove("calls");
    }
    for a in j["advice"].as_array_mut().unwrap() {
        let a = a.as_object_mut().unwrap();
        for k in [
            "saving_ns",
            "saving_changed_ns",
            "busy_after",
            "saving_overlapped_ns",
        ] {
            if a.contains_key("whatif") {
                if let Some(x) = a.remove(k) {
                    v.push(x.as_f64().unwrap_or(0.0));
                }
            }
        }
    }
    v
}

/// Two reports' replayed figures agree to within a percent (and 2 µs).
fn same_replayed(a: &[f64], b: &[f64], what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (x, y) in a.iter().zip(b) {
        let tol =
            (x.abs().max(y.abs()) * 0.01).max(2_000.0_f64.min(x.abs().max(y.abs()) * 0.5 + 0.01));
        assert!((x - y).abs() <= tol, "{what}: {x} against {y}");
    }
}

fn analysis(mut j: Value) -> Value {
    let o = j.as_object_mut().unwrap();
    for k in ["source", "origin_ns", "window"] {
        o.remove(k);
    }
    for list in ["top_gaps", "one_off_gaps"] {
        for g in o[list].as_array_mut().unwrap() {
            g.as_object_mut().unwrap().remove("start_ns");
        }
    }
    j
}

/// An export opened again gives the analysis of the window it was taken from: every process
/// of a two-rank recording with its label and rank, the syncs that explain gaps, the CPU spans
/// of a torch.profiler trace, and the gaps at the window's edges; gzipped or not.
#[test]
fn exports_reopen_with_the_analysis_they_were_taken_from() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = support::tempdir("report");
    let kineto = root.join("../shared/traces/kineto-launchbound.json.gz");
    for (src, window, out) in [
        (root.join("assets/ddp2.rec"), vec![], "ddp2.json.gz"),
        (root.join("assets/planted.rec"), vec![], "planted.json"),
        (kineto.clone(), vec![], "kineto.json.gz"),
        (
            kineto,
            vec!["--from", "20ms", "--to", "30ms"],
            "window.json.gz",
        ),
    ] {
        let out = dir.join(out);
        export(&src, &out, &window);
        let mut want = report_json(&src, &window);
        let mut got = report_json(&out, &[]);
        let (rw, rg) = (replayed(&mut want), replayed(&mut got));
        same_replayed(&rg, &rw, &out.display().to_string());
        assert_eq!(
            analysis(got.clone()),
            analysis(want.clone()),
            "{} re-opened differs",
            out.display()
        );
        if !window.is_empty() {
            // The window, not its ops, at the source's times.
            assert_eq!(got["window"]["from_ns"], 20_000_000);
            assert_eq!(got["window"]["to_ns"], 30_000_000);
        }
    }
    // The two ranks of the recording were checked as processes above; say it outright.
    let j = report_json(&dir.join("ddp2.json.gz"), &[]);
    let ranks: Vec<i64> = j["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["rank"].as_i64().unwrap())
        .collect();
    assert_eq!(ranks.len(), 2, "{}", j["processes"]);
    assert!(ranks.contains(&0) && ranks.contains(&1), "{ranks:?}");
    // Gzipped means gzipped: the magic bytes.
    let head = std::fs::read(dir.join("ddp2.json.gz")).unwrap();
    assert_eq!(&head[..2], &[0x1f, 0x8b]);
    assert_eq!(std::fs::read(dir.join("planted.json")).unwrap()[0], b'{');
    let _ = std::fs::remove_dir_all(&dir);
}

/// The text report's top stacks (their frames: `--full`) show the modules that launched, not
/// nn.Module's and transformers' call wrappers: on GPT-2 the two heaviest stacks are told
/// apart by the attention and MLP modules above the same Conv1D.
#[test]
fn text_stacks_name_the_modules_without_the_wrappers() {
    let p = support::asset("gpt2.rec");
    let text = String::from_utf8(report_out(&p, "text", &["--full"])).unwrap();
    let stacks = text
        .split("Top stacks by gap time")
        .nth(1)
        .and_then(|s| s.split("\n\n").next())
        .unwrap();
    for wrapper in [
        "module.py(",
        "output_capturing.py(",
        "GradientCheckpointingLayer.__call__",
    ] {
        assert!(!stacks.contains(wrapper), "{wrapper} in\n{stacks}");
    }
    let blocks: Vec<&str> = stacks.split(" gaps\n").skip(1).take(2).collect();
    assert!(blocks[0].contains("GPT2Attention.forward"), "{stacks}");
    assert!(blocks[1].contains("GPT2MLP.forward"), "{stacks}");
    assert!(blocks[0].contains("Conv1D.forward") && blocks[1].contains("Conv1D.forward"));
}

/// What the UI exports from, a copy of the window taken on the UI thread, gives the same
/// analysis of that window as the whole store: on every recording in assets/ and the H200
/// trace, for the whole capture and for windows that start and end inside gaps and ops.
#[test]
fn a_window_copy_analyses_as_the_whole_store_does() {
    use gaptop_core::analysis::gaps::Config;
    use gaptop_core::model::window::Window;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut sources: Vec<PathBuf> = ["ddp2", "gpt2", "gpt2_native", "launchbound", "planted"]
        .iter()
        .map(|r| root.join(format!("assets/{r}.rec")))
        .collect();
    sources.push(root.join("../shared/traces/kineto-launchbound.json.gz"));
    let cfg = Config::default();
    for src in sources {
        let st = gaptop_core::sources::load_path(&src, usize::MAX).unwrap();
        let (lo, hi) = st.span().unwrap();
        let span = hi - lo;
        // Fractions of the span: the whole, thin slices, and one slice per tenth.
        let mut windows = vec![(0.0, 1.0), (0.0, 0.001), (0.999, 1.0), (0.5, 0.5001)];
        windows.extend((0..10).map(|i| (i as f64 / 10.0 + 0.013, i as f64 / 10.0 + 0.1)));
        for (a, b) in windows {
            let (wlo, whi) = (
                lo + (span as f64 * a) as i64,
                lo + (span as f64 * b).min(span as f64) as i64,
            );
            let copy = st.window_copy(wlo, whi);
            let rel = Window::new(wlo - lo, whi - lo);
            let mut want =
                serde_json::to_value(gaptop::report::build(&st, rel, &cfg, 50, None).1).unwrap();
            let mut got =
                serde_json::to_value(gaptop::report::build(&copy, rel, &cfg, 50, None).1).unwrap();
            let what = format!("{} window {a}..{b}", src.display());
            let (rw, rg) = (replayed(&mut want), replayed(&mut got));
            same_replayed(&rg, &rw, &what);
            if got != want {
                // Print the first difference of the advice to name it.
                let (ga, wa) = (&got["advice"], &want["advice"]);
                for (x, y) in ga.as_array().unwrap().iter().zip(wa.as_array().unwrap()) {
                    assert_eq!(x, y, "{what}: advice");
                }
                assert_eq!(
                    ga.as_array().unwrap().len(),
                    wa.as_array().unwrap().len(),
                    "{what}"
                );
            }
            assert_eq!(got, want, "{what}");
        }
    }
}

/// In a gaptop export every pid is a process of its own, also one with only a sync in the
/// window: another process's sync on a thread of the same number explains no gap of this one.
#[test]
fn an_exports_calls_stay_with_their_own_process() {
    let doc = br#"{"traceEvents": [
      {"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":100.0,"dur":1.0,"args":{"correlation":1,"device":0,"stream":7,"process":10}},
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":5,"ts":99.0,"dur":0.5,"args":{"correlation":1}},
      {"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":200.0,"dur":1.0,"args":{"correlation":2,"device":0,"stream":7,"process":10}},
      {"ph":"X","cat":"cuda_runtime","name":"cudaLaunchKernel","pid":10,"tid":5,"ts":190.0,"dur":0.5,"args":{"correlation":2}},
      {"ph":"X","cat":"cuda_runtime","name":"cudaStreamSynchronize","pid":20,"tid":5,"ts":120.0,"dur":60.0,"args":{"correlation":9}}
    ]}"#;
    let p = input_file("two_procs.json", doc);
    let j = report_json(&p, &[]);
    assert_eq!(j["reasons"]["launch"]["count"], 1, "{}", j["reasons"]);
    assert_eq!(j["reasons"]["sync"]["count"], 0, "{}", j["reasons"]);
}

/// Windows that hold nothing and inputs that are not what they seem end in one clear line and
/// status 1, not an empty report: a window past the end, one that ends before it starts, a bare
/// number without its unit, an empty file, a directory; a gzipped recording reads as it is.
#[test]
fn bad_windows_and_odd_files_are_clear() {
    let gpt2 = support::asset("gpt2.rec");
    let fails = |args: &[&str], want: &str| {
        let out = Command::new(bin()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(out.stdout.len(), 0, "{args:?} printed a report");
    };
    let g = gpt2.to_str().unwrap();
    fails(
        &["report", g, "--from", "700ms"],
        "--from 700.00ms is past the end of the capture (it ends at 614.66ms)",
    );
    fails(
        &["report", g, "--from", "300ms", "--to", "100ms"],
        "--to 100.00ms must be after --from 300.00ms",
    );
    fails(
        &["export", g, "--from", "1s", "-o", "/dev/null"],
        "is past the end of the capture",
    );
    fails(
        &["report", g, "--from", "1.5"],
        "give a unit: ns, us, ms or s",
    );
    let dir = support::tempdir("odd-files");
    let empty = dir.join("empty.json");
    std::fs::write(&empty, b"").unwrap();
    fails(
        &["report", empty.to_str().unwrap()],
        "empty.json: empty file",
    );
    // A directory is the traces in it (the ranks of a run): here the empty one, or none.
    fails(&["report", dir.to_str().unwrap()], "empty.json: empty file");
    let none = dir.join("none");
    std::fs::create_dir_all(&none).unwrap();
    fails(
        &["report", none.to_str().unwrap()],
        "none: no traces in it (*.json, *.json.gz, *.rec)",
    );
    // A recording someone gzipped reads as the recording.
    let gz = dir.join("gpt2.rec.gz");
    let mut z = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut z, &std::fs::read(&gpt2).unwrap()).unwrap();
    std::fs::write(&gz, z.finish().unwrap()).unwrap();
    let plain = report_json(&gpt2, &[]);
    let zipped = report_json(&gz, &[]);
    assert_eq!(plain["gpu_ops"], zipped["gpu_ops"]);
    assert_eq!(plain["device_idle_ns"], zipped["device_idle_ns"]);
}

/// The percentiles' max is the longest gap itself, not the histogram's value rounded up to its
/// three digits (which read 4.815 s beside a 4.814 s top gap).
#[test]
fn the_percentile_max_is_the_longest_gap() {
    for name in ["gpt2.rec", "planted.rec", "launchbound.rec"] {
        for basis in [&[][..], &["--per-stream"][..]] {
            let j = report_json(&support::asset(name), basis);
            let longest = j["top_gaps"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| g["duration_ns"].as_u64().unwrap())
                .max()
                .unwrap();
            assert_eq!(
                j["gap_percentiles_ns"]["max"].as_u64().unwrap(),
                longest,
                "{name} {basis:?}"
            );
        }
    }
}

/// A window exported from a longer capture keeps the capture's times: reopened, its gaps are
/// where they were in the source, and `--from`/`--to` count from the source's start too.
#[test]
fn an_exported_window_keeps_the_source_times() {
    let dir = support::tempdir("export-times");
    let out = dir.join("w.json.gz");
    let st = std::process::Command::new(bin())
        .args(["export"])
        .arg(support::asset("gpt2.rec"))
        .args(["--from", "200ms", "--to", "260ms", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert!(st.status.success(), "{st:?}");
    let src = report_json(
        &support::asset("gpt2.rec"),
        &["--from", "200ms", "--to", "260ms"],
    );
    let w = report_json(&out, &[]);
    let starts = |j: &Value| -> Vec<u64> {
        j["top_gaps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["start_ns"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(starts(&w), starts(&src));
    assert!(
        starts(&w).iter().all(|&s| s >= 200_000_000),
        "{:?}",
        starts(&w)
    );
    assert_eq!(w["window"]["from_ns"], 200_000_000);
    let sub = report_json(&out, &["--from", "210ms", "--to", "230ms"]);
    assert_eq!(sub["window"]["from_ns"], 210_000_000);
    // Before the window's start and past its end: errors, not empty reports.
    let err = std::process::Command::new(bin())
        .arg("report")
        .arg(&out)
        .args(["--to", "100ms"])
        .output()
        .unwrap();
    assert!(!err.status.success());
    assert!(
        String::from_utf8_lossy(&err.stderr).contains("before the capture starts (at 200.00ms)"),
        "{err:?}"
    );
}

/// HTA's trace_compare trace holds two steps, `ProfilerStep#1009` and `#1010`, with a launch
/// under each: the top stacks and the folded tree have one `ProfilerStep#` frame for both,
/// and a single gap still says which step it was in.
#[test]
fn numbered_profiler_steps_are_one_frame() {
    let path = fixture("hta_trace_compare/base.json.gz");
    let j = report_json(&path, &[]);
    let roots: Vec<&str> = j["top_stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["frames"][0].as_str())
        .filter(|f| f.starts_with("ProfilerStep"))
        .collect();
    assert_eq!(roots, ["ProfilerStep#"], "{roots:?}");
    let step_of = |g: &Value| -> Vec<String> {
        let all = [&g["frames"], &g["cpu_frames"]];
        all.iter()
            .flat_map(|v| v.as_array().unwrap().iter())
            .filter_map(|f| f.as_str())
            .filter(|f| f.starts_with("ProfilerStep#"))
            .map(String::from)
            .collect()
    };
    let steps: Vec<Vec<String>> = j["top_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(step_of)
        .filter(|v| !v.is_empty())
        .collect();
    assert!(
        steps
            .iter()
            .any(|v| v.iter().any(|f| f == "ProfilerStep#1009"))
            && steps
                .iter()
                .any(|v| v.iter().any(|f| f == "ProfilerStep#1010")),
        "{steps:?}"
    );
    let o = Command::new(bin())
        .args(["report", "--format", "folded"])
        .arg(&path)
        .output()
        .unwrap();
    let folded = String::from_utf8(o.stdout).unwrap();
    let step_roots: std::collections::BTreeSet<&str> = folded
        .lines()
        .filter_map(|l| l.split(';').next())
        .filter(|f| f.starts_with("ProfilerStep"))
        .collect();
    assert_eq!(
        step_roots.into_iter().collect::<Vec<_>>(),
        ["ProfilerStep#"]
    );
}

//! Kineto as users have it: the 2021 format, the ranks of a run as files or a directory (with
//! their ranks, clocks and communication), zero-length and overlapping gaps as HTA counts them,
//! and CUDA graph replays, on real traces from HTA's and Kineto's repositories
//! (tests/data/kineto/README.md gives their origin and the expected values' derivation) and on
//! hand-made ones (tests/fixtures/skewed_ranks/README.md).

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::{per_rank, report_paths as report_json};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gaptop")
}

/// A file of tests/data/kineto.
fn data(name: &str) -> PathBuf {
    support::root().join("tests/data/kineto").join(name)
}

fn run(args: &[&Path], extra: &[&str]) -> std::process::Output {
    Command::new(bin())
        .arg("report")
        .args(args)
        .args(extra)
        .output()
        .unwrap()
}

fn report_text(paths: &[&Path]) -> String {
    let out = run(paths, &[]);
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// The idle breakdown as (category, count, total µs) rows.
fn idle(j: &Value) -> Vec<(String, u64, f64)> {
    ["host_wait", "kernel_wait", "other"]
        .iter()
        .map(|c| {
            let b = &j["idle"][c];
            (
                c.to_string(),
                b["count"].as_u64().unwrap(),
                b["total_ns"].as_f64().unwrap() / 1000.0,
            )
        })
        .collect()
}

fn rows(v: &[(&str, u64, f64)]) -> Vec<(String, u64, f64)> {
    v.iter().map(|&(c, n, t)| (c.to_string(), n, t)).collect()
}

/// The 2021 format (`Kernel`, `Memcpy`, `Memset`, `Runtime`, `Operator`, `"stream 7"`
/// threads, `Call stack` arguments) reads as today's: every op, every launch, HTA's breakdown.
#[test]
fn a_2021_trace_with_capitalised_categories_reads_whole() {
    let p = data("kineto-2021-resnet50.json.gz");
    let j = report_json(&[&p]);
    // count.py's counts.
    assert_eq!(j["gpu_ops"], 1516);
    assert_eq!(j["kernels"], 1462);
    assert_eq!(j["kernels_with_launch"], 1462);
    assert_eq!(j["kernels_with_stack"], 1462);
    // HTA 0.5's breakdown of the same file, 27 zero-length kernel_wait gaps included.
    assert_eq!(
        idle(&j),
        rows(&[
            ("host_wait", 246, 15_526.0),
            ("kernel_wait", 1269, 1_674.0),
            ("other", 0, 0.0)
        ])
    );
    assert!(j.get("overlapping").is_none(), "{}", j["overlapping"]);
    assert_eq!(j["skipped"], serde_json::json!({}), "every category known");
    // Launch stacks hold the operators' Python stack (`Call stack`, innermost first in the
    // trace) outermost first, above the operators.
    let frames: Vec<String> = j["top_stacks"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    assert!(
        frames[0].starts_with("resnet50_profiler_api.py("),
        "{frames:?}"
    );
    let module = frames
        .iter()
        .position(|f| f.ends_with(": <module>"))
        .unwrap();
    let op = frames.iter().position(|f| f.starts_with("aten::")).unwrap();
    assert!(module < op, "{frames:?}");

    // The same spellings a year later, with integer threads and a rank in the header.
    let j = report_json(&[&data("hta-inference_rank_1.json.gz")]);
    assert_eq!(j["kernels"], 4);
    assert_eq!(j["kernels_with_launch"], 4);
    assert_eq!(j["processes"][0]["rank"], 1);
    assert_eq!(
        idle(&j),
        rows(&[
            ("host_wait", 3, 1_599.0),
            ("kernel_wait", 0, 0.0),
            ("other", 0, 0.0)
        ])
    );
}

/// A directory of two torch.profiler rank traces is one run: each rank a process, with its
/// rank from `distributedInfo`, its lanes labelled by it, each rank's breakdown HTA's, and the
/// communication analysis worked out by hand in tests/data/kineto/README.md.
#[test]
fn a_directory_of_rank_traces_is_one_run_with_its_communication() {
    let dir = data("hta-two-ranks");
    let j = report_json(&[&dir]);
    let procs = j["processes"].as_array().unwrap();
    let who: Vec<(i64, &str, u64)> = procs
        .iter()
        .map(|p| {
            (
                p["rank"].as_i64().unwrap(),
                p["label"].as_str().unwrap(),
                p["kernels"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        who,
        vec![
            (0, "sampled_rank-0.json.gz", 1154),
            (1, "sampled_rank-1.json.gz", 1104)
        ]
    );
    // HTA's breakdowns of rank 0 and rank 1, added.
    assert_eq!(
        idle(&j),
        rows(&[
            ("host_wait", 283 + 296, 3_525_804.0 + 3_461_650.0),
            ("kernel_wait", 417 + 377, 3_966.0 + 3_626.0),
            ("other", 499 + 476, 701_924.0 + 679_096.0)
        ])
    );
    let c = &j["comm"];
    assert_eq!(c["ranks"], 2);
    assert_eq!(c["collectives"], 10);
    assert_eq!(c["comm_kernels"], 20);
    // Their SendRecv kernels do not end together pair by pair: the clocks stay as recorded,
    // and the report says it cannot tell who was late (on the recorded clocks rank 1 would
    // seem late 8 times by 381 ms, rank 0 twice by 132 ms: a guess).
    let clocks = j["clocks"].as_str().unwrap();
    assert!(clocks.contains("not aligned"), "{clocks}");
    let per = per_rank(c);
    assert_eq!(per, vec![(0, 0, 0, 0), (1, 0, 0, 0)]);
    assert_eq!(c["late_sites"].as_array().unwrap().len(), 0);
    let unknown = j["comm_unknown"].as_str().unwrap();
    assert!(
        unknown.contains("rank 1") && unknown.contains("cannot be told"),
        "{unknown}"
    );
    let text = report_text(&[&dir]);
    assert!(
        text.contains("Communication: 10 collectives over 2 ranks (20 NCCL kernels)"),
        "{text}"
    );
    assert!(
        text.contains("  cannot tell: the clocks of rank 1"),
        "{text}"
    );
    assert!(
        !text.contains("late: rank") && !text.contains("arrived last"),
        "{text}"
    );

    // The files named one by one are the same capture.
    let files = [
        dir.join("sampled_rank-0.json.gz"),
        dir.join("sampled_rank-1.json.gz"),
    ];
    let k = report_json(&[&files[0], &files[1]]);
    for key in ["idle", "comm", "processes", "top_gaps", "device_idle_ns"] {
        assert_eq!(j[key], k[key], "{key}");
    }
    // Lanes are labelled by rank.
    let store = gaptop_core::sources::load_paths(&[dir], usize::MAX).unwrap();
    let mut labels: Vec<String> = (0..store.lanes.len())
        .map(|l| store.lane_label(l))
        .collect();
    labels.sort();
    assert!(labels.contains(&"r0 gpu0 s7".to_string()), "{labels:?}");
    assert!(labels.contains(&"r1 gpu1 s7".to_string()), "{labels:?}");
}

/// Rank 1's host clock runs 5 ms behind and its trace is relative to `baseTimeNanoseconds`:
/// the ends of the collectives put it back, and the late rank is the one that was late.
#[test]
fn ranks_clocks_are_aligned_on_the_ends_of_their_collectives() {
    let dir = support::root().join("tests/fixtures/skewed_ranks");
    let j = report_json(&[&dir]);
    let clocks = j["clocks"].as_str().unwrap();
    assert!(clocks.contains("rank 1 +5.00ms"), "{clocks}");
    let c = &j["comm"];
    let per = per_rank(c);
    assert_eq!(per, vec![(0, 45_000, 1, 20_000), (1, 20_000, 3, 45_000)]);
    assert_eq!(c["late_sites"][0]["rank"], 1);
    assert_eq!(
        c["late_sites"][0]["frames"],
        serde_json::json!(["train.py(21): rank1_step"])
    );
    // On rank 0's clock, rank 1's first kernel starts at its true time.
    let store = gaptop_core::sources::load_paths(&[dir], usize::MAX).unwrap();
    let r1 = store.procs.iter().position(|p| p.rank == 1).unwrap() as u32;
    let lane = store.lanes.iter().find(|l| l.key.proc == r1).unwrap();
    assert_eq!(lane.op(0).start, 1_000_110_000);
}

/// Zero-length gaps count as HTA counts them; an op that starts before the previous one on its
/// stream ended is counted apart, and shown.
#[test]
fn zero_length_gaps_count_as_hta_counts_them_and_overlaps_apart() {
    let p = data("hta-cuda-graphs.json.gz");
    let j = report_json(&[&p]);
    assert_eq!(j["gpu_ops"], 1839);
    // HTA: host_wait 33 / 133,871 µs, kernel_wait 1,796 / 4,212 µs (134 of length 0, and the
    // overlap as one of -2 µs), other 6 / 7,119 µs.
    assert_eq!(
        idle(&j),
        rows(&[
            ("host_wait", 33, 133_871.0),
            ("kernel_wait", 1796 - 1, 4_212.0 + 2.0),
            ("other", 6, 7_119.0)
        ])
    );
    assert_eq!(
        j["overlapping"],
        serde_json::json!({"count": 1, "total_ns": 2000})
    );
    let text = report_text(&[&p]);
    assert!(
        text.contains("\n  overlapping         1 ops       2µs  started before"),
        "{text}"
    );
    // Gaps of length 0 hold no time to charge: the percentiles are of the others.
    assert!(j["gap_percentiles_ns"]["p50"].as_u64().unwrap() > 0);
}

/// Ops replayed by a cudaGraphLaunch carry its correlation id but no graph id: the gaps between
/// the ops of one replay are `graph`, as count.py finds them.
#[test]
fn graph_replays_without_graph_ids_are_graph() {
    let j = report_json(&[&data("hta-cuda-graphs.json.gz")]);
    assert_eq!(
        j["reasons"]["graph"],
        serde_json::json!({"count": 838, "total_ns": 2_061_000})
    );
}

/// What cannot be one run is refused in one line naming the files.
#[test]
fn traces_of_different_runs_are_refused() {
    let fails = |paths: &[&Path], want: &str| {
        let out = run(paths, &[]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{paths:?} succeeded");
        assert!(err.contains(want), "{paths:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(out.stdout.is_empty());
    };
    let two = data("hta-two-ranks");
    let r0 = two.join("sampled_rank-0.json.gz");
    let d = support::tempdir("kineto-runs");
    // The same rank twice.
    let copy = d.join("again.json.gz");
    std::fs::copy(&r0, &copy).unwrap();
    fails(&[&r0, &copy], "are both rank 0: traces of different runs?");
    fails(&[&r0, &r0], "given twice");
    // Runs of different sizes: a rank of a two-rank run with one of a 128-rank run.
    fails(
        &[&r0, &data("hta-cuda-graphs.json.gz")],
        "is of a run of 128 ranks",
    );
    // A recording joins only other recordings.
    fails(
        &[&r0, &support::asset("planted.rec")],
        "planted.rec: a recording joins only other recordings",
    );
    // Work that never meets in time (the 2021 trace has no rank).
    fails(
        &[&r0, &data("kineto-2021-resnet50.json.gz")],
        "traces of different runs?",
    );
    // A directory without traces.
    let empty = d.join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::write(empty.join("notes.txt"), b"x").unwrap();
    fails(&[&empty], "no traces in it (*.json, *.json.gz, *.rec)");
    // A header that puts the times nowhere.
    let odd = d.join("odd.json");
    std::fs::write(
        &odd,
        br#"{"traceEvents": [{"ph":"X","cat":"kernel","name":"k","pid":0,"tid":7,"ts":1,"dur":1,"args":{"stream":7}}], "baseTimeNanoseconds": -5}"#,
    )
    .unwrap();
    fails(
        &[&odd],
        "odd.json: baseTimeNanoseconds -5 is not a time since 1970",
    );
    // A broken file among good ones is named.
    let bad = d.join("rank-5.json");
    std::fs::write(&bad, b"{\"traceEvents\": [").unwrap();
    fails(&[&r0, &bad], "rank-5.json: truncated");
}

/// A rank set exported and opened again analyses as it was: ranks, labels, CPU spans.
#[test]
fn an_exported_rank_set_opens_again_as_it_was() {
    let dir = data("hta-two-ranks");
    let out = support::tempdir("kineto-export").join("two.json.gz");
    let st = Command::new(bin())
        .args(["export"])
        .arg(&dir)
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let a = report_json(&[&dir]);
    let b = report_json(&[&out]);
    for key in [
        "idle",
        "reasons",
        "comm",
        "processes",
        "top_gaps",
        "top_stacks",
        "advice",
    ] {
        assert_eq!(a[key], b[key], "{key}");
    }
}

/// The advice entry of a site, by its name's start.
fn advised<'a>(j: &'a Value, site: &str) -> &'a Value {
    j["advice"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["site"].as_str().unwrap().starts_with(site))
        .unwrap_or_else(|| panic!("{site} not advised: {:#}", j["advice"]))
}

/// Kineto of 2021 puts the optimizer's ops under `record_function.__enter__`
/// (torch/autograd/profiler.py), which gaptop charged 38% of this window's idle to: the
/// profiler's own frames are never a site, the optimizer's code is. The backward kernels, on
/// autograd's thread without Python frames, are charged to their node, not to the aten op.
#[test]
fn the_profilers_frames_are_no_site_and_backward_goes_by_its_node() {
    let p = data("kineto-2021-resnet50.json.gz");
    let j = report_json(&[&p]);
    for a in j["advice"].as_array().unwrap() {
        let site = a["site"].as_str().unwrap();
        assert!(
            !site.contains("__enter__") && !site.contains("profiler.py"),
            "{site}"
        );
    }
    advised(&j, "wrapper  optimizer.py:87");
    let conv = advised(&j, "CudnnConvolutionBackward");
    // Its kernels run 150 µs after gaps of a few: busy, not a backward to fix.
    assert_eq!(conv["verdict"], "busy", "{conv}");
    let t = report_text(&[&p]);
    let fix = &t[t.find("What to fix").unwrap()..t.find("Top stacks").unwrap()];
    assert!(!fix.contains("profiler.py"), "{fix}");
}

/// HTA's two ranks: the all-reduce's gaps are communication (or a late rank), and the
/// backward's are named by the forward op that made their node, found by its sequence number.
#[test]
fn collectives_and_backward_ops_are_named_by_pattern() {
    let j = report_json(&[&data("hta-two-ranks")]);
    // The collective's own launches are not what to fix (its wait is another rank's, which no
    // change of host work here removes): the replay ranks it below the ten sites that save
    // time. Its pattern, named where it shows, is checked in the patterns' unit tests
    // (`collectives_are_communication_not_host_work`).
    let advice = j["advice"].as_array().unwrap();
    assert!(advice.len() >= 5, "{advice:?}");
    if let Some(nccl) = advice
        .iter()
        .find(|a| a["site"].as_str().unwrap().starts_with("nccl:all_reduce"))
    {
        assert_eq!(nccl["cause"], "collective", "{nccl}");
        assert!(nccl["fix"].as_str().unwrap().contains("late rank"));
    }
    let ln = advised(&j, "NativeLayerNormBackward0");
    assert_eq!(ln["cause"], "backward", "{ln}");
    assert_eq!(ln["cause_name"], "backward of native_layer_norm");
    assert_eq!(
        ln["reason"],
        "backward launches mirror the forward (forward: aten::layer_norm)"
    );
    let t = report_text(&[&data("hta-two-ranks")]);
    assert!(
        t.contains("NativeLayerNormBackward0  [host_work, backward]"),
        "{t}"
    );
}

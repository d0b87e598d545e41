//! The diagnosis on a program whose stalls were planted at known functions, under the real
//! collector and `gaptop record` (with its CPU sampler) against the fake libcupti: the steps
//! are found, the recurring stall is ranked first by its cost a step, the warm-up stall is a
//! one-off, and the CPU samples during the recurring stall's gaps name the native function that
//! made it.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use support::{build, fake_cuda};

/// Records `script STEPS` (in this crate's tests folder) under `gaptop record` with the real
/// collector against the fake libcupti: the recording's path and the run's output.
fn record_fake(target: &Path, tag: &str, script: &str, steps: &str) -> (PathBuf, String) {
    let dir = fake_cuda(target, tag);
    let rec = dir.join(format!("{tag}.rec"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let out = Command::new(target.join("gaptop"))
        .args(["record", "-o"])
        .arg(&rec)
        .args(["--", "python3"])
        .arg(&script)
        .arg(steps)
        .env("CUDA_HOME", dir.join("cuda"))
        .env("GAPTOP_COLLECTOR", target.join("libgaptop_collector.so"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("gaptop runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    (rec, log)
}

#[test]
fn planted_stalls_are_diagnosed() {
    let target = build();
    let (rec, log) = record_fake(&target, "planted", "planted_decode.py", "40");
    assert!(log.contains("PLANTED steps=40"), "{log}");
    let rep = Command::new(target.join("gaptop"))
        .args(["report", "--format", "json"])
        .arg(&rec)
        .output()
        .unwrap();
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    let j: serde_json::Value = serde_json::from_slice(&rep.stdout).unwrap();

    // The steps, found from the repeating launches (±1).
    let steps = j["steps"]["count"].as_i64().expect("steps found");
    assert!((39..=41).contains(&steps), "{}", j["steps"]);

    // The recurring stall first, by its cost a step.
    let advice = j["advice"].as_array().unwrap();
    let first = &advice[0];
    assert!(
        first["site"]
            .as_str()
            .unwrap()
            .starts_with("plan_attention"),
        "{first}"
    );
    assert_eq!(first["recurring"], true, "{first}");
    assert_eq!(first["verdict"], "host_work", "{first}");
    assert!(
        first["steps_present"].as_i64().unwrap() >= steps - 4,
        "{first}"
    );
    assert!(
        first["per_step_ns"].as_i64().unwrap() > 5_000_000,
        "{first}"
    );
    assert!(first["saving_ns"].as_i64().unwrap() > 5_000_000, "{first}");

    // The warm-up stall: one-offs only, never ranked first, listed apart.
    let warm = advice
        .iter()
        .find(|a| a["site"].as_str().unwrap().starts_with("warmup_stall"))
        .unwrap_or_else(|| panic!("warmup_stall advised: {advice:?}"));
    assert_eq!(warm["recurring"], false, "{warm}");
    assert_eq!(warm["one_offs"], warm["gaps"], "{warm}");
    let one_offs = j["one_off_gaps"].as_array().unwrap();
    assert!(
        one_offs.iter().any(|g| g["frames"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f.as_str().unwrap().contains("warmup_stall"))),
        "{one_offs:?}"
    );

    // What the CPU did during plan_attention's gaps: deflate, in most of the samples.
    if log.contains("CPU samples off") {
        eprintln!("perf events refused here; the CPU checks were skipped: {log}");
        return;
    }
    let cpu = &first["cpu"];
    let frames = cpu["frames"]
        .as_array()
        .expect("CPU samples during the gaps");
    let deflate = frames
        .iter()
        .find(|f| f["frame"].as_str().unwrap().contains("deflate"))
        .unwrap_or_else(|| panic!("no deflate frame: {cpu}"));
    assert!(deflate["share"].as_f64().unwrap() >= 0.8, "{cpu}");
    // The thread works through the gaps, so it is on the CPU for much of them; on a loaded
    // machine (CI's two cores shared by the test binaries) it waits for one part of the time,
    // and a thread-clock sampler sees only the part it ran (0.39 seen at a load of 6).
    assert!(cpu["on_cpu"].as_f64().unwrap() > 0.2, "{cpu}");
}

/// A loop that waits for its input in `queue.get` (a producer thread sleeps ~15 ms an item),
/// then launches one function's six identical kernels: the steps are its 60 iterations (the
/// waits show where each starts, the kernels' names cannot), not 360 steps of one kernel, and
/// no saving is larger than a step.
#[test]
fn a_loop_fed_by_a_queue_has_its_iterations_as_steps() {
    let target = build();
    let (rec, log) = record_fake(&target, "queue", "queue_loop.py", "60");
    assert!(log.contains("QUEUE_LOOP steps=60"), "{log}");
    let j = support::report(&target, &rec).unwrap();
    let steps = &j["steps"];
    let count = steps["count"].as_i64().expect("steps found");
    assert!((59..=61).contains(&count), "{steps}");
    let median = steps["median_ns"].as_i64().unwrap();
    assert!((14_000_000..60_000_000).contains(&median), "{steps}");
    let advice = j["advice"].as_array().unwrap();
    let first = &advice[0];
    assert!(
        first["site"].as_str().unwrap().starts_with("forward"),
        "{first}"
    );
    assert_eq!(first["recurring"], true, "{first}");
    for a in advice {
        let saving = a["saving_ns"].as_i64().unwrap_or(0);
        assert!(saving <= median * 11 / 10, "a saving above the step: {a}");
    }
}

/// Launches that wait on the program's own CPU work in another function: the report names
/// that function as the code to fix (`advice[].code`, the headline's lead), with the launching
/// one as the site whose launches it delays; and the CPU frames it read keep callee before
/// caller, although some samples hold the caller alone (the step between two picks).
#[test]
fn the_code_to_fix_is_the_cpu_work_not_the_launch_it_delays() {
    let target = build();
    let (rec, log) = record_fake(&target, "scheduler", "scheduler_loop.py", "60");
    assert!(log.contains("SCHEDULER_LOOP steps=60"), "{log}");
    if log.contains("CPU samples off") {
        eprintln!("perf events refused here; the checks were skipped: {log}");
        return;
    }
    let j = support::report(&target, &rec).unwrap();
    let first = &j["advice"][0];
    assert!(
        first["site"].as_str().unwrap().starts_with("replay  "),
        "{first}"
    );
    assert_eq!(first["verdict"], "host_work", "{first}");
    let frames: Vec<&str> = first["cpu"]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["frame"].as_str().unwrap())
        .collect();
    let at = |q: &str| frames.iter().position(|f| f.ends_with(q));
    let (pick, step) = (at("): Scheduler.pick"), at("): step"));
    assert!(pick.is_some() && pick < step, "{frames:?}");
    // On a machine whose CPUs other work holds (CI's two cores under the whole suite), the
    // thread waits to run through much of the gaps: that cause is named instead, rightly.
    if first["cause"] == "oversubscribed_cpu" {
        eprintln!("the CPU was oversubscribed; the code-to-fix checks were skipped: {first}");
        return;
    }
    assert!(
        first["code"]
            .as_str()
            .is_some_and(|c| c.starts_with("Scheduler.pick  scheduler_loop.py:")),
        "{first}"
    );
    let text = Command::new(target.join("gaptop"))
        .arg("report")
        .arg(&rec)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.starts_with("Fix first: Scheduler.pick (scheduler_loop.py:")
            && text
                .lines()
                .next()
                .unwrap()
                .contains("CPU work before the launches of replay (scheduler_loop.py:"),
        "{text}"
    );
}

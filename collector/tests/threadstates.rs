//! What the launching thread did through its gaps, without a GPU: programs played against the
//! fake libcupti under `gaptop record` (its sampler with the kernel's context-switch records),
//! each of whose launching thread waits in one known way before its launches. The report must
//! name that way for at least 80% of the gap time of the site that launches (the JSON's
//! `advice[].thread_state`), and its cause; the GIL's holder by its thread.

#[path = "../../pystack/tests/support/pythons.rs"]
mod pythons;
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::{build, fake_cuda};

/// Taken by each test for its whole run: these programs' waits are their truth, which another
/// test's busy processes would turn into waits for a CPU on a small machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Records `script STEPS DIR` (in this crate's tests folder) under `gaptop record` against the
/// fake libcupti, with `env` set: the report's JSON and the run's output; None where perf
/// events are refused here (said on stderr).
fn record(tag: &str, script: &str, steps: &str, env: &[(&str, &str)]) -> Option<(Value, String)> {
    record_on(Path::new("python3"), tag, script, steps, env)
}

/// [`record`], the script run by the interpreter `python`.
fn record_on(
    python: &Path,
    tag: &str,
    script: &str,
    steps: &str,
    env: &[(&str, &str)],
) -> Option<(Value, String)> {
    let target = build();
    let dir = fake_cuda(&target, tag);
    let rec = dir.join(format!("{tag}.rec"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let mut c = Command::new(target.join("gaptop"));
    c.args(["record", "-o"])
        .arg(&rec)
        .arg("--")
        .arg(python)
        .arg(&script)
        .arg(steps)
        .arg(&dir)
        .env("CUDA_HOME", dir.join("cuda"))
        .env("GAPTOP_COLLECTOR", target.join("libgaptop_collector.so"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env("GAPTOP_VERBOSE", "1")
        .env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("gaptop runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    let j = support::report(&target, &rec).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    if log.contains("CPU samples off") {
        eprintln!("perf events refused here; the thread states were not checked: {log}");
        return None;
    }
    Some((j, log))
}

/// The advice on the site that launches (`forward`), with its states; None (said) where the
/// kernel refused context-switch records.
fn forward(j: &Value, log: &str) -> Option<Value> {
    let a = j["advice"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["site"].as_str().unwrap().starts_with("forward"))
        .unwrap_or_else(|| panic!("forward advised: {}", j["advice"]))
        .clone();
    if log.contains("context-switch records refused") {
        eprintln!("context-switch records refused here: {log}");
        assert!(a.get("thread_state").is_none(), "{a}");
        return None;
    }
    Some(a)
}

/// The share of the site's gap time in states `pred` accepts.
fn share(a: &Value, pred: impl Fn(&Value) -> bool) -> f64 {
    a["thread_state"]
        .as_array()
        .unwrap_or_else(|| panic!("no thread_state: {a}"))
        .iter()
        .filter(|s| pred(s))
        .map(|s| s["share"].as_f64().unwrap())
        .sum()
}

fn call(s: &Value) -> &str {
    s["call"].as_str().unwrap_or("")
}

/// Whether a state's frames hold a frame that names `function` (`file(line): function`).
fn under(s: &Value, function: &str) -> bool {
    s["frames"]
        .as_array()
        .unwrap()
        .iter()
        .any(|f| f.as_str().unwrap().ends_with(&format!(": {function}")))
}

#[test]
fn a_thread_blocked_on_a_queue_waits_for_its_input() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((j, log)) = record("tsqueue", "queue_loop.py", "60", &[]) else {
        return;
    };
    assert!(log.contains("QUEUE_LOOP steps=60"), "{log}");
    let Some(a) = forward(&j, &log) else {
        return;
    };
    let queued = share(&a, |s| {
        s["state"] == "blocked" && call(s) == "futex" && under(s, "Queue.get")
    });
    assert!(queued >= 0.8, "blocked in Queue.get {queued}: {a}");
    assert_eq!(a["cause"], "waiting_for_input", "{a}");
    let text = a["text"].as_str().unwrap();
    assert!(!text.contains("CPU work before"), "{text}");
    assert!(
        a["cause_name"]
            .as_str()
            .unwrap()
            .contains("blocked in `Queue.get"),
        "{a}"
    );
}

/// A DataLoader with too few workers: two loader processes, each 20 ms of CPU an item, feed a
/// loop whose step is a 5 ms kernel. The loop waits blocked in `Queue.get`, the input what-if
/// counts the loading where it happens (the workers' samples: the launching thread only
/// waits), and says how many workers would feed it: 20 / 5 = 4 (3 to 5 under the noise of
/// sampling), and that 2 were seen loading.
#[test]
fn too_few_loader_workers_says_how_many_would_feed_the_loop() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((j, log)) = record("tsworkers", "worker_loop.py", "100", &[]) else {
        return;
    };
    assert!(log.contains("WORKER_LOOP steps=100 workers=2"), "{log}");
    let Some(a) = forward(&j, &log) else {
        return;
    };
    assert_eq!(a["cause"], "waiting_for_input", "{a}");
    assert_eq!(a["workers_seen"], 2, "{a}");
    let n = a["workers"]
        .as_u64()
        .unwrap_or_else(|| panic!("no workers: {a}"));
    assert!((3..=5).contains(&n), "{n} workers: {a}");
}

/// On `python3` (40 steps), then on each other CPython here whose GIL and threads the
/// viewer reads from outside (3.9 to 3.13: `gaptop_pystack::gil`, and the layout the
/// collector publishes), in fewer steps.
#[test]
fn a_thread_that_wants_the_gil_names_its_holder() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let others = pythons::pythons()
        .into_iter()
        .filter(|(v, p)| ((3, 9)..=(3, 13)).contains(v) && p != Path::new("python3"));
    let runs = std::iter::once((None, PathBuf::from("python3"), "40"))
        .chain(others.map(|(v, p)| (Some(v), p, "20")));
    for (version, python, steps) in runs {
        let tag = match version {
            Some((a, b)) => format!("tsgil{a}{b}"),
            None => "tsgil".into(),
        };
        let Some((j, log)) = record_on(&python, &tag, "gil_loop.py", steps, &[]) else {
            return;
        };
        let v = python.display();
        assert!(
            log.contains(&format!("GIL_LOOP steps={steps}")),
            "{v}: {log}"
        );
        let Some(a) = forward(&j, &log) else {
            return;
        };
        let gil = share(&a, |s| s["state"] == "gil");
        // The log says whether the collector published its layout (a failure is said where
        // GAPTOP_VERBOSE is set): without it no thread's GIL or stack is read from outside.
        assert!(gil >= 0.8, "{v}: waiting for the GIL {gil}: {a}\n{log}");
        // The holder of most of that time: the busy thread, by its name and its function.
        let held = share(&a, |s| {
            s["state"] == "gil" && s["holder"]["name"] == "busy_py" && under(&s["holder"], "spin")
        });
        assert!(held >= 0.5, "{v}: held by busy_py in spin {held}: {a}");
        assert_eq!(a["cause"], "gil_contention", "{v}: {a}");
        assert!(
            a["cause_name"].as_str().unwrap().contains("`busy_py`"),
            "{v}: {a}"
        );
        eprintln!("{v}: the GIL's holder named (waiting {gil:.2}, held by busy_py {held:.2})");
    }
}

#[test]
fn a_thread_that_sleeps_before_its_launches_is_said_to_sleep() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((j, log)) = record("tssleep", "sleep_loop.py", "40", &[]) else {
        return;
    };
    assert!(log.contains("SLEEP_LOOP steps=40"), "{log}");
    let Some(a) = forward(&j, &log) else {
        return;
    };
    let slept = share(&a, |s| {
        s["state"] == "blocked" && call(s).ends_with("nanosleep") && under(s, "pace")
    });
    assert!(slept >= 0.8, "asleep in pace {slept}: {a}");
    assert_eq!(a["cause"], "sleep_on_launch_path", "{a}");
}

#[test]
fn a_thread_that_reads_a_large_file_is_said_to_read_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((j, log)) = record("tsread", "read_loop.py", "40", &[]) else {
        return;
    };
    assert!(log.contains("READ_LOOP steps=40"), "{log}");
    let Some(a) = forward(&j, &log) else {
        return;
    };
    let read = share(&a, |s| {
        s["state"] == "blocked"
            && call(s).starts_with("pread")
            && call(s).ends_with("/input.bin")
            && under(s, "load")
    });
    assert!(read >= 0.8, "reading input.bin in load {read}: {a}");
    assert_eq!(a["cause"], "io_on_launch_path", "{a}");
}

/// Without context-switch records (`GAPTOP_CTX_SWITCHES=0`: what a kernel that refuses them
/// leaves), the site has no states, and its CPU line is the on-CPU samples' as before.
#[test]
fn without_context_switches_the_cpu_samples_stand_alone() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some((j, _)) = record(
        "tsoff",
        "queue_loop.py",
        "30",
        &[("GAPTOP_CTX_SWITCHES", "0")],
    ) else {
        return;
    };
    let a = &j["advice"][0];
    assert!(a.get("thread_state").is_none(), "{a}");
    assert_ne!(a["cause"], "waiting_for_input", "{a}");
}

/// The recording keeps the states: written as GAPTOPR6, read back with them.
#[test]
fn a_recording_keeps_the_states() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let target = build();
    let dir = fake_cuda(&target, "tskeep");
    let rec: PathBuf = dir.join("keep.rec");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sleep_loop.py");
    let out = Command::new(target.join("gaptop"))
        .args(["record", "-o"])
        .arg(&rec)
        .args(["--", "python3"])
        .arg(&script)
        .arg("10")
        .env("CUDA_HOME", dir.join("cuda"))
        .env("GAPTOP_COLLECTOR", target.join("libgaptop_collector.so"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    let bytes = std::fs::read(&rec).unwrap();
    assert_eq!(&bytes[..8], gaptop_wire::RECORDING_MAGIC);
    let j = support::report(&target, &rec).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    if log.contains("CPU samples off") || log.contains("context-switch records refused") {
        return;
    }
    let states = j["advice"][0]["thread_state"].as_array().expect("states");
    assert!(states.iter().any(|s| s["state"] == "blocked"), "{states:?}");
}

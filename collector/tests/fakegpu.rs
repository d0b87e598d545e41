//! The collector end to end without a GPU: `gaptop record` runs a Python program that plays a
//! CUDA program against a fake libcupti (collector/fake-cupti). What the viewer recorded must
//! be every kernel launched, each with its launch call and its Python stack.

use std::path::Path;
use std::process::Command;

use gaptop_wire::stackframe::StackFrame;

mod support;
use support::{build, fake_cuda, report, script};

/// `gaptop record -o REC [ARGS] -- PYTHON fakegpu.py STEPS` with the fake CUDA install and
/// the built collector.
fn record_cmd(
    target: &Path,
    dir: &Path,
    rec: &Path,
    args: &[&str],
    python: &str,
    steps: u32,
) -> Command {
    let mut c = Command::new(target.join("gaptop"));
    c.arg("record")
        .args(args)
        .arg("-o")
        .arg(rec)
        .args(["--", python])
        .arg(script())
        .arg(steps.to_string())
        .env("CUDA_HOME", dir.join("cuda"))
        .env("GAPTOP_COLLECTOR", target.join("libgaptop_collector.so"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env_remove("LD_LIBRARY_PATH");
    c
}

/// Records the script under `gaptop record`; returns what it printed (the program's output and
/// gaptop's) and the recording's JSON report, or the report's error.
fn run(
    target: &Path,
    dir: &Path,
    env: &[(&str, &str)],
) -> (String, Result<serde_json::Value, String>) {
    let (ok, log, j) = run_any(target, dir, env);
    assert!(ok, "{log}");
    (log, j)
}

/// [`run`], whether or not `gaptop record` succeeds: its success too.
fn run_any(
    target: &Path,
    dir: &Path,
    env: &[(&str, &str)],
) -> (bool, String, Result<serde_json::Value, String>) {
    let python = env
        .iter()
        .find(|(k, _)| *k == "PYTHON")
        .map_or("python3", |(_, v)| *v);
    let rec = dir.join("fake.rec");
    let mut c = record_cmd(target, dir, &rec, &[], python, 20);
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("gaptop runs");
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), log, report(target, &rec))
}

/// Starts `gaptop record` on a slow run of the script (300 steps, 5 ms apart) with its output
/// piped, and waits until the program is running; returns gaptop and the program's pid.
fn start_slow(target: &Path, dir: &Path, rec: &Path) -> (std::process::Child, String) {
    let pidfile = dir.join("pid");
    let g = record_cmd(target, dir, rec, &[], "python3", 300)
        .env("FAKE_STEP_SLEEP", "0.005")
        .env("FAKE_PIDFILE", &pidfile)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    loop {
        match std::fs::read_to_string(&pidfile) {
            Ok(p) if !p.is_empty() => return (g, p.trim().to_string()),
            _ => {}
        }
        assert!(t.elapsed().as_secs() < 20, "the program did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Each stack names the script's functions, outermost first, each at the line of the call it
/// was making.
fn assert_stacks_name_each_call(j: &serde_json::Value) {
    let script = std::fs::read_to_string(script()).unwrap();
    let line = |text: &str| {
        1 + script
            .lines()
            .position(|l| l.trim_start().starts_with(text))
            .unwrap_or_else(|| panic!("{text} not in the script"))
    };
    let frames = |i: usize| -> Vec<String> {
        j["top_stacks"][i]["frames"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|f| Some(f.as_str()?.split_once("fakegpu.py(")?.1.to_string()))
            .collect()
    };
    let stacks: Vec<Vec<String>> = (0..3).map(frames).collect();
    for want in [
        vec![
            format!("{}): <module>", line("step()")),
            format!("{}): step", line("rope()")),
            format!("{}): rope", line("result += fake.fake_launch(b\"void rope")),
        ],
        vec![format!("{}): worker", line("fake.fake_launch(b\"worker"))],
        vec![
            format!("{}): <module>", line("step()")),
            format!("{}): step", line("attention()")),
            format!(
                "{}): attention",
                line("result += fake.fake_launch(b\"attention")
            ),
        ],
    ] {
        assert!(stacks.contains(&want), "{want:?} not in {stacks:?}");
    }
}

#[test]
fn every_fake_launch_arrives_with_its_call_and_python_stack() {
    let target = build();
    let dir = fake_cuda(&target, "plain");
    let (log, j) = run(&target, &dir, &[]);
    let j = j.unwrap();
    // 20 steps of 8 rope launches and 1 attention launch, then 50 from a thread.
    let launched = 20 * 9 + 50;
    assert!(log.contains(&format!("FAKE launched={launched}")), "{log}");
    assert_eq!(j["kernels"], launched, "{log}");
    assert_eq!(j["kernels_with_launch"], launched, "{log}");
    assert_eq!(j["kernels_with_stack"], launched, "{log}");
    assert!(log.contains(" 0 dropped"), "{log}");
    // Callbacks on the launch and sync calls the fake knows (two of each), not on the rest.
    assert!(log.contains("callbacks=4"), "{log}");
    assert_stacks_name_each_call(&j);
    // The gaps after the synchronizations are charged to them; the rope launches are
    // launch-bound. A sync explains its gap only when it blocked for half of it or more: on a
    // loaded machine the Python between a sync and the next step's launches can be preempted
    // for longer than the sync's ~400 µs wait, and that gap is then the launch's (seen: 18 of
    // 19 beside a busy core). Most of the 19 after a step's sync are the sync's.
    let syncs = j["reasons"]["sync"]["count"].as_u64().unwrap();
    assert!((15..=20).contains(&syncs), "{}", j["reasons"]);
    let rope = j["advice"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["site"].as_str().unwrap().starts_with("rope "))
        .unwrap_or_else(|| panic!("rope not advised: {}", j["advice"]));
    assert_eq!(rope["gaps"], 20 * 8 - 1, "{rope}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// When CUPTI is held by another profiler, the collector says so once and the program runs on
/// unchanged; when CUPTI refuses the API records a diagnostic asks for, GPU records still come.
#[test]
fn refusals_leave_the_program_running() {
    let target = build();
    let dir = fake_cuda(&target, "busy");
    // Nothing is recorded then: gaptop says so and fails, and writes no file.
    let (ok, log, j) = run_any(&target, &dir, &[("FAKE_CUPTI_BUSY", "1")]);
    assert!(log.contains("FAKE launched=230"), "{log}");
    assert!(log.contains("is another profiler attached?"), "{log}");
    assert!(log.contains("the program runs unchanged"), "{log}");
    assert!(!ok && log.contains("nothing recorded"), "{log}");
    assert!(j.unwrap_err().contains("cannot open"), "{log}");

    // The fake itself, loaded where no test asked for it, does not pass for CUPTI.
    let (ok, log, _) = run_any(&target, &dir, &[("GAPTOP_FAKE_CUPTI", "0")]);
    assert!(!ok && log.contains("FAKE launched=230"), "{log}");
    assert!(log.contains("gaptop's test double of libcupti"), "{log}");

    let (log, j) = run(&target, &dir, &[("GAPTOP_API_ACTIVITY", "1")]);
    let j = j.unwrap();
    assert!(log.contains("FAKE launched=230 callbacks=0"), "{log}");
    assert!(log.contains("CUPTI refused to switch"), "{log}");
    assert_eq!(j["kernels"], 230, "{log}");
    assert_eq!(j["kernels_with_launch"], 0, "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The viewer killed mid-run: the program runs to its end, and the collector says once that it
/// stopped collecting.
#[test]
fn the_program_finishes_when_the_viewer_is_killed() {
    let target = build();
    let dir = fake_cuda(&target, "kill");
    let t = std::time::Instant::now();
    let (mut g, _) = start_slow(&target, &dir, &dir.join("killed.rec"));
    std::thread::sleep(std::time::Duration::from_millis(300));
    g.kill().unwrap();
    let _ = g.wait();
    // The program still holds the pipes: reading them to the end waits for it to finish.
    let mut out = String::new();
    let mut err = String::new();
    use std::io::Read;
    g.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    g.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(out.contains("FAKE launched=2750"), "out: {out}\nerr: {err}");
    assert!(t.elapsed().as_secs() < 30, "the program was held up");
    assert_eq!(
        err.matches("collection stopped, the program continues")
            .count(),
        1,
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The program killed mid-run: `gaptop record` keeps what arrived (every kernel it holds has
/// its launch call), says how the program ended, and exits as shells report a killed command.
#[test]
fn what_arrived_is_kept_when_the_program_is_killed() {
    let target = build();
    let dir = fake_cuda(&target, "prog");
    let rec = dir.join("prog.rec");
    let (g, pid) = start_slow(&target, &dir, &rec);
    // Long enough for a periodic flush (200 ms) to have sent records.
    std::thread::sleep(std::time::Duration::from_millis(700));
    Command::new("kill").args(["-KILL", &pid]).status().unwrap();
    let out = g.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(137), "{err}");
    assert!(
        err.contains("the command ended: killed by signal 9 (SIGKILL)"),
        "{err}"
    );
    let j = report(&target, &rec).unwrap_or_else(|e| panic!("{e}\n{err}"));
    let kernels = j["kernels"].as_u64().unwrap();
    assert!(kernels > 0 && kernels < 2750, "{kernels} kernels\n{err}");
    assert_eq!(j["kernels_with_launch"], kernels, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `gaptop record -o FILE` over a file the user has: the file holds the old content until the
/// recording is complete (the recording is written beside it and renamed over it), and
/// Ctrl-C (SIGINT) mid-run completes it with what arrived.
#[test]
fn a_recording_replaces_its_file_only_once_complete() {
    let target = build();
    let dir = fake_cuda(&target, "replace");
    let rec = dir.join("kept.rec");
    std::fs::write(&rec, b"old").unwrap();
    let (g, _) = start_slow(&target, &dir, &rec);
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(std::fs::read(&rec).unwrap(), b"old", "written in place");
    let partial: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
        .collect();
    assert_eq!(partial.len(), 1, "the recording is written beside its file");
    Command::new("kill")
        .args(["-INT", &g.id().to_string()])
        .status()
        .unwrap();
    let out = g.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("stopped by signal 2; the recording is kept, complete up to now"),
        "{err}"
    );
    // Kept, and still said to have been stopped: the status a shell gives SIGINT.
    assert_eq!(out.status.code(), Some(130), "{err}");
    let j = report(&target, &rec).unwrap_or_else(|e| panic!("{e}\n{err}"));
    let kernels = j["kernels"].as_u64().unwrap();
    assert!(kernels > 0 && kernels < 2750, "{kernels} kernels\n{err}");
    assert!(!partial[0].path().exists(), "the temporary file stayed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two `gaptop record -o same.rec` at once: the second is refused in one line naming the
/// first, which goes on. Killed outright (SIGKILL), the first leaves its `.part`, which reads
/// with a warning that it was cut short; the next `record` of the file is not held up by it.
/// A name that ends in `.gz` is written gzipped, and reads without a warning.
#[test]
fn one_writer_a_file_a_killed_part_reads_cut_short_and_gz_is_gzipped() {
    let target = build();
    let dir = fake_cuda(&target, "writers");
    let rec = dir.join("same.rec");
    let (g, _) = start_slow(&target, &dir, &rec);
    let part = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|p| p.to_string_lossy().ends_with(".part"))
    };
    // Records have been flushed into the .part (every 200 ms) once it holds the ops.
    let t = std::time::Instant::now();
    while part()
        .and_then(|p| std::fs::metadata(p).ok())
        .map_or(0, |m| m.len())
        < 4096
    {
        assert!(t.elapsed().as_secs() < 60, "nothing flushed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let second = record_cmd(&target, &dir, &rec, &[], "python3", 1)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(1), "{err}");
    let line = format!("another gaptop (pid {}) is writing it now", g.id());
    assert!(err.contains(&line), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let mut g = g;
    g.kill().unwrap();
    let _ = g.wait();
    let part = part().expect("the killed record's .part is left");
    let out = Command::new(target.join("gaptop"))
        .arg("report")
        .arg(&part)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // Killed before the program's first ops were recorded, it holds none (exit 1): either way
    // it says it was cut short.
    let empty = err.contains("holds no GPU ops");
    assert_eq!(out.status.code(), Some(if empty { 1 } else { 0 }), "{err}");
    assert!(err.contains("recording cut short"), "{err}");
    // The .part of a killed writer holds nobody up.
    let gz = dir.join("same.rec.gz");
    for out in [&rec, &gz] {
        let o = record_cmd(&target, &dir, out, &[], "python3", 5)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
    }
    assert_eq!(std::fs::read(&gz).unwrap()[..2], [0x1f, 0x8b], "gzipped");
    let o = Command::new(target.join("gaptop"))
        .args(["report", "--format", "json"])
        .arg(&gz)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && err.is_empty(), "{err}");
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["kernels"], 5 * 9 + 50, "{j}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two "ranks" started by the first, as torchrun's workers are: both report to the one viewer,
/// each labelled by pid and rank, each with all its kernels.
#[test]
fn every_process_reports_labelled_by_rank() {
    let target = build();
    let dir = fake_cuda(&target, "ranks");
    let (log, j) = run(&target, &dir, &[("FAKE_RANKS", "2")]);
    let j = j.unwrap();
    assert!(log.contains("from 2 process(es)"), "{log}");
    assert_eq!(j["kernels"], 2 * 230, "{log}");
    assert_eq!(j["kernels_with_stack"], 2 * 230, "{log}");
    let mut procs: Vec<(i64, u64, u64, bool)> = j["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["rank"].as_i64().unwrap_or(-1),
                p["kernels"].as_u64().unwrap(),
                p["kernels_with_stack"].as_u64().unwrap(),
                p["pid"].as_u64().unwrap() > 0
                    && p["label"].as_str().unwrap().contains("fakegpu.py"),
            )
        })
        .collect();
    procs.sort();
    assert_eq!(procs, [(0, 230, 230, true), (1, 230, 230, true)], "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Callbacks switched off and on while calls are in flight (GAPTOP_STACK_DUTY, 5 ms of every
/// 10): the kernels launched in the windows have their calls and stacks, the others none, and
/// nothing is lost or mismatched.
#[test]
fn callbacks_switched_off_and_on_mid_run_stay_consistent() {
    let target = build();
    let dir = fake_cuda(&target, "duty");
    let (log, j) = run(
        &target,
        &dir,
        &[
            ("GAPTOP_STACK_DUTY", "50"),
            ("GAPTOP_DUTY_PERIOD_MS", "10"),
            ("FAKE_STEP_SLEEP", "0.002"),
        ],
    );
    let j = j.unwrap();
    assert_eq!(j["kernels"], 230, "{log}");
    let with = j["kernels_with_launch"].as_u64().unwrap();
    assert!(
        with > 10 && with < 220,
        "{with} of 230 with a launch\n{log}"
    );
    assert_eq!(j["kernels_with_stack"], with, "{log}");
    assert!(log.contains(" 0 dropped"), "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The Python stack walk on every CPython found besides `python3` (3.10 to 3.13 each find
/// their frames and lines differently): GAPTOP_TEST_PYTHONS (paths, `:`-separated), else
/// pyenv's installs.
#[test]
fn stacks_and_lines_on_each_python_found() {
    let target = build();
    let dir = fake_cuda(&target, "pythons");
    let mut pythons: Vec<String> = match std::env::var("GAPTOP_TEST_PYTHONS") {
        Ok(v) => v
            .split(':')
            .filter(|p| !p.is_empty())
            .map(String::from)
            .collect(),
        Err(_) => std::fs::read_dir(
            Path::new(&std::env::var("HOME").unwrap_or_default()).join(".pyenv/versions"),
        )
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            ["3.10.", "3.11.", "3.12.", "3.13."]
                .iter()
                .any(|v| n.starts_with(v))
        })
        .map(|e| e.path().join("bin/python3").to_string_lossy().into_owned())
        .collect(),
    };
    pythons.insert(0, "python3".into());
    for py in &pythons {
        let (log, j) = run(&target, &dir, &[("PYTHON", py.as_str())]);
        let j = j.unwrap_or_else(|e| panic!("{py}: {e}\n{log}"));
        assert_eq!(j["kernels_with_stack"], 230, "{py}: {log}");
        assert_stacks_name_each_call(&j);
        eprintln!("{py}: stacks and lines as expected");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--native`: after the Python frames come the native ones between the interpreter and the
/// launch (here ctypes' foreign call), named from the libraries' symbols by the viewer.
#[test]
fn native_frames_follow_the_python_ones() {
    let target = build();
    let dir = fake_cuda(&target, "native");
    let (log, j) = run(&target, &dir, &[("GAPTOP_NATIVE", "1")]);
    let j = j.unwrap();
    assert_eq!(j["kernels_with_stack"], 230, "{log}");
    let frames: Vec<String> = j["top_stacks"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    let last_py = frames
        .iter()
        .rposition(|f| f.contains("fakegpu.py("))
        .unwrap_or_else(|| panic!("no Python frame in {frames:?}"));
    let api = frames
        .iter()
        .position(|f| f.starts_with("cudaLaunchKernel"))
        .unwrap_or_else(|| panic!("no launch call in {frames:?}"));
    let native = &frames[last_py + 1..api];
    assert!(
        native.iter().any(|f| f.contains("ffi_call [libffi")),
        "native frames {native:?} in {frames:?}"
    );
    assert!(
        !native
            .iter()
            .any(|f| f.contains("gaptop") || f.contains("libcupti")),
        "gaptop's and CUPTI's frames are left out: {native:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `record --duration`: recording stops on time, the program goes on to its end without its
/// collector, and what arrived is a complete recording.
#[test]
fn record_duration_stops_recording_not_the_program() {
    let target = build();
    let dir = fake_cuda(&target, "duration");
    let rec = dir.join("d.rec");
    let pidfile = dir.join("pid");
    let t = std::time::Instant::now();
    // 1.5 s of a program of about 4 s: on a loaded machine Python's start alone can take most
    // of half a second, before the first ops are flushed (every 200 ms).
    let out = record_cmd(&target, &dir, &rec, &["--duration", "1.5"], "python3", 400)
        .env("FAKE_STEP_SLEEP", "0.01")
        .env("FAKE_PIDFILE", &pidfile)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{err}");
    assert!(err.contains("--duration reached"), "{err}");
    let pid = std::fs::read_to_string(&pidfile).unwrap();
    assert!(
        Path::new(&format!("/proc/{}", pid.trim())).exists(),
        "the program should still be running ({:?} in)",
        t.elapsed()
    );
    let j = report(&target, &rec).unwrap();
    let kernels = j["kernels"].as_u64().unwrap();
    assert!(kernels > 0 && kernels < 400 * 9 + 50, "{kernels}");
    assert_eq!(j["kernels_with_launch"], kernels);
    while Path::new(&format!("/proc/{}", pid.trim())).exists() {
        assert!(t.elapsed().as_secs() < 30, "the program did not end");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A driver call that a runtime call makes under the runtime call's correlation id (CUPTI's
/// way) is not sent again; one under an id of its own is. Either way every kernel finds its
/// launch and its stack.
#[test]
fn nested_driver_calls_are_sent_only_under_an_id_of_their_own() {
    let target = build();
    let (launched, syncs) = (20 * 9 + 50, 20);
    for (own, apis) in [("0", launched + syncs), ("1", 2 * launched + syncs)] {
        let dir = fake_cuda(&target, &format!("nested{own}"));
        let (log, j) = run(&target, &dir, &[("FAKE_DRIVER_OWN_CORR", own)]);
        let j = j.unwrap();
        assert!(log.contains(&format!(" {apis} API calls and ")), "{log}");
        assert_eq!(j["kernels_with_launch"], launched, "{log}");
        assert_eq!(j["kernels_with_stack"], launched, "{log}");
    }
}

/// GAPTOP_CUPTI_ATTRS reaches CUPTI before tracing starts, each value at the size CUPTI reads
/// it; what CUPTI refuses and what cannot be read are said, and collection goes on.
#[test]
fn cupti_attributes_are_set_or_refused_out_loud() {
    let target = build();
    let dir = fake_cuda(&target, "attrs");
    let (log, j) = run(
        &target,
        &dir,
        &[
            ("FAKE_ATTR_LOG", "1"),
            (
                "GAPTOP_CUPTI_ATTRS",
                "device_buffer=32m,host_pinned=1,per_thread=0,device_buffer_prealloc=300,speed=11",
            ),
        ],
    );
    // Attribute numbers as in cupti_activity.h: DEVICE_BUFFER_SIZE 0, HOST_PINNED 8,
    // PER_THREAD_ACTIVITY_BUFFER 9; 5 is the zeroed buffers the collector always asks for.
    for line in [
        "FAKE attribute 5=1",
        "FAKE attribute 0=33554432",
        "FAKE attribute 8=1",
        "FAKE attribute 9=0",
    ] {
        assert!(log.contains(line), "{line} missing:\n{log}");
    }
    assert!(
        log.contains("CUPTI refused device_buffer_prealloc=300"),
        "{log}"
    );
    assert!(log.contains("cannot read \"speed=11\""), "{log}");
    assert!(!log.contains("FAKE attribute 6="), "{log}");
    let j = j.unwrap();
    assert_eq!(j["kernels"], 20 * 9 + 50, "{log}");
    assert_eq!(j["kernels_with_stack"], 20 * 9 + 50, "{log}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program's NVTX ranges (pushed and popped through the fake's NVTX, which reaches CUPTI
/// because `gaptop record` points NVTX_INJECTION64_PATH at libcupti): each launch's stack starts
/// with the ranges around it (`step`, then `rope` for the rope kernels), the worker thread's
/// launches have none, and the `step` ranges are the capture's steps, found without a name and
/// by it. With GAPTOP_NVTX=0 there are none.
#[test]
fn nvtx_ranges_are_frames_of_their_launches_and_the_steps() {
    let target = build();
    let dir = fake_cuda(&target, "nvtx");
    let (log, j) = run(&target, &dir, &[("FAKE_NVTX", "1")]);
    let j = j.unwrap();
    assert!(log.contains(", 40 NVTX ranges from 1 process"), "{log}");
    assert_eq!(j["kernels_with_stack"], 230, "{log}");
    assert_eq!(j["steps"]["source"], "range", "{}", j["steps"]);
    assert_eq!(j["steps"]["name"], "step");
    assert_eq!(j["steps"]["count"], 20);
    let stacks: Vec<Vec<String>> = j["top_stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            s["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| {
                    let f = f.as_str().unwrap();
                    // Python frames by function: `.../fakegpu.py(31): rope` reads `rope()`.
                    match StackFrame::parse(f).python() {
                        Some(p) => format!("{}()", p.function),
                        None => f.to_string(),
                    }
                })
                .collect()
        })
        .collect();
    for want in [
        &["step", "rope", "<module>()", "step()", "rope()"][..],
        &["step", "<module>()", "step()", "attention()"],
        &[
            "Thread._bootstrap()",
            "Thread._bootstrap_inner()",
            "Thread.run()",
            "worker()",
        ],
    ] {
        assert!(
            stacks
                .iter()
                .any(|s| s.len() >= want.len() && s.iter().zip(want).all(|(a, b)| a == b)),
            "{want:?} not in {stacks:?}"
        );
    }
    let rec = dir.join("fake.rec");
    let out = Command::new(target.join("gaptop"))
        .args(["report", "--format", "json", "--step", "step"])
        .arg(&rec)
        .output()
        .unwrap();
    let by_name: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(by_name["steps"]["count"], 20, "{}", by_name["steps"]);

    let (log, j) = run(&target, &dir, &[("FAKE_NVTX", "1"), ("GAPTOP_NVTX", "0")]);
    let j = j.unwrap();
    assert!(!log.contains("NVTX ranges"), "{log}");
    assert_ne!(j["steps"]["source"], "range", "{}", j["steps"]);
    assert!(
        !j["top_stacks"].to_string().contains("\"step\""),
        "{}",
        j["top_stacks"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

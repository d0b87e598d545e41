//! The probe of what gaptop adds to a CUDA call (`gaptop-probe`), as `gaptop record` runs it
//! before the program: once bare and once started as the program is (the collector injected,
//! the viewer's socket), its figures kept in the recording and taken out of the estimates; a
//! probe that cannot measure is said in the report, and changes nothing.

use std::path::Path;
use std::process::Command;

mod support;
use support::{build, fake_cuda, report, script};

/// `gaptop record -o REC` of the fake CUDA program (20 steps) with `env`.
fn record_cmd(target: &Path, dir: &Path, rec: &Path, env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(target.join("gaptop"));
    c.args(["record", "-o"])
        .arg(rec)
        .args(["--", "python3"])
        .arg(script())
        .arg("20")
        .env("CUDA_HOME", dir.join("cuda"))
        .env("GAPTOP_COLLECTOR", target.join("libgaptop_collector.so"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env_remove("LD_LIBRARY_PATH");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

/// `gaptop record` of the fake CUDA program with `env`; its output and JSON report.
fn record(target: &Path, dir: &Path, env: &[(&str, &str)]) -> (String, serde_json::Value) {
    let rec = dir.join("probe.rec");
    let out = record_cmd(target, dir, &rec, env).output().unwrap();
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{log}");
    (
        log.clone(),
        report(target, &rec).unwrap_or_else(|e| panic!("{e}\n{log}")),
    )
}

/// A stand-in for gaptop-probe: bare, a launch 4 µs and a sync 1 µs; started as the program
/// is (the collector injected and the viewer's socket given), 6 µs and 1.5 µs.
fn fake_probe(dir: &Path) -> std::path::PathBuf {
    executable(
        dir.join("probe.sh"),
        "#!/bin/sh\nif [ -n \"$CUDA_INJECTION64_PATH\" ] && [ -S \"$GAPTOP_SOCKET\" ]; then\n  echo \"PROBE launch_ns=6000 sync_ns=1500 rounds=15\"\nelse\n  echo \"PROBE launch_ns=4000 sync_ns=1000 rounds=15\"\nfi\n",
    )
}

/// `text` written to `p` as a script anyone may run.
fn executable(p: std::path::PathBuf, text: &str) -> std::path::PathBuf {
    std::fs::write(&p, text).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

#[test]
fn the_probes_figures_reach_the_estimates() {
    let target = build();
    let dir = fake_cuda(&target, "probe");
    let probe = fake_probe(&dir);
    let (log, j) = record(&target, &dir, &[("GAPTOP_PROBE", probe.to_str().unwrap())]);
    assert!(
        log.contains("the collector adds ~2000 ns to a kernel launch here (4000 ns bare"),
        "{log}"
    );
    // Two callbacks of 250 ns a sync, a record of 1.5 µs: 2.5 µs a runtime launch.
    let p = &j["replay"]["profiler"];
    assert_eq!(p["launch_ns"], 2_500, "{}", j["replay"]);
    assert!(p["step_ns"].as_i64().unwrap() > 0, "{p}");
    // The program ran as it does without the probe.
    assert!(log.contains("FAKE launched=230"), "{log}");
}

#[test]
fn a_probe_that_cannot_measure_is_said_and_changes_nothing() {
    let target = build();
    let dir = fake_cuda(&target, "noprobe");
    // The real probe, without a GPU here (without a CUDA driver, on a machine like CI's): one
    // line that says why, exit status 2.
    let out = Command::new(target.join("gaptop-probe")).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    let why = err
        .trim()
        .strip_prefix("gaptop-probe: ")
        .expect("its name first");
    if !std::path::Path::new("/dev/nvidiactl").exists() {
        assert_eq!(why, "no CUDA driver library (libcuda.so.1)");
    }

    for (env, why) in [
        (vec![], why),
        (vec![("GAPTOP_PROBE", "0")], "GAPTOP_PROBE=0"),
    ] {
        let (log, j) = record(&target, &dir, &env);
        let r = &j["replay"];
        assert!(r.get("profiler").is_none(), "{r}");
        assert_eq!(r["profiler_unmeasured"], why, "{r}");
        assert!(!log.contains("the collector adds"), "{log}");
        assert!(log.contains("FAKE launched=230"), "{log}");
    }
}

/// A signal while the probe runs ends `gaptop record` before the program starts: the probe's
/// run is killed, nothing is recorded, the file is left as it was, and the status is the
/// signal's.
#[test]
fn a_signal_during_the_probe_starts_nothing() {
    let target = build();
    let dir = fake_cuda(&target, "probesig");
    let slow = executable(
        dir.join("slow.sh"),
        "#!/bin/sh\nsleep 20\necho \"PROBE launch_ns=4000 sync_ns=1000\"\n",
    );
    let rec = dir.join("kept.rec");
    std::fs::write(&rec, b"kept").unwrap();
    let pidfile = dir.join("pid");
    let t = std::time::Instant::now();
    let (slow_s, pid_s) = (slow.to_str().unwrap(), pidfile.to_str().unwrap());
    let env = [("GAPTOP_PROBE", slow_s), ("FAKE_PIDFILE", pid_s)];
    let g = record_cmd(&target, &dir, &rec, &env)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    Command::new("kill")
        .args(["-TERM", &g.id().to_string()])
        .status()
        .unwrap();
    let out = g.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(t.elapsed().as_secs() < 10, "waited for the probe: {err}");
    assert!(err.contains("before the program started"), "{err}");
    assert!(err.contains("left as it was"), "{err}");
    assert_eq!(std::fs::read(&rec).unwrap(), b"kept");
    assert!(!pidfile.exists(), "the program started");
}

//! `gaptop record` (and `run --dormant`, `env`) without a GPU: the command runs with the
//! collector's environment; a recording with nothing in it leaves the file alone; signals
//! finalise the recording and leave no orphan; a missing collector or libcupti is named.

mod support;

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A fake CUDA install: gaptop only needs to find the files to start the command.
fn fake_cuda(dir: &std::path::Path) -> (PathBuf, PathBuf) {
    let cuda = dir.join("cuda");
    std::fs::create_dir_all(cuda.join("lib64")).unwrap();
    std::fs::write(cuda.join("lib64/libcupti.so.13"), b"").unwrap();
    let coll = dir.join("libgaptop_collector.so");
    std::fs::write(&coll, b"").unwrap();
    (cuda, coll)
}

#[test]
fn sigterm_finalises_the_recording_and_stops_the_program() {
    for sig in ["TERM", "INT", "HUP"] {
        let dir = support::tempdir(sig);
        let (cuda, coll) = fake_cuda(&dir);
        let out = dir.join("run.rec");
        std::fs::write(&out, b"a file the user keeps").unwrap();
        let marker = dir.join("child.pid");
        let mut g = Command::new(env!("CARGO_BIN_EXE_gaptop"))
            .args(["record", "-o"])
            .arg(&out)
            .arg("--")
            .args([
                "sh",
                "-c",
                &format!("echo $$ > {}; exec sleep 30", marker.display()),
            ])
            .env("CUDA_HOME", &cuda)
            .env("GAPTOP_COLLECTOR", &coll)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t = Instant::now();
        while !marker.exists() || std::fs::read_to_string(&marker).unwrap().trim().is_empty() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "the command did not start"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let child = std::fs::read_to_string(&marker).unwrap().trim().to_string();
        Command::new("kill")
            .args([&format!("-{sig}"), &g.id().to_string()])
            .status()
            .unwrap();
        let status = g.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut g.stderr.take().unwrap(), &mut err).unwrap();
        assert!(err.contains("stopped by signal"), "{sig}: {err}");
        // Ended by a signal, it exits as shells report one: 128 + its number.
        let code = match sig {
            "TERM" => 143,
            "INT" => 130,
            _ => 129,
        };
        assert_eq!(
            status.code(),
            Some(code),
            "{sig}: gaptop exits by itself: {err}"
        );
        // No process connected, so no GPU ops: nothing was recorded, and the file that was
        // there is left as it was, as said; no temporary file stays.
        assert!(
            err.contains("no process connected")
                && err.contains(&format!(
                    "nothing recorded, {} left as it was",
                    out.display()
                )),
            "{sig}: {err}"
        );
        assert_eq!(std::fs::read(&out).unwrap(), b"a file the user keeps");
        assert_eq!(support::names_in(&dir, ".part"), Vec::<String>::new());
        // No orphan: the program is gone.
        let t = Instant::now();
        while std::path::Path::new(&format!("/proc/{child}")).exists() {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            if stat.split_whitespace().nth(2) == Some("Z") {
                break; // a zombie awaiting its reaper is gone for practical purposes
            }
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "{sig}: program {child} left running"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[test]
fn missing_collector_or_cupti_is_named() {
    let dir = support::tempdir("missing");
    let out = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["record", "-o"])
        .arg(dir.join("x.rec"))
        .args(["--", "true"])
        .env("GAPTOP_COLLECTOR", dir.join("nope.so"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        err.contains("GAPTOP_COLLECTOR") && err.contains("nope.so"),
        "{err}"
    );

    let (_, coll) = fake_cuda(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["record", "-o"])
        .arg(dir.join("x.rec"))
        .args(["--", "true"])
        .env("GAPTOP_COLLECTOR", &coll)
        .env("CUDA_HOME", dir.join("no-cuda-here"))
        .env("LD_LIBRARY_PATH", "")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    // Without a driver (CI) the line says that first; either way it names the CUDA_HOME tried.
    assert!(
        (err.contains("libcupti was not found") || err.contains("no libcupti"))
            && err.contains("not in CUDA toolkits")
            && err.contains("no-cuda-here"),
        "{err}"
    );
    assert!(err.contains("gaptop demo"), "{err}");
}

/// `--native` reaches the profiled command as the collector's switch.
#[test]
fn native_option_reaches_the_collector() {
    let dir = support::tempdir("opts");
    let (cuda, coll) = fake_cuda(&dir);
    let seen = dir.join("env.txt");
    for (args, want) in [(&["--native"][..], "native=1"), (&[][..], "native=")] {
        let out = Command::new(env!("CARGO_BIN_EXE_gaptop"))
            .arg("record")
            .args(args)
            .arg("-o")
            .arg(dir.join("o.rec"))
            .arg("--")
            .args([
                "sh",
                "-c",
                &format!("echo \"native=$GAPTOP_NATIVE\" > {}", seen.display()),
            ])
            .env("CUDA_HOME", &cuda)
            .env("GAPTOP_COLLECTOR", &coll)
            .env_remove("GAPTOP_NATIVE")
            .output()
            .unwrap();
        let got = std::fs::read_to_string(&seen).unwrap_or_default();
        assert_eq!(
            got.trim(),
            want,
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The UI commands without a terminal on stdout (redirected, a job without a tty) exit at once
/// with one line that says so and what to use instead; `run` does not start the program.
#[test]
fn ui_commands_without_a_terminal_say_so_and_start_nothing() {
    let dir = support::tempdir("notty");
    let (cuda, coll) = fake_cuda(&dir);
    let marker = dir.join("started");
    let rec = support::asset("planted.rec");
    let cases: [(Vec<String>, &str); 3] = [
        (
            vec!["demo".into()],
            "`gaptop demo` shows its UI in a terminal, and stdout is not one; `gaptop demo --once` prints",
        ),
        (
            vec!["open".into(), rec.display().to_string()],
            "`gaptop report FILE` prints the analysis as text",
        ),
        (
            vec![
                "run".into(),
                "--log".into(),
                dir.join("p.log").display().to_string(),
                "--".into(),
                "touch".into(),
                marker.display().to_string(),
            ],
            "`gaptop record -o FILE -- CMD` records without one",
        ),
    ];
    for (args, says) in cases {
        let o = Command::new(env!("CARGO_BIN_EXE_gaptop"))
            .args(&args)
            .env("CUDA_HOME", &cuda)
            .env("GAPTOP_COLLECTOR", &coll)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(
            err.starts_with("gaptop: ") && err.contains(says),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?} wrote to stdout");
    }
    std::thread::sleep(Duration::from_millis(200));
    assert!(!marker.exists(), "`gaptop run` started the program");
}

/// `gaptop demo --once` without a terminal (CI, a pipe) plays the sample at once and prints the
/// UI's screen at its end, $COLUMNS×$LINES (120×40 when they are unset or not sizes), and
/// exits 0; `--loop` with it is a usage error.
#[test]
fn demo_once_without_a_terminal_prints_its_last_screen() {
    for (cols, lines, w, h) in [
        (None, None, 120, 40),
        (Some("100"), Some("30"), 100, 30),
        (Some("wide"), Some("0"), 120, 40),
    ] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gaptop"));
        c.args(["demo", "--once"]).stdin(Stdio::null());
        c.env_remove("COLUMNS").env_remove("LINES");
        if let (Some(cols), Some(lines)) = (cols, lines) {
            c.env("COLUMNS", cols).env("LINES", lines);
        }
        let t = Instant::now();
        let o = c.output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            o.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        assert_eq!(out.lines().count(), h, "{out}");
        assert!(out.lines().all(|l| l.chars().count() <= w), "{out}");
        // Drawn the full width: the frames' corners end on the last column.
        assert!(out.lines().any(|l| l.chars().count() == w), "{out}");
        // The end of the recording, its steps found and its panes filled.
        assert!(out.contains("ENDED (demo finished)"), "{out}");
        assert!(out.contains("25 steps"), "{out}");
        assert!(out.contains("Conv1D.forward"), "{out}");
        assert!(out.contains("What to fix"), "{out}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["demo", "--once", "--loop"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty());
}

/// A pip install: `gaptop` in an environment's bin/, the collector in its site-packages'
/// `gaptop` package, libcupti in that environment's NVIDIA packages (nvidia/cuda_cupti/lib, as
/// CUDA 12's PyTorch brings it, or nvidia/cu13/lib): both found with no variable set. Without
/// the collector in the package, one line names where gaptop looked.
#[test]
fn a_pip_install_finds_its_collector_and_nvidias_libcupti() {
    let dir = support::tempdir("pipenv");
    let venv = dir.join("venv");
    let sp = venv.join("lib/python3.12/site-packages");
    std::fs::create_dir_all(venv.join("bin")).unwrap();
    std::fs::create_dir_all(sp.join("gaptop")).unwrap();
    let exe = venv.join("bin/gaptop");
    let bin = env!("CARGO_BIN_EXE_gaptop");
    if std::fs::hard_link(bin, &exe).is_err() {
        std::fs::copy(bin, &exe).unwrap();
    }
    let coll = sp.join("gaptop/libgaptop_collector.so");
    std::fs::write(&coll, b"").unwrap();
    let bare = |args: &[&str]| {
        Command::new(&exe)
            .args(args)
            .env_remove("GAPTOP_COLLECTOR")
            .env_remove("CUDA_HOME")
            .env_remove("CUDA_PATH")
            .env_remove("LD_LIBRARY_PATH")
            .env_remove("NVTX_INJECTION64_PATH")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    for pkg in ["nvidia/cuda_cupti/lib", "nvidia/cu13/lib"] {
        let lib = sp.join(pkg);
        std::fs::create_dir_all(&lib).unwrap();
        std::fs::write(lib.join("libcupti.so.13"), b"").unwrap();
        let o = bare(&["env"]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let var = |k: &str| {
            out.lines()
                .find_map(|l| l.strip_prefix(&format!("{k}=")))
                .unwrap_or_else(|| panic!("no {k} in {out}"))
                .to_string()
        };
        assert_eq!(PathBuf::from(var("CUDA_INJECTION64_PATH")), coll, "{out}");
        let first = var("LD_LIBRARY_PATH")
            .split(':')
            .next()
            .unwrap()
            .to_string();
        assert_eq!(PathBuf::from(first), lib, "{pkg}: {out}");
        std::fs::remove_dir_all(sp.join("nvidia")).unwrap();
    }
    std::fs::remove_file(&coll).unwrap();
    let lib = sp.join("nvidia/cu13/lib");
    std::fs::create_dir_all(&lib).unwrap();
    std::fs::write(lib.join("libcupti.so.13"), b"").unwrap();
    let o = bare(&["record", "-o", "x.rec", "--", "true"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("libgaptop_collector.so (the collector) is missing"),
        "{err}"
    );
    assert!(err.contains(&exe.display().to_string()), "{err}");
    assert!(
        err.contains(&format!("not in {}", sp.join("gaptop").display())),
        "{err}"
    );
}

/// `gaptop record -o OUT -- CMD` with the fake CUDA install: its status and stderr.
fn record(dir: &std::path::Path, out: &std::path::Path, cmd: &[&str]) -> (Option<i32>, String) {
    let (cuda, coll) = fake_cuda(dir);
    let o = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["record", "-o"])
        .arg(out)
        .arg("--")
        .args(cmd)
        .env("CUDA_HOME", &cuda)
        .env("GAPTOP_COLLECTOR", &coll)
        .output()
        .unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A command that cannot start is said in one line, and leaves no recording behind: a file
/// that was there stays as it was.
#[test]
fn a_command_that_cannot_start_leaves_no_file() {
    let dir = support::tempdir("nostart");
    let out = dir.join("run.rec");
    let (code, err) = record(&dir, &out, &["/nonexistent/program"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot start /nonexistent/program"), "{err}");
    assert!(err.contains("run.rec not written"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(!out.exists(), "an empty recording was left: {err}");

    std::fs::write(&out, b"kept").unwrap();
    let (code, err) = record(&dir, &out, &["/nonexistent/program"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("run.rec left as it was"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"kept");
    assert_eq!(support::names_in(&dir, ".part"), Vec::<String>::new());
}

/// A command that never touches CUDA records nothing: the file is left as it was (or never
/// made), one line says so, and the status is not 0 (the command's own when it failed).
#[test]
fn a_command_without_cuda_leaves_the_file_alone() {
    let dir = support::tempdir("nocuda");
    let out = dir.join("x.rec");
    std::fs::write(&out, b"yesterday's recording").unwrap();
    let (code, err) = record(&dir, &out, &["true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("no process connected: did the command use CUDA?; nothing recorded, ")
            && err.contains("x.rec left as it was"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"yesterday's recording");

    let (code, err) = record(&dir, &out, &["sh", "-c", "exit 3"]);
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("the command ended: exit status 3"), "{err}");
    assert_eq!(std::fs::read(&out).unwrap(), b"yesterday's recording");

    let fresh = dir.join("fresh.rec");
    let (code, err) = record(&dir, &fresh, &["true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("fresh.rec not written"), "{err}");
    assert!(!fresh.exists());
    assert_eq!(support::names_in(&dir, ".part"), Vec::<String>::new());
}

/// `run --dormant` whose control folder the collector will refuse (open to others, or another
/// user's) says why `gaptop attach` cannot reach the program instead of telling the user to
/// run it; a folder of the user's gets the usual line.
#[test]
fn dormant_with_a_refused_control_folder_says_why_attach_cannot_work() {
    use std::os::unix::fs::PermissionsExt;
    let dir = support::tempdir("dormant");
    let (cuda, coll) = fake_cuda(&dir);
    let run = |ctl: &std::path::Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_gaptop"))
            .args(["run", "--dormant", "--", "true"])
            .env("CUDA_HOME", &cuda)
            .env("GAPTOP_COLLECTOR", &coll)
            .env("GAPTOP_CONTROL_DIR", ctl)
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let loose = dir.join("loose");
    std::fs::create_dir(&loose).unwrap();
    std::fs::set_permissions(&loose, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut refused = vec![(loose, "has mode 755")];
    if nix::unistd::getuid().is_root() {
        // Made by another user (nobody).
        let theirs = dir.join("theirs");
        std::fs::create_dir(&theirs).unwrap();
        std::fs::set_permissions(&theirs, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        refused.push((theirs, "is owned by uid 65534"));
    }
    for (ctl, why) in refused {
        let err = run(&ctl);
        assert!(
            err.contains("true runs, but its collector cannot be attached to")
                && err.contains(why)
                && err.contains("set GAPTOP_CONTROL_DIR to a folder of yours"),
            "{err}"
        );
        assert!(!err.contains("gaptop attach "), "{err}");
    }
    let err = run(&dir.join("mine"));
    assert!(err.contains("`gaptop attach "), "{err}");
}

/// `gaptop env` on a machine without libcupti (its lines are often for another machine)
/// still prints every variable, with libcupti's folder guessed, and warns on stderr.
#[test]
fn env_without_libcupti_prints_the_variables_and_warns() {
    let dir = support::tempdir("env");
    let (_, coll) = fake_cuda(&dir);
    let o = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["env", "--job", "decode"])
        .env("GAPTOP_COLLECTOR", &coll)
        .env("CUDA_HOME", dir.join("no-cuda-here"))
        .env("LD_LIBRARY_PATH", "")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let guess = dir.join("no-cuda-here/extras/CUPTI/lib64");
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        [
            format!("CUDA_INJECTION64_PATH={}", coll.display()),
            format!("LD_LIBRARY_PATH={}", guess.display()),
            "GAPTOP_DORMANT=1".into(),
            "GAPTOP_JOB=decode".into(),
        ]
    );
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("no libcupti found here") && err.contains("is a guess"),
        "{err}"
    );
}

/// `gaptop env --shell` puts libcupti's folder before the shell's own library path, which it
/// keeps (and adds no stray `:` where there is none), quoted for a folder holding a space or a
/// quote: checked by a shell evaluating the lines.
#[test]
fn env_shell_prepends_to_the_library_path_and_quotes_it() {
    let dir = support::tempdir("env-shell");
    let (cuda, coll) = fake_cuda(&dir);
    let odd = dir.join("it's a cuda");
    std::fs::rename(&cuda, &odd).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["env", "--shell"])
        .env("GAPTOP_COLLECTOR", &coll)
        .env("CUDA_HOME", &odd)
        .env("LD_LIBRARY_PATH", "")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let lib = odd.join("lib64").display().to_string();
    for (before, after) in [
        (Some("/mine:/other dir"), format!("{lib}:/mine:/other dir")),
        (None, lib.clone()),
        (Some(""), lib.clone()),
    ] {
        let mut sh = Command::new("sh");
        sh.arg("-c")
            .arg(format!("{out}\nprintf '%s' \"$LD_LIBRARY_PATH\""))
            .env_remove("LD_LIBRARY_PATH");
        if let Some(b) = before {
            sh.env("LD_LIBRARY_PATH", b);
        }
        let got = sh.output().unwrap();
        assert_eq!(String::from_utf8_lossy(&got.stdout), after, "{out}");
    }
    // The other lines stay plain exports.
    assert!(
        out.contains(&format!(
            "export CUDA_INJECTION64_PATH='{}'",
            coll.display()
        )),
        "{out}"
    );
}

/// `gaptop run` where libcupti is missing says so in one line, before it needs a terminal:
/// whether the driver is missing too, every folder it looked in whole (no path cut in its
/// middle), and the commands that work without a GPU.
#[test]
fn run_without_libcupti_says_what_is_missing_and_what_works_without_a_gpu() {
    let dir = support::tempdir("nocupti");
    let (_, coll) = fake_cuda(&dir);
    let home = dir.join("no-cuda-here");
    let o = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["run", "--", "true"])
        .env("GAPTOP_COLLECTOR", &coll)
        .env("CUDA_HOME", &home)
        .env("LD_LIBRARY_PATH", "/nowhere/one:/nowhere/two")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let driver = std::path::Path::new("/proc/driver/nvidia").exists()
        || std::path::Path::new("/dev/nvidiactl").exists();
    assert_eq!(err.contains("no NVIDIA driver or GPU,"), !driver, "{err}");
    assert!(err.contains("libcupti"), "{err}");
    assert!(!err.contains('…'), "nothing is cut: {err}");
    assert!(
        err.contains(&format!("not in CUDA toolkits {}", home.display())),
        "{err}"
    );
    assert!(
        err.contains("/nowhere/one") || err.contains(" more"),
        "{err}"
    );
    for w in [
        "`gaptop demo`",
        "`gaptop open FILE`",
        "`gaptop report FILE`",
    ] {
        assert!(err.contains(w), "{w}: {err}");
    }
    assert!(!err.contains("stdout is not one"), "{err}");
}

/// An output that is one of the command's inputs (its script, or any file it is given that
/// is not a recording) is refused before the command starts, in one line; the file is left
/// as it was. A recording given to the command may be replaced.
#[test]
fn an_output_that_is_an_input_of_the_command_is_refused() {
    let dir = support::tempdir("ownscript");
    let script = dir.join("script.py");
    let marker = dir.join("ran");
    std::fs::write(
        &script,
        format!("open({:?}, 'w')\n", marker.display().to_string()),
    )
    .unwrap();
    let py = script.display().to_string();
    for cmd in [
        vec!["python3", py.as_str()],
        vec!["python3", "-c", "pass", py.as_str()],
    ] {
        let (code, err) = record(&dir, &script, &cmd);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("script.py: is an input"), "{err}");
        assert!(err.contains("script.py left as it was"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    }
    let data = dir.join("data.txt");
    std::fs::write(&data, b"data").unwrap();
    let (code, err) = record(&dir, &data, &["cat", &format!("--file={}", data.display())]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("data.txt: is an input"), "{err}");
    assert_eq!(std::fs::read(&data).unwrap(), b"data");
    assert!(!marker.exists(), "the command ran");
    assert!(std::fs::read_to_string(&script)
        .unwrap()
        .starts_with("open("));
    // A recording is no input: the command runs (and, recording nothing, leaves it).
    let old = dir.join("old.rec");
    std::fs::write(&old, b"GAPTOPR5").unwrap();
    let (code, err) = record(&dir, &old, &["sh", "-c", "true", old.to_str().unwrap()]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no process connected"), "{err}");
}

/// `/dev/shm` is a tmpfs, not a device: a recording there is written beside the file and
/// renamed, so one that records nothing leaves the file as it was. A dangling link as the
/// output is followed (or refused where its folder does not exist), never replaced.
#[test]
fn dev_shm_and_dangling_links_are_outputs_like_any_file() {
    let dir = support::tempdir("shm");
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        let out = shm.join(format!("gaptop-record-{}.rec", std::process::id()));
        std::fs::write(&out, b"kept").unwrap();
        let (code, err) = record(&dir, &out, &["true"]);
        assert_eq!(code, Some(1), "{err}");
        assert!(err.contains("left as it was"), "{err}");
        assert_eq!(std::fs::read(&out).unwrap(), b"kept");
        let _ = std::fs::remove_file(&out);
    }
    let link = dir.join("link.rec");
    std::os::unix::fs::symlink("no/such/folder/x.rec", &link).unwrap();
    let (code, err) = record(&dir, &link, &["true"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("whose folder does not exist"), "{err}");
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
}

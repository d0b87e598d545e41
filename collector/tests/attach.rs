//! Dormant collectors, attached to and detached from mid-run, without a GPU: the Python
//! program of fakegpu.py plays a CUDA one against the fake libcupti under
//! `gaptop run --dormant`, and `gaptop capture` / `gaptop attach` reach it through its control
//! socket. While dormant the fake reports CUPTI untouched (nothing subscribed, enabled or even
//! initialized); an attach collects every launch with its name and stack; a detach finalizes
//! CUPTI at an API exit; the program's result never changes.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod support;
use support::{build, fake_cuda, script};

/// A program under `gaptop run --dormant`, with its own control folder.
struct Program {
    child: Option<Child>,
    dir: PathBuf,
    target: PathBuf,
    pid: u32,
}

/// The environment every gaptop and program of a test shares: the fake CUDA, the collector,
/// the test's own control folder.
fn env(c: &mut Command, target: &Path, dir: &Path) {
    c.env("CUDA_HOME", dir.join("cuda"))
        .env("GAPTOP_COLLECTOR", target.join("libgaptop_collector.so"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env("GAPTOP_CONTROL_DIR", dir.join("ctl"))
        .env_remove("LD_LIBRARY_PATH")
        .env_remove("XDG_RUNTIME_DIR");
}

/// What the fake says of CUPTI while a viewer is attached: subscribed, four callbacks enabled.
const ATTACHED: (u32, u32) = (1, 4);

/// Every wait of these tests is on an event (a step written, CUPTI's state changed, a process
/// ended); the bound only turns a hang into a failure, and is far above what a loaded machine
/// needs.
const BOUND: Duration = Duration::from_secs(120);

impl Program {
    /// Starts fakegpu.py, dormant, with steps of about 10 ms until the test stops it
    /// ([`Program::finish`]): it can never end under a slow test. Waits for its first step.
    fn start(tag: &str, extra: &[(&str, &str)]) -> Program {
        let target = build();
        let dir = fake_cuda(&target, tag);
        let mut c = Command::new(target.join("gaptop"));
        c.args(["run", "--dormant", "--", "python3"])
            .arg(script())
            .arg("100000000")
            .env("FAKE_STEP_SLEEP", "0.01")
            .env("FAKE_STATUS", dir.join("status"))
            .env("FAKE_PIDFILE", dir.join("pid"))
            .env("FAKE_STOP", dir.join("stop"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        env(&mut c, &target, &dir);
        for (k, v) in extra {
            c.env(k, v);
        }
        let child = c.spawn().unwrap();
        let mut p = Program {
            child: Some(child),
            dir,
            target,
            pid: 0,
        };
        p.wait_step(1);
        p.pid = std::fs::read_to_string(p.dir.join("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(p.pid, p.child.as_ref().unwrap().id(), "run --dormant execs");
        p
    }

    /// (step, CUPTI attached, callbacks enabled) as the program last wrote them.
    fn status(&self) -> Option<(u32, u32, u32)> {
        let s = std::fs::read_to_string(self.dir.join("status")).ok()?;
        let v: Vec<u32> = s
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        (v.len() == 3).then(|| (v[0], v[1], v[2]))
    }

    fn wait_step(&self, n: u32) -> (u32, u32, u32) {
        let t = Instant::now();
        loop {
            if let Some(s) = self.status().filter(|s| s.0 >= n) {
                return s;
            }
            assert!(t.elapsed() < BOUND, "no step {n}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits until the program's steps say CUPTI is as `want` (attached, callbacks).
    fn wait_cupti(&self, want: (u32, u32)) -> (u32, u32, u32) {
        let t = Instant::now();
        loop {
            let s = self.status().unwrap();
            if (s.1, s.2) == want {
                return s;
            }
            assert!(t.elapsed() < BOUND, "CUPTI stayed {s:?}, wanted {want:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn gaptop(&self) -> Command {
        let mut c = Command::new(self.target.join("gaptop"));
        env(&mut c, &self.target, &self.dir);
        c
    }

    /// `gaptop capture TARGET --duration D -o DIR/REC`.
    fn capture_cmd(&self, target: &str, duration: &str, rec: &str) -> Command {
        let mut c = self.gaptop();
        c.args(["capture", target, "--duration", duration, "-o"])
            .arg(self.dir.join(rec));
        c
    }

    /// `gaptop capture PID --duration D -o DIR/REC`, its status and stderr: for captures that
    /// are refused before they attach.
    fn capture(&self, rec: &str, duration: &str) -> (bool, String) {
        let out = self
            .capture_cmd(&self.pid.to_string(), duration, rec)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// `gaptop capture TARGET -o DIR/REC` held open until the program has made `steps` steps
    /// with CUPTI attached, then stopped with SIGINT: a window of whole steps however slow
    /// the machine. Its exit code and stderr.
    fn capture_steps(&self, target: &str, rec: &str, steps: u32) -> (Option<i32>, String) {
        let v = self
            .capture_cmd(target, "3600s", rec)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let at = self.wait_attached(&v);
        self.wait_step(at + steps);
        stop(&v);
        let out = v.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Waits until viewer `v` is attached (the program's steps say so); the step then.
    fn wait_attached(&self, v: &Child) -> u32 {
        let t = Instant::now();
        loop {
            if let Some(s) = self.status().filter(|s| (s.1, s.2) == ATTACHED) {
                return s.0;
            }
            let gone = !std::path::Path::new(&format!("/proc/{}", v.id())).exists()
                || std::fs::read_to_string(format!("/proc/{}/stat", v.id()))
                    .is_ok_and(|s| s.rsplit_once(") ").is_some_and(|r| r.1.starts_with('Z')));
            assert!(!gone, "the viewer ended before it attached");
            assert!(t.elapsed() < BOUND, "never attached: {:?}", self.status());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Stops the program after its current step; its output once it ended (and what
    /// `gaptop run --dormant` said).
    fn finish(&mut self) -> String {
        std::fs::write(self.dir.join("stop"), b"").unwrap();
        let out = self.child.take().unwrap().wait_with_output().unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        text
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Asks viewer `v` to stop, as Ctrl-C would: it detaches and writes what it got.
fn stop(v: &Child) {
    let ok = Command::new("kill")
        .args(["-INT", &v.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// A viewer stopped by [`stop`] ended as it should: it kept its recording and exits as a
/// SIGINT's end is reported (130).
fn assert_stopped(code: Option<i32>, err: &str) {
    assert_eq!(code, Some(130), "{err}");
    assert!(
        err.contains("stopped by signal 2; detaching, and keeping what arrived"),
        "{err}"
    );
}

fn report(target: &Path, rec: &Path) -> serde_json::Value {
    support::report(target, rec).unwrap_or_else(|e| panic!("{e}"))
}

/// The result line the program prints: its CUDA calls' results, the fake's state at the end.
fn result_of(out: &str) -> String {
    let line = out
        .lines()
        .find(|l| l.starts_with("FAKE launched="))
        .unwrap_or_else(|| panic!("no result line in {out}"));
    line.split_whitespace()
        .find(|f| f.starts_with("result="))
        .unwrap()
        .to_string()
}

/// The steps the program made, as its result line says.
fn steps_of(out: &str) -> u32 {
    let f = out
        .split_whitespace()
        .find_map(|f| f.strip_prefix("steps="))
        .unwrap_or_else(|| panic!("no steps in {out}"));
    f.parse().unwrap()
}

/// The same program's result without any collector loaded, for as many steps as `out` says
/// it made.
fn bare_result(dir: &Path, out: &str) -> String {
    let steps = steps_of(out);
    let out = Command::new("python3")
        .arg(script())
        .arg(steps.to_string())
        .env("FAKE_NO_COLLECTOR", "1")
        .env("LD_LIBRARY_PATH", dir.join("cuda/lib64"))
        .output()
        .unwrap();
    assert!(out.status.success());
    result_of(&String::from_utf8_lossy(&out.stdout))
}

/// Every kernel of a capture has its launch call and its Python stack, and the stacks name the
/// script's functions: what a viewer attached mid-run gets is complete. But for a launch that
/// straddles the attach or the detach (the call entered before its callbacks were on, or
/// returned after they went off, while its kernel's record was collected): at most one at
/// each end, which the report counts as a kernel without its launch (seen once in a soak run
/// beside a busy core: 211 of 212).
fn assert_complete(j: &serde_json::Value, err: &str) {
    let k = j["kernels"].as_u64().unwrap();
    assert!(k >= 9, "{k} kernels\n{err}");
    for with in ["kernels_with_launch", "kernels_with_stack"] {
        let n = j[with].as_u64().unwrap();
        assert!(n <= k && n + 2 >= k, "{with} {n} of {k}\n{err}");
    }
    let frames: Vec<String> = j["top_stacks"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["frames"].as_array().unwrap().clone())
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    for want in [
        "): rope",
        "): attention",
        "): step",
        "void rope_kernel<float>",
    ] {
        assert!(
            frames.iter().any(|f| f.contains(want)),
            "{want} in {frames:?}"
        );
    }
}

/// Dormant, the program runs with CUPTI untouched; an attach mid-run collects its ops with
/// names and stacks; a detach finalizes CUPTI at an API exit and the program is dormant
/// again; a second attach is as complete as the first; the result is the bare program's.
/// Every step of it waits on an event (a step made, CUPTI's state changed), never on a
/// timer, so that a loaded machine only makes it slower.
#[test]
fn attach_mid_run_detach_and_attach_again() {
    let mut p = Program::start("attach", &[]);
    // Several steps in, still nothing of CUPTI in the process.
    let s = p.wait_step(20);
    assert_eq!((s.1, s.2), (0, 0), "dormant: {s:?}");
    let pid = p.pid.to_string();
    let (code, err) = p.capture_steps(&pid, "a.rec", 30);
    assert_stopped(code, &err);
    assert!(err.contains("detached; pid"), "{err}");
    let a = report(&p.target, &p.dir.join("a.rec"));
    assert_complete(&a, &err);
    // The CPU samples name the script's Python functions (the collector wrote its frame
    // layout beside the attaching viewer's socket), where samples were taken: the samples of
    // the script's main thread that hold one of its frames. On a loaded machine the viewer's
    // reads can fall behind (and the script sleeps most of the time), so some are asked for,
    // not all of them.
    let st = gaptop_core::sources::load_path(&p.dir.join("a.rec"), usize::MAX).unwrap();
    // No probe beside a running program's GPU work: the recording says why.
    let cost = st.launch_cost.as_ref().expect("a capture's Cost frame");
    assert!(cost.note.starts_with("not measured: attached"), "{cost:?}");
    assert_eq!(cost.launch_ns, 0);
    let (mut all, mut named) = (0usize, 0usize);
    for pr in &st.procs {
        for (&tid, samples) in &pr.samples {
            if tid != p.pid {
                continue;
            }
            for smp in samples {
                all += 1;
                named += st
                    .stacks
                    .frames(smp.stack)
                    .iter()
                    .any(|&f| st.names.get(f).contains("fakegpu.py("))
                    as usize;
            }
        }
    }
    eprintln!("{named} of {all} samples of the main thread name the script");
    if all >= 5 {
        assert!(named >= 1, "{named} of {all} samples name the script");
    }
    // Back to dormant: the fake says CUPTI was finalized, at an API exit.
    p.wait_cupti((0, 0));
    let again = p.dir.join("b.rec");
    let (code, err) = p.capture_steps(&pid, "b.rec", 20);
    assert_stopped(code, &err);
    let b = report(&p.target, &again);
    assert_complete(&b, &err);
    // Each attach is a window of its own: the second starts after the first ended.
    let a_end = a["origin_ns"].as_i64().unwrap() + a["window"]["to_ns"].as_i64().unwrap();
    assert!(b["origin_ns"].as_i64().unwrap() > a_end, "{a} {b}");
    p.wait_cupti((0, 0));
    let out = p.finish();
    assert!(out.contains("attached=0 finalizes=2/0"), "{out}");
    assert!(out.contains("callbacks=0"), "{out}");
    assert_eq!(result_of(&out), bare_result(&p.dir, &out), "{out}");
}

/// A detach that comes while the sender's own flush is still handing a buffer over keeps that
/// buffer's records: the fake's unforced flushes take their buffer and complete it a second
/// later, so the detach's flush almost always finds none; every kernel record the fake made
/// reaches the recording (but one, a launch that raced the detach).
#[test]
fn a_detach_during_a_slow_flush_keeps_its_records() {
    let mut p = Program::start("slowflush", &[("FAKE_FLUSH_DELAY_MS", "1000")]);
    let (code, err) = p.capture_steps(&p.pid.to_string(), "s.rec", 40);
    assert_stopped(code, &err);
    let j = report(&p.target, &p.dir.join("s.rec"));
    let out = p.finish();
    let made: u64 = out
        .split_whitespace()
        .find_map(|f| f.strip_prefix("kernel_records="))
        .unwrap_or_else(|| panic!("no kernel_records in {out}"))
        .parse()
        .unwrap();
    let got = j["kernels"].as_u64().unwrap();
    assert!(made >= 40 * 9, "{made} records made\n{out}");
    assert!(
        got <= made && got + 1 >= made,
        "{got} of {made} kernel records\n{err}"
    );
}

/// One viewer at a time: an attach while another is active is refused, naming it, and the
/// list says who is attached.
#[test]
fn a_second_attach_is_refused_naming_the_first() {
    let p = Program::start("second", &[]);
    let first = p
        .capture_cmd(&p.pid.to_string(), "3600s", "first.rec")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let at = p.wait_attached(&first);
    let (ok, err) = p.capture("second.rec", "1s");
    assert!(!ok, "{err}");
    let line = format!("already attached by gaptop capture (pid {})", first.id());
    assert!(err.contains(&line), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(
        !p.dir.join("second.rec").exists(),
        "no recording left behind"
    );
    let list = p.gaptop().arg("attach").output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    assert!(list.contains("attached by gaptop capture"), "{list}");
    assert!(list.contains("fakegpu.py"), "{list}");
    p.wait_step(at + 5);
    stop(&first);
    let out = first.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_stopped(out.status.code(), &err);
    let j = support::report(&p.target, &p.dir.join("first.rec"))
        .unwrap_or_else(|e| panic!("{e}\n{err}"));
    assert!(j["kernels"].as_u64().unwrap() > 0);
    // Once the first has gone, attaching works again, by the job's name too.
    p.wait_cupti((0, 0));
    let (code, err) = p.capture_steps("fakegpu.py", "third.rec", 5);
    assert_stopped(code, &err);
}

/// The viewer killed while attached: the program is never held up, its result is unchanged,
/// and its collector goes back to dormant, ready for the next attach.
#[test]
fn a_viewer_killed_while_attached_never_holds_the_program() {
    let mut p = Program::start("killed", &[]);
    let mut v = p
        .capture_cmd(&p.pid.to_string(), "3600s", "k.rec")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let at = p.wait_attached(&v);
    p.wait_step(at + 20);
    v.kill().unwrap();
    let _ = v.wait();
    // Its steps go on, not waiting for anyone (the bound is far above 30 steps of 10 ms).
    let at = p.status().unwrap().0;
    let t = Instant::now();
    p.wait_step(at + 30);
    assert!(t.elapsed() < Duration::from_secs(30), "held up");
    p.wait_cupti((0, 0));
    let (code, err) = p.capture_steps(&p.pid.to_string(), "after.rec", 20);
    assert_stopped(code, &err);
    assert_complete(&report(&p.target, &p.dir.join("after.rec")), &err);
    let out = p.finish();
    assert_eq!(result_of(&out), bare_result(&p.dir, &out), "{out}");
}

/// GAPTOP_DETACH=keep: a detach switches callbacks off and stays subscribed (no finalize); an
/// attach after it switches them back on.
#[test]
fn detach_can_keep_cupti_subscribed() {
    let mut p = Program::start("keep", &[("GAPTOP_DETACH", "keep")]);
    for rec in ["k1.rec", "k2.rec"] {
        let (code, err) = p.capture_steps(&p.pid.to_string(), rec, 20);
        assert_stopped(code, &err);
        assert_complete(&report(&p.target, &p.dir.join(rec)), &err);
        p.wait_cupti((1, 0));
    }
    let out = p.finish();
    assert!(out.contains("attached=1 finalizes=0/0"), "{out}");
}

/// Control folders and sockets open to others are refused, by the viewer and the collector,
/// each with one line saying why; with no program, `gaptop attach` says so and exits 1.
#[test]
fn control_sockets_open_to_others_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let p = Program::start("modes", &[]);
    let ctl = p.dir.join("ctl");
    let sock = ctl.join(format!("{}.fakegpu.py.sock", p.pid));
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (ok, err) = p.capture("x.rec", "300ms");
    assert!(!ok);
    assert!(err.contains("mode 666"), "{err}");
    assert!(err.contains("refused"), "{err}");
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&ctl, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = p.gaptop().arg("attach").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("mode 755"), "{err}");
    assert!(err.contains("no dormant program of yours runs"), "{err}");
    // A collector starting there refuses too, and its program runs unchanged.
    let out = Command::new("python3")
        .arg(script())
        .arg("3")
        .env(
            "CUDA_INJECTION64_PATH",
            p.target.join("libgaptop_collector.so"),
        )
        .env("LD_LIBRARY_PATH", p.dir.join("cuda/lib64"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env("GAPTOP_DORMANT", "1")
        .env("GAPTOP_CONTROL_DIR", &ctl)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("mode 755"), "{text}");
    assert!(
        text.contains("not collecting, the program runs unchanged"),
        "{text}"
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("FAKE launched=77"),
        "{text}"
    );
    std::fs::set_permissions(&ctl, std::fs::Permissions::from_mode(0o700)).unwrap();
    // Another user's folder (only root can make one here).
    if nix_is_root() {
        let other = p.dir.join("other");
        std::fs::create_dir(&other).unwrap();
        std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(&other, Some(65534), None).unwrap();
        let out = p
            .gaptop()
            .env("GAPTOP_CONTROL_DIR", &other)
            .arg("attach")
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(err.contains("owned by uid 65534, not by you"), "{err}");
    }
    // None at all.
    let empty = p.dir.join("empty");
    let out = p
        .gaptop()
        .env("GAPTOP_CONTROL_DIR", &empty)
        .arg("attach")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no dormant program"));
    let out = p.capture_cmd("nosuchjob", "1s", "n.rec").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no dormant program matches \"nosuchjob\"")
    );
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .is_some_and(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

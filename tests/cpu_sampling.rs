//! The CPU sampler on real children, from outside them: a C program built without frame
//! pointers (so its stacks unwind only through DWARF call-frame information) and Python
//! spinning in C code of the interpreter. Where perf events are refused, each test says why and
//! returns, unless GAPTOP_REQUIRE_PERF=1, when that fails it.
//!
//! The cost of sampling: `cargo test --test cpu_sampling -- --ignored --nocapture`.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use gaptop_core::sources::cpu::{CpuSample, SampleError, Sampler, SamplerConfig};

/// A directory of the test's own, removed when it ends.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        let d = std::env::temp_dir().join(format!("gaptop-cpu-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const SPINNER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* A few ms of arithmetic a call. */
__attribute__((noinline)) unsigned long planted_spin(unsigned long n) {
    unsigned long x = n;
    for (unsigned long i = 0; i < n; i++) {
        x = x * 6364136223846793005UL + 1442695040888963407UL;
        __asm__ volatile("" : "+r"(x));
    }
    return x;
}

/* Spins for `seconds`, or for `rounds` calls when rounds > 0. */
__attribute__((noinline)) unsigned long outer_caller(double seconds, long rounds, unsigned long n) {
    unsigned long acc = 0;
    double end = now() + seconds;
    for (long r = 0; rounds > 0 ? r < rounds : now() < end; r++) {
        acc ^= planted_spin(n);
        acc += (unsigned long)r;
    }
    return acc;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1.5;
    long rounds = argc > 2 ? atol(argv[2]) : 0;
    unsigned long n = argc > 3 ? strtoul(argv[3], 0, 10) : 2000000;
    double t0 = now();
    clock_t c0 = clock();
    unsigned long r = outer_caller(seconds, rounds, n);
    /* result, wall s, CPU s of the work */
    printf("%lu %.6f %.6f\n", r, now() - t0, (double)(clock() - c0) / CLOCKS_PER_SEC);
    return 0;
}
"#;

/// Builds the spinner without frame pointers, with DWARF call-frame information.
fn spinner(dir: &Path) -> PathBuf {
    let src = dir.join("spin.c");
    let exe = dir.join("spin");
    std::fs::write(&src, SPINNER).unwrap();
    let out = Command::new("cc")
        .args(["-O2", "-fomit-frame-pointer", "-g", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

fn realtime_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64
}

/// What one sampled run gave.
struct Run {
    samples: Vec<CpuSample>,
    /// CLOCK_REALTIME ns just before the spawn and just after the exit was seen.
    start: i64,
    end: i64,
    /// Time spent in `poll`, and in the slowest one.
    polling: Duration,
    slowest: Duration,
    stdout: String,
    lost: u64,
}

/// Runs `cmd` sampled, polling every 50 ms as a viewer would, until it exits. `None` where perf
/// events are refused (after saying why).
fn sampled(cmd: &mut Command, cfg: SamplerConfig) -> Option<Run> {
    let mut s = Sampler::new(cfg);
    let start = realtime_ns();
    let mut child = cmd
        .stdout(Stdio::piped())
        .spawn()
        .expect("the child starts");
    match s.watch(child.id()) {
        Ok(()) => {}
        Err(SampleError::Refused(why)) => {
            let _ = child.kill();
            let _ = child.wait();
            assert_eq!(s.refused(), Some(why.as_str()));
            assert!(s.poll().is_empty());
            assert!(
                std::env::var("GAPTOP_REQUIRE_PERF").as_deref() != Ok("1"),
                "{why}"
            );
            eprintln!("skipped: {why}");
            return None;
        }
        Err(e) => panic!("{e}"),
    }
    let mut samples = Vec::new();
    let (mut polling, mut slowest) = (Duration::ZERO, Duration::ZERO);
    let mut poll = |s: &mut Sampler, samples: &mut Vec<CpuSample>| {
        let t = Instant::now();
        samples.extend(s.poll());
        polling += t.elapsed();
        slowest = slowest.max(t.elapsed());
    };
    let status = loop {
        std::thread::sleep(Duration::from_millis(50));
        poll(&mut s, &mut samples);
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
    };
    let end = realtime_ns();
    poll(&mut s, &mut samples);
    assert!(status.success(), "{status}");
    assert_eq!(s.threads(), 0, "the ended threads are closed");
    if let Some(why) = s.degraded() {
        eprintln!("degraded: {why}");
    }
    let mut stdout = String::new();
    std::io::Read::read_to_string(&mut child.stdout.take().unwrap(), &mut stdout).unwrap();
    Some(Run {
        samples,
        start,
        end,
        polling,
        slowest,
        stdout,
        lost: s.lost(),
    })
}

/// The index of the first frame named `name`.
fn frame(s: &CpuSample, name: &str) -> Option<usize> {
    s.frames
        .iter()
        .position(|f| f == name || f.starts_with(&format!("{name} [")))
}

fn share(run: &Run, pred: impl Fn(&CpuSample) -> bool) -> f64 {
    run.samples.iter().filter(|s| pred(s)).count() as f64 / run.samples.len().max(1) as f64
}

/// Some samples, to read in a failure message.
fn some(run: &Run) -> String {
    run.samples
        .iter()
        .step_by(run.samples.len() / 8 + 1)
        .map(|s| format!("  {}\n", s.frames.join(" < ")))
        .collect()
}

fn report(what: &str, run: &Run) {
    let n = run.samples.len();
    eprintln!(
        "{what}: {n} samples, {} lost; poll: {:.1} µs a sample ({:.0} samples/s), slowest \
         {:.1} ms",
        run.lost,
        run.polling.as_secs_f64() * 1e6 / n.max(1) as f64,
        n as f64 / run.polling.as_secs_f64().max(1e-9),
        run.slowest.as_secs_f64() * 1e3,
    );
}

#[test]
fn a_c_program_without_frame_pointers_unwinds_through_its_callers() {
    let dir = TempDir::new("c");
    let exe = spinner(&dir.0);
    // About 1.5 s of CPU: 660 calls of 2.3 ms here.
    let Some(run) = sampled(
        Command::new(&exe).args(["0", "660"]),
        SamplerConfig::default(),
    ) else {
        return;
    };
    report("C spinner", &run);
    let n = run.samples.len();
    assert!(
        n >= 300,
        "{n} samples in about 1.5 s of CPU at 1 kHz\n{}",
        some(&run)
    );
    let leaf = share(&run, |s| frame(s, "planted_spin").is_some());
    assert!(
        leaf >= 0.8,
        "planted_spin in {leaf:.2} of samples\n{}",
        some(&run)
    );
    let both = share(&run, |s| {
        matches!(
            (frame(s, "planted_spin"), frame(s, "outer_caller")),
            (Some(a), Some(b)) if a < b
        )
    });
    assert!(
        both >= 0.8,
        "planted_spin < outer_caller in {both:.2}\n{}",
        some(&run)
    );
    let to_main = share(
        &run,
        |s| matches!((frame(s, "outer_caller"), frame(s, "main")), (Some(a), Some(b)) if a < b),
    );
    assert!(
        to_main >= 0.8,
        "outer_caller < main in {to_main:.2}\n{}",
        some(&run)
    );
    let pid = run.samples[0].pid;
    for s in &run.samples {
        assert_eq!((s.pid, s.tid), (pid, pid));
        assert!(
            run.start <= s.time_ns && s.time_ns <= run.end,
            "sample at {} outside the run {}..{}",
            s.time_ns,
            run.start,
            run.end
        );
    }
    assert!(run.samples.windows(2).all(|w| w[0].time_ns <= w[1].time_ns));
    // Frames are named as gaptop names native frames: `symbol [module]`.
    let spin = &run
        .samples
        .iter()
        .find(|s| frame(s, "planted_spin") == Some(0));
    assert_eq!(spin.unwrap().frames[0], "planted_spin [spin]");
}

/// The Python that `python3` on PATH runs (through a pyenv shim, say), or `None` without one.
fn python() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()?;
    let exe = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && !exe.is_empty()).then(|| exe.into())
}

#[test]
fn python_spinning_in_c_unwinds_into_the_interpreter_loop() {
    let Some(py) = python() else {
        eprintln!("skipped: no python3");
        return;
    };
    // About 1.5 s of CPU (110 µs a call here): a fixed amount of work rather than of time, so
    // that the interpreter's start and end keep their small share on a busy machine.
    let script = "import math\nfor _ in range(13000):\n    math.factorial(2000)\n";
    let Some(run) = sampled(
        Command::new(&py).args(["-c", script]),
        SamplerConfig::default(),
    ) else {
        return;
    };
    report(&format!("python ({})", py.display()), &run);
    let n = run.samples.len();
    assert!(n >= 300, "{n} samples\n{}", some(&run));
    let eval = share(&run, |s| frame(s, "_PyEval_EvalFrameDefault").is_some());
    let fact = share(&run, |s| {
        matches!(
            (frame(s, "math_factorial"), frame(s, "_PyEval_EvalFrameDefault")),
            (Some(a), Some(b)) if a < b
        )
    });
    eprintln!("_PyEval_EvalFrameDefault in {eval:.3}, math_factorial below it in {fact:.3}");
    assert!(
        eval >= 0.8,
        "_PyEval_EvalFrameDefault in {eval:.2}\n{}",
        some(&run)
    );
    assert!(run
        .samples
        .iter()
        .all(|s| run.start <= s.time_ns && s.time_ns <= run.end));
}

#[test]
fn a_process_that_is_gone_is_a_one_line_error() {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    let mut s = Sampler::new(SamplerConfig::default());
    match s.watch(pid) {
        Err(SampleError::Process(why)) => assert!(why.contains(&pid.to_string()), "{why}"),
        Err(SampleError::Refused(why)) => eprintln!("skipped: {why}"),
        Ok(()) => panic!("watched a process that is gone"),
    }
    assert!(s.poll().is_empty());
}

/// Perf events are refused for another user's process: the refusal is one line, said by
/// `watch` and `refused`, and sampling stays off. Only as a user without CAP_PERFMON (as root
/// it returns).
#[test]
fn a_refusal_is_one_line_and_sampling_stays_off() {
    if nix::unistd::geteuid().is_root() {
        eprintln!("skipped: root may sample any process");
        return;
    }
    let mut s = Sampler::new(SamplerConfig::default());
    // Process 1 belongs to root.
    match s.watch(1) {
        Err(SampleError::Refused(why)) => {
            eprintln!("refused: {why}");
            assert!(
                why.contains("perf_event_paranoid is") && !why.contains('\n'),
                "{why}"
            );
            assert_eq!(s.refused(), Some(why.as_str()));
        }
        other => panic!("{other:?}"),
    }
    let me = std::process::id();
    assert!(matches!(s.watch(me), Err(SampleError::Refused(_))));
    assert!(s.poll().is_empty());
}

/// The spinner's own measure of its work: (wall s, CPU s).
fn work_time(stdout: &str) -> (f64, f64) {
    let f: Vec<f64> = stdout
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    (f[0], f[1])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What sampling costs the program: the spinner's fixed work, bare and sampled, interleaved.
/// GAPTOP_COST_PERIOD_US and GAPTOP_COST_STACK set the sampler (1000 µs, 16384 bytes),
/// GAPTOP_COST_REPS the repetitions (7).
#[test]
#[ignore = "a benchmark: run with --ignored --nocapture"]
fn cost_of_sampling() {
    let var = |name, default| std::env::var(name).map_or(default, |v| v.parse().unwrap());
    let cfg = SamplerConfig {
        period_us: var("GAPTOP_COST_PERIOD_US", 1000),
        stack_bytes: var("GAPTOP_COST_STACK", 16384) as u32,
    };
    eprintln!("{cfg:?}");
    let dir = TempDir::new("cost");
    let exe = spinner(&dir.0);
    let args = ["0", "300", "2000000"];
    let (mut bare, mut with) = (Vec::new(), Vec::new());
    let (mut samples, mut polling) = (0, Duration::ZERO);
    for rep in 0..var("GAPTOP_COST_REPS", 7) {
        let out = Command::new(&exe).args(args).output().unwrap();
        bare.push(work_time(&String::from_utf8_lossy(&out.stdout)));
        let Some(run) = sampled(Command::new(&exe).args(args), cfg) else {
            return;
        };
        with.push(work_time(&run.stdout));
        samples += run.samples.len();
        polling += run.polling;
        eprintln!(
            "rep {rep}: bare {:?}, sampled {:?}, {} samples",
            bare[rep as usize],
            with[rep as usize],
            run.samples.len()
        );
    }
    let (bw, bc) = (
        median(bare.iter().map(|x| x.0).collect()),
        median(bare.iter().map(|x| x.1).collect()),
    );
    let (ww, wc) = (
        median(with.iter().map(|x| x.0).collect()),
        median(with.iter().map(|x| x.1).collect()),
    );
    eprintln!(
        "median work: bare {bw:.4} s wall, {bc:.4} s CPU; sampled {ww:.4} s wall, {wc:.4} s \
         CPU; ratio {:.4} wall, {:.4} CPU",
        ww / bw,
        wc / bc
    );
    eprintln!(
        "poll: {samples} samples in {:.3} s: {:.1} µs a sample",
        polling.as_secs_f64(),
        polling.as_secs_f64() * 1e6 / samples.max(1) as f64
    );
}

#[test]
fn a_sampler_can_move_to_the_thread_that_polls_it() {
    fn send<T: Send>() {}
    send::<Sampler>();
}

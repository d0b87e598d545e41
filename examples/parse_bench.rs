//! Import benchmark: generates Kineto-style traces, runs `gaptop report` on each in a child
//! process, and prints throughput (MB/s of JSON), peak memory against file size, and, where
//! Holistic Trace Analysis is installed, its time on the same file side by side.
//!
//! cargo build --release && cargo run --release --example parse_bench -- 1000000 10000000
//!
//! `--pairs N` (issue 18's import target) generates N GPU ops each with its launch call, two
//! events an op (a `cudaLaunchKernel` runtime event and a kernel event with Kineto's argument
//! set, one event a line, no flow events), times `gaptop report` on it in a child (best and
//! median of `REPEAT` runs, default 3, each child's own peak RSS), and measures in this
//! process the heap the store keeps per GPU op with its launch call: loaded from that file,
//! and live (the same ops and calls as wire records through `Ingest`, the path the live
//! socket takes), and the peak of the load itself (RSS above where it began); and the peak
//! RSS of a process that only loads it (`--load-only PATH`, what `gaptop report` holds before
//! its analysis).
//!
//! cargo run --release --example parse_bench -- --pairs 1000000
//!
//! `--short` makes the `--pairs` trace's argument sets short (a kernel's `device`, `stream` and
//! `correlation`, a call's `correlation`): fewer bytes an op, the same ops. `OLD=PATH` also
//! runs the gaptop binary at PATH on the same trace, interleaved with this build's runs, and
//! prints both (issue 32: side by side in one run).
//!
//! `--pairs-file PATH` measures a `--pairs` trace already written (`--generate`) instead.
//!
//! With no arguments it does both: rows of 1M and 10M events, then `--pairs 1000000`.
//! `--generate N PATH` only writes the `--pairs` trace of N ops to PATH (with `--short` before
//! it, the short one; bench/same_reports.sh reports on one).

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicIsize, Ordering::Relaxed};
use std::time::Instant;

use gaptop_wire as w;

/// The system allocator, counting the bytes allocated and not yet freed (what a store keeps
/// is the count's growth while it is built).
struct Counting;

static HEAP: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only the counter is added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            HEAP.fetch_add(l.size() as isize, Relaxed);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            HEAP.fetch_add(l.size() as isize, Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        HEAP.fetch_sub(l.size() as isize, Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            HEAP.fetch_add(new as isize - l.size() as isize, Relaxed);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn heap() -> isize {
    HEAP.load(Relaxed)
}

/// PyTorch-length kernel names, taken in turn.
const NAMES: [&str; 3] = [
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
    "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&)::{lambda(int)#1}>(int)",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
];

/// The `corr`-th GPU op of a generated trace (from 1): its launch call's start, the kernel's
/// start and duration (ns), and its name's index in [`NAMES`].
struct GenOp {
    corr: u64,
    api: u64,
    k0: u64,
    kd: u64,
    name: usize,
}

/// The ops of a generated trace, one every 10 to 14 µs.
fn gen_ops() -> impl Iterator<Item = GenOp> {
    let mut t: u64 = 5_109_306_000_000_000; // ns
    (1u64..).map(move |corr| {
        let op = GenOp {
            corr,
            api: t,
            k0: t + 6_000,
            kd: 1_200 + (corr % 7) * 300,
            name: (corr % 3) as usize,
        };
        t += 10_000 + (corr % 5) * 1_000;
        op
    })
}

/// The launch call's duration (4.733 µs).
const API_NS: u64 = 4_733;

fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

fn trace_file(path: &Path) -> std::io::Result<std::io::BufWriter<std::fs::File>> {
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    writeln!(f, "{{\n  \"schemaVersion\": 1,\n  \"traceEvents\": [")?;
    Ok(f)
}

fn end_trace(path: &Path, mut f: std::io::BufWriter<std::fs::File>) -> std::io::Result<u64> {
    writeln!(f, "\n  ],\n  \"traceName\": \"generated\"\n}}")?;
    f.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

/// Writes a trace with `n` events: per kernel, a runtime call, the kernel and a flow event,
/// with PyTorch-length kernel names and Kineto's argument sets, laid out as Kineto does.
fn generate(path: &Path, n: u64) -> std::io::Result<u64> {
    let mut f = trace_file(path)?;
    let mut written = 0u64;
    for op in gen_ops() {
        if written >= n {
            break;
        }
        let GenOp {
            corr, api, k0, kd, ..
        } = op;
        let sep = if written == 0 { "" } else { ",\n" };
        write!(f, "{sep}  {{\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1871, \"tid\": 1871,\n    \"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {corr}, \"cbid\": 211, \"correlation\": {corr}\n    }}\n  }}", us(api), us(API_NS))?;
        written += 1;
        if written < n {
            write!(f, ",\n  {{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{}\", \"pid\": 0, \"tid\": 7,\n    \"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {corr},      \"queued\": 0, \"device\": 0, \"context\": 1,      \"stream\": 7, \"correlation\": {corr},      \"registers per thread\": 44,      \"shared memory\": 0,      \"blocks per SM\": 0.007576,      \"warps per SM\": 0.060606,      \"grid\": [1, 1, 1],      \"block\": [256, 1, 1],      \"est. achieved occupancy %\": 0\n    }}\n  }}", NAMES[op.name], us(k0), us(kd))?;
            written += 1;
        }
        if written < n {
            write!(f, ",\n  {{\n    \"ph\": \"f\", \"id\": {corr}, \"pid\": 0, \"tid\": 7, \"ts\": {},\n    \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"\n  }}", us(k0))?;
            written += 1;
        }
    }
    end_trace(path, f)
}

/// Writes a trace of `ops` GPU ops each with its launch call: two events an op, one a line
/// (the densest layout of Kineto's events: no spaces), no flow events. `short`: the argument
/// sets only what gaptop reads of them (a kernel's device, stream and correlation id, a
/// call's correlation id), about 390 bytes an op against 690.
fn generate_pairs(path: &Path, ops: u64, short: bool) -> std::io::Result<u64> {
    let mut f = trace_file(path)?;
    for op in gen_ops().take(ops as usize) {
        let GenOp {
            corr, api, k0, kd, ..
        } = op;
        let sep = if corr == 1 { "" } else { ",\n" };
        let (api, k0, kd, dur) = (us(api), us(k0), us(kd), us(API_NS));
        let name = NAMES[op.name];
        if short {
            writeln!(f, "{sep}{{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1871,\"tid\":1871,\"ts\":{api},\"dur\":{dur},\"args\":{{\"correlation\":{corr}}}}},")?;
            write!(f, "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"{name}\",\"pid\":0,\"tid\":7,\"ts\":{k0},\"dur\":{kd},\"args\":{{\"device\":0,\"stream\":7,\"correlation\":{corr}}}}}")?;
            continue;
        }
        writeln!(f, "{sep}{{\"ph\":\"X\",\"cat\":\"cuda_runtime\",\"name\":\"cudaLaunchKernel\",\"pid\":1871,\"tid\":1871,\"ts\":{api},\"dur\":{dur},\"args\":{{\"External id\":{corr},\"cbid\":211,\"correlation\":{corr}}}}},")?;
        write!(f, "{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"{name}\",\"pid\":0,\"tid\":7,\"ts\":{k0},\"dur\":{kd},\"args\":{{\"External id\":{corr},\"queued\":0,\"device\":0,\"context\":1,\"stream\":7,\"correlation\":{corr},\"registers per thread\":44,\"shared memory\":0,\"blocks per SM\":0.007576,\"warps per SM\":0.060606,\"grid\":[1,1,1],\"block\":[256,1,1],\"est. achieved occupancy %\":0}}}}")?;
    }
    end_trace(path, f)
}

fn gaptop_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().join("gaptop")
}

fn max_rss_children_kib() -> i64 {
    nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        .map(|u| u.max_rss())
        .unwrap_or(0)
}

/// Runs `gaptop report` on a trace in a child; its time and its JSON report.
fn time_report(bin: &Path, path: &Path) -> (f64, serde_json::Value) {
    let t = Instant::now();
    let out = report_command(bin, path).output().unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (secs, serde_json::from_slice(&out.stdout).unwrap())
}

fn report_command(bin: &Path, path: &Path) -> Command {
    let mut c = Command::new(bin);
    c.args(["report", "--format", "json", "--top", "10"])
        .arg(path);
    c
}

/// One run of `gaptop report` in a child of its own: its time, its own peak RSS (KiB) and
/// its JSON report. The run is made by a copy of this program (`--child`), whose children's
/// peak is that one child's.
fn measured_report(bin: &Path, path: &Path) -> (f64, i64, serde_json::Value) {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--child")
        .args([bin, path])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let (first, json) = text.split_once('\n').unwrap_or((&text, ""));
    let mut f = first.split(' ');
    let mut next = || f.next().and_then(|v| v.parse::<f64>().ok());
    let (Some(secs), Some(kib)) = (next(), next()) else {
        panic!("{}{}", text, String::from_utf8_lossy(&out.stderr));
    };
    (secs, kib as i64, serde_json::from_str(json).unwrap())
}

/// `--child BIN PATH`: runs the report, then prints its time and peak RSS, then the report.
fn child(bin: &Path, path: &Path) {
    let (secs, j) = time_report(bin, path);
    println!("{secs} {}\n{j}", max_rss_children_kib());
}

/// The peak RSS (KiB) of a copy of this program that only loads the trace at `path` into a
/// store, as `gaptop report` does before its analysis (`--load-only PATH` prints it).
fn load_alone_kib(path: &Path) -> i64 {
    let out = Command::new(std::env::current_exe().unwrap())
        .arg("--load-only")
        .arg(path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.trim().parse().unwrap_or_else(|_| {
        panic!("{text}{}", String::from_utf8_lossy(&out.stderr));
    })
}

fn load_only(path: &Path) {
    let store = gaptop_core::sources::load_path(path, usize::MAX).expect("load");
    let peak = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF)
        .map(|u| u.max_rss())
        .unwrap_or(0);
    drop(store);
    println!("{peak}");
}

fn hta_available() -> bool {
    Command::new("python3")
        .args(["-c", "import hta"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn time_hta(path: &Path) -> Option<f64> {
    let dir = path.with_extension("hta");
    let _ = std::fs::create_dir_all(&dir);
    let link = dir.join("rank-0.json");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(path, &link).ok()?;
    let script = "import sys,time\nfrom hta.trace_analysis import TraceAnalysis\nt=time.time()\na=TraceAnalysis(trace_dir=sys.argv[1])\na.get_idle_time_breakdown()\nprint(time.time()-t)";
    let out = Command::new("timeout")
        .args(["1800", "python3", "-c", script])
        .arg(&dir)
        .output()
        .ok()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        println!("  HTA failed: {}", err.lines().last().unwrap_or("?"));
        return None;
    }
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .lines()
        .last()?
        .parse()
        .ok()
}

/// The rows of 3-event traces of `sizes` events, with HTA beside gaptop where it runs.
fn rows(bin: &Path, dir: &Path, mut sizes: Vec<u64>) {
    let hta = hta_available();
    println!(
        "{:>10} {:>10} {:>9} {:>9} {:>10} {:>9} {:>10} {:>12}",
        "events", "MB", "gaptop s", "MB/s", "peak MiB", "peak/size", "HTA s", "HTA/gaptop"
    );
    // gaptop first, in increasing sizes: the children's peak-memory figure is a running
    // maximum, so HTA (which needs far more) must run only after every gaptop measurement.
    let hta_max: u64 = std::env::var("HTA_MAX_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    sizes.sort();
    let mut rows = Vec::new();
    for &n in &sizes {
        let path = dir.join(format!("gaptop-bench-{n}.json"));
        let bytes = generate(&path, n).expect("generate");
        let (secs, j) = time_report(bin, &path);
        let rss = max_rss_children_kib() as f64 / 1024.0;
        rows.push((n, path, bytes, secs, rss, j["gpu_ops"].clone()));
    }
    for (n, path, bytes, secs, rss, ops) in rows {
        let mb = bytes as f64 / 1e6;
        let (hs, ratio) = if hta && n > hta_max {
            ("skipped".to_string(), "-".to_string())
        } else if hta {
            match time_hta(&path) {
                Some(h) => (format!("{h:.1}"), format!("{:.1}x", h / secs)),
                None => ("failed".into(), "-".into()),
            }
        } else {
            ("n/a".into(), "-".into())
        };
        println!(
            "{:>10} {:>10.0} {:>9.2} {:>9.0} {:>10.0} {:>8.1}% {:>10} {:>12}   ({} GPU ops)",
            n,
            mb,
            secs,
            mb / secs,
            rss,
            100.0 * rss * 1024.0 * 1024.0 / bytes as f64,
            hs,
            ratio,
            ops
        );
        if std::env::var_os("KEEP").is_none() {
            let _ = std::fs::remove_file(&path);
        }
    }
    if !hta {
        println!("(HTA not installed: pip install HolisticTraceAnalysis to compare)");
    } else {
        println!("(HTA runs only up to HTA_MAX_EVENTS events, default 2000000: it holds the trace in pandas)");
    }
}

/// Heap bytes a live store keeps for `ops` GPU ops and their launch calls, fed as a
/// collector sends them (a batch of calls, then their ops) through `Ingest`.
fn live_bytes(ops: u64) -> (isize, u64) {
    use gaptop_core::model::store::Store;
    use gaptop_core::sources::ingest::Ingest;
    let before = heap();
    let mut store = Store::new(usize::MAX);
    let mut ingest = Ingest::new();
    ingest.apply(
        &mut store,
        1,
        w::Frame::Hello(w::Hello::new(1871, -1, "bench")),
    );
    for (i, n) in NAMES.iter().enumerate() {
        let (id, text) = (i as u32 + 1, n.to_string());
        ingest.apply(&mut store, 1, w::Frame::Name { id, text });
    }
    let launch = NAMES.len() as u32 + 1;
    let text = "cudaLaunchKernel".to_string();
    ingest.apply(&mut store, 1, w::Frame::Name { id: launch, text });
    let mut all = gen_ops().take(ops as usize).peekable();
    while all.peek().is_some() {
        let batch: Vec<GenOp> = all.by_ref().take(10_000).collect();
        let apis = batch
            .iter()
            .map(|o| w::Api {
                start: o.api,
                end: o.api + API_NS,
                corr: o.corr as u32,
                tid: 1871,
                name: launch,
                kind: w::API_LAUNCH,
                ..Default::default()
            })
            .collect();
        ingest.apply(&mut store, 1, w::Frame::Apis(apis));
        let ops = batch
            .iter()
            .map(|o| w::Op {
                start: o.k0,
                end: o.k0 + o.kd,
                corr: o.corr as u32,
                name: o.name as u32 + 1,
                stream: 7,
                ..Default::default()
            })
            .collect();
        ingest.apply(&mut store, 1, w::Frame::Ops(ops));
    }
    let kept = heap() - before;
    let n = store.total_ops;
    drop((store, ingest));
    (kept, n)
}

/// The kB a `/proc/self/status` line gives (0 where it cannot be read).
fn status_kib(key: &str) -> i64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Issue 18's target: `ops` GPU ops each with its launch call (`short`: short argument
/// sets), or the `--pairs` trace at `given`. With `OLD` set, that binary's runs are made
/// between this build's, on the same file.
fn pairs(bin: &Path, dir: &Path, ops: u64, short: bool, given: Option<PathBuf>) {
    use gaptop_core::analysis::gaps::Config;
    use gaptop_core::model::window::Window;
    let made = given.is_none();
    let path = given.unwrap_or_else(|| {
        let kind = if short { "short-pairs" } else { "pairs" };
        let path = dir.join(format!("gaptop-bench-{kind}-{ops}.json"));
        generate_pairs(&path, ops, short).expect("generate");
        path
    });
    let bytes = std::fs::metadata(&path).expect("the trace").len();
    let repeat: usize = std::env::var("REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let mut bins = vec![("this build".to_string(), bin.to_path_buf())];
    if let Some(old) = std::env::var_os("OLD") {
        bins.push(("OLD".to_string(), PathBuf::from(old)));
    }
    // Each binary's runs: (s, peak KiB), interleaved.
    let mut runs: Vec<Vec<(f64, i64)>> = vec![Vec::new(); bins.len()];
    let mut reported = serde_json::Value::Null;
    for _ in 0..repeat {
        for (i, (_, b)) in bins.iter().enumerate() {
            let (secs, kib, j) = measured_report(b, &path);
            runs[i].push((secs, kib));
            reported = j["gpu_ops"].clone();
        }
    }
    let ops = reported.as_u64().unwrap_or(ops);
    let mb = bytes as f64 / 1e6;
    println!(
        "{} GPU ops with their launches, {} events, {mb:.0} MB{}:",
        ops,
        2 * ops,
        if short { " (short argument sets)" } else { "" }
    );
    println!(
        "  {:<12} {:<24} {:>7} {:>7} {:>7} {:>7} {:>9} {:>9}",
        "binary", "runs, s", "best s", "MB/s", "med s", "Mops/s", "peak MiB", "peak B/op"
    );
    for ((name, _), r) in bins.iter().zip(&runs) {
        let each: Vec<String> = r.iter().map(|(s, _)| format!("{s:.2}")).collect();
        let mut times: Vec<f64> = r.iter().map(|x| x.0).collect();
        times.sort_by(f64::total_cmp);
        let (best, median) = (times[0], times[times.len() / 2]);
        let peak = r.iter().map(|x| x.1).max().unwrap_or(0);
        println!(
            "  {:<12} {:<24} {:>7.2} {:>7.0} {:>7.2} {:>7.2} {:>9.1} {:>9.1}",
            name,
            each.join(" "),
            best,
            mb / best,
            median,
            ops as f64 / best / 1e6,
            peak as f64 / 1024.0,
            peak as f64 * 1024.0 / ops as f64,
        );
    }
    let alone = load_alone_kib(&path);
    println!(
        "  the load alone (this build, a process that only loads): peak {:.1} MiB, {:.1} B/op",
        alone as f64 / 1024.0,
        alone as f64 * 1024.0 / ops as f64
    );
    // In this process: the load alone, the analysis alone, and what the store keeps.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let rss = status_kib("VmRSS:");
    let before = heap();
    let t = Instant::now();
    let store = gaptop_core::sources::load_path(&path, usize::MAX).expect("load");
    let load_s = t.elapsed().as_secs_f64();
    let loaded = heap() - before;
    let load_peak = (status_kib("VmHWM:") - rss) * 1024;
    let t = Instant::now();
    let report = gaptop::report::build(&store, Window::all(), &Config::default(), 10, None);
    let analysis_s = t.elapsed().as_secs_f64();
    let stored = store.total_ops;
    drop((report, store));
    let (live, live_ops) = live_bytes(ops);
    println!(
        "  {:>7} {:>9} {:>10} {:>10} {:>10}",
        "load s", "analyse s", "B/op load", "B/op peak", "B/op live"
    );
    println!(
        "  {:>7.2} {:>9.2} {:>10.1} {:>10.1} {:>10.1}",
        load_s,
        analysis_s,
        loaded as f64 / stored as f64,
        load_peak as f64 / stored as f64,
        live as f64 / live_ops as f64,
    );
    println!(
        "(`gaptop report`: {repeat} runs each in a child, {reported} GPU ops reported, peak: the child's own; load and analysis timed in this process; B/op load and live: heap kept per GPU op with its launch call; B/op peak: the load's peak RSS above where it began)"
    );
    if made && std::env::var_os("KEEP").is_none() {
        let _ = std::fs::remove_file(&path);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") && args.len() == 3 {
        return child(Path::new(&args[1]), Path::new(&args[2]));
    }
    if args.first().map(String::as_str) == Some("--load-only") && args.len() == 2 {
        return load_only(Path::new(&args[1]));
    }
    let mut sizes: Vec<u64> = Vec::new();
    let mut pair_ops: Option<u64> = None;
    let mut given: Option<PathBuf> = None;
    let mut short = false;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--generate" {
            let n: u64 = it
                .next()
                .and_then(|v| v.parse().ok())
                .expect("--generate N PATH");
            let path = PathBuf::from(it.next().expect("--generate N PATH"));
            generate_pairs(&path, n, short).expect("generate");
            return;
        }
        if a == "--short" {
            short = true;
        } else if a == "--pairs" {
            pair_ops = Some(it.next().and_then(|v| v.parse().ok()).expect("--pairs N"));
        } else if a == "--pairs-file" {
            given = Some(PathBuf::from(it.next().expect("--pairs-file PATH")));
            pair_ops.get_or_insert(0);
        } else if let Ok(n) = a.parse() {
            sizes.push(n);
        }
    }
    if sizes.is_empty() && pair_ops.is_none() {
        sizes = vec![1_000_000, 10_000_000];
        pair_ops = Some(1_000_000);
    }
    let dir = std::env::var("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let bin = gaptop_bin();
    assert!(
        bin.is_file(),
        "build gaptop first: cargo build --release ({})",
        bin.display()
    );
    if !sizes.is_empty() {
        rows(&bin, &dir, sizes);
    }
    if let Some(n) = pair_ops {
        pairs(&bin, &dir, n, short, given);
    }
}

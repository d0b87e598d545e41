//! Import benchmark: generates Kineto-style traces of N events, runs `gaptop report` on each in
//! a child process, and prints throughput (MB/s of JSON), peak memory against file size, and,
//! where Holistic Trace Analysis is installed, its time on the same file side by side.
//!
//! cargo build --release && cargo run --release --example parse_bench -- 1000000 10000000

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// Writes a trace with `n` events: per kernel, a runtime call, the kernel and a flow event,
/// with PyTorch-length kernel names and Kineto's argument sets.
fn generate(path: &Path, n: u64) -> std::io::Result<u64> {
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    writeln!(f, "{{\n  \"schemaVersion\": 1,\n  \"traceEvents\": [")?;
    let names = [
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
        "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&)::{lambda(int)#1}>(int)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
    ];
    let mut t: u64 = 5_109_306_000_000_000; // ns
    let mut written = 0u64;
    let mut corr = 0u64;
    while written < n {
        corr += 1;
        let api = t;
        let k0 = t + 6_000;
        let kd = 1_200 + (corr % 7) * 300;
        let us = |ns: u64| format!("{}.{:03}", ns / 1000, ns % 1000);
        let sep = if written == 0 { "" } else { ",\n" };
        write!(f, "{sep}  {{\n    \"ph\": \"X\", \"cat\": \"cuda_runtime\", \"name\": \"cudaLaunchKernel\", \"pid\": 1871, \"tid\": 1871,\n    \"ts\": {}, \"dur\": 4.733,\n    \"args\": {{\n      \"External id\": {corr}, \"cbid\": 211, \"correlation\": {corr}\n    }}\n  }}", us(api))?;
        written += 1;
        if written < n {
            write!(f, ",\n  {{\n    \"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"{}\", \"pid\": 0, \"tid\": 7,\n    \"ts\": {}, \"dur\": {},\n    \"args\": {{\n      \"External id\": {corr},      \"queued\": 0, \"device\": 0, \"context\": 1,      \"stream\": 7, \"correlation\": {corr},      \"registers per thread\": 44,      \"shared memory\": 0,      \"blocks per SM\": 0.007576,      \"warps per SM\": 0.060606,      \"grid\": [1, 1, 1],      \"block\": [256, 1, 1],      \"est. achieved occupancy %\": 0\n    }}\n  }}", names[(corr % 3) as usize], us(k0), us(kd))?;
            written += 1;
        }
        if written < n {
            write!(f, ",\n  {{\n    \"ph\": \"f\", \"id\": {corr}, \"pid\": 0, \"tid\": 7, \"ts\": {},\n    \"cat\": \"ac2g\", \"name\": \"ac2g\", \"bp\": \"e\"\n  }}", us(k0))?;
            written += 1;
        }
        t += 10_000 + (corr % 5) * 1_000;
    }
    writeln!(f, "\n  ],\n  \"traceName\": \"generated\"\n}}")?;
    f.flush()?;
    Ok(std::fs::metadata(path)?.len())
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

fn main() {
    let sizes: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000_000, 10_000_000]
    } else {
        sizes
    };
    let dir = std::env::var("BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| std::env::temp_dir());
    let bin = gaptop_bin();
    assert!(
        bin.is_file(),
        "build gaptop first: cargo build --release ({})",
        bin.display()
    );
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
    let mut sizes = sizes;
    sizes.sort();
    let mut rows = Vec::new();
    for &n in &sizes {
        let path = dir.join(format!("gaptop-bench-{n}.json"));
        let bytes = generate(&path, n).expect("generate");
        let t = Instant::now();
        let out = Command::new(&bin)
            .args(["report", "--format", "json", "--top", "10"])
            .arg(&path)
            .output()
            .unwrap();
        let secs = t.elapsed().as_secs_f64();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let j: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
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

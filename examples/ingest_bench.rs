//! Viewer throughput: K synthetic collector processes stream ops over their own Unix socket
//! connections as fast as they can; the viewer decodes and stores them. Prints the sustained
//! rate, which must stay above 1M ops/s for the live view to keep up without drops.
//!
//! cargo run --release --example ingest_bench -- [PROCESSES] [OPS_PER_PROCESS]

use std::io::Write;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gaptop_core::model::store::Store;
use gaptop_core::sources::ingest::Ingest;
use gaptop_core::sources::live::{accept_loop, LiveEvent, SocketDir};
use gaptop_wire as w;

fn sender(path: &str, rank: i32, n: u64) {
    let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
    let mut b = Vec::new();
    w::encode_hello(&mut b, &w::Hello::new(1000 + rank as u32, rank, "bench"));
    w::encode_name(&mut b, 1, "_Z6kernelPf");
    w::encode_name(&mut b, 2, "cudaLaunchKernel");
    s.write_all(&b).unwrap();
    let batch = 20_000u64;
    let mut t = 0u64;
    let mut i = 0u64;
    while i < n {
        b.clear();
        let k = batch.min(n - i);
        let ops: Vec<w::Op> = (0..k)
            .map(|j| {
                t += 3_000;
                w::Op {
                    start: t,
                    end: t + 1_500,
                    corr: (i + j) as u32 + 1,
                    name: 1,
                    stream: 7,
                    ..Default::default()
                }
            })
            .collect();
        let apis: Vec<w::Api> = ops
            .iter()
            .map(|o| w::Api {
                start: o.start - 2_000,
                end: o.start - 1_000,
                corr: o.corr,
                tid: 1,
                name: 2,
                kind: w::API_LAUNCH,
                ..Default::default()
            })
            .collect();
        w::encode_apis(&mut b, &apis);
        w::encode_ops(&mut b, &ops);
        s.write_all(&b).unwrap();
        i += k;
    }
    b.clear();
    w::encode_bye(&mut b, 0);
    let _ = s.write_all(&b);
}

fn main() {
    if let Ok(spec) = std::env::var("GAPTOP_BENCH_SEND") {
        let v: Vec<&str> = spec.split('|').collect();
        sender(v[0], v[1].parse().unwrap(), v[2].parse().unwrap());
        return;
    }
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let procs = *args.first().unwrap_or(&4);
    let per = *args.get(1).unwrap_or(&2_000_000);
    let (dir, listener) = SocketDir::create().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || accept_loop(listener, tx, stop));
    }
    let path = dir.socket.to_string_lossy().into_owned();
    let t0 = Instant::now();
    // Separate processes, as real collectors are: this binary re-run as a sender.
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = (0..procs)
        .map(|r| {
            std::process::Command::new(&exe)
                .env("GAPTOP_BENCH_SEND", format!("{path}|{r}|{per}"))
                .spawn()
                .unwrap()
        })
        .collect();
    let mut store = Store::new(4 << 30);
    let mut ingest = Ingest::new();
    let mut closed = 0;
    let mut last_report = Instant::now();
    while closed < procs {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(LiveEvent::Frames(c, fs)) => {
                for f in fs {
                    ingest.apply(&mut store, c, f);
                }
            }
            Ok(LiveEvent::Closed(..)) => closed += 1,
            Ok(_) => {}
            Err(_) => break,
        }
        if last_report.elapsed() > Duration::from_secs(1) {
            let s = t0.elapsed().as_secs_f64();
            eprintln!(
                "  {:.1}s: {} ops stored, {:.2}M ops/s",
                s,
                store.total_ops,
                store.total_ops as f64 / s / 1e6
            );
            last_report = Instant::now();
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    for mut c in children {
        let _ = c.wait();
    }
    let total = store.total_ops;
    println!(
        "{procs} processes x {per} ops (+ as many API records): {total} ops stored in {secs:.2}s = {:.2}M ops/s; evicted {} dropped {}",
        total as f64 / secs / 1e6,
        store.evicted_ops,
        store.dropped
    );
    assert_eq!(total, procs * per, "every op arrived");
}

//! The viewer's socket side without a GPU: several synthetic collectors at once, garbage,
//! truncated frames, wrong versions and oversized lengths on some connections while the others
//! carry on; the socket's directory and modes.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gaptop_core::model::store::Store;
use gaptop_core::sources::ingest::Ingest;
use gaptop_core::sources::live::{accept_loop, LiveEvent, SocketDir};
use gaptop_wire as w;

fn hello(pid: u32, rank: i32) -> Vec<u8> {
    let mut b = Vec::new();
    w::encode_hello(
        &mut b,
        &w::Hello::new(pid, rank, &format!("python3 train.py rank {rank}")),
    );
    b
}

fn good_stream(pid: u32, rank: i32, n: u32) -> Vec<u8> {
    let mut b = hello(pid, rank);
    w::encode_name(&mut b, 1, "_Z6kernelPf");
    w::encode_name(&mut b, 2, "cudaLaunchKernel_v7000");
    w::encode_name(
        &mut b,
        3,
        "/x/lib/python3.12/site-packages/model.py(7): Model.forward",
    );
    w::encode_stack(&mut b, 1, 0, 3);
    let ops: Vec<w::Op> = (0..n)
        .map(|i| w::Op {
            start: 1_000 + i as u64 * 100,
            end: 1_050 + i as u64 * 100,
            corr: i + 1,
            name: 1,
            stream: 7,
            device: 0,
            ..Default::default()
        })
        .collect();
    let apis: Vec<w::Api> = (0..n)
        .map(|i| w::Api {
            start: 990 + i as u64 * 100,
            end: 995 + i as u64 * 100,
            corr: i + 1,
            tid: 5,
            name: 2,
            stack: 1,
            outer_corr: 0,
            kind: w::API_LAUNCH,
        })
        .collect();
    w::encode_apis(&mut b, &apis);
    w::encode_ops(&mut b, &ops);
    w::encode_stats(
        &mut b,
        &w::Stats {
            collector_dropped: 3,
            cupti_dropped: 4,
            sent: n as u64,
            lag_ns: 0,
        },
    );
    w::encode_bye(&mut b, 0);
    b
}

#[test]
fn many_collectors_and_bad_peers() {
    let (dir, listener) = SocketDir::create().unwrap();
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&dir.dir), 0o700);
    assert_eq!(mode(&dir.socket), 0o600);
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::spawn(move || accept_loop(listener, tx, stop));
    }
    let send = |bytes: Vec<u8>| {
        let path = dir.socket.clone();
        std::thread::spawn(move || {
            let mut s = UnixStream::connect(path).unwrap();
            // Dribble the stream in odd-sized pieces: frames cross reads.
            for chunk in bytes.chunks(77) {
                if s.write_all(chunk).is_err() {
                    return;
                }
            }
        })
    };
    let mut garbage = hello(9, -1);
    garbage.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0x01, 0x02, 0x03, 0x04]);
    let mut truncated = hello(10, -1);
    let mut one = Vec::new();
    w::encode_ops(&mut one, &[w::Op::default(); 3]);
    truncated.extend_from_slice(&one[..one.len() - 5]);
    let mut wrong_version = hello(11, -1);
    wrong_version[4 + 1 + 8] = 42;
    let mut oversized = hello(12, -1);
    oversized.extend_from_slice(&(u32::MAX).to_le_bytes());
    // A peer that says hello and then stalls, holding its connection open throughout.
    let mut stalled = UnixStream::connect(&dir.socket).unwrap();
    stalled.write_all(&hello(13, -1)).unwrap();
    stalled.write_all(&[1, 0]).unwrap(); // half a length prefix, then nothing
    let handles = vec![
        send(good_stream(100, 0, 5000)),
        send(garbage),
        send(good_stream(101, 1, 7000)),
        send(truncated),
        send(wrong_version),
        send(oversized),
        send(b"GET / HTTP/1.1\r\n\r\n".to_vec()),
        send(good_stream(102, 2, 3000)),
    ];
    for h in handles {
        h.join().unwrap();
    }
    let mut store = Store::new(usize::MAX);
    let mut ingest = Ingest::new();
    let mut closed = Vec::new();
    let t = Instant::now();
    while closed.len() < 8 && t.elapsed() < Duration::from_secs(10) {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(LiveEvent::Frames(c, fs)) => {
                for f in fs {
                    ingest.apply(&mut store, c, f);
                }
            }
            Ok(LiveEvent::Closed(c, why)) => {
                ingest.close(&mut store, c);
                closed.push(why);
            }
            _ => {}
        }
    }
    stop.store(true, Ordering::Relaxed);
    assert_eq!(closed.len(), 8, "every other connection ends: {closed:?}");
    drop(stalled);
    let errors: Vec<String> = closed.iter().flatten().cloned().collect();
    assert_eq!(errors.len(), 5, "{errors:?}");
    let has = |s: &str| errors.iter().any(|e| e.contains(s));
    // Garbage after a hello, an oversized length and an HTTP request all read as bad lengths.
    assert_eq!(
        errors.iter().filter(|e| e.contains("frame length")).count(),
        3,
        "{errors:?}"
    );
    assert!(has("frame length 4294967295"), "{errors:?}");
    assert!(has("ended inside a frame"), "{errors:?}");
    assert!(has("protocol version 42"), "{errors:?}");
    // The good collectors' data all arrived, each process labelled.
    assert_eq!(store.op_count(), 15_000);
    let good: Vec<_> = store.procs.iter().filter(|p| p.pid >= 100).collect();
    assert_eq!(good.len(), 3);
    assert!(good.iter().all(|p| p.ended && p.api_count() > 0));
    let ranks: Vec<i32> = good.iter().map(|p| p.rank).collect();
    assert!(ranks.contains(&0) && ranks.contains(&1) && ranks.contains(&2));
    // Drops reported by collectors are summed and shown.
    assert_eq!(store.dropped, 3 * 7);
    // Names are demangled and frames shortened on the way in.
    assert!(store.names.lookup("kernel(float*)").is_some());
    assert!(store.names.lookup("model.py(7): Model.forward").is_some());
    let lane = store.lane_label(0);
    assert!(lane.starts_with('r') && lane.ends_with("gpu0 s7"), "{lane}");
}

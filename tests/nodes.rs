//! A job across nodes: one `gaptop record` a node, opened together as one capture. The two
//! recordings below are the two ranks of tests/fixtures/skewed_ranks (its README has the
//! collectives worked out by hand), written as collectors would send them: the same pid on both
//! nodes (containers start their programs alike), ranks from the collectors' `RANK`, node 1's
//! clock 5 ms behind, and each node's CPU sampler on its own stream.

mod support;

use std::path::{Path, PathBuf};

use gaptop_core::sources::recording::Writer;
use gaptop_wire as w;
use support::{bin, per_rank, report_paths, tempdir};

const US: u64 = 1_000;
/// The fixture's time origin: 1,000,000 µs, in ns.
const T0: u64 = 1_000_000 * US;
const NCCL: &str = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)";

/// (start, end) of each rank's four collectives, µs after T0 on rank 0's clock.
fn collectives(rank: i32) -> [(u64, u64); 4] {
    match rank {
        0 => [(100, 150), (300, 340), (520, 560), (700, 780)],
        _ => [(110, 150), (305, 340), (500, 560), (730, 780)],
    }
}

/// A node's recording: rank `rank` as pid 4242, its times `behind` ns behind rank 0's clock,
/// a CPU sample of the launching thread in every gap.
fn node(dir: &Path, rank: i32, behind: u64) -> PathBuf {
    let path = dir.join(format!("node{rank}.rec"));
    let mut wr = Writer::new(std::fs::File::create(&path).unwrap()).unwrap();
    let script = format!("train.py(2{rank}): rank{rank}_step");
    let mut f = vec![w::Frame::Hello(w::Hello::new(
        4242,
        rank,
        "python3 train.py",
    ))];
    for text in [script.as_str(), "cudaLaunchKernel", NCCL] {
        f.push(w::Frame::Name {
            id: f.len() as u32,
            text: text.into(),
        });
    }
    f.push(w::Frame::Stack {
        id: 1,
        parent: 0,
        frame: 1,
    });
    for (i, (s, e)) in collectives(rank).into_iter().enumerate() {
        let (s, e) = (T0 + s * US - behind, T0 + e * US - behind);
        let corr = 10 + i as u32;
        f.push(w::Frame::Apis(vec![w::Api {
            start: s - 3 * US,
            end: s - 2 * US,
            corr,
            tid: 7,
            name: 2,
            stack: 1,
            outer_corr: 0,
            kind: w::API_LAUNCH,
        }]));
        f.push(w::Frame::Ops(vec![w::Op {
            start: s,
            end: e,
            corr,
            name: 3,
            stream: 7,
            ..Default::default()
        }]));
    }
    // The node's sampler: one sample of thread 7 in each gap, its frame named by the node.
    let samples = vec![
        w::Frame::Sampler {
            period_ns: 1_000_000,
        },
        w::Frame::Name {
            id: 1,
            text: format!("node{rank}_wait"),
        },
        w::Frame::Stack {
            id: 1,
            parent: 0,
            frame: 1,
        },
        w::Frame::Samples {
            pid: 4242,
            samples: collectives(rank)
                .windows(2)
                .map(|p| w::Sample {
                    tid: 7,
                    time: T0 + (p[0].1 + 10) * US - behind,
                    stack: 1,
                })
                .collect(),
        },
    ];
    // The sampler starts with the program, before its collector says hello.
    for fr in &samples {
        wr.frame(2, fr).unwrap();
    }
    for fr in &f {
        wr.frame(1, fr).unwrap();
    }
    wr.close().unwrap();
    path
}

/// The nodes' recordings, named one by one or as their directory, are one capture: two ranks
/// (although both programs were pid 4242), node 1's clock put back on node 0's by the ends of
/// their collectives, the communication analysis across the nodes as the fixture's README
/// works it out, and each node's CPU samples with its own program.
#[test]
fn the_recordings_of_a_jobs_nodes_are_one_capture() {
    let dir = tempdir("nodes");
    let a = node(&dir, 0, 0);
    let b = node(&dir, 1, 5_000 * US);
    let j = report_paths(&[&a, &b]);
    let ranks: Vec<(i64, i64, u64)> = j["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["rank"].as_i64().unwrap(),
                p["pid"].as_i64().unwrap(),
                p["kernels"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ranks, vec![(0, 4242, 4), (1, 4242, 4)]);
    let clocks = j["clocks"].as_str().unwrap();
    assert!(clocks.contains("rank 1 +5.00ms"), "{clocks}");
    let per = per_rank(&j["comm"]);
    assert_eq!(per, vec![(0, 45_000, 1, 20_000), (1, 20_000, 3, 45_000)]);
    assert_eq!(
        j["comm"]["late_sites"][0]["frames"],
        serde_json::json!(["train.py(21): rank1_step"])
    );
    // The directory of the recordings is the same capture.
    let d = report_paths(&[&dir]);
    for key in ["processes", "comm", "clocks", "idle"] {
        assert_eq!(j[key], d[key], "{key}");
    }
    // Each node's samples went to its own program, not to the other node's pid 4242.
    let store = gaptop_core::sources::load_paths(&[a, b], usize::MAX).unwrap();
    for (i, p) in store.procs.iter().enumerate() {
        let frames: Vec<String> = p
            .samples
            .values()
            .flatten()
            .flat_map(|s| store.frame_strings(s.stack))
            .collect();
        assert_eq!(
            frames,
            vec![format!("node{}_wait", p.rank); 3],
            "process {i}"
        );
    }
    let mut labels: Vec<String> = (0..store.lanes.len())
        .map(|l| store.lane_label(l))
        .collect();
    labels.sort();
    assert_eq!(labels, ["r0 gpu0 s7", "r1 gpu0 s7"]);
}

/// Recordings that cannot be one job are refused, naming the files; so is a recording joined
/// with a trace.
#[test]
fn recordings_of_different_jobs_are_refused() {
    let dir = tempdir("nodes-bad");
    let a = node(&dir, 0, 0);
    let other = tempdir("nodes-bad-2");
    let again = node(&other, 0, 0);
    let out = std::process::Command::new(bin())
        .args(["report"])
        .args([&a, &again])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("are both rank 0"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let trace = support::fixture("skewed_ranks/rank-1.json");
    let out = std::process::Command::new(bin())
        .args(["report"])
        .arg(&a)
        .arg(&trace)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("joins only other recordings"), "{err}");
}

/// The nodes' recordings read one after another and three at once give the same report, byte
/// for byte (each is read into a store of its own and joined in the files' order).
#[test]
fn node_recordings_read_at_once_join_as_read_one_by_one() {
    let dir = tempdir("nodes-threads");
    let files = [node(&dir, 0, 0), node(&dir, 1, 5_000 * US)];
    let paths: Vec<&Path> = files.iter().map(|f| f.as_path()).collect();
    let report = |threads| support::report_with_threads(&paths, "json", threads);
    let one = report(1);
    assert!(String::from_utf8_lossy(&one).contains("rank1_step"));
    assert_eq!(one, report(3));
    let _ = std::fs::remove_dir_all(dir);
}

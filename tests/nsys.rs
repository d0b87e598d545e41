//! Nsight Systems captures: fixtures built from NVIDIA's documented SQLite export schema whose
//! answers were worked out by hand, three real exports taken from public repositories
//! (tests/data/nsys/README.md says where from and how each expected figure was computed), and
//! what gaptop says of files it cannot read.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rusqlite::{params, Connection};
use serde_json::{json, Value};

use support::{root, tempdir};

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gaptop")
}

fn data(name: &str) -> PathBuf {
    root().join("tests/data/nsys").join(name)
}

/// `gaptop report PATH EXTRA...`, with `PATH` set to `env_path` when given.
fn run_report(path: &Path, extra: &[&str], env_path: Option<&str>) -> Output {
    let mut c = Command::new(bin());
    c.arg("report").arg(path).args(extra);
    if let Some(p) = env_path {
        c.env("PATH", p);
    }
    c.output().unwrap()
}

fn report(path: &Path, extra: &[&str]) -> Output {
    run_report(path, extra, None)
}

/// The JSON report of a run that must have succeeded.
fn json_of(out: Output) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "report failed: {err}");
    serde_json::from_slice(&out.stdout).unwrap()
}

fn report_json(path: &Path, extra: &[&str]) -> Value {
    json_of(report(path, &[&["--format", "json"], extra].concat()))
}

/// The report's error: it must fail with one line on stderr, which is returned.
fn report_error(path: &Path, env_path: Option<&str>) -> String {
    let out = run_report(path, &[], env_path);
    assert!(!out.status.success(), "a bad file was reported on");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(err.lines().count(), 1, "not one line: {err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Asserts that reporting on `path` fails with a line that names the file and holds `needles`.
fn fails_saying(path: &Path, env_path: Option<&str>, needles: &[&str]) -> String {
    let err = report_error(path, env_path);
    let name = path.file_name().unwrap().to_string_lossy();
    assert!(err.contains(&*name), "the file is not named: {err}");
    for n in needles {
        assert!(err.contains(n), "no {n:?} in: {err}");
    }
    err
}

/// A SQLite database made of `sql`.
fn sql_file(dir: &Path, name: &str, sql: &str) -> PathBuf {
    let p = dir.join(name);
    Connection::open(&p).unwrap().execute_batch(sql).unwrap();
    p
}

// ---------------------------------------------------------------------------------------------
// Fixtures from the documented schema.

/// The tables gaptop reads, with the columns and types NVIDIA documents for them (the SQLite
/// Schema Reference of the Nsight Systems Analysis Guide, schema 3.x), and an enum table.
const SCHEMA: &str = "
CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE META_DATA_EXPORT (name TEXT NOT NULL, value TEXT);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE ThreadNames (nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER);
CREATE TABLE ENUM_NSYS_EVENT_TYPE (id INTEGER NOT NULL PRIMARY KEY, name TEXT, label TEXT);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, demangledName INTEGER NOT NULL,
    shortName INTEGER NOT NULL, mangledName INTEGER, launchType INTEGER, cacheConfig INTEGER,
    registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL, gridY INTEGER NOT NULL,
    gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
    blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL,
    dynamicSharedMemory INTEGER NOT NULL, localMemoryPerThread INTEGER NOT NULL,
    localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL, sharedMemoryExecuted INTEGER,
    graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL,
    deprecatedSrcId INTEGER, srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER,
    srcContextId INTEGER, dstDeviceId INTEGER, dstContextId INTEGER, migrationCause INTEGER,
    graphNodeId INTEGER, virtualAddress INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (
    start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL,
    graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL,
    returnValue INTEGER NOT NULL, callchainId INTEGER);
CREATE TABLE CUDA_CALLCHAINS (
    id INTEGER NOT NULL, symbol INTEGER NOT NULL, module INTEGER NOT NULL, unresolved INTEGER,
    originalIP INTEGER, stackDepth INTEGER NOT NULL, PRIMARY KEY (id, stackDepth));
CREATE TABLE CUDA_GRAPH_NODE_EVENTS (
    start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, nameId INTEGER NOT NULL, graphNodeId INTEGER NOT NULL,
    originalGraphNodeId INTEGER);
CREATE TABLE NVTX_EVENTS (
    start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER,
    textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER,
    doubleValue REAL, uint32Value INTEGER, int32Value INTEGER, floatValue REAL,
    jsonTextId INTEGER, jsonText TEXT, binaryData TEXT);
CREATE TABLE COMPOSITE_EVENTS (
    id INTEGER NOT NULL PRIMARY KEY, start INTEGER NOT NULL, cpu INTEGER, threadState INTEGER,
    globalTid INTEGER, cpuCycles INTEGER NOT NULL);
CREATE TABLE SAMPLING_CALLCHAINS (
    id INTEGER NOT NULL, symbol INTEGER NOT NULL, module INTEGER NOT NULL, kernelMode INTEGER,
    thumbCode INTEGER, unresolved INTEGER, specialEntry INTEGER, originalIP INTEGER,
    unwindMethod INTEGER, stackDepth INTEGER NOT NULL, PRIMARY KEY (id, stackDepth));
INSERT INTO ENUM_NSYS_EVENT_TYPE VALUES
    (34, 'NvtxMark', 'NvtxMark'), (59, 'NvtxPushPopRange', 'NvtxPushPopRange'),
    (60, 'NvtxStartEndRange', 'NvtxStartEndRange'), (75, 'NvtxDomainCreate', 'NvtxDomainCreate');
";

/// A serialized thread id as nsys writes it: the machine above bit 48, the process's id, then
/// the thread's.
fn gid(pid: i64, tid: i64) -> i64 {
    (1 << 48) | (pid << 24) | tid
}

const PID: i64 = 4242;
const TID: i64 = 4243;

/// Builds a fixture export, row by row.
struct Fx {
    db: Connection,
    strings: Vec<String>,
}

impl Fx {
    fn new(path: &Path) -> Fx {
        let db = Connection::open(path).unwrap();
        db.execute_batch(SCHEMA).unwrap();
        for (k, v) in [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_PRODUCT_VERSION", "2025.1.1.110"),
            ("EXPORT_SCHEMA_VERSION", "3.17.1"),
        ] {
            db.execute(
                "INSERT INTO META_DATA_EXPORT VALUES (?1, ?2)",
                params![k, v],
            )
            .unwrap();
        }
        db.execute(
            "INSERT INTO PROCESSES VALUES (?1, ?2, 'python3')",
            params![gid(PID, 0), PID],
        )
        .unwrap();
        Fx {
            db,
            strings: Vec::new(),
        }
    }

    /// The StringIds id of `s`, added on first use.
    fn s(&mut self, s: &str) -> i64 {
        if let Some(i) = self.strings.iter().position(|x| x == s) {
            return i as i64;
        }
        self.strings.push(s.to_string());
        let id = self.strings.len() as i64 - 1;
        self.db
            .execute("INSERT INTO StringIds VALUES (?1, ?2)", params![id, s])
            .unwrap();
        id
    }

    fn kernel(
        &mut self,
        start: i64,
        end: i64,
        stream: i64,
        corr: i64,
        name: &str,
        node: Option<i64>,
    ) {
        let n = self.s(name);
        self.db
            .execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId,
                 streamId, correlationId, globalPid, demangledName, shortName,
                 registersPerThread, gridX, gridY, gridZ, blockX, blockY, blockZ,
                 staticSharedMemory, dynamicSharedMemory, localMemoryPerThread,
                 localMemoryTotal, gridId, graphNodeId)
                 VALUES (?1, ?2, 0, 1, ?3, ?4, ?5, ?6, ?6, 32, 1, 1, 1, 128, 1, 1, 0, 0, 0, 0, ?4, ?7)",
                params![start, end, stream, corr, gid(PID, 0), n, node],
            )
            .unwrap();
    }

    /// A CUDA API call on the fixture's thread: `class` 0 runtime, 1 driver, 67 a backtrace
    /// row of the call `corr`.
    fn call(
        &mut self,
        start: i64,
        end: i64,
        corr: i64,
        name: &str,
        class: i64,
        chain: Option<i64>,
    ) {
        let n = self.s(name);
        self.db
            .execute(
                "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7)",
                params![start, end, class, gid(PID, TID), corr, n, chain],
            )
            .unwrap();
    }

    /// A call chain, innermost frame first (stack depth 0), each `(symbol, module, unresolved)`.
    fn chain(&mut self, id: i64, frames: &[(&str, &str, bool)]) {
        for (depth, (sym, module, unresolved)) in frames.iter().enumerate() {
            let (s, m) = (self.s(sym), self.s(module));
            self.db
                .execute(
                    "INSERT INTO CUDA_CALLCHAINS VALUES (?1, ?2, ?3, ?4, 0, ?5)",
                    params![id, s, m, *unresolved as i64, depth as i64],
                )
                .unwrap();
        }
    }

    /// An NVTX event; the name as an explicit `text`, or registered (`textId`) when `registered`.
    fn nvtx(&mut self, start: i64, end: Option<i64>, ty: i64, name: &str, registered: bool) {
        let (text, id) = if registered {
            (None, Some(self.s(name)))
        } else {
            (Some(name.to_string()), None)
        };
        self.db
            .execute(
                "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)",
                params![start, end, ty, text, gid(PID, TID), id],
            )
            .unwrap();
    }
}

/// The training-step fixture. One process (pid 4242, thread 4243), device 0, streams 7 and 8;
/// times in ns on the capture's clock.
///
/// NVTX (thread 4243): push/pop `train_step` [1000, 99000] (registered string) and [101000,
/// 199000] (explicit text); `forward` [2000, 40000] and [102000, 140000] inside them; the
/// start/end range `prefetch` [50000, 60000] in the first step; a mark, and a range that never
/// ended (both skipped and counted); a domain's creation (ignored).
///
/// | call (thread 4243)              | corr | op (stream)                  | chain |
/// | ------------------------------- | ---- | ---------------------------- | ----- |
/// | cudaLaunchKernel_v7000 10-14 µs | 1    | kernel_a 15-20 µs (7)        | 1     |
/// | cudaMemcpyAsync_v3020 21-22     | 2    | Memcpy HtoD 23-25 (8)        |       |
/// | cudaStreamSynchronize 26-50     | 3    |                              |       |
/// | cudaLaunchKernel_v7000 55-57    | 4    | kernel_b 58-70 (7)           | 2, in a backtrace row |
/// | cudaGraphLaunch_v10000 110-112  | 5    | graph_k1 113-118, graph_k2 119-125 (7, graph nodes) | |
/// | cudaMemsetAsync_v3020 150-151   | 6    | Memset 160-161 (8)           |       |
/// | cuLaunchKernel (driver) 170-171 | 7    | kernel_c 172-180 (8)         |       |
///
/// Device gaps (no stream running), each charged to the op that ends it: 3 µs before the memcpy
/// (host_wait, launch), 33 before kernel_b (host_wait; the 24 µs sync from 26 to 50 blocked
/// more than half of it: sync), 43 before graph_k1 (host_wait, launch), 1 between the graph's
/// two nodes (kernel_wait: launched at 110; graph), 35 before the memset and 11 before kernel_c
/// (host_wait, launch). Device idle 126 µs; busy 39 µs over the span 15-180 µs.
fn training_fixture(path: &Path, with_chains: bool, with_nvtx: bool) -> Fx {
    let mut f = Fx::new(path);
    f.call(
        10_000,
        14_000,
        1,
        "cudaLaunchKernel_v7000",
        0,
        with_chains.then_some(1),
    );
    f.kernel(15_000, 20_000, 7, 1, "kernel_a", None);
    f.call(21_000, 22_000, 2, "cudaMemcpyAsync_v3020", 0, None);
    let memcpy = "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId,
                  correlationId, globalPid, bytes, copyKind) VALUES (23000, 25000, 0, 1, 8, 2, ?1, 4096, 1)";
    f.db.execute(memcpy, params![gid(PID, 0)]).unwrap();
    f.call(26_000, 50_000, 3, "cudaStreamSynchronize_v3020", 0, None);
    f.call(55_000, 57_000, 4, "cudaLaunchKernel_v7000", 0, None);
    if with_chains {
        // Older exports carry a call's chain in a second row of class CUDABACKTRACE.
        f.call(54_900, 57_100, 4, "cudaLaunchKernel", 67, Some(2));
    }
    f.kernel(58_000, 70_000, 7, 4, "kernel_b", None);
    f.call(110_000, 112_000, 5, "cudaGraphLaunch_v10000", 0, None);
    f.kernel(113_000, 118_000, 7, 5, "graph_k1", Some(11));
    f.kernel(119_000, 125_000, 7, 5, "graph_k2", Some(12));
    let node = f.s("cudaGraphAddKernelNode");
    for n in [11, 12] {
        f.db.execute(
            "INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (5000, 5100, 77, ?1, ?2, ?3, NULL)",
            params![gid(PID, TID), node, n],
        )
        .unwrap();
    }
    f.call(150_000, 151_000, 6, "cudaMemsetAsync_v3020", 0, None);
    let memset = "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId,
                  correlationId, globalPid, value, bytes) VALUES (160000, 161000, 0, 1, 8, 6, ?1, 0, 4096)";
    f.db.execute(memset, params![gid(PID, 0)]).unwrap();
    f.call(170_000, 171_000, 7, "cuLaunchKernel", 1, None);
    f.kernel(172_000, 180_000, 8, 7, "kernel_c", None);
    if with_chains {
        f.chain(
            1,
            &[
                (
                    "0x7f0000001234",
                    "/opt/nsys/target-linux-x64/libcupti.so.12",
                    true,
                ),
                (
                    "cudaLaunchKernel",
                    "/usr/local/cuda/lib64/libcudart.so.12",
                    false,
                ),
                (
                    "at::native::launch_a",
                    "/site-packages/torch/lib/libtorch_cuda.so",
                    false,
                ),
                ("main", "/usr/bin/python3", false),
            ],
        );
        f.chain(
            2,
            &[
                (
                    "0x7f0000005678",
                    "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
                    true,
                ),
                (
                    "cudaLaunchKernel",
                    "/usr/local/cuda/lib64/libcudart.so.12",
                    false,
                ),
                (
                    "at::native::launch_b",
                    "/site-packages/torch/lib/libtorch_cuda.so",
                    false,
                ),
                ("0x55aa", "/usr/bin/python3", true),
                ("main", "/usr/bin/python3", false),
            ],
        );
    } else {
        f.db.execute_batch("DROP TABLE CUDA_CALLCHAINS").unwrap();
    }
    if with_nvtx {
        f.nvtx(1_000, Some(99_000), 59, "train_step", true);
        f.nvtx(101_000, Some(199_000), 59, "train_step", false);
        f.nvtx(2_000, Some(40_000), 59, "forward", false);
        f.nvtx(102_000, Some(140_000), 59, "forward", true);
        f.nvtx(50_000, Some(60_000), 60, "prefetch", false);
        f.nvtx(30_000, None, 34, "a mark", false);
        f.nvtx(60_000, None, 59, "never popped", false);
        f.nvtx(0, None, 75, "my.domain", false);
    } else {
        f.db.execute_batch("DROP TABLE NVTX_EVENTS").unwrap();
    }
    f
}

/// The fixture's gap of `duration_ns` in a report's top gaps.
fn gap(j: &Value, duration_ns: i64) -> &Value {
    j["top_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["duration_ns"] == duration_ns)
        .unwrap_or_else(|| panic!("no gap of {duration_ns} ns in {}", j["top_gaps"]))
}

#[test]
fn fixture_gaps_reasons_and_totals_match_the_hand_computed_answers() {
    let d = tempdir("nsys-fx");
    let p = d.join("train.sqlite");
    training_fixture(&p, true, true);
    let j = report_json(&p, &[]);
    assert_eq!(j["source"], "train.sqlite");
    assert_eq!(j["gpu_ops"], 7);
    assert_eq!(j["kernels"], 5);
    assert_eq!(j["kernel_ns"], 5_000 + 12_000 + 5_000 + 6_000 + 8_000);
    assert_eq!(j["busy_ns"], 39_000);
    assert_eq!(j["device_idle_ns"], 126_000);
    assert_eq!(j["window"]["to_ns"], 165_000);
    // Every kernel's launch was found (the graph's nodes by their launch's correlation id, the
    // driver launch too), two with a native stack, the rest with NVTX frames.
    assert_eq!(j["kernels_with_launch"], 5);
    assert_eq!(j["kernels_with_stack"], 5);
    // Six device gaps, the longest first.
    assert_eq!(j["top_gaps"].as_array().unwrap().len(), 6);
    assert_eq!(j["top_gaps"][0]["duration_ns"], 43_000);
    let expect = [
        (3_000, "host_wait", "launch", "Memcpy HtoD"),
        (33_000, "host_wait", "sync", "kernel_b"),
        (43_000, "host_wait", "launch", "graph_k1"),
        (1_000, "kernel_wait", "graph", "graph_k2"),
        (35_000, "host_wait", "launch", "Memset"),
        (11_000, "host_wait", "launch", "kernel_c"),
    ];
    for (dur, cause, reason, next) in expect {
        let g = gap(&j, dur);
        assert_eq!(g["cause"], cause, "{g}");
        assert_eq!(g["reason"], reason, "{g}");
        assert_eq!(g["next_op"], next, "{g}");
        assert_eq!(g["pid"], PID);
        assert_eq!(g["device"], 0);
    }
    assert_eq!(gap(&j, 3_000)["stream"], 8);
    assert_eq!(gap(&j, 43_000)["launch_latency_ns"], 3_000);
    // Reasons are counted over each stream's own gaps (HTA's): on stream 7 the 38 µs from
    // kernel_a to kernel_b is the sync's, the 1 µs inside the graph the graph's; stream 8's
    // 135 µs before the memset is CPU work (the 24 µs sync is less than half of it).
    assert_eq!(j["reasons"]["sync"]["total_ns"], 38_000);
    assert_eq!(j["reasons"]["graph"]["total_ns"], 1_000);
    assert_eq!(
        j["reasons"]["launch"]["total_ns"],
        43_000 + 135_000 + 11_000
    );
    // The mark and the range that never ended are skipped and counted; the domain's creation is
    // not a range.
    assert_eq!(j["skipped"]["NVTX mark"], 1);
    assert_eq!(j["skipped"]["NVTX range without an end"], 1);
    assert_eq!(j["processes"][0]["label"], "python3");
    assert_eq!(
        j["notes"],
        json!(["Nsight Systems 2025.1.1.110 export, schema 3.17.1"])
    );
}

#[test]
fn fixture_stacks_hold_nvtx_ranges_above_the_call_chain() {
    let d = tempdir("nsys-stacks");
    let p = d.join("train.sqlite");
    training_fixture(&p, true, true);
    let j = report_json(&p, &[]);
    // The memcpy's launch: in the first step's forward pass, without a chain.
    assert_eq!(
        gap(&j, 3_000)["frames"],
        json!([
            "train_step",
            "forward",
            "cudaMemcpyAsync_v3020",
            "Memcpy HtoD"
        ])
    );
    // kernel_b's launch: under the start/end range, then its chain (from the backtrace row)
    // outermost first, without the driver's and the runtime's own frames next to the call; the
    // unresolved frame reads as module+address.
    assert_eq!(
        gap(&j, 33_000)["frames"],
        json!([
            "train_step",
            "prefetch",
            "main [python3]",
            "python3+0x55aa",
            "at::native::launch_b [libtorch_cuda.so]",
            "cudaLaunchKernel_v7000",
            "kernel_b"
        ])
    );
    // The graph launch in the second step's forward pass (explicit and registered names alike).
    assert_eq!(
        gap(&j, 43_000)["frames"],
        json!([
            "train_step",
            "forward",
            "cudaGraphLaunch_v10000",
            "graph_k1"
        ])
    );
    // The CPU during the 33 µs gap (its midpoint, 41.5 µs): the first step, between ranges.
    assert_eq!(gap(&j, 33_000)["cpu_frames"], json!(["train_step"]));
    // The driver launch: in the second step only.
    assert_eq!(
        gap(&j, 11_000)["frames"],
        json!(["train_step", "cuLaunchKernel", "kernel_c"])
    );
    // The call tree's top stacks carry the NVTX frames too.
    let folded = String::from_utf8(report(&p, &["--format", "folded"]).stdout).unwrap();
    assert!(
        folded.contains("train_step;forward;cudaGraphLaunch_v10000;graph_k1 43000\n"),
        "{folded}"
    );
    // kernel_a's chain (on its own row) has no gap of its own; the store holds it all the same.
    let st = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
    let a = st.procs[0].apis().find(|a| a.corr == 1).unwrap();
    assert_eq!(
        st.frame_strings(a.stack),
        vec![
            "train_step",
            "forward",
            "main [python3]",
            "at::native::launch_a [libtorch_cuda.so]"
        ]
    );
    // The backtrace row is not a call of its own.
    assert_eq!(st.procs[0].api_count(), 7);
}

/// The fixture's graph as stream capture makes one: its two kernel nodes captured at 0.3 µs and
/// 0.6 µs, before the first step, by two `cudaLaunchKernel` calls, each in an NVTX range of its own layer, then cloned
/// into the instantiated graph (nodes 11 and 12) that the replay at 110 µs runs. Each
/// replayed kernel's gaps are charged to the replay's launch stack, then the code that captured
/// its node; times, reasons and totals stay as they were.
#[test]
fn replayed_graph_nodes_name_the_code_that_captured_them() {
    let d = tempdir("nsys-captured");
    let p = d.join("graph.sqlite");
    let plain = d.join("plain.sqlite");
    training_fixture(&plain, true, true);
    let mut f = training_fixture(&p, true, true);
    f.db.execute_batch(
        "UPDATE CUDA_GRAPH_NODE_EVENTS SET start = 8000, end = 8100,
             originalGraphNodeId = graphNodeId - 10",
    )
    .unwrap();
    let made = f.s("cudaGraphAddKernelNode");
    for (node, at) in [(1, 300), (2, 600)] {
        f.db.execute(
            "INSERT INTO CUDA_GRAPH_NODE_EVENTS VALUES (?1, ?2, 77, ?3, ?4, ?5, NULL)",
            params![at, at + 50, gid(PID, TID), made, node],
        )
        .unwrap();
    }
    f.nvtx(150, Some(450), 59, "capture layer0", false);
    f.nvtx(500, Some(800), 59, "capture layer1", false);
    f.call(200, 400, 100, "cudaLaunchKernel_v7000", 0, None);
    f.call(550, 750, 101, "cudaLaunchKernel_v7000", 0, None);
    drop(f);
    let j = report_json(&p, &[]);
    let captured = |layer: &str, kernel: &str| {
        json!([
            "train_step",
            "forward",
            "(graph node captured at)",
            layer,
            "cudaGraphLaunch_v10000",
            kernel
        ])
    };
    assert_eq!(
        gap(&j, 43_000)["frames"],
        captured("capture layer0", "graph_k1")
    );
    let inside = gap(&j, 1_000);
    assert_eq!(inside["frames"], captured("capture layer1", "graph_k2"));
    assert_eq!(inside["reason"], "graph");
    // The capture's own launches made no GPU op; the rest of the report is the same.
    let before = report_json(&plain, &[]);
    for key in [
        "idle",
        "reasons",
        "device_idle_ns",
        "gpu_ops",
        "kernels_with_launch",
    ] {
        assert_eq!(j[key], before[key], "{key}");
    }
}

/// CPU samples (`--sample=process-tree`): five samples of the launching thread every 2 µs in
/// the 33 µs gap before kernel_b, three inside the sync (in the kernel's `ioctl`, whose
/// kernel-mode frame is not the program's), two after it preparing the launch; one of a
/// process without CUDA work. The gap's details count them and what share of the gap the
/// thread was on CPU (5 × 2 µs of 33 µs); folded-cpu hangs them under the launch.
#[test]
fn sampled_cpu_stacks_say_what_the_cpu_did_during_gaps() {
    let d = tempdir("nsys-samples");
    let p = d.join("sampled.sqlite");
    let mut f = training_fixture(&p, true, true);
    let in_sync = [
        ("do_syscall_64", "[kernel.kallsyms]", 1),
        ("ioctl", "/usr/lib/x86_64-linux-gnu/libc.so.6", 0),
        (
            "cudaStreamSynchronize",
            "/usr/local/cuda/lib64/libcudart.so.12",
            0,
        ),
        ("main", "/usr/bin/python3", 0),
    ];
    let preparing = [
        (
            "at::native::prepare_b",
            "/site-packages/torch/lib/libtorch_cuda.so",
            0,
        ),
        ("main", "/usr/bin/python3", 0),
    ];
    let sample = |f: &mut Fx, id: i64, at: i64, who: i64, frames: &[(&str, &str, i64)]| {
        f.db.execute(
            "INSERT INTO COMPOSITE_EVENTS VALUES (?1, ?2, 3, 1, ?3, 0)",
            params![id, at, who],
        )
        .unwrap();
        for (depth, (sym, module, kernel)) in frames.iter().enumerate() {
            let (s, m) = (f.s(sym), f.s(module));
            f.db.execute(
                "INSERT INTO SAMPLING_CALLCHAINS (id, symbol, module, kernelMode, unresolved,
                     stackDepth) VALUES (?1, ?2, ?3, ?4, 0, ?5)",
                params![id, s, m, kernel, depth as i64],
            )
            .unwrap();
        }
    };
    for (i, at) in [46_000, 48_000, 50_000].into_iter().enumerate() {
        sample(&mut f, i as i64 + 1, at, gid(PID, TID), &in_sync);
    }
    for (i, at) in [52_000, 54_000].into_iter().enumerate() {
        sample(&mut f, i as i64 + 4, at, gid(PID, TID), &preparing);
    }
    sample(&mut f, 9, 47_000, gid(PID + 1, PID + 1), &preparing);
    drop(f);
    let j = report_json(&p, &[]);
    let g = gap(&j, 33_000);
    assert_eq!(g["cpu_samples"], 5);
    let on = g["on_cpu"].as_f64().unwrap();
    assert!((on - 10.0 / 33.0).abs() < 1e-9, "{on}");
    assert_eq!(j["notes"].as_array().unwrap().len(), 1, "{}", j["notes"]);
    let folded = String::from_utf8(report(&p, &["--format", "folded-cpu"]).stdout).unwrap();
    let under = "train_step;prefetch;main [python3];python3+0x55aa;\
                 at::native::launch_b [libtorch_cuda.so];cudaLaunchKernel_v7000;kernel_b;\
                 (CPU during these gaps);main [python3];";
    assert!(
        folded.contains(&format!(
            "{under}cudaStreamSynchronize [libcudart.so.12];ioctl [libc.so.6] "
        )),
        "{folded}"
    );
    assert!(
        folded.contains(&format!("{under}at::native::prepare_b [libtorch_cuda.so] ")),
        "{folded}"
    );
    assert!(!folded.contains("do_syscall_64"), "{folded}");
    let st = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
    assert_eq!(st.cpu_samples, 5);
    assert_eq!(st.procs[0].sample_period_ns, 2_000);
    assert_eq!(st.skipped["CPU sample of a process without CUDA work"], 1);
}

#[test]
fn fixture_steps_are_the_nvtx_ranges_named() {
    let d = tempdir("nsys-steps");
    let p = d.join("train.sqlite");
    training_fixture(&p, true, true);
    let j = report_json(&p, &["--step", "train_step"]);
    let s = &j["steps"];
    assert_eq!(s["count"], 2);
    assert_eq!(s["source"], "range");
    // The steps are the ranges, [1, 99) and [101, 199) µs, within the capture: the ops' span,
    // from 15 to 180 µs. So [15, 99) and [101, 180), 84 and 79 µs (the median of two is the
    // lower), which add up to no more than the capture's 165 µs.
    assert_eq!(s["median_ns"], 79_000);
    // Device idle in the first: 20-23 (3), 25-58 (33), 70-99 (29): 65 µs; in the second:
    // 101-113 (12), 118-119 (1), 125-160 (35), 161-172 (11): 59 µs.
    assert_eq!(s["idle_median_ns"], 59_000);
    assert_eq!(j["window"]["to_ns"], 165_000);
    // A name no range has falls back to the other step finders (an op's name here).
    let j = report_json(&p, &["--step", "kernel_a"]);
    assert_eq!(j["steps"]["source"], "op");
}

#[test]
fn fixture_without_chains_or_nvtx_says_what_it_lacks() {
    let d = tempdir("nsys-lacks");
    let p = d.join("bare.sqlite");
    training_fixture(&p, false, false);
    let j = report_json(&p, &[]);
    assert_eq!(j["device_idle_ns"], 126_000);
    assert_eq!(j["kernels_with_launch"], 5);
    assert_eq!(j["kernels_with_stack"], 0);
    assert_eq!(
        j["notes"],
        json!([
            "Nsight Systems 2025.1.1.110 export, schema 3.17.1",
            "no CUDA_CALLCHAINS: launches have no native stacks (capture with --cudabacktrace=all)",
            "no NVTX_EVENTS: no NVTX ranges in the call tree or as steps (capture with --trace=nvtx)"
        ])
    );
    let text = String::from_utf8(report(&p, &[]).stdout).unwrap();
    assert!(
        text.contains("note: no CUDA_CALLCHAINS: launches have no native stacks"),
        "{text}"
    );
    // Without ranges a range name is no step.
    let j = report_json(&p, &["--step", "train_step"]);
    assert!(j.get("steps").is_none() || j["steps"]["source"] != "range");
}

#[test]
fn processes_keep_their_own_correlation_ids_and_mpi_ranks() {
    // Two ranks whose calls share correlation id 1 (nsys numbers each process's calls from 1).
    let d = tempdir("nsys-ranks");
    let p = d.join("ranks.sqlite");
    let mut f = Fx::new(&p);
    let (a, b) = (f.s("cudaLaunchKernel_v7000"), f.s("cuLaunchKernelEx"));
    for (pid, name, rank) in [(PID, a, 0), (5000, b, 1)] {
        let sql = "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?1, ?2, 0, ?3, 1, ?4, 0, NULL)";
        let t0 = 1_000 * rank;
        f.db.execute(sql, params![t0, t0 + 500, gid(pid, pid + 1), name])
            .unwrap();
        let n = f.s(&format!("kernel_of_rank{rank}"));
        f.db.execute(
            "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL (start, end, deviceId, contextId, streamId,
             correlationId, globalPid, demangledName, shortName, registersPerThread, gridX, gridY,
             gridZ, blockX, blockY, blockZ, staticSharedMemory, dynamicSharedMemory,
             localMemoryPerThread, localMemoryTotal, gridId)
             VALUES (?1, ?2, ?3, 1, 7, 1, ?4, ?5, ?5, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1)",
            params![t0 + 600, t0 + 900, rank, gid(pid, 0), n],
        )
        .unwrap();
        f.db.execute_batch("CREATE TABLE IF NOT EXISTS MPI_RANKS (globalTid INTEGER NOT NULL, rank INTEGER NOT NULL)")
            .unwrap();
        f.db.execute(
            "INSERT INTO MPI_RANKS VALUES (?1, ?2)",
            params![gid(pid, pid + 1), rank],
        )
        .unwrap();
    }
    drop(f);
    let st = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
    assert_eq!(st.procs.len(), 2);
    for lane in 0..st.lanes.len() {
        let l = &st.lanes[lane];
        let proc = &st.procs[l.key.proc as usize];
        let op = l.op(0);
        let call = st.api_of(lane, &op).unwrap();
        let (want, rank) = if proc.pid == PID as u32 {
            ("cudaLaunchKernel_v7000", 0)
        } else {
            ("cuLaunchKernelEx", 1)
        };
        assert_eq!(st.names.get(call.name), want);
        assert_eq!(proc.rank, rank);
        assert_eq!(l.key.device, rank as u32);
        assert_eq!(st.lane_label(lane), format!("r{rank} gpu{rank} s7"));
    }
    let j = report_json(&p, &[]);
    let ranks: Vec<&Value> = j["processes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["rank"])
        .collect();
    assert_eq!(ranks, [&json!(0), &json!(1)]);
}

#[test]
fn gzipped_export_and_nsys_report_read_as_the_export() {
    let d = tempdir("nsys-forms");
    let p = d.join("train.sqlite");
    training_fixture(&p, true, true);
    let plain = report_json(&p, &[]);

    // Gzipped.
    let gz = d.join("train.sqlite.gz");
    let mut enc =
        flate2::write::GzEncoder::new(std::fs::File::create(&gz).unwrap(), Default::default());
    std::io::copy(&mut std::fs::File::open(&p).unwrap(), &mut enc).unwrap();
    enc.finish().unwrap();
    let j = report_json(&gz, &[]);
    assert_eq!(j["source"], "train.sqlite.gz");
    assert_eq!(j["top_gaps"], plain["top_gaps"]);

    // A .nsys-rep, through an `nsys` on PATH that writes the fixture where it is told to.
    let rep = d.join("run.nsys-rep");
    std::fs::write(&rep, b"NVIDIA Tegra Profiler Report 2025@1@1@110-fixture").unwrap();
    let bindir = d.join("bin");
    std::fs::create_dir_all(&bindir).unwrap();
    let nsys = bindir.join("nsys");
    std::fs::write(
        &nsys,
        format!(
            "#!/bin/sh\n[ \"$1 $2 $3\" = 'export --type sqlite' ] || exit 3\n\
             while [ $# -gt 0 ]; do [ \"$1\" = --output ] && out=$2; shift; done\n\
             cp '{}' \"$out\"\n",
            p.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&nsys, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!("{}:/usr/bin:/bin", bindir.display());
    let j = json_of(run_report(&rep, &["--format", "json"], Some(&path)));
    assert_eq!(j["source"], "run.nsys-rep");
    assert_eq!(j["top_gaps"], plain["top_gaps"]);

    // An nsys that fails: its last line of stderr is said.
    std::fs::write(
        &nsys,
        "#!/bin/sh\necho 'noise' >&2\necho 'Error: corrupt report' >&2\nexit 1\n",
    )
    .unwrap();
    let err = fails_saying(&rep, Some(&path), &["nsys export --type sqlite` failed"]);
    assert!(err.ends_with("Error: corrupt report"), "{err}");

    // No nsys on PATH: what to run instead.
    let want = ["no `nsys` is on PATH", "run `nsys export --type sqlite"];
    fails_saying(&rep, Some("/nonexistent"), &want);
}

#[test]
fn sqlite_files_that_are_not_readable_exports_are_clear_errors() {
    let d = tempdir("nsys-bad");
    const STRINGS: &str =
        "CREATE TABLE StringIds (id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL);";
    // Some other program's database.
    let p = sql_file(
        &d,
        "other.sqlite",
        "CREATE TABLE notes (id INTEGER, body TEXT);",
    );
    fails_saying(
        &p,
        None,
        &["not an Nsight Systems export (no StringIds table)"],
    );
    // An export of a capture without CUDA tracing.
    let sql = format!("{STRINGS} CREATE TABLE OSRT_API (start INTEGER NOT NULL, end INTEGER);");
    let p = sql_file(&d, "cpu_only.sqlite", &sql);
    fails_saying(&p, None, &["without GPU activity", "--trace=cuda"]);
    // GPU tables without a row.
    let p = d.join("empty.sqlite");
    Fx::new(&p);
    fails_saying(&p, None, &["without GPU ops"]);
    // A kernel table without the column every row needs.
    let sql = format!(
        "{STRINGS} CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (end INTEGER, streamId INTEGER);
         INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (10, 7);"
    );
    let p = sql_file(&d, "nostart.sqlite", &sql);
    fails_saying(
        &p,
        None,
        &["CUPTI_ACTIVITY_KIND_KERNEL has no column start"],
    );
    // A value of the wrong type: the table and the column are named.
    let p = d.join("texttime.sqlite");
    let mut f = Fx::new(&p);
    f.kernel(1_000, 2_000, 7, 1, "k", None);
    let bad = "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'soon'";
    f.db.execute_batch(bad).unwrap();
    drop(f);
    fails_saying(&p, None, &["CUPTI_ACTIVITY_KIND_KERNEL: column start"]);
    // The magic and then garbage: no database.
    let p = d.join("truncated.sqlite");
    let mut bytes = b"SQLite format 3\0".to_vec();
    bytes.extend(std::iter::repeat_n(0xAB, 300));
    std::fs::write(&p, bytes).unwrap();
    fails_saying(&p, None, &["not a readable SQLite database"]);
    // A .nsys-rep cut short is nsys's to judge; gaptop never reads it itself.
    let p = d.join("short.nsys-rep");
    std::fs::write(&p, b"NVIDIA Tegra Profiler Report").unwrap();
    fails_saying(&p, Some("/nonexistent"), &["no `nsys` is on PATH"]);
}

// ---------------------------------------------------------------------------------------------
// Real exports (tests/data/nsys/README.md: origin, license, and how each figure was computed).

/// The repository's own record of the run's GPU ops (pipit's test data, the ops of the same
/// capture as its rows of `Enter`/`Leave` events): kernels, all ops, and the device idle of
/// their union over their span.
fn cloverleaf_csv_figures() -> (u64, u64, i64) {
    let f = std::fs::File::open(data("cloverleaf_gpu_trace.csv.gz")).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(f), &mut text).unwrap();
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |n: &str| head.iter().position(|h| *h == n).unwrap();
    let (ty, ev, ts, other) = (
        col("type"),
        col("Event Type"),
        col("Timestamp (ns)"),
        col("_matching_timestamp"),
    );
    let mut ops: Vec<(i64, i64)> = Vec::new();
    let mut kernels = 0;
    for l in lines {
        let f: Vec<&str> = l.split(',').collect();
        if f[ev] == "Enter" {
            ops.push((f[ts].parse().unwrap(), f[other].parse().unwrap()));
            kernels += (f[ty] == "kernel") as u64;
        }
    }
    ops.sort();
    let mut idle = 0;
    let mut end = ops[0].1;
    for &(s, e) in &ops[1..] {
        idle += (s - end).max(0);
        end = end.max(e);
    }
    (kernels, ops.len() as u64, idle)
}

#[test]
fn real_cloverleaf_export_agrees_with_the_runs_own_gpu_trace() {
    let (kernels, ops, idle) = cloverleaf_csv_figures();
    assert_eq!((kernels, ops, idle), (1312, 1591, 38_612_347));
    let j = report_json(&data("cloverleaf.sqlite.gz"), &[]);
    assert_eq!(j["kernels"], kernels);
    assert_eq!(j["gpu_ops"], ops);
    assert_eq!(j["device_idle_ns"], idle);
    assert_eq!(j["kernels_with_launch"], kernels);
    assert_eq!(
        j["notes"],
        json!([
            "Nsight Systems 2024.5.1.113 export, schema 3.13.2",
            "no CUPTI_ACTIVITY_KIND_MEMSET: no memsets",
            "no CUDA_CALLCHAINS: launches have no native stacks (capture with --cudabacktrace=all)",
            "no NVTX_EVENTS: no NVTX ranges in the call tree or as steps (capture with --trace=nvtx)",
            "no COMPOSITE_EVENTS: gaps do not say what the CPU did (capture with --sample=process-tree)"
        ])
    );
    // Its first advice is a sync with no stack, named by its call alone; the launch sites
    // whose gaps follow it name it as the sync to remove.
    let first = &j["advice"][0];
    assert_eq!(
        first["site"], "(no Python stack) cudaDeviceSynchronize_v3020",
        "{first}"
    );
    assert_eq!(first["verdict"], "sync", "{first}");
    let following = j["advice"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["sync_in"] == first["site"])
        .count();
    assert!(following >= 3, "{}", j["advice"]);
}

#[test]
fn real_saxpy_export_has_native_stacks_under_nvtx_and_nvtx_steps() {
    // An older export (schema 2.9.1, EXPORT_META_DATA) with call chains.
    let p = data("saxpy_mpi_cuda.sqlite.gz");
    let j = report_json(&p, &[]);
    assert_eq!(j["kernels"], 5);
    assert_eq!(j["gpu_ops"], 20);
    assert_eq!(j["device_idle_ns"], 724_054_763);
    assert_eq!(j["kernels_with_stack"], 5);
    assert_eq!(
        j["notes"],
        json!([
            "Nsight Systems 2022.2.1.31 export, schema 2.9.1",
            "no COMPOSITE_EVENTS: gaps do not say what the CPU did (capture with --sample=process-tree)"
        ])
    );
    // Each launch sits in its `saxpy` NVTX range, above the chain nsys took (outermost first,
    // the CUDA libraries' and the profiler's frames next to the call left out).
    let st = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
    let proc = &st.procs[0];
    let lane = &st.lanes[0];
    assert_eq!(
        lane.iter()
            .filter(|o| o.kind == gaptop_core::model::records::OpKind::Kernel)
            .count(),
        5
    );
    for op in lane
        .iter()
        .filter(|o| o.kind == gaptop_core::model::records::OpKind::Kernel)
    {
        let a = proc.api_by_corr(op.corr).unwrap();
        assert_eq!(st.names.get(a.name), "cudaLaunchKernel_v7000");
        let frames = st.frame_strings(a.stack);
        assert_eq!(
            frames[..4],
            [
                "saxpy",
                "_start [saxpy-mpi-cuda]",
                "__libc_start_main [libc-2.31.so]",
                "main [saxpy-mpi-cuda]"
            ],
            "{frames:?}"
        );
        assert!(!frames
            .iter()
            .any(|f| f.contains("libcupti") || f.contains("libcuda.so")));
    }
    let j = report_json(&p, &["--step", "saxpy"]);
    assert_eq!(j["steps"]["count"], 5);
    assert_eq!(j["steps"]["source"], "range");
    // Without a name, the steps are the program's own ranges too: nsys' MPI tracing annotates
    // every MPI call (17 of them, more than the 5 `saxpy`) in an `MPI` domain of its own, and a
    // library's calls are not the program's phases.
    // (Named, the ranges are the steps; found, a step runs from one `saxpy` to the next.)
    let auto = &report_json(&p, &[])["steps"];
    assert_eq!(
        (&auto["name"], &auto["source"], &auto["count"]),
        (
            &j["steps"]["name"],
            &j["steps"]["source"],
            &j["steps"]["count"]
        )
    );
    // The ranges are the processes' NVTX ranges (the timeline's lane), with their domains.
    let st = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
    let mut by_domain: std::collections::BTreeMap<(String, String), usize> = Default::default();
    for pr in &st.procs {
        for v in pr.ranges.values() {
            for r in v {
                let d = st.names.get(r.domain).to_string();
                let n = st.names.get(r.name);
                let n = if n.starts_with("MPI_") { "MPI_*" } else { n };
                *by_domain.entry((d, n.to_string())).or_default() += 1;
            }
        }
    }
    assert_eq!(by_domain[&(String::new(), "saxpy".to_string())], 5);
    assert_eq!(by_domain[&("MPI".to_string(), "MPI_*".to_string())], 17);
    // Its saxpy kernels run ~20 ms after gaps of ~7 µs: the host keeps up, so the gaps are no
    // launch overhead (which gaptop called them) but a sliver of a busy stretch. The same
    // function's blocking copies have a row of their own, as a sync.
    let j = report_json(&p, &[]);
    let rows: Vec<&Value> = j["advice"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| {
            a["site"]
                .as_str()
                .unwrap()
                .starts_with("cudaError cudaLaunchKernel<char>")
        })
        .collect();
    let verdicts: Vec<&str> = rows
        .iter()
        .map(|a| a["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(verdicts, ["sync", "busy"], "{rows:?}");
    assert!(
        rows[0]["text"].as_str().unwrap().contains("cudaMemcpy"),
        "{}",
        rows[0]
    );
    let k = rows[1];
    assert_eq!(k["verdict"], "busy", "{k}");
    assert!(k["mean_op_ns"].as_i64().unwrap() > 10_000_000, "{k}");
    assert!(k["text"].as_str().unwrap().contains("little to win"), "{k}");
}

#[test]
fn real_nvfuser_export_puts_its_nvtx_ranges_in_the_tree() {
    let p = data("nvfuser_cross_entropy.sqlite.gz");
    let j = report_json(&p, &[]);
    assert_eq!(j["kernels"], 18);
    assert_eq!(j["gpu_ops"], 24);
    assert_eq!(j["device_idle_ns"], 3_158_778_689_i64);
    assert_eq!(j["kernels_with_launch"], 18);
    // The kernels nvFuser launched ran inside its NVTX ranges; the others (PyTorch's) did not.
    assert_eq!(j["kernels_with_stack"], 8);
    assert_eq!(j["processes"][0]["label"], "pytest");
    // The pointwise kernel's launch (correlation id 1754), under the ranges that held it.
    let g = j["top_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| {
            g["next_op"]
                .as_str()
                .unwrap()
                .contains("nvfuser_pointwise_f0_c1_r0_g4")
        })
        .unwrap();
    assert_eq!(
        g["frames"].as_array().unwrap()[..9],
        json!([
            "FusionExecutorCache::runFusionWithInputs",
            "FusionKernelRuntime::runWithInputs",
            "FusionKernelRuntime::runSegmentsWithInputs",
            "FusionKernelRuntime::runKernelWithInput",
            "ExecutorDispatch::run2",
            "KernelExecutor::runFusion",
            "KernelExecutor::runFusion::execute_kernel",
            "ExecutorRunFusion::cuLaunchKernel",
            "cuLaunchKernel"
        ])
        .as_array()
        .unwrap()[..]
    );
}

#[test]
fn the_ui_says_what_an_export_lacks_as_it_opens() {
    use gaptop::app::{App, SourceState};
    let d = tempdir("nsys-ui");
    let p = d.join("bare.sqlite");
    training_fixture(&p, false, true);
    let app = App::new(
        gaptop_core::sources::load_path(&p, usize::MAX).unwrap(),
        SourceState::File,
    );
    assert_eq!(
        app.message,
        "no CUDA_CALLCHAINS: launches have no native stacks (capture with --cudabacktrace=all)"
    );
    // An export with all of it says nothing.
    let p = d.join("full.sqlite");
    training_fixture(&p, true, true);
    let app = App::new(
        gaptop_core::sources::load_path(&p, usize::MAX).unwrap(),
        SourceState::File,
    );
    assert_eq!(app.message, "");
}

#[test]
fn the_ui_tree_shows_nvtx_ranges_of_a_real_export() {
    use gaptop::app::{App, SourceState};
    use ratatui::{backend::TestBackend, Terminal};
    let st = gaptop_core::sources::load_path(&data("nvfuser_cross_entropy.sqlite.gz"), usize::MAX);
    let mut a = App::new(st.unwrap(), SourceState::File);
    a.refresh(true);
    let (w, h) = (200, 50);
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    gaptop::views::render(&mut t, &mut a).unwrap();
    let buf = t.backend().buffer().clone();
    let screen: String = (0..h)
        .map(|y| (0..w).map(|x| buf[(x, y)].symbol()).collect::<String>() + "\n")
        .collect();
    // The call tree's top-down roots: nvFuser's outermost NVTX range holds the launches of its
    // kernels, beside the launches made outside any range.
    assert!(
        screen.contains("FusionExecutorCache::runFusionWithInputs"),
        "{screen}"
    );
    // The status line says what the export lacked.
    assert!(screen.contains("no CUDA_CALLCHAINS"), "{screen}");
}

// ---------------------------------------------------------------------------------------------
// Python backtraces (`--python-backtrace=cuda`, `--python-sampling`): NVTX marks of nsys's
// `Python Backtrace` domain whose payloads (`NVTX_EVENTS.binaryData`) hold the frames.

/// A `PythonBacktrace` payload laid out as [`PAYLOAD_SCHEMA`] says (not as nsys 2023.4 does,
/// so that a reader of fixed offsets fails): source at 12, count at 16, frames of 32 bytes from
/// 24, innermost first, each its line at 0, its function's string id at 8 and its file's at 20.
fn odd_payload(source: u32, frames: &[(i64, i64, u32)]) -> Vec<u8> {
    let mut b = vec![0xAB_u8; 24 + 32 * frames.len()];
    b[12..16].copy_from_slice(&source.to_le_bytes());
    b[16..20].copy_from_slice(&(frames.len() as u32).to_le_bytes());
    for (i, &(function, file, line)) in frames.iter().enumerate() {
        let at = 24 + 32 * i;
        b[at..at + 4].copy_from_slice(&line.to_le_bytes());
        b[at + 8..at + 16].copy_from_slice(&function.to_le_bytes());
        b[at + 20..at + 28].copy_from_slice(&file.to_le_bytes());
    }
    b
}

/// The payload schema tables as NVIDIA documents them (schema 3.28.1), describing
/// [`odd_payload`]'s layout; periodic samples have source 9.
const PAYLOAD_SCHEMA: &str = "
CREATE TABLE NVTX_PAYLOAD_SCHEMAS (domainId INTEGER, schemaId INTEGER, name TEXT, type INTEGER,
    flags INTEGER, numEntries INTEGER, payloadSize INTEGER, alignTo INTEGER);
CREATE TABLE NVTX_PAYLOAD_SCHEMA_ENTRIES (domainId INTEGER, schemaId INTEGER, idx INTEGER,
    flags INTEGER, type INTEGER, name TEXT, description TEXT, arrayOrUnionDetail INTEGER,
    offset INTEGER);
CREATE TABLE NVTX_PAYLOAD_ENUM_ENTRIES (domainId INTEGER, schemaId INTEGER, idx INTEGER,
    name TEXT, value INTEGER, isFlag INTEGER);
INSERT INTO NVTX_PAYLOAD_SCHEMAS VALUES (5, 901, 'PythonFrame', 1, 0, 3, 32, 8),
    (5, 900, 'PythonBacktrace', 1, 0, 4, 0, 8), (6, 900, 'SomethingElse', 1, 0, 1, 4, 4);
INSERT INTO NVTX_PAYLOAD_SCHEMA_ENTRIES VALUES
    (5, 900, 0, 0, NULL, 'Thread state', NULL, NULL, 8),
    (5, 900, 1, 0, NULL, 'Source', NULL, NULL, 12),
    (5, 900, 2, 0, NULL, 'Frames count', NULL, NULL, 16),
    (5, 900, 3, 0, NULL, 'Frames', NULL, NULL, 24),
    (5, 901, 0, 0, NULL, 'Function', NULL, NULL, 8),
    (5, 901, 1, 0, NULL, 'File', NULL, NULL, 20),
    (5, 901, 2, 0, NULL, 'Line', NULL, NULL, 0),
    (6, 900, 0, 0, NULL, 'Frames', NULL, NULL, 0);
INSERT INTO NVTX_PAYLOAD_ENUM_ENTRIES VALUES (5, 902, 0, 'Periodic sampling', 9, 0),
    (5, 902, 1, 'Event based', 2, 0);
";

#[test]
fn python_backtraces_replace_the_interpreters_frames_under_nvtx() {
    let d = tempdir("nsys-python");
    let p = d.join("python.sqlite");
    let mut f = training_fixture(&p, true, true);
    f.db.execute_batch(PAYLOAD_SCHEMA).unwrap();
    f.db.execute(
        "INSERT INTO NVTX_EVENTS (start, eventType, text, globalTid, domainId)
         VALUES (0, 75, 'Python Backtrace', ?1, 5)",
        params![gid(PID, TID)],
    )
    .unwrap();
    let (train, model, fa, fb, wait) = (
        f.s("train"),
        f.s("/src/model.py"),
        f.s("forward_a"),
        f.s("forward_b"),
        f.s("wait_for_loss"),
    );
    let file = f.s("/src/train.py");
    let mark = |f: &mut Fx, at: i64, tid: i64, payload: Vec<u8>| {
        f.db.execute(
            "INSERT INTO NVTX_EVENTS (start, eventType, globalTid, domainId, binaryData)
             VALUES (?1, 34, ?2, 5, ?3)",
            params![at, gid(PID, tid), payload],
        )
        .unwrap();
    };
    // Just before kernel_a's launch starts (the chain in the call's own row, as newer exports
    // give it: nsys takes the backtrace as it enters the call, before CUPTI's start of it); at
    // the start of kernel_b's launch's backtrace row (nsys 2023.4).
    mark(
        &mut f,
        9_800,
        TID,
        odd_payload(2, &[(fa, model, 8), (train, file, 40)]),
    );
    mark(
        &mut f,
        54_900,
        TID,
        odd_payload(2, &[(fb, model, 12), (train, file, 40)]),
    );
    // A runtime call with a driver call inside it: both get the backtrace.
    f.call(141_000, 145_000, 8, "cudaFuncGetAttributes_v3020", 0, None);
    f.call(142_000, 143_000, 9, "cuFuncGetAttribute", 1, None);
    let attrs = f.s("attributes");
    mark(
        &mut f,
        140_900,
        TID,
        odd_payload(2, &[(attrs, model, 3), (train, file, 41)]),
    );
    // One in no call (nor just before one).
    mark(&mut f, 90_000, TID, odd_payload(2, &[(train, file, 42)]));
    // Periodic samples on nsys's sampling thread, during the 33 µs gap before kernel_b.
    for at in [44_000, 46_000, 48_000] {
        mark(
            &mut f,
            at,
            TID + 5,
            odd_payload(9, &[(wait, file, 50), (train, file, 40)]),
        );
    }
    // One whose payload is cut inside its header.
    mark(&mut f, 80_000, TID, vec![1, 2, 3]);
    drop(f);

    let st = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
    let proc = &st.procs[0];
    let frames = |corr| st.frame_strings(proc.api_by_corr(corr).unwrap().stack);
    // NVTX ranges outermost, then the Python frames where the chain's interpreter frames were
    // (`main [python3]`, `python3+0x55aa`), then the native frames below them; the CUDA
    // libraries' next to the call are left out as before.
    assert_eq!(
        frames(1),
        [
            "train_step",
            "forward",
            "/src/train.py(40): train",
            "/src/model.py(8): forward_a",
            "at::native::launch_a [libtorch_cuda.so]"
        ]
    );
    assert_eq!(
        frames(4),
        [
            "train_step",
            "prefetch",
            "/src/train.py(40): train",
            "/src/model.py(12): forward_b",
            "at::native::launch_b [libtorch_cuda.so]"
        ]
    );
    for corr in [8, 9] {
        assert_eq!(
            frames(corr),
            [
                "train_step",
                "/src/train.py(41): train",
                "/src/model.py(3): attributes"
            ]
        );
    }
    // A call without a backtrace keeps what it had.
    assert_eq!(frames(6), ["train_step"]);
    assert_eq!(st.skipped["Python backtrace with an unreadable payload"], 1);
    assert_eq!(
        st.skipped["Python backtrace taken in no traced CUDA call of its thread"],
        1
    );
    // The fixture's own mark is skipped and counted; the backtraces are not marks to skip.
    assert_eq!(st.skipped["NVTX mark"], 1, "{:?}", st.skipped);
    assert!(
        st.notes.iter().any(|n| n
            == "Python backtraces: 4 taken in CUDA calls, 4 of 9 calls given their Python frames"),
        "{:?}",
        st.notes
    );
    assert!(
        st.notes.iter().any(|n| n.starts_with(
            "Python samples (--python-sampling): 3 as the threads' CPU samples; 3 taken on \
             nsys's sampling thread given to the one thread that made CUDA calls"
        )),
        "{:?}",
        st.notes
    );
    // The samples say what the launching thread did during the gap before kernel_b.
    let j = report_json(&p, &[]);
    assert_eq!(gap(&j, 33_000)["cpu_samples"], 3);
    let folded = String::from_utf8(report(&p, &["--format", "folded-cpu"]).stdout).unwrap();
    assert!(
        folded.contains(
            "(CPU during these gaps);/src/train.py(40): train;/src/train.py(50): wait_for_loss "
        ),
        "{folded}"
    );
}

/// The note of `ctypes_pybt`'s report: each of its 423 backtraces gave its call Python frames.
fn assert_all_calls_with_chains_got_python(j: &Value) {
    assert_has_note(
        j,
        "Python backtraces: 423 taken in CUDA calls, 423 of 836 calls given their Python frames",
    );
}

/// `note` is one of a report's notes.
fn assert_has_note(j: &Value, note: &str) {
    assert!(
        j["notes"].as_array().unwrap().contains(&json!(note)),
        "{}",
        j["notes"]
    );
}

#[test]
fn real_python_backtraces_name_the_python_code_of_each_launch() {
    // nsys 2023.4 on the H200: ctypes_launch.py's CUDA runtime calls with
    // --python-backtrace=cuda --cudabacktrace=all; the payloads that nsys's SQLite export of
    // that version drops written back from its JSON export (tests/data/nsys/README.md).
    let p = data("ctypes_pybt.sqlite.gz");
    let j = report_json(&p, &[]);
    assert_eq!(j["gpu_ops"], 402);
    assert_eq!(j["device_idle_ns"], 23_590_549);
    assert_all_calls_with_chains_got_python(&j);
    let f = "/work/main/gpu/ctypes_launch.py";
    let st = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
    let proc = &st.procs[0];
    let mut memsets = 0;
    for op in st.lanes[0].iter() {
        let a = proc.api_by_corr(op.corr).unwrap();
        let frames = st.frame_strings(a.stack);
        if st.names.get(a.name) != "cudaMemsetAsync_v3020" {
            continue;
        }
        memsets += 1;
        assert_eq!(
            frames[..3],
            [
                format!("{f}(78): <module>"),
                format!("{f}(72): step"),
                format!("{f}(58): launch")
            ],
            "{frames:?}"
        );
        // Below Python: ctypes and libffi, down to the call; the interpreter's frames are gone.
        assert!(frames[3].starts_with("_ctypes.cpython-312"), "{frames:?}");
        assert!(
            !frames.iter().any(|x| x.contains("python3.12]")),
            "{frames:?}"
        );
    }
    assert_eq!(memsets, 400);
    // The site to fix is the Python line, as gaptop's own recording of the same workload on
    // the same machine names it (its gaps are shorter: nsys's backtraces cost time).
    let sites = |j: &Value| -> Vec<(String, u64)> {
        j["advice"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                (
                    a["site"].as_str().unwrap().to_string(),
                    a["gaps"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let own = report_json(&data("ctypes_gaptop.rec"), &[]);
    assert_eq!(own["gpu_ops"], 402);
    assert_eq!(sites(&j), sites(&own));
    assert_eq!(
        sites(&j)[0],
        ("launch  ctypes_launch.py:58".to_string(), 400)
    );
    let top3 = |j: &Value| j["top_stacks"][0]["frames"].as_array().unwrap()[..3].to_vec();
    assert_eq!(top3(&j), top3(&own));
    // The steps are the program's 20 calls of `step` (20 launches from one line of `launch`,
    // then a context sync at another line of `step`, which tells one call from the next), in
    // both captures: not one step a launch.
    for j in [&j, &own] {
        let s = &j["steps"];
        assert_eq!(
            (&s["count"], &s["source"], &s["name"]),
            (
                &Value::from(20),
                &Value::from("structure"),
                &Value::from("step")
            ),
            "{s}"
        );
    }
}

#[test]
fn real_export_without_payloads_says_so_and_keeps_the_native_chains() {
    // The same capture as nsys 2023.4 exports it: the marks, not their payloads.
    let p = data("ctypes_pybt_2023.sqlite.gz");
    let j = report_json(&p, &[]);
    assert_eq!(
        (j["gpu_ops"].as_u64(), j["device_idle_ns"].as_u64()),
        (Some(402), Some(23_590_549))
    );
    assert!(
        j["notes"].as_array().unwrap().iter().any(|n| n
            .as_str()
            .unwrap()
            .starts_with("NVTX_EVENTS holds 423 Python backtraces without their payloads")),
        "{}",
        j["notes"]
    );
    let top = j["top_stacks"][0]["frames"].as_array().unwrap();
    assert!(
        top.iter()
            .all(|f| !f.as_str().unwrap().contains("ctypes_launch.py")),
        "{top:?}"
    );
    assert!(
        top.iter().any(|f| f == "ffi_call [libffi.so.8.1.4]"),
        "{top:?}"
    );
    assert!(
        j["skipped"].as_object().unwrap().is_empty(),
        "{}",
        j["skipped"]
    );
}

#[test]
fn real_python_samples_say_what_python_ran_during_gaps() {
    // nsys 2023.4 on the H200, --python-sampling at 1 kHz: 401 samples over the process's
    // life, taken on nsys's own sampling thread; 10 fall in the CUDA work's 10 ms.
    let p = data("ctypes_pysample.sqlite.gz");
    let j = report_json(&p, &[]);
    assert_eq!(
        (j["gpu_ops"].as_u64(), j["device_idle_ns"].as_u64()),
        (Some(402), Some(9_636_780))
    );
    assert_has_note(
        &j,
        "Python samples (--python-sampling): 401 as the threads' CPU samples; 401 taken on \
         nsys's sampling thread given to the one thread that made CUDA calls",
    );
    let folded = String::from_utf8(report(&p, &["--format", "folded-cpu"]).stdout).unwrap();
    let f = "/work/main/gpu/ctypes_launch.py";
    assert!(
        folded.contains(&format!(
            "(CPU during these gaps);{f}(78): <module>;{f}(72): step;{f}(58): launch "
        )),
        "{folded}"
    );
    // The Python samples say what the CPU did: no note says the gaps cannot.
    assert!(
        !j["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("COMPOSITE")),
        "{}",
        j["notes"]
    );
    let st = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
    assert_eq!(st.cpu_samples, 401);
}

#[test]
fn real_python_backtraces_match_calls_whose_own_row_holds_the_chain() {
    // Newer exports give a call's chain in its own row, without nsys 2023.4's backtrace row,
    // which starts where the backtrace was taken: the same capture rewritten so, each
    // backtrace now a little before its call's start (79 to 1,426 ns).
    let d = tempdir("nsys-python-rows");
    let p = d.join("rows.sqlite");
    let mut raw = Vec::new();
    let gz = std::fs::File::open(data("ctypes_pybt.sqlite.gz")).unwrap();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz), &mut raw).unwrap();
    std::fs::write(&p, raw).unwrap();
    let db = Connection::open(&p).unwrap();
    db.execute_batch(
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME AS c SET callchainId = (SELECT b.callchainId
             FROM CUPTI_ACTIVITY_KIND_RUNTIME b WHERE b.eventClass = 67
             AND b.correlationId = c.correlationId) WHERE c.eventClass <> 67;
         DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE eventClass = 67;",
    )
    .unwrap();
    drop(db);
    let j = report_json(&p, &[]);
    assert_all_calls_with_chains_got_python(&j);
    let f = "/work/main/gpu/ctypes_launch.py";
    let top = j["top_stacks"][0]["frames"].as_array().unwrap();
    assert_eq!(top[2], format!("{f}(58): launch"), "{top:?}");
    assert!(
        top[3].as_str().unwrap().starts_with("_ctypes.cpython-312"),
        "{top:?}"
    );
    assert!(
        j["skipped"].as_object().unwrap().is_empty(),
        "{}",
        j["skipped"]
    );
}

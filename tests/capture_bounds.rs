//! What a capture's bounds hold, whatever the source: a record whose times cannot be right
//! (a Kineto kernel at `ts` 0, an nsys kernel moved by 10^15 ns, what CUPTI leaves of the
//! kernels of a program that died) is dropped, counted and named, and the window stays the
//! capture's (`model::plausible`); and the steps never add up to more than the capture.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use gaptop_core::analysis::steps;
use gaptop_core::model::ranges::Range;
use gaptop_core::model::records::{GpuOp, LaneKey, Ns, OpKind};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;
use gaptop_core::sources::recording::Writer;
use gaptop_wire as w;
use serde_json::{json, Value};
use support::{bin, fixture, root, tempdir};

/// `gaptop report --format FORMAT PATHS...`: its stdout and stderr; it must succeed.
fn report(paths: &[&Path], format: &str) -> (String, String) {
    let out = Command::new(bin())
        .arg("report")
        .args(paths)
        .args(["--format", format])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "report failed: {err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

fn report_json(paths: &[&Path]) -> (Value, String) {
    let (out, err) = report(paths, "json");
    (serde_json::from_str(&out).unwrap(), err)
}

/// The notes of a JSON report that say what was dropped.
fn dropped(j: &Value) -> Vec<String> {
    let notes = j["notes"].as_array().map(Vec::as_slice).unwrap_or_default();
    notes
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .filter(|n| n.starts_with("dropped "))
        .collect()
}

/// A Kineto trace's events with every `ts` moved by `by` µs.
fn shifted(trace: &Value, by: i64) -> Value {
    let mut t = trace.clone();
    for e in t["traceEvents"].as_array_mut().unwrap() {
        if let Some(ts) = e.get("ts").and_then(Value::as_i64) {
            e["ts"] = json!(ts + by);
        }
    }
    t
}

fn write_json(dir: &Path, name: &str, v: &Value) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
    p
}

/// A kernel event on device 0, stream 7.
fn kernel(name: &str, ts: i64, dur: i64, corr: i64) -> Value {
    json!({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": ts, "dur": dur,
           "args": {"device": 0, "stream": 7, "correlation": corr}})
}

/// Microseconds since the epoch, as Kineto's absolute times are (late 2023).
const EPOCH_US: i64 = 1_700_000_000_000_000;

/// The hand-made trace on an absolute clock, with a kernel at `ts` 0 and one of two hours: both
/// dropped, counted and named (on stderr too); the rest reads exactly as without them.
#[test]
fn a_kineto_kernel_at_ts_0_is_dropped_and_named() {
    let d = tempdir("bounds-kineto");
    let base: Value =
        serde_json::from_slice(&std::fs::read(fixture("multi_stream.json")).unwrap()).unwrap();
    let good = shifted(&base, EPOCH_US);
    let mut bad = good.clone();
    let events = bad["traceEvents"].as_array_mut().unwrap();
    events.push(kernel("stray_kernel", 0, 10, 90));
    events.push(kernel(
        "endless_kernel",
        EPOCH_US + 1_000_100,
        7_200_000_000,
        91,
    ));
    let (good, bad) = (
        write_json(&d, "good.json", &good),
        write_json(&d, "bad.json", &bad),
    );
    let (g, err) = report_json(&[&good]);
    assert!(err.is_empty(), "{err}");
    assert!(dropped(&g).is_empty(), "{:?}", g["notes"]);
    let (b, err) = report_json(&[&bad]);
    for k in [
        "gpu_ops",
        "kernels",
        "window",
        "busy_ns",
        "device_idle_ns",
        "idle",
        "origin_ns",
    ] {
        assert_eq!(b[k], g[k], "{k}");
    }
    assert_eq!(
        b["window"]["to_ns"], 150_000,
        "the fixture's 150 µs, not 53 years"
    );
    assert_eq!(b["skipped"]["GPU op with an implausible time"], 1);
    assert_eq!(b["skipped"]["GPU op longer than an hour"], 1);
    let want = [
        "dropped 1 GPU op with an implausible time (`stray_kernel` at 0 ns, 53.9 years before \
         the rest of the capture)",
        "dropped 1 GPU op longer than an hour (`endless_kernel` lasting 2.0 h)",
    ];
    assert_eq!(dropped(&b), want);
    for w in want {
        assert!(err.contains(&format!("gaptop: bad.json: {w}")), "{err}");
    }
    let (text, _) = report(&[&bad], "text");
    assert!(text.contains(&format!("note: {}", want[0])), "{text}");
    assert!(
        text.contains("GPU op with an implausible time: 1"),
        "{text}"
    );
}

/// Two ranks whose hosts' clocks are ten days apart (tests/fixtures/skewed_ranks, rank 1's
/// clock moved): each trace is judged on its own clock, so nothing of rank 1 is dropped and
/// the clocks are aligned on the collectives as before; rank 0's stray kernel is dropped.
#[test]
fn each_rank_is_judged_on_its_own_clock_before_the_clocks_are_aligned() {
    let d = tempdir("bounds-ranks");
    let read = |n: &str| -> Value {
        let p = fixture("skewed_ranks").join(n);
        serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
    };
    let ten_days_ns: i64 = 10 * 86_400 * 1_000_000_000;
    let mut r0 = shifted(&read("rank-0.json"), EPOCH_US);
    r0["traceEvents"]
        .as_array_mut()
        .unwrap()
        .push(kernel("stray_kernel", 0, 10, 99));
    let mut r1 = read("rank-1.json");
    r1["baseTimeNanoseconds"] = json!(990_000_000 + EPOCH_US * 1000 + ten_days_ns);
    let dir = d.join("ranks");
    std::fs::create_dir_all(&dir).unwrap();
    write_json(&dir, "rank-0.json", &r0);
    write_json(&dir, "rank-1.json", &r1);
    let (j, _) = report_json(&[&dir]);
    let (orig, _) = report_json(&[&fixture("skewed_ranks")]);
    assert_eq!(j["gpu_ops"], orig["gpu_ops"]);
    assert_eq!(j["comm"], orig["comm"]);
    assert_eq!(j["window"], orig["window"]);
    assert_eq!(j["skipped"]["GPU op with an implausible time"], 1);
    assert_eq!(dropped(&j).len(), 1, "{:?}", j["notes"]);
    // Rank 1 moved ten days less the 5 ms its host was behind.
    assert_eq!(
        j["clocks"],
        "aligned to rank 0 on the ends of shared collectives: rank 1 -863999.995s"
    );
}

/// A real Nsight Systems export (CloverLeaf) with one kernel moved 10^15 ns (11.6 days) later:
/// that kernel is dropped and named, the window is the export's.
#[test]
fn an_nsys_kernel_moved_by_1e15_ns_is_dropped_and_named() {
    let d = tempdir("bounds-nsys");
    let db = d.join("moved.sqlite");
    std::io::copy(
        &mut flate2::read::GzDecoder::new(
            std::fs::File::open(root().join("tests/data/nsys/cloverleaf.sqlite.gz")).unwrap(),
        ),
        &mut std::fs::File::create(&db).unwrap(),
    )
    .unwrap();
    let (orig, _) = report_json(&[&db]);
    assert!(dropped(&orig).is_empty(), "{:?}", orig["notes"]);
    let c = rusqlite::Connection::open(&db).unwrap();
    let name: String = c
        .query_row(
            "SELECT s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s \
             ON s.id = k.demangledName ORDER BY k.start LIMIT 1 OFFSET 10",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let moved = c
        .execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + 1000000000000000, \
             end = end + 1000000000000000 WHERE rowid = (SELECT rowid FROM \
             CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start LIMIT 1 OFFSET 10)",
            [],
        )
        .unwrap();
    assert_eq!(moved, 1);
    drop(c);
    let (j, err) = report_json(&[&db]);
    assert_eq!(j["gpu_ops"], orig["gpu_ops"].as_u64().unwrap() - 1);
    assert_eq!(j["window"], orig["window"], "342 ms, not 11.6 days");
    assert_eq!(j["skipped"]["GPU op with an implausible time"], 1);
    let notes = dropped(&j);
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(&format!(
            "dropped 1 GPU op with an implausible time (`{name}` at "
        )),
        "{notes:?}"
    );
    assert!(
        notes[0].ends_with("11.6 days after the rest of the capture)"),
        "{notes:?}"
    );
    assert!(err.contains("moved.sqlite: dropped 1 GPU op"), "{err}");
}

const S: u64 = 1_000_000_000;
/// A CUPTI timestamp of late 2026, in ns since the epoch.
const T0: u64 = 1_796_000_000 * S;

/// A recording of a program that died of a device-side assert: ten good steps, then what CUPTI
/// flushed for the kernels that never ran (start and end 0, an end before its start) and a
/// launch whose end is garbage. Those are dropped and named; the timeline is the ten steps.
fn dead_program(dir: &Path) -> PathBuf {
    let path = dir.join("died.rec");
    let mut wr = Writer::new(std::fs::File::create(&path).unwrap()).unwrap();
    let mut f = vec![w::Frame::Hello(w::Hello::new(77, -1, "python3 crash.py"))];
    for (id, text) in [
        (1, "cudaLaunchKernel"),
        (2, "step_kernel"),
        (3, "assert_kernel"),
    ] {
        f.push(w::Frame::Name {
            id,
            text: text.into(),
        });
    }
    let api = |corr: u32, start: u64, end: u64| w::Api {
        start,
        end,
        corr,
        tid: 1,
        name: 1,
        stack: 0,
        outer_corr: 0,
        kind: w::API_LAUNCH,
    };
    let op = |corr: u32, name: u32, start: u64, end: u64| w::Op {
        start,
        end,
        corr,
        name,
        stream: 7,
        ..Default::default()
    };
    for i in 0..10u32 {
        let t = T0 + i as u64 * 10_000_000;
        f.push(w::Frame::Apis(vec![api(i + 1, t, t + 5_000)]));
        f.push(w::Frame::Ops(vec![op(
            i + 1,
            2,
            t + 100_000,
            t + 2_100_000,
        )]));
    }
    // The last flush: launches made, kernels that never ran.
    let t = T0 + 100_000_000;
    f.push(w::Frame::Apis(vec![
        api(11, t, t + 5_000),
        api(12, t + 10_000, u64::MAX - 7),
    ]));
    f.push(w::Frame::Ops(vec![
        op(11, 3, 0, 0),
        op(12, 3, t + 50_000, 0),
        op(13, 2, t + 60_000, t + 70_000),
    ]));
    for fr in &f {
        wr.frame(1, fr).unwrap();
    }
    wr.flush().unwrap();
    path
}

#[test]
fn a_program_that_died_keeps_a_readable_timeline() {
    let d = tempdir("bounds-died");
    let rec = dead_program(&d);
    let (j, err) = report_json(&[&rec]);
    assert_eq!(j["gpu_ops"], 11);
    // From the first kernel's start to the last good one's end: 100 ms less 100 µs, then
    // 70 µs.
    assert_eq!(j["window"]["to_ns"], 99_970_000);
    assert_eq!(j["skipped"]["GPU op with an implausible time"], 1);
    assert_eq!(j["skipped"]["GPU op ending before it starts"], 1);
    assert_eq!(j["skipped"]["API call with an implausible time"], 1);
    let notes = dropped(&j);
    let far = "dropped 1 GPU op with an implausible time (`assert_kernel` at 0 ns, 56.9 years \
               before the rest of the capture)";
    assert!(notes.iter().any(|n| n == far), "{notes:?}");
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("dropped 1 GPU op that ends before it starts (`assert_kernel`")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.starts_with(
            "dropped 1 API call with an implausible time (`cudaLaunchKernel` at 9223372036854775807 ns"
        )),
        "{notes:?}"
    );
    assert!(err.contains(&format!("died.rec: {far}")), "{err}");
    // The UI says so on its status line.
    let st = gaptop_core::sources::load_path(&rec, usize::MAX).unwrap();
    let app = gaptop::app::App::new(st, gaptop::app::SourceState::File);
    assert!(app.message.contains(far), "{}", app.message);
}

/// Steps never add up to more than the capture: a run's `step N` ranges (34 of 59.7 ms, 2.03 s
/// in all) over a store whose ops span 1.775 s (the earlier ones evicted, say) give the steps
/// inside those 1.775 s only.
#[test]
fn steps_never_add_up_to_more_than_the_capture() {
    let ms: Ns = 1_000_000;
    let mut st = Store::default();
    st.add_process(1, -1, "decode");
    let lane = st.lane_id(LaneKey {
        proc: 0,
        device: 0,
        stream: 7,
    });
    let k = st.names.intern("kernel");
    let (lo, hi) = (1_000 * ms, 1_000 * ms + 1_775 * ms);
    let mut t = lo;
    while t < hi {
        st.push_op_unsorted(lane, GpuOp::new(t, t + ms / 2, OpKind::Kernel, k, 0));
        t += ms;
    }
    st.push_op_unsorted(lane, GpuOp::new(hi - ms / 2, hi, OpKind::Kernel, k, 0));
    let ranges = (0..34)
        .map(|i| {
            let s = lo - 255 * ms + i * 59_700_000;
            let name = st.names.intern(&format!("step {i}"));
            Range::new(s, s + 59_700_000, name, 0)
        })
        .collect();
    st.procs[0].set_ranges(1, ranges);
    st.finish_bulk();
    assert_eq!(st.span(), Some((lo, hi)));
    let s = steps::find(&st, Window::all(), None).expect("steps");
    let total: Ns = s.steps.iter().map(|x| x.wall()).sum();
    assert!(
        total <= hi - lo,
        "{} steps, {total} ns in all",
        s.steps.len()
    );
    assert!(s.steps.iter().all(|x| x.start >= lo && x.end <= hi));
    // The ranges that overlap the capture: from the 5th (which starts 16.2 ms before it) to
    // the 34th (which ends 0.2 ms before its end).
    assert_eq!(s.steps.len(), 30);
    assert_eq!(s.steps[0].start, lo);
    assert_eq!(s.median_ns(), 59_700_000);
    // The same holds in any window.
    let w = steps::find(&st, Window::new(lo - 500 * ms, lo + 100 * ms), None).unwrap();
    assert!(w
        .steps
        .iter()
        .all(|x| x.start >= lo && x.end <= lo + 100 * ms));
}

/// Live, the status line says what was dropped as it is dropped.
#[test]
fn live_drops_are_said_on_the_status_line() {
    use gaptop::app::{App, Msg, SourceState};
    use gaptop_core::sources::live::LiveEvent;
    let mut app = App::new(Store::new(1 << 30), SourceState::Live);
    let frames = |fs: Vec<w::Frame>| Msg::Source(LiveEvent::Frames(1, fs));
    let op = |start: u64, end: u64| w::Op {
        start,
        end,
        stream: 7,
        ..Default::default()
    };
    app.update(frames(vec![
        w::Frame::Hello(w::Hello::new(5, -1, "python3")),
        w::Frame::Ops(vec![op(T0, T0 + 1_000), op(T0 + 5_000, T0 + 6_000)]),
    ]));
    assert!(!app.message.contains("dropped"), "{}", app.message);
    app.update(frames(vec![w::Frame::Ops(vec![
        op(0, 0),
        op(T0 + 9_000, T0 + 9_500),
    ])]));
    assert!(
        app.message
            .starts_with("dropped 1 GPU op with an implausible time (`kernel` at 0 ns"),
        "{}",
        app.message
    );
    assert_eq!(app.store.op_count(), 3);
}

/// Times no clock holds: a kernel at `ts` 1e18 µs (past what an i64 of ns holds) and one of
/// `dur` −5 are each dropped, counted and named, never the whole trace refused; a CPU event
/// with a byte flipped (a `ts` that is no number) is skipped and counted; the figures are
/// those of the trace without them.
#[test]
fn absurd_times_and_a_damaged_cpu_event_cost_only_their_event() {
    let d = tempdir("bounds-absurd");
    let base: Value =
        serde_json::from_slice(&std::fs::read(fixture("multi_stream.json")).unwrap()).unwrap();
    let good = shifted(&base, EPOCH_US);
    let (g, _) = report_json(&[&write_json(&d, "good.json", &good)]);
    let cpu = json!({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 0, "tid": 1,
                     "ts": "17000000000#0000", "dur": 5});
    for (name, ev, want) in [
        (
            "huge_ts",
            json!({"ph": "X", "cat": "kernel", "name": "far_kernel", "pid": 0, "tid": 7,
                   "ts": 1e18, "dur": 10, "args": {"device": 0, "stream": 7}}),
            "dropped 1 GPU op with an implausible time (`far_kernel`",
        ),
        (
            "negative_dur",
            kernel("backwards_kernel", EPOCH_US + 1_000_050, -5, 92),
            "dropped 1 GPU op that ends before it starts (`backwards_kernel`",
        ),
        (
            "flipped_cpu",
            cpu,
            "skipped 1 unreadable event (first: event at byte",
        ),
    ] {
        let mut bad = good.clone();
        bad["traceEvents"].as_array_mut().unwrap().push(ev);
        let (b, err) = report_json(&[&write_json(&d, &format!("{name}.json"), &bad)]);
        assert!(err.contains(want), "{name}: {err}");
        let notes = b["notes"].to_string();
        assert!(notes.contains(want), "{name}: {notes}");
        for k in ["gpu_ops", "kernels", "busy_ns", "device_idle_ns"] {
            assert_eq!(b[k], g[k], "{name}: {k}");
        }
    }
}

/// Times a clock can hold but the capture cannot (one kernel each in the 150 µs hand-made
/// trace): `dur` 1e9 µs (16.7 min) and `ts` an hour after the rest are dropped, counted and
/// named, and the figures are those without them; a kernel of two minutes that a
/// `cudaDeviceSynchronize` waits for is kept.
#[test]
fn a_kernel_far_longer_or_later_than_the_capture_is_dropped_and_named() {
    let d = tempdir("bounds-outliers");
    let base: Value =
        serde_json::from_slice(&std::fs::read(fixture("multi_stream.json")).unwrap()).unwrap();
    let good = shifted(&base, EPOCH_US);
    let (g, _) = report_json(&[&write_json(&d, "good.json", &good)]);
    let hour_us = 3_600_000_000;
    for (name, ev, key, want) in [
        (
            "long_dur",
            kernel("sixteen_minutes", EPOCH_US + 1_000_060, 1_000_000_000, 93),
            "GPU op outlasting the capture",
            "dropped 1 GPU op that outlasts the rest of the capture by far (`sixteen_minutes` \
             lasting 16.7 min)",
        ),
        (
            "hour_later",
            kernel("an_hour_later", EPOCH_US + 1_000_150 + hour_us, 10, 94),
            "GPU op with an implausible time",
            "dropped 1 GPU op with an implausible time (`an_hour_later` at ",
        ),
    ] {
        let mut bad = good.clone();
        bad["traceEvents"].as_array_mut().unwrap().push(ev);
        let (b, err) = report_json(&[&write_json(&d, &format!("{name}.json"), &bad)]);
        assert!(err.contains(want), "{name}: {err}");
        assert_eq!(b["skipped"][key], 1, "{name}: {}", b["skipped"]);
        assert!(
            b["notes"].to_string().contains(want),
            "{name}: {}",
            b["notes"]
        );
        for k in ["gpu_ops", "kernels", "window", "busy_ns", "device_idle_ns"] {
            assert_eq!(b[k], g[k], "{name}: {k}");
        }
    }
    // Waited for: the program was busy on the GPU for two minutes, and it says so.
    let mut waited = good.clone();
    let ev = waited["traceEvents"].as_array_mut().unwrap();
    let t = EPOCH_US + 1_000_170;
    ev.push(
        json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
                   "tid": 100, "ts": t, "dur": 2, "args": {"correlation": 95}}),
    );
    ev.push(kernel("two_minutes", t + 5, 120_000_000, 95));
    ev.push(
        json!({"ph": "X", "cat": "cuda_runtime", "name": "cudaDeviceSynchronize",
                   "pid": 100, "tid": 100, "ts": t + 3, "dur": 120_000_010,
                   "args": {"correlation": 96}}),
    );
    let (w, err) = report_json(&[&write_json(&d, "waited.json", &waited)]);
    assert!(dropped(&w).is_empty(), "{err}");
    assert_eq!(w["kernels"], g["kernels"].as_u64().unwrap() + 1);
}

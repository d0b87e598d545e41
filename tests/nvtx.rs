//! NVTX ranges without a GPU: a real torch.profiler trace's user annotations (HTA's test data)
//! as ranges, frames of the tree and steps; a recording holding a collector's `Ranges` frames,
//! whose ranges become the outermost frames of the launches they enclose and delimit steps.

mod support;

use std::io::Read;
use std::process::Command;

use gaptop_core::analysis::steps::{self, StepSource};
use gaptop_core::model::records::Ns;
use gaptop_core::model::window::Window;
use gaptop_core::sources::recording::Writer;
use gaptop_wire as w;
use serde_json::Value;
use support::{fixture, report_json as report, tempdir};

const HTA: &str = "hta_step_annotations.json.gz";

/// The trace's events, read here with serde_json, apart from gaptop's importer.
fn hta_events() -> Vec<Value> {
    let mut s = String::new();
    flate2::read::GzDecoder::new(std::fs::File::open(fixture(HTA)).unwrap())
        .read_to_string(&mut s)
        .unwrap();
    let v: Value = serde_json::from_str(&s).unwrap();
    v["traceEvents"].as_array().unwrap().clone()
}

/// Start times (ns) of the trace's events of category `cat` named `name`, sorted.
fn starts(events: &[Value], cat: &str, name: &str) -> Vec<Ns> {
    let mut v: Vec<Ns> = events
        .iter()
        .filter(|e| e["cat"] == cat && e["name"] == name)
        .map(|e| e["ts"].as_i64().expect("whole microseconds") * 1000)
        .collect();
    v.sort_unstable();
    v
}

/// A training loop traced by torch.profiler (five iterations of `zero_grad`, forward, backward,
/// `Optimizer.step`, without ProfilerStep#N): its user annotations are ranges of the main thread
/// and its gpu_user_annotations ranges of stream 7; with no step-like name, the outermost
/// annotation family that repeats and comes first in a tie (`zero_grad`, an iteration's first)
/// delimits the steps.
#[test]
fn a_traces_user_annotations_are_ranges_and_delimit_steps() {
    let ev = hta_events();
    let zero = starts(&ev, "user_annotation", "Optimizer.zero_grad#SGD.zero_grad");
    let step = starts(&ev, "user_annotation", "Optimizer.step#SGD.step");
    assert_eq!((zero.len(), step.len()), (5, 5));
    let st = gaptop_core::sources::load_path(&fixture(HTA), usize::MAX).unwrap();
    let p = &st.procs[0];
    let tid = ev
        .iter()
        .find(|e| e["cat"] == "user_annotation")
        .and_then(|e| e["tid"].as_u64())
        .unwrap() as u32;
    let names: Vec<&str> = p
        .ranges_of(tid)
        .iter()
        .map(|r| st.names.get(r.name))
        .collect();
    assert_eq!(names.len(), 10, "{names:?}");
    assert!(
        names.iter().all(|n| n.starts_with("Optimizer.")),
        "{names:?}"
    );
    assert!(p.ranges_of(tid).iter().all(|r| r.depth == 0));
    let gpu = p.gpu_ranges.get(&(0, 7)).expect("stream 7's annotations");
    assert_eq!(gpu.len(), 10);

    let s = steps::find(&st, Window::all(), None).expect("steps");
    assert_eq!(
        s.source,
        StepSource::Spans("Optimizer.zero_grad#SGD.zero_grad".into())
    );
    let got: Vec<Ns> = s.steps.iter().map(|x| x.start).collect();
    assert_eq!(got, zero);
    for w in s.steps.windows(2) {
        assert_eq!(
            w[0].end, w[1].start,
            "each step runs to the next one's start"
        );
    }
    let j = report(&fixture(HTA), &[]);
    assert_eq!(j["steps"]["source"], "range");
    assert_eq!(j["steps"]["name"], "Optimizer.zero_grad#SGD.zero_grad");
    assert_eq!(j["steps"]["count"], 5);

    // By name the annotations are the steps, exactly; the last one lasted 0 µs and is none.
    let s = steps::find(&st, Window::all(), Some("Optimizer.step#SGD.step")).unwrap();
    let got: Vec<Ns> = s.steps.iter().map(|x| x.start).collect();
    assert_eq!(got, step[..4]);
    assert_eq!(
        report(&fixture(HTA), &["--step", "Optimizer.step#SGD.step"])["steps"]["count"],
        4
    );
}

/// The optimizer's kernels sit under its annotation in the call tree.
#[test]
fn a_traces_annotations_are_frames_above_the_launches_they_enclose() {
    let j = report(&fixture(HTA), &["--top", "1000"]);
    let under = |frame: &str| -> usize {
        j["top_gaps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|g| g["frames"][0] == frame)
            .count()
    };
    assert!(under("Optimizer.step#SGD.step") >= 5, "{}", j["top_stacks"]);
    assert!(under("Optimizer.zero_grad#SGD.zero_grad") >= 5);
}

const MS: u64 = 1_000_000;

/// The frames a collector sends for a program on thread 7 that runs 6 steps of 4 ms, each an
/// NVTX range `step N` around two `layer` ranges, each layer launching one kernel from
/// `model.py`; a launch before the first step belongs to no range.
fn collector_frames() -> Vec<w::Frame> {
    let t0 = 1_000 * MS;
    let mut f = vec![w::Frame::Hello(w::Hello::new(4242, -1, "python3 train.py"))];
    for (id, text) in [
        "/w/model.py(12): Model.forward",
        "cudaLaunchKernel_v7000",
        "gemm_kernel",
        "layer",
    ]
    .into_iter()
    .enumerate()
    {
        f.push(w::Frame::Name {
            id: id as u32 + 1,
            text: text.into(),
        });
    }
    f.push(w::Frame::Stack {
        id: 1,
        parent: 0,
        frame: 1,
    });
    let mut corr = 0;
    let mut launch = |f: &mut Vec<w::Frame>, t: u64| {
        corr += 1;
        f.push(w::Frame::Apis(vec![w::Api {
            start: t,
            end: t + 10_000,
            corr,
            tid: 7,
            name: 2,
            stack: 1,
            outer_corr: 0,
            kind: w::API_LAUNCH,
        }]));
        f.push(w::Frame::Ops(vec![w::Op {
            start: t + 20_000,
            end: t + 520_000,
            corr,
            name: 3,
            stream: 7,
            ..Default::default()
        }]));
    };
    launch(&mut f, t0 - MS);
    for k in 0..6u64 {
        let s = t0 + k * 4 * MS;
        launch(&mut f, s + MS / 2);
        launch(&mut f, s + 2 * MS);
        // Ranges arrive after the calls they enclose, inner ones first.
        f.push(w::Frame::Name {
            id: 10 + k as u32,
            text: format!("step {k}"),
        });
        f.push(w::Frame::Ranges(vec![
            w::Range {
                start: s + MS / 4,
                end: s + MS,
                tid: 7,
                name: 4,
                domain: 0,
            },
            w::Range {
                start: s + 3 * MS / 2,
                end: s + 3 * MS,
                tid: 7,
                name: 4,
                domain: 0,
            },
        ]));
        f.push(w::Frame::Ranges(vec![w::Range {
            start: s,
            end: s + 7 * MS / 2,
            tid: 7,
            name: 10 + k as u32,
            domain: 0,
        }]));
    }
    f
}

fn write_recording(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("nvtx.rec");
    let mut wr = Writer::new(std::fs::File::create(&path).unwrap()).unwrap();
    for f in collector_frames() {
        wr.frame(1, &f).unwrap();
    }
    wr.flush().unwrap();
    path
}

/// A recording's NVTX ranges: outermost frames of the launches they enclose, by family (the
/// step, `step #` for every `step N`, then the layer, then the launch's Python stack), the steps
/// by their family `step #` and, with no name given, as a step-like family.
#[test]
fn recorded_ranges_are_frames_of_their_launches_and_steps() {
    let dir = tempdir("nvtx-rec");
    let rec = write_recording(&dir);
    let j = report(&rec, &["--top", "100"]);
    assert_eq!(j["kernels_with_stack"], 13);
    let mut stacks: Vec<Vec<String>> = j["top_gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| {
            g["frames"]
                .as_array()
                .unwrap()
                .iter()
                .map(|f| f.as_str().unwrap().to_string())
                .collect()
        })
        .collect();
    stacks.sort();
    stacks.dedup();
    let py = [
        "/w/model.py(12): Model.forward",
        "cudaLaunchKernel_v7000",
        "gemm_kernel",
    ];
    let inside: Vec<String> = ["step #", "layer"]
        .iter()
        .chain(&py)
        .map(|s| s.to_string())
        .collect();
    assert_eq!(
        stacks,
        [inside],
        "every gap's launch is inside a layer of a step"
    );
    let st = gaptop_core::sources::load_path(&rec, usize::MAX).unwrap();
    let first = st.procs[0].api_by_corr(1).unwrap();
    assert_eq!(
        st.frame_strings(first.stack),
        py[..1],
        "the launch before every range"
    );
    for by in [None, Some("step #")] {
        let mut extra = vec![];
        if let Some(b) = by {
            extra = vec!["--step", b];
        }
        let j = report(&rec, &extra);
        assert_eq!(j["steps"]["count"], 6, "{by:?}");
        assert_eq!(j["steps"]["source"], "range");
        assert_eq!(
            j["steps"]["median_ns"],
            7 * MS / 2,
            "the ranges are the steps"
        );
    }
    let d: Vec<u16> = st.procs[0].ranges_of(7).iter().map(|r| r.depth).collect();
    assert_eq!(d, [0, 1, 1].repeat(6));
    // An export keeps them: re-opened, the same steps.
    let out = dir.join("w.json");
    let ok = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .arg("export")
        .arg(&rec)
        .arg("-o")
        .arg(&out)
        .status()
        .unwrap();
    assert!(ok.success());
    let again = gaptop_core::sources::load_path(&out, usize::MAX).unwrap();
    assert_eq!(again.procs[0].ranges_of(7).len(), 18);
    let j = report(&out, &[]);
    assert_eq!(j["steps"]["count"], 6);
    assert_eq!(j["steps"]["name"], "step #");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The automatic rule on hand-made ranges: a step-like family wins over one that repeats more;
/// a numbered family whose numbers repeat (layers) delimits nothing; without a step-like name
/// the most frequent outermost family delimits the steps, the last one as long as the others'
/// median.
#[test]
fn automatic_steps_from_ranges_follow_the_rule() {
    use gaptop_core::model::ranges::Range;
    use gaptop_core::model::store::Store;
    let build = |names: &[(String, Ns, Ns)]| {
        let mut st = Store::default();
        let p = st.add_process(1, -1, "p");
        let v: Vec<Range> = names
            .iter()
            .map(|(n, s, e)| {
                let id = st.names.intern(n);
                Range::new(*s, *e, id, 0)
            })
            .collect();
        st.procs[p as usize].set_ranges(3, v);
        st
    };
    let mut spec: Vec<(String, Ns, Ns)> = Vec::new();
    for it in 0..3 {
        let t = 1_000 + it * 1_000;
        spec.push(("forward".into(), t, t + 400));
        for l in 0..4 {
            spec.push((format!("layer {l}"), t + 500 + l * 100, t + 550 + l * 100));
        }
    }
    let (name, r) = steps::range_steps(&build(&spec), Ns::MIN, Ns::MAX).unwrap();
    assert_eq!(
        name, "forward",
        "the layers' numbers repeat: not iterations"
    );
    assert_eq!(r, [(1_000, 2_000), (2_000, 3_000), (3_000, 4_000)]);

    spec.extend((1..3).map(|k| (format!("iteration {k}"), 10_000 + k * 500, 10_200 + k * 500)));
    let (name, r) = steps::range_steps(&build(&spec), Ns::MIN, Ns::MAX).unwrap();
    assert_eq!(name, "iteration #", "a step-like name first");
    assert_eq!(r, [(10_500, 10_700), (11_000, 11_200)]);
    let one = build(&[("load".into(), 0, 10), ("forward".into(), 20, 30)]);
    assert_eq!(
        steps::range_steps(&one, Ns::MIN, Ns::MAX),
        None,
        "nothing repeats"
    );
}

/// A recording the collector wrote with NVTX ranges (the fake GPU's program, 20 `step` ranges
/// each around a `rope` range) reads as it did: its ranges, its stacks under them, its steps.
#[test]
fn a_kept_recording_with_ranges_reads_as_it_did() {
    let st = gaptop_core::sources::load_path(&fixture("fake_nvtx.rec"), usize::MAX).unwrap();
    let p = &st.procs[0];
    let all: usize = p.ranges.values().map(|v| v.len()).sum();
    assert_eq!(all, 40);
    let j = report(&fixture("fake_nvtx.rec"), &[]);
    assert_eq!(j["kernels"], 230);
    assert_eq!(j["kernels_with_stack"], 230);
    assert_eq!(
        (j["steps"]["name"].as_str(), j["steps"]["count"].as_u64()),
        (Some("step"), Some(20))
    );
    assert_eq!(j["top_stacks"][0]["frames"][0], "step");
    assert_eq!(j["top_stacks"][0]["frames"][1], "rope");
}

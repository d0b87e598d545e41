//! gaptop's own cost taken out of the estimates (issue 36): a recording holds what the
//! collector added to a CUDA call on the machine that recorded (`gaptop-probe`'s figures, a
//! `Cost` frame), and the replay takes it out of every call before its what-ifs, so that a
//! fix's saving is the program's without gaptop, not the recorded run's.

mod support;

use gaptop_core::analysis::gaps::Config;
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;
use gaptop_core::sources::recording::{read_into, Writer};
use gaptop_wire::{Cost, Frame, Hello, COST_CONN};
use serde_json::Value;
use support::gen::{generate, Spec};
use support::{advice, tempdir};

/// The probe's figures: a sync of an idle stream 500 ns slower with gaptop (250 ns a
/// callback, two of them), a driver launch 2 µs slower (its two callbacks and CUPTI's record
/// of 1.5 µs): a runtime launch (four callbacks and the record) 2.5 µs slower.
fn cost() -> Cost {
    Cost {
        launch_bare_ns: 4_000,
        launch_ns: 6_000,
        sync_bare_ns: 1_000,
        sync_ns: 1_500,
        note: "test".into(),
    }
}

fn report(st: &Store) -> Value {
    serde_json::to_value(gaptop::report::build(st, Window::all(), &Config::default(), 20, None).1)
        .unwrap()
}

fn within(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * want.abs()
}

fn saving(j: &Value) -> f64 {
    advice(j, "Layer.forward")["saving_ns"].as_f64().unwrap()
}

/// A launch-bound program (2 µs kernels behind 5 µs launches) simulated bare, and the same
/// with every launch 2.5 µs longer, as gaptop's callbacks and CUPTI's records make it. The
/// recorded run's report, without the probe's figures, estimates fusing the layers' launches
/// at what that saves the recorded run (within 2%); with them, at what it saves the bare
/// program (within 3%), as a share of the bare program's step, which the replay without
/// gaptop's cost gives back (within 3%).
#[test]
fn the_estimate_is_of_the_program_without_gaptop() {
    estimate_without_gaptop(false);
}

/// The same program with a sync (`Model.item`) ending each step: recorded, the sync returns
/// 500 ns later after the op it waited for (its exit callbacks, half of its four: its entry
/// ones ran while the GPU worked); with the probe's figures, the bare program's saving and
/// step again.
#[test]
fn a_syncs_exit_callbacks_are_taken_out_too() {
    estimate_without_gaptop(true);
}

fn estimate_without_gaptop(sync: bool) {
    let mut bare = Spec::new(30, 8, 8);
    bare.kernel_ns = 2_000;
    bare.sync = sync;
    let mut recorded = bare.clone();
    recorded.timing.launch_ns += 2_500;
    if sync {
        recorded.timing.sync_tail_ns += 500;
    }
    let tb = generate(&bare, &tempdir("cost-bare"));
    let tr = generate(&recorded, &tempdir("cost-rec"));
    assert!(
        tr.cost("fuse") > 1.2 * tb.cost("fuse"),
        "gaptop's cost lies in the launches"
    );
    let mut st = gaptop_core::sources::load_path(&tr.path, 1 << 30).unwrap();

    let j = report(&st);
    assert!(j["replay"].get("profiler").is_none(), "{}", j["replay"]);
    assert!(
        within(saving(&j), tr.cost("fuse"), 0.02),
        "{} vs {}",
        saving(&j),
        tr.cost("fuse")
    );

    st.launch_cost = Some(cost());
    let j = report(&st);
    let r = &j["replay"];
    let p = &r["profiler"];
    assert_eq!(p["launch_ns"], 2_500, "{r}");
    assert_eq!(
        (p["callback_ns"].as_i64(), p["record_ns"].as_i64()),
        (Some(250), Some(1_500))
    );
    assert!(
        within(saving(&j), tb.cost("fuse"), 0.03),
        "{} vs {}",
        saving(&j),
        tb.cost("fuse")
    );
    let step = r["measured_mean_ns"].as_f64().unwrap() - p["step_ns"].as_f64().unwrap();
    assert!(
        within(step, tb.steady_mean_ns, 0.03),
        "{step} vs {}",
        tb.steady_mean_ns
    );
    // Unchanged, the replay still gives back the recorded run.
    assert!(r["baseline_error"].as_f64().unwrap() < 0.01, "{r}");

    // A probe that measured nothing changes nothing, and the report says why.
    st.launch_cost = Some(Cost {
        note: "no CUDA driver library (libcuda.so.1)".into(),
        ..Cost::default()
    });
    let j = report(&st);
    assert!(within(saving(&j), tr.cost("fuse"), 0.02));
    assert_eq!(
        j["replay"]["profiler_unmeasured"],
        "no CUDA driver library (libcuda.so.1)"
    );
}

/// A recording keeps the probe's figures (GAPTOPR7), on the recorder's own connection, beside
/// a collector's frames; a recording without them (every older one) has none.
#[test]
fn a_recording_keeps_what_gaptop_costs() {
    let mut bytes = Vec::new();
    let mut w = Writer::new(&mut bytes).unwrap();
    w.frame(COST_CONN, &Frame::Cost(cost())).unwrap();
    w.frame(1, &Frame::Hello(Hello::new(42, -1, "python3 train.py")))
        .unwrap();
    w.close().unwrap();
    assert_eq!(&bytes[..8], b"GAPTOPR7");
    let mut st = Store::default();
    let note = read_into(&bytes[..], &mut st).unwrap();
    assert_eq!(note.damaged, 0);
    assert_eq!(st.launch_cost, Some(cost()));
    assert_eq!(st.procs.len(), 1);
    assert!(st.skipped.is_empty(), "{:?}", st.skipped);

    let old = support::root().join("assets");
    let rec = std::fs::read_dir(&old)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().ends_with(".rec"))
        .expect("a recording in assets/");
    let st = gaptop_core::sources::load_path(&rec, 1 << 30).unwrap();
    assert_eq!(st.launch_cost, None);
}

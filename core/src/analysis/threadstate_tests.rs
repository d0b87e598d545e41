use super::*;

fn state(state: &'static str, share: f64, call: Option<&str>, frames: &[&str]) -> JsonState {
    JsonState {
        state,
        share,
        call: call.map(str::to_string),
        frames: frames.iter().map(|f| f.to_string()).collect(),
        holder: None,
        inferred: 0.0,
    }
}

#[test]
fn painting_tiles_the_gap_in_order_of_precedence() {
    let k = |call| StateKey::Off {
        kind: OffKind::Blocked,
        call,
        stack: 0,
        holder: 0,
        holder_name: 0,
        holder_stack: 0,
    };
    let mut segs = vec![(0, 100, StateKey::OnCpu)];
    paint(&mut segs, 10, 60, k(1));
    paint(&mut segs, 50, 70, StateKey::CudaWait { call: 2, stack: 0 });
    paint(&mut segs, 90, 90, k(3));
    assert_eq!(
        segs,
        [
            (0, 10, StateKey::OnCpu),
            (10, 50, k(1)),
            (50, 70, StateKey::CudaWait { call: 2, stack: 0 }),
            (70, 100, StateKey::OnCpu),
        ]
    );
}

#[test]
fn a_site_s_states_are_shares_of_its_gaps_most_first() {
    let mut store = Store::new(usize::MAX);
    let futex = store.names.intern("futex");
    let get = store.names.intern("queue.py(171): Queue.get");
    let wait = store.names.intern("threading.py(327): Condition.wait");
    let main = store.names.intern("/x/loop.py(27): <module>");
    let s1 = store.stacks.intern(0, main);
    let s2 = store.stacks.intern(s1, get);
    let s3 = store.stacks.intern(s2, wait);
    let mut t = StateTime::default();
    let blocked = StateKey::Off {
        kind: OffKind::Blocked,
        call: futex,
        stack: s3,
        holder: 0,
        holder_name: 0,
        holder_stack: 0,
    };
    t.add(&[(blocked, 90), (StateKey::OnCpu, 10)]);
    t.add(&[(blocked, 100)]);
    let j = json(&store, &t, vec!["/x/loop.py(20): f".into()]).unwrap();
    assert_eq!(j.len(), 2);
    assert_eq!(
        (j[0].state, j[0].call.as_deref()),
        ("blocked", Some("futex"))
    );
    assert!((j[0].share - 0.95).abs() < 1e-9, "{j:?}");
    // The library's own waiting (Condition.wait under Queue.get) is left out.
    assert_eq!(
        j[0].frames,
        ["queue.py(171): Queue.get", "/x/loop.py(27): <module>"]
    );
    assert_eq!(j[1].state, "on_cpu");
    let l = line(&j).unwrap();
    assert!(
        l.starts_with("During its gaps the launching thread was: 95% blocked in `Queue.get"),
        "{l}"
    );
    assert!(l.ends_with("(futex), 5% running `f  loop.py:20`"), "{l}");
    assert_eq!(json(&store, &StateTime::default(), Vec::new()), None);
}

#[test]
fn states_read_as_words() {
    let mut gil = state("gil", 0.58, Some("futex"), &["/x/l.py(3): step"]);
    gil.holder = Some(JsonHolder {
        tid: 41,
        name: "pin_memory".into(),
        frames: vec!["/x/p.py(9): pin_memory_loop".into()],
    });
    assert_eq!(
        words(&gil),
        "58% waiting for the GIL in `step  l.py:3` (held by thread `pin_memory` (tid 41): \
         `pin_memory_loop  p.py:9`)"
    );
    assert_eq!(
        words(&state("blocked", 0.1, Some("clock_nanosleep"), &[])),
        "10% sleeping (clock_nanosleep)"
    );
    assert_eq!(
        words(&state(
            "blocked",
            0.2,
            Some("pread64 /d/x.bin"),
            &["/x/l.py(5): load"]
        )),
        "20% reading in `load  l.py:5` (pread64 /d/x.bin)"
    );
    assert_eq!(
        words(&state("runnable", 0.3, None, &[])),
        "30% runnable but not running (preempted)"
    );
    assert_eq!(words(&state("on_cpu", 0.04, None, &[])), "4% on a CPU");
    let sh = Shares::of(&[
        state("blocked", 0.5, Some("read pipe:[12]"), &[]),
        state("blocked", 0.2, Some("read /d/x.bin"), &[]),
        state("gil", 0.1, Some("futex"), &[]),
    ]);
    assert_eq!(sh.blocked_in(is_wait_call), 0.5);
    assert_eq!(sh.blocked_in(is_read_call), 0.2);
    assert_eq!(sh.gil, 0.1);
}

#[test]
fn undescribed_sleep_is_spread_over_the_described_in_proportion() {
    let mut out = vec![
        state("gil", 0.6, Some("futex"), &["/x/l.py(3): step"]),
        state("blocked", 0.2, Some("read /d/x"), &[]),
        state("blocked", 0.1, None, &[]),
        state("on_cpu", 0.1, None, &[]),
    ];
    spread_unknown(&mut out);
    assert_eq!(out.len(), 3);
    assert!((out[0].share - 0.675).abs() < 1e-9 && (out[0].inferred - 0.075).abs() < 1e-9);
    assert!((out[1].share - 0.225).abs() < 1e-9);
    assert_eq!(out[2].share, 0.1);
    // Nothing described: it stays.
    let mut out = vec![
        state("blocked", 0.5, None, &[]),
        state("on_cpu", 0.5, None, &[]),
    ];
    spread_unknown(&mut out);
    assert_eq!(out.len(), 2);
}

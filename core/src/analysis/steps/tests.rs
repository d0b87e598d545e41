use super::*;
use crate::frames::short_kernel;

/// `reps` copies of `body`, after `prefix`.
fn repeat(prefix: &[u32], body: &[u32], reps: usize) -> Vec<u32> {
    let mut v = prefix.to_vec();
    for _ in 0..reps {
        v.extend_from_slice(body);
    }
    v
}

fn lens(p: &Period) -> Vec<usize> {
    p.steps.iter().map(|r| r.len()).collect()
}

#[test]
fn exact_repetition_gives_every_period() {
    let body: Vec<u32> = (1..=20).collect();
    let seq = repeat(&[], &body, 10);
    let p = detect_period(&seq, &vec![0; seq.len()]).unwrap();
    assert_eq!(p.len, 20);
    assert_eq!(lens(&p), vec![20; 10]);
    assert_eq!(p.steps[0].start, 0, "busy GPU: the first op of the period");
}

#[test]
fn phase_follows_the_longest_idle() {
    let body: Vec<u32> = (1..=10).collect();
    let seq = repeat(&[], &body, 8);
    // Idle before symbol 4 (index 3 in the body) in every period.
    let idle: Vec<Ns> = (0..seq.len())
        .map(|i| if i % 10 == 3 { 500 } else { 10 })
        .collect();
    let p = detect_period(&seq, &idle).unwrap();
    assert_eq!(p.steps[0].start, 3);
    assert!(p.steps.iter().all(|r| seq[r.start] == 4));
    // 8 periods from index 3: 7 full ones, and the last 7 ops are less than a period.
    assert_eq!(lens(&p), vec![10; 7]);
}

#[test]
fn layers_do_not_replace_tokens() {
    // 12 layers of 6 ops, then 4 per-token ops: tokens, not layers.
    let mut token = Vec::new();
    for _ in 0..12 {
        token.extend_from_slice(&[1, 2, 3, 4, 5, 6]);
    }
    token.extend_from_slice(&[7, 8, 9, 10]);
    let seq = repeat(&[], &token, 30);
    let p = detect_period(&seq, &vec![0; seq.len()]).unwrap();
    assert_eq!(p.len, 76);
    assert_eq!(p.steps.len(), 30);
}

#[test]
fn a_multiple_of_the_period_is_refined() {
    // An op every 5 tokens (3 occurrences cover most of the run): still tokens.
    let token: Vec<u32> = (1..=40).collect(); // 1 op in 41 is 2.4% of a token
    let mut seq = Vec::new();
    for t in 0..18 {
        if t % 5 == 2 {
            seq.push(99);
        }
        seq.extend_from_slice(&token);
    }
    let p = detect_period(&seq, &vec![0; seq.len()]).unwrap();
    assert_eq!(p.len, 40);
    assert!((17..=18).contains(&p.steps.len()), "{}", p.steps.len());
}

#[test]
fn random_sequence_has_no_period() {
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let seq: Vec<u32> = (0..20_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 40) as u32
        })
        .collect();
    assert_eq!(detect_period(&seq, &vec![0; seq.len()]), None);
    assert_eq!(detect_period(&[1, 2, 1, 2], &[0; 4]), None);
    // Two periods are not a repetition.
    let two = repeat(&[], &(1..=30).collect::<Vec<_>>(), 2);
    assert_eq!(detect_period(&two, &vec![0; two.len()]), None);
}

#[test]
fn quantiles_are_exact_nearest_rank() {
    assert_eq!(quantile(vec![5, 1, 3, 2, 4], 0.5), 3);
    assert_eq!(quantile(vec![4, 1, 3, 2], 0.5), 2);
    assert_eq!(quantile((1..=10).collect(), 0.9), 9);
    assert_eq!(quantile((1..=11).collect(), 0.9), 10);
    assert_eq!(quantile(vec![], 0.5), 0);
    assert_eq!(quantile(vec![7], 0.9), 7);
}

/// Looking up from the last answer finds what a binary search finds, in order or not.
#[test]
fn steps_are_found_from_the_last_one_as_by_search() {
    let mut st = steps_of(&[10, 5, 30, 1, 7, 100]);
    // A hole between two steps.
    st.steps[2].end -= 4;
    let mut at = 0;
    let times: Vec<Ns> = (-3..160).chain([50, 2, 200, 0, 17, 17, 44]).collect();
    for t in times {
        assert_eq!(st.step_of_from(t, &mut at), st.step_of(t), "t {t}");
    }
}

fn steps_of(walls: &[Ns]) -> Steps {
    let mut t = 0;
    let steps = walls
        .iter()
        .map(|&w| {
            let s = Step {
                start: t,
                end: t + w,
                ..Default::default()
            };
            t += w;
            s
        })
        .collect();
    Steps {
        source: StepSource::Auto,
        steps,
        devices: 1,
        suggest: None,
    }
}

#[test]
fn steady_state_skips_slow_leading_steps_only() {
    let s = steps_of(&[1000, 400, 100, 100, 110, 90, 500, 100]);
    assert_eq!(s.median_ns(), 100);
    assert_eq!(s.steady(), 2..8);
    assert_eq!(steps_of(&[100, 100, 100]).steady(), 0..3);
    assert_eq!(steps_of(&[]).steady(), 0..0);
}

#[test]
fn step_of_finds_the_holding_step() {
    let mut s = steps_of(&[10, 10, 10]);
    s.steps[2].start = 25; // a hole from 20 to 25
    assert_eq!(s.step_of(0), Some(0));
    assert_eq!(s.step_of(9), Some(0));
    assert_eq!(s.step_of(10), Some(1));
    assert_eq!(s.step_of(22), None);
    assert_eq!(s.step_of(25), Some(2));
    assert_eq!(s.step_of(30), None);
    assert_eq!(s.step_of(-1), None);
}

#[test]
fn python_frames_match_by_function_name() {
    let f = "torch/nn/modules/module.py(1790): Module._call_impl";
    assert!(frame_matches(f, "_call_impl"));
    assert!(frame_matches(f, "Module._call_impl"));
    assert!(frame_matches(f, "module.py:_call_impl"));
    assert!(frame_matches(f, "modules/module.py:Module._call_impl"));
    assert!(frame_matches(f, f));
    assert!(!frame_matches(f, "call_impl"));
    assert!(!frame_matches(f, "odule.py:_call_impl"));
    assert!(!frame_matches(f, "other.py:_call_impl"));
    assert!(!frame_matches(f, "Module"));
    let g = "launchbound.py(25): main.<locals>.late_allreduce";
    assert!(frame_matches(g, "late_allreduce"));
    assert!(frame_matches("probes/launchbound.py(6): rope", "rope"));
    assert!(!frame_matches("aten::mm", "mm"));
    assert!(!frame_matches(
        "<built-in method cat of type object>",
        "cat"
    ));
}

#[test]
fn short_op_names() {
    assert_eq!(
        short_kernel("void at::native::vectorized_elementwise_kernel<4, F>(int, F)"),
        "vectorized_elementwise_kernel"
    );
    assert_eq!(short_kernel("Memset (Device)"), "Memset");
}

/// A device's streams merge by start, the earlier stream's op first on equal starts (as a
/// stable sort of the streams' ops one stream after another), inside the window only.
#[test]
fn a_device_sequence_merges_its_streams_by_start() {
    use crate::model::records::{GpuOp, LaneKey, OpKind};
    let mut store = Store::default();
    store.add_process(1, -1, "p");
    let mut all: Vec<(usize, GpuOp)> = Vec::new();
    let mut lanes = Vec::new();
    for (stream, starts) in [
        (3u32, vec![0, 10, 10, 25, 40]),
        (1, vec![5, 10, 30, 40, 90]),
    ] {
        let lane = store.lane_id(LaneKey {
            proc: 0,
            device: 0,
            stream,
        });
        for (i, s) in starts.into_iter().enumerate() {
            let op = GpuOp::new(s, s + 4, OpKind::Kernel, i as u32, 100 * stream + i as u32);
            store.add_op(lane, op);
            all.push((lanes.len(), op));
        }
        lanes.push(lane);
    }
    let seq = DeviceSeq::new(&store, &lanes, 5, 90);
    let mut want: Vec<GpuOp> = all
        .iter()
        .map(|x| x.1)
        .filter(|o| (5..90).contains(&o.start))
        .collect();
    want.sort_by_key(|o| o.start);
    assert_eq!(seq.starts, want.iter().map(|o| o.start).collect::<Vec<_>>());
    assert_eq!(seq.corrs, want.iter().map(|o| o.corr).collect::<Vec<_>>());
    assert_eq!(seq.ends, want.iter().map(|o| o.end).collect::<Vec<_>>());
    assert_eq!(seq.names, want.iter().map(|o| o.name).collect::<Vec<_>>());
    assert_eq!(
        seq.corrs[..4],
        [100, 301, 302, 101],
        "ties: the first lane's first"
    );
}

#[test]
fn the_idle_shows_the_iteration_when_the_names_do_not() {
    // 60 iterations, each a wait of 15 ms for input, then one function's 6 identical kernels
    // 4 µs apart: the names repeat every op, the iterations every 6.
    let seq = vec![7u32; 360];
    let idle: Vec<Ns> = (0..360)
        .map(|i| if i % 6 == 0 { 15_000_000 } else { 4_000 })
        .collect();
    let p = detect_period(&seq, &idle).unwrap();
    assert_eq!(p.len, 6);
    assert_eq!(p.steps.len(), 60);
    assert!(p.steps.iter().all(|r| r.start % 6 == 0 && r.len() == 6));
    // Without the waits, nothing says where an iteration starts: one op a step.
    let p = detect_period(&seq, &vec![4_000; 360]).unwrap();
    assert_eq!(p.len, 1);
    // A wait in every period of the names (a sync each token) keeps the names' period.
    let body: Vec<u32> = (1..=10).collect();
    let seq = repeat(&[], &body, 20);
    let idle: Vec<Ns> = (0..seq.len())
        .map(|i| if i % 10 == 0 { 1_000_000 } else { 4_000 })
        .collect();
    assert_eq!(detect_period(&seq, &idle).unwrap().len, 10);
}

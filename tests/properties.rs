//! Properties of the gap analysis on random stores: time is conserved, gaps are counted once,
//! the categories partition them, the call tree adds up, and arrival order does not matter.

use gaptop_core::analysis::gaps::{self, Basis, Config};

use gaptop_core::analysis::summary;
use gaptop_core::model::records::{ApiCall, ApiKind, GpuOp, LaneKey, OpKind};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;
use proptest::prelude::*;

/// (stream, gap before, duration, launch offset before the op, stack choice) per op.
type Spec = Vec<(u8, u16, u16, u16, u8)>;

fn build(spec: &Spec, order: &[usize], batch: usize) -> Store {
    let mut st = Store::new(usize::MAX);
    let p = st.add_process(1, -1, "prop");
    let api = st.names.intern("cudaLaunchKernel");
    let frames: Vec<u32> = (0..3)
        .map(|i| st.names.intern(&format!("m.py({i}): f{i}")))
        .collect();
    let s1 = st.stacks.intern(0, frames[0]);
    let stacks = [
        0,
        s1,
        st.stacks.intern(s1, frames[1]),
        st.stacks.intern(0, frames[2]),
    ];
    let kname = st.names.intern("k");
    // Lay the ops out per stream in time, then add them in the given order.
    let mut t = [0i64; 3];
    let mut ops = Vec::new();
    for (i, &(s, gap, dur, off, sk)) in spec.iter().enumerate() {
        let s = (s % 3) as usize;
        let start = t[s] + gap as i64;
        let end = start + 1 + dur as i64;
        t[s] = end;
        ops.push((
            s,
            GpuOp::new(start, end, OpKind::Kernel, kname, i as u32 + 1),
            off,
            sk,
        ));
    }
    let lanes: Vec<usize> = (0..3)
        .map(|s| {
            st.lane_id(LaneKey {
                proc: p,
                device: (s / 2) as u32,
                stream: s as u32,
            })
        })
        .collect();
    for chunk in order.chunks(batch.max(1)) {
        for &i in chunk {
            let (s, op, off, sk) = ops[i];
            st.add_ops(lanes[s], &mut [op]);
            st.add_api(
                p,
                ApiCall {
                    start: op.start - off as i64,
                    end: op.start - off as i64 / 2,
                    corr: op.corr,
                    tid: 1,
                    name: api,
                    stack: stacks[(sk % 4) as usize],
                    kind: ApiKind::Launch,
                },
            );
        }
    }
    st
}

fn spec() -> impl Strategy<Value = Spec> {
    prop::collection::vec((0u8..3, 0u16..200, 0u16..100, 0u16..300, 0u8..4), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    #[test]
    fn time_is_conserved_and_gaps_partitioned(spec in spec()) {
        let order: Vec<usize> = (0..spec.len()).collect();
        let st = build(&spec, &order, 1);
        // Each stream's own gaps, as HTA counts them.
        let cfg = Config { basis: Basis::Stream, ..Config::default() };
        let mut gap_count = 0u64;
        let mut gap_ns = 0i64;
        // Gaps of length 0 (an op starting as the one before it ends), which HTA's breakdown
        // counts and nothing else does.
        let mut zero = 0u64;
        for lane in 0..st.lanes.len() {
            let l = &st.lanes[lane];
            if l.is_empty() { continue; }
            let span = l.max_end() - l.op(0).start;
            let mut lane_gaps = 0;
            let mut seen = std::collections::HashSet::new();
            let mut twice = false;
            gaps::lane_gaps(&st, lane, Window::all(), &cfg, |g| {
                lane_gaps += g.dur();
                gap_count += 1;
                gap_ns += g.dur();
                twice |= !seen.insert(g.next);
            });
            prop_assert!(!twice, "a gap was charged twice to one op in lane {}", lane);
            gaps::lane_between(&st, lane, Window::all(), &cfg, |b| match b {
                gaps::Between::Gap(g) if g.dur() == 0 => zero += 1,
                gaps::Between::Gap(_) => {}
                gaps::Between::Overlap { .. } => panic!("streams here never overlap"),
            });
            let busy = l.busy_in(l.op(0).start, l.max_end());
            prop_assert_eq!(lane_gaps + busy, span, "lane {}", lane);
        }
        let s = summary::summarize(&st, Window::all(), &cfg, 10);
        let cats: u64 = s.idle.iter().map(|b| b.count).sum();
        let cat_ns: i64 = s.idle.iter().map(|b| b.total_ns).sum();
        prop_assert_eq!(cats, gap_count + zero);
        prop_assert_eq!(cat_ns, gap_ns);
        let reasons: u64 = s.reasons.values().map(|b| b.count).sum();
        prop_assert_eq!(reasons, gap_count + zero);
        prop_assert_eq!(s.overlapping.count, 0);
        // The tree's root holds every gap and every op.
        prop_assert_eq!(s.tree.nodes[0].gap_ns, gap_ns);
        prop_assert_eq!(s.tree.nodes[0].gaps, gap_count);
        prop_assert_eq!(s.tree.nodes[0].launches, s.gpu_ops);
        let inv = s.tree.inverted();
        prop_assert_eq!(inv.nodes[0].gap_ns, gap_ns);
        // Advice over every launching function partitions the gaps too.
        let advice = gaptop_core::analysis::advice::advise(&st, &s, usize::MAX);
        prop_assert_eq!(advice.iter().map(|a| a.gaps).sum::<u64>(), gap_count);
        prop_assert_eq!(advice.iter().map(|a| a.gap_ns).sum::<i64>(), gap_ns);
        // Per device: idle + busy = the span, for each device.
        let (lo, hi) = st.span().unwrap();
        prop_assert_eq!(s.busy_ns + s.device_idle_ns, (hi - lo) * st.devices().len() as i64);

        // Device gaps (the default): the idle between a device's first and last op, each
        // interval charged once, never longer than the stream gap of the op it is charged to.
        let d = summary::summarize(&st, Window::all(), &Config::default(), 10);
        let mut inner_idle = d.device_idle_ns;
        for (_, lanes) in st.devices() {
            let busy: Vec<usize> = lanes.into_iter().filter(|&l| !st.lanes[l].is_empty()).collect();
            match (
                busy.iter().map(|&l| st.lanes[l].op(0).start).min(),
                busy.iter().map(|&l| st.lanes[l].max_end()).max(),
            ) {
                (Some(first), Some(last)) => inner_idle -= (first - lo) + (hi - last),
                _ => inner_idle -= hi - lo,
            }
        }
        prop_assert_eq!(d.charged_ns(), inner_idle);
        prop_assert_eq!(d.tree.nodes[0].gap_ns, inner_idle);
        prop_assert_eq!(d.idle, s.idle, "the HTA breakdown does not depend on the basis");
        let dev_advice = gaptop_core::analysis::advice::advise(&st, &d, usize::MAX);
        prop_assert_eq!(dev_advice.iter().map(|a| a.gap_ns).sum::<i64>(), inner_idle);
        let shares: f64 = dev_advice.iter().map(|a| a.share).sum();
        prop_assert!(shares <= 1.0 + 1e-9, "shares add up to {}", shares);
        for g in d.top_gaps.iter().filter(|g| g.next > 0) {
            let stream = gaps::classify(&st, g.lane, g.next - 1, g.next, &cfg);
            prop_assert!(stream.is_some_and(|sg| sg.dur() >= g.dur()), "{:?}", g);
        }
    }

    #[test]
    fn arrival_order_and_batching_do_not_matter(spec in spec(), seed in any::<u64>(), batch in 1usize..50) {
        let n = spec.len();
        let sorted: Vec<usize> = (0..n).collect();
        let mut shuffled = sorted.clone();
        let mut x = seed | 1;
        for i in (1..n).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            shuffled.swap(i, (x % (i as u64 + 1)) as usize);
        }
        let a = summary::summarize(&build(&spec, &sorted, 1), Window::all(), &Config::default(), 50);
        let b = summary::summarize(&build(&spec, &shuffled, batch), Window::all(), &Config::default(), 50);
        prop_assert_eq!(a.idle, b.idle);
        prop_assert_eq!(a.busy_ns, b.busy_ns);
        prop_assert_eq!(a.device_idle_ns, b.device_idle_ns);
        let ga: Vec<_> = a.top_gaps.iter().map(|g| (g.start, g.end, g.category)).collect();
        let gb: Vec<_> = b.top_gaps.iter().map(|g| (g.start, g.end, g.category)).collect();
        prop_assert_eq!(ga, gb);
    }
}

//! How much loading a step holds, for the input what-if's worker count: the launching thread's
//! CPU time at the site beyond its typical time between calls (its time asleep there left out,
//! where context switches were recorded: a thread blocked on its loader's queue is not
//! loading), and the CPU time of the program's helper processes (DataLoader workers: processes
//! sampled beside it that launch nothing) over the block.

use super::model::Model;
use crate::model::records::Ns;
use crate::model::store::Store;

/// A step's loading and the helper processes seen working.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Loading {
    /// CPU time a step: the site's own on the launching thread, and the helpers'.
    pub on_thread_ns: Ns,
    pub helpers_ns: Ns,
    /// Helper processes with CPU time over a tenth of the block.
    pub helpers: usize,
}

impl Loading {
    pub fn per_step(&self) -> Ns {
        self.on_thread_ns + self.helpers_ns
    }

    /// The workers that would load a step in `step` (None where nothing is seen loading).
    pub fn workers_for(&self, step: Ns) -> Option<u32> {
        let l = self.per_step();
        (l > 0).then(|| (l as f64 / step.max(1) as f64).ceil().max(1.0) as u32)
    }
}

/// The loading of site `s` over the model's block of `steps` steps; `seg` is each thread's
/// typical time between two calls.
pub fn loading(model: &Model, store: &Store, s: u32, seg: &[Ns], steps: usize) -> Loading {
    let n = steps.max(1) as Ns;
    let (mut on_thread, mut asleep_all, mut excess_all): (Ns, Ns, Ns) = (0, 0, 0);
    for c in model.calls.iter().filter(|c| c.site == s) {
        let excess = c.seg - c.seg.min(seg[c.thread as usize]);
        if excess <= 0 {
            continue;
        }
        let t = &model.threads[c.thread as usize];
        let asleep = store
            .procs
            .get(t.proc as usize)
            .filter(|p| p.switches)
            .and_then(|p| p.states.get(&t.tid))
            .map_or(0, |v| overlap(v, c.start - c.seg, c.start));
        on_thread += excess - asleep.min(excess);
        asleep_all += asleep.min(excess);
        excess_all += excess;
    }
    // A thread that mostly slept there waited for loading done elsewhere: what it ran
    // meanwhile is not the loading (a producer thread's time is not seen as a worker's).
    if asleep_all * 2 >= excess_all {
        on_thread = 0;
    }
    let launching: Vec<u32> = model.threads.iter().map(|t| t.proc).collect();
    let span = (model.hi - model.lo).max(1);
    let (mut helpers_ns, mut helpers) = (0.0, 0usize);
    for (i, p) in store.procs.iter().enumerate() {
        // A helper never said hello: no collector (a forked child's collects nothing).
        if launching.contains(&(i as u32)) || !p.from_samples {
            continue;
        }
        let (mut count, mut first, mut last) = (0usize, Ns::MAX, Ns::MIN);
        for v in p.samples.values() {
            let a = v.partition_point(|x| x.time < model.lo);
            let b = v.partition_point(|x| x.time < model.hi);
            count += b - a;
            if let (Some(f), Some(l)) = (v.front(), v.back()) {
                (first, last) = (first.min(f.time), last.max(l.time));
            }
        }
        if count == 0 {
            continue;
        }
        // Its rate over the part of the block it was sampled in, for the whole block: the
        // sampler finds a new process within half a second, so a worker started with the
        // loop is missed for its first samples.
        let seen = (last.min(model.hi) - first.max(model.lo)).max(1);
        let cpu = count as f64 * p.sample_period_ns as f64;
        let whole = cpu * (span as f64 / seen as f64).min(2.0);
        helpers_ns += whole;
        if whole * 10.0 > span as f64 {
            helpers += 1;
        }
    }
    // Each process that launches at the site loads for itself (a rank, its DataLoader
    // workers): a step's loading and workers are one such process's share.
    let mut at_site: Vec<u32> = model
        .calls
        .iter()
        .filter(|c| c.site == s)
        .map(|c| model.threads[c.thread as usize].proc)
        .collect();
    at_site.sort_unstable();
    at_site.dedup();
    let each = at_site.len().max(1);
    Loading {
        on_thread_ns: on_thread / n / each as Ns,
        helpers_ns: (helpers_ns / each as f64 / n as f64) as Ns,
        helpers: helpers.div_ceil(each),
    }
}

/// Time of `v` (stretches sorted by start, not overlapping) inside `[lo, hi)`.
fn overlap(v: &[crate::model::states::OffCpu], lo: Ns, hi: Ns) -> Ns {
    let first = v.partition_point(|x| x.end <= lo);
    v[first..]
        .iter()
        .take_while(|x| x.start < hi)
        .map(|x| x.end.min(hi) - x.start.max(lo))
        .filter(|d| *d > 0)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::replay::{Call, Thread, NONE};
    use crate::model::records::{ApiKind, CpuSample};
    use crate::model::states::OffCpu;

    const MS: Ns = 1_000_000;

    /// One launching thread (process 0, tid 10) with a call of site 0 every 10 ms, each after
    /// `seg` of CPU time, the thread's typical time between calls being 1 ms.
    fn model(steps: usize, seg: Ns) -> Model {
        let calls = (0..steps)
            .map(|k| {
                let start = (k as Ns + 1) * 10 * MS;
                Call {
                    thread: 0,
                    start,
                    end: start + 5_000,
                    seg,
                    own: 5_000,
                    wait: NONE,
                    tail: 0,
                    kind: ApiKind::Launch,
                    runtime: true,
                    site: 0,
                    after: NONE,
                    after_gap: 0,
                    inv: 0,
                    fwd: NONE,
                }
            })
            .collect();
        Model {
            calls,
            threads: vec![Thread {
                proc: 0,
                tid: 10,
                first: 0,
                last: steps as u32,
                spans: false,
            }],
            lo: 0,
            hi: (steps as Ns + 1) * 10 * MS,
            ..Model::default()
        }
    }

    fn store() -> Store {
        let mut st = Store::default();
        st.add_process(100, -1, "main");
        st
    }

    /// Loading on the launching thread itself (`num_workers=0`): its CPU before each call
    /// beyond the typical, and no helpers.
    #[test]
    fn a_thread_that_loads_itself() {
        let l = loading(&model(10, 6 * MS), &store(), 0, &[MS], 10);
        assert_eq!(
            l,
            Loading {
                on_thread_ns: 5 * MS,
                helpers_ns: 0,
                helpers: 0
            }
        );
        assert_eq!(l.workers_for(2 * MS), Some(3));
    }

    /// A thread asleep before its calls (on its loader's queue) loads nothing itself; two
    /// worker processes sampled beside it, each on a CPU 60% of the block, do.
    #[test]
    fn a_thread_that_waits_for_two_workers() {
        let m = model(10, 6 * MS);
        let mut st = store();
        let mut asleep = Vec::new();
        for c in &m.calls {
            asleep.push(OffCpu::blocked(c.start - c.seg, c.start - MS / 2));
        }
        st.procs[0].add_states(10, &asleep);
        for pid in [201, 202] {
            let w = st.process_for_samples(0, pid);
            st.procs[w as usize].sample_period_ns = 2 * MS;
            // 66 samples of 2 ms over the 110 ms block: 132 ms, 60% of it.
            let s: Vec<CpuSample> = (0..66)
                .map(|i| CpuSample {
                    time: MS + i * 5 * MS / 3,
                    stack: 0,
                })
                .collect();
            st.add_samples(w, pid, &s);
        }
        let l = loading(&m, &st, 0, &[MS], 10);
        assert_eq!(l.on_thread_ns, 0, "{l:?}");
        assert_eq!(l.helpers, 2, "{l:?}");
        // 2 x 132 ms over 10 steps, the first sample 1 ms into the block (its rate taken over
        // the 108.3 ms it was sampled in).
        assert!((26 * MS..=27 * MS).contains(&l.helpers_ns), "{l:?}");
        assert_eq!(l.workers_for(5 * MS), Some(6));
        // Nothing seen loading: no count.
        assert_eq!(Loading::default().workers_for(5 * MS), None);
    }
}

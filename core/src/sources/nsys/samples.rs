//! The threads' CPU samples, for what the CPU did during gaps: the native samples of
//! `--sample=process-tree` (`COMPOSITE_EVENTS`, stacks in `SAMPLING_CALLCHAINS`) and the
//! periodic Python backtraces (`--python-sampling`), a thread with Python samples keeping
//! those; the sampling period the median interval between a thread's samples. Read last, once
//! the processes, chains and Python backtraces are known.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::db::{proc_key, tid_of};
use super::import::Import;
use super::python::PyTrace;
use crate::model::plausible::What;
use crate::model::records::{CpuSample, Ns};

impl Import {
    /// The CPU samples of `--sample=process-tree` (`COMPOSITE_EVENTS`, their user-mode stacks in
    /// `SAMPLING_CALLCHAINS`) and the Python samples of `--python-sampling` (`python`, periodic
    /// Python backtraces) as the threads' samples, for what the CPU did during gaps. A thread
    /// with Python samples keeps those (they name the Python code; its native samples show the
    /// interpreter). The sampling period is taken as the median interval between a thread's
    /// samples.
    pub(super) fn cpu_samples(&mut self, python: Vec<PyTrace>) -> anyhow::Result<()> {
        let mut by_thread: HashMap<(u32, u32), Vec<CpuSample>> = HashMap::default();
        for p in python {
            if let Some(v) = self.verdict(What::CpuSample, p.time, p.time) {
                self.store.drop_implausible(What::CpuSample, v, 0);
                continue;
            }
            let proc = self.procs[&proc_key(p.gtid)];
            let stack = self.store.stacks.intern_path(0, p.frames);
            by_thread
                .entry((proc, tid_of(p.gtid)))
                .or_default()
                .push(CpuSample {
                    time: p.time,
                    stack,
                });
        }
        let with_python: HashSet<(u32, u32)> = by_thread.keys().copied().collect();
        let (ev, cc) = ("COMPOSITE_EVENTS", "SAMPLING_CALLCHAINS");
        if self.db.has(ev) && self.db.has(cc) {
            let mut samples: Vec<(i64, i64, Ns)> = Vec::new();
            let mut native_left = 0usize;
            for [id, start, gtid] in self.db.ints(ev, &["id!", "start!", "globalTid"])? {
                let (Some(id), Some(start), Some(gtid)) = (id, start, gtid) else {
                    continue;
                };
                if let Some(v) = self.verdict(What::CpuSample, start, start) {
                    self.store.drop_implausible(What::CpuSample, v, 0);
                } else if let Some(&proc) = self.procs.get(&proc_key(gtid)) {
                    if with_python.contains(&(proc, tid_of(gtid))) {
                        native_left += 1;
                    } else {
                        samples.push((gtid, id, start));
                    }
                } else {
                    // Processes that did no CUDA work explain no gap.
                    self.store.skip("CPU sample of a process without CUDA work");
                }
            }
            if native_left > 0 {
                self.note(format!(
                    "{native_left} native CPU samples of threads with Python samples left out \
                     (the Python samples name the code)"
                ));
            }
            let wanted: HashSet<i64> = samples.iter().map(|s| s.1).collect();
            let rows = self.chain_rows(cc, &wanted)?;
            let chains = self.frames_of(rows, false);
            for (gtid, id, time) in samples {
                let frames = chains.get(&id).map(|c| &c.frames[..]).unwrap_or(&[]);
                let stack = self.store.stacks.intern_path(0, frames.iter().copied());
                let proc = self.procs[&proc_key(gtid)];
                by_thread
                    .entry((proc, tid_of(gtid)))
                    .or_default()
                    .push(CpuSample { time, stack });
            }
        }
        let mut gaps: Vec<Ns> = Vec::new();
        for v in by_thread.values_mut() {
            v.sort_unstable_by_key(|x| x.time);
            gaps.extend(
                v.windows(2)
                    .map(|w| w[1].time - w[0].time)
                    .filter(|&d| d > 0),
            );
        }
        let period = if gaps.is_empty() {
            0
        } else {
            let i = gaps.len() / 2;
            *gaps.select_nth_unstable(i).1
        };
        let mut threads: Vec<_> = by_thread.into_iter().collect();
        threads.sort_unstable_by_key(|t| t.0);
        for ((proc, tid), v) in threads {
            self.store.procs[proc as usize].sample_period_ns = period;
            self.store.add_samples(proc, tid, &v);
        }
        Ok(())
    }
}

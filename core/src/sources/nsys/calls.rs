//! The CUDA API calls (`CUPTI_ACTIVITY_KIND_RUNTIME`, and `_DRIVER` in older exports), read
//! before their stacks are known ([`RawCall`]): joined to their second row where older exports
//! give a call's chain in one (`CUDABACKTRACE`), one call kept per correlation id, and the
//! export's bulk of times judged once the ops and the calls are in. Their stacks are made
//! later, from the chains (`chains.rs`), NVTX ranges and Python backtraces.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::db::{corr_of, tid_of};
use super::import::Import;
use crate::model::dropped;
use crate::model::plausible::{self, What};
use crate::model::records::{ApiCall, ApiKind, Ns};

/// `ENUM_NSYS_EVENT_CLASS` values of CUDA backtrace rows (older exports: a second row for a
/// call, carrying its chain).
pub(super) const CLASS_BACKTRACE: [i64; 3] = [67, 68, 69];

/// An API call read, before its stack is known.
pub(super) struct RawCall {
    pub(super) proc: u32,
    pub(super) call: ApiCall,
    pub(super) chain: Option<i64>,
    /// The time the profiler spent in the call, its own work included: where older exports
    /// give the chain in a second row, that row's start and end (they hold the call's).
    pub(super) held: (Ns, Ns),
}

impl Import {
    /// Finds the bulk of the export's times from its ops and `calls`, and drops the ops and
    /// calls it makes implausible.
    pub(super) fn judge_times(&mut self, calls: &mut Vec<RawCall>) {
        let procs = 0..self.store.procs.len() as u32;
        let starts = calls.iter().map(|c| c.call.start);
        self.bulk = dropped::file_bulk(&self.store, &procs, starts, calls.len());
        if let Some(b) = &mut self.bulk {
            b.reach_to(calls.iter().map(|c| (c.call.start, c.call.end)));
        }
        let Some(bulk) = self.bulk else {
            return;
        };
        dropped::drop_ops_and_calls(&mut self.store, &procs, &bulk);
        dropped::retain(&mut self.store, calls, What::ApiCall, &bulk, |c| {
            (c.call.start, c.call.end, c.call.name)
        });
    }

    /// The API calls of the runtime and driver tables, and the chains older exports give in a
    /// second row of each call.
    pub(super) fn calls(&mut self) -> anyhow::Result<Vec<RawCall>> {
        let cols = [
            "start!",
            "end!",
            "eventClass",
            "globalTid",
            "correlationId",
            "nameId!",
            "callchainId",
        ];
        let mut calls = Vec::new();
        let mut chains: HashMap<(u32, u32), i64> = HashMap::default();
        let mut held: HashMap<(u32, u32), (u32, Ns, Ns)> = HashMap::default();
        for t in ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"] {
            if !self.db.has(t) {
                continue;
            }
            let rows = self.db.ints(t, &cols)?;
            for [start, end, class, gtid, corr, name, chain] in rows {
                let (Some(start), Some(end), Some(gtid)) = (start, end, gtid) else {
                    self.store.skip("API call without a time or a thread");
                    continue;
                };
                if let Some(v) = plausible::shape(What::ApiCall, start, end) {
                    let name = self.strings.name(&mut self.store, name);
                    self.store.drop_implausible(What::ApiCall, v, name);
                    continue;
                }
                let proc = self.proc(gtid);
                let corr = corr_of(corr);
                if class.is_some_and(|c| CLASS_BACKTRACE.contains(&c)) {
                    if let Some(c) = chain {
                        chains.insert((proc, corr), c);
                    }
                    if corr != 0 {
                        held.insert((proc, corr), (tid_of(gtid), start, end));
                    }
                    continue;
                }
                let name = self.strings.name(&mut self.store, name);
                calls.push(RawCall {
                    proc,
                    call: ApiCall {
                        start,
                        end,
                        corr,
                        tid: tid_of(gtid),
                        name,
                        stack: 0,
                        kind: ApiKind::classify(self.store.names.get(name)),
                    },
                    chain,
                    held: (start, end),
                });
            }
        }
        for c in &mut calls {
            if c.chain.is_none() {
                c.chain = chains.get(&(c.proc, c.call.corr)).copied();
            }
            // The backtrace row holds its call: on the same thread, around it.
            if let Some(&(tid, s, e)) = held.get(&(c.proc, c.call.corr)) {
                if tid == c.call.tid && s <= c.call.start && e >= c.call.end {
                    c.held = (s, e);
                }
            }
        }
        // One call per correlation id in a process: the first to start (its ops' launch).
        calls.sort_by_key(|c| (c.proc, c.call.start, c.call.corr));
        let mut seen: HashSet<(u32, u32)> = HashSet::default();
        for c in &mut calls {
            if c.call.corr != 0 && !seen.insert((c.proc, c.call.corr)) {
                c.call.corr = 0;
            }
        }
        Ok(calls)
    }
}

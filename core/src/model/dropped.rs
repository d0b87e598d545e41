//! The plausibility rule (`plausible`) applied to a store: a file's bulk of times, its
//! implausible ops and calls dropped, and each drop counted and exemplified in the store's
//! `skipped` and `dropped_times`. Apart from the rule because it changes the store, which
//! itself only keeps the rule's counts.

use std::ops::Range;

use super::plausible::{fmt_far, skip_key, FileBulk, Times, Verdict, What, Why};
use super::records::{NameId, Ns};
use super::store::Store;

/// The bulk of a file's times loading in bulk: the starts of the GPU ops and API calls of
/// processes `procs`, and `more` (`more_len` times: its CPU spans', say); with how far its API
/// calls that rule 2 keeps reach.
pub fn file_bulk(
    store: &Store,
    procs: &Range<u32>,
    more: impl Iterator<Item = Ns>,
    more_len: usize,
) -> Option<FileBulk> {
    let lanes = || store.lanes.iter().filter(|l| procs.contains(&l.key.proc));
    let procs_of = || store.procs[procs.start as usize..procs.end as usize].iter();
    let total = lanes().map(|l| l.len()).sum::<usize>()
        + procs_of().map(|p| p.api_count()).sum::<usize>()
        + more_len;
    let mut t = Times::new(total);
    for l in lanes() {
        (0..l.len()).for_each(|i| t.push(l.start_of(i)));
    }
    for p in procs_of() {
        p.apis().for_each(|a| t.push(a.start));
    }
    more.for_each(|x| t.push(x));
    let bulk = t.bulk()?;
    let mut f = FileBulk {
        bulk,
        reach: bulk.hi,
    };
    f.reach_to(procs_of().flat_map(|p| p.apis()).map(|a| (a.start, a.end)));
    Some(f)
}

/// Drops the GPU ops and API calls of processes `procs` (a file's, loading in bulk) that the
/// rule finds implausible against `bulk`.
pub fn drop_ops_and_calls(store: &mut Store, procs: &Range<u32>, bulk: &FileBulk) {
    for lane in 0..store.lanes.len() {
        if !procs.contains(&store.lanes[lane].key.proc) {
            continue;
        }
        let gone = store.retain_ops(lane, |o| bulk.judge(What::GpuOp, o.start, o.end).is_none());
        for o in gone {
            if let Some(v) = bulk.judge(What::GpuOp, o.start, o.end) {
                store.drop_implausible(What::GpuOp, v, o.name);
            }
        }
    }
    for p in procs.clone() {
        let gone = store.retain_calls(p, |a| bulk.judge(What::ApiCall, a.start, a.end).is_none());
        for a in gone {
            if let Some(v) = bulk.judge(What::ApiCall, a.start, a.end) {
                store.drop_implausible(What::ApiCall, v, a.name);
            }
        }
    }
}

/// Keeps the records of `v` the rule finds plausible against `bulk` (`times` gives a
/// record's start, end and name), dropping the others.
pub fn retain<T>(
    store: &mut Store,
    v: &mut Vec<T>,
    what: What,
    bulk: &FileBulk,
    times: impl Fn(&T) -> (Ns, Ns, NameId),
) {
    v.retain(|x| {
        let (start, end, name) = times(x);
        match bulk.judge(what, start, end) {
            None => true,
            Some(verdict) => {
                store.drop_implausible(what, verdict, name);
                false
            }
        }
    });
}

impl Store {
    /// Drops a record the rule finds implausible: counts it in `skipped`, and keeps the first
    /// of its kind and cause as the warning's example (`name` is what it was called, if
    /// anything).
    pub fn drop_implausible(&mut self, what: What, v: Verdict, name: NameId) {
        *self.skipped.entry(skip_key(what, v.why)).or_insert(0) += 1;
        if !self.dropped_times.count(what, v.why) {
            return;
        }
        let named = match self.names.get(name) {
            "" => String::new(),
            n => format!("`{n}` "),
        };
        let example = match v.why {
            Why::Far if v.off == 0 => format!("{named}at {} ns, past the clock's end", v.at),
            Why::Far => format!(
                "{named}at {} ns, {} {} the rest of the capture",
                v.at,
                fmt_far(v.off),
                if v.off < 0 { "before" } else { "after" }
            ),
            Why::EndBeforeStart => {
                format!("{named}ending {} before its start", fmt_far(v.off))
            }
            Why::TooLong | Why::Outlasts => format!("{named}lasting {}", fmt_far(v.off)),
        };
        self.dropped_times.set_example(what, v.why, example);
    }

    /// What the source said about itself, then what it dropped as implausible: the report's
    /// notes.
    pub fn notes_and_drops(&self) -> Vec<String> {
        let mut v = self.notes.clone();
        v.extend(self.dropped_times.lines());
        v
    }
}

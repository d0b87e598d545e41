//! One store taken into another: a source read on its own (one trace of a rank set, read on a
//! thread of its own) joins the capture as if it had been read into it. Its names and stacks
//! are interned again in the order it made them, so each gets the id it would have had; its
//! processes and lanes move over with their ids rewritten (not copied), and its counts add up.

use std::ops::Range;

use super::process::Process;
use super::records::{NameId, StackId};
use super::store::Store;

/// What another store's names and stacks are in this one.
pub struct IdMap {
    names: Vec<NameId>,
    stacks: Vec<StackId>,
    /// Every id reads as itself: nothing to rewrite (ranks of one program usually meet the
    /// same names in the same order).
    same: bool,
}

impl IdMap {
    pub fn name(&self, id: NameId) -> NameId {
        self.names.get(id as usize).copied().unwrap_or(0)
    }

    pub fn stack(&self, id: StackId) -> StackId {
        self.stacks.get(id as usize).copied().unwrap_or(0)
    }

    /// Whether every id reads as itself.
    pub fn is_same(&self) -> bool {
        self.same
    }

    /// Rewrites the ids a process's calls, spans, ranges and samples hold.
    fn process(&self, p: &mut Process) {
        if self.same {
            return;
        }
        p.calls.update(|a| {
            a.name = self.name(a.name);
            a.stack = self.stack(a.stack);
        });
        for a in p.blocking.iter_mut() {
            a.name = self.name(a.name);
            a.stack = self.stack(a.stack);
        }
        for s in p.spans.values_mut().flatten() {
            s.stack = self.stack(s.stack);
        }
        for r in p.ranges.values_mut().chain(p.gpu_ranges.values_mut()) {
            for r in r.iter_mut() {
                r.name = self.name(r.name);
                r.domain = self.name(r.domain);
            }
        }
        for s in p.samples.values_mut().flatten() {
            s.stack = self.stack(s.stack);
        }
    }
}

impl Store {
    /// Interns every name and stack of `other` here, in the order `other` made them: what
    /// interning them while reading `other`'s source into this store would have given.
    pub fn intern_all_of(&mut self, other: &Store) -> IdMap {
        let names: Vec<NameId> = (0..other.names.len())
            .map(|i| self.names.intern(other.names.get(i as NameId)))
            .collect();
        let mut stacks: Vec<StackId> = Vec::with_capacity(other.stacks.len());
        stacks.push(0);
        for i in 1..other.stacks.len() {
            let n = other.stacks.node(i as StackId);
            // A node's parent was made before it.
            let parent = stacks.get(n.parent as usize).copied().unwrap_or(0);
            let frame = names.get(n.frame as usize).copied().unwrap_or(0);
            stacks.push(self.stacks.intern(parent, frame));
        }
        let same = names.iter().enumerate().all(|(i, &n)| n as usize == i)
            && stacks.iter().enumerate().all(|(i, &s)| s as usize == i);
        IdMap {
            names,
            stacks,
            same,
        }
    }

    /// Moves `other`'s processes, lanes and counts into this store, their ids read through
    /// `map` ([`Store::intern_all_of`]). `other` is a source read in bulk and not finished
    /// ([`Store::finish_bulk`] comes once everything is in). Its first process joins process
    /// `into` when one is given (this store's last one, which nothing has filled yet: it keeps
    /// the pid and rank it has, and takes the label), the others come after this store's.
    /// Returns the processes that hold `other`'s.
    pub fn absorb(&mut self, other: Store, map: &IdMap, into: Option<u32>) -> Range<u32> {
        let into = into.filter(|&t| t as usize + 1 == self.procs.len());
        let first = self.procs.len() as u32;
        // What gaptop cost the first recording that says (several nodes' recordings: each
        // machine's probe; the first's stands for all).
        if self.launch_cost.is_none() {
            self.launch_cost = other.launch_cost.clone();
        }
        let mut proc_of: Vec<u32> = Vec::with_capacity(other.procs.len());
        for (j, mut p) in other.procs.into_iter().enumerate() {
            map.process(&mut p);
            match into.filter(|_| j == 0) {
                Some(t) => {
                    self.join_process(t, p);
                    proc_of.push(t);
                }
                None => {
                    self.procs.push(p);
                    proc_of.push(self.procs.len() as u32 - 1);
                }
            }
        }
        for mut lane in other.lanes {
            lane.key.proc = proc_of.get(lane.key.proc as usize).copied().unwrap_or(0);
            if !map.same {
                lane.map_names(|n| map.name(n));
            }
            match self.lane_index.get(&lane.key) {
                Some(&l) => {
                    for op in lane.iter() {
                        self.lanes[l].push_unsorted(&op);
                    }
                }
                None => {
                    self.lane_index.insert(lane.key, self.lanes.len());
                    self.lanes.push(lane);
                }
            }
        }
        self.total_ops += other.total_ops;
        self.bytes += other.bytes;
        self.evicted_ops += other.evicted_ops;
        self.evicted_apis += other.evicted_apis;
        self.dropped += other.dropped;
        for (why, n) in other.skipped {
            *self.skipped.entry(why).or_insert(0) += n;
        }
        self.dropped_times.absorb(other.dropped_times);
        self.cpu_samples += other.cpu_samples;
        self.evicted_samples += other.evicted_samples;
        self.evicted_ranges += other.evicted_ranges;
        if self.sampling_note.is_none() {
            self.sampling_note = other.sampling_note;
        }
        self.notes.extend(other.notes);
        self.unverified.extend(other.unverified);
        for r in other.unaligned {
            if !self.unaligned.contains(&r) {
                self.unaligned.push(r);
            }
        }
        self.window = self.window.or(other.window);
        self.origin = self.origin.or(other.origin);
        for (b, f) in other.forward_of {
            self.forward_of.insert(map.stack(b), map.stack(f));
        }
        for (b, v) in other.forward_split {
            let v = v.into_iter().map(|(f, n)| (map.stack(f), n)).collect();
            self.forward_split.insert(map.stack(b), v);
        }
        self.generation += 1;
        into.unwrap_or(first)..self.procs.len() as u32
    }

    /// Process `p` (read apart) as part of process `t`.
    fn join_process(&mut self, t: u32, p: Process) {
        let Some(to) = self.procs.get_mut(t as usize) else {
            return;
        };
        to.label = p.label;
        if to.pid == 0 {
            to.pid = p.pid;
        }
        if to.rank < 0 {
            to.rank = p.rank;
        }
        for a in p.calls.iter() {
            to.calls.push_unindexed(&a);
        }
        to.bulk |= p.bulk;
        to.blocking.extend(p.blocking);
        for (tid, v) in p.spans {
            to.spans.entry(tid).or_default().extend(v);
        }
        for (tid, v) in p.ranges {
            to.ranges.entry(tid).or_default().extend(v);
        }
        for (k, v) in p.gpu_ranges {
            to.gpu_ranges.entry(k).or_default().extend(v);
        }
        for (tid, v) in p.samples {
            to.samples.entry(tid).or_default().extend(v);
        }
    }
}

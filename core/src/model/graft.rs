//! Ranges as frames: a live source's or a recording's NVTX ranges put, as they arrive, as the
//! outermost frames of the stacks of the calls they enclose (each by its family, so that every
//! step's gaps sum under one `step #` node), and a call that arrives inside ranges already
//! known given them at once. Apart from `ranges` because it rewrites the store's stacks: the
//! ranges themselves are plain data every source fills.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::ranges::{family, key, nest_from, open_before, Range, MAX_THREAD_RANGES};
use super::records::{NameId, Ns, StackId};
use super::stacks::StackTable;
use super::store::Store;

/// Stack rewriting with memos: a stack without its range frames, and a chain of range frames
/// with a stack under it.
struct Grafter<'a> {
    stacks: &'a mut StackTable,
    names: &'a HashSet<NameId>,
    frame_of: &'a HashMap<NameId, NameId>,
    bare: HashMap<StackId, StackId>,
    grafted: HashMap<(StackId, StackId), StackId>,
}

impl Grafter<'_> {
    /// `stack` with its leading range frames taken off.
    fn bare(&mut self, stack: StackId) -> StackId {
        if let Some(&b) = self.bare.get(&stack) {
            return b;
        }
        let frames = self.stacks.frames(stack);
        let k = frames.iter().take_while(|f| self.names.contains(f)).count();
        let b = if k == 0 {
            stack
        } else {
            self.stacks.intern_path(0, frames[k..].iter().copied())
        };
        self.bare.insert(stack, b);
        b
    }

    /// The call stack `stack` under the chain of range frames `chain`.
    fn graft(&mut self, chain: StackId, stack: StackId) -> StackId {
        let bare = self.bare(stack);
        if chain == 0 {
            return bare;
        }
        if let Some(&g) = self.grafted.get(&(chain, bare)) {
            return g;
        }
        let frames = self.stacks.frames(bare);
        let g = self.stacks.intern_path(chain, frames);
        self.grafted.insert((chain, bare), g);
        g
    }

    /// The chain of frames of these ranges, outermost first.
    fn chain<'r>(&mut self, ranges: impl Iterator<Item = &'r Range>) -> StackId {
        ranges.fold(0, |p, r| {
            let f = self.frame_of.get(&r.name).copied().unwrap_or(r.name);
            self.stacks.intern(p, f)
        })
    }
}

impl Store {
    /// Adds ranges of thread `tid` of process `proc` from a live source or a recording, and
    /// puts the ranges enclosing each of the thread's calls as the outermost frames of its
    /// stack (replacing the range frames it had: an outer range closes after the inner ones).
    /// Calls that arrive after a range that encloses them get theirs from
    /// [`Store::with_range_frames`].
    pub fn add_ranges(&mut self, proc: u32, tid: u32, mut new: Vec<Range>) {
        if new.is_empty() {
            return;
        }
        new.sort_by_key(key);
        let (lo, hi) = (
            new[0].start,
            new.iter().map(|r| r.end).max().unwrap_or(Ns::MIN),
        );
        let Store {
            names: interner,
            stacks,
            procs,
            evicted_ranges,
            ..
        } = self;
        let p = &mut procs[proc as usize];
        if p.range_frames.is_none() {
            p.range_frames = Some(p.index_calls());
        }
        let v = p.ranges.entry(tid).or_default();
        let from = v.partition_point(|r| key(r) <= key(&new[0]));
        let names: Vec<NameId> = new.iter().map(|r| r.name).collect();
        if from == v.len() {
            v.extend(new);
        } else {
            v.extend(new);
            v[from..].sort_by_key(key);
        }
        nest_from(v, from);
        if v.len() > MAX_THREAD_RANGES {
            let n = v.len() / 4;
            v.drain(..n);
            *evicted_ranges += n as u64;
        }
        let mut frames = p.range_frames.take().unwrap_or_default();
        for n in names {
            if let std::collections::hash_map::Entry::Vacant(e) = frames.frame_of.entry(n) {
                let fam = family(interner.get(n)).into_owned();
                let f = interner.intern(&fam);
                e.insert(f);
                frames.names.insert(f);
            }
        }
        let last = frames.last_end.entry(tid).or_insert(Ns::MIN);
        *last = (*last).max(hi);
        // The thread's ranges are taken out while its calls change, and put back.
        let v = p.ranges.remove(&tid).unwrap_or_default();
        // The thread's call index is taken out too, less the calls evicted since.
        let mut seqs = frames.calls.remove(&tid).unwrap_or_default();
        let gone = seqs
            .iter()
            .take_while(|&&q| p.call_by_seq(q).is_none())
            .count();
        seqs.drain(..gone);
        let (first, last) = {
            let start_of = |s: u64| p.call_by_seq(s).map_or(Ns::MIN, |a| a.start);
            (
                seqs.partition_point(|&s| start_of(s) < lo),
                seqs.partition_point(|&s| start_of(s) < hi),
            )
        };
        let mut g = Grafter {
            stacks,
            names: &frames.names,
            frame_of: &frames.frame_of,
            bare: HashMap::default(),
            grafted: HashMap::default(),
        };
        // The enclosed calls, in start order, with the ranges open at each (a sweep).
        let mut next = v.partition_point(|r| r.start <= lo);
        let mut open = open_before(&v, next, lo);
        let mut chain = None;
        for &seq in &seqs[first..last.max(first)] {
            let Some(call) = p.call_by_seq(seq) else {
                continue;
            };
            let t = call.start;
            while next < v.len() && v[next].start <= t {
                open.push(next);
                next += 1;
                chain = None;
            }
            let before = open.len();
            open.retain(|&j| v[j].end > t);
            if open.len() != before {
                chain = None;
            }
            let c = *chain.get_or_insert_with(|| g.chain(open.iter().map(|&j| &v[j])));
            p.set_call_stack(seq, g.graft(c, call.stack));
        }
        p.ranges.insert(tid, v);
        frames.calls.insert(tid, seqs);
        p.range_frames = Some(frames);
        self.generation += 1;
    }

    /// The stack a call of thread `tid` starting at `t` gets in a process whose ranges are
    /// frames (`add_ranges`): the ranges known to enclose it, then `stack`. Most calls arrive
    /// before any range enclosing them has closed and keep their stack here.
    pub fn with_range_frames(&mut self, proc: u32, tid: u32, t: Ns, stack: StackId) -> StackId {
        let p = &self.procs[proc as usize];
        let Some(frames) = &p.range_frames else {
            return stack;
        };
        if frames.last_end.get(&tid).is_none_or(|&e| t >= e) {
            return stack;
        }
        let chain: Vec<Range> = p.ranges_at(tid, t).into_iter().copied().collect();
        if chain.is_empty() {
            return stack;
        }
        let mut g = Grafter {
            stacks: &mut self.stacks,
            names: &frames.names,
            frame_of: &frames.frame_of,
            bare: HashMap::default(),
            grafted: HashMap::default(),
        };
        let c = g.chain(chain.iter());
        g.graft(c, stack)
    }
}

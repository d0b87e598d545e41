//! A lane's GPU ops (one process, device and stream), sorted by start, packed in 24 bytes
//! each, with the busy time of the lane before every 32nd op: the busy time before any op is
//! that mark plus at most 31 ops, so the busy time of any range is still a subtraction.
//!
//! An op is read as a [`GpuOp`] value (`op`, `iter`, `range`); how it is kept is this file's
//! business. Its duration is a `u32` of ns, its name, kind and communication flag share a
//! `u32`; an op that does not fit (longer than `u32` ns, a name id past 2^28, other flags)
//! keeps those exactly in a small side table the packed op points at.

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};

use super::chunked::{Chunked, Escapes};
use super::records::{GpuOp, LaneKey, NameId, Ns, OpKind, FLAG_COMM};

/// Ops per busy mark.
const MARK_EVERY: u64 = 32;

/// An op as a lane keeps it.
#[derive(Clone, Copy, Debug)]
struct Packed {
    start: Ns,
    /// Duration in ns, or (with [`WIDE`]) the index of the op's [`Wide`] entry.
    dur: u32,
    /// Name id (the low [`NAME_BITS`] bits), kind, [`COMM`], [`WIDE`].
    meta: u32,
    corr: u32,
    graph: u32,
}

const NAME_BITS: u32 = 28;
const NAME_MASK: u32 = (1 << NAME_BITS) - 1;
const KIND_SHIFT: u32 = NAME_BITS;
const COMM: u32 = 1 << 30;
const WIDE: u32 = 1 << 31;

/// What a packed op has no room for.
#[derive(Clone, Copy, Debug)]
struct Wide {
    /// `end - start`, wrapping (so every pair of times comes back as it was).
    dur: Ns,
    name: NameId,
    flags: u8,
}

/// The lane's busy time and latest end before an op.
#[derive(Clone, Copy, Debug)]
struct Mark {
    busy: Ns,
    max_end: Ns,
}

impl Mark {
    const ZERO: Mark = Mark {
        busy: 0,
        max_end: Ns::MIN,
    };

    /// The mark after `op` (busy time is the union of op intervals).
    #[inline]
    fn after(self, start: Ns, end: Ns) -> Mark {
        Mark {
            busy: self
                .busy
                .saturating_add(end.saturating_sub(start.max(self.max_end)).max(0)),
            max_end: self.max_end.max(end),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Lane {
    pub key: LaneKey,
    ops: Chunked<Packed>,
    wide: Escapes<Wide>,
    /// For each group of [`MARK_EVERY`] ops (counted from the first op the lane ever had), the
    /// mark before its first op still kept; `marks[0]` is the group of `ops[0]`.
    marks: VecDeque<Mark>,
    /// Ops that left from the front.
    base: u64,
    /// The mark after the last op.
    last: Mark,
}

#[inline]
fn kind_of(meta: u32) -> OpKind {
    match (meta >> KIND_SHIFT) & 3 {
        0 => OpKind::Kernel,
        1 => OpKind::Memcpy,
        _ => OpKind::Memset,
    }
}

fn kind_bits(k: OpKind) -> u32 {
    (match k {
        OpKind::Kernel => 0,
        OpKind::Memcpy => 1,
        OpKind::Memset => 2,
    }) << KIND_SHIFT
}

/// A packed op as a [`GpuOp`], what did not fit from the side table `wide`.
#[inline]
fn unpacked(wide: &Escapes<Wide>, p: &Packed) -> GpuOp {
    let (dur, name, flags) = if p.meta & WIDE == 0 {
        let comm = if p.meta & COMM != 0 { FLAG_COMM } else { 0 };
        (p.dur as Ns, p.meta & NAME_MASK, comm)
    } else {
        let w = wide.get(p.dur);
        (w.dur, w.name, w.flags)
    };
    GpuOp {
        start: p.start,
        end: p.start.wrapping_add(dur),
        name,
        corr: p.corr,
        graph: p.graph,
        kind: kind_of(p.meta),
        flags,
    }
}

impl Lane {
    pub(crate) fn new(key: LaneKey) -> Lane {
        Lane {
            key,
            ops: Chunked::default(),
            wide: Escapes::default(),
            marks: VecDeque::new(),
            base: 0,
            last: Mark::ZERO,
        }
    }

    fn pack(&mut self, op: &GpuOp) -> Packed {
        let dur = op.end.wrapping_sub(op.start);
        let kind = kind_bits(op.kind);
        let fits = (0..=u32::MAX as Ns).contains(&dur)
            && op.name <= NAME_MASK
            && op.flags & !FLAG_COMM == 0;
        let (dur, meta) = if fits {
            let comm = if op.flags & FLAG_COMM != 0 { COMM } else { 0 };
            (dur as u32, op.name | kind | comm)
        } else {
            let w = Wide {
                dur,
                name: op.name,
                flags: op.flags,
            };
            (self.wide.add(w), WIDE | kind)
        };
        Packed {
            start: op.start,
            dur,
            meta,
            corr: op.corr,
            graph: op.graph,
        }
    }

    #[inline]
    fn unpack(&self, p: &Packed) -> GpuOp {
        unpacked(&self.wide, p)
    }

    #[inline]
    fn end_of(&self, p: &Packed) -> Ns {
        if p.meta & WIDE == 0 {
            p.start.wrapping_add(p.dur as Ns)
        } else {
            p.start.wrapping_add(self.wide.get(p.dur).dur)
        }
    }

    /// Drops the side entry of a packed op that leaves or is rewritten.
    fn release(&mut self, p: &Packed) {
        if p.meta & WIDE != 0 {
            self.wide.release();
            if self.wide.stale() {
                let old = self.wide.renumber();
                for q in self.ops.iter_mut().filter(|q| q.meta & WIDE != 0) {
                    q.dur = self.wide.add(old[q.dur as usize]);
                }
            }
        }
    }

    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Op `i` (panics past the end, as indexing does).
    #[inline]
    pub fn op(&self, i: usize) -> GpuOp {
        self.unpack(&self.ops[i])
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<GpuOp> {
        self.ops.get(i).map(|p| self.unpack(p))
    }

    pub fn first(&self) -> Option<GpuOp> {
        self.get(0)
    }

    pub fn last(&self) -> Option<GpuOp> {
        self.ops.back().map(|p| self.unpack(p))
    }

    /// The start of op `i`, without reading the rest of it.
    #[inline]
    pub fn start_of(&self, i: usize) -> Ns {
        self.ops[i].start
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = GpuOp> + '_ {
        self.ops.iter().map(|p| self.unpack(p))
    }

    /// The ops with indices in `r` (clipped to the lane).
    pub fn range(&self, r: impl RangeBounds<usize>) -> impl DoubleEndedIterator<Item = GpuOp> + '_ {
        let a = match r.start_bound() {
            Bound::Included(&a) => a,
            Bound::Excluded(&a) => a + 1,
            Bound::Unbounded => 0,
        };
        let b = match r.end_bound() {
            Bound::Included(&b) => b + 1,
            Bound::Excluded(&b) => b,
            Bound::Unbounded => self.ops.len(),
        };
        self.ops.range(a..b.max(a)).map(|p| self.unpack(p))
    }

    /// Latest end seen in the lane (`Ns::MIN` before any op).
    pub fn max_end(&self) -> Ns {
        self.last.max_end
    }

    /// Index of the first op whose start is >= t.
    pub fn lower_bound(&self, t: Ns) -> usize {
        self.ops.partition_point(|o| o.start < t)
    }

    /// The mark before op `i` (`i <= len`): the group's mark, then the ops of the group
    /// before `i`.
    fn mark_before(&self, i: usize) -> Mark {
        if i == self.ops.len() {
            return self.last;
        }
        let abs = self.base + i as u64;
        let group = abs / MARK_EVERY;
        let k = (group - self.base / MARK_EVERY) as usize;
        let from = ((group * MARK_EVERY).max(self.base) - self.base) as usize;
        let m = self.marks.get(k).copied().unwrap_or(Mark::ZERO);
        self.ops
            .range(from..i)
            .fold(m, |m, p| m.after(p.start, self.end_of(p)))
    }

    /// Busy time of the lane (union of op intervals) before op `i` starts contributing.
    pub fn busy_before(&self, i: usize) -> Ns {
        self.mark_before(i).busy
    }

    /// Busy ns of the lane inside [t0, t1), clipped, in O(log n).
    pub fn busy_in(&self, t0: Ns, t1: Ns) -> Ns {
        if t1 <= t0 || self.ops.is_empty() {
            return 0;
        }
        self.busy_until(t1) - self.busy_until(t0)
    }

    /// Busy ns of the lane before time t.
    pub fn busy_until(&self, t: Ns) -> Ns {
        let i = self.lower_bound(t);
        if i == 0 {
            return 0;
        }
        // Ops before p end before t (streams do not overlap, so this is exact); p may straddle t.
        let p = &self.ops[i - 1];
        self.busy_before(i - 1) + (self.end_of(p).min(t).saturating_sub(p.start)).max(0)
    }

    /// Rebuilds the marks from op `i` on (after ops from `i` on changed), or all of them
    /// counting from 0 (`fresh`: after a bulk load).
    fn remark_from(&mut self, i: usize, fresh: bool) {
        if fresh {
            self.marks.clear();
        }
        let group = (self.base + i as u64) / MARK_EVERY;
        let k = (group - self.base / MARK_EVERY) as usize;
        if k >= self.marks.len() {
            // A group no op was in: it starts after everything the marks counted.
            let m = if fresh { Mark::ZERO } else { self.last };
            self.marks.push_back(m);
        }
        self.marks.truncate(k + 1);
        let from = ((group * MARK_EVERY).max(self.base) - self.base) as usize;
        let mut m = self.marks[k];
        for j in from..self.ops.len() {
            if j > from && (self.base + j as u64).is_multiple_of(MARK_EVERY) {
                self.marks.push_back(m);
            }
            let p = &self.ops[j];
            m = m.after(p.start, self.end_of(p));
        }
        self.last = m;
    }

    /// Appends an op that starts no earlier than the last one.
    pub(crate) fn push(&mut self, op: &GpuOp) {
        if (self.base + self.ops.len() as u64).is_multiple_of(MARK_EVERY) || self.marks.is_empty() {
            self.marks.push_back(self.last);
        }
        let p = self.pack(op);
        self.ops.push_back(p);
        self.last = self.last.after(op.start, op.end);
    }

    /// Adds an op in its place by start (after those that start with it).
    pub(crate) fn insert(&mut self, op: &GpuOp) {
        if self.ops.back().is_none_or(|b| b.start <= op.start) {
            return self.push(op);
        }
        let i = self.lower_bound(op.start + 1);
        let p = self.pack(op);
        self.ops.insert(i, p);
        self.remark_from(i, false);
    }

    /// Adds ops sorted by (start, end), merged into the lane with one sort of the tail they
    /// fall in.
    pub(crate) fn merge(&mut self, ops: &[GpuOp]) {
        let i = self.lower_bound(ops[0].start + 1);
        for op in ops {
            let p = self.pack(op);
            self.ops.push_back(p);
        }
        let mut tail: Vec<Packed> = self.ops.range(i..self.ops.len()).copied().collect();
        tail.sort_by_key(|p| (p.start, self.end_of(p), p.corr));
        for (j, p) in tail.into_iter().enumerate() {
            self.ops[i + j] = p;
        }
        self.remark_from(i, false);
    }

    /// Adds an op at the end, unsorted and without its sums ([`Lane::finish_bulk`] follows).
    pub(crate) fn push_unsorted(&mut self, op: &GpuOp) {
        let p = self.pack(op);
        self.ops.push_back(p);
    }

    /// Sorts the ops by (start, end, correlation), gives back unused room and recomputes
    /// every mark from 0.
    pub(crate) fn finish_bulk(&mut self) {
        let wide = std::mem::take(&mut self.wide);
        let end = |p: &Packed| {
            if p.meta & WIDE == 0 {
                p.start.wrapping_add(p.dur as Ns)
            } else {
                p.start.wrapping_add(wide.get(p.dur).dur)
            }
        };
        self.ops.sort_by_key(|p| (p.start, end(p), p.corr));
        self.wide = wide;
        self.ops.shrink_to_fit();
        self.remark_from(0, true);
    }

    /// Keeps only the ops for which `keep` holds, in their order, and recomputes the marks;
    /// returns those that left. A lane none leaves is not touched.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&GpuOp) -> bool) -> Vec<GpuOp> {
        let gone: Vec<(Packed, GpuOp)> = self
            .ops
            .iter()
            .map(|p| (*p, self.unpack(p)))
            .filter(|(_, op)| !keep(op))
            .collect();
        if gone.is_empty() {
            return Vec::new();
        }
        let wide = &self.wide;
        self.ops.retain(|p| keep(&unpacked(wide, p)));
        for (p, _) in &gone {
            self.release(p);
        }
        self.remark_from(0, true);
        gone.into_iter().map(|(_, op)| op).collect()
    }

    /// Takes the oldest op out.
    pub(crate) fn pop_front(&mut self) -> Option<GpuOp> {
        let p = self.ops.pop_front()?;
        let op = self.unpack(&p);
        self.release(&p);
        self.base += 1;
        if self.base.is_multiple_of(MARK_EVERY) {
            self.marks.pop_front();
        } else if let Some(m) = self.marks.front_mut() {
            *m = m.after(op.start, op.end);
        }
        Some(op)
    }

    /// Rewrites op `i` in place; its start and end must keep the lane's order and sums (its
    /// flags change, or every op moves by the same time).
    fn set(&mut self, i: usize, op: &GpuOp) {
        let old = self.ops[i];
        if old.meta & WIDE != 0 {
            // Its side entry is reused, or let go if it fits now.
            let fresh = self.pack(op);
            if fresh.meta & WIDE != 0 {
                self.wide.release();
                let w = self.wide.get(fresh.dur);
                self.wide.set(old.dur, w);
                self.ops[i] = Packed {
                    dur: old.dur,
                    ..fresh
                };
                return;
            }
            self.ops[i] = fresh;
            self.release(&old);
        } else {
            let p = self.pack(op);
            self.ops[i] = p;
        }
    }

    /// Sets the flags of op `i`.
    pub fn set_flags(&mut self, i: usize, flags: u8) {
        let mut op = self.op(i);
        op.flags = flags;
        self.set(i, &op);
    }

    /// Renames every op: `name` gives the id its name has in another store (a lane read on
    /// its own, joining a capture). Order and sums stay.
    pub(crate) fn map_names(&mut self, name: impl Fn(NameId) -> NameId) {
        for i in 0..self.ops.len() {
            let mut op = self.op(i);
            let to = name(op.name);
            if to != op.name {
                op.name = to;
                self.set(i, &op);
            }
        }
    }

    /// Moves every op `by` ns later (saturating), as [`Store::shift_process`] does; sums stay.
    ///
    /// [`Store::shift_process`]: super::store::Store::shift_process
    pub(crate) fn shift(&mut self, by: Ns) {
        for i in 0..self.ops.len() {
            let mut op = self.op(i);
            op.start = op.start.saturating_add(by);
            op.end = op.end.saturating_add(by);
            self.set(i, &op);
        }
        let shift = |t: &mut Ns| {
            if *t != Ns::MIN {
                *t = t.saturating_add(by);
            }
        };
        shift(&mut self.last.max_end);
        for m in self.marks.iter_mut() {
            shift(&mut m.max_end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lane() -> Lane {
        Lane::new(LaneKey {
            proc: 0,
            device: 0,
            stream: 0,
        })
    }

    /// Busy time before each op, the sum of op contributions counted from scratch.
    fn brute(ops: &[GpuOp]) -> Vec<Ns> {
        let mut m = Mark::ZERO;
        ops.iter()
            .map(|o| {
                let b = m.busy;
                m = m.after(o.start, o.end);
                b
            })
            .collect()
    }

    #[test]
    fn ops_come_back_as_they_went_in() {
        let mut l = lane();
        let mut ops = vec![
            GpuOp::new(10, 20, OpKind::Memcpy, 5, 1),
            GpuOp::new(30, 30 + (1 << 33), OpKind::Kernel, 6, 2),
            GpuOp::new(i64::MAX - 3, i64::MAX, OpKind::Memset, (1 << 28) + 1, 3),
            GpuOp::new(i64::MAX - 2, i64::MAX, OpKind::Kernel, 7, 4),
        ];
        ops[0].flags = FLAG_COMM;
        ops[0].graph = 9;
        ops[3].flags = 0x80;
        ops[3].end = i64::MIN;
        for o in &ops {
            l.push(o);
        }
        assert_eq!(l.iter().collect::<Vec<_>>(), ops);
        assert_eq!(std::mem::size_of::<Packed>(), 24);
        l.set_flags(1, FLAG_COMM);
        l.set_flags(3, 0);
        assert_eq!(l.op(1).flags, FLAG_COMM);
        assert_eq!(l.op(3).flags, 0);
        assert_eq!(l.op(3).end, i64::MIN);
    }

    #[test]
    fn marks_follow_appends_inserts_and_evictions() {
        let mut l = lane();
        // What left, in order, then what is kept: the lane counts busy time over both.
        let (mut gone, mut all): (Vec<GpuOp>, Vec<GpuOp>) = (Vec::new(), Vec::new());
        let mut x = 7u64;
        for round in 0..3000i64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = (x >> 33) as i64;
            let t = round * 100;
            match r % 9 {
                0 => {
                    // Late: into its place.
                    let s = t - r % 700;
                    let op = GpuOp::new(s, s + 40 + r % 300, OpKind::Kernel, 0, 0);
                    l.insert(&op);
                    let i = all.partition_point(|o| o.start <= op.start);
                    all.insert(i, op);
                }
                1 if round % 3 == 0 && !all.is_empty() => {
                    assert_eq!(l.pop_front(), Some(all[0]));
                    gone.push(all.remove(0));
                }
                _ => {
                    let op = GpuOp::new(t, t + 30 + r % 90, OpKind::Kernel, 0, 0);
                    l.insert(&op);
                    all.push(op);
                }
            }
            if round % 97 == 0 {
                assert!(l.iter().eq(all.iter().copied()), "round {round}");
                let both: Vec<GpuOp> = gone.iter().chain(&all).copied().collect();
                let want = &brute(&both)[gone.len()..];
                let got: Vec<Ns> = (0..l.len()).map(|i| l.busy_before(i)).collect();
                assert_eq!(got, want, "round {round}");
            }
        }
        // A fresh recount starts from the first op kept.
        l.finish_bulk();
        let got: Vec<Ns> = (0..l.len()).map(|i| l.busy_before(i)).collect();
        assert_eq!(got, brute(&l.iter().collect::<Vec<_>>()));
    }

    #[test]
    fn bulk_loads_sort_and_count_from_zero() {
        let mut l = lane();
        let mut ops: Vec<GpuOp> = (0..1000)
            .map(|i| {
                let s = (i * 7919 % 1000) * 50;
                GpuOp::new(s, s + 20 + i % 40, OpKind::Kernel, 0, i as u32)
            })
            .collect();
        for o in &ops {
            l.push_unsorted(o);
        }
        l.finish_bulk();
        ops.sort_by_key(|o| (o.start, o.end, o.corr));
        assert_eq!(l.iter().collect::<Vec<_>>(), ops);
        let want = brute(&ops);
        for (i, w) in want.iter().enumerate() {
            assert_eq!(l.busy_before(i), *w);
        }
        assert_eq!(l.busy_in(0, 1_000_000), want[999] + ops[999].dur());
    }

    /// Ops leave from anywhere (wide ones too, after evictions), and the sums follow.
    #[test]
    fn retained_ops_come_back_with_their_sums() {
        let mut l = lane();
        let mut all: Vec<GpuOp> = (0..300i64)
            .map(|i| {
                // Every 7th op is too long for the packed duration.
                let d = if i % 7 == 0 { 1 << 33 } else { 20 + i % 40 };
                GpuOp::new(i * 100, i * 100 + d, OpKind::Kernel, 0, i as u32)
            })
            .collect();
        for o in &all {
            l.push(o);
        }
        for _ in 0..5 {
            l.pop_front();
        }
        all.drain(..5);
        let gone: Vec<GpuOp> = all.iter().filter(|o| o.start % 300 == 0).copied().collect();
        assert_eq!(l.retain(|o| o.start % 300 != 0), gone);
        all.retain(|o| o.start % 300 != 0);
        assert!(l.iter().eq(all.iter().copied()));
        assert_eq!(
            (0..l.len()).map(|i| l.busy_before(i)).collect::<Vec<_>>(),
            brute(&all)
        );
        assert!(l.retain(|_| true).is_empty());
        assert_eq!(l.max_end(), all.iter().map(|o| o.end).max().unwrap());
    }
}

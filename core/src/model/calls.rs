//! A process's host API calls in the order they were stored, packed in 32 bytes each, and
//! found by correlation id without a hash map: CUPTI and Kineto number calls in the order they
//! are made, so the calls whose id is above every id before them ("in order", nearly all)
//! are found by a binary search over the highest such id of each block of 32 calls; the few
//! others (a call stored late, a repeated id) go to a small map.
//!
//! A call is read as an [`ApiCall`] value; one longer than `u32` ns (or ending before it
//! starts) keeps its duration exactly in a side table.

use std::collections::VecDeque;

use rustc_hash::FxHashMap as HashMap;

use super::chunked::{Chunked, Escapes};
use super::records::{ApiCall, ApiKind, NameId, Ns, StackId};

/// Calls per block of the correlation index.
const BLOCK: u64 = 32;

/// A call as a process keeps it.
#[derive(Clone, Copy, Debug)]
struct Packed {
    start: Ns,
    /// Duration in ns, or (with [`WIDE`]) the index of its entry in `Calls::wide`.
    dur: u32,
    corr: u32,
    tid: u32,
    name: NameId,
    stack: StackId,
    kind: u8,
    bits: u8,
}

/// `dur` is an index into the side table.
const WIDE: u8 = 1;
/// The call's id is above every id before it: the binary search finds it.
const IN_ORDER: u8 = 2;

const KINDS: [ApiKind; 6] = [
    ApiKind::Launch,
    ApiKind::GraphLaunch,
    ApiKind::Copy,
    ApiKind::Sync,
    ApiKind::Wait,
    ApiKind::Other,
];

/// A packed call as an [`ApiCall`], its duration from the side table `wide` if there.
#[inline]
fn unpacked(wide: &Escapes<Ns>, p: &Packed) -> ApiCall {
    let dur = if p.bits & WIDE == 0 {
        p.dur as Ns
    } else {
        wide.get(p.dur)
    };
    ApiCall {
        start: p.start,
        end: p.start.wrapping_add(dur),
        corr: p.corr,
        tid: p.tid,
        name: p.name,
        stack: p.stack,
        kind: KINDS[p.kind as usize],
    }
}

#[derive(Clone, Debug, Default)]
pub(crate) struct Calls {
    calls: Chunked<Packed>,
    wide: Escapes<Ns>,
    /// Sequence number of `calls[0]`: calls stored before it and evicted.
    base: u64,
    /// The highest id of a call in order so far.
    top: u32,
    /// Per block of [`BLOCK`] sequence numbers (from the block of `base`), `top` once its
    /// last call was stored: non-decreasing.
    tops: VecDeque<u32>,
    /// Sequence numbers of the calls not in order, by id (the latest of an id).
    others: HashMap<u32, u64>,
}

impl Calls {
    fn pack(&mut self, a: &ApiCall) -> Packed {
        let dur = a.end.wrapping_sub(a.start);
        let (dur, bits) = match u32::try_from(dur) {
            Ok(d) => (d, 0),
            Err(_) => (self.wide.add(dur), WIDE),
        };
        Packed {
            start: a.start,
            dur,
            corr: a.corr,
            tid: a.tid,
            name: a.name,
            stack: a.stack,
            kind: KINDS.iter().position(|k| *k == a.kind).unwrap_or(5) as u8,
            bits,
        }
    }

    #[inline]
    fn unpack(&self, p: &Packed) -> ApiCall {
        unpacked(&self.wide, p)
    }

    pub fn len(&self) -> usize {
        self.calls.len()
    }

    /// The sequence number of the next call stored.
    pub fn next_seq(&self) -> u64 {
        self.base + self.calls.len() as u64
    }

    /// The call stored `seq`-th (None once it was evicted).
    #[inline]
    pub fn get(&self, seq: u64) -> Option<ApiCall> {
        let i = seq.checked_sub(self.base)?;
        self.calls.get(i as usize).map(|p| self.unpack(p))
    }

    /// The start of the call stored `seq`-th.
    pub fn start_of(&self, seq: u64) -> Option<Ns> {
        let i = seq.checked_sub(self.base)?;
        self.calls.get(i as usize).map(|p| p.start)
    }

    pub fn front_start(&self) -> Option<Ns> {
        self.calls.front().map(|p| p.start)
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = ApiCall> + '_ {
        self.calls.iter().map(|p| self.unpack(p))
    }

    /// The calls stored from `seq` on before `end` (sequence numbers, clipped).
    pub fn range(&self, seq: u64, end: u64) -> impl DoubleEndedIterator<Item = ApiCall> + '_ {
        let a = seq.saturating_sub(self.base) as usize;
        let b = end.saturating_sub(self.base) as usize;
        self.calls.range(a..b).map(|p| self.unpack(p))
    }

    /// Stores a call unindexed (a bulk load; [`Calls::reindex`] follows).
    pub fn push_unindexed(&mut self, a: &ApiCall) {
        let p = self.pack(a);
        self.calls.push_back(p);
    }

    /// Stores a call and indexes its id; returns its sequence number.
    pub fn push(&mut self, a: &ApiCall) -> u64 {
        let seq = self.next_seq();
        let mut p = self.pack(a);
        self.index(&mut p, seq);
        self.calls.push_back(p);
        seq
    }

    fn index(&mut self, p: &mut Packed, seq: u64) {
        let k = (seq / BLOCK - self.base / BLOCK) as usize;
        while self.tops.len() <= k {
            self.tops.push_back(self.top);
        }
        if p.corr == 0 {
            return;
        }
        if p.corr > self.top {
            self.top = p.corr;
            self.tops[k] = p.corr;
            p.bits |= IN_ORDER;
        } else {
            self.others.insert(p.corr, seq);
        }
    }

    /// Sorts the calls by (start, id) and indexes them afresh.
    pub fn reindex(&mut self) {
        self.calls.sort_by_key(|a| (a.start, a.corr));
        self.calls.shrink_to_fit();
        self.top = 0;
        self.tops.clear();
        self.others = HashMap::default();
        for i in 0..self.calls.len() {
            let mut p = self.calls[i];
            p.bits &= !IN_ORDER;
            self.index(&mut p, self.base + i as u64);
            self.calls[i] = p;
        }
        self.tops.shrink_to_fit();
        self.others.shrink_to_fit();
    }

    /// Keeps only the calls for which `keep` holds, in their order, unindexed (a bulk load,
    /// which [`Calls::reindex`] finishes); returns those that left. Calls none leaves are not
    /// touched.
    pub fn retain(&mut self, mut keep: impl FnMut(&ApiCall) -> bool) -> Vec<ApiCall> {
        let gone: Vec<(bool, ApiCall)> = self
            .calls
            .iter()
            .map(|p| (p.bits & WIDE != 0, self.unpack(p)))
            .filter(|(_, a)| !keep(a))
            .collect();
        if gone.is_empty() {
            return Vec::new();
        }
        let wide = &self.wide;
        self.calls.retain(|p| keep(&unpacked(wide, p)));
        for _ in gone.iter().filter(|(w, _)| *w) {
            self.release_wide();
        }
        gone.into_iter().map(|(_, a)| a).collect()
    }

    /// The sequence number of the latest call with id `corr` still kept.
    pub fn find(&self, corr: u32) -> Option<u64> {
        if corr == 0 {
            return None;
        }
        if !self.others.is_empty() {
            if let Some(&seq) = self.others.get(&corr) {
                return Some(seq);
            }
        }
        // The first block whose calls reach `corr`: an in-order call with it is there.
        let k = self.block_of(corr);
        let block = self.base / BLOCK + k as u64;
        let (lo, hi) = (
            (block * BLOCK).max(self.base),
            ((block + 1) * BLOCK).min(self.next_seq()),
        );
        let at = |seq: u64| &self.calls[(seq - self.base) as usize];
        // Ids counted one a call (the usual case) put it at its distance from the block's
        // first id.
        if k > 0 && lo == block * BLOCK {
            let guess = lo + (corr - self.tops[k - 1] - 1) as u64;
            if guess < hi && at(guess).corr == corr && at(guess).bits & IN_ORDER != 0 {
                return Some(guess);
            }
        }
        // A binary search over the block's in-order calls, passing over the others.
        let (mut a, mut b) = (lo, hi);
        while a < b {
            let mid = a + (b - a) / 2;
            let Some(j) = (mid..b).find(|&j| at(j).bits & IN_ORDER != 0) else {
                b = mid;
                continue;
            };
            match at(j).corr.cmp(&corr) {
                std::cmp::Ordering::Equal => return Some(j),
                std::cmp::Ordering::Less => a = j + 1,
                std::cmp::Ordering::Greater => b = mid,
            }
        }
        None
    }

    /// The first block whose top reaches `corr`: guessed as if ids grew evenly, and searched
    /// for where they do not.
    #[inline]
    fn block_of(&self, corr: u32) -> usize {
        let t = &self.tops;
        let n = t.len();
        if n > 2 && corr > t[0] && t[n - 1] > t[0] {
            let span = (t[n - 1] - t[0]) as u64;
            let k = (((corr - t[0]) as u64 * (n - 1) as u64).div_ceil(span) as usize).min(n - 1);
            if t[k] >= corr && t[k - 1] < corr {
                return k;
            }
        }
        t.partition_point(|&x| x < corr)
    }

    /// Takes the oldest call out.
    pub fn pop_front(&mut self) -> Option<ApiCall> {
        let p = self.calls.pop_front()?;
        let a = self.unpack(&p);
        if p.bits & WIDE != 0 {
            self.release_wide();
        }
        if p.bits & IN_ORDER == 0 && self.others.get(&p.corr) == Some(&self.base) {
            self.others.remove(&p.corr);
        }
        self.base += 1;
        if self.base.is_multiple_of(BLOCK) {
            self.tops.pop_front();
        }
        Some(a)
    }

    fn release_wide(&mut self) {
        self.wide.release();
        if self.wide.stale() {
            let old = self.wide.renumber();
            for q in self.calls.iter_mut().filter(|q| q.bits & WIDE != 0) {
                q.dur = self.wide.add(old[q.dur as usize]);
            }
        }
    }

    /// Sets the stack of the call stored `seq`-th.
    pub fn set_stack(&mut self, seq: u64, stack: StackId) {
        if let Some(i) = seq.checked_sub(self.base) {
            if let Some(p) = self.calls.get_mut(i as usize) {
                p.stack = stack;
            }
        }
    }

    /// Changes every call's times and stack with `f` (its id and order must stay).
    pub fn update(&mut self, mut f: impl FnMut(&mut ApiCall)) {
        for i in 0..self.calls.len() {
            let old = self.calls[i];
            let mut a = self.unpack(&old);
            f(&mut a);
            let mut p = self.pack(&a);
            p.bits |= old.bits & IN_ORDER;
            if old.bits & WIDE != 0 {
                self.release_wide();
            }
            self.calls[i] = p;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start: Ns, corr: u32) -> ApiCall {
        ApiCall {
            start,
            end: start + 5,
            corr,
            tid: 1,
            name: 0,
            stack: 0,
            kind: ApiKind::Launch,
        }
    }

    /// Ids found as a map of the latest sequence number per id would find them, through
    /// calls out of order, repeated ids, calls without one and evictions.
    #[test]
    fn finds_ids_as_a_map_would() {
        let mut c = Calls::default();
        let mut map: std::collections::HashMap<u32, u64> = Default::default();
        let mut x = 99u64;
        let mut next = 1u32;
        for round in 0..20_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let r = x >> 33;
            let corr = match r % 20 {
                0 => 0,
                1 => next.saturating_sub((r % 50) as u32),
                2 => next + 100,
                _ => {
                    next += 1 + (r % 3) as u32;
                    next
                }
            };
            let seq = c.push(&call(round as Ns, corr));
            if corr != 0 {
                map.insert(corr, seq);
            }
            if r.is_multiple_of(7) {
                let base = c.base;
                let a = c.pop_front().unwrap();
                if map.get(&a.corr) == Some(&base) {
                    map.remove(&a.corr);
                }
            }
            if round % 101 == 0 {
                for id in 0..next + 120 {
                    let want = map.get(&id).copied().filter(|_| id != 0);
                    assert_eq!(c.find(id), want, "round {round}, id {id}");
                }
            }
        }
    }

    #[test]
    fn calls_in_order_need_no_map() {
        let mut c = Calls::default();
        for i in 1..=1000u32 {
            c.push(&call(i as Ns, 2 * i));
        }
        assert!(c.others.is_empty());
        assert_eq!(c.tops.len(), 1000usize.div_ceil(BLOCK as usize));
        assert_eq!(c.find(2 * 777), Some(776));
        assert_eq!(c.find(2 * 777 + 1), None);
    }

    #[test]
    fn calls_come_back_as_they_went_in() {
        let mut c = Calls::default();
        let mut a = call(10, 1);
        a.end = 10 + (1 << 40);
        a.kind = ApiKind::Wait;
        let b = ApiCall {
            end: 3,
            ..call(20, 2)
        };
        c.push(&a);
        c.push(&b);
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![a, b]);
        c.update(|x| {
            x.start += 7;
            x.end += 7;
        });
        assert_eq!(c.get(0).unwrap().end, a.end + 7);
        assert_eq!(c.get(1).unwrap().end, 10);
        assert_eq!(std::mem::size_of::<Packed>(), 32);
    }

    /// Calls leave from anywhere (wide ones too) and the rest are found by their ids again.
    #[test]
    fn retained_calls_are_found_again() {
        let mut c = Calls::default();
        let all: Vec<ApiCall> = (1..=100u32)
            .map(|i| {
                let mut a = call(i as Ns * 10, i);
                if i % 9 == 0 {
                    a.end = a.start + (1 << 40);
                }
                a
            })
            .collect();
        for a in &all {
            c.push_unindexed(a);
        }
        assert_eq!(c.retain(|a| a.corr % 4 != 0).len(), 25);
        assert!(c.retain(|_| true).is_empty());
        c.reindex();
        let kept: Vec<ApiCall> = all.iter().filter(|a| a.corr % 4 != 0).copied().collect();
        assert_eq!(c.iter().collect::<Vec<_>>(), kept);
        assert_eq!(c.find(8), None);
        assert_eq!(c.get(c.find(9).unwrap()), Some(all[8]));
    }
}

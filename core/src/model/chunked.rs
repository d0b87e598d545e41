//! A deque kept in chunks, for the store's ops and calls: it grows a chunk at a time, so a
//! live store's slack is at most one chunk a lane (a `VecDeque` doubles, leaving up to half its
//! capacity unused), and the oldest entries leave from the front as the budget asks.
//!
//! The first chunk may be of any length (a bulk load's sorted whole, or the small chunk a
//! short lane starts with, grown up to [`CHUNK`]); every later one but the last holds exactly
//! [`CHUNK`] entries, so finding entry `i` is a division.

use std::collections::VecDeque;
use std::ops::Range;

/// Entries a chunk holds past the first.
pub const CHUNK: usize = 4096;

#[derive(Clone, Debug)]
pub struct Chunked<T> {
    chunks: VecDeque<Vec<T>>,
    /// Entries of `chunks[0]` already taken from the front.
    head: usize,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: VecDeque::new(),
            head: 0,
            len: 0,
        }
    }
}

impl<T: Copy> Chunked<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The chunk and the offset in it of entry `i` (< len).
    #[inline]
    fn locate(&self, i: usize) -> (usize, usize) {
        let j = i + self.head;
        let first = self.chunks[0].len();
        if j < first {
            (0, j)
        } else {
            let k = j - first;
            (1 + k / CHUNK, k % CHUNK)
        }
    }

    #[inline]
    pub fn get(&self, i: usize) -> Option<&T> {
        if i >= self.len {
            return None;
        }
        let (c, o) = self.locate(i);
        Some(&self.chunks[c][o])
    }

    #[inline]
    pub fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        if i >= self.len {
            return None;
        }
        let (c, o) = self.locate(i);
        Some(&mut self.chunks[c][o])
    }

    pub fn front(&self) -> Option<&T> {
        self.get(0)
    }

    pub fn back(&self) -> Option<&T> {
        self.len.checked_sub(1).and_then(|i| self.get(i))
    }

    pub fn push_back(&mut self, x: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < last.capacity() => last.push(x),
            // A short first chunk (or a shrunk last one) grows, by doubling, up to a chunk.
            Some(last) if last.len() < CHUNK => {
                let want = (last.len() * 2).clamp(8, CHUNK);
                last.reserve_exact(want - last.len());
                last.push(x);
            }
            _ => {
                let cap = if self.chunks.is_empty() { 8 } else { CHUNK };
                let mut v = Vec::with_capacity(cap);
                v.push(x);
                self.chunks.push_back(v);
            }
        }
        self.len += 1;
    }

    pub fn pop_front(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let x = self.chunks[0][self.head];
        self.head += 1;
        self.len -= 1;
        if self.head == self.chunks[0].len() {
            self.chunks.pop_front();
            self.head = 0;
        }
        Some(x)
    }

    /// Inserts `x` at `i`, moving the entries after it back by one.
    pub fn insert(&mut self, i: usize, x: T) {
        assert!(i <= self.len, "insert past the end");
        self.push_back(x);
        for j in (i + 1..self.len).rev() {
            let prev = self[j - 1];
            self[j] = prev;
        }
        self[i] = x;
    }

    /// The live part of chunk `c` and the index of its first entry.
    fn chunk(&self, c: usize) -> (usize, &[T]) {
        if c == 0 {
            (0, &self.chunks[0][self.head..])
        } else {
            let first = self.chunks[0].len() - self.head;
            (first + (c - 1) * CHUNK, &self.chunks[c][..])
        }
    }

    /// The entries in `r`, a run of slices.
    fn slices(&self, r: Range<usize>) -> impl DoubleEndedIterator<Item = &[T]> + '_ {
        let (a, b) = (r.start.min(self.len), r.end.min(self.len));
        let cs = if a < b {
            self.locate(a).0..self.locate(b - 1).0 + 1
        } else {
            0..0
        };
        cs.map(move |c| {
            let (at, s) = self.chunk(c);
            let lo = a.saturating_sub(at).min(s.len());
            let hi = (b - at.min(b)).min(s.len());
            &s[lo..hi]
        })
    }

    pub fn range(&self, r: Range<usize>) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.slices(r).flat_map(|s| s.iter())
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + '_ {
        self.range(0..self.len)
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut T> + '_ {
        let head = self.head;
        self.chunks
            .iter_mut()
            .enumerate()
            .flat_map(move |(c, v)| v[if c == 0 { head } else { 0 }..].iter_mut())
    }

    /// Index of the first entry for which `pred` is false (entries for which it holds first).
    pub fn partition_point(&self, mut pred: impl FnMut(&T) -> bool) -> usize {
        // The first chunk whose last entry fails, then the place inside it.
        let (mut lo, mut hi) = (0, self.chunks.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            let (_, s) = self.chunk(mid);
            if s.last().is_some_and(&mut pred) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo == self.chunks.len() {
            return self.len;
        }
        let (at, s) = self.chunk(lo);
        at + s.partition_point(pred)
    }

    /// The entries as one slice, moved into one allocation if they were in several.
    pub fn make_contiguous(&mut self) -> &mut [T] {
        if self.chunks.len() > 1 {
            let mut v = Vec::with_capacity(self.len);
            let mut from = std::mem::take(&mut self.head);
            while let Some(c) = self.chunks.pop_front() {
                v.extend_from_slice(&c[from..]);
                from = 0;
            }
            self.chunks.push_back(v);
        } else if self.head > 0 {
            self.chunks[0].drain(..self.head);
            self.head = 0;
        }
        match self.chunks.front_mut() {
            Some(v) => &mut v[..],
            None => &mut [],
        }
    }

    /// Sorts the entries by `key`, stably, where they are: entries already in order cost one
    /// pass; others are sorted as their keys (each with its place, so equal keys keep their
    /// order) and moved along the permutation's cycles, so the entries are never held twice.
    pub fn sort_by_key<K: Ord>(&mut self, mut key: impl FnMut(&T) -> K) {
        let mut prev: Option<K> = None;
        let sorted = self.iter().all(|x| {
            let k = key(x);
            let ok = prev.as_ref().is_none_or(|p| *p <= k);
            prev = Some(k);
            ok
        });
        if sorted {
            return;
        }
        if u32::try_from(self.len).is_err() {
            return self.make_contiguous().sort_by_key(key);
        }
        let mut keys: Vec<(K, u32)> = self
            .iter()
            .enumerate()
            .map(|(i, x)| (key(x), i as u32))
            .collect();
        keys.sort_unstable();
        // `keys[j].1`: the place of the entry that goes to place j, until it is there.
        for start in 0..self.len {
            if keys[start].1 as usize == start {
                continue;
            }
            let first = self[start];
            let mut j = start;
            loop {
                let k = keys[j].1 as usize;
                keys[j].1 = j as u32;
                if k == start {
                    self[j] = first;
                    break;
                }
                self[j] = self[k];
                j = k;
            }
        }
    }

    /// Keeps only the entries for which `keep` holds, in their order (as one chunk).
    pub fn retain(&mut self, keep: impl FnMut(&T) -> bool) {
        self.make_contiguous();
        if let Some(v) = self.chunks.front_mut() {
            v.retain(keep);
            self.len = v.len();
        }
    }

    /// Gives back the unused room of the last chunk (a bulk load is done growing).
    pub fn shrink_to_fit(&mut self) {
        if self.chunks.len() == 1 && self.head > 0 {
            self.chunks[0].drain(..self.head);
            self.head = 0;
        }
        if let Some(last) = self.chunks.back_mut() {
            last.shrink_to_fit();
        }
        self.chunks.shrink_to_fit();
    }
}

/// What does not fit a packed entry (an op longer than `u32` ns, say), kept aside exactly; the
/// entry holds its index. Entries whose owner left are reused once none is referred to, or
/// when most are stale, by the owner renumbering what it still refers to.
#[derive(Clone, Debug)]
pub struct Escapes<T> {
    items: Vec<T>,
    live: usize,
}

impl<T> Default for Escapes<T> {
    fn default() -> Self {
        Escapes {
            items: Vec::new(),
            live: 0,
        }
    }
}

impl<T: Copy> Escapes<T> {
    pub fn add(&mut self, x: T) -> u32 {
        self.items.push(x);
        self.live += 1;
        (self.items.len() - 1) as u32
    }

    #[inline]
    pub fn get(&self, i: u32) -> T {
        self.items[i as usize]
    }

    pub fn set(&mut self, i: u32, x: T) {
        self.items[i as usize] = x;
    }

    /// One entry is no longer referred to.
    pub fn release(&mut self) {
        self.live -= 1;
        if self.live == 0 {
            self.items.clear();
        }
    }

    /// Whether most entries are stale: the owner should renumber through [`Escapes::renumber`].
    pub fn stale(&self) -> bool {
        self.items.len() > 1024 && self.items.len() > 4 * self.live
    }

    /// Starts renumbering: the old entries, to be added again by those still referred to.
    pub fn renumber(&mut self) -> Vec<T> {
        self.live = 0;
        std::mem::take(&mut self.items)
    }
}

impl<T: Copy> std::ops::Index<usize> for Chunked<T> {
    type Output = T;
    #[inline]
    fn index(&self, i: usize) -> &T {
        self.get(i).expect("index past the end")
    }
}

impl<T: Copy> std::ops::IndexMut<usize> for Chunked<T> {
    #[inline]
    fn index_mut(&mut self, i: usize) -> &mut T {
        self.get_mut(i).expect("index past the end")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// Every operation, checked against a VecDeque doing the same.
    #[test]
    fn behaves_as_a_deque() {
        let mut c: Chunked<u32> = Chunked::default();
        let mut d: VecDeque<u32> = VecDeque::new();
        let mut x = 1u32;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        };
        for round in 0..40_000u32 {
            match rnd() % 10 {
                0..=5 => {
                    c.push_back(round);
                    d.push_back(round);
                }
                6 => assert_eq!(c.pop_front(), d.pop_front()),
                7 if !d.is_empty() => {
                    let i = rnd() as usize % (d.len() + 1);
                    let i = i.max(d.len().saturating_sub(20));
                    c.insert(i, round);
                    d.insert(i, round);
                }
                8 if round % 997 == 0 => {
                    c.make_contiguous();
                    c.shrink_to_fit();
                }
                9 if round % 151 == 0 => {
                    c.retain(|x| x % 3 != 0);
                    d.retain(|x| x % 3 != 0);
                }
                _ => {}
            }
            assert_eq!(c.len(), d.len());
            if round % 1013 == 0 || round < 300 {
                assert!(c.iter().eq(d.iter()), "round {round}");
                assert!(c.iter().rev().eq(d.iter().rev()));
                let (a, b) = (d.len() / 3, d.len() / 3 * 2 + 1);
                assert!(c.range(a..b.min(d.len())).eq(d.range(a..b.min(d.len()))));
                let mut sorted: Vec<u32> = d.iter().copied().collect();
                sorted.sort();
                let t = rnd() % (round + 1);
                let mut s: Chunked<u32> = Chunked::default();
                for &v in &sorted {
                    s.push_back(v);
                }
                assert_eq!(
                    s.partition_point(|&v| v < t),
                    sorted.partition_point(|&v| v < t)
                );
            }
        }
    }

    /// Sorting where the entries are is a stable sort, over chunks and a front taken from.
    #[test]
    fn sorts_in_place_as_a_stable_sort() {
        let mut x = 7u32;
        for n in [0usize, 1, 2, 9, 4096, 4097, 3 * 4096 + 17] {
            let mut c: Chunked<(u32, u32)> = Chunked::default();
            for i in 0..n as u32 + 5 {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                // Few distinct keys: many ties, whose order must stay.
                c.push_back((x % 97, i));
            }
            for _ in 0..5 {
                c.pop_front();
            }
            let mut want: Vec<(u32, u32)> = c.iter().copied().collect();
            want.sort_by_key(|e| e.0);
            c.sort_by_key(|e| e.0);
            assert!(c.iter().eq(want.iter()), "{n} entries");
            // Sorted already: nothing moves.
            c.sort_by_key(|e| e.0);
            assert!(c.iter().eq(want.iter()));
        }
    }
}

//! Steps with no name to go by: the period of the repeating sequence of ops on the busiest
//! device (`seq`), verified, with the launch stacks' say on where a step begins.

use std::ops::Range;

use rustc_hash::FxHashMap as HashMap;

use crate::model::records::{Ns, StackId};
use crate::model::store::Store;

use super::step::quantile;

/// How the code moved from one launch stack to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackTurn {
    /// Depth of the deepest frame the two stacks share (0: none).
    pub depth: u32,
    /// The first frames in which they differ are the same Python function, at an earlier line
    /// in the second: its loop started over, or its caller called it again (Python frames
    /// carry their current line).
    pub back: bool,
}

/// The turn from stack `a` to stack `b`; `None` when either is unknown (0).
pub fn stack_turn(store: &Store, a: StackId, b: StackId) -> Option<StackTurn> {
    if a == 0 || b == 0 {
        return None;
    }
    let st = &store.stacks;
    let (mut x, mut y) = (a, b);
    while st.node(x).depth > st.node(y).depth {
        x = st.node(x).parent;
    }
    while st.node(y).depth > st.node(x).depth {
        y = st.node(y).parent;
    }
    if x == y {
        // One holds the other.
        return Some(StackTurn {
            depth: st.node(x).depth,
            back: false,
        });
    }
    while st.node(x).parent != st.node(y).parent {
        x = st.node(x).parent;
        y = st.node(y).parent;
    }
    let (fx, fy) = (
        store.names.frame(st.node(x).frame).python(),
        store.names.frame(st.node(y).frame).python(),
    );
    let back = match (fx, fy) {
        (Some(px), Some(py)) => match (px.line(), py.line()) {
            (Some(lx), Some(ly)) => (px.file, px.function) == (py.file, py.function) && ly < lx,
            _ => false,
        },
        _ => false,
    };
    Some(StackTurn {
        depth: st.node(x).depth - 1,
        back,
    })
}

/// A repeating op sequence: each step as a range of op indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Period {
    /// Ops in a typical step.
    pub len: usize,
    pub steps: Vec<Range<usize>>,
}

/// Fewest steps automatic detection gives.
pub const MIN_STEPS: usize = 3;
/// Share of a marker's spacings that must be within tolerance of their median.
const REGULAR: f64 = 0.8;
/// Share of the window's ops a marker's regular run must span.
const COVERAGE: f64 = 0.5;
/// Least mean similarity of successive periods (their op names as multisets).
const FIDELITY: f64 = 0.8;
/// A finer period is systematically broken when its successive periods differ by more than
/// this share of their ops in at least half of the coarser periods.
const DEFECT: f64 = 0.04;
/// Most candidate periods verified against the sequence.
const MAX_VERIFY: usize = 24;

/// Spacing tolerance for a period of `d` ops: 10%, at least one op.
fn tol(d: usize) -> usize {
    (d / 10).max(1)
}

/// A marker: a symbol that occurs once a period in a regular run.
#[derive(Clone, Copy, Debug)]
struct Cand {
    sym: u32,
    /// Median spacing: the period.
    d: usize,
    /// The run: occurrences `lo..=hi` of the symbol's positions.
    lo: usize,
    hi: usize,
    /// Spacings within tolerance in the run.
    good: usize,
}

/// Finds the period of a repeating op sequence (`names`, with the device idle before each op)
/// and returns its steps, or `None` when there is no clear repetition of at least
/// [`MIN_STEPS`] periods.
///
/// 1. Markers: a symbol (op name) occurring at least 3 times whose spacings (in ops) are, in
///    one run from its first to its last spacing within 10% of their median, at least 80%
///    within it, the run spanning at least half of the sequence. Leading and trailing
///    occurrences with other spacings (warm-up iterations that differ, a tail) are left out.
/// 2. Markers are grouped by period, coarsest first; the coarsest whose successive periods
///    are similar (mean multiset similarity of op names ≥ 0.8) is taken.
/// 3. A coarse period can be a multiple of the iteration (a checkpoint every 16 tokens): a
///    finer verified period replaces it when its own periods repeat faithfully inside the
///    coarse ones (no difference above 4% of the ops in half of the coarse periods or more).
///    A decode loop's layers do not replace its tokens: the layer holding the per-token ops
///    differs from the others in every token.
/// 4. Phase: with launch stacks ([`detect_period_with`]), the outermost place where the code
///    goes back to an earlier line once a period starts the steps. Otherwise, among the
///    period's markers (those in a run of about as many periods as the group's lead), the one
///    with the longest median device idle before it (a loop's sync or host work between
///    iterations); on a tie (a busy GPU), the one that occurs first.
///
/// Steps run from one boundary to the next. Before the first boundary and after the last, a
/// period's worth of ops (less the tolerance) that is similar to its neighbour (≥ 0.8) is a step
/// too: the first and last iterations when the boundary marker is not the loop's first op. The
/// last step ends with the last op of its period, not at the window's end. Costs O(n) beyond a
/// sort of the markers, with at most 24 verifications of O(n).
pub fn detect_period(names: &[u32], idle_before: &[Ns]) -> Option<Period> {
    detect_period_with(names.to_vec(), idle_before, |_| None)
}

/// [`detect_period`], with the launch stacks' say on the phase: `turn(i)` is how the code moved
/// from op `i - 1`'s launch to op `i`'s ([`stack_turn`]; `None` when unknown). When, at some
/// depth, the code goes back to an earlier line once in most periods (the loop's body starting
/// over, a function called again from its loop), the outermost such depth starts the steps, at
/// whichever op it comes, marker or not, and so does any turn above that depth (the same code
/// called from another loop); otherwise the markers' idle rule decides. `names` becomes the
/// dense symbols in place (a list less at once); `turn` is first asked once the markers are
/// found and their lists freed.
pub fn detect_period_with(
    names: Vec<u32>,
    idle_before: &[Ns],
    mut turn: impl FnMut(usize) -> Option<StackTurn>,
) -> Option<Period> {
    let n = names.len();
    if n < 2 * MIN_STEPS {
        return None;
    }
    // Dense symbols.
    let max = names.iter().copied().max().unwrap_or(0) as usize;
    let mut dense = names;
    let mut m = 0u32;
    if max < (1 << 24) {
        let mut map = vec![u32::MAX; max + 1];
        for s in &mut dense {
            let e = &mut map[*s as usize];
            if *e == u32::MAX {
                *e = m;
                m += 1;
            }
            *s = *e;
        }
    } else {
        let mut map: HashMap<u32, u32> = HashMap::default();
        for s in &mut dense {
            *s = *map.entry(*s).or_insert_with(|| {
                m += 1;
                m - 1
            });
        }
    }
    let m = m as usize;
    // Positions grouped by symbol.
    let mut off = vec![0usize; m + 1];
    for &s in &dense {
        off[s as usize + 1] += 1;
    }
    for i in 0..m {
        off[i + 1] += off[i];
    }
    let mut pos = vec![0u32; n];
    let mut fill = off.clone();
    for (i, &s) in dense.iter().enumerate() {
        pos[fill[s as usize]] = i as u32;
        fill[s as usize] += 1;
    }
    let positions = |s: u32| &pos[off[s as usize]..off[s as usize + 1]];

    let mut scratch: Vec<u32> = Vec::new();
    let mut cands: Vec<Cand> = (0..m as u32)
        .filter_map(|s| marker(s, positions(s), n, &mut scratch))
        .collect();
    if cands.is_empty() {
        return None;
    }
    cands.sort_unstable_by(|a, b| b.d.cmp(&a.d).then(b.good.cmp(&a.good)));
    // Groups of markers with about the same period, coarsest first; each led by the marker
    // with the most regular spacings.
    let mut groups: Vec<Vec<Cand>> = Vec::new();
    for c in cands {
        match groups.last_mut() {
            Some(g) if g[0].d.abs_diff(c.d) <= tol(g[0].d) => g.push(c),
            _ => groups.push(vec![c]),
        }
    }
    for g in &mut groups {
        g.sort_by(|a, b| b.good.cmp(&a.good).then(a.d.cmp(&b.d)));
    }
    let mut counts = vec![0u32; m];
    let bounds = |c: &Cand| -> Vec<usize> {
        positions(c.sym)[c.lo..=c.hi]
            .iter()
            .map(|&p| p as usize)
            .collect()
    };
    let mut verified = 0;
    let mut chosen: Option<(usize, Vec<usize>)> = None;
    for (gi, g) in groups.iter().enumerate() {
        if verified >= MAX_VERIFY {
            break;
        }
        verified += 1;
        let b = bounds(&g[0]);
        if fidelity(&dense, &b, &mut counts) >= FIDELITY {
            chosen = Some((gi, b));
            break;
        }
    }
    let (mut gi, mut coarse) = chosen?;
    // Refinement to a finer period that the coarse one is a multiple of.
    let mut fi = gi + 1;
    while fi < groups.len() && verified < MAX_VERIFY {
        verified += 1;
        let fb = bounds(&groups[fi][0]);
        if fidelity(&dense, &fb, &mut counts) >= FIDELITY
            && !systematic(&dense, &coarse, &fb, &mut counts)
        {
            gi = fi;
            coarse = fb;
        }
        fi += 1;
    }
    let (d, mut b) = match idle_period(&dense, idle_before, groups[gi][0].d, &mut counts) {
        Some(found) => found,
        None => {
            // Phase among the markers: the longest idle, then the first to occur.
            let g = &groups[gi];
            let lead = g[0].hi - g[0].lo + 1;
            let mut best: Option<((std::cmp::Reverse<Ns>, usize), Cand)> = None;
            for c in g.iter().filter(|c| (c.hi - c.lo + 1) * 10 >= lead * 9) {
                let p = &positions(c.sym)[c.lo..=c.hi];
                let idle = quantile(
                    p.iter()
                        .map(|&i| idle_before.get(i as usize).copied().unwrap_or(0))
                        .collect(),
                    0.5,
                );
                let key = (std::cmp::Reverse(idle), p[0] as usize);
                if best.as_ref().is_none_or(|(k, _)| key < *k) {
                    best = Some((key, *c));
                }
            }
            let (_, c) = best.expect("the group's lead qualifies");
            (c.d, bounds(&c))
        }
    };
    let t = tol(d);
    // Phase from the stacks, first: the outermost loop-back found once in most periods.
    if let Some(lb) = loop_back_bounds(&b, d, n, &mut turn) {
        b = lb;
    }
    let mut steps: Vec<Range<usize>> = Vec::with_capacity(b.len() + 1);
    let first = b[0];
    if first + t >= d {
        let s = first.saturating_sub(d);
        if similarity(&dense[s..first], &dense[first..b[1]], &mut counts) >= FIDELITY {
            steps.push(s..first);
        }
    }
    steps.extend(b.windows(2).map(|w| w[0]..w[1]));
    let last = b[b.len() - 1];
    if n - last + t >= d {
        let e = (last + d).min(n);
        let prev = &dense[b[b.len() - 2]..last];
        if similarity(&dense[last..e], prev, &mut counts) >= FIDELITY {
            steps.push(last..e);
        }
    }
    (steps.len() >= MIN_STEPS).then_some(Period { len: d, steps })
}

/// The iteration that the device's idle shows when the ops' names show only a part of it:
/// the long gaps (those of at least half the length above which half of all the idle lies)
/// recur at a regular spacing of at least twice the names' period `d`, in a run over half the
/// sequence, and the ops between them repeat faithfully. A loop that waits for its input and
/// then launches one function's identical kernels has a names' period of one op; its
/// iterations start at the waits. Returns the period and its boundaries.
fn idle_period(
    seq: &[u32],
    idle_before: &[Ns],
    d: usize,
    counts: &mut [u32],
) -> Option<(usize, Vec<usize>)> {
    let total: i128 = idle_before.iter().map(|&x| x as i128).sum();
    if total <= 0 {
        return None;
    }
    let half = half_point(idle_before, total);
    let is_long = |x: Ns| x > 0 && x >= half / 2;
    let mut long: Vec<u32> =
        Vec::with_capacity(idle_before.iter().filter(|&&x| is_long(x)).count());
    long.extend(
        (0..idle_before.len())
            .filter(|&i| is_long(idle_before[i]))
            .map(|i| i as u32),
    );
    let mut scratch = Vec::new();
    let c = marker(u32::MAX, &long, seq.len(), &mut scratch)?;
    if c.d < 2 * d {
        return None;
    }
    let b: Vec<usize> = long[c.lo..=c.hi].iter().map(|&p| p as usize).collect();
    (fidelity(seq, &b, counts) >= FIDELITY).then_some((c.d, b))
}

/// The length above which half of the idle lies: the largest positive `x` in `idle` such
/// that the values of at least `x` add up to half of `total` (their sum, > 0) or more, as a
/// walk down the sorted values finds it. Found without sorting a copy (8 bytes an op): a
/// histogram of the values' range narrows it to one bucket a pass, 256 buckets each, until
/// the bucket's values are few enough to sort.
fn half_point(idle: &[Ns], total: i128) -> Ns {
    const FEW: usize = 1 << 12;
    let (mut lo, mut hi, mut count) = (1, 0, 0usize);
    for &x in idle.iter().filter(|&&x| x > 0) {
        hi = hi.max(x);
        count += 1;
    }
    if count == 0 {
        return 0;
    }
    // The sum of the values above `hi`.
    let mut above = 0i128;
    loop {
        if count <= FEW || lo == hi {
            let mut few: Vec<Ns> = Vec::with_capacity(count);
            few.extend(idle.iter().copied().filter(|&x| x >= lo && x <= hi));
            few.sort_unstable_by(|a, b| b.cmp(a));
            let mut acc = above;
            return few
                .into_iter()
                .find(|&x| {
                    acc += x as i128;
                    2 * acc >= total
                })
                .unwrap_or(0);
        }
        let width = (hi - lo) as u64;
        let shift = (u64::BITS - width.leading_zeros()).saturating_sub(8);
        let mut sums = [0i128; 256];
        let mut counts = [0usize; 256];
        for &x in idle.iter().filter(|&&x| x >= lo && x <= hi) {
            let b = ((x - lo) as u64 >> shift) as usize;
            sums[b] += x as i128;
            counts[b] += 1;
        }
        let b = (0..256)
            .rev()
            .find(|&b| {
                if 2 * (above + sums[b]) >= total {
                    return true;
                }
                above += sums[b];
                false
            })
            .unwrap_or(0);
        let from = lo + ((b as u64) << shift) as Ns;
        hi = hi.min(from + (((1u64 << shift) - 1) as Ns));
        lo = from;
        count = counts[b];
    }
}

/// Boundaries where the code goes back to an earlier line at the outermost depth at which it
/// does so exactly once in at least 80% of the periods between the marker boundaries `b`, or
/// turns above that depth (looked for from half a period before the first boundary to a
/// period after the last); `None` when no depth does.
fn loop_back_bounds(
    b: &[usize],
    d: usize,
    n: usize,
    turn: &mut impl FnMut(usize) -> Option<StackTurn>,
) -> Option<Vec<usize>> {
    let lo = b[0].saturating_sub(d / 2);
    let hi = (b[b.len() - 1] + d).min(n);
    let turns: Vec<(usize, StackTurn)> = (lo..hi).filter_map(|i| Some((i, turn(i)?))).collect();
    let periods = b.len() - 1;
    let mut backs: Vec<u32> = turns
        .iter()
        .filter(|(_, t)| t.back)
        .map(|(_, t)| t.depth)
        .collect();
    backs.sort_unstable();
    let mut depths: Vec<(u32, usize)> = Vec::new();
    for x in backs {
        match depths.last_mut() {
            Some((d, c)) if *d == x => *c += 1,
            _ => depths.push((x, 1)),
        }
    }
    for (depth, _) in depths
        .into_iter()
        .filter(|&(_, c)| c as f64 >= REGULAR * periods as f64)
        .take(3)
    {
        let pos: Vec<usize> = turns
            .iter()
            .filter(|(_, t)| t.depth < depth || (t.back && t.depth == depth))
            .map(|&(i, _)| i)
            .collect();
        let mut once = 0;
        for w in b.windows(2) {
            let i = pos.partition_point(|&p| p < w[0]);
            let j = pos.partition_point(|&p| p < w[1]);
            once += (j - i == 1) as usize;
        }
        if once as f64 >= REGULAR * periods as f64 && pos.len() >= 2 {
            return Some(pos);
        }
    }
    None
}

/// Whether a symbol's occurrences make a marker (see [`detect_period`]).
fn marker(sym: u32, p: &[u32], n: usize, diffs: &mut Vec<u32>) -> Option<Cand> {
    if p.len() < MIN_STEPS {
        return None;
    }
    // The median spacing, from a copy of the spacings (u32, as the positions are); the runs
    // are then read from the positions themselves.
    diffs.clear();
    diffs.extend(p.windows(2).map(|w| w[1] - w[0]));
    let k = (diffs.len() - 1) / 2;
    let d = *diffs.select_nth_unstable(k).1 as usize;
    let t = tol(d);
    let good = |i: usize| ((p[i + 1] - p[i]) as usize).abs_diff(d) <= t;
    let a = (0..p.len() - 1).position(good)?;
    let z = (0..p.len() - 1).rposition(good)?;
    let periods = z - a + 1;
    let ok = (a..=z).filter(|&i| good(i)).count();
    if periods + 1 < MIN_STEPS || (ok as f64) < REGULAR * periods as f64 {
        return None;
    }
    let span = (p[z + 1] - p[a]) as usize + d;
    if (span as f64) < COVERAGE * n as f64 {
        return None;
    }
    Some(Cand {
        sym,
        d,
        lo: a,
        hi: z + 1,
        good: ok,
    })
}

/// Multiset similarity of two runs of symbols: shared ops over the longer run's length.
fn similarity(a: &[u32], b: &[u32], counts: &mut [u32]) -> f64 {
    let longest = a.len().max(b.len());
    if longest == 0 {
        return 1.0;
    }
    for &s in a {
        counts[s as usize] += 1;
    }
    let mut shared = 0;
    for &s in b {
        let c = &mut counts[s as usize];
        if *c > 0 {
            *c -= 1;
            shared += 1;
        }
    }
    for &s in a {
        counts[s as usize] = 0;
    }
    shared as f64 / longest as f64
}

/// Mean similarity of successive periods between boundaries.
fn fidelity(seq: &[u32], b: &[usize], counts: &mut [u32]) -> f64 {
    if b.len() < 3 {
        // Two boundaries make one full period: nothing to compare it with; the tail after
        // the last boundary stands in for the second.
        if b.len() == 2 {
            let d = b[1] - b[0];
            let tail = &seq[b[1]..(b[1] + d).min(seq.len())];
            return similarity(&seq[b[0]..b[1]], tail, counts);
        }
        return 0.0;
    }
    let mut sum = 0.0;
    for w in b.windows(3) {
        sum += similarity(&seq[w[0]..w[1]], &seq[w[1]..w[2]], counts);
    }
    sum / (b.len() - 2) as f64
}

/// Whether the finer periods (boundaries `fine`) differ systematically inside the coarse
/// ones: in at least half of the coarse periods that hold finer pairs, some successive finer
/// periods differ by more than [`DEFECT`] of their ops.
fn systematic(seq: &[u32], coarse: &[usize], fine: &[usize], counts: &mut [u32]) -> bool {
    let mut worst = vec![0f64; coarse.len().saturating_sub(1)];
    let mut seen = vec![false; worst.len()];
    for w in fine.windows(3) {
        let j = coarse.partition_point(|&c| c <= w[0]);
        if j == 0 || j >= coarse.len() {
            continue;
        }
        let d = 1.0 - similarity(&seq[w[0]..w[1]], &seq[w[1]..w[2]], counts);
        worst[j - 1] = worst[j - 1].max(d);
        seen[j - 1] = true;
    }
    let held = seen.iter().filter(|&&s| s).count();
    let broken = worst.iter().filter(|&&d| d > DEFECT).count();
    held == 0 || broken * 2 >= held
}

#[cfg(test)]
mod half_tests {
    use super::*;

    /// What `half_point` replaced: a walk down a sorted copy.
    fn by_sorting(idle: &[Ns], total: i128) -> Ns {
        let mut sorted: Vec<Ns> = idle.iter().copied().filter(|&x| x > 0).collect();
        sorted.sort_unstable_by(|a, b| b.cmp(a));
        let mut acc = 0i128;
        sorted
            .into_iter()
            .find(|&x| {
                acc += x as i128;
                2 * acc >= total
            })
            .unwrap_or(0)
    }

    #[test]
    fn half_point_is_the_sorted_walks() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for case in 0..60 {
            let n = [10, 5_000, 40_000][case % 3];
            let idle: Vec<Ns> = (0..n)
                .map(|_| {
                    let r = next();
                    match case % 5 {
                        0 => (r % 7) as Ns * 1_000,       // few values, many equal
                        1 => (r % 1_000_000) as Ns,       // spread, some zeros
                        2 => (r >> 2) as Ns,              // full width
                        3 => 4_000,                       // all equal
                        _ => ((r % 3) as Ns) << (r % 40), // far apart
                    }
                })
                .collect();
            let total: i128 = idle.iter().map(|&x| x as i128).sum();
            if total <= 0 {
                continue;
            }
            assert_eq!(
                half_point(&idle, total),
                by_sorting(&idle, total),
                "case {case}"
            );
        }
    }
}

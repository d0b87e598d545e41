//! The timeline's ranges lane: the NVTX ranges (or a trace's user annotations) of the thread
//! that launches, over the window, as one row above the GPU lanes. Each cell shows the deepest
//! range at least two cells wide that covers it (an outermost range always shows), so a step
//! reads as one block zoomed out and as its layers zoomed in; a range's name is written inside
//! it where it fits.
//!
//! Which thread: the selected gap's launching thread when it has ranges, else the thread of
//! the selected gap's process with the most ranges; without a selection the first process (in
//! lane order) that has ranges. A process with GPU-side ranges only (a trace's
//! `gpu_user_annotation`s) shows those of its stream with the most.

use gaptop_core::model::process::Process;
use gaptop_core::model::ranges::Range;
use gaptop_core::model::records::Ns;
use gaptop_core::model::store::Store;

/// One run of cells showing the same range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RangeSeg {
    pub col: u16,
    pub width: u16,
    /// The range's name, cut to the run's width (empty under three cells).
    pub text: String,
    pub depth: u16,
    /// Every other range of its thread, so that neighbours read apart.
    pub odd: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RangeRow {
    pub label: String,
    pub segs: Vec<RangeSeg>,
}

/// The ranges (and what to call them) the lane shows for this store and selection: the
/// process, and the thread (or stream) chosen as the module says.
fn chosen(store: &Store, selected: Option<(u32, Option<u32>)>) -> Option<(String, &[Range])> {
    let with_ranges = |p: u32| store.procs.get(p as usize).filter(|p| p.has_ranges());
    let (proc, tid) = match selected.and_then(|(p, t)| with_ranges(p).map(|_| (p, t))) {
        Some(x) => x,
        None => {
            let p = store
                .lane_order()
                .into_iter()
                .map(|l| store.lanes[l].key.proc)
                .chain(0..store.procs.len() as u32)
                .find(|&p| with_ranges(p).is_some())?;
            (p, None)
        }
    };
    let p = &store.procs[proc as usize];
    let who = match (p.rank, store.procs.len()) {
        (r, _) if r >= 0 => format!("r{r} "),
        (_, n) if n > 1 => format!("p{} ", p.pid),
        _ => String::new(),
    };
    let tid = tid
        .filter(|t| !p.ranges_of(*t).is_empty())
        .or_else(|| most(p.ranges.iter().map(|(&t, v)| (t, v.len()))));
    if let Some(t) = tid {
        return Some((format!("{who}nvtx t{t}"), p.ranges_of(t)));
    }
    let (d, s) = most(p.gpu_ranges.iter().map(|(&k, v)| (k, v.len())))?;
    Some((format!("{who}nvtx gpu{d} s{s}"), &p.gpu_ranges[&(d, s)]))
}

/// The key with the largest count (the smallest key of a tie).
fn most<K: Ord + Copy>(it: impl Iterator<Item = (K, usize)>) -> Option<K> {
    it.max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        .map(|(k, _)| k)
}

/// The lane over `[lo, hi)` in `cols` cells, or None when the store holds no ranges.
/// `selected`: the selected gap's process and launching thread.
pub fn ranges_row(
    store: &Store,
    selected: Option<(u32, Option<u32>)>,
    lo: Ns,
    hi: Ns,
    cols: u16,
) -> Option<RangeRow> {
    let (label, v) = chosen(store, selected)?;
    let cols = cols.max(1) as usize;
    let w = (hi - lo).max(1) as f64;
    let col_of = |t: Ns| {
        (((t - lo) as f64 / w * cols as f64).floor() as i64).clamp(0, cols as i64 - 1) as usize
    };
    let two_cells = 2.0 * w / cols as f64;
    let mut cells: Vec<Option<(usize, u16)>> = vec![None; cols];
    for (i, r) in Process::overlapping(v, lo, hi) {
        if r.end <= r.start || (r.depth > 0 && ((r.end - r.start) as f64) < two_cells) {
            continue;
        }
        let (a, b) = (col_of(r.start.max(lo)), col_of(r.end.min(hi) - 1));
        for c in &mut cells[a..=b.max(a)] {
            if c.is_none_or(|(_, d)| d < r.depth) {
                *c = Some((i, r.depth));
            }
        }
    }
    let mut segs = Vec::new();
    let mut c = 0;
    while c < cols {
        let Some((i, depth)) = cells[c] else {
            c += 1;
            continue;
        };
        let run = cells[c..].iter().take_while(|x| **x == cells[c]).count();
        let text = if run >= 3 {
            gaptop_core::frames::cut(store.names.get(v[i].name), run)
        } else {
            String::new()
        };
        segs.push(RangeSeg {
            col: c as u16,
            width: run as u16,
            text,
            depth,
            odd: i % 2 == 1,
        });
        c += run;
    }
    // As the GPU lanes' labels: a column short of the label width, so a space always follows.
    let label = gaptop_core::frames::cut(&label, (super::layout::LABEL_W - 1) as usize);
    Some(RangeRow { label, segs })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of two layers: zoomed out the step is one block named "step 1"; zoomed in, the
    /// layers show with their names and the step around them.
    #[test]
    fn deep_ranges_show_where_wide_enough() {
        let mut st = Store::default();
        let p = st.add_process(1, -1, "p");
        let (s, a, b) = (
            st.names.intern("step 1"),
            st.names.intern("attention"),
            st.names.intern("mlp"),
        );
        st.procs[p as usize].set_ranges(
            5,
            vec![
                Range::new(0, 1_000, s, 0),
                Range::new(100, 400, a, 0),
                Range::new(500, 900, b, 0),
                Range::new(5_000, 5_001, s, 0),
            ],
        );
        let segs = |row: &RangeRow| -> Vec<(u16, u16, String, u16)> {
            row.segs
                .iter()
                .map(|s| (s.col, s.width, s.text.clone(), s.depth))
                .collect()
        };
        let owned = |v: &[(u16, u16, &str, u16)]| -> Vec<(u16, u16, String, u16)> {
            v.iter()
                .map(|&(c, w, t, d)| (c, w, t.to_string(), d))
                .collect()
        };
        let row = ranges_row(&st, None, 0, 10_000, 20).unwrap();
        assert_eq!(row.label, "nvtx t5");
        assert_eq!(
            segs(&row),
            owned(&[(0, 2, "", 0), (10, 1, "", 0)]),
            "layers under two cells hide"
        );
        let row = ranges_row(&st, Some((0, Some(5))), 0, 1_000, 10).unwrap();
        let want = [
            (0, 1, "", 0),
            (1, 3, "at…", 1),
            (4, 1, "", 0),
            (5, 4, "mlp", 1),
            (9, 1, "", 0),
        ];
        assert_eq!(segs(&row), owned(&want));
        let empty = Store::default();
        assert_eq!(ranges_row(&empty, None, 0, 10, 10), None);
    }

    /// A label as long as the label column (a rank and a long thread id) is cut a column
    /// short of it, so that it never runs into the ranges.
    #[test]
    fn long_labels_leave_a_space() {
        let mut st = Store::default();
        let p = st.add_process(1, 0, "p");
        let _ = st.add_process(2, 1, "q");
        let n = st.names.intern("step 1");
        st.procs[p as usize].set_ranges(2_543_932, vec![Range::new(0, 1_000, n, 0)]);
        let row = ranges_row(&st, None, 0, 1_000, 10).unwrap();
        assert_eq!(row.label, "r0 nvtx t25439…");
        assert_eq!(
            row.label.chars().count(),
            (crate::app::layout::LABEL_W - 1) as usize
        );
    }
}

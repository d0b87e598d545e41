//! The gap list and walking gaps: selection, sorting, `n`/`N` over the whole store, the
//! biggest gap, and the tree-node filter that limits the walk.

use super::state::{tree_key, App, Focus, GapKey, GapSort, NodeFilter, SelGap};
use gaptop_core::analysis::advice::site_key_of;
use gaptop_core::analysis::gaps::{self, Gap};
use gaptop_core::units::{fmt_ns, Ns};

impl App {
    pub(super) fn apply_sort(&mut self) {
        let sort = self.sort;
        if let Some(c) = &mut self.cache {
            let lists =
                std::iter::once(&mut c.gaps).chain(c.filtered.as_mut().map(|f| &mut f.gaps));
            for gaps in lists {
                match sort {
                    GapSort::Duration => {
                        gaps.sort_by(|a, b| b.dur().cmp(&a.dur()).then(a.start.cmp(&b.start)))
                    }
                    GapSort::Time => gaps.sort_by_key(|g| (g.start, g.lane)),
                }
            }
        }
    }

    pub(super) fn toggle_sort(&mut self) {
        self.sort = match self.sort {
            GapSort::Duration => GapSort::Time,
            GapSort::Time => GapSort::Duration,
        };
        self.gap_sel = 0;
        self.apply_sort();
        self.sync_gap_sel();
    }

    /// Whether `g` is the selected gap (a gap is known by its lane and the op that ends it:
    /// the end of the gap whole, so that a gap the window cuts is still the one selected).
    pub fn is_selected(&self, g: &Gap) -> bool {
        self.selected
            .is_some_and(|s| s.lane == g.lane && s.end == g.whole(&self.store).1)
    }

    /// Puts the gap list's row back on the selected gap after the list was rebuilt or sorted
    /// (its index moves with the window and the data); without one there, keeps it in range.
    pub(super) fn sync_gap_sel(&mut self) {
        let listed = self.listed_gaps();
        match listed.iter().position(|g| self.is_selected(g)) {
            Some(i) => self.gap_sel = i,
            None => self.gap_sel = self.gap_sel.min(listed.len().saturating_sub(1)),
        }
    }

    /// The gap list's rows: the window's gaps, or with a filter (a tree node's, a what-to-fix
    /// row's, typed text) the window's gaps it holds.
    /// Without one-offs while they are hidden (`O`).
    pub fn listed_gaps(&self) -> Vec<Gap> {
        let mut v = match self.cache.as_ref().and_then(|c| c.filtered.as_ref()) {
            Some(f) => f.gaps.clone(),
            None => self.gaps().to_vec(),
        };
        if self.hide_one_offs {
            let mut one_off = self.one_off_test();
            v.retain(|g| !one_off(g));
        }
        v
    }

    /// Whether a gap is a one-off (`Diagnosis::is_one_off`: in the warm-up, of code that does
    /// not recur, or far longer than its code's usual gap), each site's advice looked up once.
    pub fn one_off_test(&self) -> impl FnMut(&Gap) -> bool + '_ {
        let mut recurring: std::collections::HashMap<GapKey, Option<bool>> = Default::default();
        move |g: &Gap| {
            let Some(d) = self.diagnosis.as_ref() else {
                return false;
            };
            match &d.steps {
                Some(st) => {
                    let n = st.steps.len();
                    let steady = n - (d.steady_steps() as usize).min(n)..n;
                    if !st.step_of(g.start).is_some_and(|i| steady.contains(&i)) {
                        return true;
                    }
                    let r = *recurring
                        .entry(tree_key(g))
                        .or_insert_with(|| d.advice_for(&self.store, g).map(|a| a.recurring));
                    r == Some(false)
                }
                None => d.is_one_off(&self.store, g),
            }
        }
    }

    pub fn gaps(&self) -> &[Gap] {
        self.cache.as_ref().map(|c| &c.gaps[..]).unwrap_or(&[])
    }

    /// The selected gap re-derived from the store (None if it left the store).
    pub(super) fn derive_selected(&self) -> Option<Gap> {
        let s = self.selected?;
        let lane = self.store.lanes.get(s.lane)?;
        let next = lane.lower_bound(s.end);
        if next >= lane.len() || lane.op(next).start != s.end {
            return None;
        }
        let mut g = gaps::gap_ending_at(&self.store, s.lane, next, &self.cfg)?;
        g.start = s.start.max(g.start);
        // As the window holds it, where it holds part of it (the details say how much).
        let (lo, hi) = (g.start.max(self.lo), g.end.min(self.hi));
        if lo < hi {
            (g.start, g.end) = (lo, hi);
        }
        Some(g)
    }

    pub(super) fn select(&mut self, g: &Gap) {
        // Kept whole: a window's edge that cuts the gap does not change which gap it is.
        let (start, end) = g.whole(&self.store);
        self.selected = Some(SelGap {
            lane: g.lane,
            start,
            end,
        });
        self.current = self.derive_selected();
        self.show_fix = false;
        self.show_compare = false;
        if self.focus == Focus::Fix {
            self.focus = Focus::Gaps;
        }
        self.cursor = g.start + g.dur() / 2;
        // Looking at a gap holds the window: following would move the cursor off it and,
        // live, scroll it away. `z` (or pause and resume) follows again.
        self.follow = false;
        if self.cursor < self.lo || self.cursor >= self.hi {
            let w = self.width();
            self.lo = self.cursor - w / 2;
            self.hi = self.lo + w;
        }
        self.reveal_in_tree(g);
    }

    /// Enter on a what-to-fix row: the gap list shows that code's gaps, and `n`/`N` walk them.
    pub(super) fn filter_fix_row(&mut self) {
        let Some(a) = self
            .diagnosis
            .as_ref()
            .and_then(|d| d.advice.get(self.fix_sel))
            .cloned()
        else {
            self.message = "nothing to fix here".into();
            return;
        };
        // Every launch site of the window whose code is this row's.
        let keys: std::collections::HashSet<_> = self
            .cache
            .iter()
            .flat_map(|c| c.top_down().leaves().map(|(k, _)| k))
            .filter(|&(stack, api, op)| {
                gaptop_core::analysis::advice::site_key_of(&self.store, stack, api, op) == a.key
            })
            .collect();
        self.node_filter = Some(NodeFilter {
            name: a.site.clone(),
            keys,
            rank: None,
        });
        self.refresh_filter();
        let count = self.filtered_total().unwrap_or(0);
        self.message = format!(
            "walking {} of {} (n/N go round; esc clears)",
            gaptop_core::units::count(count, "gap"),
            a.site
        );
        self.focus = Focus::Gaps;
        self.gap_sel = 0;
        // A typical gap of the code's steady state (the median of its steady gaps), not the
        // longest, which is often a warm-up one-off.
        let mut steady = self.site_gaps(&a.key);
        steady.sort_by_key(|g| (g.dur(), g.start));
        let typical = steady
            .get(steady.len() / 2)
            .copied()
            .or_else(|| self.listed_gaps().first().copied());
        if let Some(g) = typical {
            self.select(&g);
            self.sync_gap_sel();
            self.message
                .push_str(&format!("; a typical one selected ({})", fmt_ns(g.dur())));
        }
    }

    /// ↑/↓ in the gap list: the previous or next row, selected; with no gap selected yet, the
    /// first row.
    pub(super) fn move_in_gap_list(&mut self, down: bool) {
        let by = if self.selected.is_none() { 0 } else { 1 };
        self.move_gap_rows(if down { by } else { -by });
    }

    /// Moves the gap list's selection by `rows` (clamped to the list) and selects that gap.
    pub(super) fn move_gap_rows(&mut self, rows: i64) {
        let listed = self.listed_gaps();
        let n = listed.len();
        if n > 0 {
            self.gap_sel = (self.gap_sel as i64 + rows).clamp(0, n as i64 - 1) as usize;
            let g = listed[self.gap_sel];
            self.select(&g);
        }
    }

    /// The window's gaps (at or over the threshold) of the code of advice key `key`, those of
    /// its steady state (not one-offs) where it has any.
    pub(super) fn site_gaps(&self, key: &str) -> Vec<Gap> {
        let (Some(c), Some(d)) = (self.cache.as_ref(), self.diagnosis.as_ref()) else {
            return Vec::new();
        };
        let min = self.min_gap.max(1);
        let mut of_site: std::collections::HashMap<GapKey, bool> = Default::default();
        let mut v = Vec::new();
        let w = gaptop_core::model::window::Window::new(c.analysed.0, c.analysed.1);
        gaps::window_gaps(&self.store, w, &self.cfg, |g| {
            let (stack, api, op) = tree_key(&g);
            let mine = *of_site
                .entry((stack, api, op))
                .or_insert_with(|| site_key_of(&self.store, stack, api, op) == key);
            if mine && g.dur() >= min {
                v.push(g);
            }
        });
        let steady: Vec<Gap> = v
            .iter()
            .copied()
            .filter(|g| !d.is_one_off(&self.store, g))
            .collect();
        if steady.is_empty() {
            v
        } else {
            steady
        }
    }

    /// `b`: the biggest gap of the top recurring code (What to fix's first row) in its steady
    /// state; without recurring code, the biggest gap of all.
    pub(super) fn select_biggest_recurring(&mut self) {
        let top = self
            .diagnosis
            .as_ref()
            .and_then(|d| d.advice.first())
            .filter(|a| a.recurring)
            .map(|a| (a.key.clone(), a.site.clone()));
        let Some((key, site)) = top else {
            return self.select_biggest();
        };
        let best = self
            .site_gaps(&key)
            .into_iter()
            .max_by_key(|g| (g.dur(), -g.start));
        match best {
            Some(g) => {
                self.select(&g);
                self.sync_gap_sel();
                let site = site.split("  ").next().unwrap_or(&site).to_string();
                self.message = format!(
                    "biggest gap of {site}, the top recurring code: {} (B: the biggest of all)",
                    fmt_ns(g.dur())
                );
            }
            None => self.select_biggest(),
        }
    }

    /// `B`: the biggest gap of the list.
    pub(super) fn select_biggest(&mut self) {
        let listed = self.listed_gaps();
        let best = listed.iter().copied().max_by_key(|g| (g.dur(), -g.start));
        match best {
            Some(g) => {
                self.select(&g);
                self.gap_sel = listed.iter().position(|x| *x == g).unwrap_or(0);
                self.message = format!("biggest gap: {}", fmt_ns(g.dur()));
            }
            None => self.message = "no gaps in the window".into(),
        }
    }

    fn gap_matches(&self, g: &Gap) -> bool {
        if g.dur() < self.min_gap.max(1) {
            return false;
        }
        let in_node = match &self.node_filter {
            Some(f) => f.holds(&self.store, g),
            None => true,
        };
        in_node && self.gap_holds_query(g)
    }

    /// Whether a gap belongs to the tree-node filter (for highlighting).
    pub fn highlighted(&self, g: &Gap) -> bool {
        self.node_filter
            .as_ref()
            .is_some_and(|f| f.holds(&self.store, g))
    }

    /// The next (dir > 0) or previous gap after the selected gap (or the cursor), over the
    /// whole store, honouring the threshold and the tree-node filter.
    /// Past the last one, `n` goes round to the first (and `N` past the first to the last),
    /// and says so, as a search in vi or less does.
    pub(super) fn step_gap(&mut self, dir: i64) {
        if self.sort == GapSort::Duration {
            return self.step_in_list(dir);
        }
        let from = match self.selected {
            Some(s) => s.start,
            None => self.cursor,
        };
        let (best, wrapped) = match self.next_gap_from(from, dir) {
            Some(g) => (Some(g), false),
            None => (
                self.next_gap_from(if dir > 0 { Ns::MIN } else { Ns::MAX }, dir),
                true,
            ),
        };
        match best {
            Some(g) => {
                self.select(&g);
                self.message = format!(
                    "{}gap {} at {}",
                    match (wrapped, dir > 0) {
                        (false, _) => "",
                        (true, true) => "past the last gap, back to the first: ",
                        (true, false) => "before the first gap, on to the last: ",
                    },
                    self.gap_whole_text(&g),
                    self.rel(g.whole(&self.store).0)
                );
            }
            None => self.message = "no gaps to walk".into(),
        }
    }

    /// `n`/`N` while the list is sorted by duration: its next or previous row, going round
    /// past either end, so that the row and "k of N" follow the keys.
    fn step_in_list(&mut self, dir: i64) {
        let listed = self.listed_gaps();
        let n = listed.len();
        if n == 0 {
            self.message = "no gaps to walk".into();
            return;
        }
        let here = listed.iter().position(|g| self.is_selected(g));
        let (i, wrapped) = match here {
            None if dir > 0 => (0, false),
            None => (n - 1, false),
            Some(i) => {
                let j = i as i64 + dir;
                (j.rem_euclid(n as i64) as usize, !(0..n as i64).contains(&j))
            }
        };
        let g = listed[i];
        self.select(&g);
        self.gap_sel = i;
        self.message = format!(
            "{}gap {} of {n}: {} at {}",
            match (wrapped, dir > 0) {
                (false, _) => "",
                (true, true) => "past the last row, back to the first: ",
                (true, false) => "before the first row, on to the last: ",
            },
            i + 1,
            self.gap_whole_text(&g),
            self.rel(g.whole(&self.store).0)
        );
    }

    /// The first gap after (dir > 0) or before `from` over the whole store that passes the
    /// threshold and the filter.
    fn next_gap_from(&self, from: Ns, dir: i64) -> Option<Gap> {
        let mut best: Option<Gap> = None;
        for lane in 0..self.store.lanes.len() {
            let ops = &self.store.lanes[lane];
            if ops.len() < 2 {
                continue;
            }
            let start = self.store.lanes[lane].lower_bound(from);
            let mut scanned = 0usize;
            let mut i = if dir > 0 {
                start.max(1)
            } else {
                start.min(ops.len() - 1)
            };
            while (1..ops.len()).contains(&i) && scanned < 5_000_000 {
                scanned += 1;
                if let Some(g) = gaps::gap_ending_at(&self.store, lane, i, &self.cfg) {
                    let ok = if dir > 0 {
                        g.start > from
                    } else {
                        g.start < from
                    };
                    if ok && self.gap_matches(&g) {
                        let better = match &best {
                            None => true,
                            Some(b) => {
                                (dir > 0 && g.start < b.start) || (dir < 0 && g.start > b.start)
                            }
                        };
                        if better {
                            best = Some(g);
                        }
                        break;
                    }
                }
                if dir > 0 {
                    i += 1;
                } else {
                    i -= 1;
                }
            }
        }
        best
    }
}

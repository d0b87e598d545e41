//! The gap list's filters: the launch sites of a call tree node or a what-to-fix row (Enter),
//! and typed text (`\`). Either holds every gap of the window that passes it, not only those
//! among the list's longest: the list shows the longest of them, its title how many there are
//! and their time.

use std::collections::HashMap;

use super::cache::Filtered;
use super::state::{tree_key, App, GapKey, MAX_GAPS};
use gaptop_core::analysis::gaps::{self, Gap};
use gaptop_core::model::window::Window;
use gaptop_core::units::fmt_short;

impl App {
    /// Finds the filters' gaps in the window the panes describe (none without a filter).
    pub(super) fn refresh_filter(&mut self) {
        let filtered = self.filter_window();
        if let Some(c) = &mut self.cache {
            c.filtered = filtered;
        }
        self.apply_sort();
        self.sync_gap_sel();
    }

    fn filter_window(&self) -> Option<Filtered> {
        let c = self.cache.as_ref()?;
        if self.node_filter.is_none() && self.gap_query.is_none() {
            return None;
        }
        let min = self.min_gap.max(1);
        // Whether a launch site's names hold the text, found once a site.
        let mut holds: HashMap<GapKey, bool> = HashMap::new();
        let mut f = Filtered::default();
        let longest_first = |a: &Gap, b: &Gap| b.dur().cmp(&a.dur()).then(a.start.cmp(&b.start));
        gaps::window_gaps(
            &self.store,
            Window::new(c.analysed.0, c.analysed.1),
            &self.cfg,
            |g| {
                let key = tree_key(&g);
                if g.dur() < min
                    || self
                        .node_filter
                        .as_ref()
                        .is_some_and(|f| !f.holds(&self.store, &g))
                {
                    return;
                }
                if self.gap_query.is_some()
                    && !self.cause_holds_query(&g)
                    && !*holds
                        .entry(key)
                        .or_insert_with(|| self.site_holds_query(key))
                {
                    return;
                }
                f.count += 1;
                f.ns += g.dur();
                f.gaps.push(g);
                // Only the longest are kept: trimmed now and then, not at every gap.
                if f.gaps.len() >= 4 * MAX_GAPS {
                    f.gaps.select_nth_unstable_by(MAX_GAPS - 1, longest_first);
                    f.gaps.truncate(MAX_GAPS);
                }
            },
        );
        f.gaps.sort_by(longest_first);
        f.gaps.truncate(MAX_GAPS);
        Some(f)
    }

    /// What the typed search does after each key: filter the gap list, or find in the tree.
    pub(super) fn searched(&mut self) {
        if self.search_gaps {
            self.filter_gaps_by_text();
        } else {
            self.find_in_tree();
        }
    }

    /// The gap list keeps the window's gaps that hold the typed text; the first of them is
    /// selected.
    pub(super) fn filter_gaps_by_text(&mut self) {
        let q = self.search.clone().unwrap_or_default().to_lowercase();
        self.gap_query = (!q.is_empty()).then_some(q);
        self.refresh_filter();
        self.gap_sel = 0;
        if let Some(g) = self.listed_gaps().first().copied() {
            self.select(&g);
        }
        self.message = match &self.gap_query {
            Some(q) => format!("{} holding {q:?}", self.filter_said()),
            None => "type to filter the gap list (cause, kernel, API, stack)".into(),
        };
    }

    /// How many gaps the filter holds and their time: `7165 gaps (541ms)`.
    fn filter_said(&self) -> String {
        let (n, ns) = self
            .cache
            .as_ref()
            .and_then(|c| c.filtered.as_ref())
            .map_or((0, 0), |f| (f.count, f.ns));
        format!(
            "{} ({})",
            gaptop_core::units::count(n, "gap"),
            fmt_short(ns)
        )
    }

    /// Enter or Esc while typing a gap filter: the filter stays (Esc again clears it).
    pub(super) fn end_gap_filter_typing(&mut self) {
        self.search = None;
        self.search_gaps = false;
        if let Some(q) = &self.gap_query {
            self.message = format!(
                "gap list: {} holding {q:?} (esc clears)",
                self.filter_said()
            );
        }
    }

    /// Whether a gap holds the gap list's text filter (any case) in its cause, the op after it,
    /// its launching API or a frame of its launch stack.
    pub fn gap_holds_query(&self, g: &Gap) -> bool {
        self.gap_query.is_none() || self.cause_holds_query(g) || self.site_holds_query(tree_key(g))
    }

    /// Whether the gap's cause or reason holds the text filter.
    fn cause_holds_query(&self, g: &Gap) -> bool {
        let Some(q) = &self.gap_query else {
            return true;
        };
        App::cause_label(g).contains(q.as_str()) || g.reason.as_str().contains(q.as_str())
    }

    /// Whether the op's name, the launching API or a frame of the launch stack holds the text
    /// filter (any case).
    fn site_holds_query(&self, (stack, api, op): GapKey) -> bool {
        let Some(q) = &self.gap_query else {
            return true;
        };
        let names = &self.store.names;
        let has = |s: &str| s.to_lowercase().contains(q.as_str());
        has(names.get(op))
            || (api != 0 && has(names.get(api)))
            || self
                .store
                .stacks
                .frames(stack)
                .iter()
                .any(|&f| has(names.get(f)))
    }

    /// How many gaps the filter holds in the window (the list shows the longest of them).
    pub fn filtered_total(&self) -> Option<u64> {
        self.cache
            .as_ref()
            .and_then(|c| c.filtered.as_ref())
            .map(|f| f.count)
    }
}

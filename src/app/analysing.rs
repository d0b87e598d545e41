//! One analysis of the window for every pane: its gaps (the gap list's longest, the call tree,
//! the totals), its steps, what to fix in it and the verdicts, made together from one span of
//! time so that the panes tell one story. The timeline's header, the gap list, the tree, what
//! to fix, the steps strip and the details all read it.
//!
//! A window of many ops is analysed on a thread of its own (the thread shares the store, so
//! live data waits in its channel meanwhile, as it does for an export's copy); the panes keep
//! the last analysis until it is done and say that a new one is under way. A window of more
//! than [`MAX_ANALYSED_OPS`] ops is analysed around the cursor, and every pane says so.
//!
//! The capture's steps are found over the whole capture (the steps strip and `<`/`>` use them);
//! the window's steps are those of them that lie in the window, and what to fix counts its
//! per-step figures over those.

use std::collections::HashMap;
use std::sync::mpsc::TryRecvError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::cache::{Analysed, AnalysisKey, Cache, DisplayKey};
use super::state::{App, MAX_GAPS};
use super::tree::{build_rows, path_ids};
use gaptop_core::analysis::advice::Diagnosis;
use gaptop_core::analysis::steps::Steps;
use gaptop_core::analysis::tree::CallTree;
use gaptop_core::analysis::{analyse, Analysis, Options, StepsOver};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;
use gaptop_core::units::Ns;

/// Most ops one analysis reads: a wider window is analysed around the cursor (a few seconds of
/// work, on a thread of its own).
pub const MAX_ANALYSED_OPS: usize = 2_000_000;
/// Up to this much work (ops in the window, and in the capture when its steps must be found
/// again) an analysis is made in place, between two frames.
pub const SYNC_ANALYSIS_OPS: usize = 50_000;

/// Analyses `span` of the store for `key` ([`analyse()`]): its gaps, each placed in the
/// capture's steps that lie in it (found again unless `known` has them), what to fix, the
/// stalls between ranks and the ranks side by side.
pub fn analyse_window(
    store: &Store,
    key: AnalysisKey,
    span: (Ns, Ns),
    known: Option<Option<Steps>>,
) -> Analysed {
    let t = Instant::now();
    let w = Window::new(span.0, span.1);
    let options = Options {
        config: key.cfg,
        top: MAX_GAPS,
        min_gap: key.min,
        step_by: key.step_by.as_deref(),
        steps: StepsOver::Capture(known.as_ref()),
        advice: true,
        comm: true,
        rank_rows: true,
        per_step: true,
    };
    let mut analysis = analyse(store, w, &options);
    let capture_steps = analysis.capture_steps.take().or(known).flatten();
    Analysed {
        key,
        analysis,
        capture_steps,
        took: t.elapsed(),
    }
}

impl App {
    /// What the window's analysis is of now.
    pub(super) fn analysis_key(&self) -> AnalysisKey {
        AnalysisKey {
            lo: self.lo,
            hi: self.hi,
            min: self.min_gap.max(1),
            cfg: self.cfg,
            step_by: self.step_by.clone(),
            generation: self.store.generation,
        }
    }

    fn display_key(&self) -> DisplayKey {
        (self.inverted, self.tree_by_function, self.hide_native)
    }

    /// Analyses the window again when it, the threshold, the basis or the data changed: in
    /// place when that is quick, else on a thread of its own. New data alone (a live run) is
    /// analysed at most four times a second, and a slow analysis at most once in as long again
    /// as it took, so that the ingest has the store as much as the analysis does.
    pub(super) fn refresh_analysis(&mut self, force: bool) {
        self.poll_analysis();
        let key = self.analysis_key();
        // Paused, new data alone does not change what the panes describe: the paused window
        // as it was (collection goes on; resuming takes it in).
        let same = |c: &Cache| {
            c.key == key
                || (self.paused
                    && AnalysisKey {
                        generation: key.generation,
                        ..c.key.clone()
                    } == key)
        };
        if self.cache.as_ref().is_some_and(same) {
            if self
                .cache
                .as_ref()
                .is_some_and(|c| c.display != self.display_key())
            {
                self.rebuild_display();
            }
            return;
        }
        if self.analysis_job.is_some() {
            // One at a time: the next starts once this one is in.
            return;
        }
        let asked = self.cache.as_ref().is_none_or(|c| {
            let k = &c.key;
            let following = self.follow && !self.paused;
            k.min != key.min
                || k.cfg != key.cfg
                || k.step_by != key.step_by
                || ((k.lo, k.hi) != (key.lo, key.hi) && !following)
        });
        if !force && !asked {
            if let Some((at, took)) = self.last_analysis {
                if at.elapsed() < took.max(Duration::from_millis(250)) {
                    return;
                }
            }
        }
        let span = self.analysis_window();
        let steps_key = (key.generation, key.step_by.clone());
        let known = self
            .capture_steps
            .as_ref()
            .filter(|(k, _)| *k == steps_key)
            .map(|(_, s)| s.clone());
        let ops_in = |lo: Ns, hi: Ns| -> usize {
            self.store
                .lanes
                .iter()
                .map(|l| l.lower_bound(hi) - l.lower_bound(lo))
                .sum()
        };
        let work = ops_in(span.0, span.1)
            + if known.is_none() {
                self.store.op_count()
            } else {
                0
            };
        if work > SYNC_ANALYSIS_OPS {
            let store = Arc::clone(&self.store);
            let (tx, rx) = std::sync::mpsc::channel();
            let job_key = key.clone();
            let spawned = std::thread::Builder::new()
                .name("gaptop-analysis".into())
                .spawn(move || {
                    let a = analyse_window(&store, job_key, span, known);
                    // The store is free again before the result is seen.
                    drop(store);
                    let _ = tx.send(a);
                });
            match spawned {
                Ok(_) => {
                    self.analysis_job = Some((rx, key));
                    return;
                }
                Err(_) => {
                    // No thread: in place, as a small window is.
                    let known = self
                        .capture_steps
                        .as_ref()
                        .filter(|(k, _)| *k == steps_key)
                        .map(|(_, s)| s.clone());
                    let a = analyse_window(&self.store, key, span, known);
                    self.apply_analysis(a);
                    return;
                }
            }
        }
        let a = analyse_window(&self.store, key, span, known);
        self.apply_analysis(a);
    }

    /// Takes in an analysis its thread has finished.
    fn poll_analysis(&mut self) {
        let Some((rx, _)) = &self.analysis_job else {
            return;
        };
        match rx.try_recv() {
            Ok(a) => {
                self.analysis_job = None;
                self.apply_analysis(a);
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => self.analysis_job = None,
        }
    }

    /// Waits for the analysis under way, if any, and takes it in (benchmarks and tests).
    pub fn settle(&mut self) {
        if let Some((rx, _)) = self.analysis_job.take() {
            if let Ok(a) = rx.recv() {
                self.apply_analysis(a);
            }
        }
        self.refresh(false);
    }

    /// Whether an analysis is under way, and of what window.
    pub fn analysing(&self) -> Option<(Ns, Ns)> {
        self.analysis_job.as_ref().map(|(_, k)| (k.lo, k.hi))
    }

    /// When the panes describe other than the window the timeline shows, what they describe:
    /// the last window (or data) until the one asked for is analysed (not while following live
    /// data, which moves on all the time), or the part around the cursor of a window of too
    /// many ops.
    pub fn panes_note(&self) -> Option<String> {
        let c = self.cache.as_ref()?;
        // While an analysis runs, or one of newer data is due (the next starts once the last
        // is in, at most once per its own time): a paused screen keeps its window's analysis.
        let due = !self.paused && c.key.generation != self.analysis_key().generation;
        if self.analysis_job.is_some() || due {
            return Some("panes: analysing the window…".to_string());
        }
        let whole = Window::new(c.key.lo, c.key.hi).clipped(&self.store);
        (c.analysed != whole).then(|| {
            format!(
                "panes: the {} around the cursor",
                gaptop_core::units::fmt_short(c.analysed.1 - c.analysed.0)
            )
        })
    }

    /// Makes an analysis what the panes show: the window's steps and what to fix, its gaps
    /// and its call tree.
    fn apply_analysis(&mut self, a: Analysed) {
        self.last_analysis = Some((Instant::now(), a.took));
        self.capture_steps = Some(((a.key.generation, a.key.step_by.clone()), a.capture_steps));
        let Analysis {
            span,
            diagnosis,
            comm,
            ranks,
            ..
        } = a.analysis;
        let mut summary = diagnosis.summary;
        let gaps = std::mem::take(&mut summary.top_gaps);
        let mut raw_tree = std::mem::take(&mut summary.tree);
        // Where ranks differ, a leaf's gaps by rank.
        let store = &self.store;
        raw_tree.add_rank_level(&summary.stack_ranks, summary.ranks, |r| store.rank_frame(r));
        self.diagnosis = Some(Diagnosis {
            steps: diagnosis.steps,
            summary: summary.clone(),
            advice: diagnosis.advice,
            replay: diagnosis.replay,
        });
        self.cache = Some(Cache {
            key: a.key,
            display: self.display_key(),
            gaps_total: summary.top_eligible,
            summary,
            gaps,
            raw_tree,
            top: CallTree::default(),
            tree: CallTree::default(),
            tree_ids: Vec::new(),
            tree_nodes: HashMap::new(),
            rows: Vec::new(),
            built: Instant::now(),
            analysed: span,
            comm,
            ranks,
            filtered: None,
        });
        self.rebuild_display();
        self.refresh_filter();
    }

    /// The call tree as shown (native runs folded, by function or by line, top-down or
    /// inverted) from the tree as analysed, and its rows.
    fn rebuild_display(&mut self) {
        let display = self.display_key();
        let Some(c) = &self.cache else { return };
        let top = c.raw_tree.mapped(self.frame_map());
        let tree = if self.inverted {
            top.inverted()
        } else {
            top.clone()
        };
        let tree_ids = path_ids(&tree);
        let tree_nodes = tree_ids
            .iter()
            .enumerate()
            .map(|(n, &id)| (id, n))
            .collect();
        let rows = build_rows(&self.store, &tree, &tree_ids, self.tree_by_function);
        if let Some(c) = &mut self.cache {
            c.display = display;
            c.top = top;
            c.tree = tree;
            c.tree_ids = tree_ids;
            c.tree_nodes = tree_nodes;
            c.rows = rows;
        }
    }
}

//! The builder's state: the store being filled, and what it holds back until every event is
//! in (the CPU spans, whose nesting needs them all, and the GPU-side annotations), with what
//! it has learnt so far (names, stacks, the current file's processes). Files begin and end
//! here: an ending file's implausible records are dropped and its times moved onto its
//! header's clock.

use std::collections::HashMap;

use super::files::Header;
use crate::model::dropped;
use crate::model::plausible::What;
use crate::model::ranges::Range;
use crate::model::records::{ApiKind, LaneKey, NameId, Ns, StackId};
use crate::model::store::Store;

/// What the reader keeps of a name: its id, and what its text says of the op or call.
#[derive(Clone, Copy)]
pub(super) struct Named {
    pub(super) id: NameId,
    pub(super) comm: bool,
    pub(super) api: ApiKind,
}

/// A CPU span as read, held until every event is in (`nesting` nests them).
pub(super) struct RawSpan {
    pub(super) start: Ns,
    pub(super) end: Ns,
    pub(super) name: NameId,
    /// python_function sorts before cpu_op when both start together.
    pub(super) rank: u8,
    /// The Python stack the span's `Call stack` names (0 if none): what an outermost span
    /// is nested in.
    pub(super) pystack: StackId,
    /// Its autograd sequence number, for the forward op of a backward one.
    pub(super) seq: crate::sources::fwdbwd::Seq,
}

/// Accumulates parsed events until [`Builder::finish`] links them into the store.
pub struct Builder {
    pub store: Store,
    /// CPU spans per (process, thread).
    pub(super) spans: HashMap<(u32, u32), Vec<RawSpan>>,
    pub events: u64,
    /// Events that claimed to be GPU ops, API calls or spans but could not be read: skipped
    /// and counted, the first one's error kept to name them.
    pub bad: u64,
    pub(super) first_bad: Option<String>,
    /// GPU ops name their process (gaptop's exports): each pid is a process.
    pub(super) per_process: bool,
    /// The process of the file being read, and the first process that file made (an export
    /// makes one per pid).
    pub(super) file_proc: u32,
    pub(super) file_first: u32,
    /// Python stacks already interned, by their `Call stack` text.
    pub(super) call_stacks: HashMap<Vec<u8>, StackId>,
    /// `gpu_user_annotation` ranges by (process, device, stream).
    pub(super) gpu_annotations: HashMap<(u32, u32, u32), Vec<Range>>,
    /// Names read so far, by their JSON bytes.
    pub(super) names: rustc_hash::FxHashMap<Box<[u8]>, Named>,
    /// The lane of the last op.
    pub(super) last_lane: Option<(LaneKey, usize)>,
}

impl Builder {
    pub fn new(budget: usize, source: &str) -> Self {
        let mut store = Store::new(budget);
        store.source = source.to_string();
        store.add_process(0, -1, source);
        Builder {
            store,
            spans: HashMap::new(),
            events: 0,
            bad: 0,
            first_bad: None,
            per_process: false,
            file_proc: 0,
            file_first: 0,
            call_stacks: HashMap::new(),
            gpu_annotations: HashMap::new(),
            names: Default::default(),
            last_lane: None,
        }
    }

    /// Whether nothing was read yet: the next file's events go to the process
    /// [`Builder::new`] made.
    fn fresh(&self) -> bool {
        self.store.total_ops == 0
            && self.store.procs.len() == 1
            && self.store.procs[0].api_count() == 0
            && self.spans.is_empty()
    }

    /// Starts another trace file of the same capture: its events go to a process of their
    /// own, labelled `label` (the first file's is the one [`Builder::new`] made).
    pub fn begin_file(&mut self, label: &str) {
        let p = if self.fresh() {
            self.store.procs[0].label = label.to_string();
            0
        } else {
            self.store.add_process(0, -1, label)
        };
        self.file_proc = p;
        self.file_first = p;
        self.per_process = false;
    }

    /// The processes the current file made.
    pub fn file_procs(&self) -> std::ops::Range<u32> {
        self.file_first..self.store.procs.len() as u32
    }

    /// Ends the current file: its processes take the rank its header gives (else `rank`, as
    /// its name may say), and its times move onto the absolute clock of its
    /// `baseTimeNanoseconds`.
    pub fn end_file(&mut self, header: &Header, rank: Option<i32>) {
        let procs = self.file_procs();
        self.drop_implausible(&procs);
        if let Some(r) = header.rank.or(rank) {
            for p in procs.clone() {
                let p = &mut self.store.procs[p as usize];
                // An export's processes keep the ranks it wrote.
                if p.rank < 0 {
                    p.rank = r;
                }
            }
        }
        let by = header.base_ns;
        if by == 0 {
            return;
        }
        // Its ops and calls; its spans and GPU ranges are still the builder's.
        for p in procs.clone() {
            self.store.shift_process(p, by);
        }
        for ((p, _), spans) in self.spans.iter_mut() {
            if procs.contains(p) {
                for s in spans.iter_mut() {
                    s.start = s.start.saturating_add(by);
                    s.end = s.end.saturating_add(by);
                }
            }
        }
        for ((p, _, _), ranges) in self.gpu_annotations.iter_mut() {
            if procs.contains(p) {
                for r in ranges.iter_mut() {
                    r.start = r.start.saturating_add(by);
                    r.end = r.end.saturating_add(by);
                }
            }
        }
    }

    /// Takes in a trace file read on its own (a builder of its own, its file ended), as if
    /// it had been read here after what was: the same processes, names, stacks and ids, in
    /// the same order. Returns the processes it made.
    pub fn absorb(&mut self, file: Builder) -> std::ops::Range<u32> {
        let into = self.fresh().then_some(0);
        let map = self.store.intern_all_of(&file.store);
        let procs = self.store.absorb(file.store, &map, into);
        // Its processes, numbered from 0 in its own store, are these in order.
        let proc = |p: u32| procs.start + p;
        for ((p, tid), mut v) in file.spans {
            if !map.is_same() {
                for s in v.iter_mut() {
                    s.name = map.name(s.name);
                    s.pystack = map.stack(s.pystack);
                }
            }
            self.spans.entry((proc(p), tid)).or_default().extend(v);
        }
        for ((p, device, stream), mut v) in file.gpu_annotations {
            for r in v.iter_mut() {
                r.name = map.name(r.name);
                r.domain = map.name(r.domain);
            }
            let key = (proc(p), device, stream);
            self.gpu_annotations.entry(key).or_default().extend(v);
        }
        self.events += file.events;
        self.bad += file.bad;
        if self.first_bad.is_none() {
            self.first_bad = file.first_bad;
        }
        self.file_first = procs.start;
        self.file_proc = procs.start;
        self.last_lane = None;
        procs
    }

    /// Drops the file's records whose times cannot be right (`model::plausible`), judged
    /// against the bulk of its ops', calls' and spans' starts.
    fn drop_implausible(&mut self, procs: &std::ops::Range<u32>) {
        let mut keys: Vec<(u32, u32)> = self
            .spans
            .keys()
            .filter(|(p, _)| procs.contains(p))
            .copied()
            .collect();
        keys.sort_unstable();
        let spans = keys
            .iter()
            .flat_map(|k| self.spans[k].iter().map(|s| s.start));
        let n = keys.iter().map(|k| self.spans[k].len()).sum();
        let Some(bulk) = dropped::file_bulk(&self.store, procs, spans, n) else {
            return;
        };
        dropped::drop_ops_and_calls(&mut self.store, procs, &bulk);
        let st = &mut self.store;
        for k in &keys {
            let v = self.spans.get_mut(k).expect("a key of the map");
            dropped::retain(st, v, What::CpuSpan, &bulk, |s| (s.start, s.end, s.name));
        }
        let mut keys: Vec<(u32, u32, u32)> = self
            .gpu_annotations
            .keys()
            .filter(|(p, _, _)| procs.contains(p))
            .copied()
            .collect();
        keys.sort_unstable();
        for k in &keys {
            let v = self.gpu_annotations.get_mut(k).expect("a key of the map");
            dropped::retain(st, v, What::Range, &bulk, |r| (r.start, r.end, r.name));
        }
    }
}

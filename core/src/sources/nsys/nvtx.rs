//! NVTX ranges (`NVTX_EVENTS`): push/pop and start/end ranges of the processes that did CUDA
//! work, with their domains named by the domains' creation events, become the threads' CPU
//! spans (frames above the calls they enclose) and the processes' NVTX ranges (the timeline's
//! lane, the steps). The marks are passed over, but for nsys's `Python Backtrace` domain's,
//! whose ids this finds for `python.rs`.

use rustc_hash::FxHashMap as HashMap;

use super::db::{int, proc_key, text, tid_of};
use super::import::Import;
use super::pybacktrace;
use crate::model::plausible::What;
use crate::model::records::{NameId, Ns, Span, StackId};

/// `ENUM_NSYS_EVENT_TYPE` values of NVTX ranges and marks (the other NVTX events, a domain's
/// creation or a thread's name, are passed over).
const NVTX_PUSH_POP: i64 = 59;
const NVTX_START_END: i64 = 60;
pub(super) const NVTX_MARK: i64 = 34;
/// `NvtxDomainCreate`: names the domain of its `domainId`.
const NVTX_DOMAIN_CREATE: i64 = 75;

/// NVTX ranges read, by (process, thread).
pub(super) type ThreadRanges = HashMap<(u32, u32), Vec<RawRange>>;

/// An NVTX range read.
pub(super) struct RawRange {
    start: Ns,
    end: Ns,
    name: NameId,
    /// Its domain's name (0: the default domain).
    domain: NameId,
}

impl Import {
    /// NVTX ranges per (process, thread), in no order, and the ids of nsys's `Python Backtrace`
    /// domain (whose marks [`Import::python_backtraces`] reads).
    pub(super) fn ranges(&mut self) -> anyhow::Result<(ThreadRanges, Vec<i64>)> {
        let mut out: ThreadRanges = HashMap::default();
        let t = "NVTX_EVENTS";
        if !self.db.has(t) {
            return Ok((out, Vec::new()));
        }
        let cols = [
            "start!",
            "end",
            "eventType!",
            "globalTid",
            "textId",
            "domainId",
            "text",
        ];
        let mut rows = Vec::new();
        self.db.each(t, &cols, |r| {
            let mut v = [None; 6];
            for (i, c) in cols[..6].iter().enumerate() {
                v[i] = int(r, i, c.trim_end_matches('!'))?;
            }
            rows.push((v, text(r, 6, "text")?));
            Ok(())
        })?;
        // Domains are named by their creation events (the default domain, 0, by none).
        let mut domains: HashMap<i64, NameId> = HashMap::default();
        for ([_, _, ty, _, text_id, domain], text) in &rows {
            if *ty == Some(NVTX_DOMAIN_CREATE) {
                let name = match text.as_deref().filter(|s| !s.is_empty()) {
                    Some(s) => self.store.names.intern(s),
                    None => self.strings.name(&mut self.store, *text_id),
                };
                domains.insert(domain.unwrap_or(0), name);
            }
        }
        let python: Vec<i64> = domains
            .iter()
            .filter(|&(_, &n)| self.store.names.get(n) == pybacktrace::DOMAIN)
            .map(|(&d, _)| d)
            .collect();
        for ([start, end, ty, gtid, text_id, domain], text) in rows {
            let ty = ty.unwrap_or(0);
            if ty == NVTX_MARK {
                // Python backtraces are marks of their own domain, read on their own.
                if !python.contains(&domain.unwrap_or(0)) {
                    self.store.skip("NVTX mark");
                }
                continue;
            }
            if ty != NVTX_PUSH_POP && ty != NVTX_START_END {
                continue;
            }
            let (Some(start), Some(gtid)) = (start, gtid) else {
                self.store.skip("NVTX range without a start or a thread");
                continue;
            };
            let Some(end) = end else {
                self.store.skip("NVTX range without an end");
                continue;
            };
            if let Some(v) = self.verdict(What::Range, start, end) {
                let name = match text.filter(|s| !s.is_empty()) {
                    Some(s) => self.store.names.intern(&s),
                    None => self.strings.name(&mut self.store, text_id),
                };
                self.store.drop_implausible(What::Range, v, name);
                continue;
            }
            // Ranges of processes that did no CUDA work explain no gap.
            let Some(&proc) = self.procs.get(&proc_key(gtid)) else {
                self.store.skip("NVTX range of a process without CUDA work");
                continue;
            };
            let name = match text.filter(|s| !s.is_empty()) {
                Some(s) => self.store.names.intern(&s),
                None => match self.strings.name(&mut self.store, text_id) {
                    0 => self.store.names.intern("(unnamed NVTX range)"),
                    n => n,
                },
            };
            let domain = match domain.unwrap_or(0) {
                0 => 0,
                d => match domains.get(&d) {
                    Some(&n) => n,
                    None => self.store.names.intern(&format!("(NVTX domain {d})")),
                },
            };
            out.entry((proc, tid_of(gtid))).or_default().push(RawRange {
                start,
                end,
                name,
                domain,
            });
        }
        Ok((out, python))
    }

    /// Gives each thread its ranges as spans, nested: a range's parent is the latest opened
    /// range that holds it whole (start/end ranges need not nest; one that crosses another's
    /// end becomes its sibling); and as its NVTX ranges, for the timeline's lane and steps.
    pub(super) fn spans(&mut self, ranges: ThreadRanges) {
        for ((proc, tid), mut raw) in ranges {
            raw.sort_unstable_by_key(|r| (r.start, std::cmp::Reverse(r.end), r.name));
            let nvtx = raw
                .iter()
                .map(|r| crate::model::ranges::Range::new(r.start, r.end, r.name, r.domain))
                .collect();
            self.store.procs[proc as usize].set_ranges(tid, nvtx);
            let mut spans: Vec<Span> = Vec::with_capacity(raw.len());
            let mut open: Vec<usize> = Vec::new();
            for r in raw {
                while let Some(&i) = open.last() {
                    if spans[i].end >= r.end {
                        break;
                    }
                    open.pop();
                }
                let (parent, under): (u32, StackId) = match open.last() {
                    Some(&i) => (i as u32, spans[i].stack),
                    None => (u32::MAX, 0),
                };
                spans.push(Span {
                    start: r.start,
                    end: r.end,
                    stack: self.store.stacks.intern(under, r.name),
                    parent,
                });
                open.push(spans.len() - 1);
            }
            self.store.procs[proc as usize].spans.insert(tid, spans);
        }
    }
}

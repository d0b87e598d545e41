//! Import of torch.profiler (Kineto) Chrome-trace JSON, plain or gzipped, streamed.
//!
//! What is kept: GPU ops (`kernel`, `gpu_memcpy`, `gpu_memset`), host API calls (`cuda_runtime`,
//! `cuda_driver`) and CPU spans (`python_function`, `cpu_op`, `user_annotation`), whose nesting
//! gives each API call its call stack. Traces of Kineto before mid-2021 spell the categories
//! `Kernel`, `Memcpy`, `Memset`, `Runtime` and `Operator`, name a GPU op's thread `stream N`
//! and give an operator's Python stack as its `Call stack` argument; they read alike.
//! User annotations are also ranges (`collect::model::ranges`), and `gpu_user_annotation`s GPU-side
//! ones. Everything else is counted as skipped.
//!
//! One builder may read several traces (the ranks of a run): each file's calls and ops make a
//! process of their own, with the rank of the trace's `distributedInfo` header, and its times
//! are put on the absolute clock its `baseTimeNanoseconds` gives (newer Kineto writes times
//! relative to it).

use crate::collect::model::dropped;
use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;

use super::jsonscan::Scanner;
use crate::collect::model::plausible::{self, What};
use crate::collect::model::ranges::Range;
use crate::collect::model::records::{
    ApiCall, ApiKind, GpuOp, LaneKey, NameId, Ns, OpKind, Span, StackId, FLAG_COMM,
};
use crate::collect::model::store::Store;
use crate::frames::is_comm_kernel;

/// The fields of one event that gaptop reads, borrowed from the event's bytes. Values are
/// kept as raw JSON text; strings are decoded only when read.
#[derive(Default)]
struct RawEvent<'a> {
    ph: Option<&'a [u8]>,
    cat: Option<&'a [u8]>,
    name: Option<&'a [u8]>,
    pid: Option<&'a [u8]>,
    tid: Option<&'a [u8]>,
    ts: Option<&'a [u8]>,
    dur: Option<&'a [u8]>,
    args: Option<&'a [u8]>,
}

#[derive(Default, Clone, Copy)]
struct RawArgs<'a> {
    correlation: Option<&'a [u8]>,
    device: Option<&'a [u8]>,
    stream: Option<&'a [u8]>,
    graph_id: Option<&'a [u8]>,
    stack: Option<&'a [u8]>,
    /// An operator's Python stack, innermost frame first, `;`-separated (Kineto's with_stack
    /// before python_function spans, and cpu_op events since).
    call_stack: Option<&'a [u8]>,
    /// The profiled process of a GPU op (gaptop's exports, which may hold several).
    process: Option<&'a [u8]>,
    /// An operator's autograd `Sequence number`, and `Fwd thread id` (nonzero on the ops
    /// that run a backward node): `collect::sources::fwdbwd`.
    seq: Option<&'a [u8]>,
    fwd_tid: Option<&'a [u8]>,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    i
}

/// Walks a JSON object's members, giving each key (raw, without quotes) and value (raw text).
/// Values are skipped with the splitter's scanner; anything malformed is an error.
fn members<'a>(b: &'a [u8], mut f: impl FnMut(&'a [u8], &'a [u8])) -> Result<(), &'static str> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err("expected an object");
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Ok(());
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return Err("expected a key");
        }
        let ke = super::jsonscan::string_end(b, i).ok_or("unterminated key")?;
        let key = &b[i + 1..ke - 1];
        i = skip_ws(b, ke);
        if b.get(i) != Some(&b':') {
            return Err("expected ':'");
        }
        i = skip_ws(b, i + 1);
        if i >= b.len() {
            return Err("missing value");
        }
        let ve = super::jsonscan::complete_value_end(b, i)?;
        f(key, &b[i..ve]);
        i = skip_ws(b, ve);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Ok(()),
            _ => return Err("expected ',' or '}'"),
        }
    }
}

/// Decodes a JSON string value (borrowed when it has no escapes).
fn string_of(v: &[u8]) -> Result<Cow<'_, str>, String> {
    if v.len() < 2 || v[0] != b'"' || v[v.len() - 1] != b'"' {
        return Err(format!(
            "expected a string, got {}",
            String::from_utf8_lossy(v)
        ));
    }
    let inner = &v[1..v.len() - 1];
    if memchr::memchr(b'\\', inner).is_none() {
        return std::str::from_utf8(inner)
            .map(Cow::Borrowed)
            .map_err(|_| "invalid UTF-8 in a string".to_string());
    }
    serde_json::from_slice::<String>(v)
        .map(Cow::Owned)
        .map_err(|e| format!("bad string: {e}"))
}

fn text(v: Option<&[u8]>) -> Option<&str> {
    v.and_then(|b| std::str::from_utf8(b).ok())
}

/// Parses a JSON number written in microseconds into integer nanoseconds, exactly for the
/// usual `123.456` form (f64 would lose nanoseconds on absolute timestamps).
pub fn us_to_ns(text: &str) -> Option<Ns> {
    let t = text.trim().trim_matches('"');
    let (neg, digits) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    if digits.contains(['e', 'E']) {
        let v: f64 = t.parse().ok()?;
        if !v.is_finite() || v.abs() > 9.0e15 {
            return None;
        }
        return Some((v * 1000.0).round() as Ns);
    }
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, f),
        None => (digits, ""),
    };
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let i: i64 = int.parse().ok()?;
    let mut f: i64 = 0;
    let mut scale = 100;
    let mut round_up = false;
    for (k, b) in frac.bytes().enumerate() {
        let d = (b - b'0') as i64;
        if k < 3 {
            f += d * scale;
            scale /= 10;
        } else {
            if k == 3 && d >= 5 {
                round_up = true;
            }
            break;
        }
    }
    let v = i.checked_mul(1000)?.checked_add(f + round_up as i64)?;
    Some(if neg { -v } else { v })
}

fn int_of(v: Option<&[u8]>) -> Option<i64> {
    if let Some(n) = v.and_then(int_plain) {
        return Some(n);
    }
    let t = text(v)?.trim().trim_matches('"');
    t.parse::<i64>()
        .ok()
        .or_else(|| t.parse::<f64>().ok().map(|f| f as i64))
}

/// An integer written plainly (`-?[0-9]{1,18}`), read without going through text; None for
/// anything else, which [`int_of`] reads as it always did.
#[inline]
fn int_plain(v: &[u8]) -> Option<i64> {
    let (neg, d) = sign(v);
    let n = digits(d, 18)?;
    Some(if neg { -n } else { n })
}

/// Whether a number is negative, and its digits.
#[inline]
fn sign(v: &[u8]) -> (bool, &[u8]) {
    match v.first() {
        Some(b'-') => (true, &v[1..]),
        _ => (false, v),
    }
}

/// The value of 1 to `most` decimal digits (None for anything else).
#[inline]
fn digits(d: &[u8], most: usize) -> Option<i64> {
    if d.is_empty() || d.len() > most {
        return None;
    }
    d.iter().try_fold(0i64, |n, &b| {
        let x = b.wrapping_sub(b'0');
        (x <= 9).then_some(n * 10 + x as i64)
    })
}

/// [`us_to_ns`] of microseconds written plainly (`-?[0-9]{1,15}(\.[0-9]+)?`), without going
/// through text; None for anything else, which `us_to_ns` reads.
#[inline]
fn us_to_ns_plain(v: &[u8]) -> Option<Ns> {
    let (neg, d) = sign(v);
    let dot = d.iter().position(|&b| b == b'.').unwrap_or(d.len());
    let (int, frac) = (&d[..dot], d.get(dot + 1..).unwrap_or(&[]));
    let i = digits(int, 15)?;
    let (mut f, mut scale, mut round_up) = (0i64, 100i64, false);
    for (k, &b) in frac.iter().enumerate() {
        let x = b.wrapping_sub(b'0');
        if x > 9 {
            return None;
        }
        if k < 3 {
            f += x as i64 * scale;
            scale /= 10;
        } else if k == 3 && x >= 5 {
            round_up = true;
        }
    }
    let v = i * 1000 + f + round_up as i64;
    Some(if neg { -v } else { v })
}

/// A name as messages show it, decoded only when one is written.
struct NameText<'a>(Option<&'a [u8]>);

impl std::fmt::Debug for NameText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.and_then(|v| string_of(v).ok());
        write!(f, "{:?}", s.as_deref().unwrap_or(""))
    }
}

/// What the reader keeps of a name: its id, and what its text says of the op or call.
#[derive(Clone, Copy)]
struct Named {
    id: NameId,
    comm: bool,
    api: ApiKind,
}

/// An event's `args` members that gaptop reads.
fn read_args(a: &[u8]) -> Result<RawArgs<'_>, &'static str> {
    let mut slots = [None; ARGS];
    members(a, |k, v| {
        if let Some(i) = args_member(k) {
            slots[i] = Some(v);
        }
    })?;
    Ok(RawArgs::from_slots(slots))
}

struct RawSpan {
    start: Ns,
    end: Ns,
    name: NameId,
    /// python_function sorts before cpu_op when both start together.
    rank: u8,
    /// The Python stack the span's `Call stack` names (0 if none): what an outermost span
    /// is nested in.
    pystack: StackId,
    /// Its autograd sequence number, for the forward op of a backward one.
    seq: super::fwdbwd::Seq,
}

/// The latest `baseTimeNanoseconds` taken for a time (2^62 ns: the year 2116).
const MAX_BASE_NS: Ns = 1 << 62;

/// What a trace's header says about its run, read around its events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// `distributedInfo.rank` and `.world_size`.
    pub rank: Option<i32>,
    pub world_size: Option<i64>,
    /// `baseTimeNanoseconds`: what the events' times are relative to (0 when absent).
    pub base_ns: Ns,
}

impl Header {
    /// Takes what it knows from one top-level member of a trace.
    fn member(&mut self, key: &[u8], value: &[u8]) {
        match key {
            b"distributedInfo" => {
                let (mut rank, mut world) = (None, None);
                let _ = members(value, |k, v| match k {
                    b"rank" => rank = int_of(Some(v)),
                    b"world_size" => world = int_of(Some(v)),
                    _ => {}
                });
                self.rank = rank.and_then(|r| i32::try_from(r).ok()).filter(|r| *r >= 0);
                self.world_size = world;
            }
            b"baseTimeNanoseconds" => self.base_ns = int_of(Some(value)).unwrap_or(0),
            _ => {}
        }
    }
}

/// Accumulates parsed events until [`Builder::finish`] links them into the store.
pub struct Builder {
    pub store: Store,
    /// CPU spans per (process, thread).
    spans: HashMap<(u32, u32), Vec<RawSpan>>,
    pub events: u64,
    /// GPU ops name their process (gaptop's exports): each pid is a process.
    per_process: bool,
    /// The process of the file being read, and the first process that file made (an export
    /// makes one per pid).
    file_proc: u32,
    file_first: u32,
    /// Python stacks already interned, by their `Call stack` text.
    call_stacks: HashMap<Vec<u8>, StackId>,
    /// `gpu_user_annotation` ranges by (process, device, stream).
    gpu_annotations: HashMap<(u32, u32, u32), Vec<Range>>,
    /// Names read so far, by their JSON bytes.
    names: rustc_hash::FxHashMap<Box<[u8]>, Named>,
    /// The lane of the last op.
    last_lane: Option<(LaneKey, usize)>,
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
            per_process: false,
            file_proc: 0,
            file_first: 0,
            call_stacks: HashMap::new(),
            gpu_annotations: HashMap::new(),
            names: Default::default(),
            last_lane: None,
        }
    }

    /// Starts another trace file of the same capture: its events go to a process of their
    /// own, labelled `label` (the first file's is the one [`Builder::new`] made).
    pub fn begin_file(&mut self, label: &str) {
        let fresh = self.store.total_ops == 0
            && self.store.procs.len() == 1
            && self.store.procs[0].api_count() == 0
            && self.spans.is_empty();
        let p = if fresh {
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

    /// Drops the file's records whose times cannot be right (`collect::model::plausible`), judged
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

    /// Handles one event object. Errors are for events that claim to be GPU ops, API calls or
    /// spans but cannot be read; anything else unknown is skipped and counted.
    pub fn event(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.events += 1;
        let mut slots = [None; 8];
        members(bytes, |k, v| {
            if let Some(i) = event_member(k) {
                slots[i] = Some(v);
            }
        })
        .map_err(|e| format!("unreadable event: {e}"))?;
        self.handle(&RawEvent::from_slots(slots), None)
    }

    /// An event whose members the splitter's thread found ([`Spans`]).
    fn event_spans(&mut self, bytes: &[u8], s: &Spans) -> Result<(), String> {
        self.events += 1;
        let (ev, args) = s.read(bytes);
        self.handle(&ev, args.as_ref())
    }

    /// Handles an event's members; `args` are its arguments' when they were read already.
    fn handle(&mut self, ev: &RawEvent, args: Option<&RawArgs>) -> Result<(), String> {
        let ph = match ev.ph {
            Some(v) => string_of(v)?,
            None => Cow::Borrowed(""),
        };
        let cat = match ev.cat {
            Some(v) => string_of(v)?,
            None => Cow::Borrowed(""),
        };
        let (ph, cat) = (ph.as_ref(), cat.as_ref());
        if ph != "X" {
            match ph {
                "M" => self.process_meta(ev)?,
                "s" | "f" | "t" | "i" | "I" => {}
                _ => self.store.skip(&format!("phase {ph:?}")),
            }
            return Ok(());
        }
        // Kineto's categories, as spelled since mid-2021 and before.
        let kind = match cat {
            "kernel" | "Kernel" => Some(OpKind::Kernel),
            "gpu_memcpy" | "Memcpy" => Some(OpKind::Memcpy),
            "gpu_memset" | "Memset" => Some(OpKind::Memset),
            _ => None,
        };
        let is_api = matches!(cat, "cuda_runtime" | "cuda_driver" | "Runtime");
        let span_rank = match cat {
            "python_function" => Some(0),
            "user_annotation" => Some(1),
            "cpu_op" | "Operator" => Some(2),
            _ => None,
        };
        if cat == "gpu_user_annotation" {
            return self.gpu_annotation(ev);
        }
        if kind.is_none() && !is_api && span_rank.is_none() {
            if !matches!(cat, "ac2g" | "Trace" | "overhead" | "gaptop_gap") {
                self.store.skip(&format!("category {cat:?}"));
            }
            return Ok(());
        }
        // Decoded and interned once a name (by its bytes); decoded again only for messages.
        let named = self.name_of(ev.name)?;
        let name = NameText(ev.name);
        let num = |v: Option<&[u8]>, what: &str| -> Result<Ns, String> {
            if let Some(n) = v.and_then(us_to_ns_plain) {
                return Ok(n);
            }
            let t = text(v).ok_or_else(|| format!("{cat} {name:?}: missing {what}"))?;
            us_to_ns(t).ok_or_else(|| format!("{cat} {name:?}: bad {what} {t}"))
        };
        let ts = num(ev.ts, "ts")?;
        let dur = num(ev.dur, "dur")?;
        if dur < 0 {
            return Err(format!("{cat} {name:?}: negative duration {dur} ns"));
        }
        let args = match (args, ev.args) {
            (Some(a), _) => *a,
            (None, Some(a)) => {
                read_args(a).map_err(|e| format!("{cat} {name:?}: unreadable args: {e}"))?
            }
            (None, None) => RawArgs::default(),
        };
        let tid_num = int_of(ev.tid);
        if let Some(kind) = kind {
            let end = ts.saturating_add(dur);
            if let Some(v) = plausible::shape(What::GpuOp, ts, end) {
                self.store.drop_implausible(What::GpuOp, v, named.id);
                return Ok(());
            }
            let device = int_of(args.device)
                .or_else(|| int_of(ev.pid))
                .ok_or_else(|| format!("{cat} {name:?}: no device"))?;
            let stream = int_of(args.stream)
                .or(tid_num)
                .or_else(|| stream_of_tid(ev.tid))
                .ok_or_else(|| format!("{cat} {name:?}: no stream"))?;
            let corr = int_of(args.correlation).unwrap_or(0);
            let nm = named.id;
            let proc = match int_of(args.process) {
                Some(pid) => {
                    self.per_process = true;
                    self.proc_of(pid.clamp(0, u32::MAX as i64) as u32)
                }
                None => self.file_proc,
            };
            let lane = self.lane_id(LaneKey {
                proc,
                device: device.clamp(0, u32::MAX as i64) as u32,
                stream: stream.clamp(0, u32::MAX as i64) as u32,
            });
            let mut op = GpuOp::new(ts, end, kind, nm, corr.clamp(0, u32::MAX as i64) as u32);
            op.graph = int_of(args.graph_id).unwrap_or(0).clamp(0, u32::MAX as i64) as u32;
            if named.comm {
                op.flags |= FLAG_COMM;
            }
            self.store.push_op_unsorted(lane, op);
        } else {
            let tid = tid_num
                .ok_or_else(|| format!("{cat} {name:?}: non-numeric tid"))?
                .clamp(0, u32::MAX as i64) as u32;
            let nm = named.id;
            if is_api {
                // In gaptop's exports (ops name their process) every pid is a process of its
                // own; in other traces the calls belong to the trace's one process.
                let pid = int_of(ev.pid).map(|p| p.clamp(0, u32::MAX as i64) as u32);
                let proc = match pid {
                    Some(pid) if self.per_process => self.proc_of(pid),
                    Some(pid) => {
                        let p = &mut self.store.procs[self.file_proc as usize];
                        if p.pid == 0 {
                            p.pid = pid;
                        }
                        self.file_proc
                    }
                    None => self.file_proc,
                };
                let corr = int_of(args.correlation).unwrap_or(0);
                let mut stack = 0;
                let frames: Option<Vec<String>> = match args.stack {
                    Some(v) => Some(
                        serde_json::from_slice(v)
                            .map_err(|e| format!("{cat} {name:?}: bad stack: {e}"))?,
                    ),
                    None => None,
                };
                if let Some(frames) = &frames {
                    let names = &mut self.store.names;
                    let ids = frames.iter().map(|f| names.intern(f));
                    stack = self.store.stacks.intern_path(stack, ids);
                }
                // A stack of 0 is filled in from the CPU spans in `finish`.
                self.store.push_api_unsorted(
                    proc,
                    ApiCall {
                        start: ts,
                        end: ts + dur,
                        corr: corr.clamp(0, u32::MAX as i64) as u32,
                        tid,
                        name: nm,
                        stack,
                        kind: named.api,
                    },
                );
            } else if let Some(rank) = span_rank {
                let pystack = match args.call_stack {
                    Some(v) => self
                        .call_stack(v)
                        .map_err(|e| format!("{cat} {name:?}: {e}"))?,
                    None => 0,
                };
                // In gaptop's exports (ops name their process) a span is its pid's.
                let proc = match int_of(ev.pid) {
                    Some(pid) if self.per_process => {
                        self.proc_of(pid.clamp(0, u32::MAX as i64) as u32)
                    }
                    _ => self.file_proc,
                };
                self.spans.entry((proc, tid)).or_default().push(RawSpan {
                    start: ts,
                    end: ts + dur,
                    name: nm,
                    rank,
                    pystack,
                    seq: super::fwdbwd::Seq {
                        nr: int_of(args.seq).unwrap_or(-1),
                        backward: int_of(args.fwd_tid).is_some_and(|t| t != 0),
                    },
                });
            }
        }
        Ok(())
    }

    /// The name an event's `name` member gives (empty without one), interned.
    fn name_of(&mut self, v: Option<&[u8]>) -> Result<Named, String> {
        let raw = v.unwrap_or(b"\"\"");
        if let Some(&n) = self.names.get(raw) {
            return Ok(n);
        }
        let text = string_of(raw)?;
        let n = Named {
            id: self.store.names.intern(&text),
            comm: is_comm_kernel(&text),
            api: ApiKind::classify(&text),
        };
        self.names.insert(raw.into(), n);
        Ok(n)
    }

    /// The store's lane of `key`, remembering the last one asked for.
    fn lane_id(&mut self, key: LaneKey) -> usize {
        match self.last_lane {
            Some((k, l)) if k == key => l,
            _ => {
                let l = self.store.lane_id(key);
                self.last_lane = Some((key, l));
                l
            }
        }
    }

    /// The Python stack of a `Call stack` argument (`file(line): fn;...`, innermost first),
    /// interned outermost first; 0 when it is empty.
    fn call_stack(&mut self, v: &[u8]) -> Result<StackId, String> {
        if let Some(&s) = self.call_stacks.get(v) {
            return Ok(s);
        }
        let text = string_of(v)?;
        let names = &mut self.store.names;
        let ids = text
            .rsplit(';')
            .filter(|f| !f.trim().is_empty())
            .map(|f| names.intern(f.trim()));
        let stack = self.store.stacks.intern_path(0, ids);
        self.call_stacks.insert(v.to_vec(), stack);
        Ok(stack)
    }

    /// A `gpu_user_annotation`: a user annotation's extent on the GPU stream that ran its
    /// kernels (`pid` the device, `tid` the stream), kept as a GPU-side range.
    fn gpu_annotation(&mut self, ev: &RawEvent) -> Result<(), String> {
        let name = match ev.name {
            Some(v) => string_of(v)?,
            None => Cow::Borrowed(""),
        };
        let num = |v: Option<&[u8]>, what: &str| -> Result<Ns, String> {
            let t =
                text(v).ok_or_else(|| format!("gpu_user_annotation {name:?}: missing {what}"))?;
            us_to_ns(t).ok_or_else(|| format!("gpu_user_annotation {name:?}: bad {what} {t}"))
        };
        let (ts, dur) = (num(ev.ts, "ts")?, num(ev.dur, "dur")?);
        if dur < 0 {
            return Err(format!(
                "gpu_user_annotation {name:?}: negative duration {dur} ns"
            ));
        }
        let clamp = |v: Option<i64>| v.unwrap_or(0).clamp(0, u32::MAX as i64) as u32;
        let lane = (clamp(int_of(ev.pid)), clamp(int_of(ev.tid)));
        let nm = self.store.names.intern(&name);
        self.gpu_annotations
            .entry((self.file_proc, lane.0, lane.1))
            .or_default()
            .push(Range::new(ts, ts + dur, nm, 0));
        Ok(())
    }

    /// The process of `pid` in the current file: the file's first one until it has a pid,
    /// then one per pid.
    fn proc_of(&mut self, pid: u32) -> u32 {
        let first = self.file_first as usize;
        if let Some(i) = self.store.procs[first..].iter().position(|p| p.pid == pid) {
            return (first + i) as u32;
        }
        if self.store.procs[first].pid == 0 {
            self.store.procs[first].pid = pid;
            return first as u32;
        }
        let label = self.store.procs[first].label.clone();
        self.store.add_process(pid, -1, &label)
    }

    /// A gaptop export's `process_name` metadata gives a process its label and rank back.
    /// Other traces' metadata (torch.profiler names every process "python3") is left alone.
    fn process_meta(&mut self, ev: &RawEvent) -> Result<(), String> {
        // An odd metadata event of another tool is passed over.
        let name = ev.name.and_then(|v| string_of(v).ok());
        if name.as_deref() == Some("gaptop_window") {
            return self.window_meta(ev);
        }
        if name.as_deref() != Some("process_name") {
            return Ok(());
        }
        let (Some(args), Some(pid)) = (ev.args, int_of(ev.pid)) else {
            return Ok(());
        };
        let (mut label, mut rank) = (None, None);
        let read = members(args, |k, v| match k {
            b"gaptop_label" => label = Some(v),
            b"gaptop_rank" => rank = int_of(Some(v)),
            _ => {}
        });
        let (Ok(()), Some(label)) = (read, label) else {
            return Ok(());
        };
        let label = string_of(label).map_err(|e| format!("process metadata: {e}"))?;
        if let Some(p) = self
            .store
            .procs
            .iter_mut()
            .find(|p| i64::from(p.pid) == pid)
        {
            p.label = label.into_owned();
            p.rank = rank.unwrap_or(-1).clamp(-1, i32::MAX as i64) as i32;
        }
        Ok(())
    }

    /// A gaptop export's window: the re-opened capture is that window, not its ops' span.
    fn window_meta(&mut self, ev: &RawEvent) -> Result<(), String> {
        let (mut from, mut to) = (None, None);
        if let Some(args) = ev.args {
            members(args, |k, v| match k {
                b"from_ns" => from = int_of(Some(v)),
                b"to_ns" => to = int_of(Some(v)),
                b"origin_ns" => self.store.origin = int_of(Some(v)),
                _ => {}
            })
            .map_err(|e| format!("gaptop_window: unreadable args: {e}"))?;
        }
        match (from, to) {
            (Some(f), Some(t)) if f < t => {
                self.store.window = Some((f, t));
                Ok(())
            }
            _ => Err("gaptop_window: needs from_ns < to_ns".into()),
        }
    }

    /// Builds span nesting and stacks, attaches a stack to every API call, sorts lanes.
    pub fn finish(mut self) -> Store {
        let st = &mut self.store;
        for ((proc, device, stream), v) in self.gpu_annotations.drain() {
            st.procs[proc as usize].set_gpu_ranges(device, stream, v);
        }
        let mut links = super::fwdbwd::Links::default();
        for ((proc, tid), mut raw) in self.spans.drain() {
            raw.sort_by(|a, b| {
                a.start
                    .cmp(&b.start)
                    .then(b.end.cmp(&a.end))
                    .then(a.rank.cmp(&b.rank))
            });
            st.procs[proc as usize].set_ranges(tid, user_annotations(&raw));
            let mut out: Vec<Span> = Vec::with_capacity(raw.len());
            let mut seqs: Vec<super::fwdbwd::Seq> = Vec::with_capacity(raw.len());
            let mut open: Vec<u32> = Vec::new();
            for r in raw {
                while let Some(&top) = open.last() {
                    let t = &out[top as usize];
                    if t.end >= r.end && t.start <= r.start {
                        break;
                    }
                    open.pop();
                }
                let (parent, pstack) = match open.last() {
                    Some(&p) => (p, out[p as usize].stack),
                    // An outermost span sits in the Python stack it names, if it names one.
                    None => (u32::MAX, r.pystack),
                };
                let stack = st.stacks.intern(pstack, r.name);
                let pseq = open.last().map(|&p| seqs[p as usize]);
                links.span(proc, r.seq, pseq, r.start, stack);
                seqs.push(r.seq);
                out.push(Span {
                    start: r.start,
                    end: r.end,
                    stack,
                    parent,
                });
                open.push((out.len() - 1) as u32);
            }
            st.procs[proc as usize].spans.insert(tid, out);
        }
        links.resolve(st);
        for p in st.procs.iter_mut() {
            p.stacks_from_spans();
        }
        st.finish_bulk();
        self.store
    }
}

/// A thread's `user_annotation` spans (torch.profiler's `record_function`, NVTX-like), as ranges.
fn user_annotations(raw: &[RawSpan]) -> Vec<Range> {
    raw.iter()
        .filter(|r| r.rank == 1)
        .map(|r| Range::new(r.start, r.end, r.name, 0))
        .collect()
}

/// Opens a file, gunzipping when it starts with the gzip magic.
pub fn open_maybe_gz(path: &Path) -> anyhow::Result<Box<dyn Read + Send>> {
    let mut r = open_plain_or_gz(path)?;
    let mut head = Vec::with_capacity(64);
    if r.by_ref().take(64).read_to_end(&mut head).is_err() {
        // The scanner says what reading it fails with.
        return open_plain_or_gz(path);
    }
    not_json(&head)?;
    Ok(Box::new(std::io::Cursor::new(head).chain(r)))
}

/// Refuses a file whose first bytes `head` cannot start JSON, saying what they look like and
/// what gaptop reads.
fn not_json(head: &[u8]) -> anyhow::Result<()> {
    match head.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{' | b'[') | None => Ok(()),
        Some(_) => anyhow::bail!(
            "not a trace or a recording ({}); {}",
            crate::text::looks_like(head),
            crate::text::READS
        ),
    }
}

/// The file, inflated when it is gzipped.
fn open_plain_or_gz(path: &Path) -> anyhow::Result<Box<dyn Read + Send>> {
    let mut f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot open: {e}"))?;
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic)?;
    let f = std::fs::File::open(path)?;
    if n == 2 && magic == [0x1f, 0x8b] {
        Ok(Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, f)),
        )))
    } else {
        Ok(Box::new(f))
    }
}

/// Where a member lies in an event's bytes (start, end); (0, 0) when it is absent.
#[derive(Clone, Copy, Default)]
struct At(u32, u32);

impl At {
    fn of(self, b: &[u8]) -> Option<&[u8]> {
        (self.1 > 0).then(|| &b[self.0 as usize..self.1 as usize])
    }
}

/// Where the members gaptop reads lie in an event, found in one pass over it on a thread of
/// their own ([`spans`]): [`RawEvent`]'s, then [`RawArgs`]'s.
#[derive(Clone, Copy, Default)]
struct Spans {
    ev: [At; 8],
    args: [At; ARGS],
    /// `args` was an object, read member by member.
    args_read: bool,
}

/// The index in [`Spans::ev`] of an event's member, by its key.
fn event_member(key: &[u8]) -> Option<usize> {
    Some(match key {
        b"ph" => 0,
        b"cat" => 1,
        b"name" => 2,
        b"pid" => 3,
        b"tid" => 4,
        b"ts" => 5,
        b"dur" => 6,
        b"args" => 7,
        _ => return None,
    })
}

/// How many arguments gaptop reads ([`RawArgs`]).
const ARGS: usize = 9;

/// The index in [`Spans::args`] of an argument, by its key.
fn args_member(key: &[u8]) -> Option<usize> {
    Some(match key {
        b"correlation" => 0,
        b"device" => 1,
        b"stream" => 2,
        b"graph id" => 3,
        b"stack" => 4,
        b"Call stack" => 5,
        b"process" => 6,
        b"Sequence number" => 7,
        b"Fwd thread id" => 8,
        _ => return None,
    })
}

impl Spans {
    fn read<'a>(&self, b: &'a [u8]) -> (RawEvent<'a>, Option<RawArgs<'a>>) {
        let ev = RawEvent::from_slots(self.ev.map(|at| at.of(b)));
        let args = self
            .args_read
            .then(|| RawArgs::from_slots(self.args.map(|at| at.of(b))));
        (ev, args)
    }
}

impl<'a> RawEvent<'a> {
    /// The members in [`event_member`]'s order.
    fn from_slots([ph, cat, name, pid, tid, ts, dur, args]: [Option<&'a [u8]>; 8]) -> Self {
        RawEvent {
            ph,
            cat,
            name,
            pid,
            tid,
            ts,
            dur,
            args,
        }
    }
}

impl<'a> RawArgs<'a> {
    /// The arguments in [`args_member`]'s order.
    fn from_slots(
        [correlation, device, stream, graph_id, stack, call_stack, process, seq, fwd_tid]: [Option<&'a [u8]>;
            ARGS],
    ) -> Self {
        RawArgs {
            correlation,
            device,
            stream,
            graph_id,
            stack,
            call_stack,
            process,
            seq,
            fwd_tid,
        }
    }
}

/// Reads the members of the event `b` in one pass, as [`members`] would: where each lies.
/// None for anything [`members`] would not read as it does here (it reads those itself).
fn spans(b: &[u8]) -> Option<Spans> {
    let mut s = Spans::default();
    // A second `args` would mix its members with the first's: read as `members` does.
    let mut twice = false;
    let end = object_at(b, 0, 0, &mut |key, walked, depth, vs, ve| {
        if depth == 0 {
            if let Some(i) = event_member(key) {
                if i == 7 {
                    twice |= s.ev[7].1 > 0;
                    s.args_read = walked;
                }
                s.ev[i] = At(vs as u32, ve as u32);
            }
        } else if let Some(i) = args_member(key) {
            s.args[i] = At(vs as u32, ve as u32);
        }
    });
    (end == Ok(Some(b.len())) && b.len() <= u32::MAX as usize && !twice).then_some(s)
}

/// Walks the object at `b[i]` (`depth` 0: an event; 1: its `args`), calling `f` with each
/// member's key, whether it was walked itself (an event's `args` object), its depth and where
/// its value lies. Ok(None): it runs past `b`; Err: not as [`members`] reads it.
fn object_at(
    b: &[u8],
    i: usize,
    depth: u8,
    f: &mut impl FnMut(&[u8], bool, u8, usize, usize),
) -> Result<Option<usize>, ()> {
    macro_rules! need {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    let ws = |mut i: usize| {
        while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
            i += 1;
        }
        i
    };
    if b.get(i) != Some(&b'{') {
        return Err(());
    }
    let mut i = ws(i + 1);
    if *need!(b.get(i)) == b'}' {
        return Ok(Some(i + 1));
    }
    loop {
        if *need!(b.get(i)) != b'"' {
            return Err(());
        }
        let ke = need!(super::jsonscan::string_end(b, i));
        let key = &b[i + 1..ke - 1];
        i = ws(ke);
        if *need!(b.get(i)) != b':' {
            return Err(());
        }
        i = ws(i + 1);
        let c = *need!(b.get(i));
        let (walked, ve) = if depth == 0 && c == b'{' && key == b"args" {
            (true, need!(object_at(b, i, 1, f)?))
        } else {
            (false, need!(value_end(b, i)?))
        };
        f(key, walked, depth, i, ve);
        i = ws(ve);
        match *need!(b.get(i)) {
            b',' => i = ws(i + 1),
            b'}' => return Ok(Some(i + 1)),
            _ => return Err(()),
        }
    }
}

/// The end of the value at `b[i]`, as the scanner's `value_end` finds it (None: past `b`).
#[inline]
fn value_end(b: &[u8], i: usize) -> Result<Option<usize>, ()> {
    use super::jsonscan::{End, Scanner};
    match b[i] {
        b'"' => Ok(super::jsonscan::string_end(b, i)),
        b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => Ok(b[i..]
            .iter()
            .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
            .map(|k| i + k)),
        _ => match Scanner::<std::io::Empty>::value_end(b, i) {
            Ok(End::At(e)) => Ok(Some(e)),
            Ok(End::NeedMore) => Ok(None),
            Err(_) => Err(()),
        },
    }
}

/// A run of whole events copied out of the splitter's buffer: bytes, each event's range and
/// offset in the trace, and where its members lie when the splitter read them.
struct Batch {
    bytes: Vec<u8>,
    events: Vec<(usize, usize, u64)>,
    spans: Vec<Option<Spans>>,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            bytes: Vec::with_capacity(2 << 20),
            events: Vec::new(),
            spans: Vec::new(),
        }
    }
}

/// What the splitter's thread hands over: runs of events, then the header it saw around them.
enum Piece {
    Events(Batch),
    Header(Header),
}

impl Builder {
    /// Reads one trace into the current file, returning its header. One thread splits the
    /// JSON into events, a second finds each event's members, and this one reads them into
    /// the store: the three parts of the work overlap.
    pub fn read(&mut self, r: impl Read + Send) -> anyhow::Result<Header> {
        let (tx, split) = std::sync::mpsc::sync_channel::<Result<Piece, String>>(2);
        let (read, rx) = std::sync::mpsc::sync_channel::<Result<Piece, String>>(2);
        let parsed: Result<Header, String> = std::thread::scope(|scope| {
            scope.spawn(move || {
                let mut batch = Batch::new();
                let mut header = Header::default();
                let res = Scanner::new(r).for_each_event_and_member(
                    |ev, at| {
                        let s = batch.bytes.len();
                        batch.bytes.extend_from_slice(ev);
                        batch.events.push((s, batch.bytes.len(), at));
                        if batch.bytes.len() >= 2 << 20 {
                            let full = std::mem::replace(&mut batch, Batch::new());
                            tx.send(Ok(Piece::Events(full)))
                                .map_err(|_| "stopped".to_string())?;
                        }
                        Ok(())
                    },
                    |k, v| header.member(k, v),
                );
                let _ = tx.send(Ok(Piece::Events(batch)));
                let _ = tx.send(match res {
                    Ok(_) => Ok(Piece::Header(header)),
                    Err(e) => Err(e.to_string()),
                });
            });
            // A second thread finds where each event's members lie, for this one's turn.
            scope.spawn(move || {
                for mut msg in split {
                    if let Ok(Piece::Events(b)) = &mut msg {
                        b.spans = b
                            .events
                            .iter()
                            .map(|&(s, e, _)| spans(&b.bytes[s..e]))
                            .collect();
                    }
                    if read.send(msg).is_err() {
                        break;
                    }
                }
            });
            let mut header = Header::default();
            for msg in rx {
                match msg? {
                    Piece::Events(batch) => {
                        for (i, &(s, e, at)) in batch.events.iter().enumerate() {
                            let ev = &batch.bytes[s..e];
                            match batch.spans.get(i).copied().flatten() {
                                Some(sp) => self.event_spans(ev, &sp),
                                None => self.event(ev),
                            }
                            .map_err(|m| format!("event at byte {at}: {m}"))?;
                        }
                    }
                    Piece::Header(h) => header = h,
                }
            }
            if !(0..=MAX_BASE_NS).contains(&header.base_ns) {
                return Err(format!(
                    "baseTimeNanoseconds {} is not a time since 1970",
                    header.base_ns
                ));
            }
            Ok(header)
        });
        parsed.map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// [`Builder::finish`], refusing a capture without GPU ops.
    pub fn finish_checked(self) -> anyhow::Result<Store> {
        let events = self.events;
        let store = self.finish();
        if store.total_ops == 0 {
            anyhow::bail!("{}", no_gpu_ops(events));
        }
        Ok(store)
    }
}

/// Why a trace without GPU ops is refused.
pub fn no_gpu_ops(events: u64) -> String {
    format!("no GPU ops (kernel, gpu_memcpy, gpu_memset) among {events} events")
}

/// Loads a Kineto trace from a reader into a new store.
pub fn load_reader(r: impl Read + Send, source: &str, budget: usize) -> anyhow::Result<Store> {
    let mut b = Builder::new(budget, source);
    let h = b.read(r)?;
    b.end_file(&h, None);
    b.finish_checked()
}

/// Loads a Kineto trace file; its rank is its header's, else the one its name gives
/// ([`rank_in_name`]).
pub fn load(path: &Path, budget: usize) -> anyhow::Result<Store> {
    let src = file_label(path);
    let mut b = Builder::new(budget, &src);
    let h = b.read(open_maybe_gz(path)?)?;
    b.end_file(&h, rank_in_name(&src));
    b.finish_checked()
}

/// A file's name, as labels and sources show it.
pub fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The rank a trace's file name gives, as distributed jobs name their ranks' traces:
/// `rank-3`, `rank_3` or `rank3` (any case) anywhere in the name.
pub fn rank_in_name(name: &str) -> Option<i32> {
    let lower = name.to_ascii_lowercase();
    lower.match_indices("rank").find_map(|(i, _)| {
        let rest = lower[i + 4..].trim_start_matches(['-', '_']);
        let digits: &str = &rest[..rest.bytes().take_while(u8::is_ascii_digit).count()];
        digits.parse().ok()
    })
}

/// The stream a GPU op's thread names (`"stream 7"`, Kineto's before mid-2021).
fn stream_of_tid(tid: Option<&[u8]>) -> Option<i64> {
    let t = text(tid)?.trim().trim_matches('"');
    t.strip_prefix("stream ")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_to_nanoseconds_exactly() {
        assert_eq!(us_to_ns("5109306718144.109"), Some(5_109_306_718_144_109));
        assert_eq!(us_to_ns("1.5"), Some(1500));
        assert_eq!(us_to_ns("12"), Some(12_000));
        assert_eq!(us_to_ns("0.0005"), Some(1));
        assert_eq!(us_to_ns("-2.25"), Some(-2250));
        assert_eq!(us_to_ns("1.5e3"), Some(1_500_000));
        assert_eq!(us_to_ns("\"7.000\""), Some(7000));
        assert_eq!(us_to_ns("abc"), None);
        assert_eq!(us_to_ns("1.2.3"), None);
        assert_eq!(us_to_ns("1e400"), None);
    }

    /// Numbers read from bytes read as the text readers read them, or are left to them.
    #[test]
    fn plain_numbers_read_as_text_does() {
        let cases = [
            "5109306718144.109",
            "1.5",
            "12",
            "0.0005",
            "-2.25",
            "1.",
            "-0",
            "007",
            "1.2345",
            "1.23449",
            "999999999999999",
            "9999999999999999",
            "-",
            "",
            "1e3",
            "+5",
            "1.2.3",
            "123456789012345678",
            "1234567890123456789",
            "-12.9999",
        ];
        for c in cases {
            if let Some(v) = us_to_ns_plain(c.as_bytes()) {
                assert_eq!(Some(v), us_to_ns(c), "{c}");
            }
            if let Some(v) = int_plain(c.as_bytes()) {
                assert_eq!(Some(v), int_of(Some(c.as_bytes())), "{c}");
            }
        }
        assert_eq!(
            us_to_ns_plain(b"5109306718144.109"),
            Some(5_109_306_718_144_109)
        );
        assert_eq!(int_plain(b"-42"), Some(-42));
    }

    #[test]
    fn ranks_from_file_names() {
        assert_eq!(rank_in_name("rank-0.json.gz"), Some(0));
        assert_eq!(rank_in_name("sampled_rank-1.json.gz"), Some(1));
        assert_eq!(rank_in_name("inference_rank_12.json.gz"), Some(12));
        assert_eq!(rank_in_name("Rank3.pt.trace.json"), Some(3));
        assert_eq!(rank_in_name("ranking_rank-4.json"), Some(4));
        assert_eq!(rank_in_name("worker0.1623143089861.pt.trace.json.gz"), None);
        assert_eq!(rank_in_name("rank.json"), None);
    }

    #[test]
    fn streams_from_old_thread_names() {
        assert_eq!(stream_of_tid(Some(b"\"stream 7\"")), Some(7));
        assert_eq!(stream_of_tid(Some(b"\"stream 7 user\"")), None);
        assert_eq!(stream_of_tid(Some(b"7")), None);
    }
}

//! Import of torch.profiler (Kineto) Chrome-trace JSON, plain or gzipped, streamed.
//!
//! What is kept: GPU ops (`kernel`, `gpu_memcpy`, `gpu_memset`), host API calls (`cuda_runtime`,
//! `cuda_driver`) and CPU spans (`python_function`, `cpu_op`, `user_annotation`), whose nesting
//! gives each API call its call stack; user annotations are also ranges (`collect::ranges`), and
//! `gpu_user_annotation`s GPU-side ones. Everything else is counted as skipped.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;

use super::jsonscan::Scanner;
use super::ranges::Range;
use super::store::{ApiCall, ApiKind, GpuOp, LaneKey, NameId, Ns, OpKind, Span, Store, FLAG_COMM};

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

#[derive(Default)]
struct RawArgs<'a> {
    correlation: Option<&'a [u8]>,
    device: Option<&'a [u8]>,
    stream: Option<&'a [u8]>,
    graph_id: Option<&'a [u8]>,
    stack: Option<&'a [u8]>,
    /// The profiled process of a GPU op (gaptop's exports, which may hold several).
    process: Option<&'a [u8]>,
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
    let t = text(v)?.trim().trim_matches('"');
    t.parse::<i64>()
        .ok()
        .or_else(|| t.parse::<f64>().ok().map(|f| f as i64))
}

struct RawSpan {
    start: Ns,
    end: Ns,
    name: NameId,
    /// python_function sorts before cpu_op when both start together.
    rank: u8,
}

/// Accumulates parsed events until [`Builder::finish`] links them into the store.
pub struct Builder {
    pub store: Store,
    spans: HashMap<u32, Vec<RawSpan>>,
    pub events: u64,
    /// GPU ops name their process (gaptop's exports): each pid is a process.
    per_process: bool,
    /// `gpu_user_annotation` ranges by (device, stream).
    gpu_annotations: HashMap<(u32, u32), Vec<Range>>,
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
            gpu_annotations: HashMap::new(),
        }
    }

    /// Handles one event object. Errors are for events that claim to be GPU ops, API calls or
    /// spans but cannot be read; anything else unknown is skipped and counted.
    pub fn event(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.events += 1;
        let mut ev = RawEvent::default();
        members(bytes, |k, v| match k {
            b"ph" => ev.ph = Some(v),
            b"cat" => ev.cat = Some(v),
            b"name" => ev.name = Some(v),
            b"pid" => ev.pid = Some(v),
            b"tid" => ev.tid = Some(v),
            b"ts" => ev.ts = Some(v),
            b"dur" => ev.dur = Some(v),
            b"args" => ev.args = Some(v),
            _ => {}
        })
        .map_err(|e| format!("unreadable event: {e}"))?;
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
                "M" => self.process_meta(&ev)?,
                "s" | "f" | "t" | "i" | "I" => {}
                _ => self.store.skip(&format!("phase {ph:?}")),
            }
            return Ok(());
        }
        let kind = match cat {
            "kernel" => Some(OpKind::Kernel),
            "gpu_memcpy" => Some(OpKind::Memcpy),
            "gpu_memset" => Some(OpKind::Memset),
            _ => None,
        };
        let is_api = matches!(cat, "cuda_runtime" | "cuda_driver");
        let span_rank = match cat {
            "python_function" => Some(0),
            "user_annotation" => Some(1),
            "cpu_op" => Some(2),
            _ => None,
        };
        if cat == "gpu_user_annotation" {
            return self.gpu_annotation(&ev);
        }
        if kind.is_none() && !is_api && span_rank.is_none() {
            if !matches!(cat, "ac2g" | "Trace" | "overhead" | "gaptop_gap") {
                self.store.skip(&format!("category {cat:?}"));
            }
            return Ok(());
        }
        let name_cow = match ev.name {
            Some(v) => string_of(v)?,
            None => Cow::Borrowed(""),
        };
        let name = name_cow.as_ref();
        let num = |v: Option<&[u8]>, what: &str| -> Result<Ns, String> {
            let t = text(v).ok_or_else(|| format!("{cat} {name:?}: missing {what}"))?;
            us_to_ns(t).ok_or_else(|| format!("{cat} {name:?}: bad {what} {t}"))
        };
        let ts = num(ev.ts, "ts")?;
        let dur = num(ev.dur, "dur")?;
        if dur < 0 {
            return Err(format!("{cat} {name:?}: negative duration {dur} ns"));
        }
        let mut args = RawArgs::default();
        if let Some(a) = ev.args {
            members(a, |k, v| match k {
                b"correlation" => args.correlation = Some(v),
                b"device" => args.device = Some(v),
                b"stream" => args.stream = Some(v),
                b"graph id" => args.graph_id = Some(v),
                b"stack" => args.stack = Some(v),
                b"process" => args.process = Some(v),
                _ => {}
            })
            .map_err(|e| format!("{cat} {name:?}: unreadable args: {e}"))?;
        }
        let tid_num = int_of(ev.tid);
        if let Some(kind) = kind {
            if dur > super::store::MAX_OP_NS {
                return Err(format!("{cat} {name:?}: implausible duration {dur} ns"));
            }
            let device = int_of(args.device)
                .or_else(|| int_of(ev.pid))
                .ok_or_else(|| format!("{cat} {name:?}: no device"))?;
            let stream = int_of(args.stream)
                .or(tid_num)
                .ok_or_else(|| format!("{cat} {name:?}: no stream"))?;
            let corr = int_of(args.correlation).unwrap_or(0);
            let nm = self.store.names.intern(name);
            let proc = match int_of(args.process) {
                Some(pid) => {
                    self.per_process = true;
                    self.proc_of(pid.clamp(0, u32::MAX as i64) as u32)
                }
                None => 0,
            };
            let lane = self.store.lane_id(LaneKey {
                proc,
                device: device.clamp(0, u32::MAX as i64) as u32,
                stream: stream.clamp(0, u32::MAX as i64) as u32,
            });
            let mut op = GpuOp::new(
                ts,
                ts + dur,
                kind,
                nm,
                corr.clamp(0, u32::MAX as i64) as u32,
            );
            op.graph = int_of(args.graph_id).unwrap_or(0).clamp(0, u32::MAX as i64) as u32;
            if is_comm_kernel(name) {
                op.flags |= FLAG_COMM;
            }
            self.store.push_op_unsorted(lane, op);
        } else {
            let tid = tid_num
                .ok_or_else(|| format!("{cat} {name:?}: non-numeric tid"))?
                .clamp(0, u32::MAX as i64) as u32;
            let nm = self.store.names.intern(name);
            if is_api {
                // In gaptop's exports (ops name their process) every pid is a process of its
                // own; in other traces the calls belong to the trace's one process.
                let pid = int_of(ev.pid).map(|p| p.clamp(0, u32::MAX as i64) as u32);
                let proc = match pid {
                    Some(pid) if self.per_process => self.proc_of(pid),
                    Some(pid) => {
                        if self.store.procs[0].pid == 0 {
                            self.store.procs[0].pid = pid;
                        }
                        0
                    }
                    None => 0,
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
                    for f in frames {
                        let id = self.store.names.intern(f);
                        stack = self.store.stacks.intern(stack, id);
                    }
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
                        kind: ApiKind::classify(name),
                    },
                );
            } else if let Some(rank) = span_rank {
                self.spans.entry(tid).or_default().push(RawSpan {
                    start: ts,
                    end: ts + dur,
                    name: nm,
                    rank,
                });
            }
        }
        Ok(())
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
            .entry(lane)
            .or_default()
            .push(Range::new(ts, ts + dur, nm, 0));
        Ok(())
    }

    /// The process of `pid`: the trace's first one until it has a pid, then one per pid.
    fn proc_of(&mut self, pid: u32) -> u32 {
        if let Some(i) = self.store.procs.iter().position(|p| p.pid == pid) {
            return i as u32;
        }
        if self.store.procs[0].pid == 0 {
            self.store.procs[0].pid = pid;
            return 0;
        }
        let label = self.store.source.clone();
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
        let mut proc_spans: rustc_hash::FxHashMap<u32, Vec<Span>> = Default::default();
        for ((device, stream), v) in self.gpu_annotations.drain() {
            st.procs[0].set_gpu_ranges(device, stream, v);
        }
        for (tid, mut raw) in self.spans.drain() {
            raw.sort_by(|a, b| {
                a.start
                    .cmp(&b.start)
                    .then(b.end.cmp(&a.end))
                    .then(a.rank.cmp(&b.rank))
            });
            st.procs[0].set_ranges(tid, user_annotations(&raw));
            let mut out: Vec<Span> = Vec::with_capacity(raw.len());
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
                    None => (u32::MAX, 0),
                };
                let stack = st.stacks.intern(pstack, r.name);
                out.push(Span {
                    start: r.start,
                    end: r.end,
                    stack,
                    parent,
                });
                open.push((out.len() - 1) as u32);
            }
            proc_spans.insert(tid, out);
        }
        st.procs[0].spans = proc_spans;
        let p = &mut st.procs[0];
        if !p.spans.is_empty() {
            let mut apis = p.take_apis();
            for a in apis.iter_mut().filter(|a| a.stack == 0) {
                a.stack = p.span_stack_at(a.tid, a.start);
            }
            p.put_apis(apis);
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

/// NCCL and other collective kernels are communication, not compute.
pub fn is_comm_kernel(name: &str) -> bool {
    name.starts_with("ncclKernel")
        || name.starts_with("ncclDevKernel")
        || name.contains("nccl")
        || name.starts_with("cross_device_reduce")
}

/// Opens a file, gunzipping when it starts with the gzip magic.
pub fn open_maybe_gz(path: &Path) -> anyhow::Result<Box<dyn Read + Send>> {
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

/// A run of whole events copied out of the splitter's buffer: bytes and each event's range.
struct Batch {
    bytes: Vec<u8>,
    events: Vec<(usize, usize, u64)>,
}

/// Loads a Kineto trace from a reader into a new store. One thread splits the JSON into
/// events while this one parses them, so the two halves of the work overlap.
pub fn load_reader(r: impl Read + Send, source: &str, budget: usize) -> anyhow::Result<Store> {
    let mut b = Builder::new(budget, source);
    let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Batch, String>>(2);
    let parsed: Result<(), String> = std::thread::scope(|scope| {
        scope.spawn(move || {
            let mut batch = Batch {
                bytes: Vec::with_capacity(2 << 20),
                events: Vec::new(),
            };
            let res = Scanner::new(r).for_each_event(|ev, at| {
                let s = batch.bytes.len();
                batch.bytes.extend_from_slice(ev);
                batch.events.push((s, batch.bytes.len(), at));
                if batch.bytes.len() >= 2 << 20 {
                    let full = std::mem::replace(
                        &mut batch,
                        Batch {
                            bytes: Vec::with_capacity(2 << 20),
                            events: Vec::new(),
                        },
                    );
                    tx.send(Ok(full)).map_err(|_| "stopped".to_string())?;
                }
                Ok(())
            });
            let _ = tx.send(Ok(batch));
            if let Err(e) = res {
                let _ = tx.send(Err(e.to_string()));
            }
        });
        for msg in rx {
            let batch = msg?;
            for &(s, e, at) in &batch.events {
                b.event(&batch.bytes[s..e])
                    .map_err(|m| format!("event at byte {at}: {m}"))?;
            }
        }
        Ok(())
    });
    parsed.map_err(|e| anyhow::anyhow!("{e}"))?;
    let events = b.events;
    let store = b.finish();
    if store.total_ops == 0 {
        anyhow::bail!("no GPU ops (kernel, gpu_memcpy, gpu_memset) among {events} events");
    }
    Ok(store)
}

pub fn load(path: &Path, budget: usize) -> anyhow::Result<Store> {
    let src = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    load_reader(open_maybe_gz(path)?, &src, budget)
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

    #[test]
    fn comm_kernels() {
        assert!(is_comm_kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
        ));
        assert!(!is_comm_kernel(
            "void at::native::vectorized_elementwise_kernel"
        ));
    }
}

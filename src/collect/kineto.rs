//! Import of torch.profiler (Kineto) Chrome-trace JSON, plain or gzipped, streamed.
//!
//! What is kept: GPU ops (`kernel`, `gpu_memcpy`, `gpu_memset`), host API calls (`cuda_runtime`,
//! `cuda_driver`) and CPU spans (`python_function`, `cpu_op`, `user_annotation`), whose nesting
//! gives each API call its call stack. Everything else is counted as skipped.

use std::borrow::Cow;
use std::collections::HashMap;
use std::io::{BufReader, Read};
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::jsonscan::Scanner;
use super::store::{ApiCall, ApiKind, GpuOp, LaneKey, NameId, Ns, OpKind, Span, Store, FLAG_COMM};

#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    pid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tid: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ts: Option<&'a RawValue>,
    #[serde(borrow, default)]
    dur: Option<&'a RawValue>,
    #[serde(borrow, default)]
    args: Option<RawArgs<'a>>,
}

#[derive(Deserialize, Default)]
struct RawArgs<'a> {
    #[serde(borrow, default)]
    correlation: Option<&'a RawValue>,
    #[serde(borrow, default)]
    device: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "graph id")]
    graph_id: Option<&'a RawValue>,
    /// A launch's stack, outermost first (gaptop's own exports carry it).
    #[serde(borrow, default)]
    stack: Option<Vec<Cow<'a, str>>>,
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

fn int_of(v: Option<&RawValue>) -> Option<i64> {
    let t = v?.get().trim().trim_matches('"');
    t.parse::<i64>()
        .ok()
        .or_else(|| t.parse::<f64>().ok().map(|f| f as i64))
}

struct PendingApi {
    api: ApiCall,
    /// The stack came with the event (a gaptop export); keep it.
    explicit: bool,
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
    apis: Vec<PendingApi>,
    spans: HashMap<u32, Vec<RawSpan>>,
    pub events: u64,
}

impl Builder {
    pub fn new(budget: usize, source: &str) -> Self {
        let mut store = Store::new(budget);
        store.source = source.to_string();
        store.add_process(0, -1, source);
        Builder {
            store,
            apis: Vec::new(),
            spans: HashMap::new(),
            events: 0,
        }
    }

    /// Handles one event object. Errors are for events that claim to be GPU ops, API calls or
    /// spans but cannot be read; anything else unknown is skipped and counted.
    pub fn event(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.events += 1;
        let ev: RawEvent = serde_json::from_slice(bytes).map_err(|e| {
            let e = e.to_string();
            format!("unreadable event: {e}")
        })?;
        let ph = ev.ph.as_deref().unwrap_or("");
        let cat = ev.cat.as_deref().unwrap_or("");
        if ph != "X" {
            match ph {
                "s" | "f" | "t" => {}
                "M" | "i" | "I" => {}
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
        if kind.is_none() && !is_api && span_rank.is_none() {
            if !matches!(
                cat,
                "ac2g" | "Trace" | "overhead" | "gpu_user_annotation" | "gaptop_gap"
            ) {
                self.store.skip(&format!("category {cat:?}"));
            }
            return Ok(());
        }
        let name = ev.name.as_deref().unwrap_or("");
        let ts = ev
            .ts
            .map(|v| us_to_ns(v.get()).ok_or_else(|| format!("{cat} {name:?}: bad ts {}", v.get())))
            .transpose()?
            .ok_or_else(|| format!("{cat} {name:?}: missing ts"))?;
        let dur = ev
            .dur
            .map(|v| {
                us_to_ns(v.get()).ok_or_else(|| format!("{cat} {name:?}: bad dur {}", v.get()))
            })
            .transpose()?
            .ok_or_else(|| format!("{cat} {name:?}: missing dur"))?;
        if dur < 0 {
            return Err(format!("{cat} {name:?}: negative duration {dur} ns"));
        }
        let args = ev.args.unwrap_or_default();
        let tid_num = int_of(ev.tid);
        if let Some(kind) = kind {
            let device = int_of(args.device)
                .or_else(|| int_of(ev.pid))
                .ok_or_else(|| format!("{cat} {name:?}: no device"))?;
            let stream = int_of(args.stream)
                .or(tid_num)
                .ok_or_else(|| format!("{cat} {name:?}: no stream"))?;
            let corr = int_of(args.correlation).unwrap_or(0);
            let nm = self.store.names.intern(name);
            let lane = self.store.lane_id(LaneKey {
                proc: 0,
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
                if self.store.procs[0].pid == 0 {
                    if let Some(pid) = int_of(ev.pid) {
                        self.store.procs[0].pid = pid.clamp(0, u32::MAX as i64) as u32;
                    }
                }
                let corr = int_of(args.correlation).unwrap_or(0);
                let mut stack = 0;
                if let Some(frames) = &args.stack {
                    for f in frames {
                        let id = self.store.names.intern(f);
                        stack = self.store.stacks.intern(stack, id);
                    }
                }
                self.apis.push(PendingApi {
                    api: ApiCall {
                        start: ts,
                        end: ts + dur,
                        corr: corr.clamp(0, u32::MAX as i64) as u32,
                        tid,
                        name: nm,
                        stack,
                        kind: ApiKind::classify(name),
                    },
                    explicit: args.stack.is_some(),
                });
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

    /// Builds span nesting and stacks, attaches a stack to every API call, sorts lanes.
    pub fn finish(mut self) -> Store {
        let st = &mut self.store;
        let mut proc_spans: HashMap<u32, Vec<Span>> = HashMap::new();
        for (tid, mut raw) in self.spans.drain() {
            raw.sort_by(|a, b| {
                a.start
                    .cmp(&b.start)
                    .then(b.end.cmp(&a.end))
                    .then(a.rank.cmp(&b.rank))
            });
            let mut out: Vec<Span> = Vec::with_capacity(raw.len());
            let mut open: Vec<u32> = Vec::new();
            for r in raw {
                while let Some(&top) = open.last() {
                    let t = &out[top as usize];
                    if t.end >= r.end
                        && t.start <= r.start
                        && !(t.end == r.start && r.end > r.start)
                    {
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
        self.apis.sort_by_key(|p| (p.api.start, p.api.corr));
        for p in self.apis {
            let mut api = p.api;
            if !p.explicit {
                api.stack = st.procs[0].span_stack_at(api.tid, api.start);
            }
            st.add_api(0, api);
        }
        st.finish_bulk();
        self.store
    }
}

/// NCCL and other collective kernels are communication, not compute.
pub fn is_comm_kernel(name: &str) -> bool {
    name.starts_with("ncclKernel")
        || name.starts_with("ncclDevKernel")
        || name.contains("nccl")
        || name.starts_with("cross_device_reduce")
}

/// Opens a file, gunzipping when it starts with the gzip magic.
pub fn open_maybe_gz(path: &Path) -> anyhow::Result<Box<dyn Read>> {
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

/// Loads a Kineto trace from a reader into a new store.
pub fn load_reader(r: impl Read, source: &str, budget: usize) -> anyhow::Result<Store> {
    let mut b = Builder::new(budget, source);
    Scanner::new(r)
        .for_each_event(|bytes, _| b.event(bytes))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
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

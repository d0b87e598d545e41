//! What one event adds to the builder: a GPU op, an API call or a CPU span, a GPU-side
//! annotation, or a gaptop export's metadata; anything else is skipped and counted. Errors
//! are for events that claim to be one of those but cannot be read.

use std::borrow::Cow;

use super::builder::{Builder, Named, RawSpan};
use super::members::{
    event_member, members, read_args, string_of, NameText, RawArgs, RawEvent, Spans,
};
use super::numbers::{int_of, stream_of_tid, text, us_to_ns, us_to_ns_plain};
use crate::frames::is_comm_kernel;
use crate::model::plausible::{self, What};
use crate::model::ranges::Range;
use crate::model::records::{ApiCall, ApiKind, GpuOp, LaneKey, Ns, OpKind, StackId, FLAG_COMM};

impl Builder {
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
    pub(super) fn event_spans(&mut self, bytes: &[u8], s: &Spans) -> Result<(), String> {
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
            us_to_ns(t)
                .or_else(|| far_ns(t))
                .ok_or_else(|| format!("{cat} {name:?}: bad {what} {t}"))
        };
        let ts = num(ev.ts, "ts")?;
        let dur = num(ev.dur, "dur")?;
        // A time too large to hold, or a negative duration, is a number all the same: the
        // record is dropped as implausible (counted and named), not the trace refused.
        let what = match (kind, is_api) {
            (Some(_), _) => What::GpuOp,
            (None, true) => What::ApiCall,
            (None, false) => What::CpuSpan,
        };
        if let Some(v) = plausible::shape(what, ts, ts.saturating_add(dur)) {
            if kind.is_none() {
                self.store.drop_implausible(what, v, named.id);
                return Ok(());
            }
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
                    seq: crate::sources::fwdbwd::Seq {
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
            let nm = self.store.names.intern(&name);
            let v = plausible::Verdict {
                why: plausible::Why::EndBeforeStart,
                at: ts,
                off: dur,
            };
            self.store.drop_implausible(What::Range, v, nm);
            return Ok(());
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
        let (mut label, mut rank, mut unaligned) = (None, None, false);
        let read = members(args, |k, v| match k {
            b"gaptop_label" => label = Some(v),
            b"gaptop_rank" => rank = int_of(Some(v)),
            b"gaptop_unaligned" => unaligned = v == b"true",
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
            if unaligned && !self.store.unaligned.contains(&p.rank) {
                self.store.unaligned.push(p.rank);
            }
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
}

/// A time in µs that parses as a number but is too large for ns in an i64 (`1e18`): held as
/// the farthest time, which the plausibility rules then drop. None for what is no number.
fn far_ns(t: &str) -> Option<Ns> {
    let v: f64 = t.trim().trim_matches('"').parse().ok()?;
    v.is_finite()
        .then_some(if v < 0.0 { -Ns::MAX } else { Ns::MAX })
}

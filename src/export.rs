//! Export of a time window as Chrome Trace Event JSON (Perfetto and chrome://tracing open it):
//! ops on device/stream tracks, launch calls on CPU thread tracks with their stacks, flow arrows
//! from each launch to its op, the gaps on their own track (each with its cause, launch stack
//! and the op it ends before), and a top-level `gaptop` object with the window, the idle
//! breakdown and the top stacks. `gaptop open` reads it back, gzipped or not.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use gaptop_core::analysis::gaps::{self, Config};

use gaptop_core::model::records::{ApiCall, Ns, OpKind};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;

mod out;
use out::Counted;
pub use out::{
    bytes, export_path, large, opens_with, target, Estimate, CHROME_TRACING_BYTES,
    PERFETTO_UI_BYTES,
};

/// Microseconds with exactly three decimals, so nanoseconds survive the round trip.
fn us(ns: Ns) -> Box<RawValue> {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    RawValue::from_string(format!("{sign}{}.{:03}", a / 1000, a % 1000)).expect("a JSON number")
}

/// One trace event; fields left `None` are not written.
#[derive(Serialize)]
struct Ev<'a> {
    ph: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    cat: Option<&'a str>,
    name: &'a str,
    pid: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ts: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    bp: Option<&'a str>,
    #[serde(skip_serializing_if = "Value::is_null")]
    args: Value,
}

impl<'a> Ev<'a> {
    fn x(
        cat: &'a str,
        name: &'a str,
        pid: Value,
        tid: Value,
        ts: Ns,
        dur: Ns,
        args: Value,
    ) -> Self {
        Ev {
            ph: "X",
            cat: Some(cat),
            name,
            pid,
            tid: Some(tid),
            ts: Some(us(ts)),
            dur: Some(us(dur)),
            id: None,
            bp: None,
            args,
        }
    }
    /// A host API call on its process's thread track, with its stack.
    fn api(store: &'a Store, pid: u32, a: &ApiCall) -> Self {
        Ev::x(
            "cuda_runtime",
            store.names.get(a.name),
            json!(pid),
            json!(a.tid),
            a.start,
            a.end - a.start,
            json!({"correlation": a.corr, "stack": store.frame_strings(a.stack)}),
        )
    }
    /// A metadata event.
    fn meta(name: &'a str, pid: Value, args: Value) -> Self {
        Ev {
            ph: "M",
            cat: None,
            name,
            pid,
            tid: None,
            ts: None,
            dur: None,
            id: None,
            bp: None,
            args,
        }
    }
    fn flow(ph: &'a str, id: u32, pid: Value, tid: Value, ts: Ns) -> Self {
        Ev {
            ph,
            cat: Some("ac2g"),
            name: "ac2g",
            pid,
            tid: Some(tid),
            ts: Some(us(ts)),
            dur: None,
            id: Some(id),
            bp: (ph == "f").then_some("e"),
            args: Value::Null,
        }
    }
}

/// Counts of what an export wrote.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    pub ops: u64,
    pub launches: u64,
    pub gaps: u64,
    /// Synchronization and wait calls.
    pub blocking: u64,
    /// CPU spans (python_function and operator events of torch.profiler traces).
    pub spans: u64,
    /// The JSON written, before any gzip.
    pub json_bytes: u64,
}

impl Written {
    /// What the UI says of a finished export: how big and where, so that a window of millions
    /// of ops (a hundred megabytes) is not written without a word:
    /// `exported 108 MB to ./gaptop-demo-gpt2-rec-1712345678.json.gz (1234567 ops)`.
    pub fn said(&self, path: &Path) -> String {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let json = if path.extension().is_some_and(|e| e == "gz") {
            format!(", {} of JSON", bytes(self.json_bytes))
        } else {
            String::new()
        };
        format!(
            "exported {} to {} ({}{json}); {}",
            bytes(size),
            path.display(),
            gaptop_core::units::count(self.ops, "op"),
            opens_with(self.json_bytes)
        )
    }
}

/// How many ops of the window are written to measure what an op takes.
const SAMPLE_OPS: u64 = 2_000;

/// What exporting [lo, hi) would write: the whole window written to nowhere when it holds at
/// most [`SAMPLE_OPS`] ops, else its first part of about that many ops, scaled by the ops.
pub fn estimate(store: &Store, lo: Ns, hi: Ns, cfg: &Config) -> Estimate {
    let count = |a: Ns, b: Ns| -> u64 {
        store
            .lanes
            .iter()
            .map(|l| l.lower_bound(b).saturating_sub(l.lower_bound(a)) as u64)
            .sum()
    };
    let ops = count(lo, hi);
    let mut part_hi = hi;
    if ops > SAMPLE_OPS {
        // The first part of the window holding about SAMPLE_OPS ops, by bisection.
        let (mut a, mut b) = (lo, hi);
        while b - a > 1 && count(lo, b) > SAMPLE_OPS * 2 {
            let m = a + (b - a) / 2;
            if count(lo, m) >= SAMPLE_OPS {
                b = m;
            } else {
                a = m;
            }
        }
        part_hi = b;
    }
    let part = count(lo, part_hi).max(1);
    let sink = Counted(std::io::sink(), 0);
    let mut z = flate2::write::GzEncoder::new(sink, flate2::Compression::fast());
    let json = write(store, lo, part_hi, cfg, &mut z)
        .map(|w| w.json_bytes)
        .unwrap_or(0);
    let gz = z.finish().map(|c| c.1).unwrap_or(0);
    let scale = |n: u64| (n as f64 * ops.max(1) as f64 / part as f64) as u64;
    Estimate {
        ops,
        json_bytes: scale(json),
        gz_bytes: scale(gz),
    }
}

/// Writes the window [lo, hi) of the store.
pub fn write(
    store: &Store,
    lo: Ns,
    hi: Ns,
    cfg: &Config,
    out: impl Write,
) -> anyhow::Result<Written> {
    write_copy(&store.window_copy(lo, hi), lo, hi, cfg, out)
}

/// Writes the window [lo, hi) from `copy`, a [`Store::window_copy`] of it: every op and call
/// it holds (the window's, and the neighbours its edge gaps need), the CPU spans that overlap
/// the window.
fn write_copy(
    store: &Store,
    lo: Ns,
    hi: Ns,
    cfg: &Config,
    out: impl Write,
) -> anyhow::Result<Written> {
    let mut out = std::io::BufWriter::new(Counted(out, 0));
    let mut n = Written::default();
    let (_, report) = crate::report::build(
        store,
        {
            let origin = store.origin();
            Window::new(lo - origin, hi - origin)
        },
        cfg,
        0,
        None,
    );
    writeln!(out, "{{\"traceEvents\": [")?;
    let mut first = true;
    let mut emit = |out: &mut std::io::BufWriter<_>, v: Ev| -> anyhow::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &v)?;
        Ok(())
    };
    let mut devices = std::collections::BTreeSet::new();
    for (li, lane) in store.lanes.iter().enumerate() {
        let k = lane.key;
        let proc = &store.procs[k.proc as usize];
        devices.insert(k.device);
        // The window's ops, and on each side the op next to them: the gaps at the window's
        // edges lie between those and the window's first and last ops, and the re-opened
        // export must find them again.
        for op in lane.iter() {
            let cat = match op.kind {
                OpKind::Kernel => "kernel",
                OpKind::Memcpy => "gpu_memcpy",
                OpKind::Memset => "gpu_memset",
            };
            emit(
                &mut out,
                Ev::x(
                    cat,
                    store.names.get(op.name),
                    json!(k.device),
                    json!(k.stream),
                    op.start,
                    op.dur(),
                    json!({"correlation": op.corr, "device": k.device, "stream": k.stream,
                       "graph id": op.graph, "process": proc.pid}),
                ),
            )?;
            n.ops += 1;
            if let Some(api) = proc.api_by_corr(op.corr) {
                emit(&mut out, Ev::api(store, proc.pid, &api))?;
                emit(
                    &mut out,
                    Ev::flow("s", api.corr, json!(proc.pid), json!(api.tid), api.start),
                )?;
                emit(
                    &mut out,
                    Ev::flow("f", api.corr, json!(k.device), json!(k.stream), op.start),
                )?;
                n.launches += 1;
            }
        }
        let mut gaps = Vec::new();
        gaps::lane_gaps(store, li, Window::new(lo, hi), cfg, |g| gaps.push(g));
        for g in gaps {
            // The launch stack and call; the op after the gap is named short here (its event
            // on the GPU track has the full name), since long template names repeated on
            // every gap were a third of an export.
            let mut frames = store.frame_strings(store.numbered_stack(g.lane, g.next, g.stack));
            if g.api != 0 {
                frames.push(store.names.get(g.api).to_string());
            }
            let before = gaptop_core::frames::short_kernel(store.names.get(g.op_name));
            emit(
                &mut out,
                Ev::x(
                    "gaptop_gap",
                    g.category.as_str(),
                    json!("gaptop gaps"),
                    json!(store.lane_label(li)),
                    g.start,
                    g.dur(),
                    json!({"cause": g.category.as_str(), "reason": g.reason.as_str(),
                       "before": before, "correlation": store.lanes[li].op(g.next).corr,
                       "frames": frames, "cpu_frames": store.frame_strings(g.cpu_stack)}),
                ),
            )?;
            n.gaps += 1;
        }
    }
    // Synchronizations and waits: no op carries them, and they explain gaps (reason `sync`,
    // `event_wait`), so the re-opened export must have them too.
    for proc in &store.procs {
        for a in &proc.blocking {
            emit(&mut out, Ev::api(store, proc.pid, a))?;
            n.blocking += 1;
        }
    }
    // CPU spans (traces from torch.profiler have them): what each thread was doing, which the
    // re-opened export needs to say what the CPU did during a gap.
    // NVTX ranges and user annotations go as user annotations (spans that are ranges too, as
    // a torch.profiler trace's annotations are, once), so that the re-opened export has them.
    // Backward ops keep their forward ops (`sources::fwdbwd`) by a sequence number each.
    let mut seq: std::collections::HashMap<gaptop_core::model::records::StackId, Value> =
        Default::default();
    let mut fwd: Vec<_> = store.forward_of.iter().collect();
    fwd.sort_unstable();
    for (&bwd, &f) in fwd {
        let n = seq.len() as i64 + 1;
        let n = match seq.get(&f) {
            Some(v) => v["Sequence number"].as_i64().unwrap_or(n),
            None => n,
        };
        seq.insert(f, json!({ "Sequence number": n }));
        seq.insert(bwd, json!({ "Sequence number": n, "Fwd thread id": 1 }));
    }
    for proc in &store.procs {
        let mut ranges = window_ranges(proc, lo, hi);
        let mut tids: Vec<_> = proc.spans.keys().copied().collect();
        tids.sort_unstable();
        for tid in tids {
            let spans = &proc.spans[&tid];
            for sp in spans.iter().filter(|sp| sp.end > lo && sp.start < hi) {
                let name = store.stacks.node(sp.stack).frame;
                let cat = if ranges.remove(&(tid, sp.start, sp.end, name)) {
                    "user_annotation"
                } else {
                    "python_function"
                };
                emit(
                    &mut out,
                    Ev::x(
                        cat,
                        store.names.get(name),
                        json!(proc.pid),
                        json!(tid),
                        sp.start,
                        sp.end - sp.start,
                        seq.get(&sp.stack).cloned().unwrap_or(Value::Null),
                    ),
                )?;
                n.spans += 1;
            }
        }
        let mut left: Vec<_> = ranges.into_iter().collect();
        left.sort_unstable();
        for (tid, start, end, name) in left {
            emit(
                &mut out,
                Ev::x(
                    "user_annotation",
                    store.names.get(name),
                    json!(proc.pid),
                    json!(tid),
                    start,
                    end - start,
                    Value::Null,
                ),
            )?;
            n.spans += 1;
        }
    }
    // Each profiled process's name as Perfetto shows it, with its label and rank for
    // `gaptop open` (torch.profiler names them all "python3").
    for proc in &store.procs {
        let shown = if proc.rank >= 0 {
            format!("rank {}: {}", proc.rank, proc.label)
        } else {
            proc.label.clone()
        };
        let rank = (proc.rank >= 0).then_some(proc.rank);
        emit(
            &mut out,
            Ev::meta(
                "process_name",
                json!(proc.pid),
                match rank.filter(|r| store.unaligned.contains(r)) {
                    // Its clock could not be aligned with the others' (said again on opening).
                    Some(_) => json!({"name": shown, "gaptop_label": proc.label,
                        "gaptop_rank": rank, "gaptop_unaligned": true}),
                    None => json!({"name": shown, "gaptop_label": proc.label, "gaptop_rank": rank}),
                },
            ),
        )?;
    }
    // The window itself: `gaptop open` shows and analyses exactly it, not its ops' span.
    emit(
        &mut out,
        Ev::meta(
            "gaptop_window",
            json!("gaptop gaps"),
            json!({"from_ns": lo, "to_ns": hi, "origin_ns": store.origin()}),
        ),
    )?;
    for d in devices {
        emit(
            &mut out,
            Ev::meta(
                "process_name",
                json!(d),
                json!({"name": format!("GPU {d}")}),
            ),
        )?;
    }
    writeln!(out, "\n],")?;
    let meta = json!({
        "window": {"from_ns": lo, "to_ns": hi, "origin_ns": report.origin_ns},
        "gpu_ops": report.gpu_ops,
        "device_idle_ns": report.device_idle_ns,
        "idle": report.idle,
        "top_stacks": report.top_stacks,
        "source": store.source,
    });
    write!(out, "\"displayTimeUnit\": \"ns\",\n\"gaptop\": ")?;
    serde_json::to_writer_pretty(&mut out, &meta)?;
    writeln!(out, "\n}}")?;
    out.flush()?;
    n.json_bytes = out.get_ref().1;
    Ok(n)
}

/// A writer and how much went through it.
/// Writes the window [lo, hi) to `path`, gzipped when its name ends in `.gz`.
pub fn write_file(
    store: &Store,
    lo: Ns,
    hi: Ns,
    cfg: &Config,
    path: &Path,
) -> anyhow::Result<Written> {
    copy_to_file(&store.window_copy(lo, hi), lo, hi, cfg, path)
}

fn copy_to_file(
    copy: &Store,
    lo: Ns,
    hi: Ns,
    cfg: &Config,
    path: &Path,
) -> anyhow::Result<Written> {
    let gz = path.extension().is_some_and(|e| e == "gz");
    create_then(path, |f| {
        if gz {
            let mut z = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
            let n = write_copy(copy, lo, hi, cfg, &mut z)?;
            z.finish()?;
            Ok(n)
        } else {
            write_copy(copy, lo, hi, cfg, f)
        }
    })
}

/// Writes `path` with `write`, through a temporary file renamed over it once complete
/// ([`gaptop_core::files::Output`]): a file cut short (a full disk) would pass for a broken trace,
/// and what the path held before (a file the user keeps) stays when writing fails.
fn create_then<T>(
    path: &Path,
    write: impl FnOnce(std::fs::File) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let out = gaptop_core::files::Output::create(path)?;
    let r = write(out.writer()?).with_context(|| format!("{}: cannot write", path.display()))?;
    out.commit()?;
    Ok(r)
}

/// An export being written on its own thread, from a copy of the window taken when it was
/// asked for: a window of millions of ops takes seconds to write, and the UI (and, live, the
/// program's data) must not wait for it.
pub struct ExportJob {
    pub path: PathBuf,
    /// Its estimated size, said while it is written, where it is large.
    pub large: Option<String>,
    done: std::sync::mpsc::Receiver<anyhow::Result<Written>>,
}

impl ExportJob {
    /// The outcome once the file is complete (or failed); None while it is being written.
    pub fn poll(&self) -> Option<anyhow::Result<Written>> {
        match self.done.try_recv() {
            Ok(r) => Some(r),
            Err(std::sync::mpsc::TryRecvError::Empty) => None,
            Err(std::sync::mpsc::TryRecvError::Disconnected) => Some(Err(thread_stopped())),
        }
    }

    /// What the UI says while it is written: `exporting ~300 MB of JSON (…) to PATH`.
    pub fn doing(&self) -> String {
        match &self.large {
            Some(l) => format!("exporting {l} to {}", self.path.display()),
            None => format!("exporting to {}", self.path.display()),
        }
    }

    /// Waits for the file to be complete.
    pub fn wait(self) -> anyhow::Result<Written> {
        self.done.recv().unwrap_or_else(|_| Err(thread_stopped()))
    }
}

/// What an export whose thread ended without a word (it panicked) says.
fn thread_stopped() -> anyhow::Error {
    anyhow::anyhow!("the export thread stopped")
}

/// What an export of the UI's window needs: the store (shared until the window is copied out
/// of it), the window, and where to write.
pub struct ExportRequest {
    pub store: std::sync::Arc<Store>,
    pub lo: Ns,
    pub hi: Ns,
    pub cfg: Config,
    /// A file, or a folder for a new name in it ([`target`]).
    pub to: PathBuf,
    /// What it is estimated to write, where that is large ([`large`]).
    pub large: Option<String>,
}

/// Starts writing the window to the request's file, or a new file in its folder.
///
/// Nothing is copied on the caller's thread: the export thread shares the store, copies the
/// window out of it (seconds for ten million ops) and lets go of it before writing. Meanwhile
/// the UI keeps drawing and answering keys; new live data waits until the copy is made.
pub fn start(req: ExportRequest) -> anyhow::Result<ExportJob> {
    let ExportRequest {
        store,
        lo,
        hi,
        cfg,
        to,
        large,
    } = req;
    let path = target(&to, &store.source);
    let (tx, done) = std::sync::mpsc::channel();
    let p = path.clone();
    std::thread::Builder::new()
        .name("gaptop-export".into())
        .spawn(move || {
            let copy = store.window_copy(lo, hi);
            drop(store);
            let _ = tx.send(copy_to_file(&copy, lo, hi, &cfg, &p));
        })
        .context("cannot start the export thread")?;
    Ok(ExportJob { path, large, done })
}

/// The CPU-side ranges of a process that overlap `[lo, hi)`, by thread, extent and name.
fn window_ranges(
    proc: &gaptop_core::model::process::Process,
    lo: Ns,
    hi: Ns,
) -> std::collections::HashSet<(u32, Ns, Ns, gaptop_core::model::records::NameId)> {
    proc.ranges
        .iter()
        .flat_map(|(&tid, v)| {
            gaptop_core::model::process::Process::overlapping(v, lo, hi)
                .map(move |(_, r)| (tid, r.start, r.end, r.name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{create_then, out::sanitize};

    #[test]
    fn sizes_read_to_three_figures() {
        use super::bytes;
        let cases = [
            (0, "0 B"),
            (999, "999 B"),
            (1_000, "1.00 kB"),
            (45_300, "45.3 kB"),
            (108_000_000, "108 MB"),
            (1_214_000_000, "1.21 GB"),
            (999_600, "1.00 MB"),
        ];
        for (n, said) in cases {
            assert_eq!(bytes(n), said, "{n}");
        }
    }

    #[test]
    fn a_failed_write_leaves_no_file_it_created_and_keeps_what_was_there() {
        use std::io::Write;
        let dir = std::env::temp_dir().join(format!("gaptop-create-then-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fail = |mut f: std::fs::File| -> anyhow::Result<()> {
            f.write_all(b"{\"traceEvents\": [")?;
            anyhow::bail!("No space left on device")
        };
        let fresh = dir.join("fresh.json");
        let e = create_then(&fresh, fail).unwrap_err();
        assert!(
            format!("{e:#}").contains("cannot write: No space left"),
            "{e:#}"
        );
        assert!(!fresh.exists(), "a half-written export was left");
        // A file the user named that was there before stays as it was.
        let kept = dir.join("kept.json");
        std::fs::write(&kept, b"old").unwrap();
        assert!(create_then(&kept, fail).is_err());
        assert_eq!(std::fs::read(&kept).unwrap(), b"old");
        // So does whatever a link named: the link and its target.
        let target = dir.join("target.json");
        std::fs::write(&target, b"kept").unwrap();
        let link = dir.join("link.json");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(create_then(&link, fail).is_err());
        assert!(link.symlink_metadata().is_ok());
        assert_eq!(std::fs::read(&target).unwrap(), b"kept");
        // Success replaces the file; no temporary file is left either way.
        create_then(&kept, |mut f| Ok(f.write_all(b"{}")?)).unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), b"{}");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["kept.json", "link.json", "target.json"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn export_names_are_plain_and_short() {
        assert_eq!(sanitize("demo (gpt2.rec)"), "demo-gpt2-rec");
        assert_eq!(sanitize("/tmp/a b/trace.json"), "tmp-a-b-trace-json");
        assert_eq!(sanitize("  ..  "), "trace");
        assert_eq!(sanitize(&"x".repeat(100)).len(), 40);
    }
}

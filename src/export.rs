//! Export of a time window as Chrome Trace Event JSON (Perfetto and chrome://tracing open it):
//! ops on device/stream tracks, launch calls on CPU thread tracks with their stacks, flow arrows
//! from each launch to its op, the gaps on their own track, and a top-level `gaptop` object with
//! the window, the idle breakdown and the top stacks. `gaptop open` reads it back.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::app::App;
use crate::collect::analysis::{self, Config, Window};
use crate::collect::store::{Ns, OpKind, Store};

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
}

/// Writes the window [lo, hi) of the store.
pub fn write(
    store: &Store,
    lo: Ns,
    hi: Ns,
    cfg: &Config,
    out: impl Write,
) -> anyhow::Result<Written> {
    let mut out = std::io::BufWriter::new(out);
    let mut n = Written::default();
    let (_, report) = crate::report::build(
        store,
        {
            let origin = store.span().map(|s| s.0).unwrap_or(0);
            Window::new(lo - origin, hi - origin)
        },
        cfg,
        0,
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
        let a = lane.lower_bound(lo).saturating_sub(1);
        let b = lane.lower_bound(hi);
        for op in lane.ops.range(a..b) {
            if op.end < lo || op.start >= hi {
                continue;
            }
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
                emit(
                    &mut out,
                    Ev::x(
                        "cuda_runtime",
                        store.names.get(api.name),
                        json!(proc.pid),
                        json!(api.tid),
                        api.start,
                        api.end - api.start,
                        json!({"correlation": api.corr, "stack": store.frame_strings(api.stack)}),
                    ),
                )?;
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
        analysis::lane_gaps(store, li, Window::new(lo, hi), cfg, |g| gaps.push(g));
        for g in gaps {
            let mut frames = store.frame_strings(g.stack);
            if g.api != 0 {
                frames.push(store.names.get(g.api).to_string());
            }
            frames.push(store.names.get(g.op_name).to_string());
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
                       "frames": frames, "cpu_frames": store.frame_strings(g.cpu_stack)}),
                ),
            )?;
            n.gaps += 1;
        }
    }
    for d in devices {
        emit(
            &mut out,
            Ev {
                ph: "M",
                cat: None,
                name: "process_name",
                pid: json!(d),
                tid: None,
                ts: None,
                dur: None,
                id: None,
                bp: None,
                args: json!({"name": format!("GPU {d}")}),
            },
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
    Ok(n)
}

fn sanitize(s: &str) -> String {
    let mut t = String::with_capacity(s.len());
    for c in s.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '-'
        };
        // One dash for a run of other characters: "demo (gpt2.rec)" is "demo-gpt2-rec".
        if c != '-' || !t.ends_with('-') {
            t.push(c);
        }
    }
    let t = t.trim_matches('-').to_string();
    if t.is_empty() {
        "trace".into()
    } else {
        t.chars().take(40).collect()
    }
}

/// `gaptop-<source>-<time>.json` in the export directory.
pub fn export_path(dir: &Path, source: &str) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let base = source.split('.').next().unwrap_or(source);
    let mut p = dir.join(format!("gaptop-{}-{secs}.json", sanitize(base)));
    let mut i = 1;
    while p.exists() {
        p = dir.join(format!("gaptop-{}-{secs}-{i}.json", sanitize(base)));
        i += 1;
    }
    p
}

/// Writes the app's visible window; returns the file written.
pub fn export_window(app: &App) -> anyhow::Result<PathBuf> {
    let path = export_path(&app.export_dir, &app.store.source);
    let f = std::fs::File::create(&path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    write(&app.store, app.lo, app.hi, &app.cfg, f)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::sanitize;

    #[test]
    fn export_names_are_plain_and_short() {
        assert_eq!(sanitize("demo (gpt2.rec)"), "demo-gpt2-rec");
        assert_eq!(sanitize("/tmp/a b/trace.json"), "tmp-a-b-trace-json");
        assert_eq!(sanitize("  ..  "), "trace");
        assert_eq!(sanitize(&"x".repeat(100)).len(), 40);
    }
}

//! Python backtraces in the export: the marks of nsys's `Python Backtrace` NVTX domain, their
//! payloads laid out as the export's schema tables say and decoded by [`super::pybacktrace`];
//! then each placed: one taken in a CUDA call (`--python-backtrace=cuda`) given to that call
//! and the calls made inside it, a periodic one (`--python-sampling`) moved from nsys's
//! sampling thread to the thread it sampled where that is known. The payload's format is
//! `pybacktrace.rs`'s; what this file holds is how the export stores and times them.

use anyhow::anyhow;
use rusqlite::{types::ValueRef, Row};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::calls::RawCall;
use super::db::{int, proc_key, text, tid_of};
use super::import::Import;
use super::nvtx::NVTX_MARK;
use super::pybacktrace;
use crate::model::records::{NameId, Ns, MAX_TS};

/// A Python backtrace read: the thread and time it was taken at, whether by periodic sampling
/// (else inside a CUDA call), and its frames, outermost first.
pub(super) struct PyTrace {
    pub(super) gtid: i64,
    pub(super) time: Ns,
    pub(super) sampled: bool,
    pub(super) frames: Vec<NameId>,
}

impl Import {
    /// Where the payloads of nsys's `PythonBacktrace` schema hold their fields: as the export's
    /// schema tables say, where it has them, else as nsys wrote them when this was written.
    fn python_layout(&self) -> anyhow::Result<pybacktrace::Layout> {
        let mut l = pybacktrace::Layout::default();
        let t = "NVTX_PAYLOAD_SCHEMAS";
        if !self.db.has(t) {
            return Ok(l);
        }
        let mut backtrace: Option<(Option<i64>, i64)> = None;
        let mut frame: Option<(Option<i64>, i64)> = None;
        let mut frame_size = None;
        self.db
            .each(t, &["domainId", "schemaId", "name", "payloadSize"], |r| {
                let name = text(r, 2, "name")?;
                match name.as_deref() {
                    Some(pybacktrace::SCHEMA) => {
                        if let Some(id) = int(r, 1, "schemaId")? {
                            backtrace = Some((int(r, 0, "domainId")?, id));
                        }
                    }
                    Some(pybacktrace::FRAME_SCHEMA) => {
                        frame_size = int(r, 3, "payloadSize")?;
                        if let Some(id) = int(r, 1, "schemaId")? {
                            frame = Some((int(r, 0, "domainId")?, id));
                        }
                    }
                    _ => {}
                }
                Ok(())
            })?;
        if let Some(size) = frame_size.filter(|&s| (20..=4096).contains(&s)) {
            l.frame_size = size as usize;
        }
        let t = "NVTX_PAYLOAD_SCHEMA_ENTRIES";
        if self.db.has(t) && (backtrace.is_some() || frame.is_some()) {
            let of = |r: &Row, which: Option<(Option<i64>, i64)>| -> anyhow::Result<bool> {
                let Some((domain, schema)) = which else {
                    return Ok(false);
                };
                Ok(int(r, 1, "schemaId")? == Some(schema)
                    && (domain.is_none() || int(r, 0, "domainId")? == domain))
            };
            self.db
                .each(t, &["domainId", "schemaId", "name", "offset"], |r| {
                    let Some(off) = int(r, 3, "offset")?.filter(|&o| (0..4096).contains(&o)) else {
                        return Ok(());
                    };
                    let off = off as usize;
                    let name = text(r, 2, "name")?;
                    if of(r, backtrace)? {
                        match name.as_deref() {
                            Some("Source") => l.source = off,
                            Some("Frames count") => l.count = off,
                            Some("Frames") => l.frames = off,
                            _ => {}
                        }
                    } else if of(r, frame)? {
                        match name.as_deref() {
                            Some("Function") => l.function = off,
                            Some(f) if f.starts_with("File") => l.file = off,
                            Some("Line") => l.line = off,
                            _ => {}
                        }
                    }
                    Ok(())
                })?;
        }
        let t = "NVTX_PAYLOAD_ENUM_ENTRIES";
        if self.db.has(t) {
            self.db.each(t, &["name", "value"], |r| {
                if text(r, 0, "name")?.as_deref() == Some("Periodic sampling") {
                    if let Some(v) = int(r, 1, "value")?.and_then(|v| u32::try_from(v).ok()) {
                        l.periodic = v;
                    }
                }
                Ok(())
            })?;
        }
        Ok(l)
    }

    /// The Python backtraces of nsys's `Python Backtrace` NVTX domain (`--python-backtrace=cuda`
    /// takes one inside each CUDA call, `--python-sampling` periodically), of the processes that
    /// did CUDA work, with their frames outermost first; or none, with a note, where the export
    /// holds the marks without their payloads. `domains`: the ids of that domain, as
    /// [`Import::ranges`] found them.
    pub(super) fn python_backtraces(&mut self, domains: &[i64]) -> anyhow::Result<Vec<PyTrace>> {
        let t = "NVTX_EVENTS";
        if domains.is_empty() {
            return Ok(Vec::new());
        }
        let with_payload = self.db.columns(t)?.contains("binaryData");
        let layout = self.python_layout()?;
        let ids: Vec<String> = domains.iter().map(|d| d.to_string()).collect();
        let filter = format!(
            "eventType = {NVTX_MARK} AND domainId IN ({})",
            ids.join(", ")
        );
        let (mut marks, mut unreadable, mut truncated) = (0usize, 0usize, 0usize);
        let mut raw: Vec<(i64, Ns, pybacktrace::Backtrace)> = Vec::new();
        self.db.each_where(
            t,
            &["start!", "globalTid", "binaryData"],
            Some(&filter),
            |r| {
                marks += 1;
                let (Some(start), Some(gtid)) = (int(r, 0, "start")?, int(r, 1, "globalTid")?)
                else {
                    return Ok(());
                };
                let bytes = match r
                    .get_ref(2)
                    .map_err(|e| anyhow!("column binaryData: {e}"))?
                {
                    ValueRef::Blob(b) => pybacktrace::payload_bytes(Some(b), None),
                    ValueRef::Text(s) => {
                        pybacktrace::payload_bytes(None, std::str::from_utf8(s).ok())
                    }
                    _ => None,
                };
                match bytes.and_then(|b| pybacktrace::decode(&b, &layout)) {
                    Some(bt) if start.unsigned_abs() <= MAX_TS => {
                        truncated += bt.truncated as usize;
                        raw.push((gtid, start, bt));
                    }
                    _ => unreadable += with_payload as usize,
                }
                Ok(())
            },
        )?;
        if marks == 0 {
            return Ok(Vec::new());
        }
        if !with_payload {
            self.note(format!(
                "NVTX_EVENTS holds {marks} Python backtraces without their payloads (no \
                 binaryData column; nsys 2023.4 and older export none): launches have no Python \
                 frames (export the report with a newer nsys)"
            ));
            return Ok(Vec::new());
        }
        for _ in 0..unreadable {
            self.store
                .skip("Python backtrace with an unreadable payload");
        }
        for _ in 0..truncated {
            self.store.skip("Python backtrace cut short (frames kept)");
        }
        let mut memo: HashMap<pybacktrace::RawFrame, NameId> = HashMap::default();
        let mut out = Vec::with_capacity(raw.len());
        for (gtid, time, bt) in raw {
            if !self.procs.contains_key(&proc_key(gtid)) {
                self.store
                    .skip("Python backtrace of a process without CUDA work");
                continue;
            }
            let frames = bt
                .frames
                .iter()
                .rev()
                .map(|f| {
                    let strings = &self.strings;
                    let store = &mut self.store;
                    *memo.entry(*f).or_insert_with(|| {
                        let function = strings.get(f.function).unwrap_or("");
                        let file = strings.get(f.file).unwrap_or("");
                        store
                            .names
                            .intern(&pybacktrace::frame_text(function, file, f.line))
                    })
                })
                .collect();
            out.push(PyTrace {
                gtid,
                time,
                sampled: bt.sampled,
                frames,
            });
        }
        Ok(out)
    }
}

/// How long before a call's own start nsys may take the Python backtrace of it: it takes the
/// backtrace as it enters the call, before CUPTI's start of it (79 to 1,426 ns before, on the
/// H200 with nsys 2023.4, where the call's backtrace row starts at the backtrace's time).
const PYTHON_LEAD_NS: Ns = 5_000;

/// For each call, the Python backtrace taken in it (`--python-backtrace=cuda`), by index in
/// `traces`: on its thread, between its start (or its backtrace row's) and its end, else just
/// before its start (within [`PYTHON_LEAD_NS`]). The calls made inside it (a runtime call's
/// driver calls) get the same backtrace. Also the number of backtraces that fell in no call.
pub(super) fn python_of_calls(
    im: &Import,
    calls: &[RawCall],
    traces: &[PyTrace],
) -> (Vec<Option<usize>>, usize) {
    let mut out = vec![None; calls.len()];
    let mut unmatched = 0;
    if traces.is_empty() {
        return (out, unmatched);
    }
    let mut by_thread: HashMap<(u32, u32), Vec<usize>> = HashMap::default();
    for (i, c) in calls.iter().enumerate() {
        by_thread.entry((c.proc, c.call.tid)).or_default().push(i);
    }
    for v in by_thread.values_mut() {
        v.sort_by_key(|&i| calls[i].held.0);
    }
    for (ti, t) in traces.iter().enumerate() {
        let Some(v) = im
            .procs
            .get(&proc_key(t.gtid))
            .and_then(|&p| by_thread.get(&(p, tid_of(t.gtid))))
        else {
            unmatched += 1;
            continue;
        };
        let n = v.partition_point(|&i| calls[i].held.0 <= t.time);
        // Calls on a thread nest a few deep at most: the ones that hold the time are among the
        // last few to start before it.
        let mut until = None;
        for &i in v[..n].iter().rev().take(8) {
            if calls[i].held.1 >= t.time && out[i].is_none() {
                out[i] = Some(ti);
                until = until.max(Some(calls[i].held.1));
            }
        }
        let mut from = n;
        if until.is_none() {
            match v.get(n) {
                Some(&i) if calls[i].held.0 - t.time <= PYTHON_LEAD_NS && out[i].is_none() => {
                    out[i] = Some(ti);
                    until = Some(calls[i].held.1);
                    from = n + 1;
                }
                _ => {
                    unmatched += 1;
                    continue;
                }
            }
        }
        // The calls made inside them start after the backtrace was taken: theirs too.
        if let Some(end) = until {
            for &i in v[from..].iter().take_while(|&&i| calls[i].held.0 <= end) {
                if calls[i].held.1 <= end && out[i].is_none() {
                    out[i] = Some(ti);
                }
            }
        }
    }
    (out, unmatched)
}

/// The periodic Python samples of `--python-sampling` on the threads they sampled. nsys takes
/// them on a thread of its own (`NSys PySampling`) and the payload does not say which thread
/// it sampled: a sample on a thread that made no CUDA call is the process's one thread that
/// did, where there is one; else it stays where it is (and explains no gap), noted.
pub(super) fn sampled_threads(
    im: &mut Import,
    calls: &[RawCall],
    mut sampled: Vec<PyTrace>,
) -> Vec<PyTrace> {
    if sampled.is_empty() {
        return sampled;
    }
    let mut callers: HashMap<u32, HashSet<u32>> = HashMap::default();
    for c in calls {
        callers.entry(c.proc).or_default().insert(c.call.tid);
    }
    let (mut moved, mut left) = (0usize, 0usize);
    for p in &mut sampled {
        let Some(tids) = im
            .procs
            .get(&proc_key(p.gtid))
            .and_then(|proc| callers.get(proc))
        else {
            continue;
        };
        if tids.contains(&tid_of(p.gtid)) {
            continue;
        }
        if let (1, Some(&tid)) = (tids.len(), tids.iter().next()) {
            p.gtid = proc_key(p.gtid) | tid as i64;
            moved += 1;
        } else {
            left += 1;
        }
    }
    let mut note = format!(
        "Python samples (--python-sampling): {} as the threads' CPU samples",
        sampled.len()
    );
    if moved > 0 {
        note.push_str(&format!(
            "; {moved} taken on nsys's sampling thread given to the one thread that made CUDA calls"
        ));
    }
    if left > 0 {
        note.push_str(&format!(
            "; {left} taken on nsys's sampling thread left there (several threads made CUDA \
             calls, and a sample does not say which it is of)"
        ));
    }
    im.note(note);
    sampled
}

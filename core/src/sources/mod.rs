//! Sources: every reader of what gaptop opens or listens to, each turning its input into the
//! model's [`Store`](crate::model::store::Store): torch.profiler (Kineto) JSON, Nsight
//! Systems exports, gaptop's recordings, and the live socket with its CPU sampler. A source
//! never judges: the gaps, steps and advice are `analysis`'s.

pub mod attach;
pub mod cpu;
pub mod demo;
pub mod fwdbwd;
pub mod in_order;
pub mod ingest;
pub mod jsonscan;
pub mod kineto;
pub mod live;
pub mod nsys;
pub mod recording;
pub mod sniff;
pub mod symbols;
pub mod traceset;

use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::Context;

use crate::model::store;

/// Loads any file gaptop reads: a recording (`gaptop record`), Chrome-trace JSON (Kineto or a
/// gaptop export), plain or gzipped, or an Nsight Systems capture (its SQLite export, plain or
/// gzipped, or a `.nsys-rep` through `nsys export`). Errors are one line and name the file.
pub fn load_path(path: &Path, budget: usize) -> anyhow::Result<store::Store> {
    load_one(path, budget).map(said)
}

/// [`load_path`], without a word of what it dropped.
fn load_one(path: &Path, budget: usize) -> anyhow::Result<store::Store> {
    let shown = path.display();
    crate::files::refuse_special(path)?;
    if path.is_dir() {
        anyhow::bail!("{shown}: is a directory, not a trace or a recording");
    }
    if is_recording(path)? {
        return recording::load(path, budget).map_err(|e| anyhow::anyhow!("{shown}: {e:#}"));
    }
    if let Some(kind) = nsys_kind(path) {
        return nsys::load_kind(path, kind, budget).map_err(|e| anyhow::anyhow!("{shown}: {e:#}"));
    }
    if let Some(what) = sniff::cut_header(path) {
        anyhow::bail!("{shown}: looks like {what}");
    }
    kineto::load(path, budget).map_err(|e| anyhow::anyhow!("{shown}: {e:#}"))
}

/// What kind of Nsight Systems capture a file is, if it is one (by its first bytes and name).
fn nsys_kind(path: &Path) -> Option<nsys::Kind> {
    let mut first = [0u8; 32];
    let m = std::fs::File::open(path).and_then(|mut f| f.read(&mut first));
    nsys::sniff(path, &first[..m.unwrap_or(0)])
}

/// Whether a file is a recording (plain or gzipped); an empty or unreadable file is an error.
fn is_recording(path: &Path) -> anyhow::Result<bool> {
    let shown = path.display();
    let mut head = [0u8; 8];
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .with_context(|| format!("{shown}: cannot open"))?;
    if n == 0 {
        anyhow::bail!("{shown}: empty file");
    }
    // A gzipped recording: its first bytes once inflated.
    let mut inner = [0u8; 8];
    let gz_recording = head[..2] == [0x1f, 0x8b]
        && std::fs::File::open(path)
            .map(|f| {
                flate2::read::GzDecoder::new(f)
                    .read_exact(&mut inner)
                    .is_ok()
            })
            .unwrap_or(false)
        && gaptop_wire::RECORDING_MAGICS.contains(&&inner);
    Ok(gz_recording || (n == 8 && gaptop_wire::RECORDING_MAGICS.contains(&&head)))
}

/// Loads what the command line names as one capture: a file as [`load_path`] does, or several
/// traces (files, or the traces in a directory) as the ranks of one run
/// ([`traceset::load_traces`]). A recording opens alone.
pub fn load_paths(paths: &[PathBuf], budget: usize) -> anyhow::Result<store::Store> {
    let files = traceset::expand(paths)?;
    if let [one] = files.as_slice() {
        return load_path(one, budget);
    }
    load_set(paths, &files, budget).map(said)
}

/// Says on stderr what a loaded capture dropped for its times, at once (as a cut recording
/// is said), and gives it back.
fn said(store: store::Store) -> store::Store {
    for line in store.dropped_times.lines() {
        crate::say!("gaptop: {}: {line}", store.source);
    }
    store
}

/// Several files as one capture, as [`load_paths`] says.
fn load_set(paths: &[PathBuf], files: &[PathBuf], budget: usize) -> anyhow::Result<store::Store> {
    let recordings = files
        .iter()
        .map(|f| is_recording(f))
        .collect::<anyhow::Result<Vec<bool>>>()?;
    if recordings.iter().all(|&r| r) {
        return traceset::load_recordings(files, &traceset::describe(paths, files), budget);
    }
    for (f, &r) in files.iter().zip(&recordings) {
        if r {
            anyhow::bail!(
                "{}: a recording joins only other recordings (the nodes of one job), not traces",
                f.display()
            );
        }
        if nsys_kind(f).is_some() {
            anyhow::bail!(
                "{}: an Nsight Systems capture opens alone (its ranks are in it), not joined with other files",
                f.display()
            );
        }
    }
    traceset::load_traces(files, &traceset::describe(paths, files), budget)
}

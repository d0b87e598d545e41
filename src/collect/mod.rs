//! Sources and the model: the event store, gap analysis, trace and recording readers, the live
//! socket.

pub mod advice;
pub mod analysis;
pub mod comm;
pub mod cpu;
pub mod ingest;
pub mod jsonscan;
pub mod kineto;
pub mod live;
pub mod oncpu;
pub mod ranges;
pub mod recording;
pub mod steps;
pub mod store;
pub mod symbols;

use std::io::Read;
use std::path::Path;

use anyhow::Context;

/// Loads any file gaptop reads: a recording (`gaptop record`), or Chrome-trace JSON (Kineto or a
/// gaptop export), plain or gzipped. Errors are one line and name the file.
pub fn load_path(path: &Path, budget: usize) -> anyhow::Result<store::Store> {
    let shown = path.display();
    if path.is_dir() {
        anyhow::bail!("{shown}: is a directory, not a trace or a recording");
    }
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
    if gz_recording || (n == 8 && gaptop_wire::RECORDING_MAGICS.contains(&&head)) {
        return recording::load(path, budget).map_err(|e| anyhow::anyhow!("{shown}: {e:#}"));
    }
    kineto::load(path, budget).map_err(|e| anyhow::anyhow!("{shown}: {e:#}"))
}

//! Where an export goes, how large it is, and what opens it.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The most JSON chrome://tracing (catapult's trace viewer) loads: about 256 MB.
pub const CHROME_TRACING_BYTES: u64 = 256_000_000;
/// About the most JSON ui.perfetto.dev loads in a browser tab (its memory, typically 2 GB,
/// holds the trace at several times its size on disk); `trace_processor --httpd` lifts it.
pub const PERFETTO_UI_BYTES: u64 = 1_000_000_000;

/// What opens an export of `json` bytes of JSON (gzipped or not: the viewers inflate it).
pub fn opens_with(json: u64) -> &'static str {
    if json <= CHROME_TRACING_BYTES {
        "opens in ui.perfetto.dev, chrome://tracing and gaptop open"
    } else if json <= PERFETTO_UI_BYTES {
        "too big for chrome://tracing (256 MB of JSON); ui.perfetto.dev and gaptop open open it"
    } else {
        "too big for ui.perfetto.dev (about 1 GB of JSON) and chrome://tracing: `trace_processor \
         --httpd FILE` then ui.perfetto.dev, or gaptop open, opens it"
    }
}

/// What an export of a window would write, measured on a part of it before anything is
/// written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Estimate {
    /// The window's GPU ops.
    pub ops: u64,
    /// Its JSON, and that gzipped as exports are.
    pub json_bytes: u64,
    pub gz_bytes: u64,
}

/// What is said before an export of `e` is written where it is large (more than
/// chrome://tracing opens), else None.
pub fn large(e: &Estimate) -> Option<String> {
    (e.json_bytes > CHROME_TRACING_BYTES).then(|| e.to_string())
}

impl std::fmt::Display for Estimate {
    /// `~1.70 GB of JSON (~106 MB gzipped, 1000000 ops)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "~{} of JSON (~{} gzipped, {})",
            bytes(self.json_bytes),
            bytes(self.gz_bytes),
            gaptop_core::units::count(self.ops, "op")
        )
    }
}

/// A size in bytes to three significant figures: `900 B`, `45.3 kB`, `108 MB`, `1.21 GB`.
pub fn bytes(n: u64) -> String {
    let mut v = n as f64;
    let mut unit = "B";
    for u in ["kB", "MB", "GB", "TB"] {
        if v < 999.5 {
            break;
        }
        v /= 1000.0;
        unit = u;
    }
    if unit == "B" || v >= 99.95 {
        format!("{v:.0} {unit}")
    } else if v >= 9.995 {
        format!("{v:.1} {unit}")
    } else {
        format!("{v:.2} {unit}")
    }
}
/// Where an export goes: `to` itself, or where it is a folder, a new
/// `gaptop-<source>-<time>.json.gz` in it ([`export_path`]). The CLI's `-o` and the UI's
/// `-o`/`--output` take the same; without one, the current folder.
pub fn target(to: &Path, source: &str) -> PathBuf {
    if to.is_dir() {
        export_path(to, source)
    } else {
        to.to_path_buf()
    }
}

/// A writer that counts what passes through it.
pub(super) struct Counted<W>(pub W, pub u64);

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let k = self.0.write(b)?;
        self.1 += k as u64;
        Ok(k)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

pub(super) fn sanitize(s: &str) -> String {
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

/// `gaptop-<source>-<time>.json.gz` in the export directory: gzipped, because a launch-bound
/// window takes about 2 KB of JSON per kernel (as torch.profiler's own traces do) and
/// compresses about twentyfold; Perfetto, chrome://tracing and `gaptop open` read it as is.
pub fn export_path(dir: &Path, source: &str) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let base = source.split('.').next().unwrap_or(source);
    let mut p = dir.join(format!("gaptop-{}-{secs}.json.gz", sanitize(base)));
    let mut i = 1;
    while p.exists() {
        p = dir.join(format!("gaptop-{}-{secs}-{i}.json.gz", sanitize(base)));
        i += 1;
    }
    p
}

//! The forms of an Nsight Systems capture gaptop opens, told apart by their first bytes, and
//! how each becomes a plain SQLite export to read: a `.sqlite` as it is, a `.sqlite.gz`
//! inflated (bounded, [`super::inflate`]) and a `.nsys-rep` exported by the `nsys` on PATH, each
//! into a temporary folder. A module of its own because none of this reads a table: what
//! follows the opening is the same for every form (`load.rs`).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::bail;

use super::load::load_sqlite;
use crate::model::store::Store;

/// The first bytes of every SQLite database.
pub const SQLITE_MAGIC: &[u8; 16] = b"SQLite format 3\0";
/// The first bytes of an Nsight Systems report (`.nsys-rep`).
pub const REPORT_MAGIC: &[u8] = b"NVIDIA Tegra Profiler Report";

/// The forms of an Nsight Systems capture gaptop reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sqlite,
    GzSqlite,
    Report,
}

/// Which Nsight Systems form `path` is, from `head`, its first bytes (at least 28 of them when
/// the file has that many); `None` when it is none of them.
pub fn sniff(path: &Path, head: &[u8]) -> Option<Kind> {
    if head.starts_with(SQLITE_MAGIC) {
        return Some(Kind::Sqlite);
    }
    if head.starts_with(REPORT_MAGIC) {
        return Some(Kind::Report);
    }
    if head.starts_with(&[0x1f, 0x8b]) {
        let mut inner = [0u8; 16];
        let ok = std::fs::File::open(path)
            .map(|f| {
                flate2::read::GzDecoder::new(f)
                    .read_exact(&mut inner)
                    .is_ok()
            })
            .unwrap_or(false);
        if ok && &inner == SQLITE_MAGIC {
            return Some(Kind::GzSqlite);
        }
    }
    None
}

/// Loads a file of the form `kind` into a new store. Errors are one line (the caller names the
/// file).
pub fn load_kind(path: &Path, kind: Kind, budget: usize) -> anyhow::Result<Store> {
    let source = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    match kind {
        Kind::Sqlite => load_sqlite(path, &source, budget),
        Kind::GzSqlite => {
            // Removed however this ends (signals too; a kill, by the next gaptop).
            let dir = crate::files::TempFolder::new("sqlite")?;
            let plain = dir.path().join("export.sqlite");
            super::inflate::to_file(path, &plain)?;
            load_sqlite(&plain, &source, budget)
        }
        Kind::Report => {
            let dir = crate::files::TempFolder::new("nsys-export")?;
            let plain = export_report(path, dir.path())?;
            load_sqlite(&plain, &source, budget)
        }
    }
}

/// Runs `nsys export --type sqlite` on a report, into `dir`; the export's path.
fn export_report(path: &Path, dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let out = dir.join("export.sqlite");
    let run = Command::new("nsys")
        .args(["export", "--type", "sqlite", "--output"])
        .arg(&out)
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let run = match run {
        Ok(r) => r,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "an Nsight Systems report, and no `nsys` is on PATH to export it: run \
             `nsys export --type sqlite {}` and open the .sqlite it writes",
            path.display()
        ),
        Err(e) => bail!("cannot run `nsys export`: {e}"),
    };
    if !run.status.success() || !out.is_file() {
        let err = String::from_utf8_lossy(&run.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!(
            "`nsys export --type sqlite` failed ({}){}{}",
            run.status,
            if last.is_empty() { "" } else { ": " },
            last.trim()
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_first_bytes() {
        let p = Path::new("/nonexistent");
        assert_eq!(sniff(p, b"SQLite format 3\0rest"), Some(Kind::Sqlite));
        assert_eq!(
            sniff(p, b"NVIDIA Tegra Profiler Report 2025@1"),
            Some(Kind::Report)
        );
        assert_eq!(sniff(p, b"{\"traceEvents\": []}"), None);
        assert_eq!(sniff(p, b"SQLite format 2"), None);
    }
}

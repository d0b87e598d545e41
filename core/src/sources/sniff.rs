//! What a file that no reader took looks like by its first bytes, when they are the start of
//! a format gaptop reads, cut short: a recording, an SQLite database or an Nsight Systems
//! report cut inside its header, or a gzip file cut before its content. Said in words, so that
//! such a file is not reported as invalid JSON.

use std::io::Read;
use std::path::Path;

use super::nsys::{REPORT_MAGIC, SQLITE_MAGIC};

/// A recording's magic without its version digit.
const RECORDING: &[u8] = b"GAPTOPR";
/// The fixed part of a gzip header.
const GZIP_HEADER: usize = 10;

fn bytes(n: usize) -> String {
    format!("{n} byte{}", if n == 1 { "" } else { "s" })
}

/// What `head`, a file's first bytes (or those a gzip stream inflated to), is the cut-short
/// start of, if anything gaptop reads; `len` is how many bytes there are in all.
fn cut_inside(head: &[u8], len: usize) -> Option<String> {
    // Three bytes at least: fewer say little of what the file was meant to be.
    if head.len() < 3 {
        return None;
    }
    if head.len() < 8 && RECORDING.starts_with(&head[..head.len().min(RECORDING.len())]) {
        return Some(format!(
            "a gaptop recording cut inside its 8-byte header ({})",
            bytes(len)
        ));
    }
    if head.len() >= 8 && head.starts_with(RECORDING) {
        return Some(format!(
            "a gaptop recording of a version this gaptop does not read ({}; it reads GAPTOPR1 to GAPTOPR{})",
            head[..8].escape_ascii(),
            gaptop_wire::RECORDING_MAGICS.len()
        ));
    }
    if head.len() < SQLITE_MAGIC.len() && SQLITE_MAGIC.starts_with(head) {
        return Some(format!(
            "an SQLite database cut inside its 16-byte header ({})",
            bytes(len)
        ));
    }
    if head.len() < REPORT_MAGIC.len() && REPORT_MAGIC.starts_with(head) {
        return Some(format!(
            "an Nsight Systems report cut inside its header ({})",
            bytes(len)
        ));
    }
    None
}

/// What the file at `path` looks like, when it is a format gaptop reads cut short in its
/// first bytes; `None` when it is not (or cannot be read: the reader that comes next says).
pub fn cut_header(path: &Path) -> Option<String> {
    let mut head = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(32).read_to_end(&mut head))
        .ok()?;
    let gzip = head.first() == Some(&0x1f) && head.get(1).is_none_or(|&b| b == 0x8b);
    if !gzip {
        return cut_inside(&head, head.len());
    }
    if head.len() < GZIP_HEADER {
        return Some(format!(
            "a gzip file cut inside its 10-byte header ({})",
            bytes(head.len())
        ));
    }
    let mut inner = Vec::new();
    let inflated = std::fs::File::open(path)
        .map(flate2::read::GzDecoder::new)
        .and_then(|d| d.take(32).read_to_end(&mut inner));
    if let Some(what) = cut_inside(&inner, inner.len()) {
        return Some(format!("a gzip file that inflates to {what}"));
    }
    match inflated {
        Err(e) if inner.is_empty() => Some(format!(
            "a gzip file whose stream stops before its first byte ({e})"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, content: &[u8]) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("gaptop-sniff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, content).unwrap();
        p
    }

    fn gz(b: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn a_format_cut_in_its_header_is_named() {
        let said = |name: &str, b: &[u8]| cut_header(&file(name, b)).unwrap_or_default();
        assert_eq!(
            said("a.rec", b"GAPTO"),
            "a gaptop recording cut inside its 8-byte header (5 bytes)"
        );
        assert!(
            said("b.rec", b"GAPTOPR9\0\0").contains("version this gaptop does not read (GAPTOPR9")
        );
        assert!(said("c.sqlite", b"SQLite for").starts_with("an SQLite database cut inside"));
        assert!(said("d.nsys-rep", b"NVIDIA Te").starts_with("an Nsight Systems report cut"));
        assert_eq!(
            said("e.gz", &[0x1f]),
            "a gzip file cut inside its 10-byte header (1 byte)"
        );
        let rec = gz(b"GAPTOPR4 and the rest of a recording");
        assert!(said("f.rec.gz", &rec[..12]).starts_with("a gzip file whose stream stops before"));
        assert_eq!(
            said("g.rec.gz", &gz(b"GAPTOP")),
            "a gzip file that inflates to a gaptop recording cut inside its 8-byte header (6 bytes)"
        );
        // What gaptop reads, and text that is no format of its, are not described here.
        for (name, b) in [
            ("h.json", &b"{\"traceEvents\": []}"[..]),
            ("i.json.gz", &gz(b"{\"traceEvents\": []}")),
            ("j.txt", b"GA"),
            ("k.txt", b"hello world"),
        ] {
            assert_eq!(cut_header(&file(name, b)), None, "{name}");
        }
    }
}

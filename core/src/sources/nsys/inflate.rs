//! A gzipped SQLite export inflated into a temporary folder, bounded: an 8 MB file can hold
//! gigabytes of zeros, and SQLite needs the whole database on disk. The default limit is 64
//! times the compressed size (at least 64 MiB), and never more than 4 GiB;
//! `GAPTOP_INFLATE_LIMIT=SIZE` (`16G`) sets another.

use std::io::Read;
use std::path::Path;

use anyhow::Context;

use crate::units::fmt_bytes;

/// The variable that sets the limit.
pub const LIMIT_VAR: &str = "GAPTOP_INFLATE_LIMIT";

/// How many bytes a file of `compressed` bytes may inflate to: `set` (the variable's value)
/// when given, else 64 times `compressed`, at least 64 MiB and at most 4 GiB.
pub fn limit(compressed: u64, set: Option<&str>) -> anyhow::Result<u64> {
    if let Some(v) = set {
        let n = crate::units::parse_bytes(v).map_err(|e| anyhow::anyhow!("{LIMIT_VAR}: {e}"))?;
        return Ok(n as u64);
    }
    Ok(compressed.saturating_mul(64).clamp(64 << 20, 4 << 30))
}

/// Inflates the gzipped file `path` into `dest`, refusing past the limit (the file written so
/// far stays for the caller's temporary folder to remove). The bytes written.
pub fn to_file(path: &Path, dest: &Path) -> anyhow::Result<u64> {
    let f = std::fs::File::open(path).context("cannot open")?;
    let compressed = f.metadata().map(|m| m.len()).unwrap_or(0);
    let max = limit(compressed, std::env::var(LIMIT_VAR).ok().as_deref())?;
    let mut out =
        std::fs::File::create(dest).with_context(|| format!("cannot write {}", dest.display()))?;
    let mut z = flate2::read::MultiGzDecoder::new(f).take(max + 1);
    let n = std::io::copy(&mut z, &mut out).context("cannot inflate the gzipped SQLite export")?;
    if n > max {
        anyhow::bail!(
            "inflates to more than {} ({} compressed), gaptop's limit; {LIMIT_VAR}=SIZE (e.g. \
             {LIMIT_VAR}=16G) raises it, or gunzip it and open the .sqlite",
            fmt_bytes(max),
            fmt_bytes(compressed)
        );
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_follows_the_compressed_size_within_bounds() {
        const MIB: u64 = 1 << 20;
        assert_eq!(limit(8 * MIB, None).unwrap(), 512 * MIB);
        assert_eq!(limit(1000, None).unwrap(), 64 * MIB);
        assert_eq!(limit(1 << 30, None).unwrap(), 4 << 30);
        assert_eq!(limit(1 << 30, Some("16G")).unwrap(), 16 << 30);
        let e = limit(1, Some("lots")).unwrap_err().to_string();
        assert!(e.contains(LIMIT_VAR), "{e}");
    }

    #[test]
    fn a_bomb_stops_at_the_limit() {
        use std::io::Write;
        let dir = crate::files::TempFolder::new("inflatetest").unwrap();
        let gz = dir.path().join("bomb.sqlite.gz");
        let mut e = flate2::write::GzEncoder::new(
            std::fs::File::create(&gz).unwrap(),
            flate2::Compression::best(),
        );
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..80 {
            e.write_all(&zeros).unwrap();
        }
        e.finish().unwrap();
        assert!(std::fs::metadata(&gz).unwrap().len() < 1 << 20);
        let dest = dir.path().join("plain");
        let err = to_file(&gz, &dest).unwrap_err().to_string();
        assert!(err.contains("inflates to more than 64 MiB"), "{err}");
        assert!(err.contains("GAPTOP_INFLATE_LIMIT=16G"), "{err}");
        assert_eq!(std::fs::metadata(&dest).unwrap().len(), (64 << 20) + 1);
    }
}

//! What a trace file says about itself, apart from its events: its header's rank and clock
//! (`Header`), the rank its name gives, and how it is opened (plain or gzipped, refused at
//! once when its first bytes cannot start JSON).

use std::io::{BufReader, Read};
use std::path::Path;

use super::members::members;
use super::numbers::int_of;
use crate::model::records::Ns;

/// The latest `baseTimeNanoseconds` taken for a time (2^62 ns: the year 2116).
pub(super) const MAX_BASE_NS: Ns = 1 << 62;

/// What a trace's header says about its run, read around its events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Header {
    /// `distributedInfo.rank` and `.world_size`.
    pub rank: Option<i32>,
    pub world_size: Option<i64>,
    /// `baseTimeNanoseconds`: what the events' times are relative to (0 when absent).
    pub base_ns: Ns,
}

impl Header {
    /// Takes what it knows from one top-level member of a trace.
    pub(super) fn member(&mut self, key: &[u8], value: &[u8]) {
        match key {
            b"distributedInfo" => {
                let (mut rank, mut world) = (None, None);
                let _ = members(value, |k, v| match k {
                    b"rank" => rank = int_of(Some(v)),
                    b"world_size" => world = int_of(Some(v)),
                    _ => {}
                });
                self.rank = rank.and_then(|r| i32::try_from(r).ok()).filter(|r| *r >= 0);
                self.world_size = world;
            }
            b"baseTimeNanoseconds" => self.base_ns = int_of(Some(value)).unwrap_or(0),
            _ => {}
        }
    }
}

/// What a capture holding some of a run's ranks says about the others, when its traces'
/// headers give a larger world: a rank's waits at a collective are another rank's lateness,
/// which only that rank's trace shows. `ranks` are those opened (-1 where unknown).
pub fn other_ranks_note(ranks: &[i32], world: Option<i64>) -> Option<String> {
    let world = world.filter(|&w| w > ranks.len() as i64)?;
    let (what, them, its) = match ranks {
        [r] if *r >= 0 => (
            format!("rank {r} of a run of {world} ranks, opened alone"),
            "it",
            "its",
        ),
        [_] => (
            format!("one rank of a run of {world}, opened alone"),
            "it",
            "its",
        ),
        _ => (
            format!("{} of the run's {world} ranks opened", ranks.len()),
            "them",
            "their",
        ),
    };
    Some(format!(
        "{what}: {OTHER_RANKS} {them} (several files, or their folder) to see which rank \
         {its} collectives wait for"
    ))
}

/// How [`other_ranks_note`]'s advice reads, for those who show it.
pub const OTHER_RANKS: &str = "open the other ranks' traces with";

/// A file's name, as labels and sources show it.
pub fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The rank a trace's file name gives, as distributed jobs name their ranks' traces:
/// `rank-3`, `rank_3` or `rank3` (any case) anywhere in the name.
pub fn rank_in_name(name: &str) -> Option<i32> {
    let lower = name.to_ascii_lowercase();
    lower.match_indices("rank").find_map(|(i, _)| {
        let rest = lower[i + 4..].trim_start_matches(['-', '_']);
        let digits: &str = &rest[..rest.bytes().take_while(u8::is_ascii_digit).count()];
        digits.parse().ok()
    })
}

/// Opens a file, gunzipping when it starts with the gzip magic.
pub fn open_maybe_gz(path: &Path) -> anyhow::Result<Box<dyn Read + Send>> {
    let mut r = open_plain_or_gz(path)?;
    let mut head = Vec::with_capacity(64);
    if r.by_ref().take(64).read_to_end(&mut head).is_err() {
        // The scanner says what reading it fails with.
        return open_plain_or_gz(path);
    }
    not_json(&head)?;
    Ok(Box::new(std::io::Cursor::new(head).chain(r)))
}

/// Refuses a file whose first bytes `head` cannot start JSON, saying what they look like and
/// what gaptop reads.
fn not_json(head: &[u8]) -> anyhow::Result<()> {
    match head.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{' | b'[') | None => Ok(()),
        Some(_) => anyhow::bail!(
            "not a trace or a recording ({}); {}",
            crate::text::looks_like(head),
            crate::text::READS
        ),
    }
}

/// The file, inflated when it is gzipped.
fn open_plain_or_gz(path: &Path) -> anyhow::Result<Box<dyn Read + Send>> {
    let mut f = std::fs::File::open(path).map_err(|e| anyhow::anyhow!("cannot open: {e}"))?;
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic)?;
    let f = std::fs::File::open(path)?;
    if n == 2 && magic == [0x1f, 0x8b] {
        Ok(Box::new(BufReader::with_capacity(
            1 << 20,
            flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, f)),
        )))
    } else {
        Ok(Box::new(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_from_file_names() {
        assert_eq!(rank_in_name("rank-0.json.gz"), Some(0));
        assert_eq!(rank_in_name("sampled_rank-1.json.gz"), Some(1));
        assert_eq!(rank_in_name("inference_rank_12.json.gz"), Some(12));
        assert_eq!(rank_in_name("Rank3.pt.trace.json"), Some(3));
        assert_eq!(rank_in_name("ranking_rank-4.json"), Some(4));
        assert_eq!(rank_in_name("worker0.1623143089861.pt.trace.json.gz"), None);
        assert_eq!(rank_in_name("rank.json"), None);
    }
}

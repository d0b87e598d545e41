//! Damaged recordings, deterministically: recordings of assets/ and tests/fixtures/ written as
//! GAPTOPR5 (closed by its end record), then cut at many bytes (plain and gzipped) and with bytes flipped, spliced in and
//! dropped. A cut opens with what came before it; a flip is either caught (skipped, counted,
//! named) or changes nothing; every older version still reads as it did. The issue that asked
//! for this found 13% of 1-byte flips in GAPTOPR3 recordings changing a report's figures
//! without a word.

mod support;

use std::io::Write;
use std::process::Command;

use gaptop_core::analysis::gaps::Config;

use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;
use gaptop_core::sources::recording::bytes::{HEAD, TAIL};
use gaptop_core::sources::recording::{read_into, ReadNote, Reader, Writer};
use serde_json::Value;

use support::{bin, fixture, root, tempdir};

/// A recording of any version, written again as this gaptop writes one (GAPTOPR5, closed).
fn as_r5(old: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut r = Reader::new(old).unwrap();
        let mut w = Writer::new(&mut out).unwrap();
        while let Some((conn, f)) = r.next_entry().unwrap() {
            w.frame(conn, &f).unwrap();
        }
        assert_eq!(r.note.cut, None);
        w.close().unwrap();
    }
    assert_eq!(&out[..8], gaptop_wire::RECORDING_MAGIC);
    out
}

/// The same recording as GAPTOPR4 wrote it: R5's records without the end record.
fn as_r4(r5: &[u8]) -> Vec<u8> {
    let bounds = records(r5);
    let mut b = r5[..bounds[bounds.len() - 2]].to_vec();
    b[7] = b'4';
    b
}

/// Where each R4 (and R5) record starts, and the end of the last.
fn records(r5: &[u8]) -> Vec<usize> {
    let mut at = vec![8];
    let mut i = 8;
    while i < r5.len() {
        i += HEAD + u32::from_le_bytes(r5[i + 4..i + 8].try_into().unwrap()) as usize + TAIL;
        at.push(i);
    }
    assert_eq!(i, r5.len());
    at
}

fn gzip(b: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(b).unwrap();
    e.finish().unwrap()
}

/// The report's figures: everything `report --format json` says but its notes and skipped
/// counts (which say what was damaged).
fn figures(st: &Store) -> Value {
    let (_, j) = gaptop::report::build(st, Window::all(), &Config::default(), 20, None);
    let mut v = serde_json::to_value(j).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("notes");
    o.remove("skipped");
    v
}

fn read(b: &[u8]) -> anyhow::Result<(Store, ReadNote)> {
    let mut st = Store::new(usize::MAX);
    let note = read_into(b, &mut st)?;
    Ok((st, note))
}

/// The recordings the tests damage: small, with names, stacks, NVTX ranges, several
/// connections.
fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    [
        ("fake_nvtx", fixture("fake_nvtx.rec")),
        (
            "planted_dump",
            root().join("collector/tests/data/planted_dump.rec"),
        ),
    ]
    .into_iter()
    .map(|(n, p)| (n, as_r5(&std::fs::read(p).unwrap())))
    .collect()
}

/// Every older version (the corpus of assets/ and tests/) reads into the same figures as the
/// same frames written as GAPTOPR4.
#[test]
fn older_versions_read_as_their_r4_copies() {
    let mut versions = std::collections::BTreeSet::new();
    for p in [
        "assets/planted.rec",
        "assets/decode_planted.rec",
        "tests/fixtures/fake_nvtx.rec",
        "tests/data/nsys/ctypes_gaptop.rec",
    ] {
        let old = std::fs::read(root().join(p)).unwrap();
        versions.insert(old[7]);
        let (a, na) = read(&old).unwrap();
        let (b, nb) = read(&as_r5(&old)).unwrap();
        assert_eq!(na.frames, nb.frames, "{p}");
        assert!(a.op_count() > 0, "{p}");
        assert_eq!(figures(&a), figures(&b), "{p}");
        // Without checksums or an end record, an old recording cannot be verified: it says
        // so, once; its GAPTOPR4 copy (checksums, no end record) reads the same.
        assert_eq!(na.closed, None, "{p}");
        let line = na.end_line().unwrap();
        assert!(line.contains("no checksums and no end record"), "{line}");
        assert!(line.contains("cannot be verified"), "{line}");
        let r4 = as_r4(&as_r5(&old));
        let (c, nc) = read(&r4).unwrap();
        assert_eq!(figures(&c), figures(&a), "{p} as R4");
        assert_eq!((nc.version, nc.closed, nc.damaged), (4, None, 0), "{p}");
        let line = nc.end_line().unwrap();
        assert!(line.contains("GAPTOPR4 recording (older than GAPTOPR5) has no end record"));
    }
    assert_eq!(versions.len(), 3, "R1, R2 and R3 are covered");
}

/// A recording cut at any byte opens with what came before the cut: never a panic, ops that
/// grow with the cut, the cut said where it is not between records. Gzipped, the same: what
/// inflated before the cut is what a plain file cut there holds.
#[test]
fn a_cut_recording_opens_with_what_came_before_plain_or_gzipped() {
    for (name, r5) in seeds() {
        let bounds = records(&r5);
        let (all, _) = read(&r5).unwrap();
        let ops_at = |cut: usize| read(&r5[..cut]).map_or(0, |(st, _)| st.op_count());
        let mut cuts: Vec<usize> = (0..200.min(r5.len())).collect();
        cuts.extend((0..300).map(|i| 200 + i * (r5.len() - 200) / 300));
        cuts.push(r5.len());
        let mut last = 0;
        for &cut in &cuts {
            let got = read(&r5[..cut]);
            if cut < 8 {
                assert!(got.is_err(), "{name}: cut {cut} inside the magic");
                continue;
            }
            let (st, note) = got.unwrap();
            assert!(st.op_count() >= last, "{name}: cut {cut} holds fewer ops");
            last = st.op_count();
            assert_eq!(note.damaged, 0, "{name}: a cut is not damage");
            // The last record is the end record, not a frame.
            let whole = bounds.iter().filter(|&&b| b <= cut).count() as u64 - 1;
            let frames = bounds.len() as u64 - 2;
            assert_eq!(note.frames, whole.min(frames), "{name}: cut {cut}");
            assert_eq!(note.cut.is_some(), !bounds.contains(&cut), "{name}: {cut}");
            // Only the whole file was closed: a cut between records reads as cut short.
            let complete = cut == r5.len();
            assert_eq!(note.closed, Some(complete), "{name}: cut {cut}");
            let line = note.end_line();
            if !complete && note.cut.is_none() {
                assert!(
                    line.as_deref().is_some_and(|l| l.contains("cut short")),
                    "{name}: cut {cut}: {line:?}"
                );
            } else {
                assert_eq!(line, None, "{name}: cut {cut}");
            }
        }
        assert_eq!(last, all.op_count());

        let gz = gzip(&r5);
        let mut last = 0;
        for cut in (0..gz.len())
            .step_by(gz.len() / 150 + 1)
            .chain([gz.len() - 1])
        {
            let Ok((st, note)) = read_gz(&gz[..cut]) else {
                continue;
            };
            let (at, why) = note.cut.clone().expect("a cut gzip stream is said");
            assert!(
                why.contains("deflate") || why.contains("end of file"),
                "{why}"
            );
            assert!(
                st.op_count() >= last,
                "{name}: gz cut {cut} holds fewer ops"
            );
            last = st.op_count();
            // The recording byte it stopped at holds what a plain file cut there does.
            assert_eq!(st.op_count(), ops_at(at as usize), "{name}: gz cut {cut}");
        }
        assert!(last > 0, "{name}: the gzipped cuts open");
    }
}

fn read_gz(b: &[u8]) -> anyhow::Result<(Store, ReadNote)> {
    let mut st = Store::new(usize::MAX);
    let note = read_into(flate2::read::GzDecoder::new(b), &mut st)?;
    Ok((st, note))
}

/// Any byte of a GAPTOPR4 recording flipped, in any bit: the flip is caught, costs exactly
/// the frame it fell in (a flipped length does not derail the frames after it), and is
/// counted; a flip in the magic makes the file no recording. No flip changes the figures
/// without a word.
#[test]
fn every_flip_is_caught_and_costs_one_frame() {
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    for (name, r5) in seeds() {
        let bounds = records(&r5);
        let (st, whole) = read(&r5).unwrap();
        let want = figures(&st);
        // The magic, every byte of the first records, and in every record a byte of its
        // header, one of its frame and one of its sum.
        let mut at: Vec<usize> = (0..bounds[4]).collect();
        for w in bounds.windows(2) {
            let (a, b) = (w[0], w[1]);
            at.extend([
                a + next(HEAD),
                a + HEAD + next(b - a - HEAD - TAIL),
                b - 1 - next(TAIL),
            ]);
        }
        let (mut caught, mut silent) = (0, 0);
        for &i in &at {
            let mut d = r5.clone();
            d[i] ^= 1 << next(8);
            let Ok((st, note)) = read(&d) else {
                assert!(i < 8, "{name}: flip at {i} fails the read");
                continue;
            };
            if note.damaged == 0 {
                silent += 1;
                assert_eq!(
                    figures(&st),
                    want,
                    "{name}: flip at {i} changed the figures silently"
                );
                continue;
            }
            caught += 1;
            let rec = bounds.partition_point(|&b| b <= i) - 1;
            // A flip in the end record costs no frame, and leaves the recording unclosed.
            let end = rec == bounds.len() - 2;
            let lost = if end { 0 } else { 1 };
            assert_eq!(note.frames, whole.frames - lost, "{name}: flip at {i}");
            assert_eq!(note.closed, Some(!end), "{name}: flip at {i}");
            assert_eq!(note.damaged, 1);
            assert_eq!(
                note.damaged_at,
                vec![(bounds[rec] as u64, bounds[rec + 1] as u64)],
                "{name}: flip at {i} names its record"
            );
            let line = note.damage_line().unwrap();
            assert!(
                line.starts_with("1 damaged frame skipped (bytes "),
                "{line}"
            );
        }
        assert_eq!(silent, 0, "{name}: every flip past the magic is caught");
        assert!(caught > 100, "{name}: {caught} flips tried");
    }
}

/// Bytes spliced in between records, records dropped and garbage over a stretch: the reader
/// passes over each stretch and reads every frame after it.
#[test]
fn spliced_and_dropped_bytes_are_passed_over() {
    let (_, r5) = seeds().remove(0);
    let bounds = records(&r5);
    let (_, whole) = read(&r5).unwrap();
    let mid = bounds[bounds.len() / 2];
    // 1,000 bytes of garbage between two records: one stretch, no frame lost.
    let mut d = r5[..mid].to_vec();
    d.extend((0..1000u32).map(|i| (i * 31 + 7) as u8));
    d.extend_from_slice(&r5[mid..]);
    let (_, note) = read(&d).unwrap();
    assert_eq!(note.frames, whole.frames);
    assert_eq!(note.damaged_at, vec![(mid as u64, mid as u64 + 1000)]);
    // A record's second half dropped: its header, which checks out, says a length that
    // runs into the records after it; only that record is lost.
    let (a, b) = (bounds[10], bounds[11]);
    let mut d = r5[..(a + b) / 2].to_vec();
    d.extend_from_slice(&r5[b..]);
    let (_, note) = read(&d).unwrap();
    assert_eq!(note.frames, whole.frames - 1);
    assert_eq!(note.damaged_at, vec![(a as u64, (a + b) as u64 / 2)]);
    // Every fourth record zeroed: each is a stretch of its own; the line names four and
    // counts the rest.
    let mut d = r5.clone();
    for w in bounds.windows(2).step_by(4) {
        d[w[0]..w[1]].fill(0);
    }
    let (_, note) = read(&d).unwrap();
    let n = bounds.windows(2).step_by(4).count() as u64;
    let end_zeroed = (bounds.len() - 2).is_multiple_of(4);
    assert_eq!(note.frames, whole.frames - n + end_zeroed as u64);
    let line = note.damage_line().unwrap();
    assert!(line.contains(&format!(" and {} more)", n - 4)), "{line}");
    assert!(line.len() < 300, "{line}");
}

/// What a user sees: a flipped recording opens, with one line on stderr naming the damage
/// and the same line among the report's notes; a gzipped recording cut short opens with a
/// line that says where it was cut.
#[test]
fn damage_is_said_on_stderr_and_in_the_notes() {
    let (_, r5) = seeds().remove(0);
    let bounds = records(&r5);
    let dir = tempdir("damage");
    let mut d = r5.clone();
    d[bounds[20] + 5] ^= 0x40;
    let flipped = dir.join("flipped.rec");
    std::fs::write(&flipped, &d).unwrap();
    let out = Command::new(bin())
        .args(["report", "--format", "json"])
        .arg(&flipped)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "1 damaged frame skipped (bytes {}..{})",
        bounds[20], bounds[21]
    );
    assert_eq!(
        err.trim_end(),
        format!("gaptop: {}: {want}", flipped.display())
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["notes"][0], format!("flipped.rec: {want}"));
    assert_eq!(j["skipped"]["damaged recording frames"], 1);

    let gz = gzip(&r5);
    let cut = dir.join("cut.rec.gz");
    std::fs::write(&cut, &gz[..gz.len() - 30]).unwrap();
    let out = Command::new(bin())
        .arg("report")
        .arg(&cut)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!(
            "gzip stream is cut at byte {} of the file",
            gz.len() - 30
        )),
        "{err}"
    );
}

/// A file cut inside the first bytes of a format gaptop reads says what it looks like, in
/// one line, and not that it is bad JSON.
#[test]
fn a_file_cut_inside_its_magic_says_what_it_looks_like() {
    let dir = tempdir("magic");
    let gz = gzip(b"GAPTOPR4");
    for (name, b, want) in [
        (
            "a.rec",
            &b"GAPTOPR"[..],
            "a gaptop recording cut inside its 8-byte header",
        ),
        (
            "b.sqlite",
            b"SQLite form",
            "an SQLite database cut inside its 16-byte header",
        ),
        (
            "c.rec.gz",
            &gz[..5],
            "a gzip file cut inside its 10-byte header",
        ),
        (
            "d.rec.gz",
            &gzip(b"GAPT"),
            "a gzip file that inflates to a gaptop recording cut",
        ),
        (
            "e.rec",
            b"GAPTOPR8xxxxxxx",
            "a gaptop recording of a version this gaptop does not read",
        ),
    ] {
        let p = dir.join(name);
        std::fs::write(&p, b).unwrap();
        let out = Command::new(bin()).arg("report").arg(&p).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}");
        assert_eq!(err.trim_end().lines().count(), 1, "{name}: {err}");
        assert!(err.len() <= 300, "{name}: {err}");
        assert!(err.contains(want), "{name}: {err}");
        assert!(!err.contains("JSON"), "{name}: {err}");
    }
}

/// A header that checks out (forged, or right by chance) but claims more bytes than are left
/// costs only itself: the records after it are read, the end record too.
#[test]
fn a_header_claiming_past_the_end_costs_only_itself() {
    for (name, r5) in seeds() {
        let bounds = records(&r5);
        let (st, whole) = read(&r5).unwrap();
        let mut forged = Vec::new();
        let len = (r5.len() as u32 + 100).to_le_bytes();
        gaptop_core::sources::recording::bytes::put_record(
            &mut forged,
            1,
            &[len[0], len[1], len[2], len[3], gaptop_wire::TAG_OPS],
        );
        for at in [bounds[0], bounds[3], bounds[bounds.len() - 2]] {
            let mut d = r5[..at].to_vec();
            d.extend_from_slice(&forged[..HEAD]);
            d.extend_from_slice(&r5[at..]);
            let (got, note) = read(&d).unwrap();
            assert_eq!(note.frames, whole.frames, "{name}: forged at {at}");
            assert_eq!(note.damaged_at, vec![(at as u64, (at + HEAD) as u64)]);
            assert_eq!(note.closed, Some(true), "{name}: forged at {at}");
            assert_eq!(figures(&got), figures(&st), "{name}: forged at {at}");
        }
    }
}

/// A whole record taken out cleanly (no checksum fails) is told by the end record's count.
#[test]
fn a_record_taken_out_whole_is_told_by_the_end_count() {
    let (_, r5) = seeds().remove(0);
    let bounds = records(&r5);
    let (_, whole) = read(&r5).unwrap();
    let mut d = r5[..bounds[5]].to_vec();
    d.extend_from_slice(&r5[bounds[6]..]);
    let (_, note) = read(&d).unwrap();
    assert_eq!(note.frames, whole.frames - 1);
    assert_eq!(note.counted, Some(whole.frames));
    let line = note.end_line().unwrap();
    assert!(line.contains("records are missing"), "{line}");
}

/// What a user sees of a recording cut between records (the `.part` of a killed `record`):
/// it opens, exit 0, with one line saying it was cut short, in the notes too; an old
/// recording says once that it cannot be verified.
#[test]
fn a_recording_cut_between_records_says_cut_short() {
    let (_, r5) = seeds().remove(0);
    let bounds = records(&r5);
    let dir = tempdir("unclosed");
    let part = dir.join("run.rec.gaptop-4999999-0.part");
    std::fs::write(&part, &r5[..bounds[bounds.len() - 3]]).unwrap();
    let out = Command::new(bin())
        .args(["report", "--format", "json"])
        .arg(&part)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("recording cut short: it was never closed"),
        "{err}"
    );
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(j["notes"][0].as_str().unwrap().contains("cut short"), "{j}");

    let out = Command::new(bin())
        .arg("report")
        .arg(root().join("assets/planted.rec"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches("cannot be verified").count(), 1, "{err}");
}

//! Recordings: the frames of every collector connection, in arrival order, tagged with the
//! connection they came on.
//!
//! ```text
//! file := "GAPTOPR5" record* end each frame checked (`bytes`), the end record written at a
//!                                clean close; GAPTOPR4 (the same without the end), GAPTOPR3,
//!                                GAPTOPR2 (without NVTX ranges) and GAPTOPR1 (without CPU
//!                                samples either), whose records are (conn:u32 frame), are
//!                                read too
//! ```
//! A GAPTOPR5 recording without its end record was not closed (its writer was killed, or it
//! is a `.part` still being written): it reads with a warning that it was cut short, wherever
//! the cut fell. An older one cannot be verified complete, and says so once.
//! A recording cut short at any byte still opens: everything before the cut is kept and the
//! loss is reported, plain or gzipped. In a GAPTOPR4 recording a damaged frame is skipped,
//! the reader goes on at the next record whose header checks out, and the damage is counted
//! in the store's `skipped`, said on stderr and in the report's notes; an older recording
//! ends at its first bad frame, as it always did.

use std::io::{BufWriter, Read, Write};
use std::path::Path;

use gaptop_wire::{Decoder, Frame, RECORDING_MAGIC};

use super::ingest::Ingest;
pub mod bytes;

use crate::model::store::Store;
use bytes::{Window, HEAD, TAIL};

pub struct Writer<W: Write> {
    w: BufWriter<W>,
    frame: Vec<u8>,
    buf: Vec<u8>,
    pub bytes: u64,
    /// Records written.
    frames: u64,
}

impl<W: Write> Writer<W> {
    pub fn new(w: W) -> std::io::Result<Self> {
        let mut w = BufWriter::with_capacity(1 << 20, w);
        w.write_all(RECORDING_MAGIC)?;
        Ok(Writer {
            w,
            frame: Vec::new(),
            buf: Vec::new(),
            bytes: 8,
            frames: 0,
        })
    }

    pub fn frame(&mut self, conn: u32, f: &Frame) -> std::io::Result<()> {
        self.frame.clear();
        gaptop_wire::encode(&mut self.frame, f);
        self.buf.clear();
        bytes::put_record(&mut self.buf, conn, &self.frame);
        self.w.write_all(&self.buf)?;
        self.bytes += self.buf.len() as u64;
        self.frames += 1;
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }

    /// Ends the recording with its end record (the count of records before it), flushed:
    /// what is written after this is not part of it. The output, to finish (a gzip stream).
    pub fn close(mut self) -> std::io::Result<W> {
        let mut end = 9u32.to_le_bytes().to_vec();
        end.push(gaptop_wire::TAG_END);
        end.extend_from_slice(&self.frames.to_le_bytes());
        self.buf.clear();
        bytes::put_record(&mut self.buf, 0, &end);
        self.w.write_all(&self.buf)?;
        self.bytes += self.buf.len() as u64;
        self.w.into_inner().map_err(|e| e.into_error())
    }
}

/// Where a recording's bytes go: its file, or a gzip stream into it for a name that ends in
/// `.gz` (which every reader inflates as it reads).
pub enum Sink {
    Plain(std::fs::File),
    Gzip(flate2::write::GzEncoder<std::fs::File>),
}

impl Sink {
    pub fn new(file: std::fs::File, path: &Path) -> Sink {
        if path.extension().is_some_and(|e| e == "gz") {
            Sink::Gzip(flate2::write::GzEncoder::new(
                file,
                flate2::Compression::default(),
            ))
        } else {
            Sink::Plain(file)
        }
    }

    /// Writes what is still buffered (a gzip stream's end).
    pub fn finish(self) -> std::io::Result<()> {
        match self {
            Sink::Plain(mut f) => f.flush(),
            Sink::Gzip(g) => g.finish().map(|_| ()),
        }
    }
}

impl Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        match self {
            Sink::Plain(f) => f.write(b),
            Sink::Gzip(g) => g.write(b),
        }
    }
    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Sink::Plain(f) => f.flush(),
            Sink::Gzip(g) => g.flush(),
        }
    }
}

/// How many stretches of damaged bytes a note names.
const SPANS_NAMED: usize = 4;

/// What reading a recording found besides its records.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadNote {
    pub frames: u64,
    /// Set when the file ends inside a record or (before GAPTOPR4) holds a bad frame: byte
    /// offset and why.
    pub cut: Option<(u64, String)>,
    /// Why the input stopped before its end, when a read failed (a gzip stream cut short).
    pub stopped: Option<String>,
    /// Damaged frames skipped (GAPTOPR4): a frame that fails its sum or does not decode, or
    /// the bytes passed over from a damaged header to the next header that checks out.
    pub damaged: u64,
    /// The first [`SPANS_NAMED`] stretches of damaged bytes, `[from, to)`, and how many
    /// stretches there are in all.
    pub damaged_at: Vec<(u64, u64)>,
    pub spans: u64,
    last_end: u64,
    /// GAPTOPR5 on: whether the end record closed the recording (None before GAPTOPR5,
    /// which cannot say).
    pub closed: Option<bool>,
    /// Records the end record counts, where that is not what was read (none damaged).
    pub counted: Option<u64>,
    /// The format's version, by the magic.
    pub version: u8,
}

impl ReadNote {
    fn damage(&mut self, from: u64, to: u64) {
        self.damaged += 1;
        let joins = self.spans > 0 && self.last_end == from;
        self.last_end = to;
        if joins {
            if self.spans as usize == self.damaged_at.len() {
                if let Some(last) = self.damaged_at.last_mut() {
                    last.1 = to;
                }
            }
            return;
        }
        self.spans += 1;
        if self.damaged_at.len() < SPANS_NAMED {
            self.damaged_at.push((from, to));
        }
    }

    /// One line that says what damage was skipped, if any.
    pub fn damage_line(&self) -> Option<String> {
        if self.damaged == 0 {
            return None;
        }
        let spans: Vec<String> = self
            .damaged_at
            .iter()
            .map(|(a, b)| format!("{a}..{b}"))
            .collect();
        let more = match self.spans - self.damaged_at.len() as u64 {
            0 => String::new(),
            n => format!(" and {n} more"),
        };
        Some(format!(
            "{} damaged frame{} skipped (bytes {}{more})",
            self.damaged,
            if self.damaged == 1 { "" } else { "s" },
            spans.join(", ")
        ))
    }
}

/// One step of reading.
enum Step {
    Frame(u32, Frame),
    /// The end record (GAPTOPR5), with the count of records before it.
    Closed(u64),
    End,
    /// The input ends inside a record (or, before GAPTOPR4, holds a bad frame) at this offset.
    Cut(u64, String),
    /// Damaged bytes were passed over, `[from, to)`.
    Damaged(u64, u64),
}

/// Reads a recording's entries in order. Only a missing magic is an error; a cut ends the
/// entries and damage is passed over, both described in `note`.
pub struct Reader<R: Read> {
    w: Window<R>,
    /// The format's version, by the magic: 1 to 4.
    pub version: u8,
    decoders: std::collections::HashMap<u32, Decoder>,
    /// Bytes of frames that failed their sums.
    failed: u64,
    pub note: ReadNote,
}

/// Bytes of failed frames checked before the budget grows with the input (see
/// `Reader::next_checked`).
const FAILED_BUDGET: u64 = 16 << 20;

impl<R: Read> Reader<R> {
    pub fn new(r: R) -> anyhow::Result<Self> {
        let mut w = Window::new(r, 0);
        let magic = w.peek(8);
        if magic.len() < 8 {
            anyhow::bail!("not a gaptop recording (too short)");
        }
        let Some(v) = gaptop_wire::RECORDING_MAGICS
            .iter()
            .position(|m| m[..] == *magic)
        else {
            anyhow::bail!("not a gaptop recording (bad magic)");
        };
        w.skip(8);
        let version = v as u8 + 1;
        Ok(Reader {
            w,
            version,
            decoders: Default::default(),
            failed: 0,
            note: ReadNote {
                closed: (version >= 5).then_some(false),
                version,
                ..Default::default()
            },
        })
    }

    /// The next (connection, frame), or None at the end or at a cut.
    pub fn next_entry(&mut self) -> anyhow::Result<Option<(u32, Frame)>> {
        while self.note.cut.is_none() {
            let step = if self.version >= 4 {
                self.next_checked()
            } else {
                self.next_plain()
            };
            match step {
                Step::Frame(conn, f) => {
                    self.note.frames += 1;
                    if self.version >= 5 {
                        // Frames after an end record: the file goes on past its end.
                        self.note.closed = Some(false);
                    }
                    return Ok(Some((conn, f)));
                }
                Step::Closed(n) => {
                    self.note.closed = Some(true);
                    if n != self.note.frames && self.note.damaged == 0 {
                        self.note.counted = Some(n);
                    }
                }
                Step::Damaged(from, to) => self.note.damage(from, to),
                Step::End => {
                    self.note.stopped = self.w.error.clone();
                    if let Some(e) = &self.w.error {
                        self.note.cut = Some((self.w.offset(), format!("input stops: {e}")));
                    }
                    return Ok(None);
                }
                Step::Cut(at, why) => {
                    self.note.stopped = self.w.error.clone();
                    let why = match &self.w.error {
                        Some(e) => format!("{why}: {e}"),
                        None => why,
                    };
                    self.note.cut = Some((at, why));
                }
            }
        }
        Ok(None)
    }

    /// A record of GAPTOPR1 to 3: no checks, so the first bad frame ends the recording.
    fn next_plain(&mut self) -> Step {
        let at = self.w.offset();
        let head = self.w.peek(8);
        match head.len() {
            0 => return Step::End,
            8 => {}
            _ => return Step::Cut(at, "file ends inside a record header".into()),
        }
        let conn = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if len == 0 || len > gaptop_wire::MAX_FRAME {
            return Step::Cut(at, format!("bad frame length {len}"));
        }
        let rec = self.w.peek(8 + len);
        if rec.len() < 8 + len {
            return Step::Cut(at, "file ends inside a frame".into());
        }
        let d = self.decoders.entry(conn).or_default();
        d.feed(&rec[4..]);
        match d.next_frame() {
            Ok(Some(f)) => {
                self.w.skip(8 + len);
                Step::Frame(conn, f)
            }
            Ok(None) => unreachable!("a whole frame was fed"),
            Err(e) => Step::Cut(at, e.to_string()),
        }
    }

    /// A record of GAPTOPR4: a header or frame that fails its check is passed over to the
    /// next header that holds; a frame that holds what its tag does not is skipped.
    fn next_checked(&mut self) -> Step {
        let at = self.w.offset();
        let h = self.w.peek(HEAD);
        if h.is_empty() {
            return Step::End;
        }
        if h.len() < HEAD {
            return Step::Cut(at, "file ends inside a record header".into());
        }
        let conn = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let Some(len) = bytes::header_len(h) else {
            bytes::resync(&mut self.w);
            return Step::Damaged(at, self.w.offset());
        };
        let n = HEAD + len + TAIL;
        let r = self.w.peek(n);
        if r.len() < n {
            // The file ends inside this frame, or a header that checks out by chance (or
            // forged) claims more than is left: where another record follows, this one is
            // damage and reading goes on there.
            bytes::resync(&mut self.w);
            if self.w.peek(1).is_empty() {
                return Step::Cut(at, "file ends inside a frame".into());
            }
            return Step::Damaged(at, self.w.offset());
        }
        if !bytes::frame_ok(r) {
            // The header may be right and the frame damaged, or the header right by chance
            // (bytes dropped after it): the next header that checks out is the next record.
            // Frames that fail cost a CRC of their length each; past a budget that grows with
            // the input, a failed frame is passed over by its length, so that headers forged
            // one after another cannot make the work grow with the square of the input.
            self.failed += n as u64;
            if self.failed <= FAILED_BUDGET + 2 * at {
                bytes::resync(&mut self.w);
                return Step::Damaged(at, self.w.offset());
            }
            self.w.skip(n);
            return Step::Damaged(at, at + n as u64);
        }
        if self.version >= 5 && r[HEAD] == gaptop_wire::TAG_END && len == 9 {
            let count = u64::from_le_bytes(r[HEAD + 1..HEAD + 9].try_into().unwrap_or_default());
            self.w.skip(n);
            return Step::Closed(count);
        }
        // A frame as it was written that does not decode is passed over too.
        let frame = gaptop_wire::decode_payload(r[HEAD], &r[HEAD + 1..HEAD + len]);
        self.w.skip(n);
        match frame {
            Ok(f) => Step::Frame(conn, f),
            Err(_) => Step::Damaged(at, at + n as u64),
        }
    }
}

/// Reads a recording into `store`. Only a missing magic is an error; a cut ends the read and
/// damage is passed over, both reported in the note.
pub fn read_into(r: impl Read, store: &mut Store) -> anyhow::Result<ReadNote> {
    let note = read_frames(r, store)?;
    store.finish_bulk();
    Ok(note)
}

/// Applies a recording's frames to `store` without finishing the bulk load. Its connections
/// are its own: a store that already holds other recordings' processes keeps them apart, even
/// where their pids are the same (nodes of one job).
fn read_frames(r: impl Read, store: &mut Store) -> anyhow::Result<ReadNote> {
    let mut reader = Reader::new(r)?;
    let mut ingest = Ingest::after(store);
    while let Some((conn, f)) = reader.next_entry()? {
        ingest.apply(store, conn, f);
    }
    Ok(reader.note)
}

pub fn load(path: &Path, budget: usize) -> anyhow::Result<Store> {
    let mut store = Store::new(budget);
    store.source = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let frames = read_file(path, &mut store)?;
    store.finish_bulk();
    if store.total_ops == 0 {
        anyhow::bail!("recording holds no GPU ops ({frames} frames)");
    }
    Ok(store)
}

/// Counts the bytes read through it (how far a gzip decoder got in its file).
struct Counted<R> {
    r: R,
    n: std::rc::Rc<std::cell::Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        let k = self.r.read(b)?;
        self.n.set(self.n.get() + k as u64);
        Ok(k)
    }
}

/// Reads one recording file (plain or gzipped) into `store`, which finishes the bulk load
/// later. A cut and any damage are kept in the store's skipped counts and notes and said on
/// stderr. Returns the frames read.
pub fn read_file(path: &Path, store: &mut Store) -> anyhow::Result<u64> {
    let f = std::fs::File::open(path)?;
    // A recording someone gzipped reads as it is.
    let mut head = [0u8; 2];
    let gz = std::fs::File::open(path)?.read(&mut head)? == 2 && head == [0x1f, 0x8b];
    let inflated = std::rc::Rc::new(std::cell::Cell::new(0));
    let size = f.metadata().map(|m| m.len()).unwrap_or(0);
    let note = if gz {
        let counted = Counted {
            r: f,
            n: inflated.clone(),
        };
        read_frames(flate2::read::GzDecoder::new(counted), store)?
    } else {
        read_frames(f, store)?
    };
    let file = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if let Some(line) = note.damage_line() {
        *store
            .skipped
            .entry("damaged recording frames".into())
            .or_insert(0) += note.damaged;
        crate::say!("gaptop: {}: {line}", path.display());
        store.notes.push(format!("{file}: {line}"));
    }
    if let Some((at, why)) = &note.cut {
        store
            .skipped
            .insert(format!("recording cut at byte {at}: {why}"), 1);
        let line = match (&note.stopped, gz) {
            (Some(e), true) => {
                let read = inflated.get();
                let how = if read >= size { "is cut" } else { "is damaged" };
                format!(
                    "gzip stream {how} at byte {read} of the file ({e}); showing the {} frames inflated before it (recording byte {at})",
                    note.frames
                )
            }
            _ => format!(
                "recording cut short at byte {at} ({why}); showing the {} frames before it",
                note.frames
            ),
        };
        crate::say!("gaptop: {}: {line}", path.display());
        store.notes.push(format!("{file}: {line}"));
    }
    if let Some(line) = note.end_line() {
        if note.closed.is_none() {
            store.unverified.push(format!("{}: {line}", path.display()));
        } else {
            store.skipped.insert(line.clone(), 1);
            store.notes.push(format!("{file}: {line}"));
            crate::say!("gaptop: {}: {line}", path.display());
        }
    }
    Ok(note.frames)
}

impl ReadNote {
    /// What the recording's end says, when it says something: not closed (GAPTOPR5 cut
    /// between records), records missing by its count, or (before GAPTOPR5) that it cannot
    /// be verified. A cut inside a record is said by the cut's own line.
    pub fn end_line(&self) -> Option<String> {
        let v = self.version;
        match (self.closed, self.counted) {
            (Some(false), _) if self.cut.is_none() => Some(format!(
                "recording cut short: it was never closed (its writer was stopped, or is still \
                 writing); showing the {} frames it holds",
                self.frames
            )),
            (Some(true), Some(n)) => Some(format!(
                "the recording's end counts {n} records but {} were read: records are missing",
                self.frames
            )),
            (None, _) if v < 4 => Some(format!(
                "a GAPTOPR{v} recording (older than GAPTOPR5) has no checksums and no end \
                 record: damage, or a cut between records, cannot be verified"
            )),
            (None, _) => Some(format!(
                "a GAPTOPR{v} recording (older than GAPTOPR5) has no end record: a cut between \
                 records cannot be verified"
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use gaptop_wire::{Hello, Op};

    /// A writer that has written a connection's hello and the name of kernel id 1.
    fn started<W: Write>(out: W) -> Writer<W> {
        let mut w = Writer::new(out).unwrap();
        w.frame(1, &Frame::Hello(Hello::new(7, -1, "t"))).unwrap();
        let name = Frame::Name {
            id: 1,
            text: "k".into(),
        };
        w.frame(1, &name).unwrap();
        w
    }

    fn sample() -> Vec<u8> {
        let mut w = started(Vec::new());
        for i in 0..20u64 {
            let op = Op {
                start: 1_000 * i,
                end: 1_000 * i + 400,
                corr: i as u32 + 1,
                name: 1,
                stream: 7,
                ..Default::default()
            };
            w.frame(1, &Frame::Ops(vec![op])).unwrap();
        }
        w.flush().unwrap();
        w.w.into_inner().map_err(|_| "flush").unwrap()
    }

    #[test]
    fn a_recording_cut_at_any_byte_opens_minus_its_tail() {
        let full = sample();
        // Record boundaries: a cut there loses whole records and is not damage.
        let mut bounds = vec![8usize];
        let mut i = 8;
        while i < full.len() {
            let len = u32::from_le_bytes(full[i + 4..i + 8].try_into().unwrap()) as usize;
            i += HEAD + len + TAIL;
            bounds.push(i);
        }
        let mut last = 0;
        for cut in 8..=full.len() {
            let mut st = Store::default();
            let note = read_into(&full[..cut], &mut st).unwrap();
            let ops = st.op_count();
            assert!(ops >= last, "cut {cut}: fewer ops than a shorter cut");
            last = ops;
            let whole = bounds.iter().filter(|&&b| b <= cut).count() as u64 - 1;
            assert_eq!(
                note.frames, whole,
                "cut {cut}: every whole record before it is read"
            );
            assert_eq!(
                note.cut.is_some(),
                !bounds.contains(&cut),
                "cut {cut}: damage reported"
            );
        }
        assert_eq!(last, 20);
        assert!(read_into(&full[..5], &mut Store::default()).is_err());
    }

    /// Headers that check out, forged every 12 bytes, each claiming a frame of 4 MiB that
    /// fails its sum: read in time that grows with the input, not with its square.
    #[test]
    fn forged_headers_cost_linear_work() {
        let mut b = RECORDING_MAGIC.to_vec();
        let mut head = Vec::new();
        bytes::put_record(&mut head, 1, &[0, 0, 0x40, 0, gaptop_wire::TAG_OPS]);
        while b.len() < 24 << 20 {
            b.extend_from_slice(&head[..HEAD]);
        }
        let t = std::time::Instant::now();
        let mut st = Store::default();
        let note = read_into(&b[..], &mut st).unwrap();
        assert_eq!(note.frames, 0);
        assert!(note.damaged > 1);
        assert!(t.elapsed().as_secs() < 20, "{:?}", t.elapsed());
    }

    /// A disk that fills: writes fail after N bytes. The error reaches the caller, and what was
    /// flushed before it reads back.
    #[test]
    fn a_full_disk_is_reported_and_what_was_written_stays_readable() {
        struct Full {
            data: std::rc::Rc<std::cell::RefCell<Vec<u8>>>,
            room: usize,
        }
        impl Write for Full {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let mut d = self.data.borrow_mut();
                let n = b.len().min(self.room - d.len().min(self.room));
                if n == 0 {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::StorageFull,
                        "disk full",
                    ));
                }
                d.extend_from_slice(&b[..n]);
                Ok(n)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let data = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
        let mut w = started(Full {
            data: data.clone(),
            room: 300,
        });
        let mut err = None;
        for i in 0..100u64 {
            let op = Op {
                start: i * 10,
                end: i * 10 + 5,
                name: 1,
                ..Default::default()
            };
            if let Err(e) = w.frame(1, &Frame::Ops(vec![op])).and_then(|_| w.flush()) {
                err = Some(e);
                break;
            }
        }
        let e = err.expect("the full disk is reported");
        assert_eq!(e.kind(), std::io::ErrorKind::StorageFull);
        let bytes = data.borrow().clone();
        let mut st = Store::default();
        let note = read_into(&bytes[..], &mut st).unwrap();
        assert!(st.op_count() > 0, "ops before the disk filled are kept");
        assert!(note.cut.is_some(), "the cut is reported");
    }
}

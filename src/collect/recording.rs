//! Recordings: the frames of every collector connection, in arrival order, tagged with the
//! connection they came on.
//!
//! ```text
//! file := "GAPTOPR3" (conn:u32 frame)*      (GAPTOPR2, without NVTX ranges, and GAPTOPR1,
//!                                            without CPU samples either, are read too)
//! ```
//! A recording cut short at any byte still opens: everything before the cut is kept and the
//! loss is reported.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;

use gaptop_wire::{Decoder, Frame, RECORDING_MAGIC};

use super::ingest::Ingest;
use super::store::Store;

pub struct Writer<W: Write> {
    w: BufWriter<W>,
    buf: Vec<u8>,
    pub bytes: u64,
}

impl<W: Write> Writer<W> {
    pub fn new(w: W) -> std::io::Result<Self> {
        let mut w = BufWriter::with_capacity(1 << 20, w);
        w.write_all(RECORDING_MAGIC)?;
        Ok(Writer {
            w,
            buf: Vec::new(),
            bytes: 8,
        })
    }

    pub fn frame(&mut self, conn: u32, f: &Frame) -> std::io::Result<()> {
        self.buf.clear();
        self.buf.extend_from_slice(&conn.to_le_bytes());
        gaptop_wire::encode(&mut self.buf, f);
        self.w.write_all(&self.buf)?;
        self.bytes += self.buf.len() as u64;
        Ok(())
    }

    pub fn flush(&mut self) -> std::io::Result<()> {
        self.w.flush()
    }
}

/// What reading a recording found besides its records.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadNote {
    pub frames: u64,
    /// Set when the file ends inside a record or holds a bad frame: byte offset and why.
    pub cut: Option<(u64, String)>,
}

/// Reads a recording's entries in order. Only a missing magic is an error; damage later on
/// ends the entries and is described in `note`.
pub struct Reader<R: Read> {
    r: BufReader<R>,
    offset: u64,
    decoders: std::collections::HashMap<u32, Decoder>,
    pub note: ReadNote,
}

impl<R: Read> Reader<R> {
    pub fn new(r: R) -> anyhow::Result<Self> {
        let mut r = BufReader::with_capacity(1 << 20, r);
        let mut magic = [0u8; 8];
        r.read_exact(&mut magic)
            .map_err(|_| anyhow::anyhow!("not a gaptop recording (too short)"))?;
        if !gaptop_wire::RECORDING_MAGICS.contains(&&magic) {
            anyhow::bail!("not a gaptop recording (bad magic)");
        }
        Ok(Reader {
            r,
            offset: 8,
            decoders: Default::default(),
            note: ReadNote::default(),
        })
    }

    /// The next (connection, frame), or None at the end or at the first damage.
    pub fn next_entry(&mut self) -> anyhow::Result<Option<(u32, Frame)>> {
        if self.note.cut.is_some() {
            return Ok(None);
        }
        let at = self.offset;
        let mut head = [0u8; 8];
        match read_full(&mut self.r, &mut head)? {
            0 => return Ok(None),
            8 => {}
            _ => return self.cut(at, "file ends inside a record header".into()),
        }
        let conn = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if len == 0 || len > gaptop_wire::MAX_FRAME {
            return self.cut(at, format!("bad frame length {len}"));
        }
        let mut body = vec![0u8; len];
        if read_full(&mut self.r, &mut body)? != len {
            return self.cut(at, "file ends inside a frame".into());
        }
        let d = self.decoders.entry(conn).or_default();
        d.feed(&head[4..]);
        d.feed(&body);
        match d.next_frame() {
            Ok(Some(f)) => {
                self.offset += 8 + len as u64;
                self.note.frames += 1;
                Ok(Some((conn, f)))
            }
            Ok(None) => unreachable!("a whole frame was fed"),
            Err(e) => self.cut(at, e.to_string()),
        }
    }

    fn cut(&mut self, at: u64, why: String) -> anyhow::Result<Option<(u32, Frame)>> {
        self.note.cut = Some((at, why));
        Ok(None)
    }
}

/// Reads a recording into `store`. Only a missing magic is an error; damage later on ends the
/// read and is reported in the note.
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

fn read_full(r: &mut impl Read, buf: &mut [u8]) -> anyhow::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(n)
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

/// Reads one recording file (plain or gzipped) into `store`, which finishes the bulk load
/// later; a cut in it is kept in the store's skipped counts and said on stderr. Returns the
/// frames read.
pub fn read_file(path: &Path, store: &mut Store) -> anyhow::Result<u64> {
    let f = std::fs::File::open(path)?;
    // A recording someone gzipped reads as it is.
    let mut head = [0u8; 2];
    let gz = std::fs::File::open(path)?.read(&mut head)? == 2 && head == [0x1f, 0x8b];
    let note = if gz {
        read_frames(flate2::read::GzDecoder::new(f), store)?
    } else {
        read_frames(f, store)?
    };
    if let Some((at, why)) = note.cut {
        store
            .skipped
            .insert(format!("recording cut at byte {at}: {why}"), 1);
        eprintln!(
            "gaptop: {}: recording cut short at byte {at} ({why}); showing the {} frames before it",
            path.display(),
            note.frames
        );
    }
    Ok(note.frames)
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
            i += 8 + len;
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

//! Recordings: the frames of every collector connection, in arrival order, tagged with the
//! connection they came on.
//!
//! ```text
//! file := "GAPTOPR1" (conn:u32 frame)*
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

/// Reads a recording into `store`. Only a missing magic is an error; damage later on ends the
/// read and is reported in the note.
pub fn read_into(r: impl Read, store: &mut Store) -> anyhow::Result<ReadNote> {
    let mut r = BufReader::with_capacity(1 << 20, r);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .map_err(|_| anyhow::anyhow!("not a gaptop recording (too short)"))?;
    if &magic != RECORDING_MAGIC {
        anyhow::bail!("not a gaptop recording (bad magic)");
    }
    let mut ingest = Ingest::new();
    let mut note = ReadNote::default();
    let mut offset = 8u64;
    let mut decoders: std::collections::HashMap<u32, Decoder> = Default::default();
    loop {
        let mut head = [0u8; 8];
        match read_full(&mut r, &mut head)? {
            0 => break,
            8 => {}
            _ => {
                note.cut = Some((offset, "file ends inside a record header".into()));
                break;
            }
        }
        let conn = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let len = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if len == 0 || len > gaptop_wire::MAX_FRAME {
            note.cut = Some((offset, format!("bad frame length {len}")));
            break;
        }
        let mut body = vec![0u8; len];
        if read_full(&mut r, &mut body)? != len {
            note.cut = Some((offset, "file ends inside a frame".into()));
            break;
        }
        let d = decoders.entry(conn).or_default();
        d.feed(&head[4..]);
        d.feed(&body);
        match d.next_frame() {
            Ok(Some(f)) => {
                ingest.apply(store, conn, f);
                note.frames += 1;
            }
            Ok(None) => unreachable!("a whole frame was fed"),
            Err(e) => {
                note.cut = Some((offset, e.to_string()));
                break;
            }
        }
        offset += 8 + len as u64;
    }
    store.finish_bulk();
    Ok(note)
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
    let f = std::fs::File::open(path)?;
    let note = read_into(f, &mut store)?;
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
    if store.total_ops == 0 {
        anyhow::bail!("recording holds no GPU ops ({} frames)", note.frames);
    }
    Ok(store)
}

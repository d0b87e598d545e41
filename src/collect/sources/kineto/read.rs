//! The reading of a trace: one thread splits the JSON into events, a second finds each
//! event's members, and the caller's reads them into the store, so the three overlap. And
//! the loads built on it: a reader or a file into a new store.

use std::io::Read;
use std::path::Path;

use super::builder::Builder;
use super::files::{file_label, open_maybe_gz, rank_in_name, Header, MAX_BASE_NS};
use super::members::{spans, Spans};
use crate::collect::model::store::Store;
use crate::collect::sources::jsonscan::Scanner;

/// A run of whole events copied out of the splitter's buffer: bytes, each event's range and
/// offset in the trace, and where its members lie when the splitter read them.
struct Batch {
    bytes: Vec<u8>,
    events: Vec<(usize, usize, u64)>,
    spans: Vec<Option<Spans>>,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            bytes: Vec::with_capacity(2 << 20),
            events: Vec::new(),
            spans: Vec::new(),
        }
    }
}

/// What the splitter's thread hands over: runs of events, then the header it saw around them.
enum Piece {
    Events(Batch),
    Header(Header),
}

impl Builder {
    /// Reads one trace into the current file, returning its header. One thread splits the
    /// JSON into events, a second finds each event's members, and this one reads them into
    /// the store: the three parts of the work overlap.
    pub fn read(&mut self, r: impl Read + Send) -> anyhow::Result<Header> {
        let (tx, split) = std::sync::mpsc::sync_channel::<Result<Piece, String>>(2);
        let (read, rx) = std::sync::mpsc::sync_channel::<Result<Piece, String>>(2);
        let parsed: Result<Header, String> = std::thread::scope(|scope| {
            scope.spawn(move || {
                let mut batch = Batch::new();
                let mut header = Header::default();
                let res = Scanner::new(r).for_each_event_and_member(
                    |ev, at| {
                        let s = batch.bytes.len();
                        batch.bytes.extend_from_slice(ev);
                        batch.events.push((s, batch.bytes.len(), at));
                        if batch.bytes.len() >= 2 << 20 {
                            let full = std::mem::replace(&mut batch, Batch::new());
                            tx.send(Ok(Piece::Events(full)))
                                .map_err(|_| "stopped".to_string())?;
                        }
                        Ok(())
                    },
                    |k, v| header.member(k, v),
                );
                let _ = tx.send(Ok(Piece::Events(batch)));
                let _ = tx.send(match res {
                    Ok(_) => Ok(Piece::Header(header)),
                    Err(e) => Err(e.to_string()),
                });
            });
            // A second thread finds where each event's members lie, for this one's turn.
            scope.spawn(move || {
                for mut msg in split {
                    if let Ok(Piece::Events(b)) = &mut msg {
                        b.spans = b
                            .events
                            .iter()
                            .map(|&(s, e, _)| spans(&b.bytes[s..e]))
                            .collect();
                    }
                    if read.send(msg).is_err() {
                        break;
                    }
                }
            });
            let mut header = Header::default();
            for msg in rx {
                match msg? {
                    Piece::Events(batch) => {
                        for (i, &(s, e, at)) in batch.events.iter().enumerate() {
                            let ev = &batch.bytes[s..e];
                            match batch.spans.get(i).copied().flatten() {
                                Some(sp) => self.event_spans(ev, &sp),
                                None => self.event(ev),
                            }
                            .map_err(|m| format!("event at byte {at}: {m}"))?;
                        }
                    }
                    Piece::Header(h) => header = h,
                }
            }
            if !(0..=MAX_BASE_NS).contains(&header.base_ns) {
                return Err(format!(
                    "baseTimeNanoseconds {} is not a time since 1970",
                    header.base_ns
                ));
            }
            Ok(header)
        });
        parsed.map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// [`Builder::finish`], refusing a capture without GPU ops.
    pub fn finish_checked(self) -> anyhow::Result<Store> {
        let events = self.events;
        let store = self.finish();
        if store.total_ops == 0 {
            anyhow::bail!("{}", no_gpu_ops(events));
        }
        Ok(store)
    }
}

/// Why a trace without GPU ops is refused.
pub fn no_gpu_ops(events: u64) -> String {
    format!("no GPU ops (kernel, gpu_memcpy, gpu_memset) among {events} events")
}

/// Loads a Kineto trace from a reader into a new store.
pub fn load_reader(r: impl Read + Send, source: &str, budget: usize) -> anyhow::Result<Store> {
    let mut b = Builder::new(budget, source);
    let h = b.read(r)?;
    b.end_file(&h, None);
    b.finish_checked()
}

/// Loads a Kineto trace file; its rank is its header's, else the one its name gives
/// ([`rank_in_name`]).
pub fn load(path: &Path, budget: usize) -> anyhow::Result<Store> {
    let src = file_label(path);
    let mut b = Builder::new(budget, &src);
    let h = b.read(open_maybe_gz(path)?)?;
    b.end_file(&h, rank_in_name(&src));
    b.finish_checked()
}

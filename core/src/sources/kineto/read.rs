//! The reading of a trace: one thread splits the JSON into events, a second finds each
//! event's members, and the caller's reads them into the store, so the three overlap. And
//! the loads built on it: a reader or a file into a new store.

use std::io::Read;
use std::path::Path;
use std::sync::mpsc::{sync_channel, Receiver};

use super::builder::Builder;
use super::files::{
    file_label, open_maybe_gz, other_ranks_note, rank_in_name, Header, MAX_BASE_NS,
};
use super::members::{spans, Spans};
use crate::model::store::Store;
use crate::sources::jsonscan::Scanner;

/// Bytes of events a batch holds before it is handed on: few, so that what the reading holds
/// at once is a few hundred KiB (an event longer than this makes a batch of its own).
const BATCH_BYTES: usize = 128 << 10;
/// Batches in flight at most: one each being split, scanned and read, and one waiting. The
/// splitter reuses those the reader gives back, and waits for one when all are out.
const BATCHES: usize = 4;

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
            bytes: Vec::with_capacity(BATCH_BYTES),
            events: Vec::new(),
            spans: Vec::new(),
        }
    }

    /// Whether `ev` would take the batch past [`BATCH_BYTES`]: it is handed on first.
    fn full_for(&self, ev: &[u8]) -> bool {
        !self.events.is_empty() && self.bytes.len() + ev.len() > BATCH_BYTES
    }

    /// Empties the batch for the splitter to fill again (what a long event grew it to is let
    /// go).
    fn clear(&mut self) {
        if self.bytes.capacity() > 2 * BATCH_BYTES {
            self.bytes = Vec::with_capacity(BATCH_BYTES);
        }
        self.bytes.clear();
        self.events.clear();
        self.spans.clear();
    }
}

/// The splitter's empty batches: new ones up to [`BATCHES`], then those the reader gave back.
struct Pool {
    made: usize,
    back: Receiver<Batch>,
}

impl Pool {
    /// An empty batch; None once the reader stopped.
    fn take(&mut self) -> Option<Batch> {
        if let Ok(b) = self.back.try_recv() {
            return Some(b);
        }
        if self.made < BATCHES {
            self.made += 1;
            return Some(Batch::new());
        }
        self.back.recv().ok()
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
    /// the store: the three parts of the work overlap, and hand each other at most
    /// [`BATCHES`] batches of events, which go round.
    pub fn read(&mut self, r: impl Read + Send) -> anyhow::Result<Header> {
        let (tx, split) = sync_channel::<Result<Piece, String>>(2);
        let (read, rx) = sync_channel::<Result<Piece, String>>(2);
        let (give, back) = sync_channel::<Batch>(BATCHES);
        let parsed: Result<Header, String> = std::thread::scope(|scope| {
            // Owned here: however this returns, the splitter waiting for a batch back stops.
            let give = give;
            scope.spawn(move || {
                let mut pool = Pool { made: 0, back };
                let mut batch = pool.take();
                let mut header = Header::default();
                let res = Scanner::new(r).for_each_event_and_member(
                    |ev, at| {
                        let stopped = || "stopped".to_string();
                        let mut b = batch.take().ok_or_else(stopped)?;
                        if b.full_for(ev) {
                            tx.send(Ok(Piece::Events(b))).map_err(|_| stopped())?;
                            b = pool.take().ok_or_else(stopped)?;
                        }
                        let s = b.bytes.len();
                        b.bytes.extend_from_slice(ev);
                        b.events.push((s, b.bytes.len(), at));
                        batch = Some(b);
                        Ok(())
                    },
                    |k, v| header.member(k, v),
                );
                if let Some(b) = batch {
                    let _ = tx.send(Ok(Piece::Events(b)));
                }
                let _ = tx.send(match res {
                    Ok(_) => Ok(Piece::Header(header)),
                    Err(e) => Err(e.to_string()),
                });
            });
            // A second thread finds where each event's members lie, for this one's turn.
            scope.spawn(move || {
                for mut msg in split {
                    if let Ok(Piece::Events(b)) = &mut msg {
                        let Batch {
                            bytes,
                            events,
                            spans: found,
                        } = b;
                        found.extend(events.iter().map(|&(s, e, _)| spans(&bytes[s..e])));
                    }
                    if read.send(msg).is_err() {
                        break;
                    }
                }
            });
            let mut header = Header::default();
            for msg in rx {
                match msg? {
                    Piece::Events(mut batch) => {
                        for (i, &(s, e, at)) in batch.events.iter().enumerate() {
                            let ev = &batch.bytes[s..e];
                            let done = match batch.spans.get(i).copied().flatten() {
                                Some(sp) => self.event_spans(ev, &sp),
                                None => self.event(ev),
                            };
                            // One unreadable event (a flipped byte in it, say) is skipped
                            // and counted; only damage to the JSON's structure refuses it.
                            if let Err(m) = done {
                                self.bad += 1;
                                self.first_bad
                                    .get_or_insert_with(|| format!("event at byte {at}: {m}"));
                            }
                        }
                        batch.clear();
                        let _ = give.try_send(batch);
                    }
                    Piece::Header(h) => header = h,
                }
            }
            if let Some(first) = &self.first_bad {
                let line = format!(
                    "skipped {} unreadable event{} (first: {first})",
                    self.bad,
                    if self.bad == 1 { "" } else { "s" }
                );
                *self
                    .store
                    .skipped
                    .entry("unreadable events".into())
                    .or_insert(0) += self.bad;
                // A trace that is then refused (no GPU op) says it in its one line of error.
                if self.store.op_count() > 0 {
                    crate::say!("gaptop: {}: {line}", self.store.source);
                }
                self.store.notes.push(line);
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
        let bad = self.first_bad.clone();
        let store = self.finish();
        if store.total_ops == 0 {
            // Why: an unreadable event, or GPU ops dropped for their times.
            let why = bad.or_else(|| store.dropped_times.lines().into_iter().next());
            match why {
                Some(b) => anyhow::bail!("{}; {b}", no_gpu_ops(events)),
                None => anyhow::bail!("{}", no_gpu_ops(events)),
            }
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
    let rank = h.rank.or(rank_in_name(&src));
    b.end_file(&h, rank);
    let mut store = b.finish_checked()?;
    store
        .notes
        .extend(other_ranks_note(&[rank.unwrap_or(-1)], h.world_size));
    Ok(store)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trace whose first event cannot be read, followed by many batches' worth: that event
    /// is skipped and counted, and the rest read. Damage to the JSON's structure early on
    /// stops the reading, whatever the splitter was doing (waiting for a batch back, say).
    #[test]
    fn a_bad_event_is_skipped_and_broken_json_stops_the_reading() {
        let mut doc = String::from("{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":\"bad\",\"dur\":1}");
        for i in 0..60_000 {
            doc.push_str(&format!(",{{\"ph\":\"X\",\"cat\":\"kernel\",\"name\":\"k\",\"pid\":0,\"tid\":7,\"ts\":{i},\"dur\":1,\"args\":{{\"correlation\":{i}}}}}"));
        }
        doc.push_str("]}");
        assert!(doc.len() > 16 * BATCH_BYTES);
        let st = load_reader(doc.as_bytes(), "t", usize::MAX).unwrap();
        assert_eq!(st.total_ops, 60_000);
        assert_eq!(st.skipped["unreadable events"], 1);
        assert!(
            st.notes[0].contains(
                "skipped 1 unreadable event (first: event at byte 16: kernel \"k\": bad ts"
            ),
            "{:?}",
            st.notes
        );
        let broken = doc.replacen("{\"ph\"", "{\"ph\"}", 2);
        let doc: &'static str = Box::leak(broken.into_boxed_str());
        for _ in 0..20 {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(load_reader(doc.as_bytes(), "t", usize::MAX).map(|_| ()));
            });
            let got = rx.recv_timeout(std::time::Duration::from_secs(20));
            got.expect("the reading stops")
                .expect_err("broken JSON is refused");
        }
    }
}

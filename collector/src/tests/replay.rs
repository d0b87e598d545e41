//! Replays of CUPTI activity buffers recorded on an H200 (GAPTOP_DUMP) through the decoder,
//! the queue and the framing, compared with what the live viewer received from them.

use std::collections::HashMap;

use gaptop_wire as w;

use crate::activity::enqueue;
use crate::limits::QUEUE_CAP;
use crate::records::{decode_records, Decodedbuf};
use crate::selftest::decoder_after_hello;
use crate::sender::compose;
use crate::state::{Batch, Collector, Parts, Queue, SYNC_NAMES};

/// One activity buffer as GAPTOP_DUMP wrote it, with its kernel names fixed up to point at
/// strings owned here (CUPTI's pointers died with the process that recorded it).
struct Dumped {
    bytes: Vec<u8>,
    offsets: Vec<usize>,
    _names: Vec<std::ffi::CString>,
}

fn read_dump(path: &std::path::Path) -> Vec<Dumped> {
    let b = std::fs::read(path).unwrap();
    let mut rest: &[u8] = &b;
    let mut take = |n: usize| {
        let (s, r) = rest.split_at(n);
        rest = r;
        s
    };
    let u32_at = |s: &[u8]| u32::from_le_bytes(s.try_into().unwrap()) as usize;
    let mut out = Vec::new();
    let mut left = b.len();
    while left > 0 {
        assert_eq!(take(4), b"GCB1");
        let valid = u64::from_le_bytes(take(8).try_into().unwrap()) as usize;
        let n = u32_at(take(4));
        let offsets: Vec<usize> = (0..n).map(|_| u32_at(take(4))).collect();
        let nfix = u32_at(take(4));
        let mut fixes = Vec::new();
        for _ in 0..nfix {
            let field = u32_at(take(4));
            let len = u32_at(take(4));
            fixes.push((field, std::ffi::CString::new(take(len)).unwrap()));
        }
        let mut bytes = take(valid).to_vec();
        for (field, name) in &fixes {
            let p = (name.as_ptr() as usize).to_le_bytes();
            bytes[*field..*field + 8].copy_from_slice(&p);
        }
        left -= 4
            + 8
            + 4
            + 4 * n
            + 4
            + fixes
                .iter()
                .map(|f| 8 + f.1.as_bytes().len())
                .sum::<usize>()
            + valid;
        out.push(Dumped {
            bytes,
            offsets,
            _names: fixes.into_iter().map(|f| f.1).collect(),
        });
    }
    out
}

/// Ops (with their kernel names) and API calls as a viewer would receive them.
fn received(frames: impl Iterator<Item = w::Frame>) -> (Vec<(w::Op, String)>, Vec<w::Api>) {
    let mut names = HashMap::new();
    let mut ops = Vec::new();
    let mut apis = Vec::new();
    for f in frames {
        match f {
            w::Frame::Name { id, text } => {
                names.insert(id, text);
            }
            w::Frame::Ops(v) => ops.extend(v),
            w::Frame::Apis(v) => apis.extend(v),
            _ => {}
        }
    }
    let mut ops: Vec<(w::Op, String)> = ops
        .into_iter()
        .map(|o| {
            let n = names.get(&o.name).cloned().unwrap_or_default();
            (w::Op { name: 0, ..o }, n)
        })
        .collect();
    ops.sort_by_key(|o| (o.0.corr, o.0.start));
    apis.sort_by_key(|a| a.corr);
    (ops, apis)
}

/// Replays CUPTI activity buffers recorded on an H200 (planted.py, GAPTOP_DUMP) through the
/// collector's decoder, queue and framing, and compares with what the live viewer recorded
/// from the same buffers in the same run: the same kernels, times, streams, correlation ids,
/// names and synchronizations.
#[test]
fn replayed_cupti_buffers_give_what_the_live_viewer_received() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let dumps = read_dump(&data.join("planted.cuptibuf"));
    let mut c = Collector::new(Parts::offline(1 << 20));
    c.calls.get_mut().unwrap().syncs = [1, 2, 3, 4, 5];
    let mut kernel_names = HashMap::new();
    let mut q = Queue::default();
    let mut total = 0;
    for d in &dumps {
        let mut out = Decodedbuf::default();
        let base = d.bytes.as_ptr();
        // SAFETY: the dump's offsets are those of the complete records CUPTI's iterator gave
        // in this buffer's bytes (kernel names fixed up to live strings), alive while decoded.
        unsafe {
            decode_records(
                &c,
                &mut kernel_names,
                d.offsets.iter().map(|&o| base.add(o)),
                &mut out,
            );
        }
        total += out.n_ops + out.n_syncs;
        for (tag, bytes, records) in [
            (w::TAG_OPS, out.ops, out.n_ops),
            (w::TAG_APIS, out.syncs, out.n_syncs),
        ] {
            let b = Batch {
                tag,
                bytes,
                records,
                oldest_end: out.oldest_end,
            };
            assert!(enqueue(&mut q, true, b, QUEUE_CAP));
        }
    }
    let batches: Vec<Batch> = q.batches.drain(..).collect();
    let defs = c.names.defs.lock().unwrap().clone();
    let mut bytes = Vec::new();
    let (nrec, oldest) = compose(&mut bytes, &defs, &[], &batches);
    assert_eq!(nrec as usize, total);
    // The sync names the live collector defined at start, then the replayed records.
    let mut stream = Vec::new();
    for (id, n) in c.calls().syncs.iter().zip(SYNC_NAMES) {
        w::encode_name(&mut stream, *id, n);
    }
    stream.extend_from_slice(&bytes);
    let mut dec = decoder_after_hello(&stream);
    let replay = received(std::iter::from_fn(|| dec.next_frame().unwrap()));

    let f = std::fs::File::open(data.join("planted_dump.rec")).unwrap();
    let mut r = gaptop_core::sources::recording::Reader::new(f).unwrap();
    let live = received(std::iter::from_fn(|| r.next_entry().unwrap().map(|e| e.1)));

    assert_eq!(replay.0.len(), 59, "kernels in the recorded buffer");
    assert_eq!(replay.0, live.0, "kernels as the live viewer received them");
    assert_eq!(
        replay
            .0
            .iter()
            .filter(|o| o.1.contains("vectorized_elementwise_kernel"))
            .count(),
        58
    );
    assert_eq!(oldest, replay.0.iter().map(|o| o.0.end).min().unwrap());
    // The live recording also holds the callbacks' API calls (with threads); the activity
    // API's synchronizations (no thread) must match the replayed ones exactly.
    let live_syncs: Vec<w::Api> = live.1.iter().filter(|a| a.tid == 0).copied().collect();
    assert_eq!(replay.1.len(), 5);
    let strip = |v: &[w::Api]| -> Vec<(u64, u64, u32, u8)> {
        v.iter().map(|a| (a.start, a.end, a.corr, a.kind)).collect()
    };
    assert_eq!(strip(&replay.1), strip(&live_syncs));
    // Each synchronization was also timed by a callback with the same correlation id.
    for s in &replay.1 {
        assert!(
            live.1.iter().any(|a| a.tid != 0 && a.corr == s.corr),
            "{s:?}"
        );
    }
}

/// The same buffers through a queue that can hold only part of them: what does not fit is
/// dropped whole and counted, never delivered half.
#[test]
fn replayed_buffers_over_a_full_queue_are_counted_not_lost() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    let dumps = read_dump(&data.join("planted.cuptibuf"));
    let c = Collector::new(Parts::offline(1));
    let mut names = HashMap::new();
    let mut q = Queue::default();
    let (mut queued, mut dropped) = (0usize, 0usize);
    for _ in 0..10 {
        let mut out = Decodedbuf::default();
        let base = dumps[0].bytes.as_ptr();
        // SAFETY: as in the test above.
        unsafe {
            decode_records(
                &c,
                &mut names,
                dumps[0].offsets.iter().map(|&o| base.add(o)),
                &mut out,
            );
        }
        let n = out.n_ops;
        let b = Batch {
            tag: w::TAG_OPS,
            bytes: out.ops,
            records: n,
            oldest_end: out.oldest_end,
        };
        if enqueue(&mut q, true, b, 4 * n * w::OP_SIZE) {
            queued += n;
        } else {
            dropped += n;
        }
    }
    assert_eq!((queued, dropped), (4 * 59, 6 * 59));
    let batches: Vec<Batch> = q.batches.drain(..).collect();
    let mut bytes = Vec::new();
    compose(&mut bytes, &[], &[], &batches);
    let mut dec = decoder_after_hello(&bytes);
    let (ops, _) = received(std::iter::from_fn(|| dec.next_frame().unwrap()));
    assert_eq!(ops.len(), queued);
}

//! The collector's unit tests: record decoding, queues and framing, open calls and call
//! plans, the buffer pool, and replays of recorded CUPTI buffers.

use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::atomic::Ordering::Relaxed;

use cudarc::cupti::sys as cu;
use gaptop_wire as w;

use crate::activity::{enqueue, release_buffer};
use crate::callbacks::{append_api, OpenCall, OpenCalls};
use crate::enable::plan_call;
use crate::limits::{BUF_SIZE, POOL_KEEP, QUEUE_CAP};
use crate::records::{decode_record, decode_records, Decoded, Decodedbuf};
use crate::selftest::decoder_after_hello;
use crate::sender::{compose, frame_records};
use crate::state::{Batch, Collector, Parts, Queue, SYNC_NAMES};
use crate::switches::Switches;

fn decoded_op(d: Option<Decoded>) -> w::Op {
    match d {
        Some(Decoded::Op(op)) => op,
        other => panic!("expected a GPU op, got {other:?}"),
    }
}

/// CUPTI records decoded without a GPU: records built in memory as CUPTI lays them out.
#[test]
fn decodes_gpu_op_sync_and_api_records() {
    let mut c = Collector::new(Parts::offline(100));
    c.calls.get_mut().unwrap().copies = [0, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20];
    c.calls.get_mut().unwrap().memset = 30;
    let mut names = HashMap::new();
    let kname = std::ffi::CString::new("_Z6kernelPf").unwrap();
    // SAFETY: every record is a zeroed CUPTI record struct (all of whose fields may be zero)
    // of the kind its `kind` says, alive while decoded; the kernel's name is a live CString.
    unsafe {
        let mut k: cu::CUpti_ActivityKernel10 = std::mem::zeroed();
        k.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
        k.start = 1_000;
        k.end = 2_500;
        k.correlationId = 42;
        k.streamId = 7;
        k.deviceId = 1;
        k.graphId = 9;
        k.name = kname.as_ptr();
        let op = decoded_op(decode_record(&c, &mut names, &k as *const _ as *const u8));
        assert_eq!(
            (op.start, op.end, op.corr, op.stream, op.device, op.graph, op.kind),
            (1_000, 2_500, 42, 7, 1, 9, w::OP_KERNEL)
        );
        assert_eq!(op.name, 100);
        // The same name pointer is not named again.
        let again = decoded_op(decode_record(&c, &mut names, &k as *const _ as *const u8));
        assert_eq!(again.name, 100);
        let defs = c.names.defs.lock().unwrap().clone();
        let mut d = decoder_after_hello(&defs);
        d.next_frame().unwrap();
        assert_eq!(
            d.next_frame().unwrap(),
            Some(w::Frame::Name {
                id: 100,
                text: "_Z6kernelPf".into()
            })
        );
        assert_eq!(d.next_frame().unwrap(), None, "named once");

        let mut m: cu::CUpti_ActivityMemcpy6 = std::mem::zeroed();
        m.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMCPY;
        m.copyKind = 1; // HtoD
        m.start = 10;
        m.end = 20;
        m.correlationId = 5;
        let op = decoded_op(decode_record(&c, &mut names, &m as *const _ as *const u8));
        assert_eq!((op.kind, op.name, op.corr), (w::OP_MEMCPY, 11, 5));

        let mut s: cu::CUpti_ActivityMemset4 = std::mem::zeroed();
        s.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_MEMSET;
        s.start = 30;
        s.end = 31;
        let op = decoded_op(decode_record(&c, &mut names, &s as *const _ as *const u8));
        assert_eq!((op.kind, op.name), (w::OP_MEMSET, 30));

        let mut y: cu::CUpti_ActivitySynchronization = std::mem::zeroed();
        y.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
        y.type_ = cu::CUpti_ActivitySynchronizationType::CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
        y.start = 5;
        y.end = 9;
        y.correlationId = 77;
        c.calls.get_mut().unwrap().syncs = [40, 41, 42, 43, 44];
        let Some(Decoded::Api(a)) = decode_record(&c, &mut names, &y as *const _ as *const u8)
        else {
            panic!("a synchronization record decodes as a host call");
        };
        assert_eq!(
            (a.start, a.end, a.corr, a.name, a.kind, a.tid, a.stack),
            (5, 9, 77, 42, w::API_WAIT, 0, 0)
        );

        // A runtime API record (GAPTOP_API_ACTIVITY) for a call gaptop times, and one
        // for a call it does not.
        c.calls.get_mut().unwrap().api[1] = vec![(0, 0); 300];
        c.calls.get_mut().unwrap().api[1][211] = (50, w::API_LAUNCH);
        let mut r: cu::CUpti_ActivityAPI = std::mem::zeroed();
        r.kind = cu::CUpti_ActivityKind::CUPTI_ACTIVITY_KIND_RUNTIME;
        r.cbid = 211;
        r.start = 100;
        r.end = 104;
        r.threadId = 4242;
        r.correlationId = 9;
        let Some(Decoded::Api(a)) = decode_record(&c, &mut names, &r as *const _ as *const u8)
        else {
            panic!("an API record decodes as a host call");
        };
        assert_eq!(
            (a.start, a.end, a.corr, a.name, a.kind, a.tid, a.stack),
            (100, 104, 9, 50, w::API_LAUNCH, 4242, 0)
        );
        r.cbid = 10;
        assert!(decode_record(&c, &mut names, &r as *const _ as *const u8).is_none());
        r.cbid = 5000;
        assert!(decode_record(&c, &mut names, &r as *const _ as *const u8).is_none());

        // Kinds gaptop does not keep are skipped.
        let other: [u32; 16] = [39, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert!(decode_record(&c, &mut names, other.as_ptr() as *const u8).is_none());
    }
}

/// A record whose other fields hold values this build has no names for (a newer CUPTI's
/// enum values, padding garbage) decodes from the fields gaptop reads, by offset.
#[test]
fn records_with_unknown_field_values_decode_by_offset() {
    type K = cu::CUpti_ActivityKernel10;
    let mut raw = vec![0xABu8; std::mem::size_of::<K>()];
    let kname = std::ffi::CString::new("k_unknown_fields").unwrap();
    let fields: [(usize, &[u8]); 6] = [
        (0, &10u32.to_le_bytes()),
        (std::mem::offset_of!(K, start), &100u64.to_le_bytes()),
        (std::mem::offset_of!(K, end), &250u64.to_le_bytes()),
        (std::mem::offset_of!(K, correlationId), &9u32.to_le_bytes()),
        (std::mem::offset_of!(K, streamId), &13u32.to_le_bytes()),
        (
            std::mem::offset_of!(K, name),
            &(kname.as_ptr() as usize).to_le_bytes(),
        ),
    ];
    for (off, b) in fields {
        raw[off..off + b.len()].copy_from_slice(b);
    }
    let c = Collector::new(Parts::offline(7));
    let mut names = HashMap::new();
    // SAFETY: `raw` is a whole kernel record's bytes (the kind says so), alive while decoded.
    let op = decoded_op(unsafe { decode_record(&c, &mut names, raw.as_ptr()) });
    assert_eq!(
        (op.start, op.end, op.corr, op.stream, op.name),
        (100, 250, 9, 13, 7)
    );
}

/// The queue and the thread buffers drop (and let the caller count) instead of growing.
#[test]
fn full_queues_drop_instead_of_blocking_or_growing() {
    let batch = |n: usize| Batch {
        tag: w::TAG_OPS,
        bytes: vec![0; n],
        records: 1,
        oldest_end: 0,
    };
    let mut q = Queue::default();
    assert!(enqueue(&mut q, true, batch(60), 100));
    assert!(!enqueue(&mut q, true, batch(60), 100), "over the cap");
    assert!(enqueue(&mut q, true, batch(40), 100));
    assert_eq!((q.bytes, q.batches.len()), (100, 2));
    assert!(
        !enqueue(&mut q, false, batch(1), 1000),
        "collection stopped"
    );

    let cap = 3 * w::API_SIZE;
    let mut buf = Vec::with_capacity(cap);
    let cap = buf.capacity() / w::API_SIZE * w::API_SIZE;
    let rec = w::Api::default();
    let kept = (0..cap / w::API_SIZE + 2)
        .filter(|_| append_api(&mut buf, &rec))
        .count();
    assert_eq!(kept, cap / w::API_SIZE);
    assert_eq!(buf.len(), cap, "never grown past its first allocation");
}

fn call(corr: u32, epoch: u32) -> OpenCall {
    OpenCall {
        start: corr as u64 * 10,
        corr,
        stack: corr + 100,
        name: 1,
        kind: 0,
        epoch,
    }
}

/// Nested calls, and calls cut by switching callbacks off and on (sampled stacks).
#[test]
fn open_calls_survive_callbacks_switched_off_mid_call() {
    let mut o = OpenCalls::default();
    // A runtime launch and the driver call it makes, in one window.
    assert!(o.enclosing(0).is_none());
    o.0.push(call(1, 0));
    assert_eq!(
        o.enclosing(0).map(|c| c.corr),
        Some(1),
        "nested in the runtime call"
    );
    o.0.push(call(2, 0));
    assert_eq!(o.close(2).map(|c| c.corr), Some(2));
    assert_eq!(
        o.0.last().map(|c| c.corr),
        Some(1),
        "the outer call stays open"
    );
    assert_eq!(o.close(1).map(|c| c.corr), Some(1));
    assert!(o.0.is_empty());

    // Callbacks went off after an entry: its exit never came. In the next window a new
    // call is not taken for a nested one, and the lost call is forgotten.
    o.0.push(call(3, 0));
    assert!(o.enclosing(1).is_none());
    assert!(o.0.is_empty());

    // An exit whose entry was never seen (callbacks came on mid-call) changes nothing.
    o.0.push(call(4, 1));
    assert!(o.close(99).is_none());
    assert_eq!(o.0.len(), 1);
    // An exit that skips an inner call whose exit was lost closes both.
    o.0.push(call(5, 1));
    assert_eq!(o.close(4).map(|c| c.stack), Some(104));
    assert!(o.0.is_empty());
}

/// Which calls get callbacks or API records, by default and under the diagnostics.
#[test]
fn calls_are_planned_by_name() {
    let plan = |name: &str, sw: &Switches| {
        let p = plan_call(name, sw);
        (p.kind, p.callback, p.recorded)
    };
    let default = Switches::read(|_| None);
    assert_eq!(
        plan("cudaLaunchKernel_v7000", &default),
        (w::API_LAUNCH, true, false)
    );
    assert_eq!(
        plan("cuLaunchKernelEx", &default),
        (w::API_LAUNCH, true, false)
    );
    assert_eq!(
        plan("cudaGraphLaunch_v10000", &default),
        (w::API_GRAPH_LAUNCH, true, false)
    );
    assert_eq!(
        plan("cudaStreamSynchronize_v3020", &default),
        (w::API_SYNC, true, false)
    );
    assert_eq!(
        plan("cudaGetLastError_v3020", &default),
        (w::API_OTHER, false, false)
    );
    assert_eq!(
        plan("cuCtxGetCurrent", &default),
        (w::API_OTHER, false, false)
    );

    let records = Switches::read(|k| (k == "GAPTOP_API_ACTIVITY").then(|| "1".into()));
    assert_eq!(
        plan("cudaLaunchKernel_v7000", &records),
        (w::API_LAUNCH, false, true)
    );
    assert_eq!(
        plan("cudaGetLastError_v3020", &records),
        (w::API_OTHER, false, false)
    );

    let only = Switches::read(|k| (k == "GAPTOP_CB_ONLY").then(|| "cudaGetLastError".into()));
    assert_eq!(
        plan("cudaGetLastError_v3020", &only),
        (w::API_OTHER, true, false)
    );
    assert_eq!(
        plan("cudaLaunchKernel_v7000", &only),
        (w::API_LAUNCH, false, false)
    );
}

/// Buffers promised to CUPTI as zeroed come back to the pool zeroed; the pool is capped.
#[test]
fn pooled_buffers_are_zeroed_when_cupti_expects_it() {
    for zeroed in [true, false] {
        let mut c = Collector::new(Parts::offline(1));
        *c.buffers.zeroed.get_mut() = zeroed;
        let bufs: Vec<*mut u8> = (0..POOL_KEEP + 2)
            // SAFETY: a BUF_SIZE allocation, checked, then filled within its size.
            .map(|_| unsafe {
                let p = libc::malloc(BUF_SIZE) as *mut u8;
                assert!(!p.is_null());
                std::ptr::write_bytes(p, 0xab, BUF_SIZE);
                p
            })
            .collect();
        c.buffers.out.store(bufs.len(), Relaxed);
        for &p in &bufs {
            // SAFETY: each is a BUF_SIZE malloc'ed buffer, given back once and not used after
            // (the pooled ones are read below only through the pool's addresses).
            unsafe { release_buffer(&c, p) };
        }
        assert_eq!(c.buffers.out.load(Relaxed), 0);
        let pool = c.buffers.pool.lock().unwrap().clone();
        assert_eq!(pool.len(), POOL_KEEP, "the rest were freed");
        for p in pool {
            // SAFETY: a pooled buffer: BUF_SIZE bytes, all written above, owned here now.
            let b = unsafe { std::slice::from_raw_parts(p as *const u8, BUF_SIZE) };
            if zeroed {
                assert!(b.iter().all(|&x| x == 0), "a pooled buffer was not cleared");
            } else {
                assert_eq!(b[BUF_SIZE - 1], 0xab, "cleared without need");
            }
            // SAFETY: malloc'ed above and no longer used.
            unsafe { libc::free(p as *mut c_void) };
        }
    }
}

#[test]
fn large_record_runs_split_into_legal_frames() {
    let recs = vec![7u8; w::API_SIZE * 300_000];
    let mut out = Vec::new();
    frame_records(&mut out, w::TAG_APIS, &recs, w::API_SIZE);
    let mut d = decoder_after_hello(&out);
    let mut n = 0;
    while let Some(f) = d.next_frame().unwrap() {
        if let w::Frame::Apis(a) = f {
            n += a.len();
        }
    }
    assert_eq!(n, 300_000);
}

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
    let mut r = gaptop::collect::sources::recording::Reader::new(f).unwrap();
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

/// NVTX marker records: a range's start is kept until its end, which gives the whole range
/// (its thread and names from the start); a message is named once; marks, ends without a
/// start and records without a time give nothing; past MAX_OPEN_RANGES starts are dropped and
/// counted; a marker's strings are fixed up in dumps.
#[test]
fn marker_records_pair_into_ranges() {
    use crate::limits::MAX_OPEN_RANGES;
    use crate::records::string_fields;
    use crate::state::OpenRange;
    type M = cu::CUpti_ActivityMarker2;
    let c = Collector::new(Parts::offline(500));
    let mut names = HashMap::new();
    let step = std::ffi::CString::new("step 3").unwrap();
    let dom = std::ffi::CString::new("megatron").unwrap();
    let marker = |flags: u32, ts: u64, id: u32, name: *const i8, domain: *const i8| {
        let mut raw = vec![0u8; std::mem::size_of::<M>()];
        let put =
            |raw: &mut Vec<u8>, off: usize, b: &[u8]| raw[off..off + b.len()].copy_from_slice(b);
        put(&mut raw, 0, &12u32.to_le_bytes());
        put(
            &mut raw,
            std::mem::offset_of!(M, flags),
            &flags.to_le_bytes(),
        );
        put(
            &mut raw,
            std::mem::offset_of!(M, timestamp),
            &ts.to_le_bytes(),
        );
        put(&mut raw, std::mem::offset_of!(M, id), &id.to_le_bytes());
        put(
            &mut raw,
            std::mem::offset_of!(M, objectKind),
            &2u32.to_le_bytes(),
        );
        let obj = std::mem::offset_of!(M, objectId);
        put(&mut raw, obj, &77u32.to_le_bytes());
        put(&mut raw, obj + 4, &4242u32.to_le_bytes());
        put(
            &mut raw,
            std::mem::offset_of!(M, name),
            &(name as usize).to_le_bytes(),
        );
        put(
            &mut raw,
            std::mem::offset_of!(M, domain),
            &(domain as usize).to_le_bytes(),
        );
        raw
    };
    let null = std::ptr::null();
    let decode = |raw: &[u8], names: &mut HashMap<usize, u32>| {
        // SAFETY: `raw` is a whole marker record's bytes, its strings null or live CStrings.
        unsafe { decode_record(&c, names, raw.as_ptr()) }
    };
    assert_eq!(
        decode(
            &marker(2, 1_000, 9, step.as_ptr(), dom.as_ptr()),
            &mut names
        ),
        None
    );
    assert_eq!(
        decode(&marker(2, 1_500, 10, step.as_ptr(), null), &mut names),
        None
    );
    assert_eq!(
        decode(&marker(1, 1_600, 11, step.as_ptr(), null), &mut names),
        None,
        "a mark"
    );
    assert_eq!(
        decode(&marker(4, 1_700, 12, null, null), &mut names),
        None,
        "no start"
    );
    assert_eq!(
        decode(&marker(4, 0, 10, null, null), &mut names),
        None,
        "no time"
    );
    let Some(Decoded::Range(r)) = decode(&marker(4, 2_000, 9, null, null), &mut names) else {
        panic!("an end gives its range");
    };
    assert_eq!(
        (r.start, r.end, r.tid, r.name, r.domain),
        (1_000, 2_000, 4242, 500, 501)
    );
    let Some(Decoded::Range(r)) = decode(&marker(4, 3_000, 10, null, null), &mut names) else {
        panic!("the second range ends");
    };
    assert_eq!((r.name, r.domain), (500, 0), "one name for one message");
    let defs = c.names.defs.lock().unwrap().clone();
    let mut d = decoder_after_hello(&defs);
    d.next_frame().unwrap();
    let mut named = Vec::new();
    while let Some(f) = d.next_frame().unwrap() {
        named.push(f);
    }
    assert_eq!(
        named,
        [
            w::Frame::Name {
                id: 500,
                text: "step 3".into()
            },
            w::Frame::Name {
                id: 501,
                text: "megatron".into()
            }
        ]
    );
    // A full table of open ranges: a new start is dropped and counted.
    {
        let mut m = c.buffers.markers.lock().unwrap();
        for id in 0..MAX_OPEN_RANGES as u32 {
            m.open.insert(
                100_000 + id,
                OpenRange {
                    start: 1,
                    tid: 1,
                    name: 500,
                    domain: 0,
                },
            );
        }
    }
    assert_eq!(
        decode(&marker(2, 5_000, 13, step.as_ptr(), null), &mut names),
        None
    );
    assert_eq!(c.counts.dropped.load(Relaxed), 1);
    assert_eq!(decode(&marker(4, 6_000, 13, null, null), &mut names), None);
    // Dumps fix up both of a marker's strings, and skip null ones.
    let raw = marker(2, 1, 1, step.as_ptr(), dom.as_ptr());
    // SAFETY: as `decode` above.
    let fields = unsafe { string_fields(raw.as_ptr()) };
    assert_eq!(
        fields,
        [
            (std::mem::offset_of!(M, name), "step 3".to_string()),
            (std::mem::offset_of!(M, domain), "megatron".to_string())
        ]
    );
    let raw = marker(4, 1, 1, null, null);
    // SAFETY: as above.
    assert!(unsafe { string_fields(raw.as_ptr()) }.is_empty());
}

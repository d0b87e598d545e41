//! CUPTI's activity records decoded without a GPU, from records built in memory as CUPTI lays
//! them out: GPU ops, synchronizations and API records, fields this build has no names for,
//! and NVTX markers paired into ranges.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

use cudarc::cupti::sys as cu;
use gaptop_wire as w;

use crate::records::{decode_record, Decoded};
use crate::selftest::decoder_after_hello;
use crate::state::{Collector, Parts};

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

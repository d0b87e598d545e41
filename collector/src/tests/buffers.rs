//! Where records wait and how they leave: the sender's queue and the threads' buffers drop
//! instead of growing, the activity buffers' pool, and the framing of long runs of records.

use std::ffi::c_void;
use std::sync::atomic::Ordering::Relaxed;

use gaptop_wire as w;

use crate::activity::{enqueue, release_buffer};
use crate::callbacks::append_api;
use crate::limits::{BUF_SIZE, POOL_KEEP};
use crate::selftest::decoder_after_hello;
use crate::sender::frame_records;
use crate::state::{Batch, Collector, Parts, Queue};

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

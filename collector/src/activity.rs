//! CUPTI activity buffers: handed out from a pool, decoded into wire records when complete,
//! queued for the sender (or dumped for replay tests).

use std::ffi::c_void;
use std::sync::atomic::Ordering::{AcqRel, Relaxed};

use gaptop_wire as w;

use crate::cupti::{self, Context, Records};
use crate::lifetime::go_quiet;
use crate::limits::{BUF_SIZE, MAX_BUFFERS, POOL_KEEP, QUEUE_CAP};
use crate::records::{decode_records, string_fields, Decodedbuf};
use crate::state::{Batch, Collector, Queue};
use crate::{COLLECTOR, FORKED};

/// CUPTI asks for an activity buffer, on whichever thread needs one: a launching thread too,
/// inside its CUDA call. Takes only `buffers.pool` (to pop), makes no CUPTI call.
///
/// # Safety
/// As CUPTI calls it: the three pointers are valid for writes.
pub(crate) unsafe extern "C" fn buffer_requested(
    buf: *mut *mut u8,
    size: *mut usize,
    max: *mut usize,
) {
    // SAFETY: CUPTI's out-pointers (the contract above).
    unsafe {
        *max = 0;
        *buf = std::ptr::null_mut();
        *size = 0;
    }
    let Some(c) = COLLECTOR.get() else {
        return;
    };
    let b = &c.buffers;
    // Relaxed: a count, not a hand-off; the buffer itself goes to CUPTI through `buf`.
    if b.out.fetch_add(1, Relaxed) >= MAX_BUFFERS {
        // Over the cap: CUPTI drops the records and counts them; we read that count.
        b.out.fetch_sub(1, Relaxed);
        return;
    }
    let reused = b.pool.lock().unwrap_or_else(|e| e.into_inner()).pop();
    let p = match reused {
        Some(p) => p as *mut u8,
        // Buffers CUPTI expects zeroed (see `zeroed`) come zeroed from calloc or the pool.
        // SAFETY: plain allocations, checked for null below.
        None if b.zeroed.load(Relaxed) => unsafe { libc::calloc(1, BUF_SIZE) as *mut u8 },
        // SAFETY: as above.
        None => unsafe { libc::malloc(BUF_SIZE) as *mut u8 },
    };
    if p.is_null() {
        b.out.fetch_sub(1, Relaxed);
        return;
    }
    // SAFETY: CUPTI's out-pointers (the contract above); `p` holds BUF_SIZE bytes.
    unsafe {
        *buf = p;
        *size = BUF_SIZE;
    }
}

/// Gives a finished activity buffer back to the pool, or frees it when the pool is full.
/// Takes `buffers.pool`, alone.
///
/// # Safety
/// `buffer` must be one of `buffer_requested`'s BUF_SIZE allocations that CUPTI has given
/// back, used by nothing after this.
pub(crate) unsafe fn release_buffer(c: &Collector, buffer: *mut u8) {
    let b = &c.buffers;
    b.out.fetch_sub(1, Relaxed);
    let keep = b.pool.lock().unwrap_or_else(|e| e.into_inner()).len() < POOL_KEEP;
    if keep && b.zeroed.load(Relaxed) {
        // Zeroed here, on CUPTI's completion thread, so that CUPTI does not clear it on the
        // launching thread when it takes it again.
        // SAFETY: `buffer` holds BUF_SIZE bytes no one else uses (the contract above).
        unsafe { std::ptr::write_bytes(buffer, 0, BUF_SIZE) };
    }
    let mut pool = b.pool.lock().unwrap_or_else(|e| e.into_inner());
    if keep && pool.len() < POOL_KEEP {
        pool.push(buffer as usize);
    } else {
        drop(pool);
        // SAFETY: a malloc'ed or calloc'ed buffer no one uses any more (the contract above).
        unsafe { libc::free(buffer as *mut c_void) };
    }
}

/// CUPTI hands back a full (or flushed) buffer: on its own thread, or on the thread that
/// called `cuptiActivityFlushAll` (the sender, or `at_exit`), inside that call.
///
/// # Safety
/// As CUPTI calls it: `buffer` is one of `buffer_requested`'s, holding `valid` bytes of
/// records, and `ctx` and `stream` say where they came from.
pub(crate) unsafe extern "C" fn buffer_completed(
    ctx: Context,
    stream: u32,
    buffer: *mut u8,
    size: usize,
    valid: usize,
) {
    let running = COLLECTOR.get().map(|c| &c.buffers.completing);
    if let Some(n) = running {
        n.fetch_add(1, AcqRel);
    }
    // SAFETY: CUPTI's arguments as it passed them (the contract above).
    let r =
        std::panic::catch_unwind(|| unsafe { completed_inner(ctx, stream, buffer, size, valid) });
    if let Some(n) = running {
        n.fetch_sub(1, AcqRel);
    }
    if r.is_err() {
        if let Some(c) = COLLECTOR.get() {
            // Inside CUPTI's completion callback, no lock held (the panic dropped them): only
            // switches are called from here, never a flush.
            go_quiet(c, "internal error while reading CUPTI records");
        }
    }
}

/// Queues an encoded batch for the sender unless collection stopped or the queue is full;
/// returns false when the batch was dropped (the caller counts it).
pub(crate) fn enqueue(q: &mut Queue, active: bool, batch: Batch, cap: usize) -> bool {
    if !active || q.bytes + batch.bytes.len() > cap {
        return false;
    }
    q.bytes += batch.bytes.len();
    q.batches.push_back(batch);
    true
}

/// Dump format for replay tests, one entry per completed buffer: b"GCB1", valid bytes (u64),
/// record count (u32) and offsets (u32 each, as CUPTI's iterator gave them), name fix-ups
/// (count u32, then per string field of a record (a kernel's name, a marker's message and
/// domain): offset of the field u32, length u32, bytes), then the buffer's valid bytes. Runs
/// with `buffers.kernel_names` held and takes `buffers.dump`.
///
/// # Safety
/// `buffer` must hold `valid` readable bytes, and `recs` be addresses of complete records in
/// it.
pub(crate) unsafe fn dump_buffer(
    c: &Collector,
    buffer: *const u8,
    valid: usize,
    recs: &[*const u8],
) {
    let mut d = c.buffers.dump.lock().unwrap_or_else(|e| e.into_inner());
    let Some((file, budget)) = d.as_mut() else {
        return;
    };
    if valid > *budget {
        return;
    }
    let mut out = Vec::with_capacity(valid + 16 * recs.len() + 64);
    out.extend_from_slice(b"GCB1");
    out.extend_from_slice(&(valid as u64).to_le_bytes());
    out.extend_from_slice(&(recs.len() as u32).to_le_bytes());
    let mut fix = Vec::new();
    let mut nfix = 0u32;
    for &r in recs {
        let off = r as usize - buffer as usize;
        out.extend_from_slice(&(off as u32).to_le_bytes());
        // SAFETY: `r` is a complete record (the contract above), whose strings CUPTI keeps.
        for (name_off, name) in unsafe { string_fields(r) } {
            let field = off + name_off;
            fix.extend_from_slice(&(field as u32).to_le_bytes());
            fix.extend_from_slice(&(name.len() as u32).to_le_bytes());
            fix.extend_from_slice(name.as_bytes());
            nfix += 1;
        }
    }
    out.extend_from_slice(&nfix.to_le_bytes());
    out.extend_from_slice(&fix);
    // SAFETY: `buffer` holds `valid` readable bytes (the contract above).
    out.extend_from_slice(unsafe { std::slice::from_raw_parts(buffer, valid) });
    use std::io::Write;
    if file.write_all(&out).is_ok() {
        *budget -= valid;
    } else {
        *d = None;
    }
}

/// Decodes and queues a completed buffer's records, then gives the buffer back.
///
/// # Safety
/// As `buffer_completed`.
pub(crate) unsafe fn completed_inner(
    ctx: Context,
    stream: u32,
    buffer: *mut u8,
    _size: usize,
    valid: usize,
) {
    let Some(c) = COLLECTOR.get() else {
        // SAFETY: one of `buffer_requested`'s allocations, back from CUPTI (the contract).
        unsafe { libc::free(buffer as *mut c_void) };
        return;
    };
    let mut out = Decodedbuf::default();
    {
        let mut q = c.out.queue.lock().unwrap_or_else(|e| e.into_inner());
        out.ops = q.free.pop().unwrap_or_default();
    }
    out.ops.clear();
    if valid > 0 && !FORKED.load(Relaxed) {
        // `kernel_names` is held from here to the end of the decode: the only CUPTI call made
        // under it is the buffer walk (`Records`), which cannot call back into gaptop.
        let b = &c.buffers;
        let mut names = b.kernel_names.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: `buffer` is a completed CUPTI buffer with `valid` bytes of records, alive
        // until `release_buffer` below (the contract above).
        let records = || unsafe { Records::new(buffer, valid) };
        if b.dump.lock().unwrap_or_else(|e| e.into_inner()).is_some() {
            let recs: Vec<*const u8> = records().collect();
            // SAFETY: the buffer's bytes and records, as just above.
            unsafe { dump_buffer(c, buffer, valid, &recs) };
        }
        // SAFETY: the walk gives addresses of complete records in the live buffer.
        unsafe { decode_records(c, &mut names, records(), &mut out) };
    }
    // No collector lock is held here.
    // SAFETY: `ctx` and `stream` as CUPTI passed them (the contract above).
    if let Ok(dropped) = unsafe { cupti::dropped_records(ctx, stream) } {
        if dropped > 0 {
            c.counts.cupti_dropped.fetch_add(dropped as u64, Relaxed);
        }
    }
    // SAFETY: decoded (and dumped) already; nothing reads the buffer after this.
    unsafe { release_buffer(c, buffer) };
    c.buffers
        .last_completed_ms
        .store(c.started.elapsed().as_millis() as u64, Relaxed);
    let oldest_end = out.oldest_end;
    for (tag, bytes, records) in [
        (w::TAG_OPS, out.ops, out.n_ops),
        (w::TAG_APIS, out.syncs, out.n_syncs),
        (w::TAG_RANGES, out.ranges, out.n_ranges),
    ] {
        if records == 0 {
            continue;
        }
        let batch = Batch {
            tag,
            bytes,
            records,
            oldest_end,
        };
        let mut q = c.out.queue.lock().unwrap_or_else(|e| e.into_inner());
        let queued = enqueue(&mut q, c.active.load(Relaxed), batch, QUEUE_CAP);
        drop(q);
        if queued {
            c.out.wake.notify_one();
        } else {
            c.count_drop(records as u64);
        }
    }
}

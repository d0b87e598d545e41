//! The sender thread: the only socket I/O in the profiled process.

use std::ffi::{c_int, c_void};
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gaptop_wire as w;

use crate::cupti;
use crate::lifetime::go_quiet;
use crate::limits::{SEND_PERIOD, THREAD_CAP};
use crate::state::{Batch, Collector};
use crate::viewer::close;

/// Writes all of `b` to the socket `fd`; false when the viewer is gone.
pub(crate) fn send_all(fd: c_int, mut b: &[u8]) -> bool {
    while !b.is_empty() {
        // SAFETY: `b` is a live slice of `b.len()` bytes; MSG_NOSIGNAL keeps a closed socket
        // from raising SIGPIPE (an error is returned instead).
        let r = unsafe { libc::send(fd, b.as_ptr() as *const c_void, b.len(), libc::MSG_NOSIGNAL) };
        if r < 0 {
            if std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return false;
        }
        b = &b[r as usize..];
    }
    true
}

/// The viewer did not take a send. Collecting from the start: collection stops for good
/// (`go_quiet`). Attached: the connection is closed and the control thread turns collection
/// off (`dormant`), to wait for the next attach. Returns whether `fd` was closed.
fn viewer_gone(c: &Collector, fd: c_int) -> bool {
    match &c.session {
        None => {
            go_quiet(c, "the viewer went away");
            false
        }
        Some(s) => {
            hang_up(c, fd);
            s.viewer_lost();
            true
        }
    }
}

/// Closes the viewer's connection (the sender alone does) and tells whoever waits for it.
fn hang_up(c: &Collector, fd: c_int) {
    close(fd);
    let mut l = c.link();
    if l.fd == fd {
        l.fd = -1;
    }
    l.closing = false;
    drop(l);
    c.link_closed.notify_all();
}

/// Wraps raw records into frames no larger than the wire limit.
pub(crate) fn frame_records(out: &mut Vec<u8>, tag: u8, recs: &[u8], size: usize) {
    let per = (w::MAX_FRAME - 16) / size * size;
    for chunk in recs.chunks(per) {
        out.extend_from_slice(&((chunk.len() + 1) as u32).to_le_bytes());
        out.push(tag);
        out.extend_from_slice(chunk);
    }
}

/// One send's bytes: definitions first, then the threads' API records, then the queued GPU
/// batches. Returns the number of records and the oldest end time among the batches.
pub(crate) fn compose(
    out: &mut Vec<u8>,
    defs: &[u8],
    apis: &[Vec<u8>],
    batches: &[Batch],
) -> (u64, u64) {
    out.clear();
    out.extend_from_slice(defs);
    let mut nrec = 0u64;
    for b in apis {
        frame_records(out, w::TAG_APIS, b, w::API_SIZE);
        nrec += (b.len() / w::API_SIZE) as u64;
    }
    let mut oldest = u64::MAX;
    for b in batches {
        let size = w::record_size(b.tag).unwrap_or(w::API_SIZE);
        frame_records(out, b.tag, &b.bytes, size);
        nrec += b.records as u64;
        oldest = oldest.min(b.oldest_end);
    }
    (nrec, oldest)
}

/// The sender thread's loop: every SEND_PERIOD (or when woken), takes the queued batches,
/// the threads' API records and the definitions, and sends them; at exit sends the rest and
/// says bye.
pub(crate) fn sender(c: &'static Collector) {
    let flush_period = c.sw.flush;
    let mut last_flush = Instant::now();
    let mut last_stats = Instant::now();
    let mut out: Vec<u8> = Vec::with_capacity(1 << 20);
    loop {
        // Acquire, against `at_exit`'s Release: once set, the queue taken below holds what
        // the exit flush completed.
        let stopping = c.shutting_down.load(Acquire);
        // A detach flushes CUPTI, then sets `closing`: seen before the queue is taken, the
        // take below holds everything the detach flushed, and this pass may say bye. Seen
        // only later in the pass, records queued after the take would be left behind: this
        // pass sends, and the next one closes.
        let close_now = c.link().closing;
        {
            let q = c.out.queue.lock().unwrap_or_else(|e| e.into_inner());
            if q.batches.is_empty() && !stopping && !close_now {
                let _ = c.out.wake.wait_timeout(q, SEND_PERIOD);
            }
        }
        // Flush only when buffers are not filling on their own: under load they complete
        // every few hundred ms anyway, and a forced flush competes with the launching threads.
        let quiet_ms = (c.started.elapsed().as_millis() as u64)
            .saturating_sub(c.buffers.last_completed_ms.load(Relaxed));
        let due = |p: Duration| last_flush.elapsed() >= p && quiet_ms >= p.as_millis() as u64;
        // Only while collecting: a dormant collector makes no CUPTI call.
        if flush_period.is_some_and(due) && !stopping && c.active.load(Relaxed) {
            // No lock held: CUPTI may run the completion callback on this thread inside the
            // flush, and it takes the queue and the name locks.
            let _ = cupti::flush_all(false);
            last_flush = Instant::now();
        }
        // Records first, then the definitions they may use: a definition is always written
        // before any record that refers to it, so it is in this take or an earlier one.
        let batches: Vec<Batch> = {
            let mut q = c.out.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.bytes = 0;
            q.batches.drain(..).collect()
        };
        let threads: Vec<Arc<Mutex<Vec<u8>>>> = c
            .out
            .threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let mut apis: Vec<Vec<u8>> = Vec::new();
        for t in &threads {
            let mut b = t.lock().unwrap_or_else(|e| e.into_inner());
            if !b.is_empty() {
                // The replacement is allocated here, on the sender thread, at the thread's
                // fixed size, so the launching thread never allocates for its records.
                let cap = b.capacity().max(THREAD_CAP);
                apis.push(std::mem::replace(&mut *b, Vec::with_capacity(cap)));
            }
        }
        let defs = c.names.take_defs();
        let (nrec, oldest) = compose(&mut out, &defs, &apis, &batches);
        if oldest != u64::MAX {
            let lag = cupti::timestamp().saturating_sub(oldest);
            c.counts.lag_ns.fetch_max(lag, Relaxed);
        }
        if last_stats.elapsed() >= Duration::from_millis(500) || stopping {
            w::encode_stats(
                &mut out,
                &w::Stats {
                    collector_dropped: c.counts.dropped.load(Relaxed),
                    cupti_dropped: c.counts.cupti_dropped.load(Relaxed),
                    sent: c.counts.sent.load(Relaxed) + nrec,
                    lag_ns: c.counts.lag_ns.swap(0, Relaxed),
                },
            );
            last_stats = Instant::now();
        }
        // The connection, read after the definitions are kept (see `Link`): a viewer that
        // attached before this read gets them here, one that attaches after it got them in
        // the history it was sent first.
        let (fd, closing) = {
            let mut l = c.link();
            if let Some(h) = l.history.as_mut() {
                h.extend_from_slice(&defs);
            }
            (l.fd, l.closing)
        };
        let mut fd_open = fd >= 0;
        if fd_open && (c.active.load(Relaxed) || closing) {
            if send_all(fd, &out) {
                c.counts.sent.fetch_add(nrec, Relaxed);
            } else {
                c.count_drop(nrec);
                fd_open = !viewer_gone(c, fd);
            }
        } else {
            c.count_drop(nrec);
        }
        if close_now && fd_open {
            // A detach: this pass sent what was left; say bye and close.
            let mut bye = Vec::new();
            w::encode_bye(&mut bye, 0);
            send_all(fd, &bye);
            hang_up(c, fd);
        }
        {
            let mut q = c.out.queue.lock().unwrap_or_else(|e| e.into_inner());
            for mut b in batches {
                if q.free.len() < 8 && b.tag == w::TAG_OPS {
                    b.bytes.clear();
                    q.free.push(b.bytes);
                }
            }
        }
        if stopping {
            let fd = c.link().fd;
            if c.active.load(Relaxed) && fd >= 0 {
                let mut bye = Vec::new();
                w::encode_bye(&mut bye, 0);
                send_all(fd, &bye);
            }
            let (m, cv) = &c.out.done;
            *m.lock().unwrap_or_else(|e| e.into_inner()) = true;
            cv.notify_all();
            return;
        }
    }
}

//! GAPTOP_VERBOSE's reports on stderr: what is collected (at start, with a clock probe), and
//! what the callbacks cost (at exit).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Instant;

use crate::cupti;
use crate::state::Collector;

/// What a CUPTI timestamp costs against the vDSO's clocks, and which clock it follows (its
/// offset from each), for deciding whether callbacks could read a clock directly.
fn clock_probe() -> String {
    const N: u32 = 20_000;
    let clock = |id: libc::clockid_t| {
        let mut t = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `t` is a valid out-pointer; the ids are clocks Linux always has.
        unsafe { libc::clock_gettime(id, &mut t) };
        t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128
    };
    let t0 = Instant::now();
    let mut x = 0u64;
    for _ in 0..N {
        x = x.wrapping_add(cupti::timestamp());
    }
    let cupti_ns = t0.elapsed().as_nanos() as f64 / N as f64;
    let t0 = Instant::now();
    let mut y = 0i128;
    for _ in 0..N {
        y = y.wrapping_add(clock(libc::CLOCK_MONOTONIC_RAW));
    }
    let raw_ns = t0.elapsed().as_nanos() as f64 / N as f64;
    std::hint::black_box((x, y));
    let c = cupti::timestamp() as i128;
    let off = |id| (c - clock(id)) as f64 / 1e3;
    format!(
        "clock probe: cuptiGetTimestamp {cupti_ns:.1} ns a call, clock_gettime(MONOTONIC_RAW) \
         {raw_ns:.1} ns; CUPTI minus REALTIME {:.1} us, MONOTONIC {:.1} us, MONOTONIC_RAW {:.1} us",
        off(libc::CLOCK_REALTIME),
        off(libc::CLOCK_MONOTONIC),
        off(libc::CLOCK_MONOTONIC_RAW)
    )
}

/// At the end of set-up: the clock probe, and what is collected (`enabled` API calls).
pub(crate) fn say_collecting(c: &Collector, enabled: usize, path: &str) {
    say!("{}", clock_probe());
    say!(
        "collecting: {enabled} API callbacks{}, kernels, memcpy, memset{}{}{}{} -> {path}",
        match c.sw.duty {
            Some((on, off)) => format!(" ({on:?} of every {:?})", on + off),
            None => String::new(),
        },
        if c.sw.sync_activity {
            ", sync records"
        } else {
            ""
        },
        if c.native.is_some() {
            ", native frames"
        } else {
            ""
        },
        if c.buffers.zeroed.load(std::sync::atomic::Ordering::Relaxed) {
            ", zeroed buffers"
        } else {
            ""
        },
        if c.sw.nvtx { ", NVTX ranges" } else { "" }
    );
}

/// At exit: the callbacks' time and count, the stack walks inside them, what timing one
/// interval costs by itself (to read the figures net of it), and the stack table's size.
pub(crate) fn say_exit_stats(c: &Collector) {
    let t = &c.times;
    let calls = t.cb_calls.load(Relaxed);
    let ns = t.cb_ns.load(Relaxed);
    let (walks, walk_ns) = (t.walks.load(Relaxed), t.walk_ns.load(Relaxed));
    // What timing one interval costs by itself, to read the figures above net of it.
    let t0 = Instant::now();
    let mut spent = 0u64;
    for _ in 0..10_000 {
        let t = Instant::now();
        spent += t.elapsed().as_nanos() as u64;
    }
    std::hint::black_box(spent);
    let timer = t0.elapsed().as_nanos() as u64 / 10_000;
    let st = c.stacks.lock().unwrap_or_else(|e| e.into_inner());
    say!(
        "{calls} API callbacks, {:.1} ms inside gaptop ({} ns a call); {walks} stack walks \
         inside those, {} ns each (both figures include {timer} ns of timing); {} stack \
         nodes, {} distinct stacks, {} launches over the stack limit",
        ns as f64 / 1e6,
        ns.checked_div(calls).unwrap_or(0),
        walk_ns.checked_div(walks).unwrap_or(0),
        st.next_stack,
        st.by_hash.len(),
        st.full
    );
}

//! Work on several threads whose results are taken in order: the files of a rank set read at
//! once, each into a store of its own, and joined into the capture in the files' order on the
//! caller's thread, so that the capture does not depend on which thread finished first.

use std::collections::BTreeMap;
use std::sync::{mpsc, Condvar, Mutex};

/// Where the workers are: the next item to start, how many the caller has taken, and whether
/// it stopped.
struct Progress {
    next: usize,
    taken: usize,
    stop: bool,
}

/// Runs `work(i)` for `i` in `0..n` on up to `threads` threads and hands each result to
/// `take(i, result)` on this thread, in order of `i`. A thread starts item `i` only once
/// fewer than two items a thread are done and waiting to be taken, so what waits stays
/// bounded however unequal the items are. The first error `take` returns stops it: no item
/// is started after it, and it is returned once the items under way are done. With one
/// thread (or one item) everything runs here, one item after another.
pub fn run<T: Send>(
    n: usize,
    threads: usize,
    work: impl Fn(usize) -> T + Sync,
    mut take: impl FnMut(usize, T) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let threads = threads.min(n);
    if threads <= 1 {
        return (0..n).try_for_each(|i| take(i, work(i)));
    }
    let ahead = 2 * threads;
    let progress = Mutex::new(Progress {
        next: 0,
        taken: 0,
        stop: false,
    });
    let turn = Condvar::new();
    let lock = || progress.lock().unwrap_or_else(|e| e.into_inner());
    // The next item a worker may start, waiting while too many wait to be taken.
    let claim = || {
        let mut p = lock();
        loop {
            if p.stop || p.next >= n {
                return None;
            }
            if p.next < p.taken + ahead {
                p.next += 1;
                return Some(p.next - 1);
            }
            p = turn.wait(p).unwrap_or_else(|e| e.into_inner());
        }
    };
    std::thread::scope(|s| {
        let (tx, rx) = mpsc::channel::<(usize, T)>();
        for _ in 0..threads {
            let tx = tx.clone();
            let (claim, work) = (&claim, &work);
            s.spawn(move || {
                while let Some(i) = claim() {
                    if tx.send((i, work(i))).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        let mut held: BTreeMap<usize, T> = BTreeMap::new();
        let mut out = Ok(());
        'recv: for (i, t) in rx.iter() {
            held.insert(i, t);
            loop {
                let want = lock().taken;
                let Some(t) = held.remove(&want) else { break };
                if let Err(e) = take(want, t) {
                    out = Err(e);
                    break 'recv;
                }
                lock().taken += 1;
                turn.notify_all();
            }
        }
        // Stopped early: no worker starts another item (one waiting for its turn wakes).
        lock().stop = true;
        turn.notify_all();
        drop(rx);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// Items that finish out of order (the early ones slowest) are taken in order, on any
    /// number of threads.
    #[test]
    fn results_are_taken_in_order() {
        for threads in [1, 2, 3, 8] {
            let mut seen = Vec::new();
            run(
                12,
                threads,
                |i| {
                    std::thread::sleep(Duration::from_millis(((12 - i) % 4) as u64 * 3));
                    i * 10
                },
                |i, v| {
                    seen.push((i, v));
                    Ok(())
                },
            )
            .unwrap();
            let want: Vec<(usize, usize)> = (0..12).map(|i| (i, i * 10)).collect();
            assert_eq!(seen, want, "{threads} threads");
        }
    }

    /// The first error stops the run: it is what comes back, nothing after it is taken, and
    /// no item is started once the error is seen beyond those already under way.
    #[test]
    fn the_first_error_stops_it() {
        let started = AtomicUsize::new(0);
        let mut taken = Vec::new();
        let got = run(
            100,
            2,
            |i| {
                started.fetch_add(1, Ordering::Relaxed);
                i
            },
            |i, _| {
                if i == 3 {
                    anyhow::bail!("item {i} is bad");
                }
                taken.push(i);
                Ok(())
            },
        );
        assert_eq!(got.unwrap_err().to_string(), "item 3 is bad");
        assert_eq!(taken, vec![0, 1, 2]);
        // At most two a thread wait to be taken past what was taken.
        assert!(started.load(Ordering::Relaxed) <= 3 + 4, "{started:?}");
    }
}

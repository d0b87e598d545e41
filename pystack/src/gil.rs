//! CPython's GIL, read from outside the process: which thread state holds it, and where a
//! thread that waits for it sleeps.
//!
//! The GIL is a `struct _gil_runtime_state` (`Python/ceval_gil.c` in 3.9 and 3.10,
//! `Include/internal/pycore_gil.h` from 3.11): in `_PyRuntime.ceval` up to 3.11, in the
//! interpreter (`PyInterpreterState._gil`, pointed to by its `ceval.gil`) from 3.12. Where it
//! lies is found by the collector's calibration inside the running interpreter (the published
//! layout's `gil` key); how its fields lie is the version's, as the interpreter's headers define
//! it and [`layout`] gives it:
//!
//! ```text
//! 3.9 to 3.13, 64-bit:  unsigned long interval        0   (3.13: PyTime_t, 8 bytes as well)
//!                       _Py_atomic_address last_holder 8   (3.13: PyThreadState *)
//!                       _Py_atomic_int locked         16
//!                       unsigned long switch_number   24
//!                       PyCOND_T cond                 32   (pthread_cond_t, 48 bytes)
//!                       PyMUTEX_T mutex               80   (pthread_mutex_t, 40 bytes)
//!                       PyCOND_T switch_cond         120   (FORCE_SWITCHING, always defined)
//!                       PyMUTEX_T switch_mutex       168
//! ```
//!
//! A thread that wants the GIL waits on `cond` (a timed wait of the switch interval, after which
//! it asks the holder to drop it) under `mutex`: a futex whose word lies in `cond` or `mutex`.
//! A holder that was asked to drop it waits on `switch_cond` until a waiter took it: the same
//! struct. So a thread asleep in `futex` on an address in `[wait.start, wait.end)` waits for
//! the GIL, or (its holder) for a waiter to take it.

use std::ops::Range;

use crate::memory::Memory;

/// Where the fields of a `struct _gil_runtime_state` lie, from its start.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GilLayout {
    /// `interval`: the switch interval, in µs.
    pub interval: usize,
    /// `last_holder`: the thread state that took it last.
    pub last_holder: usize,
    /// `locked`: an int, 1 while held.
    pub locked: usize,
    /// Where the futex words of its condition variables and mutexes lie.
    pub wait: Range<usize>,
}

/// The layout of CPython 3.`minor`'s GIL; None for a version it is not known for.
pub fn layout(minor: u32) -> Option<GilLayout> {
    match minor {
        // The same fields in the same order from 3.9 (where calibration starts) to 3.13.
        9..=13 => Some(GilLayout {
            interval: 0,
            last_holder: 8,
            locked: 16,
            wait: 32..216,
        }),
        _ => None,
    }
}

/// Whether the GIL at `gil` looks as it does while thread state `ts` holds it: the
/// signature calibration looks for (a switch interval of 1 µs to 1000 s, `ts`, locked).
pub fn held_by<M: Memory>(mem: &M, gil: usize, l: &GilLayout, ts: usize) -> bool {
    let Some([interval, holder, locked]) = mem.words(gil, [l.interval, l.last_holder, l.locked])
    else {
        return false;
    };
    (1..=1_000_000_000).contains(&interval) && holder == ts && locked as u32 == 1
}

/// The thread state that holds the GIL at `gil` now; None while it is free (or unreadable).
pub fn holder<M: Memory>(mem: &M, gil: usize, l: &GilLayout) -> Option<usize> {
    let [holder, locked] = mem.words(gil, [l.last_holder, l.locked])?;
    (locked as u32 == 1 && holder != 0).then_some(holder)
}

/// Whether a futex at `addr` is one of the GIL's at `gil`.
pub fn is_gil_futex(gil: usize, l: &GilLayout, addr: usize) -> bool {
    addr.checked_sub(gil).is_some_and(|o| l.wait.contains(&o))
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Bytes(Vec<u8>);

    impl Memory for Bytes {
        fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
            match self.0.get(addr..addr + buf.len()) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    true
                }
                None => false,
            }
        }
    }

    fn gil(interval: u64, holder: u64, locked: u32) -> Bytes {
        let mut b = vec![0u8; 256];
        b[..8].copy_from_slice(&interval.to_le_bytes());
        b[8..16].copy_from_slice(&holder.to_le_bytes());
        b[16..20].copy_from_slice(&locked.to_le_bytes());
        Bytes(b)
    }

    #[test]
    fn the_holder_is_read_while_locked_only() {
        let l = layout(11).unwrap();
        assert_eq!(layout(9), layout(13));
        assert_eq!(layout(8), None);
        assert_eq!(holder(&gil(5000, 0x1000, 1), 0, &l), Some(0x1000));
        assert_eq!(holder(&gil(5000, 0x1000, 0), 0, &l), None);
        assert!(held_by(&gil(5000, 0x1000, 1), 0, &l, 0x1000));
        assert!(!held_by(&gil(5000, 0x1000, 1), 0, &l, 0x2000));
        assert!(!held_by(&gil(0, 0x1000, 1), 0, &l, 0x1000));
        assert!(
            !held_by(&gil(5000, 0x1000, 1), 100, &l, 0x1000),
            "unreadable"
        );
    }

    #[test]
    fn a_futex_in_the_conditions_or_mutexes_is_the_gil_s() {
        let l = layout(12).unwrap();
        let g = 0x7000;
        assert!(is_gil_futex(g, &l, g + 32 + 8));
        assert!(is_gil_futex(g, &l, g + 80));
        assert!(is_gil_futex(g, &l, g + 168));
        assert!(!is_gil_futex(g, &l, g + 16));
        assert!(!is_gil_futex(g, &l, g - 8));
        assert!(!is_gil_futex(g, &l, g + 216));
    }
}

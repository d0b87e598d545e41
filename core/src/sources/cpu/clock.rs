//! Sample times as CLOCK_REALTIME nanoseconds, the clock CUPTI's GPU times follow.
//!
//! The events are opened with `use_clockid = CLOCK_REALTIME`, which kernels accept for software
//! events; where one refuses it, they use CLOCK_MONOTONIC and the times are moved by the
//! measured offset between the two clocks.

use nix::time::{clock_gettime, ClockId};

/// How a sample's perf timestamp becomes CLOCK_REALTIME nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TimeBase {
    /// The kernel stamps samples with CLOCK_REALTIME.
    Realtime,
    /// The kernel stamps samples with CLOCK_MONOTONIC; realtime = monotonic + `offset_ns`.
    Monotonic { offset_ns: i64 },
}

impl TimeBase {
    pub fn to_realtime(self, perf_ns: u64) -> i64 {
        let t = i64::try_from(perf_ns).unwrap_or(i64::MAX);
        match self {
            TimeBase::Realtime => t,
            TimeBase::Monotonic { offset_ns } => t.saturating_add(offset_ns),
        }
    }
}

/// A clock's time in nanoseconds (0 where it cannot be read, which Linux never does for these
/// two clocks).
pub(crate) fn now_ns(clock: ClockId) -> i64 {
    clock_gettime(clock)
        .map(|t| t.tv_sec() * 1_000_000_000 + t.tv_nsec())
        .unwrap_or(0)
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC, now.
pub(crate) fn realtime_offset() -> i64 {
    measure_offset(
        || now_ns(ClockId::CLOCK_MONOTONIC),
        || now_ns(ClockId::CLOCK_REALTIME),
    )
}

/// The offset `real − mono`, from the tightest of a few readings of `real` bracketed by two of
/// `mono`: the midpoint of the bracket stands for the moment `real` was read.
fn measure_offset(mut mono: impl FnMut() -> i64, mut real: impl FnMut() -> i64) -> i64 {
    let mut best = (i64::MAX, 0);
    for _ in 0..5 {
        let a = mono();
        let r = real();
        let b = mono();
        let width = b - a;
        if width < best.0 {
            best = (width, r - (a + width / 2));
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn realtime_times_pass_through_and_monotonic_ones_move_by_the_offset() {
        assert_eq!(
            TimeBase::Realtime.to_realtime(1_700_000_000_123),
            1_700_000_000_123
        );
        let m = TimeBase::Monotonic { offset_ns: 1_000 };
        assert_eq!(m.to_realtime(5), 1_005);
        assert_eq!(TimeBase::Realtime.to_realtime(u64::MAX), i64::MAX);
    }

    #[test]
    fn the_offset_comes_from_the_tightest_bracket() {
        // Monotonic readings: brackets of width 100, 2 (the tightest), 50, ...
        let mono = [
            0, 100, 1_000, 1_002, 2_000, 2_050, 3_000, 3_100, 4_000, 4_100,
        ];
        let mut i = 0;
        let mut j = 0;
        let off = measure_offset(
            || {
                i += 1;
                mono[i - 1]
            },
            || {
                j += 1;
                [10_050, 11_001, 12_000, 13_000, 14_000][j - 1]
            },
        );
        assert_eq!(off, 11_001 - 1_001);
    }

    #[test]
    fn the_measured_offset_matches_the_clocks() {
        let off = realtime_offset();
        let real = now_ns(ClockId::CLOCK_REALTIME);
        let mono = now_ns(ClockId::CLOCK_MONOTONIC);
        assert!((mono + off - real).abs() < 5_000_000, "{off}");
    }
}

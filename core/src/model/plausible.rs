//! Which records' times gaptop believes: one rule for every source (the live socket and
//! recordings, Kineto traces, Nsight Systems exports), so that one wild timestamp (a kernel at
//! `ts` 0, a time moved by 10^15 ns, what CUPTI leaves in the records of kernels a dying
//! program never finished) cannot stretch a capture over decades and leave it "100% idle".
//!
//! A record (a GPU op, an API call, a CPU span, an NVTX range, a CPU sample) is implausible
//! when
//!
//! 1. its end comes before its start, or a GPU op lasts more than an hour ([`MAX_OP_NS`]); or
//! 2. one of its times lies outside its clock's plausible span: beyond 2^62 ns either way
//!    ([`MAX_TS`]), or more than `max(1 h, 100 × (hi − lo))` ([`margin`]) before `lo` or after
//!    `hi`, where `[lo, hi]` is where the bulk of that clock's times lie ([`Bulk`]). A record's
//!    times are its start and its end; an NVTX range's only its end (a range may have begun
//!    long before the capture did: a dormant program's, attached to later); or
//! 3. in a file (a trace, an export: all of its times known before any is judged,
//!    [`FileBulk`]), a GPU op stands alone far from the others: it starts more than
//!    `max(1 min, 100 × (hi − lo))` ([`op_margin`]) before `lo` or after `hi`, or it ends
//!    that much after both `hi` and the latest end of the file's API calls (a call that waits
//!    for a long kernel, `cudaDeviceSynchronize`, covers it). A 16-minute kernel in a trace of
//!    milliseconds, or one an hour after the rest, is dropped; a GPU busy for minutes with the
//!    program waiting on it is kept. Live connections and recordings keep rules 1 and 2: a
//!    program may go on after a long idle time.
//!
//! A clock is what one source's times share: a trace file (the ranks of a run may each have
//! their own, which `traceset` aligns afterwards), an Nsight Systems export, one live
//! connection (a recording is read as the connections it recorded).
//!
//! Its bulk `[lo, hi]`:
//! - of a file: from the 1st to the 99th percentile of the starts of its GPU ops, API calls and
//!   CPU spans (at least the earliest and the latest left out once there are three), read
//!   from at most [`SAMPLE`] of them evenly spread ([`Times`]);
//! - live: learnt as the records arrive ([`Track`]): the first frame's bulk, widened by every
//!   record admitted. A frame whose own bulk lies past the margin after `hi`, and is no wider
//!   than the margin, is the program going on after a long idle time (a notebook, a server):
//!   it moves `hi` there. No frame moves `lo` back: a program's time only goes forward.
//!
//! So nothing within an hour of the bulk is ever dropped, a capture of hours keeps days of
//! slack, and a program that died keeps its timeline readable.
//!
//! An implausible record is dropped, counted in the store's `skipped` (by what it is and why)
//! and kept with one example per cause in `Store::dropped_times`, whose [`Drops::lines`] the
//! report's notes, stderr and the UI's status line show.

use std::collections::BTreeMap;

use super::records::{Ns, MAX_OP_NS, MAX_TS};
use crate::units::{count, fmt_ns};

/// Nothing within this of the bulk of a clock's times is implausible (an hour).
pub const MIN_MARGIN_NS: Ns = 3_600_000_000_000;
/// How many times the bulk's own extent a time may lie outside it.
pub const SPAN_FACTOR: Ns = 100;
/// Most times a file's bulk is found from.
pub const SAMPLE: usize = 1 << 16;

/// How far outside a bulk of extent `span` a time may lie: `max(1 h, 100 × span)`.
pub fn margin(span: Ns) -> Ns {
    MIN_MARGIN_NS.max(span.saturating_mul(SPAN_FACTOR))
}

/// What a record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum What {
    GpuOp,
    ApiCall,
    CpuSpan,
    Range,
    CpuSample,
}

impl What {
    fn noun(self) -> &'static str {
        match self {
            What::GpuOp => "GPU op",
            What::ApiCall => "API call",
            What::CpuSpan => "CPU span",
            What::Range => "NVTX range",
            What::CpuSample => "CPU sample",
        }
    }
}

/// Why a record is implausible.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Why {
    /// Outside its clock's plausible span.
    Far,
    EndBeforeStart,
    /// A GPU op longer than [`MAX_OP_NS`].
    TooLong,
    /// A file's GPU op that ends far past the rest of the file (rule 3; `off` is its length).
    Outlasts,
}

/// The verdict on one record: why it is implausible, and how far outside the plausible span
/// its farthest time lies (negative: before it; for `Far` only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub why: Why,
    pub at: Ns,
    pub off: Ns,
}

/// Rule 1, and the clock's ends: what can be told of a record alone. `end` is `start` for a
/// CPU sample.
pub fn shape(what: What, start: Ns, end: Ns) -> Option<Verdict> {
    let v = |why, at, off| Some(Verdict { why, at, off });
    for t in [start, end] {
        if t.unsigned_abs() > MAX_TS {
            return v(Why::Far, t, 0);
        }
    }
    if end < start {
        return v(Why::EndBeforeStart, start, end - start);
    }
    if what == What::GpuOp && end - start > MAX_OP_NS {
        return v(Why::TooLong, start, end - start);
    }
    None
}

/// Times read from the clock's ends (u64 on the wire) as the store keeps them; beyond 2^62
/// ns is past [`MAX_TS`] either way.
pub fn wire_ns(t: u64) -> Ns {
    t.min(i64::MAX as u64) as Ns
}

/// The times of a record that rule 2 looks at.
fn placed(what: What, start: Ns, end: Ns) -> [Ns; 2] {
    if what == What::Range {
        [end, end]
    } else {
        [start, end]
    }
}

/// Where the bulk of a clock's times lie: `[lo, hi]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bulk {
    pub lo: Ns,
    pub hi: Ns,
}

impl Bulk {
    /// The bulk of `times` (reordered): from the 1st to the 99th percentile, at least the
    /// earliest and the latest left out of three or more. `None` for no times.
    pub fn of(times: &mut [Ns]) -> Option<Bulk> {
        let n = times.len();
        if n == 0 {
            return None;
        }
        let k = if n >= 3 { n.div_ceil(100) } else { 0 };
        let lo = *times.select_nth_unstable(k).1;
        let hi = *times.select_nth_unstable(n - 1 - k).1;
        Some(Bulk { lo, hi })
    }

    /// How far outside the plausible span `t` lies: 0 inside it, negative before it.
    fn off(&self, t: Ns) -> Ns {
        let m = margin(self.hi.saturating_sub(self.lo));
        if t < self.lo.saturating_sub(m) {
            t.saturating_sub(self.lo)
        } else if t > self.hi.saturating_add(m) {
            t.saturating_sub(self.hi)
        } else {
            0
        }
    }

    /// The verdict of both rules on a record; `None` when it is plausible.
    pub fn judge(&self, what: What, start: Ns, end: Ns) -> Option<Verdict> {
        if let Some(v) = shape(what, start, end) {
            return Some(v);
        }
        placed(what, start, end).into_iter().find_map(|t| {
            let off = self.off(t);
            (off != 0).then_some(Verdict {
                why: Why::Far,
                at: t,
                off,
            })
        })
    }
}

/// Nothing within this of the bulk of a file's times is an outlier GPU op (rule 3; a minute).
pub const MIN_OP_MARGIN_NS: Ns = 60_000_000_000;

/// How far outside a file's bulk of extent `span` a GPU op may lie or reach (rule 3):
/// `max(1 min, 100 × span)`.
pub fn op_margin(span: Ns) -> Ns {
    MIN_OP_MARGIN_NS.max(span.saturating_mul(SPAN_FACTOR))
}

/// A file's plausible span, all of it known before any record is judged: its [`Bulk`], and
/// how far its API calls reach (the latest end of those rule 2 keeps; a call that waits on a
/// long kernel covers the kernel).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileBulk {
    pub bulk: Bulk,
    pub reach: Ns,
}

impl FileBulk {
    /// Moves `reach` to the latest end of `calls` (start, end) that rule 2 keeps.
    pub fn reach_to(&mut self, calls: impl Iterator<Item = (Ns, Ns)>) {
        let b = self.bulk;
        self.reach = calls
            .filter(|&(s, e)| b.judge(What::ApiCall, s, e).is_none())
            .fold(self.reach, |r, (_, e)| r.max(e));
    }

    /// The verdict of rules 1 to 3 on a record; `None` when it is plausible.
    pub fn judge(&self, what: What, start: Ns, end: Ns) -> Option<Verdict> {
        if let Some(v) = self.bulk.judge(what, start, end) {
            return Some(v);
        }
        if what != What::GpuOp {
            return None;
        }
        let Bulk { lo, hi } = self.bulk;
        let m = op_margin(hi.saturating_sub(lo));
        let v = |why, at, off| Some(Verdict { why, at, off });
        if start < lo.saturating_sub(m) {
            return v(Why::Far, start, start.saturating_sub(lo));
        }
        if start > hi.saturating_add(m) {
            return v(Why::Far, start, start.saturating_sub(hi));
        }
        if end > hi.max(self.reach).saturating_add(m) {
            return v(Why::Outlasts, start, end - start);
        }
        None
    }
}

/// At most [`SAMPLE`] of a file's times, evenly spread over the `total` it will be given.
pub struct Times {
    every: usize,
    seen: usize,
    v: Vec<Ns>,
}

impl Times {
    pub fn new(total: usize) -> Times {
        Times {
            every: total.div_ceil(SAMPLE).max(1),
            seen: 0,
            v: Vec::with_capacity(total.min(SAMPLE)),
        }
    }

    #[inline]
    pub fn push(&mut self, t: Ns) {
        if self.seen.is_multiple_of(self.every) {
            self.v.push(t);
        }
        self.seen += 1;
    }

    pub fn bulk(mut self) -> Option<Bulk> {
        Bulk::of(&mut self.v)
    }
}

/// A live connection's plausible span, learnt as its records arrive (the module's rule).
#[derive(Clone, Copy, Debug, Default)]
pub struct Track {
    bulk: Option<Bulk>,
}

impl Track {
    /// Takes in the times of a frame's records before they are judged (the frame's starts,
    /// a range's ends, as [`Track::judge`] reads them; reordered): the first frame's bulk
    /// starts the span, a later frame's moves its end on when the program went on after a
    /// long idle time.
    pub fn frame(&mut self, times: &mut [Ns]) {
        let Some(f) = Bulk::of(times) else {
            return;
        };
        match &mut self.bulk {
            None => self.bulk = Some(f),
            Some(b) => {
                let m = margin(b.hi.saturating_sub(b.lo));
                if f.lo > b.hi.saturating_add(m) && f.hi - f.lo <= m {
                    b.hi = f.hi;
                }
            }
        }
    }

    /// The verdict on one record; a plausible one widens the span.
    pub fn judge(&mut self, what: What, start: Ns, end: Ns) -> Option<Verdict> {
        if let Some(v) = shape(what, start, end) {
            return Some(v);
        }
        let Some(b) = &mut self.bulk else {
            // No frame said where the clock is yet: the record starts the span.
            let [a, z] = placed(what, start, end);
            self.bulk = Some(Bulk { lo: a, hi: z });
            return None;
        };
        if let Some(v) = b.judge(what, start, end) {
            return Some(v);
        }
        for t in placed(what, start, end) {
            b.lo = b.lo.min(t);
            b.hi = b.hi.max(t);
        }
        None
    }

    /// The time [`Track::judge`] places a record by first, for [`Track::frame`].
    pub fn time_of(what: What, start: Ns, end: Ns) -> Ns {
        placed(what, start, end)[0]
    }
}

/// The records dropped as implausible: per kind and cause, how many and the first one's
/// description.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Drops {
    by: BTreeMap<(What, Why), (u64, String)>,
    total: u64,
}

impl Drops {
    /// Counts a drop of `what` for `why`; true when it is the first of its kind and cause
    /// (whose example [`Drops::set_example`] then keeps).
    pub(super) fn count(&mut self, what: What, why: Why) -> bool {
        self.total += 1;
        let e = self
            .by
            .entry((what, why))
            .or_insert_with(|| (0, String::new()));
        e.0 += 1;
        e.0 == 1
    }

    /// The example shown for `what` dropped for `why`.
    pub(super) fn set_example(&mut self, what: What, why: Why, example: String) {
        if let Some(e) = self.by.get_mut(&(what, why)) {
            e.1 = example;
        }
    }

    /// Adds `other`'s drops (read apart, after these): counts add up, and the example of a
    /// kind and cause stays the first one seen.
    pub fn absorb(&mut self, other: Drops) {
        self.total += other.total;
        for (k, (n, example)) in other.by {
            self.by.entry(k).or_insert_with(|| (0, example)).0 += n;
        }
    }

    /// Records dropped so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// One line per kind and cause: how many, and an example.
    pub fn lines(&self) -> Vec<String> {
        self.by
            .iter()
            .map(|(&(what, why), (n, example))| {
                let what = count(*n, what.noun());
                let because = match why {
                    Why::Far => "with an implausible time",
                    Why::EndBeforeStart if *n == 1 => "that ends before it starts",
                    Why::EndBeforeStart => "that end before they start",
                    Why::TooLong => "longer than an hour",
                    Why::Outlasts if *n == 1 => "that outlasts the rest of the capture by far",
                    Why::Outlasts => "that outlast the rest of the capture by far",
                };
                let eg = if *n == 1 { "" } else { "e.g. " };
                format!("dropped {what} {because} ({eg}{example})")
            })
            .collect()
    }
}

/// The skipped count's key of a kind and cause.
pub(super) fn skip_key(what: What, why: Why) -> String {
    let n = what.noun();
    match why {
        Why::Far => format!("{n} with an implausible time"),
        Why::EndBeforeStart => format!("{n} ending before it starts"),
        Why::TooLong => format!("{n} longer than an hour"),
        Why::Outlasts => format!("{n} outlasting the capture"),
    }
}

/// A long time as people say it: `53.9 years`, `11.6 days`, `2.5 h`, `16.7 min`, else
/// [`fmt_ns`].
pub fn fmt_far(ns: Ns) -> String {
    let a = ns.unsigned_abs() as f64;
    const H: f64 = 3.6e12;
    if a >= 2.0 * 365.25 * 24.0 * H {
        format!("{:.1} years", a / (365.25 * 24.0 * H))
    } else if a >= 2.0 * 24.0 * H {
        format!("{:.1} days", a / (24.0 * H))
    } else if a >= H {
        format!("{:.1} h", a / H)
    } else if a >= 120e9 {
        format!("{:.1} min", a / 60e9)
    } else {
        fmt_ns(a as Ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::store::Store;

    const S: Ns = 1_000_000_000;

    #[test]
    fn the_bulk_leaves_out_the_extremes() {
        let mut v: Vec<Ns> = (0..10).map(|i| 1_700_000 * S + i * S).collect();
        v.push(0);
        let b = Bulk::of(&mut v).unwrap();
        assert_eq!((b.lo, b.hi), (1_700_000 * S, 1_700_008 * S));
        assert_eq!(Bulk::of(&mut [5, 9]), Some(Bulk { lo: 5, hi: 9 }));
        assert_eq!(Bulk::of(&mut []), None);
        // 1% of 1,000: ten at each end are left out.
        let mut v: Vec<Ns> = (0..1000).collect();
        assert_eq!(Bulk::of(&mut v), Some(Bulk { lo: 10, hi: 989 }));
    }

    #[test]
    fn a_time_is_plausible_within_an_hour_or_a_hundred_spans_of_the_bulk() {
        let b = Bulk {
            lo: 10_000 * S,
            hi: 10_010 * S,
        };
        let j = |t: Ns| b.judge(What::GpuOp, t, t + 1).map(|v| (v.why, v.off));
        assert_eq!(j(10_005 * S), None);
        // 10 s of bulk: the margin is the hour.
        assert_eq!(j(10_010 * S + 3600 * S - 1), None);
        assert_eq!(j(10_010 * S + 3601 * S), Some((Why::Far, 3601 * S)));
        assert_eq!(j(10_000 * S - 3600 * S), None);
        assert_eq!(j(0), Some((Why::Far, -10_000 * S)));
        // 2 h of bulk: 200 h either way.
        let long = Bulk {
            lo: 0,
            hi: 7200 * S,
        };
        assert_eq!(long.judge(What::ApiCall, -199 * 3600 * S, 0), None);
        assert!(long.judge(What::ApiCall, -201 * 3600 * S, 0).is_some());
        // A range is placed by its end.
        assert_eq!(long.judge(What::Range, -900 * 3600 * S, 7000 * S), None);
        assert!(long
            .judge(What::CpuSpan, -900 * 3600 * S, 7000 * S)
            .is_some());
    }

    #[test]
    fn a_files_gpu_op_far_from_the_rest_is_an_outlier_unless_a_call_covers_it() {
        let ms = S / 1000;
        let mut f = FileBulk {
            bulk: Bulk {
                lo: 10_000 * S,
                hi: 10_000 * S + 20 * ms,
            },
            reach: 10_000 * S + 20 * ms,
        };
        let j = |f: &FileBulk, s: Ns, e: Ns| f.judge(What::GpuOp, s, e).map(|v| (v.why, v.off));
        let at = 10_000 * S + 5 * ms;
        // 20 ms of bulk: a minute either way.
        assert_eq!(j(&f, at, at + 50 * S), None);
        assert_eq!(j(&f, at, at + 1000 * S), Some((Why::Outlasts, 1000 * S)));
        let late = 10_000 * S + 20 * ms + 1800 * S;
        assert_eq!(j(&f, late, late + ms), Some((Why::Far, 1800 * S)));
        assert_eq!(
            j(&f, 9_000 * S, 9_000 * S + ms),
            Some((Why::Far, -1000 * S))
        );
        // Rules 1 and 2 first, and only GPU ops are judged by rule 3.
        assert_eq!(j(&f, at, at + 7200 * S), Some((Why::TooLong, 7200 * S)));
        assert_eq!(f.judge(What::ApiCall, at, at + 1000 * S), None);
        // A call that waits for the kernel covers it; one past rule 2 does not.
        f.reach_to([(at, at + 1001 * S), (at, at + 100 * 3600 * S)].into_iter());
        assert_eq!(f.reach, at + 1001 * S);
        assert_eq!(j(&f, at, at + 1000 * S), None);
        // 2 h of bulk: 200 h either way, as rule 2 allows.
        let long = FileBulk {
            bulk: Bulk {
                lo: 0,
                hi: 7200 * S,
            },
            reach: 7200 * S,
        };
        assert_eq!(j(&long, 7200 * S + 3601 * S, 7200 * S + 3602 * S), None);
    }

    #[test]
    fn shapes_that_cannot_be() {
        let why = |w, s, e| shape(w, s, e).map(|v| v.why);
        assert_eq!(why(What::GpuOp, 10, 5), Some(Why::EndBeforeStart));
        assert_eq!(why(What::GpuOp, 0, MAX_OP_NS + 1), Some(Why::TooLong));
        assert_eq!(
            why(What::ApiCall, 0, MAX_OP_NS + 1),
            None,
            "a call may wait"
        );
        assert_eq!(why(What::CpuSample, 1 << 62, 1 << 62), None);
        assert_eq!(why(What::CpuSample, (1 << 62) + 1, 5), Some(Why::Far));
        assert_eq!(wire_ns(u64::MAX), i64::MAX);
    }

    #[test]
    fn live_the_span_grows_with_the_run_and_a_dead_programs_zeros_are_dropped() {
        let mut t = Track::default();
        let at = |s: Ns| 1_780_000_000 * S + s;
        t.frame(&mut [at(0), at(S), at(2 * S)]);
        // Five hours of records, a frame every ten minutes: all kept.
        for m in 1..=30 {
            let x = at(m * 600 * S);
            t.frame(&mut [x, x + S]);
            assert_eq!(t.judge(What::GpuOp, x, x + 10), None, "minute {}", m * 10);
            assert_eq!(t.judge(What::ApiCall, x + S, x + S), None);
        }
        // What CUPTI leaves of kernels that never ran: start 0, or an end before the start.
        let x = at(5 * 3600 * S + S);
        t.frame(&mut [0, 0, x]);
        assert_eq!(t.judge(What::GpuOp, 0, 0).unwrap().why, Why::Far);
        assert_eq!(t.judge(What::GpuOp, x, 0).unwrap().why, Why::EndBeforeStart);
        assert_eq!(t.judge(What::GpuOp, x, x + 5), None);
    }

    #[test]
    fn live_a_program_that_goes_on_after_a_long_idle_time_is_followed() {
        let mut t = Track::default();
        t.frame(&mut [100 * S, 101 * S]);
        assert_eq!(t.judge(What::ApiCall, 100 * S, 101 * S), None);
        // Three hours later, a frame of its own: the program went on.
        let later = 100 * S + 3 * 3600 * S;
        let mut f = [later, later + S, later + 2 * S];
        t.frame(&mut f);
        assert_eq!(t.judge(What::GpuOp, later, later + 5), None);
        // One wild record in an otherwise plausible frame does not move the span.
        let wild = 1 << 60;
        t.frame(&mut [later + 3 * S, later + 3 * S, wild]);
        assert_eq!(t.judge(What::GpuOp, wild, wild + 1).unwrap().why, Why::Far);
        // Nor does a frame whose times are far apart.
        t.frame(&mut [1 << 59, 1 << 60]);
        assert!(t.judge(What::GpuOp, 1 << 59, (1 << 59) + 1).is_some());
    }

    #[test]
    fn samples_spread_evenly_and_find_the_bulk() {
        let n = 3 * SAMPLE + 7;
        let mut t = Times::new(n);
        for i in 0..n as Ns {
            t.push(if i == 4 { 0 } else { 1_000_000 + i });
        }
        assert!(t.v.len() <= SAMPLE);
        let b = t.bulk().unwrap();
        assert!(b.lo > 1_000_000 && b.hi < 1_000_000 + n as Ns, "{b:?}");
    }

    #[test]
    fn warnings_name_the_cause_a_count_and_an_example() {
        let mut st = Store::default();
        let (kern, other, launch) = (
            st.names.intern("kern"),
            st.names.intern("other"),
            st.names.intern("cudaLaunchKernel"),
        );
        let far = Verdict {
            why: Why::Far,
            at: 0,
            off: -1_700_000 * S,
        };
        st.drop_implausible(What::GpuOp, far, kern);
        assert_eq!(
            st.dropped_times.lines(),
            ["dropped 1 GPU op with an implausible time (`kern` at 0 ns, 19.7 days before the rest of the capture)"]
        );
        st.drop_implausible(What::GpuOp, far, other);
        let back = Verdict {
            why: Why::EndBeforeStart,
            at: 5,
            off: -3,
        };
        st.drop_implausible(What::ApiCall, back, launch);
        assert_eq!(
            st.dropped_times.lines(),
            [
                "dropped 2 GPU ops with an implausible time (e.g. `kern` at 0 ns, 19.7 days before the rest of the capture)",
                "dropped 1 API call that ends before it starts (`cudaLaunchKernel` ending 3ns before its start)",
            ]
        );
        assert_eq!(st.skipped["GPU op with an implausible time"], 2);
        assert_eq!(st.skipped["API call ending before it starts"], 1);
        assert_eq!(st.dropped_times.total(), 3);
        assert_eq!(fmt_far(53 * 365 * 24 * 3600 * S), "53.0 years");
    }
}

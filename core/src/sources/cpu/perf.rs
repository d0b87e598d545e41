//! One perf event per thread: a software cpu-clock that samples the thread's user registers and
//! a copy of its user stack into a ring buffer, through the `perf-event2` crate (whose unsafe
//! code is the system call, the ring buffer's mapping and its reads).

use std::io;

use nix::errno::Errno;
use perf_event::data::Record;
use perf_event::events::Software;
use perf_event::{Builder, Clock, SampleFlag};

/// `sample_regs_user`: bits of `enum perf_event_x86_regs` (arch/x86/include/uapi/asm/
/// perf_regs.h): BP = 6, SP = 7, IP = 8. A sample holds the registers in the order of their
/// bits: BP, SP, IP.
const REGS_MASK: u64 = (1 << 6) | (1 << 7) | (1 << 8);

/// The part of a sample the unwinder needs. `stack` is the copy of the user stack from `sp` up.
pub(crate) struct RawSample<'a> {
    pub tid: u32,
    pub time: u64,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    pub stack: &'a [u8],
}

/// How often and how deep threads are sampled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerConfig {
    /// CPU time of a thread between two of its samples, in µs (1000: 1 kHz while it runs).
    pub period_us: u64,
    /// Bytes of user stack copied with each sample, from the stack pointer up (a multiple of
    /// 8 below 64 KiB). Frames beyond the copy are cut off; try 32768 where deep stacks are.
    pub stack_bytes: u32,
}

impl Default for SamplerConfig {
    fn default() -> Self {
        SamplerConfig {
            period_us: 1000,
            stack_bytes: 16384,
        }
    }
}

/// The stack copy's size as the kernel takes it: a multiple of 8, under 64 KiB (a record's
/// size is 16 bits).
pub(crate) fn stack_bytes(cfg: &SamplerConfig) -> u32 {
    cfg.stack_bytes.clamp(8, 65_000) & !7
}

/// Bytes of ring buffer per thread: 64 stack copies, to the next power of two (1 MiB for the
/// default 16 KiB copies; at 1 kHz that is about 63 ms of one busy thread's samples).
pub(crate) fn ring_bytes(cfg: &SamplerConfig) -> usize {
    (stack_bytes(cfg) as usize * 64).next_power_of_two()
}

/// Opens and enables thread `tid`'s event with timestamps from `clock`, with the kernel's
/// context-switch records of the thread (`PERF_RECORD_SWITCH`) where `switches`. The ring
/// buffer is made smaller, down to 8 stack copies, where the locked-memory limit refuses the
/// full size; the second value is the size it got.
pub(crate) fn open(
    tid: u32,
    cfg: &SamplerConfig,
    clock: Clock,
    switches: bool,
) -> io::Result<(perf_event::Sampler, usize)> {
    let stack = stack_bytes(cfg);
    let mut b = Builder::new(Software::CPU_CLOCK);
    b.observe_pid(tid as i32)
        .any_cpu()
        .sample_period(cfg.period_us.max(1).saturating_mul(1000))
        .sample(SampleFlag::TID | SampleFlag::TIME | SampleFlag::REGS_USER | SampleFlag::STACK_USER)
        .sample_regs_user(REGS_MASK)
        .sample_stack_user(stack)
        .exclude_kernel(true)
        .exclude_hv(true)
        .clockid(clock);
    if switches {
        // A switch record carries the thread and the time as a sample does (`sample_id_all`).
        b.context_switch(true).sample_id_all(true);
    }
    let mut len = ring_bytes(cfg);
    let least = (stack as usize * 8).next_power_of_two();
    loop {
        let counter = b.build()?;
        match counter.sampled(len) {
            Ok(mut s) => {
                s.enable()?;
                return Ok((s, len));
            }
            Err(e) if len > least && matches!(errno(&e), Errno::EPERM | Errno::ENOMEM) => len /= 2,
            Err(e) => return Err(e),
        }
    }
}

/// `PERF_RECORD_SWITCH` and its `misc` flags (include/uapi/linux/perf_event.h): the thread
/// left its CPU (else it came back), and it left it runnable (preempted, Linux 4.17 on).
const RECORD_SWITCH: u32 = 14;
const MISC_SWITCH_OUT: u16 = 1 << 13;
const MISC_SWITCH_OUT_PREEMPT: u16 = 1 << 14;

/// A context switch of the thread an event watches: when it left its CPU (`out`), whether
/// still runnable (`preempt`), or when it came back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawSwitch {
    pub tid: u32,
    pub time: u64,
    pub out: bool,
    pub preempt: bool,
}

/// A switch record's thread and time: its `sample_id` (the sample's TID then TIME, as the
/// event samples them) is all its body holds.
fn switch_of(misc: u16, body: &[u8]) -> Option<RawSwitch> {
    let word = |i: usize| {
        body.get(i..i + 4)
            .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
    };
    let tid = word(4)?;
    let time = u64::from(word(8)?) | u64::from(word(12)?) << 32;
    Some(RawSwitch {
        tid,
        time,
        out: misc & MISC_SWITCH_OUT != 0,
        preempt: misc & MISC_SWITCH_OUT_PREEMPT != 0,
    })
}

/// Reads every record in `ring`, handing each sample with user registers and stack to `each`
/// and each context switch to `switch`; returns the number of samples the kernel reported
/// lost (PERF_RECORD_LOST: the ring was full).
pub(crate) fn drain(
    ring: &mut perf_event::Sampler,
    mut each: impl FnMut(RawSample<'_>),
    mut switch: impl FnMut(RawSwitch),
) -> u64 {
    let mut lost = 0;
    while let Some(rec) = ring.next_record() {
        if rec.ty() == RECORD_SWITCH {
            if let Some(s) = switch_of(rec.misc(), &rec.to_contiguous()) {
                switch(s);
            }
            continue;
        }
        match rec.parse_record() {
            Ok(Record::Sample(s)) => {
                let regs = s.regs_user().and_then(|r| ip_sp_bp(&r.regs));
                if let (Some((ip, sp, bp)), Some(tid), Some(time)) = (regs, s.tid(), s.time()) {
                    let stack = s.stack_user().unwrap_or(&[]);
                    each(RawSample {
                        tid,
                        time,
                        ip,
                        sp,
                        bp,
                        stack,
                    });
                }
            }
            Ok(Record::Lost(l)) => lost += l.lost,
            _ => {}
        }
    }
    lost
}

/// IP, SP and BP from the registers of a sample taken with [`REGS_MASK`]; none where the sample
/// has no user registers (the kernel sends none for a kernel thread).
fn ip_sp_bp(regs: &[u64]) -> Option<(u64, u64, u64)> {
    match *regs {
        [bp, sp, ip] if ip != 0 => Some((ip, sp, bp)),
        _ => None,
    }
}

pub(crate) fn errno(e: &io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(0))
}

/// What a failed `perf_event_open` for one thread means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Perf events cannot be had here: why, in one line.
    Refused(String),
    /// This thread is not sampled (the process is out of file descriptors): why, in one line.
    Thread(String),
    /// The thread ended before its event opened.
    Gone,
}

/// Reads the error of `perf_event_open` for thread `tid`, at `perf_event_paranoid` level
/// `paranoid`.
pub(crate) fn failure(tid: u32, e: &io::Error, paranoid: Option<i32>) -> Failure {
    let level = paranoid.map_or("unreadable".to_string(), |p| p.to_string());
    let err = errno(e);
    Failure::Refused(match err {
        Errno::ESRCH => return Failure::Gone,
        Errno::EMFILE | Errno::ENFILE => {
            return Failure::Thread(format!("thread {tid} is not sampled: {e}"))
        }
        Errno::EACCES | Errno::EPERM => match paranoid {
            Some(p) if p <= 2 => format!(
                "CPU sampling is off: perf_event_open refused ({err}) though \
                 perf_event_paranoid is {p}, which allows one's own processes: the process is \
                 another user's, or a seccomp filter blocks perf_event_open"
            ),
            _ => format!(
                "CPU sampling is off: perf_event_open refused ({err}); perf_event_paranoid is \
                 {level}, and sampling one's own processes needs 2 or below, or CAP_PERFMON"
            ),
        },
        Errno::ENOSYS => format!(
            "CPU sampling is off: perf_event_open is not available ({err}): a kernel without \
             perf events, or a seccomp filter"
        ),
        Errno::ENOENT | Errno::ENODEV | Errno::EOPNOTSUPP => format!(
            "CPU sampling is off: this kernel has no software cpu-clock event with user \
             registers and stack ({err})"
        ),
        Errno::EINVAL | Errno::E2BIG | Errno::EOVERFLOW => {
            format!("CPU sampling is off: the kernel rejected the sampling options ({err})")
        }
        _ => format!("CPU sampling is off: perf_event_open failed: {e}"),
    })
}

/// `/proc/sys/kernel/perf_event_paranoid`.
pub(crate) fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_come_in_the_order_of_their_bits() {
        assert_eq!(ip_sp_bp(&[0xb, 0x5, 0x1]), Some((0x1, 0x5, 0xb)));
        assert_eq!(ip_sp_bp(&[]), None);
        assert_eq!(ip_sp_bp(&[1, 2, 0]), None);
    }

    #[test]
    fn a_switch_record_reads_its_thread_time_and_flags() {
        let mut body = Vec::new();
        for w in [7u32, 9, 0x89ab_cdef, 0x1] {
            body.extend_from_slice(&w.to_le_bytes());
        }
        let s = switch_of(MISC_SWITCH_OUT | MISC_SWITCH_OUT_PREEMPT, &body).unwrap();
        assert_eq!(
            (s.tid, s.time, s.out, s.preempt),
            (9, 0x1_89ab_cdef, true, true)
        );
        let s = switch_of(0, &body).unwrap();
        assert!(!s.out && !s.preempt);
        assert_eq!(switch_of(0, &body[..12]), None);
    }

    #[test]
    fn stack_and_ring_sizes() {
        let c = |stack_bytes| SamplerConfig {
            period_us: 1000,
            stack_bytes,
        };
        assert_eq!(stack_bytes(&c(16_384)), 16_384);
        assert_eq!(stack_bytes(&c(100_000)), 65_000);
        assert_eq!(stack_bytes(&c(13)), 8);
        assert_eq!(ring_bytes(&c(16_384)), 1 << 20);
        assert_eq!(ring_bytes(&c(32_768)), 2 << 20);
    }

    #[test]
    fn refusals_are_one_line_and_say_why() {
        let e = |n| io::Error::from_raw_os_error(n as i32);
        let refused = |n, level| match failure(7, &e(n), level) {
            Failure::Refused(why) => why,
            f => panic!("{f:?}"),
        };
        let r = refused(Errno::EACCES, Some(3));
        assert!(
            r.contains("perf_event_paranoid is 3") && r.contains("EACCES"),
            "{r}"
        );
        let r = refused(Errno::ENOSYS, None);
        assert!(r.contains("not available") && !r.contains('\n'), "{r}");
        assert!(refused(Errno::EPERM, None).contains("unreadable"));
        let r = refused(Errno::EPERM, Some(2));
        assert!(r.contains("another user's") && r.contains("seccomp"), "{r}");
        assert_eq!(failure(7, &e(Errno::ESRCH), Some(2)), Failure::Gone);
        let f = failure(7, &e(Errno::EMFILE), Some(2));
        assert!(
            matches!(&f, Failure::Thread(why) if why.starts_with("thread 7 ")),
            "{f:?}"
        );
    }
}

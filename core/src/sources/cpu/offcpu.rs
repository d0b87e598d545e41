//! What the program's threads did while on no CPU, from outside it and without privileges.
//!
//! The sampler's events carry the kernel's context-switch records of each thread
//! ([`super::Switch`]): a switch out, then a switch back in, bound a stretch off the CPU; a
//! switch out while still runnable (`preempt`) is a stretch of waiting for a CPU, any other a
//! stretch asleep. What it slept in is read every tick (about a millisecond, beside the Python
//! stacks) from `/proc/PID/task/TID/syscall`, which the kernel fills for a thread asleep: the
//! system call and its arguments (a running thread reads `running`). A thread asleep in `futex`
//! on one of the GIL's futexes waits for the GIL (`gaptop_pystack::gil`); the thread that holds
//! it is read at the same ticks, where the collector's calibration found the GIL. A stretch
//! takes the Python stack its thread had meanwhile (the sampler reads every thread's), a
//! `read` the file its descriptor names.
//!
//! Nothing here stops or slows the program: the files are read as any reader of /proc reads
//! them, and the kernel writes the switch records into the rings the samples go to.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use super::Switch;

/// Stretches shorter than this are not kept: a thread's brief blocks say nothing of a gap.
pub const MIN_NS: i64 = 20_000;
/// How far from a short stretch a tick's reading may be to say what it slept in.
const NEAR_NS: i64 = 1_500_000;
/// How long after a thread's stretch in a known call a stretch under the same frames may take
/// that call.
const INHERIT_NS: i64 = 100_000_000;
/// How long readings are kept: a stretch is described at the poll after it ended.
const KEEP_NS: i64 = 2_000_000_000;
/// Threads read per process at each tick, at most.
const MAX_THREADS: usize = 64;

/// A stretch of time a thread spent off its CPU, as two switch records bound it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stretch {
    pub pid: u32,
    pub tid: u32,
    pub start: i64,
    pub end: i64,
    /// It left its CPU runnable (preempted), not asleep.
    pub preempt: bool,
}

/// Pairs each thread's switch out with its next switch in.
#[derive(Default)]
pub struct Pairs {
    out: HashMap<(u32, u32), (i64, bool)>,
}

impl Pairs {
    /// The stretches that `switches` (by time) close; a switch out waits for its switch in.
    pub fn feed(&mut self, switches: &[Switch]) -> Vec<Stretch> {
        let mut done = Vec::new();
        for s in switches {
            let k = (s.pid, s.tid);
            if s.out {
                self.out.insert(k, (s.time_ns, s.preempt));
            } else if let Some((start, preempt)) = self.out.remove(&k) {
                if s.time_ns - start >= MIN_NS {
                    done.push(Stretch {
                        pid: s.pid,
                        tid: s.tid,
                        start,
                        end: s.time_ns,
                        preempt,
                    });
                }
            }
        }
        done
    }
}

/// A thread's system call as `/proc/PID/task/TID/syscall` gives it while the thread sleeps:
/// its number (-1 where asleep outside one, a page fault) and its first two arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    pub nr: i64,
    pub arg0: u64,
}

/// Reads the file's text: `NR ARG0 ... SP PC` (arguments in hex), `-1 SP PC`, or `running`
/// (None).
pub fn parse_syscall(text: &str) -> Option<Call> {
    let mut it = text.split_whitespace();
    let nr: i64 = it.next()?.parse().ok()?;
    let hex = |s: Option<&str>| {
        s.and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
            .unwrap_or(0)
    };
    let arg0 = if nr >= 0 { hex(it.next()) } else { 0 };
    Some(Call { nr, arg0 })
}

/// The name of system call `nr` on this machine's architecture, for those a thread sleeps in.
pub fn syscall_name(nr: i64) -> String {
    #[cfg(target_arch = "x86_64")]
    const NAMES: &[(i64, &str)] = &[
        (0, "read"),
        (1, "write"),
        (7, "poll"),
        (16, "ioctl"),
        (17, "pread64"),
        (18, "pwrite64"),
        (19, "readv"),
        (20, "writev"),
        (23, "select"),
        (24, "sched_yield"),
        (35, "nanosleep"),
        (42, "connect"),
        (43, "accept"),
        (44, "sendto"),
        (45, "recvfrom"),
        (46, "sendmsg"),
        (47, "recvmsg"),
        (61, "wait4"),
        (74, "fsync"),
        (202, "futex"),
        (230, "clock_nanosleep"),
        (232, "epoll_wait"),
        (257, "openat"),
        (270, "pselect6"),
        (271, "ppoll"),
        (281, "epoll_pwait"),
        (288, "accept4"),
        (295, "preadv"),
        (299, "recvmmsg"),
        (327, "preadv2"),
        (449, "futex_waitv"),
    ];
    #[cfg(target_arch = "aarch64")]
    const NAMES: &[(i64, &str)] = &[
        (29, "ioctl"),
        (56, "openat"),
        (63, "read"),
        (64, "write"),
        (65, "readv"),
        (66, "writev"),
        (67, "pread64"),
        (68, "pwrite64"),
        (69, "preadv"),
        (72, "pselect6"),
        (73, "ppoll"),
        (82, "fsync"),
        (98, "futex"),
        (101, "nanosleep"),
        (115, "clock_nanosleep"),
        (124, "sched_yield"),
        (202, "accept"),
        (203, "connect"),
        (206, "sendto"),
        (207, "recvfrom"),
        (211, "sendmsg"),
        (212, "recvmsg"),
        (22, "epoll_pwait"),
        (242, "accept4"),
        (260, "wait4"),
        (286, "preadv2"),
        (449, "futex_waitv"),
    ];
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    const NAMES: &[(i64, &str)] = &[];
    match NAMES.iter().find(|n| n.0 == nr) {
        Some((_, name)) => name.to_string(),
        None if nr < 0 => "(no system call)".into(),
        None => format!("syscall {nr}"),
    }
}

/// Whether system call `name` reads a file descriptor (its first argument), which then names
/// the call: `read /data/shard-3.bin`.
fn reads_fd(name: &str) -> bool {
    matches!(
        name,
        "read" | "pread64" | "readv" | "preadv" | "preadv2" | "recvfrom" | "recvmsg" | "write"
    )
}

/// What a stretch was: the wire's kind, the call it slept in, its thread's Python frames
/// (innermost first), and for the GIL, the thread that held it, by id, name and frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    pub pid: u32,
    pub tid: u32,
    pub start: i64,
    pub end: i64,
    pub kind: u8,
    pub call: Option<String>,
    pub frames: Vec<String>,
    pub holder: Option<(u32, String, Vec<String>)>,
}

/// Where a process's GIL lies and how (`gaptop_pystack::gil`).
pub type GilAt = (usize, gaptop_pystack::gil::GilLayout);

/// The tick-by-tick readings of the program's threads: their system calls, and which thread
/// held each process's GIL.
#[derive(Default)]
pub struct Ticks {
    files: HashMap<(u32, u32), Option<File>>,
    calls: HashMap<(u32, u32), VecDeque<(i64, Call)>>,
    gil: HashMap<u32, VecDeque<(i64, u32)>>,
    tids: HashMap<u32, Vec<u32>>,
    listed: Option<Instant>,
    /// Each thread's last stretch asleep in a known call: its Python frames, the call and its
    /// end.
    last: HashMap<(u32, u32), (Vec<String>, Call, i64)>,
    /// What the descriptors that threads were seen reading name (`/proc/PID/fd/N`), read when
    /// first seen in a call: a stretch is described after the call, when the file may be
    /// closed.
    paths: HashMap<(u32, u64), String>,
    /// The GIL holders' names as last read while they lived (a stretch is described after it
    /// ended, when a short program's thread may be gone), and when.
    names: HashMap<(u32, u32), (String, Instant)>,
}

impl Ticks {
    /// Reads the system call of every thread of `pids` now (their threads listed again every
    /// 100 ms); a thread on a CPU reads nothing.
    pub fn read(&mut self, pids: impl Iterator<Item = u32>, now: i64) {
        let relist = self.listed.is_none_or(|t| t.elapsed().as_millis() >= 100);
        if relist {
            self.listed = Some(Instant::now());
            self.tids.clear();
        }
        let mut buf = [0u8; 256];
        for pid in pids {
            let tids = self.tids.entry(pid).or_insert_with(|| {
                let mut v = super::tasks(pid).unwrap_or_default();
                v.sort_unstable();
                v.truncate(MAX_THREADS);
                v
            });
            for &tid in tids.iter() {
                let f = self
                    .files
                    .entry((pid, tid))
                    .or_insert_with(|| File::open(format!("/proc/{pid}/task/{tid}/syscall")).ok());
                let Some(f) = f else {
                    continue;
                };
                let Ok(n) = f.read_at(&mut buf, 0) else {
                    continue;
                };
                if let Some(c) = std::str::from_utf8(&buf[..n]).ok().and_then(parse_syscall) {
                    let q = self.calls.entry((pid, tid)).or_default();
                    if q.back().is_none_or(|r| r.1 != c) && reads_fd(&syscall_name(c.nr)) {
                        if let Ok(p) = std::fs::read_link(format!("/proc/{pid}/fd/{}", c.arg0)) {
                            self.paths
                                .insert((pid, c.arg0), p.to_string_lossy().into_owned());
                        }
                    }
                    q.push_back((now, c));
                }
            }
        }
        if relist {
            let tids = &self.tids;
            self.files
                .retain(|(pid, tid), _| tids.get(pid).is_none_or(|v| v.contains(tid)));
            self.last
                .retain(|(pid, tid), _| tids.get(pid).is_none_or(|v| v.contains(tid)));
            if self.paths.len() > 4096 {
                self.paths.clear();
            }
            for q in self.calls.values_mut() {
                while q.front().is_some_and(|r| r.0 < now - KEEP_NS) {
                    q.pop_front();
                }
            }
            self.calls.retain(|_, q| !q.is_empty());
            for q in self.gil.values_mut() {
                while q.front().is_some_and(|r| r.0 < now - KEEP_NS) {
                    q.pop_front();
                }
            }
        }
    }

    /// Notes which thread holds process `pid`'s GIL now (0: none).
    pub fn note_gil(&mut self, pid: u32, now: i64, holder: u32) {
        self.gil.entry(pid).or_default().push_back((now, holder));
        // Its name, read again every NAME_MS while it holds the GIL (a thread may name itself
        // after it started).
        if holder != 0 {
            let stale = self
                .names
                .get(&(pid, holder))
                .is_none_or(|(_, at)| at.elapsed().as_millis() >= NAME_MS);
            if stale {
                let name = thread_name(pid, holder);
                if !name.is_empty() {
                    self.names.insert((pid, holder), (name, Instant::now()));
                }
            }
        }
    }

    /// A thread's name: as the kernel has it now, else as it was last read while it held the
    /// GIL.
    fn name_of(&self, pid: u32, tid: u32) -> String {
        let now = thread_name(pid, tid);
        if !now.is_empty() {
            return now;
        }
        self.names
            .get(&(pid, tid))
            .map(|(n, _)| n.clone())
            .unwrap_or_default()
    }

    /// The call thread `tid` of `pid` slept in most of the ticks in [t0, t1]; for a stretch
    /// shorter than a tick, the one it slept in at the tick nearest to it, within [`NEAR_NS`]
    /// (a wait woken and entered again: a condition's, the GIL's).
    fn call_during(&self, pid: u32, tid: u32, t0: i64, t1: i64) -> Option<Call> {
        let q = self.calls.get(&(pid, tid))?;
        most(q.iter().filter(|r| r.0 >= t0 && r.0 <= t1).map(|r| r.1)).or_else(|| {
            let off = |t: i64| (t0 - t).max(t - t1);
            q.iter()
                .filter(|r| off(r.0) <= NEAR_NS)
                .min_by_key(|r| off(r.0))
                .map(|r| r.1)
        })
    }

    /// The thread other than `not` that held `pid`'s GIL at most of the ticks in [t0, t1].
    fn holder_during(&self, pid: u32, not: u32, t0: i64, t1: i64) -> Option<u32> {
        let q = self.gil.get(&pid)?;
        most(
            q.iter()
                .filter(|r| r.0 >= t0 && r.0 <= t1 && r.1 != 0 && r.1 != not)
                .map(|r| r.1),
        )
    }

    /// What each stretch was (see the module's documentation). `gil` says where a process's
    /// GIL lies, `frames` gives a thread's Python frames in a span of time.
    ///
    /// A stretch no tick fell in or near (the sampler's thread was itself waiting for a CPU)
    /// takes the call of its thread's previous stretch under the same Python frames, if that
    /// ended less than [`INHERIT_NS`] before: the same wait, entered again.
    pub fn describe(
        &mut self,
        stretches: &[Stretch],
        gil: impl Fn(u32) -> Option<GilAt>,
        mut frames: impl FnMut(u32, u32, i64, i64) -> Vec<String>,
    ) -> Vec<State> {
        stretches
            .iter()
            .map(|s| {
                let own = frames(s.pid, s.tid, s.start, s.end);
                let key = (s.pid, s.tid);
                let call = (!s.preempt)
                    .then(|| {
                        let found = self.call_during(s.pid, s.tid, s.start, s.end);
                        if let Some(c) = found {
                            self.last.insert(key, (own.clone(), c, s.end));
                            return Some(c);
                        }
                        let (f, c, end) = self.last.get(&key)?;
                        (*f == own && !own.is_empty() && s.start - end < INHERIT_NS).then_some(*c)
                    })
                    .flatten();
                let waits_gil = call.is_some_and(|c| {
                    syscall_name(c.nr) == "futex"
                        && gil(s.pid).is_some_and(|(at, l)| {
                            gaptop_pystack::gil::is_gil_futex(at, &l, c.arg0 as usize)
                        })
                });
                let kind = if s.preempt {
                    gaptop_wire::STATE_RUNNABLE
                } else if waits_gil {
                    gaptop_wire::STATE_GIL
                } else {
                    gaptop_wire::STATE_BLOCKED
                };
                let holder = waits_gil
                    .then(|| self.holder_during(s.pid, s.tid, s.start, s.end))
                    .flatten()
                    .map(|h| (h, self.name_of(s.pid, h), frames(s.pid, h, s.start, s.end)));
                State {
                    pid: s.pid,
                    tid: s.tid,
                    start: s.start,
                    end: s.end,
                    kind,
                    call: call.map(|c| self.call_text(s.pid, c)),
                    frames: own,
                    holder,
                }
            })
            .collect()
    }
}

/// The most frequent of `items` (the first seen among equals).
fn most<T: Copy + Eq + std::hash::Hash>(items: impl Iterator<Item = T>) -> Option<T> {
    let mut counts: Vec<(T, usize)> = Vec::new();
    for x in items {
        match counts.iter_mut().find(|c| c.0 == x) {
            Some(c) => c.1 += 1,
            None => counts.push((x, 1)),
        }
    }
    counts
        .iter()
        .enumerate()
        .max_by_key(|(i, c)| (c.1, std::cmp::Reverse(*i)))
        .map(|(_, c)| c.0)
}

impl Ticks {
    /// A call in words: its name, and for a read of a descriptor, what the descriptor named.
    fn call_text(&self, pid: u32, c: Call) -> String {
        let name = syscall_name(c.nr);
        match self.paths.get(&(pid, c.arg0)) {
            Some(p) if reads_fd(&name) => format!("{name} {p}"),
            _ => name,
        }
    }
}

/// How often a GIL holder's name is read again while it holds the GIL.
const NAME_MS: u128 = 200;

/// A thread's name as the kernel has it (`comm`: what `pthread_setname_np` or `prctl` set).
fn thread_name(pid: u32, tid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/comm"))
        .map(|s| s.trim_end().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sw(tid: u32, time_ns: i64, out: bool, preempt: bool) -> Switch {
        Switch {
            pid: 1,
            tid,
            time_ns,
            out,
            preempt,
        }
    }

    #[test]
    fn a_switch_out_and_its_switch_in_bound_a_stretch() {
        let mut p = Pairs::default();
        let got = p.feed(&[
            sw(2, 1_000_000, true, false),
            sw(3, 1_000_000, true, true),
            sw(2, 1_005_000, false, false), // too short to keep
            sw(2, 2_000_000, true, false),
        ]);
        assert!(got.is_empty(), "{got:?}");
        let got = p.feed(&[
            sw(2, 9_000_000, false, false),
            sw(3, 4_000_000, false, false),
        ]);
        assert_eq!(
            got.iter()
                .map(|s| (s.tid, s.start, s.end, s.preempt))
                .collect::<Vec<_>>(),
            [
                (2, 2_000_000, 9_000_000, false),
                (3, 1_000_000, 4_000_000, true)
            ]
        );
        assert!(p.feed(&[sw(4, 5, false, false)]).is_empty(), "an in alone");
    }

    #[test]
    fn proc_syscall_text_reads_as_a_call() {
        assert_eq!(
            parse_syscall("202 0x7f12345678 0x80 0x0 0x0 0x0 0x0 0x7ffd 0x7f00\n"),
            Some(Call {
                nr: 202,
                arg0: 0x7f12345678
            })
        );
        assert_eq!(
            parse_syscall("-1 0x7ffd 0x7f00\n"),
            Some(Call { nr: -1, arg0: 0 })
        );
        assert_eq!(parse_syscall("running\n"), None);
        assert_eq!(parse_syscall(""), None);
        #[cfg(target_arch = "x86_64")]
        {
            assert_eq!(syscall_name(202), "futex");
            assert_eq!(syscall_name(230), "clock_nanosleep");
        }
        assert_eq!(syscall_name(-1), "(no system call)");
        assert_eq!(syscall_name(9999), "syscall 9999");
    }

    #[test]
    fn a_futex_on_the_gil_is_a_wait_for_it_and_names_its_holder() {
        let mut t = Ticks::default();
        let gil = 0x5000usize;
        let l = gaptop_pystack::gil::layout(11).unwrap();
        let futex = Call {
            nr: if cfg!(target_arch = "aarch64") {
                98
            } else {
                202
            },
            arg0: (gil + 40) as u64,
        };
        for (i, at) in [10, 11, 12, 13].into_iter().enumerate() {
            t.calls.entry((1, 2)).or_default().push_back((at, futex));
            t.note_gil(1, at, if i == 0 { 2 } else { 7 });
        }
        let s = |preempt| Stretch {
            pid: 1,
            tid: 2,
            start: 5,
            end: 20,
            preempt,
        };
        let frames = |_, tid: u32, _, _| vec![format!("t.py(1): f{tid}")];
        let got = t.describe(&[s(false), s(true)], |_| Some((gil, l.clone())), frames);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].kind, gaptop_wire::STATE_GIL);
        let (h, _, hf) = got[0].holder.clone().unwrap();
        assert_eq!((h, hf), (7, vec!["t.py(1): f7".to_string()]));
        assert_eq!(got[0].frames, ["t.py(1): f2"]);
        assert_eq!(got[1].kind, gaptop_wire::STATE_RUNNABLE);
        assert_eq!((got[1].call.clone(), got[1].holder.clone()), (None, None));
        // Without the GIL's place, the same futex is a plain block.
        let got = t.describe(&[s(false)], |_| None, frames);
        assert_eq!(got[0].kind, gaptop_wire::STATE_BLOCKED);
        assert_eq!(got[0].call.as_deref(), Some("futex"));
        assert_eq!(got[0].holder, None);
    }
}

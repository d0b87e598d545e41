//! What the CPU did: samples of the threads of a process gaptop started, taken from outside it
//! (nothing runs in the profiled program), each turned into a native call stack.
//!
//! Each thread gets a perf event (`perf_event_open`, pid = the thread, cpu = any): a software
//! cpu-clock that fires every [`SamplerConfig::period_us`] of the thread's own CPU time and
//! records its user registers (IP, SP, BP) and a copy of the top of its user stack, with
//! `exclude_kernel` and `exclude_hv`, as Linux allows for one's own processes at
//! `perf_event_paranoid` 2 or below. Time a thread spends in the kernel or asleep gives no
//! samples. The viewer unwinds each sample with framehop from the modules' DWARF call-frame
//! information, as found through `/proc/PID/maps`, and names the frames with the
//! [`Symbolizer`].
//!
//! Ring buffers: one per thread, 64 stack copies to the next power of two (1 MiB at the default
//! 16 KiB copies: about 63 ms of one busy thread's samples at 1 kHz), made smaller where the
//! locked-memory limit refuses that. [`Sampler::poll`] must come more often than the ring fills;
//! when it does not, the kernel drops new samples and says how many, which [`Sampler::lost`]
//! counts.
//!
//! Threads started after [`Sampler::watch`] are sampled from the next poll on; threads that end
//! are drained and closed. Where perf events are refused, [`Sampler::refused`] says why in one
//! line and [`Sampler::poll`] returns nothing.
//!
//! The same events carry the kernel's context-switch records of their threads
//! (`PERF_RECORD_SWITCH`: when a thread left its CPU, blocked or preempted, and when it came
//! back), which [`Sampler::take_switches`] hands over: what a thread did while it was on no
//! CPU (`offcpu`). Where the kernel refuses them, [`Sampler::switches_refused`] says why once
//! and the events sample as before.

mod clock;
mod maps;
pub mod offcpu;
mod perf;
pub mod python;
pub mod stream;
mod unwind;

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use nix::errno::Errno;
use perf_event::Clock;

use self::clock::TimeBase;
use self::perf::Failure;
pub use self::perf::SamplerConfig;
use self::unwind::{Elves, Space};
use crate::sources::symbols::Symbolizer;

/// One sample of one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSample {
    pub pid: u32,
    pub tid: u32,
    /// When it was taken: CLOCK_REALTIME, in ns (the clock of the GPU side's times).
    pub time_ns: i64,
    /// The call stack, innermost first (the sampled instruction's function, then its caller,
    /// and so on), each named as gaptop names native frames: `symbol [libfoo.so]`, or
    /// `libfoo.so+0x1a2b` where the module has no symbol there, or `?+0x7f..` for code in no
    /// module (the run-time address).
    pub frames: Vec<String>,
}

/// A context switch of a sampled thread: it left its CPU (`out`; `preempt`: still runnable),
/// or came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Switch {
    pub pid: u32,
    pub tid: u32,
    /// CLOCK_REALTIME, in ns, as [`CpuSample::time_ns`].
    pub time_ns: i64,
    pub out: bool,
    pub preempt: bool,
}

/// Why a process cannot be watched. One line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SampleError {
    /// Perf events are refused here: the same line as [`Sampler::refused`].
    Refused(String),
    /// The process is gone, or what it maps cannot be read.
    Process(String),
}

impl fmt::Display for SampleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SampleError::Refused(why) | SampleError::Process(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for SampleError {}

/// A watched process: its threads' events and its code.
struct Proc {
    pid: u32,
    threads: BTreeMap<u32, perf_event::Sampler>,
    space: Space,
    /// Frame names by address, until the maps are read again.
    names: HashMap<u64, String>,
}

/// Samples the threads of processes from outside them. See the module's documentation.
pub struct Sampler {
    cfg: SamplerConfig,
    /// The clock the events stamp samples with, once one has opened.
    time: Option<TimeBase>,
    procs: Vec<Proc>,
    elves: Elves,
    symbols: Symbolizer,
    refused: Option<String>,
    degraded: Option<String>,
    lost: u64,
    /// Addresses of the sample being unwound.
    addrs: Vec<u64>,
    /// Whether events ask for context-switch records (off with `GAPTOP_CTX_SWITCHES=0`, or
    /// once the kernel refused them, [`Sampler::switches_refused`] saying why).
    switches: bool,
    switches_refused: Option<String>,
    /// Context switches drained and not taken yet.
    switched: Vec<Switch>,
}

impl Sampler {
    pub fn new(cfg: SamplerConfig) -> Sampler {
        Sampler {
            cfg,
            time: None,
            procs: Vec::new(),
            elves: Elves::default(),
            symbols: Symbolizer::new(),
            refused: None,
            degraded: None,
            lost: 0,
            addrs: Vec::new(),
            switches: std::env::var("GAPTOP_CTX_SWITCHES").as_deref() != Ok("0"),
            switches_refused: None,
            switched: Vec::new(),
        }
    }

    /// The context switches drained by the polls since the last call, by time.
    pub fn take_switches(&mut self) -> Vec<Switch> {
        let mut v = std::mem::take(&mut self.switched);
        v.sort_by_key(|s| s.time_ns);
        v
    }

    /// Whether the events carry context-switch records.
    pub fn switches(&self) -> bool {
        self.switches && self.time.is_some()
    }

    /// Why the kernel gave no context-switch records (the events sample without them): one
    /// line to say once.
    pub fn switches_refused(&self) -> Option<&str> {
        self.switches_refused.as_deref()
    }

    /// Samples every thread of process `pid`, now and (from the next [`Sampler::poll`] on) the
    /// threads it starts later. Watching a process twice changes nothing.
    pub fn watch(&mut self, pid: u32) -> Result<(), SampleError> {
        if let Some(why) = &self.refused {
            return Err(SampleError::Refused(why.clone()));
        }
        if self.procs.iter().any(|p| p.pid == pid) {
            return Ok(());
        }
        let tids = tasks(pid).ok_or_else(|| {
            SampleError::Process(format!("process {pid}: cannot list /proc/{pid}/task"))
        })?;
        let mut p = Proc {
            pid,
            threads: BTreeMap::new(),
            space: Space::new(pid),
            names: HashMap::new(),
        };
        // The events first, so that where perf events are refused, that is what is said.
        let nothing_open = self.procs.is_empty();
        for tid in tids {
            match self.adopt(&mut p, tid) {
                Err(Failure::Refused(why)) if nothing_open && p.threads.is_empty() => {
                    self.refused = Some(why.clone());
                    return Err(SampleError::Refused(why));
                }
                Err(Failure::Refused(why) | Failure::Thread(why)) => self.note(why),
                Err(Failure::Gone) | Ok(()) => {}
            }
        }
        p.space
            .refresh(&mut self.elves)
            .map_err(SampleError::Process)?;
        self.procs.push(p);
        Ok(())
    }

    /// Everything sampled since the last poll, unwound and named, by time; does not block.
    /// Picks up new threads of the watched processes, closes ended ones and forgets processes
    /// that are gone. Reads a process's maps again (at most once a poll) when a sample has an
    /// address in no known module: a library loaded since.
    pub fn poll(&mut self) -> Vec<CpuSample> {
        let mut out = Vec::new();
        if self.refused.is_some() {
            return out;
        }
        if let Some(TimeBase::Monotonic { .. }) = self.time {
            self.time = Some(TimeBase::Monotonic {
                offset_ns: clock::realtime_offset(),
            });
        }
        let mut procs = std::mem::take(&mut self.procs);
        for p in &mut procs {
            let live = tasks(p.pid).unwrap_or_default();
            for &tid in &live {
                if !p.threads.contains_key(&tid) {
                    if let Err(Failure::Refused(why) | Failure::Thread(why)) = self.adopt(p, tid) {
                        self.note(why);
                    }
                }
            }
            self.drain(p, &mut out);
            p.threads.retain(|tid, _| live.contains(tid));
        }
        procs.retain(|p| !p.threads.is_empty());
        self.procs = procs;
        out.sort_by_key(|s| s.time_ns);
        out
    }

    /// Why perf events cannot be had here, once they were refused: one line to say once, after
    /// which sampling stays off.
    pub fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// Why some thread could not be sampled (the first such reason), while others are.
    pub fn degraded(&self) -> Option<&str> {
        self.degraded.as_deref()
    }

    /// Samples the kernel dropped because a ring buffer was full when it took them.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Threads being sampled now.
    pub fn threads(&self) -> usize {
        self.procs.iter().map(|p| p.threads.len()).sum()
    }

    /// Samples thread `tid` of `p` from now on.
    fn adopt(&mut self, p: &mut Proc, tid: u32) -> Result<(), Failure> {
        let ring = self.open(tid)?;
        p.threads.insert(tid, ring);
        Ok(())
    }

    /// Opens thread `tid`'s event, with context-switch records while the kernel gives them:
    /// the first refusal of them is said once, and the events open without them from then on.
    fn open(&mut self, tid: u32) -> Result<perf_event::Sampler, Failure> {
        if !self.switches {
            return self.open_with(tid, false);
        }
        match self.open_with(tid, true) {
            Err(Failure::Refused(why)) => {
                let without = self.open_with(tid, false)?;
                self.switches = false;
                self.switches_refused = Some(format!(
                    "context-switch records refused ({}): thread states come from on-CPU \
                     samples only",
                    why.trim_start_matches("CPU sampling is off: ")
                ));
                Ok(without)
            }
            other => other,
        }
    }

    /// Opens thread `tid`'s event. The first one to open decides the clock: CLOCK_REALTIME, or
    /// CLOCK_MONOTONIC where the kernel refuses that.
    fn open_with(&mut self, tid: u32, switches: bool) -> Result<perf_event::Sampler, Failure> {
        let clocks: &[TimeBase] = match self.time {
            Some(t) => &[t],
            None => &[TimeBase::Realtime, TimeBase::Monotonic { offset_ns: 0 }],
        };
        let mut last = None;
        for &t in clocks {
            let clock = match t {
                TimeBase::Realtime => Clock::REALTIME,
                TimeBase::Monotonic { .. } => Clock::MONOTONIC,
            };
            match perf::open(tid, &self.cfg, clock, switches) {
                Ok((ring, len)) => {
                    if self.time.is_none() {
                        self.time = Some(match t {
                            TimeBase::Realtime => t,
                            TimeBase::Monotonic { .. } => TimeBase::Monotonic {
                                offset_ns: clock::realtime_offset(),
                            },
                        });
                    }
                    if len < perf::ring_bytes(&self.cfg) {
                        self.note(format!(
                            "ring buffers cut to {} KiB by the locked-memory limit \
                             (perf_event_mlock_kb, RLIMIT_MEMLOCK): samples may be lost",
                            len / 1024
                        ));
                    }
                    return Ok(ring);
                }
                Err(e) if perf::errno(&e) == Errno::EINVAL => last = Some(e),
                Err(e) => {
                    last = Some(e);
                    break;
                }
            }
        }
        let e = last.unwrap_or_else(|| std::io::Error::from_raw_os_error(0));
        Err(perf::failure(tid, &e, perf::paranoid()))
    }

    fn note(&mut self, why: String) {
        self.degraded.get_or_insert(why);
    }

    /// Drains every ring of `p` into `out`.
    fn drain(&mut self, p: &mut Proc, out: &mut Vec<CpuSample>) {
        let Sampler {
            time,
            elves,
            symbols,
            lost,
            addrs,
            switched,
            ..
        } = self;
        let time = time.unwrap_or(TimeBase::Realtime);
        let Proc {
            pid,
            threads,
            space,
            names,
        } = p;
        let mut refreshed = false;
        for ring in threads.values_mut() {
            let pid = *pid;
            let switch = |s: perf::RawSwitch| {
                switched.push(Switch {
                    pid,
                    tid: s.tid,
                    time_ns: time.to_realtime(s.time),
                    out: s.out,
                    preempt: s.preempt,
                })
            };
            *lost += perf::drain(
                ring,
                |s| {
                    let known = space.unwind(s.ip, s.sp, s.bp, s.stack, addrs);
                    if !known && !refreshed {
                        refreshed = true;
                        if space.refresh(elves).is_ok() {
                            names.clear();
                            space.unwind(s.ip, s.sp, s.bp, s.stack, addrs);
                        }
                    }
                    let frames = addrs
                        .iter()
                        .map(|&a| {
                            let (path, off) = space.locate(a);
                            names
                                .entry(a)
                                .or_insert_with(|| symbols.name(path, off))
                                .clone()
                        })
                        .collect();
                    out.push(CpuSample {
                        pid,
                        tid: s.tid,
                        time_ns: time.to_realtime(s.time),
                        frames,
                    });
                },
                switch,
            );
        }
    }
}

/// The threads of process `pid`; `None` once it is gone.
fn tasks(pid: u32) -> Option<Vec<u32>> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    Some(
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .collect(),
    )
}

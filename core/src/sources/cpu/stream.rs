//! The sampler's stream: a thread of the viewer that samples the program gaptop started (and
//! the processes it starts in turn), and sends the samples on the live channel as wire frames
//! of a connection of its own, so that the UI and `gaptop record` take them as they take a
//! collector's frames.
//!
//! ```text
//! Sampler { period }  Name* Stack* Samples { pid, [(tid, time, stack)] }  ...
//!                     States { pid, [(tid, kind, start, end, call, stack, holder...)] }  ...
//! ```
//!
//! With the kernel's context-switch records, each process's first `States` frame is empty (its
//! switches are recorded: time no stretch covers was on a CPU), and each later one holds what
//! threads did off their CPU (`offcpu`), sent at the poll after they came back.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use gaptop_pystack::Published;
use gaptop_wire::{Frame, Sample};

use super::clock::now_ns;
use super::offcpu::{self, GilAt, Pairs, Ticks};
use super::python::{self, History, RawFrame, Reader};
use super::{CpuSample, Sampler, SamplerConfig};
use crate::sources::live::event::LiveEvent;

/// The connection id of the sampler's stream (collectors' connections count up from 1).
pub const SAMPLER_CONN: u32 = u32::MAX;

/// How often the rings are drained: well inside the time one busy thread fills its ring.
const POLL: Duration = Duration::from_millis(50);
/// How often new processes under the program are looked for.
const DISCOVER: Duration = Duration::from_millis(500);
/// How often the Python stacks of the program's threads are read.
const PY_TICK: Duration = Duration::from_millis(1);
/// How often a process's Python layout is looked for until it comes.
const PY_LOOK: Duration = Duration::from_millis(10);
/// How far in time a native sample may be from the Python stack it takes; or from the reads
/// before and after it, where those found the same stack.
const PY_WITHIN_NS: i64 = 2_000_000;
const PY_BRACKET_NS: i64 = 50_000_000;

/// The processes' Python stacks, read every [`PY_TICK`] from the layouts their collectors
/// wrote into `dir` (`python-<pid>`), and merged into the native samples.
struct Pythons {
    dir: Option<PathBuf>,
    readers: HashMap<u32, Reader>,
    /// Processes whose collector published why it has no layout (said once each).
    without: HashSet<u32>,
    history: History<Vec<RawFrame>>,
    said: bool,
    /// Threads the last drain had samples of (those on a CPU lately): in a process of more
    /// than [`PY_ALL_UP_TO`] Python threads, the others are read every [`PY_ALL_EVERY`] ticks
    /// only. A thread that works in bursts (a launching thread between its waits) needs every
    /// tick's read, so every thread is read at each tick where there are few.
    active: HashSet<(u32, u32)>,
    ticks: u64,
}

/// Every how many ticks a large process's threads without recent samples are read too.
const PY_ALL_EVERY: u64 = 16;
/// Processes of up to this many Python threads have all of them read at every tick.
const PY_ALL_UP_TO: usize = 16;

impl Pythons {
    /// Takes up the layouts of `pids` that have appeared; a bad one is said once.
    fn discover(&mut self, pids: &HashSet<u32>, tx: &Sender<LiveEvent>) {
        let Some(dir) = &self.dir else {
            return;
        };
        let alive = |pid: &u32| std::path::Path::new(&format!("/proc/{pid}")).exists();
        self.readers.retain(|pid, _| alive(pid));
        self.without.retain(alive);
        for &pid in pids {
            if self.readers.contains_key(&pid) || self.without.contains(&pid) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(dir.join(format!("python-{pid}"))) else {
                continue;
            };
            match Published::parse(&text) {
                Ok(Published::Layout(l)) => {
                    self.readers.insert(pid, Reader::new(pid, l));
                }
                Ok(Published::Unavailable(why)) => {
                    if self.without.insert(pid) {
                        let _ = tx.send(LiveEvent::Notice(format!(
                            "CPU samples of pid {pid}: no Python frames ({why})"
                        )));
                    }
                }
                Err(e) if !self.said => {
                    self.said = true;
                    let _ = tx.send(LiveEvent::Notice(format!("CPU samples: {e}")));
                }
                Err(_) => {}
            }
        }
    }

    /// Reads every thread's Python stack now.
    fn read(&mut self) {
        if self.readers.is_empty() {
            return;
        }
        let now = now_ns(nix::time::ClockId::CLOCK_REALTIME);
        self.ticks += 1;
        let all = self.ticks.is_multiple_of(PY_ALL_EVERY);
        let active = &self.active;
        for (&pid, r) in self.readers.iter_mut() {
            let few = r.threads() <= PY_ALL_UP_TO;
            for (tid, frames) in r.stacks(|tid| few || all || active.contains(&(pid, tid))) {
                self.history.push(pid, tid, now, frames);
            }
        }
    }

    /// Puts each sample's Python frames in place of its interpreter frames.
    fn merge(&mut self, samples: &mut [CpuSample]) {
        if self.readers.is_empty() {
            return;
        }
        self.active = samples.iter().map(|s| (s.pid, s.tid)).collect();
        for s in samples.iter_mut() {
            let Some(r) = self.readers.get_mut(&s.pid) else {
                continue;
            };
            let Some(raw) = self.history.nearest(
                (s.pid, s.tid),
                s.time_ns,
                (PY_WITHIN_NS, PY_BRACKET_NS),
                |a, b| python::same_functions(a, b),
            ) else {
                continue;
            };
            let named: Vec<Option<String>> = raw.iter().map(|&f| r.name(f)).collect();
            s.frames = python::merge(&s.frames, &named);
        }
        let now = now_ns(nix::time::ClockId::CLOCK_REALTIME);
        self.history.trim(now - 1_000_000_000);
    }

    /// Thread `tid`'s Python frames (innermost first) as read in [t0, t1]: the read nearest
    /// to the middle, or to 20 ms before the end of a longer span (the reads kept are recent).
    fn frames_near(&mut self, pid: u32, tid: u32, t0: i64, t1: i64) -> Vec<String> {
        let Some(r) = self.readers.get_mut(&pid) else {
            return Vec::new();
        };
        let half = ((t1 - t0) / 2).clamp(0, 20_000_000);
        let near = self.history.nearest(
            (pid, tid),
            t1 - half,
            (half + PY_WITHIN_NS, PY_BRACKET_NS),
            |a, b| python::same_functions(a, b),
        );
        near.map(|raw| raw.iter().filter_map(|&f| r.name(f)).collect())
            .unwrap_or_default()
    }

    /// Where each process's GIL lies, where its layout says.
    fn gils(&self) -> HashMap<u32, GilAt> {
        self.readers
            .iter()
            .filter_map(|(&pid, r)| Some((pid, r.gil()?)))
            .collect()
    }
}

/// The sampling rate the environment asks for (`GAPTOP_SAMPLE_HZ`, 0 turns sampling off), or
/// the default.
pub fn config_from_env() -> Option<SamplerConfig> {
    let mut cfg = SamplerConfig::default();
    if let Some(hz) = std::env::var("GAPTOP_SAMPLE_HZ")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
    {
        if hz == 0 {
            return None;
        }
        cfg.period_us = (1_000_000 / hz.clamp(1, 10_000)).max(1);
    } else {
        cfg.period_us = DEFAULT_PERIOD_US;
    }
    Some(cfg)
}

/// 500 samples a second of each thread on a CPU: a 50 ms stall gets 25 samples, and the
/// program pays about a percent (docs/perf.md).
pub const DEFAULT_PERIOD_US: u64 = 2_000;

/// Names and stacks already sent, by their text and (parent, frame).
#[derive(Default)]
struct Ids {
    names: HashMap<String, u32>,
    stacks: HashMap<(u32, u32), u32>,
}

impl Ids {
    /// The name id of `text`, sending its definition if it is new.
    fn name(&mut self, text: &str, out: &mut Vec<Frame>) -> u32 {
        if let Some(&id) = self.names.get(text) {
            return id;
        }
        let id = self.names.len() as u32 + 1;
        self.names.insert(text.to_string(), id);
        out.push(Frame::Name {
            id,
            text: text.to_string(),
        });
        id
    }

    /// The stack id of frames given innermost first, sending definitions for what is new.
    fn stack(&mut self, frames: &[String], out: &mut Vec<Frame>) -> u32 {
        let mut parent = 0;
        for f in frames.iter().rev() {
            let next = self.names.len() as u32 + 1;
            let name = *self.names.entry(f.clone()).or_insert_with(|| {
                out.push(Frame::Name {
                    id: next,
                    text: f.clone(),
                });
                next
            });
            let next = self.stacks.len() as u32 + 1;
            parent = *self.stacks.entry((parent, name)).or_insert_with(|| {
                out.push(Frame::Stack {
                    id: next,
                    parent,
                    frame: name,
                });
                next
            });
        }
        parent
    }
}

/// A tick's readings for the stretches off the CPU: every known process's threads' system
/// calls, and which thread holds each Python process's GIL.
fn tick(ticks: &mut Ticks, py: &Pythons, known: &HashSet<u32>) {
    let now = now_ns(nix::time::ClockId::CLOCK_REALTIME);
    ticks.read(known.iter().copied(), now);
    for (&pid, r) in &py.readers {
        if r.gil().is_some() {
            ticks.note_gil(pid, now, r.gil_holder().unwrap_or(0));
        }
    }
}

/// Turns a poll's samples into frames: definitions first, then one Samples frame a process.
fn frames_of(ids: &mut Ids, samples: Vec<CpuSample>) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut by_pid: Vec<(u32, Vec<Sample>)> = Vec::new();
    for s in samples {
        let stack = ids.stack(&s.frames, &mut out);
        let x = Sample {
            tid: s.tid,
            time: s.time_ns.max(0) as u64,
            stack,
        };
        match by_pid.iter_mut().find(|(p, _)| *p == s.pid) {
            Some((_, v)) => v.push(x),
            None => by_pid.push((s.pid, vec![x])),
        }
    }
    for (pid, samples) in by_pid {
        out.push(Frame::Samples { pid, samples });
    }
    out
}

/// Turns stretches off the CPU into frames: definitions first, then one States frame a
/// process.
fn state_frames(ids: &mut Ids, states: Vec<offcpu::State>) -> Vec<Frame> {
    let mut out = Vec::new();
    let mut by_pid: Vec<(u32, Vec<gaptop_wire::ThreadState>)> = Vec::new();
    for s in states {
        let call = s.call.as_deref().map_or(0, |c| ids.name(c, &mut out));
        let stack = ids.stack(&s.frames, &mut out);
        let (holder, holder_name, holder_stack) = match &s.holder {
            Some((tid, name, frames)) => (
                *tid,
                if name.is_empty() {
                    0
                } else {
                    ids.name(name, &mut out)
                },
                ids.stack(frames, &mut out),
            ),
            None => (0, 0, 0),
        };
        let x = gaptop_wire::ThreadState {
            tid: s.tid,
            kind: s.kind,
            start: s.start.max(0) as u64,
            end: s.end.max(0) as u64,
            call,
            stack,
            holder,
            holder_name,
            holder_stack,
        };
        match by_pid.iter_mut().find(|(p, _)| *p == s.pid) {
            Some((_, v)) => v.push(x),
            None => by_pid.push((s.pid, vec![x])),
        }
    }
    for (pid, states) in by_pid {
        out.push(Frame::States { pid, states });
    }
    out
}

/// Processes whose parent is among `known`, from /proc.
fn children_of(known: &HashSet<u32>) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| !known.contains(pid))
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The parent is the second field after the command, which is in parentheses.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            ppid.is_some_and(|p| known.contains(&p))
        })
        .collect()
}

/// Samples `root` and the processes under it until `stop` is set, sending frames on `tx`.
/// A refusal is said once, as a notice, and the thread ends. `py_dir` is where the
/// processes' collectors write their Python layouts (the viewer's socket folder), for Python
/// frames in the samples.
pub fn run(
    root: u32,
    cfg: SamplerConfig,
    py_dir: Option<PathBuf>,
    tx: Sender<LiveEvent>,
    stop: Arc<AtomicBool>,
) {
    let mut sampler = Sampler::new(cfg);
    if let Err(e) = sampler.watch(root) {
        let _ = tx.send(LiveEvent::Notice(format!("CPU samples off: {e}")));
        return;
    }
    let period = (cfg.period_us * 1_000).min(u32::MAX as u64) as u32;
    let mut opening = vec![Frame::Sampler { period_ns: period }];
    // The process's switches are recorded: time no stretch covers was on a CPU.
    let switches = sampler.switches();
    if switches {
        opening.push(Frame::States {
            pid: root,
            states: Vec::new(),
        });
    }
    if tx.send(LiveEvent::Frames(SAMPLER_CONN, opening)).is_err() {
        return;
    }
    if let Some(why) = sampler.switches_refused() {
        let _ = tx.send(LiveEvent::Notice(format!("CPU samples: {why}")));
    }
    let (mut pairs, mut ticks) = (Pairs::default(), Ticks::default());
    let mut known: HashSet<u32> = [root].into();
    let mut ids = Ids::default();
    let mut last_discover = Instant::now() - DISCOVER;
    let mut said_degraded = false;
    let mut py = Pythons {
        // GAPTOP_PY_SAMPLES=0: native frames only (to measure what the Python reads cost).
        dir: py_dir.filter(|_| std::env::var("GAPTOP_PY_SAMPLES").as_deref() != Ok("0")),
        readers: HashMap::new(),
        without: HashSet::new(),
        history: History::default(),
        said: false,
        active: HashSet::new(),
        ticks: 0,
    };
    let mut last_poll = Instant::now();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if last_discover.elapsed() >= DISCOVER {
            last_discover = Instant::now();
            for pid in children_of(&known) {
                known.insert(pid);
                if sampler.watch(pid).is_ok() && switches {
                    let opening = vec![Frame::States {
                        pid,
                        states: Vec::new(),
                    }];
                    let _ = tx.send(LiveEvent::Frames(SAMPLER_CONN, opening));
                }
            }
            py.discover(&known, &tx);
        }
        // Between two drains, the Python stacks every tick; a process whose layout has not
        // come yet (its collector calibrates once its interpreter runs, or at an attach) is
        // looked for every [`PY_LOOK`], so that its first samples are not left native.
        let mut looked = Instant::now();
        while !stopping && last_poll.elapsed() < POLL {
            if py.dir.is_some() && py.readers.len() < known.len() && looked.elapsed() >= PY_LOOK {
                looked = Instant::now();
                py.discover(&known, &tx);
            }
            py.read();
            if switches {
                tick(&mut ticks, &py, &known);
            }
            std::thread::sleep(if py.readers.is_empty() {
                PY_LOOK.min(POLL.saturating_sub(last_poll.elapsed()))
            } else {
                PY_TICK
            });
        }
        last_poll = Instant::now();
        py.read();
        let mut samples = sampler.poll();
        py.merge(&mut samples);
        let stretches = pairs.feed(&sampler.take_switches());
        let mut frames = if samples.is_empty() {
            Vec::new()
        } else {
            frames_of(&mut ids, samples)
        };
        if !stretches.is_empty() {
            let gils = py.gils();
            let states = ticks.describe(
                &stretches,
                |pid| gils.get(&pid).cloned(),
                |pid, tid, t0, t1| py.frames_near(pid, tid, t0, t1),
            );
            frames.extend(state_frames(&mut ids, states));
        }
        if !frames.is_empty() && tx.send(LiveEvent::Frames(SAMPLER_CONN, frames)).is_err() {
            return;
        }
        if !said_degraded {
            if let Some(d) = sampler.degraded() {
                said_degraded = true;
                let _ = tx.send(LiveEvent::Notice(format!("CPU samples: {d}")));
            }
        }
        if stopping {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_are_defined_once_outermost_first() {
        let mut ids = Ids::default();
        let s = |pid, tid, t, f: &[&str]| CpuSample {
            pid,
            tid,
            time_ns: t,
            frames: f.iter().map(|x| x.to_string()).collect(),
        };
        let frames = frames_of(
            &mut ids,
            vec![
                s(1, 2, 10, &["leaf [a.so]", "main [prog]"]),
                s(1, 3, 11, &["other [a.so]", "main [prog]"]),
                s(4, 5, 12, &["leaf [a.so]", "main [prog]"]),
            ],
        );
        let names: Vec<&str> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Name { text, .. } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["main [prog]", "leaf [a.so]", "other [a.so]"]);
        let stacks = frames
            .iter()
            .filter(|f| matches!(f, Frame::Stack { .. }))
            .count();
        assert_eq!(stacks, 3, "main, main>leaf, main>other");
        let samples: Vec<(u32, Vec<Sample>)> = frames
            .iter()
            .filter_map(|f| match f {
                Frame::Samples { pid, samples } => Some((*pid, samples.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(samples.len(), 2, "one frame a process");
        assert_eq!(samples[0].1.len(), 2);
        assert_eq!(
            samples[0].1[0].stack, samples[1].1[0].stack,
            "same stack, same id"
        );
        // A later poll reuses what was sent.
        let again = frames_of(&mut ids, vec![s(1, 2, 20, &["leaf [a.so]", "main [prog]"])]);
        assert_eq!(again.len(), 1, "{again:?}");
    }
}

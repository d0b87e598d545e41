//! The launching thread's wall-clock state through a site's gaps, as shares of their time: on a
//! CPU (what its samples ran, `oncpu`), inside a CUDA call that waits for the GPU, waiting for
//! the GIL (and which thread held it), asleep in a system call (which, under which Python
//! frames), or runnable but not running.
//!
//! A gap's time is painted in that order of precedence: all of it on a CPU, then the thread's
//! stretches off its CPU (`model::states`) over it, then its sync calls over those.
//! Only a process whose context switches were recorded has states: elsewhere a site has none,
//! and its CPU line stands alone (samples count only time on a CPU).
//!
//! The patterns read the shares ([`Shares`]): a launching thread asleep on a queue waits for
//! its input; one waiting for the GIL contends with the thread that holds it; one asleep in a
//! read does I/O on the launch path; one asleep in a sleep sleeps there; one in a sync call
//! syncs in the loop; one runnable for much of the time has too few CPUs.

use std::collections::HashMap;

use serde::Serialize;

use super::gaps::Gap;
use crate::frames::{pretty_frame, StackFrame};
use crate::model::records::{ApiKind, NameId, Ns, StackId};
use crate::model::states::OffKind;
use crate::model::store::Store;

/// What the launching thread was doing over a stretch of a gap.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StateKey {
    OnCpu,
    /// Inside a CUDA call that waits for the GPU: the call and its stack.
    CudaWait {
        call: NameId,
        stack: StackId,
    },
    /// Off its CPU: how, the system call, its Python stack, and the GIL's holder.
    Off {
        kind: OffKind,
        call: NameId,
        stack: StackId,
        holder: u32,
        holder_name: NameId,
        holder_stack: StackId,
    },
}

/// Distinct states kept a site; past it, new ones lose their stacks.
const MAX_KEYS: usize = 1024;

/// A site's gap time by the launching thread's state, over the gaps of processes whose context
/// switches were recorded (`gap_ns`).
#[derive(Clone, Debug, Default)]
pub struct StateTime {
    pub by: HashMap<StateKey, Ns>,
    pub gap_ns: Ns,
}

impl StateTime {
    /// Adds one gap's states ([`gap_states`]).
    pub fn add(&mut self, states: &[(StateKey, Ns)]) {
        for &(k, ns) in states {
            self.gap_ns += ns;
            let k = if self.by.len() >= MAX_KEYS && !self.by.contains_key(&k) {
                match k {
                    StateKey::Off { kind, call, .. } => StateKey::Off {
                        kind,
                        call,
                        stack: 0,
                        holder: 0,
                        holder_name: 0,
                        holder_stack: 0,
                    },
                    StateKey::CudaWait { call, .. } => StateKey::CudaWait { call, stack: 0 },
                    k => k,
                }
            } else {
                k
            };
            *self.by.entry(k).or_default() += ns;
        }
    }

    pub fn merge(&mut self, o: &StateTime) {
        self.gap_ns += o.gap_ns;
        for (&k, &ns) in &o.by {
            *self.by.entry(k).or_default() += ns;
        }
    }
}

/// The launching thread's states through gap `g`, as (state, time) summing to the gap's
/// length; None where its process's context switches were not recorded.
pub fn gap_states(store: &Store, g: &Gap) -> Option<Vec<(StateKey, Ns)>> {
    let lane = &store.lanes[g.lane];
    let proc = &store.procs[lane.key.proc as usize];
    if !proc.switches || g.end <= g.start {
        return None;
    }
    let op = lane.get(g.next)?;
    let tid = proc.api_by_corr(op.corr)?.tid;
    let (lo, hi) = (g.start, g.end);
    let mut segs = vec![(lo, hi, StateKey::OnCpu)];
    for s in proc.states_in(tid, lo, hi) {
        let k = StateKey::Off {
            kind: s.kind,
            call: s.call,
            stack: s.stack,
            holder: s.holder,
            holder_name: s.holder_name,
            holder_stack: s.holder_stack,
        };
        paint(&mut segs, s.start.max(lo), s.end.min(hi), k);
    }
    // Sync calls, sorted by end: those that end after the gap starts, while they may start
    // before it ends.
    let b = &proc.blocking;
    let from = b.partition_point(|c| c.end <= lo);
    for c in b[from..].iter().take(256) {
        if c.tid == tid && c.kind == ApiKind::Sync && c.start < hi {
            let k = StateKey::CudaWait {
                call: c.name,
                stack: c.stack,
            };
            paint(&mut segs, c.start.max(lo), c.end.min(hi), k);
        }
    }
    let mut out: Vec<(StateKey, Ns)> = Vec::new();
    for (a, b, k) in segs {
        match out.iter_mut().find(|x| x.0 == k) {
            Some(x) => x.1 += b - a,
            None => out.push((k, b - a)),
        }
    }
    Some(out)
}

/// Paints [a, b) with `k` over the segments (which tile a span).
fn paint(segs: &mut Vec<(Ns, Ns, StateKey)>, a: Ns, b: Ns, k: StateKey) {
    if b <= a {
        return;
    }
    let mut out = Vec::with_capacity(segs.len() + 2);
    for &(s, e, key) in segs.iter() {
        if e <= a || s >= b {
            out.push((s, e, key));
            continue;
        }
        if s < a {
            out.push((s, a, key));
        }
        if e > b {
            out.push((b, e, key));
        }
    }
    out.push((a, b, k));
    out.sort_by_key(|x| x.0);
    *segs = out;
}

/// One state of the launching thread through a site's gaps, as the JSON report gives it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JsonState {
    /// `on_cpu`, `cuda_wait`, `gil`, `blocked` or `runnable`.
    pub state: &'static str,
    /// Its share of the gap time.
    pub share: f64,
    /// The system call it slept in (`futex`, `read /data/x.bin`), or the CUDA call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub call: Option<String>,
    /// Its frames, innermost first: the Python stack it slept under, the CUDA call's stack,
    /// or (on a CPU) what most of its samples hold.
    pub frames: Vec<String>,
    /// For the GIL, the thread that held it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holder: Option<JsonHolder>,
    /// The part of `share` spread over it from stretches asleep that nothing described
    /// ([`spread_unknown`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub inferred: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// A thread that held the GIL: its id, its name and its Python stack, innermost first.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct JsonHolder {
    pub tid: u32,
    pub name: String,
    pub frames: Vec<String>,
}

/// Shares below this are left out of the JSON and the text.
const LEAST: f64 = 0.005;

/// A site's states, most time first; None without any (no context switches recorded).
/// `on_cpu` gives what the samples ran, for the time on a CPU.
pub fn json(store: &Store, t: &StateTime, on_cpu: Vec<String>) -> Option<Vec<JsonState>> {
    if t.gap_ns <= 0 {
        return None;
    }
    let all = t.gap_ns as f64;
    let names = |s: StackId| -> Vec<String> {
        let mut v: Vec<String> = store
            .stacks
            .frames(s)
            .into_iter()
            .rev()
            .map(|f| store.names.get(f).to_string())
            .collect();
        trim_library(&mut v);
        v
    };
    let name = |n: NameId| (n != 0).then(|| store.names.get(n).to_string());
    let mut out: Vec<JsonState> = Vec::new();
    // The holder's stacks (which change as it runs) are kept by their time: the most's shown.
    let mut holder_time: HashMap<(usize, Vec<String>), Ns> = HashMap::new();
    let mut keys: Vec<(&StateKey, &Ns)> = t.by.iter().collect();
    keys.sort_by(|a, b| b.1.cmp(a.1));
    for (k, &ns) in keys {
        let (state, call, frames, holder) = match *k {
            StateKey::OnCpu => ("on_cpu", None, on_cpu.clone(), None),
            StateKey::CudaWait { call, stack } => ("cuda_wait", name(call), names(stack), None),
            StateKey::Off {
                kind,
                call,
                stack,
                holder,
                holder_name,
                holder_stack,
            } => {
                let state = match kind {
                    OffKind::Blocked => "blocked",
                    OffKind::Runnable => "runnable",
                    OffKind::Gil => "gil",
                };
                let h = (holder != 0).then(|| JsonHolder {
                    tid: holder,
                    name: name(holder_name).unwrap_or_default(),
                    frames: names(holder_stack),
                });
                (state, name(call), names(stack), h)
            }
        };
        let same = |o: &JsonState| {
            o.state == state
                && o.call == call
                && o.frames == frames
                && o.holder.as_ref().map(|h| (h.tid, &h.name))
                    == holder.as_ref().map(|h| (h.tid, &h.name))
        };
        let i = match out.iter().position(same) {
            Some(i) => {
                out[i].share += ns as f64 / all;
                i
            }
            None => {
                out.push(JsonState {
                    state,
                    share: ns as f64 / all,
                    call,
                    frames,
                    holder: holder.clone(),
                    inferred: 0.0,
                });
                out.len() - 1
            }
        };
        if let Some(h) = holder {
            let e = holder_time.entry((i, h.frames.clone())).or_default();
            *e += ns;
            let best = holder_time
                .iter()
                .filter(|((j, _), _)| *j == i)
                .max_by_key(|(_, &t)| t)
                .map(|((_, f), _)| f.clone());
            if let (Some(f), Some(oh)) = (best, out[i].holder.as_mut()) {
                oh.frames = f;
            }
        }
    }
    spread_unknown(&mut out);
    out.retain(|s| s.share >= LEAST);
    out.sort_by(|a, b| b.share.total_cmp(&a.share));
    Some(out)
}

/// Spreads the time asleep in stretches that nothing describes (no tick of the sampler fell in
/// or near them, nor a read of their Python stack: its thread was waiting for a CPU itself, on
/// a loaded machine) over the described stretches asleep (in a system call, or for the GIL,
/// which is told by the call), in proportion to their time: when the sampler misses a stretch
/// does not depend on what the program waits for, so the ones it saw stand for the ones it
/// missed. The part each got is its `inferred` share. Where none was described, the
/// undescribed time stays as it is.
fn spread_unknown(out: &mut Vec<JsonState>) {
    let unknown = |s: &JsonState| s.state == "blocked" && s.call.is_none() && s.frames.is_empty();
    let asleep = |s: &JsonState| matches!(s.state, "blocked" | "gil") && !unknown(s);
    let missed: f64 = out.iter().filter(|s| unknown(s)).map(|s| s.share).sum();
    let seen: f64 = out.iter().filter(|s| asleep(s)).map(|s| s.share).sum();
    if missed <= 0.0 || seen <= 0.0 {
        return;
    }
    out.retain(|s| !unknown(s));
    for s in out.iter_mut().filter(|s| asleep(s)) {
        let more = missed * s.share / seen;
        s.share += more;
        s.inferred += more;
    }
}

/// A site's states as [`json`] gives them, with what its samples `cpu` ran on a CPU (a site's
/// steady gaps' where there are any: `LeafAcc::steady_states`, `steady_cpu`).
pub fn site_states(
    store: &Store,
    cpu: &super::oncpu::SiteSamples,
    states: &StateTime,
) -> Option<Vec<JsonState>> {
    let on_cpu = cpu
        .innermost(store, 8)
        .into_iter()
        .map(|f| f.frame)
        .collect();
    json(store, states, on_cpu)
}

/// Drops the innermost frames of a stack that are the standard library's waiting code calling
/// itself (`threading.py`'s `Condition.wait` under `queue.py`'s `Queue.get`): the call into the
/// library from the program's code is kept, and what the library did inside it is not.
fn trim_library(frames: &mut Vec<String>) {
    let cut = frames
        .windows(2)
        .take_while(|w| is_waiting_library(&w[0]) && is_waiting_library(&w[1]))
        .count();
    frames.drain(..cut);
}

/// A frame of the standard library's modules that wait (threads, queues, processes, sockets,
/// event loops), as the store names them (`threading.py(327): Condition.wait`, the library's
/// folder cut off), or with their whole path.
fn is_waiting_library(f: &str) -> bool {
    const MODULES: [&str; 9] = [
        "threading.py",
        "queue.py",
        "selectors.py",
        "socket.py",
        "subprocess.py",
        "multiprocessing/",
        "concurrent/futures/",
        "asyncio/",
        "ssl.py",
    ];
    StackFrame::parse(f).python().is_some_and(|p| {
        let file = match p.file.find("/lib/python3") {
            Some(i) => p.file[i + 12..].split_once('/').map_or(p.file, |x| x.1),
            None => p.file,
        };
        MODULES.iter().any(|m| file.starts_with(m))
    })
}

/// A stack in words: its innermost three frames (`Queue.get  queue.py:171 ‹ <module>
/// loop.py:27`).
fn chain(frames: &[String]) -> String {
    frames
        .iter()
        .take(3)
        .map(|f| pretty_frame(f))
        .collect::<Vec<_>>()
        .join(" ‹ ")
}

/// ` in `Queue.get  queue.py:171 ‹ <module>  loop.py:27`` for a stack with frames, else
/// nothing.
pub fn in_frames(frames: &[String]) -> String {
    if frames.is_empty() {
        String::new()
    } else {
        format!(" in `{}`", chain(frames))
    }
}

/// One state in words: `97% blocked in futex under Queue.get  queue.py:171 ‹ …`.
pub fn words(s: &JsonState) -> String {
    let pct = format!("{:.0}%", 100.0 * s.share);
    let under = |what: &str| {
        if s.frames.is_empty() {
            what.to_string()
        } else {
            format!("{what} in `{}`", chain(&s.frames))
        }
    };
    match s.state {
        "on_cpu" if s.frames.is_empty() => format!("{pct} on a CPU"),
        // Python frames first, as the CPU samples' line reads: the program's code, then the
        // native code it was in.
        "on_cpu" => match s
            .frames
            .iter()
            .position(|f| crate::frames::python_parts(f).is_some())
        {
            Some(p) if p > 0 => format!(
                "{pct} running `{}` (in `{}`)",
                chain(&s.frames[p..]),
                pretty_frame(&s.frames[0])
            ),
            _ => format!("{pct} running `{}`", chain(&s.frames)),
        },
        "cuda_wait" => format!(
            "{pct} {} (waiting for the GPU)",
            under(&format!(
                "in {}",
                s.call.as_deref().unwrap_or("a CUDA sync")
            ))
        ),
        "gil" => {
            let held = match &s.holder {
                Some(h) if h.frames.is_empty() => format!(" (held by {})", thread_words(h)),
                Some(h) => format!(" (held by {}: `{}`)", thread_words(h), chain(&h.frames)),
                None => String::new(),
            };
            format!("{pct} {}{held}", under("waiting for the GIL"))
        }
        "runnable" => format!("{pct} {}", under("runnable but not running (preempted)")),
        _ => {
            let call = s.call.as_deref().unwrap_or("the kernel");
            let name = call.split(' ').next().unwrap_or(call);
            let what = if is_sleep(name) {
                "sleeping"
            } else if is_read_call(name) && call.contains(" /") {
                "reading"
            } else {
                "blocked"
            };
            format!("{pct} {} ({call})", under(what))
        }
    }
}

/// A thread in words: `thread `busy` (tid 41)`.
fn thread_words(h: &JsonHolder) -> String {
    if h.name.is_empty() {
        format!("thread {}", h.tid)
    } else {
        format!("thread `{}` (tid {})", h.name, h.tid)
    }
}

fn is_sleep(call: &str) -> bool {
    matches!(call, "nanosleep" | "clock_nanosleep")
}

/// The states' line: `During its gaps the launching thread was: 58% waiting for the GIL (held
/// by …), 30% running `blur ‹ …`, 12% blocked in `Queue.get ‹ …` (futex).`
pub fn line(states: &[JsonState]) -> Option<String> {
    if states.is_empty() {
        return None;
    }
    let parts: Vec<String> = states.iter().take(4).map(words).collect();
    Some(format!(
        "During its gaps the launching thread was: {}",
        parts.join(", ")
    ))
}

/// What a sentence on the site says of its states: `the launching thread was on no CPU for
/// 97% of the gap time`.
pub fn off_cpu_words(states: &[JsonState]) -> String {
    let on: f64 = states
        .iter()
        .filter(|s| s.state == "on_cpu")
        .map(|s| s.share)
        .sum();
    format!(
        "the launching thread was on no CPU for {:.0}% of the gap time",
        100.0 * (1.0 - on).max(0.0)
    )
}

/// A site's states summed up for the patterns: shares of its gap time.
#[derive(Clone, Debug, Default)]
pub struct Shares {
    pub on_cpu: f64,
    pub gil: f64,
    pub runnable: f64,
    pub cuda_wait: f64,
    /// Asleep in a system call, by the call's name (without what it read).
    pub blocked: Vec<(String, f64)>,
}

impl Shares {
    pub fn of(states: &[JsonState]) -> Shares {
        let mut s = Shares::default();
        for x in states {
            match x.state {
                "on_cpu" => s.on_cpu += x.share,
                "gil" => s.gil += x.share,
                "runnable" => s.runnable += x.share,
                "cuda_wait" => s.cuda_wait += x.share,
                _ => {
                    let call = x.call.as_deref().unwrap_or("");
                    let (name, target) = call.split_once(' ').unwrap_or((call, ""));
                    // A read of a pipe or a socket waits for its writer, as a queue does.
                    let name = if target.starts_with("pipe:") || target.starts_with("socket:") {
                        "pipe".to_string()
                    } else {
                        name.to_string()
                    };
                    match s.blocked.iter_mut().find(|b| b.0 == name) {
                        Some(b) => b.1 += x.share,
                        None => s.blocked.push((name, x.share)),
                    }
                }
            }
        }
        s.blocked.sort_by(|a, b| b.1.total_cmp(&a.1));
        s
    }

    /// The share asleep in calls `pred` accepts.
    pub fn blocked_in(&self, pred: impl Fn(&str) -> bool) -> f64 {
        self.blocked
            .iter()
            .filter(|b| pred(&b.0))
            .map(|b| b.1)
            .sum()
    }
}

/// The calls a thread waiting on a queue, a pipe or a socket sleeps in.
pub fn is_wait_call(call: &str) -> bool {
    matches!(
        call,
        "futex"
            | "futex_waitv"
            | "poll"
            | "ppoll"
            | "select"
            | "pselect6"
            | "epoll_wait"
            | "epoll_pwait"
            | "recvfrom"
            | "recvmsg"
            | "accept"
            | "accept4"
            | "wait4"
            | "pipe"
    )
}

/// The calls that read a file.
pub fn is_read_call(call: &str) -> bool {
    matches!(
        call,
        "read" | "pread64" | "readv" | "preadv" | "preadv2" | "openat"
    )
}

pub fn is_sleep_call(call: &str) -> bool {
    is_sleep(call)
}

#[cfg(test)]
#[path = "threadstate_tests.rs"]
mod tests;

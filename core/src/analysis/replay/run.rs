//! Running the model: every start and end from the durations and the dependencies, each
//! thread's calls and each stream's ops in their order, as far as their dependencies allow,
//! round after round.

use super::model::{Model, NONE};
use crate::model::records::Ns;

/// The replayed times, by call and op.
#[derive(Clone, Debug, Default)]
pub struct Times {
    pub call_start: Vec<Ns>,
    pub call_end: Vec<Ns>,
    pub op_start: Vec<Ns>,
    pub op_end: Vec<Ns>,
    /// Items whose dependencies could not all be met in order (a cycle in what was read), taken
    /// with the measured times of the missing ones.
    pub forced: u32,
}

/// Where a thread stands: its next call, and whether that call's start is known.
#[derive(Clone, Copy)]
struct Cursor {
    next: u32,
    started: bool,
}

/// Replays the model.
pub fn run(m: &Model) -> Times {
    let mut t = Times {
        call_start: vec![0; m.calls.len()],
        call_end: vec![0; m.calls.len()],
        op_start: vec![0; m.ops.len()],
        op_end: vec![0; m.ops.len()],
        forced: 0,
    };
    let mut th: Vec<Cursor> = m
        .threads
        .iter()
        .map(|x| Cursor {
            next: x.first,
            started: false,
        })
        .collect();
    let mut ln: Vec<Cursor> = m
        .lanes
        .iter()
        .map(|x| Cursor {
            next: x.first,
            started: false,
        })
        .collect();
    // Per collective: members arrived, and the latest arrival.
    let mut arrived: Vec<(u32, Ns)> = vec![(0, Ns::MIN); m.groups.len()];
    let call_started = |th: &[Cursor], c: u32| {
        let cur = th[m.calls[c as usize].thread as usize];
        c < cur.next || (c == cur.next && cur.started)
    };
    let op_done = |ln: &[Cursor], j: u32| j < ln[m.ops[j as usize].lane as usize].next;
    let mut force = false;
    loop {
        let mut progress = false;
        for (i, x) in m.threads.iter().enumerate() {
            while th[i].next < x.last {
                let c = th[i].next;
                let call = &m.calls[c as usize];
                if !th[i].started {
                    let mut start = if c == x.first {
                        call.start
                    } else {
                        t.call_end[c as usize - 1] + call.seg
                    };
                    if call.after != NONE {
                        // Woken by another thread: when that one's call ended, its own idle
                        // aside (no earlier than its previous call's end).
                        if c != x.first {
                            start = t.call_end[c as usize - 1];
                        }
                        let d = call.after;
                        let o = m.calls[d as usize].thread as usize;
                        if d < th[o].next {
                            start = start.max(t.call_end[d as usize] + call.after_gap);
                        } else if force {
                            start = start.max(m.calls[d as usize].end + call.after_gap);
                            t.forced += 1;
                            force = false;
                        } else {
                            break;
                        }
                    }
                    t.call_start[c as usize] = start;
                    th[i].started = true;
                    progress = true;
                }
                let mut end = t.call_start[c as usize] + call.own;
                if call.wait != NONE {
                    if op_done(&ln, call.wait) {
                        end = end.max(t.op_end[call.wait as usize] + call.tail);
                    } else if force {
                        end = end.max(m.ops[call.wait as usize].end + call.tail);
                        t.forced += 1;
                        force = false;
                    } else {
                        break;
                    }
                }
                t.call_end[c as usize] = end;
                th[i].next += 1;
                th[i].started = false;
                progress = true;
            }
        }
        for (s, x) in m.lanes.iter().enumerate() {
            while ln[s].next < x.last {
                let j = ln[s].next;
                let op = &m.ops[j as usize];
                if !ln[s].started {
                    let launch_ready = op.call == NONE || call_started(&th, op.call);
                    let dep_ready = op.dep == NONE || op_done(&ln, op.dep);
                    let ready = launch_ready && dep_ready;
                    if !ready && !force {
                        break;
                    }
                    if !ready {
                        t.forced += 1;
                        force = false;
                    }
                    let mut start = op.floor;
                    if op.call != NONE {
                        let l = if launch_ready {
                            t.call_start[op.call as usize]
                        } else {
                            m.calls[op.call as usize].start
                        };
                        start = start.max(l + op.lat);
                    }
                    let prev = if j > x.first {
                        Some(t.op_end[j as usize - 1])
                    } else {
                        x.before_end
                    };
                    if let Some(e) = prev {
                        start = start.max(e + op.gap);
                    }
                    if op.dep != NONE {
                        let e = if dep_ready {
                            t.op_end[op.dep as usize]
                        } else {
                            m.ops[op.dep as usize].end
                        };
                        start = start.max(e + op.dep_gap);
                    }
                    t.op_start[j as usize] = start;
                    ln[s].started = true;
                    progress = true;
                    if op.group != NONE {
                        let a = &mut arrived[op.group as usize];
                        a.0 += 1;
                        a.1 = a.1.max(start);
                    }
                }
                let end = if op.group != NONE {
                    let a = arrived[op.group as usize];
                    if (a.0 as usize) < m.groups[op.group as usize].len() {
                        if !force {
                            break;
                        }
                        t.forced += 1;
                        force = false;
                        // The missing members as measured.
                        let last = m.groups[op.group as usize]
                            .iter()
                            .map(|&q| m.ops[q as usize].start)
                            .max()
                            .unwrap_or(a.1);
                        a.1.max(last) + op.dur
                    } else {
                        a.1 + op.dur
                    }
                } else {
                    t.op_start[j as usize] + op.dur
                };
                t.op_end[j as usize] = end;
                ln[s].next += 1;
                ln[s].started = false;
                progress = true;
            }
        }
        let done = th.iter().zip(&m.threads).all(|(c, x)| c.next >= x.last)
            && ln.iter().zip(&m.lanes).all(|(c, x)| c.next >= x.last);
        if done {
            break;
        }
        // Stuck (a cycle in what was read): the first blocked item, in thread then stream
        // order, goes with what it misses as measured.
        force = !progress;
    }
    t
}

//! What a process's threads did while on no CPU: stretches of time asleep in the kernel, runnable
//! but not running, or waiting for the GIL, with the system call, the Python stack meanwhile and
//! (for the GIL) the thread that held it. The viewer's sampler finds them from the kernel's
//! context-switch records (`collect::sources::cpu::offcpu`); a process whose switches were
//! recorded (`Process::switches`) was on a CPU whenever no stretch covers the time.

use super::records::{NameId, Ns, StackId};
use super::store::Store;

/// What a thread off its CPU did (the wire's `STATE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OffKind {
    /// Asleep in the kernel: a system call (`call`), a page fault.
    Blocked,
    /// Preempted: runnable, waiting for a CPU.
    Runnable,
    /// Asleep waiting for the GIL, which `holder` held.
    Gil,
}

impl OffKind {
    pub fn from_wire(k: u8) -> Option<OffKind> {
        match k {
            gaptop_wire::STATE_BLOCKED => Some(OffKind::Blocked),
            gaptop_wire::STATE_RUNNABLE => Some(OffKind::Runnable),
            gaptop_wire::STATE_GIL => Some(OffKind::Gil),
            _ => None,
        }
    }
}

/// One stretch of a thread's time off its CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OffCpu {
    pub start: Ns,
    pub end: Ns,
    pub kind: OffKind,
    /// The system call it slept in (`futex`, `read /data/x.bin`), 0 where not known.
    pub call: NameId,
    /// Its Python stack meanwhile, 0 where not read.
    pub stack: StackId,
    /// The thread that held the GIL (0: none known), its name and its stack.
    pub holder: u32,
    pub holder_name: NameId,
    pub holder_stack: StackId,
}

/// Most stretches kept per thread; the oldest leave first.
pub const MAX_THREAD_STATES: usize = 1 << 20;

impl Store {
    /// Marks process `proc`'s context switches as recorded (time no stretch covers was on a
    /// CPU) and adds thread `tid`'s stretches, which arrive in time order a batch at a time.
    pub fn add_states(&mut self, proc: u32, tid: u32, states: &[OffCpu]) {
        let p = &mut self.procs[proc as usize];
        p.switches = true;
        if states.is_empty() {
            return;
        }
        let v = p.states.entry(tid).or_default();
        for &x in states {
            let i = v.partition_point(|s| s.start <= x.start);
            v.insert(i, x);
        }
        if v.len() > MAX_THREAD_STATES {
            v.drain(..v.len() - MAX_THREAD_STATES);
        }
        self.generation += 1;
    }
}

impl super::process::Process {
    /// Thread `tid`'s stretches off its CPU that overlap [t0, t1), in time order.
    pub fn states_in(&self, tid: u32, t0: Ns, t1: Ns) -> &[OffCpu] {
        let Some(v) = self.states.get(&tid) else {
            return &[];
        };
        // Stretches do not overlap one another: the first that ends after t0 is found by
        // its start among those that start before t1.
        let hi = v.partition_point(|s| s.start < t1);
        let lo = v[..hi].partition_point(|s| s.end <= t0);
        &v[lo..hi]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn off(start: Ns, end: Ns) -> OffCpu {
        OffCpu {
            start,
            end,
            kind: OffKind::Blocked,
            call: 0,
            stack: 0,
            holder: 0,
            holder_name: 0,
            holder_stack: 0,
        }
    }

    #[test]
    fn stretches_are_found_by_the_time_they_overlap() {
        let mut s = Store::new(usize::MAX);
        let p = s.process_for_samples(0, 7);
        assert!(!s.procs[p as usize].switches);
        s.add_states(p, 8, &[]);
        assert!(
            s.procs[p as usize].switches,
            "an empty batch says they are recorded"
        );
        s.add_states(p, 8, &[off(10, 20), off(30, 40)]);
        s.add_states(p, 8, &[off(25, 28)]);
        let pr = &s.procs[p as usize];
        let starts = |t0, t1| {
            pr.states_in(8, t0, t1)
                .iter()
                .map(|x| x.start)
                .collect::<Vec<_>>()
        };
        assert_eq!(starts(0, 100), [10, 25, 30]);
        assert_eq!(starts(20, 30), [25]);
        assert_eq!(starts(15, 26), [10, 25]);
        assert_eq!(starts(40, 50), Vec::<Ns>::new());
        assert!(pr.states_in(9, 0, 100).is_empty());
    }
}

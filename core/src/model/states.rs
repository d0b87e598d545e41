//! What a process's threads did while on no CPU: stretches of time asleep in the kernel, runnable
//! but not running, or waiting for the GIL, with the system call, the Python stack meanwhile and
//! (for the GIL) the thread that held it. The viewer's sampler finds them from the kernel's
//! context-switch records (`sources::cpu::offcpu`); a process whose switches were
//! recorded (`Process::switches`) was on a CPU whenever no stretch covers the time.

use super::records::{NameId, Ns, StackId};

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

impl OffCpu {
    /// Asleep from `start` to `end` in a call not known, with no stack or holder.
    pub fn blocked(start: Ns, end: Ns) -> OffCpu {
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
}

/// Most stretches kept per thread; the oldest leave first.
pub const MAX_THREAD_STATES: usize = 1 << 20;

//! Where a walk's bytes come from. This module is the only `unsafe` code of the crate.
//!
//! - [`Process`]: a process's memory (another's, or this one's) through `process_vm_readv`,
//!   which fails instead of faulting where nothing is mapped and never stops the process: the
//!   viewer's sampler, and the collector's calibration, which probes addresses that may not be
//!   readable;
//! - [`Local`]: this process's memory read in place, as the collector's walk at a launch
//!   does: a load a field, no system call. Only sound where every address read is known to be
//!   readable, which its constructor's contract asks.

use std::ffi::{c_int, c_void};

/// Memory a walk reads. A read fills its whole buffer or fails: nothing partial is trusted.
pub trait Memory {
    /// Fills `buf` from `addr`; false where any of it cannot be read.
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool;

    /// The word at `addr`.
    fn word(&self, addr: usize) -> Option<usize> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| usize::from_ne_bytes(b))
    }

    /// The words at `base + offs[i]`, all of them or none. By default the span they cover is
    /// read at once where it is small (one system call for a frame's fields); a memory read in
    /// place reads each.
    fn words<const N: usize>(&self, base: usize, offs: [usize; N]) -> Option<[usize; N]> {
        const SPAN: usize = 256;
        let lo = offs.iter().copied().min()?;
        let hi = offs.iter().copied().max()? + 8;
        let mut out = [0usize; N];
        if hi - lo <= SPAN {
            let mut buf = [0u8; SPAN];
            if !self.read(base.checked_add(lo)?, &mut buf[..hi - lo]) {
                return None;
            }
            for (o, &off) in out.iter_mut().zip(&offs) {
                let at = off - lo;
                *o = usize::from_ne_bytes(buf[at..at + 8].try_into().ok()?);
            }
        } else {
            for (o, &off) in out.iter_mut().zip(&offs) {
                *o = self.word(base.checked_add(off)?)?;
            }
        }
        Some(out)
    }

    /// The instruction offset of interpreter frame `frame`, asked of the interpreter itself
    /// ([`crate::Instr::Api`]); None where this memory cannot ask it.
    fn api_lasti(&self, _frame: usize) -> Option<i32> {
        None
    }
}

/// A process's memory through `process_vm_readv`.
#[derive(Clone, Copy, Debug)]
pub struct Process {
    pid: libc::pid_t,
}

impl Process {
    pub fn new(pid: u32) -> Process {
        Process {
            pid: pid as libc::pid_t,
        }
    }

    /// This process, for reads that may find nothing mapped.
    pub fn current() -> Process {
        Process::new(std::process::id())
    }
}

impl Memory for Process {
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if addr < 4096 || buf.is_empty() {
            return false;
        }
        let n = buf.len();
        let local = libc::iovec {
            iov_base: buf.as_mut_ptr() as *mut c_void,
            iov_len: n,
        };
        let remote = libc::iovec {
            iov_base: addr as *mut c_void,
            iov_len: n,
        };
        // SAFETY: the kernel writes at most `n` bytes into `buf` (the local iovec, which it
        // borrows mutably) and reads the remote range itself, failing instead of faulting
        // where it is not mapped.
        let got = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        got == n as isize
    }
}

/// `PyUnstable_InterpreterFrame_GetLasti`'s type.
pub type LastiFn = unsafe extern "C" fn(*mut c_void) -> c_int;

/// This process's memory, read in place: what the collector's walk at a launch reads (its
/// reads inlined into the walk: a load a field, as the collector's walk always did).
#[derive(Debug)]
pub struct Local {
    lasti: Option<LastiFn>,
    /// Not Send or Sync: its contract is about the thread that made it.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Local {
    /// A reader of the calling thread's own Python frames.
    ///
    /// # Safety
    /// While it lives, it may be handed only to this crate's readers ([`crate::walk`],
    /// [`crate::read_str`]), with a [`crate::Layout`] calibration confirmed in this process's
    /// interpreter, starting from the calling thread's own thread state, and only on the
    /// frames that thread's walk found and the code objects they run; and those frames must
    /// hold still: the thread is inside a C call it made (a CUDA API callback, a ctypes call),
    /// not inside the interpreter's own frame bookkeeping (a signal handler, say). Then every
    /// address read is a field of a live object. `lasti`, where given, must be this
    /// interpreter's `PyUnstable_InterpreterFrame_GetLasti`.
    pub unsafe fn new(lasti: Option<LastiFn>) -> Local {
        Local {
            lasti,
            _thread: std::marker::PhantomData,
        }
    }
}

impl Memory for Local {
    #[inline]
    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if addr < 4096 {
            return false;
        }
        // SAFETY: `addr..addr + buf.len()` lies in a live object that holds still (the
        // contract of `Local::new`); `buf` is ours and cannot overlap it.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        true
    }

    #[inline]
    fn word(&self, addr: usize) -> Option<usize> {
        if addr < 4096 {
            return None;
        }
        // SAFETY: a field of a live object that holds still (the contract of `Local::new`).
        Some(unsafe { std::ptr::read_unaligned(addr as *const usize) })
    }

    #[inline]
    fn words<const N: usize>(&self, base: usize, offs: [usize; N]) -> Option<[usize; N]> {
        let mut out = [0usize; N];
        for (o, &off) in out.iter_mut().zip(&offs) {
            *o = self.word(base.checked_add(off)?)?;
        }
        Some(out)
    }

    #[inline]
    fn api_lasti(&self, frame: usize) -> Option<i32> {
        let g = self.lasti?;
        // SAFETY: `g` is PyUnstable_InterpreterFrame_GetLasti, which only reads the live frame
        // `frame`, a frame of this thread's walk that holds still (the contract of `new`).
        Some(unsafe { g(frame as *mut c_void) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_read_fails_where_nothing_is_mapped() {
        let me = Process::current();
        let v: [usize; 4] = [11, 22, 33, 44];
        let at = v.as_ptr() as usize;
        assert_eq!(me.word(at + 8), Some(22));
        assert_eq!(me.words(at, [24, 0, 16]), Some([44, 11, 33]));
        assert_eq!(me.word(8), None, "the first page");
        assert_eq!(me.word(usize::MAX - 4), None, "past the end");
        assert_eq!(me.words(usize::MAX - 64, [0, 8]), None);
        assert!(!me.read(at, &mut []), "nothing to read");
        // SAFETY: only the array above, alive and unchanged, is read.
        let local = unsafe { Local::new(None) };
        assert_eq!(local.words(at, [24, 0, 16]), Some([44, 11, 33]));
        assert_eq!(local.word(0), None);
        assert_eq!(local.api_lasti(at), None);
    }
}

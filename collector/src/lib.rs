//! gaptop's injected collector: loaded into the profiled process through
//! `CUDA_INJECTION64_PATH`, it turns CUPTI activity records and launch callbacks into compact
//! wire records and ships them to the viewer over a Unix socket.
//!
//! Rules it keeps, because it runs inside somebody else's program:
//! - the program never blocks on gaptop: app threads only append to their own buffer; a sender
//!   thread does all socket I/O; whatever cannot be kept is dropped and counted;
//! - only the callbacks that matter are enabled (launches, syncs, copies, waits), never whole
//!   API domains;
//! - Python stacks are walked through the CPython API and interned: each distinct stack is
//!   named once, and a launch carries only a stack id;
//! - if the viewer or CUPTI is missing, or CUPTI refuses, it says so once on stderr and stays
//!   out of the way; it never exits, never installs signal handlers and never writes to stdout.
//!
//! This crate and `gaptop-pystack`'s `memory` (the reads of Python frames, in place and through
//! `process_vm_readv`) are the only places in gaptop with `unsafe` code; every unsafe block
//! says why it is sound, and only `cupti` calls into libcupti.
//!
//! Modules:
//! - `cupti`: the safe CUPTI layer, the only code that calls libcupti, and its rules;
//! - `setup`: `start` and `start_dormant`; `enable`: what is switched on in CUPTI, by the
//!   switches; `lifetime`: `go_quiet`, `at_exit` and the handlers; `viewer`: its socket;
//! - `dormant`, `control`, `session`: a dormant collector's attach state machine, the control
//!   socket its own thread serves, and what the threads share about attaching;
//! - `callbacks`: the API callbacks (the hot path) and switching them on and off;
//! - `stacks`: launch stacks walked and interned;
//! - `pyframes`, `native`: the Python frames' calibration (the walk is `gaptop_pystack`'s) and
//!   native frames;
//! - `pycalib`: the calibration's pending call; `pyremote`: the layout for the CPU sampler;
//! - `activity`, `records`: CUPTI's activity buffers, and their records decoded;
//! - `sender`: the sender thread, the only socket I/O;
//! - `state`: the `Collector`, its parts and locks; `limits`: what it holds at most;
//! - `switches`: the environment switches; `diag`: GAPTOP_VERBOSE's reports;
//! - `selftest`: hooks that drive the stack walk without a GPU.
//!
//! They import one another one way only, with no circles: the starts (`setup`) at the top, then
//! the control thread and the attach machine, what is enabled, the sender, callbacks and
//! activity buffers, `lifetime`, then `state` and its parts (`session`, `native`), and `cupti`,
//! `switches` and `limits` at the bottom. What many modules share sits below all of them.

#![deny(unsafe_op_in_unsafe_fn)]

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::OnceLock;

macro_rules! say {
    ($($t:tt)*) => {
        eprintln!("gaptop collector [pid {}]: {}", std::process::id(), format!($($t)*))
    };
}

mod activity;
mod callbacks;
mod control;
mod cupti;
mod diag;
mod dormant;
mod enable;
mod lifetime;
mod limits;
mod native;
mod pycalib;
mod pyframes;
mod pyremote;
mod records;
mod selftest;
mod sender;
mod session;
mod setup;
mod stacks;
mod state;
mod switches;
#[cfg(test)]
mod tests;
mod viewer;

/// The collector, set once by `setup::start`; until then every callback returns at once.
static COLLECTOR: OnceLock<state::Collector> = OnceLock::new();
/// Set in a forked child: it collects nothing (its CUPTI state is not its own).
static FORKED: AtomicBool = AtomicBool::new(false);
/// Diagnostics (GAPTOP_CB_NOOP=1): callbacks stay enabled but return at once, to measure what
/// CUPTI's callback machinery costs without gaptop's work in them.
static CB_NOOP: AtomicBool = AtomicBool::new(false);
/// Counts the windows in which API callbacks are on, with sampled stacks (GAPTOP_STACK_DUTY):
/// a call entered in an earlier window may never see its exit.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// Entry point CUDA calls when `CUDA_INJECTION64_PATH` names this library (once, during its
/// initialization). Always returns 1: a collector that cannot start stays out of the way.
#[no_mangle]
pub extern "C" fn InitializeInjection() -> c_int {
    let r = std::panic::catch_unwind(setup::start);
    match r {
        Ok(Ok(())) => 1,
        Ok(Err(e)) => {
            say!("{e}; not collecting, the program runs unchanged");
            if let Some(c) = COLLECTOR.get() {
                lifetime::go_quiet(c, "setup failed");
            }
            1
        }
        Err(_) => {
            say!("internal error during setup; not collecting");
            1
        }
    }
}

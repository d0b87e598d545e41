//! gaptop's one reader of CPython stacks, for both of the places that read them: the collector,
//! inside the program, walks the launching thread's frames at each CUDA launch; the viewer's
//! CPU sampler reads every thread's frames from outside, with `process_vm_readv`.
//!
//! - [`layout`]: where the interpreter keeps what a walk reads ([`Layout`], found by the
//!   collector's calibration) and what a reader outside the process needs besides
//!   ([`ProcessLayout`]), with its published text (`gaptop_python_layout 1`, the
//!   `python-<pid>` file the collector writes and the viewer reads);
//! - [`memory`]: where the bytes come from ([`Memory`]): the program's own memory, read in place
//!   ([`Local`], the collector's walk), or a process's through `process_vm_readv` ([`Process`],
//!   the viewer's sampler and the collector's calibration, which may probe any address); the
//!   only `unsafe` code of this crate;
//! - [`walk`]: the one frame walker, the thread list, the one string reader and a code object's
//!   line table, each generic over [`Memory`];
//! - [`lines`]: a line number from a code object's line table ([`lines::Table`]: 3.9's
//!   `co_lnotab`, 3.10's line table, 3.11's location table and later's);
//! - [`gil`]: the GIL's layout by version, its holder, and its futexes (a thread that waits
//!   for it).
//!
//! Modules import one way only: `lines` and `layout` at the bottom, `memory`, then `walk` and
//! `gil`.

#![deny(unsafe_code)]

pub mod gil;
pub mod layout;
pub mod lines;
#[allow(unsafe_code)]
pub mod memory;
pub mod walk;

pub use layout::{
    unavailable_text, Instr, Layout, LineFields, ProcessLayout, Published, Threads, TidAt,
};
pub use lines::line_of;
pub use memory::{Local, Memory, Process};
pub use walk::{code_lines, is_entry_shim, read_str, threads, top_frame, walk, RawFrame};

/// The deepest Python stack read, in process and from outside alike: the innermost frames are
/// kept.
pub const MAX_DEPTH: usize = 256;
/// Threads of one interpreter listed, at most.
pub const MAX_THREADS: usize = 4096;
/// The longest string read, in characters (longer ones are cut there).
pub const MAX_STR: usize = 4096;
/// The longest location table read, in bytes.
pub const MAX_TABLE: usize = 1 << 20;

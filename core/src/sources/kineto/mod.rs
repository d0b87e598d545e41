//! Import of torch.profiler (Kineto) Chrome-trace JSON, plain or gzipped, streamed.
//!
//! What is kept: GPU ops (`kernel`, `gpu_memcpy`, `gpu_memset`), host API calls (`cuda_runtime`,
//! `cuda_driver`) and CPU spans (`python_function`, `cpu_op`, `user_annotation`), whose nesting
//! gives each API call its call stack. Traces of Kineto before mid-2021 spell the categories
//! `Kernel`, `Memcpy`, `Memset`, `Runtime` and `Operator`, name a GPU op's thread `stream N`
//! and give an operator's Python stack as its `Call stack` argument; they read alike.
//! User annotations are also ranges (`model::ranges`), and `gpu_user_annotation`s GPU-side
//! ones. Everything else is counted as skipped.
//!
//! One builder may read several traces (the ranks of a run): each file's calls and ops make a
//! process of their own, with the rank of the trace's `distributedInfo` header, and its times
//! are put on the absolute clock its `baseTimeNanoseconds` gives (newer Kineto writes times
//! relative to it).
//!
//! The reading is in stages, a file each: what a trace file says about itself and how it is
//! opened (`files`); finding an event's members in its bytes (`members`) and reading their
//! numbers (`numbers`); the builder's state (`builder`), what each event adds to it
//! (`event`), and the nesting of the CPU spans once every event is in (`nesting`); and the
//! threads that split, scan and read a trace at once (`read`).

mod builder;
mod event;
mod files;
mod members;
mod nesting;
mod numbers;
mod read;

pub use builder::Builder;
pub use files::{file_label, open_maybe_gz, other_ranks_note, rank_in_name, Header, OTHER_RANKS};
pub use numbers::us_to_ns;
pub use read::{load, load_reader, no_gpu_ops};

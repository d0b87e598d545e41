//! gaptop: where the GPU sits idle between kernels, and which code made it wait.
//!
//! The modules depend on each other in one direction only (ARCHITECTURE.md; `tests/layers.rs`
//! checks it):
//!
//! - [`gaptop_core`], a crate of its own below all of them: the sources (Kineto JSON, Nsight
//!   Systems, recordings, the live socket), the model (the event store) and the analysis (the
//!   gaps, the steps and what to fix), with times, frames and messages.
//! - [`report`], [`pprof`], [`diff`] and [`gate`]: the headless report, its pprof profile,
//!   the comparison of two captures and its regression verdict.
//! - [`export`], [`recorder`] and [`serve`]: the Chrome-trace export, `gaptop record` and
//!   `capture`, and `gaptop serve`'s Prometheus metrics.
//! - [`app`]: the terminal UI's model (state, messages, one `update`, the view model) and its
//!   terminal loop.
//! - [`views`]: render functions that lay out and colour the view model.
//! - [`cli`]: the command line: its arguments and each command's handler (the binary only
//!   calls [`cli::main`]).
#![forbid(unsafe_code)]

pub mod app;
pub mod cli;
pub mod diff;
pub mod export;
pub mod gate;
pub mod pprof;
pub mod recorder;
pub mod report;
pub mod serve;
pub mod views;

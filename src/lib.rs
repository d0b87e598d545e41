//! gaptop: where the GPU sits idle between kernels, and which code made it wait.
//!
//! The modules depend on each other in one direction only (ARCHITECTURE.md; `tests/layers.rs`
//! checks it):
//!
//! - [`units`] and [`frames`]: times, and how frames and op names read; [`text`]: how
//!   messages read; [`files`]: outputs that replace their target only once complete, inputs
//!   checked, temporary files removed on every way out.
//! - [`collect`]: sources (Kineto JSON, recordings, the live socket), the event store, the gap
//!   analysis and the advice on what to fix.
//! - [`report`], [`pprof`], [`diff`] and [`gate`]: the headless report, its pprof profile,
//!   the comparison of two captures and its regression verdict.
//! - [`export`], [`record`] and [`serve`]: the Chrome-trace export, `gaptop record` and
//!   `capture`, and `gaptop serve`'s Prometheus metrics.
//! - [`app`]: the terminal UI's model (state, messages, one `update`, the view model) and its
//!   terminal loop.
//! - [`views`]: render functions that lay out and colour the view model.
//! - [`cli`]: the command line: its arguments and each command's handler (the binary only
//!   calls [`cli::main`]).
#![forbid(unsafe_code)]

/// `eprintln!` that never panics: a terminal that hung up (ssh dropped) fails every write to
/// stderr, and gaptop must still end cleanly then, detaching and stopping what it started.
/// What it says is one line of at most 300 characters ([`text::one_line`]).
#[macro_export]
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "{}",
            $crate::text::one_line(&format!($($t)*))
        );
    }};
}

pub mod app;
pub mod cli;
pub mod collect;
pub mod diff;
pub mod export;
pub mod files;
pub mod frames;
pub mod gate;
pub mod pprof;
pub mod record;
pub mod report;
pub mod serve;
pub mod text;
pub mod units;
pub mod views;

//! gaptop-core: what gaptop knows of a run, with no terminal, server or async runtime in it
//! (its Cargo.toml names none; `tests/layers.rs` keeps it so). The report, `diff`, `serve` and
//! the terminal UI (the `gaptop` crate) all read it.
//!
//! Three stages that only look down:
//!
//! - [`sources`]: the readers (Kineto JSON, Nsight Systems, recordings, the live socket and its
//!   CPU sampler), each filling the model;
//! - [`model`]: the event store every source fills and every analysis reads;
//! - [`analysis`]: gaps, steps, what to fix and why, what the CPU did, stalls between ranks.
//!
//! Below them: [`units`] and [`frames`] (times, and how frames and op names read), [`text`]
//! (how messages read) and [`files`] (outputs that replace their target only once complete,
//! inputs checked, temporary files removed on every way out).
//!
//! `tests/layers.rs` checks that sources and analysis never import each other and that no
//! modules import each other in a circle.
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

pub mod analysis;
pub mod files;
pub mod frames;
pub mod model;
pub mod sources;
pub mod text;
pub mod units;

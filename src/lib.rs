//! gaptop: where the GPU sits idle between kernels, and which code made it wait.
//!
//! - [`collect`]: sources (Kineto JSON, recordings, the live socket), the event store and the
//!   gap analysis.
//! - [`report`]: the headless report.
//! - [`app`] and [`views`]: the terminal UI (state, actions, pure render functions).
#![forbid(unsafe_code)]

pub mod advice;
pub mod app;
pub mod collect;
pub mod export;
pub mod record;
pub mod report;
pub mod units;
pub mod views;

//! What gaptop knows of a run, in three stages that only look down:
//!
//! - [`sources`]: the readers (Kineto JSON, Nsight Systems, recordings, the live socket and its
//!   CPU sampler), each filling the model;
//! - [`model`]: the event store every source fills and every analysis reads;
//! - [`analysis`]: gaps, steps, what to fix and why, what the CPU did, stalls between ranks.
//!
//! `tests/layers.rs` checks that sources and analysis never import each other and that no
//! modules import each other in a circle.

pub mod analysis;
pub mod model;
pub mod sources;

//! The analysis: what the model's records mean. The gaps between a lane's ops and why the GPU
//! waited in each, the program's steps, the sites that launched the waiting work and what to
//! fix there, what the CPU did meanwhile, and the stalls between ranks. [`analyse()`] is the one
//! entry: the report, `diff`, `serve` and the UI each analyse a window through it.

pub mod advice;
pub mod advice_row;
pub mod analyse;
pub mod comm;
pub mod gaps;
pub mod oncpu;
pub mod patterns;
pub mod ranks;
pub mod rate;
pub mod replay;
pub mod site;
pub mod steps;
pub mod summary;
pub mod threadstate;
pub mod tree;
pub mod verdict;

pub use analyse::{analyse, Analysis, Options, StepsOver};

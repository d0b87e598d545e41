//! The model: what every source fills and every analysis reads. The event store (GPU ops per
//! lane, host API calls per process, their call stacks, NVTX ranges, CPU samples), packed so a
//! million ops fit in tens of megabytes, and the one rule for which times gaptop believes.

pub mod absorb;
pub(crate) mod calls;
pub(crate) mod chunked;
pub mod dropped;
pub mod fold;
pub mod graft;
pub mod lane;
pub mod plausible;
pub mod process;
pub mod ranges;
pub mod records;
pub mod stacks;
pub mod states;
pub mod store;
pub mod window;

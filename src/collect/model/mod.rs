//! The model: what every source fills and every analysis reads. The event store (GPU ops per
//! lane, host API calls per process, their call stacks, NVTX ranges, CPU samples), packed so a
//! million ops fit in tens of megabytes, and the one rule for which times gaptop believes.

pub(crate) mod calls;
pub(crate) mod chunked;
pub mod lane;
pub mod plausible;
pub mod ranges;
pub mod store;

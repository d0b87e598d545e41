//! The collector's limits: how much it holds, how deep it walks and how often it sends. Every
//! buffer and table the collector keeps is bounded by one of these, so that the profiled
//! program never waits on gaptop and gaptop never grows without bound inside it. A module of
//! their own, below everything else, so that the switches, the native walk and the state can
//! all read them without importing one another.

use std::time::Duration;

/// Bytes of API records a thread may hold before the sender takes them (then records drop).
/// Each thread's buffer is allocated once at this size and never grows inside a callback.
pub(crate) const THREAD_CAP: usize = 2 << 20;
/// Bytes of encoded GPU records waiting for the sender (then batches drop).
pub(crate) const QUEUE_CAP: usize = 128 << 20;
/// CUPTI activity buffer size and the most buffers outstanding at once.
pub(crate) const BUF_SIZE: usize = 4 << 20;
pub(crate) const MAX_BUFFERS: usize = 48;
/// Completed activity buffers kept for reuse instead of being freed (their pages stay mapped,
/// so CUPTI does not fault in fresh ones on the launching thread).
pub(crate) const POOL_KEEP: usize = 8;
/// Native frames kept per launch (between the interpreter, or the thread's base, and CUDA).
pub(crate) const MAX_NATIVE: usize = 48;
/// A launch from a known (Python stack, kernel) pair reuses the native frames of the last
/// walk for that pair, and walks again every this many launches.
pub(crate) const NATIVE_REWALK: u32 = 64;
/// Distinct stacks and frames interned before new ones are no longer named (launches then
/// carry no stack, and are counted).
pub(crate) const MAX_STACKS: u32 = 1 << 20;
/// Slots in each thread's cache of recent stacks (a power of two): a transformer layer's
/// launches come from a few dozen distinct stacks.
pub(crate) const RECENT_STACKS: usize = 256;
/// NVTX ranges open at once (started, not yet ended) that the decoder remembers; past it a
/// range's start is dropped and counted.
pub(crate) const MAX_OPEN_RANGES: usize = 1 << 16;
/// Distinct NVTX messages named; past it ranges share one name saying so.
pub(crate) const MAX_RANGE_NAMES: usize = 1 << 16;
pub(crate) const SEND_PERIOD: Duration = Duration::from_millis(100);
pub(crate) const FLUSH_PERIOD: Duration = Duration::from_millis(200);

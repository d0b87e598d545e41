//! Import of Nsight Systems captures: the SQLite export (`nsys export --type sqlite`, plain or
//! gzipped) and, through the `nsys` on PATH, a `.nsys-rep` report.
//!
//! What is read, by table (NVIDIA's schema; a report holds only the tables it has rows for):
//!
//! - `CUPTI_ACTIVITY_KIND_KERNEL`, `_MEMCPY`, `_MEMSET`: GPU ops, one lane per (process,
//!   device, stream); names through `StringIds`. A kernel with a `graphNodeId` ran as a node of
//!   a CUDA graph; `CUPTI_ACTIVITY_KIND_GRAPH_TRACE` (graphs traced whole) gives one op per
//!   replay. Either way an op's graph is the graph launch it came from (its correlation id), so
//!   that the gaps inside one replay read as the graph's.
//! - `CUPTI_ACTIVITY_KIND_RUNTIME` (runtime and, in recent exports, driver calls by their
//!   `eventClass`) and `CUPTI_ACTIVITY_KIND_DRIVER` (older exports): API calls, joined to the
//!   ops on (process, correlation id). A row of class `CUDABACKTRACE` (older exports) only
//!   carries the call chain of the call with its correlation id.
//! - `CUDA_CALLCHAINS` (`--cudabacktrace`): a call's chain becomes its stack, outermost first,
//!   under the NVTX ranges open at the call; the profiler's and the driver's own frames next to
//!   the call are left out. Frames read `symbol [module]`, or `module+0xADDRESS` unresolved.
//! - `CUDA_GRAPH_NODE_EVENTS` (`--cuda-graph-trace=node`): where and when each graph node was
//!   made, and the node an instantiated graph's node was cloned from. A replayed node whose
//!   original was made inside a call of the export (the launch that stream capture recorded,
//!   or a `cudaGraphAdd*Node`) gets a call of its own: its replay's `cudaGraphLaunch` with
//!   the launch's stack, then [`CAPTURED_AT`] and that call's stack, so that a graph's gaps
//!   name the code its nodes came from.
//! - `NVTX_EVENTS`: push/pop and start/end ranges become CPU spans of the thread that opened
//!   them, so they are frames above the launches they enclose (as Kineto's `user_annotation`
//!   spans are), and the processes' NVTX ranges (with their domains, named by the domain
//!   creation events) for the timeline's lane and steps.
//! - `COMPOSITE_EVENTS` and `SAMPLING_CALLCHAINS` (`--sample=process-tree`): CPU samples of
//!   the processes that did CUDA work, with their user-mode stacks, as the threads' samples
//!   (what the CPU did during gaps), the period the median interval between a thread's samples.
//! - Python backtraces: NVTX marks of nsys's `Python Backtrace` domain whose payload
//!   (`NVTX_EVENTS.binaryData`: a blob, or text as base64 or hex) holds a `PythonBacktrace`
//!   (see [`pybacktrace`]), laid out as `NVTX_PAYLOAD_SCHEMAS` and `_SCHEMA_ENTRIES` say where
//!   the export has them. One taken in a CUDA call (`--python-backtrace=cuda`; nsys takes it
//!   as it enters the call: where its backtrace row starts, or just before CUPTI's start of
//!   the call) gives that call and the calls made inside it
//!   their Python frames, in place of the interpreter's frames of the call chain (the native
//!   frames below the interpreter stay). Periodic ones (`--python-sampling`) are CPU samples;
//!   nsys takes them on its own thread, so a process's samples go to its one thread that made
//!   CUDA calls, where there is one. nsys 2023.4 and older export the marks without their
//!   payloads: a note says so.
//! - `PROCESSES` and `MPI_RANKS`: process names and ranks; `META_DATA_EXPORT` (or the older
//!   `EXPORT_META_DATA`): the Nsight Systems version and the export's schema version.
//!
//! `globalTid` and `globalPid` are serialized ids: the process is `(id >> 24) & 0xFFFFFF`, the
//! thread `id & 0xFFFFFF`, and the bits above 48 name the machine, so a process is its id with
//! the thread's bits cleared. Times are nanoseconds on the capture's clock.
//!
//! The report's notes (`Store::notes`) say the version read and every table it lacked with what
//! that costs; anything unreadable is an error that names the table and the column.
//!
//! By file: `open.rs` tells the forms apart and makes each a SQLite file (`inflate.rs`
//! inflates a gzipped one), `load.rs` reads an export table by table in its order, `db.rs`
//! reads rows and strings, `import.rs` holds what one reading shares; then one file per group
//! of tables: `gpu.rs` (kernels, copies, memsets), `graphs.rs` (graph nodes), `calls.rs` (API
//! calls), `chains.rs` (call chains), `nvtx.rs` (ranges), `python.rs` (Python backtraces,
//! their payloads decoded by `pybacktrace.rs`) and `samples.rs` (CPU samples).

mod calls;
mod chains;
mod db;
mod gpu;
mod graphs;
mod import;
pub mod inflate;
mod load;
mod nvtx;
mod open;
pub mod pybacktrace;
mod python;
mod samples;

pub use graphs::CAPTURED_AT;
pub use load::load_sqlite;
pub use open::{load_kind, sniff, Kind, REPORT_MAGIC, SQLITE_MAGIC};

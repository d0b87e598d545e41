//! The report's JSON shape: what `gaptop report --format json` writes, and what the text report
//! and its headline read back. A module of its own so that the builders (`report`) and the
//! writers (`report::text`, `report::headline`) share these types without importing each other.

use serde::Serialize;

use gaptop_core::model::records::Ns;

#[derive(Serialize)]
pub struct JsonBucket {
    pub count: u64,
    pub total_ns: Ns,
}

#[derive(Serialize)]
pub struct JsonStack {
    pub frames: Vec<String>,
    pub gaps: u64,
    pub gap_ns: Ns,
    /// The ranks its gaps came from, in a capture of several ranks.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ranks: Vec<i32>,
}

#[derive(Serialize)]
pub struct JsonGap {
    /// Relative to the start of the capture.
    pub start_ns: Ns,
    pub duration_ns: Ns,
    pub cause: &'static str,
    pub reason: &'static str,
    pub device: u32,
    pub stream: u32,
    pub pid: u32,
    /// The rank of the gap's process, in a capture of several ranks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rank: Option<i32>,
    pub prev_op: String,
    pub next_op: String,
    pub launch_latency_ns: Ns,
    pub frames: Vec<String>,
    /// What the launching thread was doing: its CPU span stack (traces) or, where the program
    /// was sampled, the frames at least half of the gap's samples hold.
    pub cpu_frames: Vec<String>,
    /// Where the program was sampled: the gap's samples, the share that holds the innermost of
    /// those frames, and the launching thread's time on a CPU as a share of the gap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_samples: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_cpu: Option<f64>,
}

#[derive(Serialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub max: u64,
}

#[derive(Serialize)]
pub struct JsonReport {
    pub source: String,
    /// What the source said about itself: its format's version, the tables it lacked and what
    /// that costs (an Nsight Systems export); then the records dropped because their times
    /// cannot be right (`model::plausible`), a line per cause.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// Absolute time of the capture start on the source's clock; all other times are relative.
    pub origin_ns: Ns,
    pub window: JsonWindow,
    pub gpu_ops: u64,
    pub kernels: u64,
    pub busy_ns: Ns,
    pub kernel_ns: Ns,
    pub device_idle_ns: Ns,
    /// The gap time charged to launches on the basis (`basis`): what the shares of advice and
    /// of the top stacks are of.
    pub charged_ns: Ns,
    pub idle: std::collections::BTreeMap<&'static str, JsonBucket>,
    /// Ops that started before the work before them on their stream had ended (count, and
    /// by how much in all), when there are any: counted apart from the gaps. HTA counts each
    /// as a kernel_wait gap of negative length.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub overlapping: Option<JsonBucket>,
    pub reasons: std::collections::BTreeMap<&'static str, JsonBucket>,
    pub gap_percentiles_ns: Percentiles,
    pub kernel_percentiles_ns: Percentiles,
    /// What the call tree, top gaps and advice are made of: `device` idle (no stream of the
    /// device running anything) or each `stream`'s own (HTA's; `--per-stream`).
    pub basis: &'static str,
    /// The program's iterations, when they could be found.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<gaptop_core::analysis::steps::StepsJson>,
    /// The replay of the steady steps (`analysis::replay`): how closely it gives back
    /// the measured steps, over how many.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay: Option<gaptop_core::analysis::replay::ReplayJson>,
    /// The code to fix first, with why the GPU waited there, what a fix saves a step and the
    /// usual fix: recurring sites by their idle a step first (with steps).
    pub advice: Vec<gaptop_core::analysis::advice::Advice>,
    /// The longest gaps outside recurring patterns (warm-up, first calls, loading), apart.
    pub one_off_gaps: Vec<JsonGap>,
    pub top_stacks: Vec<JsonStack>,
    pub top_gaps: Vec<JsonGap>,
    /// Kernels whose launch call was found by correlation id, and of those, launched from a
    /// known stack.
    pub kernels_with_launch: u64,
    pub kernels_with_stack: u64,
    /// Of those with a stack, the ones whose stack holds a Python frame, and those whose stack
    /// holds native frames and no Python one; the rest name only CPU ops (a Kineto trace
    /// profiled without `with_stack`: `aten::mm`, `autograd::engine::…`).
    pub kernels_with_python: u64,
    pub kernels_with_native: u64,
    /// Each process with kernels in the window: who it is and what arrived from it.
    pub processes: Vec<JsonProcess>,
    /// How the clocks of traces joined as one capture were put together (several traces only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clocks: Option<String>,
    pub dropped: u64,
    pub evicted_ops: u64,
    pub skipped: std::collections::BTreeMap<String, u64>,
    /// Communication stalls across ranks (present when two or more processes ran NCCL kernels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm: Option<gaptop_core::analysis::comm::CommReport>,
    /// What the communication section cannot tell, and why: with clocks that could not be
    /// aligned, no rank is named late and no wait measured (`comm` keeps only its counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm_unknown: Option<String>,
}

#[derive(Serialize)]
pub struct JsonProcess {
    pub pid: u32,
    /// `RANK` where the process had one.
    pub rank: Option<i32>,
    pub label: String,
    pub kernels: u64,
    pub kernels_with_launch: u64,
    pub kernels_with_stack: u64,
    pub kernels_with_python: u64,
    pub kernels_with_native: u64,
    /// Records its collector could not keep, and those CUPTI reported dropped.
    pub dropped: u64,
}

#[derive(Serialize)]
pub struct JsonWindow {
    pub from_ns: Ns,
    pub to_ns: Ns,
}

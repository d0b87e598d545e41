//! The records a store holds, as every source builds them and every analysis reads them: GPU
//! ops, host API calls, CPU spans and samples, and the ids and limits they share. Plain values
//! with no behaviour beyond naming their kinds; the store packs them (`lane`, `calls`).

/// Nanoseconds on the source's clock.
pub use crate::units::Ns;

/// Interned string id; 0 is the empty string.
pub type NameId = u32;
/// Interned stack id; 0 is the empty stack.
pub type StackId = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OpKind {
    Kernel,
    Memcpy,
    Memset,
}

impl OpKind {
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Kernel => "kernel",
            OpKind::Memcpy => "memcpy",
            OpKind::Memset => "memset",
        }
    }
}

/// Longest GPU op gaptop believes (an hour); longer ones are corrupt data.
pub const MAX_OP_NS: Ns = 3_600_000_000_000;
/// Timestamps past this (about 146 years in ns) are corrupt data.
pub const MAX_TS: u64 = 1 << 62;

/// Op flag: a communication kernel (NCCL).
pub const FLAG_COMM: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuOp {
    pub start: Ns,
    pub end: Ns,
    pub name: NameId,
    pub corr: u32,
    pub graph: u32,
    pub kind: OpKind,
    pub flags: u8,
}

impl GpuOp {
    pub fn new(start: Ns, end: Ns, kind: OpKind, name: NameId, corr: u32) -> Self {
        GpuOp {
            start,
            end: end.max(start),
            name,
            corr,
            graph: 0,
            kind,
            flags: 0,
        }
    }
    pub fn dur(&self) -> Ns {
        self.end - self.start
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LaneKey {
    pub proc: u32,
    pub device: u32,
    pub stream: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ApiKind {
    Launch,
    GraphLaunch,
    Copy,
    Sync,
    Wait,
    Other,
}

impl ApiKind {
    /// Classifies a runtime or driver API name (CUPTI's `_v7000`/`_ptsz` suffixes allowed).
    pub fn classify(name: &str) -> ApiKind {
        Self::from_wire(gaptop_wire::api_kind(name))
    }
    pub fn from_wire(k: u8) -> ApiKind {
        match k {
            gaptop_wire::API_LAUNCH => ApiKind::Launch,
            gaptop_wire::API_GRAPH_LAUNCH => ApiKind::GraphLaunch,
            gaptop_wire::API_COPY => ApiKind::Copy,
            gaptop_wire::API_SYNC => ApiKind::Sync,
            gaptop_wire::API_WAIT => ApiKind::Wait,
            _ => ApiKind::Other,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApiCall {
    pub start: Ns,
    pub end: Ns,
    pub corr: u32,
    pub tid: u32,
    pub name: NameId,
    /// Stack of the calling thread at the call (without the API frame itself).
    pub stack: StackId,
    pub kind: ApiKind,
}

/// A CPU span from a trace (python_function, cpu_op, user_annotation), with its nesting.
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub start: Ns,
    pub end: Ns,
    /// Stack id that ends with this span's own frame.
    pub stack: StackId,
    /// Index of the enclosing span in the same thread, or u32::MAX.
    pub parent: u32,
}

/// One CPU sample of a thread: when, and its native stack (outermost frame first).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuSample {
    pub time: Ns,
    pub stack: StackId,
}

/// Most CPU samples kept per thread (about a quarter of an hour at 1 kHz); the oldest leave
/// first, counted in `Store::evicted_samples`.
pub const MAX_THREAD_SAMPLES: usize = 1 << 20;

/// Bytes the store charges per op and per API call: what each is packed in (`model::lane`,
/// `model::calls`; their indexes add under a byte).
pub const OP_BYTES: usize = 24;
pub const API_BYTES: usize = 32;

/// The call tree's frame above the CPU samples taken during a launch's gaps.
pub const CPU_MARKER: &str = "(CPU during these gaps)";

//! gaptop's record format.
//!
//! One format serves three places: the injected collector writes it to a Unix socket, the viewer
//! decodes it, and a recording (`gaptop record`) stores the same frames with the connection they
//! came from. Everything is little-endian and length-prefixed so that a reader can always tell a
//! truncated or corrupt frame from a good one without trusting the payload.
//!
//! ```text
//! frame   := len:u32  tag:u8  payload[len-1]
//! stream  := Hello frame, then any frames          -- a collector's
//!          | Sampler frame, then Name, Stack, Samples and States frames  -- the viewer's CPU sampler
//! record  := "GAPTOPR7" (conn:u32 len:u32 hsum:u32 tag:u8 payload[len-1] sum:u32)* end
//!                                               -- a recording file
//! end     := the same layout with tag End, payload frames:u64  -- written at a clean close
//! ```
//!
//! Recordings are versioned by their magic: `GAPTOPR1` files (no CPU samples) are read as
//! they always were; `GAPTOPR2` adds the sampler's streams; `GAPTOPR3` the collectors' NVTX
//! ranges (`Ranges` frames), which a viewer that reads only R1 and R2 would stop at. R1 to R3
//! store `(conn:u32 frame)*`. `GAPTOPR4` checks each frame: `hsum` is the CRC-32 of its
//! connection and length, `sum` the CRC-32 of its tag and payload, so a reader tells a damaged
//! frame, skips it and finds the next one (the viewer's `sources::recording::bytes`).
//! `GAPTOPR5` ends with an end record ([`TAG_END`]) written at a clean close: a recording cut
//! between records (its writer killed) is told from a complete one. `GAPTOPR6` adds the
//! sampler's `States` frames (what each thread did while on no CPU), which a reader of R5 would
//! count as damage. `GAPTOPR7` adds the recorder's `Cost` frame (what gaptop adds to a CUDA
//! call on the machine that recorded), which a reader of R6 would count as damage.
#![forbid(unsafe_code)]

pub mod control;
mod cost;
mod sampler;
pub mod stackframe;

pub use cost::{encode_cost, Cost, COST_CONN};
pub use sampler::{
    encode_sampler, encode_samples, encode_states, Sample, ThreadState, STATE_BLOCKED, STATE_GIL,
    STATE_RUNNABLE, STATE_SIZE,
};

use std::fmt;

/// Version of the frame format; a Hello with another version is refused.
pub const VERSION: u32 = 1;
/// Magic that opens the Hello payload.
pub const MAGIC: &[u8; 8] = b"GAPTOPW1";
/// Magic that opens a recording file written now.
pub const RECORDING_MAGIC: &[u8; 8] = b"GAPTOPR7";
/// Every recording magic this version reads, oldest first.
pub const RECORDING_MAGICS: [&[u8; 8]; 7] = [
    b"GAPTOPR1",
    b"GAPTOPR2",
    b"GAPTOPR3",
    b"GAPTOPR4",
    b"GAPTOPR5",
    b"GAPTOPR6",
    b"GAPTOPR7",
];
/// Largest frame accepted; anything longer is a protocol error, not an allocation.
pub const MAX_FRAME: usize = 8 << 20;

pub const TAG_HELLO: u8 = 1;
pub const TAG_NAME: u8 = 2;
pub const TAG_STACK: u8 = 3;
pub const TAG_OPS: u8 = 4;
pub const TAG_APIS: u8 = 5;
pub const TAG_STATS: u8 = 6;
pub const TAG_BYE: u8 = 7;
pub const TAG_SAMPLER: u8 = 8;
pub const TAG_SAMPLES: u8 = 9;
pub const TAG_RANGES: u8 = 10;
pub const TAG_STATES: u8 = 11;
pub const TAG_COST: u8 = 12;
/// A GAPTOPR5 recording's last record (payload: the records before it, u64); not a [`Frame`].
pub const TAG_END: u8 = 0xFF;
/// Bytes of one CPU sample on the wire.
pub const SAMPLE_SIZE: usize = 16;

pub const OP_SIZE: usize = 36;
pub const API_SIZE: usize = 40;
pub const RANGE_SIZE: usize = 28;

/// Bytes of one record in a frame of fixed-size records (`Ops`, `Apis`, `Ranges`), by tag.
pub fn record_size(tag: u8) -> Option<usize> {
    match tag {
        TAG_OPS => Some(OP_SIZE),
        TAG_APIS => Some(API_SIZE),
        TAG_RANGES => Some(RANGE_SIZE),
        _ => None,
    }
}

/// GPU operation kinds on the wire.
pub const OP_KERNEL: u8 = 0;
pub const OP_MEMCPY: u8 = 1;
pub const OP_MEMSET: u8 = 2;

/// A memcpy op's name by CUPTI's `CUpti_ActivityMemcpyKind` (also Nsight Systems' `copyKind`).
pub const COPY_KINDS: [&str; 11] = [
    "Memcpy",
    "Memcpy HtoD",
    "Memcpy DtoH",
    "Memcpy HtoA",
    "Memcpy AtoH",
    "Memcpy AtoA",
    "Memcpy AtoD",
    "Memcpy DtoA",
    "Memcpy DtoD",
    "Memcpy HtoH",
    "Memcpy PtoP",
];

/// Host API kinds on the wire (the viewer also classifies by name).
pub const API_LAUNCH: u8 = 0;
pub const API_GRAPH_LAUNCH: u8 = 1;
pub const API_COPY: u8 = 2;
pub const API_SYNC: u8 = 3;
pub const API_WAIT: u8 = 4;
pub const API_OTHER: u8 = 5;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u32,
    pub pid: u32,
    /// RANK from the environment, or -1.
    pub rank: i32,
    /// Command line or other free text describing the process.
    pub label: String,
}

impl Hello {
    pub fn new(pid: u32, rank: i32, label: &str) -> Hello {
        Hello {
            version: VERSION,
            pid,
            rank,
            label: label.to_string(),
        }
    }
}

/// Classifies a CUDA runtime or driver API function by name (CUPTI's `_vNNNN`, `_ptsz` and
/// `_ptds` suffixes allowed). The collector times exactly the calls that are not `API_OTHER`.
pub fn api_kind(name: &str) -> u8 {
    let base = name.split("_v").next().unwrap_or(name);
    let base = base.trim_end_matches("_ptsz").trim_end_matches("_ptds");
    match base {
        "cudaLaunchKernel"
        | "cudaLaunchKernelExC"
        | "cudaLaunchCooperativeKernel"
        | "cudaLaunchCooperativeKernelMultiDevice"
        | "cuLaunchKernel"
        | "cuLaunchKernelEx"
        | "cuLaunchCooperativeKernel"
        | "cuLaunchGrid"
        | "cuLaunchGridAsync"
        | "cudaLaunch" => API_LAUNCH,
        "cudaGraphLaunch" | "cuGraphLaunch" => API_GRAPH_LAUNCH,
        "cudaDeviceSynchronize"
        | "cudaStreamSynchronize"
        | "cudaEventSynchronize"
        | "cuCtxSynchronize"
        | "cuStreamSynchronize"
        | "cuEventSynchronize"
        | "cudaThreadSynchronize"
        | "cudaMemcpy"
        | "cudaMemcpy2D"
        | "cudaMemcpyToSymbol"
        | "cudaMemcpyFromSymbol"
        | "cudaMemset"
        | "cuMemcpyDtoH"
        | "cuMemcpyHtoD"
        | "cuMemcpy"
        | "cuMemcpyDtoD" => API_SYNC,
        "cudaStreamWaitEvent" | "cuStreamWaitEvent" => API_WAIT,
        "cudaMemcpyAsync"
        | "cudaMemsetAsync"
        | "cudaMemcpy2DAsync"
        | "cudaMemcpyPeerAsync"
        | "cuMemcpyAsync"
        | "cuMemcpyHtoDAsync"
        | "cuMemcpyDtoHAsync"
        | "cuMemcpyDtoDAsync"
        | "cuMemsetD8Async"
        | "cuMemsetD32Async" => API_COPY,
        _ => API_OTHER,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Op {
    pub start: u64,
    pub end: u64,
    pub corr: u32,
    pub name: u32,
    pub stream: u32,
    pub graph: u32,
    pub device: u16,
    pub kind: u8,
    pub flags: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Api {
    pub start: u64,
    pub end: u64,
    pub corr: u32,
    pub tid: u32,
    /// Name id of the API function.
    pub name: u32,
    /// Stack id (0 = no stack).
    pub stack: u32,
    /// Correlation id of the enclosing runtime call when this is a driver call made by it, else 0.
    pub outer_corr: u32,
    pub kind: u8,
}

/// Whether a call `corr` made inside the call `outer_corr` (0: inside none) would only repeat
/// that call's record: a driver call a runtime call makes under the runtime call's correlation
/// id. CUPTI gives them one id (every nested call in the H200 recordings in assets/ shares its
/// runtime call's); the outer call's record joins the kernels by it and has the same start and
/// stack, so the nested one adds nothing. A nested call under an id of its own is no repeat:
/// its kernels find it by that id. The collector does not send repeats and the viewer drops
/// them from older recordings.
#[inline]
pub fn repeats_outer_call(corr: u32, outer_corr: u32) -> bool {
    outer_corr != 0 && outer_corr == corr
}

/// An NVTX range of one thread (nvtxRangePush/Pop, nvtxRangeStart/End and their domain
/// variants), as CUPTI's marker records give it: when it opened and closed (ns, CUPTI's clock),
/// the thread that opened it (the system's thread id, as `Api::tid`), its message and its
/// domain as name ids (domain 0: NVTX's default domain).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Range {
    pub start: u64,
    pub end: u64,
    pub tid: u32,
    pub name: u32,
    pub domain: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Stats {
    /// Records the collector could not keep (queue full, viewer slow or gone).
    pub collector_dropped: u64,
    /// Records CUPTI reported as dropped.
    pub cupti_dropped: u64,
    /// Records sent so far.
    pub sent: u64,
    /// The oldest GPU record sent since the previous stats frame had ended this long (ns)
    /// before it left the profiled process: how far the live view trails the GPU. 0 = unknown
    /// (older collectors and recordings end the frame before this field).
    pub lag_ns: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Frame {
    Hello(Hello),
    Name {
        id: u32,
        text: String,
    },
    Stack {
        id: u32,
        parent: u32,
        frame: u32,
    },
    Ops(Vec<Op>),
    Apis(Vec<Api>),
    Stats(Stats),
    Bye {
        reason: u8,
    },
    /// Opens the stream of the viewer's CPU sampler: samples every `period_ns` of each thread
    /// on a CPU. Its names and stacks follow as Name and Stack frames, as on a collector's.
    Sampler {
        period_ns: u32,
    },
    /// CPU samples of process `pid`'s threads, each with its stack (outermost frame first).
    Samples {
        pid: u32,
        samples: Vec<Sample>,
    },
    /// NVTX ranges of the collector's process, each sent once it closed.
    Ranges(Vec<Range>),
    /// What process `pid`'s threads did while on no CPU (the sampler's, from the kernel's
    /// context switches), each sent once the thread was back on a CPU. One with no states
    /// opens a process's: its switches are recorded, so time not covered was on a CPU.
    States {
        pid: u32,
        states: Vec<ThreadState>,
    },
    /// What gaptop adds to a CUDA call on the machine that recorded (recordings only).
    Cost(Cost),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// A frame's length is zero or over [`MAX_FRAME`].
    BadLength(usize),
    UnknownTag(u8),
    /// The payload does not match its tag's layout.
    BadPayload(&'static str),
    BadMagic,
    WrongVersion(u32),
    /// The first frame of a stream was not a Hello (or a sampler's opening frame).
    NoHello,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::BadLength(n) => write!(f, "frame length {n} out of range"),
            WireError::UnknownTag(t) => write!(f, "unknown frame tag {t}"),
            WireError::BadPayload(what) => write!(f, "malformed {what} frame"),
            WireError::BadMagic => write!(f, "not a gaptop stream (bad magic)"),
            WireError::WrongVersion(v) => {
                write!(f, "protocol version {v}, this gaptop speaks {VERSION}")
            }
            WireError::NoHello => write!(f, "stream did not start with a hello frame"),
        }
    }
}

impl std::error::Error for WireError {}

// ---------------------------------------------------------------- encoding

fn begin(out: &mut Vec<u8>, tag: u8) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, tag]);
    at
}

fn finish(out: &mut [u8], at: usize) {
    let len = (out.len() - at - 4) as u32;
    out[at..at + 4].copy_from_slice(&len.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let b = s.as_bytes();
    let n = b.len().min(u16::MAX as usize);
    out.extend_from_slice(&(n as u16).to_le_bytes());
    out.extend_from_slice(&b[..n]);
}

pub fn encode_hello(out: &mut Vec<u8>, h: &Hello) {
    let at = begin(out, TAG_HELLO);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&h.version.to_le_bytes());
    out.extend_from_slice(&h.pid.to_le_bytes());
    out.extend_from_slice(&h.rank.to_le_bytes());
    put_str(out, &h.label);
    finish(out, at);
}

pub fn encode_name(out: &mut Vec<u8>, id: u32, text: &str) {
    let at = begin(out, TAG_NAME);
    out.extend_from_slice(&id.to_le_bytes());
    put_str(out, text);
    finish(out, at);
}

pub fn encode_stack(out: &mut Vec<u8>, id: u32, parent: u32, frame: u32) {
    let at = begin(out, TAG_STACK);
    out.extend_from_slice(&id.to_le_bytes());
    out.extend_from_slice(&parent.to_le_bytes());
    out.extend_from_slice(&frame.to_le_bytes());
    finish(out, at);
}

pub fn put_op(out: &mut Vec<u8>, o: &Op) {
    out.extend_from_slice(&o.start.to_le_bytes());
    out.extend_from_slice(&o.end.to_le_bytes());
    out.extend_from_slice(&o.corr.to_le_bytes());
    out.extend_from_slice(&o.name.to_le_bytes());
    out.extend_from_slice(&o.stream.to_le_bytes());
    out.extend_from_slice(&o.graph.to_le_bytes());
    out.extend_from_slice(&o.device.to_le_bytes());
    out.push(o.kind);
    out.push(o.flags);
}

pub fn put_api(out: &mut Vec<u8>, a: &Api) {
    out.extend_from_slice(&a.start.to_le_bytes());
    out.extend_from_slice(&a.end.to_le_bytes());
    out.extend_from_slice(&a.corr.to_le_bytes());
    out.extend_from_slice(&a.tid.to_le_bytes());
    out.extend_from_slice(&a.name.to_le_bytes());
    out.extend_from_slice(&a.stack.to_le_bytes());
    out.extend_from_slice(&a.outer_corr.to_le_bytes());
    out.push(a.kind);
    out.extend_from_slice(&[0, 0, 0]);
}

pub fn put_range(out: &mut Vec<u8>, r: &Range) {
    out.extend_from_slice(&r.start.to_le_bytes());
    out.extend_from_slice(&r.end.to_le_bytes());
    out.extend_from_slice(&r.tid.to_le_bytes());
    out.extend_from_slice(&r.name.to_le_bytes());
    out.extend_from_slice(&r.domain.to_le_bytes());
}

pub fn encode_ranges(out: &mut Vec<u8>, ranges: &[Range]) {
    let at = begin(out, TAG_RANGES);
    for r in ranges {
        put_range(out, r);
    }
    finish(out, at);
}

pub fn encode_ops(out: &mut Vec<u8>, ops: &[Op]) {
    let at = begin(out, TAG_OPS);
    for o in ops {
        put_op(out, o);
    }
    finish(out, at);
}

pub fn encode_apis(out: &mut Vec<u8>, apis: &[Api]) {
    let at = begin(out, TAG_APIS);
    for a in apis {
        put_api(out, a);
    }
    finish(out, at);
}

pub fn encode_stats(out: &mut Vec<u8>, s: &Stats) {
    let at = begin(out, TAG_STATS);
    out.extend_from_slice(&s.collector_dropped.to_le_bytes());
    out.extend_from_slice(&s.cupti_dropped.to_le_bytes());
    out.extend_from_slice(&s.sent.to_le_bytes());
    out.extend_from_slice(&s.lag_ns.to_le_bytes());
    finish(out, at);
}

pub fn encode_bye(out: &mut Vec<u8>, reason: u8) {
    let at = begin(out, TAG_BYE);
    out.push(reason);
    finish(out, at);
}

/// Encodes any frame (used by recordings and tests; the collector uses the typed encoders).
pub fn encode(out: &mut Vec<u8>, f: &Frame) {
    match f {
        Frame::Hello(h) => encode_hello(out, h),
        Frame::Name { id, text } => encode_name(out, *id, text),
        Frame::Stack { id, parent, frame } => encode_stack(out, *id, *parent, *frame),
        Frame::Ops(ops) => encode_ops(out, ops),
        Frame::Apis(apis) => encode_apis(out, apis),
        Frame::Stats(s) => encode_stats(out, s),
        Frame::Bye { reason } => encode_bye(out, *reason),
        Frame::Sampler { period_ns } => encode_sampler(out, *period_ns),
        Frame::Samples { pid, samples } => encode_samples(out, *pid, samples),
        Frame::Ranges(r) => encode_ranges(out, r),
        Frame::States { pid, states } => encode_states(out, *pid, states),
        Frame::Cost(c) => encode_cost(out, c),
    }
}

// ---------------------------------------------------------------- decoding

struct Cur<'a> {
    b: &'a [u8],
    what: &'static str,
}

impl<'a> Cur<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.b.len() < n {
            return Err(WireError::BadPayload(self.what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn str(&mut self) -> Result<String, WireError> {
        let n = self.u16()? as usize;
        let b = self.take(n)?;
        Ok(String::from_utf8_lossy(b).into_owned())
    }
    fn done(&self) -> Result<(), WireError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(WireError::BadPayload(self.what))
        }
    }
}

/// Decodes one frame's tag and payload (without the length prefix).
pub fn decode_payload(tag: u8, payload: &[u8]) -> Result<Frame, WireError> {
    let what = match tag {
        TAG_HELLO => "hello",
        TAG_NAME => "name",
        TAG_STACK => "stack",
        TAG_OPS => "ops",
        TAG_APIS => "apis",
        TAG_STATS => "stats",
        TAG_BYE => "bye",
        TAG_SAMPLER => "sampler",
        TAG_SAMPLES => "samples",
        TAG_RANGES => "ranges",
        TAG_STATES => "states",
        TAG_COST => "cost",
        t => return Err(WireError::UnknownTag(t)),
    };
    let mut c = Cur { b: payload, what };
    let f = match tag {
        TAG_HELLO => {
            if c.take(8).map_err(|_| WireError::BadMagic)? != MAGIC {
                return Err(WireError::BadMagic);
            }
            let version = c.u32()?;
            if version != VERSION {
                return Err(WireError::WrongVersion(version));
            }
            let pid = c.u32()?;
            let rank = c.u32()? as i32;
            let label = c.str()?;
            Frame::Hello(Hello {
                version,
                pid,
                rank,
                label,
            })
        }
        TAG_NAME => Frame::Name {
            id: c.u32()?,
            text: c.str()?,
        },
        TAG_STACK => Frame::Stack {
            id: c.u32()?,
            parent: c.u32()?,
            frame: c.u32()?,
        },
        TAG_OPS => {
            if !payload.len().is_multiple_of(OP_SIZE) {
                return Err(WireError::BadPayload(what));
            }
            let mut v = Vec::with_capacity(payload.len() / OP_SIZE);
            while !c.b.is_empty() {
                v.push(Op {
                    start: c.u64()?,
                    end: c.u64()?,
                    corr: c.u32()?,
                    name: c.u32()?,
                    stream: c.u32()?,
                    graph: c.u32()?,
                    device: c.u16()?,
                    kind: c.u8()?,
                    flags: c.u8()?,
                });
            }
            Frame::Ops(v)
        }
        TAG_APIS => {
            if !payload.len().is_multiple_of(API_SIZE) {
                return Err(WireError::BadPayload(what));
            }
            let mut v = Vec::with_capacity(payload.len() / API_SIZE);
            while !c.b.is_empty() {
                let a = Api {
                    start: c.u64()?,
                    end: c.u64()?,
                    corr: c.u32()?,
                    tid: c.u32()?,
                    name: c.u32()?,
                    stack: c.u32()?,
                    outer_corr: c.u32()?,
                    kind: c.u8()?,
                };
                c.take(3)?;
                v.push(a);
            }
            Frame::Apis(v)
        }
        TAG_STATS => Frame::Stats(Stats {
            collector_dropped: c.u64()?,
            cupti_dropped: c.u64()?,
            sent: c.u64()?,
            lag_ns: if c.b.is_empty() { 0 } else { c.u64()? },
        }),
        TAG_BYE => Frame::Bye { reason: c.u8()? },
        TAG_SAMPLER => Frame::Sampler {
            period_ns: c.u32()?,
        },
        TAG_SAMPLES => sampler::decode_samples(&mut c)?,
        TAG_RANGES => {
            if !payload.len().is_multiple_of(RANGE_SIZE) {
                return Err(WireError::BadPayload(what));
            }
            let mut v = Vec::with_capacity(payload.len() / RANGE_SIZE);
            while !c.b.is_empty() {
                v.push(Range {
                    start: c.u64()?,
                    end: c.u64()?,
                    tid: c.u32()?,
                    name: c.u32()?,
                    domain: c.u32()?,
                });
            }
            Frame::Ranges(v)
        }
        TAG_STATES => sampler::decode_states(&mut c)?,
        TAG_COST => cost::decode_cost(&mut c)?,
        _ => unreachable!("tag checked above"),
    };
    c.done()?;
    Ok(f)
}

/// Incremental frame decoder: feed it bytes as they arrive, take frames out.
///
/// It enforces the stream grammar: the first frame must be a valid Hello.
#[derive(Default)]
pub struct Decoder {
    buf: Vec<u8>,
    pos: usize,
    saw_hello: bool,
    /// Total bytes fed.
    pub fed: u64,
}

impl Decoder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos == self.buf.len() {
            self.buf.clear();
            self.pos = 0;
        } else if self.pos > (1 << 20) {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
        self.fed += bytes.len() as u64;
    }

    /// Bytes fed but not yet decoded (a partial frame).
    pub fn pending(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// The next complete frame, `Ok(None)` when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<Frame>, WireError> {
        let rest = &self.buf[self.pos..];
        if rest.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if len == 0 || len > MAX_FRAME {
            return Err(WireError::BadLength(len));
        }
        if rest.len() < 4 + len {
            return Ok(None);
        }
        let tag = rest[4];
        let f = decode_payload(tag, &rest[5..4 + len])?;
        self.pos += 4 + len;
        if !self.saw_hello {
            if !matches!(f, Frame::Hello(_) | Frame::Sampler { .. }) {
                return Err(WireError::NoHello);
            }
            self.saw_hello = true;
        }
        Ok(Some(f))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Recordings made before the lag field existed still decode (lag unknown).
    #[test]
    fn stats_without_lag_decode_as_unknown_lag() {
        let mut p = Vec::new();
        for v in [7u64, 8, 9] {
            p.extend_from_slice(&v.to_le_bytes());
        }
        assert_eq!(
            decode_payload(TAG_STATS, &p).unwrap(),
            Frame::Stats(Stats {
                collector_dropped: 7,
                cupti_dropped: 8,
                sent: 9,
                lag_ns: 0
            })
        );
        p.extend_from_slice(&[1, 2, 3]);
        assert!(
            decode_payload(TAG_STATS, &p).is_err(),
            "a torn lag field is an error"
        );
    }

    fn hello() -> Frame {
        Frame::Hello(Hello::new(42, 1, "python3 train.py"))
    }

    #[test]
    fn classifies_api_names() {
        assert_eq!(api_kind("cudaLaunchKernel_v7000"), API_LAUNCH);
        assert_eq!(api_kind("cudaLaunchKernel_ptsz_v7000"), API_LAUNCH);
        assert_eq!(api_kind("cuLaunchKernelEx"), API_LAUNCH);
        assert_eq!(api_kind("cudaGraphLaunch_v10000"), API_GRAPH_LAUNCH);
        assert_eq!(api_kind("cudaStreamSynchronize_v3020"), API_SYNC);
        assert_eq!(api_kind("cudaMemcpy"), API_SYNC);
        assert_eq!(api_kind("cudaMemcpyAsync_v3020"), API_COPY);
        assert_eq!(api_kind("cudaStreamWaitEvent"), API_WAIT);
        assert_eq!(api_kind("cudaGetDevice_v3020"), API_OTHER);
        assert_eq!(api_kind("cudaMalloc"), API_OTHER);
        assert_eq!(api_kind("cuCtxGetCurrent"), API_OTHER);
    }

    fn sample() -> Vec<Frame> {
        vec![
            hello(),
            Frame::Name {
                id: 1,
                text: "model.py(3): forward".into(),
            },
            Frame::Stack {
                id: 1,
                parent: 0,
                frame: 1,
            },
            Frame::Ops(vec![Op {
                start: 10,
                end: 20,
                corr: 5,
                name: 1,
                stream: 7,
                graph: 0,
                device: 0,
                kind: OP_KERNEL,
                flags: 0,
            }]),
            Frame::Apis(vec![Api {
                start: 1,
                end: 9,
                corr: 5,
                tid: 3,
                name: 1,
                stack: 1,
                outer_corr: 0,
                kind: API_LAUNCH,
            }]),
            Frame::Stats(Stats {
                collector_dropped: 1,
                cupti_dropped: 2,
                sent: 3,
                lag_ns: 4,
            }),
            Frame::Ranges(vec![
                Range {
                    start: 2,
                    end: 30,
                    tid: 3,
                    name: 1,
                    domain: 0,
                },
                Range {
                    start: u64::MAX - 1,
                    end: u64::MAX,
                    tid: u32::MAX,
                    name: 7,
                    domain: 9,
                },
            ]),
            Frame::States {
                pid: 42,
                states: vec![
                    ThreadState {
                        tid: 43,
                        kind: STATE_GIL,
                        start: 10,
                        end: u64::MAX,
                        call: 1,
                        stack: 2,
                        holder: 44,
                        holder_name: 3,
                        holder_stack: u32::MAX,
                    },
                    ThreadState::default(),
                ],
            },
            Frame::States {
                pid: 1,
                states: Vec::new(),
            },
            Frame::Cost(Cost {
                launch_bare_ns: 4100,
                launch_ns: 5700,
                sync_bare_ns: 900,
                sync_ns: u32::MAX,
                note: "probe: 15 rounds of 2000".into(),
            }),
            Frame::Cost(Cost::default()),
            Frame::Bye { reason: 0 },
        ]
    }

    #[test]
    fn round_trip_byte_by_byte() {
        let mut bytes = Vec::new();
        for f in sample() {
            encode(&mut bytes, &f);
        }
        let mut d = Decoder::new();
        let mut got = Vec::new();
        for b in &bytes {
            d.feed(std::slice::from_ref(b));
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got, sample());
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn rejects_garbage_and_lies() {
        let mut d = Decoder::new();
        d.feed(&[0xff, 0xff, 0xff, 0x7f, 1]);
        assert!(matches!(d.next_frame(), Err(WireError::BadLength(_))));

        let mut d = Decoder::new();
        let mut b = Vec::new();
        encode(&mut b, &Frame::Bye { reason: 0 });
        d.feed(&b);
        assert_eq!(d.next_frame(), Err(WireError::NoHello));

        let mut b = Vec::new();
        encode(&mut b, &hello());
        b[9 + 4] = 99; // version field
        let mut d = Decoder::new();
        d.feed(&b);
        assert_eq!(d.next_frame(), Err(WireError::WrongVersion(99)));

        let mut b = Vec::new();
        encode(&mut b, &hello());
        b[5] = b'X';
        let mut d = Decoder::new();
        d.feed(&b);
        assert_eq!(d.next_frame(), Err(WireError::BadMagic));

        // An ops frame whose payload is not a whole number of records.
        assert_eq!(
            decode_payload(TAG_OPS, &[0u8; OP_SIZE + 1]),
            Err(WireError::BadPayload("ops"))
        );
        assert_eq!(decode_payload(77, &[]), Err(WireError::UnknownTag(77)));
        assert_eq!(
            decode_payload(TAG_RANGES, &[0u8; 2 * RANGE_SIZE - 1]),
            Err(WireError::BadPayload("ranges"))
        );
        assert_eq!(
            decode_payload(TAG_STATES, &[0u8; 4 + STATE_SIZE + 1]),
            Err(WireError::BadPayload("states"))
        );
        // A stack frame with trailing bytes.
        assert_eq!(
            decode_payload(TAG_STACK, &[0u8; 13]),
            Err(WireError::BadPayload("stack"))
        );
    }

    /// The sampler's stream: it opens with its own frame, then names, stacks and samples.
    #[test]
    fn a_sampler_stream_round_trips() {
        let frames = vec![
            Frame::Sampler {
                period_ns: 2_000_000,
            },
            Frame::Name {
                id: 1,
                text: "planted_spin [spin]".into(),
            },
            Frame::Stack {
                id: 1,
                parent: 0,
                frame: 1,
            },
            Frame::Samples {
                pid: 42,
                samples: vec![
                    Sample {
                        tid: 43,
                        time: 1_000,
                        stack: 1,
                    },
                    Sample {
                        tid: 44,
                        time: u64::MAX,
                        stack: 0,
                    },
                ],
            },
        ];
        let mut bytes = Vec::new();
        for f in &frames {
            encode(&mut bytes, f);
        }
        let mut d = Decoder::new();
        d.feed(&bytes);
        let mut got = Vec::new();
        while let Some(f) = d.next_frame().unwrap() {
            got.push(f);
        }
        assert_eq!(got, frames);
        assert_eq!(
            decode_payload(TAG_SAMPLES, &[0u8; 4 + SAMPLE_SIZE - 1]),
            Err(WireError::BadPayload("samples"))
        );
    }

    #[test]
    fn truncated_frame_waits_for_more() {
        let mut b = Vec::new();
        encode(&mut b, &hello());
        let mut d = Decoder::new();
        d.feed(&b[..b.len() - 1]);
        assert_eq!(d.next_frame(), Ok(None));
        assert_eq!(d.pending(), b.len() - 1);
        d.feed(&b[b.len() - 1..]);
        assert_eq!(d.next_frame(), Ok(Some(hello())));
    }
}

//! The frames of the viewer's CPU sampler's stream: its opening (`Sampler`), its samples and
//! what its threads did off their CPU (`States`).

use super::{
    begin, finish, Cur, Frame, WireError, SAMPLE_SIZE, TAG_SAMPLER, TAG_SAMPLES, TAG_STATES,
};

/// One CPU sample: the thread, when (ns, CLOCK_REALTIME, as CUPTI's timestamps) and the
/// stack id (on the sampler's stream) of its native frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sample {
    pub tid: u32,
    pub time: u64,
    pub stack: u32,
}

/// Bytes of one [`ThreadState`] on the wire.
pub const STATE_SIZE: usize = 44;

/// What a thread off its CPU did ([`ThreadState::kind`]): asleep in the kernel (a system call,
/// a page fault), still runnable (preempted: it wanted a CPU), or asleep waiting for the GIL.
pub const STATE_BLOCKED: u8 = 1;
pub const STATE_RUNNABLE: u8 = 2;
pub const STATE_GIL: u8 = 3;

/// A stretch of time thread `tid` spent off its CPU ([`STATE_BLOCKED`], [`STATE_RUNNABLE`],
/// [`STATE_GIL`]), ns in CLOCK_REALTIME. `call` names the system call it was asleep in, `stack`
/// its Python stack meanwhile, `holder` (0 for none) the thread that held the GIL, with
/// its name and its stack: name and stack ids of the sampler's stream, 0 where not known.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadState {
    pub tid: u32,
    pub kind: u8,
    pub start: u64,
    pub end: u64,
    pub call: u32,
    pub stack: u32,
    pub holder: u32,
    pub holder_name: u32,
    pub holder_stack: u32,
}

pub fn encode_sampler(out: &mut Vec<u8>, period_ns: u32) {
    let at = begin(out, TAG_SAMPLER);
    out.extend_from_slice(&period_ns.to_le_bytes());
    finish(out, at);
}

pub fn encode_samples(out: &mut Vec<u8>, pid: u32, samples: &[Sample]) {
    let at = begin(out, TAG_SAMPLES);
    out.extend_from_slice(&pid.to_le_bytes());
    for x in samples {
        out.extend_from_slice(&x.tid.to_le_bytes());
        out.extend_from_slice(&x.time.to_le_bytes());
        out.extend_from_slice(&x.stack.to_le_bytes());
    }
    finish(out, at);
}

pub fn encode_states(out: &mut Vec<u8>, pid: u32, states: &[ThreadState]) {
    let at = begin(out, TAG_STATES);
    out.extend_from_slice(&pid.to_le_bytes());
    for x in states {
        out.extend_from_slice(&x.tid.to_le_bytes());
        out.extend_from_slice(&[x.kind, 0, 0, 0]);
        out.extend_from_slice(&x.start.to_le_bytes());
        out.extend_from_slice(&x.end.to_le_bytes());
        for v in [x.call, x.stack, x.holder, x.holder_name, x.holder_stack] {
            out.extend_from_slice(&v.to_le_bytes());
        }
    }
    finish(out, at);
}

/// A Samples frame's payload.
pub(crate) fn decode_samples(c: &mut Cur<'_>) -> Result<Frame, WireError> {
    let pid = c.u32()?;
    if !c.b.len().is_multiple_of(SAMPLE_SIZE) {
        return Err(WireError::BadPayload(c.what));
    }
    let mut v = Vec::with_capacity(c.b.len() / SAMPLE_SIZE);
    while !c.b.is_empty() {
        v.push(Sample {
            tid: c.u32()?,
            time: c.u64()?,
            stack: c.u32()?,
        });
    }
    Ok(Frame::Samples { pid, samples: v })
}

/// A States frame's payload.
pub(crate) fn decode_states(c: &mut Cur<'_>) -> Result<Frame, WireError> {
    let pid = c.u32()?;
    if !c.b.len().is_multiple_of(STATE_SIZE) {
        return Err(WireError::BadPayload(c.what));
    }
    let mut v = Vec::with_capacity(c.b.len() / STATE_SIZE);
    while !c.b.is_empty() {
        let tid = c.u32()?;
        let kind = c.u32()? as u8;
        v.push(ThreadState {
            tid,
            kind,
            start: c.u64()?,
            end: c.u64()?,
            call: c.u32()?,
            stack: c.u32()?,
            holder: c.u32()?,
            holder_name: c.u32()?,
            holder_stack: c.u32()?,
        });
    }
    Ok(Frame::States { pid, states: v })
}

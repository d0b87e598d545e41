//! The recorder's `Cost` frame: what gaptop adds to a CUDA call on the machine that recorded.

use crate::{begin, finish, put_str, Cur, Frame, WireError, TAG_COST};

/// What gaptop adds to the program's CUDA calls on the machine that recorded: `gaptop-probe`'s
/// time a call, run before the program bare and with the collector injected (a driver launch
/// of an empty kernel: CUPTI's record and two callbacks; a sync of an idle stream: two
/// callbacks). A recording's, written by the recorder on its own connection
/// ([`COST_CONN`]); all zero where it could not be measured, `note` saying why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cost {
    pub launch_bare_ns: u32,
    pub launch_ns: u32,
    pub sync_bare_ns: u32,
    pub sync_ns: u32,
    /// How it was measured, or why it was not.
    pub note: String,
}

/// The connection a recording's [`Cost`] frame is written on: the recorder's, no collector's.
pub const COST_CONN: u32 = u32::MAX;

pub fn encode_cost(out: &mut Vec<u8>, c: &Cost) {
    let at = begin(out, TAG_COST);
    for v in [c.launch_bare_ns, c.launch_ns, c.sync_bare_ns, c.sync_ns] {
        out.extend_from_slice(&v.to_le_bytes());
    }
    put_str(out, &c.note);
    finish(out, at);
}

pub(crate) fn decode_cost(c: &mut Cur) -> Result<Frame, WireError> {
    Ok(Frame::Cost(Cost {
        launch_bare_ns: c.u32()?,
        launch_ns: c.u32()?,
        sync_bare_ns: c.u32()?,
        sync_ns: c.u32()?,
        note: c.str()?,
    }))
}

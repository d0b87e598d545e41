//! gaptop's own cost taken out of the model: what the collector added to each CUDA call of the
//! recorded run (CUPTI's record of the op it enqueued, and the callbacks around the call), as
//! the recording's probe measured it on the machine that recorded (`gaptop_wire::Cost`). The
//! estimates are then of the program as it runs without gaptop: a fix that removes launches
//! removes their bare cost, not what gaptop added to them.

use serde::Serialize;

use super::model::{op_of_calls, Model, NONE};
use crate::model::records::{ApiKind, Ns};

/// The probe's figures as costs a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct PerCall {
    /// One callback (CUPTI's dispatch and the collector's work in it): half of what the
    /// collector added to a sync of an idle stream, which has two (its entry and exit).
    pub callback_ns: Ns,
    /// CUPTI's record of an op: what it added to a launch, less its two callbacks.
    pub record_ns: Ns,
}

impl PerCall {
    /// None where the probe measured nothing (its note says why).
    pub fn of(c: &gaptop_wire::Cost) -> Option<PerCall> {
        if c.launch_bare_ns == 0 || c.launch_ns == 0 || c.sync_bare_ns == 0 || c.sync_ns == 0 {
            return None;
        }
        let callback_ns = (c.sync_ns as Ns - c.sync_bare_ns as Ns).max(0) / 2;
        let record_ns = (c.launch_ns as Ns - c.launch_bare_ns as Ns - 2 * callback_ns).max(0);
        Some(PerCall {
            callback_ns,
            record_ns,
        })
    }

    /// What gaptop adds to a call: a runtime call (`cuda…`) has four callbacks, its own and
    /// the driver call it makes; a driver call two; and an op it enqueued (a kernel, a copy)
    /// CUPTI's record.
    pub fn of_call(self, runtime: bool, enqueued: bool) -> Ns {
        let callbacks = if runtime { 4 } else { 2 };
        callbacks * self.callback_ns + if enqueued { self.record_ns } else { 0 }
    }
}

/// Takes gaptop's cost out of every call of `m`: from its own time, and what its own time
/// cannot give from the CPU time before it; a sync that waited for an op also returns after
/// it sooner by its exit callbacks' half (its entry callbacks ran while the GPU worked). A
/// graph launch is taken as one call with one record, whatever its nodes.
pub fn without_profiler(m: &mut Model, cost: PerCall) {
    let op_of = op_of_calls(m);
    for (c, call) in m.calls.iter_mut().enumerate() {
        let enqueued = op_of[c] != NONE
            && matches!(
                call.kind,
                ApiKind::Launch | ApiKind::GraphLaunch | ApiKind::Copy
            );
        let mut left = cost.of_call(call.runtime, enqueued);
        if call.wait != NONE {
            call.tail -= call.tail.min(left / 2);
        }
        let own = call.own.min(left);
        call.own -= own;
        left -= own;
        call.seg -= call.seg.min(left);
    }
}

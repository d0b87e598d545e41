//! The replay's model: a block of the capture as calls by thread, ops by stream and
//! collectives (see the parent module).

use crate::model::records::{ApiKind, NameId, Ns, StackId};

/// No index.
pub const NONE: u32 = u32::MAX;

/// A CUDA call of a launching thread.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// Its thread ([`Model::threads`]).
    pub thread: u32,
    /// Measured start and end (for anchors and the first call of a thread, which starts when it
    /// was measured to).
    pub start: Ns,
    pub end: Ns,
    /// CPU time between the thread's previous call's end and this call's start.
    pub seg: Ns,
    /// The call's own time.
    pub own: Ns,
    /// The op it waited for ([`NONE`]: it did not wait), and its time after that op's end.
    pub wait: u32,
    pub tail: Ns,
    pub kind: ApiKind,
    /// A CUDA runtime call (`cuda…`), which makes a driver call in turn; else a driver call.
    pub runtime: bool,
    /// Its site, an index into [`Model::sites`] ([`NONE`]: none).
    pub site: u32,
    /// A call of another thread of its process that it followed: after a long idle, the
    /// thread started again this long after that call ended (a thread woken by another, as
    /// autograd's by `backward()`); [`NONE`]: none.
    pub after: u32,
    pub after_gap: Ns,
    /// Which call of a Python function made it: on a thread with CPU spans (a trace), the
    /// innermost Python span around it; else its stack (a new call returns to its first line).
    pub inv: u32,
    /// A backward call: the site of the forward op that made the autograd node it runs,
    /// where the trace ties them (Kineto's sequence numbers, [`Store::forward_of`]) and that
    /// site has calls in the block; [`NONE`] otherwise.
    ///
    /// [`Store::forward_of`]: crate::model::store::Store::forward_of
    pub fwd: u32,
}

/// A GPU op.
#[derive(Clone, Copy, Debug)]
pub struct Op {
    /// Its lane sequence ([`Model::lanes`]).
    pub lane: u32,
    pub start: Ns,
    pub end: Ns,
    /// Its launch call ([`NONE`]: launched outside the block, or unknown).
    pub call: u32,
    /// Launch latency: from its call's start to the earliest it can start.
    pub lat: Ns,
    /// Spacing after the previous op on its stream.
    pub gap: Ns,
    /// An op of another stream it waited for, and the spacing after that op's end.
    pub dep: u32,
    pub dep_gap: Ns,
    /// Its duration; for a collective's kernel, its time after the last rank arrived.
    pub dur: Ns,
    /// Earliest start fixed by work outside the block (`Ns::MIN`: none).
    pub floor: Ns,
    /// Its collective ([`NONE`]: none).
    pub group: u32,
    /// Its name.
    pub name: NameId,
    /// How long its device had nothing running before it started (the gap charged to it).
    pub idle_before: Ns,
}

/// A launching thread's calls.
#[derive(Clone, Debug)]
pub struct Thread {
    pub proc: u32,
    pub tid: u32,
    /// Its calls, `calls[first..last]`.
    pub first: u32,
    pub last: u32,
    /// Its calls' `inv` are Python spans (a trace's), not stacks.
    pub spans: bool,
}

/// A stream's ops.
#[derive(Clone, Debug)]
pub struct LaneSeq {
    /// The store's lane.
    pub lane: usize,
    pub first: u32,
    pub last: u32,
    /// The measured end of the op before the block on this stream (a constant).
    pub before_end: Option<Ns>,
}

/// The capture as a graph of dependencies, over a block of its steps.
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub calls: Vec<Call>,
    pub ops: Vec<Op>,
    pub threads: Vec<Thread>,
    pub lanes: Vec<LaneSeq>,
    /// Each collective's member ops.
    pub groups: Vec<Vec<u32>>,
    /// The site keys of calls (advice's `site_key_of`).
    pub sites: Vec<String>,
    /// A stack and API of each site's calls, to name it.
    pub site_calls: Vec<(StackId, NameId)>,
    /// The stack and API of each site's first call that waited for the GPU (a sync, a
    /// blocking copy), to name its syncs; None where none did.
    pub site_syncs: Vec<Option<(StackId, NameId)>>,
    /// The block: its first and last time.
    pub lo: Ns,
    pub hi: Ns,
}

impl Model {
    /// The thread of a call and the lane of an op.
    pub fn thread_of(&self, call: u32) -> &Thread {
        &self.threads[self.calls[call as usize].thread as usize]
    }
}

/// The op each call launched (its last, for a graph launch's), [`NONE`] for none.
pub fn op_of_calls(m: &Model) -> Vec<u32> {
    let mut op_of = vec![NONE; m.calls.len()];
    for (j, o) in m.ops.iter().enumerate() {
        if o.call != NONE {
            op_of[o.call as usize] = j as u32;
        }
    }
    op_of
}

//! The collector's shared state: one `Collector`, built whole by `setup::start` (or offline for
//! the self-tests and unit tests), and its parts. The limits it keeps are in `limits`.
//!
//! Locks, and what nests in what (no other nesting exists; `defs` is always innermost):
//! - `stacks` -> `names.defs` (a new stack names its frames), taken in API callbacks;
//! - `buffers.kernel_names` -> `buffers.dump`, `buffers.markers` -> `names.defs`, on CUPTI's
//!   completion thread;
//! - `out.threads`, each thread's own buffer, `out.queue`, `buffers.pool`, `out.done`: alone;
//! - `link` and `subscriber`: alone, and never taken by a CUPTI callback or a program thread
//!   (only by the sender, set-up and the control thread), so CUPTI calls may be made under them.
//!
//! No CUPTI call that can call back into gaptop is made with any other of them held (see
//! `cupti`).

use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::Instant;

use gaptop_wire as w;

use crate::cupti::Subscriber;
use crate::limits::POOL_KEEP;
use crate::native::{Module, NativeMap};
use crate::session::Session;
use crate::switches::Switches;

// ------------------------------------------------------------------ parts

/// Encoded records waiting for the sender: wire tag (ops or API calls), records, how many, and
/// the earliest end time among them (for the lag report).
pub(crate) struct Batch {
    pub(crate) tag: u8,
    pub(crate) bytes: Vec<u8>,
    pub(crate) records: usize,
    pub(crate) oldest_end: u64,
}

#[derive(Default)]
pub(crate) struct Queue {
    pub(crate) batches: VecDeque<Batch>,
    pub(crate) bytes: usize,
    pub(crate) free: Vec<Vec<u8>>,
}

/// Name ids, and the name and stack definitions not yet sent; the sender always sends them
/// before the records taken with them.
pub(crate) struct Names {
    next: AtomicU32,
    pub(crate) defs: Mutex<Vec<u8>>,
}

impl Names {
    /// Ids from `first` on, nothing defined yet.
    pub(crate) fn starting_at(first: u32) -> Names {
        Names {
            next: AtomicU32::new(first),
            defs: Mutex::new(Vec::new()),
        }
    }

    /// A new name id, defined as `text`. Takes `defs`, innermost of the locks.
    pub(crate) fn name(&self, text: &str) -> u32 {
        let id = self.next.fetch_add(1, Relaxed);
        let mut d = self.defs.lock().unwrap_or_else(|e| e.into_inner());
        w::encode_name(&mut d, id, text);
        id
    }

    /// The definitions written so far, leaving none.
    pub(crate) fn take_defs(&self) -> Vec<u8> {
        std::mem::take(&mut *self.defs.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// Names of CUPTI's synchronization types, in `CUpti_ActivitySynchronizationType` order.
pub(crate) const SYNC_NAMES: [&str; 5] = [
    "Synchronize",
    "Event synchronize",
    "Stream wait event",
    "Stream synchronize",
    "Context synchronize",
];

/// Name ids given at start (or, dormant, at the first attach), fixed afterwards: the API calls
/// gaptop follows, copies, memsets and synchronizations.
#[derive(Default)]
pub(crate) struct CallNames {
    /// Per domain (driver = 0, runtime = 1): cbid -> (name id, wire kind), name id 0 = off.
    pub(crate) api: [Vec<(u32, u8)>; 2],
    /// By CUPTI memcpy kind.
    pub(crate) copies: [u32; 11],
    pub(crate) memset: u32,
    /// By CUPTI synchronization type.
    pub(crate) syncs: [u32; 5],
}

/// What a collector without its call names yet (dormant) names: nothing.
static NO_CALLS: CallNames = CallNames {
    api: [Vec::new(), Vec::new()],
    copies: [0; 11],
    memset: 0,
    syncs: [0; 5],
};

/// The viewer's connection, and, for a collector that can be attached to, every definition
/// (name, stack) sent so far, sent again at the start of each attach so that a viewer
/// attached mid-run can name what it gets. Taken only by the sender (to read `fd`, and keep
/// what it sends in `history`) and the control thread (to install a connection); the sender
/// alone closes `fd`.
pub(crate) struct Link {
    /// The viewer's socket (-1: none).
    pub(crate) fd: c_int,
    /// Every definition sent so far (None: not kept, the collector cannot be attached to).
    pub(crate) history: Option<Vec<u8>>,
    /// The control thread asks the sender to send what is left, say bye and close `fd`.
    pub(crate) closing: bool,
}

/// CUPTI's activity buffers, and what the completion thread keeps while decoding them.
pub(crate) struct Buffers {
    /// Free activity buffers for reuse (addresses), at most POOL_KEEP. Taken by
    /// `buffer_requested`, which CUPTI runs on whichever thread needs a buffer (a launching
    /// one too): held only to push or pop.
    pub(crate) pool: Mutex<Vec<usize>>,
    /// CUPTI was told its buffers arrive zeroed (CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER),
    /// so it does not clear each new buffer itself on the thread that needs it. Set before
    /// activity is enabled (Relaxed: the enable call orders it before the buffer requests).
    pub(crate) zeroed: AtomicBool,
    /// Buffers handed to CUPTI and not yet back (at most MAX_BUFFERS).
    pub(crate) out: AtomicUsize,
    /// Milliseconds (since start) when a buffer last completed.
    pub(crate) last_completed_ms: AtomicU64,
    /// Completions running now (on any thread): a detach waits for them before collection
    /// goes off, so what they decode is queued, not dropped.
    pub(crate) completing: AtomicUsize,
    /// Raw CUPTI buffers written here for replay tests (GAPTOP_DUMP), with a byte budget.
    pub(crate) dump: Mutex<Option<(std::fs::File, usize)>>,
    /// Kernel name ids by CUPTI's name pointer; held while a buffer is decoded.
    pub(crate) kernel_names: Mutex<HashMap<usize, u32>>,
    /// NVTX ranges whose start has been decoded and whose end not yet, and the NVTX messages
    /// named; taken under `kernel_names`, for a marker record.
    pub(crate) markers: Mutex<Markers>,
}

/// A range whose start marker was decoded: when, on which thread, its name and domain ids.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct OpenRange {
    pub(crate) start: u64,
    pub(crate) tid: u32,
    pub(crate) name: u32,
    pub(crate) domain: u32,
}

/// What decoding CUPTI's marker records keeps between records (a range's start and end may
/// come in different buffers).
#[derive(Default)]
pub(crate) struct Markers {
    /// By CUPTI's marker id.
    pub(crate) open: HashMap<u32, OpenRange>,
    /// Name ids by message (and domain name) bytes: CUPTI's pointers are not shared the way
    /// kernel names are.
    pub(crate) names: HashMap<Box<[u8]>, u32>,
    /// The name of ranges past MAX_RANGE_NAMES (0 until needed).
    pub(crate) overflow: u32,
}

/// The interned stacks and frames. Behind `Collector::stacks`, taken in API callbacks: only on
/// a miss in the thread's own cache of recent stacks, or with native frames; `names.defs` is
/// taken inside it for new stacks and frames.
#[derive(Default)]
pub(crate) struct StackCache {
    pub(crate) by_hash: HashMap<u64, u32>,
    pub(crate) nodes: HashMap<(u32, u32), u32>,
    pub(crate) frames: HashMap<(usize, i32), u32>,
    pub(crate) native: HashMap<usize, u32>,
    /// Native walks remembered per (Python stack, call site): the stack id they gave and how
    /// often the memo was used since the last walk.
    pub(crate) native_memo: HashMap<u64, (u32, u32)>,
    /// Loaded modules as last read, for naming native frames.
    pub(crate) modules: Vec<Module>,
    pub(crate) next_stack: u32,
    /// Launches that got no stack because the tables were full.
    pub(crate) full: u64,
}

/// What waits for the sender thread, and how it is woken and waited for.
#[derive(Default)]
pub(crate) struct Outbox {
    pub(crate) queue: Mutex<Queue>,
    /// Wakes the sender (a batch queued, a thread's buffer half full, exit).
    pub(crate) wake: Condvar,
    /// Each thread's API record buffer, registered at its first callback.
    pub(crate) threads: Mutex<Vec<Arc<Mutex<Vec<u8>>>>>,
    /// Set by the sender when it has sent its last (at exit).
    pub(crate) done: (Mutex<bool>, Condvar),
}

/// What the stats frames report.
#[derive(Default)]
pub(crate) struct Counts {
    /// Records gaptop dropped (full buffers or queue, collection stopped).
    pub(crate) dropped: AtomicU64,
    /// Records CUPTI dropped (no buffer in time).
    pub(crate) cupti_dropped: AtomicU64,
    pub(crate) sent: AtomicU64,
    /// Most lag (ns) seen in sends since the last stats frame.
    pub(crate) lag_ns: AtomicU64,
}

/// GAPTOP_VERBOSE: time spent inside the API callback and calls to it, and the part of it in
/// the launches' stack walks and their count, reported at exit.
#[derive(Default)]
pub(crate) struct CallbackTimes {
    /// Whether the callbacks time themselves (GAPTOP_VERBOSE).
    pub(crate) on: bool,
    pub(crate) cb_ns: AtomicU64,
    pub(crate) cb_calls: AtomicU64,
    pub(crate) walk_ns: AtomicU64,
    pub(crate) walks: AtomicU64,
}

// ------------------------------------------------------------------ the collector

/// What a collector is made of that `start` settles before it exists.
pub(crate) struct Parts {
    /// The viewer's socket (-1 offline).
    pub(crate) fd: c_int,
    pub(crate) sw: Switches,
    pub(crate) native: Option<NativeMap>,
    pub(crate) subscriber: Option<Subscriber>,
    pub(crate) names: Names,
    /// None for a dormant collector: named at its first attach.
    pub(crate) calls: Option<CallNames>,
    pub(crate) zeroed: bool,
    pub(crate) dump: Option<(std::fs::File, usize)>,
    /// A dormant collector's attach state (None: collecting from the start, for good).
    pub(crate) session: Option<Session>,
}

impl Parts {
    /// Without CUPTI or a viewer (self-tests, unit tests): the environment's switches,
    /// nothing named at start, name ids from `first_name`.
    pub(crate) fn offline(first_name: u32) -> Parts {
        Parts {
            fd: -1,
            sw: Switches::from_env(),
            native: None,
            subscriber: None,
            names: Names::starting_at(first_name),
            calls: Some(CallNames::default()),
            zeroed: false,
            dump: None,
            session: None,
        }
    }
}

pub(crate) struct Collector {
    /// The viewer's connection (see `Link`).
    pub(crate) link: Mutex<Link>,
    /// Signalled by the sender when it closed `link.fd` (a detach, or the viewer gone).
    pub(crate) link_closed: Condvar,
    /// The environment switches, read at start.
    pub(crate) sw: Switches,
    /// Native frames at launches (`gaptop run --native`), with the module map for the walk.
    pub(crate) native: Option<NativeMap>,
    /// gaptop's CUPTI subscriber (None offline, dormant, or after a detach finalized CUPTI).
    /// Changed only by set-up and the control thread.
    pub(crate) subscriber: Mutex<Option<Subscriber>>,
    /// Set once; read through `calls()`.
    pub(crate) calls: OnceLock<CallNames>,
    pub(crate) names: Names,
    pub(crate) stacks: Mutex<StackCache>,
    pub(crate) buffers: Buffers,
    pub(crate) out: Outbox,
    /// Collecting: from the start until `go_quiet` clears it for good, or, dormant, while a
    /// viewer is attached.
    pub(crate) active: AtomicBool,
    /// A dormant collector's attach state (see `session`); None when collecting from start.
    pub(crate) session: Option<Session>,
    /// Set at exit, after the last flush: the sender sends what is left and says bye.
    pub(crate) shutting_down: AtomicBool,
    pub(crate) counts: Counts,
    pub(crate) times: CallbackTimes,
    pub(crate) started: Instant,
}

impl Collector {
    pub(crate) fn new(p: Parts) -> Collector {
        let calls = OnceLock::new();
        if let Some(c) = p.calls {
            let _ = calls.set(c);
        }
        Collector {
            link: Mutex::new(Link {
                fd: p.fd,
                history: p.session.is_some().then(Vec::new),
                closing: false,
            }),
            link_closed: Condvar::new(),
            native: p.native,
            subscriber: Mutex::new(p.subscriber),
            calls,
            names: p.names,
            stacks: Mutex::new(StackCache::default()),
            buffers: Buffers {
                pool: Mutex::new(Vec::with_capacity(POOL_KEEP)),
                zeroed: AtomicBool::new(p.zeroed),
                out: AtomicUsize::new(0),
                last_completed_ms: AtomicU64::new(0),
                completing: AtomicUsize::new(0),
                dump: Mutex::new(p.dump),
                kernel_names: Mutex::new(HashMap::new()),
                markers: Mutex::new(Markers::default()),
            },
            out: Outbox::default(),
            active: AtomicBool::new(p.session.is_none()),
            session: p.session,
            shutting_down: AtomicBool::new(false),
            counts: Counts::default(),
            times: CallbackTimes {
                on: p.sw.verbose,
                ..CallbackTimes::default()
            },
            started: Instant::now(),
            sw: p.sw,
        }
    }

    /// The call names (none yet for a dormant collector never attached).
    #[inline]
    pub(crate) fn calls(&self) -> &CallNames {
        self.calls.get().unwrap_or(&NO_CALLS)
    }

    /// The viewer's connection (see `Link`).
    pub(crate) fn link(&self) -> std::sync::MutexGuard<'_, Link> {
        self.link.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn count_drop(&self, n: u64) {
        self.counts.dropped.fetch_add(n, Relaxed);
    }
}

//! Backward calls tied to their forward function, where the capture has no ties (see
//! [`mirror_backward`]).

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::model::{Call, Model, NONE};
use crate::model::records::{ApiKind, NameId, StackId};
use crate::model::store::Store;

/// Fewest forward launches a backward run is laid against: a thread woken after a handful of
/// launches (a worker handed one copy) is not running a backward pass.
const MIN_FORWARD: usize = 8;

/// Backward calls where nothing ties them to their forward ops (a recording: autograd's thread
/// has no sequence numbers to read). A run of launches without Python frames on a thread woken
/// by another thread of its process (`build::bind_wakes`: `backward()` waking autograd's
/// thread, after an idle of its own) runs the backward of the waking thread's launches before
/// the wake: its launches with Python frames, back to its last sync, at most as many as the
/// run has (a backward launches about as many kernels as its forward, or more; further back
/// lie the step before's optimizer and loading). Where one site made nine in ten of those
/// launches, the run's launches are that site's backward (a model of one function repeated, as
/// backward_bound's gates); where several made them, no run is tied: which backward launch is
/// whose is not known without the ops' sequence numbers, as the trace's own rule leaves a
/// backward stack of several functions' ops untied. Not tied either: a run beside fewer than
/// [`MIN_FORWARD`] forward launches or more than four times its own, a collective's launches
/// (DDP's hooks launch them from autograd's thread), the block's first run (its wake lies
/// before the block).
pub(super) fn mirror_backward(
    m: &mut Model,
    store: &Store,
    origin: &[(u32, StackId, NameId, u32)],
) {
    let mut memo: HashMap<StackId, bool> = HashMap::default();
    let mut python = |stack: StackId| {
        *memo.entry(stack).or_insert_with(|| {
            store
                .stacks
                .frames(stack)
                .iter()
                .any(|&f| store.names.frame(f).py_source().is_some())
        })
    };
    let py: Vec<bool> = origin.iter().map(|o| python(o.1)).collect();
    let collective: HashSet<u32> = m
        .ops
        .iter()
        .filter(|o| o.group != NONE && o.call != NONE)
        .map(|o| o.call)
        .collect();
    let launch = |c: &Call| c.kind == ApiKind::Launch && c.site != NONE;
    for t in 0..m.threads.len() {
        let (first, last) = (m.threads[t].first, m.threads[t].last);
        let mut c = first;
        while c < last {
            let w = m.calls[c as usize].after;
            let mut end = c + 1;
            while end < last && m.calls[end as usize].after == NONE {
                end += 1;
            }
            let run = c..end;
            c = end;
            if w == NONE || run.clone().any(|k| py[k as usize]) {
                continue;
            }
            let bwd: Vec<u32> = run
                .filter(|&k| launch(&m.calls[k as usize]) && !collective.contains(&k))
                .collect();
            let main_first = m.thread_of(w).first;
            let mut fwd: Vec<u32> = Vec::new();
            let mut k = w;
            while fwd.len() < bwd.len() {
                let call = &m.calls[k as usize];
                if call.kind == ApiKind::Sync && k != w {
                    break;
                }
                if launch(call) && py[k as usize] {
                    fwd.push(k);
                }
                if k == main_first {
                    break;
                }
                k -= 1;
            }
            if fwd.len() < MIN_FORWARD || bwd.len() > 4 * fwd.len() {
                continue;
            }
            let mut by: HashMap<u32, usize> = HashMap::default();
            for &k in &fwd {
                *by.entry(m.calls[k as usize].site).or_default() += 1;
            }
            let one = by
                .into_iter()
                .find(|&(_, n)| 10 * n >= 9 * fwd.len())
                .map(|(f, _)| f);
            if let Some(f) = one {
                for k in bwd {
                    if m.calls[k as usize].site != f {
                        m.calls[k as usize].fwd = f;
                    }
                }
            }
        }
    }
}

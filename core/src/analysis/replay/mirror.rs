//! Backward calls tied to their forward function, where the capture has no ties (see
//! [`mirror_backward`]).

use rustc_hash::FxHashMap as HashMap;

use super::model::{Call, Model, NONE};
use crate::model::records::{ApiKind, NameId, StackId};
use crate::model::store::Store;

/// Backward calls where nothing ties them to their forward ops (a recording: autograd's thread
/// has no sequence numbers to read). A run of launches of a thread without Python frames,
/// woken by another thread of its process (`build::bind_wakes`: `backward()` waking autograd's
/// thread), runs the backward of the waking thread's launches before the wake (its launches
/// with Python frames, back to its last sync or the wake before; for the block's first run,
/// before the last call another thread ended). Where one site made nine in ten of those
/// launches, the run's launches are that site's backward (a model of one function repeated,
/// as backward_bound's gates); where several made them, no run is tied: which backward launch
/// is whose is not known without the ops' sequence numbers, as the trace's own rule leaves a
/// backward stack of several functions' ops untied.
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
                .any(|&f| store.names.get(f).contains(".py("))
        })
    };
    let launch = |c: &Call| c.kind == ApiKind::Launch && c.site != NONE;
    let py: Vec<bool> = origin.iter().map(|o| python(o.1)).collect();
    for t in 0..m.threads.len() {
        let (first, last) = (m.threads[t].first, m.threads[t].last);
        if (first..last).any(|c| py[c as usize]) {
            continue;
        }
        // The block's first run began before the block's first call of the thread could be
        // seen to be woken: it follows the last call another thread of its process ended.
        let proc = m.threads[t].proc;
        let t0 = m.calls.get(first as usize).map(|c| c.start);
        let first_wake = (0..m.calls.len() as u32)
            .filter(|&k| {
                let call = &m.calls[k as usize];
                call.thread != t as u32
                    && m.threads[call.thread as usize].proc == proc
                    && t0.is_some_and(|t0| call.end <= t0)
            })
            .max_by_key(|&k| m.calls[k as usize].end)
            .unwrap_or(NONE);
        let mut prev_wake = NONE;
        let mut c = first;
        while c < last {
            let w = match m.calls[c as usize].after {
                NONE if c == first => first_wake,
                w => w,
            };
            if w == NONE {
                c += 1;
                continue;
            }
            let mut end = c + 1;
            while end < last && m.calls[end as usize].after == NONE {
                end += 1;
            }
            let bwd: Vec<u32> = (c..end).filter(|&k| launch(&m.calls[k as usize])).collect();
            let main = m.thread_of(w).clone();
            let mut fwd: Vec<u32> = Vec::new();
            let mut k = w;
            while k >= main.first && k != prev_wake {
                let call = &m.calls[k as usize];
                if call.kind == ApiKind::Sync && k != w {
                    break;
                }
                if launch(call) && py[k as usize] {
                    fwd.push(k);
                }
                if k == main.first {
                    break;
                }
                k -= 1;
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
            prev_wake = w;
            c = end;
        }
    }
}

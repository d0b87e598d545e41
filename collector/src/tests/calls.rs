//! The API calls: which ones are followed and how (the call plans), and a thread's open calls
//! as callbacks are switched off and on under them.

use gaptop_wire as w;

use crate::callbacks::{OpenCall, OpenCalls};
use crate::enable::plan_call;
use crate::switches::Switches;

fn call(corr: u32, epoch: u32) -> OpenCall {
    OpenCall {
        start: corr as u64 * 10,
        corr,
        stack: corr + 100,
        name: 1,
        kind: 0,
        epoch,
    }
}

/// Nested calls, and calls cut by switching callbacks off and on (sampled stacks).
#[test]
fn open_calls_survive_callbacks_switched_off_mid_call() {
    let mut o = OpenCalls::default();
    // A runtime launch and the driver call it makes, in one window.
    assert!(o.enclosing(0).is_none());
    o.0.push(call(1, 0));
    assert_eq!(
        o.enclosing(0).map(|c| c.corr),
        Some(1),
        "nested in the runtime call"
    );
    o.0.push(call(2, 0));
    assert_eq!(o.close(2).map(|c| c.corr), Some(2));
    assert_eq!(
        o.0.last().map(|c| c.corr),
        Some(1),
        "the outer call stays open"
    );
    assert_eq!(o.close(1).map(|c| c.corr), Some(1));
    assert!(o.0.is_empty());

    // Callbacks went off after an entry: its exit never came. In the next window a new
    // call is not taken for a nested one, and the lost call is forgotten.
    o.0.push(call(3, 0));
    assert!(o.enclosing(1).is_none());
    assert!(o.0.is_empty());

    // An exit whose entry was never seen (callbacks came on mid-call) changes nothing.
    o.0.push(call(4, 1));
    assert!(o.close(99).is_none());
    assert_eq!(o.0.len(), 1);
    // An exit that skips an inner call whose exit was lost closes both.
    o.0.push(call(5, 1));
    assert_eq!(o.close(4).map(|c| c.stack), Some(104));
    assert!(o.0.is_empty());
}

/// Which calls get callbacks or API records, by default and under the diagnostics.
#[test]
fn calls_are_planned_by_name() {
    let plan = |name: &str, sw: &Switches| {
        let p = plan_call(name, sw);
        (p.kind, p.callback, p.recorded)
    };
    let default = Switches::read(|_| None);
    assert_eq!(
        plan("cudaLaunchKernel_v7000", &default),
        (w::API_LAUNCH, true, false)
    );
    assert_eq!(
        plan("cuLaunchKernelEx", &default),
        (w::API_LAUNCH, true, false)
    );
    assert_eq!(
        plan("cudaGraphLaunch_v10000", &default),
        (w::API_GRAPH_LAUNCH, true, false)
    );
    assert_eq!(
        plan("cudaStreamSynchronize_v3020", &default),
        (w::API_SYNC, true, false)
    );
    assert_eq!(
        plan("cudaGetLastError_v3020", &default),
        (w::API_OTHER, false, false)
    );
    assert_eq!(
        plan("cuCtxGetCurrent", &default),
        (w::API_OTHER, false, false)
    );

    let records = Switches::read(|k| (k == "GAPTOP_API_ACTIVITY").then(|| "1".into()));
    assert_eq!(
        plan("cudaLaunchKernel_v7000", &records),
        (w::API_LAUNCH, false, true)
    );
    assert_eq!(
        plan("cudaGetLastError_v3020", &records),
        (w::API_OTHER, false, false)
    );

    let only = Switches::read(|k| (k == "GAPTOP_CB_ONLY").then(|| "cudaGetLastError".into()));
    assert_eq!(
        plan("cudaGetLastError_v3020", &only),
        (w::API_OTHER, true, false)
    );
    assert_eq!(
        plan("cudaLaunchKernel_v7000", &only),
        (w::API_LAUNCH, false, false)
    );
}

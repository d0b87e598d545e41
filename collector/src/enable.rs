//! What gaptop switches on in CUPTI: the API calls it follows, found by name whatever this CUPTI
//! numbers them (`plan_calls`), and their callbacks enabled (`enable_calls`); the activity
//! buffers registered and the activity kinds, API records, NVTX markers and attributes the
//! switches ask for (`enable_activities`, `enable_kinds`); and the call names the records
//! carry. Both starts (`setup`) and each attach of a dormant collector (`dormant`) use it, which
//! is why it is a module of its own, below them.

use std::sync::atomic::Ordering::Relaxed;

use gaptop_wire as w;

use crate::activity::{buffer_completed, buffer_requested};
use crate::cupti::{self, Activity, AttrValue, Attribute, Domain, Subscriber};
use crate::state::{CallNames, Collector, Names, SYNC_NAMES};
use crate::switches::{CuptiAttr, Switches};
use crate::CB_NOOP;

/// What the collector does with one CUDA API call, by its name.
#[derive(Debug, PartialEq)]
pub(crate) struct CallPlan {
    /// Its wire kind (`API_OTHER` for calls gaptop does not time).
    pub(crate) kind: u8,
    /// A callback at its entry and exit (with the stack walk at the entry).
    pub(crate) callback: bool,
    /// Timed by CUPTI's API records instead (GAPTOP_API_ACTIVITY).
    pub(crate) recorded: bool,
}

/// By default the launches, syncs, copies and waits get callbacks and nothing else does; with
/// GAPTOP_API_ACTIVITY they get API records instead; GAPTOP_CB_ONLY picks the callbacks by name.
pub(crate) fn plan_call(name: &str, sw: &Switches) -> CallPlan {
    let kind = w::api_kind(name);
    let timed = kind != w::API_OTHER;
    CallPlan {
        kind,
        callback: match &sw.cb_only {
            Some(names) => names.iter().any(|p| name.starts_with(p.as_str())),
            None => timed && sw.api_activity == 0,
        },
        recorded: timed && sw.api_activity > 0,
    }
}

/// The API calls gaptop follows, found by name whatever this CUPTI numbers them.
pub(crate) struct Followed {
    /// `CallNames::api`.
    pub(crate) table: [Vec<(u32, u8)>; 2],
    /// Calls with a callback or API records.
    pub(crate) enabled: usize,
    /// The calls that get a callback.
    pub(crate) callbacks: Vec<(Domain, u32)>,
    /// Calls timed by API records, and the untimed ones (GAPTOP_API_ACTIVITY).
    pub(crate) timed: Vec<(Domain, u32)>,
    pub(crate) untimed: Vec<(Domain, u32)>,
}

/// Names the calls gaptop follows, by what this CUPTI calls them (no callback enabled yet).
pub(crate) fn plan_calls(sw: &Switches, names: &Names) -> Followed {
    let mut f = Followed {
        table: [vec![(0, 0); 2048], vec![(0, 0); 2048]],
        enabled: 0,
        callbacks: Vec::new(),
        timed: Vec::new(),
        untimed: Vec::new(),
    };
    for (di, &dom) in Domain::ALL.iter().enumerate() {
        if !sw.domains[di] {
            continue;
        }
        for cbid in 1..2048u32 {
            let Some(n) = cupti::callback_name(dom, cbid) else {
                continue;
            };
            let plan = plan_call(&n, sw);
            if plan.callback {
                f.callbacks.push((dom, cbid));
            }
            if plan.callback || plan.recorded {
                f.table[di][cbid as usize] = (names.name(&n), plan.kind);
                f.enabled += 1;
            }
            if plan.recorded {
                f.timed.push((dom, cbid));
            } else if plan.kind == w::API_OTHER {
                f.untimed.push((dom, cbid));
            }
        }
    }
    f
}

/// Enables the planned callbacks; a call CUPTI refuses one for is not followed (its name id
/// becomes 0). Before `COLLECTOR` is set, or while `active` is off: a callback enabled here
/// returns at once until then.
pub(crate) fn enable_calls(sub: &Subscriber, f: &mut Followed) {
    let table = &mut f.table;
    let mut refused = 0;
    f.callbacks.retain(|&(dom, cbid)| {
        let ok = sub.enable_callback(dom, cbid, true).is_ok();
        if !ok {
            let di = Domain::ALL.iter().position(|&d| d == dom).unwrap_or(0);
            table[di][cbid as usize] = (0, 0);
            refused += 1;
        }
        ok
    });
    f.enabled -= refused;
}

/// Enables exactly the callbacks gaptop times, by name, and names them.
pub(crate) fn follow_calls(sub: &Subscriber, sw: &Switches, names: &Names) -> Followed {
    let mut f = plan_calls(sw, names);
    enable_calls(sub, &mut f);
    f
}

/// Sets the CUPTI activity attributes asked for with GAPTOP_CUPTI_ATTRS (a measuring aid,
/// docs/perf.md), before any activity kind is enabled. A refusal is said and tracing goes on
/// with CUPTI's own value.
pub(crate) fn set_cupti_attrs(sw: &Switches) {
    for item in &sw.bad_attrs {
        say!(
            "GAPTOP_CUPTI_ATTRS: cannot read {item:?} (names: {}; flags take 0 or 1)",
            CuptiAttr::ALL.map(|(n, _)| n).join(", ")
        );
    }
    for &(attr, value) in &sw.cupti_attrs {
        let v = if attr.is_flag() {
            AttrValue::Flag(value as u8)
        } else {
            AttrValue::Size(value)
        };
        match cupti::set_attribute(Attribute::Switch(attr), v) {
            Err(e) => say!("CUPTI refused {}={value} ({e})", attr.name()),
            Ok(()) if sw.verbose => say!("CUPTI attribute {}={value}", attr.name()),
            Ok(()) => {}
        }
    }
}

/// GAPTOP_API_ACTIVITY: CUPTI's API records for the `timed` calls (see `setup::start`). What CUPTI
/// refuses is said once; the run goes on with what it accepted.
fn enable_api_records(mode: u8, timed: &[(Domain, u32)], untimed: &[(Domain, u32)]) {
    let _ = cupti::use_system_thread_ids();
    if mode >= 2 {
        for k in [Activity::Driver, Activity::Runtime] {
            if let Err(e) = cupti::enable_activity(k) {
                say!("{}", e.failed("cuptiActivityEnable(API)"));
            }
        }
    }
    let apply = |calls: &[(Domain, u32)], on: bool| {
        let refused = calls
            .iter()
            .filter(|&&(dom, cbid)| cupti::enable_api_record(dom, cbid, on).is_err())
            .count();
        if refused > 0 {
            say!(
                "CUPTI refused to switch {refused} of {} API records {}",
                calls.len(),
                ["off", "on"][on as usize]
            );
        }
    };
    if mode >= 2 {
        apply(untimed, false);
    }
    apply(timed, true);
}

/// Registers the activity buffers and enables the activity kinds the switches ask for, once
/// `COLLECTOR` is set (buffers may complete from the first enable on).
pub(crate) fn enable_activities(
    c: &Collector,
    timed: &[(Domain, u32)],
    untimed: &[(Domain, u32)],
) -> Result<(), String> {
    cupti::register_buffers(buffer_requested, buffer_completed)
        .map_err(|e| e.failed("cuptiActivityRegisterCallbacks"))?;
    enable_kinds(c, timed, untimed)
}

/// Enables the activity kinds the switches ask for (the buffers registered already).
pub(crate) fn enable_kinds(
    c: &Collector,
    timed: &[(Domain, u32)],
    untimed: &[(Domain, u32)],
) -> Result<(), String> {
    // Off by default: hardware kernel timestamps (CUPTI's HES) instead of instrumenting each
    // launch. CUPTI offers them on Blackwell and later; the H200 refused, and collection went
    // on with the default tracing.
    if c.sw.hwtrace {
        if let Err(e) = cupti::enable_hw_trace() {
            say!(
                "{}; using CUPTI's default kernel tracing",
                e.failed("cuptiActivityEnableHWTrace")
            );
        }
    }
    if c.sw.api_activity > 0 {
        enable_api_records(c.sw.api_activity, timed, untimed);
    }
    if c.sw.nvtx {
        enable_nvtx(c);
    }
    CB_NOOP.store(c.sw.cb_noop, Relaxed);
    for &k in &Activity::GPU[..c.sw.gpu_kinds] {
        cupti::enable_activity(k).map_err(|e| e.failed("cuptiActivityEnable"))?;
    }
    // Synchronization records (GAPTOP_SYNC_ACTIVITY=1) add host timing for syncs the callbacks
    // do not see, at a high price on launch-bound programs; a refusal is only mentioned.
    if c.sw.sync_activity {
        if let Err(e) = cupti::enable_activity(Activity::Synchronization) {
            if c.times.on {
                say!("{}", e.failed("cuptiActivityEnable(SYNCHRONIZATION)"));
            }
        }
    }
    Ok(())
}

/// NVTX ranges through CUPTI's marker records, which CUPTI writes itself on the thread that
/// calls NVTX (no gaptop code runs there) once NVTX_INJECTION64_PATH names libcupti (`gaptop
/// run` sets it). Their threads are the system's ids, as the callbacks' records carry. A
/// refusal is only mentioned: kernels and launches are collected as before.
fn enable_nvtx(c: &Collector) {
    let ids = cupti::use_system_thread_ids();
    let on = ids.and_then(|()| cupti::enable_activity(Activity::Marker));
    match on {
        Err(e) if c.times.on => say!(
            "{}; no NVTX ranges",
            e.failed("cuptiActivityEnable(MARKER)")
        ),
        Ok(()) if c.times.on && std::env::var_os("NVTX_INJECTION64_PATH").is_none() => {
            say!("NVTX_INJECTION64_PATH is not set: the program's NVTX ranges do not reach CUPTI")
        }
        _ => {}
    }
}

/// The call names: the calls followed (`table`), copies, memsets and syncs.
pub(crate) fn call_names(table: [Vec<(u32, u8)>; 2], names: &Names) -> CallNames {
    CallNames {
        api: table,
        copies: w::COPY_KINDS.map(|k| names.name(k)),
        memset: names.name("Memset"),
        syncs: SYNC_NAMES.map(|n| names.name(n)),
    }
}

/// Hands CUPTI zeroed buffers (unless GAPTOP_ZEROED=0), so that it does not clear each new
/// 4 MiB buffer itself on the thread that filled the last one (a launching thread); then the
/// attributes GAPTOP_CUPTI_ATTRS asks for. Before any activity kind is enabled. Returns
/// whether CUPTI takes zeroed buffers.
pub(crate) fn set_buffer_attrs(sw: &Switches) -> bool {
    let zeroed =
        sw.zeroed && cupti::set_attribute(Attribute::ZeroedBuffers, AttrValue::Flag(1)).is_ok();
    set_cupti_attrs(sw);
    zeroed
}

//! Set-up and the collector's lifetime: `start` (run by `InitializeInjection`) connects to the
//! viewer, subscribes to CUPTI, enables the callbacks and activity kinds gaptop uses and
//! starts its threads; `go_quiet` stops collecting for good; `at_exit` sends what is left.
//!
//! Until `COLLECTOR` is set, CUPTI's callbacks return at once, so the CUPTI calls made before
//! it race with nothing of gaptop's; after it, no CUPTI call here is made with a collector
//! lock held.

use std::ffi::c_int;
use std::sync::atomic::Ordering::{AcqRel, Relaxed, Release};
use std::time::Duration;

use gaptop_wire as w;

use crate::activity::{buffer_completed, buffer_requested};
use crate::callbacks::{duty_cycle, on_api, set_callbacks};
use crate::cupti::{self, Activity, AttrValue, Attribute, Domain, Subscriber};
use crate::diag;
use crate::native::native_map;
use crate::pycalib::schedule_calibration;
use crate::sender::{send_all, sender};
use crate::session::Session;
use crate::state::{CallNames, Collector, Names, Parts, SYNC_NAMES};
use crate::switches::{CuptiAttr, Switches};
use crate::{CB_NOOP, COLLECTOR, EPOCH, FORKED};

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
fn follow_calls(sub: &Subscriber, sw: &Switches, names: &Names) -> Followed {
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

/// GAPTOP_API_ACTIVITY: CUPTI's API records for the `timed` calls (see `start`). What CUPTI
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

/// The sender thread, and the thread of the callback diagnostics when they are asked for.
pub(crate) fn start_threads(c: &'static Collector) -> Result<(), String> {
    start_sender(c)?;
    // Diagnostic (GAPTOP_CB_DELAY_MS): callbacks first switched on only after a delay, to
    // tell whether launches are slowed by callbacks being on, or by their having been on
    // while the program set up its context and loaded its kernels.
    let (duty, delay) = (c.sw.duty, c.sw.cb_delay);
    if delay.is_some() {
        set_callbacks(c, false);
    }
    if duty.is_some() || delay.is_some() {
        std::thread::Builder::new()
            .name("gaptop-duty".into())
            .spawn(move || {
                if let Some(d) = delay {
                    std::thread::sleep(d);
                    if !c.active.load(Relaxed) {
                        return;
                    }
                    // As in `duty_cycle`: the new window, then the callbacks back on.
                    EPOCH.fetch_add(1, Relaxed);
                    set_callbacks(c, true);
                }
                if let Some((on, off)) = duty {
                    duty_cycle(c, on, off);
                }
            })
            .map_err(|e| format!("cannot start the sampling thread: {e}"))?;
    }
    Ok(())
}

/// The sender thread (the only one a dormant collector starts besides its control thread).
pub(crate) fn start_sender(c: &'static Collector) -> Result<(), String> {
    std::thread::Builder::new()
        .name("gaptop-sender".into())
        .spawn(move || sender(c))
        .map_err(|e| format!("cannot start the sender thread: {e}"))?;
    Ok(())
}

/// The process's command line, as the viewer labels it.
pub(crate) fn label() -> String {
    w::control::command_line(None).join(" ")
}

/// A connection's opening: the hello (pid, RANK, command line).
pub(crate) fn hello() -> Vec<u8> {
    let mut hello = Vec::new();
    let rank = std::env::var("RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(-1);
    w::encode_hello(
        &mut hello,
        &w::Hello::new(std::process::id(), rank, &label()),
    );
    hello
}

pub(crate) fn connect(path: &str) -> Result<c_int, String> {
    use std::os::fd::IntoRawFd;
    let s = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| format!("cannot reach the viewer at {path}: {e}"))?;
    Ok(s.into_raw_fd())
}

/// Closes a viewer's socket (set-up giving up, a detach, the viewer gone).
pub(crate) fn close(fd: c_int) {
    // SAFETY: `fd` is a socket `connect` opened, owned by the caller and not used after this.
    unsafe { libc::close(fd) };
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

/// The raw-buffer dump for replay tests (GAPTOP_DUMP), when asked for and writable.
pub(crate) fn open_dump(sw: &Switches) -> Option<(std::fs::File, usize)> {
    let (p, budget) = sw.dump.as_ref()?;
    match std::fs::File::create(p) {
        Ok(f) => Some((f, *budget)),
        Err(e) => {
            say!("cannot write CUPTI buffers to {}: {e}", p.display());
            None
        }
    }
}

/// What every collector registers once it is set: the exit handler, the Python frames'
/// calibration, the fork handler.
pub(crate) fn register_handlers(c: &Collector) {
    // SAFETY: `at_exit` is an `extern "C" fn()` that lives for the whole process.
    unsafe { libc::atexit(at_exit) };
    if c.sw.py_stacks {
        schedule_calibration();
    }
    // SAFETY: `in_forked_child` is an `extern "C" fn()` that lives for the whole process and
    // only stores an atomic (async-signal-safe, as a fork child handler must be).
    unsafe { libc::pthread_atfork(None, None, Some(in_forked_child)) };
}

/// Connects to the viewer, subscribes and names the calls gaptop follows, says hello, builds
/// the collector whole and sets `COLLECTOR`; then enables activity, starts the sender (and
/// the diagnostics' thread), and registers the exit and fork handlers. An error is said once
/// by `InitializeInjection`, and collection stays off. With GAPTOP_DORMANT=1 the collector
/// starts dormant instead (`start_dormant`).
pub(crate) fn start() -> Result<(), String> {
    if std::env::var("GAPTOP_DORMANT").is_ok_and(|v| v == "1") {
        return start_dormant();
    }
    let path =
        std::env::var("GAPTOP_SOCKET").map_err(|_| "GAPTOP_SOCKET is not set".to_string())?;
    // First: no CUPTI call may be made before this (see `cupti`).
    if !cupti::is_present() {
        return Err("libcupti was not found (put its folder on LD_LIBRARY_PATH)".into());
    }
    let fd = connect(&path)?;
    let sub = match cupti::subscribe(on_api) {
        Ok(sub) => sub,
        Err(e) => {
            close(fd);
            return Err(e.failed("cuptiSubscribe (is another profiler attached?)"));
        }
    };
    let sw = Switches::from_env();
    let names = Names::starting_at(1);
    let Followed {
        table,
        enabled,
        timed,
        untimed,
        ..
    } = follow_calls(&sub, &sw, &names);
    let calls = call_names(table, &names);
    let mut hello = hello();
    hello.extend_from_slice(&names.take_defs());
    if !send_all(fd, &hello) {
        let _ = sub.unsubscribe();
        close(fd);
        return Err("the viewer closed the connection".into());
    }
    let zeroed = set_buffer_attrs(&sw);
    let native = sw.native.then(native_map);
    let dump = open_dump(&sw);
    let c = Collector::new(Parts {
        fd,
        sw,
        native,
        subscriber: Some(sub),
        names,
        calls: Some(calls),
        zeroed,
        dump,
        session: None,
    });
    if COLLECTOR.set(c).is_err() {
        return Err("initialized twice".into());
    }
    let c = COLLECTOR.get().expect("just set");
    enable_activities(c, &timed, &untimed)?;
    start_threads(c)?;
    register_handlers(c);
    if c.sw.verbose {
        diag::say_collecting(c, enabled, &path);
    }
    Ok(())
}

/// Starts a dormant collector: the control socket, the collector (collecting nothing, no
/// CUPTI call made), its sender and control threads and handlers. An error is said once by
/// `InitializeInjection`, and the program runs without gaptop.
pub(crate) fn start_dormant() -> Result<(), String> {
    // Loads libcupti without calling it: a missing one is said now, not at the first attach.
    if !crate::cupti::is_present() {
        return Err("libcupti was not found (put its folder on LD_LIBRARY_PATH)".into());
    }
    let sw = Switches::from_env();
    let (listener, socket) = crate::control::listen(&sw)?;
    let native = sw.native.then(native_map);
    let dump = open_dump(&sw);
    let finalize = sw.detach_finalize;
    let c = Collector::new(Parts {
        fd: -1,
        sw,
        native,
        subscriber: None,
        names: Names::starting_at(1),
        calls: None,
        zeroed: false,
        dump,
        session: Some(Session::new(socket.clone(), finalize)),
    });
    if COLLECTOR.set(c).is_err() {
        let _ = std::fs::remove_file(&socket);
        return Err("initialized twice".into());
    }
    let c = COLLECTOR.get().expect("just set");
    start_sender(c)?;
    std::thread::Builder::new()
        .name("gaptop-control".into())
        .spawn(move || crate::control::serve(c, listener))
        .map_err(|e| format!("cannot start the control thread: {e}"))?;
    register_handlers(c);
    if c.sw.verbose {
        say!(
            "dormant: `gaptop attach {}` turns collection on (control socket {})",
            std::process::id(),
            socket.display()
        );
    }
    Ok(())
}

/// Stops collecting for good: callbacks off, activity off. The program runs on untouched.
/// Called from the sender, from set-up, and from inside CUPTI's completion callback (a
/// panic there), never with a collector lock held; it only switches things off, never
/// flushes. A dormant collector's control thread does the switching instead (`dormant`), and
/// refuses further attaches.
pub(crate) fn go_quiet(c: &Collector, why: &str) {
    if let Some(s) = &c.session {
        s.stop_for_good(&c.active, why);
        return;
    }
    // AcqRel swap: exactly one caller says why and switches off; the callbacks' and
    // completions' Relaxed loads of `active` may see it late, which only costs a few records.
    if c.active.swap(false, AcqRel) {
        say!("{why}; collection stopped, the program continues");
        // try_lock: whoever holds it is switching callbacks, which `active` now silences.
        if let Ok(sub) = c.subscriber.try_lock() {
            if let Some(sub) = &*sub {
                let _ = sub.disable_domain(Domain::Runtime);
                let _ = sub.disable_domain(Domain::Driver);
            }
        }
        for k in Activity::GPU {
            let _ = cupti::disable_activity(k);
        }
    }
}

pub(crate) extern "C" fn at_exit() {
    let Some(c) = COLLECTOR.get() else { return };
    if FORKED.load(Relaxed) {
        return;
    }
    if let Some(s) = &c.session {
        s.remove_socket();
    }
    // Forced flush first, with no lock held: CUPTI may complete buffers on this thread inside
    // the call, and the completion takes the queue and the name locks. Only while collecting:
    // a dormant collector makes no CUPTI call (one would attach CUPTI again).
    if c.active.load(Relaxed) {
        let _ = cupti::flush_all(true);
    }
    // Release, read with Acquire by the sender: its last pass then finds in the queue what
    // the flush completed.
    c.shutting_down.store(true, Release);
    c.out.wake.notify_all();
    let (m, cv) = &c.out.done;
    let g = m.lock().unwrap_or_else(|e| e.into_inner());
    let _ = cv.wait_timeout_while(g, Duration::from_secs(3), |d| !*d);
    if c.times.on {
        diag::say_exit_stats(c);
    }
}

/// The fork child handler: a forked child collects nothing (its CUPTI state is not its own).
extern "C" fn in_forked_child() {
    FORKED.store(true, Relaxed);
}

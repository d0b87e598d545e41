//! Set-up: `start` (run by `InitializeInjection`) connects to the viewer, subscribes to CUPTI,
//! enables the callbacks and activity kinds gaptop uses (`enable`) and starts its threads; with
//! GAPTOP_DORMANT=1, `start_dormant` starts the control thread instead, and collection waits
//! for an attach (`dormant`). How collection stops, and the exit and fork handlers, are in
//! `lifetime`.
//!
//! Until `COLLECTOR` is set, CUPTI's callbacks return at once, so the CUPTI calls made before
//! it race with nothing of gaptop's; after it, no CUPTI call here is made with a collector
//! lock held.

use std::sync::atomic::Ordering::Relaxed;

use crate::callbacks::{duty_cycle, on_api, set_callbacks};
use crate::cupti;
use crate::diag;
use crate::enable::{call_names, enable_activities, follow_calls, set_buffer_attrs, Followed};
use crate::lifetime::register_handlers;
use crate::native::native_map;
use crate::sender::{send_all, sender};
use crate::session::Session;
use crate::state::{Collector, Names, Parts};
use crate::switches::Switches;
use crate::viewer::{close, connect, hello};
use crate::{COLLECTOR, EPOCH};

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

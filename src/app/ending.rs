//! How the UI ended, as its exit status says: 0 for a quit, 128 + the signal for one that
//! interrupted it, as shells report it: Ctrl-C (a key in the UI's raw terminal, or SIGINT
//! sent to it) is 130, SIGTERM 143, a hang-up 129.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

/// The last signal that ended the UI; 0 when none did.
fn ended_by() -> &'static Arc<AtomicUsize> {
    static E: OnceLock<Arc<AtomicUsize>> = OnceLock::new();
    E.get_or_init(Default::default)
}

/// Catches SIGTERM, SIGHUP and SIGINT into a flag the UI loop watches (and the signal into
/// [`exit_status`]). Call it before starting a program, so that no signal can end gaptop
/// between the start and the loop (which would orphan the program).
pub fn stop_flag() -> anyhow::Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [SIGTERM, SIGHUP, SIGINT] {
        signal_hook::flag::register(sig, stop.clone())?;
        signal_hook::flag::register_usize(sig, ended_by().clone(), sig as usize)?;
    }
    gaptop_core::files::signals_taken();
    Ok(stop)
}

/// Ctrl-C was pressed in the UI (the raw terminal hands it over as a key, not a signal).
pub fn interrupted() {
    ended_by().store(SIGINT as usize, Ordering::Relaxed);
}

/// The terminal went away without a signal: as SIGHUP would have ended it.
pub fn hung_up() {
    ended_by().store(SIGHUP as usize, Ordering::Relaxed);
}

/// The exit status the UI's end calls for.
pub fn exit_status() -> u8 {
    match ended_by().load(Ordering::Relaxed) {
        0 => 0,
        s => (128 + s).min(255) as u8,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interrupted_ui_exits_as_shells_report_it() {
        // The one test in this binary that touches the flag: a quit leaves it at 0.
        assert_eq!(exit_status(), 0);
        interrupted();
        assert_eq!(exit_status(), 130);
        hung_up();
        assert_eq!(exit_status(), 129);
        ended_by().store(0, Ordering::Relaxed);
    }
}

//! What gaptop adds to a CUDA call on this machine, measured before the program starts:
//! `gaptop-probe` (the collector's crate builds it beside the collector) run bare and with the
//! collector injected as the program will have it, three times each, interleaved. The figures
//! go into the recording ([`gaptop_wire::Cost`]), where the replay takes them out of its
//! estimates (`analysis::replay`'s `cost`).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use gaptop_wire::Cost;

use super::{find_collector, launch, private_dir, program_path, Options};

/// Pairs of runs (bare, with the collector), interleaved: what gaptop adds is the median of
/// the pairs' differences, each run's figure its median round's.
const PAIRS: usize = 3;

/// Longest a probe run may take (a CUDA context, then about 0.2 s of calls).
const RUN_LIMIT: Duration = Duration::from_secs(30);

/// The probe program: `GAPTOP_PROBE` (a path; `0` turns the probe off), else `gaptop-probe`
/// beside the collector or beside this binary.
fn find_probe() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("GAPTOP_PROBE") {
        if p == "0" {
            return Err("GAPTOP_PROBE=0".into());
        }
        return Ok(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Ok(c) = find_collector() {
        dirs.extend(c.parent().map(Path::to_path_buf));
    }
    if let Ok(exe) = std::env::current_exe() {
        dirs.extend(exe.parent().map(Path::to_path_buf));
    }
    dirs.iter()
        .map(|d| d.join("gaptop-probe"))
        .find(|p| p.is_file())
        .ok_or_else(|| "gaptop-probe not found beside the collector".into())
}

/// Whether `cmd` can start, said as `launch` would say it: a program with a `/` must be a
/// file, one without must be on PATH. Checked before the probe, so that a command that cannot
/// start is said at once, not after the probe's seconds.
pub fn startable(cmd: &[String]) -> anyhow::Result<()> {
    let Some(prog) = cmd.first() else {
        anyhow::bail!("no command given: use gaptop run -- CMD ARGS...");
    };
    if program_path(prog).is_some() {
        return Ok(());
    }
    let enoent = std::io::Error::from_raw_os_error(nix::errno::Errno::ENOENT as i32);
    Err(anyhow::anyhow!(enoent).context(format!("cannot start {prog}")))
}

/// A run's time a launch and a sync, ns.
type Calls = (u32, u32);

/// The `PROBE launch_ns=L sync_ns=S` line's figures.
fn parse(out: &str) -> Option<Calls> {
    let line = out.lines().rev().find(|l| l.starts_with("PROBE "))?;
    let field = |k: &str| -> Option<u32> {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(k))
            .and_then(|v| v.parse().ok())
            .filter(|&v| v > 0)
    };
    Some((field("launch_ns=")?, field("sync_ns=")?))
}

/// Waits for `child` up to [`RUN_LIMIT`], or until `stopped` says so; kills it then.
fn wait(
    child: &mut std::process::Child,
    stopped: &dyn Fn() -> bool,
) -> Result<std::process::ExitStatus, String> {
    let start = Instant::now();
    loop {
        let why = match child.try_wait() {
            Ok(Some(s)) => return Ok(s),
            Ok(None) if stopped() => "stopped by a signal".to_string(),
            Ok(None) if start.elapsed() >= RUN_LIMIT => {
                format!("gaptop-probe took over {} s", RUN_LIMIT.as_secs())
            }
            Ok(None) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(format!("gaptop-probe: {e}")),
        };
        let _ = child.kill();
        let _ = child.wait();
        return Err(why);
    }
}

/// One bare run: its figures, or why none.
fn bare(probe: &Path, stopped: &dyn Fn() -> bool) -> Result<Calls, String> {
    let mut child = Command::new(probe)
        .env_remove("CUDA_INJECTION64_PATH")
        .env_remove("NVTX_INJECTION64_PATH")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", probe.display()))?;
    wait(&mut child, stopped)?;
    let out = child
        .wait_with_output()
        .map_err(|e| format!("gaptop-probe: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse(&text).ok_or_else(|| {
        let err = String::from_utf8_lossy(&out.stderr);
        let why = err.lines().last().unwrap_or("no figures").trim();
        why.strip_prefix("gaptop-probe: ")
            .unwrap_or(why)
            .to_string()
    })
}

/// One run with the collector injected, as `launch` starts the program.
fn injected(probe: &Path, opts: &Options, stopped: &dyn Fn() -> bool) -> Result<Calls, String> {
    let dir = private_dir(&std::env::temp_dir(), "probe")
        .map(Private)
        .map_err(|e| format!("{e:#}"))?;
    let log = dir.0.join("probe.log");
    let cmd = [probe.to_string_lossy().into_owned()];
    let mut l = launch(&cmd, Some(&log), opts).map_err(|e| format!("{e:#}"))?;
    let ended = wait(&mut l.child, stopped);
    l.stop.store(true, Ordering::Relaxed);
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    ended?;
    parse(&text).ok_or_else(|| "no figures with the collector injected".into())
}

/// A folder only this user can enter ([`private_dir`]: the next viewer sweeps one a killed
/// viewer left), removed with what is in it on drop.
struct Private(PathBuf);

impl Drop for Private {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What gaptop adds to a CUDA call here; all zero, with the reason, where it cannot tell.
/// Once `stopped` says so, the run going on is killed and no other starts.
pub fn measure(opts: &Options, stopped: &dyn Fn() -> bool) -> Cost {
    match measure_runs(opts, stopped) {
        Ok(c) => c,
        Err(note) => Cost {
            note,
            ..Cost::default()
        },
    }
}

fn measure_runs(opts: &Options, stopped: &dyn Fn() -> bool) -> Result<Cost, String> {
    let probe = find_probe()?;
    let mut runs = Vec::new();
    for _ in 0..PAIRS {
        let b = bare(&probe, stopped)?;
        runs.push((b, injected(&probe, opts, stopped)?));
    }
    let (b, g) = pairs_figures(&runs);
    crate::say!(
        "gaptop: the collector adds ~{} ns to a kernel launch here ({} ns bare; gaptop-probe), which the estimates leave out",
        g.0.saturating_sub(b.0),
        b.0
    );
    Ok(Cost {
        launch_bare_ns: b.0,
        launch_ns: g.0,
        sync_bare_ns: b.1,
        sync_ns: g.1,
        note: format!(
            "gaptop-probe, {PAIRS} pairs of runs (medians): a launch {} ns bare, {} ns with gaptop; a sync {} ns, {} ns",
            b.0, g.0, b.1, g.1
        ),
    })
}

/// The bare figures (launch, sync) and those with gaptop, from pairs of runs (bare, with
/// gaptop): the bare runs' medians, and those plus the median of the pairs' differences
/// (what gaptop adds, never below nothing).
fn pairs_figures(runs: &[(Calls, Calls)]) -> (Calls, Calls) {
    let median = |mut v: Vec<u32>| {
        v.sort_unstable();
        v.get(v.len().saturating_sub(1) / 2).copied().unwrap_or(0)
    };
    let of = |f: fn(&Calls) -> u32| {
        let bare = median(runs.iter().map(|(b, _)| f(b)).collect());
        let added = median(
            runs.iter()
                .map(|(b, g)| f(g).saturating_sub(f(b)))
                .collect(),
        );
        (bare, bare + added)
    };
    let (launch, sync) = (of(|x| x.0), of(|x| x.1));
    ((launch.0, sync.0), (launch.1, sync.1))
}

#[cfg(test)]
mod tests {
    use super::{pairs_figures, parse};

    #[test]
    fn gaptops_cost_is_the_median_of_the_pairs_differences() {
        // A slow bare run (4100) beside a fast one with gaptop (5000) does not decide it.
        let runs = [
            ((3300, 250), (5000, 500)),
            ((4100, 260), (5000, 560)),
            ((3350, 240), (5100, 540)),
        ];
        assert_eq!(
            pairs_figures(&runs),
            ((3350, 250), (3350 + 1700, 250 + 300))
        );
        // gaptop never makes a call cheaper.
        assert_eq!(
            pairs_figures(&[((4000, 300), (3900, 200))]),
            ((4000, 300), (4000, 300))
        );
    }

    #[test]
    fn reads_the_probe_line() {
        assert_eq!(
            parse("warming\nPROBE launch_ns=4120 sync_ns=950 rounds=15\n"),
            Some((4120, 950))
        );
        assert_eq!(parse("PROBE launch_ns=0 sync_ns=950"), None);
        assert_eq!(parse("gaptop-probe: no CUDA driver library"), None);
    }
}

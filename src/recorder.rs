//! `gaptop record`: run a command with the collector injected and write a recording, headless.

use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context;
use gaptop_wire::Frame;

use gaptop_core::files::{left_as_it_was, refuse_input, Output};
use gaptop_core::sources::live::{self, LiveEvent};
use gaptop_core::sources::recording::{Sink, Writer};

#[derive(Default, Debug)]
pub struct Totals {
    pub frames: u64,
    pub ops: u64,
    pub apis: u64,
    /// CPU samples of the program's threads.
    pub samples: u64,
    /// NVTX ranges the collectors sent.
    pub ranges: u64,
    pub conns: u64,
    pub dropped: u64,
    pub errors: Vec<String>,
    /// Native frames are named before they are written, so the recording reads anywhere.
    pub symbols: gaptop_core::sources::symbols::Symbolizer,
    /// Lag reports from the collectors, in ms.
    pub lags: Vec<u64>,
}

/// Writes every event's frames to `w`, keeping totals. Returns false for events that end the
/// run (the child exited).
pub fn record_event<W: std::io::Write>(
    w: &mut Writer<W>,
    t: &mut Totals,
    drops: &mut std::collections::HashMap<u32, u64>,
    ev: LiveEvent,
) -> anyhow::Result<Option<String>> {
    match ev {
        LiveEvent::Frames(conn, frames) => {
            for mut f in frames {
                if let Frame::Name { text, .. } = &mut f {
                    if gaptop_core::sources::symbols::is_native(text) {
                        *text = t.symbols.resolve(text);
                    }
                }
                match &f {
                    Frame::Hello(_) => t.conns += 1,
                    Frame::Ops(o) => t.ops += o.len() as u64,
                    Frame::Apis(a) => t.apis += a.len() as u64,
                    Frame::Samples { samples, .. } => t.samples += samples.len() as u64,
                    Frame::Ranges(r) => t.ranges += r.len() as u64,
                    Frame::Stats(s) => {
                        drops.insert(conn, s.collector_dropped + s.cupti_dropped);
                        if s.lag_ns > 0 {
                            t.lags.push(s.lag_ns / 1_000_000);
                        }
                    }
                    _ => {}
                }
                t.frames += 1;
                w.frame(conn, &f).context("writing the recording")?;
            }
        }
        LiveEvent::Closed(conn, Some(why)) => t.errors.push(format!("connection {conn}: {why}")),
        LiveEvent::Closed(_, None) => {}
        LiveEvent::Output(line) => println!("{line}"),
        LiveEvent::Exited(s) => return Ok(Some(s)),
        LiveEvent::Notice(s) => gaptop_core::say!("gaptop: {s}"),
    }
    t.dropped = drops.values().sum();
    Ok(None)
}

/// The recording, created as a temporary file next to `out` ([`Output`]), gzipped for a
/// name that ends in `.gz`; and the signals that end a recording (SIGINT, SIGTERM, SIGHUP)
/// caught into a flag that holds the last one's number.
fn open_trapped(
    out: &Path,
) -> anyhow::Result<(
    Output,
    Writer<Sink>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
)> {
    let file = Output::create(out)?;
    let w = Writer::new(Sink::new(file.writer()?, out))?;
    let signalled = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register_usize(sig, signalled.clone(), sig as usize)?;
    }
    gaptop_core::files::signals_taken();
    Ok((file, w, signalled))
}

/// Replaces `out` with the recording when it holds GPU ops, and says what it got; otherwise
/// leaves `out` as it was and says so. Whether it was written.
fn finish(
    file: Output,
    w: Writer<Sink>,
    t: &Totals,
    out: &Path,
    nothing: &str,
) -> anyhow::Result<bool> {
    if t.ops == 0 {
        for e in &t.errors {
            gaptop_core::say!("gaptop: {e}");
        }
        gaptop_core::say!(
            "gaptop: {nothing}; nothing recorded, {}",
            left_as_it_was(out)
        );
        return Ok(false);
    }
    // Closed: its end record says it is whole.
    let bytes = w.bytes;
    w.close()
        .and_then(Sink::finish)
        .context("writing the recording")?;
    file.commit()?;
    say_totals(t, bytes, out);
    Ok(true)
}

/// `gaptop record`: the command's exit status (1 when nothing was recorded). Whatever fails,
/// `out` holds what it held before unless a recording with GPU ops was made.
pub fn run(
    cmd: &[String],
    out: &Path,
    duration: Option<f64>,
    opts: &live::Options,
) -> anyhow::Result<i32> {
    record_to(cmd, out, duration, opts)
        .map_err(|e| anyhow::anyhow!("{e:#}; {}", left_as_it_was(out)))
}

fn record_to(
    cmd: &[String],
    out: &Path,
    duration: Option<f64>,
    opts: &live::Options,
) -> anyhow::Result<i32> {
    refuse_input(out, &command_inputs(cmd))?;
    live::probe::startable(cmd)?;
    let (file, mut w, signalled) = open_trapped(out)?;
    // What gaptop adds to a CUDA call here, before the program starts (the replay takes it
    // out of the estimates). A signal meanwhile ends the recording before the program starts.
    let cost = live::probe::measure(opts, &|| signalled.load(Ordering::Relaxed) != 0);
    let sig = signalled.load(Ordering::Relaxed);
    if sig != 0 {
        gaptop_core::say!(
            "gaptop: stopped by signal {sig} before the program started; nothing recorded, {}",
            left_as_it_was(out)
        );
        return Ok(128 + sig as i32);
    }
    w.frame(gaptop_wire::COST_CONN, &Frame::Cost(cost))
        .context("writing the recording")?;
    // Only now the program starts: a signal from here on finalises the recording.
    let mut l = live::launch(cmd, None, opts)?;
    let started = Instant::now();
    let mut t = Totals::default();
    let mut drops = Default::default();
    let mut exit: Option<std::process::ExitStatus> = None;
    let mut exited_at: Option<Instant> = None;
    let mut last_flush = Instant::now();
    let mut stopped_by = None;
    loop {
        match l.rx.recv_timeout(Duration::from_millis(50)) {
            Ok(ev) => {
                record_event(&mut w, &mut t, &mut drops, ev)?;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
        if last_flush.elapsed() > Duration::from_millis(200) {
            w.flush().context("writing the recording")?;
            last_flush = Instant::now();
        }
        if exit.is_none() {
            if let Some(s) = l.child.try_wait()? {
                exit = Some(s);
                exited_at = Some(Instant::now());
            }
        }
        if let Some(at) = exited_at {
            // Give the collectors a moment to deliver their last records after exit.
            if at.elapsed() > Duration::from_millis(500) {
                while let Ok(ev) = l.rx.try_recv() {
                    record_event(&mut w, &mut t, &mut drops, ev)?;
                }
                break;
            }
        }
        let sig = signalled.load(Ordering::Relaxed);
        if sig != 0 {
            // Finalise what arrived, and take the program down rather than orphan it.
            while let Ok(ev) = l.rx.try_recv() {
                record_event(&mut w, &mut t, &mut drops, ev)?;
            }
            if exit.is_none() {
                let pid = nix::unistd::Pid::from_raw(l.child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            }
            let so_far = if t.ops > 0 {
                "; the recording is kept, complete up to now"
            } else {
                ""
            };
            gaptop_core::say!("gaptop: stopped by signal {sig}{so_far}");
            stopped_by = Some(128 + sig as i32);
            break;
        }
        if duration.is_some_and(|d| started.elapsed().as_secs_f64() >= d) {
            gaptop_core::say!(
                "gaptop: --duration reached; the program continues without the collector"
            );
            break;
        }
    }
    l.stop.store(true, Ordering::Relaxed);
    w.flush().context("writing the recording")?;
    let nothing = if t.conns == 0 {
        "no process connected: did the command use CUDA?"
    } else {
        "no GPU ops arrived: did the command run kernels?"
    };
    let written = finish(file, w, &t, out, nothing)?;
    if let Some(why) = exit.and_then(ended_badly) {
        let holds = if written {
            "; the recording holds what arrived before"
        } else {
            ""
        };
        gaptop_core::say!("gaptop: the command ended: {why}{holds}");
    }
    // A signal's status (130 for SIGINT, 143 for SIGTERM) whatever was recorded: a script
    // that runs `gaptop record` stops as it would have; the command's status; 1 for a
    // command that succeeded (or runs on) with nothing recorded.
    if let Some(code) = stopped_by {
        return Ok(code);
    }
    Ok(match exit.map(exit_code) {
        Some(c) if c != 0 => c,
        _ if written => 0,
        _ => 1,
    })
}

/// What a recording got: errors, then one line of totals, then the live lag.
fn say_totals(t: &Totals, bytes: u64, out: &Path) {
    for e in &t.errors {
        gaptop_core::say!("gaptop: {e}");
    }
    let ranges = if t.ranges > 0 {
        format!(", {} NVTX ranges", t.ranges)
    } else {
        String::new()
    };
    gaptop_core::say!(
        "gaptop: recorded {} GPU ops, {} API calls and {} CPU samples{ranges} from {} process(es), {} dropped, {} bytes -> {}",
        t.ops,
        t.apis,
        t.samples,
        t.conns,
        t.dropped,
        bytes,
        out.display()
    );
    if !t.lags.is_empty() {
        let mut l = t.lags.clone();
        l.sort_unstable();
        gaptop_core::say!(
            "gaptop: live lag (a GPU op's end to its record leaving the program): median {} ms, max {} ms over {} reports",
            l[l.len() / 2],
            l[l.len() - 1],
            l.len()
        );
    }
}

/// `gaptop capture`: attaches to a dormant program, records for `duration` (or until the
/// program ends or a signal comes), detaches, and writes what arrived as a recording. The
/// program runs on, dormant again.
/// Exits 1 when no GPU op arrived; whatever fails, `out` holds what it held before unless a
/// recording with GPU ops was made.
pub fn capture(
    target: &str,
    out: &Path,
    duration: Duration,
    samples: Option<gaptop_core::sources::cpu::SamplerConfig>,
) -> anyhow::Result<i32> {
    capture_to(target, out, duration, samples)
        .map_err(|e| anyhow::anyhow!("{e:#}; {}", left_as_it_was(out)))
}

fn capture_to(
    target: &str,
    out: &Path,
    duration: Duration,
    samples: Option<gaptop_core::sources::cpu::SamplerConfig>,
) -> anyhow::Result<i32> {
    use gaptop_core::sources::attach;
    let d = attach::find(target)?;
    let (file, mut w, signalled) = open_trapped(out)?;
    // The probe would run kernels beside the program's, on its GPU: not while attached.
    let cost = gaptop_wire::Cost {
        note: "not measured: attached to a running program, whose GPU the probe would share".into(),
        ..Default::default()
    };
    w.frame(gaptop_wire::COST_CONN, &Frame::Cost(cost))
        .context("writing the recording")?;
    let mut a = attach::attach(&d, &attach::who("capture"), samples)?;
    gaptop_core::say!(
        "gaptop: attached to pid {} ({}); recording for {}",
        d.pid,
        d.label,
        gaptop_core::units::fmt_ns(duration.as_nanos() as i64)
    );
    let started = Instant::now();
    let mut t = Totals::default();
    let mut drops = Default::default();
    let mut ended = false;
    let mut stopped_by = None;
    while started.elapsed() < duration {
        match a.rx.recv_timeout(Duration::from_millis(50)) {
            Ok(ev) => {
                record_event(&mut w, &mut t, &mut drops, ev)?;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
            Err(_) => break,
        }
        if !attach::alive(d.pid) {
            ended = true;
            break;
        }
        let sig = signalled.load(Ordering::Relaxed);
        if sig != 0 {
            gaptop_core::say!(
                "gaptop: stopped by signal {sig}; detaching, and keeping what arrived"
            );
            stopped_by = Some(128 + sig as i32);
            break;
        }
    }
    // The detach's answer comes once the collector sent what it had and closed; then only
    // our own channel is left to read.
    let detached = a.detach();
    a.stop.store(true, Ordering::Relaxed);
    // A detach answered means the collector sent everything and closed: its close is bound to
    // arrive, however loaded the machine, so it is waited for (within a bound); otherwise
    // what is already here is taken.
    let wait = if detached.is_ok() && !ended { 20 } else { 2 };
    let until = Instant::now() + Duration::from_secs(wait);
    while let Ok(ev) =
        a.rx.recv_timeout(until.saturating_duration_since(Instant::now()))
    {
        let closed = matches!(ev, LiveEvent::Closed(c, _) if c != gaptop_core::sources::cpu::stream::SAMPLER_CONN);
        record_event(&mut w, &mut t, &mut drops, ev)?;
        if closed {
            break;
        }
    }
    w.flush().context("writing the recording")?;
    let written = finish(
        file,
        w,
        &t,
        out,
        "no GPU ops arrived: did the program run kernels meanwhile?",
    )?;
    if ended {
        gaptop_core::say!("gaptop: pid {} ended during the capture", d.pid);
    } else if let Err(e) = detached {
        gaptop_core::say!("gaptop: {e:#}");
    } else {
        gaptop_core::say!("gaptop: detached; pid {} runs on, dormant", d.pid);
    }
    Ok(match stopped_by {
        Some(code) => code,
        None if written => 0,
        None => 1,
    })
}

/// The files a command names that it may read: its program (found on PATH) and every
/// argument (or `--opt=VALUE` value) that is an existing file, gaptop recordings excepted (a
/// recording given to the command is what the output may replace).
fn command_inputs(cmd: &[String]) -> Vec<std::path::PathBuf> {
    let mut v = Vec::new();
    if let Some(prog) = cmd.first().filter(|p| !p.contains('/')) {
        v.extend(live::program_path(prog));
    }
    for a in cmd {
        let value = a.starts_with('-').then(|| a.split_once('=')).flatten();
        for p in [Some(a.as_str()), value.map(|(_, v)| v)]
            .into_iter()
            .flatten()
        {
            let p = Path::new(p);
            if p.is_file() && !is_recording(p) {
                v.push(p.to_path_buf());
            }
        }
    }
    v
}

/// Whether `p` is a gaptop recording (plain or gzipped), by its first bytes.
fn is_recording(p: &Path) -> bool {
    use std::io::Read;
    let Ok(mut f) = std::fs::File::open(p) else {
        return false;
    };
    let mut head = [0u8; 8];
    let n = f.read(&mut head).unwrap_or(0);
    if n >= 2 && head[..2] == [0x1f, 0x8b] {
        let Ok(f) = std::fs::File::open(p) else {
            return false;
        };
        let mut g = flate2::read::GzDecoder::new(f).take(8);
        let mut b = Vec::new();
        let _ = g.read_to_end(&mut b);
        return b.starts_with(b"GAPTOPR");
    }
    head[..n].starts_with(b"GAPTOPR")
}

/// How a command that did not succeed ended, in words; None when it succeeded.
fn ended_badly(s: std::process::ExitStatus) -> Option<String> {
    (!s.success()).then(|| live::how_it_ended(s))
}

/// The status `gaptop record` exits with: the command's, or 128 + the signal that ended it,
/// as shells report it.
fn exit_code(s: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().or(s.signal().map(|g| 128 + g)).unwrap_or(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_command_is_described_and_its_status_passed_on() {
        use std::os::unix::process::ExitStatusExt;
        let killed = std::process::ExitStatus::from_raw(9);
        assert_eq!(
            ended_badly(killed).as_deref(),
            Some("killed by signal 9 (SIGKILL)")
        );
        assert_eq!(exit_code(killed), 137);
        let failed = std::process::ExitStatus::from_raw(3 << 8);
        assert_eq!(ended_badly(failed).as_deref(), Some("exit status 3"));
        assert_eq!(exit_code(failed), 3);
        let ok = std::process::ExitStatus::from_raw(0);
        assert_eq!((ended_badly(ok), exit_code(ok)), (None, 0));
    }
    use gaptop_core::model::store::Store;
    use gaptop_core::sources::recording::read_into;

    /// Native frames are named before they are written, so a recording opened on another
    /// machine does not need the libraries; lag reports are collected for the summary.
    #[test]
    fn recorded_native_frames_are_resolved_and_lags_kept() {
        let mut out = Vec::new();
        let mut t = Totals::default();
        let mut drops = Default::default();
        {
            let mut w = Writer::new(&mut out).unwrap();
            let frames = vec![
                Frame::Hello(gaptop_wire::Hello::new(3, -1, "p")),
                Frame::Name {
                    id: 9,
                    text: "native:/nonexistent/libfoo.so+0x2a".into(),
                },
                Frame::Stack {
                    id: 1,
                    parent: 0,
                    frame: 9,
                },
                Frame::Stats(gaptop_wire::Stats {
                    lag_ns: 150_000_000,
                    ..Default::default()
                }),
            ];
            let ended = record_event(&mut w, &mut t, &mut drops, LiveEvent::Frames(1, frames));
            assert!(ended.unwrap().is_none());
            w.flush().unwrap();
        }
        assert_eq!(t.lags, vec![150]);
        let text = String::from_utf8_lossy(&out);
        assert!(
            !text.contains("native:"),
            "the raw module path is not stored"
        );
        let mut st = Store::default();
        read_into(&out[..], &mut st).unwrap();
        assert!(st.names.lookup("libfoo.so+0x2a").is_some());
    }
}

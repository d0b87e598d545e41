//! `gaptop serve`: always-on metrics from short collection windows. A program with a dormant
//! collector (started here, `serve -- CMD`, or elsewhere, `serve PID|NAME`) is attached to
//! for a window (1 s by default) every period (10 s), each window's records are analysed as
//! the report does, and the results are added to Prometheus counters served over HTTP
//! (`metrics`, `http`). Nothing here aggregates across nodes: Prometheus scrapes every node.

pub mod gpus;
pub mod http;
pub mod metrics;

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context;

use gaptop_core::model::store::Store;
use gaptop_core::sources::attach::{self, Attachment, Dormant};
use gaptop_core::sources::ingest::Ingest;
use gaptop_core::sources::live::LiveEvent;
use metrics::Metrics;

/// `--metrics ADDR` on `run` and `attach`: the same metrics from the UI's live store, a
/// window every period, the newest seconds left out while their records may still come.
pub struct Tap {
    metrics: Arc<Metrics>,
    every: Duration,
    next: Instant,
    /// Where the last window ended (ns on the records' clock).
    from: i64,
}

/// How far behind now a live window ends: records reach the viewer up to this late.
const LIVE_LAG_NS: i64 = 2_000_000_000;

impl Tap {
    /// Serves the metrics at `addr` from now on; says where on stderr.
    pub fn start(addr: &str) -> anyhow::Result<Tap> {
        let metrics = Arc::new(Metrics::new(metrics::const_labels(|k| {
            std::env::var(k).ok()
        })));
        let bound = http::start(addr, metrics.clone())?;
        gaptop_core::say!("gaptop: metrics at http://{bound}/metrics");
        // GAPTOP_METRICS_PERIOD_MS: another period than 10 s (tests use a short one).
        let every = std::env::var("GAPTOP_METRICS_PERIOD_MS")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&ms: &u64| ms > 0)
            .map_or(Duration::from_secs(10), Duration::from_millis);
        Ok(Tap {
            metrics,
            every,
            next: Instant::now() + every,
            from: now_ns(),
        })
    }

    /// Adds the window since the last one, once a period has passed.
    pub fn poll(&mut self, store: &Store) {
        if Instant::now() < self.next {
            return;
        }
        self.next += self.every;
        let to = now_ns() - LIVE_LAG_NS;
        if to > self.from {
            self.metrics.observe(store, self.from, to);
            self.from = to;
        }
    }
}

/// What `serve` collects from.
pub enum Target {
    /// Started here with a dormant collector: it and the processes it starts.
    Command(Vec<String>),
    /// Running already: a pid, job label or program name.
    Program(String),
}

#[derive(Clone, Debug)]
pub struct Config {
    pub listen: String,
    /// How long each window collects.
    pub window: Duration,
    /// How often a window starts.
    pub every: Duration,
}

/// Now, in ns on the clock CUPTI stamps records with on Linux (CLOCK_REALTIME).
fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64)
}

/// The parent of each process, from /proc.
fn parents() -> HashMap<u32, u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, attach::stat(pid)?.1)))
        .collect()
}

/// The dormant programs that are `root` or run under it.
fn under(root: u32) -> Vec<Dormant> {
    let parents = parents();
    let descends = |mut p: u32| {
        for _ in 0..64 {
            if p == root {
                return true;
            }
            match parents.get(&p) {
                Some(&pp) if pp != p && pp != 0 => p = pp,
                _ => return false,
            }
        }
        false
    };
    attach::list(&mut Vec::new())
        .into_iter()
        .filter(|d| descends(d.pid))
        .collect()
}

/// One window of one program: attached, then its records read into a store of its own.
struct Open {
    a: Attachment,
    ingest: Ingest,
    store: Store,
    /// When collection was on (after the attach's answer).
    from: i64,
}

impl Open {
    fn take(&mut self, until: Instant) -> bool {
        let mut closed = false;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match self.a.rx.recv_timeout(left.min(Duration::from_millis(50))) {
                Ok(LiveEvent::Frames(conn, frames)) => {
                    for f in frames {
                        self.ingest.apply(&mut self.store, conn, f);
                    }
                }
                Ok(LiveEvent::Closed(c, _)) if c != 0 => closed = true,
                Ok(_) => {}
                Err(_) if Instant::now() >= until || closed => return closed,
                Err(_) => {}
            }
        }
    }
}

/// Collects one window from every target and adds it to the metrics.
fn window(targets: &[Dormant], cfg: &Config, m: &Metrics) {
    let who = attach::who("serve");
    let mut open = Vec::new();
    for d in targets {
        match attach::attach(d, &who, None) {
            Ok(a) => {
                let mut store = Store::new(256 << 20);
                store.source = format!("pid {} ({})", d.pid, d.label);
                open.push(Open {
                    a,
                    ingest: Ingest::new(),
                    store,
                    from: now_ns(),
                })
            }
            Err(e) => {
                m.failed(if e.to_string().contains("already attached") {
                    "busy"
                } else {
                    "attach"
                });
                gaptop_core::say!("gaptop serve: {e:#}");
            }
        }
    }
    m.set_targets(open.len());
    let pids: Vec<u32> = targets.iter().map(|d| d.pid).collect();
    m.keep_profiles_of(&pids);
    let end = Instant::now() + cfg.window;
    for o in &mut open {
        o.take(end);
    }
    for mut o in open {
        let to = now_ns();
        if let Err(e) = o.a.detach() {
            gaptop_core::say!("gaptop serve: {e:#}");
        }
        // What the collector sent until it closed.
        o.take(Instant::now() + Duration::from_secs(2));
        m.observe(&o.store, o.from, to);
    }
}

/// Runs `gaptop serve` until the program ends (its exit status for a command started here)
/// or a signal comes (128 + its number: 130 for SIGINT, 143 for SIGTERM).
pub fn run(target: Target, cfg: &Config) -> anyhow::Result<i32> {
    let stop = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sig in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
    ] {
        signal_hook::flag::register_usize(sig, stop.clone(), sig as usize)?;
    }
    gaptop_core::files::signals_taken();
    let m = Arc::new(Metrics::new(metrics::const_labels(|k| {
        std::env::var(k).ok()
    })));
    let addr = http::start(&cfg.listen, m.clone())?;
    let (mut child, fixed): (Option<Child>, Option<Dormant>) = match &target {
        Target::Command(cmd) => (Some(spawn_dormant(cmd)?), None),
        Target::Program(t) => (None, Some(attach::find(t)?)),
    };
    let what = match (&child, &fixed) {
        (Some(c), _) => format!("pid {} and the processes it starts", c.id()),
        (_, Some(d)) => format!("pid {} ({})", d.pid, d.label),
        _ => unreachable!(),
    };
    gaptop_core::say!(
        "gaptop serve: http://{addr}/metrics, {} of every {} from {what}",
        gaptop_core::units::fmt_ns(cfg.window.as_nanos() as i64),
        gaptop_core::units::fmt_ns(cfg.every.as_nanos() as i64)
    );
    let mut next = Instant::now() + cfg.window.min(cfg.every);
    loop {
        while Instant::now() < next {
            let sig = stop.load(Ordering::Relaxed);
            if sig != 0 {
                finish(child.as_mut());
                gaptop_core::say!("gaptop serve: stopped by signal {sig}");
                return Ok(128 + sig as i32);
            }
            if let Some(c) = child.as_mut() {
                if let Some(st) = c.try_wait()? {
                    gaptop_core::say!(
                        "gaptop serve: the command ended: {}",
                        gaptop_core::sources::live::how_it_ended(st)
                    );
                    return Ok(st.code().unwrap_or(1));
                }
            }
            if let Some(d) = &fixed {
                if !attach::alive(d.pid) {
                    gaptop_core::say!("gaptop serve: pid {} ended", d.pid);
                    return Ok(0);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        next += cfg.every;
        let targets = match (&child, &fixed) {
            (Some(c), _) => under(c.id()),
            (_, Some(d)) => vec![d.clone()],
            _ => Vec::new(),
        };
        if targets.is_empty() {
            m.set_targets(0);
            continue;
        }
        window(&targets, cfg, &m);
    }
}

/// Starts `cmd` with a dormant collector, its output on ours.
fn spawn_dormant(cmd: &[String]) -> anyhow::Result<Child> {
    let mut c = gaptop_core::sources::live::dormant_command(cmd, None, false)?;
    c.stdin(Stdio::null());
    c.spawn()
        .with_context(|| format!("cannot start {}", cmd[0]))
}

/// On a signal: a command started here is stopped too (SIGTERM), as `gaptop run` does.
fn finish(child: Option<&mut Child>) {
    if let Some(c) = child {
        if let Ok(None) = c.try_wait() {
            let pid = nix::unistd::Pid::from_raw(c.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = c.wait();
        }
    }
}

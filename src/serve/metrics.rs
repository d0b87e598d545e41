//! The Prometheus metrics `gaptop serve` exposes, accumulated window by window from each
//! window's store with the existing analysis: device idle by HTA's category, busy time,
//! launches, steps, the collector's drops, and the gap time by launch stack (served as folded
//! stacks and as the latest windows' pprof profile, not as labels: stacks as labels would
//! explode the series' cardinality).
//!
//! Names follow Prometheus' conventions (base units, `_total` for counters, which
//! prometheus-client appends), labels the DCGM exporter's habits: `gpu` (the CUDA device
//! ordinal), and on every series `Hostname`, and `pod`, `namespace`, `container` when the
//! environment names them (`POD_NAME`, `POD_NAMESPACE`, `CONTAINER_NAME`, as a pod spec's
//! downward API sets them).

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};

use gaptop_core::analysis::gaps::{device_gaps, device_idle, Basis, Category, Config};
use gaptop_core::analysis::summary::Summary;
use gaptop_core::analysis::{analyse, Options};

use gaptop_core::model::records::OpKind;
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;
use gaptop_core::units::Ns;

/// A GPU as the DCGM exporter labels it: `gpu`, and its `UUID` where it can be known
/// (`serve::gpus`; empty, so absent to Prometheus, where not).
#[allow(non_snake_case)]
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct GpuLabels {
    gpu: String,
    UUID: String,
}

#[allow(non_snake_case)]
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct IdleLabels {
    gpu: String,
    UUID: String,
    /// HTA's categories of the gap a launch ended (`host_wait`, `kernel_wait`, `other`), and
    /// `no_launch` for idle no op of the window ended (at its edges).
    category: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DropLabels {
    /// `collector` (gaptop's buffers or queue full, the viewer slow) or `cupti` (CUPTI had no
    /// buffer in time).
    source: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailLabels {
    reason: String,
}

type Seconds = Counter<f64, AtomicU64>;

/// Most distinct stacks kept for `/sites` (the lightest leave first).
const MAX_SITES: usize = 2000;

/// The registry and the handles that update it.
pub struct Metrics {
    registry: Registry,
    idle: Family<IdleLabels, Seconds>,
    busy: Family<GpuLabels, Seconds>,
    launches: Family<GpuLabels, Counter>,
    observed: Seconds,
    windows: Counter,
    failures: Family<FailLabels, Counter>,
    steps: Histogram,
    dropped: Family<DropLabels, Counter>,
    targets: Gauge,
    /// Gap time (ns) by folded launch stack, over all windows.
    sites: Mutex<HashMap<String, u64>>,
    /// The collectors' cumulative drop counts last seen, by pid: (collector, cupti).
    drops_seen: Mutex<HashMap<u32, (u64, u64)>>,
    /// Each target's latest window as a pprof profile (idle by launch stack), by pid.
    profiles: Mutex<std::collections::BTreeMap<u32, crate::pprof::proto::Profile>>,
    /// The machine's GPUs, for the `UUID` label.
    gpus: super::gpus::Gpus,
}

/// The labels every series carries, from the environment (`env` reads it).
pub fn const_labels(env: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut v = Vec::new();
    let host = env("HOSTNAME")
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_default();
    if !host.is_empty() {
        v.push(("Hostname".into(), host));
    }
    for (label, var) in [
        ("pod", "POD_NAME"),
        ("namespace", "POD_NAMESPACE"),
        ("container", "CONTAINER_NAME"),
    ] {
        if let Some(x) = env(var).filter(|x| !x.is_empty()) {
            v.push((label.into(), x));
        }
    }
    v
}

impl Metrics {
    pub fn new(labels: Vec<(String, String)>) -> Metrics {
        let mut registry = Registry::with_labels(
            labels
                .into_iter()
                .map(|(k, v)| (Cow::Owned(k), Cow::Owned(v))),
        );
        let m = Metrics {
            idle: Family::default(),
            busy: Family::default(),
            launches: Family::default(),
            observed: Seconds::default(),
            windows: Counter::default(),
            failures: Family::default(),
            // 1 ms to about 16 s.
            steps: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            dropped: Family::default(),
            targets: Gauge::default(),
            sites: Mutex::new(HashMap::new()),
            drops_seen: Mutex::new(HashMap::new()),
            profiles: Mutex::new(Default::default()),
            gpus: super::gpus::Gpus::query(),
            registry: Registry::default(),
        };
        let r = &mut registry;
        r.register_with_unit(
            "gaptop_gpu_idle",
            "Time no stream of the GPU ran anything, by the HTA category of the gap (no_launch: \
             idle not ended by a launch in the window); observed windows only",
            Unit::Seconds,
            m.idle.clone(),
        );
        r.register_with_unit(
            "gaptop_gpu_busy",
            "Time some stream of the GPU ran an op; observed windows only",
            Unit::Seconds,
            m.busy.clone(),
        );
        r.register(
            "gaptop_gpu_launches",
            "Kernels the GPU ran; observed windows only",
            m.launches.clone(),
        );
        r.register_with_unit(
            "gaptop_observed",
            "Time collected (the sum of the windows); divide the GPU counters' rates by its rate",
            Unit::Seconds,
            m.observed.clone(),
        );
        r.register(
            "gaptop_windows",
            "Collection windows done",
            m.windows.clone(),
        );
        r.register(
            "gaptop_window_failures",
            "Collection windows that could not be taken, by reason",
            m.failures.clone(),
        );
        r.register_with_unit(
            "gaptop_step",
            "Wall time of the program's steps found inside the windows",
            Unit::Seconds,
            m.steps.clone(),
        );
        r.register(
            "gaptop_collector_dropped_records",
            "Records the collector or CUPTI dropped",
            m.dropped.clone(),
        );
        r.register(
            "gaptop_targets",
            "Programs collected from in the last window",
            m.targets.clone(),
        );
        Metrics { registry, ..m }
    }

    /// The metrics in OpenMetrics' text format.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut s, &self.registry);
        s
    }

    /// The gap time of every launch stack so far, as folded stacks (`frame;frame;... NS`),
    /// heaviest first.
    pub fn sites(&self) -> String {
        let sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(&String, &u64)> = sites.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter().map(|(p, ns)| format!("{p} {ns}\n")).collect()
    }

    pub fn set_targets(&self, n: usize) {
        self.targets.set(n as i64);
    }

    /// A window that could not be taken.
    pub fn failed(&self, reason: &str) {
        self.failures
            .get_or_create(&FailLabels {
                reason: reason.into(),
            })
            .inc();
    }

    /// Adds what one target's window `[lo, hi)` (ns on the store's clock) holds.
    pub fn observe(&self, store: &Store, lo: Ns, hi: Ns) {
        if hi <= lo {
            return;
        }
        let cfg = Config {
            basis: Basis::Device,
            ..Config::default()
        };
        let secs = |ns: Ns| ns as f64 / 1e9;
        let w = Window::new(lo, hi);
        for ((proc, device), lanes) in store.devices() {
            let gpu = device.to_string();
            let uuid = self.gpus.uuid(store.procs[proc as usize].pid, device);
            let mut idle = 0;
            device_idle(store, &lanes, lo, hi, |a, b| idle += b - a);
            let mut by_cat = [0 as Ns; 3];
            device_gaps(store, &lanes, w, &cfg, |g| {
                by_cat[g.category as usize] += g.dur()
            });
            for c in Category::ALL {
                self.idle
                    .get_or_create(&IdleLabels {
                        gpu: gpu.clone(),
                        UUID: uuid.clone(),
                        category: c.as_str().into(),
                    })
                    .inc_by(secs(by_cat[c as usize]));
            }
            let outside = (idle - by_cat.iter().sum::<Ns>()).max(0);
            self.idle
                .get_or_create(&IdleLabels {
                    gpu: gpu.clone(),
                    UUID: uuid.clone(),
                    category: "no_launch".into(),
                })
                .inc_by(secs(outside));
            self.busy
                .get_or_create(&GpuLabels {
                    gpu: gpu.clone(),
                    UUID: uuid.clone(),
                })
                .inc_by(secs((hi - lo) - idle));
            let kernels: u64 = lanes
                .iter()
                .map(|&l| {
                    let ops = &store.lanes[l];
                    let (a, b) = (ops.lower_bound(lo), ops.lower_bound(hi));
                    ops.range(a..b).filter(|o| o.kind == OpKind::Kernel).count() as u64
                })
                .sum();
            self.launches
                .get_or_create(&GpuLabels { gpu, UUID: uuid })
                .inc_by(kernels);
        }
        // The window's steps and its gap time by launch stack; what to fix is not a metric.
        let options = Options {
            config: cfg,
            advice: false,
            ..Options::default()
        };
        let a = analyse(store, w, &options);
        for s in a.diagnosis.steps.iter().flat_map(|st| &st.steps) {
            self.steps.observe(secs(s.wall()));
        }
        self.observed.inc_by(secs(hi - lo));
        self.windows.inc();
        self.add_drops(store);
        self.add_sites(store, &a.diagnosis.summary);
        self.keep_profile(store, lo, hi, &cfg);
    }

    /// Keeps the window's idle by launch stack as the target's latest profile.
    fn keep_profile(&self, store: &Store, lo: Ns, hi: Ns, cfg: &Config) {
        let (Some((span_lo, _)), Some(pid)) = (store.span(), store.procs.first().map(|p| p.pid))
        else {
            return;
        };
        let w = Window {
            from: Some(lo - span_lo),
            to: Some(hi - span_lo),
        };
        let mut p = crate::pprof::profile(store, w, cfg);
        // The window as observed, not only the part of it its ops cover.
        p.time_nanos = lo;
        p.duration_nanos = hi - lo;
        let mut all = self.profiles.lock().unwrap_or_else(|e| e.into_inner());
        all.insert(pid, p);
    }

    /// Forgets the profiles of targets no longer watched.
    pub fn keep_profiles_of(&self, pids: &[u32]) {
        let mut all = self.profiles.lock().unwrap_or_else(|e| e.into_inner());
        all.retain(|pid, _| pids.contains(pid));
    }

    /// The latest window of every target as one gzipped pprof profile (`go tool pprof`,
    /// Grafana Pyroscope and Alloy's `pyroscope.scrape` read it); None before any window.
    pub fn pprof(&self) -> Option<Vec<u8>> {
        let all = self.profiles.lock().unwrap_or_else(|e| e.into_inner());
        crate::pprof::merge(all.values()).map(|p| crate::pprof::encode(&p))
    }

    /// The collectors' drops since the last window (their counts are cumulative).
    fn add_drops(&self, store: &Store) {
        let mut seen = self.drops_seen.lock().unwrap_or_else(|e| e.into_inner());
        for p in &store.procs {
            let now = (p.stats.collector_dropped, p.stats.cupti_dropped);
            let last = seen.insert(p.pid, now).unwrap_or((0, 0));
            for (source, n) in [
                ("collector", now.0.saturating_sub(last.0)),
                ("cupti", now.1.saturating_sub(last.1)),
            ] {
                self.dropped
                    .get_or_create(&DropLabels {
                        source: source.into(),
                    })
                    .inc_by(n);
            }
        }
    }

    /// Adds a window's gap time by launch stack (its summary's) to the sites'.
    fn add_sites(&self, store: &Store, s: &Summary) {
        let folded = crate::report::folded(store, s);
        let mut sites = self.sites.lock().unwrap_or_else(|e| e.into_inner());
        for line in folded.lines() {
            if let Some((path, ns)) = line.rsplit_once(' ') {
                if let Ok(ns) = ns.parse::<u64>() {
                    *sites.entry(path.to_string()).or_default() += ns;
                }
            }
        }
        if sites.len() > MAX_SITES {
            let mut v: Vec<u64> = sites.values().copied().collect();
            v.sort_unstable_by(|a, b| b.cmp(a));
            let keep = v[MAX_SITES - 1];
            sites.retain(|_, ns| *ns >= keep);
        }
    }
}

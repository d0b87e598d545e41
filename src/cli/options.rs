//! The argument groups several commands share (flattened into them): what the collector
//! captures, the metrics a UI serves, sampling, the window, the UI's settings and how the
//! gaps are counted; each with what it turns into (the collector's options, a window checked
//! against the capture, the gaps' basis).

use std::path::PathBuf;

use gaptop_core::analysis::gaps::Basis;
use gaptop_core::units::parse_time;

/// What the collector captures at each kernel launch.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(super) struct CollectArgs {
    /// Also capture native (C/C++) frames between Python and the CUDA call; they are named
    /// in the viewer from the libraries' symbol tables. Costs time at each launch.
    #[arg(long)]
    pub(super) native: bool,
    /// Do not sample the program's threads from outside it (the CPU during gaps; on by
    /// default at 500 Hz, GAPTOP_SAMPLE_HZ sets the rate)
    #[arg(long)]
    pub(super) no_cpu_samples: bool,
}

impl CollectArgs {
    pub(super) fn options(self) -> gaptop_core::sources::live::Options {
        gaptop_core::sources::live::Options {
            native: self.native,
            samples: if self.no_cpu_samples {
                None
            } else {
                gaptop_core::sources::cpu::stream::config_from_env()
            },
        }
    }
}

/// Prometheus metrics of what the UI collects.
#[derive(clap::Args, Debug, Clone)]
pub(super) struct MetricsArgs {
    /// Also serve the metrics `gaptop serve` does (/metrics, /sites) at ADDR (e.g.
    /// 127.0.0.1:9464), from what this UI collects, a window every 10 s
    #[arg(long, value_name = "ADDR")]
    pub(super) metrics: Option<String>,
}

impl MetricsArgs {
    pub(super) fn tap(&self) -> anyhow::Result<Option<crate::serve::Tap>> {
        self.metrics
            .as_deref()
            .map(crate::serve::Tap::start)
            .transpose()
    }
}

/// Sampling the program's threads from outside it.
#[derive(clap::Args, Debug, Clone, Copy)]
pub(super) struct SampleArgs {
    /// Do not sample the program's threads from outside it (the CPU during gaps)
    #[arg(long)]
    pub(super) no_cpu_samples: bool,
}

impl SampleArgs {
    pub(super) fn config(self) -> Option<gaptop_core::sources::cpu::SamplerConfig> {
        if self.no_cpu_samples {
            None
        } else {
            gaptop_core::sources::cpu::stream::config_from_env()
        }
    }
}

#[derive(clap::Args, Clone)]
pub(super) struct WindowArgs {
    /// Window start, relative to the capture start (e.g. 1.5ms, 200us, 3s: a unit is needed)
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub(super) from: Option<i64>,
    /// Window end, relative to the capture start
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    pub(super) to: Option<i64>,
}

impl WindowArgs {
    /// The window as offsets from the capture's origin (its start, or for an exported window
    /// the start of the capture it came from), checked against the capture's extent
    /// `[start, end)` in the same offsets: a window past the end, before the start or ending
    /// before it starts is an error, not an empty answer.
    pub(super) fn check(
        &self,
        store: &gaptop_core::model::store::Store,
    ) -> anyhow::Result<(i64, i64)> {
        use gaptop_core::units::fmt_ns;
        let (slo, shi) = store.span().unwrap_or((0, 0));
        let (start, end) = (slo - store.origin(), shi - store.origin());
        let from = self.from.unwrap_or(start);
        let to = self.to.unwrap_or(end);
        if from >= end {
            anyhow::bail!(
                "--from {} is past the end of the capture (it ends at {})",
                fmt_ns(from),
                fmt_ns(end)
            );
        }
        if to <= start {
            anyhow::bail!(
                "--to {} is before the capture starts (at {})",
                fmt_ns(to),
                fmt_ns(start)
            );
        }
        if to <= from {
            anyhow::bail!("--to {} must be after --from {}", fmt_ns(to), fmt_ns(from));
        }
        Ok((from, to))
    }
}

#[derive(clap::Args, Clone)]
pub(super) struct UiArgs {
    /// Where `e` writes exports: a file, or a folder for a new gaptop-<source>-<time>.json.gz
    /// in it (as `gaptop export -o`)
    #[arg(
        short = 'o',
        long = "output",
        visible_alias = "export-dir",
        default_value = ".",
        value_name = "FILE|DIR"
    )]
    pub(super) export_to: PathBuf,
    /// Key map file (`action = key, key` lines) applied over the defaults
    #[arg(long, value_name = "FILE")]
    pub(super) keys: Option<PathBuf>,
    #[command(flatten)]
    pub(super) analysis: AnalysisArgs,
}

/// How the gaps are counted and what a step is.
#[derive(clap::Args, Clone)]
pub(super) struct AnalysisArgs {
    /// Make the call tree, top gaps and advice of each stream's own idle (as HTA counts it)
    /// rather than of device idle (no stream of the device running anything)
    #[arg(long)]
    pub(super) per_stream: bool,
    /// What delimits the program's steps: a CPU span or NVTX range (`step #` takes every
    /// `step N`), a Python function, or a GPU op, by name (default: ProfilerStep#N spans, else
    /// step-like or repeating NVTX ranges, else found from the repeating launches)
    #[arg(long, value_name = "NAME")]
    pub(super) step: Option<String>,
    /// Gaps shorter than this that are not host_wait count as kernel_wait
    #[arg(long, default_value = "30us", value_parser = parse_time, value_name = "TIME")]
    pub(super) kernel_wait: i64,
}

impl AnalysisArgs {
    pub(super) fn basis(&self) -> Basis {
        if self.per_stream {
            Basis::Stream
        } else {
            Basis::Device
        }
    }
}

//! The command line as clap reads it: [`Cli`] and its subcommands ([`Cmd`]), in the order
//! `--help` lists them, with what `open`, `report` and `export` read and the formats `report`
//! and `diff` write. The argument groups several commands share are in `options`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use super::options::{AnalysisArgs, CollectArgs, MetricsArgs, SampleArgs, UiArgs, WindowArgs};
use gaptop_core::units::{parse_bytes, parse_time};

#[derive(Parser)]
#[command(
    name = "gaptop",
    version,
    about = "Where the GPU sits idle between kernels, and which code made it wait",
    after_help = "New here? `gaptop demo` plays a sample in the UI (no GPU needed); \
                  `gaptop help COMMAND` says more of each command."
)]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) cmd: Cmd,
}

/// What `open`, `report` and `export` read, for their FILE|DIR arguments: in brief (`-h`)...
const INPUTS: &str = "A Kineto trace (.json, .json.gz), an Nsight Systems capture (.nsys-rep, \
.sqlite), a gaptop recording (.rec) or export; several, or a directory, are one run's ranks";

/// ... and whole (`--help`).
const INPUTS_LONG: &str = "The capture: a torch.profiler (Kineto) trace (.json or .json.gz), an \
Nsight Systems capture (.nsys-rep, exported through the `nsys` on PATH, or the .sqlite that \
`nsys export --type sqlite` writes, plain or gzipped), a gaptop recording (.rec) or a gaptop \
export. Several traces, or a directory of them, are the ranks of one run; several recordings \
are the nodes of one job";

/// `report --format`'s values, each described.
fn report_formats() -> clap::builder::PossibleValuesParser {
    use clap::builder::PossibleValue as V;
    clap::builder::PossibleValuesParser::new([
        V::new("text")
            .help("a summary to read: what to fix first, idle by cause, top gaps and stacks"),
        V::new("json").help("everything the text says and more, for scripts"),
        V::new("folded").help("gap time by launch stack, for flame graph tools"),
        V::new("folded-cpu").help(
            "as folded, with the CPU samples taken during each launch's gaps under its stack",
        ),
        V::new("pprof").help(
            "both, as a gzipped profile.proto (pprof, Perfetto, Pyroscope, speedscope); binary: \
             use -o or a redirect",
        ),
    ])
}

/// `diff --format`'s values, each described.
fn diff_formats() -> clap::builder::PossibleValuesParser {
    use clap::builder::PossibleValue as V;
    clap::builder::PossibleValuesParser::new([
        V::new("text").help("tables to read; names are cut to fit only on a terminal"),
        V::new("json").help("every site and the 50 GPU ops that changed most, for scripts"),
    ])
}

/// The subcommands, listed in `--help` in the order a user meets them: the demo, then
/// collecting (run, record), reading (open, report, diff, export), then the dormant
/// collector's (attach, capture, serve, env).
#[derive(Subcommand)]
pub(super) enum Cmd {
    /// Play the built-in sample recording in the UI, as if live (no GPU needed)
    ///
    /// Laps of GPT-2 decoding recorded on an H200 play for about 20 s; then the whole capture
    /// stays open to explore. `?` in the UI lists the keys.
    #[command(display_order = 1)]
    Demo {
        /// Play faster (2 = twice the program's pace) or slower (0.5)
        #[arg(long, default_value_t = 1.0, value_parser = parse_speed, value_name = "FACTOR")]
        speed: f64,
        /// Keep playing laps until you quit
        #[arg(long = "loop", conflicts_with = "once")]
        looping: bool,
        /// Play the recording once (a few seconds), without laps; without a terminal on
        /// stdout, print the UI's screen at its end ($COLUMNS×$LINES, else 120×40) and exit
        #[arg(long)]
        once: bool,
        #[command(flatten)]
        ui: UiArgs,
    },
    /// Open a trace (Kineto .json[.gz], Nsight .nsys-rep/.sqlite) or recording (.rec) in the UI
    ///
    /// Reads torch.profiler (Kineto) traces (.json, .json.gz), Nsight Systems captures
    /// (.nsys-rep through the `nsys` on PATH, or its .sqlite export), gaptop recordings (.rec)
    /// and gaptop's own exports. Several traces (or recordings, one a node), or a directory of
    /// them, open as the ranks of one run.
    #[command(display_order = 4)]
    Open {
        #[arg(required = true, value_name = "FILE|DIR", help = INPUTS, long_help = INPUTS_LONG)]
        files: Vec<PathBuf>,
        /// Open on this window (--from/--to); z still shows the whole capture
        #[command(flatten)]
        window: WindowArgs,
        /// Another capture to compare this one with (as `gaptop diff FILE OTHER`), shown in
        /// the details pane (`w` cycles the gap, what to fix and the comparison)
        #[arg(long, value_name = "OTHER")]
        compare: Option<PathBuf>,
        #[command(flatten)]
        ui: UiArgs,
    },
    /// Run a command with the collector injected and watch it live in the UI
    ///
    /// `gaptop run -- python train.py`: the program's output goes to a log file (--log), the
    /// UI shows its GPU's gaps as they come. With --dormant there is no UI and nothing is
    /// collected until `gaptop attach` (or `capture`, `serve`) turns collection on.
    #[command(display_order = 2)]
    Run {
        /// Start the command with a dormant collector and no UI: it collects nothing until
        /// `gaptop attach PID` (or `capture`, `serve`) turns collection on from any shell
        #[arg(long)]
        dormant: bool,
        /// With --dormant: the job's label, which `gaptop attach NAME` matches (default: the
        /// program's or script's name)
        #[arg(long, requires = "dormant", value_name = "NAME")]
        job: Option<String>,
        #[command(flatten)]
        ui: UiArgs,
        #[command(flatten)]
        metrics: MetricsArgs,
        /// Memory budget for kept ops, e.g. 512M, 2G (oldest ops leave first, and are counted)
        #[arg(long, default_value = "1G", value_parser = parse_bytes, value_name = "SIZE")]
        memory: usize,
        /// Where the program's stdout and stderr go (default gaptop-<pid>.log here; a file that
        /// exists is appended to)
        #[arg(long, value_name = "FILE")]
        log: Option<PathBuf>,
        #[command(flatten)]
        collect: CollectArgs,
        /// The command to run and its arguments, after `--`
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
    /// Write a window of a capture as Chrome trace JSON (Perfetto, chrome://tracing)
    ///
    /// The window (--from/--to, else the whole capture) with its gaps, launches and CPU spans;
    /// `gaptop open` reads it back.
    #[command(display_order = 7)]
    Export {
        #[arg(required = true, value_name = "FILE|DIR", help = INPUTS, long_help = INPUTS_LONG)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        window: WindowArgs,
        /// Where to write: a file (gzipped when its name ends in .gz), or a folder for a new
        /// gaptop-<source>-<time>.json.gz in it, as the UI's `e` and its -o (default: .)
        #[arg(short, long, value_name = "FILE|DIR", default_value = ".")]
        output: PathBuf,
    },
    /// Summarize a capture: what to fix first, idle by cause, top gaps and stacks, percentiles
    ///
    /// The same analysis as the UI's, over the whole capture or a window (--from/--to), as
    /// text, JSON, folded stacks or a pprof profile.
    #[command(display_order = 5)]
    Report {
        #[arg(required = true, value_name = "FILE|DIR", help = INPUTS, long_help = INPUTS_LONG)]
        files: Vec<PathBuf>,
        /// What to write
        #[arg(long, default_value = "text", value_parser = report_formats())]
        format: String,
        /// Write to this file rather than to stdout
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        window: WindowArgs,
        /// How many of the longest gaps to list
        #[arg(long, default_value_t = 100, value_name = "N")]
        top: usize,
        /// Text: all of it (percentiles, top gaps, the top stacks' frames), not the first 60 lines' worth
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        analysis: AnalysisArgs,
    },
    /// Compare two captures (before and after a fix) a step at a time
    ///
    /// Step time, device idle, GPU busy and launches a step; each launching function's idle a
    /// step; the GPU ops whose time a step changed most. Where a capture has no steps, every
    /// figure is per second of capture instead.
    #[command(display_order = 6)]
    Diff {
        /// The capture before the change (any file `open` reads)
        #[arg(value_name = "BEFORE")]
        a: PathBuf,
        /// The capture after it
        #[arg(value_name = "AFTER")]
        b: PathBuf,
        /// What to write
        #[arg(long, default_value = "text", value_parser = diff_formats())]
        format: String,
        /// Write to this file rather than to stdout
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// The regression gate: exit 3 when B's steps are slower than A's by more than this
        /// beyond their noise (a rank test), 4 when the two cannot be compared (different
        /// programs or step sources, under 5 steady steps); 0 when they pass or got faster
        #[arg(long, value_name = "PERCENT", value_parser = crate::gate::parse_threshold)]
        fail_if_slower: Option<f64>,
        #[command(flatten)]
        analysis: AnalysisArgs,
    },
    /// Attach to a program running a dormant collector and watch it live; quitting detaches
    ///
    /// With no argument: list the dormant programs (started with `gaptop run --dormant` or
    /// the environment `gaptop env` prints).
    #[command(display_order = 8)]
    Attach {
        /// The program: its pid, or its job label or program name
        #[arg(value_name = "PID|NAME")]
        target: Option<String>,
        #[command(flatten)]
        ui: UiArgs,
        /// Memory budget for kept ops, e.g. 512M, 2G
        #[arg(long, default_value = "1G", value_parser = parse_bytes, value_name = "SIZE")]
        memory: usize,
        #[command(flatten)]
        samples: SampleArgs,
        #[command(flatten)]
        metrics: MetricsArgs,
    },
    /// Attach to a dormant program, record for a while, detach: as `attach`, headless
    #[command(display_order = 9)]
    Capture {
        /// The program: its pid, or its job label or program name
        #[arg(value_name = "PID|NAME")]
        target: String,
        /// How long to record (e.g. 5s, 500ms)
        #[arg(long, default_value = "5s", value_parser = parse_time, value_name = "TIME")]
        duration: i64,
        /// The recording to write (.rec)
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        #[command(flatten)]
        samples: SampleArgs,
    },
    /// Serve Prometheus metrics from short collection windows of a dormant program
    ///
    /// Idle and busy GPU time, launches, steps and drops: `serve -- CMD` starts the program,
    /// `serve PID|NAME` takes one running already.
    #[command(display_order = 10)]
    Serve {
        /// The program: its pid, or its job label or program name (else give -- CMD)
        #[arg(value_name = "PID|NAME")]
        target: Option<String>,
        /// Where to serve /metrics and /sites (127.0.0.1 unless told otherwise)
        #[arg(long, default_value = "127.0.0.1:9464", value_name = "ADDR")]
        listen: String,
        /// How long each window collects
        #[arg(long, default_value = "1s", value_parser = parse_time, value_name = "TIME")]
        window: i64,
        /// How often a window starts
        #[arg(long, default_value = "10s", value_parser = parse_time, value_name = "TIME")]
        every: i64,
        /// The command to start with a dormant collector and its arguments, after `--`
        #[arg(last = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
    /// Print the environment that starts a program with a dormant collector
    ///
    /// KEY=VALUE lines, for a service's unit file, a pod spec or a batch script.
    #[command(display_order = 11)]
    Env {
        /// `export KEY='VALUE'` lines, for a shell's eval (LD_LIBRARY_PATH before the shell's own)
        #[arg(long)]
        shell: bool,
        /// The job's label, which `gaptop attach NAME` matches (GAPTOP_JOB)
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
    },
    /// Run a command with the collector injected and write a recording (.rec), without the UI
    ///
    /// `gaptop record -o run.rec -- python train.py`; then `gaptop open run.rec` or
    /// `gaptop report run.rec`. Before the command starts, gaptop-probe measures what the
    /// collector adds to a CUDA call here (a few seconds; GAPTOP_PROBE=0 skips it), which the
    /// estimates then leave out.
    #[command(display_order = 3)]
    Record {
        /// The recording to write (.rec)
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
        /// Stop recording after this many seconds (the command keeps running)
        #[arg(long, value_name = "SECONDS")]
        duration: Option<f64>,
        #[command(flatten)]
        collect: CollectArgs,
        /// The command to run and its arguments, after `--`
        #[arg(last = true, required = true, value_name = "CMD")]
        cmd: Vec<String>,
    },
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.trim().trim_end_matches('x').parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 && v <= 1000.0 => Ok(v),
        _ => Err(format!("bad speed {s:?}: a number above 0, e.g. 0.5 or 4")),
    }
}

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use gaptop::collect::analysis::gaps::{Basis, Config, Window};
use gaptop::units::{parse_bytes, parse_time};

#[derive(Parser)]
#[command(
    name = "gaptop",
    version,
    about = "Where the GPU sits idle between kernels, and which code made it wait",
    after_help = "New here? `gaptop demo` plays a sample in the UI (no GPU needed); \
                  `gaptop help COMMAND` says more of each command."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// What the collector captures at each kernel launch.
#[derive(clap::Args, Debug, Clone, Copy)]
struct CollectArgs {
    /// Also capture native (C/C++) frames between Python and the CUDA call; they are named
    /// in the viewer from the libraries' symbol tables. Costs time at each launch.
    #[arg(long)]
    native: bool,
    /// Do not sample the program's threads from outside it (the CPU during gaps; on by
    /// default at 500 Hz, GAPTOP_SAMPLE_HZ sets the rate)
    #[arg(long)]
    no_cpu_samples: bool,
}

impl CollectArgs {
    fn options(self) -> gaptop::collect::sources::live::Options {
        gaptop::collect::sources::live::Options {
            native: self.native,
            samples: if self.no_cpu_samples {
                None
            } else {
                gaptop::collect::sources::cpu::stream::config_from_env()
            },
        }
    }
}

/// Prometheus metrics of what the UI collects.
#[derive(clap::Args, Debug, Clone)]
struct MetricsArgs {
    /// Also serve the metrics `gaptop serve` does (/metrics, /sites) at ADDR (e.g.
    /// 127.0.0.1:9464), from what this UI collects, a window every 10 s
    #[arg(long, value_name = "ADDR")]
    metrics: Option<String>,
}

impl MetricsArgs {
    fn tap(&self) -> anyhow::Result<Option<gaptop::serve::Tap>> {
        self.metrics
            .as_deref()
            .map(gaptop::serve::Tap::start)
            .transpose()
    }
}

/// Sampling the program's threads from outside it.
#[derive(clap::Args, Debug, Clone, Copy)]
struct SampleArgs {
    /// Do not sample the program's threads from outside it (the CPU during gaps)
    #[arg(long)]
    no_cpu_samples: bool,
}

impl SampleArgs {
    fn config(self) -> Option<gaptop::collect::sources::cpu::SamplerConfig> {
        if self.no_cpu_samples {
            None
        } else {
            gaptop::collect::sources::cpu::stream::config_from_env()
        }
    }
}

#[derive(clap::Args, Clone)]
struct WindowArgs {
    /// Window start, relative to the capture start (e.g. 1.5ms, 200us, 3s: a unit is needed)
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    from: Option<i64>,
    /// Window end, relative to the capture start
    #[arg(long, value_parser = parse_time, value_name = "TIME")]
    to: Option<i64>,
}

impl WindowArgs {
    /// The window as offsets from the capture's origin (its start, or for an exported window
    /// the start of the capture it came from), checked against the capture's extent
    /// `[start, end)` in the same offsets: a window past the end, before the start or ending
    /// before it starts is an error, not an empty answer.
    fn check(&self, store: &gaptop::collect::model::store::Store) -> anyhow::Result<(i64, i64)> {
        use gaptop::units::fmt_ns;
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
struct UiArgs {
    /// Where `e` writes exports
    #[arg(long, default_value = ".", value_name = "DIR")]
    export_dir: PathBuf,
    /// Key map file (`action = key, key` lines) applied over the defaults
    #[arg(long, value_name = "FILE")]
    keys: Option<PathBuf>,
    #[command(flatten)]
    analysis: AnalysisArgs,
}

/// How the gaps are counted and what a step is.
#[derive(clap::Args, Clone)]
struct AnalysisArgs {
    /// Make the call tree, top gaps and advice of each stream's own idle (as HTA counts it)
    /// rather than of device idle (no stream of the device running anything)
    #[arg(long)]
    per_stream: bool,
    /// What delimits the program's steps: a CPU span or NVTX range (`step #` takes every
    /// `step N`), a Python function, or a GPU op, by name (default: ProfilerStep#N spans, else
    /// step-like or repeating NVTX ranges, else found from the repeating launches)
    #[arg(long, value_name = "NAME")]
    step: Option<String>,
    /// Gaps shorter than this that are not host_wait count as kernel_wait
    #[arg(long, default_value = "30us", value_parser = parse_time, value_name = "TIME")]
    kernel_wait: i64,
}

impl AnalysisArgs {
    fn basis(&self) -> Basis {
        if self.per_stream {
            Basis::Stream
        } else {
            Basis::Device
        }
    }
}

/// The embedded sample: a recording of GPT-2 small at batch 1 taken on an H200.
const DEMO: &[u8] = include_bytes!("../assets/gpt2.rec");

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
enum Cmd {
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
        /// Play the recording once (a few seconds), without laps
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
        /// Where the program's stdout and stderr go (default gaptop-<pid>.log here)
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
        /// The file to write; gzipped when its name ends in .gz
        #[arg(short, long, value_name = "FILE")]
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
        /// `export KEY='VALUE'` lines, for a shell's eval
        #[arg(long)]
        shell: bool,
        /// The job's label, which `gaptop attach NAME` matches (GAPTOP_JOB)
        #[arg(long, value_name = "NAME")]
        job: Option<String>,
    },
    /// Run a command with the collector injected and write a recording (.rec), without the UI
    ///
    /// `gaptop record -o run.rec -- python train.py`; then `gaptop open run.rec` or
    /// `gaptop report run.rec`.
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

fn ui_app(
    store: gaptop::collect::model::store::Store,
    source: gaptop::app::SourceState,
    ui: &UiArgs,
) -> anyhow::Result<gaptop::app::App> {
    let mut app = gaptop::app::App::new(store, source);
    app.export_dir = ui.export_dir.clone();
    app.cfg.basis = ui.analysis.basis();
    app.cfg.kernel_wait_ns = ui.analysis.kernel_wait;
    app.step_by = ui.analysis.step.clone();
    if let Some(k) = &ui.keys {
        let text = std::fs::read_to_string(k)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", k.display()))?;
        app.keys = gaptop::app::KeyMap::with_overrides(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", k.display()))?;
    }
    Ok(app)
}

/// The inputs as an error names them.
fn shown(files: &[PathBuf]) -> String {
    let v: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    v.join(" ")
}

/// Writes what a command made to `output`, or to stdout (a binary format not to a terminal;
/// a reader that went away, as `| head` does, ends it quietly).
fn emit(bytes: &[u8], output: Option<&std::path::Path>, binary: bool) -> anyhow::Result<()> {
    use std::io::{IsTerminal, Write};
    if let Some(p) = output {
        return gaptop::files::Output::write_all(p, bytes);
    }
    let out = std::io::stdout();
    if binary && out.is_terminal() {
        anyhow::bail!("the profile is binary: write it with -o FILE or redirect stdout to a file");
    }
    let mut out = out.lock();
    match out.write_all(bytes).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| anyhow::anyhow!("cannot write to stdout: {e}")),
    }
}

/// A capture to compare: loaded, with GPU ops.
fn load_captured(p: &std::path::Path) -> anyhow::Result<gaptop::collect::model::store::Store> {
    let s = gaptop::collect::sources::load_path(p, usize::MAX)?;
    anyhow::ensure!(s.span().is_some(), "{}: no GPU ops", p.display());
    Ok(s)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Until a command catches the ending signals itself, one removes the temporary files.
    let signals = gaptop::files::remove_temps_on_signals();
    match signals.and_then(|_| run(cli)) {
        Ok(code) => code,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            gaptop::say!("gaptop: {msg}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Report {
            files,
            format,
            output,
            window,
            top,
            full,
            analysis,
        } => {
            if let Some(o) = &output {
                gaptop::files::refuse_input(o, &files)?;
            }
            let store = gaptop::collect::sources::load_paths(&files, usize::MAX)?;
            window
                .check(&store)
                .map_err(|e| anyhow::anyhow!("{}: {e}", shown(&files)))?;
            let cfg = Config {
                kernel_wait_ns: analysis.kernel_wait,
                basis: analysis.basis(),
                cpu_tree: format == "folded-cpu",
            };
            let w = Window {
                from: window.from,
                to: window.to,
            };
            if format == "pprof" {
                let p = gaptop::pprof::profile(&store, w, &cfg);
                emit(&gaptop::pprof::encode(&p), output.as_deref(), true)?;
                return Ok(ExitCode::SUCCESS);
            }
            let (summary, j) =
                gaptop::report::build_steps(&store, w, &cfg, top, analysis.step.as_deref());
            let out = match format.as_str() {
                "json" => serde_json::to_string_pretty(&j)? + "\n",
                "folded" => gaptop::report::folded(&store, &summary),
                "folded-cpu" => gaptop::report::folded_cpu(&store, &summary),
                _ => gaptop::report::text(&j, full),
            };
            emit(out.as_bytes(), output.as_deref(), false)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Diff {
            a,
            b,
            format,
            output,
            analysis,
        } => {
            if let Some(o) = &output {
                gaptop::files::refuse_input(o, &[a.clone(), b.clone()])?;
            }
            let (sa, sb) = (load_captured(&a)?, load_captured(&b)?);
            let cfg = Config {
                basis: analysis.basis(),
                ..Config::default()
            };
            let d = gaptop::diff::diff(&sa, &sb, &cfg, analysis.step.as_deref());
            let out = match format.as_str() {
                "json" => serde_json::to_string_pretty(&d)? + "\n",
                _ => gaptop::diff::text(&d, gaptop::diff::width(output.as_deref())),
            };
            emit(out.as_bytes(), output.as_deref(), false)?;
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Demo {
            speed,
            looping,
            once,
            ui,
        } => {
            use gaptop::app::{term, SourceState};
            term::need_terminal("demo")?;
            let mut store = gaptop::collect::model::store::Store::new(1 << 30);
            store.source = "demo (gpt2.rec)".into();
            let mut app = ui_app(store, SourceState::Live, &ui)?;
            // Nothing runs in the demo: no output pane.
            app.program = false;
            term::run(
                app,
                term::Feed::Demo(term::demo_feed(
                    DEMO,
                    term::DemoOptions {
                        speed,
                        looping,
                        at_least: if once {
                            std::time::Duration::ZERO
                        } else {
                            term::DemoOptions::default().at_least
                        },
                    },
                )),
                term::stop_flag()?,
                gaptop::views::render,
            )?;
            Ok(ExitCode::from(term::exit_status()))
        }
        Cmd::Open {
            files,
            window,
            compare,
            ui,
        } => {
            use gaptop::app::{term, SourceState};
            let store = gaptop::collect::sources::load_paths(&files, usize::MAX)?;
            let (from, to) = window
                .check(&store)
                .map_err(|e| anyhow::anyhow!("{}: {e}", shown(&files)))?;
            term::need_terminal("open")?;
            let origin = store.origin();
            let mut app = ui_app(store, SourceState::File, &ui)?;
            if window.from.is_some() || window.to.is_some() {
                app.set_window(origin + from, origin + to);
            }
            if let Some(other) = compare {
                let b = load_captured(&other)?;
                anyhow::ensure!(app.store.span().is_some(), "{}: no GPU ops", shown(&files));
                let d = gaptop::diff::diff(&app.store, &b, &app.cfg, app.step_by.as_deref());
                app.compare = Some(d);
                app.show_compare = true;
            }
            term::run(
                app,
                term::Feed::None,
                term::stop_flag()?,
                gaptop::views::render,
            )?;
            Ok(ExitCode::from(term::exit_status()))
        }
        Cmd::Run {
            dormant: true,
            job,
            collect,
            cmd,
            ..
        } => Err(gaptop::collect::sources::live::exec_dormant(
            &cmd,
            job.as_deref(),
            collect.native,
        )),
        Cmd::Run {
            ui,
            metrics,
            memory,
            log,
            collect,
            cmd,
            ..
        } => {
            use gaptop::app::{term, SourceState};
            term::need_terminal("run")?;
            let log =
                log.unwrap_or_else(|| PathBuf::from(format!("gaptop-{}.log", std::process::id())));
            let stop = term::stop_flag()?;
            let tap = metrics.tap()?;
            let l = gaptop::collect::sources::live::launch(&cmd, Some(&log), &collect.options())?;
            let mut store = gaptop::collect::model::store::Store::new(memory);
            store.source = cmd.join(" ");
            let mut app = ui_app(store, SourceState::Live, &ui)?;
            app.message = format!("program output: {}", log.display());
            term::run_with(
                app,
                term::Feed::Live(Box::new(l)),
                stop,
                gaptop::views::render,
                tap,
            )?;
            Ok(ExitCode::from(term::exit_status()))
        }
        Cmd::Export {
            files,
            window,
            output,
        } => {
            gaptop::files::refuse_input(&output, &files)?;
            let store = gaptop::collect::sources::load_paths(&files, usize::MAX)?;
            if store.span().is_none() {
                anyhow::bail!("{}: no GPU ops", shown(&files));
            }
            let (from, to) = window
                .check(&store)
                .map_err(|e| anyhow::anyhow!("{}: {e}", shown(&files)))?;
            let (from, to) = (store.origin() + from, store.origin() + to);
            let n = gaptop::export::write_file(&store, from, to, &Config::default(), &output)?;
            let spans = if n.spans > 0 {
                format!(", {} CPU spans", n.spans)
            } else {
                String::new()
            };
            gaptop::say!(
                "gaptop: wrote {} ops, {} launches, {} syncs and waits{spans}, {} gaps -> {}",
                n.ops,
                n.launches,
                n.blocking,
                n.gaps,
                output.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Attach { target: None, .. } => {
            let mut refused = Vec::new();
            let found = gaptop::collect::sources::attach::list(&mut refused);
            for r in &refused {
                gaptop::say!("gaptop: {r}");
            }
            if found.is_empty() {
                let dirs: Vec<String> = gaptop::collect::sources::attach::control_dirs()
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect();
                gaptop::say!(
                    "gaptop: no dormant program of yours runs (looked in {}); start one with \
                     `gaptop run --dormant -- CMD` or the environment `gaptop env` prints",
                    dirs.join(", ")
                );
                return Ok(ExitCode::from(1));
            }
            print!("{}", gaptop::collect::sources::attach::table(&found));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Attach {
            target: Some(target),
            ui,
            memory,
            samples,
            metrics,
        } => {
            use gaptop::app::{term, SourceState};
            use gaptop::collect::sources::attach;
            term::need_terminal("attach")?;
            let d = attach::find(&target)?;
            let stop = term::stop_flag()?;
            let tap = metrics.tap()?;
            let a = attach::attach(&d, &attach::who("attach"), samples.config())?;
            let mut store = gaptop::collect::model::store::Store::new(memory);
            store.source = format!("pid {} ({})", d.pid, d.label);
            let mut app = ui_app(store, SourceState::Live, &ui)?;
            app.message = format!("attached to pid {}; q detaches, the program runs on", d.pid);
            term::run_with(
                app,
                term::Feed::Attached(Box::new(a)),
                stop,
                gaptop::views::render,
                tap,
            )?;
            Ok(ExitCode::from(term::exit_status()))
        }
        Cmd::Capture {
            target,
            duration,
            output,
            samples,
        } => {
            if duration <= 0 {
                anyhow::bail!("--duration must be positive");
            }
            let d = std::time::Duration::from_nanos(duration as u64);
            let code = gaptop::record::capture(&target, &output, d, samples.config())?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Cmd::Serve {
            target,
            listen,
            window,
            every,
            cmd,
        } => {
            use gaptop::serve::{Config, Target};
            let target = match (target, cmd.is_empty()) {
                (Some(t), true) => Target::Program(t),
                (None, false) => Target::Command(cmd),
                (Some(_), false) => anyhow::bail!("give a program or -- CMD, not both"),
                (None, true) => anyhow::bail!(
                    "nothing to serve: give a dormant program (pid, job label or name) or -- CMD"
                ),
            };
            if window <= 0 || every < window {
                anyhow::bail!("--window must be positive and --every at least as long");
            }
            let cfg = Config {
                listen,
                window: std::time::Duration::from_nanos(window as u64),
                every: std::time::Duration::from_nanos(every as u64),
            };
            let code = gaptop::serve::run(target, &cfg)?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Cmd::Env { shell, job } => {
            let (env, warning) =
                gaptop::collect::sources::live::dormant_env_for_elsewhere(job.as_deref())?;
            if let Some(w) = warning {
                gaptop::say!("gaptop: {w}");
            }
            for (k, v) in env {
                let v = v.to_string_lossy();
                if shell {
                    println!("export {k}='{}'", v.replace('\'', "'\\''"));
                } else {
                    println!("{k}={v}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Record {
            output,
            duration,
            collect,
            cmd,
        } => {
            let code = gaptop::record::run(&cmd, &output, duration, &collect.options())?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
    }
}

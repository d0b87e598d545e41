use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use gaptop::collect::analysis::{Config, Window};
use gaptop::units::parse_time;

#[derive(Parser)]
#[command(
    name = "gaptop",
    version,
    about = "Where the GPU sits idle between kernels, and which code made it wait"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct WindowArgs {
    /// Window start, relative to the capture start (e.g. 1.5ms, 200us, 3s; bare numbers are µs)
    #[arg(long, value_parser = parse_time)]
    from: Option<i64>,
    /// Window end, relative to the capture start
    #[arg(long, value_parser = parse_time)]
    to: Option<i64>,
}

#[derive(Subcommand)]
enum Cmd {
    /// Summarize a trace or recording: idle breakdown, top gaps and stacks, percentiles
    Report {
        file: PathBuf,
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        format: String,
        #[command(flatten)]
        window: WindowArgs,
        /// How many of the longest gaps to list
        #[arg(long, default_value_t = 100)]
        top: usize,
        /// Gaps shorter than this that are not host_wait count as kernel_wait
        #[arg(long, default_value = "30us", value_parser = parse_time)]
        kernel_wait: i64,
    },
    /// Run a command with the collector injected and write a recording, without the UI
    Record {
        /// Output recording file
        #[arg(short, long)]
        output: PathBuf,
        /// Stop recording after this many seconds (the command keeps running)
        #[arg(long)]
        duration: Option<f64>,
        /// The command and its arguments
        #[arg(last = true, required = true)]
        cmd: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            eprintln!("gaptop: {msg}");
            ExitCode::from(1)
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.cmd {
        Cmd::Report {
            file,
            format,
            window,
            top,
            kernel_wait,
        } => {
            let store = gaptop::collect::load_path(&file, usize::MAX)?;
            let cfg = Config {
                kernel_wait_ns: kernel_wait,
            };
            let w = Window {
                from: window.from,
                to: window.to,
            };
            let (_, j) = gaptop::report::build(&store, w, &cfg, top);
            if format == "json" {
                println!("{}", serde_json::to_string_pretty(&j)?);
            } else {
                print!("{}", gaptop::report::text(&j));
            }
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Record {
            output,
            duration,
            cmd,
        } => {
            let code = gaptop::record::run(&cmd, &output, duration)?;
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
    }
}

//! The `gaptop` command line: the arguments as clap reads them (`args`, with the groups several
//! commands share in `options`) and each command's handler, by family: `read` (report, diff,
//! export), `ui` (demo, open, run, attach) and `headless` (run --dormant, the dormant list,
//! capture, serve, env, record). The binary (`src/main.rs`) only calls [`main`]; `--help` and
//! every command's behaviour are as they were when all of it lived there.

mod args;
mod headless;
mod options;
mod read;
mod ui;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Cmd};

/// Parses the command line and runs its command: what the binary's `main` returns. An error
/// is said on one line and exits 1.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Until a command catches the ending signals itself, one removes the temporary files.
    let signals = gaptop_core::files::remove_temps_on_signals();
    match signals.and_then(|_| run(cli)) {
        Ok(code) => code,
        Err(e) => {
            let msg = format!("{e:#}").replace('\n', " ");
            gaptop_core::say!("gaptop: {msg}");
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
        } => read::report(files, format, output, window, top, full, analysis),
        Cmd::Diff {
            a,
            b,
            format,
            output,
            fail_if_slower,
            analysis,
        } => read::diff(a, b, format, output, fail_if_slower, analysis),
        Cmd::Demo {
            speed,
            looping,
            once,
            ui,
        } => ui::demo(speed, looping, once, ui),
        Cmd::Open {
            files,
            window,
            compare,
            ui,
        } => ui::open(files, window, compare, ui),
        Cmd::Run {
            dormant: true,
            job,
            collect,
            cmd,
            ..
        } => headless::run_dormant(job, collect, cmd),
        Cmd::Run {
            ui,
            metrics,
            memory,
            log,
            collect,
            cmd,
            ..
        } => ui::run(ui, metrics, memory, log, collect, cmd),
        Cmd::Export {
            files,
            window,
            output,
        } => read::export(files, window, output),
        Cmd::Attach { target: None, .. } => headless::list_dormant(),
        Cmd::Attach {
            target: Some(target),
            ui,
            memory,
            samples,
            metrics,
        } => ui::attach(target, ui, memory, samples, metrics),
        Cmd::Capture {
            target,
            duration,
            output,
            samples,
        } => headless::capture(target, duration, output, samples),
        Cmd::Serve {
            target,
            listen,
            window,
            every,
            cmd,
        } => headless::serve(target, listen, window, every, cmd),
        Cmd::Env { shell, job } => headless::env(shell, job),
        Cmd::Record {
            output,
            duration,
            collect,
            cmd,
        } => headless::record(output, duration, collect, cmd),
    }
}

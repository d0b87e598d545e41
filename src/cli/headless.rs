//! The commands that start, find or collect from programs without the UI: `run --dormant`,
//! `attach` with no program (the list of dormant ones), `capture`, `serve`, `env` and
//! `record`.

use std::path::PathBuf;
use std::process::ExitCode;

use super::options::{CollectArgs, SampleArgs};

/// `gaptop run --dormant`: only returns if the command could not be started.
pub(super) fn run_dormant(
    job: Option<String>,
    collect: CollectArgs,
    cmd: Vec<String>,
) -> anyhow::Result<ExitCode> {
    Err(gaptop_core::sources::live::exec_dormant(
        &cmd,
        job.as_deref(),
        collect.native,
    ))
}

/// `gaptop attach` with no program: the dormant programs.
pub(super) fn list_dormant() -> anyhow::Result<ExitCode> {
    let mut refused = Vec::new();
    let found = gaptop_core::sources::attach::list(&mut refused);
    for r in &refused {
        gaptop_core::say!("gaptop: {r}");
    }
    if found.is_empty() {
        let dirs: Vec<String> = gaptop_core::sources::attach::control_dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        gaptop_core::say!(
            "gaptop: no dormant program of yours runs (looked in {}); start one with \
                 `gaptop run --dormant -- CMD` or the environment `gaptop env` prints",
            dirs.join(", ")
        );
        return Ok(ExitCode::from(1));
    }
    print!("{}", gaptop_core::sources::attach::table(&found));
    Ok(ExitCode::SUCCESS)
}

/// `gaptop capture`.
pub(super) fn capture(
    target: String,
    duration: i64,
    output: PathBuf,
    samples: SampleArgs,
) -> anyhow::Result<ExitCode> {
    if duration <= 0 {
        anyhow::bail!("--duration must be positive");
    }
    let d = std::time::Duration::from_nanos(duration as u64);
    let code = crate::recorder::capture(&target, &output, d, samples.config())?;
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// `gaptop serve`.
pub(super) fn serve(
    target: Option<String>,
    listen: String,
    window: i64,
    every: i64,
    cmd: Vec<String>,
) -> anyhow::Result<ExitCode> {
    use crate::serve::{Config, Target};
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
    let code = crate::serve::run(target, &cfg)?;
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// `gaptop env`.
pub(super) fn env(shell: bool, job: Option<String>) -> anyhow::Result<ExitCode> {
    let (env, warning) = gaptop_core::sources::live::dormant_env_for_elsewhere(job.as_deref())?;
    if let Some(w) = warning {
        gaptop_core::say!("gaptop: {w}");
    }
    for (k, v) in env {
        let v = v.to_string_lossy();
        if shell {
            println!("{}", shell_export(k, &v));
        } else {
            println!("{k}={v}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `export K='V'` for a POSIX shell's eval, `V` quoted whole (a `'` in it closed, escaped and
/// reopened). A search path (`LD_LIBRARY_PATH`) is put before the one the shell has, which it
/// keeps: `export LD_LIBRARY_PATH='/cupti'"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"`.
fn shell_export(k: &str, v: &str) -> String {
    let quoted = format!("'{}'", v.replace('\'', "'\\''"));
    if k == "LD_LIBRARY_PATH" {
        format!("export {k}={quoted}\"${{{k}:+:${k}}}\"")
    } else {
        format!("export {k}={quoted}")
    }
}

/// `gaptop record`.
pub(super) fn record(
    output: PathBuf,
    duration: Option<f64>,
    collect: CollectArgs,
    cmd: Vec<String>,
) -> anyhow::Result<ExitCode> {
    let code = crate::recorder::run(&cmd, &output, duration, &collect.options())?;
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

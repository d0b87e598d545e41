//! The commands that read captures and write what they find, without the UI: `report`,
//! `diff` and `export`, and how they name their inputs, load a capture to compare and write
//! their output.

use std::path::PathBuf;
use std::process::ExitCode;

use super::options::{AnalysisArgs, WindowArgs};
use gaptop_core::analysis::gaps::Config;
use gaptop_core::model::window::Window;

/// `gaptop report`.
pub(super) fn report(
    files: Vec<PathBuf>,
    format: String,
    output: Option<PathBuf>,
    window: WindowArgs,
    top: usize,
    full: bool,
    analysis: AnalysisArgs,
) -> anyhow::Result<ExitCode> {
    if let Some(o) = &output {
        gaptop_core::files::refuse_input(o, &files)?;
    }
    let store = gaptop_core::sources::load_paths(&files, usize::MAX)?;
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
        let p = crate::pprof::profile(&store, w, &cfg);
        emit(&crate::pprof::encode(&p), output.as_deref(), true)?;
        say_unverified(&store);
        return Ok(ExitCode::SUCCESS);
    }
    let (summary, j) = crate::report::build(&store, w, &cfg, top, analysis.step.as_deref());
    let out = match format.as_str() {
        "json" => serde_json::to_string_pretty(&j)? + "\n",
        "folded" => crate::report::folded(&store, &summary),
        "folded-cpu" => crate::report::folded_cpu(&store, &summary),
        _ => crate::report::text(&j, full),
    };
    emit(out.as_bytes(), output.as_deref(), false)?;
    say_unverified(&store);
    Ok(ExitCode::SUCCESS)
}

/// Once a report is written: the recordings it read that cannot be verified complete (older
/// than GAPTOPR5), one line for the first and a count of the others.
fn say_unverified(store: &gaptop_core::model::store::Store) {
    if let Some(first) = store.unverified.first() {
        let more = match store.unverified.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more recordings as old)"),
        };
        gaptop_core::say!("gaptop: {first}{more}");
    }
}

/// `gaptop diff`.
pub(super) fn diff(
    a: PathBuf,
    b: PathBuf,
    format: String,
    output: Option<PathBuf>,
    fail_if_slower: Option<f64>,
    analysis: AnalysisArgs,
) -> anyhow::Result<ExitCode> {
    if let Some(o) = &output {
        gaptop_core::files::refuse_input(o, &[a.clone(), b.clone()])?;
    }
    let (sa, sb) = (load_captured(&a)?, load_captured(&b)?);
    let cfg = Config {
        basis: analysis.basis(),
        ..Config::default()
    };
    let d = crate::diff::diff(&sa, &sb, &cfg, analysis.step.as_deref(), fail_if_slower);
    let out = match format.as_str() {
        "json" => serde_json::to_string_pretty(&d)? + "\n",
        _ => crate::diff::text(&d, crate::diff::width(output.as_deref())),
    };
    emit(out.as_bytes(), output.as_deref(), false)?;
    // The gate's verdict: its exit status, and its line on stderr too where the text went
    // elsewhere (JSON, or a file), so that a CI log shows why the job failed.
    let Some(g) = &d.gate else {
        return Ok(ExitCode::SUCCESS);
    };
    if format == "json" || output.is_some() {
        gaptop_core::say!("gaptop: {}", crate::gate::line(g));
    }
    Ok(ExitCode::from(g.exit_code()))
}

/// `gaptop export`.
pub(super) fn export(
    files: Vec<PathBuf>,
    window: WindowArgs,
    output: PathBuf,
) -> anyhow::Result<ExitCode> {
    if !output.is_dir() {
        gaptop_core::files::refuse_input(&output, &files)?;
    }
    let store = gaptop_core::sources::load_paths(&files, usize::MAX)?;
    if store.span().is_none() {
        anyhow::bail!("{}: no GPU ops", shown(&files));
    }
    let (from, to) = window
        .check(&store)
        .map_err(|e| anyhow::anyhow!("{}: {e}", shown(&files)))?;
    let (from, to) = (store.origin() + from, store.origin() + to);
    let output = crate::export::target(&output, &store.source);
    let cfg = Config::default();
    // A large one says its size and what opens it before the wait.
    let est = crate::export::estimate(&store, from, to, &cfg);
    if let Some(l) = crate::export::large(&est) {
        gaptop_core::say!(
            "gaptop: writing {l} to {}; {}; --from/--to export a shorter window",
            output.display(),
            crate::export::opens_with(est.json_bytes)
        );
    }
    let n = crate::export::write_file(&store, from, to, &cfg, &output)?;
    let spans = if n.spans > 0 {
        format!(", {} CPU spans", n.spans)
    } else {
        String::new()
    };
    let size = std::fs::metadata(&output).map(|m| m.len()).unwrap_or(0);
    gaptop_core::say!(
        "gaptop: wrote {} ops, {} launches, {} syncs and waits{spans}, {} gaps -> {} ({}); {}",
        n.ops,
        n.launches,
        n.blocking,
        n.gaps,
        output.display(),
        crate::export::bytes(size),
        crate::export::opens_with(n.json_bytes)
    );
    Ok(ExitCode::SUCCESS)
}

/// The inputs as an error names them.
pub(super) fn shown(files: &[PathBuf]) -> String {
    let v: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    v.join(" ")
}

/// Writes what a command made to `output`, or to stdout (a binary format not to a terminal;
/// a reader that went away, as `| head` does, ends it quietly).
pub(super) fn emit(
    bytes: &[u8],
    output: Option<&std::path::Path>,
    binary: bool,
) -> anyhow::Result<()> {
    use std::io::{IsTerminal, Write};
    if let Some(p) = output {
        return gaptop_core::files::Output::write_all(p, bytes);
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
pub(super) fn load_captured(
    p: &std::path::Path,
) -> anyhow::Result<gaptop_core::model::store::Store> {
    let s = gaptop_core::sources::load_path(p, usize::MAX)?;
    anyhow::ensure!(s.span().is_some(), "{}: no GPU ops", p.display());
    Ok(s)
}

//! The commands that open the UI: `demo`, `open`, `run` (live) and `attach` to a dormant
//! program, each making the [`App`](crate::app::App) from the UI's settings and handing it to
//! the terminal loop with its feed.

use std::path::PathBuf;
use std::process::ExitCode;

use super::options::{CollectArgs, MetricsArgs, SampleArgs, UiArgs, WindowArgs};
use super::read::{load_captured, shown};
use gaptop_core::analysis::steps::steady_span;
use gaptop_core::sources::demo::{self, DemoOptions};

/// The embedded sample: a recording of GPT-2 small at batch 1 taken on an H200.
const DEMO: &[u8] = include_bytes!("../../assets/gpt2.rec");

fn ui_app(
    store: gaptop_core::model::store::Store,
    source: crate::app::SourceState,
    ui: &UiArgs,
) -> anyhow::Result<crate::app::App> {
    let mut app = crate::app::App::new(store, source);
    app.export_to = ui.export_to.clone();
    app.cfg.basis = ui.analysis.basis();
    app.cfg.kernel_wait_ns = ui.analysis.kernel_wait;
    app.step_by = ui.analysis.step.clone();
    if let Some(k) = &ui.keys {
        let text = std::fs::read_to_string(k)
            .map_err(|e| anyhow::anyhow!("{}: cannot read: {e}", k.display()))?;
        app.keys = crate::app::KeyMap::with_overrides(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", k.display()))?;
    }
    Ok(app)
}

/// `gaptop demo`.
pub(super) fn demo(speed: f64, looping: bool, once: bool, ui: UiArgs) -> anyhow::Result<ExitCode> {
    use crate::app::{term, SourceState};
    if once && !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return demo_screen(ui);
    }
    term::need_terminal("demo")?;
    let mut store = gaptop_core::model::store::Store::new(1 << 30);
    store.source = "demo (gpt2.rec)".into();
    let mut app = ui_app(store, SourceState::Live, &ui)?;
    // Nothing runs in the demo: no output pane.
    app.program = false;
    term::run(
        app,
        term::Feed::Demo(demo::feed(
            DEMO,
            DemoOptions {
                speed,
                looping,
                at_least: if once {
                    std::time::Duration::ZERO
                } else {
                    DemoOptions::default().at_least
                },
            },
            steady_span,
        )),
        term::stop_flag()?,
        crate::views::render,
    )?;
    Ok(ExitCode::from(term::exit_status()))
}

/// `gaptop demo --once` without a terminal (CI, a pipe): the recording played at once, and the
/// UI's screen at its end printed as text, $COLUMNS×$LINES where they are set (120×40 if not).
fn demo_screen(ui: UiArgs) -> anyhow::Result<ExitCode> {
    use crate::app::SourceState;
    use gaptop_core::sources::live::LiveEvent;
    let mut store = gaptop_core::model::store::Store::new(1 << 30);
    store.source = "demo (gpt2.rec)".into();
    let mut app = ui_app(store, SourceState::Live, &ui)?;
    app.program = false;
    let rx = demo::feed(
        DEMO,
        DemoOptions {
            speed: 1e9,
            looping: false,
            at_least: std::time::Duration::ZERO,
        },
        steady_span,
    );
    while let Ok(ev) = rx.recv() {
        let end = matches!(ev, LiveEvent::Exited(_));
        app.update(crate::app::Msg::Source(ev));
        if end {
            break;
        }
    }
    // The panes describe the whole capture once its analysis is in.
    app.tick();
    while app.analysing().is_some() {
        app.settle();
    }
    let size = |var: &str, default: u16| {
        std::env::var(var)
            .ok()
            .and_then(|v| v.trim().parse::<u16>().ok())
            .filter(|n| (20..=1000).contains(n))
            .unwrap_or(default)
    };
    let (w, h) = (size("COLUMNS", 120), size("LINES", 40));
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h))?;
    crate::views::render(&mut t, &mut app)?;
    let buf = t.backend().buffer();
    let mut out = String::new();
    for y in 0..h {
        let line: String = (0..w).map(|x| buf[(x, y)].symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes())?;
    Ok(ExitCode::SUCCESS)
}

/// `gaptop open`.
pub(super) fn open(
    files: Vec<PathBuf>,
    window: WindowArgs,
    compare: Option<PathBuf>,
    ui: UiArgs,
) -> anyhow::Result<ExitCode> {
    use crate::app::{term, SourceState};
    let store = gaptop_core::sources::load_paths(&files, usize::MAX)?;
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
        let d = crate::diff::diff(&app.store, &b, &app.cfg, app.step_by.as_deref(), None);
        app.compare = Some(d);
        app.show_compare = true;
    }
    term::run(
        app,
        term::Feed::None,
        term::stop_flag()?,
        crate::views::render,
    )?;
    Ok(ExitCode::from(term::exit_status()))
}

/// `gaptop run` with the UI.
pub(super) fn run(
    ui: UiArgs,
    metrics: MetricsArgs,
    memory: usize,
    log: Option<PathBuf>,
    collect: CollectArgs,
    cmd: Vec<String>,
) -> anyhow::Result<ExitCode> {
    use crate::app::{term, SourceState};
    // What is missing for collecting at all (libcupti, the GPU) is said first: without it
    // the terminal does not matter.
    gaptop_core::sources::live::find_cupti()?;
    term::need_terminal("run")?;
    let log = log.unwrap_or_else(|| PathBuf::from(format!("gaptop-{}.log", std::process::id())));
    let stop = term::stop_flag()?;
    let tap = metrics.tap()?;
    gaptop_core::sources::live::probe::startable(&cmd)?;
    let cost = gaptop_core::sources::live::probe::measure(&collect.options(), &|| {
        stop.load(std::sync::atomic::Ordering::Relaxed)
    });
    if stop.load(std::sync::atomic::Ordering::Relaxed) {
        // A signal while the probe ran: the program is not started.
        return Ok(ExitCode::from(term::exit_status()));
    }
    let l = gaptop_core::sources::live::launch(&cmd, Some(&log), &collect.options())?;
    let mut store = gaptop_core::model::store::Store::new(memory);
    store.source = cmd.join(" ");
    store.launch_cost = Some(cost);
    let mut app = ui_app(store, SourceState::Live, &ui)?;
    app.message = format!("program output: {}", log.display());
    term::run_with(
        app,
        term::Feed::Live(Box::new(l)),
        stop,
        crate::views::render,
        tap,
    )?;
    Ok(ExitCode::from(term::exit_status()))
}

/// `gaptop attach PID|NAME`.
pub(super) fn attach(
    target: String,
    ui: UiArgs,
    memory: usize,
    samples: SampleArgs,
    metrics: MetricsArgs,
) -> anyhow::Result<ExitCode> {
    use crate::app::{term, SourceState};
    use gaptop_core::sources::attach;
    term::need_terminal("attach")?;
    let d = attach::find(&target)?;
    let stop = term::stop_flag()?;
    let tap = metrics.tap()?;
    let a = attach::attach(&d, &attach::who("attach"), samples.config())?;
    let mut store = gaptop_core::model::store::Store::new(memory);
    store.source = format!("pid {} ({})", d.pid, d.label);
    let mut app = ui_app(store, SourceState::Live, &ui)?;
    app.message = format!("attached to pid {}; q detaches, the program runs on", d.pid);
    term::run_with(
        app,
        term::Feed::Attached(Box::new(a)),
        stop,
        crate::views::render,
        tap,
    )?;
    Ok(ExitCode::from(term::exit_status()))
}

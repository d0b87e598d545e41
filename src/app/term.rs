//! The terminal loop: one thread draws and handles input; source events arrive on a channel and
//! are applied to the store between frames.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event, KeyEventKind, MouseEventKind};
use ratatui::backend::Backend;
use ratatui::Terminal;

use super::keymap::Action;
use super::msg::{Effect, MouseKind, Msg};
use super::state::{App, SourceState};
use gaptop_core::sources::attach::Attachment;
use gaptop_core::sources::live::{Launch, LiveEvent};

pub use super::ending::{exit_status, stop_flag};

/// What feeds the store while the UI runs.
pub enum Feed {
    /// Nothing: a file, loaded before the UI started.
    None,
    /// `gaptop run`: the child and its connections.
    Live(Box<Launch>),
    /// `gaptop demo`: a recording played back in real time.
    Demo(Receiver<LiveEvent>),
    /// `gaptop attach`: a dormant program collecting while the UI runs; quitting detaches.
    Attached(Box<Attachment>),
}

/// Applies pending source events, spending at most `budget` on them.
pub fn drain(app: &mut App, rx: &Receiver<LiveEvent>, budget: Duration) -> bool {
    let t = Instant::now();
    let mut any = false;
    while t.elapsed() < budget {
        // An export copying its window out shares the store: new data waits in the channel
        // (it is neither lost nor dropped) until the copy is made, a moment later.
        if !app.store_free() {
            break;
        }
        let Ok(ev) = rx.try_recv() else { break };
        any = true;
        app.update(Msg::Source(ev));
    }
    any
}

/// Carries out what `update` asked for: starts an export's thread, signals the program.
///
/// What needs the terminal itself (the clipboard, an editor) comes back, for the loop that owns
/// the terminal ([`terminal_effect`]).
pub fn perform(app: &mut App, effects: Vec<Effect>, feed: &mut Feed) -> Vec<Effect> {
    let mut left = Vec::new();
    for e in effects {
        match e {
            e @ (Effect::Copy(_) | Effect::Edit { .. }) => left.push(e),
            Effect::Export(req) => {
                app.update(Msg::ExportStarted(crate::export::start(req)));
            }
            Effect::StopProgram(nth) => {
                // K while live: this loop holds the program (a demo only plays a recording).
                let said = match feed {
                    Feed::Live(l) => {
                        let key = app.keys.keys_for(Action::StopProgram).into_iter().next();
                        stop_program(&mut l.child, nth, key.as_deref())
                    }
                    Feed::Attached(a) => format!(
                        "pid {} was started elsewhere: gaptop only detaches from it (q)",
                        a.target.pid
                    ),
                    _ => "a recording plays: no program to stop".into(),
                };
                app.update(Msg::Said(said));
            }
        }
    }
    left
}

/// Carries out an effect on the real terminal: text onto its clipboard by OSC 52, or the UI
/// suspended while `$EDITOR` (else `vi`) opens a source line. Returns what to tell the user,
/// if anything.
fn terminal_effect<B: Backend>(term: &mut Terminal<B>, e: Effect) -> Option<String> {
    use base64::Engine;
    use crossterm::{event as ev, execute, terminal as t};
    use std::io::Write;
    match e {
        Effect::Copy(text) => {
            let b64 = base64::engine::general_purpose::STANDARD.encode(text);
            let mut out = std::io::stdout();
            let _ = write!(out, "\x1b]52;c;{b64}\x07");
            let _ = out.flush();
            None
        }
        Effect::Edit { path, line } => {
            let Some(file) = find_source(&path) else {
                return Some(format!(
                    "cannot find {path} here: put the folders that hold it in GAPTOP_SRC_PATH"
                ));
            };
            let editor = std::env::var("VISUAL")
                .or_else(|_| std::env::var("EDITOR"))
                .unwrap_or_else(|_| "vi".into());
            let mut out = std::io::stdout();
            let _ = execute!(out, ev::DisableMouseCapture, t::LeaveAlternateScreen);
            let _ = t::disable_raw_mode();
            // `$EDITOR +LINE FILE`: vi, vim, nano, emacs and micro all take it; the editor
            // string may carry its own arguments (`code -w`).
            let mut words = editor.split_whitespace();
            let ran = match words.next() {
                Some(prog) => std::process::Command::new(prog)
                    .args(words)
                    .arg(format!("+{line}"))
                    .arg(&file)
                    .status()
                    .map_err(|e| format!("cannot run {prog}: {e}")),
                None => Err("EDITOR is empty".into()),
            };
            let _ = t::enable_raw_mode();
            let _ = execute!(out, t::EnterAlternateScreen, ev::EnableMouseCapture);
            let _ = term.clear();
            Some(match ran {
                Ok(_) => format!("back from {editor} ({}:{line})", file.display()),
                Err(e) => e,
            })
        }
        _ => None,
    }
}

/// Where a frame's source file is: the path itself, else under the folders of
/// `GAPTOP_SRC_PATH` (colon-separated), the working folder, or Python's own paths (frames of
/// installed packages are relative to site-packages).
fn find_source(path: &str) -> Option<std::path::PathBuf> {
    let p = std::path::Path::new(path);
    if p.is_absolute() {
        return p.is_file().then(|| p.to_path_buf());
    }
    let mut roots: Vec<std::path::PathBuf> = std::env::var("GAPTOP_SRC_PATH")
        .map(|v| v.split(':').map(Into::into).collect())
        .unwrap_or_default();
    roots.push(".".into());
    if let Ok(o) = std::process::Command::new("python3")
        .args([
            "-c",
            "import sys; print('\\n'.join(p for p in sys.path if p))",
        ])
        .output()
    {
        roots.extend(String::from_utf8_lossy(&o.stdout).lines().map(Into::into));
    }
    roots.into_iter().map(|r| r.join(p)).find(|f| f.is_file())
}

/// How the loop draws a frame: `crate::views::render`, handed in by the caller so that the
/// model does not depend on its views.
pub type Render<B> = fn(&mut Terminal<B>, &mut App) -> Result<(), <B as Backend>::Error>;

/// What waiting on the terminal found.
enum Input {
    Waited,
    /// The terminal hung up (ssh dropped, tmux killed): no more input will come.
    Gone,
}

/// Waits up to `timeout` for input on stdin. crossterm's own poll spins forever on a hung-up
/// terminal, so gaptop looks first and only asks crossterm once it knows the terminal is there.
fn wait_input(timeout: Duration) -> Input {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    static WAS_TERMINAL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let stdin = std::io::stdin();
    if !std::io::IsTerminal::is_terminal(&stdin) {
        // A terminal that hung up stops answering as one (its ioctls fail): that is the end
        // of input, not a reason to poll it forever.
        if *WAS_TERMINAL.get_or_init(|| false) {
            return Input::Gone;
        }
        std::thread::sleep(timeout);
        return Input::Waited;
    }
    WAS_TERMINAL.get_or_init(|| true);
    let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
    let ms = PollTimeout::from(timeout.as_millis().min(1000) as u16);
    match poll(&mut fds, ms) {
        Ok(n) if n > 0 => match fds[0].revents() {
            Some(r)
                if r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) =>
            {
                Input::Gone
            }
            _ => Input::Waited,
        },
        _ => Input::Waited,
    }
}

/// Runs the UI on any backend until the user quits or a termination signal arrives; `tap`
/// (`--metrics`) takes the live store's windows for Prometheus.
pub fn run_loop<B: Backend>(
    term: &mut Terminal<B>,
    app: &mut App,
    feed: &mut Feed,
    stop: &AtomicBool,
    render: Render<B>,
    mut tap: Option<&mut crate::serve::Tap>,
) -> anyhow::Result<()>
where
    B::Error: Send + Sync + 'static,
{
    let mut last_draw = Instant::now() - Duration::from_secs(1);
    let mut dirty = true;
    app.tick();
    loop {
        if stop.load(Ordering::Relaxed) {
            app.quit = true;
        }
        match feed {
            Feed::None => {}
            Feed::Demo(rx) => dirty |= drain(app, rx, Duration::from_millis(30)),
            Feed::Attached(a) => {
                dirty |= drain(app, &a.rx, Duration::from_millis(30));
                if app.source == SourceState::Live
                    && !gaptop_core::sources::attach::alive(a.target.pid)
                {
                    app.update(Msg::ProgramEnded(format!("pid {} ended", a.target.pid)));
                    dirty = true;
                }
            }
            Feed::Live(l) => {
                dirty |= drain(app, &l.rx, Duration::from_millis(30));
                if app.source == SourceState::Live {
                    if let Ok(Some(st)) = l.child.try_wait() {
                        let how = gaptop_core::sources::live::how_it_ended(st);
                        app.update(Msg::ProgramEnded(how));
                        dirty = true;
                    }
                }
            }
        }
        if app.quit {
            return Ok(());
        }
        if let Some(t) = tap.as_deref_mut() {
            t.poll(&app.store);
        }
        if dirty || last_draw.elapsed() > Duration::from_millis(250) {
            app.tick();
            render(term, app)?;
            last_draw = Instant::now();
            dirty = false;
        }
        if let Input::Gone = wait_input(Duration::from_millis(20)) {
            // A hang-up, as SIGHUP would have said.
            super::ending::hung_up();
            stop.store(true, Ordering::Relaxed);
            app.quit = true;
            continue;
        }
        // Key, mouse and resize events (resizes arrive by signal, not on stdin).
        while event::poll(Duration::ZERO)? {
            let fx = match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    dirty = true;
                    // While a tree search is typed, keys are its text, not bindings.
                    let a = if app.search.is_some() {
                        super::keymap::search_action(&k)
                    } else {
                        app.keys.action(&k)
                    };
                    let ctrl_c = k.code == event::KeyCode::Char('c')
                        && k.modifiers.contains(event::KeyModifiers::CONTROL);
                    if ctrl_c && a == Some(Action::Quit) {
                        super::ending::interrupted();
                    }
                    match a {
                        Some(a) => app.update(a),
                        None if app.help => app.update(Action::Help),
                        None => Vec::new(),
                    }
                }
                Event::Mouse(m) => {
                    dirty = true;
                    let kind = match m.kind {
                        MouseEventKind::ScrollUp => MouseKind::ScrollUp,
                        MouseEventKind::ScrollDown => MouseKind::ScrollDown,
                        MouseEventKind::Down(event::MouseButton::Left) => MouseKind::Click,
                        _ => MouseKind::Other,
                    };
                    app.update(Msg::Mouse {
                        column: m.column,
                        row: m.row,
                        kind,
                    })
                }
                Event::Resize(w, h) => {
                    dirty = true;
                    app.update(Msg::Resize(w, h))
                }
                _ => Vec::new(),
            };
            for e in perform(app, fx, feed) {
                if let Some(said) = terminal_effect(term, e) {
                    app.update(Msg::Said(said));
                }
                dirty = true;
            }
        }
    }
}

/// Asks the program to stop, harder each time: SIGINT (what Ctrl-C would send it outside
/// gaptop; Python raises KeyboardInterrupt), then SIGTERM, then SIGKILL. Says what it did.
fn stop_program(child: &mut std::process::Child, nth: u32, key: Option<&str>) -> String {
    use nix::sys::signal::Signal;
    if !matches!(child.try_wait(), Ok(None)) {
        return "the program has already ended".into();
    }
    let (sig, next) = match nth {
        1 => (Signal::SIGINT, Some(Signal::SIGTERM)),
        2 => (Signal::SIGTERM, Some(Signal::SIGKILL)),
        _ => (Signal::SIGKILL, None),
    };
    let next = match (next, key) {
        (Some(n), Some(k)) => format!("; {k} again sends {}", n.as_str()),
        _ => String::new(),
    };
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    match nix::sys::signal::kill(pid, sig) {
        Ok(()) => format!("sent {} to the program (pid {pid}){next}", sig.as_str()),
        Err(e) => format!("cannot signal the program (pid {pid}): {e}"),
    }
}

/// The UI needs a terminal on stdout; without one (output redirected, a job without a tty) say
/// so before anything starts, rather than fail inside the terminal set-up.
pub fn need_terminal(cmd: &str) -> anyhow::Result<()> {
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return Ok(());
    }
    let instead = match cmd {
        "run" => "; `gaptop record -o FILE -- CMD` records without one",
        "open" => "; `gaptop report FILE` prints the analysis as text",
        "attach" => "; `gaptop capture PID -o FILE` records without one",
        "demo" => "; `gaptop demo --once` prints its last screen without one",
        _ => "",
    };
    anyhow::bail!("`gaptop {cmd}` shows its UI in a terminal, and stdout is not one{instead}")
}

/// Runs the UI in the real terminal, restoring it on every way out (quit, error, panic,
/// SIGTERM, SIGHUP).
pub fn run(
    app: App,
    feed: Feed,
    stop: Arc<AtomicBool>,
    render: Render<ratatui::backend::CrosstermBackend<std::io::Stdout>>,
) -> anyhow::Result<()> {
    run_with(app, feed, stop, render, None)
}

/// [`run`], with the live store's metrics served (`--metrics`).
pub fn run_with(
    mut app: App,
    mut feed: Feed,
    stop: Arc<AtomicBool>,
    render: Render<ratatui::backend::CrosstermBackend<std::io::Stdout>>,
    mut tap: Option<crate::serve::Tap>,
) -> anyhow::Result<()> {
    let mut term = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            let _ = ratatui::try_restore();
            if let Feed::Live(l) = &mut feed {
                // No UI to watch it with: stop the program rather than leave it running unseen.
                l.stop.store(true, Ordering::Relaxed);
                let pid = nix::unistd::Pid::from_raw(l.child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                let _ = l.child.wait();
            }
            anyhow::bail!("cannot set up the terminal: {e}");
        }
    };
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::EnableMouseCapture);
    let r = run_loop(&mut term, &mut app, &mut feed, &stop, render, tap.as_mut());
    let _ = crossterm::execute!(std::io::stdout(), crossterm::event::DisableMouseCapture);
    let _ = ratatui::try_restore();
    // A terminal that hung up cannot show its cursor again, and ratatui's drop would say so
    // with a panicking eprintln: there is nothing left to restore on it.
    if term.show_cursor().is_err() {
        std::mem::forget(term);
    } else {
        drop(term);
    }
    if app.export_job.is_some() {
        gaptop_core::say!("gaptop: finishing the export before quitting");
    }
    if let Some(m) = app.finish_export() {
        gaptop_core::say!("gaptop: {m}");
    }
    if let Feed::Attached(a) = &mut feed {
        // Quit, or killed, or hung up: either way the program runs on, dormant again.
        let pid = a.target.pid;
        match a.detach() {
            Ok(()) if gaptop_core::sources::attach::alive(pid) => {
                gaptop_core::say!("gaptop: detached; pid {pid} runs on, dormant")
            }
            Ok(()) => {}
            Err(e) => gaptop_core::say!("gaptop: {e:#}"),
        }
    }
    if let Feed::Live(l) = &mut feed {
        l.stop.store(true, Ordering::Relaxed);
        // Killed, hung up, or the terminal failed under the UI.
        let signalled = stop.load(Ordering::Relaxed) || r.is_err();
        if signalled {
            // Killed or hung up: take the program down with us rather than orphan it.
            if let Ok(None) = l.child.try_wait() {
                let pid = nix::unistd::Pid::from_raw(l.child.id() as i32);
                let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
                gaptop_core::say!("gaptop: stopped the program (pid {pid}) on signal");
            }
        } else if let Ok(None) = l.child.try_wait() {
            gaptop_core::say!(
                "gaptop: {} (pid {}) keeps running without the collector{}",
                app.store
                    .procs
                    .first()
                    .map(|p| p.label.as_str())
                    .unwrap_or("the program"),
                l.child.id(),
                l.log
                    .as_ref()
                    .map(|p| format!("; its output goes on into {}", p.display()))
                    .unwrap_or_default()
            );
        }
    }
    r
}

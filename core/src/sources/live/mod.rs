//! The live source: a private Unix socket, the profiled child started with the collector
//! injected, and reader threads that decode each connection's frames.
//!
//! Everything arrives on one channel as [`LiveEvent`]s, so the consumer (the UI loop or the
//! recorder) has a single place that changes state.

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use gaptop_wire::Decoder;

pub use event::LiveEvent;

mod cupti;
pub mod event;
pub mod probe;
pub use cupti::{cupti_candidates, find_cupti};
use cupti::{entries_named, site_packages_near};

/// A private directory holding the socket, removed on drop (or, after a SIGKILL, by the next
/// viewer's [`SocketDir::create`]).
pub struct SocketDir {
    pub dir: PathBuf,
    pub socket: PathBuf,
}

impl SocketDir {
    /// A new socket directory, `gaptop-PID-*` in the system's temporary folder; those that a
    /// killed viewer (`record`, `run`) left there, whose process is gone, are removed first.
    pub fn create() -> anyhow::Result<(SocketDir, UnixListener)> {
        SocketDir::create_in(&std::env::temp_dir())
    }

    fn create_in(base: &Path) -> anyhow::Result<(SocketDir, UnixListener)> {
        let dir = private_dir(base, "socket")?;
        let socket = dir.join("collector.sock");
        let l = UnixListener::bind(&socket)
            .with_context(|| format!("cannot listen on {}", socket.display()))?;
        std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o600))?;
        Ok((SocketDir { dir, socket }, l))
    }
}

/// A new folder only this user can enter, `gaptop-PID-*` in `base`, for the viewer's `what`
/// (its socket, the probe's log); those that a killed viewer left there, whose process is
/// gone, are removed first.
pub(crate) fn private_dir(base: &Path, what: &str) -> anyhow::Result<PathBuf> {
    crate::files::sweep_dead(base, "gaptop-");
    for i in 0..100u32 {
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let dir = base.join(format!("gaptop-{}-{nonce:x}-{i}", std::process::id()));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).context(format!("cannot create the {what} directory")),
        }
    }
    bail!(
        "cannot create a private {what} directory in {}",
        base.display()
    )
}

/// Where program `prog` of a command is: a path with a `/` where it is a file, else the first
/// file of that name on PATH (as the command would be started).
pub fn program_path(prog: &str) -> Option<PathBuf> {
    if prog.contains('/') {
        return Some(PathBuf::from(prog)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
}

impl Drop for SocketDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.socket);
        // The collectors' Python layouts (`python-<pid>`, `.python-<pid>.tmp`).
        if let Ok(d) = std::fs::read_dir(&self.dir) {
            for e in d.flatten() {
                if e.file_name().to_string_lossy().contains("python-") {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Reads one connection until EOF or a protocol error, forwarding frames in batches.
pub fn read_connection(conn: u32, mut s: impl Read, tx: Sender<LiveEvent>) {
    let mut d = Decoder::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match s.read(&mut buf) {
            Ok(0) => {
                let why = (d.pending() > 0)
                    .then(|| format!("connection ended inside a frame ({} bytes)", d.pending()));
                let _ = tx.send(LiveEvent::Closed(conn, why));
                return;
            }
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                let _ = tx.send(LiveEvent::Closed(conn, Some(e.to_string())));
                return;
            }
        };
        d.feed(&buf[..n]);
        let mut frames = Vec::new();
        loop {
            match d.next_frame() {
                Ok(Some(f)) => frames.push(f),
                Ok(None) => break,
                Err(e) => {
                    if !frames.is_empty() {
                        let _ = tx.send(LiveEvent::Frames(conn, frames));
                    }
                    let _ = tx.send(LiveEvent::Closed(
                        conn,
                        Some(format!("protocol error: {e}")),
                    ));
                    return;
                }
            }
        }
        if !frames.is_empty() && tx.send(LiveEvent::Frames(conn, frames)).is_err() {
            return;
        }
    }
}

/// Accepts connections until `stop` is set; each gets a reader thread.
pub fn accept_loop(l: UnixListener, tx: Sender<LiveEvent>, stop: Arc<AtomicBool>) {
    let next = AtomicU32::new(1);
    let _ = l.set_nonblocking(true);
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((s, _)) => {
                let _ = s.set_nonblocking(false);
                if !same_user(&s) {
                    let _ = tx.send(LiveEvent::Closed(
                        0,
                        Some("refused a connection from another user".into()),
                    ));
                    continue;
                }
                let id = next.fetch_add(1, Ordering::Relaxed);
                let tx = tx.clone();
                let _ = std::thread::Builder::new()
                    .name(format!("gaptop-conn-{id}"))
                    .spawn(move || read_connection(id, s, tx));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// The socket's directory is 0700 and the socket 0600, so only the owner (and root) can
/// connect; the peer's credentials are checked as well, so a root process of another user's
/// session cannot feed this viewer either.
fn same_user(s: &UnixStream) -> bool {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    match getsockopt(s, PeerCredentials) {
        Ok(c) => c.uid() == nix::unistd::getuid().as_raw(),
        Err(_) => false,
    }
}

/// Where gaptop looks for the collector library.
pub fn find_collector() -> anyhow::Result<PathBuf> {
    if let Some(p) = std::env::var_os("GAPTOP_COLLECTOR") {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        bail!("GAPTOP_COLLECTOR={} is not a file", p.display());
    }
    let exe = std::env::current_exe().context("cannot locate the gaptop binary")?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let near = ["", "../lib", "../lib/gaptop"];
    // Installed by pip (the wheel): the binary in the environment's bin/, the library in its
    // `gaptop` package.
    let sites: Vec<PathBuf> = site_packages_near(dir)
        .into_iter()
        .filter(|sp| sp.is_dir())
        .collect();
    let cands = near
        .iter()
        .map(|d| dir.join(d))
        .chain(sites.iter().map(|sp| sp.join("gaptop")))
        .map(|d| d.join("libgaptop_collector.so"));
    for cand in cands {
        if cand.is_file() {
            return Ok(cand);
        }
    }
    let pkg: String = sites
        .iter()
        .map(|sp| format!(", not in {}", sp.join("gaptop").display()))
        .collect();
    bail!(
        "libgaptop_collector.so (the collector) is missing: not next to {} (or in ../lib, ../lib/gaptop){pkg}; set GAPTOP_COLLECTOR",
        exe.display()
    )
}

/// What NVTX_INJECTION64_PATH should be for the program: libcupti in `dir` (the folder put
/// first on its LD_LIBRARY_PATH, so the library CUDA's CUPTI is), as CUPTI documents for its
/// NVTX records; `libcupti.so` itself where it exists. None when GAPTOP_NVTX=0, or when the
/// environment names an NVTX injection already (another tool's: it is left alone).
pub fn nvtx_injection(dir: &Path) -> Option<PathBuf> {
    if std::env::var("GAPTOP_NVTX").is_ok_and(|v| v == "0")
        || std::env::var_os("NVTX_INJECTION64_PATH").is_some()
    {
        return None;
    }
    let plain = dir.join("libcupti.so");
    if plain.is_file() {
        return Some(plain);
    }
    entries_named(dir, "libcupti.so.").into_iter().next()
}

pub struct Launch {
    pub child: Child,
    pub dir: SocketDir,
    pub stop: Arc<AtomicBool>,
    pub rx: Receiver<LiveEvent>,
    pub tx: Sender<LiveEvent>,
    /// Where the program's output goes, when it is not the terminal.
    pub log: Option<PathBuf>,
}

/// How a program ended, in a few words: `exit status 3`, `killed by signal 9 (SIGKILL)`.
pub fn how_it_ended(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(sig)) => {
            let name = nix::sys::signal::Signal::try_from(sig)
                .map(|n| format!(" ({})", n.as_str()))
                .unwrap_or_default();
            format!("killed by signal {sig}{name}")
        }
        (None, None) => "ended".into(),
    }
}

/// What the collector takes at each launch, besides the GPU records.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Native frames between the interpreter and the CUDA call (costs time at each launch).
    pub native: bool,
    /// Sample the program's threads from outside it (None: no CPU samples).
    pub samples: Option<super::cpu::SamplerConfig>,
}

/// The environment that starts a program with a dormant collector: the collector injected,
/// libcupti's folder on the library path, `GAPTOP_DORMANT=1`, and the job's label if given.
pub fn dormant_env(job: Option<&str>) -> anyhow::Result<DormantEnv> {
    let mut env = vec![
        ("CUDA_INJECTION64_PATH", find_collector()?.into_os_string()),
        ("LD_LIBRARY_PATH", find_cupti()?.into_os_string()),
        ("GAPTOP_DORMANT", "1".into()),
    ];
    if let Some(j) = job {
        env.push(("GAPTOP_JOB", j.into()));
    }
    Ok(env)
}

/// The variables that start a program with a dormant collector, in order.
pub type DormantEnv = Vec<(&'static str, std::ffi::OsString)>;

/// [`dormant_env`] for `gaptop env`, whose lines are often meant for another machine: where
/// libcupti is not found here, LD_LIBRARY_PATH is where the CUDA toolkit puts it
/// (`$CUDA_HOME/extras/CUPTI/lib64`, else under /usr/local/cuda), and the warning says so.
pub fn dormant_env_for_elsewhere(
    job: Option<&str>,
) -> anyhow::Result<(DormantEnv, Option<String>)> {
    if let Ok(env) = dormant_env(job) {
        return Ok((env, None));
    }
    if find_cupti().is_ok() {
        return dormant_env(job).map(|e| (e, None)); // the collector is what failed
    }
    let home = std::env::var_os("CUDA_HOME").unwrap_or_else(|| "/usr/local/cuda".into());
    let guess = PathBuf::from(home).join("extras/CUPTI/lib64");
    let mut env = vec![
        ("CUDA_INJECTION64_PATH", find_collector()?.into_os_string()),
        ("LD_LIBRARY_PATH", guess.clone().into_os_string()),
        ("GAPTOP_DORMANT", "1".into()),
    ];
    if let Some(j) = job {
        env.push(("GAPTOP_JOB", j.into()));
    }
    let warning = format!(
        "no libcupti found here (`gaptop run` says where it looked); LD_LIBRARY_PATH={} is a \
         guess: set it to the folder holding libcupti.so on the machine that runs the program",
        guess.display()
    );
    Ok((env, Some(warning)))
}

/// `cmd` with a dormant collector (libcupti's folder before the library path it had), not
/// started yet.
pub fn dormant_command(cmd: &[String], job: Option<&str>, native: bool) -> anyhow::Result<Command> {
    let Some((prog, args)) = cmd.split_first() else {
        bail!("no command given: put it after --");
    };
    let mut c = Command::new(prog);
    c.args(args);
    for (k, v) in dormant_env(job)? {
        if k == "LD_LIBRARY_PATH" {
            let mut ld = v;
            if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
                ld.push(":");
                ld.push(old);
            }
            c.env(k, ld);
        } else {
            c.env(k, v);
        }
    }
    if native {
        c.env("GAPTOP_NATIVE", "1");
    }
    Ok(c)
}

/// `gaptop run --dormant`: becomes `cmd` (same pid, same terminal and signals) with a dormant
/// collector. Returns only if it cannot.
pub fn exec_dormant(cmd: &[String], job: Option<&str>, native: bool) -> anyhow::Error {
    use std::os::unix::process::CommandExt;
    let mut c = match dormant_command(cmd, job, native) {
        Ok(c) => c,
        Err(e) => return e,
    };
    let pid = std::process::id();
    match control_dir_refused() {
        None => crate::say!(
            "gaptop: {} runs with a dormant collector (pid {pid}): `gaptop attach {pid}` from \
             any shell of yours turns collection on",
            cmd[0]
        ),
        Some(why) => crate::say!(
            "gaptop: {} runs, but its collector cannot be attached to: {why}; set \
             GAPTOP_CONTROL_DIR to a folder of yours (mode 0700) for `gaptop attach` to work",
            cmd[0]
        ),
    }
    let e = c.exec();
    anyhow::anyhow!("cannot start {}: {e}", cmd[0])
}

/// Why the dormant collector's control folder (the one it would use with this environment)
/// would be refused, as the collector would say it; None when it is fine (made now if
/// missing, as the collector would).
fn control_dir_refused() -> Option<String> {
    use gaptop_wire::control as ctl;
    let uid = nix::unistd::getuid().as_raw();
    let dir = ctl::user_dir(uid, |k| std::env::var(k).ok());
    ctl::ensure_dir(&dir, uid).err()
}

/// Starts `cmd` with the collector injected, listening for it (and its children) on a fresh
/// private socket. `capture` sends the child's output to the channel (and a log) instead of the
/// terminal.
pub fn launch(cmd: &[String], capture: Option<&Path>, opts: &Options) -> anyhow::Result<Launch> {
    let Some((prog, args)) = cmd.split_first() else {
        bail!("no command given: use gaptop run -- CMD ARGS...");
    };
    let collector = find_collector()?;
    let cupti = find_cupti()?;
    let (dir, listener) = SocketDir::create()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let tx = tx.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("gaptop-accept".into())
            .spawn(move || accept_loop(listener, tx, stop))?;
    }
    let mut ld = std::ffi::OsString::from(&cupti);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        ld.push(":");
        ld.push(old);
    }
    let mut c = Command::new(prog);
    c.args(args)
        .env("CUDA_INJECTION64_PATH", &collector)
        .env("GAPTOP_SOCKET", &dir.socket)
        .env("LD_LIBRARY_PATH", ld)
        .stdin(Stdio::null());
    if let Some(lib) = nvtx_injection(&cupti) {
        c.env("NVTX_INJECTION64_PATH", lib);
    }
    if opts.native {
        c.env("GAPTOP_NATIVE", "1");
    }
    if let Some(log) = capture {
        // The program writes straight into the log (stdout and stderr, one shared file
        // position), and the output pane follows the file: no pipe through gaptop, so quitting
        // the viewer never leaves the program writing into a closed pipe. A log that exists is
        // appended to, never emptied (it may be an earlier run's, or any file of the user's),
        // and the pane follows from where this run's output begins.
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot create the log {}", log.display()))?;
        let f2 = f.try_clone()?;
        let mut reader = std::fs::File::open(log)
            .with_context(|| format!("cannot read the log {}", log.display()))?;
        if f.metadata()?.is_file() {
            use std::io::{Seek, SeekFrom};
            reader.seek(SeekFrom::End(0))?;
        }
        c.stdout(Stdio::from(f)).stderr(Stdio::from(f2));
        let child = c.spawn().with_context(|| format!("cannot start {prog}"))?;
        {
            let tx = tx.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("gaptop-output".into())
                .spawn(move || follow(reader, tx, stop))?;
        }
        start_sampler(&child, opts, &dir, &tx, &stop)?;
        return Ok(Launch {
            child,
            dir,
            stop,
            rx,
            tx,
            log: Some(log.to_path_buf()),
        });
    }
    let child = c.spawn().with_context(|| format!("cannot start {prog}"))?;
    start_sampler(&child, opts, &dir, &tx, &stop)?;
    Ok(Launch {
        child,
        dir,
        stop,
        rx,
        tx,
        log: None,
    })
}

/// Samples the child's threads (and its children's) on a thread of the viewer, when asked to.
fn start_sampler(
    child: &Child,
    opts: &Options,
    dir: &SocketDir,
    tx: &Sender<LiveEvent>,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<()> {
    if let Some(cfg) = opts.samples {
        let (pid, tx, stop) = (child.id(), tx.clone(), stop.clone());
        let py_dir = Some(dir.dir.clone());
        std::thread::Builder::new()
            .name("gaptop-sampler".into())
            .spawn(move || super::cpu::stream::run(pid, cfg, py_dir, tx, stop))?;
    }
    Ok(())
}

/// The longest output line kept whole; longer ones are cut into pieces this long.
const MAX_LINE: usize = 4096;

/// Sends the program's output lines as the log grows. A last line without its newline is sent
/// once it has sat unfinished for half a second.
fn follow(mut log: std::fs::File, tx: Sender<LiveEvent>, stop: Arc<AtomicBool>) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    let mut unfinished_since: Option<std::time::Instant> = None;
    let send = |line: &[u8]| {
        let s = String::from_utf8_lossy(line).trim_end().to_string();
        tx.send(LiveEvent::Output(s)).is_ok()
    };
    loop {
        match log.read(&mut chunk) {
            Ok(0) => {
                if unfinished_since.is_some_and(|t| t.elapsed() > Duration::from_millis(500)) {
                    if !send(&buf) {
                        return;
                    }
                    buf.clear();
                    unfinished_since = None;
                }
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                // Lines end at \n, and at \r too: progress bars redraw with \r and would
                // otherwise make one endless line. Overlong lines are cut.
                loop {
                    let end = memchr::memchr2(b'\n', b'\r', &buf);
                    let (line, used) = match end {
                        Some(i) if i <= MAX_LINE => (i, i + 1),
                        _ if buf.len() >= MAX_LINE => (MAX_LINE, MAX_LINE),
                        _ => break,
                    };
                    if line > 0 && !send(&buf[..line]) {
                        return;
                    }
                    buf.drain(..used);
                }
                unfinished_since = (!buf.is_empty()).then(std::time::Instant::now);
            }
            Err(_) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A socket folder whose viewer was killed (its pid gone) is removed when the next one
    /// is made; one whose viewer lives is kept, as is what is not a socket folder.
    #[test]
    fn socket_folders_of_dead_viewers_are_removed_at_the_next_start() {
        let base = std::env::temp_dir().join(format!("gaptop-sockbase-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let mut c = std::process::Command::new("true").spawn().unwrap();
        let dead = c.id();
        c.wait().unwrap();
        let left = base.join(format!("gaptop-{dead}-1f-0"));
        let live = base.join(format!("gaptop-{}-2f-0", std::process::id()));
        let other = base.join(format!("gaptop-record-x-{dead}"));
        for d in [&left, &live, &other] {
            std::fs::create_dir(d).unwrap();
            std::fs::write(d.join("collector.sock"), b"").unwrap();
        }
        let (sd, _l) = SocketDir::create_in(&base).unwrap();
        assert!(!left.exists(), "the dead viewer's folder stays");
        assert!(live.exists() && other.exists());
        assert!(sd.socket.exists());
        drop(sd);
        std::fs::remove_dir_all(&base).unwrap();
    }

    /// The output pane's lines as the log grows: \n and \r end lines (a progress bar shows its
    /// last state instead of growing one endless line), overlong lines are cut, and an
    /// unfinished last line shows after half a second.
    #[test]
    fn output_follows_the_log_line_by_line() {
        let path = std::env::temp_dir().join(format!("gaptop-follow-{}.log", std::process::id()));
        let mut w = std::fs::File::create(&path).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let reader = std::fs::File::open(&path).unwrap();
        let s2 = stop.clone();
        let t = std::thread::spawn(move || follow(reader, tx, s2));
        let next = || match rx.recv_timeout(Duration::from_secs(5)) {
            Ok(LiveEvent::Output(l)) => l,
            Ok(_) => panic!("expected a line, got another event"),
            Err(e) => panic!("no line: {e}"),
        };
        w.write_all(b"epoch 1\nloss 0.5\r\n").unwrap();
        assert_eq!((next(), next()), ("epoch 1".into(), "loss 0.5".into()));
        w.write_all(b"  3%|#  \r  7%|##  \r").unwrap();
        assert_eq!((next(), next()), ("  3%|#".into(), "  7%|##".into()));
        w.write_all(&vec![b'x'; MAX_LINE + 10]).unwrap();
        w.write_all(b"\n").unwrap();
        assert_eq!(next().len(), MAX_LINE);
        assert_eq!(next(), "x".repeat(10));
        w.write_all(b"no newline yet").unwrap();
        assert_eq!(next(), "no newline yet");
        stop.store(true, Ordering::Relaxed);
        t.join().unwrap();
        let _ = std::fs::remove_file(&path);
    }
}

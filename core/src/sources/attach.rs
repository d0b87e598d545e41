//! Attaching to a dormant collector (`gaptop attach`, `capture`, `serve PID`): finding the
//! programs that run one (their control sockets in the user's folder, `gaptop_wire::control`),
//! asking one to collect into a fresh private socket of ours, and letting it go again.
//!
//! What arrives comes as [`LiveEvent`]s on one channel, as from `live::launch`, so the UI and
//! the recorder treat an attach as they treat a program they started.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use gaptop_wire::control::{self as ctl, Reply, Request};

use super::live::{accept_loop, LiveEvent, SocketDir};

/// How long a request may take to be answered (an attach subscribes to CUPTI and enables it).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(15);

/// A program running a dormant collector, as its control socket and status say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dormant {
    pub pid: u32,
    pub label: String,
    pub socket: PathBuf,
    /// Who is attached (None: dormant).
    pub attached: Option<String>,
    /// Its command line.
    pub command: String,
}

fn uid() -> u32 {
    nix::unistd::getuid().as_raw()
}

/// The folders that may hold the user's control sockets: the one this environment names, and
/// `/tmp/gaptop-UID` where programs started without `XDG_RUNTIME_DIR` (services) put theirs.
pub fn control_dirs() -> Vec<PathBuf> {
    let uid = uid();
    let mut v = vec![ctl::user_dir(uid, |k| std::env::var(k).ok())];
    if std::env::var_os("GAPTOP_CONTROL_DIR").is_none() {
        let fb = ctl::fallback_dir(uid);
        if !v.contains(&fb) {
            v.push(fb);
        }
    }
    v
}

fn command_line(pid: u32) -> String {
    ctl::command_line(Some(pid)).join(" ")
}

/// A process's state letter and parent, from `/proc/PID/stat`.
pub fn stat(pid: u32) -> Option<(String, u32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...: comm may hold spaces and parentheses.
    let mut f = stat.rsplit_once(')')?.1.split_whitespace();
    let state = f.next()?.to_string();
    Some((state, f.next()?.parse().ok()?))
}

/// Whether process `pid` is alive (an exited one its parent has not reaped yet is not).
pub fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != "Z" && state != "X")
}

/// Connects to a control socket after checking it is the user's alone.
fn connect(socket: &Path) -> anyhow::Result<UnixStream> {
    ctl::check_socket(socket, uid()).map_err(anyhow::Error::msg)?;
    let s = UnixStream::connect(socket)
        .with_context(|| format!("cannot reach {}", socket.display()))?;
    s.set_read_timeout(Some(ANSWER_TIMEOUT))?;
    Ok(s)
}

/// Sends one request and reads its reply on `s`.
fn ask(s: &mut UnixStream, r: &Request) -> anyhow::Result<Reply> {
    s.write_all(r.encode().as_bytes())
        .context("the collector closed its control socket")?;
    let mut line = String::new();
    let mut rd = BufReader::new(&*s);
    rd.read_line(&mut line)
        .context("no answer from the collector")?;
    if line.is_empty() {
        bail!("the collector closed its control socket without answering");
    }
    Reply::parse(&line).map_err(anyhow::Error::msg)
}

/// The user's dormant programs, by pid. Sockets of processes that have gone are removed
/// (they are the user's own, in the user's own folder); a folder or socket open to others is
/// refused and said in `refused`.
pub fn list(refused: &mut Vec<String>) -> Vec<Dormant> {
    let uid = uid();
    let mut found = Vec::new();
    for dir in control_dirs() {
        if !dir.exists() {
            continue;
        }
        if let Err(e) = ctl::check_dir(&dir, uid) {
            refused.push(e);
            continue;
        }
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((pid, label)) = ctl::parse_socket_name(&name) else {
                continue;
            };
            let socket = e.path();
            if let Err(e) = ctl::check_socket(&socket, uid) {
                refused.push(e);
                continue;
            }
            if !alive(pid) {
                let _ = std::fs::remove_file(&socket);
                continue;
            }
            let status = connect(&socket).and_then(|mut s| ask(&mut s, &Request::Status));
            match status {
                Ok(Reply::State { attached }) => found.push(Dormant {
                    pid,
                    label,
                    socket,
                    attached,
                    command: command_line(pid),
                }),
                // Its pid taken by another process since: nobody listens any more.
                Err(e)
                    if e.root_cause()
                        .downcast_ref::<std::io::Error>()
                        .map(|e| e.kind())
                        == Some(std::io::ErrorKind::ConnectionRefused) =>
                {
                    let _ = std::fs::remove_file(&socket);
                }
                Ok(other) => refused.push(format!("{}: answered {other:?}", socket.display())),
                Err(e) => refused.push(format!("{}: {e:#}", socket.display())),
            }
        }
    }
    found.sort_by_key(|d| d.pid);
    found
}

/// What `gaptop attach` with no argument prints: the dormant programs, one a line.
pub fn table(ds: &[Dormant]) -> String {
    let mut s = format!("{:>8}  {:<24} {:<32} command\n", "pid", "label", "state");
    for d in ds {
        let state = match &d.attached {
            None => "dormant".to_string(),
            Some(w) => format!("attached by {w}"),
        };
        let mut cmd = d.command.clone();
        if cmd.len() > 80 {
            let mut n = 80;
            while !cmd.is_char_boundary(n) {
                n -= 1;
            }
            cmd.truncate(n);
            cmd.push('…');
        }
        s.push_str(&format!(
            "{:>8}  {:<24} {:<32} {cmd}\n",
            d.pid, d.label, state
        ));
    }
    s
}

/// The dormant program `target` names: a pid, or a job label or program name (which must
/// name exactly one).
pub fn find(target: &str) -> anyhow::Result<Dormant> {
    let mut refused = Vec::new();
    let all = list(&mut refused);
    let by_pid = target.parse::<u32>().ok();
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let matches: Vec<&Dormant> = all
        .iter()
        .filter(|d| match by_pid {
            Some(p) => d.pid == p,
            None => {
                d.label == target
                    || d.command
                        .split(' ')
                        .take(3)
                        .any(|a| base(a) == target || a == target)
            }
        })
        .collect();
    match matches.as_slice() {
        [d] => Ok((*d).clone()),
        [] => {
            let why = if refused.is_empty() {
                String::new()
            } else {
                format!(" ({})", refused.join("; "))
            };
            let what = match by_pid {
                Some(p) if alive(p) => format!("process {p} runs no dormant gaptop collector"),
                Some(p) => format!("no process {p}"),
                None => format!("no dormant program matches {target:?}"),
            };
            bail!(
                "{what}{why}; `gaptop attach` lists them (a program runs one under \
                 `gaptop run --dormant` or with the environment `gaptop env` prints)"
            )
        }
        many => bail!(
            "{target:?} matches {} programs (pids {}): give a pid",
            many.len(),
            many.iter()
                .map(|d| d.pid.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// How this viewer names itself to the collector (and so to anyone refused meanwhile).
pub fn who(what: &str) -> String {
    let tty = std::fs::read_link("/proc/self/fd/0")
        .ok()
        .map(|p| p.display().to_string())
        .filter(|p| p.starts_with("/dev/"))
        .map(|p| format!(" on {}", p.trim_start_matches("/dev/")))
        .unwrap_or_default();
    format!("gaptop {what} (pid {}){tty}", std::process::id())
}

/// A viewer attached to a dormant program: its control connection (whose end detaches), our
/// socket the collector sends to, and the channel its frames arrive on.
pub struct Attachment {
    pub target: Dormant,
    control: Option<UnixStream>,
    pub dir: SocketDir,
    pub stop: Arc<AtomicBool>,
    pub rx: Receiver<LiveEvent>,
    pub tx: Sender<LiveEvent>,
}

/// Attaches to `target`: a socket of ours for its collector to send to, then the request.
/// Refused while another viewer is attached (the reply names it). `samples`: also sample the
/// program's threads from outside it.
pub fn attach(
    target: &Dormant,
    who: &str,
    samples: Option<super::cpu::SamplerConfig>,
) -> anyhow::Result<Attachment> {
    let (dir, listener) = SocketDir::create()?;
    let (tx, rx) = std::sync::mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    {
        let (tx, stop) = (tx.clone(), stop.clone());
        std::thread::Builder::new()
            .name("gaptop-accept".into())
            .spawn(move || accept_loop(listener, tx, stop))?;
    }
    let attached = (|| {
        let mut s = connect(&target.socket)?;
        let req = Request::Attach {
            socket: dir.socket.display().to_string(),
            who: who.to_string(),
        };
        match ask(&mut s, &req)? {
            Reply::Ok => Ok(s),
            Reply::Busy(w) => bail!(
                "pid {} is already attached by {w}: one viewer at a time (`gaptop attach` \
                 lists who)",
                target.pid
            ),
            Reply::Error(e) => bail!("pid {} refused to attach: {e}", target.pid),
            other => bail!("pid {} answered {other:?}", target.pid),
        }
    })();
    let control = match attached {
        Ok(s) => s,
        Err(e) => {
            stop.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    if let Some(cfg) = samples {
        let (pid, tx, stop) = (target.pid, tx.clone(), stop.clone());
        let py_dir = Some(dir.dir.clone());
        std::thread::Builder::new()
            .name("gaptop-sampler".into())
            .spawn(move || super::cpu::stream::run(pid, cfg, py_dir, tx, stop))?;
    }
    Ok(Attachment {
        target: target.clone(),
        control: Some(control),
        dir,
        stop,
        rx,
        tx,
    })
}

impl Attachment {
    /// Turns collection off again and waits for the collector's answer: by then it has sent
    /// what it collected and closed its connection. A program that ended meanwhile needs no
    /// detach.
    pub fn detach(&mut self) -> anyhow::Result<()> {
        let Some(mut s) = self.control.take() else {
            return Ok(());
        };
        if !alive(self.target.pid) {
            return Ok(());
        }
        match ask(&mut s, &Request::Detach) {
            Ok(Reply::Ok) => Ok(()),
            Ok(other) => bail!("pid {} answered the detach with {other:?}", self.target.pid),
            Err(_) if !alive(self.target.pid) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Attachment {
    /// Our end of the control connection closes with us, which detaches too; the sampler
    /// and the accept loop stop.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

//! The control socket of a dormant collector, served by a thread of its own (`gaptop-control`)
//! that no program thread ever waits for. Where the socket lives and what is said on it:
//! `gaptop_wire::control`. Only connections from the program's own user are answered.
//!
//! One viewer at a time is attached: its connection stays open while it is, and its end (a
//! `detach`, the viewer quitting or dying) turns collection off. An attach while one is active
//! is refused with the attached viewer's name; `status` says which it is.

use std::ffi::c_int;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use gaptop_wire::control::{self as ctl, Reply, Request};

use crate::dormant::{self, CuptiState};
use crate::state::Collector;
use crate::switches::Switches;
use crate::FORKED;

/// How often the thread looks at what the sender and the callbacks left for it.
const TICK_MS: c_int = 200;
/// How long a request may take to arrive once connected.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

fn uid() -> u32 {
    // SAFETY: getuid takes no arguments and cannot fail.
    unsafe { libc::getuid() }
}

/// Creates the control socket in the user's folder (made 0700 if missing; refused if it is
/// not the user's alone): `PID.LABEL.sock`, mode 0600.
pub(crate) fn listen(sw: &Switches) -> Result<(UnixListener, PathBuf), String> {
    let uid = uid();
    let dir = ctl::user_dir(uid, |k| std::env::var(k).ok());
    ctl::ensure_dir(&dir, uid)?;
    let label = ctl::job_label(sw.job.as_deref(), &ctl::command_line(None));
    let path = dir.join(ctl::socket_name(std::process::id(), &label));
    // One left by an earlier process with this pid (killed before it could remove it).
    let _ = std::fs::remove_file(&path);
    let l = UnixListener::bind(&path)
        .map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    let ready = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|()| ctl::check_socket(&path, uid))
        .and_then(|()| {
            l.set_nonblocking(true)
                .map_err(|e| format!("{}: {e}", path.display()))
        });
    if let Err(e) = ready {
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok((l, path))
}

/// The peer's uid (SO_PEERCRED), None if it cannot be read.
fn peer_uid(s: &UnixStream) -> Option<u32> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `s` is an open Unix socket; `cred` and `len` are live and sized for the call.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            &mut cred as *mut libc::ucred as *mut libc::c_void,
            &mut len,
        )
    };
    (r == 0).then_some(cred.uid)
}

/// Waits up to TICK_MS for any of `fds` to be readable (or hung up); returns which were.
fn wait_readable(fds: &[c_int]) -> Vec<bool> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `p` is a live array of `p.len()` pollfds.
    let n = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, TICK_MS) };
    p.iter().map(|x| n > 0 && x.revents != 0).collect()
}

/// One request line, None at the connection's end, a timeout or a line too long.
fn read_line(s: &mut UnixStream) -> Option<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 512];
    while line.len() < ctl::MAX_LINE {
        let n = s.read(&mut b).ok()?;
        if n == 0 {
            return None;
        }
        line.extend_from_slice(&b[..n]);
        if let Some(i) = line.iter().position(|&x| x == b'\n') {
            line.truncate(i + 1);
            return Some(String::from_utf8_lossy(&line).into_owned());
        }
    }
    None
}

fn reply(s: &mut UnixStream, r: &Reply) {
    let _ = s.write_all(r.encode().as_bytes());
}

/// The viewer attached now: its connection, and how it named itself.
struct Attached {
    conn: UnixStream,
    who: String,
}

/// The control thread: answers requests, attaches and detaches, and detaches when the
/// sender found the viewer gone. Ends with the process (or in a forked child, at once).
pub(crate) fn serve(c: &'static Collector, l: UnixListener) {
    let mut st = CuptiState::default();
    let mut attached: Option<Attached> = None;
    loop {
        if FORKED.load(Relaxed) || c.shutting_down.load(Relaxed) {
            return;
        }
        let mut fds = vec![l.as_raw_fd()];
        fds.extend(attached.as_ref().map(|a| a.conn.as_raw_fd()));
        let ready = wait_readable(&fds);
        dormant::settle(c, &mut st, false);
        if dormant::take_lost(c) {
            dormant::detach(c, &mut st);
            attached = None;
        }
        if ready.get(1) == Some(&true) {
            if let Some(mut a) = attached.take() {
                match read_line(&mut a.conn).map(|l| Request::parse(&l)) {
                    // A detach asked for, or the viewer gone: either way, off.
                    Some(Ok(Request::Detach)) => {
                        dormant::detach(c, &mut st);
                        reply(&mut a.conn, &Reply::Ok);
                    }
                    None => dormant::detach(c, &mut st),
                    Some(Ok(Request::Status)) => {
                        reply(
                            &mut a.conn,
                            &Reply::State {
                                attached: Some(a.who.clone()),
                            },
                        );
                        attached = Some(a);
                    }
                    Some(Ok(Request::Attach { .. })) => {
                        reply(&mut a.conn, &Reply::Busy(a.who.clone()));
                        attached = Some(a);
                    }
                    Some(Err(e)) => {
                        reply(&mut a.conn, &Reply::Error(e));
                        attached = Some(a);
                    }
                }
            }
        }
        if ready[0] {
            while let Ok((conn, _)) = l.accept() {
                answer(c, &mut st, &mut attached, conn);
            }
        }
    }
}

/// Answers one new connection's request.
fn answer(
    c: &Collector,
    st: &mut CuptiState,
    attached: &mut Option<Attached>,
    mut conn: UnixStream,
) {
    if conn.set_nonblocking(false).is_err() || conn.set_read_timeout(Some(READ_TIMEOUT)).is_err() {
        return;
    }
    if peer_uid(&conn) != Some(uid()) {
        reply(
            &mut conn,
            &Reply::Error("refused: not the program's user".into()),
        );
        return;
    }
    let Some(line) = read_line(&mut conn) else {
        return;
    };
    match Request::parse(&line) {
        Err(e) => reply(&mut conn, &Reply::Error(e)),
        Ok(Request::Status) => reply(
            &mut conn,
            &Reply::State {
                attached: attached.as_ref().map(|a| a.who.clone()),
            },
        ),
        Ok(Request::Detach) => {
            // From another shell: the attached viewer (stuck, say) is let go.
            if attached.take().is_some() {
                dormant::detach(c, st);
            }
            reply(&mut conn, &Reply::Ok);
        }
        Ok(Request::Attach { .. }) if attached.is_some() => {
            let who = attached.as_ref().map(|a| a.who.clone()).unwrap_or_default();
            reply(&mut conn, &Reply::Busy(who));
        }
        Ok(Request::Attach { socket, who }) => match dormant::attach(c, st, &socket) {
            Ok(()) => {
                reply(&mut conn, &Reply::Ok);
                *attached = Some(Attached { conn, who });
            }
            Err(e) => reply(&mut conn, &Reply::Error(e)),
        },
    }
}

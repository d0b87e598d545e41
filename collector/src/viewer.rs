//! The viewer's socket as set-up and each attach open it: `connect`, the `hello` that opens
//! every connection (pid, RANK, command line), and `close`; the sender writes on it. A module
//! of its own because set-up, the attach state machine and the sender all use it, and the
//! sender sits below the first two.

use std::ffi::c_int;

use gaptop_wire as w;

/// The process's command line, as the viewer labels it.
pub(crate) fn label() -> String {
    w::control::command_line(None).join(" ")
}

/// A connection's opening: the hello (pid, RANK, command line).
pub(crate) fn hello() -> Vec<u8> {
    let mut hello = Vec::new();
    let rank = std::env::var("RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(-1);
    w::encode_hello(
        &mut hello,
        &w::Hello::new(std::process::id(), rank, &label()),
    );
    hello
}

pub(crate) fn connect(path: &str) -> Result<c_int, String> {
    use std::os::fd::IntoRawFd;
    let s = std::os::unix::net::UnixStream::connect(path)
        .map_err(|e| format!("cannot reach the viewer at {path}: {e}"))?;
    Ok(s.into_raw_fd())
}

/// Closes a viewer's socket (set-up giving up, a detach, the viewer gone).
pub(crate) fn close(fd: c_int) {
    // SAFETY: `fd` is a socket `connect` opened, owned by the caller and not used after this.
    unsafe { libc::close(fd) };
}

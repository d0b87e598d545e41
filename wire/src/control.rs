//! The control socket of a dormant collector (`GAPTOP_DORMANT=1`): where it is, what it is
//! called, and the one-line requests and replies spoken on it. Shared by the collector, which
//! serves it, and the viewer (`gaptop attach`, `capture`, `serve`), which asks.
//!
//! ```text
//! dir      := $GAPTOP_CONTROL_DIR | $XDG_RUNTIME_DIR/gaptop | /tmp/gaptop-$UID    (0700, the user's)
//! socket   := dir/PID.LABEL.sock                                                   (0600, the user's)
//! request  := "status" | "attach" TAB viewer-socket TAB who | "detach"             then "\n"
//! reply    := "ok" | "state" TAB ("dormant" | "attached" TAB who) | "busy" TAB who
//!           | "error" TAB message                                                  then "\n"
//! ```
//!
//! An attach holds its connection open for as long as it lasts: a `detach` on it, or its end
//! (the viewer quit or died), turns collection off again. Fields hold no tab or newline.

use std::fs;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Longest request or reply line, newline included.
pub const MAX_LINE: usize = 4096;
/// Longest job label kept in a socket's name (a Unix socket path holds at most 107 bytes).
pub const MAX_LABEL: usize = 40;

/// What a viewer asks a dormant collector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Is it collecting, and for whom?
    Status,
    /// Connect to the viewer listening at `socket` and collect until detached; `who` names
    /// the viewer to anyone refused while it is attached.
    Attach { socket: String, who: String },
    /// Stop collecting (on the attach's own connection).
    Detach,
}

/// What the collector answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Ok,
    /// Its state: dormant (None) or attached by a viewer.
    State {
        attached: Option<String>,
    },
    /// Refused: another viewer (named) is attached.
    Busy(String),
    Error(String),
}

/// A field as sent: tabs and newlines (which separate fields and lines) become spaces.
fn field(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

impl Request {
    /// The request's line, newline included.
    pub fn encode(&self) -> String {
        match self {
            Request::Status => "status\n".into(),
            Request::Attach { socket, who } => {
                format!("attach\t{}\t{}\n", field(socket), field(who))
            }
            Request::Detach => "detach\n".into(),
        }
    }

    pub fn parse(line: &str) -> Result<Request, String> {
        let line = line.trim_end_matches(['\n', '\r']);
        let mut f = line.split('\t');
        match (f.next(), f.next(), f.next(), f.next()) {
            (Some("status"), None, ..) => Ok(Request::Status),
            (Some("detach"), None, ..) => Ok(Request::Detach),
            (Some("attach"), Some(socket), who, None) if !socket.is_empty() => {
                Ok(Request::Attach {
                    socket: socket.into(),
                    who: who.unwrap_or("").into(),
                })
            }
            _ => Err(format!("not a gaptop control request: {:?}", cut(line))),
        }
    }
}

impl Reply {
    /// The reply's line, newline included.
    pub fn encode(&self) -> String {
        match self {
            Reply::Ok => "ok\n".into(),
            Reply::State { attached: None } => "state\tdormant\n".into(),
            Reply::State { attached: Some(w) } => format!("state\tattached\t{}\n", field(w)),
            Reply::Busy(w) => format!("busy\t{}\n", field(w)),
            Reply::Error(m) => format!("error\t{}\n", field(m)),
        }
    }

    pub fn parse(line: &str) -> Result<Reply, String> {
        let line = line.trim_end_matches(['\n', '\r']);
        let (head, rest) = line.split_once('\t').unwrap_or((line, ""));
        match (head, rest) {
            ("ok", "") => Ok(Reply::Ok),
            ("state", "dormant") => Ok(Reply::State { attached: None }),
            ("state", r) if r.starts_with("attached\t") => Ok(Reply::State {
                attached: Some(r["attached\t".len()..].into()),
            }),
            ("busy", w) => Ok(Reply::Busy(w.into())),
            ("error", m) => Ok(Reply::Error(m.into())),
            _ => Err(format!("not a gaptop control reply: {:?}", cut(line))),
        }
    }
}

fn cut(s: &str) -> &str {
    let mut n = s.len().min(80);
    while !s.is_char_boundary(n) {
        n -= 1;
    }
    &s[..n]
}

/// The per-user folder of control sockets: `$GAPTOP_CONTROL_DIR` when set, else
/// `$XDG_RUNTIME_DIR/gaptop`, else `/tmp/gaptop-UID`. `env` reads the environment.
pub fn user_dir(uid: u32, env: impl Fn(&str) -> Option<String>) -> PathBuf {
    if let Some(d) = env("GAPTOP_CONTROL_DIR").filter(|d| !d.is_empty()) {
        return d.into();
    }
    match env("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(d) => Path::new(&d).join("gaptop"),
        None => fallback_dir(uid),
    }
}

/// `/tmp/gaptop-UID`: where a program started without `XDG_RUNTIME_DIR` (a system service)
/// puts its socket; a viewer in a login shell (which has one) looks here too.
pub fn fallback_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/gaptop-{uid}"))
}

/// Whether `meta` (of a path, not followed) is owned by `uid` and open to nobody else.
fn private(meta: &fs::Metadata, uid: u32, what: &str, path: &Path) -> Result<(), String> {
    if meta.uid() != uid {
        return Err(format!(
            "{} is owned by uid {}, not by you (uid {uid}): refused",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} has mode {:o}: a gaptop {what} must be open to its owner only, refused",
            path.display(),
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// Checks that `dir` is a real folder (not a link) owned by `uid` with mode 0700 or tighter.
pub fn check_dir(dir: &Path, uid: u32) -> Result<(), String> {
    let meta = fs::symlink_metadata(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a folder: refused", dir.display()));
    }
    private(&meta, uid, "folder", dir)
}

/// Creates `dir` (mode 0700) unless it exists, then checks it as `check_dir` does.
pub fn ensure_dir(dir: &Path, uid: u32) -> Result<(), String> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
    }
    check_dir(dir, uid)
}

/// Checks that `path` is a socket owned by `uid` with mode 0600 or tighter.
pub fn check_socket(path: &Path, uid: u32) -> Result<(), String> {
    let meta = fs::symlink_metadata(path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.file_type().is_socket() {
        return Err(format!("{} is not a socket: refused", path.display()));
    }
    private(&meta, uid, "socket", path)
}

/// A job label made safe for a file name: letters, digits, `.`, `_` and `-` kept, anything
/// else `_`, at most MAX_LABEL bytes; never empty.
pub fn clean_label(s: &str) -> String {
    let mut out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_LABEL)
        .collect();
    if out.is_empty() {
        out.push_str("job");
    }
    out
}

/// The job label of a program: `GAPTOP_JOB` when set, else its program's file name, or for
/// an interpreter (`python3 train.py`, `python -m pkg`) its script's or module's.
pub fn job_label(job: Option<&str>, argv: &[String]) -> String {
    if let Some(j) = job.filter(|j| !j.is_empty()) {
        return clean_label(j);
    }
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let prog = argv.first().map(|p| base(p)).unwrap_or_default();
    if prog.starts_with("python") {
        let mut args = argv.iter().skip(1);
        while let Some(a) = args.next() {
            if a == "-m" {
                if let Some(m) = args.next() {
                    return clean_label(m);
                }
            } else if !a.starts_with('-') {
                return clean_label(&base(a));
            }
        }
    }
    clean_label(&prog)
}

/// A process's arguments, from `/proc/PID/cmdline` (`None`: this process's); empty if it
/// cannot be read.
pub fn command_line(pid: Option<u32>) -> Vec<String> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/cmdline"),
        None => "/proc/self/cmdline".into(),
    };
    fs::read(path)
        .map(|b| {
            b.split(|&x| x == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The socket's file name for a process and its label.
pub fn socket_name(pid: u32, label: &str) -> String {
    format!("{pid}.{}.sock", clean_label(label))
}

/// The pid and label a socket's file name holds (None for other files).
pub fn parse_socket_name(name: &str) -> Option<(u32, String)> {
    let stem = name.strip_suffix(".sock")?;
    let (pid, label) = stem.split_once('.')?;
    Some((pid.parse().ok()?, label.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn requests_and_replies_round_trip() {
        for r in [
            Request::Status,
            Request::Detach,
            Request::Attach {
                socket: "/tmp/gaptop-1-x/collector.sock".into(),
                who: "gaptop attach (pid 7) on pts/3".into(),
            },
        ] {
            assert_eq!(Request::parse(&r.encode()), Ok(r));
        }
        for r in [
            Reply::Ok,
            Reply::State { attached: None },
            Reply::State {
                attached: Some("gaptop capture (pid 9)".into()),
            },
            Reply::Busy("gaptop attach (pid 7)".into()),
            Reply::Error("cuptiSubscribe failed".into()),
        ] {
            assert_eq!(Reply::parse(&r.encode()), Ok(r));
        }
        // Separators inside a field cannot split it.
        let r = Request::Attach {
            socket: "/a\tb".into(),
            who: "x\ny".into(),
        };
        assert_eq!(
            Request::parse(&r.encode()),
            Ok(Request::Attach {
                socket: "/a b".into(),
                who: "x y".into()
            })
        );
        for bad in [
            "",
            "attach",
            "attach\t",
            "hello",
            "status\tx",
            "attach\ta\tb\tc",
        ] {
            assert!(Request::parse(bad).is_err(), "{bad:?}");
        }
        for bad in ["", "yes", "ok\tx", "state", "state\tsleeping"] {
            assert!(Reply::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_folder_follows_the_environment() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(user_dir(1000, env(&[])), PathBuf::from("/tmp/gaptop-1000"));
        assert_eq!(
            user_dir(1000, env(&[("XDG_RUNTIME_DIR", "/run/user/1000")])),
            PathBuf::from("/run/user/1000/gaptop")
        );
        assert_eq!(
            user_dir(
                1000,
                env(&[
                    ("XDG_RUNTIME_DIR", "/run/user/1000"),
                    ("GAPTOP_CONTROL_DIR", "/x")
                ])
            ),
            PathBuf::from("/x")
        );
        assert_eq!(
            user_dir(5, env(&[("XDG_RUNTIME_DIR", "")])),
            fallback_dir(5)
        );
    }

    #[test]
    fn labels_name_the_job() {
        let argv = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            job_label(
                None,
                &argv(&["/usr/bin/python3", "-u", "/srv/train.py", "--lr", "1"])
            ),
            "train.py"
        );
        assert_eq!(
            job_label(None, &argv(&["python", "-m", "vllm.entrypoints"])),
            "vllm.entrypoints"
        );
        assert_eq!(job_label(None, &argv(&["./serve", "x"])), "serve");
        assert_eq!(
            job_label(Some("llama 70b/eval"), &argv(&["x"])),
            "llama_70b_eval"
        );
        assert_eq!(job_label(Some(""), &argv(&[])), "job");
        assert_eq!(job_label(None, &argv(&[])), "job");
        assert_eq!(clean_label(&"é".repeat(100)).len(), MAX_LABEL);
        let name = socket_name(4242, "train.py");
        assert_eq!(name, "4242.train.py.sock");
        assert_eq!(parse_socket_name(&name), Some((4242, "train.py".into())));
        assert_eq!(parse_socket_name("x.sock"), None);
        assert_eq!(parse_socket_name("12.a.txt"), None);
        let me = command_line(None);
        assert!(!me.is_empty() && me == command_line(Some(std::process::id())));
        assert!(command_line(Some(u32::MAX)).is_empty());
    }

    /// A folder or socket of another mode than the owner's alone is refused, with the reason.
    #[test]
    fn loose_modes_are_refused() {
        let base = std::env::temp_dir().join(format!("gaptop-wire-ctl-{}", std::process::id()));
        let _ = fs::remove_dir_all(&base);
        let me = owner_of_new_files();
        ensure_dir(&base, me).unwrap();
        assert_eq!(fs::metadata(&base).unwrap().mode() & 0o777, 0o700);
        let err = check_dir(&base, me + 1).unwrap_err();
        assert!(err.contains("not by you"), "{err}");
        fs::set_permissions(&base, fs::Permissions::from_mode(0o755)).unwrap();
        let err = ensure_dir(&base, me).unwrap_err();
        assert!(err.contains("mode 755"), "{err}");
        fs::set_permissions(&base, fs::Permissions::from_mode(0o700)).unwrap();
        let sock = base.join("1.x.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        fs::set_permissions(&sock, fs::Permissions::from_mode(0o600)).unwrap();
        check_socket(&sock, me).unwrap();
        fs::set_permissions(&sock, fs::Permissions::from_mode(0o666)).unwrap();
        let err = check_socket(&sock, me).unwrap_err();
        assert!(err.contains("mode 666"), "{err}");
        let file = base.join("2.y.sock");
        fs::write(&file, b"").unwrap();
        assert!(check_socket(&file, me)
            .unwrap_err()
            .contains("not a socket"));
        let link = base.join("link");
        std::os::unix::fs::symlink(&base, &link).unwrap();
        assert!(check_dir(&link, me).unwrap_err().contains("not a folder"));
        let _ = fs::remove_dir_all(&base);
    }

    /// The uid new files get here (this crate has no libc to ask getuid).
    fn owner_of_new_files() -> u32 {
        let p = std::env::temp_dir().join(format!("gaptop-wire-uid-{}", std::process::id()));
        fs::write(&p, b"").unwrap();
        let uid = fs::metadata(&p).unwrap().uid();
        let _ = fs::remove_file(&p);
        uid
    }
}

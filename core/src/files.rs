//! The files gaptop writes and reads, kept safe for the user:
//!
//! - [`Output`]: every file gaptop writes is written to a temporary file in the target's
//!   folder and renamed over the target only once complete, so a failure (a full disk, a
//!   command that never ran, nothing recorded) leaves what the path held before. Only devices,
//!   pipes, sockets and the process's own descriptors are written in place; `/dev/shm` and
//!   other tmpfs files are files like any other. Two gaptops never write one file at once.
//! - [`refuse_input`]: an output that is one of the inputs is refused before anything is read.
//! - [`refuse_special`]: an input that is a named pipe, a socket or a device is refused (a
//!   pipe would block `report` forever).
//! - [`TempFolder`] and [`remove_temps_on_signals`]: temporary files and folders are removed on
//!   every way out, signals included; folders left by a process that was killed outright
//!   (SIGKILL) are removed by the next gaptop that makes one.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use anyhow::Context;

/// Temporary files and folders that exist now, removed if a signal ends gaptop.
static TEMPS: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Set once a command catches the ending signals itself (the UI, `record`, `serve`): then
/// [`remove_temps_on_signals`]' thread leaves them to it.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// Temporary names made so far by this process.
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary path, removed if a signal ends gaptop while it exists.
struct Registered(PathBuf);

impl Registered {
    fn new(p: &Path) -> Registered {
        if let Ok(mut v) = TEMPS.lock() {
            v.push(p.to_path_buf());
        }
        Registered(p.to_path_buf())
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        if let Ok(mut v) = TEMPS.lock() {
            v.retain(|p| p != &self.0);
        }
    }
}

/// A file being written: a temporary file next to the target, renamed over it by
/// [`Output::commit`]; dropped without a commit, it is removed and the target is left as it
/// was. A target that is not a regular file (`/dev/null`, a pipe, `/dev/stdout`) cannot be
/// replaced, so it is written in place.
pub struct Output {
    target: PathBuf,
    file: File,
    /// The temporary file and where it goes; None when written in place.
    tmp: Option<(PathBuf, PathBuf, Registered)>,
}

impl Output {
    /// Creates the temporary file for `target` (or opens a device or pipe in place). Refused
    /// while another gaptop writes the same file ([`refuse_other_writer`]).
    pub fn create(target: &Path) -> anyhow::Result<Output> {
        let shown = target.display();
        let meta = std::fs::metadata(target).ok();
        if in_place(target, meta.as_ref()) {
            let file = File::create(target).with_context(|| format!("{shown}: cannot create"))?;
            return Ok(Output {
                target: target.to_path_buf(),
                file,
                tmp: None,
            });
        }
        if meta.as_ref().is_some_and(|m| m.is_dir()) {
            anyhow::bail!("{shown}: is a directory; give a file to write");
        }
        // A link is followed: the file it names is replaced (or made), the link stays.
        let dest = destination(target)?;
        let dir = match dest.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let name = dest
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "out".into());
        let tmp = dir.join(format!(
            "{name}.gaptop-{}-{}.part",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(&tmp)
            .with_context(|| {
                format!(
                    "{shown}: cannot write a temporary file in {}",
                    dir.display()
                )
            })?;
        let reg = Registered::new(&tmp);
        // Held while this process lives: another writer of the same file sees it.
        let _ = file.try_lock();
        let out = Output {
            target: target.to_path_buf(),
            file,
            tmp: Some((tmp.clone(), dest, reg)),
        };
        refuse_other_writer(&dir, &name, &tmp, target)?;
        if let Some(m) = meta {
            // The replaced file's permissions carry over.
            let _ = out
                .file
                .set_permissions(std::fs::Permissions::from_mode(m.mode() & 0o7777));
        }
        Ok(out)
    }

    /// Another handle on the file, to write through (writes go to the temporary file).
    pub fn writer(&self) -> anyhow::Result<File> {
        self.file
            .try_clone()
            .with_context(|| format!("{}: cannot write", self.target.display()))
    }

    /// Whether the target is replaced on commit (false for a device or a pipe).
    pub fn replaces(&self) -> bool {
        self.tmp.is_some()
    }

    /// The file is complete (every writer flushed): it replaces the target.
    pub fn commit(mut self) -> anyhow::Result<()> {
        let shown = self.target.display().to_string();
        let Some((tmp, dest, _reg)) = self.tmp.take() else {
            return Ok(());
        };
        let done = self
            .file
            .sync_all()
            .and_then(|_| std::fs::rename(&tmp, &dest));
        if let Err(e) = done {
            let _ = std::fs::remove_file(&tmp);
            anyhow::bail!("{shown}: cannot write: {e}");
        }
        Ok(())
    }

    /// Writes `bytes` as the whole file and commits it.
    pub fn write_all(target: &Path, bytes: &[u8]) -> anyhow::Result<()> {
        use std::io::Write;
        let out = Output::create(target)?;
        out.writer()?
            .write_all(bytes)
            .with_context(|| format!("{}: cannot write", target.display()))?;
        out.commit()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Some((tmp, _, _)) = self.tmp.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}

/// Whether `target` is written in place rather than replaced: a device (character or block),
/// a named pipe or a socket, or a name for one of the process's own descriptors
/// (`/dev/stdout`, `/dev/fd/N`, anything under `/proc`), which stands for whatever the shell
/// gave. Any other path (a regular file under `/dev/shm` or on any tmpfs included) is written
/// to a temporary file and renamed.
fn in_place(target: &Path, meta: Option<&std::fs::Metadata>) -> bool {
    let special = meta.is_some_and(|m| {
        let t = m.file_type();
        t.is_char_device() || t.is_block_device() || t.is_fifo() || t.is_socket()
    });
    let own = ["/dev/stdout", "/dev/stderr", "/dev/fd", "/proc"];
    special || own.iter().any(|p| target.starts_with(p))
}

/// The file `target` names once its links are followed, a dangling link included (its file
/// is made where it points); refused when that folder does not exist or the links loop.
fn destination(target: &Path) -> anyhow::Result<PathBuf> {
    let mut p = target.to_path_buf();
    for _ in 0..40 {
        match p.symlink_metadata() {
            Ok(m) if m.file_type().is_symlink() => {
                let to = std::fs::read_link(&p)
                    .with_context(|| format!("{}: cannot read the link", p.display()))?;
                p = match p.parent() {
                    Some(d) => d.join(to),
                    None => to,
                };
            }
            _ => {
                if p != target {
                    let dir = p.parent().filter(|d| !d.as_os_str().is_empty());
                    if dir.is_some_and(|d| !d.is_dir()) {
                        anyhow::bail!(
                            "{}: is a link to {}, whose folder does not exist; give another file",
                            target.display(),
                            p.display()
                        );
                    }
                }
                return Ok(p);
            }
        }
    }
    anyhow::bail!("{}: too many levels of links", target.display())
}

/// Refuses to write `name` in `dir` while another gaptop writes it: that one's temporary file
/// (`NAME.gaptop-PID-N.part`) is there and locked by its live writer. A `.part` left by a
/// writer that was killed is not locked: it is left alone, for the user to read.
fn refuse_other_writer(dir: &Path, name: &str, own: &Path, target: &Path) -> anyhow::Result<()> {
    let prefix = format!("{name}.gaptop-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries.filter_map(|e| e.ok()) {
        let n = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = n.strip_prefix(&prefix) else {
            continue;
        };
        if !rest.ends_with(".part") || e.path() == own {
            continue;
        }
        let Ok(f) = File::open(e.path()) else {
            continue;
        };
        if let Err(std::fs::TryLockError::WouldBlock) = f.try_lock_shared() {
            let pid = rest.split('-').next().unwrap_or("?");
            anyhow::bail!(
                "{}: another gaptop (pid {pid}) is writing it now; wait for it to end or write \
                 to another file",
                target.display()
            );
        }
    }
    Ok(())
}

/// What a failed write says of the target: kept as it was, or never made.
pub fn left_as_it_was(target: &Path) -> String {
    if target.symlink_metadata().is_ok() {
        format!("{} left as it was", target.display())
    } else {
        format!("{} not written", target.display())
    }
}

/// Refuses an output that is one of the inputs (the same file, by device and inode, whatever
/// the path says; a directory's files count as inputs), before anything is read or written.
pub fn refuse_input(output: &Path, inputs: &[PathBuf]) -> anyhow::Result<()> {
    let Ok(out) = std::fs::metadata(output) else {
        return Ok(()); // not there yet: not an input
    };
    if !out.is_file() {
        return Ok(());
    }
    let same =
        |p: &Path| std::fs::metadata(p).is_ok_and(|m| m.dev() == out.dev() && m.ino() == out.ino());
    for input in inputs {
        let hit = if input.is_dir() {
            std::fs::read_dir(input)
                .map(|d| d.filter_map(|e| e.ok()).find(|e| same(&e.path())))
                .ok()
                .flatten()
                .map(|e| e.path())
        } else {
            same(input).then(|| input.clone())
        };
        if let Some(f) = hit {
            anyhow::bail!(
                "{}: is an input ({}); write the output to another file",
                output.display(),
                f.display()
            );
        }
    }
    Ok(())
}

/// Refuses an input that is a named pipe, a socket or a device: reading one can block for
/// ever or never end.
pub fn refuse_special(path: &Path) -> anyhow::Result<()> {
    let Some(what) = special(path) else {
        return Ok(()); // a file, or opening it says why
    };
    anyhow::bail!(
        "{}: is {what}, not a file; gaptop reads files (save what it gives to one first)",
        path.display()
    )
}

/// What `path` is when it is a named pipe, a socket or a device (`a named pipe`); `None` for
/// anything else, and for what cannot be looked at.
pub fn special(path: &Path) -> Option<&'static str> {
    let t = std::fs::metadata(path).ok()?.file_type();
    if t.is_fifo() {
        Some("a named pipe")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_char_device() || t.is_block_device() {
        Some("a device")
    } else {
        None
    }
}

/// A temporary folder, `gaptop-KIND-PID-*` in the system's temporary folder, removed when
/// dropped or when a signal ends gaptop. Making one first removes those that processes
/// killed outright left behind.
pub struct TempFolder {
    dir: tempfile::TempDir,
    _reg: Registered,
}

impl TempFolder {
    pub fn new(kind: &str) -> anyhow::Result<TempFolder> {
        let base = std::env::temp_dir();
        sweep(&base, kind);
        let dir = tempfile::Builder::new()
            .prefix(&format!("gaptop-{kind}-{}-", std::process::id()))
            .tempdir_in(&base)
            .with_context(|| format!("cannot make a temporary folder in {}", base.display()))?;
        let reg = Registered::new(dir.path());
        Ok(TempFolder { dir, _reg: reg })
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

/// Removes the `gaptop-KIND-PID-*` folders under `base` of this user whose process is gone.
fn sweep(base: &Path, kind: &str) {
    sweep_dead(base, &format!("gaptop-{kind}-"));
}

/// Removes the `PREFIX` + `PID-*` folders under `base` of this user whose process is gone
/// (a pid in use, by whatever process, keeps its folder).
pub fn sweep_dead(base: &Path, prefix: &str) {
    let me = nix::unistd::getuid().as_raw();
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        let mine = e
            .path()
            .symlink_metadata()
            .is_ok_and(|m| m.is_dir() && m.uid() == me);
        if mine && pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Starts a thread that, on SIGINT, SIGTERM or SIGHUP, removes the temporary files and
/// folders that exist and ends gaptop as the signal would have (unless a command took the
/// signals, [`signals_taken`]).
pub fn remove_temps_on_signals() -> anyhow::Result<()> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM, SIGHUP])
        .context("cannot catch signals")?;
    std::thread::Builder::new()
        .name("gaptop-signals".into())
        .spawn(move || {
            for sig in signals.forever() {
                if TAKEN.load(Ordering::Relaxed) {
                    continue;
                }
                remove_temps();
                let _ = signal_hook::low_level::emulate_default_handler(sig);
                std::process::exit(128 + sig);
            }
        })
        .context("cannot start the signal thread")?;
    Ok(())
}

/// A command catches the ending signals itself from now on, and ends in its own way.
pub fn signals_taken() {
    TAKEN.store(true, Ordering::Relaxed);
}

/// Removes every temporary file and folder that exists now.
fn remove_temps() {
    let v = match TEMPS.lock() {
        Ok(v) => v.clone(),
        Err(p) => p.into_inner().clone(),
    };
    for p in v {
        if p.is_dir() {
            let _ = std::fs::remove_dir_all(&p);
        } else {
            let _ = std::fs::remove_file(&p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("gaptop-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn names(d: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn an_output_replaces_its_target_only_when_committed() {
        let d = dir("output");
        let kept = d.join("kept.json");
        std::fs::write(&kept, b"old").unwrap();
        std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
        {
            let out = Output::create(&kept).unwrap();
            out.writer().unwrap().write_all(b"half").unwrap();
            assert_eq!(std::fs::read(&kept).unwrap(), b"old", "written in place");
            // Dropped: a failure on the way.
        }
        assert_eq!(std::fs::read(&kept).unwrap(), b"old");
        assert_eq!(names(&d), ["kept.json"], "the temporary file stayed");

        let out = Output::create(&kept).unwrap();
        assert!(out.replaces());
        out.writer().unwrap().write_all(b"new").unwrap();
        out.commit().unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), b"new");
        let mode = std::fs::metadata(&kept).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o640, "the permissions carry over");
        assert_eq!(names(&d), ["kept.json"]);

        // A link stays a link; the file it names is replaced.
        let link = d.join("link.json");
        std::os::unix::fs::symlink(&kept, &link).unwrap();
        Output::write_all(&link, b"via link").unwrap();
        assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&kept).unwrap(), b"via link");

        // A dangling link: its file is made where it points, the link stays.
        let dangling = d.join("dangling.rec");
        std::os::unix::fs::symlink("made.rec", &dangling).unwrap();
        Output::write_all(&dangling, b"made").unwrap();
        assert!(dangling
            .symlink_metadata()
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(d.join("made.rec")).unwrap(), b"made");
        let nowhere = d.join("nowhere.rec");
        std::os::unix::fs::symlink("no/such/folder/x.rec", &nowhere).unwrap();
        let e = Output::create(&nowhere).err().unwrap().to_string();
        assert!(e.contains("whose folder does not exist"), "{e}");
        assert!(nowhere.symlink_metadata().unwrap().file_type().is_symlink());

        // A device is written in place; a directory is refused.
        let null = Output::create(Path::new("/dev/null")).unwrap();
        assert!(!null.replaces());
        null.commit().unwrap();
        let e = Output::create(&d).err().unwrap();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A regular file on a tmpfs under /dev is replaced like any other; only devices, pipes
    /// and the process's own descriptors are written in place.
    #[test]
    fn dev_shm_files_are_replaced_not_written_in_place() {
        assert!(in_place(Path::new("/dev/stdout"), None));
        assert!(in_place(Path::new("/proc/self/fd/1"), None));
        let null = std::fs::metadata("/dev/null").unwrap();
        assert!(in_place(Path::new("/dev/null"), Some(&null)));
        let shm = Path::new("/dev/shm");
        if !shm.is_dir() {
            return;
        }
        let f = shm.join(format!("gaptop-files-{}.rec", std::process::id()));
        std::fs::write(&f, b"old").unwrap();
        let out = Output::create(&f).unwrap();
        assert!(out.replaces());
        out.writer().unwrap().write_all(b"half").unwrap();
        drop(out);
        assert_eq!(std::fs::read(&f).unwrap(), b"old", "left as it was");
        let _ = std::fs::remove_file(&f);
    }

    /// While one output of a file is open, another of the same file is refused, naming the
    /// writer; a `.part` left unlocked (its writer killed) does not stop the next.
    #[test]
    fn a_second_writer_of_one_file_is_refused() {
        let d = dir("writers");
        let f = d.join("same.rec");
        let first = Output::create(&f).unwrap();
        let e = Output::create(&f).err().unwrap().to_string();
        let pid = std::process::id();
        assert!(
            e.contains(&format!("another gaptop (pid {pid}) is writing it now")),
            "{e}"
        );
        first.writer().unwrap().write_all(b"first").unwrap();
        first.commit().unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"first");
        std::fs::write(d.join("same.rec.gaptop-4999999-0.part"), b"left").unwrap();
        Output::write_all(&f, b"second").unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"second");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn an_input_as_output_and_special_files_are_refused() {
        let d = dir("inputs");
        let a = d.join("a.json");
        std::fs::write(&a, b"{}").unwrap();
        let other = d.join("sub/../a.json");
        std::fs::create_dir_all(d.join("sub")).unwrap();
        let e = refuse_input(&other, std::slice::from_ref(&a)).unwrap_err();
        assert!(e.to_string().contains("is an input"), "{e}");
        // A hard link is the same file under another name.
        let hard = d.join("hard.json");
        std::fs::hard_link(&a, &hard).unwrap();
        assert!(refuse_input(&hard, std::slice::from_ref(&a)).is_err());
        // A directory's files are inputs.
        assert!(refuse_input(&a, std::slice::from_ref(&d)).is_err());
        // Another file, or one not made yet, is fine.
        let b = d.join("b.json");
        assert!(refuse_input(&b, std::slice::from_ref(&a)).is_ok());
        std::fs::write(&b, b"{}").unwrap();
        assert!(refuse_input(&b, std::slice::from_ref(&a)).is_ok());

        let fifo = d.join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.unwrap().success());
        let e = refuse_special(&fifo).unwrap_err().to_string();
        assert!(e.contains("is a named pipe, not a file"), "{e}");
        assert!(refuse_special(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string()
            .contains("is a device"));
        assert!(refuse_special(&a).is_ok());
        assert!(refuse_special(&d.join("missing")).is_ok());
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn folders_of_processes_gone_are_swept() {
        let d = dir("sweep");
        // A pid above the kernel's limit (2^22) never runs.
        let gone = d.join("gaptop-test-4999999-abc");
        std::fs::create_dir_all(gone.join("inner")).unwrap();
        let alive = d.join(format!("gaptop-test-{}-abc", std::process::id()));
        std::fs::create_dir_all(&alive).unwrap();
        let other = d.join("gaptop-other-4999999-abc");
        std::fs::create_dir_all(&other).unwrap();
        sweep(&d, "test");
        assert!(!gone.exists());
        assert!(alive.exists() && other.exists());

        let t = TempFolder::new("filestest").unwrap();
        let p = t.path().to_path_buf();
        assert!(TEMPS.lock().unwrap().contains(&p));
        drop(t);
        assert!(!p.exists());
        assert!(!TEMPS.lock().unwrap().contains(&p));
        let _ = std::fs::remove_dir_all(&d);
    }
}

//! Where gaptop looks for libcupti, and what `gaptop run` says in one line when it, or the GPU
//! itself, is missing: where it looked (each folder whole, by kind) and what works without a
//! GPU.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where a CUDA toolkit (CUDA_HOME, /usr/local/cuda*) keeps libcupti, in the order tried.
const TOOLKIT_DIRS: [&str; 3] = ["extras/CUPTI/lib64", "targets/x86_64-linux/lib", "lib64"];
/// Where NVIDIA's pip packages (PyTorch's dependencies) keep it, under a site-packages folder.
const PIP_DIRS: [&str; 3] = [
    "nvidia/cuda_cupti/lib",
    "nvidia/cu13/lib",
    "nvidia/cu12/lib",
];

/// Folders that may hold libcupti, in the order gaptop tries them.
pub fn cupti_candidates() -> Vec<PathBuf> {
    let mut v = Vec::new();
    let toolkit = |v: &mut Vec<PathBuf>, root: &Path| {
        v.extend(TOOLKIT_DIRS.iter().map(|d| root.join(d)));
    };
    let pip = |v: &mut Vec<PathBuf>, sites: Vec<PathBuf>| {
        for sp in sites {
            v.extend(PIP_DIRS.iter().map(|d| sp.join(d)));
        }
    };
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Some(h) = std::env::var_os(var) {
            toolkit(&mut v, Path::new(&h));
        }
    }
    // The nvidia-cuda-cupti Python package (pip wheels of PyTorch bring it) of the environment
    // gaptop itself was pip-installed into: the CUPTI of the CUDA that environment's PyTorch
    // runs, so before the machine's toolkits, which may be another CUDA's.
    let own = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(site_packages_near))
        .unwrap_or_default();
    pip(&mut v, own);
    for c in entries_named(Path::new("/usr/local"), "cuda")
        .into_iter()
        .rev()
    {
        toolkit(&mut v, &c);
    }
    // Then that package in the `python3` on PATH's environment.
    let mut sites = Vec::new();
    if let Ok(out) = Command::new("python3")
        .args([
            "-c",
            "import sys,site;print('\\n'.join(site.getsitepackages()+[site.getusersitepackages()]))",
        ])
        .stderr(Stdio::null())
        .output()
    {
        sites.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .map(|l| PathBuf::from(l.trim())),
        );
    }
    pip(&mut v, sites);
    if let Some(ld) = std::env::var_os("LD_LIBRARY_PATH") {
        v.extend(std::env::split_paths(&ld).filter(|p| !p.as_os_str().is_empty()));
    }
    v.push("/usr/lib/x86_64-linux-gnu".into());
    v
}

/// The folder holding libcupti, or why `gaptop run` cannot collect here (one line: what is
/// missing, where it looked, what works without a GPU).
pub fn find_cupti() -> anyhow::Result<PathBuf> {
    let cands = cupti_candidates();
    if let Some(d) = cands
        .iter()
        .find(|d| !entries_named(d, "libcupti.so").is_empty())
    {
        return Ok(d.clone());
    }
    anyhow::bail!("{}", missing(&cands, driver_present()))
}

/// Whether an NVIDIA driver is loaded here (its /proc folder or its control device).
fn driver_present() -> bool {
    Path::new("/proc/driver/nvidia").exists() || Path::new("/dev/nvidiactl").exists()
}

/// What works without a GPU, as the end of the line that says one is missing.
const WITHOUT: &str = "; without a GPU: `gaptop demo`, `gaptop open FILE`, `gaptop report FILE`";

/// The line `gaptop run` fails with when libcupti is not in `cands` (and, without `driver`,
/// no GPU either), within [`crate::text::MAX_LINE`] characters with its `gaptop: ` prefix.
fn missing(cands: &[PathBuf], driver: bool) -> String {
    let head = if driver {
        "libcupti was not found ("
    } else {
        "no NVIDIA driver or GPU, and no libcupti ("
    };
    let close = if driver {
        "; set CUDA_HOME or LD_LIBRARY_PATH to its folder)"
    } else {
        ")"
    };
    let fixed = "gaptop: ".len() + head.len() + close.len() + WITHOUT.chars().count();
    let room = crate::text::MAX_LINE.saturating_sub(fixed);
    format!("{head}{}{close}{WITHOUT}", looked_in(cands, room))
}

/// The folders in `cands` in at most `room` characters, each path whole: the CUDA toolkits'
/// roots, the Python environments whose `nvidia/…/lib` packages were tried, then the other
/// folders (LD_LIBRARY_PATH's, the system's); duplicates once, the home folder as `~`, and
/// while the list is too long, the part showing the most entries shows one fewer and says how
/// many more it has.
fn looked_in(cands: &[PathBuf], room: usize) -> String {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h != Path::new("/"));
    let show = |p: &Path| match home.as_deref().and_then(|h| p.strip_prefix(h).ok()) {
        Some(rest) => format!("~/{}", rest.display()),
        None => p.display().to_string(),
    };
    // What each part is, and its entries.
    let mut parts: [(&str, Vec<String>); 3] = [
        ("not in CUDA toolkits ", Vec::new()),
        ("not in nvidia/*/lib of ", Vec::new()),
        ("not in ", Vec::new()),
    ];
    let mut i = 0;
    while i < cands.len() {
        let family = [&TOOLKIT_DIRS[..], &PIP_DIRS[..]]
            .into_iter()
            .enumerate()
            .find_map(|(k, dirs)| {
                let root = cands[i].to_str()?.strip_suffix(dirs[0])?;
                let all = dirs.iter().enumerate().all(|(j, d)| {
                    cands.get(i + j).and_then(|p| p.to_str()) == Some(&format!("{root}{d}"))
                });
                all.then(|| (k, Path::new(root).to_path_buf(), dirs.len()))
            });
        let (part, entry, step) = match family {
            Some((k, root, n)) => (k, show(&root), n),
            None => (2, show(&cands[i]), 1),
        };
        let entry = entry.trim_end_matches('/').to_string();
        if !parts[part].1.contains(&entry) {
            parts[part].1.push(entry);
        }
        i += step;
    }
    if parts[0].1.is_empty() {
        parts[0] = ("", vec!["no CUDA toolkit".into()]);
    }
    let mut shown = parts.each_ref().map(|p| p.1.len());
    loop {
        let text = parts
            .iter()
            .zip(shown)
            .filter(|(p, _)| !p.1.is_empty())
            .map(|((label, entries), n)| {
                let mut e: Vec<String> = entries[..n].to_vec();
                if n < entries.len() {
                    e.push(format!("{} more", entries.len() - n));
                }
                format!("{label}{}", e.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ");
        let most = (0..3).filter(|&k| shown[k] > 0).max_by_key(|&k| shown[k]);
        match most {
            Some(k) if text.chars().count() > room => shown[k] -= 1,
            _ => return text,
        }
    }
}

/// The site-packages (or Debian's dist-packages) folders of the Python environment whose
/// `bin/` is `bin`: `bin/../lib/python3.*/site-packages` (a venv, `pip install --user`'s
/// `~/.local`, a prefix).
pub(super) fn site_packages_near(bin: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    let Some(prefix) = bin.parent() else {
        return v;
    };
    for py in entries_named(&prefix.join("lib"), "python3") {
        for name in ["site-packages", "dist-packages"] {
            v.push(py.join(name));
        }
    }
    v
}

/// The entries of `dir` whose names start with `prefix`, sorted (none where it cannot be read).
pub(super) fn entries_named(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(prefix))
        .map(|e| e.path())
        .collect();
    v.sort();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folders_are_listed_by_kind_and_every_path_is_whole() {
        let sp = Path::new("/opt/venv/lib/python3.11/site-packages");
        let mut cands: Vec<PathBuf> = PIP_DIRS.iter().map(|d| sp.join(d)).collect();
        cands.extend(cands.clone());
        cands.extend(TOOLKIT_DIRS.iter().map(|d| Path::new("/opt/cuda").join(d)));
        cands.push("/usr/lib/x86_64-linux-gnu".into());
        assert_eq!(
            looked_in(&cands, 300),
            "not in CUDA toolkits /opt/cuda; not in nvidia/*/lib of \
             /opt/venv/lib/python3.11/site-packages; not in /usr/lib/x86_64-linux-gnu"
        );
        // Too many to list: whole paths, then how many more.
        let many: Vec<PathBuf> = (0..40)
            .map(|i| PathBuf::from(format!("/a/long/folder/number/{i}")))
            .collect();
        let s = looked_in(&many, 120);
        assert!(s.chars().count() <= 120, "{s}");
        assert!(s.ends_with("more"), "{s}");
        let listed = s.split("; not in ").last().unwrap();
        for part in listed.split(", ").filter(|p| !p.ends_with(" more")) {
            assert!(part.starts_with("/a/long/folder/number/"), "{part}");
        }
        assert!(s.starts_with("no CUDA toolkit; "), "{s}");
    }

    #[test]
    fn the_line_says_what_is_missing_and_what_works_without_a_gpu() {
        let cands: Vec<PathBuf> = (0..60)
            .map(|i| PathBuf::from(format!("/some/where/very/deep/in/the/tree/{i}")))
            .collect();
        for driver in [false, true] {
            let s = missing(&cands, driver);
            assert!(
                ("gaptop: ".len() + s.chars().count()) <= crate::text::MAX_LINE,
                "{s}"
            );
            assert_eq!(crate::text::one_line(&s), s, "one_line cuts nothing");
            assert_eq!(s.contains("no NVIDIA driver or GPU"), !driver, "{s}");
            assert!(
                s.contains("`gaptop demo`") && s.contains("`gaptop report FILE`"),
                "{s}"
            );
        }
    }
}

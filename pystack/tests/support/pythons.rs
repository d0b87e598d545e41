//! The CPython interpreters on this machine, one of each version: the tests of Python stacks
//! run on every one (here and in the collector's tests, which include this file by path).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

/// The oldest version read: `PyFrame_GetCode` and `PyFrame_GetBack`, which calibration calls,
/// came in 3.9.
pub const OLDEST: (u32, u32) = (3, 9);

/// One interpreter of each version found, oldest first, as (version, path): `python3` on
/// PATH, `/usr/bin/python3.N`, pyenv's (`$PYENV_ROOT` or `~/.pyenv`), and the paths in
/// `GAPTOP_TEST_PYTHONS` (colon-separated). `python3` must be there; the others may not.
pub fn pythons() -> Vec<((u32, u32), PathBuf)> {
    let found: Vec<((u32, u32), PathBuf)> = every_python()
        .into_iter()
        .filter(|(v, _)| *v >= OLDEST)
        .collect();
    assert!(
        !found.is_empty(),
        "python3 ({}.{} or later) is needed for this test",
        OLDEST.0,
        OLDEST.1
    );
    eprintln!(
        "CPython versions tested: {}",
        found
            .iter()
            .map(|((a, b), p)| format!("{a}.{b} ({})", p.display()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    found
}

/// Interpreters older than [`OLDEST`] found in the same places (Python 3 only), oldest first:
/// those whose calibration must fail.
pub fn older_pythons() -> Vec<((u32, u32), PathBuf)> {
    every_python()
        .into_iter()
        .filter(|(v, _)| v.0 == 3 && *v < OLDEST)
        .collect()
}

/// One interpreter of each version found in those places, of any version, oldest first.
fn every_python() -> Vec<((u32, u32), PathBuf)> {
    let mut candidates: Vec<PathBuf> = vec!["python3".into()];
    if let Ok(extra) = std::env::var("GAPTOP_TEST_PYTHONS") {
        candidates.extend(
            extra
                .split(':')
                .filter(|s| !s.is_empty())
                .map(PathBuf::from),
        );
    }
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    let mut dirs = vec![PathBuf::from("/usr/bin"), PathBuf::from("/usr/local/bin")];
    if let Some(root) = pyenv {
        if let Ok(rd) = std::fs::read_dir(root.join("versions")) {
            dirs.extend(rd.flatten().map(|e| e.path().join("bin")));
        }
    }
    for d in dirs {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        let mut names: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                let n = p.file_name().unwrap_or_default().to_string_lossy();
                n.strip_prefix("python3.")
                    .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
            })
            .collect();
        names.sort();
        candidates.extend(names);
    }
    let mut found: Vec<((u32, u32), PathBuf)> = Vec::new();
    for c in candidates {
        let Ok(o) = Command::new(&c)
            .args(["-c", "import sys; print(*sys.version_info[:2])"])
            .output()
        else {
            continue;
        };
        let text = String::from_utf8_lossy(&o.stdout);
        let mut v = text.split_whitespace().map(|x| x.parse::<u32>());
        let (Some(Ok(major)), Some(Ok(minor))) = (v.next(), v.next()) else {
            continue;
        };
        let version = (major, minor);
        if !found.iter().any(|(have, _)| *have == version) {
            found.push((version, c));
        }
    }
    found.sort();
    found
}

//! Shared by the tests that run the real collector against the fake libcupti (here and in the
//! viewer's tmux tests, which include this file by path).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds what a user would run (the viewer, the collector) and the fake libcupti; returns the
/// folder they are in (the one above the running test's).
pub fn build() -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut c = Command::new(cargo);
    c.args(["build", "-q"]);
    for p in ["gaptop", "gaptop-collector", "gaptop-fake-cupti"] {
        c.args(["-p", p]);
    }
    if !cfg!(debug_assertions) {
        c.arg("--release");
    }
    assert!(c.status().expect("cargo runs").success(), "build failed");
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

/// A fresh folder holding a CUDA install with only the fake libcupti (`cuda/`), where
/// `gaptop run` and the collector look for it.
pub fn fake_cuda(target: &Path, tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("gaptop-fakegpu-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let lib = dir.join("cuda/lib64");
    std::fs::create_dir_all(&lib).unwrap();
    for name in ["libcupti.so", "libcupti.so.13"] {
        std::fs::copy(target.join("libcupti.so"), lib.join(name)).unwrap();
    }
    dir
}

/// The Python program that plays a CUDA one (this file is compiled from two crates' folders).
pub fn script() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    ["tests/fakegpu.py", "collector/tests/fakegpu.py"]
        .iter()
        .map(|p| root.join(p))
        .find(|p| p.exists())
        .expect("fakegpu.py")
}

/// A recording's JSON report (`gaptop report --format json`), or the report's error.
pub fn report(target: &Path, rec: &Path) -> Result<serde_json::Value, String> {
    let out = Command::new(target.join("gaptop"))
        .args(["report", "--format", "json"])
        .arg(rec)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

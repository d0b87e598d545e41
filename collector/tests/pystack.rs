//! The Python stack walk, without a GPU: a Python script loads the built collector with ctypes,
//! calibrates with the GIL held and walks with it released, in the main thread and another.

#[path = "../../pystack/tests/support/pythons.rs"]
mod pythons;

use std::path::PathBuf;
use std::process::Command;

fn cdylib() -> PathBuf {
    // `cargo test` builds the crate as an rlib only, so build the cdylib the same way users do.
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let release = !cfg!(debug_assertions);
    let mut c = Command::new(cargo);
    c.args(["build", "-q", "-p", "gaptop-collector"]);
    if release {
        c.arg("--release");
    }
    let st = c.status().expect("cargo runs");
    assert!(st.success(), "building the collector failed");
    // Integration tests run from target/<profile>/deps; the cdylib sits one folder up.
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("libgaptop_collector.so")
}

#[test]
fn walks_python_frames_without_the_gil() {
    let lib = cdylib();
    assert!(
        lib.is_file(),
        "collector cdylib not built at {}",
        lib.display()
    );
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/pystack.py");
    // Every CPython version here walks the same stacks (with qualified names from 3.11).
    for (version, python) in pythons::pythons() {
        let out = Command::new(&python)
            .arg(&script)
            .arg(&lib)
            .output()
            .expect("the interpreter runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{version:?}: stdout: {stdout}\nstderr: {stderr}"
        );
        assert!(stdout.contains("PYSTACK OK"), "{version:?}: {stdout}");
        assert!(stdout.contains("inner"), "{version:?}: {stdout}");
    }
}

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

/// The GIL as calibration finds it, on every CPython version here (3.9 to 3.13 share one layout,
/// `gaptop_pystack::gil`): the struct that reads as held by the calling thread, found in
/// `_PyRuntime` (to 3.11) or the interpreter (3.12 on), with a thread of pure Python running
/// beside it as a program's pin-memory or logger thread would.
#[test]
fn the_gil_is_found_on_every_version() {
    let lib = cdylib();
    let script = r#"
import ctypes, sys, threading
lib = ctypes.PyDLL(sys.argv[1])
stop = False
def spin():
    x = 0
    while not stop:
        x += 1
t = threading.Thread(target=spin)
t.start()
found = [lib.gaptop_selftest_gil() for _ in range(20)]
stop = True
t.join()
print("GIL", min(found), max(found))
"#;
    for (version, python) in pythons::pythons() {
        let out = Command::new(&python)
            .args(["-c", script])
            .arg(&lib)
            .output()
            .expect("the interpreter runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{version:?}: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let want = if ((3, 9)..=(3, 13)).contains(&version) {
            "GIL 1 1"
        } else {
            "GIL 0 0"
        };
        assert!(stdout.contains(want), "{version:?}: {stdout}");
    }
}

//! What the viewer's test binaries share: fresh temporary folders and the paths of the
//! recordings, fixtures and shared traces they read. (The tests that run the real collector
//! against the fake libcupti share `collector/tests/support` as well.)
#![allow(dead_code)]

pub mod gen;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// A fresh, empty folder of the system's temporary folder, named after the test binary's
/// process and `tag` (and a counter, so that two calls never share one).
pub fn tempdir(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("gaptop-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The names of the files in `dir` that end in `suffix`, sorted (`.part`: gaptop's temporary
/// outputs, which must never stay).
pub fn names_in(dir: &Path, suffix: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(suffix))
        .collect();
    v.sort();
    v
}

/// The repository's root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A recording in assets/.
pub fn asset(name: &str) -> PathBuf {
    root().join("assets").join(name)
}

/// A file in tests/fixtures/.
pub fn fixture(name: &str) -> PathBuf {
    root().join("tests/fixtures").join(name)
}

/// A trace of ../shared/traces/ (beside the checkout, as CI lays it out).
pub fn shared_trace(name: &str) -> PathBuf {
    root().join("../shared/traces").join(name)
}

/// A fixture of ../shared/fixtures/ (beside the checkout, as CI lays it out).
pub fn shared_fixture(name: &str) -> PathBuf {
    root().join("../shared/fixtures").join(name)
}

/// The gaptop binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_gaptop")
}

/// `gaptop report PATH --format FORMAT EXTRA...`'s output; the report must succeed.
pub fn report_out(path: &Path, format: &str, extra: &[&str]) -> Vec<u8> {
    succeeds(
        Command::new(bin())
            .arg("report")
            .arg(path)
            .args(["--format", format])
            .args(extra),
    )
}

/// What a gaptop command printed; it must succeed.
fn succeeds(c: &mut Command) -> Vec<u8> {
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `gaptop report PATHS... --format json` of several files or folders as one capture, which
/// must succeed.
pub fn report_paths(paths: &[&Path]) -> serde_json::Value {
    let out = succeeds(
        Command::new(bin())
            .arg("report")
            .args(paths)
            .args(["--format", "json"]),
    );
    serde_json::from_slice(&out).unwrap()
}

/// The communication analysis' ranks as (rank, wait ns, times late, ns late).
pub fn per_rank(comm: &serde_json::Value) -> Vec<(i64, i64, u64, i64)> {
    comm["per_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["rank"].as_i64().unwrap(),
                r["wait_ns"].as_i64().unwrap(),
                r["late_count"].as_u64().unwrap(),
                r["late_ns"].as_i64().unwrap(),
            )
        })
        .collect()
}

/// The report's advice for the site whose name starts with `site`.
pub fn advice<'a>(j: &'a serde_json::Value, site: &str) -> &'a serde_json::Value {
    j["advice"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["site"].as_str().unwrap().starts_with(site))
        .unwrap_or_else(|| panic!("{site} not advised: {}", j["advice"]))
}

/// `gaptop report --format json EXTRA... PATH`, which must succeed.
pub fn report_json(path: &Path, extra: &[&str]) -> serde_json::Value {
    serde_json::from_slice(&report_out(path, "json", extra)).unwrap()
}

/// The part of a rendered screen inside `r`.
pub fn pane(screen: &str, r: ratatui::layout::Rect) -> String {
    screen
        .lines()
        .skip(r.y as usize)
        .take(r.height as usize)
        .map(|l| {
            l.chars()
                .skip(r.x as usize)
                .take(r.width as usize)
                .collect::<String>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The UI drawn on a `w`×`h` TestBackend, as text.
pub fn render(a: &mut gaptop::app::App, w: u16, h: u16) -> String {
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(w, h)).unwrap();
    gaptop::views::render(&mut t, a).unwrap();
    let buf = t.backend().buffer().clone();
    let mut s = String::new();
    for y in 0..h {
        for x in 0..w {
            s.push_str(buf[(x, y)].symbol());
        }
        s.push('\n');
    }
    s
}

/// `go`, when it is on PATH. In CI (CI=true) it must be: .ci/run installs it.
pub fn go() -> Option<PathBuf> {
    let ok = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    if ok {
        return Some(PathBuf::from("go"));
    }
    assert!(
        std::env::var("CI").as_deref() != Ok("true"),
        "go is not on PATH: CI needs it to check the pprof output (.ci/run installs golang-go)"
    );
    eprintln!("skipped: go is not on PATH (apt-get install golang-go), so pprof cannot be run");
    None
}

/// `gaptop report PATHS --format FORMAT --full`'s output with `GAPTOP_READ_THREADS` set to
/// `threads`.
pub fn report_with_threads(paths: &[&Path], format: &str, threads: usize) -> Vec<u8> {
    let out = std::process::Command::new(bin())
        .arg("report")
        .args(paths)
        .args(["--format", format, "--full"])
        .env("GAPTOP_READ_THREADS", threads.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

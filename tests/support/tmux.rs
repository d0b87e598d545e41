//! A gaptop (or any command) in a detached tmux session of a given size, driven with
//! send-keys and read with capture-pane: what the end-to-end tests share.
#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};

pub struct Session {
    pub name: String,
}

impl Session {
    pub fn start(cmd: &str, w: u16, h: u16) -> Session {
        let ok = Command::new("tmux")
            .arg("-V")
            .output()
            .map(|o| o.status.success());
        assert!(
            ok.unwrap_or(false),
            "tmux is required for this test (.ci/run installs it)"
        );
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("gaptop-e2e-{}-{n}", std::process::id());
        let st = Command::new("tmux")
            .args([
                "new-session",
                "-d",
                "-s",
                &name,
                "-x",
                &w.to_string(),
                "-y",
                &h.to_string(),
            ])
            .arg(format!("{cmd}; echo GAPTOP_EXIT=$?; sleep 60"))
            .status()
            .unwrap();
        assert!(st.success());
        Session { name }
    }

    pub fn keys(&self, keys: &[&str]) {
        for k in keys {
            let st = Command::new("tmux")
                .args(["send-keys", "-t", &self.name, k])
                .status()
                .unwrap();
            assert!(st.success());
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    /// The pid of gaptop, the only child of the pane's shell.
    pub fn gaptop_pid(&self) -> String {
        let shell = Command::new("tmux")
            .args(["display-message", "-p", "-t", &self.name, "#{pane_pid}"])
            .output()
            .unwrap();
        let shell = String::from_utf8_lossy(&shell.stdout).trim().to_string();
        let pid = Command::new("pgrep")
            .args(["-P", &shell, "gaptop"])
            .output()
            .unwrap();
        let pid = String::from_utf8_lossy(&pid.stdout).trim().to_string();
        assert!(!pid.is_empty(), "no gaptop under shell {shell}");
        pid
    }

    pub fn screen(&self) -> String {
        let out = Command::new("tmux")
            .args(["capture-pane", "-p", "-t", &self.name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen contains `what` (the UI redraws on its own clock).
    pub fn wait_for(&self, what: &str) -> String {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(what) {
                return s;
            }
            if t.elapsed() > Duration::from_secs(15) {
                panic!("timed out waiting for {what:?}; screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Session {
    /// Waits until `done` holds for the screen, at most `secs` seconds; `what` says what for.
    pub fn wait_until(&self, secs: u64, what: &str, done: impl Fn(&str) -> bool) -> String {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if done(&s) {
                return s;
            }
            if t.elapsed() > Duration::from_secs(secs) {
                panic!("timed out waiting for {what}; screen:\n{s}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", &self.name])
            .status();
    }
}

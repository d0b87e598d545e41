//! `gaptop serve` over a program playing a CUDA one against the fake libcupti: its /metrics
//! and /sites read directly, and scraped by a real Prometheus server (Debian's `prometheus`
//! package) whose HTTP query API must show the idle and launch series arriving and growing.
//! Without a `prometheus` binary the last test says so and passes, except on CI (CI=true),
//! where it fails: .ci/run installs it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[path = "../collector/tests/support/mod.rs"]
mod fake_gpu;
mod support;

/// A process killed when the test ends, however it ends.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `gaptop serve --listen 127.0.0.1:0 ARGS` with the fake CUDA install; returns it and the
/// address it serves on (from its first line).
fn serve(dir: &Path, target: &Path, args: &[&str]) -> (Killed, String) {
    serve_with(dir, target, args, &[])
}

/// [`serve`] with more variables in its environment.
fn serve_with(dir: &Path, target: &Path, args: &[&str], env: &[(&str, &str)]) -> (Killed, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_gaptop"));
    c.envs(env.iter().copied());
    c.args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("CUDA_HOME", dir.join("cuda"))
        .env("GAPTOP_COLLECTOR", target.join("libgaptop_collector.so"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env("GAPTOP_CONTROL_DIR", dir.join("ctl"))
        .env("FAKE_STEP_SLEEP", "0.01")
        .env("PATH", fake_nvidia_smi(dir))
        .env("CUDA_VISIBLE_DEVICES", "1")
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut err = BufReader::new(child.stderr.take().unwrap());
    let mut line = String::new();
    err.read_line(&mut line).unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split("/metrics").next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_string();
    // Keep reading its stderr so that it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut sink = String::new();
        while err.read_line(&mut sink).is_ok_and(|n| n > 0) {
            sink.clear();
        }
    });
    (Killed(child), addr)
}

/// An nvidia-smi that lists two GPUs (not in bus order); returns a PATH that finds it first.
fn fake_nvidia_smi(dir: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let smi = bin.join("nvidia-smi");
    std::fs::write(
        &smi,
        "#!/bin/sh\necho 'GPU-2d6f7c1e-0000-4b4b-9c9c-000000000002, NVIDIA H200, 00000000:9A:00.0'\n\
         echo 'GPU-11111111-0000-4b4b-9c9c-000000000001, NVIDIA H200, 00000000:1B:00.0'\n",
    )
    .unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

fn get(url: &str) -> Result<String, String> {
    ureq::get(url)
        .call()
        .map_err(|e| e.to_string())?
        .body_mut()
        .read_to_string()
        .map_err(|e| e.to_string())
}

/// The value of the series `name{labels}` in a /metrics text (labels: `k="v"` pairs that must
/// all be present).
fn value(text: &str, name: &str, labels: &[&str]) -> Option<f64> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .find(|l| labels.iter().all(|k| l.contains(k)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

fn wait_until<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t.elapsed() < Duration::from_secs(secs), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn script_cmd(steps: u32) -> Vec<String> {
    vec![
        "--".into(),
        "python3".into(),
        fake_gpu::script().display().to_string(),
        steps.to_string(),
    ]
}

/// The metrics as served: the GPU's idle time by category (adding up, with busy time, to the
/// time observed), launches, steps and drops, named as Prometheus names things, growing from
/// window to window; /sites holds the launch stacks' idle time, folded.
#[test]
fn serve_exposes_growing_metrics_and_sites() {
    let target = fake_gpu::build();
    let dir = fake_gpu::fake_cuda(&target, "serve");
    let cmd = script_cmd(2000);
    let mut args = vec!["--window", "300ms", "--every", "600ms"];
    args.extend(cmd.iter().map(String::as_str));
    let (_serve, addr) = serve(&dir, &target, &args);
    let url = format!("http://{addr}/metrics");
    let first = wait_until("a first window", 20, || {
        let t = get(&url).ok()?;
        (value(&t, "gaptop_windows_total", &[])? >= 1.0).then_some(t)
    });
    for help in [
        "# TYPE gaptop_gpu_idle_seconds counter",
        "# UNIT gaptop_gpu_idle_seconds seconds",
        "# TYPE gaptop_gpu_launches counter",
        "# TYPE gaptop_step_seconds histogram",
        "# TYPE gaptop_collector_dropped_records counter",
    ] {
        assert!(first.contains(help), "{help} in\n{first}");
    }
    // CUDA_VISIBLE_DEVICES=1: the program's device 0 is the second GPU in bus order, named
    // by its UUID as the DCGM exporter names it.
    let gpu0 = r#"gpu="0",UUID="GPU-2d6f7c1e-0000-4b4b-9c9c-000000000002""#;
    let idle = |t: &str, c: &str| {
        value(
            t,
            "gaptop_gpu_idle_seconds_total",
            &[gpu0, &format!(r#"category="{c}""#)],
        )
        .unwrap_or_else(|| panic!("idle {c} in\n{t}"))
    };
    // Every observed second is busy or idle in some category (to float precision).
    let cats = ["host_wait", "kernel_wait", "other", "no_launch"];
    let total: f64 = cats.iter().map(|c| idle(&first, c)).sum::<f64>()
        + value(&first, "gaptop_gpu_busy_seconds_total", &[gpu0]).unwrap();
    let observed = value(&first, "gaptop_observed_seconds_total", &[]).unwrap();
    assert!(
        (total - observed).abs() < 1e-6 * observed.max(1.0),
        "{first}"
    );
    assert!(idle(&first, "host_wait") > 0.0, "{first}");
    assert!(value(&first, "gaptop_gpu_launches_total", &[gpu0]).unwrap() >= 9.0);
    assert!(
        value(&first, "gaptop_step_seconds_count", &[]).unwrap() >= 1.0,
        "{first}"
    );
    let w1 = value(&first, "gaptop_windows_total", &[]).unwrap();
    let later = wait_until("a later window", 20, || {
        let t = get(&url).ok()?;
        (value(&t, "gaptop_windows_total", &[])? > w1).then_some(t)
    });
    assert!(idle(&later, "host_wait") > idle(&first, "host_wait"));
    assert!(
        value(&later, "gaptop_gpu_launches_total", &[gpu0]).unwrap()
            > value(&first, "gaptop_gpu_launches_total", &[gpu0]).unwrap()
    );
    let sites = get(&format!("http://{addr}/sites")).unwrap();
    let top = sites.lines().next().unwrap_or_default();
    assert!(
        top.contains("): rope;cudaLaunchKernel") || top.contains("): attention;"),
        "{sites}"
    );
    let ns: u64 = top.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(ns > 0, "{top}");
    // The latest window as a pprof profile: idle time by launch stack over about one window.
    let url = format!("http://{addr}/debug/pprof/idle");
    let bytes = ureq::get(&url)
        .call()
        .unwrap()
        .body_mut()
        .read_to_vec()
        .unwrap();
    let p = gaptop::pprof::decode(&bytes).unwrap();
    let name = |i: i64| p.string_table[i as usize].as_str();
    assert_eq!(name(p.sample_type[0].r#type), "idle");
    assert!(
        (250e6..2e9).contains(&(p.duration_nanos as f64)),
        "{}",
        p.duration_nanos
    );
    let idle: i64 = p.sample.iter().map(|x| x.value[0]).sum();
    assert!(idle > 0 && idle <= p.duration_nanos, "{idle}");
    let functions: Vec<&str> = p.function.iter().map(|f| name(f.name)).collect();
    assert!(
        functions.iter().any(|f| f.ends_with("rope")),
        "{functions:?}"
    );
    // And pprof itself reads it from the server, as it reads a Go program's.
    if let Some(go) = support::go() {
        let o = Command::new(&go)
            .args(["tool", "pprof", "-top", &url])
            .env("HOME", &dir)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(out.contains("rope"), "{out}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `serve PID`: a program started dormant elsewhere is served, and serve ends with it. A
/// listen address that cannot be had is one line and exit 1.
#[test]
fn serve_a_running_program_until_it_ends() {
    let target = fake_gpu::build();
    let dir = fake_gpu::fake_cuda(&target, "servepid");
    let mut p = Command::new(env!("CARGO_BIN_EXE_gaptop"));
    p.args(["run", "--dormant", "--job", "decoder"])
        .args(script_cmd(150))
        .env("CUDA_HOME", dir.join("cuda"))
        .env("GAPTOP_COLLECTOR", target.join("libgaptop_collector.so"))
        .env("GAPTOP_FAKE_CUPTI", "1")
        .env("GAPTOP_CONTROL_DIR", dir.join("ctl"))
        .env("FAKE_STEP_SLEEP", "0.01")
        .env("FAKE_PIDFILE", dir.join("pid"))
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let program = Killed(p.spawn().unwrap());
    wait_until("the program", 20, || {
        dir.join("ctl").read_dir().ok()?.next().map(|_| ())
    });
    let (mut s, addr) = serve(
        &dir,
        &target,
        &["--window", "200ms", "--every", "400ms", "decoder"],
    );
    let url = format!("http://{addr}/metrics");
    wait_until("a window", 20, || {
        let t = get(&url).ok()?;
        (value(&t, "gaptop_gpu_launches_total", &[r#"gpu="0""#])? > 0.0).then_some(())
    });
    let st = wait_until("serve to end with the program", 30, || {
        s.0.try_wait().ok()?
    });
    assert!(st.success());
    drop(program);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_gaptop"))
        .args(["serve", "--listen", &addr, "1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Idle and slow clients cannot hold `serve` (on loopback only): with a 1 s head timeout and
/// at most 8 connections, 40 idle connections, one that drips a request head a byte at a time
/// and one kept alive after its request are all closed by the server: the oldest idle ones
/// at once, as newer ones come, the last 8 at the timeout, none before it; then /metrics
/// still answers. (`tests/serve_http.rs`: a scrape beside them answers at once.)
#[test]
fn idle_and_slow_clients_are_closed_and_metrics_still_answer() {
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;
    let target = fake_gpu::build();
    let dir = fake_gpu::fake_cuda(&target, "slowclients");
    let cmd = script_cmd(3000);
    let mut args = vec!["--window", "200ms", "--every", "400ms"];
    args.extend(cmd.iter().map(String::as_str));
    let env = [
        ("GAPTOP_HTTP_TIMEOUT", "1s"),
        ("GAPTOP_HTTP_CONNECTIONS", "8"),
    ];
    let (_serve, addr) = serve_with(&dir, &target, &args, &env);
    assert!(addr.starts_with("127.0.0.1:"), "{addr}");
    let url = format!("http://{addr}/metrics");
    wait_until("a first answer", 20, || get(&url).ok());

    // Kept alive after a request: the wait for the next request's head times out too.
    let mut kept = TcpStream::connect(&addr).unwrap();
    kept.write_all(b"GET /metrics HTTP/1.1\r\nHost: gaptop\r\n\r\n")
        .unwrap();
    kept.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let t = Instant::now();
    let mut got = Vec::new();
    let end = kept.read_to_end(&mut got);
    assert!(end.is_ok(), "still open 5 s after its answer: {end:?}");
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    assert!(
        t.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t.elapsed()
    );

    let started = Instant::now();
    let mut open: Vec<(usize, TcpStream)> = (0..40)
        .map(|i| {
            let s = TcpStream::connect(&addr).unwrap();
            s.set_nonblocking(true).unwrap();
            (i, s)
        })
        .collect();
    let drip = std::thread::spawn({
        let addr = addr.clone();
        move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(100)))
                .unwrap();
            let head = b"GET /metrics HTTP/1.1\r\nHost: gaptop\r\nX-Slow: ";
            let t = Instant::now();
            // A byte every 100 ms: the head never completes. At most 30 s.
            for b in head.iter().chain(std::iter::repeat(&b'a')).take(300) {
                if s.write_all(&[*b]).is_err() {
                    return Some(t.elapsed());
                }
                match s.read(&mut [0u8; 256]) {
                    Ok(0) => return Some(t.elapsed()),
                    Err(e) if e.kind() == ErrorKind::ConnectionReset => return Some(t.elapsed()),
                    _ => {}
                }
            }
            None
        }
    });
    let mut closed_at = Vec::new();
    while !open.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{} idle connections still open after 30 s",
            open.len()
        );
        open.retain_mut(|(i, s)| {
            let gone = match s.read(&mut [0u8; 256]) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() != ErrorKind::WouldBlock,
            };
            if gone {
                closed_at.push((*i, started.elapsed()));
            }
            !gone
        });
        std::thread::sleep(Duration::from_millis(50));
    }
    // At most 8 open at once: each new connection closed the oldest idle one at once, so the
    // oldest 32 or more went before the timeout, and the newest 7 not before it.
    let early: Vec<usize> = closed_at
        .iter()
        .filter(|c| c.1 < Duration::from_millis(800))
        .map(|c| c.0)
        .collect();
    assert!(early.len() >= 32, "{closed_at:?}");
    assert!(early.iter().all(|&i| i < early.len()), "{closed_at:?}");
    assert!(
        early.len() <= 33,
        "closed before the timeout: {closed_at:?}"
    );
    let dripped = drip.join().unwrap();
    assert!(dripped.is_some(), "the slow client was never closed");
    // The server still answers.
    let t = wait_until("/metrics after the slow clients", 10, || get(&url).ok());
    assert!(t.contains("gaptop_windows_total"), "{t}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `serve -- CMD` stopped by SIGTERM or SIGINT exits as shells report a signal, 143 or 130,
/// and stops the command it started.
#[test]
fn serve_exits_128_plus_the_signal_and_stops_its_command() {
    let target = fake_gpu::build();
    for (sig, code) in [("TERM", 143), ("INT", 130)] {
        let dir = fake_gpu::fake_cuda(&target, &format!("servesig{sig}"));
        let pidfile = dir.join("pid");
        let cmd = script_cmd(100_000);
        let mut args = vec!["--window", "200ms", "--every", "400ms"];
        args.extend(cmd.iter().map(String::as_str));
        let pf = pidfile.display().to_string();
        let (mut s, addr) = serve_with(&dir, &target, &args, &[("FAKE_PIDFILE", &pf)]);
        let url = format!("http://{addr}/metrics");
        let program = wait_until("the program", 20, || {
            let p = std::fs::read_to_string(&pidfile).ok()?;
            p.trim().parse::<u32>().ok()
        });
        wait_until("a first answer", 20, || get(&url).ok());
        Command::new("kill")
            .args([&format!("-{sig}"), &s.0.id().to_string()])
            .status()
            .unwrap();
        let st = wait_until("serve to end", 20, || s.0.try_wait().ok()?);
        assert_eq!(st.code(), Some(code), "SIG{sig}: {st:?}");
        wait_until("the command to end", 10, || {
            let stat = std::fs::read_to_string(format!("/proc/{program}/stat"));
            let gone = stat.map_or(true, |t| t.split_whitespace().nth(2) == Some("Z"));
            gone.then_some(())
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}

fn prometheus_binary() -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("prometheus"))
            .find(|f| f.is_file())
    })
}

/// A port free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A real Prometheus server scrapes `gaptop serve` every second; its query API shows the idle
/// and launch series with their labels, and shows them grow.
#[test]
fn prometheus_scrapes_serve() {
    let Some(prom) = prometheus_binary() else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "CI=true and no prometheus binary: .ci/run installs Debian's prometheus package"
        );
        eprintln!("no prometheus on PATH: the scrape test is skipped (apt-get install prometheus)");
        return;
    };
    let target = fake_gpu::build();
    let dir = fake_gpu::fake_cuda(&target, "prometheus");
    let cmd = script_cmd(4000);
    let mut args = vec!["--window", "300ms", "--every", "1s"];
    args.extend(cmd.iter().map(String::as_str));
    let (_serve, addr) = serve(&dir, &target, &args);
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: gaptop\n    static_configs:\n      - targets: ['{addr}']\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let _prom = Killed(
        Command::new(prom)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("tsdb").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let query = |q: &str| -> Option<Vec<serde_json::Value>> {
        let text = ureq::get(format!("http://127.0.0.1:{port}/api/v1/query"))
            .query("query", q)
            .call()
            .ok()?
            .body_mut()
            .read_to_string()
            .ok()?;
        let j: serde_json::Value = serde_json::from_str(&text).ok()?;
        (j["status"] == "success").then(|| j["data"]["result"].as_array().cloned())?
    };
    let scalar = |q: &str| -> Option<f64> {
        let r = query(q)?;
        r.first()?["value"][1].as_str()?.parse().ok()
    };
    let idle = r#"sum(gaptop_gpu_idle_seconds_total{job="gaptop",gpu="0",category="host_wait"})"#;
    let launches = r#"sum(gaptop_gpu_launches_total{job="gaptop",gpu="0"})"#;
    let (i1, l1) = wait_until("Prometheus to hold the series", 25, || {
        Some((
            scalar(idle).filter(|&v| v > 0.0)?,
            scalar(launches).filter(|&v| v > 0.0)?,
        ))
    });
    // The series as stored: a gpu label and every category, and the scrape itself up.
    let series = query(r#"gaptop_gpu_idle_seconds_total{job="gaptop"}"#).unwrap();
    let mut cats: Vec<String> = series
        .iter()
        .map(|s| s["metric"]["category"].as_str().unwrap_or("").to_string())
        .collect();
    cats.sort();
    assert_eq!(
        cats,
        ["host_wait", "kernel_wait", "no_launch", "other"],
        "{series:?}"
    );
    assert!(
        series.iter().all(|s| s["metric"]["gpu"] == "0"),
        "{series:?}"
    );
    assert_eq!(scalar(r#"up{job="gaptop"}"#), Some(1.0));
    wait_until("the series to grow", 20, || {
        (scalar(idle)? > i1 && scalar(launches)? > l1).then_some(())
    });
    // The Grafana dashboard's queries are PromQL Prometheus takes, and those of the series
    // every window adds return data (failures need a failed window).
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/grafana-gaptop.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let exprs: Vec<String> = dash["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().clone())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 8, "{exprs:?}");
    for e in &exprs {
        let q = e.replace("$host", ".*").replace("$__rate_interval", "10s");
        let r = wait_until(&format!("data for {q}"), 20, || {
            let r = query(&q)?;
            (!r.is_empty() || q.contains("window_failures")).then_some(r)
        });
        assert!(q.contains("window_failures") || !r.is_empty(), "{q}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

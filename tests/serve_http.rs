//! `gaptop serve`'s HTTP server against idle clients, on 127.0.0.1 only and with a bounded
//! number of sockets: a scrape answers at once beside 64 idle connections and beside more
//! than the connection limit, and a connection that sends nothing is closed within 2 s.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gaptop::serve::http::{start_with, Limits};
use gaptop::serve::metrics::Metrics;

fn server(limits: Limits) -> SocketAddr {
    let m = Arc::new(Metrics::new(Vec::new()));
    start_with("127.0.0.1:0", m, limits).unwrap()
}

/// `GET /metrics` on a new connection: the answer's first line and how long it took.
fn scrape(addr: SocketAddr) -> (String, Duration) {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: gaptop\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&got);
    (text.lines().next().unwrap_or("").to_string(), took)
}

/// Connections that send nothing.
fn idle(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nonblocking(true).unwrap();
            s
        })
        .collect()
}

/// Whether the server closed `s` (end of stream or reset).
fn closed(s: &mut TcpStream) -> bool {
    match s.read(&mut [0u8; 64]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    }
}

/// With the default limits, 64 idle connections do not delay a scrape (it used to wait for
/// one to time out, 9.5 s), and each idle one is closed within about 2 s of opening.
#[test]
fn a_scrape_answers_at_once_beside_64_idle_connections() {
    let addr = server(Limits::default());
    let opened = Instant::now();
    let mut open = idle(addr, 64);
    std::thread::sleep(Duration::from_millis(200));
    let (status, took) = scrape(addr);
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    assert!(
        took < Duration::from_millis(500),
        "the scrape took {took:?}"
    );
    while !open.is_empty() {
        let t = opened.elapsed();
        assert!(
            t < Duration::from_millis(3500),
            "{} idle connections still open after {t:?}",
            open.len()
        );
        open.retain_mut(|s| !closed(s));
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// 300 idle connections against a limit of 64 and a head timeout far longer than the test:
/// each new one closes the oldest idle one, so the scrape answers at once, the oldest are
/// closed and the newest stay open.
#[test]
fn beyond_the_connection_limit_the_oldest_idle_connection_is_closed() {
    let limits = Limits {
        head_timeout: Duration::from_secs(60),
        max_life: Duration::from_secs(60),
        connections: 64,
    };
    let addr = server(limits);
    let mut open = idle(addr, 300);
    let (status, took) = scrape(addr);
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    assert!(
        took < Duration::from_millis(1000),
        "the scrape took {took:?}"
    );
    // The scrape's connection took a place too: at most 63 idle ones are left, the newest.
    let t = Instant::now();
    let mut gone = vec![false; open.len()];
    while t.elapsed() < Duration::from_millis(500) {
        for (g, s) in gone.iter_mut().zip(&mut open) {
            *g = *g || closed(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let n = gone.iter().filter(|&&g| g).count();
    assert!(n >= 300 - 63, "{n} of 300 closed");
    let last = gone.iter().rposition(|&g| g).unwrap();
    assert!(
        gone[..=last].iter().all(|&g| g) && last < 300 - 40,
        "not the oldest closed: {gone:?}"
    );
    // And they still do not hold it: another scrape answers at once.
    let (status, took) = scrape(addr);
    assert!(status.starts_with("HTTP/1.1 200"), "{status:?}");
    assert!(
        took < Duration::from_millis(1000),
        "the second scrape took {took:?}"
    );
}

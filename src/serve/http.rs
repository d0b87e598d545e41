//! The HTTP side of `gaptop serve`: `/metrics` (OpenMetrics text, for Prometheus), `/sites`
//! (gap time by launch stack, folded), `/debug/pprof/idle` (the latest windows' idle by launch
//! stack as a gzipped pprof profile, where Go programs serve theirs), on a tokio runtime of its
//! own thread, with axum.

use std::sync::Arc;

use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::metrics::Metrics;

/// The content type of OpenMetrics' text format, which Prometheus asks for first.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn router(m: Arc<Metrics>) -> Router {
    let metrics = {
        let m = m.clone();
        move || {
            let m = m.clone();
            async move { ([(CONTENT_TYPE, OPENMETRICS)], m.encode()).into_response() }
        }
    };
    let sites = {
        let m = m.clone();
        move || {
            let m = m.clone();
            async move { ([(CONTENT_TYPE, "text/plain; charset=utf-8")], m.sites()).into_response() }
        }
    };
    let pprof = move || {
        let m = m.clone();
        async move {
            match m.pprof() {
                Some(p) => ([(CONTENT_TYPE, "application/octet-stream")], p).into_response(),
                None => (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    "no window observed yet\n",
                )
                    .into_response(),
            }
        }
    };
    Router::new()
        .route("/metrics", get(metrics))
        .route("/sites", get(sites))
        .route("/debug/pprof/idle", get(pprof))
        .route(
            "/",
            get(|| async {
                "gaptop serve: /metrics (Prometheus), /sites (idle GPU time by launch stack, folded), \
                 /debug/pprof/idle (the latest windows' idle GPU time by launch stack, pprof)\n"
            }),
        )
}

/// What keeps slow or idle clients from holding the server: a connection that has not sent a
/// whole request head within `head_timeout` (a new one, or a kept-alive one between requests)
/// is closed; none lives past `max_life`; at most `connections` are open at once, a new one
/// closing the oldest that is serving no request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub head_timeout: std::time::Duration,
    pub max_life: std::time::Duration,
    pub connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            head_timeout: std::time::Duration::from_secs(2),
            max_life: std::time::Duration::from_secs(60),
            connections: 64,
        }
    }
}

impl Limits {
    /// The defaults, with GAPTOP_HTTP_TIMEOUT (a time: `5s`, `500ms`; the head timeout, and a
    /// connection's life six times it) and GAPTOP_HTTP_CONNECTIONS (a number) applied; a
    /// value that does not parse is an error that names it.
    pub fn from_env() -> anyhow::Result<Limits> {
        let mut l = Limits::default();
        if let Ok(v) = std::env::var("GAPTOP_HTTP_TIMEOUT") {
            let ns = gaptop_core::units::parse_time(&v)
                .ok()
                .filter(|&ns| ns > 0)
                .ok_or_else(|| {
                    anyhow::anyhow!("GAPTOP_HTTP_TIMEOUT={v:?}: give a time such as 10s or 500ms")
                })?;
            l.head_timeout = std::time::Duration::from_nanos(ns as u64);
            l.max_life = l.head_timeout * 6;
        }
        if let Ok(v) = std::env::var("GAPTOP_HTTP_CONNECTIONS") {
            l.connections = v.trim().parse().ok().filter(|&n| n > 0).ok_or_else(|| {
                anyhow::anyhow!("GAPTOP_HTTP_CONNECTIONS={v:?}: give a number above 0")
            })?;
        }
        Ok(l)
    }
}

/// Binds `addr` now (so that a taken port is said at once) and serves on a thread of its own
/// until the process ends, within the [`Limits`] the environment sets. Returns the address
/// bound (port 0 picks one).
pub fn start(addr: &str, m: Arc<Metrics>) -> anyhow::Result<std::net::SocketAddr> {
    start_with(addr, m, Limits::from_env()?)
}

/// [`start`] within `limits`.
pub fn start_with(
    addr: &str,
    m: Arc<Metrics>,
    limits: Limits,
) -> anyhow::Result<std::net::SocketAddr> {
    use anyhow::Context;
    let l =
        std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr}"))?;
    l.set_nonblocking(true)?;
    let bound = l.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("cannot start the HTTP server's runtime")?;
    std::thread::Builder::new()
        .name("gaptop-http".into())
        .spawn(move || {
            rt.block_on(async move {
                let Ok(l) = tokio::net::TcpListener::from_std(l) else {
                    return;
                };
                serve(l, router(m), limits).await
            })
        })?;
    Ok(bound)
}

/// The open connections, oldest first (by the order they were accepted): whether each is
/// serving a request, and what closes it.
#[derive(Default)]
struct Open {
    next: u64,
    conns: std::collections::BTreeMap<u64, Conn>,
}

struct Conn {
    busy: Arc<std::sync::atomic::AtomicUsize>,
    close: tokio::sync::oneshot::Sender<()>,
}

impl Open {
    /// Closes the oldest connection serving no request; false when every one is serving.
    fn close_oldest_idle(&mut self) -> bool {
        use std::sync::atomic::Ordering;
        let Some(&id) = self
            .conns
            .iter()
            .find(|(_, c)| c.busy.load(Ordering::Acquire) == 0)
            .map(|(id, _)| id)
        else {
            return false;
        };
        if let Some(c) = self.conns.remove(&id) {
            let _ = c.close.send(());
        }
        true
    }
}

/// Marks a connection busy while a request of its is served, however that ends.
struct Busy(Arc<std::sync::atomic::AtomicUsize>);

impl Busy {
    fn new(b: &Arc<std::sync::atomic::AtomicUsize>) -> Busy {
        b.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Busy(b.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// Accepts every connection, each served by hyper's HTTP/1 server with its head timeout, for
/// at most `limits.max_life`. When `limits.connections` are open, a new one closes the oldest
/// that is serving no request (an idle client must never make a scrape wait); only when all
/// are serving does it wait for one to end.
async fn serve(l: tokio::net::TcpListener, app: Router, limits: Limits) {
    use hyper::service::Service as _;
    let open = Arc::new(std::sync::Mutex::new(Open::default()));
    let ended = Arc::new(tokio::sync::Notify::new());
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.head_timeout);
    loop {
        let io = match l.accept().await {
            Ok((io, _)) => io,
            Err(_) => {
                // Out of descriptors or the like: wait rather than spin.
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Room for it: the oldest idle connection goes, or, all serving, the first to end.
        loop {
            let room = {
                let mut o = open.lock().unwrap_or_else(|e| e.into_inner());
                o.conns.len() < limits.connections || o.close_oldest_idle()
            };
            if room {
                break;
            }
            let _ =
                tokio::time::timeout(std::time::Duration::from_millis(50), ended.notified()).await;
        }
        let busy = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (close, closed) = tokio::sync::oneshot::channel();
        let id = {
            let mut o = open.lock().unwrap_or_else(|e| e.into_inner());
            let id = o.next;
            o.next += 1;
            o.conns.insert(
                id,
                Conn {
                    busy: busy.clone(),
                    close,
                },
            );
            id
        };
        let svc = hyper_util::service::TowerToHyperService::new(app.clone());
        let service = hyper::service::service_fn(move |req| {
            let b = Busy::new(&busy);
            let f = svc.call(req);
            async move {
                let r = f.await;
                drop(b);
                r
            }
        });
        let conn = http.serve_connection(hyper_util::rt::TokioIo::new(io), service);
        let (open, ended) = (open.clone(), ended.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = tokio::time::timeout(limits.max_life, conn) => {}
                _ = closed => {}
            }
            open.lock()
                .unwrap_or_else(|e| e.into_inner())
                .conns
                .remove(&id);
            ended.notify_one();
        });
    }
}

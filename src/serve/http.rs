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

/// Binds `addr` now (so that a taken port is said at once) and serves on a thread of its own
/// until the process ends. Returns the address bound (port 0 picks one).
pub fn start(addr: &str, m: Arc<Metrics>) -> anyhow::Result<std::net::SocketAddr> {
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
                let _ = axum::serve(l, router(m)).await;
            })
        })?;
    Ok(bound)
}

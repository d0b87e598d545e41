//! UI speed: full redraws with 10 million ops in the store at several zoom levels, and
//! input-to-screen latency while 1 million ops a second are appended.
//!
//! cargo run --release --example draw_bench -- [OPS]

use std::time::{Duration, Instant};

use gaptop::app::{Action, App, SourceState};
use gaptop_core::model::records::{ApiCall, ApiKind, GpuOp, LaneKey, OpKind};
use gaptop_core::model::store::Store;
use gaptop_wire as w;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

fn synthetic(n: u64) -> Store {
    let mut st = Store::new(usize::MAX);
    st.source = "synthetic".into();
    let p = st.add_process(1, -1, "bench");
    let names: Vec<u32> = (0..50)
        .map(|i| st.names.intern(&format!("kernel_{i}")))
        .collect();
    let api = st.names.intern("cudaLaunchKernel");
    let frame = st.names.intern("model.py(1): forward");
    let stack = st.stacks.intern(0, frame);
    let lanes: Vec<usize> = (0..4)
        .map(|i| {
            st.lane_id(LaneKey {
                proc: p,
                device: i / 2,
                stream: 7 + i % 2,
            })
        })
        .collect();
    let mut t = [0i64; 4];
    let mut x = 12345u64;
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let l = (i % 4) as usize;
        let gap = 500 + (x % 20_000) as i64;
        let dur = 1_000 + ((x >> 20) % 4_000) as i64;
        let start = t[l] + gap;
        t[l] = start + dur;
        let corr = i as u32 + 1;
        st.push_op_unsorted(
            lanes[l],
            GpuOp::new(
                start,
                start + dur,
                OpKind::Kernel,
                names[(x % 50) as usize],
                corr,
            ),
        );
        st.add_api(
            p,
            ApiCall {
                start: start - 3_000,
                end: start - 2_000,
                corr,
                tid: 1,
                name: api,
                stack,
                kind: ApiKind::Launch,
            },
        );
    }
    st.finish_bulk();
    st
}

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(10_000_000);
    let t = Instant::now();
    let store = synthetic(n);
    println!(
        "built {} ops in {:.1}s",
        store.op_count(),
        t.elapsed().as_secs_f64()
    );
    let (lo, hi) = store.span().unwrap();
    let mut app = App::new(store, SourceState::File);
    let mut term = Terminal::new(TestBackend::new(200, 60)).unwrap();
    println!(
        "{:>14} {:>12} {:>14} {:>14}",
        "window", "ops in view", "analysis ms", "redraw ms"
    );
    for frac in [1.0, 1e-2, 1e-4, 1e-6, 1e-8] {
        let w = (((hi - lo) as f64 * frac) as i64).max(1_000);
        app.lo = lo + (hi - lo) / 2 - w / 2;
        app.hi = app.lo + w;
        let t = Instant::now();
        app.refresh(true);
        // A wide window is analysed on a thread of its own: until it is in.
        app.settle();
        let analysis = t.elapsed().as_secs_f64() * 1e3;
        let reps = 20;
        let t = Instant::now();
        for _ in 0..reps {
            // What the terminal loop does for a frame: the tick (which builds the view model)
            // and the draw.
            app.tick();
            gaptop::views::render(&mut term, &mut app).unwrap();
        }
        let draw = t.elapsed().as_secs_f64() * 1e3 / reps as f64;
        let in_view = app.cache.as_ref().map(|c| c.summary.gpu_ops).unwrap_or(0);
        println!(
            "{:>14} {:>12} {:>14.1} {:>14.2}",
            gaptop_core::units::fmt_ns(w),
            in_view,
            analysis,
            draw
        );
    }

    // `e` on the whole capture: what the UI thread spends, and how long the export thread
    // shares the store (live data would wait that long) before it writes from its copy.
    app.lo = lo;
    app.hi = hi;
    app.refresh(true);
    app.settle();
    // A folder that does not exist: the copy is made, then creating the file fails at once
    // (writing ten million ops would take minutes and load the machine for the live part).
    app.export_to = std::env::temp_dir().join("gaptop-draw-bench-no-such-folder/x.json.gz");
    // Written without asking first, however large (the estimate is still made).
    app.export_ask_over = u64::MAX;
    let t = Instant::now();
    let fx = app.update(Action::Export);
    gaptop::app::term::perform(&mut app, fx, &mut gaptop::app::term::Feed::None);
    let on_ui = t.elapsed().as_secs_f64() * 1e3;
    while std::sync::Arc::strong_count(&app.store) > 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    println!(
        "\nexport of all {} ops: {on_ui:.2} ms on the UI thread, store shared for {:.2} s \
         (the copy), then written on its own thread (not here: the folder does not exist)",
        app.store.op_count(),
        t.elapsed().as_secs_f64()
    );
    let _ = app.finish_export();

    // Live: 1M ops/s appended through the wire decoder while keys arrive every 100 ms.
    println!("\nlive: appending 1,000,000 ops/s for 5 s, a key every 100 ms");
    let mut app = App::new(Store::new(1 << 30), SourceState::Live);
    app.lo = 0;
    app.hi = 2_000_000_000;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut h = Vec::new();
        w::encode_hello(&mut h, &w::Hello::new(1, -1, "bench"));
        let f = gaptop_wire::Decoder::new();
        drop(f);
        let _ = tx.send(gaptop_core::sources::live::LiveEvent::Frames(
            1,
            vec![
                w::Frame::Hello(w::Hello::new(1, -1, "bench")),
                w::Frame::Name {
                    id: 1,
                    text: "k".into(),
                },
            ],
        ));
        let start = Instant::now();
        let mut sent = 0u64;
        let mut t = 0u64;
        while start.elapsed() < Duration::from_secs(5) {
            let due = (start.elapsed().as_secs_f64() * 1e6) as u64;
            if sent >= due {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let k = (due - sent).min(50_000);
            let ops: Vec<w::Op> = (0..k)
                .map(|j| {
                    t += 1_000;
                    w::Op {
                        start: t,
                        end: t + 500,
                        corr: (sent + j) as u32,
                        name: 1,
                        stream: 7,
                        ..Default::default()
                    }
                })
                .collect();
            sent += k;
            if tx
                .send(gaptop_core::sources::live::LiveEvent::Frames(
                    1,
                    vec![w::Frame::Ops(ops)],
                ))
                .is_err()
            {
                return;
            }
        }
    });
    let mut lat = Vec::new();
    let start = Instant::now();
    let mut next_key = Instant::now() + Duration::from_millis(100);
    let mut zoom_in = true;
    while start.elapsed() < Duration::from_secs(5) {
        gaptop::app::term::drain(&mut app, &rx, Duration::from_millis(30));
        if Instant::now() >= next_key {
            let t = Instant::now();
            app.update(if zoom_in {
                Action::ZoomIn
            } else {
                Action::ZoomOut
            });
            zoom_in = !zoom_in;
            app.tick();
            gaptop::views::render(&mut term, &mut app).unwrap();
            lat.push(t.elapsed().as_secs_f64() * 1e3);
            next_key += Duration::from_millis(100);
        } else {
            app.tick();
            gaptop::views::render(&mut term, &mut app).unwrap();
        }
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| lat[((lat.len() - 1) as f64 * q) as usize];
    println!(
        "stored {} ops ({:.2}M/s), evicted {}; key-to-screen ms: p50 {:.1}  p99 {:.1}  max {:.1} over {} keys",
        app.store.total_ops,
        app.store.total_ops as f64 / 5e6,
        app.store.evicted_ops,
        p(0.5),
        p(0.99),
        lat[lat.len() - 1],
        lat.len()
    );
}

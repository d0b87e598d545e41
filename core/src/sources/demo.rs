//! The demo: a recording played back in real time as if its program were running, lap after
//! lap, on the channel a live run's events come on (`gaptop demo`). A source that rewrites wire
//! frames: later laps move every time and correlation id on, so the laps read as one longer
//! run of the same loop.

use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use gaptop_wire::Frame;

use super::live::LiveEvent;
use crate::model::store::Store;
use crate::model::window::Window;
use crate::units::Ns;

/// Where the steady steps of a window of a recorded run lie: the first steady step's start and
/// the last step's end, if steps are found (the analysis knows steps; a source does not, so
/// the caller hands this in: `analysis::steps::steady_span`).
pub type Steady = fn(&Store, Window) -> Option<(Ns, Ns)>;

/// How the demo plays its recording.
#[derive(Clone, Copy, Debug)]
pub struct DemoOptions {
    /// Playback rate: 2.0 plays twice as fast as the program ran.
    pub speed: f64,
    /// Play laps until the user quits.
    pub looping: bool,
    /// Otherwise play laps until they cover at least this much of the program's time (20 s:
    /// as long at speed 1, a second at speed 20).
    pub at_least: Duration,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            speed: 1.0,
            looping: false,
            at_least: Duration::from_secs(20),
        }
    }
}

/// A recording's frames for lap `lap` of the demo. The first lap is the recording less its
/// goodbyes (they come after the last lap). Later laps replay only its steady part, the
/// records from `from` on (the program's warm-up happens once), leave out what a connection
/// says once (hello, names, stacks, the sampler's opening), and move every time by
/// `lap * period` and every correlation id by `lap * corr_step`, so that the laps read as one
/// longer run of the same loop.
fn lap_frames(
    frames: &[(u32, Frame)],
    lap: u64,
    period: u64,
    from: u64,
    corr_step: u32,
) -> Vec<(u32, Frame)> {
    let dt = lap * period;
    let from = if lap == 0 { 0 } else { from };
    let dc = (lap as u32).wrapping_mul(corr_step);
    let corr = |c: u32| if c == 0 { 0 } else { c.wrapping_add(dc) };
    frames
        .iter()
        .filter_map(|(conn, f)| {
            let f = match f {
                Frame::Ops(ops) => Frame::Ops(
                    ops.iter()
                        .filter(|o| o.start >= from)
                        .map(|o| gaptop_wire::Op {
                            start: o.start + dt,
                            end: o.end + dt,
                            corr: corr(o.corr),
                            ..*o
                        })
                        .collect(),
                ),
                Frame::Apis(apis) => Frame::Apis(
                    apis.iter()
                        .filter(|a| a.start >= from)
                        .map(|a| gaptop_wire::Api {
                            start: a.start + dt,
                            end: a.end + dt,
                            corr: corr(a.corr),
                            outer_corr: corr(a.outer_corr),
                            ..*a
                        })
                        .collect(),
                ),
                Frame::Samples { pid, samples } => Frame::Samples {
                    pid: *pid,
                    samples: samples
                        .iter()
                        .filter(|s| s.time >= from)
                        .map(|s| gaptop_wire::Sample {
                            time: s.time + dt,
                            ..*s
                        })
                        .collect(),
                },
                Frame::Ranges(ranges) => Frame::Ranges(
                    ranges
                        .iter()
                        .filter(|r| r.start >= from)
                        .map(|r| gaptop_wire::Range {
                            start: r.start + dt,
                            end: r.end + dt,
                            ..*r
                        })
                        .collect(),
                ),
                Frame::Stats(s) => Frame::Stats(*s),
                Frame::Bye { .. } => return None,
                other if lap == 0 => other.clone(),
                _ => return None,
            };
            Some((*conn, f))
        })
        .collect()
}

/// The first op's start of a lap's frames, if it has ops.
fn first_op_start(f: &Frame) -> Option<u64> {
    match f {
        Frame::Ops(ops) => ops.iter().map(|o| o.start).min(),
        _ => None,
    }
}

/// Plays a recording's frames on a channel at the program's own pace (times `speed`), as if
/// it were running, lap after lap (see [`DemoOptions`]); `steady` says where the steady steps
/// of the recorded run lie, which the laps after the first replay.
pub fn feed(bytes: &'static [u8], opts: DemoOptions, steady: Steady) -> Receiver<LiveEvent> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let Ok(mut r) = super::recording::Reader::new(bytes) else {
            return;
        };
        let mut frames = Vec::new();
        while let Ok(Some(e)) = r.next_entry() {
            frames.push(e);
        }
        // A lap lasts from the first time in it to the last, and a breath more.
        let (mut lo, mut hi, mut max_corr) = (u64::MAX, 0u64, 0u32);
        for (_, f) in &frames {
            match f {
                Frame::Ops(ops) => ops.iter().for_each(|o| {
                    (lo, hi, max_corr) = (lo.min(o.start), hi.max(o.end), max_corr.max(o.corr))
                }),
                Frame::Apis(apis) => apis.iter().for_each(|a| {
                    (lo, hi, max_corr) = (lo.min(a.start), hi.max(a.end), max_corr.max(a.corr))
                }),
                _ => {}
            }
        }
        // Laps after the first replay the steady steps, from the first one on, each lap
        // starting a step's length after the last one ended.
        let mut store = Store::new(usize::MAX);
        let _ = super::recording::read_into(bytes, &mut store);
        let (from, end) = match steady(&store, Window::new(lo as Ns, hi as Ns)) {
            Some((first, last)) => {
                let (first, last) = (first.max(0) as u64, last.max(0) as u64);
                (first.clamp(lo, hi), last.max(hi))
            }
            None => (lo, hi),
        };
        let period = end - from + 1_000_000;
        let speed = if opts.speed.is_finite() && opts.speed > 0.0 {
            opts.speed
        } else {
            1.0
        };
        let started = Instant::now();
        let mut origin: Option<u64> = None;
        let mut lap = 0u64;
        loop {
            for (conn, f) in lap_frames(&frames, lap, period, from, max_corr.saturating_add(1)) {
                if let Some(t) = first_op_start(&f) {
                    let o = *origin.get_or_insert(t);
                    let due = Duration::from_secs_f64(t.saturating_sub(o) as f64 / 1e9 / speed);
                    if let Some(wait) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(wait.min(Duration::from_secs(2)));
                    }
                }
                if tx.send(LiveEvent::Frames(conn, vec![f])).is_err() {
                    return;
                }
            }
            lap += 1;
            if !opts.looping && lap * period >= opts.at_least.as_nanos() as u64 {
                break;
            }
        }
        for (conn, f) in &frames {
            if matches!(f, Frame::Bye { .. })
                && tx.send(LiveEvent::Frames(*conn, vec![f.clone()])).is_err()
            {
                return;
            }
        }
        let _ = tx.send(LiveEvent::Exited("demo finished".into()));
    });
    rx
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Later laps move times and correlation ids on, keep each lap's own launches with its own
    /// ops, and say the definitions and the goodbye only once.
    #[test]
    fn laps_read_as_one_longer_run() {
        let mut r =
            super::super::recording::Reader::new(&include_bytes!("../../../assets/gpt2.rec")[..])
                .unwrap();
        let mut frames = Vec::new();
        while let Some(e) = r.next_entry().unwrap() {
            frames.push(e);
        }
        let count =
            |fs: &[(u32, Frame)], p: fn(&Frame) -> bool| fs.iter().filter(|(_, f)| p(f)).count();
        let lap0 = lap_frames(&frames, 0, 1_000_000_000, 0, 100_000);
        let lap2 = lap_frames(&frames, 2, 1_000_000_000, 0, 100_000);
        assert!(count(&lap0, |f| matches!(f, Frame::Hello(_))) > 0);
        assert!(count(&lap0, |f| matches!(f, Frame::Name { .. })) > 0);
        assert_eq!(
            count(&lap2, |f| matches!(
                f,
                Frame::Hello(_) | Frame::Name { .. } | Frame::Stack { .. }
            )),
            0
        );
        assert_eq!(count(&lap0, |f| matches!(f, Frame::Bye { .. })), 0);
        let ops = |fs: &[(u32, Frame)]| -> Vec<gaptop_wire::Op> {
            fs.iter()
                .flat_map(|(_, f)| match f {
                    Frame::Ops(o) => o.clone(),
                    _ => vec![],
                })
                .collect()
        };
        let (a, b) = (ops(&lap0), ops(&lap2));
        assert_eq!(a.len(), b.len());
        assert!(!a.is_empty());
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(y.start, x.start + 2_000_000_000);
            assert_eq!(y.end - y.start, x.end - x.start);
            if x.corr != 0 {
                assert_eq!(y.corr, x.corr + 200_000);
            }
        }
    }
}

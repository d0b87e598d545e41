//! `analysis::analyse`, the one analysis every reader makes: what its options change and what
//! they leave alone.

use std::path::Path;

use gaptop_core::analysis::{analyse, Options, StepsOver};
use gaptop_core::model::store::Store;
use gaptop_core::model::window::Window;

fn load(name: &str) -> Store {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../assets")
        .join(name);
    gaptop_core::sources::load_path(&p, usize::MAX).unwrap()
}

/// Leaving out what to fix (as `serve` does) leaves the summary and the steps as they were.
#[test]
fn without_advice_the_summary_and_steps_are_the_same() {
    let st = load("gpt2.rec");
    let with = analyse(&st, Window::all(), &Options::default());
    let without = analyse(
        &st,
        Window::all(),
        &Options {
            advice: false,
            ..Options::default()
        },
    );
    assert!(!with.diagnosis.advice.is_empty());
    assert!(with.diagnosis.replay.is_some(), "gpt2 has steady steps");
    assert!(without.diagnosis.advice.is_empty());
    assert!(without.diagnosis.replay.is_none());
    let (a, b) = (&with.diagnosis.summary, &without.diagnosis.summary);
    assert_eq!((a.lo, a.hi, a.gpu_ops), (b.lo, b.hi, b.gpu_ops));
    assert_eq!(a.charged_ns(), b.charged_ns());
    assert_eq!(a.stacks, b.stacks);
    assert_eq!(with.diagnosis.steps, without.diagnosis.steps);
    assert_eq!(with.span, (a.lo, a.hi));
    assert!(with.comm.is_none() && with.ranks.is_empty(), "not asked");
}

/// Steps found over the capture (the UI's) are the window's own steps when the window is the
/// whole capture; they come back to be given again, and given they are not found again.
#[test]
fn the_captures_steps_come_back_and_are_reused() {
    let st = load("gpt2.rec");
    let own = analyse(&st, Window::all(), &Options::default());
    let over = analyse(
        &st,
        Window::all(),
        &Options {
            steps: StepsOver::Capture(None),
            ..Options::default()
        },
    );
    assert!(
        own.capture_steps.is_none(),
        "found in the window: not the capture's"
    );
    let all = over.capture_steps.expect("found over the capture");
    assert!(all.is_some());
    assert_eq!(over.diagnosis.steps, own.diagnosis.steps);
    // A window from the second step on: the capture's steps whole inside it.
    let every = all.as_ref().unwrap();
    assert!(every.steps.len() >= 3);
    let from = Window::new(every.steps[1].start, own.span.1);
    let part = analyse(
        &st,
        from,
        &Options {
            steps: StepsOver::Capture(Some(&all)),
            ..Options::default()
        },
    );
    assert!(part.capture_steps.is_none(), "given, not found again");
    let steps = part.diagnosis.steps.expect("steps from the second on");
    assert_eq!(steps.steps, every.steps[1..]);
}

/// The stalls between ranks and the ranks side by side, when asked, on a capture of two ranks.
#[test]
fn ranks_when_asked() {
    let st = load("ddp2.rec");
    assert!(st.rank_count() >= 2);
    let a = analyse(
        &st,
        Window::all(),
        &Options {
            comm: true,
            rank_rows: true,
            ..Options::default()
        },
    );
    assert!(a.comm.as_ref().is_some_and(|c| c.ranks >= 2));
    assert_eq!(a.ranks.len(), st.rank_count());
}

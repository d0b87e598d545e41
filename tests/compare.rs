//! `gaptop open A --compare B`: the details pane shows A compared with B (as `gaptop diff A B`),
//! and `w` cycles the selected gap, what to fix and the comparison.

mod support;

use gaptop::app::viewmodel::DetailsVm;
use gaptop::app::{Action, App, SourceState};
use gaptop_core::sources::load_path;
use support::{asset, render};

/// The cuDNN-attention Llama recording opened, compared with the one without it, as `main`
/// sets it up.
fn app() -> App {
    let load = |n: &str| load_path(&asset(n), usize::MAX).unwrap();
    let mut a = App::new(load("llama_decode.rec"), SourceState::File);
    let b = load("llama_decode_nocudnn.rec");
    a.compare = Some(gaptop::diff::diff(&a.store, &b, &a.cfg, None, None));
    a.show_compare = true;
    a.refresh(true);
    a
}

/// What the details pane shows, once drawn.
fn shown(a: &mut App) -> &'static str {
    render(a, 120, 40);
    match a.view.details {
        DetailsVm::Gap { .. } => "gap",
        DetailsVm::Fix { .. } => "fix",
        DetailsVm::Compare { .. } => "compare",
        _ => "other",
    }
}

/// The details pane's text (the rows between its title and the status line).
fn details(screen: &str) -> String {
    let lines: Vec<&str> = screen.lines().collect();
    let top = lines
        .iter()
        .rposition(|l| l.starts_with('┌'))
        .expect("the details pane's top");
    lines[top..].join("\n")
}

#[test]
fn the_comparison_shows_first_and_w_cycles_through_it() {
    let mut a = app();
    let s = details(&render(&mut a, 120, 40));
    assert!(
        s.contains("Compared with llama_decode_nocudnn.rec: a step at a time (w: what to fix"),
        "{s}"
    );
    assert!(s.contains("x faster"), "{s}");
    // The biggest change first: attention's idle a token, gone.
    let first = s
        .lines()
        .skip_while(|l| !l.contains("biggest change first"))
        .nth(1)
        .unwrap();
    assert!(first.contains("sdpa_attention_forward"), "{s}");
    assert!(first.contains("-35."), "{first}");
    let DetailsVm::Compare { lines, .. } = &a.view.details else {
        panic!("not the comparison: {:?}", a.view.details)
    };
    assert_eq!(
        lines[0].1,
        gaptop::diff::headline(a.compare.as_ref().unwrap())
    );
    insta::assert_snapshot!("compare_details_120x40", s);

    // w: what to fix (no gap is selected); again: the comparison.
    a.update(Action::WhatToFix);
    let s = details(&render(&mut a, 120, 40));
    assert!(s.contains("What to fix"), "{s}");
    a.update(Action::WhatToFix);
    assert_eq!(shown(&mut a), "compare");
    // A gap picked: its details; w then what to fix, the comparison, and the gap again.
    a.update(Action::BiggestOfAll);
    assert_eq!(shown(&mut a), "gap");
    let mut seen = Vec::new();
    for _ in 0..3 {
        a.update(Action::WhatToFix);
        seen.push(shown(&mut a));
    }
    assert_eq!(seen, ["fix", "compare", "gap"]);
}

/// Without `--compare`, `w` toggles the gap and what to fix, as it did.
#[test]
fn without_a_second_capture_w_is_what_it_was() {
    let mut a = App::new(
        load_path(&asset("gpt2.rec"), usize::MAX).unwrap(),
        SourceState::File,
    );
    a.refresh(true);
    a.update(Action::BiggestOfAll);
    let mut seen = Vec::new();
    for _ in 0..2 {
        a.update(Action::WhatToFix);
        seen.push(shown(&mut a));
    }
    assert_eq!(seen, ["fix", "gap"]);
}

//! Every pane at 80x24 and at 160x48 on captures no one here wrote (issue 39, item 4): the
//! Llama decode recording and its Kineto trace (../shared/fixtures, beside the checkout) and
//! GPT-2's recording (assets/). A narrow pane keeps what a row is (its time, where it was
//! launched) over why; frames are cut in their middle, keeping their line number; a verdict
//! wraps in the details; What to fix shows two rows at 80x24.

use gaptop::app::{Action, App, SourceState};
use gaptop_core::sources::load_path;

mod support;

use support::{pane, render};

fn open(p: &std::path::Path) -> App {
    let mut a = App::new(load_path(p, usize::MAX).unwrap(), SourceState::File);
    a.refresh(true);
    a.settle();
    a
}

fn llama() -> App {
    open(&support::shared_fixture("llama-decode/llama16-cudnn.rec"))
}

/// Each pane of the screen as it is drawn now, by name.
fn panes(a: &App, s: &str) -> Vec<(&'static str, String)> {
    let sc = a.view.screen;
    let mut v = vec![
        ("timeline", pane(s, sc.timeline)),
        ("rate", pane(s, sc.rate)),
        ("gaps", pane(s, sc.gaps)),
        ("tree", pane(s, sc.tree)),
        ("details", pane(s, sc.details)),
        ("status", pane(s, sc.status)),
    ];
    if let Some(k) = sc.keys {
        v.push(("keys", pane(s, k)));
    }
    v
}

/// The Llama recording's panes before and after `b`, and with the tree focused, at both sizes.
#[test]
fn every_pane_of_the_llama_recording_at_80x24_and_160x48() {
    for (w, h) in [(80u16, 24u16), (160, 48)] {
        let mut a = llama();
        let s = render(&mut a, w, h);
        for (name, p) in panes(&a, &s) {
            insta::assert_snapshot!(format!("llama_{name}_{w}x{h}"), p);
        }
        // What to fix: at least two rows, the first one's fix ending in … where cut.
        let fix = pane(&s, a.view.screen.details);
        assert!(fix.matches("/step  ").count() >= 2, "{fix}");
        // The tree's roots keep their line numbers.
        let tree = pane(&s, a.view.screen.tree);
        for line in [":12", ":14", ":8"] {
            assert!(tree.contains(line), "{line}\n{tree}");
        }
        assert!(!tree.contains("llama_decode.│"), "{tree}");
        // `b`: the top recurring code's gap.
        a.update(Action::BiggestGap);
        let s = render(&mut a, w, h);
        let gaps = pane(&s, a.view.screen.gaps);
        let details = pane(&s, a.view.screen.details);
        insta::assert_snapshot!(format!("llama_b_gaps_{w}x{h}"), gaps);
        insta::assert_snapshot!(format!("llama_b_details_{w}x{h}"), details);
        // Every gap row says where it was launched, with its line; the cause column is
        // what a narrow pane leaves out.
        // (A function too long for the line number too is cut at its end: it names the row.)
        for row in gaps.lines().skip(2).filter(|l| l.contains("ms ")) {
            let row = row.trim_end_matches('│');
            assert!(
                row.contains(".py:") || row.contains("…:") || row.ends_with('…'),
                "{row}\n{gaps}"
            );
        }
        assert!(gaps.contains("sdpa_attention_forward  "), "{gaps}");
        assert_eq!(gaps.contains("host_wait"), w >= 160, "{gaps}");
        // The verdict and its fix wrap: its text goes on past the first line.
        assert!(
            details.contains("recurring: in 23 of 23 steps"),
            "{details}"
        );
        assert!(
            details.contains("host_work (per-shape planning)"),
            "{details}"
        );
        if w >= 160 {
            assert!(
                details.contains("torch.backends.cuda.enable_cudnn_sdp(False))"),
                "{details}"
            );
        }
        // The tree focused: a node's details.
        a.update(Action::FocusNext);
        let s = render(&mut a, w, h);
        insta::assert_snapshot!(
            format!("llama_node_details_{w}x{h}"),
            pane(&s, a.view.screen.details)
        );
        insta::assert_snapshot!(
            format!("llama_tree_focused_{w}x{h}"),
            pane(&s, a.view.screen.tree)
        );
    }
}

/// The Kineto trace of the same program (no Python stacks) and GPT-2's recording: the gap
/// list and the details after `b`, and What to fix, at both sizes.
#[test]
fn the_llama_trace_and_gpt2_at_80x24_and_160x48() {
    let cases = [
        (
            "kineto_llama",
            support::shared_fixture("llama-decode/kineto-llama16-cudnn.json.gz"),
        ),
        ("gpt2", support::asset("gpt2.rec")),
    ];
    for (tag, p) in cases {
        for (w, h) in [(80u16, 24u16), (160, 48)] {
            let mut a = open(&p);
            let s = render(&mut a, w, h);
            let fix = pane(&s, a.view.screen.details);
            insta::assert_snapshot!(format!("{tag}_fix_{w}x{h}"), fix);
            a.update(Action::BiggestGap);
            let s = render(&mut a, w, h);
            insta::assert_snapshot!(
                format!("{tag}_b_gaps_{w}x{h}"),
                pane(&s, a.view.screen.gaps)
            );
            insta::assert_snapshot!(
                format!("{tag}_b_details_{w}x{h}"),
                pane(&s, a.view.screen.details)
            );
            insta::assert_snapshot!(format!("{tag}_tree_{w}x{h}"), pane(&s, a.view.screen.tree));
        }
    }
}

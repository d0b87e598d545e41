//! Every pane describes one window with one set of gaps (issue 31): the header's idle, the gap
//! list's total and the call tree's agree, `b` reaches the window's biggest gap, the steps strip
//! covers the window, `\` filters every gap of the window, a tree node has one count, and what
//! to fix says its order and shows its fix. In tmux at the end of the demo, and as snapshots of
//! the changed panes at 80x24 and 160x48.

mod support;

#[path = "support/tmux.rs"]
mod tmux;

use gaptop::app::{Action, App, Focus, SourceState};
use gaptop_core::sources::load_path;
use support::{pane, render};
use tmux::Session;

/// A duration as `units::fmt_short` writes it (`17.9s`, `522ms`, `85µs`, `0ns`), in ns.
fn ns(s: &str) -> f64 {
    let split = s
        .find(|c: char| c.is_alphabetic() || c == 'µ')
        .unwrap_or(s.len());
    let (v, unit) = s.split_at(split);
    let scale = match unit {
        "s" => 1e9,
        "ms" => 1e6,
        "µs" => 1e3,
        "ns" => 1.0,
        _ => panic!("not a duration: {s:?}"),
    };
    v.parse::<f64>()
        .unwrap_or_else(|_| panic!("not a duration: {s:?}"))
        * scale
}

/// The word after `after` on the screen (up to a space).
fn field<'a>(screen: &'a str, after: &str) -> &'a str {
    let at = screen
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} in\n{screen}"));
    screen[at + after.len()..].split([' ', ',']).next().unwrap()
}

/// The header's idle (the window's device idle), the gap list's total and the tree's, which
/// must agree to within the three digits they are written with.
fn totals_agree(screen: &str) -> (f64, u64) {
    let idle = ns(field(screen, "idle "));
    let list_count: u64 = field(screen, "┌ Gaps ").parse().unwrap();
    let list = ns(field(screen, &format!("┌ Gaps {list_count} · ")));
    let tree = ns(field(screen, "Call tree (top-down) · "));
    for (what, v) in [("gap list", list), ("call tree", tree)] {
        assert!(
            (v - idle).abs() <= 0.006 * idle,
            "{what} {v} against the header's idle {idle}\n{screen}"
        );
    }
    (idle, list_count)
}

/// The steps strip's bars, as columns after its label.
fn step_columns(screen: &str) -> (Vec<usize>, usize) {
    let row = screen
        .lines()
        .find(|l| l.starts_with("│steps "))
        .unwrap_or_else(|| panic!("no steps strip in\n{screen}"));
    let cells: Vec<char> = row.chars().skip(16).collect();
    let bars = cells
        .iter()
        .enumerate()
        .filter(|(_, c)| "▁▂▃▄▅▆▇█".contains(**c))
        .map(|(i, _)| i)
        .collect();
    (bars, cells.len().saturating_sub(1))
}

/// Plays the demo to its end and waits until the panes describe the whole capture.
fn ended(args: &str, w: u16, h: u16, secs: u64) -> (Session, String) {
    let s = Session::start(&format!("{} demo {args}", support::bin()), w, h);
    s.wait_until(secs, "the demo's end", |sc| {
        sc.contains("ENDED (demo finished)") && !sc.contains("panes: ")
    });
    // One more frame, so that nothing drawn before the last analysis stays.
    std::thread::sleep(std::time::Duration::from_millis(600));
    let screen = s.screen();
    assert!(!screen.contains("panes: "), "{screen}");
    (s, screen)
}

/// `--once`: the recording once. The totals agree; `b` picks its 61.8 ms gap (the first
/// forward pass's), whole capture or zoomed back out with `z`; its verdict counts the steps
/// the rate pane counts.
#[test]
fn the_panes_agree_at_the_end_of_one_lap() {
    for (w, h) in [(160u16, 48u16), (80, 24)] {
        let (s, screen) = ended("--once --speed 20", w, h, 60);
        let (idle, gaps) = totals_agree(&screen);
        assert!(
            idle > 0.5e9 && gaps > 7000,
            "{w}x{h}: {idle} {gaps}\n{screen}"
        );
        s.keys(&["B"]);
        let screen = s.wait_for("biggest gap: 61.83ms");
        assert!(
            screen.contains("gap 61.83ms at 142.91ms"),
            "{w}x{h}\n{screen}"
        );
        s.keys(&["Enter", "z", "B"]);
        let screen = s.wait_for("biggest gap: 61.83ms");
        if w >= 160 {
            let steps = field(&screen, "GPU busy ").to_string();
            let count = screen
                .split(" steps, median")
                .next()
                .and_then(|t| t.rsplit(' ').next())
                .unwrap();
            assert!(
                screen.contains(&format!("one-off (warm-up, step 1 of {count})")),
                "{w}x{h} ({steps}):\n{screen}"
            );
        }
        s.keys(&["q"]);
        s.wait_for("GAPTOP_EXIT=0");
    }
}

/// Laps of the recording, as the demo plays them, at 50 times their pace: over 400,000 ops,
/// analysed whole (not the part around the cursor). The totals agree, the steps strip covers
/// the timeline from its first tenth to its end, and `b` reaches the biggest gap of the window
/// (the first lap's 61.8 ms) even after `z`.
#[test]
fn the_panes_agree_at_the_end_of_the_looped_demo() {
    let (s, screen) = ended("--speed 50", 160, 48, 240);
    let (idle, gaps) = totals_agree(&screen);
    assert!(idle > 15e9 && gaps > 400_000, "{idle} {gaps}\n{screen}");
    let (bars, last) = step_columns(&screen);
    assert!(
        bars.first().is_some_and(|&c| c * 10 <= last)
            && bars.last().is_some_and(|&c| c + 3 >= last),
        "the strip covers the window: {bars:?} of {last}\n{screen}"
    );
    s.keys(&["z", "B"]);
    let screen = s.wait_for("biggest gap: 61.83ms");
    assert!(screen.contains("gap 61.83ms at 142.91ms"), "{screen}");
    // The gap list's longest row is the same gap.
    let first_row = screen
        .lines()
        .skip_while(|l| !l.contains("gap cause"))
        .nth(1)
        .unwrap();
    // (The cause column shows where the pane has the room: 160 columns.)
    assert!(
        first_row.contains("61.8ms host_wait   142.91ms"),
        "{screen}"
    );
    s.keys(&["q"]);
    s.wait_for("GAPTOP_EXIT=0");
}

fn recording(name: &str) -> App {
    let p = support::asset(name);
    let mut a = App::new(load_path(&p, usize::MAX).unwrap(), SourceState::File);
    a.refresh(true);
    a
}

/// What to fix on GPT-2 at both sizes: its title says the order, each row's first line what a
/// step of it idles (the key, descending), and the verdict with what a fix saves. At 80x24 the
/// first row shows its site, the saving a step and its verdict; at 160x48 its fix is whole.
#[test]
fn what_to_fix_says_its_order_and_shows_the_fix() {
    let mut a = recording("gpt2.rec");
    for (w, h) in [(80u16, 24u16), (160, 48)] {
        let s = render(&mut a, w, h);
        let p = pane(&s, a.view.screen.details);
        assert!(
            p.contains("What to fix in the window, by idle a step"),
            "{p}"
        );
        assert!(
            p.contains("3.07ms/step  38%  Conv1D.forward  pytorch_utils.py:119"),
            "{p}"
        );
        assert!(p.contains("host_work · saves ~1.66ms/step"), "{p}");
        // The first row's fix whole on a tall pane; at 80x24 a line of it, then the next row.
        if h >= 40 {
            assert!(
                p.contains("static shapes"),
                "the first row's fix, whole:\n{p}"
            );
        } else {
            assert!(p.matches("/step  ").count() >= 2, "two rows:\n{p}");
        }
        // The rows' keys (what a step of each idles) come in order.
        let keys: Vec<f64> = p
            .lines()
            .filter_map(|l| {
                let mut t = l.trim_matches('│').split_whitespace();
                let (key, share) = (t.next()?, t.next()?);
                let per = key.strip_suffix("/step")?;
                share.ends_with('%').then(|| ns(per))
            })
            .collect();
        assert!(!keys.is_empty(), "{p}");
        assert!(keys.windows(2).all(|x| x[0] >= x[1]), "{keys:?}\n{p}");
        insta::assert_snapshot!(format!("what_to_fix_{w}x{h}"), p);
    }
    // With the rows focused, the chosen row's fix is the whole one.
    a.update(Action::WhatToFix);
    assert_eq!(a.focus, Focus::Fix);
    a.update(Action::Down);
    let s = render(&mut a, 160, 48);
    let p = pane(&s, a.view.screen.details);
    assert!(
        p.contains("fuse (torch.compile; mode=\"reduce-overhead\" adds CUDA graphs), fewer larger ops, or a CUDA graph"),
        "{p}"
    );
}

/// The gap list, the tree and the rate pane at both sizes: their totals in their titles, one
/// count a tree row.
#[test]
fn the_gap_list_tree_and_rate_titles_give_the_windows_totals() {
    let mut a = recording("gpt2.rec");
    for (w, h) in [(80u16, 24u16), (160, 48)] {
        let s = render(&mut a, w, h);
        let (idle, gaps) = totals_agree(&s);
        assert_eq!(gaps, 7223);
        assert_eq!(idle, 522e6);
        let sc = a.view.screen;
        insta::assert_snapshot!(format!("gaps_{w}x{h}"), pane(&s, sc.gaps));
        insta::assert_snapshot!(format!("tree_{w}x{h}"), pane(&s, sc.tree));
        insta::assert_snapshot!(format!("rate_{w}x{h}"), pane(&s, sc.rate));
        assert!(!s.contains("launch ·") && !s.contains("launches ·"), "{s}");
    }
}

/// A tree node's row and its details give the same count, once: no second count from its
/// function's advice.
#[test]
fn a_tree_node_has_one_count() {
    let mut a = recording("gpt2.rec");
    for (w, h) in [(80u16, 24u16), (160, 48)] {
        render(&mut a, w, h);
        a.focus = Focus::Tree;
        let (id, gaps, gap_ns) = {
            let c = a.cache.as_ref().unwrap();
            let n = c.tree.nodes[0]
                .children
                .iter()
                .copied()
                .max_by_key(|&n| c.tree.nodes[n].gap_ns)
                .unwrap();
            (c.tree_ids[n], c.tree.nodes[n].gaps, c.tree.nodes[n].gap_ns)
        };
        a.tree_state.select(vec![id]);
        a.refresh(false);
        let s = render(&mut a, w, h);
        let sc = a.view.screen;
        let tree = pane(&s, sc.tree);
        let details = pane(&s, sc.details);
        let count = gaptop_core::units::count(gaps, "gap");
        assert!(tree.contains(&format!("{count} ·")), "{tree}");
        assert!(
            details.contains(&format!(
                "{} of gap time ({:.1}%) in {count},",
                gaptop_core::units::fmt_short(gap_ns),
                100.0 * gap_ns as f64 / a.cache.as_ref().unwrap().gap_ns() as f64
            )),
            "{details}"
        );
        assert!(!details.contains("gaps here"), "{details}");
        insta::assert_snapshot!(format!("node_details_{w}x{h}"), details);
        // Enter walks exactly that many.
        a.update(Action::Enter);
        assert_eq!(a.filtered_total(), Some(gaps));
        a.update(Action::Clear);
    }
}

/// `\` filters every gap of the window, not only the list's longest 2000: on the demo's laps
/// (over 100,000 gaps, so the longest 2000 hold few of them) "sdpa" finds the gaps the tree
/// charges to sdpa_attention_forward; the prompt shows `\`.
#[test]
fn the_gap_filter_holds_every_gap_of_the_window() {
    let rx = gaptop_core::sources::demo::feed(
        include_bytes!("../assets/gpt2.rec"),
        gaptop_core::sources::demo::DemoOptions {
            speed: 1e9,
            looping: false,
            at_least: std::time::Duration::from_secs(3),
        },
        gaptop_core::analysis::steps::steady_span,
    );
    let mut a = App::new(
        gaptop_core::model::store::Store::new(1 << 30),
        SourceState::Live,
    );
    while let Ok(ev) = rx.recv() {
        let end = matches!(ev, gaptop_core::sources::live::LiveEvent::Exited(_));
        a.update(gaptop::app::Msg::Source(ev));
        if end {
            break;
        }
    }
    // The window follows the data to its end; its analysis is made on a thread of its own.
    a.tick();
    a.settle();
    let c = a.cache.as_ref().unwrap();
    assert!(c.gaps_total > 20 * 2000, "{}", c.gaps_total);
    // What the tree holds under frames that name sdpa.
    let in_tree: u64 = {
        let t = &c.top;
        let names = &a.store.names;
        let mut n = 0;
        for (key, _) in t.leaves() {
            let frames = a.store.stacks.frames(key.0);
            let hit = frames
                .iter()
                .chain([&key.1, &key.2])
                .any(|&f| names.get(f).to_lowercase().contains("sdpa"));
            if hit {
                n += c.summary.stacks.get(&key).map_or(0, |s| s.0);
            }
        }
        n
    };
    assert!(in_tree > 2000, "{in_tree}");
    a.update(Action::FilterGaps);
    for ch in "sdpa".chars() {
        a.update(Action::SearchChar(ch));
    }
    assert_eq!(a.filtered_total(), Some(in_tree), "{}", a.message);
    assert!(
        a.message.starts_with(&format!("{in_tree} gaps (")),
        "{}",
        a.message
    );
    for (w, h) in [(80u16, 24u16), (160, 48)] {
        let s = render(&mut a, w, h);
        let status = pane(&s, a.view.screen.status);
        assert!(status.contains(" FILTER  \\sdpa▏"), "{status}");
        insta::assert_snapshot!(format!("filter_status_{w}x{h}"), status);
        let gaps = pane(&s, a.view.screen.gaps);
        assert!(gaps.contains(&format!("Gaps {in_tree} · ")), "{gaps}");
    }
}

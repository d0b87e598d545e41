//! The UI on ratatui's TestBackend: snapshots of every pane at 80x24 and at a large size, and
//! the behaviour of actions, on the hand-made multi-stream fixture.

use gaptop::app::{Action, App, Focus, SourceState};
use gaptop_core::sources::load_path;
use ratatui::backend::TestBackend;
use ratatui::Terminal;

mod support;

/// The hand-made two-stream fixture, on each stream's own gaps (HTA's, as its README works them
/// out); `device_gaps_are_the_default` looks at the device's.
fn app() -> App {
    let p = support::fixture("multi_stream.json");
    let mut a = App::new(load_path(&p, usize::MAX).unwrap(), SourceState::File);
    a.cfg.basis = gaptop_core::analysis::gaps::Basis::Stream;
    a.refresh(true);
    a
}

/// One of the recordings in assets/, loaded and analysed.
fn recording(name: &str) -> App {
    let p = support::asset(name);
    let mut a = App::new(load_path(&p, usize::MAX).unwrap(), SourceState::File);
    a.refresh(true);
    a
}

/// A key as the terminal loop handles it: the update, then the effects it asks for.
fn press(a: &mut App, action: Action) {
    let fx = a.update(action);
    gaptop::app::term::perform(a, fx, &mut gaptop::app::term::Feed::None);
}

use support::{pane, render};

#[test]
fn snapshot_main_screen_80x24() {
    let mut a = app();
    insta::assert_snapshot!(render(&mut a, 80, 24));
}

#[test]
fn snapshot_biggest_gap_selected_160x48() {
    let mut a = app();
    a.update(Action::BiggestOfAll);
    let s = render(&mut a, 160, 48);
    // The details pane names the cause and the launch stack.
    assert!(s.contains("gap 75µs"), "{s}");
    assert!(s.contains("host_wait (launch)"), "{s}");
    assert!(
        s.contains("launch stack: mlp  model.py:30 ‹ forward  model.py:10"),
        "{s}"
    );
    assert!(s.contains("CPU during gap: attn  model.py:20"), "{s}");
    insta::assert_snapshot!(s);
}

#[test]
fn snapshot_inverted_tree_and_help() {
    let mut a = app();
    a.update(Action::Invert);
    insta::assert_snapshot!("inverted_120x30", render(&mut a, 120, 30));
    a.update(Action::Help);
    for (w, h) in [(80, 24), (80, 23), (160, 48)] {
        let help = render(&mut a, w, h);
        let top = help
            .lines()
            .position(|l| l.contains("gaptop keys"))
            .unwrap();
        // Every key's description is whole, in full or in brief.
        for l in help
            .lines()
            .skip(top + 1)
            .take_while(|l| !l.contains("timeline:"))
        {
            assert!(!l.contains('…'), "{w}x{h}: cut: {l}");
        }
        // Every line of the legend shows, whole, and the frame closes below it.
        for legend in [
            "timeline: bar height = busy share; green kernel, blue copy, magenta NCCL",
            "nvtx row: the launching thread's NVTX ranges, the deepest wide enough",
            "gaps ─: yellow host_wait, cyan kernel_wait, red sync, magenta event wait",
            "rate: launches and busy % a column; steps: a bar a step, height = its time",
            "gap list «5ms 5ms»: the window cuts the gap there; details give it whole",
        ] {
            assert!(help.contains(legend), "{w}x{h}: {legend}\n{help}");
        }
        assert!(!help.contains("more lines on a taller"), "{w}x{h}\n{help}");
        // Every bindable action's keys show: each pair's and each single key.
        for k in [
            "ctrl+c q",
            "+ =/-",
            "h/l",
            "k ↑/j ↓",
            "n/N",
            "[/]",
            ">/<",
            "g home/G end",
        ] {
            assert!(help.contains(k), "{w}x{h}: {k}\n{help}");
        }
        for k in [
            "pageup/pagedown",
            "tab/shift+tab",
            "space",
            "enter",
            "esc",
            "\\",
        ] {
            assert!(help.contains(k), "{w}x{h}: {k}\n{help}");
        }
        if (w, h) != (80, 23) {
            insta::assert_snapshot!(format!("help_{w}x{h}"), help);
        }
    }
    // Shorter than its lines, the help says how many it hides.
    assert!(render(&mut a, 80, 20).contains(" 3 more lines on a taller terminal "));
}

/// The key that closes the help does only that: `K` does not stop the program, `b` picks no
/// gap, esc keeps the tree-node filter, the wheel does not zoom; `q` still quits.
#[test]
fn the_key_that_closes_the_help_does_nothing_else() {
    use gaptop::app::{MouseKind, Msg};
    let mut a = app();
    render(&mut a, 120, 40);
    let before = (a.selected_gap(), a.lo, a.hi, a.min_gap);
    for key in [
        Action::BiggestOfAll,
        Action::ZoomIn,
        Action::ThresholdUp,
        Action::Down,
        Action::Clear,
        Action::StopProgram,
        Action::Export,
    ] {
        a.update(Action::Help);
        assert!(a.help);
        let message = a.message.clone();
        let fx = a.update(key);
        assert!(!a.help, "{key:?} closes the help");
        assert!(fx.is_empty(), "{key:?}: {}", fx.len());
        assert_eq!((a.selected_gap(), a.lo, a.hi, a.min_gap), before, "{key:?}");
        assert_eq!(a.message, message, "{key:?}");
    }
    // With the help closed, the same key acts.
    a.update(Action::BiggestOfAll);
    assert!(a.selected_gap().is_some());
    // The mouse: moving it leaves the help open; the wheel and a click close it, no more.
    a.update(Action::Help);
    let (lo, hi) = (a.lo, a.hi);
    let at = |kind| Msg::Mouse {
        column: 60,
        row: 5,
        kind,
    };
    a.update(at(MouseKind::Other));
    assert!(a.help);
    a.update(at(MouseKind::ScrollUp));
    assert!(!a.help);
    assert_eq!((a.lo, a.hi), (lo, hi));
    // q quits, the help open or not.
    a.update(Action::Help);
    a.update(Action::Quit);
    assert!(a.quit);
}

#[test]
fn tiny_terminal_says_so() {
    let mut a = app();
    for (w, h) in [(79, 24), (80, 19), (1, 1), (20, 5)] {
        let s = render(&mut a, w, h);
        assert!(
            s.replace('\n', "").contains("too small") || w * h < 20,
            "{w}x{h}: {s}"
        );
    }
    // And back to a normal size draws the screen again.
    assert!(render(&mut a, 80, 24).contains("Call tree"));
}

/// An 80x24 terminal with tmux's status line leaves 80x23, a split 80x20: every pane is
/// drawn with its frame, a gap row and the details, the two-rank recording's four lanes too.
#[test]
fn short_terminals_keep_every_pane() {
    for name in ["gpt2.rec", "ddp2.rec"] {
        let mut a = recording(name);
        a.update(Action::BiggestOfAll);
        for h in [20, 23] {
            let s = render(&mut a, 80, h);
            for pane in [
                "GPU timeline",
                "launches/s",
                "Gaps ",
                "Call tree",
                "Details",
                // The message keeps its room on the status line (the zoom gives up its own).
                "biggest gap: ",
            ] {
                assert!(s.contains(pane), "{name} 80x{h}: no {pane}\n{s}");
            }
            assert!(s.contains("host_wait"), "{name} 80x{h}: no gap row\n{s}");
            assert!(s.contains("launch stack: "), "{name} 80x{h}\n{s}");
            let mid = s
                .lines()
                .filter(|l| l.starts_with('│') && l.contains("││"))
                .count();
            assert!(mid >= 3, "{name} 80x{h}: {mid} rows of gaps and tree\n{s}");
        }
    }
}

#[test]
fn gap_walk_zoom_and_filter() {
    let mut a = app();
    // Sorted by duration, n/N walk the list's rows (see
    // `one_offs_are_marked_and_hidden_and_n_follows_the_list`); sorted by time, the store.
    a.update(Action::Sort);
    a.update(Action::BiggestOfAll);
    assert_eq!(a.selected_gap().unwrap().dur(), 75_000);
    // n/N walk in time order across streams: 75 µs at 30, 58 µs at 50, 40 µs at 110.
    a.update(Action::NextGap);
    assert_eq!(a.selected_gap().unwrap().dur(), 58_000);
    a.update(Action::NextGap);
    assert_eq!(a.selected_gap().unwrap().dur(), 40_000);
    // Past the last gap n goes round to the first, and N before the first to the last.
    a.update(Action::NextGap);
    assert!(
        a.message
            .starts_with("past the last gap, back to the first: gap 5µs"),
        "{}",
        a.message
    );
    assert_eq!(a.selected_gap().unwrap().dur(), 5_000);
    a.update(Action::PrevGap);
    assert!(
        a.message
            .starts_with("before the first gap, on to the last"),
        "{}",
        a.message
    );
    assert_eq!(a.selected_gap().unwrap().dur(), 40_000);
    a.update(Action::NextGap);
    assert_eq!(a.selected_gap().unwrap().dur(), 5_000);

    // Enter zooms to the gap with its neighbours.
    a.update(Action::Enter);
    assert!(a.width() < 40_000, "window {}", a.width());
    assert!(a.lo <= 1_000_020_000 && a.hi >= 1_000_025_000);
    // Its first neighbour starts the capture: the padding stays inside it.
    assert!(a.lo >= 1_000_010_000, "window from {}", a.lo);
    a.update(Action::ZoomAll);
    assert_eq!((a.lo, a.hi), (1_000_010_000, 1_000_160_000));

    // Walk the gaps of one tree node: select the attn branch's gap, then its parent node.
    a.update(Action::BiggestOfAll);
    a.focus = Focus::Tree;
    a.update(Action::Left); // leaf -> its parent (cudaLaunchKernel under mlp)
    a.update(Action::Enter);
    assert!(
        a.message
            .starts_with("walking 3 gaps under cudaLaunchKernel"),
        "{}",
        a.message
    );
    assert_eq!(a.focus, Focus::Gaps);
    // Before the 75 µs gap, kernel_b's 5 µs one is under attn, not mlp: N goes round to the
    // node's last gap, and n back to its first.
    a.update(Action::PrevGap);
    assert_eq!(a.selected_gap().unwrap().dur(), 40_000, "{}", a.message);
    a.update(Action::NextGap);
    assert_eq!(a.selected_gap().unwrap().dur(), 75_000);
    a.update(Action::NextGap);
    assert_eq!(a.selected_gap().unwrap().dur(), 58_000);
    a.update(Action::Clear);
    assert!(a.node_filter.is_none());
}

#[test]
fn threshold_zoom_and_pause() {
    let mut a = app();
    assert_eq!(a.gaps().len(), 4);
    for _ in 0..6 {
        a.update(Action::ThresholdUp); // 1, 2, 4, 8, 16, 32 µs
    }
    assert_eq!(a.min_gap, 32_000);
    assert_eq!(a.gaps().len(), 3);
    a.update(Action::ThresholdUp);
    assert_eq!(a.min_gap, 64_000);
    assert_eq!(a.gaps().len(), 1, "only the 75 µs gap is 64 µs or longer");
    // The call tree holds the same gaps as the list: only the 75 µs one, all of its share.
    let tree_gaps = |a: &App| {
        let t = &a.cache.as_ref().unwrap().tree;
        (t.nodes[0].gaps, t.nodes[0].gap_ns)
    };
    assert_eq!(tree_gaps(&a), (1, 75_000));
    let top = &a.cache.as_ref().unwrap().rows[0];
    assert!(
        format!("{:?}", top).contains("100%"),
        "its share is of the gaps shown: {top:?}"
    );
    let screen = render(&mut a, 120, 30);
    assert!(
        screen.contains("Call tree (top-down, gaps ≥64µs)"),
        "{screen}"
    );
    // The node's details give the same share as its row.
    let first = a.cache.as_ref().unwrap().rows[0].id;
    a.focus = Focus::Tree;
    a.tree_state.select(vec![first]);
    // (Set by hand rather than by keys: the view model is rebuilt by hand too.)
    a.refresh(false);
    let screen = render(&mut a, 120, 30);
    assert!(screen.contains("(100.0%) in 1 gap, "), "{screen}");
    a.focus = Focus::Gaps;
    a.update(Action::ThresholdDown);
    assert_eq!(a.gaps().len(), 3);
    assert_eq!(tree_gaps(&a).0, 3);
    a.update(Action::ZoomIn);
    assert_eq!(a.width(), 75_000);
    for _ in 0..20 {
        a.update(Action::ZoomOut);
    }
    assert_eq!(a.width(), 150_000, "zoom out stops at the whole capture");
    for _ in 0..30 {
        a.update(Action::ZoomIn);
    }
    assert_eq!(a.width(), 1_000, "zoom in stops at 1 µs");
    a.update(Action::Pause);
    assert!(!a.paused, "a file cannot pause");
    let mut live = App::new(a.store, SourceState::Live);
    live.update(Action::Pause);
    assert!(live.paused && !live.follow);
    live.update(Action::Pause);
    assert!(!live.paused && live.follow);
}

/// Live, picking a gap holds the window on it: the next tick neither moves the cursor off the
/// gap nor scrolls it away, the status line says the view is held, and `z` follows again.
#[test]
fn selecting_a_gap_live_holds_the_window() {
    let mut live = App::new(app().store, SourceState::Live);
    live.tick();
    assert!(live.follow);
    let (lo, hi) = (live.lo, live.hi);
    live.update(Action::BiggestOfAll);
    let g = live.selected_gap().expect("a gap is selected");
    let at = g.start + g.dur() / 2;
    assert_eq!(live.cursor, at);
    live.tick();
    assert_eq!(
        live.cursor, at,
        "a tick while following moved the cursor off the gap"
    );
    assert_eq!((live.lo, live.hi), (lo, hi));
    let screen = render(&mut live, 160, 24);
    assert!(screen.contains("LIVE, held (z follows)"), "{screen}");
    live.update(Action::ZoomAll);
    assert!(live.follow);
    assert!(render(&mut live, 160, 24).contains(" LIVE "));
}

/// Panning cannot move a window that holds the whole capture off the data.
#[test]
fn panning_the_whole_capture_stays_on_the_data() {
    let mut a = app();
    let (slo, shi) = a.store.span().unwrap();
    a.update(Action::ZoomAll);
    for _ in 0..3 {
        a.update(Action::PanRight);
    }
    assert_eq!((a.lo, a.hi), (slo, shi));
    a.update(Action::PanLeft);
    assert_eq!((a.lo, a.hi), (slo, shi));
}

/// Live, the status line says how far the view trails the GPU, as the collectors measured it;
/// a file has no lag to show.
#[test]
fn live_status_shows_the_collectors_lag() {
    let with_lag = || {
        let mut shared = app().store;
        let store = std::sync::Arc::get_mut(&mut shared).expect("not shared");
        if store.procs.is_empty() {
            store.add_process(1, -1, "x");
        }
        store.procs[0].stats.lag_ns = 180_000_000;
        shared
    };
    let mut file = App::new(with_lag(), SourceState::File);
    assert!(!render(&mut file, 160, 24).contains("lag "));
    let mut live = App::new(with_lag(), SourceState::Live);
    let screen = render(&mut live, 160, 24);
    assert!(screen.contains("lag 180ms"), "{screen}");
}

/// With `--native` stacks, the details of a gap name the Python frames on one line and the
/// named native frames below them on the next; frames of stripped libraries are left out.
#[test]
fn details_split_python_and_native_frames() {
    let mut a = recording("gpt2_native.rec");
    a.update(Action::BiggestOfAll);
    let screen = render(&mut a, 160, 50);
    let line = |tag: &str| {
        screen
            .lines()
            .find(|l| l.contains(tag))
            .unwrap_or_else(|| panic!("no {tag} line in\n{screen}"))
            .to_string()
    };
    assert!(line("launch stack:").contains("Conv1D.forward"), "{screen}");
    let native = line("│native: ");
    assert!(native.contains("cublasLtMatmul [libcublasLt"), "{native}");
    assert!(native.contains("[libtorch_cuda.so]"), "{native}");
    assert!(
        !native.contains("+0x"),
        "unnamed frames say nothing: {native}"
    );
    assert!(
        gaptop_core::frames::is_unnamed_native("libcublasLt.so.13+0x71b8533")
            && !gaptop_core::frames::is_unnamed_native("f.py(3): g+0x1")
            && gaptop_core::frames::is_native_frame("at::native::add [libtorch_cuda.so]")
            && !gaptop_core::frames::is_native_frame("model.py(4): f")
    );
}

/// At a zoom where one cell holds many kernels, a big gap among them still shows: its cells
/// keep their busy block but take the gap's colour.
#[test]
fn a_big_gap_inside_a_busy_cell_is_not_dropped() {
    use gaptop_core::model::records::{ApiCall, ApiKind, GpuOp, LaneKey, OpKind};
    use gaptop_core::model::store::Store;
    let mut st = Store::new(usize::MAX);
    let p = st.add_process(1, -1, "t");
    let k = st.names.intern("k");
    let api = st.names.intern("cudaLaunchKernel");
    let lane = st.lane_id(LaneKey {
        proc: p,
        device: 0,
        stream: 7,
    });
    let mut t = 0i64;
    for i in 0..20_000u32 {
        // 1 µs kernels back to back with 100 ns gaps, and one 40 µs host_wait gap at op 10,000.
        let gap = if i == 10_000 { 40_000 } else { 100 };
        let start = t + gap;
        st.add_op(
            lane,
            GpuOp::new(start, start + 1_000, OpKind::Kernel, k, i + 1),
        );
        st.add_api(
            p,
            ApiCall {
                start: start - 50,
                end: start - 10,
                corr: i + 1,
                tid: 1,
                name: api,
                stack: 0,
                kind: ApiKind::Launch,
            },
        );
        t = start + 1_000;
    }
    let mut a = App::new(st, SourceState::File);
    a.refresh(true);
    let mut term = Terminal::new(TestBackend::new(100, 24)).unwrap();
    gaptop::views::render(&mut term, &mut a).unwrap();
    let buf = term.backend().buffer().clone();
    // Lane row 1, columns after the 16-character label; the 62 ms capture over 82 columns puts
    // ~250 kernels in each cell, so every cell is mostly busy.
    let row: Vec<_> = (17..99).map(|x| buf[(x, 1)].clone()).collect();
    assert!(row.iter().all(|c| c.symbol() != " "), "every cell is busy");
    let marked = row
        .iter()
        .filter(|c| c.bg == ratatui::style::Color::Yellow)
        .count();
    assert!(
        marked >= 1,
        "the 40 µs host_wait gap is drawn in its colour"
    );
    assert!(
        marked <= 2,
        "only the cells holding it are marked ({marked})"
    );
}

/// The 2-GPU recording: both ranks' lanes, in rank order, and the NCCL stall in the rate pane.
#[test]
fn two_ranks_show_their_lanes_and_the_nccl_stall() {
    let mut a = recording("ddp2.rec");
    let s = render(&mut a, 120, 44);
    let r0 = s.find("r0 gpu0 s7").expect("rank 0 lane");
    let r1 = s.find("r1 gpu1 s7").expect("rank 1 lane");
    assert!(r0 < r1, "lanes in rank order");
    assert!(
        s.contains("NCCL wait") && s.contains("(rank 1 late 61x)"),
        "{s}"
    );
}

/// GPT-2's biggest gap (61.8 ms before a memset in Conv1D.forward, whose gaps are typically
/// 22.5 µs apart) falls in the first forward pass, the warm-up: it is told apart as a one-off
/// before the site's usual verdict. A gap of a steady pass gets the verdict with how it recurs.
#[test]
fn an_outlier_gap_is_called_a_one_off() {
    let mut a = recording("gpt2.rec");
    a.update(Action::BiggestOfAll);
    let screen = render(&mut a, 240, 50);
    let verdict = screen
        .lines()
        .find(|l| l.contains("one-off ("))
        .unwrap_or_else(|| panic!("no one-off line in\n{screen}"));
    assert!(
        verdict.contains("one-off (warm-up, step 1 of 25)"),
        "{verdict}"
    );
    assert!(verdict.contains("usually host_work: "), "{verdict}");
    assert!(verdict.contains("(2400 gaps here"), "{verdict}");
    // A steady pass's biggest gap recurs, in the window's one step (the panes describe the
    // window: zoomed to a step, what to fix and the verdicts are that step's).
    for _ in 0..5 {
        a.update(Action::NextStep);
    }
    assert!(a.message.starts_with("step 6 of 25: "), "{}", a.message);
    a.update(Action::BiggestOfAll);
    let screen = render(&mut a, 240, 50);
    assert!(!screen.contains("one-off ("), "{screen}");
    let verdict = screen
        .lines()
        .find(|l| l.contains("recurring: in "))
        .unwrap_or_else(|| panic!("no recurring line in\n{screen}"));
    assert!(verdict.contains("in 1 of 1 steps, "), "{verdict}");
    // The whole capture again: the same gap recurs over its 24 steady steps.
    a.update(Action::ZoomAll);
    let screen = render(&mut a, 240, 50);
    let verdict = screen
        .lines()
        .find(|l| l.contains("recurring: in "))
        .unwrap_or_else(|| panic!("no recurring line in\n{screen}"));
    assert!(verdict.contains(" of 24 steps, "), "{verdict}");
}

/// On a short details pane the launch stack still fills its line: how many frames it shows is
/// a matter of width, not of the pane's height.
#[test]
fn the_launch_stack_line_uses_its_width_on_a_short_pane() {
    let mut a = recording("gpt2.rec");
    a.update(Action::BiggestOfAll);
    for h in [37, 50] {
        let screen = render(&mut a, 120, h);
        let line = screen
            .lines()
            .find(|l| l.contains("launch stack: "))
            .unwrap_or_else(|| panic!("no launch stack in\n{screen}"));
        assert!(
            line.contains("Conv1D.forward  pytorch_utils.py:119 ‹ GPT2Attention.forward")
                && line.contains("‹ GPT2Block.forward"),
            "{h} rows: {line}"
        );
    }
}

/// GPT-2's stacks are a dozen frames deep: at 100 columns the tree pane is half the screen, and
/// every frame on the biggest gap's path must still be named there, the deepest too.
#[test]
fn deep_stacks_keep_their_names_in_a_narrow_tree() {
    let mut a = recording("gpt2.rec");
    a.update(Action::BiggestOfAll);
    let s = render(&mut a, 100, 30);
    let tree: Vec<&str> = s
        .lines()
        .filter_map(|l| l.split_once("││").map(|(_, t)| t))
        .collect();
    for frame in [
        "<module>",
        "GPT2LMHeadModel.forward",
        "GPT2Model.forward",
        "GPT2Block.forward",
        "GPT2Attention.forward",
        "Conv1D.forward",
        "cudaMemsetAsync",
    ] {
        assert!(
            tree.iter().any(|row| row.contains(frame)),
            "{frame} is not named in the tree pane:\n{s}"
        );
    }
}

/// At 80x24 the panes are narrow: the call tree takes most of the width while it has the focus,
/// so the frames of the biggest gap's path are named, and the gap list keeps its durations.
#[test]
fn a_focused_tree_takes_the_width_its_names_need() {
    let mut a = recording("gpt2.rec");
    a.update(Action::BiggestOfAll);
    // The column where the gap list's frame meets the tree's.
    let border = |s: &str| {
        let top: Vec<char> = s
            .lines()
            .find(|l| l.contains("Call tree"))
            .unwrap()
            .chars()
            .collect();
        top.windows(2).position(|w| w == ['┐', '┌'])
    };
    let before = border(&render(&mut a, 80, 24)).unwrap();
    a.update(Action::FocusNext);
    assert_eq!(a.focus, Focus::Tree);
    let s = render(&mut a, 80, 24);
    let after = border(&s).unwrap();
    assert!(
        after + 10 < before,
        "the tree did not widen: {before} -> {after}\n{s}"
    );
    let tree: Vec<&str> = s
        .lines()
        .filter_map(|l| l.split_once("││").map(|(_, t)| t))
        .collect();
    assert!(
        tree.iter().any(|r| r.contains("Conv1D.forward")),
        "the deep frame is not named:\n{s}"
    );
    assert!(s.contains("61.8ms "), "{s}");
}

/// The frames from the root to the selected tree node, outermost first.
fn selected_path(a: &App) -> Vec<String> {
    let (Some(mut n), Some(c)) = (a.selected_node(), a.cache.as_ref()) else {
        return Vec::new();
    };
    let mut path = Vec::new();
    while n != 0 && n < c.tree.nodes.len() {
        path.push(a.store.names.get(c.tree.nodes[n].frame).to_string());
        n = c.tree.nodes[n].parent;
    }
    path.reverse();
    path
}

/// The tree is rebuilt whenever the window or the data changes (live, four times a second),
/// and its nodes are numbered anew each time: the selected and opened rows must stay on the
/// same frames, not on whatever now has their numbers.
#[test]
fn tree_selection_stays_on_its_frames_when_the_tree_is_rebuilt() {
    let mut a = recording("gpt2.rec");
    a.update(Action::BiggestOfAll);
    let before = selected_path(&a);
    assert!(before.len() > 5, "{before:?}");
    assert!(
        before.iter().any(|f| f.contains("Conv1D.forward")),
        "{before:?}"
    );
    for _ in 0..2 {
        // Around the selected gap: it stays in the window, the rest of the tree changes.
        a.update(Action::ZoomIn);
        a.refresh(true);
        let c = a.cache.as_ref().unwrap();
        assert!(c.tree.nodes.len() > 1);
        assert_eq!(
            selected_path(&a),
            before,
            "the selection moved to other frames"
        );
        let s = render(&mut a, 160, 48);
        assert!(s.contains("Conv1D.forward"), "the opened path closed:\n{s}");
    }
}

/// The gap list's highlighted row is the selected gap, whatever rebuilt or re-sorted the list:
/// a zoom, a threshold, a sort.
#[test]
fn the_highlighted_gap_row_is_the_selected_gap() {
    let mut a = recording("gpt2.rec");
    for _ in 0..3 {
        a.update(Action::Down);
    }
    let chosen = a.selected_gap().expect("a gap is selected");
    let same = |a: &App| {
        let row = a.gaps().get(a.gap_sel).copied();
        row.is_some_and(|g| g.lane == chosen.lane && g.end == chosen.end)
    };
    assert!(same(&a));
    for k in [
        Action::ZoomIn,
        Action::ZoomIn,
        Action::ThresholdUp,
        Action::Sort,
        Action::ZoomOut,
        Action::Sort,
    ] {
        a.update(k);
        a.refresh(true);
        let listed = a.gaps().iter().any(|g| a.is_selected(g));
        assert!(
            !listed || same(&a),
            "after {k:?} row {} is another gap",
            a.gap_sel
        );
        assert!(listed, "after {k:?} the selected gap left the list");
    }
    // Down moves on from the selected gap's row, not from a stale index.
    let row = a.gap_sel;
    a.update(Action::Down);
    assert_eq!(a.gap_sel, row + 1);
}

/// The details pane's lines, from its title down, when it describes a tree node.
fn node_details_text(screen: &str) -> String {
    screen
        .lines()
        .skip_while(|l| !l.contains("Details: call tree node"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// While the tree has the focus, the details pane describes the selected node: its frame in
/// full, what is charged to it, its path (callers top-down; callees bottom-up) and, for a
/// function that launches, its verdict. (The tree widget moves by the rows it last drew, so the
/// test draws after each key, as the terminal loop does.)
#[test]
fn details_describe_the_selected_tree_node() {
    let mut a = recording("gpt2.rec");
    a.update(Action::BiggestOfAll);
    let s = render(&mut a, 120, 40);
    assert!(
        s.contains("┌ Details ─"),
        "the gap's details while the gap list has the focus"
    );
    a.update(Action::FocusNext);
    assert_eq!(a.focus, Focus::Tree);
    let text = node_details_text(&render(&mut a, 120, 40));
    // The biggest gap's leaf: GPT-2's first-call cuBLASLt workspace memset.
    assert!(
        text.lines().nth(1).is_some_and(|l| l.contains("│Memset ")),
        "{text}"
    );
    assert!(
        text.contains("of gap time (") && text.contains(" in 60 gaps, 0ns of kernel time"),
        "{text}"
    );
    // The stack over two rows where it needs them, broken between frames.
    assert!(
        text.contains(
            "│called from: cudaMemsetAsync_v3020 ‹ Conv1D.forward  pytorch_utils.py:119 "
        ),
        "{text}"
    );
    assert!(
        text.contains("│‹ GPT2Attention.forward  modeling_gpt2.py:185 ‹ GPT2Block.forward"),
        "{text}"
    );
    assert!(
        !text.contains("its function, every call path"),
        "a kernel has no verdict of its own"
    );
    // Two rows up, the function that launched it: its verdict over all its launches, without
    // a second count (the node has one, the one its row gives).
    let mut s = String::new();
    for _ in 0..2 {
        a.update(Action::Up);
        s = render(&mut a, 120, 40);
    }
    let text = node_details_text(&s);
    assert!(
        text.contains("│Conv1D.forward  pytorch_utils.py:119"),
        "{text}"
    );
    assert!(
        text.contains(
            "its function, every call path: host_work: move CPU work off the launch path"
        ),
        "{text}"
    );
    assert!(!text.contains("gaps here"), "{text}");
    // Bottom-up, a node below a root reads down to its kernel.
    a.update(Action::Invert);
    assert!(
        a.selected_node().is_some(),
        "inverting selects the new tree's first row"
    );
    s = render(&mut a, 120, 40);
    for k in [Action::Right, Action::Down] {
        a.update(k);
        s = render(&mut a, 120, 40);
    }
    let text = node_details_text(&s);
    assert!(text.contains("leads to: Memset ‹ (this)"), "{text}");
}

/// `/` searches the call tree's frames (any case) in the order the tree shows them: typing
/// selects the first match and opens its path, Enter steps through the matches and wraps,
/// Backspace edits the query, Esc ends the search with the match still selected.
#[test]
fn tree_search_selects_matches_in_order() {
    let mut a = recording("gpt2.rec");
    a.update(Action::Search);
    assert_eq!(a.focus, Focus::Tree);
    for c in "CONV1D".chars() {
        a.update(Action::SearchChar(c));
    }
    assert!(a.message.starts_with("1 of "), "{}", a.message);
    let n: usize = a.message[5..].split(' ').next().unwrap().parse().unwrap();
    assert!(n > 1, "{}", a.message);
    let first = selected_path(&a);
    assert!(
        first.last().unwrap().contains("Conv1D.forward"),
        "{first:?}"
    );
    let s = render(&mut a, 120, 40);
    assert!(s.contains(" SEARCH  /CONV1D▏ 1 of "), "{s}");
    assert!(s.contains("Details: call tree node"), "{s}");
    // Enter: every match once, then the first again.
    let mut seen = vec![first.clone()];
    for i in 2..=n {
        a.update(Action::SearchNext);
        assert!(
            a.message.starts_with(&format!("{i} of {n}")),
            "{}",
            a.message
        );
        let p = selected_path(&a);
        assert!(p.last().unwrap().contains("Conv1D.forward"), "{p:?}");
        assert!(!seen.contains(&p), "match {i} repeats {p:?}");
        seen.push(p);
    }
    a.update(Action::SearchNext);
    assert_eq!(selected_path(&a), first, "wraps to the first match");
    // A query that matches nothing says so and leaves the selection where it was.
    a.update(Action::SearchChar('!'));
    assert_eq!(a.message, "not in the call tree");
    assert_eq!(selected_path(&a), first);
    a.update(Action::SearchBack);
    assert!(a.message.starts_with("1 of "), "{}", a.message);
    a.update(Action::SearchEnd);
    assert!(a.search.is_none());
    assert_eq!(selected_path(&a), first, "the match stays selected");
    let s = render(&mut a, 120, 40);
    assert!(!s.contains(" SEARCH "), "{s}");
}

/// A torch.profiler trace of a script started through runpy: the interpreter's machinery
/// between the launcher and the script is not a row of the tree; the script's module and its
/// `rope` are.
#[test]
fn runpy_frames_are_not_tree_rows() {
    let p = support::shared_trace("kineto-launchbound.json.gz");
    let mut a = App::new(load_path(&p, usize::MAX).unwrap(), SourceState::File);
    a.refresh(true);
    a.update(Action::BiggestOfAll);
    a.update(Action::FocusNext);
    let s = render(&mut a, 120, 36);
    assert!(!s.contains("<frozen runpy>"), "{s}");
    assert!(!s.contains("<built-in function exec>"), "{s}");
    let rows: Vec<&str> = s
        .lines()
        .filter_map(|l| l.split_once("││").map(|(_, t)| t))
        .collect();
    let at = |name: &str| rows.iter().position(|r| r.contains(name));
    let (launcher, script, rope) = (
        at("<module>  kineto.py:8"),
        at("<module>  launchbound.py:0"),
        at("rope  launchbound.py:6"),
    );
    assert!(
        launcher.is_some() && launcher < script && script < rope,
        "{s}"
    );
}

/// An export larger than the viewers open is not written at the first `e`: the status line
/// says its estimated size, what opens it and how to export less; `e` again on the same
/// window writes it, saying its size while it does; a new window asks again. `-o` may name a
/// file, which `e` writes.
#[test]
fn a_very_large_export_is_asked_for_twice() {
    let dir = support::tempdir("ask-export");
    let mut a = recording("gpt2.rec");
    a.export_to = dir.join("mine.json.gz");
    // GPT-2's whole capture is about 40 MB of JSON: as if the limit were 1 MB.
    a.export_ask_over = 1_000_000;
    press(&mut a, Action::Export);
    assert!(a.export_job.is_none(), "{}", a.message);
    assert!(
        a.message.starts_with("not written: this window exports ~")
            && a.message.contains(" of JSON (~")
            && a.message.contains("e again writes it, or zoom in"),
        "{}",
        a.message
    );
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
    // Zoomed: another window, asked again.
    press(&mut a, Action::ZoomIn);
    press(&mut a, Action::Export);
    assert!(
        a.export_job.is_none() && a.message.starts_with("not written"),
        "{}",
        a.message
    );
    press(&mut a, Action::Export);
    let m = a.finish_export().expect("written the second time");
    assert!(
        m.starts_with("exported ")
            && m.contains(&format!("to {}", dir.join("mine.json.gz").display())),
        "{m}"
    );
    assert!(dir.join("mine.json.gz").is_file());
}

/// The estimate of an export, made from a part of the window before anything is written,
/// comes within a third of what is written, on recordings and traces.
#[test]
fn an_exports_size_is_estimated_before_it_is_written() {
    let cfg = gaptop_core::analysis::gaps::Config::default();
    for p in [
        support::asset("gpt2.rec"),
        support::asset("llama_decode.rec"),
        support::root().join("tests/data/kineto/loader_train.json.gz"),
        support::shared_fixture("llama-decode/kineto-llama16-cudnn.json.gz"),
    ] {
        let store = load_path(&p, usize::MAX).unwrap();
        let (lo, hi) = store.span().unwrap();
        let est = gaptop::export::estimate(&store, lo, hi + 1, &cfg);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let w = gaptop::export::write(&store, lo, hi + 1, &cfg, &mut gz).unwrap();
        let gz = gz.finish().unwrap().len() as f64;
        assert_eq!(est.ops, w.ops, "{}", p.display());
        let near = |e: u64, real: f64| (e as f64 / real - 1.0).abs() < 0.34;
        assert!(
            near(est.json_bytes, w.json_bytes as f64),
            "{}: {est:?} {w:?}",
            p.display()
        );
        assert!(near(est.gz_bytes, gz), "{}: {est:?} {gz}", p.display());
    }
    // What is said of each size.
    use gaptop::export::{large, opens_with, Estimate};
    assert!(opens_with(100_000_000).contains("chrome://tracing and gaptop open"));
    assert!(opens_with(300_000_000).starts_with("too big for chrome://tracing"));
    assert!(opens_with(1_700_000_000).contains("trace_processor --httpd FILE"));
    let e = |json| Estimate {
        ops: 1_000_000,
        json_bytes: json,
        gz_bytes: json / 16,
    };
    assert_eq!(large(&e(200_000_000)), None);
    assert_eq!(
        large(&e(1_700_000_000)).unwrap(),
        "~1.70 GB of JSON (~106 MB gzipped, 1000000 ops)"
    );
}

/// `e` writes the export on its own thread from a copy of the window: the UI says it is being
/// written, then that it was; an export still being written when the user quits is finished
/// first, and the file is whole.
#[test]
fn exports_are_written_in_the_background_and_finished_on_quit() {
    let dir = support::tempdir("bg-export");
    let mut a = recording("gpt2.rec");
    a.export_to = dir.clone();
    press(&mut a, Action::Export);
    assert!(a.message.starts_with("exporting to "), "{}", a.message);
    // Asked again at once (writing GPT-2's window takes a tenth of a second): one at a time.
    press(&mut a, Action::Export);
    assert!(a.message.starts_with("still writing "), "{}", a.message);
    let t = std::time::Instant::now();
    while !a.message.starts_with("exported ") {
        assert!(t.elapsed().as_secs() < 20, "{}", a.message);
        std::thread::sleep(std::time::Duration::from_millis(5));
        a.tick();
    }
    assert!(a.export_job.is_none());
    // It says where it wrote and how big, on the status line.
    let first = std::fs::read_dir(&dir)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let size = gaptop::export::bytes(std::fs::metadata(&first).unwrap().len());
    assert!(
        a.message
            .starts_with(&format!("exported {size} to {}", first.display())),
        "{}",
        a.message
    );
    assert!(
        a.message.contains(" ops, ")
            && a.message
                .contains(" of JSON); opens in ui.perfetto.dev, chrome://tracing"),
        "{}",
        a.message
    );
    let status = render(&mut a, 160, 40);
    assert!(status.contains(&format!("exported {size} to ")), "{status}");
    // A second export (a new name: the first file exists), pending when the UI quits.
    press(&mut a, Action::Export);
    let m = a.finish_export().expect("an export was pending");
    assert!(m.starts_with("exported ") && m.contains("B to "), "{m}");
    assert!(a.finish_export().is_none());
    let files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 2, "{files:?}");
    for f in files {
        let j: serde_json::Value = serde_json::from_reader(flate2::read::GzDecoder::new(
            std::fs::File::open(&f).unwrap(),
        ))
        .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert_eq!(j["gaptop"]["gpu_ops"], 7224, "{}", f.display());
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// When the timeline cannot show every lane, the selected gap's lane is among those it shows.
#[test]
fn the_selected_gaps_lane_is_on_the_timeline() {
    let mut a = recording("ddp2.rec");
    for h in [20, 24, 30] {
        a.update(Action::BiggestOfAll);
        let g = a.selected_gap().expect("a gap is selected");
        let label = a.store.lane_label(g.lane);
        let s = render(&mut a, 80, h);
        let timeline: Vec<&str> = s
            .lines()
            .take_while(|l| !l.contains("launches/s"))
            .collect();
        assert!(
            timeline
                .iter()
                .any(|l| l.starts_with(&format!("│{label} "))),
            "80x{h}: {label} not on\n{}",
            timeline.join("\n")
        );
        assert!(timeline
            .iter()
            .any(|l| l.contains(" of 8 (the selected gap's)")));
    }
}

/// Before any gap is picked, the details pane says what to fix first: on GPT-2, Conv1D's
/// launches with the most gap time, launch-bound, and the usual fix; picking a gap shows it.
#[test]
fn the_first_screen_says_what_to_fix() {
    let mut a = recording("gpt2.rec");
    let s = render(&mut a, 100, 30);
    let pane: Vec<&str> = s
        .lines()
        .skip_while(|l| !l.contains("What to fix"))
        .collect();
    assert!(pane.len() > 3, "{s}");
    // What a step of it idles first (the order's key), its share, the code.
    assert!(
        pane[1].contains("3.07ms/step  38%  Conv1D.forward  pytorch_utils.py:119"),
        "{}",
        pane[1]
    );
    // Then its verdict, what a fix saves a step, how often, and the fix.
    assert!(
        pane[2].contains("host_work · saves ~1.66ms/step · in 24/24 steps: move CPU"),
        "{}",
        pane[2]
    );
    assert!(
        pane.iter()
            .any(|l| l.contains("1.72ms/step  18%  NewGELUActivation.forward")),
        "{s}"
    );
    a.update(Action::BiggestOfAll);
    let s = render(&mut a, 100, 30);
    assert!(
        !s.contains("What to fix") && s.contains("gap 61.83ms"),
        "{s}"
    );
}

/// A recording has no CPU spans, but the launching thread's own calls say how long it worked
/// outside CUDA before the launch: the details pane gives that time and the previous call,
/// as worked out here from the calls themselves.
#[test]
fn cpu_time_before_a_launch_comes_from_the_threads_calls() {
    let mut a = recording("launchbound.rec");
    a.update(Action::NextGap);
    a.update(Action::NextGap);
    let g = a.selected_gap().unwrap();
    let lane = &a.store.lanes[g.lane];
    let p = &a.store.procs[lane.key.proc as usize];
    let launch = p.api_by_corr(lane.op(g.next).corr).unwrap();
    let prev = p
        .apis()
        .filter(|c| c.tid == launch.tid && c.end <= launch.start)
        .max_by_key(|c| c.end)
        .unwrap();
    let s = render(&mut a, 200, 40);
    let line = s.lines().find(|l| l.contains("CPU during gap: ")).unwrap();
    let want = format!(
        "CPU during gap: {} outside CUDA on the launching thread, after its {} ({})",
        gaptop_core::units::fmt_short(launch.start - prev.end),
        a.store.names.get(prev.name),
        gaptop_core::units::fmt_short(prev.end - prev.start)
    );
    assert!(line.contains(&want), "{line}\nwanted {want}");
}

/// A re-opened exported window counts the window's ops on the status line, not the op kept
/// just outside each of its edges.
#[test]
fn a_reopened_window_counts_its_own_ops() {
    let st = load_path(&support::asset("launchbound.rec"), usize::MAX).unwrap();
    let (lo, _) = st.span().unwrap();
    let (wlo, whi) = (lo + 100_000_000, lo + 110_000_000);
    let f = support::tempdir("window-ops").join("window.json");
    let cfg = gaptop_core::analysis::gaps::Config::default();
    let n = gaptop::export::write_file(&st, wlo, whi, &cfg, &f).unwrap();
    let mut a = App::new(load_path(&f, usize::MAX).unwrap(), SourceState::File);
    a.refresh(true);
    let inside: usize = st
        .lanes
        .iter()
        .map(|l| l.iter().filter(|o| o.end > wlo && o.start < whi).count())
        .sum();
    assert!(
        n.ops as usize > inside,
        "the export keeps the neighbours too"
    );
    let s = render(&mut a, 100, 30);
    // The status line, above the key bar.
    let status = s.lines().rev().nth(1).unwrap();
    assert!(
        status.contains(&format!("│ {inside} ops │")),
        "{status} ({inside} inside)"
    );
    let _ = std::fs::remove_file(&f);
}

/// Before any GPU op has arrived, the details pane says why there is nothing yet, by what is
/// known: no collector connected, one connected, or the program ended first.
#[test]
fn an_empty_live_capture_says_what_it_is_waiting_for() {
    use gaptop_core::model::store::Store;
    let shown = |store: Store, source: SourceState| {
        let mut a = App::new(store, source);
        a.refresh(true);
        render(&mut a, 120, 30)
    };
    let s = shown(Store::default(), SourceState::Live);
    assert!(s.contains("Waiting for the program to start CUDA"), "{s}");
    // At the smallest size the sentence wraps instead of being cut.
    let mut a = App::new(Store::default(), SourceState::Live);
    a.refresh(true);
    let s = render(&mut a, 80, 20);
    assert!(s.contains("model loading come first)."), "{s}");
    let mut one = Store::default();
    one.add_process(4242, -1, "python3");
    let s = shown(one, SourceState::Live);
    assert!(
        s.contains("pid 4242 connected; no GPU work has arrived yet"),
        "{s}"
    );
    let s = shown(Store::default(), SourceState::Ended("exit status 1".into()));
    assert!(s.contains("The program ended without starting CUDA"), "{s}");
    assert!(!s.contains("No gap selected"), "{s}");
    // With ops, the usual hint.
    let mut a = app();
    let s = render(&mut a, 120, 30);
    assert!(!s.contains("Waiting for"), "{s}");
}

/// While an export shares the store to copy its window out, live data waits in the channel and
/// is applied, all of it, once the export lets go; the UI keeps drawing meanwhile.
#[test]
fn live_data_waits_for_an_export_copying_the_store_and_is_not_lost() {
    use gaptop_core::sources::live::LiveEvent;
    use gaptop_wire::{Frame, Hello, Op, OP_KERNEL};
    let mut a = App::new(
        gaptop_core::model::store::Store::default(),
        SourceState::Live,
    );
    let (tx, rx) = std::sync::mpsc::channel();
    let op = |i: u64| Op {
        start: 1_000 * i,
        end: 1_000 * i + 500,
        corr: i as u32,
        name: 1,
        stream: 7,
        kind: OP_KERNEL,
        ..Default::default()
    };
    tx.send(LiveEvent::Frames(
        1,
        vec![
            Frame::Hello(Hello::new(9, -1, "p")),
            Frame::Name {
                id: 1,
                text: "k".into(),
            },
            Frame::Ops((1..=3).map(op).collect()),
        ],
    ))
    .unwrap();
    let budget = std::time::Duration::from_millis(30);
    assert!(gaptop::app::term::drain(&mut a, &rx, budget));
    assert_eq!(a.store.op_count(), 3);
    // An export's share of the store (what `e` hands its thread until the copy is made).
    let held = std::sync::Arc::clone(&a.store);
    tx.send(LiveEvent::Frames(
        1,
        vec![Frame::Ops((4..=6).map(op).collect())],
    ))
    .unwrap();
    assert!(!gaptop::app::term::drain(&mut a, &rx, budget));
    assert_eq!(a.store.op_count(), 3, "nothing applied while shared");
    a.tick();
    assert!(
        render(&mut a, 100, 30).contains("3 ops"),
        "the UI still draws"
    );
    assert_eq!(
        held.op_count(),
        3,
        "the export's copy is the window as it was"
    );
    drop(held);
    assert!(gaptop::app::term::drain(&mut a, &rx, budget));
    assert_eq!(a.store.op_count(), 6, "the waiting data arrived, none lost");
}

/// Live, the status line says when new data waits for an export's copy, and a message the user
/// caused meanwhile is not overwritten by it.
#[test]
fn the_status_line_says_when_live_data_waits_for_an_export() {
    let dir = support::tempdir("wait-export");
    // Writing this window takes a quarter of a second: the export is still running at the
    // next two ticks.
    let mut a = App::new(recording("launchbound.rec").store, SourceState::Live);
    a.export_to = dir.clone();
    press(&mut a, Action::Export);
    // Shared beyond the export thread's own copy, so that it stays shared while we look.
    let held = std::sync::Arc::clone(&a.store);
    a.tick();
    assert!(
        a.message.ends_with("copying the window (new data waits)…"),
        "{}",
        a.message
    );
    a.update(Action::Invert);
    a.tick();
    assert!(
        a.message == "call tree: bottom-up" || a.message.starts_with("exported "),
        "{}",
        a.message
    );
    drop(held);
    let t = std::time::Instant::now();
    while a.export_job.is_some() {
        assert!(t.elapsed().as_secs() < 20);
        std::thread::sleep(std::time::Duration::from_millis(5));
        a.tick();
    }
    assert!(a.message.starts_with("exported "), "{}", a.message);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each pane on its own, at 120x40, from GPT-2's recording: the first screen's what-to-fix,
/// then the biggest gap's timeline, rate, gap list, tree, details and status, the selected tree
/// node's details, and (live, 160 columns) the program's output.
#[test]
fn each_pane_has_its_snapshot() {
    let mut a = recording("gpt2.rec");
    let s = render(&mut a, 120, 40);
    insta::assert_snapshot!("pane_what_to_fix_120x40", pane(&s, a.view.screen.details));
    a.update(Action::BiggestOfAll);
    let s = render(&mut a, 120, 40);
    let sc = a.view.screen;
    insta::assert_snapshot!("pane_timeline_120x40", pane(&s, sc.timeline));
    insta::assert_snapshot!("pane_rate_120x40", pane(&s, sc.rate));
    insta::assert_snapshot!("pane_gaps_120x40", pane(&s, sc.gaps));
    insta::assert_snapshot!("pane_tree_120x40", pane(&s, sc.tree));
    insta::assert_snapshot!("pane_gap_details_120x40", pane(&s, sc.details));
    insta::assert_snapshot!("pane_status_120x40", pane(&s, sc.status));
    a.update(Action::FocusNext);
    a.update(Action::FocusNext);
    let s = render(&mut a, 120, 40);
    insta::assert_snapshot!("pane_node_details_120x40", pane(&s, a.view.screen.details));
    let mut live = App::new(recording("gpt2.rec").store, SourceState::Live);
    for l in ["step 1", "step 2"] {
        live.output.push_back(l.into());
    }
    let s = render(&mut live, 160, 40);
    let out = live
        .view
        .screen
        .output
        .expect("live at 160 columns shows the output");
    insta::assert_snapshot!("pane_output_160x40", pane(&s, out));
}

/// The what-to-fix rows take the focus (Tab) while the details pane shows them: ↑/↓ choose one,
/// Enter lists that code's gaps alone and selects the first; `w` brings the rows back while a
/// gap is selected, and Esc lists every gap again.
#[test]
fn a_what_to_fix_row_lists_its_codes_gaps() {
    let mut a = recording("gpt2.rec");
    render(&mut a, 120, 40);
    a.update(Action::FocusNext); // the tree
    a.update(Action::FocusNext); // the what-to-fix rows
    assert_eq!(a.focus, Focus::Fix);
    a.update(Action::Down);
    let s = render(&mut a, 120, 40);
    let chosen = a.diagnosis.as_ref().unwrap().advice[1].clone();
    assert!(s.contains("Enter lists that code's gaps"), "{s}");
    a.update(Action::Enter);
    assert_eq!(a.focus, Focus::Gaps);
    assert!(
        a.message.starts_with("walking ") && a.message.contains(&chosen.site),
        "{}",
        a.message
    );
    let listed = a.listed_gaps();
    assert!(!listed.is_empty());
    // All of the code's gaps, the short ones too (not only those among the window's longest).
    assert_eq!(a.filtered_total(), Some(chosen.gaps), "{}", a.message);
    assert!(
        a.message
            .contains(&gaptop_core::units::count(chosen.gaps, "gap")),
        "{}",
        a.message
    );
    for g in &listed {
        assert_eq!(
            gaptop_core::analysis::advice::site_key(&a.store, g),
            chosen.key
        );
    }
    let s = render(&mut a, 120, 40);
    assert!(s.contains(&format!(" under {}", &chosen.site[..15])), "{s}");
    // The first of them is selected, and its details show; w brings the rows back.
    assert!(a.selected_gap().is_some_and(|g| listed.contains(&g)));
    assert!(!s.contains("What to fix"), "{s}");
    a.update(Action::WhatToFix);
    assert_eq!(a.focus, Focus::Fix);
    assert!(render(&mut a, 120, 40).contains("What to fix"));
    a.update(Action::WhatToFix);
    assert!(!render(&mut a, 120, 40).contains("What to fix"));
    a.update(Action::Clear);
    assert_eq!(a.listed_gaps().len(), a.gaps().len());
}

/// With steps known, the rate pane shows a steps strip and its title counts them; `>` zooms
/// to a step, whose bar is the cursor's.
#[test]
fn the_steps_strip_shows_a_bar_a_step() {
    let mut a = recording("llama_decode.rec");
    let s = render(&mut a, 120, 40);
    assert!(s.contains(" · 44 steps, median 43.5ms"), "{s}");
    let strip = s
        .lines()
        .find(|l| l.starts_with("│steps "))
        .expect("a steps row");
    assert!(
        strip.chars().filter(|c| "▁▂▃▄▅▆▇█".contains(*c)).count() > 50,
        "{strip}"
    );
    a.update(Action::NextStep);
    assert!(a.message.starts_with("step "), "{}", a.message);
    let cur = a.view.rate.steps.as_ref().unwrap();
    assert!(cur.iter().flatten().any(|c| c.current));
    // At 80x20 the lanes keep the rows: no strip.
    let s = render(&mut a, 80, 20);
    assert!(!s.contains("│steps "), "{s}");
}

/// The gap list as htop's lists: the first ↓ selects the first row (not the second), PgDn and
/// PgUp move a page, End and Home (G and g) the last and first rows, the title says which row
/// of how many, and the columns have names.
#[test]
fn the_gap_list_moves_by_rows_pages_and_ends() {
    let mut a = recording("gpt2.rec");
    let s = render(&mut a, 120, 40);
    assert!(
        s.contains("     gap       at before         launched from"),
        "{s}"
    );
    let listed = a.listed_gaps();
    a.update(Action::Down);
    assert_eq!(
        a.selected_gap(),
        Some(listed[0]),
        "the first row, not the second"
    );
    let s = render(&mut a, 120, 40);
    assert!(s.contains(&format!("· 1 of {} ", listed.len())), "{s}");
    a.update(Action::PageDown);
    let page = a.gap_sel;
    assert!(page > 5, "a page is the list's height: {page}");
    a.update(Action::Bottom);
    assert_eq!(a.gap_sel, listed.len() - 1);
    assert_eq!(a.selected_gap(), Some(listed[listed.len() - 1]));
    a.update(Action::PageUp);
    assert_eq!(a.gap_sel, listed.len() - 1 - page);
    a.update(Action::Top);
    assert_eq!(a.gap_sel, 0);
    let s = render(&mut a, 120, 40);
    assert!(s.contains(&format!("· 1 of {} ", listed.len())), "{s}");
}

/// Messages do not outlive what they were about: `z` says it shows the whole capture. A
/// recording cut short says so on the status line as soon as it opens. The help says that `q`
/// quits.
#[test]
fn status_messages_are_current() {
    let mut a = recording("gpt2.rec");
    a.update(Action::BiggestOfAll);
    assert!(a.message.starts_with("biggest gap"));
    a.update(Action::ZoomAll);
    assert_eq!(a.message, "the whole capture");
    let bytes = std::fs::read(support::asset("planted.rec")).unwrap();
    let cut = support::tempdir("cut").join("cut.rec");
    std::fs::write(&cut, &bytes[..bytes.len() - 7]).unwrap();
    let mut a = App::new(load_path(&cut, usize::MAX).unwrap(), SourceState::File);
    let s = render(&mut a, 120, 30);
    assert!(s.contains("recording cut at byte"), "{s}");
    a.update(Action::Help);
    assert!(render(&mut a, 120, 40).contains("q quits; any other key closes this"));
}

/// Zoomed deep into a capture (a few µs, 170 ms in), the axis counts from the window's start
/// as nsys does, the title gives the start precisely, and the cursor's ▲ is named and covers
/// no tick's digits.
#[test]
fn a_deep_zoom_reads_ticks_from_the_window_start() {
    let mut a = recording("gpt2.rec");
    let origin = a.store.span().unwrap().0;
    let t = origin + 173_824_519;
    // Step in with the keys, centred on t (each zoom halves the window around the cursor).
    a.cursor = t;
    for _ in 0..40 {
        a.update(Action::ZoomIn);
    }
    a.refresh(false);
    assert!(a.width() < 10_000, "zoomed in to {} ns", a.width());
    let screen = render(&mut a, 80, 24);
    let axis: Vec<&str> = screen.lines().filter(|l| l.contains("|+")).collect();
    assert_eq!(axis.len(), 1, "one axis row with relative ticks:\n{screen}");
    assert!(axis[0].contains("|+0ns"), "{screen}");
    // Every tick label reads differently (absolute ones all said |174ms).
    let labels: Vec<&str> = axis[0].split('|').skip(2).map(|s| s.trim()).collect();
    let mut seen = labels.clone();
    seen.dedup();
    assert_eq!(seen, labels, "{screen}");
    assert!(
        screen.contains("173.82") && screen.contains("(ticks from the window start)"),
        "{screen}"
    );
    assert!(screen.contains("▲ cursor"), "the mark is named: {screen}");
    // The ▲ sits on the axis between labels, never inside one.
    let line = axis[0];
    if let Some(i) = line.find('▲') {
        let before = &line[..i];
        let after = &line[i + '▲'.len_utf8()..];
        assert!(
            !(before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '.')
                && after.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '.')),
            "the cursor mark splits a label: {line}"
        );
    }
}

/// A gap the window cuts reads whole: after `b`, Enter (zoom to the biggest gap) and `j`, the
/// next gap, which the zoomed window holds only part of, is given at its full length and start
/// in the details and the status line, and its row in the list is marked where it is cut.
#[test]
fn a_gap_cut_by_the_window_reads_whole() {
    let mut a = recording("gpt2.rec");
    press(&mut a, Action::BiggestOfAll);
    press(&mut a, Action::Enter);
    let mut cut = None;
    for _ in 0..40 {
        press(&mut a, Action::Down);
        a.refresh(false);
        if let Some(g) = a.selected_gap() {
            let (ws, we) = g.whole(&a.store);
            if (ws, we) != (g.start, g.end) {
                cut = Some((g, ws, we));
                break;
            }
        }
    }
    let (g, ws, we) = cut.expect("some gap of the zoomed window is cut by its edge");
    let whole = gaptop_core::units::fmt_ns(we - ws);
    let part = gaptop_core::units::fmt_ns(g.dur());
    let screen = render(&mut a, 160, 48);
    assert!(
        screen.contains(&format!(
            "gap {whole} ({part} of it in the window) at {}",
            a.rel(ws)
        )),
        "{screen}"
    );
    let marked = if ws < g.start { "«" } else { "»" };
    assert!(
        screen
            .lines()
            .any(|l| l.contains(marked) && l.contains(&gaptop_core::units::fmt_short(g.dur()))),
        "the row is marked {marked}: {screen}"
    );
}

/// Enter on a tree node walks all of the node's gaps, as many as its row counts (not only those
/// among the list's 2,000 longest), the list's title names the frame as the tree does, and
/// the list holds only the node's gaps.
#[test]
fn a_tree_node_filter_holds_every_gap_of_the_node() {
    let mut a = recording("gpt2.rec");
    render(&mut a, 160, 48);
    a.update(Action::FocusNext);
    assert_eq!(a.focus, Focus::Tree);
    // The top-level rows: pick one with more gaps than a handful.
    let (node, want) = {
        let c = a.cache.as_ref().unwrap();
        let t = &c.tree;
        let n = t.nodes[0]
            .children
            .iter()
            .copied()
            .max_by_key(|&n| t.nodes[n].gaps)
            .unwrap();
        (c.tree_ids[n], t.nodes[n].gaps)
    };
    assert!(
        want > 2000,
        "a node with more gaps than the list shows: {want}"
    );
    a.tree_state.select(vec![node]);
    a.update(Action::Enter);
    assert_eq!(a.filtered_total(), Some(want), "{}", a.message);
    assert!(
        a.message
            .starts_with(&format!("walking {want} gaps under <module>  gpt2.py:")),
        "{}",
        a.message
    );
    let s = render(&mut a, 160, 48);
    assert!(
        s.contains(&format!(
            "Gaps {want} · {} under <module>  gpt2.py:",
            gaptop_core::units::fmt_short(a.cache.as_ref().unwrap().filtered.as_ref().unwrap().ns)
        )),
        "{s}"
    );
    let keys = &a.node_filter.as_ref().unwrap().keys;
    assert!(a
        .listed_gaps()
        .iter()
        .all(|g| keys.contains(&(g.stack, g.api, g.op_name))));
}

/// The key bar says the focused pane's keys, from the key map in use, and every screen's.
#[test]
fn the_key_bar_follows_the_focus_and_the_key_map() {
    let mut a = app();
    let bar = |a: &mut App| render(a, 100, 30).lines().last().unwrap().to_string();
    let gaps = bar(&mut a);
    assert!(gaps.starts_with("?Help bBiggest nNext gap"), "{gaps}");
    assert!(gaps.contains("qQuit"), "{gaps}");
    a.update(Action::FocusNext);
    let tree = bar(&mut a);
    assert!(
        tree.contains("iInvert") && tree.contains("/Search"),
        "{tree}"
    );
    assert!(!tree.contains("Biggest"), "{tree}");
    // Remapped keys show as they are.
    a.keys = gaptop::app::KeyMap::with_overrides("invert = I").unwrap();
    a.refresh(false);
    assert!(bar(&mut a).contains("IInvert"), "{}", bar(&mut a));
    // Under 24 rows the bar gives its row to the panes; the status line keeps `? help`.
    let short = render(&mut a, 80, 22);
    assert!(!short.contains("qQuit"), "{short}");
    assert!(short.lines().last().unwrap().contains("? help"), "{short}");
}

/// The README's key table names every key of the default key map (the help is made from the
/// key map itself, so it cannot drift): a new key or action must be written down.
#[test]
fn the_readme_key_table_names_every_default_key() {
    let readme = std::fs::read_to_string(support::root().join("README.md")).unwrap();
    let table: String = readme
        .split("### Keys")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with('|') || l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let keys = gaptop::app::KeyMap::default();
    for (action, name, _) in Action::ALL {
        for k in keys.keys_for(action) {
            let shown = match k.as_str() {
                "space" => "space".to_string(),
                "enter" => "Enter".into(),
                "esc" => "Esc".into(),
                "tab" => "Tab".into(),
                "shift+tab" => "Shift-Tab".into(),
                "pageup" => "PgUp".into(),
                "pagedown" => "PgDn".into(),
                "home" => "Home".into(),
                "end" => "End".into(),
                "ctrl+c" => "Ctrl-C".into(),
                "←" | "→" | "↑" | "↓" => format!("`{k}`"),
                c => format!("`{c}`"),
            };
            assert!(
                table.contains(&shown),
                "README's key table lacks {shown} ({name})"
            );
        }
    }
}

/// `L` shows the call tree by function: the lines of one function (GPT2Block.forward at
/// modeling_gpt2.py:274, :305, ...) become one row holding their gap time together, and the
/// tree's total is unchanged; `L` again goes back to lines.
#[test]
fn the_tree_by_function_merges_a_functions_lines() {
    let mut a = recording("gpt2.rec");
    let rows_named = |a: &App, name: &str| -> Vec<(usize, i64)> {
        let c = a.cache.as_ref().unwrap();
        let t = &c.tree;
        (1..t.nodes.len())
            .filter(|&n| a.store.names.get(t.nodes[n].frame).ends_with(name))
            .map(|n| (t.nodes[n].parent, t.nodes[n].gap_ns))
            .collect()
    };
    let total = a.cache.as_ref().unwrap().tree.nodes[0].gap_ns;
    let by_line = rows_named(&a, "GPT2Block.forward");
    assert!(by_line.len() >= 5, "{by_line:?}");
    press(&mut a, Action::ByFunction);
    let by_fn = rows_named(&a, "GPT2Block.forward");
    assert_eq!(by_fn.len(), 1, "one row for the function: {by_fn:?}");
    assert_eq!(by_fn[0].1, by_line.iter().map(|r| r.1).sum::<i64>());
    assert_eq!(a.cache.as_ref().unwrap().tree.nodes[0].gap_ns, total);
    // Its row reads without a line number.
    fn names(rows: &[gaptop::app::tree::TreeRow], out: &mut Vec<String>) {
        for r in rows {
            out.push(r.name.clone());
            names(&r.children, out);
        }
    }
    let mut all = Vec::new();
    names(&a.cache.as_ref().unwrap().rows, &mut all);
    assert!(
        all.iter()
            .any(|n| n == "GPT2Block.forward  modeling_gpt2.py"),
        "{all:?}"
    );
    // The bottom-up tree goes by function too, and so does a node's filter.
    press(&mut a, Action::Invert);
    let inverted_by_fn = rows_named(&a, "GPT2Block.forward").len();
    press(&mut a, Action::ByFunction);
    let inverted_by_line = rows_named(&a, "GPT2Block.forward").len();
    assert!(
        inverted_by_fn < inverted_by_line,
        "{inverted_by_fn} {inverted_by_line}"
    );
    press(&mut a, Action::Invert);
    assert_eq!(rows_named(&a, "GPT2Block.forward").len(), by_line.len());
}

/// A run of native frames without symbols in one library is one row, and `H` hides native
/// frames altogether, their time going to the Python frame above them.
#[test]
fn native_frames_fold_and_hide() {
    let mut a = recording("gpt2_native.rec");
    let frames = |a: &App| -> Vec<(String, String)> {
        let t = &a.cache.as_ref().unwrap().tree;
        (1..t.nodes.len())
            .map(|n| {
                let p = t.nodes[n].parent;
                (
                    a.store.names.get(t.nodes[n].frame).to_string(),
                    a.store.names.get(t.nodes[p].frame).to_string(),
                )
            })
            .collect()
    };
    let total = a.cache.as_ref().unwrap().tree.nodes[0].gap_ns;
    let shown = frames(&a);
    assert!(
        shown
            .iter()
            .any(|(f, _)| gaptop_core::frames::is_native_frame(f)),
        "the recording has native frames"
    );
    for (f, p) in &shown {
        if let (Some(l), Some(pl)) = (
            gaptop_core::frames::unnamed_lib(f),
            gaptop_core::frames::unnamed_lib(p),
        ) {
            assert_ne!(
                l, pl,
                "{f} under {p}: a run of one library's unnamed frames is one row"
            );
        }
    }
    press(&mut a, Action::HideNative);
    let hidden = frames(&a);
    assert!(
        hidden
            .iter()
            .all(|(f, _)| !gaptop_core::frames::is_native_frame(f)),
        "{hidden:?}"
    );
    assert!(hidden.len() < shown.len());
    assert_eq!(a.cache.as_ref().unwrap().tree.nodes[0].gap_ns, total);
}

/// The mouse: a click on a gap row picks that gap, a click on a tree row selects the row and
/// focuses the tree, the wheel scrolls the list it is over and zooms over the timeline.
#[test]
fn clicks_pick_gaps_and_tree_rows() {
    use gaptop::app::{MouseKind, Msg};
    let mut a = recording("gpt2.rec");
    render(&mut a, 120, 40);
    let gaps = a.view.screen.gaps;
    // The third gap row: under the frame's top border and the column names.
    let (x, y) = (gaps.x + 5, gaps.y + 1 + 1 + 2);
    a.update(Msg::Mouse {
        column: x,
        row: y,
        kind: MouseKind::Click,
    });
    let listed = a.listed_gaps();
    assert_eq!(a.focus, Focus::Gaps);
    assert_eq!(a.selected_gap(), Some(listed[2]));
    let screen = render(&mut a, 120, 40);
    assert!(
        screen.contains(&format!("· 3 of {} ", listed.len())),
        "{screen}"
    );
    // The wheel over the list moves the selection three rows.
    a.update(Msg::Mouse {
        column: x,
        row: y,
        kind: MouseKind::ScrollDown,
    });
    assert_eq!(a.selected_gap(), Some(a.listed_gaps()[5]));
    // A tree row.
    render(&mut a, 120, 40);
    let tree = a.view.screen.tree;
    let at = ratatui::layout::Position::new(tree.x + 10, tree.y + 2);
    let drawn = a
        .tree_state
        .rendered_at(at)
        .expect("a row drawn there")
        .to_vec();
    assert_ne!(a.tree_state.selected(), &drawn[..]);
    a.update(Msg::Mouse {
        column: at.x,
        row: at.y,
        kind: MouseKind::Click,
    });
    assert_eq!(a.focus, Focus::Tree);
    assert_eq!(
        a.tree_state.selected(),
        &drawn[..],
        "the row drawn where it was clicked"
    );
    // The wheel over the timeline zooms around where it points.
    let w = a.width();
    let tl = a.view.screen.timeline;
    a.update(Msg::Mouse {
        column: tl.x + 40,
        row: tl.y + 1,
        kind: MouseKind::ScrollUp,
    });
    assert!(a.width() < w);
}

/// `d` shows the details at full size, lines whole and the whole stack innermost first; `y`
/// asks for the stack on the clipboard as a Python traceback; `o` asks for the innermost
/// source line of the user's code.
#[test]
fn details_at_full_size_copy_and_edit() {
    use gaptop::app::Effect;
    let mut a = recording("gpt2.rec");
    press(&mut a, Action::BiggestOfAll);
    press(&mut a, Action::Details);
    let s = render(&mut a, 80, 24);
    assert!(s.contains("Details, full size"), "{s}");
    // At 80x24 it scrolls to the stack.
    let mut s = s;
    for _ in 0..10 {
        if s.contains("GPT2Attention.forward  modeling_gpt2.py:185") {
            break;
        }
        press(&mut a, Action::PageDown);
        s = render(&mut a, 80, 24);
    }
    assert!(
        s.contains("stack, innermost first") || s.contains("  Conv1D.forward"),
        "{s}"
    );
    // The innermost frames each on a line of their own.
    let conv = s
        .lines()
        .position(|l| l.contains("Conv1D.forward  pytorch_utils.py:119"));
    let attn = s
        .lines()
        .position(|l| l.contains("GPT2Attention.forward  modeling_gpt2.py:185"));
    assert!(matches!((conv, attn), (Some(c), Some(t)) if c < t), "{s}");
    let fx = a.update(Action::CopyStack);
    let text = match &fx[..] {
        [Effect::Copy(t)] => t.clone(),
        other => panic!("{} effects, not one copy", other.len()),
    };
    assert!(
        text.starts_with("Traceback (most recent call last):\n"),
        "{text}"
    );
    assert!(
        text.contains("  File \"transformers/pytorch_utils.py\", line 119, in Conv1D.forward\n"),
        "{text}"
    );
    assert!(a.message.starts_with("copied "), "{}", a.message);
    let fx = a.update(Action::Edit);
    assert!(
        matches!(&fx[..], [Effect::Edit { path, line: 119 }] if path == "transformers/pytorch_utils.py"),
        "{} effects",
        fx.len()
    );
    press(&mut a, Action::Details);
    assert!(!render(&mut a, 80, 24).contains("full size"));
}

/// `\` filters the gap list by text, as htop's filter: typing keeps the gaps whose op, API,
/// cause or stack hold it, the title says so, `n` walks only them; Enter ends the typing and
/// keeps the filter, Esc clears it.
#[test]
fn the_gap_list_filters_by_text() {
    let mut a = recording("gpt2.rec");
    let all = a.listed_gaps().len();
    a.update(Action::FilterGaps);
    assert_eq!(a.focus, Focus::Gaps);
    for c in "MEMSET".chars() {
        a.update(Action::SearchChar(c));
    }
    let listed = a.listed_gaps();
    assert!(
        !listed.is_empty() && listed.len() < all,
        "{} of {all}",
        listed.len()
    );
    for g in &listed {
        let op = a.store.names.get(g.op_name).to_lowercase();
        let api = a.store.names.get(g.api).to_lowercase();
        assert!(
            op.contains("memset") || api.contains("memset"),
            "{op} {api}"
        );
    }
    let s = render(&mut a, 120, 40);
    assert!(s.contains(" FILTER  \\MEMSET▏"), "{s}");
    assert!(s.contains(" holding \"memset\" · "), "{s}");
    a.update(Action::SearchNext); // Enter: typing ends, the filter stays
    assert!(a.search.is_none());
    assert_eq!(a.listed_gaps().len(), listed.len());
    a.update(Action::NextGap);
    let g = a.selected_gap().unwrap();
    assert!(
        a.store.names.get(g.op_name).contains("Memset")
            || a.store.names.get(g.api).contains("Memset")
    );
    a.update(Action::Clear);
    assert_eq!(a.listed_gaps().len(), all);
}

/// The tree keeps its rows in view after a walk down it, a pick of the biggest gap (which opens
/// the tree along that gap's path) and Enter: no lone row above a blank pane.
#[test]
fn the_tree_stays_filled_after_walking_it_and_picking_a_gap() {
    for (w, h) in [(160u16, 48u16), (80, 24)] {
        let mut a = recording("gpt2.rec");
        render(&mut a, w, h);
        press(&mut a, Action::FocusNext);
        for _ in 0..30 {
            press(&mut a, Action::Down);
            render(&mut a, w, h);
        }
        press(&mut a, Action::BiggestOfAll);
        render(&mut a, w, h);
        press(&mut a, Action::Enter);
        render(&mut a, w, h);
        press(&mut a, Action::Down);
        let s = render(&mut a, w, h);
        let tree = a.view.screen.tree;
        let rows: Vec<String> = s
            .lines()
            .skip(tree.y as usize + 1)
            .take(tree.height.saturating_sub(2) as usize)
            .map(|l| {
                l.chars()
                    .skip(tree.x as usize + 1)
                    .take(tree.width as usize - 2)
                    .collect()
            })
            .collect();
        let filled = rows.iter().filter(|r| !r.trim().is_empty()).count();
        let total = a.cache.as_ref().unwrap().tree.nodes.len();
        assert!(
            filled >= rows.len().min(total - 1) / 2,
            "{w}x{h}: {filled} of {} tree rows drawn\n{s}",
            rows.len()
        );
    }
}

/// A trace with NVTX-like ranges (torch.profiler's user annotations, from HTA's test data) has
/// a ranges lane above its GPU lanes: the whole capture shows the optimizer's annotations as
/// blocks, and zoomed to a step (`>`) each reads by its name, as much of it as fits. A capture
/// without ranges has no such row.
#[test]
fn the_ranges_lane_shows_the_launching_threads_ranges() {
    let p = support::fixture("hta_step_annotations.json.gz");
    let mut a = App::new(load_path(&p, usize::MAX).unwrap(), SourceState::File);
    a.refresh(true);
    let s = render(&mut a, 120, 30);
    let tl = pane(&s, a.view.screen.timeline);
    let row = tl.lines().nth(1).unwrap();
    assert!(row.starts_with("│r0 nvtx t25439… "), "{tl}");
    assert!(
        tl.lines().nth(2).unwrap().starts_with("│r0 gpu0 s7"),
        "{tl}"
    );
    insta::assert_snapshot!("ranges_lane_whole_120x30", tl);
    press(&mut a, Action::NextStep);
    let s = render(&mut a, 120, 30);
    let tl = pane(&s, a.view.screen.timeline);
    let row = tl.lines().nth(1).unwrap();
    assert_eq!(row.matches("Opti").count(), 3, "{row}");
    assert!(row.contains("Optimiz…"), "{row}");
    insta::assert_snapshot!("ranges_lane_step_120x30", tl);
    let s = render(&mut recording("gpt2.rec"), 120, 30);
    assert!(!s.contains("nvtx"), "{s}");
}

/// `r` on a What-to-fix row draws, in the timeline's place, the median replayed step of the
/// Llama decode as measured and, under it, replayed with that row's fix (SDPA's planning once a
/// shape): two rows on one axis from the step's start, the fixed one shorter and its GPU busier.
/// The same key, or Esc, brings the timeline back.
#[test]
fn r_on_a_fix_row_draws_the_step_replayed_with_the_fix_under_the_measured_one() {
    let p = support::shared_fixture("llama-decode/llama16-cudnn.rec");
    let mut a = App::new(load_path(&p, usize::MAX).unwrap(), SourceState::File);
    a.refresh(true);
    while a.focus != Focus::Fix {
        a.update(Action::FocusNext);
    }
    let site = a.diagnosis.as_ref().unwrap().advice[0].site.clone();
    assert!(site.starts_with("sdpa_attention_forward"), "{site}");
    let bar = render(&mut a, 160, 48);
    assert!(bar.lines().last().unwrap().contains("rReplay fix"), "{bar}");
    a.update(Action::Replay);
    let r = a.replay_step.clone().expect("a replayed step");
    assert!(
        r.picture.fixed_ns * 2 < r.picture.measured_ns,
        "{} {}",
        r.picture.fixed_ns,
        r.picture.measured_ns
    );
    let s = render(&mut a, 160, 48);
    let timeline = pane(&s, a.view.screen.timeline);
    let title = timeline.lines().next().unwrap();
    for want in [
        &format!("step {} measured ", r.number),
        " · with the fix ",
        "(replayed: sdpa_attention_forward, each shape planned once)",
    ] {
        assert!(title.contains(want), "{want}\n{timeline}");
    }
    // The last column of a row that the step reaches (busy or idle).
    let row = |label: &str| -> (usize, usize) {
        let l = timeline
            .lines()
            .find(|l| l.trim_start_matches('│').starts_with(label))
            .unwrap_or_else(|| panic!("no {label} row\n{timeline}"));
        let cells: Vec<char> = l.chars().skip(1 + 16).collect();
        let last = cells
            .iter()
            .rposition(|&c| c != ' ' && c != '│')
            .unwrap_or(0);
        let busy = cells.iter().filter(|c| "▁▂▃▄▅▆▇█".contains(**c)).count();
        (last, busy)
    };
    let (m_end, m_busy) = row("measured");
    let (f_end, f_busy) = row("with the fix");
    assert!(m_busy > 0 && f_busy > 0, "{timeline}");
    assert!(f_end * 2 < m_end, "the fixed step is shorter\n{timeline}");
    assert!(title.contains("GPU busy 1% → "), "{timeline}");
    // The same key goes back to the timeline, and so does Esc.
    a.update(Action::Replay);
    assert!(a.replay_step.is_none());
    assert!(render(&mut a, 160, 48).contains(" GPU timeline "));
    a.update(Action::Replay);
    assert!(a.replay_step.is_some());
    a.update(Action::Clear);
    assert!(a.replay_step.is_none());
    // On a gap's details there is no row to replay: it says so.
    a.update(Action::BiggestOfAll);
    a.focus = Focus::Gaps;
    a.update(Action::Replay);
    assert!(
        a.replay_step.is_none() && a.message.contains("What-to-fix row"),
        "{}",
        a.message
    );
}

/// A recording whose probe measured gaptop's own cost: the replayed step says the fix is
/// replayed without it (the measured row is the run as recorded).
#[test]
fn the_replayed_step_says_when_gaptops_cost_is_taken_out() {
    let p = support::root().join("tests/data/rec/backward_bound.rec.gz");
    let mut st = load_path(&p, usize::MAX).unwrap();
    st.launch_cost = Some(gaptop_wire::Cost {
        launch_bare_ns: 4_000,
        launch_ns: 6_000,
        sync_bare_ns: 1_000,
        sync_ns: 1_500,
        note: String::new(),
    });
    let mut a = App::new(st, SourceState::File);
    a.refresh(true);
    // 47,729 ops: analysed on a thread of its own.
    let t = std::time::Instant::now();
    while a.diagnosis.is_none() {
        assert!(t.elapsed().as_secs() < 60, "not analysed");
        std::thread::sleep(std::time::Duration::from_millis(20));
        a.refresh(false);
    }
    while a.focus != Focus::Fix {
        a.update(Action::FocusNext);
    }
    a.update(Action::Replay);
    let r = a
        .replay_step
        .clone()
        .unwrap_or_else(|| panic!("{}", a.message));
    let s = render(&mut a, 160, 48);
    let title = pane(&s, a.view.screen.timeline)
        .lines()
        .next()
        .unwrap()
        .to_string();
    assert!(
        title.contains(
            "(replayed without gaptop's ~2.50µs a launch: Gate.forward, its launches fused)"
        ),
        "{title}"
    );
    assert!(r.picture.fixed_ns * 2 < r.picture.measured_ns, "{title}");
}

/// `b` leads to what recurs: on the Llama decode it selects the biggest gap of What to fix's
/// first row (SDPA's planning) that is not a one-off, and the message says whose it is; `B`
/// selects the biggest gap of all, whatever it is.
#[test]
fn b_picks_the_top_recurring_codes_biggest_gap_and_capital_b_the_biggest_of_all() {
    let p = support::shared_fixture("llama-decode/llama16-cudnn.rec");
    let mut a = App::new(load_path(&p, usize::MAX).unwrap(), SourceState::File);
    a.refresh(true);
    let d = a.diagnosis.as_ref().unwrap();
    let top = d.advice[0].clone();
    assert!(top.recurring && top.site.starts_with("sdpa_attention_forward"));
    a.update(Action::BiggestGap);
    let g = a.selected_gap().unwrap();
    let d = a.diagnosis.as_ref().unwrap();
    assert_eq!(d.advice_for(&a.store, &g).unwrap().key, top.key);
    assert!(!d.is_one_off(&a.store, &g), "a steady gap");
    assert!(
        a.message
            .starts_with("biggest gap of sdpa_attention_forward, the top recurring code: "),
        "{}",
        a.message
    );
    let of_site = g.dur();
    a.update(Action::BiggestOfAll);
    let all = a.selected_gap().unwrap();
    assert!(all.dur() > of_site, "the biggest of all is a one-off here");
    let biggest = a.gaps().iter().map(|g| g.dur()).max().unwrap();
    assert_eq!(all.dur(), biggest);
    assert!(a.message.starts_with("biggest gap: "), "{}", a.message);
}

/// Enter on a What-to-fix row lands on a typical gap of that code's steady state, not its
/// warm-up one-off, and the details describe that gap by its own verdict.
#[test]
fn enter_on_a_fix_row_lands_on_a_typical_steady_gap() {
    let mut a = recording("gpt2.rec");
    render(&mut a, 160, 48);
    a.focus = Focus::Fix;
    a.update(Action::Enter);
    let g = a.selected_gap().expect("a gap selected");
    let d = a.diagnosis.as_ref().unwrap();
    let top = d.advice[0].clone();
    assert_eq!(d.advice_for(&a.store, &g).unwrap().key, top.key);
    assert!(!d.is_one_off(&a.store, &g), "a steady gap: {}", a.message);
    assert!(
        a.message.contains("a typical one selected"),
        "{}",
        a.message
    );
    let own = gaptop::app::fix::gap_verdict(&g, &a.store);
    let s = render(&mut a, 160, 48);
    let verdict = if own == top.verdict.as_str() {
        own.to_string()
    } else {
        format!("this gap {own}")
    };
    assert!(s.contains(&verdict), "{verdict}: {s}");
    assert!(!s.contains("one-off (warm-up"), "{s}");
}

/// The gap list marks one-offs with ◦ and `O` hides them; `n`/`N` walk the list in its order
/// (longest first), the title's "k of N" following them.
#[test]
fn one_offs_are_marked_and_hidden_and_n_follows_the_list() {
    let mut a = recording("gpt2.rec");
    let s = render(&mut a, 160, 48);
    let gaps = pane(&s, a.view.screen.gaps);
    assert!(gaps.contains("◦ one-off, O hides"), "{gaps}");
    assert!(
        gaps.lines()
            .any(|l| l.contains("◦") && !l.contains("one-off")),
        "{gaps}"
    );
    let all = a.listed_gaps().len();
    press(&mut a, Action::HideOneOffs);
    let s = render(&mut a, 160, 48);
    let gaps = pane(&s, a.view.screen.gaps);
    assert!(!gaps.contains("◦"), "{gaps}");
    assert!(gaps.contains("one-offs hidden"), "{gaps}");
    let steady = a.listed_gaps().len();
    assert!(steady < all && steady > 0, "{steady} of {all}");
    // n walks the rows as listed: the first, then the second.
    press(&mut a, Action::NextGap);
    assert_eq!(a.gap_sel, 0);
    assert!(a.view.gaps.title.contains("1 of") || render(&mut a, 160, 48).contains("· 1 of "));
    press(&mut a, Action::NextGap);
    let s = render(&mut a, 160, 48);
    assert!(s.contains(&format!("· 2 of {steady} ")), "{s}");
    assert_eq!(a.selected_gap(), Some(a.listed_gaps()[1]));
    assert!(a.message.starts_with("gap 2 of "), "{}", a.message);
    // N before the first row goes round to the last.
    press(&mut a, Action::PrevGap);
    press(&mut a, Action::PrevGap);
    assert_eq!(a.gap_sel, steady - 1);
    press(&mut a, Action::HideOneOffs);
    assert_eq!(a.listed_gaps().len(), all);
}

/// A gap cut by the window's edge keeps its highlight and its "k of N" when selected.
#[test]
fn a_cut_gap_stays_selected_in_the_list() {
    let mut a = recording("gpt2.rec");
    press(&mut a, Action::BiggestOfAll);
    press(&mut a, Action::Enter);
    let mut found = false;
    for _ in 0..40 {
        press(&mut a, Action::Down);
        a.refresh(false);
        let s = render(&mut a, 160, 48);
        let g = a.selected_gap().unwrap();
        let (ws, we) = g.whole(&a.store);
        if (ws, we) != (g.start, g.end) {
            assert!(a.view.gaps.rows.iter().any(|r| r.selected), "{s}");
            assert!(
                a.view
                    .gaps
                    .title
                    .contains(&format!("· {} of ", a.gap_sel + 1)),
                "{}",
                a.view.gaps.title
            );
            found = true;
            break;
        }
    }
    assert!(found, "some gap of the zoomed window is cut by its edge");
}

/// State the screen can trust: "analysing" shows only while an analysis runs; paused, new
/// data leaves the panes on the paused window and the key bar offers Resume; a status message
/// goes when the view changes; a window's edges never read "1ns".
#[test]
fn paused_analysing_messages_and_edges_are_current() {
    let mut a = App::new(recording("gpt2.rec").store, SourceState::Live);
    a.refresh(true);
    if a.analysing().is_some() {
        let s = render(&mut a, 160, 48);
        assert!(s.contains("panes: analysing the window…"), "{s}");
    }
    a.settle();
    let s = render(&mut a, 160, 48);
    assert!(!s.contains("analysing"), "{s}");
    assert!(a.view.key_bar.iter().any(|(_, w)| *w == "Pause"));
    a.update(Action::Pause);
    let s = render(&mut a, 160, 48);
    assert!(a.view.key_bar.iter().any(|(_, w)| *w == "Resume"), "{s}");
    // New data while paused: nothing is analysed again, nothing says so.
    std::sync::Arc::get_mut(&mut a.store).unwrap().generation += 1;
    a.refresh(false);
    assert!(a.analysing().is_none());
    let s = render(&mut a, 160, 48);
    assert!(!s.contains("analysing"), "{s}");
    // Messages describe the last key.
    a.update(Action::ZoomAll);
    assert_eq!(a.message, "the whole capture");
    a.update(Action::ZoomIn);
    assert!(!render(&mut a, 160, 48).contains("the whole capture"));
    for _ in 0..6 {
        a.update(Action::ZoomOut);
    }
    a.settle();
    let s = render(&mut a, 160, 48);
    let title = s.lines().next().unwrap();
    assert!(title.contains("GPU timeline  0ns .. "), "{title}");
}

/// The timeline's key bar offers zoom and pan; zoomed in far enough, ops wide enough for
/// their names carry them, as nsys draws them; the F-keys are htop's.
#[test]
fn the_timeline_names_ops_when_zoomed_in_and_its_bar_zooms_and_pans() {
    let mut a = recording("gpt2.rec");
    a.focus = Focus::Timeline;
    let s = render(&mut a, 160, 48);
    let bar = s.lines().last().unwrap();
    for k in ["+Zoom in", "-Out", "hPan", "lPan"] {
        assert!(bar.contains(k), "{bar}");
    }
    assert!(
        a.view.timeline.rows[0].names.is_empty(),
        "the whole capture: no names"
    );
    // The two-stream fixture's 150 µs: kernels of 10 to 32 µs are wide enough.
    let mut a = app();
    let s = render(&mut a, 160, 48);
    let timeline = pane(&s, a.view.screen.timeline);
    for k in ["kernel_a", "kernel_d"] {
        assert!(timeline.contains(k), "{timeline}");
    }
    // htop's keys.
    let keys = gaptop::app::KeyMap::default();
    let f = |n| {
        keys.action(&crossterm::event::KeyEvent::new(
            crossterm::event::KeyCode::F(n),
            crossterm::event::KeyModifiers::NONE,
        ))
    };
    assert_eq!(f(1), Some(Action::Help));
    assert_eq!(f(10), Some(Action::Quit));
    assert_eq!(f(6), Some(Action::Sort));
}

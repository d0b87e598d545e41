//! The UI on a generated capture of eight ranks (issue 37, items 5 and 6): rank 3 stalls on
//! the CPU in `Model.stall` before layer 2 at every step, so it arrives late at that layer's
//! all-reduce and the other seven wait for it. The call tree splits a launch site by rank
//! where ranks differ, and the rank summary (`R`) names the late rank and why; snapshots on
//! ratatui's TestBackend.

mod support;

use gaptop::app::{Action, App, SourceState};
use gaptop_core::sources::load_paths;
use support::gen::{generate, Plant, Spec};
use support::{render, tempdir};

/// The eight ranks, loaded and analysed, under a fixed name (the folder's is a temporary one).
fn eight_ranks() -> App {
    let mut s = Spec::new(6, 4, 3);
    s.ranks = 8;
    s.allreduce_ns = Some(20_000);
    s.stall = Some(Plant {
        rank: Some(3),
        layer: 2,
        ns: 300_000,
        factor: 1,
    });
    let dir = tempdir("ranks-ui");
    let t = generate(&s, &dir);
    let mut store = load_paths(&[t.path], usize::MAX).unwrap();
    let _ = std::fs::remove_dir_all(dir);
    store.source = "8 ranks".into();
    let mut a = App::new(store, SourceState::File);
    a.refresh(true);
    a.settle();
    a
}

/// The frames of the shown call tree's nodes whose frame is a rank, with their parents'.
fn rank_nodes(a: &App) -> Vec<(String, String)> {
    let c = a.cache.as_ref().unwrap();
    let t = &c.tree;
    let name = |n: usize| a.store.names.get(t.nodes[n].frame).to_string();
    (1..t.nodes.len())
        .filter(|&n| name(n).starts_with("[rank "))
        .map(|n| (name(t.nodes[n].parent), name(n)))
        .collect()
}

/// The one launch site that differs by rank (the stall's, on rank 3 alone) gets a rank level;
/// the sites every rank shares alike do not. The tree shows it once searched for.
#[test]
fn the_call_tree_gets_a_rank_level_where_ranks_differ() {
    let mut a = eight_ranks();
    let ranks = rank_nodes(&a);
    assert_eq!(
        ranks,
        vec![("layer_kernel_0(float*)".to_string(), "[rank 3]".to_string())],
        "only the stall's launch is split, and only rank 3 has it"
    );
    // Its path: the stall's function, its launch and kernel, then the rank.
    a.update(Action::Search);
    for ch in "[rank 3".chars() {
        a.update(Action::SearchChar(ch));
    }
    a.update(Action::SearchEnd);
    let s = render(&mut a, 160, 48);
    let at = |needle: &str| s.find(needle).unwrap_or_else(|| panic!("{needle}:\n{s}"));
    assert!(at("Model.stall  model.py:55") < at("[rank 3]"), "{s}");
    insta::assert_snapshot!("rank_level_160x48", s);
    let s = render(&mut a, 80, 24);
    assert!(s.contains("[rank 3]"), "{s}");
    insta::assert_snapshot!("rank_level_80x24", s);
}

/// The rank summary's rows on a screen: those under its header, down to its frame.
fn rows_of(screen: &str) -> Vec<&str> {
    screen
        .lines()
        .skip_while(|l| !l.contains("top cause"))
        .skip(1)
        .take_while(|l| !l.contains('└') && !l.trim_matches(['│', ' ']).is_empty())
        .collect()
}

/// `R` shows a row a rank, the late one first with what made it late; `s` sorts by waits,
/// where the late rank, which waits least, comes last; `R` again closes it.
#[test]
fn the_rank_summary_names_the_late_rank_and_its_cause() {
    let mut a = eight_ranks();
    // The key bar offers it.
    let s = render(&mut a, 80, 24);
    assert!(s.contains("RRanks"), "{}", s.lines().last().unwrap());
    a.update(Action::Ranks);
    for (w, h) in [(80, 24), (160, 48)] {
        let s = render(&mut a, w, h);
        let rows = rows_of(&s);
        assert!(
            rows[0]
                .trim_start_matches('│')
                .trim_start()
                .starts_with("3 ")
                && rows[0].contains("CPU late: Model.stall  model.py:55"),
            "{w}x{h}: the late rank first, with its cause:\n{s}"
        );
        for r in &rows[1..] {
            assert!(r.contains(" 0x "), "{w}x{h}: others never late: {r}");
        }
        assert!(s.contains("Ranks 8 · by late time"), "{s}");
        insta::assert_snapshot!(format!("rank_summary_{w}x{h}"), s);
    }
    a.update(Action::Sort);
    let s = render(&mut a, 160, 48);
    assert!(s.contains("by waits"), "{s}");
    let rows = rows_of(&s);
    assert_eq!(rows.len(), 8, "{s}");
    let rank = |l: &str| {
        let t = l.trim_start_matches('│').trim_start();
        t.split_whitespace().next().unwrap().to_string()
    };
    assert_eq!(rank(rows[7]), "3", "the late rank waits least:\n{s}");
    // Down moves the selection, and stays on the last row.
    for _ in 0..20 {
        a.update(Action::Down);
    }
    assert_eq!(a.rank_sel, 7);
    a.update(Action::Ranks);
    let s = render(&mut a, 160, 48);
    assert!(!s.contains("top cause") && s.contains("Call tree"), "{s}");
}

/// A capture of one rank has no rank summary, and says so.
#[test]
fn one_rank_has_no_rank_summary() {
    let mut a = App::new(
        gaptop_core::sources::load_path(&support::fixture("multi_stream.json"), usize::MAX)
            .unwrap(),
        SourceState::File,
    );
    a.refresh(true);
    a.update(Action::Ranks);
    assert!(!a.ranks_shown);
    assert!(a.message.contains("one rank"), "{}", a.message);
}

/// Enter on a `[rank N]` row of the rank level walks that rank's gaps alone: on HTA's public
/// two-rank trace, whose ranks launch from the same stacks, a kernel's row splits by rank, and
/// the walk under `[rank 1]` holds as many gaps as that row, none of rank 0's.
#[test]
fn enter_on_a_rank_row_walks_that_ranks_gaps() {
    let dir = support::root().join("tests/data/kineto/hta-two-ranks");
    let store = load_paths(&[dir], usize::MAX).unwrap();
    let mut a = App::new(store, SourceState::File);
    a.refresh(true);
    a.settle();
    a.update(Action::Search);
    for ch in "[rank 1".chars() {
        a.update(Action::SearchChar(ch));
    }
    a.update(Action::SearchEnd);
    let node = a.selected_node().expect("a [rank 1] row");
    let (want, parent) = {
        let t = &a.cache.as_ref().unwrap().tree;
        assert_eq!(a.store.names.get(t.nodes[node].frame), "[rank 1]");
        (t.nodes[node].gaps, t.nodes[node].parent)
    };
    // Its kernel's row holds rank 0's gaps too.
    let both = a.cache.as_ref().unwrap().tree.nodes[parent].gaps;
    assert!(
        both > want,
        "{both} gaps under the kernel, {want} of rank 1"
    );
    a.update(Action::Enter);
    assert_eq!(a.filtered_total(), Some(want));
    let f = a.node_filter.as_ref().unwrap();
    assert_eq!(f.rank, Some(1));
    assert!(f.name.contains("[rank 1]"), "{}", f.name);
}

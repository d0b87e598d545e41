//! Where each pane goes on a screen of a given size. The model lays out its view model with it
//! (how many timeline columns, how many rate bins) and the views draw into the same rectangles.
//!
//! ```text
//! ┌ GPU timeline (a row per lane, 3..1/3 of the height) ──────────────────┐
//! ┌ launches/s · GPU busy · NCCL wait (launch rate and busy sparklines) ──┐
//! │ and, when steps are known, the steps strip (a bar a step)             │
//! ┌ Gaps (50%; 35% while the tree   ┐┌ Call tree (50%; 65% with the focus) ┐
//! │ has the focus)                  ││                                     │
//! ┌ Details: the selected gap, or the   ┐┌ program output (live, ≥140 cols) ┐
//! │ selected tree node while the tree has the focus                        │
//!  status line: source state, span, ops, drops, lag, zoom, last message
//! ```

use ratatui::layout::{Constraint, Direction, Layout, Margin, Rect};

/// The smallest screen gaptop draws (an 80x24 terminal with tmux's status line is 80x23).
pub const MIN_W: u16 = 80;
pub const MIN_H: u16 = 20;
/// Columns of the lane (and sparkline) labels left of the timeline's cells.
pub const LABEL_W: u16 = 16;

/// The panes' rectangles, frames included.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Screen {
    pub area: Rect,
    pub timeline: Rect,
    pub rate: Rect,
    pub gaps: Rect,
    pub tree: Rect,
    pub details: Rect,
    /// The program's output, live on a wide screen.
    pub output: Option<Rect>,
    pub status: Rect,
    /// The key bar under the status line, as htop's (on screens of 24 rows or more).
    pub keys: Option<Rect>,
}

/// Inside a pane's frame.
pub fn inner(r: Rect) -> Rect {
    r.inner(Margin {
        horizontal: 1,
        vertical: 1,
    })
}

/// Whether a screen is too small to draw the panes on.
pub fn too_small(area: Rect) -> bool {
    area.width < MIN_W || area.height < MIN_H
}

/// The panes of a screen of `area` showing `lanes` lanes; the call tree is wider while it has
/// the focus (its indentation grows with the stack's depth, and the frame names are what it is
/// for), and live runs show the program's output beside the details on a wide screen.
pub fn screen(area: Rect, lanes: u16, tree_focused: bool, live: bool, steps: bool) -> Screen {
    // A third rate row, the steps strip, when the program's steps are known and the screen
    // has the room (an 80x20 split keeps its rows for the lanes).
    let rate_h = if steps && area.height >= 23 { 5 } else { 4 };
    let big = area.height >= 40;
    let short = area.height < 24;
    let detail_h = if big {
        9
    } else if short {
        5
    } else {
        6
    };
    // What is left for the timeline once the other panes have their least: the rate rows, 5
    // of gaps and tree, the details and the status line.
    let tl_max = if big {
        area.height / 3
    } else {
        area.height
            .saturating_sub(rate_h + 5 + detail_h + 1)
            .clamp(4, 8)
    };
    let tl_h = (lanes + 3).clamp(4, tl_max);
    let key_bar = !short;
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(tl_h),
            Constraint::Length(rate_h),
            Constraint::Min(5),
            Constraint::Length(detail_h),
            Constraint::Length(1),
            Constraint::Length(key_bar as u16),
        ])
        .split(area);
    let tree_pct = if tree_focused { 65 } else { 50 };
    let mid = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([
            Constraint::Percentage(100 - tree_pct),
            Constraint::Percentage(tree_pct),
        ])
        .split(rows[2]);
    let (details, output) = if live && area.width >= 140 {
        let bottom = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(62), Constraint::Percentage(38)])
            .split(rows[3]);
        (bottom[0], Some(bottom[1]))
    } else {
        (rows[3], None)
    };
    Screen {
        area,
        timeline: rows[0],
        rate: rows[1],
        gaps: mid[0],
        tree: mid[1],
        details,
        output,
        status: rows[4],
        keys: key_bar.then_some(rows[5]),
    }
}

//! The help: every key, from the key map in use, over the whole screen.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use crate::app::{Action, App};
use gaptop_core::frames::cut as short;

/// What the panes' marks mean.
const LEGEND: [&str; 5] = [
    "timeline: bar height = busy share; green kernel, blue copy, magenta NCCL",
    "nvtx row: the launching thread's NVTX ranges, the deepest wide enough",
    "gaps ─: yellow host_wait, cyan kernel_wait, red sync, magenta event wait",
    "rate: launches and busy % a column; steps: a bar a step, height = its time",
    "gap list «5ms 5ms»: the window cuts the gap there; details give it whole",
];

/// Actions that go in pairs, one row for both (`h/l pan left / right`): the two actions, then
/// what the row says in full and in at most 28 characters. Pairing keeps the help within 23
/// rows (80x24, less tmux's status line) with its legend.
const PAIRS: [(Action, Action, &str, &str); 13] = [
    (
        Action::Sort,
        Action::HideOneOffs,
        "sort the gap list (or the ranks) / hide one-offs",
        "sort gaps, ranks / one-offs",
    ),
    (
        Action::BiggestGap,
        Action::BiggestOfAll,
        "biggest gap of the top recurring code / of all",
        "biggest gap: recurring / all",
    ),
    (
        Action::ZoomIn,
        Action::ZoomOut,
        "zoom in / out around the cursor",
        "zoom in / out at the cursor",
    ),
    (
        Action::PanLeft,
        Action::PanRight,
        "pan left / right",
        "pan left / right",
    ),
    (
        Action::Left,
        Action::Right,
        "pan left / right; collapse / expand in the tree",
        "pan; tree: collapse / expand",
    ),
    (
        Action::Up,
        Action::Down,
        "previous / next row in the focused pane",
        "previous / next row",
    ),
    (
        Action::NextGap,
        Action::PrevGap,
        "next / previous gap (of the tree node, if one is chosen)",
        "next / prev. gap (of node)",
    ),
    (
        Action::FocusNext,
        Action::FocusPrev,
        "focus the next / previous pane",
        "next / previous pane",
    ),
    (
        Action::ThresholdDown,
        Action::ThresholdUp,
        "show / hide shorter gaps (lower / raise the threshold)",
        "show / hide shorter gaps",
    ),
    (
        Action::NextStep,
        Action::PrevStep,
        "zoom to the next / previous step",
        "next / previous step",
    ),
    (
        Action::PageUp,
        Action::PageDown,
        "a page up / down in the focused list",
        "page up / down",
    ),
    (
        Action::CopyStack,
        Action::Edit,
        "copy the stack (OSC 52) / open its line in $EDITOR",
        "copy stack / open its line",
    ),
    (
        Action::Top,
        Action::Bottom,
        "the first / last row of the focused list",
        "first / last row",
    ),
];

/// The narrowest keys' column; where a column is too narrow for its longest keys and a brief
/// description, keys longer than this push their row's description right.
const KEYS: usize = 9;

/// The longest description in brief.
const BRIEF: usize = 28;

/// One row of the help: its keys, and what they do in full and in brief.
struct Entry {
    keys: String,
    full: &'static str,
    brief: &'static str,
}

impl Entry {
    /// The row in `width` characters, its keys right-aligned in `keys` columns: the full
    /// description where it fits, else the brief.
    fn line(&self, width: usize, keys: usize) -> String {
        let used = self.keys.chars().count().max(keys) + 1;
        let what = if used + self.full.chars().count() <= width {
            self.full
        } else {
            self.brief
        };
        short(&format!("{:>keys$} {what}", self.keys), width)
    }
}

/// Every bindable action as a row, in the key map's order, pairs on one row where both of
/// the pair have keys.
fn entries(app: &App) -> Vec<Entry> {
    let keys = |a: Action| app.keys.keys_for(a).join(" ");
    let mut out = Vec::new();
    let mut done = Vec::new();
    for (a, _, full) in Action::ALL {
        if done.contains(&a) {
            continue;
        }
        let pair = PAIRS.iter().find(|p| p.0 == a || p.1 == a);
        match pair {
            Some(&(x, y, full, brief)) if !keys(x).is_empty() && !keys(y).is_empty() => {
                out.push(Entry {
                    keys: format!("{}/{}", keys(x), keys(y)),
                    full,
                    brief,
                });
                done.extend([x, y]);
            }
            _ => out.push(Entry {
                keys: keys(a),
                full,
                brief: a.brief(),
            }),
        }
    }
    out
}

/// Every key, from the key map in use, and the legend; two columns when the terminal is
/// short. A terminal too short for all of it says how many lines it hides.
pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    if area.width < 4 || area.height < 3 {
        return;
    }
    let entries = entries(app);
    let legend = LEGEND.len() as u16;
    let two = area.height < entries.len() as u16 + legend + 2;
    let inner = area.width as usize - 2;
    // Each column's width, less a space between the two.
    let col_w = if two { inner / 2 } else { 74.min(inner) };
    let w = if two { area.width } else { col_w as u16 + 2 };
    let per_col = if two {
        entries.len().div_ceil(2)
    } else {
        entries.len()
    };
    // The keys' column as wide as the longest keys where that leaves room for a brief.
    let longest = entries.iter().map(|e| e.keys.chars().count()).max();
    let keys = match longest {
        Some(k) if k + 1 + BRIEF < col_w => k,
        _ => KEYS,
    };
    let mut lines = Vec::new();
    for i in 0..per_col {
        let mut l = entries[i].line(col_w - 1, keys);
        if two {
            if let Some(e) = entries.get(i + per_col) {
                l = format!("{l:<width$} {}", e.line(col_w - 1, keys), width = col_w - 1);
            }
        }
        lines.push(Line::raw(l));
    }
    for text in LEGEND {
        lines.push(Line::styled(
            short(text, if two { inner } else { col_w }),
            Style::default().fg(Color::DarkGray),
        ));
    }
    let h = (lines.len() as u16 + 2).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    let hidden = lines.len().saturating_sub(h as usize - 2);
    let mut block = Block::default()
        .borders(Borders::ALL)
        .title(" gaptop keys (q quits; any other key closes this) ");
    if hidden > 0 {
        block = block.title_bottom(format!(" {hidden} more lines on a taller terminal "));
    }
    f.render_widget(Clear, r);
    f.render_widget(Paragraph::new(lines).block(block), r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_distinct_actions_with_briefs_that_fit() {
        let mut seen = Vec::new();
        for (a, b, full, brief) in PAIRS {
            assert!(
                a != b && !seen.contains(&a) && !seen.contains(&b),
                "{a:?} {b:?}"
            );
            seen.extend([a, b]);
            assert!(brief.chars().count() <= BRIEF, "{brief}");
            assert!(brief.chars().count() <= full.chars().count(), "{brief}");
        }
    }
}

//! The GPU timeline: a row per lane of busy blocks and gaps coloured by cause, the axis and
//! the cursor.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders};
use ratatui::Frame;

use super::style::{cause_color, focus_style};
use crate::app::lane::RangeRow;
use crate::app::layout::LABEL_W;
use crate::app::viewmodel::{Cell, CellKind, OpTone};
use crate::app::{App, Focus};

const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

fn cell_look(c: &Cell) -> (char, Style) {
    let mut style = Style::default();
    let ch = match c.kind {
        CellKind::Busy(eighths, op) => {
            style = style.fg(match op {
                OpTone::Comm => Color::Magenta,
                OpTone::Memcpy => Color::Blue,
                OpTone::Memset => Color::LightBlue,
                OpTone::Kernel => Color::Green,
            });
            if let Some(m) = c.mark {
                style = style.bg(cause_color(m));
            }
            BLOCKS[(eighths as usize).clamp(1, 8) - 1]
        }
        CellKind::Gap(cause) => {
            style = style.fg(cause_color(cause));
            if c.highlighted {
                style = style.bg(Color::Indexed(238)).add_modifier(Modifier::BOLD);
            }
            '─'
        }
        CellKind::Short => {
            style = style.fg(Color::DarkGray);
            '·'
        }
        CellKind::Empty => ' ',
    };
    if c.selected {
        style = style.bg(Color::Indexed(24));
    }
    if c.cursor {
        style = style.add_modifier(Modifier::REVERSED);
    }
    (ch, style)
}

/// The ranges lane: each range a block on its colour (by depth, alternating between
/// neighbours), its name inside where it fits; the cursor's column reversed.
fn draw_ranges(
    buf: &mut ratatui::buffer::Buffer,
    x: u16,
    y: u16,
    x0: u16,
    cols: u16,
    row: &RangeRow,
    cursor: Option<u16>,
) {
    buf.set_string(x, y, &row.label, Style::default().fg(Color::White));
    for s in &row.segs {
        let bg = match (s.depth, s.odd) {
            (0, false) => Color::Indexed(24),
            (0, true) => Color::Indexed(31),
            (_, false) => Color::Indexed(90),
            (_, true) => Color::Indexed(97),
        };
        let mut text = s.text.chars();
        for c in s.col..(s.col + s.width).min(cols) {
            let mut style = Style::default().fg(Color::White).bg(bg);
            if cursor == Some(c) {
                style = style.add_modifier(Modifier::REVERSED);
            }
            if let Some(bc) = buf.cell_mut((x0 + c, y)) {
                bc.set_char(text.next().unwrap_or(' ')).set_style(style);
            }
        }
    }
}

/// Draws the timeline; returns its cells' first column and width (for the mouse).
pub fn draw(f: &mut Frame, area: Rect, app: &App) -> (u16, u16) {
    let vm = &app.view.timeline;
    let block = Block::default()
        .borders(Borders::ALL)
        .title(vm.title.as_str())
        .border_style(focus_style(app, Focus::Timeline));
    let inner = block.inner(area);
    f.render_widget(block, area);
    if inner.height < 2 || inner.width < 20 {
        return (0, 0);
    }
    let x0 = inner.x + LABEL_W;
    let cols = inner.width - LABEL_W;
    let buf = f.buffer_mut();
    let first = vm.ranges.is_some() as u16;
    if let Some(r) = &vm.ranges {
        draw_ranges(buf, inner.x, inner.y, x0, cols, r, vm.cursor_col);
    }
    for (row, lane) in vm.rows.iter().enumerate() {
        let y = inner.y + first + row as u16;
        buf.set_string(inner.x, y, &lane.label, Style::default().fg(Color::White));
        for (c, cell) in lane.cells.iter().enumerate().take(cols as usize) {
            let (ch, style) = cell_look(cell);
            if let Some(bc) = buf.cell_mut((x0 + c as u16, y)) {
                bc.set_char(ch).set_style(style);
            }
        }
        // Zoomed in, an op wide enough for its name carries it, on its busy cells.
        for (c, name) in &lane.names {
            let w = cols.saturating_sub(*c) as usize;
            buf.set_string(
                x0 + c,
                y,
                gaptop_core::frames::cut(name, w),
                Style::default().fg(Color::Black).bg(Color::Green),
            );
        }
    }
    if let Some(more) = &vm.more {
        let y = inner.y + first + vm.rows.len() as u16;
        buf.set_string(inner.x, y, more, Style::default().fg(Color::DarkGray));
    }
    let y = inner.y + inner.height - 1;
    for (c, label) in &vm.ticks {
        buf.set_string(x0 + c, y, label, Style::default().fg(Color::DarkGray));
    }
    if let Some(c) = vm.cursor_col {
        buf.set_string(x0 + c, y, "▲", Style::default().fg(Color::LightCyan));
    }
    (x0, cols)
}

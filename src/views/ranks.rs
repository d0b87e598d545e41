//! The rank summary (`R`): a row a rank, in the gap list's and the call tree's place.
//!
//! ```text
//! ┌ Ranks 8 · by late time (s sorts) · 1 of 8 ──────────────────────────────────┐
//! │ rank     idle    waits     late  times  top cause of its lateness           │
//! │    3   2.51ms       0s   2.40ms     6x  CPU late: Model.stall  model.py:55  │
//! │    0   1.10ms   2.40ms       0s     0x  —                                   │
//! └─────────────────────────────────────────────────────────────────────────────┘
//! ```

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

use crate::app::App;
use gaptop_core::frames::cut;

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let Some(vm) = &app.view.ranks else { return };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(vm.title.as_str())
        .border_style(Style::default().fg(Color::Cyan));
    let inner = block.inner(area);
    f.render_widget(block, area);
    if inner.height == 0 {
        return;
    }
    let w = inner.width as usize;
    let mut lines: Vec<Line> = vec![Line::styled(
        cut(&vm.header, w),
        Style::default()
            .fg(Color::DarkGray)
            .add_modifier(Modifier::UNDERLINED),
    )];
    lines.extend(vm.rows.iter().map(|r| {
        let mut style = Style::default();
        if r.late {
            style = style.fg(Color::Yellow);
        }
        if r.worst {
            style = style.fg(Color::LightRed).add_modifier(Modifier::BOLD);
        }
        if r.selected {
            style = style.bg(Color::Indexed(24)).fg(Color::White);
        }
        Line::styled(cut(&r.text, w), style)
    }));
    if vm.rows.is_empty() {
        lines.push(Line::styled(
            vm.empty.as_str(),
            Style::default().fg(Color::DarkGray),
        ));
    }
    f.render_widget(Paragraph::new(lines), inner);
}

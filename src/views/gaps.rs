//! The gap list: the window's gaps, longest first or in time order.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

use super::style::{cause_color, focus_style};
use crate::app::{App, Focus};
use gaptop_core::frames::cut;

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let vm = &app.view.gaps;
    let block = Block::default()
        .borders(Borders::ALL)
        .title(vm.title.as_str())
        .border_style(focus_style(app, Focus::Gaps));
    let inner = block.inner(area);
    f.render_widget(block, area);
    if inner.height == 0 {
        return;
    }
    let mut lines: Vec<Line> = vec![Line::styled(
        cut(&vm.header, inner.width as usize),
        Style::default()
            .fg(Color::DarkGray)
            .add_modifier(Modifier::UNDERLINED),
    )];
    lines.extend(vm.rows.iter().map(|r| {
        let mut style = Style::default().fg(cause_color(r.cause));
        if r.highlighted {
            style = style.add_modifier(Modifier::BOLD);
        }
        if r.selected {
            style = style.bg(Color::Indexed(24)).fg(Color::White);
        }
        Line::styled(cut(&r.text, inner.width as usize), style)
    }));
    if vm.rows.is_empty() {
        lines.push(Line::styled(
            "no gaps in this window",
            Style::default().fg(Color::DarkGray),
        ));
    }
    f.render_widget(Paragraph::new(lines), inner);
}

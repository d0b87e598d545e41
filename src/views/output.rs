//! The profiled program's last lines of output (live runs on a wide screen).

use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

use crate::app::App;
use gaptop_core::frames::cut;

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" program output ");
    let inner = block.inner(area);
    f.render_widget(block, area);
    let h = inner.height as usize;
    let lines: Vec<Line> = app
        .output
        .iter()
        .rev()
        .take(h)
        .rev()
        .map(|l| Line::raw(cut(l, inner.width as usize)))
        .collect();
    f.render_widget(Paragraph::new(lines), inner);
}

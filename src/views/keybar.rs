//! The key bar at the foot of the screen, as htop's: each key, then what it does here.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::app::App;

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let mut spans = Vec::new();
    let mut used = 0usize;
    for (key, what) in &app.view.key_bar {
        let k = key
            .replace("enter", "⏎")
            .replace("tab", "Tab")
            .replace("space", "Spc");
        let w = k.chars().count() + what.chars().count() + 1;
        // Whole entries only: one cut in half reads as another key.
        if used + w > area.width as usize {
            break;
        }
        used += w;
        spans.push(Span::styled(k, Style::default().fg(Color::White)));
        spans.push(Span::styled(
            format!("{what} "),
            Style::default().bg(Color::Cyan).fg(Color::Black),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

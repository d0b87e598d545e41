//! The key bar at the foot of the screen, as htop's: each key, then what it does here.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::app::App;

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let mut entries: Vec<(String, &str)> = app
        .view
        .key_bar
        .iter()
        .map(|(key, what)| {
            let k = key
                .replace("enter", "⏎")
                .replace("tab", "Tab")
                .replace("space", "Spc");
            (k, *what)
        })
        .collect();
    let width = |e: &[(String, &str)]| -> usize {
        e.iter()
            .map(|(k, w)| k.chars().count() + w.chars().count() + 1)
            .sum()
    };
    // Whole entries only (one cut in half reads as another key), and the last (quit) stays:
    // those before it give way, the last but one first.
    while width(&entries) > area.width as usize && entries.len() > 2 {
        entries.remove(entries.len() - 2);
    }
    let mut spans = Vec::new();
    for (k, what) in entries {
        spans.push(Span::styled(k, Style::default().fg(Color::White)));
        spans.push(Span::styled(
            format!("{what} "),
            Style::default().bg(Color::Cyan).fg(Color::Black),
        ));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

//! The status line: source state, span, ops kept and dropped, lag, zoom, the last message; or,
//! while a tree search is typed, its prompt.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::Paragraph;
use ratatui::Frame;

use crate::app::App;

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let vm = &app.view.status;
    let message = vm.message.clone().unwrap_or_default();
    if let Some(q) = &vm.search {
        // The query must stay in view.
        let line = Line::from(vec![
            Span::styled(
                " SEARCH ",
                Style::default().bg(Color::Magenta).fg(Color::White),
            ),
            Span::styled(
                format!(" /{q}▏ "),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::styled(message, Style::default().fg(Color::LightYellow)),
        ]);
        f.render_widget(Paragraph::new(line), area);
        return;
    }
    let mut spans = vec![
        Span::styled(
            vm.mode.clone(),
            Style::default().bg(Color::Blue).fg(Color::White),
        ),
        Span::raw(vm.middle.clone()),
        Span::styled(
            vm.lost.clone(),
            if vm.lost_any {
                Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
            } else {
                Style::default().fg(Color::DarkGray)
            },
        ),
    ];
    if let Some(lag) = &vm.lag {
        spans.push(Span::raw(lag.clone()));
    }
    spans.push(Span::raw(vm.zoom.clone()));
    spans.push(match &vm.message {
        Some(m) => Span::styled(m.clone(), Style::default().fg(Color::LightYellow)),
        None => Span::styled("? help", Style::default().fg(Color::DarkGray)),
    });
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

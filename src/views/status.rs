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
                if vm.search_gaps {
                    " FILTER "
                } else {
                    " SEARCH "
                },
                Style::default().bg(Color::Magenta).fg(Color::White),
            ),
            Span::styled(
                format!(" {}{q}▏ ", vm.prompt),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::styled(message, Style::default().fg(Color::LightYellow)),
        ]);
        f.render_widget(Paragraph::new(line), area);
        return;
    }
    let tail = match &vm.message {
        Some(m) => Span::styled(m.clone(), Style::default().fg(Color::LightYellow)),
        None => Span::styled("? help", Style::default().fg(Color::DarkGray)),
    };
    // On a narrow screen the message (or `? help`) keeps its room: the zoom, the lag, the
    // source's figures and a clean drop count give theirs up first, in that order.
    let width = |s: &str| s.chars().count();
    let room = (area.width as usize).saturating_sub(width(&vm.mode) + width(&tail.content) + 1);
    let bare = |s: &str| s.trim().trim_matches('│').trim().to_string();
    let mut parts: Vec<(u8, Span)> = vec![
        (2, Span::raw(bare(&vm.middle))),
        (
            if vm.lost_any { 9 } else { 3 },
            Span::styled(
                vm.lost.clone(),
                if vm.lost_any {
                    Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
                } else {
                    Style::default().fg(Color::DarkGray)
                },
            ),
        ),
    ];
    if let Some(lag) = &vm.lag {
        parts.push((1, Span::raw(bare(lag))));
    }
    parts.push((0, Span::raw(bare(&vm.zoom))));
    for give_up in 0..9u8 {
        let used: usize = parts.iter().map(|(_, s)| width(&s.content) + 3).sum();
        if used <= room {
            break;
        }
        parts.retain(|(p, _)| *p != give_up);
    }
    let mut spans = vec![
        Span::styled(
            vm.mode.clone(),
            Style::default().bg(Color::Blue).fg(Color::White),
        ),
        Span::raw(" "),
    ];
    for (_, s) in parts {
        spans.push(s);
        spans.push(Span::raw(" │ "));
    }
    spans.push(tail);
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

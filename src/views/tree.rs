//! The call tree of gap time, drawn with tui-tree-widget from the view model's rows.

use std::collections::HashSet;

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders};
use ratatui::Frame;
use tui_tree_widget::{Tree, TreeItem, TreeState};

use super::style::focus_style;
use crate::app::tree::TreeRow;
use crate::app::{App, Focus};
use gaptop_core::frames::cut_frame;

/// The widget's item for a row. Only open rows get their children in full: a closed row's
/// children are bare placeholders (they only make it show as expandable), so that a frame
/// costs what is on screen, not the whole tree.
fn item(
    r: &TreeRow,
    path: &mut Vec<usize>,
    opened: &HashSet<Vec<usize>>,
    width: usize,
) -> TreeItem<'static, usize> {
    // The counts are dimmed: they are what a narrow pane cuts. A frame longer than the row's
    // room (the pane's width less its indentation, arrow and figures) is cut in its middle,
    // keeping its line number.
    let room = width
        .saturating_sub(2 * path.len() + 2 + r.head.chars().count())
        .max(8);
    let text = Line::from(vec![
        Span::raw(r.head.clone()),
        Span::raw(cut_frame(&r.name, room)),
        Span::styled(r.counts.clone(), Style::default().fg(Color::DarkGray)),
    ]);
    path.push(r.id);
    let children: Vec<_> = if opened.contains(path) {
        r.children
            .iter()
            .map(|c| item(c, path, opened, width))
            .collect()
    } else {
        r.children
            .iter()
            .map(|c| TreeItem::new_leaf(c.id, ""))
            .collect()
    };
    path.pop();
    TreeItem::new(r.id, text.clone(), children).unwrap_or_else(|_| TreeItem::new_leaf(r.id, text))
}

pub fn draw(f: &mut Frame, area: Rect, app: &App, state: &mut TreeState<usize>) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(app.view.tree_title.as_str())
        .border_style(focus_style(app, Focus::Tree));
    let Some(c) = &app.cache else {
        f.render_widget(block, area);
        return;
    };
    let mut path = Vec::new();
    let opened = state.opened();
    let width = block.inner(area).width as usize;
    let items: Vec<_> = c
        .rows
        .iter()
        .map(|r| item(r, &mut path, opened, width))
        .collect();
    match Tree::new(&items) {
        Ok(t) => {
            let t = t
                .block(block)
                .highlight_style(Style::default().bg(Color::Indexed(24)).fg(Color::White));
            f.render_stateful_widget(t, area, state);
        }
        Err(_) => f.render_widget(block, area),
    }
}

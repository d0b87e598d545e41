//! The help: every key, from the key map in use, over the whole screen.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use crate::app::{Action, App};
use crate::frames::cut as short;

/// What the panes' marks mean.
const LEGEND: [&str; 5] = [
    "timeline: bar height = busy share; green kernel, blue copy, magenta NCCL",
    "nvtx row: the launching thread's NVTX ranges, the deepest wide enough",
    "gaps ─: yellow host_wait, cyan kernel_wait, red sync, magenta event wait",
    "rate: launches and busy % a column; steps: a bar a step, height = its time",
    "gap list «5ms 5ms»: the window cuts the gap there; details give it whole",
];

/// Every key, from the key map in use; two columns when the terminal is short.
pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let two = area.height < Action::ALL.len() as u16 + 4;
    // Each description whole where its column holds it, else its brief form.
    let room = if two {
        (area.width as usize - 2) / 2 - 1
    } else {
        73.min(area.width as usize - 2)
    };
    let entries: Vec<String> = Action::ALL
        .iter()
        .map(|(a, _, what)| {
            let keys = app.keys.keys_for(*a).join(" ");
            let what = if 10 + what.chars().count() <= room {
                what
            } else {
                a.brief()
            };
            format!("{:>9} {}", short(&keys, 9), what)
        })
        .collect();
    let per_col = if two {
        entries.len().div_ceil(2)
    } else {
        entries.len()
    };
    let col_w = if two {
        (area.width - 2) / 2
    } else {
        74.min(area.width - 2)
    };
    let w = if two { area.width } else { col_w + 2 };
    let h = (per_col as u16 + 2 + LEGEND.len() as u16).min(area.height);
    let r = Rect::new(
        area.x + (area.width - w) / 2,
        area.y + (area.height - h) / 2,
        w,
        h,
    );
    f.render_widget(Clear, r);
    let mut lines = Vec::new();
    for i in 0..per_col {
        let mut l = short(&entries[i], col_w as usize - 1);
        if two {
            if let Some(e) = entries.get(i + per_col) {
                l = format!(
                    "{:<width$} {}",
                    l,
                    short(e, col_w as usize - 1),
                    width = col_w as usize - 1
                );
            }
        }
        lines.push(Line::raw(l));
    }
    for legend in LEGEND {
        lines.push(Line::styled(
            short(legend, col_w as usize * if two { 2 } else { 1 }),
            Style::default().fg(Color::DarkGray),
        ));
    }
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" gaptop keys (q quits; any other key closes this) "),
        ),
        r,
    );
}

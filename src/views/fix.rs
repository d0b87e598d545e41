//! The details pane's "what to fix": a row a launching function, the first line its cost a
//! step (what the rows are ordered by), share and code, the verdict on the same line where it
//! fits, and below them the fix. The chosen row's fix is whole, wrapped; the others' are cut to
//! a line. A tall pane keeps its last line for the hint.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use ratatui::Frame;

use super::style::{focus_style, tone_style};
use crate::app::viewmodel::{FixRow, Tone};
use crate::app::{App, Focus};
use gaptop_core::frames::cut;

/// Where the lines under a row's first line start.
const INDENT: usize = 4;

/// Coloured text in lines of at most `w` characters, broken at spaces (a word longer than a
/// line is split); each word keeps its part's style.
pub fn wrap(parts: &[(String, Style)], w: usize) -> Vec<Vec<Span<'static>>> {
    let w = w.max(1);
    let mut out: Vec<Vec<Span<'static>>> = Vec::new();
    let (mut line, mut n): (Vec<Span<'static>>, usize) = (Vec::new(), 0);
    for (text, style) in parts {
        for word in text.split(' ').filter(|x| !x.is_empty()) {
            let mut word: Vec<char> = word.chars().collect();
            loop {
                let room = if n == 0 { w } else { w.saturating_sub(n + 1) };
                if word.len() <= room {
                    let s: String = word.iter().collect();
                    let s = if n == 0 { s } else { format!(" {s}") };
                    n += s.chars().count();
                    line.push(Span::styled(s, *style));
                    break;
                }
                if n > 0 {
                    out.push(std::mem::take(&mut line));
                    n = 0;
                    continue;
                }
                // Longer than a whole line: split.
                let rest = word.split_off(w);
                line.push(Span::styled(word.iter().collect::<String>(), *style));
                out.push(std::mem::take(&mut line));
                word = rest;
            }
        }
    }
    if !line.is_empty() || out.is_empty() {
        out.push(line);
    }
    out
}

/// A row's lines at width `w`: whole (wrapped) or each part cut to a line.
pub fn row_lines(r: &FixRow, w: usize, whole: bool) -> Vec<Line<'static>> {
    let head = format!("{:>11} {}  ", r.head, r.share);
    let head_w = head.chars().count();
    let site = cut(&r.site, w.saturating_sub(head_w).max(1));
    let used = head_w + site.chars().count();
    let verdict_style = tone_style(Tone::Verdict);
    let fix_style = Style::default().fg(Color::Gray);
    let mut first = vec![
        Span::styled(head, Style::default().fg(Color::LightGreen)),
        Span::styled(site, Style::default().fg(Color::White)),
    ];
    let room = w.saturating_sub(INDENT).max(1);
    // The verdict beside the code where it fits whole, else first under it.
    let beside = used + 2 + r.verdict.chars().count() <= w;
    let rest = if beside {
        first.push(Span::styled(format!("  {}", r.verdict), verdict_style));
        vec![(r.fix.clone(), fix_style)]
    } else {
        vec![
            (format!("{}: ", r.verdict), verdict_style),
            (r.fix.clone(), fix_style),
        ]
    };
    let mut lines = vec![Line::from(first)];
    let pad = " ".repeat(INDENT);
    if whole {
        for mut spans in wrap(&rest, room) {
            spans.insert(0, Span::raw(pad.clone()));
            lines.push(Line::from(spans));
        }
    } else {
        let mut spans = vec![Span::raw(pad)];
        let mut left = room;
        for (s, style) in rest {
            let c = cut(&s, left);
            left = left.saturating_sub(c.chars().count());
            spans.push(Span::styled(c, style));
            if left == 0 {
                break;
            }
        }
        lines.push(Line::from(spans));
    }
    lines
}

pub fn draw(f: &mut Frame, area: Rect, app: &App, title: &str, rows: &[FixRow], hint: &str) {
    let title = if rows.is_empty() { " Details " } else { title };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .border_style(focus_style(app, Focus::Fix));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let w = inner.width as usize;
    let room = inner.height as usize;
    // On a tall pane the last line keeps the hint; on a short one the rows take every line,
    // the last row shown by as many of its lines as fit.
    let hint_line = room >= 6 || rows.is_empty();
    let for_rows = room - usize::from(hint_line && room > 0);
    // The rows laid out: those up to the chosen one and a pane's worth after it.
    let chosen = rows.iter().position(|r| r.chosen).unwrap_or(0);
    let laid: Vec<Vec<Line>> = rows
        .iter()
        .take(chosen + room + 1)
        .map(|r| {
            let mut l = row_lines(r, w, r.chosen);
            if r.selected {
                l = l
                    .into_iter()
                    .map(|l| l.style(Style::default().bg(Color::Indexed(24))))
                    .collect();
            }
            l
        })
        .collect();
    // A short pane shows the next row too (its code and a line of its fix): the chosen row's
    // fix gives up its last lines for it, ending in `…` (the details at full size, `d`, and
    // the gap's details give it whole).
    let mut laid = laid;
    if chosen + 1 < laid.len() {
        let keep = for_rows.saturating_sub(2).max(2);
        if laid[chosen].len() > keep {
            laid[chosen].truncate(keep);
            if let Some(last) = laid[chosen].last_mut() {
                ellipsis(last, w);
            }
        }
    }
    // The first row shown: the chosen row stays in view, whole.
    let mut first = 0;
    while first < chosen && laid[first..=chosen].iter().map(Vec::len).sum::<usize>() > for_rows {
        first += 1;
    }
    let mut lines: Vec<Line> = Vec::new();
    for l in &laid[first.min(laid.len())..] {
        let left = for_rows.saturating_sub(lines.len());
        if left == 0 {
            break;
        }
        lines.extend(l.iter().take(left).cloned());
    }
    if hint_line {
        lines.push(Line::styled(cut(hint, w), tone_style(Tone::Dim)));
    }
    f.render_widget(Paragraph::new(lines), inner);
}

/// `line` ending in ` …` within `w` characters, its last words cut where needed.
fn ellipsis(line: &mut Line<'static>, w: usize) {
    let mut over = (line.width() + 2).saturating_sub(w);
    while over > 0 {
        let Some(last) = line.spans.last_mut() else {
            break;
        };
        let n = last.content.chars().count();
        if n <= over {
            over -= n;
            line.spans.pop();
        } else {
            last.content = last
                .content
                .chars()
                .take(n - over)
                .collect::<String>()
                .into();
            over = 0;
        }
    }
    let style = line.spans.last().map(|s| s.style).unwrap_or_default();
    line.spans.push(Span::styled(" …", style));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[Vec<Span>]) -> Vec<String> {
        lines
            .iter()
            .map(|l| l.iter().map(|s| s.content.as_ref()).collect())
            .collect()
    }

    #[test]
    fn wrapping_breaks_at_spaces_and_keeps_each_parts_style() {
        let v = Style::default().fg(Color::LightGreen);
        let g = Style::default().fg(Color::Gray);
        let parts = vec![
            ("host_work (x): ".to_string(), v),
            ("move CPU work off the launch path".to_string(), g),
        ];
        let lines = wrap(&parts, 20);
        assert_eq!(
            text(&lines),
            ["host_work (x): move", "CPU work off the", "launch path"]
        );
        assert!(lines
            .iter()
            .flatten()
            .all(|s| s.content.chars().count() <= 20));
        assert_eq!(lines[0][0].style, v);
        assert_eq!(
            lines[0][2].style, g,
            "the fix's first word keeps its colour"
        );
        // A word longer than a line is split rather than lost.
        assert_eq!(
            text(&wrap(&[("abcdefghij xy".to_string(), g)], 4)),
            ["abcd", "efgh", "ij", "xy"]
        );
    }
}

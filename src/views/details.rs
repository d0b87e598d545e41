//! The details pane: the selected gap, the selected call tree node, what to fix first, the
//! comparison with another capture, or why there is nothing to show yet.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Wrap};
use ratatui::Frame;

use super::style::{cause_color, tone_style};
use crate::app::viewmodel::{DetailsVm, Tone};
use crate::app::App;
use gaptop_core::frames::cut;

fn tone_lines(lines: &[(Tone, String)], w: usize) -> Vec<Line<'static>> {
    lines
        .iter()
        .map(|(t, s)| Line::styled(cut(s, w), tone_style(*t)))
        .collect()
}

/// The lines in `h` rows of `w` characters, by what matters most on a short pane: first a
/// row each for the frame (and its figures) or stack (where) and the verdict (why, and the
/// fix), then the rest
/// of the verdict wrapped, then a second row of the stack, then a row each for the others (the
/// launching call, the ops around, the CPU) while rows are left; in their order, each cut to a
/// row, a verdict or stack cut short ending in `…`.
fn fit_lines(lines: &[(Tone, String)], h: usize, w: usize) -> Vec<Line<'static>> {
    let w = w.max(1);
    let wrapped: Vec<Vec<String>> = lines
        .iter()
        .map(|(t, s)| match t {
            Tone::Verdict => super::fix::wrap(&[(s.clone(), Style::default())], w)
                .into_iter()
                .map(|spans| spans.iter().map(|x| x.content.as_ref()).collect())
                .collect(),
            Tone::Stack => stack_rows(s, w),
            _ => vec![cut(s, w)],
        })
        .collect();
    // What a line names (a frame in bold) keeps its figures (the plain line under it).
    let first = |i: usize| {
        matches!(lines[i].0, Tone::Bold | Tone::Stack | Tone::Verdict)
            || (lines[i].0 == Tone::Plain && i > 0 && lines[i - 1].0 == Tone::Bold)
    };
    let mut rows = vec![0usize; lines.len()];
    let mut left = h;
    let mut give = |rows: &mut Vec<usize>, i: usize, n: usize| {
        let n = n.min(left);
        rows[i] += n;
        left -= n;
    };
    for i in 0..lines.len() {
        if first(i) {
            give(&mut rows, i, 1);
        }
    }
    for (i, (t, _)) in lines.iter().enumerate() {
        if *t == Tone::Verdict && rows[i] > 0 {
            give(&mut rows, i, wrapped[i].len() - 1);
        }
    }
    for i in 0..lines.len() {
        if !first(i) {
            give(&mut rows, i, 1);
        }
    }
    // A stack's second row, where one is left: `d` shows it whole.
    for (i, (t, _)) in lines.iter().enumerate() {
        if *t == Tone::Stack && rows[i] > 0 {
            give(&mut rows, i, wrapped[i].len().min(2) - 1);
        }
    }
    let mut out = Vec::new();
    for (i, (t, s)) in lines.iter().enumerate() {
        if *t == Tone::Stack && rows[i] == 1 {
            // One row: as much of the stack as fits, not only its first whole frames; the
            // framework's frames between the op and the user's code first left out.
            out.push(Line::styled(cut(&to_user_code(s, w), w), tone_style(*t)));
            continue;
        }
        let shown = &wrapped[i][..rows[i]];
        for (k, l) in shown.iter().enumerate() {
            let l = if k + 1 == rows[i] && rows[i] < wrapped[i].len() {
                cut(&format!("{l} …"), w)
            } else {
                l.clone()
            };
            out.push(Line::styled(l, tone_style(*t)));
        }
    }
    out
}

/// A stack line too long for `w` characters with the frames that name no source line (the
/// framework's: `aten::…`, `<built-in …>`, CUDA calls) between its first frame and the first
/// that does (the user's code) shown as one `…`; as it was when it fits or has none such.
fn to_user_code(s: &str, w: usize) -> String {
    const SEP: &str = " ‹ ";
    if s.chars().count() <= w {
        return s.to_string();
    }
    let frames: Vec<&str> = s.split(SEP).collect();
    let sourced = |f: &str| {
        f.rsplit_once(':')
            .is_some_and(|(file, line)| file.contains('.') && line.parse::<u32>().is_ok())
    };
    match frames.iter().skip(1).position(|f| sourced(f)) {
        Some(k) if k >= 2 => {
            let mut v = vec![frames[0], "…"];
            v.extend(&frames[k + 1..]);
            v.join(SEP)
        }
        _ => s.to_string(),
    }
}

/// A stack line (frames joined by ` ‹ `) in rows of `w` characters, broken between frames; a
/// frame longer than a row is cut.
fn stack_rows(s: &str, w: usize) -> Vec<String> {
    const SEP: &str = " ‹ ";
    let mut rows: Vec<String> = Vec::new();
    let mut row = String::new();
    for (k, frame) in s.split(SEP).enumerate() {
        let piece = if k == 0 {
            frame.to_string()
        } else {
            format!("{SEP}{frame}")
        };
        let fits = row.chars().count() + piece.chars().count() <= w;
        if !row.is_empty() && !fits {
            rows.push(std::mem::take(&mut row));
            row = format!("‹ {frame}");
        } else {
            row.push_str(&piece);
        }
    }
    rows.push(row);
    rows.into_iter().map(|r| cut(&r, w)).collect()
}

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    match &app.view.details {
        DetailsVm::Gap {
            dur,
            at,
            cause_text,
            cause,
            lines,
        } => {
            let block = Block::default().borders(Borders::ALL).title(" Details ");
            let inner = block.inner(area);
            f.render_widget(block, area);
            let mut out = vec![Line::from(vec![
                Span::styled(dur.clone(), Style::default().add_modifier(Modifier::BOLD)),
                Span::raw(at.clone()),
                Span::styled(
                    cause_text.clone(),
                    Style::default()
                        .fg(cause_color(*cause))
                        .add_modifier(Modifier::BOLD),
                ),
            ])];
            let h = (inner.height as usize).saturating_sub(1);
            out.extend(fit_lines(lines, h, inner.width as usize));
            f.render_widget(Paragraph::new(out), inner);
        }
        DetailsVm::Node(lines) => {
            let block = Block::default()
                .borders(Borders::ALL)
                .title(" Details: call tree node ");
            let inner = block.inner(area);
            f.render_widget(block, area);
            f.render_widget(
                Paragraph::new(fit_lines(
                    lines,
                    inner.height as usize,
                    inner.width as usize,
                )),
                inner,
            );
        }
        DetailsVm::Fix { title, rows, hint } => super::fix::draw(f, area, app, title, rows, hint),
        DetailsVm::Compare { title, lines } => {
            let block = Block::default().borders(Borders::ALL).title(title.as_str());
            let inner = block.inner(area);
            f.render_widget(block, area);
            f.render_widget(
                Paragraph::new(tone_lines(lines, inner.width as usize)),
                inner,
            );
        }
        DetailsVm::Waiting(why) => {
            let block = Block::default().borders(Borders::ALL).title(" Details ");
            let inner = block.inner(area);
            f.render_widget(block, area);
            // Nothing else is in the pane: the whole sentence, wrapped.
            let p = Paragraph::new(why.as_str()).style(Style::default().fg(Color::Gray));
            f.render_widget(p.wrap(Wrap { trim: true }), inner);
        }
    }
}

/// The details at full size (`d`): over the gap list, the tree and the details pane, every line
/// whole (wrapped rather than cut), then the whole stack, innermost frame first.
pub fn draw_full(f: &mut Frame, area: Rect, app: &App) {
    use ratatui::widgets::Clear;
    let mut lines: Vec<Line> = Vec::new();
    let tone = |lines: &mut Vec<Line>, items: &[(Tone, String)]| {
        lines.extend(
            items
                .iter()
                .map(|(t, s)| Line::styled(s.clone(), tone_style(*t))),
        )
    };
    match &app.view.details {
        DetailsVm::Gap {
            dur,
            at,
            cause_text,
            lines: rest,
            ..
        } => {
            lines.push(Line::styled(
                format!("{dur}{at}{cause_text}"),
                Style::default().add_modifier(Modifier::BOLD),
            ));
            // The launch stack follows whole, a frame a line.
            let rest: Vec<_> = rest
                .iter()
                .filter(|(_, s)| !s.starts_with("launch stack: ") || app.view.stack.is_empty())
                .cloned()
                .collect();
            tone(&mut lines, &rest);
        }
        DetailsVm::Node(items) => tone(&mut lines, items),
        DetailsVm::Compare {
            title,
            lines: items,
        } => {
            lines.push(Line::styled(
                title.clone(),
                Style::default().add_modifier(Modifier::BOLD),
            ));
            tone(&mut lines, items);
        }
        DetailsVm::Fix { title, rows, .. } => {
            lines.push(Line::styled(
                title.trim().to_string(),
                Style::default().add_modifier(Modifier::BOLD),
            ));
            for r in rows {
                lines.push(Line::raw(format!("{} {}  {}", r.head, r.share, r.site)));
                lines.push(Line::styled(
                    format!("    {}: {}", r.verdict, r.fix),
                    tone_style(Tone::Verdict),
                ));
            }
        }
        DetailsVm::Waiting(why) => lines.push(Line::raw(why.clone())),
    }
    if !app.view.stack.is_empty() {
        lines.push(Line::raw(""));
        lines.push(Line::styled(
            "stack, innermost first (y copies it, o opens its source line):",
            Style::default().add_modifier(Modifier::BOLD),
        ));
        lines.extend(
            app.view
                .stack
                .iter()
                .map(|s| Line::styled(format!("  {s}"), tone_style(Tone::Stack))),
        );
    }
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Details, full size (↑↓ PgUp PgDn scroll; d closes) ");
    f.render_widget(Clear, area);
    f.render_widget(
        Paragraph::new(lines)
            .block(block)
            .wrap(Wrap { trim: false })
            .scroll((app.details_scroll, 0)),
        area,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const STACK: &str = "launch stack: aten::_cudnn_attention_forward ‹ aten::sdpa ‹ <built-in function sdpa> ‹ attend  a.py:24 ‹ forward  a.py:51";

    #[test]
    fn a_cut_stack_skips_the_frameworks_frames_to_the_users_code() {
        assert_eq!(
            to_user_code(STACK, 60),
            "launch stack: aten::_cudnn_attention_forward ‹ … ‹ attend  a.py:24 ‹ forward  a.py:51"
        );
        // Whole where it fits; as it was where the user's code comes second already.
        assert_eq!(to_user_code(STACK, 200), STACK);
        let near = "launch stack: aten::mm ‹ attend  a.py:24 ‹ forward  a.py:51";
        assert_eq!(to_user_code(near, 20), near);
    }

    #[test]
    fn a_stack_wraps_between_frames() {
        let rows = stack_rows(STACK, 70);
        assert_eq!(
            rows,
            [
                "launch stack: aten::_cudnn_attention_forward ‹ aten::sdpa",
                "‹ <built-in function sdpa> ‹ attend  a.py:24 ‹ forward  a.py:51",
            ]
        );
    }
}

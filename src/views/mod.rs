//! Pure render functions: each pane is `fn(frame, area, &App)`.
//!
//! ```text
//! ┌ GPU timeline ─────────────────────────────────────────────┐
//! │ gpu0 s7   ▇▇─▇──▇▇▁──────▇▇▇                              │  one lane per device/stream
//! │           0us      250us      500us                       │  time axis, cursor ▼
//! ├ launches/s · busy ────────────────────────────────────────┤
//! │ ▂▃▅▇▇▅▃▂                                                  │
//! ├ gaps ────────────────────────┬ call tree ─────────────────┤
//! │ 12.3ms host_wait  rope       │ ▼ 40ms 80% model.py: fwd   │
//! ├ details ─────────────────────┴────────────────────────────┤
//! │ gap 12.3ms at 4.1ms, cause host_wait, launched from ...   │
//! └ status: source · span · ops kept/dropped · LIVE · window ─┘
//! ```

use ratatui::layout::{Constraint, Direction, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph, Sparkline, Wrap};
use ratatui::Frame;
use tui_tree_widget::Tree;

use crate::app::{Action, App, Focus, GapSort, SourceState};
use crate::collect::analysis::{self, Category, Gap, Reason};
use crate::collect::store::{OpKind, FLAG_COMM};
use crate::units::{fmt_ns, fmt_short};

pub const MIN_W: u16 = 80;
pub const MIN_H: u16 = 20;

fn cause_color(g: &Gap) -> Color {
    match (g.reason, g.category) {
        (Reason::Sync, _) => Color::Red,
        (Reason::EventWait, _) => Color::Magenta,
        (Reason::Graph, _) => Color::Blue,
        (_, Category::HostWait) => Color::Yellow,
        (_, Category::KernelWait) => Color::Cyan,
        (_, Category::Other) => Color::Gray,
    }
}

fn focus_style(app: &App, f: Focus) -> Style {
    if app.focus == f {
        Style::default()
            .fg(Color::LightCyan)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::default().fg(Color::DarkGray)
    }
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n.saturating_sub(1)).collect::<String>() + "…"
    }
}

/// Kernel names shortened for narrow cells: template arguments and parameters dropped.
pub fn short_kernel(name: &str) -> String {
    let mut out = String::new();
    let mut depth = 0i32;
    for ch in name.chars() {
        match ch {
            '<' | '(' => depth += 1,
            '>' | ')' => depth -= 1,
            _ if depth == 0 => out.push(ch),
            _ => {}
        }
    }
    let out = out.trim().trim_start_matches("void ").to_string();
    let out = out.rsplit("::").next().unwrap_or(&out).to_string();
    if out.is_empty() {
        name.to_string()
    } else {
        out
    }
}

/// The innermost Python frame of a gap's launch stack, or the API name.
fn launch_site(app: &App, g: &Gap) -> String {
    let frames = app.store.stacks.frames(g.stack);
    for f in frames.iter().rev() {
        let s = app.store.names.get(*f);
        if s.contains(".py(") {
            return s.to_string();
        }
    }
    frames
        .last()
        .map(|f| app.store.names.get(*f).to_string())
        .unwrap_or_else(|| app.store.names.get(g.api).to_string())
}

/// Draws the whole screen:
///
/// ```text
/// ┌ GPU timeline (a row per lane, 3..1/3 of the height) ──────────────────┐
/// ┌ launches/s · GPU busy · NCCL wait (launch rate and busy sparklines) ──┐
/// ┌ Gaps (50%; 35% while the tree   ┐┌ Call tree (50%; 65% with the focus) ┐
/// │ has the focus)                  ││                                     │
/// ┌ Details: the selected gap, or the   ┐┌ program output (live, ≥140 cols) ┐
/// │ selected tree node while the tree has the focus                        │
///  status line: source state, span, ops, drops, lag, zoom, last message
/// ```
///
/// Under 80x20 only a notice is drawn (an 80x24 terminal with tmux's status line is 80x23); `?` draws the help over everything.
pub fn draw(f: &mut Frame, app: &mut App) {
    let area = f.area();
    if area.width < MIN_W || area.height < MIN_H {
        let msg = format!(
            "terminal too small: {}x{}, gaptop needs {MIN_W}x{MIN_H}",
            area.width, area.height
        );
        f.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return;
    }
    let lanes = app.store.lanes.len() as u16;
    let big = area.height >= 40;
    let short = area.height < 24;
    let detail_h = if big {
        9
    } else if short {
        5
    } else {
        6
    };
    // What is left for the timeline once the other panes have their least: 4 rows of rate,
    // 5 of gaps and tree, the details and the status line.
    let tl_max = if big {
        area.height / 3
    } else {
        area.height.saturating_sub(4 + 5 + detail_h + 1).clamp(4, 8)
    };
    let tl_h = (lanes + 3).clamp(4, tl_max);
    let rows = Layout::default()
        .direction(Direction::Vertical)
        .constraints([
            Constraint::Length(tl_h),
            Constraint::Length(4),
            Constraint::Min(5),
            Constraint::Length(detail_h),
            Constraint::Length(1),
        ])
        .split(area);
    timeline(f, rows[0], app);
    rate(f, rows[1], app);
    // The call tree takes most of the width while it has the focus: its indentation grows
    // with the stack's depth, and the frame names are what it is for.
    let tree_pct = if app.focus == Focus::Tree { 65 } else { 50 };
    let mid = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([
            Constraint::Percentage(100 - tree_pct),
            Constraint::Percentage(tree_pct),
        ])
        .split(rows[2]);
    gap_list(f, mid[0], app);
    tree(f, mid[1], app);
    if app.is_live() && area.width >= 140 {
        let bottom = Layout::default()
            .direction(Direction::Horizontal)
            .constraints([Constraint::Percentage(62), Constraint::Percentage(38)])
            .split(rows[3]);
        details(f, bottom[0], app);
        output(f, bottom[1], app);
    } else {
        details(f, rows[3], app);
    }
    status(f, rows[4], app);
    if app.help {
        help(f, area, app);
    }
}

/// One row per lane: busy blocks, gaps coloured by cause, the cursor and the selected gap.
pub fn timeline(f: &mut Frame, area: Rect, app: &mut App) {
    let title = format!(
        " GPU timeline  {} .. {}  (window {}) ",
        app.rel(app.lo),
        app.rel(app.hi),
        fmt_ns(app.width())
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .border_style(focus_style(app, Focus::Timeline));
    let inner = block.inner(area);
    f.render_widget(block, area);
    if inner.height < 2 || inner.width < 20 {
        return;
    }
    let label_w: u16 = 16;
    let cols = inner.width - label_w;
    app.timeline_x = (inner.x + label_w, cols);
    let (lo, hi) = (app.lo, app.hi);
    let w = (hi - lo).max(1) as f64;
    let t_at = |c: u16| lo + (w * c as f64 / cols as f64) as i64;
    let order = app.store.lane_order();
    let lane_rows = (inner.height - 1) as usize;
    let shown = if order.len() > lane_rows {
        lane_rows.saturating_sub(1)
    } else {
        order.len()
    };
    let sel = app.selected_gap();
    // When not every lane fits, the rows start where the selected gap's lane shows.
    let first = sel
        .as_ref()
        .and_then(|g| order.iter().position(|&l| l == g.lane))
        .map_or(0, |i| (i + 1).saturating_sub(shown));
    let cursor_col = ((app.cursor - lo) as f64 / w * cols as f64) as i64;
    // The window's longest gaps (the gap list) marked by column, so that a big gap inside a
    // cell full of short kernels still shows: the cell keeps its busy block on the gap's colour.
    let mut marks: std::collections::HashMap<(usize, u16), Color> = Default::default();
    let col_of = |t: i64| {
        (((t - lo) as f64 / w * cols as f64).floor() as i64).clamp(0, cols as i64 - 1) as u16
    };
    // Big means at least a twentieth of a cell (smaller ones are part of the busy texture).
    let big = ((w / cols as f64) / 20.0) as i64;
    for g in app.gaps().iter().take(500) {
        if g.end <= lo || g.start >= hi || g.dur() < big.max(app.min_gap) {
            continue;
        }
        for c in col_of(g.start)..=col_of(g.end - 1) {
            marks.entry((g.lane, c)).or_insert_with(|| cause_color(g));
        }
    }
    let buf = f.buffer_mut();
    for (row, &lane) in order.iter().skip(first).take(shown).enumerate() {
        let y = inner.y + row as u16;
        let label = short(&app.store.lane_label(lane), (label_w - 1) as usize);
        buf.set_string(inner.x, y, label, Style::default().fg(Color::White));
        let l = &app.store.lanes[lane];
        for c in 0..cols {
            let (t0, t1) = (t_at(c), t_at(c + 1).max(t_at(c) + 1));
            let mid = t0 + (t1 - t0) / 2;
            let busy = l.busy_in(t0, t1) as f64 / (t1 - t0) as f64;
            let mut style = Style::default();
            let ch;
            if busy > 0.0 {
                const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
                ch = BLOCKS[((busy * 8.0).ceil() as usize).clamp(1, 8) - 1];
                let i = l.lower_bound(mid + 1).saturating_sub(1);
                let color = match l.ops.get(i) {
                    Some(o) if o.flags & FLAG_COMM != 0 => Color::Magenta,
                    Some(o) if o.kind == OpKind::Memcpy => Color::Blue,
                    Some(o) if o.kind == OpKind::Memset => Color::LightBlue,
                    _ => Color::Green,
                };
                style = style.fg(color);
                if let Some(&gc) = marks.get(&(lane, c)) {
                    style = style.bg(gc);
                }
            } else {
                let next = l.lower_bound(mid);
                let gap = (next > 0 && next < l.ops.len())
                    .then(|| analysis::classify(&app.store, lane, next - 1, next, &app.cfg))
                    .flatten();
                match gap {
                    Some(g) if g.dur() >= app.min_gap => {
                        ch = '─';
                        style = style.fg(cause_color(&g));
                        if app.highlighted(&g) {
                            style = style.bg(Color::Indexed(238)).add_modifier(Modifier::BOLD);
                        }
                    }
                    Some(_) => {
                        ch = '·';
                        style = style.fg(Color::DarkGray);
                    }
                    None => ch = ' ',
                }
            }
            if let Some(s) = &sel {
                if s.lane == lane && s.end > t0 && s.start < t1 {
                    style = style.bg(Color::Indexed(24));
                }
            }
            if c as i64 == cursor_col {
                style = style.add_modifier(Modifier::REVERSED);
            }
            if let Some(cell) = buf.cell_mut((inner.x + label_w + c, y)) {
                cell.set_char(ch).set_style(style);
            }
        }
    }
    if order.len() > shown {
        let y = inner.y + shown as u16;
        buf.set_string(
            inner.x,
            y,
            if first == 0 {
                format!("+{} more lanes", order.len() - shown)
            } else {
                format!(
                    "lanes {}-{} of {} (the selected gap's)",
                    first + 1,
                    first + shown,
                    order.len()
                )
            },
            Style::default().fg(Color::DarkGray),
        );
    }
    // Axis with ticks every ~16 columns, relative to the capture start.
    let y = inner.y + inner.height - 1;
    let origin = app.store.span().map(|s| s.0).unwrap_or(0);
    let mut c = 0u16;
    while c + 8 < cols {
        let label = format!("|{}", fmt_short(t_at(c) - origin));
        buf.set_string(
            inner.x + label_w + c,
            y,
            &label,
            Style::default().fg(Color::DarkGray),
        );
        c += 16.max(label.len() as u16 + 2);
    }
    if (0..cols as i64).contains(&cursor_col) {
        buf.set_string(
            inner.x + label_w + cursor_col as u16,
            y,
            "▲",
            Style::default().fg(Color::LightCyan),
        );
    }
}

/// Eighths of a one-row sparkline cell for a fraction of its full height: the nearest eighth,
/// but never none for a value above zero (a GPU 10% busy must not look idle).
fn spark_ticks(frac: f64) -> u64 {
    if frac.is_nan() || frac <= 0.0 {
        return 0;
    }
    ((frac * 8.0).round() as u64).clamp(1, 8)
}

/// Launches per second and busy fraction over the window.
pub fn rate(f: &mut Frame, area: Rect, app: &App) {
    let (ops, busy) = app
        .cache
        .as_ref()
        .map(|c| {
            let s = &c.summary;
            let secs = (s.hi - s.lo).max(1) as f64 / 1e9;
            let devs = app.store.devices().len().max(1) as f64;
            let span = (s.hi - s.lo).max(1) as f64 * devs;
            (s.gpu_ops as f64 / secs, 100.0 * s.busy_ns as f64 / span)
        })
        .unwrap_or((0.0, 0.0));
    // With several ranks, time inside NCCL spent waiting for a late rank is a stall, not work.
    let comm = app
        .cache
        .as_ref()
        .and_then(|c| c.comm.as_ref())
        .map(|c| {
            let wait: i64 = c.per_rank.iter().map(|r| r.wait_ns).sum();
            let late = c.per_rank.iter().max_by_key(|r| r.late_ns);
            match late {
                Some(l) if l.late_ns > 0 => format!(
                    "  ·  NCCL wait {} (rank {} late {}x)",
                    fmt_short(wait),
                    l.rank,
                    l.late_count
                ),
                _ => format!("  ·  NCCL wait {}", fmt_short(wait)),
            }
        })
        .unwrap_or_default();
    let title = format!(" launches/s {:.0}  ·  GPU busy {:.1}%{comm} ", ops, busy);
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    if inner.width < 10 || inner.height < 2 {
        return;
    }
    let label_w = 16u16;
    let n = (inner.width - label_w) as usize;
    let bins = analysis::rate_bins(&app.store, app.lo, app.hi, n);
    let most = bins.iter().map(|b| b.ops).max().unwrap_or(0).max(1) as f64;
    let launches: Vec<u64> = bins
        .iter()
        .map(|b| spark_ticks(b.ops as f64 / most))
        .collect();
    let busy: Vec<u64> = bins.iter().map(|b| spark_ticks(b.busy)).collect();
    let buf = f.buffer_mut();
    buf.set_string(
        inner.x,
        inner.y,
        "launches",
        Style::default().fg(Color::White),
    );
    buf.set_string(
        inner.x,
        inner.y + 1,
        "busy %",
        Style::default().fg(Color::White),
    );
    let r1 = Rect::new(inner.x + label_w, inner.y, n as u16, 1);
    let r2 = Rect::new(inner.x + label_w, inner.y + 1, n as u16, 1);
    f.render_widget(
        Sparkline::default()
            .data(&launches)
            .max(8)
            .style(Style::default().fg(Color::LightGreen)),
        r1,
    );
    f.render_widget(
        Sparkline::default()
            .data(&busy)
            .max(8)
            .style(Style::default().fg(Color::Green)),
        r2,
    );
}

/// The window's gaps, longest first or in time order.
pub fn gap_list(f: &mut Frame, area: Rect, app: &App) {
    let total = app.cache.as_ref().map(|c| c.gaps_total).unwrap_or(0);
    let gaps = app.gaps();
    let title = format!(
        " Gaps{} {}{} · {} by {} ",
        if app.min_gap > 0 {
            format!(" ≥{}", fmt_short(app.min_gap))
        } else {
            String::new()
        },
        total,
        if (gaps.len() as u64) < total {
            format!(" (top {})", gaps.len())
        } else {
            String::new()
        },
        match &app.node_filter {
            Some((n, _)) => format!("under {}", short(n, 20)),
            None => "all".into(),
        },
        match app.sort {
            GapSort::Duration => "duration",
            GapSort::Time => "time",
        }
    );
    let title = match app.cache.as_ref().map(|c| c.analyzed) {
        Some((a, b)) if (a, b) != (app.lo, app.hi) => {
            format!("{title}· {} around cursor ", fmt_short(b - a))
        }
        _ => title,
    };
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .border_style(focus_style(app, Focus::Gaps));
    let inner = block.inner(area);
    f.render_widget(block, area);
    let h = inner.height as usize;
    if h == 0 {
        return;
    }
    let first = app
        .gap_sel
        .saturating_sub(h / 2)
        .min(gaps.len().saturating_sub(h));
    let mut lines = Vec::new();
    for g in gaps.iter().skip(first).take(h) {
        let lane = &app.store.lanes[g.lane];
        let next = short_kernel(app.store.names.get(lane.ops[g.next].name));
        let site = crate::app::pretty_frame(&launch_site(app, g));
        let text = format!(
            "{:>8} {:<11} {:>8} {} {}",
            fmt_short(g.dur()),
            App::cause_label(g),
            app.rel(g.start),
            short(&next, 14),
            site
        );
        let mut style = Style::default().fg(cause_color(g));
        if app.highlighted(g) {
            style = style.add_modifier(Modifier::BOLD);
        }
        if app.is_selected(g) {
            style = style.bg(Color::Indexed(24)).fg(Color::White);
        }
        lines.push(Line::styled(short(&text, inner.width as usize), style));
    }
    if gaps.is_empty() {
        lines.push(Line::styled(
            "no gaps in this window",
            Style::default().fg(Color::DarkGray),
        ));
    }
    f.render_widget(Paragraph::new(lines), inner);
}

/// The call tree of gap time.
pub fn tree(f: &mut Frame, area: Rect, app: &mut App) {
    let title = format!(
        " Call tree ({}{}): gap, share, frame · gaps, launches, kernel time ",
        if app.inverted {
            "bottom-up"
        } else {
            "top-down"
        },
        if app.min_gap > 0 {
            format!(", gaps ≥{}", fmt_short(app.min_gap))
        } else {
            String::new()
        }
    );
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title)
        .border_style(focus_style(app, Focus::Tree));
    let Some(c) = &app.cache else {
        f.render_widget(block, area);
        return;
    };
    match Tree::new(&c.items) {
        Ok(t) => {
            let t = t
                .block(block)
                .highlight_style(Style::default().bg(Color::Indexed(24)).fg(Color::White));
            f.render_stateful_widget(t, area, &mut app.tree_state);
        }
        Err(_) => f.render_widget(block, area),
    }
}

/// With no gap selected, the details pane says what to fix first: the code with the most gap
/// time in the window, its share, what kind of waiting it is and the usual fix.
fn what_to_fix(f: &mut Frame, area: Rect, app: &App) {
    let hint = "n/N walks gaps, b picks the biggest, Tab goes to the call tree, ? for help.";
    let advice = app.cache.as_ref().map(|c| &c.advice[..]).unwrap_or(&[]);
    let title = if advice.is_empty() {
        " Details "
    } else {
        " What to fix: the window's gap time by the code that launched it "
    };
    let block = Block::default().borders(Borders::ALL).title(title);
    let inner = block.inner(area);
    f.render_widget(block, area);
    let w = inner.width as usize;
    let mut lines: Vec<Line> = advice
        .iter()
        .take((inner.height as usize).saturating_sub(1))
        .map(|a| {
            let head = format!("{:>4.0}% {:>7}  ", 100.0 * a.share, fmt_short(a.gap_ns));
            let tail = format!("  [{}] {}", a.verdict.as_str(), a.fix);
            let site = short(&a.site, w.saturating_sub(head.chars().count() + 12));
            let room = w.saturating_sub(head.chars().count() + site.chars().count());
            Line::from(vec![
                Span::styled(head, Style::default().fg(Color::LightGreen)),
                Span::styled(site, Style::default().fg(Color::White)),
                Span::styled(short(&tail, room), Style::default().fg(Color::Gray)),
            ])
        })
        .collect();
    let hint = match (lines.is_empty(), nothing_yet(app)) {
        (true, Some(why)) => {
            // Nothing else is in the pane: the whole sentence, wrapped.
            let p = Paragraph::new(why).style(Style::default().fg(Color::Gray));
            f.render_widget(p.wrap(Wrap { trim: true }), inner);
            return;
        }
        (true, None) => format!("No gap selected: {hint}"),
        (false, _) => hint.to_string(),
    };
    lines.push(Line::styled(
        short(&hint, w),
        Style::default().fg(Color::DarkGray),
    ));
    f.render_widget(Paragraph::new(lines), inner);
}

/// Why there is nothing to show yet, when no GPU op has arrived at all: the first seconds of
/// a live run (the program is still importing, or has not touched CUDA), a program that ended
/// without GPU work, or a source without ops.
fn nothing_yet(app: &App) -> Option<String> {
    let s = &app.store;
    if s.op_count() > 0 || s.evicted_ops > 0 {
        return None;
    }
    let who = match s.procs.len() {
        0 => String::new(),
        1 => format!("pid {}", s.procs[0].pid),
        n => format!("{n} processes"),
    };
    Some(match (&app.source, s.procs.is_empty()) {
        (SourceState::Live, true) => "Waiting for the program to start CUDA: its collector \
            connects then (imports and model loading come first)."
            .to_string(),
        (SourceState::Live, false) => format!("{who} connected; no GPU work has arrived yet."),
        (SourceState::Ended(_), true) => "The program ended without starting CUDA, or its \
            collector could not start: its output says why."
            .to_string(),
        (SourceState::Ended(_), false) => {
            format!("The program ended; {who} connected but sent no GPU work.")
        }
        (SourceState::File, _) => "This source holds no GPU ops.".to_string(),
    })
}

/// The selected gap: times, cause, launch, neighbours and stacks.
pub fn details(f: &mut Frame, area: Rect, app: &App) {
    if app.focus == Focus::Tree {
        if let (Some(n), Some(c)) = (app.selected_node(), app.cache.as_ref()) {
            return node_details(f, area, app, c, n);
        }
    }
    let Some(g) = app.selected_gap() else {
        return what_to_fix(f, area, app);
    };
    let block = Block::default().borders(Borders::ALL).title(" Details ");
    let inner = block.inner(area);
    f.render_widget(block, area);
    let lane = &app.store.lanes[g.lane];
    let prev = &lane.ops[g.prev];
    let next = &lane.ops[g.next];
    let w = inner.width as usize;
    let mut lines = vec![Line::from(vec![
        Span::styled(
            format!("gap {} ", fmt_ns(g.dur())),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(
            "at {} on {}  cause ",
            app.rel(g.start),
            app.store.lane_label(g.lane)
        )),
        Span::styled(
            format!("{} ({})", g.category.as_str(), g.reason.as_str()),
            Style::default()
                .fg(cause_color(&g))
                .add_modifier(Modifier::BOLD),
        ),
    ])];
    let api = if g.api != 0 {
        format!(
            "launched by {}, latency {} (call start → op start)",
            app.store.names.get(g.api),
            fmt_ns(g.launch_latency)
        )
    } else {
        "launching call not in this source".into()
    };
    lines.push(Line::raw(short(&api, w)));
    // Shown after the stack and the verdict: on a short pane, those matter more.
    let neighbours = Line::raw(short(
        &format!(
            "before: {} ({})  after: {} ({})",
            short_kernel(app.store.names.get(prev.name)),
            fmt_short(prev.dur()),
            short_kernel(app.store.names.get(next.name)),
            fmt_short(next.dur())
        ),
        w,
    ));
    let frames = app.store.frame_strings(g.stack);
    // Python (and API) frames on one line, native ones (`--native`) on the next; native
    // frames that could not be named say nothing and are left out.
    let (native, rest): (Vec<&String>, Vec<&String>) =
        frames.iter().partition(|f| crate::app::is_native_frame(f));
    let launch: Vec<String> = rest
        .iter()
        .rev()
        .filter(|f| !crate::app::is_plumbing(f))
        .map(|f| crate::app::pretty_frame(f))
        .collect();
    lines.push(Line::styled(
        short(&format!("launch stack: {}", launch.join(" ‹ ")), w),
        Style::default().fg(Color::LightYellow),
    ));
    // What the gaps charged to this code have in common, and the usual fix.
    let key = crate::advice::site_key(&app.store, &g);
    if let Some(a) = app
        .cache
        .as_ref()
        .and_then(|c| c.advice.iter().find(|a| a.key == key))
    {
        let pattern = crate::advice::summary_line(a);
        // A gap far longer than its code's usual ones is not what the usual fix addresses.
        let text = match crate::advice::one_off(g.dur(), a.typical_gap_ns, a.gaps) {
            Some(times) => format!(
                "one-off, {times}x the typical {} here (first-call setup, allocation or \
                 compilation?); usually {pattern}",
                fmt_short(a.typical_gap_ns)
            ),
            None => pattern,
        };
        lines.push(Line::styled(
            short(&text, w),
            Style::default().fg(Color::LightGreen),
        ));
    }
    let named: Vec<&str> = native
        .iter()
        .rev()
        .filter(|f| !crate::app::is_unnamed_native(f))
        .map(|f| f.as_str())
        .collect();
    if !named.is_empty() {
        lines.push(Line::styled(
            short(&format!("native: {}", named.join(" ‹ ")), w),
            Style::default().fg(Color::LightCyan),
        ));
    }
    lines.push(neighbours);
    let cpu = app.store.frame_strings(g.cpu_stack);
    let proc = &app.store.procs[lane.key.proc as usize];
    let launch = proc.api_by_corr(next.corr);
    let cpu_text = if cpu.is_empty() {
        // Without CPU spans (gaptop's recordings), the launching thread's own CUDA calls
        // still say how long it worked outside them before this launch.
        match launch.map(|a| (a, proc.call_before(next.corr, 4096))) {
            Some((a, Some(p))) => format!(
                "CPU during gap: {} outside CUDA on the launching thread, after its {} ({})",
                fmt_short(a.start - p.end),
                app.store.names.get(p.name),
                fmt_short(p.end - p.start)
            ),
            Some((_, None)) => {
                "CPU during gap: no earlier CUDA call of the launching thread here".into()
            }
            None => "CPU during gap: not known from this source".to_string(),
        }
    } else {
        let v: Vec<String> = cpu
            .iter()
            .rev()
            .take(3)
            .map(|f| crate::app::pretty_frame(f))
            .collect();
        format!("CPU during gap: {}", v.join(" ‹ "))
    };
    lines.push(Line::styled(
        short(&cpu_text, w),
        Style::default().fg(Color::LightMagenta),
    ));
    f.render_widget(Paragraph::new(lines), inner);
}

/// The selected call tree node, while the tree has the focus: its frame in full (the row is
/// cut on a narrow pane), what is charged to it, and its path to the root.
fn node_details(f: &mut Frame, area: Rect, app: &App, c: &crate::app::Cache, n: usize) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(" Details: call tree node ");
    let inner = block.inner(area);
    f.render_widget(block, area);
    let w = inner.width as usize;
    let t = &c.tree;
    let node = &t.nodes[n];
    let frame = app.store.names.get(node.frame);
    let share = crate::app::tree_share(t, n);
    let mut lines = vec![
        Line::styled(
            short(&crate::app::pretty_frame(frame), w),
            Style::default().add_modifier(Modifier::BOLD),
        ),
        Line::raw(short(
            &format!(
                "{} of gap time ({share:.1}%) in {} gaps, {} launches, {} of kernel time",
                fmt_ns(node.gap_ns),
                node.gaps,
                node.launches,
                fmt_ns(node.kernel_ns)
            ),
            w,
        )),
    ];
    if crate::app::pretty_frame(frame) != frame {
        // The source location as the trace gives it, to open in an editor.
        lines.push(Line::styled(
            short(&format!("at {frame}"), w),
            Style::default().fg(Color::DarkGray),
        ));
    }
    let mut path: Vec<String> = t
        .path_to(node.parent)
        .into_iter()
        .rev()
        .map(|p| app.store.names.get(t.nodes[p].frame))
        .filter(|name| !crate::app::is_plumbing(name))
        .map(crate::app::pretty_frame)
        .collect();
    // Top-down, the node's ancestors are its callers, nearest first; bottom-up they are what
    // it calls, down to the kernel: written the other way round, so that ‹ always reads
    // "called by".
    let text = if path.is_empty() {
        "at the root of the tree".to_string()
    } else if app.inverted {
        path.reverse();
        format!("leads to: {} ‹ (this)", path.join(" ‹ "))
    } else {
        format!("called from: {}", path.join(" ‹ "))
    };
    lines.push(Line::styled(
        short(&text, w),
        Style::default().fg(Color::LightYellow),
    ));
    // A function that launches: what its gaps have in common, over all its call paths.
    if let Some(a) =
        crate::advice::frame_key(frame).and_then(|k| c.advice.iter().find(|a| a.key == k))
    {
        lines.push(Line::styled(
            short(
                &format!("all its launches: {}", crate::advice::summary_line(a)),
                w,
            ),
            Style::default().fg(Color::LightGreen),
        ));
    }
    lines.push(Line::styled(
        "Enter: walk this node's gaps with n/N · ←/→ collapse/expand · i inverts the tree",
        Style::default().fg(Color::DarkGray),
    ));
    f.render_widget(Paragraph::new(lines), inner);
}

/// The profiled program's last lines of output (live runs).
pub fn output(f: &mut Frame, area: Rect, app: &App) {
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
        .map(|l| Line::raw(short(l, inner.width as usize)))
        .collect();
    f.render_widget(Paragraph::new(lines), inner);
}

/// Source, span, ops kept and dropped, mode, window and the last message.
pub fn status(f: &mut Frame, area: Rect, app: &App) {
    // While a tree search is typed, the line is its prompt: the query must stay in view.
    if let Some(q) = &app.search {
        let line = Line::from(vec![
            Span::styled(
                " SEARCH ",
                Style::default().bg(Color::Magenta).fg(Color::White),
            ),
            Span::styled(
                format!(" /{q}▏ "),
                Style::default().add_modifier(Modifier::BOLD),
            ),
            Span::styled(app.message.clone(), Style::default().fg(Color::LightYellow)),
        ]);
        f.render_widget(Paragraph::new(line), area);
        return;
    }
    let st = &app.store;
    let span = st.span().map(|(a, b)| b - a).unwrap_or(0);
    let mode = match &app.source {
        SourceState::File => "FILE".to_string(),
        SourceState::Live if app.paused => "PAUSED".into(),
        SourceState::Live if app.follow => "LIVE".into(),
        SourceState::Live => "LIVE, held (z follows)".into(),
        SourceState::Ended(s) => format!("ENDED ({s})"),
    };
    let lost = st.dropped + st.evicted_ops;
    let mut spans = vec![
        Span::styled(
            format!(" {} ", mode),
            Style::default().bg(Color::Blue).fg(Color::White),
        ),
        Span::raw(format!(
            " {} │ {} │ {} ops │ ",
            short(&st.source, 20),
            fmt_short(span),
            st.capture_ops()
        )),
        Span::styled(
            if st.evicted_ops > 0 {
                format!("{} dropped {} evicted", st.dropped, st.evicted_ops)
            } else {
                format!("{} dropped", st.dropped)
            },
            if lost > 0 {
                Style::default().fg(Color::Red).add_modifier(Modifier::BOLD)
            } else {
                Style::default().fg(Color::DarkGray)
            },
        ),
        Span::raw(format!(" │ zoom {} │ ", fmt_short(app.width()))),
    ];
    // How far behind the GPU the live view is, as the collectors last measured it.
    let lag = st
        .procs
        .iter()
        .filter(|p| !p.ended)
        .map(|p| p.stats.lag_ns)
        .max();
    if let (SourceState::Live, Some(lag)) = (&app.source, lag.filter(|&l| l > 0)) {
        spans.insert(
            spans.len() - 1,
            Span::raw(format!(
                " │ lag {}",
                fmt_short(lag.min(i64::MAX as u64) as i64)
            )),
        );
    }
    if !app.message.is_empty() {
        spans.push(Span::styled(
            app.message.clone(),
            Style::default().fg(Color::LightYellow),
        ));
    } else {
        spans.push(Span::styled("? help", Style::default().fg(Color::DarkGray)));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// Every key, from the key map in use; two columns when the terminal is short.
pub fn help(f: &mut Frame, area: Rect, app: &App) {
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
    let h = (per_col as u16 + 3).min(area.height);
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
    lines.push(Line::styled(
        "timeline: █ busy · ─ gap: yellow host_wait, cyan kernel_wait, red sync",
        Style::default().fg(Color::DarkGray),
    ));
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(" gaptop keys (any key closes) "),
        ),
        r,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_shorten() {
        assert_eq!(
            short_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"),
            "vectorized_elementwise_kernel"
        );
        assert_eq!(short_kernel("Memcpy HtoD"), "Memcpy HtoD");
        assert_eq!(
            short_kernel("ampere_sgemm_128x64_tn"),
            "ampere_sgemm_128x64_tn"
        );
    }

    #[test]
    fn sparkline_cells_show_any_activity() {
        assert_eq!(spark_ticks(0.0), 0);
        assert_eq!(spark_ticks(f64::NAN), 0);
        assert_eq!(spark_ticks(0.001), 1, "a little is not nothing");
        assert_eq!(spark_ticks(0.101), 1);
        assert_eq!(spark_ticks(0.5), 4);
        assert_eq!(spark_ticks(0.94), 8);
        assert_eq!(spark_ticks(1.7), 8);
    }
}

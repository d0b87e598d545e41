//! Launches per second and the busy fraction over the window, as two sparklines.

use ratatui::layout::Rect;
use ratatui::style::{Color, Style};
use ratatui::widgets::{Block, Borders, Sparkline};
use ratatui::Frame;

use crate::app::layout::LABEL_W;
use crate::app::App;

pub fn draw(f: &mut Frame, area: Rect, app: &App) {
    let vm = &app.view.rate;
    let block = Block::default()
        .borders(Borders::ALL)
        .title(vm.title.as_str());
    let inner = block.inner(area);
    f.render_widget(block, area);
    if inner.width < 10 || inner.height < 2 {
        return;
    }
    let n = inner.width - LABEL_W;
    let buf = f.buffer_mut();
    let label = Style::default().fg(Color::White);
    buf.set_string(inner.x, inner.y, "launches", label);
    buf.set_string(inner.x, inner.y + 1, "busy %", label);
    let r1 = Rect::new(inner.x + LABEL_W, inner.y, n, 1);
    let r2 = Rect::new(inner.x + LABEL_W, inner.y + 1, n, 1);
    f.render_widget(
        Sparkline::default()
            .data(&vm.launches)
            .max(8)
            .style(Style::default().fg(Color::LightGreen)),
        r1,
    );
    f.render_widget(
        Sparkline::default()
            .data(&vm.busy)
            .max(8)
            .style(Style::default().fg(Color::Green)),
        r2,
    );
    // The steps strip: a bar a step, as tall as its wall time against the window's longest,
    // neighbours in two shades, the cursor's step bright.
    if let (Some(steps), true) = (&vm.steps, inner.height >= 3) {
        let buf = f.buffer_mut();
        let y = inner.y + 2;
        buf.set_string(inner.x, y, "steps", label);
        const BLOCKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
        for (i, c) in steps.iter().enumerate().take(n as usize) {
            let Some(c) = c else { continue };
            let color = match (c.current, c.odd) {
                (true, _) => Color::LightYellow,
                (false, true) => Color::Cyan,
                (false, false) => Color::Blue,
            };
            if let Some(cell) = buf.cell_mut((inner.x + LABEL_W + i as u16, y)) {
                cell.set_char(BLOCKS[(c.eighths as usize).clamp(1, 8) - 1])
                    .set_style(Style::default().fg(color));
            }
        }
    }
}

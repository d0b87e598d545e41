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
}

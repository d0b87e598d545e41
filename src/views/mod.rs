//! Render functions: each pane lays out and colours its part of the app's view model
//! ([`crate::app::ViewModel`]), which `App::refresh` computed for the screen's size; nothing
//! here reads the store or analyses anything. One file a pane:
//!
//! ```text
//! ┌ GPU timeline ─────────────────────────────────────────────┐  timeline.rs
//! │ gpu0 s7   ▇▇─▇──▇▇▁──────▇▇▇                              │  one lane per device/stream
//! │           0us      250us      500us                       │  time axis, cursor ▲
//! ├ launches/s · busy ────────────────────────────────────────┤  rate.rs
//! │ ▂▃▅▇▇▅▃▂                                                  │
//! ├ gaps ────────────────────────┬ call tree ─────────────────┤  gaps.rs, tree.rs
//! │ 12.3ms host_wait  rope       │ ▼ 40ms 80% model.py: fwd   │  (ranks.rs: the rank
//! │                              │                            │   summary, `R`, over both)
//! ├ details ─────────────────────┴────────────────────────────┤  details.rs (output.rs beside)
//! │ gap 12.3ms at 4.1ms, cause host_wait, launched from ...   │
//! └ status: source · span · ops kept/dropped · LIVE · window ─┘  status.rs (help.rs over all)
//! ```

mod details;
mod fix;
mod gaps;
mod help;
mod keybar;
mod output;
mod ranks;
mod rate;
mod status;
mod style;
mod timeline;
mod tree;

use ratatui::backend::Backend;
use ratatui::widgets::{Paragraph, Wrap};
use ratatui::{Frame, Terminal};
use tui_tree_widget::TreeState;

use crate::app::layout::{self, MIN_H, MIN_W};
use crate::app::{App, Drawn, HitAreas, Msg};

/// Draws the whole screen from the view model, which must have been built for this frame's
/// size (`app::term::render` sees to it), and returns where the mouse can point. The tree
/// widget's state is the app's, lent for the draw (the widget keeps its scroll position in it).
///
/// Under 80x20 only a notice is drawn (an 80x24 terminal with tmux's status line is 80x23);
/// `?` draws the help over everything.
pub fn draw(f: &mut Frame, app: &App, tree_state: &mut TreeState<usize>) -> HitAreas {
    let area = f.area();
    if layout::too_small(area) {
        let msg = format!(
            "terminal too small: {}x{}, gaptop needs {MIN_W}x{MIN_H}",
            area.width, area.height
        );
        f.render_widget(Paragraph::new(msg).wrap(Wrap { trim: true }), area);
        return HitAreas::default();
    }
    let s = app.view.screen;
    let hits = HitAreas {
        timeline_x: timeline::draw(f, s.timeline, app),
    };
    rate::draw(f, s.rate, app);
    if app.view.ranks.is_some() {
        ranks::draw(f, s.gaps.union(s.tree), app);
    } else {
        gaps::draw(f, s.gaps, app);
        tree::draw(f, s.tree, app, tree_state);
    }
    details::draw(f, s.details, app);
    if let Some(o) = s.output {
        output::draw(f, o, app);
    }
    if app.details_full {
        let top = s.gaps.y;
        let bottom = s.details.y + s.details.height;
        let r = ratatui::layout::Rect::new(area.x, top, area.width, bottom - top);
        details::draw_full(f, r, app);
    }
    status::draw(f, s.status, app);
    if let Some(k) = s.keys {
        keybar::draw(f, k, app);
    }
    if app.help {
        help::draw(f, area, app);
    }
    hits
}

/// Draws a frame: tells the app the terminal's size (so that its view model is laid out for
/// it), draws, and hands back to the app what the draw laid out (its hit areas and the tree
/// widget's state). The terminal loop draws with it, and so do the tests.
pub fn render<B: Backend>(term: &mut Terminal<B>, app: &mut App) -> Result<(), B::Error> {
    let size = term.size()?;
    app.update(Msg::Resize(size.width, size.height));
    let mut tree_state = std::mem::take(&mut app.tree_state);
    let mut hits = HitAreas::default();
    term.draw(|f| hits = draw(f, app, &mut tree_state))?;
    app.update(Msg::Drawn(Drawn { hits, tree_state }));
    Ok(())
}

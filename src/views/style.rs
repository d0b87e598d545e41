//! The panes' shared styles: a gap's colour by its cause, a text's style by its tone, and a
//! pane border's by whether it has the focus. Apart from `views`' `draw` so that every pane
//! (a child of `views`) takes them from here rather than from the module that draws them all.

use ratatui::style::{Color, Modifier, Style};

use crate::app::viewmodel::Tone;
use crate::app::{App, Cause, Focus};

/// A gap's colour by its cause.
pub(super) fn cause_color(c: Cause) -> Color {
    match c {
        Cause::Sync => Color::Red,
        Cause::EventWait => Color::Magenta,
        Cause::Graph => Color::Blue,
        Cause::HostWait => Color::Yellow,
        Cause::KernelWait => Color::Cyan,
        Cause::Other => Color::Gray,
    }
}

/// The style of a piece of text by what it is.
pub(super) fn tone_style(t: Tone) -> Style {
    match t {
        Tone::Plain => Style::default(),
        Tone::Bold => Style::default().add_modifier(Modifier::BOLD),
        Tone::Dim => Style::default().fg(Color::DarkGray),
        Tone::Stack => Style::default().fg(Color::LightYellow),
        Tone::Verdict => Style::default().fg(Color::LightGreen),
        Tone::Native => Style::default().fg(Color::LightCyan),
        Tone::Cpu => Style::default().fg(Color::LightMagenta),
        Tone::Better => Style::default().fg(Color::LightGreen),
        Tone::Worse => Style::default().fg(Color::LightRed),
    }
}

pub(super) fn focus_style(app: &App, f: Focus) -> Style {
    if app.focus == f {
        Style::default()
            .fg(Color::LightCyan)
            .add_modifier(Modifier::BOLD)
    } else {
        Style::default().fg(Color::DarkGray)
    }
}

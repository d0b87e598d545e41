//! What reaches the model and what it asks for: the [`Msg`]s that `update` applies (keys as
//! [`Action`]s, the mouse, a resize, a draw's results, the source's data, the tick) and the
//! [`Effect`]s it hands back to the terminal loop. Apart from `update` so that the loop, the
//! views and the tests name the messages without reaching into the code that applies them.

use tui_tree_widget::TreeState;

use super::keymap::Action;
use super::state::HitAreas;
use crate::export::{ExportJob, ExportRequest};
use gaptop_core::sources::live::LiveEvent;

/// A mouse event, as the model needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MouseKind {
    ScrollUp,
    ScrollDown,
    /// The left button pressed.
    Click,
    Other,
}

/// What a draw hands back: its hit areas, and the tree widget's state, which the widget
/// updates while rendering (its scroll offset and the rows it showed, which its keys use).
pub struct Drawn {
    pub hits: HitAreas,
    pub tree_state: TreeState<usize>,
}

/// Everything that changes the model.
pub enum Msg {
    Action(Action),
    Mouse {
        column: u16,
        row: u16,
        kind: MouseKind,
    },
    /// The terminal's size, before each draw (and on a resize): the view model is laid out
    /// for it when anything changed since it last was.
    Resize(u16, u16),
    Drawn(Drawn),
    /// Data from the source (live runs and the demo).
    Source(LiveEvent),
    /// The program under `gaptop run` ended (the text says how).
    ProgramEnded(String),
    /// Before each draw: follow new data, see how a background export went.
    Tick,
    /// The loop started (or failed to start) the export asked for.
    ExportStarted(anyhow::Result<ExportJob>),
    /// What the loop did for an effect, for the status line.
    Said(String),
}

impl From<Action> for Msg {
    fn from(a: Action) -> Msg {
        Msg::Action(a)
    }
}

/// What `update` asks the terminal loop to do outside the model.
pub enum Effect {
    /// Write this window to a file on a thread of its own.
    Export(ExportRequest),
    /// Signal the program under `gaptop run`, harder the nth time (SIGINT, SIGTERM, SIGKILL).
    StopProgram(u32),
    /// Put this text on the terminal's clipboard (OSC 52, which works over ssh and in tmux).
    Copy(String),
    /// Open `$EDITOR` (or vi) at this line of this source file, the UI suspended meanwhile.
    Edit { path: String, line: u32 },
}

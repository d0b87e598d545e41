//! The UI model: state, the messages that change it, and the one `update` that applies them.
//!
//! Everything that changes the state arrives as a [`Msg`]: keys (as [`Action`]s), the mouse,
//! a resize, what the last draw laid out, data from the source, the periodic tick. `update`
//! applies it and returns the [`Effect`]s that reach outside the model (starting an export
//! thread, signalling the program), which the terminal loop (`term`) carries out. After each
//! message `refresh` recomputes the window's analysis (when it changed) and the view model, so
//! that the views (`crate::views`) only lay out and colour what is there.
//!
//! - `state`: [`App`] and the small types it holds; `cause`: why a gap happened, as the UI
//!   tells causes apart; `cache`: the window's analysis as the panes read it.
//! - `msg`: the messages and effects; `update`: applying a message; `act`: what each key does.
//! - `analysing`: analysing the window (on a thread of its own when it is big).
//! - `window`: the visible time window: zoom, pan, follow.
//! - `gaps`: the gap list and walking gaps.
//! - `filter`: the gap list's filters (a tree node's sites, typed text) over the whole window.
//! - `tree`: the call tree's rows; `tree_nav`: its selection, search, inversion and node filter.
//! - `fix`: what to fix, in the details pane; `replay`: a step replayed with a row's fix.
//! - `ranks`: the rank summary (`R`): its order, selection and keys.
//! - `viewmodel`: the view model the panes draw (the views, `crate::views`, render it).
//! - `layout`: where the panes go on a screen.
//!
//! This file only names the modules and re-exports what users outside `app` take from it;
//! each module imports what it uses from the module that defines it.

mod act;
pub mod analysing;
pub mod cache;
pub mod cause;
pub mod ending;
pub mod filter;
pub mod fix;
pub mod gaps;
pub mod keymap;
pub mod lane;
pub mod layout;
pub mod msg;
mod ranks;
mod replay;
pub mod state;
pub mod term;
pub mod tree;
pub mod tree_nav;
mod update;
pub mod viewmodel;
pub mod window;

pub use cache::Cache;
pub use cause::Cause;
pub use keymap::{Action, KeyMap};
pub use msg::{Drawn, Effect, MouseKind, Msg};
pub use state::{App, Focus, GapKey, GapSort, HitAreas, RankSort, SelGap, SourceState, MAX_GAPS};
pub use viewmodel::ViewModel;

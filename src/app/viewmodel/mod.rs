//! The view model: what every pane shows, computed in [`App::refresh`] from the store and the
//! window's analysis for the screen's layout. The views only lay it out and colour it: each
//! piece of text here says what it is (a [`Tone`], a [`Cause`], a kind of cell), and the views
//! choose the colours.
//!
//! - `model`: the view model's types, which the views read.
//! - `build`: refreshing and laying out the view model, the key bar and the status line.
//! - `timeline`, `rate`, `gap_list`, `details`: each pane's part of it; `replay`: the
//!   timeline's place while a step is replayed with a fix; `ranks`: the rank summary, in the
//!   gap list's and the tree's place while it is shown.
//!
//! [`App::refresh`]: crate::app::state::App::refresh
//! [`Cause`]: crate::app::cause::Cause

mod build;
mod details;
mod gap_list;
pub mod model;
mod ranks;
mod rate;
mod replay;
mod timeline;

pub use model::{
    Cell, CellKind, DetailsVm, FixRow, GapListVm, GapRow, LaneRow, OpTone, RankListVm, RankRowVm,
    RateVm, StatusVm, StepCell, TimelineVm, Tone, ViewModel,
};
pub use rate::spark_ticks;

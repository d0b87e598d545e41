//! Why a gap happened, as the UI tells causes apart: [`Cause`], which the timeline's cells, the
//! gap list's rows and the details colour and label by. A module of its own because the view
//! model's types hold it and the state's code reads it, and neither may import the other.

use gaptop_core::analysis::gaps::{Category, Gap, Reason};

/// Why a gap happened, as the UI tells causes apart (by colour and label): the reason where it
/// says more than HTA's category, else the category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    Sync,
    EventWait,
    Graph,
    HostWait,
    KernelWait,
    Other,
}

impl Cause {
    pub fn of(g: &Gap) -> Cause {
        match (g.reason, g.category) {
            (Reason::Sync, _) => Cause::Sync,
            (Reason::EventWait, _) => Cause::EventWait,
            (Reason::Graph, _) => Cause::Graph,
            (_, Category::HostWait) => Cause::HostWait,
            (_, Category::KernelWait) => Cause::KernelWait,
            (_, Category::Other) => Cause::Other,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Cause::Sync => "sync",
            Cause::EventWait => "event_wait",
            Cause::Graph => "graph",
            Cause::HostWait => "host_wait",
            Cause::KernelWait => "kernel_wait",
            Cause::Other => "other",
        }
    }
}

//! The one list of frames to hide, and why each is hidden: the framework's plumbing, which
//! every module call passes through (the call tree, the report's stacks and pprof skip it so
//! the user's modules show; their totals flow into the nearest shown ancestor), and the
//! profiler's own frames, never a launch site (what runs inside `record_function.__enter__` or
//! the profiler's `step` is the code that called it).

use gaptop_wire::stackframe::StackFrame;

/// Why a frame is hidden.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hidden {
    /// Framework plumbing: hidden in trees and stacks.
    Plumbing,
    /// The profiler's (torch.profiler's, record_function's, gaptop's): never a site.
    Profiler,
}

/// How an entry of [`HIDDEN`] matches a frame's name.
#[derive(Clone, Copy, Debug)]
enum Match {
    Prefix(&'static str),
    /// A prefix and an ending.
    Both(&'static str, &'static str),
    Contains(&'static str),
    Exact(&'static str),
}

use Hidden::{Plumbing, Profiler};
use Match::{Both, Contains, Exact, Prefix};

/// Every frame hidden, and why.
const HIDDEN: &[(Match, Hidden)] = &[
    (Prefix("torch/nn/modules/module.py("), Plumbing),
    (Prefix("transformers/utils/generic.py("), Plumbing),
    (Prefix("transformers/utils/output_capturing.py("), Plumbing),
    (Prefix("torch/utils/_contextlib.py("), Plumbing),
    (
        Both(
            "transformers/modeling_layers.py(",
            "GradientCheckpointingLayer.__call__",
        ),
        Plumbing,
    ),
    // How `python -m` and runpy-based launchers reach a script's code.
    (Prefix("<frozen runpy>("), Plumbing),
    (Exact("<built-in function exec>"), Plumbing),
    // torch.profiler's and record_function's (`__enter__`, `__exit__`, `step`).
    (Contains("torch/profiler/"), Profiler),
    (Contains("torch/autograd/profiler.py("), Profiler),
    (Contains("torch/autograd/profiler_util.py("), Profiler),
    // gaptop's own.
    (Prefix("gaptop/"), Profiler),
    (Contains("/gaptop/"), Profiler),
    (Contains("gaptop.py("), Profiler),
];

impl Match {
    fn matches(self, f: &str) -> bool {
        match self {
            Prefix(p) => f.starts_with(p),
            Both(p, e) => f.starts_with(p) && f.ends_with(e),
            Contains(c) => f.contains(c),
            Exact(x) => f == x,
        }
    }
}

/// Whether the list hides `frame` for `why`.
pub fn is_hidden(frame: &str, why: Hidden) -> bool {
    HIDDEN.iter().any(|&(m, w)| w == why && m.matches(frame))
}

/// Frames of framework plumbing that every module call passes through; the tree hides them so
/// the user's modules are what shows (their totals flow into the nearest shown ancestor).
pub fn is_plumbing(frame: &str) -> bool {
    is_hidden(frame, Plumbing)
}

/// A frame of the profiler itself, never a site: torch.profiler's and record_function's
/// (`torch/profiler/…`, `torch/autograd/profiler.py`: `__enter__`, `__exit__`, `step`), or
/// gaptop's own.
pub fn is_profiler_frame(frame: &str) -> bool {
    is_hidden(frame, Profiler)
}

/// The innermost Python frame (of a `.py` file) of a stack, outermost first, that the list does
/// not hide: one outside the profiler's frames first (what runs inside
/// `record_function.__enter__` is the code that called it), else any. Plumbing frames may be
/// the one where `plumbing` says so. `read` gives a frame's name and its typed frame.
pub fn innermost_python<'s, T>(
    frames: &'s [T],
    read: impl Fn(&'s T) -> (&'s str, StackFrame<'s>),
    plumbing: bool,
) -> Option<&'s T> {
    let outside = match frames.iter().position(|f| is_profiler_frame(read(f).0)) {
        Some(i) => &frames[..i],
        None => frames,
    };
    let py = |f: &&'s T| {
        let (s, frame) = read(f);
        frame.py_source().is_some() && !is_profiler_frame(s) && (plumbing || !is_plumbing(s))
    };
    outside
        .iter()
        .rev()
        .find(py)
        .or_else(|| frames.iter().rev().find(py))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plumbing_and_the_profiler_are_hidden_apart() {
        assert!(is_plumbing(
            "torch/nn/modules/module.py(1790): Module._call_impl"
        ));
        assert!(is_plumbing("<built-in function exec>"));
        assert!(is_plumbing(
            "transformers/modeling_layers.py(94): GradientCheckpointingLayer.__call__"
        ));
        assert!(!is_plumbing(
            "transformers/modeling_layers.py(94): Other.__call__"
        ));
        assert!(is_profiler_frame(
            "torch/profiler/profiler.py(700): profile.step"
        ));
        assert!(is_profiler_frame("/x/gaptop/hook.py(3): f"));
        assert!(!is_profiler_frame(
            "torch/nn/modules/module.py(1790): Module._call_impl"
        ));
        assert!(!is_plumbing("model.py(3): Net.forward") && !is_profiler_frame("model.py(3): f"));
    }
}

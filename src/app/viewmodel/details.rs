//! The details pane's view model: the selected tree node, else the selected gap (its cause,
//! launch, neighbours, stacks and what the CPU did), else the comparison with another capture
//! or what to fix (`app::fix`).

use super::model::{DetailsVm, Tone};
use crate::app::cache::Cache;
use crate::app::cause::Cause;
use crate::app::state::{App, Focus};
use crate::app::tree::tree_share;
use gaptop_core::analysis::advice;
use gaptop_core::analysis::gaps::Gap;
use gaptop_core::analysis::oncpu;
use gaptop_core::frames::{
    is_native_frame, is_plumbing, is_unnamed_native, pretty_frame, short_kernel,
};
use gaptop_core::units::{fmt_ns, fmt_short, Ns};

/// The details pane's comparison with another capture: what a step takes in each, then the
/// launching functions whose idle a step changed most.
fn compare_details(d: &crate::diff::DiffJson) -> DetailsVm {
    let tone = |delta: Ns| match delta {
        0 => Tone::Plain,
        n if n < 0 => Tone::Better,
        _ => Tone::Worse,
    };
    let mut lines = vec![(Tone::Bold, crate::diff::headline(d))];
    if let Some(note) = &d.note {
        lines.push((Tone::Dim, note.clone()));
    }
    lines.push((
        Tone::Dim,
        format!(
            "idle a {} by the code that launched, this capture → the other, biggest change first:",
            d.per
        ),
    ));
    lines.extend(
        d.sites
            .iter()
            .take(12)
            .map(|s| (tone(s.delta_per_step_ns), crate::diff::site_line(s))),
    );
    lines.push((
        Tone::Dim,
        "gaptop diff prints all of it, with the GPU ops whose time changed".into(),
    ));
    DetailsVm::Compare {
        title: format!(
            " Compared with {}: a {} at a time (w: what to fix, the gap) ",
            gaptop_core::frames::cut(&d.b.source, 60),
            d.per
        ),
        lines,
    }
}

impl App {
    /// The details pane: the selected tree node while the tree has the focus, else the
    /// selected gap, else what to fix first.
    pub(super) fn details_vm(&self) -> DetailsVm {
        if self.focus == Focus::Tree {
            if let (Some(n), Some(c)) = (self.selected_node(), self.cache.as_ref()) {
                return DetailsVm::Node(self.node_details(c, n));
            }
        }
        match (self.current, &self.compare) {
            (Some(g), _) if !self.show_fix && !self.show_compare => self.gap_details(&g),
            (_, Some(d)) if self.show_compare => compare_details(d),
            _ => self.what_to_fix(),
        }
    }

    /// The selected gap: times, cause, launch, neighbours and stacks.
    fn gap_details(&self, g: &Gap) -> DetailsVm {
        let lane = &self.store.lanes[g.lane];
        let prev = &self.store.lanes[g.prev_lane].op(g.prev);
        let next = &lane.op(g.next);
        let mut lines = Vec::new();
        let api = if g.api != 0 {
            format!(
                "launched by {}, latency {} (call start → op start)",
                self.store.names.get(g.api),
                fmt_ns(g.launch_latency)
            )
        } else {
            "launching call not in this source".into()
        };
        lines.push((Tone::Plain, api));
        let frames = self
            .store
            .frame_strings(self.store.numbered_stack(g.lane, g.next, g.stack));
        // Python (and API) frames on one line, native ones (`--native`) on the next; native
        // frames that could not be named say nothing and are left out.
        let (native, rest): (Vec<&String>, Vec<&String>) =
            frames.iter().partition(|f| is_native_frame(f));
        let launch: Vec<String> = rest
            .iter()
            .rev()
            .filter(|f| !is_plumbing(f))
            .map(|f| pretty_frame(f))
            .collect();
        let stack = if launch.is_empty() {
            // A launch from a thread without Python frames (a C++ thread: DDP's reducer, a
            // runtime's own thread): what is known is the thread and the call.
            let proc = &self.store.procs[lane.key.proc as usize];
            match proc.api_by_corr(next.corr) {
                Some(a) => format!(
                    "launch stack: none (thread {} called {}, no Python frames on it)",
                    a.tid,
                    self.store.names.get(a.name)
                ),
                None => "launch stack: not in this source".into(),
            }
        } else {
            format!("launch stack: {}", launch.join(" ‹ "))
        };
        lines.push((Tone::Stack, stack));
        // What the gaps charged to this code have in common, and the usual fix: from the whole
        // capture's diagnosis, so that zooming does not change it.
        if let Some(text) = self.verdict_line(g) {
            lines.push((Tone::Verdict, text));
        }
        let named: Vec<&str> = native
            .iter()
            .rev()
            .filter(|f| !is_unnamed_native(f))
            .map(|f| f.as_str())
            .collect();
        if !named.is_empty() {
            lines.push((Tone::Native, format!("native: {}", named.join(" ‹ "))));
        }
        // Shown after the stack and the verdict: on a short pane, those matter more.
        lines.push((
            Tone::Plain,
            format!(
                "before: {} ({})  after: {} ({})",
                short_kernel(self.store.names.get(prev.name)),
                fmt_short(prev.dur()),
                short_kernel(self.store.names.get(next.name)),
                fmt_short(next.dur())
            ),
        ));
        let cpu = self.store.frame_strings(g.cpu_stack);
        let proc = &self.store.procs[lane.key.proc as usize];
        let launch = proc.api_by_corr(next.corr);
        let sampled = self.store.cpu_sample_count() > 0;
        let cpu_text = if let Some(d) = oncpu::during(&self.store, g) {
            // The deepest named frame most of the gap's samples hold, and its callers.
            let shared: Vec<(&str, f64)> = d
                .shared
                .iter()
                .filter(|&&(f, _)| self.store.names.frame(f).unnamed_binary().is_none())
                .map(|&(f, share)| (self.store.names.get(f), share))
                .filter(|(f, _)| !is_plumbing(f))
                .collect();
            match gaptop_core::analysis::oncpu::headline(&shared) {
                Some(line) => format!(
                    "CPU during gap: {line} ({} samples), on CPU {:.0}% of the gap",
                    d.samples,
                    100.0 * d.on_cpu
                ),
                None => format!(
                    "CPU during gap: {} samples with no frame in half of them, on CPU {:.0}% \
                     of the gap",
                    d.samples,
                    100.0 * d.on_cpu
                ),
            }
        } else if sampled && cpu.is_empty() {
            "CPU during gap: no samples: the launching thread was off the CPU (waiting or \
             asleep)"
                .into()
        } else if cpu.is_empty() {
            // Without CPU spans (gaptop's recordings), the launching thread's own CUDA calls
            // still say how long it worked outside them before this launch.
            match launch.map(|a| (a, proc.call_before(next.corr, 4096))) {
                Some((a, Some(p))) => format!(
                    "CPU during gap: {} outside CUDA on the launching thread, after its {} ({})",
                    fmt_short(a.start - p.end),
                    self.store.names.get(p.name),
                    fmt_short(p.end - p.start)
                ),
                Some((_, None)) => {
                    "CPU during gap: no earlier CUDA call of the launching thread here".into()
                }
                None => "CPU during gap: not known from this source".to_string(),
            }
        } else {
            let v: Vec<String> = cpu.iter().rev().take(3).map(|f| pretty_frame(f)).collect();
            format!("CPU during gap: {}", v.join(" ‹ "))
        };
        lines.push((Tone::Cpu, cpu_text));
        DetailsVm::Gap {
            dur: format!("gap {} ", self.gap_whole_text(g)),
            at: format!(
                "at {} on {}  cause ",
                self.rel(g.whole(&self.store).0),
                self.store.lane_label(g.lane)
            ),
            cause_text: format!("{} ({})", g.category.as_str(), g.reason.as_str()),
            cause: Cause::of(g),
            lines,
        }
    }

    /// The selected call tree node: its frame in full (the row is cut on a narrow pane), what
    /// is charged to it, and its path to the root.
    fn node_details(&self, c: &Cache, n: usize) -> Vec<(Tone, String)> {
        let t = &c.tree;
        let node = &t.nodes[n];
        let frame = self.store.names.get(node.frame);
        let share = tree_share(t, n);
        let mut lines = vec![
            (Tone::Bold, pretty_frame(frame)),
            (
                Tone::Plain,
                format!(
                    "{} of gap time ({share:.1}%) in {}, {} of kernel time",
                    fmt_short(node.gap_ns),
                    gaptop_core::units::count(node.gaps, "gap"),
                    fmt_short(node.kernel_ns)
                ),
            ),
        ];
        if pretty_frame(frame) != frame {
            // The source location as the trace gives it, to open in an editor.
            lines.push((Tone::Dim, format!("at {frame}")));
        }
        let mut path: Vec<String> = t
            .path_to(node.parent)
            .into_iter()
            .rev()
            .map(|p| self.store.names.get(t.nodes[p].frame))
            .filter(|name| !is_plumbing(name))
            .map(pretty_frame)
            .collect();
        // Top-down, the node's ancestors are its callers, nearest first; bottom-up they are
        // what it calls, down to the kernel: written the other way round, so that ‹ always
        // reads "called by".
        let text = if path.is_empty() {
            "at the root of the tree".to_string()
        } else if self.inverted {
            path.reverse();
            format!("leads to: {} ‹ (this)", path.join(" ‹ "))
        } else {
            format!("called from: {}", path.join(" ‹ "))
        };
        lines.push((Tone::Stack, text));
        // A function that launches: what its gaps have in common, over all its call paths.
        let advice = self
            .diagnosis
            .as_ref()
            .map(|d| &d.advice[..])
            .unwrap_or(&[]);
        // (Its verdict and fix, without the function's own counts: those are over every call
        // path of the function, and the node has one count, the one above.)
        if let Some(a) = advice::frame_key(frame).and_then(|k| advice.iter().find(|a| a.key == k)) {
            let cause = a
                .cause_name
                .as_ref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default();
            lines.push((
                Tone::Verdict,
                format!(
                    "its function, every call path: {}{cause}: {}",
                    a.verdict.as_str(),
                    a.fix
                ),
            ));
        }
        lines.push((
            Tone::Dim,
            "Enter: walk this node's gaps with n/N · ←/→ collapse/expand · i inverts the tree"
                .into(),
        ));
        lines
    }
}

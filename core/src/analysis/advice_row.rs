//! A row of What to fix: the code the gaps are charged to, why, what a fix saves and the fix
//! (made by `advice`, read by the report, the UI and diff).

use serde::Serialize;

use crate::analysis::oncpu::JsonCpu;
use crate::analysis::replay;
use crate::analysis::threadstate::JsonState;
use crate::analysis::verdict::{Framework, GapFigure, Verdict};
use crate::model::records::Ns;

#[derive(Clone, Debug, Serialize)]
pub struct Advice {
    /// The code the gaps are charged to, as displayed (`fn  file.py:12`).
    pub site: String,
    /// What `site_key` gives for the launch stacks grouped here.
    #[serde(skip)]
    pub key: String,
    pub gaps: u64,
    pub gap_ns: Ns,
    /// Share of the gap time charged in the window (on the summary's basis): shares add up
    /// to at most 1.
    pub share: f64,
    /// The median gap: exact when `typical_exact`, else to within a quarter of a power of two.
    pub typical_gap_ns: Ns,
    pub typical_exact: bool,
    /// The gap length the verdict went by, which its text gives (`verdict::GapFigure`).
    pub verdict_gap_ns: Ns,
    #[serde(skip)]
    pub figure: GapFigure,
    /// Mean duration of the ops that waited.
    pub mean_op_ns: Ns,
    pub verdict: Verdict,
    pub framework: Framework,
    /// Its gaps occur in at least half of the steady steps (false without steps).
    pub recurring: bool,
    /// With steps: in how many steady steps the site had idle time, its median idle a step,
    /// and what the usual fix would save a step (see the module's docs); None without steps.
    pub steps_present: Option<u32>,
    pub per_step_ns: Option<Ns>,
    pub saving_ns: Option<Ns>,
    /// The saving a step summed from the site's gaps (what `saving_ns` was before the replay:
    /// an upper bound where something else would fill the freed time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gap_sum_ns: Option<Ns>,
    /// The replayed fix (`analysis::replay`): what it assumed, the GPU's busy share
    /// of the step after it, and how the saving falls on the steps it changes. None where the
    /// site was not replayed (then `saving_ns` is the summed gaps).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub replay: Option<replay::SiteEstimate>,
    /// Gaps outside recurring patterns (see the module's docs), and their time: the usual fix
    /// does not address them.
    pub one_offs: u64,
    pub one_off_ns: Ns,
    /// What the launching threads did during the gaps, where the program was sampled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu: Option<JsonCpu>,
    /// The launching threads' states through the gaps, most time first, where their context
    /// switches were recorded (`analysis::threadstate`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_state: Option<Vec<JsonState>>,
    /// Where the verdict is CPU work before the launches with no pattern's cause: the
    /// program's own code the launching thread ran during the gaps (`oncpu::user_code`), as
    /// displayed (`fn  file.py:12`), when it is not the site's function. The code to change;
    /// the site is the launch its work delays.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The cause a pattern of its evidence names (`analysis::patterns`: its id, its name in
    /// words and why its fix), when one matches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// One sentence: what happened, the cause where a pattern names it, and the fix.
    pub text: String,
    /// The fix alone, for narrow places: the cause's, else the verdict's usual one.
    pub fix: &'static str,
}

impl Advice {
    /// A row that no gap names, found by the replay alone (a sync's function, a slow GPU):
    /// recurring, with its replayed saving.
    #[allow(clippy::too_many_arguments)]
    pub fn replayed(
        site: String,
        key: String,
        verdict: Verdict,
        framework: Framework,
        saving_ns: Ns,
        replay: Option<replay::SiteEstimate>,
        cause: Option<(&'static str, String)>,
        text: String,
        fix: &'static str,
    ) -> Advice {
        Advice {
            site,
            key,
            gaps: 0,
            gap_ns: 0,
            share: 0.0,
            typical_gap_ns: 0,
            typical_exact: true,
            verdict_gap_ns: 0,
            figure: GapFigure {
                ns: 0,
                weighted: false,
                exact: true,
            },
            mean_op_ns: 0,
            verdict,
            framework,
            recurring: true,
            steps_present: None,
            per_step_ns: None,
            saving_ns: Some(saving_ns),
            gap_sum_ns: None,
            replay,
            one_offs: 0,
            one_off_ns: 0,
            cpu: None,
            thread_state: None,
            code: None,
            cause: cause.as_ref().map(|c| c.0),
            cause_name: cause.map(|c| c.1),
            reason: None,
            text,
            fix,
        }
    }
}

/// The code to change for a site whose launches wait on CPU work that no pattern names: the
/// program's own function the launching thread ran during the gaps (`oncpu::user_code`),
/// unless it is the site's own function or the CPU was inside the site's call.
pub fn code_to_fix(
    site: &str,
    verdict: Verdict,
    caused: bool,
    cpu: Option<&JsonCpu>,
) -> Option<String> {
    if verdict != Verdict::HostWork || caused {
        return None;
    }
    let cpu = cpu?;
    let frame = crate::analysis::oncpu::user_code(cpu)?;
    fn function(f: &str) -> Option<&str> {
        crate::frames::python_parts(f).map(|p| p.2)
    }
    let own = site.split_once("  ").map_or(site, |x| x.0);
    // The CPU inside the site's own call (its launch path, under the program's code that
    // called it) is the site's work, not another function's.
    let inside = cpu
        .frames
        .iter()
        .take_while(|f| f.frame != frame)
        .any(|f| function(&f.frame) == Some(own));
    (!inside && function(frame) != Some(own)).then(|| crate::frames::pretty_frame(frame))
}

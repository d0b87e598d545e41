//! `gaptop diff A B --fail-if-slower 5%`: the regression gate. It judges whether B's steps
//! take longer than A's by more than the threshold, beyond the steps' own noise, and says how
//! sure it is; or that the two captures cannot be compared.
//!
//! - **The test**: a one-sided Mann–Whitney U test (normal approximation with the tie
//!   correction and a continuity correction) of B's steady step times against A's scaled by
//!   `1 + threshold`: `slower` where B's steps are longer than that at p < [`ALPHA`]. The same
//!   test the other way (`B × (1 + threshold)` against A) says `faster`. Otherwise `pass`. A
//!   rank test compares the whole distributions and one slow outlier step moves it little.
//! - **The confidence**: the median ratio B/A with a 95% percentile bootstrap interval
//!   (resampling each side's steps, a fixed seed, so that the same captures always give the
//!   same interval).
//! - **Not comparable** when a side has no steps or fewer than [`MIN_STEPS`] steady ones, when
//!   the steps were found differently (profiler steps in one, a function's calls in the other,
//!   or two different functions), or when the two are not the same program: less than
//!   [`MIN_OVERLAP`] of either side's GPU time a step is in ops (by name) the other side ran.
//! - **The sites**: those whose idle a step grew by at least 1% of A's step, biggest first.

use serde::Serialize;

use gaptop_core::model::records::Ns;

/// The significance level of each one-sided test.
pub const ALPHA: f64 = 0.05;
/// Fewest steady steps a side needs.
pub const MIN_STEPS: usize = 5;
/// Least share of each side's GPU time a step in ops the other also ran.
pub const MIN_OVERLAP: f64 = 0.5;
/// Bootstrap resamples for the interval.
const RESAMPLES: usize = 2000;

/// What the gate knows of one capture.
pub struct Input {
    /// The steady steps' wall times; None without steps.
    pub steps: Option<Vec<Ns>>,
    /// How the steps were found: their source and name (`function train_step`).
    pub step_source: Option<String>,
    /// GPU time a step (or a second) by op name.
    pub ops: Vec<(String, f64)>,
}

/// A launching site's idle a step in A and B (in the verdict: one whose idle grew).
#[derive(Serialize, Clone, Debug)]
pub struct Grew {
    pub site: String,
    pub a_per_step_ns: Ns,
    pub b_per_step_ns: Ns,
    pub delta_per_step_ns: Ns,
}

/// The gate's verdict, in the diff's JSON as `gate`.
#[derive(Serialize, Clone, Debug)]
pub struct GateJson {
    /// `pass`, `slower`, `faster` or `not_comparable`.
    pub verdict: &'static str,
    /// The threshold, as a fraction (0.05 for 5%).
    pub threshold: f64,
    pub alpha: f64,
    /// The median steady step of B over A's (null where not comparable for want of steps).
    pub ratio: Option<f64>,
    /// The ratio's 95% bootstrap interval.
    pub ratio_ci95: Option<[f64; 2]>,
    /// One-sided p-value of "B's steps are longer than A's × (1 + threshold)".
    pub p_value: Option<f64>,
    /// One-sided p-value of "B's steps × (1 + threshold) are shorter than A's".
    pub p_faster: Option<f64>,
    pub a_steps: usize,
    pub b_steps: usize,
    /// The least share of either side's GPU time a step in ops the other ran too (1: the
    /// same ops; 0: none in common).
    pub overlap: f64,
    /// Why the verdict is what it is, in words.
    pub reasons: Vec<String>,
    /// The sites whose idle a step grew, biggest growth first.
    pub grew: Vec<Grew>,
}

impl GateJson {
    /// The exit status `gaptop diff --fail-if-slower` ends with.
    pub fn exit_code(&self) -> u8 {
        match self.verdict {
            "slower" => 3,
            "not_comparable" => 4,
            _ => 0,
        }
    }
}

/// Parses `5%` (a percentage; the sign is required, so that `0.05` is not read as 0.05%).
pub fn parse_threshold(s: &str) -> Result<f64, String> {
    let n = s
        .trim()
        .strip_suffix('%')
        .ok_or_else(|| format!("{s:?}: a percentage such as 5%"))?;
    let v: f64 = n
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: a percentage such as 5%"))?;
    if !(0.0..=1000.0).contains(&v) {
        return Err(format!("{s:?}: between 0% and 1000%"));
    }
    Ok(v / 100.0)
}

/// The share of `x`'s GPU time in ops `y` ran too.
fn shared(x: &[(String, f64)], y: &[(String, f64)]) -> f64 {
    let total: f64 = x.iter().map(|o| o.1).sum();
    if total <= 0.0 {
        return 0.0;
    }
    let names: std::collections::HashSet<&str> = y.iter().map(|o| o.0.as_str()).collect();
    x.iter()
        .filter(|o| names.contains(o.0.as_str()))
        .map(|o| o.1)
        .sum::<f64>()
        / total
}

/// Judges B against A with `threshold` (a fraction); `sites` are every launching site's idle
/// a step in A and B, as the diff has them.
pub fn judge(a: &Input, b: &Input, sites: &[Grew], threshold: f64) -> GateJson {
    let overlap = shared(&a.ops, &b.ops).min(shared(&b.ops, &a.ops));
    let count = |i: &Input| i.steps.as_ref().map_or(0, Vec::len);
    let mut g = GateJson {
        verdict: "not_comparable",
        threshold,
        alpha: ALPHA,
        ratio: None,
        ratio_ci95: None,
        p_value: None,
        p_faster: None,
        a_steps: count(a),
        b_steps: count(b),
        overlap: (overlap * 1000.0).round() / 1000.0,
        reasons: Vec::new(),
        grew: Vec::new(),
    };
    for (n, i) in [("A", a), ("B", b)] {
        match &i.steps {
            None => g.reasons.push(format!("{n} has no steps")),
            Some(s) if s.len() < MIN_STEPS => g.reasons.push(format!(
                "{n} has {} steady steps, fewer than {MIN_STEPS}",
                s.len()
            )),
            _ => {}
        }
    }
    if let (Some(x), Some(y)) = (&a.step_source, &b.step_source) {
        if x != y {
            g.reasons.push(format!(
                "the steps were found differently: {x} in A, {y} in B"
            ));
        }
    }
    if overlap < MIN_OVERLAP {
        g.reasons.push(format!(
            "not the same program: only {:.0}% of a side's GPU time is in ops the other ran",
            overlap * 100.0
        ));
    }
    let (Some(xa), Some(xb)) = (&a.steps, &b.steps) else {
        return g;
    };
    let (ma, mb) = (median_f(xa), median_f(xb));
    if ma > 0.0 {
        g.ratio = Some(round4(mb / ma));
        g.ratio_ci95 = bootstrap(xa, xb).map(|[l, h]| [round4(l), round4(h)]);
    }
    let fa: Vec<f64> = xa.iter().map(|&v| v as f64).collect();
    let fb: Vec<f64> = xb.iter().map(|&v| v as f64).collect();
    let scale = |v: &[f64]| -> Vec<f64> { v.iter().map(|x| x * (1.0 + threshold)).collect() };
    let p_slower = mann_whitney_greater(&fb, &scale(&fa));
    let p_faster = mann_whitney_greater(&fa, &scale(&fb));
    g.p_value = Some(round_p(p_slower));
    g.p_faster = Some(round_p(p_faster));
    let floor = (ma * 0.01) as Ns;
    g.grew = sites
        .iter()
        .filter(|s| s.delta_per_step_ns > 0 && s.delta_per_step_ns >= floor)
        .cloned()
        .collect();
    g.grew
        .sort_by_key(|s| std::cmp::Reverse(s.delta_per_step_ns));
    g.grew.truncate(5);
    if !g.reasons.is_empty() {
        return g;
    }
    let pct = threshold * 100.0;
    let (verdict, why) = if p_slower < ALPHA {
        (
            "slower",
            format!(
                "B's steps are longer than A's by more than {pct}% (p {})",
                fmt_p(p_slower)
            ),
        )
    } else if p_faster < ALPHA {
        (
            "faster",
            format!(
                "B's steps are shorter than A's by more than {pct}% (p {})",
                fmt_p(p_faster)
            ),
        )
    } else {
        (
            "pass",
            format!(
                "no sign that B's steps are longer than A's by more than {pct}% (p {})",
                fmt_p(p_slower)
            ),
        )
    };
    g.verdict = verdict;
    g.reasons.push(why);
    g
}

/// The verdict in a line: `gate: slower (exit 3): the median step ×1.102 (95% CI
/// 1.091–1.113), threshold 5%, p = 1.2e-8, 40 and 40 steady steps`.
pub fn line(g: &GateJson) -> String {
    let head = format!("gate: {} (exit {})", g.verdict, g.exit_code());
    if g.verdict == "not_comparable" {
        return format!("{head}: {}", g.reasons.join("; "));
    }
    let ci = g
        .ratio_ci95
        .map(|[l, h]| format!(" (95% CI {l:.3}–{h:.3})"))
        .unwrap_or_default();
    let p = match g.verdict {
        "faster" => g.p_faster,
        _ => g.p_value,
    };
    format!(
        "{head}: the median step ×{:.3}{ci}, threshold {}%, p {}, {} and {} steady steps",
        g.ratio.unwrap_or(f64::NAN),
        g.threshold * 100.0,
        fmt_p(p.unwrap_or(1.0)),
        g.a_steps,
        g.b_steps
    )
}

/// The text form's section: the line, why, and the sites whose idle grew.
pub fn text(g: &GateJson) -> String {
    use std::fmt::Write;
    let mut o = format!("\nRegression gate\n  {}\n", line(g));
    if g.verdict != "not_comparable" {
        for r in &g.reasons {
            let _ = writeln!(o, "  {r}");
        }
    }
    if !g.grew.is_empty() {
        let _ = writeln!(o, "  idle a step grew at:");
        for s in &g.grew {
            let _ = writeln!(
                o,
                "  {:>10}  {}",
                format!("+{}", gaptop_core::units::fmt_short(s.delta_per_step_ns)),
                s.site
            );
        }
    }
    o
}

/// A p-value to read: `0.31`, `0.0012`, `< 1e-6` (below that the normal approximation's
/// tail is only roughly right).
fn fmt_p(p: f64) -> String {
    match p {
        p if p < 1e-6 => "< 1e-6".into(),
        p if p < 0.01 => format!("= {p:.1e}"),
        p => format!("= {p:.2}"),
    }
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// A p-value to 3 significant digits.
fn round_p(p: f64) -> f64 {
    if p <= 0.0 {
        return 0.0;
    }
    format!("{p:.3e}").parse().unwrap_or(p)
}

fn median_f(v: &[Ns]) -> f64 {
    let mut s = v.to_vec();
    s.sort_unstable();
    let n = s.len();
    if n == 0 {
        return 0.0;
    }
    if n % 2 == 1 {
        s[n / 2] as f64
    } else {
        (s[n / 2 - 1] as f64 + s[n / 2] as f64) / 2.0
    }
}

/// One-sided Mann–Whitney U: the p-value of "values of `y` tend to be greater than those of
/// `x`", by the normal approximation with the tie and continuity corrections. 1 where every
/// value is the same (nothing to tell them apart).
pub fn mann_whitney_greater(y: &[f64], x: &[f64]) -> f64 {
    let (ny, nx) = (y.len() as f64, x.len() as f64);
    if y.is_empty() || x.is_empty() {
        return 1.0;
    }
    // Every value, tagged with its side (true: y), ranked with ties given their mean rank.
    let mut all: Vec<(f64, bool)> = y
        .iter()
        .map(|&v| (v, true))
        .chain(x.iter().map(|&v| (v, false)))
        .collect();
    all.sort_by(|p, q| p.0.total_cmp(&q.0));
    let n = all.len();
    let (mut rank_y, mut ties) = (0.0, 0.0);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        let t = (j - i + 1) as f64;
        let mean_rank = (i + j) as f64 / 2.0 + 1.0;
        rank_y += all[i..=j].iter().filter(|v| v.1).count() as f64 * mean_rank;
        ties += t * t * t - t;
        i = j + 1;
    }
    let u = rank_y - ny * (ny + 1.0) / 2.0;
    let nn = n as f64;
    let var = nx * ny / 12.0 * ((nn + 1.0) - ties / (nn * (nn - 1.0)));
    if var <= 0.0 {
        return 1.0;
    }
    let z = (u - nx * ny / 2.0 - 0.5) / var.sqrt();
    upper_tail(z)
}

/// P(Z > z) for a standard normal Z.
fn upper_tail(z: f64) -> f64 {
    0.5 * erfc(z / std::f64::consts::SQRT_2)
}

/// The complementary error function, by Abramowitz and Stegun's 7.1.26 (absolute error under
/// 1.5e-7), with erfc(-x) = 2 - erfc(x).
fn erfc(x: f64) -> f64 {
    let ax = x.abs();
    let t = 1.0 / (1.0 + 0.3275911 * ax);
    let poly = t
        * (0.254829592
            + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
    let r = poly * (-ax * ax).exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// The 95% percentile bootstrap interval of median(B) / median(A): each side resampled with
/// replacement [`RESAMPLES`] times from a fixed seed.
fn bootstrap(a: &[Ns], b: &[Ns]) -> Option<[f64; 2]> {
    // SplitMix64: small, and the same numbers on every machine.
    let mut state: u64 = 0x6761_7074_6f70_2121;
    let mut next = move |n: usize| -> usize {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (((z >> 11) as u128 * n as u128) >> 53) as usize
    };
    let mut ratios = Vec::with_capacity(RESAMPLES);
    let mut buf = Vec::new();
    for _ in 0..RESAMPLES {
        let mut med = |v: &[Ns]| {
            buf.clear();
            buf.extend((0..v.len()).map(|_| v[next(v.len())]));
            median_f(&buf)
        };
        let (ma, mb) = (med(a), med(b));
        if ma > 0.0 {
            ratios.push(mb / ma);
        }
    }
    if ratios.is_empty() {
        return None;
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((q * ratios.len() as f64) as usize).min(ratios.len() - 1)];
    Some([at(0.025), at(0.975)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_are_percentages() {
        assert_eq!(parse_threshold("5%"), Ok(0.05));
        assert_eq!(parse_threshold("12.5 %"), Ok(0.125));
        assert!(parse_threshold("0.05").is_err());
        assert!(parse_threshold("-1%").is_err());
    }

    #[test]
    fn mann_whitney_matches_the_textbook_figures() {
        // Every y above every x, 5 against 5: U = 25, mean 12.5, sd sqrt(25 * 11 / 12);
        // z = (25 - 12.5 - 0.5) / 4.787 = 2.507, p = 0.0061.
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        let y = [6.0, 7.0, 8.0, 9.0, 10.0];
        let p = mann_whitney_greater(&y, &x);
        assert!((p - 0.0061).abs() < 2e-4, "{p}");
        assert!(mann_whitney_greater(&x, &y) > 0.99);
        // All the same: nothing to tell.
        assert_eq!(mann_whitney_greater(&[1.0; 6], &[1.0; 6]), 1.0);
        assert!((upper_tail(0.0) - 0.5).abs() < 1e-7);
        assert!((upper_tail(1.96) - 0.025).abs() < 1e-4);
        assert!((upper_tail(-1.96) - 0.975).abs() < 1e-4);
    }

    #[test]
    fn the_bootstrap_interval_holds_the_ratio_and_repeats() {
        let a: Vec<Ns> = (0..30).map(|i| 1000 + (i * 7) % 20).collect();
        let b: Vec<Ns> = a.iter().map(|v| v * 11 / 10).collect();
        let ci = bootstrap(&a, &b).unwrap();
        assert!(ci[0] <= 1.1 && 1.1 <= ci[1] + 1e-3, "{ci:?}");
        assert_eq!(Some(ci), bootstrap(&a, &b));
    }
}

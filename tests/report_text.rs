//! The text report as a reader meets it (issue 31): a three-line headline that says what to fix
//! first, why, and what else; each fix said once; durations in three significant figures; one
//! denominator for shares; under 60 lines unless `--full`; and no call stack claimed where a
//! Kineto trace names only CPU ops.

mod support;

use std::path::{Path, PathBuf};

use gaptop_core::units::fmt_short;
use serde_json::Value;

use support::{asset, report_out};

fn kineto(name: &str) -> PathBuf {
    support::root().join("tests/data/kineto").join(name)
}

fn nsys(name: &str) -> PathBuf {
    support::root().join("tests/data/nsys").join(name)
}

fn text(p: &Path, extra: &[&str]) -> String {
    String::from_utf8(report_out(p, "text", extra)).unwrap()
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&report_out(p, "json", &[])).unwrap()
}

/// Sources of every kind: recordings, Kineto traces (with and without Python stacks, one rank
/// and two), Nsight Systems exports.
fn sources() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = [
        "llama_decode.rec",
        "gpt2.rec",
        "ddp2.rec",
        "planted.rec",
        "loader_train.rec",
    ]
    .iter()
    .map(|n| asset(n))
    .collect();
    v.extend(
        [
            "shape_planning.json.gz",
            "hta-two-ranks",
            "hta-inference_rank_1.json.gz",
            "kineto-2021-resnet50.json.gz",
        ]
        .iter()
        .map(|n| kineto(n)),
    );
    v.push(nsys("cloverleaf.sqlite.gz"));
    v
}

/// The headline's three lines, checked against the JSON the report is made of: line 1 names
/// the first site, its verdict and cause, what a fix saves of a step (the step's median) and
/// the fix; line 2 why; line 3 what else.
fn check_headline(p: &Path, site: &str, cause: &str) {
    let t = text(p, &[]);
    let j = json(p);
    let lines: Vec<&str> = t.lines().collect();
    let a = &j["advice"][0];
    let saving = fmt_short(a["saving_ns"].as_i64().unwrap());
    // A replayed saving is a mean over the replayed steps: of their mean step.
    let step_ns = if a["whatif"].is_string() {
        j["replay"]["measured_mean_ns"].as_i64().unwrap()
    } else {
        j["steps"]["median_ns"].as_i64().unwrap()
    };
    let median = fmt_short(step_ns);
    let start = format!("Fix first: {site} — ");
    assert!(lines[0].starts_with(&start), "{start:?} in\n{t}");
    let saves = format!("saves ~{saving} of a {median} step (");
    assert!(lines[0].contains(&saves), "{saves:?} in\n{t}");
    assert_eq!(a["cause_name"], cause, "{a}");
    assert!(lines[0].contains(cause), "{cause} in\n{t}");
    let fix = a["fix"].as_str().unwrap();
    assert!(lines[0].ends_with(&format!(": {fix}")), "{fix} in\n{t}");
    let pct = 100.0 * a["saving_ns"].as_f64().unwrap() / step_ns as f64;
    assert!(
        lines[0].contains(&format!("step ({pct:.0}%")),
        "{pct} in\n{t}"
    );
    let why = format!("Why: {}.", a["reason"].as_str().unwrap());
    assert!(lines[1].starts_with(&why), "{why:?} in\n{t}");
    assert!(lines[2].starts_with("Then: "), "{t}");
    // The next site by saving a step, and the capture in a figure or two.
    let next = j["advice"][1]["site"].as_str().unwrap();
    let next = next.split("  ").next().unwrap();
    assert!(lines[2].contains(next), "{next} in\n{t}");
    let steps_median = fmt_short(j["steps"]["median_ns"].as_i64().unwrap());
    assert!(lines[2].contains(&format!("median {steps_median}")), "{t}");
    assert_eq!(lines[3], "", "three lines, then the rest:\n{t}");
    assert!(lines[4].starts_with("gaptop report: "), "{t}");
}

#[test]
fn the_headline_says_what_to_fix_first_on_llama_decode() {
    check_headline(
        &asset("llama_decode.rec"),
        "sdpa_attention_forward (sdpa_attention.py:158)",
        "per-shape planning",
    );
    let t = text(&asset("llama_decode.rec"), &[]);
    // The CPU during its gaps says why in the samples' words.
    assert!(
        t.lines().nth(1).unwrap().contains("nvrtcCompileProgram"),
        "{t}"
    );
}

#[test]
fn the_headline_says_what_to_fix_first_on_kineto_traces() {
    check_headline(
        &kineto("shape_planning.json.gz"),
        "attend (shape_planning.py:24)",
        "per-shape planning",
    );
    // A trace without Python stacks: its site is the backward node.
    check_headline(
        &kineto("hta-two-ranks"),
        "NativeLayerNormBackward0",
        "backward of native_layer_norm",
    );
}

/// Without steps, the headline gives the site's gap time and its share; with no gaps, says
/// there is nothing to fix; either way three lines.
#[test]
fn the_headline_has_three_lines_without_steps() {
    let p = kineto("hta-inference_rank_1.json.gz");
    let t = text(&p, &[]);
    let j = json(&p);
    let lines: Vec<&str> = t.lines().collect();
    assert!(j["steps"].is_null());
    let a = &j["advice"][0];
    let share = 100.0 * a["gap_ns"].as_f64().unwrap() / j["charged_ns"].as_f64().unwrap();
    let want = format!(
        "{} of idle, {share:.0}% of device idle",
        fmt_short(a["gap_ns"].as_i64().unwrap())
    );
    assert!(lines[0].starts_with("Fix first: "), "{t}");
    assert!(lines[0].contains(&want), "{want} in\n{t}");
    assert!(lines[1].starts_with("Why: ") && lines[2].starts_with("Then: "));
    assert!(lines[2].contains("no steps found"), "{t}");
    assert_eq!(lines[3], "");
}

fn count_lines(t: &str) -> usize {
    t.lines().count()
}

#[test]
fn the_report_stays_under_60_lines_and_full_gives_the_rest() {
    for p in sources() {
        let short = text(&p, &[]);
        let full = text(&p, &["--full"]);
        let n = count_lines(&short);
        assert!(n < 60, "{}: {n} lines\n{short}", p.display());
        assert!(
            count_lines(&full) > n,
            "{}: --full is no longer",
            p.display()
        );
        let last = short.lines().last().unwrap();
        assert!(
            last.starts_with("More with --full: percentiles, "),
            "{short}"
        );
        for section in ["Percentiles", "Top gaps"] {
            assert!(
                !short.contains(&format!("\n{section}")),
                "{section} in\n{short}"
            );
            assert!(
                full.contains(&format!("\n{section}")),
                "{section} not in\n{full}"
            );
        }
        // The headline and what to fix are the same in both.
        let head = |t: &str| t.split("\n\n").next().unwrap().to_string();
        assert_eq!(head(&short), head(&full), "{}", p.display());
    }
    // What the issue saw: 136 lines of the Llama decode before.
    assert!(count_lines(&text(&asset("llama_decode.rec"), &["--full"])) > 100);
}

/// Each fix the advice gives is written once, in full, in the report; rows that share it refer
/// to the row (or the headline) that gave it.
#[test]
fn each_fix_sentence_appears_once() {
    let mut shared = 0;
    for p in sources() {
        let j = json(&p);
        for full in [false, true] {
            let t = text(&p, if full { &["--full"] } else { &[] });
            let mut fixes: Vec<&str> = Vec::new();
            // The rows the text shows (the JSON has more).
            for a in j["advice"].as_array().unwrap().iter().take(5) {
                if a["text"].as_str().unwrap().contains(" Fix: ") {
                    fixes.push(a["fix"].as_str().unwrap());
                }
            }
            let n = fixes.len();
            fixes.sort();
            fixes.dedup();
            shared += n - fixes.len();
            for f in fixes {
                assert_eq!(t.matches(f).count(), 1, "{}: {f} in\n{t}", p.display());
            }
            // A cause's reason, too.
            for a in j["advice"].as_array().unwrap().iter().take(5) {
                if let Some(r) = a["reason"].as_str() {
                    // A reason that begins another's (`backward launches mirror the forward`,
                    // and the same with its forward op) is in that one too.
                    let within = j["advice"].as_array().unwrap().iter().take(5).filter(|b| {
                        b["reason"]
                            .as_str()
                            .is_some_and(|x| x != r && x.contains(r))
                    });
                    let n = 1 + within.count();
                    assert!(t.matches(r).count() <= n, "{}: {r} in\n{t}", p.display());
                    assert!(t.matches(r).count() >= 1, "{}: {r} in\n{t}", p.display());
                }
            }
        }
    }
    assert!(shared > 0, "no two sites shared a fix: nothing was checked");
    let t = text(&asset("llama_decode.rec"), &[]);
    assert!(t.contains("Fix: as in the headline."), "{t}");
    assert!(t.contains("Fix: as in #2."), "{t}");
}

/// The durations of a text: each number written with a time unit right after it, not part of
/// a longer word (`sm80`, `libcuda.so.580`, `128x32_8x5`).
fn durations(t: &str) -> Vec<String> {
    const UNITS: [&str; 7] = ["min", "ns", "µs", "us", "ms", "s", "h"];
    let mut out = Vec::new();
    let b = t.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let word = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c >= 0x80;
        if b[i].is_ascii_digit() && (i == 0 || !word(b[i - 1])) {
            let start = i;
            while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
                i += 1;
            }
            let rest = &t[i..];
            if let Some(u) = UNITS.iter().find(|u| rest.starts_with(**u)) {
                let after = rest[u.len()..].bytes().next();
                if !after.is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                    out.push(t[start..i + u.len()].to_string());
                }
            }
        } else {
            i += 1;
        }
    }
    out
}

fn significant(d: &str) -> usize {
    let digits: String = d.chars().filter(char::is_ascii_digit).collect();
    digits.trim_start_matches('0').len()
}

#[test]
fn durations_have_three_significant_figures_at_most() {
    assert_eq!(
        durations("x 446.882µs, 4.90ms at 12.3s; sm80 lib.so.580 2x4_h 5 steps 3.000s"),
        ["446.882µs", "4.90ms", "12.3s", "3.000s"]
    );
    assert_eq!(significant("446.882µs"), 6);
    assert_eq!(significant("0.50ms"), 2);
    let mut seen = 0;
    for p in sources() {
        for extra in [&[][..], &["--full"][..]] {
            let t = text(&p, extra);
            for d in durations(&t) {
                seen += 1;
                assert!(significant(&d) <= 3, "{}: {d} in\n{t}", p.display());
            }
        }
    }
    assert!(seen > 500, "only {seen} durations seen");
}

/// The step median is the one the UI shows: the same steps, in the same figures.
#[test]
fn the_step_median_reads_as_the_ui_shows_it() {
    use gaptop_core::analysis::{analyse, Options};
    use gaptop_core::model::window::Window;
    for p in [asset("llama_decode.rec"), kineto("shape_planning.json.gz")] {
        let store = gaptop_core::sources::load_path(&p, usize::MAX).unwrap();
        let o = Options {
            top: 10,
            ..Options::default()
        };
        let d = analyse(&store, Window::all(), &o).diagnosis;
        let ui = fmt_short(d.steps.as_ref().unwrap().median_ns());
        let t = text(&p, &[]);
        assert!(t.contains(&format!(", median {ui} (p90 ")), "{ui} in\n{t}");
        assert!(t.lines().nth(2).unwrap().contains(&format!("median {ui}")));
    }
}

/// Shares of gap time are of one figure, the gap time charged to launches, which the titles
/// give: the same stack's time is the same share under What to fix and Top stacks (on HTA's
/// two ranks, 123 ms was 9.3% under one and 1.5% under the other).
#[test]
fn shares_have_one_denominator() {
    let p = kineto("hta-two-ranks");
    let j = json(&p);
    let t = text(&p, &[]);
    let charged = j["charged_ns"].as_i64().unwrap();
    assert!(charged > 0 && charged <= j["device_idle_ns"].as_i64().unwrap());
    let title = format!(
        "(% of {} device idle charged to launches)",
        fmt_short(charged)
    );
    assert_eq!(t.matches(&title).count(), 2, "{title} in\n{t}");
    // A site of one stack: its advice and its stack give one figure.
    let stacks = j["top_stacks"].as_array().unwrap();
    let (a, s) = j["advice"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["gaps"].as_u64().unwrap_or(0) > 0)
        .find_map(|a| {
            let site = a["site"].as_str().unwrap();
            let mut of = stacks
                .iter()
                .filter(|s| s["frames"].as_array().unwrap().iter().any(|f| f == site));
            match (of.next(), of.next()) {
                (Some(s), None) if s["gap_ns"] == a["gap_ns"] => Some((a, s)),
                _ => None,
            }
        })
        .unwrap_or_else(|| {
            // No site of one stack among the top ones: the first site and stack stand in.
            (&j["advice"][0], &stacks[0])
        });
    if a["gap_ns"] != s["gap_ns"] {
        return;
    }
    assert_eq!(a["gap_ns"], s["gap_ns"], "one stack, one site");
    let share = format!(
        "{} {:5.1}%",
        fmt_short(a["gap_ns"].as_i64().unwrap()),
        100.0 * a["gap_ns"].as_f64().unwrap() / charged as f64
    );
    assert_eq!(t.matches(&share).count(), 2, "{share} in\n{t}");
}

/// A Kineto trace profiled without `with_stack` names CPU ops, not a call stack: the report
/// says what it knows; one with Python stacks says so.
#[test]
fn no_call_stack_is_claimed_where_only_op_names_are_known() {
    let p = kineto("hta-two-ranks");
    let j = json(&p);
    assert_eq!(j["kernels_with_python"], 0);
    assert_eq!(j["kernels_with_native"], 0);
    assert_eq!(j["kernels_with_stack"], j["kernels"]);
    let t = text(&p, &["--full"]);
    assert!(
        !t.contains("call stack,") && !t.contains("with a call stack"),
        "{t}"
    );
    assert!(
        t.contains(
            "launch calls found for 2258 of 2258 kernels: 2258 with CPU op or range names only, no Python stack\n"
        ),
        "{t}"
    );
    let p = kineto("shape_planning.json.gz");
    let j = json(&p);
    assert_eq!(j["kernels_with_python"], j["kernels"]);
    assert!(text(&p, &[]).contains(": 1749 with a Python call stack\n"));
    // No stacks at all, and native frames only.
    let t = text(&kineto("hta-inference_rank_1.json.gz"), &[]);
    assert!(
        t.contains("4 of 4 kernels: none with a call stack or CPU op"),
        "{t}"
    );
    let p = nsys("saxpy_mpi_cuda.sqlite.gz");
    assert_eq!(json(&p)["kernels_with_native"], 5);
    let t = text(&p, &[]);
    assert!(
        t.contains("5 of 5 kernels: 5 with native frames only\n"),
        "{t}"
    );
    // Python frames above native ones count as Python.
    let j = json(&asset("gpt2_native.rec"));
    assert_eq!(j["kernels_with_python"], j["kernels_with_stack"]);
    assert_eq!(j["kernels_with_native"], 0);
}

/// `--full` prints every top gap it promises (`--top`'s count); a Kineto trace without Python
/// stacks says how to record them; "Then:" names only sites with something to save.
#[test]
fn full_prints_its_top_gaps_and_a_stackless_trace_says_with_stack() {
    let p = asset("gpt2.rec");
    let t = text(&p, &["--full", "--top", "30"]);
    let top = t.split("Top gaps").nth(1).expect("a Top gaps section");
    let rows = top
        .lines()
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| !l.starts_with("      "))
        .count();
    assert_eq!(rows, 30, "{top}");
    let short = text(&p, &["--top", "30"]);
    assert!(
        short.contains("More with --full: percentiles, 30 top gaps"),
        "{short}"
    );
    let k = text(&kineto("hta-inference_rank_1.json.gz"), &[]);
    assert!(k.contains("with_stack=True"), "{k}");
    let then = k.lines().find(|l| l.starts_with("Then:")).unwrap();
    assert!(!then.contains("(GPU busy)"), "{then}");
}

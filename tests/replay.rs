//! The replay on captures no one here wrote: the Llama decode pair of ../shared/fixtures (its
//! truth in its README), HTA's and Kineto's public test traces and the bench workloads'
//! recordings. Unchanged, the replay gives back the measured steps (within 5%, here to
//! rounding); on the Llama decode it puts SDPA's per-shape planning first, with the saving the
//! fixture's README works out.

mod support;

use serde_json::Value;

/// The captures with steps, and their replay.
fn captures() -> Vec<std::path::PathBuf> {
    let mut v: Vec<std::path::PathBuf> = [
        "ddp2.rec",
        "decode_planted.rec",
        "gpt2.rec",
        "launchbound.rec",
        "llama_decode.rec",
        "loader_train.rec",
        "planted.rec",
        "shape_planning.rec",
    ]
    .iter()
    .map(|n| support::asset(n))
    .collect();
    for f in [
        "hta_step_annotations.json.gz",
        "hta_trace_compare/base.json.gz",
        "hta_trace_compare/test.json.gz",
    ] {
        v.push(support::fixture(f));
    }
    for f in [
        "backward_bound.json.gz",
        "loader_train.json.gz",
        "shape_planning.json.gz",
        "hta-two-ranks",
    ] {
        v.push(support::root().join("tests/data/kineto").join(f));
    }
    v.push(support::shared_trace("kineto-launchbound.json.gz"));
    v.push(support::shared_fixture("llama-decode/llama16-cudnn.rec"));
    v.push(support::shared_fixture(
        "llama-decode/kineto-llama16-cudnn.json.gz",
    ));
    v
}

#[test]
fn the_unchanged_replay_gives_back_the_measured_steps() {
    for p in captures() {
        let j = support::report_json(&p, &[]);
        let r = &j["replay"];
        assert!(r.is_object(), "{}: no replay: {}", p.display(), j["steps"]);
        let err = r["baseline_error"].as_f64().unwrap();
        assert!(err < 0.05, "{}: {r}", p.display());
        assert_eq!(r["forced"], 0, "{}: {r}", p.display());
        assert!(r["steps"].as_u64().unwrap() >= 1, "{}: {r}", p.display());
        // No saving is larger than a step.
        let step = r["measured_mean_ns"].as_i64().unwrap().max(1);
        for a in j["advice"].as_array().unwrap() {
            let s = a["saving_ns"].as_i64().unwrap_or(0);
            assert!(
                s <= step,
                "{}: {a} saves more than a {step} ns step",
                p.display()
            );
        }
    }
}

fn first(j: &Value) -> &Value {
    &j["advice"][0]
}

/// The fixture's README: 24 forward calls, two thirds of which plan for ~54 ms, so the fix
/// saves ~36 ms a step on average, ~54 ms in the steps that plan; both captures put SDPA
/// first and find the same steps ± 1.
#[test]
fn llama_decode_sdpa_first_with_the_planning_it_costs() {
    let rec = support::report_json(
        &support::shared_fixture("llama-decode/llama16-cudnn.rec"),
        &[],
    );
    let kin = support::report_json(
        &support::shared_fixture("llama-decode/kineto-llama16-cudnn.json.gz"),
        &[],
    );
    let ms = 1_000_000;
    for (j, site) in [
        (&rec, "sdpa_attention_forward"),
        (&kin, "aten::_cudnn_attention_forward"),
    ] {
        let a = first(j);
        assert!(a["site"].as_str().unwrap().starts_with(site), "{a}");
        assert_eq!(a["cause"], "per_shape_planning", "{a}");
        let saving = a["saving_ns"].as_i64().unwrap();
        assert!((30 * ms..=60 * ms).contains(&saving), "{a}");
        // The summed figure it replaced is kept beside it, and the steps it falls on.
        assert!(a["gap_sum_ns"].is_number(), "{a}");
        let changed = a["saving_changed_ns"].as_i64().unwrap();
        assert!((45 * ms..=65 * ms).contains(&changed), "{a}");
        let steady = j["steps"]["steady"].as_u64().unwrap();
        let n = a["steps_changed"].as_u64().unwrap();
        assert!(n * 3 >= steady && n < steady, "{n} of {steady}: {a}");
        let steps = j["steps"]["count"].as_i64().unwrap();
        assert!((23..=25).contains(&steps), "{}", j["steps"]);
    }
    let text = String::from_utf8(support::report_out(
        &support::shared_fixture("llama-decode/llama16-cudnn.rec"),
        "text",
        &[],
    ))
    .unwrap();
    let head: Vec<&str> = text.lines().take(3).collect();
    assert!(head[0].contains("replayed"), "{head:?}");
    assert!(head[2].contains("would take"), "{head:?}");
}

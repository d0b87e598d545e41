//! `gaptop report --format pprof`: the profile read back with prost holds every gap's time once,
//! by the same launch stacks as `--format folded` (and with the CPU samples under them as
//! `--format folded-cpu`), by cause as the report's idle breakdown; and pprof itself (`go tool
//! pprof`) reads it.

mod support;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use gaptop::pprof::proto::Profile;
use gaptop_wire::stackframe;
use serde_json::Value;
use support::{asset, bin, report_out as report, shared_trace, tempdir};

fn profile(path: &Path, extra: &[&str]) -> Profile {
    let bytes = report(path, "pprof", extra);
    assert_eq!(bytes[..2], [0x1f, 0x8b], "gzipped");
    gaptop::pprof::decode(&bytes).unwrap()
}

fn string(p: &Profile, i: i64) -> &str {
    &p.string_table[i as usize]
}

/// The index of a sample type by name.
fn value_index(p: &Profile, name: &str) -> usize {
    p.sample_type
        .iter()
        .position(|t| string(p, t.r#type) == name)
        .unwrap_or_else(|| panic!("no sample type {name}"))
}

/// A location's frame as gaptop names it, from the function and line it became:
/// `file(line): function` for a Python frame, `symbol [lib]` for a named native one.
fn frame_text(p: &Profile, loc: u64) -> String {
    let l = &p.location[(loc - 1) as usize];
    assert_eq!(l.id, loc, "locations are numbered from 1 in order");
    assert_eq!(l.line.len(), 1);
    let f = &p.function[(l.line[0].function_id - 1) as usize];
    let (name, file) = (string(p, f.name), string(p, f.filename));
    // A Python function's system name is its file and name; the others' is their name.
    let python = string(p, f.system_name) != name;
    match (python, file) {
        (true, file) => stackframe::python_name(file, l.line[0].line, name),
        (false, "") => name.to_string(),
        (false, lib) => stackframe::native_name(name, lib),
    }
}

/// The profile's value `v` by launch path as folded stacks write them (outermost first, `;`
/// between frames), summed over labels; `cpu` false folds the CPU samples into their launch.
fn by_path(p: &Profile, v: usize, cpu: bool) -> BTreeMap<String, i64> {
    let marker = gaptop_core::model::records::CPU_MARKER;
    let mut m = BTreeMap::new();
    for s in &p.sample {
        let mut frames: Vec<String> = s
            .location_id
            .iter()
            .rev()
            .map(|&l| frame_text(p, l))
            .collect();
        if !cpu {
            if let Some(i) = frames.iter().position(|f| f == marker) {
                frames.truncate(i);
            }
        }
        let path: Vec<String> = frames.iter().map(|f| f.replace(';', ":")).collect();
        *m.entry(path.join(";")).or_default() += s.value[v];
    }
    m.retain(|_, v| *v != 0);
    m
}

/// Folded stacks' lines summed by path.
fn folded(text: &[u8]) -> BTreeMap<String, i64> {
    let mut m = BTreeMap::new();
    for line in String::from_utf8(text.to_vec()).unwrap().lines() {
        let (path, ns) = line.rsplit_once(' ').unwrap();
        *m.entry(path.to_string()).or_default() += ns.parse::<i64>().unwrap();
    }
    m
}

fn total(p: &Profile, v: usize) -> i64 {
    p.sample.iter().map(|s| s.value[v]).sum()
}

fn json(path: &Path, extra: &[&str]) -> Value {
    serde_json::from_slice(&report(path, "json", extra)).unwrap()
}

/// Per stream (HTA's gaps), every gap is in the profile once: its idle adds up to the report's
/// idle breakdown by cause, count and time, and by the same launch stacks as `--format folded`.
#[test]
fn per_stream_profile_holds_the_idle_breakdown_by_cause_and_stack() {
    for path in [
        asset("gpt2.rec"),
        asset("ddp2.rec"),
        shared_trace("kineto-launchbound.json.gz"),
        // HTA's, most of its kernels' launches not in it.
        support::fixture("hta_trace_compare/base.json.gz"),
    ] {
        assert!(path.is_file(), "missing {}", path.display());
        let p = profile(&path, &["--per-stream"]);
        let j = json(&path, &["--per-stream"]);
        let (idle, gaps) = (value_index(&p, "idle"), value_index(&p, "gaps"));
        assert_eq!(string(&p, p.default_sample_type), "idle");
        for cause in ["host_wait", "kernel_wait", "other"] {
            let of_cause = |v: usize| -> i64 {
                p.sample
                    .iter()
                    .filter(|s| {
                        s.label
                            .iter()
                            .any(|l| string(&p, l.key) == "cause" && string(&p, l.str) == cause)
                    })
                    .map(|s| s.value[v])
                    .sum()
            };
            let b = &j["idle"][cause];
            assert_eq!(of_cause(idle), b["total_ns"].as_i64().unwrap(), "{cause}");
            assert_eq!(of_cause(gaps), b["count"].as_i64().unwrap(), "{cause}");
        }
        let f = folded(&report(&path, "folded", &["--per-stream"]));
        assert_eq!(by_path(&p, idle, false), f, "{}", path.display());
        // The window is the capture's.
        let w = &j["window"];
        let span = w["to_ns"].as_i64().unwrap() - w["from_ns"].as_i64().unwrap();
        assert_eq!(p.duration_nanos, span);
        assert_eq!(p.time_nanos, j["origin_ns"].as_i64().unwrap());
    }
}

/// On device idle (the default) the profile is the folded stacks' gap time, and a window of
/// the capture is the window's; a recording with CPU samples has them under each launch, as
/// `--format folded-cpu` has them, the gap's time shared among them and the samples counted.
#[test]
fn device_profile_matches_folded_stacks_with_the_cpu_samples_under_them() {
    let path = asset("llama_decode.rec");
    let p = profile(&path, &[]);
    let idle = value_index(&p, "idle");
    let cpu = value_index(&p, "cpu_samples");
    assert_eq!(
        by_path(&p, idle, false),
        folded(&report(&path, "folded", &[]))
    );
    assert_eq!(
        by_path(&p, idle, true),
        folded(&report(&path, "folded-cpu", &[]))
    );
    // The CPU samples sit under the marker frame only.
    let marker = gaptop_core::model::records::CPU_MARKER;
    let with_cpu = by_path(&p, cpu, true);
    assert!(total(&p, cpu) > 1000, "{}", total(&p, cpu));
    assert!(with_cpu.keys().all(|k| k.contains(marker)));
    // cuDNN's plan compilation during sdpa_attention_forward's gaps, named from the samples.
    let nvrtc: i64 = with_cpu
        .iter()
        .filter(|(k, _)| k.contains("sdpa_attention_forward") && k.contains("nvrtcCompileProgram"))
        .map(|(_, v)| v)
        .sum();
    assert!(nvrtc > total(&p, cpu) / 4, "{nvrtc} of {}", total(&p, cpu));

    let w = profile(&path, &["--from", "1s", "--to", "2s"]);
    assert_eq!(w.duration_nanos, 1_000_000_000);
    assert_eq!(w.time_nanos, p.time_nanos + 1_000_000_000);
    assert_eq!(
        by_path(&w, idle, false),
        folded(&report(&path, "folded", &["--from", "1s", "--to", "2s"]))
    );
    assert!(total(&w, idle) < total(&p, idle) && total(&w, idle) > 0);
}

/// Python frames are functions with their file, and locations with their line; native frames
/// functions with their library; names are shared, each function and location once.
#[test]
fn frames_become_functions_with_files_and_lines() {
    let p = profile(&asset("llama_decode.rec"), &[]);
    let sdpa: Vec<_> = p
        .function
        .iter()
        .filter(|f| string(&p, f.name) == "sdpa_attention_forward")
        .collect();
    assert_eq!(sdpa.len(), 1, "one function, however many lines");
    assert!(string(&p, sdpa[0].filename).ends_with("integrations/sdpa_attention.py"));
    let lines: Vec<i64> = p
        .location
        .iter()
        .filter(|l| l.line[0].function_id == sdpa[0].id)
        .map(|l| l.line[0].line)
        .collect();
    assert_eq!(lines, [158]);
    let native = p
        .function
        .iter()
        .find(|f| string(&p, f.name) == "nvrtcCompileProgram")
        .expect("a named native frame");
    assert!(string(&p, native.filename).starts_with("libnvrtc.so"));
    let mut names: Vec<(i64, i64)> = p.function.iter().map(|f| (f.name, f.filename)).collect();
    names.sort();
    names.dedup();
    assert_eq!(names.len(), p.function.len());
    assert_eq!(p.string_table[0], "");
    // The same input, the same bytes.
    let path = asset("gpt2.rec");
    assert_eq!(report(&path, "pprof", &[]), report(&path, "pprof", &[]));
}

/// `-o FILE` writes any format to a file; a file that cannot be written is a one-line error.
#[test]
fn output_goes_to_a_file() {
    let d = tempdir("pprof-out");
    let src = asset("gpt2.rec");
    for (format, name) in [("pprof", "idle.pb.gz"), ("folded", "gaps.folded")] {
        let out = d.join(name);
        let o = Command::new(bin())
            .arg("report")
            .arg(&src)
            .args(["--format", format, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(o.stdout.is_empty());
        assert_eq!(std::fs::read(&out).unwrap(), report(&src, format, &[]));
    }
    let o = Command::new(bin())
        .arg("report")
        .arg(&src)
        .args(["--format", "pprof", "-o"])
        .arg(d.join("no/such/dir/x.pb.gz"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot write"), "{err}");
}

/// pprof itself reads the profile: `go tool pprof -raw` lists the samples with the values and
/// labels written, and `-top` names the code that made the GPU wait.
#[test]
fn go_tool_pprof_reads_the_profile() {
    let Some(go) = support::go() else { return };
    let d = tempdir("pprof-go");
    let file = d.join("llama.pb.gz");
    let src = asset("llama_decode.rec");
    std::fs::write(&file, report(&src, "pprof", &[])).unwrap();
    let p = gaptop::pprof::decode(&std::fs::read(&file).unwrap()).unwrap();
    let run = |args: &[&str]| -> String {
        let o = Command::new(&go)
            .args(["tool", "pprof"])
            .args(args)
            .arg(&file)
            .env("HOME", &d)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let raw = run(&["-raw"]);
    assert!(
        raw.contains("idle/nanoseconds[dflt] gaps/count cpu_samples/count"),
        "{raw:.2000}"
    );
    // Each sample's line: its values, then `:` and its locations.
    let mut sums = [0i64; 3];
    let mut n = 0;
    for line in raw.lines() {
        let Some((values, _)) = line.split_once(':') else {
            continue;
        };
        let v: Vec<i64> = values
            .split_whitespace()
            .map_while(|x| x.parse().ok())
            .collect();
        if v.len() == 3 && values.split_whitespace().count() == 3 {
            for (s, x) in sums.iter_mut().zip(&v) {
                *s += x;
            }
            n += 1;
        }
    }
    assert_eq!(n, p.sample.len());
    assert_eq!(sums, [0, 1, 2].map(|v| total(&p, v)));
    assert!(raw.contains("cause:[host_wait]") && raw.contains("device:[gpu0]"));
    let top = run(&["-top", "-cum", "-nodecount=12"]);
    assert!(top.contains("Type: idle"), "{top}");
    assert!(top.contains("sdpa_attention_forward"), "{top}");
    assert!(top.contains("nvrtcCompileProgram"), "{top}");
    let gaps = run(&["-sample_index=gaps", "-top", "-nodecount=3"]);
    assert!(gaps.contains("Type: gaps"), "{gaps}");
}

/// A reader that goes away (`| head`) ends the report quietly, whatever the format, rather
/// than with a panic about a broken pipe.
#[test]
fn a_reader_that_goes_away_ends_the_report_quietly() {
    for format in ["text", "json", "pprof"] {
        let mut child = Command::new(bin())
            .arg("report")
            .arg(asset("llama_decode.rec"))
            .args(["--format", format])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Closed before the report (which reads the recording first) writes anything.
        drop(child.stdout.take());
        let o = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        // Only the line every recording older than GAPTOPR5 gets.
        let other = err.lines().filter(|l| !l.contains("cannot be verified"));
        assert!(o.status.success() && other.count() == 0, "{format}: {err}");
    }
}

/// The binary profile is not written to a terminal: the error says how to write it. (`script`,
/// of util-linux, gives the command a terminal.)
#[test]
fn the_profile_is_not_written_to_a_terminal() {
    let cmd = format!(
        "{} report {} --format pprof",
        bin(),
        asset("gpt2.rec").display()
    );
    let Ok(o) = Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .output()
    else {
        eprintln!("skipped: no `script` to run gaptop on a terminal");
        return;
    };
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("-o FILE"), "{out}");
    assert!(!out.contains('\u{1f}') && out.lines().count() == 1, "{out}");
}

/// Two programs' profiles merged (`gaptop serve`'s `/debug/pprof/idle` over its targets): the
/// same paths with the values of both, the frames shared rather than repeated, the span from
/// the first start to the last end; merged with nothing else, a profile reads as it was.
#[test]
fn merged_profiles_add_up_path_by_path() {
    let a = profile(&asset("llama_decode.rec"), &[]);
    let b = profile(&asset("launchbound.rec"), &[]);
    let m = gaptop::pprof::merge([&a, &b]).unwrap();
    let idle = value_index(&m, "idle");
    let mut want = by_path(&a, idle, true);
    for (k, v) in by_path(&b, idle, true) {
        *want.entry(k).or_default() += v;
    }
    assert_eq!(by_path(&m, idle, true), want);
    assert_eq!(total(&m, idle), total(&a, idle) + total(&b, idle));
    let one = gaptop::pprof::merge(std::slice::from_ref(&a)).unwrap();
    assert_eq!(by_path(&one, idle, true), by_path(&a, idle, true));
    assert_eq!(one.function.len(), a.function.len());
    let twice = gaptop::pprof::merge([&a, &a]).unwrap();
    assert_eq!(twice.function.len(), a.function.len(), "frames shared");
    assert_eq!(twice.location.len(), a.location.len());
    assert_eq!(total(&twice, idle), 2 * total(&a, idle));
    let end = |p: &Profile| p.time_nanos + p.duration_nanos;
    assert_eq!(m.time_nanos, a.time_nanos.min(b.time_nanos));
    assert_eq!(end(&m), end(&a).max(end(&b)));
    assert!(gaptop::pprof::merge(std::iter::empty()).is_none());
    // pprof reads the merged profile as it reads each.
    if let Some(go) = support::go() {
        let d = tempdir("pprof-merged");
        let file = d.join("merged.pb.gz");
        std::fs::write(&file, gaptop::pprof::encode(&m)).unwrap();
        let o = Command::new(&go)
            .args(["tool", "pprof", "-top"])
            .arg(&file)
            .env("HOME", &d)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
}

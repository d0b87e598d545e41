//! The files users keep and the inputs gaptop is given: an output never replaces one of the
//! inputs and replaces its target only once complete; pipes and devices are refused at once;
//! a gzipped SQLite export inflates within a limit into a temporary folder that goes on every
//! way out; errors are one line of at most 300 characters and say what gaptop reads.

mod support;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use support::{asset, bin, fixture, names_in, tempdir};

fn gaptop(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(bin()).args(args).output().unwrap()
}

/// A failure: exit status 1 and one line on stderr that contains `want`; the line.
fn fails(o: &Output, want: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(
        err.starts_with("gaptop: ") && err.contains(want),
        "{want:?} in {err}"
    );
    assert!(err.trim_end().chars().count() <= 300, "{} chars", err.len());
    err
}

fn copy(src: &Path, dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::copy(src, &p).unwrap();
    p
}

/// `report -o`, `export -o` and `diff -o` refuse to write over one of their inputs, however
/// it is named (another path, a link, a hard link, a file of a directory given), and leave it
/// as it was.
#[test]
fn an_output_that_is_an_input_is_refused() {
    let dir = tempdir("selfout");
    let rec = copy(&asset("planted.rec"), &dir, "x.rec");
    let json = copy(&fixture("multi_stream.json"), &dir, "t.json");
    let before = (std::fs::read(&rec).unwrap(), std::fs::read(&json).unwrap());
    let link = dir.join("link.rec");
    std::os::unix::fs::symlink(&rec, &link).unwrap();
    let hard = dir.join("hard.json");
    std::fs::hard_link(&json, &hard).unwrap();
    let other = dir.join("sub/../x.rec");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    let os = |p: &Path| p.as_os_str().to_owned();
    let cases: Vec<Vec<std::ffi::OsString>> = vec![
        vec!["export".into(), os(&rec), "-o".into(), os(&rec)],
        vec!["export".into(), os(&rec), "-o".into(), os(&link)],
        vec!["export".into(), os(&rec), "-o".into(), os(&other)],
        vec!["report".into(), os(&json), "-o".into(), os(&hard)],
        vec!["report".into(), os(&dir), "-o".into(), os(&json)],
        vec![
            "report".into(),
            os(&json),
            "--format".into(),
            "pprof".into(),
            "-o".into(),
            os(&json),
        ],
        vec!["diff".into(), os(&rec), os(&json), "-o".into(), os(&json)],
    ];
    for args in cases {
        let a: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_os_str()).collect();
        let o = gaptop(&a);
        let err = fails(&o, "is an input");
        assert!(
            err.contains("write the output to another file"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(std::fs::read(&rec).unwrap(), before.0);
    assert_eq!(std::fs::read(&json).unwrap(), before.1);
    assert_eq!(names_in(&dir, ".part"), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A report written with -o replaces the file that was there only once written; one that
/// fails (the input is bad) leaves it as it was, and no temporary file stays either way.
#[test]
fn report_output_replaces_its_file_once_written() {
    let dir = tempdir("reportout");
    let out = dir.join("report.txt");
    std::fs::write(&out, b"last week's report").unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, b"{\"traceEvents\": [").unwrap();
    let o = gaptop(&["report".as_ref(), bad.as_ref(), "-o".as_ref(), out.as_ref()]);
    fails(&o, "truncated");
    assert_eq!(std::fs::read(&out).unwrap(), b"last week's report");
    let good = fixture("multi_stream.json");
    let o = gaptop(&[
        "report".as_ref(),
        good.as_ref(),
        "-o".as_ref(),
        out.as_ref(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(text.contains("host_wait"), "{text}");
    assert_eq!(names_in(&dir, ".part"), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Runs gaptop with `args`, killing it if it runs past `secs`; its output.
fn bounded(args: &[&std::ffi::OsStr], secs: u64) -> Output {
    let child = Command::new(bin())
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let t = Instant::now();
    let waiter = std::thread::spawn(move || child.wait_with_output().unwrap());
    while !waiter.is_finished() {
        if t.elapsed() > Duration::from_secs(secs) {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("gaptop {args:?} still running after {secs} s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    waiter.join().unwrap()
}

/// A named pipe or a device is refused at once, with one line, by every command that reads
/// captures: nothing blocks on a pipe nobody writes.
#[test]
fn pipes_and_devices_are_refused_at_once() {
    let dir = tempdir("fifo");
    let fifo = dir.join("trace.json");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let good = fixture("multi_stream.json");
    let out = dir.join("x.json");
    let cases: [Vec<&std::ffi::OsStr>; 5] = [
        vec!["report".as_ref(), fifo.as_ref()],
        vec!["report".as_ref(), good.as_ref(), fifo.as_ref()],
        vec!["diff".as_ref(), good.as_ref(), fifo.as_ref()],
        vec![
            "export".as_ref(),
            fifo.as_ref(),
            "-o".as_ref(),
            out.as_ref(),
        ],
        vec!["open".as_ref(), fifo.as_ref()],
    ];
    for args in cases {
        let o = bounded(&args, 10);
        fails(&o, "trace.json: is a named pipe, not a file");
    }
    let o = bounded(&["report".as_ref(), "/dev/zero".as_ref()], 10);
    fails(&o, "/dev/zero: is a device, not a file");
    let _ = std::fs::remove_dir_all(&dir);
}

/// An error that quotes a name of megabytes is one line of at most 300 characters, the
/// name cut in its middle; a file in none of gaptop's formats is described and the formats
/// listed.
#[test]
fn errors_are_one_short_line_and_say_what_gaptop_reads() {
    let dir = tempdir("errors");
    let long = dir.join("long.json");
    let name = format!("head{}tail", "A".repeat(10 << 20));
    std::fs::write(
        &long,
        format!(
            r#"{{"traceEvents": [{{"ph":"X","cat":"kernel","name":"{name}","ts":"bad","dur":1,"pid":1,"tid":1}}]}}"#
        ),
    )
    .unwrap();
    let o = gaptop(&["report".as_ref(), long.as_ref()]);
    let err = fails(&o, "long.json: no GPU ops");
    assert!(err.contains("event at byte 17"), "{err}");
    assert!(err.contains("\"headAAA") && err.contains('…'), "{err}");

    let reads = "gaptop reads Kineto/Chrome trace JSON (.json, .json.gz), Nsight Systems \
                 exports (.sqlite, .sqlite.gz, .nsys-rep) and gaptop recordings (.rec, .rec.gz)";
    let text = dir.join("notes.txt");
    std::fs::write(&text, b"hello world\nsecond line\n").unwrap();
    let o = gaptop(&["report".as_ref(), text.as_ref()]);
    let err = fails(&o, "notes.txt: not a trace or a recording");
    assert!(
        err.contains("(text starting \"hello world second line\")"),
        "{err}"
    );
    assert!(err.contains(reads), "{err}");
    // Gzipped text, and JSON that is not a trace, list them too.
    let gz = dir.join("notes.json.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b"plain words").unwrap();
    std::fs::write(&gz, e.finish().unwrap()).unwrap();
    let o = gaptop(&["report".as_ref(), gz.as_ref()]);
    let err = fails(&o, "(text starting \"plain words\")");
    assert!(err.contains(reads), "{err}");
    let other = dir.join("config.json");
    std::fs::write(&other, b"{\"name\": 1}").unwrap();
    let o = gaptop(&["report".as_ref(), other.as_ref()]);
    let err = fails(&o, "not a trace: no \"traceEvents\" array");
    assert!(err.contains(reads), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A gzip file whose first member inflates to SQLite's magic and then zeros, followed by
/// `copies` members of 16 MiB of zeros each: `16 MiB * copies` inflated from a few KiB a
/// member.
fn sqlite_bomb(path: &Path, copies: usize) {
    let zeros = vec![0u8; 16 << 20];
    let member = |head: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(head).unwrap();
        e.write_all(&zeros).unwrap();
        e.finish().unwrap()
    };
    let mut f = std::fs::File::create(path).unwrap();
    f.write_all(&member(b"SQLite format 3\0")).unwrap();
    let zero = member(b"");
    for _ in 0..copies {
        f.write_all(&zero).unwrap();
    }
}

/// The temporary folders gaptop made under `tmp`.
fn temp_folders(tmp: &Path) -> Vec<String> {
    names_in(tmp, "")
        .into_iter()
        .filter(|n| n.starts_with("gaptop-"))
        .collect()
}

/// A gzip bomb stops at the limit with one line that names the variable raising it; the
/// temporary folder goes, and so does one a killed gaptop left behind.
#[test]
fn a_gzipped_export_inflates_within_a_limit() {
    let dir = tempdir("bomb");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    // Left by a gaptop killed outright (a pid above the kernel's limit never runs).
    std::fs::create_dir_all(tmp.join("gaptop-sqlite-4999999-abcdef/x")).unwrap();
    let bomb = dir.join("small.sqlite.gz");
    sqlite_bomb(&bomb, 5);
    assert!(std::fs::metadata(&bomb).unwrap().len() < 1 << 20);
    let o = Command::new(bin())
        .arg("report")
        .arg(&bomb)
        .env("TMPDIR", &tmp)
        .output()
        .unwrap();
    let err = fails(&o, "small.sqlite.gz: inflates to more than 64 MiB");
    assert!(err.contains("GAPTOP_INFLATE_LIMIT=16G"), "{err}");
    assert_eq!(temp_folders(&tmp), Vec::<String>::new());

    // Raised, it inflates (and SQLite then says what it thinks of the zeros).
    let o = Command::new(bin())
        .arg("report")
        .arg(&bomb)
        .env("TMPDIR", &tmp)
        .env("GAPTOP_INFLATE_LIMIT", "200M")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!err.contains("inflates to more than"), "{err}");
    assert_eq!(temp_folders(&tmp), Vec::<String>::new());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A signal while inflating removes the temporary folder, and gaptop ends as the signal
/// ends a program.
#[test]
fn a_signal_while_inflating_removes_the_temporary_folder() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempdir("bombsig");
    let tmp = dir.join("tmp");
    std::fs::create_dir_all(&tmp).unwrap();
    let bomb = dir.join("big.sqlite.gz");
    sqlite_bomb(&bomb, 256); // 4 GiB inflated: far longer to write than the test waits
    for sig in ["TERM", "INT"] {
        let mut g = Command::new(bin())
            .arg("report")
            .arg(&bomb)
            .env("TMPDIR", &tmp)
            .env("GAPTOP_INFLATE_LIMIT", "5G")
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let t = Instant::now();
        // Until the inflated file has begun.
        while !temp_folders(&tmp).iter().any(|f| {
            std::fs::metadata(tmp.join(f).join("export.sqlite")).is_ok_and(|m| m.len() > 0)
        }) {
            assert!(t.elapsed() < Duration::from_secs(20), "no temporary folder");
            std::thread::sleep(Duration::from_millis(10));
        }
        Command::new("kill")
            .args([&format!("-{sig}"), &g.id().to_string()])
            .status()
            .unwrap();
        let st = g.wait().unwrap();
        let want = if sig == "TERM" { 15 } else { 2 };
        assert_eq!(st.signal(), Some(want), "{sig}: {st:?}");
        assert_eq!(temp_folders(&tmp), Vec::<String>::new(), "{sig}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A named pipe with a trace's name inside a directory of ranks is never opened (it would
/// block): it is skipped with a note that names it, and the other ranks are read.
#[test]
fn a_fifo_among_the_ranks_is_skipped_with_a_note() {
    let d = tempdir("fifo-rank");
    let src = support::root().join("tests/data/kineto/hta-two-ranks");
    for f in ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"] {
        std::fs::copy(src.join(f), d.join(f)).unwrap();
    }
    let fifo = d.join("sampled_rank-2.json.gz");
    let st = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let out = Command::new(bin())
        .args(["report", "--format", "json"])
        .arg(&d)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "gaptop: {}: is a named pipe, not a file: skipped",
            fifo.display()
        )),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&d);
}

/// One `-o` for exports, the CLI's and the UI's alike: a file, or a folder where gaptop names
/// the file `gaptop-<source>-<time>.json.gz`; without it, the current folder. The line that
/// says it was written gives its size and what opens it.
#[test]
fn exports_take_a_file_or_a_folder_and_say_what_opens_them() {
    let dir = tempdir("export-o");
    let rec = asset("gpt2.rec");
    let run = |args: &[&std::ffi::OsStr], cwd: &Path| {
        let o = Command::new(bin())
            .arg("export")
            .arg(&rec)
            .args(args)
            .current_dir(cwd)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains(" MB); opens in ui.perfetto.dev, chrome://tracing and gaptop open"),
            "{err}"
        );
        err
    };
    let here = dir.join("here");
    let into = dir.join("into");
    std::fs::create_dir_all(&here).unwrap();
    std::fs::create_dir_all(&into).unwrap();
    run(&[], &here);
    run(&["-o".as_ref(), into.as_os_str()], &dir);
    let file = dir.join("mine.json");
    let err = run(&["-o".as_ref(), file.as_os_str()], &here);
    assert!(err.contains(&format!("-> {} (", file.display())), "{err}");
    for d in [&here, &into] {
        let names = names_in(d, ".json.gz");
        assert_eq!(names.len(), 1, "{}: {names:?}", d.display());
        assert!(names[0].starts_with("gaptop-gpt2-"), "{names:?}");
    }
    // The UI takes the same -o (and its former --export-dir).
    let help = Command::new(bin())
        .args(["open", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(help.contains("-o, --output <FILE|DIR>"), "{help}");
    assert!(help.contains("export-dir"), "{help}");
}

//! `gaptop --help` and the subcommands' help: in a user's order, every argument described,
//! the formats named, and wrapped to the terminal's width.

mod support;

use std::process::Command;

use support::bin;

/// `gaptop ARGS...`'s stdout at a terminal `columns` wide (clap reads COLUMNS where stdout is
/// not a terminal); it must succeed.
fn help(args: &[&str], columns: u16) -> String {
    let o = Command::new(bin())
        .args(args)
        .env("COLUMNS", columns.to_string())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout).unwrap()
}

/// The subcommands as `gaptop --help` lists them.
fn listed(text: &str) -> Vec<String> {
    text.split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

#[test]
fn subcommands_come_in_a_users_order() {
    let text = help(&["--help"], 100);
    assert_eq!(
        listed(&text),
        [
            "demo", "run", "record", "open", "report", "diff", "export", "attach", "capture",
            "serve", "env", "help"
        ],
        "{text}"
    );
}

#[test]
fn report_help_lists_every_format_and_describes_its_inputs() {
    let text = help(&["report", "--help"], 100);
    let formats = text.split("Possible values:").nth(1).expect(&text);
    for f in ["text", "json", "folded", "folded-cpu", "pprof"] {
        assert!(formats.contains(&format!("- {f}:")), "{f} in {text}");
    }
    let inputs = text.split("Arguments:\n").nth(1).expect(&text);
    let mut lines = inputs.lines();
    assert_eq!(lines.next().unwrap().trim(), "<FILE|DIR>...", "{text}");
    let described = lines.next().unwrap().trim();
    assert!(described.starts_with("The capture:"), "{text}");
    // The short help names the values too.
    let short = help(&["report", "-h"], 1000);
    assert!(
        short.contains("[possible values: text, json, folded, folded-cpu, pprof]"),
        "{short}"
    );
}

/// `open --help` names every format it reads.
#[test]
fn open_help_names_the_formats_it_reads() {
    let text = help(&["open", "--help"], 100);
    for f in [".json", ".json.gz", ".nsys-rep", ".sqlite", ".rec"] {
        assert!(text.contains(f), "{f} in {text}");
    }
}

/// Every argument and option of every subcommand has a description: no help line is a bare
/// `<NAME>` or `--flag <VALUE>` with nothing after it, in the short help on a terminal wide
/// enough for no line to wrap.
#[test]
fn every_argument_is_described() {
    let top = help(&["--help"], 100);
    for cmd in listed(&top).iter().filter(|c| *c != "help") {
        let text = help(&[cmd, "-h"], 1000);
        let args = text.split("Arguments:\n").nth(1).unwrap_or("");
        let opts = text.split("Options:\n").nth(1).expect(&text);
        for l in args
            .lines()
            .take_while(|l| !l.trim().is_empty())
            .chain(opts.lines())
        {
            let l = l.trim();
            assert!(
                l.starts_with('-') || l.starts_with('<') || l.starts_with('['),
                "gaptop {cmd}: a wrapped line {l:?}\n{text}"
            );
            // The name ends at the first run of two spaces; the description follows it.
            let described = l
                .split_once("  ")
                .is_some_and(|(_, d)| !d.trim().is_empty());
            assert!(described, "gaptop {cmd}: {l:?} has no description\n{text}");
        }
    }
}

/// Help wraps to the terminal: at 60 columns no line of any help is wider.
#[test]
fn help_wraps_to_the_terminal() {
    for args in [
        &["--help"][..],
        &["open", "--help"],
        &["report", "--help"],
        &["report", "-h"],
        &["diff", "--help"],
        &["run", "-h"],
    ] {
        let text = help(args, 60);
        for l in text.lines() {
            assert!(l.chars().count() <= 60, "{args:?}: {l:?}");
        }
    }
}

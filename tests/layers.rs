//! The viewer's modules depend on each other in one direction only (ARCHITECTURE.md):
//!
//! `units`, `frames`, `text`, `files` ← `collect` ← `report`, `pprof`, `diff` ← `export`, `record`, `serve` ← `app` ← `views` ← `cli`
//!
//! Every `crate::…` path in a module must name a module of its own layer or one below it.

use std::path::{Path, PathBuf};

/// The layer of a top-level module, lowest first; None for the crate root and the binary.
fn layer(module: &str) -> Option<u8> {
    Some(match module {
        "units" | "frames" | "text" | "files" => 0,
        "collect" => 1,
        "report" | "pprof" | "diff" => 2,
        "export" | "record" | "serve" => 3,
        "app" => 4,
        "views" => 5,
        "cli" => 6,
        _ => return None,
    })
}

/// The top-level module a source file belongs to (`src/collect/kineto.rs` is `collect`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_string()
}

/// Each `crate::name` a source text uses outside comments, with its line number.
fn crate_refs(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            // `gaptop_crate::` or `some_crate::` are not this crate.
            let before = rest[..i].chars().last();
            rest = &rest[i + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            out.push((n + 1, name));
        }
    }
    out
}

/// Where a module reaches up to a higher layer: `file:line: module uses crate::other`.
fn violations(module: &str, file: &str, text: &str) -> Vec<String> {
    let Some(own) = layer(module) else {
        return Vec::new();
    };
    crate_refs(text)
        .into_iter()
        .filter(|(_, used)| layer(used).is_some_and(|l| l > own))
        .map(|(line, used)| format!("{file}:{line}: {module} uses crate::{used}"))
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn modules_depend_in_one_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut seen = std::collections::BTreeSet::new();
    let mut bad = Vec::new();
    for f in &files {
        let module = module_of(&src, f);
        seen.insert(module.clone());
        let text = std::fs::read_to_string(f).unwrap();
        bad.extend(violations(&module, &f.display().to_string(), &text));
    }
    assert!(
        bad.is_empty(),
        "imports against the layering:\n{}",
        bad.join("\n")
    );
    // Every top-level module has a layer: a new one must be placed in the rule.
    for m in &seen {
        assert!(
            layer(m).is_some() || m == "lib" || m == "main",
            "module {m} has no layer in tests/layers.rs (and ARCHITECTURE.md)"
        );
    }
}

#[test]
fn the_check_catches_an_upward_import() {
    // What the issue asks the test to catch: `use crate::app` added under collect.
    let text = "use crate::collect::model::store::Store;\nuse crate::app::App;\n";
    assert_eq!(
        violations("collect", "src/collect/x.rs", text),
        vec!["src/collect/x.rs:2: collect uses crate::app"]
    );
    // Paths in expressions count too; comments and other crates' names do not.
    let text = "let k = crate::views::short_kernel(x); // crate::app\nuse gaptop_crate::app;\n";
    assert_eq!(
        violations("report", "src/report.rs", text),
        vec!["src/report.rs:1: report uses crate::views"]
    );
    assert!(violations("views", "src/views/mod.rs", "use crate::app::App;").is_empty());
    assert!(violations("collect", "src/collect/a.rs", "use crate::units::Ns;").is_empty());
}

//! The crates and their modules depend on each other in one direction only (ARCHITECTURE.md):
//!
//! - the crates: `gaptop-wire`, `gaptop-pystack` ← `gaptop-core` ← `gaptop` (the viewer), and
//!   the collector on the first two; `gaptop-core` names no terminal, server or async runtime;
//! - in `gaptop-core`: `units`, `frames`, `text`, `files` ← `model` ← `sources`, `analysis`
//!   (the stages: `model` imports neither `sources` nor `analysis`, and those two never import
//!   each other);
//! - in the viewer: `report`, `pprof`, `diff`, `gate` ← `export`, `recorder`, `serve` ← `app`
//!   ← `views` ← `cli`.
//!
//! Every `crate::…` path in a module must name a module of its own layer or one below it. No
//! modules of a crate import each other in a circle, and no file holds over 700 lines before
//! its tests.

use std::path::{Path, PathBuf};

/// A crate's layers: the layer of each of its top-level modules, lowest first.
type Layer = fn(&str) -> Option<u8>;

/// The layer of a top-level module of the viewer, lowest first; None for the crate root and
/// the binary.
fn viewer_layer(module: &str) -> Option<u8> {
    Some(match module {
        "report" | "pprof" | "diff" | "gate" => 0,
        "export" | "recorder" | "serve" => 1,
        "app" => 2,
        "views" => 3,
        "cli" => 4,
        _ => return None,
    })
}

/// The layer of a top-level module of `gaptop-core`, lowest first; None for the crate root.
/// `sources` and `analysis` share a layer but never import each other ([`stage_violations`]).
fn core_layer(module: &str) -> Option<u8> {
    Some(match module {
        "units" | "frames" | "text" | "files" => 0,
        "model" => 1,
        "sources" | "analysis" => 2,
        _ => return None,
    })
}

/// The top-level module a source file belongs to (`core/src/sources/nsys/mod.rs` is `sources`).
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

/// Where a module reaches up to a higher layer (of `layer`): `file:line: module uses
/// crate::other`.
fn violations(layer: Layer, module: &str, file: &str, text: &str) -> Vec<String> {
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

/// Each file's group (its module, its stage) and what is wrong in it, by `check` (None: the
/// file is in no group): the groups seen, and every finding.
fn scan(
    files: &[PathBuf],
    check: impl Fn(&Path, &str) -> Option<(String, Vec<String>)>,
) -> (std::collections::BTreeSet<String>, Vec<String>) {
    let mut seen = std::collections::BTreeSet::new();
    let mut bad = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        if let Some((group, found)) = check(f, &text) {
            seen.insert(group);
            bad.extend(found);
        }
    }
    (seen, bad)
}

#[test]
fn modules_depend_in_one_direction() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crates: [(&str, Layer); 2] = [("src", viewer_layer), ("core/src", core_layer)];
    for (dir, layer) in crates {
        let src = root.join(dir);
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        let (seen, bad) = scan(&files, |f, text| {
            let module = module_of(&src, f);
            let bad = violations(layer, &module, &f.display().to_string(), text);
            Some((module, bad))
        });
        assert!(
            bad.is_empty(),
            "imports against the layering:\n{}",
            bad.join("\n")
        );
        // Every top-level module has a layer: a new one must be placed in the rule.
        for m in &seen {
            assert!(
                layer(m).is_some() || m == "lib" || m == "main",
                "{dir}: module {m} has no layer in tests/layers.rs (and ARCHITECTURE.md)"
            );
        }
    }
}

#[test]
fn the_check_catches_an_upward_import() {
    // A report that reaches up to the UI.
    let text = "use gaptop_core::model::store::Store;\nuse crate::app::App;\n";
    assert_eq!(
        violations(viewer_layer, "report", "src/report.rs", text),
        vec!["src/report.rs:2: report uses crate::app"]
    );
    // Paths in expressions count too; comments and other crates' names do not.
    let text = "let k = crate::views::short_kernel(x); // crate::app\nuse gaptop_crate::app;\n";
    assert_eq!(
        violations(viewer_layer, "report", "src/report.rs", text),
        vec!["src/report.rs:1: report uses crate::views"]
    );
    assert!(violations(
        viewer_layer,
        "views",
        "src/views/mod.rs",
        "use crate::app::App;"
    )
    .is_empty());
    // In the core: how times read, reaching up to the store.
    let text = "use crate::model::store::Store;\n";
    assert_eq!(
        violations(core_layer, "units", "core/src/units.rs", text),
        vec!["core/src/units.rs:1: units uses crate::model"]
    );
    assert!(violations(core_layer, "analysis", "a.rs", "use crate::units::Ns;").is_empty());
    assert!(violations(core_layer, "analysis", "a.rs", text).is_empty());
}

/// The core's stages, each a folder of `core/src`.
const STAGES: [&str; 3] = ["analysis", "model", "sources"];

/// The stage of the core a file is in (`core/src/sources/kineto.rs` is `sources`).
fn stage_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_string_lossy();
    (rel.components().count() > 1 && STAGES.contains(&&*first)).then(|| first.to_string())
}

/// Where a stage of the core imports a stage it must not: `file:line: sources uses
/// crate::analysis`.
fn stage_violations(stage: &str, file: &str, text: &str) -> Vec<String> {
    let banned: &[&str] = match stage {
        "model" => &["sources", "analysis"],
        "sources" => &["analysis"],
        "analysis" => &["sources"],
        _ => &[],
    };
    let mut out = Vec::new();
    for (n, line) in code_lines(text) {
        for b in banned {
            if line.contains(&format!("crate::{b}")) {
                out.push(format!("{file}:{n}: {stage} uses crate::{b}"));
            }
        }
    }
    out
}

/// A source text's lines (numbered from 1) without comments, up to its inline test module.
fn code_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if starts_tests(&lines, i) {
            break;
        }
        let code = match line.find("//") {
            Some(j) => &line[..j],
            None => line,
        };
        out.push((i + 1, code));
    }
    out
}

/// Whether line `i` opens the file's inline test module (`#[cfg(test)]` then `mod x {`); a
/// `#[cfg(test)] mod tests;` declaration does not.
fn starts_tests(lines: &[&str], i: usize) -> bool {
    lines[i].trim() == "#[cfg(test)]"
        && lines[i + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("#["))
            .is_some_and(|l| l.starts_with("mod ") && l.ends_with('{'))
}

/// Lines of a source file before its tests: all of them, up to an inline test module; none
/// for a file that is itself tests (`tests.rs`, or under a `tests` folder).
fn lines_before_tests(rel: &Path, text: &str) -> usize {
    if rel.components().any(|c| c.as_os_str() == "tests") || rel.ends_with("tests.rs") {
        return 0;
    }
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len())
        .find(|&i| starts_tests(&lines, i))
        .unwrap_or(lines.len())
}

/// The module path of a file under a crate's `src` (`model/store.rs` is `model::store`, a `mod.rs` its folder's, `lib.rs` the root's); None for test
/// files and a binary's root.
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.iter().any(|p| p == "tests") || stem == "tests" || stem == "main" {
        return None;
    }
    if stem != "mod" && stem != "lib" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// The paths a module's code names: each `crate::`, `super::` and `self::` path (and each item
/// of a `use …::{…}` group) resolved against the module, and each `child::` path of a child
/// it declares (`mod child;`).
fn named_paths(module: &[String], text: &str) -> Vec<Vec<String>> {
    let code: Vec<&str> = code_lines(text).into_iter().map(|(_, l)| l).collect();
    let code = code.join("\n");
    let children: Vec<String> = code
        .split(';')
        .filter_map(|s| {
            let s = s.trim();
            let s = s.strip_prefix("pub ").unwrap_or(s);
            let s = s.strip_prefix("pub(crate) ").unwrap_or(s);
            let name = s.rsplit('\n').next()?.trim().strip_prefix("mod ")?;
            let name = name.trim();
            name.chars()
                .all(|c| c.is_alphanumeric() || c == '_')
                .then(|| name.to_string())
        })
        .collect();
    let bytes = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if !ident(bytes[i]) || (i > 0 && (ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            i += 1;
            continue;
        }
        let (path, end) = path_at(&code, i);
        // `mod child;` declares and `pub(in crate::app)` restricts: neither imports.
        let before = code[..i].trim_end();
        let declares =
            (before.ends_with("mod") && !before.ends_with("::mod")) || before.ends_with("pub(in");
        i = end.max(i + 1);
        if declares {
            continue;
        }
        let Some(first) = path.first().map(|p| p[0].clone()) else {
            continue;
        };
        let base: Vec<String> = match first.as_str() {
            "crate" => Vec::new(),
            "self" => module.to_vec(),
            "super" => module.to_vec(),
            c if children.iter().any(|k| k == c) => module.to_vec(),
            _ => continue,
        };
        for p in path {
            // A bare `self` or `super` (`self.x`, `pub(super)`) names no path.
            if p.len() < 2 {
                continue;
            }
            let mut full = base.clone();
            let mut segs = p.iter().peekable();
            if first == "crate" || first == "self" {
                segs.next();
            }
            while segs.peek().is_some_and(|s| *s == "super") {
                full.pop();
                segs.next();
            }
            full.extend(segs.filter(|s| *s != "self").cloned());
            out.push(full);
        }
    }
    out
}

/// The path that starts at byte `i` of `code`: its segments, or one list per item of a
/// trailing `{…}` group (each with the path before the group); and where it ends.
fn path_at(code: &str, i: usize) -> (Vec<Vec<String>>, usize) {
    let b = code.as_bytes();
    let ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut segs = Vec::new();
    let mut j = i;
    loop {
        let s = j;
        while j < b.len() && ident(b[j]) {
            j += 1;
        }
        if s == j {
            break;
        }
        segs.push(code[s..j].to_string());
        if !code[j..].starts_with("::") {
            break;
        }
        j += 2;
        if code[j..].starts_with('{') {
            let mut depth = 0;
            let mut k = j;
            for (n, c) in code[j..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    k = j + n;
                    break;
                }
            }
            let inner = &code[j + 1..k.max(j + 1)];
            let mut items = Vec::new();
            let mut depth = 0;
            let mut start = 0;
            for (n, c) in inner.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        items.push(&inner[start..n]);
                        start = n + 1;
                    }
                    _ => {}
                }
            }
            items.push(&inner[start..]);
            let paths = items
                .iter()
                .map(|it| it.trim())
                .filter(|it| !it.is_empty())
                .map(|it| {
                    let mut p = segs.clone();
                    let head = it.split(" as ").next().unwrap_or(it);
                    p.extend(
                        head.split("::")
                            .map(|s| s.trim().to_string())
                            .take_while(|s| !s.starts_with('{') && !s.is_empty()),
                    );
                    p
                })
                .collect();
            return (paths, k + 1);
        }
    }
    (vec![segs], j)
}

/// Module `from`'s imports: the modules (of `modules`) its named paths fall in, by the longest
/// module path each starts with, leaving out itself and the crate's root.
fn imports(
    from: &[String],
    paths: &[Vec<String>],
    modules: &std::collections::BTreeSet<Vec<String>>,
) -> std::collections::BTreeSet<Vec<String>> {
    let mut out = std::collections::BTreeSet::new();
    for p in paths {
        if let Some(m) = (1..=p.len())
            .rev()
            .map(|n| p[..n].to_vec())
            .find(|m| modules.contains(m))
        {
            if m != from {
                out.insert(m);
            }
        }
    }
    out
}

type Graph = std::collections::BTreeMap<Vec<String>, std::collections::BTreeSet<Vec<String>>>;

/// A circle of the graph, as `a -> b -> a`, if it has one.
fn circle(graph: &Graph) -> Option<String> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Open,
        Done,
    }
    let names: Vec<&Vec<String>> = graph.keys().collect();
    let mut mark: std::collections::BTreeMap<&Vec<String>, Mark> =
        names.iter().map(|n| (*n, Mark::New)).collect();
    let show = |m: &Vec<String>| m.join("::");
    for start in &names {
        if mark[*start] != Mark::New {
            continue;
        }
        // Depth-first, with an explicit stack of (module, its imports still to visit).
        let mut path: Vec<(&Vec<String>, Vec<&Vec<String>>)> =
            vec![(*start, graph[*start].iter().collect())];
        mark.insert(*start, Mark::Open);
        while let Some((node, todo)) = path.last_mut() {
            let node = *node;
            match todo.pop() {
                Some(next) if graph.contains_key(next) => match mark[next] {
                    Mark::New => {
                        mark.insert(next, Mark::Open);
                        path.push((next, graph[next].iter().collect()));
                    }
                    Mark::Open => {
                        let from = path.iter().position(|(m, _)| *m == next).unwrap_or(0);
                        let mut names: Vec<String> =
                            path[from..].iter().map(|(m, _)| show(m)).collect();
                        names.push(show(next));
                        return Some(names.join(" -> "));
                    }
                    Mark::Done => {}
                },
                Some(_) => {}
                None => {
                    mark.insert(node, Mark::Done);
                    path.pop();
                }
            }
        }
    }
    None
}

/// The import graph of the modules of a crate's `src`.
fn graph_of(src: &Path) -> Graph {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let texts: Vec<(Vec<String>, String)> = files
        .iter()
        .filter_map(|f| Some((module_path(src, f)?, std::fs::read_to_string(f).unwrap())))
        .collect();
    let modules = texts.iter().map(|(m, _)| m.clone()).collect();
    texts
        .iter()
        .map(|(m, t)| (m.clone(), imports(m, &named_paths(m, t), &modules)))
        .collect()
}

#[test]
fn the_stages_of_the_core_import_down_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("core/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let (stages, bad) = scan(&files, |f, text| {
        let stage = stage_of(&src, f)?;
        let bad = stage_violations(&stage, &f.display().to_string(), text);
        Some((stage, bad))
    });
    assert!(
        bad.is_empty(),
        "imports between stages:\n{}",
        bad.join("\n")
    );
    assert_eq!(
        stages.into_iter().collect::<Vec<_>>(),
        STAGES,
        "the core's three stages are found"
    );
}

/// Every crate's source folder, for the checks that hold in all of them.
const SOURCES: [&str; 5] = [
    "src",
    "core/src",
    "collector/src",
    "wire/src",
    "pystack/src",
];

#[test]
fn no_modules_import_each_other_in_a_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for src in SOURCES.map(|dir| root.join(dir)) {
        let graph = graph_of(&src);
        assert!(!graph.is_empty(), "{}: modules not found", src.display());
        if let Some(c) = circle(&graph) {
            panic!(
                "{}: modules import each other in a circle: {c}",
                src.display()
            );
        }
    }
}

#[test]
fn no_file_holds_over_700_lines_before_its_tests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut over = Vec::new();
    for src in SOURCES.map(|dir| root.join(dir)) {
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for f in files {
            let rel = f.strip_prefix(root).unwrap();
            let n = lines_before_tests(rel, &std::fs::read_to_string(&f).unwrap());
            if n > 700 {
                over.push(format!("{}: {n} lines", rel.display()));
            }
        }
    }
    assert!(
        over.is_empty(),
        "files over 700 lines:\n{}",
        over.join("\n")
    );
}

#[test]
fn the_checks_catch_a_reader_importing_analysis_and_a_circle() {
    // A reader that reaches into the analysis, and the analysis into a reader.
    let text = "use crate::model::store::Store;\nuse crate::analysis::gaps::Gap;\n";
    assert_eq!(
        stage_violations("sources", "core/src/sources/kineto.rs", text),
        vec!["core/src/sources/kineto.rs:2: sources uses crate::analysis"]
    );
    let text = "let k = crate::sources::kineto::load(p); // crate::sources\n";
    assert_eq!(stage_violations("analysis", "a.rs", text).len(), 1);
    assert_eq!(stage_violations("model", "m.rs", text).len(), 1);
    assert!(stage_violations("sources", "s.rs", "use crate::model::store;").is_empty());

    // Two modules that import each other, through `super`, a group and a child's name.
    let m = |s: &str| s.split("::").map(str::to_string).collect::<Vec<String>>();
    let modules = [
        m("app"),
        m("app::view"),
        m("app::keys"),
        m("model"),
        m("units"),
    ]
    .into_iter()
    .collect();
    let mut graph = Graph::new();
    let app = "mod view;\nmod keys;\nuse crate::units::Ns;\nfn f() { view::draw(); }\n";
    let view =
        "use super::{keys::Key, App};\npub(super) fn f() {}\npub(in crate::model) fn g() {}\n";
    let keys = "use crate::units::{self, Ns};\n";
    for (name, text) in [("app", app), ("app::view", view), ("app::keys", keys)] {
        let me = m(name);
        graph.insert(me.clone(), imports(&me, &named_paths(&me, text), &modules));
    }
    assert_eq!(
        graph[&m("app")],
        [m("app::view"), m("units")].into_iter().collect()
    );
    assert_eq!(
        graph[&m("app::view")],
        [m("app"), m("app::keys")].into_iter().collect()
    );
    assert_eq!(graph[&m("app::keys")], [m("units")].into_iter().collect());
    let c = circle(&graph).expect("app and app::view import each other");
    assert!(
        c == "app -> app::view -> app" || c == "app::view -> app -> app::view",
        "{c}"
    );
    // Without the view's `App`, no circle.
    graph.insert(m("app::view"), [m("app::keys")].into_iter().collect());
    assert_eq!(circle(&graph), None);

    // Lines before the tests: an inline test module ends the count, a declaration does not.
    let text = "fn a() {}\n#[cfg(test)]\nmod tests;\nfn b() {}\n#[cfg(test)]\nmod tests {\n}\n";
    assert_eq!(lines_before_tests(Path::new("src/a.rs"), text), 4);
    assert_eq!(lines_before_tests(Path::new("src/x/tests.rs"), text), 0);
}

/// The workspace's crates (folder, package) and the gaptop crates each may depend on: the
/// record format and the Python-stack reader at the bottom, depending on no other; the core
/// (sources, model, analysis) on those two; the collector on those two; the viewer on the core
/// and those two; the test double on none.
const CRATES: &[(&str, &[&str])] = &[
    ("wire", &[]),
    ("pystack", &[]),
    ("core", &["gaptop-wire", "gaptop-pystack"]),
    ("collector", &["gaptop-wire", "gaptop-pystack"]),
    ("collector/fake-cupti", &[]),
    (".", &["gaptop-core", "gaptop-wire", "gaptop-pystack"]),
];

/// What the core may not depend on: a terminal, an HTTP server, an async runtime, metrics'
/// exposition. The report, `serve` and the UI are the viewer's.
const NOT_IN_CORE: &[&str] = &[
    "ratatui",
    "crossterm",
    "tui-tree-widget",
    "axum",
    "hyper",
    "hyper-util",
    "tokio",
    "prometheus-client",
];

/// The crates a manifest's `[dependencies]` name (dev-dependencies may reach up: the
/// collector's tests drive the core).
fn dependencies(toml: &str) -> Vec<&str> {
    let deps = toml
        .split("\n[")
        .find(|s| s.starts_with("dependencies]"))
        .unwrap_or("");
    deps.lines()
        .skip(1)
        .map(|line| line.split([' ', '=']).next().unwrap_or(""))
        .filter(|name| !name.is_empty() && !name.starts_with('#'))
        .collect()
}

/// What is wrong with crate `dir`'s dependencies: a gaptop crate not in `allowed`, or (for the
/// core) one of [`NOT_IN_CORE`].
fn crate_violations(dir: &str, toml: &str, allowed: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for name in dependencies(toml) {
        if name.starts_with("gaptop") && !allowed.contains(&name) {
            out.push(format!(
                "{dir}/Cargo.toml depends on {name}: only {allowed:?} may be"
            ));
        }
        if dir == "core" && NOT_IN_CORE.contains(&name) {
            out.push(format!(
                "core/Cargo.toml depends on {name}: the core has no UI or server"
            ));
        }
    }
    out
}

#[test]
fn crates_depend_one_way() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let mut bad = Vec::new();
    for (dir, allowed) in CRATES {
        assert!(
            workspace.contains(&format!("\"{dir}\"")),
            "{dir} is not a workspace member"
        );
        let toml = std::fs::read_to_string(root.join(dir).join("Cargo.toml")).unwrap();
        bad.extend(crate_violations(dir, &toml, allowed));
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_check_catches_a_crate_depending_up_or_a_ui_in_the_core() {
    let toml = "[package]\nname = \"gaptop-core\"\n\n[dependencies]\ngaptop-wire = { path = \"../wire\" }\n# a comment\nratatui = \"0.30\"\ngaptop = { path = \"..\" }\n\n[dev-dependencies]\ntokio = \"1\"\n";
    assert_eq!(
        dependencies(toml),
        ["gaptop-wire", "ratatui", "gaptop"],
        "dev-dependencies and comments are not dependencies"
    );
    assert_eq!(
        crate_violations("core", toml, &["gaptop-wire"]),
        [
            "core/Cargo.toml depends on ratatui: the core has no UI or server",
            "core/Cargo.toml depends on gaptop: only [\"gaptop-wire\"] may be",
        ]
    );
    // The viewer may have a terminal.
    assert_eq!(
        crate_violations(".", toml, &["gaptop-wire", "gaptop"]),
        Vec::<String>::new()
    );
}

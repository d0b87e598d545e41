//! The line-table reader against every CPython on this machine (3.9 and later, each in its
//! version's format: `gaptop_pystack::lines::Table`): the line of every instruction of real
//! code objects, as CPython itself maps them (`PyCode_Addr2Line`, which the collector calls in
//! process, and from 3.10 `co_lines`). The walk itself is tested on every version by the
//! collector's tests (in process: `pystack.rs`; from outside: `pysamples.rs`).

#[path = "support/pythons.rs"]
mod pythons;

use gaptop_pystack::lines::Table;

/// For each code object: its table (hex), its first line, and (byte offset, line by
/// `co_lines` or -1 where it has none or there is no `co_lines`, line by `PyCode_Addr2Line`).
const SCRIPT: &str = r#"
import sys, json, dis, inspect, collections, ctypes
a2l = ctypes.pythonapi.PyCode_Addr2Line
a2l.argtypes = [ctypes.py_object, ctypes.c_int]
a2l.restype = ctypes.c_int
out = []
for fn in (json.dumps, json.JSONEncoder.iterencode, dis.dis, inspect.getsourcelines, collections.namedtuple):
    c = fn.__code__
    lines = {}
    if hasattr(c, "co_lines"):
        for start, end, line in c.co_lines():
            for off in range(start, end, 2):
                lines[off] = -1 if line is None else line
    offsets = sorted(lines) if lines else range(0, len(c.co_code), 2)
    want = [[off, lines.get(off, -1), a2l(c, off)] for off in offsets]
    table = c.co_lnotab if sys.version_info < (3, 10) else c.co_linetable
    out.append([table.hex(), c.co_firstlineno, want])
print(json.dumps(out))
"#;

#[test]
fn lines_match_what_each_cpython_says_of_its_own_code() {
    let mut tested = 0;
    for (version, python) in pythons::pythons() {
        let format = Table::of(Some(version.1));
        let o = std::process::Command::new(&python)
            .args(["-c", SCRIPT])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        /// A line table (hex), the first line, and (offset, line, line) triples.
        type Case = (String, i64, Vec<(usize, i64, i64)>);
        let cases: Vec<Case> = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("{version:?}: the script's JSON: {e}\n{text}"));
        assert_eq!(cases.len(), 5);
        for (hex, first, want) in cases {
            let table: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            assert!(want.len() > 10);
            for (offset, by_lines, by_api) in want {
                let got = format.line(&table, first, offset).unwrap_or(-1);
                assert_eq!(
                    got, by_api,
                    "{version:?}: offset {offset} of a code object at line {first}"
                );
                if version >= (3, 10) {
                    assert_eq!(
                        got, by_lines,
                        "{version:?}: offset {offset} of a code object at line {first}"
                    );
                }
            }
        }
        tested += 1;
    }
    if tested == 0 {
        eprintln!("no CPython 3.9 or later here: the line tables are not tested");
    }
}

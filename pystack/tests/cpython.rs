//! The location-table reader against every CPython on this machine (3.11 and later, whose
//! format it reads): the line of every instruction of real code objects, as CPython itself
//! maps them (`co_lines`). The walk itself is tested on every version by the collector's
//! tests (in process: `pystack.rs`; from outside: `pysamples.rs`).

#[path = "support/pythons.rs"]
mod pythons;

use gaptop_pystack::line_of;

const SCRIPT: &str = r#"
import sys, json, dis, inspect, collections
out = []
for fn in (json.dumps, json.JSONEncoder.iterencode, dis.dis, inspect.getsourcelines, collections.namedtuple):
    c = fn.__code__
    want = []
    for start, end, line in c.co_lines():
        for off in range(start, end, 2):
            want.append([off // 2, -1 if line is None else line])
    out.append([c.co_linetable.hex(), c.co_firstlineno, want])
print(json.dumps(out))
"#;

#[test]
fn lines_match_what_each_cpython_says_of_its_own_code() {
    let mut tested = 0;
    for (version, python) in pythons::pythons() {
        if version < (3, 11) {
            continue;
        }
        let o = std::process::Command::new(&python)
            .args(["-c", SCRIPT])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        /// A location table (hex), the first line, and (instruction, line) pairs.
        type Case = (String, i64, Vec<(usize, i64)>);
        let cases: Vec<Case> = serde_json::from_str(text.trim())
            .unwrap_or_else(|e| panic!("{version:?}: the script's JSON: {e}\n{text}"));
        assert_eq!(cases.len(), 5);
        for (hex, first, want) in cases {
            let table: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            assert!(want.len() > 10);
            for (index, line) in want {
                let got = line_of(&table, first, index).unwrap_or(-1);
                assert_eq!(
                    got, line,
                    "{version:?}: instruction {index} of a code object at line {first}"
                );
            }
        }
        tested += 1;
    }
    if tested == 0 {
        eprintln!("no CPython 3.11 or later here: the location table is not tested");
    }
}

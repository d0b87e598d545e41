//! Python frames in CPU samples, read from outside the program.
//!
//! A native sample of a Python program names the interpreter (`_PyEval_EvalFrameDefault`) where
//! the program's own functions ran. As out-of-process samplers do, the sampler reads the
//! program's Python frames from its memory (`process_vm_readv`, which fails instead of faulting
//! and never stops the program) about every millisecond, and each native sample takes the
//! snapshot of its thread nearest in time: the interpreter's frames are replaced by the Python
//! frames they were running ([`merge`]).
//!
//! Where the structures lie is not guessed: the collector, once its calibration ran inside the
//! interpreter, writes what it confirmed as `python-<pid>` beside the viewer's socket
//! ([`Layout::parse`]). A program without the collector, or an interpreter whose layout it did
//! not recognize, keeps native samples.
//!
//! A frame reads as the collector's launch stacks do: `path/file.py(LINE): Class.method`, the
//! line found from the code object's location table ([`line_of`], CPython 3.11's format and
//! later's) at the frame's current instruction, or the function's first line where that is
//! not known.

use std::collections::{HashMap, VecDeque};
use std::io::IoSliceMut;
use std::sync::Arc;

use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;

/// Where the program's interpreter keeps what a walk reads: the collector's `python-<pid>`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    pub interp: usize,
    pub threads_head: usize,
    pub ts_next: usize,
    pub ts_native_tid: usize,
    pub ts_frame: usize,
    pub ts_frame_indirect: Option<usize>,
    pub frame_code: usize,
    pub frame_prev: usize,
    pub code_type: usize,
    pub unicode_type: usize,
    pub code_filename: usize,
    pub code_qualname: usize,
    pub str_ascii_data: usize,
    /// A frame's current instruction (a pointer) and where the code object's bytecode starts.
    pub instr: Option<(usize, usize)>,
    /// `co_linetable`, `co_firstlineno` and a bytes object's size and data offsets.
    pub lines: Option<LineFields>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineFields {
    pub linetable: usize,
    pub firstlineno: usize,
    pub bytes_size: usize,
    pub bytes_data: usize,
}

impl Layout {
    /// Reads the collector's `key value` lines; one line says what is missing or wrong.
    pub fn parse(text: &str) -> Result<Layout, String> {
        let mut kv: HashMap<&str, &str> = HashMap::new();
        for line in text.lines() {
            if let Some((k, v)) = line.split_once(' ') {
                kv.insert(k, v.trim());
            }
        }
        if kv.get("gaptop_python_layout") != Some(&"1") {
            return Err("not a gaptop Python layout (version 1)".into());
        }
        let num = |k: &str| -> Result<usize, String> {
            let v = kv.get(k).ok_or_else(|| format!("Python layout: no {k}"))?;
            let parsed = match v.strip_prefix("0x") {
                Some(h) => usize::from_str_radix(h, 16),
                None => v.parse(),
            };
            parsed.map_err(|_| format!("Python layout: {k} is not a number"))
        };
        let opt = |k: &str| kv.contains_key(k).then(|| num(k)).transpose();
        let small = |k: &str| -> Result<usize, String> {
            let v = num(k)?;
            (v < 1 << 16)
                .then_some(v)
                .ok_or_else(|| format!("Python layout: {k} out of range"))
        };
        let instr = match (opt("frame_instr")?, opt("code_units")?) {
            (Some(f), Some(c)) => Some((f, c)),
            _ => None,
        };
        let lines = match opt("code_linetable")? {
            Some(linetable) => Some(LineFields {
                linetable,
                firstlineno: small("code_firstlineno")?,
                bytes_size: small("bytes_size")?,
                bytes_data: small("bytes_data")?,
            }),
            None => None,
        };
        Ok(Layout {
            interp: num("interp")?,
            threads_head: small("threads_head")?,
            ts_next: small("ts_next")?,
            ts_native_tid: small("ts_native_tid")?,
            ts_frame: small("ts_frame")?,
            ts_frame_indirect: opt("ts_frame_indirect")?,
            frame_code: small("frame_code")?,
            frame_prev: small("frame_prev")?,
            code_type: num("code_type")?,
            unicode_type: num("unicode_type")?,
            code_filename: small("code_filename")?,
            code_qualname: small("code_qualname")?,
            str_ascii_data: small("str_ascii_data")?,
            instr,
            lines,
        })
    }
}

/// One frame of a thread's Python stack: the code object and the byte offset of its current
/// instruction (-1 where not known).
pub type RawFrame = (usize, i32);

/// The deepest Python stack read.
const MAX_DEPTH: usize = 256;
/// Threads of one interpreter looked at, at most.
const MAX_THREADS: usize = 4096;
/// The longest location table read.
const MAX_TABLE: usize = 1 << 20;

/// A code object as read: how its frames are named.
#[derive(Debug)]
struct Code {
    /// `file(` and `): qual`, around the line; None for the interpreter's entry shims.
    name: Option<(String, String)>,
    first: i64,
    table: Vec<u8>,
}

/// Reads one process's Python stacks. See the module's documentation.
pub struct Reader {
    pid: Pid,
    l: Layout,
    codes: HashMap<usize, Arc<Code>>,
    /// (native thread id, thread state) as last listed.
    threads: Vec<(u32, usize)>,
    listed: Option<std::time::Instant>,
}

impl Reader {
    pub fn new(pid: u32, l: Layout) -> Reader {
        Reader {
            pid: Pid::from_raw(pid as i32),
            l,
            codes: HashMap::new(),
            threads: Vec::new(),
            listed: None,
        }
    }

    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if addr < 4096 || buf.is_empty() {
            return false;
        }
        let n = buf.len();
        let remote = [RemoteIoVec { base: addr, len: n }];
        matches!(process_vm_readv(self.pid, &mut [IoSliceMut::new(buf)], &remote), Ok(k) if k == n)
    }

    fn word(&self, addr: usize) -> Option<usize> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b).then(|| usize::from_ne_bytes(b))
    }

    /// The interpreter's threads, (native id, state), listed again every 100 ms.
    fn list_threads(&mut self) {
        if self.listed.is_some_and(|t| t.elapsed().as_millis() < 100) {
            return;
        }
        self.listed = Some(std::time::Instant::now());
        self.threads.clear();
        let mut ts = self.word(self.l.interp + self.l.threads_head).unwrap_or(0);
        while ts != 0 && self.threads.len() < MAX_THREADS {
            let Some(tid) = self.word(ts + self.l.ts_native_tid) else {
                break;
            };
            self.threads.push((tid as u32, ts));
            ts = self.word(ts + self.l.ts_next).unwrap_or(0);
        }
    }

    /// How many threads the interpreter had when last listed.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// The Python stack now of every thread `want` accepts (by its native id), innermost
    /// frame first; threads running no Python are left out.
    pub fn stacks(&mut self, want: impl Fn(u32) -> bool) -> Vec<(u32, Vec<RawFrame>)> {
        self.list_threads();
        let threads = self.threads.clone();
        threads
            .into_iter()
            .filter(|&(tid, _)| want(tid))
            .filter_map(|(tid, ts)| {
                let s = self.walk(ts);
                (!s.is_empty()).then_some((tid, s))
            })
            .collect()
    }

    fn walk(&self, ts: usize) -> Vec<RawFrame> {
        let l = &self.l;
        let mut out = Vec::new();
        let mut f = self.word(ts + l.ts_frame).unwrap_or(0);
        if let (Some(o), true) = (l.ts_frame_indirect, f != 0) {
            f = self.word(f + o).unwrap_or(0);
        }
        let span = [l.frame_code, l.frame_prev, l.instr.map_or(0, |i| i.0)]
            .into_iter()
            .max()
            .unwrap_or(0)
            + 8;
        let mut buf = vec![0u8; span];
        let at = |b: &[u8], o: usize| usize::from_ne_bytes(b[o..o + 8].try_into().unwrap());
        while f != 0 && out.len() < MAX_DEPTH {
            if !self.read(f, &mut buf) {
                break;
            }
            let code = at(&buf, l.frame_code);
            if !self.codes.contains_key(&code) && self.word(code + 8) != Some(l.code_type) {
                break;
            }
            let lasti = match l.instr {
                Some((fo, cs)) => at(&buf, fo)
                    .checked_sub(code + cs)
                    .filter(|&d| d < 1 << 24)
                    .map_or(-1, |d| d as i32),
                None => -1,
            };
            out.push((code, lasti));
            f = at(&buf, l.frame_prev);
        }
        out
    }

    /// A frame's name (`file(line): qual`), or None for an entry shim of the interpreter.
    pub fn name(&mut self, (code, lasti): RawFrame) -> Option<String> {
        let c = match self.codes.get(&code) {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(self.read_code(code));
                if self.codes.len() > 1 << 16 {
                    self.codes.clear();
                }
                self.codes.insert(code, c.clone());
                c
            }
        };
        let (file, qual) = c.name.as_ref()?;
        let line = (lasti >= 0)
            .then(|| line_of(&c.table, c.first, lasti as usize / 2))
            .flatten()
            .unwrap_or(c.first);
        Some(format!("{file}({line}): {qual}"))
    }

    fn read_code(&self, code: usize) -> Code {
        let l = &self.l;
        let file = self.string(self.word(code + l.code_filename).unwrap_or(0));
        let qual = self.string(self.word(code + l.code_qualname).unwrap_or(0));
        let (mut first, mut table) = (0, Vec::new());
        if let Some(lf) = l.lines {
            if let Some(w) = self.word((code + lf.firstlineno) & !7) {
                first = (w >> (8 * ((code + lf.firstlineno) & 7))) as u32 as i32 as i64;
            }
            let b = self.word(code + lf.linetable).unwrap_or(0);
            let n = self.word(b + lf.bytes_size).unwrap_or(0);
            if n > 0 && n <= MAX_TABLE {
                let mut t = vec![0u8; n];
                if self.read(b + lf.bytes_data, &mut t) {
                    table = t;
                }
            }
        }
        let shim = file.starts_with('<') && qual.starts_with('<') && file != "<stdin>";
        Code {
            name: (!shim).then_some((file, qual)),
            first,
            table,
        }
    }

    /// A str object's text (compact strings; `?` for what cannot be read).
    fn string(&self, s: usize) -> String {
        let l = &self.l;
        if s == 0 || self.word(s + 8) != Some(l.unicode_type) {
            return "?".into();
        }
        let (Some(len), Some(state)) = (self.word(s + 16), self.word(s + 32)) else {
            return "?".into();
        };
        let state = state as u32;
        let (kind, compact, ascii) = (
            (state >> 2) & 7,
            (state >> 5) & 1 == 1,
            (state >> 6) & 1 == 1,
        );
        let len = len.min(4096);
        if !compact || len == 0 {
            return "?".into();
        }
        if ascii {
            let mut b = vec![0u8; len];
            return if self.read(s + l.str_ascii_data, &mut b) {
                String::from_utf8_lossy(&b).into_owned()
            } else {
                "?".into()
            };
        }
        let width = match kind {
            1 => 1,
            2 => 2,
            _ => 4,
        };
        let mut b = vec![0u8; len * width];
        if !self.read(s + l.str_ascii_data + 16, &mut b) {
            return "?".into();
        }
        b.chunks_exact(width)
            .map(|c| {
                let cp = match width {
                    1 => c[0] as u32,
                    2 => u16::from_ne_bytes([c[0], c[1]]) as u32,
                    _ => u32::from_ne_bytes([c[0], c[1], c[2], c[3]]),
                };
                char::from_u32(cp).unwrap_or('?')
            })
            .collect()
    }
}

/// The line of the instruction at code unit `index`, from a location table in CPython 3.11's
/// format (`Objects/locations.md`): entries of `(length, line delta, columns)`, a start byte
/// each (bit 7 set, the form in bits 3..6, the length less one in bits 0..2), 6-bit varints.
/// None where the table says the instruction has no line, or ends before it.
pub fn line_of(table: &[u8], first: i64, index: usize) -> Option<i64> {
    let mut i = 0;
    let mut line = first;
    let mut addr = 0usize;
    let varint = |i: &mut usize| -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = *table.get(*i)?;
            *i += 1;
            v |= ((b & 63) as u64) << shift;
            if b & 64 == 0 {
                return Some(v);
            }
            shift += 6;
            if shift > 60 {
                return None;
            }
        }
    };
    let svarint = |i: &mut usize| -> Option<i64> {
        let v = varint(i)?;
        Some(if v & 1 == 1 {
            -((v >> 1) as i64)
        } else {
            (v >> 1) as i64
        })
    };
    while i < table.len() {
        let b = table[i];
        if b & 128 == 0 {
            return None;
        }
        i += 1;
        let form = (b >> 3) & 15;
        let len = (b & 7) as usize + 1;
        let here = match form {
            15 => None,
            14 => {
                line += svarint(&mut i)?;
                varint(&mut i)?;
                varint(&mut i)?;
                varint(&mut i)?;
                Some(line)
            }
            13 => {
                line += svarint(&mut i)?;
                Some(line)
            }
            10..=12 => {
                line += (form - 10) as i64;
                i += 2;
                Some(line)
            }
            _ => {
                i += 1;
                Some(line)
            }
        };
        if index < addr + len {
            return here;
        }
        addr += len;
    }
    None
}

/// Threads' Python stacks as read, the latest last, for pairing with their native samples.
pub struct History<T> {
    snaps: HashMap<(u32, u32), Reads<T>>,
}

/// One thread's reads, (time, stack), oldest first.
type Reads<T> = VecDeque<(i64, Arc<T>)>;

impl<T> Default for History<T> {
    fn default() -> Self {
        History {
            snaps: HashMap::new(),
        }
    }
}

/// Snapshots kept a thread: a little over the time between two drains of the perf rings.
const KEPT: usize = 512;

impl<T: PartialEq> History<T> {
    /// Adds what thread `tid` of `pid` ran at `time_ns` (the same stack as the last one
    /// shares its copy).
    pub fn push(&mut self, pid: u32, tid: u32, time_ns: i64, frames: T) {
        let q = self.snaps.entry((pid, tid)).or_default();
        if q.len() >= KEPT {
            q.pop_front();
        }
        let frames = match q.back() {
            Some((_, last)) if **last == frames => last.clone(),
            _ => Arc::new(frames),
        };
        q.push_back((time_ns, frames));
    }

    /// The snapshot of `tid` nearest `time_ns`, if one is within `within_ns`; else the one
    /// before it, if the one after it is `same` and both are within `bracket_ns` (a reader that
    /// fell behind while the thread stayed in the same functions).
    pub fn nearest(
        &self,
        (pid, tid): (u32, u32),
        time_ns: i64,
        (within_ns, bracket_ns): (i64, i64),
        same: impl Fn(&T, &T) -> bool,
    ) -> Option<&Arc<T>> {
        let q = self.snaps.get(&(pid, tid))?;
        let i = q.partition_point(|s| s.0 < time_ns);
        let (before, after) = (i.checked_sub(1).and_then(|j| q.get(j)), q.get(i));
        let near = [before, after]
            .into_iter()
            .flatten()
            .filter(|s| (s.0 - time_ns).abs() <= within_ns)
            .min_by_key(|s| (s.0 - time_ns).abs());
        if let Some(s) = near {
            return Some(&s.1);
        }
        match (before, after) {
            (Some(b), Some(a))
                if same(&b.1, &a.1)
                    && time_ns - b.0 <= bracket_ns
                    && a.0 - time_ns <= bracket_ns =>
            {
                Some(&b.1)
            }
            _ => None,
        }
    }

    /// Forgets snapshots older than `before_ns`.
    pub fn trim(&mut self, before_ns: i64) {
        for q in self.snaps.values_mut() {
            while q.front().is_some_and(|s| s.0 < before_ns) {
                q.pop_front();
            }
        }
        self.snaps.retain(|_, q| !q.is_empty());
    }
}

/// Whether two reads of a thread found it in the same functions (at any line).
pub fn same_functions(a: &[RawFrame], b: &[RawFrame]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.0 == y.0)
}

/// Whether a native frame is the interpreter's frame evaluator, which runs Python frames.
pub fn is_eval_frame(frame: &str) -> bool {
    frame.starts_with("_PyEval_EvalFrameDefault ") || frame.starts_with("_PyEval_EvalFrame ")
}

/// A native stack with its interpreter frames replaced by the Python frames they ran.
///
/// `native` is innermost first; `py` too, with `None` where the interpreter entered itself
/// from C (3.12's entry frames), which splits the Python frames into the runs of one
/// evaluator call each. When the runs and the evaluator frames agree in number, each evaluator
/// frame becomes its run and the native frames between them stay (a C extension calling back
/// into Python reads as it ran). Otherwise (3.11 marks no entries; a stack that changed
/// between the two reads) all the Python frames take the place of the evaluator frames, from
/// the outermost to the innermost, and the native frames between those go. A native stack that
/// reaches no evaluator frame (its copy cut short) gets the Python frames above it.
pub fn merge(native: &[String], py: &[Option<String>]) -> Vec<String> {
    let runs: Vec<Vec<&String>> = py
        .split(Option::is_none)
        .map(|r| r.iter().flatten().collect::<Vec<_>>())
        .filter(|r| !r.is_empty())
        .collect();
    let evals: Vec<usize> = native
        .iter()
        .enumerate()
        .filter(|(_, f)| is_eval_frame(f))
        .map(|(i, _)| i)
        .collect();
    if runs.is_empty() {
        return native.to_vec();
    }
    let all = || runs.iter().flatten().map(|s| s.to_string());
    let (Some(&inner), Some(&outer)) = (evals.first(), evals.last()) else {
        return native.iter().cloned().chain(all()).collect();
    };
    if evals.len() == runs.len() {
        let mut out = Vec::with_capacity(native.len() + py.len());
        let mut run = runs.iter();
        for f in native {
            if is_eval_frame(f) {
                out.extend(run.next().into_iter().flatten().map(|s| s.to_string()));
            } else {
                out.push(f.clone());
            }
        }
        return out;
    }
    native[..inner]
        .iter()
        .cloned()
        .chain(all())
        .chain(native[outer + 1..].iter().cloned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn p(v: &[Option<&str>]) -> Vec<Option<String>> {
        v.iter().map(|x| x.map(str::to_string)).collect()
    }

    #[test]
    fn each_evaluator_frame_becomes_its_run_of_python_frames() {
        let native = s(&[
            "pocketfft::r2c [_pocketfft_umath.so]",
            "_PyEval_EvalFrameDefault [python3.12]",
            "cfunction_call [python3.12]",
            "_PyEval_EvalFrameDefault [python3.12]",
            "main [python3.12]",
        ]);
        let py = p(&[
            Some("a.py(14): blur"),
            Some("a.py(20): Noisy.__getitem__"),
            None,
            Some("a.py(40): main"),
            None,
        ]);
        assert_eq!(
            merge(&native, &py),
            s(&[
                "pocketfft::r2c [_pocketfft_umath.so]",
                "a.py(14): blur",
                "a.py(20): Noisy.__getitem__",
                "cfunction_call [python3.12]",
                "a.py(40): main",
                "main [python3.12]",
            ])
        );
    }

    #[test]
    fn runs_that_do_not_match_take_the_evaluators_whole_span() {
        let native = s(&[
            "leaf [x.so]",
            "_PyEval_EvalFrameDefault [python3.11]",
            "glue [python3.11]",
            "_PyEval_EvalFrameDefault [python3.11]",
            "main [python3.11]",
        ]);
        let py = p(&[Some("a.py(1): f"), Some("a.py(2): g"), Some("a.py(3): h")]);
        assert_eq!(
            merge(&native, &py),
            s(&[
                "leaf [x.so]",
                "a.py(1): f",
                "a.py(2): g",
                "a.py(3): h",
                "main [python3.11]"
            ])
        );
        // A copy cut short of the interpreter: the Python frames above what it reached.
        assert_eq!(
            merge(&s(&["leaf [x.so]"]), &py),
            s(&["leaf [x.so]", "a.py(1): f", "a.py(2): g", "a.py(3): h"])
        );
        // No Python frames: the native stack as it was.
        assert_eq!(merge(&native, &[]), native);
    }

    #[test]
    fn the_nearest_snapshot_within_reach_is_taken() {
        let mut h = History::default();
        let a = Arc::new(p(&[Some("a.py(1): f")]));
        let b = Arc::new(p(&[Some("a.py(2): g")]));
        h.push(1, 2, 1_000_000, (*a).clone());
        h.push(1, 2, 2_000_000, (*b).clone());
        let same = |x: &Vec<Option<String>>, y: &Vec<Option<String>>| x == y;
        let near = |h: &History<_>, t| h.nearest((1, 2), t, (1_000_000, 10_000_000), same).cloned();
        assert_eq!(near(&h, 1_400_000), Some(a.clone()));
        assert_eq!(near(&h, 1_600_000), Some(b.clone()));
        assert_eq!(near(&h, 9_000_000), None, "too far");
        assert_eq!(
            h.nearest((1, 3), 1_000_000, (1_000_000, 0), same),
            None,
            "another thread"
        );
        // Far from both, between two reads of the same stack: that stack.
        h.push(1, 2, 8_000_000, (*b).clone());
        assert_eq!(near(&h, 5_000_000), Some(b.clone()));
        assert_eq!(
            h.nearest((1, 2), 5_000_000, (1_000_000, 2_000_000), same),
            None,
            "reads too far apart"
        );
        h.push(1, 2, 20_000_000, (*a).clone());
        assert_eq!(near(&h, 14_000_000), None, "the stack changed in between");
        h.trim(1_500_000);
        assert_eq!(near(&h, 1_000_000), Some(b.clone()));
    }

    #[test]
    fn a_layout_without_its_version_or_a_field_is_refused_in_one_line() {
        assert!(Layout::parse("interp 0x10\n").is_err());
        let e = Layout::parse("gaptop_python_layout 1\ninterp 0x10\n").unwrap_err();
        assert!(e.contains("threads_head"), "{e}");
    }

    /// The line of every instruction, as CPython itself maps them (`co_lines`), from the
    /// location table of real code objects of the python3 on this machine (3.11 or later).
    #[test]
    fn lines_match_what_cpython_says_of_its_own_code() {
        let script = r#"
import sys, json, dis, inspect, collections
if sys.version_info < (3, 11):
    print("SKIP"); sys.exit(0)
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
        let Ok(o) = std::process::Command::new("python3")
            .args(["-c", script])
            .output()
        else {
            panic!("python3 is needed for this test");
        };
        let text = String::from_utf8_lossy(&o.stdout);
        if text.trim() == "SKIP" {
            return;
        }
        /// A location table (hex), the first line, and (instruction, line) pairs.
        type Case = (String, i64, Vec<(usize, i64)>);
        let cases: Vec<Case> = serde_json::from_str(text.trim()).expect("the script's JSON");
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
                    "instruction {index} of a code object at line {first}"
                );
            }
        }
    }
}

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
//! ([`gaptop_pystack::ProcessLayout::parse`]). A program without the collector, or an
//! interpreter whose layout it did not recognize, keeps native samples. The threads, frames and
//! strings are read by `gaptop_pystack`'s walker and string reader, the collector's own,
//! here over [`gaptop_pystack::Process`].
//!
//! A frame reads as the collector's launch stacks do: `path/file.py(LINE): Class.method`, the
//! line found from the code object's line table, in its version's format
//! ([`gaptop_pystack::lines::Table`]: 3.9's `co_lnotab` to the location table of 3.11 and
//! later) at the frame's current instruction, or the function's first line where that is not
//! known. A thread is known by its native id: kept in its thread state from 3.11, read through
//! its `struct pthread` on 3.9 and 3.10 ([`gaptop_pystack::TidAt`]).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use gaptop_pystack::{self as pystack, Memory, Process, ProcessLayout};
use gaptop_wire::stackframe::python_name;

/// One frame of a thread's Python stack: the code object and the byte offset of its current
/// instruction (-1 where not known).
pub use gaptop_pystack::RawFrame;

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
    mem: Process,
    l: ProcessLayout,
    codes: HashMap<usize, Arc<Code>>,
    /// (native thread id, thread state) as last listed.
    threads: Vec<(u32, usize)>,
    listed: Option<std::time::Instant>,
}

impl Reader {
    pub fn new(pid: u32, l: ProcessLayout) -> Reader {
        Reader {
            mem: Process::new(pid),
            l,
            codes: HashMap::new(),
            threads: Vec::new(),
            listed: None,
        }
    }

    /// The interpreter's threads, (native id, state), listed again every 100 ms.
    fn list_threads(&mut self) {
        if self.listed.is_some_and(|t| t.elapsed().as_millis() < 100) {
            return;
        }
        self.listed = Some(std::time::Instant::now());
        self.threads.clear();
        let threads = &mut self.threads;
        pystack::threads(&self.mem, &self.l.threads, |tid, ts| {
            threads.push((tid, ts))
        });
    }

    /// How many threads the interpreter had when last listed.
    pub fn threads(&self) -> usize {
        self.threads.len()
    }

    /// Where the GIL lies and how, where the layout says (`gaptop_pystack::gil`).
    pub fn gil(&self) -> Option<(usize, pystack::gil::GilLayout)> {
        Some((self.l.gil?, pystack::gil::layout(self.l.minor?)?))
    }

    /// The native id of the thread that holds the GIL now: None where it is free, not known,
    /// or held by a thread state not listed (yet).
    pub fn gil_holder(&self) -> Option<u32> {
        let (at, l) = self.gil()?;
        let ts = pystack::gil::holder(&self.mem, at, &l)?;
        self.threads.iter().find(|t| t.1 == ts).map(|t| t.0)
    }

    /// The Python stack now of every thread `want` accepts (by its native id), innermost
    /// frame first; threads running no Python are left out.
    pub fn stacks(&mut self, want: impl Fn(u32) -> bool) -> Vec<(u32, Vec<RawFrame>)> {
        self.list_threads();
        self.threads
            .iter()
            .filter(|&&(tid, _)| want(tid))
            .filter_map(|&(tid, ts)| {
                let mut s = Vec::new();
                // A code object named before needs no check of its type.
                let known = |code| self.codes.contains_key(&code);
                // A walk cut short (the thread returned from a frame and called another
                // in its place while it was read) is read again, up to twice.
                for _ in 0..WALKS {
                    s.clear();
                    if pystack::walk(&self.mem, &self.l.frames, ts, known, |f| s.push(f)) {
                        break;
                    }
                }
                (!s.is_empty()).then_some((tid, s))
            })
            .collect()
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
        let table = pystack::lines::Table::of(self.l.minor);
        let line = (lasti >= 0)
            .then(|| table.line(&c.table, c.first, lasti as usize))
            .flatten()
            .unwrap_or(c.first);
        Some(python_name(file, line, qual))
    }

    fn read_code(&self, code: usize) -> Code {
        let (m, l) = (&self.mem, &self.l.frames);
        let file = pystack::read_str(m, l, m.word(code + l.code_filename).unwrap_or(0));
        let qual = pystack::read_str(m, l, m.word(code + l.code_qualname).unwrap_or(0));
        let (first, table) = match &self.l.lines {
            Some(lf) => pystack::code_lines(m, lf, code),
            None => (0, Vec::new()),
        };
        Code {
            name: (!pystack::is_entry_shim(&file, &qual)).then_some((file, qual)),
            first,
            table,
        }
    }
}

/// Walks of a thread's stack a read tries before it keeps one that was cut short.
const WALKS: usize = 3;

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
}

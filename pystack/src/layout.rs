//! Where an interpreter keeps what a walk reads, and its published text.
//!
//! Nothing here is guessed: the collector's calibration finds each offset inside the running
//! interpreter and confirms it against what the CPython API returns. [`Layout`] is what a walk
//! of one thread's frames needs; [`ProcessLayout`] adds, for a reader outside the process, where
//! the interpreter lists its threads and how a frame's line is found without calling CPython.
//! The collector writes a `ProcessLayout` as `key value` lines (`gaptop_python_layout 1`,
//! numbers in decimal, addresses in hex) into `python-<pid>` beside the viewer's socket; the
//! viewer's sampler parses it. Both ends use [`ProcessLayout::to_text`] and
//! [`ProcessLayout::parse`], so the text is defined once. Where calibration could not find the
//! layout, the file says why instead (one line, [`unavailable_text`]), so that the viewer can
//! say why a Python program's samples have no Python frames ([`Published::parse`]).

use std::collections::HashMap;
use std::fmt::Write as _;

/// Where one thread's frames and their code objects' names lie.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// Thread state + `ts_frame` holds a pointer: the current interpreter frame, or (3.11 and
    /// 3.12's `_PyCFrame`) a structure holding it at `ts_frame_indirect`.
    pub ts_frame: usize,
    pub ts_frame_indirect: Option<usize>,
    /// A frame's code object and its caller's frame.
    pub frame_code: usize,
    pub frame_prev: usize,
    /// How a frame's current instruction is found.
    pub instr: Instr,
    /// `PyCode_Type` and `PyUnicode_Type`: a frame whose code field is not a code object ends
    /// the walk; a name field that is not a str reads `?`.
    pub code_type: usize,
    pub unicode_type: usize,
    /// `Py_None` (`_Py_NoneStruct`), 0 where not known: 3.13's entry frames (pushed where C
    /// calls back into Python, e.g. `map` calling a Python function) run None in place of a
    /// code object, and the walk steps over them to their caller.
    pub none_object: usize,
    /// A code object's `co_filename` and `co_qualname` (`co_name` before 3.11).
    pub code_filename: usize,
    pub code_qualname: usize,
    /// Where a compact ASCII string's bytes start (a compact non-ASCII one's 16 bytes later).
    pub str_ascii_data: usize,
}

/// How a frame's current instruction offset (in bytes from the start of its bytecode, the
/// offset `PyCode_Addr2Line` takes) is found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Instr {
    /// Asked of the interpreter (3.12 and later, `PyUnstable_InterpreterFrame_GetLasti`): only
    /// a memory in the process can ([`crate::Memory::api_lasti`]).
    Api,
    /// 3.11 and later: an instruction pointer at `frame + frame_off`, into the bytecode that
    /// starts at `code + code_off`.
    Pointer { frame_off: usize, code_off: usize },
    /// 3.10: an instruction index (an int, in 2-byte units) at `frame + frame_off`.
    Index { frame_off: usize },
    /// 3.9: an instruction offset (an int, in bytes) at `frame + frame_off`.
    Offset { frame_off: usize },
    /// Not found: frames show their function's first line.
    #[default]
    Unknown,
}

/// Where the interpreter lists its thread states.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Threads {
    /// The interpreter (`PyInterpreterState_Head`), and where it keeps its first thread state.
    pub interp: usize,
    pub head: usize,
    /// A thread state's next one.
    pub next: usize,
    /// Where a thread state's native thread id is found.
    pub tid: TidAt,
}

/// Where a thread state's native thread id (the kernel's, `gettid()`) is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TidAt {
    /// In the thread state, at this offset (3.11 and later: `native_thread_id`).
    State(usize),
    /// In the C library's thread descriptor (3.9 and 3.10, which keep no native id): the
    /// thread state's `thread_id` at `thread_id` is `pthread_self()`, glibc's (and musl's)
    /// `struct pthread`, which keeps the thread's id, an int, at `pthread_tid`.
    Pthread {
        thread_id: usize,
        pthread_tid: usize,
    },
}

impl Default for TidAt {
    fn default() -> Self {
        TidAt::State(0)
    }
}

/// Where a code object keeps its `co_linetable` and `co_firstlineno`, and a bytes object its
/// size and bytes: a line found without calling CPython ([`crate::line_of`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineFields {
    pub linetable: usize,
    pub firstlineno: usize,
    pub bytes_size: usize,
    pub bytes_data: usize,
}

/// What a reader outside the process needs: the published layout (`python-<pid>`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessLayout {
    /// The interpreter's minor version (3.x), where it said.
    pub minor: Option<u32>,
    pub threads: Threads,
    /// The frames' layout; its `instr` is never `Api` (only a memory inside the process can
    /// ask the interpreter).
    pub frames: Layout,
    /// Where a code object's line table lies; the table is in the version's format
    /// ([`crate::lines::Table::of`]).
    pub lines: Option<LineFields>,
    /// Where the interpreter's GIL lies (`crate::gil`), where calibration found it.
    pub gil: Option<usize>,
}

impl ProcessLayout {
    /// The published text: `key value` lines, in a fixed order.
    pub fn to_text(&self) -> String {
        let (t, l) = (&self.threads, &self.frames);
        let mut out = String::new();
        let mut kv = |k: &str, v: String| {
            let _ = writeln!(out, "{k} {v}");
        };
        kv("gaptop_python_layout", "1".into());
        kv("minor", self.minor.map_or("?".into(), |m| m.to_string()));
        kv("interp", format!("{:#x}", t.interp));
        kv("threads_head", t.head.to_string());
        kv("ts_next", t.next.to_string());
        match t.tid {
            TidAt::State(o) => kv("ts_native_tid", o.to_string()),
            TidAt::Pthread {
                thread_id,
                pthread_tid,
            } => {
                kv("ts_thread_id", thread_id.to_string());
                kv("pthread_tid", pthread_tid.to_string());
            }
        }
        kv("ts_frame", l.ts_frame.to_string());
        if let Some(o) = l.ts_frame_indirect {
            kv("ts_frame_indirect", o.to_string());
        }
        kv("frame_code", l.frame_code.to_string());
        kv("frame_prev", l.frame_prev.to_string());
        kv("code_type", format!("{:#x}", l.code_type));
        kv("unicode_type", format!("{:#x}", l.unicode_type));
        if l.none_object != 0 {
            kv("none_object", format!("{:#x}", l.none_object));
        }
        kv("code_filename", l.code_filename.to_string());
        kv("code_qualname", l.code_qualname.to_string());
        kv("str_ascii_data", l.str_ascii_data.to_string());
        match l.instr {
            Instr::Pointer {
                frame_off,
                code_off,
            } => {
                kv("frame_instr", frame_off.to_string());
                kv("code_units", code_off.to_string());
            }
            Instr::Index { frame_off } => kv("frame_lasti_index", frame_off.to_string()),
            Instr::Offset { frame_off } => kv("frame_lasti_offset", frame_off.to_string()),
            Instr::Api | Instr::Unknown => {}
        }
        if let Some(lf) = self.lines {
            kv("code_linetable", lf.linetable.to_string());
            kv("code_firstlineno", lf.firstlineno.to_string());
            kv("bytes_size", lf.bytes_size.to_string());
            kv("bytes_data", lf.bytes_data.to_string());
        }
        if let Some(g) = self.gil {
            kv("gil", format!("{g:#x}"));
        }
        out
    }

    /// Reads the published text; one line says what is missing or wrong. Keys it does not
    /// know are passed over.
    pub fn parse(text: &str) -> Result<ProcessLayout, String> {
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
            (Some(frame_off), Some(code_off)) => Instr::Pointer {
                frame_off,
                code_off,
            },
            _ => match (opt("frame_lasti_index")?, opt("frame_lasti_offset")?) {
                (Some(frame_off), _) => Instr::Index { frame_off },
                (_, Some(frame_off)) => Instr::Offset { frame_off },
                _ => Instr::Unknown,
            },
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
        Ok(ProcessLayout {
            minor: kv.get("minor").and_then(|m| m.parse().ok()),
            threads: Threads {
                interp: num("interp")?,
                head: small("threads_head")?,
                next: small("ts_next")?,
                // A native id in the thread state (every layout before 3.9's and 3.10's), or
                // through the thread's `struct pthread`.
                tid: if kv.contains_key("ts_thread_id") && !kv.contains_key("ts_native_tid") {
                    TidAt::Pthread {
                        thread_id: small("ts_thread_id")?,
                        pthread_tid: small("pthread_tid")?,
                    }
                } else {
                    TidAt::State(small("ts_native_tid")?)
                },
            },
            frames: Layout {
                ts_frame: small("ts_frame")?,
                ts_frame_indirect: opt("ts_frame_indirect")?,
                frame_code: small("frame_code")?,
                frame_prev: small("frame_prev")?,
                instr,
                code_type: num("code_type")?,
                unicode_type: num("unicode_type")?,
                none_object: opt("none_object")?.unwrap_or(0),
                code_filename: small("code_filename")?,
                code_qualname: small("code_qualname")?,
                str_ascii_data: small("str_ascii_data")?,
            },
            lines,
            gil: opt("gil")?,
        })
    }
}

/// The first word of a published text that says why there is no layout.
const UNAVAILABLE: &str = "gaptop_python_unavailable";

/// The published text of a process whose layout was not found: `reason` on one line.
pub fn unavailable_text(reason: &str) -> String {
    let one_line: String = reason.split_whitespace().collect::<Vec<_>>().join(" ");
    format!("{UNAVAILABLE} {one_line}\n")
}

/// What a process published: its layout, or why it has none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Published {
    Layout(ProcessLayout),
    Unavailable(String),
}

impl Published {
    /// Reads either text; an error says what is wrong with a layout that does not parse.
    pub fn parse(text: &str) -> Result<Published, String> {
        match text.strip_prefix(UNAVAILABLE) {
            Some(rest) if rest.is_empty() || rest.starts_with([' ', '\n']) => {
                let why = rest.lines().next().unwrap_or("").trim();
                Ok(Published::Unavailable(if why.is_empty() {
                    "no reason given".into()
                } else {
                    why.into()
                }))
            }
            _ => ProcessLayout::parse(text).map(Published::Layout),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_without_a_layout_says_why_in_one_line() {
        let t = unavailable_text("interpreter layout\nnot recognized");
        assert_eq!(
            t,
            "gaptop_python_unavailable interpreter layout not recognized\n"
        );
        assert_eq!(
            Published::parse(&t),
            Ok(Published::Unavailable(
                "interpreter layout not recognized".into()
            ))
        );
        assert_eq!(
            Published::parse("gaptop_python_unavailable\n"),
            Ok(Published::Unavailable("no reason given".into()))
        );
        // A layout still reads as one; a text that is neither says what is wrong.
        assert_eq!(
            Published::parse(FULL),
            Ok(Published::Layout(ProcessLayout::parse(FULL).unwrap()))
        );
        assert!(Published::parse("gaptop_python_unavailablex y\n").is_err());
    }

    /// A layout as a 3.11 collector wrote it, every optional key present.
    const FULL: &str = "gaptop_python_layout 1\nminor 11\ninterp 0x7f00001000\nthreads_head 16\n\
        ts_next 8\nts_native_tid 152\nts_frame 56\nts_frame_indirect 8\nframe_code 32\n\
        frame_prev 48\ncode_type 0x55000010\nunicode_type 0x55000020\nnone_object 0x55000030\n\
        code_filename 112\ncode_qualname 128\nstr_ascii_data 48\nframe_instr 56\ncode_units 192\n\
        code_linetable 136\ncode_firstlineno 72\nbytes_size 16\nbytes_data 32\n\
        gil 0x7f00002040\n";

    #[test]
    fn the_text_reads_back_to_itself() {
        let l = ProcessLayout::parse(FULL).unwrap();
        assert_eq!(l.minor, Some(11));
        assert_eq!(l.threads.interp, 0x7f00001000);
        assert_eq!(l.gil, Some(0x7f00002040));
        assert_eq!(l.frames.none_object, 0x55000030);
        assert_eq!(
            l.frames.instr,
            Instr::Pointer {
                frame_off: 56,
                code_off: 192
            }
        );
        assert_eq!(l.to_text(), FULL);
        // Without the optional keys (3.10's, an unknown version), and with one it does not
        // know (a later collector's).
        let bare: String = FULL
            .lines()
            .filter(|line| {
                let key = line.split(' ').next().unwrap();
                ![
                    "ts_frame_indirect",
                    "frame_instr",
                    "code_units",
                    "code_linetable",
                    "code_firstlineno",
                    "bytes_size",
                    "bytes_data",
                    "gil",
                    "none_object",
                ]
                .contains(&key)
            })
            .map(|line| line.replace("minor 11", "minor ?") + "\n")
            .collect();
        let l = ProcessLayout::parse(&format!("{bare}a_new_key 3\n")).unwrap();
        assert_eq!(
            (
                l.minor,
                l.frames.instr,
                l.lines,
                l.frames.ts_frame_indirect,
                l.gil,
                l.frames.none_object
            ),
            (None, Instr::Unknown, None, None, None, 0)
        );
        assert_eq!(l.to_text(), bare);
    }

    #[test]
    fn a_layout_of_3_9_or_3_10_names_the_thread_through_its_pthread() {
        // 3.10's: the thread id through `struct pthread`, the instruction as an index.
        let old = FULL
            .replace("minor 11", "minor 10")
            .replace("ts_native_tid 152\n", "ts_thread_id 176\npthread_tid 720\n")
            .replace(
                "frame_instr 56\ncode_units 192\n",
                "frame_lasti_index 100\n",
            );
        let l = ProcessLayout::parse(&old).unwrap();
        assert_eq!(
            l.threads.tid,
            TidAt::Pthread {
                thread_id: 176,
                pthread_tid: 720
            }
        );
        assert_eq!(l.frames.instr, Instr::Index { frame_off: 100 });
        assert_eq!(l.to_text(), old);
        // 3.9's instruction, in bytes.
        let old9 = old.replace("frame_lasti_index", "frame_lasti_offset");
        let l = ProcessLayout::parse(&old9).unwrap();
        assert_eq!(l.frames.instr, Instr::Offset { frame_off: 100 });
        assert_eq!(l.to_text(), old9);
        // Half of it, or neither way: refused.
        let e = ProcessLayout::parse(&old.replace("pthread_tid 720\n", "")).unwrap_err();
        assert!(e.contains("pthread_tid"), "{e}");
        let e = ProcessLayout::parse(&old.replace("ts_thread_id 176\n", "")).unwrap_err();
        assert!(e.contains("ts_native_tid"), "{e}");
    }

    #[test]
    fn a_layout_without_its_version_or_a_field_is_refused_in_one_line() {
        assert!(ProcessLayout::parse("interp 0x10\n").is_err());
        let e = ProcessLayout::parse("gaptop_python_layout 1\ninterp 0x10\n").unwrap_err();
        assert!(e.contains("threads_head"), "{e}");
        let e =
            ProcessLayout::parse(&FULL.replace("frame_code 32", "frame_code 99999")).unwrap_err();
        assert!(e.contains("frame_code out of range"), "{e}");
    }
}

//! A frame of a call stack, typed: what its name says it is, read once.
//!
//! Frame names cross crates as text (the collector's `Name` frames, recordings, traces), in a
//! few formats this module writes and reads, so that no other place splits them:
//!
//! ```text
//! file(line): function        a Python frame (line as written: `42`, `42-44`, `-1`)
//! symbol [binary]             a named native frame (the viewer's symbols)
//! binary+0x1a2b               a native frame no symbol names
//! native:/path/binary+0x1a2b  a native frame as the collector sends it, before the viewer
//!                             names it (never a frame of a stack: see [`native_address`])
//! ProfilerStep#12, step 12    a numbered span of a family (`ProfilerStep#`, `step `)
//! anything else               an op, an API call, a kernel, a span
//! ```
//!
//! [`Shape::of`] reads a name once (the viewer's interner keeps each name's shape) and
//! [`Shape::view`] gives the typed [`StackFrame`] of it again without reading it twice.
//! `StackFrame` is not `crate::Frame`, which is a frame of the record format.

/// A frame, typed, borrowing its name's text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StackFrame<'a> {
    /// `file(line): function`.
    Python(PyFrame<'a>),
    /// `symbol [binary]` (`offset` None) or `binary+0x1a2b` (`symbol` None).
    Native {
        binary: &'a str,
        offset: Option<u64>,
        symbol: Option<&'a str>,
    },
    /// A numbered span of a family: `base` is the name without its number, ending in `#` or a
    /// space (`ProfilerStep#`, `step `).
    Numbered { base: &'a str, number: &'a str },
    /// Anything else: an op, API call, kernel or span.
    Op(&'a str),
}

/// A Python frame's parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PyFrame<'a> {
    /// The file's path as the source wrote it (`torch/nn/modules/module.py`, `<frozen runpy>`).
    pub file: &'a str,
    /// The line as written: digits, or a range `42-44`, or `-1` where none was known.
    pub line_text: &'a str,
    /// The qualified name (`Class.method`, `<module>`).
    pub function: &'a str,
}

impl<'a> PyFrame<'a> {
    /// The line (the first of a range); None where the text holds no line (`-1`).
    pub fn line(&self) -> Option<u32> {
        self.line_text.split('-').next()?.parse().ok()
    }
    /// Whether the file is a `.py` file (not `<frozen runpy>`, `<string>`).
    pub fn is_py_file(&self) -> bool {
        self.file.ends_with(".py")
    }
    /// The file's name without its folders.
    pub fn file_name(&self) -> &'a str {
        self.file.rsplit('/').next().unwrap_or(self.file)
    }
}

/// Where a name's parts lie, read once: [`Shape::view`] turns it back into a [`StackFrame`] of
/// the same text without reading the text again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Shape {
    #[default]
    Op,
    /// `file(line): function`: the `(` before the line and the `)` after it.
    Python { open: u32, close: u32 },
    /// `symbol [binary]`: where ` [` starts.
    Named { bracket: u32 },
    /// `binary+0x…`: where `+0x` starts, and the offset.
    Unnamed { plus: u32, offset: u64 },
    /// `base` then digits: where the digits start.
    Numbered { digits: u32 },
}

impl Shape {
    /// Reads a frame's name.
    pub fn of(s: &str) -> Shape {
        if let Some((open, close)) = python_split(s) {
            return Shape::Python {
                open: open as u32,
                close: close as u32,
            };
        }
        if let Some(bracket) = named_split(s) {
            return Shape::Named {
                bracket: bracket as u32,
            };
        }
        if let Some((plus, offset)) = unnamed_split(s) {
            return Shape::Unnamed {
                plus: plus as u32,
                offset,
            };
        }
        let base = s.trim_end_matches(|c: char| c.is_ascii_digit());
        if base.len() < s.len() && !base.trim().is_empty() && base.ends_with(['#', ' ']) {
            return Shape::Numbered {
                digits: base.len() as u32,
            };
        }
        Shape::Op
    }

    /// The frame of `s`, which must be the text this shape was read from.
    pub fn view(self, s: &str) -> StackFrame<'_> {
        match self {
            Shape::Op => StackFrame::Op(s),
            Shape::Python { open, close } => {
                let (open, close) = (open as usize, close as usize);
                StackFrame::Python(PyFrame {
                    file: &s[..open],
                    line_text: &s[open + 1..close],
                    function: &s[close + 3..],
                })
            }
            Shape::Named { bracket } => {
                let b = bracket as usize;
                StackFrame::Native {
                    binary: &s[b + 2..s.len() - 1],
                    offset: None,
                    symbol: Some(&s[..b]),
                }
            }
            Shape::Unnamed { plus, offset } => StackFrame::Native {
                binary: &s[..plus as usize],
                offset: Some(offset),
                symbol: None,
            },
            Shape::Numbered { digits } => StackFrame::Numbered {
                base: &s[..digits as usize],
                number: &s[digits as usize..],
            },
        }
    }
}

impl<'a> StackFrame<'a> {
    /// Reads a frame's name (see the module for the formats).
    pub fn parse(s: &'a str) -> StackFrame<'a> {
        Shape::of(s).view(s)
    }

    /// The Python frame's parts, if it is one.
    pub fn python(self) -> Option<PyFrame<'a>> {
        match self {
            StackFrame::Python(p) => Some(p),
            _ => None,
        }
    }

    /// A Python frame of a `.py` file (not `<frozen runpy>`): the user's or a library's code.
    pub fn py_source(self) -> Option<PyFrame<'a>> {
        self.python().filter(PyFrame::is_py_file)
    }

    /// Whether it is a native frame, named or not.
    pub fn is_native(self) -> bool {
        matches!(self, StackFrame::Native { .. })
    }

    /// The binary of a native frame no symbol names (`libfoo.so` of `libfoo.so+0x1a2b`).
    pub fn unnamed_binary(self) -> Option<&'a str> {
        match self {
            StackFrame::Native {
                binary,
                symbol: None,
                ..
            } => Some(binary),
            _ => None,
        }
    }
}

/// A Python frame's name: `file(line): function`.
pub fn python_name(file: &str, line: impl std::fmt::Display, function: &str) -> String {
    format!("{file}({line}): {function}")
}

/// A native frame named by its symbol: `symbol [binary]`.
pub fn native_name(symbol: &str, binary: &str) -> String {
    format!("{symbol} [{binary}]")
}

/// A native frame no symbol names: `binary+0x1a2b`.
pub fn unnamed_native_name(binary: &str, offset: u64) -> String {
    format!("{binary}+0x{offset:x}")
}

/// Prefix of a native frame as the collector sends it.
const NATIVE: &str = "native:";

/// A native frame as the collector sends it: `native:<binary's path>+0x<offset>` (`?` for a
/// binary it could not find), for the viewer to name.
pub fn native_address_name(binary: &str, offset: u64) -> String {
    format!("{NATIVE}{binary}+0x{offset:x}")
}

/// Whether a name is a native frame as the collector sends it (see [`native_address_name`]).
pub fn is_native_address(s: &str) -> bool {
    s.starts_with(NATIVE)
}

/// The binary's path and offset of a native frame as the collector sends it; `Err` with the
/// text after `native:` where the offset cannot be read, None for other names.
pub fn native_address(s: &str) -> Option<Result<(&str, u64), &str>> {
    let rest = s.strip_prefix(NATIVE)?;
    Some(
        rest.rsplit_once("+0x")
            .and_then(|(path, off)| Some((path, u64::from_str_radix(off, 16).ok()?)))
            .ok_or(rest),
    )
}

/// `file(line): function`: the `(` and `)` around a line of digits (or a range, or `-1`).
fn python_split(s: &str) -> Option<(usize, usize)> {
    let close = s.find("): ")?;
    let open = s[..close].rfind('(')?;
    let line = &s[open + 1..close];
    (!line.is_empty() && line.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
        .then_some((open, close))
}

/// `symbol [binary]`: where ` [` starts.
fn named_split(s: &str) -> Option<usize> {
    let (sym, _) = s.strip_suffix(']')?.rsplit_once(" [")?;
    (!sym.is_empty()).then_some(sym.len())
}

/// `binary+0x1a2b`: where `+0x` starts, and the offset.
fn unnamed_split(s: &str) -> Option<(usize, u64)> {
    let (lib, off) = s.rsplit_once("+0x")?;
    let ok = !lib.is_empty()
        && !lib.contains(' ')
        && !lib.contains('(')
        && !off.is_empty()
        && off.bytes().all(|b| b.is_ascii_hexdigit());
    // An offset too long for u64 is still an offset: it is kept as text, read as its maximum.
    ok.then(|| (lib.len(), u64::from_str_radix(off, 16).unwrap_or(u64::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_read_as_their_kind() {
        let p = StackFrame::parse("transformers/x/sdpa_attention.py(158): sdpa_attention_forward");
        let py = p.python().unwrap();
        assert_eq!(py.file, "transformers/x/sdpa_attention.py");
        assert_eq!(py.line(), Some(158));
        assert_eq!(py.function, "sdpa_attention_forward");
        assert_eq!(py.file_name(), "sdpa_attention.py");
        let r = StackFrame::parse("m.py(12-14): f(x): g").python().unwrap();
        assert_eq!(
            (r.file, r.line_text, r.line(), r.function),
            ("m.py", "12-14", Some(12), "f(x): g")
        );
        assert_eq!(
            StackFrame::parse("m.py(-1): f").python().unwrap().line(),
            None
        );
        let frozen = StackFrame::parse("<frozen runpy>(198): _run_module_as_main");
        assert!(frozen.python().is_some() && frozen.py_source().is_none());
        for op in [
            "cudaLaunchKernel",
            "f(x): y",
            "aten::add",
            "nn.Module: Linear_0",
            "x.py(): f",
        ] {
            assert_eq!(StackFrame::parse(op), StackFrame::Op(op), "{op}");
        }
        assert_eq!(
            StackFrame::parse("at::native::mul [libtorch_cuda.so]"),
            StackFrame::Native {
                binary: "libtorch_cuda.so",
                offset: None,
                symbol: Some("at::native::mul")
            }
        );
        assert_eq!(StackFrame::parse(" [lib]"), StackFrame::Op(" [lib]"));
        for (f, lib) in [
            ("libcublasLt.so.13+0x71b8533", "libcublasLt.so.13"),
            ("python3.12+0x551417", "python3.12"),
            ("?+0x7f00", "?"),
        ] {
            assert_eq!(StackFrame::parse(f).unnamed_binary(), Some(lib), "{f}");
        }
        assert_eq!(StackFrame::parse("f.py(3): g+0x1").unnamed_binary(), None);
        assert_eq!(
            StackFrame::parse("ProfilerStep#12"),
            StackFrame::Numbered {
                base: "ProfilerStep#",
                number: "12"
            }
        );
        assert!(matches!(
            StackFrame::parse("step 3"),
            StackFrame::Numbered { .. }
        ));
        for op in [
            "iteration_3",
            "MulBackward0",
            "cudaLaunchKernel_v7000",
            "42",
            " 4",
        ] {
            assert_eq!(StackFrame::parse(op), StackFrame::Op(op), "{op}");
        }
    }

    #[test]
    fn names_written_read_back() {
        let n = python_name("a/b.py", 7, "C.f");
        assert_eq!(n, "a/b.py(7): C.f");
        let p = StackFrame::parse(&n).python().unwrap();
        assert_eq!((p.file, p.line(), p.function), ("a/b.py", Some(7), "C.f"));
        let a = native_address_name("/usr/lib/libz.so.1", 0x2a);
        assert_eq!(a, "native:/usr/lib/libz.so.1+0x2a");
        assert!(is_native_address(&a));
        assert_eq!(native_address(&a), Some(Ok(("/usr/lib/libz.so.1", 0x2a))));
        assert_eq!(native_address("native:garbage"), Some(Err("garbage")));
        assert_eq!(native_address("libz+0x2"), None);
    }
}

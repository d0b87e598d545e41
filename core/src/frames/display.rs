//! How frames and names show: the one family of shorteners (a frame as people read it, a
//! kernel's name without its templates, a path from its package on, text cut at its end, in its
//! middle, or keeping a frame's line) and the one demangler. Every pane, the report, the diff
//! and the export shorten through these.

use gaptop_wire::stackframe::StackFrame;

/// A Python frame `dir/file.py(42): Class.method` shown as `Class.method  file.py:42`, the
/// function first so that narrow panes keep what matters; other frames unchanged.
pub fn pretty_frame(f: &str) -> String {
    pretty(StackFrame::parse(f), f)
}

/// [`pretty_frame`] of a frame already read (`name` its text).
pub fn pretty(frame: StackFrame<'_>, name: &str) -> String {
    match frame.py_source() {
        Some(p) => function_at(p.function, p.file, p.line_text),
        None => name.to_string(),
    }
}

/// A function as people read it, first so that narrow panes keep it, then where it is, its
/// file's path cut to its name: `Class.method  file.py:42` (`line` as given: `42`, `12,14`),
/// or `Class.method  file.py` where `line` is empty.
pub fn function_at(function: &str, path: &str, line: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    match line {
        "" => format!("{function}  {file}"),
        _ => format!("{function}  {file}:{line}"),
    }
}

/// A frame as the tree shows it by function (`name` its text): a Python frame without its line
/// (`Class.method  file.py`); other frames as [`pretty_frame`] has them.
pub fn pretty_function(frame: StackFrame<'_>, name: &str) -> String {
    match frame.py_source() {
        Some(p) => function_at(p.function, p.file, ""),
        None => name.to_string(),
    }
}

/// Frames (outermost first) as text to paste: Python frames as a Python traceback writes
/// them (`  File "x.py", line 3, in f`), other frames (the API, the kernel, native code) as
/// they are.
pub fn traceback<'a>(frames: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from("Traceback (most recent call last):\n");
    for f in frames {
        match StackFrame::parse(f).py_source() {
            Some(p) => out.push_str(&format!(
                "  File \"{}\", line {}, in {}\n",
                p.file, p.line_text, p.function
            )),
            None => out.push_str(&format!("  {f}\n")),
        }
    }
    out
}

/// A Python frame's path the way users read it: packages from their package folder on
/// (`torch/nn/modules/module.py(1790): Module._call_impl`), the standard library from its
/// folder on (`threading.py(1010): Thread.run`); other paths whole.
pub fn short_path(name: &str) -> String {
    for marker in ["/site-packages/", "/dist-packages/"] {
        if let Some(i) = name.rfind(marker) {
            return name[i + marker.len()..].to_string();
        }
    }
    if let Some(i) = name.find("/lib/python3") {
        if let Some(j) = name[i + 12..].find('/') {
            return name[i + 12 + j + 1..].to_string();
        }
    }
    name.to_string()
}

/// How much of a C++ name [`demangle`] keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Demangled {
    /// All of it: a kernel's name with its parameters (`foo(int)`).
    Whole,
    /// Without parameter lists and return types, as a call tree reads a native function.
    NoParams,
}

/// A mangled C++ name (`_Z…`) demangled; any other name, or one that does not demangle, as it
/// is.
pub fn demangle(name: &str, keep: Demangled) -> String {
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let d = match keep {
                Demangled::Whole => sym.demangle(),
                Demangled::NoParams => sym.demangle_with_options(
                    &cpp_demangle::DemangleOptions::new()
                        .no_params()
                        .no_return_type(),
                ),
            };
            if let Ok(s) = d {
                return s;
            }
        }
    }
    name.to_string()
}

/// Kernel names shortened for narrow cells: template arguments and parameters dropped.
pub fn short_kernel(name: &str) -> String {
    let mut out = String::new();
    let mut depth = 0i32;
    let mut prev = ' ';
    for ch in name.chars() {
        match ch {
            '<' | '(' => depth += 1,
            // `->` (in `Memcpy HtoD (Pinned -> Device)`) closes nothing.
            '>' if prev == '-' => {}
            '>' | ')' => depth -= 1,
            _ if depth == 0 => out.push(ch),
            _ => {}
        }
        prev = ch;
    }
    let out = out.trim().trim_start_matches("void ").to_string();
    let out = out.rsplit("::").next().unwrap_or(&out).to_string();
    if out.is_empty() {
        name.to_string()
    } else {
        out
    }
}

/// `s` cut to at most `n` characters, the cut marked with `…`.
pub fn cut(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        s.chars().take(n.saturating_sub(1)).collect::<String>() + "…"
    }
}

/// `s` cut to at most `n` characters in its middle, keeping both ends (a kernel's name and its
/// template arguments, a function and its file): `pytorch_flash::flash…<float, 128>`.
pub fn cut_middle(s: &str, n: usize) -> String {
    let tail = n.saturating_sub(1) / 2;
    cut_keeping(s, n, n.saturating_sub(1) - tail)
}

/// `s` cut to at most `n` characters: its first `head` characters, `…` and its last ones (a
/// message cut in its middle, a path keeping its file's name).
pub fn cut_keeping(s: &str, n: usize, head: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        return s.to_string();
    }
    let head = head.min(n.saturating_sub(1));
    let tail = n.saturating_sub(1) - head;
    let mut out: String = s.chars().take(head).collect();
    out.push('…');
    out.extend(s.chars().skip(len - tail));
    out
}

/// A frame as people read it (`Class.method  file.py:42`) in at most `n` characters: where it
/// is longer, its function whole and its location cut at its start so that its line number
/// stays (`<module>  …ecode.py:12`); where even that does not fit, or for a name without a
/// line number, cut at its end ([`cut`]): the function is what names the row.
pub fn cut_frame(s: &str, n: usize) -> String {
    let len = s.chars().count();
    if len <= n {
        return s.to_string();
    }
    let Some((func, loc)) = s.split_once("  ") else {
        return cut(s, n);
    };
    let line = loc
        .rsplit_once(':')
        .filter(|(_, l)| !l.is_empty() && l.bytes().all(|b| b.is_ascii_digit()))
        .map(|(_, l)| l.len() + 1);
    let keep = n.saturating_sub(func.chars().count() + 3);
    match line {
        Some(line) if keep >= line => {
            let loc_len = loc.chars().count();
            let tail: String = loc.chars().skip(loc_len - keep.min(loc_len)).collect();
            format!("{func}  …{tail}")
        }
        _ => cut(s, n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_read_as_people_read_them() {
        let f = "torch/nn/x.py(12): Net.forward";
        assert_eq!(pretty_frame(f), "Net.forward  x.py:12");
        assert_eq!(
            pretty_function(StackFrame::parse(f), f),
            "Net.forward  x.py"
        );
        assert_eq!(pretty_frame("<frozen runpy>(1): f"), "<frozen runpy>(1): f");
        assert_eq!(
            traceback([f, "cudaLaunchKernel"].into_iter()),
            "Traceback (most recent call last):\n  File \"torch/nn/x.py\", line 12, in \
             Net.forward\n  cudaLaunchKernel\n"
        );
    }

    #[test]
    fn paths_from_their_package_on() {
        assert_eq!(
            short_path("/opt/v/lib/python3.12/site-packages/torch/nn/modules/module.py(1790): Module._call_impl"),
            "torch/nn/modules/module.py(1790): Module._call_impl"
        );
        assert_eq!(
            short_path("/usr/lib/python3.12/threading.py(1010): Thread.run"),
            "threading.py(1010): Thread.run"
        );
        assert_eq!(
            short_path("/work/x/model.py(3): f"),
            "/work/x/model.py(3): f"
        );
    }

    #[test]
    fn one_demangler_two_lengths() {
        assert_eq!(demangle("_Z3fooi", Demangled::Whole), "foo(int)");
        assert_eq!(demangle("_Z3fooi", Demangled::NoParams), "foo");
        assert_eq!(demangle("ampere_sgemm", Demangled::Whole), "ampere_sgemm");
    }

    #[test]
    fn a_middle_cut_keeps_both_ends_and_the_width() {
        assert_eq!(cut_middle("short", 5), "short");
        assert_eq!(cut_middle("abcdefgh", 5), "ab…gh");
        assert_eq!(cut_middle("abcdefgh", 6), "abc…gh");
        let k = "pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<float, 128>";
        let c = cut_middle(k, 34);
        assert_eq!(c.chars().count(), 34);
        assert_eq!(c, "pytorch_flash::fl…aits<float, 128>");
        // Characters, not bytes.
        assert_eq!(cut_middle("µµµµµµµµ", 5), "µµ…µµ");
    }

    #[test]
    fn kernel_names_shorten() {
        assert_eq!(
            short_kernel("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"),
            "vectorized_elementwise_kernel"
        );
        assert_eq!(short_kernel("Memcpy HtoD"), "Memcpy HtoD");
        assert_eq!(
            short_kernel("Memcpy HtoD (Pinned -> Device)"),
            "Memcpy HtoD"
        );
        assert_eq!(
            short_kernel("ampere_sgemm_128x64_tn"),
            "ampere_sgemm_128x64_tn"
        );
    }

    #[test]
    fn a_frame_is_cut_in_its_middle_keeping_its_line() {
        let f = "<module>  llama_decode.py:12";
        assert_eq!(cut_frame(f, 40), f);
        assert_eq!(cut_frame(f, 22), "<module>  …ecode.py:12");
        assert_eq!(cut_frame(f, 14), "<module>  …:12");
        // Too narrow for the line, or no line: cut at the end, the function first.
        assert_eq!(cut_frame(f, 12), "<module>  l…");
        assert_eq!(cut_frame("cudaLaunchKernel_v7000", 10), "cudaLaunc…");
    }
}

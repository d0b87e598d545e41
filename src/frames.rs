//! How frames and op names read: the text helpers every layer shares (the report, the export,
//! advice and the UI), kept below all of them so that none has to reach into the UI for them.

/// A Python frame `dir/file.py(42): Class.method` shown as `Class.method  file.py:42`, the
/// function first so that narrow panes keep what matters; other frames unchanged.
pub fn pretty_frame(f: &str) -> String {
    if let Some((loc, qual)) = f.split_once("): ") {
        if let Some((path, line)) = loc.rsplit_once('(') {
            if path.ends_with(".py") && line.chars().all(|c| c.is_ascii_digit() || c == '-') {
                let file = path.rsplit('/').next().unwrap_or(path);
                return format!("{qual}  {file}:{line}");
            }
        }
    }
    f.to_string()
}

/// The parts of a Python frame `dir/file.py(42): Class.method`: its file, line (the first of a
/// range `42-44`) and function; None for other frames.
pub fn python_parts(f: &str) -> Option<(&str, u32, &str)> {
    let (loc, qual) = f.split_once("): ")?;
    let (path, line) = loc.rsplit_once('(')?;
    let first = line.split('-').next()?;
    let line = first.parse().ok()?;
    Some((path, line, qual))
}

/// Splits a Python frame `path/file.py(12): Class.method` into its path and its function (the
/// line is not read: any text in its parentheses).
pub fn split_python_frame(frame: &str) -> Option<(&str, &str)> {
    let i = frame.rfind("): ")?;
    let loc = &frame[..i];
    let path = &loc[..loc.rfind('(')?];
    Some((path, &frame[i + 3..]))
}

/// The parts of a named native frame `symbol [libfoo.so]`: its symbol and library.
pub fn native_parts(f: &str) -> Option<(&str, &str)> {
    let (sym, lib) = f.strip_suffix(']')?.rsplit_once(" [")?;
    (!sym.is_empty()).then_some((sym, lib))
}

/// A native frame from `--native`: `symbol [libfoo.so]`, or `libfoo.so+0x1a2b` when the
/// library had no symbol for it.
pub fn is_native_frame(frame: &str) -> bool {
    (frame.ends_with(']') && frame.contains(" [")) || is_unnamed_native(frame)
}

/// A native frame the viewer could not name (a stripped library or executable:
/// `libfoo.so+0x1a2b`, `python3.12+0x5514`, `?+0x7f00`).
pub fn is_unnamed_native(frame: &str) -> bool {
    match frame.rsplit_once("+0x") {
        Some((lib, off)) => {
            !lib.is_empty()
                && !lib.contains(' ')
                && !lib.contains('(')
                && !off.is_empty()
                && off.chars().all(|c| c.is_ascii_hexdigit())
        }
        None => false,
    }
}

/// A Python frame's path, line (as written, maybe a range `42-44`) and qualified name.
fn python_frame(f: &str) -> Option<(&str, &str, &str)> {
    let (loc, qual) = f.split_once("): ")?;
    let (path, line) = loc.rsplit_once('(')?;
    (path.ends_with(".py") && line.chars().all(|c| c.is_ascii_digit() || c == '-'))
        .then_some((path, line, qual))
}

/// A Python frame's file and line (`dir/file.py`, 42).
pub fn python_location(frame: &str) -> Option<(&str, u32)> {
    let (path, line, _) = python_frame(frame)?;
    Some((path, line.split('-').next()?.parse().ok()?))
}

/// Frames (outermost first) as text to paste: Python frames as a Python traceback writes
/// them (`  File "x.py", line 3, in f`), other frames (the API, the kernel, native code) as
/// they are.
pub fn traceback<'a>(frames: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from("Traceback (most recent call last):\n");
    for f in frames {
        match python_frame(f) {
            Some((path, line, qual)) => {
                out.push_str(&format!("  File \"{path}\", line {line}, in {qual}\n"))
            }
            None => out.push_str(&format!("  {f}\n")),
        }
    }
    out
}

/// `(path, qualified name)` of a Python frame: the function, whichever line.
pub fn python_function(frame: &str) -> Option<(&str, &str)> {
    python_frame(frame).map(|(p, _, q)| (p, q))
}

/// A frame as the tree shows it by function: a Python frame without its line
/// (`Class.method  file.py`); other frames as [`pretty_frame`] has them.
pub fn pretty_function(f: &str) -> String {
    match python_frame(f) {
        Some((path, _, qual)) => {
            let file = path.rsplit('/').next().unwrap_or(path);
            format!("{qual}  {file}")
        }
        None => pretty_frame(f),
    }
}

/// The library of a native frame the viewer could not name (`libfoo.so` of `libfoo.so+0x1a2b`).
pub fn unnamed_lib(frame: &str) -> Option<&str> {
    is_unnamed_native(frame).then(|| frame.rsplit_once("+0x").map(|(l, _)| l))?
}

/// Frames of framework plumbing that every module call passes through; the tree hides them so
/// the user's modules are what shows (their totals flow into the nearest shown ancestor).
pub fn is_plumbing(frame: &str) -> bool {
    frame.starts_with("torch/nn/modules/module.py(")
        || frame.starts_with("transformers/utils/generic.py(")
        || frame.starts_with("transformers/utils/output_capturing.py(")
        || frame.starts_with("torch/utils/_contextlib.py(")
        || (frame.starts_with("transformers/modeling_layers.py(")
            && frame.ends_with("GradientCheckpointingLayer.__call__"))
        // How `python -m` and runpy-based launchers reach a script's code.
        || frame.starts_with("<frozen runpy>(")
        || frame == "<built-in function exec>"
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

/// NCCL and other collective kernels are communication, not compute.
pub fn is_comm_kernel(name: &str) -> bool {
    name.starts_with("ncclKernel")
        || name.starts_with("ncclDevKernel")
        || name.contains("nccl")
        || name.starts_with("cross_device_reduce")
}

/// `MulBackward0` for a frame that is a backward node's op, its `apply` or its engine's call.
pub fn backward_node(f: &str) -> Option<&str> {
    if let Some(n) = f.strip_prefix("autograd::engine::evaluate_function: ") {
        return Some(n.trim());
    }
    if f.contains("torch::autograd::generated::") || f.contains("Backward") {
        // A native frame: the first part of its symbol that is a node's name, cut after its
        // number (`torch::autograd::generated::MulBackward0::apply`,
        // `SigmoidBackward0_apply_functional [libtorch_cpu.so]`; not `generated::details`).
        let sym = f.split(" [").next().unwrap_or(f);
        return sym.split("::").find_map(|part| {
            let i = part.find("Backward")? + "Backward".len();
            let digits = part[i..].bytes().take_while(u8::is_ascii_digit).count();
            node_op(&part[..i + digits])
        });
    }
    node_op(f)
}

/// A node's own op in a trace: one word ending in `Backward` and a number, or `Backward`.
pub fn node_op(f: &str) -> Option<&str> {
    let w = f.trim_end_matches(|c: char| c.is_ascii_digit());
    (w.ends_with("Backward")
        && w.len() > "Backward".len()
        && f.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
    .then_some(f)
}

/// The forward op a backward node runs the derivative of: `MulBackward0` → `mul`,
/// `NativeLayerNormBackward0` → `native_layer_norm`, `MaxPool2DWithIndicesBackward` →
/// `max_pool2d_with_indices`; None for nodes of no op (`AccumulateGrad`).
pub fn forward_op(node: &str) -> Option<String> {
    let node = node.rsplit("::").next().unwrap_or(node);
    let w = node.trim_end_matches(|c: char| c.is_ascii_digit());
    let camel = w.strip_suffix("Backward").filter(|c| !c.is_empty())?;
    let chars: Vec<char> = camel.chars().collect();
    let mut out = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            let prev = chars[i - 1];
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if prev.is_ascii_lowercase() || (prev.is_ascii_uppercase() && next_lower) {
                out.push('_');
            }
        }
        out.push(c.to_ascii_lowercase());
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unnamed_native_frames_are_told_apart() {
        for f in [
            "libcublasLt.so.13+0x71b8533",
            "python3.12+0x551417",
            "?+0x7f00",
        ] {
            assert!(is_unnamed_native(f), "{f}");
        }
        for f in [
            "deflate [libz.so.1]",
            "f.py(3): g+0x1",
            "model.py(12): forward",
            "cudaLaunchKernel",
        ] {
            assert!(!is_unnamed_native(f), "{f}");
        }
    }

    #[test]
    fn frames_split_into_their_parts() {
        assert_eq!(
            python_parts("transformers/x/sdpa_attention.py(158): sdpa_attention_forward"),
            Some((
                "transformers/x/sdpa_attention.py",
                158,
                "sdpa_attention_forward"
            ))
        );
        assert_eq!(
            python_parts("m.py(12-14): f(x): g"),
            Some(("m.py", 12, "f(x): g"))
        );
        assert_eq!(python_parts("cudaLaunchKernel"), None);
        assert_eq!(python_parts("f(x): y"), None, "no line number");
        assert_eq!(
            native_parts("at::native::mul [libtorch_cuda.so]"),
            Some(("at::native::mul", "libtorch_cuda.so"))
        );
        assert_eq!(native_parts("libz.so+0x12"), None);
        assert_eq!(native_parts(" [lib]"), None);
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
    fn comm_kernels() {
        assert!(is_comm_kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
        ));
        assert!(!is_comm_kernel(
            "void at::native::vectorized_elementwise_kernel"
        ));
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

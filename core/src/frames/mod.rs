//! How frames and op names read: the text helpers every layer shares (the report, the export,
//! advice and the UI), kept below all of them so that none has to reach into the UI for them.
//!
//! A frame's name is read once, as a typed [`StackFrame`] (`gaptop_wire::stackframe`: the
//! formats cross crates), when the store interns it (`Interner::frame`); a name met as text
//! reads with [`frame`]. How frames show is [`display`] (one family of shorteners, one
//! demangler), which frames to hide [`hide`] (one list).

pub mod display;
pub mod hide;

pub use display::{cut, cut_frame, pretty_frame, short_kernel, traceback};
pub use gaptop_wire::stackframe::{PyFrame, StackFrame};
pub use hide::{is_plumbing, is_profiler_frame};

/// A frame's name read as a typed frame (a name of the store's reads with `Interner::frame`).
pub fn frame(name: &str) -> StackFrame<'_> {
    StackFrame::parse(name)
}

/// The parts of a Python frame `dir/file.py(42): Class.method`: its file, line (the first of a
/// range `42-44`) and function; None for other frames.
pub fn python_parts(f: &str) -> Option<(&str, u32, &str)> {
    let p = frame(f).python()?;
    Some((p.file, p.line()?, p.function))
}

/// The parts of a named native frame `symbol [libfoo.so]`: its symbol and library.
pub fn native_parts(f: &str) -> Option<(&str, &str)> {
    match frame(f) {
        StackFrame::Native {
            binary,
            symbol: Some(symbol),
            ..
        } => Some((symbol, binary)),
        _ => None,
    }
}

/// A native frame from `--native`: `symbol [libfoo.so]`, or `libfoo.so+0x1a2b` when the
/// library had no symbol for it.
pub fn is_native_frame(f: &str) -> bool {
    frame(f).is_native()
}

/// A native frame the viewer could not name (a stripped library or executable:
/// `libfoo.so+0x1a2b`, `python3.12+0x5514`, `?+0x7f00`).
pub fn is_unnamed_native(f: &str) -> bool {
    unnamed_lib(f).is_some()
}

/// The library of a native frame the viewer could not name (`libfoo.so` of `libfoo.so+0x1a2b`).
pub fn unnamed_lib(f: &str) -> Option<&str> {
    frame(f).unnamed_binary()
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
        let sym = native_parts(f).map_or(f, |(sym, _)| sym);
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
    fn comm_kernels() {
        assert!(is_comm_kernel(
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
        ));
        assert!(!is_comm_kernel(
            "void at::native::vectorized_elementwise_kernel"
        ));
    }
}

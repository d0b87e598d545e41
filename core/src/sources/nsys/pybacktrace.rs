//! Nsight Systems' Python backtraces, as its SQLite export holds them: NVTX marks of the
//! `Python Backtrace` domain whose binary payload (`NVTX_EVENTS.binaryData`) is one backtrace.
//!
//! nsys's Python injection registers the payload's schema, `PythonBacktrace`: a thread state
//! (enum, 4 bytes), a source (enum, 4 bytes: periodic sampling for `--python-sampling`, event
//! based for `--python-backtrace=cuda`, which takes one inside each traced CUDA call), the
//! frames count (4 bytes, padded to 8) and the frames, innermost first, each a `PythonFrame` of
//! 24 bytes: the function's and the file's string ids (8 bytes each, the export's `StringIds`)
//! and the line (4 bytes, then padding). That layout was read from the payloads of real
//! captures (nsys 2023.4 on an H200, Python 3.12; tests/data/nsys/README.md); where the export
//! holds the schema (`NVTX_PAYLOAD_SCHEMAS`, `NVTX_PAYLOAD_SCHEMA_ENTRIES`), its entries' offsets
//! and the frame schema's size are used instead. The thread state is not read: what its values
//! mean is not known (the samples of one capture say 1 or 3 of the same kind of code). Padding
//! is not zeroed by nsys: only the bytes a field owns are read.

use base64::Engine;
use gaptop_wire::stackframe::python_name;

/// The NVTX domain nsys puts Python backtraces in.
pub const DOMAIN: &str = "Python Backtrace";
/// The payload schema of one backtrace, and of one of its frames.
pub const SCHEMA: &str = "PythonBacktrace";
pub const FRAME_SCHEMA: &str = "PythonFrame";

/// Where a backtrace payload's fields lie, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    pub source: usize,
    pub count: usize,
    pub frames: usize,
    /// One frame's size, and where in a frame its function's and file's string ids (8 bytes
    /// each) and its line (4 bytes) are.
    pub frame_size: usize,
    pub function: usize,
    pub file: usize,
    pub line: usize,
    /// The source's value for periodic sampling (anything else was taken at an event).
    pub periodic: u32,
}

impl Default for Layout {
    fn default() -> Layout {
        Layout {
            source: 4,
            count: 8,
            frames: 16,
            frame_size: 24,
            function: 0,
            file: 8,
            line: 16,
            periodic: 1,
        }
    }
}

/// A frame as the payload gives it: string ids of its function and file, and its line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RawFrame {
    pub function: i64,
    pub file: i64,
    pub line: u32,
}

/// One decoded backtrace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backtrace {
    /// Taken by periodic sampling (`--python-sampling`), not at a CUDA call.
    pub sampled: bool,
    /// Innermost first, as the payload has them.
    pub frames: Vec<RawFrame>,
    /// The count said more frames than the payload holds.
    pub truncated: bool,
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes one payload; `None` when it is too short for its header.
pub fn decode(b: &[u8], l: &Layout) -> Option<Backtrace> {
    let source = u32_at(b, l.source)?;
    let count = u32_at(b, l.count)? as usize;
    let fits = l.function.max(l.file) + 8 <= l.frame_size && l.line + 4 <= l.frame_size;
    if !fits || b.len() < l.frames {
        return None;
    }
    let room = (b.len() - l.frames) / l.frame_size;
    let n = count.min(room);
    let frames = (0..n)
        .filter_map(|i| {
            let at = l.frames + i * l.frame_size;
            Some(RawFrame {
                function: u64_at(b, at + l.function)? as i64,
                file: u64_at(b, at + l.file)? as i64,
                line: u32_at(b, at + l.line)?,
            })
        })
        .collect();
    Some(Backtrace {
        sampled: source == l.periodic,
        frames,
        truncated: count > room,
    })
}

/// A `binaryData` value's bytes: a blob as it is; text of hexadecimal digits alone as
/// hexadecimal, else as base64 (how nsys's JSON export writes payloads). A backtrace's base64
/// always holds letters past `f` (its header's small integers encode as `AQAAAA...`), so the
/// two do not mix up.
pub fn payload_bytes(blob: Option<&[u8]>, text: Option<&str>) -> Option<Vec<u8>> {
    if let Some(b) = blob {
        return Some(b.to_vec());
    }
    let t = text?.trim();
    if t.is_empty() {
        return None;
    }
    let hex = t.strip_prefix("0x").unwrap_or(t);
    if hex.len() % 2 == 0 && hex.bytes().all(|c| c.is_ascii_hexdigit()) {
        return (0..hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
            .collect();
    }
    base64::engine::general_purpose::STANDARD.decode(t).ok()
}

/// nsys writes `<`, `>` and `&` of the strings it stores as HTML entities (`<module>` is
/// `&lt;module&gt;`): the text as Python wrote it.
pub fn unescape(s: &str) -> std::borrow::Cow<'_, str> {
    if !s.contains('&') {
        return s.into();
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let known = [
            ("&lt;", '<'),
            ("&gt;", '>'),
            ("&amp;", '&'),
            ("&quot;", '"'),
            ("&#39;", '\''),
            ("&apos;", '\''),
        ];
        match known.iter().find(|(e, _)| rest.starts_with(e)) {
            Some((e, c)) => {
                out.push(*c);
                rest = &rest[e.len()..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out.into()
}

/// A frame as gaptop's Python frames read: `file(line): function`.
pub fn frame_text(function: &str, file: &str, line: u32) -> String {
    let function = if function.is_empty() { "?" } else { function };
    let file = if file.is_empty() { "?" } else { file };
    python_name(&unescape(file), line, &unescape(function))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A payload as nsys writes one, with the padding full of junk as it leaves it.
    fn payload(source: u32, frames: &[(u64, u64, u32)], count: Option<u32>) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend(1u32.to_le_bytes());
        b.extend(source.to_le_bytes());
        b.extend(count.unwrap_or(frames.len() as u32).to_le_bytes());
        b.extend(b"junk");
        for &(f, file, line) in frames {
            b.extend(f.to_le_bytes());
            b.extend(file.to_le_bytes());
            b.extend(line.to_le_bytes());
            b.extend(b"\x75\x7f\0\0");
        }
        b
    }

    #[test]
    fn decodes_frames_without_the_padding() {
        let b = payload(2, &[(101, 100, 58), (102, 100, 72)], None);
        let bt = decode(&b, &Layout::default()).unwrap();
        assert!(!bt.sampled && !bt.truncated);
        assert_eq!(
            bt.frames,
            vec![
                RawFrame {
                    function: 101,
                    file: 100,
                    line: 58
                },
                RawFrame {
                    function: 102,
                    file: 100,
                    line: 72
                }
            ]
        );
        let s = decode(&payload(1, &[], None), &Layout::default()).unwrap();
        assert!(s.sampled && s.frames.is_empty());
    }

    #[test]
    fn a_count_beyond_the_payload_keeps_the_frames_there() {
        let b = payload(2, &[(1, 2, 3)], Some(9));
        let bt = decode(&b, &Layout::default()).unwrap();
        assert_eq!(bt.frames.len(), 1);
        assert!(bt.truncated);
        assert!(decode(&b[..6], &Layout::default()).is_none());
    }

    #[test]
    fn payload_text_is_base64_or_hex() {
        let raw = vec![1u8, 2, 250];
        assert_eq!(payload_bytes(Some(&raw), None), Some(raw.clone()));
        assert_eq!(payload_bytes(None, Some("AQL6")), Some(raw.clone()));
        assert_eq!(payload_bytes(None, Some("0102fa")), Some(raw.clone()));
        assert_eq!(payload_bytes(None, Some("0x0102FA")), Some(raw));
        // Hex digits that would also read as base64 are hex.
        assert_eq!(
            payload_bytes(None, Some("0011aabb")),
            Some(vec![0, 0x11, 0xaa, 0xbb])
        );
        assert_eq!(payload_bytes(None, Some("not base64!")), None);
        assert_eq!(payload_bytes(None, Some("")), None);
        assert_eq!(payload_bytes(None, None), None);
    }

    #[test]
    fn frames_read_as_python_frames_unescaped() {
        assert_eq!(
            frame_text("&lt;module&gt;", "/w/a.py", 78),
            "/w/a.py(78): <module>"
        );
        assert_eq!(unescape("a &amp;&amp; b &x"), "a && b &x");
        assert_eq!(frame_text("", "", 0), "?(0): ?");
    }
}

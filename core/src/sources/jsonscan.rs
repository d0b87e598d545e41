//! A streaming splitter for Chrome-trace JSON.
//!
//! Traces are far larger than memory should be (torch.profiler with stacks writes gigabytes), so
//! the file is never held whole. This reads the top level itself — either `{ ..., "traceEvents":
//! [ ... ], ... }` or a bare `[ ... ]` — and hands each event object, as a byte slice, to a
//! callback that parses it with serde. Only the current chunk lives in memory.

use std::io::Read;

/// Errors carry the byte offset where the problem was seen.
#[derive(Debug, PartialEq, Eq)]
pub enum ScanError {
    Io(String),
    Truncated(u64),
    Syntax { at: u64, what: &'static str },
    NoEvents,
    TooLarge(u64),
}

impl std::fmt::Display for ScanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanError::Io(e) => write!(f, "read error: {e}"),
            ScanError::Truncated(at) => write!(f, "truncated: input ends inside JSON at byte {at}"),
            ScanError::Syntax { at, what } => write!(f, "invalid JSON at byte {at}: {what}"),
            ScanError::NoEvents => write!(
                f,
                "not a trace: no \"traceEvents\" array; {}",
                crate::text::READS
            ),
            ScanError::TooLarge(at) => write!(f, "a single event at byte {at} exceeds 256 MiB"),
        }
    }
}

const CHUNK: usize = 256 << 10;
const MAX_VALUE: usize = 256 << 20;

pub struct Scanner<R: Read> {
    r: R,
    buf: Vec<u8>,
    pos: usize,
    eof: bool,
    /// Bytes dropped from the front of `buf` so far.
    base: u64,
}

/// End of the string whose opening quote is at `start`, if it is inside `buf`.
pub fn string_end(buf: &[u8], start: usize) -> Option<usize> {
    Scanner::<std::io::Empty>::string_end(buf, start)
}

/// End of a value that must lie wholly inside `buf` (an event's own members).
pub fn complete_value_end(buf: &[u8], start: usize) -> Result<usize, &'static str> {
    match Scanner::<std::io::Empty>::value_end(buf, start)? {
        End::At(e) => Ok(e),
        End::NeedMore => Err("value runs past the end of the event"),
    }
}

/// Outcome of looking for the end of a value inside the buffer.
pub(crate) enum End {
    At(usize),
    NeedMore,
}

impl<R: Read> Scanner<R> {
    pub fn new(r: R) -> Self {
        Scanner {
            r,
            buf: Vec::with_capacity(CHUNK),
            pos: 0,
            eof: false,
            base: 0,
        }
    }

    /// Bytes consumed so far (uncompressed).
    pub fn offset(&self) -> u64 {
        self.base + self.pos as u64
    }

    /// Reads more input; returns false at end of input.
    fn fill(&mut self, min_extra: usize) -> Result<bool, ScanError> {
        if self.eof {
            return Ok(false);
        }
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.base += self.pos as u64;
            self.pos = 0;
        }
        let want = self.buf.len() + min_extra.max(CHUNK);
        let mut got_any = false;
        while self.buf.len() < want {
            let old = self.buf.len();
            self.buf.resize(want, 0);
            match self.r.read(&mut self.buf[old..]) {
                Ok(0) => {
                    self.buf.truncate(old);
                    self.eof = true;
                    break;
                }
                Ok(n) => {
                    self.buf.truncate(old + n);
                    got_any = true;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {
                    self.buf.truncate(old);
                }
                Err(e) => {
                    self.buf.truncate(old);
                    let at = self.base + self.buf.len() as u64;
                    return Err(match e.kind() {
                        std::io::ErrorKind::UnexpectedEof => ScanError::Truncated(at),
                        _ => ScanError::Io(format!("{e} (near byte {at})")),
                    });
                }
            }
        }
        Ok(got_any)
    }

    fn syntax(&self, what: &'static str) -> ScanError {
        ScanError::Syntax {
            at: self.offset(),
            what,
        }
    }

    /// Next non-whitespace byte without consuming it.
    fn peek(&mut self) -> Result<Option<u8>, ScanError> {
        loop {
            while self.pos < self.buf.len() {
                let b = self.buf[self.pos];
                if matches!(b, b' ' | b'\n' | b'\r' | b'\t') {
                    self.pos += 1;
                } else {
                    return Ok(Some(b));
                }
            }
            if !self.fill(0)? {
                return Ok(None);
            }
        }
    }

    fn expect_more(&mut self) -> Result<u8, ScanError> {
        self.peek()?.ok_or(ScanError::Truncated(self.offset()))
    }

    /// Finds the end (exclusive) of the value starting at `buf[start]`. Objects and arrays are
    /// skipped by counting their own brackets outside strings, 8 bytes a step
    /// ([`bracket_end`]), which is all a well-formed value needs; serde checks the rest.
    pub(crate) fn value_end(buf: &[u8], start: usize) -> Result<End, &'static str> {
        let first = buf[start];
        match first {
            b'{' | b'[' => {
                let (open, close) = if first == b'{' {
                    (b'{', b'}')
                } else {
                    (b'[', b']')
                };
                Ok(bracket_end(buf, start, open, close))
            }
            b'"' => Ok(match Self::string_end(buf, start) {
                Some(e) => End::At(e),
                None => End::NeedMore,
            }),
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                let mut i = start;
                while i < buf.len() {
                    if matches!(buf[i], b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t') {
                        return Ok(End::At(i));
                    }
                    i += 1;
                }
                Ok(End::NeedMore)
            }
            _ => Err("expected a value"),
        }
    }

    /// End (exclusive) of the string whose opening quote is at `start`.
    pub fn string_end(buf: &[u8], start: usize) -> Option<usize> {
        let mut i = start + 1;
        loop {
            let k = quote_or_backslash(&buf[i..])?;
            let j = i + k;
            if buf[j] == b'"' {
                return Some(j + 1);
            }
            i = j + 2;
            if i > buf.len() {
                return None;
            }
        }
    }

    /// Takes the next whole value and returns its byte range in `buf`.
    fn take_value(&mut self) -> Result<(usize, usize), ScanError> {
        self.expect_more()?;
        loop {
            match Self::value_end(&self.buf, self.pos) {
                Err(what) => return Err(self.syntax(what)),
                Ok(End::At(e)) => {
                    let s = self.pos;
                    self.pos = e;
                    return Ok((s, e));
                }
                Ok(End::NeedMore) => {
                    let have = self.buf.len() - self.pos;
                    if have > MAX_VALUE {
                        return Err(ScanError::TooLarge(self.offset()));
                    }
                    let at_eof = self.eof;
                    if !self.fill(have)? || at_eof {
                        // A number may end exactly at end of input.
                        if matches!(self.buf.get(self.pos), Some(b'-' | b'0'..=b'9')) && self.eof {
                            let s = self.pos;
                            self.pos = self.buf.len();
                            return Ok((s, self.pos));
                        }
                        return Err(ScanError::Truncated(self.base + self.buf.len() as u64));
                    }
                }
            }
        }
    }

    fn eat(&mut self, b: u8, what: &'static str) -> Result<(), ScanError> {
        if self.expect_more()? == b {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.syntax(what))
        }
    }

    /// Walks the document and calls `f` with each event object's bytes. Returns the number of
    /// events seen.
    pub fn for_each_event(
        self,
        f: impl FnMut(&[u8], u64) -> Result<(), String>,
    ) -> Result<u64, ScanErrorOr> {
        self.for_each_event_and_member(f, |_, _| {})
    }

    /// [`Scanner::for_each_event`], also calling `member` with the key (without its quotes)
    /// and raw value of each top-level member other than `traceEvents` (a trace's header,
    /// before or after the events).
    pub fn for_each_event_and_member(
        mut self,
        mut f: impl FnMut(&[u8], u64) -> Result<(), String>,
        mut member: impl FnMut(&[u8], &[u8]),
    ) -> Result<u64, ScanErrorOr> {
        let mut count = 0u64;
        match self.peek().map_err(ScanErrorOr::Scan)? {
            None => return Err(ScanErrorOr::Scan(ScanError::Truncated(0))),
            Some(b'[') => {
                self.events_array(&mut f, &mut count)?;
            }
            Some(b'{') => {
                self.pos += 1;
                let mut found = false;
                loop {
                    let b = self.expect_more()?;
                    if b == b'}' {
                        self.pos += 1;
                        break;
                    }
                    if b != b'"' {
                        return Err(self.syntax("expected a key").into());
                    }
                    let (ks, ke) = self.take_value()?;
                    // Copied: reading on may refill the buffer and drop what lies before.
                    let key = self.buf[ks + 1..ke - 1].to_vec();
                    self.eat(b':', "expected ':'")?;
                    if key == b"traceEvents" {
                        found = true;
                        self.events_array(&mut f, &mut count)?;
                    } else {
                        let (vs, ve) = self.take_value()?;
                        member(&key, &self.buf[vs..ve]);
                    }
                    match self.expect_more()? {
                        b',' => self.pos += 1,
                        b'}' => {
                            self.pos += 1;
                            break;
                        }
                        _ => return Err(self.syntax("expected ',' or '}'").into()),
                    }
                }
                if !found {
                    return Err(ScanError::NoEvents.into());
                }
            }
            Some(_) => return Err(self.syntax("not JSON: expected '{' or '['").into()),
        }
        if let Some(_b) = self.peek()? {
            return Err(self.syntax("trailing data after the trace").into());
        }
        Ok(count)
    }

    fn events_array(
        &mut self,
        f: &mut impl FnMut(&[u8], u64) -> Result<(), String>,
        count: &mut u64,
    ) -> Result<(), ScanErrorOr> {
        self.eat(b'[', "expected '[' for traceEvents")?;
        if self.expect_more()? == b']' {
            self.pos += 1;
            return Ok(());
        }
        loop {
            if self.expect_more()? != b'{' {
                return Err(self.syntax("expected an event object").into());
            }
            let at = self.offset();
            let (s, e) = self.take_value()?;
            f(&self.buf[s..e], at).map_err(|m| ScanErrorOr::Event { at, msg: m })?;
            *count += 1;
            match self.expect_more()? {
                b',' => self.pos += 1,
                b']' => {
                    self.pos += 1;
                    return Ok(());
                }
                _ => return Err(self.syntax("expected ',' or ']' after an event").into()),
            }
        }
    }
}

const HIGH: u64 = 0x8080_8080_8080_8080;
const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;

/// The high bit of each byte of `w` that is `b`, exactly.
#[inline]
fn eq(w: u64, b: u8) -> u64 {
    let x = w ^ (0x0101_0101_0101_0101 * b as u64);
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// The first quote or backslash in `b`: 8 bytes a step over the first 64 (keys and numbers
/// are short), memchr past them.
#[inline]
fn quote_or_backslash(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 8 <= b.len().min(64) {
        let w = u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let m = eq(w, b'"') | eq(w, b'\\');
        if m != 0 {
            return Some(i + m.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    memchr::memchr2(b'"', b'\\', &b[i..]).map(|k| i + k)
}

/// The end of the object or array whose bracket `open` is at `buf[start]`, as the scanner's
/// `value_end` finds it (brackets counted outside strings, a backslash in a string passing
/// over the byte after it), 8 bytes a step: a word's quotes, by a running parity, mark which
/// of its brackets are inside strings. A word with a backslash goes byte by byte.
fn bracket_end(buf: &[u8], start: usize, open: u8, close: u8) -> End {
    let (mut depth, mut in_str, mut escaped) = (0usize, false, false);
    // One byte's step; Some(end) when it closes the value.
    let step = |j: usize, depth: &mut usize, in_str: &mut bool, escaped: &mut bool| {
        let b = buf[j];
        if *in_str {
            if *escaped {
                *escaped = false;
            } else if b == b'\\' {
                *escaped = true;
            } else if b == b'"' {
                *in_str = false;
            }
        } else if b == b'"' {
            *in_str = true;
        } else if b == open {
            *depth += 1;
        } else if b == close {
            *depth -= 1;
            if *depth == 0 {
                return Some(j + 1);
            }
        }
        None
    };
    let mut i = start;
    while i + 8 <= buf.len() {
        let w = u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
        if escaped || eq(w, b'\\') != 0 {
            for j in i..i + 8 {
                if let Some(e) = step(j, &mut depth, &mut in_str, &mut escaped) {
                    return End::At(e);
                }
            }
            i += 8;
            continue;
        }
        // The high bit of byte j: inside a string (its opening quote in, its closing one out).
        let mut inside = eq(w, b'"');
        inside ^= inside << 8;
        inside ^= inside << 16;
        inside ^= inside << 32;
        if in_str {
            inside ^= HIGH;
        }
        in_str = inside >> 63 != 0;
        let opens = eq(w, open) & !inside;
        let mut brackets = (opens | eq(w, close)) & !inside;
        while brackets != 0 {
            let bit = brackets.trailing_zeros();
            brackets &= brackets - 1;
            if opens & (1 << bit) != 0 {
                depth += 1;
            } else {
                depth -= 1;
                if depth == 0 {
                    return End::At(i + bit as usize / 8 + 1);
                }
            }
        }
        i += 8;
    }
    for j in i..buf.len() {
        if let Some(e) = step(j, &mut depth, &mut in_str, &mut escaped) {
            return End::At(e);
        }
    }
    End::NeedMore
}

/// A scan error, or an error the event callback raised.
#[derive(Debug, PartialEq, Eq)]
pub enum ScanErrorOr {
    Scan(ScanError),
    Event { at: u64, msg: String },
}

impl From<ScanError> for ScanErrorOr {
    fn from(e: ScanError) -> Self {
        ScanErrorOr::Scan(e)
    }
}

impl std::fmt::Display for ScanErrorOr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScanErrorOr::Scan(e) => e.fmt(f),
            ScanErrorOr::Event { at, msg } => write!(f, "event at byte {at}: {msg}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(doc: &str) -> Result<Vec<String>, ScanErrorOr> {
        let mut v = Vec::new();
        Scanner::new(doc.as_bytes()).for_each_event(|b, _| {
            v.push(String::from_utf8(b.to_vec()).unwrap());
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn object_and_array_forms() {
        let doc =
            r#"{"a": {"x": [1, "}"]}, "traceEvents": [ {"n": "a\"}"}, {"n": 2} ], "z": -1.5e3}"#;
        assert_eq!(
            events(doc).unwrap(),
            vec![r#"{"n": "a\"}"}"#, r#"{"n": 2}"#]
        );
        assert_eq!(events("[{\"a\":1}]").unwrap(), vec!["{\"a\":1}"]);
        assert_eq!(
            events("{\"traceEvents\": []}").unwrap(),
            Vec::<String>::new()
        );
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(
            events("{\"traceEvents\": [{\"a\": 1}, {\"b\""),
            Err(ScanErrorOr::Scan(ScanError::Truncated(31)))
        );
        assert_eq!(
            events("{\"other\": 1}"),
            Err(ScanErrorOr::Scan(ScanError::NoEvents))
        );
        assert!(matches!(
            events("hello"),
            Err(ScanErrorOr::Scan(ScanError::Syntax { .. }))
        ));
        assert!(matches!(
            events(""),
            Err(ScanErrorOr::Scan(ScanError::Truncated(0)))
        ));
        assert!(matches!(
            events("{\"traceEvents\": [{\"a\": 1} {\"b\": 2}]}"),
            Err(ScanErrorOr::Scan(ScanError::Syntax { .. }))
        ));
        assert!(matches!(
            events("[{\"a\":1}] trailing"),
            Err(ScanErrorOr::Scan(ScanError::Syntax { .. }))
        ));
    }

    #[test]
    fn header_members_are_handed_over_around_the_events() {
        let doc = r#"{"schemaVersion": 1, "distributedInfo": {"rank": 3},
            "traceEvents": [{"n": 1}], "baseTimeNanoseconds": 1711964646000000000}"#;
        let mut members = Vec::new();
        let n = Scanner::new(doc.as_bytes())
            .for_each_event_and_member(
                |_, _| Ok(()),
                |k, v| {
                    members.push((
                        String::from_utf8(k.to_vec()).unwrap(),
                        String::from_utf8(v.to_vec()).unwrap(),
                    ))
                },
            )
            .unwrap();
        assert_eq!(n, 1);
        let want = [
            ("schemaVersion", "1"),
            ("distributedInfo", r#"{"rank": 3}"#),
            ("baseTimeNanoseconds", "1711964646000000000"),
        ];
        let got: Vec<(&str, &str)> = members
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        assert_eq!(got, want);
    }

    /// The 16-byte bracket matcher finds what a byte-by-byte walk finds, strings, escapes
    /// and truncation included.
    #[test]
    fn brackets_match_a_walk_byte_by_byte() {
        fn walk(b: &[u8]) -> Option<usize> {
            let (open, close) = if b[0] == b'{' {
                (b'{', b'}')
            } else {
                (b'[', b']')
            };
            let (mut depth, mut i) = (0usize, 0);
            while i < b.len() {
                match b[i] {
                    b'"' => i = Scanner::<std::io::Empty>::string_end(b, i)? - 1,
                    x if x == open => depth += 1,
                    x if x == close => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(i + 1);
                        }
                    }
                    _ => {}
                }
                i += 1;
            }
            None
        }
        let alphabet = b"{}[]\"\\ab,:";
        let mut x = 12345u64;
        for n in 0..20_000 {
            let len = 1 + n % 70;
            let mut v = vec![if n % 2 == 0 { b'{' } else { b'[' }];
            for _ in 1..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                v.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            let got = match Scanner::<std::io::Empty>::value_end(&v, 0) {
                Ok(End::At(e)) => Some(e),
                _ => None,
            };
            assert_eq!(got, walk(&v), "{}", String::from_utf8_lossy(&v));
        }
    }

    #[test]
    fn quotes_and_backslashes_are_found_as_memchr_finds_them() {
        let mut x = 99u64;
        for n in 0..5_000 {
            let v: Vec<u8> = (0..n % 150)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    [b'a', b'"', b'\\', 0x80, 0xa2, 0x22 ^ 0x80][(x % 97 % 6) as usize]
                })
                .collect();
            let v = if n % 3 == 0 {
                v.iter()
                    .map(|&b| if b == b'"' || b == b'\\' { b'x' } else { b })
                    .collect()
            } else {
                v
            };
            assert_eq!(quote_or_backslash(&v), memchr::memchr2(b'"', b'\\', &v));
        }
    }

    #[test]
    fn values_split_across_reads() {
        // A reader that returns one byte at a time exercises every refill path.
        struct OneByte<'a>(&'a [u8]);
        impl Read for OneByte<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                if self.0.is_empty() || out.is_empty() {
                    return Ok(0);
                }
                out[0] = self.0[0];
                self.0 = &self.0[1..];
                Ok(1)
            }
        }
        let doc = r#"{"traceEvents": [{"name": "k\\", "ts": 1.5}, {"x": [[]]}], "n": 12}"#;
        let mut v = Vec::new();
        let n = Scanner::new(OneByte(doc.as_bytes()))
            .for_each_event(|b, _| {
                v.push(b.len());
                Ok(())
            })
            .unwrap();
        assert_eq!(n, 2);
        assert_eq!(v, vec![26, 11]);
    }
}

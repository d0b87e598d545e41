//! An event's members, found in its bytes without building a JSON tree: the members gaptop
//! reads (`RawEvent`, and its `args`' in `RawArgs`) are kept as raw JSON text, and strings
//! are decoded only when read. `members` walks any object; `spans` finds where the members
//! lie in one pass, on the splitter's side of the reading (`read`).

use std::borrow::Cow;

use crate::sources::jsonscan;

/// The fields of one event that gaptop reads, borrowed from the event's bytes. Values are
/// kept as raw JSON text; strings are decoded only when read.
#[derive(Default)]
pub(super) struct RawEvent<'a> {
    pub(super) ph: Option<&'a [u8]>,
    pub(super) cat: Option<&'a [u8]>,
    pub(super) name: Option<&'a [u8]>,
    pub(super) pid: Option<&'a [u8]>,
    pub(super) tid: Option<&'a [u8]>,
    pub(super) ts: Option<&'a [u8]>,
    pub(super) dur: Option<&'a [u8]>,
    pub(super) args: Option<&'a [u8]>,
}

#[derive(Default, Clone, Copy)]
pub(super) struct RawArgs<'a> {
    pub(super) correlation: Option<&'a [u8]>,
    pub(super) device: Option<&'a [u8]>,
    pub(super) stream: Option<&'a [u8]>,
    pub(super) graph_id: Option<&'a [u8]>,
    pub(super) stack: Option<&'a [u8]>,
    /// An operator's Python stack, innermost frame first, `;`-separated (Kineto's with_stack
    /// before python_function spans, and cpu_op events since).
    pub(super) call_stack: Option<&'a [u8]>,
    /// The profiled process of a GPU op (gaptop's exports, which may hold several).
    pub(super) process: Option<&'a [u8]>,
    /// An operator's autograd `Sequence number`, and `Fwd thread id` (nonzero on the ops
    /// that run a backward node): `sources::fwdbwd`.
    pub(super) seq: Option<&'a [u8]>,
    pub(super) fwd_tid: Option<&'a [u8]>,
}

fn skip_ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
        i += 1;
    }
    i
}

/// Walks a JSON object's members, giving each key (raw, without quotes) and value (raw text).
/// Values are skipped with the splitter's scanner; anything malformed is an error.
pub(super) fn members<'a>(
    b: &'a [u8],
    mut f: impl FnMut(&'a [u8], &'a [u8]),
) -> Result<(), &'static str> {
    let mut i = skip_ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err("expected an object");
    }
    i = skip_ws(b, i + 1);
    if b.get(i) == Some(&b'}') {
        return Ok(());
    }
    loop {
        if b.get(i) != Some(&b'"') {
            return Err("expected a key");
        }
        let ke = jsonscan::string_end(b, i).ok_or("unterminated key")?;
        let key = &b[i + 1..ke - 1];
        i = skip_ws(b, ke);
        if b.get(i) != Some(&b':') {
            return Err("expected ':'");
        }
        i = skip_ws(b, i + 1);
        if i >= b.len() {
            return Err("missing value");
        }
        let ve = jsonscan::complete_value_end(b, i)?;
        f(key, &b[i..ve]);
        i = skip_ws(b, ve);
        match b.get(i) {
            Some(b',') => i = skip_ws(b, i + 1),
            Some(b'}') => return Ok(()),
            _ => return Err("expected ',' or '}'"),
        }
    }
}

/// Decodes a JSON string value (borrowed when it has no escapes).
pub(super) fn string_of(v: &[u8]) -> Result<Cow<'_, str>, String> {
    if v.len() < 2 || v[0] != b'"' || v[v.len() - 1] != b'"' {
        return Err(format!(
            "expected a string, got {}",
            String::from_utf8_lossy(v)
        ));
    }
    let inner = &v[1..v.len() - 1];
    if memchr::memchr(b'\\', inner).is_none() {
        return std::str::from_utf8(inner)
            .map(Cow::Borrowed)
            .map_err(|_| "invalid UTF-8 in a string".to_string());
    }
    serde_json::from_slice::<String>(v)
        .map(Cow::Owned)
        .map_err(|e| format!("bad string: {e}"))
}

/// A name as messages show it, decoded only when one is written.
pub(super) struct NameText<'a>(pub(super) Option<&'a [u8]>);

impl std::fmt::Debug for NameText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.0.and_then(|v| string_of(v).ok());
        write!(f, "{:?}", s.as_deref().unwrap_or(""))
    }
}

/// An event's `args` members that gaptop reads.
pub(super) fn read_args(a: &[u8]) -> Result<RawArgs<'_>, &'static str> {
    let mut slots = [None; ARGS];
    members(a, |k, v| {
        if let Some(i) = args_member(k) {
            slots[i] = Some(v);
        }
    })?;
    Ok(RawArgs::from_slots(slots))
}

/// Where a member lies in an event's bytes (start, end); (0, 0) when it is absent.
#[derive(Clone, Copy, Default)]
struct At(u32, u32);

impl At {
    fn of(self, b: &[u8]) -> Option<&[u8]> {
        (self.1 > 0).then(|| &b[self.0 as usize..self.1 as usize])
    }
}

/// Where the members gaptop reads lie in an event, found in one pass over it on a thread of
/// their own ([`spans`]): [`RawEvent`]'s, then [`RawArgs`]'s.
#[derive(Clone, Copy, Default)]
pub(super) struct Spans {
    ev: [At; 8],
    args: [At; ARGS],
    /// `args` was an object, read member by member.
    args_read: bool,
}

/// The index in [`Spans::ev`] of an event's member, by its key.
pub(super) fn event_member(key: &[u8]) -> Option<usize> {
    Some(match key {
        b"ph" => 0,
        b"cat" => 1,
        b"name" => 2,
        b"pid" => 3,
        b"tid" => 4,
        b"ts" => 5,
        b"dur" => 6,
        b"args" => 7,
        _ => return None,
    })
}

/// How many arguments gaptop reads ([`RawArgs`]).
const ARGS: usize = 9;

/// The index in [`Spans::args`] of an argument, by its key.
fn args_member(key: &[u8]) -> Option<usize> {
    Some(match key {
        b"correlation" => 0,
        b"device" => 1,
        b"stream" => 2,
        b"graph id" => 3,
        b"stack" => 4,
        b"Call stack" => 5,
        b"process" => 6,
        b"Sequence number" => 7,
        b"Fwd thread id" => 8,
        _ => return None,
    })
}

impl Spans {
    pub(super) fn read<'a>(&self, b: &'a [u8]) -> (RawEvent<'a>, Option<RawArgs<'a>>) {
        let ev = RawEvent::from_slots(self.ev.map(|at| at.of(b)));
        let args = self
            .args_read
            .then(|| RawArgs::from_slots(self.args.map(|at| at.of(b))));
        (ev, args)
    }
}

impl<'a> RawEvent<'a> {
    /// The members in [`event_member`]'s order.
    pub(super) fn from_slots(
        [ph, cat, name, pid, tid, ts, dur, args]: [Option<&'a [u8]>; 8],
    ) -> Self {
        RawEvent {
            ph,
            cat,
            name,
            pid,
            tid,
            ts,
            dur,
            args,
        }
    }
}

impl<'a> RawArgs<'a> {
    /// The arguments in [`args_member`]'s order.
    fn from_slots(
        [correlation, device, stream, graph_id, stack, call_stack, process, seq, fwd_tid]: [Option<&'a [u8]>;
            ARGS],
    ) -> Self {
        RawArgs {
            correlation,
            device,
            stream,
            graph_id,
            stack,
            call_stack,
            process,
            seq,
            fwd_tid,
        }
    }
}

/// Reads the members of the event `b` in one pass, as [`members`] would: where each lies.
/// None for anything [`members`] would not read as it does here (it reads those itself).
pub(super) fn spans(b: &[u8]) -> Option<Spans> {
    let mut s = Spans::default();
    // A second `args` would mix its members with the first's: read as `members` does.
    let mut twice = false;
    let end = object_at(b, 0, 0, &mut |key, walked, depth, vs, ve| {
        if depth == 0 {
            if let Some(i) = event_member(key) {
                if i == 7 {
                    twice |= s.ev[7].1 > 0;
                    s.args_read = walked;
                }
                s.ev[i] = At(vs as u32, ve as u32);
            }
        } else if let Some(i) = args_member(key) {
            s.args[i] = At(vs as u32, ve as u32);
        }
    });
    (end == Ok(Some(b.len())) && b.len() <= u32::MAX as usize && !twice).then_some(s)
}

/// Walks the object at `b[i]` (`depth` 0: an event; 1: its `args`), calling `f` with each
/// member's key, whether it was walked itself (an event's `args` object), its depth and where
/// its value lies. Ok(None): it runs past `b`; Err: not as [`members`] reads it.
fn object_at(
    b: &[u8],
    i: usize,
    depth: u8,
    f: &mut impl FnMut(&[u8], bool, u8, usize, usize),
) -> Result<Option<usize>, ()> {
    macro_rules! need {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    let ws = |mut i: usize| {
        while i < b.len() && matches!(b[i], b' ' | b'\n' | b'\r' | b'\t') {
            i += 1;
        }
        i
    };
    if b.get(i) != Some(&b'{') {
        return Err(());
    }
    let mut i = ws(i + 1);
    if *need!(b.get(i)) == b'}' {
        return Ok(Some(i + 1));
    }
    loop {
        if *need!(b.get(i)) != b'"' {
            return Err(());
        }
        let ke = need!(jsonscan::string_end(b, i));
        let key = &b[i + 1..ke - 1];
        i = ws(ke);
        if *need!(b.get(i)) != b':' {
            return Err(());
        }
        i = ws(i + 1);
        let c = *need!(b.get(i));
        let (walked, ve) = if depth == 0 && c == b'{' && key == b"args" {
            (true, need!(object_at(b, i, 1, f)?))
        } else {
            (false, need!(value_end(b, i)?))
        };
        f(key, walked, depth, i, ve);
        i = ws(ve);
        match *need!(b.get(i)) {
            b',' => i = ws(i + 1),
            b'}' => return Ok(Some(i + 1)),
            _ => return Err(()),
        }
    }
}

/// The end of the value at `b[i]`, as the scanner's `value_end` finds it (None: past `b`).
#[inline]
fn value_end(b: &[u8], i: usize) -> Result<Option<usize>, ()> {
    use crate::sources::jsonscan::{End, Scanner};
    match b[i] {
        b'"' => Ok(jsonscan::string_end(b, i)),
        b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => Ok(b[i..]
            .iter()
            .position(|c| matches!(c, b',' | b'}' | b']' | b' ' | b'\n' | b'\r' | b'\t'))
            .map(|k| i + k)),
        _ => match Scanner::<std::io::Empty>::value_end(b, i) {
            Ok(End::At(e)) => Ok(Some(e)),
            Ok(End::NeedMore) => Ok(None),
            Err(_) => Err(()),
        },
    }
}

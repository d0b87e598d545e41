//! The one frame walker, the thread list, the one string reader and a code object's line
//! table, each generic over [`Memory`]: the collector walks its own thread in place at a
//! launch ([`crate::Local`]), the viewer's sampler every thread from outside
//! ([`crate::Process`]). Every loop is bounded and every read may fail: a chain that loops
//! back on itself or ends in unreadable memory ends the walk, never hangs or panics it.

use crate::layout::{Instr, Layout, LineFields, Threads, TidAt};
use crate::memory::Memory;
use crate::{MAX_DEPTH, MAX_STR, MAX_TABLE, MAX_THREADS};

/// One frame of a thread's Python stack: the code object it runs and the byte offset of its
/// current instruction (-1 where not known).
pub type RawFrame = (usize, i32);

/// The interpreter frame thread state `ts` is running, or 0.
pub fn top_frame<M: Memory>(mem: &M, l: &Layout, ts: usize) -> usize {
    if ts == 0 {
        return 0;
    }
    let f = mem.word(ts + l.ts_frame).unwrap_or(0);
    match l.ts_frame_indirect {
        Some(o) if f != 0 => mem.word(f + o).unwrap_or(0),
        _ => f,
    }
}

/// Walks the frames of thread state `ts`, innermost first, handing each to `each`; at most
/// [`MAX_DEPTH`] of them. The walk ends at a null, at a frame whose code field is not a code
/// object (3.13's entry frames, which hold None, are stepped over), and at a read that fails.
/// `known(code)` says a code object was seen before, so its type is not read again (a reader
/// from outside saves a system call a frame).
///
/// Returns whether the walk is whole: it ended at the thread's first frame (a null previous,
/// whether or not that frame runs a code object) or at the depth limit, not at a read that
/// failed or at a frame in the middle that held no code object. A
/// reader from outside reads a running thread, which may return from a frame and call
/// another in its place between two reads: such a walk is cut, and worth reading again.
pub fn walk<M: Memory>(
    mem: &M,
    l: &Layout,
    ts: usize,
    known: impl Fn(usize) -> bool,
    mut each: impl FnMut(RawFrame),
) -> bool {
    let instr_off = match l.instr {
        Instr::Pointer { frame_off, .. } => frame_off,
        // The 8-byte word holding the int (frames are 8-aligned), so no read ends past it.
        Instr::Index { frame_off } | Instr::Offset { frame_off } => frame_off & !7,
        Instr::Api | Instr::Unknown => l.frame_code,
    };
    let mut f = top_frame(mem, l, ts);
    let mut depth = 0;
    while f != 0 && depth < MAX_DEPTH {
        let Some([code, prev, iw]) = mem.words(f, [l.frame_code, l.frame_prev, instr_off]) else {
            return false;
        };
        if code != 0 && code == l.none_object {
            // 3.13's entry frame, where C called back into Python: its caller (a frame that
            // called the C function) goes on below it; the thread's first one ends the walk.
            if prev == 0 {
                return true;
            }
            depth += 1;
            f = prev;
            continue;
        }
        if code == 0 || !(known(code) || mem.word(code + 8) == Some(l.code_type)) {
            // The thread's first frame may be the interpreter's entry frame, which runs no
            // code object (3.13's holds None): the walk is whole there.
            return code != 0 && prev == 0;
        }
        let lasti = match l.instr {
            Instr::Api => mem.api_lasti(f).unwrap_or(-1),
            Instr::Pointer { code_off, .. } => iw
                .checked_sub(code + code_off)
                .filter(|&d| d < 1 << 24)
                .map_or(-1, |d| d as i32),
            Instr::Index { frame_off } => {
                let v = (iw >> (8 * (frame_off & 7))) as u32 as i32;
                if (0..1 << 23).contains(&v) {
                    v * 2
                } else {
                    -1
                }
            }
            Instr::Offset { frame_off } => {
                let v = (iw >> (8 * (frame_off & 7))) as u32 as i32;
                if (0..1 << 24).contains(&v) {
                    v
                } else {
                    -1
                }
            }
            Instr::Unknown => -1,
        };
        each((code, lasti));
        depth += 1;
        f = prev;
    }
    true
}

/// The interpreter's threads, (native thread id, thread state), in its order; at most
/// [`MAX_THREADS`] of them, ending at a thread state that cannot be read. A thread whose id
/// is kept in its `struct pthread` ([`TidAt::Pthread`]) and cannot be read there (a thread
/// state not bound to a thread yet, or whose thread just ended) is passed over.
pub fn threads<M: Memory>(mem: &M, t: &Threads, mut each: impl FnMut(u32, usize)) {
    let mut ts = mem.word(t.interp + t.head).unwrap_or(0);
    let mut n = 0;
    while ts != 0 && n < MAX_THREADS {
        let tid = match t.tid {
            TidAt::State(o) => match mem.word(ts + o) {
                Some(tid) => Some(tid as u32),
                None => break,
            },
            TidAt::Pthread {
                thread_id,
                pthread_tid,
            } => {
                let Some(p) = mem.word(ts + thread_id) else {
                    break;
                };
                let mut b = [0u8; 4];
                (p != 0 && mem.read(p + pthread_tid, &mut b))
                    .then(|| u32::from_ne_bytes(b))
                    .filter(|&tid| tid as i32 > 0)
            }
        };
        if let Some(tid) = tid {
            each(tid, ts);
        }
        n += 1;
        ts = mem.word(ts + t.next).unwrap_or(0);
    }
}

/// A str object's text: compact strings only, at most [`MAX_STR`] characters; `?` for what
/// is not a str or cannot be read.
pub fn read_str<M: Memory>(mem: &M, l: &Layout, s: usize) -> String {
    let unknown = || "?".to_string();
    if s == 0 || mem.word(s + 8) != Some(l.unicode_type) {
        return unknown();
    }
    // PyASCIIObject: the length, then (after the hash) the state's bit fields.
    let (Some(len), Some(state)) = (mem.word(s + 16), mem.word(s + 32)) else {
        return unknown();
    };
    let state = state as u32;
    let (kind, compact, ascii) = (
        (state >> 2) & 7,
        (state >> 5) & 1 == 1,
        (state >> 6) & 1 == 1,
    );
    if !compact {
        return unknown();
    }
    let len = len.min(MAX_STR);
    if len == 0 {
        return String::new();
    }
    if ascii {
        // A compact ASCII string keeps its bytes inline, at the calibrated offset.
        let mut b = vec![0u8; len];
        if !mem.read(s + l.str_ascii_data, &mut b) {
            return unknown();
        }
        return String::from_utf8(b)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    }
    // A compact non-ASCII one keeps `len` code units of `kind` bytes after its
    // PyCompactUnicodeObject header, 16 bytes past where ASCII data starts.
    let width = match kind {
        1 => 1,
        2 => 2,
        _ => 4,
    };
    let mut b = vec![0u8; len * width];
    if !mem.read(s + l.str_ascii_data + 16, &mut b) {
        return unknown();
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

/// A code object's first line and location table (empty where it cannot be read), for
/// [`crate::line_of`].
pub fn code_lines<M: Memory>(mem: &M, lf: &LineFields, code: usize) -> (i64, Vec<u8>) {
    let at = code + lf.firstlineno;
    let first = mem
        .word(at & !7)
        .map_or(0, |w| (w >> (8 * (at & 7))) as u32 as i32 as i64);
    let b = mem.word(code + lf.linetable).unwrap_or(0);
    let n = if b == 0 {
        0
    } else {
        mem.word(b + lf.bytes_size).unwrap_or(0)
    };
    let mut table = Vec::new();
    if n > 0 && n <= MAX_TABLE {
        let mut t = vec![0u8; n];
        if mem.read(b + lf.bytes_data, &mut t) {
            table = t;
        }
    }
    (first, table)
}

/// Whether a code object is one of CPython's own entry shims (`<shim>`, `<interpreter
/// trampoline>`), which no stack shows; `<stdin>`'s code is the program's.
pub fn is_entry_shim(file: &str, qual: &str) -> bool {
    file.starts_with('<') && qual.starts_with('<') && file != "<stdin>"
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::ProcessLayout;

    /// Memory made of words, as a test lays it out; any other address fails to read.
    #[derive(Default)]
    struct Fake {
        words: HashMap<usize, usize>,
        bytes: HashMap<usize, u8>,
    }

    impl Fake {
        fn put(&mut self, addr: usize, v: usize) {
            self.words.insert(addr, v);
            for (i, b) in v.to_ne_bytes().into_iter().enumerate() {
                self.bytes.insert(addr + i, b);
            }
        }
        fn put_bytes(&mut self, addr: usize, b: &[u8]) {
            for (i, &x) in b.iter().enumerate() {
                self.bytes.insert(addr + i, x);
            }
        }
        /// An ASCII (or, with `kind`, a wider) compact str at `s`.
        fn put_str(&mut self, l: &Layout, s: usize, text: &str) {
            self.put(s + 8, l.unicode_type);
            let wide = !text.is_ascii();
            self.put(s + 16, text.chars().count());
            let state = if wide {
                (4 << 2) | (1 << 5)
            } else {
                (1 << 2) | (1 << 5) | (1 << 6)
            };
            self.put(s + 32, state);
            if wide {
                let b: Vec<u8> = text
                    .chars()
                    .flat_map(|c| (c as u32).to_ne_bytes())
                    .collect();
                self.put_bytes(s + l.str_ascii_data + 16, &b);
            } else {
                self.put_bytes(s + l.str_ascii_data, text.as_bytes());
            }
        }
    }

    impl Memory for Fake {
        fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
            for (i, b) in buf.iter_mut().enumerate() {
                match self.bytes.get(&(addr + i)) {
                    Some(&x) => *b = x,
                    None => return false,
                }
            }
            !buf.is_empty()
        }
    }

    /// 3.11's layout, as the collector published it.
    fn layout() -> ProcessLayout {
        ProcessLayout {
            minor: Some(11),
            threads: Threads {
                interp: 0x10_000,
                head: 16,
                next: 8,
                tid: TidAt::State(152),
            },
            frames: Layout {
                ts_frame: 56,
                ts_frame_indirect: Some(8),
                frame_code: 32,
                frame_prev: 48,
                instr: Instr::Pointer {
                    frame_off: 56,
                    code_off: 192,
                },
                code_type: 0xc0de,
                unicode_type: 0x57a,
                none_object: 0xa0e,
                code_filename: 112,
                code_qualname: 128,
                str_ascii_data: 48,
            },
            lines: None,
            gil: None,
        }
    }

    const TS: usize = 0x20_000;
    const CFRAME: usize = 0x21_000;
    const FRAMES: usize = 0x30_000;
    const CODES: usize = 0x40_000;

    /// A thread whose chain is `n` frames, frame i running code i at instruction 2i, each
    /// frame's caller the next; the last one's caller is `last_prev`.
    fn chain(l: &Layout, n: usize, last_prev: usize) -> Fake {
        let mut m = Fake::default();
        m.put(TS + l.ts_frame, CFRAME);
        m.put(CFRAME + 8, FRAMES);
        for i in 0..n {
            let (f, code) = (FRAMES + i * 0x100, CODES + i * 0x1000);
            m.put(f + l.frame_code, code);
            m.put(
                f + l.frame_prev,
                if i + 1 == n { last_prev } else { f + 0x100 },
            );
            m.put(f + 56, code + 192 + 2 * i);
            // The words between the fields, as a real frame has them.
            for o in (0..64).step_by(8) {
                m.bytes.entry(f + o).or_insert(0);
                for k in 1..8 {
                    m.bytes.entry(f + o + k).or_insert(0);
                }
            }
            m.put(code + 8, l.code_type);
        }
        m
    }

    fn frames_of(m: &Fake, l: &Layout) -> Vec<RawFrame> {
        let mut out = Vec::new();
        walk(m, l, TS, |_| false, |f| out.push(f));
        out
    }

    #[test]
    fn a_chain_is_walked_innermost_first_with_each_frame_s_instruction() {
        let l = layout().frames;
        let m = chain(&l, 3, 0);
        assert_eq!(
            frames_of(&m, &l),
            vec![(CODES, 0), (CODES + 0x1000, 2), (CODES + 0x2000, 4)]
        );
        // An instruction pointer outside its bytecode reads -1; without one, -1 too.
        let mut m2 = chain(&l, 1, 0);
        m2.put(FRAMES + 56, 0);
        assert_eq!(frames_of(&m2, &l), vec![(CODES, -1)]);
        let unknown = Layout {
            instr: Instr::Unknown,
            ..l
        };
        assert_eq!(frames_of(&m, &unknown)[2], (CODES + 0x2000, -1));
        // Api: this memory cannot ask the interpreter.
        let api = Layout {
            instr: Instr::Api,
            ..l
        };
        assert_eq!(frames_of(&m, &api)[0], (CODES, -1));
        // 3.10's index: an int, in 2-byte units, here in the word's upper half.
        let index = Layout {
            instr: Instr::Index { frame_off: 60 },
            ..l
        };
        let mut m3 = chain(&l, 1, 0);
        m3.put(FRAMES + 56, 7 << 32);
        assert_eq!(frames_of(&m3, &index), vec![(CODES, 14)]);
        m3.put(FRAMES + 56, (-1i32 as u32 as usize) << 32);
        assert_eq!(frames_of(&m3, &index), vec![(CODES, -1)]);
        // 3.9's offset: an int, in bytes.
        let offset = Layout {
            instr: Instr::Offset { frame_off: 60 },
            ..l
        };
        m3.put(FRAMES + 56, 14 << 32);
        assert_eq!(frames_of(&m3, &offset), vec![(CODES, 14)]);
        m3.put(FRAMES + 56, (-1i32 as u32 as usize) << 32);
        assert_eq!(frames_of(&m3, &offset), vec![(CODES, -1)]);
    }

    #[test]
    fn a_chain_that_loops_stops_at_the_deepest_stack_read() {
        let l = layout().frames;
        // The last of three frames calls back into the first: a cycle.
        let m = chain(&l, 3, FRAMES);
        let got = frames_of(&m, &l);
        assert_eq!(got.len(), MAX_DEPTH);
        assert_eq!(got[3], got[0]);
        // A frame that is its own caller.
        let m = chain(&l, 1, FRAMES);
        assert_eq!(frames_of(&m, &l).len(), MAX_DEPTH);
    }

    #[test]
    fn a_chain_cut_short_keeps_the_frames_read_before_it() {
        let l = layout().frames;
        // The caller of the second frame is unmapped.
        let m = chain(&l, 2, 0xdead_0000);
        assert_eq!(frames_of(&m, &l).len(), 2);
        // A frame whose code field is not a code object, or is null, or unreadable.
        let mut m = chain(&l, 3, 0);
        m.put(CODES + 0x1000 + 8, 0x1234);
        assert_eq!(frames_of(&m, &l), vec![(CODES, 0)]);
        assert_eq!(
            walk_known(&m, &l).len(),
            3,
            "a code object known is not read again"
        );
        let mut m = chain(&l, 3, 0);
        assert!(walk(&m, &l, TS, |_| false, |_| ()), "a whole chain");
        m.put(FRAMES + 0x100 + l.frame_code, 0);
        assert_eq!(frames_of(&m, &l).len(), 1);
        assert!(
            !walk(&m, &l, TS, |_| false, |_| ()),
            "cut at a frame of no code"
        );
        let mut m = chain(&l, 3, 0);
        m.words.remove(&(CODES + 0x2000 + 8));
        m.bytes.remove(&(CODES + 0x2000 + 8));
        assert_eq!(frames_of(&m, &l).len(), 2);
        assert!(
            walk(&m, &l, TS, |_| false, |_| ()),
            "the first frame runs no code object (3.13's entry frame): whole"
        );
        let mut m = chain(&l, 3, 0);
        m.words.remove(&(CODES + 0x1000 + 8));
        m.bytes.remove(&(CODES + 0x1000 + 8));
        assert_eq!(frames_of(&m, &l).len(), 1);
        assert!(
            !walk(&m, &l, TS, |_| false, |_| ()),
            "cut at a middle frame of no code"
        );
        // 3.13's entry frame (None in place of code) where C called back into Python: stepped
        // over in the middle, the end at the bottom; unknown where None is not known.
        let mut m = chain(&l, 4, 0);
        m.put(FRAMES + 0x100 + l.frame_code, l.none_object);
        let mut out = Vec::new();
        assert!(walk(&m, &l, TS, |_| false, |f| out.push(f)), "whole");
        assert_eq!(
            out,
            vec![(CODES, 0), (CODES + 0x2000, 4), (CODES + 0x3000, 6)]
        );
        m.put(FRAMES + 0x300 + l.frame_code, l.none_object);
        assert!(walk(&m, &l, TS, |_| false, |_| ()));
        assert_eq!(frames_of(&m, &l).len(), 2);
        let blind = Layout {
            none_object: 0,
            ..l
        };
        assert!(
            !walk(&m, &blind, TS, |_| false, |_| ()),
            "cut where None is unknown"
        );
        // No frame, no thread state, an unreadable one, a cframe that is null.
        assert!(frames_of(&Fake::default(), &l).is_empty());
        let mut out = Vec::new();
        walk(&m, &l, 0, |_| false, |f| out.push(f));
        walk(&m, &l, 0x99_000, |_| false, |f| out.push(f));
        assert!(out.is_empty());
        let mut m = chain(&l, 3, 0);
        m.put(TS + l.ts_frame, 0);
        assert!(frames_of(&m, &l).is_empty());
        // Fields spread too far for one read are read one by one.
        let far = Layout {
            frame_prev: 4096,
            ..l
        };
        let mut m = chain(&l, 2, 0);
        m.put(FRAMES + 4096, FRAMES + 0x100);
        m.put(FRAMES + 0x100 + 4096, 0);
        assert_eq!(frames_of(&m, &far).len(), 2);
    }

    fn walk_known(m: &Fake, l: &Layout) -> Vec<RawFrame> {
        let mut out = Vec::new();
        walk(m, l, TS, |c| c == CODES + 0x1000, |f| out.push(f));
        out
    }

    /// The threads `threads` lists, (native id, thread state).
    fn listed(m: &Fake, t: &Threads) -> Vec<(u32, usize)> {
        let mut v = Vec::new();
        threads(m, t, |tid, ts| v.push((tid, ts)));
        v
    }

    #[test]
    fn threads_are_listed_until_the_list_ends_or_loops() {
        let t = layout().threads;
        let mut m = Fake::default();
        m.put(t.interp + t.head, TS);
        m.put(TS + 152, 41);
        m.put(TS + t.next, TS + 0x1000);
        m.put(TS + 0x1000 + 152, 42);
        m.put(TS + 0x1000 + t.next, 0);
        let list = |m: &Fake| listed(m, &t);
        assert_eq!(list(&m), vec![(41, TS), (42, TS + 0x1000)]);
        m.put(TS + 0x1000 + t.next, TS);
        assert_eq!(list(&m).len(), MAX_THREADS);
        m.put(TS + 0x1000 + t.next, 0x7777_0000);
        assert_eq!(
            list(&m).len(),
            2,
            "a next that cannot be read ends the list"
        );
    }

    #[test]
    fn a_thread_s_id_is_read_through_its_pthread_where_the_state_keeps_none() {
        // 3.9's and 3.10's: `thread_id` (pthread_self()) at 176, the tid at 720 of it.
        let t = Threads {
            tid: TidAt::Pthread {
                thread_id: 176,
                pthread_tid: 720,
            },
            ..layout().threads
        };
        let (p1, p2) = (0x80_000, 0x90_000);
        let mut m = Fake::default();
        m.put(t.interp + t.head, TS);
        m.put(TS + 176, p1);
        m.put(p1 + 720, 7 << 32 | 41);
        m.put(TS + t.next, TS + 0x1000);
        m.put(TS + 0x1000 + 176, p2);
        m.put(p2 + 720, 42);
        m.put(TS + 0x1000 + t.next, TS + 0x2000);
        m.put(TS + 0x2000 + 176, 0);
        m.put(TS + 0x2000 + t.next, 0);
        let list = |m: &Fake| listed(m, &t);
        // The third, not bound to a thread (thread_id 0), is passed over.
        assert_eq!(list(&m), vec![(41, TS), (42, TS + 0x1000)]);
        // A pthread that cannot be read: that thread passed over, the list goes on.
        m.put(TS + 176, 0x7777_0000);
        assert_eq!(list(&m), vec![(42, TS + 0x1000)]);
        // A next that cannot be read ends it.
        m.put(TS + t.next, 0x7777_0000);
        assert_eq!(list(&m), vec![]);
    }

    #[test]
    fn strings_read_as_their_text_or_a_question_mark() {
        let l = layout().frames;
        let mut m = Fake::default();
        m.put_str(&l, 0x50_000, "model.py");
        m.put_str(&l, 0x51_000, "Modèle.forward·λ");
        m.put_str(&l, 0x52_000, "");
        assert_eq!(read_str(&m, &l, 0x50_000), "model.py");
        assert_eq!(read_str(&m, &l, 0x51_000), "Modèle.forward·λ");
        assert_eq!(read_str(&m, &l, 0x52_000), "");
        assert_eq!(read_str(&m, &l, 0), "?", "null");
        assert_eq!(read_str(&m, &l, 0x60_000), "?", "unmapped");
        m.put(0x53_008, 0x1234);
        assert_eq!(read_str(&m, &l, 0x53_000), "?", "not a str");
        // A length past what is mapped: cut at MAX_STR, still unreadable here.
        m.put_str(&l, 0x54_000, "abc");
        m.put(0x54_000 + 16, usize::MAX);
        assert_eq!(read_str(&m, &l, 0x54_000), "?");
        // Not compact.
        m.put_str(&l, 0x55_000, "abc");
        m.put(0x55_000 + 32, 1 << 6);
        assert_eq!(read_str(&m, &l, 0x55_000), "?");
    }

    #[test]
    fn a_code_object_s_lines_are_its_first_line_and_table() {
        let lf = LineFields {
            linetable: 96,
            firstlineno: 68,
            bytes_size: 16,
            bytes_data: 32,
        };
        let mut m = Fake::default();
        let (code, table) = (0x70_000, 0x71_000);
        m.put(code + 64, 40 << 32);
        m.put(code + 96, table);
        m.put(table + 16, 3);
        m.put_bytes(table + 32, &[1, 2, 3]);
        assert_eq!(code_lines(&m, &lf, code), (40, vec![1, 2, 3]));
        m.put(table + 16, MAX_TABLE + 1);
        assert_eq!(code_lines(&m, &lf, code), (40, vec![]));
        assert_eq!(code_lines(&m, &lf, 0x72_000), (0, vec![]));
    }

    #[test]
    fn only_cpython_s_own_entry_code_is_a_shim() {
        assert!(is_entry_shim("<shim>", "<shim>"));
        assert!(!is_entry_shim("<stdin>", "<module>"));
        assert!(!is_entry_shim("a.py", "<module>"));
    }
}

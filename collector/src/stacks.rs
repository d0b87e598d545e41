//! Launch stacks: the launching thread's Python frames (and native frames with `--native`),
//! walked at each launch and interned, so that each distinct stack is named once and a launch
//! carries only its id. The table they are interned in (`StackCache`) is a part of the
//! `Collector`, defined with the others in `state`; this module is the walk and the interning.

use std::ffi::{c_int, c_void};

use gaptop_wire as w;
use gaptop_wire::stackframe::python_name;

use gaptop_pystack::{is_entry_shim, read_str, walk, Local, Memory};

use crate::limits::{MAX_STACKS, NATIVE_REWALK};
use crate::native::{native_name, walk_native};
use crate::pyframes::LAYOUT;
use crate::state::{Collector, StackCache};

/// Spreads a walk hash's high bits into its low ones (the walk's multiply-xor mixing leaves
/// the low bits depending only on the inputs' low bits).
fn fold(h: u64) -> u64 {
    let h = (h ^ (h >> 33)).wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl Collector {
    /// Walks the calling thread's Python frames (and native frames, when asked) and returns an
    /// interned stack id (0 if none). Known stacks cost one walk, one hash and one lookup; only
    /// a new stack names its frames.
    ///
    /// `site` identifies what is being called (API and kernel): native walks are costly (µs),
    /// so one is reused for launches of the same site from the same Python stack, and redone
    /// every NATIVE_REWALK launches.
    ///
    /// `recent` is the calling thread's own small cache of stacks it has launched from (by
    /// walk hash, direct-mapped; empty for none): a hit costs neither the shared lock nor a
    /// SipHash lookup. Ids never change once given, so a thread's copy cannot go stale.
    ///
    /// # Safety
    /// The calling thread's Python frames must hold still during the walk: call it from inside
    /// a C call the thread is making (a CUDA API callback, a ctypes call), never from inside
    /// the interpreter's own frame bookkeeping (a signal handler, say). The walk reads them in
    /// place (`gaptop_pystack::Local`), through the offsets calibration confirmed.
    pub(crate) unsafe fn launch_stack(
        &self,
        frames: &mut Vec<(usize, c_int)>,
        native: &mut Vec<usize>,
        recent: &mut [(u64, u32)],
        site: u64,
    ) -> u32 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mix = |h: u64, v: u64| (h ^ v).wrapping_mul(0x100_0000_01b3);
        frames.clear();
        native.clear();
        let layout = if self.sw.py_stacks {
            LAYOUT.get()
        } else {
            None
        };
        // SAFETY: `mem` reads only the calling thread's own frames, found by the one walk
        // from its own thread state (through the offsets calibration confirmed), and the code
        // and str objects they name: they hold still while the thread is in this call (the
        // contract above). `lasti` is this interpreter's PyUnstable_InterpreterFrame_GetLasti.
        let mem = unsafe { Local::new(layout.and_then(|py| py.lasti)) };
        if let Some(py) = layout {
            let l = &py.frames;
            // SAFETY: `this_tstate` is PyGILState_GetThisThreadState, callable without the GIL.
            let ts = unsafe { (py.this_tstate)() } as usize;
            walk(
                &mem,
                l,
                ts,
                |_| false,
                |(code, at)| {
                    frames.push((code, at));
                    h = mix(h, code as u64);
                    h = mix(h, at as u32 as u64);
                    h = mix(h, mem.word(code + l.code_filename).unwrap_or(0) as u64);
                    h = mix(h, mem.word(code + l.code_qualname).unwrap_or(0) as u64);
                },
            );
        }
        let memo_key = mix(h, site);
        // Only Python stacks are cached per thread: with native frames the shared memo
        // decides when a walk is redone.
        let slot = if self.native.is_none() && !frames.is_empty() && !recent.is_empty() {
            let i = (fold(h) as usize) & (recent.len() - 1);
            if recent[i].0 == h && recent[i].1 != 0 {
                return recent[i].1;
            }
            Some(i)
        } else {
            None
        };
        if let Some(map) = &self.native {
            {
                let mut c = self.stacks.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((s, n)) = c.native_memo.get_mut(&memo_key) {
                    *n += 1;
                    if *n < NATIVE_REWALK {
                        return *s;
                    }
                }
            }
            walk_native(map, native);
            for &ip in native.iter() {
                h = mix(h, ip as u64);
            }
        }
        if frames.is_empty() && native.is_empty() {
            return 0;
        }
        let mut c = self.stacks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&s) = c.by_hash.get(&h) {
            if self.native.is_some() && c.native_memo.len() < MAX_STACKS as usize {
                c.native_memo.insert(memo_key, (s, 0));
            }
            if let Some(i) = slot {
                recent[i] = (h, s);
            }
            return s;
        }
        if c.next_stack >= MAX_STACKS {
            c.full += 1;
            return 0;
        }
        // New stack: name its frames, outermost first, and intern the chain: the Python frames,
        // then the native frames from the interpreter down to the CUDA call.
        let mut parent = 0u32;
        if let Some(py) = layout {
            let l = &py.frames;
            for &(code, at) in frames.iter().rev() {
                let frame = match c.frames.get(&(code, at)) {
                    Some(&0) => continue,
                    Some(&id) => id,
                    None => {
                        // `code` is a code object of the walk above, still alive (its frame
                        // holds it, and holds still); its name fields are str objects, which
                        // `read_str` checks before reading them.
                        let (file, qual) = (
                            read_str(&mem, l, mem.word(code + l.code_filename).unwrap_or(0)),
                            read_str(&mem, l, mem.word(code + l.code_qualname).unwrap_or(0)),
                        );
                        if is_entry_shim(&file, &qual) {
                            c.frames.insert((code, at), 0);
                            continue;
                        }
                        let line = match py.addr2line {
                            // SAFETY: PyCode_Addr2Line only reads the code object, alive as
                            // above, and maps any offset (-1 too) to a line.
                            Some(a2l) => unsafe { a2l(code as *mut c_void, at) },
                            None => 0,
                        };
                        let id = self.names.name(&python_name(&file, line, &qual));
                        c.frames.insert((code, at), id);
                        id
                    }
                };
                parent = self.intern_node(&mut c, parent, frame);
            }
        }
        for &ip in native.iter().rev() {
            let frame = match c.native.get(&ip) {
                Some(&id) => id,
                None => {
                    let id = self.names.name(&native_name(ip, &mut c.modules));
                    c.native.insert(ip, id);
                    id
                }
            };
            parent = self.intern_node(&mut c, parent, frame);
        }
        c.by_hash.insert(h, parent);
        if self.native.is_some() && c.native_memo.len() < MAX_STACKS as usize {
            c.native_memo.insert(memo_key, (parent, 0));
        }
        if let Some(i) = slot {
            recent[i] = (h, parent);
        }
        parent
    }

    /// The stack id of `frame` called from stack `parent`, defined when new (under `stacks`,
    /// then `names.defs`).
    fn intern_node(&self, c: &mut StackCache, parent: u32, frame: u32) -> u32 {
        match c.nodes.get(&(parent, frame)) {
            Some(&s) => s,
            None => {
                c.next_stack += 1;
                let s = c.next_stack;
                c.nodes.insert((parent, frame), s);
                let mut d = self.names.defs.lock().unwrap_or_else(|e| e.into_inner());
                w::encode_stack(&mut d, s, parent, frame);
                s
            }
        }
    }
}

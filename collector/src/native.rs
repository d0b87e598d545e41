//! Native frames for `--native`: the process's own unwinder, from the CUDA call up to the
//! Python interpreter; frames leave as module path and offset.

use std::ffi::{c_int, c_void, CStr};

use gaptop_wire::stackframe::native_address_name;

use crate::limits::MAX_NATIVE;

// The walk uses the unwinder the process already has (libgcc's, which finds unwind tables
// through glibc without a global lock), stops at the Python interpreter, and skips the frames of
// gaptop, CUPTI and the CUDA libraries above the caller. No symbol is looked up here: a frame is
// named by its module's path and offset, and the viewer resolves it.

/// What a code address belongs to, for the native walk.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Region {
    /// gaptop, CUPTI and the CUDA libraries: frames above the caller, skipped.
    Plumbing,
    /// The Python interpreter: the native walk stops here (the Python frames take over).
    Interpreter,
}

/// Address ranges of the modules the native walk treats specially, found once at start.
#[derive(Default)]
pub(crate) struct NativeMap {
    regions: Vec<(usize, usize, Region)>,
}

impl NativeMap {
    fn region(&self, ip: usize) -> Option<Region> {
        self.regions
            .iter()
            .find(|r| r.0 <= ip && ip < r.1)
            .map(|r| r.2)
    }
}

extern "C" {
    fn _Unwind_Backtrace(
        trace: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
        arg: *mut c_void,
    ) -> c_int;
    fn _Unwind_GetIP(ctx: *mut c_void) -> usize;
}

struct Walk<'a> {
    map: &'a NativeMap,
    out: &'a mut Vec<usize>,
    started: bool,
}

/// One frame of `_Unwind_Backtrace`'s walk.
///
/// # Safety
/// `ctx` must be the unwinder's context for this step and `arg` the `Walk` that
/// `walk_native` passed.
unsafe extern "C" fn walk_step(ctx: *mut c_void, arg: *mut c_void) -> c_int {
    const CONTINUE: c_int = 0;
    const STOP: c_int = 4;
    // SAFETY: `arg` is `walk_native`'s `Walk`, borrowed by nothing else during the walk.
    let w = unsafe { &mut *(arg as *mut Walk) };
    // SAFETY: `ctx` is the unwinder's context for the frame being visited.
    let ip = unsafe { _Unwind_GetIP(ctx) };
    if ip == 0 {
        return STOP;
    }
    match w.map.region(ip) {
        Some(Region::Plumbing) if !w.started => CONTINUE,
        Some(Region::Interpreter) => STOP,
        _ => {
            w.started = true;
            w.out.push(ip);
            if w.out.len() >= MAX_NATIVE {
                STOP
            } else {
                CONTINUE
            }
        }
    }
}

/// Fills `out` with return addresses, innermost first.
pub(crate) fn walk_native(map: &NativeMap, out: &mut Vec<usize>) {
    let mut w = Walk {
        map,
        out,
        started: false,
    };
    // SAFETY: `walk_step` has the unwinder's callback signature and reads `arg` as the `Walk`
    // it is given, which outlives the walk (the unwinder calls back only inside this call).
    unsafe {
        _Unwind_Backtrace(walk_step, &mut w as *mut Walk as *mut c_void);
    }
}

/// A loaded module: first address, end, load base, path.
pub(crate) type Module = (usize, usize, usize, String);

/// Loaded modules.
pub(crate) fn modules() -> Vec<Module> {
    /// # Safety
    /// As `dl_iterate_phdr` calls it: `info` describes one loaded object, `data` is the
    /// `Vec<Module>` `modules` passed.
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> c_int {
        // SAFETY: `data` is `modules`' vector, borrowed by nothing else during the iteration;
        // `info` is glibc's description of a loaded object, valid during this call.
        let (v, i) = unsafe { (&mut *(data as *mut Vec<Module>), &*info) };
        let base = i.dlpi_addr as usize;
        let (mut lo, mut hi) = (usize::MAX, 0usize);
        for k in 0..i.dlpi_phnum as usize {
            // SAFETY: `dlpi_phdr` points to the object's `dlpi_phnum` program headers.
            let ph = unsafe { &*i.dlpi_phdr.add(k) };
            if ph.p_type == libc::PT_LOAD {
                lo = lo.min(base + ph.p_vaddr as usize);
                hi = hi.max(base + (ph.p_vaddr + ph.p_memsz) as usize);
            }
        }
        let name = if i.dlpi_name.is_null() {
            String::new()
        } else {
            // SAFETY: a non-null `dlpi_name` is the object's NUL-terminated path.
            unsafe { CStr::from_ptr(i.dlpi_name) }
                .to_string_lossy()
                .into_owned()
        };
        if lo < hi {
            v.push((lo, hi, base, name));
        }
        0
    }
    let mut v: Vec<Module> = Vec::new();
    // SAFETY: `each` has the callback signature glibc expects and reads `data` as the vector
    // passed here, which outlives the call.
    unsafe {
        libc::dl_iterate_phdr(Some(each), &mut v as *mut _ as *mut c_void);
    }
    let exe = std::fs::read_link("/proc/self/exe")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    for m in &mut v {
        if m.3.is_empty() {
            m.3 = exe.clone();
        }
    }
    v
}

/// The modules the walk skips (gaptop, CUPTI, libcuda, libcudart) and the interpreter's.
pub(crate) fn native_map() -> NativeMap {
    let mods = modules();
    let here = native_map as *const () as usize;
    // SAFETY: a lookup by a NUL-terminated name; the address is only compared.
    let interp =
        unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_PyEval_EvalFrameDefault".as_ptr()) } as usize;
    let mut regions = Vec::new();
    for (lo, hi, _, path) in &mods {
        let file = path.rsplit('/').next().unwrap_or(path);
        let inside = |a: usize| a != 0 && *lo <= a && a < *hi;
        if inside(here)
            || file.starts_with("libcupti")
            || file.starts_with("libcuda.so")
            || file.starts_with("libcudart")
        {
            regions.push((*lo, *hi, Region::Plumbing));
        } else if inside(interp) || file.starts_with("libpython3") {
            regions.push((*lo, *hi, Region::Interpreter));
        }
    }
    NativeMap { regions }
}

/// `native:<module path>+0x<offset>`: what the viewer resolves to a symbol. The address is a
/// return address, so the offset names the call instruction (one byte back).
pub(crate) fn native_name(ip: usize, known: &mut Vec<Module>) -> String {
    let at = ip.saturating_sub(1);
    let find = |mods: &[Module]| {
        mods.iter()
            .find(|m| m.0 <= at && at < m.1)
            .map(|m| native_address_name(&m.3, (at - m.2) as u64))
    };
    // The module list is read again only for an address it does not cover (a library loaded
    // since): new frames are named under the stack table's lock.
    if let Some(n) = find(known) {
        return n;
    }
    *known = modules();
    find(known).unwrap_or_else(|| native_address_name("?", at as u64))
}

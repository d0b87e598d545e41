//! Names native frames. The collector sends `native:<module path>+0x<offset>` and does no
//! symbol work in the profiled process; the viewer, on the same machine, reads the module's
//! ELF symbol tables once and names the function that holds the offset.

use std::collections::HashMap;

use object::{Object, ObjectSymbol, SymbolKind};

/// Function symbols of one module, sorted by address: (address, size, name).
#[derive(Debug)]
struct Module {
    syms: Vec<(u64, u64, String)>,
}

impl Module {
    fn load(path: &str) -> Option<Module> {
        let file = std::fs::File::open(path).ok()?;
        let cache = object::ReadCache::new(file);
        let obj = object::File::parse(&cache).ok()?;
        let mut syms: Vec<(u64, u64, String)> = obj
            .symbols()
            .chain(obj.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        syms.sort_unstable_by(|a, b| {
            (a.0, std::cmp::Reverse(a.1)).cmp(&(b.0, std::cmp::Reverse(b.1)))
        });
        syms.dedup_by_key(|s| s.0);
        Some(Module { syms })
    }

    /// The function that holds `off`: a symbol whose extent covers it, or one of no stated
    /// size at exactly that address. An address past a symbol's end is not named after it: in
    /// a stripped binary the nearest symbol before an address is usually an unrelated export,
    /// and `binary+0xoffset` is the honest name.
    fn lookup(&self, off: u64) -> Option<&str> {
        let i = self.syms.partition_point(|s| s.0 <= off);
        let (addr, size, name) = self.syms.get(i.checked_sub(1)?)?;
        (off < addr + (*size).max(1)).then_some(name.as_str())
    }
}

/// Resolves native frame names, reading each module at most once.
#[derive(Default, Debug)]
pub struct Symbolizer {
    modules: HashMap<String, Option<Module>>,
}

/// Whether a frame name is an unresolved native frame from the collector.
pub fn is_native(text: &str) -> bool {
    text.starts_with("native:")
}

/// A C++ or Rust symbol as people read it in a call tree: demangled, without parameter lists.
fn readable(sym: &str) -> String {
    if sym.starts_with("_Z") {
        if let Ok(s) = cpp_demangle::Symbol::new(sym) {
            let opts = cpp_demangle::DemangleOptions::new()
                .no_params()
                .no_return_type();
            if let Ok(d) = s.demangle_with_options(&opts) {
                return d;
            }
        }
    }
    sym.to_string()
}

impl Symbolizer {
    pub fn new() -> Self {
        Self::default()
    }

    /// `native:/usr/lib/libfoo.so+0x1a2b` becomes `foo::bar [libfoo.so]`, or `libfoo.so+0x1a2b`
    /// when the module or the symbol cannot be read. Other names are returned unchanged.
    pub fn resolve(&mut self, text: &str) -> String {
        let Some(rest) = text.strip_prefix("native:") else {
            return text.to_string();
        };
        let Some((path, off)) = rest.rsplit_once("+0x") else {
            return rest.to_string();
        };
        let Ok(off) = u64::from_str_radix(off, 16) else {
            return rest.to_string();
        };
        self.name(path, off)
    }

    /// Names the code at `offset` in the module at `path`, as [`Symbolizer::resolve`] does for
    /// `native:<path>+0x<offset>`. The offset is an address as the module's ELF file states it
    /// (the run-time address less the module's load bias), which is what its symbols hold.
    pub fn name(&mut self, path: &str, offset: u64) -> String {
        let file = path.rsplit('/').next().unwrap_or(path);
        if !self.modules.contains_key(path) {
            self.modules.insert(path.to_string(), Module::load(path));
        }
        let module = self.modules.get(path).and_then(Option::as_ref);
        match module.and_then(|m| m.lookup(offset)) {
            Some(sym) => format!("{} [{file}]", readable(sym)),
            None => format!("{file}+0x{offset:x}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The module and offset of a function in this process, as the collector would send them.
    fn native_name_of(addr: usize) -> String {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        // The load base is the lowest mapping of the file that holds `addr`.
        let mut hit = None;
        for line in maps.lines() {
            let mut it = line.split_whitespace();
            let range = it.next().unwrap();
            let path = it.nth(4).unwrap_or("");
            let (lo, hi) = range.split_once('-').unwrap();
            let (lo, hi) = (
                usize::from_str_radix(lo, 16).unwrap(),
                usize::from_str_radix(hi, 16).unwrap(),
            );
            if lo <= addr && addr < hi {
                hit = Some(path.to_string());
            }
        }
        let path = hit.expect("address is mapped");
        let base = maps
            .lines()
            .filter(|l| l.ends_with(&path))
            .map(|l| usize::from_str_radix(l.split('-').next().unwrap(), 16).unwrap())
            .min()
            .unwrap();
        format!("native:{path}+0x{:x}", addr - base)
    }

    extern "C" {
        fn getpid() -> i32;
    }

    #[test]
    fn names_a_libc_function_from_its_module_offset() {
        let addr = getpid as *const () as usize;
        let name = native_name_of(addr + 1);
        let mut s = Symbolizer::new();
        let r = s.resolve(&name);
        assert!(
            r.contains("getpid") && r.contains("[libc.so"),
            "{name} -> {r}"
        );
    }

    #[test]
    fn unreadable_modules_and_other_names_degrade_to_what_was_sent() {
        let mut s = Symbolizer::new();
        assert_eq!(
            s.resolve("native:/nonexistent/libx.so+0x10"),
            "libx.so+0x10"
        );
        assert_eq!(s.resolve("native:garbage"), "garbage");
        assert_eq!(s.resolve("native:/a/b.so+0xzz"), "/a/b.so+0xzz");
        assert_eq!(s.resolve("model.py(3): f"), "model.py(3): f");
        assert!(is_native("native:/x+0x1") && !is_native("f.py(1): g"));
    }

    #[test]
    fn an_address_past_a_symbol_s_end_is_not_named_after_it() {
        let m = Module {
            syms: vec![
                (0x100, 0x20, "Py_CompileStringObject".into()),
                (0x200, 0, "unsized".into()),
                (0x300, 0x10, "next".into()),
            ],
        };
        assert_eq!(m.lookup(0x11f), Some("Py_CompileStringObject"));
        assert_eq!(m.lookup(0x120), None, "a stripped function after an export");
        assert_eq!(m.lookup(0x200), Some("unsized"));
        assert_eq!(m.lookup(0x201), None);
        assert_eq!(m.lookup(0x30f), Some("next"));
        assert_eq!(m.lookup(0xff), None);
    }

    #[test]
    fn cpp_symbols_read_without_parameters() {
        assert_eq!(readable("_ZN2at6native3addEv"), "at::native::add");
        assert_eq!(readable("cudaLaunchKernel"), "cudaLaunchKernel");
    }
}

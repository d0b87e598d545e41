//! Names native frames. The collector sends `native:<module path>+0x<offset>` and does no
//! symbol work in the profiled process; the viewer, on the same machine, reads the module's
//! ELF symbol tables once and names the function that holds the offset.

use std::collections::HashMap;

use gaptop_wire::stackframe;
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::frames::display::{demangle, Demangled};

/// Function symbols of one module, sorted by address: (address, size, name).
#[derive(Debug)]
struct Module {
    syms: Vec<(u64, u64, String)>,
}

impl Module {
    /// The function symbols of the module at `path`: its own tables, and where it has no
    /// `.symtab` (a stripped binary keeps only its exports in `.dynsym`), those of its
    /// MiniDebugInfo (`.gnu_debugdata`, an xz-compressed ELF with a `.symtab`) and of a separate
    /// debug file (by build id under /usr/lib/debug/.build-id, or by `.gnu_debuglink`), which
    /// hold the same addresses.
    fn load(path: &str) -> Option<Module> {
        let file = std::fs::File::open(path).ok()?;
        let cache = object::ReadCache::new(file);
        let obj = object::File::parse(&cache).ok()?;
        let mut syms = Vec::new();
        text_symbols(&obj, &mut syms);
        if obj.section_by_name(".symtab").is_none() {
            if let Some(elf) = obj
                .section_by_name(".gnu_debugdata")
                .and_then(|s| s.data().ok())
                .and_then(unxz)
            {
                if let Ok(o) = object::File::parse(&*elf) {
                    text_symbols(&o, &mut syms);
                }
            }
            if let Some(f) = debug_file(path, &obj).and_then(|p| std::fs::File::open(p).ok()) {
                let cache = object::ReadCache::new(f);
                if let Ok(o) = object::File::parse(&cache) {
                    text_symbols(&o, &mut syms);
                }
            }
        }
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

/// Function symbols (address, size, name) of `obj`'s tables.
fn text_symbols<'d, R: object::ReadRef<'d>>(
    obj: &object::File<'d, R>,
    out: &mut Vec<(u64, u64, String)>,
) {
    out.extend(
        obj.symbols()
            .chain(obj.dynamic_symbols())
            .filter(|s| s.kind() == SymbolKind::Text && s.address() != 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string()))),
    );
}

/// The largest MiniDebugInfo inflated (it holds symbol tables only: a few MiB at most).
const MAX_MINI: usize = 256 << 20;

/// An xz stream, inflated (None where it is not one, or is larger than [`MAX_MINI`]).
fn unxz(data: &[u8]) -> Option<Vec<u8>> {
    /// A Vec that refuses to grow past [`MAX_MINI`].
    struct Capped(Vec<u8>);
    impl std::io::Write for Capped {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0.len() + b.len() > MAX_MINI {
                return Err(std::io::Error::other("MiniDebugInfo too large"));
            }
            self.0.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Capped(Vec::new());
    lzma_rs::xz_decompress(&mut std::io::BufReader::new(data), &mut out).ok()?;
    Some(out.0)
}

/// Where the module's separate debug file is, as debuggers look for it: by build id, then by
/// its `.gnu_debuglink` name beside the module, in the module's `.debug/` folder and under the
/// debug root (/usr/lib/debug, or `GAPTOP_DEBUG_ROOT`).
fn debug_file<'d, R: object::ReadRef<'d>>(
    path: &str,
    obj: &object::File<'d, R>,
) -> Option<std::path::PathBuf> {
    let root = std::env::var_os("GAPTOP_DEBUG_ROOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/usr/lib/debug".into());
    let mut tries = Vec::new();
    if let Ok(Some(id)) = obj.build_id() {
        if id.len() > 1 {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            tries.push(root.join(format!(".build-id/{}/{}.debug", &hex[..2], &hex[2..])));
        }
    }
    if let Ok(Some((name, _crc))) = obj.gnu_debuglink() {
        let name = String::from_utf8_lossy(name).into_owned();
        let dir = std::path::Path::new(path).parent()?;
        tries.push(dir.join(&name));
        tries.push(dir.join(".debug").join(&name));
        tries.push(root.join(dir.strip_prefix("/").unwrap_or(dir)).join(&name));
    }
    tries
        .into_iter()
        .find(|p| p.is_file() && p.to_str() != Some(path))
}

/// Resolves native frame names, reading each module at most once.
#[derive(Default, Debug)]
pub struct Symbolizer {
    modules: HashMap<String, Option<Module>>,
}

/// Whether a frame name is an unresolved native frame from the collector.
pub fn is_native(text: &str) -> bool {
    stackframe::is_native_address(text)
}

impl Symbolizer {
    pub fn new() -> Self {
        Self::default()
    }

    /// `native:/usr/lib/libfoo.so+0x1a2b` becomes `foo::bar [libfoo.so]`, or `libfoo.so+0x1a2b`
    /// when the module or the symbol cannot be read. Other names are returned unchanged.
    pub fn resolve(&mut self, text: &str) -> String {
        match stackframe::native_address(text) {
            None => text.to_string(),
            Some(Err(rest)) => rest.to_string(),
            Some(Ok((path, off))) => self.name(path, off),
        }
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
            Some(sym) => stackframe::native_name(&demangle(sym, Demangled::NoParams), file),
            None => stackframe::unnamed_native_name(file, offset),
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
        stackframe::native_address_name(&path, (addr - base) as u64)
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

    /// A stripped program whose function `hidden_work` is in no export: named from its
    /// MiniDebugInfo, from a debug file found by its debuglink, and otherwise `prog+0x…`.
    #[test]
    fn stripped_binaries_are_named_from_their_debug_info_or_not_at_all() {
        let dir = std::env::temp_dir().join(format!("gaptop-syms-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sh = |cmd: &str| {
            std::process::Command::new("sh")
                .arg("-c")
                .arg(cmd)
                .current_dir(&dir)
                .status()
                .is_ok_and(|s| s.success())
        };
        let src = "__attribute__((noinline)) static int hidden_work(int n) { volatile int s = 0; for (int i = 0; i < n; i++) \
                   s += i * i; return s; }\nint visible(int n) { return hidden_work(n) + 1; }\n\
                   int main(int c, char **v) { return visible(c) & 1; }\n";
        std::fs::write(dir.join("p.c"), src).unwrap();
        if !sh("cc -O1 -g -o full p.c && command -v objcopy && command -v xz && command -v nm") {
            eprintln!("skipped: needs cc, objcopy, xz and nm");
            return;
        }
        let nm = std::process::Command::new("nm")
            .arg(dir.join("full"))
            .output()
            .unwrap();
        let nm = String::from_utf8_lossy(&nm.stdout);
        let addr = nm
            .lines()
            .find(|l| l.ends_with(" hidden_work"))
            .and_then(|l| u64::from_str_radix(l.split(' ').next()?, 16).ok())
            .expect("hidden_work in the unstripped program");
        // MiniDebugInfo, as distributions make it: the function symbols, xz'd, in a section.
        assert!(sh("objcopy --only-keep-debug full dbg && \
                    objcopy --strip-debug --remove-section .comment dbg mini && \
                    xz -k mini && strip --strip-all -o mini_prog full && \
                    objcopy --add-section .gnu_debugdata=mini.xz mini_prog"));
        // A separate debug file found by its debuglink, beside the program.
        assert!(sh(
            "cp dbg link_prog.debug && strip --strip-all -o link_prog full && \
                    objcopy --add-gnu-debuglink=link_prog.debug link_prog"
        ));
        assert!(sh("strip --strip-all -o bare_prog full"));
        let mut s = Symbolizer::new();
        let at = |p: &str| dir.join(p).to_string_lossy().into_owned();
        assert_eq!(
            s.name(&at("mini_prog"), addr + 4),
            "hidden_work [mini_prog]"
        );
        assert_eq!(
            s.name(&at("link_prog"), addr + 4),
            "hidden_work [link_prog]"
        );
        // Only exports are left, and none of them holds the address.
        assert_eq!(
            s.name(&at("bare_prog"), addr + 4),
            format!("bare_prog+0x{:x}", addr + 4)
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cpp_symbols_read_without_parameters() {
        let readable = |s| demangle(s, Demangled::NoParams);
        assert_eq!(readable("_ZN2at6native3addEv"), "at::native::add");
        assert_eq!(readable("cudaLaunchKernel"), "cudaLaunchKernel");
    }
}

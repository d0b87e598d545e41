//! Native call stacks from a sample's registers and stack copy, by framehop from each module's
//! DWARF call-frame information (`.eh_frame` with `.eh_frame_hdr`, or `.debug_frame`).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, OnceLock};

use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use object::{Object, ObjectSection, ObjectSegment};

use super::maps::{self, Mapping};

/// Section data, shared by every process that maps the module.
type Data = Arc<[u8]>;

/// The most frames one stack gives.
const MAX_FRAMES: usize = 512;

/// What one ELF image gives the unwinder: its loadable segments, to find its load bias from a
/// mapping, and its unwind sections' addresses and data, read at their first use (a process
/// maps many libraries that its samples never reach).
#[derive(Debug)]
pub(crate) struct Elf {
    /// PT_LOAD segments: (file offset, file size, address as the file states it).
    loads: Vec<(u64, u64, u64)>,
    /// The file to read the sections from; none for an image read from memory, whose sections
    /// are read with it.
    path: Option<String>,
    sections: OnceLock<Option<ExplicitModuleSectionInfo<Data>>>,
}

impl Elf {
    /// An x86_64 ELF's segments; `None` for anything else.
    fn parse<'d, R: object::ReadRef<'d>>(data: R) -> Option<(Elf, object::File<'d, R>)> {
        let obj = object::File::parse(data).ok()?;
        if obj.architecture() != object::Architecture::X86_64 {
            return None;
        }
        let loads = obj
            .segments()
            .map(|s| (s.file_range().0, s.file_range().1, s.address()))
            .collect();
        let elf = Elf {
            loads,
            path: None,
            sections: OnceLock::new(),
        };
        Some((elf, obj))
    }

    /// Reads the headers of the ELF file at `path`.
    fn load(path: &str) -> Option<Elf> {
        let file = std::fs::File::open(path).ok()?;
        let (elf, _) = Elf::parse(&object::ReadCache::new(file))?;
        Some(Elf {
            path: Some(path.to_string()),
            ..elf
        })
    }

    /// Reads an ELF image that is in memory, sections and all.
    fn from_memory(image: &[u8]) -> Option<Elf> {
        let (elf, obj) = Elf::parse(image)?;
        let _ = elf.sections.set(Some(unwind_sections(&obj)));
        Some(elf)
    }

    /// The unwind sections, read from the file the first time they are asked for.
    fn sections(&self) -> Option<&ExplicitModuleSectionInfo<Data>> {
        self.sections
            .get_or_init(|| {
                let file = std::fs::File::open(self.path.as_ref()?).ok()?;
                let cache = object::ReadCache::new(file);
                let obj = object::File::parse(&cache).ok()?;
                Some(unwind_sections(&obj))
            })
            .as_ref()
    }

    /// The load bias of the image in `m`: its run-time address less the address the file
    /// states. The kernel maps a segment at `page_down(bias + p_vaddr)` from file offset
    /// `page_down(p_offset)`, and `p_vaddr ≡ p_offset` modulo the page, so
    /// `bias = start − offset − (p_vaddr − p_offset)` for the segment that holds `offset`.
    fn bias(&self, m: &Mapping) -> Option<u64> {
        let (off, _, vaddr) = self
            .loads
            .iter()
            .find(|(off, size, _)| off & !0xfff <= m.offset && m.offset < off + size)?;
        Some(
            m.start
                .wrapping_sub(m.offset)
                .wrapping_sub(vaddr.wrapping_sub(*off)),
        )
    }
}

/// The sections framehop reads for an ELF: `.eh_frame` with `.eh_frame_hdr`, or
/// `.debug_frame` where there is no `.eh_frame` (only uncompressed); their data is copied out,
/// and only theirs.
fn unwind_sections<'d, R: object::ReadRef<'d>>(
    obj: &object::File<'d, R>,
) -> ExplicitModuleSectionInfo<Data> {
    let range = |name: &str| {
        obj.section_by_name(name)
            .map(|s| s.address()..s.address() + s.size())
    };
    let data =
        |name: &str| -> Option<Data> { Some(Arc::from(obj.section_by_name(name)?.data().ok()?)) };
    let eh_frame = data(".eh_frame");
    ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma: range(".text"),
        got_svma: range(".got"),
        eh_frame_svma: range(".eh_frame"),
        eh_frame_hdr_svma: range(".eh_frame_hdr"),
        eh_frame_hdr: data(".eh_frame_hdr"),
        debug_frame: eh_frame.is_none().then(|| data(".debug_frame")).flatten(),
        eh_frame,
        ..Default::default()
    }
}

/// ELF images read once each, by path and inode.
#[derive(Default, Debug)]
pub(crate) struct Elves(HashMap<(String, u64), Option<Arc<Elf>>>);

impl Elves {
    fn get(&mut self, m: &Mapping) -> Option<Arc<Elf>> {
        let key = (m.path.clone(), m.inode);
        self.0
            .entry(key)
            .or_insert_with(|| Elf::load(&m.path).map(Arc::new))
            .clone()
    }
}

/// Whether a mapping's module is in the unwinder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Joined {
    /// Not yet asked for.
    Not,
    Yes,
    /// Asked for, but it has no unwind sections to read.
    Without,
}

/// A mapping of code: `[start, end)`, its load bias, the name frames in it are given, and its
/// image.
#[derive(Debug)]
struct Code {
    start: u64,
    end: u64,
    bias: u64,
    path: Arc<str>,
    image: Option<Arc<Elf>>,
    joined: Joined,
}

impl Code {
    fn key(&self) -> (u64, u64, u64, &str) {
        (self.start, self.end, self.bias, &self.path)
    }
}

/// One process's code, as the unwinder and the namer see it.
pub(crate) struct Space {
    pid: u32,
    unwinder: UnwinderX86_64<Data>,
    cache: CacheX86_64,
    /// Executable mappings, by start address.
    code: Vec<Code>,
}

impl Space {
    pub fn new(pid: u32) -> Space {
        Space {
            pid,
            unwinder: UnwinderX86_64::new(),
            cache: CacheX86_64::new(),
            code: Vec::new(),
        }
    }

    /// Reads the process's maps again: modules that went away leave the unwinder; new ones
    /// join it when a stack first reaches them. Errors are one line.
    pub fn refresh(&mut self, elves: &mut Elves) -> Result<(), String> {
        let path = format!("/proc/{}/maps", self.pid);
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
        let old: HashMap<_, _> = self.code.iter().map(|c| (c.key(), c.joined)).collect();
        let mut code = Vec::new();
        for m in maps::parse(&text).into_iter().filter(|m| m.exec) {
            let image = if m.is_file() {
                elves.get(&m)
            } else if m.path == "[vdso]" {
                self.vdso(&m).map(Arc::new)
            } else {
                None
            };
            let bias = image.as_ref().and_then(|e| e.bias(&m));
            let mut c = Code {
                start: m.start,
                end: m.end,
                // Code with no image to read (JIT, anonymous) is named by its address.
                bias: bias.unwrap_or(0),
                path: Arc::from(if bias.is_some() { m.path.as_str() } else { "?" }),
                image: image.filter(|_| bias.is_some()),
                joined: Joined::Not,
            };
            c.joined = old.get(&c.key()).copied().unwrap_or(Joined::Not);
            code.push(c);
        }
        let new: HashSet<_> = code.iter().map(Code::key).collect();
        for c in &self.code {
            if c.joined == Joined::Yes && !new.contains(&c.key()) {
                self.unwinder.remove_module(c.start);
            }
        }
        self.code = code;
        Ok(())
    }

    /// The vDSO's image, read from the process's memory (it has no file).
    fn vdso(&self, m: &Mapping) -> Option<Elf> {
        use std::io::{Read, Seek, SeekFrom};
        let mut mem = std::fs::File::open(format!("/proc/{}/mem", self.pid)).ok()?;
        mem.seek(SeekFrom::Start(m.start)).ok()?;
        let mut image = vec![0u8; usize::try_from(m.end - m.start).ok()?];
        mem.read_exact(&mut image).ok()?;
        Elf::from_memory(&image)
    }

    /// The index of the mapping of code that holds `addr`.
    fn code_at(&self, addr: u64) -> Option<usize> {
        let i = self
            .code
            .partition_point(|c| c.start <= addr)
            .checked_sub(1)?;
        (addr < self.code[i].end).then_some(i)
    }

    /// Puts the module of mapping `i` in the unwinder if it is not yet; whether it joined now.
    fn join(&mut self, i: usize) -> bool {
        let c = &mut self.code[i];
        if c.joined != Joined::Not {
            return false;
        }
        let Some(sections) = c.image.as_ref().and_then(|e| e.sections()) else {
            c.joined = Joined::Without;
            return false;
        };
        c.joined = Joined::Yes;
        let module = Module::new(c.path.to_string(), c.start..c.end, c.bias, sections.clone());
        self.unwinder.add_module(module);
        true
    }

    /// The module path and the address as its file states it (the offset the collector sends
    /// and [`crate::sources::symbols::Symbolizer::name`] takes); `?` and the address itself
    /// for code that is in no module.
    pub fn locate(&self, addr: u64) -> (&str, u64) {
        match self.code_at(addr).map(|i| &self.code[i]) {
            Some(c) => (&c.path, addr.wrapping_sub(c.bias)),
            None => ("?", addr),
        }
    }

    /// Unwinds a sample into `out`: the addresses to name, innermost first (the sampled
    /// instruction, then each return address less one, so that it falls in the call). Returns
    /// whether every address lies in code the maps know of; stops where the stack copy ends.
    /// A module joins the unwinder when a stack first reaches it, and the stack is unwound
    /// again from the start.
    pub fn unwind(&mut self, ip: u64, sp: u64, bp: u64, stack: &[u8], out: &mut Vec<u64>) -> bool {
        loop {
            self.walk(ip, sp, bp, stack, out);
            let mut joined = false;
            let mut known = true;
            for &a in out.iter() {
                match self.code_at(a) {
                    Some(i) => joined |= self.join(i),
                    None => known = false,
                }
            }
            if !joined {
                return known;
            }
        }
    }

    fn walk(&mut self, ip: u64, sp: u64, bp: u64, stack: &[u8], out: &mut Vec<u64>) {
        out.clear();
        let mut read_stack = |addr: u64| {
            let at = usize::try_from(addr.checked_sub(sp).ok_or(())?).map_err(|_| ())?;
            let word = stack.get(at..at.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(word.try_into().map_err(|_| ())?))
        };
        let regs = UnwindRegsX86_64::new(ip, sp, bp);
        let mut frames = self
            .unwinder
            .iter_frames(ip, regs, &mut self.cache, &mut read_stack);
        while let Ok(Some(f)) = frames.next() {
            out.push(f.address_for_lookup());
            if out.len() >= MAX_FRAMES {
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bias_of_a_pie_and_of_a_fixed_address_executable() {
        // A PIE: segments at file offset = address, the code segment at 0x1000.
        let elf = |loads| Elf {
            loads,
            path: None,
            sections: OnceLock::new(),
        };
        let pie = elf(vec![(0, 0x628, 0), (0x1000, 0x1b5, 0x1000)]);
        let m = |start, offset| Mapping {
            start,
            end: start + 0x1000,
            exec: true,
            offset,
            inode: 1,
            path: "/x".into(),
        };
        assert_eq!(
            pie.bias(&m(0x5581_d7a0_1000, 0x1000)),
            Some(0x5581_d7a0_0000)
        );
        // Non-PIE python3.11: the code segment at 0x420000 from file offset 0x20000, with its
        // first byte mid-page (p_offset 0x20f10 for p_vaddr 0x420f10).
        let fixed = elf(vec![(0, 0x20000, 0x400000), (0x20f10, 0x4ab000, 0x420f10)]);
        assert_eq!(fixed.bias(&m(0x420000, 0x20000)), Some(0));
        assert_eq!(fixed.bias(&m(0x420000, 0x9_000_000)), None);
    }

    #[test]
    fn unwinds_this_test_s_own_stack_no_further_than_the_copy() {
        let mut s = Space::new(std::process::id());
        s.refresh(&mut Elves::default()).unwrap();
        // A stack of zeros: the first frame is the instruction; the rest cannot be read.
        let ip = Space::new as *const () as u64;
        let mut out = Vec::new();
        let known = s.unwind(ip, 0x1000, 0, &[], &mut out);
        assert_eq!(out, vec![ip]);
        assert!(known);
        let (path, off) = s.locate(ip);
        assert!(path.contains("gaptop"), "{path}");
        assert!(off < ip);
        assert_eq!(s.locate(8), ("?", 8));
    }
}

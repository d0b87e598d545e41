//! `/proc/PID/maps`: which code is mapped where in a process.

/// One line of `/proc/PID/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    /// The `x` permission: the mapping holds code.
    pub exec: bool,
    /// Offset in the file of the mapping's first byte.
    pub offset: u64,
    pub inode: u64,
    /// The file's path, a pseudo-path such as `[vdso]` or `[heap]`, or empty for anonymous
    /// memory. A file deleted since it was mapped ends in ` (deleted)`.
    pub path: String,
}

impl Mapping {
    /// Whether the mapping is a file's (so the file can be read for its unwind tables).
    pub fn is_file(&self) -> bool {
        self.path.starts_with('/') && self.inode != 0
    }
}

/// The mappings in the text of a `/proc/PID/maps`; lines that do not parse are skipped.
pub(crate) fn parse(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

/// `7f12a000-7f12b000 r-xp 00001000 08:01 1234   /usr/lib/libfoo.so`
fn parse_line(line: &str) -> Option<Mapping> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(char::is_whitespace).unwrap_or(t.len());
        rest = &t[end..];
        Some(&t[..end]).filter(|f| !f.is_empty())
    };
    let (range, perms, offset, _dev, inode) = (field()?, field()?, field()?, field()?, field()?);
    let (start, end) = range.split_once('-')?;
    Some(Mapping {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        exec: perms.as_bytes().get(2) == Some(&b'x'),
        offset: u64::from_str_radix(offset, 16).ok()?,
        inode: inode.parse().ok()?,
        // A path may hold spaces: it is all that follows the inode.
        path: rest.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_files_pseudo_paths_anonymous_memory_and_paths_with_spaces() {
        let text = "\
5581d7a00000-5581d7a01000 r--p 00000000 08:01 1311 /tmp/spin
5581d7a01000-5581d7a02000 r-xp 00001000 08:01 1311 /tmp/spin
7f3c2c000000-7f3c2c021000 rw-p 00000000 00:00 0 
7f3c2e028000-7f3c2e1bd000 r-xp 00028000 fd:00 2621 /usr/lib/x86_64-linux-gnu/libc.so.6
7ffd1b5f6000-7ffd1b5f8000 r-xp 00000000 00:00 0                          [vdso]
7f00000000-7f00001000 r-xp 00002000 08:01 77 /tmp/my dir/lib x.so (deleted)
not a mapping line
";
        let m = parse(text);
        assert_eq!(m.len(), 6, "{m:?}");
        assert_eq!(
            m[1],
            Mapping {
                start: 0x5581d7a01000,
                end: 0x5581d7a02000,
                exec: true,
                offset: 0x1000,
                inode: 1311,
                path: "/tmp/spin".into(),
            }
        );
        assert!(!m[0].exec && m[0].is_file());
        assert!(m[2].path.is_empty() && !m[2].is_file());
        assert_eq!(m[3].offset, 0x28000);
        assert!(m[4].exec && m[4].path == "[vdso]" && !m[4].is_file());
        assert_eq!(m[5].path, "/tmp/my dir/lib x.so (deleted)");
    }

    #[test]
    fn reads_this_process_s_own_maps() {
        let text = std::fs::read_to_string("/proc/self/maps").unwrap();
        let m = parse(&text);
        assert_eq!(m.len(), text.lines().count());
        assert!(m.iter().any(|m| m.exec && m.is_file()));
        assert!(m.windows(2).all(|w| w[0].start < w[1].start));
    }
}

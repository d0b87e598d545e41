//! A line number from a code object's line table, for a reader that cannot call
//! `PyCode_Addr2Line` (one outside the process): 3.9's `co_lnotab`, 3.10's `co_linetable` and
//! the location table of 3.11 and later ([`Table`]).

/// A code object's line table, in its version's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Table {
    /// 3.9's `co_lnotab`: (bytecode delta, line delta) byte pairs, the line delta signed; a
    /// line starts at the bytecode offset its pair's delta reached.
    Lnotab,
    /// 3.10's `co_linetable`: (length, line delta) byte pairs, each the next range of bytecode
    /// and its line (a delta of -128: no line).
    Ranges,
    /// 3.11's and later's location table ([`line_of`]).
    Locations,
}

impl Table {
    /// The format of CPython 3.`minor`'s table; a layout that does not say its version was
    /// published for 3.11 or 3.12.
    pub fn of(minor: Option<u32>) -> Table {
        match minor {
            Some(m) if m <= 9 => Table::Lnotab,
            Some(10) => Table::Ranges,
            _ => Table::Locations,
        }
    }

    /// The line of the instruction at byte offset `offset` (the offset `PyCode_Addr2Line`
    /// takes) of a code object whose first line is `first`; None where the table says it has
    /// none, or ends before it.
    pub fn line(self, table: &[u8], first: i64, offset: usize) -> Option<i64> {
        match self {
            Table::Locations => line_of(table, first, offset / 2),
            Table::Lnotab => {
                // 3.9's PyCode_Addr2Line: the line of the last pair whose address is not past
                // the offset.
                let (mut addr, mut line) = (0usize, first);
                for p in table.chunks_exact(2) {
                    addr += p[0] as usize;
                    if addr > offset {
                        break;
                    }
                    line += p[1] as i8 as i64;
                }
                Some(line)
            }
            Table::Ranges => {
                // 3.10's address ranges: each pair's line is the sum of the deltas so far,
                // ranges of no length are passed over.
                let (mut start, mut line) = (0usize, first);
                for p in table.chunks_exact(2) {
                    let end = start + p[0] as usize;
                    let delta = p[1] as i8;
                    let here = (delta != -128).then(|| {
                        line += delta as i64;
                        line
                    });
                    if (start..end).contains(&offset) {
                        return here;
                    }
                    start = end;
                }
                None
            }
        }
    }
}

/// The line of the instruction at code unit `index`, from a location table in CPython 3.11's
/// format (`Objects/locations.md`): entries of `(length, line delta, columns)`, a start byte
/// each (bit 7 set, the form in bits 3..6, the length less one in bits 0..2), 6-bit varints.
/// None where the table says the instruction has no line, or ends before it.
pub fn line_of(table: &[u8], first: i64, index: usize) -> Option<i64> {
    let mut i = 0;
    let mut line = first;
    let mut addr = 0usize;
    let varint = |i: &mut usize| -> Option<u64> {
        let mut v = 0u64;
        let mut shift = 0;
        loop {
            let b = *table.get(*i)?;
            *i += 1;
            v |= ((b & 63) as u64) << shift;
            if b & 64 == 0 {
                return Some(v);
            }
            shift += 6;
            if shift > 60 {
                return None;
            }
        }
    };
    let svarint = |i: &mut usize| -> Option<i64> {
        let v = varint(i)?;
        Some(if v & 1 == 1 {
            -((v >> 1) as i64)
        } else {
            (v >> 1) as i64
        })
    };
    while i < table.len() {
        let b = table[i];
        if b & 128 == 0 {
            return None;
        }
        i += 1;
        let form = (b >> 3) & 15;
        let len = (b & 7) as usize + 1;
        let here = match form {
            15 => None,
            14 => {
                line += svarint(&mut i)?;
                varint(&mut i)?;
                varint(&mut i)?;
                varint(&mut i)?;
                Some(line)
            }
            13 => {
                line += svarint(&mut i)?;
                Some(line)
            }
            10..=12 => {
                line += (form - 10) as i64;
                i += 2;
                Some(line)
            }
            _ => {
                i += 1;
                Some(line)
            }
        };
        if index < addr + len {
            return here;
        }
        addr += len;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_table_cut_short_or_not_a_table_gives_no_line() {
        // One entry of form 13 (a line delta, here +2), 2 code units long.
        let table = [0x80 | (13 << 3) | 1, 4];
        assert_eq!(line_of(&table, 10, 0), Some(12));
        assert_eq!(line_of(&table, 10, 1), Some(12));
        assert_eq!(line_of(&table, 10, 2), None, "past the table");
        assert_eq!(line_of(&table[..1], 10, 0), None, "cut short");
        assert_eq!(
            line_of(&[0x01, 0x02], 10, 0),
            None,
            "not an entry's start byte"
        );
        assert_eq!(line_of(&[0xff; 4], 10, 0), None, "no line");
        assert_eq!(Table::Locations.line(&table, 10, 2), Some(12), "in bytes");
    }

    #[test]
    fn older_tables_read_by_their_version_s_rules() {
        assert_eq!(Table::of(Some(9)), Table::Lnotab);
        assert_eq!(Table::of(Some(10)), Table::Ranges);
        assert_eq!(Table::of(Some(13)), Table::Locations);
        assert_eq!(Table::of(None), Table::Locations);
        // 3.9: line 10 from offset 0, 12 from 6, 11 from 8 (a negative delta).
        let lnotab = [6, 2, 2, 0xff];
        let at = |o| Table::Lnotab.line(&lnotab, 10, o);
        assert_eq!(
            (at(0), at(4), at(6), at(8), at(100)),
            (Some(10), Some(10), Some(12), Some(11), Some(11))
        );
        // 3.10: [0, 4) line 11, [4, 4) passed over (its delta still counts), [4, 6) none,
        // [6, 10) line 15.
        let ranges = [4, 1, 0, 3, 2, 0x80, 4, 1];
        let at = |o| Table::Ranges.line(&ranges, 10, o);
        assert_eq!(
            (at(0), at(3), at(4), at(6), at(9), at(10)),
            (Some(11), Some(11), None, Some(15), Some(15), None)
        );
    }
}

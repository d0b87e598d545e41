//! A line number from a code object's location table, for a reader that cannot call
//! `PyCode_Addr2Line` (one outside the process).

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
    }
}

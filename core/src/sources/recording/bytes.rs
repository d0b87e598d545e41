//! A recording's bytes: the record layouts of its versions, GAPTOPR4's checks, and a window
//! on the input that can look ahead as far as a frame.
//!
//! ```text
//! R1 to R3:  record := conn:u32 len:u32 tag:u8 payload[len-1]
//! R4:        record := conn:u32 len:u32 hsum:u32 tag:u8 payload[len-1] sum:u32
//!            hsum   := CRC-32 of the record's first 8 bytes (conn, len)
//!            sum    := CRC-32 of its tag and payload
//! ```
//!
//! CRC-32 finds every error that spans 32 bits or fewer, so one byte changed anywhere in an
//! R4 record (or up to four in a row) is always caught. Two sums rather than one: a reader
//! that meets a damaged header cannot trust its length, so it tries each following byte as
//! a record's start ([`resync`]), and `hsum` makes each try cost a CRC of 8 bytes rather
//! than one of a whole frame. A header that checks out is trusted (a wrong one passes once
//! in 2^32 tries); its frame is then kept only if `sum` holds, and skipped by its length if
//! not.

use std::io::Read;

use gaptop_wire::MAX_FRAME;

/// Bytes of an R4 record before its tag: connection, length, header sum.
pub const HEAD: usize = 12;
/// Bytes of an R4 record after its payload: the frame's sum.
pub const TAIL: usize = 4;

/// Appends one R4 record of connection `conn`. `frame` is one encoded frame (`len:u32 tag
/// payload`, as `gaptop_wire::encode` writes it).
pub fn put_record(out: &mut Vec<u8>, conn: u32, frame: &[u8]) {
    let at = out.len();
    out.extend_from_slice(&conn.to_le_bytes());
    out.extend_from_slice(&frame[..4]);
    let hsum = crc32fast::hash(&out[at..at + 8]);
    out.extend_from_slice(&hsum.to_le_bytes());
    out.extend_from_slice(&frame[4..]);
    out.extend_from_slice(&crc32fast::hash(&frame[4..]).to_le_bytes());
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// The frame length (tag and payload) an R4 record's header says, if the header checks out:
/// `h` holds at least [`HEAD`] bytes.
pub fn header_len(h: &[u8]) -> Option<usize> {
    let len = u32_at(h, 4) as usize;
    if len == 0 || len > MAX_FRAME {
        return None;
    }
    (u32_at(h, 8) == crc32fast::hash(&h[..8])).then_some(len)
}

/// Whether a whole R4 record's frame matches its sum (`r`: the record, header to sum).
pub fn frame_ok(r: &[u8]) -> bool {
    let end = r.len() - TAIL;
    u32_at(r, end) == crc32fast::hash(&r[HEAD..end])
}

/// The input, read ahead as far as asked. A read error ends it like the end of the file, and
/// is kept: a gzip stream cut short reads as the bytes inflated before the cut.
pub struct Window<R> {
    r: R,
    buf: Vec<u8>,
    at: usize,
    /// The input's offset of `buf[0]`.
    base: u64,
    ended: bool,
    /// Why the input ended before its end of file, if a read failed.
    pub error: Option<String>,
}

const CHUNK: usize = 1 << 20;

impl<R: Read> Window<R> {
    /// A window on `r`, whose next byte is at offset `base` of the input.
    pub fn new(r: R, base: u64) -> Self {
        Window {
            r,
            buf: Vec::new(),
            at: 0,
            base,
            ended: false,
            error: None,
        }
    }

    /// The input's offset of the next byte.
    pub fn offset(&self) -> u64 {
        self.base + self.at as u64
    }

    /// The next `n` bytes, or fewer where the input ends first.
    pub fn peek(&mut self, n: usize) -> &[u8] {
        if self.buf.len() - self.at < n && !self.ended {
            self.buf.drain(..self.at);
            self.base += self.at as u64;
            self.at = 0;
            while self.buf.len() < n && !self.ended {
                let want = (n - self.buf.len()).max(CHUNK) as u64;
                // Bytes read before an error are kept in `buf`.
                match (&mut self.r).take(want).read_to_end(&mut self.buf) {
                    Ok(got) => self.ended = (got as u64) < want,
                    Err(e) => {
                        self.error = Some(e.to_string());
                        self.ended = true;
                    }
                }
            }
        }
        let end = (self.at + n).min(self.buf.len());
        &self.buf[self.at..end]
    }

    /// Moves past `n` bytes already peeked at.
    pub fn skip(&mut self, n: usize) {
        debug_assert!(self.at + n <= self.buf.len());
        self.at = (self.at + n).min(self.buf.len());
    }
}

/// Moves the window to the next position after this one where an R4 record header checks
/// out, or to the end of the input: the work is a CRC of 8 bytes for each byte passed, so a
/// damaged length never derails the rest and garbage costs time in proportion to its size.
pub fn resync<R: Read>(w: &mut Window<R>) {
    const SCAN: usize = 64 << 10;
    let one = w.peek(1).len();
    w.skip(one);
    loop {
        let b = w.peek(SCAN + HEAD);
        if b.len() < HEAD {
            let n = b.len();
            w.skip(n);
            return;
        }
        let tries = b.len() - HEAD + 1;
        // A length over MAX_FRAME (8 MiB) has a high byte or bit 7 of the third set; most
        // positions are passed over without a CRC.
        let found =
            (0..tries).find(|&i| b[i + 7] == 0 && b[i + 6] < 0x80 && header_len(&b[i..]).is_some());
        match found {
            Some(i) => return w.skip(i),
            None => w.skip(tries),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(conn: u32, payload: &[u8]) -> Vec<u8> {
        let mut frame = ((payload.len() + 1) as u32).to_le_bytes().to_vec();
        frame.push(gaptop_wire::TAG_BYE);
        frame.extend_from_slice(payload);
        let mut out = Vec::new();
        put_record(&mut out, conn, &frame);
        out
    }

    #[test]
    fn every_byte_of_a_record_is_checked() {
        let r = record(3, &[9]);
        assert_eq!(r.len(), HEAD + 2 + TAIL);
        assert_eq!(header_len(&r), Some(2));
        assert!(frame_ok(&r));
        for i in 0..r.len() {
            for bit in 0..8 {
                let mut d = r.clone();
                d[i] ^= 1 << bit;
                let ok = header_len(&d) == Some(2) && frame_ok(&d);
                assert!(!ok, "a flip of bit {bit} at byte {i} passed");
            }
        }
    }

    #[test]
    fn resync_finds_the_next_header_past_garbage_and_stops_at_the_end() {
        let mut b: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + 3) as u8).collect();
        let at = b.len();
        b.extend_from_slice(&record(1, &[0]));
        let mut w = Window::new(&b[..], 0);
        resync(&mut w);
        assert_eq!(w.offset(), at as u64);
        // From a record's own start, the search moves on: past its end, nothing checks out.
        resync(&mut w);
        assert_eq!(w.offset(), b.len() as u64);
        assert!(w.peek(1).is_empty());
    }

    #[test]
    fn a_read_error_ends_the_window_and_is_kept() {
        struct Fails(usize);
        impl Read for Fails {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::Error::other("incomplete deflate stream"));
                }
                let n = self.0.min(b.len()).min(3);
                b[..n].fill(1);
                self.0 -= n;
                Ok(n)
            }
        }
        let mut w = Window::new(Fails(10), 8);
        assert_eq!(w.peek(100).len(), 10);
        w.skip(10);
        assert_eq!(w.offset(), 18);
        assert!(w.peek(1).is_empty());
        assert_eq!(w.error.as_deref(), Some("incomplete deflate stream"));
    }
}

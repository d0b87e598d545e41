//! The numbers of a Kineto event, read from its raw JSON text: times written in microseconds
//! into exact nanoseconds, and integers (ids, devices, streams, threads). The plain forms
//! (`123.456`, `42`) are read straight from the bytes, on the reading's hot path; anything
//! else goes through text as it always did.

use crate::model::records::Ns;

pub(super) fn text(v: Option<&[u8]>) -> Option<&str> {
    v.and_then(|b| std::str::from_utf8(b).ok())
}

/// Parses a JSON number written in microseconds into integer nanoseconds, exactly for the
/// usual `123.456` form (f64 would lose nanoseconds on absolute timestamps).
pub fn us_to_ns(text: &str) -> Option<Ns> {
    let t = text.trim().trim_matches('"');
    let (neg, digits) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t),
    };
    if digits.contains(['e', 'E']) {
        let v: f64 = t.parse().ok()?;
        if !v.is_finite() || v.abs() > 9.0e15 {
            return None;
        }
        return Some((v * 1000.0).round() as Ns);
    }
    let (int, frac) = match digits.split_once('.') {
        Some((i, f)) => (i, f),
        None => (digits, ""),
    };
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let i: i64 = int.parse().ok()?;
    let mut f: i64 = 0;
    let mut scale = 100;
    let mut round_up = false;
    for (k, b) in frac.bytes().enumerate() {
        let d = (b - b'0') as i64;
        if k < 3 {
            f += d * scale;
            scale /= 10;
        } else {
            if k == 3 && d >= 5 {
                round_up = true;
            }
            break;
        }
    }
    let v = i.checked_mul(1000)?.checked_add(f + round_up as i64)?;
    Some(if neg { -v } else { v })
}

pub(super) fn int_of(v: Option<&[u8]>) -> Option<i64> {
    if let Some(n) = v.and_then(int_plain) {
        return Some(n);
    }
    let t = text(v)?.trim().trim_matches('"');
    t.parse::<i64>()
        .ok()
        .or_else(|| t.parse::<f64>().ok().map(|f| f as i64))
}

/// An integer written plainly (`-?[0-9]{1,18}`), read without going through text; None for
/// anything else, which [`int_of`] reads as it always did.
#[inline]
fn int_plain(v: &[u8]) -> Option<i64> {
    let (neg, d) = sign(v);
    let n = digits(d, 18)?;
    Some(if neg { -n } else { n })
}

/// Whether a number is negative, and its digits.
#[inline]
fn sign(v: &[u8]) -> (bool, &[u8]) {
    match v.first() {
        Some(b'-') => (true, &v[1..]),
        _ => (false, v),
    }
}

/// The value of 1 to `most` decimal digits (None for anything else).
#[inline]
fn digits(d: &[u8], most: usize) -> Option<i64> {
    if d.is_empty() || d.len() > most {
        return None;
    }
    d.iter().try_fold(0i64, |n, &b| {
        let x = b.wrapping_sub(b'0');
        (x <= 9).then_some(n * 10 + x as i64)
    })
}

/// [`us_to_ns`] of microseconds written plainly (`-?[0-9]{1,15}(\.[0-9]+)?`), without going
/// through text; None for anything else, which `us_to_ns` reads.
#[inline]
pub(super) fn us_to_ns_plain(v: &[u8]) -> Option<Ns> {
    let (neg, d) = sign(v);
    let dot = d.iter().position(|&b| b == b'.').unwrap_or(d.len());
    let (int, frac) = (&d[..dot], d.get(dot + 1..).unwrap_or(&[]));
    let i = digits(int, 15)?;
    let (mut f, mut scale, mut round_up) = (0i64, 100i64, false);
    for (k, &b) in frac.iter().enumerate() {
        let x = b.wrapping_sub(b'0');
        if x > 9 {
            return None;
        }
        if k < 3 {
            f += x as i64 * scale;
            scale /= 10;
        } else if k == 3 && x >= 5 {
            round_up = true;
        }
    }
    let v = i * 1000 + f + round_up as i64;
    Some(if neg { -v } else { v })
}

/// The stream a GPU op's thread names (`"stream 7"`, Kineto's before mid-2021).
pub(super) fn stream_of_tid(tid: Option<&[u8]>) -> Option<i64> {
    let t = text(tid)?.trim().trim_matches('"');
    t.strip_prefix("stream ")?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn microseconds_to_nanoseconds_exactly() {
        assert_eq!(us_to_ns("5109306718144.109"), Some(5_109_306_718_144_109));
        assert_eq!(us_to_ns("1.5"), Some(1500));
        assert_eq!(us_to_ns("12"), Some(12_000));
        assert_eq!(us_to_ns("0.0005"), Some(1));
        assert_eq!(us_to_ns("-2.25"), Some(-2250));
        assert_eq!(us_to_ns("1.5e3"), Some(1_500_000));
        assert_eq!(us_to_ns("\"7.000\""), Some(7000));
        assert_eq!(us_to_ns("abc"), None);
        assert_eq!(us_to_ns("1.2.3"), None);
        assert_eq!(us_to_ns("1e400"), None);
    }

    /// Numbers read from bytes read as the text readers read them, or are left to them.
    #[test]
    fn plain_numbers_read_as_text_does() {
        let cases = [
            "5109306718144.109",
            "1.5",
            "12",
            "0.0005",
            "-2.25",
            "1.",
            "-0",
            "007",
            "1.2345",
            "1.23449",
            "999999999999999",
            "9999999999999999",
            "-",
            "",
            "1e3",
            "+5",
            "1.2.3",
            "123456789012345678",
            "1234567890123456789",
            "-12.9999",
        ];
        for c in cases {
            if let Some(v) = us_to_ns_plain(c.as_bytes()) {
                assert_eq!(Some(v), us_to_ns(c), "{c}");
            }
            if let Some(v) = int_plain(c.as_bytes()) {
                assert_eq!(Some(v), int_of(Some(c.as_bytes())), "{c}");
            }
        }
        assert_eq!(
            us_to_ns_plain(b"5109306718144.109"),
            Some(5_109_306_718_144_109)
        );
        assert_eq!(int_plain(b"-42"), Some(-42));
    }

    #[test]
    fn streams_from_old_thread_names() {
        assert_eq!(stream_of_tid(Some(b"\"stream 7\"")), Some(7));
        assert_eq!(stream_of_tid(Some(b"\"stream 7 user\"")), None);
        assert_eq!(stream_of_tid(Some(b"7")), None);
    }
}

//! Human-readable times and time arguments.

/// Nanoseconds: every time and duration in gaptop.
pub type Ns = i64;

/// Formats nanoseconds with a unit that keeps three significant digits.
pub fn fmt_ns(ns: Ns) -> String {
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    if a < 1_000.0 {
        format!("{sign}{a:.0}ns")
    } else if a < 1_000_000.0 {
        let t = format!("{:.3}", a / 1e3);
        let t = t.trim_end_matches('0').trim_end_matches('.');
        format!("{sign}{t}µs")
    } else if a < 1_000_000_000.0 {
        format!("{sign}{:.2}ms", a / 1e6)
    } else {
        format!("{sign}{:.3}s", a / 1e9)
    }
}

/// A time precise enough to tell apart points `res` nanoseconds apart: `173.8245ms` where
/// [`fmt_ns`] says `173.82ms`.
pub fn fmt_at(ns: Ns, res: Ns) -> String {
    let a = ns.unsigned_abs() as f64;
    let (unit, name) = if a < 1e3 {
        return fmt_ns(ns);
    } else if a < 1e6 {
        (1e3, "µs")
    } else if a < 1e9 {
        (1e6, "ms")
    } else {
        (1e9, "s")
    };
    let digits = (unit / res.max(1) as f64).log10().ceil().clamp(2.0, 9.0) as usize;
    let sign = if ns < 0 { "-" } else { "" };
    format!("{sign}{:.digits$}{name}", a / unit)
}

/// Compact form for axes, narrow cells and the report: three significant figures at most
/// (`447µs`, `4.90ms`, `12.3s`, `15µs`), rounding carried into the next unit (`1.00ms`, not
/// `1000µs`); over 999 seconds, minutes then hours. At most 6 characters, a sign aside.
pub fn fmt_short(ns: Ns) -> String {
    const UNITS: [(f64, &str); 6] = [
        (1.0, "ns"),
        (1e3, "µs"),
        (1e6, "ms"),
        (1e9, "s"),
        (60e9, "min"),
        (3600e9, "h"),
    ];
    let a = ns.unsigned_abs() as f64;
    let sign = if ns < 0 { "-" } else { "" };
    // Decimals that leave three significant figures of `v` (1 <= v < 1000).
    let decimals = |v: f64| {
        if v >= 100.0 {
            0
        } else if v >= 10.0 {
            1
        } else {
            2
        }
    };
    let round = |v: f64, d: usize| {
        let m = 10f64.powi(d as i32);
        (v * m).round() / m
    };
    // The unit that puts `a` under 1000 of it (minutes from 1000 s, hours from 1000 min), or
    // the next one where rounding makes it 1000 (999.6µs is 1.00ms).
    let (mut i, mut x) = (0, a);
    let mut v = round(a, 0);
    while i + 1 < UNITS.len() && v >= 1000.0 {
        i += 1;
        x = a / UNITS[i].0;
        v = round(x, decimals(x));
    }
    let u = UNITS[i].1;
    // A whole number of its unit reads as one (`15µs`); a rounded one keeps its figures.
    if x == x.trunc() && v < 1000.0 {
        format!("{sign}{v:.0}{u}")
    } else {
        let d = decimals(v);
        format!("{sign}{v:.d$}{u}")
    }
}

/// `n` and its noun, in the singular for one: `1 gap`, `3 gaps`, `1 launch`, `2 launches`.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else if noun.ends_with("ch") || noun.ends_with('s') {
        format!("{n} {noun}es")
    } else {
        format!("{n} {noun}s")
    }
}

/// Parses "1.5ms", "200us", "200µs", "3s", "100ns"; a number needs its unit (but 0).
pub fn parse_time(s: &str) -> Result<Ns, String> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ns") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e6)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e9)
    } else if t.parse::<f64>().is_ok_and(|v| v == 0.0) {
        (t, 0.0)
    } else {
        return Err(format!("bad time {s:?}: give a unit: ns, us, ms or s"));
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("bad time {s:?}: use a number with ns, us, ms or s"))?;
    if !v.is_finite() || v < 0.0 {
        return Err(format!("bad time {s:?}: must be a non-negative number"));
    }
    Ok((v * mult).round() as Ns)
}

/// Parses a size: "512M", "2G", "64K", "1000" (bytes); positive.
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, mult) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 1usize << 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 1 << 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 1 << 30),
        _ => (t, 1),
    };
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?}: use e.g. 512M or 2G"))?;
    if v.is_nan() || v <= 0.0 {
        return Err(format!("bad size {s:?}: must be positive"));
    }
    Ok((v * mult as f64) as usize)
}

/// A size in bytes as people read it: `512 MiB`, `4.0 GiB`, `900 bytes`.
pub fn fmt_bytes(n: u64) -> String {
    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;
    if n >= GIB {
        format!("{:.1} GiB", n as f64 / GIB as f64)
    } else if n >= MIB {
        format!("{} MiB", n / MIB)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(fmt_ns(999), "999ns");
        assert_eq!(fmt_ns(15_009), "15.009µs");
        assert_eq!(fmt_ns(15_000), "15µs");
        assert_eq!(fmt_ns(15_500), "15.5µs");
        assert_eq!(fmt_ns(2_500_000), "2.50ms");
        assert_eq!(fmt_ns(3_000_000_000), "3.000s");
        assert_eq!(fmt_short(1_500), "1.50µs");
        assert_eq!(fmt_at(173_824_519, 45), "173.82452ms");
        assert_eq!(fmt_at(173_824_519, 10_000_000), "173.82ms");
        assert_eq!(fmt_at(2_500_000_000, 1_000), "2.500000s");
        assert_eq!(fmt_short(250_000_000), "250ms");
    }

    #[test]
    fn short_form_keeps_three_significant_figures() {
        for (ns, want) in [
            (446_882, "447µs"),
            (4_904_000, "4.90ms"),
            (12_345_000_000, "12.3s"),
            (176_080_000, "176ms"),
            (15_000, "15µs"),
            (999, "999ns"),
            (999_600, "1.00ms"),
            (9_996, "10.0µs"),
            (99_960_000, "100ms"),
            (999_999_999, "1.00s"),
            (-2_500, "-2.50µs"),
            (0, "0ns"),
            (61_000_000_000, "61s"),
            (1_500_000_000_000, "25min"),
            (100_000_000_000_000, "27.8h"),
        ] {
            assert_eq!(fmt_short(ns), want, "{ns}");
        }
    }

    #[test]
    fn counts_say_one_in_the_singular() {
        assert_eq!(count(1, "gap"), "1 gap");
        assert_eq!(count(0, "gap"), "0 gaps");
        assert_eq!(count(1, "launch"), "1 launch");
        assert_eq!(count(7, "launch"), "7 launches");
    }

    #[test]
    fn parses() {
        assert_eq!(parse_time("1.5ms"), Ok(1_500_000));
        assert_eq!(parse_time("200us"), Ok(200_000));
        assert_eq!(parse_time("200µs"), Ok(200_000));
        assert_eq!(parse_time("3s"), Ok(3_000_000_000));
        assert!(parse_time("7").unwrap_err().contains("give a unit"));
        assert_eq!(parse_time("0"), Ok(0));
        assert!(parse_time("-1ms").is_err());
        assert!(parse_time("abc").is_err());
        assert_eq!(parse_bytes("512M"), Ok(512 << 20));
        assert_eq!(parse_bytes("2g"), Ok(2 << 30));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert!(parse_bytes("0").is_err() && parse_bytes("lots").is_err());
        assert_eq!(fmt_bytes(4 << 30), "4.0 GiB");
        assert_eq!(fmt_bytes(64 << 20), "64 MiB");
        assert_eq!(fmt_bytes(900), "900 bytes");
    }
}

//! How gaptop's messages read: one line of at most [`MAX_LINE`] characters, whatever they
//! quote (an event name can be megabytes long); what a file that is none of gaptop's formats
//! looked like; and the formats gaptop reads.

use crate::frames::display::cut_keeping;

/// The most characters a message line has.
pub const MAX_LINE: usize = 300;

/// A word (a name, a path) longer than this is cut in its middle.
const MAX_WORD: usize = 120;

/// What gaptop reads, as an error about a file it cannot read lists it.
pub const READS: &str = "gaptop reads Kineto/Chrome trace JSON (.json, .json.gz), Nsight Systems \
exports (.sqlite, .sqlite.gz, .nsys-rep) and gaptop recordings (.rec, .rec.gz)";

/// `s` as one line of at most [`MAX_LINE`] characters: line breaks and other control
/// characters become spaces, a word over [`MAX_WORD`] characters keeps its ends around an
/// ellipsis, and a line still too long has its longest words (a path) cut further, then keeps
/// its start and its end the same way. The list of formats gaptop reads ([`READS`]) is kept
/// whole: what comes before it is cut instead.
pub fn one_line(s: &str) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if let Some(i) = flat.find(READS) {
        let (before, kept) = flat.split_at(i);
        let n = kept.chars().count();
        if n + MIN_WORD * 2 <= MAX_LINE {
            return format!("{}{kept}", fit(before, MAX_LINE - n));
        }
    }
    fit(&flat, MAX_LINE)
}

/// No word is cut shorter than this to make a line fit.
const MIN_WORD: usize = 24;

/// `s` in at most `max` characters, as [`one_line`] cuts it.
fn fit(s: &str, max: usize) -> String {
    let mut words: Vec<String> = s.split(' ').map(|w| middle_cut(w, MAX_WORD)).collect();
    let len = |w: &[String]| w.iter().map(|x| x.chars().count() + 1).sum::<usize>() - 1;
    let mut over = len(&words).saturating_sub(max);
    while over > 0 {
        let Some((i, n)) = words
            .iter()
            .map(|w| w.chars().count())
            .enumerate()
            .max_by_key(|&(i, n)| (n, std::cmp::Reverse(i)))
            .filter(|&(_, n)| n > MIN_WORD)
        else {
            break;
        };
        let to = n.saturating_sub(over).max(MIN_WORD);
        words[i] = if words[i].contains('/') {
            tail_cut(&words[i], to)
        } else {
            middle_cut(&words[i], to)
        };
        over -= n - to;
    }
    middle_cut(&words.join(" "), max)
}

/// `s` if it has at most `max` characters, else its first and last characters around `…`,
/// `max` in all; the start keeps two thirds.
fn middle_cut(s: &str, max: usize) -> String {
    cut_keeping(s, max, max.saturating_sub(1) * 2 / 3)
}

/// A path `s` in `max` characters: its start and, twice as long, its end (the file's name).
fn tail_cut(s: &str, max: usize) -> String {
    cut_keeping(s, max, max.saturating_sub(1) / 3)
}

/// What a file whose first bytes are `head` looks like, for an error that says it is none of
/// gaptop's formats: `text starting "..."` (printable, at most 40 characters of it) or
/// `binary data starting 1f 8b 08 00` (its first bytes in hex).
pub fn looks_like(head: &[u8]) -> String {
    if head.is_empty() {
        return "an empty file".into();
    }
    let start = match std::str::from_utf8(head) {
        Ok(s) => Some(s),
        // A cut in the middle of a character at the end of `head` is still text.
        Err(e) if e.valid_up_to() + 4 > head.len() && e.error_len().is_none() => {
            std::str::from_utf8(&head[..e.valid_up_to()]).ok()
        }
        Err(_) => None,
    };
    match start {
        Some(t) if t.chars().all(|c| !c.is_control() || c.is_whitespace()) => {
            let shown: String = t.split_whitespace().collect::<Vec<_>>().join(" ");
            let cut: String = shown.chars().take(40).collect();
            let more = if cut.len() < shown.len() { "…" } else { "" };
            format!("text starting \"{cut}{more}\"")
        }
        _ => {
            let hex: Vec<String> = head.iter().take(8).map(|b| format!("{b:02x}")).collect();
            format!("binary data starting {}", hex.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_name_is_cut_in_its_middle_and_the_line_capped() {
        let name = format!("start{}end", "A".repeat(10_000_000));
        let line = one_line(&format!(
            "x.json: event at byte 17: kernel \"{name}\": bad ts"
        ));
        assert!(line.chars().count() <= MAX_LINE, "{}", line.len());
        assert!(line.starts_with("x.json: event at byte 17: kernel \"start"));
        assert!(line.contains("AAA…AAA"), "{line}");
        assert!(line.ends_with("end\": bad ts"), "{line}");

        let many = vec!["word"; 200].join(" ");
        let line = one_line(&format!("first\nsecond\r\t{many} last"));
        assert_eq!(line.chars().count(), MAX_LINE);
        assert!(line.starts_with("first second  word"), "{line}");
        assert!(line.ends_with("word last") && line.contains('…'), "{line}");

        // Short messages pass unchanged; multibyte characters are never split.
        assert_eq!(
            one_line("gaptop: x.rec: empty file"),
            "gaptop: x.rec: empty file"
        );
        let wide = "é".repeat(1000);
        let cut = one_line(&wide);
        assert_eq!(cut.chars().count(), MAX_WORD);
        assert!(cut.chars().all(|c| c == 'é' || c == '…'));
    }

    #[test]
    fn the_list_of_formats_is_kept_and_the_path_cut() {
        let dir = format!("/data/{}/run 7/{}", "d".repeat(90), "p".repeat(100));
        let msg = format!(
            "gaptop: {dir}/trace.bin: not a trace or a recording (binary data starting 00 01); \
             {READS}"
        );
        let line = one_line(&msg);
        assert!(line.chars().count() <= MAX_LINE, "{line}");
        assert!(line.ends_with(READS), "{line}");
        assert!(line.starts_with("gaptop: /data/ddd"), "{line}");
        assert!(
            line.contains("/trace.bin: not a trace or a recording (binary data starting 00 01); "),
            "{line}"
        );
        // Short enough, it passes unchanged.
        let short = format!("gaptop: x.bin: not a trace; {READS}");
        assert_eq!(one_line(&short), short);
    }

    #[test]
    fn what_a_file_looked_like() {
        assert_eq!(
            looks_like(b"hello world\n"),
            "text starting \"hello world\""
        );
        assert_eq!(
            looks_like(b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03"),
            "binary data starting 1f 8b 08 00 00 00 00 00"
        );
        assert_eq!(looks_like(b""), "an empty file");
        let long = "line of text ".repeat(10);
        assert!(looks_like(long.as_bytes()).ends_with("…\""));
        // A head cut inside a multibyte character is still text.
        assert_eq!(looks_like(&"née".as_bytes()[..2]), "text starting \"n\"");
    }
}

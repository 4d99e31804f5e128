//! How one value is read: words, lists, numbers, booleans, a command line
//! split as sh would; and the known key nearest a misspelt one.

use std::time::Duration;

use super::keys::KEYS;

pub(super) fn text(key: &str, value: &str) -> Result<String, String> {
    if value.is_empty() {
        Err(format!("{key}: expected a value, found nothing"))
    } else {
        Ok(value.to_string())
    }
}

pub(super) fn list(key: &str, value: &str) -> Result<Vec<String>, String> {
    let items: Vec<String> = value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect();
    if items.is_empty() {
        Err(format!("{key}: expected a comma-separated list, found nothing"))
    } else {
        Ok(items)
    }
}

pub(super) fn cids(key: &str, value: &str) -> Result<Vec<u32>, String> {
    list(key, value)?
        .iter()
        .map(|c| c.parse::<u32>().map_err(|_| format!("{key}: `{c}` is not a vsock CID")))
        .collect()
}

pub(super) fn number(key: &str, value: &str) -> Result<u64, String> {
    value
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{key}: expected a whole number, found `{value}`"))
}

pub(super) fn positive(key: &str, value: &str) -> Result<usize, String> {
    match number(key, value)? {
        0 => Err(format!("{key}: must be at least 1")),
        n => usize::try_from(n).map_err(|_| format!("{key}: `{value}` is too large")),
    }
}

pub(super) fn boolean(key: &str, value: &str) -> Result<bool, String> {
    match value {
        "true" | "yes" | "on" | "1" => Ok(true),
        "false" | "no" | "off" | "0" => Ok(false),
        _ => Err(format!("{key}: expected true or false, found `{value}`")),
    }
}

/// Seconds as a person writes them, `30` or `0.5` (to the nanosecond),
/// read without floating point (whose parser and printer would cost the
/// static binary 28 KB).
pub fn parse_secs(s: &str) -> Option<Duration> {
    let (whole, frac) = s.split_once('.').unwrap_or((s, ""));
    let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
    if (whole.is_empty() && frac.is_empty()) || !digits(whole) || !digits(frac) || frac.len() > 9 {
        return None;
    }
    let secs = if whole.is_empty() { 0 } else { whole.parse().ok()? };
    let nanos = format!("{frac:0<9}").parse().ok()?;
    Some(Duration::new(secs, nanos))
}

/// A duration as seconds for a person: `30`, `1.5`, `0.25`.
pub fn secs_text(d: Duration) -> String {
    match d.subsec_millis() {
        0 => d.as_secs().to_string(),
        ms => format!("{}.{}", d.as_secs(), format!("{ms:03}").trim_end_matches('0')),
    }
}

/// The known key closest to a misspelt one.
pub(super) fn suggest(key: &str) -> Option<&'static str> {
    let names: Vec<&'static str> = KEYS.iter().map(|k| k.name).collect();
    nearest(key, &names)
}

/// The candidate a misspelt `word` most likely meant: the same but for
/// case or `-`/`_`, else the one fewest edits away (within about one edit
/// in four characters, at most 3), else one it is a prefix of (or that is a
/// prefix of it). A slice, not an iterator: one copy of this in the binary.
pub fn nearest<'a>(word: &str, candidates: &[&'a str]) -> Option<&'a str> {
    let fold = |s: &str| s.to_ascii_lowercase().replace('-', "_");
    let word_folded = fold(word);
    let within = (word.chars().count() / 4).clamp(1, 3);
    let mut best: Option<(usize, &'a str)> = None;
    for c in candidates {
        let d = edit_distance(&word_folded, &fold(c));
        if d == 0 {
            return Some(c);
        }
        if d <= within && best.is_none_or(|(b, _)| d < b) {
            best = Some((d, c));
        }
    }
    best.map(|(_, c)| c).or_else(|| {
        candidates
            .iter()
            .copied()
            .find(|c| word.len() > 3 && (c.starts_with(word) || word.starts_with(c)))
    })
}

/// Edits (insert, delete, substitute, swap two neighbours) that turn `a`
/// into `b`: the optimal string alignment distance.
pub fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    // Three rows: the one two back (for swaps), the last, this one.
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut last: Vec<usize> = (0..=b.len()).collect();
    for i in 1..=a.len() {
        let mut row = vec![i; b.len() + 1];
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            row[j] = (last[j] + 1).min(row[j - 1] + 1).min(last[j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                row[j] = row[j].min(before[j - 2] + 1);
            }
        }
        before = std::mem::replace(&mut last, row);
    }
    last[b.len()]
}

/// Splits a command line the way sh would for words: whitespace separates,
/// '…' is literal, "…" allows \" and \\, a backslash outside quotes escapes
/// the next character. No expansion of any kind.
pub fn split_command(s: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => cur.push(c),
                        None => return Err("unterminated single quote".into()),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\')) => cur.push(c),
                            Some(c) => {
                                cur.push('\\');
                                cur.push(c);
                            }
                            None => return Err("unterminated double quote".into()),
                        },
                        Some(c) => cur.push(c),
                        None => return Err("unterminated double quote".into()),
                    }
                }
            }
            '\\' => {
                in_word = true;
                match chars.next() {
                    Some(c) => cur.push(c),
                    None => return Err("trailing backslash".into()),
                }
            }
            c => {
                in_word = true;
                cur.push(c);
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

//! How one value is read: words, lists, numbers, booleans, a command line
//! split as sh would; and the known key nearest a misspelt one.

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

/// The known key closest to a misspelt one (same prefix or one edit away).
pub(super) fn suggest(key: &str) -> Option<&'static str> {
    KEYS.iter()
        .map(|k| k.name)
        .find(|k| k.eq_ignore_ascii_case(key) || k.replace('-', "_") == key.replace('-', "_"))
        .or_else(|| {
            KEYS.iter()
                .map(|k| k.name)
                .find(|k| key.len() > 3 && (k.starts_with(key) || key.starts_with(k)))
        })
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

//! Long text written as a JSON string eight bytes at a time.
//!
//! Why: serde_json escapes a string a byte at a time (a table lookup per
//! byte). For a program's large output that loop was the biggest single
//! cost of a streamed answer (~10% of the core for a 50 MB artifact). Here
//! a word of eight bytes is tested at once for anything JSON must escape
//! (a control character, `"` or `\`), and clean runs are copied whole.
//!
//! The escaped text reaches serde_json's writer as a raw value: serde_json
//! (feature `raw_value`) writes a struct named [`RAW_VALUE_TOKEN`] with one
//! field of that name verbatim, which is how its own `RawValue` serializes.
//! The token is serde_json's, not a public item: the tests below check the
//! bytes against serde_json's own escaping, both for its writer and for its
//! `Value` serializer (which parses the raw text back into a string), so a
//! serde_json that stops honouring it fails them rather than garbling
//! answers. Cargo.toml holds serde_json below 1.0.145.
//!
//! The output is exactly serde_json's: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`,
//! `\t`, `\u00xx` (lowercase hex) for the other control characters, and
//! everything else, DEL and non-ASCII included, as it is.

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

/// serde_json's name for a value written verbatim (`serde_json::raw::TOKEN`).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Text shorter than this goes through serde_json's own escaping: the
/// buffer and the extra copy are not worth it for a line or two.
pub const LONG_TEXT_MIN_BYTES: usize = 1024;

/// A string serialized as JSON: fast when long, through serde_json when not.
pub struct LongText<'a>(pub &'a str);

impl Serialize for LongText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.0.len() < LONG_TEXT_MIN_BYTES {
            return s.serialize_str(self.0);
        }
        let mut json = String::with_capacity(self.0.len() + 2);
        json.push('"');
        escape_into(&mut json, self.0);
        json.push('"');
        serialize_raw(s, &json)
    }
}

/// Pieces of text written as one JSON string, as if joined first: escaped
/// into one buffer when they fit [`PIECES_BUFFERED_MAX_BYTES`], else
/// through serde_json piece by piece (a larger answer is not held twice).
pub struct JoinedText<'a>(pub &'a [&'a str]);

/// The most text [`JoinedText`] escapes into a buffer of its own.
pub const PIECES_BUFFERED_MAX_BYTES: usize = 4 * 1024 * 1024;

impl Serialize for JoinedText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let len: usize = self.0.iter().map(|p| p.len()).sum();
        if !(LONG_TEXT_MIN_BYTES..=PIECES_BUFFERED_MAX_BYTES).contains(&len) {
            return s.collect_str(&Display(self.0));
        }
        let mut json = String::with_capacity(len + 2);
        json.push('"');
        for piece in self.0 {
            escape_into(&mut json, piece);
        }
        json.push('"');
        serialize_raw(s, &json)
    }
}

struct Display<'a>(&'a [&'a str]);

impl std::fmt::Display for Display<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|piece| f.write_str(piece))
    }
}

/// Writes `json` (a complete JSON string literal) as it is.
fn serialize_raw<S: Serializer>(s: S, json: &str) -> Result<S::Ok, S::Error> {
    let mut st = s.serialize_struct(RAW_VALUE_TOKEN, 1)?;
    st.serialize_field(RAW_VALUE_TOKEN, json)?;
    st.end()
}

const ONES: u64 = u64::MAX / 255;
const HIGHS: u64 = ONES << 7;

/// Whether any byte of the words is below 0x20, `"` or `\` (exact: words
/// with none give false; which byte it is, the caller finds a byte at a
/// time).
fn needs_escape(words: &[u64]) -> bool {
    let mut found = 0;
    for &word in words {
        let below_space = word.wrapping_sub(ONES * 0x20) & !word;
        let q = word ^ (ONES * u64::from(b'"'));
        let quote = q.wrapping_sub(ONES) & !q;
        let b = word ^ (ONES * u64::from(b'\\'));
        let backslash = b.wrapping_sub(ONES) & !b;
        found |= below_space | quote | backslash;
    }
    found & HIGHS != 0
}

/// How many bytes at the start of `bytes` need no escape, counted in
/// blocks of four words, then words (the byte after is the caller's).
fn clean_prefix(bytes: &[u8]) -> usize {
    fn words<const N: usize>(block: &[u8]) -> [u64; N] {
        let mut out = [0u64; N];
        for (word, bytes) in out.iter_mut().zip(block.chunks_exact(8)) {
            let mut w = [0u8; 8];
            w.copy_from_slice(bytes);
            *word = u64::from_le_bytes(w);
        }
        out
    }
    let mut n = 0;
    for block in bytes.chunks_exact(32) {
        if needs_escape(&words::<4>(block)) {
            break;
        }
        n += 32;
    }
    for word in bytes[n..].chunks_exact(8) {
        if needs_escape(&words::<1>(word)) {
            break;
        }
        n += 8;
    }
    n
}

/// Appends `text`'s JSON string contents (no quotes) to `out`. The text is
/// cut only before and after an ASCII byte, so each run copied is `str`.
pub fn escape_into(out: &mut String, text: &str) {
    let bytes = text.as_bytes();
    out.reserve(bytes.len());
    let mut clean_from = 0;
    let mut i = 0;
    while i < bytes.len() {
        // Clean runs are skipped whole; the copy waits until a byte needs work.
        i += clean_prefix(&bytes[i..]);
        let Some(&byte) = bytes.get(i) else { break };
        if let Some(escaped) = escape_of(byte) {
            out.push_str(&text[clean_from..i]);
            push_escape(out, escaped, byte);
            clean_from = i + 1;
        }
        i += 1;
    }
    out.push_str(&text[clean_from..]);
}

/// How a byte is escaped, if it must be: its letter after `\`, or `u` for
/// `\u00xx`.
fn escape_of(byte: u8) -> Option<u8> {
    match byte {
        b'"' => Some(b'"'),
        b'\\' => Some(b'\\'),
        0x08 => Some(b'b'),
        0x0c => Some(b'f'),
        b'\n' => Some(b'n'),
        b'\r' => Some(b'r'),
        b'\t' => Some(b't'),
        0x00..=0x1f => Some(b'u'),
        _ => None,
    }
}

fn push_escape(out: &mut String, escaped: u8, byte: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    if escaped == b'u' {
        out.push_str("\\u00");
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0xf)]));
    } else {
        out.push('\\');
        out.push(char::from(escaped));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text with every byte class at every offset within a word, long
    /// enough for the fast path.
    fn samples() -> Vec<String> {
        let mut out = vec![
            "a".repeat(5000),
            "é✓ \u{7f}".repeat(400),
            (0u8..0x80).map(char::from).collect::<String>().repeat(20),
        ];
        for special in [
            '"', '\\', '\n', '\u{1}', '\u{1f}', '\u{8}', '\u{c}', '\t', '\r', ' ', '~',
        ] {
            for at in 0..17 {
                let mut s = "x".repeat(1100);
                s.insert(at, special);
                s.push(special);
                out.push(s);
            }
        }
        out
    }

    #[test]
    fn long_text_is_exactly_serde_jsons_string() {
        for s in samples() {
            let ours = serde_json::to_string(&LongText(&s)).unwrap();
            assert_eq!(ours, serde_json::to_string(&s).unwrap(), "for {s:?}");
        }
    }

    #[test]
    fn long_text_through_the_value_serializer_is_the_same_string() {
        for s in samples() {
            assert_eq!(
                serde_json::to_value(LongText(&s)).unwrap(),
                serde_json::Value::String(s.clone())
            );
        }
    }

    #[test]
    fn random_text_is_exactly_serde_jsons_string() {
        let alphabet = [
            'a', 'Z', ' ', '"', '\\', '\n', '\u{0}', '\u{1b}', '\u{7f}', 'é', '✓', '𝄞',
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for len in [1024, 1031, 4096, 70_000] {
            let text: String = (0..len)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    // Mostly plain letters, so clean runs of every length occur.
                    let pick = (seed % 64) as usize;
                    alphabet.get(pick).copied().unwrap_or('q')
                })
                .collect();
            assert_eq!(
                serde_json::to_string(&LongText(&text)).unwrap(),
                serde_json::to_string(&text).unwrap()
            );
        }
    }

    #[test]
    fn short_text_takes_serde_jsons_own_path() {
        assert_eq!(serde_json::to_string(&LongText("a\"b")).unwrap(), r#""a\"b""#);
        assert_eq!(serde_json::to_string(&LongText("")).unwrap(), r#""""#);
    }

    #[test]
    fn joined_text_is_the_joined_string() {
        let big = "b\"".repeat(600);
        let cases: Vec<Vec<&str>> = vec![vec!["a", "b"], vec![&big, "\n", &big], vec!["", &big, ""]];
        for pieces in cases {
            let joined: String = pieces.concat();
            let json = serde_json::to_string(&JoinedText(&pieces)).unwrap();
            assert_eq!(json, serde_json::to_string(&joined).unwrap());
            assert_eq!(
                serde_json::to_value(JoinedText(&pieces)).unwrap(),
                serde_json::Value::String(joined)
            );
        }
    }

    #[test]
    fn joined_text_past_the_buffered_bound_goes_piece_by_piece() {
        let piece = "z\t".repeat(PIECES_BUFFERED_MAX_BYTES / 4 + 1);
        let pieces = [piece.as_str(), piece.as_str()];
        let json = serde_json::to_string(&JoinedText(&pieces)).unwrap();
        assert_eq!(json, serde_json::to_string(&pieces.concat()).unwrap());
    }

    #[test]
    fn the_word_test_finds_each_byte_to_escape_and_nothing_else() {
        for byte in 0u8..=255 {
            for at in 0..8 {
                let mut w = [b'a'; 8];
                w[at] = byte;
                let want = escape_of(byte).is_some();
                assert_eq!(needs_escape(&[u64::from_le_bytes(w)]), want, "byte {byte:#x} at {at}");
            }
        }
    }
}

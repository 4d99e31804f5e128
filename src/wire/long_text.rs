//! Long text written as a JSON string, tested for escapes 64 bytes at a time.
//!
//! Why: serde_json escapes a string a byte at a time (a table lookup per
//! byte). For a program's large output that loop was the biggest single
//! cost of a streamed answer (~10% of the core for a 50 MB artifact). Here
//! blocks of 64 bytes are tested at once for anything JSON must escape (a
//! control character, `"` or `\`), in a loop the compiler turns into vector
//! instructions (~2x the words of eight bytes tested before, for the same
//! text), and clean runs are copied whole.
//!
//! The escaped text reaches serde_json's writer as raw fragments of at most
//! [`FRAGMENT_BYTES`], through one small buffer: serde_json (feature
//! `raw_value`) writes each field of a struct named [`RAW_VALUE_TOKEN`]
//! verbatim, which is how its own `RawValue` serializes. So a large answer
//! is neither escaped byte by byte nor held a second time. serde_json's
//! `Value` serializer would parse each fragment alone: for it (told apart
//! by its output, a `Value`, where the writer's is `()`) the text goes whole
//! through serde_json's own escaping.
//!
//! The token is serde_json's, not a public item: the tests below check the
//! bytes against serde_json's own escaping, through its writer and through
//! its `Value` serializer, so a serde_json that stops honouring it fails
//! them rather than garbling answers. Cargo.toml holds serde_json below
//! 1.0.145.
//!
//! The output is exactly serde_json's: `\"`, `\\`, `\b`, `\f`, `\n`, `\r`,
//! `\t`, `\u00xx` (lowercase hex) for the other control characters, and
//! everything else, DEL and non-ASCII included, as it is.

use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};

/// serde_json's name for a value written verbatim (`serde_json::raw::TOKEN`).
const RAW_VALUE_TOKEN: &str = "$serde_json::private::RawValue";

/// Text shorter than this goes through serde_json's own escaping: for a
/// line or two the fragments are not worth it.
pub const LONG_TEXT_MIN_BYTES: usize = 1024;

/// About how much escaped text is handed to the writer at once: the
/// buffer's size (it grows only for a segment of mostly escapes, each up to
/// 6 bytes for 1).
const FRAGMENT_BYTES: usize = 16 * 1024;
/// The most text escaped per step, so a step fits the buffer unless the
/// text is mostly escapes.
const SEGMENT_BYTES: usize = FRAGMENT_BYTES / 2;

/// A string serialized as JSON: fast when long, through serde_json when not.
pub struct LongText<'a>(pub &'a str);

impl Serialize for LongText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_pieces(s, &[self.0])
    }
}

/// Pieces of text written as one JSON string, as if joined first (and never
/// joined: a large answer is not held twice).
pub struct JoinedText<'a>(pub &'a [&'a str]);

impl Serialize for JoinedText<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        serialize_pieces(s, self.0)
    }
}

/// Whether `S` is serde_json's writer, whose output is `()` (its `Value`
/// serializer's is a `Value`; agentd serializes JSON with nothing else).
fn writes_bytes<S: Serializer>() -> bool {
    std::mem::size_of::<S::Ok>() == 0
}

fn serialize_pieces<S: Serializer>(s: S, pieces: &[&str]) -> Result<S::Ok, S::Error> {
    let len: usize = pieces.iter().map(|p| p.len()).sum();
    if len < LONG_TEXT_MIN_BYTES || !writes_bytes::<S>() {
        return match pieces {
            [one] => s.serialize_str(one),
            _ => s.collect_str(&Concat(pieces)),
        };
    }
    let mut raw = s.serialize_struct(RAW_VALUE_TOKEN, 1)?;
    let mut fragment = String::with_capacity(FRAGMENT_BYTES);
    fragment.push('"');
    for piece in pieces {
        for segment in segments(piece) {
            escape_into(&mut fragment, segment);
            if fragment.len() >= FRAGMENT_BYTES - SEGMENT_BYTES {
                raw.serialize_field(RAW_VALUE_TOKEN, fragment.as_str())?;
                fragment.clear();
            }
        }
    }
    fragment.push('"');
    raw.serialize_field(RAW_VALUE_TOKEN, fragment.as_str())?;
    raw.end()
}

/// `text` in runs of about [`SEGMENT_BYTES`], cut between characters.
fn segments(text: &str) -> impl Iterator<Item = &str> {
    let mut rest = text;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut cut = rest.len().min(SEGMENT_BYTES);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        let (segment, after) = rest.split_at(cut);
        rest = after;
        Some(segment)
    })
}

/// Pieces shown one after another, for serde_json's `collect_str`.
struct Concat<'a>(&'a [&'a str]);

impl std::fmt::Display for Concat<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|piece| f.write_str(piece))
    }
}

/// Bytes tested at once for anything to escape: a block the compiler
/// tests with vector instructions (SSE2 on any x86_64), without a branch
/// per byte.
const BLOCK_BYTES: usize = 64;

/// Whether JSON must escape this byte: a control character, `"` or `\`.
fn must_escape(byte: u8) -> bool {
    (byte < 0x20) | (byte == b'"') | (byte == b'\\')
}

/// How many bytes at the start of `bytes` need no escape: whole blocks
/// first, then byte by byte up to the first that does.
fn clean_prefix(bytes: &[u8]) -> usize {
    let mut n = 0;
    for block in bytes.chunks_exact(BLOCK_BYTES) {
        // `|` over the whole block, not `any`: no early exit, so no branch
        // in the loop for the compiler to keep.
        let mut dirty = false;
        for &byte in block {
            dirty |= must_escape(byte);
        }
        if dirty {
            break;
        }
        n += BLOCK_BYTES;
    }
    n + bytes[n..]
        .iter()
        .position(|&b| must_escape(b))
        .unwrap_or(bytes.len() - n)
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

    /// `pieces` joined are written as serde_json writes the joined string,
    /// through its writer and through its `Value` serializer.
    fn assert_joined_like_serde(pieces: &[&str]) {
        let joined: String = pieces.concat();
        let json = serde_json::to_string(&JoinedText(pieces)).unwrap();
        assert_eq!(json, serde_json::to_string(&joined).unwrap());
        assert_eq!(
            serde_json::to_value(JoinedText(pieces)).unwrap(),
            serde_json::Value::String(joined)
        );
    }

    #[test]
    fn joined_text_is_the_joined_string() {
        let big = "b\"".repeat(600);
        let cases: Vec<Vec<&str>> = vec![vec!["a", "b"], vec![&big, "\n", &big], vec!["", &big, ""]];
        for pieces in cases {
            assert_joined_like_serde(&pieces);
        }
    }

    #[test]
    fn text_of_many_fragments_is_one_string_cut_only_between_characters() {
        // Four-byte characters and escapes across every segment boundary.
        let piece = "z\t😀\u{1}".repeat(3 * FRAGMENT_BYTES / 7 + 1);
        assert_joined_like_serde(&[piece.as_str(), "", piece.as_str()]);
    }

    #[test]
    fn text_of_nothing_but_escapes_fits_its_fragments() {
        let piece = "\u{1}".repeat(SEGMENT_BYTES * 3 + 5);
        let json = serde_json::to_string(&LongText(&piece)).unwrap();
        assert_eq!(json, serde_json::to_string(&piece).unwrap());
    }

    #[test]
    fn the_block_test_finds_each_byte_to_escape_and_nothing_else() {
        for byte in 0u8..=255 {
            let want = escape_of(byte).is_some();
            assert_eq!(must_escape(byte), want, "byte {byte:#x}");
            // At every offset of a block and of the bytes after the blocks.
            for at in 0..2 * BLOCK_BYTES + 7 {
                let mut run = vec![b'a'; 2 * BLOCK_BYTES + 9];
                run[at] = byte;
                let clean = if want { at } else { run.len() };
                assert_eq!(clean_prefix(&run), clean, "byte {byte:#x} at {at}");
            }
        }
    }
}

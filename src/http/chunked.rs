//! Chunked transfer-coding (RFC 9112 §7.1): a decoder that is a pure state
//! machine fed `&[u8]`, and a one-function encoder.
//!
//! ```text
//!   size line ──"5;ext\r\n"──▶ data (5 bytes) ──"\r\n"──▶ size line ...
//!   size line ──"0\r\n"──▶ trailer lines ──"\r\n" (empty line)──▶ done
//! ```
//!
//! Strictness: every line must end in CRLF; a bare LF is rejected
//! ([`ChunkError::MissingCrlf`]) because lenient line endings are how
//! front-end/back-end parsers come to disagree about where a body ends.
//! Spaces or tabs are allowed between the hex digits and `;` or CR (RFC "BWS");
//! extensions are skipped unread; trailer fields are discarded.

use std::fmt;

use crate::limits;

/// Why a chunked body could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkError {
    /// The chunk-size line does not start with hex digits.
    BadSizeLine,
    /// The chunk-size line is longer than `limits::HTTP_CHUNK_LINE_MAX_BYTES`.
    SizeLineTooLong,
    /// The chunk size does not fit in a u64 / usize.
    SizeOverflow,
    /// A line or a chunk's data is not followed by CRLF.
    MissingCrlf,
    /// The trailer section is longer than the decoder's trailer bound.
    TrailerTooLong,
}

impl fmt::Display for ChunkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ChunkError::BadSizeLine => "chunk size line is not hex",
            ChunkError::SizeLineTooLong => "chunk size line is too long",
            ChunkError::SizeOverflow => "chunk size is too large",
            ChunkError::MissingCrlf => "chunk line does not end in CRLF",
            ChunkError::TrailerTooLong => "chunk trailer section is too long",
        })
    }
}

impl std::error::Error for ChunkError {}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Reading hex digits; `len` counts bytes of the line so far.
    Size {
        value: u64,
        digits: usize,
        len: usize,
    },
    /// After the digits: only SP / HTAB, then `;` or CR.
    SizeWs {
        value: u64,
        len: usize,
    },
    /// Inside `;ext...`: anything but CR / LF.
    Ext {
        value: u64,
        len: usize,
    },
    /// Saw CR at the end of the size line.
    SizeLf {
        value: u64,
    },
    Data {
        remaining: u64,
    },
    DataCr,
    DataLf,
    /// Inside the trailer section; `total` counts all its bytes so far.
    Trailer {
        total: usize,
        line_len: usize,
    },
    TrailerLf {
        total: usize,
        empty: bool,
    },
    Done,
    Failed(ChunkError),
}

/// Decodes a chunked body fed in pieces of any size (down to one byte).
#[derive(Debug, Clone)]
pub struct Decoder {
    state: State,
    trailer_max_bytes: usize,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder whose trailer section may be up to
    /// `limits::HTTP_HEAD_MAX_BYTES` long.
    pub fn new() -> Self {
        Self::with_trailer_max(limits::HTTP_HEAD_MAX_BYTES)
    }

    /// A decoder whose whole trailer section (all bytes after the `0` size
    /// line, final CRLF included) may be up to `trailer_max_bytes` long.
    pub fn with_trailer_max(trailer_max_bytes: usize) -> Self {
        Decoder {
            state: State::Size {
                value: 0,
                digits: 0,
                len: 0,
            },
            trailer_max_bytes,
        }
    }

    /// Feeds bytes; appends decoded data to `out`; returns bytes consumed
    /// from `input`. Consumes all of `input` unless the body ends inside it:
    /// it stops right after the final CRLF of the trailer section, so the
    /// rest belongs to whatever follows (a pipelined request). After an
    /// error every later call returns the same error.
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ChunkError> {
        let mut i = 0;
        while i < input.len() {
            match self.state {
                State::Done => break,
                State::Failed(ref e) => return Err(e.clone()),
                State::Data { remaining } => {
                    let avail = input.len() - i;
                    // `n` ≤ avail, so it fits in usize.
                    let n = usize::try_from(remaining).map_or(avail, |r| r.min(avail));
                    out.extend_from_slice(&input[i..i + n]);
                    i += n;
                    let left = remaining - n as u64;
                    self.state = if left == 0 {
                        State::DataCr
                    } else {
                        State::Data { remaining: left }
                    };
                }
                _ => {
                    if let Err(e) = self.step(input[i]) {
                        self.state = State::Failed(e.clone());
                        return Err(e);
                    }
                    i += 1;
                }
            }
        }
        match self.state {
            State::Failed(ref e) => Err(e.clone()),
            _ => Ok(i),
        }
    }

    /// True once the final CRLF of the trailer section was consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Data bytes still to come in the chunk being read (0 outside a chunk's
    /// data). Lets a caller refuse a chunk that would cross its body cap as
    /// soon as the size line is read, before any of its data arrives.
    pub fn chunk_remaining(&self) -> u64 {
        match self.state {
            State::Data { remaining } => remaining,
            _ => 0,
        }
    }

    /// One byte in any state but `Data`, `Done` and `Failed`.
    fn step(&mut self, b: u8) -> Result<(), ChunkError> {
        let line_max = limits::HTTP_CHUNK_LINE_MAX_BYTES;
        self.state = match self.state {
            State::Size { value, digits, len } => {
                if let Some(d) = hex_value(b) {
                    check_line_len(len + 1, line_max)?;
                    let value = value
                        .checked_mul(16)
                        .and_then(|v| v.checked_add(u64::from(d)))
                        .ok_or(ChunkError::SizeOverflow)?;
                    State::Size {
                        value,
                        digits: digits + 1,
                        len: len + 1,
                    }
                } else if digits == 0 {
                    return Err(ChunkError::BadSizeLine);
                } else {
                    after_digits(b, value, len, line_max)?
                }
            }
            State::SizeWs { value, len } => after_digits(b, value, len, line_max)?,
            State::Ext { value, len } => match b {
                b'\r' => State::SizeLf { value },
                b'\n' => return Err(ChunkError::MissingCrlf),
                _ => {
                    check_line_len(len + 1, line_max)?;
                    State::Ext { value, len: len + 1 }
                }
            },
            State::SizeLf { value } => {
                if b != b'\n' {
                    return Err(ChunkError::MissingCrlf);
                }
                if usize::try_from(value).is_err() {
                    return Err(ChunkError::SizeOverflow);
                }
                if value == 0 {
                    State::Trailer { total: 0, line_len: 0 }
                } else {
                    State::Data { remaining: value }
                }
            }
            State::DataCr if b == b'\r' => State::DataLf,
            State::DataLf if b == b'\n' => State::Size {
                value: 0,
                digits: 0,
                len: 0,
            },
            State::DataCr | State::DataLf => return Err(ChunkError::MissingCrlf),
            State::Trailer { total, line_len } => {
                let total = total + 1;
                if total > self.trailer_max_bytes {
                    return Err(ChunkError::TrailerTooLong);
                }
                match b {
                    b'\r' => State::TrailerLf {
                        total,
                        empty: line_len == 0,
                    },
                    b'\n' => return Err(ChunkError::MissingCrlf),
                    _ => State::Trailer {
                        total,
                        line_len: line_len + 1,
                    },
                }
            }
            State::TrailerLf { total, empty } => {
                let total = total + 1;
                if total > self.trailer_max_bytes {
                    return Err(ChunkError::TrailerTooLong);
                }
                match (b, empty) {
                    (b'\n', true) => State::Done,
                    (b'\n', false) => State::Trailer { total, line_len: 0 },
                    _ => return Err(ChunkError::MissingCrlf),
                }
            }
            // `feed` never steps these; keep them unchanged.
            State::Data { .. } | State::Done | State::Failed(_) => return Ok(()),
        };
        Ok(())
    }
}

/// The byte after the hex digits (or after whitespace following them).
fn after_digits(b: u8, value: u64, len: usize, line_max: usize) -> Result<State, ChunkError> {
    match b {
        b'\r' => Ok(State::SizeLf { value }),
        b'\n' => Err(ChunkError::MissingCrlf),
        b' ' | b'\t' => {
            check_line_len(len + 1, line_max)?;
            Ok(State::SizeWs { value, len: len + 1 })
        }
        b';' => {
            check_line_len(len + 1, line_max)?;
            Ok(State::Ext { value, len: len + 1 })
        }
        _ => Err(ChunkError::BadSizeLine),
    }
}

fn check_line_len(len: usize, max: usize) -> Result<(), ChunkError> {
    if len > max {
        Err(ChunkError::SizeLineTooLong)
    } else {
        Ok(())
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Appends one chunk (`<hex len>\r\n<data>\r\n`) to `out`. Empty `data`
/// appends nothing: an empty chunk is the end-of-body marker, written only by
/// [`super::ChunkedWriter::finish`].
pub fn encode_chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(chunk_head(data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(CHUNK_END);
}

/// The line before a chunk of `len` bytes (not 0: that ends the body).
pub fn chunk_head(len: usize) -> String {
    format!("{len:x}\r\n")
}

/// What follows a chunk's data.
pub const CHUNK_END: &[u8] = b"\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `input` whole, then one byte at a time; both must agree.
    /// Returns (result, decoded data, done).
    fn decode_both(mut make: impl FnMut() -> Decoder, input: &[u8]) -> (Result<usize, ChunkError>, Vec<u8>, bool) {
        let mut whole = make();
        let mut out_whole = Vec::new();
        let r_whole = whole.feed(input, &mut out_whole);

        let mut drip = make();
        let mut out_drip = Vec::new();
        let mut consumed = 0;
        let mut r_drip = Ok(0);
        for b in input {
            match drip.feed(std::slice::from_ref(b), &mut out_drip) {
                Ok(n) => consumed += n,
                Err(e) => {
                    r_drip = Err(e);
                    break;
                }
            }
        }
        if r_drip.is_ok() {
            r_drip = Ok(consumed);
        }
        assert_eq!(r_whole, r_drip, "whole vs byte-by-byte result");
        if r_whole.is_ok() {
            assert_eq!(out_whole, out_drip, "whole vs byte-by-byte data");
            assert_eq!(whole.is_done(), drip.is_done());
        }
        (r_whole, out_whole, whole.is_done())
    }

    /// `chunk!(name, input, Ok((consumed, data, done)))` or `chunk!(name, input, Err(e))`.
    macro_rules! chunk {
        ($name:ident, $input:expr, Ok(($consumed:expr, $data:expr, $done:expr))) => {
            chunk!($name, Decoder::new, $input, Ok(($consumed, $data, $done)));
        };
        ($name:ident, $input:expr, Err($err:expr)) => {
            chunk!($name, Decoder::new, $input, Err($err));
        };
        ($name:ident, $make:expr, $input:expr, Ok(($consumed:expr, $data:expr, $done:expr))) => {
            #[test]
            fn $name() {
                let input: &[u8] = &$input;
                let (r, data, done) = decode_both($make, input);
                assert_eq!(r, Ok($consumed));
                assert_eq!(data, &$data[..]);
                assert_eq!(done, $done);
            }
        };
        ($name:ident, $make:expr, $input:expr, Err($err:expr)) => {
            #[test]
            fn $name() {
                let input: &[u8] = &$input;
                let (r, _, _) = decode_both($make, input);
                assert_eq!(r, Err($err));
            }
        };
    }

    fn line_of(len: usize, prefix: &str) -> Vec<u8> {
        let mut v = prefix.as_bytes().to_vec();
        v.resize(len, b'x');
        v
    }

    fn size_line_case(len: usize) -> Vec<u8> {
        let mut v = line_of(len, "3;");
        v.extend_from_slice(b"\r\nabc\r\n0\r\n\r\n");
        v
    }

    fn trailer_case(total: usize) -> Vec<u8> {
        // "0\r\n" then one trailer line of (total - 4) bytes, its CRLF, final CRLF.
        let mut v = b"0\r\n".to_vec();
        v.extend(line_of(total - 4, "X-T: "));
        v.extend_from_slice(b"\r\n\r\n");
        v
    }

    chunk!(simple, *b"5\r\nhello\r\n0\r\n\r\n", Ok((15, b"hello", true)));
    chunk!(
        two_chunks,
        *b"3\r\nabc\r\nA\r\n0123456789\r\n0\r\n\r\n",
        Ok((28, b"abc0123456789", true))
    );
    chunk!(
        uppercase_and_zeros,
        *b"00B\r\nhello world\r\n000\r\n\r\n",
        Ok((25, b"hello world", true))
    );
    chunk!(
        extension_ignored,
        *b"5;name=\"v\";x\r\nhello\r\n0;last\r\n\r\n",
        Ok((31, b"hello", true))
    );
    chunk!(
        whitespace_before_ext,
        *b"5 \t;x\r\nhello\r\n0\r\n\r\n",
        Ok((19, b"hello", true))
    );
    chunk!(
        trailers_discarded,
        *b"1\r\na\r\n0\r\nX-A: 1\r\nX-B: 2\r\n\r\n",
        Ok((27, b"a", true))
    );
    chunk!(
        stops_after_end,
        *b"1\r\na\r\n0\r\n\r\nGET / HTTP/1.1",
        Ok((11, b"a", true))
    );
    chunk!(partial_is_not_done, *b"5\r\nhel", Ok((6, b"hel", false)));
    chunk!(empty_input, *b"", Ok((0, b"", false)));
    chunk!(not_hex, *b"z\r\n", Err(ChunkError::BadSizeLine));
    chunk!(empty_size, *b"\r\n", Err(ChunkError::BadSizeLine));
    chunk!(junk_after_digits, *b"5x\r\nhello\r\n", Err(ChunkError::BadSizeLine));
    chunk!(negative, *b"-5\r\n", Err(ChunkError::BadSizeLine));
    chunk!(bare_lf_size, *b"5\nhello\r\n", Err(ChunkError::MissingCrlf));
    chunk!(bare_lf_ext, *b"5;a\nhello\r\n", Err(ChunkError::MissingCrlf));
    chunk!(cr_without_lf, *b"5\rhello", Err(ChunkError::MissingCrlf));
    chunk!(data_too_long, *b"3\r\nabcd\r\n", Err(ChunkError::MissingCrlf));
    chunk!(data_bare_lf, *b"3\r\nabc\n0\r\n\r\n", Err(ChunkError::MissingCrlf));
    chunk!(trailer_bare_lf, *b"0\r\nX: 1\n\r\n", Err(ChunkError::MissingCrlf));
    chunk!(final_bare_lf, *b"0\r\n\n", Err(ChunkError::MissingCrlf));
    chunk!(u64_max_fits, *b"ffffffffffffffff\r\n", Ok((18, b"", false)));
    chunk!(u64_overflow, *b"10000000000000000\r\n", Err(ChunkError::SizeOverflow));
    chunk!(
        leading_zeros_no_overflow,
        *b"000000000000000000000001\r\na\r\n0\r\n\r\n",
        Ok((34, b"a", true))
    );
    // Size line limit counts the bytes before CRLF.
    chunk!(
        size_line_at_limit,
        size_line_case(limits::HTTP_CHUNK_LINE_MAX_BYTES),
        Ok((limits::HTTP_CHUNK_LINE_MAX_BYTES + 12, b"abc", true))
    );
    chunk!(
        size_line_over_limit,
        size_line_case(limits::HTTP_CHUNK_LINE_MAX_BYTES + 1),
        Err(ChunkError::SizeLineTooLong)
    );
    chunk!(
        digits_over_limit,
        {
            let mut v = vec![b'0'; limits::HTTP_CHUNK_LINE_MAX_BYTES + 1];
            v.extend_from_slice(b"\r\n");
            v
        },
        Err(ChunkError::SizeLineTooLong)
    );
    // Trailer limit counts the whole section after "0\r\n", final CRLF included.
    chunk!(
        trailer_at_limit,
        || Decoder::with_trailer_max(64),
        trailer_case(64),
        Ok((67, b"", true))
    );
    chunk!(
        trailer_over_limit,
        || Decoder::with_trailer_max(64),
        trailer_case(65),
        Err(ChunkError::TrailerTooLong)
    );
    chunk!(
        trailer_default_at_limit,
        trailer_case(limits::HTTP_HEAD_MAX_BYTES),
        Ok((limits::HTTP_HEAD_MAX_BYTES + 3, b"", true))
    );
    chunk!(
        trailer_default_over_limit,
        trailer_case(limits::HTTP_HEAD_MAX_BYTES + 1),
        Err(ChunkError::TrailerTooLong)
    );

    #[test]
    fn done_consumes_nothing_more() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        assert_eq!(d.feed(b"0\r\n\r\n", &mut out), Ok(5));
        assert!(d.is_done());
        assert_eq!(d.feed(b"more", &mut out), Ok(0));
    }

    #[test]
    fn error_is_sticky() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        assert_eq!(d.feed(b"g", &mut out), Err(ChunkError::BadSizeLine));
        assert_eq!(d.feed(b"5\r\n", &mut out), Err(ChunkError::BadSizeLine));
    }

    #[test]
    fn chunk_remaining_reports_declared_size() {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        assert_eq!(d.feed(b"100\r\nab", &mut out), Ok(7));
        assert_eq!(d.chunk_remaining(), 0x100 - 2);
    }

    #[test]
    fn encode_round_trips() {
        let mut wire = Vec::new();
        encode_chunk(b"hello", &mut wire);
        encode_chunk(b"", &mut wire);
        encode_chunk(&[7u8; 300], &mut wire);
        wire.extend_from_slice(b"0\r\n\r\n");
        assert!(wire.starts_with(b"5\r\nhello\r\n12c\r\n"));
        let mut expect = b"hello".to_vec();
        expect.extend_from_slice(&[7u8; 300]);
        let (r, data, done) = decode_both(Decoder::new, &wire);
        assert_eq!(r, Ok(wire.len()));
        assert_eq!(data, expect);
        assert!(done);
    }

    #[test]
    fn display_texts() {
        assert_eq!(ChunkError::BadSizeLine.to_string(), "chunk size line is not hex");
        assert_eq!(ChunkError::SizeLineTooLong.to_string(), "chunk size line is too long");
        assert_eq!(ChunkError::MissingCrlf.to_string(), "chunk line does not end in CRLF");
    }
}

//! Appending short byte strings to a buffer without a call to `memcpy`.
//!
//! Why: rendering JSON appends a field name, a quote or an id at a time:
//! an echo task made ~370 such copies across the daemon and its worker,
//! most under 40 bytes. `Vec::extend_from_slice` of
//! a length known only at run time is a call to libc's `memcpy`, and musl's
//! copies with `rep movsq` after a byte loop to align, which costs tens of
//! nanoseconds however short the copy. On the per-task path that was the
//! daemon's largest single user-space cost (~10 µs of ~150 per task, Intel
//! Xeon). Here a copy of up to [`SHORT_BYTES`] (an id is 36) is made with
//! two fixed-size moves that overlap (the compiler makes each a load and a
//! store or two), and a longer one goes to `memcpy`, which is fast at
//! length.

use std::io;

/// The longest copy made here; anything longer goes to `memcpy`.
pub const SHORT_BYTES: usize = 64;

/// Appends `bytes` to `out`.
#[inline]
pub fn append(out: &mut Vec<u8>, bytes: &[u8]) {
    let n = bytes.len();
    // Without room for the fixed moves, the plain copy: the extension
    // below would grow a buffer sized to fit its answer (a large one
    // copied whole) for bytes it then cuts off.
    if n > SHORT_BYTES || out.capacity() - out.len() < SHORT_BYTES {
        out.extend_from_slice(bytes);
        return;
    }
    let at = out.len();
    // A constant-size extension: a capacity check and a few stores. The
    // bytes past `n` are cut off below.
    out.extend_from_slice(&[0; SHORT_BYTES]);
    let dst = &mut out[at..at + SHORT_BYTES];
    if n >= 32 {
        dst[..32].copy_from_slice(&bytes[..32]);
        dst[n - 32..n].copy_from_slice(&bytes[n - 32..]);
    } else if n >= 16 {
        dst[..16].copy_from_slice(&bytes[..16]);
        dst[n - 16..n].copy_from_slice(&bytes[n - 16..]);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&bytes[..8]);
        dst[n - 8..n].copy_from_slice(&bytes[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&bytes[..4]);
        dst[n - 4..n].copy_from_slice(&bytes[n - 4..]);
    } else if n > 0 {
        // One to three bytes: first, middle and last (some the same).
        dst[0] = bytes[0];
        dst[n / 2] = bytes[n / 2];
        dst[n - 1] = bytes[n - 1];
    }
    out.truncate(at + n);
}

/// A buffer as an [`io::Write`] whose writes go through [`append`]: what
/// serde_json and `write!` render into.
pub struct Appender<'a>(pub &'a mut Vec<u8>);

impl io::Write for Appender<'_> {
    #[inline]
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        append(self.0, buf);
        Ok(buf.len())
    }

    #[inline]
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        append(self.0, buf);
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_length_around_the_fixed_moves_appends_exactly_its_bytes() {
        let source: Vec<u8> = (0..100u8).map(|b| b.wrapping_mul(37).wrapping_add(11)).collect();
        for before in [0usize, 1, 7, 31] {
            for n in 0..=SHORT_BYTES + 6 {
                let mut out: Vec<u8> = vec![0xAA; before];
                append(&mut out, &source[3..3 + n]);
                assert_eq!(out.len(), before + n, "before {before}, n {n}");
                assert!(out[..before].iter().all(|&b| b == 0xAA), "before {before}, n {n}");
                assert_eq!(&out[before..], &source[3..3 + n], "before {before}, n {n}");
            }
        }
    }

    #[test]
    fn a_buffer_sized_to_fit_is_not_grown_for_the_fixed_moves() {
        for room in 0..=SHORT_BYTES + 1 {
            let mut out: Vec<u8> = Vec::with_capacity(100 + room);
            out.extend_from_slice(&[7; 100]);
            let capacity = out.capacity();
            append(&mut out, &b"abcdefghijklmnopqrstuvwxyz"[..room.min(26)]);
            assert_eq!(out.capacity(), capacity, "room {room}");
            assert_eq!(&out[100..], &b"abcdefghijklmnopqrstuvwxyz"[..room.min(26)]);
        }
    }

    #[test]
    fn serde_json_through_an_appender_writes_what_it_writes_to_a_vec() {
        let value = serde_json::json!({
            "id": "0b6c5e8e-8f3a-4a57-9d2b-1f0c2d3e4f50",
            "parts": [{"text": "hi \"there\"\n\u{1}"}, {"text": "x".repeat(100)}],
            "n": 12345,
        });
        let mut ours = b"prefix".to_vec();
        serde_json::to_writer(Appender(&mut ours), &value).unwrap();
        let mut theirs = b"prefix".to_vec();
        serde_json::to_writer(&mut theirs, &value).unwrap();
        assert_eq!(ours, theirs);
    }
}

//! Opaque identifiers for tasks, contexts, messages and artifacts: random
//! UUIDv4 text from the kernel's CSPRNG, so no client can guess another's.

use std::sync::atomic::{AtomicU64, Ordering};

/// A fresh random UUID (version 4) in its usual hyphenated form.
pub fn new_id() -> String {
    let mut b = [0u8; 16];
    if crate::sys::random_bytes(&mut b).is_err() {
        // getrandom cannot fail once the pool is initialised; if it somehow
        // does, stay unique (not unguessable) rather than fail a request.
        fallback_bytes(&mut b);
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    // By hand, not format!: ids are made several times per task.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(36);
    for (i, byte) in b.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            s.push('-');
        }
        s.push(char::from(HEX[usize::from(byte >> 4)]));
        s.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    s
}

fn fallback_bytes(b: &mut [u8; 16]) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let t = crate::clock::now_ms();
    b[..8].copy_from_slice(&t.to_be_bytes());
    b[8..].copy_from_slice(&(n ^ u64::from(std::process::id())).to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_v4_uuids_and_differ() {
        let a = new_id();
        let b = new_id();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
        let hyphens: Vec<usize> = a.match_indices('-').map(|(i, _)| i).collect();
        assert_eq!(hyphens, [8, 13, 18, 23]);
        assert!(a
            .chars()
            .all(|c| c == '-' || c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    }
}

//! memcpy, memmove and memcmp for the static build, in place of musl's.
//!
//! Why: musl's x86_64 memcpy copies the unaligned head and the tail one
//! `movsb` at a time around a `rep movsq`, and its memcmp is a byte loop.
//! On the servers we measure on (KVM, Xeon with ERMS and FSRM) a 5-byte
//! memcpy took 45 ns (glibc's: 3) and a 1000-byte memcmp 374 ns (glibc's:
//! 16). These are the plain, well-known shapes: registers for what fits in
//! four of them, `rep movsb` (fast since ERMS) above that, 8 bytes at a
//! time for comparisons.
//!
//! Always assembled on x86_64, under agentd's own names, so the unit tests
//! below check them on any x86_64 build; only the musl build also gives
//! them the C names, which the static link then takes instead of libc.a's.
//! The System V ABI guarantees what they rely on: the direction flag is
//! clear on entry, and rax, rcx, rdx, rsi, rdi, r8–r11 and xmm0–xmm15 are
//! the caller's to lose.

#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".text",
    // void *agentd_memcpy(void *dst, const void *src, size_t n): every size
    // up to 64 loads all of it before storing any, so it is also a correct
    // memmove for those sizes (agentd_memmove relies on it).
    ".globl agentd_memcpy",
    ".type agentd_memcpy,@function",
    ".p2align 4",
    "agentd_memcpy:",
    "    mov rax, rdi",
    "    cmp rdx, 16",
    "    ja 6f",
    "    cmp rdx, 8",
    "    jae 5f",
    "    cmp rdx, 4",
    "    jae 4f",
    "    test rdx, rdx",
    "    jz 3f",
    // 1 to 3 bytes: the first, the middle and the last (some coincide).
    "    movzx ecx, byte ptr [rsi]",
    "    movzx r8d, byte ptr [rsi + rdx - 1]",
    "    mov r9, rdx",
    "    shr r9, 1",
    "    movzx r10d, byte ptr [rsi + r9]",
    "    mov byte ptr [rdi], cl",
    "    mov byte ptr [rdi + r9], r10b",
    "    mov byte ptr [rdi + rdx - 1], r8b",
    "3:  ret",
    // 4 to 7, and 8 to 16: two overlapping words.
    "4:  mov ecx, dword ptr [rsi]",
    "    mov r8d, dword ptr [rsi + rdx - 4]",
    "    mov dword ptr [rdi], ecx",
    "    mov dword ptr [rdi + rdx - 4], r8d",
    "    ret",
    "5:  mov rcx, qword ptr [rsi]",
    "    mov r8, qword ptr [rsi + rdx - 8]",
    "    mov qword ptr [rdi], rcx",
    "    mov qword ptr [rdi + rdx - 8], r8",
    "    ret",
    // 17 to 32: two overlapping 16-byte loads; 33 to 64: four.
    "6:  cmp rdx, 32",
    "    ja 7f",
    "    movdqu xmm0, xmmword ptr [rsi]",
    "    movdqu xmm1, xmmword ptr [rsi + rdx - 16]",
    "    movdqu xmmword ptr [rdi], xmm0",
    "    movdqu xmmword ptr [rdi + rdx - 16], xmm1",
    "    ret",
    "7:  cmp rdx, 64",
    "    ja 8f",
    "    movdqu xmm0, xmmword ptr [rsi]",
    "    movdqu xmm1, xmmword ptr [rsi + 16]",
    "    movdqu xmm2, xmmword ptr [rsi + rdx - 32]",
    "    movdqu xmm3, xmmword ptr [rsi + rdx - 16]",
    "    movdqu xmmword ptr [rdi], xmm0",
    "    movdqu xmmword ptr [rdi + 16], xmm1",
    "    movdqu xmmword ptr [rdi + rdx - 32], xmm2",
    "    movdqu xmmword ptr [rdi + rdx - 16], xmm3",
    "    ret",
    "8:  mov rcx, rdx",
    "    rep movsb",
    "    ret",
    ".size agentd_memcpy, . - agentd_memcpy",
    // void *agentd_memmove(void *dst, const void *src, size_t n)
    ".globl agentd_memmove",
    ".type agentd_memmove,@function",
    ".p2align 4",
    "agentd_memmove:",
    // dst - src >= n (unsigned) means dst is below src or past its end: a
    // forward copy never reads what it already wrote.
    "    mov rcx, rdi",
    "    sub rcx, rsi",
    "    cmp rcx, rdx",
    "    jae agentd_memcpy",
    "    cmp rdx, 64",
    "    jbe agentd_memcpy",
    // dst overlaps src from above, more than 64 bytes: 16 at a time from
    // the end down; the first 16, read before any store, go last.
    "    mov rax, rdi",
    "    movdqu xmm1, xmmword ptr [rsi]",
    "    add rsi, rdx",
    "    add rdi, rdx",
    "2:  sub rsi, 16",
    "    sub rdi, 16",
    "    movdqu xmm0, xmmword ptr [rsi]",
    "    movdqu xmmword ptr [rdi], xmm0",
    "    sub rdx, 16",
    "    cmp rdx, 16",
    "    ja 2b",
    "    movdqu xmmword ptr [rax], xmm1",
    "    ret",
    ".size agentd_memmove, . - agentd_memmove",
    // int agentd_memcmp(const void *a, const void *b, size_t n): 8 bytes at
    // a time; the first word that differs, byte-swapped, orders them.
    ".globl agentd_memcmp",
    ".type agentd_memcmp,@function",
    ".p2align 4",
    "agentd_memcmp:",
    "    xor eax, eax",
    "    cmp rdx, 8",
    "    jb 3f",
    "2:  mov rcx, qword ptr [rdi]",
    "    mov r8, qword ptr [rsi]",
    "    cmp rcx, r8",
    "    jne 5f",
    "    add rdi, 8",
    "    add rsi, 8",
    "    sub rdx, 8",
    "    cmp rdx, 8",
    "    jae 2b",
    "3:  test rdx, rdx",
    "    jz 4f",
    "    movzx ecx, byte ptr [rdi]",
    "    movzx r8d, byte ptr [rsi]",
    "    sub ecx, r8d",
    "    jnz 6f",
    "    inc rdi",
    "    inc rsi",
    "    dec rdx",
    "    jmp 3b",
    "4:  ret",
    "5:  bswap rcx",
    "    bswap r8",
    "    cmp rcx, r8",
    "    sbb eax, eax",
    "    or eax, 1",
    "    ret",
    "6:  mov eax, ecx",
    "    ret",
    ".size agentd_memcmp, . - agentd_memcmp",
);

// The C names, for the static musl build only: glibc's are better than
// these, and a dynamic build has no business interposing them.
#[cfg(all(target_arch = "x86_64", target_env = "musl"))]
std::arch::global_asm!(
    ".globl memcpy",
    ".type memcpy,@function",
    ".set memcpy, agentd_memcpy",
    ".globl memmove",
    ".type memmove,@function",
    ".set memmove, agentd_memmove",
    ".globl memcmp",
    ".type memcmp,@function",
    ".set memcmp, agentd_memcmp",
    // bcmp is memcmp with a weaker promise (zero or not): the same code.
    ".globl bcmp",
    ".type bcmp,@function",
    ".set bcmp, agentd_memcmp",
);

/// The references these are checked against are the C library's: the
/// tests are meant for the default (glibc) target, as `cargo test` runs.
#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    unsafe extern "C" {
        fn agentd_memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8;
        fn agentd_memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8;
        fn agentd_memcmp(a: *const u8, b: *const u8, n: usize) -> i32;
    }

    const SIZES: std::ops::Range<usize> = 0..300;

    /// A pattern with no period short enough to hide a misplaced byte.
    fn pattern(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
            .collect()
    }

    #[test]
    fn memcpy_copies_every_size_at_every_alignment_and_touches_nothing_else() {
        for n in SIZES.chain([1000, 4096, 4097]) {
            let src = pattern(n + 16, 7);
            for (s_off, d_off) in [(0, 0), (1, 0), (0, 3), (5, 9), (15, 1), (8, 8)] {
                let mut dst = vec![0xAAu8; n + 64];
                // SAFETY: both ranges are inside their buffers and do not overlap.
                let ret = unsafe { agentd_memcpy(dst.as_mut_ptr().add(d_off), src.as_ptr().add(s_off), n) };
                assert_eq!(ret, dst.as_mut_ptr().wrapping_add(d_off), "returns dst");
                assert_eq!(
                    &dst[d_off..d_off + n],
                    &src[s_off..s_off + n],
                    "n={n} s+{s_off} d+{d_off}"
                );
                assert!(dst[..d_off].iter().all(|&b| b == 0xAA), "wrote before dst: n={n}");
                assert!(dst[d_off + n..].iter().all(|&b| b == 0xAA), "wrote past dst: n={n}");
            }
        }
    }

    #[test]
    fn memmove_is_right_for_every_overlap_in_both_directions() {
        for n in SIZES.chain([1000, 4097]) {
            for shift in [1usize, 2, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 200] {
                let buf = pattern(n + shift + 16, 3);
                // dst above src (the backward path), then below it.
                for up in [true, false] {
                    let mut got = buf.clone();
                    let (s, d) = if up { (0, shift) } else { (shift, 0) };
                    let mut want = buf.clone();
                    want.copy_within(s..s + n, d);
                    // SAFETY: both ranges are inside `got`; memmove allows overlap.
                    let ret = unsafe { agentd_memmove(got.as_mut_ptr().add(d), got.as_ptr().add(s), n) };
                    assert_eq!(ret, got.as_mut_ptr().wrapping_add(d), "returns dst");
                    assert!(got == want, "memmove n={n} shift={shift} up={up}");
                }
            }
        }
    }

    #[test]
    fn memcmp_orders_by_the_first_differing_byte_as_unsigned() {
        for n in 0..80usize {
            let (a, b) = (pattern(n, 11), pattern(n, 11));
            // SAFETY: both buffers hold n bytes.
            let same = unsafe { agentd_memcmp(a.as_ptr(), b.as_ptr(), n) };
            assert_eq!(same, 0, "equal, n={n}");
            for at in 0..n {
                for (x, y) in [(0x00u8, 0xFFu8), (0x7F, 0x80), (5, 6)] {
                    let (mut p, mut q) = (a.clone(), a.clone());
                    p[at] = x;
                    q[at] = y;
                    // Later bytes ordered the other way must not count.
                    if at + 1 < n {
                        p[at + 1] = 0xFF;
                        q[at + 1] = 0;
                    }
                    // SAFETY: both buffers hold n bytes.
                    let (lt, gt) = unsafe {
                        (
                            agentd_memcmp(p.as_ptr(), q.as_ptr(), n),
                            agentd_memcmp(q.as_ptr(), p.as_ptr(), n),
                        )
                    };
                    assert!(lt < 0 && gt > 0, "n={n} at={at} {x:#x} vs {y:#x}: {lt} {gt}");
                }
            }
        }
    }
}

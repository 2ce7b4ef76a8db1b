//! Carry-less-multiply folding (Intel, "Fast CRC Computation for Generic
//! Polynomials Using PCLMULQDQ"), written once for reflected and natural bit
//! order and for 128- and 256-bit vectors.
//!
//! Invariant: an accumulator is a 128-bit chunk that is congruent (mod G) to
//! all data folded so far, positioned at the end of the bytes it covers.
//! `fold(acc, key_D)` moves it forward by D bits; XORing the chunk found there
//! keeps the invariant. At the end one 128-bit chunk remains, and the CRC
//! register is that chunk run through the CRC from a zero register.

// The bodies are intrinsics inside `#[target_feature]` functions whose
// safety contract (CPU support, in-bounds pointers) is stated once per function.
#![allow(unsafe_op_in_unsafe_fn)]

use crate::crc::spec::{Algorithm, FoldKey, FoldKeys, Spec};
use core::arch::x86_64::*;

/// Reverses the 16 bytes of a lane: natural (MSB-first) CRCs see the first
/// data byte as the most significant.
pub(super) const BYTE_REVERSE: [u8; 16] = [15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0];

#[inline(always)]
pub(super) unsafe fn key128(k: &FoldKey) -> __m128i {
    _mm_set_epi64x(k[1] as i64, k[0] as i64)
}

#[inline(always)]
pub(super) unsafe fn fold128(acc: __m128i, key: __m128i) -> __m128i {
    _mm_xor_si128(_mm_clmulepi64_si128(acc, key, 0x00), _mm_clmulepi64_si128(acc, key, 0x11))
}

#[inline(always)]
pub(super) unsafe fn load128<const REFLECTED: bool>(p: *const u8) -> __m128i {
    // SAFETY (caller): p..p+16 is inside the input slice.
    let v = _mm_loadu_si128(p.cast());
    if REFLECTED {
        v
    } else {
        _mm_shuffle_epi8(v, _mm_loadu_si128(BYTE_REVERSE.as_ptr().cast()))
    }
}

/// The register placed where it acts: over the first `width` message bits.
#[inline(always)]
pub(super) unsafe fn inject<const REFLECTED: bool>(spec: &Spec, state: u64) -> __m128i {
    if REFLECTED {
        _mm_set_epi64x(0, state as i64)
    } else {
        _mm_set_epi64x((state << (64 - spec.width)) as i64, 0)
    }
}

/// CRC register of the final 128-bit chunk (from a zero register).
#[inline(always)]
pub(super) unsafe fn reduce128<const REFLECTED: bool>(spec: &Spec, x: __m128i) -> u64 {
    if spec.algorithm == Algorithm::Crc32c {
        let lo = _mm_cvtsi128_si64(x) as u64;
        let hi = _mm_extract_epi64(x, 1) as u64;
        return _mm_crc32_u64(_mm_crc32_u64(0, lo), hi);
    }
    let in_memory_order =
        if REFLECTED { x } else { _mm_shuffle_epi8(x, _mm_loadu_si128(BYTE_REVERSE.as_ptr().cast())) };
    let mut bytes = [0u8; 16];
    _mm_storeu_si128(bytes.as_mut_ptr().cast(), in_memory_order);
    block16_from_zero(spec, &bytes)
}

/// The slicing-by-16 step, kept out of line: inlined into an AVX-512
/// kernel, LLVM turns its sixteen table loads into VPGATHERQQ, which made
/// the whole 64-byte CRC64 call 1.6x slower on AMD Zen 4.
#[inline(never)]
fn block16_from_zero(spec: &Spec, bytes: &[u8; 16]) -> u64 {
    spec.update_block16(0, bytes)
}

/// Four consecutive 16-byte lanes into the last one, in parallel:
/// distances 48, 32, 16 bytes.
#[inline(always)]
pub(super) unsafe fn fold4_into_last(keys: &FoldKeys, [x0, x1, x2, x3]: [__m128i; 4]) -> __m128i {
    _mm_xor_si128(
        _mm_xor_si128(fold128(x0, key128(&keys.k384)), fold128(x1, key128(&keys.k256))),
        _mm_xor_si128(fold128(x2, key128(&keys.k128)), x3),
    )
}

/// Folds `data` (a non-empty multiple of 16 bytes) with 128-bit vectors.
#[inline(always)]
pub(super) unsafe fn fold_128<const REFLECTED: bool>(spec: &Spec, state: u64, data: &[u8]) -> u64 {
    debug_assert!(!data.is_empty() && data.len().is_multiple_of(16));
    let keys = &spec.fold;
    let mut p = data.as_ptr();
    let mut left = data.len();
    let mut x;
    if left >= 64 {
        let mut x0 = _mm_xor_si128(load128::<REFLECTED>(p), inject::<REFLECTED>(spec, state));
        let mut x1 = load128::<REFLECTED>(p.add(16));
        let mut x2 = load128::<REFLECTED>(p.add(32));
        let mut x3 = load128::<REFLECTED>(p.add(48));
        p = p.add(64);
        left -= 64;
        let k512 = key128(&keys.k512);
        if left >= 192 {
            // Eight lanes, 128 bytes per step: more products in flight.
            let mut x4 = load128::<REFLECTED>(p);
            let mut x5 = load128::<REFLECTED>(p.add(16));
            let mut x6 = load128::<REFLECTED>(p.add(32));
            let mut x7 = load128::<REFLECTED>(p.add(48));
            p = p.add(64);
            left -= 64;
            let k1024 = key128(&keys.k1024);
            while left >= 128 {
                x0 = _mm_xor_si128(fold128(x0, k1024), load128::<REFLECTED>(p));
                x1 = _mm_xor_si128(fold128(x1, k1024), load128::<REFLECTED>(p.add(16)));
                x2 = _mm_xor_si128(fold128(x2, k1024), load128::<REFLECTED>(p.add(32)));
                x3 = _mm_xor_si128(fold128(x3, k1024), load128::<REFLECTED>(p.add(48)));
                x4 = _mm_xor_si128(fold128(x4, k1024), load128::<REFLECTED>(p.add(64)));
                x5 = _mm_xor_si128(fold128(x5, k1024), load128::<REFLECTED>(p.add(80)));
                x6 = _mm_xor_si128(fold128(x6, k1024), load128::<REFLECTED>(p.add(96)));
                x7 = _mm_xor_si128(fold128(x7, k1024), load128::<REFLECTED>(p.add(112)));
                p = p.add(128);
                left -= 128;
            }
            // The first four lanes onto the last four (64 bytes on).
            x0 = _mm_xor_si128(fold128(x0, k512), x4);
            x1 = _mm_xor_si128(fold128(x1, k512), x5);
            x2 = _mm_xor_si128(fold128(x2, k512), x6);
            x3 = _mm_xor_si128(fold128(x3, k512), x7);
        }
        while left >= 64 {
            x0 = _mm_xor_si128(fold128(x0, k512), load128::<REFLECTED>(p));
            x1 = _mm_xor_si128(fold128(x1, k512), load128::<REFLECTED>(p.add(16)));
            x2 = _mm_xor_si128(fold128(x2, k512), load128::<REFLECTED>(p.add(32)));
            x3 = _mm_xor_si128(fold128(x3, k512), load128::<REFLECTED>(p.add(48)));
            p = p.add(64);
            left -= 64;
        }
        x = fold4_into_last(keys, [x0, x1, x2, x3]);
    } else {
        x = _mm_xor_si128(load128::<REFLECTED>(p), inject::<REFLECTED>(spec, state));
        p = p.add(16);
        left -= 16;
    }
    let k128 = key128(&keys.k128);
    while left >= 16 {
        x = _mm_xor_si128(fold128(x, k128), load128::<REFLECTED>(p));
        p = p.add(16);
        left -= 16;
    }
    reduce128::<REFLECTED>(spec, x)
}

#[inline(always)]
unsafe fn key256(k: &FoldKey) -> __m256i {
    _mm256_broadcastsi128_si256(key128(k))
}

#[inline(always)]
unsafe fn fold256(acc: __m256i, key: __m256i) -> __m256i {
    _mm256_xor_si256(_mm256_clmulepi64_epi128(acc, key, 0x00), _mm256_clmulepi64_epi128(acc, key, 0x11))
}

#[inline(always)]
unsafe fn load256<const REFLECTED: bool>(p: *const u8) -> __m256i {
    // SAFETY (caller): p..p+32 is inside the input slice.
    let v = _mm256_loadu_si256(p.cast());
    if REFLECTED {
        v
    } else {
        let reverse = _mm256_broadcastsi128_si256(_mm_loadu_si128(BYTE_REVERSE.as_ptr().cast()));
        _mm256_shuffle_epi8(v, reverse)
    }
}

/// Folds `data` (a multiple of 16 bytes, at least 256) with 256-bit vectors:
/// each accumulator holds two consecutive 16-byte chunks.
#[inline(always)]
pub(super) unsafe fn fold_256<const REFLECTED: bool>(spec: &Spec, state: u64, data: &[u8]) -> u64 {
    debug_assert!(data.len() >= 256 && data.len().is_multiple_of(16));
    let keys = &spec.fold;
    let mut p = data.as_ptr();
    let mut left = data.len();
    let first = _mm256_set_m128i(_mm_setzero_si128(), inject::<REFLECTED>(spec, state));
    let mut y0 = _mm256_xor_si256(load256::<REFLECTED>(p), first);
    let mut y1 = load256::<REFLECTED>(p.add(32));
    let mut y2 = load256::<REFLECTED>(p.add(64));
    let mut y3 = load256::<REFLECTED>(p.add(96));
    p = p.add(128);
    left -= 128;
    let k1024 = key256(&keys.k1024);
    while left >= 128 {
        y0 = _mm256_xor_si256(fold256(y0, k1024), load256::<REFLECTED>(p));
        y1 = _mm256_xor_si256(fold256(y1, k1024), load256::<REFLECTED>(p.add(32)));
        y2 = _mm256_xor_si256(fold256(y2, k1024), load256::<REFLECTED>(p.add(64)));
        y3 = _mm256_xor_si256(fold256(y3, k1024), load256::<REFLECTED>(p.add(96)));
        p = p.add(128);
        left -= 128;
    }
    // Four accumulators into the last, in parallel: distances 96, 64, 32 bytes.
    let y = _mm256_xor_si256(
        _mm256_xor_si256(fold256(y0, key256(&keys.k768)), fold256(y1, key256(&keys.k512))),
        _mm256_xor_si256(fold256(y2, key256(&keys.k256)), y3),
    );
    // Its two lanes into one: the low lane is 16 bytes before the high lane.
    let k128 = key128(&keys.k128);
    let mut x = _mm_xor_si128(fold128(_mm256_castsi256_si128(y), k128), _mm256_extracti128_si256(y, 1));
    while left >= 16 {
        x = _mm_xor_si128(fold128(x, k128), load128::<REFLECTED>(p));
        p = p.add(16);
        left -= 16;
    }
    reduce128::<REFLECTED>(spec, x)
}

//! Carry-less-multiply folding (Intel, "Fast CRC Computation for Generic
//! Polynomials Using PCLMULQDQ"), written once for reflected and natural bit
//! order and for 128- and 256-bit vectors.
//!
//! Invariant: an accumulator is a 128-bit chunk that is congruent (mod G) to
//! all data folded so far, positioned at the end of the bytes it covers.
//! `fold(acc, key_D)` moves it forward by D bits; XORing the chunk found there
//! keeps the invariant. At the end one 128-bit chunk remains, and the CRC
//! register is that chunk run through the CRC from a zero register.

// Every function here is safe with `#[target_feature]`: the intrinsics
// inside are safe to call under those features, and the callers (the
// kernels, entered only through `Kernel` pointers of available backends)
// carry them. The only `unsafe` is each load's: it reads exactly the array
// it is given.

use crate::crc::spec::{Algorithm, FoldKey, FoldKeys, Spec};
use core::arch::x86_64::*;

/// Reverses the 16 bytes of a lane: natural (MSB-first) CRCs see the first
/// data byte as the most significant.
pub(super) const BYTE_REVERSE: [u8; 16] = [15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0];

#[inline]
#[target_feature(enable = "sse2")]
pub(super) fn key128(k: &FoldKey) -> __m128i {
    _mm_set_epi64x(k[1] as i64, k[0] as i64)
}

#[inline]
#[target_feature(enable = "sse2,pclmulqdq")]
pub(super) fn fold128(acc: __m128i, key: __m128i) -> __m128i {
    _mm_xor_si128(_mm_clmulepi64_si128(acc, key, 0x00), _mm_clmulepi64_si128(acc, key, 0x11))
}

/// The 16 bytes of `b` as a vector (unaligned).
#[inline]
#[target_feature(enable = "sse2")]
pub(super) fn load(b: &[u8; 16]) -> __m128i {
    // SAFETY: reads the 16 bytes of `b`, which the reference keeps alive.
    unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
}

/// A 16-byte lane of the message, in the CRC's bit order.
#[inline]
#[target_feature(enable = "sse2,ssse3")]
pub(super) fn load128<const REFLECTED: bool>(b: &[u8; 16]) -> __m128i {
    let v = load(b);
    if REFLECTED {
        v
    } else {
        _mm_shuffle_epi8(v, load(&BYTE_REVERSE))
    }
}

/// The register placed where it acts: over the first `width` message bits.
#[inline]
#[target_feature(enable = "sse2")]
pub(super) fn inject<const REFLECTED: bool>(spec: &Spec, state: u64) -> __m128i {
    if REFLECTED {
        _mm_set_epi64x(0, state as i64)
    } else {
        _mm_set_epi64x((state << (64 - spec.width)) as i64, 0)
    }
}

/// CRC register of the final 128-bit chunk (from a zero register).
#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2")]
pub(super) fn reduce128<const REFLECTED: bool>(spec: &Spec, x: __m128i) -> u64 {
    if spec.algorithm == Algorithm::Crc32c {
        let lo = _mm_cvtsi128_si64(x) as u64;
        let hi = _mm_extract_epi64(x, 1) as u64;
        return _mm_crc32_u64(_mm_crc32_u64(0, lo), hi);
    }
    let in_memory_order = if REFLECTED { x } else { _mm_shuffle_epi8(x, load(&BYTE_REVERSE)) };
    let mut bytes = [0u8; 16];
    // SAFETY: writes the 16 bytes of `bytes`.
    unsafe { _mm_storeu_si128(bytes.as_mut_ptr().cast(), in_memory_order) };
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
#[inline]
#[target_feature(enable = "sse2,pclmulqdq")]
pub(super) fn fold4_into_last(keys: &FoldKeys, [x0, x1, x2, x3]: [__m128i; 4]) -> __m128i {
    _mm_xor_si128(
        _mm_xor_si128(fold128(x0, key128(&keys.k384)), fold128(x1, key128(&keys.k256))),
        _mm_xor_si128(fold128(x2, key128(&keys.k128)), x3),
    )
}

/// Folds `data` (a non-empty multiple of 16 bytes) of algorithm `A` with
/// 128-bit vectors. `KERNEL` (the caller's number) only makes one instance
/// per caller.
#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq")]
pub(super) fn fold_128<const A: usize, const KERNEL: usize>(state: u64, data: &[u8]) -> u64 {
    super::with_static_spec!(Algorithm::ALL[A], |spec| if spec.reflected {
        fold_128_in::<true, A, KERNEL>(spec, state, data)
    } else {
        fold_128_in::<false, A, KERNEL>(spec, state, data)
    })
}

/// [`fold_128`] in the CRC's bit order (`A` and `KERNEL` again only keep one
/// caller per instance).
#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq")]
fn fold_128_in<const REFLECTED: bool, const A: usize, const KERNEL: usize>(
    spec: &Spec,
    state: u64,
    data: &[u8],
) -> u64 {
    let (lanes, rest) = data.as_chunks::<16>();
    debug_assert!(!lanes.is_empty() && rest.is_empty());
    let keys = &spec.fold;
    let load = load128::<REFLECTED>;
    let (mut x, lanes) = if let Some((first, lanes)) = lanes.split_first_chunk::<4>() {
        let mut x0 = _mm_xor_si128(load(&first[0]), inject::<REFLECTED>(spec, state));
        let [mut x1, mut x2, mut x3] = [load(&first[1]), load(&first[2]), load(&first[3])];
        let k512 = key128(&keys.k512);
        let mut lanes = lanes;
        if let Some((second, rest)) = lanes.split_first_chunk::<4>().filter(|(_, rest)| rest.len() >= 8) {
            // Eight lanes, 128 bytes per step: more products in flight.
            let [mut x4, mut x5, mut x6, mut x7] = second.each_ref().map(|lane| load(lane));
            let k1024 = key128(&keys.k1024);
            let (steps, rest) = rest.as_chunks::<8>();
            for s in steps {
                x0 = _mm_xor_si128(fold128(x0, k1024), load(&s[0]));
                x1 = _mm_xor_si128(fold128(x1, k1024), load(&s[1]));
                x2 = _mm_xor_si128(fold128(x2, k1024), load(&s[2]));
                x3 = _mm_xor_si128(fold128(x3, k1024), load(&s[3]));
                x4 = _mm_xor_si128(fold128(x4, k1024), load(&s[4]));
                x5 = _mm_xor_si128(fold128(x5, k1024), load(&s[5]));
                x6 = _mm_xor_si128(fold128(x6, k1024), load(&s[6]));
                x7 = _mm_xor_si128(fold128(x7, k1024), load(&s[7]));
            }
            // The first four lanes onto the last four (64 bytes on).
            x0 = _mm_xor_si128(fold128(x0, k512), x4);
            x1 = _mm_xor_si128(fold128(x1, k512), x5);
            x2 = _mm_xor_si128(fold128(x2, k512), x6);
            x3 = _mm_xor_si128(fold128(x3, k512), x7);
            lanes = rest;
        }
        let (steps, rest) = lanes.as_chunks::<4>();
        for s in steps {
            x0 = _mm_xor_si128(fold128(x0, k512), load(&s[0]));
            x1 = _mm_xor_si128(fold128(x1, k512), load(&s[1]));
            x2 = _mm_xor_si128(fold128(x2, k512), load(&s[2]));
            x3 = _mm_xor_si128(fold128(x3, k512), load(&s[3]));
        }
        (fold4_into_last(keys, [x0, x1, x2, x3]), rest)
    } else {
        let (first, lanes) = lanes.split_first().expect("at least one lane");
        (_mm_xor_si128(load(first), inject::<REFLECTED>(spec, state)), lanes)
    };
    let k128 = key128(&keys.k128);
    for lane in lanes {
        x = _mm_xor_si128(fold128(x, k128), load(lane));
    }
    reduce128::<REFLECTED>(spec, x)
}

#[inline]
#[target_feature(enable = "avx2")]
fn key256(k: &FoldKey) -> __m256i {
    _mm256_broadcastsi128_si256(key128(k))
}

#[inline]
#[target_feature(enable = "avx2,vpclmulqdq")]
fn fold256(acc: __m256i, key: __m256i) -> __m256i {
    _mm256_xor_si256(_mm256_clmulepi64_epi128(acc, key, 0x00), _mm256_clmulepi64_epi128(acc, key, 0x11))
}

/// A 32-byte pair of message lanes, in the CRC's bit order.
#[inline]
#[target_feature(enable = "avx2")]
fn load256<const REFLECTED: bool>(b: &[u8; 32]) -> __m256i {
    // SAFETY: reads the 32 bytes of `b`.
    let v = unsafe { _mm256_loadu_si256(b.as_ptr().cast()) };
    if REFLECTED {
        v
    } else {
        _mm256_shuffle_epi8(v, _mm256_broadcastsi128_si256(load(&BYTE_REVERSE)))
    }
}

/// One 128-byte step as four 32-byte vectors.
#[inline]
#[target_feature(enable = "avx2")]
fn load256x4<const REFLECTED: bool>(step: &[u8; 128]) -> [__m256i; 4] {
    let (p, _) = step.as_chunks::<32>();
    [load256::<REFLECTED>(&p[0]), load256::<REFLECTED>(&p[1]), load256::<REFLECTED>(&p[2]), load256::<REFLECTED>(&p[3])]
}

/// Folds `data` (a multiple of 16 bytes, at least 256) with 256-bit vectors:
/// each accumulator holds two consecutive 16-byte chunks.
#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq,avx2,vpclmulqdq")]
pub(super) fn fold_256<const REFLECTED: bool>(spec: &Spec, state: u64, data: &[u8]) -> u64 {
    debug_assert!(data.len() >= 256 && data.len().is_multiple_of(16));
    let keys = &spec.fold;
    let (steps, rest) = data.as_chunks::<128>();
    let (first, steps) = steps.split_first().expect("at least 128 bytes");
    let pairs = load256x4::<REFLECTED>;
    let [y0, mut y1, mut y2, mut y3] = pairs(first);
    let mut y0 = _mm256_xor_si256(y0, _mm256_set_m128i(_mm_setzero_si128(), inject::<REFLECTED>(spec, state)));
    let k1024 = key256(&keys.k1024);
    for s in steps {
        let [d0, d1, d2, d3] = pairs(s);
        y0 = _mm256_xor_si256(fold256(y0, k1024), d0);
        y1 = _mm256_xor_si256(fold256(y1, k1024), d1);
        y2 = _mm256_xor_si256(fold256(y2, k1024), d2);
        y3 = _mm256_xor_si256(fold256(y3, k1024), d3);
    }
    // Four accumulators into the last, in parallel: distances 96, 64, 32 bytes.
    let y = _mm256_xor_si256(
        _mm256_xor_si256(fold256(y0, key256(&keys.k768)), fold256(y1, key256(&keys.k512))),
        _mm256_xor_si256(fold256(y2, key256(&keys.k256)), y3),
    );
    // Its two lanes into one: the low lane is 16 bytes before the high lane.
    let k128 = key128(&keys.k128);
    let mut x = _mm_xor_si128(fold128(_mm256_castsi256_si128(y), k128), _mm256_extracti128_si256(y, 1));
    let (lanes, _) = rest.as_chunks::<16>();
    for lane in lanes {
        x = _mm_xor_si128(fold128(x, k128), load128::<REFLECTED>(lane));
    }
    reduce128::<REFLECTED>(spec, x)
}

//! 512-bit VPCLMULQDQ folding (AVX-512F/VL/BW): four ZMM accumulators of
//! four 16-byte lanes each, 256 bytes per step, VPTERNLOGQ for the three-way
//! XOR of the two products and the next data. The same algorithm and
//! invariant as `fold.rs` (an accumulator is congruent to everything folded
//! so far, positioned at the end of the bytes it covers), wider.
//!
//! Also the partial last chunk in vector registers (`fold_partial`): the
//! 128-bit kernels leave up to 15 bytes to the tables, one byte per step.

// Safe `#[target_feature]` functions, as in `fold.rs`; the loads' and
// stores' `unsafe` covers exactly the array each is given.

use super::fold::{fold128, inject, key128, load, load128, BYTE_REVERSE};
use crate::crc::spec::{FoldKey, Spec};
use core::arch::x86_64::*;

/// Bytes per step of the four-accumulator loop.
pub(super) const STEP_BYTES: usize = 256;

#[inline]
#[target_feature(enable = "avx512f")]
fn key512(k: &FoldKey) -> __m512i {
    _mm512_broadcast_i32x4(key128(k))
}

/// `acc` moved forward by the key's distance, XORed with `next`.
#[inline]
#[target_feature(enable = "avx512f,vpclmulqdq")]
pub(super) fn fold512(acc: __m512i, key: __m512i, next: __m512i) -> __m512i {
    _mm512_ternarylogic_epi64(
        _mm512_clmulepi64_epi128(acc, key, 0x00),
        _mm512_clmulepi64_epi128(acc, key, 0x11),
        next,
        0x96,
    )
}

/// Four message lanes, in the CRC's bit order.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
pub(super) fn load512<const REFLECTED: bool>(b: &[u8; 64]) -> __m512i {
    // SAFETY: reads the 64 bytes of `b`.
    let v = unsafe { _mm512_loadu_si512(b.as_ptr().cast()) };
    if REFLECTED {
        v
    } else {
        _mm512_shuffle_epi8(v, _mm512_broadcast_i32x4(load(&BYTE_REVERSE)))
    }
}

/// One 256-byte step as four 64-byte vectors.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
fn load512x4<const REFLECTED: bool>(step: &[u8; STEP_BYTES]) -> [__m512i; 4] {
    let (q, _) = step.as_chunks::<64>();
    [load512::<REFLECTED>(&q[0]), load512::<REFLECTED>(&q[1]), load512::<REFLECTED>(&q[2]), load512::<REFLECTED>(&q[3])]
}

/// Four 16-byte lanes into the last one: distances 48, 32, 16 bytes, the
/// last lane as it is (its key is zero, so its products vanish).
#[inline]
#[target_feature(enable = "avx512f,avx512vl,vpclmulqdq")]
pub(super) fn lanes_into_last(spec: &Spec, z: __m512i) -> __m128i {
    let k = &spec.fold;
    let keys = _mm512_set_epi64(
        0,
        0,
        k.k128[1] as i64,
        k.k128[0] as i64,
        k.k256[1] as i64,
        k.k256[0] as i64,
        k.k384[1] as i64,
        k.k384[0] as i64,
    );
    let t = fold512(z, keys, _mm512_maskz_mov_epi64(0b1100_0000, z));
    let y = _mm256_xor_si256(_mm512_castsi512_si256(t), _mm512_extracti64x4_epi64(t, 1));
    _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1))
}

/// Folds the first `16 * floor(len / 16)` bytes of `data` (at least 64)
/// with the register `state` injected, and returns the 128-bit chunk left
/// at their end.
#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq,avx2,vpclmulqdq,avx512f,avx512vl,avx512bw")]
pub(super) fn fold_to_128<const REFLECTED: bool>(spec: &Spec, state: u64, data: &[u8]) -> __m128i {
    debug_assert!(data.len() >= 64);
    let keys = &spec.fold;
    let first = _mm512_zextsi128_si512(inject::<REFLECTED>(spec, state));
    let k512 = key512(&keys.k512);
    let (steps, rest) = data.as_chunks::<STEP_BYTES>();
    let (mut z, rest) = if let Some((head, steps)) = steps.split_first() {
        let [z0, mut z1, mut z2, mut z3] = load512x4::<REFLECTED>(head);
        let mut z0 = _mm512_xor_si512(z0, first);
        let k2048 = key512(&keys.k2048);
        for s in steps {
            let [d0, d1, d2, d3] = load512x4::<REFLECTED>(s);
            z0 = fold512(z0, k2048, d0);
            z1 = fold512(z1, k2048, d1);
            z2 = fold512(z2, k2048, d2);
            z3 = fold512(z3, k2048, d3);
        }
        // Into the last accumulator: distances 192, 128, 64 bytes. The
        // products are independent; only the XORs chain.
        (fold512(z0, key512(&keys.k1536), fold512(z1, key512(&keys.k1024), fold512(z2, k512, z3))), rest)
    } else {
        let (head, rest) = rest.split_first_chunk::<64>().expect("at least 64 bytes");
        (_mm512_xor_si512(load512::<REFLECTED>(head), first), rest)
    };
    let (quads, rest) = rest.as_chunks::<64>();
    for q in quads {
        z = fold512(z, k512, load512::<REFLECTED>(q));
    }
    let mut x = lanes_into_last(spec, z);
    let k128 = key128(&keys.k128);
    let (lanes, _) = rest.as_chunks::<16>();
    for lane in lanes {
        x = _mm_xor_si128(fold128(x, k128), load128::<REFLECTED>(lane));
    }
    x
}

/// `[0x80; 16]` then `0..16`: the 16 PSHUFB indices from offset `r` move
/// byte `j` of a vector to `j + 16 - r` and zero the bytes below.
const SHIFT_UP: [u8; 32] = {
    let mut t = [0x80u8; 32];
    let mut i = 0;
    while i < 16 {
        t[16 + i] = i as u8;
        i += 1;
    }
    t
};
/// `0..16` then `[0x80; 16]`: the indices from offset `r` move byte `j` to
/// `j - r`; the top `r` bytes get index 0x80 (zero, and PBLENDVB's selector).
const SHIFT_DOWN: [u8; 32] = {
    let mut t = [0x80u8; 32];
    let mut i = 0;
    while i < 16 {
        t[i] = i as u8;
        i += 1;
    }
    t
};

/// The chunk `x` (congruent to every byte before `data.len() - r`, placed
/// at its end) advanced over the last `r` bytes of `data` (`1 <= r < 16`,
/// `data.len() >= 16`), without tables: `x`'s first `r` bytes leave the
/// chunk and are folded by 16 bytes; the rest shift down and the tail
/// bytes fill in behind them.
#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,pclmulqdq")]
pub(super) fn fold_partial<const REFLECTED: bool>(spec: &Spec, x: __m128i, data: &[u8], r: usize) -> __m128i {
    assert!((1..16).contains(&r));
    let reverse = load(&BYTE_REVERSE);
    // Memory order: byte i of the vector is message byte i of the chunk.
    let xm = if REFLECTED { x } else { _mm_shuffle_epi8(x, reverse) };
    let last = load(data.last_chunk::<16>().expect("at least 16 bytes"));
    let up = load(SHIFT_UP[r..].first_chunk::<16>().expect("r < 16"));
    let down = load(SHIFT_DOWN[r..].first_chunk::<16>().expect("r < 16"));
    // a: 16 - r zero bytes, then x's first r bytes; b: x's other bytes, then the tail.
    let a = _mm_shuffle_epi8(xm, up);
    let b = _mm_blendv_epi8(_mm_shuffle_epi8(xm, down), last, down);
    let (a, b) = if REFLECTED { (a, b) } else { (_mm_shuffle_epi8(a, reverse), _mm_shuffle_epi8(b, reverse)) };
    _mm_xor_si128(fold128(a, key128(&spec.fold.k128)), b)
}

/// `crc32` streams beside the ZMM fold in `crc32c_hybrid`, and 8-byte words
/// per stream per 256-byte fold step. Swept on AMD EPYC Zen 4 (streams x
/// words, GB/s at 64 KiB, plain fold 59): 3x1 64, 3x2 68, 3x3 75, 3x4 70,
/// 2x4 73, 2x5 71, 4x3 70. Three streams hide the instruction's 3-cycle latency.
const STREAMS: usize = 3;
const _: () = assert!(STREAMS == 3, "crc32c_hybrid names its three streams");
const WORDS: usize = 3;
/// Below this the join (a shift key and three products, ~15 ns) costs more
/// than the streams gain: at 6 KiB 58 vs 59 GB/s, at 8 KiB 64 vs 59.
pub(super) const CRC32C_HYBRID_MIN_BYTES: usize = 8192;
/// Above this the plain fold is used: once the input comes from L3 or
/// memory the four read streams lose to one (Zen 4, GB/s hybrid vs fold:
/// 1 MiB 73 vs 58, 16 MiB 50-58 vs 56, 256 MiB 16 vs 24 with a plain read
/// at 24). Taking long inputs in 64 KiB hybrid blocks did not help (16 MiB
/// 48-50, 256 MiB 16), nor did prefetching the streams (worse).
pub(super) const CRC32C_HYBRID_MAX_BYTES: usize = 2 << 20;

/// CRC32C with the ZMM fold over the first region and the `crc32`
/// instruction over `STREAMS` more regions, `WORDS` 8-byte words each per
/// 256-byte fold step; the registers are joined with the algebra's shift
/// (`reg(A || B) = reg(A) * x^(8|B|) + reg_0(B)`), as in `crc32c_hybrid.rs`.
/// Returns the register after the longest prefix the layout covers (all but
/// less than one step) and that prefix's length.
///
#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq,avx2,vpclmulqdq,avx512f,avx512vl,avx512bw")]
pub(super) fn crc32c_hybrid(state: u64, data: &[u8]) -> (u64, usize) {
    let spec = &crate::crc::spec::CRC32C;
    let step = STEP_BYTES + STREAMS * WORDS * 8;
    assert!(data.len() >= STEP_BYTES + step);
    let steps = (data.len() - STEP_BYTES) / step;
    let stream_bytes = WORDS * 8 * steps;
    let folded_len = STEP_BYTES * (steps + 1);
    // Layout: [folded: 256 * (steps + 1)] [stream 0] [stream 1] [stream 2] [rest].
    let (folded, rest) = data.split_at(folded_len);
    let (head, folded) = folded.as_chunks::<STEP_BYTES>().0.split_first().expect("steps + 1 blocks");
    let (w0, rest) = rest.split_at(stream_bytes);
    let (w1, w2) = rest.split_at(stream_bytes);
    let (w0, w1, w2) = (
        w0.as_chunks::<{ 8 * WORDS }>().0,
        w1.as_chunks::<{ 8 * WORDS }>().0,
        w2[..stream_bytes].as_chunks::<{ 8 * WORDS }>().0,
    );
    let [z0, mut z1, mut z2, mut z3] = load512x4::<true>(head);
    let mut z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(inject::<true>(spec, state)));
    let k2048 = key512(&spec.fold.k2048);
    let mut regs = [0u64; STREAMS];
    for (((block, c0), c1), c2) in folded.iter().zip(w0).zip(w1).zip(w2) {
        let [d0, d1, d2, d3] = load512x4::<true>(block);
        z0 = fold512(z0, k2048, d0);
        z1 = fold512(z1, k2048, d1);
        z2 = fold512(z2, k2048, d2);
        z3 = fold512(z3, k2048, d3);
        let (c0, c1, c2) = (c0.as_chunks::<8>().0, c1.as_chunks::<8>().0, c2.as_chunks::<8>().0);
        for w in 0..WORDS {
            regs[0] = _mm_crc32_u64(regs[0], u64::from_le_bytes(c0[w]));
            regs[1] = _mm_crc32_u64(regs[1], u64::from_le_bytes(c1[w]));
            regs[2] = _mm_crc32_u64(regs[2], u64::from_le_bytes(c2[w]));
        }
    }
    let z = fold512(
        z0,
        key512(&spec.fold.k1536),
        fold512(z1, key512(&spec.fold.k1024), fold512(z2, key512(&spec.fold.k512), z3)),
    );
    let mut reg = super::fold::reduce128::<true>(spec, lanes_into_last(spec, z)) as u32;
    let key = super::crc32c_algebra::shift_key(stream_bytes as u64);
    for stream_reg in regs {
        reg = super::crc32c_algebra::shift_by(reg, key) ^ stream_reg as u32;
    }
    (u64::from(reg), folded_len + STREAMS * stream_bytes)
}

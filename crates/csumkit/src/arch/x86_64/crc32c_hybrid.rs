//! CRC32C of long inputs with both of the core's CRC units busy: PCLMULQDQ
//! folds the first region of the input while the `crc32` instruction runs
//! over two more regions, and the three registers are joined with the CRC's
//! algebra: `reg(A || B) = reg(A) * x^(8|B|) + reg_0(B)`.
//!
//! The 128-bit fold is limited by the multiplier's throughput (two products
//! per 16 bytes); the `crc32` instruction issues elsewhere, so interleaving
//! the two in one loop adds part of the scalar rate to the folding rate
//! (the layout of corsix/fast-crc32's "v4s3x3" kernels). Measured on the
//! 2-vCPU AMD EPYC (Zen 1) VM, `csumkit bench crc`: +4–6 % from 8 KiB up.
//! Joining costs three `x^k` products, so short inputs take the plain fold.

use super::crc32c_algebra::{shift_by, shift_key};
use super::fold::{fold128, fold4_into_last, inject, key128, load128, reduce128};
use core::arch::x86_64::*;

/// Regions run by the `crc32` instruction beside the folded one. Two and
/// three measured alike; one (latency-bound) and more words per step
/// (the multiplier starves) were slower.
const STREAMS: usize = 2;
const _: () = assert!(STREAMS == 2, "update names its two streams");
/// Bytes one loop step consumes: 64 folded, one 8-byte word per stream.
const STEP_BYTES: usize = 64 + STREAMS * 8;
/// Below this many bytes the plain fold is as fast or faster.
pub(super) const HYBRID_MIN_BYTES: usize = 4096;

/// The raw CRC32C register after `data` (at least [`HYBRID_MIN_BYTES`])
/// from `state`.
#[inline]
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq")]
pub(super) fn update(state: u64, data: &[u8]) -> u64 {
    assert!(data.len() >= HYBRID_MIN_BYTES);
    let spec = &crate::crc::spec::CRC32C;
    // Layout: [folded: 64 * (steps + 1)] [stream 0] [stream 1] [tail < STEP_BYTES].
    let steps = (data.len() - 64) / STEP_BYTES;
    let stream_bytes = 8 * steps;
    let (folded, rest) = data.split_at(64 * (steps + 1));
    let (streams, tail) = rest.split_at(STREAMS * stream_bytes);
    let (head, folded) = folded.as_chunks::<64>().0.split_first().expect("steps + 1 blocks");
    let (w0, w1) = streams.split_at(stream_bytes);
    let (w0, w1) = (w0.as_chunks::<8>().0, w1.as_chunks::<8>().0);

    let (h, _) = head.as_chunks::<16>();
    let mut x0 = _mm_xor_si128(load128::<true>(&h[0]), inject::<true>(spec, state));
    let [mut x1, mut x2, mut x3] = [load128::<true>(&h[1]), load128::<true>(&h[2]), load128::<true>(&h[3])];
    let k512 = key128(&spec.fold.k512);
    let mut regs = [0u64; STREAMS];
    for ((block, word0), word1) in folded.iter().zip(w0).zip(w1) {
        let (b, _) = block.as_chunks::<16>();
        x0 = _mm_xor_si128(fold128(x0, k512), load128::<true>(&b[0]));
        x1 = _mm_xor_si128(fold128(x1, k512), load128::<true>(&b[1]));
        x2 = _mm_xor_si128(fold128(x2, k512), load128::<true>(&b[2]));
        x3 = _mm_xor_si128(fold128(x3, k512), load128::<true>(&b[3]));
        regs[0] = _mm_crc32_u64(regs[0], u64::from_le_bytes(*word0));
        regs[1] = _mm_crc32_u64(regs[1], u64::from_le_bytes(*word1));
    }
    let x = fold4_into_last(&spec.fold, [x0, x1, x2, x3]);
    let mut reg = reduce128::<true>(spec, x) as u32;
    let key = shift_key(stream_bytes as u64);
    for stream_reg in regs {
        reg = shift_by(reg, key) ^ stream_reg as u32;
    }
    super::crc32c_sse42(u64::from(reg), tail)
}

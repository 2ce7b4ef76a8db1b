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

// Intrinsics inside `#[target_feature]` functions whose safety contract
// (CPU support) is the caller's.
#![allow(unsafe_op_in_unsafe_fn)]

use super::crc32c_algebra::{shift_by, shift_key};
use super::fold::{fold128, fold4_into_last, inject, key128, load128, reduce128};
use core::arch::x86_64::*;

/// Regions run by the `crc32` instruction beside the folded one. Two and
/// three measured alike; one (latency-bound) and more words per step
/// (the multiplier starves) were slower.
const STREAMS: usize = 2;
/// Bytes one loop step consumes: 64 folded, one 8-byte word per stream.
const STEP_BYTES: usize = 64 + STREAMS * 8;
/// Below this many bytes the plain fold is as fast or faster.
pub(super) const HYBRID_MIN_BYTES: usize = 4096;

/// The raw CRC32C register after `data` (at least [`HYBRID_MIN_BYTES`])
/// from `state`.
///
/// # Safety
/// The CPU must support SSE4.2, SSSE3, SSE4.1 and PCLMULQDQ (the caller is
/// compiled with them enabled).
#[inline(always)]
pub(super) unsafe fn update(state: u64, data: &[u8]) -> u64 {
    assert!(data.len() >= HYBRID_MIN_BYTES);
    let spec = &crate::crc::spec::CRC32C;
    // Layout: [folded: 64 * (steps + 1)] [stream 0] [stream 1] [tail < STEP_BYTES].
    let steps = (data.len() - 64) / STEP_BYTES;
    let stream_bytes = 8 * steps;
    let (folded, rest) = data.split_at(64 * (steps + 1));
    let (streams, tail) = rest.split_at(STREAMS * stream_bytes);

    let mut p = folded.as_ptr();
    let mut x0 = _mm_xor_si128(load128::<true>(p), inject::<true>(spec, state));
    let mut x1 = load128::<true>(p.add(16));
    let mut x2 = load128::<true>(p.add(32));
    let mut x3 = load128::<true>(p.add(48));
    let k512 = key128(&spec.fold.k512);
    let mut words = streams.as_ptr();
    let mut regs = [0u64; STREAMS];
    for _ in 0..steps {
        // SAFETY: step i reads folded[64 (i + 1)..][..64] and word i of each
        // stream; `steps` was sized so both lie inside their regions.
        p = p.add(64);
        x0 = _mm_xor_si128(fold128(x0, k512), load128::<true>(p));
        x1 = _mm_xor_si128(fold128(x1, k512), load128::<true>(p.add(16)));
        x2 = _mm_xor_si128(fold128(x2, k512), load128::<true>(p.add(32)));
        x3 = _mm_xor_si128(fold128(x3, k512), load128::<true>(p.add(48)));
        for (i, reg) in regs.iter_mut().enumerate() {
            *reg = _mm_crc32_u64(*reg, words.add(i * stream_bytes).cast::<u64>().read_unaligned());
        }
        words = words.add(8);
    }
    let x = fold4_into_last(&spec.fold, [x0, x1, x2, x3]);
    let mut reg = reduce128::<true>(spec, x) as u32;
    let key = shift_key(stream_bytes as u64);
    for stream_reg in regs {
        reg = shift_by(reg, key) ^ stream_reg as u32;
    }
    super::crc32c_sse42(u64::from(reg), tail)
}

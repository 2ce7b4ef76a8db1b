//! x86_64 engines: PCLMULQDQ folding over 128-bit lanes (8 accumulators,
//! 128 bytes per step, 4 below 256 bytes) and VPCLMULQDQ over 256-bit lanes (4 accumulators,
//! 128 bytes per step), one generic kernel for all three CRCs; the SSE4.2
//! `crc32` instruction for short CRC32C inputs, tails and the final 128->32
//! reduction, and beside the 128-bit fold for long CRC32C inputs
//! (`crc32c_hybrid`).
//!
//! Every public function here is `unsafe` with `#[target_feature]`: callers
//! must have checked the CPU features (see `Backend::is_available`).

// The bodies are intrinsics inside `#[target_feature]` functions whose
// safety contract (CPU support, in-bounds pointers) is stated once per function.
#![allow(unsafe_op_in_unsafe_fn)]

pub(crate) mod algebra;
mod crc32c_algebra;
mod crc32c_hybrid;
mod fold;

use crate::crc::spec::{Algorithm, Spec};
use crate::Backend;
use core::arch::x86_64::*;

/// Below this many bytes CRC32C uses the `crc32` instruction alone: folding's
/// fixed cost (loads, reduction) only pays off above it. Measured with
/// `csumkit bench crc`.
pub(crate) const CRC32C_FOLD_MIN_BYTES: usize = 128;
/// Below this many bytes the other CRCs use the slicing tables.
pub(crate) const TABLE_FOLD_MIN_BYTES: usize = 32;
/// The 256-bit kernel needs one full 128-byte step plus its reduction.
const WIDE_FOLD_MIN_BYTES: usize = 256;

#[inline(always)]
fn fold_min_bytes(spec: &Spec) -> usize {
    if spec.algorithm == Algorithm::Crc32c {
        CRC32C_FOLD_MIN_BYTES
    } else {
        TABLE_FOLD_MIN_BYTES
    }
}

/// Calls `$body` with `$spec` bound to the `static` parameter set of
/// `$algorithm`, so each arm is compiled with the CRC's constants folded in
/// (width, bit order, the `crc32` instruction choice).
macro_rules! with_static_spec {
    ($algorithm:expr, |$spec:ident| $body:expr) => {
        match $algorithm {
            crate::crc::Algorithm::Crc32c => {
                let $spec = &crate::crc32c::SPEC;
                $body
            }
            crate::crc::Algorithm::Crc64Nvme => {
                let $spec = &crate::crc64nvme::SPEC;
                $body
            }
            crate::crc::Algorithm::Crc16T10Dif => {
                let $spec = &crate::crc16t10dif::SPEC;
                $body
            }
        }
    };
}
pub(crate) use with_static_spec;

/// Raw update on an x86 hardware `backend`.
///
/// # Safety
/// The CPU must support `backend` (checked by `Backend::is_available`).
#[inline(always)]
pub(crate) unsafe fn update(backend: Backend, algorithm: Algorithm, state: u64, data: &[u8]) -> u64 {
    match backend {
        Backend::X86Pclmul => update_pclmul(algorithm, state, data),
        _ => update_vpclmul(algorithm, state, data),
    }
}

/// Raw update with 128-bit PCLMULQDQ folding.
///
/// # Safety
/// The CPU must support SSE4.2, SSSE3, SSE4.1 and PCLMULQDQ.
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq")]
unsafe fn update_pclmul(algorithm: Algorithm, state: u64, data: &[u8]) -> u64 {
    with_static_spec!(algorithm, |spec| update_128(spec, state, data))
}

/// Raw update with 256-bit VPCLMULQDQ folding (128-bit below 256 bytes).
///
/// # Safety
/// The CPU must support everything `update_pclmul` needs plus AVX2 and VPCLMULQDQ.
#[target_feature(enable = "sse2,ssse3,sse4.1,sse4.2,pclmulqdq,avx2,vpclmulqdq")]
unsafe fn update_vpclmul(algorithm: Algorithm, state: u64, data: &[u8]) -> u64 {
    with_static_spec!(algorithm, |spec| {
        if data.len() < WIDE_FOLD_MIN_BYTES {
            update_128(spec, state, data)
        } else {
            let whole = data.len() & !15;
            let state = if spec.reflected {
                fold::fold_256::<true>(spec, state, &data[..whole])
            } else {
                fold::fold_256::<false>(spec, state, &data[..whole])
            };
            update_tail(spec, state, &data[whole..])
        }
    })
}

#[inline(always)]
unsafe fn update_128(spec: &Spec, state: u64, data: &[u8]) -> u64 {
    if data.len() < fold_min_bytes(spec) {
        return update_tail(spec, state, data);
    }
    if spec.algorithm == Algorithm::Crc32c && data.len() >= crc32c_hybrid::HYBRID_MIN_BYTES {
        return crc32c_hybrid::update(state, data);
    }
    let whole = data.len() & !15;
    let state = if spec.reflected {
        fold::fold_128::<true>(spec, state, &data[..whole])
    } else {
        fold::fold_128::<false>(spec, state, &data[..whole])
    };
    update_tail(spec, state, &data[whole..])
}

/// CRC32C of a short input with the `crc32` instruction alone.
///
/// # Safety
/// The CPU must support SSE4.2.
#[target_feature(enable = "sse4.2")]
pub(crate) unsafe fn crc32c_short(state: u64, data: &[u8]) -> u64 {
    crc32c_sse42(state, data)
}

/// Short inputs and tails: the `crc32` instruction for CRC32C, tables otherwise.
#[inline(always)]
unsafe fn update_tail(spec: &Spec, state: u64, data: &[u8]) -> u64 {
    if spec.algorithm == Algorithm::Crc32c {
        crc32c_sse42(state, data)
    } else {
        spec.update_portable(state, data)
    }
}

/// CRC32C with the SSE4.2 `crc32` instruction, eight bytes at a time.
#[inline(always)]
unsafe fn crc32c_sse42(state: u64, data: &[u8]) -> u64 {
    let mut crc = state;
    let mut words = data.chunks_exact(8);
    for word in &mut words {
        crc = _mm_crc32_u64(crc, u64::from_le_bytes(word.try_into().unwrap()));
    }
    let mut crc = crc as u32;
    let mut rest = words.remainder();
    if rest.len() >= 4 {
        crc = _mm_crc32_u32(crc, u32::from_le_bytes(rest[..4].try_into().unwrap()));
        rest = &rest[4..];
    }
    for &byte in rest {
        crc = _mm_crc32_u8(crc, byte);
    }
    crc as u64
}

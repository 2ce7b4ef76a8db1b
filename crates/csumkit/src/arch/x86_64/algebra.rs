//! The checksum algebra compiled with PCLMULQDQ: the generic code in
//! `crc::algebra` is inlined here with the hardware carry-less multiplier.

use super::crc32c_algebra;
use crate::crc::algebra;
use crate::crc::gf2::{Clmul, Modulus};
use crate::crc::spec::{Algorithm, Spec};
use core::arch::x86_64::*;

/// PCLMULQDQ as a [`Clmul`]. Only instantiated inside the
/// `#[target_feature(enable = "pclmulqdq")]` functions below, so the
/// instruction is never reached on a CPU without it.
pub(crate) struct HwClmul;

impl Clmul for HwClmul {
    /// Barrett reduction kept in XMM registers: three PCLMULQDQ and a few
    /// shifts, no round trips through general-purpose registers.
    #[inline(always)]
    fn mulmod(m: &Modulus, a: u64, b: u64) -> u64 {
        // SAFETY: as for `clmul`.
        unsafe {
            let d = m.degree;
            let product = _mm_clmulepi64_si128(_mm_cvtsi64_si128(a as i64), _mm_cvtsi64_si128(b as i64), 0x00);
            let hi = shift_right_128(product, d);
            // Low qword: mu_low; high qword: G - x^d.
            let constants = _mm_set_epi64x(m.low as i64, m.mu_low as i64);
            let t = _mm_clmulepi64_si128(hi, constants, 0x00);
            let q = _mm_xor_si128(hi, shift_right_128(t, d));
            let q_times_low = _mm_clmulepi64_si128(q, constants, 0x10);
            (_mm_cvtsi128_si64(_mm_xor_si128(product, q_times_low)) as u64) & m.mask()
        }
    }

    #[inline(always)]
    fn div_x_plus_1(r: u64) -> u64 {
        // SAFETY: as for `clmul`.
        unsafe {
            let all_ones = _mm_set1_epi64x(-1);
            _mm_cvtsi128_si64(_mm_clmulepi64_si128(_mm_cvtsi64_si128(r as i64), all_ones, 0x00)) as u64
        }
    }

    #[inline(always)]
    fn clmul(a: u64, b: u64) -> u128 {
        // SAFETY: see the type's documentation; the enclosing functions carry
        // the target features and are only called after detection.
        unsafe {
            let product = _mm_clmulepi64_si128(_mm_cvtsi64_si128(a as i64), _mm_cvtsi64_si128(b as i64), 0x00);
            let lo = _mm_cvtsi128_si64(product) as u64;
            let hi = _mm_extract_epi64(product, 1) as u64;
            ((hi as u128) << 64) | lo as u128
        }
    }
}

/// `v >> d` over the whole 128 bits, for `1 <= d <= 64`; `d` is a constant
/// once inlined, so this is one or three shift instructions.
#[inline]
#[target_feature(enable = "sse2")]
fn shift_right_128(v: __m128i, d: u32) -> __m128i {
    // Whole-byte shifts are one instruction.
    match d {
        16 => return _mm_srli_si128::<2>(v),
        32 => return _mm_srli_si128::<4>(v),
        64 => return _mm_srli_si128::<8>(v),
        _ => {}
    }
    let down = _mm_srl_epi64(v, _mm_cvtsi32_si128(d as i32));
    let carried = _mm_sll_epi64(_mm_srli_si128::<8>(v), _mm_cvtsi32_si128(64 - d as i32));
    _mm_or_si128(down, carried)
}

/// Each operation: CRC32C on its `crc32`-instruction algebra, the other CRCs
/// on the generic algebra with PCLMULQDQ Barrett reduction.
macro_rules! with_pclmul {
    ($($name:ident($($arg:ident: $ty:ty),*) => $crc32c:expr;)*) => {$(
        #[target_feature(enable = "sse2,sse4.1,sse4.2,popcnt,pclmulqdq")]
        pub(crate) fn $name(spec: &Spec, $($arg: $ty),*) -> u64 {
            if spec.algorithm == Algorithm::Crc32c {
                return $crc32c as u64;
            }
            super::with_static_spec!(spec.algorithm, |spec| algebra::$name::<HwClmul>(spec, $($arg),*))
        }
    )*};
}

with_pclmul! {
    combine(crc_a: u64, crc_b: u64, len_b: u64) => crc32c_algebra::combine(crc_a as u32, crc_b as u32, len_b);
    zero_extend(crc: u64, zeros: u64) => crc32c_algebra::zero_extend(crc as u32, zeros);
    flip_range(crc: u64, total_bits: u64, bit_offset: u64, bit_len: u64) =>
        crc32c_algebra::flip_range(crc as u32, total_bits, bit_offset, bit_len);
    splice_shift(crc: u64, lin_delta_reg: u64, trailing_bytes: u64, total_len: u64) =>
        crc32c_algebra::splice_shift(crc as u32, lin_delta_reg as u32, trailing_bytes, total_len);
}

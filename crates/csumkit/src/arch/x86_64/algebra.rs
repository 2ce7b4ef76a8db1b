//! The checksum algebra compiled with PCLMULQDQ: the generic code in
//! `crc::algebra` is inlined here with the hardware carry-less multiplier.

// The bodies are intrinsics inside `#[target_feature]` functions whose
// safety contract (CPU support, in-bounds pointers) is stated once per function.
#![allow(unsafe_op_in_unsafe_fn)]

use crate::crc::algebra;
use crate::crc::gf2::Clmul;
use crate::crc::spec::Spec;
use core::arch::x86_64::*;

/// PCLMULQDQ as a [`Clmul`]. Only instantiated inside the
/// `#[target_feature(enable = "pclmulqdq")]` functions below, so the
/// instruction is never reached on a CPU without it.
pub(crate) struct HwClmul;

impl Clmul for HwClmul {
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

macro_rules! with_pclmul {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        /// # Safety
        /// The CPU must support PCLMULQDQ and SSE4.1.
        #[target_feature(enable = "sse2,sse4.1,pclmulqdq")]
        pub(crate) unsafe fn $name(spec: &Spec, $($arg: $ty),*) -> u64 {
            algebra::$name::<HwClmul>(spec, $($arg),*)
        }
    )*};
}

with_pclmul! {
    combine(crc_a: u64, crc_b: u64, len_b: u64);
    zero_extend(crc: u64, zeros: u64);
    flip_range(crc: u64, total_bits: u64, bit_offset: u64, bit_len: u64);
    splice_shift(crc: u64, lin_delta_reg: u64, trailing_bytes: u64);
}

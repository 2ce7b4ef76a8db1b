//! aarch64 engine: the ARMv8 CRC32 instructions for CRC32C (short inputs,
//! tails, final reduction) and PMULL folding for all three CRCs, using the
//! generic folding kernel of `crc::fold` with PMULL as its multiplier; the
//! algebra uses PMULL for its Barrett reductions.
//!
//! Every function here is safe with `#[target_feature]`; the dispatch
//! (`arch/mod.rs`) calls a kernel through an `unsafe fn` pointer only after
//! `Backend::is_available` said yes.

use super::Kernel;
use crate::crc::fold::{chunk_bytes, fold_to_128};
use crate::crc::gf2::Clmul;
use crate::crc::spec::{Algorithm, Spec};
use crate::Backend;
use core::arch::aarch64::*;

/// Below this many bytes CRC32C uses the CRC32 instructions alone.
const CRC32C_FOLD_MIN_BYTES: usize = 128;
/// Below this many bytes the other CRCs use the slicing tables.
const TABLE_FOLD_MIN_BYTES: usize = 32;

/// PMULL as a [`Clmul`]; only instantiated inside the
/// `#[target_feature(enable = "aes")]` functions below.
pub(crate) struct PmullClmul;

impl Clmul for PmullClmul {
    // Inlined into the `aes`-enabled callers below, where the intrinsic
    // inlines too; a trait method cannot carry `#[target_feature]` itself.
    #[allow(inline_always_mismatching_target_features)]
    #[inline(always)]
    fn clmul(a: u64, b: u64) -> u128 {
        // SAFETY: see the type's documentation.
        unsafe { vmull_p64(a, b) }
    }
}

#[inline]
#[target_feature(enable = "crc")]
fn crc32c_instr(mut crc: u32, data: &[u8]) -> u32 {
    let mut words = data.chunks_exact(8);
    for word in &mut words {
        crc = __crc32cd(crc, u64::from_le_bytes(word.try_into().unwrap()));
    }
    for &byte in words.remainder() {
        crc = __crc32cb(crc, byte);
    }
    crc
}

/// The kernel of `algorithm` on the aarch64 hardware backend (the only one here).
#[inline(always)]
pub(crate) fn kernel(backend: Backend, algorithm: Algorithm) -> Option<Kernel> {
    match backend {
        Backend::Aarch64CrcPmull => {
            Some([pmull_kernel::<0> as Kernel, pmull_kernel::<1>, pmull_kernel::<2>][algorithm as usize])
        }
        _ => None,
    }
}

/// Raw update: the CRC32 instructions alone for short CRC32C inputs, the
/// tables for short inputs of the others, PMULL folding above.
/// NEON, the CRC extension and PMULL (`aes`).
#[target_feature(enable = "neon,aes,crc")]
fn pmull_kernel<const A: usize>(state: u64, data: &[u8]) -> u64 {
    let spec = Algorithm::ALL[A].spec();
    if spec.algorithm == Algorithm::Crc32c && data.len() < CRC32C_FOLD_MIN_BYTES {
        return crc32c_instr(state as u32, data) as u64;
    }
    if spec.algorithm != Algorithm::Crc32c && data.len() < TABLE_FOLD_MIN_BYTES {
        return spec.update_portable(state, data);
    }
    update_pmull(spec, state, data)
}

#[inline]
#[target_feature(enable = "neon,aes,crc")]
fn update_pmull(spec: &Spec, state: u64, data: &[u8]) -> u64 {
    let whole = data.len() & !15;
    let crc32c = spec.algorithm == Algorithm::Crc32c;
    let state = if whole == 0 {
        state
    } else if spec.reflected {
        let x = fold_to_128::<PmullClmul, true>(spec, state, &data[..whole]);
        if crc32c {
            crc32c_instr(0, &chunk_bytes::<true>(x)) as u64
        } else {
            spec.update_block16(0, &chunk_bytes::<true>(x))
        }
    } else {
        spec.update_block16(0, &chunk_bytes::<false>(fold_to_128::<PmullClmul, false>(spec, state, &data[..whole])))
    };
    if crc32c {
        crc32c_instr(state as u32, &data[whole..]) as u64
    } else {
        spec.update_portable(state, &data[whole..])
    }
}

/// The checksum algebra with PMULL Barrett reductions.
pub(crate) mod algebra {
    use super::PmullClmul;
    use crate::crc::algebra;
    use crate::crc::spec::Spec;

    macro_rules! with_pmull {
        ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
            #[target_feature(enable = "neon,aes")]
            pub(crate) fn $name(spec: &Spec, $($arg: $ty),*) -> u64 {
                algebra::$name::<PmullClmul>(spec, $($arg),*)
            }
        )*};
    }

    with_pmull! {
        combine(crc_a: u64, crc_b: u64, len_b: u64);
        zero_extend(crc: u64, zeros: u64);
        flip_range(crc: u64, total_bits: u64, bit_offset: u64, bit_len: u64);
        splice_shift(crc: u64, lin_delta_reg: u64, trailing_bytes: u64, total_len: u64);
    }
}

//! Carry-less-multiply folding written once over any [`Clmul`], on `u128`
//! chunks: the aarch64 backend instantiates it with PMULL, and the tests run
//! it with the portable multiplier on every machine, so the logic is checked
//! even where no PMULL CPU is at hand. (The x86 kernels in
//! `arch/x86_64/fold.rs` are the same algorithm in SIMD registers.)
//!
//! Invariant: an accumulator is a 128-bit chunk congruent (mod G) to all data
//! folded so far, positioned at the end of the bytes it covers; folding by a
//! key moves it forward by the key's distance.

use super::gf2::Clmul;
use super::spec::{FoldKey, Spec};

/// Loads a 16-byte chunk as a 128-bit polynomial in the CRC's bit order:
/// reflected CRCs take the bytes as they are, MSB-first CRCs byte-reversed.
#[inline(always)]
fn load<const REFLECTED: bool>(chunk: &[u8]) -> u128 {
    let bytes: [u8; 16] = chunk.try_into().expect("16-byte chunk");
    if REFLECTED {
        u128::from_le_bytes(bytes)
    } else {
        u128::from_be_bytes(bytes)
    }
}

#[inline(always)]
fn fold<C: Clmul>(acc: u128, key: &FoldKey) -> u128 {
    C::clmul(acc as u64, key[0]) ^ C::clmul((acc >> 64) as u64, key[1])
}

/// Folds `data` (a non-empty multiple of 16 bytes) and returns the 128-bit
/// chunk left at its end, with the register `state` folded in.
#[inline(always)]
pub(crate) fn fold_to_128<C: Clmul, const REFLECTED: bool>(spec: &Spec, state: u64, data: &[u8]) -> u128 {
    debug_assert!(!data.is_empty() && data.len().is_multiple_of(16));
    let keys = &spec.fold;
    let inject = if REFLECTED { state as u128 } else { (state as u128) << (128 - spec.width) };
    let mut chunks = data.chunks_exact(16);
    let mut x;
    if data.len() >= 64 {
        let mut acc = [0u128; 4];
        for (a, chunk) in acc.iter_mut().zip(&mut chunks) {
            *a = load::<REFLECTED>(chunk);
        }
        acc[0] ^= inject;
        while chunks.len() >= 4 {
            for a in acc.iter_mut() {
                *a = fold::<C>(*a, &keys.k512) ^ load::<REFLECTED>(chunks.next().unwrap());
            }
        }
        x = fold::<C>(acc[0], &keys.k384) ^ fold::<C>(acc[1], &keys.k256) ^ fold::<C>(acc[2], &keys.k128) ^ acc[3];
    } else {
        x = load::<REFLECTED>(chunks.next().unwrap()) ^ inject;
    }
    for chunk in chunks {
        x = fold::<C>(x, &keys.k128) ^ load::<REFLECTED>(chunk);
    }
    x
}

/// The chunk back in memory order, ready for a final pass through the CRC.
#[inline(always)]
pub(crate) fn chunk_bytes<const REFLECTED: bool>(x: u128) -> [u8; 16] {
    if REFLECTED {
        x.to_le_bytes()
    } else {
        x.to_be_bytes()
    }
}

/// Raw update by folding whole chunks, then the tail with the tables.
#[cfg(test)]
fn update<C: Clmul>(spec: &Spec, state: u64, data: &[u8]) -> u64 {
    let whole = data.len() & !15;
    if whole == 0 {
        return spec.update_portable(state, data);
    }
    let state = if spec.reflected {
        spec.update_block16(0, &chunk_bytes::<true>(fold_to_128::<C, true>(spec, state, &data[..whole])))
    } else {
        spec.update_block16(0, &chunk_bytes::<false>(fold_to_128::<C, false>(spec, state, &data[..whole])))
    };
    spec.update_portable(state, &data[whole..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crc::gf2::PortableClmul;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn generic_folding_matches_tables(len in 0usize..3000, seed: u8, state: u64) {
            let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
            for spec in [&crate::crc::spec::CRC32C, &crate::crc::spec::CRC64NVME, &crate::crc::spec::CRC16T10DIF] {
                let state = state & spec.mask();
                prop_assert_eq!(update::<PortableClmul>(spec, state, &data), spec.update_portable(state, &data));
            }
        }
    }
}

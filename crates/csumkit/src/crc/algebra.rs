//! Incremental checksum algebra: combine, zero-extend, flip a run
//! of bits, splice a changed region — each in O(log n) multiplications by
//! `x^k mod G`, never touching the unchanged data.
//!
//! A CRC register is affine in the message: `crc(A ^ D) = crc(A) ^ lin(D)`,
//! where `lin(D) = D(x) * x^width mod G` is the CRC of `D` from a zero register
//! with no final XOR. Every operation below computes such a `lin` term from a
//! closed form and XORs it in.
//!
//! Generic over the carry-less multiplier so the x86 backend can instantiate
//! it with PCLMULQDQ inlined (see `arch`).

use super::gf2::Clmul;
use super::spec::{OnesRoute, Spec};
use crate::crc::CrcError;

/// Largest buffer, in bits, that `flip_range` accepts (1 EiB). Keeps every
/// exponent below `2^64` with room for `+ width`.
pub const FLIP_TOTAL_BITS_MAX: u64 = 1 << 63;

/// `poly * x^(8 * len_bytes) mod G` for any `u64` byte count.
#[inline(always)]
pub fn shift_bytes<C: Clmul>(spec: &Spec, poly: u64, len_bytes: u64) -> u64 {
    let m = &spec.modulus;
    if len_bytes < (1 << 61) {
        // x^e first, `poly` last: in a chain of combines (folding chunk
        // checksums) only the final product waits for the previous result.
        return m.mul::<C>(poly, m.xpow::<C>(&spec.xpow, len_bytes * 8));
    }
    // 8 * len_bytes overflows u64: split off multiples of 2^60 bytes (2^63 bits).
    let mut factor = m.xpow::<C>(&spec.xpow, (len_bytes % (1 << 60)) * 8);
    let x_2_63 = spec.xpow[7][0x80];
    for _ in 0..(len_bytes >> 60) {
        factor = m.mul::<C>(factor, x_2_63);
    }
    m.mul::<C>(poly, factor)
}

/// Checksum of `A ++ B` from `crc(A)`, `crc(B)` and `len(B)`.
#[inline(always)]
pub fn combine<C: Clmul>(spec: &Spec, crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
    // crc(AB) = (crc_a ^ xorout ^ init) * x^(8 len_b) ^ crc_b, and init == xorout.
    let shifted = shift_bytes::<C>(spec, spec.reg_to_poly(crc_a), len_b);
    spec.poly_to_reg(shifted) ^ crc_b
}

/// Checksum of the data followed by `zeros` zero bytes.
#[inline(always)]
pub fn zero_extend<C: Clmul>(spec: &Spec, crc: u64, zeros: u64) -> u64 {
    let raw = spec.reg_to_poly(crc ^ spec.xorout);
    spec.poly_to_reg(shift_bytes::<C>(spec, raw, zeros)) ^ spec.xorout
}

/// Checks a bit range against a buffer of `total_bits`.
pub fn check_bit_range(total_bits: u64, bit_offset: u64, bit_len: u64) -> Result<(), CrcError> {
    if !total_bits.is_multiple_of(8) {
        return Err(CrcError::TotalBitsNotWholeBytes { total_bits });
    }
    if total_bits > FLIP_TOTAL_BITS_MAX {
        return Err(CrcError::TotalBitsTooLarge { total_bits, max: FLIP_TOTAL_BITS_MAX });
    }
    match bit_offset.checked_add(bit_len) {
        Some(end) if end <= total_bits => Ok(()),
        _ => Err(CrcError::BitRangeOutOfBounds { bit_offset, bit_len, total_bits }),
    }
}

/// New checksum after bits `[bit_offset, bit_offset + bit_len)` of a
/// `total_bits`-bit buffer are inverted (Linux bitmap order: bit `i` is bit
/// `i % 8` of byte `i / 8`). The range must already be validated.
#[inline(always)]
pub fn flip_range<C: Clmul>(spec: &Spec, crc: u64, total_bits: u64, bit_offset: u64, bit_len: u64) -> u64 {
    debug_assert!(check_bit_range(total_bits, bit_offset, bit_len).is_ok());
    if bit_len == 0 {
        return crc;
    }
    let lin = if spec.reflected {
        // LSB-first: bitmap bit i is message bit i, coefficient x^(T-1-i), so
        // the flipped run is ones(len) * x^(T - off - len).
        ones_times_xpow::<C>(spec, bit_len, total_bits - bit_offset - bit_len, total_bits)
    } else {
        flip_lin_msb_first::<C>(spec, total_bits, bit_offset, bit_len)
    };
    crc ^ spec.poly_to_reg(lin)
}

/// `(1 + x + ... + x^(len-1)) * x^(shift + width) mod G`: the `lin` term of a
/// run of `len` one-bits followed by `shift` message bits. With
/// `s = shift + width` this is `(x^(len+s) + x^s) / (x + 1)`: two independent
/// powers of x, so the latency is one product tree, not two in a row.
/// `len + shift <= total_bits`, whose size shapes the trees (see
/// `Modulus::xpow_bounded`).
#[inline(always)]
fn ones_times_xpow<C: Clmul>(spec: &Spec, len: u64, shift: u64, total_bits: u64) -> u64 {
    let w = spec.width as u64;
    let (s, bound) = (shift + w, total_bits + w);
    match &spec.ones {
        OnesRoute::Inverse { inv_x_plus_1 } => {
            let (m, inv) = (&spec.modulus, *inv_x_plus_1);
            m.mul_xpow_bounded::<C>(&spec.xpow, inv, len + s, bound)
                ^ m.mul_xpow_bounded::<C>(&spec.xpow, inv, s, bound)
        }
        OnesRoute::Extended { modulus: m2, xpow: xpow2 } => {
            // Modulo G*(x+1) the sum stays divisible by x + 1, and the exact
            // quotient has degree < width: it is already reduced mod G.
            C::div_x_plus_1(m2.xpow_bounded::<C>(xpow2, len + s, bound) ^ m2.xpow_bounded::<C>(xpow2, s, bound))
        }
    }
}

/// MSB-first CRCs number bits within a byte the other way round: bitmap bit
/// `b` of byte `k` is message bit `8k + 7 - b`, coefficient `x^(T - 8k - 8 + b)`.
/// A bitmap run is therefore a partial head byte, whole middle bytes, and a
/// partial tail byte; each part has a closed form.
#[inline(always)]
fn flip_lin_msb_first<C: Clmul>(spec: &Spec, total_bits: u64, bit_offset: u64, bit_len: u64) -> u64 {
    let m = &spec.modulus;
    let w = spec.width as u64;
    let end = bit_offset + bit_len;
    // Byte-local mask (bits lo..hi of byte k) as a polynomial times its position.
    let partial = |k: u64, lo: u64, hi: u64| -> u64 {
        let mask = ((1u64 << (hi - lo)) - 1) << lo;
        m.mul_xpow_bounded::<C>(&spec.xpow, mask, total_bits - 8 * k - 8 + w, total_bits + w)
    };
    let (first_byte, last_byte) = (bit_offset / 8, (end - 1) / 8);
    if first_byte == last_byte {
        return partial(first_byte, bit_offset % 8, (end - 1) % 8 + 1);
    }
    let mut lin = 0;
    let mut whole_start = first_byte;
    if !bit_offset.is_multiple_of(8) {
        lin ^= partial(first_byte, bit_offset % 8, 8);
        whole_start += 1;
    }
    let mut whole_end = last_byte + 1;
    if !end.is_multiple_of(8) {
        lin ^= partial(last_byte, 0, end % 8);
        whole_end -= 1;
    }
    if whole_end > whole_start {
        // Whole bytes are a contiguous run of message bits.
        lin ^= ones_times_xpow::<C>(spec, 8 * (whole_end - whole_start), total_bits - 8 * whole_end, total_bits);
    }
    lin
}

/// Checks a splice region against its buffer.
pub fn check_splice(total_len: u64, offset: u64, old_len: usize, new_len: usize) -> Result<(), CrcError> {
    if old_len != new_len {
        return Err(CrcError::LengthMismatch { old_len: old_len as u64, new_len: new_len as u64 });
    }
    match offset.checked_add(old_len as u64) {
        Some(end) if end <= total_len => Ok(()),
        _ => Err(CrcError::ByteRangeOutOfBounds { offset, len: old_len as u64, total_len }),
    }
}

/// New checksum after `old` at `offset` is replaced by `new` in a
/// `total_len`-byte buffer; `lin_old ^ lin_new` is the raw CRC (zero register)
/// of `old ^ new`, which the caller computes with the fast engine.
#[inline(always)]
pub fn splice_shift<C: Clmul>(spec: &Spec, crc: u64, lin_delta_reg: u64, trailing_bytes: u64, _total_len: u64) -> u64 {
    let shifted = shift_bytes::<C>(spec, spec.reg_to_poly(lin_delta_reg), trailing_bytes);
    crc ^ spec.poly_to_reg(shifted)
}

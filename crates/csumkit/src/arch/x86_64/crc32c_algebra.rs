//! CRC32C algebra on the `crc32` instruction, in the CRC's own reflected bit
//! order (no bit reversal at all).
//!
//! For 32-bit register values `a`, `b`, `crc32_u64(0, clmul(a, b))` is
//! `a * b * x^33 mod G`: one PCLMULQDQ and one `crc32`, against three
//! PCLMULQDQs for Barrett. Tables hold `E(e) = x^(e - 33)`, a form closed under
//! that product, so `x^e` for any `e` is four table entries and three products.
//!
//! Two facts about the CRC32C generator, asserted at compile time, keep it
//! small: `G = (x + 1) * P` with `P(1) = 1`, and `x` has order `2^31 - 1`
//! modulo G, so every exponent reduces below `2^31` (four table rows). The
//! flipped-run term needs a division by `x + 1`, impossible modulo G; it is
//! done modulo P and lifted back with the Chinese remainder theorem (the
//! remainder modulo `x + 1` is the run length's parity).

use crate::crc::gf2::{div_x_plus_1_shifts, Modulus};
use core::arch::x86_64::*;

/// CRC32C's generator.
const G: Modulus = Modulus::new(32, 0x1EDC_6F41);
/// Multiplicative order of `x` modulo G.
const X_ORDER: u64 = (1 << 31) - 1;
/// The power of `x` that `mul` adds.
const MUL_SCALE: u64 = 33;
/// `P = G / (x + 1)`, natural order, with its `x^31` term.
const P: u64 = div_x_plus_1_shifts((1 << 32) | 0x1EDC_6F41);

/// Reflected 32-bit register value of a natural-order polynomial (degree < 32).
const fn reg(poly: u64) -> u32 {
    (poly as u32).reverse_bits()
}

struct Tables {
    /// `pow[i][b] = E(b * 256^i)` as register values.
    pow: [[u32; 256]; 4],
    /// `(x + 1)^-1 mod P`, as a register value.
    inv_x_plus_1_mod_p: u32,
    /// P as a register value (its `x^31` term is bit 0).
    p: u32,
}

static TABLES: Tables = build_tables();

const fn build_tables() -> Tables {
    assert!(G.pow_x_slow(X_ORDER as u128) == 1, "x must have order 2^31 - 1 modulo G");
    assert!(P.count_ones() % 2 == 1 && P >> 31 == 1, "G must be (x + 1) * P with P(1) = 1");
    let x_inv = G.inv_x();
    let mut scale = 1u64; // x^-33
    let mut k = 0;
    while k < MUL_SCALE {
        scale = G.mul_slow(scale, x_inv);
        k += 1;
    }
    let mut pow = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 4 {
        let step = G.pow_x_slow(1u128 << (8 * i));
        let mut value = scale;
        let mut b = 0;
        while b < 256 {
            pow[i][b] = reg(value);
            value = G.mul_slow(value, step);
            b += 1;
        }
        i += 1;
    }
    let p_mod = Modulus::new(31, P ^ (1 << 31));
    Tables { pow, inv_x_plus_1_mod_p: reg(p_mod.inverse(0b11)), p: reg(P) }
}

/// `a * b * x^33 mod G`.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
fn mul(a: u32, b: u32) -> u32 {
    let product = _mm_clmulepi64_si128(_mm_cvtsi32_si128(a as i32), _mm_cvtsi32_si128(b as i32), 0x00);
    _mm_crc32_u64(0, _mm_cvtsi128_si64(product) as u64) as u32
}

/// `E(e) = x^(e - 33) mod G` for any `e`.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
fn epow(e: u64) -> u32 {
    epow_bounded(e, e)
}

/// [`epow`] for `e <= bound`: the product tree follows `bound`, so a caller
/// with a fixed bound (a bitmap's size) gets predictable branches and, for
/// small buffers, fewer products.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
fn epow_bounded(e: u64, bound: u64) -> u32 {
    debug_assert!(e <= bound);
    let e = if bound >= X_ORDER { e % X_ORDER } else { e };
    let f = |i: usize| TABLES.pow[i][((e >> (8 * i)) & 0xff) as usize];
    if bound >> 16 == 0 {
        return mul(f(0), f(1));
    }
    if bound >> 24 == 0 {
        return mul(mul(f(0), f(1)), f(2));
    }
    mul(mul(f(0), f(1)), mul(f(2), f(3)))
}

/// `E(8 * len_bytes)` without overflowing.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
fn epow_bytes(len_bytes: u64) -> u32 {
    epow((len_bytes % X_ORDER) * 8)
}

/// The multiplier that moves a register `len_bytes` forward, as if that
/// many zero bytes followed it; [`shift_by`] applies it.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(super) fn shift_key(len_bytes: u64) -> u32 {
    epow_bytes(len_bytes)
}

/// `reg * x^(8 * len_bytes) mod G` for `key = shift_key(len_bytes)`.
#[inline]
#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(super) fn shift_by(reg: u32, key: u32) -> u32 {
    mul(reg, key)
}

#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(crate) fn combine(crc_a: u32, crc_b: u32, len_b: u64) -> u32 {
    mul(crc_a, epow_bytes(len_b)) ^ crc_b
}

#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(crate) fn zero_extend(crc: u32, zeros: u64) -> u32 {
    mul(!crc, epow_bytes(zeros)) ^ !0
}

#[target_feature(enable = "sse4.2,pclmulqdq")]
pub(crate) fn splice_shift(crc: u32, lin_delta: u32, trailing_bytes: u64, total_len: u64) -> u32 {
    // A block-sized buffer bounds the exponent: fewer table products.
    let shift = match total_len.checked_mul(8) {
        Some(bound) if bound < X_ORDER => epow_bounded(trailing_bytes * 8, bound),
        _ => epow_bytes(trailing_bytes),
    };
    crc ^ mul(lin_delta, shift)
}

/// Bits `[total_bits - shift - len, total_bits - shift)` flipped; the range
/// has been validated.
///
#[target_feature(enable = "sse4.2,pclmulqdq,popcnt")]
pub(crate) fn flip_range(crc: u32, total_bits: u64, bit_offset: u64, bit_len: u64) -> u32 {
    if bit_len == 0 {
        return crc;
    }
    // lin = ones(len) * x^s with s = shift + 32, i.e. (x^(len+s) + x^s) / (x + 1).
    let s = total_bits - bit_offset - bit_len + 32;
    let bound = total_bits + 32;
    // Modulo P: multiply by (x + 1)^-1 instead of dividing.
    let b = mul(epow_bounded(bit_len + s, bound) ^ epow_bounded(s, bound), TABLES.inv_x_plus_1_mod_p);
    let a = if b & 1 == 1 { b ^ TABLES.p } else { b }; // reduce mod P (degree 31 -> < 31)
                                                       // Modulo x + 1, lin(1) = len mod 2; adding P (P(1) = 1) fixes the parity.
    let wrong_parity = (a.count_ones() as u64 ^ bit_len) & 1 == 1;
    crc ^ if wrong_parity { a ^ TABLES.p } else { a }
}

//! Polynomial arithmetic over GF(2) modulo a CRC generator polynomial.
//!
//! Everything here uses *natural* bit order: bit `j` of a `u64` is the
//! coefficient of `x^j`. Reflected CRC registers are converted at the edges
//! (see `Spec::reg_to_poly`). A CRC is linear over GF(2), so every
//! incremental operation in csumkit (combine, zero-extend, flip a bit range,
//! splice a region) reduces to "multiply by `x^k` modulo G". This module makes
//! that cheap: `x^k` is a product of at most eight entries of a table of
//! `x^(b * 256^i)` (one table row per byte of `k`), multiplied with Barrett
//! reduction on a carry-less multiplier.
//!
//! The `const fn`s build the tables at compile time (bit-serial, obviously
//! correct); the `#[inline(always)]` functions are the run-time fast path,
//! generic over the carry-less multiplier so that the x86 backend can inline
//! PCLMULQDQ into them.

/// A generator polynomial `G = x^degree + low` with its Barrett constant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Modulus {
    /// Degree of G, `1..=64`.
    pub degree: u32,
    /// `G - x^degree`: the coefficients below the leading one.
    pub low: u64,
    /// `floor(x^(2*degree) / G) - x^degree` (Barrett's mu without its leading one).
    pub mu_low: u64,
}

/// Bytes of an exponent covered by [`XpowTable`]: exponents `< 2^64`.
pub const XPOW_TABLE_ROWS: usize = 8;

/// `rows[i][b] = x^(b * 256^i) mod G`, so `x^e` for any `e < 2^64` is the
/// product of `rows[i][byte i of e]`.
pub type XpowTable = [[u64; 256]; XPOW_TABLE_ROWS];

impl Modulus {
    /// Builds the modulus `x^degree + low`. Panics (at compile time, where it
    /// is used) on a degree outside `1..=64` or a `low` with bits at or above
    /// `degree`.
    pub const fn new(degree: u32, low: u64) -> Self {
        assert!(degree >= 1 && degree <= 64);
        assert!(degree == 64 || low >> degree == 0);
        let mu = barrett_mu(degree, low);
        let mu_low = if degree == 64 { mu as u64 } else { (mu ^ (1u128 << degree)) as u64 };
        Self { degree, low, mu_low }
    }

    /// All-ones in the low `degree` bits.
    #[inline(always)]
    pub const fn mask(&self) -> u64 {
        if self.degree == 64 {
            u64::MAX
        } else {
            (1u64 << self.degree) - 1
        }
    }

    /// `a * x mod G` for a reduced `a`.
    pub const fn mul_x(&self, a: u64) -> u64 {
        let top = (a >> (self.degree - 1)) & 1;
        let shifted = if self.degree == 64 { a << 1 } else { (a << 1) & self.mask() };
        if top == 1 {
            shifted ^ self.low
        } else {
            shifted
        }
    }

    /// `a * b mod G`, bit-serial: the obviously-correct version used to build
    /// tables at compile time and as the reference in tests.
    pub const fn mul_slow(&self, a: u64, b: u64) -> u64 {
        let mut acc = 0u64;
        let mut shifted = a;
        let mut i = 0;
        while i < self.degree {
            if (b >> i) & 1 == 1 {
                acc ^= shifted;
            }
            shifted = self.mul_x(shifted);
            i += 1;
        }
        acc
    }

    /// `x^e mod G` by square-and-multiply (compile-time helper).
    pub const fn pow_x_slow(&self, e: u128) -> u64 {
        let mut result = 1u64;
        let mut base = self.mul_x(1); // x (reduced, in case degree == 1)
        let mut e = e;
        while e != 0 {
            if e & 1 == 1 {
                result = self.mul_slow(result, base);
            }
            base = self.mul_slow(base, base);
            e >>= 1;
        }
        result
    }

    /// `a^-1 mod G` (extended Euclid; compile-time helper). Panics if `a`
    /// and G share a factor.
    pub const fn inverse(&self, a: u64) -> u64 {
        inverse_mod(self, a)
    }

    /// `x^-1 mod G`. Every CRC generator has a constant term, so `x` is
    /// invertible: `G = x*h + 1` gives `x*h = 1 (mod G)`.
    pub const fn inv_x(&self) -> u64 {
        assert!(self.low & 1 == 1);
        // h = (G - 1) / x; the x^degree term contributes x^(degree-1).
        (self.low >> 1) | (1u64 << (self.degree - 1))
    }

    /// The table of `x^(b * 256^i) mod G`.
    pub const fn xpow_table(&self) -> XpowTable {
        let mut rows = [[0u64; 256]; XPOW_TABLE_ROWS];
        let mut i = 0;
        while i < XPOW_TABLE_ROWS {
            // step = x^(256^i) by repeated squaring of x.
            let step = self.pow_x_slow(1u128 << (8 * i));
            rows[i][0] = 1;
            let mut b = 1;
            while b < 256 {
                rows[i][b] = self.mul_slow(rows[i][b - 1], step);
                b += 1;
            }
            i += 1;
        }
        rows
    }

    /// `a * b mod G` on the multiplier `C`. `a` and `b` must be reduced
    /// (degree < `self.degree`).
    #[inline(always)]
    pub fn mul<C: Clmul>(&self, a: u64, b: u64) -> u64 {
        C::mulmod(self, a, b)
    }

    /// Barrett reduction of `a * b` with the carry-less multiplier `C`.
    #[inline(always)]
    pub fn mul_barrett<C: Clmul>(&self, a: u64, b: u64) -> u64 {
        let d = self.degree;
        let product = C::clmul(a, b); // degree <= 2d - 2
        let hi = (product >> d) as u64; // floor(product / x^d), degree <= d - 2
                                        // q = floor(hi * mu / x^d) where mu = x^d + mu_low.
        let q = hi ^ ((C::clmul(hi, self.mu_low) >> d) as u64);
        // remainder = (product - q*G) mod x^d, and q*G mod x^d = q*low mod x^d.
        ((product ^ C::clmul(q, self.low)) as u64) & self.mask()
    }

    /// `x^e mod G` from the byte table: a balanced product of the entries
    /// for the bytes `e` actually has (depth 1 below 2^16, 2 below 2^32, else 3).
    /// Only the bytes from the lowest to the highest nonzero one are
    /// multiplied: storage lengths (4 KiB, 1 MiB, 1 GiB) are mostly zero bytes.
    #[inline(always)]
    pub fn xpow<C: Clmul>(&self, table: &XpowTable, e: u64) -> u64 {
        if e == 0 {
            return 1;
        }
        let low = (e.trailing_zeros() / 8) as usize;
        let high = ((63 - e.leading_zeros()) / 8) as usize;
        let f = |i: usize| table[i][((e >> (8 * i)) & 0xff) as usize];
        match high - low {
            0 => f(low),
            1 => self.mul::<C>(f(low), f(low + 1)),
            2 => self.mul::<C>(self.mul::<C>(f(low), f(low + 1)), f(low + 2)),
            3 => self.mul::<C>(self.mul::<C>(f(low), f(low + 1)), self.mul::<C>(f(low + 2), f(low + 3))),
            _ => self.xpow_bounded::<C>(table, e, e),
        }
    }

    /// [`Modulus::xpow`] for an `e <= bound`: the tree's shape follows
    /// `bound`, so callers with a fixed bound (a bitmap's size) get a
    /// predictable branch however `e` varies.
    #[inline(always)]
    pub fn xpow_bounded<C: Clmul>(&self, table: &XpowTable, e: u64, bound: u64) -> u64 {
        debug_assert!(e <= bound);
        let f = |i: usize| table[i][((e >> (8 * i)) & 0xff) as usize];
        if bound >> 16 == 0 {
            return self.mul::<C>(f(0), f(1));
        }
        if bound >> 24 == 0 {
            return self.mul::<C>(self.mul::<C>(f(0), f(1)), f(2));
        }
        let low = self.mul::<C>(self.mul::<C>(f(0), f(1)), self.mul::<C>(f(2), f(3)));
        if bound >> 32 == 0 {
            return low;
        }
        if bound >> 40 == 0 {
            return self.mul::<C>(low, f(4));
        }
        let high = self.mul::<C>(self.mul::<C>(f(4), f(5)), self.mul::<C>(f(6), f(7)));
        self.mul::<C>(low, high)
    }

    /// `a * x^e mod G` for `e <= bound`, with `a` as one more leaf of the
    /// product tree (so the multiply costs no extra level) and the tree's
    /// shape following `bound`: depth 2 below 2^24, 3 below 2^56.
    #[inline(always)]
    pub fn mul_xpow_bounded<C: Clmul>(&self, table: &XpowTable, a: u64, e: u64, bound: u64) -> u64 {
        debug_assert!(e <= bound);
        let f = |i: usize| table[i][((e >> (8 * i)) & 0xff) as usize];
        let low = self.mul::<C>(self.mul::<C>(a, f(0)), self.mul::<C>(f(1), f(2)));
        if bound >> 24 == 0 {
            return low;
        }
        if bound >> 40 == 0 {
            return self.mul::<C>(low, self.mul::<C>(f(3), f(4)));
        }
        let high = self.mul::<C>(self.mul::<C>(f(3), f(4)), self.mul::<C>(f(5), f(6)));
        let product = self.mul::<C>(low, high);
        if bound >> 56 == 0 {
            product
        } else {
            self.mul::<C>(product, f(7))
        }
    }
}

/// `floor(x^(2d) / G)` as a (d+1)-bit value, by long division with a sliding
/// window over the dividend's top d+1 coefficients.
const fn barrett_mu(degree: u32, low: u64) -> u128 {
    let d = degree;
    let g_full: u128 = (1u128 << d) | low as u128;
    let window_mask: u128 = (1u128 << (d + 1)) - 1;
    let mut window: u128 = 1u128 << d; // coefficient of x^(2d) at the top
    let mut quotient: u128 = 0;
    let mut i = 2 * d;
    loop {
        if (window >> d) & 1 == 1 {
            quotient |= 1u128 << (i - d);
            window ^= g_full;
        }
        if i == d {
            break;
        }
        window = (window << 1) & window_mask;
        i -= 1;
    }
    quotient
}

/// Inverse of `a` modulo G by the extended Euclidean algorithm. Panics (at
/// compile time) if `a` and G share a factor.
const fn inverse_mod(m: &Modulus, a: u64) -> u64 {
    let mut r0: u128 = (1u128 << m.degree) | m.low as u128;
    let mut r1: u128 = a as u128;
    let (mut s0, mut s1): (u128, u128) = (0, 1);
    while r1 != 0 {
        // One long division r0 = q*r1 + r, folded into the Bezout update.
        let mut q: u128 = 0;
        let mut r = r0;
        while r != 0 && deg(r) >= deg(r1) {
            let shift = (deg(r) - deg(r1)) as u32;
            q |= 1u128 << shift;
            r ^= r1 << shift;
        }
        let qs1 = clmul_u128_small(q, s1);
        r0 = r1;
        r1 = r;
        let next = s0 ^ qs1;
        s0 = s1;
        s1 = next;
    }
    assert!(r0 == 1, "polynomial not invertible modulo G");
    // s0 has degree < degree(G); reduce defensively anyway.
    let mut s = s0;
    let g: u128 = (1u128 << m.degree) | m.low as u128;
    while s != 0 && deg(s) >= m.degree as i32 {
        s ^= g << (deg(s) - m.degree as i32);
    }
    s as u64
}

/// Degree of a nonzero polynomial.
const fn deg(p: u128) -> i32 {
    127 - p.leading_zeros() as i32
}

/// Carry-less product of two polynomials whose product fits in 128 bits.
const fn clmul_u128_small(a: u128, b: u128) -> u128 {
    if a >> 64 == 0 && b >> 64 == 0 {
        return clmul_slow(a as u64, b as u64);
    }
    let mut acc = 0u128;
    let mut i = 0;
    while i < 128 {
        if (b >> i) & 1 == 1 {
            acc ^= a << i;
        }
        i += 1;
    }
    acc
}

/// Exact division of `r` by `(x + 1)`; the caller guarantees divisibility.
/// With `r = q*(x+1)`, `q_i` is the XOR of all `r_j` for `j > i`.
#[inline(always)]
pub const fn div_x_plus_1_shifts(r: u64) -> u64 {
    let mut s = r;
    s ^= s >> 1;
    s ^= s >> 2;
    s ^= s >> 4;
    s ^= s >> 8;
    s ^= s >> 16;
    s ^= s >> 32;
    s >> 1
}

/// A carry-less 64x64 -> 128-bit multiplier.
pub trait Clmul: Sized {
    /// The 128-bit carry-less product of `a` and `b`.
    fn clmul(a: u64, b: u64) -> u128;

    /// Exact division by `x + 1`. Because `x + 1 | r`, `r` has even parity, so
    /// the quotient's bit `i` (XOR of `r_j`, `j > i`) equals the XOR of
    /// `r_j`, `j <= i`: the low half of `r` times all-ones.
    #[inline(always)]
    fn div_x_plus_1(r: u64) -> u64 {
        Self::clmul(r, u64::MAX) as u64
    }

    /// `a * b mod m`; Barrett reduction unless a backend keeps it in registers.
    #[inline(always)]
    fn mulmod(m: &Modulus, a: u64, b: u64) -> u64 {
        m.mul_barrett::<Self>(a, b)
    }
}

/// Portable carry-less multiply, four bits of `b` per step.
pub struct PortableClmul;

impl Clmul for PortableClmul {
    #[inline(always)]
    fn clmul(a: u64, b: u64) -> u128 {
        // table[n] = a * n for every 4-bit n, then one nibble of b per step.
        let a = a as u128;
        let mut table = [0u128; 16];
        let mut n = 1;
        while n < 16 {
            table[n] = if n & 1 == 1 { table[n - 1] ^ a } else { table[n >> 1] << 1 };
            n += 1;
        }
        let mut acc = 0u128;
        let mut shift = 64;
        while shift > 0 {
            shift -= 4;
            acc = (acc << 4) ^ table[((b >> shift) & 0xf) as usize];
        }
        acc
    }
}

/// Bit-serial carry-less multiply (compile-time helper and test reference).
pub const fn clmul_slow(a: u64, b: u64) -> u128 {
    let mut acc = 0u128;
    let mut i = 0;
    while i < 64 {
        if (b >> i) & 1 == 1 {
            acc ^= (a as u128) << i;
        }
        i += 1;
    }
    acc
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const CRC32C: Modulus = Modulus::new(32, 0x1EDC6F41);
    const CRC64: Modulus = Modulus::new(64, 0xAD93D23594C93659);
    const CRC16: Modulus = Modulus::new(16, 0x8BB7);
    const CRC32C_TIMES_X1: Modulus = Modulus::new(33, 0x1EDC6F41 ^ (0x1EDC6F41 << 1) ^ (1 << 32));

    fn moduli() -> [Modulus; 4] {
        [CRC32C, CRC64, CRC16, CRC32C_TIMES_X1]
    }

    #[test]
    fn barrett_mu_is_the_quotient() {
        // mu * G + rem = x^(2d) with deg rem < d, checked in u128 for d <= 32.
        for m in [CRC32C, CRC16, CRC32C_TIMES_X1] {
            let d = m.degree;
            let mu = (1u128 << d) | m.mu_low as u128;
            let g = (1u64 << d) | m.low;
            let prod = clmul_slow(mu as u64, g) ^ if mu >> 64 != 0 { (g as u128) << 64 } else { 0 };
            let rem = prod ^ (1u128 << (2 * d));
            assert!(rem >> d == 0, "degree {d}: remainder {rem:#x} too large");
        }
    }

    #[test]
    fn inverse_of_x() {
        for m in moduli() {
            assert_eq!(m.mul_slow(m.inv_x(), m.mul_x(1)), 1);
        }
    }

    proptest! {
        #[test]
        fn portable_clmul_matches_bit_serial(a: u64, b: u64) {
            prop_assert_eq!(PortableClmul::clmul(a, b), clmul_slow(a, b));
        }

        #[test]
        fn barrett_matches_bit_serial(a: u64, b: u64) {
            for m in moduli() {
                let (a, b) = (a & m.mask(), b & m.mask());
                prop_assert_eq!(m.mul::<PortableClmul>(a, b), m.mul_slow(a, b));
            }
        }

        #[test]
        fn xpow_table_matches_square_and_multiply(e: u64) {
            let table = CRC32C.xpow_table();
            prop_assert_eq!(CRC32C.xpow::<PortableClmul>(&table, e), CRC32C.pow_x_slow(e as u128));
            let small = e >> 40;
            prop_assert_eq!(CRC32C.xpow::<PortableClmul>(&table, small), CRC32C.pow_x_slow(small as u128));
        }

        #[test]
        fn mul_xpow_matches_square_and_multiply(a: u64, e: u64, shift in 0u32..64, zero_bytes in 0u32..8) {
            let e = (e >> shift) << (8 * zero_bytes);
            for m in moduli() {
                let table = m.xpow_table();
                let a = a & m.mask();
                prop_assert_eq!(m.mul_xpow_bounded::<PortableClmul>(&table, a, e, e), m.mul_slow(a, m.pow_x_slow(e as u128)));
                prop_assert_eq!(m.xpow::<PortableClmul>(&table, e), m.pow_x_slow(e as u128));
                let bound = e.saturating_mul(1 + (a & 0xffff)).max(e);
                prop_assert_eq!(m.xpow_bounded::<PortableClmul>(&table, e, bound), m.pow_x_slow(e as u128));
                prop_assert_eq!(m.mul_xpow_bounded::<PortableClmul>(&table, a, e, bound), m.mul_slow(a, m.pow_x_slow(e as u128)));
            }
        }

        #[test]
        fn div_x_plus_1_inverts_multiplication(q in 0u64..(1 << 63)) {
            let r = q ^ (q << 1);
            prop_assert_eq!(div_x_plus_1_shifts(r), q);
            prop_assert_eq!(PortableClmul::div_x_plus_1(r), q);
        }
    }
}

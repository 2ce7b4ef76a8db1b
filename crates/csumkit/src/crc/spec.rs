//! CRC parameter sets and everything derived from them at compile time:
//! slicing tables, fold keys for the carry-less-multiply kernels, and the
//! `x^k` tables of the algebra. One `static Spec` per algorithm, here,
//! below both the public API and the `arch` kernels that use them.

use super::gf2::{Modulus, XpowTable};

/// Which algorithm a [`Spec`] describes; backends use it to pick
/// algorithm-specific instructions (the SSE4.2 `crc32` instruction is CRC32C only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// CRC-64/NVME.
    Crc64Nvme,
    /// CRC-16/T10-DIF.
    Crc16T10Dif,
}

/// Rows of the slicing table: 16 bytes are consumed per step.
pub const SLICE_ROWS: usize = 16;

/// `[lo, hi]` multipliers that fold a 128-bit chunk forward by a fixed
/// distance, in the layout the x86 kernels load directly.
pub type FoldKey = [u64; 2];

/// Fold keys for every distance the kernels use (`kN`: N bits).
#[allow(missing_docs)]
#[derive(Clone, Copy, Debug)]
pub struct FoldKeys {
    pub k128: FoldKey,
    pub k256: FoldKey,
    pub k384: FoldKey,
    pub k512: FoldKey,
    pub k768: FoldKey,
    pub k1024: FoldKey,
    pub k1536: FoldKey,
    pub k2048: FoldKey,
}

/// How `1 + x + ... + x^(m-1) = (x^m + 1) / (x + 1)` is reduced mod G.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // lives in a `static`, never moved
pub enum OnesRoute {
    /// `x + 1` is invertible mod G: multiply `x^m + 1` by its inverse.
    Inverse {
        /// `(x + 1)^-1 mod G`.
        inv_x_plus_1: u64,
    },
    /// `x + 1` divides G (CRC32C): compute `x^m mod G*(x+1)`, then divide
    /// exactly by `x + 1`. The quotient has degree `< width`, so it is reduced.
    Extended {
        /// `G * (x + 1)`.
        modulus: Modulus,
        /// `x^k` table modulo `G * (x + 1)`.
        xpow: XpowTable,
    },
}

/// A CRC algorithm, fully described. Register values (`u64`, low `width`
/// bits) use the algorithm's own bit order: reflected (LSB-first) for CRC32C
/// and CRC64-NVMe, natural (MSB-first) for CRC16-T10DIF.
#[derive(Debug)]
pub struct Spec {
    /// Which algorithm this is.
    pub algorithm: Algorithm,
    /// Short lowercase name (`crc32c`, `crc64nvme`, `crc16t10dif`).
    pub name: &'static str,
    /// Register width in bits: 16, 32 or 64.
    pub width: u32,
    /// Generator without its `x^width` term, natural bit order.
    pub poly: u64,
    /// LSB-first bit order (true for CRC32C and CRC64-NVMe).
    pub reflected: bool,
    /// Initial register value; equal to `xorout` for every algorithm here,
    /// which is what lets `update(crc, ..)` continue a finished checksum.
    pub init: u64,
    /// Final XOR.
    pub xorout: u64,
    /// Checksum of b"123456789" (published check value).
    pub check: u64,
    /// The generator as a [`Modulus`].
    pub modulus: Modulus,
    /// `table[j][b]`: register after byte `b` followed by `j` zero bytes, from 0.
    pub table: [[u64; 256]; SLICE_ROWS],
    /// Carry-less-multiply fold keys.
    pub fold: FoldKeys,
    /// `x^k mod G` table for the algebra.
    pub xpow: XpowTable,
    /// How runs of one-bits are reduced (for `flip_range`).
    pub ones: OnesRoute,
}

impl Spec {
    /// Builds a parameter set and all its tables (at compile time).
    #[allow(clippy::too_many_arguments)]
    pub const fn new(
        algorithm: Algorithm,
        name: &'static str,
        width: u32,
        poly: u64,
        reflected: bool,
        init: u64,
        check: u64,
    ) -> Self {
        assert!(width == 16 || width == 32 || width == 64);
        let modulus = Modulus::new(width, poly);
        let ones = if (poly.count_ones() + 1).is_multiple_of(2) {
            // G(1) = 0, so (x + 1) | G.
            let low_times_x1 = poly ^ (poly << 1) ^ (1u64 << width);
            OnesRoute::Extended {
                modulus: Modulus::new(width + 1, low_times_x1),
                xpow: Modulus::new(width + 1, low_times_x1).xpow_table(),
            }
        } else {
            OnesRoute::Inverse { inv_x_plus_1: modulus.inverse(0b11) }
        };
        Self {
            algorithm,
            name,
            width,
            poly,
            reflected,
            init,
            xorout: init,
            check,
            modulus,
            table: slicing_table(width, poly, reflected),
            fold: FoldKeys {
                k128: fold_key(&modulus, reflected, 128),
                k256: fold_key(&modulus, reflected, 256),
                k384: fold_key(&modulus, reflected, 384),
                k512: fold_key(&modulus, reflected, 512),
                k768: fold_key(&modulus, reflected, 768),
                k1024: fold_key(&modulus, reflected, 1024),
                k1536: fold_key(&modulus, reflected, 1536),
                k2048: fold_key(&modulus, reflected, 2048),
            },
            xpow: modulus.xpow_table(),
            ones,
        }
    }

    /// All-ones in the low `width` bits.
    #[inline(always)]
    pub const fn mask(&self) -> u64 {
        self.modulus.mask()
    }

    /// Register value (algorithm bit order) to polynomial (natural order).
    #[inline(always)]
    pub const fn reg_to_poly(&self, reg: u64) -> u64 {
        if self.reflected {
            reg.reverse_bits() >> (64 - self.width)
        } else {
            reg
        }
    }

    /// Polynomial (natural order) to register value (algorithm bit order).
    #[inline(always)]
    pub const fn poly_to_reg(&self, poly: u64) -> u64 {
        self.reg_to_poly(poly) // bit reversal within `width` bits is an involution
    }

    /// One byte through the register, bit order aware.
    #[inline(always)]
    pub fn update_byte(&self, state: u64, byte: u8) -> u64 {
        if self.reflected {
            (state >> 8) ^ self.table[0][((state ^ byte as u64) & 0xff) as usize]
        } else {
            let top = (state >> (self.width - 8)) ^ byte as u64;
            ((state << 8) & self.mask()) ^ self.table[0][(top & 0xff) as usize]
        }
    }

    /// Sixteen bytes through the register in one step (slicing-by-16).
    #[inline(always)]
    pub fn update_block16(&self, state: u64, block: &[u8; 16]) -> u64 {
        // Inject the register into the first width/8 bytes, then every byte
        // contributes independently (the CRC of the block from state 0 is linear).
        let mut first = u64::from_le_bytes(block[..8].try_into().unwrap());
        if self.reflected {
            first ^= state;
        } else {
            first ^= (state << (64 - self.width)).swap_bytes();
        }
        let mut bytes = *block;
        bytes[..8].copy_from_slice(&first.to_le_bytes());
        let mut acc = 0u64;
        for (k, &b) in bytes.iter().enumerate() {
            acc ^= self.table[15 - k][b as usize];
        }
        acc
    }

    /// Portable raw update: slicing-by-16, then byte at a time.
    #[inline]
    pub fn update_portable(&self, mut state: u64, data: &[u8]) -> u64 {
        let mut blocks = data.chunks_exact(16);
        for block in &mut blocks {
            state = self.update_block16(state, block.try_into().unwrap());
        }
        for &byte in blocks.remainder() {
            state = self.update_byte(state, byte);
        }
        state
    }
}

/// Slicing tables in the algorithm's register bit order.
const fn slicing_table(width: u32, poly: u64, reflected: bool) -> [[u64; 256]; SLICE_ROWS] {
    let mask = if width == 64 { u64::MAX } else { (1u64 << width) - 1 };
    let rpoly = poly.reverse_bits() >> (64 - width);
    let mut table = [[0u64; 256]; SLICE_ROWS];
    let mut b = 0;
    while b < 256 {
        let mut reg: u64 = if reflected { b as u64 } else { (b as u64) << (width - 8) };
        let mut bit = 0;
        while bit < 8 {
            reg = if reflected {
                if reg & 1 == 1 {
                    (reg >> 1) ^ rpoly
                } else {
                    reg >> 1
                }
            } else if (reg >> (width - 1)) & 1 == 1 {
                ((reg << 1) & mask) ^ poly
            } else {
                (reg << 1) & mask
            };
            bit += 1;
        }
        table[0][b] = reg;
        b += 1;
    }
    let mut row = 1;
    while row < SLICE_ROWS {
        let mut b = 0;
        while b < 256 {
            let prev = table[row - 1][b];
            table[row][b] = if reflected {
                (prev >> 8) ^ table[0][(prev & 0xff) as usize]
            } else {
                ((prev << 8) & mask) ^ table[0][((prev >> (width - 8)) & 0xff) as usize]
            };
            b += 1;
        }
        row += 1;
    }
    table
}

/// Multipliers that fold a 128-bit chunk forward by `distance` bits.
///
/// Natural order: the chunk is `hi*x^64 + lo`; folding multiplies `hi` by
/// `x^(64+D) mod G` and `lo` by `x^D mod G`. Reflected order: the register's
/// low qword holds the high-degree half, and PCLMULQDQ of bit-reversed
/// operands yields the product times `x`, so the exponents drop by one and the
/// constants are bit-reversed.
const fn fold_key(m: &Modulus, reflected: bool, distance: u128) -> FoldKey {
    if reflected {
        [m.pow_x_slow(64 + distance - 1).reverse_bits(), m.pow_x_slow(distance - 1).reverse_bits()]
    } else {
        [m.pow_x_slow(distance), m.pow_x_slow(64 + distance)]
    }
}

/// The CRC-32C parameter set.
pub static CRC32C: Spec = Spec::new(Algorithm::Crc32c, "crc32c", 32, 0x1EDC_6F41, true, 0xFFFF_FFFF, 0xE306_9283);
/// The CRC-64/NVME parameter set.
pub static CRC64NVME: Spec =
    Spec::new(Algorithm::Crc64Nvme, "crc64nvme", 64, 0xAD93_D235_94C9_3659, true, u64::MAX, 0xAE8B_1486_0A79_9888);
/// The CRC-16/T10-DIF parameter set.
pub static CRC16T10DIF: Spec = Spec::new(Algorithm::Crc16T10Dif, "crc16t10dif", 16, 0x8BB7, false, 0, 0xD0DB);

//! Directory-index (htree) name hashes, as ext4 computes them
//! (`fs/ext4/hash.c`): the legacy hash, half-MD4 and TEA, each in a signed
//! and an unsigned-char flavour chosen by the superblock's flags, seeded
//! with `s_hash_seed`. Lookups hash the name and walk the index to the one
//! leaf block that can hold it.

use super::fields::{S_FLAGS, S_HASH_SEED};
use crate::le::le32;

/// `dx_root_info.hash_version` values (the unsigned ones are +3).
pub const LEGACY: u8 = 0;
/// Half-MD4 (mke2fs's default).
pub const HALF_MD4: u8 = 1;
/// TEA.
pub const TEA: u8 = 2;

/// The superblock's hash settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashSetup {
    /// `s_hash_seed`; all zero means the MD4 initial values.
    pub seed: [u32; 4],
    /// `s_def_hash_version`.
    pub default_version: u8,
    /// `EXT2_FLAGS_UNSIGNED_HASH` set: names hash as unsigned chars.
    pub unsigned: bool,
}

impl HashSetup {
    /// From the 1024 superblock bytes.
    pub fn from_superblock(sb: &[u8]) -> HashSetup {
        let word = |i: usize| le32(sb, S_HASH_SEED + 4 * i);
        let flags = le32(sb, S_FLAGS);
        HashSetup { seed: [word(0), word(1), word(2), word(3)], default_version: sb[0xFC], unsigned: flags & 0x2 != 0 }
    }

    /// The (major, minor) hash of `name` under a directory's
    /// `hash_version`; `None` for a version this code does not know
    /// (siphash needs the encryption key).
    pub fn hash(&self, version: u8, name: &[u8]) -> Option<(u32, u32)> {
        let mut buf =
            if self.seed == [0; 4] { [0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476] } else { self.seed };
        let (hash, minor) = match version {
            LEGACY => (legacy(name, self.unsigned), 0),
            HALF_MD4 => {
                for chunk in chunks(name, 32) {
                    half_md4(&mut buf, &words::<8>(chunk, name.len() - offset_of(name, chunk), self.unsigned));
                }
                (buf[1], buf[2])
            }
            TEA => {
                for chunk in chunks(name, 16) {
                    tea(&mut buf, &words::<4>(chunk, name.len() - offset_of(name, chunk), self.unsigned));
                }
                (buf[0], buf[1])
            }
            _ => return None,
        };
        let hash = hash & !1;
        // 0xFFFFFFFE is the end-of-directory cookie: never a name's hash.
        Some((if hash == 0xFFFF_FFFE { 0xFFFF_FFFC } else { hash }, minor))
    }
}

/// The name in pieces of `size` bytes; an empty name is one empty piece.
fn chunks(name: &[u8], size: usize) -> impl Iterator<Item = &[u8]> {
    let count = name.len().div_ceil(size).max(1);
    (0..count).map(move |i| &name[(i * size).min(name.len())..((i + 1) * size).min(name.len())])
}

fn offset_of(name: &[u8], chunk: &[u8]) -> usize {
    chunk.as_ptr() as usize - name.as_ptr() as usize
}

/// `str2hashbuf`: big-endian words of the bytes, padded with the length
/// (`left`: bytes from this piece to the end of the name).
fn words<const N: usize>(piece: &[u8], left: usize, unsigned: bool) -> [u32; N] {
    let byte = |b: u8| if unsigned { u32::from(b) } else { i32::from(b as i8) as u32 };
    let pad = {
        let p = (left as u32) | (left as u32) << 8;
        p | p << 16
    };
    let len = left.min(N * 4);
    let mut out = [pad; N];
    let mut i = 0;
    while (i + 1) * 4 <= len {
        let b = &piece[4 * i..4 * i + 4];
        out[i] =
            (byte(b[0]) << 24).wrapping_add(byte(b[1]) << 16).wrapping_add(byte(b[2]) << 8).wrapping_add(byte(b[3]));
        i += 1;
    }
    if i < N {
        out[i] = piece[4 * i..len].iter().fold(pad, |v, &b| byte(b).wrapping_add(v << 8));
    }
    out
}

fn legacy(name: &[u8], unsigned: bool) -> u32 {
    let (mut h0, mut h1) = (0x12A3_FE2Du32, 0x37AB_E8F9u32);
    for &b in name {
        let c = if unsigned { i32::from(b) } else { i32::from(b as i8) };
        let mut h = h1.wrapping_add(h0 ^ (c.wrapping_mul(7_152_373) as u32));
        if h & 0x8000_0000 != 0 {
            h = h.wrapping_sub(0x7FFF_FFFF);
        }
        h1 = h0;
        h0 = h;
    }
    h0 << 1
}

fn tea(buf: &mut [u32; 4], input: &[u32; 4]) {
    const DELTA: u32 = 0x9E37_79B9;
    let (mut sum, mut b0, mut b1) = (0u32, buf[0], buf[1]);
    let [a, b, c, d] = *input;
    for _ in 0..16 {
        sum = sum.wrapping_add(DELTA);
        b0 = b0.wrapping_add((b1 << 4).wrapping_add(a) ^ b1.wrapping_add(sum) ^ (b1 >> 5).wrapping_add(b));
        b1 = b1.wrapping_add((b0 << 4).wrapping_add(c) ^ b0.wrapping_add(sum) ^ (b0 >> 5).wrapping_add(d));
    }
    buf[0] = buf[0].wrapping_add(b0);
    buf[1] = buf[1].wrapping_add(b1);
}

/// Three rounds of MD4 over 8 words, as ext4 cuts it down.
fn half_md4(buf: &mut [u32; 4], x: &[u32; 8]) {
    let f = |x: u32, y: u32, z: u32| z ^ (x & (y ^ z));
    let g = |x: u32, y: u32, z: u32| (x & y).wrapping_add((x ^ y) & z);
    let h = |x: u32, y: u32, z: u32| x ^ y ^ z;
    const K2: u32 = 0o13240474631;
    const K3: u32 = 0o15666365641;
    let [mut a, mut b, mut c, mut d] = *buf;
    // (function, word index, constant, shift) for the 24 steps; the
    // registers rotate a, d, c, b.
    let steps: [(u8, usize, u32, u32); 24] = [
        (0, 0, 0, 3),
        (0, 1, 0, 7),
        (0, 2, 0, 11),
        (0, 3, 0, 19),
        (0, 4, 0, 3),
        (0, 5, 0, 7),
        (0, 6, 0, 11),
        (0, 7, 0, 19),
        (1, 1, K2, 3),
        (1, 3, K2, 5),
        (1, 5, K2, 9),
        (1, 7, K2, 13),
        (1, 0, K2, 3),
        (1, 2, K2, 5),
        (1, 4, K2, 9),
        (1, 6, K2, 13),
        (2, 3, K3, 3),
        (2, 7, K3, 9),
        (2, 2, K3, 11),
        (2, 6, K3, 15),
        (2, 1, K3, 3),
        (2, 5, K3, 9),
        (2, 0, K3, 11),
        (2, 4, K3, 15),
    ];
    for (i, &(func, word, k, s)) in steps.iter().enumerate() {
        let (t, p, q, r) = match i % 4 {
            0 => (&mut a, b, c, d),
            1 => (&mut d, a, b, c),
            2 => (&mut c, d, a, b),
            _ => (&mut b, c, d, a),
        };
        let mix = match func {
            0 => f(p, q, r),
            1 => g(p, q, r),
            _ => h(p, q, r),
        };
        *t = t.wrapping_add(mix).wrapping_add(x[word].wrapping_add(k)).rotate_left(s);
    }
    buf[0] = buf[0].wrapping_add(a);
    buf[1] = buf[1].wrapping_add(b);
    buf[2] = buf[2].wrapping_add(c);
    buf[3] = buf[3].wrapping_add(d);
}

//! The checksums of the small ext4 structures, one definition for the
//! checker and for csumfs's writer: an inode's (seeded with its number and
//! generation, `i_checksum_lo`/`_hi` read as zero) and a group
//! descriptor's (seeded with the group number, `bg_checksum` read as zero,
//! 16 bits kept) — the kernel's `ext4_inode_csum` and
//! `ext4_group_desc_csum`.

use super::fields::I_EXTRA_ISIZE;
use crate::crc32c;
use crate::le::le16;

/// `i_checksum_lo`'s offset in an inode.
pub const INODE_CSUM_LO: usize = 0x7C;
/// `i_checksum_hi`'s offset, inside the extra fields.
pub const INODE_CSUM_HI: usize = 0x82;
/// `bg_checksum`'s offset in a group descriptor.
pub const DESC_CSUM: usize = 0x1E;

/// Bytes of a directory leaf's checksum tail (`struct ext4_dir_entry_tail`):
/// a fake entry of inode 0, rec_len 12, name_len 0, file type
/// [`DIR_TAIL_FT`], then the leaf's CRC32C.
pub const DIR_TAIL_BYTES: usize = 12;
/// `EXT4_FT_DIR_CSUM`, the tail's file type.
pub const DIR_TAIL_FT: u8 = 0xDE;

/// Whether a directory leaf block ends in a checksum tail.
pub fn has_dir_tail(block: &[u8]) -> bool {
    let Some(at) = block.len().checked_sub(DIR_TAIL_BYTES) else { return false };
    let tail = &block[at..];
    crate::le::le32(tail, 0) == 0
        && crate::le::le16(tail, 4) == DIR_TAIL_BYTES as u16
        && tail[6] == 0
        && tail[7] == DIR_TAIL_FT
}

/// Writes an empty checksum tail at the end of `block` (its CRC is the
/// caller's to store in the last 4 bytes).
pub fn put_dir_tail(block: &mut [u8]) {
    let at = block.len() - DIR_TAIL_BYTES;
    block[at..].fill(0);
    crate::le::put16(block, at + 4, DIR_TAIL_BYTES as u16);
    block[at + 7] = DIR_TAIL_FT;
}

/// Inodes up to this size are summed in one call over a copy with their
/// checksum fields zeroed: one pass instead of six short ones, each of
/// which pays the engine's dispatch and tail handling.
const COPY_MAX: usize = 512;

/// The seed of inode `ino`'s checksums (its own and those of the blocks it
/// owns): the CRC of its number and `i_generation` from the filesystem's.
pub fn inode_seed(fs_seed: u32, ino: u32, raw: &[u8]) -> u32 {
    let mut number_and_generation = [0u8; 8];
    number_and_generation[..4].copy_from_slice(&ino.to_le_bytes());
    number_and_generation[4..].copy_from_slice(&raw[0x64..0x68]);
    crc32c::raw_update(fs_seed, &number_and_generation)
}

/// Whether the inode has room for `i_checksum_hi`: a large inode whose
/// `i_extra_isize` reaches past it. Without it the checksum is 16 bits.
pub fn inode_has_csum_hi(raw: &[u8]) -> bool {
    raw.len() > 128 && 128 + usize::from(le16(raw, I_EXTRA_ISIZE)) >= INODE_CSUM_HI + 2
}

/// (stored, computed) checksum of the inode `raw` (at least 128 bytes)
/// from its `seed` ([`inode_seed`]); both 16 bits when it has no room for
/// the high half.
pub fn inode_checksum(raw: &[u8], seed: u32) -> (u32, u32) {
    assert!(raw.len() >= 128, "an inode is at least 128 bytes, not {}", raw.len());
    let fits_hi = inode_has_csum_hi(raw);
    let mut crc = if raw.len() <= COPY_MAX {
        let mut copy = [0u8; COPY_MAX];
        let copy = &mut copy[..raw.len()];
        copy.copy_from_slice(raw);
        copy[INODE_CSUM_LO..INODE_CSUM_LO + 2].fill(0);
        if fits_hi {
            copy[INODE_CSUM_HI..INODE_CSUM_HI + 2].fill(0);
        }
        crc32c::raw_update(seed, copy)
    } else {
        let crc = crc32c::raw_update(seed, &raw[..INODE_CSUM_LO]);
        let crc = crc32c::raw_update(crc, &[0, 0]);
        let crc = crc32c::raw_update(crc, &raw[INODE_CSUM_LO + 2..INODE_CSUM_HI]);
        if fits_hi {
            let crc = crc32c::raw_update(crc, &[0, 0]);
            crc32c::raw_update(crc, &raw[INODE_CSUM_HI + 2..])
        } else {
            crc32c::raw_update(crc, &raw[INODE_CSUM_HI..])
        }
    };
    let mut stored = u32::from(le16(raw, INODE_CSUM_LO));
    if fits_hi {
        stored |= u32::from(le16(raw, INODE_CSUM_HI)) << 16;
    } else {
        crc &= 0xFFFF;
    }
    (stored, crc)
}

/// Group `number`'s descriptor checksum (the low 16 bits `bg_checksum`
/// keeps) over `desc` with `bg_checksum` read as zero — one call over a
/// copy for the usual 32 and 64 bytes.
pub fn descriptor_checksum(fs_seed: u32, number: u32, desc: &[u8]) -> u32 {
    assert!(desc.len() >= 32, "a group descriptor is at least 32 bytes, not {}", desc.len());
    let crc = if desc.len() <= 64 {
        let mut copy = [0u8; 4 + 64];
        copy[..4].copy_from_slice(&number.to_le_bytes());
        copy[4..4 + desc.len()].copy_from_slice(desc);
        copy[4 + DESC_CSUM..4 + DESC_CSUM + 2].fill(0);
        crc32c::raw_update(fs_seed, &copy[..4 + desc.len()])
    } else {
        let crc = crc32c::raw_update(fs_seed, &number.to_le_bytes());
        let crc = crc32c::raw_update(crc, &desc[..DESC_CSUM]);
        let crc = crc32c::raw_update(crc, &[0, 0]);
        crc32c::raw_update(crc, &desc[DESC_CSUM + 2..])
    };
    crc & 0xFFFF
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Byte at a time over `bytes` with the bytes where `zero` holds read
    /// as zero.
    fn by_definition(seed: u32, bytes: &[u8], zero: impl Fn(usize) -> bool) -> u32 {
        bytes.iter().enumerate().fold(seed, |crc, (i, &b)| {
            let b = if zero(i) { 0 } else { b };
            crc32c::raw_update(crc, &[b])
        })
    }

    fn filled(size: usize, fill: u64) -> Vec<u8> {
        (0..size as u64).map(|i| (fill.rotate_left(i as u32 % 64) ^ i) as u8).collect()
    }

    proptest! {
        /// Every inode size (128 to 1024: the one-call copy and the
        /// piecewise path past 512) and every `i_extra_isize` around the
        /// high half.
        #[test]
        fn the_inode_checksum_matches_its_definition(
            size in prop::sample::select(vec![128usize, 160, 256, 512, 513, 1024]),
            extra in prop::sample::select(vec![0u16, 2, 3, 4, 5, 28, 32, 400]),
            seed in any::<u32>(),
            fill in any::<u64>(),
        ) {
            let mut raw = filled(size, fill);
            if size > 128 {
                raw[0x80..0x82].copy_from_slice(&extra.to_le_bytes());
            }
            let fits_hi = size > 128 && 128 + usize::from(extra) >= 0x84;
            prop_assert_eq!(inode_has_csum_hi(&raw), fits_hi);
            let crc = if fits_hi {
                by_definition(seed, &raw, |i| (0x7C..0x7E).contains(&i) || (0x82..0x84).contains(&i))
            } else {
                by_definition(seed, &raw, |i| (0x7C..0x7E).contains(&i)) & 0xFFFF
            };
            let stored = u32::from(le16(&raw, 0x7C)) | if fits_hi { u32::from(le16(&raw, 0x82)) << 16 } else { 0 };
            prop_assert_eq!(inode_checksum(&raw, seed), (stored, crc));
        }

        /// 32- and 64-byte descriptors (one call) and larger ones (piecewise).
        #[test]
        fn the_descriptor_checksum_matches_its_definition(
            size in prop::sample::select(vec![32usize, 64, 128, 1024]),
            seed in any::<u32>(),
            number in any::<u32>(),
            fill in any::<u64>(),
        ) {
            let desc = filled(size, fill);
            let mut whole = number.to_le_bytes().to_vec();
            whole.extend_from_slice(&desc);
            let crc = by_definition(seed, &whole, |i| (4 + 0x1E..4 + 0x20).contains(&i)) & 0xFFFF;
            prop_assert_eq!(descriptor_checksum(seed, number, &desc), crc);
        }
    }

    #[test]
    fn the_inode_seed_is_the_crc_of_number_and_generation() {
        let mut raw = vec![0u8; 256];
        raw[0x64..0x68].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
        let by_hand = by_definition(0x1234_5678, &[12, 0, 0, 0, 0xEF, 0xBE, 0xAD, 0xDE], |_| false);
        assert_eq!(inode_seed(0x1234_5678, 12, &raw), by_hand);
    }
}

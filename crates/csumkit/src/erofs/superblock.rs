//! The erofs superblock: 128 bytes at byte 1024 of block 0.
//!
//! | offset | size | field                                   |
//! |-------:|-----:|-----------------------------------------|
//! | 0      | 4    | `magic` 0xE0F5E1E2                      |
//! | 4      | 4    | `checksum` (raw CRC32C, see below)      |
//! | 8      | 4    | `feature_compat`                        |
//! | 12     | 1    | `blkszbits`                             |
//! | 13     | 1    | `sb_extslots`                           |
//! | 14     | 2    | `root_nid` (48bit: `blocks_hi`)         |
//! | 16     | 8    | `inos`                                  |
//! | 36     | 4    | `blocks`                                |
//! | 40     | 4    | `meta_blkaddr`                          |
//! | 44     | 4    | `xattr_blkaddr`                         |
//! | 48     | 16   | `uuid`                                  |
//! | 80     | 4    | `feature_incompat`                      |
//! | 90     | 1    | `dirblkbits`                            |
//! | 91     | 1    | `xattr_prefix_count`                    |
//! | 92     | 4    | `xattr_prefix_start` (in 4-byte units)  |
//! | 96     | 8    | `packed_nid`                            |
//! | 104    | 1    | `xattr_filter_reserved`                 |
//! | 112    | 8    | `rootnid_8b` (48bit, when nonzero)      |
//! | 128    | 8    | `metabox_nid` (metabox; `sb_extslots` ≥ 1) |
//!
//! With `SB_CHKSUM` (compat 0x1), `checksum` is the raw CRC32C (seed
//! `!0`, no final inversion: the kernel's `crc32c()`) of the bytes from
//! 1024 with the checksum field read as zero: to the end of block 0 with
//! blocks over 1 KiB, else one block's worth (`[1024, 1024 + block size)`,
//! as the kernel's `erofs_superblock_csum_verify` takes it: with 512 B and
//! 1 KiB blocks the superblock is not in block 0).

use super::corrupt;
use crate::le::{le16, le32, le64};
use crate::{crc32c, Error};

/// Byte offset of the superblock.
pub const SUPER_OFFSET: usize = 1024;
/// `EROFS_SUPER_MAGIC_V1`.
pub const MAGIC: u32 = 0xE0F5_E1E2;
/// `EROFS_FEATURE_COMPAT_SB_CHKSUM`.
pub const COMPAT_SB_CHKSUM: u32 = 0x1;
/// `EROFS_FEATURE_COMPAT_PLAIN_XATTR_PFX`: long prefixes in the metadata
/// area even when a packed inode exists.
pub const COMPAT_PLAIN_XATTR_PFX: u32 = 0x10;
/// Incompat features whose metadata this reader understands (zero padding,
/// compression configs, chunked files, device table, tail packing,
/// fragments, dedupe, long xattr prefixes, the 48-bit layout, metabox).
/// Later ones move inodes or names, so images with them are refused.
pub const INCOMPAT_KNOWN: u32 = 0x1FF;
/// `EROFS_FEATURE_INCOMPAT_48BIT`: an 8-byte root nid (`rootnid_8b`), block
/// counts and start blocks with 16 more high bits.
pub const INCOMPAT_48BIT: u32 = 0x80;
/// `EROFS_FEATURE_INCOMPAT_METABOX`: inodes whose nid has bit 63 set live
/// in the data of the metabox inode (`mkfs.erofs -m`).
pub const INCOMPAT_METABOX: u32 = 0x100;
/// `EROFS_FEATURE_COMPAT_SHARED_EA_IN_METABOX`: the shared xattr area is
/// in the metabox too.
pub const COMPAT_SHARED_EA_IN_METABOX: u32 = 0x8;
const CHECKSUM_AT: usize = 4;

/// The fields csumkit uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// `feature_compat`.
    pub feature_compat: u32,
    /// `feature_incompat`.
    pub feature_incompat: u32,
    /// Block size in bytes.
    pub block_size: u32,
    /// Root directory nid.
    pub root_nid: u64,
    /// Inode count.
    pub inos: u64,
    /// Block count.
    pub blocks: u32,
    /// First block of the inode area (nids count 32-byte slots from here).
    pub meta_blkaddr: u32,
    /// First block of the shared xattr area.
    pub xattr_blkaddr: u32,
    /// Volume UUID.
    pub uuid: [u8; 16],
    /// Number of long xattr prefixes.
    pub xattr_prefix_count: u8,
    /// Where the long prefixes start, in 4-byte units.
    pub xattr_prefix_start: u32,
    /// The packed inode's nid (0: none).
    pub packed_nid: u64,
    /// Nonzero makes the kernel ignore the name filter.
    pub xattr_filter_reserved: u8,
    /// The metabox inode's nid (metabox images; else 0).
    pub metabox_nid: u64,
    /// Stored checksum.
    pub checksum: u32,
}

impl Superblock {
    /// Parses and validates the superblock of `image`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a short image, bad magic, impossible sizes or
    /// a wrong checksum; [`Error::Invalid`] for features this reader lacks.
    pub fn parse(image: &[u8]) -> Result<Superblock, Error> {
        if image.len() < SUPER_OFFSET + 128 {
            return Err(corrupt("superblock", format!("image is {} bytes, too short for a superblock", image.len())));
        }
        let sb = &image[SUPER_OFFSET..SUPER_OFFSET + 128];
        if le32(sb, 0) != MAGIC {
            let ext4 = image.len() >= SUPER_OFFSET + 0x3A && le16(&image[SUPER_OFFSET..], 0x38) == 0xEF53;
            let detail = if ext4 {
                "an ext4 image, not erofs: use `csumkit ext4`".to_string()
            } else {
                format!("not an erofs image (superblock magic {:#010x}; erofs has {MAGIC:#010x})", le32(sb, 0))
            };
            return Err(Error::Invalid { what: "image", detail });
        }
        let blkszbits = sb[12];
        if !(9..=16).contains(&blkszbits) {
            return Err(corrupt("superblock", format!("block size 2^{blkszbits} is outside 512 B..64 KiB")));
        }
        let parsed = Superblock {
            feature_compat: le32(sb, 8),
            feature_incompat: le32(sb, 80),
            block_size: 1 << blkszbits,
            // As the kernel: with 48bit, a nonzero `rootnid_8b` wins (mkfs
            // writes it only when the nid or block count outgrows 16/32 bits).
            root_nid: match le64(sb, 112) {
                wide if le32(sb, 80) & INCOMPAT_48BIT != 0 && wide != 0 => wide,
                _ => u64::from(le16(sb, 14)),
            },
            inos: le64(sb, 16),
            blocks: le32(sb, 36),
            meta_blkaddr: le32(sb, 40),
            xattr_blkaddr: le32(sb, 44),
            uuid: sb[48..64].try_into().expect("16 bytes"),
            xattr_prefix_count: sb[91],
            xattr_prefix_start: le32(sb, 92),
            packed_nid: le64(sb, 96),
            xattr_filter_reserved: sb[104],
            metabox_nid: 0,
            checksum: le32(sb, CHECKSUM_AT),
        };
        let unknown = parsed.feature_incompat & !INCOMPAT_KNOWN;
        if unknown != 0 {
            return Err(Error::Invalid {
                what: "erofs image",
                detail: format!(
                    "incompatible feature bits {unknown:#x} are not supported by this reader (make the image without them)"
                ),
            });
        }
        let mut parsed = parsed;
        if parsed.feature_incompat & INCOMPAT_METABOX != 0 {
            // Its nid is in the first extension slot.
            let extended = image.get(SUPER_OFFSET + 128..SUPER_OFFSET + 144).filter(|_| sb[13] >= 1);
            let slot = extended.ok_or_else(|| corrupt("superblock", "metabox without an extension slot".into()))?;
            parsed.metabox_nid = le64(slot, 0);
        }
        if sb[90] != 0 {
            return Err(Error::Invalid { what: "erofs image", detail: "directory blocks larger than blocks".into() });
        }
        if parsed.has_checksum() {
            let computed = Superblock::compute_checksum(image, parsed.block_size)?;
            if computed != parsed.checksum {
                return Err(corrupt(
                    "superblock",
                    format!("checksum {:#010x}, computed {computed:#010x}", parsed.checksum),
                ));
            }
        }
        Ok(parsed)
    }

    /// True when `SB_CHKSUM` is set.
    pub fn has_checksum(&self) -> bool {
        self.feature_compat & COMPAT_SB_CHKSUM != 0
    }

    /// True when the kernel would use the per-inode name filters.
    pub fn uses_xattr_filter(&self) -> bool {
        self.feature_compat & crate::xattr_filter::FEATURE_COMPAT_XATTR_FILTER != 0 && self.xattr_filter_reserved == 0
    }

    /// End of the bytes the superblock checksum covers (they start at 1024):
    /// the end of block 0 with blocks over 1 KiB, else `1024 + block size`.
    pub fn checksum_end(block_size: u32) -> usize {
        let bs = block_size as usize;
        if bs > SUPER_OFFSET {
            bs
        } else {
            SUPER_OFFSET + bs
        }
    }

    /// The superblock checksum of `image` as it should be stored.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when the image ends before what the checksum covers.
    pub fn compute_checksum(image: &[u8], block_size: u32) -> Result<u32, Error> {
        let end = Superblock::checksum_end(block_size);
        if image.len() < end {
            return Err(corrupt(
                "superblock",
                format!("image is {} bytes, shorter than the {end} the superblock checksum covers", image.len()),
            ));
        }
        let covered = &image[SUPER_OFFSET..end];
        let crc = crc32c::raw_update(!0, &covered[..CHECKSUM_AT]);
        let crc = crc32c::raw_update(crc, &[0; 4]);
        Ok(crc32c::raw_update(crc, &covered[CHECKSUM_AT + 4..]))
    }

    /// Sets compat feature bits in `head` (the image's first
    /// [`checksum_end`](Self::checksum_end) bytes: the checksum covers those
    /// from 1024 on, and small images keep inodes there) and re-seals the
    /// checksum when the image has one.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when `head` is shorter than that.
    pub fn set_compat_and_seal(&self, head: &mut [u8], bits: u32) -> Result<(), Error> {
        let end = Superblock::checksum_end(self.block_size);
        if head.len() < end {
            return Err(corrupt("superblock", format!("{} bytes given, the checksum covers to {end}", head.len())));
        }
        let compat = self.feature_compat | bits;
        head[SUPER_OFFSET + 8..SUPER_OFFSET + 12].copy_from_slice(&compat.to_le_bytes());
        if self.has_checksum() {
            let crc = Superblock::compute_checksum(head, self.block_size)?;
            head[SUPER_OFFSET + CHECKSUM_AT..SUPER_OFFSET + CHECKSUM_AT + 4].copy_from_slice(&crc.to_le_bytes());
        }
        Ok(())
    }
}

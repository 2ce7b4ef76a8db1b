//! Where ext4 keeps its metadata: the superblock fields that fix the
//! geometry, and the group descriptor table (plain or `meta_bg`).
//!
//! | superblock offset | field |
//! |---:|---|
//! | 0x00 | `s_inodes_count` |
//! | 0x04 / 0x150 | `s_blocks_count_lo` / `_hi` |
//! | 0x14 | `s_first_data_block` |
//! | 0x18 / 0x1C | `s_log_block_size` / `s_log_cluster_size` |
//! | 0x20 / 0x24 / 0x28 | blocks / clusters / inodes per group |
//! | 0x38 | `s_magic` 0xEF53 |
//! | 0x58 | `s_inode_size` |
//! | 0x5C / 0x60 / 0x64 | compat / incompat / ro_compat features |
//! | 0x68 | `s_uuid` |
//! | 0xFE | `s_desc_size` |
//! | 0x104 | `s_first_meta_bg` |
//! | 0x24C | `s_backup_bgs[2]` (groups with backups, `sparse_super2`) |
//! | 0x175 | `s_checksum_type` (1 = CRC32C) |
//! | 0x270 | `s_checksum_seed` |
//! | 0x3FC | `s_checksum` = CRC32C(!0, bytes 0..0x3FC) |

use super::feature_bits::{
    COMPAT_SPARSE_SUPER2, INCOMPAT_64BIT, INCOMPAT_CSUM_SEED, INCOMPAT_META_BG, RO_COMPAT_BIGALLOC,
    RO_COMPAT_METADATA_CSUM, RO_COMPAT_SPARSE_SUPER,
};
use super::fields::{
    BG_BLOCK_BITMAP_HI, BG_BLOCK_BITMAP_LO, BG_FLAGS, BG_INODE_BITMAP_HI, BG_INODE_BITMAP_LO, BG_INODE_TABLE_HI,
    BG_INODE_TABLE_LO, S_BACKUP_BGS, S_BLOCKS_COUNT_HI, S_BLOCKS_COUNT_LO, S_BLOCKS_PER_GROUP, S_CHECKSUM_SEED,
    S_CLUSTERS_PER_GROUP, S_DESC_SIZE, S_FEATURE_COMPAT, S_FEATURE_INCOMPAT, S_FEATURE_RO_COMPAT, S_FIRST_DATA_BLOCK,
    S_FIRST_META_BG, S_INODES_COUNT, S_INODES_PER_GROUP, S_INODE_SIZE, S_LOG_BLOCK_SIZE, S_LOG_CLUSTER_SIZE, S_MAGIC,
    S_RESERVED_GDT_BLOCKS, S_UUID,
};
use super::{bytes, corrupt};
use crate::le::{le16, le32};
use crate::{crc32c, Error};

/// Byte offset of the superblock.
pub const SUPER_OFFSET: u64 = 1024;
const MAGIC: u16 = 0xEF53;

/// The geometry of an ext4 image with `metadata_csum`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Block size in bytes.
    pub block_size: u64,
    /// Blocks in the volume.
    pub blocks_count: u64,
    /// First data block (1 with 1 KiB blocks, else 0).
    pub first_data_block: u64,
    /// Blocks per group.
    pub blocks_per_group: u64,
    /// Clusters per group (bits in a block bitmap).
    pub clusters_per_group: u64,
    /// Inodes per group (bits in an inode bitmap).
    pub inodes_per_group: u64,
    /// Inodes in the volume.
    pub inodes_count: u64,
    /// Bytes per inode record.
    pub inode_size: u64,
    /// Bytes per group descriptor (32, or `s_desc_size` with 64bit).
    pub desc_size: u64,
    /// Number of groups.
    pub groups: u64,
    /// The seed of every metadata checksum but the superblock's.
    pub csum_seed: u32,
    /// Byte offset of each group's descriptor.
    pub desc_offsets: Vec<u64>,
    /// `s_feature_compat`, `s_feature_incompat`, `s_feature_ro_compat`.
    pub features: Features,
    /// Which groups hold a superblock backup.
    backups: Backups,
    /// `s_first_meta_bg` with `meta_bg`.
    first_meta_bg: Option<u64>,
    /// `s_reserved_gdt_blocks`.
    reserved_gdt_blocks: u64,
}

/// The superblock's three feature words.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Features {
    /// `s_feature_compat`.
    pub compat: u32,
    /// `s_feature_incompat`.
    pub incompat: u32,
    /// `s_feature_ro_compat`.
    pub ro_compat: u32,
}

/// Which groups hold a superblock backup (the kernel's `ext4_bg_has_super`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backups {
    /// No `sparse_super`: every group.
    Every,
    /// `sparse_super`: groups 0, 1 and the powers of 3, 5 and 7.
    Sparse,
    /// `sparse_super2`: group 0 and the (up to) two groups in `s_backup_bgs`.
    Listed([u64; 2]),
}

impl Backups {
    fn has_super(self, g: u64) -> bool {
        let power_of = |mut n: u64, base: u64| {
            while n > 1 && n.is_multiple_of(base) {
                n /= base;
            }
            n == 1
        };
        match self {
            _ if g == 0 => true,
            Backups::Every => true,
            Backups::Sparse => g == 1 || power_of(g, 3) || power_of(g, 5) || power_of(g, 7),
            Backups::Listed(groups) => groups.contains(&g),
        }
    }
}

/// One group's metadata locations and state, from its descriptor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Group number.
    pub number: u64,
    /// Byte offset of the descriptor.
    pub desc_offset: u64,
    /// Block bitmap block.
    pub block_bitmap: u64,
    /// Inode bitmap block.
    pub inode_bitmap: u64,
    /// First inode table block.
    pub inode_table: u64,
    /// `bg_flags`: 1 inode bitmap/table uninitialised, 2 block bitmap uninitialised.
    pub flags: u16,
}

impl Group {
    /// The inode bitmap and table are not initialised on media.
    pub fn inode_uninit(&self) -> bool {
        self.flags & 0x1 != 0
    }

    /// The block bitmap is not initialised on media.
    pub fn block_uninit(&self) -> bool {
        self.flags & 0x2 != 0
    }
}

/// `s_checksum` as it should be.
pub fn superblock_checksum(sb: &[u8]) -> u32 {
    crc32c::raw_update(!0, &sb[..0x3FC])
}

impl Layout {
    /// Reads the geometry from the superblock and locates the descriptors
    /// of an image with `metadata_csum` (CRC32C), the images checked here.
    ///
    /// # Errors
    /// As [`parse_geometry`](Self::parse_geometry); [`Error::Invalid`] for
    /// an image without `metadata_csum`.
    pub fn parse(image: &[u8]) -> Result<Layout, Error> {
        let layout = Layout::parse_geometry(image)?;
        if layout.features.ro_compat & RO_COMPAT_METADATA_CSUM == 0 {
            return Err(Error::Invalid {
                what: "ext4 image",
                detail: "no metadata_csum feature: nothing to check".into(),
            });
        }
        if image[SUPER_OFFSET as usize + 0x175] != 1 {
            return Err(Error::Invalid {
                what: "ext4 image",
                detail: format!("checksum type {} is not CRC32C", image[SUPER_OFFSET as usize + 0x175]),
            });
        }
        Ok(layout)
    }

    /// The geometry of any ext2/3/4 image, checksums or not (what the
    /// journal reader needs to find the journal).
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a short image, bad magic or impossible
    /// geometry.
    pub fn parse_geometry(image: &[u8]) -> Result<Layout, Error> {
        let sb = bytes(image, SUPER_OFFSET, 1024, &|| "superblock".into())?;
        if le16(sb, S_MAGIC) != MAGIC {
            // erofs keeps its magic where ext4's superblock starts.
            let detail = if le32(sb, 0) == crate::erofs::MAGIC {
                "an erofs image, not ext4: use `csumkit erofs`".to_string()
            } else {
                format!("not an ext4 image (superblock magic {:#06x}; ext2/3/4 have {MAGIC:#06x})", le16(sb, S_MAGIC))
            };
            return Err(Error::Invalid { what: "image", detail });
        }
        let (incompat, ro_compat, compat) =
            (le32(sb, S_FEATURE_INCOMPAT), le32(sb, S_FEATURE_RO_COMPAT), le32(sb, S_FEATURE_COMPAT));
        let (log_block, log_cluster) = (le32(sb, S_LOG_BLOCK_SIZE), le32(sb, S_LOG_CLUSTER_SIZE));
        if log_block > 6 || log_cluster < log_block || log_cluster > log_block + 16 {
            return Err(corrupt(
                "superblock",
                format!("block size 2^{} / cluster 2^{}", 10 + log_block, 10 + log_cluster),
            ));
        }
        let block_size = 1024u64 << log_block;
        let blocks_count = u64::from(le32(sb, S_BLOCKS_COUNT_LO))
            | if incompat & INCOMPAT_64BIT != 0 { u64::from(le32(sb, S_BLOCKS_COUNT_HI)) << 32 } else { 0 };
        let first_data_block = u64::from(le32(sb, S_FIRST_DATA_BLOCK));
        let blocks_per_group = u64::from(le32(sb, S_BLOCKS_PER_GROUP));
        let clusters_per_group = u64::from(le32(sb, S_CLUSTERS_PER_GROUP));
        let inodes_per_group = u64::from(le32(sb, S_INODES_PER_GROUP));
        let inode_size = u64::from(le16(sb, S_INODE_SIZE));
        let bigalloc = ro_compat & RO_COMPAT_BIGALLOC != 0;
        let ratio = 1u64 << (log_cluster - log_block);
        let bits = block_size * 8;
        let geometry_ok = blocks_per_group > 0
            && clusters_per_group > 0
            && clusters_per_group <= bits
            && clusters_per_group % 8 == 0
            && (if bigalloc {
                blocks_per_group == clusters_per_group * ratio
            } else {
                blocks_per_group == clusters_per_group
            })
            && inodes_per_group > 0
            && inodes_per_group <= bits
            && inodes_per_group % 8 == 0
            && (128..=block_size).contains(&inode_size)
            && inode_size.is_power_of_two()
            && first_data_block < blocks_count;
        if !geometry_ok {
            return Err(corrupt(
                "superblock",
                format!(
                    "impossible geometry: {blocks_count} blocks of {block_size}, {blocks_per_group}/{clusters_per_group}/{inodes_per_group} blocks/clusters/inodes per group, {inode_size}-byte inodes"
                ),
            ));
        }
        // Every structure a finding depends on lies below blocks_count: an
        // image shorter than that (a truncated copy) cannot be called clean.
        let fs_bytes = blocks_count.checked_mul(block_size);
        if fs_bytes.is_none_or(|need| need > image.len() as u64) {
            return Err(corrupt(
                "image",
                format!(
                    "truncated: {} bytes, but the superblock's {blocks_count} blocks of {block_size} need {}",
                    image.len(),
                    fs_bytes.map_or("more than 2^64".to_string(), |n| n.to_string())
                ),
            ));
        }
        let desc_size = if incompat & INCOMPAT_64BIT != 0 { u64::from(le16(sb, S_DESC_SIZE)) } else { 32 };
        if !(32..=block_size).contains(&desc_size) || !desc_size.is_power_of_two() {
            return Err(corrupt("superblock", format!("descriptor size {desc_size}")));
        }
        let groups = (blocks_count - first_data_block).div_ceil(blocks_per_group);
        // Bound before allocating a descriptor offset per group: the table
        // must fit in the image.
        if groups.checked_mul(desc_size).is_none_or(|table| table > image.len() as u64) {
            return Err(corrupt("superblock", format!("{groups} groups' descriptors cannot fit in the image")));
        }
        let inodes_count = u64::from(le32(sb, S_INODES_COUNT));
        if groups * inodes_per_group != inodes_count {
            return Err(corrupt(
                "superblock",
                format!("{inodes_count} inodes but {groups} groups of {inodes_per_group}"),
            ));
        }
        let csum_seed = if incompat & INCOMPAT_CSUM_SEED != 0 {
            le32(sb, S_CHECKSUM_SEED)
        } else {
            crc32c::raw_update(!0, &sb[S_UUID..S_UUID + 16])
        };
        let mut layout = Layout {
            block_size,
            blocks_count,
            first_data_block,
            blocks_per_group,
            clusters_per_group,
            inodes_per_group,
            inodes_count,
            inode_size,
            desc_size,
            groups,
            csum_seed,
            desc_offsets: Vec::new(),
            features: Features { compat, incompat, ro_compat },
            backups: Backups::Every,
            first_meta_bg: None,
            reserved_gdt_blocks: u64::from(le16(sb, S_RESERVED_GDT_BLOCKS)),
        };
        let meta_bg = (incompat & INCOMPAT_META_BG != 0).then(|| u64::from(le32(sb, S_FIRST_META_BG)));
        let backups = if compat & COMPAT_SPARSE_SUPER2 != 0 {
            Backups::Listed([u64::from(le32(sb, S_BACKUP_BGS)), u64::from(le32(sb, S_BACKUP_BGS + 4))])
        } else if ro_compat & RO_COMPAT_SPARSE_SUPER != 0 {
            Backups::Sparse
        } else {
            Backups::Every
        };
        layout.desc_offsets = layout.descriptor_offsets(meta_bg, backups);
        (layout.backups, layout.first_meta_bg) = (backups, meta_bg);
        let last = layout.desc_offsets.last().copied().unwrap_or(0);
        bytes(image, last, desc_size as usize, &|| "group descriptors".into())?;
        Ok(layout)
    }

    /// Byte offset of each group's descriptor, as the kernel's
    /// `descriptor_loc` places them: without `meta_bg` (or below
    /// `s_first_meta_bg`) the table follows the superblock's block — block
    /// 2 with 1 KiB blocks even when bigalloc makes `s_first_data_block` 0;
    /// with `meta_bg` each table block sits in the first group it
    /// describes, after that group's superblock backup if it has one.
    fn descriptor_offsets(&self, first_meta_bg: Option<u64>, backups: Backups) -> Vec<u64> {
        let per_block = self.block_size / self.desc_size;
        // The block holding byte 1024: 1 with 1 KiB blocks, else 0.
        let super_block = SUPER_OFFSET / self.block_size;
        (0..self.groups)
            .map(|g| {
                let (table_block, index) = (g / per_block, g % per_block);
                let block = match first_meta_bg {
                    Some(first) if table_block >= first => {
                        let lead = table_block * per_block;
                        let mut has_super = u64::from(backups.has_super(lead));
                        if self.block_size == 1024 && table_block == 0 && self.first_data_block == 0 {
                            has_super += 1;
                        }
                        let first_block =
                            lead.saturating_mul(self.blocks_per_group).saturating_add(self.first_data_block);
                        first_block.saturating_add(has_super)
                    }
                    _ => super_block + 1 + table_block,
                };
                // Saturates on a forged geometry; `parse` then finds it outside the image.
                block.saturating_mul(self.block_size).saturating_add(index * self.desc_size)
            })
            .collect()
    }

    /// (group, index in the group's inode table and bitmap) of inode
    /// `ino` — numbers start at 1, so the last inode of a group is
    /// `inodes_per_group × (g + 1)`.
    pub fn inode_group(&self, ino: u64) -> (u64, u64) {
        assert!(ino >= 1, "inode numbers start at 1");
        ((ino - 1) / self.inodes_per_group, (ino - 1) % self.inodes_per_group)
    }

    /// Whether group `g` holds a superblock backup (the kernel's `ext4_bg_has_super`).
    pub fn has_super(&self, g: u64) -> bool {
        self.backups.has_super(g)
    }

    /// Blocks at the start of group `g` that hold a superblock copy and
    /// descriptor blocks — the kernel's `ext4_num_base_meta_blocks`: with a
    /// backup, the superblock, the descriptor table and the reserved GDT
    /// blocks (below `s_first_meta_bg`'s groups); with `meta_bg`, one
    /// descriptor block in the first, second and last group of each meta
    /// group.
    pub fn base_meta_blocks(&self, g: u64) -> u64 {
        let per_block = self.block_size / self.desc_size;
        let has_super = u64::from(self.has_super(g));
        match self.first_meta_bg {
            Some(first) if g >= first * per_block => {
                let lead = g / per_block * per_block;
                has_super + u64::from(g == lead || g == lead + 1 || g == lead + per_block - 1)
            }
            first => {
                let table = first.unwrap_or_else(|| self.groups.div_ceil(per_block));
                has_super * (1 + table + self.reserved_gdt_blocks)
            }
        }
    }

    /// Group `g`'s descriptor, read from `image`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when it lies outside the image.
    pub fn group(&self, image: &[u8], g: u64) -> Result<Group, Error> {
        let at = self.desc_offsets[g as usize];
        let d = bytes(image, at, self.desc_size as usize, &|| format!("group {g} descriptor"))?;
        let wide = self.desc_size >= 64;
        let addr = |lo: usize, hi: usize| u64::from(le32(d, lo)) | if wide { u64::from(le32(d, hi)) << 32 } else { 0 };
        Ok(Group {
            number: g,
            desc_offset: at,
            block_bitmap: addr(BG_BLOCK_BITMAP_LO, BG_BLOCK_BITMAP_HI),
            inode_bitmap: addr(BG_INODE_BITMAP_LO, BG_INODE_BITMAP_HI),
            inode_table: addr(BG_INODE_TABLE_LO, BG_INODE_TABLE_HI),
            flags: le16(d, BG_FLAGS),
        })
    }
}

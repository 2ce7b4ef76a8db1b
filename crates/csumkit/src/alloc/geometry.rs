//! Volume geometry and the fixed metadata layout.
//!
//! Layout (flex_bg style, all block bitmaps packed into group 0): group 0
//! starts with the superblock, the group descriptor table and one block per
//! group for its bitmap; groups 1 and the powers of 3, 5 and 7 (sparse_super)
//! start with a backup superblock and descriptor table. Bits past the end of
//! a short last group are set, as ext4 does.

use super::descriptor::DESC_SIZE;
use crate::Error;

/// Block size, blocks per group and volume size.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Geometry {
    /// Bytes per block: a power of two from 1 KiB to 64 KiB.
    pub block_size: u32,
    /// Blocks per group: a multiple of 8, at most 8 × block size (one bitmap block).
    pub blocks_per_group: u32,
    /// Blocks in the volume.
    pub blocks_count: u64,
}

impl Geometry {
    /// mke2fs's cap on blocks per group (`EXT2_MAX_BLOCKS_PER_GROUP`, 2^16 - 8).
    pub const MKE2FS_BLOCKS_PER_GROUP_MAX: u32 = 65528;
    /// Limit on the number of groups (keeps descriptors and bitmaps bounded).
    pub const GROUPS_MAX: u64 = 1 << 20;

    /// An ext4 geometry of `groups` full groups: blocks per group as large
    /// as one bitmap block allows (8 × block size), capped at `cap` (pass
    /// [`MKE2FS_BLOCKS_PER_GROUP_MAX`](Self::MKE2FS_BLOCKS_PER_GROUP_MAX)
    /// for mke2fs's default or `u32::MAX` for none).
    ///
    /// # Errors
    /// As [`validate`](Self::validate).
    pub fn ext4(block_size: u32, cap: u32, groups: u64) -> Result<Geometry, Error> {
        let blocks_per_group = block_size.saturating_mul(8).min(cap) & !7;
        let geometry = Geometry { block_size, blocks_per_group, blocks_count: groups * u64::from(blocks_per_group) };
        geometry.validate()?;
        Ok(geometry)
    }

    /// Checks every limit; all other methods assume a valid geometry.
    ///
    /// # Errors
    /// [`Error::Invalid`] saying which limit is broken.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |detail: String| Err(Error::Invalid { what: "geometry", detail });
        if !self.block_size.is_power_of_two() || !(1024..=65536).contains(&self.block_size) {
            return invalid(format!("block size {} is not a power of two from 1024 to 65536", self.block_size));
        }
        if self.blocks_per_group < 8
            || !self.blocks_per_group.is_multiple_of(8)
            || u64::from(self.blocks_per_group) > 8 * u64::from(self.block_size)
        {
            return invalid(format!(
                "{} blocks per group: must be a multiple of 8 from 8 to {} (8 x block size)",
                self.blocks_per_group,
                8 * u64::from(self.block_size)
            ));
        }
        if self.blocks_count == 0 || self.blocks_count > 1 << 48 {
            return invalid(format!("{} blocks: must be 1 to 2^48", self.blocks_count));
        }
        if self.groups() > Self::GROUPS_MAX {
            return invalid(format!("{} groups exceeds the limit of {}", self.groups(), Self::GROUPS_MAX));
        }
        for group in [0, self.groups() - 1] {
            let reserved = self.reserved_blocks(group);
            if reserved >= u64::from(self.group_len(group)) {
                return invalid(format!(
                    "group {group} has {} blocks, too few for its {reserved} metadata blocks",
                    self.group_len(group)
                ));
            }
        }
        Ok(())
    }

    /// Number of groups (the last may be short).
    pub fn groups(&self) -> u64 {
        self.blocks_count.div_ceil(u64::from(self.blocks_per_group))
    }

    /// Blocks in group `group`.
    pub fn group_len(&self, group: u64) -> u32 {
        let start = group * u64::from(self.blocks_per_group);
        (self.blocks_count - start).min(u64::from(self.blocks_per_group)) as u32
    }

    /// First block of group `group`.
    pub fn group_start(&self, group: u64) -> u64 {
        group * u64::from(self.blocks_per_group)
    }

    /// Blocks of the group descriptor table.
    pub fn gdt_blocks(&self) -> u64 {
        (self.groups() * DESC_SIZE as u64).div_ceil(u64::from(self.block_size))
    }

    /// Metadata blocks at the start of group `group`.
    pub fn reserved_blocks(&self, group: u64) -> u64 {
        let backup = 1 + self.gdt_blocks();
        match group {
            0 => backup + self.groups(),
            g if has_super_backup(g) => backup,
            _ => 0,
        }
    }

    /// Bytes of one bitmap that the checksum covers.
    pub fn bitmap_bytes(&self) -> usize {
        self.blocks_per_group as usize / 8
    }
}

/// sparse_super: backups in groups 1 and powers of 3, 5 and 7.
fn has_super_backup(group: u64) -> bool {
    if group <= 1 {
        return true;
    }
    [3u64, 5, 7].iter().any(|&base| {
        let mut power = base;
        while power < group {
            power *= base;
        }
        power == group
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ext4_geometries_and_limits() {
        let g = Geometry::ext4(65536, Geometry::MKE2FS_BLOCKS_PER_GROUP_MAX, 4).unwrap();
        assert_eq!(g.blocks_per_group, 65528);
        assert_eq!(Geometry::ext4(65536, u32::MAX, 4).unwrap().blocks_per_group, 524288);
        assert_eq!(Geometry::ext4(1024, u32::MAX, 4).unwrap().blocks_per_group, 8192);
        assert_eq!(g.reserved_blocks(0), 1 + 1 + 4);
        assert_eq!(g.reserved_blocks(3), 2);
        assert_eq!(g.reserved_blocks(2), 0);
        assert!((0..50).filter(|&g| has_super_backup(g)).eq([0, 1, 3, 5, 7, 9, 25, 27, 49]));
        for bad in [
            Geometry { block_size: 3000, blocks_per_group: 8, blocks_count: 100 },
            Geometry { block_size: 1024, blocks_per_group: 8200, blocks_count: 100_000 },
            Geometry { block_size: 1024, blocks_per_group: 8191, blocks_count: 100_000 },
            Geometry { block_size: 1024, blocks_per_group: 8192, blocks_count: 0 },
            Geometry { block_size: 1024, blocks_per_group: 8, blocks_count: 1 << 20 },
            Geometry { block_size: 1024, blocks_per_group: 8192, blocks_count: 8192 * 3 + 1 },
        ] {
            assert!(matches!(bad.validate(), Err(Error::Invalid { .. })), "{bad:?}");
        }
    }
}

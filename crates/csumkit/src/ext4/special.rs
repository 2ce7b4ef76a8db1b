//! The checksummed structures outside the inode/extent/directory tree
//! (xattr blocks aside: `xattr.rs`): the jbd2 superblock, the orphan
//! file's blocks and the MMP block. Each is checked as the kernel verifies it:
//!
//! | structure | checksum | covers |
//! |---|---|---|
//! | jbd2 superblock (`jbd2_superblock_csum`, v2/v3) | **be32** at 0xFC | `!0`, 1024 bytes with 0xFC..0x100 read as zero |
//! | orphan file block (`ext4_orphan_file_block_csum_verify`) | le32 at bs-4 | the orphan inode's seed, le64 block number, bytes 0..bs-8 |
//! | MMP block (`ext4_mmp_csum`) | le32 at 0x3FC | fs seed, bytes 0..0x3FC |

use super::checker::Checker;
use super::feature_bits::{INCOMPAT_MMP, RO_COMPAT_ORPHAN_PRESENT};
use super::fields::{I_BLOCK, I_SIZE_HIGH, I_SIZE_LO, S_MMP_BLOCK};
use super::jbd2::{superblock_checksum, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V3, MAGIC as JBD2_MAGIC};
use super::leaves::{physical, Leaf};
use super::structure;
use crate::crc32c;
use crate::le::{be32, le32};
use crate::Error;

const ORPHAN_MAGIC: u32 = 0x0B10_CA04;
const MMP_MAGIC: u32 = 0x004D_4D50;

impl Checker<'_> {
    /// The jbd2 superblock: the journal inode's first block.
    pub(super) fn journal_superblock(&mut self, inum: u64, leaves: &[(u32, u64, u16)]) -> Result<(), Error> {
        let where_ = || format!("journal (inode {inum})");
        let Some(block) = physical(leaves, 0) else {
            return Err(super::corrupt(&where_(), "the journal inode has no block 0".into()));
        };
        let data = self.block(block, &where_)?;
        if be32(data, 0) != JBD2_MAGIC {
            return Err(super::corrupt(&where_(), format!("block {block}: no jbd2 magic ({:#010x})", be32(data, 0))));
        }
        if be32(data, 0x28) & (INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3) == 0 {
            return Ok(()); // A journal without checksums: nothing to check.
        }
        let sb = &data[..1024];
        let computed = superblock_checksum(sb);
        self.report.checked.journal_superblocks += 1;
        let damage = (sb[0x50] != 4).then(|| format!("jbd2 checksum type {} is not CRC32C (4)", sb[0x50]));
        let at = block * self.layout.block_size + 0xFC;
        if let Some(f) = self.finding(
            "journal superblock",
            format!("block {block} (inode {inum})"),
            be32(sb, 0xFC),
            computed,
            vec![(at, computed.to_be_bytes().to_vec())],
        ) {
            f.damage = damage;
        }
        Ok(())
    }

    /// Every block of the orphan file: magic and checksum in its tail.
    pub(super) fn orphan_blocks(&mut self, inum: u64, seed: u32, leaves: &[(u32, u64, u16)]) -> Result<(), Error> {
        let bs = self.layout.block_size as usize;
        for &(first, start, len) in leaves {
            for k in 0..u64::from(len) {
                let block = start + k;
                let data = self.block(block, &|| format!("orphan file (inode {inum}) block {block}"))?;
                let crc = crc32c::raw_update(seed, &block.to_le_bytes());
                let computed = crc32c::raw_update(crc, &data[..bs - 8]);
                self.report.checked.orphan_blocks += 1;
                let magic = le32(data, bs - 8);
                let damage = if magic != ORPHAN_MAGIC {
                    Some(format!("orphan block tail magic {magic:#010x}"))
                } else {
                    self.orphan_entries(&data[..bs - 8])
                };
                if let Some(f) = self.finding(
                    "orphan file block",
                    format!("block {block} (inode {inum}, logical {})", u64::from(first) + k),
                    le32(data, bs - 4),
                    computed,
                    vec![(block * bs as u64 + bs as u64 - 4, computed.to_le_bytes().to_vec())],
                ) {
                    f.damage = damage;
                    f.inode = Some(inum);
                }
            }
        }
        Ok(())
    }

    /// The multiple-mount-protection block (`s_mmp_block`).
    /// An orphan block's entries as e2fsck judges them: all zero unless
    /// the superblock says orphans are recorded (`orphan_present`), and
    /// then each 0 or an inode number of the filesystem.
    fn orphan_entries(&self, entries: &[u8]) -> Option<String> {
        let present = self.layout.features.ro_compat & RO_COMPAT_ORPHAN_PRESENT != 0;
        let inodes = self.layout.inodes_count;
        let (k, inode) = entries
            .chunks_exact(4)
            .map(|e| u64::from(le32(e, 0)))
            .enumerate()
            .find(|&(_, inode)| inode != 0 && (!present || inode > inodes))?;
        Some(if present {
            format!("orphan entry {k} names inode {inode}, beyond the filesystem's {inodes}")
        } else {
            format!("orphan entry {k} names inode {inode}, but no orphan is recorded (the block is not clean)")
        })
    }

    pub(super) fn mmp(&mut self) -> Result<(), Error> {
        if self.layout.features.incompat & INCOMPAT_MMP == 0 {
            return Ok(());
        }
        let sb = &self.image[super::layout::SUPER_OFFSET as usize..][..1024];
        let block = u64::from(le32(sb, S_MMP_BLOCK)) | u64::from(le32(sb, S_MMP_BLOCK + 4)) << 32;
        if structure::out_of_range(&self.layout, block, 1).is_some() {
            return Err(super::corrupt("MMP block", format!("s_mmp_block {block} is outside the filesystem")));
        }
        let data = self.block(block, &|| format!("MMP block {block}"))?;
        let computed = crc32c::raw_update(self.layout.csum_seed, &data[..0x3FC]);
        self.report.checked.mmp_blocks += 1;
        let magic = le32(data, 0);
        let damage = (magic != MMP_MAGIC).then(|| format!("MMP magic {magic:#010x}"));
        if let Some(f) = self.finding(
            "MMP block",
            format!("block {block}"),
            le32(data, 0x3FC),
            computed,
            vec![(block * self.layout.block_size + 0x3FC, computed.to_le_bytes().to_vec())],
        ) {
            f.damage = damage;
        }
        Ok(())
    }

    /// The data blocks of a block-mapped inode (`i_block`: 12 direct, then
    /// single, double and triple indirect), as leaf runs of one block, and
    /// the indirect blocks met on the way. Holes are skipped. `to_size`:
    /// only up to its size (a directory's, the journal's), which must fit
    /// the filesystem; otherwise every pointer, as e2fsck follows them.
    pub(super) fn block_map(&self, inum: u64, raw: &[u8], to_size: bool) -> Result<(Vec<Leaf>, Vec<u64>), Error> {
        let bs = self.layout.block_size;
        let size = u64::from(le32(raw, I_SIZE_LO)) | u64::from(le32(raw, I_SIZE_HIGH)) << 32;
        let blocks = if to_size { size.div_ceil(bs) } else { u64::from(u32::MAX) };
        if blocks > u64::from(u32::MAX) || (to_size && blocks > self.layout.blocks_count) {
            return Err(super::corrupt(
                &format!("inode {inum}"),
                format!("size {size} is more blocks than the filesystem has"),
            ));
        }
        let pointer = |i: usize| u64::from(le32(raw, I_BLOCK + 4 * i));
        let (mut leaves, mut indirect) = (Vec::new(), Vec::new());
        for i in 0..12u64 {
            if i < blocks && pointer(i as usize) != 0 {
                leaves.push((i as u32, pointer(i as usize), 1));
            }
        }
        let per = bs / 4;
        let mut first = 12u64;
        for level in 1..=3u32 {
            if first >= blocks {
                break;
            }
            self.indirect(inum, pointer(11 + level as usize), level, first, blocks, &mut leaves, &mut indirect)?;
            first += per.pow(level);
        }
        Ok((leaves, indirect))
    }

    #[allow(clippy::too_many_arguments)]
    fn indirect(
        &self,
        inum: u64,
        block: u64,
        level: u32,
        first: u64,
        blocks: u64,
        leaves: &mut Vec<(u32, u64, u16)>,
        indirect: &mut Vec<u64>,
    ) -> Result<(), Error> {
        if block == 0 {
            return Ok(());
        }
        let data = self.block(block, &|| format!("inode {inum} indirect block {block}"))?;
        indirect.push(block);
        let per = self.layout.block_size / 4;
        let span = per.pow(level - 1);
        for k in 0..per {
            let logical = first + k * span;
            let child = u64::from(le32(data, 4 * k as usize));
            if logical >= blocks {
                break;
            }
            if child == 0 {
                continue;
            }
            if level == 1 {
                leaves.push((logical as u32, child, 1));
            } else {
                self.indirect(inum, child, level - 1, logical, blocks, leaves, indirect)?;
            }
        }
        Ok(())
    }
}

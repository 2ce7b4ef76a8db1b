//! Where a file's data is: its extent tree (extent blocks' checksums
//! verified) or, without `extents`, its block map.

use crate::error::{corrupt, Error};
use crate::inode::table::{Inode, FLAG_EXTENTS};
use crate::volume::Volume;
use csumkit::le::le32;

/// A run of data blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// First file block.
    pub logical: u64,
    /// Blocks.
    pub len: u64,
    /// First disk block.
    pub physical: u64,
    /// Allocated but not written (reads as zeros): fallocate's extents.
    pub uninit: bool,
}

impl Volume {
    /// Every data run of `inode`, by logical block.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a bad extent header or a block outside the
    /// filesystem; [`Error::Checksum`] for an extent block's checksum.
    pub fn runs(&self, inode: &Inode) -> Result<Vec<Run>, Error> {
        if inode.flags & FLAG_EXTENTS != 0 {
            return Ok(self.read_tree(inode)?.extents);
        }
        let mut runs = Vec::new();
        if inode.is_fast_symlink() {
            return Ok(runs); // i_block holds the target, not block numbers
        }
        self.block_map(inode, &mut runs)?;
        runs.sort_by_key(|r| r.logical);
        for run in &runs {
            let end = run.physical.checked_add(run.len);
            // The first data block holds the superblock: no file's.
            if run.physical <= self.layout.first_data_block || end.is_none_or(|e| e > self.layout.blocks_count) {
                return Err(corrupt(
                    format!("inode {} block map at logical {}", inode.ino, run.logical),
                    format!("blocks {}+{} lie outside the filesystem's data area", run.physical, run.len),
                ));
            }
        }
        Ok(runs)
    }

    /// `i_block` as 12 direct, one single, one double and one triple
    /// indirect pointer; holes (0) skipped; up to the inode's size.
    fn block_map(&self, inode: &Inode, runs: &mut Vec<Run>) -> Result<(), Error> {
        let bs = self.layout.block_size;
        let blocks = inode.size.div_ceil(bs);
        if blocks > self.layout.blocks_count {
            return Err(corrupt(format!("inode {}", inode.ino), format!("size {} exceeds the filesystem", inode.size)));
        }
        let pointer = |i: usize| u64::from(le32(&inode.i_block, 4 * i));
        for i in 0..12u64.min(blocks) {
            if pointer(i as usize) != 0 {
                runs.push(Run { logical: i, len: 1, physical: pointer(i as usize), uninit: false });
            }
        }
        let per = bs / 4;
        let mut first = 12u64;
        for level in 1..=3u32 {
            if first >= blocks {
                break;
            }
            self.indirect(inode, pointer(11 + level as usize), level, first, blocks, runs)?;
            first += per.pow(level);
        }
        Ok(())
    }

    fn indirect(
        &self,
        inode: &Inode,
        block: u64,
        level: u32,
        first: u64,
        blocks: u64,
        runs: &mut Vec<Run>,
    ) -> Result<(), Error> {
        if block == 0 {
            return Ok(());
        }
        let data = self.block(block, &|| format!("inode {} indirect block {block}", inode.ino))?;
        let per = self.layout.block_size / 4;
        let span = per.pow(level - 1);
        for k in 0..per {
            let logical = first + k * span;
            if logical >= blocks {
                break;
            }
            let child = u64::from(le32(data, 4 * k as usize));
            if child == 0 {
                continue;
            }
            if level == 1 {
                runs.push(Run { logical, len: 1, physical: child, uninit: false });
            } else {
                self.indirect(inode, child, level - 1, logical, blocks, runs)?;
            }
        }
        Ok(())
    }
}

impl Volume {
    /// The blocks that hold `inode`'s mapping rather than its data: extent
    /// index and leaf blocks, or a block map's indirect blocks (what
    /// deleting the file frees besides its data runs).
    pub(crate) fn tree_blocks(&self, inode: &Inode) -> Result<Vec<u64>, Error> {
        if inode.flags & FLAG_EXTENTS != 0 {
            return Ok(self.read_tree(inode)?.nodes.into_iter().flatten().collect());
        }
        let mut out = Vec::new();
        if inode.is_fast_symlink() {
            return Ok(out); // i_block holds the target
        }
        let per = self.layout.block_size / 4;
        let mut stack: Vec<(u64, u32)> = (1..=3u32)
            .map(|level| (u64::from(le32(&inode.i_block, 4 * (11 + level as usize))), level))
            .filter(|&(b, _)| b != 0)
            .collect();
        while let Some((block, level)) = stack.pop() {
            out.push(block);
            if out.len() as u64 > self.layout.blocks_count {
                return Err(corrupt(
                    format!("inode {} block map", inode.ino),
                    "more indirect blocks than the filesystem",
                ));
            }
            if level > 1 {
                let data = self.block(block, &|| format!("inode {} indirect block {block}", inode.ino))?;
                for k in 0..per as usize {
                    let child = u64::from(le32(data, 4 * k));
                    if child != 0 {
                        stack.push((child, level - 1));
                    }
                }
            }
        }
        Ok(out)
    }
}

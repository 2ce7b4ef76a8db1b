//! Making an inode extent-mapped before csumfs changes it: inline content
//! moves to a block (`inline.rs`), and a block map (a file from before the
//! `extent` feature was turned on — an ext3 image upgraded with `tune2fs
//! -O extent`) becomes extents, as the kernel's `ext4_ext_migrate` does
//! for `chattr +e`: the same data blocks, mapped by an extent tree instead
//! of (double, triple) indirect blocks, which are freed. csumfs then has
//! one mapping to change — the extent tree — for every inode it writes.

use crate::error::Error;
use crate::inode::{Inode, FLAG_EXTENTS, FLAG_INLINE_DATA};
use crate::le::{le32, put16, put32};
use crate::volume::Volume;

impl Volume {
    /// Inode `ino` extent-mapped: inline content moved to a block, a block
    /// map turned into extents; other inodes (extent-mapped already,
    /// devices, FIFOs, fast symlinks) as they are. Called at the start of
    /// an operation that changes the inode, before it reads the inodes it
    /// works on (a copy read before would be stale).
    ///
    /// # Errors
    /// `ENOSPC` (nothing changed) when the extent tree needs a block and
    /// none is free; as [`inode`](Self::inode).
    pub(crate) fn extent_mapped(&mut self, ino: u32) -> Result<Inode, Error> {
        let inode = self.uninline(ino)?;
        let mapped = inode.is_file() || inode.is_dir() || inode.is_symlink() && inode.size >= 60;
        if inode.flags & (FLAG_EXTENTS | FLAG_INLINE_DATA) != 0 || !mapped {
            return Ok(inode);
        }
        // One run per block: remapping joins those that continue on disk.
        let runs = self.runs(&inode)?;
        let indirect = self.tree_blocks(&inode)?;
        let before = inode.raw.clone();
        let converted = self.edit_inode(&inode, |r| {
            put32(r, 0x20, le32(r, 0x20) | FLAG_EXTENTS);
            r[0x28..0x28 + 60].fill(0);
            put16(r, 0x28, 0xF30A); // an empty extent root: magic, 0 entries,
            put16(r, 0x2C, 4); // room for 4, depth 0
        })?;
        let end = runs.last().map_or(0, |r| r.logical + r.len);
        let inode = match self.remap(&converted, 0, end, &runs) {
            Ok((inode, _)) => inode,
            Err(e) => {
                // The block map back as it was: nothing changed.
                self.edit_inode(&converted, |r| r.copy_from_slice(&before))?;
                return Err(e);
            }
        };
        let bs = self.layout.block_size;
        for &block in &indirect {
            self.free_blocks(block, 1)?;
        }
        let sectors = inode.blocks - indirect.len() as u64 * bs / 512;
        self.edit_inode(&inode, |r| {
            put32(r, 0x1C, sectors as u32);
            put16(r, 0x74, (sectors >> 32) as u16);
        })
    }

    /// [`extent_mapped`](Self::extent_mapped) for a directory `ino` (an
    /// entry is to be added, removed or changed); other inodes are
    /// returned as they are.
    pub(crate) fn extent_mapped_dir(&mut self, ino: u32) -> Result<Inode, Error> {
        let inode = self.inode(ino)?;
        if inode.is_dir() && inode.flags & FLAG_EXTENTS == 0 {
            return self.extent_mapped(ino);
        }
        Ok(inode)
    }
}

//! A file's mapping grown: blocks allocated for a range and put in its
//! extent tree (written, or unwritten for `fallocate`), given back when the
//! tree cannot take them.

use crate::error::Error;
use crate::inode::immutable;
use crate::inode::table::{Inode, FLAG_EXTENTS};
use crate::space::map::Run;
use crate::volume::Volume;
use csumkit::ext4::fields::{I_BLOCKS_HIGH, I_BLOCKS_LO, I_SIZE_HIGH, I_SIZE_LO};
use csumkit::le::{put16, put32};

/// What new blocks hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Left as they are: the caller writes them whole.
    Nothing,
    /// Unwritten extents: they read as zeros, nothing is written.
    Unwritten,
}

impl Volume {
    /// Makes `blocks` file blocks from `logical` exist (allocated, written
    /// by the caller or unwritten as `fill` says), goal right after the file's last block — for a file
    /// without blocks the start of its inode's group, as the kernel's
    /// `ext4_inode_to_goal_block` (small files then pack together instead
    /// of leaving holes between them too small for large files).
    pub(crate) fn grow(&mut self, inode: Inode, logical: u64, blocks: u64, fill: Fill) -> Result<Inode, Error> {
        let l = &self.layout;
        let group_start = l.first_data_block + l.inode_group(u64::from(inode.ino)).0 * l.blocks_per_group;
        // Where the extent before `logical` would continue (the kernel's
        // `ext4_ext_find_goal`); each later run continues the one before.
        let before = self.runs(&inode)?.into_iter().take_while(|r| r.logical < logical).last();
        let mut goal = before.map_or(group_start, |r| r.physical + (logical - r.logical));
        // One extent holds at most 32768 blocks (32767 unwritten).
        let cap = if fill == Fill::Unwritten { 32767 } else { 32768 };
        // Every run first, then one remap of the extent tree: remapping per
        // run rewrote the tree's nodes once for each 2 GiB of a large
        // fallocate at 64 KiB blocks.
        let mut runs: Vec<Run> = Vec::new();
        let mut next = logical;
        while next < logical + blocks {
            match self.allocate_blocks(goal, (logical + blocks - next).min(cap)) {
                Ok((start, len)) => {
                    runs.push(Run { logical: next, len, physical: start, uninit: fill == Fill::Unwritten });
                    goal = start + len;
                    next += len;
                }
                Err(e) => return Err(self.give_back(&runs, e)),
            }
        }
        let inode = match self.remap(&inode, logical, logical + blocks, &runs) {
            Ok((inode, _)) => inode,
            Err(e) => return Err(self.give_back(&runs, e)),
        };
        let sectors = inode.blocks + blocks * self.layout.block_size / 512;
        self.edit_inode(&inode, |r| {
            put32(r, I_BLOCKS_LO, sectors as u32);
            put16(r, I_BLOCKS_HIGH, (sectors >> 32) as u16);
        })
    }

    /// Frees the blocks of `runs` (a growth that failed: nothing half
    /// done) and returns `error`, or the error freeing them gave.
    fn give_back(&mut self, runs: &[Run], error: Error) -> Error {
        for r in runs {
            if let Err(e) = self.free_blocks(r.physical, r.len) {
                return e;
            }
        }
        error
    }

    /// Allocates every block of `first..last` the file does not map, hole
    /// by hole, filled as `fill` says.
    pub(crate) fn fill_holes(&mut self, mut inode: Inode, first: u64, last: u64, fill: Fill) -> Result<Inode, Error> {
        let mut b = first;
        while b < last {
            // Runs are in file order: the first that ends past `b` either
            // maps it (skip to its end) or starts the hole's end.
            let runs = self.runs(&inode)?;
            match runs.iter().find(|r| r.logical + r.len > b) {
                Some(r) if r.logical <= b => b = r.logical + r.len,
                next => {
                    let hole_end = next.map_or(last, |r| r.logical.min(last));
                    inode = self.grow(inode, b, hole_end - b, fill)?;
                    b = hole_end;
                }
            }
        }
        Ok(inode)
    }

    /// Allocates the blocks of `offset..offset + len` the file lacks as
    /// unwritten extents (they read as zeros; nothing is written to them),
    /// and extends the size unless `keep_size` (`FALLOC_FL_KEEP_SIZE`).
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn fallocate(&mut self, ino: u32, offset: u64, len: u64, keep_size: bool) -> Result<Inode, Error> {
        let mut inode = self.inode(ino)?;
        if !inode.is_file() {
            return Err(Error::IsDir(format!("inode {ino}")));
        }
        immutable::may_write(&inode)?;
        let end = self.range_end(ino, offset, len)?;
        if inode.flags & FLAG_EXTENTS == 0 {
            inode = self.extent_mapped(ino)?;
        }
        let bs = self.layout.block_size;
        let (first, last) = (offset / bs, end.div_ceil(bs));
        inode = self.fill_holes(inode, first, last, Fill::Unwritten)?;
        if keep_size || end <= inode.size {
            return Ok(inode);
        }
        self.zero_past_end(&inode, end)?;
        self.edit_inode(&inode, |r| {
            put32(r, I_SIZE_LO, end as u32);
            put32(r, I_SIZE_HIGH, (end >> 32) as u32);
        })
    }
}

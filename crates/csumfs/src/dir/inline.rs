//! Inline data (the `inline_data` feature): a small file or directory whose
//! content lives in `i_block` and the in-inode `system.data` xattr. Before
//! csumfs changes one — its data, size, xattrs or entries — the content
//! moves to a block of its own, as the kernel's `ext4_convert_inline_data`
//! and `ext4_convert_inline_dir` move it when it outgrows the inode: the
//! inode becomes an extent-mapped one (the `system.data` xattr removed,
//! `i_block` an empty extent root), a file's bytes written to its first
//! block, a directory's entries laid out after `.` and `..` in a leaf with
//! its checksum tail. csumfs never writes inline content itself: both forms
//! are valid ext4, and one writer path for each kind of inode is less to
//! get wrong.

use crate::error::Error;
use crate::format::inode::put_time;
use crate::inode::table::{Inode, FLAG_EXTENTS, FLAG_INLINE_DATA};
use crate::space::grow::Fill;
use crate::volume::Volume;
use csumkit::ext4::fields::{I_BLOCK, I_FLAGS, I_MTIME, I_MTIME_EXTRA, I_SIZE_HIGH, I_SIZE_LO};
use csumkit::le::{le32, put16, put32};

/// `EXT4_XATTR_INDEX_SYSTEM` and the name that holds inline data.
const SYSTEM_INDEX: u8 = 7;
const DATA_NAME: &[u8] = b"data";

impl Volume {
    /// Moves inode `ino`'s inline content to a block, if it has any;
    /// returns the inode as it is now. Called at the start of every
    /// operation that changes an inode, before it reads the inodes it
    /// works on (a copy read before would be stale).
    ///
    /// # Errors
    /// `ENOSPC` (nothing changed) when no block is free; as
    /// [`inode`](Self::inode).
    pub(crate) fn uninline(&mut self, ino: u32) -> Result<Inode, Error> {
        let inode = self.inode(ino)?;
        if inode.flags & FLAG_INLINE_DATA == 0 {
            return Ok(inode);
        }
        self.fast_ineligible("an inline-data inode given blocks");
        let bs = self.layout.block_size as usize;
        let content = self.inline_data(&inode)?;
        let entries = if inode.is_dir() { Some(self.read_dir(&inode)?) } else { None };
        if let Some(entries) = &entries {
            let need: usize = entries.iter().map(|e| (8 + e.name.len()).next_multiple_of(4)).sum();
            if need > bs - 12 {
                return Err(Error::Unsupported {
                    feature: "inline directory larger than a block",
                    remedy: "its entries do not fit one block; e2fsck can convert it",
                });
            }
        }
        // A block first: ENOSPC leaves the inode as it was.
        let goal = self.inode_offset(ino)? / bs as u64;
        let (block, _) = self.allocate_blocks(goal, 1)?;
        self.free_blocks(block, 1)?;
        let xattrs =
            self.entries(&inode)?.into_iter().filter(|e| !(e.index == SYSTEM_INDEX && e.suffix == DATA_NAME)).collect();
        let inode = self.store_xattrs(&inode, xattrs)?;
        let (mtime, mtime_extra) = (le32(&inode.raw, I_MTIME), le32(&inode.raw, I_MTIME_EXTRA));
        let size = inode.size;
        let inode = self.edit_inode(&inode, |r| {
            put32(r, I_FLAGS, (le32(r, I_FLAGS) & !FLAG_INLINE_DATA) | FLAG_EXTENTS);
            r[I_BLOCK..I_BLOCK + 60].fill(0);
            put16(r, I_BLOCK, 0xF30A); // an empty extent root: magic, 0 entries,
            put16(r, I_BLOCK + 4, 4); // room for 4, depth 0
        })?;
        let inode = match entries {
            Some(entries) => {
                let inode = self.grow(inode, 0, 1, Fill::Nothing)?;
                let list: Vec<(u32, u8, &[u8])> = entries.iter().map(|e| (e.ino, e.file_type, &e.name[..])).collect();
                let leaf = crate::format::dir_block::new_dir_block(bs, inode.csum_seed, &list);
                let physical = self.runs(&inode)?[0].physical;
                self.store(physical * bs as u64, &leaf)?;
                self.edit_inode(&inode, |r| {
                    put32(r, I_SIZE_LO, bs as u32);
                    put32(r, I_SIZE_HIGH, 0);
                })?
            }
            None if size > 0 => {
                let bytes = &content[..(size as usize).min(content.len())];
                let inode = self.write(ino, 0, bytes)?;
                // The content did not change: neither does the mtime.
                self.edit_inode(&inode, |r| {
                    put_time(r, I_MTIME, I_MTIME_EXTRA, (mtime, mtime_extra));
                })?
            }
            None => inode,
        };
        Ok(inode)
    }
}

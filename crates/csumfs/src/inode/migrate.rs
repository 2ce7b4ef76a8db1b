//! Making an inode extent-mapped before csumfs changes it: inline content
//! moves to a block (`dir/inline.rs`), and a block map (a file from before the
//! `extent` feature was turned on — an ext3 image upgraded with `tune2fs
//! -O extent`) becomes extents, as the kernel's `ext4_ext_migrate` does
//! for `chattr +e`: the same data blocks, mapped by an extent tree instead
//! of (double, triple) indirect blocks, which are freed. csumfs then has
//! one mapping to change — the extent tree — for every inode it writes.
//! `chattr +e` does the same on demand, and `chattr -e` makes a block map
//! of the small files ext4 makes one of (`migrate`).

use crate::error::Error;
use crate::inode::table::{Inode, FLAG_EXTENTS, FLAG_INLINE_DATA};
use crate::volume::Volume;
use csumkit::ext4::fields::{
    EE_BLOCK, EE_LEN, EE_START_HI, EE_START_LO, EH_DEPTH, EH_ENTRIES, EXT_ENTRY_BYTES, I_BLOCK, I_BLOCKS_HIGH,
    I_BLOCKS_LO, I_FLAGS,
};
use csumkit::le::{le16, le32, put16, put32};

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
        self.fast_ineligible("a block-mapped inode migrated to extents");
        // One run per block: remapping joins those that continue on disk.
        let runs = self.runs(&inode)?;
        let indirect = self.tree_blocks(&inode)?;
        let before = inode.raw.clone();
        let converted = self.edit_inode(&inode, |r| {
            put32(r, I_FLAGS, le32(r, I_FLAGS) | FLAG_EXTENTS);
            r[I_BLOCK..I_BLOCK + 60].fill(0);
            put16(r, I_BLOCK, 0xF30A); // an empty extent root: magic, 0 entries,
            put16(r, I_BLOCK + 4, 4); // room for 4, depth 0
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
            put32(r, I_BLOCKS_LO, sectors as u32);
            put16(r, I_BLOCKS_HIGH, (sectors >> 32) as u16);
        })
    }

    /// `chattr +e` and `-e`: inode `ino` turned to the mapping `extents`
    /// says, as the kernel's `ext4_ioctl_setflags` does — with extents
    /// ([`extent_mapped`](Self::extent_mapped), `ext4_ext_migrate`: inline
    /// data is `EINVAL`, and a fast symlink or a special file is left as it
    /// is), or with a block map (`ext4_ind_migrate`: only a file of at most
    /// one extent, in place in the inode and ending within the first 12
    /// blocks, on a volume of 32-bit block numbers without bigalloc; others
    /// are `EOPNOTSUPP`). An inode mapped so already is returned as it is.
    ///
    /// # Errors
    /// As said; as [`extent_mapped`](Self::extent_mapped).
    pub(crate) fn migrate(&mut self, ino: u32, extents: bool) -> Result<Inode, Error> {
        let inode = self.inode(ino)?;
        if (inode.flags & FLAG_EXTENTS != 0) == extents {
            return Ok(inode);
        }
        if extents {
            if inode.flags & FLAG_INLINE_DATA != 0 {
                return Err(Error::Invalid(format!("inode {ino} holds inline data: ext4 does not give it extents")));
            }
            return self.extent_mapped(ino);
        }
        let refused = |why: &'static str| Error::Unsupported {
            feature: why,
            remedy: "ext4 turns only a file of one extent within its first 12 blocks back into a block map",
        };
        if self.cluster_blocks() > 1 || self.layout.blocks_count > u64::from(u32::MAX) {
            return Err(refused("a block map on a volume with bigalloc or 64-bit block numbers"));
        }
        // The tree read as any read reads it first: a damaged one is an
        // error here, not a block map.
        self.runs(&inode)?;
        let root = &inode.raw[I_BLOCK..I_BLOCK + 60];
        let (entries, depth) = (le16(root, EH_ENTRIES), le16(root, EH_DEPTH));
        if depth != 0 || entries > 1 {
            return Err(refused("a block map for a file of more than one extent"));
        }
        let mut map = [0u32; 15];
        if entries == 1 {
            let extent = &root[EXT_ENTRY_BYTES..2 * EXT_ENTRY_BYTES];
            let start = le32(extent, EE_BLOCK) as usize;
            // The raw length: an unwritten extent's is over 32 768.
            let len = usize::from(le16(extent, EE_LEN));
            let physical = u64::from(le16(extent, EE_START_HI)) << 32 | u64::from(le32(extent, EE_START_LO));
            if start + len > 12 {
                return Err(refused("a block map for a file past its first 12 blocks"));
            }
            for (k, slot) in map[start..start + len].iter_mut().enumerate() {
                *slot = (physical + k as u64) as u32;
            }
        }
        self.edit_inode(&inode, |r| {
            put32(r, I_FLAGS, le32(r, I_FLAGS) & !FLAG_EXTENTS);
            for (k, block) in map.iter().enumerate() {
                put32(r, I_BLOCK + 4 * k, *block);
            }
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

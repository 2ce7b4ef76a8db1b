//! The free blocks ext4 holds back from an allocation, by who asks
//! (`ext4_has_free_clusters`): from everyone but the file system's own
//! metadata, its reserve for extent-tree growth (2 % of the clusters or
//! 4096, whichever is fewer; none without extents); from everyone but
//! `s_def_resuid`, a member of `s_def_resgid` or a holder of
//! `CAP_SYS_RESOURCE`, also the superblock's reserved blocks (`tune2fs -m`).
//! `statfs`'s available blocks are what an unprivileged caller may take.
//! The library itself (tools, tests) takes every free block unless told
//! who the caller is ([`Volume::set_caller`]; the FUSE layer tells it).

use crate::error::Error;
use crate::volume::{Caller, Volume};
use csumkit::ext4::feature_bits::{COMPAT_HAS_JOURNAL, INCOMPAT_64BIT, INCOMPAT_EXTENTS};
use csumkit::ext4::fields::{
    S_DEF_RESGID, S_DEF_RESUID, S_FREE_BLOCKS_HI, S_FREE_BLOCKS_LO, S_FREE_INODES, S_JOURNAL_INUM, S_OVERHEAD_CLUSTERS,
    S_R_BLOCKS_COUNT_HI, S_R_BLOCKS_COUNT_LO,
};
use csumkit::le::{le16, le32};

impl Volume {
    /// Whose allocations the next operations are (until set again).
    pub fn set_caller(&mut self, caller: Caller) {
        self.caller = caller;
    }

    /// `s_def_resuid` and `s_def_resgid`: who may take the reserved blocks.
    #[must_use]
    pub fn reserved_blocks_owner(&self) -> (u32, u32) {
        let sb = &self.map[1024..2048];
        (u32::from(le16(sb, S_DEF_RESUID)), u32::from(le16(sb, S_DEF_RESGID)))
    }

    /// (free blocks, reserved blocks) as the superblock counts them.
    pub(crate) fn free_and_reserved_blocks(&self) -> (u64, u64) {
        let sb = &self.map[1024..2048];
        let le32 = |at: usize| u64::from(le32(sb, at));
        let wide = self.layout.features.incompat & INCOMPAT_64BIT != 0;
        let high = |at: usize| if wide { le32(at) << 32 } else { 0 };
        (le32(S_FREE_BLOCKS_LO) | high(S_FREE_BLOCKS_HI), le32(S_R_BLOCKS_COUNT_LO) | high(S_R_BLOCKS_COUNT_HI))
    }

    /// ext4's reserve for extent-tree growth (`ext4_calculate_resv_clusters`).
    pub(crate) fn growth_reserve_blocks(&self) -> u64 {
        let l = &self.layout;
        if l.features.incompat & INCOMPAT_EXTENTS == 0 {
            return 0;
        }
        let cluster = self.cluster_blocks();
        (l.blocks_count / cluster / 50).min(4096) * cluster
    }

    /// Free blocks `caller` must leave.
    pub(crate) fn held_back_blocks(&self, caller: Caller) -> u64 {
        match caller {
            Caller::Unrestricted => 0,
            Caller::Privileged => self.growth_reserve_blocks(),
            Caller::Unprivileged => self.free_and_reserved_blocks().1.saturating_add(self.growth_reserve_blocks()),
        }
    }

    /// How many of `want` blocks the current caller may take now.
    ///
    /// # Errors
    /// `ENOSPC` when none.
    pub(crate) fn allowance(&self, want: u64) -> Result<u64, Error> {
        let floor = self.held_back_blocks(self.caller);
        if floor == 0 {
            return Ok(want); // the allocator's own ENOSPC, when no block is free
        }
        let free = self.free_and_reserved_blocks().0;
        match free.saturating_sub(floor).min(want) {
            0 if want > 0 => Err(Error::Io {
                context: format!("block allocation ({floor} free blocks held back from this caller)"),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            }),
            allowed => Ok(allowed),
        }
    }

    /// `op` with every free block open to it (a removal: ext4 lets a
    /// punch or truncate dip into its reserve, so space can be freed on a
    /// full file system).
    pub(crate) fn unrestricted<T>(&mut self, op: impl FnOnce(&mut Volume) -> T) -> T {
        let caller = std::mem::take(&mut self.caller);
        let result = op(self);
        self.caller = caller;
        result
    }
    /// `statfs`, counted as the kernel's `ext4_statfs` counts: the blocks
    /// the format's own structures take are not the file system's, and the
    /// blocks available to users leave out the reserved count and ext4's
    /// reserve for extent-tree growth (`ext4_calculate_resv_clusters`: 2 %
    /// of the clusters or 4096, whichever is fewer; none without extents).
    pub fn statfs(&self) -> StatFs {
        let l = &self.layout;
        let free_blocks = self.free_and_reserved_blocks().0;
        let free_inodes = le32(&self.map, 1024 + S_FREE_INODES);
        StatFs {
            block_size: l.block_size,
            blocks: l.blocks_count.saturating_sub(self.overhead_blocks()),
            free_blocks,
            available_blocks: free_blocks.saturating_sub(self.held_back_blocks(Caller::Unprivileged)),
            inodes: l.inodes_count,
            free_inodes: u64::from(free_inodes),
            name_max: 255,
        }
    }

    /// Blocks the format's structures take, as `ext4_calculate_overhead`
    /// counts them: all before the first data block; in each group its
    /// superblock copy and descriptor blocks, two bitmaps and an inode
    /// table; an internal journal. Under bigalloc (read-only here) the
    /// superblock's `s_overhead_clusters` where mke2fs wrote it; elsewhere
    /// the kernel ignores that field, and so does this.
    fn overhead_blocks(&self) -> u64 {
        let l = &self.layout;
        let sb = &self.map[1024..2048];
        let (cluster, stored) = (self.cluster_blocks(), u64::from(le32(sb, S_OVERHEAD_CLUSTERS)));
        // The kernel's own test of "ridiculous": clusters against blocks.
        if cluster > 1 && stored != 0 && stored <= l.blocks_count {
            return stored * cluster;
        }
        let table = (l.inodes_per_group * l.inode_size).div_ceil(l.block_size);
        let groups: u64 = (0..l.groups).map(|g| l.base_meta_blocks(g) + table + 2).sum();
        let journal_inode = le32(sb, S_JOURNAL_INUM);
        let journal = if l.features.compat & COMPAT_HAS_JOURNAL != 0 && journal_inode != 0 {
            self.inode(journal_inode).map_or(0, |j| j.size / l.block_size)
        } else {
            0
        };
        l.first_data_block + groups + journal
    }
}

/// What `statfs` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// Bytes per block.
    pub block_size: u64,
    /// Blocks in the filesystem.
    pub blocks: u64,
    /// Free blocks (the superblock's count).
    pub free_blocks: u64,
    /// Free blocks an unprivileged user may take (`f_bavail`).
    pub available_blocks: u64,
    /// Inodes.
    pub inodes: u64,
    /// Free inodes.
    pub free_inodes: u64,
    /// Longest name.
    pub name_max: u32,
}

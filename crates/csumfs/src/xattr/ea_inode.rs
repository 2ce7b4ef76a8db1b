//! xattr values in inodes of their own (`ea_inode`, `fs/ext4/xattr.c`): a
//! regular file flagged `EXT4_EA_INODE_FL`, in no directory, one link,
//! whose data is the value. Its `i_atime` holds the value's CRC32C (fs
//! seed), its `i_ctime` and `i_version` a 64-bit count of the entries that
//! name it — an entry in an inode body counts once, an entry in an xattr
//! block once for the block however many inodes share it. Each inode naming
//! one is charged the value's blocks in its own `i_blocks` (the kernel's
//! quota charge, which e2fsck checks). The count reaching 0 frees it.

use crate::error::{corrupt, Error};
use crate::format::xattr::EA_INODE_HASH;
use crate::inode::table::{Inode, NewInode, FLAG_EA_INODE, FLAG_EXTENTS};
use crate::volume::Volume;
use csumkit::crc32c;
use csumkit::le::{le32, put32};

/// `i_ctime`: the high half of the reference count.
const I_CTIME: usize = 0x0C;
/// `i_ctime_extra`: zero, as `inode_set_ctime(ea_inode, ref >> 32, 0)` leaves it.
const I_CTIME_EXTRA: usize = 0x84;
/// `i_atime_extra`.
const I_ATIME_EXTRA: usize = 0x8C;
/// `osd1.l_i_version`: the low half of the reference count.
const I_VERSION: usize = 0x24;
/// The largest value the VFS passes (`XATTR_SIZE_MAX`).
pub(crate) const VALUE_BYTES_MAX: usize = 65536;

/// Values whose padded size passes this go to an inode of their own, as
/// the kernel's `EXT4_XATTR_MIN_LARGE_EA_SIZE`: a block less its header,
/// one entry with a 3-byte name and the table's 4-byte end.
pub(crate) fn large_value(block_size: usize, len: usize) -> bool {
    len.next_multiple_of(4) > block_size - 32 - 20 - 4
}

/// The `e_value_inum` of every entry in the entry table at `start` of
/// `area` (the table already parsed and checked by `Volume::entries`).
pub(crate) fn value_inodes(area: &[u8], start: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let mut at = start;
    while at + 16 <= area.len() && le32(area, at) != 0 {
        let inum = le32(area, at + 4);
        if inum != 0 {
            out.push(inum);
        }
        at += (16 + usize::from(area[at])).next_multiple_of(4);
    }
    out
}

impl Volume {
    /// What a value of `len` bytes in an inode of its own costs each inode
    /// naming it, in 512-byte units (`size_to_quota_blocks` in e2fsck).
    pub(crate) fn value_charge(&self, len: usize) -> u64 {
        let cluster = self.layout.block_size * self.layout.blocks_per_group / self.layout.clusters_per_group.max(1);
        (len as u64).div_ceil(cluster) * cluster / 512
    }

    /// The hash an `ea_inode` keeps of its value (`ext4_xattr_inode_hash`).
    pub(crate) fn value_hash(&self, value: &[u8]) -> u32 {
        crc32c::raw_update(self.layout.csum_seed, value)
    }

    /// A new inode holding `value` for an entry of `owner`, its count 0:
    /// the entry naming it counts itself when stored.
    pub(crate) fn create_value_inode(&mut self, owner: &Inode, value: &[u8]) -> Result<u32, Error> {
        let group = self.layout.inode_group(u64::from(owner.ino)).0;
        let ino = self.allocate_inode(group, false)?;
        let new = NewInode { mode: 0o100_600, uid: owner.uid, gid: owner.gid };
        self.write_new_inode(ino, &new, 1, FLAG_EXTENTS | FLAG_EA_INODE)?;
        let inode = self.write(ino, 0, value)?;
        let hash = self.value_hash(value);
        self.edit_inode(&inode, |r| {
            put32(r, EA_INODE_HASH, hash);
            put32(r, I_ATIME_EXTRA, 0);
            put32(r, I_CTIME, 0);
            put32(r, I_CTIME_EXTRA, 0);
            put32(r, I_VERSION, 0);
        })?;
        Ok(ino)
    }

    /// The value inodes the entries in `inode`'s body name.
    pub(crate) fn value_inodes_in_body(&self, inode: &Inode) -> Vec<u32> {
        let (raw, at) = (&inode.raw, 128 + inode.extra_isize());
        if raw.len() > 128 && at + 4 <= raw.len() && le32(raw, at) == crate::format::xattr::MAGIC {
            return value_inodes(&raw[at + 4..], 0);
        }
        Vec::new()
    }

    /// Moves value inode `ino`'s reference count by `delta`; frees it when
    /// no entry names it any more.
    pub(crate) fn value_inode_refs(&mut self, ino: u32, delta: i64) -> Result<(), Error> {
        let inode = self.inode(ino)?;
        if inode.flags & FLAG_EA_INODE == 0 {
            return Err(corrupt(format!("xattr value inode {ino}"), "not flagged EA_INODE"));
        }
        let refs = u64::from(le32(&inode.raw, I_CTIME)) << 32 | u64::from(le32(&inode.raw, I_VERSION));
        let Some(refs) = refs.checked_add_signed(delta) else {
            return Err(corrupt(format!("xattr value inode {ino}"), format!("{refs} references, {delta} dropped")));
        };
        if refs == 0 {
            return self.release(inode);
        }
        self.edit_inode(&inode, |r| {
            put32(r, I_CTIME, (refs >> 32) as u32);
            put32(r, I_VERSION, refs as u32);
        })
        .map(|_| ())
    }

    /// Moves the counts of the value inodes an inode's entries stopped
    /// naming (`before`) and started naming (`after`): increments first,
    /// so a value named before and after is never freed in between.
    pub(crate) fn move_value_refs(&mut self, before: &[u32], after: &[u32]) -> Result<(), Error> {
        let mut delta = std::collections::BTreeMap::<u32, i64>::new();
        for &ino in after {
            *delta.entry(ino).or_default() += 1;
        }
        for &ino in before {
            *delta.entry(ino).or_default() -= 1;
        }
        for (&ino, &d) in delta.iter().filter(|(_, &d)| d > 0) {
            self.value_inode_refs(ino, d)?;
        }
        for (&ino, &d) in delta.iter().filter(|(_, &d)| d < 0) {
            self.value_inode_refs(ino, d)?;
        }
        Ok(())
    }
}

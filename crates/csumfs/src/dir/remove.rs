//! Removing names and the inodes they were the last link to: `unlink`,
//! `rmdir`. A directory entry is removed by folding its record into the
//! one before it (or, first in its block, by clearing its inode number) —
//! the block's checksum moved by splice over the few bytes that change.
//! An inode's last link frees its data runs, its mapping blocks and its
//! xattr block (or drops one reference to a shared one), and its bit.

use crate::dir::read::records;
use crate::error::Error;
use crate::format::inode::{encode_time, now, put_time};
use crate::inode::immutable;
use crate::inode::table::{Inode, FLAG_INDEX, FLAG_INLINE_DATA};
use crate::volume::Volume;
use csumkit::ext4::fields::{
    BG_USED_DIRS_HI, BG_USED_DIRS_LO, I_BLOCK, I_BLOCKS_HIGH, I_BLOCKS_LO, I_CTIME, I_CTIME_EXTRA, I_DTIME,
    I_FILE_ACL_HIGH, I_FILE_ACL_LO, I_FLAGS, I_LINKS_COUNT, I_SIZE_HIGH, I_SIZE_LO,
};
use csumkit::le::{le16, le32, put16, put32};

impl Volume {
    /// Removes the name `name` (not a directory) from `dir`; the inode
    /// goes when this was its last link.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::IsDir`], [`Error::NotDir`].
    pub fn unlink(&mut self, dir: u32, name: &[u8]) -> Result<(), Error> {
        self.fast_eligible(|v| v.unlink_name(dir, name))
    }

    /// [`unlink`](Self::unlink)'s work.
    fn unlink_name(&mut self, dir: u32, name: &[u8]) -> Result<(), Error> {
        let parent = self.extent_mapped_dir(dir)?;
        let entry = self.lookup(&parent, name)?;
        let inode = self.inode(entry.ino)?;
        immutable::may_remove_name(&parent, &inode)?;
        if inode.is_dir() {
            return Err(Error::IsDir(String::from_utf8_lossy(name).into_owned()));
        }
        self.remove_entry(&parent, name)?;
        self.fast_track_dentry(csumkit::ext4::jbd2::fast_commit::TAG_UNLINK, dir, entry.ino, name);
        self.touch_dir(dir, 0)?;
        self.drop_link(inode)
    }

    /// Removes the empty directory `name` from `dir`.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::NotDir`], `ENOTEMPTY` as [`Error::NotEmpty`].
    pub fn rmdir(&mut self, dir: u32, name: &[u8]) -> Result<(), Error> {
        if name == b"." || name == b".." {
            return Err(Error::Invalid(format!("{:?} cannot be removed", String::from_utf8_lossy(name))));
        }
        let parent = self.extent_mapped_dir(dir)?;
        let entry = self.lookup(&parent, name)?;
        let inode = self.inode(entry.ino)?;
        immutable::may_remove_name(&parent, &inode)?;
        if !inode.is_dir() {
            return Err(Error::NotDir(String::from_utf8_lossy(name).into_owned()));
        }
        if self.read_dir(&inode)?.iter().any(|e| e.name != b"." && e.name != b"..") {
            return Err(Error::NotEmpty(String::from_utf8_lossy(name).into_owned()));
        }
        self.remove_entry(&parent, name)?;
        self.touch_dir(dir, -1)?; // its ".." no longer links the parent
        self.release(inode)
    }

    /// Drops one link; the inode goes with its last (at its last
    /// [`unhold`](Self::unhold) if a handle holds it).
    fn drop_link(&mut self, inode: Inode) -> Result<(), Error> {
        if inode.links > 1 || self.is_held(inode.ino) {
            let (sec, extra) = encode_time(now());
            let links = inode.links - 1;
            let inode = self.edit_inode(&inode, |r| {
                put16(r, I_LINKS_COUNT, links);
                put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, extra));
            })?;
            if links == 0 {
                // Freed at its last close; on the orphan list meanwhile.
                self.orphans.insert(inode.ino);
                self.orphan_add(&inode)?;
            }
            return Ok(());
        }
        self.release(inode)
    }

    /// Frees an inode with no links left: data, mapping blocks, xattr
    /// block, then the inode itself (links 0, `i_dtime` set, bit cleared).
    pub(crate) fn release(&mut self, inode: Inode) -> Result<(), Error> {
        if inode.flags & FLAG_INLINE_DATA == 0 && !inode.is_fast_symlink() {
            for run in self.runs(&inode)? {
                self.free_blocks(run.physical, run.len)?;
            }
            for block in self.tree_blocks(&inode)? {
                self.free_blocks(block, 1)?;
            }
        }
        if inode.file_acl != 0 {
            self.drop_xattr_block(&inode)?;
        }
        let named = self.value_inodes_in_body(&inode);
        self.move_value_refs(&named, &[])?;
        let (sec, _) = encode_time(now());
        let inode = self.edit_inode(&inode, |r| {
            put16(r, I_LINKS_COUNT, 0);
            put32(r, I_DTIME, sec); // i_dtime
            put32(r, I_SIZE_LO, 0);
            put32(r, I_SIZE_HIGH, 0);
            put32(r, I_BLOCKS_LO, 0);
            put16(r, I_BLOCKS_HIGH, 0);
            put32(r, I_FILE_ACL_LO, 0);
            put16(r, I_FILE_ACL_HIGH, 0);
            if le32(r, I_FLAGS) & crate::inode::table::FLAG_EXTENTS != 0 {
                // An empty extent root.
                r[0x28 + 2..0x28 + 60].fill(0);
                put16(r, I_BLOCK + 4, 4);
            }
        })?;
        let l = self.layout.clone();
        let (g, index) = l.inode_group(u64::from(inode.ino));
        let group = l.group(&self.map, g)?;
        self.flip_bits(&group, true, index, 1, false)?;
        if inode.is_dir() {
            let wide = l.desc_size >= 0x40;
            self.edit_descriptor(&group, |d| {
                let dirs = u32::from(le16(d, BG_USED_DIRS_LO))
                    | if wide { u32::from(le16(d, BG_USED_DIRS_HI)) << 16 } else { 0 };
                put16(d, BG_USED_DIRS_LO, (dirs - 1) as u16);
                if wide {
                    put16(d, BG_USED_DIRS_HI, ((dirs - 1) >> 16) as u16);
                }
            })?;
        }
        self.edit_superblock(0, 1)
    }

    /// One reference less to an xattr block; freed with its last.
    pub(crate) fn drop_xattr_block(&mut self, inode: &Inode) -> Result<(), Error> {
        let b = inode.file_acl;
        let old = self.block(b, &|| format!("inode {} xattr block {b}", inode.ino))?.to_vec();
        let refs = le32(&old, 4);
        if refs <= 1 {
            // The block's entries held their value inodes' references.
            self.move_value_refs(&crate::xattr::ea_inode::value_inodes(&old, 32), &[])?;
            return self.free_blocks(b, 1);
        }
        let mut new = old.clone();
        put32(&mut new, 4, refs - 1);
        self.rewrite_xattr_block(b, &mut new)
    }

    /// Takes `name`'s entry out of its leaf block.
    pub(crate) fn remove_entry(&mut self, dir: &Inode, name: &[u8]) -> Result<(), Error> {
        crate::dir::write::not_inline(dir)?;
        let bs = self.layout.block_size as usize;
        let not_found = || Error::NotFound(String::from_utf8_lossy(name).into_owned());
        let (place, _) = self.find_in_blocks(dir, name)?.ok_or_else(not_found)?;
        let physical = place.physical;
        if dir.flags & FLAG_INDEX != 0 && place.logical == 0 {
            return Err(Error::Invalid(format!(
                "{}: the htree root's own entries stay",
                String::from_utf8_lossy(name)
            )));
        }
        let old = self.block(physical, &|| format!("directory {} block {physical}", dir.ino))?;
        let mut prev = None;
        let area = &old[..bs - 12]; // the tail after it holds the checksum
        for record in records(area, area.len(), || format!("directory {} block {physical}", dir.ino)) {
            let record = record?;
            if record.ino != 0 && record.name == name {
                // One small edit: the record before absorbs this one, or
                // (first in its block) the inode number is cleared.
                let (edit_at, bytes) = match prev {
                    Some((p, p_len)) => (p + 4, ((p_len + record.rec_len) as u16).to_le_bytes().to_vec()),
                    None => (record.at, vec![0; 4]),
                };
                let seal = (bs - 12, bs - 4, dir.csum_seed);
                return self.patch("directory block", physical * bs as u64, seal, &[(edit_at, &bytes)]);
            }
            prev = Some((record.at, record.rec_len));
        }
        Err(not_found())
    }
}

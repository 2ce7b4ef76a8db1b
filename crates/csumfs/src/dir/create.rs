//! New names: a file or directory created in a directory, the checks a
//! new name passes, and the parent's times and link count.

use crate::error::Error;
use crate::format::dir_block::{file_type, new_dir_block};
use crate::format::flags::inherited_flags;
use crate::format::inode::{encode_time, now, put_time};
use crate::inode::immutable;
use crate::inode::table::{Inode, NewInode, FLAG_EXTENTS};
use crate::space::grow::Fill;
use crate::volume::Volume;
use csumkit::ext4::fields::{I_CTIME, I_CTIME_EXTRA, I_LINKS_COUNT, I_MTIME, I_MTIME_EXTRA, I_SIZE_LO};
use csumkit::le::{put16, put32};

impl Volume {
    pub(crate) fn touch_dir(&mut self, dir: u32, link_delta: i32) -> Result<(), Error> {
        let dir = self.inode(dir)?;
        let (sec, extra) = encode_time(now());
        let links = (i32::from(dir.links) + link_delta) as u16;
        self.edit_inode(&dir, |r| {
            put16(r, I_LINKS_COUNT, links);
            put_time(r, I_MTIME, I_MTIME_EXTRA, (sec, extra));
            put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, extra));
        })?;
        Ok(())
    }

    /// Directory `dir`, ready to take the new name `name`: extent-mapped
    /// (a block-mapped directory is converted first), a directory, the name
    /// valid and absent, and the directory not immutable or append-only.
    pub(crate) fn parent_for_new_name(&mut self, dir: u32, name: &[u8]) -> Result<Inode, Error> {
        let parent = self.extent_mapped_dir(dir)?;
        if !parent.is_dir() {
            return Err(Error::NotDir(format!("inode {dir}")));
        }
        self.check_new_name(&parent, name)?;
        immutable::may_add_name(&parent)?;
        Ok(parent)
    }

    pub(crate) fn check_new_name(&self, dir: &Inode, name: &[u8]) -> Result<(), Error> {
        let shown = || String::from_utf8_lossy(name).into_owned();
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
            return Err(Error::Invalid(format!("{:?} is not a name", shown())));
        }
        match self.lookup(dir, name) {
            Ok(_) => Err(Error::Exists(shown())),
            Err(Error::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates a regular file (or a FIFO, socket or device per `mode`'s
    /// type) named `name` in directory `dir`.
    ///
    /// # Errors
    /// [`Error::Exists`], [`Error::NameTooLong`], [`Error::NotDir`];
    /// [`Error::Unsupported`] for directories this writer cannot grow.
    pub fn create(&mut self, dir: u32, name: &[u8], new: NewInode) -> Result<Inode, Error> {
        self.fast_eligible(|v| {
            let inode = v.create_named(dir, name, new)?;
            v.fast_track_dentry(csumkit::ext4::jbd2::fast_commit::TAG_CREAT, dir, inode.ino, name);
            Ok(inode)
        })
    }

    /// [`create`](Self::create)'s work.
    fn create_named(&mut self, dir: u32, name: &[u8], new: NewInode) -> Result<Inode, Error> {
        let parent = self.parent_for_new_name(dir, name)?;
        let group = self.layout.inode_group(u64::from(dir)).0;
        let ino = self.allocate_inode(group, false)?;
        // Only files, directories and symlinks are extent-mapped (as
        // ext4_new_inode sets the flag); e2fsck calls a FIFO, socket or
        // device with the flag illegal.
        let extents = if new.mode & 0o170_000 == 0o100_000 { FLAG_EXTENTS } else { 0 };
        let flags = extents | inherited_flags(parent.flags, new.mode);
        let inode = self.write_new_inode(ino, &new, 1, flags)?;
        if let Err(e) = self.add_entry(&parent, name, ino, file_type(new.mode)) {
            // Nothing half done: the unlinked inode goes back.
            self.release(inode)?;
            return Err(e);
        }
        self.touch_dir(dir, 0)?;
        Ok(inode)
    }

    /// Creates directory `name` in `dir`, with its `.` and `..`.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn mkdir(&mut self, dir: u32, name: &[u8], new: NewInode) -> Result<Inode, Error> {
        let parent = self.parent_for_new_name(dir, name)?;
        // Orlov-like spread: a new top-level directory goes to the group
        // after its parent's, deeper ones stay near their parent.
        let parent_group = self.layout.inode_group(u64::from(dir)).0;
        // (`allocate_inode` wraps past the last group.)
        let goal = if dir == crate::inode::table::ROOT { parent_group + 1 } else { parent_group };
        let ino = self.allocate_inode(goal, true)?;
        let mode = (new.mode & 0o7777) | 0o040_000;
        let flags = FLAG_EXTENTS | inherited_flags(parent.flags, mode);
        let inode = self.write_new_inode(ino, &NewInode { mode, ..new }, 2, flags)?;
        let inode = self.grow(inode, 0, 1, Fill::Nothing)?;
        let bs = self.layout.block_size as usize;
        let block = new_dir_block(bs, inode.csum_seed, &[(ino, 2, b"."), (dir, 2, b"..")]);
        let physical = self.runs(&inode)?[0].physical;
        self.store_unread(physical * bs as u64, &block)?;
        let inode = self.edit_inode(&inode, |r| put32(r, I_SIZE_LO, bs as u32))?;
        if let Err(e) = self.add_entry(&parent, name, ino, 2) {
            self.release(inode)?;
            return Err(e);
        }
        self.touch_dir(dir, 1)?;
        Ok(inode)
    }
}

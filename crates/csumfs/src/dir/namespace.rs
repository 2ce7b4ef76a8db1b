//! Names that move or multiply: `rename` (replace, `RENAME_NOREPLACE`,
//! `RENAME_EXCHANGE`), `link`, `symlink`. An entry whose inode changes is
//! patched in place (its inode number and type: eight bytes spliced into
//! the leaf's checksum); a directory moved to another parent gets its `..`
//! patched the same way, and the two parents' link counts follow.

use crate::error::Error;
use crate::format::dir_block::file_type;
use crate::format::flags::inherited_flags;
use crate::format::inode::{encode_time, now, put_time};
use crate::inode::immutable;
use crate::inode::table::{Inode, NewInode, FLAG_EXTENTS, FLAG_INDEX, ROOT};
use crate::space::grow::Fill;
use crate::volume::Volume;
use csumkit::ext4::fields::{
    DX_ROOT_INFO_LENGTH, DX_ROOT_RESERVED_ZERO, I_BLOCK, I_CTIME, I_CTIME_EXTRA, I_LINKS_COUNT, I_SIZE_LO,
};
use csumkit::le::{le16, put16, put32};

/// How `rename` treats an existing target.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RenameMode {
    /// Replace it (a directory only with an empty directory).
    #[default]
    Replace,
    /// `RENAME_NOREPLACE`: `EEXIST` if it exists.
    NoReplace,
    /// `RENAME_EXCHANGE`: swap the two names; both must exist.
    Exchange,
}

impl Volume {
    /// Moves `old_dir/old_name` to `new_dir/new_name`.
    ///
    /// # Errors
    /// `ENOENT`, `EEXIST` (NoReplace), `ENOTEMPTY`, `EISDIR`/`ENOTDIR` for
    /// a file/directory mismatch, `EINVAL` for a directory moved under itself.
    pub fn rename(
        &mut self,
        old_dir: u32,
        old_name: &[u8],
        new_dir: u32,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<(), Error> {
        self.fast_eligible(|v| v.rename_names(old_dir, old_name, new_dir, new_name, mode))
    }

    /// [`rename`](Self::rename)'s work.
    fn rename_names(
        &mut self,
        old_dir: u32,
        old_name: &[u8],
        new_dir: u32,
        new_name: &[u8],
        mode: RenameMode,
    ) -> Result<(), Error> {
        let shown = |n: &[u8]| String::from_utf8_lossy(n).into_owned();
        if [old_name, new_name].iter().any(|n| *n == b"." || *n == b"..") {
            return Err(Error::Invalid("`.` and `..` cannot be renamed".into()));
        }
        let (from_dir, to_dir) = (self.extent_mapped_dir(old_dir)?, self.extent_mapped_dir(new_dir)?);
        if !to_dir.is_dir() {
            return Err(Error::NotDir(format!("inode {new_dir}")));
        }
        // A directory moving to another parent gets a new `..`.
        let moved = |v: &mut Volume, ino: u32| if old_dir != new_dir { v.extent_mapped_dir(ino) } else { v.inode(ino) };
        let source = moved(self, self.lookup(&from_dir, old_name)?.ino)?;
        let target = match self.lookup(&to_dir, new_name) {
            Ok(e) => Some(moved(self, e.ino)?),
            Err(Error::NotFound(_)) => None,
            Err(e) => return Err(e),
        };
        if source.is_dir() && old_dir != new_dir && self.is_ancestor(source.ino, new_dir)? {
            return Err(Error::Invalid(format!("{} cannot move under itself", shown(old_name))));
        }
        if target.as_ref().is_some_and(|t| t.ino == source.ino) {
            return Ok(()); // two names of one inode: POSIX says do nothing
        }
        // The VFS's own refusals (EEXIST, ENOENT) come first; then
        // `may_delete` of the source and `may_create`/`may_delete` at the target.
        if !matches!((mode, &target), (RenameMode::Exchange, None) | (RenameMode::NoReplace, Some(_))) {
            immutable::may_remove_name(&from_dir, &source)?;
            match &target {
                Some(target) => immutable::may_remove_name(&to_dir, target)?,
                None => immutable::may_add_name(&to_dir)?,
            }
        }
        match (mode, target) {
            (RenameMode::Exchange, None) => Err(Error::NotFound(shown(new_name))),
            (RenameMode::Exchange, Some(target)) => {
                self.fast_ineligible("two names exchanged");
                self.set_entry(&from_dir, old_name, target.ino, file_type(target.mode))?;
                self.set_entry(&self.inode(new_dir)?, new_name, source.ino, file_type(source.mode))?;
                if old_dir != new_dir {
                    for (moved, parent) in [(&source, new_dir), (&target, old_dir)] {
                        if moved.is_dir() {
                            self.set_entry(moved, b"..", parent, 2)?;
                        }
                    }
                    let delta = i32::from(source.is_dir()) - i32::from(target.is_dir());
                    self.touch_dir(old_dir, -delta)?;
                    self.touch_dir(new_dir, delta)?;
                } else {
                    self.touch_dir(old_dir, 0)?;
                }
                self.touch_inode(&source)?;
                self.touch_inode(&target)
            }
            (RenameMode::NoReplace, Some(_)) => Err(Error::Exists(shown(new_name))),
            (_, target) => {
                if let Some(target) = target {
                    match (source.is_dir(), target.is_dir()) {
                        (true, false) => return Err(Error::NotDir(shown(new_name))),
                        (false, true) => return Err(Error::IsDir(shown(new_name))),
                        (true, true) => {
                            if self.read_dir(&target)?.iter().any(|e| e.name != b"." && e.name != b"..") {
                                return Err(Error::NotEmpty(shown(new_name)));
                            }
                            self.rmdir(new_dir, new_name)?;
                        }
                        (false, false) => self.unlink(new_dir, new_name)?,
                    }
                }
                self.add_entry(&self.inode(new_dir)?, new_name, source.ino, file_type(source.mode))?;
                // Found again, not where the lookup above found it: in one
                // directory, the add may have split the leaf that held it.
                self.remove_entry(&self.inode(old_dir)?, old_name)?;
                // As the kernel's rename: a non-directory's is a link and
                // an unlink (after the target's unlink, tracked by it); a
                // directory's needs a full commit.
                if source.is_dir() {
                    self.fast_ineligible("a directory renamed");
                } else {
                    use csumkit::ext4::jbd2::fast_commit::{TAG_LINK, TAG_UNLINK};
                    self.fast_track_dentry(TAG_LINK, new_dir, source.ino, new_name);
                    self.fast_track_dentry(TAG_UNLINK, old_dir, source.ino, old_name);
                }
                if source.is_dir() && old_dir != new_dir {
                    self.set_entry(&self.inode(source.ino)?, b"..", new_dir, 2)?;
                    self.touch_dir(old_dir, -1)?;
                    self.touch_dir(new_dir, 1)?;
                } else {
                    self.touch_dir(old_dir, 0)?;
                    if new_dir != old_dir {
                        self.touch_dir(new_dir, 0)?;
                    }
                }
                self.touch_inode(&self.inode(source.ino)?)
            }
        }
    }

    /// A second name `new_dir/new_name` for the file `ino`.
    ///
    /// # Errors
    /// [`Error::Permission`] (`EPERM`) for a directory; `EEXIST`;
    /// [`Error::TooManyLinks`] (`EMLINK`) past 65 000 links.
    pub fn link(&mut self, ino: u32, new_dir: u32, new_name: &[u8]) -> Result<Inode, Error> {
        self.fast_eligible(|v| {
            let inode = v.link_name(ino, new_dir, new_name)?;
            v.fast_track_dentry(csumkit::ext4::jbd2::fast_commit::TAG_LINK, new_dir, ino, new_name);
            Ok(inode)
        })
    }

    /// [`link`](Self::link)'s work.
    fn link_name(&mut self, ino: u32, new_dir: u32, new_name: &[u8]) -> Result<Inode, Error> {
        let inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(Error::Permission("hard links to directories are not allowed".into()));
        }
        if inode.links >= 65_000 {
            return Err(Error::TooManyLinks(format!("inode {ino} has {} links", inode.links)));
        }
        let dir = self.extent_mapped_dir(new_dir)?;
        if !dir.is_dir() {
            return Err(Error::NotDir(format!("inode {new_dir}")));
        }
        self.check_new_name(&dir, new_name)?;
        immutable::may_add_name(&dir)?;
        immutable::may_modify(&inode, "no new link")?;
        self.add_entry(&dir, new_name, ino, file_type(inode.mode))?;
        self.touch_dir(new_dir, 0)?;
        let (sec, extra) = encode_time(now());
        let links = inode.links + 1;
        self.edit_inode(&inode, |r| {
            put16(r, I_LINKS_COUNT, links);
            put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, extra));
        })
    }

    /// A symbolic link `dir/name` → `target`: in the inode (a fast
    /// symlink) up to 59 bytes, else in a data block.
    ///
    /// # Errors
    /// `ENAMETOOLONG` for a target longer than a block less one byte.
    pub fn symlink(&mut self, dir: u32, name: &[u8], target: &[u8], uid: u32, gid: u32) -> Result<Inode, Error> {
        let bs = self.layout.block_size as usize;
        if target.is_empty() || target.len() >= bs {
            return Err(Error::NameTooLong(String::from_utf8_lossy(target).into_owned()));
        }
        let parent = self.parent_for_new_name(dir, name)?;
        let group = self.layout.inode_group(u64::from(dir)).0;
        let ino = self.allocate_inode(group, false)?;
        let new = NewInode { mode: 0o120_777, uid, gid };
        let fast = target.len() < 60;
        let flags = if fast { 0 } else { FLAG_EXTENTS } | inherited_flags(parent.flags, new.mode);
        let mut inode = self.write_new_inode(ino, &new, 1, flags)?;
        let len = target.len() as u32;
        if fast {
            let mut block = [0u8; 60];
            block[..target.len()].copy_from_slice(target);
            inode = self.edit_inode(&inode, |r| {
                r[I_BLOCK..I_BLOCK + 60].copy_from_slice(&block);
                put32(r, I_SIZE_LO, len);
            })?;
        } else {
            inode = self.grow(inode, 0, 1, Fill::Nothing)?;
            let physical = self.runs(&inode)?[0].physical;
            let mut data = vec![0u8; bs];
            data[..target.len()].copy_from_slice(target);
            self.store(physical * bs as u64, &data)?;
            inode = self.edit_inode(&inode, |r| put32(r, I_SIZE_LO, len))?;
        }
        if let Err(e) = self.add_entry(&parent, name, ino, file_type(new.mode)) {
            self.release(inode)?;
            return Err(e);
        }
        self.touch_dir(dir, 0)?;
        self.inode(ino)
    }

    /// Whether directory `ancestor` is `dir` or above it (walking `..`).
    fn is_ancestor(&self, ancestor: u32, mut dir: u32) -> Result<bool, Error> {
        for _ in 0..=self.layout.inodes_count {
            if dir == ancestor {
                return Ok(true);
            }
            if dir == ROOT {
                return Ok(false);
            }
            dir = self.lookup(&self.inode(dir)?, b"..")?.ino;
        }
        Err(Error::Corrupt { what: "directory tree".into(), detail: "a `..` cycle".into() })
    }

    fn touch_inode(&mut self, inode: &Inode) -> Result<(), Error> {
        let (sec, extra) = encode_time(now());
        self.edit_inode(inode, |r| {
            put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, extra));
        })?;
        Ok(())
    }

    /// Points the entry `name` of `dir` at another inode (and type): eight
    /// bytes patched in the leaf, its checksum spliced.
    fn set_entry(&mut self, dir: &Inode, name: &[u8], ino: u32, ft: u8) -> Result<(), Error> {
        crate::dir::write::not_inline(dir)?;
        let bs = self.layout.block_size as usize;
        let not_found = || Error::NotFound(String::from_utf8_lossy(name).into_owned());
        let (place, _) = self.find_in_blocks(dir, name)?.ok_or_else(not_found)?;
        let physical = place.physical;
        let block = self.block(physical, &|| format!("directory {} block {physical}", dir.ino))?;
        // The htree root's `.` and `..` lie in its first 24 bytes (`..`
        // spanning the index); a leaf's entries before its checksum tail.
        let root = dir.flags & FLAG_INDEX != 0 && place.logical == 0;
        let (area, starts_before) = if root { (block, 24) } else { (&block[..bs - 12], bs - 12) };
        let found = crate::dir::read::find_record(area, starts_before, name, || {
            format!("directory {} block {physical}", dir.ino)
        })?;
        let at = found.ok_or_else(not_found)?.at;
        let mut field = [0u8; 8];
        field.copy_from_slice(&block[at..at + 8]);
        put32(&mut field, 0, ino);
        field[7] = ft;
        if root {
            // The root's ".." lies inside the index block: its checksum is
            // the dx tail's, over the root's count.
            return self.patch_dx_root(dir, physical, at, &field);
        }
        let seal = (bs - 12, bs - 4, dir.csum_seed);
        self.patch("directory block", physical * bs as u64, seal, &[(at, &field)])
    }

    /// Patches bytes of an htree root (its `.`/`..` entries) and re-seals
    /// its dx tail, whose checksum covers the root up to its entries.
    fn patch_dx_root(&mut self, dir: &Inode, physical: u64, at: usize, bytes: &[u8]) -> Result<(), Error> {
        let bs = self.layout.block_size as usize;
        let block = self.block(physical, &|| format!("directory {} htree root", dir.ino))?;
        let count_at = DX_ROOT_RESERVED_ZERO + usize::from(block[DX_ROOT_INFO_LENGTH]);
        let (limit, count) = (usize::from(le16(block, count_at)), usize::from(le16(block, count_at + 2)));
        let tail = count_at + 8 * limit;
        let covered = count_at + 8 * count;
        // The dx checksum covers the root up to its last entry, then
        // dt_reserved and a zeroed dt_checksum: recomputed whole (a few
        // hundred bytes at most).
        let base = physical as usize * bs;
        let image = self.image_mut(base, bs)?;
        image[base + at..base + at + bytes.len()].copy_from_slice(bytes);
        let node = image[base..base + bs].to_vec();
        let crc = csumkit::crc32c::raw_update(dir.csum_seed, &node[..covered]);
        let crc = csumkit::crc32c::raw_update(crc, &node[tail..tail + 4]);
        let crc = csumkit::crc32c::raw_update(crc, &[0; 4]);
        put32(image, base + tail + 4, crc);
        Ok(())
    }
}

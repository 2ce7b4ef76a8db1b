//! Setting and removing extended attributes. The inode's whole list is
//! laid out again: entries that fit stay in the inode (after
//! `i_extra_isize`, hash 0, as the kernel writes them there), the rest go
//! to the external block, sorted and hashed as `ext4_xattr_set_entry` and
//! `ext4_xattr_rehash` do. A block shared with other inodes is never
//! changed: the inode gets a block of its own and the shared one loses a
//! reference. POSIX ACLs arrive in the VFS encoding and are stored in
//! ext4's compact one. The inode's checksum moves by splice; a rewritten
//! block's by splice over the bytes that changed.

use crate::error::{corrupt, Error};
use crate::format::acl::{ACCESS, DEFAULT};
use crate::format::inode::{encode_time, now, put_time};
use crate::format::xattr::MAGIC;
use crate::inode::immutable;
use crate::inode::table::{Inode, FLAG_INLINE_DATA};
use crate::splice::splice_all;
use crate::volume::Volume;
use crate::xattr::ea_inode;
use crate::xattr::read::{split, Entry};
use csumkit::crc32c;
use csumkit::ext4::feature_bits::INCOMPAT_EA_INODE;
use csumkit::ext4::fields::{
    I_BLOCKS_HIGH, I_BLOCKS_LO, I_CTIME, I_CTIME_EXTRA, I_FILE_ACL_HIGH, I_FILE_ACL_LO, XATTR_H_CHECKSUM, XATTR_H_HASH,
};
use csumkit::le::{le32, put16, put32};
use std::ffi::OsStr;

/// What `setxattr` requires of the name's presence (`XATTR_CREATE`,
/// `XATTR_REPLACE`, or neither).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum XattrMode {
    /// Create or replace.
    #[default]
    Either,
    /// `EEXIST` if present.
    Create,
    /// `ENODATA` if absent.
    Replace,
}

/// Bytes an entry takes in an entry table (header, name, padding).
fn entry_bytes(e: &Entry) -> usize {
    (16 + e.suffix.len()).next_multiple_of(4)
}

/// Bytes the value takes beside the entries: none when an inode of its
/// own holds it.
fn value_bytes(e: &Entry) -> usize {
    if e.value_inum != 0 {
        return 0;
    }
    e.value.len().next_multiple_of(4)
}

/// `ext4_xattr_hash_entry`: the name bytes, then the value as
/// little-endian words (zero padded) — for a value in an inode of its own,
/// the one word of that inode's hash of it.
fn entry_hash(e: &Entry) -> u32 {
    let mut hash = 0u32;
    for &c in &e.suffix {
        hash = (hash << 5) ^ (hash >> 27) ^ u32::from(c);
    }
    let mut padded = if e.value_inum != 0 { e.value_hash.to_le_bytes().to_vec() } else { e.value.clone() };
    padded.resize(padded.len().next_multiple_of(4), 0);
    for word in padded.chunks_exact(4) {
        hash = (hash << 16) ^ (hash >> 16) ^ le32(word, 0);
    }
    hash
}

/// Writes `entries` into `area` as an entry table from `start` with values
/// packed down from `area.len()`, their offsets counted from the area's
/// start (a block's first byte; in an inode, the first entry's).
/// `hashes`: whether entries carry their hash (blocks do, inodes do not).
fn lay_out(area: &mut [u8], start: usize, entries: &[Entry], hashes: bool) -> Vec<u32> {
    let (mut at, mut value_end) = (start, area.len());
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let in_table = e.value_inum == 0 && !e.value.is_empty();
        if in_table {
            value_end -= value_bytes(e);
            area[value_end..value_end + e.value.len()].copy_from_slice(&e.value);
        }
        // An entry naming a value inode is hashed wherever it is (e2fsck
        // checks it against that inode's hash).
        let hash = if hashes || e.value_inum != 0 { entry_hash(e) } else { 0 };
        area[at] = e.suffix.len() as u8;
        area[at + 1] = e.index;
        put16(area, at + 2, if in_table { value_end as u16 } else { 0 });
        put32(area, at + 4, e.value_inum);
        put32(area, at + 8, e.value.len() as u32);
        put32(area, at + 12, hash);
        area[at + 16..at + 16 + e.suffix.len()].copy_from_slice(&e.suffix);
        out.push(hash);
        at += entry_bytes(e);
    }
    out
}

/// Which entries go in the inode (after its magic, as far as they fit, in
/// order) and which in its block (sorted by index, name length, name, as
/// the kernel keeps them); `None` when the block cannot hold the rest.
fn place(inode: &Inode, block_size: usize, entries: Vec<Entry>) -> Option<(Vec<Entry>, Vec<Entry>)> {
    let region = inode.raw.len() - 128 - inode.extra_isize();
    // Magic, entries, their values and the 4-byte end of the table.
    let (mut in_inode, mut in_block) = (Vec::new(), Vec::new());
    let mut used = 4 + 4;
    for e in entries {
        let need = entry_bytes(&e) + value_bytes(&e);
        if in_block.is_empty() && used + need <= region {
            used += need;
            in_inode.push(e);
        } else {
            in_block.push(e);
        }
    }
    in_block.sort_by(|a, b| (a.index, a.suffix.len(), &a.suffix).cmp(&(b.index, b.suffix.len(), &b.suffix)));
    let block_need: usize = 32 + 4 + in_block.iter().map(|e| entry_bytes(e) + value_bytes(e)).sum::<usize>();
    (block_need <= block_size).then_some((in_inode, in_block))
}

impl Volume {
    /// Sets xattr `name` of inode `ino` to `value`. A POSIX ACL name
    /// takes the VFS encoding and keeps the mode in step, as ext4 does
    /// (see `xattr/acl.rs`; `mode` does not apply to it, and an empty ACL
    /// removes it).
    ///
    /// # Errors
    /// `EEXIST` ([`XattrMode::Create`]), `ENODATA` ([`XattrMode::Replace`]),
    /// `EOPNOTSUPP` for a name with no ext4 prefix, `ENAMETOOLONG` for a
    /// name over 255 bytes, `ENOSPC` when the inode and one block cannot hold
    /// the list (the kernel's answer for any value too large for a block,
    /// without `ea_inode`), `E2BIG` for a value over 64 KiB (the VFS's
    /// limit); for an ACL, `EINVAL` or `EOPNOTSUPP` as the kernel parses
    /// it, `EACCES` for a default ACL on a non-directory.
    pub fn setxattr(
        &mut self,
        ino: u32,
        name: impl AsRef<OsStr>,
        value: &[u8],
        mode: XattrMode,
    ) -> Result<Inode, Error> {
        self.setxattr_by(ino, name, value, mode, true)
    }

    /// [`setxattr`](Self::setxattr) by a caller who is in the file's group
    /// or holds `CAP_FSETID` (`in_group_or_capable`), or not: such a caller
    /// setting an access ACL clears the file's set-group-ID bit, as
    /// `posix_acl_update_mode` does for ext4 (the kernel leaves it to a
    /// FUSE file system, flagging the request only to one that negotiated
    /// `FUSE_SETXATTR_EXT`).
    ///
    /// # Errors
    /// As [`setxattr`](Self::setxattr).
    pub fn setxattr_by(
        &mut self,
        ino: u32,
        name: impl AsRef<OsStr>,
        value: &[u8],
        mode: XattrMode,
        in_group_or_capable: bool,
    ) -> Result<Inode, Error> {
        let name = name.as_ref();
        immutable::may_modify(&self.inode(ino)?, "no xattr set")?;
        let shown = || name.to_string_lossy().into_owned();
        let (index, suffix) = split(name).ok_or(Error::Unsupported {
            feature: "this xattr namespace",
            remedy: "ext4 stores user., trusted., security., system. and POSIX ACL names only",
        })?;
        if suffix.len() > 255 {
            return Err(Error::NameTooLong(shown()));
        }
        if value.len() > ea_inode::VALUE_BYTES_MAX {
            return Err(Error::Io {
                context: format!("xattr {}", shown()),
                source: std::io::Error::from_raw_os_error(libc::E2BIG),
            });
        }
        let inode = self.uninline(ino)?;
        if matches!(index, ACCESS | DEFAULT) {
            return self.set_acl(inode, index, value, !in_group_or_capable);
        }
        self.set_xattr_entry(inode, index, suffix, value.to_vec(), mode).map_err(|e| match e {
            Error::Exists(_) => Error::Exists(shown()),
            Error::NoData(_) => Error::NoData(shown()),
            other => other,
        })
    }

    /// Sets entry (`index`, `suffix`) of `inode` to `value` (as stored).
    pub(crate) fn set_xattr_entry(
        &mut self,
        inode: Inode,
        index: u8,
        suffix: &[u8],
        value: Vec<u8>,
        mode: XattrMode,
    ) -> Result<Inode, Error> {
        let bs = self.layout.block_size as usize;
        let value_inodes = self.layout.features.incompat & INCOMPAT_EA_INODE != 0;
        let mut entries = self.editable_entries(&inode)?;
        let found = entries.iter().position(|e| e.index == index && e.suffix == suffix);
        let name = || String::from_utf8_lossy(suffix).into_owned();
        match (found, mode) {
            (Some(_), XattrMode::Create) => return Err(Error::Exists(name())),
            (None, XattrMode::Replace) => return Err(Error::NoData(name())),
            _ => {}
        }
        let mut new = Entry { index, suffix: suffix.to_vec(), value, value_inum: 0, value_hash: 0 };
        let at = found.unwrap_or(entries.len());
        if found.is_some() {
            entries[at] = new.clone();
        } else {
            entries.push(new.clone());
        }
        // As the kernel: a large value goes to an inode of its own at once,
        // a smaller one when the inode and its block cannot hold it.
        let large = ea_inode::large_value(bs, new.value.len());
        if !value_inodes || !(large || place(&inode, bs, entries.clone()).is_none()) {
            return self.store_xattrs(&inode, entries);
        }
        let value_inode = self.create_value_inode(&inode, &new.value)?;
        new.value_inum = value_inode;
        new.value_hash = self.value_hash(&new.value);
        entries[at] = new;
        let stored = self.store_xattrs(&inode, entries);
        if stored.is_err() {
            // Named by nothing: it goes again.
            let orphan = self.inode(value_inode)?;
            self.release(orphan)?;
        }
        stored
    }

    /// Removes xattr `name` of inode `ino`.
    ///
    /// # Errors
    /// `ENODATA` when absent; as [`setxattr`](Self::setxattr).
    pub fn removexattr(&mut self, ino: u32, name: impl AsRef<OsStr>) -> Result<Inode, Error> {
        let name = name.as_ref();
        let absent = || Error::NoData(name.to_string_lossy().into_owned());
        let inode = self.inode(ino)?;
        immutable::may_modify(&inode, "no xattr removed")?;
        if !self.entries(&inode)?.iter().any(|e| split(name) == Some((e.index, &e.suffix[..]))) {
            return Err(absent());
        }
        let inode = self.uninline(ino)?;
        let (index, suffix) = split(name).ok_or_else(absent)?;
        match self.remove_xattr_entry(inode, index, suffix)? {
            (inode, true) => Ok(inode),
            (_, false) => Err(absent()),
        }
    }

    /// Removes entry (`index`, `suffix`) of `inode`; whether it was there
    /// (nothing changes when not).
    pub(crate) fn remove_xattr_entry(
        &mut self,
        inode: Inode,
        index: u8,
        suffix: &[u8],
    ) -> Result<(Inode, bool), Error> {
        let mut entries = self.editable_entries(&inode)?;
        let Some(i) = entries.iter().position(|e| e.index == index && e.suffix == suffix) else {
            return Ok((inode, false));
        };
        entries.remove(i);
        self.store_xattrs(&inode, entries).map(|inode| (inode, true))
    }

    /// The entries of an inode this writer can lay out again.
    fn editable_entries(&self, inode: &Inode) -> Result<Vec<Entry>, Error> {
        debug_assert!(inode.flags & FLAG_INLINE_DATA == 0, "converted by the caller");
        if inode.raw.len() <= 128 {
            return Err(Error::Unsupported { feature: "128-byte inodes", remedy: "no room for in-inode xattrs" });
        }
        let entries = self.entries(inode)?;
        if entries.iter().any(|e| e.value_inum != 0 && e.value_hash != self.value_hash(&e.value)) {
            return Err(Error::Unsupported {
                feature: "Lustre-style ea_inode",
                remedy: "a value inode without the value's hash (written by Lustre) is not changed here",
            });
        }
        Ok(entries)
    }

    /// Lays `entries` out (in the inode as far as they fit, the rest in
    /// the inode's own block) and writes both.
    pub(crate) fn store_xattrs(&mut self, inode: &Inode, entries: Vec<Entry>) -> Result<Inode, Error> {
        self.fast_ineligible("an xattr changed");
        let bs = self.layout.block_size as usize;
        let region = inode.raw.len() - 128 - inode.extra_isize();
        let charge = |v: &Self, list: &[Entry]| -> u64 {
            list.iter().filter(|e| e.value_inum != 0).map(|e| v.value_charge(e.value.len())).sum()
        };
        let old_charge = charge(self, &self.entries(inode)?);
        let new_charge = charge(self, &entries);
        let Some((in_inode, in_block)) = place(inode, bs, entries) else {
            return Err(Error::Io {
                context: format!("inode {} xattrs", inode.ino),
                source: std::io::Error::from_raw_os_error(libc::ENOSPC),
            });
        };
        // Value inodes named before by what this inode owns (its body, and
        // its block unless shared — a shared block keeps its references
        // while it lives; dropping it frees them with it).
        let mut named_before = self.value_inodes_in_body(inode);
        let old_block = inode.file_acl;
        let shared = old_block != 0 && {
            let b = self.block(old_block, &|| format!("inode {} xattr block", inode.ino))?;
            le32(b, 4) > 1
        };
        let mut block_no = old_block;
        let mut sectors = (inode.blocks + new_charge).checked_sub(old_charge).ok_or_else(|| {
            corrupt(format!("inode {}", inode.ino), format!("i_blocks {} below its values' {old_charge}", inode.blocks))
        })?;
        if in_block.is_empty() || shared {
            if old_block != 0 {
                self.drop_xattr_block(inode)?;
                sectors -= bs as u64 / 512;
            }
            block_no = 0;
        } else if old_block != 0 {
            let block = self.block(old_block, &|| format!("inode {} xattr block", inode.ino))?;
            named_before.extend(ea_inode::value_inodes(block, 32));
        }
        let named_after: Vec<u32> =
            in_inode.iter().chain(&in_block).map(|e| e.value_inum).filter(|&i| i != 0).collect();
        self.move_value_refs(&named_before, &named_after)?;
        if !in_block.is_empty() {
            let mut block = vec![0u8; bs];
            put32(&mut block, 0, MAGIC);
            put32(&mut block, 4, 1);
            put32(&mut block, 8, 1);
            let hashes = lay_out(&mut block, 32, &in_block, true);
            let mut h = 0u32;
            for hash in hashes {
                if hash == 0 {
                    h = 0;
                    break;
                }
                h = (h << 16) ^ (h >> 16) ^ hash;
            }
            put32(&mut block, XATTR_H_HASH, h);
            if block_no == 0 {
                let goal = self.inode_offset(inode.ino)? / bs as u64;
                block_no = self.allocate_blocks(goal, 1)?.0;
                sectors += bs as u64 / 512;
                self.seal_new_xattr_block(block_no, &mut block);
                self.store(block_no * bs as u64, &block)?;
            } else {
                self.rewrite_xattr_block(block_no, &mut block)?;
            }
        }
        let extra = inode.extra_isize();
        let mut area = vec![0u8; region];
        if !in_inode.is_empty() {
            put32(&mut area, 0, MAGIC);
            lay_out(&mut area[4..], 0, &in_inode, false);
        }
        let wide = self.layout.desc_size >= 64;
        let (sec, e) = encode_time(now());
        self.filters.lock().expect("filter cache").remove(&inode.ino);
        self.edit_inode(inode, |r| {
            r[128 + extra..].copy_from_slice(&area);
            put32(r, I_FILE_ACL_LO, block_no as u32);
            if wide {
                put16(r, I_FILE_ACL_HIGH, (block_no >> 32) as u16);
            }
            put32(r, I_BLOCKS_LO, sectors as u32);
            put16(r, I_BLOCKS_HIGH, (sectors >> 32) as u16);
            put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, e));
        })
    }

    /// Writes `new` over xattr block `block_no`, its checksum (fs seed,
    /// le64 block number, the block with `h_checksum` zero) moved by splice
    /// over what changed.
    pub(crate) fn rewrite_xattr_block(&mut self, block_no: u64, new: &mut [u8]) -> Result<(), Error> {
        let old = self.block(block_no, &|| format!("xattr block {block_no}"))?.to_vec();
        let message = |blk: &[u8]| {
            let mut m = block_no.to_le_bytes().to_vec();
            m.extend_from_slice(blk);
            m[8 + 0x10..8 + 0x14].fill(0);
            m
        };
        let (old_m, new_m) = (message(&old), message(new));
        let seed = self.layout.csum_seed;
        let crc = self.updated(
            "xattr block",
            old_m.len(),
            || splice_all(le32(&old, XATTR_H_CHECKSUM), old_m.len(), &old_m, &new_m),
            || crc32c::raw_update(seed, &new_m),
        );
        put32(new, XATTR_H_CHECKSUM, crc);
        self.store(block_no * self.layout.block_size, new)
    }

    /// Seals a new xattr block: its checksum over the block number and
    /// the block (checksum field zero).
    fn seal_new_xattr_block(&self, block_no: u64, block: &mut [u8]) {
        let crc = crc32c::raw_update(self.layout.csum_seed, &block_no.to_le_bytes());
        let crc = crc32c::raw_update(crc, &block[..0x10]);
        let crc = crc32c::raw_update(crc, &[0; 4]);
        let crc = crc32c::raw_update(crc, &block[0x14..]);
        put32(block, XATTR_H_CHECKSUM, crc);
    }
}

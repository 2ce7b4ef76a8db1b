//! Extended attributes: in the inode after `i_extra_isize`, and in an
//! external block (its checksum verified; possibly shared), values of
//! `ea_inode` entries in inodes of their own. POSIX ACLs are returned in
//! the VFS's xattr encoding, as the kernel's getxattr returns them. The
//! xattr name filter is kept per inode in memory, so a lookup of an
//! absent name (the ACL probes of `ls -l`) reads no xattr block.

use crate::error::{corrupt, Error};
use crate::format::acl::Acl;
use crate::format::xattr::{EA_INODE_HASH, MAGIC};
use crate::inode::table::Inode;
use crate::stats::Stats;
use crate::volume::Volume;
use csumkit::crc32c;
use csumkit::ext4::fields::XATTR_H_CHECKSUM;
use csumkit::le::{le16, le32};
use csumkit::xattr_filter::{bit_of, Filter};
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

/// The ext4 name indexes and their prefixes (2 and 3 are whole names).
/// A name's suffix is any bytes, as the kernel stores it: names are
/// `OsStr`s here, not UTF-8 strings.
const PREFIXES: [(u8, &str); 7] = [
    (1, "user."),
    (2, "system.posix_acl_access"),
    (3, "system.posix_acl_default"),
    (4, "trusted."),
    (6, "security."),
    (7, "system."),
    (8, "system.richacl"),
];

/// One stored xattr: name index, name suffix, value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Entry {
    pub index: u8,
    pub suffix: Vec<u8>,
    pub value: Vec<u8>,
    /// The inode holding the value (`ea_inode`), or 0.
    pub value_inum: u32,
    /// That inode's hash of the value (its `i_atime`), which the entry's
    /// own hash covers instead of the value; 0 without one.
    pub value_hash: u32,
}

impl Entry {
    fn full_name(&self) -> Option<OsString> {
        let prefix = PREFIXES.iter().find(|(i, _)| *i == self.index)?.1;
        Some(OsString::from_vec([prefix.as_bytes(), &self.suffix].concat()))
    }
}

/// (index, suffix) of a full name; `None` when no ext4 prefix fits.
pub(crate) fn split(name: &OsStr) -> Option<(u8, &[u8])> {
    PREFIXES.iter().find_map(|&(index, prefix)| {
        let suffix = name.as_bytes().strip_prefix(prefix.as_bytes())?;
        (!matches!(index, 2 | 3 | 8) || suffix.is_empty()).then_some((index, suffix))
    })
}

impl Volume {
    /// Every xattr of `inode` as (full name, value), the in-inode ones
    /// first, as `listxattr` + `getxattr` return them (ACLs in the VFS
    /// encoding, one of the header alone left out — `getxattr` finds no
    /// value there; `system.data`, which holds inline data, left out as
    /// the kernel leaves it out).
    ///
    /// # Errors
    /// [`Error::Corrupt`] for malformed entries; [`Error::Checksum`] for a
    /// wrong xattr block checksum; [`Error::Invalid`] for a stored ACL the
    /// kernel would not read either.
    pub fn xattrs(&self, inode: &Inode) -> Result<Vec<(OsString, Vec<u8>)>, Error> {
        let mut out = Vec::new();
        for entry in self.entries(inode)? {
            if entry.index == 7 && entry.suffix == b"data" {
                continue;
            }
            let Some(name) = entry.full_name() else { continue };
            let value = match entry.index {
                2 | 3 => match Acl::from_disk(&entry.value, inode.ino)? {
                    Some(acl) => acl.to_vfs(),
                    None => continue, // the header alone: no ACL
                },
                _ => entry.value,
            };
            out.push((name, value));
        }
        Ok(out)
    }

    /// One xattr's value. The inode's name filter (built on its first
    /// lookup, kept in memory) answers most absent names without reading
    /// the xattr block.
    ///
    /// # Errors
    /// [`Error::NoData`] when absent; as [`xattrs`](Self::xattrs).
    pub fn getxattr(&self, inode: &Inode, name: impl AsRef<OsStr>) -> Result<Vec<u8>, Error> {
        let name = name.as_ref();
        let absent = || Error::NoData(format!("inode {} {}", inode.ino, name.to_string_lossy()));
        let Some((index, suffix)) = split(name) else { return Err(absent()) };
        let cached = self.filters.lock().expect("filter cache").get(&inode.ino).copied();
        if let Some(filter) = cached {
            if filter.0 & (1 << bit_of(index, suffix)) != 0 {
                Stats::bump(&self.stats.filter_hits);
                return Err(absent());
            }
        }
        Stats::bump(&self.stats.xattr_searches);
        let entries = self.entries(inode)?;
        let filter = Filter::from_split(entries.iter().map(|e| (e.index, e.suffix.as_slice())));
        self.filters.lock().expect("filter cache").insert(inode.ino, filter);
        let entry = entries.into_iter().find(|e| e.index == index && e.suffix == suffix).ok_or_else(absent)?;
        match index {
            2 | 3 => Acl::from_disk(&entry.value, inode.ino)?.map(|acl| acl.to_vfs()).ok_or_else(absent),
            _ => Ok(entry.value),
        }
    }

    /// The names of the inode's xattrs, as `listxattr` gives them: without
    /// reading their values (an ACL the kernel would refuse to read is
    /// still listed, as the kernel lists it).
    ///
    /// # Errors
    /// As [`xattrs`](Self::xattrs), less the values' own.
    pub fn xattr_names(&self, inode: &Inode) -> Result<Vec<OsString>, Error> {
        let entries = self.entries(inode)?;
        Ok(entries.iter().filter(|e| !(e.index == 7 && e.suffix == b"data")).filter_map(Entry::full_name).collect())
    }

    /// The raw entries: in-inode, then the external block's.
    pub(crate) fn entries(&self, inode: &Inode) -> Result<Vec<Entry>, Error> {
        let mut out = Vec::new();
        let extra = inode.extra_isize();
        let raw = &inode.raw;
        if raw.len() > 128 && 128 + extra + 4 <= raw.len() && le32(raw, 128 + extra) == MAGIC {
            let body = &raw[128 + extra + 4..];
            self.parse_entries(inode, body, 0, body, &mut out, &|| format!("inode {} in-inode xattrs", inode.ino))?;
        }
        if inode.file_acl != 0 {
            let b = inode.file_acl;
            let what = || format!("inode {} xattr block {b}", inode.ino);
            let block = self.block(b, &what)?;
            Stats::bump(&self.stats.xattr_block_reads);
            if le32(block, 0) != MAGIC || le32(block, 8) != 1 {
                return Err(corrupt(what(), format!("magic {:#010x}, h_blocks {}", le32(block, 0), le32(block, 8))));
            }
            let crc = crc32c::raw_update(self.layout.csum_seed, &b.to_le_bytes());
            let crc = crc32c::raw_update(crc, &block[..0x10]);
            let crc = crc32c::raw_update(crc, &[0; 4]);
            let computed = crc32c::raw_update(crc, &block[0x14..]);
            self.verify(&what, le32(block, XATTR_H_CHECKSUM), computed)?;
            self.parse_entries(inode, block, 32, block, &mut out, &what)?;
        }
        Ok(out)
    }

    /// Entries from `start` of `area` until the 4 zero bytes that end them;
    /// values at offsets into `values`.
    fn parse_entries(
        &self,
        inode: &Inode,
        area: &[u8],
        start: usize,
        values: &[u8],
        out: &mut Vec<Entry>,
        what: &dyn Fn() -> String,
    ) -> Result<(), Error> {
        let mut at = start;
        while at + 4 <= area.len() && le32(area, at) != 0 {
            if at + 16 > area.len() {
                return Err(corrupt(what(), format!("entry at {at} runs off the end")));
            }
            let (name_len, index) = (usize::from(area[at]), area[at + 1]);
            let (value_offs, value_inum, value_size) =
                (usize::from(le16(area, at + 2)), le32(area, at + 4), le32(area, at + 8) as usize);
            let name = area
                .get(at + 16..at + 16 + name_len)
                .ok_or_else(|| corrupt(what(), format!("entry at {at}: name runs off the end")))?;
            let (value, value_hash) = if value_inum != 0 {
                self.ea_inode_value(inode, value_inum, value_size)?
            } else {
                let value = values.get(value_offs..value_offs + value_size).ok_or_else(|| {
                    corrupt(what(), format!("entry at {at}: value [{value_offs}, +{value_size}) outside"))
                })?;
                (value.to_vec(), 0)
            };
            out.push(Entry { index, suffix: name.to_vec(), value, value_inum, value_hash });
            at += (16 + name_len).next_multiple_of(4);
        }
        Ok(())
    }

    /// The value an `ea_inode` entry keeps in inode `inum`, and the hash
    /// of it that inode keeps.
    fn ea_inode_value(&self, owner: &Inode, inum: u32, size: usize) -> Result<(Vec<u8>, u32), Error> {
        if inum == owner.ino || u64::from(inum) > self.layout.inodes_count || inum < self.first_ino() {
            return Err(corrupt(format!("inode {} xattr", owner.ino), format!("value inode {inum}")));
        }
        let ea = self.inode(inum)?;
        if ea.flags & crate::inode::table::FLAG_EA_INODE == 0 || ea.size != size as u64 {
            return Err(corrupt(
                format!("inode {} xattr value inode {inum}", owner.ino),
                format!("not an ea_inode of {size} bytes (flags {:#x}, size {})", ea.flags, ea.size),
            ));
        }
        Ok((self.read_all(&ea)?, le32(&ea.raw, EA_INODE_HASH)))
    }
}

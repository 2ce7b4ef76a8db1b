//! Extended attribute entries on disk: the entry tables of the in-inode
//! area and of an xattr block (`struct ext4_xattr_entry`), their hashes
//! (`ext4_xattr_hash_entry`), and the reference counts of shared blocks.

use super::fields::I_EXTRA_ISIZE;
use crate::le::{le16, le32};
use std::collections::HashMap;

pub(super) const XATTR_MAGIC: u32 = 0xEA02_0000;
/// `XATTR_SIZE_MAX`: the largest value stored in an inode or block.
pub(super) const VALUE_MAX: usize = 65_536;
/// `EXT4_XATTR_SIZE_MAX`: the largest value an ea_inode holds.
pub(super) const EA_INODE_VALUE_MAX: u64 = 1 << 24;
/// An xattr block's header; its entries follow.
pub(super) const BLOCK_HEADER: usize = 32;

/// One xattr entry of an in-inode region or an xattr block.
pub(super) struct XattrEntry<'a> {
    pub name_index: u8,
    pub name: &'a [u8],
    /// The value, when stored in the region (not in an ea_inode).
    pub value: Option<&'a [u8]>,
    /// The ea_inode holding the value (0: the value is in the region).
    pub value_inum: u32,
    pub value_size: u32,
    pub hash: u32,
}

/// An inode's in-inode xattrs (none without the region or its magic).
pub(super) fn in_inode(inode_size: usize, raw: &[u8]) -> Result<Vec<XattrEntry<'_>>, String> {
    if inode_size <= 128 {
        return Ok(Vec::new());
    }
    let header = 128 + usize::from(le16(raw, I_EXTRA_ISIZE));
    if header + 4 >= inode_size || le32(raw, header) != XATTR_MAGIC {
        return Ok(Vec::new());
    }
    entries(&raw[header + 4..inode_size], 0, "in-inode xattr")
}

/// The entries of `region` from byte `first` (values are offset from the
/// region's start), each inside the region, not overlapping another entry,
/// value or the bytes before `first`, its hash matching its value. In an
/// xattr block (`first` > 0) every entry has a name index and a hash; in
/// an inode a zero hash is an old kernel's and stands.
pub(super) fn entries<'a>(region: &'a [u8], first: usize, what: &str) -> Result<Vec<XattrEntry<'a>>, String> {
    let in_block = first > 0;
    let mut taken: Vec<(usize, usize)> = vec![(0, first)];
    let mut take = |start: usize, len: usize, part: &str| -> Result<(), String> {
        let end = start.checked_add(len).filter(|&e| e <= region.len());
        let Some(end) = end else {
            return Err(format!("an {what} {part} at byte {start} runs past its region"));
        };
        if taken.iter().any(|&(s, e)| start < e && s < end) {
            return Err(format!("an {what} {part} at byte {start} overlaps another"));
        }
        taken.push((start, end));
        Ok(())
    };
    let mut list = Vec::new();
    let mut at = first;
    // Each entry takes at least 16 bytes of the region: the walk is bounded.
    while at + 4 <= region.len() && le32(region, at) != 0 {
        if at + 16 > region.len() {
            return Err(format!("an {what} entry at byte {at} runs past its region"));
        }
        let name_len = usize::from(region[at]);
        let entry_len = (16 + name_len + 3) & !3;
        take(at, entry_len, "entry")?;
        let name_index = region[at + 1];
        let (offs, value_inum, value_size, hash) =
            (usize::from(le16(region, at + 2)), le32(region, at + 4), le32(region, at + 8), le32(region, at + 12));
        let name = &region[at + 16..at + 16 + name_len];
        if in_block && name_index == 0 {
            return Err(format!("the {what} entry at byte {at} has no name index"));
        }
        let value = if value_inum == 0 {
            let size = value_size as usize;
            if size > VALUE_MAX {
                return Err(format!("the {what} entry at byte {at} holds a {size}-byte value"));
            }
            if size > 0 {
                take(offs, (size + 3) & !3, "value")?;
            }
            let value = &region[offs.min(region.len())..(offs + size).min(region.len())];
            let zero_stands = hash == 0 && !in_block;
            if !zero_stands
                && hash != hash_entry(name, Some(value), false)
                && hash != hash_entry(name, Some(value), true)
            {
                return Err(format!("the {what} entry at byte {at}: its hash {hash:#010x} does not match its value"));
            }
            Some(value)
        } else {
            None
        };
        list.push(XattrEntry { name_index, name, value, value_inum, value_size, hash });
        at += entry_len;
    }
    Ok(list)
}

/// `ext2fs_ext_attr_hash_entry` (and its signed-char twin, which e2fsck
/// also accepts): the name, then the value's little-endian words.
pub(super) fn hash_entry(name: &[u8], value: Option<&[u8]>, signed: bool) -> u32 {
    let mut hash = 0u32;
    for &c in name {
        let c = if signed { c as i8 as i32 as u32 } else { u32::from(c) };
        hash = (hash << 5) ^ (hash >> 27) ^ c;
    }
    if let Some(value) = value.filter(|v| !v.is_empty()) {
        for word in value.chunks(4) {
            let mut w = [0u8; 4];
            w[..word.len()].copy_from_slice(word);
            hash = (hash << 16) ^ (hash >> 16) ^ u32::from_le_bytes(w);
        }
    }
    hash
}

/// An xattr block as first seen, and the inodes naming it.
pub(super) struct XattrBlock {
    pub(super) refcount: u32,
    pub(super) owners: Vec<u64>,
    /// Clusters the block charges each owner (itself and its entries'
    /// ea_inode values), or why its content is wrong.
    pub(super) verdict: Result<u64, String>,
}

/// External xattr blocks by block number.
pub(super) type XattrBlocks = HashMap<u64, XattrBlock>;

//! The content rules e2fsck's pass 1 holds an in-use inode to, apart from
//! its blocks: a file type, times and link counts that agree, flags the
//! filesystem's features allow, `i_extra_isize` in range, device and fast
//! symlink bodies, and in-inode xattr entries whose hashes match. A wrong
//! checksum over an inode that breaks any of them is damage, not a
//! checksum to rewrite. Each rule returns why, or `None`.

use super::layout::Features;
use crate::le::{le16, le32};

pub(super) const MODE_TYPE: u16 = 0xF000;
pub(super) const S_IFIFO: u16 = 0x1000;
pub(super) const S_IFCHR: u16 = 0x2000;
pub(super) const S_IFDIR: u16 = 0x4000;
pub(super) const S_IFBLK: u16 = 0x6000;
pub(super) const S_IFREG: u16 = 0x8000;
pub(super) const S_IFLNK: u16 = 0xA000;
pub(super) const S_IFSOCK: u16 = 0xC000;

pub(super) const FLAG_IMMUTABLE: u32 = 0x10;
pub(super) const FLAG_APPEND: u32 = 0x20;
pub(super) const FLAG_INDEX: u32 = 0x1000;
pub(super) const FLAG_IMAGIC: u32 = 0x2000;
pub(super) const FLAG_ENCRYPT: u32 = 0x800;
pub(super) const FLAG_HUGE_FILE: u32 = 0x4_0000;
pub(super) const FLAG_EXTENTS: u32 = 0x8_0000;
pub(super) const FLAG_VERITY: u32 = 0x10_0000;
pub(super) const FLAG_EA_INODE: u32 = 0x20_0000;
pub(super) const FLAG_INLINE_DATA: u32 = 0x1000_0000;
pub(super) const FLAG_CASEFOLD: u32 = 0x4000_0000;

const COMPAT_IMAGIC_INODES: u32 = 0x2;
const COMPAT_DIR_INDEX: u32 = 0x20;
const RO_COMPAT_HUGE_FILE: u32 = 0x8;
const RO_COMPAT_VERITY: u32 = 0x8000;
const INCOMPAT_EXTENTS: u32 = 0x40;
const INCOMPAT_EA_INODE: u32 = 0x400;
const INCOMPAT_ENCRYPT: u32 = 0x1_0000;
const INCOMPAT_CASEFOLD: u32 = 0x2_0000;
const INCOMPAT_INLINE_DATA: u32 = 0x8000;

/// `i_block`: 60 bytes at 0x28.
pub(super) const I_BLOCK: usize = 0x28;
const I_BLOCK_LEN: usize = 60;
const XATTR_MAGIC: u32 = 0xEA02_0000;
/// Name index and name of the xattr that holds the rest of inline data.
const SYSTEM_DATA: (u8, &[u8]) = (7, b"data");

/// The file type bits, if they name a type ext4 has.
pub(super) fn file_type(mode: u16) -> Option<u16> {
    let t = mode & MODE_TYPE;
    matches!(t, S_IFIFO | S_IFCHR | S_IFDIR | S_IFBLK | S_IFREG | S_IFLNK | S_IFSOCK).then_some(t)
}

/// The directory-entry file type (`EXT4_FT_*`) of a mode's type.
pub(super) fn dirent_type(t: u16) -> u8 {
    match t {
        S_IFREG => 1,
        S_IFDIR => 2,
        S_IFCHR => 3,
        S_IFBLK => 4,
        S_IFIFO => 5,
        S_IFSOCK => 6,
        S_IFLNK => 7,
        _ => 0,
    }
}

/// `i_size` (lo and hi).
pub(super) fn size(raw: &[u8]) -> u64 {
    u64::from(le32(raw, 0x04)) | u64::from(le32(raw, 0x6C)) << 32
}

/// The inode's own fields, as pass 1 judges them for an inode with links
/// (`reserved`: below `s_first_ino`, whose rules are the kernel's own).
pub(super) fn content(features: Features, inode_size: usize, raw: &[u8], reserved: bool) -> Option<String> {
    let mode = le16(raw, 0);
    let flags = le32(raw, 0x20);
    let links = le16(raw, 0x1A);
    let has = |mask: u32, field: u32| field & mask != 0;
    if reserved {
        return None;
    }
    let Some(t) = file_type(mode) else {
        if mode & MODE_TYPE == 0 {
            return Some("marked in use but has no file type".into());
        }
        return Some(format!("mode {mode:#o} names no file type"));
    };
    if links == 0 {
        return Some("marked in use but has no links".into());
    }
    if le32(raw, 0x14) != 0 {
        return Some(format!("in use with {links} links but has a deletion time"));
    }
    if le32(raw, 0x70) != 0 {
        return Some("i_faddr is set".into());
    }
    if !has(Features::INCOMPAT_64BIT, features.incompat) && le16(raw, 0x76) != 0 {
        return Some("the high half of i_file_acl is set without the 64bit feature".into());
    }
    if !has(RO_COMPAT_HUGE_FILE, features.ro_compat) && le16(raw, 0x74) != 0 {
        return Some("the high half of i_blocks is set without the huge_file feature".into());
    }
    let feature_flags = [
        (FLAG_IMAGIC, features.compat & COMPAT_IMAGIC_INODES, "imagic", "imagic_inodes"),
        (FLAG_CASEFOLD, features.incompat & INCOMPAT_CASEFOLD, "casefold", "casefold"),
        (FLAG_ENCRYPT, features.incompat & INCOMPAT_ENCRYPT, "encrypt", "encrypt"),
        (FLAG_EXTENTS, features.incompat & INCOMPAT_EXTENTS, "extents", "extent"),
        (FLAG_INLINE_DATA, features.incompat & INCOMPAT_INLINE_DATA, "inline_data", "inline_data"),
        (FLAG_VERITY, features.ro_compat & RO_COMPAT_VERITY, "verity", "verity"),
        (FLAG_EA_INODE, features.incompat & INCOMPAT_EA_INODE, "ea_inode", "ea_inode"),
        (FLAG_INDEX, features.compat & COMPAT_DIR_INDEX, "index", "dir_index"),
    ];
    for (flag, feature, name, feature_name) in feature_flags {
        if has(flag, flags) && feature == 0 {
            return Some(format!("the {name} flag is set without the {feature_name} feature"));
        }
    }
    if has(FLAG_EXTENTS, flags) && has(FLAG_INLINE_DATA, flags) {
        return Some("both the extents and the inline_data flags are set".into());
    }
    if has(FLAG_CASEFOLD, flags) && t != S_IFDIR {
        return Some("the casefold flag is set on a file that is not a directory".into());
    }
    if has(FLAG_INDEX, flags) && t != S_IFDIR {
        return Some("the index flag is set on a file that is not a directory".into());
    }
    if has(FLAG_EA_INODE, flags) && t != S_IFREG {
        return Some("the ea_inode flag is set on a file that is not regular".into());
    }
    if t == S_IFDIR && !has(Features::INCOMPAT_LARGEDIR, features.incompat) && le32(raw, 0x6C) != 0 {
        return Some("a directory with the high half of its size set, without the large_dir feature".into());
    }
    if matches!(t, S_IFCHR | S_IFBLK | S_IFIFO | S_IFSOCK) {
        if let Some(why) = special_file(flags, raw) {
            return Some(why);
        }
    }
    if t == S_IFLNK && !has(FLAG_INLINE_DATA, flags) {
        if let Some(why) = fast_symlink(flags, raw) {
            return Some(why);
        }
    }
    extra_space(inode_size, raw)
}

/// Devices, FIFOs and sockets: no block-mapping or data flags, not
/// immutable or append-only, size 0 (`e2fsck_pass1_check_device_inode`,
/// `check_immutable`, `check_size`).
fn special_file(flags: u32, raw: &[u8]) -> Option<String> {
    if flags & (FLAG_INDEX | FLAG_EXTENTS | FLAG_INLINE_DATA) != 0 {
        return Some(format!("a special file with block-mapping flags {flags:#x}"));
    }
    if flags & (FLAG_IMMUTABLE | FLAG_APPEND) != 0 {
        return Some("a special file marked immutable or append-only".into());
    }
    let size = size(raw);
    (size != 0).then(|| format!("a special file of size {size}"))
}

/// A fast symlink (size below 60): its target in `i_block`, no NUL inside
/// the size and a NUL right after (`e2fsck_pass1_check_symlink`).
fn fast_symlink(flags: u32, raw: &[u8]) -> Option<String> {
    let size = size(raw);
    if size == 0 {
        return Some("a symlink of size 0".into());
    }
    if size >= I_BLOCK_LEN as u64 {
        return None; // a slow symlink: its block is judged with the blocks
    }
    if flags & FLAG_EXTENTS != 0 {
        return Some("a fast symlink with the extents flag".into());
    }
    let body = &raw[I_BLOCK..I_BLOCK + I_BLOCK_LEN];
    let len = body.iter().position(|&b| b == 0).unwrap_or(I_BLOCK_LEN);
    (len as u64 != size).then(|| format!("a fast symlink of size {size} whose target is {len} bytes"))
}

/// `i_extra_isize` and what lies after it: in-inode xattrs, and the
/// pre-1970 time encoding e2fsck rewrites.
fn extra_space(inode_size: usize, raw: &[u8]) -> Option<String> {
    if inode_size <= 128 {
        return None;
    }
    let extra = usize::from(le16(raw, 0x80));
    let max = inode_size - 128;
    if extra != 0 && (extra < 4 || extra > max || !extra.is_multiple_of(4)) {
        return Some(format!("i_extra_isize {extra} (an inode of {inode_size} bytes)"));
    }
    // (time, its extra word): a negative time with both epoch bits set.
    for (time, extra_at) in [(0x08, 0x8C), (0x0C, 0x84), (0x10, 0x88), (0x90, 0x94)] {
        if 128 + extra >= extra_at + 4 && le32(raw, time) & 1 << 31 != 0 && le32(raw, extra_at) & 3 == 3 {
            return Some(format!("a timestamp at byte {time:#x} in the old pre-1970 encoding"));
        }
    }
    if extra + 4 >= max {
        return None;
    }
    let header = 128 + extra;
    if le32(raw, header) != XATTR_MAGIC {
        return None;
    }
    xattr_entries(&raw[header + 4..inode_size]).err()
}

/// An xattr entry of an in-inode region or an xattr block.
pub(super) struct XattrEntry<'a> {
    pub name_index: u8,
    pub name: &'a [u8],
    /// The value, when stored in the region (not in an ea_inode).
    pub value: Option<&'a [u8]>,
}

/// The entries of an in-inode xattr region (`region`: from the first
/// entry to the end of the inode; values are offset from its start), each
/// inside the region, not overlapping, its hash matching
/// (`check_ea_in_inode`).
pub(super) fn xattr_entries(region: &[u8]) -> Result<Vec<XattrEntry<'_>>, String> {
    let mut entries = Vec::new();
    let mut taken: Vec<(usize, usize)> = Vec::new();
    let mut take = |start: usize, len: usize, what: &str| -> Result<(), String> {
        let end = start.checked_add(len).filter(|&e| e <= region.len());
        let Some(end) = end else {
            return Err(format!("an in-inode xattr {what} at {start} runs past the inode"));
        };
        if taken.iter().any(|&(s, e)| start < e && s < end) {
            return Err(format!("in-inode xattr {what} at {start} overlaps another"));
        }
        taken.push((start, end));
        Ok(())
    };
    let mut at = 0usize;
    // Each entry is at least 16 bytes: the walk is bounded by the region.
    while at + 4 <= region.len() && le32(region, at) != 0 {
        if at + 16 > region.len() {
            return Err(format!("an in-inode xattr entry at {at} runs past the inode"));
        }
        let name_len = usize::from(region[at]);
        let entry_len = (16 + name_len + 3) & !3;
        take(at, entry_len, "entry")?;
        let (offs, inum, size, hash) =
            (usize::from(le16(region, at + 2)), le32(region, at + 4), le32(region, at + 8), le32(region, at + 12));
        let name = &region[at + 16..at + 16 + name_len];
        let value = if inum == 0 {
            let size = size as usize;
            if size > 0 {
                take(offs, (size + 3) & !3, "value")?;
            }
            let value = &region[offs.min(region.len())..(offs + size).min(region.len())];
            if hash != 0 && hash != xattr_hash(name, Some(value), false) && hash != xattr_hash(name, Some(value), true)
            {
                return Err(format!("in-inode xattr entry at {at}: its hash {hash:#010x} does not match its value"));
            }
            Some(value)
        } else {
            None
        };
        entries.push(XattrEntry { name_index: region[at + 1], name, value });
        at += entry_len;
    }
    Ok(entries)
}

/// `ext2fs_ext_attr_hash_entry` (and its signed-char twin, which e2fsck
/// also accepts): the name, then the value's little-endian words.
pub(super) fn xattr_hash(name: &[u8], value: Option<&[u8]>, signed: bool) -> u32 {
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

/// The bytes of an inline-data inode: `i_block`, then the `system.data`
/// xattr's value.
pub(super) fn inline_data(inode_size: usize, raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut data = raw[I_BLOCK..I_BLOCK + I_BLOCK_LEN].to_vec();
    if inode_size <= 128 {
        return Ok(data);
    }
    let header = 128 + usize::from(le16(raw, 0x80));
    if header + 4 > inode_size || le32(raw, header) != XATTR_MAGIC {
        return Ok(data);
    }
    let entries = xattr_entries(&raw[header + 4..inode_size])?;
    if let Some(rest) = entries.iter().find(|e| (e.name_index, e.name) == SYSTEM_DATA).and_then(|e| e.value) {
        data.extend_from_slice(rest);
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hash of a kernel-made `user.a` = "b" entry, as e2fsprogs'
    /// `ext2fs_ext_attr_hash_entry` computes it by hand: name "a" → 0x61,
    /// then the padded value word 0x62 → (0x61 << 16) ^ 0x62.
    #[test]
    fn xattr_hash_is_e2fsprogs_hash() {
        assert_eq!(xattr_hash(b"a", Some(b"b"), false), 0x0061_0062);
        assert_eq!(xattr_hash(b"a", None, false), 0x61);
        // A high name byte differs between the two signednesses.
        assert_ne!(xattr_hash(&[0xE9], None, false), xattr_hash(&[0xE9], None, true));
    }

    #[test]
    fn overlapping_or_overrunning_entries_are_refused() {
        let mut region = vec![0u8; 64];
        // name_len 1, index 1, value at 40, size 4 (hash 0: not checked).
        region[..4].copy_from_slice(&[1, 1, 40, 0]);
        region[8..12].copy_from_slice(&4u32.to_le_bytes());
        region[16] = b'a';
        assert_eq!(xattr_entries(&region).unwrap().len(), 1);
        region[2] = 62; // the value runs past the region
        assert!(xattr_entries(&region).is_err());
        region[2] = 8; // the value overlaps the entry
        assert!(xattr_entries(&region).is_err());
    }
}

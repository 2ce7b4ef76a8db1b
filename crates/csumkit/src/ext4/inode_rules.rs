//! The content rules e2fsck's pass 1 holds an in-use inode to, apart from
//! its blocks: a file type, times and link counts that agree, flags the
//! filesystem's features allow, `i_extra_isize` in range, device and fast
//! symlink bodies, and in-inode xattr entries whose hashes match. A wrong
//! checksum over an inode that breaks any of them is damage, not a
//! checksum to rewrite. Each rule returns why, or `None`.

use super::feature_bits::{
    COMPAT_DIR_INDEX, COMPAT_IMAGIC_INODES, INCOMPAT_64BIT, INCOMPAT_CASEFOLD, INCOMPAT_EA_INODE, INCOMPAT_ENCRYPT,
    INCOMPAT_EXTENTS, INCOMPAT_INLINE_DATA, INCOMPAT_LARGEDIR, RO_COMPAT_HUGE_FILE, RO_COMPAT_VERITY,
};
use super::fields::{
    I_BLOCKS_HIGH, I_DTIME, I_EXTRA_ISIZE, I_FILE_ACL_HIGH, I_FLAGS, I_LINKS_COUNT, I_SIZE_HIGH, I_SIZE_LO,
};
use super::layout::Features;
use super::xattr_entries as xattr;
use crate::le::{le16, le32};

pub(super) use super::format::{
    FLAG_APPEND, FLAG_CASEFOLD, FLAG_EA_INODE, FLAG_ENCRYPT, FLAG_EXTENTS, FLAG_HUGE_FILE, FLAG_IMAGIC, FLAG_IMMUTABLE,
    FLAG_INDEX, FLAG_INLINE_DATA, FLAG_VERITY, MODE_TYPE, S_IFBLK, S_IFCHR, S_IFDIR, S_IFIFO, S_IFLNK, S_IFREG,
    S_IFSOCK,
};

pub(super) use super::fields::I_BLOCK;
const I_BLOCK_LEN: usize = 60;
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
    u64::from(le32(raw, I_SIZE_LO)) | u64::from(le32(raw, I_SIZE_HIGH)) << 32
}

/// The inode's own fields, as pass 1 judges them for an inode with links
/// (`reserved`: below `s_first_ino`, whose rules are the kernel's own).
pub(super) fn content(features: Features, inode_size: usize, raw: &[u8], reserved: bool) -> Option<String> {
    let mode = le16(raw, 0);
    let flags = le32(raw, I_FLAGS);
    let links = le16(raw, I_LINKS_COUNT);
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
    if le32(raw, I_DTIME) != 0 {
        return Some(format!("in use with {links} links but has a deletion time"));
    }
    if le32(raw, 0x70) != 0 {
        return Some("i_faddr is set".into());
    }
    if !has(INCOMPAT_64BIT, features.incompat) && le16(raw, I_FILE_ACL_HIGH) != 0 {
        return Some("the high half of i_file_acl is set without the 64bit feature".into());
    }
    if !has(RO_COMPAT_HUGE_FILE, features.ro_compat) && le16(raw, I_BLOCKS_HIGH) != 0 {
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
    if t == S_IFDIR && !has(INCOMPAT_LARGEDIR, features.incompat) && le32(raw, I_SIZE_HIGH) != 0 {
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
    let extra = usize::from(le16(raw, I_EXTRA_ISIZE));
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
    xattr::in_inode(inode_size, raw).err()
}

/// The bytes of an inline-data inode: `i_block`, then the `system.data`
/// xattr's value.
pub(super) fn inline_data(inode_size: usize, raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut data = raw[I_BLOCK..I_BLOCK + I_BLOCK_LEN].to_vec();
    let entries = xattr::in_inode(inode_size, raw)?;
    if let Some(rest) = entries.iter().find(|e| (e.name_index, e.name) == SYSTEM_DATA).and_then(|e| e.value) {
        data.extend_from_slice(rest);
    }
    Ok(data)
}

//! erofs inodes: 32-byte compact and 64-byte extended, at
//! `meta_blkaddr * block size + nid * 32` — or, for a nid with bit 63 set
//! (metabox images), at `(nid & !(1 << 63)) * 32` of the metabox's data.
//!
//! | compact | extended | field                                        |
//! |--------:|---------:|----------------------------------------------|
//! | 0 (2)   | 0 (2)    | `i_format`: bit 0 extended, bits 1–3 layout, 4 nlink is 1 / no `.` |
//! | 2 (2)   | 2 (2)    | `i_xattr_icount`                             |
//! | 4 (2)   | 4 (2)    | `i_mode`                                     |
//! | 6 (2)   | 44 (4)   | `i_nlink`; `i_nb` at 6: start block bits 32–47 (extended; compact with bit 4) |
//! | 8 (4)   | 8 (8)    | `i_size`                                     |
//! | 16 (4)  | 16 (4)   | `i_u` (`raw_blkaddr` for flat layouts)       |
//! | 24 (2)  | 24 (4)   | `i_uid`                                      |
//! | 26 (2)  | 28 (4)   | `i_gid`                                      |
//!
//! The xattr ibody follows the inode: `12 + 4 * (i_xattr_icount - 1)`
//! bytes when `i_xattr_icount` is nonzero; then any inline data tail.

use super::Image;
use crate::le::{le16, le32, le64};
use crate::xattr_filter::Filter;
use crate::Error;

/// Size of a compact inode; nids count slots of this size.
pub const SLOT: u64 = 32;
/// `EROFS_DIRENT_NID_METABOX_BIT`: the inode is in the metabox.
pub(super) const NID_METABOX_BIT: u32 = 63;

/// How an inode's data is stored (`EROFS_INODE_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Contiguous blocks at `raw_blkaddr`.
    FlatPlain,
    /// Compressed (full index).
    CompressedFull,
    /// Whole blocks at `raw_blkaddr`, the tail inline after the inode.
    FlatInline,
    /// Compressed (compact index).
    CompressedCompact,
    /// Chunk based.
    ChunkBased,
}

/// One parsed inode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// Its nid.
    pub nid: u64,
    /// Whether it lives in the metabox (its nid's bit 63).
    pub in_metabox: bool,
    /// Byte offset in the image, or in the metabox's data.
    pub offset: u64,
    /// 64-byte extended inode (else 32-byte compact).
    pub extended: bool,
    /// Data layout.
    pub layout: Layout,
    /// `i_xattr_icount`.
    pub xattr_icount: u16,
    /// `i_mode` (type and permission bits).
    pub mode: u16,
    /// Link count.
    pub nlink: u32,
    /// Size in bytes.
    pub size: u64,
    /// First data block (flat layouts): `i_u` with, in 48-bit images, the
    /// high 16 bits from `i_nb`.
    pub raw_blkaddr: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// `h_name_filter` as stored (`None` without an xattr ibody), read with
    /// the inode: the header sits right after it, and the kernel keeps it in
    /// its in-core inode the same way, so a lookup the filter rules out
    /// reads nothing more.
    pub name_filter: Option<Filter>,
}

/// `i_format` bits: version (0), data layout (1–3), and bit 4, which is
/// `EROFS_I_NLINK_1_BIT` for compact non-directories (one link) and
/// `EROFS_I_DOT_OMITTED_BIT` for directories (no `.` entry, which this
/// reader never needs). The kernel refuses any other bit.
const I_FORMAT_ALL: u16 = 0x1F;
const I_BIT_4: u16 = 1 << 4;
const S_IFMT: u16 = 0o170_000;
const S_IFDIR: u16 = 0o040_000;
const S_IFLNK: u16 = 0o120_000;

impl Inode {
    /// Bytes of the inode itself.
    pub fn inode_size(&self) -> u64 {
        if self.extended {
            64
        } else {
            32
        }
    }

    /// Bytes of the xattr ibody (0 when the inode has none).
    pub fn xattr_size(&self) -> u64 {
        match self.xattr_icount {
            0 => 0,
            n => 12 + 4 * (u64::from(n) - 1),
        }
    }

    /// Byte offset of the xattr ibody header, if any — where
    /// `h_name_filter` is stored (its first 4 bytes).
    pub fn xattr_offset(&self) -> Option<u64> {
        (self.xattr_icount > 0).then(|| self.offset + self.inode_size())
    }

    /// True for a directory.
    pub fn is_dir(&self) -> bool {
        self.mode & S_IFMT == S_IFDIR
    }

    /// True for a symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.mode & S_IFMT == S_IFLNK
    }
}

impl<'a> Image<'a> {
    /// The inode with this nid.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when it lies outside the image or is malformed.
    pub fn inode(&self, nid: u64) -> Result<Inode, Error> {
        let where_ = || format!("inode nid {nid}");
        let in_metabox = nid >> NID_METABOX_BIT != 0;
        if in_metabox && !self.has_metabox() {
            return Err(super::corrupt(&where_(), "a metabox nid in an image without a metabox".into()));
        }
        let base = if in_metabox { 0 } else { u64::from(self.sb.meta_blkaddr) * u64::from(self.sb.block_size) };
        let offset = (nid & !(1 << NID_METABOX_BIT))
            .checked_mul(SLOT)
            .and_then(|o| o.checked_add(base))
            .ok_or_else(|| super::corrupt(&where_(), "nid overflows the image offset".into()))?;
        let head = self.meta_bytes(in_metabox, offset, 32, &where_)?;
        let format = le16(head, 0);
        let extended = format & 1 != 0;
        let layout = match (format >> 1) & 0x7 {
            0 => Layout::FlatPlain,
            1 => Layout::CompressedFull,
            2 => Layout::FlatInline,
            3 => Layout::CompressedCompact,
            4 => Layout::ChunkBased,
            other => return Err(super::corrupt(&where_(), format!("unknown data layout {other}"))),
        };
        if format & !I_FORMAT_ALL != 0 {
            // As the kernel's erofs_read_inode: bits it does not know are refused.
            return Err(Error::Invalid {
                what: "erofs inode",
                detail: format!("nid {nid}: i_format {format:#06x} has bits this reader does not know"),
            });
        }
        // Bit 4 of a compact non-directory: nlink is 1, and `i_nb` holds
        // the high start-block bits (48bit images) instead of the count.
        // Of a directory: its `.` entry is omitted (nothing to do here).
        let nlink_is_1 = !extended && format & I_BIT_4 != 0 && le16(head, 4) & S_IFMT != S_IFDIR;
        let mut inode = if extended {
            let raw = self.meta_bytes(in_metabox, offset, 64, &where_)?;
            Inode {
                nid,
                in_metabox,
                offset,
                extended,
                layout,
                xattr_icount: le16(raw, 2),
                mode: le16(raw, 4),
                nlink: le32(raw, 44),
                size: le64(raw, 8),
                raw_blkaddr: u64::from(le32(raw, 16)) | u64::from(le16(raw, 6)) << 32,
                uid: le32(raw, 24),
                gid: le32(raw, 28),
                name_filter: None,
            }
        } else {
            Inode {
                nid,
                in_metabox,
                offset,
                extended,
                layout,
                xattr_icount: le16(head, 2),
                mode: le16(head, 4),
                nlink: if nlink_is_1 { 1 } else { u32::from(le16(head, 6)) },
                size: u64::from(le32(head, 8)),
                raw_blkaddr: u64::from(le32(head, 16)) | if nlink_is_1 { u64::from(le16(head, 6)) << 32 } else { 0 },
                uid: u32::from(le16(head, 24)),
                gid: u32::from(le16(head, 26)),
                name_filter: None,
            }
        };
        // The ibody must be in the image too.
        let whole = self.meta_bytes(in_metabox, offset, (inode.inode_size() + inode.xattr_size()) as usize, &where_)?;
        if inode.xattr_icount > 0 {
            inode.name_filter = Some(Filter(le32(whole, inode.inode_size() as usize)));
        }
        Ok(inode)
    }
}

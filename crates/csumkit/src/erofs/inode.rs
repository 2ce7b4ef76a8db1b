//! erofs inodes: 32-byte compact and 64-byte extended, at
//! `meta_blkaddr * block size + nid * 32`.
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
    /// Byte offset in the image.
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
        let base = u64::from(self.sb.meta_blkaddr) * u64::from(self.sb.block_size);
        let offset = nid
            .checked_mul(SLOT)
            .and_then(|o| o.checked_add(base))
            .ok_or_else(|| super::corrupt(&where_(), "nid overflows the image offset".into()))?;
        let head = self.bytes(offset, 32, &where_)?;
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
            let raw = self.bytes(offset, 64, &where_)?;
            Inode {
                nid,
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
        let whole = self.bytes(offset, (inode.inode_size() + inode.xattr_size()) as usize, &where_)?;
        if inode.xattr_icount > 0 {
            inode.name_filter = Some(Filter(le32(whole, inode.inode_size() as usize)));
        }
        Ok(inode)
    }

    /// The data of a flat inode as block-sized pieces (the last may be
    /// shorter): what directories and symlinks need.
    ///
    /// # Errors
    /// [`Error::Invalid`] for compressed or chunked data; [`Error::Corrupt`]
    /// when the data lies outside the image.
    pub fn data_pieces(&self, inode: &Inode) -> Result<Vec<&'a [u8]>, Error> {
        let bs = u64::from(self.sb.block_size);
        let where_ = || format!("data of nid {}", inode.nid);
        let (whole_blocks, tail) = match inode.layout {
            Layout::FlatPlain => (inode.size.div_ceil(bs), 0),
            Layout::FlatInline => (inode.size / bs, inode.size % bs),
            other => {
                let what = if inode.is_dir() {
                    "a compressed or chunked directory"
                } else if inode.is_symlink() {
                    "a compressed or chunked symlink"
                } else {
                    "compressed or chunked data"
                };
                return Err(Error::Invalid {
                    what: "erofs inode",
                    detail: format!("nid {}: {what} ({other:?}) is not read by this reader", inode.nid),
                });
            }
        };
        // Bounded by the image itself before anything is allocated per block.
        if whole_blocks > self.data.len() as u64 / bs {
            return Err(super::corrupt(&where_(), format!("size {} exceeds the image", inode.size)));
        }
        let mut pieces = Vec::with_capacity(whole_blocks as usize + 1);
        let mut left = inode.size;
        for i in 0..whole_blocks {
            let len = left.min(bs);
            let at = inode.raw_blkaddr.saturating_add(i).saturating_mul(bs);
            pieces.push(self.bytes(at, len as usize, &where_)?);
            left -= len;
        }
        if tail > 0 {
            let at = inode.offset + inode.inode_size() + inode.xattr_size();
            if at % bs + tail > bs {
                return Err(super::corrupt(&where_(), "inline tail crosses a block boundary".into()));
            }
            pieces.push(self.bytes(at, tail as usize, &where_)?);
        }
        Ok(pieces)
    }
}

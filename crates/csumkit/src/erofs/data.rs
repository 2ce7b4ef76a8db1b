//! An inode's data: flat blocks and an inline tail, chunks, or compressed
//! extents decoded as erofs-utils' `z_erofs_read_data` does — from the end
//! of the range back, one extent at a time, each pcluster decoded
//! (`codec.rs`), stored (shifted or interlaced) or read from the packed
//! inode (a fragment).

use super::inode::{Inode, Layout};
use super::zmap::{self, Source, ZMap};
use super::{codec, corrupt, Image};
use crate::Error;

/// The most [`Image::data`] and one [`Image::read`] return at once:
/// directories, symlinks and the metabox are far smaller (`erofs cat` reads
/// a file piece by piece).
pub const DATA_MAX: u64 = 256 << 20;

impl Image<'_> {
    /// All of `inode`'s data.
    ///
    /// # Errors
    /// As [`read`](Self::read); [`Error::Invalid`] above [`DATA_MAX`].
    pub fn data(&self, inode: &Inode) -> Result<Vec<u8>, Error> {
        if inode.size > DATA_MAX {
            return Err(Error::Invalid {
                what: "erofs inode",
                detail: format!("nid {}: {} bytes is more than this reader reads at once", inode.nid, inode.size),
            });
        }
        self.read(inode, 0, inode.size)
    }

    /// Bytes `offset..offset + len` of `inode`'s data, cut at its size.
    ///
    /// # Errors
    /// [`Error::Corrupt`] when an index, a pcluster or the data lies
    /// outside the image or does not decode.
    pub fn read(&self, inode: &Inode, offset: u64, len: u64) -> Result<Vec<u8>, Error> {
        let end = offset.saturating_add(len).min(inode.size);
        if offset >= end {
            return Ok(Vec::new());
        }
        if end - offset > DATA_MAX {
            return Err(Error::Invalid {
                what: "erofs inode",
                detail: format!("nid {}: a read of {} bytes", inode.nid, end - offset),
            });
        }
        match inode.layout {
            Layout::FlatPlain | Layout::FlatInline => self.read_flat(inode, offset, end),
            Layout::CompressedFull | Layout::CompressedCompact => self.read_compressed(inode, offset, end),
            Layout::ChunkBased => self.read_chunked(inode, offset, end),
        }
    }

    /// Chunks of `2^(block bits + chunk bits)` bytes (`i_u`'s low 5 bits),
    /// each a run of blocks named by a 4-byte block address or an 8-byte
    /// chunk index (`EROFS_CHUNK_FORMAT_INDEXES`: `startblk_hi`,
    /// `device_id`, `startblk_lo`) after the xattr ibody; all-ones is a hole.
    fn read_chunked(&self, inode: &Inode, offset: u64, end: u64) -> Result<Vec<u8>, Error> {
        const FORMAT_INDEXES: u64 = 0x20;
        const FORMAT_48BIT: u64 = 0x40;
        let where_ = || format!("chunked data of nid {}", inode.nid);
        let format = inode.raw_blkaddr & 0xFFFF;
        let block_bits = self.sb.block_size.trailing_zeros();
        let chunk_bits = block_bits + (format & 0x1F) as u32;
        if format & !0x7F != 0 || chunk_bits > 40 {
            return Err(corrupt(&where_(), format!("chunk format {format:#x}")));
        }
        let unit = if format & FORMAT_INDEXES != 0 { 8 } else { 4 };
        let table = (inode.offset + inode.inode_size() + inode.xattr_size()).next_multiple_of(unit);
        let mut out = Vec::new();
        let mut at = offset;
        // One index entry per chunk of the range.
        while at < end {
            let chunk = at >> chunk_bits;
            let (start, stop) = (chunk << chunk_bits, ((chunk + 1) << chunk_bits).min(end));
            let entry = self.meta_bytes(inode.in_metabox, table + unit * chunk, unit as usize, &where_)?;
            let block = if unit == 8 {
                let mask = if format & FORMAT_48BIT != 0 { (1u64 << 48) - 1 } else { (1u64 << 32) - 1 };
                let block = (u64::from(crate::le::le16(entry, 0)) << 32 | u64::from(crate::le::le32(entry, 4))) & mask;
                (block != mask).then_some(block)
            } else {
                Some(u64::from(crate::le::le32(entry, 0))).filter(|&b| b != u64::from(u32::MAX))
            };
            match block {
                Some(block) => {
                    let pa = block.saturating_mul(u64::from(self.sb.block_size)).saturating_add(at - start);
                    out.extend_from_slice(self.bytes(pa, (stop - at) as usize, &where_)?);
                }
                None => out.resize(out.len() + (stop - at) as usize, 0),
            }
            at = stop;
        }
        Ok(out)
    }

    fn read_flat(&self, inode: &Inode, offset: u64, end: u64) -> Result<Vec<u8>, Error> {
        let bs = u64::from(self.sb.block_size);
        let where_ = || format!("data of nid {}", inode.nid);
        // With an inline layout the last partial block follows the inode.
        let tail_start = match inode.layout {
            Layout::FlatInline => inode.size / bs * bs,
            _ => inode.size,
        };
        // Sized as the reads go: a damaged size allocates nothing.
        let mut out = Vec::new();
        let blocks_end = end.min(tail_start);
        if offset < blocks_end {
            let at = inode.raw_blkaddr.saturating_mul(bs).saturating_add(offset);
            out.extend_from_slice(self.bytes(at, (blocks_end - offset) as usize, &where_)?);
        }
        if end > tail_start {
            let at = inode.offset + inode.inode_size() + inode.xattr_size();
            if at % bs + (inode.size - tail_start) > bs {
                return Err(corrupt(&where_(), "inline tail crosses a block boundary".into()));
            }
            let from = offset.max(tail_start);
            let tail = self.meta_bytes(inode.in_metabox, at + from - tail_start, (end - from) as usize, &where_)?;
            out.extend_from_slice(tail);
        }
        Ok(out)
    }

    fn read_compressed(&self, inode: &Inode, offset: u64, end: u64) -> Result<Vec<u8>, Error> {
        let block_bits = self.sb.block_size.trailing_zeros();
        let bad = |why: String| corrupt(&format!("compressed data of nid {}", inode.nid), why);
        let mut map = ZMap::new(self.meta(inode.in_metabox), inode, block_bits).map_err(bad)?;
        let mut out = vec![0u8; (end - offset) as usize];
        let mut upto = end;
        // Each extent ends at or below `upto` and starts below it: the walk
        // moves back at least one byte per extent.
        while upto > offset {
            let e = map.map(upto - 1).map_err(bad)?;
            if e.la >= upto || e.la + e.llen < upto {
                return Err(bad(format!("the extent [{}, +{}) does not hold byte {}", e.la, e.llen, upto - 1)));
            }
            let trimmed = upto < e.la + e.llen;
            let length = upto - e.la;
            let skip = offset.saturating_sub(e.la);
            let bytes = self.decode(inode, &e, skip, length, trimmed || e.partial)?;
            let from = e.la.max(offset);
            out[(from - offset) as usize..(upto - offset) as usize].copy_from_slice(&bytes);
            upto = from;
        }
        Ok(out)
    }

    /// Bytes `skip..length` of extent `e`'s decoded data.
    fn decode(&self, inode: &Inode, e: &zmap::Extent, skip: u64, length: u64, partial: bool) -> Result<Vec<u8>, Error> {
        let where_ = || format!("compressed data of nid {} at byte {}", inode.nid, e.la);
        let raw = match e.source {
            Source::Fragment { offset } => {
                if inode.nid == self.sb.packed_nid {
                    return Err(corrupt(&where_(), "the packed inode names a fragment of itself".into()));
                }
                let packed = self.inode(self.sb.packed_nid)?;
                let at =
                    offset.checked_add(skip).ok_or_else(|| corrupt(&where_(), "fragment offset overflows".into()))?;
                let bytes = self.read(&packed, at, length - skip)?;
                if bytes.len() as u64 != length - skip {
                    return Err(corrupt(&where_(), format!("the fragment at {offset} runs past the packed inode")));
                }
                return Ok(bytes);
            }
            Source::Hole => return Ok(vec![0; (length - skip) as usize]),
            Source::Blocks { pa, plen } => self.bytes(pa, plen as usize, &where_)?,
            Source::Inline { at, len } => self.meta_bytes(inode.in_metabox, at, len as usize, &where_)?,
        };
        let bs = u64::from(self.sb.block_size);
        let stored = |raw: &[u8]| -> Result<(), Error> {
            if length > raw.len() as u64 {
                return Err(corrupt(&where_(), format!("{length} stored bytes in a {}-byte pcluster", raw.len())));
            }
            Ok(())
        };
        match e.format {
            zmap::SHIFTED => {
                stored(raw)?;
                Ok(raw[skip as usize..length as usize].to_vec())
            }
            zmap::INTERLACED => {
                stored(raw)?;
                if raw.len() as u64 != bs {
                    return Err(corrupt(&where_(), format!("an interlaced pcluster of {} bytes", raw.len())));
                }
                // The block is rotated: the extent starts at its offset in the block.
                let count = (length - skip) as usize;
                let start = ((e.la + skip) % bs) as usize;
                let right = (raw.len() - start).min(count);
                let mut out = raw[start..start + right].to_vec();
                out.extend_from_slice(&raw[..count - right]);
                Ok(out)
            }
            format => {
                let decoded = codec::decode(format, raw, length as usize, partial)
                    .map_err(|why| corrupt(&where_(), format!("{} pcluster: {why}", codec::name(format))))?;
                Ok(decoded[skip as usize..].to_vec())
            }
        }
    }
}

//! Where a compressed erofs file's bytes are: the logical-cluster index
//! after the inode (full 8-byte entries, or compact 2/4-byte packs) mapped
//! to extents, as erofs-utils' `lib/zmap.c` and the kernel's
//! `fs/erofs/zmap.c` map them. An extent is a run of the file's bytes
//! decoded from one physical cluster (pcluster): blocks of the image, an
//! inline pcluster after the index (tail packing), or a range of the packed
//! inode (a fragment).
//!
//! The 8-byte map header at `round_up(end of the xattr ibody, 8)`:
//! `h_fragmentoff` (or `h_idata_size` at +2), `h_advise` at +4,
//! `h_algorithmtype` at +6 (HEAD1 low nibble, HEAD2 high), `h_clusterbits`
//! at +7 (logical cluster bits above the block bits; bit 7: the whole file
//! is a fragment, the other 63 bits its offset).
//!
//! Every index read is bounds-checked, every look-back is bounded by the
//! lcluster number it starts from: a damaged index is an error, never a
//! loop or a panic.

use super::inode::{Inode, Layout};
use crate::le::{le16, le32, le64};

const ADVISE_COMPACTED_2B: u16 = 0x1;
const ADVISE_EXTENTS: u16 = 0x1;
const ADVISE_BIG_PCLUSTER_1: u16 = 0x2;
const ADVISE_BIG_PCLUSTER_2: u16 = 0x4;
const ADVISE_INLINE_PCLUSTER: u16 = 0x8;
const ADVISE_INTERLACED_PCLUSTER: u16 = 0x10;
const ADVISE_FRAGMENT_PCLUSTER: u16 = 0x20;

const TYPE_PLAIN: u8 = 0;
const TYPE_HEAD1: u8 = 1;
const TYPE_NONHEAD: u8 = 2;
const TYPE_HEAD2: u8 = 3;
const LI_PARTIAL_REF: u16 = 1 << 15;
const LI_D0_CBLKCNT: u32 = 1 << 11;

/// `Z_EROFS_COMPRESSION_SHIFTED`, `_INTERLACED`: stored, not compressed.
pub(super) const SHIFTED: u8 = 4;
pub(super) const INTERLACED: u8 = 5;
/// `Z_EROFS_PCLUSTER_MAX_SIZE`, `Z_EROFS_PCLUSTER_MAX_DSIZE`.
const PCLUSTER_MAX: u64 = 1 << 20;
pub(super) const DECODED_MAX: u64 = 12 << 20;

/// Where an extent's encoded bytes are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Source {
    /// `plen` bytes at byte `pa` of the image.
    Blocks { pa: u64, plen: u64 },
    /// `len` bytes at byte `at` of the inode's metadata (tail packing).
    Inline { at: u64, len: u64 },
    /// The packed inode's bytes from the file's fragment offset.
    Fragment { offset: u64 },
    /// None: the bytes read as zeros.
    Hole,
}

/// One extent: bytes `la..la + llen` of the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Extent {
    pub la: u64,
    pub llen: u64,
    pub source: Source,
    /// `Z_EROFS_COMPRESSION_*` (0 LZ4, 1 LZMA, 2 DEFLATE, 3 ZSTD) or
    /// [`SHIFTED`] / [`INTERLACED`].
    pub format: u8,
    /// The extent may be decoded in part (it runs on past `llen`, or
    /// refers to part of its pcluster).
    pub partial: bool,
}

/// One logical cluster's index entry (`z_erofs_maprecorder`).
#[derive(Default)]
struct Lcluster {
    lcn: u64,
    kind: u8,
    clusterofs: u64,
    /// A non-head's distance back to its head (`delta[0]`).
    delta: u64,
    pblk: u64,
    compressed_blocks: u64,
    next_pack: u64,
    partial_ref: bool,
}

/// A compressed inode's map.
pub(super) struct ZMap<'m> {
    /// The stream the inode lives in (the image, or the metabox's data).
    meta: &'m [u8],
    nid: u64,
    compact: bool,
    /// End of the inode and its xattr ibody in `meta`.
    iend: u64,
    size: u64,
    block_bits: u32,
    advise: u16,
    cluster_bits: u32,
    algorithms: [u8; 2],
    inline_size: u64,
    /// A fragment's offset in the packed inode, or an inline pcluster's in `meta`.
    fragment_off: u64,
    tail_head_lcn: u64,
    /// Extent records instead of an lcluster index: how many.
    extents: Option<u64>,
}

impl<'m> ZMap<'m> {
    /// Reads the map header of `inode` (at `inode.offset` of `meta`).
    pub(super) fn new(meta: &'m [u8], inode: &Inode, block_bits: u32) -> Result<ZMap<'m>, String> {
        let compact = match inode.layout {
            Layout::CompressedFull => false,
            Layout::CompressedCompact => true,
            other => return Err(format!("{other:?} is not compressed")),
        };
        let iend = inode.offset + inode.inode_size() + inode.xattr_size();
        let mut z = ZMap {
            meta,
            nid: inode.nid,
            compact,
            iend,
            size: inode.size,
            block_bits,
            advise: 0,
            cluster_bits: block_bits,
            algorithms: [0; 2],
            inline_size: 0,
            fragment_off: 0,
            tail_head_lcn: 0,
            extents: None,
        };
        let h = z.read(iend.next_multiple_of(8), 8)?;
        if h[7] >> 7 != 0 {
            z.advise = ADVISE_FRAGMENT_PCLUSTER;
            z.fragment_off = le64(h, 0) ^ 1 << 63;
            return Ok(z);
        }
        z.advise = le16(h, 4);
        z.cluster_bits = block_bits + u32::from(h[7] & 15);
        if z.cluster_bits > 20 {
            return Err(format!("logical clusters of 2^{} bytes", z.cluster_bits));
        }
        if !compact && z.advise & ADVISE_EXTENTS != 0 {
            z.extents = Some(u64::from(le32(h, 0)) | u64::from(le16(h, 6)) << 32);
            return Ok(z);
        }
        z.algorithms = [h[6] & 15, h[6] >> 4];
        if z.advise & ADVISE_FRAGMENT_PCLUSTER != 0 {
            z.fragment_off = u64::from(le32(h, 0));
        } else if z.advise & ADVISE_INLINE_PCLUSTER != 0 {
            z.inline_size = u64::from(le16(h, 2));
        }
        let big = |bit| z.advise & bit != 0;
        if compact && big(ADVISE_BIG_PCLUSTER_1) != big(ADVISE_BIG_PCLUSTER_2) {
            return Err("compact indexes with only one of the two big pcluster flags".into());
        }
        if z.inline_size > 0 || z.advise & ADVISE_FRAGMENT_PCLUSTER != 0 {
            z.map_at(z.size.saturating_sub(1), true)?;
        }
        Ok(z)
    }

    fn read(&self, at: u64, len: usize) -> Result<&'m [u8], String> {
        usize::try_from(at)
            .ok()
            .and_then(|at| self.meta.get(at..at.checked_add(len)?))
            .ok_or_else(|| format!("nid {}: index bytes [{at}, +{len}) are outside the metadata", self.nid))
    }

    /// The extent holding byte `la` (below the size).
    pub(super) fn map(&mut self, la: u64) -> Result<Extent, String> {
        debug_assert!(la < self.size);
        match self.extents {
            Some(count) => self.map_extent_record(la, count),
            None => self.map_at(la, false),
        }
    }

    /// `z_erofs_map_blocks_ext`: records of 4, 8, 16 or 32 bytes after the
    /// header — `plen` (bit 27 partial, bits 28+ the format + 1), then
    /// `pstart_lo`, `pstart_hi`, `lstart_lo`, `lstart_hi`. Records of 4 or 8
    /// bytes are one per lcluster (4: after one le64 start, the pclusters
    /// follow each other); longer ones are sorted by `lstart`, searched.
    fn map_extent_record(&self, la: u64, count: u64) -> Result<Extent, String> {
        const PLEN_MASK: u64 = (PCLUSTER_MAX << 1) - 1;
        let record = 4u64 << ((self.advise >> 1) & 3);
        let mut pos = (self.iend.next_multiple_of(8) + 8).next_multiple_of(record);
        let lcluster = 1u64 << self.cluster_bits;
        let (mut lstart, mut lend) = (0u64, self.size);
        let (mut pa, mut plen) = (0u64, 0u64);
        let last;
        if record <= 8 {
            let mut next_pa = None;
            if record == 4 {
                next_pa = Some(le64(self.read(pos, 8)?, 0));
                pos += 8;
            } else {
                lstart = la / lcluster * lcluster;
                pos += (lstart >> self.cluster_bits) * record;
            }
            // One record per lcluster up to `la`: at most size / lcluster reads.
            while lstart <= la {
                let ext = self.read(pos, record as usize)?;
                plen = u64::from(le32(ext, 0));
                pa = match next_pa {
                    Some(p) => {
                        next_pa = Some(p + (plen & PLEN_MASK));
                        p
                    }
                    None => u64::from(le32(ext, 4)),
                };
                pos += record;
                lstart += lcluster;
            }
            last = lstart >= self.size.next_multiple_of(lcluster);
            lend = lend.min(lstart);
            lstart -= lcluster;
        } else {
            lstart = lend;
            let (mut l, mut r) = (0u64, count);
            // A binary search: at most 64 steps.
            while l < r {
                let mid = l + (r - l) / 2;
                let ext = self.read(pos + mid * record, record as usize)?;
                let mut at = u64::from(le32(ext, 12));
                if record > 16 {
                    at |= u64::from(le32(ext, 16)) << 32;
                }
                let start = u64::from(le32(ext, 4)) | u64::from(le32(ext, 8)) << 32;
                if at > la {
                    r = mid;
                    if at > lend {
                        return Err(format!("nid {}: extent records out of order", self.nid));
                    }
                    lend = at;
                } else {
                    l = mid + 1;
                    if at == la {
                        r = (l + 1).min(r);
                    }
                    lstart = at;
                    plen = u64::from(le32(ext, 0));
                    pa = start;
                }
            }
            last = l >= count;
        }
        if lstart >= lend {
            return Err(format!("nid {}: no extent record holds byte {la}", self.nid));
        }
        let llen = lend - lstart;
        let hole = Extent { la: lstart, llen, source: Source::Hole, format: SHIFTED, partial: false };
        if last && self.advise & ADVISE_FRAGMENT_PCLUSTER != 0 {
            let offset = if record > 4 { plen | pa << 32 } else { plen };
            return Ok(Extent { source: Source::Fragment { offset }, ..hole });
        }
        if plen & PLEN_MASK == 0 {
            return Ok(hole);
        }
        let partial = plen & 1 << 27 != 0;
        let fmt = (plen >> 28) as u8;
        let plen = plen & PLEN_MASK;
        let block_mask = (1u64 << self.block_bits) - 1;
        let format = if fmt > 0 {
            fmt - 1
        } else if self.advise & ADVISE_INTERLACED_PCLUSTER != 0 && (pa | plen) & block_mask == 0 {
            INTERLACED
        } else {
            SHIFTED
        };
        if plen > PCLUSTER_MAX || llen > DECODED_MAX {
            return Err(format!("nid {}: a {plen}-byte pcluster of {llen} bytes", self.nid));
        }
        Ok(Extent { source: Source::Blocks { pa, plen }, format, partial, ..hole })
    }

    fn load(&self, lcn: u64) -> Result<Lcluster, String> {
        let m = if self.compact { self.load_compact(lcn)? } else { self.load_full(lcn)? };
        if m.kind != TYPE_NONHEAD && m.clusterofs >= 1 << self.cluster_bits {
            return Err(format!("nid {}: lcluster {lcn} starts at {} of its cluster", self.nid, m.clusterofs));
        }
        Ok(m)
    }

    fn load_full(&self, lcn: u64) -> Result<Lcluster, String> {
        let pos = lcn
            .checked_mul(8)
            .and_then(|o| o.checked_add(self.iend.next_multiple_of(8) + 16))
            .ok_or("an lcluster past the index")?;
        let di = self.read(pos, 8)?;
        let advise = le16(di, 0);
        let mut m = Lcluster { lcn, kind: (advise & 3) as u8, next_pack: pos + 8, ..Lcluster::default() };
        if m.kind == TYPE_NONHEAD {
            m.clusterofs = 1 << self.cluster_bits;
            m.delta = u64::from(le16(di, 4));
            if m.delta & u64::from(LI_D0_CBLKCNT) != 0 {
                if self.advise & (ADVISE_BIG_PCLUSTER_1 | ADVISE_BIG_PCLUSTER_2) == 0 {
                    return Err(format!("nid {}: a block count without big pclusters", self.nid));
                }
                m.compressed_blocks = m.delta & !u64::from(LI_D0_CBLKCNT);
                m.delta = 1;
            }
        } else {
            m.partial_ref = advise & LI_PARTIAL_REF != 0;
            m.clusterofs = u64::from(le16(di, 2));
            m.pblk = u64::from(le32(di, 4));
        }
        Ok(m)
    }

    fn load_compact(&self, lcn: u64) -> Result<Lcluster, String> {
        let total = self.size.div_ceil(1 << self.block_bits);
        if lcn >= total || self.cluster_bits > 14 {
            return Err(format!("nid {}: lcluster {lcn} of {total}", self.nid));
        }
        let ebase = self.iend.next_multiple_of(8) + 8;
        // Packs of 4-byte entries up to a 32-byte boundary, then 2-byte ones.
        let initial_4b = ((32 - ebase % 32) / 4) & 7;
        let compacted_2b = if self.advise & ADVISE_COMPACTED_2B != 0 && initial_4b < total {
            (total - initial_4b) / 16 * 16
        } else {
            0
        };
        let (mut pos, mut i, mut shift) = (ebase, lcn, 2u32);
        if i >= initial_4b {
            pos += initial_4b * 4;
            i -= initial_4b;
            if i < compacted_2b {
                shift = 1;
            } else {
                pos += compacted_2b * 2;
                i -= compacted_2b;
            }
        }
        pos += i << shift;
        let vcnt: u64 = match shift {
            2 => 2,
            _ if self.cluster_bits <= 12 => 16,
            _ => return Err(format!("nid {}: 2-byte indexes of 2^{}-byte clusters", self.nid, self.cluster_bits)),
        };
        let pack_len = vcnt << shift;
        let pack_at = pos / pack_len * pack_len;
        let pack = self.read(pack_at, pack_len as usize)?;
        let lo_bits = self.cluster_bits.max(12);
        let encode_bits = ((pack_len - 4) * 8 / vcnt) as u32;
        // (lo, type) of entry k of the pack.
        let decode = |k: u64| -> (u64, u8) {
            let bit = encode_bits as u64 * k;
            let at = (bit / 8) as usize;
            let mut word = [0u8; 4];
            let end = (at + 4).min(pack.len());
            word[..end - at].copy_from_slice(&pack[at..end]);
            let v = u32::from_le_bytes(word) >> (bit % 8);
            (u64::from(v & ((1 << lo_bits) - 1)), ((v >> lo_bits) & 3) as u8)
        };
        let k = (pos - pack_at) >> shift;
        let mut m = Lcluster { lcn, next_pack: pack_at + pack_len, ..Lcluster::default() };
        let (lo, kind) = decode(k);
        m.kind = kind;
        let d0 = u64::from(LI_D0_CBLKCNT);
        if kind == TYPE_NONHEAD {
            m.clusterofs = 1 << self.cluster_bits;
            if lo & d0 != 0 {
                if self.advise & ADVISE_BIG_PCLUSTER_1 == 0 {
                    return Err(format!("nid {}: a block count without big pclusters", self.nid));
                }
                m.compressed_blocks = lo & !d0;
                m.delta = 1;
            } else if k + 1 != vcnt {
                m.delta = lo;
            } else {
                // The pack's last entry keeps delta[1]: delta[0] comes from the one before.
                let (prev, t) = decode(k - 1);
                let prev = if t != TYPE_NONHEAD {
                    0
                } else if prev & d0 != 0 {
                    1
                } else {
                    prev
                };
                m.delta = prev + 1;
            }
            return Ok(m);
        }
        m.clusterofs = lo;
        // The head's block: the pack's base address plus the pclusters before it.
        let mut blocks = 0u64;
        let mut j = k as i64;
        if self.advise & ADVISE_BIG_PCLUSTER_1 == 0 {
            blocks = 1;
            while j > 0 {
                j -= 1;
                let (l, t) = decode(j as u64);
                if t == TYPE_NONHEAD {
                    j -= l as i64;
                }
                if j >= 0 {
                    blocks += 1;
                }
            }
        } else {
            while j > 0 {
                j -= 1;
                let (l, t) = decode(j as u64);
                if t == TYPE_NONHEAD {
                    if l & d0 != 0 {
                        j -= 1;
                        blocks += l & !d0;
                        continue;
                    }
                    if l <= 1 {
                        return Err(format!("nid {}: a big pcluster with a plain delta of {l}", self.nid));
                    }
                    j -= l as i64 - 2;
                    continue;
                }
                blocks += 1;
            }
        }
        m.pblk = u64::from(le32(pack, pack.len() - 4)) + blocks;
        Ok(m)
    }

    /// Back from `m` by `distance` lclusters to the head of its extent.
    fn look_back(&self, m: &mut Lcluster, mut distance: u64) -> Result<u64, String> {
        // Each step goes back at least one lcluster: at most lcn steps.
        while m.lcn >= distance && distance > 0 {
            let lcn = m.lcn - distance;
            *m = self.load(lcn)?;
            if m.kind == TYPE_NONHEAD {
                distance = m.delta;
                continue;
            }
            return Ok((lcn << self.cluster_bits) | m.clusterofs);
        }
        Err(format!("nid {}: a look-back of {distance} lclusters from {}", self.nid, m.lcn))
    }

    fn compressed_len(&self, m: &mut Lcluster) -> Result<u64, String> {
        let big1 = self.advise & ADVISE_BIG_PCLUSTER_1 != 0;
        let big2 = self.advise & ADVISE_BIG_PCLUSTER_2 != 0;
        let lcn = m.lcn + 1;
        let one = (m.kind == TYPE_HEAD1 && !big1)
            || ((m.kind == TYPE_PLAIN || m.kind == TYPE_HEAD2) && !big2)
            || (lcn << self.cluster_bits) >= self.size;
        if one {
            return Ok(1 << self.block_bits);
        }
        if m.compressed_blocks == 0 {
            let next = self.load(lcn)?;
            if next.kind == TYPE_NONHEAD {
                if next.delta != 1 {
                    return Err(format!("nid {}: no block count at lcluster {lcn}", self.nid));
                }
                m.compressed_blocks = next.compressed_blocks;
            } else {
                m.compressed_blocks = 1;
            }
        }
        if m.compressed_blocks == 0 {
            return Err(format!("nid {}: no block count at lcluster {lcn}", self.nid));
        }
        Ok(m.compressed_blocks << self.block_bits)
    }

    /// `z_erofs_map_blocks_fo`; `find_tail` records the tail extent's head.
    fn map_at(&mut self, ofs: u64, find_tail: bool) -> Result<Extent, String> {
        let fragment = self.advise & ADVISE_FRAGMENT_PCLUSTER != 0;
        let ztail = self.inline_size > 0;
        if fragment && !find_tail && self.tail_head_lcn == 0 {
            let source = Source::Fragment { offset: self.fragment_off };
            return Ok(Extent { la: 0, llen: self.size, source, format: SHIFTED, partial: false });
        }
        let initial = ofs >> self.cluster_bits;
        let endoff = ofs & ((1 << self.cluster_bits) - 1);
        let mut m = self.load(initial)?;
        if find_tail && ztail {
            self.fragment_off = m.next_pack;
        }
        let mut end = (m.lcn + 1) << self.cluster_bits;
        let mut full = false;
        let head_kind;
        let la = match m.kind {
            TYPE_PLAIN | TYPE_HEAD1 | TYPE_HEAD2 if endoff >= m.clusterofs => {
                head_kind = m.kind;
                if ztail && end > self.size {
                    end = self.size;
                }
                (m.lcn << self.cluster_bits) | m.clusterofs
            }
            TYPE_PLAIN | TYPE_HEAD1 | TYPE_HEAD2 => {
                if m.lcn == 0 {
                    return Err(format!("nid {}: logical cluster 0 starts past byte {ofs}", self.nid));
                }
                end = (m.lcn << self.cluster_bits) | m.clusterofs;
                full = true;
                let la = self.look_back(&mut m, 1)?;
                head_kind = m.kind;
                la
            }
            _ => {
                let d = m.delta;
                let la = self.look_back(&mut m, d)?;
                head_kind = m.kind;
                la
            }
        };
        let partial_ref = m.partial_ref;
        if find_tail {
            self.tail_head_lcn = m.lcn;
            if fragment && !self.compact {
                self.fragment_off |= m.pblk << 32;
            }
        }
        let source = if ztail && m.lcn == self.tail_head_lcn {
            let at = self.fragment_off;
            if at % (1 << self.block_bits) + self.inline_size > 1 << self.block_bits {
                return Err(format!(
                    "nid {}: an inline pcluster of {} bytes crosses its block",
                    self.nid, self.inline_size
                ));
            }
            Source::Inline { at, len: self.inline_size }
        } else if fragment && m.lcn == self.tail_head_lcn {
            Source::Fragment { offset: self.fragment_off }
        } else {
            let pa = m.pblk.checked_mul(1 << self.block_bits).ok_or("a pcluster address overflows")?;
            Source::Blocks { pa, plen: self.compressed_len(&mut m)? }
        };
        let llen = end.checked_sub(la).ok_or_else(|| format!("nid {}: an extent ending before it starts", self.nid))?;
        let format = match head_kind {
            _ if matches!(source, Source::Fragment { .. }) => SHIFTED,
            TYPE_PLAIN => {
                let plen = match source {
                    Source::Blocks { plen, .. } => plen,
                    Source::Inline { len, .. } => len,
                    Source::Fragment { .. } | Source::Hole => u64::MAX,
                };
                if llen > plen {
                    return Err(format!("nid {}: {llen} stored bytes in a {plen}-byte pcluster", self.nid));
                }
                if self.advise & ADVISE_INTERLACED_PCLUSTER != 0 {
                    INTERLACED
                } else {
                    SHIFTED
                }
            }
            TYPE_HEAD2 => self.algorithms[1],
            _ => self.algorithms[0],
        };
        if let Source::Blocks { plen, .. } = source {
            if plen > PCLUSTER_MAX || llen > DECODED_MAX {
                return Err(format!("nid {}: a {plen}-byte pcluster of {llen} bytes", self.nid));
            }
        }
        Ok(Extent { la, llen, source, format, partial: !full || partial_ref })
    }
}

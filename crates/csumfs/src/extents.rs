//! Edits of extents that exist: cutting a file's tail (`truncate`) and
//! turning an unwritten (fallocated) extent into a written one.
//!
//! Truncation only ever removes a suffix of the logical order, so every
//! edit is at the end of a node: the entry count drops and at most one
//! length shrinks. A leaf left empty is freed with its index entry; a
//! last leaf whose extents fit in the inode moves back into it (depth 0),
//! as e2fsck would have it. Each leaf's
//! checksum is moved by splice over the few bytes that change.
//!
//! An unwritten extent that a write touches is zeroed whole and its
//! length's top bit cleared in place (the kernel zeroes small extents the
//! same way, `EXT4_EXT_MAY_ZEROOUT`); splitting it is not done here.

use crate::error::{corrupt, Error};
use crate::inode::{Inode, FLAG_EXTENTS, FLAG_INLINE_DATA};
use crate::le::{le16, le32, put16, put32};
use crate::map::Run;
use crate::volume::Volume;

/// Where an extent entry lives.
enum Place {
    /// At this byte of `i_block`.
    Root(usize),
    /// At this byte of leaf block `block`.
    Leaf { block: u64, at: usize },
}

/// An extent entry's fields.
#[derive(Clone, Copy)]
struct Entry {
    logical: u64,
    len: u64,
    physical: u64,
    uninit: bool,
}

fn read_entry(node: &[u8], at: usize) -> Entry {
    let raw = u64::from(le16(node, at + 4));
    let (len, uninit) = if raw > 32768 { (raw - 32768, true) } else { (raw, false) };
    Entry {
        logical: u64::from(le32(node, at)),
        len,
        physical: u64::from(le32(node, at + 8)) | u64::from(le16(node, at + 6)) << 32,
        uninit,
    }
}

fn raw_len(len: u64, uninit: bool) -> u16 {
    (if uninit { len + 32768 } else { len }) as u16
}

/// A node after cutting everything from a file block on.
struct Cut {
    /// Entries kept.
    kept: usize,
    /// (byte offset, new raw length) of the last kept entry if it shrank.
    shrunk: Option<(usize, u16)>,
    /// The (physical, len) runs cut off.
    freed: Vec<(u64, u64)>,
}

/// What cutting everything from file block `keep` on does to a node.
fn cut_node(node: &[u8], keep: u64) -> Cut {
    let entries = usize::from(le16(node, 2));
    let (mut kept, mut shrunk, mut freed) = (0, None, Vec::new());
    for e in 0..entries {
        let at = 12 + 12 * e;
        let x = read_entry(node, at);
        if x.logical >= keep {
            freed.push((x.physical, x.len));
        } else if x.logical + x.len > keep {
            let len = keep - x.logical;
            freed.push((x.physical + len, x.len - len));
            shrunk = Some((at, raw_len(len, x.uninit)));
            kept = e + 1;
        } else {
            kept = e + 1;
        }
    }
    Cut { kept, shrunk, freed }
}

impl Volume {
    /// Sets the size of regular file `ino`: blocks past the new end are
    /// freed and the rest of its last block zeroed; a larger size leaves
    /// a hole. mtime and ctime become now.
    ///
    /// # Errors
    /// [`Error::IsDir`] / [`Error::Invalid`] for what is not a regular
    /// file; [`Error::Unsupported`] for inline or block-mapped files and
    /// extent trees deeper than one level.
    pub fn truncate(&mut self, ino: u32, size: u64) -> Result<Inode, Error> {
        let mut inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(Error::IsDir(format!("inode {ino}")));
        }
        if !inode.is_file() {
            return Err(Error::Invalid(format!("inode {ino} is not a regular file")));
        }
        if inode.flags & FLAG_INLINE_DATA != 0 || inode.flags & FLAG_EXTENTS == 0 {
            return Err(Error::Unsupported {
                feature: if inode.flags & FLAG_EXTENTS == 0 { "^extent" } else { "inline_data" },
                remedy: "truncating inline or block-mapped files is not implemented in csumfs yet",
            });
        }
        if size > self.max_file_size() {
            return Err(Error::Io {
                context: format!("truncate inode {ino} to {size}"),
                source: std::io::Error::from_raw_os_error(libc::EFBIG),
            });
        }
        let bs = self.layout.block_size;
        if size < inode.size {
            if !size.is_multiple_of(bs) {
                let last = size / bs;
                let written =
                    self.runs(&inode)?.into_iter().find(|r| !r.uninit && r.logical <= last && last < r.logical + r.len);
                if let Some(r) = written {
                    let physical = r.physical + last - r.logical;
                    self.data_will_write(physical, 1)?;
                    self.store_data(physical * bs + size % bs, &vec![0u8; (bs - size % bs) as usize])?;
                    self.data_written(physical);
                }
            }
            inode = self.cut_extents(inode, size.div_ceil(bs))?;
        }
        self.set_size_now(&inode, size)
    }

    /// The largest file an extent-mapped inode holds: 2^32 blocks.
    pub(crate) fn max_file_size(&self) -> u64 {
        (1u64 << 32) * self.layout.block_size
    }

    /// Frees every mapped block from file block `keep` on.
    fn cut_extents(&mut self, inode: Inode, keep: u64) -> Result<Inode, Error> {
        let bs = self.layout.block_size;
        let mut root = inode.i_block;
        let mut freed_blocks = 0u64;
        match le16(&root, 6) {
            0 => {
                let Cut { kept, shrunk, freed } = cut_node(&root, keep);
                for (physical, len) in freed {
                    self.free_blocks(physical, len)?;
                    freed_blocks += len;
                }
                if let Some((at, raw)) = shrunk {
                    put16(&mut root, at + 4, raw);
                }
                root[12 + 12 * kept..].fill(0);
                put16(&mut root, 2, kept as u16);
            }
            1 => {
                let mut index_entries = usize::from(le16(&root, 2));
                while index_entries > 0 {
                    let at = 12 + 12 * (index_entries - 1);
                    let leaf = u64::from(le32(&root, at + 4)) | u64::from(le16(&root, at + 8)) << 32;
                    let node = self.block(leaf, &|| format!("inode {} extent leaf {leaf}", inode.ino))?.to_vec();
                    let Cut { kept, shrunk, freed } = cut_node(&node, keep);
                    if freed.is_empty() {
                        break; // this leaf and those before it lie wholly before `keep`
                    }
                    for (physical, len) in freed {
                        self.free_blocks(physical, len)?;
                        freed_blocks += len;
                    }
                    if kept == 0 {
                        self.free_blocks(leaf, 1)?;
                        freed_blocks += 1;
                        root[at..at + 12].fill(0);
                        index_entries -= 1;
                        continue;
                    }
                    let tail = 12 + 12 * usize::from(le16(&node, 4));
                    let count = (kept as u16).to_le_bytes();
                    let mut edits: Vec<(usize, Vec<u8>)> = vec![(2, count.to_vec())];
                    if let Some((at, raw)) = shrunk {
                        edits.push((at + 4, raw.to_le_bytes().to_vec()));
                    }
                    let edits: Vec<(usize, &[u8])> = edits.iter().map(|(a, b)| (*a, b.as_slice())).collect();
                    self.patch("extent leaf", leaf * bs, (tail, tail, inode.csum_seed), &edits)?;
                    break;
                }
                put16(&mut root, 2, index_entries as u16);
                if index_entries == 0 {
                    put16(&mut root, 6, 0); // an empty index: the root is a leaf again
                } else if index_entries == 1 {
                    // One leaf whose extents fit in the inode: the tree
                    // becomes depth 0 again (e2fsck: "could be shorter").
                    let leaf = u64::from(le32(&root, 16)) | u64::from(le16(&root, 20)) << 32;
                    let node = self.block(leaf, &|| format!("inode {} extent leaf {leaf}", inode.ino))?;
                    let entries = usize::from(le16(node, 2));
                    if entries <= 4 {
                        let moved = node[12..12 + 12 * entries].to_vec();
                        root[12..].fill(0);
                        root[12..12 + moved.len()].copy_from_slice(&moved);
                        put16(&mut root, 2, entries as u16);
                        put16(&mut root, 6, 0);
                        self.free_blocks(leaf, 1)?;
                        freed_blocks += 1;
                    }
                }
            }
            depth => {
                return Err(Error::Unsupported {
                    feature: if depth > 5 { "a corrupt extent depth" } else { "extent tree of depth > 1" },
                    remedy: "truncating such a file is not implemented in csumfs yet",
                });
            }
        }
        let sectors = inode.blocks.saturating_sub(freed_blocks * bs / 512);
        self.edit_inode(&inode, |r| {
            r[0x28..0x28 + 60].copy_from_slice(&root);
            put32(r, 0x1C, sectors as u32);
            put16(r, 0x74, (sectors >> 32) as u16);
        })
    }

    /// Makes the unwritten extent `run` of `inode` written: its blocks are
    /// zeroed, then its entry's unwritten bit cleared.
    pub(crate) fn write_out_unwritten(&mut self, inode: &Inode, run: Run) -> Result<Inode, Error> {
        debug_assert!(run.uninit, "only unwritten extents are converted");
        let bs = self.layout.block_size;
        let zeros = vec![0u8; bs as usize];
        for k in 0..run.len {
            self.store_data((run.physical + k) * bs, &zeros)?;
        }
        let new_len = raw_len(run.len, false).to_le_bytes();
        match self.place_of(inode, run.logical)? {
            Place::Root(at) => self.edit_inode(inode, |r| r[0x28 + at + 4..0x28 + at + 6].copy_from_slice(&new_len)),
            Place::Leaf { block, at } => {
                let node = self.block(block, &|| format!("inode {} extent leaf {block}", inode.ino))?;
                let tail = 12 + 12 * usize::from(le16(node, 4));
                self.patch("extent leaf", block * bs, (tail, tail, inode.csum_seed), &[(at + 4, &new_len)])?;
                self.inode(inode.ino)
            }
        }
    }

    /// Where the extent starting at file block `logical` is stored.
    fn place_of(&self, inode: &Inode, logical: u64) -> Result<Place, Error> {
        let root = &inode.i_block;
        let find = |node: &[u8]| {
            (0..usize::from(le16(node, 2))).map(|e| 12 + 12 * e).find(|&at| read_entry(node, at).logical == logical)
        };
        let missing = || corrupt(format!("inode {} extent tree", inode.ino), format!("no extent starts at {logical}"));
        match le16(root, 6) {
            0 => find(root).map(Place::Root).ok_or_else(missing),
            1 => {
                let entries = usize::from(le16(root, 2));
                let covering =
                    (0..entries).rev().find(|&e| u64::from(le32(root, 12 + 12 * e)) <= logical).ok_or_else(missing)?;
                let at = 12 + 12 * covering;
                let block = u64::from(le32(root, at + 4)) | u64::from(le16(root, at + 8)) << 32;
                let node = self.block(block, &|| format!("inode {} extent leaf {block}", inode.ino))?;
                find(node).map(|at| Place::Leaf { block, at }).ok_or_else(missing)
            }
            _ => Err(Error::Unsupported {
                feature: "extent tree of depth > 1",
                remedy: "writing into such a file's unwritten extents is not implemented in csumfs yet",
            }),
        }
    }
}

//! A file's extent tree, of any depth, after a change of its mapping.
//!
//! Every change — an extent added by a write or fallocate, a tail cut by
//! truncate, a hole punched, an unwritten piece turned written — is one
//! [`Volume::remap`]: the mapping of a range of file blocks is replaced.
//! The new list of extents (neighbours that touch on disk merged) is laid
//! out in the compact form: nodes filled left to right, the shallowest
//! tree that holds them (depth 0 in the inode up to four extents). That
//! is the form e2fsck's pass 1E asks for — no level "could be narrower"
//! or "could be shorter" — whatever the history of inserts and punches,
//! and it needs no split or merge cases: a node too full spills into the
//! next, the last node of a level is the one that grows or goes.
//!
//! Node blocks that exist keep their place, level by level and left to
//! right; a node's checksum is moved by splice over the bytes that differ
//! from what it held, so an append changes the last leaf and the index
//! entries above it, and a node that did not change is not written. New
//! nodes are checksummed in full (they are new); nodes no longer needed
//! are freed. Blocks are allocated before anything is written, so an
//! `ENOSPC` leaves the tree as it was.

use crate::error::{corrupt, Error};
use crate::inode::table::{Inode, FLAG_EXTENTS, FLAG_INLINE_DATA};
use crate::space::map::Run;
use crate::splice::changes;
use crate::volume::Volume;
use csumkit::crc32c;
use csumkit::ext4::fields::{
    EE_BLOCK, EE_LEN, EE_START_HI, EE_START_LO, EH_DEPTH, EH_ENTRIES, EH_MAGIC, EH_MAX, EI_BLOCK, EI_LEAF_HI,
    EI_LEAF_LO, EXT_MAGIC, I_BLOCKS_HIGH, I_BLOCKS_LO,
};
use csumkit::le::{le16, le32, put16, put32};

/// Entries of the root node in `i_block`.
const ROOT_ENTRIES: usize = 4;
/// `EXT4_MAX_EXTENT_DEPTH`.
const DEPTH_MAX: usize = 5;
/// Blocks of one extent: 32768 written, 32767 unwritten (ee_len above
/// 32768 marks an unwritten extent of ee_len - 32768 blocks).
fn extent_cap(uninit: bool) -> u64 {
    if uninit {
        32767
    } else {
        32768
    }
}

/// The tree as it is: its extents in file order and its node blocks by
/// depth (leaves at 0), left to right.
pub(crate) struct Tree {
    pub(crate) extents: Vec<Run>,
    pub(crate) nodes: Vec<Vec<u64>>,
}

/// The extents after replacing the mapping of `from..to` with `put`
/// (which lies inside it), neighbours that continue each other merged;
/// and the pieces of the old extents that lay in `from..to`.
fn remapped(old: &[Run], from: u64, to: u64, put: &[Run]) -> (Vec<Run>, Vec<Run>) {
    let (mut kept, mut removed) = (Vec::with_capacity(old.len() + put.len() + 1), Vec::new());
    for r in old {
        let end = r.logical + r.len;
        if end <= from || r.logical >= to {
            kept.push(*r);
            continue;
        }
        if r.logical < from {
            kept.push(Run { len: from - r.logical, ..*r });
        }
        let (a, b) = (r.logical.max(from), end.min(to));
        removed.push(Run { logical: a, len: b - a, physical: r.physical + (a - r.logical), uninit: r.uninit });
        if to < end {
            kept.push(Run { logical: to, len: end - to, physical: r.physical + (to - r.logical), uninit: r.uninit });
        }
    }
    debug_assert!(put.iter().all(|p| from <= p.logical && p.logical + p.len <= to && p.len > 0));
    kept.extend_from_slice(put);
    kept.sort_by_key(|r| r.logical);
    let mut merged: Vec<Run> = Vec::with_capacity(kept.len());
    for r in kept {
        match merged.last_mut() {
            Some(p)
                if p.uninit == r.uninit
                    && p.logical + p.len == r.logical
                    && p.physical + p.len == r.physical
                    && p.len + r.len <= extent_cap(r.uninit) =>
            {
                p.len += r.len;
            }
            _ => merged.push(r),
        }
    }
    (merged, removed)
}

/// One 12-byte entry: an extent (leaf) or (first file block, child block) (index).
fn leaf_entry(r: &Run) -> [u8; 12] {
    let mut e = [0u8; 12];
    put32(&mut e, EE_BLOCK, r.logical as u32);
    put16(&mut e, EE_LEN, (if r.uninit { r.len + 32768 } else { r.len }) as u16);
    put16(&mut e, EE_START_HI, (r.physical >> 32) as u16);
    put32(&mut e, EE_START_LO, r.physical as u32);
    e
}

fn index_entry(first: u64, child: u64) -> [u8; 12] {
    let mut e = [0u8; 12];
    put32(&mut e, EI_BLOCK, first as u32);
    put32(&mut e, EI_LEAF_LO, child as u32);
    put16(&mut e, EI_LEAF_HI, (child >> 32) as u16);
    e
}

/// A node's bytes: header, entries, zeros to `len`.
fn node_bytes(len: usize, max: usize, depth: usize, entries: &[[u8; 12]]) -> Vec<u8> {
    debug_assert!(entries.len() <= max && 12 + 12 * max <= len);
    let mut node = vec![0u8; len];
    put16(&mut node, EH_MAGIC, EXT_MAGIC);
    put16(&mut node, EH_ENTRIES, entries.len() as u16);
    put16(&mut node, EH_MAX, max as u16);
    put16(&mut node, EH_DEPTH, depth as u16);
    for (k, e) in entries.iter().enumerate() {
        node[12 + 12 * k..24 + 12 * k].copy_from_slice(e);
    }
    node
}

/// Nodes per level of the compact tree over `extents` entries: leaves
/// first; empty when they fit in the root.
fn level_sizes(extents: usize, per_block: usize) -> Vec<usize> {
    let (mut sizes, mut n) = (Vec::new(), extents);
    while n > ROOT_ENTRIES {
        n = n.div_ceil(per_block);
        sizes.push(n);
    }
    sizes
}

impl Volume {
    /// Replaces the mapping of file blocks `from..to` of `inode` with the
    /// runs `put` (inside that range, not overlapping), rewriting its
    /// extent tree as the module comment says. Returns the inode and the
    /// pieces of the old mapping that lay in the range — the caller frees
    /// them or, when `put` maps them again, keeps them. `i_blocks` counts
    /// the tree's blocks; data blocks are the caller's to count.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for inline or block-mapped files;
    /// [`Error::Corrupt`] / [`Error::Checksum`] for a damaged tree;
    /// `ENOSPC` (nothing changed) when new node blocks do not fit.
    pub(crate) fn remap(&mut self, inode: &Inode, from: u64, to: u64, put: &[Run]) -> Result<(Inode, Vec<Run>), Error> {
        if inode.flags & FLAG_INLINE_DATA != 0 || inode.flags & FLAG_EXTENTS == 0 {
            return Err(Error::Unsupported {
                feature: if inode.flags & FLAG_EXTENTS == 0 { "^extent" } else { "inline_data" },
                remedy: "changing the blocks of inline or block-mapped files is not implemented in csumfs yet",
            });
        }
        let tree = self.read_tree(inode)?;
        if !inode.is_dir() {
            self.fast_track_range(inode.ino, from, to);
        }
        let (extents, removed) = remapped(&tree.extents, from, to, put);
        if removed.is_empty() && put.is_empty() {
            return Ok((inode.clone(), removed));
        }
        let bs = self.layout.block_size as usize;
        let per_block = (bs - 12) / 12; // ext4_ext_space_block
        let sizes = level_sizes(extents.len(), per_block);
        if sizes.len() > DEPTH_MAX {
            return Err(Error::Io {
                context: format!("inode {} extent tree", inode.ino),
                source: std::io::Error::from_raw_os_error(libc::EFBIG),
            });
        }
        // Every new block first: an ENOSPC here changes nothing.
        let wanted: usize =
            sizes.iter().enumerate().map(|(d, &n)| n.saturating_sub(tree.nodes.get(d).map_or(0, Vec::len))).sum();
        let goal = tree.nodes.iter().flatten().copied().max().or(put.first().map(|r| r.physical));
        let fresh = self.allocate_tree_blocks(goal.unwrap_or(0), wanted)?;
        let mut fresh = fresh.into_iter();

        let tail = 12 + 12 * per_block;
        let mut level: Vec<([u8; 12], u64)> = extents.iter().map(|r| (leaf_entry(r), r.logical)).collect();
        for (depth, &count) in sizes.iter().enumerate() {
            let mut above = Vec::with_capacity(count);
            for (k, chunk) in level.chunks(per_block).enumerate() {
                debug_assert!(k < count);
                let entries: Vec<[u8; 12]> = chunk.iter().map(|(e, _)| *e).collect();
                let mut new = node_bytes(bs, per_block, depth, &entries);
                let old = tree.nodes.get(depth).and_then(|level| level.get(k)).copied();
                // A node block that exists keeps its place: its checksum moved by
                // splice over what differs (same eh_max), else rewritten whole.
                // The differing ranges only: a copy of the old node (64 KiB at
                // 64 KiB blocks, at every remap of a large file) cost more
                // than the compare.
                let same_shape: Option<Vec<(usize, usize)>> = match old {
                    Some(b) => {
                        let old_bytes = self.block(b, &|| format!("inode {} extent block {b}", inode.ino))?;
                        (usize::from(le16(old_bytes, EH_MAX)) == per_block).then(|| {
                            changes(&old_bytes[..tail], &new[..tail])
                                .into_iter()
                                .map(|(at, o, _)| (at, o.len()))
                                .collect()
                        })
                    }
                    None => None,
                };
                let block = match (old, same_shape) {
                    (Some(old), Some(ranges)) => {
                        let edits: Vec<(usize, &[u8])> =
                            ranges.iter().map(|&(at, len)| (at, &new[at..at + len])).collect();
                        if !edits.is_empty() {
                            self.patch("extent node", old * bs as u64, (tail, tail, inode.csum_seed), &edits)?;
                        }
                        old
                    }
                    (old, _) => {
                        let crc = crc32c::raw_update(inode.csum_seed, &new[..tail]);
                        put32(&mut new, tail, crc);
                        match old {
                            Some(old) => self.store(old * bs as u64, &new).map(|()| old)?,
                            // Taken by this operation: undoing it frees the
                            // block again, so its old bytes are not kept.
                            None => {
                                let block = fresh.next().expect("allocated above");
                                self.store_unread(block * bs as u64, &new).map(|()| block)?
                            }
                        }
                    }
                };
                above.push((index_entry(chunk[0].1, block), chunk[0].1));
            }
            level = above;
        }
        debug_assert!(fresh.next().is_none(), "every allocated block is used");

        let depth = sizes.len();
        let entries: Vec<[u8; 12]> = level.iter().map(|(e, _)| *e).collect();
        let root = node_bytes(60, ROOT_ENTRIES, depth, &entries);
        let old_blocks = tree.nodes.iter().map(Vec::len).sum::<usize>() as u64;
        let new_blocks = sizes.iter().sum::<usize>() as u64;
        let sectors = (inode.blocks + new_blocks * bs as u64 / 512).saturating_sub(old_blocks * bs as u64 / 512);
        let inode = self.edit_inode(inode, |r| {
            r[0x28..0x28 + 60].copy_from_slice(&root);
            put32(r, I_BLOCKS_LO, sectors as u32);
            put16(r, I_BLOCKS_HIGH, (sectors >> 32) as u16);
        })?;
        for (d, nodes) in tree.nodes.iter().enumerate() {
            for &old in nodes.iter().skip(sizes.get(d).copied().unwrap_or(0)) {
                self.free_blocks(old, 1)?;
            }
        }
        Ok((inode, removed))
    }

    /// `n` free blocks for tree nodes, near `goal`; none taken on `ENOSPC`.
    fn allocate_tree_blocks(&mut self, goal: u64, n: usize) -> Result<Vec<u64>, Error> {
        let mut got = Vec::with_capacity(n);
        while got.len() < n {
            match self.allocate_blocks(goal, (n - got.len()) as u64) {
                Ok((start, len)) => got.extend(start..start + len),
                Err(e) => {
                    for &b in &got {
                        self.free_blocks(b, 1)?;
                    }
                    return Err(e);
                }
            }
        }
        Ok(got)
    }

    /// Reads `inode`'s extent tree: headers checked, node checksums
    /// verified, extents in order, not overlapping and inside the
    /// filesystem. The one reader of extent trees: `runs` and `tree_blocks`
    /// (map.rs) are its views.
    pub(crate) fn read_tree(&self, inode: &Inode) -> Result<Tree, Error> {
        let what = || format!("inode {} extent tree", inode.ino);
        let root = &inode.i_block;
        let depth = usize::from(le16(root, EH_DEPTH));
        if le16(root, EH_MAGIC) != EXT_MAGIC
            || le16(root, EH_ENTRIES) > le16(root, EH_MAX)
            || le16(root, EH_MAX) as usize > ROOT_ENTRIES
        {
            return Err(corrupt(what(), "bad root header"));
        }
        if depth > DEPTH_MAX {
            return Err(corrupt(what(), format!("depth {depth}")));
        }
        let mut tree = Tree { extents: Vec::new(), nodes: (0..depth).map(|_| Vec::new()).collect() };
        // Depth first, left to right: each level's nodes come out in file order.
        let mut stack: Vec<(u64, usize)> = Vec::new();
        let push_children = |node: &[u8], d: usize, stack: &mut Vec<(u64, usize)>| {
            for e in (0..usize::from(le16(node, EH_ENTRIES))).rev() {
                let at = 12 + 12 * e;
                stack.push((
                    u64::from(le32(node, at + EI_LEAF_LO)) | u64::from(le16(node, at + EI_LEAF_HI)) << 32,
                    d - 1,
                ));
            }
        };
        if depth == 0 {
            self.collect_extents(root, &mut tree.extents);
        } else {
            push_children(root, depth, &mut stack);
        }
        while let Some((block, d)) = stack.pop() {
            let bytes = self.block(block, &|| format!("inode {} extent block {block}", inode.ino))?;
            let (entries, max) = (usize::from(le16(bytes, EH_ENTRIES)), usize::from(le16(bytes, EH_MAX)));
            let tail = 12 + 12 * max;
            if le16(bytes, EH_MAGIC) != EXT_MAGIC
                || entries > max
                || tail + 4 > bytes.len()
                || usize::from(le16(bytes, EH_DEPTH)) != d
            {
                return Err(corrupt(format!("inode {} extent block {block}", inode.ino), "bad header"));
            }
            let computed = crc32c::raw_update(inode.csum_seed, &bytes[..tail]);
            self.verify(&|| format!("inode {} extent block {block}", inode.ino), le32(bytes, tail), computed)?;
            if d == 0 {
                self.collect_extents(bytes, &mut tree.extents);
            } else {
                push_children(bytes, d, &mut stack);
            }
            tree.nodes[d].push(block);
            if tree.nodes.iter().map(Vec::len).sum::<usize>() as u64 > self.layout.blocks_count {
                return Err(corrupt(what(), "more nodes than the filesystem has blocks"));
            }
        }
        let l = &self.layout;
        // As the kernel's ext4_valid_extent: nothing at or before the first
        // data block (the superblock's; block 0 at 4 KiB blocks).
        if let Some(r) =
            tree.extents.iter().find(|r| r.physical <= l.first_data_block || r.physical + r.len > l.blocks_count)
        {
            return Err(corrupt(what(), format!("blocks {}+{} lie outside the filesystem", r.physical, r.len)));
        }
        for pair in tree.extents.windows(2) {
            if pair[0].logical + pair[0].len > pair[1].logical {
                return Err(corrupt(what(), format!("extents at {} and {} overlap", pair[0].logical, pair[1].logical)));
            }
        }
        Ok(tree)
    }

    fn collect_extents(&self, node: &[u8], out: &mut Vec<Run>) {
        for e in 0..usize::from(le16(node, EH_ENTRIES)) {
            let at = 12 + 12 * e;
            let raw = u64::from(le16(node, at + EE_LEN));
            let (len, uninit) = if raw > 32768 { (raw - 32768, true) } else { (raw, false) };
            let physical = u64::from(le32(node, at + EE_START_LO)) | u64::from(le16(node, at + EE_START_HI)) << 32;
            out.push(Run { logical: u64::from(le32(node, at + EE_BLOCK)), len, physical, uninit });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(logical: u64, len: u64, physical: u64, uninit: bool) -> Run {
        Run { logical, len, physical, uninit }
    }

    #[test]
    fn remapping_splits_clips_and_merges() {
        let old = [run(0, 10, 100, true), run(10, 5, 200, false)];
        // A written piece in the middle of an unwritten extent splits it in three.
        let (new, removed) = remapped(&old, 3, 5, &[run(3, 2, 103, false)]);
        assert_eq!(new, [run(0, 3, 100, true), run(3, 2, 103, false), run(5, 5, 105, true), run(10, 5, 200, false)]);
        assert_eq!(removed, [run(3, 2, 103, true)]);
        // A hole across two extents.
        let (new, removed) = remapped(&old, 8, 12, &[]);
        assert_eq!(new, [run(0, 8, 100, true), run(12, 3, 202, false)]);
        assert_eq!(removed, [run(8, 2, 108, true), run(10, 2, 200, false)]);
        // Filling it again merges with the neighbour that continues on disk.
        let (new, _) = remapped(&new, 8, 12, &[run(10, 2, 200, false)]);
        assert_eq!(new, [run(0, 8, 100, true), run(10, 5, 200, false)]);
        // Written neighbours merge up to 32768 blocks, unwritten to 32767.
        let (new, _) = remapped(&[run(0, 32767, 0, true)], 32767, 32768, &[run(32767, 1, 32767, true)]);
        assert_eq!(new.len(), 2);
        let (new, _) = remapped(&[run(0, 32767, 0, false)], 32767, 32768, &[run(32767, 1, 32767, false)]);
        assert_eq!(new, [run(0, 32768, 0, false)]);
        // A cut to the end.
        let (new, removed) = remapped(&old, 4, u64::MAX, &[]);
        assert_eq!(new, [run(0, 4, 100, true)]);
        assert_eq!(removed, [run(4, 6, 104, true), run(10, 5, 200, false)]);
    }

    #[test]
    fn the_compact_tree_is_the_shallowest_that_holds_the_extents() {
        assert_eq!(level_sizes(0, 340), Vec::<usize>::new());
        assert_eq!(level_sizes(4, 340), Vec::<usize>::new());
        assert_eq!(level_sizes(5, 340), [1]);
        assert_eq!(level_sizes(4 * 340, 340), [4]);
        assert_eq!(level_sizes(4 * 340 + 1, 340), [5, 1]);
        assert_eq!(level_sizes(4 * 84 * 84 + 1, 84), [337, 5, 1]);
    }
}

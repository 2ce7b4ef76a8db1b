//! Adding directory entries: into a linear directory's first leaf with room
//! (or a new leaf appended), or into an indexed (htree) directory's leaf for
//! the name's hash — splitting that leaf by hash when it is full and adding
//! the new leaf to the index node above it, as the kernel's `do_split` does.
//! A full index node is split in two (its upper half indexed by its parent),
//! a full root moves its entries down into a new node (one level more, up
//! to the two levels of `ext4_dir_htree_level`, three with `large_dir`),
//! and a one-block linear directory that fills becomes an htree, as the
//! kernel's `make_indexed_dir` makes it (with `dir_index`). An entry added
//! to a leaf moves the leaf's checksum by splice; splits rewrite the blocks
//! they change, which are checksummed anew (their covered length changed).

use crate::dir::htree::{index_csum, index_limit, BadIndex, IndexStep, NODE_COUNT_AT, ROOT_COUNT_AT};
use crate::dir::read::record_len;
use crate::error::{corrupt, Error};
use crate::format::dir_block::new_dir_block;
use crate::inode::table::{Inode, FLAG_INDEX, FLAG_INLINE_DATA};
use crate::volume::Volume;
use csumkit::ext4::feature_bits::COMPAT_DIR_INDEX;
use csumkit::ext4::fields::{DX_ROOT_HASH_VERSION, DX_ROOT_INDIRECT_LEVELS, I_FLAGS, I_SIZE_HIGH, I_SIZE_LO};
use csumkit::le::{le16, le32, put16, put32};

/// One live entry of a leaf: (inode, file type, name).
type Entry = (u32, u8, Vec<u8>);

/// Entries change only in directories with blocks: every caller converts an
/// inline directory first (`extent_mapped_dir`), so one reaching a block
/// edit is a bug here, refused rather than written through.
pub(crate) fn not_inline(dir: &Inode) -> Result<(), Error> {
    debug_assert!(dir.flags & FLAG_INLINE_DATA == 0, "directory {} still inline", dir.ino);
    if dir.flags & FLAG_INLINE_DATA != 0 {
        return Err(Error::Invalid(format!(
            "directory {} is still inline where its blocks change (a csumfs bug)",
            dir.ino
        )));
    }
    Ok(())
}

impl Volume {
    /// Adds the entry `name` → `ino` to directory `dir`.
    pub(crate) fn add_entry(&mut self, dir: &Inode, name: &[u8], ino: u32, file_type: u8) -> Result<(), Error> {
        crate::dir::write::not_inline(dir)?;
        if dir.flags & FLAG_INDEX != 0 {
            return self.add_indexed_entry(dir, name, ino, file_type);
        }
        for run in self.runs(dir)? {
            for k in 0..run.len {
                if self.insert_into_leaf(dir, run.physical + k, name, ino, file_type)? {
                    return Ok(());
                }
            }
        }
        let bs = self.layout.block_size as usize;
        if dir.size == bs as u64 && self.layout.features.compat & COMPAT_DIR_INDEX != 0 {
            let dir = self.make_indexed(dir)?;
            return self.add_indexed_entry(&dir, name, ino, file_type);
        }
        // No room: a new block holding only this entry.
        let physical = self.append_dir_block(dir)?;
        let block = new_dir_block(bs, dir.csum_seed, &[(ino, file_type, name)]);
        self.store_unread(physical * bs as u64, &block)
    }

    /// Puts the entry into leaf block `physical` if it has room: into the
    /// slack of a record (or an empty one), the checksum moved by splice.
    fn insert_into_leaf(&mut self, dir: &Inode, physical: u64, name: &[u8], ino: u32, ft: u8) -> Result<bool, Error> {
        let bs = self.layout.block_size as usize;
        let need = record_len(name.len());
        let block = self.block(physical, &|| format!("directory {} block {physical}", dir.ino))?;
        let what = || format!("directory {} block {physical}", dir.ino);
        let area = &block[..bs - 12]; // the tail after it holds the checksum
        for record in crate::dir::read::records(area, area.len(), what) {
            let record = record?;
            let (at, used) = (record.at, record.used());
            if record.rec_len - used >= need {
                // Two small edits: the shortened record's length, the new entry.
                let shortened = (used as u16).to_le_bytes();
                let mut entry = vec![0u8; 8 + name.len()];
                put32(&mut entry, 0, ino);
                put16(&mut entry, 4, (record.rec_len - used) as u16);
                entry[6] = name.len() as u8;
                entry[7] = ft;
                entry[8..].copy_from_slice(name);
                let mut edits: Vec<(usize, &[u8])> = vec![(at + used, &entry)];
                if record.ino != 0 {
                    edits.push((at + 4, &shortened));
                }
                self.patch("directory block", physical * bs as u64, (bs - 12, bs - 4, dir.csum_seed), &edits)?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Allocates the directory's next block (logical `size / bs`), grows
    /// its size; returns the block's physical number.
    fn append_dir_block(&mut self, dir: &Inode) -> Result<u64, Error> {
        let bs = self.layout.block_size;
        let logical = dir.size / bs;
        let grown = self.grow(dir.clone(), logical, 1, crate::space::grow::Fill::Nothing)?;
        let physical = self
            .runs(&grown)?
            .iter()
            .find(|r| (r.logical..r.logical + r.len).contains(&logical))
            .map(|r| r.physical + logical - r.logical)
            .ok_or_else(|| corrupt(format!("directory {}", dir.ino), "the block just added is not mapped"))?;
        let size = grown.size + bs;
        self.edit_inode(&grown, |r| {
            put32(r, I_SIZE_LO, size as u32);
            put32(r, I_SIZE_HIGH, (size >> 32) as u32);
        })?;
        Ok(physical)
    }

    /// The htree case: the leaf for the name's hash, split when full
    /// (after making room in the index above it, then looking again).
    fn add_indexed_entry(&mut self, dir: &Inode, name: &[u8], ino: u32, ft: u8) -> Result<(), Error> {
        let bs = self.layout.block_size as usize;
        let mut dir = dir.clone();
        let (path, node) = loop {
            let path = self.htree_path(&dir, name)?.map_err(|BadIndex(why)| {
                corrupt(
                    format!("directory {}", dir.ino),
                    format!("its htree index is bad ({why}): e2fsck -fD rebuilds it"),
                )
            })?;
            let last = *path.steps.last().expect("a path holds the root");
            let node = self.block(last.physical, &|| format!("directory {} index", dir.ino))?.to_vec();
            if self.insert_into_leaf(&dir, path.leaf_physical, name, ino, ft)? {
                return Ok(());
            }
            let (limit, count) = (usize::from(le16(&node, last.count_at)), usize::from(le16(&node, last.count_at + 2)));
            if count < limit {
                break (path, node);
            }
            self.grow_index(&dir, &path.steps)?;
            dir = self.inode(dir.ino)?;
        };
        let dir = &dir;
        let IndexStep { physical: node_physical, count_at, chosen } =
            *path.steps.last().expect("a path holds the root");
        let (hash, leaf_logical, leaf_physical) = (path.hash, path.leaf, path.leaf_physical);
        let count = usize::from(le16(&node, count_at + 2));
        // Split: the entries sorted by hash, the upper half by size to a new leaf.
        let old_leaf = self.block(leaf_physical, &|| format!("directory {} leaf", dir.ino))?.to_vec();
        let mut entries = Vec::new();
        for entry in leaf_entries(&old_leaf, dir.ino)? {
            entries.push((self.name_hash(path.version, &entry.2).expect("the path's hash version"), entry));
        }
        entries.sort_by_key(|(h, _)| *h);
        if entries.len() < 2 {
            return Err(corrupt(
                format!("directory {} leaf {leaf_logical}", dir.ino),
                "full with fewer than two entries",
            ));
        }
        let total: usize = entries.iter().map(|(_, e)| record_len(e.2.len())).sum();
        let (mut kept, mut split) = (0usize, entries.len());
        for (i, (_, e)) in entries.iter().enumerate() {
            if kept + record_len(e.2.len()) > total / 2 {
                split = i.clamp(1, entries.len() - 1);
                break;
            }
            kept += record_len(e.2.len());
        }
        let hash2 = entries[split].0;
        let continued = u32::from(split > 0 && entries[split - 1].0 == hash2);
        let new_logical = dir.size / bs as u64;
        let new_physical = self.append_dir_block(dir)?;
        let dir = self.inode(dir.ino)?;
        let (low, high): (Vec<Entry>, Vec<Entry>) = {
            let (a, b) = entries.split_at(split);
            (a.iter().map(|(_, e)| e.clone()).collect(), b.iter().map(|(_, e)| e.clone()).collect())
        };
        let block_of = |v: &[Entry]| {
            let refs: Vec<(u32, u8, &[u8])> = v.iter().map(|(i, f, n)| (*i, *f, n.as_slice())).collect();
            new_dir_block(bs, dir.csum_seed, &refs)
        };
        self.store(leaf_physical * bs as u64, &block_of(&low))?;
        self.store_unread(new_physical * bs as u64, &block_of(&high))?;
        // The index: (hash2 | continued, new leaf) after the chosen entry.
        let mut node = self.block(node_physical, &|| format!("directory {} index", dir.ino))?.to_vec();
        let at = count_at + 8 * (chosen + 1);
        node.copy_within(at..count_at + 8 * count, at + 8);
        put32(&mut node, at, hash2 | continued);
        put32(&mut node, at + 4, new_logical as u32);
        put16(&mut node, count_at + 2, (count + 1) as u16);
        self.seal_index_node(&dir, &mut node, count_at);
        self.store(node_physical * bs as u64, &node)?;
        // The new entry goes to the leaf that covers its hash.
        let target = if hash >= hash2 { new_physical } else { leaf_physical };
        if self.insert_into_leaf(&dir, target, name, ino, ft)? {
            Ok(())
        } else {
            Err(corrupt(format!("directory {}", dir.ino), "no room after a leaf split"))
        }
    }

    /// Makes room in the full index node at the end of `path`: the
    /// topmost of the full nodes above the leaf is split in two, its upper
    /// half going to a new node that its parent indexes; when that is the
    /// root, the root's entries move down into a new node instead and the
    /// tree gets a level (the kernel's `ext4_dx_add_entry`). `ENOSPC` when
    /// the tree has all the levels it may have ("Directory index full!").
    fn grow_index(&mut self, dir: &Inode, path: &[IndexStep]) -> Result<(), Error> {
        let bs = self.layout.block_size as usize;
        let what = || format!("directory {} index", dir.ino);
        let is_full = |v: &Volume, step: IndexStep| -> Result<bool, Error> {
            let node = v.block(step.physical, &what)?;
            Ok(le16(node, step.count_at + 2) >= le16(node, step.count_at))
        };
        let mut i = path.len() - 1;
        while i > 0 && is_full(self, path[i - 1])? {
            i -= 1;
        }
        let IndexStep { physical, count_at, .. } = path[i];
        let mut node = self.block(physical, &what)?.to_vec();
        let count = usize::from(le16(&node, count_at + 2));
        let (moved_from, parent) = if i == 0 {
            let levels = node[DX_ROOT_INDIRECT_LEVELS];
            if levels + 1 >= self.htree_levels() {
                return Err(Error::Io {
                    context: format!("directory {}: its htree index is full ({} levels)", dir.ino, levels + 1),
                    source: std::io::Error::from_raw_os_error(libc::ENOSPC),
                });
            }
            (0, None)
        } else {
            (count / 2, Some(path[i - 1]))
        };
        // The new node takes entries moved_from.. (their first hash goes to
        // the parent; the slot it held becomes the node's count/limit).
        let new_logical = dir.size / bs as u64;
        let new_physical = self.append_dir_block(dir)?;
        let dir = self.inode(dir.ino)?;
        let mut child = vec![0u8; bs];
        put16(&mut child, 4, rec_len_on_disk(bs));
        let moved = count_at + 8 * moved_from..count_at + 8 * count;
        child[NODE_COUNT_AT..NODE_COUNT_AT + moved.len()].copy_from_slice(&node[moved]);
        put16(&mut child, NODE_COUNT_AT, index_limit(bs, NODE_COUNT_AT) as u16);
        put16(&mut child, NODE_COUNT_AT + 2, (count - moved_from) as u16);
        self.seal_index_node(&dir, &mut child, NODE_COUNT_AT);
        self.store_unread(new_physical * bs as u64, &child)?;
        let hash2 = le32(&node, count_at + 8 * moved_from);
        match parent {
            None => {
                // The root keeps one entry, the new node; a level more.
                put16(&mut node, count_at + 2, 1);
                put32(&mut node, count_at + 4, new_logical as u32);
                node[DX_ROOT_INDIRECT_LEVELS] += 1;
            }
            Some(IndexStep { physical: parent_physical, count_at: parent_count_at, chosen }) => {
                put16(&mut node, count_at + 2, moved_from as u16);
                let mut parent = self.block(parent_physical, &what)?.to_vec();
                let parent_count = usize::from(le16(&parent, parent_count_at + 2));
                let at = parent_count_at + 8 * (chosen + 1);
                parent.copy_within(at..parent_count_at + 8 * parent_count, at + 8);
                put32(&mut parent, at, hash2);
                put32(&mut parent, at + 4, new_logical as u32);
                put16(&mut parent, parent_count_at + 2, (parent_count + 1) as u16);
                self.seal_index_node(&dir, &mut parent, parent_count_at);
                self.store(parent_physical * bs as u64, &parent)?;
            }
        }
        self.seal_index_node(&dir, &mut node, count_at);
        self.store(physical * bs as u64, &node)
    }

    /// Turns a full one-block linear directory into an htree, as the
    /// kernel's `make_indexed_dir`: its entries but "." and ".." move to
    /// a new leaf (logical block 1) and block 0 becomes the index root —
    /// "." and "..", the root info (the superblock's default hash), one
    /// index entry for the leaf, a dx_tail — and the inode gets
    /// `EXT4_INDEX_FL`.
    fn make_indexed(&mut self, dir: &Inode) -> Result<Inode, Error> {
        let bs = self.layout.block_size as usize;
        let root_physical = self.dir_block(dir, 0)?;
        let old = self.block(root_physical, &|| format!("directory {} block 0", dir.ino))?.to_vec();
        let entries = leaf_entries(&old, dir.ino)?;
        let dots = entries.len() >= 2 && entries[0].2 == b"." && entries[1].2 == b".." && le16(&old, 4) == 12;
        if !dots {
            return Err(corrupt(format!("directory {} block 0", dir.ino), "does not start with \".\" and \"..\""));
        }
        let moved: Vec<(u32, u8, &[u8])> = entries[2..].iter().map(|(i, f, n)| (*i, *f, n.as_slice())).collect();
        let leaf_physical = self.append_dir_block(dir)?;
        self.store(leaf_physical * bs as u64, &new_dir_block(bs, dir.csum_seed, &moved))?;
        let dir = self.inode(dir.ino)?;
        let mut root = vec![0u8; bs];
        root[..12].copy_from_slice(&old[..12]); // "."
        put32(&mut root, 12, entries[1].0);
        put16(&mut root, 16, (bs - 12) as u16);
        root[18] = 2;
        root[19] = entries[1].1;
        root[20..22].copy_from_slice(b"..");
        root[DX_ROOT_HASH_VERSION] = self.hash.default_version;
        root[0x1D] = 8; // info_length
        let count_at = ROOT_COUNT_AT;
        put16(&mut root, count_at, index_limit(bs, count_at) as u16);
        put16(&mut root, count_at + 2, 1);
        put32(&mut root, count_at + 4, 1);
        self.seal_index_node(&dir, &mut root, count_at);
        self.store(root_physical * bs as u64, &root)?;
        self.edit_inode(&dir, |r| put32(r, I_FLAGS, le32(r, I_FLAGS) | FLAG_INDEX))
    }

    /// The dx_tail checksum of an index node (its count changed: the
    /// covered length changed, so it is computed anew).
    fn seal_index_node(&self, dir: &Inode, node: &mut [u8], count_at: usize) {
        let tail = count_at + 8 * usize::from(le16(node, count_at));
        put32(node, tail + 4, index_csum(dir.csum_seed, node, count_at));
    }
}

/// The live entries of a leaf block.
fn leaf_entries(block: &[u8], dir: u32) -> Result<Vec<Entry>, Error> {
    let area = &block[..block.len() - 12];
    let mut out = Vec::new();
    for record in crate::dir::read::records(area, area.len(), || format!("directory {dir}")) {
        let record = record?;
        if record.ino != 0 {
            out.push((record.ino, record.file_type, record.name.to_vec()));
        }
    }
    Ok(out)
}

/// A record length as stored: a 64 KiB record does not fit 16 bits and is
/// stored as 65535 (`ext4_rec_len_to_disk`).
fn rec_len_on_disk(len: usize) -> u16 {
    if len >= 65536 {
        u16::MAX
    } else {
        len as u16
    }
}

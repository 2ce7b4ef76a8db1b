//! A copy-on-write tree of data checksums, committed the way btrfs commits
//! its checksum tree: every data write updates the CRC32C item of its block
//! in memory and dirties that leaf; a commit writes every dirty leaf and
//! every ancestor to a fresh location (never over a live node), flushes,
//! then writes the superblock pointing at the new root and flushes again.
//! This is what PI offload removes by keeping the checksum in the drive's PI
//! instead.
//!
//! Power cuts: the superblock alternates between two slots (even
//! generations in the first, odd in the second), so a superblock write cut
//! short leaves the other slot — the commit before, whose nodes nothing
//! has overwritten yet — and `open` takes the newest slot that checks. As
//! in btrfs, a parent records each child's generation and every node
//! carries its own: a node that is valid but not the one its parent wrote
//! (stale, or from a commit that never finished) is refused, never read as
//! current.
//!
//! Node layout (4096 bytes, little-endian):
//!
//! | bytes | field |
//! |-------|-------|
//! | 0..4 | magic: `CSKL` leaf, `CSKN` internal node, `CSKS` superblock |
//! | 4..8 | CRC32C of bytes 8..4096 |
//! | 8..16 | generation: the commit that wrote the node |
//! | 16..24 | first data block covered |
//! | 24..28 | level (0 = leaf) |
//! | 28..32 | item count |
//! | leaf 32..152 | presence bitmap, one bit per block of the leaf |
//! | leaf 152..3992 | 960 CRC32C values |
//! | internal 32.. | up to 169 children: first block u64, location u64, the child's generation u64 |
//! | super 32..56 | root location u64, root level u32, tree height u32, root generation u64 |

use crate::le::{le32, le64};
use crate::Error;
use std::collections::BTreeSet;

/// Bytes of one node.
pub const NODE_BYTES: usize = 4096;
/// Checksums per leaf.
pub const LEAF_ENTRIES: u64 = 960;
/// Children per internal node.
pub const FANOUT: u64 = 169;
/// Largest data-block count a tree covers.
pub const BLOCKS_MAX: u64 = 1 << 40;

const HEADER_BYTES: usize = 32;
const BITMAP_BYTES: usize = LEAF_ENTRIES as usize / 8;
const CHILD_BYTES: usize = 24;
const MAGIC_LEAF: &[u8; 4] = b"CSKL";
const MAGIC_NODE: &[u8; 4] = b"CSKN";
const MAGIC_SUPER: &[u8; 4] = b"CSKS";

/// Superblock slots at the start of the area; nodes follow them.
const SUPERBLOCK_SLOTS: u64 = 2;

/// Where nodes go: `write` stores a node at a location, `read` fetches it,
/// `flush` makes the writes before it durable.
pub trait NodeStore {
    /// Stores `node` at `location`.
    fn write(&mut self, location: u64, node: &[u8; NODE_BYTES]) -> Result<(), Error>;
    /// Reads the node at `location`.
    fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), Error>;
    /// Makes every write before it durable (nothing to do in memory).
    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// What one commit wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CommitStats {
    /// Leaves and internal nodes written.
    pub nodes: u64,
    /// Bytes written, superblock included.
    pub bytes: u64,
}

/// The tree: in-memory contents plus where each node lives on the medium.
#[derive(Debug)]
pub struct ChecksumTree {
    blocks: u64,
    csums: Vec<u32>,
    present: Vec<u64>,
    /// Node count per level, leaves first; the last level has one node.
    level_nodes: Vec<u64>,
    /// Current location of every node, per level (u64::MAX: never written).
    locations: Vec<Vec<u64>>,
    /// The generation each node was last written in, per level.
    written_in: Vec<Vec<u64>>,
    dirty_leaves: BTreeSet<u64>,
    /// A leaf known to be in `dirty_leaves` (`u64::MAX`: none): a write's
    /// blocks mark one leaf after another, each many times.
    last_marked: u64,
    free_locations: Vec<u64>,
    /// The area's first location: the superblock slots, then the nodes.
    area_start: u64,
    generation: u64,
}

impl ChecksumTree {
    /// A tree for `blocks` data blocks whose nodes live in the `area_blocks`
    /// locations starting at `area_start` (the first two are the superblock
    /// slots). The area must hold two full copies of the tree plus the
    /// slots ([`area_blocks_for`](Self::area_blocks_for)).
    pub fn new(blocks: u64, area_start: u64, area_blocks: u64) -> Result<Self, Error> {
        if blocks == 0 || blocks > BLOCKS_MAX {
            return Err(Error::Invalid {
                what: "checksum tree",
                detail: format!("{blocks} blocks (1..={BLOCKS_MAX})"),
            });
        }
        let mut level_nodes = vec![blocks.div_ceil(LEAF_ENTRIES)];
        while *level_nodes.last().expect("non-empty") > 1 {
            level_nodes.push(level_nodes.last().expect("non-empty").div_ceil(FANOUT));
        }
        let needed = Self::area_blocks_for(blocks);
        if area_blocks < needed {
            return Err(Error::Invalid {
                what: "checksum tree",
                detail: format!("{area_blocks} metadata blocks; {blocks} data blocks need {needed}"),
            });
        }
        Ok(ChecksumTree {
            blocks,
            csums: vec![0; blocks as usize],
            present: vec![0; blocks.div_ceil(64) as usize],
            locations: level_nodes.iter().map(|&n| vec![u64::MAX; n as usize]).collect(),
            written_in: level_nodes.iter().map(|&n| vec![0; n as usize]).collect(),
            level_nodes,
            dirty_leaves: BTreeSet::new(),
            last_marked: u64::MAX,
            free_locations: (area_start + SUPERBLOCK_SLOTS..area_start + area_blocks).rev().collect(),
            area_start,
            generation: 0,
        })
    }

    /// The tree as last committed to `store` (an area never committed —
    /// all zeros — gives an empty tree): the newest superblock slot that
    /// checks, then every node (magic, CRC, level, the blocks it covers, the
    /// generation its parent recorded, a location inside the area and used
    /// once) on the way down; the area's other locations become free.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the node, or a tree of another geometry;
    /// the store's errors.
    pub fn open(store: &mut dyn NodeStore, blocks: u64, area_start: u64, area_blocks: u64) -> Result<Self, Error> {
        let mut tree = Self::new(blocks, area_start, area_blocks)?;
        let Some(superblock) = tree.newest_superblock(store)? else {
            return Ok(tree);
        };
        let root = tree.root_of(&superblock)?;
        tree.generation = le64(&superblock.node, 8);
        let nodes = area_start + SUPERBLOCK_SLOTS..area_start + area_blocks;
        let mut used = BTreeSet::new();
        let mut node = [0u8; NODE_BYTES];
        let mut stack = vec![(root, 0u64)];
        while let Some((child, index)) = stack.pop() {
            let Child { location, level, generation } = child;
            if location == u64::MAX {
                continue; // never written: no checksums below
            }
            if !nodes.contains(&location) || !used.insert(location) {
                return Err(corrupt(location, "outside the area, or reached twice"));
            }
            store.read(location, &mut node)?;
            check_child(&node, child)?;
            let (items, first) = (u64::from(le32(&node, 28)), le64(&node, 16));
            let span = LEAF_ENTRIES * FANOUT.pow(level as u32);
            if first != index * span || index >= tree.level_nodes[level] {
                return Err(corrupt(location, "first block is not its place in the tree"));
            }
            tree.locations[level][index as usize] = location;
            tree.written_in[level][index as usize] = generation;
            if level == 0 {
                let end = (first + LEAF_ENTRIES).min(blocks);
                if items != end - first {
                    return Err(corrupt(location, "item count is not the leaf's span"));
                }
                for i in 0..items as usize {
                    if node[HEADER_BYTES + i / 8] & (1 << (i % 8)) != 0 {
                        let at = HEADER_BYTES + BITMAP_BYTES + 4 * i;
                        tree.update(first + i as u64, le32(&node, at));
                    }
                }
            } else {
                if items > FANOUT {
                    return Err(corrupt(location, "more children than a node holds"));
                }
                for i in 0..items as usize {
                    let at = HEADER_BYTES + CHILD_BYTES * i;
                    let child_index = index * FANOUT + i as u64;
                    if le64(&node, at) != child_index * (span / FANOUT) {
                        return Err(corrupt(location, "a child's first block is not its place in the tree"));
                    }
                    let child =
                        Child { location: le64(&node, at + 8), level: level - 1, generation: le64(&node, at + 16) };
                    stack.push((child, child_index));
                }
            }
        }
        tree.dirty_leaves.clear();
        tree.last_marked = u64::MAX;
        tree.free_locations = nodes.rev().filter(|l| !used.contains(l)).collect();
        Ok(tree)
    }

    /// The superblock slot a commit of `generation` writes.
    fn superblock_slot(&self, generation: u64) -> u64 {
        self.area_start + generation % SUPERBLOCK_SLOTS
    }

    /// The newest superblock slot that checks (`None`: both empty). A slot
    /// that is neither empty nor valid is a superblock write cut short, or
    /// damage: the other slot is used if it checks; both bad is an error.
    fn newest_superblock(&self, store: &mut dyn NodeStore) -> Result<Option<Superblock>, Error> {
        let mut newest: Option<Superblock> = None;
        let mut damaged = None;
        for slot in 0..SUPERBLOCK_SLOTS {
            let location = self.area_start + slot;
            let mut node = [0u8; NODE_BYTES];
            store.read(location, &mut node)?;
            if node.iter().all(|&b| b == 0) {
                continue;
            }
            if let Err(e) = check_node(&node, MAGIC_SUPER, location) {
                damaged = Some(e);
                continue;
            }
            let generation = le64(&node, 8);
            if self.superblock_slot(generation) != location {
                return Err(corrupt(location, "a superblock of another slot's generation"));
            }
            if newest.as_ref().is_none_or(|n| generation > le64(&n.node, 8)) {
                newest = Some(Superblock { location, node });
            }
        }
        match (newest, damaged) {
            (None, Some(e)) => Err(e),
            (newest, _) => Ok(newest),
        }
    }

    /// The root a superblock names, checked against this tree's geometry.
    fn root_of(&self, superblock: &Superblock) -> Result<Child, Error> {
        let node = &superblock.node;
        let (location, level, height) = (le64(node, 32), le32(node, 40) as usize, le32(node, 44) as usize);
        if height != self.level_nodes.len() || level + 1 != height {
            return Err(corrupt(superblock.location, "a tree of another size (height differs)"));
        }
        Ok(Child { location, level, generation: le64(node, 48) })
    }

    /// Metadata blocks a tree over `blocks` data blocks needs: two copies of
    /// every node (the live tree and the one being committed) and the two
    /// superblock slots.
    pub fn area_blocks_for(blocks: u64) -> u64 {
        let mut nodes = 0;
        let mut level = blocks.div_ceil(LEAF_ENTRIES);
        loop {
            nodes += level;
            if level <= 1 {
                break;
            }
            level = level.div_ceil(FANOUT);
        }
        2 * nodes + SUPERBLOCK_SLOTS
    }

    /// Records the checksum of data block `block`.
    pub fn update(&mut self, block: u64, csum: u32) {
        assert!(block < self.blocks, "block {block} outside a tree of {} blocks", self.blocks);
        self.csums[block as usize] = csum;
        self.present[(block / 64) as usize] |= 1 << (block % 64);
        self.mark_dirty(block / LEAF_ENTRIES);
    }

    /// Forgets the checksum of data block `block` (its data is no longer
    /// known good); a no-op for a block with none.
    pub fn remove(&mut self, block: u64) {
        assert!(block < self.blocks, "block {block} outside a tree of {} blocks", self.blocks);
        let (word, bit) = ((block / 64) as usize, 1u64 << (block % 64));
        if self.present[word] & bit != 0 {
            self.present[word] &= !bit;
            self.mark_dirty(block / LEAF_ENTRIES);
        }
    }

    fn mark_dirty(&mut self, leaf: u64) {
        if leaf != self.last_marked {
            self.dirty_leaves.insert(leaf);
            self.last_marked = leaf;
        }
    }

    /// Data blocks the tree covers.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The checksum of `block`, if one was recorded.
    pub fn get(&self, block: u64) -> Option<u32> {
        (block < self.blocks && self.present[(block / 64) as usize] & (1 << (block % 64)) != 0)
            .then(|| self.csums[block as usize])
    }

    /// The blocks in `range` that have a checksum, in order: a word of the
    /// presence bits at a time, so that forgetting the blocks of a large
    /// free costs what it forgets rather than what it spans.
    pub fn present_in(&self, range: std::ops::Range<u64>) -> impl Iterator<Item = u64> + '_ {
        let (start, end) = (range.start, range.end.min(self.blocks));
        let words = if start < end { start / 64..end.div_ceil(64) } else { 0..0 };
        words.flat_map(move |w| {
            let mut bits = self.present[w as usize];
            // Bits below `start` and from `end` on are not asked for.
            if w == start / 64 {
                bits &= u64::MAX << (start % 64);
            }
            if w == (end - 1) / 64 && end % 64 != 0 {
                bits &= u64::MAX >> (64 - end % 64);
            }
            std::iter::from_fn(move || {
                (bits != 0).then(|| {
                    let bit = u64::from(bits.trailing_zeros());
                    bits &= bits - 1;
                    w * 64 + bit
                })
            })
        })
    }

    /// Leaves changed since the last commit.
    pub fn dirty_leaves(&self) -> u64 {
        self.dirty_leaves.len() as u64
    }

    /// Commits: writes every dirty leaf and its ancestors to new locations,
    /// then the superblock; frees the old locations afterwards.
    ///
    /// A failed commit changes nothing but the free parts of the area: the
    /// medium's superblock still names the tree before it, so the nodes it
    /// wrote go back to the free list, every node keeps its old location
    /// and every leaf it did not finish stays dirty — a retry writes them
    /// all. (Dropping them would make the retry a no-op that reports
    /// success while the medium keeps the old checksums.)
    ///
    /// # Errors
    /// The store's errors.
    pub fn commit(&mut self, store: &mut dyn NodeStore) -> Result<CommitStats, Error> {
        let dirty = std::mem::take(&mut self.dirty_leaves);
        self.last_marked = u64::MAX;
        self.generation += 1;
        let mut moved = Vec::new();
        match self.write_nodes(store, &dirty, &mut moved) {
            Ok(stats) => {
                if stats.nodes == 0 && self.generation > 1 {
                    self.generation -= 1; // nothing changed: no new generation
                }
                self.free_locations.extend(moved.into_iter().map(|(_, _, old, _)| old).filter(|&l| l != u64::MAX));
                Ok(stats)
            }
            Err(e) => {
                for (level, index, old, old_generation) in moved.into_iter().rev() {
                    let written = std::mem::replace(&mut self.locations[level][index as usize], old);
                    self.written_in[level][index as usize] = old_generation;
                    self.free_locations.push(written);
                }
                self.dirty_leaves.extend(dirty);
                self.generation -= 1;
                Err(e)
            }
        }
    }

    /// The writes of one commit: the dirty leaves, their ancestors level by
    /// level, a flush, the superblock into this generation's slot (on the
    /// first commit even when empty, so the area opens as a tree), a flush.
    /// Each node moved is recorded in `moved` as (level, index, old
    /// location, old generation) before anything can fail.
    fn write_nodes(
        &mut self,
        store: &mut dyn NodeStore,
        dirty_leaves: &BTreeSet<u64>,
        moved: &mut Vec<(usize, u64, u64, u64)>,
    ) -> Result<CommitStats, Error> {
        let mut stats = CommitStats::default();
        let mut dirty = dirty_leaves.clone();
        let mut node = [0u8; NODE_BYTES];
        for level in 0..self.level_nodes.len() {
            for &index in &dirty {
                if level == 0 {
                    self.fill_leaf(index, &mut node);
                } else {
                    self.fill_internal(level, index, &mut node);
                }
                let location = self.free_locations.pop().expect("area sized for two copies of the tree");
                let old = std::mem::replace(&mut self.locations[level][index as usize], location);
                let old_generation = std::mem::replace(&mut self.written_in[level][index as usize], self.generation);
                moved.push((level, index, old, old_generation));
                store.write(location, &node)?;
                stats.nodes += 1;
            }
            dirty = dirty.iter().map(|i| i / FANOUT).collect();
        }
        if stats.nodes > 0 || self.generation == 1 {
            // The nodes are durable before a superblock names them, and the
            // superblock before the commit counts as done.
            store.flush()?;
            self.fill_superblock(&mut node);
            store.write(self.superblock_slot(self.generation), &node)?;
            store.flush()?;
            stats.bytes = (stats.nodes + 1) * NODE_BYTES as u64;
        }
        Ok(stats)
    }

    fn header(&self, node: &mut [u8; NODE_BYTES], magic: &[u8; 4], first_block: u64, level: u32, items: u32) {
        node.fill(0);
        node[0..4].copy_from_slice(magic);
        node[8..16].copy_from_slice(&self.generation.to_le_bytes());
        node[16..24].copy_from_slice(&first_block.to_le_bytes());
        node[24..28].copy_from_slice(&level.to_le_bytes());
        node[28..32].copy_from_slice(&items.to_le_bytes());
    }

    fn seal(node: &mut [u8; NODE_BYTES]) {
        let crc = crate::crc32c::checksum(&node[8..]);
        node[4..8].copy_from_slice(&crc.to_le_bytes());
    }

    fn fill_leaf(&self, leaf: u64, node: &mut [u8; NODE_BYTES]) {
        let first = leaf * LEAF_ENTRIES;
        let end = (first + LEAF_ENTRIES).min(self.blocks);
        self.header(node, MAGIC_LEAF, first, 0, (end - first) as u32);
        for (i, block) in (first..end).enumerate() {
            if let Some(csum) = self.get(block) {
                node[HEADER_BYTES + i / 8] |= 1 << (i % 8);
                let at = HEADER_BYTES + BITMAP_BYTES + 4 * i;
                node[at..at + 4].copy_from_slice(&csum.to_le_bytes());
            }
        }
        Self::seal(node);
    }

    fn fill_internal(&self, level: usize, index: u64, node: &mut [u8; NODE_BYTES]) {
        let children = (index * FANOUT)..((index + 1) * FANOUT).min(self.level_nodes[level - 1]);
        let span = LEAF_ENTRIES * FANOUT.pow(level as u32 - 1);
        self.header(node, MAGIC_NODE, index * FANOUT * span, level as u32, children.clone().count() as u32);
        for (i, child) in children.enumerate() {
            let at = HEADER_BYTES + CHILD_BYTES * i;
            node[at..at + 8].copy_from_slice(&(child * span).to_le_bytes());
            node[at + 8..at + 16].copy_from_slice(&self.locations[level - 1][child as usize].to_le_bytes());
            node[at + 16..at + 24].copy_from_slice(&self.written_in[level - 1][child as usize].to_le_bytes());
        }
        Self::seal(node);
    }

    fn fill_superblock(&self, node: &mut [u8; NODE_BYTES]) {
        let top = self.level_nodes.len() - 1;
        self.header(node, MAGIC_SUPER, 0, top as u32, 1);
        node[32..40].copy_from_slice(&self.locations[top][0].to_le_bytes());
        node[40..44].copy_from_slice(&(top as u32).to_le_bytes());
        node[44..48].copy_from_slice(&(self.level_nodes.len() as u32).to_le_bytes());
        node[48..56].copy_from_slice(&self.written_in[top][0].to_le_bytes());
        Self::seal(node);
    }

    /// Looks `block` up in the tree as committed on the medium: the newest
    /// superblock slot, then one node per level, each checked (magic, CRC,
    /// level, the generation its parent recorded) on the way.
    ///
    /// # Errors
    /// [`Error::BadBlockRange`] for a block outside the tree;
    /// [`Error::Corrupt`] naming the node; the store's errors.
    pub fn lookup_persisted(&self, store: &mut dyn NodeStore, block: u64) -> Result<Option<u32>, Error> {
        if block >= self.blocks {
            return Err(Error::BadBlockRange { start: block, len: 1, problem: "is outside the checksum tree" });
        }
        let Some(superblock) = self.newest_superblock(store)? else {
            return Ok(None);
        };
        let mut child = self.root_of(&superblock)?;
        let mut node = [0u8; NODE_BYTES];
        loop {
            let location = child.location;
            if location == u64::MAX {
                return Ok(None);
            }
            store.read(location, &mut node)?;
            check_child(&node, child)?;
            let items = u64::from(le32(&node, 28));
            let first = le64(&node, 16);
            if child.level == 0 {
                let i = block
                    .checked_sub(first)
                    .filter(|&i| i < items.min(LEAF_ENTRIES))
                    .ok_or_else(|| corrupt(location, "leaf does not cover the block"))?
                    as usize;
                if node[HEADER_BYTES + i / 8] & (1 << (i % 8)) == 0 {
                    return Ok(None);
                }
                return Ok(Some(le32(&node, HEADER_BYTES + BITMAP_BYTES + 4 * i)));
            }
            let span = LEAF_ENTRIES * FANOUT.pow(child.level as u32 - 1);
            let i = (block.checked_sub(first).ok_or_else(|| corrupt(location, "node does not cover the block"))? / span)
                .min(items.min(FANOUT).saturating_sub(1)) as usize;
            let at = HEADER_BYTES + CHILD_BYTES * i;
            child = Child { location: le64(&node, at + 8), level: child.level - 1, generation: le64(&node, at + 16) };
        }
    }
}

/// A superblock slot's bytes, checked, and where they were read.
struct Superblock {
    location: u64,
    node: [u8; NODE_BYTES],
}

/// A node as its parent (or the superblock) names it.
#[derive(Clone, Copy)]
struct Child {
    location: u64,
    level: usize,
    generation: u64,
}

/// Checks a node read at `child.location`: magic and CRC, the level and
/// generation its parent recorded.
fn check_child(node: &[u8; NODE_BYTES], child: Child) -> Result<(), Error> {
    check_node(node, if child.level == 0 { MAGIC_LEAF } else { MAGIC_NODE }, child.location)?;
    if le32(node, 24) as usize != child.level {
        return Err(corrupt(child.location, "node level is not its depth in the tree"));
    }
    let generation = le64(node, 8);
    if generation != child.generation {
        return Err(corrupt(
            child.location,
            &format!("generation {generation}, its parent recorded {} (a stale node)", child.generation),
        ));
    }
    Ok(())
}

fn corrupt(location: u64, detail: &str) -> Error {
    Error::Corrupt { location: format!("checksum-tree node at {location}"), detail: detail.to_string() }
}

fn check_node(node: &[u8; NODE_BYTES], magic: &[u8; 4], location: u64) -> Result<(), Error> {
    if &node[0..4] != magic {
        return Err(corrupt(location, "wrong magic"));
    }
    let stored = u32::from_le_bytes(node[4..8].try_into().expect("4 bytes"));
    let actual = crate::crc32c::checksum(&node[8..]);
    if stored != actual {
        return Err(corrupt(location, &format!("node CRC32C {stored:#010x}, computed {actual:#010x}")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Default)]
    struct Mem(HashMap<u64, [u8; NODE_BYTES]>);

    impl NodeStore for Mem {
        fn write(&mut self, location: u64, node: &[u8; NODE_BYTES]) -> Result<(), Error> {
            self.0.insert(location, *node);
            Ok(())
        }
        fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), Error> {
            *node = self.0.get(&location).copied().unwrap_or([0; NODE_BYTES]);
            Ok(())
        }
    }

    proptest! {
        /// Whatever was committed, and only that, comes back from `open`;
        /// commits after it keep working (the free locations are right).
        #[test]
        fn open_returns_what_was_committed(
            blocks in 1u64..400_000,
            rounds in prop::collection::vec(prop::collection::vec((any::<u64>(), any::<u32>(), any::<bool>()), 0..40), 1..4),
        ) {
            let area = ChecksumTree::area_blocks_for(blocks);
            let mut store = Mem::default();
            let mut tree = ChecksumTree::new(blocks, 10, area).unwrap();
            let mut model = HashMap::new();
            for round in &rounds {
                for &(b, csum, keep) in round {
                    let b = b % blocks;
                    if keep { tree.update(b, csum); model.insert(b, csum); } else { tree.remove(b); model.remove(&b); }
                }
                tree.commit(&mut store).unwrap();
                let mut opened = ChecksumTree::open(&mut store, blocks, 10, area).unwrap();
                for (&b, &csum) in &model {
                    prop_assert_eq!(opened.get(b), Some(csum));
                }
                let present = (0..blocks.min(5000)).filter(|&b| opened.get(b).is_some()).count();
                prop_assert_eq!(present, model.keys().filter(|&&b| b < 5000).count());
                opened.update(blocks - 1, 7);
                opened.commit(&mut store).unwrap();
                tree = ChecksumTree::open(&mut store, blocks, 10, area).unwrap();
                model.insert(blocks - 1, 7);
                prop_assert_eq!(tree.get(blocks - 1), Some(7));
            }
        }
    }

    proptest! {
        /// `present_in` lists exactly the blocks of its range that `get`
        /// finds a checksum for: ranges empty, of one block, across and
        /// inside words, past the end.
        #[test]
        fn present_in_is_get_over_the_range(
            blocks in 1u64..3000,
            set in prop::collection::vec(any::<u64>(), 0..300),
            dense in any::<bool>(),
            start in any::<u64>(),
            len in 0u64..3100,
        ) {
            let mut tree = ChecksumTree::new(blocks, 10, ChecksumTree::area_blocks_for(blocks)).unwrap();
            if dense {
                (0..blocks).for_each(|b| tree.update(b, b as u32));
            }
            for b in set {
                if dense { tree.remove(b % blocks) } else { tree.update(b % blocks, 1) }
            }
            let start = start % (blocks + 70);
            let want: Vec<u64> = (start..start + len).filter(|&b| tree.get(b).is_some()).collect();
            prop_assert_eq!(tree.present_in(start..start + len).collect::<Vec<_>>(), want);
        }
    }

    /// A store whose writes fail from the `fail_at`-th on (counting from 0)
    /// while `failing`; the nodes written before the failure stay written.
    struct Failing {
        inner: Mem,
        writes: u64,
        fail_at: u64,
        failing: bool,
    }

    impl NodeStore for Failing {
        fn write(&mut self, location: u64, node: &[u8; NODE_BYTES]) -> Result<(), Error> {
            self.writes += 1;
            if self.failing && self.writes > self.fail_at {
                return Err(Error::Io {
                    context: "test store".into(),
                    source: std::io::Error::from_raw_os_error(libc::EIO),
                });
            }
            self.inner.write(location, node)
        }
        fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), Error> {
            self.inner.read(location, node)
        }
    }

    proptest! {
        /// A commit that fails part-way (after any number of its writes)
        /// loses nothing: the medium still opens as the last good commit,
        /// and the retry writes every change — including the leaves the
        /// failed attempt had already written. Many failures in a row leak
        /// no location (the area holds exactly two copies of the tree).
        #[test]
        fn a_failed_commit_is_retried_whole_and_leaks_no_location(
            blocks in 1u64..500_000,
            first in prop::collection::vec((any::<u64>(), any::<u32>()), 1..30),
            second in prop::collection::vec((any::<u64>(), any::<u32>()), 1..30),
            fail_at in 0u64..8,
            failures in 1usize..40,
        ) {
            let area = ChecksumTree::area_blocks_for(blocks);
            let mut store = Failing { inner: Mem::default(), writes: 0, fail_at: 0, failing: false };
            let mut tree = ChecksumTree::new(blocks, 3, area).unwrap();
            let mut model = HashMap::new();
            for &(b, csum) in &first {
                tree.update(b % blocks, csum);
                model.insert(b % blocks, csum);
            }
            tree.commit(&mut store).unwrap();
            let committed = model.clone();
            for &(b, csum) in &second {
                tree.update(b % blocks, csum);
                model.insert(b % blocks, csum);
            }
            // The commit writes at least each dirty leaf, a node per level
            // above and the superblock: fail at one of those writes.
            let writes_at_least = tree.dirty_leaves() + tree.locations.len() as u64;
            for _ in 0..failures {
                store.writes = 0;
                store.fail_at = fail_at % writes_at_least;
                store.failing = true;
                prop_assert!(tree.commit(&mut store).is_err());
                // The medium still holds the first commit, exactly.
                let opened = ChecksumTree::open(&mut store, blocks, 3, area).unwrap();
                for (&b, &csum) in &committed {
                    prop_assert_eq!(opened.get(b), Some(csum));
                }
            }
            store.failing = false;
            let stats = tree.commit(&mut store).unwrap();
            prop_assert!(stats.nodes > 0, "the retry wrote nothing");
            let opened = ChecksumTree::open(&mut store, blocks, 3, area).unwrap();
            for (&b, &csum) in &model {
                prop_assert_eq!(opened.get(b), Some(csum));
            }
            prop_assert_eq!(opened.generation, 2);
            prop_assert_eq!(tree.free_locations.len() as u64 + SUPERBLOCK_SLOTS, area - tree.locations.iter().flatten().filter(|&&l| l != u64::MAX).count() as u64);
        }
    }

    /// One store operation of a commit, as a power cut sees it.
    #[derive(Clone)]
    enum Op {
        Write(u64, Box<[u8; NODE_BYTES]>),
        Flush,
    }

    /// Records a commit's operations over a medium it does not change.
    struct Recorder<'a> {
        medium: &'a Mem,
        ops: Vec<Op>,
    }

    impl NodeStore for Recorder<'_> {
        fn write(&mut self, location: u64, node: &[u8; NODE_BYTES]) -> Result<(), Error> {
            self.ops.push(Op::Write(location, Box::new(*node)));
            Ok(())
        }
        fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), Error> {
            *node = self.medium.0.get(&location).copied().unwrap_or([0; NODE_BYTES]);
            Ok(())
        }
        fn flush(&mut self) -> Result<(), Error> {
            self.ops.push(Op::Flush);
            Ok(())
        }
    }

    /// The medium after a power cut once the first `done` operations were
    /// issued: everything before their last flush, then any of the writes
    /// after it (`keep` picks them), each possibly torn — only some of its
    /// 512-byte sectors (`torn` picks them) reached the medium.
    fn after_cut(before: &Mem, ops: &[Op], done: usize, keep: u64, torn: u64) -> Mem {
        let mut medium = before.clone();
        let flushed = ops[..done].iter().rposition(|op| matches!(op, Op::Flush)).map_or(0, |i| i + 1);
        for op in &ops[..flushed] {
            if let Op::Write(location, node) = op {
                medium.0.insert(*location, **node);
            }
        }
        for (i, op) in ops[flushed..done].iter().enumerate() {
            let Op::Write(location, node) = op else { continue };
            if keep >> (i % 64) & 1 == 0 {
                continue;
            }
            let mut now = medium.0.get(location).copied().unwrap_or([0; NODE_BYTES]);
            for sector in 0..NODE_BYTES / 512 {
                if torn >> ((i * 8 + sector) % 64) & 1 == 1 {
                    now[sector * 512..][..512].copy_from_slice(&node[sector * 512..][..512]);
                }
            }
            medium.0.insert(*location, now);
        }
        medium
    }

    proptest! {
        /// A power cut at any point of a commit — after any prefix of its
        /// writes and flushes, with any of the unflushed writes persisted
        /// and any of their sectors torn — leaves a medium that opens, as
        /// exactly the commit before or exactly this one (this one once its
        /// last flush returned), never a mix and never an error; and the
        /// opened tree commits on. Three commits in a row, so the superblock
        /// slots alternate and freed nodes are reused.
        #[test]
        fn a_power_cut_anywhere_in_a_commit_opens_as_one_commit_or_the_other(
            blocks in 1u64..200_000,
            commits in prop::collection::vec(prop::collection::vec((any::<u64>(), any::<u32>(), any::<bool>()), 1..12), 3),
            cuts in prop::collection::vec((any::<usize>(), any::<u64>(), any::<u64>()), 6),
        ) {
            let area = ChecksumTree::area_blocks_for(blocks);
            let mut medium = Mem::default();
            let mut tree = ChecksumTree::new(blocks, 5, area).unwrap();
            let mut model: HashMap<u64, u32> = HashMap::new();
            for changes in &commits {
                let before = model.clone();
                for &(b, csum, keep) in changes {
                    let b = b % blocks;
                    if keep { tree.update(b, csum); model.insert(b, csum); } else { tree.remove(b); model.remove(&b); }
                }
                let mut recorder = Recorder { medium: &medium, ops: Vec::new() };
                tree.commit(&mut recorder).unwrap();
                let ops = recorder.ops;
                let last_flush = ops.iter().rposition(|op| matches!(op, Op::Flush));
                let mut points: Vec<(usize, u64, u64)> = cuts.iter().map(|&(d, k, t)| (d % (ops.len() + 1), k, t)).collect();
                // Every prefix at least once, all unflushed writes whole.
                points.extend((0..=ops.len()).map(|d| (d, !0, !0)));
                for (done, keep, torn) in points {
                    let mut cut = after_cut(&medium, &ops, done, keep, torn);
                    let opened = ChecksumTree::open(&mut cut, blocks, 5, area);
                    let opened = match opened {
                        Ok(t) => t,
                        Err(e) => return Err(TestCaseError::fail(format!("cut after {done} of {} ops: {e}", ops.len()))),
                    };
                    let matches = |m: &HashMap<u64, u32>| {
                        m.iter().all(|(&b, &c)| opened.get(b) == Some(c))
                            && (0..blocks.min(3000)).filter(|&b| opened.get(b).is_some()).count()
                                == m.keys().filter(|&&b| b < 3000).count()
                    };
                    let (old, new) = (matches(&before), matches(&model));
                    prop_assert!(old || new, "cut after {} of {} ops opens as neither commit", done, ops.len());
                    if last_flush.is_some_and(|f| done > f) {
                        prop_assert!(new, "cut after the last flush lost the commit");
                    }
                    // The opened tree commits on over the cut medium.
                    let mut opened = opened;
                    opened.update(blocks - 1, 0xABCD);
                    opened.commit(&mut cut).unwrap();
                    let again = ChecksumTree::open(&mut cut, blocks, 5, area).unwrap();
                    prop_assert_eq!(again.get(blocks - 1), Some(0xABCD));
                }
                medium = after_cut(&medium, &ops, ops.len(), !0, !0);
            }
        }
    }

    #[test]
    fn a_stale_node_that_checks_is_refused_by_its_generation() {
        // Commit twice; put the first commit's copy of the leaf where the
        // second commit's leaf is: magic, CRC, level and place all check,
        // only the generation the parent recorded tells it apart.
        let blocks = 5000;
        let area = ChecksumTree::area_blocks_for(blocks);
        let mut store = Mem::default();
        let mut tree = ChecksumTree::new(blocks, 0, area).unwrap();
        tree.update(17, 1);
        tree.commit(&mut store).unwrap();
        let first = store.0[&tree.locations[0][0]];
        tree.update(17, 2);
        tree.commit(&mut store).unwrap();
        store.0.insert(tree.locations[0][0], first);
        let err = ChecksumTree::open(&mut store, blocks, 0, area).unwrap_err().to_string();
        assert!(err.contains("generation 1, its parent recorded 2"), "{err}");
        let err = tree.lookup_persisted(&mut store, 17).unwrap_err().to_string();
        assert!(err.contains("stale node"), "{err}");
    }

    #[test]
    fn a_torn_superblock_falls_back_to_the_other_slot_and_two_are_an_error() {
        let blocks = 3000;
        let area = ChecksumTree::area_blocks_for(blocks);
        let mut store = Mem::default();
        let mut tree = ChecksumTree::new(blocks, 0, area).unwrap();
        tree.update(5, 50);
        tree.commit(&mut store).unwrap(); // generation 1: slot 1
        tree.update(5, 51);
        tree.commit(&mut store).unwrap(); // generation 2: slot 0
        assert_eq!(ChecksumTree::open(&mut store, blocks, 0, area).unwrap().get(5), Some(51));
        store.0.get_mut(&0).unwrap()[1000] ^= 1;
        let opened = ChecksumTree::open(&mut store, blocks, 0, area).unwrap();
        assert_eq!((opened.get(5), opened.generation), (Some(50), 1), "the commit before");
        assert_eq!(tree.lookup_persisted(&mut store, 5).unwrap(), Some(50));
        store.0.get_mut(&1).unwrap()[1000] ^= 1;
        let err = ChecksumTree::open(&mut store, blocks, 0, area).unwrap_err().to_string();
        assert!(err.contains("CRC32C"), "{err}");
    }

    #[test]
    fn the_area_holds_exactly_two_copies_of_the_tree_and_the_slots() {
        // Leaves of 960, nodes of 169 children: (blocks, nodes per copy).
        for (blocks, nodes) in [(1, 1), (960, 1), (961, 3), (960 * 169, 170), (960 * 169 + 1, 173)] {
            assert_eq!(ChecksumTree::area_blocks_for(blocks), 2 * nodes + SUPERBLOCK_SLOTS, "{blocks} blocks");
        }
    }

    #[test]
    fn forgetting_a_block_without_a_checksum_dirties_nothing() {
        let mut tree = ChecksumTree::new(5000, 0, ChecksumTree::area_blocks_for(5000)).unwrap();
        tree.update(3, 1);
        tree.commit(&mut Mem::default()).unwrap();
        tree.remove(4000);
        assert_eq!(tree.dirty_leaves(), 0);
        tree.remove(3);
        assert_eq!((tree.dirty_leaves(), tree.get(3)), (1, None));
        // Outside the tree: no checksum, no panic.
        assert_eq!(tree.get(5000), None);
        assert_eq!(ChecksumTree::new(64, 0, 4).unwrap().get(64), None);
    }

    #[test]
    fn a_node_that_checks_but_is_out_of_its_place_is_refused() {
        // Two full leaves; the second one claims the first one's blocks,
        // re-sealed so that magic, CRC, level, generation and item count
        // all check.
        let blocks = 2 * LEAF_ENTRIES;
        let area = ChecksumTree::area_blocks_for(blocks);
        let mut store = Mem::default();
        let mut tree = ChecksumTree::new(blocks, 0, area).unwrap();
        tree.update(5, 1);
        tree.update(LEAF_ENTRIES + 5, 2);
        tree.commit(&mut store).unwrap();
        let second = tree.locations[0][1];
        let node = store.0.get_mut(&second).unwrap();
        node[16..24].copy_from_slice(&0u64.to_le_bytes());
        ChecksumTree::seal(node);
        let err = ChecksumTree::open(&mut store, blocks, 0, area).unwrap_err().to_string();
        assert!(err.contains("not its place in the tree"), "{err}");
    }

    /// Counts the writes that reach a store in memory.
    #[derive(Default)]
    struct Counting {
        inner: Mem,
        writes: u64,
    }

    impl NodeStore for Counting {
        fn write(&mut self, location: u64, node: &[u8; NODE_BYTES]) -> Result<(), Error> {
            self.writes += 1;
            self.inner.write(location, node)
        }
        fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), Error> {
            self.inner.read(location, node)
        }
    }

    /// Generation of the superblock in slot `slot`, if it holds one.
    fn slot_generation(store: &Counting, area_start: u64, slot: u64) -> Option<u64> {
        store.inner.0.get(&(area_start + slot)).map(|node| le64(node, 8))
    }

    #[test]
    fn empty_commits_write_nothing_and_the_slots_keep_alternating() {
        // Two levels: 2000 blocks are three leaves under a root.
        let (blocks, start) = (2000, 7);
        let mut store = Counting::default();
        let mut tree = ChecksumTree::new(blocks, start, ChecksumTree::area_blocks_for(blocks)).unwrap();
        // The first commit writes a superblock even with nothing in it.
        assert_eq!(tree.commit(&mut store).unwrap(), CommitStats { nodes: 0, bytes: NODE_BYTES as u64 });
        assert_eq!((store.writes, tree.generation), (1, 1));
        assert_eq!(slot_generation(&store, start, 1), Some(1));
        // Later empty commits write nothing and take no generation.
        assert_eq!(tree.commit(&mut store).unwrap(), CommitStats::default());
        assert_eq!((store.writes, tree.generation), (1, 1));
        tree.update(5, 1);
        tree.update(1500, 2);
        let stats = tree.commit(&mut store).unwrap();
        assert_eq!(stats, CommitStats { nodes: 3, bytes: 4 * NODE_BYTES as u64 }, "two leaves, the root");
        assert_eq!((store.writes, tree.generation), (5, 2));
        assert_eq!(tree.commit(&mut store).unwrap(), CommitStats::default());
        tree.update(6, 3);
        assert_eq!(tree.commit(&mut store).unwrap().nodes, 2, "a leaf and the root");
        // Generation 3 went to slot 1: the slot of generation 2 is untouched.
        assert_eq!((slot_generation(&store, start, 0), slot_generation(&store, start, 1)), (Some(2), Some(3)));
    }

    #[test]
    fn a_lookup_past_a_leafs_item_count_is_refused() {
        // A leaf re-sealed with fewer items than its span: the block right
        // after its last item is not in it, whatever its bitmap says.
        let blocks = LEAF_ENTRIES;
        let mut store = Mem::default();
        let mut tree = ChecksumTree::new(blocks, 0, ChecksumTree::area_blocks_for(blocks)).unwrap();
        for b in 0..20 {
            tree.update(b, 100 + b as u32);
        }
        tree.commit(&mut store).unwrap();
        let node = store.0.get_mut(&tree.locations[0][0]).unwrap();
        node[28..32].copy_from_slice(&10u32.to_le_bytes());
        ChecksumTree::seal(node);
        assert_eq!(tree.lookup_persisted(&mut store, 9).unwrap(), Some(109));
        let err = tree.lookup_persisted(&mut store, 10).unwrap_err().to_string();
        assert!(err.contains("leaf does not cover the block"), "{err}");
    }

    #[test]
    fn a_damaged_node_or_another_geometry_is_refused() {
        let mut store = Mem::default();
        let area = ChecksumTree::area_blocks_for(5000);
        assert!(ChecksumTree::open(&mut store, 5000, 0, area).unwrap().get(3).is_none(), "an empty area");
        let mut tree = ChecksumTree::new(5000, 0, area).unwrap();
        tree.update(3, 99);
        tree.commit(&mut store).unwrap();
        assert!(ChecksumTree::open(&mut store, 500_000, 0, ChecksumTree::area_blocks_for(500_000)).is_err());
        let leaf = tree.locations[0][0];
        store.0.get_mut(&leaf).unwrap()[200] ^= 1;
        let err = ChecksumTree::open(&mut store, 5000, 0, area).unwrap_err();
        assert!(err.to_string().contains(&format!("node at {leaf}")), "{err}");
    }
}

//! Files: an extent tree of checksummed leaf blocks, grown by `fallocate`
//! and shrunk by `truncate`.
//!
//! The tree has depth 1: the root index lives in the inode (here: the
//! ordered list of leaves in memory, not checksummed), and every leaf is a
//! block allocated from the volume. A leaf that fills up is split; a leaf
//! that empties is freed.

use super::extent::{Extent, Leaf, MAX_UNWRITTEN_LEN};
use super::{Phase, Probe, Volume};
use crate::{crc32c, Error};

/// One file's extent tree.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct File {
    /// Inode number.
    pub inode: u32,
    /// Inode generation.
    pub generation: u32,
    seed: u32,
    pub(super) leaves: Vec<Leaf>,
}

impl File {
    /// An empty file of a volume whose checksum seed is `volume_csum_seed`.
    pub fn new(volume_csum_seed: u32, inode: u32, generation: u32) -> Self {
        // ext4's i_csum_seed: the volume seed, then the inode number, then
        // the generation, all little-endian.
        let seed = crc32c::raw_update(volume_csum_seed, &inode.to_le_bytes());
        let seed = crc32c::raw_update(seed, &generation.to_le_bytes());
        File { inode, generation, seed, leaves: Vec::new() }
    }

    /// The per-inode checksum seed of the extent leaves.
    pub fn csum_seed(&self) -> u32 {
        self.seed
    }

    /// The leaf blocks, in logical order.
    pub fn leaves(&self) -> &[Leaf] {
        &self.leaves
    }

    /// All extents in logical order.
    pub fn extents(&self) -> impl Iterator<Item = Extent> + '_ {
        self.leaves.iter().flat_map(|leaf| (0..leaf.len()).map(move |i| leaf.get(i)))
    }

    /// Allocated data blocks.
    pub fn blocks(&self) -> u64 {
        self.extents().map(|e| u64::from(e.len)).sum()
    }

    /// The leaf that holds (or would hold) logical block `at`, and the index
    /// in it of the first extent starting above `at`.
    fn locate(&self, at: u32) -> (usize, usize) {
        let leaf = self.leaves.partition_point(|l| l.is_empty() || l.get(0).logical <= at).saturating_sub(1);
        (leaf, self.leaves.get(leaf).map_or(0, |l| l.upper_bound(at)))
    }

    /// Whether inserting into leaf `leaf` (from [`locate`](Self::locate))
    /// needs a new leaf block: there is none yet, or it is full.
    fn needs_new_leaf(&self, leaf: usize) -> bool {
        self.leaves.get(leaf).is_none_or(|l| l.len() == l.capacity())
    }

    /// The extent before position (`leaf`, `index`), if any.
    fn before(&self, leaf: usize, index: usize) -> Option<Extent> {
        match index {
            0 => leaf.checked_sub(1).and_then(|l| self.leaves[l].last()),
            i => Some(self.leaves[leaf].get(i - 1)),
        }
    }

    /// The extent at position (`leaf`, `index`) or the first after it.
    fn at_or_after(&self, leaf: usize, index: usize) -> Option<Extent> {
        let l = self.leaves.get(leaf)?;
        if index < l.len() {
            return Some(l.get(index));
        }
        self.leaves.get(leaf + 1).and_then(|next| (!next.is_empty()).then(|| next.get(0)))
    }
}

impl<P: Probe> Volume<P> {
    /// Allocates logical blocks `[logical, logical + len)` of `file` as
    /// unwritten extents, leaving already mapped blocks alone. Each new run
    /// is placed right after the physical end of the extent before it when
    /// that is free, and grows that extent when contiguous.
    ///
    /// # Errors
    /// [`Error::TooLarge`] past 2^32 logical blocks; [`AllocError::NoSpace`](super::AllocError::NoSpace) when
    /// the volume fills (what was allocated so far stays, consistently).
    pub fn fallocate(&mut self, file: &mut File, logical: u32, len: u32) -> Result<(), Error> {
        let end = u64::from(logical) + u64::from(len);
        if end > 1 << 32 {
            return Err(Error::TooLarge { what: "logical end block", value: end, max: 1 << 32 });
        }
        let mut at = u64::from(logical);
        while at < end {
            let at32 = at as u32;
            let (leaf, index) = file.locate(at32);
            let prev = file.before(leaf, index);
            if let Some(p) = prev.filter(|p| u64::from(p.logical_end()) > at) {
                at = u64::from(p.logical_end()).min(end); // already mapped
                continue;
            }
            let gap_end = file.at_or_after(leaf, index).map_or(end, |n| end.min(u64::from(n.logical)));
            let grow = prev.filter(|p| p.unwritten && p.logical_end() == at32 && p.len < MAX_UNWRITTEN_LEN);
            let goal = match prev {
                Some(p) => p.physical_end() + (at - u64::from(p.logical_end())),
                None => self.inode_goal(file.inode),
            };
            let room = grow.map_or(MAX_UNWRITTEN_LEN, |p| MAX_UNWRITTEN_LEN - p.len);
            // When a new extent certainly needs a new leaf, the leaf goes
            // first, at the goal, and the data right after it: placed after
            // the data it would sit where the next chunk wants to continue.
            let leaf_block = match grow.is_none() && file.needs_new_leaf(leaf) {
                true => Some(self.allocate(goal, 1)?.start),
                false => None,
            };
            let goal = leaf_block.map_or(goal, |b| b + 1);
            let run = match self.allocate(goal, room.min((gap_end - at) as u32)) {
                Ok(run) => run,
                Err(e) => {
                    if let Some(block) = leaf_block {
                        self.free(block, 1).expect("leaf block was just allocated");
                    }
                    return Err(e);
                }
            };
            self.probe.enter(Phase::Extent);
            match grow.filter(|p| p.physical_end() == run.start) {
                Some(p) => {
                    let (l, i) =
                        if index == 0 { (leaf - 1, file.leaves[leaf - 1].len() - 1) } else { (leaf, index - 1) };
                    let grown = Extent { len: p.len + run.len, ..p };
                    file.leaves[l].set(i, grown, self.strategy.leaf_csum, file.seed, &mut self.probe);
                }
                None => {
                    let extent = Extent { logical: at32, len: run.len, physical: run.start, unwritten: true };
                    if let Err(e) = self.insert_extent(file, leaf, index, extent, leaf_block) {
                        self.free(run.start, u64::from(run.len)).expect("run was just allocated");
                        return Err(e);
                    }
                }
            }
            self.probe.enter(Phase::Other);
            at += u64::from(run.len);
        }
        Ok(())
    }

    /// Where a file's first block goes: the start of the group its inode
    /// would live in (inodes spread over the groups).
    fn inode_goal(&self, inode: u32) -> u64 {
        self.geometry.group_start(u64::from(inode) % self.geometry.groups())
    }

    /// Inserts `extent` at position (`leaf`, `index`), splitting a full leaf
    /// or adding the first one; a new leaf goes in `leaf_block` if given.
    fn insert_extent(
        &mut self,
        file: &mut File,
        leaf: usize,
        index: usize,
        extent: Extent,
        leaf_block: Option<u64>,
    ) -> Result<(), Error> {
        let mode = self.strategy.leaf_csum;
        let block_size = self.geometry.block_size;
        if !file.needs_new_leaf(leaf) {
            debug_assert!(leaf_block.is_none());
            file.leaves[leaf].insert(index, extent, mode, file.seed, &mut self.probe);
            return Ok(());
        }
        let block = match leaf_block {
            Some(block) => block,
            None => self.allocate(extent.physical_end(), 1)?.start,
        };
        if file.leaves.is_empty() {
            file.leaves.push(Leaf::new(block, block_size, file.generation, file.seed, &[extent]));
            return Ok(());
        }
        // Full: the entries from `index` on move to a new leaf placed after
        // this one and the extent is appended here; on an append at the end
        // the new leaf holds just the extent.
        let target = &file.leaves[leaf];
        let new_leaf = if index == target.len() {
            Leaf::new(block, block_size, file.generation, file.seed, &[extent])
        } else {
            let moved: Vec<Extent> = (index..target.len()).map(|i| target.get(i)).collect();
            let new_leaf = Leaf::new(block, block_size, file.generation, file.seed, &moved);
            file.leaves[leaf].truncate(index, mode, file.seed, &mut self.probe);
            file.leaves[leaf].insert(index, extent, mode, file.seed, &mut self.probe);
            new_leaf
        };
        file.leaves.insert(leaf + 1, new_leaf);
        Ok(())
    }

    /// Frees every block of `file` at logical `new_end` and beyond, and the
    /// leaves that empty. Nothing changes unless every block to free is
    /// allocated and owned once.
    ///
    /// # Errors
    /// [`Error::BadBlockRange`] if the file maps blocks the volume does not
    /// have allocated, or maps a block twice (a file of another volume, or a
    /// corrupt one).
    pub fn truncate(&mut self, file: &mut File, new_end: u32) -> Result<(), Error> {
        let mut doomed = Vec::new();
        for leaf in file.leaves.iter().rev() {
            let mut emptied = true;
            for e in (0..leaf.len()).rev().map(|i| leaf.get(i)) {
                if e.logical >= new_end {
                    doomed.push((e.physical, u64::from(e.len)));
                } else {
                    if e.logical_end() > new_end {
                        let cut = e.logical_end() - new_end;
                        doomed.push((e.physical + u64::from(e.len - cut), u64::from(cut)));
                    }
                    emptied = false;
                    break;
                }
            }
            if !emptied {
                break;
            }
            doomed.push((leaf.block, 1));
        }
        doomed.sort_unstable();
        for (i, &(start, len)) in doomed.iter().enumerate() {
            self.freeable_pieces(start, len)?;
            if doomed.get(i + 1).is_some_and(|&(next, _)| next < start + len) {
                return Err(Error::BadBlockRange { start, len, problem: "is mapped twice by the file" });
            }
        }
        let mode = self.strategy.leaf_csum;
        for (start, len) in doomed {
            self.free(start, len).expect("checked above");
        }
        while let Some(last) = file.leaves.len().checked_sub(1) {
            let leaf = &mut file.leaves[last];
            let keep = if new_end == 0 { 0 } else { leaf.upper_bound(new_end - 1) };
            leaf.truncate(keep, mode, file.seed, &mut self.probe);
            if let Some(e) = leaf.last().filter(|e| e.logical_end() > new_end) {
                let len = e.len - (e.logical_end() - new_end);
                leaf.set(keep - 1, Extent { len, ..e }, mode, file.seed, &mut self.probe);
            }
            if !leaf.is_empty() {
                break;
            }
            file.leaves.pop();
        }
        self.probe.enter(Phase::Other);
        Ok(())
    }
}

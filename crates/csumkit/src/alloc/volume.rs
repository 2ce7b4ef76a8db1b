//! The volume: block groups, allocation near a goal, freeing, and the
//! checksum upkeep of every change.
//!
//! Allocation policy (identical for every [`Strategy`], which is what makes
//! their media byte-identical):
//! 1. if the goal block is free, the free run starting at the goal;
//! 2. otherwise the first free extent at least `want` blocks long, searching
//!    from the goal to the end of its group, then the following groups
//!    (wrapping), then the goal group before the goal;
//! 3. otherwise the first free extent in that order, however short.
//!
//! A run never crosses a group boundary and is at most `want` blocks.

use super::bitmap::Bitmap;
use super::descriptor::{Descriptor, BG_BLOCK_UNINIT};
use super::free_space::FreeSpace;
use super::{BitmapCsum, Geometry, NoProbe, Phase, Probe, Search, Strategy};
use crate::alloc::AllocError;
use crate::{crc32c, Error};

/// A run of allocated blocks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Run {
    /// First block.
    pub start: u64,
    /// Number of blocks (at least 1).
    pub len: u32,
}

/// One block group in memory.
#[derive(Clone, PartialEq, Eq, Debug)]
pub(super) struct Group {
    pub bitmap: Bitmap,
    pub desc: Descriptor,
    pub tree: Option<FreeSpace>,
}

/// A volume of block groups. `P` receives phase changes (see [`Probe`]).
#[derive(Clone, Debug)]
pub struct Volume<P: Probe = NoProbe> {
    pub(super) geometry: Geometry,
    pub(super) strategy: Strategy,
    pub(super) uuid: [u8; 16],
    pub(super) csum_seed: u32,
    pub(super) groups: Vec<Group>,
    pub(super) free: u64,
    pub(super) probe: P,
}

impl Volume<NoProbe> {
    /// A freshly formatted volume.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a geometry that [`Geometry::validate`] rejects.
    pub fn new(geometry: Geometry, uuid: [u8; 16], strategy: Strategy) -> Result<Self, Error> {
        Volume::with_probe(geometry, uuid, strategy, NoProbe)
    }
}

impl<P: Probe> Volume<P> {
    /// A freshly formatted volume reporting phases to `probe`.
    ///
    /// # Errors
    /// As [`Volume::new`].
    pub fn with_probe(geometry: Geometry, uuid: [u8; 16], strategy: Strategy, probe: P) -> Result<Self, Error> {
        geometry.validate()?;
        let csum_seed = csum_seed(&uuid);
        let bits = u64::from(geometry.blocks_per_group);
        let groups = (0..geometry.groups())
            .map(|g| {
                let mut bitmap = Bitmap::new(bits);
                let reserved = geometry.reserved_blocks(g);
                let len = u64::from(geometry.group_len(g));
                bitmap.flip(0, reserved);
                bitmap.flip(len, bits - len);
                let mut desc = Descriptor::new(bitmap_location(&geometry, g));
                desc.set_free_blocks((len - reserved) as u32);
                desc.set_flags(if reserved == 0 { BG_BLOCK_UNINIT } else { 0 });
                desc.set_bitmap_csum(crc32c::raw_update(csum_seed, bitmap.as_media()));
                desc.seal(csum_seed, g as u32);
                Group { bitmap, desc, tree: None }
            })
            .collect();
        Ok(Volume::assemble(geometry, uuid, strategy, groups, probe))
    }

    /// A volume over checked groups; builds the free-space trees.
    pub(super) fn assemble(
        geometry: Geometry,
        uuid: [u8; 16],
        strategy: Strategy,
        mut groups: Vec<Group>,
        probe: P,
    ) -> Self {
        let mut free = 0;
        for (g, group) in groups.iter_mut().enumerate() {
            free += u64::from(group.desc.free_blocks());
            if strategy.search == Search::FreeSpaceTree {
                let len = u64::from(geometry.group_len(g as u64));
                let runs = group.bitmap.free_runs().filter(|&(s, _)| s < len);
                group.tree = Some(FreeSpace::from_runs(runs.map(|(s, l)| (s as u32, l.min(len - s) as u32))));
            }
        }
        Volume { geometry, strategy, uuid, csum_seed: csum_seed(&uuid), groups, free, probe }
    }

    /// The geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }

    /// The strategy.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// ext4's `s_csum_seed`: raw CRC32C of the UUID, seeded with all ones.
    pub fn csum_seed(&self) -> u32 {
        self.csum_seed
    }

    /// Free blocks in the volume.
    pub fn free_blocks(&self) -> u64 {
        self.free
    }

    /// Group `group`'s descriptor (`None` past the last group).
    pub fn descriptor(&self, group: u64) -> Option<&Descriptor> {
        self.groups.get(usize::try_from(group).ok()?).map(|g| &g.desc)
    }

    /// Group `group`'s block bitmap, as on media (`None` past the last group).
    pub fn bitmap(&self, group: u64) -> Option<&[u8]> {
        self.groups.get(usize::try_from(group).ok()?).map(|g| g.bitmap.as_media())
    }

    /// Whether `block` is in use.
    ///
    /// # Panics
    /// If `block` is past the end of the volume, like slice indexing.
    pub fn is_allocated(&self, block: u64) -> bool {
        assert!(block < self.geometry.blocks_count, "block {block} of a {}-block volume", self.geometry.blocks_count);
        let bpg = u64::from(self.geometry.blocks_per_group);
        self.groups[(block / bpg) as usize].bitmap.test(block % bpg)
    }

    /// The probe.
    pub fn probe(&self) -> &P {
        &self.probe
    }

    /// The probe, mutably (to reset its counts).
    pub fn probe_mut(&mut self) -> &mut P {
        &mut self.probe
    }

    /// Allocates up to `want` contiguous blocks near `goal` (see the module
    /// documentation for the policy); a goal past the end means block 0.
    ///
    /// # Errors
    /// [`AllocError::NoSpace`](super::AllocError::NoSpace) on a full volume; [`Error::BadBlockRange`] for
    /// `want == 0`; [`Error::Corrupt`] if the free count and bitmaps disagree.
    pub fn allocate(&mut self, goal: u64, want: u32) -> Result<Run, Error> {
        if want == 0 {
            return Err(Error::BadBlockRange { start: goal, len: 0, problem: "is empty: ask for at least one block" });
        }
        if self.free == 0 {
            return Err(AllocError::NoSpace { requested: u64::from(want), free: 0 }.into());
        }
        self.probe.enter(Phase::Search);
        let goal = if goal < self.geometry.blocks_count { goal } else { 0 };
        let bpg = u64::from(self.geometry.blocks_per_group);
        let (group, start, len) = self.find(goal / bpg, (goal % bpg) as u32, want)?;
        self.mark(group, start, len, true);
        self.probe.enter(Phase::Other);
        Ok(Run { start: group * bpg + u64::from(start), len })
    }

    /// Frees `[start, start + len)`, which may span groups. Nothing changes
    /// unless the whole range is allocated, outside the fixed metadata.
    ///
    /// # Errors
    /// [`Error::BadBlockRange`] saying what is wrong with the range.
    pub fn free(&mut self, start: u64, len: u64) -> Result<(), Error> {
        for (g, s, l) in self.freeable_pieces(start, len)? {
            self.mark(g, s, l, false);
        }
        self.probe.enter(Phase::Other);
        Ok(())
    }

    /// `[start, start + len)` by group if all of it may be freed: inside the
    /// volume, clear of fixed metadata, and allocated.
    ///
    /// # Errors
    /// [`Error::BadBlockRange`] saying what is wrong with the range.
    pub(super) fn freeable_pieces(&self, start: u64, len: u64) -> Result<Vec<(u64, u32, u32)>, Error> {
        let bad = |problem| Err(Error::BadBlockRange { start, len, problem });
        if len == 0 {
            return bad("is empty");
        }
        if start.checked_add(len).is_none_or(|end| end > self.geometry.blocks_count) {
            return bad("runs past the end of the volume");
        }
        let pieces = self.group_pieces(start, len);
        for &(g, s, l) in &pieces {
            if u64::from(s) < self.geometry.reserved_blocks(g) {
                return bad("overlaps fixed filesystem metadata");
            }
            if self.groups[g as usize].bitmap.count_zeros(u64::from(s), u64::from(s + l)) != 0 {
                return bad("is not entirely allocated (double free?)");
            }
        }
        Ok(pieces)
    }

    /// `[start, start + len)` cut at group boundaries, as (group, start, len).
    pub(super) fn group_pieces(&self, start: u64, len: u64) -> Vec<(u64, u32, u32)> {
        let bpg = u64::from(self.geometry.blocks_per_group);
        let mut pieces = Vec::new();
        let (mut at, end) = (start, start + len);
        while at < end {
            let g = at / bpg;
            let piece_end = end.min((g + 1) * bpg);
            pieces.push((g, (at % bpg) as u32, (piece_end - at) as u32));
            at = piece_end;
        }
        pieces
    }

    fn find(&self, group: u64, goal: u32, want: u32) -> Result<(u64, u32, u32), Error> {
        if let Some(len) = self.run_at(group, goal, want) {
            return Ok((group, goal, len));
        }
        let groups = self.geometry.groups();
        let order = std::iter::once((group, goal, self.geometry.group_len(group)))
            .chain((1..groups).map(|i| ((group + i) % groups, 0, self.geometry.group_len((group + i) % groups))))
            .chain(std::iter::once((group, 0, goal)));
        for (g, from, to) in order.clone() {
            if let Some(start) = self.first_fit(g, from, to, want) {
                return Ok((g, start, want));
            }
        }
        for (g, from, to) in order {
            if let Some((start, len)) = self.first_free(g, from, to, want) {
                return Ok((g, start, len));
            }
        }
        Err(Error::Corrupt {
            location: "volume".into(),
            detail: format!("free count says {} free blocks but no bitmap has a free bit", self.free),
        })
    }

    /// Length (capped at `want`) of the free run starting at `at`, if free.
    fn run_at(&self, g: u64, at: u32, want: u32) -> Option<u32> {
        let group = &self.groups[g as usize];
        if let Some(tree) = &group.tree {
            return tree.containing(at).map(|(s, l)| want.min(s + l - at));
        }
        if group.bitmap.test(u64::from(at)) {
            return None;
        }
        let cap = u64::from(at + want).min(u64::from(self.geometry.group_len(g)));
        Some((group.bitmap.find_next_one(u64::from(at), cap) - u64::from(at)) as u32)
    }

    /// Start of the first free extent starting in `[from, to)` with at least
    /// `want` blocks.
    fn first_fit(&self, g: u64, from: u32, to: u32, want: u32) -> Option<u32> {
        let group = &self.groups[g as usize];
        if group.desc.free_blocks() < want {
            return None;
        }
        if let Some(tree) = &group.tree {
            return tree.first_fit_in(from, to, want).map(|(s, _)| s);
        }
        let len = u64::from(self.geometry.group_len(g));
        let mut at = u64::from(from);
        loop {
            let start = group.bitmap.find_next_zero(at, u64::from(to));
            if start >= u64::from(to) {
                return None;
            }
            let end = group.bitmap.find_next_one(start, (start + u64::from(want)).min(len));
            if end - start == u64::from(want) {
                return Some(start as u32);
            }
            at = end;
        }
    }

    /// The first free extent starting in `[from, to)`, cut to `want`.
    fn first_free(&self, g: u64, from: u32, to: u32, want: u32) -> Option<(u32, u32)> {
        let group = &self.groups[g as usize];
        if group.desc.free_blocks() == 0 {
            return None;
        }
        if let Some(tree) = &group.tree {
            return tree.first_in(from, to).map(|(s, l)| (s, l.min(want)));
        }
        let start = group.bitmap.find_next_zero(u64::from(from), u64::from(to));
        if start >= u64::from(to) {
            return None;
        }
        let cap = (start + u64::from(want)).min(u64::from(self.geometry.group_len(g)));
        Some((start as u32, (group.bitmap.find_next_one(start, cap) - start) as u32))
    }

    /// Sets (`used`) or clears group-relative blocks `[start, start + len)`,
    /// all currently in the other state, and brings the bitmap checksum, the
    /// descriptor and its checksum up to date.
    fn mark(&mut self, g: u64, start: u32, len: u32, used: bool) {
        let Volume { groups, probe, strategy, csum_seed, .. } = self;
        let group = &mut groups[g as usize];
        probe.enter(Phase::Bitmap);
        group.bitmap.flip(u64::from(start), u64::from(len));
        if let Some(tree) = &mut group.tree {
            if used {
                tree.allocate(start, len);
            } else {
                tree.free(start, len);
            }
        }
        probe.enter(Phase::Checksum);
        let csum = match strategy.bitmap_csum {
            BitmapCsum::Full => crc32c::raw_update(*csum_seed, group.bitmap.as_media()),
            BitmapCsum::FlipRange => {
                crc32c::flip_range(group.desc.bitmap_csum(), group.bitmap.bits(), u64::from(start), u64::from(len))
                    .expect("run inside the bitmap")
            }
        };
        debug_assert_eq!(csum, crc32c::raw_update(*csum_seed, group.bitmap.as_media()));
        probe.enter(Phase::Descriptor);
        let free = group.desc.free_blocks();
        group.desc.set_free_blocks(if used { free - len } else { free + len });
        group.desc.set_flags(group.desc.flags() & !BG_BLOCK_UNINIT);
        group.desc.set_bitmap_csum(csum);
        probe.enter(Phase::Checksum);
        group.desc.seal(*csum_seed, g as u32);
        if used {
            self.free -= u64::from(len);
        } else {
            self.free += u64::from(len);
        }
    }
}

/// ext4's `s_csum_seed` for a volume UUID.
fn csum_seed(uuid: &[u8; 16]) -> u32 {
    crc32c::raw_update(!0, uuid)
}

/// Where group `g`'s bitmap block lives (packed after group 0's descriptors).
pub(super) fn bitmap_location(geometry: &Geometry, g: u64) -> u64 {
    1 + geometry.gdt_blocks() + g
}

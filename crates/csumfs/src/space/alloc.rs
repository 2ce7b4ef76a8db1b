//! The allocator: blocks and inodes first fit from a goal, through the
//! free-space trees kept beside each group's bitmap (`csumkit::alloc`),
//! each bit flipped with its bitmap's checksum moved by
//! `crc32c::flip_range` and its descriptor's and superblock's counts; groups
//! initialised on first use; blocks freed.

use crate::error::Error;
use crate::stats::Stats;
use crate::volume::{Checksums, Volume};
use csumkit::crc32c;
use csumkit::ext4::fields::{
    BG_BLOCK_BITMAP_CSUM_HI, BG_BLOCK_BITMAP_CSUM_LO, BG_FLAGS, BG_FREE_BLOCKS_HI, BG_FREE_BLOCKS_LO,
    BG_FREE_INODES_LO, BG_INODE_BITMAP_CSUM_HI, BG_INODE_BITMAP_CSUM_LO, S_FIRST_INO,
};
use csumkit::ext4::Group;
use csumkit::le::{le16, le32, put16};

/// Whether the 64 bits from `b` (a multiple of 64, inside `bitmap`) all
/// equal `ones`: whole words are skipped at once (a group of 65 528 blocks
/// has an 8 KiB bitmap, and a fresh group is one run).
fn word_is(bitmap: &[u8], b: u64, ones: bool) -> bool {
    let at = (b / 8) as usize;
    b.is_multiple_of(64) && bitmap.get(at..at + 8).is_some_and(|w| w == if ones { [0xFF; 8] } else { [0; 8] })
}

/// The first zero bit of `bitmap` in `from..end`; whole words and bytes of
/// ones are skipped 64 and eight bits at a time (also one reaching past
/// `end`: it has no zero bit before it either).
fn first_free(bitmap: &[u8], from: u64, end: u64) -> Option<u64> {
    let mut b = from;
    while b < end {
        if word_is(bitmap, b, true) {
            b += 64;
            continue;
        }
        let byte = bitmap[(b / 8) as usize];
        if b.is_multiple_of(8) && byte == 0xFF {
            b += 8;
            continue;
        }
        if byte >> (b % 8) & 1 == 0 {
            return Some(b);
        }
        b += 1;
    }
    None
}

/// The first run of disk blocks `start..start + len` that no range of
/// `avoid` (disjoint, by start) holds.
fn outside(start: u64, len: u64, avoid: &[(u64, u64)]) -> Option<(u64, u64)> {
    let (mut a, end) = (start, start + len);
    for &(s, e) in avoid {
        if e <= a {
            continue;
        }
        if s >= end {
            break;
        }
        if s <= a {
            a = e;
            continue;
        }
        return Some((a, s - a));
    }
    (a < end).then(|| (a, end - a))
}

/// How many zero bits of `bitmap` follow from `start` (up to `end`, at
/// most `max`); whole zero words and bytes 64 and eight bits at a time.
fn free_run(bitmap: &[u8], start: u64, end: u64, max: u64) -> u64 {
    let end = end.min(start.saturating_add(max));
    let mut b = start;
    while b < end {
        let byte = bitmap[(b / 8) as usize];
        if b + 64 <= end && word_is(bitmap, b, false) {
            b += 64;
        } else if b.is_multiple_of(8) && b + 8 <= end && byte == 0 {
            b += 8;
        } else if byte >> (b % 8) & 1 == 0 {
            b += 1;
        } else {
            break;
        }
    }
    b - start
}

/// The free runs of the first `bits` bits of `bitmap` as a free-space tree.
fn free_space_in(bitmap: &[u8], bits: u64) -> csumkit::alloc::FreeSpace {
    let mut runs = Vec::new();
    let mut at = first_free(bitmap, 0, bits);
    while let Some(start) = at {
        let len = free_run(bitmap, start, bits, u64::MAX);
        runs.push((start as u32, len as u32));
        at = first_free(bitmap, start + len, bits);
    }
    csumkit::alloc::FreeSpace::from_runs(runs)
}

impl Volume {
    /// Sets (`take`) or clears `len` bits from `first` in a bitmap block,
    /// moving its checksum by flip_range and the descriptor's free count
    /// by `len`.
    pub(crate) fn flip_bits(
        &mut self,
        group: &Group,
        inode_bitmap: bool,
        first: u64,
        len: u64,
        take: bool,
    ) -> Result<(), Error> {
        let (block, bits, lo, hi, count_at) = if inode_bitmap {
            (
                group.inode_bitmap,
                self.layout.inodes_per_group,
                BG_INODE_BITMAP_CSUM_LO,
                BG_INODE_BITMAP_CSUM_HI,
                BG_FREE_INODES_LO,
            )
        } else {
            (
                group.block_bitmap,
                self.layout.clusters_per_group,
                BG_BLOCK_BITMAP_CSUM_LO,
                BG_BLOCK_BITMAP_CSUM_HI,
                BG_FREE_BLOCKS_LO,
            )
        };
        let bs = self.layout.block_size;
        let wide = self.layout.desc_size >= 0x40;
        let desc = self.bytes(group.desc_offset, self.layout.desc_size as usize, &|| "descriptor".into())?;
        let stored = u32::from(le16(desc, lo)) | if wide { u32::from(le16(desc, hi)) << 16 } else { 0 };
        // The move is linear in the flipped bits, so it can be computed
        // before they flip; a 16-bit stored checksum has no full CRC to move.
        let moved = if wide && self.options.checksums == Checksums::Incremental {
            Some(crc32c::flip_range(stored, bits, first, len)?)
        } else {
            None
        };
        {
            let base = (block * bs) as usize;
            let (lo, hi) = ((first / 8) as usize, ((first + len).div_ceil(8)) as usize);
            let image = self.image_mut(base + lo, hi - lo)?;
            // Single bits at the range's edges, whole bytes in between
            // filled at once (a 16 GiB fallocate sets 32 KiB of them).
            let end = first + len;
            let head_end = first.next_multiple_of(8).min(end);
            let tail_start = (end / 8 * 8).max(head_end);
            let (was, now) = if take { (0, 0xFF) } else { (0xFF, 0) };
            for bit in (first..head_end).chain(tail_start..end) {
                let byte = &mut image[base + (bit / 8) as usize];
                debug_assert_eq!(
                    *byte >> (bit % 8) & 1,
                    was & 1,
                    "bit {bit} was {}",
                    if take { "taken" } else { "free" }
                );
                *byte ^= 1 << (bit % 8);
            }
            let bytes = &mut image[base + (head_end / 8) as usize..base + (tail_start / 8) as usize];
            debug_assert!(
                bytes.iter().all(|&b| b == was),
                "bits {head_end}..{tail_start} were not all {}",
                if take { "free" } else { "taken" }
            );
            bytes.fill(now);
        }
        let trees = if inode_bitmap { &mut self.free_inodes } else { &mut self.free_space };
        if let Some(tree) = trees.get_mut(&group.number) {
            if take {
                tree.allocate(first as u32, len as u32);
            } else {
                tree.free(first as u32, len as u32);
            }
        }
        let seed = self.layout.csum_seed;
        let map = &self.map;
        let full = || crc32c::raw_update(seed, &map[(block * bs) as usize..][..(bits / 8) as usize]);
        let crc = match moved {
            Some(crc) => {
                Stats::bump(&self.stats.csum_incremental);
                if cfg!(debug_assertions) || self.options.check_updates {
                    assert_eq!(crc, full(), "bitmap: incremental checksum differs from the recomputed one");
                }
                crc
            }
            None => {
                Stats::bump(&self.stats.csum_full);
                full()
            }
        };
        self.edit_descriptor(group, |d| {
            put16(d, lo, crc as u16);
            if wide {
                put16(d, hi, (crc >> 16) as u16);
            }
            let count = u32::from(le16(d, count_at)) | if wide { u32::from(le16(d, count_at + 0x20)) << 16 } else { 0 };
            let count = if take { count - len as u32 } else { count + len as u32 };
            put16(d, count_at, count as u16);
            if wide {
                put16(d, count_at + 0x20, (count >> 16) as u16);
            }
        })
    }

    /// A free inode, first fit from `goal_group` (through the group's
    /// free-inode tree, `csumkit::alloc::FreeSpace`), in a group whose inode
    /// bitmap is initialised; marked in use.
    pub(crate) fn allocate_inode(&mut self, goal_group: u64, is_dir: bool) -> Result<u32, Error> {
        let l = self.layout.clone();
        for step in 0..l.groups {
            let g = (goal_group + step) % l.groups;
            let mut group = l.group(&self.map, g)?;
            if group.inode_uninit() {
                self.init_inode_bitmap(&group)?;
                group = l.group(&self.map, g)?;
            }
            // Inodes below s_first_ino are reserved, whatever their bits say.
            let from = if g == 0 { u64::from(self.first_ino()) - 1 } else { 0 };
            let tree = self.free_inodes_of(&group)?;
            let from = from as u32;
            let first_free = tree
                .containing(from)
                .map(|_| from)
                .or_else(|| tree.first_in(from, l.inodes_per_group as u32).map(|(start, _)| start));
            let Some(index) = first_free else { continue };
            let index = u64::from(index);
            if cfg!(debug_assertions) || self.options.check_updates {
                let bitmap = self.block(group.inode_bitmap, &|| format!("group {g} inode bitmap"))?;
                assert_eq!(
                    bitmap[(index / 8) as usize] >> (index % 8) & 1,
                    0,
                    "group {g}: inode tree and bitmap differ"
                );
            }
            self.flip_bits(&group, true, index, 1, true)?;
            self.note_inode_taken(&group, index, is_dir)?;
            self.edit_superblock(0, -1)?;
            return Ok((g * l.inodes_per_group + index + 1) as u32);
        }
        Err(Error::Io { context: "inode allocation".into(), source: std::io::Error::from_raw_os_error(libc::ENOSPC) })
    }

    pub(crate) fn first_ino(&self) -> u32 {
        match le32(&self.map, 1024 + S_FIRST_INO) {
            0 => 11,
            n => n,
        }
    }

    /// Up to `want` free blocks in one run, marked in use: at `goal` when
    /// it is free (the file grows contiguously), else the first free run
    /// of at least `min(want, 16)` blocks from the goal on, else the first
    /// free block — so a large file does not fill the one-block holes
    /// deletions left. Groups not yet initialised are initialised first.
    pub(crate) fn allocate_blocks(&mut self, goal: u64, want: u64) -> Result<(u64, u64), Error> {
        let want = self.allowance(want)?;
        let min_run = want.clamp(1, 16);
        let avoid = self.blocks_freed_since_commit();
        for avoid in [&avoid[..], &[]] {
            if let Some(found) = self.allocate_run(goal, want, min_run, avoid)? {
                return Ok(found);
            }
            if min_run > 1 {
                if let Some(found) = self.allocate_run(goal, want, 1, avoid)? {
                    return Ok(found);
                }
            }
            // Only blocks freed since the last commit are left: taken after
            // all (their data then goes through the journal).
            if avoid.is_empty() {
                break;
            }
        }
        Err(Error::Io { context: "block allocation".into(), source: std::io::Error::from_raw_os_error(libc::ENOSPC) })
    }

    fn allocate_run(
        &mut self,
        goal: u64,
        want: u64,
        min_run: u64,
        avoid: &[(u64, u64)],
    ) -> Result<Option<(u64, u64)>, Error> {
        let l = self.layout.clone();
        let goal_group = goal.saturating_sub(l.first_data_block) / l.blocks_per_group % l.groups;
        for step in 0..l.groups {
            let g = (goal_group + step) % l.groups;
            let mut group = l.group(&self.map, g)?;
            // Passed over on its descriptor's count alone when it cannot
            // have a run long enough (at the goal, any run is): a volume
            // filling up has many full groups, and asking each one's tree
            // would cost a large fallocate a tree walk per full group.
            let least = if step == 0 && !group.block_uninit() { 1 } else { min_run };
            if self.group_free_blocks(&group)? < least {
                continue;
            }
            if group.block_uninit() {
                self.init_block_bitmap(&group)?;
                group = l.group(&self.map, g)?;
            }
            let in_group = l.blocks_per_group.min(l.blocks_count - l.first_data_block - g * l.blocks_per_group);
            let tree = self.free_space_of(&group, in_group)?;
            // From the goal on in its group (then wrapping), elsewhere from
            // the start: the free extent holding the goal, else the first
            // long enough after it, else before it.
            let from = if step == 0 {
                (goal.saturating_sub(l.first_data_block) % l.blocks_per_group).min(in_group)
            } else {
                0
            };
            let at_goal =
                tree.containing(from as u32).filter(|_| step == 0).map(|(s, l)| (from as u32, l - (from as u32 - s)));
            let found = at_goal
                .or_else(|| tree.first_fit_in(from as u32, in_group as u32, min_run as u32))
                .or_else(|| tree.first_fit_in(0, from as u32, min_run as u32));
            let group_start = l.first_data_block + g * l.blocks_per_group;
            let mut found = found;
            let mut pick = None;
            // Bounded: each pass moves past a free extent of the group.
            for _ in 0..in_group {
                let Some((s, free)) = found else { break };
                let (s, free) = (u64::from(s), u64::from(free));
                if let Some((a, n)) = outside(group_start + s, free.min(want), avoid) {
                    if n >= min_run.min(free) {
                        pick = Some((a - group_start, n));
                        break;
                    }
                }
                found = tree.first_fit_in((s + free) as u32, in_group as u32, min_run as u32);
            }
            let Some((start, len)) = pick else { continue };
            if cfg!(debug_assertions) || self.options.check_updates {
                let bitmap = self.block(group.block_bitmap, &|| format!("group {g} block bitmap"))?;
                assert_eq!(
                    free_run(bitmap, start, in_group, len),
                    len,
                    "group {g}: the free-space tree and the bitmap differ"
                );
            }
            self.flip_bits(&group, false, start, len, true)?;
            self.edit_superblock(-(len as i64), 0)?;
            return Ok(Some((l.first_data_block + g * l.blocks_per_group + start, len)));
        }
        Ok(None)
    }

    /// Disk blocks not to take, by start: with fast commits, those freed
    /// since the last commit — until the free is durable they may still be
    /// a file's after a crash, and data written into them would need a
    /// full commit (the kernel's allocator does not reuse them either).
    fn blocks_freed_since_commit(&self) -> Vec<(u64, u64)> {
        let Some(redo) = self.redo.as_ref().filter(|r| r.fast.is_some()) else { return Vec::new() };
        let (bs, page) = (self.layout.block_size, crate::store::private_map::PAGE as u64);
        redo.freed.iter().map(|(s, e)| (s as u64 * page / bs, (e as u64 * page).div_ceil(bs))).collect()
    }

    /// Group `group`'s free-space tree (its first `in_group` blocks), built
    /// from its bitmap on first use.
    fn free_space_of(&mut self, group: &Group, in_group: u64) -> Result<&csumkit::alloc::FreeSpace, Error> {
        if !self.free_space.contains_key(&group.number) {
            let g = group.number;
            let bitmap = self.block(group.block_bitmap, &|| format!("group {g} block bitmap"))?;
            let tree = free_space_in(bitmap, in_group);
            self.free_space.insert(g, tree);
        }
        Ok(&self.free_space[&group.number])
    }

    /// Group `group`'s free-inode tree, built from its inode bitmap on
    /// first use.
    fn free_inodes_of(&mut self, group: &Group) -> Result<&csumkit::alloc::FreeSpace, Error> {
        if !self.free_inodes.contains_key(&group.number) {
            let (g, ipg) = (group.number, self.layout.inodes_per_group);
            let bitmap = self.block(group.inode_bitmap, &|| format!("group {g} inode bitmap"))?;
            let tree = free_space_in(bitmap, ipg);
            self.free_inodes.insert(g, tree);
        }
        Ok(&self.free_inodes[&group.number])
    }

    fn group_free_blocks(&self, group: &Group) -> Result<u64, Error> {
        let wide = self.layout.desc_size >= 0x40;
        let d = self.bytes(group.desc_offset, self.layout.desc_size as usize, &|| "descriptor".into())?;
        Ok(u64::from(le16(d, BG_FREE_BLOCKS_LO)) | if wide { u64::from(le16(d, BG_FREE_BLOCKS_HI)) << 16 } else { 0 })
    }

    /// Writes the (empty) inode bitmap of a group whose inode bitmap is not
    /// initialised (`INODE_UNINIT`; the bits past `s_inodes_per_group` set)
    /// and clears the flag. New inodes are written whole, so the inode table
    /// of such a group need not have been zeroed.
    pub(crate) fn init_inode_bitmap(&mut self, group: &Group) -> Result<(), Error> {
        self.free_inodes.remove(&group.number);
        let l = self.layout.clone();
        let (bs, ipg) = (l.block_size as usize, l.inodes_per_group as usize);
        let at = group.inode_bitmap as usize * bs;
        debug_assert!(group.inode_uninit(), "the flag makes the old bitmap unread");
        // The bits past the group's last inode are set; ext4 keeps
        // s_inodes_per_group a multiple of eight, so they are whole bytes.
        let ones_from = ipg.div_ceil(8);
        let bitmap = self.new_bitmap(at, bs, ones_from)?;
        for bit in ipg..ones_from * 8 {
            bitmap[bit / 8] |= 1 << (bit % 8);
        }
        let crc = crc32c::raw_update(l.csum_seed, &bitmap[..ipg / 8]);
        let wide = l.desc_size >= 0x40;
        self.edit_descriptor(group, |d| {
            put16(d, BG_FLAGS, le16(d, BG_FLAGS) & !0x1);
            put16(d, BG_INODE_BITMAP_CSUM_LO, crc as u16);
            if wide {
                put16(d, BG_INODE_BITMAP_CSUM_HI, (crc >> 16) as u16);
            }
        })
    }

    /// Writes the block bitmap of a group whose bitmap is not initialised
    /// (`BLOCK_UNINIT`), as the kernel's `ext4_init_block_bitmap` builds it:
    /// the superblock copy and descriptor blocks at its start, its own
    /// bitmaps and inode table where they lie inside it, the bits past its
    /// last block; then clears the flag. The bitmap is new: checksummed whole.
    pub(crate) fn init_block_bitmap(&mut self, group: &Group) -> Result<(), Error> {
        let l = self.layout.clone();
        let (g, bs) = (group.number, l.block_size);
        self.free_space.remove(&g);
        let start = l.first_data_block + g * l.blocks_per_group;
        let in_group = l.blocks_per_group.min(l.blocks_count - start);
        let wide = l.desc_size >= 0x40;
        let d = self.bytes(group.desc_offset, l.desc_size as usize, &|| "descriptor".into())?;
        let free =
            u64::from(le16(d, BG_FREE_BLOCKS_LO)) | if wide { u64::from(le16(d, BG_FREE_BLOCKS_HI)) << 16 } else { 0 };
        let table_blocks = (l.inodes_per_group * l.inode_size).div_ceil(bs);
        let own: Vec<u64> = [group.block_bitmap, group.inode_bitmap]
            .into_iter()
            .chain(group.inode_table..group.inode_table + table_blocks)
            .filter(|&b| (start..start + in_group).contains(&b))
            .collect();
        // Built where it lies (a 64 KiB buffer and its copy cost more than
        // the bits): its old bytes are unread while the flag is set, and the
        // flag goes only below, once the bitmap agrees with the descriptor.
        // The bits past the group's end are set, whole bytes at once: at
        // 64 KiB blocks they are 458 760 of the bitmap's 524 288, preset
        // with the zeros before them where the map can splice them in.
        debug_assert!(group.block_uninit(), "the flag makes the old bitmap unread");
        let at = (group.block_bitmap * bs) as usize;
        let whole = in_group.next_multiple_of(8).min(bs * 8);
        let bitmap = self.new_bitmap(at, bs as usize, (whole / 8) as usize)?;
        let mut set = |bit: u64| bitmap[(bit / 8) as usize] |= 1 << (bit % 8);
        for bit in 0..l.base_meta_blocks(g) {
            set(bit);
        }
        for b in own {
            set(b - start);
        }
        for bit in in_group..whole {
            set(bit);
        }
        let bits = l.clusters_per_group;
        let used = bitmap[..(bits / 8) as usize].iter().map(|b| u64::from(b.count_ones())).sum::<u64>();
        if bits - used != free {
            return Err(crate::error::corrupt(
                format!("group {g}"),
                format!("uninitialised: its metadata leaves {} free blocks, its descriptor says {free}", bits - used),
            ));
        }
        let crc = crc32c::raw_update(l.csum_seed, &bitmap[..(bits / 8) as usize]);
        self.edit_descriptor(group, |d| {
            put16(d, BG_FLAGS, le16(d, BG_FLAGS) & !0x2);
            put16(d, BG_BLOCK_BITMAP_CSUM_LO, crc as u16);
            if wide {
                put16(d, BG_BLOCK_BITMAP_CSUM_HI, (crc >> 16) as u16);
            }
        })
    }

    /// Returns `len` blocks from `start` to the free pool, group by group.
    pub(crate) fn free_blocks(&mut self, start: u64, len: u64) -> Result<(), Error> {
        self.data_freed(start, len);
        let bs = self.layout.block_size as usize;
        if let Some(redo) = &mut self.redo {
            redo.freed(start as usize * bs, len as usize * bs);
        }
        if let Some(undo) = &mut self.undo {
            undo.freed(start as usize * bs, len as usize * bs);
        }
        let l = self.layout.clone();
        let (mut b, end) = (start, start + len);
        while b < end {
            let g = (b - l.first_data_block) / l.blocks_per_group;
            let group_end = l.first_data_block + (g + 1) * l.blocks_per_group;
            let n = end.min(group_end) - b;
            let group = l.group(&self.map, g)?;
            self.flip_bits(&group, false, (b - l.first_data_block) % l.blocks_per_group, n, false)?;
            b += n;
        }
        self.edit_superblock(len as i64, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::{first_free, free_run, word_is};
    use proptest::prelude::*;

    /// Whole words of ones or zeros are recognised, at multiples of 64 bits
    /// inside the bitmap only (the scans' results alone cannot tell: a
    /// word missed falls back to bytes).
    #[test]
    fn runs_outside_the_blocks_to_avoid_are_found() {
        use super::outside;
        assert_eq!(outside(10, 10, &[]), Some((10, 10)));
        assert_eq!(outside(10, 10, &[(0, 5), (12, 14)]), Some((10, 2)));
        assert_eq!(outside(10, 10, &[(8, 13), (15, 16)]), Some((13, 2)));
        assert_eq!(outside(10, 10, &[(8, 25)]), None);
        assert_eq!(outside(10, 10, &[(20, 30)]), Some((10, 10)));
    }

    #[test]
    fn whole_words_of_one_value_are_recognised() {
        let mut bitmap = [0xFFu8; 24];
        bitmap[16..].fill(0);
        assert!(word_is(&bitmap, 0, true) && word_is(&bitmap, 64, true));
        assert!(word_is(&bitmap, 128, false) && !word_is(&bitmap, 128, true));
        assert!(!word_is(&bitmap, 0, false) && !word_is(&bitmap, 8, true), "ones; not a word's start");
        assert!(!word_is(&bitmap, 192, false), "past the end");
        bitmap[70 / 8] = 0xBF;
        assert!(!word_is(&bitmap, 64, true) && !word_is(&bitmap, 64, false), "mixed");
    }

    proptest! {
        /// The word- and byte-skipping bitmap scans against bit-by-bit
        /// references, over runs of free and taken bytes long enough for
        /// whole words, at every alignment.
        #[test]
        fn bitmap_scans_match_bit_by_bit(runs in proptest::collection::vec((prop_oneof![Just(0u8), Just(0xFF), any::<u8>()], 1usize..30), 1..12),
                                         from in 0u64..2800, len in 0u64..2800, min in 1u64..400) {
            let bitmap: Vec<u8> = runs.iter().flat_map(|&(v, n)| std::iter::repeat_n(v, n)).collect();
            let bits = bitmap.len() as u64 * 8;
            let (from, end) = (from.min(bits), (from + len).min(bits));
            let free = |b: u64| bitmap[(b / 8) as usize] >> (b % 8) & 1 == 0;
            prop_assert_eq!(first_free(&bitmap, from, end), (from..end).find(|&b| free(b)));
            let run = (from..end).take(min as usize).take_while(|&b| free(b)).count() as u64;
            prop_assert_eq!(free_run(&bitmap, from, end, min), run);
        }
    }
}

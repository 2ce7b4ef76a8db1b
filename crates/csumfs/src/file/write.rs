//! Writing: new inodes, directory entries, data blocks — every checksum
//! kept current without re-reading what it covers. A bitmap's checksum
//! moves by `crc32c::flip_range` over the bits allocated; descriptors,
//! inodes, directory blocks and the superblock by `crc32c::splice` over the
//! bytes that changed. Only structures written whole for the first time
//! (a new inode, a new directory block) are checksummed in full. Debug
//! builds recompute every updated checksum from scratch and compare.
//!
//! (Group descriptors store 16 bits of their CRC, so each changed
//! descriptor's 64 bytes are checksummed anew.)
//!
//! Allocation takes blocks and inodes first fit from a goal, through the
//! free-space trees kept beside each group's bitmap; stores go to the
//! volume's bytes (a shared map, or the ByteLog's private one) and every
//! metadata store is noted for the undo log and the ByteLog before it is
//! made. Images this writer would damage are refused by name at open
//! (`format/features.rs`).

use crate::error::Error;
use crate::format::dir_block::new_dir_block;
use crate::format::flags::{inherited_flags, is_synchronous};
use crate::format::inode::{encode_time, now, put_time};
use crate::format::le::{le16, le32, put16, put32};
use crate::inode::immutable;
use crate::inode::table::NewInode;
use crate::inode::table::{Inode, FLAG_EXTENTS};
use crate::space::map::Run;
use crate::splice::{splice_all, SPLICE_MIN_BYTES};
use crate::stats::Stats;
use crate::store::bytes::Bytes;
use crate::store::private_map::PAGE;
use crate::volume::{Checksums, Volume};
use csumkit::crc32c;
use csumkit::ext4::fields::{
    BG_BLOCK_BITMAP_CSUM_HI, BG_BLOCK_BITMAP_CSUM_LO, BG_FLAGS, BG_FREE_BLOCKS_HI, BG_FREE_BLOCKS_LO,
    BG_FREE_INODES_LO, BG_INODE_BITMAP_CSUM_HI, BG_INODE_BITMAP_CSUM_LO, BG_ITABLE_UNUSED_HI, BG_ITABLE_UNUSED_LO,
    BG_USED_DIRS_HI, BG_USED_DIRS_LO, I_BLOCK, I_BLOCKS_HIGH, I_BLOCKS_LO, I_EXTRA_ISIZE, I_FLAGS, I_GENERATION, I_GID,
    I_GID_HIGH, I_LINKS_COUNT, I_MODE, I_SIZE_HIGH, I_SIZE_LO, I_UID, I_UID_HIGH, S_FIRST_INO, S_FREE_BLOCKS_HI,
    S_FREE_BLOCKS_LO, S_FREE_INODES,
};
use csumkit::ext4::format::FLAG_JOURNAL_DATA;
use csumkit::ext4::Group;

/// Whether the 64 bits from `b` (a multiple of 64, inside `bitmap`) all
/// equal `ones`: whole words are skipped at once (a group of 65 528 blocks
/// has an 8 KiB bitmap, and a fresh group is one run).
fn word_is(bitmap: &[u8], b: u64, ones: bool) -> bool {
    let at = (b / 8) as usize;
    b.is_multiple_of(64) && bitmap.get(at..at + 8).is_some_and(|w| w == if ones { [0xFF; 8] } else { [0; 8] })
}

/// Whether every byte of `bytes` is zero: or-ed whole, without an exit
/// inside (vector instructions).
fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().fold(0, |any, &b| any | b) == 0
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
    /// Whether the checksum of a `bytes`-long structure is moved rather
    /// than recomputed: with `Checksums::Incremental`, from
    /// [`SPLICE_MIN_BYTES`] up — below, a hardware CRC of the whole
    /// structure costs no more than the splice (`csumkit bench crc`) — and
    /// at every size on the portable engine or with `check_updates`.
    pub(crate) fn moves_checksums(&self, bytes: usize) -> bool {
        // Without CRC instructions every byte recomputed costs ~10x more:
        // then everything is moved. `check_updates` moves everything too, so
        // the tests that run with it prove the algebra on every structure.
        let hardware = csumkit::Backend::active() != csumkit::Backend::Portable;
        self.options.checksums == Checksums::Incremental
            && (bytes >= SPLICE_MIN_BYTES || !hardware || self.options.check_updates)
    }

    /// A structure's new checksum: moved by `incremental` (splice over
    /// what changed) or, with `Checksums::Full` or for a structure under
    /// [`SPLICE_MIN_BYTES`], recomputed by `full`. In debug builds and with
    /// `Options::check_updates` a moved checksum must equal the recomputed
    /// one.
    pub(crate) fn updated(
        &self,
        what: &str,
        bytes: usize,
        incremental: impl FnOnce() -> u32,
        full: impl FnOnce() -> u32,
    ) -> u32 {
        if !self.moves_checksums(bytes) {
            Stats::bump(&self.stats.csum_full);
            return full();
        }
        Stats::bump(&self.stats.csum_incremental);
        let crc = incremental();
        if cfg!(debug_assertions) || self.options.check_updates {
            let recomputed = full();
            assert_eq!(crc, recomputed, "{what}: incremental checksum {crc:#010x}, recomputed {recomputed:#010x}");
        }
        crc
    }

    /// Writes `edits` (offset in the structure, new bytes) into the
    /// checksummed structure at byte `base` whose checksum (raw CRC32C from
    /// `seed` over its first `covered` bytes) is stored at `csum_at`, and
    /// re-seals it: by splicing the old bytes of each edit into the new
    /// (reading only those bytes), or with `Checksums::Full` over all
    /// `covered` bytes. Edits must lie inside `covered`.
    pub(crate) fn patch(
        &mut self,
        what: &str,
        base: u64,
        (covered, csum_at, seed): (usize, usize, u32),
        edits: &[(usize, &[u8])],
    ) -> Result<(), Error> {
        let base_at = base as usize;
        let old_crc = le32(&self.map, base_at + csum_at);
        let mut crc = old_crc;
        for &(at, new) in edits {
            debug_assert!(at + new.len() <= covered, "{what}: edit [{at}, +{}) past {covered}", new.len());
            let old = &self.map[base_at + at..base_at + at + new.len()];
            if self.moves_checksums(covered) {
                crc = crc32c::splice(crc, covered as u64, at as u64, old, new)?;
            }
            let image = self.image_mut(base_at + at, new.len())?;
            image[base_at + at..base_at + at + new.len()].copy_from_slice(new);
        }
        let map = &self.map;
        let full = || crc32c::raw_update(seed, &map[base_at..base_at + covered]);
        let crc = self.updated(what, covered, || crc, full);
        let image = self.image_mut(base_at + csum_at, 4)?;
        put32(image, base_at + csum_at, crc);
        Ok(())
    }

    /// The image's bytes, to change the `len` metadata bytes at `at`:
    /// their old bytes go to the undo log first while an operation is in
    /// progress.
    pub(crate) fn image_mut(&mut self, at: usize, len: usize) -> Result<&mut [u8], Error> {
        self.image_mut_keeping(at, len, true)
    }

    /// [`image_mut`](Self::image_mut), the old bytes kept for undo only if
    /// `keep_old`.
    fn image_mut_keeping(&mut self, at: usize, len: usize, keep_old: bool) -> Result<&mut [u8], Error> {
        if let Some(undo) = self.undo.as_mut().filter(|u| keep_old && u.depth > 0) {
            let old =
                self.map.get(at..at + len).ok_or_else(|| crate::error::corrupt("image", "a write past its end"))?;
            undo.record(at, old)?;
        }
        if let Some(redo) = &mut self.redo {
            redo.note(at, len);
        }
        self.map.writable().ok_or_else(|| Error::Invalid("the volume was opened read-only".into()))
    }

    /// Writes the metadata bytes `new` at `at` of the image.
    pub(crate) fn store(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        let at = at as usize;
        let image = self.image_mut(at, new.len())?;
        image[at..at + new.len()].copy_from_slice(new);
        Ok(())
    }

    /// Writes the metadata bytes `new` at `at` of the image over bytes no
    /// reader looks at, without keeping them for undo: a block the
    /// operation allocated (undoing it frees the block again), a bitmap of
    /// a group whose descriptor still marks it uninitialised (the kernel
    /// and e2fsck compute that bitmap instead of reading it, and undoing
    /// puts the flag back). Keeping them cost a 16 GiB fallocate at 64 KiB
    /// blocks 40% of its time — a copy of every 64 KiB block it wrote —
    /// and every mkdir at 64 KiB blocks a 64 KiB copy.
    pub(crate) fn store_unread(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        let at = at as usize;
        // Unless the operation freed the block first: then it held another
        // owner's bytes, which undoing the operation gives back.
        let keep_old = self.undo.as_ref().is_some_and(|u| u.was_freed(at, new.len()));
        // Spliced blank, only the pages that are not all zeros are written
        // (and copied from the template): a new 64 KiB extent leaf or
        // directory block is mostly zeros between a header and a tail.
        let blank = !keep_old && self.blank_unread(at, new.len(), new.len());
        let image = self.image_mut_keeping(at, new.len(), keep_old)?;
        if blank {
            for (k, page) in new.chunks(PAGE).enumerate() {
                if !all_zero(page) {
                    image[at + k * PAGE..][..page.len()].copy_from_slice(page);
                }
            }
        } else {
            image[at..at + new.len()].copy_from_slice(new);
        }
        Ok(())
    }

    /// Before `[at, at + len)` is built over bytes nothing reads (a block
    /// the operation allocated, an uninitialised group's bitmap): in the
    /// private map its pages become a template's, reading as zeros below
    /// `at + ones_from` and as 0xFF from it (`store/private_map.rs`), so that the
    /// builder writes only what differs and neither the file's pages nor
    /// a device read are touched. The file keeps its old bytes until the
    /// checkpoint that writes the new ones; until then they are unread
    /// there too (the file holds the last checkpoint, whose descriptor
    /// still marks the group uninitialised, or whose bitmap still has the
    /// block free). Whether it did; if not, the builder writes every byte.
    fn blank_unread(&mut self, at: usize, len: usize, ones_from: usize) -> bool {
        let Bytes::Private(map) = &mut self.map else { return false };
        map.blank(at, len, ones_from)
    }

    /// Before an uninitialised group's bitmap at `[at, at + len)` is
    /// written whole over the file's own map (no log): read ahead at once.
    /// Page by page it would be a device read per page where the page
    /// cache has let them go (the map is advised random).
    fn read_ahead(&mut self, at: usize, len: usize) {
        if !matches!(self.map, Bytes::Private(_)) && !self.map.in_memory(at, len) {
            self.map.will_need(at, len);
        }
    }

    /// The bytes of a new bitmap at `[at, at + len)`, over bytes nothing
    /// reads (an uninitialised group's): zeros below `ones_from`, 0xFF from
    /// it — spliced from a template where the map can (only the pages then
    /// written are copied), else written whole. Not kept for undo: undoing
    /// puts the group's flag back.
    fn new_bitmap(&mut self, at: usize, len: usize, ones_from: usize) -> Result<&mut [u8], Error> {
        let preset = self.blank_unread(at, len, ones_from);
        if !preset {
            self.read_ahead(at, len);
        }
        let image = self.image_mut_keeping(at, len, false)?;
        let bitmap = &mut image[at..at + len];
        if !preset {
            bitmap[..ones_from].fill(0);
            bitmap[ones_from..].fill(0xFF);
        }
        Ok(bitmap)
    }

    /// Writes file data `new` at `at` of the image: in place, not logged
    /// (with a ByteLog, see `store_logged_data`), announced first on the
    /// data checksums' intent list.
    pub(crate) fn store_data(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        if self.redo.is_some() {
            return self.store_logged_data(at as usize, new);
        }
        if self.pi.is_some() {
            return self.pi_store_data(at, new);
        }
        let bs = self.layout.block_size;
        self.data_will_write(at / bs, (at + new.len() as u64).div_ceil(bs) - at / bs)?;
        let image = self.map.writable().ok_or_else(|| Error::Invalid("the volume was opened read-only".into()))?;
        let at = at as usize;
        image[at..at + new.len()].copy_from_slice(new);
        Ok(())
    }

    /// [`store_data`](Self::store_data) for a file's data written: with a
    /// ByteLog, the data of a file with data journaling (`chattr +j`) goes
    /// through the log whatever its size, as ext4's puts it in its journal
    /// — in the image only with the commit that carries it, so that a crash
    /// leaves each write request to such a file whole or not at all.
    fn store_file_data(&mut self, at: u64, new: &[u8], journaled: bool) -> Result<(), Error> {
        if journaled && self.redo.is_some() {
            return self.store_data_in_log(at as usize, new);
        }
        self.store_data(at, new)
    }

    /// Writes file data that is the file's only if the operation is kept:
    /// a truncate's zeroed tail past the new end (without the truncate
    /// those bytes are still the file's). Zeroed in place at once, a death
    /// before the truncate was committed (or undone) left the file at its
    /// old size over zeros — `scripts/kill9-data.py` found it with
    /// `log=off`; with a ByteLog a tail of more than a page did the same.
    /// With a ByteLog the bytes go through the log whatever their size;
    /// with the undo log (`log=off`) their old bytes are kept for undo;
    /// on a PI device without a log they are written as any data (the
    /// device's tuples would not match bytes put back).
    pub(crate) fn store_data_with_metadata(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        let bs = self.layout.block_size;
        let blocks = at / bs..(at + new.len() as u64).div_ceil(bs);
        if let Some(undo) = self.undo.as_mut() {
            undo.kept_data(blocks.clone());
        }
        if self.redo.is_some() {
            return self.store_data_in_log(at as usize, new);
        }
        if self.pi.is_some() {
            return self.pi_store_data(at, new);
        }
        self.data_will_write(blocks.start, blocks.end - blocks.start)?;
        self.store(at, new)
    }

    /// Changes one group descriptor with `edit`, in place, and re-seals it.
    /// Only 16 bits of its CRC are stored, so there is no full CRC to
    /// splice from: the 64 (or 32) bytes are checksummed anew, as the
    /// kernel does.
    pub(crate) fn edit_descriptor(&mut self, group: &Group, edit: impl FnOnce(&mut [u8])) -> Result<(), Error> {
        let size = self.layout.desc_size as usize;
        let at = group.desc_offset;
        self.bytes(at, size, &|| format!("group {} descriptor", group.number))?;
        Stats::bump(&self.stats.csum_full);
        let (seed, number) = (self.layout.csum_seed, group.number as u32);
        let at = at as usize;
        let image = self.image_mut(at, size)?;
        let d = &mut image[at..at + size];
        edit(d);
        let crc = csumkit::ext4::checksum::descriptor_checksum(seed, number, d);
        put16(d, csumkit::ext4::checksum::DESC_CSUM, crc as u16);
        Ok(())
    }

    /// Adds `delta` to the superblock's free block and inode counts, moving
    /// its checksum by splice.
    pub(crate) fn edit_superblock(&mut self, free_blocks: i64, free_inodes: i64) -> Result<(), Error> {
        let sb = self.bytes(1024, 1024, &|| "superblock".into())?;
        let wide = self.layout.desc_size >= 64;
        let blocks =
            u64::from(le32(sb, S_FREE_BLOCKS_LO)) | if wide { u64::from(le32(sb, S_FREE_BLOCKS_HI)) << 32 } else { 0 };
        let blocks = blocks.wrapping_add_signed(free_blocks);
        let inodes = (i64::from(le32(sb, S_FREE_INODES)) + free_inodes) as u32;
        let (lo, hi, inodes) =
            ((blocks as u32).to_le_bytes(), ((blocks >> 32) as u32).to_le_bytes(), inodes.to_le_bytes());
        let edits: [(usize, &[u8]); 3] = [(0x0C, &lo), (0x10, &inodes), (0x158, &hi)];
        self.patch("superblock", 1024, (0x3FC, 0x3FC, !0), &edits[..if wide { 3 } else { 2 }])
    }

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
            let wide = l.desc_size >= 0x40;
            self.edit_descriptor(&group, |d| {
                if is_dir {
                    let dirs = u32::from(le16(d, BG_USED_DIRS_LO))
                        | if wide { u32::from(le16(d, BG_USED_DIRS_HI)) << 16 } else { 0 };
                    put16(d, BG_USED_DIRS_LO, (dirs + 1) as u16);
                    if wide {
                        put16(d, BG_USED_DIRS_HI, ((dirs + 1) >> 16) as u16);
                    }
                }
                // bg_itable_unused: inodes past the last one ever used.
                let unused = u32::from(le16(d, BG_ITABLE_UNUSED_LO))
                    | if wide { u32::from(le16(d, BG_ITABLE_UNUSED_HI)) << 16 } else { 0 };
                let unused_now = (l.inodes_per_group - index - 1) as u32;
                if unused_now < unused {
                    put16(d, BG_ITABLE_UNUSED_LO, unused_now as u16);
                    if wide {
                        put16(d, BG_ITABLE_UNUSED_HI, (unused_now >> 16) as u16);
                    }
                }
            })?;
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
        if let Some(found) = self.allocate_run(goal, want, min_run)? {
            return Ok(found);
        }
        if min_run > 1 {
            if let Some(found) = self.allocate_run(goal, want, 1)? {
                return Ok(found);
            }
        }
        Err(Error::Io { context: "block allocation".into(), source: std::io::Error::from_raw_os_error(libc::ENOSPC) })
    }

    fn allocate_run(&mut self, goal: u64, want: u64, min_run: u64) -> Result<Option<(u64, u64)>, Error> {
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
            let Some((start, free)) = found else { continue };
            let (start, len) = (u64::from(start), u64::from(free).min(want));
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
    fn init_inode_bitmap(&mut self, group: &Group) -> Result<(), Error> {
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
    fn init_block_bitmap(&mut self, group: &Group) -> Result<(), Error> {
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

    /// Rewrites inode `ino`'s bytes with `edit`, moving its checksum by
    /// splice over what changed. The result is built from the bytes
    /// written, not read back: their checksum is the one just computed.
    pub(crate) fn edit_inode(&mut self, inode: &Inode, edit: impl FnOnce(&mut [u8])) -> Result<Inode, Error> {
        use csumkit::ext4::checksum::{inode_checksum, inode_has_csum_hi, INODE_CSUM_HI as HI, INODE_CSUM_LO as LO};
        let old = &inode.raw;
        let mut new = old.clone();
        edit(&mut new);
        assert_eq!(
            new[I_GENERATION..I_GENERATION + 4],
            old[I_GENERATION..I_GENERATION + 4],
            "inode {}: i_generation seeds its checksum",
            inode.ino
        );
        // The checksum fields are outside what the checksum covers: kept
        // equal on both sides, the splice sees only the edit.
        new[LO..LO + 2].copy_from_slice(&old[LO..LO + 2]);
        let wide = inode_has_csum_hi(old) && inode_has_csum_hi(&new);
        if wide {
            new[HI..HI + 2].copy_from_slice(&old[HI..HI + 2]);
        }
        let full = || inode_checksum(&new, inode.csum_seed).1;
        let crc = if wide {
            let stored = u32::from(le16(old, LO)) | u32::from(le16(old, HI)) << 16;
            self.updated("inode", new.len(), || splice_all(stored, new.len(), old, &new), full)
        } else {
            // A 16-bit checksum cannot be moved: only its low half is known.
            Stats::bump(&self.stats.csum_full);
            full()
        };
        put16(&mut new, LO, crc as u16);
        if inode_has_csum_hi(&new) {
            put16(&mut new, HI, (crc >> 16) as u16);
        }
        let at = self.inode_offset(inode.ino)?;
        self.store(at, &new)?;
        let (mode, flags) = (le16(&new, I_MODE), le32(&new, I_FLAGS));
        self.synchronous |= is_synchronous(mode, flags | self.mount_sync_flags);
        self.written_inode(inode.ino, new, inode.csum_seed)
    }

    /// The inode just written, from its bytes; in the test mode
    /// (`check_updates`) also read back through the checksum check, which
    /// must agree.
    fn written_inode(&self, ino: u32, raw: Vec<u8>, seed: u32) -> Result<Inode, Error> {
        let built = self.inode_from(ino, raw, seed)?;
        if cfg!(debug_assertions) || self.options.check_updates {
            assert_eq!(self.inode(ino)?, built, "inode {ino}: written bytes and a verified read differ");
        }
        Ok(built)
    }

    pub(crate) fn inode_offset(&self, ino: u32) -> Result<u64, Error> {
        let l = &self.layout;
        let (g, index) = l.inode_group(u64::from(ino));
        let group = l.group(&self.map, g)?;
        Ok(group.inode_table * l.block_size + index * l.inode_size)
    }

    /// Writes a brand-new inode (checksummed in full: nothing to splice from).
    pub(crate) fn write_new_inode(&mut self, ino: u32, new: &NewInode, links: u16, flags: u32) -> Result<Inode, Error> {
        let size = self.layout.inode_size as usize;
        let mut raw = vec![0u8; size];
        let t = now();
        let (sec, extra) = encode_time(t);
        put16(&mut raw, I_MODE, new.mode);
        put16(&mut raw, I_UID, new.uid as u16);
        put16(&mut raw, I_UID_HIGH, (new.uid >> 16) as u16);
        put16(&mut raw, I_GID, new.gid as u16);
        put16(&mut raw, I_GID_HIGH, (new.gid >> 16) as u16);
        for at in [0x08, 0x0C, 0x10, 0x90] {
            put32(&mut raw, at, sec);
        }
        for at in [0x84, 0x88, 0x8C, 0x94] {
            put32(&mut raw, at, extra);
        }
        put16(&mut raw, I_LINKS_COUNT, links);
        put32(&mut raw, I_FLAGS, flags);
        if flags & FLAG_EXTENTS != 0 {
            // An empty extent root: magic, 0 entries, room for 4, depth 0.
            put16(&mut raw, I_BLOCK, 0xF30A);
            put16(&mut raw, I_BLOCK + 4, 4);
        }
        let generation = (t.nsec ^ ino.rotate_left(13)).wrapping_mul(0x9E37_79B9);
        put32(&mut raw, I_GENERATION, generation);
        put16(&mut raw, I_EXTRA_ISIZE, 32); // i_extra_isize
        let seed = csumkit::ext4::checksum::inode_seed(self.layout.csum_seed, ino, &raw);
        let crc = crc32c::raw_update(seed, &raw);
        put16(&mut raw, csumkit::ext4::checksum::INODE_CSUM_LO, crc as u16);
        put16(&mut raw, csumkit::ext4::checksum::INODE_CSUM_HI, (crc >> 16) as u16);
        let at = self.inode_offset(ino)?;
        self.store(at, &raw)?;
        self.written_inode(ino, raw, seed)
    }

    /// Makes `blocks` file blocks from `logical` exist (allocated, written
    /// by the caller or unwritten as `fill` says), goal right after the file's last block — for a file
    /// without blocks the start of its inode's group, as the kernel's
    /// `ext4_inode_to_goal_block` (small files then pack together instead
    /// of leaving holes between them too small for large files).
    pub(crate) fn grow(&mut self, inode: Inode, logical: u64, blocks: u64, fill: Fill) -> Result<Inode, Error> {
        let l = &self.layout;
        let group_start = l.first_data_block + l.inode_group(u64::from(inode.ino)).0 * l.blocks_per_group;
        // Where the extent before `logical` would continue (the kernel's
        // `ext4_ext_find_goal`); each later run continues the one before.
        let before = self.runs(&inode)?.into_iter().take_while(|r| r.logical < logical).last();
        let mut goal = before.map_or(group_start, |r| r.physical + (logical - r.logical));
        // One extent holds at most 32768 blocks (32767 unwritten).
        let cap = if fill == Fill::Unwritten { 32767 } else { 32768 };
        // Every run first, then one remap of the extent tree: remapping per
        // run rewrote the tree's nodes once for each 2 GiB of a large
        // fallocate at 64 KiB blocks.
        let mut runs: Vec<Run> = Vec::new();
        let mut next = logical;
        while next < logical + blocks {
            match self.allocate_blocks(goal, (logical + blocks - next).min(cap)) {
                Ok((start, len)) => {
                    runs.push(Run { logical: next, len, physical: start, uninit: fill == Fill::Unwritten });
                    goal = start + len;
                    next += len;
                }
                Err(e) => return Err(self.give_back(&runs, e)),
            }
        }
        let inode = match self.remap(&inode, logical, logical + blocks, &runs) {
            Ok((inode, _)) => inode,
            Err(e) => return Err(self.give_back(&runs, e)),
        };
        let sectors = inode.blocks + blocks * self.layout.block_size / 512;
        self.edit_inode(&inode, |r| {
            put32(r, I_BLOCKS_LO, sectors as u32);
            put16(r, I_BLOCKS_HIGH, (sectors >> 32) as u16);
        })
    }

    /// Frees the blocks of `runs` (a growth that failed: nothing half
    /// done) and returns `error`, or the error freeing them gave.
    fn give_back(&mut self, runs: &[Run], error: Error) -> Error {
        for r in runs {
            if let Err(e) = self.free_blocks(r.physical, r.len) {
                return e;
            }
        }
        error
    }

    /// Allocates every block of `first..last` the file does not map, hole
    /// by hole, filled as `fill` says.
    fn fill_holes(&mut self, mut inode: Inode, first: u64, last: u64, fill: Fill) -> Result<Inode, Error> {
        let mut b = first;
        while b < last {
            // Runs are in file order: the first that ends past `b` either
            // maps it (skip to its end) or starts the hole's end.
            let runs = self.runs(&inode)?;
            match runs.iter().find(|r| r.logical + r.len > b) {
                Some(r) if r.logical <= b => b = r.logical + r.len,
                next => {
                    let hole_end = next.map_or(last, |r| r.logical.min(last));
                    inode = self.grow(inode, b, hole_end - b, fill)?;
                    b = hole_end;
                }
            }
        }
        Ok(inode)
    }

    /// Allocates the blocks of `offset..offset + len` the file lacks as
    /// unwritten extents (they read as zeros; nothing is written to them),
    /// and extends the size unless `keep_size` (`FALLOC_FL_KEEP_SIZE`).
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn fallocate(&mut self, ino: u32, offset: u64, len: u64, keep_size: bool) -> Result<Inode, Error> {
        let mut inode = self.inode(ino)?;
        if !inode.is_file() {
            return Err(Error::IsDir(format!("inode {ino}")));
        }
        immutable::may_write(&inode)?;
        let end = self.range_end(ino, offset, len)?;
        if inode.flags & FLAG_EXTENTS == 0 {
            inode = self.extent_mapped(ino)?;
        }
        let bs = self.layout.block_size;
        let (first, last) = (offset / bs, end.div_ceil(bs));
        inode = self.fill_holes(inode, first, last, Fill::Unwritten)?;
        if keep_size || end <= inode.size {
            return Ok(inode);
        }
        self.zero_past_end(&inode, end)?;
        self.edit_inode(&inode, |r| {
            put32(r, I_SIZE_LO, end as u32);
            put32(r, I_SIZE_HIGH, (end >> 32) as u32);
        })
    }

    /// Writes `data` at `offset` of a regular file, allocating the blocks
    /// it does not have; updates size, mtime and ctime.
    ///
    /// # Errors
    /// [`Error::IsDir`]; [`Error::Unsupported`] past what the writer does;
    /// `ENOSPC`, and `EFBIG` for bytes past
    /// [`max_file_size`](Self::max_file_size), as [`Error::Io`] (nothing
    /// changed).
    pub fn write(&mut self, ino: u32, offset: u64, data: &[u8]) -> Result<Inode, Error> {
        let mut inode = self.inode(ino)?;
        if !inode.is_file() {
            return Err(Error::IsDir(format!("inode {ino}")));
        }
        immutable::may_write(&inode)?;
        if data.is_empty() {
            // A write of nothing changes nothing (POSIX): no size past the
            // end, no block, no times.
            return Ok(inode);
        }
        let end = self.range_end(ino, offset, data.len() as u64)?;
        if inode.flags & FLAG_EXTENTS == 0 {
            inode = self.extent_mapped(ino)?;
        }
        self.zero_past_end(&inode, offset)?;
        let bs = self.layout.block_size;
        let (first, last) = (offset / bs, end.div_ceil(bs));
        // Fallocated blocks the write touches become written blocks first
        // (the rest of their extents stay unwritten).
        let touched: Vec<_> = self
            .runs(&inode)?
            .into_iter()
            .filter(|r| r.uninit && r.logical < last && first < r.logical + r.len)
            .collect();
        for run in touched {
            inode = self.write_into_unwritten(&inode, run, offset, end)?;
        }
        // Allocate every unmapped block of the range, run by run. New blocks
        // are not zeroed first (the data would be written twice): the write
        // covers them, and the bytes of its first and last block that it
        // does not cover are written as zeros with it.
        let mapped = |runs: &[Run], b: u64| runs.iter().any(|r| (r.logical..r.logical + r.len).contains(&b));
        let before = self.runs(&inode)?;
        let from = if !offset.is_multiple_of(bs) && !mapped(&before, first) { first * bs } else { offset };
        let to = if !end.is_multiple_of(bs) && !mapped(&before, last - 1) { last * bs } else { end };
        inode = self.fill_holes(inode, first, last, Fill::Nothing)?;
        let padded;
        let data = if (from, to) == (offset, end) {
            data
        } else {
            let mut bytes = vec![0u8; (to - from) as usize];
            bytes[(offset - from) as usize..(end - from) as usize].copy_from_slice(data);
            padded = bytes;
            &padded[..]
        };
        let size = inode.size.max(end);
        let (offset, end) = (from, to);
        let runs = self.runs(&inode)?;
        // Its first and last block where the write covers them in part:
        // verified (unless known good) before any byte is stored.
        let mut parts = Vec::new();
        let ends = if offset < end { vec![offset / bs, (end - 1) / bs] } else { Vec::new() };
        for (i, &b) in ends.iter().enumerate() {
            let range = (offset.max(b * bs) - b * bs) as usize..(end.min((b + 1) * bs) - b * bs) as usize;
            if range.len() as u64 == bs || (i == 1 && b == ends[0]) {
                continue;
            }
            // Mapped: a block written in part was mapped, or the holes were filled above.
            let Some(run) = runs.iter().find(|r| r.logical <= b && b < r.logical + r.len) else {
                return Err(crate::error::corrupt(format!("inode {ino}"), format!("block {b} unmapped after a fill")));
            };
            parts.push(self.before_part_write(&inode, b, run.physical + b - run.logical, range)?);
        }
        for run in &runs {
            let (start, stop) = (run.logical * bs, (run.logical + run.len) * bs);
            let (from, to) = (start.max(offset), stop.min(end));
            if from < to {
                let (first_block, end_block) = ((from - start) / bs, (to - start).div_ceil(bs));
                let bytes = &data[(from - offset) as usize..(to - offset) as usize];
                // The whole blocks of the piece: checksummed from the bytes
                // at hand — on a second thread while this one writes them
                // when there are enough to pay for the thread.
                let whole = (from.div_ceil(bs) * bs).min(to)..(to / bs * bs).max(from.div_ceil(bs) * bs).min(to);
                let whole_bytes = &bytes[(whole.start - from) as usize..(whole.end - from) as usize];
                let at = run.physical * bs + (from - start);
                let journaled = inode.flags & FLAG_JOURNAL_DATA != 0;
                let helper = match self.datasums.as_mut() {
                    Some(sums) if overlap_pays(whole_bytes.len()) => sums.crc_helper(),
                    _ => None,
                };
                let crcs: Option<Vec<u32>> = match helper {
                    Some(helper) => {
                        let (crcs, stored) = helper
                            .checksum_while(whole_bytes, bs as usize, || self.store_file_data(at, bytes, journaled));
                        stored?;
                        Stats::add(&self.stats.data_overlapped, whole_bytes.len() as u64 / bs);
                        Some(crcs)
                    }
                    None => {
                        self.store_file_data(at, bytes, journaled)?;
                        None
                    }
                };
                // A whole block's checksum from the bytes at hand; the
                // blocks written in part are `parts`.
                for k in first_block..end_block {
                    let (block_start, block_end) = (start + k * bs, start + (k + 1) * bs);
                    if whole.start <= block_start && block_end <= whole.end {
                        let i = ((block_start - whole.start) / bs) as usize;
                        match &crcs {
                            Some(crcs) => self.data_written_crc(run.physical + k, crcs[i]),
                            None => {
                                self.data_written_from(run.physical + k, &whole_bytes[i * bs as usize..][..bs as usize])
                            }
                        }
                    }
                }
            }
        }
        for part in parts {
            self.after_part_write(part);
        }
        self.set_size_now(&inode, size)
    }

    /// Sets `inode`'s size, and its mtime and ctime to now (a write, a truncate).
    pub(crate) fn set_size_now(&mut self, inode: &Inode, size: u64) -> Result<Inode, Error> {
        let (sec, extra) = encode_time(now());
        self.edit_inode(inode, |r| {
            put32(r, I_SIZE_LO, size as u32);
            put32(r, I_SIZE_HIGH, (size >> 32) as u32);
            put_time(r, 0x10, 0x88, (sec, extra));
            put_time(r, 0x0C, 0x84, (sec, extra));
        })
    }

    pub(crate) fn touch_dir(&mut self, dir: u32, link_delta: i32) -> Result<(), Error> {
        let dir = self.inode(dir)?;
        let (sec, extra) = encode_time(now());
        let links = (i32::from(dir.links) + link_delta) as u16;
        self.edit_inode(&dir, |r| {
            put16(r, I_LINKS_COUNT, links);
            put_time(r, 0x10, 0x88, (sec, extra));
            put_time(r, 0x0C, 0x84, (sec, extra));
        })?;
        Ok(())
    }

    pub(crate) fn check_new_name(&self, dir: &Inode, name: &[u8]) -> Result<(), Error> {
        let shown = || String::from_utf8_lossy(name).into_owned();
        if name.is_empty() || name.contains(&b'/') || name.contains(&0) || name == b"." || name == b".." {
            return Err(Error::Invalid(format!("{:?} is not a name", shown())));
        }
        match self.lookup(dir, name) {
            Ok(_) => Err(Error::Exists(shown())),
            Err(Error::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Creates a regular file (or a FIFO, socket or device per `mode`'s
    /// type) named `name` in directory `dir`.
    ///
    /// # Errors
    /// [`Error::Exists`], [`Error::NameTooLong`], [`Error::NotDir`];
    /// [`Error::Unsupported`] for directories this writer cannot grow.
    pub fn create(&mut self, dir: u32, name: &[u8], new: NewInode) -> Result<Inode, Error> {
        let parent = self.extent_mapped_dir(dir)?;
        if !parent.is_dir() {
            return Err(Error::NotDir(format!("inode {dir}")));
        }
        self.check_new_name(&parent, name)?;
        immutable::may_add_name(&parent)?;
        let group = self.layout.inode_group(u64::from(dir)).0;
        let ino = self.allocate_inode(group, false)?;
        // Only files, directories and symlinks are extent-mapped (as
        // ext4_new_inode sets the flag); e2fsck calls a FIFO, socket or
        // device with the flag illegal.
        let extents = if new.mode & 0o170_000 == 0o100_000 { FLAG_EXTENTS } else { 0 };
        let flags = extents | inherited_flags(parent.flags, new.mode);
        let inode = self.write_new_inode(ino, &new, 1, flags)?;
        if let Err(e) = self.add_entry(&parent, name, ino, file_type(new.mode)) {
            // Nothing half done: the unlinked inode goes back.
            self.release(inode)?;
            return Err(e);
        }
        self.touch_dir(dir, 0)?;
        Ok(inode)
    }

    /// Creates directory `name` in `dir`, with its `.` and `..`.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    pub fn mkdir(&mut self, dir: u32, name: &[u8], new: NewInode) -> Result<Inode, Error> {
        let parent = self.extent_mapped_dir(dir)?;
        if !parent.is_dir() {
            return Err(Error::NotDir(format!("inode {dir}")));
        }
        self.check_new_name(&parent, name)?;
        immutable::may_add_name(&parent)?;
        // Orlov-like spread: a new top-level directory goes to the group
        // after its parent's, deeper ones stay near their parent.
        let parent_group = self.layout.inode_group(u64::from(dir)).0;
        // (`allocate_inode` wraps past the last group.)
        let goal = if dir == crate::inode::table::ROOT { parent_group + 1 } else { parent_group };
        let ino = self.allocate_inode(goal, true)?;
        let mode = (new.mode & 0o7777) | 0o040_000;
        let flags = FLAG_EXTENTS | inherited_flags(parent.flags, mode);
        let inode = self.write_new_inode(ino, &NewInode { mode, ..new }, 2, flags)?;
        let inode = self.grow(inode, 0, 1, Fill::Nothing)?;
        let bs = self.layout.block_size as usize;
        let block = new_dir_block(bs, inode.csum_seed, &[(ino, 2, b"."), (dir, 2, b"..")]);
        let physical = self.runs(&inode)?[0].physical;
        self.store_unread(physical * bs as u64, &block)?;
        let inode = self.edit_inode(&inode, |r| put32(r, I_SIZE_LO, bs as u32))?;
        if let Err(e) = self.add_entry(&parent, name, ino, 2) {
            self.release(inode)?;
            return Err(e);
        }
        self.touch_dir(dir, 1)?;
        Ok(inode)
    }

    /// Makes every change durable: `fdatasync` of the image file, which
    /// writes the pages written through the map; with a ByteLog, the data
    /// written so far, then one commit of the metadata changed since the
    /// last (the image file gets metadata at checkpoints).
    ///
    /// # Errors
    /// [`Error::Io`] when the flush fails.
    pub fn sync(&mut self) -> Result<(), Error> {
        let durable = self.start_sync()?.wait()?;
        self.finish_sync(durable)
    }

    /// `sync` without a log: the image file's data and metadata in place.
    pub(crate) fn sync_in_place(&mut self) -> Result<(), Error> {
        if let Some(device) = &self.pi {
            device.flush()?;
        } else if let Bytes::MapMut(_, file) = &self.map {
            file.sync_data().map_err(|source| Error::Io { context: "fdatasync".into(), source })?;
        }
        // Checksums of data now durable.
        self.commit_data_checksums()
    }
}

/// Whether the checksums of `bytes` whole blocks are worth computing on the
/// helper thread while the piece is written (`store/crc_helper.rs`): handing a
/// piece over costs this thread a notify and a lock, and the helper needs
/// a CPU the write leaves idle. On the portable engine it pays from a few
/// blocks; with CRC instructions the CRC is so cheap that the hand-over
/// and the host's writeback of the image (which takes the other CPU of a
/// small machine) cost more — so there only pieces of 8 MiB and more
/// (library writes; FUSE hands over at most 1 MiB) go to the helper.
fn overlap_pays(bytes: usize) -> bool {
    let min = if csumkit::Backend::active() == csumkit::Backend::Portable { 32 << 10 } else { 8 << 20 };
    bytes >= min
}

/// What new blocks hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fill {
    /// Left as they are: the caller writes them whole.
    Nothing,
    /// Unwritten extents: they read as zeros, nothing is written.
    Unwritten,
}

/// `EXT4_FT_*` of a mode.
pub(crate) fn file_type(mode: u16) -> u8 {
    match mode & 0o170_000 {
        0o100_000 => 1,
        0o040_000 => 2,
        0o020_000 => 3,
        0o060_000 => 4,
        0o010_000 => 5,
        0o140_000 => 6,
        0o120_000 => 7,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::{all_zero, first_free, free_run, word_is};
    use proptest::prelude::*;

    /// Zero pages only are zero: bytes that cancel out (as an exclusive
    /// or would) or a last byte set are not.
    #[test]
    fn only_zero_bytes_are_all_zero() {
        assert!(all_zero(&[]) && all_zero(&[0; 4096]));
        let mut page = [0u8; 4096];
        page[4095] = 1;
        assert!(!all_zero(&page));
        page[4095] = 0;
        page[7..9].copy_from_slice(&[0x5A, 0x5A]);
        assert!(!all_zero(&page));
    }

    /// Whole words of ones or zeros are recognised, at multiples of 64 bits
    /// inside the bitmap only (the scans' results alone cannot tell: a
    /// word missed falls back to bytes).
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

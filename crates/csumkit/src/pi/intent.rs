//! Which regions of a split device may hold blocks whose data and PI a
//! power cut tore apart — a write-intent bitmap, as Linux md keeps for a
//! mirror's resync.
//!
//! A split device stores a block's data and its PI in two files, so the
//! page cache may write either back first: after a power cut, a block
//! written since the last flush can hold new data under its old PI (or the
//! reverse) and fail its guard — an `EIO` on data nobody damaged. A real
//! drive writes a block and its PI atomically. So before a command writes
//! into a region not yet marked, the region's bit is set in the metadata
//! file's header and made durable (`fdatasync`); a flush clears the bits of
//! regions not written since it began. Opening the device checks the
//! guards of the blocks in marked regions and forgets (sets to the escape:
//! unchecked until written again) the PI of each block whose guard fails.
//! Forgetting never blesses damaged data, which regenerating would; blocks
//! of the region whose PI matches keep it.
//!
//! The bitmap is 64 bytes (512 regions) at a fixed place of the header;
//! a region is a power-of-two number of blocks, at least 64 and enough for
//! 512 regions to cover the device. Files made before the bitmap existed
//! hold zeros there: nothing marked.

/// Where the bitmap lives in the split metadata file's header.
pub(super) const BITMAP_AT: usize = 256;
/// Bytes of the bitmap.
pub(super) const BITMAP_BYTES: usize = 64;
const REGIONS_MAX: u64 = BITMAP_BYTES as u64 * 8;
const REGION_BLOCKS_MIN: u64 = 64;

/// Blocks per region of a device of `blocks` blocks.
pub(super) fn region_blocks(blocks: u64) -> u64 {
    let blocks = blocks.div_ceil(REGIONS_MAX).max(REGION_BLOCKS_MIN).next_power_of_two();
    debug_assert!(blocks.is_power_of_two());
    blocks
}

/// The marked regions and, for each, the flush epoch of its last write.
#[derive(Debug)]
pub(super) struct Intent {
    region_blocks: u64,
    marked: [u8; BITMAP_BYTES],
    last_write: Vec<u64>,
    epoch: u64,
}

impl Intent {
    /// The bitmap a device of `blocks` blocks opened with none marked.
    pub(super) fn new(blocks: u64) -> Intent {
        let region_blocks = region_blocks(blocks);
        let regions = blocks.div_ceil(region_blocks);
        assert!(regions <= REGIONS_MAX, "{regions} regions of {region_blocks} blocks");
        Intent { region_blocks, marked: [0; BITMAP_BYTES], last_write: vec![0; regions as usize], epoch: 1 }
    }

    /// Marks the regions blocks `lba..lba + n` lie in as written now; true
    /// when one was not marked before (the bitmap must then be made
    /// durable before the write is issued).
    pub(super) fn note_write(&mut self, lba: u64, n: u64) -> bool {
        let mut newly = false;
        if n == 0 {
            return newly;
        }
        for region in lba / self.region_blocks..=(lba + n - 1) / self.region_blocks {
            let r = region as usize;
            self.last_write[r] = self.epoch;
            newly |= self.marked[r / 8] & (1 << (r % 8)) == 0;
            self.marked[r / 8] |= 1 << (r % 8);
        }
        newly
    }

    /// Starts a flush: writes from now on belong to the next epoch.
    pub(super) fn begin_flush(&mut self) -> u64 {
        self.epoch += 1;
        self.epoch
    }

    /// A flush begun at `epoch` made every earlier write durable: unmarks
    /// the regions not written since. True when the bitmap changed.
    pub(super) fn end_flush(&mut self, epoch: u64) -> bool {
        let before = self.marked;
        for (r, &last) in self.last_write.iter().enumerate() {
            if last < epoch {
                self.marked[r / 8] &= !(1 << (r % 8));
            }
        }
        self.marked != before
    }

    pub(super) fn bitmap(&self) -> &[u8; BITMAP_BYTES] {
        &self.marked
    }
}

/// The marked regions of a stored bitmap, as block ranges of a device of
/// `blocks` blocks (bits past its last region are ignored).
pub(super) fn marked_ranges(bitmap: &[u8], blocks: u64) -> Vec<(u64, u64)> {
    let per = region_blocks(blocks);
    (0..blocks.div_ceil(per))
        .filter(|&r| bitmap[(r / 8) as usize] & (1 << (r % 8)) != 0)
        .map(|r| (r * per, ((r + 1) * per).min(blocks)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regions_cover_any_device_in_at_most_512() {
        for blocks in [1, 63, 64, 65, 32_768, 32_769, 524_288, 1 << 40] {
            let per = region_blocks(blocks);
            assert!(per >= REGION_BLOCKS_MIN && per.is_power_of_two());
            assert!(blocks.div_ceil(per) <= REGIONS_MAX, "{blocks}");
            assert!(per == REGION_BLOCKS_MIN || blocks.div_ceil(per / 2) > REGIONS_MAX, "{blocks}: not the smallest");
        }
    }

    #[test]
    fn a_flush_unmarks_only_regions_not_written_since_it_began() {
        let mut intent = Intent::new(64 * 10);
        assert!(intent.note_write(0, 1));
        assert!(!intent.note_write(63, 1), "region 0 already marked");
        assert!(intent.note_write(127, 2), "blocks 127 and 128 span regions 1 and 2");
        let epoch = intent.begin_flush();
        assert!(!intent.note_write(130, 1), "region 2 written during the flush");
        assert!(intent.end_flush(epoch));
        assert_eq!(marked_ranges(intent.bitmap(), 64 * 10), vec![(128, 192)]);
        assert!(!intent.note_write(0, 0), "an empty write marks nothing");
        let epoch = intent.begin_flush();
        assert!(intent.end_flush(epoch));
        assert_eq!(marked_ranges(intent.bitmap(), 64 * 10), vec![]);
        assert!(!intent.end_flush(intent.epoch), "nothing left to unmark");
    }

    #[test]
    fn the_last_region_ends_at_the_device() {
        let mut intent = Intent::new(100);
        intent.note_write(99, 1);
        assert_eq!(marked_ranges(intent.bitmap(), 100), vec![(64, 100)]);
    }
}

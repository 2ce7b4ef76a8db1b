//! Writes to part of a data block, and its checksum after them.
//!
//! A block written in part keeps bytes the write does not reach. Its new
//! checksum recomputed from the image would bless whatever damage those
//! bytes took since they were checksummed; so a block whose checksum this
//! process has not seen match its bytes is verified first, and the write
//! fails with `EIO` as a read of the block does (btrfs's read-modify-write
//! of a damaged page fails the same way).
//!
//! The new checksum then comes from the old one and the changed bytes
//! alone (`splice`): 4 KiB of CRC for a 4 KiB write into a 64
//! KiB block, where the whole block cost 64 KiB. A splice is exact only
//! when the old checksum matched the block, so it is taken only for
//! blocks in the known-good record: blocks whose checksum this process
//! computed from the bytes it wrote, or verified. Others pay one
//! verification, and are known-good after it.

use crate::error::Error;
use crate::inode::table::Inode;
use crate::stats::Stats;
use crate::volume::Volume;
use csumkit::crc32c;

/// A data block about to be written in part: what its new checksum is
/// made from.
pub(crate) struct PartWrite {
    physical: u64,
    /// Where the write starts in the block.
    offset: usize,
    /// The bytes it replaces.
    old: Vec<u8>,
    /// The block's checksum, which matches it; `None`: it has none.
    crc: Option<u32>,
}

impl Volume {
    /// Before bytes `range` of data block `physical` (file block `logical`
    /// of `inode`) are overwritten, the rest of the block kept: verifies the
    /// block unless it is known good.
    ///
    /// # Errors
    /// [`Error::DataChecksum`] (`EIO`) when the block does not match its
    /// checksum (nothing is written).
    pub(crate) fn before_part_write(
        &self,
        inode: &Inode,
        logical: u64,
        physical: u64,
        range: std::ops::Range<usize>,
    ) -> Result<Option<PartWrite>, Error> {
        let bs = self.layout.block_size as usize;
        debug_assert!(range.start < range.end && range.end <= bs && range.len() < bs, "a part of one block");
        let Some(sums) = &self.datasums else { return Ok(None) };
        let block = &self.map[physical as usize * bs..(physical as usize + 1) * bs];
        let crc = sums.tree.get(physical);
        if let Some(want) = crc {
            if !sums.known_good.holds(physical, want) {
                let got = crc32c::checksum(block);
                Stats::bump(&self.stats.data_verified);
                if got != want {
                    Stats::bump(&self.stats.data_mismatches);
                    return Err(Error::DataChecksum { ino: inode.ino, logical, physical, stored: want, computed: got });
                }
            }
        }
        Ok(Some(PartWrite { physical, offset: range.start, old: block[range].to_vec(), crc }))
    }

    /// After the write [`before_part_write`](Self::before_part_write)
    /// prepared: the block's new checksum, spliced from its old one (a
    /// block that had none is checksummed whole, as it is).
    pub(crate) fn after_part_write(&mut self, part: Option<PartWrite>) {
        let Some(PartWrite { physical, offset, old, crc }) = part else { return };
        let Some(crc) = crc else { return self.data_written(physical) };
        let bs = self.layout.block_size as usize;
        let start = physical as usize * bs + offset;
        let new = &self.map[start..start + old.len()];
        let spliced = crc32c::splice(crc, bs as u64, offset as u64, &old, new);
        Stats::bump(&self.stats.data_spliced);
        self.data_written_crc(physical, spliced.expect("a region inside the block, old and new of one length"));
    }
}

//! Writing file data: the range mapped (fallocated blocks written, holes
//! filled), the edge blocks of a write in part verified before any byte is
//! stored, the data stored with its checksums (computed on a helper thread
//! for large pieces) and the size and times set.

use crate::error::Error;
use crate::format::inode::{encode_time, now, put_time};
use crate::inode::immutable;
use crate::inode::table::{Inode, FLAG_EXTENTS};
use crate::space::grow::Fill;
use crate::space::map::Run;
use crate::stats::Stats;
use crate::volume::Volume;
use csumkit::ext4::fields::{I_CTIME, I_CTIME_EXTRA, I_MTIME, I_MTIME_EXTRA, I_SIZE_HIGH, I_SIZE_LO};
use csumkit::ext4::format::FLAG_JOURNAL_DATA;
use csumkit::le::put32;

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

impl Volume {
    /// Writes `data` at `offset` of a regular file, allocating the blocks
    /// it does not have; updates size, mtime and ctime.
    ///
    /// # Errors
    /// [`Error::IsDir`]; [`Error::Unsupported`] past what the writer does;
    /// `ENOSPC`, and `EFBIG` for bytes past
    /// [`max_file_size`](Self::max_file_size), as [`Error::Io`] (nothing
    /// changed).
    pub fn write(&mut self, ino: u32, offset: u64, data: &[u8]) -> Result<Inode, Error> {
        self.fast_eligible(|v| v.write_at(ino, offset, data))
    }

    /// [`write`](Self::write)'s work.
    fn write_at(&mut self, ino: u32, offset: u64, data: &[u8]) -> Result<Inode, Error> {
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
            put_time(r, I_MTIME, I_MTIME_EXTRA, (sec, extra));
            put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, extra));
        })
    }
}

//! Edits of the blocks a regular file has: cutting its tail
//! (`truncate`), punching holes (`FALLOC_FL_PUNCH_HOLE`), zeroing ranges
//! (`FALLOC_FL_ZERO_RANGE`) and turning the unwritten (fallocated) blocks
//! a write touches into written ones. Each is one remap of the extent
//! tree (`space/extent_tree.rs`); bytes of a block only partly in the range are
//! zeroed in place, and blocks that leave the file are freed.

use crate::error::Error;
use crate::format::inode::{encode_time, now, put_time};
use crate::inode::immutable;
use crate::inode::table::{Inode, FLAG_EXTENTS};
use crate::space::map::Run;
use crate::volume::{Caller, Volume};
use csumkit::ext4::feature_bits::RO_COMPAT_HUGE_FILE;
use csumkit::ext4::fields::{I_BLOCKS_HIGH, I_BLOCKS_LO, I_CTIME, I_CTIME_EXTRA, I_MTIME, I_MTIME_EXTRA};
use csumkit::le::{put16, put32};

impl Volume {
    /// Sets the size of regular file `ino`: blocks past the new end are
    /// freed and the rest of its last block zeroed; a larger size leaves
    /// a hole. mtime and ctime become now.
    ///
    /// # Errors
    /// [`Error::IsDir`] / [`Error::Invalid`] for what is not a regular
    /// file; [`Error::Unsupported`] for inline or block-mapped files and
    /// extent trees deeper than one level.
    pub fn truncate(&mut self, ino: u32, size: u64) -> Result<Inode, Error> {
        immutable::may_modify(&self.inode(ino)?, "no truncate")?;
        if self.caller != Caller::Unrestricted {
            // A removal: its extent split may take ext4's reserve.
            return self.unrestricted(|v| v.truncate(ino, size));
        }
        let mut inode = self.extent_file(ino)?;
        if size > self.max_file_size() {
            return Err(Error::Io {
                context: format!("truncate inode {ino} to {size}"),
                source: std::io::Error::from_raw_os_error(libc::EFBIG),
            });
        }
        let bs = self.layout.block_size;
        if size < inode.size {
            // The last block's tail is verified first and zeroed once the
            // unmap (which may fail) is done: a failed truncate changes nothing.
            let edges = self.partial_edges(&inode, size, size.next_multiple_of(bs))?;
            inode = self.unmap(&inode, size.div_ceil(bs), u64::MAX)?;
            for (from, to) in edges {
                self.zero_in_place(&inode, from, to, true)?;
            }
        } else {
            self.zero_past_end(&inode, size)?;
        }
        self.set_size_now(&inode, size)
    }

    /// The largest size a file may reach, the kernel's `s_maxbytes`
    /// (`ext4_max_size`): 2^32 - 1 blocks, so that the length of an
    /// extent ending at the last one still fits; without `huge_file`, no
    /// more than 2^32 - 1 512-byte sectors (the 32-bit `i_blocks`) hold.
    /// Writes, truncates and fallocates past it are `EFBIG` there and here.
    pub fn max_file_size(&self) -> u64 {
        let bs = self.layout.block_size;
        let blocks = u64::from(u32::MAX);
        if self.layout.features.ro_compat & RO_COMPAT_HUGE_FILE != 0 {
            blocks * bs
        } else {
            (blocks >> (bs.trailing_zeros() - 9)) * bs
        }
    }

    /// Deallocates the whole blocks of `offset..offset + len` and zeroes
    /// the bytes of the blocks it covers in part (`FALLOC_FL_PUNCH_HOLE`,
    /// which Linux takes only with `FALLOC_FL_KEEP_SIZE`: the size stays).
    /// As ext4 does, nothing past the block holding the last byte is
    /// punched (blocks fallocated past the end stay). mtime and ctime
    /// become now.
    ///
    /// # Errors
    /// As [`truncate`](Self::truncate); `EINVAL` / `EFBIG` for a range
    /// past the largest offset.
    pub fn punch_hole(&mut self, ino: u32, offset: u64, len: u64) -> Result<Inode, Error> {
        immutable::may_modify(&self.inode(ino)?, "no hole punched")?;
        if self.caller != Caller::Unrestricted {
            return self.unrestricted(|v| v.punch_hole(ino, offset, len));
        }
        let mut inode = self.extent_file(ino)?;
        let bs = self.layout.block_size;
        let end = self.range_end(ino, offset, len)?.min(inode.size.next_multiple_of(bs));
        if offset < end {
            let (first_whole, end_whole) = (offset.div_ceil(bs), end / bs);
            // The unmap may need a block (an extent split in two) and fail:
            // the edges are zeroed after it, once nothing can fail for space.
            let edges = self.partial_edges(&inode, offset, end)?;
            if first_whole < end_whole {
                inode = self.unmap(&inode, first_whole, end_whole)?;
            }
            for (from, to) in edges {
                self.zero_in_place(&inode, from, to, false)?;
            }
        }
        self.touch_file(&inode)
    }

    /// The parts of blocks `offset..end` covers in part (one range inside
    /// one block, or the two edges), each verified now: the zeroing that
    /// comes after the operation's allocations must not fail on damage
    /// found only then.
    fn partial_edges(&self, inode: &Inode, offset: u64, end: u64) -> Result<Vec<(u64, u64)>, Error> {
        let bs = self.layout.block_size;
        let (first_whole, end_whole) = (offset.div_ceil(bs), end / bs);
        let edges = if first_whole > end_whole {
            vec![(offset, end)]
        } else {
            vec![(offset, first_whole * bs), (end_whole * bs, end)]
        };
        let edges: Vec<_> = edges.into_iter().filter(|(from, to)| from < to).collect();
        let runs = self.runs(inode)?;
        for &(from, to) in &edges {
            let block = from / bs;
            let written = runs.iter().find(|r| !r.uninit && r.logical <= block && block < r.logical + r.len);
            if let Some(r) = written.filter(|_| to - from < bs) {
                let in_block = (from % bs) as usize..(from % bs + to - from) as usize;
                self.before_part_write(inode, block, r.physical + block - r.logical, in_block)?;
            }
        }
        Ok(edges)
    }

    /// Makes `offset..offset + len` read as zeros with its blocks kept
    /// allocated (`FALLOC_FL_ZERO_RANGE`): whole written blocks become
    /// unwritten in place (no data written), holes are fallocated, bytes
    /// of blocks covered in part are zeroed; the size grows to the range's
    /// end unless `keep_size`.
    ///
    /// # Errors
    /// As [`punch_hole`](Self::punch_hole); `ENOSPC` as [`Error::Io`].
    pub fn zero_range(&mut self, ino: u32, offset: u64, len: u64, keep_size: bool) -> Result<Inode, Error> {
        immutable::may_modify(&self.inode(ino)?, "no range zeroed")?;
        let mut inode = self.extent_file(ino)?;
        let bs = self.layout.block_size;
        let end = self.range_end(ino, offset, len)?;
        if !keep_size && end > inode.size {
            self.zero_past_end(&inode, offset)?;
        }
        if offset < end {
            let (first_whole, end_whole) = (offset.div_ceil(bs), end / bs);
            // Remapping and fallocating may need blocks and fail: the edges
            // are zeroed after them, once nothing can fail for space.
            let edges = self.partial_edges(&inode, offset, end)?;
            if first_whole <= end_whole {
                let written: Vec<Run> = self
                    .runs(&inode)?
                    .into_iter()
                    .filter(|r| !r.uninit && first_whole < end_whole)
                    .filter(|r| r.logical < end_whole && first_whole < r.logical + r.len)
                    .collect();
                for r in written {
                    let (a, b) = (r.logical.max(first_whole), (r.logical + r.len).min(end_whole));
                    let unwritten =
                        Run { logical: a, len: b - a, physical: r.physical + (a - r.logical), uninit: true };
                    inode = self.remap(&inode, a, b, &[unwritten])?.0;
                }
            }
            // The blocks the range lacks, partial ones included, as fallocate.
            inode = self.fallocate(ino, offset, end - offset, true)?;
            for (from, to) in edges {
                self.zero_in_place(&inode, from, to, false)?;
            }
        }
        if !keep_size && end > inode.size {
            return self.set_size_now(&inode, end);
        }
        self.touch_file(&inode)
    }

    /// The end of `offset..offset + len`: `EINVAL` when it overflows,
    /// `EFBIG` past the largest file.
    pub(crate) fn range_end(&self, ino: u32, offset: u64, len: u64) -> Result<u64, Error> {
        let errno = |e| Error::Io {
            context: format!("inode {ino} range {offset}+{len}"),
            source: std::io::Error::from_raw_os_error(e),
        };
        let end = offset.checked_add(len).ok_or_else(|| errno(libc::EINVAL))?;
        if end > self.max_file_size() {
            return Err(errno(libc::EFBIG));
        }
        Ok(end)
    }

    /// Inode `ino`, which must be a regular file mapped by extents.
    fn extent_file(&mut self, ino: u32) -> Result<Inode, Error> {
        let mut inode = self.inode(ino)?;
        if inode.is_dir() {
            return Err(Error::IsDir(format!("inode {ino}")));
        }
        if !inode.is_file() {
            return Err(Error::Invalid(format!("inode {ino} is not a regular file")));
        }
        if inode.flags & FLAG_EXTENTS == 0 {
            inode = self.extent_mapped(ino)?;
        }
        Ok(inode)
    }

    /// mtime and ctime become now.
    fn touch_file(&mut self, inode: &Inode) -> Result<Inode, Error> {
        let (sec, extra) = encode_time(now());
        self.edit_inode(inode, |r| {
            put_time(r, I_MTIME, I_MTIME_EXTRA, (sec, extra));
            put_time(r, I_CTIME, I_CTIME_EXTRA, (sec, extra));
        })
    }

    /// Zeroes what the file's last block holds past its end, up to `to`
    /// (the new end, or where a write past the end starts): once the file
    /// grows those bytes are the file's and must read as zeros. They are
    /// not trusted to be zeros already: an append that was undone, or
    /// never committed before a death, leaves its bytes there (a truncate
    /// up then showed them).
    pub(crate) fn zero_past_end(&mut self, inode: &Inode, to: u64) -> Result<(), Error> {
        let (bs, from) = (self.layout.block_size, inode.size);
        if from.is_multiple_of(bs) || to <= from {
            return Ok(());
        }
        self.zero_in_place(inode, from, to.min(from.next_multiple_of(bs)), false)
    }

    /// Zeroes bytes `from..to` (inside one block) of the file where a
    /// written block holds them; holes and unwritten blocks read as zeros
    /// already. `past_end`: the bytes lie past the size the operation sets
    /// (a truncate's), and stay the file's unless it is kept
    /// ([`store_data_with_metadata`](Self::store_data_with_metadata)).
    fn zero_in_place(&mut self, inode: &Inode, from: u64, to: u64, past_end: bool) -> Result<(), Error> {
        let bs = self.layout.block_size;
        if from >= to {
            return Ok(());
        }
        debug_assert_eq!(from / bs, (to - 1) / bs, "one block");
        let block = from / bs;
        let written =
            self.runs(inode)?.into_iter().find(|r| !r.uninit && r.logical <= block && block < r.logical + r.len);
        if let Some(r) = written {
            let physical = r.physical + block - r.logical;
            let (at, zeros) = (physical * bs + from % bs, vec![0u8; (to - from) as usize]);
            let in_block = (from % bs) as usize..(from % bs + to - from) as usize;
            let whole = in_block.len() as u64 == bs;
            let part = if whole { None } else { self.before_part_write(inode, block, physical, in_block)? };
            if past_end {
                self.store_data_with_metadata(at, &zeros)?;
            } else {
                self.store_data(at, &zeros)?;
            }
            match part {
                Some(part) => self.after_part_write(Some(part)),
                // Without data checksums a part write prepares nothing.
                None if whole => self.data_written_from(physical, &zeros),
                None => {}
            }
        }
        Ok(())
    }

    /// Takes file blocks `from..to` out of the file and frees them.
    pub(crate) fn unmap(&mut self, inode: &Inode, from: u64, to: u64) -> Result<Inode, Error> {
        let bs = self.layout.block_size;
        let (inode, removed) = self.remap(inode, from, to, &[])?;
        let mut freed = 0;
        for r in &removed {
            self.free_blocks(r.physical, r.len)?;
            freed += r.len;
        }
        let sectors = inode.blocks.saturating_sub(freed * bs / 512);
        self.edit_inode(&inode, |r| {
            put32(r, I_BLOCKS_LO, sectors as u32);
            put16(r, I_BLOCKS_HIGH, (sectors >> 32) as u16);
        })
    }

    /// Makes the blocks of the unwritten extent `run` that the write of
    /// `offset..end` touches written: a block it covers only in part is
    /// zeroed first, and the extent is split around them (the blocks
    /// outside the write stay unwritten, nothing written to them).
    pub(crate) fn write_into_unwritten(
        &mut self,
        inode: &Inode,
        run: Run,
        offset: u64,
        end: u64,
    ) -> Result<Inode, Error> {
        debug_assert!(run.uninit, "only unwritten extents are converted");
        let bs = self.layout.block_size;
        let (a, b) = (run.logical.max(offset / bs), (run.logical + run.len).min(end.div_ceil(bs)));
        let zeros = vec![0u8; bs as usize];
        for block in [a, b - 1] {
            let partial = block * bs < offset || (block + 1) * bs > end;
            if partial {
                // Zeros from here on, with their checksum: the write's
                // part of the block is spliced in (`txn/part_write.rs`).
                let physical = run.physical + block - run.logical;
                self.store_data(physical * bs, &zeros)?;
                self.data_written_from(physical, &zeros);
            }
        }
        let written = Run { logical: a, len: b - a, physical: run.physical + (a - run.logical), uninit: false };
        Ok(self.remap(inode, a, b, &[written])?.0)
    }
}

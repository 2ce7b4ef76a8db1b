//! `lseek`'s `SEEK_DATA` and `SEEK_HOLE`, answered as ext4 answers them
//! (`ext4_llseek` through `iomap_seek_data`/`iomap_seek_hole`): data is a
//! file's written blocks below its size; holes are unmapped blocks,
//! fallocated (unwritten) ones — ext4 reports those as holes unless its page
//! cache holds their pages, which a FUSE file system never sees — and the
//! end of the file. An inline file is data from 0 to its size. Without
//! this, FUSE answers from the size alone (all data, the hole at the end),
//! and `cp` or `tar --sparse` read a sparse or fallocated file's holes as
//! zeros.

use crate::error::Error;
use crate::inode::table::{Inode, FLAG_INLINE_DATA};
use crate::volume::Volume;

impl Volume {
    /// The offset `lseek(fd, offset, SEEK_HOLE)` (`hole`) or `SEEK_DATA`
    /// gives on regular file `inode`. `Ok(None)` is `ENXIO`: `offset` at or
    /// past the end, or no data from `offset` on.
    ///
    /// # Errors
    /// [`Error::Invalid`] for what is not a regular file; as
    /// [`runs`](Self::runs).
    pub fn seek_data_or_hole(&self, inode: &Inode, offset: u64, hole: bool) -> Result<Option<u64>, Error> {
        if !inode.is_file() {
            return Err(Error::Invalid(format!("inode {}: SEEK_DATA and SEEK_HOLE are for regular files", inode.ino)));
        }
        let size = inode.size;
        if offset >= size {
            return Ok(None);
        }
        if inode.flags & FLAG_INLINE_DATA != 0 {
            return Ok(Some(if hole { size } else { offset }));
        }
        let bs = self.layout.block_size;
        let mut data: Vec<(u64, u64)> = self
            .runs(inode)?
            .iter()
            .filter(|r| !r.uninit)
            .map(|r| (r.logical.saturating_mul(bs), r.logical.saturating_add(r.len).saturating_mul(bs)))
            .collect();
        data.sort_unstable();
        Ok(seek_in(&data, size, offset, hole))
    }
}

/// [`Volume::seek_data_or_hole`] over byte ranges of data, sorted.
fn seek_in(data: &[(u64, u64)], size: u64, offset: u64, hole: bool) -> Option<u64> {
    if offset >= size {
        return None;
    }
    if hole {
        // Through every range that holds `at` (ranges can touch end to end).
        let mut at = offset;
        for &(start, end) in data {
            if start > at {
                break;
            }
            at = at.max(end);
        }
        return Some(at.min(size));
    }
    let first = data.iter().find(|&&(_, end)| end > offset).map(|&(start, _)| start.max(offset));
    first.filter(|&at| at < size)
}

#[cfg(test)]
mod tests {
    use super::seek_in;
    use proptest::prelude::*;

    proptest! {
        /// Against a byte-by-byte walk: random runs of 1 KiB blocks (touching,
        /// apart, past the size), sizes and offsets, 0 and 1 included.
        #[test]
        fn seek_in_agrees_with_a_walk_over_every_byte(
            blocks in proptest::collection::vec((0u64..40, 1u64..6), 0..6),
            size in prop_oneof![Just(0u64), Just(1), 0u64..48 * 1024],
            offset in prop_oneof![Just(0u64), Just(1), 0u64..50 * 1024],
        ) {
            let mut data: Vec<(u64, u64)> = blocks.iter().map(|&(b, n)| (b * 1024, (b + n) * 1024)).collect();
            data.sort_unstable();
            let is_data = |at: u64| data.iter().any(|&(s, e)| s <= at && at < e);
            let want_data = (offset..size).find(|&at| is_data(at));
            let want_hole = (offset < size).then(|| (offset..size).find(|&at| !is_data(at)).unwrap_or(size));
            prop_assert_eq!(seek_in(&data, size, offset, false), want_data);
            prop_assert_eq!(seek_in(&data, size, offset, true), want_hole);
        }
    }
}

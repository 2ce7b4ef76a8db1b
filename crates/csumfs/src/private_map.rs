//! The image's private (copy-on-write) map, kept under a ByteLog: stores
//! stay in this process until a checkpoint writes them to the file; then
//! the copies are dropped and the map reads the file again.
//!
//! A block written whole over bytes nothing reads (an uninitialised
//! group's new bitmap, a newly allocated extent leaf or directory block) is
//! built in anonymous memory spliced over its pages ([`PrivateMap::blank`])
//! rather than in the file's pages: a store's first touch of a file page
//! faults a page-cache page in (read from the device, or zeroed for a hole)
//! and then copies it, 16 times per 64 KiB block — ~100 µs for a bitmap,
//! the splice ~35 (measured on this project's VMs, 2026-11-28). A
//! checkpoint maps the spliced pages to the file again
//! ([`PrivateMap::hand_back`]).

use std::collections::BTreeMap;

const PAGE: usize = 4096;

/// Spliced ranges waiting for a checkpoint, at most: each can split the
/// file's map into three areas, and the kernel allows a process 65 530
/// (`vm.max_map_count`). Past it, stores fault the file's pages as before.
const MAX_BLANK_RANGES: usize = 1024;

/// A private writable map of the image file.
pub(crate) struct PrivateMap {
    map: memmap2::MmapMut,
    file: std::fs::File,
    /// Ranges of the map spliced with anonymous memory (start → end,
    /// page-aligned bytes); the file's pages there are not mapped.
    blank: BTreeMap<usize, usize>,
}

impl PrivateMap {
    /// Maps `file` privately. No swap is reserved for it (a 40 GiB image
    /// would be refused under the kernel's overcommit heuristic):
    /// checkpoints bound the pages copied.
    ///
    /// # Errors
    /// What `mmap` or duplicating the descriptor reports.
    pub(crate) fn new(file: &std::fs::File) -> std::io::Result<PrivateMap> {
        // SAFETY: as in `Volume::open`: the image is not changed under the
        // map by others while the volume is open; a private map.
        let map = unsafe { memmap2::MmapOptions::new().no_reserve_swap().map_copy(file) }?;
        Ok(PrivateMap { map, file: file.try_clone()?, blank: BTreeMap::new() })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.map
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }

    pub(crate) fn advise_random(&self) -> std::io::Result<()> {
        self.map.advise(memmap2::Advice::Random)
    }

    pub(crate) fn will_need(&self, at: usize, len: usize) -> std::io::Result<()> {
        self.map.advise_range(memmap2::Advice::WillNeed, at, len)
    }

    /// Replaces the pages of `[at, at + len)` with zeroed anonymous memory,
    /// for bytes about to be written whole whose old bytes nothing reads:
    /// neither the file's pages nor a device read are touched. Returns
    /// whether it did — not for a range that is not whole pages inside the
    /// map, nor while [`MAX_BLANK_RANGES`] wait for a checkpoint; the
    /// stores then fault the file's pages in as they would anyway.
    pub(crate) fn blank(&mut self, at: usize, len: usize) -> bool {
        let inside = at.checked_add(len).is_some_and(|end| end <= self.map.len());
        if len == 0 || !at.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || !inside {
            return false;
        }
        if self.blank.len() >= MAX_BLANK_RANGES || self.blank_overlaps(at, at + len) {
            return false;
        }
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE;
        // SAFETY: whole pages inside this map, which `&mut self` keeps
        // anyone else from reading; MAP_FIXED replaces exactly them.
        // MAP_POPULATE faults all of them in one call.
        let done = unsafe {
            libc::mmap(
                self.map.as_mut_ptr().add(at).cast(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_POPULATE,
                -1,
                0,
            )
        } != libc::MAP_FAILED;
        if !done {
            // A failed MAP_FIXED may have unmapped the range: map the file
            // there again (its old bytes are unread, as the caller says).
            assert!(
                self.map_file(at, at + len),
                "the image map lost pages {at:#x}+{len:#x} and could not map them again"
            );
            return false;
        }
        self.blank.insert(at, at + len);
        true
    }

    fn blank_overlaps(&self, start: usize, end: usize) -> bool {
        self.blank.range(..end).next_back().is_some_and(|(_, &e)| e > start)
    }

    /// Maps `[start, end)` of the file over the same range of the map,
    /// advised random as the whole map is. Whether it did.
    fn map_file(&mut self, start: usize, end: usize) -> bool {
        use std::os::fd::AsRawFd;
        let flags = libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_NORESERVE;
        // SAFETY: whole pages inside this map (`&mut self`), the file's same
        // offsets: the map as `new` made it there.
        unsafe {
            let at = self.map.as_mut_ptr().add(start).cast();
            let prot = libc::PROT_READ | libc::PROT_WRITE;
            if libc::mmap(at, end - start, prot, flags, self.file.as_raw_fd(), start as libc::off_t) == libc::MAP_FAILED
            {
                return false;
            }
            libc::madvise(at, end - start, libc::MADV_RANDOM);
        }
        true
    }

    /// Lets the map read the file again in `ranges` (page-aligned,
    /// sorted), whose bytes the file now holds as the map has them (a
    /// checkpoint wrote them): this process's copies are dropped and the
    /// spliced ranges inside are mapped to the file again. A splice that
    /// cannot be mapped back keeps its bytes (the same as the file's) until
    /// the next call.
    pub(crate) fn hand_back(&mut self, ranges: &[(usize, usize)]) {
        for &(start, end) in ranges {
            let end = end.min(self.map.len());
            if end <= start {
                continue;
            }
            let mut kept = Vec::new();
            let spliced: Vec<(usize, usize)> =
                self.blank.range(..end).filter(|&(_, &e)| e > start).map(|(&s, &e)| (s, e)).collect();
            for (s, e) in spliced {
                let (from, to) = (s.max(start), e.min(end));
                if !self.map_file(from, to) {
                    kept.push((from, to));
                    continue;
                }
                self.blank.remove(&s);
                if s < from {
                    self.blank.insert(s, from);
                }
                if to < e {
                    self.blank.insert(to, e);
                }
            }
            let mut from = start;
            for (k_start, k_end) in kept.into_iter().chain([(end, end)]) {
                if from < k_start {
                    // SAFETY: whole pages inside this private map;
                    // MADV_DONTNEED only discards this process's copies
                    // (none left in the ranges just mapped again).
                    unsafe {
                        libc::madvise(self.map.as_mut_ptr().add(from).cast(), k_start - from, libc::MADV_DONTNEED)
                    };
                }
                from = k_end;
            }
        }
    }

    /// Spliced ranges waiting for a checkpoint.
    #[cfg(test)]
    pub(crate) fn blank_ranges(&self) -> usize {
        self.blank.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{PrivateMap, MAX_BLANK_RANGES, PAGE};
    use std::os::unix::fs::FileExt;

    fn file_of(pages: usize, byte: u8) -> (std::path::PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!("csumfs-private-map-{}-{byte}", std::process::id()));
        std::fs::write(&path, vec![byte; pages * PAGE]).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        (path, file)
    }

    /// A splice reads as zeros and keeps what is stored in it, the file
    /// untouched; handed back, the map reads the file's bytes again
    /// (a discard of anonymous pages would read zeros), its neighbours too.
    #[test]
    fn a_spliced_range_holds_its_stores_until_handed_back_to_the_file() {
        let (path, file) = file_of(16, 7);
        let mut map = PrivateMap::new(&file).unwrap();
        map.bytes_mut()[PAGE] = 9; // a copied page beside the splice
        assert!(map.blank(2 * PAGE, 4 * PAGE));
        assert!(map.bytes()[2 * PAGE..6 * PAGE].iter().all(|&b| b == 0), "blank pages read as zeros");
        assert_eq!((map.bytes()[2 * PAGE - 1], map.bytes()[6 * PAGE]), (7, 7), "only the range is spliced");
        map.bytes_mut()[2 * PAGE..6 * PAGE].fill(3);
        let mut held = vec![0u8; 4 * PAGE];
        file.read_exact_at(&mut held, 2 * PAGE as u64).unwrap();
        assert!(held.iter().all(|&b| b == 7), "the file is not written");
        // The checkpoint: the file gets the map's bytes, then the map is handed back.
        file.write_all_at(&map.bytes()[..6 * PAGE], 0).unwrap();
        file.write_all_at(&[5; PAGE], 3 * PAGE as u64).unwrap(); // seen only through the file
        map.hand_back(&[(0, 6 * PAGE)]);
        assert_eq!(map.blank_ranges(), 0);
        assert_eq!(map.bytes()[PAGE], 9);
        assert_eq!(map.bytes()[2 * PAGE], 3);
        assert!(map.bytes()[3 * PAGE..4 * PAGE].iter().all(|&b| b == 5), "the file's page, not a copy");
        assert_eq!(map.bytes()[5 * PAGE + 1], 3);
        std::fs::remove_file(&path).unwrap();
    }

    /// A hand-back over part of a splice maps that part only; the rest
    /// keeps its bytes. Refused: unaligned, overlapping, past the end, and
    /// past the cap.
    #[test]
    fn splices_are_bounded_and_handed_back_in_part() {
        let (path, file) = file_of(2 * MAX_BLANK_RANGES + 8, 1);
        let mut map = PrivateMap::new(&file).unwrap();
        assert!(map.blank(0, 4 * PAGE));
        map.bytes_mut()[..4 * PAGE].fill(2);
        map.hand_back(&[(PAGE, 2 * PAGE)]);
        assert_eq!(map.blank_ranges(), 2, "the parts before and after stay spliced");
        assert_eq!([0, 1, 2, 3].map(|p| map.bytes()[p * PAGE]), [2, 1, 2, 2]);
        assert!(!map.blank(100, PAGE) && !map.blank(PAGE, 100) && !map.blank(0, 0));
        assert!(!map.blank(3 * PAGE, 2 * PAGE), "overlaps a splice");
        assert!(!map.blank(map.bytes().len() - PAGE, 2 * PAGE), "past the map's end");
        for k in 2..MAX_BLANK_RANGES {
            assert!(map.blank((4 + 2 * k) * PAGE, PAGE), "splice {k}");
        }
        assert!(!map.blank(6 * PAGE, PAGE), "past the cap");
        map.bytes_mut()[6 * PAGE] = 4; // faults the file's page, as without splices
        map.hand_back(&[(0, map.bytes().len())]);
        assert_eq!(map.blank_ranges(), 0);
        assert!(map.blank(6 * PAGE, PAGE), "the cap counts waiting splices only");
        std::fs::remove_file(&path).unwrap();
    }
}

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
//!
//! Faulting fresh anonymous pages in is most of a splice's cost (each is a
//! host fault in these VMs), so a pool of blank blocks is faulted in ahead
//! of need ([`BlankPool`]): a splice of one block moves a pool slot's pages
//! into the map — page tables move, nothing is allocated or zeroed — ~10 µs
//! for 64 KiB; checkpoints fault the emptied slots in again.

use std::collections::BTreeMap;

const PAGE: usize = 4096;

/// Spliced ranges waiting for a checkpoint, at most: each can split the
/// file's map into three areas, and the kernel allows a process 65 530
/// (`vm.max_map_count`). Past it, stores fault the file's pages as before.
const MAX_BLANK_RANGES: usize = 1024;

/// Bytes of blank blocks kept faulted in ahead of need (at least one block).
const POOL_BYTES: usize = 1 << 20;

/// Blank blocks faulted in ahead of need: slots of one block each in an
/// anonymous area that stays mapped while the pool lives (a slot whose
/// pages moved out reads as an empty mapping, never as another's memory).
struct BlankPool {
    /// The area's address (an integer: the pool is shared across threads
    /// behind the volume's lock).
    base: usize,
    slot: usize,
    slots: usize,
    /// Slots holding faulted-in pages, and slots emptied.
    full: Vec<usize>,
    empty: Vec<usize>,
}

impl BlankPool {
    fn new(slot: usize) -> Option<BlankPool> {
        let slots = (POOL_BYTES / slot).max(1);
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: a new anonymous area of the kernel's choosing.
        let base =
            unsafe { libc::mmap(std::ptr::null_mut(), slots * slot, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
        if base == libc::MAP_FAILED {
            return None;
        }
        let mut pool =
            BlankPool { base: base as usize, slot, slots, full: Vec::new(), empty: (0..slots).rev().collect() };
        pool.refill();
        Some(pool)
    }

    /// Faults the empty slots in (zeroed pages, written to), until one fails.
    fn refill(&mut self) {
        while let Some(&slot) = self.empty.last() {
            // SAFETY: one slot of this pool's own mapped area.
            let at = (self.base + slot * self.slot) as *mut libc::c_void;
            if unsafe { libc::madvise(at, self.slot, libc::MADV_POPULATE_WRITE) } != 0 {
                return;
            }
            self.empty.pop();
            self.full.push(slot);
        }
    }
}

impl Drop for BlankPool {
    fn drop(&mut self) {
        // SAFETY: this pool's own area, mapped since `new`.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.slots * self.slot) };
    }
}

/// What [`PrivateMap::blank`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blanked {
    /// Nothing: the stores fault the file's pages in.
    No,
    /// Spliced fresh anonymous pages in.
    Fresh,
    /// Moved a pool slot's pages in.
    FromPool,
}

/// A private writable map of the image file.
pub(crate) struct PrivateMap {
    map: memmap2::MmapMut,
    file: std::fs::File,
    /// Ranges of the map spliced with anonymous memory (start → end,
    /// page-aligned bytes); the file's pages there are not mapped.
    blank: BTreeMap<usize, usize>,
    pool: Option<BlankPool>,
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
        Ok(PrivateMap { map, file: file.try_clone()?, blank: BTreeMap::new(), pool: None })
    }

    /// Keeps a pool of blank `block`-byte blocks faulted in for splices of
    /// one block (whole pages only; nothing if the pool cannot be mapped).
    pub(crate) fn keep_blank_pool(&mut self, block: usize) {
        if block > 0 && block.is_multiple_of(PAGE) {
            self.pool = BlankPool::new(block);
        }
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
    /// neither the file's pages nor a device read are touched. Not for a
    /// range that is not whole pages inside the map, nor while
    /// [`MAX_BLANK_RANGES`] wait for a checkpoint ([`Blanked::No`]): the
    /// stores then fault the file's pages in as they would anyway.
    pub(crate) fn blank(&mut self, at: usize, len: usize) -> Blanked {
        let inside = at.checked_add(len).is_some_and(|end| end <= self.map.len());
        if len == 0 || !at.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || !inside {
            return Blanked::No;
        }
        if self.blank.len() >= MAX_BLANK_RANGES || self.blank_overlaps(at, at + len) {
            return Blanked::No;
        }
        let blanked = if self.blank_from_pool(at, len) {
            Blanked::FromPool
        } else if self.blank_fresh(at, len) {
            Blanked::Fresh
        } else {
            return Blanked::No;
        };
        self.blank.insert(at, at + len);
        blanked
    }

    /// Splices fresh anonymous pages over `[at, at + len)`. Whether it did.
    fn blank_fresh(&mut self, at: usize, len: usize) -> bool {
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
            self.map_file_again(at, len);
        }
        done
    }

    /// Moves a pool slot's pages over `[at, at + len)` when `len` is the
    /// pool's block and a slot is full. Whether it did.
    fn blank_from_pool(&mut self, at: usize, len: usize) -> bool {
        let Some(pool) = self.pool.as_mut().filter(|p| p.slot == len) else { return false };
        let Some(slot) = pool.full.pop() else { return false };
        // Counted empty whether the move works or not: refilling a slot
        // that still holds its pages changes nothing.
        pool.empty.push(slot);
        let from = (pool.base + slot * len) as *mut libc::c_void;
        let flags = libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED | libc::MREMAP_DONTUNMAP;
        // SAFETY: a slot of the pool's private anonymous area (which stays
        // mapped, empty) moved over whole pages inside this map, which
        // `&mut self` keeps anyone else from reading.
        let moved = unsafe {
            let to = self.map.as_mut_ptr().add(at).cast::<libc::c_void>();
            libc::mremap(from, len, len, flags, to) != libc::MAP_FAILED
        };
        if !moved {
            self.map_file_again(at, len);
        }
        moved
    }

    /// After a failed `MAP_FIXED` or `mremap` over `[at, at + len)`, which
    /// may have unmapped it: the file mapped there again (its old bytes are
    /// unread, as `blank`'s caller says).
    fn map_file_again(&mut self, at: usize, len: usize) {
        assert!(self.map_file(at, at + len), "the image map lost pages {at:#x}+{len:#x} and could not map them again");
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
        if let Some(pool) = self.pool.as_mut() {
            pool.refill();
        }
    }

    /// Spliced ranges waiting for a checkpoint.
    #[cfg(test)]
    pub(crate) fn blank_ranges(&self) -> usize {
        self.blank.len()
    }

    /// Blank blocks in the pool, full and empty, and the pool's pages in
    /// memory (faulted in).
    #[cfg(test)]
    fn pool_slots(&self) -> (usize, usize, usize) {
        self.pool.as_ref().map_or((0, 0, 0), |p| {
            let pages = p.slots * p.slot / PAGE;
            let mut resident = vec![0u8; pages];
            // SAFETY: the pool's own mapped area; a byte per page of it.
            let r = unsafe { libc::mincore(p.base as *mut libc::c_void, pages * PAGE, resident.as_mut_ptr()) };
            assert_eq!(r, 0);
            (p.full.len(), p.empty.len(), resident.iter().filter(|&&b| b & 1 == 1).count())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Blanked, PrivateMap, MAX_BLANK_RANGES, PAGE, POOL_BYTES};
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
        assert_eq!(map.blank(2 * PAGE, 4 * PAGE), Blanked::Fresh);
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

    /// Splices of the pool's block take its slots' pages (zeros), others
    /// fault fresh ones; a hand-back maps the file back over both and
    /// refills the pool; an empty pool splices as without one.
    #[test]
    fn the_pool_serves_splices_of_its_block_and_is_refilled() {
        let (path, file) = file_of(4 * (POOL_BYTES / PAGE) + 64, 6);
        let mut map = PrivateMap::new(&file).unwrap();
        map.keep_blank_pool(4 * PAGE);
        let slots = POOL_BYTES / (4 * PAGE);
        let pages = POOL_BYTES / PAGE;
        assert_eq!(map.pool_slots(), (slots, 0, pages), "faulted in ahead of need");
        assert_eq!(map.blank(8 * PAGE, 4 * PAGE), Blanked::FromPool);
        assert_eq!(map.blank(16 * PAGE, 2 * PAGE), Blanked::Fresh, "not the pool's block");
        assert_eq!(
            map.pool_slots(),
            (slots - 1, 1, pages - 4),
            "one block's pages moved from the pool, the other faulted"
        );
        assert!(map.bytes()[8 * PAGE..12 * PAGE].iter().all(|&b| b == 0), "a slot's pages are blank");
        assert_eq!((map.bytes()[7 * PAGE], map.bytes()[12 * PAGE]), (6, 6), "only the block is spliced");
        map.bytes_mut()[8 * PAGE..12 * PAGE].fill(8);
        assert_eq!(map.bytes()[11 * PAGE + 5], 8, "its stores stay");
        for k in 1..slots {
            assert_eq!(map.blank((32 + 8 * k) * PAGE, 4 * PAGE), Blanked::FromPool, "slot {k}");
        }
        assert_eq!(map.pool_slots(), (0, slots, 0));
        assert_eq!(map.blank(24 * PAGE, 4 * PAGE), Blanked::Fresh, "with the pool empty");
        assert!(map.bytes()[24 * PAGE..28 * PAGE].iter().all(|&b| b == 0));
        map.hand_back(&[(0, map.bytes().len())]);
        assert_eq!(map.blank_ranges(), 0);
        assert_eq!(map.pool_slots(), (slots, 0, pages), "refilled");
        assert!(map.bytes()[8 * PAGE..12 * PAGE].iter().all(|&b| b == 6), "the file's bytes again");
        assert_eq!(map.blank(8 * PAGE, 4 * PAGE), Blanked::FromPool);
        assert!(map.bytes()[8 * PAGE..12 * PAGE].iter().all(|&b| b == 0), "a refilled slot is blank");
        std::fs::remove_file(&path).unwrap();
    }

    /// A hand-back over part of a splice maps that part only; the rest
    /// keeps its bytes. Refused: unaligned, overlapping, past the end, and
    /// past the cap.
    #[test]
    fn splices_are_bounded_and_handed_back_in_part() {
        let (path, file) = file_of(2 * MAX_BLANK_RANGES + 8, 1);
        let mut map = PrivateMap::new(&file).unwrap();
        assert_eq!(map.blank(0, 4 * PAGE), Blanked::Fresh);
        map.bytes_mut()[..4 * PAGE].fill(2);
        map.hand_back(&[(PAGE, 2 * PAGE)]);
        assert_eq!(map.blank_ranges(), 2, "the parts before and after stay spliced");
        assert_eq!([0, 1, 2, 3].map(|p| map.bytes()[p * PAGE]), [2, 1, 2, 2]);
        for (at, len) in [(100, PAGE), (PAGE, 100), (0, 0)] {
            assert_eq!(map.blank(at, len), Blanked::No, "{at}+{len}: not whole pages");
        }
        assert_eq!(map.blank(3 * PAGE, 2 * PAGE), Blanked::No, "overlaps a splice");
        assert_eq!(map.blank(map.bytes().len() - PAGE, 2 * PAGE), Blanked::No, "past the map's end");
        for k in 2..MAX_BLANK_RANGES {
            assert_eq!(map.blank((4 + 2 * k) * PAGE, PAGE), Blanked::Fresh, "splice {k}");
        }
        assert_eq!(map.blank(6 * PAGE, PAGE), Blanked::No, "past the cap");
        map.bytes_mut()[6 * PAGE] = 4; // faults the file's page, as without splices
        map.hand_back(&[(0, map.bytes().len())]);
        assert_eq!(map.blank_ranges(), 0);
        assert_eq!(map.blank(6 * PAGE, PAGE), Blanked::Fresh, "the cap counts waiting splices only");
        std::fs::remove_file(&path).unwrap();
    }
}

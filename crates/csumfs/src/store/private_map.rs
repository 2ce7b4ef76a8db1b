//! The image's private (copy-on-write) map, kept under a ByteLog: stores
//! stay in this process until a checkpoint writes them to the file; then
//! the copies are dropped and the map reads the file again.
//!
//! A block written whole over bytes nothing reads (an uninitialised
//! group's new bitmap, a newly allocated extent leaf or directory block) is
//! built over a template spliced over its pages ([`PrivateMap::blank`])
//! rather than over the file's pages: a store's first touch of a file page
//! faults a page-cache page in (read from the device, or zeroed for a hole)
//! and then copies it, 16 times per 64 KiB block. A checkpoint maps the
//! spliced pages to the file again ([`PrivateMap::hand_back`]).
//!
//! A template is a memory file holding the bytes such a block starts
//! with — zeros, and for a bitmap the ones past the group's last bit
//! (458 760 of a 64 KiB block bitmap's 524 288 bits with 65 528 blocks
//! per group) — mapped privately: a page stays the template's until it is
//! written, and is copied (one fault) when it is; the template itself is
//! never written again. Those blocks are mostly their starting bytes (an
//! extent leaf's header and tail, a bitmap's first 8 KiB), so a few pages
//! are copied instead of 16 faulted: cheaper than faulting a pool of
//! blank pages in ahead of need, and than faulting them over the file.

use std::collections::BTreeMap;

/// The page: the unit a map is spliced, copied on write and flushed in,
/// and the granularity at which data and metadata share a page of the map.
pub(crate) const PAGE: usize = 4096;

/// Spliced ranges waiting for a checkpoint, at most: each can split the
/// file's map into three areas, and the kernel allows a process 65 530
/// (`vm.max_map_count`). Past it, stores fault the file's pages as before.
const MAX_BLANK_RANGES: usize = 1024;

/// Templates kept, at most: a volume asks for four shapes (zeroed blocks,
/// inode bitmaps, block bitmaps of whole groups and of the last group).
const MAX_TEMPLATES: usize = 4;

/// A block's starting bytes in a memory file: `len` bytes, zero below
/// `ones_from`, 0xFF from it.
struct Template {
    len: usize,
    ones_from: usize,
    file: std::fs::File,
}

impl Template {
    fn new(len: usize, ones_from: usize) -> Option<Template> {
        use std::os::fd::FromRawFd;
        use std::os::unix::fs::FileExt;
        // SAFETY: a NUL-terminated name; the descriptor returned is owned below.
        let fd = unsafe { libc::memfd_create(c"csumfs-template".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a descriptor just created, owned by nothing else.
        let file = unsafe { std::fs::File::from_raw_fd(fd) };
        let mut bytes = vec![0u8; len];
        bytes[ones_from..].fill(0xFF);
        // Every page written: none is a hole that a read would allocate.
        file.write_all_at(&bytes, 0).ok()?;
        Some(Template { len, ones_from, file })
    }
}

/// A private writable map of the image file.
pub(crate) struct PrivateMap {
    map: memmap2::MmapMut,
    file: std::fs::File,
    /// Ranges of the map spliced from templates (start → end,
    /// page-aligned bytes); the file's pages there are not mapped.
    blank: BTreeMap<usize, usize>,
    templates: Vec<Template>,
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
        Ok(PrivateMap { map, file: file.try_clone()?, blank: BTreeMap::new(), templates: Vec::new() })
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

    /// Replaces the pages of `[at, at + len)`, a block about to be built
    /// over bytes nothing reads, with a private map of a template reading
    /// as zeros below `at + ones_from` and as 0xFF from it: neither the
    /// file's pages nor a device read are touched, and the pages the
    /// caller then writes are copied from the template as they are, the
    /// others stay the template's. Whether it did: not for a range that is
    /// not whole pages inside the map or overlaps a splice, nor while
    /// [`MAX_BLANK_RANGES`] wait for a checkpoint, nor past
    /// [`MAX_TEMPLATES`] shapes — the caller then writes every byte, over
    /// the file's pages as without splices.
    pub(crate) fn blank(&mut self, at: usize, len: usize, ones_from: usize) -> bool {
        use std::os::fd::AsRawFd;
        let inside = at.checked_add(len).is_some_and(|end| end <= self.map.len());
        if len == 0 || !at.is_multiple_of(PAGE) || !len.is_multiple_of(PAGE) || !inside || ones_from > len {
            return false;
        }
        if self.blank.len() >= MAX_BLANK_RANGES || self.blank_overlaps(at, at + len) {
            return false;
        }
        let Some(template) = self.template(len, ones_from) else { return false };
        let fd = template.file.as_raw_fd();
        let flags = libc::MAP_PRIVATE | libc::MAP_FIXED | libc::MAP_NORESERVE;
        // SAFETY: whole pages inside this map, which `&mut self` keeps
        // anyone else from reading; MAP_FIXED replaces exactly them with a
        // private (copy-on-write) map of the template's `len` bytes.
        let done = unsafe {
            let to = self.map.as_mut_ptr().add(at).cast();
            libc::mmap(to, len, libc::PROT_READ | libc::PROT_WRITE, flags, fd, 0) != libc::MAP_FAILED
        };
        if !done {
            self.map_file_again(at, len);
            return false;
        }
        self.blank.insert(at, at + len);
        true
    }

    /// The template of that shape, made on first use (at most
    /// [`MAX_TEMPLATES`]).
    fn template(&mut self, len: usize, ones_from: usize) -> Option<&Template> {
        let index = match self.templates.iter().position(|t| (t.len, t.ones_from) == (len, ones_from)) {
            Some(index) => index,
            None if self.templates.len() < MAX_TEMPLATES => {
                self.templates.push(Template::new(len, ones_from)?);
                self.templates.len() - 1
            }
            None => return None,
        };
        Some(&self.templates[index])
    }

    /// After a failed `MAP_FIXED` over `[at, at + len)`, which
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
    }

    /// Spliced ranges waiting for a checkpoint.
    #[cfg(test)]
    pub(crate) fn blank_ranges(&self) -> usize {
        self.blank.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{PrivateMap, MAX_BLANK_RANGES, MAX_TEMPLATES, PAGE};
    use std::os::unix::fs::FileExt;

    fn file_of(pages: usize, byte: u8) -> (std::path::PathBuf, std::fs::File) {
        let path = std::env::temp_dir().join(format!("csumfs-private-map-{}-{byte}", std::process::id()));
        std::fs::write(&path, vec![byte; pages * PAGE]).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        (path, file)
    }

    /// Pages of the map at `at` holding this process's own copies (the
    /// `Anonymous` of the area in /proc/self/smaps): the pages of a
    /// template written, or of the file.
    fn copied_pages(map: &PrivateMap, at: usize) -> usize {
        let addr = map.bytes().as_ptr() as usize + at;
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ').filter(|(r, _)| r.contains('-') && !r.ends_with(':')) {
                let (lo, hi) = range.split_once('-').unwrap();
                let (lo, hi) = (usize::from_str_radix(lo, 16).unwrap(), usize::from_str_radix(hi, 16).unwrap());
                inside = (lo..hi).contains(&addr);
            } else if inside && line.starts_with("Anonymous:") {
                let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
                return kib * 1024 / PAGE;
            }
        }
        panic!("no area of this process holds {addr:#x}")
    }

    /// A splice reads as zeros and keeps what is stored in it, the file
    /// untouched; handed back, the map reads the file's bytes again
    /// (a discard of the copies would read the template's), its
    /// neighbours too.
    #[test]
    fn a_spliced_range_holds_its_stores_until_handed_back_to_the_file() {
        let (path, file) = file_of(16, 7);
        let mut map = PrivateMap::new(&file).unwrap();
        map.bytes_mut()[PAGE] = 9; // a copied page beside the splice
        assert!(map.blank(2 * PAGE, 4 * PAGE, 4 * PAGE));
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

    /// A template reads as zeros, then ones; only the pages written are
    /// copied, and never into the template: another splice of the same
    /// shape reads its bytes. Shapes are kept up to the bound, past it a
    /// splice is refused and the map keeps the file's bytes.
    #[test]
    fn a_template_is_copied_only_where_written_and_shapes_are_bounded() {
        let (path, file) = file_of(64, 6);
        let mut map = PrivateMap::new(&file).unwrap();
        let ones_from = 2 * PAGE + 100;
        assert!(map.blank(8 * PAGE, 4 * PAGE, ones_from));
        let starts = |map: &PrivateMap, at: usize| {
            let bytes = &map.bytes()[at..at + 4 * PAGE];
            bytes[..ones_from].iter().all(|&b| b == 0) && bytes[ones_from..].iter().all(|&b| b == 0xFF)
        };
        assert!(starts(&map, 8 * PAGE), "zeros below ones_from, ones from it");
        assert_eq!(copied_pages(&map, 8 * PAGE), 0, "read, nothing is copied");
        map.bytes_mut()[8 * PAGE + 5] = 1;
        map.bytes_mut()[11 * PAGE] = 2;
        assert_eq!(copied_pages(&map, 8 * PAGE), 2, "the two pages written");
        assert!(map.blank(16 * PAGE, 4 * PAGE, ones_from));
        assert!(starts(&map, 16 * PAGE), "the template was not written through");
        assert_eq!((map.bytes()[8 * PAGE + 5], map.bytes()[11 * PAGE]), (1, 2));
        for k in 1..MAX_TEMPLATES {
            assert!(map.blank((24 + 4 * k) * PAGE, 4 * PAGE, k), "shape {k}");
        }
        assert_eq!(map.templates.len(), MAX_TEMPLATES);
        assert!(!map.blank(48 * PAGE, 4 * PAGE, 3 * PAGE), "a shape past the bound");
        assert!(map.bytes()[48 * PAGE..52 * PAGE].iter().all(|&b| b == 6), "the file's bytes stay");
        assert!(!map.blank(48 * PAGE, 4 * PAGE, 4 * PAGE + 1), "ones past the block");
        assert!(map.blank(52 * PAGE, 4 * PAGE, 1), "a shape kept");
        map.hand_back(&[(0, map.bytes().len())]);
        assert_eq!(map.blank_ranges(), 0);
        assert!(map.bytes().iter().all(|&b| b == 6), "the file's bytes again everywhere");
        std::fs::remove_file(&path).unwrap();
    }

    /// A hand-back over part of a splice maps that part only; the rest
    /// keeps its bytes. Refused: unaligned, overlapping, past the end, and
    /// past the cap.
    #[test]
    fn splices_are_bounded_and_handed_back_in_part() {
        let (path, file) = file_of(2 * MAX_BLANK_RANGES + 8, 1);
        let mut map = PrivateMap::new(&file).unwrap();
        assert!(map.blank(0, 4 * PAGE, 4 * PAGE));
        map.bytes_mut()[..4 * PAGE].fill(2);
        map.hand_back(&[(PAGE, 2 * PAGE)]);
        assert_eq!(map.blank_ranges(), 2, "the parts before and after stay spliced");
        assert_eq!([0, 1, 2, 3].map(|p| map.bytes()[p * PAGE]), [2, 1, 2, 2]);
        for (at, len) in [(100, PAGE), (PAGE, 100), (0, 0)] {
            assert!(!map.blank(at, len, len), "{at}+{len}: not whole pages");
        }
        assert!(!map.blank(3 * PAGE, 2 * PAGE, 2 * PAGE), "overlaps a splice");
        assert!(!map.blank(map.bytes().len() - PAGE, 2 * PAGE, 2 * PAGE), "past the map's end");
        assert!(map.blank(PAGE, PAGE, PAGE), "between two splices, touching both");
        map.hand_back(&[(PAGE, 2 * PAGE)]);
        for k in 2..MAX_BLANK_RANGES {
            assert!(map.blank((4 + 2 * k) * PAGE, PAGE, PAGE), "splice {k}");
        }
        assert!(!map.blank(6 * PAGE, PAGE, PAGE), "past the cap");
        map.bytes_mut()[6 * PAGE] = 4; // faults the file's page, as without splices
        map.hand_back(&[(0, map.bytes().len())]);
        assert_eq!(map.blank_ranges(), 0);
        assert!(map.blank(6 * PAGE, PAGE, PAGE), "the cap counts waiting splices only");
        std::fs::remove_file(&path).unwrap();
    }
}

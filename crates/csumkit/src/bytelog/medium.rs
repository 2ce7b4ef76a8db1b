//! Byte-addressable media under a ByteLog: the persistence trait, a
//! simulated persistent-memory medium that can crash, and a memory-mapped file.

use crate::bytelog::LogError;
use crate::Error;
use std::collections::{BTreeMap, BTreeSet};

/// A byte-addressable region with explicit persistence: stores are volatile
/// until their lines are flushed and a fence has completed.
pub trait Medium {
    /// Region size in bytes.
    fn len(&self) -> u64;
    /// Whether the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// What loads of [offset, offset + len) would see now, borrowed.
    fn view(&self, offset: u64, len: u64) -> Result<&[u8], Error>;
    /// Copies what loads would see now into `buf`.
    fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), Error> {
        buf.copy_from_slice(self.view(offset, buf.len() as u64)?);
        Ok(())
    }
    /// Stores bytes (volatile).
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error>;
    /// Starts writing back the lines covering [offset, offset + len).
    fn flush(&mut self, offset: u64, len: u64) -> Result<(), Error>;
    /// Waits until every flush before it has reached the medium.
    fn fence(&mut self) -> Result<(), Error>;
}

pub(super) fn check_range(len: u64, offset: u64, n: u64) -> Result<(), Error> {
    match offset.checked_add(n) {
        Some(end) if end <= len => Ok(()),
        _ => Err(LogError::OutOfBounds { offset, len: n, total_len: len }.into()),
    }
}

const LINE: usize = 64;

/// `bytes[offset..offset + len]`, bounds-checked.
pub(super) fn view_of(bytes: &[u8], offset: u64, len: u64) -> Result<&[u8], Error> {
    check_range(bytes.len() as u64, offset, len)?;
    Ok(&bytes[offset as usize..(offset + len) as usize])
}

/// Stores `data` at `offset` of `bytes`, bounds-checked.
pub(super) fn store_into(bytes: &mut [u8], offset: u64, data: &[u8]) -> Result<(), Error> {
    check_range(bytes.len() as u64, offset, data.len() as u64)?;
    bytes[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    Ok(())
}

/// Opens `path` for reading and writing, created if missing.
#[cfg(unix)]
pub(super) fn open_rw(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path)
}

/// Simulated persistent memory: stores land in a volatile cache of 64-byte
/// lines; `flush` + `fence` make lines durable. At a crash any subset of
/// the dirty lines may have reached the medium, each possibly torn at
/// 8-byte granularity ([`SimMedium::crash_image`]).
#[derive(Clone, Debug)]
pub struct SimMedium {
    current: Vec<u8>,
    durable: Vec<u8>,
    dirty: BTreeSet<usize>,
    flushing: BTreeMap<usize, [u8; LINE]>,
    /// Stores, flushes and fences so far (crash points).
    pub events: u64,
}

impl SimMedium {
    /// A zeroed medium of `len` bytes (a multiple of 64).
    pub fn new(len: usize) -> Self {
        assert!(len.is_multiple_of(LINE), "medium length must be whole lines");
        SimMedium::from_image(vec![0; len])
    }

    /// A medium whose durable and visible contents are `image` (after a crash).
    pub fn from_image(image: Vec<u8>) -> Self {
        SimMedium {
            current: image.clone(),
            durable: image,
            dirty: BTreeSet::new(),
            flushing: BTreeMap::new(),
            events: 0,
        }
    }

    /// Lines written since they were last made durable, in order.
    pub fn dirty_lines(&self) -> Vec<usize> {
        self.dirty.iter().copied().collect()
    }

    /// The durable contents if the power failed now and, of the dirty lines,
    /// exactly `reached` got to the medium — the one at `torn.0` only in the
    /// 8-byte words whose bit is set in `torn.1`.
    pub fn crash_image(&self, reached: &[usize], torn: Option<(usize, u8)>) -> Vec<u8> {
        let mut image = self.durable.clone();
        for &line in reached {
            debug_assert!(self.dirty.contains(&line));
            let at = line * LINE;
            match torn {
                Some((t, mask)) if t == line => {
                    for word in 0..8 {
                        if mask & (1 << word) != 0 {
                            let w = at + word * 8;
                            image[w..w + 8].copy_from_slice(&self.current[w..w + 8]);
                        }
                    }
                }
                _ => image[at..at + LINE].copy_from_slice(&self.current[at..at + LINE]),
            }
        }
        image
    }

    /// What is durable now.
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }
}

impl Medium for SimMedium {
    fn len(&self) -> u64 {
        self.current.len() as u64
    }

    fn view(&self, offset: u64, len: u64) -> Result<&[u8], Error> {
        view_of(&self.current, offset, len)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error> {
        store_into(&mut self.current, offset, data)?;
        let at = offset as usize;
        if !data.is_empty() {
            self.dirty.extend(at / LINE..(at + data.len()).div_ceil(LINE));
        }
        self.events += 1;
        Ok(())
    }

    fn flush(&mut self, offset: u64, len: u64) -> Result<(), Error> {
        check_range(self.len(), offset, len)?;
        let (first, end) = (offset as usize / LINE, (offset + len).div_ceil(LINE as u64) as usize);
        for line in first..end {
            if self.dirty.contains(&line) {
                let snapshot = self.current[line * LINE..][..LINE].try_into().expect("one line");
                self.flushing.insert(line, snapshot);
            }
        }
        self.events += 1;
        Ok(())
    }

    fn fence(&mut self) -> Result<(), Error> {
        for (line, snapshot) in std::mem::take(&mut self.flushing) {
            self.durable[line * LINE..][..LINE].copy_from_slice(&snapshot);
            if self.current[line * LINE..][..LINE] == snapshot {
                self.dirty.remove(&line);
            }
        }
        self.events += 1;
        Ok(())
    }
}

/// How a memory-mapped file is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persist {
    /// `msync` of the touched pages (a regular file).
    Msync,
    /// Write back cache lines (CLWB, else CLFLUSHOPT, else CLFLUSH; DC CVAC
    /// on aarch64) and fence: right for a DAX mapping (`MAP_SYNC`), and for
    /// `/dev/shm` as a DAX stand-in.
    CacheLines,
}

/// A memory-mapped file as the medium (`memmap2`).
#[cfg(unix)]
#[derive(Debug)]
pub struct MmapMedium {
    map: memmap2::MmapMut,
    /// Where the medium begins in the map (a range of a file mapped from
    /// the page holding its start).
    skip: usize,
    persist: Persist,
}

#[cfg(unix)]
impl MmapMedium {
    /// Maps `path` (created or extended to `len` bytes) with the given persistence.
    pub fn open(path: &std::path::Path, len: u64, persist: Persist) -> Result<Self, Error> {
        let io = |context: &str, source| Error::Io { context: format!("{}: {context}", path.display()), source };
        let file = open_rw(path).map_err(|e| io("open", e))?;
        if file.metadata().map_err(|e| io("stat", e))?.len() < len {
            file.set_len(len).map_err(|e| io("extend", e))?;
        }
        // SAFETY: the mapping is of a file this process opened read-write; the
        // ByteLog is its only writer (concurrent external writers would be a
        // misuse, as for any mmap).
        let map = unsafe { memmap2::MmapOptions::new().len(len as usize).populate().map_mut(&file) }
            .map_err(|e| io("mmap", e))?;
        Ok(MmapMedium { map, skip: 0, persist })
    }

    /// Bytes `[offset, offset + len)` of the existing file at `path`
    /// mapped as the medium, never extended; cache-line write-back when the
    /// file is on a DAX filesystem or `on_tmpfs` (the stand-in), `msync`
    /// otherwise.
    ///
    /// # Errors
    /// A file shorter than `offset + len`; what mapping reports.
    pub fn open_range(path: &std::path::Path, offset: u64, len: u64, on_tmpfs: bool) -> Result<Self, Error> {
        let io = |context: &str, source| Error::Io { context: format!("{}: {context}", path.display()), source };
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).map_err(|e| io("open", e))?;
        let have = file.metadata().map_err(|e| io("stat", e))?.len();
        if offset.checked_add(len).is_none_or(|end| end > have) {
            return Err(Error::Invalid {
                what: "ByteLog region",
                detail: format!("bytes {offset}..+{len} of a {have}-byte file {}", path.display()),
            });
        }
        let page = 4096u64;
        let (start, skip) = (offset / page * page, (offset % page) as usize);
        let mapped = skip + len as usize;
        let persist = if on_tmpfs || is_dax_at(&file, start, mapped) { Persist::CacheLines } else { Persist::Msync };
        // SAFETY: as in `open`: the file this process opened read-write,
        // the range's only writer the ByteLog.
        let map = unsafe { memmap2::MmapOptions::new().offset(start).len(mapped).populate().map_mut(&file) }
            .map_err(|e| io("mmap", e))?;
        Ok(MmapMedium { map, skip, persist })
    }

    /// Maps `path` choosing the persistence from the file: cache-line
    /// write-back when the file is on a DAX filesystem (a `MAP_SYNC` mapping
    /// of it succeeds; its blocks are then allocated and synced up front so
    /// no page fault has metadata to persist), `msync` otherwise.
    pub fn open_auto(path: &std::path::Path, len: u64) -> Result<Self, Error> {
        let medium = MmapMedium::open(path, len, Persist::Msync)?;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path);
        let io = |context: &str, source| Error::Io { context: format!("{}: {context}", path.display()), source };
        let file = file.map_err(|e| io("open", e))?;
        if !is_dax_at(&file, 0, len as usize) {
            return Ok(medium);
        }
        // SAFETY: posix_fallocate on an open, writable descriptor.
        let rc = unsafe { libc::posix_fallocate(std::os::fd::AsRawFd::as_raw_fd(&file), 0, len as libc::off_t) };
        if rc != 0 {
            return Err(io("allocate", std::io::Error::from_raw_os_error(rc)));
        }
        file.sync_all().map_err(|e| io("fsync", e))?;
        Ok(MmapMedium { persist: Persist::CacheLines, ..medium })
    }

    /// How this mapping is persisted.
    pub fn persist(&self) -> Persist {
        self.persist
    }
}

#[cfg(unix)]
impl Medium for MmapMedium {
    fn len(&self) -> u64 {
        (self.map.len() - self.skip) as u64
    }

    fn view(&self, offset: u64, len: u64) -> Result<&[u8], Error> {
        view_of(&self.map[self.skip..], offset, len)
    }

    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), Error> {
        store_into(&mut self.map[self.skip..], offset, data)
    }

    fn flush(&mut self, offset: u64, len: u64) -> Result<(), Error> {
        check_range(self.len(), offset, len)?;
        let at = offset + self.skip as u64;
        match self.persist {
            Persist::Msync => self
                .map
                .flush_range(at as usize, len as usize)
                .map_err(|source| Error::Io { context: "msync".into(), source }),
            Persist::CacheLines => {
                for line in lines_covering(at, len) {
                    cache::write_back(self.map[line..].as_ptr());
                }
                Ok(())
            }
        }
    }

    fn fence(&mut self) -> Result<(), Error> {
        if self.persist == Persist::CacheLines {
            cache::fence();
        }
        Ok(())
    }
}

/// The start of every cache line holding a byte of `[offset, offset + len)`:
/// what a cache-line flush must write back (a line missed here is a
/// commit acknowledged but not durable, which no page-cache read can see).
fn lines_covering(offset: u64, len: u64) -> impl Iterator<Item = usize> {
    let start = offset as usize / LINE * LINE;
    (start..(offset + len) as usize).step_by(LINE)
}

/// Whether `file` is on a DAX filesystem: Linux maps it with `MAP_SYNC`
/// only then (probed over `len` bytes from the page-aligned `offset`).
#[cfg(target_os = "linux")]
fn is_dax_at(file: &std::fs::File, offset: u64, len: usize) -> bool {
    use std::os::fd::AsRawFd;
    let flags = libc::MAP_SHARED_VALIDATE | libc::MAP_SYNC;
    // SAFETY: a probe mapping of an open descriptor, unmapped at once; nothing reads it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            file.as_raw_fd(),
            offset as libc::off_t,
        );
        if p == libc::MAP_FAILED {
            return false;
        }
        libc::munmap(p, len);
    }
    true
}

#[cfg(all(unix, not(target_os = "linux")))]
fn is_dax_at(_: &std::fs::File, _: u64, _: usize) -> bool {
    false
}

/// Cache-line write-back and store fence for the running CPU.
#[cfg(unix)]
mod cache {
    #[cfg(target_arch = "x86_64")]
    fn has(bit: u32) -> bool {
        // CPUID leaf 7 reads as zeros on CPUs too old to have it: no CLWB, no CLFLUSHOPT.
        let leaf7 = core::arch::x86_64::__cpuid_count(7, 0);
        leaf7.ebx & (1 << bit) != 0
    }

    /// Writes back the line holding `p` (which stays valid in the cache when CLWB exists).
    pub fn write_back(p: *const u8) {
        #[cfg(target_arch = "x86_64")]
        {
            use std::sync::OnceLock;
            static KIND: OnceLock<u8> = OnceLock::new();
            match *KIND.get_or_init(|| {
                if has(24) {
                    2
                } else if has(23) {
                    1
                } else {
                    0
                }
            }) {
                // SAFETY: `p` points into a live mapping; CLWB/CLFLUSHOPT were detected by CPUID.
                2 => unsafe { core::arch::asm!("clwb [{}]", in(reg) p, options(nostack, preserves_flags)) },
                // SAFETY: as above.
                1 => unsafe { core::arch::asm!("clflushopt [{}]", in(reg) p, options(nostack, preserves_flags)) },
                // SAFETY: CLFLUSH is part of SSE2, present on every x86_64 CPU; `p` is mapped.
                _ => unsafe { core::arch::x86_64::_mm_clflush(p) },
            }
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: DC CVAC cleans the line holding a mapped address to the point of coherency.
        unsafe {
            core::arch::asm!("dc cvac, {}", in(reg) p, options(nostack, preserves_flags))
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        let _ = p;
    }

    /// Orders the write-backs before every later store.
    pub fn fence() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SFENCE is part of SSE, present on every x86_64 CPU.
        unsafe {
            core::arch::x86_64::_mm_sfence()
        }
        #[cfg(target_arch = "aarch64")]
        // SAFETY: DSB SY has no operands and no memory-safety effect.
        unsafe {
            core::arch::asm!("dsb sy", options(nostack, preserves_flags))
        }
        #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::{lines_covering, LINE};

    /// The crash simulator the harness trusts: the dirty lines are exactly
    /// the lines written and not yet made durable, and a crash image holds
    /// the durable bytes plus exactly the reached lines — the torn one only
    /// in the words its mask names.
    #[test]
    fn crash_images_hold_exactly_the_lines_and_words_that_reached_the_medium() {
        use super::{Medium, SimMedium};
        let mut m = SimMedium::new(8 * LINE);
        m.write(0, &[1u8; LINE]).unwrap();
        m.flush(0, LINE as u64).unwrap();
        m.fence().unwrap(); // line 0 durable
        m.write(2 * LINE as u64, &[2u8; LINE]).unwrap();
        m.write(5 * LINE as u64 + 8, &[5u8; 16]).unwrap(); // words 1 and 2 of line 5
        assert_eq!(m.dirty_lines(), [2, 5]);
        let image = m.crash_image(&[], None);
        assert!(image[..LINE].iter().all(|&b| b == 1) && image[LINE..].iter().all(|&b| b == 0));
        let image = m.crash_image(&[2], None);
        assert!(image[2 * LINE..3 * LINE].iter().all(|&b| b == 2));
        assert!(image[3 * LINE..].iter().all(|&b| b == 0), "only the reached line");
        // Line 2 torn: words 0 and 3 reached (mask 0b1001), the rest did not.
        let image = m.crash_image(&[2, 5], Some((2, 0b1001)));
        let word = |w: usize| &image[2 * LINE + 8 * w..2 * LINE + 8 * w + 8];
        assert!(word(0) == [2; 8] && word(3) == [2; 8]);
        assert!([1, 2, 4, 5, 6, 7].iter().all(|&w| word(w) == [0; 8]), "words outside the mask stay old");
        assert!(image[5 * LINE + 8..5 * LINE + 24].iter().all(|&b| b == 5), "line 5 whole");
        assert!(image[5 * LINE..5 * LINE + 8].iter().all(|&b| b == 0));
    }

    /// A flush makes durable (at the next fence) only the lines of its range,
    /// and every store, flush and fence is one crash point (`events`).
    #[test]
    fn a_flush_covers_only_its_lines_and_each_call_is_one_crash_point() {
        use super::{Medium, SimMedium};
        let mut m = SimMedium::new(4 * LINE);
        m.write(0, &[1u8; LINE]).unwrap();
        m.write(2 * LINE as u64, &[2u8; LINE]).unwrap();
        m.flush(2 * LINE as u64, LINE as u64).unwrap();
        m.fence().unwrap();
        assert_eq!(m.events, 4);
        assert_eq!(m.dirty_lines(), [0], "line 0 was not flushed");
        assert!(m.durable()[..LINE].iter().all(|&b| b == 0));
        assert!(m.durable()[2 * LINE..3 * LINE].iter().all(|&b| b == 2));
    }

    /// A new file medium is its full length on disk at once (zeros written
    /// and synced, so no later flush allocates); a mapped file that is not
    /// on DAX is persisted with msync.
    #[cfg(unix)]
    #[test]
    fn new_log_files_are_extended_up_front_and_non_dax_maps_use_msync() {
        use super::{MmapMedium, Persist};
        use crate::bytelog::FileMedium;
        let dir = std::env::temp_dir().join(format!("csumkit-medium-open-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("file-log");
        let _ = std::fs::remove_file(&path);
        drop(FileMedium::open(&path, 3 * 4096).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 3 * 4096);
        let mapped = MmapMedium::open_auto(&dir.join("mapped-log"), 8192).unwrap();
        assert_eq!(mapped.persist(), Persist::Msync, "the temp dir is not DAX");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// `Medium::is_empty` (a default method nothing else calls) says what
    /// `len` says.
    #[test]
    fn a_medium_is_empty_only_without_bytes() {
        use super::{Medium, SimMedium};
        assert!(SimMedium::new(0).is_empty());
        assert!(!SimMedium::new(64).is_empty());
    }

    /// Every byte of a flushed range lies in a written-back line, and no
    /// line outside the range is written back: ranges of every length
    /// 0..=300 at every offset 0..200 (line-aligned or not, ending on a
    /// line boundary or not).
    #[test]
    fn cache_line_write_back_covers_exactly_the_range() {
        for offset in 0..200u64 {
            for len in 0..=300u64 {
                let lines: Vec<usize> = lines_covering(offset, len).collect();
                for byte in offset..offset + len {
                    let line = byte as usize / LINE * LINE;
                    assert!(lines.contains(&line), "[{offset}, +{len}): line {line} of byte {byte} not written back");
                }
                for &line in &lines {
                    let (from, to) = (line as u64, (line + LINE) as u64);
                    assert!(from < offset + len && offset < to, "[{offset}, +{len}): line {line} is outside it");
                }
            }
        }
    }
}

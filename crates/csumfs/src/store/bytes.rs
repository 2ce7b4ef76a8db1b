//! The image's bytes as the volume holds them: a map of the file (shared
//! and writable when opened for writing, or private with a ByteLog), or
//! bytes in memory.

use crate::store::private_map::{PrivateMap, PAGE};

/// The image's bytes: a map of the file (shared and writable when the
/// volume is opened for writing), or bytes in memory.
pub(crate) enum Bytes {
    Map(memmap2::Mmap),
    /// A shared writable map and its file: `sync` is the file's
    /// `fdatasync`, which writes the pages the map dirtied without walking
    /// the whole map as `msync` does (hundreds of milliseconds at 40 GiB).
    MapMut(memmap2::MmapMut, std::fs::File),
    /// A private (copy-on-write) map: stores stay in this process; a
    /// ByteLog makes them durable and checkpoints put them in the file.
    Private(PrivateMap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(map) => map,
            Bytes::MapMut(map, _) => map,
            Bytes::Private(map) => map.bytes(),
            Bytes::Owned(bytes) => bytes,
        }
    }
}

impl Bytes {
    /// Tells the kernel the map is read at random: a page fault reads that
    /// page, not the device's readahead window around it. Metadata is read
    /// at random, and a fault in a region never read (new blocks of a
    /// sparse image) would otherwise zero-fill the whole readahead window
    /// (`read_ahead_kb`, megabytes on many disks). File data asks for readahead of what
    /// it is about to copy ([`will_need`](Self::will_need)).
    pub(crate) fn advise_random(&self) {
        let _ = match self {
            Bytes::Map(map) => map.advise(memmap2::Advice::Random),
            Bytes::MapMut(map, _) => map.advise(memmap2::Advice::Random),
            Bytes::Private(map) => map.advise_random(),
            Bytes::Owned(_) => Ok(()),
        };
    }

    /// Starts reading `[at, at + len)` of the map in (one request, not a
    /// fault per page); for file data about to be copied out.
    pub(crate) fn will_need(&self, at: usize, len: usize) {
        let (start, end) = (at / PAGE * PAGE, (at + len).min(self.len()));
        if end <= start {
            return;
        }
        let _ = match self {
            Bytes::Map(map) => map.advise_range(memmap2::Advice::WillNeed, start, end - start),
            Bytes::MapMut(map, _) => map.advise_range(memmap2::Advice::WillNeed, start, end - start),
            Bytes::Private(map) => map.will_need(start, end - start),
            Bytes::Owned(_) => Ok(()),
        };
    }

    /// Whether every page of `[at, at + len)` is in memory (the page cache,
    /// or this process's copy): touching it reads no device.
    pub(crate) fn in_memory(&self, at: usize, len: usize) -> bool {
        if matches!(self, Bytes::Owned(_)) {
            return true;
        }
        let map: &[u8] = self;
        let (start, end) = (at / PAGE * PAGE, (at + len).min(map.len()));
        if end <= start {
            return true;
        }
        let mut resident = vec![0u8; (end - start).div_ceil(PAGE)];
        // SAFETY: a page-aligned range inside this map; `resident` has a
        // byte per page of it.
        let r =
            unsafe { libc::mincore(map.as_ptr().add(start) as *mut libc::c_void, end - start, resident.as_mut_ptr()) };
        r == 0 && resident.iter().all(|&b| b & 1 == 1)
    }

    /// The bytes to change; `None` on a read-only map.
    pub(crate) fn writable(&mut self) -> Option<&mut [u8]> {
        match self {
            Bytes::Map(_) => None,
            Bytes::MapMut(map, _) => Some(map),
            Bytes::Private(map) => Some(map.bytes_mut()),
            Bytes::Owned(bytes) => Some(bytes),
        }
    }
}

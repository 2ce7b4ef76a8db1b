//! Opening an image: the superblock's geometry (shared with the checker:
//! `csumkit::ext4::Layout`), the features this code reads, and bounds-checked
//! block access.

use crate::error::{corrupt, Error};
use crate::private_map::PAGE;
use crate::reserve::Caller;
use crate::stats::Stats;
use csumkit::ext4::{Features, Layout};
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Mutex;

/// How to open a volume.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Verify each metadata checksum as its structure is read (the kernel
    /// does; off only to read past damage, like `e2fsck -n` would).
    pub verify_checksums: bool,
    /// Open for writing (`Volume::create`, `mkdir`, `write`, …).
    pub write: bool,
    /// Recompute every checksum the writer moves incrementally and panic
    /// on a difference (always on in debug builds): the test mode.
    pub check_updates: bool,
    /// How the writer keeps checksums current.
    pub checksums: Checksums,
}

/// How the writer keeps metadata checksums current.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Checksums {
    /// Moved by `flip_range` and `splice` over what changed.
    #[default]
    Incremental,
    /// Recomputed over every byte each covers, as e2fsprogs and the kernel
    /// do: the comparison `csumkit bench ext4` measures against.
    Full,
}

impl Default for Options {
    fn default() -> Self {
        Options { verify_checksums: true, write: false, check_updates: false, checksums: Checksums::Incremental }
    }
}

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
    Private(crate::private_map::PrivateMap),
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
    /// sparse image) would otherwise zero-fill megabytes (`read_ahead_kb`
    /// is 8 MiB on this VM's disk: a 1 GiB fallocate took 3–8 ms, most of
    /// it memset of readahead pages). File data asks for readahead of what
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

/// An ext4 image with `metadata_csum`, opened read-only.
pub struct Volume {
    pub(crate) map: Bytes,
    /// Shared, so the operations that hold it across `&mut self` calls
    /// take a reference count, not a copy of every descriptor offset.
    pub(crate) layout: std::sync::Arc<Layout>,
    pub(crate) options: Options,
    /// `s_hash_seed`, `s_def_hash_version` and whether hashes are unsigned.
    pub(crate) hash: crate::hash::HashSetup,
    /// Per-inode xattr name filters, built on first use.
    pub(crate) filters: Mutex<HashMap<u32, csumkit::xattr_filter::Filter>>,
    /// Directory blocks (leaves and index nodes) whose checksum has been verified, as
    /// (block, directory's seed): not verified again on every lookup (the
    /// kernel's `buffer_verified`). Every write of one keeps it valid.
    pub(crate) verified_dir_blocks: Mutex<std::collections::HashSet<(u64, u32)>>,
    pub(crate) stats: std::sync::Arc<Stats>,
    /// Open handles per inode ([`Volume::hold`]).
    pub(crate) holds: HashMap<u32, u32>,
    /// Held inodes whose last name is gone: freed at their last unhold.
    pub(crate) orphans: HashSet<u32>,
    /// Data checksums, when kept ([`Volume::enable_data_checksums`]).
    pub(crate) datasums: Option<crate::datasum::DataSums>,
    /// Whose allocations the operations are (reserve.rs).
    pub(crate) caller: Caller,
    /// All-or-nothing operations, when on ([`Volume::enable_undo`]).
    pub(crate) undo: Option<crate::undo::UndoLog>,
    /// Metadata made durable through a ByteLog ([`Volume::open_logged`]).
    pub(crate) redo: Option<crate::redo::Redo>,
    /// Data checksum changes a ByteLog replay found, for the sidecar.
    pub(crate) replayed_sums: Vec<(u64, Option<u32>)>,
    /// ext4's multiple-mount protection while the volume writes an image
    /// with the `mmp` feature (`mmp.rs`). Dropped before the lock: a
    /// process waiting for the lock then finds the sequence `CLEAN`.
    pub(crate) mmp: Option<crate::mmp::MultiMountProtection>,
    /// The image file's lock while the volume is open (none in memory).
    pub(crate) image_lock: Option<crate::image_lock::ImageLock>,
    /// Free-space trees (`csumkit::alloc`) of the groups blocks
    /// were allocated from, built from their bitmaps on first use and kept
    /// in step by every bit the allocator flips; dropped when a bitmap
    /// changes otherwise (initialised, rolled back).
    pub(crate) free_space: HashMap<u64, csumkit::alloc::FreeSpace>,
    /// The same for inodes: free inode runs per group, from its inode
    /// bitmap, kept in step by every inode bit flipped.
    pub(crate) free_inodes: HashMap<u64, csumkit::alloc::FreeSpace>,
    /// The PI device the image is on, when data integrity is kept in PI
    /// ([`Volume::enable_pi`]).
    pub(crate) pi: Option<std::sync::Arc<csumkit::pi::Device>>,
    /// An inode marked for synchronous updates (`chattr +S`, a directory's
    /// `+D`) changed since [`Volume::take_synchronous`] last looked.
    pub(crate) synchronous: bool,
    /// Synchronous flags every inode counts as having (`mount -o sync`,
    /// `-o dirsync`: [`Volume::set_mount_sync`]).
    pub(crate) mount_sync_flags: u32,
}

/// (feature bit, name, remedy) of the incompat features this code refuses.
const REFUSED_INCOMPAT: [(u32, &str, &str); 6] = [
    (
        crate::redo::LOG_PENDING,
        "csumfs_log",
        "a csumkit mount has it, or stopped before its ByteLog (IMAGE.bytelog) was folded in (the log may hold \
         changes the image lacks): unmount it, or run `csumkit ext4 checkpoint IMAGE` (or mount it with csumkit \
         mount again)",
    ),
    (
        crate::undo::UNDO_PENDING,
        "csumfs_undo",
        "a csumkit mount -o log=off has it, or stopped with IMAGE.undo in use (an operation may be half done): \
         unmount it, or run `csumkit ext4 checkpoint IMAGE` (or mount it with csumkit mount again)",
    ),
    (
        Features::INCOMPAT_RECOVER,
        "needs_recovery",
        "the kernel has it mounted read-write, or its journal holds transactions not yet replayed: unmount it, or \
         run e2fsck (or mount it once with the kernel)",
    ),
    (0x1000, "dirdata", "directory entries with extra data are not read here"),
    (0x1_0000, "encrypt", "encrypted names and data are not read here"),
    (0x2_0000, "casefold", "case-insensitive lookups are not implemented here"),
];
/// Incompat features read here: filetype, journal_dev, meta_bg, extents,
/// 64bit, mmp, flex_bg, ea_inode, csum_seed, large_dir, inline_data.
const KNOWN_INCOMPAT: u32 = 0x2 | 0x8 | 0x10 | 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x2000 | 0x4000 | 0x8000;

impl Volume {
    /// Opens the image at `path` (a file or block device) read-only.
    ///
    /// # Errors
    /// [`Error::Io`] when it cannot be read; [`Error::Format`] when it is not
    /// an ext4 image with `metadata_csum`; [`Error::Unsupported`] naming a
    /// feature this code does not read, with a remedy.
    pub fn open(path: &Path, options: Options) -> Result<Volume, Error> {
        let io = |source| Error::Io { context: path.display().to_string(), source };
        let file = csumkit::file::open_image(path, options.write)?;
        let image_lock = crate::image_lock::ImageLock::take(&file, path, options.write)?;
        // An image changed underneath by another process gives wrong bytes,
        // which every read bounds-checks (never undefined behaviour in safe
        // code here); csumfs is the image's only writer while open.
        let (map, mmp) = if options.write {
            // SAFETY: as above.
            let mapped = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(io)?;
            // Another node's hold is named before what its mount left on disk.
            let mmp = crate::MultiMountProtection::take(&file, path, &mapped)?;
            (Bytes::MapMut(mapped, file), mmp)
        } else {
            // SAFETY: as above.
            (Bytes::Map(unsafe { memmap2::Mmap::map(&file) }.map_err(io)?), None)
        };
        let mut volume = Volume::new(map, options)?;
        volume.image_lock = image_lock;
        volume.mmp = mmp;
        Ok(volume)
    }

    /// A volume over an image in memory (tests, fuzzing).
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn from_bytes(bytes: Vec<u8>, options: Options) -> Result<Volume, Error> {
        Volume::new(Bytes::Owned(bytes), options)
    }

    pub(crate) fn new(map: Bytes, options: Options) -> Result<Volume, Error> {
        let layout = Layout::parse(&map)?;
        let sb = &map[1024..2048];
        let mut incompat = layout.features.incompat;
        if options.write && !matches!(map, Bytes::Private(_)) {
            // Opened to write in place (a ByteLog's private map is not):
            // `enable_undo` undoes what the mark says a stopped process
            // left, and keeps the mark.
            incompat &= !crate::undo::UNDO_PENDING;
        }
        if let Some((_, feature, remedy)) = REFUSED_INCOMPAT.iter().find(|(bit, _, _)| incompat & bit != 0) {
            return Err(Error::Unsupported { feature, remedy });
        }
        if incompat & !KNOWN_INCOMPAT & !REFUSED_INCOMPAT.iter().fold(0, |a, (b, _, _)| a | b) != 0 {
            return Err(Error::Unsupported {
                feature: "an incompat feature unknown here",
                remedy: "the image needs a newer ext4 reader",
            });
        }
        if options.write {
            crate::write::refuse_for_writing(&layout, &map)?;
        }
        map.advise_random();
        Ok(Volume {
            hash: crate::hash::HashSetup::from_superblock(sb),
            map,
            layout: std::sync::Arc::new(layout),
            options,
            filters: Mutex::new(HashMap::new()),
            verified_dir_blocks: Mutex::new(std::collections::HashSet::new()),
            free_space: HashMap::new(),
            free_inodes: HashMap::new(),
            stats: std::sync::Arc::default(),
            holds: HashMap::new(),
            orphans: HashSet::new(),
            datasums: None,
            undo: None,
            caller: Caller::Unrestricted,
            redo: None,
            replayed_sums: Vec::new(),
            image_lock: None,
            mmp: None,
            pi: None,
            synchronous: false,
            mount_sync_flags: 0,
        })
    }

    /// The geometry.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// Counters of what the reader did (xattr filter hits and so on).
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Metadata block `block` (a directory, extent, index, xattr or bitmap
    /// block), bounds-checked as the kernel's `ext4_sb_block_valid` does:
    /// none lies at or before the first data block (the superblock's).
    pub(crate) fn block(&self, block: u64, what: &dyn Fn() -> String) -> Result<&[u8], Error> {
        let bs = self.layout.block_size;
        if block <= self.layout.first_data_block || block >= self.layout.blocks_count {
            return Err(corrupt(
                what(),
                format!(
                    "block {block} is outside the filesystem's data area (blocks {} to {})",
                    self.layout.first_data_block + 1,
                    self.layout.blocks_count - 1
                ),
            ));
        }
        let at = (block * bs) as usize;
        self.map
            .get(at..at + bs as usize)
            .ok_or_else(|| corrupt(what(), format!("block {block} is past the image end")))
    }

    /// `len` bytes at byte `at`, bounds-checked.
    pub(crate) fn bytes(&self, at: u64, len: usize, what: &dyn Fn() -> String) -> Result<&[u8], Error> {
        usize::try_from(at)
            .ok()
            .and_then(|start| self.map.get(start..start.checked_add(len)?))
            .ok_or_else(|| corrupt(what(), format!("bytes [{at}, +{len}) are past the image end")))
    }

    /// Compares a stored checksum with the recomputed one, when verifying.
    pub(crate) fn verify(&self, what: &dyn Fn() -> String, stored: u32, computed: u32) -> Result<(), Error> {
        if self.options.verify_checksums && stored != computed {
            return Err(Error::Checksum { what: what(), stored, computed });
        }
        Ok(())
    }

    /// `statfs`, counted as the kernel's `ext4_statfs` counts: the blocks
    /// the format's own structures take are not the file system's, and the
    /// blocks available to users leave out the reserved count and ext4's
    /// reserve for extent-tree growth (`ext4_calculate_resv_clusters`: 2 %
    /// of the clusters or 4096, whichever is fewer; none without extents).
    pub fn statfs(&self) -> StatFs {
        let l = &self.layout;
        let free_blocks = self.free_and_reserved_blocks().0;
        let free_inodes = u32::from_le_bytes(self.map[1024 + 0x10..1024 + 0x14].try_into().expect("4 bytes"));
        StatFs {
            block_size: l.block_size,
            blocks: l.blocks_count.saturating_sub(self.overhead_blocks()),
            free_blocks,
            available_blocks: free_blocks.saturating_sub(self.held_back_blocks(Caller::Unprivileged)),
            inodes: l.inodes_count,
            free_inodes: u64::from(free_inodes),
            name_max: 255,
        }
    }

    /// Blocks the format's structures take, as `ext4_calculate_overhead`
    /// counts them: all before the first data block; in each group its
    /// superblock copy and descriptor blocks, two bitmaps and an inode
    /// table; an internal journal. Under bigalloc (read-only here) the
    /// superblock's `s_overhead_clusters` where mke2fs wrote it; elsewhere
    /// the kernel ignores that field, and so does this.
    fn overhead_blocks(&self) -> u64 {
        let l = &self.layout;
        let sb = &self.map[1024..2048];
        let le32 = |at: usize| u32::from_le_bytes(sb[at..at + 4].try_into().expect("4 bytes"));
        let (cluster, stored) = (self.cluster_blocks(), u64::from(le32(0x248)));
        // The kernel's own test of "ridiculous": clusters against blocks.
        if cluster > 1 && stored != 0 && stored <= l.blocks_count {
            return stored * cluster;
        }
        let table = (l.inodes_per_group * l.inode_size).div_ceil(l.block_size);
        let groups: u64 = (0..l.groups).map(|g| l.base_meta_blocks(g) + table + 2).sum();
        let journal_inode = le32(0xE0);
        let journal = if l.features.compat & Features::COMPAT_HAS_JOURNAL != 0 && journal_inode != 0 {
            self.inode(journal_inode).map_or(0, |j| j.size / l.block_size)
        } else {
            0
        };
        l.first_data_block + groups + journal
    }

    /// Blocks per allocation cluster (1 without bigalloc).
    pub(crate) fn cluster_blocks(&self) -> u64 {
        (self.layout.blocks_per_group / self.layout.clusters_per_group.max(1)).max(1)
    }
}

/// What `statfs` reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatFs {
    /// Bytes per block.
    pub block_size: u64,
    /// Blocks in the filesystem.
    pub blocks: u64,
    /// Free blocks (the superblock's count).
    pub free_blocks: u64,
    /// Free blocks an unprivileged user may take (`f_bavail`).
    pub available_blocks: u64,
    /// Inodes.
    pub inodes: u64,
    /// Free inodes.
    pub free_inodes: u64,
    /// Longest name.
    pub name_max: u32,
}

#[cfg(test)]
mod tests {
    use super::Bytes;
    use std::os::fd::AsRawFd;

    /// `in_memory` tells a page the file has cached (or this process
    /// copied) from one it would read from the device.
    #[test]
    fn in_memory_follows_the_page_cache_and_the_private_copy() {
        let path = std::env::temp_dir().join(format!("csumfs-in-memory-{}", std::process::id()));
        std::fs::write(&path, vec![1u8; 16 * 4096]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        file.sync_all().unwrap();
        // SAFETY: statfs into a zeroed struct of its own type.
        let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
        // SAFETY: an open descriptor and a statfs of the kernel's layout to fill.
        if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } == 0 && fs.f_type == libc::TMPFS_MAGIC {
            assert!(std::env::var_os("CI").is_none(), "CI's temp dir must be on a disk's filesystem");
            eprintln!("SKIPPED in_memory_follows_the_page_cache_and_the_private_copy: the temp dir is tmpfs");
            let _ = std::fs::remove_file(&path);
            return;
        }
        let mut bytes = Bytes::Private(crate::private_map::PrivateMap::new(&file).unwrap());
        bytes.advise_random();
        // SAFETY: a plain syscall on an open descriptor: drops its clean, unmapped pages.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert!(!bytes.in_memory(0, 16 * 4096), "dropped from the page cache");
        assert!(bytes.in_memory(0, 0) && bytes.in_memory(1 << 30, 4096), "nothing, or nothing of the map");
        assert_eq!(bytes[5 * 4096], 1); // a fault reads that page
        assert!(bytes.in_memory(5 * 4096 + 100, 200));
        assert!(!bytes.in_memory(5 * 4096, 2 * 4096), "its neighbour is not read (advised random)");
        // A private copy of one page.
        bytes.writable().unwrap()[9 * 4096] = 2;
        // SAFETY: as above.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        assert!(bytes.in_memory(9 * 4096, 4096), "this process's copy stays");
        assert!(Bytes::Owned(vec![0; 10]).in_memory(0, 10));
        std::fs::remove_file(&path).unwrap();
    }
}

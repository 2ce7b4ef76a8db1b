//! Opening an image: the superblock's geometry (shared with the checker:
//! `csumkit::ext4::Layout`), the features this code reads, and bounds-checked
//! block access.

use crate::error::{corrupt, Error};
use crate::format::features::{KNOWN_INCOMPAT, REFUSED_INCOMPAT};
use crate::stats::Stats;
use crate::store::bytes::Bytes;
use crate::store::journal_replay::{self, JournalReplayed};
use csumkit::ext4::Layout;
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

/// Where file data is written and what `sync` makes durable: chosen once,
/// as the volume is set up for writing ([`Volume::enable_pi`],
/// [`Volume::enable_log`]), and followed by every data store
/// (`txn/stores.rs`) and sync.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum DataPath {
    /// In the image, in place; `sync` is `fdatasync` of the image file.
    #[default]
    InPlace,
    /// Through the PI device, which computes each block's tuple; `sync`
    /// flushes the device.
    Pi,
    /// Through the ByteLog (small writes, pages whose metadata changed
    /// since the last checkpoint) or ahead of it in place — through the
    /// PI device when `pi`; `sync` is one log commit.
    Log {
        /// In-place writes go through the PI device.
        pi: bool,
    },
}

/// Whose allocations the operations under way are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Caller {
    /// Every free block (the library's own use; removals, which ext4
    /// lets dip into its reserve too).
    #[default]
    Unrestricted,
    /// `s_def_resuid`, `s_def_resgid`'s members, `CAP_SYS_RESOURCE`: all
    /// but ext4's reserve for extent-tree growth.
    Privileged,
    /// Anyone else: all but the reserved blocks and that reserve.
    Unprivileged,
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
    /// Where file data goes and what `sync` flushes.
    pub(crate) data_path: DataPath,
    /// Data checksums, when kept ([`Volume::enable_data_checksums`]).
    pub(crate) datasums: Option<crate::store::data_sums::DataSums>,
    /// Whose allocations the operations are (reserve.rs).
    pub(crate) caller: Caller,
    /// All-or-nothing operations, when on ([`Volume::enable_undo`]).
    pub(crate) undo: Option<crate::store::undo_log::UndoLog>,
    /// Metadata made durable through a ByteLog ([`Volume::open_logged`]).
    pub(crate) redo: Option<crate::store::redo_log::Redo>,
    /// Data checksum changes a ByteLog replay found, for the sidecar.
    pub(crate) replayed_sums: Vec<(u64, Option<u32>)>,
    /// ext4's multiple-mount protection while the volume writes an image
    /// with the `mmp` feature (`store/mmp.rs`). Dropped before the lock: a
    /// process waiting for the lock then finds the sequence `CLEAN`.
    pub(crate) mmp: Option<crate::store::mmp::MultiMountProtection>,
    /// The image file's lock while the volume is open (none in memory).
    pub(crate) image_lock: Option<crate::store::image_lock::ImageLock>,
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
    /// What of the kernel's journal the open replayed: in memory for a
    /// read-only open, into the image for a writable one.
    pub(crate) journal_replayed: Option<JournalReplayed>,
    /// Every byte range written since it was set: what a fast-commit
    /// replay changed, to be logged as one jbd2 transaction.
    pub(crate) written: Option<crate::ranges::RangeSet>,
    /// Synchronous flags every inode counts as having (`mount -o sync`,
    /// `-o dirsync`: [`Volume::set_mount_sync`]).
    pub(crate) mount_sync_flags: u32,
}

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
        let image_lock = crate::store::image_lock::ImageLock::take(&file, path, options.write)?;
        // What the kernel left in its journal goes home before anything
        // else reads the image.
        let replayed = if options.write { crate::txn::journal::recover_held(&file, path)? } else { None };
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
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            if journal_replay::needs_recovery(&map) {
                // What the kernel left in its journal, replayed over a
                // private copy of the pages it touches: the file keeps
                // every byte.
                drop(map);
                let copy = crate::store::private_map::PrivateMap::new(&file).map_err(io)?;
                let mut volume = Volume::recovered_in_memory(Bytes::Private(copy), options)?;
                volume.image_lock = image_lock;
                return Ok(volume);
            }
            (Bytes::Map(map), None)
        };
        let mut volume = Volume::new(map, options)?;
        volume.image_lock = image_lock;
        volume.mmp = mmp;
        volume.journal_replayed = replayed;
        Ok(volume)
    }

    /// A volume over an image in memory (tests, fuzzing), the kernel's
    /// journal replayed into it first if it needs recovery.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn from_bytes(bytes: Vec<u8>, options: Options) -> Result<Volume, Error> {
        if journal_replay::needs_recovery(&bytes) {
            return Volume::recovered_in_memory(Bytes::Owned(bytes), options);
        }
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
            incompat &= !crate::format::features::UNDO_PENDING;
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
            crate::format::features::refuse_for_writing(&layout, &map)?;
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
            data_path: DataPath::InPlace,
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
            journal_replayed: None,
            written: None,
        })
    }

    /// What the open replayed from the kernel's journal, when the image
    /// needed recovery: into this view alone (a read-only open: the file
    /// is as it was) or into the image (a writable one).
    pub fn journal_replayed(&self) -> Option<JournalReplayed> {
        self.journal_replayed
    }

    /// The image's bytes as this volume reads them: for an image that
    /// needed recovery, the filesystem as its journal's replay (in memory,
    /// for a read-only open) leaves it — how `csumkit ext4 check` checks
    /// one.
    pub fn image(&self) -> &[u8] {
        &self.map
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

    /// Blocks per allocation cluster (1 without bigalloc).
    pub(crate) fn cluster_blocks(&self) -> u64 {
        (self.layout.blocks_per_group / self.layout.clusters_per_group.max(1)).max(1)
    }
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
        let mut bytes = Bytes::Private(crate::store::private_map::PrivateMap::new(&file).unwrap());
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

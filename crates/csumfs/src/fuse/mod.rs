//! The volume served to the kernel over FUSE (the `fuser` crate, pure
//! Rust: `fusermount3` does the mount): every request is one call into
//! [`Volume`] under a reader-writer lock — lookups, reads and directory
//! listings in parallel, changes one at a time.
//!
//! FUSE numbers the root 1; ext4 numbers it 2 and never exposes inode 1
//! (the bad-blocks inode), so the two are swapped and every other number
//! passes through. Permissions are checked by the kernel
//! (`default_permissions`, always on); attributes and entries are cached
//! by the kernel for `Fs::ttl` — csumfs is the image's only writer.
//!
//! Here: the server (`Fs`, its mount options, the lock and sync helpers);
//! `ops.rs`: the request table; `convert`, `creds`, `ioctl`, `errno`: the
//! pure rules the requests share.

mod convert;
mod creds;
mod errno;
mod ioctl;
mod ops;

use crate::error::Error;
use crate::inode::table::Inode;
use crate::stats::Stats;
use crate::txn::group_sync::GroupSync;
use crate::{Caller, DirEntry, NewInode, Volume};
use convert::{kind, system_time, to_fuse};
use creds::{CAP_FSETID, CAP_SYS_RESOURCE};
use errno::errno;
use fuser::{Errno, FileAttr, FileHandle, Generation, ReplyEntry, Request};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The root's virtual xattr holding the per-seed counters.
pub const STATS_XATTR: &str = "csumfs.stats";

/// How the volume is mounted.
#[derive(Clone, Debug)]
pub struct MountOptions {
    /// Refuse every change (`-o ro`): the volume is opened read-only.
    pub read_only: bool,
    /// Let every user in (`allow_other`; root's requests always come in).
    pub allow_other: bool,
    /// Threads reading requests from `/dev/fuse` (through io_uring, one per
    /// CPU serves them instead; these then get forgets and interrupts).
    pub threads: usize,
    /// How long the kernel may cache attributes and names.
    pub ttl: Duration,
    /// The source shown in `/proc/mounts`.
    pub fsname: String,
    /// The kernel's writeback cache (`FUSE_WRITEBACK_CACHE`): writes land
    /// in the page cache and reach csumfs in page-sized or larger pieces
    /// at writeback, `fsync` or close; the kernel keeps size and mtime
    /// meanwhile and sends them with `setattr`. Small buffered writes then
    /// cost a copy, not a round trip each.
    pub writeback_cache: bool,
    /// Every change durable before it is answered (`-o sync`), as if each
    /// inode were `chattr +S`.
    pub sync_all: bool,
    /// Every change to a directory durable before it is answered (`-o
    /// dirsync`), as if each directory were `chattr +D`.
    pub dirsync: bool,
    /// Requests through FUSE over io_uring where the kernel offers it
    /// (Linux 6.14+ with the `fuse` module's `enable_uring` on; `-o
    /// uring=off` declines): one system call per request instead of a read
    /// and a write of `/dev/fuse`. Elsewhere `/dev/fuse` as without.
    pub uring: bool,
}

/// Ring entries per kernel queue (one queue per CPU): requests a CPU's
/// callers can have in flight at once through io_uring; more wait there.
const URING_QUEUE_DEPTH: usize = 8;

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_only: false,
            allow_other: false,
            threads: 2,
            ttl: Duration::from_secs(1),
            fsname: "csumfs".into(),
            writeback_cache: false,
            sync_all: false,
            dirsync: false,
            uring: true,
        }
    }
}

/// The FUSE filesystem over a shared volume.
pub struct Fs {
    volume: Arc<RwLock<Volume>>,
    block_size: u32,
    read_only: bool,
    ttl: Duration,
    writeback_cache: bool,
    /// Directory listings taken at `opendir`, by handle: `readdir` pages
    /// through one snapshot however the directory changes meanwhile.
    listings: Mutex<HashMap<u64, Vec<DirEntry>>>,
    next_handle: AtomicU64,
    /// `fsync`s (and synchronous changes) that arrive during a sync share
    /// the next one.
    fsyncs: GroupSync<Errno>,
    /// The kernel took `FUSE_HANDLE_KILLPRIV_V2`: csumfs takes the set-ID
    /// bits and capabilities off written, truncated and chowned files,
    /// and the kernel no longer asks for `security.capability` before
    /// every write (a round trip each).
    kill_privileges: bool,
}

/// Mounts `volume` at `mountpoint`; the caller runs the returned session
/// (`run` blocks until unmounted) and syncs the volume after it.
///
/// # Errors
/// What `fusermount3` or `/dev/fuse` report.
pub fn mount(
    volume: Arc<RwLock<Volume>>,
    mountpoint: &Path,
    options: &MountOptions,
) -> std::io::Result<fuser::Session<Fs>> {
    let mut config = fuser::Config::default();
    config.mount_options = vec![
        fuser::MountOption::FSName(options.fsname.clone()),
        fuser::MountOption::Subtype("csumfs".into()),
        fuser::MountOption::DefaultPermissions,
        fuser::MountOption::Dev,
        fuser::MountOption::Suid,
        if options.read_only { fuser::MountOption::RO } else { fuser::MountOption::RW },
    ];
    if options.allow_other {
        config.acl = fuser::SessionACL::All;
    }
    config.n_threads = Some(options.threads.max(1));
    config.clone_fd = options.threads > 1;
    config.io_uring_queue_depth = options.uring.then_some(URING_QUEUE_DEPTH);
    let block_size = {
        let mut volume = volume.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        volume.set_mount_sync(options.sync_all, options.dirsync);
        volume.layout().block_size as u32
    };
    let shared = volume.clone();
    let fs = Fs {
        volume,
        block_size,
        read_only: options.read_only,
        ttl: options.ttl,
        writeback_cache: options.writeback_cache && !options.read_only,
        listings: Mutex::new(HashMap::new()),
        next_handle: AtomicU64::new(1),
        fsyncs: GroupSync::new(Box::new(move |fsyncs| sync_for(&shared, fsyncs))),
        kill_privileges: false,
    };
    fuser::Session::new(fs, mountpoint, &config)
}

/// One sync of `volume` for `fsyncs` waiters (group_sync.rs): the commit
/// is made under the volume's lock, its flushes after it is let go.
fn sync_for(volume: &RwLock<Volume>, fsyncs: usize) -> Result<(), Errno> {
    let lock = || volume.write().unwrap_or_else(std::sync::PoisonError::into_inner);
    let pending = {
        let mut volume = lock();
        Stats::bump(&volume.stats().fsync_syncs);
        Stats::add(&volume.stats().fsync_requests, fsyncs as u64);
        volume.start_sync().map_err(|e| errno(&e))?
    };
    let durable = pending.wait().map_err(|e| errno(&e))?;
    lock().finish_sync(durable).map_err(|e| errno(&e))
}

/// Writes `data` at `offset` of file `ino` as the kernel's
/// `generic_write_checks` allows: a write that starts below the largest
/// file size is cut short there; one that starts at or past it is `EFBIG`
/// (the FUSE mount's own limit is far larger). The bytes written.
fn write_within_limit(v: &mut Volume, ino: u32, offset: u64, data: &[u8]) -> Result<usize, Error> {
    let room = usize::try_from(v.max_file_size().saturating_sub(offset)).unwrap_or(usize::MAX);
    let len = if room == 0 { data.len() } else { data.len().min(room) };
    v.write(ino, offset, &data[..len]).map(|_| len)
}

/// Bytes `copy_file_range` reads and writes at a time: the memory it holds,
/// and how long other requests wait for the volume's lock between pieces.
const COPY_PIECE: u64 = 8 << 20;

impl Fs {
    fn attr(&self, inode: &Inode) -> FileAttr {
        FileAttr {
            ino: to_fuse(inode.ino),
            size: inode.size,
            blocks: inode.blocks,
            atime: system_time(inode.atime),
            mtime: system_time(inode.mtime),
            ctime: system_time(inode.ctime),
            crtime: system_time(inode.crtime),
            kind: kind(inode.mode),
            perm: inode.mode & 0o7777,
            nlink: u32::from(inode.links),
            uid: inode.uid,
            gid: inode.gid,
            rdev: inode.rdev,
            blksize: self.block_size,
            flags: 0,
        }
    }

    fn entry(&self, inode: &Inode, reply: ReplyEntry) {
        reply.entry(&self.ttl, &self.attr(inode), Generation(u64::from(inode.generation)));
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Volume> {
        self.volume.read().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Runs `op` as one all-or-nothing change of the volume (its undo log
    /// puts back what a failed operation changed; its end may commit or
    /// checkpoint the ByteLog); `EROFS` on a read-only mount.
    fn change<T>(&self, req: &Request, op: impl FnOnce(&mut Volume) -> Result<T, Error>) -> Result<T, Errno> {
        if self.read_only {
            return Err(Errno::EROFS);
        }
        // Judged before the change's lock is taken: it may read /proc.
        let caller = Self::caller(req, &self.read());
        let mut volume = self.volume.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (result, ended) = volume.transaction_apart(|volume| {
            volume.set_caller(caller);
            let result = op(volume);
            volume.set_caller(Caller::Unrestricted);
            result
        });
        if let Err(e) = ended {
            eprintln!("csumfs: ending an operation (undo, or a ByteLog commit or checkpoint): {e}");
            return Err(Errno::EIO);
        }
        let synchronous = volume.take_synchronous();
        drop(volume);
        let value = result.map_err(|e| errno(&e))?;
        if synchronous {
            // chattr +S / +D or -o sync: durable before it is answered,
            // through the same group commit as the fsyncs.
            Stats::bump(&self.read().stats().synchronous_changes);
            self.sync_now()?;
        }
        Ok(value)
    }

    /// Answers `done` once every change made before the call is durable:
    /// callers that arrive during a sync share the next one (group_sync.rs).
    /// The commit is made under the volume's lock, its flushes after it
    /// is let go: the calls that go on meanwhile send the next fsyncs.
    fn sync_then(&self, done: crate::txn::group_sync::Waiter<Errno>) {
        self.fsyncs.submit(done);
    }

    /// [`sync_then`](Self::sync_then), waited for on this thread.
    fn sync_now(&self) -> Result<(), Errno> {
        let (sender, receiver) = std::sync::mpsc::channel();
        // (The receiver waits below: the send cannot fail.)
        self.sync_then(Box::new(move |result| {
            let _ = sender.send(result);
        }));
        // A leader that panicked dropped the answer: EIO, as fuser's.
        receiver.recv().unwrap_or(Err(Errno::EIO))
    }

    /// Owner of a new inode in `parent` (`creds::new_inode_owner`).
    fn new_inode(volume: &Volume, req: &Request, parent: u32, mode: u16) -> Result<NewInode, Error> {
        let dir = volume.inode(parent)?;
        Ok(creds::new_inode_owner(dir.mode, dir.gid, mode, req.uid(), req.gid()))
    }

    /// Whether the caller of `req` is in group `gid` or holds
    /// `CAP_FSETID` — the kernel's `in_group_or_capable`, which FUSE does
    /// not pass along (fuser does not negotiate `FUSE_SETXATTR_EXT`, which
    /// carries it as `FUSE_SETXATTR_ACL_KILL_SGID`).
    fn in_group_or_capable(req: &Request, gid: u32) -> bool {
        req.gid() == gid || Self::in_group_or_has(req, Some(gid), CAP_FSETID)
    }

    /// Whose allocations the request's are (`creds::reserve_caller`).
    fn caller(req: &Request, volume: &Volume) -> Caller {
        creds::reserve_caller(req.uid(), req.gid(), volume.reserved_blocks_owner(), |group| {
            Self::in_group_or_has(req, group, CAP_SYS_RESOURCE)
        })
    }

    /// Inode `ino`'s mode, and the set-ID bits a change by `req` takes off
    /// it (`creds::setid_bits_to_drop`). Reads /proc for set-ID files only:
    /// called before the volume's lock is taken.
    fn setid_to_drop(&self, req: &Request, ino: u32, judged: bool) -> Result<(u16, u16), Errno> {
        let inode = self.read().inode(ino).map_err(|e| errno(&e))?;
        let drop = creds::setid_bits_to_drop(
            inode.mode,
            inode.is_dir(),
            judged,
            || Self::in_group_or_has(req, None, CAP_FSETID),
            || Self::in_group_or_capable(req, inode.gid),
        );
        Ok((inode.mode, drop))
    }

    /// Whether the caller's supplementary groups hold `gid`, or its
    /// effective capabilities `capability`.
    fn in_group_or_has(req: &Request, gid: Option<u32>, capability: u32) -> bool {
        creds::in_group_or_has(req.pid(), req.uid(), gid, capability)
    }

    fn handle(&self) -> FileHandle {
        FileHandle(self.next_handle.fetch_add(1, Ordering::Relaxed))
    }
}

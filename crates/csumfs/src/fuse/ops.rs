//! The FUSE request table: each `Filesystem` method turns one kernel
//! request into a call on [`Fs`] (the volume under its lock) and its reply.

use super::convert::{from_fuse, kind_of_entry, time_or_now, timespec, to_fuse};
use super::creds::CAP_SYS_RESOURCE;
use super::errno::errno;
use super::{ioctl, write_within_limit, Fs, COPY_PIECE, STATS_XATTR};
use crate::format::flags::is_synchronous;
use crate::{NewInode, RenameMode, SetAttr, Volume, XattrMode};
use fuser::{
    CopyFileRangeFlags, Errno, FileAttr, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, IoctlFlags,
    KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Replies with the entry `made` produced, or its error.
macro_rules! reply_entry {
    ($fs:expr, $made:expr, $reply:expr) => {
        match $made {
            Ok(inode) => $fs.entry(&inode, $reply),
            Err(e) => $reply.error(e),
        }
    };
}

/// Replies `ok` or the error.
macro_rules! reply_empty {
    ($done:expr, $reply:expr) => {
        match $done {
            Ok(_) => $reply.ok(),
            Err(e) => $reply.error(e),
        }
    };
}

/// `setxattr`'s two flags at once.
const CREATE_AND_REPLACE: i32 = libc::XATTR_CREATE | libc::XATTR_REPLACE;

impl Filesystem for Fs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Larger writes per request: fewer round trips for sequential I/O.
        let _ = config.set_max_write(1 << 20);
        // POSIX ACLs: the kernel enforces and caches them, and leaves their
        // upkeep to csumfs (acl.rs: the mode in step, inheritance); with
        // DONT_MASK a new inode's mode comes unmasked, with the umask
        // beside it, as a default ACL replaces the umask.
        let acls = fuser::InitFlags::FUSE_POSIX_ACL | fuser::InitFlags::FUSE_DONT_MASK;
        if config.add_capabilities(acls).is_err() {
            eprintln!("csumfs: this kernel offers no POSIX ACLs over FUSE: ACLs are kept but not enforced");
        }
        if self.writeback_cache && config.add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE).is_err() {
            eprintln!("csumfs: this kernel offers no FUSE writeback cache: writes go through");
        }
        self.kill_privileges = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2).is_ok();
        let _ =
            config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS | fuser::InitFlags::FUSE_READDIRPLUS_AUTO);
        // A symlink's target never changes (a new one is a new inode, of a
        // new generation): the kernel keeps it in its page cache instead of
        // asking for it at every path walk through the link.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_CACHE_SYMLINKS);
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let volume = self.read();
        let found = volume
            .inode(from_fuse(parent))
            .and_then(|dir| volume.lookup(&dir, name.as_bytes()))
            .and_then(|entry| volume.inode(entry.ino));
        reply_entry!(self, found.map_err(|e| errno(&e)), reply);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let volume = self.read();
        match volume.inode(from_fuse(ino)) {
            Ok(inode) => reply.attr(&self.ttl, &self.attr(&inode)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // A chosen time is refused on an append-only file, as ext4 refuses
        // it. With the writeback cache the kernel sends a written file's
        // mtime on its own as a chosen time (fsync fails if it is
        // refused), so there only a chosen atime counts.
        let chosen = |t: &Option<TimeOrNow>| matches!(t, Some(TimeOrNow::SpecificTime(_)));
        let times_now = !chosen(&atime) && (self.writeback_cache || !chosen(&mtime));
        // With FUSE_HANDLE_KILLPRIV_V2 a chown, and a truncate by a caller
        // without CAP_FSETID, come without the mode the kernel used to
        // send beside them: csumfs takes the set-ID bits off itself. (A
        // chown to -1:-1 comes as a setattr of nothing at all, as does the
        // capability removal before a write: that one keeps its bits.)
        let mut mode = mode.map(|m| m as u16);
        let chown = uid.is_some() || gid.is_some();
        if self.kill_privileges && mode.is_none() && (chown || size.is_some()) {
            match self.setid_to_drop(req, from_fuse(ino), chown) {
                Ok((old, drop)) => mode = (drop != 0).then_some(old & 0o7777 & !drop),
                Err(e) => return reply.error(e),
            }
        }
        let attr = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            ctime: ctime.map(timespec),
            times_now,
        };
        match self.change(req, |v| v.set_attr(from_fuse(ino), attr)) {
            Ok(inode) => reply.attr(&self.ttl, &self.attr(&inode)),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let volume = self.read();
        match volume.inode(from_fuse(ino)).and_then(|inode| volume.read_link(&inode)) {
            Ok(target) => reply.data(&target),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, rdev: u32, reply: ReplyEntry) {
        let parent = from_fuse(parent);
        let made = self.change(req, |v| {
            let (mode, acls) = v.acl_create(parent, mode as u16, umask as u16)?;
            let new = Self::new_inode(v, req, parent, mode)?;
            // The VFS gives a regular file its type (`vfs_create`).
            let inode = if mode & 0o170_000 == 0o100_000 {
                v.create(parent, name.as_bytes(), new)?
            } else {
                v.mknod(parent, name.as_bytes(), new, rdev)?
            };
            v.store_inherited_acls(inode.ino, &acls)
        });
        reply_entry!(self, made, reply);
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let (parent, mode) = (from_fuse(parent), (mode & 0o7777) as u16 | 0o040_000);
        let made = self.change(req, |v| {
            let (mode, acls) = v.acl_create(parent, mode, umask as u16)?;
            let new = Self::new_inode(v, req, parent, mode)?;
            let inode = v.mkdir(parent, name.as_bytes(), new)?;
            v.store_inherited_acls(inode.ino, &acls)
        });
        reply_entry!(self, made, reply);
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty!(self.change(req, |v| v.unlink(from_fuse(parent), name.as_bytes())), reply);
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty!(self.change(req, |v| v.rmdir(from_fuse(parent), name.as_bytes())), reply);
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let parent = from_fuse(parent);
        let made = self.change(req, |v| {
            let new = Self::new_inode(v, req, parent, 0o120_777)?;
            v.symlink(parent, link_name.as_bytes(), target.as_os_str().as_bytes(), new.uid, new.gid)
        });
        reply_entry!(self, made, reply);
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // A whiteout (overlayfs's mark of a deleted lower file) is left at
        // the old name in the same change, as ext4_whiteout_for_rename
        // does: a character device 0:0 with no permissions, the caller's.
        let whiteout = flags.contains(RenameFlags::RENAME_WHITEOUT);
        let mode = match flags.difference(RenameFlags::RENAME_WHITEOUT) {
            f if f == RenameFlags::RENAME_EXCHANGE && !whiteout => RenameMode::Exchange,
            f if f == RenameFlags::RENAME_NOREPLACE => RenameMode::NoReplace,
            f if f.is_empty() => RenameMode::Replace,
            _ => return reply.error(Errno::EINVAL),
        };
        let (from, to) = (from_fuse(parent), from_fuse(newparent));
        reply_empty!(
            self.change(req, |v| {
                v.rename(from, name.as_bytes(), to, newname.as_bytes(), mode)?;
                if whiteout {
                    let (mode, acls) = v.acl_create(from, 0o020_000, 0)?;
                    let new = Self::new_inode(v, req, from, mode)?;
                    let inode = v.mknod(from, name.as_bytes(), new, 0)?;
                    v.store_inherited_acls(inode.ino, &acls)?;
                }
                Ok(())
            }),
            reply
        );
    }

    fn link(&self, req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let made = self.change(req, |v| v.link(from_fuse(ino), from_fuse(newparent), newname.as_bytes()));
        reply_entry!(self, made, reply);
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        // The VFS's may_open for immutable and append-only files; a
        // read-only open (no O_TRUNC) is never refused, and reads no inode.
        let mut open_flags = FopenFlags::FOPEN_KEEP_CACHE;
        if flags.0 & (libc::O_ACCMODE | libc::O_TRUNC) != libc::O_RDONLY {
            match self.read().inode(from_fuse(ino)) {
                Ok(inode) if inode.open_refused(flags.0) => return reply.error(Errno::EPERM),
                Err(e) => return reply.error(errno(&e)),
                // The writeback cache would answer a chattr +S file's
                // writes before they reach csumfs: they bypass it.
                Ok(inode) if self.writeback_cache && is_synchronous(inode.mode, inode.flags) => {
                    open_flags = FopenFlags::FOPEN_DIRECT_IO;
                }
                Ok(_) => {}
            }
        }
        if !self.read_only {
            self.volume.write().unwrap_or_else(std::sync::PoisonError::into_inner).hold(from_fuse(ino));
        }
        // Only csumfs writes the image: cached pages stay valid across opens.
        reply.opened(self.handle(), open_flags);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let volume = self.read();
        let mut buf = vec![0u8; size as usize];
        match volume.inode(from_fuse(ino)).and_then(|inode| volume.read(&inode, offset, &mut buf)) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The set-ID bits the write takes (the kernel judged the caller
        // without CAP_FSETID when it sets the flag).
        let mut setid = 0;
        if self.kill_privileges && write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID) {
            match self.setid_to_drop(req, from_fuse(ino), true) {
                Ok((_, drop)) => setid = drop,
                Err(e) => return reply.error(e),
            }
        }
        let written = self.change(req, |v| {
            if self.kill_privileges {
                v.remove_privileges(from_fuse(ino), setid)?;
            }
            write_within_limit(v, from_fuse(ino), offset, data)
        });
        match written {
            Ok(len) => reply.written(len as u32),
            Err(e) => reply.error(e),
        }
    }

    /// Copies in the daemon, a piece at a time (each read verified against
    /// its checksums, each write one change): without it the kernel copies
    /// through its page cache, every byte a read request to csumfs and back
    /// in a write request. The kernel has checked both files (open modes,
    /// append-only, the same file's ranges apart, the length cut to the
    /// source's end) and dropped the destination's set-ID bits.
    fn copy_file_range(
        &self,
        req: &Request,
        ino_in: INodeNo,
        _fh_in: FileHandle,
        offset_in: u64,
        ino_out: INodeNo,
        _fh_out: FileHandle,
        offset_out: u64,
        len: u64,
        flags: CopyFileRangeFlags,
        reply: ReplyWrite,
    ) {
        if !flags.is_empty() {
            return reply.error(Errno::EINVAL);
        }
        // The answer is a u32; the kernel asks for less than 4 GiB.
        let len = len.min(u64::from(u32::MAX));
        let mut buf = vec![0u8; len.min(COPY_PIECE) as usize];
        let mut copied = 0u64;
        while copied < len {
            let want = (len - copied).min(COPY_PIECE) as usize;
            let read = {
                let volume = self.read();
                volume
                    .inode(from_fuse(ino_in))
                    .and_then(|inode| volume.read(&inode, offset_in + copied, &mut buf[..want]))
            };
            let n = match read {
                Ok(n) => n,
                Err(_) if copied > 0 => break, // the copy is short; the next call meets the error
                Err(e) => return reply.error(errno(&e)),
            };
            if n == 0 {
                break;
            }
            let written =
                self.change(req, |v| write_within_limit(v, from_fuse(ino_out), offset_out + copied, &buf[..n]));
            let w = match written {
                Ok(w) => w,
                Err(_) if copied > 0 => break,
                Err(e) => return reply.error(e),
            };
            copied += w as u64;
            // The source's end, or the largest file size.
            if n < want || w < n {
                break;
            }
        }
        reply.written(copied as u32);
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // Nothing to do at close: writes reach csumfs before it (the
        // writeback cache's too: the kernel writes a file's pages back
        // before it would send this), and POSIX locks are the kernel's.
        // `ENOSYS` once and the kernel sends no more: one round trip
        // fewer per close (a tenth of create + write + fsync + close +
        // unlink).
        reply.error(Errno::ENOSYS);
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if self.read_only {
            return reply.ok();
        }
        // The last close of an unlinked file frees it: a change like any other.
        reply_empty!(self.change(req, |v| v.unhold(from_fuse(ino))), reply);
    }

    fn fsync(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        if self.read_only {
            return reply.ok();
        }
        self.sync_then(Box::new(move |result: Result<(), Errno>| match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }));
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let volume = self.read();
        match volume.inode(from_fuse(ino)).and_then(|dir| volume.read_dir(&dir)) {
            Ok(entries) => {
                let fh = self.handle();
                self.listings.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(fh.0, entries);
                reply.opened(fh, FopenFlags::empty());
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let listings = self.listings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(entries) = listings.get(&fh.0) else { return reply.error(Errno::EBADF) };
        for (i, entry) in entries.iter().enumerate().skip(offset as usize) {
            let name = OsStr::from_bytes(&entry.name);
            if reply.add(to_fuse(entry.ino), i as u64 + 1, kind_of_entry(entry.file_type), name) {
                break;
            }
        }
        reply.ok();
    }

    /// `readdir` with each entry's attributes (`FUSE_DO_READDIRPLUS` in the
    /// kernel's auto mode: asked for when stats follow a listing, as in
    /// `ls -l`): the kernel caches them and sends no `LOOKUP` per entry.
    fn readdirplus(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, offset: u64, mut reply: ReplyDirectoryPlus) {
        // The volume's lock before the listings', as opendir takes them.
        let volume = self.read();
        let listings = self.listings.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(entries) = listings.get(&fh.0) else { return reply.error(Errno::EBADF) };
        for (i, entry) in entries.iter().enumerate().skip(offset as usize) {
            let name = OsStr::from_bytes(&entry.name);
            let full = match volume.inode(entry.ino) {
                Ok(inode) => {
                    let generation = Generation(u64::from(inode.generation));
                    reply.add(to_fuse(entry.ino), i as u64 + 1, name, &self.ttl, &self.attr(&inode), generation)
                }
                // Still listed, as readdir lists it, with attributes valid
                // for no time: a stat of it asks csumfs, which names the damage.
                Err(_) => {
                    let attr = FileAttr {
                        ino: to_fuse(entry.ino),
                        size: 0,
                        blocks: 0,
                        atime: UNIX_EPOCH,
                        mtime: UNIX_EPOCH,
                        ctime: UNIX_EPOCH,
                        crtime: UNIX_EPOCH,
                        kind: kind_of_entry(entry.file_type),
                        perm: 0,
                        nlink: 1,
                        uid: 0,
                        gid: 0,
                        rdev: 0,
                        blksize: self.block_size,
                        flags: 0,
                    };
                    reply.add(to_fuse(entry.ino), i as u64 + 1, name, &Duration::ZERO, &attr, Generation(0))
                }
            };
            if full {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(&self, _req: &Request, _ino: INodeNo, fh: FileHandle, _flags: OpenFlags, reply: ReplyEmpty) {
        self.listings.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(&self, req: &Request, ino: INodeNo, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        self.fsync(req, ino, fh, datasync, reply);
    }

    /// `FS_IOC_GETFLAGS` (what `lsattr` and the kernel's `fileattr_get`
    /// ask): the inode's flags as ext4 shows them (`EXT4_FL_USER_VISIBLE`);
    /// `FS_IOC_SETFLAGS` of the flags csumfs keeps (attr.rs);
    /// `FS_IOC_GETVERSION` (`lsattr -v`): the inode's generation.
    fn ioctl(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        cmd: u32,
        in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        if cmd == libc::FS_IOC_SETFLAGS as u32 {
            // The flags are an int, though the command's size says long.
            let Some(flags) = in_data.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes"))) else {
                return reply.error(Errno::from_i32(libc::EINVAL));
            };
            match self.read().inode(from_fuse(ino)) {
                Ok(inode) => {
                    let may = ioctl::may_set_flags(req.uid(), inode.uid, inode.flags, flags, || {
                        Self::in_group_or_has(req, None, CAP_SYS_RESOURCE)
                    });
                    if !may {
                        return reply.error(Errno::EPERM);
                    }
                }
                Err(e) => return reply.error(errno(&e)),
            }
            return match self.change(req, |v| v.set_flags(from_fuse(ino), flags)) {
                Ok(_) => reply.ioctl(0, &[]),
                Err(e) => reply.error(e),
            };
        }
        if cmd == ioctl::FS_IOC_FSGETXATTR {
            // The kernel asks for this before a SETFLAGS (vfs_fileattr_set).
            return match self.read().inode(from_fuse(ino)) {
                Ok(inode) => reply.ioctl(0, &ioctl::fsxattr(crate::inode::attr::visible_flags(&inode))),
                Err(e) => reply.error(errno(&e)),
            };
        }
        let get_flags = cmd == libc::FS_IOC_GETFLAGS as u32;
        if !get_flags && cmd != libc::FS_IOC_GETVERSION as u32 {
            return reply.error(Errno::from_i32(libc::ENOTTY));
        }
        match self.read().inode(from_fuse(ino)) {
            // Each an int, as ext4 writes them, though the commands' size
            // says long: FUSE copies out as many bytes as the reply holds,
            // and lsattr's int has no room for eight.
            Ok(inode) if get_flags => reply.ioctl(0, &crate::inode::attr::visible_flags(&inode).to_le_bytes()),
            Ok(inode) => reply.ioctl(0, &inode.generation.to_le_bytes()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.read().statfs();
        let bs = s.block_size as u32;
        reply.statfs(s.blocks, s.free_blocks, s.available_blocks, s.inodes, s.free_inodes, bs, s.name_max, bs);
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let ino = from_fuse(ino);
        let mode = match flags {
            0 => XattrMode::Either,
            libc::XATTR_CREATE => XattrMode::Create,
            libc::XATTR_REPLACE => XattrMode::Replace,
            CREATE_AND_REPLACE => {
                // Both (the syscall lets them through): ext4 refuses either
                // way — EEXIST for a name the inode has, ENODATA otherwise.
                let volume = self.read();
                return match volume.inode(ino) {
                    Ok(inode) if inode.is_immutable() || inode.is_append_only() => reply.error(Errno::EPERM),
                    Ok(inode) => match volume.getxattr(&inode, name) {
                        Ok(_) => reply.error(Errno::EEXIST),
                        Err(e) => reply.error(errno(&e)),
                    },
                    Err(e) => reply.error(errno(&e)),
                };
            }
            _ => return reply.error(Errno::EINVAL),
        };
        reply_empty!(
            self.change(req, |v| {
                // Setting an access ACL clears S_ISGID of a file outside the
                // caller's groups (`posix_acl_update_mode`): /proc is read
                // only for a set-group-ID file.
                let sgid_group = v.inode(ino).ok().and_then(|i| (i.mode & 0o2000 != 0).then_some(i.gid));
                let in_group_or_capable = name != "system.posix_acl_access"
                    || sgid_group.is_none_or(|gid| Self::in_group_or_capable(req, gid));
                v.setxattr_by(ino, name, value, mode, in_group_or_capable)
            }),
            reply
        );
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty!(self.change(req, |v| v.removexattr(from_fuse(ino), name)), reply);
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let volume = self.read();
        // The per-seed counters, on the root only, under a name no ext4
        // image can hold (`csumkit mount --stats DIR` reads it).
        let found = if ino == INodeNo::ROOT && name == STATS_XATTR {
            let mut report =
                volume.stats().report(volume.pi_device_stats(), volume.log_on(), volume.private_copy_bytes());
            report.push_str(&format!("FUSE: {} requests served through io_uring\n", fuser::io_uring_requests()));
            Ok(report.into_bytes())
        } else {
            volume.inode(from_fuse(ino)).and_then(|inode| volume.getxattr(&inode, name))
        };
        match found {
            Ok(value) if size == 0 => reply.size(value.len() as u32),
            Ok(value) if value.len() > size as usize => reply.error(Errno::from_i32(libc::ERANGE)),
            Ok(value) => reply.data(&value),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let volume = self.read();
        match volume.inode(from_fuse(ino)).and_then(|inode| volume.xattr_names(&inode)) {
            Ok(xattrs) => {
                let mut names = Vec::new();
                for name in xattrs {
                    names.extend_from_slice(name.as_bytes());
                    names.push(0);
                }
                if size == 0 {
                    reply.size(names.len() as u32);
                } else if names.len() > size as usize {
                    reply.error(Errno::from_i32(libc::ERANGE));
                } else {
                    reply.data(&names);
                }
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let parent = from_fuse(parent);
        let made = self.change(req, |v| {
            let (mode, acls) = v.acl_create(parent, mode as u16, umask as u16)?;
            let new = Self::new_inode(v, req, parent, mode)?;
            let inode = v.create(parent, name.as_bytes(), NewInode { mode: new.mode | 0o100_000, ..new })?;
            let inode = v.store_inherited_acls(inode.ino, &acls)?;
            v.hold(inode.ino);
            Ok(inode)
        });
        match made {
            Ok(inode) => {
                let attr = self.attr(&inode);
                let generation = Generation(u64::from(inode.generation));
                reply.created(&self.ttl, &attr, generation, self.handle(), FopenFlags::FOPEN_KEEP_CACHE);
            }
            Err(e) => reply.error(e),
        }
    }

    fn lseek(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: i64, whence: i32, reply: ReplyLseek) {
        // The kernel answers SEEK_SET, SEEK_CUR and SEEK_END itself.
        let hole = match whence {
            libc::SEEK_DATA => false,
            libc::SEEK_HOLE => true,
            _ => return reply.error(Errno::EINVAL),
        };
        let Ok(offset) = u64::try_from(offset) else { return reply.error(Errno::ENXIO) };
        let volume = self.read();
        match volume.inode(from_fuse(ino)).and_then(|inode| volume.seek_data_or_hole(&inode, offset, hole)) {
            Ok(Some(at)) => reply.offset(at as i64),
            Ok(None) => reply.error(Errno::ENXIO),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let (ino, keep_size) = (from_fuse(ino), mode & libc::FALLOC_FL_KEEP_SIZE != 0);
        // ext4's fallocate takes what a write takes (`file_modified`);
        // with KILLPRIV_V2 the kernel leaves it to csumfs, and does not
        // say whether the caller holds CAP_FSETID.
        let mut setid = 0;
        if self.kill_privileges {
            match self.setid_to_drop(req, ino, false) {
                Ok((_, drop)) => setid = drop,
                Err(e) => return reply.error(e),
            }
        }
        let modified = |v: &mut Volume| if self.kill_privileges { v.remove_privileges(ino, setid) } else { Ok(()) };
        match mode & !libc::FALLOC_FL_KEEP_SIZE {
            0 => reply_empty!(
                self.change(req, |v| {
                    modified(v)?;
                    v.fallocate(ino, offset, length, keep_size)
                }),
                reply
            ),
            // Linux takes a punch only with KEEP_SIZE.
            libc::FALLOC_FL_PUNCH_HOLE if keep_size => reply_empty!(
                self.change(req, |v| {
                    modified(v)?;
                    v.punch_hole(ino, offset, length)
                }),
                reply
            ),
            libc::FALLOC_FL_ZERO_RANGE => reply_empty!(
                self.change(req, |v| {
                    modified(v)?;
                    v.zero_range(ino, offset, length, keep_size)
                }),
                reply
            ),
            _ => reply.error(Errno::from_i32(libc::EOPNOTSUPP)), // collapse, insert, unshare
        }
    }
}

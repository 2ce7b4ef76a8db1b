//! File calls through `csumkit mount` answer as the kernel's own ext4
//! does. One script of system calls runs on a kernel loop mount of an image
//! mke2fs made and on `csumkit mount` of a byte-for-byte copy; the two
//! transcripts — each call's result or errno, and what `lstat`, `getdents64`
//! (in small pieces, resumed at an offset), the xattr calls, the inode-flag
//! ioctls and `statfs` say afterwards — must be the same line for line.
//! Then e2fsck judges both images and the kernel reads csumfs's image back
//! into the same survey.
//!
//! Left out, each for its reason (docs/mount.md): inode numbers and
//! change/access times (allocation and the clock); the root's number (FUSE
//! numbers its root 1); the flags csumfs refuses to set (immutable,
//! append-only, sync: it does not enforce them); collapse and insert range
//! (FUSE does not pass them on).

mod common;
use common::*;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A script's run on one mount: every line it noted.
struct Run {
    root: PathBuf,
    lines: Vec<String>,
}

/// FNV-1a: a digest of file contents for the transcript.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

fn makedev(major: u32, minor: u32) -> libc::dev_t {
    libc::makedev(major, minor)
}

impl Run {
    fn c(&self, rel: &str) -> CString {
        CString::new(self.root.join(rel).as_os_str().as_bytes()).unwrap()
    }

    /// Notes a call's result: "ok", or its errno (read before anything
    /// else can change it).
    fn said(&mut self, what: &str, ret: i64) -> i64 {
        let text = if ret < 0 { std::io::Error::last_os_error().to_string() } else { "ok".into() };
        self.lines.push(format!("{what}: {text}"));
        ret
    }

    /// As [`Run::said`], with the count the call returned.
    fn said_count(&mut self, what: &str, ret: i64) -> i64 {
        let text = if ret < 0 { std::io::Error::last_os_error().to_string() } else { format!("{ret}") };
        self.lines.push(format!("{what}: {text}"));
        ret
    }

    fn note(&mut self, line: String) {
        self.lines.push(line);
    }

    /// What `lstat` says of `rel` but its inode number and clock times.
    fn stat(&mut self, rel: &str) {
        self.stat_as(rel, true);
    }

    /// [`Run::stat`], with or without the block count: the kernel splits
    /// an unwritten extent at a partial block's zeroing when its page is
    /// written back, so how many blocks an extent index took a moment ago
    /// is its timing's.
    fn stat_as(&mut self, rel: &str, with_blocks: bool) {
        let path = self.c(rel);
        // SAFETY: a zeroed stat for the kernel to fill; a valid path.
        let (ret, st) = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            (libc::lstat(path.as_ptr(), &mut st), st)
        };
        if ret < 0 {
            self.said(&format!("lstat {rel}"), -1);
            return;
        }
        self.note(format!(
            "lstat {rel}: mode {:o} links {} owner {}:{} rdev {}:{} size {} blocks {} blksize {}",
            st.st_mode,
            st.st_nlink,
            st.st_uid,
            st.st_gid,
            libc::major(st.st_rdev),
            libc::minor(st.st_rdev),
            st.st_size,
            if with_blocks { st.st_blocks } else { 0 },
            st.st_blksize
        ));
    }

    /// Access and modification times, to the nanosecond.
    fn times(&mut self, rel: &str) {
        let path = self.c(rel);
        // SAFETY: as in `stat`.
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            assert_eq!(libc::lstat(path.as_ptr(), &mut st), 0, "{rel}");
            st
        };
        self.note(format!(
            "times {rel}: atime {}.{:09} mtime {}.{:09}",
            st.st_atime, st.st_atime_nsec, st.st_mtime, st.st_mtime_nsec
        ));
    }

    fn open(&mut self, rel: &str, flags: i32, mode: u32) -> i32 {
        let path = self.c(rel);
        // SAFETY: a valid path; plain integer arguments.
        let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC, mode) };
        self.said(&format!("open {rel} {flags:#o}"), i64::from(fd)) as i32
    }

    fn close(fd: i32) {
        // SAFETY: a descriptor this run opened.
        assert_eq!(unsafe { libc::close(fd) }, 0);
    }

    fn read_all(&mut self, rel: &str) {
        match std::fs::read(self.root.join(rel)) {
            Ok(bytes) => self.note(format!("contents {rel}: {} bytes, digest {:016x}", bytes.len(), digest(&bytes))),
            Err(e) => self.note(format!("contents {rel}: {e}")),
        }
    }

    /// xattr names are bytes (not UTF-8 always): shown escaped, so two
    /// names that differ in a non-UTF-8 byte never read alike.
    fn setxattr(&mut self, rel: &str, name: impl AsRef<[u8]>, value: &[u8], flags: i32) {
        let name = name.as_ref();
        let (path, cname) = (self.c(rel), CString::new(name).unwrap());
        // SAFETY: valid path, name and value of the given length.
        let ret = unsafe { libc::lsetxattr(path.as_ptr(), cname.as_ptr(), value.as_ptr().cast(), value.len(), flags) };
        let name = name.escape_ascii();
        self.said(&format!("setxattr {rel} {name} ({} bytes, flags {flags})", value.len()), i64::from(ret));
    }

    fn getxattr(&mut self, rel: &str, name: impl AsRef<[u8]>, size: usize) {
        let name = name.as_ref();
        let (path, cname) = (self.c(rel), CString::new(name).unwrap());
        let mut value = vec![0u8; size];
        // SAFETY: valid path and name; a buffer of `size` bytes.
        let ret = unsafe { libc::lgetxattr(path.as_ptr(), cname.as_ptr(), value.as_mut_ptr().cast(), size) };
        let ret = self.said_count(&format!("getxattr {rel} {} into {size}", name.escape_ascii()), ret as i64);
        if ret > 0 && size > 0 {
            self.note(format!("  value {:?}", String::from_utf8_lossy(&value[..ret as usize])));
        }
    }

    fn listxattr(&mut self, rel: &str, size: usize) {
        let path = self.c(rel);
        let mut names = vec![0u8; size];
        // SAFETY: a valid path; a buffer of `size` bytes.
        let ret = unsafe { libc::llistxattr(path.as_ptr(), names.as_mut_ptr().cast(), size) };
        let ret = self.said_count(&format!("listxattr {rel} into {size}"), ret as i64);
        if ret > 0 && size > 0 {
            let mut list: Vec<&[u8]> = names[..ret as usize].split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
            list.sort();
            let list: Vec<String> = list.iter().map(|n| n.escape_ascii().to_string()).collect();
            self.note(format!("  names {list:?}"));
        }
    }

    /// `listxattr` into a buffer of exactly the size a first call without
    /// one reported.
    fn listxattr_exact(&mut self, rel: &str) {
        let path = self.c(rel);
        // SAFETY: a valid path; no buffer, as a size query.
        let size = unsafe { libc::llistxattr(path.as_ptr(), std::ptr::null_mut(), 0) };
        assert!(size > 0, "listxattr {rel}: {}", std::io::Error::last_os_error());
        self.listxattr(rel, size as usize);
    }

    fn renameat2(&mut self, from: &str, to: &str, flags: u32) {
        let (a, b) = (self.c(from), self.c(to));
        // SAFETY: valid paths; renameat2 through syscall (plain arguments).
        let ret = unsafe {
            libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), flags)
        };
        self.said(&format!("renameat2 {from} {to} flags {flags}"), ret);
    }

    /// `call` made by a child process as `uid`:`gid` with no supplementary
    /// groups (and so no capabilities): its result or errno.
    fn as_user(&mut self, what: &str, (uid, gid): (u32, u32), call: impl FnOnce() -> libc::c_int) {
        // SAFETY: the child makes system calls only, then `_exit`s.
        let code = unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork");
            if pid == 0 {
                let became = libc::setgroups(0, std::ptr::null()) == 0
                    && libc::setresgid(gid, gid, gid) == 0
                    && libc::setresuid(uid, uid, uid) == 0;
                let code = if !became {
                    255
                } else if call() < 0 {
                    *libc::__errno_location()
                } else {
                    0
                };
                libc::_exit(code.min(255));
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            libc::WEXITSTATUS(status)
        };
        assert_ne!(code, 255, "{what}: the child could not become {uid}:{gid}");
        let text = if code == 0 { "ok".into() } else { std::io::Error::from_raw_os_error(code).to_string() };
        self.note(format!("{what} as {uid}:{gid}: {text}"));
    }

    fn fallocate(&mut self, fd: i32, mode: i32, offset: i64, len: i64) {
        // SAFETY: a descriptor this run opened; plain integer arguments.
        let ret = unsafe { libc::fallocate(fd, mode, offset, len) };
        self.said(&format!("fallocate mode {mode:#x} {offset}+{len}"), i64::from(ret));
    }

    /// An ioctl whose argument is an int (`set`, or read back and noted
    /// when `show`), and whether the int after it was left alone: ext4
    /// writes 4 bytes, though the commands' size says long.
    fn ioctl_int(&mut self, rel: &str, what: &str, cmd: libc::c_ulong, set: Option<i32>, show: bool) {
        let fd = self.open(rel, libc::O_RDONLY | libc::O_NONBLOCK, 0);
        let mut value: [libc::c_int; 2] = [set.unwrap_or(0), 0x5a5a_5a5a];
        // SAFETY: a descriptor this run opened and room for a long, as the commands' size says.
        let ret = unsafe { libc::ioctl(fd, cmd, value.as_mut_ptr()) };
        let ret = self.said(&format!("ioctl {what} {rel}"), i64::from(ret));
        if ret == 0 && set.is_none() {
            let shown = if show { format!("{:#x}", value[0]) } else { "read".into() };
            self.note(format!(
                "  value {shown}, the next int {}",
                if value[1] == 0x5a5a_5a5a { "kept" } else { "overwritten" }
            ));
        }
        Self::close(fd);
    }

    /// `FS_IOC_FSGETXATTR`: the flags as XFS names them, and the rest of
    /// `struct fsxattr` (ext4 fills the project ID).
    fn fsgetxattr(&mut self, rel: &str) {
        let fd = self.open(rel, libc::O_RDONLY | libc::O_NONBLOCK, 0);
        let mut fsxattr = [0u8; 28];
        // SAFETY: a descriptor this run opened and a 28-byte struct fsxattr.
        let ret = unsafe { libc::ioctl(fd, 0x801C_581F, fsxattr.as_mut_ptr()) };
        if self.said(&format!("ioctl FS_IOC_FSGETXATTR {rel}"), i64::from(ret)) == 0 {
            self.note(format!("  fsxattr {fsxattr:?}"));
        }
        Self::close(fd);
    }

    /// One `getdents64` call into `len` bytes: (name, type, offset) each.
    // `linux_dirent64` is in the host's byte order.
    #[allow(clippy::host_endian_bytes)]
    fn getdents(fd: i32, len: usize) -> Vec<(String, u8, i64)> {
        let mut buf = vec![0u8; len];
        // SAFETY: a directory descriptor and a buffer of `len` bytes.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, buf.as_mut_ptr(), len) };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        let (mut at, mut out) = (0usize, Vec::new());
        while at < n as usize {
            let d_off = i64::from_ne_bytes(buf[at + 8..at + 16].try_into().unwrap());
            let reclen = usize::from(u16::from_ne_bytes(buf[at + 16..at + 18].try_into().unwrap()));
            let name = &buf[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&b| b == 0).unwrap()];
            out.push((String::from_utf8_lossy(name).into_owned(), buf[at + 18], d_off));
            at += reclen;
        }
        out
    }

    /// A directory listed whole, listed in 64-byte pieces, and resumed
    /// from the offset of its tenth entry: the three agree, and the names
    /// and types (sorted: the order is the file system's) go in the
    /// transcript.
    fn list(&mut self, rel: &str) {
        let whole = {
            let fd = self.open(rel, libc::O_RDONLY | libc::O_DIRECTORY, 0);
            let (mut all, mut piece) = (Vec::new(), Self::getdents(fd, 1 << 16));
            while !piece.is_empty() {
                all.append(&mut piece);
                piece = Self::getdents(fd, 1 << 16);
            }
            Self::close(fd);
            all
        };
        let small = {
            let fd = self.open(rel, libc::O_RDONLY | libc::O_DIRECTORY, 0);
            let (mut all, mut piece) = (Vec::new(), Self::getdents(fd, 64));
            while !piece.is_empty() {
                all.append(&mut piece);
                piece = Self::getdents(fd, 64);
            }
            Self::close(fd);
            all
        };
        let names = |list: &[(String, u8, i64)]| list.iter().map(|(n, t, _)| (n.clone(), *t)).collect::<Vec<_>>();
        self.note(format!("{rel} listed in 64-byte pieces as whole: {}", names(&small) == names(&whole)));
        if whole.len() > 10 {
            let fd = self.open(rel, libc::O_RDONLY | libc::O_DIRECTORY, 0);
            // SAFETY: a directory descriptor this run opened.
            let at = unsafe { libc::lseek(fd, whole[9].2, libc::SEEK_SET) };
            assert!(at >= 0, "seekdir: {}", std::io::Error::last_os_error());
            let (mut rest, mut piece) = (Vec::new(), Self::getdents(fd, 1 << 16));
            while !piece.is_empty() {
                rest.append(&mut piece);
                piece = Self::getdents(fd, 1 << 16);
            }
            Self::close(fd);
            self.note(format!("{rel} resumed after its tenth entry: {}", names(&rest) == names(&whole[10..])));
        }
        let mut sorted = names(&whole);
        sorted.sort();
        self.note(format!("{rel} entries: {sorted:?}"));
    }

    fn statfs(&mut self) {
        let path = self.c("");
        // SAFETY: a zeroed statvfs for the kernel to fill; a valid path.
        let st = unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC);
            assert!(fd >= 0);
            libc::syncfs(fd);
            libc::close(fd);
            let mut st: libc::statvfs = std::mem::zeroed();
            assert_eq!(libc::statvfs(path.as_ptr(), &mut st), 0);
            st
        };
        self.note(format!(
            "statfs: bsize {} frsize {} blocks {} free {} available {} files {} free {} namemax {}",
            st.f_bsize, st.f_frsize, st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree, st.f_namemax
        ));
    }
}

/// The script: what a program asks of a file system, and what it is told.
fn script(root: &Path) -> Vec<String> {
    let mut r = Run { root: root.to_path_buf(), lines: Vec::new() };
    // SAFETY: umask has no preconditions; the same for both runs.
    unsafe { libc::umask(0o022) };
    let (mkdir, chown, chmod) = (
        |r: &mut Run, rel: &str, mode: u32| {
            let p = r.c(rel);
            // SAFETY: a valid path.
            r.said(&format!("mkdir {rel} {mode:o}"), i64::from(unsafe { libc::mkdir(p.as_ptr(), mode) }));
        },
        |r: &mut Run, rel: &str, uid: u32, gid: u32| {
            let p = r.c(rel);
            // SAFETY: a valid path.
            r.said(&format!("chown {rel} {uid} {gid}"), i64::from(unsafe { libc::lchown(p.as_ptr(), uid, gid) }));
        },
        |r: &mut Run, rel: &str, mode: u32| {
            let p = r.c(rel);
            // SAFETY: a valid path.
            r.said(&format!("chmod {rel} {mode:o}"), i64::from(unsafe { libc::chmod(p.as_ptr(), mode) }));
        },
    );

    // A set-group-ID directory hands its group on, and its bit to
    // directories made in it.
    mkdir(&mut r, "sgid", 0o755);
    chown(&mut r, "sgid", 0, 1234);
    chmod(&mut r, "sgid", 0o2775);
    let fd = r.open("sgid/file", libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o640);
    Run::close(fd);
    r.open("sgid/file", libc::O_CREAT | libc::O_WRONLY | libc::O_EXCL, 0o640);
    mkdir(&mut r, "sgid/dir", 0o700);
    mkdir(&mut r, "sgid/dir", 0o700);
    for p in ["sgid", "sgid/file", "sgid/dir"] {
        r.stat(p);
    }

    // Every kind of inode mknod makes, with old- and new-style device numbers.
    for (name, mode, dev) in [
        ("fifo", libc::S_IFIFO | 0o644, makedev(0, 0)),
        ("chr", libc::S_IFCHR | 0o600, makedev(1, 3)),
        ("blk", libc::S_IFBLK | 0o660, makedev(259, 70_000)),
        ("sock", libc::S_IFSOCK | 0o755, makedev(0, 0)),
        ("reg", libc::S_IFREG | 0o606, makedev(0, 0)),
        ("plain", 0o600, makedev(0, 0)),
    ] {
        let p = r.c(name);
        // SAFETY: a valid path; plain integer arguments.
        let ret = unsafe { libc::mknod(p.as_ptr(), mode, dev) };
        r.said(&format!("mknod {name} {mode:o}"), i64::from(ret));
        r.stat(name);
    }
    // Symlinks, short (in the inode) and long (a block); a hard link.
    for (name, target) in [("short", "reg".to_string()), ("long", "t/".repeat(100))] {
        let (p, t) = (r.c(name), CString::new(target.clone()).unwrap());
        // SAFETY: valid paths.
        r.said(&format!("symlink {name}"), i64::from(unsafe { libc::symlink(t.as_ptr(), p.as_ptr()) }));
        r.stat(name);
        let got = std::fs::read_link(root.join(name)).map(|t| t.as_os_str().len());
        r.note(format!("readlink {name}: {got:?}"));
    }
    {
        let (a, b) = (r.c("reg"), r.c("reg-link"));
        // SAFETY: valid paths.
        r.said("link reg reg-link", i64::from(unsafe { libc::link(a.as_ptr(), b.as_ptr()) }));
        let (a, b) = (r.c("sgid"), r.c("dir-link"));
        // SAFETY: valid paths.
        r.said("link sgid dir-link", i64::from(unsafe { libc::link(a.as_ptr(), b.as_ptr()) }));
        r.stat("reg");
        let ino = |p: &str| std::fs::symlink_metadata(root.join(p)).map(|m| std::os::unix::fs::MetadataExt::ino(&m));
        r.note(format!("reg and reg-link one inode: {}", ino("reg").unwrap() == ino("reg-link").unwrap()));
    }

    // Data: writes, a sparse write, reads across the end, truncation, and
    // each fallocate mode FUSE passes on.
    let fd = r.open("data", libc::O_CREAT | libc::O_RDWR, 0o644);
    let pattern_10k = pattern(10_000, 7);
    // SAFETY: a descriptor this run opened; a buffer of the given length (so each pwrite/pread below).
    let n = unsafe { libc::pwrite(fd, pattern_10k.as_ptr().cast(), pattern_10k.len(), 0) };
    r.said_count("pwrite data 10000 at 0", n as i64);
    // SAFETY: as above.
    let n = unsafe { libc::pwrite(fd, b"x".as_ptr().cast(), 1, 100_000) };
    r.said_count("pwrite data 1 at 100000", n as i64);
    r.stat("data");
    for (offset, len) in [(99_990, 50), (100_001, 10), (5_000, 4_096)] {
        let mut buf = vec![0u8; len];
        // SAFETY: as above.
        let n = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), len, offset) };
        let n = r.said_count(&format!("pread data {len} at {offset}"), n as i64);
        r.note(format!("  digest {:016x}", digest(&buf[..n.max(0) as usize])));
    }
    // SAFETY: a descriptor this run opened.
    r.said("ftruncate data 5000", i64::from(unsafe { libc::ftruncate(fd, 5_000) }));
    // SAFETY: as above.
    r.said("ftruncate data 24576", i64::from(unsafe { libc::ftruncate(fd, 24_576) }));
    r.stat("data");
    r.fallocate(fd, 0, 200_000, 50_000);
    r.stat("data");
    r.fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 1 << 20, 65_536);
    r.stat("data");
    r.fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 4_096, 8_192);
    r.fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE, 0, 10);
    r.fallocate(fd, libc::FALLOC_FL_ZERO_RANGE, 300_000, 5_000);
    r.stat("data");
    r.fallocate(fd, libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE, 400_000, 5_000);
    r.fallocate(fd, libc::FALLOC_FL_UNSHARE_RANGE, 0, 4_096);
    r.stat_as("data", false);
    Run::close(fd);
    r.read_all("data");
    let fd = r.open("data", libc::O_WRONLY | libc::O_APPEND, 0);
    // SAFETY: as above.
    let n = unsafe { libc::write(fd, b"appended".as_ptr().cast(), 8) };
    r.said_count("write data O_APPEND 8", n as i64);
    Run::close(fd);
    r.read_all("data");
    Run::close(r.open("reg", libc::O_WRONLY | libc::O_TRUNC, 0));
    r.stat("reg");

    // Times before 1970 and past 2038, to the nanosecond; UTIME_OMIT.
    for (rel, atime, mtime) in [
        ("data", (-1_000_000_000, 123_456_789), (-1, 999_999_999)),
        ("reg", (8_000_000_000, 5), (15_000_000_000, 999_999_999)),
        ("sgid", (1, 0), (0, 1)),
        ("reg", (7, libc::UTIME_OMIT), (9, 10)),
    ] {
        let times = [
            libc::timespec { tv_sec: atime.0, tv_nsec: atime.1 },
            libc::timespec { tv_sec: mtime.0, tv_nsec: mtime.1 },
        ];
        let p = r.c(rel);
        // SAFETY: a valid path and two timespecs.
        let ret = unsafe { libc::utimensat(libc::AT_FDCWD, p.as_ptr(), times.as_ptr(), libc::AT_SYMLINK_NOFOLLOW) };
        r.said(&format!("utimensat {rel} {atime:?} {mtime:?}"), i64::from(ret));
        r.times(rel);
    }

    // Owners and modes: chown clears set-user-ID, even by root.
    chmod(&mut r, "reg", 0o6755);
    r.stat("reg");
    chown(&mut r, "reg", 1000, 2000);
    r.stat("reg");
    chown(&mut r, "reg", u32::MAX, 80_000);
    r.stat("reg");
    chown(&mut r, "short", 5, 6);
    r.stat("short");

    // An access ACL set on a set-group-ID file by a caller outside its
    // group keeps the bit only with CAP_FSETID (root here).
    std::fs::write(root.join("acl-sgid"), "").unwrap();
    chown(&mut r, "acl-sgid", 1001, 1234);
    chmod(&mut r, "acl-sgid", 0o2770);
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in
        [(1u16, 7u16, u32::MAX), (2, 4, 1001), (4, 7, u32::MAX), (0x10, 7, u32::MAX), (0x20, 0, u32::MAX)]
    {
        acl.extend_from_slice(&tag.to_le_bytes());
        acl.extend_from_slice(&perm.to_le_bytes());
        acl.extend_from_slice(&id.to_le_bytes());
    }
    r.setxattr("acl-sgid", "system.posix_acl_access", &acl, 0);
    r.stat("acl-sgid");

    // Renames: each flag, and what the VFS and ext4 refuse.
    std::fs::write(root.join("a"), "A").unwrap();
    std::fs::write(root.join("b"), "BB").unwrap();
    mkdir(&mut r, "full", 0o755);
    std::fs::write(root.join("full/x"), "x").unwrap();
    mkdir(&mut r, "empty", 0o755);
    r.renameat2("a", "b", libc::RENAME_NOREPLACE);
    r.renameat2("a", "b", libc::RENAME_EXCHANGE);
    r.read_all("a");
    r.read_all("b");
    r.renameat2("a", "missing", libc::RENAME_EXCHANGE);
    r.renameat2("a", "c", libc::RENAME_NOREPLACE);
    r.renameat2("c", "a", libc::RENAME_WHITEOUT);
    r.stat("c");
    r.read_all("a");
    r.renameat2("a", "b", libc::RENAME_EXCHANGE | libc::RENAME_NOREPLACE);
    r.renameat2("a", "b", 8);
    r.renameat2("empty", "full", 0);
    r.renameat2("b", "full", 0);
    r.renameat2("full", "b", 0);
    r.renameat2("full", "full/sub", 0);
    r.renameat2("full", "empty", libc::RENAME_EXCHANGE);
    r.stat("full");
    r.stat("empty");
    {
        let (full, empty) = (r.c("empty"), r.c("full"));
        // SAFETY: valid paths.
        r.said("rmdir empty (full now)", i64::from(unsafe { libc::rmdir(full.as_ptr()) }));
        // SAFETY: valid paths.
        r.said("unlink full (a directory)", i64::from(unsafe { libc::unlink(empty.as_ptr()) }));
    }

    // Xattrs: each flag, sizes, removal, the namespaces root may use.
    r.setxattr("data", "user.a", b"1", libc::XATTR_CREATE);
    r.setxattr("data", "user.a", b"22", libc::XATTR_CREATE);
    r.setxattr("data", "user.b", b"1", libc::XATTR_REPLACE);
    r.setxattr("data", "user.a", b"333", libc::XATTR_CREATE | libc::XATTR_REPLACE);
    r.setxattr("data", "user.b", b"333", libc::XATTR_CREATE | libc::XATTR_REPLACE);
    r.setxattr("data", "user.a", b"22", libc::XATTR_REPLACE);
    r.setxattr("data", "user.empty", b"", 0);
    r.setxattr("data", "trusted.t", b"trusted value", 0);
    r.setxattr("data", "security.s", b"security value", 0);
    r.setxattr("data", format!("user.{}", "n".repeat(250)), b"too long a name", 0);
    r.setxattr("data", "user.big", &vec![b'v'; 5_000], 0);
    r.setxattr("sgid/dir", "user.on-a-dir", b"d", 0);
    r.setxattr("fifo", "user.on-a-fifo", b"f", 0);
    r.setxattr("short", "trusted.on-a-symlink", b"s", 0);
    for (name, size) in [("user.a", 0), ("user.a", 1), ("user.a", 2), ("user.empty", 0), ("user.b", 8)] {
        r.getxattr("data", name, size);
    }
    r.getxattr("data", "trusted.t", 64);
    r.getxattr("missing", "user.a", 8);
    r.listxattr("data", 0);
    r.listxattr("data", 4);
    r.listxattr("data", 4096);
    r.listxattr_exact("data");
    r.listxattr("short", 4096);
    // Names are bytes after the prefix, UTF-8 or not (as `cp -a` copies
    // them): two that differ only in a non-UTF-8 byte are two names.
    r.setxattr("data", b"user.\xff\xfe not UTF-8", b"bytes", libc::XATTR_CREATE);
    r.setxattr("data", b"trusted.\x80", b"t", 0);
    r.setxattr("data", b"user.\xc3\xa9t\xc3\xa9", b"UTF-8, not ASCII", 0);
    r.getxattr("data", b"user.\xff\xfe not UTF-8", 16);
    r.getxattr("data", b"user.\xff\xff not UTF-8", 16);
    r.getxattr("data", b"user.\xc3\xa9t\xc3\xa9", 32);
    r.listxattr_exact("data");
    for name in [&b"user.zz"[..], b"user.a", b"trusted.\x80", b"trusted.\x81"] {
        let (p, cname) = (r.c("data"), CString::new(name).unwrap());
        // SAFETY: valid path and name.
        let ret = unsafe { libc::lremovexattr(p.as_ptr(), cname.as_ptr()) };
        r.said(&format!("removexattr data {}", name.escape_ascii()), i64::from(ret));
    }
    r.getxattr("data", "user.a", 8);

    // What a write, a truncate and a chown take from a file: its set-ID
    // bits by the caller's rule and its file capabilities, whoever writes
    // (csumfs's part of the work with FUSE_HANDLE_KILLPRIV_V2). A v2
    // capability set: CAP_NET_BIND_SERVICE, effective.
    let caps = [1u8, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let file = r.c("setid");
    let (user, member) = ((65_534, 65_534), (65_534, 0));
    let write = |file: &CString| {
        // SAFETY: a valid path; a buffer of the length given.
        unsafe {
            let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return fd;
            }
            let n = libc::pwrite(fd, b"written".as_ptr().cast(), 7, 3);
            libc::close(fd);
            n as libc::c_int
        }
    };
    std::fs::write(root.join("setid"), b"0123456789").unwrap();
    for (mode, who) in [
        (0o6755, None),
        (0o6777, Some(user)),
        (0o2666, Some(user)),
        (0o2666, Some(member)),
        (0o4666, Some(member)),
        (0o2676, Some(member)),
    ] {
        // SAFETY: a valid path.
        r.said(&format!("chmod setid {mode:o}"), i64::from(unsafe { libc::chmod(file.as_ptr(), mode) }));
        r.setxattr("setid", "security.capability", &caps, 0);
        match who {
            None => {
                let n = write(&file);
                r.said("pwrite setid as root", i64::from(n));
            }
            Some(who) => r.as_user("pwrite setid", who, || write(&file)),
        }
        r.stat("setid");
        r.getxattr("setid", "security.capability", 64);
    }
    for (mode, who) in [(0o6777, Some(user)), (0o6777, None)] {
        // SAFETY: a valid path.
        r.said(&format!("chmod setid {mode:o}"), i64::from(unsafe { libc::chmod(file.as_ptr(), mode) }));
        // SAFETY: a valid path; plain integer arguments.
        let allocate = || unsafe {
            let fd = libc::open(file.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd < 0 {
                return fd;
            }
            let ret = libc::fallocate(fd, 0, 0, 16_384);
            libc::close(fd);
            ret
        };
        match who {
            None => r.said("fallocate setid as root", i64::from(allocate())),
            Some(who) => {
                r.as_user("fallocate setid", who, allocate);
                0
            }
        };
        r.stat("setid");
    }
    for (mode, who) in [(0o6777, Some(user)), (0o2666, Some(member)), (0o6755, None)] {
        // SAFETY: a valid path.
        r.said(&format!("chmod setid {mode:o}"), i64::from(unsafe { libc::chmod(file.as_ptr(), mode) }));
        // SAFETY: a valid path.
        let truncate = || unsafe { libc::truncate(file.as_ptr(), 5) };
        match who {
            None => r.said("truncate setid as root", i64::from(truncate())),
            Some(who) => {
                r.as_user("truncate setid", who, truncate);
                0
            }
        };
        r.stat("setid");
    }
    // (Not chown to -1:-1, where ext4 drops set-user-ID: through FUSE with
    // KILLPRIV_V2 it is a setattr of nothing, as the capability removal
    // before a write is, and csumfs keeps the bits — POSIX allows either.)
    for (mode, owner) in [(0o6755, (0, 0)), (0o2745, (1, 1)), (0o6745, (2, 2)), (0o6755, (3, 0))] {
        // SAFETY: a valid path.
        r.said(&format!("chmod setid {mode:o}"), i64::from(unsafe { libc::chmod(file.as_ptr(), mode) }));
        // SAFETY: a valid path.
        let ret = unsafe { libc::chown(file.as_ptr(), owner.0, owner.1) };
        r.said(&format!("chown setid {}:{}", owner.0 as i32, owner.1 as i32), i64::from(ret));
        r.stat("setid");
    }

    // Inode flags: lsattr's and chattr's ioctls, the XFS-style view, the
    // generation, and a command neither knows.
    r.ioctl_int("data", "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
    r.ioctl_int("sgid", "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
    let flags = 0x80000 | 0x40 | 0x80; // extents, nodump, noatime
    r.ioctl_int("data", "FS_IOC_SETFLAGS", libc::FS_IOC_SETFLAGS, Some(flags), false);
    r.ioctl_int("data", "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
    r.fsgetxattr("data");
    r.fsgetxattr("sgid");
    r.ioctl_int("data", "FS_IOC_GETVERSION", libc::FS_IOC_GETVERSION, None, false);
    r.ioctl_int("data", "an unknown command", 0x8004_6699, None, true);
    // chattr's every letter, one at a time, on a file and a directory:
    // what ext4 stores (s u c t x, T and P on a directory), ignores (m:
    // visible, not modifiable), refuses (C, not an ext4 flag; T and P on a
    // file; F without casefold) and asks a capability for (j). (`e` below.)
    std::fs::write(root.join("lettered"), b"").unwrap();
    mkdir(&mut r, "lettered-dir", 0o755);
    let letters = [
        ("s", 0x1),
        ("u", 0x2),
        ("c", 0x4),
        ("m", 0x400),
        ("j", 0x4000),
        ("t", 0x8000),
        ("T", 0x2_0000),
        ("C", 0x80_0000),
        ("x", 0x200_0000),
        ("P", 0x2000_0000),
        ("F", 0x4000_0000),
        ("the former EOFBLOCKS", 0x40_0000),
        ("EA_INODE, not shown", 0x20_0000),
    ];
    for rel in ["lettered", "lettered-dir"] {
        let before = inode_flags(&root.join(rel)).unwrap() as i32;
        for (letter, flag) in letters {
            r.ioctl_int(rel, &format!("FS_IOC_SETFLAGS +{letter}"), libc::FS_IOC_SETFLAGS, Some(before | flag), false);
            r.ioctl_int(rel, "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
            r.ioctl_int(rel, "FS_IOC_SETFLAGS as before", libc::FS_IOC_SETFLAGS, Some(before), false);
        }
        r.ioctl_int(rel, "FS_IOC_SETFLAGS +sucxtTP", libc::FS_IOC_SETFLAGS, Some(before | 0x2202_8007), false);
        r.ioctl_int(rel, "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
        r.fsgetxattr(rel);
    }

    // chattr -e and +e: a file of one block and an empty one become block
    // maps (ext4_ind_migrate) and extent-mapped again (ext4_ext_migrate);
    // one of 20 blocks is not made a block map (EOPNOTSUPP).
    std::fs::write(root.join("e-one"), b"one block").unwrap();
    std::fs::write(root.join("e-twenty"), vec![7u8; 20 * 4096]).unwrap();
    std::fs::write(root.join("e-empty"), b"").unwrap();
    for rel in ["e-one", "e-twenty", "e-empty"] {
        let flags = inode_flags(&root.join(rel)).unwrap() as i32;
        r.ioctl_int(rel, "FS_IOC_SETFLAGS -e", libc::FS_IOC_SETFLAGS, Some(flags & !0x8_0000), false);
        r.ioctl_int(rel, "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
        r.stat(rel);
        r.read_all(rel);
        r.ioctl_int(rel, "FS_IOC_SETFLAGS +e", libc::FS_IOC_SETFLAGS, Some(flags), false);
        r.ioctl_int(rel, "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
        r.stat(rel);
    }

    // chattr +i and +a: what ext4 refuses on them (EPERM) and what it still
    // allows — reading, appending through O_APPEND, touch, fallocate
    // without punching, a name added to an append-only directory.
    std::fs::write(root.join("imm"), b"immutable contents").unwrap();
    std::fs::write(root.join("app"), b"line 1\n").unwrap();
    std::fs::write(root.join("mover"), b"").unwrap();
    for dir in ["imm-dir", "app-dir"] {
        mkdir(&mut r, dir, 0o755);
        std::fs::write(root.join(format!("{dir}/inside")), b"x").unwrap();
    }
    for (rel, flag) in [("imm", 0x10), ("app", 0x20), ("imm-dir", 0x10), ("app-dir", 0x20)] {
        let flags = inode_flags(&root.join(rel)).unwrap() as i32 | flag;
        r.ioctl_int(rel, "FS_IOC_SETFLAGS", libc::FS_IOC_SETFLAGS, Some(flags), false);
        r.ioctl_int(rel, "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
        r.fsgetxattr(rel);
    }
    // Another flag changed while immutable stays is refused; nodump on an
    // append-only file is not.
    let imm_flags = inode_flags(&root.join("imm")).unwrap() as i32;
    r.ioctl_int("imm", "FS_IOC_SETFLAGS", libc::FS_IOC_SETFLAGS, Some(imm_flags | 0x40), false);
    let app_flags = inode_flags(&root.join("app")).unwrap() as i32;
    r.ioctl_int("app", "FS_IOC_SETFLAGS", libc::FS_IOC_SETFLAGS, Some(app_flags | 0x40), false);
    for (rel, flags) in [
        ("imm", libc::O_WRONLY),
        ("imm", libc::O_RDONLY | libc::O_TRUNC),
        ("imm", libc::O_RDWR | libc::O_APPEND),
        ("app", libc::O_WRONLY),
        ("app", libc::O_WRONLY | libc::O_APPEND | libc::O_TRUNC),
        ("imm-dir/new", libc::O_WRONLY | libc::O_CREAT),
    ] {
        let fd = r.open(rel, flags, 0o644);
        if fd >= 0 {
            Run::close(fd);
        }
    }
    r.read_all("imm");
    let fd = r.open("app", libc::O_WRONLY | libc::O_APPEND, 0);
    // SAFETY: a descriptor this run opened; a buffer of the length given.
    r.said_count("write app", unsafe { libc::write(fd, b"line 2\n".as_ptr().cast(), 7) } as i64);
    r.fallocate(fd, 0, 0, 8_192);
    r.fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, 0, 16_384);
    r.fallocate(fd, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 0, 4_096);
    r.fallocate(fd, libc::FALLOC_FL_ZERO_RANGE, 0, 4_096);
    // SAFETY: as above.
    r.said("ftruncate app 0", i64::from(unsafe { libc::ftruncate(fd, 0) }));
    // SAFETY: as above.
    r.said("fsync app", i64::from(unsafe { libc::fsync(fd) }));
    Run::close(fd);
    r.read_all("app");
    for rel in ["imm", "app", "imm-dir", "app-dir"] {
        let (p, new) = (r.c(rel), r.c(&format!("{rel}-new-name")));
        let chosen = [libc::timespec { tv_sec: 5, tv_nsec: 6 }, libc::timespec { tv_sec: 7, tv_nsec: 8 }];
        let name = c"user.refused";
        // SAFETY: valid paths and names; buffers of the lengths given.
        unsafe {
            r.said(&format!("truncate {rel} 0"), i64::from(libc::truncate(p.as_ptr(), 0)));
            r.said(&format!("chmod {rel} 700"), i64::from(libc::chmod(p.as_ptr(), 0o700)));
            r.said(&format!("chown {rel} 1 1"), i64::from(libc::chown(p.as_ptr(), 1, 1)));
            let ret = libc::utimensat(libc::AT_FDCWD, p.as_ptr(), chosen.as_ptr(), 0);
            r.said(&format!("utimensat {rel} chosen times"), i64::from(ret));
            let ret = libc::utimensat(libc::AT_FDCWD, p.as_ptr(), std::ptr::null(), 0);
            r.said(&format!("utimensat {rel} now"), i64::from(ret));
            let mtime_only = [libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT }, chosen[1]];
            let ret = libc::utimensat(libc::AT_FDCWD, p.as_ptr(), mtime_only.as_ptr(), 0);
            r.said(&format!("utimensat {rel} chosen mtime"), i64::from(ret));
            let ret = libc::setxattr(p.as_ptr(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0);
            r.said(&format!("setxattr {rel} user.refused"), i64::from(ret));
            r.said(&format!("removexattr {rel} user.refused"), i64::from(libc::removexattr(p.as_ptr(), name.as_ptr())));
            r.said(&format!("link {rel}"), i64::from(libc::link(p.as_ptr(), new.as_ptr())));
        }
        r.renameat2(rel, &format!("{rel}-new-name"), 0);
        r.stat(rel);
    }
    for dir in ["imm-dir", "app-dir"] {
        mkdir(&mut r, &format!("{dir}/sub"), 0o755);
        r.renameat2(&format!("{dir}/inside"), &format!("{dir}/moved"), 0);
        r.renameat2(&format!("{dir}/inside"), "moved-out", 0);
        r.renameat2("mover", &format!("{dir}/mover"), 0);
        let p = r.c(&format!("{dir}/inside"));
        // SAFETY: a valid path.
        r.said(&format!("unlink {dir}/inside"), i64::from(unsafe { libc::unlink(p.as_ptr()) }));
        let (target, at) = (c"inside", r.c(&format!("{dir}/symlink")));
        // SAFETY: valid paths.
        r.said(&format!("symlink {dir}/symlink"), i64::from(unsafe { libc::symlink(target.as_ptr(), at.as_ptr()) }));
        r.list(dir);
    }
    // (unlink of a directory or rmdir of a file is the VFS's EISDIR or
    // ENOTDIR before FUSE asks csumfs: ext4 says EPERM first.)
    for (rel, dir) in [("imm", false), ("app", false), ("imm-dir", true), ("app-dir", true), ("mover", false)] {
        let p = r.c(rel);
        // SAFETY: a valid path.
        let ret = unsafe {
            if dir {
                libc::rmdir(p.as_ptr())
            } else {
                libc::unlink(p.as_ptr())
            }
        };
        r.said(&format!("remove {rel}"), i64::from(ret));
    }
    r.read_all("app-dir/mover");

    // chattr +SDdA on a directory: what its new files and directories
    // inherit (ext4_mask_flags: no D on a file); D and T asked of a file
    // are dropped, not refused; S set and cleared on a file.
    mkdir(&mut r, "sync-dir", 0o755);
    let flags = inode_flags(&root.join("sync-dir")).unwrap() as i32 | 0x8 | 0x1_0000 | 0x40 | 0x80;
    r.ioctl_int("sync-dir", "FS_IOC_SETFLAGS", libc::FS_IOC_SETFLAGS, Some(flags), false);
    r.ioctl_int("sync-dir", "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
    r.fsgetxattr("sync-dir");
    let fd = r.open("sync-dir/file", libc::O_CREAT | libc::O_WRONLY, 0o644);
    // SAFETY: a descriptor this run opened; a buffer of the length given.
    r.said_count("write sync-dir/file", unsafe { libc::write(fd, b"synchronous".as_ptr().cast(), 11) } as i64);
    Run::close(fd);
    mkdir(&mut r, "sync-dir/sub", 0o755);
    let (target, at) = (c"file", r.c("sync-dir/symlink"));
    // SAFETY: valid paths.
    r.said("symlink sync-dir/symlink", i64::from(unsafe { libc::symlink(target.as_ptr(), at.as_ptr()) }));
    for rel in ["sync-dir/file", "sync-dir/sub"] {
        r.ioctl_int(rel, "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
        r.fsgetxattr(rel);
    }
    let file_flags = inode_flags(&root.join("sync-dir/file")).unwrap() as i32;
    for extra in [0x1_0000, 0x2_0000, 0, !0x8] {
        let asked = if extra == !0x8 { file_flags & extra } else { file_flags | extra };
        r.ioctl_int("sync-dir/file", "FS_IOC_SETFLAGS", libc::FS_IOC_SETFLAGS, Some(asked), false);
        r.ioctl_int("sync-dir/file", "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
    }
    r.renameat2("sync-dir/file", "sync-dir/renamed", 0);
    r.list("sync-dir");

    // A directory big enough to list in pieces and resume.
    mkdir(&mut r, "list", 0o755);
    for i in 0..40 {
        std::fs::write(root.join(format!("list/entry-{i:02}")), "").unwrap();
    }
    mkdir(&mut r, "list/subdir", 0o755);
    r.list("list");
    r.list("");

    // A file unlinked while open keeps its blocks until its last close.
    let fd = r.open("doomed", libc::O_CREAT | libc::O_RDWR, 0o600);
    let big = pattern(200_000, 3);
    // SAFETY: as above.
    let n = unsafe { libc::write(fd, big.as_ptr().cast(), big.len()) };
    r.said_count("write doomed", n as i64);
    // SAFETY: a descriptor this run opened.
    r.said("fsync doomed", i64::from(unsafe { libc::fsync(fd) }));
    std::fs::remove_file(root.join("doomed")).unwrap();
    r.statfs();
    let before = free_blocks(&r.root);
    // SAFETY: a descriptor this run opened; a zeroed stat to fill.
    let links = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        assert_eq!(libc::fstat(fd, &mut st), 0);
        st.st_nlink
    };
    r.note(format!("doomed links while open: {links}"));
    let freed = close_last_handle(&r.root, fd, before);
    r.note(format!("doomed's close freed {freed} blocks"));
    // The same for a file that existed before it was opened (FUSE's open,
    // not its create).
    std::fs::write(root.join("held"), pattern(50_000, 4)).unwrap();
    let fd = r.open("held", libc::O_RDWR, 0);
    std::fs::remove_file(root.join("held")).unwrap();
    // SAFETY: as above.
    let n = unsafe { libc::pwrite(fd, b"written after its unlink".as_ptr().cast(), 24, 49_990) };
    r.said_count("pwrite held after its unlink", n as i64);
    let mut back = vec![0u8; 60_000];
    // SAFETY: as above.
    let n = unsafe { libc::pread(fd, back.as_mut_ptr().cast(), back.len(), 0) };
    let n = r.said_count("pread held after its unlink", n as i64);
    r.note(format!("  digest {:016x}", digest(&back[..n.max(0) as usize])));
    let before = free_blocks(&r.root);
    let freed = close_last_handle(&r.root, fd, before);
    r.note(format!("held's close freed {freed} blocks"));
    r.statfs();
    r.list("");
    r.lines
}

/// Closes `fd`, the last handle of a file already unlinked, and returns
/// how many blocks its close freed (free blocks were `before`): the kernel
/// frees them at the final iput, before close returns; FUSE sends its
/// release after, asynchronously — waited for, at most 10 s.
fn close_last_handle(root: &Path, fd: i32, before: u64) -> u64 {
    Run::close(fd);
    for _ in 0..100 {
        if free_blocks(root) != before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    free_blocks(root) - before
}

/// Every path under `root` (sorted), described as [`Run::stat`] does, with
/// its contents' digest, xattrs and inode flags: what a second reader sees.
fn survey(root: &Path) -> Vec<String> {
    let mut r = Run { root: root.to_path_buf(), lines: Vec::new() };
    let mut paths = vec![String::new()];
    let mut at = 0;
    while at < paths.len() {
        let dir = root.join(&paths[at]);
        if std::fs::symlink_metadata(&dir).unwrap().is_dir() {
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n != "lost+found")
                .map(|n| if paths[at].is_empty() { n } else { format!("{}/{n}", paths[at]) })
                .collect();
            names.sort();
            paths.extend(names);
        }
        at += 1;
    }
    for rel in &paths[1..] {
        r.stat(rel);
        let meta = std::fs::symlink_metadata(root.join(rel)).unwrap();
        if meta.is_file() {
            r.read_all(rel);
        }
        if meta.is_file() || meta.is_dir() {
            r.ioctl_int(rel, "FS_IOC_GETFLAGS", libc::FS_IOC_GETFLAGS, None, true);
            r.lines.retain(|l| !l.starts_with("open "));
        }
        r.listxattr(rel, 65_536);
    }
    r.lines
}

/// `FS_IOC_GETVERSION` (the inode's generation) of each file and
/// directory `survey` lists: csumfs's answer and the kernel's, reading the
/// same image, must agree.
fn generations(root: &Path, survey: &[String]) -> Vec<(String, i32)> {
    let mut out = Vec::new();
    for line in survey {
        let Some(rel) = line.strip_prefix("lstat ").and_then(|l| l.split(':').next()) else { continue };
        if !(line.contains(": mode 100") || line.contains(": mode 40")) {
            continue; // only regular files and directories open for an ioctl here
        }
        let file = std::fs::File::open(root.join(rel)).unwrap();
        let mut generation: [libc::c_int; 2] = [0, 0];
        // SAFETY: an open descriptor and room for a long.
        let ret =
            unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&file), libc::FS_IOC_GETVERSION, &mut generation) };
        assert_eq!(ret, 0, "FS_IOC_GETVERSION {rel}: {}", std::io::Error::last_os_error());
        out.push((rel.to_string(), generation[0]));
    }
    out
}

/// The first line where two transcripts part, with a few before it.
fn assert_same(kernel: &[String], csumfs: &[String], what: &str) {
    let first = kernel.iter().zip(csumfs).position(|(k, c)| k != c).unwrap_or(kernel.len().min(csumfs.len()));
    if first == kernel.len() && first == csumfs.len() {
        return;
    }
    let context = kernel[first.saturating_sub(3)..first].join("\n  ");
    panic!(
        "{what}: the transcripts part at line {first}, after\n  {context}\nkernel: {:?}\ncsumfs: {:?}",
        kernel.get(first),
        csumfs.get(first)
    );
}

#[test]
fn file_calls_through_the_mount_answer_as_the_kernels_ext4() {
    if cannot_mount() {
        return;
    }
    for block_size in ["4096", "1024"] {
        let scratch = Scratch::new(&format!("syscalls{block_size}"));
        let image = scratch.image("32M", block_size);
        let twin = scratch.0.join("twin");
        std::fs::copy(&image, &twin).unwrap();
        let kernel = scratch.0.join("kernel");
        if !kernel_mount(&twin, &kernel, "loop") {
            return;
        }
        let theirs = std::panic::catch_unwind(|| (script(&kernel), survey(&kernel)));
        unmount_kernel(&kernel);
        let (theirs, their_survey) = theirs.unwrap_or_else(|p| std::panic::resume_unwind(p));
        e2fsck_clean(&twin);

        let child = mount_foreground(&image, &scratch.mnt(), &["-o", "allow_other"]);
        let ours = std::panic::catch_unwind(|| {
            let (lines, survey) = (script(&scratch.mnt()), survey(&scratch.mnt()));
            let generations = generations(&scratch.mnt(), &survey);
            (lines, survey, generations)
        });
        unmount_and_wait(child, &scratch.mnt());
        let (ours, our_survey, our_generations) = ours.unwrap_or_else(|p| std::panic::resume_unwind(p));
        assert_same(&theirs, &ours, &format!("{block_size}-byte blocks: the script"));
        assert_same(&their_survey, &our_survey, &format!("{block_size}-byte blocks: the survey"));
        e2fsck_clean(&image);
        // The kernel reads what csumfs wrote as csumfs showed it.
        if !kernel_mount(&image, &kernel, "loop,ro") {
            return;
        }
        let read_back = std::panic::catch_unwind(|| {
            let survey = survey(&kernel);
            let generations = generations(&kernel, &survey);
            (survey, generations)
        });
        unmount_kernel(&kernel);
        let (read_back, kernel_generations) = read_back.unwrap_or_else(|p| std::panic::resume_unwind(p));
        assert_same(&their_survey, &read_back, &format!("{block_size}-byte blocks: the kernel reading csumfs's image"));
        assert!(our_generations.len() > 20, "{our_generations:?}");
        assert_eq!(our_generations, kernel_generations, "FS_IOC_GETVERSION: csumfs and the kernel on one image");
    }
}

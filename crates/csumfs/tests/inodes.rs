//! Inodes as the kernel reads them: files the kernel's ext4 made (loop
//! mount) with times before 1970 and past 2038 with nanoseconds, owners
//! past 16 bits, a size past 4 GiB, device numbers in both encodings, link
//! counts, flags and generations — then a few fields debugfs sets past what
//! a small image reaches (a block count past 2^32 sectors, an xattr block
//! number's high half). csumfs's `Volume::inode` must give every field the
//! kernel's `statx` (and `FS_IOC_GETFLAGS`, `FS_IOC_GETVERSION`) gives,
//! at 256-byte inodes (extra time fields, creation time) and 128-byte ones
//! (neither).

mod common;

use common::{have_e2fsprogs, tool, with_kernel_mount_with, Scratch};
use csumfs::{Inode, Options, Volume};
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use std::sync::Mutex;

/// `FS_IOC_GETFLAGS` and `FS_IOC_GETVERSION` (`_IOR('f', 1, long)`,
/// `_IOR('v', 1, long)`).
const FS_IOC_GETFLAGS: libc::c_ulong = 0x8008_6601;
const FS_IOC_GETVERSION: libc::c_ulong = 0x8008_7601;
/// `EXT4_FL_USER_VISIBLE`: what `FS_IOC_GETFLAGS` reports of `i_flags`.
const USER_VISIBLE: u32 = 0x705B_DFFF;

/// What the kernel shows of one path.
#[derive(Debug, Default, PartialEq, Eq)]
struct Seen {
    mode: u32,
    uid: u32,
    gid: u32,
    size: u64,
    links: u32,
    blocks: u64,
    times: [(i64, u32); 3],
    /// Creation time, where statx has one.
    btime: Option<(i64, u32)>,
    rdev: (u32, u32),
    /// Flags and generation, for files and directories (opened for the ioctls).
    flags: Option<u32>,
    generation: Option<u32>,
}

fn run(program: &str, args: &[&str]) {
    let out = Command::new(program).args(args).output().unwrap();
    assert!(out.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// The kernel's view of `path`; `Err(errno)` when statx fails.
fn kernel_view(path: &Path) -> Result<Seen, i32> {
    let c = c_path(path);
    // SAFETY: statx fills a zeroed struct (all-zero is a valid value).
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct statx to fill.
    let done = unsafe {
        libc::statx(libc::AT_FDCWD, c.as_ptr(), libc::AT_SYMLINK_NOFOLLOW, libc::STATX_ALL | libc::STATX_BTIME, &mut st)
    };
    if done != 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    let t = |ts: libc::statx_timestamp| (ts.tv_sec, ts.tv_nsec);
    let file_type = u32::from(st.stx_mode) & libc::S_IFMT;
    let (flags, generation) = if file_type == libc::S_IFREG || file_type == libc::S_IFDIR {
        // SAFETY: a NUL-terminated path; flags only.
        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
        assert!(fd >= 0, "open {}: {}", path.display(), std::io::Error::last_os_error());
        let (mut flags, mut generation): (libc::c_long, libc::c_long) = (0, 0);
        // SAFETY: an open descriptor and a long to fill, as each ioctl takes.
        let ok = unsafe {
            libc::ioctl(fd, FS_IOC_GETFLAGS, &mut flags) == 0
                && libc::ioctl(fd, FS_IOC_GETVERSION, &mut generation) == 0
        };
        // SAFETY: the descriptor opened above.
        unsafe { libc::close(fd) };
        assert!(ok, "ioctls on {}: {}", path.display(), std::io::Error::last_os_error());
        (Some(flags as u32), Some(generation as u32))
    } else {
        (None, None)
    };
    Ok(Seen {
        mode: u32::from(st.stx_mode),
        uid: st.stx_uid,
        gid: st.stx_gid,
        size: st.stx_size,
        links: st.stx_nlink,
        blocks: st.stx_blocks,
        times: [t(st.stx_atime), t(st.stx_mtime), t(st.stx_ctime)],
        btime: (st.stx_mask & libc::STATX_BTIME != 0).then(|| t(st.stx_btime)),
        rdev: (st.stx_rdev_major, st.stx_rdev_minor),
        flags,
        generation,
    })
}

/// The same fields from csumfs's inode.
fn our_view(inode: &Inode, has_btime: bool) -> Seen {
    let t = |ts: csumfs::Timespec| (ts.sec, ts.nsec);
    let file_type = u32::from(inode.mode) & libc::S_IFMT;
    let opened = file_type == libc::S_IFREG || file_type == libc::S_IFDIR;
    // Linux's device number encoding (new_decode_dev).
    let rdev = ((inode.rdev >> 8) & 0xFFF, (inode.rdev & 0xFF) | ((inode.rdev >> 12) & 0xF_FF00));
    Seen {
        mode: u32::from(inode.mode),
        uid: inode.uid,
        gid: inode.gid,
        size: inode.size,
        links: u32::from(inode.links),
        blocks: inode.blocks,
        times: [t(inode.atime), t(inode.mtime), t(inode.ctime)],
        btime: has_btime.then(|| t(inode.crtime)),
        rdev,
        flags: opened.then_some(inode.flags & USER_VISIBLE),
        generation: opened.then_some(inode.generation),
    }
}

/// The kernel makes the tree; `crafted` is applied with debugfs after.
fn populate(mnt: &Path) {
    let p = |name: &str| mnt.join(name).to_str().unwrap().to_string();
    std::fs::write(mnt.join("times"), b"t").unwrap();
    // Before 1970 and past 2038 (2^32 + 5 s: the extra field's epoch bits),
    // with nanoseconds; 128-byte inodes keep what their 32 bits hold.
    run("touch", ["-a", "-d", "@-1.000000500", &p("times")].as_slice());
    run("touch", ["-m", "-d", "@4294967301.999999999", &p("times")].as_slice());
    std::fs::write(mnt.join("owned"), b"o").unwrap();
    run("chown", ["70000:80000", &p("owned")].as_slice());
    let big = std::fs::File::create(mnt.join("big")).unwrap();
    big.set_len((5 << 30) + 1).unwrap();
    drop(big);
    std::fs::write(mnt.join("linked"), vec![7u8; 10_000]).unwrap();
    std::fs::hard_link(mnt.join("linked"), mnt.join("link2")).unwrap();
    std::fs::hard_link(mnt.join("linked"), mnt.join("link3")).unwrap();
    run("mknod", [&p("old-dev"), "c", "1", "3"].as_slice());
    run("mknod", [&p("new-dev"), "b", "300", "70000"].as_slice());
    run("mkfifo", [p("fifo").as_str()].as_slice());
    std::fs::create_dir(mnt.join("dir")).unwrap();
    std::fs::write(mnt.join("dir/flagged"), b"f").unwrap();
    run("chattr", ["+dA", &p("dir/flagged")].as_slice());
    std::os::unix::fs::symlink("times", mnt.join("fast-link")).unwrap();
    std::os::unix::fs::symlink("x".repeat(200), mnt.join("slow-link")).unwrap();
    std::fs::write(mnt.join("sectors"), b"s").unwrap();
    std::fs::write(mnt.join("acl-hi"), b"a").unwrap();
    let value = "v".repeat(300);
    let (path, name) = (c_path(&mnt.join("acl-hi")), CString::new("user.big").unwrap());
    // SAFETY: NUL-terminated path and name; a value and its length.
    let set = unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(set, 0, "setxattr: {}", std::io::Error::last_os_error());
}

#[test]
fn every_inode_field_reads_as_the_kernels_statx_shows_it() {
    if !have_e2fsprogs() || tool("debugfs").is_none() {
        return;
    }
    let scratch = Scratch::new("inodes");
    for (inode_size, features) in [("256", "metadata_csum,64bit,huge_file"), ("128", "metadata_csum,^64bit,huge_file")]
    {
        let image = scratch.0.join(format!("i{inode_size}.img"));
        common::mke2fs_with(&image, "4096", "64M", &["-I", inode_size, "-O", features]);
        let mnt = scratch.0.join("mnt");
        let made = std::sync::atomic::AtomicBool::new(false);
        with_kernel_mount_with(&image, &mnt, "loop", || {
            populate(&mnt);
            made.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        if !made.into_inner() {
            return;
        }
        // Past what the image reaches: 2^32 + 8 sectors (the kernel reads
        // i_blocks_hi with huge_file), and an xattr block number whose high
        // half the kernel reads only with 64bit.
        common::debugfs_write(&image, "sif /sectors blocks 0x100000008");
        let acl = {
            let out = Command::new(tool("debugfs").unwrap()).args(["-R", "stat /acl-hi"]).arg(&image).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            let at = text.find("File ACL: ").unwrap_or_else(|| panic!("no File ACL:\n{text}")) + 10;
            text[at..].split_whitespace().next().unwrap().parse::<u64>().unwrap()
        };
        assert_ne!(acl, 0, "a 300-byte value needs an xattr block at {inode_size}-byte inodes");
        common::debugfs_write(&image, &format!("sif /acl-hi file_acl {:#x}", (1u64 << 32) | acl));

        let names = [
            "",
            "times",
            "owned",
            "big",
            "linked",
            "link2",
            "old-dev",
            "new-dev",
            "fifo",
            "dir",
            "dir/flagged",
            "fast-link",
            "slow-link",
            "sectors",
            "acl-hi",
        ];
        let kernel: Mutex<BTreeMap<&str, Result<Seen, i32>>> = Mutex::new(BTreeMap::new());
        with_kernel_mount_with(&image, &mnt, "loop,ro", || {
            for name in names {
                kernel.lock().unwrap().insert(name, kernel_view(&mnt.join(name)));
            }
        });
        let kernel = kernel.into_inner().unwrap();
        let v = Volume::open(&image, Options::default()).unwrap();
        let wide = inode_size == "256";
        for name in names {
            let path = format!("/{name}");
            let inode = v.resolve(&path).unwrap_or_else(|e| panic!("{inode_size}: {path}: {e}"));
            match &kernel[name] {
                Ok(seen) => {
                    assert_eq!(seen.btime.is_some(), wide, "{inode_size}: {path}: creation time only in large inodes");
                    assert_eq!(&our_view(&inode, wide), seen, "{inode_size}-byte inodes: {path}");
                }
                // The kernel refuses the inode (an xattr block past the
                // filesystem); csumfs refuses its xattrs.
                Err(errno) => {
                    assert_eq!((name, *errno), ("acl-hi", libc::EUCLEAN), "{inode_size}: {path}");
                    assert!(wide, "the high half counts only with 64bit");
                    let err = v.xattrs(&inode).unwrap_err();
                    assert!(err.to_string().contains("outside the filesystem"), "{path}: {err}");
                }
            }
        }
        if !wide {
            let values = v.xattrs(&v.resolve("/acl-hi").unwrap()).unwrap();
            let big = values.iter().find(|(name, _)| name == "user.big").map(|(_, value)| value.len());
            assert_eq!(big, Some(300), "^64bit: the high half is not read");
        }
        let times = v.resolve("/times").unwrap();
        if wide {
            // -1.0000005 s: 999 999 500 ns into the second before -1.
            assert_eq!((times.atime.sec, times.atime.nsec), (-2, 999_999_500), "the kernel kept the time before 1970");
            assert_eq!(times.mtime.sec, (1 << 32) + 5, "the kernel kept the time past 2106");
        }
        assert_eq!(v.resolve("/sectors").unwrap().blocks, (1 << 32) + 8);
        assert_eq!(v.resolve("/big").unwrap().size, (5 << 30) + 1);
    }
}

/// `i_extra_isize` decides which of the extra fields an inode has: each
/// time's high bits and nanoseconds, the creation time and its extra part
/// (the kernel's `EXT4_FITS_IN_INODE`, field by field). debugfs sets it on
/// a kernel-made file to every size from none to the whole 256-byte inode
/// and one past it; the kernel's statx (a fresh mount each time) judges:
/// csumfs gives the same fields, and refuses the inodes the kernel refuses.
#[test]
fn i_extra_isize_decides_the_extra_fields_as_the_kernel_reads_them() {
    if !have_e2fsprogs() || tool("debugfs").is_none() {
        return;
    }
    let scratch = Scratch::new("extra-isize");
    let image = scratch.0.join("x.img");
    common::mke2fs_with(&image, "4096", "16M", &["-I", "256"]);
    let mnt = scratch.0.join("mnt");
    let made = std::sync::atomic::AtomicBool::new(false);
    with_kernel_mount_with(&image, &mnt, "loop", || {
        let p = mnt.join("t").to_str().unwrap().to_string();
        std::fs::write(&p, b"t").unwrap();
        run("touch", ["-a", "-d", "@-7.25", &p].as_slice());
        run("touch", ["-m", "-d", "@4294967301.5", &p].as_slice());
        made.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    if !made.into_inner() {
        return;
    }
    let (mut refused, mut read) = (0, 0);
    for extra in [0u16, 4, 8, 12, 16, 20, 24, 28, 32, 128, 132] {
        common::debugfs_write(&image, &format!("sif /t extra_isize {extra}"));
        let kernel: Mutex<Option<Result<Seen, i32>>> = Mutex::new(None);
        with_kernel_mount_with(&image, &mnt, "loop,ro", || {
            *kernel.lock().unwrap() = Some(kernel_view(&mnt.join("t")));
        });
        let kernel = kernel.into_inner().unwrap().expect("mounted above");
        let v = Volume::open(&image, Options::default()).unwrap();
        match (kernel, v.resolve("/t")) {
            (Ok(seen), Ok(ours)) => {
                read += 1;
                assert_eq!(our_view(&ours, seen.btime.is_some()), seen, "i_extra_isize {extra}");
                if seen.btime.is_none() {
                    assert_eq!(ours.crtime, csumfs::Timespec::default(), "i_extra_isize {extra}: no creation time");
                }
                // A change writes only the extra fields the inode has: the
                // bytes past a short i_extra_isize (in-inode xattrs' room)
                // stay, and the kernel reads what csumfs then reads.
                drop(v);
                let mut w =
                    Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
                let mode = 0o600 + u16::from(extra % 2 == 0) * 0o40;
                let changed = w.set_attr(ours.ino, csumfs::SetAttr { mode: Some(mode), ..Default::default() }).unwrap();
                w.sync().unwrap();
                drop(w);
                let short = (1..32).contains(&extra);
                if short {
                    let from = 128 + usize::from(extra);
                    assert_eq!(changed.raw[from..], ours.raw[from..], "i_extra_isize {extra}: bytes past it written");
                }
                let again: Mutex<Option<Result<Seen, i32>>> = Mutex::new(None);
                with_kernel_mount_with(&image, &mnt, "loop,ro", || {
                    *again.lock().unwrap() = Some(kernel_view(&mnt.join("t")));
                });
                let again = again.into_inner().unwrap().expect("mounted above").unwrap();
                let v = Volume::open(&image, Options::default()).unwrap();
                let ours = v.resolve("/t").unwrap();
                assert_eq!(our_view(&ours, again.btime.is_some()), again, "i_extra_isize {extra}, after a chmod");
                assert_eq!(again.mode & 0o7777, u32::from(mode));
            }
            (Err(errno), Err(e)) => {
                refused += 1;
                assert_eq!(errno, libc::EUCLEAN, "i_extra_isize {extra}");
                assert!(e.to_string().contains("i_extra_isize"), "i_extra_isize {extra}: {e}");
            }
            (kernel, ours) => panic!("i_extra_isize {extra}: the kernel {kernel:?}, csumfs {ours:?}"),
        }
    }
    assert!(read >= 9 && refused >= 1, "{read} read, {refused} refused");
}

/// Inode numbers up to the last are looked up; 0 and any past the
/// last are not found (`ENOENT`), never read from past the inode tables.
/// An image with few inodes, filled: its last inode is a file's.
#[test]
fn inode_numbers_run_from_one_to_the_last_and_no_further() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("inode-numbers");
    let image = scratch.0.join("n.img");
    common::mke2fs_with(&image, "1024", "4M", &["-N", "32"]);
    let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    let last = v.layout().inodes_count as u32;
    let file = csumfs::NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let mut made = Vec::new();
    while let Ok(inode) = v.create(csumfs::ROOT, format!("f{}", made.len()).as_bytes(), file) {
        made.push(inode.ino);
    }
    assert_eq!(made.last(), Some(&last), "the image filled to its last inode");
    assert_eq!(v.inode(last).unwrap().ino, last);
    assert_eq!(v.inode(csumfs::ROOT).unwrap().ino, csumfs::ROOT);
    let unused = v.inode(1).unwrap_err(); // the bad-blocks inode: no mode, no links
    assert_eq!(unused.errno(), libc::ENOENT, "{unused}");
    for ino in [0, last + 1, last + 100_000, u32::MAX] {
        let err = v.inode(ino).unwrap_err();
        assert_eq!(err.errno(), libc::ENOENT, "inode {ino}: {err}");
    }
}

/// Data goes into regular files only: a write, fallocate or hole punch on
/// a directory, a symlink or a FIFO is refused and changes nothing.
#[test]
fn only_regular_files_take_data() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("not-files");
    let image = scratch.0.join("d.img");
    common::mke2fs_with(&image, "1024", "4M", &[]);
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let new = |mode| csumfs::NewInode { mode, uid: 0, gid: 0 };
    let dir = v.mkdir(csumfs::ROOT, b"d", new(0o040_755)).unwrap().ino;
    let link = v.symlink(csumfs::ROOT, b"l", "t".repeat(100).as_bytes(), 0, 0).unwrap().ino;
    let fifo = v.mknod(csumfs::ROOT, b"p", new(0o010_644), 0).unwrap().ino;
    v.sync().unwrap();
    let before = std::fs::read(&image).unwrap();
    for ino in [dir, link, fifo] {
        assert!(v.write(ino, 0, b"data").is_err(), "write into inode {ino}");
        assert!(v.fallocate(ino, 0, 4096, false).is_err(), "fallocate of inode {ino}");
        assert!(v.punch_hole(ino, 0, 1024).is_err(), "hole punched in inode {ino}");
    }
    v.sync().unwrap();
    drop(v);
    assert!(std::fs::read(&image).unwrap() == before, "a refusal changed the image");
    common::assert_clean(&image, "refused data operations");
}

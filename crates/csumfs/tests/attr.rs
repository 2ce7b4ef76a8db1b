//! Truncation, attributes, unwritten extents and device nodes written by
//! csumfs, judged by `e2fsck -fn` after every step and read back by the
//! kernel's ext4 (a loop mount, where allowed).

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs, mke2fs_with, with_kernel_mount, with_kernel_mount_with, Scratch};
use csumfs::{NewInode, Options, SetAttr, Timespec, Volume, ROOT};
use std::os::unix::fs::{FileTypeExt, MetadataExt};

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };

#[test]
fn truncation_times_unwritten_extents_and_devices_are_what_e2fsck_and_the_kernel_expect() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("attr");
    let image = scratch.0.join("a.img");
    mke2fs(&image, "1024", "32M");
    let bs = 1024u64;
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();

    // Sixty one-block extents with holes between: an extent tree of depth 1.
    let sparse = v.create(ROOT, b"sparse", FILE).unwrap().ino;
    let mut model = Vec::new();
    for i in 0..60u64 {
        let at = i * 2 * bs + 7;
        let data: Vec<u8> = (0..100).map(|k| (i as u8) ^ k).collect();
        v.write(sparse, at, &data).unwrap();
        model.resize(at as usize, 0);
        model.extend_from_slice(&data);
    }
    assert!(v.runs(&v.inode(sparse).unwrap()).unwrap().len() >= 60);
    assert_clean(&image, "sixty sparse writes");
    for cut in [50 * 2 * bs + 30, 20 * 2 * bs + bs, 3 * 2 * bs + 1, 2 * bs + 7, 0, 5 * bs + 3] {
        v.truncate(sparse, cut).unwrap();
        model.resize(cut as usize, 0);
        assert_eq!(v.read_all(&v.inode(sparse).unwrap()).unwrap(), model, "after truncate to {cut}");
        assert_clean(&image, &format!("truncate to {cut}"));
    }
    v.write(sparse, 100 * bs, b"tail").unwrap();
    model.resize(100 * bs as usize, 0);
    model.extend_from_slice(b"tail");

    // Unwritten extents written into: one in the inode, and at depth 1.
    let falloc = v.create(ROOT, b"falloc", FILE).unwrap().ino;
    v.fallocate(falloc, 0, 40 * bs, false).unwrap();
    v.write(falloc, 3 * bs + 5, b"written into an unwritten extent").unwrap();
    let mut falloc_model = vec![0u8; 40 * bs as usize];
    falloc_model[3 * bs as usize + 5..][..32].copy_from_slice(b"written into an unwritten extent");
    let deep = v.create(ROOT, b"deep-falloc", FILE).unwrap().ino;
    for i in 0..12u64 {
        v.fallocate(deep, i * 3 * bs, bs, false).unwrap();
    }
    v.write(deep, 9 * 3 * bs + 10, b"deep").unwrap();
    let mut deep_model = vec![0u8; (11 * 3 + 1) * bs as usize];
    deep_model[9 * 3 * bs as usize + 10..][..4].copy_from_slice(b"deep");
    assert_eq!(v.read_all(&v.inode(falloc).unwrap()).unwrap(), falloc_model);
    assert_eq!(v.read_all(&v.inode(deep).unwrap()).unwrap(), deep_model);
    assert_clean(&image, "writes into unwritten extents");

    // Times past 2038 and before 1970, mode and owner.
    let t = |sec: i64, nsec: u32| Timespec { sec, nsec };
    let attr = SetAttr {
        mode: Some(0o4751),
        uid: Some(70_000),
        gid: Some(80_000),
        atime: Some(t(1 << 31, 1)),
        mtime: Some(t((1 << 32) + 5, 999_999_999)),
        ctime: Some(t(-1, 500)),
        size: None,
        times_now: false,
    };
    let changed = v.set_attr(falloc, attr).unwrap();
    assert_eq!((changed.mode, changed.uid, changed.gid), (0o104_751, 70_000, 80_000));
    assert_eq!(
        (changed.atime, changed.mtime, changed.ctime),
        (t(1 << 31, 1), t((1 << 32) + 5, 999_999_999), t(-1, 500))
    );

    // Device nodes in both encodings, a FIFO and a socket.
    let dev = |mode: u16| NewInode { mode, uid: 0, gid: 0 };
    v.mknod(ROOT, b"null", dev(0o020_666), 1 << 8 | 3).unwrap();
    let big = (300u32 << 8) | (70_000 & 0xFF) | ((70_000 & !0xFF) << 12);
    v.mknod(ROOT, b"bigdev", dev(0o060_600), big).unwrap();
    v.mknod(ROOT, b"fifo", dev(0o010_644), 0).unwrap();
    v.mknod(ROOT, b"sock", dev(0o140_755), 0).unwrap();
    assert!(v.mknod(ROOT, b"file", dev(0o100_644), 0).is_err(), "mknod makes no regular files");
    v.sync().unwrap();
    assert_clean(&image, "attributes and device nodes");
    drop(v);

    let mnt = scratch.0.join("mnt");
    with_kernel_mount(&image, &mnt, || {
        assert_eq!(std::fs::read(mnt.join("sparse")).unwrap(), model, "kernel: sparse");
        assert_eq!(std::fs::read(mnt.join("falloc")).unwrap(), falloc_model, "kernel: falloc");
        assert_eq!(std::fs::read(mnt.join("deep-falloc")).unwrap(), deep_model, "kernel: deep-falloc");
        let m = std::fs::metadata(mnt.join("falloc")).unwrap();
        assert_eq!((m.mode(), m.uid(), m.gid()), (0o104_751, 70_000, 80_000), "kernel: mode and owner");
        assert_eq!((m.atime(), m.atime_nsec()), (1 << 31, 1), "kernel: atime past 2038");
        assert_eq!((m.mtime(), m.mtime_nsec()), ((1 << 32) + 5, 999_999_999), "kernel: mtime past 2106");
        assert_eq!((m.ctime(), m.ctime_nsec()), (-1, 500), "kernel: ctime before 1970");
        let rdev = |name: &str| {
            let m = std::fs::symlink_metadata(mnt.join(name)).unwrap();
            (libc::major(m.rdev()), libc::minor(m.rdev()))
        };
        assert_eq!(rdev("null"), (1, 3));
        assert_eq!(rdev("bigdev"), (300, 70_000));
        assert!(std::fs::symlink_metadata(mnt.join("null")).unwrap().file_type().is_char_device());
        assert!(std::fs::symlink_metadata(mnt.join("bigdev")).unwrap().file_type().is_block_device());
        assert!(std::fs::symlink_metadata(mnt.join("fifo")).unwrap().file_type().is_fifo());
        assert!(std::fs::symlink_metadata(mnt.join("sock")).unwrap().file_type().is_socket());
    });
}

/// Device numbers on both sides of the old 16-bit encoding's limits
/// (major or minor 255 vs 256), and a FIFO given a device number (which
/// the kernel's mknod ignores): csumfs's inodes hold in `i_block` the very
/// bytes the kernel's ext4 writes for the same mknod.
#[test]
fn device_numbers_are_encoded_byte_for_byte_as_the_kernel_encodes_them() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("devnums");
    let (ours, kernels) = (scratch.0.join("ours.img"), scratch.0.join("kernel.img"));
    mke2fs(&ours, "4096", "8M");
    mke2fs(&kernels, "4096", "8M");
    let nodes: [(&str, u16, u32, u32); 7] = [
        ("c-255-255", 0o020_644, 255, 255),
        ("c-256-1", 0o020_644, 256, 1),
        ("b-1-256", 0o060_644, 1, 256),
        ("b-4095-1048575", 0o060_644, 4095, 1_048_575),
        ("c-0-0", 0o020_644, 0, 0),
        ("fifo-1-3", 0o010_644, 1, 3),
        ("sock-1-3", 0o140_644, 1, 3),
    ];
    let mut v = Volume::open(&ours, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    for (name, mode, major, minor) in nodes {
        let rdev = libc::makedev(major, minor) as u32;
        v.mknod(ROOT, name.as_bytes(), NewInode { mode, uid: 0, gid: 0 }, rdev).unwrap();
    }
    v.sync().unwrap();
    drop(v);
    assert_clean(&ours, "device nodes");
    let mnt = scratch.0.join("mnt");
    let made = std::sync::atomic::AtomicBool::new(false);
    with_kernel_mount_with(&kernels, &mnt, "loop", || {
        for (name, mode, major, minor) in nodes {
            let path = std::ffi::CString::new(mnt.join(name).into_os_string().into_encoded_bytes()).unwrap();
            // SAFETY: a NUL-terminated path; integer arguments.
            let done = unsafe { libc::mknod(path.as_ptr(), libc::mode_t::from(mode), libc::makedev(major, minor)) };
            assert_eq!(done, 0, "kernel mknod {name}: {}", std::io::Error::last_os_error());
        }
        made.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    if !made.into_inner() {
        return;
    }
    let i_block = |image: &std::path::Path, name: &str| {
        let out = std::process::Command::new(common::tool("debugfs").unwrap())
            .args(["-R", &format!("inode_dump -b /{name}")])
            .arg(image)
            .output()
            .unwrap();
        assert!(out.status.success(), "debugfs inode_dump {name}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (name, ..) in nodes {
        assert_eq!(i_block(&ours, name), i_block(&kernels, name), "{name}: i_block, csumfs's vs the kernel's");
    }
}

/// `chattr` passes every user-visible flag: csumfs stores nodump and
/// noatime as asked (each on its own, the other flags kept), ignores the
/// bits outside the user-visible set, refuses a named flag by its name and
/// any other change (dropping the extents flag too), changing nothing then;
/// immutable and append-only are stored and enforced (EPERM as ext4), and
/// e2fsck and debugfs read the flags csumfs stored.
#[test]
fn chattr_stores_and_enforces_its_flags_and_refuses_other_flags_by_name() {
    if !have_e2fsprogs() {
        return;
    }
    const NODUMP: u32 = 0x40;
    const NOATIME: u32 = 0x80;
    let scratch = Scratch::new("flags");
    let image = scratch.0.join("f.img");
    mke2fs(&image, "4096", "8M");
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, b"kept").unwrap();
    let old = Timespec { sec: 1000, nsec: 0 };
    let base = v.set_attr(f, SetAttr { ctime: Some(old), ..SetAttr::default() }).unwrap().flags;
    assert_eq!(base & 0x8_0000, 0x8_0000, "a new file has extents");

    let set = v.set_flags(f, base | NODUMP).unwrap();
    assert_eq!(set.flags, base | NODUMP, "+d");
    assert!(set.ctime.sec > old.sec, "ctime is now");
    assert_eq!(v.set_flags(f, base | NOATIME).unwrap().flags, base | NOATIME, "+A -d");
    assert_eq!(v.set_flags(f, base | NODUMP | NOATIME).unwrap().flags, base | NODUMP | NOATIME);
    let now = v.inode(f).unwrap().flags;

    // As the kernel's ext4 answers (6.18, compared by hand: chattr and
    // lsattr on a loop mount): flags it does not show are refused — EA_INODE
    // (0x20_0000), btrfs's no-copy-on-write (C). (A change of the extents
    // flag converts the mapping: block_map.rs, against the kernel.)
    let refused = |v: &mut Volume, flags: u32| match v.set_flags(f, flags) {
        Err(csumfs::Error::Unsupported { feature, .. }) => feature.to_string(),
        other => panic!("flags {flags:#x}: {other:?}"),
    };
    assert_eq!(refused(&mut v, now | 0x20_0000), "an inode flag");
    assert_eq!(refused(&mut v, now | 0x80_0000), "the no-copy-on-write flag (C)");
    assert_eq!(v.inode(f).unwrap().flags, now, "a refusal changes nothing");
    // Marks ext4 stores without acting on them — secure deletion (s),
    // undelete (u), compression (c), no tail merging (t), DAX (x) — are
    // stored; data journaling (j) is not (no journal), nor no compression
    // (m: visible, not modifiable), and neither is refused.
    let marks = 0x1 | 0x2 | 0x4 | 0x8000 | 0x200_0000;
    assert_eq!(v.set_flags(f, now | marks | 0x4000 | 0x400).unwrap().flags, now | marks);
    // DAX stored, data journaling is refused beside it (`dax_compatible`).
    assert_eq!(
        refused(&mut v, now | marks | 0x4000),
        "DAX (x) beside data journaling, inline data, encryption or verity"
    );
    assert_eq!(v.set_flags(f, now).unwrap().flags, now, "and taken off again");
    let marked = v.create(ROOT, b"marked", FILE).unwrap(); // judged by e2fsck below
    assert_eq!(v.set_flags(marked.ino, marked.flags | marks).unwrap().flags, marked.flags | marks);

    // Immutable: every change to it, its name and its flags is EPERM (the
    // FUSE mount's calls are compared with the kernel's in
    // csumkit-cli's mount_syscalls); cleared, it changes again.
    const IMMUTABLE: u32 = 0x10;
    const APPEND: u32 = 0x20;
    let d = v.mkdir(ROOT, b"d", NewInode { mode: 0o040_755, uid: 0, gid: 0 }).unwrap().ino;
    v.create(d, b"in-d", FILE).unwrap();
    let now = v.set_flags(f, now | IMMUTABLE).unwrap().flags;
    let d_flags = v.inode(d).unwrap().flags;
    v.set_flags(d, d_flags | IMMUTABLE).unwrap();
    let eperm = |r: Result<(), csumfs::Error>, what: &str| {
        assert_eq!(r.map_err(|e| e.errno()), Err(libc::EPERM), "{what}");
    };
    let chosen = Timespec { sec: 5, nsec: 6 };
    eperm(v.write(f, 4, b"x").map(drop), "write");
    eperm(v.fallocate(f, 0, 8192, false).map(drop), "fallocate");
    eperm(v.truncate(f, 0).map(drop), "truncate");
    eperm(v.punch_hole(f, 0, 1).map(drop), "punch");
    eperm(v.set_attr(f, SetAttr { mode: Some(0o600), ..SetAttr::default() }).map(drop), "chmod");
    eperm(v.set_attr(f, SetAttr { atime: Some(chosen), times_now: true, ..SetAttr::default() }).map(drop), "touch");
    eperm(v.setxattr(f, "user.x", b"v", csumfs::XattrMode::Either).map(drop), "setxattr");
    eperm(v.removexattr(f, "user.x").map(drop), "removexattr, though absent");
    eperm(v.link(f, ROOT, b"f2").map(drop), "link");
    eperm(v.unlink(ROOT, b"f"), "unlink");
    eperm(v.rename(ROOT, b"f", ROOT, b"g", csumfs::RenameMode::Replace), "rename");
    eperm(v.create(d, b"new", FILE).map(drop), "create in an immutable directory");
    eperm(v.unlink(d, b"in-d"), "unlink from an immutable directory");
    eperm(v.rename(d, b"in-d", ROOT, b"out", csumfs::RenameMode::Replace), "rename out of it");
    eperm(v.set_flags(f, now & !NODUMP).map(drop), "another flag while it stays immutable");
    assert_eq!(v.read_all(&v.inode(f).unwrap()).unwrap(), b"kept");
    // may_open's refusals (the mount's opens are compared with the
    // kernel's in mount_syscalls): per open flags, (immutable, append-only).
    let (rdonly, wronly, rdwr, append, trunc) =
        (libc::O_RDONLY, libc::O_WRONLY, libc::O_RDWR, libc::O_APPEND, libc::O_TRUNC);
    let opens = [
        (rdonly, (false, false)),
        (rdonly | append, (false, false)),
        (rdonly | trunc, (true, true)),
        (wronly, (true, true)),
        (rdwr, (true, true)),
        (wronly | append, (true, false)),
        (rdwr | append, (true, false)),
        (wronly | append | trunc, (true, true)),
    ];
    let refusals = |v: &Volume| opens.map(|(flags, _)| v.inode(f).unwrap().open_refused(flags));
    assert_eq!(refusals(&v), opens.map(|(_, (immutable, _))| immutable), "immutable");
    // Append-only: data added, nothing else; names added to a directory.
    let now = v.set_flags(f, now & !IMMUTABLE | APPEND).unwrap().flags;
    v.set_flags(d, d_flags | APPEND).unwrap();
    assert_eq!(refusals(&v), opens.map(|(_, (_, append_only))| append_only), "append-only");
    v.write(f, 4, b" more").unwrap();
    v.fallocate(f, 0, 8192, true).unwrap();
    v.set_attr(f, SetAttr { atime: Some(chosen), times_now: true, ..SetAttr::default() }).unwrap();
    eperm(v.set_attr(f, SetAttr { atime: Some(chosen), ..SetAttr::default() }).map(drop), "chosen times");
    eperm(v.truncate(f, 4).map(drop), "truncate");
    eperm(v.zero_range(f, 0, 4, true).map(drop), "zero range");
    eperm(v.unlink(ROOT, b"f"), "unlink");
    v.create(d, b"new", FILE).unwrap();
    eperm(v.unlink(d, b"new"), "unlink from an append-only directory");
    // Cleared, both change again.
    let now = v.set_flags(f, now & !APPEND).unwrap().flags;
    v.set_flags(d, d_flags).unwrap();
    assert_eq!(refusals(&v), [false; 8], "neither");
    assert_eq!(v.read_all(&v.inode(f).unwrap()).unwrap(), b"kept more");
    v.truncate(f, 4).unwrap();
    v.unlink(d, b"new").unwrap();
    let now = v.set_flags(f, now | IMMUTABLE | APPEND).unwrap().flags;
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "flags");
    let stat = std::process::Command::new(common::tool("debugfs").unwrap())
        .args(["-R", "stat /f"])
        .arg(&image)
        .output()
        .unwrap();
    let stat = String::from_utf8_lossy(&stat.stdout);
    assert!(stat.contains(&format!("Flags: {now:#x}")), "debugfs reads the flags csumfs stored ({now:#x}):\n{stat}");
}

/// chattr +S and +D (`EXT4_SYNC_FL`, `EXT4_DIRSYNC_FL`): stored, masked
/// and inherited as ext4 does (`ext4_mask_flags`, `EXT4_FL_INHERITED`;
/// the values below are what the kernel's ext4 gave the same calls, and
/// csumkit-cli's mount_syscalls compares them call by call), and a change
/// to an inode they mark asks for a sync before it is answered
/// (`take_synchronous`, which the mount obeys) — no other change does.
#[test]
fn synchronous_flags_are_inherited_as_on_ext4_and_their_changes_ask_for_a_sync() {
    if !have_e2fsprogs() {
        return;
    }
    const SYNC: u32 = 0x8;
    const DIRSYNC: u32 = 0x1_0000;
    const EXTENTS: u32 = 0x8_0000;
    let scratch = Scratch::new("sync-flags");
    let image = scratch.0.join("s.img");
    mke2fs(&image, "4096", "8M");
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let dir = NewInode { mode: 0o040_755, uid: 0, gid: 0 };
    let plain = v.mkdir(ROOT, b"plain", dir).unwrap().ino;
    let typeless = NewInode { mode: 0o755, uid: 0, gid: 0 };
    assert!(v.mkdir(plain, b"typeless", typeless).unwrap().is_dir(), "mkdir gives the type itself");
    let f = v.create(plain, b"f", FILE).unwrap().ino;
    assert!(!v.take_synchronous(), "nothing is marked yet");
    v.write(f, 0, b"data").unwrap();
    v.create(plain, b"g", FILE).unwrap();
    assert!(!v.take_synchronous(), "unmarked changes are made durable at fsync");

    // +D on a regular file is refused, as ext4 refuses it; +S is kept.
    let flags = v.inode(f).unwrap().flags;
    // So are the other flags of directories only: T, casefold, project
    // inheritance (by their refusal's name: on a directory T and P are
    // stored, casefold refused as the feature is).
    for (flag, name) in [(DIRSYNC, "D"), (0x2_0000, "T"), (0x4000_0000, "casefold"), (0x2000_0000, "P")] {
        match v.set_flags(f, flags | flag) {
            Err(csumfs::Error::Unsupported { feature, .. }) => {
                assert!(feature.starts_with("a flag of directories only"), "{name} on a file: {feature}");
            }
            other => panic!("{name} on a file: {other:?}"),
        }
    }
    assert_eq!(v.inode(f).unwrap().flags, flags);
    let dir_flags = v.inode(plain).unwrap().flags;
    let top_and_project = dir_flags | 0x2_0000 | 0x2000_0000;
    assert_eq!(v.set_flags(plain, top_and_project).unwrap().flags, top_and_project, "T and P on a directory");
    match v.set_flags(plain, top_and_project | 0x4000_0000) {
        Err(csumfs::Error::Unsupported { feature, .. }) => assert_eq!(feature, "the casefold flag (F)"),
        other => panic!("casefold on a directory: {other:?}"),
    }
    assert_eq!(v.set_flags(plain, dir_flags).unwrap().flags, dir_flags);
    assert!(!v.take_synchronous());
    assert_eq!(v.set_flags(f, flags | SYNC).unwrap().flags, flags | SYNC);
    assert!(v.take_synchronous(), "setting S is itself synchronous");
    v.write(f, 4, b" more").unwrap();
    assert!(v.take_synchronous(), "a write to a +S file");
    assert!(!v.take_synchronous(), "taken: asked once");
    v.set_attr(f, SetAttr { mode: Some(0o600), ..SetAttr::default() }).unwrap();
    assert!(v.take_synchronous(), "chmod of a +S file");

    // A +SDdA directory: its children take what their type keeps.
    let marked = v.mkdir(ROOT, b"marked", dir).unwrap().ino;
    let dir_flags = v.inode(marked).unwrap().flags;
    v.set_flags(marked, dir_flags | SYNC | DIRSYNC | 0x40 | 0x80).unwrap();
    assert!(v.take_synchronous());
    let file = v.create(marked, b"file", FILE).unwrap();
    assert!(v.take_synchronous(), "a name added to a +D directory");
    let sub = v.mkdir(marked, b"sub", dir).unwrap();
    let fast = v.symlink(marked, b"fast", b"x", 0, 0).unwrap();
    let long = v.symlink(marked, b"long", &[b'y'; 80], 0, 0).unwrap();
    let fifo = v.mknod(marked, b"fifo", NewInode { mode: 0o010_644, uid: 0, gid: 0 }, 0).unwrap();
    assert_eq!(file.flags, EXTENTS | SYNC | 0xC0, "file: S, d, A");
    assert_eq!(sub.flags, EXTENTS | DIRSYNC | SYNC | 0xC0, "directory: all four");
    assert_eq!((fast.flags, long.flags, fifo.flags), (0xC0, EXTENTS | 0xC0, 0xC0), "others: d and A");
    v.take_synchronous();
    v.unlink(marked, b"fifo").unwrap();
    assert!(v.take_synchronous(), "a name removed from a +D directory");

    // Only D: a file in it is not synchronous, its name is.
    v.set_flags(marked, dir_flags | DIRSYNC).unwrap();
    let only_d = v.create(marked, b"only-d", FILE).unwrap().ino;
    assert!(v.take_synchronous(), "a name added");
    v.write(only_d, 0, b"not synchronous").unwrap();
    assert!(!v.take_synchronous(), "D is not inherited by files");

    // mount -o dirsync: every directory is +D.
    v.set_mount_sync(false, true);
    v.create(plain, b"h", FILE).unwrap();
    assert!(v.take_synchronous(), "a name added with dirsync");
    v.write(only_d, 0, b"still not").unwrap();
    assert!(!v.take_synchronous(), "data with dirsync");
    // mount -o sync: every inode is +S; a change that writes no inode
    // (reading, a hold let go) asks for nothing.
    v.set_mount_sync(true, false);
    v.write(only_d, 0, b"now synchronous").unwrap();
    assert!(v.take_synchronous(), "data with sync");
    v.write(f, 0, b"marked twice").unwrap();
    assert!(v.take_synchronous(), "a +S file with sync");
    v.hold(only_d);
    v.unhold(only_d).unwrap();
    v.read_all(&v.inode(only_d).unwrap()).unwrap();
    assert!(!v.take_synchronous(), "nothing written with sync");
    v.set_mount_sync(false, false);
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "synchronous flags");
}

/// What a write takes from a file (`remove_privileges`, the mount's part
/// with FUSE_HANDLE_KILLPRIV_V2, compared with the kernel's ext4 through
/// the mount in csumkit-cli's mount_syscalls): the set-ID bits asked for,
/// no others, and the file capability; with nothing to take, nothing
/// changes — not even ctime.
#[test]
fn remove_privileges_takes_the_bits_asked_and_the_capability() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("privileges");
    let image = scratch.0.join("p.img");
    mke2fs(&image, "4096", "8M");
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    let caps = [1u8, 0, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    let old = Timespec { sec: 1000, nsec: 0 };
    let set = |v: &mut Volume, mode: u16| {
        v.set_attr(f, SetAttr { mode: Some(mode), ctime: Some(old), ..SetAttr::default() }).unwrap();
    };
    set(&mut v, 0o6755);
    v.setxattr(f, "security.capability", &caps, csumfs::XattrMode::Either).unwrap();
    v.setxattr(f, "user.kept", b"v", csumfs::XattrMode::Either).unwrap();
    set(&mut v, 0o6755);
    v.remove_privileges(f, 0o4000).unwrap();
    let inode = v.inode(f).unwrap();
    assert_eq!(inode.mode & 0o7777, 0o2755, "set-user-ID taken, set-group-ID kept");
    assert!(inode.ctime.sec > old.sec, "ctime is now");
    assert_eq!(v.getxattr(&inode, "security.capability").map_err(|e| e.errno()), Err(libc::ENODATA));
    assert_eq!(v.getxattr(&inode, "user.kept").unwrap(), b"v", "other xattrs stay");
    v.remove_privileges(f, 0o6000).unwrap();
    assert_eq!(v.inode(f).unwrap().mode & 0o7777, 0o755, "both");
    set(&mut v, 0o755);
    v.remove_privileges(f, 0o6000).unwrap();
    let inode = v.inode(f).unwrap();
    assert_eq!((inode.mode & 0o7777, inode.ctime), (0o755, old), "nothing to take: nothing changes");
    set(&mut v, 0o6755);
    v.remove_privileges(f, 0o4777).unwrap();
    assert_eq!(v.inode(f).unwrap().mode & 0o7777, 0o2755, "only set-ID bits are taken");
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "privileges");
}

/// `statfs`' free counts are the superblock's as e2fsprogs reads them: the
/// high halves of the free and reserved block counts only with `64bit`
/// (debugfs sets them on both images here; `dumpe2fs -h` is the judge).
#[test]
fn statfs_reads_the_free_counts_as_dumpe2fs_does() {
    if !have_e2fsprogs() {
        return;
    }
    let Some(dumpe2fs) = common::tool("dumpe2fs") else { return };
    let scratch = Scratch::new("statfs");
    for features in ["metadata_csum,64bit", "metadata_csum,^64bit"] {
        let image = scratch.0.join("s.img");
        common::mke2fs_with(&image, "4096", "8M", &["-O", features]);
        common::debugfs_write(&image, "ssv free_blocks_count 4294967301");
        common::debugfs_write(&image, "ssv free_inodes_count 7");
        common::debugfs_write(&image, "ssv r_blocks_count 4294967297");
        let out = std::process::Command::new(&dumpe2fs).arg("-h").arg(&image).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |label: &str| -> u64 {
            let line = text.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label}:\n{text}"));
            line[label.len()..].trim().parse().unwrap()
        };
        let v = Volume::open(&image, Options::default()).unwrap();
        let statfs = v.statfs();
        assert_eq!(
            (statfs.free_blocks, statfs.free_inodes),
            (field("Free blocks:"), field("Free inodes:")),
            "{features}"
        );
        assert_eq!(statfs.free_blocks, if features.contains("^64bit") { 5 } else { (1 << 32) + 5 }, "{features}");
        // Available: free less the reserved count (its high half too with
        // 64bit) and ext4's reserve (2 % of 2048 blocks: 40).
        let reserved = field("Reserved block count:");
        assert_eq!(reserved, if features.contains("^64bit") { 1 } else { (1 << 32) + 1 }, "{features}");
        assert_eq!(statfs.available_blocks, statfs.free_blocks.saturating_sub(reserved + 40), "{features}");
    }
}

/// `statfs`' size and available space are the kernel's (`ext4_statfs`,
/// read through `statvfs` on its read-only mount of the same image): the
/// blocks of superblock copies, descriptors, reserved GDT blocks, bitmaps,
/// inode tables and an internal journal are not counted in the size; the
/// reserved blocks and ext4's reserve (2 % or 4096 clusters, none without
/// extents) are not available. Over geometries that move each term.
#[test]
fn statfs_counts_size_and_available_space_as_the_kernel_does() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("statfs-kernel");
    let image = scratch.0.join("s.img");
    let mnt = scratch.0.join("mnt");
    // (block size, size, mke2fs options, debugfs requests after it)
    let none: &[&str] = &[];
    for (block_size, size, extra, requests) in [
        ("4096", "64M", &["-O", "has_journal"][..], none),
        ("1024", "64M", &["-m", "1"][..], none),
        ("1024", "40M", &["-O", "meta_bg,^resize_inode", "-m", "0"][..], none),
        ("4096", "300M", &["-O", "^flex_bg,^sparse_super,^resize_inode", "-N", "4000"][..], none),
        ("4096", "600M", &["-O", "^extent,^flex_bg,^64bit,^metadata_csum,metadata_csum", "-m", "9"][..], none),
        ("2048", "16M", &["-I", "128", "-J", "size=2", "-O", "has_journal"][..], none),
        ("4096", "4G", &["-E", "lazy_itable_init=1"][..], none),
        ("4096", "64M", &["-O", "bigalloc", "-C", "65536"][..], none),
        // Fields the kernel reads only with their feature: a wrong stored
        // overhead without bigalloc, a journal inode without has_journal.
        ("4096", "64M", &[][..], &["ssv overhead_clusters 100", "ssv journal_inum 7"][..]),
    ] {
        let _ = std::fs::remove_file(&image);
        common::mke2fs_with(&image, block_size, size, extra);
        for request in requests {
            common::debugfs_write(&image, request);
        }
        let ours = Volume::open(&image, Options::default()).unwrap().statfs();
        let what = format!("{block_size}-byte blocks, {size}, {extra:?}, {requests:?}");
        with_kernel_mount(&image, &mnt, || {
            let path = std::ffi::CString::new(mnt.as_os_str().as_encoded_bytes()).unwrap();
            // SAFETY: a zeroed statvfs for the kernel to fill; a valid path.
            let st = unsafe {
                let mut st: libc::statvfs = std::mem::zeroed();
                assert_eq!(libc::statvfs(path.as_ptr(), &mut st), 0);
                st
            };
            assert_eq!(
                (ours.blocks, ours.free_blocks, ours.available_blocks, ours.inodes, ours.free_inodes),
                (st.f_blocks, st.f_bfree, st.f_bavail, st.f_files, st.f_ffree),
                "{what}"
            );
        });
    }
}

/// Who takes the last free blocks (reserve.rs): an unprivileged caller
/// stops where `statfs` says nothing is available (the reserved blocks
/// and ext4's growth reserve left), a privileged one where only the
/// growth reserve is left, the library's own use at the last block; a
/// punch by the unprivileged caller on the full file system still frees
/// space. (Through the mount, mount.rs compares the same with the
/// kernel's ext4.)
#[test]
fn the_last_free_blocks_go_to_the_callers_ext4_lets_take_them() {
    use csumfs::Caller;
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("reserve");
    let image = scratch.0.join("r.img");
    mke2fs_with(&image, "1024", "20M", &["-m", "10"]);
    // Who owns the reserved blocks (the mount judges its callers by it).
    let tune2fs = std::process::Command::new(common::tool("tune2fs").unwrap())
        .args(["-u", "4242", "-g", "4343"])
        .arg(&image)
        .output()
        .unwrap();
    assert!(tune2fs.status.success(), "{}", String::from_utf8_lossy(&tune2fs.stderr));
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    assert_eq!(v.reserved_blocks_owner(), (4242, 4343));
    let s = v.statfs();
    let growth = 20 * 1024 / 50; // 2 % of the blocks (under the cap of 4096)
    let reserved = s.free_blocks - s.available_blocks - growth;
    assert!(reserved > 1000, "mke2fs -m 10 reserved {reserved} blocks");
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    let fill = |v: &mut Volume, caller: Caller| {
        v.set_caller(caller);
        let mut at = v.inode(f).unwrap().size;
        loop {
            v.begin();
            let done = v.write(f, at, &[7u8; 8192]);
            v.end(done.is_ok()).unwrap();
            match done {
                Ok(_) => at += 8192,
                Err(e) if e.errno() == libc::ENOSPC => break,
                Err(e) => panic!("{caller:?}: {e}"),
            }
        }
        // The last piece, a block at a time: up to the caller's floor exactly.
        loop {
            v.begin();
            let done = v.write(f, at, &[7u8; 1024]);
            v.end(done.is_ok()).unwrap();
            if done.is_err() {
                break;
            }
            at += 1024;
        }
        v.statfs()
    };
    // Each step leaves one block for the extent tree's growth at most.
    let user = fill(&mut v, Caller::Unprivileged);
    assert_eq!(user.available_blocks, 0, "{user:?}");
    assert!(user.free_blocks - (reserved + growth) <= 1, "{user:?}");
    let privileged = fill(&mut v, Caller::Privileged);
    assert!(privileged.free_blocks - growth <= 1 && privileged.free_blocks >= growth, "{privileged:?}");
    let library = fill(&mut v, Caller::Unrestricted);
    assert!(library.free_blocks <= 1, "{library:?}");
    // Full: the unprivileged caller may still punch (and truncate).
    v.set_caller(Caller::Unprivileged);
    v.punch_hole(f, 1 << 20, 1 << 20).unwrap();
    assert!(v.statfs().free_blocks >= 1024, "the punch freed its blocks");
    v.truncate(f, 4096).unwrap();
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "filled by three callers, punched, truncated");
}

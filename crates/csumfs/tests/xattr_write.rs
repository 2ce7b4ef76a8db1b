//! xattrs set and removed by csumfs — in the inode, spilling into a block,
//! ACLs, a block shared with other inodes — judged by `e2fsck -fn` and read
//! back through the kernel's ext4 (a loop mount, where allowed).

mod common;

use common::xattrs::{kernel_xattrs, vfs_acl};
use common::{assert_clean, have_e2fsprogs, mke2fs, with_kernel_mount, Scratch};
use csumfs::{Error, NewInode, Options, Volume, XattrMode, ROOT};
use std::collections::BTreeMap;
use std::ffi::{CString, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;

/// The kernel (a read-only loop mount) reads exactly `model`'s xattrs.
fn kernel_reads(image: &Path, mnt: &Path, model: &BTreeMap<&str, BTreeMap<OsString, Vec<u8>>>) {
    with_kernel_mount(image, mnt, || {
        for (name, want) in model {
            assert_eq!(&kernel_xattrs(&mnt.join(name)), want, "kernel: xattrs of {name}");
        }
    });
}

#[test]
fn xattrs_set_and_removed_are_what_e2fsck_and_the_kernel_expect() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("xattr");
    let image = scratch.0.join("x.img");
    mke2fs(&image, "4096", "32M");
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let mut model: BTreeMap<&str, BTreeMap<OsString, Vec<u8>>> = BTreeMap::new();

    // "many": a small one in the inode, then twenty 100-byte values that
    // spill into a block; one replaced, one removed.
    let many = v.create(ROOT, b"many", file).unwrap().ino;
    let attrs = model.entry("many").or_default();
    v.setxattr(many, "user.small", b"hi", XattrMode::Either).unwrap();
    attrs.insert("user.small".into(), b"hi".to_vec());
    assert_eq!(v.inode(many).unwrap().file_acl, 0, "a small value stays in the inode");
    for i in 0..20 {
        let value = format!("value-{i}-{}", "x".repeat(90)).into_bytes();
        v.setxattr(many, format!("user.attr{i}"), &value, XattrMode::Create).unwrap();
        attrs.insert(format!("user.attr{i}").into(), value);
    }
    assert_ne!(v.inode(many).unwrap().file_acl, 0, "the rest spills into a block");
    assert_clean(&image, "twenty xattrs");
    v.setxattr(many, "user.attr7", b"replaced", XattrMode::Replace).unwrap();
    attrs.insert("user.attr7".into(), b"replaced".to_vec());
    v.removexattr(many, "user.attr3").unwrap();
    attrs.remove(std::ffi::OsStr::new("user.attr3"));
    v.setxattr(many, "trusted.t", b"", XattrMode::Either).unwrap();
    attrs.insert("trusted.t".into(), Vec::new());
    // Refusals change nothing.
    let before = v.xattrs(&v.inode(many).unwrap()).unwrap();
    let errno = |e: Error| e.errno();
    assert_eq!(errno(v.setxattr(many, "user.small", b"x", XattrMode::Create).unwrap_err()), libc::EEXIST);
    assert_eq!(errno(v.setxattr(many, "user.nope", b"x", XattrMode::Replace).unwrap_err()), libc::ENODATA);
    assert_eq!(errno(v.removexattr(many, "user.nope").unwrap_err()), libc::ENODATA);
    assert_eq!(errno(v.setxattr(many, "bogus.name", b"x", XattrMode::Either).unwrap_err()), libc::EOPNOTSUPP);
    assert_eq!(errno(v.setxattr(many, "user.huge", &[7; 5000], XattrMode::Either).unwrap_err()), libc::ENOSPC);
    let mut filled = 0;
    let full = loop {
        match v.setxattr(many, format!("user.fill{filled}"), &[b'f'; 300], XattrMode::Create) {
            Ok(_) => filled += 1,
            Err(e) => break e,
        }
        assert!(filled < 100, "a 4 KiB block cannot hold 100 values of 300 bytes");
    };
    assert_eq!(full.errno(), libc::ENOSPC);
    for i in 0..filled {
        v.removexattr(many, format!("user.fill{i}")).unwrap();
    }
    assert_eq!(v.xattrs(&v.inode(many).unwrap()).unwrap(), before, "a refused or undone call changes nothing");
    assert_clean(&image, "replace, remove, refusals, a full block emptied again");

    // "gone": into a block and out again: the block is freed.
    let gone = v.create(ROOT, b"gone", file).unwrap().ino;
    for i in 0..3 {
        v.setxattr(gone, format!("user.g{i}"), &[b'g'; 200], XattrMode::Either).unwrap();
    }
    assert_ne!(v.inode(gone).unwrap().file_acl, 0);
    for i in 0..3 {
        v.removexattr(gone, format!("user.g{i}")).unwrap();
    }
    assert_eq!(v.inode(gone).unwrap().file_acl, 0, "an emptied block is freed");
    model.insert("gone", BTreeMap::new());

    // ACLs: the access ACL of a file and the default ACL of a directory.
    let acl = vfs_acl(&[
        (0x01, 6, u32::MAX),
        (0x02, 7, 1000),
        (0x04, 4, u32::MAX),
        (0x08, 4, 50),
        (0x10, 7, u32::MAX),
        (0x20, 4, u32::MAX),
    ]);
    let acl_file = v.create(ROOT, b"acl", file).unwrap().ino;
    v.setxattr(acl_file, "system.posix_acl_access", &acl, XattrMode::Either).unwrap();
    assert_eq!(v.getxattr(&v.inode(acl_file).unwrap(), "system.posix_acl_access").unwrap(), acl);
    model.entry("acl").or_default().insert("system.posix_acl_access".into(), acl.clone());
    let dir = v.mkdir(ROOT, b"dir", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap().ino;
    v.setxattr(dir, "system.posix_acl_default", &acl, XattrMode::Either).unwrap();
    model.entry("dir").or_default().insert("system.posix_acl_default".into(), acl);
    assert!(v.setxattr(acl_file, "system.posix_acl_access", b"not an acl", XattrMode::Either).is_err());
    v.sync().unwrap();
    assert_clean(&image, "ACLs");
    drop(v);

    kernel_reads(&image, &scratch.0.join("mnt"), &model);
}
#[test]
fn a_block_shared_by_three_kernel_made_files_is_copied_not_changed() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("xattr-shared");
    let image = common::corpus_image("4k", &scratch.0);
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let shared: Vec<_> = ["/shared-1", "/shared-2", "/shared-3"].iter().map(|p| v.resolve(p).unwrap()).collect();
    assert!(shared.iter().all(|i| i.file_acl == shared[0].file_acl && i.file_acl != 0), "the kernel shared one block");
    let value = v.getxattr(&shared[0], "user.shared").unwrap();
    v.setxattr(shared[1].ino, "user.own", b"mine", XattrMode::Create).unwrap();
    let changed = v.inode(shared[1].ino).unwrap();
    assert_ne!(changed.file_acl, shared[0].file_acl, "the changed file has a block of its own");
    assert_eq!(v.getxattr(&changed, "user.shared").unwrap(), value);
    assert_eq!(v.getxattr(&changed, "user.own").unwrap(), b"mine");
    for other in [&shared[0], &shared[2]] {
        let other = v.inode(other.ino).unwrap();
        assert_eq!(other.file_acl, shared[0].file_acl);
        assert!(v.getxattr(&other, "user.own").is_err(), "the others do not see it");
    }
    v.removexattr(shared[2].ino, "user.shared").unwrap();
    v.sync().unwrap();
    assert_clean(&image, "copying a shared block, dropping a reference");
}

/// `len` bytes of a pattern that differs per `seed` (so no two values are
/// the same and the kernel shares none).
fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| seed.wrapping_add((i * 7 % 251) as u8)).collect()
}

#[test]
fn values_in_inodes_of_their_own_are_counted_charged_and_freed_as_e2fsck_expects() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("xattr-ea-inode");
    let image = scratch.0.join("ea.img");
    common::mke2fs_with(&image, "4096", "64M", &["-O", "ea_inode"]);
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 1000, gid: 100 };
    let empty = v.statfs().free_inodes;
    let mut model: BTreeMap<&str, BTreeMap<OsString, Vec<u8>>> = BTreeMap::new();

    // A value past a block less 56 bytes goes to an inode of its own; the
    // file is charged its two blocks.
    let big = v.create(ROOT, b"big", file).unwrap().ino;
    let attrs = model.entry("big").or_default();
    v.setxattr(big, "user.v6000", &pattern(1, 6000), XattrMode::Create).unwrap();
    attrs.insert("user.v6000".into(), pattern(1, 6000));
    assert_eq!(v.statfs().free_inodes, empty - 2, "the file and its value's inode");
    assert_eq!(v.inode(big).unwrap().blocks, 16, "charged 2 blocks for the value");
    assert_clean(&image, "a 6000-byte value");
    v.setxattr(big, "user.max", &pattern(2, 65536), XattrMode::Create).unwrap();
    attrs.insert("user.max".into(), pattern(2, 65536));
    let errno = |e: Error| e.errno();
    assert_eq!(errno(v.setxattr(big, "user.over", &[0; 65537], XattrMode::Create).unwrap_err()), libc::E2BIG);
    v.setxattr(big, "user.small", b"hi", XattrMode::Create).unwrap();
    attrs.insert("user.small".into(), b"hi".to_vec());
    // 3000 bytes fit a block: the first goes there, the second does not
    // fit beside it and gets an inode of its own.
    v.setxattr(big, "user.a3000", &pattern(3, 3000), XattrMode::Create).unwrap();
    attrs.insert("user.a3000".into(), pattern(3, 3000));
    assert_ne!(v.inode(big).unwrap().file_acl, 0);
    assert_eq!(v.statfs().free_inodes, empty - 3);
    v.setxattr(big, "user.b3000", &pattern(4, 3000), XattrMode::Create).unwrap();
    attrs.insert("user.b3000".into(), pattern(4, 3000));
    assert_eq!(v.statfs().free_inodes, empty - 4, "the second 3000 bytes in an inode of their own");
    assert_eq!(v.xattrs(&v.inode(big).unwrap()).unwrap().len(), 5);
    assert_clean(&image, "values in the inode, the block and inodes of their own");

    // Replaced by a small value: its inode is freed; by another large one:
    // a new inode, the old one freed.
    v.setxattr(big, "user.v6000", b"now small", XattrMode::Replace).unwrap();
    attrs.insert("user.v6000".into(), b"now small".to_vec());
    assert_eq!(v.statfs().free_inodes, empty - 3);
    v.setxattr(big, "user.max", &pattern(5, 40_000), XattrMode::Replace).unwrap();
    attrs.insert("user.max".into(), pattern(5, 40_000));
    assert_eq!(v.statfs().free_inodes, empty - 3);
    assert_clean(&image, "large values replaced");
    v.removexattr(big, "user.b3000").unwrap();
    attrs.remove(std::ffi::OsStr::new("user.b3000"));
    assert_eq!(v.statfs().free_inodes, empty - 2);
    assert_clean(&image, "a value inode's entry removed");

    // A second file: its value inode goes with its last link.
    let gone = v.create(ROOT, b"gone", file).unwrap().ino;
    v.setxattr(gone, "trusted.x", &pattern(6, 10_000), XattrMode::Create).unwrap();
    assert_eq!(v.statfs().free_inodes, empty - 4);
    v.unlink(ROOT, b"gone").unwrap();
    assert_eq!(v.statfs().free_inodes, empty - 2, "the file and its value inode freed");
    v.sync().unwrap();
    assert_clean(&image, "a file with a value inode unlinked");
    for (name, want) in &model {
        let inode = v.resolve(&format!("/{name}")).unwrap();
        assert_eq!(&v.xattrs(&inode).unwrap().into_iter().collect::<BTreeMap<_, _>>(), want, "csumfs: {name}");
    }
    drop(v);

    kernel_reads(&image, &scratch.0.join("mnt"), &model);
}

#[test]
fn a_value_inode_the_kernel_shares_between_two_files_lives_until_its_last_entry_goes() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("xattr-ea-shared");
    let image = scratch.0.join("ea.img");
    common::mke2fs_with(&image, "4096", "64M", &["-O", "ea_inode"]);
    // The kernel writes the two files; with the same value it shares one
    // value inode between them (its mbcache finds it), counting 2.
    let mnt = scratch.0.join("mnt");
    if !common::kernel_mount_with(&image, &mnt, "loop") {
        return;
    }
    let value = pattern(9, 9000);
    for name in ["one", "two"] {
        let path = mnt.join(name);
        std::fs::write(&path, b"data").unwrap();
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: valid path, name and value buffer.
        let rc = unsafe { libc::setxattr(c.as_ptr(), c"user.same".as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        assert_eq!(rc, 0, "setxattr: {}", std::io::Error::last_os_error());
    }
    common::kernel_umount(&mnt);
    assert_clean(&image, "the kernel's two files");

    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let before = v.statfs().free_inodes;
    let one = v.resolve("/one").unwrap().ino;
    v.removexattr(one, "user.same").unwrap();
    assert_eq!(v.statfs().free_inodes, before, "the value inode is still named by /two");
    v.sync().unwrap();
    assert_clean(&image, "one of two entries removed");
    let two = v.inode(v.resolve("/two").unwrap().ino).unwrap();
    assert_eq!(v.getxattr(&two, "user.same").unwrap(), value);
    v.unlink(ROOT, b"two").unwrap();
    assert_eq!(v.statfs().free_inodes, before + 2, "/two and, with its last entry, the value inode");
    v.sync().unwrap();
    assert_clean(&image, "the last entry gone with its file");
}

#[test]
fn a_kernel_made_value_inode_is_kept_through_a_new_entry_and_freed_with_its_own() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("xattr-ea-corpus");
    let image = common::corpus_image("eainode-4k", &scratch.0);
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let tiny = v.resolve("/tiny").unwrap();
    let huge = v.getxattr(&tiny, "user.huge").unwrap();
    assert_eq!(huge, vec![b'h'; 6000], "the kernel's 6000-byte value");
    let free = v.statfs().free_inodes;
    v.setxattr(tiny.ino, "user.more", b"beside it", XattrMode::Create).unwrap();
    v.sync().unwrap();
    assert_clean(&image, "an entry added beside the kernel's value inode");
    assert_eq!(v.getxattr(&v.inode(tiny.ino).unwrap(), "user.huge").unwrap(), huge);
    v.removexattr(tiny.ino, "user.huge").unwrap();
    assert_eq!(v.statfs().free_inodes, free + 1, "its value inode freed");
    v.sync().unwrap();
    assert_clean(&image, "the kernel's value inode freed with its entry");
}

/// The edges of values in inodes of their own: a value of exactly a block
/// less 56 bytes still goes in the xattr block (the kernel's
/// `EXT4_XATTR_MIN_LARGE_EA_SIZE` is a strict bound), 4 more bytes do not;
/// a value just past two blocks is charged three (e2fsck checks
/// `i_blocks`); an entry naming an inode that lost its `EA_INODE` flag is
/// refused as corrupt by a removal and an unlink, nothing changed; an inode whose extra fields fill
/// its whole tail (`i_extra_isize` 128 of 256: no in-inode xattrs) takes
/// a new one in its block.
#[test]
fn value_inode_edges_match_the_kernel_and_e2fsck() {
    if !have_e2fsprogs() || common::tool("debugfs").is_none() {
        return;
    }
    let scratch = Scratch::new("xattr-ea-edges");
    let image = scratch.0.join("ea.img");
    common::mke2fs_with(&image, "4096", "64M", &["-O", "ea_inode"]);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let (exact, over) = {
        let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
        let free = v.statfs().free_inodes;
        let exact = v.create(ROOT, b"exact", file).unwrap().ino;
        v.setxattr(exact, "user.a", &pattern(1, 4096 - 56), XattrMode::Create).unwrap();
        assert_eq!(v.statfs().free_inodes, free - 1, "a block less 56 bytes: in the block");
        assert_ne!(v.inode(exact).unwrap().file_acl, 0);
        let over = v.create(ROOT, b"over", file).unwrap().ino;
        v.setxattr(over, "user.b", &pattern(2, 4096 - 55), XattrMode::Create).unwrap();
        assert_eq!(v.statfs().free_inodes, free - 3, "4 bytes more (padded): an inode of its own");
        let charged = v.create(ROOT, b"charged", file).unwrap().ino;
        v.setxattr(charged, "user.c", &pattern(3, 2 * 4096 + 1), XattrMode::Create).unwrap();
        assert_eq!(v.inode(charged).unwrap().blocks, 24, "three blocks for 8 193 bytes");
        v.create(ROOT, b"wide", file).unwrap();
        v.sync().unwrap();
        (exact, over)
    };
    assert_clean(&image, "values at the edges");
    let value_inode = {
        let v = Volume::open(&image, Options::default()).unwrap();
        (over + 1..over + 8).find(|&i| v.inode(i).is_ok_and(|n| n.flags & 0x20_0000 != 0)).unwrap()
    };
    let damaged = scratch.0.join("damaged.img");
    std::fs::copy(&image, &damaged).unwrap();
    common::debugfs_write(&damaged, &format!("sif <{value_inode}> flags 0x80000"));
    let before = std::fs::read(&damaged).unwrap();
    let mut v = Volume::open(&damaged, Options { write: true, ..Options::default() }).unwrap();
    v.enable_undo(&scratch.0.join("damaged.undo")).unwrap();
    match v.removexattr(over, "user.b") {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("not an ea_inode"), "{detail}"),
        other => panic!("removing an entry naming an inode without EA_INODE: {:?}", other.map(|i| i.ino)),
    }
    // Unlinking drops the value's count without reading it: refused there.
    // (In an operation, as a mount runs each: the unlink took the entry
    // out before it met the value inode, and is undone.)
    v.begin();
    let unlinked = v.unlink(ROOT, b"over");
    v.end(unlinked.is_ok()).unwrap();
    match unlinked {
        Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("EA_INODE"), "{detail}"),
        other => panic!("unlinking a file whose entry names an inode without EA_INODE: {other:?}"),
    }
    v.checkpoint().unwrap();
    drop(v);
    assert!(std::fs::read(&damaged).unwrap() == before, "the refusal changed nothing");

    common::debugfs_write(&image, "sif /wide extra_isize 128");
    assert_clean(&image, "an inode with no room for xattrs");
    let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    let wide = v.resolve("/wide").unwrap().ino;
    v.setxattr(wide, "user.d", b"in the block", XattrMode::Create).unwrap();
    assert_eq!(v.getxattr(&v.inode(wide).unwrap(), "user.d").unwrap(), b"in the block");
    assert_eq!(v.getxattr(&v.inode(exact).unwrap(), "user.a").unwrap(), pattern(1, 4096 - 56));
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "a new xattr of an inode with no room for xattrs");
}

/// An entry naming a value inode outside the inode table — 0's
/// neighbour 1 (reserved), the owner itself, one past the last — is
/// refused as corrupt (`EUCLEAN`, as the kernel's `__ext4_iget` refuses
/// such a number), never looked up as an inode that is merely absent.
#[test]
fn value_inode_numbers_outside_the_table_are_refused_as_corrupt() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("xattr-ea-range");
    let image = scratch.0.join("ea.img");
    common::mke2fs_with(&image, "4096", "16M", &["-O", "ea_inode"]);
    let (owner, value_inode, inodes) = {
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let owner = v.create(ROOT, b"big", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
        v.setxattr(owner, "user.b", &pattern(4, 5000), XattrMode::Create).unwrap();
        v.sync().unwrap();
        let value_inode = (owner + 1..owner + 8).find(|&i| v.inode(i).is_ok_and(|n| n.flags & 0x20_0000 != 0));
        (owner, value_inode.unwrap(), v.layout().inodes_count as u32)
    };
    let clean = std::fs::read(&image).unwrap();
    // The entry: name length 1, index 1 (user.), value offset 0, the
    // value inode, the value's size.
    let mut entry = vec![1u8, 1, 0, 0];
    entry.extend_from_slice(&value_inode.to_le_bytes());
    entry.extend_from_slice(&5000u32.to_le_bytes());
    let at = clean.windows(entry.len()).position(|w| w == entry).expect("the entry in the image") + 4;
    assert!(clean[at + 1..].windows(entry.len()).all(|w| w != entry), "one entry");
    let read = |inum: u32| {
        let mut bytes = clean.clone();
        bytes[at..at + 4].copy_from_slice(&inum.to_le_bytes());
        let v = Volume::from_bytes(bytes, Options { verify_checksums: false, ..Options::default() }).unwrap();
        v.xattrs(&v.inode(owner).unwrap())
    };
    assert_eq!(read(value_inode).unwrap()[0].1, pattern(4, 5000), "the image as written");
    for inum in [1, owner, inodes + 1, u32::MAX] {
        match read(inum) {
            Err(e @ Error::Corrupt { .. }) => {
                assert_eq!(e.errno(), libc::EUCLEAN);
                assert!(e.to_string().contains(&format!("value inode {inum}")), "{e}");
            }
            other => panic!("value inode {inum}: {other:?}"),
        }
    }
}

/// In-inode xattrs begin after `i_extra_isize`, however long it is: with
/// 64 (debugfs), the kernel writes its in-inode entries at byte 192, and
/// csumfs reads exactly what the kernel reads back.
#[test]
fn in_inode_xattrs_after_a_longer_i_extra_isize_read_as_the_kernels() {
    if !have_e2fsprogs() || common::tool("debugfs").is_none() {
        return;
    }
    let scratch = Scratch::new("xattr-extra-64");
    let image = scratch.0.join("x.img");
    mke2fs(&image, "4096", "16M");
    common::debugfs_write(&image, "write /dev/null t");
    common::debugfs_write(&image, "sif /t extra_isize 64");
    let mnt = scratch.0.join("mnt");
    let set = std::sync::atomic::AtomicBool::new(false);
    common::with_kernel_mount_with(&image, &mnt, "loop", || {
        let (path, name) = (CString::new(mnt.join("t").as_os_str().as_bytes()).unwrap(), c"user.in");
        assert_eq!(
            // SAFETY: NUL-terminated path and name; a value and its length.
            unsafe { libc::setxattr(path.as_ptr(), name.as_ptr(), b"twenty bytes, inline".as_ptr().cast(), 20, 0) },
            0
        );
        set.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    if !set.into_inner() {
        return;
    }
    let kernel = std::sync::Mutex::new(BTreeMap::new());
    with_kernel_mount(&image, &mnt, || *kernel.lock().unwrap() = kernel_xattrs(&mnt.join("t")));
    let kernel = kernel.into_inner().unwrap();
    assert_eq!(kernel.get(std::ffi::OsStr::new("user.in")).map(Vec::as_slice), Some(&b"twenty bytes, inline"[..]));
    let v = Volume::open(&image, Options::default()).unwrap();
    let t = v.resolve("/t").unwrap();
    assert_eq!(t.file_acl, 0, "the kernel kept it in the inode");
    assert_eq!(v.xattrs(&t).unwrap().into_iter().collect::<BTreeMap<_, _>>(), kernel);
}

/// xattr names are bytes after their prefix, as the kernel stores them:
/// names the kernel wrote that are not UTF-8 (in the inode and in the
/// block) are listed and read by csumfs byte for byte — never as a lossy
/// string, which would list a name no one can read (and merge two names
/// that differ in such a byte) — and csumfs's own changes to them read
/// back in the kernel.
#[test]
fn xattr_names_that_are_not_utf8_read_and_change_as_the_kernel_keeps_them() {
    use std::ffi::{OsStr, OsString};
    use std::os::unix::ffi::OsStrExt;
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("xattr-bytes");
    let image = scratch.0.join("x.img");
    mke2fs(&image, "4096", "16M");
    let mnt = scratch.0.join("mnt");
    let names: [&[u8]; 4] = [b"user.\xff\xfe", b"user.\xff\xff", b"trusted.\x80 in the block", b"user.\xc3\xa9"];
    let set = std::sync::atomic::AtomicBool::new(false);
    common::with_kernel_mount_with(&image, &mnt, "loop", || {
        std::fs::write(mnt.join("t"), b"").unwrap();
        let path = CString::new(mnt.join("t").as_os_str().as_bytes()).unwrap();
        for (i, name) in names.iter().enumerate() {
            // The third value is too large for the inode: it goes to the block.
            let value = pattern(i as u8, if i == 2 { 2000 } else { 10 });
            let cname = CString::new(*name).unwrap();
            // SAFETY: NUL-terminated path and name; a value and its length.
            let done = unsafe { libc::setxattr(path.as_ptr(), cname.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
            assert_eq!(done, 0, "{}: {}", name.escape_ascii(), std::io::Error::last_os_error());
        }
        set.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    if !set.into_inner() {
        return;
    }
    let read_by_kernel = |image: &Path| {
        let kernel = std::sync::Mutex::new(BTreeMap::new());
        with_kernel_mount(image, &mnt, || *kernel.lock().unwrap() = kernel_xattrs(&mnt.join("t")));
        kernel.into_inner().unwrap()
    };
    let kernel = read_by_kernel(&image);
    assert_eq!(kernel.len(), 4, "{kernel:?}");
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let t = v.resolve("/t").unwrap();
    assert_ne!(t.file_acl, 0, "one value is in the xattr block");
    let ours: BTreeMap<OsString, Vec<u8>> = v.xattrs(&t).unwrap().into_iter().collect();
    assert_eq!(ours, kernel);
    let mut listed = v.xattr_names(&t).unwrap();
    listed.sort();
    assert_eq!(listed, kernel.keys().cloned().collect::<Vec<_>>());
    for (i, name) in names.iter().enumerate() {
        let want = pattern(i as u8, if i == 2 { 2000 } else { 10 });
        assert_eq!(v.getxattr(&t, OsStr::from_bytes(name)).unwrap(), want, "{}", name.escape_ascii());
    }
    let absent = v.getxattr(&t, OsStr::from_bytes(b"user.\xff\xfd")).unwrap_err();
    assert_eq!(absent.errno(), libc::ENODATA);

    // csumfs changes one, removes another and adds a third; the kernel reads it.
    v.setxattr(t.ino, OsStr::from_bytes(names[1]), b"replaced", XattrMode::Replace).unwrap();
    v.removexattr(t.ino, OsStr::from_bytes(names[0])).unwrap();
    let added = OsStr::from_bytes(b"security.\xfe\x01");
    v.setxattr(t.ino, added, b"added", XattrMode::Create).unwrap();
    let err = v.setxattr(t.ino, OsStr::from_bytes(b"other.\xff"), b"x", XattrMode::Either).unwrap_err();
    assert_eq!(err.errno(), libc::EOPNOTSUPP, "no ext4 prefix: {err}");
    v.sync().unwrap();
    let ours: BTreeMap<OsString, Vec<u8>> = v.xattrs(&v.inode(t.ino).unwrap()).unwrap().into_iter().collect();
    drop(v);
    assert_clean(&image, "xattr names that are not UTF-8 changed");
    let kernel = read_by_kernel(&image);
    assert_eq!(ours, kernel);
    assert_eq!(kernel.get(OsStr::from_bytes(names[1])).map(Vec::as_slice), Some(&b"replaced"[..]));
    assert!(!kernel.contains_key(OsStr::from_bytes(names[0])) && kernel.contains_key(added), "{kernel:?}");
}

/// The xattrs of the placement test: file, then (name, value length).
fn placements(bs: usize) -> Vec<(&'static str, Vec<(&'static str, usize)>)> {
    vec![
        // 256-byte inodes (extra_isize 32): 96 bytes after the fixed part,
        // 8 of them the magic and the table's end; an entry with a 1-byte
        // name takes 20 bytes.
        ("one68", vec![("user.a", 68)]),
        ("one69", vec![("user.a", 69)]),
        ("two24", vec![("user.a", 24), ("user.b", 24)]),
        ("two25", vec![("user.a", 24), ("user.b", 25)]),
        // A block: 32-byte header, the table's 4-byte end.
        ("block_fits", vec![("user.a", bs - 56)]),
        ("block_over", vec![("user.a", bs - 55)]),
        ("block_any", vec![("user.a", bs)]),
        ("over_64k", vec![("user.a", 65537)]),
        (
            "hashed",
            (0..6)
                .map(|i| (["user.p", "user.qq", "trusted.r", "user.sss", "security.t", "user.u"][i], 90 + 7 * i))
                .collect(),
        ),
    ]
}

/// `File ACL:` (the xattr block) of `path` in `image`, as debugfs reads it.
fn xattr_block(image: &Path, path: &str) -> u64 {
    let out = Command::new(common::tool("debugfs").unwrap())
        .args(["-R", &format!("stat /{path}")])
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let field = text.split("File ACL: ").nth(1).unwrap_or_else(|| panic!("debugfs stat /{path}: {text}"));
    field.split_whitespace().next().unwrap().parse().unwrap()
}

/// Where each value goes — the inode or the block — and whether it fits
/// at all, and the block's hash of its entries (`h_hash`, which the
/// kernel's mbcache shares identical blocks by), as the kernel's ext4 does
/// on a twin image: 1 and 4 KiB blocks, each step's errno equal.
#[test]
fn placement_and_block_hash_match_the_kernel() {
    if !have_e2fsprogs() || common::tool("debugfs").is_none() {
        return;
    }
    let scratch = Scratch::new("xattr-placement");
    for bs in [1024usize, 4096] {
        let (ours, theirs) = (scratch.0.join(format!("ours-{bs}.img")), scratch.0.join(format!("theirs-{bs}.img")));
        mke2fs(&ours, &bs.to_string(), "16M");
        std::fs::copy(&ours, &theirs).unwrap();
        let mut our_errnos = Vec::new();
        {
            let mut v =
                Volume::open(&ours, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
            for (file, attrs) in placements(bs) {
                let ino = v.create(ROOT, file.as_bytes(), NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
                for (name, len) in attrs {
                    let done = v.setxattr(ino, name, &pattern(len as u8, len), XattrMode::Create);
                    our_errnos.push(done.map_or_else(|e| e.errno(), |_| 0));
                }
            }
            v.sync().unwrap();
        }
        assert_clean(&ours, &format!("xattrs at the edges, {bs}-byte blocks"));
        let mnt = scratch.0.join("mnt");
        if !common::kernel_mount_with(&theirs, &mnt, "loop") {
            return;
        }
        let mut kernel_errnos = Vec::new();
        for (file, attrs) in placements(bs) {
            let path = mnt.join(file);
            std::fs::write(&path, b"").unwrap();
            let c = CString::new(path.as_os_str().as_bytes()).unwrap();
            for (name, len) in attrs {
                let (name, value) = (CString::new(name).unwrap(), pattern(len as u8, len));
                // SAFETY: valid path, name and value of the given length.
                let rc = unsafe {
                    libc::setxattr(c.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), libc::XATTR_CREATE)
                };
                kernel_errnos.push(if rc == 0 { 0 } else { std::io::Error::last_os_error().raw_os_error().unwrap() });
            }
        }
        let read_back =
            |mnt: &Path| placements(bs).iter().map(|(f, _)| kernel_xattrs(&mnt.join(f))).collect::<Vec<_>>();
        let theirs_read = read_back(&mnt);
        common::kernel_umount(&mnt);
        assert_eq!(our_errnos, kernel_errnos, "{bs}: each setxattr's errno (csumfs, kernel)");
        assert!(kernel_errnos.contains(&libc::ENOSPC) && kernel_errnos.contains(&libc::E2BIG), "{kernel_errnos:?}");
        for (file, _) in placements(bs) {
            let (a, b) = (xattr_block(&ours, file), xattr_block(&theirs, file));
            assert_eq!(a != 0, b != 0, "{bs}: {file} has an xattr block (csumfs {a}, kernel {b})");
            if a != 0 {
                let hash = |image: &Path, block: u64| {
                    let bytes = std::fs::read(image).unwrap();
                    le32(&bytes, block as usize * bs + 0x0C)
                };
                assert_eq!(hash(&ours, a), hash(&theirs, b), "{bs}: {file}'s block hash (h_hash)");
            }
        }
        let mut ours_read = Vec::new();
        with_kernel_mount(&ours, &mnt, std::panic::AssertUnwindSafe(|| ours_read = read_back(&mnt)));
        assert!(ours_read == theirs_read, "{bs}: the kernel reads csumfs's xattrs as its own");
    }
}

fn le32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// ext4 keeps an entry's name length in a byte: a 255-byte name (past the
/// prefix) is stored and read back, e2fsck clean; 256 is refused.
#[test]
fn names_of_255_bytes_are_kept_and_longer_ones_refused() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("xattr-name-length");
    let image = scratch.0.join("n.img");
    mke2fs(&image, "4096", "16M");
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let ino = v.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    let longest = format!("user.{}", "n".repeat(255));
    v.setxattr(ino, &longest, b"kept", XattrMode::Create).unwrap();
    let over = format!("user.{}", "n".repeat(256));
    assert_eq!(v.setxattr(ino, &over, b"no", XattrMode::Create).unwrap_err().errno(), libc::ENAMETOOLONG);
    assert_eq!(v.getxattr(&v.inode(ino).unwrap(), &longest).unwrap(), b"kept");
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "a 255-byte xattr name");
}

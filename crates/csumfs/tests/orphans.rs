//! Orphans the kernel left: an image frozen (`fsfreeze`, which flushes the
//! journal) and copied while a file unlinked but still open sat in the
//! `orphan_file` feature's orphan file — what a power cut leaves. csumfs's
//! writable open finishes them as the kernel's mount does
//! (`release_orphans_left`); `e2fsck -fn`, which flags the image before,
//! is clean after, and the kernel reads every other file back.

mod common;

use common::{
    assert_clean, debugfs_write, e2fsck_clean, have_e2fsprogs, kernel_mount_with, tool, with_kernel_mount, Scratch,
};
use csumfs::{Options, Volume};
use std::path::Path;
use std::process::Command;

fn run(program: &str, args: &[&str], dir: &Path) -> std::process::Output {
    Command::new(program).args(args).current_dir(dir).output().unwrap()
}

#[test]
fn orphans_in_the_kernels_orphan_file_are_freed_and_the_flag_cleared() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("orphan-file");
    let dir = &scratch.0;
    let image = dir.join("live.img");
    let out = Command::new(tool("mke2fs").unwrap())
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,orphan_file", "-b", "4096"])
        .arg(&image)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    let mnt = dir.join("mnt");
    if !kernel_mount_with(&image, &mnt, "loop") {
        return;
    }
    let kept: Vec<u8> = (0..10_000u32).map(|i| (i * 31 % 251) as u8).collect();
    std::fs::write(mnt.join("kept"), &kept).unwrap();
    std::fs::write(mnt.join("held"), vec![7u8; 300_000]).unwrap();
    let held = std::fs::File::open(mnt.join("held")).unwrap();
    std::fs::remove_file(mnt.join("held")).unwrap();
    // More than a 4 KiB block's first eighth of entries: the kernel puts
    // them at slots far into the orphan file's blocks.
    let many: Vec<std::fs::File> = (0..300)
        .map(|i| {
            let path = mnt.join(format!("many-{i}"));
            let file = std::fs::File::create(&path).unwrap();
            std::fs::remove_file(&path).unwrap();
            file
        })
        .collect();
    let frozen = run("fsfreeze", &["-f", mnt.to_str().unwrap()], dir);
    assert!(frozen.status.success(), "fsfreeze: {}", String::from_utf8_lossy(&frozen.stderr));
    let snapshot = dir.join("snapshot.img");
    std::fs::copy(&image, &snapshot).unwrap();
    assert!(run("fsfreeze", &["-u", mnt.to_str().unwrap()], dir).status.success());
    drop(held);
    drop(many);
    common::kernel_umount(&mnt);

    let report = e2fsck_clean(&snapshot).expect_err("orphans in the orphan file are a finding until cleaned");
    assert!(report.contains("Orphan file"), "{report}");
    let mut v = Volume::open(&snapshot, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let (free_inodes, free_blocks) = (v.statfs().free_inodes, v.statfs().free_blocks);
    assert_eq!(v.release_orphans_left().unwrap(), 301);
    assert_eq!(v.statfs().free_inodes, free_inodes + 301);
    assert!(v.statfs().free_blocks >= free_blocks + 300_000 / 4096, "its 74 blocks freed");
    assert_eq!(v.release_orphans_left().unwrap(), 0, "the flag is cleared: nothing twice");
    v.sync().unwrap();
    drop(v);
    assert_clean(&snapshot, "the kernel's orphan freed by csumfs");
    let check = dir.join("check");
    with_kernel_mount(&snapshot, &check, || {
        assert_eq!(std::fs::read(check.join("kept")).unwrap(), kept);
        assert!(!check.join("held").exists());
    });
}

/// A file on the orphan chain that still has links was being truncated
/// when the system stopped: its blocks past its size go (as the kernel's
/// `ext4_orphan_cleanup` truncates it), its data stays.
#[test]
fn a_linked_orphan_loses_its_blocks_past_its_size() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("orphan-truncate");
    let image = scratch.0.join("t.img");
    common::mke2fs(&image, "4096", "32M");
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 253) as u8).collect();
    let ino = {
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let f = v.create(csumfs::ROOT, b"cut", csumfs::NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
        v.write(f, 0, &vec![1u8; 200_000]).unwrap();
        v.write(f, 0, &data).unwrap();
        v.sync().unwrap();
        f
    };
    // As a stopped truncate leaves it: the size already cut to 20 000
    // bytes, the 49 blocks past it still mapped, the inode on the chain
    // (debugfs sets the fields and re-seals the checksums).
    debugfs_write(&image, &format!("sif <{ino}> size 20000"));
    debugfs_write(&image, &format!("ssv last_orphan {ino}"));
    assert!(e2fsck_clean(&image).is_err(), "blocks past the size of an orphan are a finding");
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let free = v.statfs().free_blocks;
    assert_eq!(v.release_orphans_left().unwrap(), 0, "cut, not freed");
    assert_eq!(v.statfs().free_blocks, free + 49 - 5, "file blocks 5..=48 freed");
    let inode = v.inode(ino).unwrap();
    assert_eq!(v.read_all(&inode).unwrap(), data);
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "the truncate finished");
}

const FILE: csumfs::NewInode = csumfs::NewInode { mode: 0o100_644, uid: 0, gid: 0 };

/// Three files unlinked while held are chained c → b → a; b's last unhold
/// takes it out of the middle (c then names a). After a crash with a and
/// c still held, the next open frees exactly those two, and e2fsck is clean.
#[test]
fn an_orphan_unheld_from_the_middle_of_the_list_leaves_the_rest_listed() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("orphan-middle");
    let image = scratch.0.join("m.img");
    common::mke2fs(&image, "1024", "8M");
    let open = || Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let mut v = open();
    let (inodes, blocks) = (v.statfs().free_inodes, v.statfs().free_blocks);
    for name in ["a", "b", "c"] {
        let f = v.create(csumfs::ROOT, name.as_bytes(), FILE).unwrap().ino;
        v.write(f, 0, &[9u8; 20_000]).unwrap();
        v.hold(f);
        v.unlink(csumfs::ROOT, name.as_bytes()).unwrap();
    }
    let b = 13; // a, b, c: the first three inodes after lost+found
    v.unhold(b).unwrap();
    assert_eq!(v.statfs().free_inodes, inodes - 2, "b freed at its last unhold");
    v.sync().unwrap();
    drop(v); // a crash: a and c never unheld
    let mut v = open();
    assert_eq!(v.release_orphans_left().unwrap(), 2, "a and c, each once");
    assert_eq!((v.statfs().free_inodes, v.statfs().free_blocks), (inodes, blocks));
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "the orphans left freed");
}

/// A file held twice outlives its first unhold; at unmount
/// (`release_orphans`: the handles are gone) every held file whose names
/// are gone is freed, one still named is left alone, and the next open
/// finds no orphan left.
#[test]
fn held_files_outlive_all_but_their_last_unhold_and_unmount_frees_the_unnamed() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("orphan-held");
    let image = scratch.0.join("h.img");
    common::mke2fs(&image, "1024", "8M");
    let open = || Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let mut v = open();
    let (inodes, blocks) = (v.statfs().free_inodes, v.statfs().free_blocks);
    let twice = v.create(csumfs::ROOT, b"twice", FILE).unwrap().ino;
    v.write(twice, 0, &[7u8; 20_000]).unwrap();
    v.hold(twice);
    v.hold(twice);
    v.unlink(csumfs::ROOT, b"twice").unwrap();
    let held = (v.statfs().free_inodes, v.statfs().free_blocks);
    v.unhold(twice).unwrap();
    assert_eq!((v.statfs().free_inodes, v.statfs().free_blocks), held, "still held once: not freed");
    let named = v.create(csumfs::ROOT, b"named", FILE).unwrap().ino;
    v.write(named, 0, b"stays").unwrap();
    v.hold(named);
    let gone = v.create(csumfs::ROOT, b"gone", FILE).unwrap().ino;
    v.write(gone, 0, &[8u8; 5000]).unwrap();
    v.hold(gone);
    v.unlink(csumfs::ROOT, b"gone").unwrap();
    let named_blocks = v.inode(named).unwrap().blocks / 2;
    v.release_orphans().unwrap();
    assert_eq!(
        (v.statfs().free_inodes, v.statfs().free_blocks),
        (inodes - 1, blocks - named_blocks),
        "both unnamed files freed, the named one kept"
    );
    assert_eq!(v.read_all(&v.inode(named).unwrap()).unwrap(), b"stays");
    v.unlink(csumfs::ROOT, b"named").unwrap();
    assert_eq!(
        (v.statfs().free_inodes, v.statfs().free_blocks),
        (inodes, blocks),
        "no hold left after release_orphans: freed at its unlink"
    );
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "unmount's release");
    assert_eq!(open().release_orphans_left().unwrap(), 0, "nothing left on the orphan list");
}

/// The orphan list may name any inode from the first non-reserved one to
/// the last: files at both ends (lost+found removed, so a file gets the
/// first) unlinked while held are freed after a crash. A list naming a
/// reserved inode or one past the last is refused as corrupt, and nothing
/// is changed.
#[test]
fn the_orphan_list_names_the_first_to_the_last_inode_and_nothing_else() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("orphan-ends");
    let image = scratch.0.join("e.img");
    common::mke2fs_with(&image, "1024", "8M", &["-N", "16"]);
    let open = || Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let mut v = open();
    let last = v.layout().inodes_count as u32;
    assert_eq!(last, 16, "one group of 16 inodes");
    v.rmdir(csumfs::ROOT, b"lost+found").unwrap();
    let files: Vec<u32> =
        (11..=last).map(|i| v.create(csumfs::ROOT, format!("f{i}").as_bytes(), FILE).unwrap().ino).collect();
    assert_eq!((files[0], files[files.len() - 1]), (11, last));
    for ino in [11, last] {
        v.hold(ino);
        v.unlink(csumfs::ROOT, format!("f{ino}").as_bytes()).unwrap();
    }
    v.sync().unwrap();
    drop(v);
    let mut v = open();
    assert_eq!(v.release_orphans_left().unwrap(), 2);
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "the first and last inodes freed");
    for named in [10, last + 1] {
        debugfs_write(&image, &format!("ssv last_orphan {named}"));
        let before = std::fs::read(&image).unwrap();
        let mut v = open();
        let err = v.release_orphans_left().unwrap_err();
        assert!(err.to_string().contains(&format!("names inode {named}")), "{err}");
        drop(v);
        assert!(std::fs::read(&image).unwrap() == before, "a refused list changes nothing");
    }
}

/// A block-mapped file (ext3's, on an image upgraded with `tune2fs -O
/// extent`) on the orphan list with its links was being truncated. csumfs
/// cuts only extent-mapped files (making a block map extent-mapped reads it
/// only up to the file's size, so the blocks past it would leak): the file
/// is left as it is — its data reads back, nothing is freed, the list is
/// emptied — and e2fsck still names its blocks past the size (the kernel's
/// mount would cut them).
#[test]
fn a_block_mapped_linked_orphan_is_left_as_it_is() {
    if !have_e2fsprogs() || tool("tune2fs").is_none() {
        return;
    }
    let scratch = Scratch::new("orphan-blockmap");
    let src = scratch.0.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("cut"), &data).unwrap();
    let image = scratch.0.join("b.img");
    let out = Command::new(tool("mke2fs").unwrap())
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal,^extent,^64bit", "-b", "4096", "-d"])
        .arg(&src)
        .arg(&image)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(tool("tune2fs").unwrap()).args(["-O", "extent"]).arg(&image).output().unwrap();
    assert!(out.status.success(), "tune2fs: {}", String::from_utf8_lossy(&out.stderr));
    let ino = Volume::open(&image, Options::default()).unwrap().resolve("/cut").unwrap().ino;
    debugfs_write(&image, &format!("sif <{ino}> size 20000"));
    debugfs_write(&image, &format!("ssv last_orphan {ino}"));
    assert!(e2fsck_clean(&image).is_err(), "blocks past the size of an orphan are a finding");
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let free = v.statfs().free_blocks;
    assert_eq!(v.release_orphans_left().unwrap(), 0, "not freed");
    assert_eq!(v.statfs().free_blocks, free, "nothing cut");
    let inode = v.inode(ino).unwrap();
    assert_eq!(inode.flags & 0x8_0000, 0, "still block-mapped");
    assert_eq!(v.read_all(&inode).unwrap(), data[..20_000]);
    v.sync().unwrap();
    drop(v);
    let report = e2fsck_clean(&image).expect_err("the blocks past the size are still there");
    assert!(report.contains("i_size is 20000, should be 200704"), "{report}");
    assert!(!report.contains("orphaned inode list"), "the list is emptied: {report}");
}

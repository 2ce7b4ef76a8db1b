//! Orphans the kernel left: an image frozen (`fsfreeze`, which flushes the
//! journal) and copied while a file unlinked but still open sat in the
//! `orphan_file` feature's orphan file — what a power cut leaves. csumfs's
//! writable open finishes them as the kernel's mount does
//! (`release_orphans_left`); `e2fsck -fn`, which flags the image before,
//! is clean after, and the kernel reads every other file back.

mod common;

use common::{assert_clean, e2fsck_clean, have_e2fsprogs, kernel_mount_with, tool, with_kernel_mount, Scratch};
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
    let frozen = run("fsfreeze", &["-f", mnt.to_str().unwrap()], dir);
    assert!(frozen.status.success(), "fsfreeze: {}", String::from_utf8_lossy(&frozen.stderr));
    let snapshot = dir.join("snapshot.img");
    std::fs::copy(&image, &snapshot).unwrap();
    assert!(run("fsfreeze", &["-u", mnt.to_str().unwrap()], dir).status.success());
    drop(held);
    assert!(Command::new("umount").arg(&mnt).status().unwrap().success());

    let report = e2fsck_clean(&snapshot).expect_err("an orphan in the orphan file is a finding until cleaned");
    assert!(report.contains("Orphan file"), "{report}");
    let mut v = Volume::open(&snapshot, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let (free_inodes, free_blocks) = (v.statfs().free_inodes, v.statfs().free_blocks);
    assert_eq!(v.release_orphans_left().unwrap(), 1);
    assert_eq!(v.statfs().free_inodes, free_inodes + 1);
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
    let debugfs = tool("debugfs").unwrap();
    for request in [format!("sif <{ino}> size 20000"), format!("ssv last_orphan {ino}")] {
        let out = Command::new(&debugfs).args(["-w", "-R", &request]).arg(&image).output().unwrap();
        assert!(out.status.success(), "debugfs {request}: {}", String::from_utf8_lossy(&out.stderr));
    }
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

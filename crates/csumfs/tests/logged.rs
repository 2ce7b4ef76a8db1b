//! A volume with its metadata in a ByteLog, on real files: a 40 GiB sparse
//! image (the bench's 64 KiB-block geometry) opens — its private map
//! reserves no swap — and what is written, synced and checkpointed is what
//! e2fsck and a second open see.

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs_with, Scratch};
use csumfs::{NewInode, Options, Volume, ROOT};

#[test]
fn a_large_sparse_image_is_logged_synced_and_checkpointed() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged");
    let image = scratch.0.join("img");
    let log = scratch.0.join("img.bytelog");
    mke2fs_with(&image, "65536", "40G", &["-g", "65528"]);
    let (mut volume, replayed) = Volume::open_logged(&image, &log, 1 << 20, Options::default(), None).unwrap();
    assert_eq!(replayed.commits, 0);
    let file = volume.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap();
    volume.write(file.ino, 0, &[7u8; 300_000]).unwrap();
    volume.sync().unwrap();
    let head = |image: &std::path::Path| {
        let mut head = vec![0u8; 4096];
        std::io::Read::read_exact(&mut std::fs::File::open(image).unwrap(), &mut head).unwrap();
        head
    };
    assert!(csumfs::log_pending(&head(&image)), "synced, not checkpointed: the image says so");
    volume.checkpoint().unwrap();
    drop(volume);
    assert!(!csumfs::log_pending(&head(&image)));
    assert_clean(&image, "after the checkpoint");
    let volume = Volume::open(&image, Options::default()).unwrap();
    assert_eq!(volume.read_all(&volume.resolve("/f").unwrap()).unwrap(), vec![7u8; 300_000]);
}

/// A commit with more new data checksums than a few log records hold (a
/// large sequential write) writes the checksum tree to the sidecar instead
/// of logging them; a small one logs them. Either way they survive a death
/// before the checkpoint: the data reads back verified, and a flipped byte
/// in either file is `EIO`.
#[test]
fn a_large_writes_checksums_go_to_the_sidecar_and_a_small_ones_to_the_log() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-sums");
    let (image, log, sums) = (scratch.0.join("img"), scratch.0.join("img.bytelog"), scratch.0.join("img.csums"));
    mke2fs_with(&image, "4096", "64M", &[]);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let big: Vec<u8> = (0..20usize << 20).map(|i| (i * 7 % 251) as u8).collect();
    let small = vec![9u8; 8192];
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), Some(&sums)).unwrap();
    let f = volume.create(ROOT, b"big", file).unwrap().ino;
    volume.write(f, 0, &big).unwrap();
    let stats = |v: &Volume| {
        use std::sync::atomic::Ordering::Relaxed;
        (v.stats().datasum_commits.load(Relaxed), v.stats().log_datasums.load(Relaxed))
    };
    let before = stats(&volume);
    volume.sync().unwrap();
    let after_big = stats(&volume);
    assert_eq!(after_big.0, before.0 + 1, "5 120 new checksums: the tree committed to the sidecar");
    assert_eq!(after_big.1, before.1, "and none of them logged");
    let g = volume.create(ROOT, b"small", file).unwrap().ino;
    volume.write(g, 0, &small).unwrap();
    volume.sync().unwrap();
    let after_small = stats(&volume);
    assert_eq!(after_small, (after_big.0, after_big.1 + 2), "2 new checksums: logged, the tree not committed");
    let blocks: Vec<u64> =
        [f, g].iter().map(|&i| volume.runs(&volume.inode(i).unwrap()).unwrap()[0].physical).collect();
    drop(volume); // dies before any checkpoint

    let (mut volume, replayed) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), Some(&sums)).unwrap();
    assert!(replayed.commits >= 2);
    assert_eq!(volume.read_all(&volume.inode(f).unwrap()).unwrap(), big, "verified, not EIO");
    assert_eq!(volume.read_all(&volume.inode(g).unwrap()).unwrap(), small);
    volume.checkpoint().unwrap();
    drop(volume);
    let mut bytes = std::fs::read(&image).unwrap();
    for &b in &blocks {
        bytes[(b * 4096 + 1000) as usize] ^= 0x10;
    }
    std::fs::write(&image, &bytes).unwrap();
    let (volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), Some(&sums)).unwrap();
    for (ino, name) in [(f, "the sidecar's"), (g, "the log's")] {
        match volume.read_all(&volume.inode(ino).unwrap()) {
            Err(err) => assert_eq!(err.errno(), libc::EIO, "{name} checksum catches the flip: {err}"),
            Ok(_) => panic!("{name} checksum missed the flipped byte: the data read back"),
        }
    }
}

/// Operations change only the private copy: nothing is committed before
/// `sync` (or 1 MiB pending, or 5 s), nothing checkpointed before the log
/// is half full, 64 Ki pages differ or 30 s pass; a write of less than a
/// page goes to the log, not the image file, until the checkpoint.
#[test]
fn operations_commit_at_sync_and_small_writes_wait_in_the_log() {
    if !have_e2fsprogs() {
        return;
    }
    use std::sync::atomic::Ordering::Relaxed;
    let scratch = Scratch::new("logged-cadence");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "4096", "64M", &[]);
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    let counts = |v: &Volume| (v.stats().log_commits.load(Relaxed), v.stats().log_checkpoints.load(Relaxed));
    let before = counts(&volume);
    let mut files = Vec::new();
    for i in 0..40u8 {
        // Each an operation as a mount runs it: its end may commit or checkpoint.
        let name = format!("f{i}");
        volume.begin();
        let ino = volume.create(ROOT, name.as_bytes(), NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
        volume.end(true).unwrap();
        volume.begin();
        volume.write(ino, 0, &[0x11; 4096]).unwrap();
        volume.end(true).unwrap();
        files.push(ino);
    }
    assert_eq!(counts(&volume), before, "40 creates and writes, no sync: nothing committed or checkpointed");
    volume.sync().unwrap();
    assert_eq!(counts(&volume), (before.0 + 1, before.1), "one sync: one commit, no checkpoint");
    for (i, &ino) in files.iter().enumerate() {
        volume.begin();
        volume.write(ino, 0, &[i as u8 | 0x80; 100]).unwrap();
        volume.end(true).unwrap();
    }
    volume.sync().unwrap();
    assert_eq!(counts(&volume), (before.0 + 2, before.1), "40 small writes and a sync: one commit");
    let block_of = |v: &Volume, ino| v.runs(&v.inode(ino).unwrap()).unwrap()[0].physical as usize * 4096;
    let on_disk = std::fs::read(&image).unwrap();
    for (i, &ino) in files.iter().enumerate() {
        let at = block_of(&volume, ino);
        assert_eq!(on_disk[at..at + 100], [0x11; 100], "file {i}: its 100 bytes went to the log, not the image");
    }
    volume.checkpoint().unwrap();
    let on_disk = std::fs::read(&image).unwrap();
    for (i, &ino) in files.iter().enumerate() {
        let at = block_of(&volume, ino);
        assert_eq!(on_disk[at..at + 100], [i as u8 | 0x80; 100], "file {i} after the checkpoint");
    }
}

//! The ByteLog inside the image (`-o bytelog`): commits are ByteLog
//! records in the journal's fast-commit area, after an anchor block the
//! kernel's fast-commit layout frames; while they hold what the image
//! lacks, the image's incompat bits keep the kernel and e2fsck away.
//! A volume stopped then (a killed daemon) is replayed by csumfs's next
//! open — or its checkpoint — from the image alone, no file beside it;
//! after that the kernel mounts it and `e2fsck -fn` finds it clean.

mod common;

use common::{assert_clean, have_e2fsprogs, Scratch};
use csumfs::{NewInode, Options, Stats, Volume, FC_BYTELOG, LOG_PENDING, ROOT};
use csumkit::ext4::jbd2::bytelog_anchor::ByteLogAnchor;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
const DIR: NewInode = NewInode { mode: 0o40_755, uid: 0, gid: 0 };

type Tree = BTreeMap<String, Vec<u8>>;

/// Creates, small and large writes, unlinks, directories and xattrs —
/// anything a ByteLog commit carries — each round synced; the tree the
/// last sync acknowledged.
fn workload(volume: &mut Volume, rounds: usize) -> Tree {
    let mut tree = Tree::new();
    let mut dir = ROOT;
    let mut dir_name = String::new();
    for i in 0..rounds {
        if i % 10 == 0 {
            dir_name = format!("/d{i}");
            dir = volume.mkdir(ROOT, &dir_name.as_bytes()[1..], DIR).unwrap().ino;
        }
        let name = format!("f{i}");
        let f = volume.create(dir, name.as_bytes(), FILE).unwrap();
        let content = common::seeded_bytes(i, (i * 1237) % 20_000 + 1);
        volume.write(f.ino, 0, &content).unwrap();
        tree.insert(format!("{dir_name}/{name}"), content);
        if i % 4 == 3 {
            let gone = format!("f{}", i - 1);
            volume.unlink(dir, gone.as_bytes()).unwrap();
            tree.remove(&format!("{dir_name}/{gone}"));
        }
        if i % 5 == 0 {
            volume.setxattr(f.ino, "user.round", name.as_bytes(), csumfs::XattrMode::Either).unwrap();
        }
        volume.sync().unwrap();
    }
    tree
}

fn incompat(image: &Path) -> u32 {
    let bytes = std::fs::read(image).unwrap();
    u32::from_le_bytes(bytes[1024 + 0x60..1024 + 0x64].try_into().unwrap())
}

/// The two anchor blocks of the image's fast-commit area (journal inode
/// 8's last `s_num_fc_blks` blocks, contiguous as mke2fs lays them) and
/// where the first is in the image.
fn anchor_blocks(image: &Path) -> ([Vec<u8>; 2], usize) {
    let bytes = std::fs::read(image).unwrap();
    let layout = csumkit::ext4::Layout::parse(&bytes).unwrap();
    let journal = csumkit::ext4::jbd2::Journal::open(&bytes, &layout).unwrap().unwrap();
    let sb = journal.block(&bytes, 0).unwrap();
    let first = journal.superblock.max_len - u32::from_be_bytes(sb[0x54..0x58].try_into().unwrap());
    let block = |i| journal.block(&bytes, first + i).unwrap().to_vec();
    let at = journal.blocks[first as usize] as usize * journal.superblock.block_size as usize;
    ([block(0), block(1)], at)
}

/// The newest anchor the area's two blocks carry.
fn newest_anchor(image: &Path) -> Option<ByteLogAnchor> {
    let (blocks, _) = anchor_blocks(image);
    let parsed = blocks.iter().enumerate().filter_map(|(slot, b)| ByteLogAnchor::parse(b, slot == 0).ok());
    parsed.map(|(a, _)| a).max_by_key(|a| a.anchor.anchor_seq)
}

/// Whether this process may mount (root); says the test skipped that
/// part if not (a failure in CI, which runs as root).
fn may_mount() -> bool {
    let out = Command::new("id").arg("-u").output().unwrap();
    let root = String::from_utf8_lossy(&out.stdout).trim() == "0";
    if !root {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root");
        eprintln!("SKIPPED the kernel's refusal: not root");
    }
    root
}

#[test]
fn commits_in_the_fast_commit_area_are_replayed_from_the_image_alone() {
    if !have_e2fsprogs() {
        return;
    }
    for (bs, size, rounds) in [("4096", "64M", 60), ("1024", "32M", 40)] {
        let scratch = Scratch::new(&format!("fc-bytelog-{bs}"));
        let image = scratch.0.join("img");
        common::mke2fs_features(&image, "metadata_csum,fast_commit", bs, size, &[]);
        let (mut volume, replayed) = Volume::open_logged_in_fast_commit_area(&image, Options::default(), None).unwrap();
        assert_eq!(replayed.commits, 0);
        assert_eq!(volume.log_on(), Some(csumfs::LOG_IN_FAST_COMMIT_AREA_DIRECT), "{bs}: direct writes here");
        volume.mark_log_in_use().unwrap();
        let expect = workload(&mut volume, rounds);
        assert!(Stats::get(&volume.stats().log_commits) >= rounds as u64, "{bs}: a commit per sync");
        assert_eq!(common::regular_files(&volume), expect);
        drop(volume); // killed: no checkpoint

        let files: Vec<_> = std::fs::read_dir(&scratch.0).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(files, ["img"], "{bs}: nothing beside the image");
        assert_eq!(incompat(&image) & (LOG_PENDING | FC_BYTELOG), LOG_PENDING | FC_BYTELOG, "{bs}: marked");
        let anchor = newest_anchor(&image).expect("an anchor block");
        assert!(anchor.anchor.anchor_seq >= 1, "{bs}: {anchor:?}");
        // The kernel and e2fsck refuse the image while the log holds changes.
        let out = Command::new(common::tool("e2fsck").unwrap()).arg("-fn").arg(&image).output().unwrap();
        assert_ne!(out.status.code(), Some(0), "{bs}: e2fsck takes an image whose log holds changes");
        let mnt = scratch.0.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        if may_mount() {
            let out =
                Command::new("mount").args(["-t", "ext4", "-o", "loop,ro"]).arg(&image).arg(&mnt).output().unwrap();
            if out.status.success() {
                common::kernel_umount(&mnt);
                panic!("{bs}: the kernel mounted an image whose ByteLog holds changes");
            }
        }
        // A mount naming a log file instead is told where the log is.
        let e = Volume::open_logged(&image, &scratch.0.join("img.bytelog"), 1 << 20, Options::default(), None)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("-o bytelog"), "{e}");
        assert!(!scratch.0.join("img.bytelog").exists());

        // Read-only: served as the log makes it, the image unchanged.
        let before = std::fs::read(&image).unwrap();
        let config = csumfs::mount::MountConfig { write: false, ..csumfs::mount::MountConfig::new(&image) };
        let (volume, events) = csumfs::mount::mount(&image, &config).unwrap();
        assert_eq!(common::regular_files(&volume), expect, "{bs}: the read-only replay");
        assert!(events.iter().any(|e| e.to_string().contains(csumfs::mount::FAST_COMMIT_AREA)), "{events:?}");
        drop(volume);
        assert!(std::fs::read(&image).unwrap() == before, "{bs}: a read-only open wrote the image");

        // The default mount finds the log in the image, folds it in and
        // goes on in the image's journal.
        let (volume, events) = csumfs::mount::mount(&image, &csumfs::mount::MountConfig::new(&image)).unwrap();
        let replayed = events.iter().find_map(|e| match e {
            csumfs::mount::MountEvent::Replayed(from, r) => Some((from.clone(), *r)),
            _ => None,
        });
        let (from, replayed) = replayed.expect("replayed");
        assert_eq!(from, Path::new(csumfs::mount::FAST_COMMIT_AREA));
        assert!(replayed.commits >= 1, "{bs}: {replayed:?}");
        assert!(volume.journaled_in_image(), "{bs}: the default mode after the fold");
        assert_eq!(common::regular_files(&volume), expect, "{bs}: csumfs's replay");
        let mut volume = volume;
        volume.checkpoint().unwrap();
        drop(volume);
        assert_eq!(incompat(&image) & (LOG_PENDING | FC_BYTELOG), 0, "{bs}: unmarked");
        assert_clean(&image, "csumfs's replay of the fast-commit area's ByteLog");
        common::with_kernel_mount(&image, &mnt, || {
            for (path, content) in &expect {
                assert!(std::fs::read(mnt.join(&path[1..])).unwrap() == *content, "{path}: the kernel's view");
            }
        });
    }
}

/// One anchor block damaged (what a crash tearing its rewrite leaves):
/// the other names the log. Both: refused by name, nothing written.
#[test]
fn damaged_anchor_blocks_are_refused_by_name_and_change_nothing() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("fc-bytelog-anchor");
    let image = scratch.0.join("img");
    common::mke2fs_features(&image, "metadata_csum,fast_commit", "4096", "32M", &[]);
    let (mut volume, _) = Volume::open_logged_in_fast_commit_area(&image, Options::default(), None).unwrap();
    volume.mark_log_in_use().unwrap();
    let f = volume.create(ROOT, b"f", FILE).unwrap();
    volume.write(f.ino, 0, b"acknowledged").unwrap();
    volume.sync().unwrap();
    volume.checkpoint().unwrap(); // both anchor blocks written
    let g = volume.create(ROOT, b"g", FILE).unwrap();
    volume.write(g.ino, 0, b"after").unwrap();
    volume.sync().unwrap();
    drop(volume);
    let (blocks, at) = anchor_blocks(&image);
    for (slot, block) in blocks.iter().enumerate() {
        assert!(ByteLogAnchor::parse(block, slot == 0).is_ok(), "anchor block {slot}");
    }
    // The generation (HEAD 12 bytes in the first block, none in the second,
    // then the anchor's tag and length, window 8 bytes) flipped by a bit.
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[at + 12 + 4 + 8] ^= 1;
    std::fs::write(&image, &bytes).unwrap();
    let copy = scratch.0.join("copy");
    std::fs::copy(&image, &copy).unwrap();
    let (volume, replayed) = Volume::open_logged_in_fast_commit_area(&copy, Options::default(), None).unwrap();
    assert!(replayed.commits >= 1);
    let g = volume.lookup(&volume.inode(ROOT).unwrap(), b"g").unwrap();
    assert_eq!(volume.read_all(&volume.inode(g.ino).unwrap()).unwrap(), b"after");
    drop(volume);
    let bs = 4096;
    bytes[at + bs + 4 + 8] ^= 1;
    std::fs::write(&image, &bytes).unwrap();
    let e = Volume::open_logged_in_fast_commit_area(&image, Options::default(), None).err().expect("refused");
    assert!(e.to_string().contains("no anchor names its ByteLog"), "{e}");
    assert!(std::fs::read(&image).unwrap() == bytes, "a refused open wrote the image");
}

#[test]
fn an_image_without_a_fast_commit_area_is_refused_with_the_remedy() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("fc-bytelog-none");
    let image = scratch.0.join("img");
    common::mke2fs_features(&image, "metadata_csum", "4096", "32M", &[]);
    let e = Volume::open_logged_in_fast_commit_area(&image, Options::default(), None).err().expect("refused");
    assert!(e.to_string().contains("mke2fs -O fast_commit"), "{e}");
    assert_eq!(incompat(&image) & (LOG_PENDING | FC_BYTELOG), 0);
}

/// An image on tmpfs (the stand-in for DAX persistent memory): the area
/// is mapped and flushed by cache line; killed, the image alone replays.
#[test]
fn an_image_on_tmpfs_has_its_area_mapped_and_flushed_by_cache_line() {
    if !have_e2fsprogs() {
        return;
    }
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        assert!(std::env::var_os("CI").is_none(), "CI has /dev/shm");
        eprintln!("SKIPPED an_image_on_tmpfs_has_its_area_mapped_and_flushed_by_cache_line: no /dev/shm");
        return;
    }
    let dir = shm.join(format!("csumfs-fc-bytelog-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let scratch = Scratch(dir);
    let image = scratch.0.join("img");
    // 1 KiB blocks: the area does not begin on a page.
    common::mke2fs_features(&image, "metadata_csum,fast_commit", "1024", "32M", &[]);
    let (mut volume, _) = Volume::open_logged_in_fast_commit_area(&image, Options::default(), None).unwrap();
    assert_eq!(volume.log_on(), Some(csumfs::LOG_IN_FAST_COMMIT_AREA_MAPPED));
    volume.mark_log_in_use().unwrap();
    let expect = workload(&mut volume, 30);
    drop(volume);
    let (volume, replayed) = Volume::open_logged_in_fast_commit_area(&image, Options::default(), None).unwrap();
    assert!(replayed.commits >= 30, "{replayed:?}");
    assert_eq!(common::regular_files(&volume), expect);
    let mut volume = volume;
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "the replay of a mapped fast-commit area");
}

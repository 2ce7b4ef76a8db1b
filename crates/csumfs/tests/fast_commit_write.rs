//! Kernel-format fast commits written by csumfs, judged by the kernel: on
//! a fast_commit image, fsyncs of creates, writes, truncates, links,
//! unlinks and renames are fast commits; a volume stopped after them
//! (a killed daemon) leaves an image whose journal the kernel's mount
//! replays — fast commits after the log's transactions — to the tree the
//! last sync acknowledged, with `e2fsck -fn` clean after, as csumfs's own
//! open does. (e2fsck 1.47.0 cannot replay fast commits, the kernel's own
//! included: `crates/csumkit/tests/data/jbd2/VERDICTS`.)

mod common;

use common::{assert_clean, have_e2fsprogs, Scratch};
use csumfs::{NewInode, Options, RenameMode, SetAttr, Stats, Volume, ROOT};
use std::collections::BTreeMap;
use std::path::Path;

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
const DIR: NewInode = NewInode { mode: 0o40_755, uid: 0, gid: 0 };

type Tree = BTreeMap<String, Vec<u8>>;

/// Every regular file under `dir` of a kernel mount, by path from it.
fn kernel_tree(root: &Path) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            if name == "lost+found" {
                continue;
            }
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                out.insert(format!("/{name}"), std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Creates, writes (in one block and in many, over holes, appended),
/// truncates (to a block boundary), links, unlinks (last links among
/// them, their inode numbers and blocks reused), renames within and
/// across directories (over a file too), each round synced. Returns the
/// tree the last sync acknowledged.
fn workload(volume: &mut Volume, rounds: usize, bs: usize) -> Tree {
    let a = volume.mkdir(ROOT, b"a", DIR).unwrap().ino;
    let b = volume.mkdir(ROOT, b"b", DIR).unwrap().ino;
    volume.sync().unwrap(); // directories made: a full commit
    let mut tree = Tree::new();
    for i in 0..rounds {
        let name = format!("f{i}");
        let f = volume.create(a, name.as_bytes(), FILE).unwrap();
        let content = common::seeded_bytes(i, (i * 1237) % (9 * bs) + 1);
        volume.write(f.ino, 0, &content).unwrap();
        tree.insert(format!("/a/{name}"), content);
        match i % 6 {
            1 => {
                // A hole, then a block past it.
                let tail = common::seeded_bytes(i + 1, bs);
                let mut content = tree.remove(&format!("/a/{name}")).unwrap();
                let at = content.len().div_ceil(bs) * bs + 3 * bs;
                volume.write(f.ino, at as u64, &tail).unwrap();
                content.resize(at, 0);
                content.extend_from_slice(&tail);
                tree.insert(format!("/a/{name}"), content);
            }
            2 if i > 2 => {
                // The file before: its last link goes.
                let gone = format!("f{}", i - 1);
                volume.unlink(a, gone.as_bytes()).unwrap();
                tree.remove(&format!("/a/{gone}"));
            }
            3 => {
                let to = format!("moved{i}");
                volume.rename(a, name.as_bytes(), b, to.as_bytes(), RenameMode::Replace).unwrap();
                let content = tree.remove(&format!("/a/{name}")).unwrap();
                tree.insert(format!("/b/{to}"), content);
            }
            4 => {
                let link = format!("link{i}");
                volume.link(f.ino, b, link.as_bytes()).unwrap();
                let content = tree[&format!("/a/{name}")].clone();
                tree.insert(format!("/b/{link}"), content);
                // Truncated to a block boundary: both names see it.
                let size = (tree[&format!("/b/{link}")].len() / bs * bs) as u64;
                volume.set_attr(f.ino, SetAttr { size: Some(size), ..SetAttr::default() }).unwrap();
                for path in [format!("/a/{name}"), format!("/b/{link}")] {
                    tree.get_mut(&path).unwrap().truncate(size as usize);
                }
            }
            5 if i > 6 => {
                // Renamed over an earlier file (its last link goes).
                let over = tree.keys().find(|p| p.starts_with("/b/moved")).cloned();
                if let Some(over) = over {
                    let to = &over["/b/".len()..];
                    volume.rename(a, name.as_bytes(), b, to.as_bytes(), RenameMode::Replace).unwrap();
                    let content = tree.remove(&format!("/a/{name}")).unwrap();
                    tree.insert(over, content);
                }
            }
            _ => {}
        }
        volume.sync().unwrap();
    }
    tree
}

#[test]
fn fsyncs_on_a_fast_commit_image_are_fast_commits_the_kernel_replays() {
    if !have_e2fsprogs() {
        return;
    }
    for (bs, size, rounds) in [("4096", "64M", 60), ("1024", "32M", 120)] {
        let scratch = Scratch::new(&format!("fast-commit-{bs}"));
        let image = scratch.0.join("img");
        common::mke2fs_features(&image, "metadata_csum,fast_commit", bs, size, &[]);
        let mut volume = Volume::open_journaled(&image, Options::default(), None).unwrap();
        volume.mark_log_in_use().unwrap();
        let mut expect = workload(&mut volume, rounds, bs.parse().unwrap());
        // The last sync a fast commit (one that found the area full was a
        // full commit, and began it again).
        for i in 0..2 {
            let fast = Stats::get(&volume.stats().fast_commits);
            let f = volume.create(ROOT, format!("last{i}").as_bytes(), FILE).unwrap();
            volume.write(f.ino, 0, b"last").unwrap();
            volume.sync().unwrap();
            expect.insert(format!("/last{i}"), b"last".to_vec());
            if Stats::get(&volume.stats().fast_commits) > fast {
                break;
            }
        }
        let stats = volume.stats();
        let (fast, full) = (Stats::get(&stats.fast_commits), Stats::get(&stats.log_commits));
        assert!(fast * 10 >= rounds as u64 * 9, "{bs}: {fast} fast commits, {full} full, for {rounds} syncs");
        assert_eq!(common::regular_files(&volume), expect, "{bs}: the volume before it stops");
        drop(volume); // killed: no checkpoint

        let kernel_copy = scratch.0.join("kernel-copy");
        std::fs::copy(&image, &kernel_copy).unwrap();
        let mnt = scratch.0.join("mnt");
        if common::kernel_mount_with(&kernel_copy, &mnt, "loop") {
            let got = kernel_tree(&mnt);
            common::kernel_umount(&mnt);
            assert_eq!(got.keys().collect::<Vec<_>>(), expect.keys().collect::<Vec<_>>(), "{bs}: the kernel's names");
            assert!(got == expect, "{bs}: the kernel's replay gives other contents");
            assert_clean(&kernel_copy, "the kernel's replay of csumfs's fast commits");
        }

        let volume = Volume::open_journaled(&image, Options::default(), None).unwrap();
        assert!(volume.journal_replayed().is_some_and(|r| r.fast_commit_records > 0), "{bs}: fast commits replayed");
        assert_eq!(common::regular_files(&volume), expect, "{bs}: csumfs's recovery");
        let mut volume = volume;
        volume.checkpoint().unwrap();
        drop(volume);
        assert_clean(&image, "csumfs's recovery of its fast commits and a checkpoint");
    }
}

#[test]
fn a_change_fast_commits_cannot_carry_makes_the_sync_a_full_commit() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("fast-commit-fallback");
    let image = scratch.0.join("img");
    common::mke2fs_features(&image, "metadata_csum,fast_commit", "4096", "32M", &[]);
    let mut volume = Volume::open_journaled(&image, Options::default(), None).unwrap();
    volume.mark_log_in_use().unwrap();
    let f = volume.create(ROOT, b"f", FILE).unwrap();
    volume.write(f.ino, 0, b"data").unwrap();
    volume.sync().unwrap();
    let counts = |v: &Volume| (Stats::get(&v.stats().fast_commits), Stats::get(&v.stats().fast_commit_fallbacks));
    assert_eq!(counts(&volume), (1, 0), "a create and a write: one fast commit");
    volume.setxattr(f.ino, "user.k", b"v", csumfs::XattrMode::Either).unwrap();
    volume.sync().unwrap();
    assert_eq!(counts(&volume), (1, 1), "an xattr: a full commit");
    volume.mkdir(ROOT, b"d", DIR).unwrap();
    volume.write(f.ino, 4, b"more").unwrap();
    volume.sync().unwrap();
    assert_eq!(counts(&volume), (1, 2), "a directory made: a full commit");
    volume.write(f.ino, 8, b"again").unwrap();
    volume.sync().unwrap();
    assert_eq!(counts(&volume), (2, 2), "after the full commit, fast ones again");
    drop(volume);
    let mnt = scratch.0.join("mnt");
    common::with_kernel_mount_with(&image, &mnt, "loop", || {
        assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"datamoreagain");
        assert!(mnt.join("d").is_dir());
    });
    assert_clean(&image, "the kernel's replay");
}

/// The kernel's replay reads on past a block whose fast commit is good —
/// past the journal's end it fails the whole recovery — so the area's last
/// block is never used: killed with the area as full as it gets (and each
/// count around it), the image is one the kernel mounts.
#[test]
fn a_full_fast_commit_area_leaves_a_journal_the_kernel_recovers() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("fast-commit-full");
    for syncs in 12..=17 {
        let image = scratch.0.join(format!("img-{syncs}"));
        // 16 fast-commit blocks: at most 14 in use.
        common::mke2fs_features(&image, "metadata_csum,fast_commit", "4096", "64M", &[]);
        let mut volume = Volume::open_journaled(&image, Options::default(), None).unwrap();
        volume.mark_log_in_use().unwrap();
        volume.mkdir(ROOT, b"d", DIR).unwrap();
        volume.sync().unwrap(); // a full commit: the area begins again
        let mut expect = Tree::new();
        for i in 0..syncs {
            let name = format!("f{i}");
            let f = volume.create(ROOT, name.as_bytes(), FILE).unwrap();
            volume.write(f.ino, 0, &common::seeded_bytes(i, 100)).unwrap();
            volume.sync().unwrap();
            expect.insert(format!("/{name}"), common::seeded_bytes(i, 100));
        }
        assert!(Stats::get(&volume.stats().fast_commits) >= 12, "{syncs}: fast commits");
        drop(volume);
        let mnt = scratch.0.join("mnt");
        if common::kernel_mount_with(&image, &mnt, "loop") {
            let got = kernel_tree(&mnt);
            common::kernel_umount(&mnt);
            assert!(got == expect, "{syncs} syncs: the kernel's replay differs");
            assert_clean(&image, "the kernel's replay of a full fast-commit area");
        }
    }
}

//! Commits in the image's own jbd2 journal, judged by the kernel and
//! e2fsck: a volume synced and then stopped without a checkpoint (a
//! killed daemon) leaves an ordinary ext4 image needing recovery, which
//! e2fsck and the kernel replay to the tree the sync acknowledged, as
//! csumfs's own open does.

mod common;

use common::{assert_clean, have_e2fsprogs, tool, Scratch};
use csumfs::{NewInode, Options, Volume, ROOT};
use std::path::Path;
use std::process::Command;

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
const DIR: NewInode = NewInode { mode: 0o40_755, uid: 0, gid: 0 };

/// Files, directories, a rename and an unlink, synced: what each
/// recovery must show. Returns the expected (path, content) pairs.
fn workload(volume: &mut Volume, rounds: usize) -> Vec<(String, Vec<u8>)> {
    let mut expect = Vec::new();
    let d = volume.mkdir(ROOT, b"d", DIR).unwrap();
    for i in 0..rounds {
        let name = format!("f{i}");
        let f = volume.create(d.ino, name.as_bytes(), FILE).unwrap();
        let content: Vec<u8> = (0..(i * 997) % 20_000 + 1).map(|k| (k * 31 + i) as u8).collect();
        volume.write(f.ino, 0, &content).unwrap();
        expect.push((format!("/d/{name}"), content));
        if i % 7 == 3 {
            let sub = volume.mkdir(d.ino, format!("sub{i}").as_bytes(), DIR).unwrap();
            volume.rename(d.ino, name.as_bytes(), sub.ino, b"moved", csumfs::RenameMode::Replace).unwrap();
            let (_, content) = expect.pop().unwrap();
            expect.push((format!("/d/sub{i}/moved"), content));
        }
        let previous = format!("/d/f{}", i.wrapping_sub(1));
        if i % 11 == 5 && expect.iter().any(|(p, _)| *p == previous) {
            volume.unlink(d.ino, &previous.as_bytes()["/d/".len()..]).unwrap();
            expect.retain(|(p, _)| *p != previous);
        }
        if i % 5 == 0 {
            volume.sync().unwrap();
        }
    }
    volume.sync().unwrap();
    expect
}

fn assert_tree(volume: &Volume, expect: &[(String, Vec<u8>)], who: &str) {
    for (path, content) in expect {
        let inode = volume.resolve(path).unwrap_or_else(|e| panic!("{who}: {path} missing: {e}"));
        assert_eq!(&volume.read_all(&inode).unwrap(), content, "{who}: {path}");
    }
}

fn needs_recovery(image: &Path) -> bool {
    let bytes = std::fs::read(image).unwrap();
    u32::from_le_bytes(bytes[1024 + 0x60..1024 + 0x64].try_into().unwrap()) & 0x4 != 0
}

#[test]
fn a_stopped_volume_leaves_a_journal_the_kernel_e2fsck_and_csumfs_recover() {
    if !have_e2fsprogs() {
        return;
    }
    // The second: a 1 MiB journal that the workload wraps several times
    // (checkpoints moving its tail under way).
    for (bs, size, journal, rounds) in [("4096", "64M", "size=4", 60), ("1024", "32M", "size=1", 700)] {
        let scratch = Scratch::new(&format!("image-journal-{bs}"));
        let image = scratch.0.join("img");
        common::mke2fs_features(&image, "metadata_csum", bs, size, &["-J", journal]);
        let mut volume = Volume::open_journaled(&image, Options::default(), None).unwrap();
        assert!(volume.journaled_in_image());
        volume.mark_log_in_use().unwrap();
        let expect = workload(&mut volume, rounds);
        let logged = csumfs::Stats::get(&volume.stats().log_commit_bytes);
        if rounds > 100 {
            assert!(logged > 2 << 20, "{bs}: {logged} bytes logged: the 1 MiB journal never wrapped twice");
        }
        // Killed: the private copy is gone, no checkpoint.
        drop(volume);
        assert!(needs_recovery(&image), "{bs}: a stopped volume's image needs recovery");
        // debugfs reads the log as well-formed: every transaction's
        // descriptor and commit block found, the end where recovery ends.
        let out = Command::new(tool("debugfs").unwrap()).args(["-R", "logdump"]).arg(&image).output().unwrap();
        let dump = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        let commits = dump.matches("(commit block)").count();
        assert!(commits >= 10 && dump.contains("end of journal"), "{bs}: logdump:\n{dump}");
        for bad in ["bad", "Bad", "invalid", "Invalid", "corrupt", "unexpected"] {
            assert!(!dump.contains(bad), "{bs}: logdump says {bad}:\n{dump}");
        }
        let e2fsck_copy = scratch.0.join("e2fsck-copy");
        let kernel_copy = scratch.0.join("kernel-copy");
        std::fs::copy(&image, &e2fsck_copy).unwrap();
        std::fs::copy(&image, &kernel_copy).unwrap();

        // e2fsck replays the journal, then finds the result clean.
        let out = Command::new(tool("e2fsck").unwrap()).args(["-fy"]).arg(&e2fsck_copy).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.code().is_some_and(|c| c <= 1), "{bs}: e2fsck -fy: {text}");
        assert_clean(&e2fsck_copy, "e2fsck's recovery");
        let v = Volume::open(&e2fsck_copy, Options::default()).unwrap();
        assert_tree(&v, &expect, "after e2fsck's recovery");

        // The kernel replays it at mount.
        let mnt = scratch.0.join("mnt");
        if common::kernel_mount_with(&kernel_copy, &mnt, "loop") {
            for (path, content) in &expect {
                let got = std::fs::read(mnt.join(&path[1..])).unwrap_or_else(|e| panic!("{bs}: kernel: {path}: {e}"));
                assert_eq!(&got, content, "{bs}: kernel: {path}");
            }
            common::kernel_umount(&mnt);
            assert_clean(&kernel_copy, "the kernel's recovery");
        }

        // csumfs's own open recovers it in place.
        let volume = Volume::open_journaled(&image, Options::default(), None).unwrap();
        assert!(volume.journal_replayed().is_some_and(|r| r.transactions > 0));
        assert_tree(&volume, &expect, "after csumfs's recovery");
        let mut volume = volume;
        volume.checkpoint().unwrap();
        drop(volume);
        assert!(!needs_recovery(&image));
        assert_clean(&image, "csumfs's recovery and checkpoint");
    }
}

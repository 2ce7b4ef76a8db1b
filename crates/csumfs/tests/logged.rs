//! A volume with its metadata in a ByteLog, on real files: a 40 GiB sparse
//! image (the bench's 64 KiB-block geometry) opens — its private map
//! reserves no swap — and what is written, synced and checkpointed is what
//! e2fsck and a second open see.

mod common;

use common::{assert_clean, fill_until_full, have_e2fsprogs, mke2fs_with, Scratch};
use csumfs::{NewInode, Options, Stats, Volume, ROOT};
use std::path::Path;

/// A fresh image of 4 KiB blocks and `size` in `scratch`: its path and
/// those of its log and data checksum sidecar beside it.
fn fresh_image(scratch: &Scratch, size: &str) -> [std::path::PathBuf; 3] {
    let image = scratch.0.join("img");
    mke2fs_with(&image, "4096", size, &[]);
    [image, scratch.0.join("img.bytelog"), scratch.0.join("img.csums")]
}

/// Opens `image` with its metadata in a 4 MiB ByteLog at `log` and its
/// data checksums in `sums`.
fn open_with_sums(image: &Path, log: &Path, sums: &Path) -> (Volume, csumfs::Replayed) {
    Volume::open_logged(image, log, 4 << 20, Options::default(), Some(sums)).unwrap()
}

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
    // New 64 KiB blocks built over templates, their non-zero pages only
    // written: an extent leaf (six one-block extents; its header in the
    // first page, its checksum in the last) and a directory's block (its
    // entries first, the checksum tail last).
    let sparse = volume.create(ROOT, b"sparse", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap();
    for k in 0..6u64 {
        volume.write(sparse.ino, 2 * k * 65536, &[k as u8 + 1; 100]).unwrap();
    }
    let dir = volume.mkdir(ROOT, b"d", NewInode { mode: 0o40_755, uid: 0, gid: 0 }).unwrap();
    volume.create(dir.ino, b"inside", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap();
    volume.sync().unwrap();
    let head = |image: &Path| {
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
    let sparse = volume.read_all(&volume.resolve("/sparse").unwrap()).unwrap();
    for k in 0..6usize {
        assert_eq!(sparse[2 * k * 65536..][..100], [k as u8 + 1; 100], "extent {k}");
    }
    assert!(volume.resolve("/d/inside").is_ok());
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
    let [image, log, sums] = fresh_image(&scratch, "64M");
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let big: Vec<u8> = (0..20usize << 20).map(|i| (i * 7 % 251) as u8).collect();
    // Two blocks that differ: a checksum on the wrong block shows.
    let small: Vec<u8> = [[9u8; 4096], [10u8; 4096]].concat();
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
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
    let first_runs: Vec<_> = [f, g].iter().map(|&i| volume.runs(&volume.inode(i).unwrap()).unwrap()[0]).collect();
    assert!(first_runs.iter().all(|run| run.len >= 2), "each file's first two blocks are one run");
    let first_blocks: Vec<u64> = first_runs.iter().map(|run| run.physical).collect();
    drop(volume); // dies before any checkpoint

    let (mut volume, replayed) = open_with_sums(&image, &log, &sums);
    assert!(replayed.commits >= 2);
    assert_eq!(volume.read_all(&volume.inode(f).unwrap()).unwrap(), big, "verified, not EIO");
    assert_eq!(volume.read_all(&volume.inode(g).unwrap()).unwrap(), small);
    volume.checkpoint().unwrap();
    drop(volume);
    let clean = std::fs::read(&image).unwrap();
    // A flip in each file's first block, then in its second: every block
    // has its own checksum, not a neighbour's.
    for second in [0u64, 1] {
        let mut bytes = clean.clone();
        for &b in &first_blocks {
            bytes[((b + second) * 4096 + 1000) as usize] ^= 0x10;
        }
        std::fs::write(&image, &bytes).unwrap();
        let (volume, _) = open_with_sums(&image, &log, &sums);
        for (ino, name) in [(f, "the sidecar's"), (g, "the log's")] {
            match volume.read_all(&volume.inode(ino).unwrap()) {
                Err(err) => assert_eq!(err.errno(), libc::EIO, "{name} checksum, block {second}: {err}"),
                Ok(_) => panic!("{name} checksum missed the flipped byte in block {second}: the data read back"),
            }
        }
    }
}

/// Operations change only the private copy: nothing is committed before
/// `sync` (or 1 MiB pending, or 5 s), nothing checkpointed before the log
/// is half full, 16 Ki pages differ or 30 s pass; a write of up to a page
/// goes to the log, not the image file, until the checkpoint (and one of
/// two pages to the image at once).
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
        volume.write(ino, 0, &[0x11; 8192]).unwrap();
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

/// The image at `path` with its superblock saying a log holds changes.
fn pending_image(path: &Path) -> Vec<u8> {
    let mut image = std::fs::read(path).unwrap();
    let incompat = u32::from_le_bytes(image[1024 + 0x60..1024 + 0x64].try_into().unwrap()) | csumfs::LOG_PENDING;
    image[1024 + 0x60..1024 + 0x64].copy_from_slice(&incompat.to_le_bytes());
    let crc = csumkit::crc32c::raw_update(!0, &image[1024..1024 + 0x3FC]);
    image[1024 + 0x3FC..2048].copy_from_slice(&crc.to_le_bytes());
    image
}

/// A ByteLog holding `records` (tag, payload), each whole.
fn log_of(records: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut log = csumkit::bytelog::ByteLog::format(csumkit::bytelog::SimMedium::new(1 << 20), 1).unwrap();
    for (tag, payload) in records {
        log.append(*tag, 0, payload).unwrap();
    }
    log.into_medium().durable().to_vec()
}

/// A csumfs log entry: offset (with its kind bit), length, bytes.
fn entry(offset: u64, bytes: &[u8]) -> Vec<u8> {
    [&offset.to_le_bytes()[..], &(bytes.len() as u32).to_le_bytes(), bytes].concat()
}

const SUMS: u64 = 1 << 63;
const FORGET: u64 = 1 << 62;
const FILL: u64 = 1 << 61;

/// A log whose records are whole (their CRCs good) but whose entries name
/// bytes past the image or data blocks past the volume is damage: replay
/// refuses it as `Corrupt` before writing anything, and no count it holds
/// sizes an allocation (a forget of 2^40 blocks, a fill of 2^64 bytes).
#[test]
fn a_log_naming_bytes_or_blocks_past_the_volume_is_refused() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-bounds");
    let path = scratch.0.join("img");
    mke2fs_with(&path, "4096", "16M", &[]);
    let image = pending_image(&path);
    let (len, blocks) = (image.len() as u64, image.len() as u64 / 4096);
    let log_of = |payload: &[u8]| log_of(&[(csumfs::TAG_LAST, payload.to_vec())]);
    // Whole: a fill of block 10 with 0xAB, bytes at the image's last byte.
    let good =
        [entry(FILL | (10 * 4096), &[&4096u64.to_le_bytes()[..], &[0xAB]].concat()), entry(len - 1, &[7])].concat();
    let (after, replayed) = Volume::replayed_image(image.clone(), log_of(&good)).unwrap();
    assert_eq!((replayed.commits, replayed.bytes), (1, 4097));
    assert_eq!(after[10 * 4096..11 * 4096], [0xAB; 4096]);
    assert_eq!(after[len as usize - 1], 7);
    for (payload, what) in [
        (entry(len - 10, &[1; 20]), "bytes across the image's end"),
        (entry(FILL | (len - 10), &20u64.to_le_bytes()), "a fill across the image's end"),
        (entry(FILL, &u64::MAX.to_le_bytes()), "a fill of 2^64 bytes"),
        (entry(SUMS | (blocks - 1), &[0; 8]), "checksums of the last block and one past it"),
        (entry(FORGET, &(1u64 << 40).to_le_bytes()), "a forget of 2^40 blocks"),
        (entry(FORGET | ((1 << 62) - 1), &2u64.to_le_bytes()), "a forget whose end overflows"),
    ] {
        match Volume::replayed_image(image.clone(), log_of(&payload)) {
            Err(err @ csumfs::Error::Format(csumkit::Error::Corrupt { .. })) => {
                assert!(err.to_string().contains("past"), "{what}: {err}");
            }
            other => panic!("{what}: {:?}", other.map(|(_, r)| r)),
        }
    }
}

/// The twin of the `csumfs_log_replay` fuzz target that CI runs: whole
/// records of random entries of every kind (inside the image and the
/// volume, across their ends, far past them), in commits cut anywhere,
/// under random tags. Replay is a typed error or an image (the same past
/// its superblock when no commit was complete), never a panic.
#[test]
fn replay_of_random_entries_is_an_image_or_a_typed_error() {
    if !have_e2fsprogs() {
        return;
    }
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let scratch = Scratch::new("logged-random");
    let path = scratch.0.join("img");
    mke2fs_with(&path, "1024", "4M", &[]);
    let image = pending_image(&path);
    let len = image.len() as u64;
    let blocks = len / 1024;
    let offset = prop_oneof![
        12 => 0..len - 64 * 2048,
        1 => len - 64..len + 64,
        1 => Just(u64::MAX >> 3),
        1 => any::<u64>().prop_map(|o| o >> 3),
    ];
    let one = (0u8..4, offset, 0u64..2048, any::<u8>()).prop_map(move |(kind, at, n, value)| match kind {
        // At most 6 × 612 bytes: a record's payload holds 4 064.
        0 => entry(at, &vec![value; n as usize % 600]),
        1 => entry(FILL | at, &[&(n * 64).to_le_bytes()[..], &[value]].concat()),
        2 => entry(SUMS | (at % (blocks + blocks / 8)), &vec![value; 4 * (n as usize % 64)]),
        _ => entry(FORGET | (at % (blocks + blocks / 8)), &n.to_le_bytes()),
    });
    let tag = prop_oneof![4 => Just(csumfs::TAG_LAST), 3 => Just(csumfs::TAG_PART), 1 => 0u16..4];
    let record = (prop::collection::vec(one, 0..6), tag);
    // A fixed seed: the counts below are the same on every run.
    let rng = TestRng::deterministic_rng(RngAlgorithm::ChaCha);
    let mut runner = TestRunner::new_with_rng(Config { cases: 300, ..Config::default() }, rng);
    let (applied, refused) = (std::sync::atomic::AtomicUsize::new(0), std::sync::atomic::AtomicUsize::new(0));
    runner
        .run(&prop::collection::vec(record, 1..6), |records| {
            let records: Vec<(u16, Vec<u8>)> = records.iter().map(|(entries, tag)| (*tag, entries.concat())).collect();
            match Volume::replayed_image(image.clone(), log_of(&records)) {
                Ok((after, replayed)) => {
                    prop_assert!(replayed.bytes <= len * replayed.commits);
                    if replayed.commits > 0 {
                        applied.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    } else {
                        prop_assert!(after[2048..] == image[2048..], "no commit, yet the image changed");
                    }
                }
                Err(csumfs::Error::Format(csumkit::Error::Corrupt { .. })) => {
                    refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(other) => prop_assert!(false, "not a typed corruption: {other}"),
            }
            Ok(())
        })
        .unwrap();
    let (applied, refused) = (applied.into_inner(), refused.into_inner());
    eprintln!("random logs: {applied} replayed a commit, {refused} refused");
    assert!(applied > 10 && refused > 10, "the cases reach both outcomes: {applied} replayed, {refused} refused");
}

/// The log goes where its directory allows: on tmpfs a map flushed by cache
/// line, elsewhere (no DAX here) a file made durable by `fdatasync`, written
/// with direct I/O where its file system takes it — the
/// directory's file system as coreutils' `stat -f` names it is the judge.
#[test]
fn the_log_medium_follows_its_directory() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-medium");
    let image = scratch.0.join("img");
    mke2fs_with(&image, "4096", "16M", &[]);
    let shm = Path::new("/dev/shm");
    let mut dirs = vec![scratch.0.clone()];
    if shm.is_dir() {
        dirs.push(shm.to_path_buf());
    } else {
        assert!(std::env::var_os("CI").is_none(), "/dev/shm is required in CI");
        eprintln!("SKIPPED the tmpfs half of the_log_medium_follows_its_directory: no /dev/shm");
    }
    for dir in dirs {
        let kind = std::process::Command::new("stat").args(["-f", "-c", "%T"]).arg(&dir).output().unwrap();
        let kind = String::from_utf8_lossy(&kind.stdout).trim().to_string();
        let log = dir.join(format!("csumfs-medium-{}.bytelog", std::process::id()));
        let (mut volume, _) = Volume::open_logged(&image, &log, 1 << 20, Options::default(), None).unwrap();
        // ext4 ("ext2/ext3" to stat) takes direct I/O and says so (statx, Linux 6.1 on).
        let want: &[&str] = match kind.as_str() {
            "tmpfs" => &[csumfs::LOG_ON_TMPFS],
            "ext2/ext3" => &[csumfs::LOG_ON_FILE_DIRECT],
            _ => &[csumfs::LOG_ON_FILE_DIRECT, csumfs::LOG_ON_FILE],
        };
        assert!(want.contains(&volume.log_on().unwrap()), "a log in {} ({kind}): {:?}", dir.display(), volume.log_on());
        assert!(volume.logged());
        volume.checkpoint().unwrap();
        drop(volume);
        std::fs::remove_file(&log).unwrap();
    }
    let volume = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    assert_eq!(volume.log_on(), None);
    assert!(!volume.logged());
}

/// Data for blocks freed since the last commit goes through the log, not
/// to the image file: until the free is durable a crash brings the old
/// file back, and its bytes must still be there.
#[test]
fn data_on_blocks_freed_since_the_last_commit_waits_in_the_log() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-freed");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "4096", "16M", &[]);
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let old = volume.create(ROOT, b"old", file).unwrap().ino;
    volume.write(old, 0, &[0x11; 16384]).unwrap();
    volume.checkpoint().unwrap();
    let blocks = |v: &Volume, ino| v.runs(&v.inode(ino).unwrap()).unwrap()[0];
    let freed = blocks(&volume, old);
    volume.unlink(ROOT, b"old").unwrap();
    let new = volume.create(ROOT, b"new", file).unwrap().ino;
    volume.write(new, 0, &[0x22; 16384]).unwrap();
    let reused = blocks(&volume, new);
    assert_eq!(reused.physical, freed.physical, "the new file took the freed blocks");
    let at = freed.physical as usize * 4096;
    assert_eq!(std::fs::read(&image).unwrap()[at..at + 16384], [0x11; 16384], "before the free commits");
    volume.sync().unwrap();
    assert_eq!(std::fs::read(&image).unwrap()[at..at + 16384], [0x11; 16384], "committed: in the log only");
    volume.checkpoint().unwrap();
    assert_eq!(std::fs::read(&image).unwrap()[at..at + 16384], [0x22; 16384], "after the checkpoint");
}

/// Without any `sync`, an operation's end commits once 1 MiB of metadata
/// is pending, and checkpoints once the log is half full.
#[test]
fn a_megabyte_pending_commits_and_a_half_full_log_checkpoints() {
    if !have_e2fsprogs() {
        return;
    }
    use std::sync::atomic::Ordering::Relaxed;
    let scratch = Scratch::new("logged-thresholds");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "1024", "256M", &["-N", "20000"]);
    // A log of 4 MiB: half of it is a few commits of a megabyte.
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    let counts = |v: &Volume| (v.stats().log_commits.load(Relaxed), v.stats().log_checkpoints.load(Relaxed));
    let before = counts(&volume);
    let (mut first_commit, mut first_checkpoint) = (None, None);
    for i in 0..12_000u32 {
        volume.begin();
        let name = format!("file-{i:06}");
        let ino = volume.create(ROOT, name.as_bytes(), NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
        volume.write(ino, 0, &[1; 200]).unwrap();
        volume.end(true).unwrap();
        let (commits, checkpoints) = counts(&volume);
        if commits > before.0 && first_commit.is_none() {
            first_commit = Some(i);
        }
        if checkpoints > before.1 && first_checkpoint.is_none() {
            first_checkpoint = Some(i);
            break;
        }
    }
    eprintln!("first commit after file {first_commit:?}, first checkpoint after file {first_checkpoint:?}");
    let first_commit = first_commit.expect("1 MiB pending commits before any sync");
    assert!(first_commit > 100, "a commit after only {first_commit} creates: not 1 MiB pending");
    let first_checkpoint = first_checkpoint.expect("a half-full log checkpoints");
    assert!(first_checkpoint > first_commit, "checkpointed before the log held anything");
    assert_eq!(volume.stats().log_write_through.load(Relaxed), 0, "checkpointed at half, not when full");
}

/// Between checkpoints the metadata a volume changed lives in its private
/// map's copied pages; a checkpoint writes them to the file and hands every
/// one back, and so does the checkpoint that follows a replay. The kernel's
/// count of the map's anonymous pages (`/proc/self/smaps`) is the judge.
#[test]
fn a_checkpoint_hands_the_private_copy_back() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-private");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "1024", "32M", &[]);
    if !Path::new("/proc/self/smaps").exists() {
        assert!(std::env::var_os("CI").is_none(), "/proc/self/smaps is required in CI");
        eprintln!("SKIPPED a_checkpoint_hands_the_private_copy_back: no /proc/self/smaps");
        return;
    }
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    let at_open = volume.private_copy_bytes().expect("a private map, and /proc/self/smaps");
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let dir = volume.mkdir(ROOT, b"d", NewInode { mode: 0o040_755, uid: 0, gid: 0 }).unwrap().ino;
    let files: Vec<u32> = (0..300u32)
        .map(|i| {
            let ino = volume.create(dir, format!("f{i}").as_bytes(), file).unwrap().ino;
            volume.write(ino, 0, &[i as u8; 100]).unwrap();
            ino
        })
        .collect();
    volume.sync().unwrap();
    let synced = volume.private_copy_bytes().unwrap();
    eprintln!("private copy: {at_open} bytes at open, {synced} after 300 creates and a sync");
    assert!(synced >= at_open + 16 * 4096, "300 inodes, a directory and their bitmaps: copied pages");
    assert!(synced <= 4 << 20, "{synced} bytes copied: more than 300 creates change");
    volume.checkpoint().unwrap();
    assert_eq!(volume.private_copy_bytes(), Some(0), "the checkpoint handed every copied page back");
    // Inode pages alone (no superblock, no bitmap): handed back too.
    for &ino in &files {
        volume.set_attr(ino, csumfs::SetAttr { mode: Some(0o600), ..csumfs::SetAttr::default() }).unwrap();
    }
    assert!(volume.private_copy_bytes().unwrap() >= 16 * 4096, "300 inodes' pages copied");
    volume.checkpoint().unwrap();
    assert_eq!(volume.private_copy_bytes(), Some(0), "inode pages handed back");
    for i in 0..300u32 {
        volume.unlink(dir, format!("f{i}").as_bytes()).unwrap();
    }
    volume.sync().unwrap();
    assert!(volume.private_copy_bytes().unwrap() >= 16 * 4096);
    drop(volume); // dies with the unlinks committed, not checkpointed
    let (volume, replayed) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    assert!(replayed.commits >= 1);
    assert_eq!(volume.private_copy_bytes(), Some(0), "the replay's pages were handed back after its checkpoint");
    assert!(volume.read_dir(&volume.inode(dir).unwrap()).unwrap().len() == 2, "replayed: the unlinks");
}

/// A `sync` with nothing new (no metadata, no data checksum) writes no
/// commit; `--stats`' bytes per commit are the bytes the commits put in
/// the log file's ring (it starts zeroed and does not wrap here); a normal
/// checkpoint is not a write-through.
#[test]
fn an_idle_sync_commits_nothing_and_commit_bytes_are_the_logs() {
    if !have_e2fsprogs() {
        return;
    }
    use std::sync::atomic::Ordering::Relaxed;
    let scratch = Scratch::new("logged-idle");
    let [image, log, sums] = fresh_image(&scratch, "32M");
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let counts = |v: &Volume| {
        let s = v.stats();
        (s.log_commits.load(Relaxed), s.log_commit_bytes.load(Relaxed), s.log_write_through.load(Relaxed))
    };
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    for i in 0..8u8 {
        let ino = volume.create(ROOT, &[b'f', b'0' + i], file).unwrap().ino;
        volume.write(ino, 0, &[i; 5000]).unwrap();
        volume.sync().unwrap();
        let synced = counts(&volume);
        volume.sync().unwrap();
        assert_eq!(counts(&volume), synced, "sync {i}: a second sync with nothing new committed");
    }
    let (commits, bytes, through) = counts(&volume);
    assert_eq!(commits, 8);
    let ring = std::fs::read(&log).unwrap();
    let end = ring.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
    let ring_offset = csumkit::bytelog::RING_OFFSET;
    eprintln!("8 commits: {bytes} bytes counted; the ring holds bytes up to {end} (ring at {ring_offset})");
    assert!(
        end - ring_offset <= bytes && bytes < end - ring_offset + 64,
        "{bytes} bytes counted for the commits, the ring's bytes end at {end}"
    );
    assert_eq!(through, 0);
    volume.checkpoint().unwrap();
    assert_eq!(counts(&volume).2, 0, "a checkpoint with room in the log is not a write-through");
}

/// A commit larger than even the empty log is not appended to it (it
/// would overwrite itself) nor written through in place (not atomic): the
/// log is formatted afresh at twice its size and the commit logged. A
/// death right after the sync loses nothing — the next open replays the
/// grown log at its own length — and the log is back at its configured
/// length after the checkpoint (its file at the next clean open); e2fsck
/// is the judge. With the growth taken away (a medium that cannot be
/// reopened) the same commit is written through, as before.
#[test]
fn a_commit_larger_than_the_log_grows_the_log_and_is_logged() {
    if !have_e2fsprogs() {
        return;
    }
    use std::sync::atomic::Ordering::Relaxed;
    const LOG: u64 = 64 << 10;
    let scratch = Scratch::new("logged-grow");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "1024", "32M", &[]);
    let (mut volume, _) = Volume::open_logged(&image, &log, LOG, Options::default(), None).unwrap();
    let create_600 = |volume: &mut Volume| {
        let dir = volume.mkdir(ROOT, b"d", NewInode { mode: 0o040_755, uid: 0, gid: 0 }).unwrap().ino;
        for i in 0..600u32 {
            let ino =
                volume.create(dir, format!("file-{i:04}").as_bytes(), NewInode { mode: 0o100_644, uid: 0, gid: 0 });
            volume.write(ino.unwrap().ino, 0, &i.to_le_bytes()).unwrap();
        }
    };
    create_600(&mut volume);
    volume.sync().unwrap();
    let stats = volume.stats();
    let counts = [&stats.log_commits, &stats.log_grows, &stats.log_write_through].map(|c| c.load(Relaxed));
    let grown = std::fs::metadata(&log).unwrap().len();
    eprintln!("600 creates in a {LOG}-byte log: commits, grows, write-throughs {counts:?}; the log file {grown} bytes");
    assert_eq!(counts, [1, 1, 0], "600 creates in a 64 KiB log: one commit in a grown log");
    assert!(grown > LOG, "the log file is {grown} bytes");
    drop(volume); // dies with the commit in the grown log only
    assert!(csumfs::log_pending(&std::fs::read(&image).unwrap()), "the image does not say it needs its log");
    let (mut volume, replayed) = Volume::open_logged(&image, &log, LOG, Options::default(), None).unwrap();
    assert_eq!(replayed.commits, 1, "the grown log's commit");
    let f = volume.resolve("/d/file-0599").unwrap();
    assert_eq!(volume.read_all(&f).unwrap(), 599u32.to_le_bytes());
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "after the grown log's replay");
    let (volume, replayed) = Volume::open_logged(&image, &log, LOG, Options::default(), None).unwrap();
    assert_eq!(replayed.commits, 0);
    assert_eq!(std::fs::metadata(&log).unwrap().len(), LOG, "the log file was not cut back at a clean open");
    drop(volume);

    // A log on a medium that cannot grow: written through.
    let other = scratch.0.join("img2");
    mke2fs_with(&other, "1024", "32M", &[]);
    let bytes = std::fs::read(&other).unwrap();
    let mut volume = Volume::from_bytes(bytes, Options { write: true, ..Options::default() }).unwrap();
    let backing = Box::new(std::fs::OpenOptions::new().read(true).write(true).open(&other).unwrap());
    let medium = Box::new(csumkit::bytelog::SimMedium::new(LOG as usize));
    volume.enable_log(backing, medium, false, None).unwrap();
    create_600(&mut volume);
    volume.sync().unwrap();
    let stats = volume.stats();
    let counts = [&stats.log_commits, &stats.log_grows, &stats.log_write_through].map(|c| c.load(Relaxed));
    assert_eq!(counts, [0, 0, 1], "a log that cannot grow: the commit written through");
    drop(volume);
    assert_clean(&other, "after the write-through");
    let volume = Volume::open(&other, Options::default()).unwrap();
    let f = volume.resolve("/d/file-0599").unwrap();
    assert_eq!(volume.read_all(&f).unwrap(), 599u32.to_le_bytes());
}

/// A commit that does not fit the log's free room, but would fit it
/// empty, first folds the log into the image (from the log's own records)
/// and is then logged — atomic, not written through; a death right after
/// its sync loses nothing, and e2fsck calls the image clean once it is
/// checkpointed. (`power_cut.rs` cuts the power inside folds.)
#[test]
fn a_commit_larger_than_the_logs_free_room_folds_the_log_first() {
    if !have_e2fsprogs() {
        return;
    }
    // Creates per batch: a first commit under half the 64 KiB log (no
    // checkpoint follows it), a second one record over the free room
    // left, which with a wrap's worth of room fits the log empty.
    const FIRST: u32 = 100;
    const SECOND: u32 = 100;
    let scratch = Scratch::new("logged-fold");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "1024", "32M", &[]);
    let (mut volume, _) = Volume::open_logged(&image, &log, 64 << 10, Options::default(), None).unwrap();
    let dir = volume.mkdir(ROOT, b"d", NewInode { mode: 0o040_755, uid: 0, gid: 0 }).unwrap().ino;
    let counts = |v: &Volume| {
        let s = v.stats();
        [&s.log_commit_bytes, &s.log_checkpoints, &s.log_folds, &s.log_write_through].map(Stats::get)
    };
    let create = |volume: &mut Volume, range: std::ops::Range<u32>| {
        for i in range {
            let ino =
                volume.create(dir, format!("file-{i:04}").as_bytes(), NewInode { mode: 0o100_644, uid: 0, gid: 0 });
            volume.write(ino.unwrap().ino, 0, &i.to_le_bytes()).unwrap();
        }
    };
    create(&mut volume, 0..FIRST);
    volume.sync().unwrap();
    let first = counts(&volume);
    create(&mut volume, FIRST..FIRST + SECOND);
    let copied = volume.private_copy_bytes().unwrap();
    volume.sync().unwrap();
    let second = counts(&volume);
    let kept = volume.private_copy_bytes().unwrap();
    eprintln!(
        "commit bytes, checkpoints, folds, write-throughs: {first:?} then {second:?}; \
         {copied} bytes of the image copied before the fold, {kept} after"
    );
    assert_eq!(first[1..], [0, 0, 0], "the first batch fits the log");
    assert_eq!(second[1..], [1, 1, 0], "the second folded the log, then was logged");
    // The first batch's own pages (its inodes') went back to the file; the
    // second's stay copied until a checkpoint writes them.
    assert!(kept < copied, "no page handed back at the fold");
    assert!(kept >= 4 * 4096, "{kept} bytes: the second batch's inode pages were handed back");
    drop(volume); // dies with the second batch in the log only
    let (mut volume, replayed) = Volume::open_logged(&image, &log, 64 << 10, Options::default(), None).unwrap();
    assert_eq!(replayed.commits, 1, "the second batch's commit");
    let last = volume.resolve(&format!("/d/file-{:04}", FIRST + SECOND - 1)).unwrap();
    assert_eq!(volume.read_all(&last).unwrap(), (FIRST + SECOND - 1).to_le_bytes());
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "after the fold, a death and the replay");
}

/// A log whose last commit was cut before its last record holds records
/// that are whole but belong to no commit. Opening drops them (its
/// checkpoint empties the log): left there, the next commit's last record
/// would complete them at the next replay and a torn change would appear.
#[test]
fn records_of_a_cut_commit_never_join_a_later_one() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-cut");
    let (path, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&path, "4096", "16M", &[]);
    let free = 4000 * 4096; // a free data block of this 4 096-block volume
    std::fs::write(&path, pending_image(&path)).unwrap();
    std::fs::write(&log, log_of(&[(csumfs::TAG_PART, entry(free, &[0xEE; 64]))])).unwrap();
    let (mut volume, replayed) = Volume::open_logged(&path, &log, 1 << 20, Options::default(), None).unwrap();
    assert_eq!(replayed.commits, 0, "no commit was whole");
    volume.create(ROOT, b"after", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap();
    volume.sync().unwrap();
    drop(volume); // dies with one whole commit in the log
    let (mut volume, replayed) = Volume::open_logged(&path, &log, 1 << 20, Options::default(), None).unwrap();
    assert_eq!(replayed.commits, 1);
    assert!(volume.resolve("/after").is_ok());
    volume.checkpoint().unwrap();
    drop(volume);
    let at = free as usize;
    assert_eq!(std::fs::read(&path).unwrap()[at..at + 64], [0; 64], "the cut commit's bytes were applied");
    assert_clean(&path, "after both replays");
}

/// Small overwrites go to the log until 64 KiB of them wait for a commit;
/// the ones after that, and any write of a whole page, go straight to the
/// image file (announced first); they all read back.
#[test]
fn logged_data_is_bounded_and_whole_pages_go_in_place() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-bound");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "4096", "64M", &["-N", "2048"]);
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let files = files_of_a_block(&mut volume, 1000);
    let page = volume.create(ROOT, b"page", file).unwrap().ino;
    volume.write(page, 0, &[0x11; 4096]).unwrap();
    volume.checkpoint().unwrap();
    let block_of = |v: &Volume, ino| v.runs(&v.inode(ino).unwrap()).unwrap()[0].physical as usize * 4096;
    for &ino in &files {
        volume.write(ino, 0, &[0x22; 100]).unwrap();
    }
    volume.write(page, 0, &[0x33; 4096]).unwrap();
    let on_disk = std::fs::read(&image).unwrap();
    let in_place = files.iter().filter(|&&ino| on_disk[block_of(&volume, ino)] == 0x22).count();
    let logged = 64 * 1024 / 100;
    assert_eq!(in_place, files.len() - logged, "the first {logged} writes of 100 bytes in the log, the rest in place");
    assert!(files[..logged].iter().all(|&ino| on_disk[block_of(&volume, ino)] == 0x11), "the first ones wait");
    let at = block_of(&volume, page);
    assert_eq!(on_disk[at..at + 4096], [0x33; 4096], "a whole page goes in place");
    for &ino in &files {
        assert_eq!(
            volume.read_all(&volume.inode(ino).unwrap()).unwrap()[..101],
            [[0x22; 100].as_slice(), &[0x11]].concat()
        );
    }
}

/// At 1 KiB blocks a page holds four blocks: data sharing a page with a
/// directory block changed since the checkpoint goes through the log (the
/// private map holds that page's copy), the rest of the same write in
/// place; every byte reads back, before and after the checkpoint.
#[test]
fn a_write_across_changed_and_unchanged_pages_reads_back() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-pages");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "1024", "32M", &[]);
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let dir = volume.mkdir(ROOT, b"d", NewInode { mode: 0o040_755, uid: 0, gid: 0 }).unwrap().ino;
    let f = volume.create(dir, b"f", file).unwrap().ino;
    volume.write(f, 0, &[0x11; 16 * 1024]).unwrap();
    volume.checkpoint().unwrap();
    let dir_block = volume.runs(&volume.inode(dir).unwrap()).unwrap()[0].physical;
    let run = volume.runs(&volume.inode(f).unwrap()).unwrap()[0];
    assert!(run.len == 16 && run.physical / 4 == dir_block / 4, "the file starts on its directory's page: {run:?}");
    volume.create(dir, b"g", file).unwrap(); // the directory's page changes
    let new: Vec<u8> = (0..16 * 1024 + 700).map(|i| (i % 251) as u8).collect();
    volume.write(f, 300, &new).unwrap();
    let want = [&[0x11; 300][..], &new].concat();
    assert_eq!(volume.read_all(&volume.inode(f).unwrap()).unwrap(), want, "before the checkpoint");
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "after the checkpoint");
    let volume = Volume::open(&image, Options::default()).unwrap();
    assert_eq!(volume.read_all(&volume.resolve("/d/f").unwrap()).unwrap(), want, "reopened");
}

/// With room in the log, a checkpoint still comes once 16 Ki pages of the
/// private map differ from the file (64 MiB held in memory): 1-byte
/// overwrites of 20 000 files' blocks, each a page of its own, logged.
#[test]
fn sixteen_thousand_changed_pages_checkpoint() {
    if !have_e2fsprogs() {
        return;
    }
    use std::sync::atomic::Ordering::Relaxed;
    let scratch = Scratch::new("logged-pages-bound");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "4096", "160M", &["-N", "20480"]);
    let (mut volume, _) = Volume::open_logged(&image, &log, 64 << 20, Options::default(), None).unwrap();
    let files = files_of_a_block(&mut volume, 20_000);
    volume.checkpoint().unwrap();
    let checkpoints = |v: &Volume| v.stats().log_checkpoints.load(Relaxed);
    let before = checkpoints(&volume);
    let mut first = None;
    for (i, &ino) in files.iter().enumerate() {
        volume.begin();
        volume.write(ino, 7, &[0x22]).unwrap();
        volume.end(true).unwrap();
        if first.is_none() && checkpoints(&volume) > before {
            first = Some(i);
        }
    }
    let first = first.expect("16 Ki changed pages checkpoint");
    eprintln!("first checkpoint after overwrite {first}");
    // Each overwrite changes its data page and its inode's (16 inodes a page).
    assert!((15_000..16_384).contains(&first), "checkpointed after {first} overwrites");
    assert_eq!(volume.stats().log_write_through.load(Relaxed), 0);
}

/// A whole block overwritten in place (not logged) is announced on the
/// data checksums' intent list before it is written: when the process dies
/// before the next commit, the block holds new bytes the checksum tree has
/// the old checksum of, and the read after the reopen is the new bytes,
/// not `EIO`. So is every block of a 3 MiB overwrite, which spans more
/// than one of the list's 1 MiB regions.
#[test]
fn a_block_overwritten_in_place_before_a_death_reads_back() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-in-place");
    let [image, log, sums] = fresh_image(&scratch, "64M");
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let f = volume.create(ROOT, b"f", file).unwrap().ino;
    volume.write(f, 0, &[0x11; 12_288]).unwrap();
    let g = volume.create(ROOT, b"g", file).unwrap().ino;
    volume.write(g, 0, &vec![0x33; 3 << 20]).unwrap();
    volume.checkpoint().unwrap();
    let physical = volume.runs(&volume.inode(f).unwrap()).unwrap()[0].physical;
    volume.write(f, 4096, &[0x22; 8192]).unwrap(); // two whole pages: in place
    volume.write(g, 0, &vec![0x44; 3 << 20]).unwrap();
    let at = (physical + 1) as usize * 4096;
    assert!(std::fs::read(&image).unwrap()[at..at + 8192] == [0x22; 8192], "written in place");
    drop(volume); // dies before any commit
    let (volume, _) = open_with_sums(&image, &log, &sums);
    let read = volume.read_all(&volume.inode(f).unwrap()).unwrap_or_else(|e| panic!("the announced block: {e}"));
    assert!(read == [&[0x11; 4096][..], &[0x22; 8192]].concat(), "the announced blocks read back");
    let read = volume.read_all(&volume.inode(g).unwrap()).unwrap_or_else(|e| panic!("the announced 3 MiB: {e}"));
    assert!(read == vec![0x44; 3 << 20], "the 3 MiB overwrite reads back");
}

/// A page rewritten in a file and synced waits in the log, not in the
/// image file (one flush for the sync, not the image's and the log's); the
/// process dies before a checkpoint; the reopen replays it into the image.
#[test]
fn a_rewritten_page_waits_in_the_log_and_a_death_loses_nothing() {
    if !have_e2fsprogs() {
        return;
    }
    use std::sync::atomic::Ordering::Relaxed;
    let scratch = Scratch::new("logged-page");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "4096", "64M", &[]);
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    let f = volume.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    volume.write(f, 0, &[0x11; 8192]).unwrap();
    volume.checkpoint().unwrap();
    let physical = volume.runs(&volume.inode(f).unwrap()).unwrap()[0].physical as usize;
    let records = volume.stats().log_records.load(Relaxed);
    let page: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    volume.write(f, 4096, &page).unwrap();
    volume.sync().unwrap();
    assert_eq!(volume.stats().log_records.load(Relaxed), records + 1, "the page and its metadata: one record");
    let at = (physical + 1) * 4096;
    assert!(std::fs::read(&image).unwrap()[at..at + 4096] == [0x11; 4096], "the image file does not have it yet");
    drop(volume); // dies before a checkpoint
    let (volume, replayed) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    assert!(replayed.commits >= 1, "{replayed:?}");
    assert!(volume.read_all(&volume.inode(f).unwrap()).unwrap() == [&[0x11; 4096][..], &page].concat());
    assert!(std::fs::read(&image).unwrap()[at..at + 4096] == page[..], "the replay wrote it to the image");
}

/// `count` new files `f0`, `f1`… in the root, each one block of 0x11.
fn files_of_a_block(volume: &mut Volume, count: u32) -> Vec<u32> {
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    (0..count)
        .map(|i| {
            let ino = volume.create(ROOT, format!("f{i}").as_bytes(), file).unwrap().ino;
            volume.write(ino, 0, &[0x11; 4096]).unwrap();
            ino
        })
        .collect()
}

/// The data checksums' intent list: blocks overwritten in place after a
/// checkpoint are announced (the sidecar lists them); the log commit that
/// carries their new checksums keeps the list, so that rewrites of the same
/// region after it announce nothing (each announcement is a flush) — and
/// after a death there every block reads back. A checkpoint empties the
/// list, and so does a log commit once the list spans more than 256 MiB.
#[test]
fn a_log_commit_keeps_a_short_intent_list_and_a_checkpoint_empties_it() {
    use csumfs::Stats;
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-intent");
    let [image, log, sums] = fresh_image(&scratch, "1G");
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let f = volume.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    volume.write(f, 0, &vec![1u8; 260 << 20]).unwrap();
    volume.checkpoint().unwrap(); // the tree holds f's checksums
    let listed = || {
        let sidecar = std::fs::read(&sums).unwrap();
        let count = u64::from_le_bytes(sidecar[48..56].try_into().unwrap()) as usize;
        let run = |i: usize, at: usize| u64::from_le_bytes(sidecar[64 + 16 * i + at..][..8].try_into().unwrap());
        (0..count).map(|i| (run(i, 0), run(i, 8))).collect::<Vec<_>>()
    };
    let flushes = |v: &Volume| Stats::get(&v.stats().datasum_intent_flushes);
    let before = flushes(&volume);
    volume.write(f, 0, &[2u8; 8192]).unwrap(); // whole pages: in place
    let region = listed();
    assert_eq!((flushes(&volume), region.len()), (before + 1, 1), "announced");
    volume.sync().unwrap(); // the log carries the new checksums
    assert_eq!(listed(), region, "a log commit keeps a short list");
    volume.write(f, 16384, &[3u8; 8192]).unwrap();
    assert_eq!((flushes(&volume), listed()), (before + 1, region.clone()), "the same region: nothing announced");
    volume.checkpoint().unwrap();
    assert_eq!(listed(), [], "a checkpoint empties the list");
    volume.write(f, 0, &[4u8; 8192]).unwrap();
    assert_eq!((flushes(&volume), listed()), (before + 2, region.clone()), "announced again after the checkpoint");
    volume.sync().unwrap();
    volume.write(f, 32768, &[5u8; 8192]).unwrap();
    drop(volume); // dies before the next commit
    let (mut volume, _) = open_with_sums(&image, &log, &sums); // replays, checkpoints
    let mut want = vec![1u8; 260 << 20];
    want[..8192].fill(4);
    want[16384..24576].fill(3);
    want[32768..40960].fill(5);
    assert!(volume.read_all(&volume.inode(f).unwrap()).unwrap() == want, "good data, not EIO");
    assert_eq!(listed(), [], "the checkpoint after the replay empties the list");
    let before = flushes(&volume);
    // 257 regions of 1 MiB, past the bound.
    for mib in 1..257u64 {
        volume.write(f, mib << 20, &[5u8; 8192]).unwrap();
    }
    volume.write(f, 0, &[6u8; 8192]).unwrap();
    let spanned: u64 = listed().iter().map(|&(_, blocks)| blocks).sum();
    assert!(spanned * 4096 > 256 << 20 && flushes(&volume) >= before + 257, "{spanned} blocks listed");
    volume.sync().unwrap();
    assert_eq!(listed(), [], "a log commit empties a list of more than 256 MiB");
    drop(volume);
    let (volume, _) = open_with_sums(&image, &log, &sums);
    want[..8192].fill(6);
    for mib in 1..257usize {
        want[mib << 20..(mib << 20) + 8192].fill(5);
    }
    assert!(volume.read_all(&volume.inode(f).unwrap()).unwrap() == want, "every rewrite reads back verified");
}

/// A commit logs up to 4 064 new data checksums (four log records' worth)
/// and writes the tree to the sidecar instead past that: files of exactly
/// 4 064 and 4 065 blocks, each synced.
#[test]
fn a_commit_logs_up_to_four_records_of_checksums() {
    use csumfs::Stats;
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-sums-bound");
    let [image, log, sums] = fresh_image(&scratch, "64M");
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let stats = |v: &Volume| (Stats::get(&v.stats().datasum_commits), Stats::get(&v.stats().log_datasums));
    for (name, blocks, tree) in [(&b"at"[..], 4064usize, false), (b"past", 4065, true)] {
        let f = volume.create(ROOT, name, NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
        let before = stats(&volume);
        volume.write(f, 0, &vec![5u8; blocks * 4096]).unwrap();
        volume.sync().unwrap();
        let after = stats(&volume);
        let want = if tree { (before.0 + 1, before.1) } else { (before.0, before.1 + blocks as u64) };
        assert_eq!(after, want, "{blocks} new checksums: (tree commits, checksums logged)");
    }
}

/// The first allocation in an uninitialised group builds its block bitmap
/// over bytes nothing reads, over a template spliced into the private map:
/// the file's old bitmap is neither read (not even into the page cache) nor
/// changed before the checkpoint that writes the new one — so the image as
/// a death before then leaves it is still the one e2fsck passes. After the
/// checkpoint the map reads the file again there, and allocations go on
/// from the bitmap the checkpoint wrote (a splice dropped, not mapped back,
/// would read the template's bytes). Stale bytes planted in the old bitmaps
/// show it.
#[test]
fn an_uninitialised_groups_bitmap_is_built_without_reading_the_file() {
    use std::os::fd::AsRawFd;
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-unread-bitmap");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "4096", "1G", &[]); // eight groups of 128 MiB
    let text = common::dumpe2fs(&image);
    // Where groups 1 and 2 keep their block bitmaps (both uninitialised).
    let [at_1, at_2] = ["Group 1:", "Group 2:"].map(|group| {
        let text = text.split(group).nth(1).unwrap();
        assert!(text.lines().next().unwrap().contains("BLOCK_UNINIT"), "{text}");
        let block: u64 =
            text.split("Block bitmap at ").nth(1).unwrap().split([' ', ',']).next().unwrap().parse().unwrap();
        block * 4096
    });
    let file = std::fs::OpenOptions::new().read(true).write(true).open(&image).unwrap();
    // Whether the file's page at `at` is in the page cache (a shared map
    // of it sees the cache; it reads nothing itself).
    let cached = |at: u64| {
        // SAFETY: a read-only shared map of one page of an open file,
        // unmapped below; mincore only reports on it.
        unsafe {
            let page =
                libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, file.as_raw_fd(), at as i64);
            assert_ne!(page, libc::MAP_FAILED);
            let mut resident = 0u8;
            assert_eq!(libc::mincore(page, 4096, &mut resident), 0);
            libc::munmap(page, 4096);
            resident & 1 == 1
        }
    };
    let held = |at: u64| {
        let mut held = vec![0u8; 4096];
        std::os::unix::fs::FileExt::read_exact_at(&file, &mut held, at).unwrap();
        held
    };
    for at in [at_1, at_2] {
        std::os::unix::fs::FileExt::write_all_at(&file, &[0xA5; 4096], at).unwrap();
    }
    assert_clean(&image, "stale bytes in uninitialised bitmaps (unread)");
    file.sync_all().unwrap();
    // Checking every checksum it moves against the bytes (a bitmap read
    // from the template would differ).
    let checked = Options { check_updates: true, ..Options::default() };
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, checked, None).unwrap();
    // Out of the page cache (the open read around its superblock): the
    // bitmaps as a long mount would find them.
    // SAFETY: as above; drops the file's clean pages no map holds.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if cached(at_1) {
        assert!(std::env::var_os("CI").is_none(), "CI's temp dir must let clean pages go (not tmpfs)");
        eprintln!("SKIPPED an_uninitialised_groups_bitmap_is_built_without_reading_the_file: the temp dir keeps its pages cached");
        return;
    }
    let f = volume.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    volume.fallocate(f, 0, 300 << 20, false).unwrap(); // into group 2
    assert!(!cached(at_1) && !cached(at_2), "the old bitmaps were read");
    assert!(held(at_1) == [0xA5; 4096] && held(at_2) == [0xA5; 4096], "the file is changed only by checkpoints");
    let copy = scratch.0.join("copy");
    std::fs::copy(&image, &copy).unwrap();
    assert!(!csumfs::log_pending(&std::fs::read(&copy).unwrap()[..4096]), "nothing committed yet");
    assert_clean(&copy, "the image file as a death before any commit leaves it");
    volume.checkpoint().unwrap();
    assert!(held(at_1) != [0xA5; 4096] && held(at_2) != [0xA5; 4096], "the checkpoint wrote the new bitmaps");
    // Through the map handed back to the file: group 2 has room left.
    let g = volume.create(ROOT, b"g", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    volume.fallocate(g, 0, 64 << 20, false).unwrap();
    volume.sync().unwrap();
    drop(volume); // dies after the commit, before the checkpoint

    let (mut volume, replayed) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    assert!(replayed.commits >= 1);
    volume.checkpoint().unwrap();
    assert_eq!((volume.inode(f).unwrap().size, volume.inode(g).unwrap().size), (300 << 20, 64 << 20));
    drop(volume);
    assert_clean(&image, "replayed and checkpointed");
    let text = common::dumpe2fs(&image);
    for group in ["Group 1:", "Group 2:"] {
        assert!(!text.split(group).nth(1).unwrap().lines().next().unwrap().contains("BLOCK_UNINIT"), "{group}");
    }
}

/// Under a ByteLog too, a block one operation frees and takes again keeps
/// its first owner's bytes for undoing: it is not spliced blank before the
/// undo copy is made (that copy would be zeros, and the failed operation
/// would leave the file reading zeros).
#[test]
fn a_block_freed_and_taken_again_keeps_its_bytes_for_undo_under_a_log() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-retaken");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "4096", "8M", &[]);
    let (mut volume, _) = Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let a = volume.create(ROOT, b"a", file).unwrap().ino;
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 1) as u8).collect();
    volume.write(a, 0, &data).unwrap();
    // Every block left taken, one at a time.
    let fill = volume.create(ROOT, b"fill", file).unwrap().ino;
    fill_until_full(&mut volume, fill, 4096);
    volume.sync().unwrap();
    volume.begin();
    volume.truncate(a, 0).unwrap();
    volume.mkdir(ROOT, b"d", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap(); // a's block, the only one free
    volume.end(false).unwrap();
    assert!(volume.read_all(&volume.inode(a).unwrap()).unwrap() == data, "a's block holds its bytes again");
    volume.sync().unwrap();
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "the undone operation");
}

/// An image file whose every write fails: a recovery that dies at its
/// checkpoint's first write.
struct FailingImage;

impl csumfs::Backing for FailingImage {
    fn write_at(&mut self, _: u64, _: &[u8]) -> std::io::Result<()> {
        Err(std::io::Error::other("planted: the recovery dies here"))
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_handle(&self) -> std::io::Result<csumfs::SyncHandle> {
        Ok(Box::new(|| Ok(())))
    }
}

/// A recovery that dies, and the recovery after it. The first death comes
/// after a commit logged a file's checksums and while two of its blocks
/// were being rewritten in place (so they are on the intent list); the
/// recovery replays the log's checksums — older than those blocks' bytes
/// — forgets the two that no longer match, commits the checksum tree, and
/// dies before its checkpoint has written the image and emptied the log.
/// The next recovery replays the same old checksums again, and the intent
/// list must still name the blocks, or they read back as `EIO`. Planted
/// bug this catches: the recovery's tree commit emptying the intent list
/// (`EIO`; the code as it was).
#[test]
fn a_recovery_that_dies_leaves_the_blocks_it_forgot_announced() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-recovery-dies");
    let [image, log, sums] = fresh_image(&scratch, "64M");
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let f = volume.create(ROOT, b"f", file).unwrap().ino;
    volume.write(f, 0, &[0x11; 12_288]).unwrap();
    volume.sync().unwrap(); // the three blocks' checksums in the log
    volume.write(f, 4096, &[0x22; 8192]).unwrap(); // two whole pages: in place, listed
    drop(volume); // dies before the next commit

    let options = Options { write: true, ..Options::default() };
    let (mut dying, pending) = Volume::from_logged_bytes(std::fs::read(&image).unwrap(), options).unwrap();
    assert!(pending, "the image says its log holds a commit");
    let medium = Box::new(csumkit::bytelog::SimMedium::from_image(std::fs::read(&log).unwrap()));
    let died = dying.enable_log(Box::new(FailingImage), medium, pending, Some(&sums));
    assert!(died.is_err(), "the planted failure stops the recovery");
    drop(dying);

    let (volume, replayed) = open_with_sums(&image, &log, &sums);
    assert!(replayed.commits > 0, "the log was not emptied: replayed again");
    let read = volume.read_all(&volume.inode(f).unwrap()).unwrap_or_else(|e| panic!("after a recovery died: {e}"));
    assert!(read == [&[0x11; 4096][..], &[0x22; 8192]].concat(), "after a recovery died: the bytes written");
}

/// A truncate to a size inside a 64 KiB block zeroes the rest of the block
/// (more than a page: too much to ride the log as a small write does). The
/// zeroed bytes are the file's until the truncate's commit is durable: a
/// death before it must find them as they were, with the file's old size
/// (they went to the image in place at once, and the replayed file had its
/// old size over zeros: `scripts/kill9-data.py`'s reasoning, this test).
#[test]
fn a_truncate_not_yet_committed_leaves_its_last_block_whole_after_a_death() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-truncate-tail");
    let (image, log, sums) = (scratch.0.join("img"), scratch.0.join("img.bytelog"), scratch.0.join("img.csums"));
    mke2fs_with(&image, "65536", "64M", &[]);
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let f = volume.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    let data: Vec<u8> = (0..150_000u32).map(|i| (i % 253) as u8 | 1).collect();
    volume.write(f, 0, &data).unwrap();
    volume.sync().unwrap();
    volume.truncate(f, 70_000).unwrap();
    drop(volume); // dies before the truncate is committed
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let inode = volume.inode(f).unwrap();
    assert_eq!(inode.size, 150_000, "the truncate was not committed");
    assert!(volume.read_all(&inode).unwrap() == data, "the bytes past 70 000 of its second block are as written");
    volume.truncate(f, 70_000).unwrap();
    volume.truncate(f, 131_072).unwrap();
    let mut want = data[..70_000].to_vec();
    want.resize(131_072, 0);
    assert!(volume.read_all(&volume.inode(f).unwrap()).unwrap() == want, "the zeros read back before the commit");
    volume.sync().unwrap();
    drop(volume);
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    assert!(volume.read_all(&volume.inode(f).unwrap()).unwrap() == want, "committed, the truncate zeroed them");
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "the truncates above");
}

/// An append of more than a page into a 64 KiB block goes to the image in
/// place; a death before its commit leaves the old size over the append's
/// bytes in the last block. A truncate up after the replay shows zeros
/// there, not the lost append (bytes past the end are zeroed when the file
/// grows).
#[test]
fn a_lost_appends_bytes_past_the_end_read_as_zeros_once_the_file_grows() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-lost-append");
    let (image, log, sums) = (scratch.0.join("img"), scratch.0.join("img.bytelog"), scratch.0.join("img.csums"));
    mke2fs_with(&image, "65536", "64M", &[]);
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let f = volume.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    volume.write(f, 0, &[0xAB; 1500]).unwrap();
    volume.sync().unwrap();
    volume.write(f, 1500, &[0xCC; 100_000]).unwrap();
    drop(volume); // dies before the append is committed
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    assert_eq!(volume.inode(f).unwrap().size, 1500, "the append was not committed");
    volume.truncate(f, 70_000).unwrap();
    let read = volume.read_all(&volume.inode(f).unwrap()).unwrap();
    assert!(read[..1500].iter().all(|&b| b == 0xAB));
    assert!(read[1500..].iter().all(|&b| b == 0), "past the old end: {:?}", &read[1500..1510]);
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "the append and the truncate");
}

/// `chattr +j` (data journaling) on an image with a journal: stored, as
/// ext4 stores it (and not without one: attr.rs), and taken by new files
/// of a directory that has it. Such a file's writes go through the ByteLog
/// whatever their size, where a file without it takes a large write in
/// place at once: the image holds the file's old bytes until the
/// checkpoint, a death after a sync leaves the synced bytes (replayed) and
/// drops an unsynced write whole. e2fsck passes the image, and the
/// kernel's ext4 reads the bytes and shows the flag.
#[test]
fn a_file_with_data_journaling_is_written_through_the_log() {
    const JOURNAL_DATA: u32 = 0x4000;
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-journal-data");
    let [image, log, sums] = [scratch.0.join("img"), scratch.0.join("img.bytelog"), scratch.0.join("img.csums")];
    mke2fs_with(&image, "4096", "64M", &["-O", "has_journal"]);
    assert!(common::dumpe2fs(&image).contains("has_journal"), "an image with a journal");
    let (mut volume, _) = open_with_sums(&image, &log, &sums);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let [plain, journaled] = [&b"plain"[..], b"journaled"].map(|name| volume.create(ROOT, name, file).unwrap().ino);
    for ino in [plain, journaled] {
        volume.write(ino, 0, &vec![1u8; 1 << 20]).unwrap();
    }
    volume.checkpoint().unwrap();
    let flags = volume.inode(journaled).unwrap().flags;
    assert_eq!(volume.set_flags(journaled, flags | JOURNAL_DATA).unwrap().flags, flags | JOURNAL_DATA);
    let d = volume.mkdir(ROOT, b"d", NewInode { mode: 0o040_755, uid: 0, gid: 0 }).unwrap().ino;
    let d_flags = volume.inode(d).unwrap().flags;
    assert_eq!(volume.set_flags(d, d_flags | JOURNAL_DATA).unwrap().flags, d_flags | JOURNAL_DATA);
    let inherits = volume.create(d, b"new", file).unwrap();
    assert_ne!(inherits.flags & JOURNAL_DATA, 0, "a new file takes +j from its directory");
    // The file's bytes as the image file holds them.
    let on_image = |volume: &Volume, ino: u32| {
        let bytes = std::fs::read(&image).unwrap();
        let run = volume.runs(&volume.inode(ino).unwrap()).unwrap()[0];
        assert!(run.len >= 256, "one run of 1 MiB");
        bytes[(run.physical * 4096) as usize..][..1 << 20].to_vec()
    };
    for ino in [plain, journaled] {
        volume.write(ino, 0, &vec![2u8; 1 << 20]).unwrap();
    }
    volume.sync().unwrap();
    assert!(on_image(&volume, plain) == vec![2u8; 1 << 20], "a plain file's large write goes in place");
    assert!(on_image(&volume, journaled) == vec![1u8; 1 << 20], "+j: the image keeps the old bytes");
    volume.write(journaled, 4096, &vec![3u8; 256 << 10]).unwrap(); // not synced
    assert!(on_image(&volume, journaled) == vec![1u8; 1 << 20], "+j: the image keeps the old bytes");
    drop(volume); // dies
    let (mut volume, _) = open_with_sums(&image, &log, &sums); // replays, checkpoints
    let inode = volume.inode(journaled).unwrap();
    assert_ne!(inode.flags & JOURNAL_DATA, 0);
    assert!(volume.read_all(&inode).unwrap() == vec![2u8; 1 << 20], "the synced write whole, the unsynced one gone");
    assert!(on_image(&volume, journaled) == vec![2u8; 1 << 20], "the checkpoint wrote it in place");
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "after data journaling");
    let mnt = scratch.0.join("kernel");
    common::with_kernel_mount(&image, &mnt, || {
        assert!(std::fs::read(mnt.join("journaled")).unwrap() == vec![2u8; 1 << 20], "the kernel reads the bytes");
        let lsattr = std::process::Command::new("lsattr")
            .arg("-d")
            .arg(mnt.join("journaled"))
            .arg(mnt.join("d/new"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&lsattr.stdout);
        assert_eq!(text.lines().filter(|l| l.split(' ').next().unwrap().contains('j')).count(), 2, "{text}");
    });
}

/// One writer per image (`image_lock.rs`): while a volume has the image
/// open for writing, a second writer and a reader are refused with `EBUSY`
/// (after waiting a little for it to let go); readers share the image, and
/// a writer is refused while they have it; once they are gone it opens.
#[test]
fn an_image_open_for_writing_is_refused_to_anyone_else() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged-lock");
    let [image, log, sums] = fresh_image(&scratch, "16M");
    let in_use = |opened: Result<Volume, csumfs::Error>| match opened {
        Err(e @ csumfs::Error::InUse(_)) => e.errno() == 16, // EBUSY
        Err(e) => panic!("{e}"),
        Ok(_) => false,
    };
    let write = Options { write: true, ..Options::default() };
    let (mut writer, _) = open_with_sums(&image, &log, &sums);
    assert!(in_use(Volume::open_logged(&image, &log, 4 << 20, Options::default(), None).map(|(v, _)| v)));
    assert!(in_use(Volume::open(&image, Options::default())), "a reader, while it is written");
    writer.checkpoint().unwrap();
    drop(writer);
    let readers =
        [Volume::open(&image, Options::default()).unwrap(), Volume::open(&image, Options::default()).unwrap()];
    assert!(in_use(Volume::open(&image, write)), "a writer, while it is read");
    drop(readers);
    Volume::open(&image, write).unwrap();
}

/// A volume a mount serves ([`Volume::mark_log_in_use`]) keeps its image
/// marked from before its first commit to its final checkpoint — also
/// across the log's growth and shrink back, which clear the mark for a
/// moment — so e2fsck refuses it throughout; a death before any commit
/// leaves it marked (the next open replays an empty log and the
/// checkpoint clears it). A volume opened without it (a one-shot `csumkit
/// ext4` command) marks nothing before its first commit; a commit made
/// after a checkpoint replays in memory to a superblock sealed without the
/// mark. e2fsck judges.
#[test]
fn a_mounted_volume_keeps_its_image_marked_until_its_final_checkpoint() {
    if !have_e2fsprogs() {
        return;
    }
    const LOG: u64 = 64 << 10;
    let scratch = Scratch::new("logged-held");
    let (image, log) = (scratch.0.join("img"), scratch.0.join("img.bytelog"));
    mke2fs_with(&image, "1024", "32M", &[]);
    let pending = || csumfs::log_pending(&std::fs::read(&image).unwrap()[..2048]);
    let refused = |step: &str| {
        let report = common::e2fsck_clean(&image).expect_err(step);
        assert!(report.contains("unsupported feature"), "{step}: {report}");
    };
    let (volume, _) = Volume::open_logged(&image, &log, LOG, Options::default(), None).unwrap();
    assert!(!pending(), "opened, not mounted: nothing committed, nothing marked");
    drop(volume);
    assert_clean(&image, "an open without commits");

    let (mut volume, _) = Volume::open_logged(&image, &log, LOG, Options::default(), None).unwrap();
    volume.mark_log_in_use().unwrap();
    assert!(pending(), "marked before the first commit");
    refused("a mount before its first commit");
    drop(volume); // dies before any commit
    refused("a mount that died before its first commit");
    let (mut volume, replayed) = Volume::open_logged(&image, &log, LOG, Options::default(), None).unwrap();
    assert_eq!(replayed.commits, 0);
    volume.checkpoint().unwrap();
    drop(volume);
    assert_clean(&image, "the empty log's checkpoint");

    use std::sync::atomic::Ordering::Relaxed;
    let (mut volume, _) = Volume::open_logged(&image, &log, LOG, Options::default(), None).unwrap();
    volume.mark_log_in_use().unwrap();
    let dir = volume.mkdir(ROOT, b"d", NewInode { mode: 0o040_755, uid: 0, gid: 0 }).unwrap().ino;
    for i in 0..600u32 {
        let ino = volume.create(dir, format!("file-{i:04}").as_bytes(), NewInode { mode: 0o100_644, uid: 0, gid: 0 });
        volume.write(ino.unwrap().ino, 0, &i.to_le_bytes()).unwrap();
    }
    volume.sync().unwrap();
    assert_eq!(volume.stats().log_grows.load(Relaxed), 1, "600 creates in a 64 KiB log grow it");
    let checkpoints = volume.stats().log_checkpoints.load(Relaxed);
    // The next operation's end (a mount's, `Volume::end`) checkpoints the
    // grown log and shrinks it.
    volume.begin();
    volume.create(ROOT, b"after", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap();
    volume.end(true).unwrap();
    assert!(volume.stats().log_checkpoints.load(Relaxed) > checkpoints, "the grown log was checkpointed");
    assert!(pending(), "marked again as soon as the shrunk log is formatted, before any commit");
    refused("a mount whose log shrank back");
    // A commit after that checkpoint: the superblock it carries is the
    // map's, which shows the file's again (marked). Replayed in memory (as
    // `csumkit ext4 check` judges a stopped mount's image), the superblock
    // is sealed without the mark.
    volume.begin();
    volume.create(ROOT, b"after-2", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap();
    volume.end(true).unwrap();
    volume.sync().unwrap();
    let (replayed, _) = Volume::replayed_image(std::fs::read(&image).unwrap(), std::fs::read(&log).unwrap()).unwrap();
    let sb = &replayed[1024..2048];
    let stored = u32::from_le_bytes(sb[0x3FC..].try_into().unwrap());
    assert_eq!(stored, csumkit::crc32c::raw_update(!0, &sb[..0x3FC]), "the replayed superblock's checksum");
    assert!(!csumfs::log_pending(&replayed), "the replayed image is not marked");
    volume.checkpoint().unwrap();
    assert!(!pending(), "the final checkpoint clears the mark");
    drop(volume);
    assert_clean(&image, "the final checkpoint");
}

//! Images the kernel left with committed transactions in its journal
//! (csumkit's `tests/data/jbd2`, made by `scripts/journal-corpus.sh`, each
//! with the kernel's view of its tree after its own recovery), recovered
//! by csumfs and judged by the kernel and e2fsck:
//! - a read-only open replays over a private copy: the tree is the
//!   kernel's, and the image file keeps every byte;
//! - a writable open (and `csumfs::recover`) replays in place: e2fsck -fn
//!   finds it clean, every block but a few named superblock fields equals
//!   e2fsck's own `-fy -E journal_only` recovery, and the kernel mounts it
//!   without replaying anything (the image unchanged by its mount, the
//!   tree the same).

mod common;

use common::Scratch;
use csumfs::{Options, Volume};
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/jbd2")
}

/// (name, -O features) of each image in the corpus.
fn layouts() -> Vec<(String, String)> {
    let verdicts = std::fs::read_to_string(corpus().join("VERDICTS")).unwrap();
    let layouts: Vec<(String, String)> = verdicts
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let fields: Vec<&str> = l.split('\t').collect();
            (fields[0].to_string(), fields[2].to_string())
        })
        .collect();
    assert!(layouts.len() >= 12, "the corpus lost layouts: {layouts:?}");
    layouts
}

/// The layouts csumfs reads (metadata_csum), and whether they have fast commits.
fn csumfs_layouts() -> Vec<(String, bool)> {
    layouts()
        .into_iter()
        .filter(|(_, features)| !features.contains("^metadata_csum"))
        .map(|(name, features)| (name, features.contains("fast_commit")))
        .collect()
}

fn unpack(name: &str, scratch: &Scratch, tag: &str) -> PathBuf {
    let out = Command::new("gzip").arg("-dc").arg(corpus().join(format!("{name}.img.gz"))).output().unwrap();
    assert!(out.status.success(), "gzip -dc {name}");
    let path = scratch.0.join(format!("{name}.{tag}.img"));
    std::fs::write(&path, out.stdout).unwrap();
    path
}

/// Where Linux 6.18's fast-commit replay leaves link counts e2fsck calls
/// wrong — a directory created in a fast commit keeps one link, its
/// parent's count is unchanged ("Inode 18 ref count is 1, should be 2",
/// "Inode 12 ref count is 2, should be 3") — and csumfs sets the counts
/// e2fsck would: (layout, path, the kernel's count, csumfs's).
const KERNEL_FAST_COMMIT_LINKS: [(&str, &str, u64, u64); 4] = [
    ("fastcommit-noflush-4k", "/d", 2, 3),
    ("fastcommit-noflush-4k", "/d/sub", 1, 2),
    ("fastcommit-noflush-1k", "/d", 2, 3),
    ("fastcommit-noflush-1k", "/d/sub", 1, 2),
];

/// The kernel's view of layout `name` after its own recovery, its link
/// counts of [`KERNEL_FAST_COMMIT_LINKS`] checked and replaced by the
/// right ones.
fn kernel_view(name: &str) -> Vec<serde_json::Value> {
    let mut view = common::view::load(&corpus().join(format!("{name}.view.json.gz")));
    for (layout, path, kernel, right) in KERNEL_FAST_COMMIT_LINKS {
        if layout != name {
            continue;
        }
        let entry = view.iter_mut().find(|e| e["path"] == path).unwrap_or_else(|| panic!("{name}: no {path}"));
        assert_eq!(entry["nlink"], kernel, "{name} {path}: the kernel's link count is no longer the one listed");
        entry["nlink"] = right.into();
    }
    view
}

#[test]
fn a_read_only_open_shows_the_tree_the_kernel_shows_after_its_own_recovery() {
    let scratch = Scratch::new("journal-replay-ro");
    for (name, _) in csumfs_layouts() {
        let path = unpack(&name, &scratch, "ro");
        let before = std::fs::read(&path).unwrap();
        let v = Volume::open(&path, Options::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let replayed = v.journal_replayed().expect("replayed");
        assert!(replayed.transactions >= 1 && replayed.blocks > 0 && !replayed.in_place, "{name}: {replayed:?}");
        assert_eq!(replayed.fast_commit_records > 0, name.starts_with("fastcommit-noflush"), "{name}: {replayed:?}");
        common::view::assert_as_the_kernel_shows(&v, &kernel_view(&name), &name);
        drop(v);
        assert!(std::fs::read(&path).unwrap() == before, "{name}: the image file changed");
    }
}

/// The superblock fields e2fsck -fy -E journal_only writes and csumfs's
/// recovery does not: e2fsck's full check (-f) resets the mount count and
/// stamps the check time, and every e2fsprogs close stamps the write time
/// and adds what it wrote to the lifetime count.
const E2FSCK_BOOKKEEPING: [(usize, usize, &str); 5] = [
    (0x30, 4, "s_wtime"),
    (0x34, 2, "s_mnt_count"),
    (0x40, 4, "s_lastcheck"),
    (0x178, 8, "s_kbytes_written"),
    (0x3FC, 4, "s_checksum"),
];

/// The group descriptor fields e2fsprogs rewrites whenever it writes the
/// descriptors (`ext2fs_set_gdt_csum`): the unused-inode count recomputed
/// from the inode bitmap, where the kernel keeps the highest inode the
/// group ever used; and the descriptor's checksum over it.
const E2FSCK_DESCRIPTOR_BOOKKEEPING: [(usize, usize, &str); 3] =
    [(0x1C, 2, "bg_itable_unused_lo"), (0x1E, 2, "bg_checksum"), (0x32, 2, "bg_itable_unused_hi")];

fn field_at(fields: &[(usize, usize, &'static str)], offset: usize) -> Option<&'static str> {
    fields.iter().find(|(at, len, _)| (*at..at + len).contains(&offset)).map(|f| f.2)
}

/// Every byte where `ours` and `e2fsck`'s recovery differ, named: a field
/// of [`E2FSCK_BOOKKEEPING`] or [`E2FSCK_DESCRIPTOR_BOOKKEEPING`], or a
/// panic.
fn assert_same_as_e2fsck(name: &str, ours: &[u8], e2fsck: &[u8]) {
    assert_eq!(ours.len(), e2fsck.len());
    let layout = csumkit::ext4::Layout::parse(ours).unwrap();
    let descriptor = |at: usize| {
        let d = layout.desc_offsets.iter().find(|&&d| (d..d + layout.desc_size).contains(&(at as u64)))?;
        field_at(&E2FSCK_DESCRIPTOR_BOOKKEEPING, at - *d as usize)
    };
    for (at, (a, b)) in ours.iter().zip(e2fsck).enumerate() {
        if a == b {
            continue;
        }
        let field = (1024..2048).contains(&at).then(|| field_at(&E2FSCK_BOOKKEEPING, at - 1024)).flatten();
        let field = field.or_else(|| descriptor(at));
        assert!(
            field.is_some(),
            "{name}: byte {at} (block {} of 1 KiB, offset {}) differs from e2fsck's recovery: {a:#04x} vs {b:#04x}",
            at / 1024,
            at % 1024
        );
    }
}

#[test]
fn recovery_in_place_is_e2fscks_and_the_kernel_mounts_it_without_replaying() {
    let Some(e2fsck) = common::tool("e2fsck") else { return };
    let scratch = Scratch::new("journal-replay-rw");
    for (name, fast_commit) in csumfs_layouts() {
        let ours = unpack(&name, &scratch, "csumfs");
        let replayed = csumfs::recover(&ours).unwrap_or_else(|e| panic!("{name}: {e}")).expect("needs recovery");
        assert!(replayed.in_place && replayed.blocks > 0, "{name}: {replayed:?}");
        assert_eq!(csumfs::recover(&ours).unwrap(), None, "{name}: recovered twice");
        common::assert_clean(&ours, &format!("{name}: csumfs's recovery"));

        // e2fsck 1.47.0 cannot recover fast-commit journals ("Invalid
        // argument while recovering", VERDICTS): the kernel judges those.
        if !fast_commit {
            let theirs = unpack(&name, &scratch, "e2fsck");
            let out = Command::new(&e2fsck).args(["-fy", "-E", "journal_only"]).arg(&theirs).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.code().is_some_and(|c| c <= 1), "{name}: e2fsck: {text}");
            assert_same_as_e2fsck(&name, &std::fs::read(&ours).unwrap(), &std::fs::read(&theirs).unwrap());
        }

        let view = kernel_view(&name);
        let v = Volume::open(&ours, Options::default()).unwrap();
        assert_eq!(v.journal_replayed(), None, "{name}: nothing left to replay");
        common::view::assert_as_the_kernel_shows(&v, &view, &name);
        drop(v);

        let before = std::fs::read(&ours).unwrap();
        let mnt = scratch.0.join(format!("{name}.mnt"));
        // (A visible skip without root; CI runs as root.)
        common::with_kernel_mount(&ours, &mnt, || {
            let out = Command::new("python3")
                .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kernel-view.py"))
                .arg(&mnt)
                .output()
                .unwrap();
            assert!(out.status.success(), "kernel-view.py: {}", String::from_utf8_lossy(&out.stderr));
            let seen: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(seen.as_array().unwrap(), &view, "{name}: the kernel's view of csumfs's recovery");
        });
        assert!(std::fs::read(&ours).unwrap() == before, "{name}: the kernel's mount replayed or wrote something");
    }
}

#[test]
fn a_writable_open_recovers_the_journal_into_the_image_first() {
    let scratch = Scratch::new("journal-replay-open");
    let path = unpack("v3-4k", &scratch, "open");
    let v = Volume::open(&path, Options { write: true, ..Options::default() }).unwrap();
    let replayed = v.journal_replayed().expect("replayed");
    assert!(replayed.in_place && replayed.transactions >= 2, "{replayed:?}");
    assert!(v.resolve("/late").is_ok());
    drop(v);
    let v = Volume::open(&path, Options::default()).unwrap();
    assert_eq!(v.journal_replayed(), None, "the image no longer needs recovery");
}

/// (journal block, block type, transaction) of each log block from the
/// log's start: descriptor, commit and revoke blocks, as a `csum_v3` log
/// lays them out (16-byte tags; 16 bytes of UUID after a tag without
/// `SAME_UUID`).
fn log_blocks(image: &[u8], journal: &csumkit::ext4::jbd2::Journal) -> Vec<(u32, u32, u32)> {
    let sb = &journal.superblock;
    let bs = sb.block_size as usize;
    let read = |i: u32| &image[journal.blocks[i as usize] as usize * bs..][..bs];
    let be32 = |b: &[u8], at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
    let (mut at, mut id, mut out) = (sb.start, sb.sequence, Vec::new());
    for _ in 0..sb.max_len {
        let block = read(at);
        if be32(block, 0) != csumkit::ext4::jbd2::MAGIC || be32(block, 8) != id {
            break;
        }
        let kind = be32(block, 4);
        out.push((at, kind, id));
        let mut next = at + 1;
        if kind == csumkit::ext4::jbd2::DESCRIPTOR_BLOCK {
            let mut tag = 12;
            while tag + 16 <= bs - 4 {
                let flags = be32(block, tag + 4);
                next += 1;
                tag += 16 + if flags & 2 == 0 { 16 } else { 0 };
                if flags & 8 != 0 {
                    break;
                }
            }
        }
        if kind == csumkit::ext4::jbd2::COMMIT_BLOCK {
            id += 1;
        }
        at = if next >= sb.last() { next - sb.last() + sb.first } else { next };
    }
    out
}

/// The image as the kernel's own recovery of `image` (written in place)
/// leaves it; `Some(None)` when its mount refused the journal; `None` when
/// this machine cannot loop-mount (not root; a failure in CI).
fn kernel_recovery(image: &Path, mnt: &Path) -> Option<Option<Vec<u8>>> {
    let copy = image;
    let out = Command::new("losetup").args(["-f", "--show"]).arg(copy).output().ok()?;
    if !out.status.success() {
        assert!(std::env::var_os("CI").is_none(), "CI runs as root: losetup: {out:?}");
        use std::io::Write;
        let _ = writeln!(std::io::stderr(), "SKIPPED the kernel's recovery of damaged logs: losetup refused");
        return None;
    }
    let device = String::from_utf8(out.stdout).unwrap().trim().to_string();
    std::fs::create_dir_all(mnt).unwrap();
    let mounted = Command::new("mount").args(["-t", "ext4", "-o", "ro", &device]).arg(mnt).output().unwrap();
    if mounted.status.success() {
        common::kernel_umount(mnt);
    }
    assert!(Command::new("losetup").args(["-d", &device]).status().unwrap().success());
    let bytes = std::fs::read(copy).unwrap();
    Some(mounted.status.success().then_some(bytes))
}

/// Each checksum, tag and block-number mutation of a kernel-made log:
/// csumfs's recovery in place refuses what the kernel's mount refuses —
/// writing nothing — and otherwise changes only blocks the undamaged log
/// replays (and the two superblocks), exactly as the kernel's recovery
/// of the same damaged image changes them.
#[test]
fn a_damaged_log_stops_where_the_kernels_recovery_stops() {
    use csumkit::ext4::jbd2::{Journal, COMMIT_BLOCK, DESCRIPTOR_BLOCK};
    let scratch = Scratch::new("journal-mutations");
    let name = "v3-2k";
    let pristine = std::fs::read(unpack(name, &scratch, "pristine")).unwrap();
    let layout = csumkit::ext4::Layout::parse(&pristine).unwrap();
    let bs = layout.block_size as usize;
    let journal = Journal::open(&pristine, &layout).unwrap().unwrap();
    let recovery = journal.recover(&pristine, layout.blocks_count).unwrap();
    let log = log_blocks(&pristine, &journal);
    let image_at = |jblock: u32| journal.blocks[jblock as usize] as usize * bs;
    let descriptors: Vec<_> = log.iter().filter(|b| b.1 == DESCRIPTOR_BLOCK).collect();
    let commits: Vec<_> = log.iter().filter(|b| b.1 == COMMIT_BLOCK).collect();
    assert!(commits.len() >= 3, "{name}: {log:?}");
    let first_copy = recovery.blocks.values().map(|r| r.journal_block).min().unwrap();
    let fs_blocks = layout.blocks_count as u32;
    let journal_block = journal.blocks[5] as u32;
    let first_tag = image_at(descriptors[0].0) + 12;
    // (what, byte offset in the image, the bytes written there)
    let flip = |at: usize| vec![pristine[at] ^ 0xFF];
    let mutations: Vec<(&str, usize, Vec<u8>)> = vec![
        (
            "the last commit's checksum",
            image_at(commits.last().unwrap().0) + 0x10,
            flip(image_at(commits.last().unwrap().0) + 0x10),
        ),
        ("the first commit's checksum", image_at(commits[0].0) + 0x10, flip(image_at(commits[0].0) + 0x10)),
        ("the first descriptor's tail", image_at(descriptors[0].0) + bs - 1, flip(image_at(descriptors[0].0) + bs - 1)),
        ("a logged copy's bytes", image_at(first_copy) + 100, flip(image_at(first_copy) + 100)),
        ("a tag's block number, past the filesystem", first_tag, fs_blocks.to_be_bytes().to_vec()),
        ("a tag's block number, a journal block", first_tag, journal_block.to_be_bytes().to_vec()),
        // Never written (a power cut before it): the log ends before the last transaction.
        ("the last commit block, zeroed", image_at(commits.last().unwrap().0), vec![0; bs]),
    ];
    let targets: std::collections::BTreeSet<u64> = recovery.blocks.keys().copied().collect();
    let (mut refused, mut recovered) = (Vec::new(), Vec::new());
    for (what, at, bytes) in mutations {
        let path = scratch.0.join("mutated.img");
        let mut damaged = pristine.clone();
        damaged[at..at + bytes.len()].copy_from_slice(&bytes);
        std::fs::write(&path, &damaged).unwrap();
        let kernel_copy = scratch.0.join("mutated-kernel.img");
        std::fs::write(&kernel_copy, &damaged).unwrap();
        let ours = csumfs::recover(&path);
        let after = std::fs::read(&path).unwrap();
        match &ours {
            Err(e) => assert!(after == damaged, "{what}: refused ({e}), yet the image changed"),
            Ok(_) => {
                for block in 0..layout.blocks_count {
                    let range = block as usize * bs..(block as usize + 1) * bs;
                    let allowed = targets.contains(&block) || block == 1024 / bs as u64 || block == journal.blocks[0];
                    assert!(allowed || after[range.clone()] == damaged[range], "{what}: block {block} written");
                }
            }
        }
        match kernel_recovery(&kernel_copy, &scratch.0.join("mnt")) {
            None => continue,
            Some(None) => {
                refused.push(what);
                assert!(ours.is_err(), "{what}: the kernel refuses the journal; csumfs recovered it");
            }
            Some(Some(kernel)) => {
                recovered.push(what);
                assert!(ours.is_ok(), "{what}: the kernel recovers it; csumfs refused: {}", ours.unwrap_err());
                for block in 0..layout.blocks_count as usize {
                    if block == 1024 / bs || block as u64 == journal.blocks[0] {
                        continue;
                    }
                    let range = block * bs..(block + 1) * bs;
                    assert!(after[range.clone()] == kernel[range], "{what}: block {block} differs from the kernel's");
                }
            }
        }
    }
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{name}: the kernel refused {refused:?}, recovered {recovered:?}");
    if !refused.is_empty() || !recovered.is_empty() {
        assert!(!refused.is_empty() && !recovered.is_empty(), "every mutation judged alike: {refused:?} {recovered:?}");
    }
}

/// Hostile fast commits: records of every kind with random inodes, blocks
/// and names, written as the kernel would (a HEAD of the expected
/// transaction, tails whose CRC32C match) over a kernel-made fast-commit
/// area: opening the image replays them or fails with a typed error, and
/// what opens can be walked — never a panic. (The `csumfs_fast_commit_replay`
/// fuzz target does the same from raw bytes.)
#[test]
fn hostile_fast_commit_records_replay_or_fail_without_a_panic() {
    use csumkit::ext4::jbd2::fast_commit::{
        TAG_ADD_RANGE, TAG_CREAT, TAG_DEL_RANGE, TAG_INODE, TAG_LINK, TAG_TAIL, TAG_UNLINK,
    };
    use csumkit::ext4::jbd2::Journal;
    let scratch = Scratch::new("journal-fc-hostile");
    let name = "fastcommit-noflush-1k";
    let pristine = std::fs::read(unpack(name, &scratch, "base")).unwrap();
    let layout = csumkit::ext4::Layout::parse(&pristine).unwrap();
    let journal = Journal::open(&pristine, &layout).unwrap().unwrap();
    let tid = journal.recover(&pristine, layout.blocks_count).unwrap().end_transaction;
    let bs = layout.block_size as usize;
    let area = journal.blocks[(journal.superblock.last() + 1) as usize] as usize * bs;
    // CSUMFS_FC_ROUNDS and CSUMFS_FC_SEED run a longer or another search.
    let seed = std::env::var("CSUMFS_FC_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x2545_F491_4F6C_DD1Du64);
    let mut state = seed | 1;
    let mut random = move |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below.max(1)
    };
    let (mut opened, mut refused) = (0, 0);
    let rounds: usize = std::env::var("CSUMFS_FC_ROUNDS").ok().and_then(|r| r.parse().ok()).unwrap_or(150);
    for _ in 0..rounds {
        let mut block = vec![0u8; bs];
        block[..4].copy_from_slice(&[9, 0, 8, 0]);
        block[8..12].copy_from_slice(&tid.to_le_bytes());
        let mut at = 12;
        let mut crc = csumkit::crc32c::raw_update(0, &block[..12]);
        for _ in 0..1 + random(6) {
            let ino = 1 + random(40) as u32;
            let value: Vec<u8> =
                match [TAG_ADD_RANGE, TAG_DEL_RANGE, TAG_CREAT, TAG_LINK, TAG_UNLINK, TAG_INODE][random(6) as usize] {
                    TAG_ADD_RANGE => {
                        let mut v = ino.to_le_bytes().to_vec();
                        v.extend((random(64) as u32).to_le_bytes());
                        v.extend((1 + random(40) as u16 + if random(2) == 0 { 32768 } else { 0 }).to_le_bytes());
                        v.extend(0u16.to_le_bytes());
                        v.extend((random(layout.blocks_count + 16) as u32).to_le_bytes());
                        [TAG_ADD_RANGE.to_le_bytes().to_vec(), (v.len() as u16).to_le_bytes().to_vec(), v].concat()
                    }
                    TAG_DEL_RANGE => {
                        let mut v = ino.to_le_bytes().to_vec();
                        v.extend((random(64) as u32).to_le_bytes());
                        v.extend((random(1 << 31) as u32).to_le_bytes());
                        [TAG_DEL_RANGE.to_le_bytes().to_vec(), 12u16.to_le_bytes().to_vec(), v].concat()
                    }
                    TAG_INODE => {
                        let mut v = ino.to_le_bytes().to_vec();
                        let mut raw: Vec<u8> = (0..160).map(|_| random(256) as u8).collect();
                        raw[0x80..0x82].copy_from_slice(&32u16.to_le_bytes()); // i_extra_isize
                        v.extend(raw);
                        [TAG_INODE.to_le_bytes().to_vec(), (v.len() as u16).to_le_bytes().to_vec(), v].concat()
                    }
                    tag => {
                        let mut v = (1 + random(40) as u32).to_le_bytes().to_vec();
                        v.extend(ino.to_le_bytes());
                        v.extend((0..1 + random(20)).map(|_| b'a' + random(26) as u8));
                        [tag.to_le_bytes().to_vec(), (v.len() as u16).to_le_bytes().to_vec(), v].concat()
                    }
                };
            if at + value.len() + 12 > bs {
                break;
            }
            block[at..at + value.len()].copy_from_slice(&value);
            crc = csumkit::crc32c::raw_update(crc, &value);
            at += value.len();
        }
        let mut tail = [TAG_TAIL.to_le_bytes(), 8u16.to_le_bytes()].concat();
        tail.extend(tid.to_le_bytes());
        crc = csumkit::crc32c::raw_update(crc, &tail);
        tail.extend(crc.to_le_bytes());
        block[at..at + 12].copy_from_slice(&tail);
        let mut image = pristine.clone();
        image[area..area + bs].copy_from_slice(&block);
        match Volume::from_bytes(image, Options::default()) {
            Ok(v) => {
                opened += 1;
                assert!(v.journal_replayed().is_some_and(|r| r.fast_commit_records > 0));
                if let Ok(root) = v.resolve("/") {
                    for entry in v.read_dir(&root).unwrap_or_default() {
                        let _ = v.inode(entry.ino).map(|inode| v.read_all(&inode));
                    }
                }
            }
            Err(_) => refused += 1,
        }
    }
    assert!(opened > 0 && refused > 0, "{opened} opened, {refused} refused");
}

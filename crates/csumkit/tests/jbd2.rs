//! jbd2 recovery graded by the kernel and e2fsck: every image of
//! `tests/data/jbd2` was left by the Linux kernel with committed
//! transactions in its journal (`scripts/journal-corpus.sh`); its `.kernel`
//! file lists every block the kernel's own recovery changed, its `.e2fsck`
//! file every block `e2fsck -E journal_only` changed (block number, zlib
//! CRC-32 of the result). Recovery here must change exactly those blocks to
//! exactly those bytes — but for the two superblocks, which the kernel and
//! e2fsck rewrite as they close the journal (needs_recovery cleared,
//! `s_start` 0) and replay leaves to the caller.

mod common;

use csumkit::ext4::jbd2::{Journal, Superblock, MAGIC};
use csumkit::ext4::Layout;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/jbd2")
}

/// (name, workload) of each `VERDICTS` line.
fn entries() -> Vec<(String, String)> {
    let verdicts = std::fs::read_to_string(corpus_dir().join("VERDICTS")).unwrap();
    verdicts
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            (fields[0].to_string(), fields[5].to_string())
        })
        .collect()
}

fn unpack(name: &str) -> Option<Vec<u8>> {
    let Some(gzip) = ["/usr/bin/gzip", "/bin/gzip"].iter().map(Path::new).find(|p| p.exists()) else {
        common::skip("gzip", "apt-get install gzip");
        return None;
    };
    let out = Command::new(gzip).arg("-dc").arg(corpus_dir().join(format!("{name}.img.gz"))).output().unwrap();
    assert!(out.status.success());
    Some(out.stdout)
}

/// The blocks an oracle's recovery changed, if it recovered the image.
fn oracle(name: &str, which: &str) -> Option<BTreeMap<u64, u32>> {
    let text = std::fs::read_to_string(corpus_dir().join(format!("{name}.{which}"))).ok()?;
    Some(
        text.lines()
            .map(|l| {
                let (block, crc) = l.split_once(' ').unwrap();
                (block.parse().unwrap(), u32::from_str_radix(crc, 16).unwrap())
            })
            .collect(),
    )
}

#[test]
fn recovery_replays_what_the_kernel_and_e2fsck_replay_on_every_kernel_made_journal() {
    let entries = entries();
    assert!(entries.len() >= 5, "the corpus lost layouts: {}", entries.len());
    for (name, workload) in &entries {
        let Some(image) = unpack(name) else { return };
        let layout = Layout::parse_geometry(&image).unwrap();
        let journal = Journal::open(&image, &layout).unwrap().expect("a journal");
        assert_ne!(journal.superblock.start, 0, "{name}: the kernel left something to replay");
        let recovery = journal.recover(&image, layout.blocks_count).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(recovery.transactions() > 0, "{name}: no transaction found");
        let bs = layout.block_size as usize;
        let superblock_block = 1024 / bs as u64;
        let journal_superblock = journal.blocks[0];
        let mut changed = BTreeMap::new();
        for (&block, &replay) in &recovery.blocks {
            let bytes = journal.replayed(&image, replay).unwrap();
            if bytes[..] != image[block as usize * bs..][..bs] {
                changed.insert(block, crc32fast::hash(&bytes));
            }
        }
        changed.remove(&superblock_block);
        let close = |mut oracle: BTreeMap<u64, u32>| {
            oracle.remove(&superblock_block);
            oracle.remove(&journal_superblock);
            oracle
        };
        let kernel = close(oracle(name, "kernel").expect("the kernel's verdict"));
        if journal.superblock.fast_commit_blocks > 0 {
            // The kernel replayed the fast commits after the log too, with
            // its own allocator (csumfs's replay is judged by the tree:
            // csumfs/tests/journal_replay.rs): what this recovery changed,
            // the kernel changed too.
            assert!(changed.keys().all(|b| kernel.contains_key(b)), "{name}: {changed:?} vs {kernel:?}");
            continue;
        }
        assert_eq!(changed, kernel, "{name}: blocks (and their CRC-32) recovery changed vs the kernel's");
        if let Some(e2fsck) = oracle(name, "e2fsck") {
            assert_eq!(changed, close(e2fsck), "{name}: blocks recovery changed vs e2fsck's");
        }
        if workload == "revoke" {
            assert!(recovery.revokes > 0 && recovery.revoke_hits > 0, "{name}: {recovery:?}");
        }
    }
}

#[test]
fn a_cleanly_unmounted_journal_replays_nothing() {
    let Some(image) = unpack("v3-4k") else { return };
    let mut image = image;
    let layout = Layout::parse(&image).unwrap();
    let journal = Journal::open(&image, &layout).unwrap().unwrap();
    let at = journal.blocks[0] as usize * layout.block_size as usize;
    // s_start 0, the superblock re-sealed.
    image[at + 0x1C..at + 0x20].fill(0);
    let crc = csumkit::ext4::jbd2::superblock_checksum(&image[at..at + 1024]);
    image[at + 0xFC..at + 0x100].copy_from_slice(&crc.to_be_bytes());
    let journal = Journal::open(&image, &layout).unwrap().unwrap();
    let recovery = journal.recover(&image, layout.blocks_count).unwrap();
    assert!(recovery.blocks.is_empty() && recovery.transactions() == 0);
}

#[test]
fn a_damaged_journal_superblock_is_refused_by_name() {
    let Some(image) = unpack("v3-4k") else { return };
    let layout = Layout::parse(&image).unwrap();
    let journal = Journal::open(&image, &layout).unwrap().unwrap();
    let at = journal.blocks[0] as usize * layout.block_size as usize;
    let sb = &image[at..at + layout.block_size as usize];
    let parse = |bytes: &[u8]| Superblock::parse(bytes, layout.block_size as u32, journal.blocks.len() as u64);
    assert!(parse(sb).is_ok());
    let mut bad = sb.to_vec();
    bad[0x1F] ^= 1; // s_start, under the checksum
    assert!(parse(&bad).unwrap_err().to_string().contains("checksum"));
    let mut bad = sb.to_vec();
    bad[..4].copy_from_slice(&(MAGIC ^ 1).to_be_bytes());
    assert!(parse(&bad).unwrap_err().to_string().contains("magic"));
}

/// Hostile journals: kernel-made logs with bytes flipped anywhere in the
/// journal (the superblock re-sealed, so the walk gets past it) recover or
/// fail with a typed error — never a panic — and every block recovery
/// names lies inside the filesystem.
#[test]
fn damaged_logs_recover_or_fail_without_writing_outside_the_filesystem() {
    for name in ["v3-4k", "wrap-1k", "revoke-4k"] {
        let Some(image) = unpack(name) else { return };
        let layout = Layout::parse(&image).unwrap();
        let journal = Journal::open(&image, &layout).unwrap().unwrap();
        let bs = layout.block_size as usize;
        let sb_at = journal.blocks[0] as usize * bs;
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut random = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let (mut recovered, mut refused) = (0, 0);
        for _ in 0..400 {
            let mut damaged = image.clone();
            for _ in 0..1 + random() % 4 {
                let block = journal.blocks[(random() % journal.blocks.len().min(64) as u64) as usize] as usize;
                let at = block * bs + (random() % bs as u64) as usize;
                damaged[at] ^= 1 << (random() % 8);
            }
            let crc = csumkit::ext4::jbd2::superblock_checksum(&damaged[sb_at..sb_at + 1024]);
            damaged[sb_at + 0xFC..sb_at + 0x100].copy_from_slice(&crc.to_be_bytes());
            let Ok(Some(journal)) = Journal::open(&damaged, &layout) else {
                refused += 1;
                continue;
            };
            match journal.recover(&damaged, layout.blocks_count) {
                Ok(recovery) => {
                    recovered += 1;
                    assert!(recovery.blocks.keys().all(|&b| b < layout.blocks_count), "{name}");
                }
                Err(e) => {
                    refused += 1;
                    assert!(matches!(e, csumkit::Error::Corrupt { .. } | csumkit::Error::Invalid { .. }), "{e}");
                }
            }
        }
        assert!(recovered > 0 && refused > 0, "{name}: {recovered} recovered, {refused} refused");
    }
}

/// A transaction written by `jbd2::transaction` after the log's last one
/// is recovered like the kernel's: its blocks replayed with its bytes (a
/// copy beginning with the jbd2 magic escaped and restored), one more
/// transaction; and one that does not fit the log's free blocks is refused.
#[test]
fn a_written_transaction_is_recovered_after_the_log() {
    use csumkit::ext4::jbd2::{transaction, MAGIC};
    let Some(mut image) = unpack("v3-4k") else { return };
    let layout = Layout::parse(&image).unwrap();
    let journal = Journal::open(&image, &layout).unwrap().unwrap();
    let before = journal.recover(&image, layout.blocks_count).unwrap();
    let sb = &journal.superblock;
    let bs = layout.block_size as usize;
    let mut magic = vec![7u8; bs];
    magic[..4].copy_from_slice(&MAGIC.to_be_bytes());
    let blocks: Vec<(u64, Vec<u8>)> = vec![(3000, vec![1u8; bs]), (3001, magic.clone()), (3002, vec![2u8; bs])];
    let log = sb.last() - sb.first;
    let free = log - (before.head + log - sb.start) % log;
    let written =
        transaction(sb, before.head, free, before.end_transaction, &blocks, (before.last_commit_time + 1, 0)).unwrap();
    assert_eq!(written.len(), 1 + blocks.len() + 1, "a descriptor, the copies, a commit");
    for (at, bytes) in &written {
        let block = journal.blocks[*at as usize] as usize;
        image[block * bs..(block + 1) * bs].copy_from_slice(bytes);
    }
    let after = journal.recover(&image, layout.blocks_count).unwrap();
    assert_eq!(after.end_transaction, before.end_transaction + 1);
    for (block, bytes) in &blocks {
        let replay = after.blocks[block];
        assert_eq!(replay.transaction, before.end_transaction);
        assert_eq!(&journal.replayed(&image, replay).unwrap(), bytes, "block {block}");
    }
    assert!(after.blocks[&3001].escaped);
    assert!(transaction(sb, before.head, 4, before.end_transaction, &blocks, (0, 0)).is_err(), "too big for the log");
}

/// The fast-commit writer lays records out byte for byte as the kernel
/// did: every fast commit the kernel left in the corpus's fast-commit
/// areas — its records taken as the kernel wrote them — encodes to the
/// kernel's blocks (heads, pads, the tail's length and CRC; the bytes past
/// a tail's CRC are the kernel's buffer, unspecified).
#[test]
fn fast_commits_encode_byte_for_byte_as_the_kernel_wrote_them() {
    use csumkit::ext4::jbd2::fast_commit::{encode, TAG_HEAD, TAG_PAD, TAG_TAIL};
    let le16 = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
    let mut commits = 0;
    for name in ["fastcommit-1k", "fastcommit-4k", "fastcommit-noflush-1k", "fastcommit-noflush-4k"] {
        let Some(image) = unpack(name) else { return };
        let layout = Layout::parse_geometry(&image).unwrap();
        let journal = Journal::open(&image, &layout).unwrap().unwrap();
        let sb = &journal.superblock;
        let bs = sb.block_size as usize;
        let area: Vec<&[u8]> = (sb.last() + 1..sb.max_len).map(|b| journal.block(&image, b).unwrap()).collect();
        assert_eq!(le16(area[0], 0), TAG_HEAD, "{name}: the kernel left a fast commit");
        let (mut first, mut records, mut head) = (0usize, Vec::new(), false);
        let (mut block, mut cur) = (0usize, 0usize);
        'area: while block < area.len() {
            let (tag, len) = (le16(area[block], cur), usize::from(le16(area[block], cur + 2)));
            let value = &area[block][cur + 4..cur + 4 + len];
            match tag {
                TAG_HEAD => head = true,
                TAG_PAD => {
                    assert_eq!(cur + 4 + len, bs, "{name}: a pad runs to the block's end");
                    (block, cur) = (block + 1, 0);
                    continue;
                }
                TAG_TAIL => {
                    let tid = u32::from_le_bytes(value[..4].try_into().unwrap());
                    let ours = encode(bs, tid, head, &records).unwrap();
                    assert_eq!(ours.len(), block + 1 - first, "{name}: blocks of fast commit {commits}");
                    for (i, bytes) in ours.iter().enumerate() {
                        let end = if i + 1 == ours.len() { cur + 12 } else { bs };
                        assert_eq!(
                            bytes[..end],
                            area[first + i][..end],
                            "{name}: block {} of a fast commit",
                            first + i
                        );
                    }
                    commits += 1;
                    (first, block, cur, head) = (block + 1, block + 1, 0, false);
                    records.clear();
                    continue;
                }
                1..=6 => records.push((tag, value.to_vec())),
                _ => break 'area, // past the last fast commit
            }
            cur += 4 + len;
            if cur + 4 > bs {
                break;
            }
        }
    }
    assert!(commits >= 4, "the corpus holds the kernel's fast commits: {commits}");
}

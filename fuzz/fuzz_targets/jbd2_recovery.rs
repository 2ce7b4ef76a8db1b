//! jbd2 recovery on hostile journals: any bytes as a journal of 1 KiB
//! blocks (the first the superblock, its checksum re-sealed half the time
//! so the walk gets past it) give a recovery or a typed error, never a
//! panic, and every block recovery names lies inside the filesystem and
//! the journal; the same bytes' fast-commit area (the journal's last
//! quarter when the superblock has none) give records or a typed error.
#![no_main]

use csumkit::ext4::jbd2::{fast_commit, recover, superblock_checksum, Journal, Superblock};
use libfuzzer_sys::fuzz_target;

const BS: usize = 1024;
const FS_BLOCKS: u64 = 4096;

fuzz_target!(|data: &[u8]| {
    let Some((&reseal, rest)) = data.split_first() else { return };
    let blocks = rest.len() / BS;
    if blocks == 0 {
        return;
    }
    let mut journal = rest[..blocks * BS].to_vec();
    if reseal & 1 == 1 {
        let crc = superblock_checksum(&journal[..1024]);
        journal[0xFC..0x100].copy_from_slice(&crc.to_be_bytes());
    }
    let Ok(sb) = Superblock::parse(&journal[..BS], BS as u32, blocks as u64) else { return };
    let read = |i: u32| journal.get(i as usize * BS..(i as usize + 1) * BS).ok_or(csumkit::Error::Invalid {
        what: "block",
        detail: "past the input".into(),
    });
    let mut next_tid = sb.sequence;
    if let Ok(recovery) = recover(&sb, FS_BLOCKS, read) {
        for (&block, replay) in &recovery.blocks {
            assert!(block < FS_BLOCKS);
            assert!(replay.journal_block < sb.max_len);
        }
        next_tid = recovery.end_transaction;
    }
    let mut superblock = sb.clone();
    if superblock.fast_commit_blocks == 0 {
        superblock.fast_commit_blocks = (superblock.max_len / 4).max(1);
    }
    if superblock.fast_commit_blocks.saturating_add(1) < superblock.max_len {
        let journal_file = Journal { superblock, blocks: (0..blocks as u64).collect(), mapping: Vec::new() };
        if let Ok(found) = fast_commit::scan(&journal_file, &journal, next_tid, 256) {
            assert!(found.replay.len() <= found.records as usize);
        }
    }
});

//! jbd2 recovery on hostile journals: any bytes as a journal of 1 KiB
//! blocks (the first the superblock, its checksum re-sealed half the time
//! so the walk gets past it) give a recovery or a typed error, never a
//! panic, and every block recovery names lies inside the filesystem and
//! the journal.
#![no_main]

use csumkit::ext4::jbd2::{recover, superblock_checksum, Superblock};
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
    if let Ok(recovery) = recover(&sb, FS_BLOCKS, read) {
        for (&block, replay) in &recovery.blocks {
            assert!(block < FS_BLOCKS);
            assert!(replay.journal_block < sb.max_len);
        }
    }
});

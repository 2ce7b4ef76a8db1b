//! The fast-commit area's ByteLog anchor blocks on hostile bytes: any
//! block parses to an anchor or a typed error, never a panic, as the
//! stream's first block (with a HEAD) or its second; one that parses is
//! written back by the encoder with the same records.
#![no_main]

use csumkit::ext4::jbd2::bytelog_anchor::ByteLogAnchor;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for head in [true, false] {
        let Ok((anchor, tid)) = ByteLogAnchor::parse(data, head) else { continue };
        if let Ok(block) = anchor.block(data.len(), tid, head) {
            let records = if head { 12 + 52 + 12 } else { 52 + 12 };
            assert_eq!(&block[..records], &data[..records], "a parsed anchor re-encodes to its records");
        }
    }
});

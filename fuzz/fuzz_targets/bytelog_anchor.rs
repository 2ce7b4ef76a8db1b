//! The fast-commit area's ByteLog anchor block on hostile bytes: any
//! block parses to an anchor or a typed error, never a panic; one that
//! parses is written back as the same block by the encoder (the parser
//! accepts only what `ByteLogAnchor::block` writes, tail padding aside).
#![no_main]

use csumkit::ext4::jbd2::bytelog_anchor::ByteLogAnchor;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((anchor, tid)) = ByteLogAnchor::parse(data) else { return };
    if let Ok(block) = anchor.block(data.len(), tid) {
        let records = 12 + 52 + 12;
        assert_eq!(&block[..records], &data[..records], "a parsed anchor re-encodes to its records");
    }
});

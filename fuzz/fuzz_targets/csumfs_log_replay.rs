//! csumfs's log replay on any record payloads: the records are framed
//! validly (their CRCs good, so the fuzzer reaches csumfs's entry decoder
//! and its apply rather than the ByteLog's own checks, which
//! `bytelog_replay` fuzzes), over a kernel-made image from the corpus that
//! says its log holds changes. Replay gives an image or a typed error,
//! never a panic, and no count in the log sizes an allocation.
#![no_main]

use csumkit::bytelog::{ByteLog, SimMedium};
use csumfs::Volume;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn base() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/csumkit/tests/data/ext4/1k.img.gz");
        let out = std::process::Command::new("gzip").arg("-dc").arg(path).output().expect("gzip");
        let mut image = out.stdout;
        let sb = &mut image[1024..2048];
        let incompat = u32::from_le_bytes(sb[0x60..0x64].try_into().expect("4 bytes")) | csumfs::LOG_PENDING;
        sb[0x60..0x64].copy_from_slice(&incompat.to_le_bytes());
        let crc = csumkit::crc32c::raw_update(!0, &sb[..0x3FC]);
        sb[0x3FC..].copy_from_slice(&crc.to_le_bytes());
        image
    })
}

fuzz_target!(|data: &[u8]| {
    // Records of [tag selector][length u16][payload]: tags 0–3 (1 a part
    // of a commit, 2 its last record, 0 and 3 not csumfs's).
    let Ok(mut log) = ByteLog::format(SimMedium::new(256 << 10), 1) else { return };
    let mut rest = data;
    while rest.len() >= 3 {
        let tag = u16::from(rest[0] % 4);
        let len = (usize::from(u16::from_le_bytes([rest[1], rest[2]])) % (log.payload_max() + 1)).min(rest.len() - 3);
        if log.append(tag, 0, &rest[3..3 + len]).is_err() {
            break;
        }
        rest = &rest[3 + len..];
    }
    let log = log.into_medium().durable().to_vec();
    let _ = Volume::replayed_image(base().to_vec(), log);
});

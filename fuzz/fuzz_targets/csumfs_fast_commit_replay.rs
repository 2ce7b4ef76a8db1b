//! csumfs's fast-commit replay on hostile records: a kernel-made image
//! whose journal ends in fast commits (csumkit's
//! `tests/data/jbd2/fastcommit-noflush-1k`) with the input written over its
//! fast-commit area's first block. With the selector's first bit set, the
//! input's records are resealed — a HEAD of the expected transaction first,
//! every TAIL's transaction and CRC32C made to match — so the replay
//! applies whatever records the input holds. Opening the image (which
//! replays them in memory) and walking its root give values or typed
//! errors, never a panic.
#![no_main]

use csumfs::{Options, Volume};
use csumkit::ext4::jbd2::{fast_commit, Journal};
use csumkit::ext4::Layout;
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

struct Base {
    image: Vec<u8>,
    /// Byte offset of the fast-commit area's first block, and its size.
    area: usize,
    block_size: usize,
    /// The transaction the area's records must name.
    tid: u32,
}

fn base() -> &'static Base {
    static BASE: OnceLock<Base> = OnceLock::new();
    BASE.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/csumkit/tests/data/jbd2/fastcommit-noflush-1k.img.gz");
        let image = std::process::Command::new("gzip").arg("-dc").arg(path).output().expect("gzip").stdout;
        let layout = Layout::parse(&image).expect("ext4");
        let journal = Journal::open(&image, &layout).expect("a journal").expect("a journal");
        let recovery = journal.recover(&image, layout.blocks_count).expect("recovers");
        let sb = &journal.superblock;
        let block_size = layout.block_size as usize;
        let area = journal.blocks[(sb.last() + 1) as usize] as usize * block_size;
        Base { image, area, block_size, tid: recovery.end_transaction }
    })
}

/// The records of `block` with a HEAD of `tid` first and every TAIL made
/// to match, as the kernel would have written them.
fn reseal(block: &mut [u8], tid: u32) {
    if block.len() >= 12 {
        block[0..4].copy_from_slice(&[fast_commit::TAG_HEAD as u8, 0, 8, 0]);
        block[4..8].fill(0);
        block[8..12].copy_from_slice(&tid.to_le_bytes());
    }
    let (mut at, mut crc) = (0usize, 0u32);
    while at + 4 <= block.len() {
        let tag = u16::from_le_bytes([block[at], block[at + 1]]);
        let len = usize::from(u16::from_le_bytes([block[at + 2], block[at + 3]]));
        if at + 4 + len > block.len() {
            break;
        }
        if tag == fast_commit::TAG_TAIL && len >= 8 {
            block[at + 4..at + 8].copy_from_slice(&tid.to_le_bytes());
            crc = csumkit::crc32c::raw_update(crc, &block[at..at + 8]);
            block[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
            crc = 0;
        } else {
            crc = csumkit::crc32c::raw_update(crc, &block[at..at + 4 + len]);
        }
        at += 4 + len;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let base = base();
    let mut image = base.image.clone();
    let n = rest.len().min(base.block_size);
    let block = &mut image[base.area..base.area + base.block_size];
    block[..n].copy_from_slice(&rest[..n]);
    if selector & 1 == 1 {
        reseal(block, base.tid);
    }
    let Ok(volume) = Volume::from_bytes(image, Options::default()) else { return };
    if let Ok(root) = volume.resolve("/") {
        for entry in volume.read_dir(&root).unwrap_or_default() {
            let _ = volume.inode(entry.ino).map(|inode| volume.read_all(&inode));
        }
    }
});

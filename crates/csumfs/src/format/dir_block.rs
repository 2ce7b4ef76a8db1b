//! Directory leaf blocks as csumfs creates them: entries packed in order,
//! the last spanning the rest, then the checksum tail
//! (`struct ext4_dir_entry_tail`).

use csumkit::crc32c;
use csumkit::le::{put16, put32};

/// A new directory leaf block holding `entries` (the last spanning the
/// rest), with its checksum tail (checksummed in full: it is new).
pub(crate) fn new_dir_block(bs: usize, seed: u32, entries: &[(u32, u8, &[u8])]) -> Vec<u8> {
    let mut block = vec![0u8; bs];
    let mut at = 0;
    for (i, &(ino, ft, name)) in entries.iter().enumerate() {
        let rec_len = if i + 1 == entries.len() { bs - 12 - at } else { (8 + name.len()).next_multiple_of(4) };
        put32(&mut block, at, ino);
        put16(&mut block, at + 4, rec_len as u16);
        block[at + 6] = name.len() as u8;
        block[at + 7] = ft;
        block[at + 8..at + 8 + name.len()].copy_from_slice(name);
        at += rec_len;
    }
    csumkit::ext4::checksum::put_dir_tail(&mut block);
    let crc = crc32c::raw_update(seed, &block[..bs - 12]);
    put32(&mut block, bs - 4, crc);
    block
}

/// `EXT4_FT_*` of a mode.
pub(crate) fn file_type(mode: u16) -> u8 {
    match mode & 0o170_000 {
        0o100_000 => 1,
        0o040_000 => 2,
        0o020_000 => 3,
        0o060_000 => 4,
        0o010_000 => 5,
        0o140_000 => 6,
        0o120_000 => 7,
        _ => 0,
    }
}

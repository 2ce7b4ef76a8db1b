//! The ext4 checksum checker on damaged images: any bytes give a report or
//! a typed error, never a panic. Inputs are a small ext4 layout written
//! here (superblock and one group with metadata_csum) damaged by the input,
//! or raw bytes; the superblock checksum is optionally re-sealed.
#![no_main]

use csumkit::ext4::check;
use libfuzzer_sys::fuzz_target;

/// A minimal 64 KiB, 1 KiB-block image: superblock, one descriptor, bitmaps
/// and an inode table; the damage does the rest.
fn skeleton() -> Vec<u8> {
    let mut b = vec![0u8; 64 * 1024];
    let sb = 1024;
    let put32 = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    put32(&mut b, sb, 16); // inodes
    put32(&mut b, sb + 0x04, 64); // blocks
    put32(&mut b, sb + 0x14, 1); // first data block
    put32(&mut b, sb + 0x20, 8192);
    put32(&mut b, sb + 0x24, 8192);
    put32(&mut b, sb + 0x28, 16);
    b[sb + 0x38..sb + 0x3A].copy_from_slice(&0xEF53u16.to_le_bytes());
    b[sb + 0x58..sb + 0x5A].copy_from_slice(&256u16.to_le_bytes());
    put32(&mut b, sb + 0x64, 0x400); // metadata_csum
    b[sb + 0x175] = 1;
    let gd = 2 * 1024;
    put32(&mut b, gd, 3);
    put32(&mut b, gd + 4, 4);
    put32(&mut b, gd + 8, 5);
    b[4 * 1024] = 0xFF; // inodes 1-8 in use
    b
}

fuzz_target!(|input: (bool, bool, Vec<(u16, u8)>, Vec<u8>)| {
    let (use_skeleton, reseal, damage, raw) = input;
    let mut bytes = if use_skeleton { skeleton() } else { raw };
    if bytes.is_empty() {
        return;
    }
    for (at, value) in damage {
        let at = usize::from(at) % bytes.len();
        bytes[at] = value;
    }
    if reseal && bytes.len() >= 2048 {
        let crc = csumkit::crc32c::raw_update(!0, &bytes[1024..1024 + 0x3FC]);
        bytes[1024 + 0x3FC..2048].copy_from_slice(&crc.to_le_bytes());
    }
    let _ = check(&bytes);
});

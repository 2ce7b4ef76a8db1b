//! Parsers of on-media allocator bytes: a volume image and an extent leaf.
//! Any input must give a value or a typed error, never a panic; what loads
//! must verify and save back to the same bytes. Random bytes rarely pass the
//! header checksum, so most inputs start from a real image (a volume built
//! from the input, with a file in it) and damage it, optionally re-sealing
//! the header checksum so that the deeper checks are reached.
#![no_main]

use csumkit::alloc::{File, Geometry, Leaf, Strategy, Volume};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u8, u16, u16, Vec<(u32, u8)>, Vec<u8>)| {
    let (mode, shape, fill, damage, raw) = input;
    match mode % 3 {
        0 => load_checked(&raw),
        1 => {
            if let Ok(leaf) = Leaf::parse(7, &raw, u32::from(shape)) {
                assert_eq!(leaf.as_media(), &raw[..]);
                let _ = (0..leaf.len()).map(|i| leaf.get(i)).count();
            }
        }
        _ => {
            let block_size = 1024 << (shape % 3);
            let blocks_per_group = 8 * (64 + u32::from(shape >> 2) % 1024).min(block_size);
            let blocks_count = u64::from(blocks_per_group) * 3 - u64::from(fill % 64);
            let geometry = Geometry { block_size, blocks_per_group, blocks_count };
            let Ok(mut volume) = Volume::new(geometry, [shape as u8; 16], Strategy::CRC_SPLICE) else { return };
            let mut file = File::new(volume.csum_seed(), 12, 0);
            for i in 0..u32::from(fill % 32) {
                let _ = volume.fallocate(&mut file, i * 3, 1 + u32::from(fill) % 50);
            }
            let mut image = volume.to_image();
            for &(at, xor) in &damage {
                let len = image.len();
                image[at as usize % len] ^= xor;
            }
            if shape & 1 == 1 {
                let crc = csumkit::crc32c::checksum(&image[..48]);
                image[48..52].copy_from_slice(&crc.to_le_bytes());
            }
            load_checked(&image);
            let leaf = file.leaves().first().map(|l| l.as_media().to_vec());
            if let Some(mut bytes) = leaf {
                for &(at, xor) in &damage {
                    let len = bytes.len();
                    bytes[at as usize % len] ^= xor;
                }
                let _ = Leaf::parse(7, &bytes, file.csum_seed());
            }
        }
    }
});

fn load_checked(bytes: &[u8]) {
    for strategy in [Strategy::BEFORE, Strategy::FREE_SPACE_TREE] {
        if let Ok(volume) = Volume::load(bytes, strategy) {
            volume.verify().expect("a loaded volume verifies");
            assert_eq!(volume.to_image(), bytes);
        }
    }
}

//! The erofs reader on damaged images: any bytes give values or typed
//! errors, never a panic. Random bytes rarely pass the superblock magic and
//! checksum, so most inputs damage the shared mkfs.erofs test image (when
//! present) and optionally re-seal the superblock checksum so that the
//! inode, directory and xattr parsers are reached.
#![no_main]

use csumkit::erofs::{Image, Superblock};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn seed_image() -> &'static [u8] {
    static IMAGE: OnceLock<Vec<u8>> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/csumkit/tests/data/erofs/shared.erofs");
        std::fs::read(path).unwrap_or_default()
    })
}

fn exercise(bytes: &[u8]) {
    let Ok(image) = Image::open(bytes) else { return };
    let Ok(all) = image.walk() else { return };
    for (path, inode) in all.iter().take(256) {
        let _ = image.lookup(path);
        let _ = image.xattrs(inode);
        let _ = image.getxattr(inode, "security.capability", true);
        let _ = image.computed_filter(inode);
        if inode.size <= 1 << 20 {
            let _ = image.data(inode);
        }
    }
    let _ = image.check_filters();
    if let Ok(plan) = image.plan_filters() {
        let mut copy = bytes.to_vec();
        plan.apply(&mut copy);
        let _ = Image::open(&copy).map(|i| i.check_filters());
    }
}

fuzz_target!(|input: (bool, bool, Vec<(u16, u8)>, Vec<u8>)| {
    let (use_seed, reseal, damage, raw) = input;
    let base = seed_image();
    if !use_seed || base.is_empty() {
        exercise(&raw);
        return;
    }
    let mut bytes = base.to_vec();
    for (at, value) in damage {
        let at = usize::from(at) % bytes.len();
        bytes[at] = value;
    }
    if reseal {
        if let Ok(crc) = Superblock::compute_checksum(&bytes, 4096) {
            bytes[1028..1032].copy_from_slice(&crc.to_le_bytes());
        }
    }
    exercise(&bytes);
});

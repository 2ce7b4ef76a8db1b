//! The csumfs reader on any bytes: opening, resolving, listing, reading
//! and xattrs give values or typed errors, never a panic. Inputs are a
//! kernel-made image from the corpus with bytes of the input written over
//! its metadata (the first 64 KiB), so the fuzzer starts past the
//! superblock checks; checksums are not verified so damage reaches deeper.
#![no_main]

use csumfs::{Options, Volume};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fn base() -> &'static [u8] {
    static BASE: OnceLock<Vec<u8>> = OnceLock::new();
    BASE.get_or_init(|| {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../crates/csumkit/tests/data/ext4/1k.img.gz");
        let out = std::process::Command::new("gzip").arg("-dc").arg(path).output().expect("gzip");
        out.stdout
    })
}

fn walk(volume: &Volume) {
    let mut stack = vec![csumfs::ROOT];
    let mut seen = 0;
    while let Some(ino) = stack.pop() {
        seen += 1;
        if seen > 500 {
            return;
        }
        let Ok(inode) = volume.inode(ino) else { continue };
        let _ = volume.xattrs(&inode);
        let _ = volume.getxattr(&inode, "system.posix_acl_access");
        if inode.is_dir() {
            if let Ok(entries) = volume.read_dir(&inode) {
                for e in entries.iter().filter(|e| e.name != b"." && e.name != b"..").take(50) {
                    let _ = volume.lookup(&inode, &e.name);
                    stack.push(e.ino);
                }
            }
        } else if inode.is_symlink() {
            let _ = volume.read_link(&inode);
        } else if inode.size < 1 << 20 {
            let _ = volume.read_all(&inode);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else { return };
    let mut image = base().to_vec();
    // Pairs of (offset in the first 64 KiB, byte).
    for pair in rest.chunks_exact(3) {
        let at = usize::from(u16::from_le_bytes([pair[0], pair[1]]));
        image[at] = pair[2];
    }
    let options = Options { verify_checksums: selector & 1 == 0, ..Options::default() };
    if let Ok(volume) = Volume::from_bytes(image, options) {
        walk(&volume);
    }
});

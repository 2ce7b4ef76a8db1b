//! The csumfs reader on any bytes: opening, resolving, listing, reading
//! and xattrs give values or typed errors, never a panic. Inputs are a
//! kernel-made image from the corpus with bytes of the input written over
//! its metadata (the first 64 KiB) or, when the selector's second bit is
//! set, over the index blocks of its `/huge`, a two-level htree the kernel
//! built (the lookups of the walk go through it), so the fuzzer starts past
//! the superblock checks; with the selector's first bit set checksums are
//! not verified, so damage reaches deeper.
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

/// Byte offsets of `/huge`'s index blocks in the base image: its root and
/// its interior nodes (one empty record over the whole block).
fn huge_index() -> &'static [usize] {
    static INDEX: OnceLock<Vec<usize>> = OnceLock::new();
    INDEX.get_or_init(|| {
        let volume = Volume::from_bytes(base().to_vec(), Options::default()).expect("the base image opens");
        let bs = volume.layout().block_size as usize;
        let huge = volume.resolve("/huge").expect("/huge");
        let mut index = Vec::new();
        for run in volume.runs(&huge).expect("its blocks") {
            for k in 0..run.len {
                let at = (run.physical + k) as usize * bs;
                let block = &base()[at..at + bs];
                let whole_block_record = usize::from(u16::from_le_bytes([block[4], block[5]])) == bs;
                if run.logical + k == 0 || block[..4] == [0; 4] && whole_block_record {
                    index.push(at);
                }
            }
        }
        assert!(index.len() > 1, "/huge is a two-level htree");
        index
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
    if selector & 2 == 0 {
        // Pairs of (offset in the first 64 KiB, byte).
        for pair in rest.chunks_exact(3) {
            let at = usize::from(u16::from_le_bytes([pair[0], pair[1]]));
            image[at] = pair[2];
        }
    } else {
        // (index block, offset in it, byte); the base image has 1 KiB blocks.
        let index = huge_index();
        for quad in rest.chunks_exact(4) {
            let at = usize::from(u16::from_le_bytes([quad[1], quad[2]])) % 1024;
            image[index[usize::from(quad[0]) % index.len()] + at] = quad[3];
        }
    }
    let options = Options { verify_checksums: selector & 1 == 0, ..Options::default() };
    if let Ok(volume) = Volume::from_bytes(image, options) {
        walk(&volume);
    }
});

//! The csumfs reader against the kernel: every image of csumkit's ext4
//! corpus (mke2fs in 17 layouts, populated by the kernel through a loop
//! mount; `scripts/ext4-corpus.sh`) comes with the kernel's view of its
//! tree (`LAYOUT.view.json.gz`: every path's mode, owner, size, link
//! count, inode number, symlink target, xattrs and content CRC-32). Every
//! path must resolve to exactly that, and every directory list exactly
//! the kernel's children.

mod common;

use csumfs::{Error, Options, Volume};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/ext4")
}

fn gunzip(path: &Path) -> Vec<u8> {
    let out = Command::new("gzip").arg("-dc").arg(path).output().expect("gzip");
    assert!(out.status.success(), "gzip -dc {}", path.display());
    out.stdout
}

struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn layouts() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(corpus())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".view.json.gz").map(String::from))
        .collect();
    names.sort();
    assert!(names.len() >= 17, "the corpus lost layouts: {names:?}");
    names
}

fn open(name: &str, scratch: &Scratch) -> (Volume, Vec<Value>) {
    let image = scratch.0.join(format!("{name}.img"));
    std::fs::write(&image, gunzip(&corpus().join(format!("{name}.img.gz")))).unwrap();
    let view: Value = serde_json::from_slice(&gunzip(&corpus().join(format!("{name}.view.json.gz")))).unwrap();
    let volume = Volume::open(&image, Options::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
    (volume, view.as_array().unwrap().clone())
}

fn scratch(tag: &str) -> Scratch {
    let dir = std::env::temp_dir().join(format!("csumfs-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    Scratch(dir)
}

#[test]
fn every_path_reads_as_the_kernel_shows_it() {
    let scratch = scratch("view");
    for name in layouts() {
        let (volume, view) = open(&name, &scratch);
        common::view::assert_as_the_kernel_shows(&volume, &view, &name);
    }
}

/// Everything the reader does over one image: every path resolved, read,
/// listed; errors are fine, panics are not.
fn exercise(volume: &Volume, view: &[Value]) -> usize {
    let mut errors = 0;
    for seen in view {
        let path = seen["path"].as_str().unwrap();
        let Ok(inode) = volume.resolve(path) else {
            errors += 1;
            continue;
        };
        errors += usize::from(volume.xattrs(&inode).is_err());
        errors += usize::from(volume.getxattr(&inode, "user.absent").is_ok());
        if inode.is_dir() {
            errors += usize::from(volume.read_dir(&inode).is_err());
        } else if inode.is_symlink() {
            errors += usize::from(volume.read_link(&inode).is_err());
        } else {
            errors += usize::from(volume.read_all(&inode).is_err());
        }
    }
    errors
}

/// A wrong inode checksum is `EBADMSG` on lookup, as the kernel's iget
/// fails; one byte changed at a time anywhere in the metadata of a
/// kernel-made image gives errors, never a panic, and the untouched image
/// reads without one.
#[test]
fn damage_is_an_error_never_a_panic() {
    let name = "1k";
    let clean = gunzip(&corpus().join(format!("{name}.img.gz")));
    let view: Value = serde_json::from_slice(&gunzip(&corpus().join(format!("{name}.view.json.gz")))).unwrap();
    let view = view.as_array().unwrap();
    let volume = Volume::from_bytes(clean.clone(), Options::default()).unwrap();
    assert_eq!(exercise(&volume, view), 0);
    let file = volume.resolve("/small/file").unwrap();
    let layout = volume.layout().clone();
    let group = layout.group(&clean, u64::from(file.ino - 1) / layout.inodes_per_group).unwrap();
    let at = (group.inode_table * layout.block_size
        + u64::from(file.ino - 1) % layout.inodes_per_group * layout.inode_size) as usize;
    let mut bad = clean.clone();
    bad[at + 0x10] ^= 1; // i_mtime
    let volume = Volume::from_bytes(bad, Options::default()).unwrap();
    let err = volume.resolve("/small/file").unwrap_err();
    assert!(matches!(err, Error::Checksum { .. }) && err.errno() == 74, "{err}"); // EBADMSG
    let lax =
        Volume::from_bytes(volume_bytes(&clean, at + 0x10), Options { verify_checksums: false, ..Options::default() })
            .unwrap();
    assert!(lax.resolve("/small/file").is_ok(), "verify_checksums: false reads past a bad checksum");
    // One byte at a time over the first 600 KiB (the metadata the kernel wrote).
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut failed = 0;
    for _ in 0..300 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let at = (rng % (600 * 1024)) as usize;
        let mut bytes = clean.clone();
        bytes[at] = bytes[at].wrapping_add(1 + (rng >> 40) as u8 % 255);
        if let Ok(volume) = Volume::from_bytes(bytes, Options::default()) {
            failed += usize::from(exercise(&volume, &view[..200]) > 0);
        }
    }
    assert!(failed > 0, "no change was ever noticed");
}

fn volume_bytes(clean: &[u8], flip: usize) -> Vec<u8> {
    let mut bytes = clean.to_vec();
    bytes[flip] ^= 1;
    bytes
}

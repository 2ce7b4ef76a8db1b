//! A volume with its metadata in a ByteLog, on real files: a 40 GiB sparse
//! image (the bench's 64 KiB-block geometry) opens — its private map
//! reserves no swap — and what is written, synced and checkpointed is what
//! e2fsck and a second open see.

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs_with, Scratch};
use csumfs::{NewInode, Options, Volume, ROOT};

#[test]
fn a_large_sparse_image_is_logged_synced_and_checkpointed() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("logged");
    let image = scratch.0.join("img");
    let log = scratch.0.join("img.bytelog");
    mke2fs_with(&image, "65536", "40G", &["-g", "65528"]);
    let (mut volume, replayed) = Volume::open_logged(&image, &log, 1 << 20, Options::default(), None).unwrap();
    assert_eq!(replayed.commits, 0);
    let file = volume.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap();
    volume.write(file.ino, 0, &[7u8; 300_000]).unwrap();
    volume.sync().unwrap();
    let head = |image: &std::path::Path| {
        let mut head = vec![0u8; 4096];
        std::io::Read::read_exact(&mut std::fs::File::open(image).unwrap(), &mut head).unwrap();
        head
    };
    assert!(csumfs::log_pending(&head(&image)), "synced, not checkpointed: the image says so");
    volume.checkpoint().unwrap();
    drop(volume);
    assert!(!csumfs::log_pending(&head(&image)));
    assert_clean(&image, "after the checkpoint");
    let volume = Volume::open(&image, Options::default()).unwrap();
    assert_eq!(volume.read_all(&volume.resolve("/f").unwrap()).unwrap(), vec![7u8; 300_000]);
}

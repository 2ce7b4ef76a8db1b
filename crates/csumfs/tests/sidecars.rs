//! The files csumfs keeps beside an image are on-media bytes like the
//! image: the data checksum sidecar (`IMAGE.csums`: the identity, the
//! intent list, the checksum tree) and the undo log (`IMAGE.undo`).
//! Damaged — bytes changed anywhere in a real one — they give a volume or
//! a typed error, never a panic or a hang; a damaged sidecar over intact
//! data reads back each file's own bytes or fails it with an error, never
//! other bytes. (The proptest twin of the `csumfs_sidecars` fuzz target.)

mod common;

use common::{corpus_image, Scratch};
use csumfs::{NewInode, Options, Volume, ROOT};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::cell::Cell;
use std::path::Path;

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };

fn writable() -> Options {
    Options { write: true, ..Options::default() }
}

/// Byte edits of a real file: (offset, value) pairs, offsets in `0..len`,
/// clustered at the start (headers, counts, first records) half the time.
fn edits(len: usize) -> impl Strategy<Value = Vec<(usize, u8)>> {
    let at = prop_oneof![0..len.min(4096), 0..len];
    proptest::collection::vec((at, any::<u8>()), 1..24)
}

fn damaged(bytes: &[u8], edits: &[(usize, u8)]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    for &(at, value) in edits {
        out[at] = value;
    }
    out
}

/// Files by inode, with the bytes each must read back.
type Files = Vec<(u32, Vec<u8>)>;

/// The kernel-made 1 KiB image with three files written through csumfs
/// and checksummed, a rewrite in place left on the intent list by a
/// death: the image's bytes, the sidecar's, and the files (inode, bytes).
fn with_checksums(dir: &Path) -> (Vec<u8>, Vec<u8>, Files) {
    let image = corpus_image("1k", dir);
    let sums = dir.join("1k.csums");
    let mut v = Volume::open(&image, writable()).unwrap();
    assert!(v.enable_data_checksums(&sums).unwrap());
    let mut files = Vec::new();
    for (i, len) in [700usize, 5_000, 70_000].into_iter().enumerate() {
        let ino = v.create(ROOT, format!("sidecar-{i}").as_bytes(), FILE).unwrap().ino;
        let bytes: Vec<u8> = (0..len).map(|b| (b as u8).wrapping_mul(7) ^ i as u8).collect();
        v.write(ino, 0, &bytes).unwrap();
        files.push((ino, bytes));
    }
    v.sync().unwrap();
    v.write(files[2].0, 3_000, &[0xEE; 2_000]).unwrap(); // in place: listed, not committed
    files[2].1[3_000..5_000].fill(0xEE);
    drop(v); // dies with the rewrite on the intent list
    (std::fs::read(&image).unwrap(), std::fs::read(&sums).unwrap(), files)
}

#[test]
fn a_damaged_checksum_sidecar_gives_a_volume_or_an_error_never_other_bytes() {
    let scratch = Scratch::new("sidecars-csums");
    let (image, sums, files) = with_checksums(&scratch.0);
    let path = scratch.0.join("damaged.csums");
    // The intact sidecar: every file reads back (the rewrite's block forgotten, not EIO).
    std::fs::write(&path, &sums).unwrap();
    let mut v = Volume::from_bytes(image.clone(), writable()).unwrap();
    assert!(v.enable_data_checksums(&path).unwrap());
    for (ino, bytes) in &files {
        assert!(v.read_all(&v.inode(*ino).unwrap()).unwrap() == *bytes, "inode {ino} reads back");
    }
    let mut runner = TestRunner::new(Config { cases: 96, failure_persistence: None, ..Config::default() });
    let (errors, eio) = (Cell::new(0), Cell::new(0));
    runner
        .run(&edits(sums.len()), |edits| {
            std::fs::write(&path, damaged(&sums, &edits)).unwrap();
            let mut v = Volume::from_bytes(image.clone(), writable()).unwrap();
            if v.enable_data_checksums(&path).is_err() {
                errors.set(errors.get() + 1);
                return Ok(());
            }
            for (ino, bytes) in &files {
                match v.read_all(&v.inode(*ino).unwrap()) {
                    Ok(read) => prop_assert!(read == *bytes, "inode {ino}: other bytes than written"),
                    Err(err) => {
                        prop_assert_eq!(err.errno(), libc::EIO, "inode {}: {}", ino, err);
                        eio.set(eio.get() + 1);
                    }
                }
            }
            Ok(())
        })
        .unwrap();
    eprintln!("96 damaged sidecars: {} refused at open, {} file reads failed with EIO", errors.get(), eio.get());
}

#[test]
fn a_damaged_undo_log_gives_a_volume_or_an_error() {
    let scratch = Scratch::new("sidecars-undo");
    let image = corpus_image("1k", &scratch.0);
    let undo = scratch.0.join("1k.undo");
    let mut v = Volume::open(&image, writable()).unwrap();
    assert!(!v.enable_undo(&undo).unwrap());
    v.begin();
    let d = v.mkdir(ROOT, b"undo-me", NewInode { mode: 0o040_755, uid: 0, gid: 0 }).unwrap().ino;
    for i in 0..20 {
        v.create(d, format!("f{i}").as_bytes(), FILE).unwrap();
    }
    drop(v); // dies mid-operation: the log holds its records
    let (image, log) = (std::fs::read(&image).unwrap(), std::fs::read(&undo).unwrap());
    let used = u64::from_le_bytes(log[16..24].try_into().unwrap()) as usize;
    let path = scratch.0.join("damaged.undo");
    let mut runner = TestRunner::new(Config { cases: 96, failure_persistence: None, ..Config::default() });
    let (undone, refused) = (Cell::new(0), Cell::new(0));
    runner
        .run(&edits(used), |edits| {
            let bytes = damaged(&log, &edits);
            std::fs::write(&path, &bytes).unwrap();
            let mut v = Volume::from_bytes(image.clone(), writable()).unwrap();
            // Read for a check (`csumkit ext4 check`), the same log is
            // refused exactly when the writable open refuses it.
            let in_memory = csumfs::undone_image(image.clone(), &bytes);
            match v.enable_undo(&path) {
                Ok(put_back) => {
                    prop_assert!(in_memory.as_ref().is_ok_and(|(_, n)| (*n > 0) == put_back), "{:?}", in_memory.err());
                    if put_back {
                        undone.set(undone.get() + 1);
                    }
                }
                Err(err) => {
                    prop_assert!(matches!(err, csumfs::Error::Corrupt { .. }), "{}", err);
                    prop_assert!(matches!(in_memory, Err(csumfs::Error::Corrupt { .. })), "read for a check: accepted");
                    refused.set(refused.get() + 1);
                }
            }
            Ok(())
        })
        .unwrap();
    eprintln!("96 damaged undo logs: {} put back, {} refused as corrupt", undone.get(), refused.get());
}

//! On a full filesystem an operation that fails changes nothing: a zero
//! range or hole punch that needs a block to split an extent, a write that
//! needs more blocks than are free answer ENOSPC; a write, truncate,
//! fallocate or zero range past the largest file answers EFBIG; each
//! leaves the file's bytes, its data checksums, the free counts and the
//! metadata as they were — in the logged mode and with metadata in place
//! (`log=off`), read back at once and after a reopen, judged by scrub and
//! `e2fsck -fn`. A truncate, which needs no block, succeeds there.
//! (EDQUOT cannot arise: images with quotas are refused for writing.)

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs_with, Scratch};
use csumfs::{Error, NewInode, Options, Volume, ROOT};
use std::path::Path;

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
const BS: u64 = 4096;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(37) ^ seed ^ (i >> 9) as u8).collect()
}

/// How an operation is run: as a mount runs it, undone when it fails.
fn operation<T>(v: &mut Volume, op: impl FnOnce(&mut Volume) -> Result<T, Error>) -> Result<T, Error> {
    v.begin();
    let result = op(v);
    v.end(result.is_ok()).unwrap();
    result
}

fn open(image: &Path, logged: bool) -> Volume {
    let (log, sums) = (image.with_extension("bytelog"), image.with_extension("csums"));
    let mut v = if logged {
        Volume::open_logged(image, &log, 4 << 20, Options::default(), Some(&sums)).unwrap().0
    } else {
        let mut v = Volume::open(image, Options { write: true, ..Options::default() }).unwrap();
        v.enable_undo(&image.with_extension("undo")).unwrap();
        v
    };
    if !logged {
        assert!(v.enable_data_checksums(&sums).unwrap());
    }
    v
}

/// A file of four 16 KiB extents with holes between (the inode's four slots full),
/// then every free block taken by another file.
fn full_volume(image: &Path, logged: bool) -> (Volume, u32, Vec<u8>) {
    mke2fs_with(image, "4096", "32M", &["-m", "0"]);
    let mut v = open(image, logged);
    let f = operation(&mut v, |v| v.create(ROOT, b"f", FILE)).unwrap().ino;
    // One extent, then three holes punched in it: four extents of one run.
    let mut model = pattern(7 * 16384, 1);
    operation(&mut v, |v| v.write(f, 0, &model)).unwrap();
    for i in [1u64, 3, 5] {
        operation(&mut v, |v| v.punch_hole(f, i * 16384, 16384)).unwrap();
        model[(i * 16384) as usize..][..16384].fill(0);
    }
    v.sync().unwrap();
    let runs = v.runs(&v.inode(f).unwrap()).unwrap();
    assert_eq!(runs.len(), 4, "four extents: {runs:?}");
    let fill = operation(&mut v, |v| v.create(ROOT, b"fill", FILE)).unwrap().ino;
    let chunk = vec![0x5Au8; 1 << 20];
    let mut at = 0u64;
    for len in [1 << 20, BS as usize] {
        while operation(&mut v, |v| v.write(fill, at, &chunk[..len])).is_ok() {
            at += len as u64;
        }
    }
    v.sync().unwrap();
    (v, f, model)
}

/// 100 bytes below the largest file size: 9000 bytes from here reach past it.
fn past(v: &Volume) -> u64 {
    v.max_file_size() - 100
}

fn reads_as(v: &Volume, ino: u32, want: &[u8], when: &str) {
    let inode = v.inode(ino).unwrap();
    let got = v.read_all(&inode).unwrap_or_else(|e| panic!("{when}: the file does not read back: {e}"));
    assert!(got == want, "{when}: the file's bytes changed");
    let report = v.scrub().unwrap();
    assert!(report.bad.is_empty(), "{when}: scrub finds bad blocks {:?}", report.bad);
}

#[test]
fn an_operation_that_fails_for_space_or_size_changes_nothing() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("full");
    type Op = fn(&mut Volume, u32) -> Result<csumfs::Inode, Error>;
    // (what, blocks of /fill freed first, the operation, its errno)
    let ops: [(&str, u64, Op, i32); 10] = [
        ("zero range", 0, |v, f| v.zero_range(f, 100, 12288, true), libc::ENOSPC),
        ("zero range past the size", 0, |v, f| v.zero_range(f, 100, 12288, false), libc::ENOSPC),
        ("punch hole", 0, |v, f| v.punch_hole(f, 100, 12288), libc::ENOSPC),
        // Into the hole after the first extent: it needs new blocks.
        ("write into a hole", 0, |v, f| v.write(f, 16384 + 100, &[0xC3; 9000]), libc::ENOSPC),
        // Over the first extent's last block, on into that hole.
        ("write over data into a hole", 0, |v, f| v.write(f, 16000, &[0xC3; 9000]), libc::ENOSPC),
        // Two blocks free, four needed (and an extent block).
        ("write of more than is free", 2, |v, f| v.write(f, 16384, &[0xC3; 16384]), libc::ENOSPC),
        ("write past the largest file", 0, |v, f| v.write(f, past(v), &[0xC3; 9000]), libc::EFBIG),
        ("truncate past the largest file", 0, |v, f| v.truncate(f, v.max_file_size() + 1), libc::EFBIG),
        ("fallocate past the largest file", 0, |v, f| v.fallocate(f, past(v), 9000, false), libc::EFBIG),
        ("zero range past the largest file", 0, |v, f| v.zero_range(f, past(v), 9000, false), libc::EFBIG),
    ];
    for logged in [true, false] {
        for (name, freed, op, want) in ops {
            let label = format!("{name} ({})", if logged { "logged" } else { "log=off" });
            let image = scratch.0.join("full.img");
            for suffix in ["bytelog", "csums", "undo"] {
                let _ = std::fs::remove_file(image.with_extension(suffix));
            }
            let (mut v, f, model) = full_volume(&image, logged);
            if freed > 0 {
                let fill = v.lookup(&v.inode(ROOT).unwrap(), b"fill").unwrap().ino;
                let size = v.inode(fill).unwrap().size;
                operation(&mut v, |v| v.truncate(fill, size - freed * BS)).unwrap();
            }
            let (before, free) = (v.inode(f).unwrap(), v.statfs().free_blocks);
            let result = operation(&mut v, |v| op(v, f));
            let errno = result.as_ref().err().map(Error::errno);
            assert_eq!(errno, Some(want), "{label}: {result:?}");
            let after = v.inode(f).unwrap();
            assert_eq!((after.size, after.blocks), (before.size, before.blocks), "{label}: the size or blocks changed");
            assert_eq!(v.statfs().free_blocks, free, "{label}: the free count changed");
            reads_as(&v, f, &model, &label);
            v.checkpoint().unwrap();
            drop(v);
            assert_clean(&image, &label);
            let v = open(&image, logged);
            reads_as(&v, f, &model, &format!("{label}, reopened"));
        }
    }
}

/// A truncate needs no block: at a full filesystem it cuts into the middle
/// of an extent's block, zeroes that block's tail and frees the rest.
#[test]
fn a_truncate_at_a_full_filesystem_succeeds() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("full-truncate");
    for logged in [true, false] {
        let label = if logged { "logged" } else { "log=off" };
        let image = scratch.0.join(format!("{label}.img"));
        let (mut v, f, mut model) = full_volume(&image, logged);
        let free = v.statfs().free_blocks;
        let size = 2 * 16384 + 100;
        operation(&mut v, |v| v.truncate(f, size)).unwrap();
        model.truncate(size as usize);
        assert!(v.statfs().free_blocks > free, "{label}: blocks freed");
        reads_as(&v, f, &model, label);
        // Grown again: the cut block's tail reads as zeros.
        operation(&mut v, |v| v.truncate(f, size + 5000)).unwrap();
        model.resize(size as usize + 5000, 0);
        reads_as(&v, f, &model, label);
        v.checkpoint().unwrap();
        drop(v);
        assert_clean(&image, label);
        let v = open(&image, logged);
        reads_as(&v, f, &model, &format!("{label}, reopened"));
    }
}

//! Data checksums kept by `Volume::write`: random writes and
//! fallocates — unaligned offsets, lengths from 0 to past a megabyte, over
//! holes, written blocks and unwritten extents — and afterwards every
//! written block of the file has a checksum, and it is the checksum of the
//! block's bytes: scrub verifies exactly the file's written blocks and
//! finds none bad, before and after a reopen. Run on the CPU's own CRC
//! engine, then on the portable one, where large pieces are checksummed on
//! a second thread while they are written.

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs_with, Scratch};
use csumfs::{NewInode, Options, Stats, Volume, ROOT};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::cell::Cell;
use std::path::Path;

const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, len: usize, seed: u8 },
    Fallocate { offset: u64, len: u64 },
}

fn op() -> impl Strategy<Value = Op> {
    let offset = prop_oneof![0u64..20_000, 0u64..3 << 20];
    let len = prop_oneof![3 => 0usize..9_000, 1 => 200_000usize..1_300_000];
    prop_oneof![
        4 => (offset.clone(), len, any::<u8>()).prop_map(|(offset, len, seed)| Op::Write { offset, len, seed }),
        1 => (offset, 1u64..600_000).prop_map(|(offset, len)| Op::Fallocate { offset, len }),
    ]
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 12) as u8).collect()
}

fn open(image: &Path, sums: &Path) -> Volume {
    let mut v = Volume::open(image, Options { write: true, ..Options::default() }).unwrap();
    assert!(v.enable_data_checksums(sums).unwrap());
    v
}

/// Scrub finds no bad block and verifies exactly the file's written
/// (mapped, not unwritten) blocks: none was left without a checksum.
fn every_written_block_verifies(v: &Volume, ino: u32, want: &[u8], when: &str) -> Result<(), TestCaseError> {
    let inode = v.inode(ino).unwrap();
    prop_assert_eq!(v.read_all(&inode).map_err(|e| TestCaseError::fail(format!("{when}: {e}")))?, want);
    let written: u64 = v.runs(&inode).unwrap().iter().filter(|r| !r.uninit).map(|r| r.len).sum();
    let before = Stats::get(&v.stats().data_verified);
    let report = v.scrub().unwrap();
    prop_assert!(report.bad.is_empty(), "{}: bad blocks {:?}", when, report.bad);
    let verified = Stats::get(&v.stats().data_verified) - before;
    prop_assert_eq!(verified, written, "{}: blocks verified by scrub vs written blocks", when);
    Ok(())
}

/// One case; adds the blocks checksummed on a second thread to `overlapped`.
fn run(ops: &[Op], scratch: &Scratch, block_size: &str, overlapped: &Cell<u64>) -> Result<(), TestCaseError> {
    let (image, sums) = (scratch.0.join("d.img"), scratch.0.join("d.csums"));
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_file(&sums);
    mke2fs_with(&image, block_size, "64M", &[]);
    let mut v = open(&image, &sums);
    let ino = v.create(ROOT, b"f", FILE).unwrap().ino;
    let mut model: Vec<u8> = Vec::new();
    for op in ops {
        match *op {
            Op::Write { offset, len, seed } => {
                let data = bytes(len, seed);
                v.write(ino, offset, &data).unwrap();
                // A write of nothing leaves the file as it is, past its end too.
                let end = offset as usize + len;
                if len > 0 {
                    model.resize(model.len().max(end), 0);
                    model[offset as usize..end].copy_from_slice(&data);
                }
            }
            Op::Fallocate { offset, len } => {
                v.fallocate(ino, offset, len, false).unwrap();
                model.resize(model.len().max((offset + len) as usize), 0);
            }
        }
    }
    every_written_block_verifies(&v, ino, &model, "after the writes")?;
    overlapped.set(overlapped.get() + Stats::get(&v.stats().data_overlapped));
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "random writes with data checksums");
    let v = open(&image, &sums);
    every_written_block_verifies(&v, ino, &model, "after a reopen")
}

/// A 9 MiB overwrite, unaligned at both ends, of one run of 4 KiB blocks
/// is checksummed on a second thread whatever the engine; the blocks it
/// covers whole (its two partial blocks are checksummed from the image)
/// are counted, exactly.
fn a_large_overwrite_counts_its_whole_blocks_as_overlapped(scratch: &Scratch) {
    let (image, sums) = (scratch.0.join("o.img"), scratch.0.join("o.csums"));
    let _ = std::fs::remove_file(&image);
    let _ = std::fs::remove_file(&sums);
    mke2fs_with(&image, "4096", "64M", &[]);
    let mut v = open(&image, &sums);
    let ino = v.create(ROOT, b"f", FILE).unwrap().ino;
    let (at, len) = (1000usize, 9 << 20);
    v.write(ino, 0, &bytes(at + len + 1000, 1)).unwrap();
    assert_eq!(v.runs(&v.inode(ino).unwrap()).unwrap().len(), 1, "one run in a fresh image");
    let before = Stats::get(&v.stats().data_overlapped);
    let data = bytes(len, 2);
    v.write(ino, at as u64, &data).unwrap();
    let whole = ((at + len) / 4096 - at.div_ceil(4096)) as u64;
    assert_eq!(Stats::get(&v.stats().data_overlapped) - before, whole, "blocks checksummed on the second thread");
    let mut want = bytes(at + len + 1000, 1);
    want[at..at + len].copy_from_slice(&data);
    every_written_block_verifies(&v, ino, &want, "after a large overwrite").unwrap();
}

#[test]
fn random_writes_leave_every_written_block_with_its_own_checksum() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("datasums");
    let mut engines = vec![csumkit::Backend::active()];
    if engines[0] != csumkit::Backend::Portable {
        engines.push(csumkit::Backend::Portable);
    }
    for engine in engines {
        // The engine decides which pieces are checksummed on the helper
        // thread (the portable one's from 32 KiB of whole blocks).
        engine.force().unwrap();
        let overlapped = Cell::new(0);
        for block_size in ["1024", "4096", "65536"] {
            let mut runner = TestRunner::new(Config { cases: 12, ..Config::default() });
            let ops = proptest::collection::vec(op(), 1..12);
            runner
                .run(&ops, |ops| run(&ops, &scratch, block_size, &overlapped))
                .unwrap_or_else(|e| panic!("{} engine, {block_size}-byte blocks: {e}", engine.name()));
        }
        a_large_overwrite_counts_its_whole_blocks_as_overlapped(&scratch);
        // The helper pays only where the CRC is slow: with CRC instructions
        // no piece here (all under 8 MiB) goes to it.
        if engine == csumkit::Backend::Portable {
            assert!(overlapped.get() > 0, "no piece was checksummed on the helper thread");
        } else {
            assert_eq!(overlapped.get(), 0, "blocks checksummed on the helper thread with CRC instructions");
        }
    }
}

/// A sidecar serves only the image it was written for: another image of
/// the same size (its own UUID) opened with it starts it afresh when
/// writable — its blocks read back, none `EIO` against the other image's
/// checksums — and leaves it unused read-only. A missing sidecar is no
/// sidecar read-only; a sidecar that cannot be made is an error.
#[test]
fn a_sidecar_serves_only_its_own_image() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("sidecar-identity");
    let (a, b, sums) = (scratch.0.join("a.img"), scratch.0.join("b.img"), scratch.0.join("a.csums"));
    // The same file at the same blocks of both: a's checksummed in the sidecar.
    for (image, fill) in [(&a, 1u8), (&b, 2u8)] {
        mke2fs_with(image, "4096", "16M", &[]);
        let mut v = Volume::open(image, Options { write: true, ..Options::default() }).unwrap();
        if image == &a {
            assert!(v.enable_data_checksums(&sums).unwrap());
        }
        let f = v.create(ROOT, b"f", FILE).unwrap().ino;
        v.write(f, 0, &[fill; 64 << 10]).unwrap();
        v.sync().unwrap();
    }
    let v = open(&a, &sums);
    assert_eq!(v.scrub().unwrap().bad.len(), 0);
    assert_eq!(Stats::get(&v.stats().data_verified), 16, "a's 16 blocks checksummed");
    drop(v);
    let mut v = Volume::open(&b, Options::default()).unwrap();
    assert!(!v.enable_data_checksums(&sums).unwrap(), "read-only: another image's sidecar is not used");
    drop(v); // (a reader shares the image with readers only)
    let v = open(&b, &sums);
    let f = v.resolve("/f").unwrap();
    assert_eq!(v.read_all(&f).unwrap(), vec![2u8; 64 << 10], "b's blocks, not a's checksums");
    drop(v);

    let mut v = Volume::open(&a, Options::default()).unwrap();
    assert!(!v.enable_data_checksums(&scratch.0.join("none.csums")).unwrap(), "read-only, no sidecar");
    drop(v);
    let mut v = Volume::open(&a, Options { write: true, ..Options::default() }).unwrap();
    match v.enable_data_checksums(&scratch.0.join("no-such-dir/a.csums")) {
        Err(csumfs::Error::Io { .. }) => {}
        other => panic!("a sidecar that cannot be created: {other:?}"),
    }
}

/// `forget_data_checksums` (what a writer that keeps no checksums calls
/// first) marks a sidecar stale once: read-only it is then unused (damage
/// reads back unnoticed, not as a false `EIO` either way), writable it
/// starts afresh. A missing file, a short one, one that is not a sidecar,
/// or one forgotten already is left alone (`Ok(false)`, not a byte
/// changed); one that cannot be opened is an error.
#[test]
fn a_forgotten_sidecar_is_stale_until_a_writable_open_starts_it_afresh() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("sidecar-forget");
    let (image, sums) = (scratch.0.join("a.img"), scratch.0.join("a.csums"));
    mke2fs_with(&image, "4096", "16M", &[]);
    let mut v = open(&image, &sums);
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, &[1u8; 64 << 10]).unwrap();
    v.sync().unwrap();
    let block = v.runs(&v.inode(f).unwrap()).unwrap()[0].physical;
    drop(v);
    assert!(csumfs::forget_data_checksums(&sums).unwrap(), "a sidecar: forgotten");
    let forgotten = std::fs::read(&sums).unwrap();
    assert!(!csumfs::forget_data_checksums(&sums).unwrap(), "forgotten already");
    assert!(std::fs::read(&sums).unwrap() == forgotten);
    // Not sidecars: left as they are.
    let other = scratch.0.join("other");
    for bytes in [&b"not a sidecar, but long enough to hold its header (48 bytes)"[..], b"CSFSDSUM", b""] {
        std::fs::write(&other, bytes).unwrap();
        assert!(!csumfs::forget_data_checksums(&other).unwrap(), "{bytes:?}");
        assert_eq!(std::fs::read(&other).unwrap(), bytes);
    }
    assert!(!csumfs::forget_data_checksums(&scratch.0.join("missing")).unwrap());
    match csumfs::forget_data_checksums(&scratch.0) {
        Err(csumfs::Error::Io { .. }) => {}
        other => panic!("a directory: {other:?}"),
    }
    // Damage f, then open: read-only the stale sidecar is unused…
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[(block * 4096 + 9) as usize] ^= 1;
    std::fs::write(&image, &bytes).unwrap();
    let mut v = Volume::open(&image, Options::default()).unwrap();
    assert!(!v.enable_data_checksums(&sums).unwrap(), "read-only: a stale sidecar is not used");
    let mut want = vec![1u8; 64 << 10];
    want[9] ^= 1;
    assert!(v.read_all(&v.inode(f).unwrap()).unwrap() == want);
    drop(v);
    // …writable it starts afresh: no block has a checksum until written.
    let v = open(&image, &sums);
    assert!(v.read_all(&v.inode(f).unwrap()).unwrap() == want);
    assert_eq!(v.scrub().unwrap().blocks, 16);
    assert_eq!(Stats::get(&v.stats().data_verified), 0, "no checksums kept");
}

/// Scrub walks every file once (a hard link is not a second file),
/// subdirectories included, and names each damaged block by the path it
/// was reached by, its block in the file and its block on disk; every
/// other block it read counts as good.
#[test]
fn scrub_names_each_damaged_block_by_path_file_block_and_disk_block() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("scrub-names");
    let (image, sums) = (scratch.0.join("a.img"), scratch.0.join("a.csums"));
    mke2fs_with(&image, "4096", "16M", &[]);
    let mut v = open(&image, &sums);
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, &bytes(64 << 10, 1)).unwrap();
    let d = v.mkdir(ROOT, b"d", NewInode { mode: 0o40_755, uid: 0, gid: 0 }).unwrap().ino;
    let g = v.create(d, b"g", FILE).unwrap().ino;
    v.write(g, 0, &bytes(8 << 10, 2)).unwrap();
    v.link(g, d, b"h").unwrap();
    v.sync().unwrap();
    let first = |v: &Volume, ino: u32| v.runs(&v.inode(ino).unwrap()).unwrap()[0].physical;
    let (pf, pg) = (first(&v, f), first(&v, g));
    let report = v.scrub().unwrap();
    assert_eq!((report.files, report.blocks, report.bad.len()), (2, 18, 0), "{report:?}");
    drop(v);
    let mut damaged = std::fs::read(&image).unwrap();
    for block in [pf + 5, pg + 1] {
        damaged[(block * 4096 + 77) as usize] ^= 4;
    }
    std::fs::write(&image, &damaged).unwrap();
    let v = open(&image, &sums);
    let mut report = v.scrub().unwrap();
    report.bad.sort();
    let g_path = if report.bad[0].0 == "/d/g" { "/d/g" } else { "/d/h" };
    assert_eq!(report.bad, [(g_path.to_string(), 1, pg + 1), ("/f".to_string(), 5, pf + 5)]);
    assert_eq!((report.files, report.blocks, report.verified), (2, 18, 16));
    // A read verifies the blocks it reads, those alone: past the damaged
    // block of the same extent it reads; touching it, EIO.
    let inode = v.inode(f).unwrap();
    let mut buf = vec![0u8; 8192];
    assert_eq!(v.read(&inode, 7 * 4096 + 5, &mut buf).unwrap(), 8192, "blocks 7 and 8, past the damaged 5");
    assert_eq!(buf, bytes(64 << 10, 1)[7 * 4096 + 5..][..8192]);
    for (at, len) in [(5 * 4096 + 100, 10), (4 * 4096, 8192), (3 * 4096 + 1, 8192)] {
        let err = v.read(&inode, at, &mut buf[..len]).unwrap_err();
        assert_eq!(err.errno(), libc::EIO, "a read of {len} bytes at {at} touches block 5: {err}");
    }
    // A read stops at the end of the file.
    assert_eq!(v.read(&inode, (64 << 10) - 10, &mut buf).unwrap(), 10);
}

#[test]
fn a_read_in_a_later_extent_verifies_its_own_blocks_and_names_them() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("read-extents");
    let (image, sums) = (scratch.0.join("a.img"), scratch.0.join("a.csums"));
    mke2fs_with(&image, "4096", "16M", &[]);
    let mut v = open(&image, &sums);
    // Two extents: another file takes the blocks after the first.
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    let want = bytes(8 * 4096, 3);
    v.write(f, 0, &want[..4 * 4096]).unwrap();
    let g = v.create(ROOT, b"g", FILE).unwrap().ino;
    v.write(g, 0, &bytes(4096, 4)).unwrap();
    v.write(f, 4 * 4096, &want[4 * 4096..]).unwrap();
    v.sync().unwrap();
    let runs = v.runs(&v.inode(f).unwrap()).unwrap();
    assert_eq!(runs.iter().map(|r| (r.logical, r.len)).collect::<Vec<_>>(), [(0, 4), (4, 4)], "{runs:?}");
    let physical = runs[1].physical + 1;
    drop(v);
    let mut damaged = std::fs::read(&image).unwrap();
    damaged[(physical * 4096 + 9) as usize] ^= 1;
    std::fs::write(&image, &damaged).unwrap();
    let v = open(&image, &sums);
    let inode = v.inode(f).unwrap();
    let mut buf = vec![0u8; 4096];
    for good in [0, 3, 4, 6, 7] {
        v.read(&inode, good * 4096, &mut buf).unwrap_or_else(|e| panic!("block {good} is good: {e}"));
        assert_eq!(buf, want[good as usize * 4096..][..4096], "block {good}");
    }
    let err = v.read(&inode, 5 * 4096 + 1, &mut buf[..1]).unwrap_err();
    assert_eq!(err.errno(), libc::EIO);
    assert!(err.to_string().contains(&format!("block 5 (disk block {physical})")), "{err}");
}

/// A write to part of a block keeps the rest of it, so it checksums that
/// rest too: over a damaged block it fails with `EIO`, as a read does,
/// rather than bless the damage, and leaves the block as it was — even
/// over exactly the damaged bytes, which cannot be told from others. A
/// truncate into such a block (its tail zeroed) fails the same way; a
/// write of the whole block replaces it. A good block is verified once,
/// by the first such write; that one and the later ones splice the
/// checksum from the bytes they change (`check_updates` compares each
/// with the block's own).
#[test]
fn a_write_to_part_of_a_damaged_block_fails_and_blesses_nothing() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("part-write");
    let (image, sums) = (scratch.0.join("a.img"), scratch.0.join("a.csums"));
    mke2fs_with(&image, "65536", "64M", &[]);
    let bs = 65536u64;
    let want = bytes(4 * bs as usize, 5);
    let mut v = open(&image, &sums);
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, &want).unwrap();
    v.sync().unwrap();
    let physical = v.runs(&v.inode(f).unwrap()).unwrap()[0].physical;
    drop(v);
    let mut damaged = std::fs::read(&image).unwrap();
    for block in [1, 2] {
        damaged[((physical + block) * bs + 100) as usize] ^= 0x10;
    }
    std::fs::write(&image, &damaged).unwrap();
    let open_checked = || {
        let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
        assert!(v.enable_data_checksums(&sums).unwrap());
        v
    };
    let mut v = open_checked();
    let eio = |r: Result<csumfs::Inode, csumfs::Error>, what: &str| {
        let e = r.err().unwrap_or_else(|| panic!("{what}: the damage was blessed"));
        assert_eq!(e.errno(), libc::EIO, "{what}: {e}");
    };
    for (at, len, what) in [(bs + 5000, 10, "away from the damage"), (bs + 100, 1, "over exactly the damaged byte")] {
        eio(v.write(f, at, &vec![0xEE; len]), what);
        let mut buf = [0u8; 1];
        assert_eq!(v.read(&v.inode(f).unwrap(), bs + 7, &mut buf).unwrap_err().errno(), libc::EIO, "{what}");
    }
    eio(v.truncate(f, 2 * bs + 300), "a truncate into the damaged block");
    assert_eq!(v.inode(f).unwrap().size, 4 * bs, "the truncate changed nothing");
    v.write(f, bs, &want[bs as usize..2 * bs as usize]).unwrap();
    // Block 3 is good: verified by the first write to part of it alone.
    let (verified, spliced) = (Stats::get(&v.stats().data_verified), Stats::get(&v.stats().data_spliced));
    let mut now = want.clone();
    for (k, at) in [3 * bs + 10, 3 * bs + 4096, 4 * bs - 1].into_iter().enumerate() {
        v.write(f, at, &[k as u8; 1]).unwrap();
        now[at as usize] = k as u8;
    }
    assert_eq!(Stats::get(&v.stats().data_verified) - verified, 1, "block 3 verified once");
    assert_eq!(Stats::get(&v.stats().data_spliced) - spliced, 3, "three checksums spliced");
    v.sync().unwrap();
    drop(v);
    let v = open_checked();
    let mut buf = vec![0u8; 2 * bs as usize];
    v.read(&v.inode(f).unwrap(), 0, &mut buf).unwrap();
    assert_eq!(buf, want[..2 * bs as usize], "block 1 rewritten whole");
    v.read(&v.inode(f).unwrap(), 3 * bs, &mut buf[..bs as usize]).unwrap();
    assert_eq!(buf[..bs as usize], now[3 * bs as usize..], "block 3's three writes");
    let report = v.scrub().unwrap();
    assert_eq!(report.bad, [("/f".to_string(), 2, physical + 2)], "block 2 stays damaged, and only it");
}

/// A write of nothing changes nothing, past the end of the file too: no
/// size, no block, no times (a proptest case of the random writes found
/// the size moved to the offset, and a block allocated for it).
#[test]
fn a_write_of_nothing_changes_nothing() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("empty-write");
    let (image, sums) = (scratch.0.join("e.img"), scratch.0.join("e.csums"));
    mke2fs_with(&image, "4096", "16M", &[]);
    let mut v = open(&image, &sums);
    let f = v.create(ROOT, b"f", FILE).unwrap().ino;
    v.write(f, 0, b"ten bytes!").unwrap();
    let before = v.inode(f).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    for offset in [0, 5, 10, 4965, 1 << 20] {
        let after = v.write(f, offset, &[]).unwrap();
        assert_eq!((after.size, after.blocks, after.mtime), (before.size, before.blocks, before.mtime), "at {offset}");
    }
    assert_eq!(v.runs(&v.inode(f).unwrap()).unwrap().len(), 1);
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "writes of nothing");
}

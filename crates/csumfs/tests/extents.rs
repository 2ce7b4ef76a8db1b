//! Extent trees of depth two and their reshaping: a file is fragmented by
//! punching every other block until its tree has two levels (1 KiB and
//! 4 KiB blocks), then changed at random — writes into holes and into
//! unwritten extents, punches, zero ranges, fallocate with and without
//! KEEP_SIZE, truncates — against a byte model, every checksum update
//! compared with a full recompute. `e2fsck -fn` judges the image along
//! the way (including pass 1E's "could be narrower / shorter"), the
//! kernel reads the file back, and cutting it short brings the tree back
//! into the inode.

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs, tool, with_kernel_mount, Scratch};
use csumfs::{Error, NewInode, Options, Volume, ROOT};
use std::path::Path;

/// A small deterministic generator (xorshift64*): the sequence is the same
/// on every run, so a failure is reproduced by running the test again.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

fn depth(v: &Volume, ino: u32) -> u16 {
    let root = v.inode(ino).unwrap().i_block;
    u16::from_le_bytes([root[6], root[7]])
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|i| (i.wrapping_mul(131).wrapping_add(seed * 7) % 251 + 1) as u8).collect()
}

fn zero(model: &mut [u8], from: u64, to: u64) {
    let to = (to as usize).min(model.len());
    if (from as usize) < to {
        model[from as usize..to].fill(0);
    }
}

#[test]
fn deep_extent_trees_are_reshaped_as_e2fsck_and_the_kernel_expect() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("extents");
    // 1 KiB: 84 extents per node, 800 blocks punched to 400 extents;
    // 4 KiB: 340 per node, 3 000 blocks to 1 500. Both need depth 2.
    for (bs, blocks) in [(1024u64, 800u64), (4096, 3000)] {
        let image = scratch.0.join(format!("deep-{bs}.img"));
        mke2fs(&image, &bs.to_string(), "64M");
        let options = Options { write: true, check_updates: true, ..Options::default() };
        let mut v = Volume::open(&image, options).unwrap();
        let ino = v.create(ROOT, b"holes", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
        let mut model = pattern(0, (blocks * bs) as usize);
        v.write(ino, 0, &model).unwrap();
        for k in (0..blocks).step_by(2) {
            v.punch_hole(ino, k * bs, bs).unwrap();
            zero(&mut model, k * bs, (k + 1) * bs);
        }
        assert_eq!(depth(&v, ino), 2, "{bs}: punched every other block");
        assert_eq!(v.runs(&v.inode(ino).unwrap()).unwrap().len() as u64, blocks / 2);
        v.sync().unwrap();
        assert_clean(&image, &format!("{bs}: punching every other block"));

        let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ bs);
        let span = blocks * bs + 4 * bs;
        for step in 1..=300u64 {
            let (offset, len) = (rng.below(span), 1 + rng.below(8 * bs));
            let what = rng.below(100);
            let inode = match what {
                0..=34 => {
                    let data = pattern(step, len as usize);
                    let end = (offset + len) as usize;
                    if model.len() < end {
                        model.resize(end, 0);
                    }
                    model[offset as usize..end].copy_from_slice(&data);
                    v.write(ino, offset, &data)
                }
                35..=59 => {
                    zero(&mut model, offset, offset + len);
                    v.punch_hole(ino, offset, len)
                }
                60..=74 => {
                    let keep_size = rng.below(2) == 0;
                    zero(&mut model, offset, offset + len);
                    if !keep_size && (model.len() as u64) < offset + len {
                        model.resize((offset + len) as usize, 0);
                    }
                    v.zero_range(ino, offset, len, keep_size)
                }
                75..=94 => {
                    let keep_size = rng.below(2) == 0;
                    if !keep_size && (model.len() as u64) < offset + len {
                        model.resize((offset + len) as usize, 0);
                    }
                    v.fallocate(ino, offset, len, keep_size)
                }
                _ => {
                    let size = blocks * bs / 2 + rng.below(blocks * bs);
                    model.resize(size as usize, 0);
                    v.truncate(ino, size)
                }
            };
            let inode = inode.unwrap_or_else(|e| panic!("{bs}: step {step} ({what}) at {offset}+{len}: {e}"));
            assert_eq!(inode.size, model.len() as u64, "{bs}: step {step}: size");
            if step % 50 == 0 {
                assert!(v.read_all(&inode).unwrap() == model, "{bs}: step {step}: content differs from the model");
                v.sync().unwrap();
                assert_clean(&image, &format!("{bs}: step {step}"));
            }
        }
        assert!(depth(&v, ino) >= 1, "{bs}: the random steps keep the file fragmented");
        v.sync().unwrap();
        drop(v);
        assert_clean(&image, &format!("{bs}: the random steps"));
        let mnt = scratch.0.join(format!("mnt-{bs}"));
        let want = model.clone();
        with_kernel_mount(&image, &mnt, || {
            let read = std::fs::read(mnt.join("holes")).unwrap();
            assert!(read == want, "{bs}: the kernel reads other bytes than the model");
        });

        // Cut short, the tree comes back into the inode.
        let mut v = Volume::open(&image, options).unwrap();
        let inode = v.truncate(ino, 3 * bs + 7).unwrap();
        model.truncate((3 * bs + 7) as usize);
        assert_eq!(depth(&v, ino), 0, "{bs}: truncated to three blocks");
        assert!(v.read_all(&inode).unwrap() == model);
        v.sync().unwrap();
        drop(v);
        assert_clean(&image, &format!("{bs}: truncated to three blocks"));
    }
}

/// Byte offset of inode `ino`'s record in `image` (debugfs `imap`).
fn inode_at(image: &Path, ino: u32, bs: u64) -> usize {
    let out = std::process::Command::new(tool("debugfs").unwrap())
        .args(["-R", &format!("imap <{ino}>")])
        .arg(image)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let block: u64 = text.split("located at block ").nth(1).unwrap().split(',').next().unwrap().trim().parse().unwrap();
    let offset = u64::from_str_radix(text.split("offset 0x").nth(1).unwrap().trim(), 16).unwrap();
    (block * bs + offset) as usize
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Reads all of `path` from an image copy, checksums not verified (the
/// damage below is to structure, not to checksums).
fn read_back(image: Vec<u8>, path: &str) -> Result<Vec<u8>, Error> {
    let v = Volume::from_bytes(image, Options { verify_checksums: false, ..Options::default() })?;
    let inode = v.resolve(path)?;
    let mut buf = vec![0u8; inode.size as usize];
    v.read(&inode, 0, &mut buf)?;
    Ok(buf)
}

/// Each check of the extent tree reader, on a file whose tree csumfs
/// wrote: a damaged root or node header, a root deeper than ext4 allows
/// and extents outside the filesystem are refused as corrupt, naming what
/// is wrong (an extent or an index child at or before the first data
/// block, or past the last); an extent ending at the last block is read.
#[test]
fn damaged_extent_trees_are_refused_and_their_edges_read() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("extent-damage");
    let image = scratch.0.join("d.img");
    mke2fs(&image, "1024", "8M");
    let bs = 1024u64;
    let (deep, flat) = {
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let new = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
        let deep = v.create(ROOT, b"deep", new).unwrap().ino;
        v.write(deep, 0, &pattern(1, 20 * bs as usize)).unwrap();
        for k in (0..20).step_by(2) {
            v.punch_hole(deep, k * bs, bs).unwrap();
        }
        assert_eq!(depth(&v, deep), 1);
        let flat = v.create(ROOT, b"flat", new).unwrap().ino;
        v.write(flat, 0, &pattern(2, 2 * bs as usize)).unwrap();
        assert_eq!(depth(&v, flat), 0);
        v.sync().unwrap();
        (deep, flat)
    };
    assert_clean(&image, "the two files");
    let clean = std::fs::read(&image).unwrap();
    let blocks_count = u64::from(u32::from_le_bytes(clean[1024 + 4..1024 + 8].try_into().unwrap()));
    let (deep_at, flat_at) = (inode_at(&image, deep, bs) + 0x28, inode_at(&image, flat, bs) + 0x28);
    let leaf = u32::from_le_bytes(clean[deep_at + 12 + 4..deep_at + 12 + 8].try_into().unwrap()) as usize * bs as usize;
    let refused = |edit: &dyn Fn(&mut Vec<u8>), path: &str, expect: &str| {
        let mut bytes = clean.clone();
        edit(&mut bytes);
        match read_back(bytes, path) {
            Err(Error::Corrupt { detail, .. }) => assert!(detail.contains(expect), "{expect}: {detail}"),
            other => panic!("{expect}: {:?}", other.map(|b| b.len())),
        }
    };
    refused(&|b| put16(b, deep_at, 0xF30B), "/deep", "bad root header");
    refused(&|b| put16(b, deep_at + 2, 5), "/deep", "bad root header"); // entries > max
    refused(&|b| put16(b, deep_at + 4, 5), "/deep", "bad root header"); // max > 4
    refused(&|b| put16(b, deep_at + 6, 6), "/deep", "depth 6");
    refused(&|b| put16(b, deep_at + 6, 5), "/deep", "bad header"); // allowed, but not this tree's
    refused(&|b| put16(b, leaf, 0xF30B), "/deep", "bad header");
    refused(&|b| put16(b, leaf + 2, 85), "/deep", "bad header"); // entries > max
    refused(&|b| put16(b, leaf + 4, 85), "/deep", "bad header"); // the tail past the block
    refused(&|b| put16(b, leaf + 6, 1), "/deep", "bad header"); // not the depth its parent says
    let extent = flat_at + 12;
    // As the kernel's ext4_valid_extent (checked: `cat` of such a file on
    // its mount is EUCLEAN): nothing at or before the first data block —
    // block 1 holds the superblock at 1 KiB blocks.
    refused(&|b| put32(b, extent + 8, 0), "/flat", "outside the filesystem");
    refused(&|b| put32(b, extent + 8, 1), "/flat", "outside the filesystem");
    let last = blocks_count as u32 - 1;
    refused(&|b| put32(b, extent + 8, last), "/flat", "outside the filesystem"); // two blocks past the end
                                                                                 // An index entry's child is read as a node only inside the data area:
                                                                                 // not the superblock's block, not past the filesystem's end even where
                                                                                 // the image file goes on (a file longer than its filesystem).
    let index_leaf = deep_at + 12 + 4;
    refused(&|b| put32(b, index_leaf, 0), "/deep", "outside the filesystem's data area");
    refused(&|b| put32(b, index_leaf, 1), "/deep", "outside the filesystem's data area");
    let past_end = |b: &mut Vec<u8>| {
        b.resize(b.len() + 4 * bs as usize, 0);
        put32(b, index_leaf, blocks_count as u32);
    };
    refused(&past_end, "/deep", "outside the filesystem's data area");

    // The edge: the last two blocks of the filesystem.
    let mut bytes = clean.clone();
    put32(&mut bytes, extent + 8, last - 1);
    let end = (blocks_count * bs) as usize;
    assert_eq!(read_back(bytes, "/flat").unwrap(), clean[end - 2048..end]);
}

/// A leaf whose `eh_max` is two below what its block holds (e2fsck allows
/// that; its checksum sits after `eh_max` entries) is rewritten whole when
/// csumfs changes it, not patched as if its checksum were at the usual
/// place.
#[test]
fn a_narrower_leaf_is_rewritten_whole_when_changed() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("extent-narrow");
    // At 4 KiB a changed leaf's checksum is moved, not recomputed: from
    // where its eh_max says it is.
    for bs in [1024u64, 4096] {
        let image = scratch.0.join(format!("n-{bs}.img"));
        mke2fs(&image, &bs.to_string(), "8M");
        let mut model = pattern(3, 20 * bs as usize);
        let ino = {
            let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
            let ino = v.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
            v.write(ino, 0, &model).unwrap();
            for k in (0..20).step_by(2) {
                v.punch_hole(ino, k * bs, bs).unwrap();
                zero(&mut model, k * bs, (k + 1) * bs);
            }
            assert_eq!(depth(&v, ino), 1);
            v.sync().unwrap();
            ino
        };
        let seed = Volume::open(&image, Options::default()).unwrap().inode(ino).unwrap().csum_seed;
        let mut bytes = std::fs::read(&image).unwrap();
        let root = inode_at(&image, ino, bs) + 0x28;
        let leaf = u32::from_le_bytes(bytes[root + 16..root + 20].try_into().unwrap()) as usize * bs as usize;
        let narrow = (bs as u16 - 12) / 12 - 2; // e2fsck allows eh_max down to two below what fits
        put16(&mut bytes, leaf + 4, narrow);
        let tail = 12 + 12 * usize::from(narrow);
        // Past its checksum, bytes no reader looks at (not zeros: a raw
        // CRC followed by zeros is a CRC of 0, the value zeros store).
        bytes[leaf + tail..leaf + bs as usize].fill(0xA5);
        let crc = csumkit::crc32c::raw_update(seed, &bytes[leaf..leaf + tail]);
        put32(&mut bytes, leaf + tail, crc);
        std::fs::write(&image, &bytes).unwrap();
        assert_clean(&image, &format!("{bs}: a leaf two entries narrower"));

        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let data = pattern(4, bs as usize);
        v.write(ino, 4 * bs, &data).unwrap(); // fills a hole: the leaf changes
        model[4 * bs as usize..5 * bs as usize].copy_from_slice(&data);
        v.sync().unwrap();
        drop(v);
        assert_clean(&image, &format!("{bs}: the narrower leaf changed"));
        let v = Volume::open(&image, Options::default()).unwrap();
        let mut back = vec![0u8; model.len()];
        v.read(&v.inode(ino).unwrap(), 0, &mut back).unwrap();
        assert_eq!(back, model, "{bs}");
    }
}

/// `zero_range` allocates the blocks of its range and no more: inside a
/// written file nothing new (written blocks turn unwritten in place), past
/// its end with `keep_size` exactly the range's blocks, the size kept.
#[test]
fn zero_range_allocates_its_own_blocks_and_no_more() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("zero-range-blocks");
    let image = scratch.0.join("z.img");
    mke2fs(&image, "4096", "8M");
    let bs = 4096u64;
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let f = v.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    let mut model = pattern(3, 10 * bs as usize);
    v.write(f, 0, &model).unwrap();
    let last_block = |v: &Volume| v.runs(&v.inode(f).unwrap()).unwrap().iter().map(|r| r.logical + r.len).max();
    let sectors = v.inode(f).unwrap().blocks;
    v.zero_range(f, 8 * bs + 100, bs, true).unwrap();
    model[(8 * bs + 100) as usize..(9 * bs + 100) as usize].fill(0);
    assert_eq!((v.inode(f).unwrap().blocks, last_block(&v)), (sectors, Some(10)), "inside the file");
    v.zero_range(f, 12 * bs, 2 * bs, true).unwrap();
    let inode = v.inode(f).unwrap();
    assert_eq!((inode.size, last_block(&v)), (10 * bs, Some(14)), "past the end, size kept");
    assert_eq!(inode.blocks, sectors + 2 * bs / 512, "two blocks more");
    assert_eq!(v.read_all(&inode).unwrap(), model);
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "zero ranges");
}

/// A write into an unwritten extent zeroes the rest of each block it
/// covers in part, before that block turns written: the blocks fallocate
/// handed out still hold a deleted file's bytes, and none may show.
#[test]
fn writes_into_unwritten_extents_never_show_a_deleted_files_bytes() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("unwritten-stale");
    let image = scratch.0.join("u.img");
    mke2fs(&image, "4096", "8M");
    let bs = 4096u64;
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let old = v.create(ROOT, b"old", file).unwrap().ino;
    v.write(old, 0, &vec![0xEE; 8 * bs as usize]).unwrap();
    let old_blocks: Vec<u64> =
        v.runs(&v.inode(old).unwrap()).unwrap().iter().flat_map(|r| r.physical..r.physical + r.len).collect();
    v.unlink(ROOT, b"old").unwrap();
    v.sync().unwrap();
    let new = v.create(ROOT, b"new", file).unwrap().ino;
    v.fallocate(new, 0, 8 * bs, false).unwrap();
    let runs = v.runs(&v.inode(new).unwrap()).unwrap();
    assert!(
        runs.iter().any(|r| old_blocks.contains(&r.physical)),
        "fallocate reused the deleted file's blocks: {runs:?} vs {old_blocks:?}"
    );
    let mut model = vec![0u8; 8 * bs as usize];
    // Partial at the start only, across two blocks, partial at the end only.
    for (at, len) in [(100u64, bs as usize - 100), (3 * bs + 4000, 200), (6 * bs, 10)] {
        let data = vec![0x5A; len];
        v.write(new, at, &data).unwrap();
        model[at as usize..at as usize + len].copy_from_slice(&data);
    }
    assert_eq!(v.read_all(&v.inode(new).unwrap()).unwrap(), model, "only the written bytes and zeros");
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "writes into unwritten extents");
}

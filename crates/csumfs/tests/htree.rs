//! Directories that grow: a one-block linear directory that fills becomes
//! an htree (as the kernel's `make_indexed_dir`), its leaves split by
//! hash, its full root moves down a level and full index nodes split in
//! two — at 1 KiB and 4 KiB blocks (kernel read-back) and 64 KiB (e2fsck).
//! Every name is then found through the index, a third removed, and
//! `e2fsck -fn` (which checks every leaf's hashes against the index)
//! stays clean.

mod common;

use common::{assert_clean, e2fsck_clean, have_e2fsprogs, kernel_mount_with, mke2fs_with, with_kernel_mount, Scratch};
use csumfs::{NewInode, Options, RenameMode, Volume, ROOT};

const FLAG_INDEX: u32 = 0x1000;

/// Name `i`, `len` bytes long (at least 6).
fn name(i: usize, len: usize) -> String {
    format!("{:-<1$}{i:06}", "n", len - 6)
}

/// (index levels below the root, root entries) of directory `dir`, read
/// from the synced image file.
fn shape(v: &Volume, image: &std::path::Path, bs: usize, dir: u32) -> (u8, u16) {
    let runs = v.runs(&v.inode(dir).unwrap()).unwrap();
    let bytes = std::fs::read(image).unwrap();
    let root = &bytes[runs[0].physical as usize * bs..][..bs];
    (root[0x1E], u16::from_le_bytes([root[0x22], root[0x23]]))
}

/// A live name of a block past the root: (logical block, offset, name,
/// whether the block's first entry is live).
type LeafName = (u64, usize, Vec<u8>, bool);

/// The live names of directory `dir`'s blocks past the root, read from the
/// synced image; interior index nodes (one empty entry over the whole
/// block) have none.
fn names_in_leaves(v: &Volume, image: &std::path::Path, dir: u32) -> Vec<LeafName> {
    let bs = v.layout().block_size as usize;
    let bytes = std::fs::read(image).unwrap();
    let mut names = Vec::new();
    for run in v.runs(&v.inode(dir).unwrap()).unwrap() {
        for k in u64::from(run.logical == 0)..run.len {
            let block = &bytes[(run.physical + k) as usize * bs..][..bs];
            let live = |at: usize| u32::from_le_bytes(block[at..at + 4].try_into().unwrap()) != 0;
            let mut at = 0;
            while at + 8 <= bs - 12 {
                if live(at) {
                    let name = block[at + 8..at + 8 + usize::from(block[at + 6])].to_vec();
                    names.push((run.logical + k, at, name, live(0)));
                }
                at += usize::from(u16::from_le_bytes([block[at + 4], block[at + 5]])).max(12);
            }
        }
    }
    names
}

/// Swaps names of leaves past the root with a file in the root directory,
/// and back: the first name of some leaves (at offset 0, where the root's
/// own entries would be), some past the root's 24 bytes and, with
/// `removed_firsts`, names in leaves whose first entry was removed. Each
/// swap patches that leaf, found at the right block of the directory's runs.
fn exchange_names_of_leaves(v: &mut Volume, image: &std::path::Path, dir: u32, removed_firsts: bool) {
    let names = names_in_leaves(v, image, dir);
    let big = v.inode(dir).unwrap();
    let pick = |keep: &dyn Fn(&LeafName) -> bool| -> Vec<Vec<u8>> {
        let all: Vec<_> = names.iter().filter(|n| keep(n)).map(|n| n.2.clone()).collect();
        assert!(!all.is_empty(), "no name of that kind among {}", names.len());
        all.iter().step_by(all.len().div_ceil(8)).cloned().collect()
    };
    let mut picked = pick(&|n| n.1 == 0);
    picked.extend(pick(&|n| n.1 > 24 && n.3));
    if removed_firsts {
        picked.extend(pick(&|n| !n.3));
    }
    let other = v.create(ROOT, b"swap", NewInode { mode: 0o100_600, uid: 0, gid: 0 }).unwrap().ino;
    for first in &picked {
        let was = v.lookup(&big, first).unwrap().ino;
        v.rename(dir, first, ROOT, b"swap", RenameMode::Exchange).unwrap();
        assert_eq!(v.lookup(&big, first).unwrap().ino, other);
        v.rename(dir, first, ROOT, b"swap", RenameMode::Exchange).unwrap();
        assert_eq!(v.lookup(&big, first).unwrap().ino, was);
    }
    v.unlink(ROOT, b"swap").unwrap();
}

#[test]
fn growing_directories_become_htrees_that_e2fsck_and_the_kernel_read() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree");
    // Enough names at 1 and 4 KiB for a second index level with split
    // interior nodes; at 64 KiB for the conversion and leaf splits.
    // Long names at 4 and 64 KiB: fewer of them fill as many leaves.
    for (bs, names, len, size) in
        [(1024usize, 8_000usize, 30usize, "64M"), (4096, 12_000, 200, "256M"), (65536, 5_000, 200, "256M")]
    {
        let name = |i: usize| name(i, len);
        let image = scratch.0.join(format!("htree-{bs}.img"));
        mke2fs_with(&image, &bs.to_string(), size, &["-N", "60000"]);
        let options = Options { write: true, check_updates: true, ..Options::default() };
        let mut v = Volume::open(&image, options).unwrap();
        let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
        let dir = v.mkdir(ROOT, b"big", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap().ino;
        let mut converted_at = None;
        for i in 0..names {
            v.create(dir, name(i).as_bytes(), file).unwrap_or_else(|e| panic!("{bs}: create {i}: {e}"));
            if converted_at.is_none() && v.inode(dir).unwrap().flags & FLAG_INDEX != 0 {
                converted_at = Some(i);
            }
        }
        let converted_at = converted_at.unwrap_or_else(|| panic!("{bs}: never became an htree"));
        let record = (8 + len).next_multiple_of(4);
        assert!((converted_at + 1) * record > bs - 12 - 24 - record, "{bs}: converted after {converted_at} names");
        v.sync().unwrap();
        let (levels, root_entries) = shape(&v, &image, bs, dir);
        if bs < 65536 {
            assert_eq!(levels, 1, "{bs}: the full root moved down a level");
            assert!(root_entries > 1, "{bs}: interior nodes split ({root_entries} root entries)");
        }
        assert_clean(&image, &format!("{bs}: {names} names"));
        let big = v.inode(dir).unwrap();
        for i in 0..names {
            let entry = v.lookup(&big, name(i).as_bytes()).unwrap_or_else(|e| panic!("{bs}: lookup {i}: {e}"));
            assert_ne!(entry.ino, 0);
        }
        assert_eq!(v.read_dir(&big).unwrap().len(), names + 2);
        for i in (0..names).step_by(3) {
            v.unlink(dir, name(i).as_bytes()).unwrap();
        }
        v.sync().unwrap();
        if bs == 1024 {
            exchange_names_of_leaves(&mut v, &image, dir, true);
            assert_clean(&image, "1024: names of leaves exchanged");
        }
        drop(v);
        assert_clean(&image, &format!("{bs}: every third name removed"));
        if bs == 65536 {
            continue; // the kernel mounts blocks up to its page size
        }
        let mnt = scratch.0.join(format!("mnt-{bs}"));
        with_kernel_mount(&image, &mnt, || {
            let listed = std::fs::read_dir(mnt.join("big")).unwrap().count();
            assert_eq!(listed, names - names.div_ceil(3), "{bs}: names the kernel lists");
            for i in (1..names).step_by(97) {
                let present = mnt.join("big").join(name(i)).exists();
                assert_eq!(present, i % 3 != 0, "{bs}: the kernel's lookup of {}", name(i));
            }
        });
    }
}

/// An htree directory in two runs — its root alone, a file's block, then
/// its leaves — where the second run's second block is logical block 2:
/// names in it are found and patched there, not taken for the root's.
#[test]
fn an_htree_in_two_runs_patches_its_leaves() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree-runs");
    let image = scratch.0.join("runs.img");
    // A fixed hash seed and UUID: the same names land in the same leaves
    // on every run.
    let seeds = ["-E", "hash_seed=6d1f1c1e-2a3b-4c5d-8e9f-0a1b2c3d4e5f", "-U", "0b5e3a2c-1d4f-4a6b-9c8d-7e6f5a4b3c2d"];
    mke2fs_with(&image, "1024", "8M", &seeds);
    let options = Options { write: true, check_updates: true, ..Options::default() };
    let mut v = Volume::open(&image, options).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let dir = v.mkdir(ROOT, b"frag", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap().ino;
    let blocker = v.create(ROOT, b"blocker", file).unwrap().ino;
    v.write(blocker, 0, &[7u8; 1024]).unwrap();
    let mut i = 0;
    while v.runs(&v.inode(dir).unwrap()).unwrap().iter().map(|r| r.len).sum::<u64>() < 4 {
        v.create(dir, name(i, 40).as_bytes(), file).unwrap();
        i += 1;
    }
    let big = v.inode(dir).unwrap();
    assert_ne!(big.flags & FLAG_INDEX, 0, "an htree after {i} names");
    let runs = v.runs(&big).unwrap();
    assert!(runs.len() >= 2 && runs[0].len == 1 && runs[1].logical == 1 && runs[1].len >= 2, "{runs:?}");
    v.sync().unwrap();
    exchange_names_of_leaves(&mut v, &image, dir, false);
    // Moved to another parent: its `..`, inside the root index block, is
    // patched and the root's dx tail re-sealed.
    let parent = v.mkdir(ROOT, b"parent", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap().ino;
    v.rename(ROOT, b"frag", parent, b"frag", RenameMode::Exchange).unwrap_err();
    v.rename(ROOT, b"frag", parent, b"frag", RenameMode::Replace).unwrap();
    assert_eq!(v.lookup(&v.inode(dir).unwrap(), b"..").unwrap().ino, parent);
    assert_eq!(v.lookup(&v.inode(dir).unwrap(), b".").unwrap().ino, dir);
    // A directory moved into it: the walk up from it to the root (is the
    // moved one an ancestor?) reads `..` of an htree directory.
    v.mkdir(ROOT, b"sub", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap();
    v.rename(ROOT, b"sub", dir, b"sub", RenameMode::Replace).unwrap();
    assert_eq!(v.rename(ROOT, b"parent", dir, b"loop", RenameMode::Replace).unwrap_err().errno(), 22, "EINVAL");
    v.sync().unwrap();
    assert_clean(&image, "an htree directory moved to another parent");
    // The leaf holding a name (past the first), its first record length
    // made too short, not a multiple of 4 or too long (and the leaf
    // re-sealed): swapping or unlinking that name is an error, not a loop,
    // a record skipped or a read past the block.
    let names = names_in_leaves(&v, &image, dir);
    let (first_leaf, _, _, _) = names[0];
    let (leaf, _, target, _) = names.iter().find(|n| n.0 > first_leaf).expect("a name in a later leaf").clone();
    let bs = 1024usize;
    let big = v.inode(dir).unwrap();
    let runs = v.runs(&big).unwrap();
    let run = runs.iter().find(|r| (r.logical..r.logical + r.len).contains(&leaf)).unwrap();
    let at = (run.physical + leaf - run.logical) as usize * bs;
    drop(v);
    let clean = std::fs::read(&image).unwrap();
    for rec_len in [0u16, 8, 14, bs as u16 - 8] {
        let mut bytes = clean.clone();
        bytes[at + 4..at + 6].copy_from_slice(&rec_len.to_le_bytes());
        let crc = csumkit::crc32c::raw_update(big.csum_seed, &bytes[at..at + bs - 12]);
        bytes[at + bs - 4..at + bs].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&image, &bytes).unwrap();
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        v.create(ROOT, b"swap", file).unwrap();
        let err = v.rename(dir, &target, ROOT, b"swap", RenameMode::Exchange).unwrap_err();
        assert!(matches!(err, csumfs::Error::Corrupt { .. }), "rec_len {rec_len}: exchange: {err}");
        let err = v.unlink(dir, &target).unwrap_err();
        assert!(matches!(err, csumfs::Error::Corrupt { .. }), "rec_len {rec_len}: unlink: {err}");
    }
    // The root impossible but whole (two levels without large_dir,
    // re-sealed): every name is still found, by scanning the leaves of
    // both runs (logical block numbers counted from each run's start).
    let mut bytes = clean.clone();
    let root = &mut bytes[runs[0].physical as usize * bs..][..bs];
    root[0x1E] = 2;
    let le16 = |b: &[u8], at: usize| usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
    let (limit, count) = (le16(root, 0x20), le16(root, 0x22));
    seal_index(big.csum_seed, root, 0x20, limit, count);
    std::fs::write(&image, &bytes).unwrap();
    let v = Volume::open(&image, Options::default()).unwrap();
    for (leaf, _, n, _) in &names {
        let found = v.lookup(&big, n);
        assert!(found.is_ok(), "leaf {leaf}, {}: {found:?}", String::from_utf8_lossy(n));
    }
}

/// Without `dir_index` a directory stays linear: it grows a block at a
/// time past its first (never an htree), a new name takes the room a
/// removed one left in any of its blocks before the directory grows, and
/// e2fsck and the kernel read every name.
#[test]
fn without_dir_index_a_directory_grows_block_by_block() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("linear");
    let (image, mut v, dir) = dir_of_names(&scratch, &["-O", "^dir_index"], 400);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let name = |i: usize| name(i, 20);
    let grown = v.inode(dir).unwrap();
    assert_eq!(grown.flags & FLAG_INDEX, 0, "no dir_index: never an htree");
    // 28-byte records, 1 012 bytes of each block: 36 a block.
    assert_eq!(grown.size, 400usize.div_ceil(36) as u64 * 1024, "a block at a time");
    for i in (0..400).step_by(3) {
        v.unlink(dir, name(i).as_bytes()).unwrap();
    }
    for i in 400..530 {
        v.create(dir, name(i).as_bytes(), file).unwrap_or_else(|e| panic!("create {i}: {e}"));
    }
    assert_eq!(v.inode(dir).unwrap().size, grown.size, "130 new names in the room of 134 removed");
    let live: Vec<usize> = (0..530).filter(|i| *i >= 400 || i % 3 != 0).collect();
    let d = v.inode(dir).unwrap();
    for &i in &live {
        assert_ne!(v.lookup(&d, name(i).as_bytes()).unwrap().ino, 0);
    }
    drop(v);
    assert_clean(&image, "a linear directory of 12 blocks");
    let mnt = scratch.0.join("mnt");
    with_kernel_mount(&image, &mnt, || {
        let mut want: Vec<String> = live.iter().map(|&i| name(i)).collect();
        want.sort();
        assert_eq!(listed(&mnt.join("d")), want, "the names the kernel lists");
    });
}

/// A leaf can be full holding only two names: two 255-byte names whose
/// records took a removed neighbour's room leave each less than a third
/// such name needs. Adding one splits the leaf, one name to each half, as
/// with more names. The two have the same hash (found by a birthday
/// search), so the split falls inside a run of equal hashes: the new
/// leaf's index entry carries the continuation bit, or the kernel's lookup
/// of the name left in the lower leaf would start in the upper one and
/// miss it. e2fsck and the kernel read the result.
#[test]
fn a_full_leaf_of_two_names_splits() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("two-leaf");
    let (image, mut v, dir) = dir_of_names(&scratch, &[], 0);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    // Short names until the first block fills and the directory becomes
    // an htree, then none of them left.
    let mut filled = 0;
    while v.inode(dir).unwrap().flags & FLAG_INDEX == 0 {
        v.create(dir, name(filled, 12).as_bytes(), file).unwrap();
        filled += 1;
    }
    for i in 0..filled {
        v.unlink(dir, name(i, 12).as_bytes()).unwrap();
    }
    v.sync().unwrap();
    let bytes = std::fs::read(&image).unwrap();
    let root = &bytes[v.runs(&v.inode(dir).unwrap()).unwrap()[0].physical as usize * 1024..][..1024];
    let le32 = |b: &[u8], at: usize| u32::from_le_bytes(b[at..at + 4].try_into().unwrap());
    let leaves = u16::from_le_bytes([root[0x22], root[0x23]]);
    assert!(root[0x1E] == 0 && leaves >= 1, "a root over leaves");
    let second_leaf_from = if leaves > 1 { le32(root, 0x28) } else { u32::MAX };
    let (setup, version) = hashing(&bytes, root);
    // Names of a given length that all hash into the first leaf.
    let mut k = 0;
    let mut first_leaf_name = |len: usize| loop {
        k += 1;
        let n = name(k, len);
        if setup.hash(version, n.as_bytes()).unwrap().0 < second_leaf_from {
            return n;
        }
    };
    // Two 255-byte names of one hash, in the first leaf.
    let (a, c, _) = equal_hash_pair(&setup, version, |hash| hash < second_leaf_from);
    // Records of 264, 240 and 264 + 244 bytes fill the leaf's 1 012.
    let (b, d) = (first_leaf_name(232), first_leaf_name(255));
    for n in [&a, &b, &c] {
        v.create(dir, n.as_bytes(), file).unwrap();
    }
    // `a`'s record takes `b`'s 240 bytes: 240 and 244 free, 264 needed.
    v.unlink(dir, b.as_bytes()).unwrap();
    let before = v.inode(dir).unwrap().size;
    v.create(dir, d.as_bytes(), file).unwrap_or_else(|e| panic!("a full leaf of two names: {e}"));
    assert_eq!(v.inode(dir).unwrap().size, before + 1024, "the leaf split into a new block");
    // csumfs's own lookup of the upper name also starts in the lower leaf
    // and follows the continuation bit to it.
    let big = v.inode(dir).unwrap();
    for n in [&a, &c] {
        assert_ne!(v.lookup(&big, n.as_bytes()).unwrap_or_else(|e| panic!("lookup {}…: {e}", &n[..8])).ino, 0);
    }
    let d_ino = v.lookup(&big, d.as_bytes()).unwrap().ino;
    drop(v);
    assert_clean(&image, "a full leaf of two names split");
    let mnt = scratch.0.join("mnt");
    with_kernel_mount(&image, &mnt, || {
        let mut want = vec![a.clone(), c.clone(), d.clone()];
        want.sort();
        assert_eq!(listed(&mnt.join("d")), want);
        for n in [&a, &c, &d] {
            assert!(std::fs::metadata(mnt.join("d").join(n)).is_ok(), "the kernel's lookup of {}…", &n[..8]);
        }
        assert_eq!(
            std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(mnt.join("d").join(&d)).unwrap()),
            u64::from(d_ino)
        );
    });
}

/// How names of the directory whose root block is `root` hash: the
/// superblock's set-up (of the image `bytes`) and the root's version.
fn hashing(bytes: &[u8], root: &[u8]) -> (csumfs::hash::HashSetup, u8) {
    let setup = csumfs::hash::HashSetup::from_superblock(&bytes[1024..2048]);
    let version = root[0x1C] - if root[0x1C] >= 3 { 3 } else { 0 };
    (setup, version)
}

/// Two 255-byte names with one htree hash that `keep` accepts, and the
/// hash: a birthday search from name 500 000 on (under a second).
fn equal_hash_pair(setup: &csumfs::hash::HashSetup, version: u8, keep: impl Fn(u32) -> bool) -> (String, String, u32) {
    let mut seen = std::collections::HashMap::new();
    (500_000..2_000_000)
        .find_map(|k| {
            let n = name(k, 255);
            let hash = setup.hash(version, n.as_bytes()).unwrap().0;
            keep(hash).then(|| seen.insert(hash, n.clone()).map(|other| (other, n, hash))).flatten()
        })
        .expect("two names of one hash")
}

/// 255-byte names at 1 KiB blocks (three to a leaf) fill an htree's index
/// quickly: once the root over its level of nodes is full, a full node
/// splits by moving the root's entries down again — a third level, which
/// `large_dir` allows — and without `large_dir` the directory is full
/// (`ENOSPC`, the kernel's "Directory index full!"). e2fsck judges both,
/// and the kernel finds a sample of the names in the three-level tree.
#[test]
fn a_full_two_level_index_grows_a_third_level_only_with_large_dir() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree-levels");
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    for large_dir in [true, false] {
        let image = scratch.0.join(format!("levels-{large_dir}.img"));
        let features = if large_dir { "large_dir" } else { "^large_dir" };
        mke2fs_with(&image, "1024", "96M", &["-O", features, "-N", "40000"]);
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let dir = v.mkdir(ROOT, b"d", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap().ino;
        let mut created = 0;
        let full = loop {
            match v.create(dir, name(created, 255).as_bytes(), file) {
                Ok(_) => created += 1,
                Err(e) => break Some(e),
            }
            if created % 500 == 0 && root_levels(&mut v, &image, dir) == 2 {
                break None;
            }
            assert!(created < 38_000, "{features}: neither a third level nor a full index");
        };
        eprintln!("{features}: {created} names, then {full:?}");
        v.sync().unwrap();
        if large_dir {
            assert!(full.is_none(), "large_dir: {full:?} after {created} names");
        } else {
            let err = full.expect("without large_dir the index fills");
            assert_eq!(err.errno(), libc::ENOSPC, "{err}");
            assert_eq!(root_levels(&mut v, &image, dir), 1, "still two levels");
        }
        let d = v.inode(dir).unwrap();
        for i in (0..created).step_by(37) {
            v.lookup(&d, name(i, 255).as_bytes()).unwrap_or_else(|e| panic!("{features}: lookup {i}: {e}"));
        }
        drop(v);
        assert_clean(&image, &format!("{features}: {created} names of 255 bytes"));
        if large_dir {
            let mnt = scratch.0.join("mnt");
            with_kernel_mount(&image, &mnt, || {
                for i in (0..created).step_by(101) {
                    assert!(mnt.join("d").join(name(i, 255)).exists(), "the kernel's lookup of name {i}");
                }
            });
        }
    }
}

/// Index levels below directory `dir`'s htree root, read from the image
/// file after a sync (its root block alone).
fn root_levels(v: &mut Volume, image: &std::path::Path, dir: u32) -> u8 {
    v.sync().unwrap();
    let bs = v.layout().block_size;
    let root = v.runs(&v.inode(dir).unwrap()).unwrap()[0].physical;
    let mut byte = [0u8];
    std::os::unix::fs::FileExt::read_exact_at(&std::fs::File::open(image).unwrap(), &mut byte, root * bs + 0x1E)
        .unwrap();
    byte[0]
}

/// The names in directory `dir` of a mount, sorted.
fn listed(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    names
}

/// A full first block that does not start with `.` and `..` (damage) is
/// not turned into an htree root: the name that would convert it is
/// refused as `Corrupt` and the block stays as it was.
#[test]
fn a_first_block_without_dot_and_dotdot_is_not_indexed() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree-dots");
    // 28-byte records after `.` and `..`: 35 fill the block's 1 012 bytes.
    let (image, v, dir) = dir_of_names(&scratch, &[], 35);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let d = v.inode(dir).unwrap();
    assert_eq!((d.size, d.flags & FLAG_INDEX), (1024, 0), "one full linear block");
    let at = v.runs(&d).unwrap()[0].physical as usize * 1024;
    drop(v);
    let clean = std::fs::read(&image).unwrap();
    // `.` renamed `x`, `..` renamed `.x` (names of the same length).
    for (offset, name_byte, what) in [(8, b'x', "`.` renamed"), (12 + 9, b'x', "`..` renamed")] {
        let mut bytes = clean.clone();
        bytes[at + offset] = name_byte;
        let crc = csumkit::crc32c::raw_update(d.csum_seed, &bytes[at..at + 1024 - 12]);
        bytes[at + 1024 - 4..at + 1024].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&image, &bytes).unwrap();
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let err = v.create(dir, name(35, 20).as_bytes(), file).unwrap_err();
        assert!(matches!(err, csumfs::Error::Corrupt { .. }), "{what}: {err}");
        let d = v.inode(dir).unwrap();
        assert_eq!((d.size, d.flags & FLAG_INDEX), (1024, 0), "{what}: not converted");
        drop(v);
        assert_eq!(std::fs::read(&image).unwrap()[at..at + 1024], bytes[at..at + 1024], "{what}: the block as it was");
    }
}

/// An image made where `char` is unsigned (ARM, POWER: mke2fs sets
/// `EXT2_FLAGS_UNSIGNED_HASH`) hashes names' bytes past 0x7F as unsigned,
/// and a directory hashes with the algorithm its root names (the
/// superblock's default, `hash_alg` in mke2fs.conf): an htree of names in
/// UTF-8 built on each is
/// what e2fsck and the kernel, reading the same settings, look names up in.
#[test]
fn names_hash_as_the_superblock_says() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree-unsigned");
    for (unsigned, hash_alg, version) in
        [(true, "half_md4", 1), (false, "half_md4", 1), (true, "tea", 2), (false, "legacy", 0)]
    {
        let image = scratch.0.join(format!("unsigned-{unsigned}-{hash_alg}.img"));
        mke2fs_with(&image, "1024", "8M", &[]);
        let mut bytes = std::fs::read(&image).unwrap();
        let sb = &mut bytes[1024..2048];
        let flags = u32::from_le_bytes(sb[0x160..0x164].try_into().unwrap()) & !3;
        sb[0x160..0x164].copy_from_slice(&(flags | if unsigned { 2 } else { 1 }).to_le_bytes());
        sb[0xFC] = version; // s_def_hash_version
        let crc = csumkit::crc32c::raw_update(!0, &sb[..0x3FC]);
        sb[0x3FC..0x400].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&image, &bytes).unwrap();
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
        let dir = v.mkdir(ROOT, b"d", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap().ino;
        let name = |i: usize| format!("é-ü-{i:04}-ß-ø");
        for i in 0..400 {
            v.create(dir, name(i).as_bytes(), file).unwrap();
        }
        assert_ne!(v.inode(dir).unwrap().flags & FLAG_INDEX, 0, "an htree");
        drop(v);
        assert_clean(&image, &format!("{hash_alg}, unsigned {unsigned}: 400 names in UTF-8"));
        let mnt = scratch.0.join("mnt");
        with_kernel_mount(&image, &mnt, || {
            for i in (0..400).step_by(7) {
                assert!(
                    mnt.join("d").join(name(i)).exists(),
                    "unsigned {unsigned}: the kernel's lookup of {}",
                    name(i)
                );
            }
        });
    }
}

/// Damaged htree roots, judged as the kernel judges them. A frame the dx
/// tail cannot be found from, or a tail whose checksum no longer matches
/// (the old one left where it was), makes lookups through the root an
/// error: no leaf is guessed. A root that is whole — re-sealed, as a bug
/// or a crafted image would leave it — but impossible (levels, hash
/// flags or version, count, limit) is looked past: the name is found by
/// scanning the leaves, as the kernel's lookup falls back from
/// `ERR_BAD_DX_DIR`. Adding a name is refused either way (with
/// metadata_csum the kernel neither drops the index nor adds through it).
#[test]
fn a_damaged_htree_root_is_an_error_and_an_impossible_one_is_looked_past() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree-root");
    let (image, v, dir) = dir_of_names(&scratch, &[], 60);
    let d = v.inode(dir).unwrap();
    assert_ne!(d.flags & FLAG_INDEX, 0, "an htree");
    let at = v.runs(&d).unwrap()[0].physical as usize * 1024;
    let seven = v.lookup(&d, name(7, 20).as_bytes()).unwrap().ino;
    drop(v);
    let clean = std::fs::read(&image).unwrap();
    let le16 = |b: &[u8], at: usize| usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
    let (limit, count) = (le16(&clean, at + 0x20), le16(&clean, at + 0x22));
    let mnt = scratch.0.join("mnt");
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    // (offset, new value, what, re-sealed as the kernel computes the tail, looked past)
    for (offset, value, what, resealed, looked_past) in [
        (0x1D, 9u16, "info length 9", false, false),
        (0x22, 0, "count 0, the old tail", false, false),
        (0x22, limit as u16 + 1, "count past the limit", false, false),
        (0x20, 200, "a limit past the block", false, false),
        (0x20, limit as u16 + 1, "a limit that leaves no room for the dx tail", false, false),
        (0x20, limit as u16 - 1, "a limit under the block's, the old tail", false, false),
        (0x18, 1, "the root info's reserved word not zero", false, false),
        (0x10, 1000, "\"..\" not spanning the root", false, false),
        (0x1E, 2, "two indirect levels without large_dir", true, true),
        (0x1F, 1, "hash flags 1", true, true),
        (0x1C, 7, "hash version 7", true, true),
        (0x1C, 4, "hash version 4 (unsigned half-MD4: implied by the superblock, never stored)", true, true),
        (0x22, 0, "count 0", true, true),
        (0x20, limit as u16 - 1, "a limit under the block's", true, true),
    ] {
        let mut bytes = clean.clone();
        let root = &mut bytes[at..at + 1024];
        if (0x1C..0x20).contains(&offset) {
            root[offset] = value as u8;
        } else {
            root[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
        }
        if resealed {
            seal_index(d.csum_seed, root, 0x20, le16(root, 0x20), le16(root, 0x22));
        } else {
            seal_index(d.csum_seed, root, 0x20, limit, count);
        }
        std::fs::write(&image, &bytes).unwrap();
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let d = v.inode(dir).unwrap();
        match v.lookup(&d, name(7, 20).as_bytes()) {
            Ok(entry) if looked_past => assert_eq!(entry.ino, seven, "{what}"),
            Err(csumfs::Error::Corrupt { .. } | csumfs::Error::Checksum { .. }) if !looked_past => {}
            other => panic!("{what}: {:?}", other.map(|e| e.ino)),
        }
        match v.create(dir, b"new", file) {
            Err(csumfs::Error::Corrupt { .. } | csumfs::Error::Checksum { .. }) => {}
            other => panic!("{what}: a name added: {:?}", other.map(|i| i.ino)),
        }
        drop(v);
        with_kernel_mount(&image, &mnt, || {
            let found = std::fs::metadata(mnt.join("d").join(name(7, 20)));
            assert_eq!(found.is_ok(), looked_past, "{what}: the kernel's lookup: {found:?}");
        });
        if kernel_mount_with(&image, &mnt, "loop") {
            let added = std::fs::File::create(mnt.join("d").join("new"));
            common::kernel_umount(&mnt);
            assert!(added.is_err(), "{what}: the kernel added a name");
        }
    }
}

/// A byte of an index entry's hash flipped, its dx tail not re-sealed —
/// in the root, then in an interior node: every lookup through the
/// damaged node is a checksum error (`EBADMSG`), never a name reported
/// absent or another inode found, and creating a name that is there is
/// refused rather than added twice. The kernel's lookups fail as well and
/// `e2fsck -fn` reports the damage.
#[test]
fn a_damaged_index_node_is_a_checksum_error_never_an_absent_name() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree-damage");
    let image = scratch.0.join("damaged.img");
    let TwoLevelTree { bytes: clean, dir, index, inos } = two_level_tree();
    let (dir, root, node, names) = (*dir, index[0], index[1], inos.len());
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let mnt = scratch.0.join("mnt");
    for (which, physical, count_at) in [("the root", root, 0x20), ("an interior node", node, 8)] {
        let mut bytes = clean.clone();
        bytes[physical * 1024 + count_at + 8] ^= 0x40; // entry 1's hash
        std::fs::write(&image, &bytes).unwrap();
        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let d = v.inode(dir).unwrap();
        let mut behind = Vec::new();
        for (i, ino) in inos.iter().enumerate() {
            match v.lookup(&d, name(i, 20).as_bytes()) {
                Ok(entry) => assert_eq!(entry.ino, *ino, "{which}: name {i} found as another inode"),
                Err(csumfs::Error::Checksum { .. }) => behind.push(i),
                Err(other) => panic!("{which}: name {i}: {other}"),
            }
        }
        assert!(!behind.is_empty(), "{which}: no lookup went through it");
        if which == "the root" {
            assert_eq!(behind.len(), names, "every lookup goes through the root");
        }
        match v.create(dir, name(behind[0], 20).as_bytes(), file) {
            Err(csumfs::Error::Checksum { .. }) => {}
            other => panic!("{which}: create of a name behind the damage: {:?}", other.map(|i| i.ino)),
        }
        drop(v);
        assert!(e2fsck_clean(&image).is_err(), "{which}: e2fsck -fn saw nothing");
        with_kernel_mount(&image, &mnt, || {
            let path = mnt.join("d").join(name(behind[0], 20));
            assert!(std::fs::metadata(path).is_err(), "{which}: the kernel found a name behind the damage");
        });
    }
}

/// A leaf's checksum tail is a fake record the checksum does not cover:
/// inode 0, length 12, name length 0, type 0xDE. Any field of it wrong and
/// the leaf has no checksum to verify — an error for csumfs, as for the
/// kernel's `get_dirent_tail`, never a leaf read unchecked.
#[test]
fn a_leaf_whose_checksum_tail_is_damaged_is_an_error() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("leaf-tail");
    let (image, v, dir) = dir_of_names(&scratch, &[], 10);
    let d = v.inode(dir).unwrap();
    assert_eq!(d.flags & FLAG_INDEX, 0, "one linear block");
    let tail = v.runs(&d).unwrap()[0].physical as usize * 1024 + 1024 - 12;
    drop(v);
    let clean = std::fs::read(&image).unwrap();
    let mnt = scratch.0.join("mnt");
    for (offset, value, what) in [(0, 1u8, "inode"), (4, 16, "record length"), (6, 1, "name length"), (7, 0xDF, "type")]
    {
        let mut bytes = clean.clone();
        bytes[tail + offset] = value;
        std::fs::write(&image, &bytes).unwrap();
        let v = Volume::open(&image, Options::default()).unwrap();
        match v.lookup(&v.inode(dir).unwrap(), name(3, 20).as_bytes()) {
            Err(csumfs::Error::Corrupt { .. }) => {}
            other => panic!("the tail's {what}: {:?}", other.map(|e| e.ino)),
        }
        drop(v);
        with_kernel_mount(&image, &mnt, || {
            let found = std::fs::metadata(mnt.join("d").join(name(3, 20)));
            assert!(found.is_err(), "the tail's {what}: the kernel's lookup: {found:?}");
        });
    }
}

/// A leaf is verified once per open, then trusted (csumfs's own writes keep
/// its checksum right): every leaf of a directory of many blocks looked up
/// once, then each leaf's stored checksum damaged behind the volume's back,
/// the names are still found — every leaf was remembered, not just the last
/// — and a volume opened afresh reports the damage.
#[test]
fn a_leaf_is_verified_once_per_open() {
    use std::os::unix::fs::FileExt;
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("verified-once");
    let (image, mut v, dir) = dir_of_names(&scratch, &[], 300);
    v.sync().unwrap();
    drop(v);
    let v = Volume::open(&image, Options::default()).unwrap();
    let d = v.inode(dir).unwrap();
    let lookup_all = |v: &Volume| (0..300).try_for_each(|i| v.lookup(&d, name(i, 20).as_bytes()).map(drop));
    lookup_all(&v).unwrap();
    let bytes = std::fs::read(&image).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&image).unwrap();
    let mut leaves = 0;
    for run in v.runs(&d).unwrap() {
        for block in run.physical..run.physical + run.len {
            let tail = (block * 1024 + 1024 - 12) as usize;
            if bytes[tail..tail + 8] == [0, 0, 0, 0, 12, 0, 0, 0xDE] {
                file.write_all_at(&[!bytes[tail + 11]], tail as u64 + 11).unwrap();
                leaves += 1;
            }
        }
    }
    assert!(leaves >= 10, "{leaves} leaves");
    lookup_all(&v).expect("leaves verified since this volume opened them are not verified again");
    drop(v);
    let v = Volume::open(&image, Options::default()).unwrap();
    match lookup_all(&v) {
        Err(csumfs::Error::Checksum { .. }) => {}
        other => panic!("a fresh volume verifies the damaged leaves: {other:?}"),
    }
}

/// A run of names sharing one hash can go on past the end of an index
/// node: the next leaf is then reached through the parent's next entry
/// (the kernel's `ext4_htree_next_block` walks up and down again). Built
/// by hand from a directory of exactly seven blocks: a root over three
/// interior nodes of one leaf each — a name of a lower hash, then two
/// names of one hash split between the last two nodes, whose root entry
/// (the third: the walk moves past entry 1) carries the hash with the
/// continuation bit. e2fsck finds it sound; csumfs finds every name, as
/// the kernel does, and a name past them absent.
#[test]
fn a_collision_run_continues_into_the_next_index_node() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree-run");
    let (image, mut v, dir) = dir_of_names(&scratch, &[], 0);
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let mut filled = 0;
    while v.inode(dir).unwrap().size < 7 * 1024 {
        v.create(dir, name(filled, 255).as_bytes(), file).unwrap();
        filled += 1;
    }
    assert_eq!(v.inode(dir).unwrap().size, 7 * 1024);
    for i in 0..filled {
        v.unlink(dir, name(i, 255).as_bytes()).unwrap();
    }
    v.sync().unwrap();
    let d = v.inode(dir).unwrap();
    let blocks: Vec<usize> =
        v.runs(&d).unwrap().iter().flat_map(|r| (r.physical..r.physical + r.len).map(|p| p as usize)).collect();
    let bytes = std::fs::read(&image).unwrap();
    let (setup, version) = hashing(&bytes, &bytes[blocks[0] * 1024..][..1024]);
    let hash_of = |n: &str| setup.hash(version, n.as_bytes()).unwrap().0;
    let (x, y, hash) = equal_hash_pair(&setup, version, |h| (0x4000_0000..0xC000_0000).contains(&h));
    let middle = (hash / 2) & !1;
    let low = (0..).map(|k| name(k, 255)).find(|n| hash_of(n) < middle).unwrap();
    let past = (0..).map(|k| name(k, 255)).find(|n| hash_of(n) > hash | 1).unwrap();
    let mut inos = Vec::new();
    for n in [&low, &x, &y] {
        inos.push(v.create(dir, n.as_bytes(), file).unwrap().ino);
    }
    assert_eq!(v.inode(dir).unwrap().size, 7 * 1024, "no split: the leaves had room");
    drop(v);
    let mut bytes = std::fs::read(&image).unwrap();
    // Root: levels 1, entries (-, node 1), (middle, node 2), (hash | 1,
    // node 3); node k → leaf k + 3: low, x, y.
    let put16 = |b: &mut [u8], at: usize, v: u16| b[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put32 = |b: &mut [u8], at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    {
        let root = &mut bytes[blocks[0] * 1024..][..1024];
        root[0x1E] = 1;
        root[0x24..].fill(0);
        put16(root, 0x20, (1024 - 0x20 - 8) / 8);
        put16(root, 0x22, 3);
        put32(root, 0x24, 1);
        put32(root, 0x28, middle);
        put32(root, 0x2C, 2);
        put32(root, 0x30, hash | 1);
        put32(root, 0x34, 3);
        seal_index(d.csum_seed, root, 0x20, (1024 - 0x20 - 8) / 8, 3);
    }
    for node_logical in 1..=3usize {
        let node = &mut bytes[blocks[node_logical] * 1024..][..1024];
        node.fill(0);
        put16(node, 4, 1024);
        put16(node, 8, (1024 - 8 - 8) / 8);
        put16(node, 10, 1);
        put32(node, 12, node_logical as u32 + 3);
        seal_index(d.csum_seed, node, 8, (1024 - 8 - 8) / 8, 1);
    }
    for (k, (n, ino)) in [&low, &x, &y].into_iter().zip(&inos).enumerate() {
        let leaf = &mut bytes[blocks[4 + k] * 1024..][..1024];
        leaf.fill(0);
        put32(leaf, 0, *ino);
        put16(leaf, 4, 1024 - 12);
        leaf[6] = n.len() as u8;
        leaf[7] = 1;
        leaf[8..8 + n.len()].copy_from_slice(n.as_bytes());
        put16(leaf, 1012 + 4, 12);
        leaf[1012 + 7] = 0xDE;
        let crc = csumkit::crc32c::raw_update(d.csum_seed, &leaf[..1012]);
        put32(leaf, 1012 + 8, crc);
    }
    std::fs::write(&image, &bytes).unwrap();
    assert_clean(&image, "a collision run across two index nodes, made by hand");
    let v = Volume::open(&image, Options::default()).unwrap();
    let d = v.inode(dir).unwrap();
    for (n, ino) in [&low, &x, &y].into_iter().zip(&inos) {
        let found = v.lookup(&d, n.as_bytes()).unwrap_or_else(|e| panic!("{}…: {e}", &n[n.len() - 6..]));
        assert_eq!(found.ino, *ino);
    }
    assert!(matches!(v.lookup(&d, past.as_bytes()), Err(csumfs::Error::NotFound(_))));
    drop(v);
    let mnt = scratch.0.join("mnt");
    with_kernel_mount(&image, &mnt, || {
        for (n, ino) in [&low, &x, &y].into_iter().zip(&inos) {
            let found = std::fs::metadata(mnt.join("d").join(n)).unwrap_or_else(|e| panic!("the kernel: {e}"));
            assert_eq!(std::os::unix::fs::MetadataExt::ino(&found), u64::from(*ino));
        }
    });
}

/// Writes the dx tail checksum of index block `block` (seed `seed`) as
/// `ext4_dx_csum` computes it for a count/limit at `count_at` of `limit`
/// and `count` — which need not be the ones the block holds.
fn seal_index(seed: u32, block: &mut [u8], count_at: usize, limit: usize, count: usize) {
    let tail = count_at + 8 * limit;
    let crc = csumkit::crc32c::raw_update(seed, &block[..count_at + 8 * count]);
    let crc = csumkit::crc32c::raw_update(crc, &block[tail..tail + 4]);
    let crc = csumkit::crc32c::raw_update(crc, &[0; 4]);
    block[tail + 4..tail + 8].copy_from_slice(&crc.to_le_bytes());
}

/// A 16 MiB image of 1 KiB blocks (mke2fs with `extra`) in `scratch`,
/// open for writing, with directory `/d` holding names 0..`count` of 20
/// bytes: (image, volume, the directory's inode number).
fn dir_of_names(scratch: &Scratch, extra: &[&str], count: usize) -> (std::path::PathBuf, Volume, u32) {
    let image = scratch.0.join("names.img");
    mke2fs_with(&image, "1024", "16M", extra);
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let dir = v.mkdir(ROOT, b"d", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap().ino;
    for i in 0..count {
        v.create(dir, name(i, 20).as_bytes(), file).unwrap_or_else(|e| panic!("create {i}: {e}"));
    }
    (image, v, dir)
}

/// A two-level htree of 4 000 names at 1 KiB blocks, made once for the
/// damage tests.
struct TwoLevelTree {
    /// The image's bytes.
    bytes: Vec<u8>,
    /// The directory's inode number.
    dir: u32,
    /// Its index blocks' physical numbers, the root first.
    index: Vec<usize>,
    /// The names' inode numbers.
    inos: Vec<u32>,
}

fn two_level_tree() -> &'static TwoLevelTree {
    static TREE: std::sync::OnceLock<TwoLevelTree> = std::sync::OnceLock::new();
    TREE.get_or_init(|| {
        let scratch = Scratch::new("htree-fuzz");
        let (image, mut v, dir) = dir_of_names(&scratch, &[], 4000);
        v.sync().unwrap();
        assert_eq!(shape(&v, &image, 1024, dir).0, 1, "a root over interior nodes");
        let d = v.inode(dir).unwrap();
        let inos = (0..4000).map(|i| v.lookup(&d, name(i, 20).as_bytes()).unwrap().ino).collect();
        let bytes = std::fs::read(&image).unwrap();
        let mut index = Vec::new();
        for run in v.runs(&d).unwrap() {
            for k in 0..run.len {
                let block = &bytes[(run.physical + k) as usize * 1024..][..1024];
                if run.logical + k == 0 || block[..4] == [0; 4] && block[4..6] == 1024u16.to_le_bytes() {
                    index.push((run.physical + k) as usize);
                }
            }
        }
        TwoLevelTree { bytes, dir, index, inos }
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 200, ..Default::default() })]

    /// Random bytes written over an htree's index blocks. With checksums
    /// verified, a lookup finds the right inode or is an error — never a
    /// name reported absent — and creating a name that exists is refused;
    /// without, every answer is a value or a typed error, never a panic.
    #[test]
    fn damaged_index_blocks_never_lose_names_to_lookups(
        writes in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), 0usize..1024, proptest::prelude::any::<u8>()), 1..6),
        verify in proptest::prelude::any::<bool>(),
    ) {
        if !have_e2fsprogs() {
            return Ok(());
        }
        let TwoLevelTree { bytes: clean, dir, index, inos } = two_level_tree();
        let mut bytes = clean.clone();
        for (block, at, byte) in &writes {
            bytes[block.get(index) * 1024 + at] = *byte;
        }
        let options = Options { write: true, verify_checksums: verify, ..Options::default() };
        let mut v = Volume::from_bytes(bytes, options).unwrap();
        let d = v.inode(*dir).unwrap();
        for i in (0..inos.len()).step_by(7) {
            match v.lookup(&d, name(i, 20).as_bytes()) {
                Ok(entry) if verify => proptest::prop_assert_eq!(entry.ino, inos[i], "name {}", i),
                Err(csumfs::Error::NotFound(_)) if verify => proptest::prop_assert!(false, "name {} lost", i),
                _ => {}
            }
        }
        let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
        let again = v.create(*dir, name(5, 20).as_bytes(), file);
        if verify {
            proptest::prop_assert!(again.is_err(), "name 5 added twice");
        }
        let _ = v.create(*dir, b"new", file);
    }
}

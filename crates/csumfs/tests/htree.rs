//! Directories that grow: a one-block linear directory that fills becomes
//! an htree (as the kernel's `make_indexed_dir`), its leaves split by
//! hash, its full root moves down a level and full index nodes split in
//! two — at 1 KiB and 4 KiB blocks (kernel read-back) and 64 KiB (e2fsck).
//! Every name is then found through the index, a third removed, and
//! `e2fsck -fn` (which checks every leaf's hashes against the index)
//! stays clean.

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs_with, with_kernel_mount, Scratch};
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
    let image = scratch.0.join("two.img");
    mke2fs_with(&image, "1024", "16M", &[]);
    let mut v = Volume::open(&image, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let dir = v.mkdir(ROOT, b"d", NewInode { mode: 0o755, uid: 0, gid: 0 }).unwrap().ino;
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
    let setup = csumfs::hash::HashSetup::from_superblock(&bytes[1024..2048]);
    let version = if setup.unsigned { root[0x1C] + 3 } else { root[0x1C] };
    let version = version - if version >= 3 { 3 } else { 0 };
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
    let mut seen = std::collections::HashMap::new();
    let (a, c) = (500_000..1_000_000)
        .find_map(|k| {
            let n = name(k, 255);
            let hash = setup.hash(version, n.as_bytes()).unwrap().0;
            (hash < second_leaf_from).then(|| seen.insert(hash, n.clone()).map(|other| (other, n))).flatten()
        })
        .unwrap();
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

/// An htree root whose info length, count or limit is impossible (the dx
/// tail re-sealed, as a bug or a crafted image would leave it) makes a
/// lookup through it `Corrupt`: no leaf is guessed from it.
#[test]
fn an_impossible_htree_root_is_corrupt() {
    if !have_e2fsprogs() {
        return;
    }
    let scratch = Scratch::new("htree-root");
    let (image, v, dir) = dir_of_names(&scratch, &[], 60);
    let d = v.inode(dir).unwrap();
    assert_ne!(d.flags & FLAG_INDEX, 0, "an htree");
    let at = v.runs(&d).unwrap()[0].physical as usize * 1024;
    drop(v);
    let clean = std::fs::read(&image).unwrap();
    let le16 = |b: &[u8], at: usize| usize::from(u16::from_le_bytes([b[at], b[at + 1]]));
    let (limit, count) = (le16(&clean, at + 0x20), le16(&clean, at + 0x22));
    for (offset, value, what) in [
        (0x1D, 9u16, "info length 9"),
        (0x22, 0, "count 0"),
        (0x22, limit as u16 + 1, "count past the limit"),
        (0x20, 200, "a limit past the block"),
    ] {
        let mut bytes = clean.clone();
        let root = &mut bytes[at..at + 1024];
        if offset == 0x1D {
            root[offset] = value as u8;
        } else {
            root[offset..offset + 2].copy_from_slice(&value.to_le_bytes());
        }
        // The dx tail where the original limit put it, over the original count.
        let tail = 0x20 + 8 * limit;
        let crc = csumkit::crc32c::raw_update(d.csum_seed, &root[..0x20 + 8 * count]);
        let crc = csumkit::crc32c::raw_update(crc, &root[tail..tail + 4]);
        let crc = csumkit::crc32c::raw_update(crc, &[0; 4]);
        root[tail + 4..tail + 8].copy_from_slice(&crc.to_le_bytes());
        std::fs::write(&image, &bytes).unwrap();
        let v = Volume::open(&image, Options::default()).unwrap();
        match v.lookup(&v.inode(dir).unwrap(), name(7, 20).as_bytes()) {
            Err(csumfs::Error::Corrupt { .. }) => {}
            other => panic!("{what}: {:?}", other.map(|e| e.ino)),
        }
    }
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

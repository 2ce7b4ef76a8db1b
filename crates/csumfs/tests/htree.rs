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

//! Directories that grow: a one-block linear directory that fills becomes
//! an htree (as the kernel's `make_indexed_dir`), its leaves split by
//! hash, its full root moves down a level and full index nodes split in
//! two — at 1 KiB and 4 KiB blocks (kernel read-back) and 64 KiB (e2fsck).
//! Every name is then found through the index, a third removed, and
//! `e2fsck -fn` (which checks every leaf's hashes against the index)
//! stays clean.

mod common;

use common::{assert_clean, have_e2fsprogs, mke2fs_with, with_kernel_mount, Scratch};
use csumfs::{NewInode, Options, Volume, ROOT};

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

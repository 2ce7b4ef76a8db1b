//! Block-mapped files (an ext3-style image, then `tune2fs -O extent`, as
//! an ext3 → ext4 upgrade leaves it): csumfs turns each file or directory
//! it changes into an extent-mapped one (the kernel's `ext4_ext_migrate`),
//! indirect blocks freed — then `e2fsck -fn` is clean and the kernel reads
//! the model back.

mod common;

use common::{assert_clean, have_e2fsprogs, tool, with_kernel_mount, Scratch};
use csumfs::{NewInode, Options, Volume, ROOT};
use std::process::Command;

const FLAG_EXTENTS: u32 = 0x8_0000;
const FILE: NewInode = NewInode { mode: 0o100_644, uid: 0, gid: 0 };

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(out.status.success(), "{cmd:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn block_mapped_files_and_directories_become_extent_mapped_when_changed() {
    if !have_e2fsprogs() || tool("tune2fs").is_none() {
        return;
    }
    for bs in ["1024", "4096"] {
        let scratch = Scratch::new(&format!("blockmap-{bs}"));
        let src = scratch.0.join("src");
        std::fs::create_dir_all(src.join("d")).unwrap();
        // Past the direct and single-indirect blocks at both sizes: double indirect.
        let big: Vec<u8> = (0..5u32 << 20).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
        let mid: Vec<u8> = (0..60_000u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(src.join("big"), &big).unwrap();
        std::fs::write(src.join("mid"), &mid).unwrap();
        std::fs::write(src.join("alloc"), &mid[..20_000]).unwrap();
        std::fs::write(src.join("d/small"), b"small").unwrap();
        let image = scratch.0.join("img");
        run(Command::new(tool("mke2fs").unwrap())
            .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal,^extent,^64bit", "-b", bs, "-d"])
            .arg(&src)
            .arg(&image)
            .arg("32M"));
        run(Command::new(tool("tune2fs").unwrap()).args(["-O", "extent"]).arg(&image));

        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let ino = |v: &Volume, p: &str| v.resolve(p).unwrap().ino;
        for path in ["/", "/big", "/mid", "/alloc", "/d", "/d/small"] {
            assert_eq!(v.resolve(path).unwrap().flags & FLAG_EXTENTS, 0, "{bs}: mke2fs block-mapped {path}");
        }
        let (big_ino, mid_ino, alloc_ino, d) = (ino(&v, "/big"), ino(&v, "/mid"), ino(&v, "/alloc"), ino(&v, "/d"));
        let free_before = v.statfs().free_blocks;
        // Converted by an overwrite in place: the extents are exactly the
        // block map's runs, joined where file and disk both continue (up
        // to an extent's 32 768 blocks), none left unwritten.
        let mut want_runs: Vec<(u64, u64, u64)> = Vec::new();
        for r in v.runs(&v.inode(big_ino).unwrap()).unwrap() {
            assert_eq!(r.len, 1, "{bs}: a block map's runs are single blocks");
            match want_runs.last_mut() {
                Some((l, n, p)) if *l + *n == r.logical && *p + *n == r.physical && *n < 32_768 => *n += 1,
                _ => want_runs.push((r.logical, 1, r.physical)),
            }
        }
        assert!(want_runs.len() > 1, "{bs}: the indirect blocks split the data");
        v.write(big_ino, 1 << 20, b"overwritten").unwrap();
        let got: Vec<_> = v.runs(&v.inode(big_ino).unwrap()).unwrap();
        assert!(got.iter().all(|r| !r.uninit), "{bs}");
        assert_eq!(got.iter().map(|r| (r.logical, r.len, r.physical)).collect::<Vec<_>>(), want_runs, "{bs}");
        v.write(big_ino, big.len() as u64, b"appended").unwrap();
        v.punch_hole(mid_ino, 8192, 16384).unwrap();
        v.truncate(mid_ino, 50_000).unwrap();
        let new = v.create(ROOT, b"new", FILE).unwrap();
        v.write(new.ino, 0, b"in a block-mapped root").unwrap();
        v.unlink(d, b"small").unwrap();
        // Fallocated past its end, from an unaligned offset: the file's
        // blocks stay, the new ones are one unwritten run of exactly the
        // blocks the range touches.
        let bsz = v.layout().block_size;
        let (at, len) = (30_100, 3 * bsz);
        let alloc = v.fallocate(alloc_ino, at, len, false).unwrap();
        assert_eq!(alloc.size, at + len, "{bs}");
        let unwritten: Vec<_> =
            v.runs(&alloc).unwrap().iter().filter(|r| r.uninit).map(|r| (r.logical, r.len)).collect();
        assert_eq!(unwritten, [(at / bsz, (at + len).div_ceil(bsz) - at / bsz)], "{bs}: the fallocated blocks");
        v.sync().unwrap();
        for i in [ROOT, big_ino, mid_ino, alloc_ino, d] {
            assert_ne!(v.inode(i).unwrap().flags & FLAG_EXTENTS, 0, "{bs}: inode {i} is extent-mapped now");
        }
        // The big file's indirect blocks were freed (its extents fit few blocks).
        assert!(v.statfs().free_blocks + 1 >= free_before, "{bs}: indirect blocks given back");
        drop(v);
        assert_clean(&image, &format!("migrating block maps at {bs}-byte blocks"));

        let mut want_big = big.clone();
        want_big[1 << 20..(1 << 20) + 11].copy_from_slice(b"overwritten");
        want_big.extend_from_slice(b"appended");
        let mut want_mid = mid[..50_000].to_vec();
        want_mid[8192..8192 + 16384].fill(0);
        let mut want_alloc = mid[..20_000].to_vec();
        want_alloc.resize(30_100 + 3 * bs.parse::<usize>().unwrap(), 0);
        let check = |read: &dyn Fn(&str) -> Vec<u8>| {
            assert!(read("big") == want_big, "{bs}: big");
            assert!(read("alloc") == want_alloc, "{bs}: alloc");
            assert!(read("mid") == want_mid, "{bs}: mid");
            assert_eq!(read("new"), b"in a block-mapped root");
        };
        let v = Volume::open(&image, Options::default()).unwrap();
        check(&|p: &str| v.read_all(&v.resolve(&format!("/{p}")).unwrap()).unwrap());
        assert!(v.resolve("/d/small").is_err());
        drop(v);
        let mnt = scratch.0.join("mnt");
        with_kernel_mount(&image, &mnt, || check(&|p: &str| std::fs::read(mnt.join(p)).unwrap()));
    }
}

#[test]
fn block_map_pointers_outside_the_filesystem_are_refused_and_its_last_block_is_not() {
    if !have_e2fsprogs() || tool("debugfs").is_none() {
        return;
    }
    let scratch = Scratch::new("blockmap-bounds");
    let image = scratch.0.join("img");
    common::mke2fs_with(&image, "1024", "4M", &["-O", "^extent,^64bit"]);
    common::debugfs_write(&image, "write /dev/null f");
    common::debugfs_write(&image, "sif /f size 2048");
    let blocks = 4096u64;
    // Block 1 of 1 KiB blocks holds the superblock (the first data block).
    for (first, ok) in [(blocks - 1, true), (2, true), (1, false), (blocks, false), (u64::from(u32::MAX), false)] {
        common::debugfs_write(&image, &format!("sif /f block[1] {first}"));
        let v = Volume::open(&image, Options::default()).unwrap();
        let inode = v.resolve("/f").unwrap();
        let runs = v.runs(&inode);
        match (ok, runs) {
            (true, Ok(runs)) => {
                assert_eq!(runs.iter().map(|r| (r.logical, r.physical)).collect::<Vec<_>>(), [(1, first)])
            }
            (false, Err(e)) => assert!(e.to_string().contains("outside the filesystem"), "block {first}: {e}"),
            (_, other) => panic!("block {first} of {blocks}: {other:?}"),
        }
    }
    // A size past the filesystem is refused before any pointer is read.
    common::debugfs_write(&image, &format!("sif /f size {}", (blocks + 1) * 1024));
    let v = Volume::open(&image, Options::default()).unwrap();
    let err = v.runs(&v.resolve("/f").unwrap()).unwrap_err();
    assert!(err.to_string().contains("exceeds the filesystem"), "{err}");
}

/// `chattr +e` and `-e` as the kernel's ext4 answers them, judged on two
/// copies of one upgraded ext3-style image: the kernel sets `+e` on a file
/// of 98 blocks past its single-indirect block, a one-block file and a
/// directory of several blocks, then `-e` on the one-block file (back to a
/// block map) and on the large file (`EOPNOTSUPP`: ext4 makes a block map
/// only of one extent within the first 12 blocks); csumfs's `set_flags`
/// does the same on the other copy. Every inode's flags and block map or
/// extents (debugfs's `stat`), the free block count and the contents must
/// be the same, and e2fsck passes both.
#[test]
fn chattr_e_converts_the_mapping_as_the_kernel_does() {
    if !have_e2fsprogs() || tool("tune2fs").is_none() || tool("chattr").is_none() {
        return;
    }
    let scratch = Scratch::new("chattr-e");
    let src = scratch.0.join("src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    let big: Vec<u8> = (0..100_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(src.join("big"), &big).unwrap();
    std::fs::write(src.join("small"), b"small\n").unwrap();
    for i in 0..60 {
        std::fs::write(src.join(format!("dir/an-entry-with-a-long-name-{i}")), b"").unwrap();
    }
    let [kernel, ours] = [scratch.0.join("kernel.img"), scratch.0.join("csumfs.img")];
    run(Command::new(tool("mke2fs").unwrap())
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal,^extent,^64bit", "-b", "1024", "-d"])
        .arg(&src)
        .arg(&kernel)
        .arg("32M"));
    run(Command::new(tool("tune2fs").unwrap()).args(["-O", "extent"]).arg(&kernel));
    std::fs::copy(&kernel, &ours).unwrap();

    let mnt = scratch.0.join("mnt");
    let mut said = Vec::new();
    if !common::kernel_mount_with(&kernel, &mnt, "loop") {
        return;
    }
    let chattr = |how: &str, path: &str| {
        let out = Command::new(tool("chattr").unwrap()).arg(how).arg(mnt.join(path)).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        (out.status.success(), err.contains("Operation not supported"))
    };
    for (how, path) in [("+e", "big"), ("+e", "small"), ("+e", "dir"), ("-e", "small"), ("-e", "big")] {
        said.push((how, path, chattr(how, path)));
    }
    common::kernel_umount(&mnt);
    assert_eq!(
        said.iter().map(|&(_, _, r)| r).collect::<Vec<_>>(),
        [(true, false), (true, false), (true, false), (true, false), (false, true)],
        "the kernel: {said:?}"
    );

    let mut v = Volume::open(&ours, Options { write: true, check_updates: true, ..Options::default() }).unwrap();
    for (how, path, (ok, _)) in said {
        let inode = v.resolve(&format!("/{path}")).unwrap();
        let flags = if how == "+e" { inode.flags | FLAG_EXTENTS } else { inode.flags & !FLAG_EXTENTS };
        match v.set_flags(inode.ino, flags) {
            Ok(set) => assert!(ok && set.flags == flags, "chattr {how} {path}: {:#x}", set.flags),
            Err(csumfs::Error::Unsupported { .. }) => {
                assert!(!ok, "chattr {how} {path}: refused");
                assert_eq!(v.inode(inode.ino).unwrap().raw, inode.raw, "a refusal changes nothing");
            }
            Err(e) => panic!("chattr {how} {path}: {e}"),
        }
    }
    v.sync().unwrap();
    drop(v);
    for image in [&kernel, &ours] {
        assert_clean(image, "chattr +e/-e");
    }
    // debugfs's view of each inode's flags and mapping, and of the free space.
    let view = |image: &std::path::Path| {
        let mut lines = Vec::new();
        for path in ["big", "small", "dir", "dir/an-entry-with-a-long-name-7"] {
            let out = Command::new(tool("debugfs").unwrap())
                .args(["-R", &format!("stat /{path}")])
                .arg(image)
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            let flags =
                text.lines().find(|l| l.contains("Flags:")).unwrap().split("Flags:").nth(1).unwrap().trim().to_string();
            let mapping =
                text.split_once("EXTENTS:").or_else(|| text.split_once("BLOCKS:")).map(|(_, m)| m.trim().to_string());
            lines.push(format!("{path}: flags {flags}, mapping {mapping:?}"));
        }
        let free = common::dumpe2fs(image).lines().find(|l| l.starts_with("Free blocks:")).unwrap().to_string();
        lines.push(free);
        lines
    };
    assert_eq!(view(&ours), view(&kernel));
    let v = Volume::open(&ours, Options::default()).unwrap();
    assert!(v.read_all(&v.resolve("/big").unwrap()).unwrap() == big);
    assert_eq!(v.read_all(&v.resolve("/small").unwrap()).unwrap(), b"small\n");
    assert_eq!(v.read_dir(&v.resolve("/dir").unwrap()).unwrap().len(), 62);
}

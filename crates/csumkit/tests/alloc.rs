//! The block-group allocator: every strategy in lockstep against a naive
//! model of the allocation policy, byte-identical media, `verify` after
//! every step, corrupt images and bad ranges rejected with typed errors.

mod common;

use common::{bitwise, proptest_config, Params};
use csumkit::alloc::{File, Geometry, Run, Strategy as AllocStrategy, Volume, DESC_SIZE};
use csumkit::Error;
use proptest::prelude::*;

/// Raw CRC32C with a seed (ext4's `ext4_chksum`), bit at a time.
fn raw_crc32c_reference(seed: u32, data: &[u8]) -> u32 {
    let params = Params { width: 32, poly: 0x1EDC_6F41, reflected: true, init: u64::from(seed), xorout: 0 };
    bitwise(params, data) as u32
}

/// The allocation policy on a `Vec<bool>`, written for clarity: the free run
/// at the goal; else the first free extent of at least `want` blocks from the
/// goal on (goal's group, later groups wrapping, goal's group before the
/// goal); else the first free extent in that order. Runs stay in one group.
fn naive_allocate(used: &mut [bool], g: &Geometry, goal: u64, want: u32) -> Option<Run> {
    let bpg = u64::from(g.blocks_per_group);
    let groups = g.groups();
    let goal = if goal < g.blocks_count { goal } else { 0 };
    let group_end = |b: u64| ((b / bpg + 1) * bpg).min(g.blocks_count);
    let free_len = |s: u64| (s..group_end(s)).take_while(|&b| !used[b as usize]).count() as u64;
    let take = |used: &mut [bool], start: u64, len: u64| {
        used[start as usize..(start + len) as usize].fill(true);
        Some(Run { start, len: len as u32 })
    };
    if !used[goal as usize] {
        let len = free_len(goal).min(u64::from(want));
        return take(used, goal, len);
    }
    let (goal_group, base) = (goal / bpg, goal / bpg * bpg);
    let mut order = vec![(goal, group_end(goal))];
    order.extend((1..groups).map(|i| {
        let grp = (goal_group + i) % groups;
        (grp * bpg, group_end(grp * bpg))
    }));
    order.push((base, goal));
    let is_start = |s: u64| !used[s as usize] && (s.is_multiple_of(bpg) || used[s as usize - 1]);
    for &(from, to) in &order {
        if let Some(s) = (from..to).find(|&s| is_start(s) && free_len(s) >= u64::from(want)) {
            return take(used, s, u64::from(want));
        }
    }
    for &(from, to) in &order {
        if let Some(s) = (from..to).find(|&s| !used[s as usize]) {
            let len = free_len(s).min(u64::from(want));
            return take(used, s, len);
        }
    }
    None
}

#[derive(Clone, Debug)]
enum Op {
    Allocate {
        goal: u64,
        want: u32,
    },
    /// Free part of one of the runs allocated above.
    Free {
        run: usize,
        skip: u32,
        len: u32,
    },
    /// A range that must be refused: double free, metadata, past the end.
    BadFree {
        kind: u8,
        at: u64,
    },
    Fallocate {
        file: usize,
        logical: u32,
        len: u32,
    },
    Truncate {
        file: usize,
        end: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<u64>(), 1u32..600).prop_map(|(goal, want)| Op::Allocate { goal, want }),
        2 => (any::<usize>(), any::<u32>(), any::<u32>()).prop_map(|(run, skip, len)| Op::Free { run, skip, len }),
        1 => (0u8..3, any::<u64>()).prop_map(|(kind, at)| Op::BadFree { kind, at }),
        4 => (0usize..3, 0u32..3000, 1u32..400).prop_map(|(file, logical, len)| Op::Fallocate { file, logical, len }),
        1 => (0usize..3, 0u32..3000).prop_map(|(file, end)| Op::Truncate { file, end }),
    ]
}

fn geometry() -> impl Strategy<Value = Geometry> {
    (prop_oneof![Just(1024u32), Just(2048), Just(4096)], 1u32..=64, 1u64..=5, any::<u32>())
        .prop_map(|(block_size, k, groups, tail)| {
            let blocks_per_group = 8 * (k * block_size / 64).max(8);
            let tail = u64::from(tail % blocks_per_group) + 1;
            Geometry { block_size, blocks_per_group, blocks_count: (groups - 1) * u64::from(blocks_per_group) + tail }
        })
        .prop_filter("geometry ext4 would build", |g| g.validate().is_ok())
}

/// Asserts that all volumes hold byte-identical media and pass verification.
fn check_all(volumes: &[Volume], files: &[Vec<File>], runs: &[Run]) {
    let image = volumes[0].to_image();
    for (v, fs) in volumes.iter().zip(files) {
        assert_eq!(v.to_image(), image, "{:?} media differ from {:?}", v.strategy(), volumes[0].strategy());
        for (f, f0) in fs.iter().zip(&files[0]) {
            let leaves: Vec<_> = f.leaves().iter().map(|l| (l.block, l.as_media())).collect();
            let leaves0: Vec<_> = f0.leaves().iter().map(|l| (l.block, l.as_media())).collect();
            assert_eq!(leaves, leaves0, "{:?}: extent leaves differ", v.strategy());
            for leaf in f.leaves() {
                let tail = leaf.as_media().len() - leaf.as_media().len() % 12;
                assert_eq!(leaf.stored_checksum(), raw_crc32c_reference(f.csum_seed(), &leaf.as_media()[..tail]));
            }
        }
        v.verify_with_files(&fs.iter().collect::<Vec<_>>(), runs).unwrap_or_else(|e| panic!("{:?}: {e}", v.strategy()));
    }
    let v = &volumes[0];
    for g in 0..v.geometry().groups() {
        assert_eq!(v.descriptor(g).unwrap().bitmap_csum(), raw_crc32c_reference(v.csum_seed(), v.bitmap(g).unwrap()));
    }
}

fn mapped(file: &File, upto: usize) -> Vec<bool> {
    let mut out = vec![false; upto];
    for e in file.extents() {
        out[e.logical as usize..e.logical_end() as usize].fill(true);
    }
    out
}

proptest! {
    #![proptest_config(proptest_config(256))]

    #[test]
    fn strategies_agree_with_each_other_and_the_naive_policy(
        geometry in geometry(),
        uuid in any::<[u8; 16]>(),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut volumes: Vec<Volume> =
            AllocStrategy::LADDER.iter().map(|&(_, s)| Volume::new(geometry, uuid, s).unwrap()).collect();
        let seed = volumes[0].csum_seed();
        let mut files: Vec<Vec<File>> =
            volumes.iter().map(|_| (0..3).map(|i| File::new(seed, 12 + i, 7 * i)).collect()).collect();
        let mut naive: Vec<bool> = (0..geometry.blocks_count).map(|b| volumes[0].is_allocated(b)).collect();
        let mut runs: Vec<Run> = Vec::new();
        for op in ops {
            match op {
                Op::Allocate { goal, want } => {
                    let goal = goal % (geometry.blocks_count + 16);
                    let expected = naive_allocate(&mut naive, &geometry, goal, want);
                    for v in &mut volumes {
                        match (v.allocate(goal, want), expected) {
                            (Ok(run), Some(exp)) => prop_assert_eq!(run, exp),
                            (Err(Error::Alloc(csumkit::alloc::AllocError::NoSpace { .. })), None) => {}
                            (got, exp) => prop_assert!(false, "{:?}: got {:?}, naive {:?}", v.strategy(), got, exp),
                        }
                    }
                    runs.extend(expected);
                }
                Op::Free { run, skip, len } if !runs.is_empty() => {
                    let i = run % runs.len();
                    let r = runs[i];
                    let skip = skip % r.len;
                    let len = len % (r.len - skip) + 1;
                    for v in &mut volumes {
                        v.free(r.start + u64::from(skip), u64::from(len)).unwrap();
                    }
                    naive[(r.start + u64::from(skip)) as usize..(r.start + u64::from(skip + len)) as usize].fill(false);
                    runs.swap_remove(i);
                    if skip > 0 {
                        runs.push(Run { start: r.start, len: skip });
                    }
                    if skip + len < r.len {
                        runs.push(Run { start: r.start + u64::from(skip + len), len: r.len - skip - len });
                    }
                }
                Op::Free { .. } => {}
                Op::BadFree { kind, at } => {
                    let (start, len) = match kind {
                        0 => (0, 1), // the superblock
                        1 => (geometry.blocks_count - 1, 2),
                        _ => match (0..geometry.blocks_count).map(|b| (at + b) % geometry.blocks_count).find(|&b| !naive[b as usize]) {
                            Some(b) => (b, 1),
                            None => (u64::MAX, 2),
                        },
                    };
                    let before = volumes[0].to_image();
                    for v in &mut volumes {
                        let refused = matches!(v.free(start, len), Err(Error::BadBlockRange { .. }));
                        prop_assert!(refused, "free({}, {}) accepted", start, len);
                    }
                    prop_assert_eq!(volumes[0].to_image(), before);
                }
                Op::Fallocate { file, logical, len } => {
                    let mut expected = mapped(&files[0][file], 3400);
                    let result: Vec<_> = volumes
                        .iter_mut()
                        .zip(&mut files)
                        .map(|(v, fs)| v.fallocate(&mut fs[file], logical, len).map_err(|e| e.to_string()))
                        .collect();
                    prop_assert!(result.iter().all(|r| *r == result[0]), "{:?}", result);
                    if result[0].is_ok() {
                        expected[logical as usize..(logical + len) as usize].fill(true);
                        prop_assert_eq!(mapped(&files[0][file], 3400), expected);
                    }
                    for b in 0..geometry.blocks_count {
                        naive[b as usize] = volumes[0].is_allocated(b);
                    }
                }
                Op::Truncate { file, end } => {
                    for (v, fs) in volumes.iter_mut().zip(&mut files) {
                        v.truncate(&mut fs[file], end).unwrap();
                    }
                    let expected: Vec<bool> = (0..3400).map(|b| b < end as usize && mapped(&files[0][file], 3400)[b]).collect();
                    prop_assert_eq!(mapped(&files[0][file], 3400), expected);
                    for b in 0..geometry.blocks_count {
                        naive[b as usize] = volumes[0].is_allocated(b);
                    }
                }
            }
            check_all(&volumes, &files, &runs);
        }
    }
}

/// A fragmented volume forces one-block extents: leaves fill, split on
/// appends and on inserts in the middle, and empty again on truncate.
#[test]
fn leaf_splits_and_merges_stay_consistent() {
    let geometry = Geometry::ext4(1024, 2048, 4).unwrap();
    for &(name, strategy) in &AllocStrategy::LADDER {
        let mut volume = Volume::new(geometry, [3; 16], strategy).unwrap();
        // Take every other block, so that no two free blocks are adjacent.
        let mut taken = Vec::new();
        for b in (0..geometry.blocks_count).step_by(2) {
            if !volume.is_allocated(b) {
                taken.push(volume.allocate(b, 1).unwrap());
            }
        }
        let mut file = File::new(volume.csum_seed(), 12, 1);
        for logical in (0..600).rev().step_by(3) {
            volume.fallocate(&mut file, logical, 1).unwrap(); // inserts at the front
        }
        volume.fallocate(&mut file, 0, 900).unwrap(); // fills the holes: inserts in the middle
        assert!(file.leaves().len() > 5, "{name}: {} leaves", file.leaves().len());
        assert_eq!(file.blocks(), 900);
        volume.verify_with_files(&[&file], &taken).unwrap();
        volume.truncate(&mut file, 450).unwrap();
        assert_eq!(file.blocks(), 450);
        volume.verify_with_files(&[&file], &taken).unwrap();
        volume.truncate(&mut file, 0).unwrap();
        assert!(file.leaves().is_empty());
        volume.verify_with_files(&[&file], &taken).unwrap();
    }
}

#[test]
fn sequential_fallocate_grows_extents_up_to_the_unwritten_limit() {
    let geometry = Geometry::ext4(4096, u32::MAX, 3).unwrap();
    let mut volume = Volume::new(geometry, [9; 16], AllocStrategy::FREE_SPACE_TREE).unwrap();
    let mut file = File::new(volume.csum_seed(), 12, 0);
    for chunk in 0..1000u32 {
        volume.fallocate(&mut file, chunk * 64, 64).unwrap();
    }
    let extents: Vec<_> = file.extents().collect();
    assert!(extents.iter().all(|e| e.unwritten && e.len <= csumkit::alloc::MAX_UNWRITTEN_LEN));
    // An extent ends only where it must: at the length limit or a group end.
    let bpg = u64::from(geometry.blocks_per_group);
    for e in &extents[..extents.len() - 1] {
        assert!(e.len == csumkit::alloc::MAX_UNWRITTEN_LEN || e.physical_end().is_multiple_of(bpg), "{e:?}");
    }
    assert_eq!(extents.len(), 2);
    assert_eq!(file.blocks(), 64_000);
    volume.verify_with_files(&[&file], &[]).unwrap();
}

#[test]
fn full_volume_reports_no_space_and_keeps_what_it_allocated() {
    let geometry = Geometry::ext4(1024, 256, 2).unwrap();
    let mut volume = Volume::new(geometry, [1; 16], AllocStrategy::BEFORE).unwrap();
    let free = volume.free_blocks();
    let mut file = File::new(volume.csum_seed(), 12, 0);
    let err = volume.fallocate(&mut file, 0, 10_000).unwrap_err();
    assert!(matches!(err, Error::Alloc(csumkit::alloc::AllocError::NoSpace { .. })), "{err}");
    assert_eq!(volume.free_blocks(), 0);
    assert_eq!(file.blocks() + file.leaves().len() as u64, free);
    volume.verify_with_files(&[&file], &[]).unwrap();
    assert!(matches!(volume.allocate(0, 1), Err(Error::Alloc(csumkit::alloc::AllocError::NoSpace { .. }))));
    assert!(matches!(volume.allocate(0, 0), Err(Error::BadBlockRange { .. })));
    let err = volume.fallocate(&mut file, u32::MAX, 2).unwrap_err();
    assert!(matches!(err, Error::TooLarge { .. }), "{err}");
}

#[test]
fn images_round_trip_and_every_corruption_is_a_typed_error() {
    let geometry = Geometry::ext4(2048, 4096, 3).unwrap();
    let mut volume = Volume::new(geometry, [5; 16], AllocStrategy::CRC_SPLICE).unwrap();
    let mut file = File::new(volume.csum_seed(), 12, 0);
    volume.fallocate(&mut file, 0, 5000).unwrap();
    let image = volume.to_image();
    let loaded = Volume::load(&image, AllocStrategy::FREE_SPACE_TREE).unwrap();
    assert_eq!(loaded.to_image(), image);
    loaded.verify_with_files(&[&file], &[]).unwrap();

    // Every single-byte change after the header is caught (header bytes are
    // covered by the header checksum).
    let header_and_descs = 64 + 3 * DESC_SIZE;
    for at in (0..image.len()).step_by(7).chain(0..header_and_descs) {
        let mut bad = image.clone();
        bad[at] ^= 0x10;
        match Volume::load(&bad, AllocStrategy::BEFORE) {
            Err(Error::Corrupt { .. } | Error::Invalid { .. }) => {}
            other => panic!("byte {at}: {:?}", other.map(|_| ())),
        }
    }
    for len in [0, 10, 63, 64, image.len() - 1] {
        let err = Volume::load(&image[..len], AllocStrategy::BEFORE).map(|_| ()).unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{len}: {err}");
        // The header is whole from 64 bytes on: the error is then about
        // what follows it, not a short header.
        assert_eq!(err.to_string().contains("shorter than the 64-byte header"), len < 64, "{len}: {err}");
    }
    // A leaked block (allocated, owned by nobody) is found.
    let mut leaky = Volume::load(&image, AllocStrategy::BEFORE).unwrap();
    leaky.allocate(0, 1).unwrap();
    let err = leaky.verify_with_files(&[&file], &[]).unwrap_err();
    assert!(err.to_string().contains("leaked"), "{err}");
}

/// Checks the checksum rules against images made by the real mke2fs and
/// debugfs (e2fsprogs): descriptor checksums, block bitmap checksums and an
/// extent leaf written by libext2fs's fallocate.
#[test]
fn checksums_match_e2fsprogs() {
    let dir = std::env::temp_dir().join(format!("csumkit-alloc-ext4-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mkfs = ["/usr/sbin/mke2fs", "/sbin/mke2fs"].into_iter().find(|p| std::path::Path::new(p).exists());
    let Some(mkfs) = mkfs else {
        common::skip("mke2fs", "apt-get install e2fsprogs");
        return;
    };
    for block_size in [1024u32, 4096] {
        let image = dir.join(format!("ext4-{block_size}.img"));
        let status = std::process::Command::new(mkfs)
            .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,64bit,^resize_inode", "-b"])
            .arg(block_size.to_string())
            .args(["-U", "6b33f6a4-0f4c-4b5e-9c1a-2f0e8f6f6d01", "-E", "lazy_itable_init=1"])
            .arg(&image)
            .arg("16M")
            .status()
            .unwrap();
        assert!(status.success());
        // Extents at logical 0, 4, 8, … make more than the 4 that fit in the
        // inode, so the tree gets a leaf block.
        let mut commands = String::from("write /dev/null f\n");
        for i in 0..20 {
            commands += &format!("fallocate f {} {}\n", i * 4, i * 4);
        }
        let script = dir.join("cmds");
        std::fs::write(&script, commands).unwrap();
        let out = std::process::Command::new(std::path::Path::new(mkfs).with_file_name("debugfs"))
            .args(["-w", "-f"])
            .arg(&script)
            .arg(&image)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

        let img = std::fs::read(&image).unwrap();
        let le32 = |at: usize| u32::from_le_bytes(img[at..at + 4].try_into().unwrap());
        let le16 = |at: usize| u16::from_le_bytes([img[at], img[at + 1]]);
        let sb = 1024;
        let bs = 1024usize << le32(sb + 0x18);
        assert_eq!(bs, block_size as usize);
        let blocks_per_group = le32(sb + 0x20) as usize;
        let inodes_per_group = le32(sb + 0x28) as usize;
        let inode_size = usize::from(le16(sb + 0x58));
        let desc_size = usize::from(le16(sb + 0xFE));
        assert_eq!(desc_size, DESC_SIZE);
        let seed = raw_crc32c_reference(!0, &img[sb + 0x68..sb + 0x78]);
        let gdt = (le32(sb + 0x14) as usize + 1) * bs;
        let groups = (le32(sb + 0x04) as usize - le32(sb + 0x14) as usize).div_ceil(blocks_per_group);
        let mut bitmaps_checked = 0;
        for g in 0..groups {
            let raw: [u8; DESC_SIZE] = img[gdt + g * DESC_SIZE..gdt + (g + 1) * DESC_SIZE].try_into().unwrap();
            let desc = csumkit::alloc::Descriptor::from_media(raw);
            assert_eq!(desc.compute_checksum(seed, g as u32), desc.checksum(), "{bs}: group {g} descriptor");
            if desc.flags() & 0x2 == 0 {
                let at = desc.block_bitmap() as usize * bs;
                let bitmap = &img[at..at + blocks_per_group / 8];
                assert_eq!(desc.bitmap_csum(), raw_crc32c_reference(seed, bitmap), "{bs}: group {g} bitmap");
                bitmaps_checked += 1;
            }
        }
        assert!(bitmaps_checked > 0);

        // Inode 12 is the file; its i_block holds an index node pointing at the leaf.
        let inode_table = (le32(gdt + 0x08) as usize | (le32(gdt + 0x28) as usize) << 32) * bs;
        assert!(11 < inodes_per_group);
        let inode = inode_table + 11 * inode_size;
        let i_block = inode + 0x28;
        assert_eq!(le16(i_block), 0xF30A);
        assert_eq!(le16(i_block + 6), 1, "{bs}: expected a depth-1 tree");
        let leaf_block = u64::from(le32(i_block + 12 + 4)) | u64::from(le16(i_block + 12 + 8)) << 32;
        let file = File::new(seed, 12, le32(inode + 0x64));
        let leaf_bytes = &img[leaf_block as usize * bs..(leaf_block as usize + 1) * bs];
        let leaf = csumkit::alloc::Leaf::parse(leaf_block, leaf_bytes, file.csum_seed()).unwrap();
        assert_eq!(leaf.len(), 20);
        assert!((0..20).all(|i| leaf.get(i).logical == 4 * i as u32 && leaf.get(i).unwritten));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Truncating a file against the wrong volume is refused before anything
/// is freed: neither volume nor file changes.
#[test]
fn truncate_of_a_foreign_file_changes_nothing() {
    let geometry = Geometry::ext4(1024, 1024, 4).unwrap();
    let mut home = Volume::new(geometry, [1; 16], AllocStrategy::CRC_SPLICE).unwrap();
    let mut other = Volume::new(geometry, [1; 16], AllocStrategy::CRC_SPLICE).unwrap();
    let mut file = File::new(home.csum_seed(), 12, 0);
    home.fallocate(&mut file, 0, 500).unwrap();
    // The other volume has only some of those blocks allocated.
    other.allocate(file.extents().next().unwrap().physical, 10).unwrap();
    let (image, before) = (other.to_image(), file.clone());
    let err = other.truncate(&mut file, 100).unwrap_err();
    assert!(matches!(err, Error::BadBlockRange { .. }), "{err}");
    assert_eq!(other.to_image(), image);
    assert_eq!(file, before);
    home.truncate(&mut file, 100).unwrap();
    home.verify_with_files(&[&file], &[]).unwrap();
}

//! `csumkit::ext4::check` against images made and changed by e2fsprogs
//! (mke2fs, debugfs, e2fsck): clean images check clean in every layout;
//! `flip_range` and `splice` applied to the old stored checksums give
//! exactly what e2fsprogs wrote after a change; and every injected
//! corruption is reported both by `check` and by `e2fsck -fn` (the oracle).

mod common;

use common::ext4::{
    checksum_only_damage_is_repairable, counts_match_the_image, debugfs, debugfs_read, e2fsck_reports, le16, le32,
    mke2fs, scratch_image, tool, Scratch,
};

use csumkit::crc32c;
use csumkit::ext4::{check, Layout};
use std::path::Path;
use std::process::Command;

/// A directory of many entries, a file whose extents need a leaf block,
/// then `e2fsck -fyD` to index the big directory as an htree.
fn populate(image: &Path) {
    let mut cmds = String::from("mkdir big\nmkdir small\nwrite /dev/null small/a\nwrite /dev/null frag\n");
    for i in 0..400 {
        cmds += &format!("write /dev/null big/entry_with_a_fairly_long_name_{i:04}\n");
    }
    for i in 0..12 {
        cmds += &format!("fallocate frag {} {}\n", i * 4, i * 4);
    }
    debugfs(image, &cmds);
    let out = Command::new(tool("e2fsck").unwrap()).arg("-fyD").arg(image).output().unwrap();
    assert!(out.status.code().unwrap_or(8) <= 1, "e2fsck -fyD: {}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn clean_images_check_clean_in_every_layout() {
    let scratch = Scratch::new("layouts");
    let configs: &[(u32, &str, &[&str])] = &[
        (1024, "metadata_csum,64bit", &[]),
        (4096, "metadata_csum,64bit", &[]),
        (4096, "metadata_csum,^64bit", &[]),
        (4096, "metadata_csum,64bit,metadata_csum_seed", &[]),
        (4096, "metadata_csum,64bit,meta_bg,^resize_inode", &[]),
        (4096, "metadata_csum,64bit,bigalloc", &["-C", "16384"]),
        (2048, "metadata_csum,64bit,^flex_bg", &[]),
        (65536, "metadata_csum,64bit", &[]),
    ];
    for &(bs, features, extra) in configs {
        let image = scratch.0.join(format!("clean-{bs}.img"));
        let size = if bs == 65536 { "256M" } else { "48M" };
        if !mke2fs(&image, bs, features, extra, size) {
            return;
        }
        populate(&image);
        let bytes = std::fs::read(&image).unwrap();
        let report = check(&bytes).unwrap();
        let c = &report.checked;
        assert!(report.findings.is_empty() && report.missing_tails.is_empty(), "{bs} {features}: {report:?}");
        assert!(
            c.descriptors > 0 && c.block_bitmaps > 0 && c.inode_bitmaps > 0 && c.inodes > 400,
            "{bs} {features}: {c:?}"
        );
        assert!(c.dir_blocks > 2 && c.extent_blocks > 0, "{bs} {features}: {c:?}");
        if bs < 65536 {
            assert!(c.htree_blocks > 0, "{bs} {features}: e2fsck -D should index the big directory: {c:?}");
        }
        assert!(!e2fsck_reports(&image), "{bs} {features}: e2fsck disagrees");
        counts_match_the_image(&report, &bytes, &format!("{bs} {features}"));
        checksum_only_damage_is_repairable(&bytes, &format!("{bs} {features}"));
    }
}

/// Group 0's block bitmap bytes and stored checksum.
fn block_bitmap(bytes: &[u8]) -> (Vec<u8>, u32, Layout) {
    let layout = Layout::parse(bytes).unwrap();
    let g = layout.group(bytes, 0).unwrap();
    let at = (g.block_bitmap * layout.block_size) as usize;
    let bitmap = bytes[at..at + (layout.clusters_per_group / 8) as usize].to_vec();
    let d = g.desc_offset as usize;
    let stored = u32::from(le16(bytes, d + 0x18)) | u32::from(le16(bytes, d + 0x38)) << 16;
    (bitmap, stored, layout)
}

/// Changed byte runs between two equal-length buffers, runs closer than
/// `gap` bytes merged: (offset, old, new).
fn diff_runs<'a>(old: &'a [u8], new: &'a [u8], gap: usize) -> Vec<(usize, &'a [u8], &'a [u8])> {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for i in (0..old.len()).filter(|&i| old[i] != new[i]) {
        match runs.last_mut() {
            Some((_, end)) if i <= *end + gap => *end = i + 1,
            _ => runs.push((i, i + 1)),
        }
    }
    runs.into_iter().map(|(s, e)| (s, &old[s..e], &new[s..e])).collect()
}

fn splice_all(mut crc: u32, total: usize, old: &[u8], new: &[u8]) -> (u32, usize) {
    let runs = diff_runs(old, new, 16);
    for (at, o, n) in &runs {
        crc = crc32c::splice(crc, total as u64, *at as u64, o, n).unwrap();
    }
    (crc, runs.len())
}

#[test]
fn flip_range_reproduces_e2fsprogs_bitmap_checksums() {
    let scratch = Scratch::new("flip");
    for bs in [1024u32, 4096] {
        let image = scratch.0.join(format!("flip-{bs}.img"));
        if !mke2fs(&image, bs, "metadata_csum,64bit", &[], "32M") {
            return;
        }
        let (mut bitmap, mut csum, layout) = block_bitmap(&std::fs::read(&image).unwrap());
        let bits = layout.clusters_per_group;
        let first = layout.first_data_block;
        // Runs of free blocks marked used, then parts freed again.
        for (cmd, start, len) in [
            ("setb", 3000u64, 37u64),
            ("setb", 4001, 1),
            ("setb", 5000, 1500),
            ("freeb", 5100, 700),
            ("freeb", 3000, 37),
        ] {
            debugfs(&image, &format!("{cmd} {start} {len}\n"));
            let (new_bitmap, new_csum, _) = block_bitmap(&std::fs::read(&image).unwrap());
            let (offset, flipped) = (start - first, len);
            let predicted = crc32c::flip_range(csum, bits, offset, flipped).unwrap();
            assert_eq!(predicted, new_csum, "{bs}: {cmd} {start} {len}");
            // And the flip is exactly the bits debugfs changed.
            for bit in 0..bits {
                let (o, n) =
                    (bitmap[(bit / 8) as usize] >> (bit % 8) & 1, new_bitmap[(bit / 8) as usize] >> (bit % 8) & 1);
                assert_eq!(o != n, (offset..offset + flipped).contains(&bit), "{bs}: bit {bit}");
            }
            (bitmap, csum) = (new_bitmap, new_csum);
        }
    }
}

/// Inode 12's (the first file's) extent leaf, or a directory's block,
/// before and after e2fsprogs changes it; `splice` over the changed bytes
/// predicts the new stored checksum.
#[test]
fn splice_reproduces_e2fsprogs_extent_and_directory_checksums() {
    let scratch = Scratch::new("splice");
    for bs in [1024u32, 4096] {
        let image = scratch.0.join(format!("splice-{bs}.img"));
        if !mke2fs(&image, bs, "metadata_csum,64bit", &[], "32M") {
            return;
        }
        let mut cmds = String::from("write /dev/null f\nmkdir d\n");
        for i in 0..8 {
            cmds += &format!("fallocate f {} {}\n", i * 4, i * 4);
        }
        debugfs(&image, &cmds);
        let bsz = bs as usize;
        let inode = |bytes: &[u8], inum: u64| -> usize {
            let layout = Layout::parse(bytes).unwrap();
            let g = layout.group(bytes, 0).unwrap();
            (g.inode_table * layout.block_size + (inum - 1) * layout.inode_size) as usize
        };
        let before = std::fs::read(&image).unwrap();
        let ino = inode(&before, 12);
        assert_eq!(le16(&before, ino + 0x28 + 6), 1, "depth-1 extent tree");
        let leaf = (u64::from(le32(&before, ino + 0x28 + 12 + 4)) * u64::from(bs)) as usize;
        let max = usize::from(le16(&before, leaf + 4));
        let tail = 12 + 12 * max;
        let d_ino = inode(&before, 13);
        let dir_block = (u64::from(le32(&before, d_ino + 0x28 + 12 + 8)) * u64::from(bs)) as usize;

        let mut cmds = String::new();
        for i in 8..12 {
            cmds += &format!("fallocate f {} {}\n", i * 4, i * 4);
        }
        cmds += "write /dev/null d/new_entry_name\nwrite /dev/null d/second\n";
        debugfs(&image, &cmds);
        let after = std::fs::read(&image).unwrap();

        let (old, new) = (&before[leaf..leaf + tail], &after[leaf..leaf + tail]);
        let (predicted, runs) = splice_all(le32(&before, leaf + tail), tail, old, new);
        assert!(runs > 0);
        assert_eq!(predicted, le32(&after, leaf + tail), "{bs}: extent leaf");

        let covered = bsz - 12;
        let (old, new) = (&before[dir_block..dir_block + covered], &after[dir_block..dir_block + covered]);
        let (predicted, runs) = splice_all(le32(&before, dir_block + bsz - 4), covered, old, new);
        assert!(runs > 0);
        assert_eq!(predicted, le32(&after, dir_block + bsz - 4), "{bs}: directory block");
        assert!(check(&after).unwrap().findings.is_empty());
    }
}

#[test]
fn every_injected_corruption_is_reported_by_check_and_e2fsck() {
    let Some((_scratch, image)) = scratch_image("corrupt", "base.img", 4096, "metadata_csum,64bit", &[], "48M") else {
        return;
    };
    populate(&image);
    let clean = std::fs::read(&image).unwrap();
    let layout = Layout::parse(&clean).unwrap();
    let g0 = layout.group(&clean, 0).unwrap();
    let bs = layout.block_size as usize;
    let ino = |inum: u64| (g0.inode_table as usize * bs) + (inum as usize - 1) * layout.inode_size as usize;
    // Inode 12 is `big` (htree), 13 `small`, 15 `frag` (extent leaf).
    let htree_root = le32(&clean, ino(12) + 0x28 + 12 + 8) as usize * bs;
    let small_dir = le32(&clean, ino(13) + 0x28 + 12 + 8) as usize * bs;
    let frag_leaf = le32(&clean, ino(15) + 0x28 + 12 + 4) as usize * bs;
    assert_eq!(le16(&clean, ino(15) + 0x28 + 6), 1, "frag has an extent leaf");
    // (label, byte, structure, whether rewriting its checksum is a safe
    // repair: no when the change made the content itself inconsistent).
    let cases: &[(&str, usize, u8, &str, bool)] = &[
        ("superblock s_volume_name", 1024 + 0x78, 0x5A, "superblock", true),
        ("descriptor bg_itable_unused", g0.desc_offset as usize + 0x1C, 0x5A, "group descriptor", true),
        // A free count (its high half with 64bit) no longer agrees with the bitmap.
        ("descriptor bg_free_blocks_count_hi", g0.desc_offset as usize + 0x2C, 0x5A, "group descriptor", false),
        ("descriptor bg_free_inodes_count_lo", g0.desc_offset as usize + 0x0E, 0x5A, "group descriptor", false),
        // Padding bits past the last block: the free count no longer matches.
        ("block bitmap", g0.block_bitmap as usize * bs + 2000, 0x5A, "block bitmap", false),
        ("inode bitmap", g0.inode_bitmap as usize * bs + 100, 0x5A, "inode bitmap", false),
        ("inode i_mtime", ino(13) + 0x10, 0x5A, "inode", true),
        // ee_len of frag's first extent: blocks now free in the bitmap or shared.
        ("extent leaf entry", frag_leaf + 12 + 4, 0x5A, "extent block", false),
        // small/a renamed (';'): sound. The '..' entry's name: not sound.
        ("directory entry name", small_dir + 24 + 8, 0x5A, "directory block", true),
        ("directory '..' name", small_dir + 12 + 8, 0x5A, "directory block", false),
        // An index hash's continuation bit (e2fsck and the lookup ranges
        // mask it): sound, and e2fsck agrees after the repair.
        ("htree root hash", htree_root + 0x20 + 8, 0x01, "htree block", true),
    ];
    for &(label, at, mask, what, repairable) in cases {
        let mut bytes = clean.clone();
        bytes[at] ^= mask;
        let report = check(&bytes).unwrap();
        assert!(!report.clean(), "{label}: called clean");
        let finding = report.findings.iter().find(|f| f.what == what);
        let finding = finding.unwrap_or_else(|| panic!("{label}: check missed it: {:?}", report.findings));
        assert_eq!(finding.repairable(), repairable, "{label}: {:?}", finding.damage);
        std::fs::write(&image, &bytes).unwrap();
        assert!(e2fsck_reports(&image), "{label}: e2fsck -fn missed it");
        // Repair as the CLI does: apply the safe fixes until none is left
        // (a bitmap fix changes its descriptor's checksum).
        for _ in 0..3 {
            let report = check(&bytes).unwrap();
            for (at, fix) in report.findings.iter().filter(|f| f.repairable()).flat_map(|f| &f.fix) {
                bytes[*at as usize..*at as usize + fix.len()].copy_from_slice(fix);
            }
        }
        let left = check(&bytes).unwrap().findings;
        if repairable {
            assert!(left.is_empty(), "{label}: repair left {left:?}");
            std::fs::write(&image, &bytes).unwrap();
            assert!(!e2fsck_reports(&image), "{label}: re-sealed, but e2fsck -fn still finds damage");
        } else {
            assert!(left.iter().any(|f| f.what == what && !f.repairable()), "{label}: damage was re-sealed");
        }
    }
    // An index hash past the next one, or past every name of the leaf it
    // starts: the index is wrong, not its checksum.
    for (label, hash) in [("htree hash past the next", 0xFFFF_FFF0u32), ("htree hash below the first", 2)] {
        let mut bytes = clean.clone();
        bytes[htree_root + 0x20 + 8..][..4].copy_from_slice(&hash.to_le_bytes());
        let report = check(&bytes).unwrap();
        let finding = report.findings.iter().find(|f| f.what == "htree block").expect("the root's checksum");
        assert!(!finding.repairable(), "{label}: {finding:?}");
        std::fs::write(&image, &bytes).unwrap();
        assert!(e2fsck_reports(&image), "{label}: e2fsck -fn missed it");
    }
    // The clean image is clean for both.
    std::fs::write(&image, &clean).unwrap();
    assert!(!e2fsck_reports(&image));
    assert!(check(&clean).unwrap().findings.is_empty());
}

/// Mounts `image` with the kernel's ext4 (loop), runs `work` on the mount
/// point, unmounts. `false` (and a visible skip line) where mounting is
/// refused: it needs root and loop devices.
fn with_kernel_mount(image: &Path, work: impl FnOnce(&Path)) -> bool {
    use std::io::Write;
    let mnt = image.with_extension("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let out = Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(image).arg(&mnt).output();
    match out {
        Ok(o) if o.status.success() => {}
        other => {
            let why = other.map_or_else(|e| e.to_string(), |o| String::from_utf8_lossy(&o.stderr).trim().to_string());
            let test = std::thread::current().name().unwrap_or("a test").to_string();
            let _ = writeln!(std::io::stderr(), "SKIPPED {test}: the kernel's ext4 could not be mounted here ({why})");
            return false;
        }
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&mnt)));
    let umount = Command::new("umount").arg(&mnt).status().unwrap();
    assert!(umount.success(), "umount {}", mnt.display());
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
    true
}

/// Directories the kernel indexed itself (make_indexed_dir keeps the old
/// leaf's dirent tail in the new root until it fills), at 1, 2 and 4 KiB
/// blocks, with two-level trees at 1 KiB: the roots and interior nodes are
/// index blocks, checked as such; clean for `check` and `e2fsck -fn`; a
/// wrong root checksum alone is repairable and the repair satisfies e2fsck.
#[test]
fn kernel_made_htrees_check_clean_and_repair_safely() {
    let scratch = Scratch::new("kernel");
    for bs in [1024u32, 2048, 4096] {
        let image = scratch.0.join(format!("k{bs}.img"));
        if !mke2fs(&image, bs, "metadata_csum,64bit", &[], "48M") {
            return;
        }
        let mut huge_ino = 0u64;
        let mounted = with_kernel_mount(&image, |mnt| {
            for (dir, files) in [("small", 40usize), ("big", 400), ("huge", 3000)] {
                let d = mnt.join(dir);
                std::fs::create_dir(&d).unwrap();
                for i in 0..files {
                    std::fs::write(d.join(format!("a_rather_long_file_name_so_blocks_fill_{i:05}")), b"").unwrap();
                }
            }
            for i in (0..3000).step_by(3) {
                std::fs::remove_file(mnt.join("huge").join(format!("a_rather_long_file_name_so_blocks_fill_{i:05}")))
                    .unwrap();
            }
            huge_ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(mnt.join("huge")).unwrap());
        });
        if !mounted {
            return;
        }
        assert!(!e2fsck_reports(&image), "{bs}: e2fsck -fn finds the kernel's image unclean");
        let clean = std::fs::read(&image).unwrap();
        let report = check(&clean).unwrap();
        assert!(report.findings.is_empty() && report.missing_tails.is_empty(), "{bs}: {report:?}");
        // The roots of `big` and `huge` (and of `small` below 4 KiB); at
        // 1 KiB `huge` has a second level (interior nodes).
        let want = if bs == 1024 { 5 } else { 2 };
        assert!(report.checked.htree_blocks >= want, "{bs}: {:?}", report.checked);
        checksum_only_damage_is_repairable(&clean, &format!("kernel {bs}"));
        // The root of `huge`: its dx_tail checksum alone corrupted.
        let layout = Layout::parse(&clean).unwrap();
        let group = layout.group(&clean, (huge_ino - 1) / layout.inodes_per_group).unwrap();
        let index = (huge_ino - 1) % layout.inodes_per_group;
        let at = (group.inode_table * layout.block_size + index * layout.inode_size) as usize;
        assert_eq!(le16(&clean, at + 0x28 + 6), 0, "{bs}: huge's extent tree is in its inode");
        let root = le32(&clean, at + 0x28 + 12 + 8) as usize * bs as usize;
        let limit = le16(&clean, root + 0x20) as usize;
        let mut bad = clean.clone();
        bad[root + 0x20 + 8 * limit + 4] ^= 0x01;
        let report = check(&bad).unwrap();
        let f = report.findings.iter().find(|f| f.what == "htree block").expect("root checksum finding");
        assert!(f.repairable(), "{bs}: {f:?}");
        for (at, fix) in report.findings.iter().flat_map(|f| &f.fix) {
            bad[*at as usize..*at as usize + fix.len()].copy_from_slice(fix);
        }
        assert!(bad == clean, "{bs}: the repair wrote something other than the original checksum");
    }
}

/// A three-level htree (indirect_levels 2, which needs `large_dir`) the
/// kernel built: 60 000 entries with 250-byte names at 1 KiB blocks. Clean
/// for `check` and `e2fsck -fn`, and its interior nodes checked as index
/// blocks; the same root with `large_dir` cleared is an error, as the kernel's
/// dx_probe refuses it.
#[test]
fn kernel_made_three_level_htree_with_large_dir() {
    let Some((_scratch, image)) =
        scratch_image("largedir", "l.img", 1024, "metadata_csum,64bit,large_dir", &["-N", "70000"], "96M")
    else {
        return;
    };
    let mut dir_ino = 0;
    let mounted = with_kernel_mount(&image, |mnt| {
        let d = mnt.join("deep");
        std::fs::create_dir(&d).unwrap();
        let stem = "n".repeat(244);
        for i in 0..60_000 {
            std::fs::File::create(d.join(format!("{stem}{i:06}"))).unwrap();
        }
        dir_ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&d).unwrap());
    });
    if !mounted {
        return;
    }
    assert!(!e2fsck_reports(&image), "e2fsck -fn finds the kernel's image unclean");
    let clean = std::fs::read(&image).unwrap();
    let report = check(&clean).unwrap();
    assert!(report.clean(), "{:?}", report.findings);
    // The extent tree may have a leaf block; debugfs says where logical 0 is.
    let root = common::ext4::debugfs_read(&image, &format!("bmap <{dir_ino}> 0")).trim().parse::<usize>().unwrap();
    assert_eq!(clean[root * 1024 + 0x1E], 2, "indirect_levels: the kernel built three index levels");
    assert!(report.checked.htree_blocks > 100, "{:?}", report.checked);
    // Without large_dir the kernel refuses a tree this deep: so does check.
    let mut bad = clean.clone();
    let incompat = le32(&bad, 1024 + 0x60) & !0x4000;
    bad[1024 + 0x60..1024 + 0x64].copy_from_slice(&incompat.to_le_bytes());
    let err = check(&bad).unwrap_err().to_string();
    assert!(err.contains("2 indirect levels"), "{err}");
    // An interior node (the root's first child): its count and limit are
    // followed only while the count fits the limit and the limit the block.
    let logical = le32(&clean, root * 1024 + 0x24);
    let node =
        common::ext4::debugfs_read(&image, &format!("bmap <{dir_ino}> {logical}")).trim().parse::<usize>().unwrap();
    let count = le16(&clean, node * 1024 + 10);
    assert!(count > 1 && count < le16(&clean, node * 1024 + 8), "count {count}");
    // (count, limit, the refusal): the walk of the index refuses a count
    // over its limit, or a limit over the block, before reading an entry
    // (200 entries of 8 bytes would run 600 bytes past it); 127 entries after
    // the 8-byte fake dirent fill the 1 KiB block exactly and pass the walk,
    // but leave no room for the dx tail: the node's own check refuses that.
    let at_block = |c: u16, l: u16| format!("count {c} / limit {l} at block {logical}");
    let cases = [
        (count, count, None),
        (count, count - 1, Some(at_block(count, count - 1))),
        (200, 200, Some(at_block(200, 200))),
        (count, 127, Some(format!("htree count {count} / limit 127 do not fit the block"))),
    ];
    for (c, limit, refusal) in cases {
        let mut bad = clean.clone();
        bad[node * 1024 + 8..][..2].copy_from_slice(&limit.to_le_bytes());
        bad[node * 1024 + 10..][..2].copy_from_slice(&c.to_le_bytes());
        match (check(&bad), refusal) {
            (Ok(report), None) => {
                assert!(
                    report.findings.iter().any(|f| f.what == "htree block"),
                    "limit {limit}: {:?}",
                    report.findings
                );
            }
            (Err(e), Some(why)) => assert!(e.to_string().contains(&why), "{why}: {e}"),
            (outcome, why) => panic!("count {c}, limit {limit}: {:?}, expected {why:?}", outcome.map(|r| r.findings)),
        }
    }
}

/// A checksum repair must never re-seal wrong content: an inode whose
/// extent was pointed at another file's block keeps its wrong checksum
/// (structural damage), and a truncated image is an error, never clean.
#[test]
fn wrong_content_is_damage_and_truncation_is_an_error() {
    let Some((scratch, image)) = scratch_image("reseal", "r.img", 4096, "metadata_csum,64bit", &[], "16M") else {
        return;
    };
    let host = scratch.0.join("content.bin");
    std::fs::write(&host, vec![0xA7u8; 3 * 4096]).unwrap();
    debugfs(&image, &format!("write {} a\nwrite {} b\n", host.display(), host.display()));
    let clean = std::fs::read(&image).unwrap();
    assert!(check(&clean).unwrap().findings.is_empty());
    let layout = Layout::parse(&clean).unwrap();
    let g0 = layout.group(&clean, 0).unwrap();
    let ino =
        |inum: u64| (g0.inode_table * layout.block_size) as usize + (inum as usize - 1) * layout.inode_size as usize;
    // Inodes 12 (a) and 13 (b): the first leaf extent's start (ee_start_lo) of a := b's.
    let start_lo = 0x28 + 12 + 8;
    let b_start = le32(&clean, ino(13) + start_lo);
    let mut bad = clean.clone();
    bad[ino(12) + start_lo..][..4].copy_from_slice(&b_start.to_le_bytes());
    let report = check(&bad).unwrap();
    let f = report.findings.iter().find(|f| f.what == "inode" && f.inode == Some(12)).expect("inode 12 checksum");
    let why = f.damage.as_deref().expect("structural damage");
    assert!(why.contains("also claimed by inode 13"), "{why}");
    std::fs::write(&image, &bad).unwrap();
    assert!(e2fsck_reports(&image), "e2fsck -fn must see the shared block");
    // a's last block marked free in the block bitmap, and a's checksum wrong:
    // the checksum covers an extent onto a free block — damage.
    let a_start = u64::from(le32(&clean, ino(12) + start_lo));
    let a_last = a_start + u64::from(le16(&clean, ino(12) + 0x28 + 12 + 4)) - 1;
    let bit = (a_last - layout.first_data_block) % layout.blocks_per_group;
    let group = layout.group(&clean, (a_last - layout.first_data_block) / layout.blocks_per_group).unwrap();
    let mut bad = clean.clone();
    bad[(group.block_bitmap * layout.block_size + bit / 8) as usize] &= !(1 << (bit % 8));
    bad[ino(12) + 0x7C] ^= 0x01;
    let report = check(&bad).unwrap();
    let f = report.findings.iter().find(|f| f.what == "inode" && f.inode == Some(12)).expect("inode 12 checksum");
    let why = f.damage.as_deref().expect("structural damage");
    assert_eq!(why, format!("block {a_last} is free in the block bitmap"));
    std::fs::write(&image, &bad).unwrap();
    assert!(e2fsck_reports(&image), "e2fsck -fn must see the block marked free");
    // Truncated images: half, and one byte short.
    for len in [clean.len() / 2, clean.len() - 1] {
        let err = check(&clean[..len]).unwrap_err().to_string();
        assert!(err.contains("truncated"), "{len}: {err}");
    }
}

#[test]
fn damaged_images_are_errors_not_panics() {
    let Some((_scratch, image)) = scratch_image("damage", "d.img", 1024, "metadata_csum,64bit", &[], "4M") else {
        return;
    };
    populate(&image);
    let bytes = std::fs::read(&image).unwrap();
    assert!(check(&bytes).unwrap().findings.is_empty());
    for len in (0..bytes.len()).step_by(997) {
        let _ = check(&bytes[..len]);
    }
    // One byte at a time changed in the metadata area, then restored.
    let mut bad = bytes.clone();
    let mut rng = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..5_000 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let at = (rng % 200_000) as usize;
        bad[at] = (rng >> 32) as u8;
        let _ = check(&bad);
        bad[at] = bytes[at];
    }
}

/// A leaf directory block whose checksum tail was taken into the last
/// entry (as a pre-metadata_csum directory has it; the kernel refuses the
/// block) is a missing tail: never clean, never counted as checked.
#[test]
fn a_directory_block_without_its_tail_is_reported() {
    let Some((_scratch, image)) = scratch_image("tail", "t.img", 1024, "metadata_csum,64bit", &[], "4M") else {
        return;
    };
    debugfs(&image, "mkdir d\nwrite /dev/null d/a\n");
    let clean = std::fs::read(&image).unwrap();
    let before = check(&clean).unwrap();
    assert!(before.clean(), "{before:?}");
    let layout = Layout::parse(&clean).unwrap();
    let g0 = layout.group(&clean, 0).unwrap();
    let bs = layout.block_size as usize;
    // Inode 12 is `d`: its one leaf extent's start, then its last real entry.
    let inode = g0.inode_table as usize * bs + 11 * layout.inode_size as usize;
    let block = le32(&clean, inode + 0x28 + 12 + 8) as usize;
    let dir = block * bs;
    let mut entry = 0;
    while entry + usize::from(le16(&clean, dir + entry + 4)) < bs - 12 {
        entry += usize::from(le16(&clean, dir + entry + 4));
    }
    let mut bad = clean.clone();
    let rec_len = le16(&clean, dir + entry + 4) + 12;
    bad[dir + entry + 4..][..2].copy_from_slice(&rec_len.to_le_bytes());
    bad[dir + bs - 12..dir + bs].fill(0);
    let report = check(&bad).unwrap();
    assert_eq!(report.missing_tails, vec![(12, block as u64)]);
    assert!(!report.clean(), "{report:?}");
    assert_eq!(report.checked.dir_blocks, before.checked.dir_blocks - 1, "a block without a tail is not checked");
    std::fs::write(&image, &bad).unwrap();
    assert!(e2fsck_reports(&image), "e2fsck -fn must see the missing tail");
    // A tail with any one of its four fields wrong is no tail (the kernel's
    // get_dirent_tail): inode, record length, name length, file type 0xDE.
    for (at, value) in [(0, 1u8), (4, 16), (6, 1), (7, 0)] {
        let mut bad = clean.clone();
        bad[dir + bs - 12 + at] = value;
        let report = check(&bad).unwrap();
        assert_eq!(report.missing_tails, vec![(12, block as u64)], "tail byte {at} = {value}");
        std::fs::write(&image, &bad).unwrap();
        assert!(e2fsck_reports(&image), "tail byte {at} = {value}: e2fsck -fn must see it");
    }
}

/// Content the checksum covers that is itself wrong is damage, named for
/// what is wrong, and never repairable: each directory entry rule, htree
/// counts, runs outside the filesystem (extent, xattr block), an extent
/// claimed twice, and one onto the filesystem's own blocks. `e2fsck -fn`
/// sees each one too.
#[test]
fn each_kind_of_structural_damage_is_named_and_not_repairable() {
    let Some((_scratch, image)) = scratch_image("structure", "s.img", 1024, "metadata_csum,64bit", &[], "8M") else {
        return;
    };
    populate(&image);
    let clean = std::fs::read(&image).unwrap();
    let layout = Layout::parse(&clean).unwrap();
    let g0 = layout.group(&clean, 0).unwrap();
    let bs = layout.block_size as usize;
    let ino = |inum: u64| (g0.inode_table as usize * bs) + (inum as usize - 1) * layout.inode_size as usize;
    // Inode 12 is `big` (htree), 13 `small` (".", "..", "a", then the tail), 15 `frag`.
    let small = le32(&clean, ino(13) + 0x28 + 12 + 8) as usize * bs;
    let a = small + 24;
    assert_eq!(&clean[a + 8..a + 9], b"a");
    let end = bs - 12;
    let htree_root = le32(&clean, ino(12) + 0x28 + 12 + 8) as usize * bs;
    let frag_leaf = le32(&clean, ino(15) + 0x28 + 12 + 4) as usize * bs;
    let set16 = |b: &mut Vec<u8>, at: usize, v: u16| b[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let set32 = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let a_len = le16(&clean, a + 4);
    let beyond = layout.blocks_count as u32 + 5;
    let first = layout.first_data_block as u32;
    type Change<'c> = Box<dyn Fn(&mut Vec<u8>) + 'c>;
    let cases: Vec<(&str, String, Change)> = vec![
        ("directory block", "record length 14 does not fit".into(), Box::new(|b| set16(b, a + 4, 14))),
        ("directory block", "record length 8 does not fit".into(), Box::new(|b| set16(b, a + 4, 8))),
        ("directory block", "does not fit the block".into(), Box::new(move |b| set16(b, a + 4, a_len + 4))),
        (
            "directory block",
            "entry at byte 12: a 9-byte name in a 12-byte record".into(),
            Box::new(|b| b[small + 12 + 6] = 9),
        ),
        (
            "directory block",
            format!("inode {} beyond {}", layout.inodes_count + 1, layout.inodes_count),
            Box::new(|b| set32(b, a, layout.inodes_count as u32 + 1)),
        ),
        // The last inode, never used (the rule before it: inode numbers in range).
        (
            "directory block",
            format!("inode {} is not in use", layout.inodes_count),
            Box::new(|b| set32(b, a, layout.inodes_count as u32)),
        ),
        (
            "directory block",
            format!("entry at byte {}: record length 0 does not fit", end - 8),
            Box::new(move |b| set16(b, a + 4, (end - 8 - 24) as u16)),
        ),
        (
            "directory block",
            format!("entry at byte {} runs into the checksum tail", end - 4),
            Box::new(move |b| set16(b, a + 4, (end - 4 - 24) as u16)),
        ),
        (
            "htree block",
            "htree count".into(),
            Box::new(|b| set16(b, htree_root + 0x20, le16(&clean, htree_root + 0x20) - 1)),
        ),
        ("htree block", "htree count 0".into(), Box::new(|b| set16(b, htree_root + 0x22, 0))),
        ("inode", "lie outside the filesystem".into(), Box::new(move |b| set32(b, ino(14) + 0x68, beyond))),
        // A leaf extent's `ee_start_hi`: 2^32 blocks further.
        ("extent block", "lie outside the filesystem".into(), Box::new(move |b| set16(b, frag_leaf + 12 + 6, 1))),
        ("extent block", "lie outside the filesystem".into(), Box::new(move |b| set32(b, frag_leaf + 12 + 8, beyond))),
        (
            "extent block",
            "also claimed by inode 13".into(),
            Box::new(move |b| set32(b, frag_leaf + 12 + 8, (small / bs) as u32)),
        ),
        // Inode 2000 (never used: all zeros) marked in use.
        (
            "inode",
            "marked in use but has no file type".into(),
            Box::new(move |b| b[g0.inode_bitmap as usize * bs + 1999 / 8] |= 1 << (1999 % 8)),
        ),
        (
            "superblock",
            format!("{} free inodes of {}", layout.inodes_count + 1, layout.inodes_count),
            Box::new(|b| set32(b, 1024 + 0x10, layout.inodes_count as u32 + 1)),
        ),
        (
            "superblock",
            format!("{} free blocks of {}", layout.blocks_count + 1, layout.blocks_count),
            Box::new(|b| set32(b, 1024 + 0x0C, layout.blocks_count as u32 + 1)),
        ),
        // With `64bit` the count's high half (`s_free_blocks_count_hi`) counts.
        (
            "superblock",
            format!("{} free blocks of {}", (1u64 << 32) + u64::from(le32(&clean, 1024 + 0x0C)), layout.blocks_count),
            Box::new(|b| set32(b, 1024 + 0x158, 1)),
        ),
        // The filesystem's last block (free): inside it, so the bitmap decides.
        (
            "extent block",
            format!("block {} is free in the block bitmap", layout.blocks_count - 1),
            Box::new(move |b| set32(b, frag_leaf + 12 + 8, layout.blocks_count as u32 - 1)),
        ),
        // The superblock (the first data block), the descriptor table, a bitmap, the inode table.
        (
            "extent block",
            "also claimed by the filesystem's metadata".into(),
            Box::new(move |b| set32(b, frag_leaf + 12 + 8, first)),
        ),
        (
            "extent block",
            "also claimed by the filesystem's metadata".into(),
            Box::new(move |b| set32(b, frag_leaf + 12 + 8, first + 1)),
        ),
        (
            "extent block",
            "also claimed by the filesystem's metadata".into(),
            Box::new(move |b| set32(b, frag_leaf + 12 + 8, g0.inode_bitmap as u32)),
        ),
        (
            "extent block",
            "also claimed by the filesystem's metadata".into(),
            Box::new(move |b| set32(b, frag_leaf + 12 + 8, g0.inode_table as u32 + 3)),
        ),
    ];
    for (what, why, change) in &cases {
        let mut bad = clean.clone();
        change(&mut bad);
        let report = check(&bad).unwrap();
        assert!(!report.clean(), "{what} {why}");
        let f = report.findings.iter().find(|f| f.what == *what).unwrap_or_else(|| panic!("{why}: {report:?}"));
        let damage = f.damage.as_deref().unwrap_or_else(|| panic!("{why}: called repairable: {f:?}"));
        assert!(damage.contains(why.as_str()), "{why}: {damage}");
        assert!(!f.repairable());
        std::fs::write(&image, &bad).unwrap();
        assert!(e2fsck_reports(&image), "{why}: e2fsck -fn missed it");
    }
}

/// With 1 KiB blocks, groups start at block 1: the last block of group 0 is
/// 8192, found in group 0's bitmap (bit 8191), not group 1's. A file moved
/// onto it (marked in use there) with a wrong inode checksum is a repairable
/// finding; moved onto a block marked free, it is damage.
#[test]
fn a_block_at_a_groups_end_is_looked_up_in_its_own_group() {
    let Some((scratch, image)) = scratch_image("group-end", "g.img", 1024, "metadata_csum,64bit", &[], "20M") else {
        return;
    };
    let host = scratch.0.join("one-block");
    std::fs::write(&host, vec![0x3Cu8; 1024]).unwrap();
    debugfs(&image, &format!("write {} f\n", host.display()));
    let clean = std::fs::read(&image).unwrap();
    let layout = Layout::parse(&clean).unwrap();
    assert_eq!((layout.first_data_block, layout.blocks_per_group), (1, 8192));
    let (g0, g1) = (layout.group(&clean, 0).unwrap(), layout.group(&clean, 1).unwrap());
    assert!(!g1.block_uninit(), "group 1's bitmap is initialised");
    let bs = layout.block_size as usize;
    let inode = g0.inode_table as usize * bs + 11 * layout.inode_size as usize;
    let start_at = inode + 0x28 + 12 + 8;
    let old = le32(&clean, start_at) as usize;
    let bit = |b: &[u8], bitmap: u64, n: usize| b[bitmap as usize * bs + n / 8] >> (n % 8) & 1;
    // Group 0's bit 8191 is block 8192; group 1's bit 8191 is block 16384.
    assert_eq!(bit(&clean, g0.block_bitmap, 8191), 0, "block 8192 free");
    assert_eq!(bit(&clean, g1.block_bitmap, 8191), 0, "block 16384 free");
    for marked in [true, false] {
        let mut bad = clean.clone();
        bad[start_at..start_at + 4].copy_from_slice(&8192u32.to_le_bytes());
        if marked {
            bad[g0.block_bitmap as usize * bs + 8191 / 8] |= 1 << (8191 % 8);
            bad[g0.block_bitmap as usize * bs + (old - 1) / 8] &= !(1 << ((old - 1) % 8));
        }
        let report = check(&bad).unwrap();
        let f = report.findings.iter().find(|f| f.what == "inode" && f.inode == Some(12)).expect("inode 12");
        if marked {
            assert_eq!(f.damage, None, "block 8192 is marked in group 0: {f:?}");
        } else {
            assert_eq!(f.damage.as_deref(), Some("block 8192 is free in the block bitmap"));
        }
    }
    // Group 1's backup superblock (8193) and descriptor table (8194): in use
    // in its bitmap, and the filesystem's own.
    assert!(layout.base_meta_blocks(1) >= 2, "group 1 has a backup superblock");
    for onto in [8193u32, 8194] {
        let mut bad = clean.clone();
        bad[start_at..start_at + 4].copy_from_slice(&onto.to_le_bytes());
        let report = check(&bad).unwrap();
        let f = report.findings.iter().find(|f| f.what == "inode" && f.inode == Some(12)).expect("inode 12");
        let damage = f.damage.as_deref().unwrap_or_else(|| panic!("onto {onto}: repairable: {f:?}"));
        assert!(damage.contains("also claimed by the filesystem's metadata"), "onto {onto}: {damage}");
        std::fs::write(&image, &bad).unwrap();
        assert!(e2fsck_reports(&image), "onto {onto}: e2fsck -fn missed it");
    }
}

/// Inode numbers start at 1: a group's last inode is `inodes_per_group ×
/// (g + 1)`, the next one the first of group g + 1 — the checker's inode
/// bitmap lookups and csumfs's allocation goals and inode table offsets
/// all go through `Layout::inode_group`.
#[test]
fn inode_numbers_map_to_their_group_and_index() {
    let Some((_scratch, image)) = scratch_image("inode-group", "i.img", 1024, "metadata_csum", &[], "32M") else {
        return;
    };
    let layout = Layout::parse(&std::fs::read(&image).unwrap()).unwrap();
    let ipg = layout.inodes_per_group;
    assert!(layout.groups >= 3, "{} groups", layout.groups);
    assert_eq!(layout.inode_group(1), (0, 0));
    assert_eq!(layout.inode_group(ipg), (0, ipg - 1));
    assert_eq!(layout.inode_group(ipg + 1), (1, 0));
    assert_eq!(layout.inode_group(2 * ipg), (1, ipg - 1));
    assert_eq!(layout.inode_group(2 * ipg + 2), (2, 1));
    assert_eq!(layout.inode_group(layout.inodes_count), (layout.groups - 1, ipg - 1));
}

/// An initialised extent holds up to 32 768 blocks (`EXT_INIT_MAX_LEN`);
/// only a length past that marks it uninitialised. A file's one extent
/// stretched to exactly 32 768 blocks over free ones is damage found at its
/// first block, not an empty extent.
#[test]
fn an_extent_of_exactly_32768_blocks_is_initialised_and_claimed() {
    let Some((scratch, image)) = scratch_image(
        "max-extent",
        "m.img",
        1024,
        "metadata_csum,64bit,^has_journal,sparse_super2",
        &["-E", "num_backup_sb=0"],
        "64M",
    ) else {
        return;
    };
    let host = scratch.0.join("one-block");
    std::fs::write(&host, vec![0x5Au8; 1024]).unwrap();
    debugfs(&image, &format!("write {} f\n", host.display()));
    let clean = std::fs::read(&image).unwrap();
    let layout = Layout::parse(&clean).unwrap();
    assert!(layout.blocks_count > 16400 + 32768, "{} blocks", layout.blocks_count);
    let g0 = layout.group(&clean, 0).unwrap();
    let inode = g0.inode_table as usize * layout.block_size as usize + 11 * layout.inode_size as usize;
    let entry = inode + 0x28 + 12;
    assert_eq!(le16(&clean, entry + 4), 1, "one block in the file's extent");
    let mut bad = clean.clone();
    bad[entry + 4..entry + 6].copy_from_slice(&32768u16.to_le_bytes());
    bad[entry + 8..entry + 12].copy_from_slice(&16400u32.to_le_bytes());
    let report = check(&bad).unwrap();
    let f = report.findings.iter().find(|f| f.what == "inode" && f.inode == Some(12)).expect("inode 12");
    assert_eq!(f.damage.as_deref(), Some("block 16400 is free in the block bitmap"), "{f:?}");
    std::fs::write(&image, &bad).unwrap();
    assert!(e2fsck_reports(&image), "e2fsck -fn missed it");
}

/// A block-mapped (`^extent`) directory big enough for its double-indirect
/// block and two indirect blocks below it (over 12 + 2 × 256 blocks at 1
/// KiB): every one of its blocks is checked, and a wrong checksum in the
/// first block under each indirect block and in the last is found at the
/// block debugfs maps it to.
#[test]
fn block_mapped_directories_are_followed_through_double_indirect_blocks() {
    let scratch = Scratch::new("block-map");
    let tree = scratch.0.join("tree/big");
    std::fs::create_dir_all(&tree).unwrap();
    // 200-byte names: four entries per 1 KiB block, 2 200 of them: 550 blocks,
    // two indirect blocks under the double-indirect one.
    for i in 0..2200 {
        std::fs::write(tree.join(format!("{i:0>200}")), b"").unwrap();
    }
    let image = scratch.0.join("b.img");
    let source = scratch.0.join("tree");
    let populate = ["-N", "3000", "-d", source.to_str().unwrap()];
    if !mke2fs(&image, 1024, "metadata_csum,^64bit,^extent", &populate, "8M") {
        return;
    }
    let clean = std::fs::read(&image).unwrap();
    let report = check(&clean).unwrap();
    assert!(report.clean(), "{report:?}");
    let size = |dir: &str| -> u64 {
        let stat = debugfs_read(&image, &format!("stat {dir}"));
        let size = stat.split("Size: ").nth(1).and_then(|s| s.split_whitespace().next()).unwrap();
        size.parse::<u64>().unwrap() / 1024
    };
    let big = size("/big");
    assert!(big > 12 + 256 + 256, "{big} blocks: not two indirect blocks under the double-indirect one");
    assert_eq!(report.checked.dir_blocks, size("/") + size("/lost+found") + big, "{:?}", report.checked);
    for logical in [0, 12, 12 + 256, 12 + 256 + 256, big - 1] {
        let block: u64 = debugfs_read(&image, &format!("bmap /big {logical}")).trim().parse().unwrap();
        let mut bad = clean.clone();
        bad[(block * 1024 + 30) as usize] ^= 0x01;
        let findings = check(&bad).unwrap().findings;
        assert_eq!(findings.len(), 1, "{logical}: {findings:?}");
        let location = format!("inode 12 block {block} (logical {logical})");
        assert_eq!((findings[0].what, findings[0].location.as_str()), ("directory block", location.as_str()));
    }
    // A size past the filesystem (i_size_high set) is refused before any block is followed.
    let layout = Layout::parse(&clean).unwrap();
    let g0 = layout.group(&clean, 0).unwrap();
    let at = (g0.inode_table * 1024 + 11 * layout.inode_size) as usize + 0x6C;
    let mut bad = clean.clone();
    bad[at] = 1;
    let size = (1u64 << 32) + u64::from(le32(&clean, at - 0x6C + 4));
    let err = check(&bad).unwrap_err().to_string();
    assert!(err.contains(&format!("inode 12: size {size} is more blocks than the filesystem has")), "{err}");
    // A pointer just past the root directory's size (i_block[1]; it has one block) is not followed:
    // only the inode's own checksum changes.
    let root = (g0.inode_table * 1024 + layout.inode_size) as usize;
    let stale: u32 = debugfs_read(&image, "bmap /big 0").trim().parse().unwrap();
    let mut bad = clean.clone();
    bad[root + 0x28 + 4..][..4].copy_from_slice(&stale.to_le_bytes());
    let stale_report = check(&bad).unwrap();
    assert_eq!(stale_report.checked.dir_blocks, report.checked.dir_blocks);
    let found: Vec<_> = stale_report.findings.iter().map(|f| (f.what, f.inode)).collect();
    assert_eq!(found, [("inode", Some(2))]);
}

/// What the checker cannot verify it lists, so the verdict is never "all
/// checksums valid": a journal awaiting replay (`needs_recovery`), and a
/// journal on another device (`has_journal` with no journal inode).
#[test]
fn a_journal_awaiting_replay_or_on_another_device_is_listed_unchecked() {
    let scratch = Scratch::new("unchecked");
    // No journal at all (no `has_journal`, no journal inode): nothing to list.
    let image = scratch.0.join("none.img");
    if !mke2fs(&image, 1024, "metadata_csum,64bit,^has_journal", &[], "8M") {
        return;
    }
    let report = check(&std::fs::read(&image).unwrap()).unwrap();
    assert!(report.clean() && report.unchecked.is_empty(), "{report:?}");
    for (label, command, what) in [
        ("recover", "feature needs_recovery", "journal awaiting replay"),
        ("external", "ssv journal_inum 0", "external journal"),
    ] {
        let image = scratch.0.join(format!("{label}.img"));
        if !mke2fs(&image, 1024, "metadata_csum,64bit", &[], "8M") {
            return;
        }
        assert!(check(&std::fs::read(&image).unwrap()).unwrap().unchecked.is_empty());
        debugfs(&image, &format!("{command}\n"));
        let report = check(&std::fs::read(&image).unwrap()).unwrap();
        let unchecked: Vec<(&str, u64)> = report.unchecked.iter().map(|u| (u.what, u.count)).collect();
        assert_eq!(unchecked, [(what, 1)], "{label}");
        assert!(report.clean(), "{label}: every checksum it checked is valid");
    }
}

/// Metadata too damaged to follow is an error naming the structure, never
/// a panic and never a verdict: extent headers (magic, entries over max, a
/// max the 60-byte root cannot hold, depth over 5), an htree root's info
/// length and levels, and its count over its limit.
#[test]
fn metadata_too_damaged_to_follow_is_an_error_naming_it() {
    let Some((_scratch, image)) = scratch_image("unfollowable", "u.img", 1024, "metadata_csum,64bit", &[], "8M") else {
        return;
    };
    populate(&image);
    let clean = std::fs::read(&image).unwrap();
    let layout = Layout::parse(&clean).unwrap();
    let g0 = layout.group(&clean, 0).unwrap();
    let bs = layout.block_size as usize;
    let ino = |inum: u64| (g0.inode_table as usize * bs) + (inum as usize - 1) * layout.inode_size as usize;
    let (root, frag) = (le32(&clean, ino(12) + 0x28 + 12 + 8) as usize * bs, ino(15) + 0x28);
    let max = le16(&clean, frag + 4);
    let limit = le16(&clean, root + 0x20);
    assert_eq!(clean[root + 0x1E], 0, "one level of index");
    let cases: [(usize, u16, &str); 7] = [
        (frag, 0xF30B, "inode 15 extent root: bad extent header (magic 0xf30b"),
        (frag + 2, max + 1, &format!("{}/{max} entries", max + 1)),
        (frag + 4, 5, "1/5 entries, depth 1"),
        (frag + 6, 6, "depth 6"),
        (root + 0x1C, 9 << 8, "inode 12 htree: dx_root info length 9"),
        (root + 0x1E, 2, "2 indirect levels"),
        // The index walk reads the root's entries: it refuses them first.
        (root + 0x22, limit + 1, &format!("count {} / limit {limit} at block 0", limit + 1)),
    ];
    for (at, value, why) in cases {
        let mut bad = clean.clone();
        bad[at..at + 2].copy_from_slice(&value.to_le_bytes());
        let err = check(&bad).map(|r| format!("{r:?}")).unwrap_err().to_string();
        assert!(err.contains(why), "{why}: {err}");
    }
    // frag's index entry pointing at the first block past the end: refused by number,
    // before any read (the image ends there too).
    let past = layout.blocks_count as u32;
    let mut bad = clean.clone();
    bad[frag + 12 + 4..][..4].copy_from_slice(&past.to_le_bytes());
    let err = check(&bad).unwrap_err().to_string();
    assert!(err.contains(&format!("block {past} is beyond the filesystem's {past} blocks")), "{err}");
    // The index entry's high half (`ei_leaf_hi`) counts: 2^32 past its block.
    let leaf = u64::from(le32(&clean, frag + 12 + 4));
    let mut bad = clean.clone();
    bad[frag + 12 + 8..][..2].copy_from_slice(&1u16.to_le_bytes());
    let err = check(&bad).unwrap_err().to_string();
    assert!(err.contains(&format!("block {} is beyond", (1u64 << 32) + leaf)), "{err}");
    // A child no shallower than its parent (the leaf under a depth-1 root
    // claiming depth 1): refused at the child.
    let mut bad = clean.clone();
    bad[leaf as usize * bs + 6..][..2].copy_from_slice(&1u16.to_le_bytes());
    let err = check(&bad).unwrap_err().to_string();
    assert!(
        err.contains(&format!("inode 15 extent block {leaf}: bad extent header")) && err.contains("depth 1)"),
        "{err}"
    );
}

/// `i_checksum_hi` counts once `i_extra_isize` reaches it (4: the kernel's
/// `EXT4_FITS_IN_INODE`), not before (2): inodes debugfs wrote with each
/// check clean, and a flipped high half is found in the first only.
#[test]
fn the_inode_checksum_high_half_counts_from_extra_isize_4() {
    let Some((_scratch, image)) = scratch_image("extra-isize", "x.img", 1024, "metadata_csum,64bit", &[], "8M") else {
        return;
    };
    debugfs(&image, "write /dev/null a\nwrite /dev/null b\nsif a extra_isize 4\nsif b extra_isize 2\n");
    let clean = std::fs::read(&image).unwrap();
    let report = check(&clean).unwrap();
    assert!(report.clean(), "{report:?}");
    let layout = Layout::parse(&clean).unwrap();
    let g0 = layout.group(&clean, 0).unwrap();
    let ino = |inum: u64| (g0.inode_table * layout.block_size + (inum - 1) * layout.inode_size) as usize;
    assert_eq!((le16(&clean, ino(12) + 0x80), le16(&clean, ino(13) + 0x80)), (4, 2));
    for (inum, counted) in [(12, true), (13, false)] {
        let mut bad = clean.clone();
        bad[ino(inum) + 0x82] ^= 0x01;
        let findings = check(&bad).unwrap().findings;
        // Without the high half, its bytes are ordinary inode bytes the checksum covers.
        assert_eq!(findings.len(), 1, "{inum}: {findings:?}");
        assert_eq!(findings[0].inode, Some(inum));
        assert_eq!(findings[0].fix.len(), if counted { 2 } else { 1 }, "{inum}");
    }
}

/// The smallest images mke2fs makes (128 KiB: 128 blocks of 1 KiB, one
/// group) are checked like any other: clean as made; free counts equal to
/// the totals are not damage (e2fsck's `check_super_block` refuses only
/// counts above them), one past them is.
#[test]
fn the_smallest_image_and_the_free_count_boundary() {
    let Some((_scratch, image)) = scratch_image("tiny", "t.img", 1024, "metadata_csum,64bit,^has_journal", &[], "128K")
    else {
        return;
    };
    let clean = std::fs::read(&image).unwrap();
    assert_eq!(clean.len(), 128 << 10);
    let report = check(&clean).unwrap();
    assert!(report.clean() && report.unchecked.is_empty(), "{report:?}");
    assert_eq!((report.checked.descriptors, report.checked.inodes), (1, 11), "{:?}", report.checked);
    let layout = Layout::parse(&clean).unwrap();
    let set32 = |b: &mut Vec<u8>, at: usize, v: u32| b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    for (field, total, damaged) in [(0x0C, layout.blocks_count, false), (0x10, layout.inodes_count, false)]
        .into_iter()
        .chain([(0x0C, layout.blocks_count + 1, true), (0x10, layout.inodes_count + 1, true)])
    {
        let mut bad = clean.clone();
        set32(&mut bad, 1024 + field, total as u32);
        let report = check(&bad).unwrap();
        let found: Vec<_> = report.findings.iter().map(|f| (f.what, f.damage.is_some())).collect();
        assert_eq!(found, [("superblock", damaged)], "field {field:#x} = {total}");
    }
}

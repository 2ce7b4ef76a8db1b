//! ext4 test helpers: e2fsprogs found or skipped visibly, scratch
//! directories, images made by mke2fs, and the checks every clean image
//! must pass.

use csumkit::ext4::{check, Layout, Report};
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn tool(name: &str) -> Option<PathBuf> {
    let found = ["/usr/sbin", "/sbin", "/usr/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists());
    if found.is_none() {
        super::skip(name, "apt-get install e2fsprogs");
    }
    found
}

pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("csumkit-ext4-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn mke2fs(image: &Path, block_size: u32, features: &str, extra: &[&str], size: &str) -> bool {
    let Some(mkfs) = tool("mke2fs") else { return false };
    let _ = std::fs::remove_file(image);
    let out = Command::new(mkfs)
        .args(["-q", "-F", "-t", "ext4", "-O", features, "-b", &block_size.to_string()])
        .args(["-U", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0", "-E", "lazy_itable_init=1"])
        .args(extra)
        .arg(image)
        .arg(size)
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs {features}: {}", String::from_utf8_lossy(&out.stderr));
    true
}

/// A scratch directory and an image mke2fs made in it (`None`, shown as
/// skipped, without e2fsprogs). The directory goes when the first is dropped.
pub fn scratch_image(
    tag: &str,
    name: &str,
    block_size: u32,
    features: &str,
    extra: &[&str],
    size: &str,
) -> Option<(Scratch, PathBuf)> {
    let scratch = Scratch::new(tag);
    let image = scratch.0.join(name);
    mke2fs(&image, block_size, features, extra, size).then_some((scratch, image))
}

pub fn debugfs(image: &Path, commands: &str) {
    let script = image.with_extension("cmds");
    std::fs::write(&script, commands).unwrap();
    let out = Command::new(tool("debugfs").unwrap()).args(["-w", "-f"]).arg(&script).arg(image).output().unwrap();
    assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
}

/// Whether `e2fsck -fn` reports a problem: a non-zero exit, or a problem
/// it declined to fix (a bad descriptor checksum alone is "IGNORED" with
/// exit 0).
pub fn e2fsck_reports(image: &Path) -> bool {
    let out = Command::new(tool("e2fsck").unwrap()).arg("-fn").arg(image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    out.status.code() != Some(0) || text.contains("IGNORED") || text.contains("? no")
}

/// Wrong checksums over sound content are never called structural damage,
/// in any layout: every in-use inode's stored checksum and every
/// initialised group's bitmap checksums corrupted at once must all come
/// back as repairable findings.
pub fn checksum_only_damage_is_repairable(clean: &[u8], label: &str) {
    let layout = Layout::parse(clean).unwrap();
    let mut bytes = clean.to_vec();
    let mut inodes = 0;
    for g in 0..layout.groups {
        let group = layout.group(clean, g).unwrap();
        if !group.block_uninit() {
            bytes[group.desc_offset as usize + 0x18] ^= 0x01;
        }
        if group.inode_uninit() {
            continue;
        }
        bytes[group.desc_offset as usize + 0x1A] ^= 0x01;
        let bitmap = &clean[(group.inode_bitmap * layout.block_size) as usize..];
        for i in 0..layout.inodes_per_group {
            if bitmap[(i / 8) as usize] >> (i % 8) & 1 == 1 {
                let at = (group.inode_table * layout.block_size + i * layout.inode_size) as usize;
                bytes[at + 0x7C] ^= 0x01;
                inodes += 1;
            }
        }
    }
    let report = check(&bytes).unwrap();
    assert!(!report.clean(), "{label}: damaged checksums called clean");
    let damaged: Vec<_> = report.findings.iter().filter(|f| !f.repairable()).collect();
    assert!(damaged.is_empty(), "{label}: sound content called damaged: {damaged:?}");
    let inode_findings = report.findings.iter().filter(|f| f.what == "inode").count();
    assert_eq!(inode_findings, inodes, "{label}");
    // The fixes put back exactly the bytes the image had (a bitmap fix
    // changes its descriptor's checksum: the next pass fixes that).
    for _ in 0..2 {
        let report = check(&bytes).unwrap();
        for (at, fix) in report.findings.iter().flat_map(|f| &f.fix) {
            bytes[*at as usize..*at as usize + fix.len()].copy_from_slice(fix);
        }
    }
    assert!(bytes == clean, "{label}: the fixes did not restore the image");
}

/// The checked counts are exactly what the superblock and descriptors say
/// the image has: every group's descriptor, every initialised group's
/// bitmaps, every inode in use (the superblock's own count of free ones).
pub fn counts_match_the_image(report: &Report, image: &[u8], label: &str) {
    let layout = Layout::parse(image).unwrap();
    let groups: Vec<_> = (0..layout.groups).map(|g| layout.group(image, g).unwrap()).collect();
    let c = &report.checked;
    assert_eq!(c.descriptors, layout.groups, "{label}: {c:?}");
    assert_eq!(c.block_bitmaps, groups.iter().filter(|g| !g.block_uninit()).count() as u64, "{label}: {c:?}");
    assert_eq!(c.inode_bitmaps, groups.iter().filter(|g| !g.inode_uninit()).count() as u64, "{label}: {c:?}");
    let free_inodes = u64::from(le32(image, 1024 + 0x10));
    assert_eq!(c.inodes, layout.inodes_count - free_inodes, "{label}: {c:?}");
    // Distinct xattr blocks (`i_file_acl`, its high half with 64bit) of
    // the in-use inodes, and the orphan file's blocks (its size).
    let wide = layout.features.incompat & csumkit::ext4::feature_bits::INCOMPAT_64BIT != 0;
    let inode_at = |inum: u64| {
        let g = &groups[((inum - 1) / layout.inodes_per_group) as usize];
        (g.inode_table * layout.block_size + (inum - 1) % layout.inodes_per_group * layout.inode_size) as usize
    };
    let mut xattr_blocks = std::collections::HashSet::new();
    let mut ea_inodes = 0;
    let mut extent_blocks = 0;
    let (mut htree_blocks, mut htree_exact) = (0, true);
    for (g, group) in groups.iter().enumerate().filter(|(_, g)| !g.inode_uninit()) {
        let bitmap = &image[(group.inode_bitmap * layout.block_size) as usize..];
        for i in (0..layout.inodes_per_group).filter(|&i| bitmap[(i / 8) as usize] >> (i % 8) & 1 == 1) {
            let at = inode_at(g as u64 * layout.inodes_per_group + i + 1);
            // EXT4_EA_INODE_FL: a large xattr value's own inode.
            let flags = le32(image, at + 0x20);
            ea_inodes += u64::from(flags & 0x20_0000 != 0);
            // An indexed directory (EXT4_INDEX_FL) whose root is a depth-0
            // extent root's first block: one index block when the htree root
            // has no indirect levels; deeper trees make the count a floor.
            let is_dir = le16(image, at) & 0xF000 == 0x4000;
            if is_dir && flags & 0x1000 != 0 {
                let root = &image[at + 0x28..at + 0x28 + 60];
                let first = if flags & 0x8_0000 == 0 {
                    Some(le32(root, 0))
                } else {
                    (le16(root, 6) == 0 && le32(root, 12) == 0).then(|| le32(root, 12 + 8))
                };
                let levels = first.map(|b| image[(u64::from(b) * layout.block_size) as usize + 0x1E]);
                htree_exact &= levels == Some(0);
                htree_blocks += 1;
            }
            // Extent-mapped (EXT4_EXTENTS_FL), not inline (EXT4_INLINE_DATA_FL).
            if flags & 0x8_0000 != 0 && flags & 0x1000_0000 == 0 {
                extent_blocks += extent_nodes_below(image, &layout, &image[at + 0x28..at + 0x28 + 60]);
            }
            let hi = if wide { u64::from(le16(image, at + 0x76)) } else { 0 };
            let block = u64::from(le32(image, at + 0x68)) | hi << 32;
            if block != 0 {
                xattr_blocks.insert(block);
            }
        }
    }
    assert_eq!(c.xattr_blocks, xattr_blocks.len() as u64, "{label}: {c:?}");
    assert_eq!(c.extent_blocks, extent_blocks, "{label}: {c:?}");
    if htree_exact {
        assert_eq!(c.htree_blocks, htree_blocks, "{label}: {c:?}");
    } else {
        assert!(c.htree_blocks > htree_blocks && c.htree_blocks < layout.blocks_count, "{label}: {c:?}");
    }
    assert_eq!(c.ea_inode_values, ea_inodes, "{label}: {c:?}");
    let orphan_blocks = match le32(image, 1024 + 0x5C) & 0x1000 {
        0 => 0,
        _ => u64::from(le32(image, inode_at(u64::from(le32(image, 1024 + 0x280))) + 4)) / layout.block_size,
    };
    assert_eq!(c.orphan_blocks, orphan_blocks, "{label}: {c:?}");
}

/// Extent tree blocks under `node` (a root in `i_block` or a block), by
/// their headers' depth and each index entry's `ei_leaf_lo`/`_hi`.
fn extent_nodes_below(image: &[u8], layout: &Layout, node: &[u8]) -> u64 {
    let (entries, depth) = (usize::from(le16(node, 2)), le16(node, 6));
    if depth == 0 {
        return 0;
    }
    (0..entries)
        .map(|e| {
            let entry = &node[12 + 12 * e..24 + 12 * e];
            let child = (u64::from(le32(entry, 4)) | u64::from(le16(entry, 8)) << 32) * layout.block_size;
            1 + extent_nodes_below(image, layout, &image[child as usize..][..layout.block_size as usize])
        })
        .sum()
}

pub fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

pub fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Output of a read-only debugfs request (`debugfs -R REQUEST IMAGE`).
pub fn debugfs_read(image: &Path, request: &str) -> String {
    let out = Command::new(tool("debugfs").unwrap()).args(["-R", request]).arg(image).output().unwrap();
    assert!(out.status.success(), "debugfs -R {request}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

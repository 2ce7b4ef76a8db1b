//! `csumkit ext4 check --repair --yes` never re-seals damage: random
//! corruptions of live inodes and directory blocks of kernel-made images,
//! repaired by the command, then judged by `e2fsck -fn`. Either e2fsck
//! finds the repaired image clean, or the repair exited non-zero and left
//! the corrupted structure's checksum as it found it (unsealed).

use csumkit::ext4::Layout;
use proptest::prelude::*;
use std::io::Write;
use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

/// Kernel-made images of the corpus (tests/data/ext4/VERDICTS: e2fsck clean).
const IMAGES: [&str; 11] = [
    "4k",
    "1k",
    "inline-4k",
    "largedir-1k",
    "4k-inode128",
    "noextent-4k",
    "bigalloc-4k",
    "eainode-4k",
    "metabg-1k",
    "seed-4k",
    "orphan-mmp-4k",
];

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// Every image unpacked once, or `None` (with a visible skip) without gzip and e2fsck.
fn images() -> Option<&'static Vec<Vec<u8>>> {
    static IMAGES_UNPACKED: OnceLock<Option<Vec<Vec<u8>>>> = OnceLock::new();
    IMAGES_UNPACKED
        .get_or_init(|| {
            if !Path::new("/usr/sbin/e2fsck").exists() {
                assert!(std::env::var_os("CI").is_none(), "e2fsck is required in CI");
                let _ =
                    writeln!(std::io::stderr(), "SKIPPED repair tests: e2fsck not found (apt-get install e2fsprogs)");
                return None;
            }
            let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/ext4");
            let unpack = |name: &str| {
                let out = Command::new("gzip").arg("-dc").arg(dir.join(format!("{name}.img.gz"))).output().unwrap();
                assert!(out.status.success(), "gzip -dc {name}.img.gz");
                out.stdout
            };
            Some(IMAGES.iter().map(|name| unpack(name)).collect())
        })
        .as_ref()
}

/// Where a structure lives and where its checksum is stored.
struct Target {
    what: String,
    /// Byte range the corruption may hit.
    range: std::ops::Range<usize>,
    /// (start, end) of each piece of its checksum.
    checksum: Vec<(usize, usize)>,
}

/// In-use inodes (by the bitmap) at or past `s_first_ino`, and the root.
fn live_inodes(image: &[u8], layout: &Layout) -> Vec<(u64, usize)> {
    let first_ino = u64::from(le32(image, 1024 + 0x54));
    let (bs, size) = (layout.block_size as usize, layout.inode_size as usize);
    let mut live = Vec::new();
    for g in 0..layout.groups {
        let group = layout.group(image, g).unwrap();
        if group.inode_uninit() {
            continue;
        }
        let bitmap = &image[group.inode_bitmap as usize * bs..];
        for i in 0..layout.inodes_per_group {
            let inum = g * layout.inodes_per_group + i + 1;
            if bitmap[(i / 8) as usize] >> (i % 8) & 1 == 1 && (inum >= first_ino || inum == 2) {
                live.push((inum, group.inode_table as usize * bs + i as usize * size));
            }
        }
    }
    live
}

/// The `pick`-th live inode, or a block of the `pick`-th directory whose
/// extents sit in its inode (depth 0).
fn target(image: &[u8], directory_block: bool, pick: usize) -> Option<Target> {
    let layout = Layout::parse(image).unwrap();
    let live = live_inodes(image, &layout);
    let size = layout.inode_size as usize;
    if !directory_block {
        let (inum, at) = live[pick % live.len()];
        let mut checksum = vec![(at + 0x7C, at + 0x7E)];
        if size > 128 && le16(image, at + 0x80) >= 4 {
            checksum.push((at + 0x82, at + 0x84));
        }
        return Some(Target { what: format!("inode {inum}"), range: at..at + size, checksum });
    }
    let bs = layout.block_size as usize;
    let mut blocks = Vec::new();
    for &(inum, at) in &live {
        let (mode, flags) = (le16(image, at), le32(image, at + 0x20));
        let root = at + 0x28;
        if mode & 0xF000 != 0x4000 || flags & 0x8_0000 == 0 || le16(image, root + 6) != 0 {
            continue;
        }
        for e in 0..usize::from(le16(image, root + 2)) {
            let x = root + 12 + 12 * e;
            let start = u64::from(le32(image, x + 8)) | u64::from(le16(image, x + 6)) << 32;
            for k in 0..u64::from(le16(image, x + 4).min(32768)) {
                blocks.push((inum, (start + k) as usize * bs));
            }
        }
    }
    let &(inum, at) = blocks.get(pick % blocks.len().max(1))?;
    // A leaf's checksum is its last 4 bytes; an htree node's sits after its entries (left unjudged here).
    Some(Target {
        what: format!("directory block at {at} of inode {inum}"),
        range: at..at + bs,
        checksum: vec![(at + bs - 4, at + bs)],
    })
}

/// Writes `image`, runs the repair, returns (exit status, stdout, the image after).
fn repair(image: &[u8], name: &str) -> (Option<i32>, String, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, image).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_csumkit"))
        .args(["ext4", "check", "--repair", "--yes"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text, std::fs::read(&path).unwrap())
}

/// `e2fsck -fn`'s verdict: clean, or what it said.
fn e2fsck(image: &[u8]) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("judged.img");
    std::fs::write(&path, image).unwrap();
    let out = Command::new("/usr/sbin/e2fsck").arg("-fn").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.code() == Some(0) && !text.contains("IGNORED") && !text.contains("? no") {
        Ok(())
    } else {
        Err(text)
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("CSUMKIT_REPAIR_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(96),
        max_shrink_iters: 16,
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_repair_never_reseals_damage(
        image in 0..IMAGES.len(),
        directory_block in any::<bool>(),
        pick in any::<usize>(),
        hits in prop::collection::vec((any::<usize>(), 1u8..=255), 1..4),
    ) {
        let Some(images) = images() else { return Ok(()) };
        let clean = &images[image];
        let Some(target) = target(clean, directory_block, pick) else { return Ok(()) };
        let mut bytes = clean.clone();
        for &(at, mask) in &hits {
            bytes[target.range.start + at % target.range.len()] ^= mask;
        }
        let (code, text, repaired) = repair(&bytes, "corrupt.img");
        // Damage is a finding or an error, never a panic (101) or a signal.
        prop_assert!(matches!(code, Some(0..=2)), "{} of {}: exit {code:?}: {text}", target.what, IMAGES[image]);
        if let Err(e2fsck_says) = e2fsck(&repaired) {
            prop_assert!(code != Some(0), "{} of {}: repair exited 0, e2fsck -fn: {e2fsck_says}\nrepair: {text}", target.what, IMAGES[image]);
            for &(start, end) in &target.checksum {
                prop_assert_eq!(&repaired[start..end], &bytes[start..end], "{} of {}: its checksum was rewritten over damage\ne2fsck -fn: {}\nrepair: {}", target.what, IMAGES[image], e2fsck_says, text);
            }
            prop_assert!(!text.contains("all checksums valid"), "{}: 'all checksums valid' over damage: {text}", target.what);
        }
    }
}

/// orphan_file + mmp (a kernel-made image): a wrong MMP checksum is fixed
/// before multiple-mount protection reads the block, and e2fsck is clean
/// after; an orphan block with an entry while no orphan is recorded is
/// damage (e2fsck: "not clean"), its checksum left as found.
#[test]
fn orphan_file_and_mmp_blocks_are_repaired_as_e2fsck_repairs_them() {
    if images().is_none() {
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/ext4");
    let out = Command::new("gzip").arg("-dc").arg(dir.join("orphan-mmp-4k.img.gz")).output().unwrap();
    let clean = out.stdout;
    let sb = &clean[1024..2048];
    let mmp = u64::from(le32(sb, 0x168)) as usize * 4096;
    let mut bad_mmp = clean.clone();
    bad_mmp[mmp + 0x3FC] ^= 1;
    let (code, text, repaired) = repair(&bad_mmp, "mmp.img");
    assert_eq!(code, Some(0), "{text}");
    e2fsck(&repaired).unwrap_or_else(|e| panic!("after the repair: {e}\n{text}"));
    // Block 3 of the orphan file (inode 12): an entry where none may be.
    let layout = Layout::parse(&clean).unwrap();
    let (_, at) = live_inodes(&clean, &layout).into_iter().find(|&(inum, _)| inum == 12).unwrap();
    let (root, depth) = (at + 0x28, le16(&clean, at + 0x28 + 6));
    assert_eq!(depth, 0, "the orphan file's extents sit in its inode");
    let start = u64::from(le32(&clean, root + 12 + 8)) as usize;
    let block = (start + 3) * 4096;
    let mut bad_orphan = clean.clone();
    bad_orphan[block + 100] ^= 0x55;
    let (code, text, repaired) = repair(&bad_orphan, "orphan.img");
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("not clean"), "{text}");
    assert_eq!(repaired[block + 4092..block + 4096], bad_orphan[block + 4092..block + 4096], "re-sealed");
    assert!(e2fsck(&repaired).is_err());
}

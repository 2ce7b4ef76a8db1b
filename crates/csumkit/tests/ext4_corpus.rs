//! `csumkit::ext4::check` on the committed corpus: ext4 images made by
//! mke2fs in every layout the checker claims and populated by the Linux
//! kernel through a loop mount (`scripts/ext4-corpus.sh`; `VERDICTS` says
//! how each was made and that `e2fsck -fn` called it clean). The corpus
//! needs no root to run; e2fsprogs re-judges every image here and locates
//! the structures the one-byte recipes damage, so neither the verdicts nor
//! the locations come from the checker under test.

mod common;

use common::ext4::{
    checksum_only_damage_is_repairable, counts_match_the_image, debugfs, debugfs_read, e2fsck_reports, le16, le32,
    tool, Scratch,
};
use csumkit::ext4::{check, Layout, Report};
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ext4")
}

/// One corpus image: its `VERDICTS` line's layout name, block size and
/// `-O` features.
struct Entry {
    name: String,
    block_size: u64,
    features: String,
}

fn entries() -> Vec<Entry> {
    let verdicts = std::fs::read_to_string(corpus_dir().join("VERDICTS")).unwrap();
    let entries: Vec<Entry> = verdicts
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            assert_eq!(fields.len(), 7, "VERDICTS line: {line}");
            assert_eq!(fields[4], "e2fsck=clean", "{line}");
            Entry { name: fields[0].into(), block_size: fields[1].parse().unwrap(), features: fields[2].into() }
        })
        .collect();
    let mut images: Vec<String> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".img.gz").map(String::from))
        .collect();
    images.sort();
    let mut named: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    named.sort();
    assert_eq!(images, named, "every image has a VERDICTS line and every line an image");
    entries
}

/// The image, decompressed into `scratch`.
fn unpack(entry: &Entry, scratch: &Scratch) -> Option<(PathBuf, Vec<u8>)> {
    let Some(gzip) = ["/usr/bin/gzip", "/bin/gzip"].iter().map(Path::new).find(|p| p.exists()) else {
        common::skip("gzip", "apt-get install gzip");
        return None;
    };
    let packed = corpus_dir().join(format!("{}.img.gz", entry.name));
    let out = Command::new(gzip).arg("-dc").arg(&packed).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", packed.display());
    let path = scratch.0.join(format!("{}.img", entry.name));
    std::fs::write(&path, &out.stdout).unwrap();
    Some((path, out.stdout))
}

fn has(entry: &Entry, feature: &str) -> bool {
    entry.features.split(',').any(|f| f == feature)
}

#[test]
fn kernel_made_corpus_checks_clean_in_every_layout() {
    let scratch = Scratch::new("corpus-clean");
    let entries = entries();
    assert!(entries.len() >= 17, "the corpus lost layouts: {}", entries.len());
    for entry in &entries {
        let Some((path, bytes)) = unpack(entry, &scratch) else { return };
        let label = &entry.name;
        let report = check(&bytes).unwrap_or_else(|e| panic!("{label}: {e}"));
        assert!(report.clean(), "{label}: {:?} {:?}", report.findings, report.missing_tails);
        let c = &report.checked;
        assert_eq!(Layout::parse(&bytes).unwrap().block_size, entry.block_size, "{label}");
        assert!(c.inodes > 2000 && c.dir_blocks > 70 && c.htree_blocks >= 2, "{label}: {c:?}");
        // user.big (one block) and the three files with one identical xattr (one shared
        // block); with 128-byte inodes every xattr is in a block.
        assert!(c.xattr_blocks >= 2, "{label}: {c:?}");
        assert_eq!(c.journal_superblocks, 1, "{label}: {c:?}");
        assert_eq!(c.orphan_blocks > 0, has(entry, "orphan_file"), "{label}: {c:?}");
        assert_eq!(c.mmp_blocks, u64::from(has(entry, "mmp")), "{label}: {c:?}");
        if has(entry, "^extent") {
            assert_eq!(c.extent_blocks, 0, "{label}: block-mapped, yet extent blocks: {c:?}");
        } else {
            assert!(c.extent_blocks >= 1, "{label}: the fragmented files need extent blocks: {c:?}");
        }
        // /tiny's user.huge lives in an ea_inode: its bytes are checked against its hash.
        assert_eq!(c.ea_inode_values, u64::from(has(entry, "ea_inode")), "{label}: {c:?}");
        assert!(report.unchecked.is_empty(), "{label}: {:?}", report.unchecked);
        if tool("e2fsck").is_some() {
            assert!(!e2fsck_reports(&path), "{label}: e2fsck -fn no longer calls the committed image clean");
        }
        counts_match_the_image(&report, &bytes, label);
        checksum_only_damage_is_repairable(&bytes, label);
    }
}

/// A one-byte recipe: where to flip, and what the checker must call it.
struct Recipe {
    what: &'static str,
    block: Option<u64>,
    at: usize,
}

/// A number after `label` in debugfs output.
fn number_after(text: &str, label: &str) -> Option<u64> {
    let rest = &text[text.find(label)? + label.len()..];
    let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn bmap(image: &Path, file: &str, logical: u64) -> u64 {
    let out = debugfs_read(image, &format!("bmap {file} {logical}"));
    out.trim().parse().unwrap_or_else(|_| panic!("bmap {file} {logical}: {out}"))
}

/// The checksum fields of one structure of each kind, located by debugfs
/// (e2fsprogs), not by the checker.
fn recipes(entry: &Entry, image: &Path, bytes: &[u8]) -> Vec<Recipe> {
    let layout = Layout::parse(bytes).unwrap();
    let bs = layout.block_size as usize;
    let mut recipes = vec![Recipe { what: "superblock", block: None, at: 1024 + 0x3FC }];
    let last = *layout.desc_offsets.last().unwrap() as usize;
    recipes.push(Recipe { what: "group descriptor", block: None, at: last + 0x1E });
    let imap = debugfs_read(image, "imap /small/file");
    let (block, offset) = (number_after(&imap, "located at block").unwrap(), imap.split("offset 0x").nth(1).unwrap());
    let offset = usize::from_str_radix(offset.trim(), 16).unwrap();
    recipes.push(Recipe { what: "inode", block: None, at: block as usize * bs + offset + 0x7C });
    let leaf = bmap(image, "/small", 0);
    recipes.push(Recipe { what: "directory block", block: Some(leaf), at: (leaf as usize + 1) * bs - 4 });
    let root = bmap(image, "/huge", 0) as usize;
    let limit = usize::from(le16(bytes, root * bs + 0x20));
    recipes.push(Recipe { what: "htree block", block: Some(root as u64), at: root * bs + 0x20 + 8 * limit + 4 });
    let acl = number_after(&debugfs_read(image, "stat /big/hardlink"), "File ACL:").unwrap();
    recipes.push(Recipe { what: "xattr block", block: Some(acl), at: acl as usize * bs + 0x10 });
    if !has(entry, "^extent") {
        let etb = number_after(&debugfs_read(image, "stat /frag-a"), "(ETB0):").unwrap();
        // The tail follows eh_max entries of 12 bytes after the 12-byte header.
        let max = usize::from(le16(bytes, etb as usize * bs + 4));
        recipes.push(Recipe { what: "extent block", block: Some(etb), at: etb as usize * bs + 12 + 12 * max });
    }
    let stats = debugfs_read(image, "stats");
    let journal = number_after(&stats, "Journal inode:").unwrap();
    let jsb = bmap(image, &format!("<{journal}>"), 0);
    recipes.push(Recipe { what: "journal superblock", block: Some(jsb), at: jsb as usize * bs + 0xFC });
    if let Some(orphan) = number_after(&stats, "Orphan file inode:") {
        let b = bmap(image, &format!("<{orphan}>"), 1);
        recipes.push(Recipe { what: "orphan file block", block: Some(b), at: (b as usize + 1) * bs - 4 });
    }
    if let Some(mmp) = number_after(&stats, "MMP block number:") {
        recipes.push(Recipe { what: "MMP block", block: Some(mmp), at: mmp as usize * bs + 0x3FC });
    }
    recipes
}

/// One byte of one checksum of each kind flipped (located by e2fsprogs):
/// `e2fsck -fn` flags it, the checker reports exactly that structure as a
/// repairable finding, and the repair restores the image the kernel wrote.
#[test]
fn one_byte_recipes_are_found_and_repaired_to_the_kernels_bytes() {
    let scratch = Scratch::new("corpus-recipes");
    if tool("debugfs").is_none() || tool("e2fsck").is_none() {
        return;
    }
    for entry in &entries() {
        let Some((path, clean)) = unpack(entry, &scratch) else { return };
        let recipes = recipes(entry, &path, &clean);
        let mut kinds: Vec<&str> = recipes.iter().map(|r| r.what).collect();
        kinds.dedup();
        assert_eq!(kinds.len(), recipes.len(), "{}", entry.name);
        for recipe in recipes {
            let label = format!("{} {}", entry.name, recipe.what);
            let mut bad = clean.clone();
            bad[recipe.at] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            assert!(e2fsck_reports(&path), "{label}: e2fsck -fn does not flag the recipe");
            let report: Report = check(&bad).unwrap_or_else(|e| panic!("{label}: {e}"));
            assert_eq!(report.findings.len(), 1, "{label}: {:?}", report.findings);
            let f = &report.findings[0];
            assert_eq!(f.what, recipe.what, "{label}: {f:?}");
            if let Some(block) = recipe.block {
                assert!(f.location.contains(&format!("block {block}")), "{label}: {f:?}");
            }
            assert!(f.repairable(), "{label}: {f:?}");
            for (at, fix) in &f.fix {
                bad[*at as usize..*at as usize + fix.len()].copy_from_slice(fix);
            }
            assert!(bad == clean, "{label}: the repair wrote something other than the kernel's bytes");
        }
        std::fs::write(&path, &clean).unwrap();
        assert!(!e2fsck_reports(&path), "{}", entry.name);
    }
}

/// The feature flags decide, as in the kernel: a journal inode and orphan
/// file the superblock still names after `has_journal` and `orphan_file`
/// were cleared (debugfs leaves `s_journal_inum`, `s_orphan_file_inum`) are
/// ordinary inodes, not a jbd2 superblock and orphan blocks to check; e2fsck
/// -fn flags the leftovers.
#[test]
fn a_journal_or_orphan_file_without_its_feature_is_not_checked_as_one() {
    let scratch = Scratch::new("corpus-features");
    let entry = entries().into_iter().find(|e| has(e, "orphan_file")).expect("an orphan_file image");
    let Some((path, bytes)) = unpack(&entry, &scratch) else { return };
    if tool("debugfs").is_none() || tool("e2fsck").is_none() {
        return;
    }
    let with = check(&bytes).unwrap();
    assert_eq!(with.checked.journal_superblocks, 1, "{:?}", with.checked);
    assert!(with.checked.orphan_blocks > 0, "{:?}", with.checked);
    debugfs(&path, "feature -has_journal -orphan_file\n");
    let bytes = std::fs::read(&path).unwrap();
    assert_ne!(le32(&bytes, 1024 + 0xE0), 0, "s_journal_inum still set");
    assert_ne!(le32(&bytes, 1024 + 0x280), 0, "s_orphan_file_inum still set");
    let without = check(&bytes).unwrap();
    assert!(without.clean(), "{without:?}");
    assert_eq!((without.checked.journal_superblocks, without.checked.orphan_blocks), (0, 0));
    assert!(e2fsck_reports(&path), "e2fsck -fn flags the leftover journal and orphan file");
}

/// An inode's xattr block address: `i_file_acl_high` counts only with
/// `64bit` (the kernel's `ext4_iget`): on a 32-bit image a stray value there
/// is content e2fsck rejects (pass 2: "i_file_acl_hi … should be zero"), on
/// a 64-bit one it moves the block past the filesystem; damage either way.
/// A block whose `h_blocks` is not 1 is not an xattr block (damage).
#[test]
fn xattr_block_addresses_and_headers() {
    let scratch = Scratch::new("corpus-xattr");
    for (features, moved) in [("^64bit", false), ("64bit", true)] {
        let entry = entries().into_iter().find(|e| has(e, features) && has(e, "metadata_csum")).expect(features);
        let Some((_, bytes)) = unpack(&entry, &scratch) else { return };
        let layout = Layout::parse(&bytes).unwrap();
        let g0 = layout.group(&bytes, 0).unwrap();
        let at = |inum: u64| ((g0.inode_table * layout.block_size) + (inum - 1) * layout.inode_size) as usize;
        let inum = (12..layout.inodes_per_group)
            .find(|&i| le16(&bytes, at(i)) != 0 && le32(&bytes, at(i) + 0x68) != 0)
            .expect("an inode with an xattr block");
        let mut bad = bytes.clone();
        bad[at(inum) + 0x76] = 1;
        let report = check(&bad).unwrap();
        let f = report.findings.iter().find(|f| f.what == "inode").expect("the inode's checksum");
        assert_eq!(f.inode, Some(inum));
        if moved {
            let damage = f.damage.as_deref().unwrap_or_default();
            assert!(damage.starts_with("xattr block: blocks") && damage.contains("outside"), "{damage}");
        } else {
            let damage = f.damage.as_deref().unwrap_or_default();
            assert!(damage.contains("high half of i_file_acl is set without the 64bit feature"), "{damage}");
        }
        let block = u64::from(le32(&bytes, at(inum) + 0x68));
        let mut bad = bytes.clone();
        bad[(block * layout.block_size) as usize + 8] = 2;
        let report = check(&bad).unwrap();
        let f = report.findings.iter().find(|f| f.what == "xattr block").expect("the xattr block's checksum");
        assert!(f.damage.as_deref().unwrap_or_default().contains("h_blocks 2"), "{f:?}");
    }
}

/// The jbd2 superblock, the orphan file's blocks and the MMP block (located
/// by debugfs) with wrong content: a checksum type other than CRC32C, a
/// wrong tail magic, a wrong MMP magic are damage (`e2fsck -fn` flags each);
/// no jbd2 magic, or an MMP block past the filesystem, cannot be followed:
/// an error naming it.
#[test]
fn special_structures_with_wrong_content_are_damage_or_errors() {
    let scratch = Scratch::new("corpus-special");
    let entry = entries().into_iter().find(|e| has(e, "orphan_file") && has(e, "mmp")).expect("orphan_file + mmp");
    let Some((path, clean)) = unpack(&entry, &scratch) else { return };
    if tool("debugfs").is_none() || tool("e2fsck").is_none() {
        return;
    }
    let bs = Layout::parse(&clean).unwrap().block_size as usize;
    let stats = debugfs_read(&path, "stats");
    let journal = bmap(&path, &format!("<{}>", number_after(&stats, "Journal inode:").unwrap()), 0) as usize * bs;
    let orphan = bmap(&path, &format!("<{}>", number_after(&stats, "Orphan file inode:").unwrap()), 1) as usize;
    let mmp = number_after(&stats, "MMP block number:").unwrap() as usize * bs;
    let damage: [(&str, usize, u8, &str); 3] = [
        ("journal superblock", journal + 0x50, 1, "jbd2 checksum type 1 is not CRC32C"),
        ("orphan file block", (orphan + 1) * bs - 8, 0, "orphan block tail magic"),
        ("MMP block", mmp, 0, "MMP magic"),
    ];
    for (what, at, value, why) in damage {
        let mut bad = clean.clone();
        bad[at] = value;
        if what == "orphan file block" {
            // The tail magic is outside the checksum (as the kernel sums it):
            // damage shows with a wrong checksum, here the last byte's.
            bad[(orphan + 1) * bs - 1] ^= 0x01;
        }
        let report = check(&bad).unwrap();
        let f = report.findings.iter().find(|f| f.what == what).unwrap_or_else(|| panic!("{what}: {report:?}"));
        assert!(f.damage.as_deref().unwrap_or_default().contains(why), "{what}: {f:?}");
        std::fs::write(&path, &bad).unwrap();
        assert!(e2fsck_reports(&path), "{what}: e2fsck -fn flags it");
    }
    let mut bad = clean.clone();
    bad[journal] ^= 0xFF;
    let err = check(&bad).unwrap_err().to_string();
    assert!(err.contains("journal (inode 8)") && err.contains("no jbd2 magic"), "{err}");
    let mut bad = clean.clone();
    bad[1024 + 0x16C] = 1;
    let err = check(&bad).unwrap_err().to_string();
    assert!(err.contains("MMP block") && err.contains("outside the filesystem"), "{err}");
}

/// A value held in an ea_inode (eainode-4k: /tiny's `user.huge`) is judged
/// as the kernel reads it: a byte of the value changed is data damage,
/// found with no fix; a hash in the value inode that its owner's entry no
/// longer matches (`e2fsck -fn` flags the entry) is damage to both.
#[test]
fn ea_inode_values_are_checked_against_their_hash() {
    let scratch = Scratch::new("corpus-ea-inode");
    let entry = entries().into_iter().find(|e| has(e, "ea_inode")).expect("an ea_inode image");
    let Some((path, clean)) = unpack(&entry, &scratch) else { return };
    if tool("debugfs").is_none() || tool("e2fsck").is_none() {
        return;
    }
    let layout = Layout::parse(&clean).unwrap();
    let bs = layout.block_size as usize;
    let g0 = layout.group(&clean, 0).unwrap();
    let at = |inum: u64| ((g0.inode_table * layout.block_size) + (inum - 1) * layout.inode_size) as usize;
    // EXT4_EA_INODE_FL marks the value's inode.
    let value = (12..layout.inodes_per_group).find(|&i| le32(&clean, at(i) + 0x20) & 0x20_0000 != 0).expect("a value");
    let block = bmap(&path, &format!("<{value}>"), 0) as usize;

    let mut bad = clean.clone();
    bad[block * bs + 100] ^= 0x01;
    let report = check(&bad).unwrap();
    let f = report.findings.iter().find(|f| f.what == "ea_inode value").expect("the value's hash");
    assert_eq!(f.inode, Some(value));
    assert!(f.fix.is_empty() && !f.repairable(), "{f:?}");
    assert!(f.damage.as_deref().unwrap_or_default().contains("the kernel refuses to read it"), "{f:?}");

    let mut bad = clean.clone();
    bad[at(value) + 0x08] ^= 0x01;
    let report = check(&bad).unwrap();
    let f = report.findings.iter().find(|f| f.what == "inode").expect("the value inode's checksum");
    assert_eq!(f.inode, Some(value));
    assert!(!f.repairable(), "{f:?}");
    std::fs::write(&path, &bad).unwrap();
    assert!(e2fsck_reports(&path), "e2fsck -fn flags the entry's hash");
}

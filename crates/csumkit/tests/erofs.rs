//! erofs reader and xattr name filter against images made by the upstream
//! tools: mkfs.erofs 1.9.3 images with filters (`tests/data/erofs`,
//! with a JSON of every inode's xattr names and stored filter), and trees
//! built here with Debian's mkfs.erofs 1.5 (no filters) retrofitted with
//! `plan_filters` and checked by fsck.erofs.

mod common;

use csumkit::erofs::{Image, Lookup};
use csumkit::xattr_filter::Filter;
use csumkit::Error;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

fn testdata() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/erofs")
}

/// Names that are on no inode of the test images.
const ABSENT: [&str; 6] = [
    "system.posix_acl_access",
    "security.capability",
    "user.does.not.exist",
    "trusted.overlay.opaque",
    "security.ima",
    "system.posix_acl_default",
];

fn check_against_json(name: &str) {
    let dir = testdata();
    let json_path = dir.join(format!("{name}.json"));
    let Ok(json) = std::fs::read_to_string(&json_path) else {
        common::skip(&json_path.display().to_string(), "the committed test images");
        return;
    };
    let listing: serde_json::Value = serde_json::from_str(&json).unwrap();
    let bytes = std::fs::read(dir.join(format!("{name}.erofs"))).unwrap();
    let image = Image::open(&bytes).unwrap();
    let sb = image.superblock();
    assert_eq!(sb.block_size, listing["block_size"].as_u64().unwrap() as u32);
    assert_eq!(format!("{:#x}", sb.feature_compat), listing["feature_compat"].as_str().unwrap());
    assert_eq!(format!("{:#010x}", sb.checksum), listing["sb_checksum"].as_str().unwrap());
    assert!(sb.uses_xattr_filter());

    let inodes = listing["inodes"].as_array().unwrap();
    let walked = image.walk().unwrap();
    assert_eq!(walked.len(), inodes.len(), "{name}: reachable inodes");
    let (mut filters, mut shared, mut acls) = (0, 0, 0);
    for entry in inodes {
        let nid = entry["nid"].as_u64().unwrap();
        for path in entry["paths"].as_array().unwrap() {
            assert_eq!(image.lookup(path.as_str().unwrap()).unwrap().nid, nid, "{name}: {path}");
        }
        let inode = image.inode(nid).unwrap();
        assert_eq!(inode.extended, entry["extended_inode"].as_bool().unwrap());
        let names: BTreeSet<String> =
            entry["xattr_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
        let xattrs = image.xattrs(&inode).unwrap();
        let read: BTreeSet<String> = xattrs.iter().map(|x| x.full_name()).collect();
        assert_eq!(read, names, "{name}: nid {nid} xattr names");
        assert_eq!(xattrs.iter().filter(|x| x.shared).count() as u64, entry["shared_xattr_count"].as_u64().unwrap());
        shared += xattrs.iter().filter(|x| x.shared).count();
        acls += names.iter().filter(|n| n.starts_with("system.posix_acl")).count();

        let stored = inode.name_filter;
        let computed = image.computed_filter(&inode).unwrap();
        match entry["h_name_filter"].as_u64() {
            None => assert_eq!((stored, computed), (None, None), "{name}: nid {nid}"),
            Some(expected) => {
                let expected = Some(Filter(expected as u32));
                assert_eq!(stored, expected, "{name}: nid {nid} stored");
                assert_eq!(computed, expected, "{name}: nid {nid} recomputed");
                assert_eq!(Some(Filter::from_names(names.iter().map(String::as_str)).unwrap()), expected);
                filters += 1;
            }
        }
        // Every present name is found with and without the filter; absent
        // names are absent both ways, and the filter answers most of them.
        for n in &names {
            for use_filter in [false, true] {
                assert!(matches!(image.getxattr(&inode, n, use_filter).unwrap(), Lookup::Found(_)), "{n}");
            }
        }
        for n in ABSENT.iter().filter(|n| !names.contains(**n)) {
            assert_eq!(image.getxattr(&inode, n, false).unwrap(), Lookup::Absent { filtered: false });
            assert!(matches!(image.getxattr(&inode, n, true).unwrap(), Lookup::Absent { .. }));
        }
    }
    assert!(filters > 0);
    if name == "shared" {
        assert!(shared > 0, "the shared image has shared xattrs");
    }
    if name == "mixed" {
        assert!(acls > 0, "the mixed image has ACLs");
    }
    let report = image.check_filters().unwrap();
    assert!(report.enabled);
    assert_eq!(report.with_ibody, filters);
    assert!(report.mismatches.is_empty(), "{:?}", report.mismatches);
    assert!(image.plan_filters().unwrap().is_empty());
}

#[test]
fn mkfs_erofs_1_9_mixed_image_filters_match_bit_for_bit() {
    check_against_json("mixed");
}

#[test]
fn mkfs_erofs_1_9_shared_xattr_image_filters_match_bit_for_bit() {
    check_against_json("shared");
}

#[test]
fn a_wrong_filter_is_reported_and_repaired() {
    let Ok(mut bytes) = std::fs::read(testdata().join("mixed.erofs")) else { return };
    let image = Image::open(&bytes).unwrap();
    let (path, inode) = image.walk().unwrap().into_iter().find(|(_, i)| i.xattr_icount > 0).unwrap();
    let at = inode.xattr_offset().unwrap() as usize;
    drop(image);
    bytes[at] ^= 0x10;
    // The superblock checksum covers block 0, where this small image keeps
    // its inodes: the damaged filter is found only once that is re-sealed.
    assert!(matches!(Image::open(&bytes), Err(Error::Corrupt { .. })));
    let crc = csumkit::erofs::Superblock::compute_checksum(&bytes, 4096).unwrap();
    bytes[1028..1032].copy_from_slice(&crc.to_le_bytes());
    let image = Image::open(&bytes).unwrap();
    let report = image.check_filters().unwrap();
    assert_eq!(report.mismatches.len(), 1);
    assert_eq!(report.mismatches[0].path, path);
    let plan = image.plan_filters().unwrap();
    assert!(plan.filters.is_empty() && plan.superblock_span.is_some(), "the filter is in block 0");
    plan.apply(&mut bytes);
    assert!(Image::open(&bytes).unwrap().check_filters().unwrap().mismatches.is_empty());
}

#[test]
fn damaged_images_are_errors_not_panics() {
    let Ok(bytes) = std::fs::read(testdata().join("shared.erofs")) else { return };
    let exercise = |data: &[u8]| -> Result<usize, Error> {
        let image = Image::open(data)?;
        let mut n = 0;
        for (_, inode) in image.walk()? {
            n += image.xattrs(&inode)?.len();
            image.getxattr(&inode, "security.capability", true)?;
        }
        image.check_filters()?;
        Ok(n)
    };
    assert!(exercise(&bytes).unwrap() > 0);
    // Every truncation.
    for len in (0..bytes.len()).step_by(7) {
        assert!(exercise(&bytes[..len]).is_err() || len > 4096, "truncated to {len}");
    }
    // A flipped superblock byte fails the checksum.
    let mut sb = bytes.clone();
    sb[1024 + 44] ^= 1;
    assert!(matches!(Image::open(&sb), Err(Error::Corrupt { .. })));
    // Every byte of the metadata changed to a few values: never a panic.
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    for at in 4096..bytes.len() {
        let mut bad = bytes.clone();
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        bad[at] ^= 1 << (rng % 8) | 0x80;
        let _ = exercise(&bad);
    }
}

fn tool(name: &str) -> Option<PathBuf> {
    let found = ["/usr/bin", "/usr/sbin", "/bin", "/sbin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists());
    if found.is_none() {
        common::skip(name, "apt-get install erofs-utils acl");
    }
    found
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let c_name = std::ffi::CString::new(name).unwrap();
    // SAFETY: valid NUL-terminated strings and a live buffer of value.len() bytes.
    let rc = unsafe { libc::lsetxattr(c_path.as_ptr(), c_name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(rc, 0, "setxattr {name} on {}: {}", path.display(), std::io::Error::last_os_error());
}

/// A source tree with many xattrs: user., trusted., security., ACLs (via
/// setfacl), none, long names, one file with many; plus the names set.
fn build_tree(root: &Path) -> Vec<(String, Vec<String>)> {
    let _ = std::fs::remove_dir_all(root);
    std::fs::create_dir_all(root.join("d/sub")).unwrap();
    let mut expected = Vec::new();
    for i in 0..200 {
        let rel = if i % 3 == 0 {
            format!("d/f{i}")
        } else if i % 3 == 1 {
            format!("d/sub/g{i}")
        } else {
            format!("h{i}")
        };
        let path = root.join(&rel);
        std::fs::write(&path, format!("file {i}")).unwrap();
        let mut names = Vec::new();
        let candidates = [
            format!("user.k{}", i % 17),
            "user.mime_type".to_string(),
            format!("trusted.t{}", i % 5),
            "security.selinux".to_string(),
            format!("user.{}", "L".repeat(200 + i % 50)),
        ];
        for (j, n) in candidates.iter().enumerate() {
            if (i >> j) & 1 == 1 {
                // Common (name, value) pairs are what `-x1` shares.
                let value = if j == 1 || j == 3 { "common".to_string() } else { format!("v{i}") };
                set_xattr(&path, n, value.as_bytes());
                names.push(n.clone());
            }
        }
        if i == 7 {
            for k in 0..40 {
                let n = format!("user.many{k}");
                set_xattr(&path, &n, b"");
                names.push(n);
            }
        }
        expected.push((format!("/{rel}"), names));
    }
    expected
}

#[test]
fn add_filter_on_mkfs_erofs_1_5_images_then_check() {
    let (Some(mkfs), Some(fsck), Some(setfacl)) = (tool("mkfs.erofs"), tool("fsck.erofs"), tool("setfacl")) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("csumkit-erofs-{}", std::process::id()));
    let root = dir.join("tree");
    let mut expected = build_tree(&root);
    // ACLs: access on a file, access + default on a directory.
    for (args, target) in [(vec!["-m", "u:1234:rw"], "d/f0"), (vec!["-m", "u:99:rx", "-d", "-m", "g:7:r"], "d/sub")] {
        let status = Command::new(&setfacl).args(&args).arg(root.join(target)).status().unwrap();
        assert!(status.success());
    }
    let acl_names = |target: &str| -> Vec<String> {
        let mut names = vec!["system.posix_acl_access".to_string()];
        if target == "/d/sub" {
            names.push("system.posix_acl_default".to_string());
        }
        names
    };
    for target in ["/d/f0", "/d/sub"] {
        match expected.iter_mut().find(|(p, _)| p == target) {
            Some((_, names)) => names.extend(acl_names(target)),
            None => expected.push((target.to_string(), acl_names(target))),
        }
    }
    for (variant, extra) in
        [("inline", vec![]), ("shared", vec!["-x1"]), ("extended", vec!["-x1", "-E", "force-inode-extended"])]
    {
        let image_path = dir.join(format!("{variant}.erofs"));
        let out = Command::new(&mkfs).args(&extra).arg(&image_path).arg(&root).output().unwrap();
        assert!(out.status.success(), "{variant}: {}", String::from_utf8_lossy(&out.stderr));
        let before = std::fs::read(&image_path).unwrap();
        let image = Image::open(&before).unwrap();
        let report = image.check_filters().unwrap();
        assert!(!report.enabled, "mkfs.erofs 1.5 writes no filters");
        // Without the filter every lookup reads the xattrs.
        let inode = image.lookup("/h2").unwrap();
        assert_eq!(image.getxattr(&inode, "security.capability", true).unwrap(), Lookup::Absent { filtered: false });

        let plan = image.plan_filters().unwrap();
        assert!(plan.superblock_span.is_some());
        assert_eq!(plan.with_ibody, report.with_ibody);
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&image_path).unwrap();
        plan.write_to(&file).unwrap();
        drop(file);

        let after = std::fs::read(&image_path).unwrap();
        let image = Image::open(&after).unwrap();
        let report = image.check_filters().unwrap();
        assert!(report.enabled && report.mismatches.is_empty(), "{variant}: {:?}", report.mismatches);
        let mut shared = 0;
        for (path, names) in &expected {
            let inode = image.lookup(path).unwrap();
            let read: BTreeSet<String> = image.xattrs(&inode).unwrap().iter().map(|x| x.full_name()).collect();
            shared += image.xattrs(&inode).unwrap().iter().filter(|x| x.shared).count();
            assert_eq!(read, names.iter().cloned().collect(), "{variant}: {path}");
            let want = Filter::from_names(names.iter().map(String::as_str)).unwrap();
            if !names.is_empty() {
                assert_eq!(inode.name_filter, Some(want), "{variant}: {path}");
            }
            for n in names {
                assert!(matches!(image.getxattr(&inode, n, true).unwrap(), Lookup::Found(_)), "{variant}: {path} {n}");
            }
        }
        if variant != "inline" {
            assert!(shared > 0, "{variant}: -x1 should share xattrs");
        }
        // Only the filters and the superblock changed.
        let changed: Vec<usize> = (0..before.len()).filter(|&i| before[i] != after[i]).collect();
        let filter_bytes = |i: usize| plan.filters.iter().any(|&(at, _)| (at as usize..at as usize + 4).contains(&i));
        assert!(changed.iter().all(|&i| i < 4096 || filter_bytes(i)), "{variant}: only filters and block 0 change");
        // The upstream checker accepts the result (superblock checksum
        // included). fsck.erofs 1.5 exits 0 even on a checksum mismatch, so
        // its error lines are what is checked.
        let out = Command::new(&fsck).arg(&image_path).output().unwrap();
        let errors = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success() && !errors.contains("<E>"), "{variant}: fsck.erofs: {errors}");
        let mut broken = after.clone();
        broken[1030] ^= 0x40;
        let broken_path = dir.join("broken.erofs");
        std::fs::write(&broken_path, &broken).unwrap();
        let out = Command::new(&fsck).arg(&broken_path).output().unwrap();
        assert!(String::from_utf8_lossy(&out.stderr).contains("<E>"), "fsck.erofs must see a bad checksum");
        assert!(image.plan_filters().unwrap().is_empty(), "add-filter is idempotent");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A minimal image written field by field with a long xattr prefix
/// (`trusted.` + infix `overlay.`), the one on-disk feature neither the
/// shared images nor Debian's mkfs.erofs 1.5 can produce: the long-prefix
/// rule (hash the infix and the suffix under the base index) must give the
/// same filter as the full name does.
fn long_prefix_image(stored_filter: u32, long_index: u8) -> Vec<u8> {
    let bs = 4096;
    let mut img = vec![0u8; 3 * bs];
    let put16 = |img: &mut Vec<u8>, at: usize, v: u16| img[at..at + 2].copy_from_slice(&v.to_le_bytes());
    let put32 = |img: &mut Vec<u8>, at: usize, v: u32| img[at..at + 4].copy_from_slice(&v.to_le_bytes());
    let sb = 1024;
    put32(&mut img, sb, csumkit::erofs::MAGIC);
    put32(&mut img, sb + 8, csumkit::xattr_filter::FEATURE_COMPAT_XATTR_FILTER);
    img[sb + 12] = 12; // 4 KiB blocks
    img[sb + 16] = 2; // inodes
    put32(&mut img, sb + 36, 3); // blocks
    put32(&mut img, sb + 40, 1); // meta_blkaddr: nids count from block 1
    put32(&mut img, sb + 80, 0x80); // INCOMPAT_XATTR_PREFIXES
    img[sb + 91] = 1; // one long prefix
    put32(&mut img, sb + 92, 2048 / 4); // at byte 2048 (no packed inode: metadata area)
    img[2048..2048 + 11].copy_from_slice(b"\x09\x00\x04overlay.");
    // nid 0: the root directory, compact, data inline after the inode.
    let root = bs;
    put16(&mut img, root, 2 << 1); // FLAT_INLINE
    put16(&mut img, root + 4, 0o040_755);
    put16(&mut img, root + 6, 2);
    put32(&mut img, root + 8, 40);
    let dir = root + 32;
    for (i, (nid, nameoff)) in [(0u64, 36u16), (0, 37), (4, 39)].into_iter().enumerate() {
        img[dir + 12 * i..dir + 12 * i + 8].copy_from_slice(&nid.to_le_bytes());
        put16(&mut img, dir + 12 * i + 8, nameoff);
    }
    img[dir + 36..dir + 40].copy_from_slice(b"...f");
    // nid 4: the file, with an xattr ibody of two inline entries.
    let file = bs + 4 * 32;
    put16(&mut img, file + 2, 6); // 12-byte header + 20 bytes of entries
    put16(&mut img, file + 4, 0o100_644);
    put16(&mut img, file + 6, 1);
    put32(&mut img, file + 32, stored_filter);
    let e = file + 32 + 12;
    img[e..e + 4].copy_from_slice(&[6, 0x80 | long_index, 1, 0]);
    img[e + 4..e + 11].copy_from_slice(b"opaquey");
    img[e + 12..e + 16].copy_from_slice(&[1, 1, 1, 0]); // user.x = "1"
    img[e + 16..e + 18].copy_from_slice(b"x1");
    img
}

#[test]
fn long_xattr_prefixes_resolve_and_hash_like_full_names() {
    let names = ["trusted.overlay.opaque", "user.x"];
    let want = Filter::from_names(names).unwrap();
    let bytes = long_prefix_image(want.0, 0);
    let image = Image::open(&bytes).unwrap();
    assert_eq!(image.long_prefixes().len(), 1);
    assert_eq!((image.long_prefixes()[0].base_index, &image.long_prefixes()[0].infix[..]), (4, &b"overlay."[..]));
    let inode = image.lookup("/f").unwrap();
    let read: BTreeSet<String> = image.xattrs(&inode).unwrap().iter().map(|x| x.full_name()).collect();
    assert_eq!(read, names.iter().map(|n| n.to_string()).collect());
    assert_eq!(image.computed_filter(&inode).unwrap(), Some(want));
    assert!(image.check_filters().unwrap().mismatches.is_empty());
    for use_filter in [false, true] {
        assert_eq!(image.getxattr(&inode, "trusted.overlay.opaque", use_filter).unwrap(), Lookup::Found(b"y"));
        assert_eq!(image.getxattr(&inode, "user.x", use_filter).unwrap(), Lookup::Found(b"1"));
        // Same suffix bytes under the base prefix alone is a different name.
        assert!(matches!(image.getxattr(&inode, "trusted.opaque", use_filter).unwrap(), Lookup::Absent { .. }));
    }
    // A wrong stored filter is found and planned for repair.
    let wrong = long_prefix_image(0, 0);
    let image = Image::open(&wrong).unwrap();
    assert_eq!(image.check_filters().unwrap().mismatches.len(), 1);
    let mut fixed = wrong.clone();
    image.plan_filters().unwrap().apply(&mut fixed);
    assert_eq!(Image::open(&fixed).unwrap().lookup("/f").unwrap().name_filter, Some(want));
    // A long-prefix number past the table is corruption.
    let bad = long_prefix_image(want.0, 1);
    let image = Image::open(&bad).unwrap();
    let inode = image.lookup("/f").unwrap();
    assert!(matches!(image.xattrs(&inode), Err(Error::Corrupt { .. })));
}

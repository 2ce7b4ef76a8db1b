//! `csumkit::erofs` on the committed corpus (`tests/data/erofs-corpus/`,
//! made by `scripts/erofs-corpus.sh`): one source tree built by Debian's
//! mkfs.erofs 1.5 and upstream erofs-utils 1.7.1 and 1.9.3 with every
//! metadata option (block sizes 512 B–4 KiB, compact and extended inodes,
//! shared xattrs, long prefixes, lz4/lzma/deflate/zstd, tail packing,
//! fragments, dedupe, chunks, `--root-xattr-isize`, 48-bit layout,
//! dot-omitted directories, compressed directories, metabox, tar input).
//! The oracle is the kernel: each image was mounted and every path's type,
//! mode, owner, size, link count, symlink target, xattrs and each regular
//! file's CRC-32 recorded beside it, with upstream fsck.erofs 1.9.3's
//! verdict (`scripts/erofs-corpus-views.sh`). The reader must show exactly that, or refuse the image with an
//! error that names the feature it lacks.

mod common;

use csumkit::erofs::{Image, Lookup};
use csumkit::Error;
use serde_json::Value;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/erofs-corpus")
}

/// Images the reader refuses, with the words its error must contain.
const REFUSED: &[(&str, &str)] = &[];

struct Entry {
    name: String,
    oracle: Value,
    bytes: Vec<u8>,
}

fn corpus() -> Option<Vec<Entry>> {
    let Some(gzip) = ["/usr/bin/gzip", "/bin/gzip"].iter().map(Path::new).find(|p| p.exists()) else {
        common::skip("gzip", "apt-get install gzip");
        return None;
    };
    let mut names: Vec<String> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".json").map(String::from))
        .collect();
    names.sort();
    let entries = names
        .into_iter()
        .map(|name| {
            let oracle: Value =
                serde_json::from_str(&std::fs::read_to_string(corpus_dir().join(format!("{name}.json"))).unwrap())
                    .unwrap();
            let packed = corpus_dir().join(oracle["image"].as_str().unwrap());
            let out = Command::new(gzip).arg("-dc").arg(&packed).output().unwrap();
            assert!(out.status.success(), "gzip -dc {}", packed.display());
            Entry { name, oracle, bytes: out.stdout }
        })
        .collect();
    Some(entries)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Everything the kernel showed, compared path by path.
fn matches_the_kernel(entry: &Entry, image: &Image<'_>) {
    let label = &entry.name;
    let listed = entry.oracle["entries"].as_array().unwrap();
    assert!(listed.len() > 400, "{label}: the kernel's view has {} paths", listed.len());
    let mut inodes = HashSet::new();
    let mut contents = 0;
    for seen in listed {
        let path = seen["path"].as_str().unwrap();
        let at = |what: &str| format!("{label} {path}: {what}");
        let inode = image.lookup(path).unwrap_or_else(|e| panic!("{}", at(&e.to_string())));
        inodes.insert(seen["ino"].as_u64().unwrap());
        assert_eq!(u64::from(inode.mode), seen["mode"].as_u64().unwrap(), "{}", at("mode"));
        assert_eq!(u64::from(inode.uid), seen["uid"].as_u64().unwrap(), "{}", at("uid"));
        assert_eq!(u64::from(inode.gid), seen["gid"].as_u64().unwrap(), "{}", at("gid"));
        assert_eq!(inode.size, seen["size"].as_u64().unwrap(), "{}", at("size"));
        assert_eq!(u64::from(inode.nlink), seen["nlink"].as_u64().unwrap(), "{}", at("nlink"));
        if let Some(target) = seen["target"].as_str() {
            let stored = image.data(&inode).unwrap();
            assert_eq!(stored, target.as_bytes(), "{}", at("symlink target"));
        }
        if let Some(crc) = seen["crc32"].as_u64() {
            let data = image.data(&inode).unwrap_or_else(|e| panic!("{}", at(&e.to_string())));
            assert_eq!(data.len() as u64, inode.size, "{}", at("data length"));
            assert_eq!(u64::from(crc32fast::hash(&data)), crc, "{}", at("data (CRC-32)"));
            contents += 1;
        }
        let kernel: BTreeMap<String, String> = seen["xattrs"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
            .collect();
        let ours: BTreeMap<String, String> =
            image.xattrs(&inode).unwrap().iter().map(|x| (x.full_name(), hex(x.value))).collect();
        assert_eq!(ours, kernel, "{}", at("xattrs"));
        for (name, value) in &kernel {
            match image.getxattr(&inode, name, true).unwrap() {
                Lookup::Found(v) => assert_eq!(&hex(v), value, "{}", at(name)),
                other => panic!("{}: {other:?}", at(name)),
            }
        }
        let absent = image.getxattr(&inode, "security.selinux", true).unwrap();
        assert!(matches!(absent, Lookup::Absent { .. }), "{}", at("security.selinux"));
    }
    assert_eq!(image.walk().unwrap().len(), inodes.len(), "{label}: inodes reachable from the root");
    assert!(contents > 400, "{label}: {contents} files' data read");
}

#[test]
fn every_image_reads_as_the_kernel_shows_it_or_is_refused_by_name() {
    let Some(corpus) = corpus() else { return };
    assert!(corpus.len() >= 24, "the corpus lost images: {}", corpus.len());
    for entry in &corpus {
        let label = &entry.name;
        assert_eq!(entry.oracle["kernel"], "mounted", "{label}: the oracle needs the kernel's view");
        let fsck = entry.oracle["fsck_erofs"].as_str().unwrap_or_default();
        assert!(fsck.contains("1.9") && fsck.ends_with(": clean"), "{label}: upstream fsck.erofs's verdict: {fsck:?}");
        let opened = Image::open(&entry.bytes).and_then(|image| image.walk().map(|_| image));
        match (REFUSED.iter().find(|(name, _)| name == label), opened) {
            (Some((_, words)), Err(Error::Invalid { detail, .. })) => {
                assert!(detail.contains(words), "{label}: refused, but without naming {words:?}: {detail}");
            }
            (Some(_), other) => panic!("{label}: expected a refusal naming the feature, got {:?}", other.err()),
            (None, Ok(image)) => {
                matches_the_kernel(entry, &image);
                let report = image.check_filters().unwrap();
                assert!(report.mismatches.is_empty(), "{label}: {:?}", report.mismatches);
            }
            (None, Err(e)) => panic!("{label}: {e}"),
        }
    }
}

/// `add-filter` on every block size: an image mkfs.erofs 1.7/1.9 wrote
/// with filters, its feature bit cleared (and checksum re-sealed), gets
/// back exactly the bytes mkfs wrote — including 512 B and 1 KiB blocks,
/// where the superblock is not in block 0. Images mkfs 1.5 wrote without
/// filters get them, and still read as the kernel shows them.
#[test]
fn add_filter_restores_what_mkfs_wrote_at_every_block_size() {
    let Some(corpus) = corpus() else { return };
    let mut sizes = HashSet::new();
    for entry in corpus.iter().filter(|e| !REFUSED.iter().any(|(name, _)| *name == e.name)) {
        let label = &entry.name;
        let image = Image::open(&entry.bytes).unwrap();
        let sb = image.superblock().clone();
        if image.has_metabox() {
            // Its inodes are bytes of the metabox inode's compressed data.
            let refused = image.plan_filters().unwrap_err().to_string();
            assert!(refused.contains("metabox"), "{label}: {refused}");
            continue;
        }
        if sb.uses_xattr_filter() {
            sizes.insert(sb.block_size);
            let mut cleared = entry.bytes.clone();
            let compat = sb.feature_compat & !csumkit::xattr_filter::FEATURE_COMPAT_XATTR_FILTER;
            cleared[1024 + 8..1024 + 12].copy_from_slice(&compat.to_le_bytes());
            if sb.has_checksum() {
                let crc = csumkit::erofs::Superblock::compute_checksum(&cleared, sb.block_size).unwrap();
                cleared[1024 + 4..1024 + 8].copy_from_slice(&crc.to_le_bytes());
            }
            let plan = Image::open(&cleared).unwrap().plan_filters().unwrap();
            assert!(plan.filters.is_empty(), "{label}: every filter was already right");
            plan.apply(&mut cleared);
            assert!(cleared == entry.bytes, "{label}: add-filter did not restore mkfs's bytes");
        } else {
            let mut bytes = entry.bytes.clone();
            let plan = image.plan_filters().unwrap();
            assert!(plan.with_ibody > 0, "{label}");
            plan.apply(&mut bytes);
            let filtered = Image::open(&bytes).unwrap();
            assert!(filtered.superblock().uses_xattr_filter(), "{label}");
            assert!(filtered.check_filters().unwrap().mismatches.is_empty(), "{label}");
            matches_the_kernel(entry, &filtered);
            kernel_reads_the_same(entry, &bytes);
        }
    }
    assert!([512, 1024, 2048, 4096].iter().all(|s| sizes.contains(s)), "block sizes covered: {sizes:?}");
}

/// The kernel mounts an image `add-filter` rewrote (its filters now used by
/// the kernel's getxattr) and shows every path as it showed the original:
/// same attributes, same xattrs. A visible skip where mounting is refused
/// (it needs root and loop devices).
fn kernel_reads_the_same(entry: &Entry, bytes: &[u8]) {
    use std::io::Write;
    let dir = std::env::temp_dir().join(format!("csumkit-erofs-kernel-{}-{}", entry.name, std::process::id()));
    let (image, mnt) = (dir.join("filtered.erofs"), dir.join("mnt"));
    std::fs::create_dir_all(&mnt).unwrap();
    std::fs::write(&image, bytes).unwrap();
    let out = Command::new("mount").args(["-t", "erofs", "-o", "loop,ro"]).arg(&image).arg(&mnt).output();
    if !matches!(&out, Ok(o) if o.status.success()) {
        let why = out.map_or_else(|e| e.to_string(), |o| String::from_utf8_lossy(&o.stderr).trim().to_string());
        let test = std::thread::current().name().unwrap_or("a test").to_string();
        let _ = writeln!(std::io::stderr(), "SKIPPED {test} (kernel mount of {}): {why}", entry.name);
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let result = std::panic::catch_unwind(|| {
        for seen in entry.oracle["entries"].as_array().unwrap() {
            let path = seen["path"].as_str().unwrap();
            let host = mnt.join(path.trim_start_matches('/'));
            let meta = std::fs::symlink_metadata(&host).unwrap();
            use std::os::unix::fs::MetadataExt;
            let at = format!("{} {path} (kernel, after add-filter)", entry.name);
            assert_eq!(u64::from(meta.mode()), seen["mode"].as_u64().unwrap(), "{at}");
            assert_eq!(
                (u64::from(meta.uid()), u64::from(meta.gid())),
                (seen["uid"].as_u64().unwrap(), seen["gid"].as_u64().unwrap()),
                "{at}"
            );
            assert_eq!(
                (meta.size(), meta.nlink()),
                (seen["size"].as_u64().unwrap(), seen["nlink"].as_u64().unwrap()),
                "{at}"
            );
            let kernel: BTreeMap<String, String> = seen["xattrs"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            assert_eq!(host_xattrs(&host), kernel, "{at}");
        }
    });
    let umount = Command::new("umount").arg(&mnt).status().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(umount.success());
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// Every xattr of `path` (not following a symlink), value in hex, through
/// the kernel (llistxattr / lgetxattr).
fn host_xattrs(path: &Path) -> BTreeMap<String, String> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).unwrap();
    let mut names = vec![0u8; 65536];
    // SAFETY: a NUL-terminated path and a live buffer of names.len() bytes.
    let len = unsafe { libc::llistxattr(c_path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    assert!(len >= 0, "llistxattr {}: {}", path.display(), std::io::Error::last_os_error());
    names.truncate(len as usize);
    let mut all = BTreeMap::new();
    for name in names.split(|&b| b == 0).filter(|n| !n.is_empty()) {
        let c_name = std::ffi::CString::new(name).unwrap();
        let mut value = vec![0u8; 65536];
        // SAFETY: NUL-terminated path and name, a live buffer of value.len() bytes.
        let n = unsafe { libc::lgetxattr(c_path.as_ptr(), c_name.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        assert!(n >= 0, "lgetxattr {}: {}", path.display(), std::io::Error::last_os_error());
        value.truncate(n as usize);
        all.insert(String::from_utf8_lossy(name).into_owned(), hex(&value));
    }
    all
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: std::env::var("CSUMKIT_EROFS_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64),
        ..Default::default()
    })]

    /// Damaged compressed (each algorithm), metabox, fragment and chunked images (a few
    /// random bytes of the first 256 KiB changed, the superblock checksum
    /// re-sealed so the parsers are reached): every walk, xattr and data
    /// read gives values or errors, never a panic.
    #[test]
    fn damaged_compressed_images_are_errors_never_panics(
        which in 0usize..8,
        hits in proptest::collection::vec((0usize..256 << 10, proptest::prelude::any::<u8>()), 1..5),
    ) {
        static IMAGES: std::sync::OnceLock<Option<Vec<Entry>>> = std::sync::OnceLock::new();
        let Some(corpus) = IMAGES.get_or_init(corpus) else { return Ok(()) };
        let names = [
            "1.9-compressed-dirs",
            "1.9-metabox",
            "1.9-prefix-fragments",
            "1.7-fragments-dedupe",
            "1.7-chunks",
            "1.7-lzma-ztailpacking",
            "1.9-deflate",
            "1.9-zstd-ztailpacking",
        ];
        let entry = corpus.iter().find(|e| e.name == names[which]).expect("a corpus image");
        let mut bytes = entry.bytes.clone();
        for (at, value) in hits {
            let at = at % bytes.len();
            bytes[at] = value;
        }
        let block_size = Image::open(&entry.bytes).unwrap().superblock().block_size;
        if let Ok(crc) = csumkit::erofs::Superblock::compute_checksum(&bytes, block_size) {
            bytes[1028..1032].copy_from_slice(&crc.to_le_bytes());
        }
        let Ok(image) = Image::open(&bytes) else { return Ok(()) };
        let Ok(all) = image.walk() else { return Ok(()) };
        for (_, inode) in all.iter().take(600) {
            let _ = image.xattrs(inode);
            if inode.size <= 1 << 20 {
                let _ = image.data(inode);
            }
        }
    }
}

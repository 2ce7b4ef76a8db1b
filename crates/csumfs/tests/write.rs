//! The csumfs writer judged by code nobody here wrote: after directories,
//! files and data written through csumfs, `e2fsck -fn` calls the image
//! clean and the kernel (a loop mount, where allowed) reads back every name
//! and byte of the model; csumkit's checker finds every checksum current.

mod common;

use common::{assert_clean, e2fsck_clean, mke2fs_with, tool, Scratch};
use csumfs::{Checksums, Error, NewInode, Options, RenameMode, SetAttr, Timespec, Volume, XattrMode, ROOT};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

/// The tree the test writes: path → content (`None`: a directory).
type Model = BTreeMap<String, Option<Vec<u8>>>;

fn content(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 31 + seed * 7) % 251) as u8).collect()
}

/// Directories, 300 files in them and in the root (the root grows by
/// blocks), data of many sizes, a sparse file; returns the model.
fn populate(volume: &mut Volume) -> Model {
    let mut model = Model::new();
    let file = NewInode { mode: 0o100_644, uid: 1000, gid: 1000 };
    let dir = NewInode { mode: 0o755, uid: 0, gid: 0 };
    let d1 = volume.mkdir(ROOT, b"d1", dir).unwrap();
    let d2 = volume.mkdir(ROOT, b"d2", dir).unwrap();
    let sub = volume.mkdir(d2.ino, b"sub", dir).unwrap();
    for (path, _) in [("/d1", &d1), ("/d2", &d2), ("/d2/sub", &sub)] {
        model.insert(path.to_string(), None);
    }
    for i in 0..300usize {
        let (parent, prefix) = match i % 4 {
            0 => (ROOT, ""),
            1 => (d1.ino, "/d1"),
            2 => (d2.ino, "/d2"),
            _ => (sub.ino, "/d2/sub"),
        };
        let name = format!("file_with_a_longish_name_{i:04}");
        let inode = volume.create(parent, name.as_bytes(), file).unwrap();
        let data = content(i, [0, 1, 100, 4095, 4096, 4097, 20_000, 70_000][i % 8]);
        if !data.is_empty() {
            // Two writes: the first half, then the rest (appends extend the extent).
            let half = data.len() / 2;
            volume.write(inode.ino, 0, &data[..half]).unwrap();
            volume.write(inode.ino, half as u64, &data[half..]).unwrap();
        }
        model.insert(format!("{prefix}/{name}"), Some(data));
    }
    // Sparse: data at 1 MiB, a hole before it; then the hole's start filled.
    let sparse = volume.create(ROOT, b"sparse", file).unwrap();
    volume.write(sparse.ino, 1 << 20, b"far away").unwrap();
    volume.write(sparse.ino, 10, b"near").unwrap();
    let mut data = vec![0u8; (1 << 20) + 8];
    data[10..14].copy_from_slice(b"near");
    data[1 << 20..].copy_from_slice(b"far away");
    model.insert("/sparse".into(), Some(data));
    // fallocate: 3 MiB of unwritten extents (read as zeros), then 1 MiB
    // more past the end with KEEP_SIZE (the size stays 3 MiB).
    let falloc = volume.create(ROOT, b"fallocated", file).unwrap();
    volume.fallocate(falloc.ino, 0, 3 << 20, false).unwrap();
    let kept = volume.fallocate(falloc.ino, 3 << 20, 1 << 20, true).unwrap();
    assert_eq!(kept.size, 3 << 20);
    // A write into them: the extent it lands in becomes written.
    volume.write(falloc.ino, 4096, b"into unwritten").unwrap();
    let mut data = vec![0u8; 3 << 20];
    data[4096..4096 + 14].copy_from_slice(b"into unwritten");
    model.insert("/fallocated".into(), Some(data));
    model
}

/// Unlinks every third file, empties and removes /d2/sub; the refusals
/// (a non-empty directory, a directory by unlink, a file by rmdir) change
/// nothing.
fn remove_some(volume: &mut Volume, model: &mut Model) {
    let d2 = volume.resolve("/d2").unwrap().ino;
    assert_eq!(volume.rmdir(ROOT, b"d2").unwrap_err().errno(), 39, "ENOTEMPTY");
    assert_eq!(volume.unlink(ROOT, b"d1").unwrap_err().errno(), 21, "EISDIR");
    assert_eq!(volume.rmdir(ROOT, b"sparse").unwrap_err().errno(), 20, "ENOTDIR");
    assert_eq!(volume.unlink(ROOT, b"nothing").unwrap_err().errno(), 2, "ENOENT");
    let files: Vec<String> = model.iter().filter(|(_, c)| c.is_some()).map(|(p, _)| p.clone()).collect();
    for (i, path) in files.iter().enumerate() {
        if i % 3 == 0 || path.starts_with("/d2/sub/") {
            let (parent, name) = path.rsplit_once('/').unwrap();
            let parent = volume.resolve(if parent.is_empty() { "/" } else { parent }).unwrap().ino;
            volume.unlink(parent, name.as_bytes()).unwrap();
            model.remove(path);
        }
    }
    volume.rmdir(d2, b"sub").unwrap();
    model.remove("/d2/sub");
    assert_eq!(volume.resolve("/d2/sub").unwrap_err().errno(), 2);
}

/// Reads the model back through `read` (path → content or directory).
fn compare(model: &Model, read: impl Fn(&str) -> Option<Vec<u8>>, label: &str) {
    for (path, want) in model {
        let got = read(path);
        match want {
            None => assert!(got.is_none(), "{label} {path}: not a directory"),
            Some(want) => assert!(got.as_ref() == Some(want), "{label} {path}: content differs"),
        }
    }
}

/// Each entry of `dir` with the file type its directory entry holds (the
/// kernel's `d_type`, which std's `DirEntry::file_type` would hide by
/// falling back to `lstat` for an unknown type).
fn entry_types(dir: &Path) -> Vec<(String, u8)> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).unwrap();
    let mut found = Vec::new();
    // SAFETY: a valid C string; each dirent is read before the next readdir
    // and the stream is closed once.
    unsafe {
        let stream = libc::opendir(path.as_ptr());
        assert!(!stream.is_null(), "opendir {}", dir.display());
        loop {
            let entry = libc::readdir(stream);
            if entry.is_null() {
                break;
            }
            let name = std::ffi::CStr::from_ptr((*entry).d_name.as_ptr()).to_string_lossy().into_owned();
            if name != "." && name != ".." {
                found.push((name, (*entry).d_type));
            }
        }
        libc::closedir(stream);
    }
    found
}

/// Every entry under `dir`, recursively, holds its inode's file type.
fn assert_entry_types(dir: &Path) {
    for (name, d_type) in entry_types(dir) {
        let path = dir.join(&name);
        let mode = std::fs::symlink_metadata(&path).unwrap().mode() & libc::S_IFMT;
        assert_eq!(u32::from(d_type) << 12, mode, "kernel: {}: the entry's file type", path.display());
        if mode == libc::S_IFDIR {
            assert_entry_types(&path);
        }
    }
}

/// Runs `check` on `image` mounted read-only by the kernel (loop), then
/// unmounts it; says SKIPPED where this machine cannot mount it (CI fails).
fn with_kernel_mount(image: &Path, check: impl FnOnce(&Path)) {
    let mnt = image.with_extension("mnt");
    common::with_kernel_mount(image, &mnt, std::panic::AssertUnwindSafe(|| check(&mnt)));
}

fn mount_and_compare(image: &Path, model: &Model) {
    with_kernel_mount(image, |mnt| {
        compare(
            model,
            |path| {
                let host = mnt.join(path.trim_start_matches('/'));
                if host.is_dir() {
                    None
                } else {
                    Some(std::fs::read(host).unwrap())
                }
            },
            "kernel",
        );
        for dir in ["", "d1", "d2"] {
            let names = std::fs::read_dir(mnt.join(dir)).unwrap().count();
            let prefix = format!("/{dir}/").replace("//", "/");
            let want = model.keys().filter(|k| k.starts_with(&prefix) && !k[prefix.len()..].contains('/')).count();
            // The root also holds lost+found.
            let extra = usize::from(dir.is_empty());
            assert_eq!(names, want + extra, "kernel: /{dir} entries");
        }
        assert_entry_types(mnt);
    });
}

#[test]
fn written_images_are_clean_for_e2fsck_and_read_back_by_the_kernel() {
    let Some(mkfs) = tool("mke2fs") else { return };
    if tool("e2fsck").is_none() {
        return;
    }
    let scratch = Scratch(std::env::temp_dir().join(format!("csumfs-write-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let configs = [
        (1024u32, "metadata_csum,64bit", Checksums::Incremental),
        (4096, "metadata_csum,64bit", Checksums::Incremental),
        (4096, "metadata_csum,^64bit", Checksums::Incremental),
        (4096, "metadata_csum,64bit", Checksums::Full),
    ];
    for (bs, features, checksums) in configs {
        let label = format!("{bs} {features} {checksums:?}");
        let image = scratch.0.join(format!("w{bs}-{checksums:?}.img"));
        let _ = std::fs::remove_file(&image);
        let out = Command::new(&mkfs)
            .args(["-q", "-F", "-t", "ext4", "-O", features, "-b", &bs.to_string()])
            .arg(&image)
            .arg("64M")
            .output()
            .unwrap();
        assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
        // check_updates: every incremental checksum compared with a full recompute.
        let options = Options { write: true, check_updates: true, checksums, ..Options::default() };
        let mut volume = Volume::open(&image, options).unwrap();
        let model = populate(&mut volume);
        // 200 pieces three blocks apart: the extent tree grows to depth 1,
        // leaves appended as they fill (three at 1 KiB, one at 4 KiB).
        let mut model = model;
        let fragmented = volume.create(ROOT, b"fragmented", NewInode { mode: 0o100_600, uid: 0, gid: 0 }).unwrap();
        let mut data = vec![0u8; (597 * bs) as usize + 1];
        for k in 0..200u64 {
            let at = k * 3 * u64::from(bs);
            volume.write(fragmented.ino, at, &[k as u8 + 1]).unwrap();
            data[at as usize] = k as u8 + 1;
        }
        let tree = volume.inode(fragmented.ino).unwrap().i_block;
        let (depth, leaves) = (u16::from_le_bytes([tree[6], tree[7]]), u16::from_le_bytes([tree[2], tree[3]]));
        assert_eq!((depth, leaves), (1, if bs == 1024 { 3 } else { 1 }), "{label}: depth and leaves");
        // Into the middle of the first leaf: at 1 KiB that leaf (84 slots)
        // is full, and its last extent spills into the next.
        volume.write(fragmented.ino, u64::from(bs) + 5, b"m").unwrap();
        data[bs as usize + 5] = b'm';
        model.insert("/fragmented".into(), Some(data));
        let err = volume.create(ROOT, b"d1", NewInode { mode: 0o100_600, uid: 0, gid: 0 }).unwrap_err();
        assert_eq!(err.errno(), 17, "{err}"); // EEXIST
        remove_some(&mut volume, &mut model);
        volume.sync().unwrap();
        // What `--stats` reports: with csum=full nothing is moved, every
        // checksum recomputed; otherwise bitmaps move by flip_range and
        // blocks of 1 KiB and more by splice.
        let stats = volume.stats();
        let moved = stats.csum_incremental.load(std::sync::atomic::Ordering::Relaxed);
        let recomputed = stats.csum_full.load(std::sync::atomic::Ordering::Relaxed);
        assert!(recomputed > 0, "{label}: descriptors keep 16 bits and are recomputed");
        if checksums == Checksums::Full {
            assert_eq!(moved, 0, "{label}: a checksum moved under csum=full");
        } else {
            assert!(moved > 300, "{label}: {moved} checksums moved for 300 files");
        }
        drop(volume);
        e2fsck_clean(&image).unwrap_or_else(|report| panic!("{label}: e2fsck -fn:\n{report}"));
        let bytes = std::fs::read(&image).unwrap();
        let report = csumkit::ext4::check(&bytes).unwrap();
        assert!(report.clean(), "{label}: {:?}", report.findings);
        let volume = Volume::open(&image, Options::default()).unwrap();
        compare(
            &model,
            |path| {
                let inode = volume.resolve(path).unwrap();
                (!inode.is_dir()).then(|| volume.read_all(&inode).unwrap())
            },
            &label,
        );
        mount_and_compare(&image, &model);
    }
}

/// An image with the `mmp` feature is held while a volume writes it —
/// debugfs shows a live sequence and csumfs's process as its device, and it
/// moves on every update interval — and `CLEAN` once the volume is dropped;
/// a read-only open leaves it alone. With 1 KiB blocks under a ByteLog the
/// MMP block shares a page of the private map with directory blocks made
/// before a bump, and the checkpoint after it must not put the old
/// sequence back. e2fsck judges the image clean after each.
#[test]
fn an_mmp_image_is_held_while_written_and_left_clean() {
    let (Some(mkfs), Some(debugfs)) = (tool("mke2fs"), tool("debugfs")) else { return };
    let scratch = Scratch(std::env::temp_dir().join(format!("csumfs-mmp-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    std::thread::scope(|s| {
        for (block_size, logged) in [(4096u64, false), (1024, true)] {
            let (scratch, mkfs, debugfs) = (&scratch, &mkfs, &debugfs);
            s.spawn(move || mmp_held_while_written(&scratch.0, mkfs, debugfs, block_size, logged));
        }
    });
}

fn mmp_held_while_written(dir: &Path, mkfs: &Path, debugfs: &Path, block_size: u64, logged: bool) {
    let label = format!("{block_size}-byte blocks{}", if logged { ", logged" } else { "" });
    let image = dir.join(format!("m{block_size}.img"));
    let out = Command::new(mkfs)
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,64bit,mmp", "-b", &block_size.to_string()])
        .arg(&image)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    let debug = |request: &str| {
        let out = Command::new(debugfs).args(["-R", request]).arg(&image).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let dump = debug("dump_mmp");
    let field = |field: &str| {
        let line = dump.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("dump_mmp: {dump}"));
        line[field.len()..].trim().to_string()
    };
    let clean = "ff4d4d50";
    assert_eq!(field("sequence:"), clean);
    // Read from the file from now on: debugfs refuses an image marked as
    // having its log pending.
    let number: u64 = field("block_number:").parse().unwrap();
    let mmp = |field: &str| {
        let mut block = [0u8; 1024];
        std::os::unix::fs::FileExt::read_exact_at(
            &std::fs::File::open(&image).unwrap(),
            &mut block,
            number * block_size,
        )
        .unwrap();
        match field {
            "sequence:" => format!("{:08x}", u32::from_le_bytes(block[4..8].try_into().unwrap())),
            "device_name:" => String::from_utf8_lossy(&block[80..112]).trim_end_matches('\0').to_string(),
            _ => unreachable!("{field}"),
        }
    };
    assert_eq!(mmp("sequence:"), clean);
    drop(Volume::open(&image, Options::default()).unwrap());
    assert_eq!(mmp("sequence:"), clean, "{label}: a read-only open");
    let mut v = if logged {
        Volume::open_logged(&image, &dir.join(format!("m{block_size}.log")), 1 << 20, Options::default(), None)
            .unwrap()
            .0
    } else {
        Volume::open(&image, Options { write: true, ..Options::default() }).unwrap()
    };
    let held = mmp("sequence:");
    assert_ne!(held, clean, "{label}: held while open for writing");
    assert_eq!(mmp("device_name:"), format!("csumfs pid {}", std::process::id()));
    let f = v.create(ROOT, b"f", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
    v.write(f, 0, b"under mmp").unwrap();
    for i in 0..8 {
        v.mkdir(ROOT, format!("d{i}").as_bytes(), NewInode { mode: 0o40_755, uid: 0, gid: 0 }).unwrap();
    }
    v.sync().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(5500));
    let bumped = mmp("sequence:");
    assert_ne!(bumped, held, "{label}: bumped every 5 s");
    v.checkpoint().unwrap();
    let after = mmp("sequence:");
    assert!(after != held && after != clean, "{label}: the checkpoint put back {after} (held {held}, bumped {bumped})");
    if logged {
        // The test means something only if the checkpoint wrote beside the
        // MMP block: a directory block of this volume on its page.
        let per_page = 4096 / block_size;
        let page: Vec<String> = (number / per_page * per_page..(number / per_page + 1) * per_page)
            .filter(|&b| b != number)
            .map(|b| b.to_string())
            .collect();
        let owners = debug(&format!("icheck {}", page.join(" ")));
        let ours = owners.lines().filter_map(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok()).any(|ino| ino > 11);
        assert!(ours, "{label}: no block of this volume beside the MMP block {number}:\n{owners}");
    }
    drop(v);
    assert_eq!(mmp("sequence:"), clean, "{label}: closed");
    e2fsck_clean(&image).unwrap_or_else(|report| panic!("{label}: e2fsck -fn:\n{report}"));
}

/// Images the writer would damage are refused for writing, by name: each
/// feature made by mke2fs or set by tune2fs (read-only, and the error state
/// `tune2fs -E force_fsck` records as the kernel does).
#[test]
fn unsupported_images_are_refused_for_writing() {
    let (Some(mkfs), Some(tune)) = (tool("mke2fs"), tool("tune2fs")) else { return };
    let scratch = Scratch(std::env::temp_dir().join(format!("csumfs-refuse-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    for (features, extra, tuned, feature) in [
        ("metadata_csum,64bit,quota", &[][..], &[][..], "quota"),
        ("metadata_csum,64bit,project", &[][..], &[][..], "project"),
        ("metadata_csum,64bit,bigalloc", &["-C", "16384"][..], &[][..], "bigalloc"),
        ("metadata_csum,64bit", &["-I", "128"][..], &[][..], "128-byte inodes"),
        ("metadata_csum,^64bit,^extent", &[][..], &[][..], "^extent"),
        ("metadata_csum,64bit", &[][..], &["-O", "read-only"][..], "read-only"),
        ("metadata_csum,64bit", &[][..], &["-E", "force_fsck"][..], "errors"),
    ] {
        let image = scratch.0.join("r.img");
        let _ = std::fs::remove_file(&image);
        let out = Command::new(&mkfs)
            .args(["-q", "-F", "-t", "ext4", "-O", features])
            .args(extra)
            .arg(&image)
            .arg("32M")
            .output()
            .unwrap();
        assert!(out.status.success(), "mke2fs {features}: {}", String::from_utf8_lossy(&out.stderr));
        if !tuned.is_empty() {
            let out = Command::new(&tune).args(tuned).arg(&image).output().unwrap();
            assert!(out.status.success(), "tune2fs {tuned:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        match Volume::open(&image, Options { write: true, ..Options::default() }) {
            Err(Error::Unsupported { feature: f, .. }) => assert_eq!(f, feature),
            Err(e) => panic!("{features} {tuned:?}: {e}"),
            Ok(_) => panic!("{features} {tuned:?}: opened for writing"),
        }
        assert!(Volume::open(&image, Options::default()).is_ok(), "{features} {tuned:?}: read-only open works");
    }
    // `s_state` without EXT2_VALID_FS, as the kernel leaves a journal-less
    // image it has mounted read-write (set by debugfs here; mount.rs has
    // the kernel do it); e2fsck -fy sets it again after its check.
    let image = scratch.0.join("r.img");
    let mut made = Command::new(&mkfs);
    made.args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal"]).arg(&image).arg("32M");
    assert!(made.output().unwrap().status.success());
    common::debugfs_write(&image, "ssv state 0");
    match Volume::open(&image, Options { write: true, ..Options::default() }) {
        Err(Error::Unsupported { feature, .. }) => assert_eq!(feature, "not clean"),
        Err(e) => panic!("state 0: {e}"),
        Ok(_) => panic!("state 0: opened for writing"),
    }
    assert!(Volume::open(&image, Options::default()).is_ok(), "state 0: read-only open works");
    let out = Command::new(tool("e2fsck").unwrap()).arg("-fy").arg(&image).output().unwrap();
    assert!(out.status.code().is_some_and(|c| c <= 1), "e2fsck -fy: {}", String::from_utf8_lossy(&out.stdout));
    assert!(Volume::open(&image, Options { write: true, ..Options::default() }).is_ok(), "after e2fsck");
}

/// Deleting from images the kernel wrote, in every corpus layout the
/// writer accepts: names in 3 000-entry htree directories, a hard link, a
/// file whose xattr block two others share, a file with an extent leaf
/// block, a sparse and a fallocated file, a directory; `e2fsck -fn` clean
/// and csumkit's checker finds every checksum current afterwards.
#[test]
fn removing_from_kernel_made_images_keeps_them_clean() {
    if tool("e2fsck").is_none() {
        return;
    }
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/ext4");
    let scratch = Scratch(std::env::temp_dir().join(format!("csumfs-remove-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let mut done = 0;
    let mut names: Vec<String> = std::fs::read_dir(&corpus)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().to_str()?.strip_suffix(".img.gz").map(String::from))
        .collect();
    names.sort();
    for name in names {
        let image = common::corpus_image(&name, &scratch.0);
        let options = Options { write: true, check_updates: true, ..Options::default() };
        let mut volume = match Volume::open(&image, options) {
            Ok(v) => v,
            Err(Error::Unsupported { .. }) => continue, // refused by name: tested elsewhere
            Err(e) => panic!("{name}: {e}"),
        };
        let huge = volume.resolve("/huge").unwrap().ino;
        let entries: Vec<Vec<u8>> = volume
            .read_dir(&volume.inode(huge).unwrap())
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != b"." && n != b"..")
            .collect();
        for entry in entries.iter().step_by(20) {
            volume
                .unlink(huge, entry)
                .unwrap_or_else(|e| panic!("{name}: unlink /huge/{}: {e}", String::from_utf8_lossy(entry)));
        }
        // 400 new long names into the indexed directory: its leaves split,
        // and at 1 KiB the kernel's full index nodes split too.
        let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
        for i in 0..400 {
            let long = format!("{}-added-by-csumfs-{i:04}", "n".repeat(180));
            volume.create(huge, long.as_bytes(), file).unwrap_or_else(|e| panic!("{name}: create {i}: {e}"));
        }
        for i in (0..400).step_by(7) {
            let long = format!("{}-added-by-csumfs-{i:04}", "n".repeat(180));
            volume
                .lookup(&volume.inode(huge).unwrap(), long.as_bytes())
                .unwrap_or_else(|e| panic!("{name}: lookup {i}: {e}"));
        }
        let big = volume.resolve("/big").unwrap().ino;
        volume.unlink(big, b"hardlink").unwrap();
        for file in ["shared-1", "frag-a", "sparse", "tiny"] {
            match volume.unlink(ROOT, file.as_bytes()) {
                // /tiny holds a 6000-byte value in an ea_inode there: refused, nothing changed.
                Err(Error::Unsupported { feature: "ea_inode", .. })
                    if name.starts_with("eainode") && file == "tiny" => {}
                other => other.unwrap_or_else(|e| panic!("{name}: unlink /{file}: {e}")),
            }
        }
        if volume.resolve("/fallocated").is_ok() {
            volume.unlink(ROOT, b"fallocated").unwrap();
        }
        let renamed = volume.resolve("/renamed").unwrap();
        for entry in volume.read_dir(&renamed).unwrap().into_iter().filter(|e| e.name != b"." && e.name != b"..") {
            volume.unlink(renamed.ino, &entry.name).unwrap();
        }
        volume.rmdir(ROOT, b"renamed").unwrap();
        assert_eq!(volume.resolve("/small/file").unwrap().links, 1, "{name}: the hard link's other name");
        volume.sync().unwrap();
        drop(volume);
        e2fsck_clean(&image).unwrap_or_else(|report| panic!("{name}: e2fsck -fn after removals:\n{report}"));
        let report = csumkit::ext4::check(&std::fs::read(&image).unwrap()).unwrap();
        assert!(report.clean(), "{name}: {:?}", report.findings);
        done += 1;
    }
    // orphan-mmp-4k included: csumfs keeps its multiple-mount protection.
    assert_eq!(done, 13, "layouts accepted for writing");
}

/// rename (within and across directories, replacing, NOREPLACE, EXCHANGE,
/// a directory to another parent, a directory under itself), link and
/// symlink (fast and in a block): e2fsck -fn clean, and the kernel sees
/// the names, link counts, targets and contents csumfs meant.
#[test]
fn renames_links_and_symlinks_are_what_the_kernel_reads() {
    let Some(mkfs) = tool("mke2fs") else { return };
    if tool("e2fsck").is_none() {
        return;
    }
    let scratch = Scratch(std::env::temp_dir().join(format!("csumfs-names-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let image = scratch.0.join("n.img");
    let out = Command::new(&mkfs)
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,64bit", "-b", "1024"])
        .arg(&image)
        .arg("16M")
        .output()
        .unwrap();
    assert!(out.status.success());
    let options = Options { write: true, check_updates: true, ..Options::default() };
    let mut v = Volume::open(&image, options).unwrap();
    let (file, dir) = (NewInode { mode: 0o100_644, uid: 7, gid: 8 }, NewInode { mode: 0o755, uid: 0, gid: 0 });
    let a = v.mkdir(ROOT, b"a", dir).unwrap().ino;
    let b = v.mkdir(ROOT, b"b", dir).unwrap().ino;
    let sub = v.mkdir(a, b"sub", dir).unwrap().ino;
    let put = |v: &mut Volume, parent: u32, name: &str, data: &[u8]| {
        let ino = v.create(parent, name.as_bytes(), file).unwrap().ino;
        v.write(ino, 0, data).unwrap();
        ino
    };
    let one = put(&mut v, a, "one", b"first file");
    put(&mut v, a, "two", b"second file");
    let victim = put(&mut v, b, "victim", b"replaced");
    put(&mut v, b, "x", b"ex");
    put(&mut v, sub, "deep", b"deep file");
    v.rename(a, b"two", a, b"two-renamed", RenameMode::Replace).unwrap();
    v.rename(a, b"one", b, b"victim", RenameMode::Replace).unwrap(); // across, replacing
                                                                     // A freed inode as the kernel leaves it: an extent-mapped file with an
                                                                     // empty extent root (magic, no entries, room for 4, depth 0).
    let freed = v.inode(victim).unwrap();
    assert_eq!((freed.links, freed.size, freed.blocks), (0, 0, 0));
    let mut empty_root = [0u8; 60];
    empty_root[..6].copy_from_slice(&[0x0A, 0xF3, 0, 0, 4, 0]);
    assert_eq!(freed.i_block, empty_root, "freed extent-mapped file");
    assert_eq!(v.rename(a, b"two-renamed", b, b"x", RenameMode::NoReplace).unwrap_err().errno(), 17);
    v.rename(a, b"two-renamed", b, b"x", RenameMode::Exchange).unwrap(); // swap across
    v.rename(a, b"sub", b, b"sub-moved", RenameMode::Replace).unwrap(); // a directory to another parent
    assert_eq!(v.rename(ROOT, b"b", b, b"inside", RenameMode::Replace).unwrap_err().errno(), 22, "EINVAL");
    assert_eq!(v.rename(ROOT, b"a", ROOT, b"b", RenameMode::Replace).unwrap_err().errno(), 39, "ENOTEMPTY");
    for (from, to) in [(".", "z"), ("..", "z"), ("victim", "."), ("victim", "..")] {
        for mode in [RenameMode::Replace, RenameMode::NoReplace, RenameMode::Exchange] {
            let err = v.rename(b, from.as_bytes(), a, to.as_bytes(), mode).unwrap_err();
            assert_eq!(err.errno(), 22, "{from} -> {to} ({mode:?}): EINVAL");
        }
    }
    // Exchanges across parents: two directories (each gets the other's
    // parent as `..`, the link counts stay), then a directory and a file
    // (the directory's old parent loses a link, its new one gains it).
    let d1 = v.mkdir(a, b"d1", dir).unwrap().ino;
    let d2 = v.mkdir(b, b"d2", dir).unwrap().ino;
    put(&mut v, d1, "in1", b"in one");
    put(&mut v, d2, "in2", b"in two");
    v.rename(a, b"d1", b, b"d2", RenameMode::Exchange).unwrap();
    v.mkdir(a, b"d3", dir).unwrap();
    put(&mut v, b, "f3", b"third");
    v.rename(a, b"d3", b, b"f3", RenameMode::Exchange).unwrap();
    // A directory replaces an empty one.
    let e1 = v.mkdir(ROOT, b"e1", dir).unwrap().ino;
    v.mkdir(ROOT, b"e2", dir).unwrap();
    v.rename(ROOT, b"e1", ROOT, b"e2", RenameMode::Replace).unwrap();
    // A file moved across parents changes both parents (mtime and ctime).
    let long_ago = Timespec { sec: 1_000_000, nsec: 0 };
    let old_times = SetAttr { mtime: Some(long_ago), ctime: Some(long_ago), ..SetAttr::default() };
    let mover = put(&mut v, b, "mover", b"moved");
    for changed in [a, b, mover] {
        v.set_attr(changed, old_times).unwrap();
    }
    v.rename(b, b"mover", a, b"moved", RenameMode::Replace).unwrap();
    for parent in [a, b] {
        let p = v.inode(parent).unwrap();
        assert!(p.mtime.sec > long_ago.sec && p.ctime.sec > long_ago.sec, "parent {parent}: {p:?}");
    }
    // The moved inode's ctime too (as the kernel's ext4_rename), not its mtime.
    let moved = v.inode(mover).unwrap();
    assert!(moved.ctime.sec > long_ago.sec && moved.mtime == long_ago, "{moved:?}");
    v.link(one, ROOT, b"hard").unwrap();
    assert_eq!(v.link(a, ROOT, b"dirlink").unwrap_err().errno(), 1, "EPERM");
    v.symlink(ROOT, b"fast", b"b/victim", 0, 0).unwrap();
    let long = "a-long-target/".repeat(20);
    v.symlink(ROOT, b"slow", long.as_bytes(), 0, 0).unwrap();
    // Up to 59 bytes a target lives in the inode (60 would leave no NUL).
    for len in [59, 60] {
        let link = v.symlink(a, format!("t{len}").as_bytes(), &vec![b't'; len], 0, 0).unwrap();
        assert_eq!(v.read_link(&link).unwrap(), vec![b't'; len]);
        assert_eq!(link.blocks == 0, len < 60, "{len}-byte target: {link:?}");
        // Near its parent: in the parent's group (a top-level directory
        // went to the group after the root's).
        let ipg = v.layout().inodes_per_group;
        assert_eq!((u64::from(link.ino) - 1) / ipg, (u64::from(a) - 1) / ipg, "{len}-byte target's inode group");
    }
    // A fast symlink with an xattr block (i_blocks not 0): unlinked, its
    // target is no block map, the xattr block is freed.
    let tagged = v.symlink(ROOT, b"tagged", b"b/victim", 0, 0).unwrap().ino;
    v.setxattr(tagged, "user.big", &[0x42; 600], XattrMode::Either).unwrap();
    assert_ne!(v.inode(tagged).unwrap().file_acl, 0, "the value went to a block");
    v.unlink(ROOT, b"tagged").unwrap();
    let freed = v.inode(tagged).unwrap();
    assert_eq!((freed.links, freed.file_acl, freed.blocks), (0, 0, 0));
    assert_eq!(&freed.i_block[..9], b"b/victim\0", "a freed fast symlink keeps its target");
    // rmdir of `.` or `..` is refused whatever the directory holds.
    let empty = v.mkdir(ROOT, b"empty", dir).unwrap().ino;
    for name in [".", ".."] {
        assert_eq!(v.rmdir(empty, name.as_bytes()).unwrap_err().errno(), 22, "rmdir {name}: EINVAL");
    }
    // A target fills its block less one byte (1 KiB blocks), no more.
    v.symlink(ROOT, b"longest", &[b'y'; 1023], 0, 0).unwrap();
    assert_eq!(v.symlink(ROOT, b"too-long", &[b'y'; 1024], 0, 0).unwrap_err().errno(), 36, "ENAMETOOLONG");
    v.sync().unwrap();
    drop(v);
    e2fsck_clean(&image).unwrap_or_else(|report| panic!("e2fsck -fn:\n{report}"));
    let contents: &[(&str, &[u8])] = &[
        ("/b/victim", b"first file"),
        ("/hard", b"first file"),
        ("/b/x", b"second file"),
        ("/a/two-renamed", b"ex"),
        ("/b/sub-moved/deep", b"deep file"),
        ("/a/d1/in2", b"in two"),
        ("/b/d2/in1", b"in one"),
        ("/a/d3", b"third"),
        ("/a/moved", b"moved"),
    ];
    let v = Volume::open(&image, Options::default()).unwrap();
    for (path, want) in contents {
        assert_eq!(&v.read_all(&v.resolve(path).unwrap()).unwrap(), want, "csumfs {path}");
    }
    assert_eq!(v.resolve("/hard").unwrap().links, 2);
    assert_eq!(v.read_link(&v.resolve("/slow").unwrap()).unwrap(), long.as_bytes());
    for (path, parent) in [("/b/sub-moved", b), ("/a/d1", a), ("/b/d2", b), ("/b/f3", b)] {
        assert_eq!(v.lookup(&v.resolve(path).unwrap(), b"..").unwrap().ino, parent, "{path}/..");
    }
    assert_eq!((v.resolve("/a/d1").unwrap().ino, v.resolve("/b/d2").unwrap().ino), (d2, d1));
    assert_eq!(v.resolve("/e2").unwrap().ino, e1);
    assert!(v.resolve("/e1").is_err());
    assert_eq!(v.read_link(&v.resolve("/longest").unwrap()).unwrap(), [b'y'; 1023]);
    assert_eq!((v.resolve("/a").unwrap().links, v.resolve("/b").unwrap().links), (3, 5), "parents' link counts");
    with_kernel_mount(&image, |mnt| {
        for (path, want) in contents {
            assert_eq!(&std::fs::read(mnt.join(&path[1..])).unwrap(), want, "kernel {path}");
        }
        assert_eq!(std::fs::metadata(mnt.join("hard")).unwrap().nlink(), 2);
        assert_entry_types(mnt);
        assert_eq!(std::fs::read_link(mnt.join("fast")).unwrap().to_str().unwrap(), "b/victim");
        assert_eq!(std::fs::read_link(mnt.join("slow")).unwrap().to_str().unwrap(), long);
        assert_eq!(std::fs::read(mnt.join("fast")).unwrap(), b"first file", "the kernel follows the fast symlink");
        assert!(std::fs::metadata(mnt.join("a/sub")).is_err() && std::fs::metadata(mnt.join("a/one")).is_err());
    });
}

/// Fresh images mke2fs initialised lazily: their later groups have no
/// block or inode bitmap yet (BLOCK_UNINIT / INODE_UNINIT). Filling most of
/// the image makes csumfs initialise them as the kernel does (superblock
/// backups, descriptor and reserved GDT blocks, meta_bg descriptor blocks,
/// the group's own metadata); `e2fsck -fn` checks every bitmap bit, over
/// stale bytes planted where the uninitialised bitmaps lie.
#[test]
fn uninitialised_groups_are_initialised_as_the_kernel_would() {
    let Some(mkfs) = tool("mke2fs") else { return };
    if tool("e2fsck").is_none() {
        return;
    }
    let scratch = Scratch(std::env::temp_dir().join(format!("csumfs-uninit-{}", std::process::id())));
    std::fs::create_dir_all(&scratch.0).unwrap();
    let layouts: [(&str, &[&str], &str, usize); 4] = [
        ("metadata_csum,64bit", &["-b", "4096"], "512M", 50),
        ("metadata_csum,64bit,^flex_bg", &["-b", "4096", "-g", "8192"], "256M", 24),
        ("metadata_csum,64bit,meta_bg,^resize_inode", &["-b", "1024", "-g", "1024"], "40M", 30),
        (
            "metadata_csum,64bit,meta_bg,^resize_inode,sparse_super2",
            &["-b", "1024", "-g", "1024", "-E", "num_backup_sb=1"],
            "40M",
            30,
        ),
    ];
    for (features, extra, size, files) in layouts {
        let image = scratch.0.join("u.img");
        let _ = std::fs::remove_file(&image);
        let out = Command::new(&mkfs)
            .args(["-q", "-F", "-t", "ext4", "-O", features, "-E", "lazy_itable_init=1"])
            .args(extra)
            .arg(&image)
            .arg(size)
            .output()
            .unwrap();
        assert!(out.status.success(), "{features}: {}", String::from_utf8_lossy(&out.stderr));
        // Stale bytes in the bitmaps nothing reads yet (an uninitialised
        // group's): each is built whole when its group is first used —
        // without a ByteLog over the file's own map, zeros and 0xFF
        // written over every byte.
        {
            let bytes = std::fs::read(&image).unwrap();
            let layout = csumkit::ext4::Layout::parse(&bytes).unwrap();
            let file = std::fs::OpenOptions::new().write(true).open(&image).unwrap();
            for g in 0..layout.groups {
                let group = layout.group(&bytes, g).unwrap();
                let unread = [(group.block_uninit(), group.block_bitmap), (group.inode_uninit(), group.inode_bitmap)];
                for (_, block) in unread.into_iter().filter(|(uninit, _)| *uninit) {
                    let stale = vec![0xA5u8; layout.block_size as usize];
                    std::os::unix::fs::FileExt::write_all_at(&file, &stale, block * layout.block_size).unwrap();
                }
            }
        }
        e2fsck_clean(&image).unwrap_or_else(|report| panic!("{features}: stale bytes where nothing reads:\n{report}"));
        let options = Options { write: true, check_updates: true, ..Options::default() };
        let mut v = Volume::open(&image, options).unwrap();
        let uninit_before = (0..v.layout().groups)
            .filter(|&g| v.layout().group(&std::fs::read(&image).unwrap(), g).unwrap().block_uninit())
            .count();
        assert!(uninit_before > 0, "{features}: mke2fs left every group initialised");
        let dir = NewInode { mode: 0o755, uid: 0, gid: 0 };
        let chunk = vec![0xA5u8; 1 << 20];
        let blocks_total = v.statfs().blocks;
        let per_file = (blocks_total * v.layout().block_size * 3 / 4 / files as u64) as usize;
        for i in 0..files {
            let d = v.mkdir(ROOT, format!("dir{i}").as_bytes(), dir).unwrap().ino;
            let f = v.create(d, b"data", NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
            let mut at = 0;
            while at < per_file {
                let n = chunk.len().min(per_file - at);
                v.write(f, at as u64, &chunk[..n]).unwrap_or_else(|e| panic!("{features}: file {i} at {at}: {e}"));
                at += n;
            }
        }
        v.sync().unwrap();
        drop(v);
        e2fsck_clean(&image).unwrap_or_else(|report| panic!("{features}: e2fsck -fn:\n{report}"));
        let bytes = std::fs::read(&image).unwrap();
        let layout = csumkit::ext4::Layout::parse(&bytes).unwrap();
        let uninit_after = (0..layout.groups).filter(|&g| layout.group(&bytes, g).unwrap().block_uninit()).count();
        assert!(uninit_after < uninit_before, "{features}: no group was initialised ({uninit_before} before)");
    }
}

/// The token after `label` in debugfs's `stat` output.
fn stat_field(stat: &str, label: &str) -> String {
    let at = stat.find(label).unwrap_or_else(|| panic!("no {label} in:\n{stat}")) + label.len();
    stat[at..].split_whitespace().next().unwrap_or_default().to_string()
}

/// New inodes as the kernel would make them, judged by debugfs and e2fsck:
/// 32-bit owners (high halves included), a directory's permission bits and
/// setgid kept, the extents flag on files and directories only (e2fsck
/// calls it illegal on a FIFO; a device's i_block holds its number only); a top-level directory in the group after
/// its parent's, a subdirectory and its files beside it, a file's first
/// block in its inode's group; names that are not names refused.
#[test]
fn new_inodes_carry_owner_mode_and_flags_and_land_near_their_parent() {
    let (Some(_), Some(debugfs)) = (tool("mke2fs"), tool("debugfs")) else { return };
    let scratch = Scratch::new("new-inodes");
    let image = scratch.0.join("n.img");
    mke2fs_with(&image, "1024", "32M", &["-N", "6144"]);
    let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    for bad in [&b""[..], b"a/b", b"a\0b", b".", b".."] {
        match v.create(ROOT, bad, file) {
            Err(Error::Invalid(_)) => {}
            other => panic!("{:?}: {other:?}", String::from_utf8_lossy(bad)),
        }
    }
    let (ipg, bpg) = (v.layout().inodes_per_group, v.layout().blocks_per_group);
    // Four groups: a goal computed past the last group and wrapped lands
    // elsewhere than group 1.
    assert_eq!(v.layout().groups, 4);
    let a = v.mkdir(ROOT, b"a", NewInode { mode: 0o750, uid: 0, gid: 0 }).unwrap().ino;
    let b = v.mkdir(a, b"b", NewInode { mode: 0o2711, uid: 0, gid: 0 }).unwrap().ino;
    let f = v.create(b, b"f", NewInode { mode: 0o100_640, uid: 100_000, gid: 200_000 }).unwrap().ino;
    v.write(f, 0, b"data").unwrap();
    v.create(ROOT, b"empty", file).unwrap();
    v.create(ROOT, b"fifo", NewInode { mode: 0o010_644, uid: 0, gid: 0 }).unwrap();
    // Device 0:0 (an overlayfs whiteout): its i_block stays all zero.
    v.mknod(ROOT, b"whiteout", NewInode { mode: 0o020_000, uid: 0, gid: 0 }, 0).unwrap();
    v.mknod(ROOT, b"block", NewInode { mode: 0o060_600, uid: 0, gid: 0 }, 0x0801).unwrap();
    v.mknod(ROOT, b"socket", NewInode { mode: 0o140_755, uid: 0, gid: 0 }, 0).unwrap();
    v.symlink(ROOT, b"link", b"a/b/f", 0, 0).unwrap();
    let group_of_inode = |ino: u32| (u64::from(ino) - 1) / ipg;
    assert_eq!((group_of_inode(a), group_of_inode(b), group_of_inode(f)), (1, 1, 1), "inodes {a}, {b}, {f}");
    let first = v.runs(&v.inode(f).unwrap()).unwrap()[0].physical;
    assert_eq!((first - v.layout().first_data_block) / bpg, 1, "the file's first block {first}");
    v.sync().unwrap();
    drop(v);
    if let Err(report) = e2fsck_clean(&image) {
        panic!("e2fsck -fn:\n{report}");
    }
    let stat = |path: &str| {
        let out = Command::new(&debugfs).args(["-R", &format!("stat {path}")]).arg(&image).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for (path, mode, flags, user, group) in [
        ("/a", "0750", "0x80000", "0", "0"),
        ("/a/b", "02711", "0x80000", "0", "0"),
        ("/a/b/f", "0640", "0x80000", "100000", "200000"),
        ("/empty", "0644", "0x80000", "0", "0"),
        ("/fifo", "0644", "0x0", "0", "0"),
    ] {
        let s = stat(path);
        let got =
            [stat_field(&s, "Mode:"), stat_field(&s, "Flags:"), stat_field(&s, "User:"), stat_field(&s, "Group:")];
        assert_eq!(got, [mode, flags, user, group], "{path}:\n{s}");
    }
    let s = stat("/whiteout");
    assert_eq!(stat_field(&s, "Device major/minor number:"), "00:00", "{s}");
    // Each directory entry's file type is its inode's, as the kernel lists them.
    with_kernel_mount(&image, assert_entry_types);
}

/// Which checksums move and which are recomputed (`--stats` counts both):
/// with CRC instructions, structures under 1 KiB (inodes, descriptors, the
/// superblock) are recomputed and larger ones (bitmaps, directory blocks)
/// moved; on the portable engine, and under `check_updates`, all are moved.
#[test]
fn small_structures_are_recomputed_and_large_ones_moved() {
    if tool("mke2fs").is_none() {
        return;
    }
    let scratch = Scratch::new("moved-sums");
    let image = scratch.0.join("m.img");
    mke2fs_with(&image, "4096", "16M", &[]);
    let hardware = csumkit::Backend::active() != csumkit::Backend::Portable;
    let mut counts = Vec::new();
    for check_updates in [false, true] {
        let mut v = Volume::open(&image, Options { write: true, check_updates, ..Options::default() }).unwrap();
        let name = format!("f{}", u8::from(check_updates));
        let ino = v.create(ROOT, name.as_bytes(), NewInode { mode: 0o100_644, uid: 0, gid: 0 }).unwrap().ino;
        v.write(ino, 0, &[7u8; 5000]).unwrap();
        let counted = |v: &Volume| {
            let stats = v.stats();
            (csumfs::Stats::get(&stats.csum_full), csumfs::Stats::get(&stats.csum_incremental))
        };
        let (full, moved) = counted(&v);
        assert!(moved > 0, "check_updates {check_updates}: bitmaps and directory blocks moved");
        counts.push((full, moved));
        // A rename in place flips no bitmap: the directory block's move is its own.
        let renamed = format!("{name}-renamed");
        v.rename(ROOT, name.as_bytes(), ROOT, renamed.as_bytes(), RenameMode::Replace).unwrap();
        assert!(counted(&v).1 > moved, "check_updates {check_updates}: the directory block moved");
    }
    // Group descriptors store 16 bits of their CRC: always recomputed.
    let [(full, moved), (full_checked, moved_checked)] = counts[..] else { unreachable!() };
    assert_eq!(full > full_checked, hardware, "recomputed: {full}, under check_updates {full_checked}");
    assert_eq!(moved < moved_checked, hardware, "moved: {moved}, under check_updates {moved_checked}");
}

/// The largest file: csumfs refuses a write, truncate or fallocate past
/// the size where the kernel's ext4 refuses them (`s_maxbytes`: 2^32 - 1
/// blocks, fewer without `huge_file`) and allows them up to it. The kernel,
/// on a twin image, draws the line at the same byte (and cuts a write
/// across it short), e2fsck passes the files csumfs grew to it, and the
/// kernel reads them back.
#[test]
fn files_end_where_the_kernels_largest_file_ends() {
    use std::os::unix::fs::FileExt;
    if tool("mke2fs").is_none() {
        return;
    }
    let huge_file_off: &[&str] = &["-O", "^huge_file"];
    for (bs, extra) in [("1024", &[][..]), ("4096", &[]), ("1024", huge_file_off), ("4096", huge_file_off)] {
        let label = format!("{bs}-byte blocks{}", if extra.is_empty() { "" } else { ", ^huge_file" });
        let scratch = Scratch::new(&format!("maxsize-{bs}-{}", extra.len()));
        let image = scratch.0.join("csumfs.img");
        mke2fs_with(&image, bs, "8M", extra);
        let twin = scratch.0.join("kernel.img");
        std::fs::copy(&image, &twin).unwrap();

        let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
        let (max, bs) = (v.max_file_size(), v.layout().block_size);
        let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
        let [w, t, f] = [b"w", b"t", b"f"].map(|name| v.create(ROOT, name, file).unwrap().ino);
        let efbig = |r: Result<csumfs::Inode, Error>| matches!(r, Err(e) if e.errno() == libc::EFBIG);
        let free = v.statfs().free_blocks;
        assert!(efbig(v.write(w, max - 1, b"ab")), "{label}: a write past the largest size");
        assert!(efbig(v.write(w, max, b"a")), "{label}: a write at the largest size");
        assert!(efbig(v.truncate(t, max + 1)), "{label}: a truncate past it");
        assert!(efbig(v.fallocate(f, max - 1, 2, false)), "{label}: a fallocate past it");
        assert_eq!(v.statfs().free_blocks, free, "{label}: nothing taken by the refusals");
        assert_eq!(v.write(w, max - 1, b"z").unwrap().size, max, "{label}");
        assert_eq!(v.truncate(t, max).unwrap().size, max, "{label}");
        assert_eq!(v.fallocate(f, max - bs, bs, false).unwrap().size, max, "{label}");
        v.sync().unwrap();
        drop(v);
        assert_clean(&image, &format!("{label}: files grown to the largest size"));

        // The kernel, on the twin, refuses and allows at the same bytes.
        let mnt = scratch.0.join("kernel.mnt");
        common::with_kernel_mount_with(&twin, &mnt, "loop", || {
            let open = |name: &str| {
                std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(mnt.join(name)).unwrap()
            };
            let errno = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
            let w = open("w");
            assert_eq!(w.write_at(b"ab", max - 1).unwrap(), 1, "{label}: the kernel cuts the write short");
            let two_blocks = vec![7u8; 2 * bs as usize];
            assert_eq!(w.write_at(&two_blocks, max - bs).unwrap(), bs as usize, "{label}: at a block, too");
            assert_eq!(errno(w.write_at(b"a", max).map(drop)), Some(libc::EFBIG), "{label}: kernel write");
            let t = open("t");
            assert_eq!(errno(t.set_len(max + 1)), Some(libc::EFBIG), "{label}: kernel truncate");
            t.set_len(max).unwrap();
            let f = open("f");
            let fallocate = |at: u64, len: u64| {
                use std::os::fd::AsRawFd;
                // SAFETY: an open descriptor; fallocate takes no pointers.
                let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, at as i64, len as i64) };
                if r == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            };
            assert_eq!(errno(fallocate(max - 1, 2)), Some(libc::EFBIG), "{label}: kernel fallocate");
            fallocate(max - bs, bs).unwrap();
        });
        with_kernel_mount(&image, |mnt| {
            for name in ["w", "t", "f"] {
                assert_eq!(std::fs::metadata(mnt.join(name)).unwrap().len(), max, "{label}: kernel: {name}");
            }
            let mut last = [0u8; 2];
            let w = std::fs::File::open(mnt.join("w")).unwrap();
            assert_eq!(w.read_at(&mut last, max - 2).unwrap(), 2);
            assert_eq!(&last, b"\0z", "{label}: kernel: the last byte of w");
        });
    }
}

/// Extents as long as the format allows: 32 768 blocks written, 32 767
/// unwritten (the top bit of the length marks an unwritten extent). Runs
/// are allocated within a group, so only a wholly free group of 4 KiB
/// blocks (32 768) holds that much: groups 1 and 2 are taken by a
/// fallocate (32 767 and one block each), group 3 whole by a write of
/// 128 MiB and a block. e2fsck passes
/// both files and the kernel reads them back.
#[test]
fn extents_are_as_long_as_the_format_allows() {
    if tool("mke2fs").is_none() {
        return;
    }
    let scratch = Scratch::new("longest-extents");
    let image = scratch.0.join("img");
    // Five groups, every group's metadata in group 0 (flex_bg), no backups.
    mke2fs_with(&image, "4096", "640M", &["-O", "sparse_super2", "-E", "num_backup_sb=0"]);
    let mut v = Volume::open(&image, Options { write: true, ..Options::default() }).unwrap();
    let (group, bs) = (v.layout().blocks_per_group, v.layout().block_size);
    assert_eq!((v.layout().groups, group), (5, 32768));
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let [unwritten, written] = [&b"unwritten"[..], b"written"].map(|name| v.create(ROOT, name, file).unwrap().ino);
    let lengths = |v: &Volume, ino: u32| -> Vec<(u64, bool)> {
        v.runs(&v.inode(ino).unwrap()).unwrap().iter().map(|r| (r.len, r.uninit)).collect()
    };
    // Group 0's free blocks, group 1, group 2 but its last block: four
    // extents, so they fit in the inode (no extent block is taken).
    let free_in_group_0 = v.statfs().free_blocks - 4 * group;
    let fallocated = free_in_group_0 + 2 * group - 1;
    v.fallocate(unwritten, 0, fallocated * bs, false).unwrap();
    assert_eq!(lengths(&v, unwritten), [(free_in_group_0, true), (32767, true), (1, true), (32767, true)]);
    let data = content(5, (group * bs + bs) as usize);
    v.write(written, 0, &data).unwrap();
    assert_eq!(lengths(&v, written), [(32768, false), (1, false)], "group 3 whole, then group 4's first block");
    v.sync().unwrap();
    drop(v);
    assert_clean(&image, "the longest extents");
    with_kernel_mount(&image, |mnt| {
        assert!(std::fs::read(mnt.join("written")).unwrap() == data, "kernel: the written file");
        let read = std::fs::read(mnt.join("unwritten")).unwrap();
        assert!(read.len() as u64 == fallocated * bs && read.iter().all(|&b| b == 0), "kernel: the unwritten file");
    });
}

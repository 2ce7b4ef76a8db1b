//! What the csumfs tests share: e2fsprogs found (or the test visibly
//! skipped, a failure in CI), scratch directories, fresh images, and
//! `e2fsck -fn` as the judge.

#![allow(dead_code)] // each test binary uses its own part of this

pub mod crash;
pub mod model;
pub mod view;
pub mod xattrs;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The path of e2fsprogs' `name`; `None` (after saying the running test
/// skipped itself) when it is missing — a failure in CI.
pub fn tool(name: &str) -> Option<PathBuf> {
    tool_in(name, "e2fsprogs")
}

/// [`tool`] for a program of Debian's package `package`.
pub fn tool_in(name: &str, package: &str) -> Option<PathBuf> {
    let found = ["/usr/sbin", "/sbin", "/usr/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.exists());
    if found.is_none() {
        assert!(std::env::var_os("CI").is_none(), "{name} is required in CI (apt-get install {package})");
        let test = std::thread::current().name().unwrap_or("a test").to_string();
        let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {name} not found (apt-get install {package})");
    }
    found
}

/// Whether mke2fs and e2fsck are both here (the test skips itself if not).
pub fn have_e2fsprogs() -> bool {
    tool("mke2fs").is_some() && tool("e2fsck").is_some()
}

/// A directory removed when dropped.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh directory in the temp dir named for `tag` and this process.
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("csumfs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The kernel-made corpus image `name` (`csumkit/tests/data/ext4/NAME.img.gz`)
/// unpacked into `dir`; its path.
pub fn corpus_image(name: &str, dir: &Path) -> PathBuf {
    let packed = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../csumkit/tests/data/ext4/{name}.img.gz"));
    let out = Command::new("gzip").arg("-dc").arg(&packed).output().unwrap();
    assert!(out.status.success(), "gzip -dc {}", packed.display());
    let image = dir.join(format!("{name}.img"));
    std::fs::write(&image, out.stdout).unwrap();
    image
}

/// A fresh ext4 image at `path` (metadata_csum, no journal).
pub fn mke2fs(path: &Path, block_size: &str, size: &str) {
    mke2fs_with(path, block_size, size, &[]);
}

/// [`mke2fs`] with more of its options (`-g 65528`, …).
pub fn mke2fs_with(path: &Path, block_size: &str, size: &str, extra: &[&str]) {
    mke2fs_features(path, "metadata_csum,^has_journal", block_size, size, extra);
}

/// A fresh image with mke2fs's `-O features` and `extra` options.
pub fn mke2fs_features(path: &Path, features: &str, block_size: &str, size: &str, extra: &[&str]) {
    let out = Command::new(tool("mke2fs").unwrap())
        .args(["-q", "-F", "-t", "ext4", "-O", features, "-b", block_size])
        .args(extra)
        .arg(path)
        .arg(size)
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
}

/// Runs debugfs `request` on `image`, writable (debugfs re-seals the
/// checksums of what it sets).
pub fn debugfs_write(image: &Path, request: &str) {
    let out = Command::new(tool("debugfs").unwrap()).args(["-w", "-R", request]).arg(image).output().unwrap();
    assert!(out.status.success(), "debugfs {request}: {}", String::from_utf8_lossy(&out.stderr));
}

/// `Ok` when `e2fsck -fn` finds nothing; its report otherwise.
pub fn e2fsck_clean(image: &Path) -> Result<(), String> {
    let out = Command::new(tool("e2fsck").unwrap()).arg("-fn").arg(image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(0) && !text.contains("? no") && !text.contains("IGNORED") {
        Ok(())
    } else {
        Err(text)
    }
}

/// Panics with e2fsck's report unless the image is clean after `step`.
pub fn assert_clean(image: &Path, step: &str) {
    if let Err(report) = e2fsck_clean(image) {
        panic!("after {step}, e2fsck -fn:\n{report}");
    }
}

/// Mounts `image` read-only with the kernel's ext4 at `mnt`; `false` (after
/// saying the running test skipped its kernel read-back) where this machine
/// does not allow it.
pub fn kernel_mount(image: &Path, mnt: &Path) -> bool {
    kernel_mount_with(image, mnt, "loop,ro")
}

/// Mounts `image` with the kernel's ext4 at `mnt` with mount `options`
/// (`loop` for read-write); `false` (after a visible skip line; a failure
/// in CI, which runs as root) where this machine does not allow it.
pub fn kernel_mount_with(image: &Path, mnt: &Path, options: &str) -> bool {
    std::fs::create_dir_all(mnt).unwrap();
    let out = Command::new("mount").args(["-t", "ext4", "-o", options]).arg(image).arg(mnt).output();
    if matches!(&out, Ok(o) if o.status.success()) {
        return true;
    }
    let why = out.map_or_else(|e| e.to_string(), |o| String::from_utf8_lossy(&o.stderr).trim().to_string());
    assert!(std::env::var_os("CI").is_none(), "CI runs as root: mount -o {options} refused: {why}");
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {test} (kernel mount -o {options}): {why}");
    false
}

/// Unmounts the kernel's mount at `mnt`, again for up to two seconds while
/// it is busy (seen once in a full run: something else, briefly, had the
/// mount open).
pub fn kernel_umount(mnt: &Path) {
    for _ in 0..100 {
        let out = Command::new("umount").arg(mnt).output().unwrap();
        if out.status.success() {
            return;
        }
        if !String::from_utf8_lossy(&out.stderr).contains("busy") {
            panic!("umount {}: {}", mnt.display(), String::from_utf8_lossy(&out.stderr).trim());
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    panic!("umount {}: still busy after 2 s", mnt.display());
}

/// Runs `check` on the kernel's read-only mount of `image` at `mnt`,
/// unmounts, and passes a failure on.
pub fn with_kernel_mount(image: &Path, mnt: &Path, check: impl FnOnce() + std::panic::UnwindSafe) {
    with_kernel_mount_with(image, mnt, "loop,ro", check);
}

/// [`with_kernel_mount`] with mount `options` (`loop` for read-write).
pub fn with_kernel_mount_with(image: &Path, mnt: &Path, options: &str, check: impl FnOnce() + std::panic::UnwindSafe) {
    if !kernel_mount_with(image, mnt, options) {
        return;
    }
    let result = std::panic::catch_unwind(check);
    kernel_umount(mnt);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

/// What `dumpe2fs` prints of `image` (its superblock, then each group).
pub fn dumpe2fs(image: &Path) -> String {
    let out = Command::new(tool("dumpe2fs").unwrap()).arg(image).output().unwrap();
    assert!(out.status.success(), "dumpe2fs: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The blocks of `image` whose bytes nothing reads, by `dumpe2fs`: the
/// free blocks of every group, the block bitmap of every group marked
/// `BLOCK_UNINIT` and the inode bitmap of every group marked
/// `INODE_UNINIT` (the kernel and e2fsck compute those bitmaps).
pub fn unread_blocks(image: &Path) -> std::collections::BTreeSet<u64> {
    let text = dumpe2fs(image);
    let mut unread = std::collections::BTreeSet::new();
    // The current group's header line: the superblock's lines before the
    // first group have a "Free blocks:" count too.
    let mut group: Option<&str> = None;
    let block = |rest: &str| rest.split([' ', ',']).next().unwrap().parse::<u64>().unwrap();
    for line in text.lines().map(str::trim) {
        if line.starts_with("Group ") {
            group = Some(line);
        } else if group.is_none() {
            continue;
        } else if let Some(rest) = line.strip_prefix("Block bitmap at ") {
            if group.is_some_and(|g| g.contains("BLOCK_UNINIT")) {
                unread.insert(block(rest));
            }
        } else if let Some(rest) = line.strip_prefix("Inode bitmap at ") {
            if group.is_some_and(|g| g.contains("INODE_UNINIT")) {
                unread.insert(block(rest));
            }
        } else if let Some(list) = line.strip_prefix("Free blocks: ") {
            for piece in list.split(", ").filter(|p| !p.is_empty()) {
                let (a, b) = piece.split_once('-').unwrap_or((piece, piece));
                unread.extend(a.parse::<u64>().unwrap()..=b.parse::<u64>().unwrap());
            }
        }
    }
    unread
}

/// Panics unless `after` holds `before`'s bytes in every block of
/// `block_size` bytes but those of `unread` (see [`unread_blocks`]): an
/// operation undone may leave bytes in blocks it took and gave back.
pub fn assert_same_but_unread(
    before: &[u8],
    after: &[u8],
    unread: &std::collections::BTreeSet<u64>,
    block_size: usize,
    what: &str,
) {
    assert_eq!(before.len(), after.len(), "{what}: the image's length");
    let differing: Vec<u64> = (0..before.len() / block_size)
        .filter(|&b| before[b * block_size..][..block_size] != after[b * block_size..][..block_size])
        .map(|b| b as u64)
        .collect();
    let read: Vec<&u64> = differing.iter().filter(|b| !unread.contains(b)).collect();
    assert!(read.is_empty(), "{what}: blocks {read:?} differ and are in use (of {} differing)", differing.len());
}

/// Writes `file` on in `chunk`-byte pieces, each its own operation, until
/// the volume has no block left (`ENOSPC`, rolled back); the bytes written.
pub fn fill_until_full(volume: &mut csumfs::Volume, file: u32, chunk: usize) -> u64 {
    let mut size = 0u64;
    loop {
        volume.begin();
        let wrote = volume.write(file, size, &vec![0x5A; chunk]);
        volume.end(wrote.is_ok()).unwrap();
        match wrote {
            Ok(_) => size += chunk as u64,
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                return size;
            }
        }
    }
}

/// Every regular file of `volume` by path (`lost+found` left out), its
/// bytes: a tree to compare with the kernel's view or an expected one.
pub fn regular_files(volume: &csumfs::Volume) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![("".to_string(), volume.inode(csumfs::ROOT).unwrap())];
    while let Some((path, dir)) = stack.pop() {
        for entry in volume.read_dir(&dir).unwrap() {
            let name = String::from_utf8_lossy(&entry.name).into_owned();
            if name == "." || name == ".." || (path.is_empty() && name == "lost+found") {
                continue;
            }
            let inode = volume.inode(entry.ino).unwrap();
            let full = format!("{path}/{name}");
            if inode.is_dir() {
                stack.push((full, inode));
            } else {
                out.insert(full, volume.read_all(&inode).unwrap());
            }
        }
    }
    out
}

/// `len` bytes that differ with `seed`: file contents for workloads.
pub fn seeded_bytes(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k.wrapping_mul(131) ^ seed.wrapping_mul(7919)) as u8).collect()
}

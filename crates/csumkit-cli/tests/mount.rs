//! `csumkit mount` as a user runs it: an image mke2fs made, changed through
//! the kernel's FUSE client by ordinary file calls, unmounted — then judged
//! by `e2fsck -fn` and read back by the kernel's own ext4 (a loop mount).
//! Needs root and /dev/fuse; skipped visibly without them, a failure in CI.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

mod common;
use common::*;

/// path → contents (`None`: a directory); what the tree must hold.
type Model = BTreeMap<String, Option<Vec<u8>>>;

/// Changes the tree under `root` through ordinary file calls, recording
/// what it must hold afterwards.
fn exercise(root: &Path) -> Model {
    let mut model = Model::new();
    let p = |rel: &str| root.join(rel);
    for dir in ["d1", "d1/sub", "d2", "many"] {
        std::fs::create_dir(p(dir)).unwrap();
        model.insert(dir.into(), None);
    }
    for (i, len) in [0usize, 1, 4095, 4096, 4097, 65_536 + 3, (1 << 20) + 17].into_iter().enumerate() {
        let name = format!("d1/f{i}");
        let data = pattern(len, i as u32);
        std::fs::write(p(&name), &data).unwrap();
        model.insert(name, Some(data));
    }
    // An htree directory's worth of names.
    for i in 0..300 {
        let name = format!("many/entry-with-a-longish-name-{i:04}");
        std::fs::write(p(&name), i.to_string()).unwrap();
        model.insert(name, Some(i.to_string().into_bytes()));
    }
    for i in (0..300).step_by(3) {
        let name = format!("many/entry-with-a-longish-name-{i:04}");
        std::fs::remove_file(p(&name)).unwrap();
        model.remove(&name);
    }
    // Overwrite in the middle, append, sparse write past the end.
    {
        let mut f = std::fs::OpenOptions::new().write(true).open(p("d1/f6")).unwrap();
        f.seek(SeekFrom::Start(5000)).unwrap();
        f.write_all(b"middle").unwrap();
        f.seek(SeekFrom::Start(3 << 20)).unwrap();
        f.write_all(b"far").unwrap();
        let data = model.get_mut("d1/f6").unwrap().as_mut().unwrap();
        data[5000..5006].copy_from_slice(b"middle");
        data.resize(3 << 20, 0);
        data.extend_from_slice(b"far");
    }
    // Truncate down (mid-block) and up again: the cut bytes read as zeros.
    {
        let f = std::fs::OpenOptions::new().write(true).open(p("d1/f5")).unwrap();
        f.set_len(10_000).unwrap();
        f.set_len(20_000).unwrap();
        let data = model.get_mut("d1/f5").unwrap().as_mut().unwrap();
        data.truncate(10_000);
        data.resize(20_000, 0);
    }
    // fallocate, then a write into the unwritten blocks.
    {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(p("d2/falloc"))
            .unwrap();
        // SAFETY: a valid descriptor; plain integer arguments.
        let done = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, 1 << 20) };
        assert_eq!(done, 0, "fallocate: {}", std::io::Error::last_os_error());
        let mut f = f;
        f.seek(SeekFrom::Start(12_345)).unwrap();
        f.write_all(b"inside the fallocated range").unwrap();
        let mut data = vec![0u8; 1 << 20];
        data[12_345..12_345 + 27].copy_from_slice(b"inside the fallocated range");
        model.insert("d2/falloc".into(), Some(data));
    }
    // A hole punched through written data (whole blocks freed, the bytes
    // at its edges zeroed) and a range zeroed, the size kept.
    {
        let f = std::fs::OpenOptions::new().write(true).open(p("d1/f6")).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
        // SAFETY: a valid descriptor; plain integer arguments.
        let done = unsafe { libc::fallocate(fd, punch, 5_000, 30_000) };
        assert_eq!(done, 0, "punch hole: {}", std::io::Error::last_os_error());
        // SAFETY: as above.
        let done = unsafe { libc::fallocate(fd, libc::FALLOC_FL_ZERO_RANGE, 60_001, 9_000) };
        assert_eq!(done, 0, "zero range: {}", std::io::Error::last_os_error());
        let data = model.get_mut("d1/f6").unwrap().as_mut().unwrap();
        data[5_000..35_000].fill(0);
        data[60_001..69_001].fill(0);
    }
    // Renames (across directories, replacing), a hard link, a symlink.
    std::fs::rename(p("d1/f1"), p("d2/moved")).unwrap();
    let moved = model.remove("d1/f1").unwrap();
    model.insert("d2/moved".into(), moved);
    std::fs::rename(p("d1/f2"), p("d1/f3")).unwrap();
    let replaced = model.remove("d1/f2").unwrap();
    model.insert("d1/f3".into(), replaced);
    std::fs::hard_link(p("d1/f4"), p("d1/sub/link")).unwrap();
    model.insert("d1/sub/link".into(), model["d1/f4"].clone());
    std::os::unix::fs::symlink("../d1/f4", p("d2/symlink")).unwrap();
    std::fs::rename(p("d1/sub"), p("d2/sub")).unwrap();
    model.remove("d1/sub");
    let link = model.remove("d1/sub/link").unwrap();
    model.insert("d2/sub".into(), None);
    model.insert("d2/sub/link".into(), link);
    // A file unlinked while open stays readable and writable until closed.
    {
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(p("d2/doomed"))
            .unwrap();
        f.write_all(&pattern(10_000, 9)).unwrap();
        std::fs::remove_file(p("d2/doomed")).unwrap();
        f.write_all(b"after unlink").unwrap();
        f.seek(SeekFrom::Start(10_000)).unwrap();
        let mut back = Vec::new();
        std::io::Read::read_to_end(&mut f, &mut back).unwrap();
        assert_eq!(back, b"after unlink");
    }
    // Twelve xattrs of 60 bytes: the inode holds the first, a block the rest.
    let f4 = CString::new(p("d1/f4").as_os_str().as_bytes()).unwrap();
    for i in 0..12 {
        let (name, value) = (CString::new(format!("user.k{i}")).unwrap(), pattern(60, 100 + i));
        // SAFETY: valid path, name and value buffer.
        let done = unsafe { libc::lsetxattr(f4.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
        assert_eq!(done, 0, "setxattr user.k{i}: {}", std::io::Error::last_os_error());
    }
    let name = CString::new("user.k5").unwrap();
    // SAFETY: valid path and name.
    assert_eq!(unsafe { libc::lremovexattr(f4.as_ptr(), name.as_ptr()) }, 0);
    // Modes, times, a FIFO.
    std::fs::set_permissions(p("d1/f0"), std::fs::Permissions::from_mode(0o640)).unwrap();
    let fifo = CString::new(p("d2/fifo").as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
    let times =
        [libc::timespec { tv_sec: 1_000_000_000, tv_nsec: 5 }, libc::timespec { tv_sec: 1_234_567_890, tv_nsec: 0 }];
    let path = CString::new(p("d1/f0").as_os_str().as_bytes()).unwrap();
    // SAFETY: valid path and a two-element times array.
    assert_eq!(unsafe { libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0) }, 0);
    model
}

/// Checks that the tree under `root` holds exactly `model` (plus lost+found).
fn compare(root: &Path, model: &Model, label: &str) {
    for (path, want) in model {
        let host = root.join(path);
        match want {
            None => assert!(host.is_dir(), "{label}: {path} is not a directory"),
            Some(want) => {
                let got = std::fs::read(&host).unwrap_or_else(|e| panic!("{label}: {path}: {e}"));
                assert!(
                    got == *want,
                    "{label}: {path}: {} bytes read, {} expected, or different",
                    got.len(),
                    want.len()
                );
            }
        }
    }
    for dir in ["d1", "d2", "many"] {
        let names = std::fs::read_dir(root.join(dir)).unwrap().count();
        let prefix = format!("{dir}/");
        let want = model.keys().filter(|k| k.starts_with(&prefix) && !k[prefix.len()..].contains('/')).count()
            + usize::from(dir == "d2") * 2; // the symlink and the FIFO are not in the model
        assert_eq!(names, want, "{label}: entries of {dir}");
    }
    let f0 = std::fs::metadata(root.join("d1/f0")).unwrap();
    assert_eq!(
        (f0.mode() & 0o7777, f0.mtime(), f0.atime(), f0.atime_nsec()),
        (0o640, 1_234_567_890, 1_000_000_000, 5),
        "{label}: d1/f0"
    );
    assert_eq!(std::fs::read_link(root.join("d2/symlink")).unwrap(), Path::new("../d1/f4"), "{label}");
    assert!(std::fs::symlink_metadata(root.join("d2/fifo")).unwrap().file_type().is_fifo(), "{label}: d2/fifo");
    let f4 = std::fs::metadata(root.join("d1/f4")).unwrap();
    assert_eq!(f4.nlink(), 2, "{label}: d1/f4 links");
    let path = CString::new(root.join("d1/f4").as_os_str().as_bytes()).unwrap();
    for i in 0..12u32 {
        let name = CString::new(format!("user.k{i}")).unwrap();
        let mut value = vec![0u8; 256];
        // SAFETY: valid path, name and buffer.
        let len = unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
        if i == 5 {
            assert_eq!(len, -1, "{label}: user.k5 was removed");
        } else {
            assert_eq!(usize::try_from(len).ok(), Some(60), "{label}: user.k{i}");
            assert_eq!(value[..60], pattern(60, 100 + i)[..], "{label}: user.k{i}");
        }
    }
}

fn kernel_compare(scratch: &Scratch, image: &Path, model: &Model) {
    let kernel = scratch.0.join("kernel");
    if !kernel_mount(image, &kernel, "loop,ro") {
        return;
    }
    let result = std::panic::catch_unwind(|| compare(&kernel, model, "kernel"));
    unmount_kernel(&kernel);
    if let Err(panic) = result {
        std::panic::resume_unwind(panic);
    }
}

#[test]
fn a_mounted_image_changed_by_file_calls_is_clean_for_e2fsck_and_the_kernel() {
    if cannot_mount() {
        return;
    }
    for block_size in ["4096", "1024"] {
        let scratch = Scratch::new(&format!("tree{block_size}"));
        let image = scratch.image("64M", block_size);
        // At 1 KiB blocks the daemon runs on the portable CRC engine, where
        // checksumming a 1 MiB write on a second thread pays (with CRC
        // instructions it does not, and csumfs checksums in line).
        let portable = block_size == "1024";
        let env: &[(&str, &str)] = if portable { &[("CSUMKIT_BACKEND", "portable-slice16")] } else { &[] };
        let child = mount_foreground_env(&image, &scratch.mnt(), &["-o", "threads=2"], env);
        let model = std::panic::catch_unwind(|| {
            let model = exercise(&scratch.mnt());
            compare(&scratch.mnt(), &model, "csumfs");
            let text = mount_stats(&scratch.mnt());
            assert_eq!(text.lines().count(), 6, "--stats: {text}");
            // The transport: FUSE over io_uring wherever the kernel offers it.
            let through_uring = uring_requests(&text);
            assert_eq!(through_uring > 0, fuse_uring_offered(), "{text}");
            let media = [csumfs::LOG_ON_FILE, csumfs::LOG_ON_FILE_DIRECT, csumfs::LOG_ON_TMPFS, csumfs::LOG_ON_DAX];
            assert!(media.iter().any(|m| text.contains(&format!("log: {m}: "))), "where the log is: {text}");
            let moved: u64 = text.split(": ").nth(1).and_then(|t| t.split(' ').next()).unwrap().parse().unwrap();
            assert!(moved > 1000, "{moved} incremental checksum updates: {text}");
            assert!(text.contains("data checksums: ") && !text.contains("data checksums: 0 blocks"), "{text}");
            // On the portable engine the 1 MiB file's blocks were checksummed
            // while they were written.
            let after = text.split("checksummed on write (").nth(1).unwrap_or_default();
            let overlapped: u64 = after.split(' ').next().unwrap_or_default().parse().unwrap_or(0);
            assert!(!portable || overlapped >= 128, "checksums computed while the write was under way: {text}");
            // lsattr's ioctl: a file csumfs made is extent-mapped (EXT4_EXTENTS_FL).
            let f6 = scratch.mnt().join("d1/f6");
            let flags = inode_flags(&f6).unwrap();
            assert_eq!(flags & 0x80000, 0x80000, "FS_IOC_GETFLAGS: {flags:#x}");
            // chattr +dA (nodump, noatime) is kept, and +s (secure
            // deletion: a mark ext4 stores and ignores); +C (btrfs's no
            // copy on write, not an ext4 flag) is refused and changes
            // nothing. The kernel sees d, A and s below.
            set_inode_flags(&f6, flags | 0x40 | 0x80 | 0x1).unwrap();
            assert_eq!(inode_flags(&f6).unwrap(), flags | 0xC1);
            let refused = set_inode_flags(&f6, flags | 0xC1 | 0x80_0000).unwrap_err();
            assert_eq!(refused.raw_os_error(), Some(libc::EOPNOTSUPP));
            assert_eq!(inode_flags(&f6).unwrap(), flags | 0xC1);
            model
        });
        unmount_and_wait(child, &scratch.mnt());
        let model = model.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        e2fsck_clean(&image);
        kernel_compare(&scratch, &image, &model);
        // Mounted again, csumfs reads back what it wrote, and its inode
        // flags are the kernel's.
        let kernel_flags: Vec<Option<u32>> = {
            let kernel = scratch.0.join("kernel-flags");
            if kernel_mount(&image, &kernel, "loop,ro") {
                let flags = ["d1/f6", "d1", "many", "d2/falloc"].map(|p| inode_flags(&kernel.join(p)).ok()).to_vec();
                unmount_kernel(&kernel);
                flags
            } else {
                Vec::new()
            }
        };
        let child = mount_foreground(&image, &scratch.mnt(), &["-o", "ro"]);
        let read_back = std::panic::catch_unwind(|| {
            compare(&scratch.mnt(), &model, "csumfs again");
            let ours = ["d1/f6", "d1", "many", "d2/falloc"].map(|p| inode_flags(&scratch.mnt().join(p)).ok()).to_vec();
            if !kernel_flags.is_empty() {
                assert_eq!(ours, kernel_flags, "FS_IOC_GETFLAGS: csumfs and the kernel");
            }
        });
        unmount_and_wait(child, &scratch.mnt());
        read_back.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    }
}

/// `uring=off`: the same tree through `/dev/fuse` (reads and writes of the
/// device), where the other tests go through io_uring when the kernel
/// offers it (CI turns it on).
#[test]
fn with_uring_off_requests_go_through_dev_fuse_and_the_tree_is_the_same() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("dev-fuse");
    let image = scratch.image("64M", "4096");
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "uring=off"]);
    let model = std::panic::catch_unwind(|| {
        let model = exercise(&scratch.mnt());
        compare(&scratch.mnt(), &model, "csumfs through /dev/fuse");
        let stats = mount_stats(&scratch.mnt());
        assert_eq!(uring_requests(&stats), 0, "{stats}");
        model
    });
    unmount_and_wait(child, &scratch.mnt());
    let model = model.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    e2fsck_clean(&image);
    kernel_compare(&scratch, &image, &model);
}

/// Eight threads writing and `fsync`ing at once: the `fsync`s that queue
/// behind a sync are answered by the thread that ran it, after their own
/// handlers have returned — through io_uring a reply sent late, from
/// another thread (the transport's first version answered those `EIO`).
#[test]
fn concurrent_fsyncs_share_syncs_and_each_is_answered() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("concurrent-fsyncs");
    let image = scratch.image("64M", "4096");
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    const THREADS: u32 = 8;
    const ROUNDS: u32 = 60;
    let daemon = child.id() as libc::pid_t;
    let run = std::panic::catch_unwind(|| {
        // A reply lost leaves its caller waiting for ever: after a minute
        // the daemon is killed, which fails the waiting calls (ENOTCONN).
        let finished = std::sync::atomic::AtomicU32::new(0);
        // Every round's fsyncs sent together, so that they meet in flight
        // however the machine's load schedules the threads (unaligned,
        // a loaded 2-vCPU runner once ran all 480 one after another).
        // The wait is bounded: a thread that failed holds the rest 10 s at most.
        let arrived = std::sync::atomic::AtomicU32::new(0);
        let hung = std::thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (dir, finished, arrived) = (scratch.mnt().join(format!("t{t}")), &finished, &arrived);
                    scope.spawn(move || {
                        std::fs::create_dir(&dir).unwrap();
                        for r in 0..ROUNDS {
                            let mut f = std::fs::File::create(dir.join(format!("f{r}"))).unwrap();
                            f.write_all(&pattern(4096, t * 1000 + r)).unwrap();
                            arrived.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                            let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
                            while arrived.load(std::sync::atomic::Ordering::SeqCst) < (r + 1) * THREADS
                                && std::time::Instant::now() < until
                            {
                                std::thread::yield_now();
                            }
                            f.sync_all().unwrap_or_else(|e| panic!("fsync of t{t}/f{r}: {e}"));
                        }
                        finished.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    })
                })
                .collect();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while finished.load(std::sync::atomic::Ordering::SeqCst) < THREADS && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            let hung = finished.load(std::sync::atomic::Ordering::SeqCst) < THREADS;
            if hung {
                // SAFETY: signals the daemon this test started.
                unsafe { libc::kill(daemon, libc::SIGKILL) };
            }
            for worker in workers {
                let _ = worker.join();
            }
            hung
        });
        assert!(!hung, "fsyncs not all answered within a minute: a reply was lost");
        assert_eq!(finished.load(std::sync::atomic::Ordering::SeqCst), THREADS, "a writer failed");
        let stats = mount_stats(&scratch.mnt());
        let after = |label: &str| -> u64 {
            let at = stats.find(label).unwrap_or_else(|| panic!("{label:?} in {stats}"));
            let before = stats[..at].trim_end();
            before[before.rfind(' ').map_or(0, |i| i + 1)..].parse().unwrap()
        };
        let (fsyncs, syncs) = (after(" fsyncs ("), after(" syncs (group commit)"));
        assert!(fsyncs >= u64::from(THREADS * ROUNDS), "{stats}");
        assert!(syncs < fsyncs, "no fsync shared a sync: {stats}");
        assert_eq!(uring_requests(&stats) > 0, fuse_uring_offered(), "{stats}");
    });
    unmount_and_wait(child, &scratch.mnt());
    run.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    e2fsck_clean(&image);
    let kernel = scratch.0.join("kernel");
    if kernel_mount(&image, &kernel, "loop,ro") {
        let read = std::panic::catch_unwind(|| {
            for t in 0..THREADS {
                for r in 0..ROUNDS {
                    let got = std::fs::read(kernel.join(format!("t{t}/f{r}"))).unwrap();
                    assert!(got == pattern(4096, t * 1000 + r), "t{t}/f{r} as the kernel reads it");
                }
            }
        });
        unmount_kernel(&kernel);
        read.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    }
}

/// kill -9 after an fsync: the image says its ByteLog holds changes.
fn fsync_and_kill(child: Child, mnt: &Path) {
    std::fs::File::open(mnt).unwrap().sync_all().unwrap();
    kill_daemon(child, mnt);
}

/// kill -9 of the mount's daemon, then the dead mount detached: the
/// daemon dies with whatever it held.
fn kill_daemon(mut child: Child, mnt: &Path) {
    child.kill().unwrap();
    child.wait().unwrap();
    let _ = Command::new("/usr/bin/fusermount3").arg("-uz").arg(mnt).output();
}

fn csumkit(args: &[&std::ffi::OsStr]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_csumkit")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn a_killed_mount_is_replayed_by_the_next_and_checkpointed_for_the_kernel() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("killed");
    let image = scratch.image("64M", "4096");
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    let model = std::panic::catch_unwind(|| {
        let model = exercise(&scratch.mnt());
        // A file unlinked while open, still open when the daemon dies: it
        // is on the orphan list, and the next mount frees its blocks.
        let free = free_blocks(&scratch.mnt());
        let mut held = std::fs::File::create(scratch.mnt().join("held")).unwrap();
        held.write_all(&vec![3u8; 1 << 20]).unwrap();
        std::fs::remove_file(scratch.mnt().join("held")).unwrap();
        assert!(free_blocks(&scratch.mnt()) < free, "the unlinked file's blocks stay taken while it is open");
        (model, free, held)
    });
    fsync_and_kill(child, &scratch.mnt());
    let (model, free_before_held, _held) = model.unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    // The kernel's tools refuse the image; csumfs's readers name the remedy.
    let out = Command::new("/usr/sbin/e2fsck").arg("-fn").arg(&image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && text.contains("unsupported feature"), "e2fsck -fn:\n{text}");
    let (ok, text) = csumkit(&["ext4".as_ref(), "ls".as_ref(), image.as_os_str(), "/".as_ref()]);
    assert!(!ok && text.contains("csumkit ext4 checkpoint"), "ext4 ls: {text}");
    let (ok, text) = csumkit(&["ext4".as_ref(), "check".as_ref(), image.as_os_str()]);
    assert!(ok && text.contains("checked as its ByteLog"), "ext4 check: {text}");

    // The next mount replays the log and reads everything back.
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    let again = std::panic::catch_unwind(|| {
        assert_eq!(free_blocks(&scratch.mnt()), free_before_held, "the orphan's blocks are free again");
        compare(&scratch.mnt(), &model, "csumfs after replay");
        std::fs::write(scratch.mnt().join("after-replay"), b"written after the replay").unwrap();
    });
    fsync_and_kill(child, &scratch.mnt());
    again.unwrap_or_else(|panic| std::panic::resume_unwind(panic));

    // Checkpointed without mounting: e2fsck and the kernel see it all.
    let (ok, text) = csumkit(&["ext4".as_ref(), "checkpoint".as_ref(), image.as_os_str()]);
    assert!(ok && text.contains("commits") && text.contains("replayed"), "ext4 checkpoint: {text}");
    e2fsck_clean(&image);
    kernel_compare(&scratch, &image, &model);
    let (ok, text) = csumkit(&["ext4".as_ref(), "cat".as_ref(), image.as_os_str(), "/after-replay".as_ref()]);
    assert!(ok && text == "written after the replay", "ext4 cat: {text}");
}

/// The default mount of an image with a journal commits into that
/// journal: after a kill -9 the image is an ordinary ext4 image needing
/// recovery, no csumfs feature bit on it, no file beside it. The kernel
/// (a read-write loop mount of one copy) and `e2fsck -fy` (of another)
/// recover it to the tree the fsync acknowledged, `e2fsck -fn` clean after
/// each, and so does the next csumfs mount of the image itself.
#[test]
fn a_killed_mount_of_an_image_with_a_journal_is_recovered_by_the_kernel_e2fsck_and_csumfs() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("killed-journal");
    let image = scratch.journaled_image("64M", "4096");
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    let model = std::panic::catch_unwind(|| {
        let model = exercise(&scratch.mnt());
        let text = mount_stats(&scratch.mnt());
        assert!(text.contains(&format!("log: {}: ", csumfs::LOG_IN_IMAGE_JOURNAL)), "--stats: {text}");
        model
    });
    fsync_and_kill(child, &scratch.mnt());
    let model = model.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    assert!(!csumfs::log_pending(&std::fs::read(&image).unwrap()), "no csumfs mark on a journaled image");
    assert!(!image.with_extension("bytelog").exists() && !scratch.0.join("img.bytelog").exists(), "no ByteLog");
    let (ok, text) = csumkit(&["ext4".as_ref(), "check".as_ref(), image.as_os_str()]);
    assert!(ok && text.contains("replayed in memory"), "ext4 check of the killed image: {text}");

    let by_kernel = scratch.0.join("kernel.img");
    std::fs::copy(&image, &by_kernel).unwrap();
    let kernel = scratch.0.join("kernel");
    if kernel_mount(&by_kernel, &kernel, "loop,noatime") {
        let result = std::panic::catch_unwind(|| compare(&kernel, &model, "the kernel's recovery"));
        unmount_kernel(&kernel);
        result.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        e2fsck_clean(&by_kernel);
    }
    let by_e2fsck = scratch.0.join("e2fsck.img");
    std::fs::copy(&image, &by_e2fsck).unwrap();
    let out = Command::new("/usr/sbin/e2fsck").arg("-fy").arg(&by_e2fsck).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some_and(|c| c <= 1) && !text.contains("? yes"), "e2fsck -fy:\n{text}");
    e2fsck_clean(&by_e2fsck);
    kernel_compare(&scratch, &by_e2fsck, &model);

    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    let again = std::panic::catch_unwind(|| compare(&scratch.mnt(), &model, "csumfs's recovery"));
    unmount_and_wait(child, &scratch.mnt());
    again.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    e2fsck_clean(&image);
    kernel_compare(&scratch, &image, &model);
}

/// A logged mount marks its image before it serves, not at its first
/// commit, and keeps the mark to its unmount: the kernel and e2fsck refuse
/// the image from the start (a kernel mount let in before the first commit
/// would have been written over by it), also after a kill -9 that came
/// before any change — until `ext4 checkpoint` replays the empty log and
/// clears the mark. A clean unmount leaves the image the kernel's.
#[test]
fn a_logged_mount_keeps_the_kernel_off_from_its_start_to_its_unmount() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("log-mark");
    let (image, mnt, kernel) = (scratch.image("16M", "4096"), scratch.mnt(), scratch.0.join("kernel"));
    std::fs::create_dir_all(&kernel).unwrap();
    let refused = |step: &str| {
        let out = Command::new("/usr/sbin/e2fsck").arg("-fn").arg(&image).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && text.contains("unsupported feature"), "e2fsck {step}: {text}");
        let out = Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(&image).arg(&kernel).output().unwrap();
        let dmesg = Command::new("dmesg").output().unwrap();
        let dmesg = String::from_utf8_lossy(&dmesg.stdout);
        if out.status.success() {
            unmount_kernel(&kernel);
            panic!("the kernel mounted the image {step}");
        }
        assert!(
            dmesg.lines().rev().take(20).any(|l| l.contains("unsupported optional features (40000000)")),
            "the kernel names csumfs's log mark {step}: {}",
            dmesg.lines().rev().take(5).collect::<Vec<_>>().join("\n")
        );
    };
    let child = mount_foreground(&image, &mnt, &[]);
    let checked = std::panic::catch_unwind(|| refused("while a logged mount that changed nothing serves it"));
    kill_daemon(child, &mnt);
    checked.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    refused("after a kill -9 of a logged mount that changed nothing");
    let (ok, text) = csumkit(&["ext4".as_ref(), "checkpoint".as_ref(), image.as_os_str()]);
    assert!(ok, "ext4 checkpoint: {text}");
    e2fsck_clean(&image);
    assert!(kernel_mount(&image, &kernel, "loop"), "the kernel mounts it once checkpointed");
    unmount_kernel(&kernel);

    let child = mount_foreground(&image, &mnt, &[]);
    let checked = std::panic::catch_unwind(|| refused("while a logged mount serves it"));
    unmount_and_wait(child, &mnt);
    checked.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    e2fsck_clean(&image);
    assert!(kernel_mount(&image, &kernel, "loop"), "the kernel mounts it after a clean unmount");
    unmount_kernel(&kernel);
}

/// The other way round: while the kernel has an image mounted — through a
/// loop device, read-write or read-only, with a journal or without —
/// `csumkit mount` (logged or `log=off`) and `ext4 check --repair` refuse
/// it in one line naming the kernel's mount point; once the kernel unmounts
/// it csumfs mounts and writes it, and e2fsck judges it clean after. The
/// marks a read-write kernel mount leaves on disk are refused too (what a
/// kernel elsewhere, or one that stopped, leaves): `s_state` without
/// `EXT2_VALID_FS` (set here with debugfs) until e2fsck has checked it.
#[test]
fn an_image_the_kernel_has_mounted_is_not_written_until_it_is_unmounted() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("kernel-has-it");
    let (image, mnt, kernel) = (scratch.image("16M", "4096"), scratch.mnt(), scratch.0.join("kernel has it"));
    std::fs::create_dir_all(&kernel).unwrap();
    for (journal, options) in [("^has_journal", "loop"), ("has_journal", "loop"), ("has_journal", "loop,ro")] {
        let case = format!("{journal}, mount -o {options}");
        let out = Command::new("/usr/sbin/tune2fs").args(["-O", journal]).arg(&image).output().unwrap();
        assert!(out.status.success(), "tune2fs -O {journal}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(kernel_mount(&image, &kernel, options), "the kernel mounts it ({case})");
        let mounts: Vec<_> = [&[][..], &["-o", "log=off"][..]]
            .iter()
            .map(|options| {
                Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("mount").arg(&image).arg(&mnt).args(*options).output()
            })
            .collect();
        let repair =
            csumkit(&["ext4".as_ref(), "check".as_ref(), "--repair".as_ref(), "--yes".as_ref(), image.as_os_str()]);
        unmount_kernel(&kernel);
        let named = format!("the kernel has it mounted at {}", kernel.display());
        for out in mounts {
            let out = out.unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{case}: {stderr}");
            assert!(stderr.lines().count() == 1 && stderr.contains(&named), "{case}: {stderr}");
        }
        assert!(!repair.0 && repair.1.contains(&named), "{case}: {}", repair.1);
        let child = mount_foreground(&image, &mnt, &[]);
        let written = std::fs::write(mnt.join(format!("after-{journal}-{options}")), b"the kernel let go");
        unmount_and_wait(child, &mnt);
        written.unwrap();
        e2fsck_clean(&image);
    }
    let out = Command::new("/usr/sbin/tune2fs").args(["-O", "^has_journal"]).arg(&image).output().unwrap();
    assert!(out.status.success());
    let out = Command::new("/usr/sbin/debugfs").args(["-w", "-R", "ssv state 0"]).arg(&image).output().unwrap();
    assert!(out.status.success(), "debugfs: {}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("mount").arg(&image).arg(&mnt).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code() == Some(2) && stderr.contains("not clean"), "state 0: {stderr}");
    let repair =
        csumkit(&["ext4".as_ref(), "check".as_ref(), "--repair".as_ref(), "--yes".as_ref(), image.as_os_str()]);
    assert!(!repair.0 && repair.1.contains("not cleanly unmounted"), "state 0: {}", repair.1);
}

/// A `log=off` mount writes metadata in place, each operation all or
/// nothing through `IMAGE.undo`: while it runs, and after a kill -9 until
/// csumkit has put that log back, the image carries csumfs's undo mark —
/// e2fsck and the kernel refuse it (else e2fsck could repair a half
/// operation its own way, and the undo log's old bytes would then go over
/// that repair), `ext4 check` reads it as the undo log makes it, and `ext4
/// checkpoint` or the next mount (logged or not) finishes it; a clean
/// unmount leaves no mark.
#[test]
fn a_killed_log_off_mount_keeps_the_kernel_off_until_its_undo_log_is_put_back() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("undo-mark");
    let (image, mnt, kernel) = (scratch.image("16M", "4096"), scratch.mnt(), scratch.0.join("kernel"));
    std::fs::create_dir_all(&kernel).unwrap();
    let refused_by_e2fsck = || {
        let out = Command::new("/usr/sbin/e2fsck").arg("-fn").arg(&image).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        !out.status.success() && text.contains("unsupported feature")
    };
    let child = mount_foreground(&image, &mnt, &["-o", "log=off"]);
    let written = std::panic::catch_unwind(|| {
        std::fs::create_dir(mnt.join("d")).unwrap();
        std::fs::write(mnt.join("d/f"), b"written in place").unwrap();
        std::fs::File::open(mnt.join("d/f")).unwrap().sync_all().unwrap();
        assert!(refused_by_e2fsck(), "e2fsck refuses the image while a log=off mount writes it");
    });
    kill_daemon(child, &mnt);
    written.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    assert!(scratch.0.join("img.undo").exists(), "the undo log is kept");
    assert!(refused_by_e2fsck(), "e2fsck refuses the image a killed log=off mount left");
    let out = Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(&image).arg(&kernel).output().unwrap();
    let dmesg = Command::new("dmesg").output().unwrap();
    let dmesg = String::from_utf8_lossy(&dmesg.stdout);
    assert!(!out.status.success(), "the kernel mounted an image a killed log=off mount left");
    assert!(
        dmesg.lines().rev().take(20).any(|l| l.contains("unsupported optional features (20000000)")),
        "the kernel names csumfs's undo mark: {}",
        dmesg.lines().rev().take(5).collect::<Vec<_>>().join("\n")
    );
    let (ok, text) = csumkit(&["ext4".as_ref(), "ls".as_ref(), image.as_os_str(), "/".as_ref()]);
    assert!(!ok && text.contains("csumfs_undo") && text.contains("csumkit ext4 checkpoint"), "ext4 ls: {text}");
    let (ok, text) = csumkit(&["ext4".as_ref(), "check".as_ref(), image.as_os_str()]);
    assert!(ok && text.contains("checked as its undo log"), "ext4 check: {text}");
    let (ok, text) =
        csumkit(&["ext4".as_ref(), "check".as_ref(), "--repair".as_ref(), "--yes".as_ref(), image.as_os_str()]);
    assert!(!ok && text.contains("checkpoint"), "ext4 check --repair: {text}");

    let (ok, text) = csumkit(&["ext4".as_ref(), "checkpoint".as_ref(), image.as_os_str()]);
    assert!(ok && text.contains("undo log"), "ext4 checkpoint: {text}");
    e2fsck_clean(&image);
    assert!(kernel_mount(&image, &kernel, "loop"), "the kernel mounts it once the undo log is put back");
    let read = std::fs::read(kernel.join("d/f"));
    unmount_kernel(&kernel);
    assert_eq!(read.unwrap(), b"written in place");

    // Killed again; the next mount is a logged one: it finishes the undo
    // log first, and its unmount leaves the image the kernel's.
    let child = mount_foreground(&image, &mnt, &["-o", "log=off"]);
    let written = std::panic::catch_unwind(|| std::fs::write(mnt.join("g"), b"second").unwrap());
    kill_daemon(child, &mnt);
    written.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
    assert!(refused_by_e2fsck());
    let child = mount_foreground(&image, &mnt, &[]);
    let read = std::fs::read(mnt.join("d/f"));
    unmount_and_wait(child, &mnt);
    assert_eq!(read.unwrap(), b"written in place");
    e2fsck_clean(&image);

    // A clean log=off unmount leaves no mark.
    let child = mount_foreground(&image, &mnt, &["-o", "log=off"]);
    std::fs::write(mnt.join("h"), b"third").unwrap();
    unmount_and_wait(child, &mnt);
    e2fsck_clean(&image);
}

/// chattr +S and +D, `-o sync` and `-o dirsync`: a change they cover is
/// durable when its call returns, with no fsync — a kill -9 right after
/// keeps it; a change they do not cover, made after the last fsync, is
/// gone after the kill (the control: it shows the kill loses what was not
/// made durable, unless the 5 s commit came due meanwhile).
#[test]
fn synchronous_changes_survive_a_kill_without_fsync() {
    if cannot_mount() {
        return;
    }
    // (label, mount options, chattr +S on s and +D on d, s's append covered, control file covered)
    let modes: [(&str, &[&str], bool, bool, bool); 3] = [
        ("chattr +S/+D", &[], true, true, false),
        ("-o sync", &["-o", "sync"], false, true, true),
        ("-o dirsync", &["-o", "dirsync"], false, false, true),
    ];
    for (i, (label, options, marks, append_covered, control_covered)) in modes.into_iter().enumerate() {
        let scratch = Scratch::new(&format!("synchronous-{i}"));
        let (image, mnt) = (scratch.image("16M", "4096"), scratch.mnt());
        let child = mount_foreground(&image, &mnt, options);
        let made = std::panic::catch_unwind(|| {
            std::fs::write(mnt.join("s"), b"before\n").unwrap();
            std::fs::create_dir(mnt.join("d")).unwrap();
            if marks {
                set_inode_flags(&mnt.join("s"), inode_flags(&mnt.join("s")).unwrap() | 0x8).unwrap();
                set_inode_flags(&mnt.join("d"), inode_flags(&mnt.join("d")).unwrap() | 0x1_0000).unwrap();
            }
            std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
            let since = std::time::Instant::now();
            // The covered changes first: a sync makes everything before it
            // durable, covered or not.
            let append = || std::fs::OpenOptions::new().append(true).open(mnt.join("s"))?.write_all(b"after\n");
            let control = || std::fs::write(mnt.join("control"), b"");
            let new = || std::fs::write(mnt.join("d/new"), b"");
            let changes: [(bool, &dyn Fn() -> std::io::Result<()>); 3] =
                [(append_covered, &append), (true, &new), (control_covered, &control)];
            for covered in [true, false] {
                changes.iter().filter(|(c, _)| *c == covered).for_each(|(_, change)| change().unwrap());
            }
            since
        });
        // No fsync, no unmount.
        kill_daemon(child, &mnt);
        let since = made.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        let killed_after = since.elapsed();

        let child = mount_foreground(&image, &mnt, &[]);
        let seen = std::panic::catch_unwind(|| {
            (std::fs::read(mnt.join("s")).unwrap(), mnt.join("d/new").exists(), mnt.join("control").exists())
        });
        unmount_and_wait(child, &mnt);
        let (s, new, control) = seen.unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        assert!(new, "{label}: d/new, created in a synchronous directory, is there after the kill");
        if append_covered {
            assert_eq!(s, b"before\nafter\n", "{label}: the append to s is there after the kill");
        }
        if control_covered {
            assert!(control, "{label}: control is there after the kill");
        }
        // What nothing covered is gone — unless a commit came due (5 s).
        let uncovered = [(!append_covered).then_some(s == b"before\nafter\n"), (!control_covered).then_some(control)];
        if killed_after < std::time::Duration::from_secs(4) {
            assert!(uncovered.iter().flatten().all(|kept| !kept), "{label}: an uncovered change survived the kill");
        } else {
            eprintln!("{label}: SKIPPED the control: {killed_after:?} between the fsync and the kill");
        }
        e2fsck_clean(&image);
    }
}

#[test]
fn sigterm_and_sigint_unmount_and_exit_zero_and_the_default_is_a_daemon() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("signals");
    let image = scratch.image("16M", "4096");
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut child = mount_foreground(&image, &scratch.mnt(), &[]);
        std::fs::write(scratch.mnt().join(format!("written-before-{signal}")), b"kept").unwrap();
        // SAFETY: sending a signal to our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let status = exit_status(&mut child, &format!("the daemon to exit after signal {signal}"));
        assert!(status.success(), "after signal {signal}: {status}");
        assert!(!is_mounted(&scratch.mnt()), "still mounted after signal {signal}");
    }
    // Without -f the command returns once the mount is up.
    let out = Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("mount").arg(&image).arg(scratch.mnt()).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(is_mounted(&scratch.mnt()));
    assert_eq!(std::fs::read(scratch.mnt().join(format!("written-before-{}", libc::SIGTERM))).unwrap(), b"kept");
    assert!(Command::new("/usr/bin/fusermount3").arg("-u").arg(scratch.mnt()).status().unwrap().success());
    wait_for("the daemon to let go of the image", || {
        Command::new("/usr/sbin/e2fsck").arg("-fn").arg(&image).output().unwrap().status.success()
    });
    e2fsck_clean(&image);
}

#[test]
fn refusals_are_one_line_and_exit_2() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("refusals");
    let image = scratch.image("16M", "4096");
    let not_ext4 = scratch.0.join("zeros");
    std::fs::write(&not_ext4, vec![0u8; 1 << 20]).unwrap();
    let busy = mount_foreground(&image, &scratch.mnt(), &["-o", "ro"]);
    let (file, mnt) = (scratch.0.join("zeros"), scratch.mnt());
    let both = "sync,writeback_cache";
    let elsewhere = scratch.0.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    let empty = scratch.0.join("empty");
    std::fs::create_dir(&empty).unwrap();
    // scratch.0 holds the image: a mount there would hide it.
    let full = scratch.0.as_os_str();
    let cases: [(Vec<&std::ffi::OsStr>, &str); 9] = [
        // The image is in use (a read-only mount): no second writer.
        (vec![image.as_os_str(), elsewhere.as_os_str()], "open in another process"),
        (vec![not_ext4.as_os_str(), empty.as_os_str()], "not an ext4 image"),
        (vec![not_ext4.as_os_str(), full, "-o".as_ref(), "nonempty".as_ref()], "not an ext4 image"),
        (vec![image.as_os_str(), full], "is not empty: the mount would hide what it holds (give -o nonempty"),
        (vec![image.as_os_str(), empty.as_os_str(), "-o".as_ref(), both.as_ref()], "give one of them"),
        (vec![image.as_os_str(), mnt.as_os_str()], "busy"),
        (vec![image.as_os_str(), file.as_os_str()], "not a directory"),
        (vec![image.as_os_str(), empty.as_os_str(), "-o".as_ref(), "frobnicate".as_ref()], "unknown mount option"),
        (vec![image.as_os_str(), empty.as_os_str(), "-o".as_ref(), "threads=0".as_ref()], "threads=0"),
    ];
    let results: Vec<_> = cases
        .iter()
        .map(|(args, _)| Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("mount").args(args).output().unwrap())
        .collect();
    unmount_and_wait(busy, &scratch.mnt());
    for ((_, want), out) in cases.iter().zip(results) {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{want}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{want}: {stderr}");
        assert!(stderr.contains(want), "{want}: {stderr}");
    }
}

/// After a kill -9 the dead mount is still attached: mounting there again
/// and `--stats` say what to run, instead of "Transport endpoint is not
/// connected".
#[test]
fn a_dead_mount_is_named_with_its_remedy() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("dead-mount");
    let image = scratch.image("16M", "4096");
    let mut child = mount_foreground(&image, &scratch.mnt(), &[]);
    let mut f = std::fs::File::create(scratch.mnt().join("kept")).unwrap();
    f.write_all(b"in the log only").unwrap();
    f.sync_all().unwrap();
    drop(f);
    child.kill().unwrap();
    child.wait().unwrap();
    let again =
        Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("mount").arg(&image).arg(scratch.mnt()).output().unwrap();
    let stats =
        Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("mount").arg("--stats").arg(scratch.mnt()).output().unwrap();
    let _ = Command::new("/usr/bin/fusermount3").arg("-u").arg(scratch.mnt()).output();
    for (what, out) in [("mount", again), ("--stats", stats)] {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains("fusermount3 -u"), "{what}: {stderr}");
    }
    // Read-only, the image is served as its log makes it, and not written.
    let before = std::fs::read(&image).unwrap();
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "ro"]);
    let read = std::fs::read(scratch.mnt().join("kept"));
    unmount_and_wait(child, &scratch.mnt());
    assert_eq!(read.unwrap(), b"in the log only");
    assert!(std::fs::read(&image).unwrap() == before, "a read-only mount wrote the image");
    // The next read-write mount replays the log into the image.
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    let read = std::fs::read(scratch.mnt().join("kept"));
    unmount_and_wait(child, &scratch.mnt());
    assert_eq!(read.unwrap(), b"in the log only");
}

#[test]
fn a_flipped_data_byte_reads_as_eio_and_scrub_names_the_file_and_block() {
    use std::os::unix::fs::FileExt;
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("datasum");
    let image = scratch.image("32M", "4096");
    let data = pattern(100_000, 42);
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    std::fs::write(scratch.mnt().join("file"), &data).unwrap();
    std::fs::create_dir(scratch.mnt().join("d")).unwrap();
    std::fs::write(scratch.mnt().join("d/other"), b"untouched").unwrap();
    unmount_and_wait(child, &scratch.mnt());
    let scrub = || Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("scrub").arg(&image).output().unwrap();
    let clean = scrub();
    assert!(clean.status.success(), "{}", String::from_utf8_lossy(&clean.stdout));
    assert!(String::from_utf8_lossy(&clean.stdout).contains("26 verified against their checksum, 0 bad"));
    // Flip one byte of the file's block 5 in the image.
    let out = Command::new("/usr/sbin/debugfs").args(["-R", "bmap /file 5"]).arg(&image).output().unwrap();
    let block: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[(block * 4096 + 7) as usize] ^= 0x20;
    std::fs::write(&image, &bytes).unwrap();
    let bad = scrub();
    let text = String::from_utf8_lossy(&bad.stdout);
    assert_eq!(bad.status.code(), Some(1), "{text}");
    assert!(text.contains(&format!("/file: file block 5 (disk block {block}): data checksum mismatch")), "{text}");
    assert!(text.contains("1 bad"), "{text}");
    // Through the mount: EIO for that block, named on the daemon's stderr;
    // the rest of the file and the other file read; with datasum=off the
    // changed byte reads as it is.
    let log = scratch.0.join("daemon.log");
    let child = mount_foreground_logged(&image, &scratch.mnt(), &["-o", "ro"], &log);
    let read = std::fs::read(scratch.mnt().join("file"));
    let head = {
        use std::io::Read;
        let mut f = std::fs::File::open(scratch.mnt().join("file")).unwrap();
        let mut head = vec![0u8; 4 * 4096];
        f.read_exact(&mut head).map(|()| head)
    };
    let other = std::fs::read(scratch.mnt().join("d/other"));
    unmount_and_wait(child, &scratch.mnt());
    assert_eq!(read.unwrap_err().raw_os_error(), Some(libc::EIO));
    assert_eq!(head.unwrap(), data[..4 * 4096]);
    assert_eq!(other.unwrap(), b"untouched");
    let named = format!("block 5 (disk block {block}): data checksum");
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains(&named), "the daemon's stderr: {said}");
    // A write to part of the damaged block fails too, rather than checksum
    // the damage with the bytes it keeps; scrub still finds it.
    let child = mount_foreground_logged(&image, &scratch.mnt(), &[], &log);
    let f = std::fs::OpenOptions::new().write(true).open(scratch.mnt().join("file")).unwrap();
    let write = f.write_all_at(b"over the rest", 5 * 4096 + 1000);
    drop(f);
    unmount_and_wait(child, &scratch.mnt());
    assert_eq!(write.unwrap_err().raw_os_error(), Some(libc::EIO));
    let said = std::fs::read_to_string(&log).unwrap();
    assert!(said.contains(&named), "the daemon's stderr: {said}");
    let still = scrub();
    assert_eq!(still.status.code(), Some(1), "{}", String::from_utf8_lossy(&still.stdout));
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "ro,datasum=off"]);
    let read = std::fs::read(scratch.mnt().join("file"));
    unmount_and_wait(child, &scratch.mnt());
    let mut want = data.clone();
    want[5 * 4096 + 7] ^= 0x20;
    assert_eq!(read.unwrap(), want);
    // A read-write mount that does not keep the checksums (rewriting the
    // file) makes them stale: scrub refuses them rather than fail good data.
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "datasum=off"]);
    std::fs::write(scratch.mnt().join("file"), &data).unwrap();
    unmount_and_wait(child, &scratch.mnt());
    let stale = scrub();
    assert_eq!(stale.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&stale.stderr).contains("written since by another driver"));
}

/// Blocks written before a csumfs mount kept checksums (here: by mke2fs
/// -d) have none: scrub names the files it could not verify, and fails
/// when it verified nothing at all.
#[test]
fn scrub_names_what_it_could_not_verify_and_fails_on_nothing_verified() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("scrub-unchecked");
    let tree = scratch.0.join("tree");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("old"), pattern(40_960, 3)).unwrap();
    let image = scratch.0.join("img");
    let out = Command::new("/usr/sbin/mke2fs")
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal", "-b", "4096", "-d"])
        .arg(&tree)
        .arg(&image)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    let scrub = || Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("scrub").arg(&image).output().unwrap();
    // A mount starts the checksums; it writes nothing, so nothing is verifiable.
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    unmount_and_wait(child, &scratch.mnt());
    let nothing = scrub();
    let text = String::from_utf8_lossy(&nothing.stdout);
    assert_eq!(nothing.status.code(), Some(1), "{text}");
    assert!(text.contains("/old: 10 blocks without a checksum, not verified"), "{text}");
    assert!(text.contains("0 verified against their checksum, 0 bad, 10 without a checksum"), "{text}");
    assert!(text.contains("FAILED: no block had a checksum"), "{text}");
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    std::fs::write(scratch.mnt().join("new"), pattern(8192, 4)).unwrap();
    unmount_and_wait(child, &scratch.mnt());
    let some = scrub();
    let text = String::from_utf8_lossy(&some.stdout);
    assert!(some.status.success(), "{text}");
    assert!(text.contains("/old: 10 blocks without a checksum") && !text.contains("/new:"), "{text}");
    assert!(text.contains("2 files, 12 blocks read: 2 verified against their checksum, 0 bad, 10 without"), "{text}");
}

/// `ext4 checkpoint --log PATH` reads a log; it never creates one where
/// the user mistyped the path, nor cuts back a file that is not the
/// image's log.
#[test]
fn checkpoint_never_creates_or_cuts_the_log_it_is_pointed_at() {
    if !Path::new("/usr/sbin/mke2fs").exists() {
        common::skip("mke2fs (apt-get install e2fsprogs)");
        return;
    }
    let scratch = Scratch::new("checkpoint-log-path");
    let image = scratch.image("16M", "4096");
    let run = |log: &Path| {
        Command::new(env!("CARGO_BIN_EXE_csumkit"))
            .args(["ext4", "checkpoint", "--log"])
            .arg(log)
            .arg(&image)
            .output()
            .unwrap()
    };
    // Not marked: an unrelated file named as the log stays as it was.
    let other = scratch.0.join("other.bin");
    std::fs::write(&other, vec![7u8; 20 << 20]).unwrap();
    let out = run(&other);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing to do"));
    assert_eq!(std::fs::read(&other).unwrap(), vec![7u8; 20 << 20]);
    // Marked (a mount's log holds changes): a wrong path is named, not created.
    set_log_mark(&image, true);
    for typo in [scratch.0.join("typo.bytelog"), PathBuf::from("/nonexist")] {
        let out = run(&typo);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("is not at") && stderr.contains("-o log=PATH"), "{stderr}");
        assert!(!typo.exists(), "{} was created", typo.display());
    }
}

/// Flips one bit of the byte at `at` of the file at `path`.
fn flip_byte(path: &Path, at: u64) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x20], at).unwrap();
}

#[test]
fn on_a_pi_device_a_flipped_data_or_guard_byte_reads_as_eio_and_the_image_stays_plain_ext4() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("pi");
    let image = scratch.image("32M", "4096");
    let pi = PathBuf::from(format!("{}.pi", image.display()));
    let data = pattern(100_000, 7);
    let mut want = data.clone();
    for options in [&["-o", "pi"][..], &["-o", "pi,log=off"][..]] {
        let child = mount_foreground(&image, &scratch.mnt(), options);
        std::fs::write(scratch.mnt().join("file"), &data).unwrap();
        // An unaligned overwrite inside one block: the device's blocks at
        // either end are read, checked and written whole.
        let mut f = std::fs::OpenOptions::new().write(true).open(scratch.mnt().join("file")).unwrap();
        f.seek(SeekFrom::Start(5000)).unwrap();
        f.write_all(&pattern(3000, 8)).unwrap();
        f.sync_all().unwrap();
        drop(f);
        want[5000..8000].copy_from_slice(&pattern(3000, 8));
        std::fs::create_dir_all(scratch.mnt().join("d")).unwrap();
        std::fs::write(scratch.mnt().join("d/other"), b"untouched").unwrap();
        let (ok, stats) = csumkit(&["mount".as_ref(), "--stats".as_ref(), scratch.mnt().as_os_str()]);
        assert!(ok && stats.contains("PI offload: ") && stats.contains("no checksum tree"), "{stats}");
        unmount_and_wait(child, &scratch.mnt());
        e2fsck_clean(&image);
    }
    assert!(pi.exists() && !Path::new(&format!("{}.csums", image.display())).exists(), "PI instead of a checksum tree");
    let scrub = || {
        let out = Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("scrub").arg(&image).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.code(), text)
    };
    let (code, text) = scrub();
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("26 verified against their PI, 0 bad"), "{text}");

    let out = Command::new("/usr/sbin/debugfs").args(["-R", "bmap /file 5"]).arg(&image).output().unwrap();
    let block: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    // Bit rot in the data, then (the data restored) in block 6's guard:
    // IMAGE.pi holds a 4 KiB header, then 8 bytes per block, inverted.
    for (file, at, bad) in [(&image, block * 4096 + 7, 5), (&pi, 4096 + (block + 1) * 8, 6)] {
        flip_byte(file, at);
        let (code, text) = scrub();
        assert_eq!(code, Some(1), "{text}");
        let line = format!("/file: file block {bad} (disk block {}): PI check failed", block + bad - 5);
        assert!(text.contains(&line) && text.contains("1 bad"), "{text}");
        let child = mount_foreground(&image, &scratch.mnt(), &["-o", "ro,pi"]);
        let read = std::fs::read(scratch.mnt().join("file"));
        let other = std::fs::read(scratch.mnt().join("d/other"));
        unmount_and_wait(child, &scratch.mnt());
        assert_eq!(read.unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(other.unwrap(), b"untouched");
        flip_byte(file, at);
    }
    let (code, text) = scrub();
    assert_eq!(code, Some(0), "{text}");

    // The kernel reads the same bytes: the image is plain ext4.
    let kernel = scratch.0.join("kernel");
    if kernel_mount(&image, &kernel, "loop,ro") {
        let read = std::fs::read(kernel.join("file"));
        unmount_kernel(&kernel);
        assert_eq!(read.unwrap(), want);
    }

    // A mount that does not keep the PI makes it stale: scrub refuses it,
    // and the next pi mount starts it afresh (blocks unchecked until rewritten).
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "datasum=off"]);
    std::fs::write(scratch.mnt().join("d/other"), b"changed without PI").unwrap();
    unmount_and_wait(child, &scratch.mnt());
    let (code, text) = scrub();
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("this PI is stale"), "{text}");
    // A mount that keeps data checksums instead: scrub says the PI is not
    // used and verifies against the current checksums.
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    std::fs::write(scratch.mnt().join("d/other"), b"changed with checksums").unwrap();
    unmount_and_wait(child, &scratch.mnt());
    let (code, text) = scrub();
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("not used") && text.contains("verified against their checksum"), "{text}");
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "pi"]);
    let read = std::fs::read(scratch.mnt().join("d/other"));
    unmount_and_wait(child, &scratch.mnt());
    assert_eq!(read.unwrap(), b"changed with checksums");
    // Nothing carries PI yet: each file is named, and a scrub that verified nothing fails.
    let (code, text) = scrub();
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("0 verified against their PI") && text.contains("without a PI, not verified"), "{text}");
    assert!(text.contains("FAILED: no block had a PI"), "{text}");
}

/// At the largest file size (ext4's `s_maxbytes`, 2^32 - 1 blocks; the
/// FUSE mount's own limit is far larger), a write through the mount is
/// cut short, one starting there and a truncate past it are `EFBIG` — as
/// on the kernel's ext4 (csumfs's `files_end_where_the_kernels_largest_
/// file_ends` compares the two) — and the image stays clean.
#[test]
fn writes_stop_at_the_largest_file_size_as_on_ext4() {
    use std::os::unix::fs::FileExt;
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("largest");
    let image = scratch.image("16M", "4096");
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    let max = u64::from(u32::MAX) * 4096;
    let path = scratch.mnt().join("f");
    let f = std::fs::OpenOptions::new().create(true).truncate(true).write(true).open(&path).unwrap();
    // Page-aligned, so the kernel sends it whole (it splits at a partial page).
    assert_eq!(f.write_at(&[7u8; 8192], max - 4096).unwrap(), 4096, "cut short at the largest size");
    assert_eq!(f.write_at(b"ab", max - 1).unwrap(), 1, "cut short at the largest size");
    assert_eq!(f.write_at(b"a", max).unwrap_err().raw_os_error(), Some(libc::EFBIG));
    assert_eq!(f.set_len(max + 1).unwrap_err().raw_os_error(), Some(libc::EFBIG));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), max);
    drop(f);
    unmount_and_wait(child, &scratch.mnt());
    e2fsck_clean(&image);
}

/// An ACL in the VFS encoding: (tag, perm, id) entries.
fn vfs_acl(entries: &[(u16, u16, u32)]) -> Vec<u8> {
    let mut out = 2u32.to_le_bytes().to_vec();
    for &(tag, perm, id) in entries {
        out.extend_from_slice(&tag.to_le_bytes());
        out.extend_from_slice(&perm.to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
    }
    out
}

fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let (c, name) = (CString::new(path.as_os_str().as_bytes()).unwrap(), CString::new(name).unwrap());
    let mut value = vec![0u8; 1024];
    // SAFETY: valid path, name and buffer.
    let len = unsafe { libc::getxattr(c.as_ptr(), name.as_ptr(), value.as_mut_ptr().cast(), value.len()) };
    (len >= 0).then(|| value[..len as usize].to_vec())
}

fn set_xattr(path: &Path, name: &str, value: &[u8]) {
    let (c, name) = (CString::new(path.as_os_str().as_bytes()).unwrap(), CString::new(name).unwrap());
    // SAFETY: valid path, name and value of the given length.
    let rc = unsafe { libc::setxattr(c.as_ptr(), name.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(rc, 0, "setxattr {}: {}", path.display(), std::io::Error::last_os_error());
}

/// Under FUSE the kernel leaves ACL upkeep to the file system (csumfs's
/// acl.rs, proven against the kernel's ext4 in csumfs's tests/acl.rs):
/// through the mount, an access ACL sets the mode, `chmod` empties the
/// mask a named user's access goes through, and a file made in a directory
/// with a default ACL inherits it instead of the umask.
#[test]
fn acls_through_the_mount_keep_the_mode_in_step() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("acl");
    let image = scratch.image("16M", "4096");
    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    let (mnt, none) = (scratch.mnt(), u32::MAX);
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    let g = mnt.join("g");
    std::fs::write(&g, b"").unwrap();
    std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o644)).unwrap();
    let access = "system.posix_acl_access";
    set_xattr(&g, access, &vfs_acl(&[(1, 6, none), (2, 6, 1000), (4, 4, none), (0x10, 6, none), (0x20, 4, none)]));
    assert_eq!(mode(&g), 0o664, "the group bits are the mask's");
    std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o600)).unwrap();
    let want = vfs_acl(&[(1, 6, none), (2, 6, 1000), (4, 4, none), (0x10, 0, none), (0x20, 0, none)]);
    assert_eq!(xattr(&g, access), Some(want), "chmod 600: mask and other emptied");
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    set_xattr(
        &d,
        "system.posix_acl_default",
        &vfs_acl(&[(1, 7, none), (2, 7, 1000), (4, 5, none), (0x10, 7, none), (0x20, 0, none)]),
    );
    let made = Command::new("sh").args(["-c", "umask 077 && touch \"$1\"", "sh"]).arg(d.join("f")).status().unwrap();
    assert!(made.success());
    assert_eq!(mode(&d.join("f")), 0o660, "touch's 0666 narrowed by the default ACL, not the umask");
    let inherited = vfs_acl(&[(1, 6, none), (2, 7, 1000), (4, 5, none), (0x10, 6, none), (0x20, 0, none)]);
    assert_eq!(xattr(&d.join("f"), access), Some(inherited));
    unmount_and_wait(child, &mnt);
    e2fsck_clean(&image);
}

#[test]
fn an_acl_set_from_outside_the_files_group_clears_its_set_group_id_bit() {
    // As the kernel's ext4 does (posix_acl_update_mode): the caller's
    // groups, which FUSE does not pass, are read from /proc.
    if cannot_mount() || (!Path::new("/usr/bin/setfacl").exists() && skip("setfacl (apt-get install acl)")) {
        return;
    }
    let scratch = Scratch::new("acl-sgid");
    let image = scratch.image("16M", "4096");
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "allow_other,default_permissions"]);
    let mnt = scratch.mnt();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    for (name, groups, want) in [("out", "--clear-groups", 0o770), ("in", "--groups=0", 0o2770)] {
        let file = mnt.join(name);
        std::fs::write(&file, b"").unwrap();
        std::os::unix::fs::chown(&file, Some(1000), Some(0)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o2770)).unwrap();
        let set = Command::new("setpriv")
            .args(["--reuid=1000", "--regid=1000", groups, "setfacl", "--set", "u::rwx,u:1001:r,g::rwx,m::rwx,o::-"])
            .arg(&file)
            .status()
            .unwrap();
        assert!(set.success(), "setfacl as user 1000 ({groups})");
        assert_eq!(mode(&file), want, "{name}: user 1000 {groups}");
    }
    unmount_and_wait(child, &mnt);
    e2fsck_clean(&image);
}

/// An append-only file (`chattr +a`) is appended to through the kernel's
/// writeback cache — which rewrites the last page from its start, and
/// sends the file's mtime as a chosen time (refused, as a caller's would
/// be, it fails the fsync) — while
/// an open without `O_APPEND`, a truncate and chosen times stay `EPERM`;
/// e2fsck is clean and the kernel reads the appended bytes and the flag.
/// (Without the cache, tests/mount_syscalls.rs compares every refusal
/// with the kernel's.)
#[test]
fn an_append_only_file_is_appended_to_through_the_writeback_cache() {
    use std::os::unix::fs::OpenOptionsExt;
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("append-only");
    let image = scratch.image("16M", "4096");
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "writeback_cache"]);
    let log = scratch.mnt().join("log");
    let appended = std::panic::catch_unwind(|| {
        let mut want = b"first\n".to_vec();
        std::fs::write(&log, &want).unwrap();
        // An mtime long past: the appends must move it (the cache's mtime
        // reaching csumfs), though a caller's chosen times are refused.
        let past = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1000);
        std::fs::File::options().write(true).open(&log).unwrap().set_modified(past).unwrap();
        set_inode_flags(&log, inode_flags(&log).unwrap() | 0x20).unwrap();
        for i in 0..200 {
            let line = format!("line {i} {}\n", "x".repeat(i * 7 % 300));
            let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            file.write_all(line.as_bytes()).unwrap();
            if i % 50 == 49 {
                file.sync_all().unwrap();
            }
            want.extend_from_slice(line.as_bytes());
        }
        let refused = |r: std::io::Result<()>, what: &str| {
            assert_eq!(r.map_err(|e| e.raw_os_error()), Err(Some(libc::EPERM)), "{what}");
        };
        refused(std::fs::OpenOptions::new().write(true).open(&log).map(drop), "open without O_APPEND");
        let file = std::fs::OpenOptions::new().append(true).custom_flags(0).open(&log).unwrap();
        refused(file.set_len(0), "ftruncate");
        let chosen = std::fs::FileTimes::new().set_accessed(std::time::UNIX_EPOCH);
        refused(file.set_times(chosen), "chosen times");
        drop(file);
        assert_eq!(std::fs::read(&log).unwrap(), want);
        want
    });
    unmount_and_wait(child, &scratch.mnt());
    let want = appended.unwrap_or_else(|p| std::panic::resume_unwind(p));
    e2fsck_clean(&image);
    let kernel = scratch.0.join("kernel");
    if kernel_mount(&image, &kernel, "loop,ro") {
        let (read, flags) = (std::fs::read(kernel.join("log")), inode_flags(&kernel.join("log")));
        let mtime = std::fs::metadata(kernel.join("log")).map(|m| m.mtime());
        unmount_kernel(&kernel);
        assert_eq!(read.unwrap(), want);
        assert!(mtime.unwrap() > 1_000_000, "the appends' mtime reached the image");
        assert_eq!(flags.unwrap() & 0x20, 0x20, "append-only, as the kernel reads it");
    }
}

/// The reserved blocks are held back from unprivileged writers as the
/// kernel's ext4 holds them back (`ext4_has_free_clusters`): on twin
/// images, a user's file grows until the reserved blocks and ext4's
/// reserve are all that is left (`df`'s available reaches 0), root's
/// until only ext4's reserve is; both sizes and counts are the kernel's,
/// and e2fsck calls both images clean.
#[test]
fn the_reserved_blocks_are_held_back_from_users_as_on_ext4() {
    use std::os::unix::process::CommandExt;
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("reserved");
    let image = scratch.image("32M", "4096");
    let twin = scratch.0.join("twin");
    std::fs::copy(&image, &twin).unwrap();
    // (bytes the user's file reached, f_bavail then, bytes root's reached, f_bfree then)
    let fill = |root: &Path| {
        let shared = root.join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
        let dd = |to: &Path, user: bool| {
            let mut command = Command::new("dd");
            command.arg("if=/dev/zero").arg(format!("of={}", to.display())).args(["bs=64k", "status=none"]);
            if user {
                command.uid(1000).gid(1000);
            }
            let out = command.output().unwrap();
            let said = String::from_utf8_lossy(&out.stderr);
            assert!(said.contains("No space left on device"), "dd: {said}");
            std::fs::metadata(to).unwrap().len()
        };
        let user = dd(&shared.join("user"), true);
        let available = statvfs(root).f_bavail;
        let by_root = dd(&shared.join("root"), false);
        (user, available, by_root, statvfs(root).f_bfree)
    };
    let kernel = scratch.0.join("kernel");
    if !kernel_mount(&twin, &kernel, "loop") {
        return;
    }
    let theirs = std::panic::catch_unwind(|| fill(&kernel));
    unmount_kernel(&kernel);
    let theirs = theirs.unwrap_or_else(|p| std::panic::resume_unwind(p));
    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "allow_other"]);
    let ours = std::panic::catch_unwind(|| fill(&scratch.mnt()));
    unmount_and_wait(child, &scratch.mnt());
    let ours = ours.unwrap_or_else(|p| std::panic::resume_unwind(p));
    eprintln!("reserved blocks, (user bytes, f_bavail, root bytes, f_bfree): kernel {theirs:?}, csumfs {ours:?}");
    e2fsck_clean(&image);
    e2fsck_clean(&twin);
    // Equal in every run seen but the kernel's f_bavail, once 5 for 6 (a
    // block its writeback took after the refusal): a dd block's leeway
    // for sizes, two blocks for counts.
    let near = |a: u64, b: u64, by: u64| a.abs_diff(b) <= by;
    let (k, c) = (theirs, ours);
    assert!(
        near(c.0, k.0, 65_536) && near(c.1, k.1, 2) && near(c.2, k.2, 65_536) && near(c.3, k.3, 2),
        "(user bytes, f_bavail, root bytes, f_bfree): csumfs {ours:?}, the kernel {theirs:?}"
    );
    assert!(ours.2 > 0 && ours.3 > 0, "root takes the reserved blocks but leaves ext4's reserve: {ours:?}");
}

/// `debugfs -R dump_mmp`'s sequence line of `image` ("sequence: ff4d4d50"
/// when closed cleanly); read from the file where debugfs refuses the
/// image (marked by csumfs while a `log=off` mount writes it), at the
/// block debugfs names once it takes the image again.
fn mmp_sequence(image: &Path) -> String {
    use std::os::unix::fs::FileExt;
    let out = Command::new("/usr/sbin/debugfs").args(["-R", "dump_mmp"]).arg(image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if let Some(line) = text.lines().find(|l| l.starts_with("sequence:")) {
        return line.to_string();
    }
    let file = std::fs::File::open(image).unwrap();
    let mut sb = [0u8; 1024];
    file.read_exact_at(&mut sb, 1024).unwrap();
    let block_size = 1024u64 << u32::from_le_bytes(sb[0x18..0x1C].try_into().unwrap());
    let block = u64::from_le_bytes(sb[0x168..0x170].try_into().unwrap());
    let mut seq = [0u8; 4];
    file.read_exact_at(&mut seq, block * block_size + 4).unwrap();
    format!("sequence: {:08x}", u32::from_le_bytes(seq))
}

/// Sets or clears csumfs's log mark (`LOG_PENDING`) in `image`'s
/// superblock on disk, re-sealing it.
fn set_log_mark(image: &Path, on: bool) {
    use std::os::unix::fs::FileExt;
    let file = std::fs::OpenOptions::new().read(true).write(true).open(image).unwrap();
    let mut sb = [0u8; 1024];
    file.read_exact_at(&mut sb, 1024).unwrap();
    let incompat = u32::from_le_bytes(sb[0x60..0x64].try_into().unwrap());
    let incompat = if on { incompat | csumfs::LOG_PENDING } else { incompat & !csumfs::LOG_PENDING };
    sb[0x60..0x64].copy_from_slice(&incompat.to_le_bytes());
    let crc = csumkit::crc32c::raw_update(!0, &sb[..0x3FC]);
    sb[0x3FC..].copy_from_slice(&crc.to_le_bytes());
    file.write_all_at(&sb, 1024).unwrap();
    file.sync_data().unwrap();
}

/// An image made with `mke2fs -O mmp` (ext4's multiple-mount protection):
/// while csumfs has it mounted the kernel refuses a read-write mount — for
/// csumfs's log mark, and with that mark taken off the disk for the MMP
/// block, naming csumfs's process as the holder (dmesg); csumfs after a
/// kill -9 waits out the stale sequence, mounts and replays; a clean
/// unmount leaves the sequence `CLEAN` (debugfs), so the kernel mounts at
/// once; while the kernel holds it (from another mount namespace, standing
/// in for another node), csumfs refuses in one line. e2fsck judges the
/// image clean after. The same at 1 KiB blocks: held while mounted,
/// `CLEAN` after, the kernel's to read.
#[test]
fn an_mmp_image_is_written_by_one_node_at_a_time_csumfs_or_the_kernel() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("mmp");
    let image = scratch.0.join("mmp.img");
    let mke2fs = |block_size: &str| {
        let out = Command::new("/usr/sbin/mke2fs")
            .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal,mmp", "-b", block_size])
            .arg(&image)
            .arg("32M")
            .output()
            .unwrap();
        assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    };
    mke2fs("4096");
    let (mnt, kernel) = (scratch.mnt(), scratch.0.join("kernel"));
    std::fs::create_dir_all(&kernel).unwrap();
    let clean = "sequence: ff4d4d50";
    assert_eq!(mmp_sequence(&image), clean);
    let first = mount_foreground(&image, &mnt, &[]);
    let pid = first.id();
    assert_ne!(mmp_sequence(&image), clean, "csumfs holds the image");
    let kernel_refusal = |step: &str, says: &str| {
        let out = Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(&image).arg(&kernel).output().unwrap();
        let dmesg = Command::new("dmesg").output().unwrap();
        let dmesg = String::from_utf8_lossy(&dmesg.stdout);
        assert!(!out.status.success(), "the kernel mounted an image csumfs writes ({step})");
        assert!(
            dmesg.lines().rev().take(200).any(|l| l.contains(says)),
            "the kernel's refusal ({step}) says {says:?}: {}",
            dmesg.lines().rev().take(10).collect::<Vec<_>>().join("\n")
        );
    };
    // The mount's log mark, an incompat bit, is met first; without it (as
    // the image stands between a checkpoint's superblock writes, say) the
    // MMP block keeps the kernel off on its own.
    kernel_refusal("the log mark", "unsupported optional features (40000000)");
    set_log_mark(&image, false);
    kernel_refusal("the MMP block", &format!("last update device: csumfs pid {pid}"));
    set_log_mark(&image, true);
    std::fs::write(mnt.join("f"), b"written under mmp").unwrap();
    std::fs::File::open(mnt.join("f")).unwrap().sync_all().unwrap();
    kill_daemon(first, &mnt);
    assert_ne!(mmp_sequence(&image), clean, "a killed daemon leaves its sequence");
    let start = std::time::Instant::now();
    let second = mount_foreground(&image, &mnt, &[]);
    assert!(start.elapsed().as_secs() >= 22, "a stale sequence is waited out twice");
    assert_eq!(std::fs::read(mnt.join("f")).unwrap(), b"written under mmp");
    unmount_and_wait(second, &mnt);
    assert_eq!(mmp_sequence(&image), clean, "a clean unmount");
    // The kernel mounts it in a mount namespace of its own, where csumfs's
    // scan for the kernel's loop mounts (which names a mount on this
    // machine first) does not see it — as it would not see another node's:
    // the MMP block alone keeps csumfs off.
    use std::io::BufRead;
    let script = "mount -t ext4 -o loop \"$0\" \"$1\" && cat \"$1/f\" && echo && read _; umount \"$1\"";
    let mut node = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", script])
        .arg(&image)
        .arg(&kernel)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let read = std::io::BufReader::new(node.stdout.take().unwrap()).lines().next();
    let out = Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("mount").arg(&image).arg(&mnt).output().unwrap();
    drop(node.stdin.take());
    assert!(node.wait().unwrap().success(), "the other namespace's kernel mount and unmount");
    assert_eq!(
        read.map(Result::unwrap).as_deref(),
        Some("written under mmp"),
        "the kernel mounts a cleanly closed image"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let refusal: Vec<_> = stderr.lines().filter(|l| !l.contains("waiting")).collect();
    assert!(refusal.len() == 1 && refusal[0].contains("in use by another node"), "{stderr}");
    e2fsck_clean(&image);
    assert_eq!(mmp_sequence(&image), clean, "the kernel's unmount");
    mke2fs("1024");
    let third = mount_foreground(&image, &mnt, &[]);
    std::fs::write(mnt.join("f"), b"1 KiB blocks").unwrap();
    std::fs::create_dir(mnt.join("d")).unwrap();
    assert_ne!(mmp_sequence(&image), clean, "csumfs holds the 1 KiB-block image");
    unmount_and_wait(third, &mnt);
    assert_eq!(mmp_sequence(&image), clean, "a clean unmount at 1 KiB blocks");
    assert!(kernel_mount(&image, &kernel, "loop"), "the kernel mounts it after");
    let read = std::fs::read(kernel.join("f"));
    unmount_kernel(&kernel);
    assert_eq!(read.unwrap(), b"1 KiB blocks");
    e2fsck_clean(&image);
}

/// Files with holes where ext4 keeps them: sparse writes, fallocated
/// (unwritten) ranges — inside the size and past it — a punched range, a
/// file of nothing but a hole, an inline one.
fn make_sparse_files(dir: &Path, bs: u64) {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::FileExt;
    let file = |name: &str| {
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(dir.join(name)).unwrap()
    };
    let fallocate = |f: &std::fs::File, mode: i32, at: u64, len: u64| {
        // SAFETY: a valid descriptor; fallocate reads no memory of ours.
        let done = unsafe { libc::fallocate(f.as_raw_fd(), mode, at as i64, len as i64) };
        assert_eq!(done, 0, "fallocate {mode} {at} {len}: {}", std::io::Error::last_os_error());
    };
    let block = pattern(bs as usize, 3);
    file("dense").write_all_at(&pattern(3 * bs as usize + 100, 4), 0).unwrap();
    let f = file("sparse");
    f.write_all_at(&block, 2 * bs).unwrap();
    f.write_all_at(&block[..100], 7 * bs).unwrap();
    f.set_len(12 * bs + 5).unwrap();
    let f = file("fallocated");
    fallocate(&f, 0, 0, 5 * bs);
    f.write_all_at(&block, 2 * bs).unwrap();
    fallocate(&f, libc::FALLOC_FL_KEEP_SIZE, 8 * bs, 4 * bs);
    let f = file("unwritten-tail");
    f.write_all_at(&block, 0).unwrap();
    fallocate(&f, 0, bs, 3 * bs);
    let f = file("punched");
    f.write_all_at(&pattern(6 * bs as usize, 5), 0).unwrap();
    f.sync_all().unwrap();
    fallocate(&f, libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 2 * bs, 2 * bs);
    file("hole-only").set_len(1 << 20).unwrap();
    file("unaligned").write_all_at(b"0123456789", 5000).unwrap();
    file("tiny").write_all_at(b"thirty bytes, kept in the inode", 0).unwrap();
    drop(file("empty"));
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
}

/// An offset, and what `SEEK_DATA` and `SEEK_HOLE` from it gave.
type SeekRow = (u64, Result<i64, i32>, Result<i64, i32>);

/// `lseek(SEEK_DATA)` and `lseek(SEEK_HOLE)` of every file in `dir` at
/// offsets around every block boundary and the size: the offset, or the
/// errno.
fn seek_answers(dir: &Path, bs: u64) -> BTreeMap<String, Vec<SeekRow>> {
    use std::os::fd::AsRawFd;
    let mut answers = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !entry.file_type().unwrap().is_file() {
            continue;
        }
        // Not read: ext4 counts unwritten blocks whose pages are cached as data.
        let f = std::fs::File::open(entry.path()).unwrap();
        let size = f.metadata().unwrap().len();
        let mut offsets: Vec<u64> = (0..=14).flat_map(|k| [k * bs, k * bs + 1, (k * bs).saturating_sub(1)]).collect();
        offsets.extend([size.saturating_sub(1), size, size + 1, (1 << 20) - 1, 1 << 20, 5000, 5010]);
        offsets.sort_unstable();
        offsets.dedup();
        let seek = |at: u64, whence: i32| {
            // SAFETY: a valid descriptor.
            let got = unsafe { libc::lseek(f.as_raw_fd(), at as i64, whence) };
            if got < 0 {
                Err(std::io::Error::last_os_error().raw_os_error().unwrap())
            } else {
                Ok(got)
            }
        };
        let rows = offsets.into_iter().map(|at| (at, seek(at, libc::SEEK_DATA), seek(at, libc::SEEK_HOLE))).collect();
        answers.insert(name, rows);
    }
    answers
}

/// SEEK_DATA and SEEK_HOLE through the mount give what the kernel's ext4
/// gives on the same image — files written by the kernel, then by csumfs;
/// 1 and 4 KiB blocks, inline data on — offset for offset, errno for errno
/// (before csumfs answered them, FUSE called every file all data).
#[test]
fn seek_data_and_seek_hole_answer_as_the_kernel_does() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("seek");
    let (mnt, kernel) = (scratch.mnt(), scratch.0.join("kernel"));
    let image = scratch.0.join("seek.img");
    for bs in [4096u64, 1024] {
        for writer in ["kernel", "csumfs"] {
            let out = Command::new("/usr/sbin/mke2fs")
                .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,^has_journal,inline_data", "-b"])
                .arg(bs.to_string())
                .arg(&image)
                .arg("32M")
                .output()
                .unwrap();
            assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
            if writer == "kernel" {
                if !kernel_mount(&image, &kernel, "loop") {
                    return;
                }
                make_sparse_files(&kernel, bs);
                unmount_kernel(&kernel);
            } else {
                let child = mount_foreground(&image, &mnt, &[]);
                make_sparse_files(&mnt, bs);
                unmount_and_wait(child, &mnt);
            }
            assert!(kernel_mount(&image, &kernel, "loop,ro"));
            let want = seek_answers(&kernel, bs);
            unmount_kernel(&kernel);
            let child = mount_foreground(&image, &mnt, &["-o", "ro"]);
            let got = seek_answers(&mnt, bs);
            unmount_and_wait(child, &mnt);
            assert_eq!(want.len(), 9, "{want:?}");
            for (name, rows) in &want {
                for (w, g) in rows.iter().zip(&got[name]) {
                    assert_eq!(w, g, "{bs}-byte blocks, written by {writer}: {name} (offset, SEEK_DATA, SEEK_HOLE)");
                }
            }
        }
    }
}

/// `copy_file_range(2)` of `len` bytes: the count copied, or the errno.
fn copy_range(from: &std::fs::File, at: i64, to: &std::fs::File, to_at: i64, len: usize) -> Result<usize, i32> {
    use std::os::fd::AsRawFd;
    let (mut at, mut to_at) = (at, to_at);
    // SAFETY: valid descriptors and offsets the call updates.
    let n = unsafe { libc::copy_file_range(from.as_raw_fd(), &mut at, to.as_raw_fd(), &mut to_at, len, 0) };
    if n < 0 {
        Err(std::io::Error::last_os_error().raw_os_error().unwrap())
    } else {
        Ok(n as usize)
    }
}

/// The unmounted image judged: e2fsck clean, scrub clean (every copy has
/// its checksums), and each file of `model` read back so by the kernel.
fn judged_with_files(scratch: &Scratch, image: &Path, model: &BTreeMap<&str, Vec<u8>>) {
    e2fsck_clean(image);
    let scrub = Command::new(env!("CARGO_BIN_EXE_csumkit")).arg("scrub").arg(image).output().unwrap();
    assert!(scrub.status.success(), "{}", String::from_utf8_lossy(&scrub.stdout));
    let kernel = scratch.0.join("kernel");
    if kernel_mount(image, &kernel, "loop,ro") {
        let read: Vec<_> = model.keys().map(|name| std::fs::read(kernel.join(name)).unwrap()).collect();
        unmount_kernel(&kernel);
        for ((name, want), got) in model.iter().zip(read) {
            assert!(got == *want, "{name} read by the kernel");
        }
    }
}

/// `copy_file_range` through the mount, done in the daemon: whole files,
/// unaligned ranges, a length past the source's end (short), from its end
/// (0), within one file, past the destination's end (a hole before it) —
/// each checked against a model, then the image judged by e2fsck, scrub
/// (the copies have their own checksums) and the kernel's reads. A damaged
/// source block fails the copy with `EIO`, nothing copied over it.
#[test]
fn copy_file_range_copies_as_a_model_says_and_refuses_damage() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("copy-range");
    let image = scratch.image("64M", "4096");
    let mnt = scratch.mnt();
    let child = mount_foreground(&image, &mnt, &[]);
    let src_bytes = pattern((3 << 20) + 123, 9);
    std::fs::write(mnt.join("src"), &src_bytes).unwrap();
    let open = |name: &str| {
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(false).open(mnt.join(name)).unwrap()
    };
    let copy = copy_range;
    let mut model: BTreeMap<&str, Vec<u8>> = BTreeMap::new();
    let mut apply = |name: &'static str, at: usize, bytes: &[u8]| {
        let file = model.entry(name).or_default();
        if file.len() < at + bytes.len() {
            file.resize(at + bytes.len(), 0);
        }
        file[at..at + bytes.len()].copy_from_slice(bytes);
    };
    apply("src", 0, &src_bytes);
    let src = open("src");
    let (whole, odd, past) = (open("whole"), open("odd"), open("past"));
    assert_eq!(copy(&src, 0, &whole, 0, src_bytes.len()), Ok(src_bytes.len()));
    apply("whole", 0, &src_bytes);
    assert_eq!(copy(&src, 5000, &odd, 777, (1 << 20) + 3), Ok((1 << 20) + 3));
    apply("odd", 777, &src_bytes[5000..5000 + (1 << 20) + 3]);
    let tail = src_bytes.len() - 100;
    assert_eq!(copy(&src, tail as i64, &odd, 0, 4096), Ok(100), "cut at the source's end");
    apply("odd", 0, &src_bytes[tail..]);
    assert_eq!(copy(&src, src_bytes.len() as i64, &odd, 0, 10), Ok(0), "from the source's end");
    assert_eq!(copy(&src, 0, &src, 4 << 20, 8192 + 5), Ok(8197), "within one file, past its end");
    apply("src", 4 << 20, &src_bytes[..8197]);
    assert_eq!(copy(&src, 100, &past, 9 << 20, 4096), Ok(4096), "a hole before it");
    apply("past", 9 << 20, &src_bytes[100..4196]);
    drop((src, whole, odd, past));
    for (name, want) in &model {
        assert!(std::fs::read(mnt.join(name)).unwrap() == *want, "{name} through the mount");
    }
    unmount_and_wait(child, &mnt);
    judged_with_files(&scratch, &image, &model);
    // One flipped byte in the source's block 3: the copy fails there.
    let out = Command::new("/usr/sbin/debugfs").args(["-R", "bmap /src 3"]).arg(&image).output().unwrap();
    let block: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[(block * 4096 + 9) as usize] ^= 1;
    std::fs::write(&image, &bytes).unwrap();
    let child = mount_foreground(&image, &mnt, &[]);
    let (src, damaged) = (open("src"), open("from-damaged"));
    let result = copy(&src, 0, &damaged, 0, 1 << 20);
    let size = damaged.metadata().unwrap().len();
    drop((src, damaged));
    unmount_and_wait(child, &mnt);
    assert_eq!(result, Err(libc::EIO));
    assert_eq!(size, 0, "nothing copied");
}

/// `copy_file_range` at a full filesystem copies what fits, at most, and
/// leaves the rest of the destination as it was: its bytes read back
/// through the mount and by the kernel, scrub and `e2fsck -fn` clean.
#[test]
fn copy_file_range_at_a_full_filesystem_changes_only_what_it_copied() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("copy-range-full");
    let image = scratch.image("16M", "4096");
    let mnt = scratch.mnt();
    let child = mount_foreground(&image, &mnt, &[]);
    let (src_bytes, old) = (pattern(2 << 20, 3), pattern(8192, 4));
    std::fs::write(mnt.join("src"), &src_bytes).unwrap();
    std::fs::write(mnt.join("dst"), &old).unwrap();
    let out = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", mnt.join("fill").display()))
        .args(["bs=64k", "status=none"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("No space left on device"), "dd filled the filesystem");
    let (src, dst) = (
        std::fs::File::open(mnt.join("src")).unwrap(),
        std::fs::OpenOptions::new().write(true).open(mnt.join("dst")).unwrap(),
    );
    let copied = match copy_range(&src, 0, &dst, 8192, src_bytes.len()) {
        Err(errno) => {
            assert_eq!(errno, libc::ENOSPC);
            0
        }
        Ok(n) => {
            assert!(n < src_bytes.len(), "a full filesystem took all {n} bytes");
            n
        }
    };
    drop((src, dst));
    let want = [&old[..], &src_bytes[..copied]].concat();
    assert!(std::fs::read(mnt.join("dst")).unwrap() == want, "dst through the mount ({copied} bytes copied)");
    unmount_and_wait(child, &mnt);
    judged_with_files(&scratch, &image, &BTreeMap::from([("dst", want)]));
}

/// A listing with a damaged inode in it: the kernel lists directories with
/// READDIRPLUS (each entry's attributes in the listing); the damaged one is
/// still listed, and its stat fails with the damage named (`EBADMSG`: its
/// checksum), while its neighbours stat as they are — as a plain listing
/// and a lookup each gave before.
#[test]
fn a_listing_names_a_damaged_inode_and_its_stat_fails() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("damaged-inode");
    let image = scratch.image("16M", "4096");
    let mnt = scratch.mnt();
    let child = mount_foreground(&image, &mnt, &[]);
    for name in ["a", "b", "c"] {
        std::fs::write(mnt.join(name), name.repeat(100)).unwrap();
    }
    unmount_and_wait(child, &mnt);
    let out = Command::new("/usr/sbin/debugfs").args(["-R", "stat /b"]).arg(&image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let ino: u32 = text.split_whitespace().nth(1).unwrap().parse().unwrap();
    let out = Command::new("/usr/sbin/debugfs").args(["-R", &format!("imap <{ino}>")]).arg(&image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let words: Vec<&str> = text.split_whitespace().collect();
    let block: u64 =
        words[words.iter().rposition(|w| *w == "block").unwrap() + 1].trim_end_matches(',').parse().unwrap();
    let offset = u64::from_str_radix(words.last().unwrap().trim_start_matches("0x"), 16).unwrap();
    let mut bytes = std::fs::read(&image).unwrap();
    bytes[(block * 4096 + offset + 0x20) as usize] ^= 0x40; // i_mtime: only the checksum tells
    std::fs::write(&image, &bytes).unwrap();
    let child = mount_foreground(&image, &mnt, &["-o", "ro"]);
    let mut names: Vec<String> =
        std::fs::read_dir(&mnt).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    let stats: Vec<_> = ["a", "b", "c"].iter().map(|n| std::fs::symlink_metadata(mnt.join(n))).collect();
    unmount_and_wait(child, &mnt);
    names.sort();
    assert_eq!(names, ["a", "b", "c", "lost+found"]);
    assert_eq!(stats[0].as_ref().unwrap().len(), 100);
    assert_eq!(stats[1].as_ref().unwrap_err().raw_os_error(), Some(libc::EBADMSG), "{:?}", stats[1]);
    assert_eq!(stats[2].as_ref().unwrap().len(), 100);
}

/// An image the kernel left needing recovery (csumkit's
/// `tests/data/jbd2/fastcommit-noflush-4k`: full transactions and fast
/// commits in its journal): `mount -o ro` serves it recovered in memory —
/// the file the last fast commit made is there, and the image file is
/// unchanged; a read-write mount recovers it in place first, and after its
/// unmount e2fsck finds it clean and the kernel reads both files.
#[test]
fn an_image_the_kernel_left_needing_recovery_mounts_recovered() {
    if cannot_mount() {
        return;
    }
    let scratch = Scratch::new("recover");
    let image = scratch.0.join("img");
    let packed = Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/jbd2/fastcommit-noflush-4k.img.gz");
    let out = Command::new("gzip").arg("-dc").arg(&packed).output().unwrap();
    assert!(out.status.success());
    std::fs::write(&image, &out.stdout).unwrap();

    let child = mount_foreground(&image, &scratch.mnt(), &["-o", "ro"]);
    let read = std::panic::catch_unwind(|| std::fs::read(scratch.mnt().join("d/sub/g")).unwrap());
    unmount_and_wait(child, &scratch.mnt());
    assert_eq!(read.unwrap_or_else(|p| std::panic::resume_unwind(p)), b"inside\n");
    assert!(std::fs::read(&image).unwrap() == out.stdout, "a read-only mount changed the image");

    let child = mount_foreground(&image, &scratch.mnt(), &[]);
    let written = std::panic::catch_unwind(|| {
        assert_eq!(std::fs::read(scratch.mnt().join("d/sub/g")).unwrap(), b"inside\n");
        std::fs::write(scratch.mnt().join("d/sub/after"), b"written after the recovery").unwrap();
    });
    unmount_and_wait(child, &scratch.mnt());
    written.unwrap_or_else(|p| std::panic::resume_unwind(p));
    e2fsck_clean(&image);
    let at = scratch.0.join("kernel");
    std::fs::create_dir_all(&at).unwrap();
    if kernel_mount(&image, &at, "loop,ro") {
        let g = std::fs::read(at.join("d/sub/g"));
        let after = std::fs::read(at.join("d/sub/after"));
        unmount_kernel(&at);
        assert_eq!(g.unwrap(), b"inside\n");
        assert_eq!(after.unwrap(), b"written after the recovery");
    }
}

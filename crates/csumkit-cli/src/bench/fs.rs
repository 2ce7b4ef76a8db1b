//! `csumkit bench fs`: whole filesystems side by side in one run, each on
//! an image of its own in the same directory — csumfs through `csumkit
//! mount` (all on; without data checksums; with its ByteLog on /dev/shm,
//! the stand-in for persistent memory; with the techniques off:
//! `csum=full,datasum=off,log=off`; through /dev/fuse where FUSE over
//! io_uring is on), e2fsprogs' `fuse2fs`,
//! and the kernel's ext4 on a loop device (journal, and `fast_commit`).
//! Workloads are ordinary file calls on the mountpoint:
//! (1) create + 4 KiB write + fsync + unlink (and (1') with 100 B), (2) 1 MiB sequential writes,
//! (3) 4 KiB random writes (csumfs with its data integrity in the PI of an
//! emulated device instead of a checksum tree: PI offload), (4) `ls -lR` with an ACL probe per file after a
//! remount (cold), (5) fallocate of a large file. Bytes written to the disk
//! under the images are read from /sys/dev/block for (1) and (3).
//! Needs root, /dev/fuse, fuse2fs, e2fsprogs; a system that cannot be
//! mounted here is listed as skipped with the reason.

use super::machine_line;
use super::table::{num, Table};
use clap::Args;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct FsArgs {
    /// Work directory for the images (default: the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Block sizes to run (the kernel runs at 4 KiB only).
    #[arg(long, value_delimiter = ',', default_values_t = [4096u32, 65536])]
    block_sizes: Vec<u32>,
    /// A reduced run for CI (fewer operations, smaller files).
    #[arg(long)]
    quick: bool,
    /// Only these systems (default: all), by key: csumfs-journal, csumfs-fast-commit, csumfs-bytelog, csumfs, csumfs-pi,
    /// csumfs-datasum-off, csumfs-pmem-log, csumfs-full, csumfs-dev-fuse, fuse2fs, kernel,
    /// kernel-fast-commit.
    #[arg(long, value_delimiter = ',', value_parser = System::parse)]
    systems: Vec<System>,
    /// Only these workloads (default: all), by number 1–5; the others'
    /// cells read "-". (1) takes its 100 B and 15-job forms with it.
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u8).range(1..=5))]
    workloads: Vec<u8>,
}

pub fn run(args: &FsArgs) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("csumkit bench fs: {e}");
            ExitCode::from(2)
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum System {
    /// The default: commits in the image's own jbd2 journal.
    CsumfsJournal,
    /// The default on a fast_commit image: fsyncs as kernel fast commits.
    CsumfsFastCommit,
    /// `-o bytelog` on a fast_commit image: the ByteLog in its fast-commit area.
    CsumfsByteLog,
    /// A journal-less image: commits in the ByteLog file beside it.
    Csumfs,
    CsumfsPi,
    CsumfsNoDatasum,
    CsumfsPmemLog,
    CsumfsFull,
    /// csumfs with `uring=off`: its requests through `/dev/fuse`.
    CsumfsDevFuse,
    Fuse2fs,
    Kernel,
    KernelFastCommit,
}

impl System {
    const ALL: [System; 12] = [
        System::CsumfsJournal,
        System::CsumfsFastCommit,
        System::CsumfsByteLog,
        System::Csumfs,
        System::CsumfsDevFuse,
        System::CsumfsPi,
        System::CsumfsNoDatasum,
        System::CsumfsPmemLog,
        System::CsumfsFull,
        System::Fuse2fs,
        System::Kernel,
        System::KernelFastCommit,
    ];

    fn name(self) -> &'static str {
        match self {
            System::CsumfsJournal => "csumfs (jbd2 journal in the image)",
            System::CsumfsFastCommit => "csumfs fast_commit (+ kernel fast commits)",
            System::CsumfsByteLog => "csumfs bytelog (ByteLog in a 16 MiB fast-commit area)",
            System::Csumfs => "csumfs ByteLog file (no journal)",
            System::CsumfsPi => "csumfs pi=4096+8 (PI, no checksum tree)",
            System::CsumfsNoDatasum => "csumfs datasum=off",
            System::CsumfsPmemLog => "csumfs log on /dev/shm (pmem stand-in)",
            System::CsumfsFull => "csumfs csum=full,datasum=off,log=off",
            System::CsumfsDevFuse => "csumfs uring=off (requests through /dev/fuse)",
            System::Fuse2fs => "fuse2fs",
            System::Kernel => "kernel ext4 (journal)",
            System::KernelFastCommit => "kernel ext4 fast_commit",
        }
    }

    fn key(self) -> &'static str {
        match self {
            System::CsumfsJournal => "csumfs-journal",
            System::CsumfsFastCommit => "csumfs-fast-commit",
            System::CsumfsByteLog => "csumfs-bytelog",
            System::Csumfs => "csumfs",
            System::CsumfsPi => "csumfs-pi",
            System::CsumfsNoDatasum => "csumfs-datasum-off",
            System::CsumfsPmemLog => "csumfs-pmem-log",
            System::CsumfsFull => "csumfs-full",
            System::CsumfsDevFuse => "csumfs-dev-fuse",
            System::Fuse2fs => "fuse2fs",
            System::Kernel => "kernel",
            System::KernelFastCommit => "kernel-fast-commit",
        }
    }

    fn parse(key: &str) -> Result<System, String> {
        System::ALL.into_iter().find(|s| s.key() == key).ok_or_else(|| {
            let keys: Vec<&str> = System::ALL.iter().map(|s| s.key()).collect();
            format!("unknown system {key:?}; one of {}", keys.join(", "))
        })
    }

    fn is_kernel(self) -> bool {
        matches!(self, System::Kernel | System::KernelFastCommit)
    }

    /// mke2fs's journal options: the ByteLog row's fast-commit area at
    /// 16 MiB, the room of a ByteLog file (mke2fs's default, 1/64 of the
    /// journal — 1 MiB here — checkpoints every few hundred fsyncs).
    fn journal_options(self) -> &'static [&'static str] {
        match self {
            System::CsumfsByteLog => &["-J", "fast_commit_size=16384"],
            _ => &[],
        }
    }

    fn features(self) -> &'static str {
        match self {
            System::Kernel | System::CsumfsJournal => "metadata_csum",
            System::KernelFastCommit | System::CsumfsFastCommit | System::CsumfsByteLog => "metadata_csum,fast_commit",
            _ => "metadata_csum,^has_journal",
        }
    }
}

/// Sizes of the workloads.
struct Sizes {
    meta_ops: usize,
    seq_bytes: u64,
    rand_file: u64,
    rand_writes: usize,
    tree_files: usize,
    fallocate_bytes: u64,
}

fn run_cmd(command: &mut Command, what: &str) -> Result<(), String> {
    let out = command.stdin(Stdio::null()).output().map_err(|e| format!("{what}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("{what}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Whether a process other than this one names `image` on its command
/// line (a FUSE daemon still syncing after its unmount).
fn daemon_running(image: &Path) -> bool {
    let me = std::process::id().to_string();
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs.flatten().filter(|p| p.file_name() != me.as_str()).any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| c.split(|&b| b == 0).any(|arg| arg == image.as_os_str().as_encoded_bytes()))
    })
}

fn mount(system: System, image: &Path, mnt: &Path) -> Result<(), String> {
    match system {
        System::CsumfsJournal
        | System::CsumfsFastCommit
        | System::CsumfsByteLog
        | System::Csumfs
        | System::CsumfsPi
        | System::CsumfsNoDatasum
        | System::CsumfsPmemLog
        | System::CsumfsFull
        | System::CsumfsDevFuse => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let options = match system {
                System::CsumfsJournal | System::CsumfsFastCommit => {
                    "csum=incremental,datasum=on,log=journal".to_string()
                }
                System::CsumfsByteLog => "csum=incremental,datasum=on,bytelog".to_string(),
                System::Csumfs => "csum=incremental,datasum=on".to_string(),
                System::CsumfsPi => "csum=incremental,pi=4096+8".to_string(),
                System::CsumfsNoDatasum => "csum=incremental,datasum=off".to_string(),
                System::CsumfsPmemLog => format!("csum=incremental,datasum=on,log={}", pmem_log().display()),
                System::CsumfsDevFuse => "csum=incremental,datasum=on,uring=off".to_string(),
                _ => "csum=full,datasum=off,log=off".to_string(),
            };
            run_cmd(Command::new(exe).arg("mount").arg(image).arg(mnt).args(["-o", &options]), "csumkit mount")
        }
        System::Fuse2fs => run_cmd(Command::new("fuse2fs").arg(image).arg(mnt).args(["-o", "rw"]), "fuse2fs"),
        _ => run_cmd(Command::new("mount").args(["-t", "ext4", "-o", "loop"]).arg(image).arg(mnt), "mount -o loop"),
    }
}

/// Whether the kernel offers FUSE over io_uring (csumfs then uses it).
fn fuse_uring_enabled() -> bool {
    std::fs::read_to_string("/sys/module/fuse/parameters/enable_uring").is_ok_and(|v| v.trim() == "Y")
}

/// The ByteLog of the pmem stand-in row: a file on /dev/shm (tmpfs, mapped
/// and flushed by cache line as DAX memory would be; not durable itself).
fn pmem_log() -> PathBuf {
    PathBuf::from(format!("/dev/shm/csumkit-bench-{}.bytelog", std::process::id()))
}

/// Removes an image and the files csumfs keeps beside it.
fn remove_image(image: &Path) {
    let c = csumfs::mount::Companions::beside(image);
    for path in [image.to_path_buf(), c.data_checksums, c.pi, c.log, c.undo, pmem_log()] {
        let _ = std::fs::remove_file(path);
    }
}

fn unmount(system: System, image: &Path, mnt: &Path) -> Result<(), String> {
    if system.is_kernel() {
        return run_cmd(Command::new("umount").arg(mnt), "umount");
    }
    run_cmd(Command::new("fusermount3").arg("-u").arg(mnt), "fusermount3 -u")?;
    // The daemon syncs after the unmount: wait until it has exited.
    let start = Instant::now();
    while daemon_running(image) {
        if start.elapsed() > Duration::from_secs(60) {
            return Err("the FUSE daemon did not exit within 60 s of its unmount".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Sectors written so far to the disk holding `dir` (/sys/dev/block/M:m/stat).
fn sectors_written(dir: &Path) -> Option<u64> {
    let dev = std::fs::metadata(dir).ok()?.dev();
    let (major, minor) = (libc::major(dev), libc::minor(dev));
    let stat = std::fs::read_to_string(format!("/sys/dev/block/{major}:{minor}/stat")).ok()?;
    stat.split_whitespace().nth(6)?.parse().ok()
}

fn fsync_file(file: &std::fs::File) -> Result<(), String> {
    file.sync_all().map_err(|e| format!("fsync: {e}"))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// One round of (1) on `path`: create, write `data`, fsync, close,
/// unlink. Returns the fsync's time.
fn meta_round(path: &Path, data: &[u8]) -> Result<Duration, String> {
    let mut f = std::fs::File::create(path).map_err(|e| format!("create: {e}"))?;
    f.write_all(data).map_err(|e| format!("write: {e}"))?;
    let t = Instant::now();
    fsync_file(&f)?;
    let fsync = t.elapsed();
    drop(f);
    std::fs::remove_file(path).map_err(|e| format!("unlink: {e}"))?;
    Ok(fsync)
}

/// KiB the disk under `dir` wrote per op since its counter read `before`.
fn kib_per_op(dir: &Path, before: Option<u64>, ops: usize) -> f64 {
    match (before, sectors_written(dir)) {
        (Some(a), Some(b)) => (b.saturating_sub(a) * 512) as f64 / 1024.0 / ops as f64,
        _ => f64::NAN,
    }
}

/// `bytes` bytes no run-length or compression shortens (xorshift64): what
/// (1) writes. A run of one byte value is a single fill entry in csumfs's
/// log, so a file of `0x5A`s made its bytes per fsync look 4 KiB smaller
/// than a real file's; the kernel and fuse2fs write data as it is.
fn incompressible(bytes: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..bytes)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// (1): ops/s, p50 and p99 fsync latency in ms, KiB written per fsync.
fn meta(mnt: &Path, dir: &Path, ops: usize, bytes: usize) -> Result<[f64; 4], String> {
    let data = incompressible(bytes);
    let mut latencies = Vec::with_capacity(ops);
    settle(mnt, dir);
    let sectors_before = sectors_written(dir);
    let start = Instant::now();
    for i in 0..ops {
        latencies.push(meta_round(&mnt.join(format!("meta-{i}")), &data)?);
    }
    let elapsed = start.elapsed().as_secs_f64();
    let written = kib_per_op(dir, sectors_before, ops);
    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    Ok([ops as f64 / elapsed, ms(percentile(&latencies, 0.5)), ms(percentile(&latencies, 0.99)), written])
}

/// The floor under (1) for one job: a 4 KiB overwrite + `fdatasync` of a
/// written file on the disk holding `dir`, nothing else — the one flush a
/// durable fsync of any filesystem on that disk pays. Ops/s and p50 in ms.
fn disk_floor(dir: &Path, rounds: usize) -> Result<(f64, f64), String> {
    use std::os::unix::fs::FileExt;
    let path = dir.join("disk-floor");
    let file = std::fs::File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let block = [0xA5u8; 4096];
    let run = || -> std::io::Result<(f64, f64)> {
        for k in 0..256 {
            file.write_all_at(&block, k * 4096)?;
        }
        file.sync_all()?;
        let mut latencies = Vec::with_capacity(rounds);
        let start = Instant::now();
        for i in 0..rounds {
            let t = Instant::now();
            file.write_all_at(&block, (i as u64 % 256) * 4096)?;
            file.sync_data()?;
            latencies.push(t.elapsed());
        }
        latencies.sort();
        Ok((rounds as f64 / start.elapsed().as_secs_f64(), percentile(&latencies, 0.5).as_secs_f64() * 1e3))
    };
    let measured = run().map_err(|e| format!("{}: {e}", path.display()));
    let _ = std::fs::remove_file(&path);
    measured
}

/// Workers of (1) run together: the ByteLog fio meta jobs' 15.
const META_JOBS: usize = 15;

/// (1) with [`META_JOBS`] threads at once, each doing `ops_per_job` rounds
/// in a directory of its own: ops/s, and KiB written per op. A filesystem
/// that commits concurrent fsyncs together flushes once for many; one that
/// flushes per fsync does not gain. (In one shared directory FUSE
/// serializes the creates and unlinks on the directory's lock, each a
/// round trip or three to the daemon: docs/mount.md.)
fn meta_jobs(mnt: &Path, dir: &Path, ops_per_job: usize) -> Result<[f64; 2], String> {
    settle(mnt, dir);
    let sectors_before = sectors_written(dir);
    let start = Instant::now();
    std::thread::scope(|scope| {
        let jobs: Vec<_> = (0..META_JOBS)
            .map(|job| {
                scope.spawn(move || -> Result<(), String> {
                    let data = incompressible(4096);
                    let dir = mnt.join(format!("job{job}"));
                    std::fs::create_dir(&dir).map_err(|e| format!("mkdir: {e}"))?;
                    for i in 0..ops_per_job {
                        meta_round(&dir.join(format!("f{i}")), &data)?;
                    }
                    Ok(())
                })
            })
            .collect();
        jobs.into_iter().try_for_each(|job| job.join().map_err(|_| "a job panicked".to_string())?)
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    let ops = META_JOBS * ops_per_job;
    Ok([ops as f64 / elapsed, kib_per_op(dir, sectors_before, ops)])
}

/// Writes out what the earlier workloads left dirty in the mounted system
/// (`mnt`, FUSE's `syncfs`) and in the host's file system under `dir`
/// (the image, the log, the checksums): the next workload's time is its
/// own, not the write-back of the last one's pages — a 512 MiB write
/// measured 150–800 MB/s by what the host had still to write.
fn settle(mnt: &Path, dir: &Path) {
    for path in [mnt, dir] {
        if let Ok(d) = std::fs::File::open(path) {
            // SAFETY: a valid descriptor.
            unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&d)) };
        }
    }
}

/// Rounds of (2): one takes a third of a second on the VM's disk, and a
/// single one of a system moved 1.4x between runs (the issue's ≤ 10% for
/// data checksums is read from this column).
const SEQUENTIAL_ROUNDS: usize = 3;

/// (2): MB/s of 1 MiB writes, fsync included; the median of
/// [`SEQUENTIAL_ROUNDS`] rounds, each into a new file on a settled system
/// (the files are removed after the last: a block freed and written again
/// before a commit would take csumfs's log path instead).
fn sequential(mnt: &Path, dir: &Path, bytes: u64) -> Result<f64, String> {
    let chunk = vec![0xA5u8; 1 << 20];
    let mut rounds = Vec::with_capacity(SEQUENTIAL_ROUNDS);
    for round in 0..SEQUENTIAL_ROUNDS {
        settle(mnt, dir);
        let start = Instant::now();
        let mut f = std::fs::File::create(mnt.join(format!("seq-{round}"))).map_err(|e| format!("create: {e}"))?;
        for _ in 0..bytes >> 20 {
            f.write_all(&chunk).map_err(|e| format!("write: {e}"))?;
        }
        fsync_file(&f)?;
        rounds.push(start.elapsed());
    }
    for round in 0..SEQUENTIAL_ROUNDS {
        std::fs::remove_file(mnt.join(format!("seq-{round}"))).map_err(|e| format!("unlink: {e}"))?;
    }
    rounds.sort();
    Ok(bytes as f64 / percentile(&rounds, 0.5).as_secs_f64() / 1e6)
}

/// (3): IOPS of 4 KiB writes at random block offsets of a written file,
/// each block at most once (so that the page cache cannot merge two), and
/// the KiB the disk under `dir` took per write beyond its 4 KiB.
fn random(mnt: &Path, dir: &Path, file_bytes: u64, writes: usize) -> Result<(f64, Option<f64>), String> {
    use std::os::unix::fs::FileExt;
    let path = mnt.join("rand");
    let chunk = vec![0x3Cu8; 1 << 20];
    let mut f = std::fs::File::create(&path).map_err(|e| format!("create: {e}"))?;
    for _ in 0..file_bytes >> 20 {
        f.write_all(&chunk).map_err(|e| format!("write: {e}"))?;
    }
    fsync_file(&f)?;
    settle(mnt, dir);
    let block = vec![0xC3u8; 4096];
    let blocks = file_bytes / 4096;
    assert!(blocks.is_power_of_two() && writes as u64 <= blocks, "a permutation of the file's blocks");
    let sectors = sectors_written(dir);
    let start = Instant::now();
    for i in 0..writes as u64 {
        // i ↦ (a·i + c) mod 2^k with a odd visits every block once.
        let b = i.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(0x7F4A_7C15) % blocks;
        f.write_at(&block, b * 4096).map_err(|e| format!("pwrite: {e}"))?;
    }
    fsync_file(&f)?;
    let iops = writes as f64 / start.elapsed().as_secs_f64();
    let extra = sectors
        .zip(sectors_written(dir))
        .map(|(before, after)| ((after - before) as f64 * 512.0 / writes as f64 - 4096.0) / 1024.0);
    Ok((iops, extra))
}

/// (4) setup: `files` files in 100 directories.
fn make_tree(mnt: &Path, files: usize) -> Result<(), String> {
    for d in 0..100 {
        std::fs::create_dir(mnt.join(format!("tree-{d}"))).map_err(|e| format!("mkdir: {e}"))?;
    }
    for i in 0..files {
        std::fs::write(mnt.join(format!("tree-{}/file-{i}", i % 100)), b"x").map_err(|e| format!("create: {e}"))?;
    }
    Ok(())
}

/// (4): files/s of a walk that stats every entry and asks for its ACL.
fn walk(mnt: &Path) -> Result<f64, String> {
    let start = Instant::now();
    let mut count = 0usize;
    let mut stack = vec![mnt.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| format!("readdir: {e}"))? {
            let entry = entry.map_err(|e| format!("readdir: {e}"))?;
            let meta = std::fs::symlink_metadata(entry.path()).map_err(|e| format!("lstat: {e}"))?;
            let name = std::ffi::CString::new(entry.path().as_os_str().as_encoded_bytes()).expect("no NUL");
            // SAFETY: valid NUL-terminated path and attribute name; a null buffer of size 0 asks for the size.
            unsafe { libc::lgetxattr(name.as_ptr(), c"system.posix_acl_access".as_ptr(), std::ptr::null_mut(), 0) };
            if meta.is_dir() && entry.file_name() != "lost+found" {
                stack.push(entry.path());
            }
            count += 1;
        }
    }
    Ok(count as f64 / start.elapsed().as_secs_f64())
}

/// Rounds of (5): one fallocate is one sample, and on a shared machine
/// a single sample of either system moved 1.5x between runs.
const FALLOCATE_ROUNDS: usize = 5;

/// (5): the median seconds of [`FALLOCATE_ROUNDS`] rounds of fallocating
/// `bytes` to a file + fsync, each on a settled system. Each round opens
/// the file with `O_TRUNC`, freeing the last round's blocks; removing it
/// instead leaked them under fuse2fs (libfuse hides a file unlinked just
/// after its close as `.fuse_hidden…`, whose space came back only at
/// unmount: `ENOSPC` by the third round).
fn fallocate(mnt: &Path, dir: &Path, bytes: u64) -> Result<f64, String> {
    let path = mnt.join("big");
    let mut rounds = Vec::with_capacity(FALLOCATE_ROUNDS);
    for _ in 0..FALLOCATE_ROUNDS {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o644)
            .open(&path)
            .map_err(|e| format!("create: {e}"))?;
        // What earlier workloads left dirty is written first, outside the timing.
        fsync_file(&f)?;
        settle(mnt, dir);
        let start = Instant::now();
        // SAFETY: a valid descriptor; integer arguments.
        let done = unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&f), 0, 0, bytes as i64) };
        if done != 0 {
            return Err(format!("fallocate: {}", std::io::Error::last_os_error()));
        }
        fsync_file(&f)?;
        rounds.push(start.elapsed());
    }
    std::fs::remove_file(&path).map_err(|e| format!("unlink: {e}"))?;
    rounds.sort();
    Ok(percentile(&rounds, 0.5).as_secs_f64())
}

/// The workloads of one run: which to measure, and a progress line on
/// stderr as each starts (a full run takes minutes per system).
struct Plan<'a> {
    workloads: &'a [u8],
    started: Instant,
}

impl Plan<'_> {
    /// Runs `work` when workload `n` is chosen, after naming it on stderr.
    fn run<T>(&self, n: u8, name: &str, work: impl FnOnce() -> Result<T, String>) -> Result<Option<T>, String> {
        if !self.workloads.is_empty() && !self.workloads.contains(&n) {
            return Ok(None);
        }
        eprint!(" {name}");
        let _ = std::io::stderr().flush();
        work().map(Some)
    }
}

/// A cell for a workload not chosen.
const NOT_RUN: &str = "-";

/// Every chosen workload on one system at one block size; `Err` names what
/// failed.
fn measure(system: System, bs: u32, root: &Path, sizes: &Sizes, workloads: &[u8]) -> Result<Vec<String>, String> {
    let image = root.join(format!("img-{bs}"));
    let mnt = root.join("mnt");
    remove_image(&image);
    if system == System::CsumfsPmemLog && !Path::new("/dev/shm").is_dir() {
        return Err("no /dev/shm".into());
    }
    std::fs::create_dir_all(&mnt).map_err(|e| e.to_string())?;
    // The largest groups ext4 allows (mke2fs caps -g at 65528; e2fsck refuses more).
    let blocks_per_group = if bs == 65536 { "65528" } else { "32768" };
    let image_gib: u64 = if bs == 65536 { 40 } else { 4 };
    // At most half the image: the full run's 16 GiB fits only the 40 GiB one.
    let fallocate_bytes = sizes.fallocate_bytes.min(image_gib << 29);
    run_cmd(
        Command::new("mke2fs")
            .args(["-q", "-F", "-t", "ext4", "-O", system.features(), "-b", &bs.to_string()])
            .args(["-g", blocks_per_group, "-E", "lazy_itable_init=0,lazy_journal_init=0"])
            .args(system.journal_options())
            .arg(&image)
            .arg(format!("{image_gib}G")),
        "mke2fs",
    )?;
    let plan = Plan { workloads, started: Instant::now() };
    eprint!("bench fs: {} at {} KiB blocks:", system.name(), bs / 1024);
    mount(system, &image, &mnt)?;
    let result = (|| {
        let m = plan.run(1, "(1)", || {
            let m = meta(&mnt, root, sizes.meta_ops, 4096)?;
            // The ByteLog fio meta job's size (ANCHORS.md): a write under a page.
            let small = meta(&mnt, root, sizes.meta_ops, 100)?;
            Ok((m, small, meta_jobs(&mnt, root, sizes.meta_ops / 5)?))
        })?;
        let seq = plan.run(2, "(2)", || sequential(&mnt, root, sizes.seq_bytes))?;
        let rand = plan.run(3, "(3)", || random(&mnt, root, sizes.rand_file, sizes.rand_writes))?;
        let tree = plan.run(4, "(4)", || make_tree(&mnt, sizes.tree_files))?;
        let falloc = plan.run(5, "(5)", || fallocate(&mnt, root, fallocate_bytes))?;
        Ok::<_, String>((m, seq, rand, tree, falloc))
    })();
    unmount(system, &image, &mnt)?;
    let (m, seq, rand, tree, falloc) = result.inspect_err(|_| eprintln!())?;
    // Cold: a fresh mount, and the kernel's caches dropped.
    let walked = match tree {
        Some(()) => {
            let _ = std::fs::write("/proc/sys/vm/drop_caches", "3");
            mount(system, &image, &mnt)?;
            let walked = walk(&mnt);
            unmount(system, &image, &mnt)?;
            Some(walked?)
        }
        None => None,
    };
    remove_image(&image);
    eprintln!(" — {:.1} s", plan.started.elapsed().as_secs_f64());
    let cell = |v: Option<String>| v.unwrap_or_else(|| NOT_RUN.into());
    let (m1, m1_fsync, m1_kib, small, many) = match m {
        Some((m, small, many)) => (
            Some(num(m[0])),
            Some(format!("{} / {}", num(m[1]), num(m[2]))),
            Some(num(m[3])),
            Some(format!("{} / {}", num(small[0]), num(small[3]))),
            Some(format!("{} / {}", num(many[0]), num(many[1]))),
        ),
        None => (None, None, None, None, None),
    };
    Ok(vec![
        cell(m1),
        cell(m1_fsync),
        cell(m1_kib),
        cell(small),
        cell(many),
        cell(seq.map(num)),
        cell(rand.map(|r| format!("{} / {}", num(r.0), r.1.map_or("?".into(), num)))),
        cell(walked.map(num)),
        cell(falloc.map(|f| num(f * 1e3))),
    ])
}

fn bench(args: &FsArgs) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root (loop and FUSE mounts)".into());
    }
    let sizes = if args.quick {
        Sizes {
            meta_ops: 200,
            seq_bytes: 64 << 20,
            rand_file: 16 << 20,
            rand_writes: 2000,
            tree_files: 2000,
            fallocate_bytes: 1 << 30,
        }
    } else {
        Sizes {
            meta_ops: 2000,
            seq_bytes: 512 << 20,
            rand_file: 128 << 20,
            rand_writes: 20_000,
            tree_files: 100_000,
            fallocate_bytes: 16 << 30,
        }
    };
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = super::scratch(&parent, "fs").map_err(|e| e.to_string())?;
    println!("{}", machine_line());
    println!(
        "workloads: (1) {} × create + 4 KiB write (incompressible bytes) + fsync + unlink ((1'): 100 B, the ByteLog patch series' fio meta job; and by {} jobs at once, {} each, in a directory each); (2) {} MiB in 1 MiB writes + fsync, median of {} rounds; \
         (3) {} 4 KiB random writes into a {} MiB file + fsync; (4) walk of {} files (lstat + ACL probe) \
         after a remount, caches dropped; (5) fallocate of {} GiB (at most half the image) + fsync, median of {} rounds",
        sizes.meta_ops,
        META_JOBS,
        sizes.meta_ops / 5,
        sizes.seq_bytes >> 20,
        SEQUENTIAL_ROUNDS,
        sizes.rand_writes,
        sizes.rand_file >> 20,
        sizes.tree_files,
        sizes.fallocate_bytes >> 30,
        FALLOCATE_ROUNDS
    );
    match disk_floor(scratch.path(), sizes.meta_ops) {
        Ok((ops, p50)) => println!(
            "disk floor for (1), one job: a 4 KiB overwrite + fdatasync of a file on the images' disk, nothing else: \
             {} ops/s, p50 {} ms (no filesystem with a durable fsync on this disk does (1) faster)",
            num(ops),
            num(p50)
        ),
        Err(e) => println!("disk floor for (1): not measured ({e})"),
    }
    let uring = fuse_uring_enabled();
    println!(
        "FUSE over io_uring (/sys/module/fuse/parameters/enable_uring): {} — csumfs's rows use it{}",
        if uring { "on" } else { "off" },
        if uring { " but the uring=off row" } else { " nowhere; the uring=off row is skipped" }
    );
    for &bs in &args.block_sizes {
        let jobs_header = format!("(1) {META_JOBS} jobs, a directory each: ops/s / KiB per op");
        let mut table = Table::new(&[
            "system",
            "(1) ops/s",
            "(1) fsync p50 / p99 ms",
            "(1) KiB written per op",
            "(1') 100 B: ops/s / KiB per op",
            &jobs_header,
            "(2) MB/s",
            "(3) IOPS / extra KiB per write",
            "(4) files/s cold",
            "(5) fallocate ms",
        ]);
        let mut skipped = Vec::new();
        for system in System::ALL {
            if !args.systems.is_empty() && !args.systems.contains(&system) {
                continue;
            }
            if system.is_kernel() && bs != 4096 {
                continue; // the kernel mounts block sizes up to the page size only
            }
            if system == System::CsumfsDevFuse && !uring {
                skipped.push(format!(
                    "{}: the kernel offers no FUSE over io_uring, so the csumfs row is this",
                    system.name()
                ));
                continue;
            }
            match measure(system, bs, scratch.path(), &sizes, &args.workloads) {
                Ok(cells) => {
                    let mut row = vec![system.name().to_string()];
                    row.extend(cells);
                    table.row(row);
                }
                Err(why) => skipped.push(format!("{}: {why}", system.name())),
            }
            let _ = std::io::stdout().flush();
        }
        table.print(&format!("filesystems at {} KiB blocks", bs / 1024));
        for line in skipped {
            println!("skipped {line}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    /// (1)'s data holds no run a log could write as one fill entry (csumfs
    /// fills from 64 equal bytes) and every byte value about as often as
    /// the others: 4 KiB of it costs any system 4 KiB.
    #[test]
    fn incompressible_bytes_have_no_runs_and_every_value() {
        let data = super::incompressible(1 << 16);
        let longest = data.chunk_by(|a, b| a == b).map(<[u8]>::len).max().unwrap();
        assert!(longest < 8, "a run of {longest} equal bytes");
        let mut counts = [0usize; 256];
        data.iter().for_each(|&b| counts[b as usize] += 1);
        assert!(counts.iter().all(|&c| (128..=384).contains(&c)), "{counts:?}");
        assert_eq!(super::incompressible(100), data[..100], "the same bytes every run");
    }
}

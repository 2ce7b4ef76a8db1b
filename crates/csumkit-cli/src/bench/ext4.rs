//! `csumkit bench ext4`: incremental bitmap checksums at filesystem level — csumfs's writer on
//! images mke2fs made, every metadata checksum moved incrementally
//! (`flip_range`, `splice`) against the same writer recomputing each in
//! full (`Checksums::Full`, what e2fsprogs and the kernel do), side by side
//! in one run. Workloads: create (an inode, an entry), append (a 4 KiB
//! write into a new block), fallocate (128 KiB of unwritten extents: block
//! allocation, no data), unlink (freeing); at 1, 4 and 64 KiB blocks. The
//! time per operation in each mode, and their difference — the time the
//! full recomputes cost — say where the time goes.
//!
//! Blocks per group stop at 65 528 (`EXT2_MAX_BLOCKS_PER_GROUP`): mke2fs
//! lowers a larger `-g` to it and e2fsck refuses a superblock with more, so
//! a block bitmap's checksum covers at most 8 KiB here. The patch series' 524 288
//! per group (its "limit lifted" table) exists only in the allocator model
//! (`csumkit bench alloc`); the table prints the geometry each image has.

use super::machine_line;
use super::table::{num, ratio, Table};
use clap::Args;
use csumfs::{Checksums, Error, NewInode, Options, Volume, ROOT};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

#[derive(Args)]
pub struct Ext4Args {
    /// Files per run (default 2000; 300 with --quick).
    #[arg(long, value_parser = super::usize_in(10..=1_000_000))]
    files: Option<usize>,
    /// Measured runs per configuration, each on a fresh image (median reported).
    #[arg(long, default_value_t = 3, value_parser = super::usize_in(1..=100))]
    runs: usize,
    /// Rounds of every workload per run, on the same volume (the fastest
    /// counts; default 10, 2 with --quick).
    #[arg(long, value_parser = super::usize_in(1..=1000))]
    rounds: Option<usize>,
    /// Work directory for the images (default: the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// A reduced run for CI.
    #[arg(long)]
    quick: bool,
}

pub fn run(args: &Ext4Args) -> ExitCode {
    match bench(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("csumkit bench ext4: {e}");
            ExitCode::from(2)
        }
    }
}

/// (block size, blocks per group, image size): the largest group each
/// block size allows (a full bitmap block; 65 528 at 64 KiB).
const GEOMETRIES: [(u32, u32, &str); 3] = [(1024, 8192, "1G"), (4096, 32768, "2G"), (65536, 65528, "8G")];
const WORKLOADS: [&str; 4] = ["create", "append 4 KiB", "fallocate 128 KiB", "unlink"];
/// Subdirectories the files are spread over (linear directories stay short).
const DIRS: usize = 50;

/// Makes the image; returns its blocks per group as its superblock says.
fn mke2fs(image: &Path, bs: u32, per_group: u32, size: &str) -> Result<u32, Error> {
    let _ = std::fs::remove_file(image);
    let mkfs = ["/usr/sbin/mke2fs", "/sbin/mke2fs"].into_iter().find(|p| Path::new(p).exists()).ok_or_else(|| {
        Error::Invalid("mke2fs not found (apt-get install e2fsprogs): the bench writes into images it makes".into())
    })?;
    let out = Command::new(mkfs)
        .args(["-q", "-F", "-t", "ext4", "-O", "metadata_csum,64bit,^has_journal", "-E", "lazy_itable_init=1"])
        .args(["-b", &bs.to_string(), "-g", &per_group.to_string(), "-N", "65536"])
        .arg(image)
        .arg(size)
        .output()
        .map_err(|source| Error::Io { context: "mke2fs".into(), source })?;
    if !out.status.success() {
        return Err(Error::Invalid(format!("mke2fs: {}", String::from_utf8_lossy(&out.stderr).trim())));
    }
    let mut superblock = [0u8; 1024];
    let read = std::fs::File::open(image).and_then(|mut f| {
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(1024))?;
        std::io::Read::read_exact(&mut f, &mut superblock)
    });
    read.map_err(|source| Error::Io { context: image.display().to_string(), source })?;
    Ok(u32::from_le_bytes(superblock[0x20..0x24].try_into().expect("4 bytes")))
}

/// One run: ops/s of each workload, the fastest of `rounds` rounds on the
/// same volume (each round creates, writes, fallocates and unlinks every
/// file again). A round is a few milliseconds; on a shared machine the
/// slowest ones carry other tenants' work, the fastest is the code's cost.
fn measure(image: &Path, checksums: Checksums, files: usize, rounds: usize) -> Result<[f64; 4], Error> {
    let options = Options { write: true, checksums, ..Options::default() };
    let mut volume = Volume::open(image, options)?;
    let dir = NewInode { mode: 0o755, uid: 0, gid: 0 };
    let file = NewInode { mode: 0o100_644, uid: 0, gid: 0 };
    let dirs: Vec<u32> = (0..DIRS)
        .map(|d| volume.mkdir(ROOT, format!("d{d}").as_bytes(), dir).map(|i| i.ino))
        .collect::<Result<_, _>>()?;
    let mut rates = [0.0f64; 4];
    let mut best = |w: usize, ops: usize, started: Instant| {
        rates[w] = rates[w].max(ops as f64 / started.elapsed().as_secs_f64());
    };
    let some = files.min(500);
    let chunk = vec![0x5Au8; 4096];
    let mut inodes = Vec::with_capacity(files);
    for _ in 0..rounds {
        inodes.clear();
        let started = Instant::now();
        for i in 0..files {
            let parent = dirs[i % DIRS];
            inodes.push((parent, volume.create(parent, format!("f{i}").as_bytes(), file)?.ino));
        }
        best(0, files, started);
        let started = Instant::now();
        for &(_, ino) in inodes.iter().take(some) {
            volume.write(ino, 0, &chunk)?;
        }
        best(1, some, started);
        let started = Instant::now();
        for &(_, ino) in inodes.iter().take(some) {
            volume.fallocate(ino, 1 << 20, 128 << 10, false)?;
        }
        best(2, some, started);
        let started = Instant::now();
        for (i, &(parent, _)) in inodes.iter().enumerate() {
            volume.unlink(parent, format!("f{i}").as_bytes())?;
        }
        best(3, files, started);
    }
    volume.sync()?;
    Ok(rates)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn bench(args: &Ext4Args) -> Result<(), Error> {
    let files = args.files.unwrap_or(if args.quick { 300 } else { 2000 });
    let runs = if args.quick { 1 } else { args.runs };
    let rounds = args.rounds.unwrap_or(if args.quick { 2 } else { 10 });
    let parent = args.dir.clone().unwrap_or_else(std::env::temp_dir);
    let scratch = super::scratch(&parent, "bench-ext4").map_err(|e| Error::Invalid(e.to_string()))?;
    println!("{}", machine_line());
    println!(
        "{files} files in {DIRS} directories; {runs} run(s) per cell on fresh images, medians of each run's \
         fastest of {rounds} rounds; images by mke2fs (no journal)"
    );
    let mut table = Table::new(&[
        "block",
        "blocks/group",
        "workload",
        "incremental us/op",
        "full us/op",
        "full recomputes us/op",
        "speedup",
    ]);
    for (bs, per_group, size) in GEOMETRIES {
        let image = scratch.join("bench.img");
        let mut results: [[Vec<f64>; 4]; 2] = Default::default();
        let mut made = per_group;
        for _ in 0..runs {
            // Alternate the modes, each on a fresh image.
            for (m, mode) in [Checksums::Incremental, Checksums::Full].into_iter().enumerate() {
                made = mke2fs(&image, bs, per_group, size)?;
                let rates = measure(&image, mode, files, rounds)?;
                for (w, rate) in rates.into_iter().enumerate() {
                    results[m][w].push(rate);
                }
            }
        }
        for (w, name) in WORKLOADS.iter().enumerate() {
            let (inc, full) = (median(results[0][w].clone()), median(results[1][w].clone()));
            table.row(vec![
                format!("{} KiB", bs / 1024),
                made.to_string(),
                name.to_string(),
                num(1e6 / inc),
                num(1e6 / full),
                num(1e6 / full - 1e6 / inc),
                ratio(inc / full),
            ]);
        }
        let _ = std::fs::remove_file(&image);
    }
    table.print("csumfs writer: checksums moved incrementally vs recomputed in full");
    println!(
        "target (issue 20): >= 5x at 64 KiB / 524288 for allocation-heavy work, flat per-op cost; \
         ext4 images stop at 65528 blocks per group (mke2fs caps -g, e2fsck refuses more)"
    );
    Ok(())
}

//! `csumkit bench offload`: PI offload on the emulated PI device — 4 KiB
//! random writes with data checksums kept in a copy-on-write checksum tree
//! (configs 1 and 2) or inline in the drive's PI (config 3) — and PI
//! generate/verify speed next to a plain CRC of the same bytes.

use super::table::{num, ratio, size, Table};
use super::timing::Budget;
use super::{machine_line, parse_size};
use clap::Args;
use csumkit::csum_tree::{ChecksumTree, NodeStore, NODE_BYTES};
use csumkit::pi::{self, Checks, Device, GuardSize, Io, LbaFormat, PiFormat, PiLocation, PiType, Protection, Tags};
use csumkit::Error;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

const BLOCK_BYTES: usize = 4096;
/// The patch series' fio job: 4 jobs × 30 GiB of 4 KiB random writes.
const SEED_APP_BYTES: u64 = 120 << 30;
/// btrfs writes dirty tree blocks back once 32 MiB of them pile up
/// (BTRFS_DIRTY_METADATA_THRESH); a block written back is copied again on
/// its next change.
const SEED_DIRTY_METADATA_BYTES: u64 = 32 << 20;
/// btrfs commits at least every 30 s; at the patch series' 144K IOPS that is this many writes.
const SEED_COMMIT_WRITES: u64 = 30 * 144_000;
/// The patch series' direct-IO table: (IOPS K, FsW GB, ExtraW GB) per config.
const SEED_DIRECT: [(f64, f64, f64); 3] = [(144.0, 186.0, 66.0), (141.0, 181.0, 61.0), (172.0, 129.0, 9.0)];
const SEED_APP_GB: f64 = 120.0;

#[derive(Args)]
pub struct OffloadArgs {
    /// Bytes the application writes in total, split over the writers (the patch series: 120G).
    #[arg(long, default_value = "1G", value_parser = parse_size)]
    size: u64,
    /// Writer threads (fio numjobs).
    #[arg(long, default_value_t = 4, value_parser = super::usize_in(1..=256))]
    writers: usize,
    /// Writes each writer submits per batch (fio iodepth).
    #[arg(long, default_value_t = 32, value_parser = super::usize_in(1..=4096))]
    iodepth: usize,
    /// Directory for the device files (default: /dev/shm when present, else the temp dir).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Rounds of the three configs, interleaved; IOPS is the median.
    #[arg(long, default_value_t = 3, value_parser = super::usize_in(1..=1000))]
    rounds: usize,
    /// A reduced run for CI (32 MiB, one round, short PI timing).
    #[arg(long)]
    quick: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Config {
    /// Plain 4K format, checksum tree.
    PlainTree,
    /// 4K+8, host-generated PI checked by the device, checksum tree.
    HostPiTree,
    /// 4K+8, PRACT: the device generates and checks PI, no tree.
    Offload,
}

const CONFIGS: [Config; 3] = [Config::PlainTree, Config::HostPiTree, Config::Offload];

impl Config {
    fn label(self) -> &'static str {
        match self {
            Config::PlainTree => "1: 4K, csum tree",
            Config::HostPiTree => "2: 4K+8 host PI, csum tree",
            Config::Offload => "3: 4K+8 PRACT, no tree",
        }
    }
}

/// The commit policy, scaled from the patch series' run to this run's size so that
/// the share of the tree dirtied between commits is the same.
#[derive(Clone, Copy, Debug)]
struct Policy {
    dirty_leaves_max: u64,
    commit_writes: u64,
}

impl Policy {
    fn scaled(app_bytes: u64) -> Policy {
        let scale = app_bytes as f64 / SEED_APP_BYTES as f64;
        let scaled = |x: u64| ((x as f64 * scale).round() as u64).max(1);
        Policy {
            dirty_leaves_max: scaled(SEED_DIRTY_METADATA_BYTES / NODE_BYTES as u64),
            commit_writes: scaled(SEED_COMMIT_WRITES),
        }
    }
}

struct Outcome {
    iops: f64,
    app_bytes: u64,
    data_bytes: u64,
    medium_bytes: u64,
    commits: u64,
}

pub fn run(args: &OffloadArgs) -> ExitCode {
    match run_inner(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("csumkit: bench offload: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_inner(args: &OffloadArgs) -> Result<ExitCode, Error> {
    let app_bytes = if args.quick { 32 << 20 } else { args.size };
    let rounds = if args.quick { 1 } else { args.rounds };
    let blocks = app_bytes / BLOCK_BYTES as u64;
    if blocks < args.writers as u64 || args.writers == 0 || args.iodepth == 0 {
        return Err(Error::Invalid {
            what: "bench offload",
            detail: format!(
                "--size {app_bytes} gives {blocks} blocks for {} writers (need >= 1 each, iodepth >= 1)",
                args.writers
            ),
        });
    }
    let parent = args.dir.clone().unwrap_or_else(|| {
        if Path::new("/dev/shm").is_dir() {
            PathBuf::from("/dev/shm")
        } else {
            std::env::temp_dir()
        }
    });
    // Device files in a scratch directory removed on any exit.
    let scratch = super::scratch(&parent, "bench-offload")?;
    let dir = scratch.path().to_path_buf();
    let policy = Policy::scaled(blocks * BLOCK_BYTES as u64);
    println!("{}", machine_line());
    println!(
        "random 4 KiB writes: {} of 4 KiB writes, {} writers x iodepth {} (each writer writes every block of its quarter once, \
         in random order, like fio's random map); device files in {}",
        size(blocks * BLOCK_BYTES as u64),
        args.writers,
        args.iodepth,
        dir.display()
    );
    println!(
        "checksum tree: CRC32C items, {} per 4 KiB leaf, copy-on-write; written back every {} dirty leaves \
         (btrfs's 32 MiB, scaled by {} / 120 GiB) or {} writes (30 s at the published 144K IOPS, scaled)",
        csumkit::csum_tree::LEAF_ENTRIES,
        policy.dirty_leaves_max,
        size(blocks * BLOCK_BYTES as u64),
        policy.commit_writes
    );
    let mut outcomes: Vec<Vec<Outcome>> = CONFIGS.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for (i, &config) in CONFIGS.iter().enumerate() {
            eprintln!("round {}/{rounds}: config {}", round + 1, config.label());
            outcomes[i].push(run_config(config, args, &dir, blocks, policy)?);
        }
    }
    let summary: Vec<(f64, &Outcome)> = outcomes
        .iter()
        .map(|runs| {
            let mut iops: Vec<f64> = runs.iter().map(|o| o.iops).collect();
            iops.sort_by(f64::total_cmp);
            (iops[iops.len() / 2], runs.last().expect("at least one round"))
        })
        .collect();
    let mut table = Table::new(&[
        "config",
        "AppW",
        "FsW",
        "ExtraW",
        "Extra/AppW",
        "medium (+PI)",
        "commits",
        "IOPS K",
        "vs 1",
        "published FsW/ExtraW GB",
        "published Extra/AppW",
        "published IOPS K",
        "published vs 1",
    ]);
    for (i, (iops, o)) in summary.iter().enumerate() {
        let (seed_iops, seed_fsw, seed_extra) = SEED_DIRECT[i];
        table.row(vec![
            CONFIGS[i].label().into(),
            approx_size(o.app_bytes),
            approx_size(o.data_bytes),
            approx_size(o.data_bytes - o.app_bytes),
            format!("{:.3}", (o.data_bytes - o.app_bytes) as f64 / o.app_bytes as f64),
            approx_size(o.medium_bytes),
            o.commits.to_string(),
            num(iops / 1e3),
            ratio(iops / summary[0].0),
            format!("{seed_fsw:.0} / {seed_extra:.0}"),
            format!("{:.3}", seed_extra / SEED_APP_GB),
            num(seed_iops),
            ratio(seed_iops / SEED_DIRECT[0].0),
        ]);
    }
    table.print(&format!(
        "write amplification, median IOPS of {rounds} round(s), the published direct-IO values beside"
    ));
    let extra = |i: usize| (summary[i].1.data_bytes - summary[i].1.app_bytes) as f64;
    let extra_ratio = extra(2) / extra(0);
    let highest = summary[2].0 > summary[0].0 && summary[2].0 > summary[1].0;
    println!(
        "targets: config 3 ExtraW = {:.5} x config 1's (<= 0.2: {}); config 3 has the highest IOPS: {}",
        extra_ratio,
        if extra_ratio <= 0.2 { "met" } else { "MISSED" },
        if highest { "met" } else { "MISSED" }
    );
    println!(
        "model: only the checksum tree and a superblock per commit are metadata here; btrfs also copies its fs and \
         extent trees on every write, which is the published 9 GB in config 3"
    );
    pi_speed(args.quick);
    Ok(ExitCode::SUCCESS)
}

/// Bytes in GiB, MiB or KiB with three significant decimals.
fn approx_size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.3} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.2} MiB", b as f64 / (1u64 << 20) as f64),
        b => format!("{:.1} KiB", b as f64 / 1024.0),
    }
}

struct TreeState {
    tree: ChecksumTree,
    writes_since_commit: u64,
    commits: u64,
}

/// Tree nodes go to the device through the config's I/O path.
struct DeviceNodes<'a> {
    device: &'a Device,
    config: Config,
}

impl DeviceNodes<'_> {
    fn write_block(&self, lba: u64, block: &[u8]) -> Result<(), Error> {
        match self.config {
            Config::PlainTree => self.device.write(lba, block, None, &Io::default()),
            Config::HostPiTree => {
                let p = self.device.protection().expect("PI-formatted");
                let mut md = [0u8; 8];
                pi::generate_separate(p, block, &mut md, &Tags::for_lba(lba))?;
                self.device.write(lba, block, Some(&md), &Io::default())
            }
            Config::Offload => self.device.write(lba, block, None, &Io::pract()),
        }
    }

    fn read_blocks(&self, lba: u64, data: &mut [u8]) -> Result<(), Error> {
        let io = if self.config == Config::PlainTree { Io::default() } else { Io::pract() };
        self.device.read(lba, data, None, &io)
    }
}

impl NodeStore for DeviceNodes<'_> {
    fn write(&mut self, location: u64, node: &[u8; NODE_BYTES]) -> Result<(), Error> {
        self.write_block(location, node)
    }
    fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), Error> {
        self.read_blocks(location, node)
    }
}

fn run_config(config: Config, args: &OffloadArgs, dir: &Path, blocks: u64, policy: Policy) -> Result<Outcome, Error> {
    let lba = LbaFormat::new(BLOCK_BYTES as u32, if config == Config::PlainTree { 0 } else { 8 })?;
    let protection = match config {
        Config::PlainTree => None,
        _ => Some(Protection::new(PiFormat::new(GuardSize::Crc16, PiType::Type1, 0)?, lba, PiLocation::Last)?),
    };
    let area = if config == Config::Offload { 1 } else { ChecksumTree::area_blocks_for(blocks) };
    let path = dir.join(format!("csumkit-offload-{}-{config:?}.img", std::process::id()));
    let device = Device::create(&path, lba, protection, blocks + area)?;
    let result = drive(config, args, &device, blocks, area, policy);
    let _ = std::fs::remove_file(&path);
    result
}

fn drive(
    config: Config,
    args: &OffloadArgs,
    device: &Device,
    blocks: u64,
    area: u64,
    policy: Policy,
) -> Result<Outcome, Error> {
    let tree = match config {
        Config::Offload => None,
        _ => Some(Mutex::new(TreeState {
            tree: ChecksumTree::new(blocks, blocks, area)?,
            writes_since_commit: 0,
            commits: 0,
        })),
    };
    let nodes = DeviceNodes { device, config };
    let writes = AtomicU64::new(0);
    let superblocks = AtomicU64::new(0);
    let start = Instant::now();
    let per_writer = blocks / args.writers as u64;
    std::thread::scope(|scope| -> Result<(), Error> {
        let handles: Vec<_> = (0..args.writers as u64)
            .map(|w| {
                let (tree, nodes, writes, superblocks) = (&tree, &nodes, &writes, &superblocks);
                let end = if w + 1 == args.writers as u64 { blocks } else { (w + 1) * per_writer };
                scope.spawn(move || {
                    writer(
                        config,
                        w * per_writer..end,
                        args.iodepth,
                        nodes,
                        tree.as_ref(),
                        policy,
                        writes,
                        superblocks,
                        blocks,
                    )
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().expect("writer thread panicked"))
    })?;
    let commits = match &tree {
        Some(state) => {
            let mut state = state.lock().expect("tree lock");
            state.tree.commit(&mut DeviceNodes { device, config })?;
            state.commits + 1
        }
        None => {
            nodes.write_block(blocks, &[0u8; BLOCK_BYTES])?;
            superblocks.load(Ordering::Relaxed) + 1
        }
    };
    device.flush()?;
    let elapsed = start.elapsed().as_secs_f64();
    let tree = tree.map(|t| t.into_inner().expect("tree lock").tree);
    check_back(config, device, tree.as_ref(), blocks)?;
    let stats = device.stats();
    Ok(Outcome {
        iops: blocks as f64 / elapsed,
        app_bytes: blocks * BLOCK_BYTES as u64,
        data_bytes: stats.data_bytes_written,
        medium_bytes: stats.medium_bytes_written,
        commits,
    })
}

#[allow(clippy::too_many_arguments)] // one writer's share of the shared run state
fn writer(
    config: Config,
    range: std::ops::Range<u64>,
    iodepth: usize,
    nodes: &DeviceNodes,
    tree: Option<&Mutex<TreeState>>,
    policy: Policy,
    writes: &AtomicU64,
    superblocks: &AtomicU64,
    superblock_lba: u64,
) -> Result<(), Error> {
    let mut order: Vec<u64> = range.clone().collect();
    let mut state = range.start.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for i in (1..order.len()).rev() {
        order.swap(i, (next() % (i as u64 + 1)) as usize);
    }
    let mut block = vec![0u8; BLOCK_BYTES];
    block.chunks_exact_mut(8).for_each(|c| c.copy_from_slice(&next().to_le_bytes()));
    let mut md = [0u8; 8];
    for batch in order.chunks(iodepth) {
        for &lba in batch {
            block[..8].copy_from_slice(&lba.to_le_bytes());
            let csum = match config {
                Config::PlainTree => {
                    let csum = csumkit::crc32c::checksum(&block);
                    nodes.device.write(lba, &block, None, &Io::default())?;
                    Some(csum)
                }
                Config::HostPiTree => {
                    let csum = csumkit::crc32c::checksum(&block);
                    let p = nodes.device.protection().expect("PI-formatted");
                    pi::generate_separate(p, &block, &mut md, &Tags::for_lba(lba))?;
                    nodes.device.write(lba, &block, Some(&md), &Io::default())?;
                    Some(csum)
                }
                Config::Offload => {
                    nodes.device.write(lba, &block, None, &Io::pract())?;
                    None
                }
            };
            match (tree, csum) {
                (Some(tree), Some(csum)) => {
                    let mut state = tree.lock().expect("tree lock");
                    state.tree.update(lba, csum);
                    state.writes_since_commit += 1;
                    if state.tree.dirty_leaves() >= policy.dirty_leaves_max
                        || state.writes_since_commit >= policy.commit_writes
                    {
                        state.tree.commit(&mut DeviceNodes { device: nodes.device, config })?;
                        state.writes_since_commit = 0;
                        state.commits += 1;
                    }
                }
                _ => {
                    if (writes.fetch_add(1, Ordering::Relaxed) + 1).is_multiple_of(policy.commit_writes) {
                        nodes.write_block(superblock_lba, &[0u8; BLOCK_BYTES])?;
                        superblocks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
    Ok(())
}

/// Reads every block back (untimed): the tree's checksum must match the
/// data (configs 1 and 2; also looked up through the tree on the device for
/// a sample), and the device must accept the PI (configs 2 and 3).
fn check_back(config: Config, device: &Device, tree: Option<&ChecksumTree>, blocks: u64) -> Result<(), Error> {
    const CHUNK_BLOCKS: u64 = 256;
    let nodes = DeviceNodes { device, config };
    let mut buf = vec![0u8; CHUNK_BLOCKS as usize * BLOCK_BYTES];
    for first in (0..blocks).step_by(CHUNK_BLOCKS as usize) {
        let n = CHUNK_BLOCKS.min(blocks - first) as usize;
        nodes.read_blocks(first, &mut buf[..n * BLOCK_BYTES])?;
        let Some(tree) = tree else { continue };
        for (i, block) in buf[..n * BLOCK_BYTES].chunks_exact(BLOCK_BYTES).enumerate() {
            let lba = first + i as u64;
            let want = tree.get(lba);
            if want != Some(csumkit::crc32c::checksum(block)) {
                return Err(Error::Corrupt {
                    location: format!("block {lba}"),
                    detail: "checksum tree disagrees".into(),
                });
            }
            if lba.is_multiple_of(997) && tree.lookup_persisted(&mut DeviceNodes { device, config }, lba)? != want {
                return Err(Error::Corrupt {
                    location: format!("block {lba}"),
                    detail: "committed tree disagrees".into(),
                });
            }
        }
    }
    Ok(())
}

/// PI generate and verify over 1 MiB of data, next to a plain CRC of each
/// 4 KiB block of the same bytes.
fn pi_speed(quick: bool) {
    const BLOCKS: usize = 256;
    let budget = Budget::new(quick);
    budget.warm_up();
    let mut table = Table::new(&[
        "guard",
        "format",
        "plain CRC GB/s",
        "generate GB/s",
        "x plain",
        "verify GB/s",
        "x plain",
        "DIX gen GB/s",
        "DIX verify GB/s",
    ]);
    let mut worst = f64::INFINITY;
    for guard in GuardSize::ALL {
        let md = guard.tuple_bytes() as u32;
        let lba = LbaFormat::new(BLOCK_BYTES as u32, md).expect("valid format");
        let p = Protection::new(
            PiFormat::new(guard, PiType::Type1, guard.storage_tag_bits_range().0).expect("valid"),
            lba,
            PiLocation::Last,
        )
        .expect("metadata holds the tuple");
        let mut extended = vec![0x5Au8; BLOCKS * lba.extended_bytes()];
        let data = vec![0x5Au8; BLOCKS * BLOCK_BYTES];
        let mut metadata = vec![0u8; BLOCKS * md as usize];
        let tags = Tags::for_lba(1 << 20);
        pi::generate(&p, &mut extended, &tags).expect("whole blocks");
        pi::generate_separate(&p, &data, &mut metadata, &tags).expect("whole blocks");
        let ext = lba.extended_bytes();
        let mut plain = |n: u64| {
            for _ in 0..n {
                for block in extended.chunks_exact(ext) {
                    std::hint::black_box(guard.checksum(&block[..BLOCK_BYTES]));
                }
            }
        };
        let mut gen_buf = extended.clone();
        let mut generate = |n: u64| {
            for _ in 0..n {
                pi::generate(&p, &mut gen_buf, &tags).expect("whole blocks");
            }
        };
        let verify_buf = extended.clone();
        let mut verify = |n: u64| {
            for _ in 0..n {
                pi::verify(&p, std::hint::black_box(&verify_buf), &tags, Checks::ALL).expect("valid PI");
            }
        };
        let mut dix_md = metadata.clone();
        let mut dix_gen = |n: u64| {
            for _ in 0..n {
                pi::generate_separate(&p, &data, &mut dix_md, &tags).expect("whole blocks");
            }
        };
        let mut dix_verify = |n: u64| {
            for _ in 0..n {
                pi::verify_separate(&p, std::hint::black_box(&data), &metadata, &tags, Checks::ALL).expect("valid PI");
            }
        };
        let ns = budget.compare(&mut [&mut plain, &mut generate, &mut verify, &mut dix_gen, &mut dix_verify]);
        let gbps = |ns: f64| (BLOCKS * BLOCK_BYTES) as f64 / ns;
        worst = worst.min(ns[0] / ns[1]).min(ns[0] / ns[2]);
        table.row(vec![
            format!("{}b", guard.bits()),
            lba.to_string(),
            num(gbps(ns[0])),
            num(gbps(ns[1])),
            ratio(ns[0] / ns[1]),
            num(gbps(ns[2])),
            ratio(ns[0] / ns[2]),
            num(gbps(ns[3])),
            num(gbps(ns[4])),
        ]);
    }
    table.print("PI generate / verify (type 1, PI last, 256 blocks = 1 MiB of data) vs a plain CRC of each 4 KiB block, GB/s of data");
    println!(
        "target: generate and verify each >= 0.8x the plain CRC of the same bytes: worst {:.2}x ({})",
        worst,
        if worst >= 0.8 { "met" } else { "MISSED" }
    );
}

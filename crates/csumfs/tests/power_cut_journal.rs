//! Power cuts under csumfs's commits to the image's own jbd2 journal: the
//! model test's random operations (a `sync` every few) on a volume whose
//! image is a simulated disk, cut before every flush lands — the
//! journal's two per commit, the checkpoint's — keeping a random subset of
//! the 512-byte sectors written since the last one. Each cut image is
//! recovered by csumfs (`csumfs::recover`, as every writable open does)
//! and must hold a tree the workload had at an operation boundary since
//! the last acknowledged `sync`; one cut in four is also recovered by
//! `e2fsck -fy` and, one in eight, by the kernel (a loop mount, root
//! only), each of which must give the tree csumfs gave, with `e2fsck -fn`
//! clean after it. On a fast_commit image the syncs that can be are fast
//! commits; e2fsck 1.47.0 cannot replay those (nor the kernel's), so there
//! the kernel judges one cut in four.

mod common;

use common::crash::{judge, random_workload, run_with_syncs, superblock_agrees, tree, Disk, History, SimDisk};
use common::model::{Model, Node, Op};
use common::{assert_clean, have_e2fsprogs, tool, Scratch};
use csumfs::{Backing, Options, SyncHandle, Volume};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

/// What a cut needs.
struct World {
    disk: Arc<Mutex<Disk>>,
    history: Arc<Mutex<History>>,
    rng: u64,
    cuts: u64,
    by_e2fsck: u64,
    by_kernel: u64,
    scratch: PathBuf,
    run: String,
    /// The kernel may be asked (root, a loop device).
    kernel: bool,
    /// The image has fast commits: e2fsck does not judge.
    fast: bool,
}

/// The image's disk, cut before each flush lands.
struct CuttingDisk {
    disk: Arc<Mutex<Disk>>,
    world: Arc<Mutex<World>>,
}

impl Backing for CuttingDisk {
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        SimDisk(Arc::clone(&self.disk)).write_at(at, bytes)
    }
    fn read_at(&self, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
        SimDisk(Arc::clone(&self.disk)).read_at(at, buf)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        cut(&self.world);
        self.disk.lock().unwrap().flush();
        Ok(())
    }
    fn sync_handle(&self) -> std::io::Result<SyncHandle> {
        let (disk, world) = (Arc::clone(&self.disk), Arc::clone(&self.world));
        Ok(Box::new(move || {
            cut(&world);
            disk.lock().unwrap().flush();
            Ok(())
        }))
    }
}

/// Recovers `image` at `path` with `e2fsck -fy` (its journal replay and
/// whatever it then finds), then reads it as csumfs.
fn e2fsck_recovered(path: &Path, at: &str) -> Model {
    let out = Command::new(tool("e2fsck").unwrap()).arg("-fy").arg(path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.code().is_some_and(|c| c <= 1), "{at}: e2fsck -fy: {text}");
    // Its journal replay alone should leave nothing to fix.
    assert!(!text.contains("? yes"), "{at}: e2fsck fixed what the journal left:\n{text}");
    assert_clean(path, at);
    tree(&Volume::open(path, Options::default()).unwrap()).unwrap_or_else(|e| panic!("{at}: after e2fsck: {e}"))
}

/// Mounts `path` with the kernel (which replays the journal), unmounts,
/// and reads it as csumfs; `e2fsck -fn` judges what the kernel left.
fn kernel_recovered(path: &Path, mnt: &Path, at: &str) -> Option<Model> {
    if !common::kernel_mount_with(path, mnt, "loop") {
        return None;
    }
    common::kernel_umount(mnt);
    assert_clean(path, at);
    Some(
        tree(&Volume::open(path, Options::default()).unwrap())
            .unwrap_or_else(|e| panic!("{at}: after the kernel: {e}")),
    )
}

fn cut(world: &Arc<Mutex<World>>) {
    let mut world = world.lock().unwrap();
    world.cuts += 1;
    let at = format!("{} cut {}", world.run, world.cuts);
    let mut rng = world.rng;
    let image = world.disk.lock().unwrap().crash_image(&mut rng);
    world.rng = rng;
    let path = world.scratch.join("cut.img");
    std::fs::write(&path, &image).unwrap();
    let copy = world.scratch.join("cut-copy.img");
    let sample = world.cuts % 4 == 1;
    if sample {
        std::fs::copy(&path, &copy).unwrap();
    }
    csumfs::recover(&path).unwrap_or_else(|e| panic!("{at}: csumfs's recovery failed: {e}"));
    let recovered = std::fs::read(&path).unwrap();
    superblock_agrees(&recovered).unwrap_or_else(|e| panic!("{at}: {e}"));
    let found = tree(&Volume::open(&path, Options::default()).unwrap())
        .unwrap_or_else(|e| panic!("{at}: the recovered tree is unreadable: {e}"));
    {
        let history = world.history.lock().unwrap();
        judge(&found, &history.trees, history.in_flight.as_deref()).unwrap_or_else(|e| panic!("{at}: {e}"));
    }
    if !sample {
        return;
    }
    // A superblock torn between its sectors (its checksum fails) the
    // kernel refuses, as it does one it tore itself: e2fsck's to mend.
    let copied = std::fs::read(&copy).unwrap();
    let whole =
        copied[1024 + 0x3FC..2048] == csumkit::crc32c::raw_update(!0, &copied[1024..1024 + 0x3FC]).to_le_bytes();
    if (world.cuts % 8 == 1 || world.fast) && world.kernel && whole {
        let mnt = world.scratch.join("mnt");
        let kernel_copy = world.scratch.join("kernel-copy.img");
        std::fs::copy(&copy, &kernel_copy).unwrap();
        match kernel_recovered(&kernel_copy, &mnt, &format!("{at} (the kernel's recovery)")) {
            Some(by_kernel) => {
                assert!(by_kernel == found, "{at}: the kernel's recovery differs from csumfs's");
                world.by_kernel += 1;
            }
            None => world.kernel = false,
        }
    }
    if world.fast {
        return;
    }
    let by_e2fsck = e2fsck_recovered(&copy, &format!("{at} (e2fsck's recovery)"));
    assert!(by_e2fsck == found, "{at}: e2fsck's recovery differs from csumfs's");
    world.by_e2fsck += 1;
}

/// Runs `ops` random operations, a `sync` every `sync_every`, on an
/// image of `block_size`-byte blocks with a journal of `journal_mib`
/// (`fast`: and fast commits); returns (cuts, by e2fsck, by the kernel,
/// journal checkpoints, fast commits).
fn run(seed: u64, block_size: &str, ops: usize, sync_every: usize, journal_mib: &str, fast: bool) -> [u64; 5] {
    let scratch = Scratch::new(&format!("power-cut-journal-{seed}-{block_size}"));
    let path = scratch.0.join("fresh.img");
    let features = if fast { "metadata_csum,fast_commit" } else { "metadata_csum" };
    let out = Command::new(tool("mke2fs").unwrap())
        .args(["-q", "-F", "-t", "ext4", "-O", features, "-b", block_size, "-J"])
        .arg(format!("size={journal_mib}"))
        .arg(&path)
        .arg("16M")
        .output()
        .unwrap();
    assert!(out.status.success(), "mke2fs: {}", String::from_utf8_lossy(&out.stderr));
    let fresh = std::fs::read(&path).unwrap();
    let disk = Arc::new(Mutex::new(Disk::new(fresh.clone())));
    let root = Model::from([("/".to_string(), Node::Dir)]);
    let history = Arc::new(Mutex::new(History { trees: vec![root], in_flight: None }));
    let world = Arc::new(Mutex::new(World {
        disk: Arc::clone(&disk),
        history: Arc::clone(&history),
        rng: seed,
        cuts: 0,
        by_e2fsck: 0,
        by_kernel: 0,
        scratch: scratch.0.clone(),
        run: format!("seed {seed}, {block_size}-byte blocks:"),
        kernel: true,
        fast,
    }));
    let options = Options { write: true, check_updates: true, ..Options::default() };
    let mut volume = Volume::from_bytes(fresh, options).unwrap();
    let backing = || CuttingDisk { disk: Arc::clone(&disk), world: Arc::clone(&world) };
    volume.enable_image_journal(Box::new(backing()), Box::new(backing())).unwrap();
    assert!(volume.journaled_in_image());
    volume.mark_log_in_use().unwrap();

    let workload = random_workload(seed, ops);
    // With fast commits, most operations of kinds they carry (one in four
    // of the others kept): syncs that can be fast commits.
    let carried = |op: &Op| matches!(op, Op::Create { .. } | Op::Write { .. } | Op::Unlink { .. } | Op::Rename { .. });
    let workload: Vec<Op> = workload
        .into_iter()
        .enumerate()
        .filter(|(i, op)| !fast || i % 4 == 0 || carried(op))
        .map(|(_, op)| op)
        .collect();
    let model = run_with_syncs(&mut volume, &workload, &history, sync_every);
    let checkpoints = csumfs::Stats::get(&volume.stats().log_checkpoints);
    let fast_commits = csumfs::Stats::get(&volume.stats().fast_commits);
    let commits = csumfs::Stats::get(&volume.stats().log_commits);
    assert!(commits > 10, "{commits} journal commits");
    // A write-through is not atomic: every commit must fit the journal.
    assert_eq!(csumfs::Stats::get(&volume.stats().log_write_through), 0, "commits written through");
    volume.checkpoint().unwrap();
    drop(volume);
    let durable = disk.lock().unwrap().durable.clone();
    let final_path = scratch.0.join("final.img");
    std::fs::write(&final_path, &durable).unwrap();
    assert_eq!(u32::from_le_bytes(durable[1024 + 0x60..1024 + 0x64].try_into().unwrap()) & 0x4, 0, "needs_recovery");
    assert_clean(&final_path, "after the final checkpoint");
    let found = tree(&Volume::open(&final_path, Options::default()).unwrap()).unwrap();
    assert_eq!(found, model, "the checkpointed image differs from the workload's tree");
    let world = world.lock().unwrap();
    [world.cuts, world.by_e2fsck, world.by_kernel, checkpoints, fast_commits]
}

#[test]
fn every_flush_of_the_image_journal_survives_a_power_cut() {
    if !have_e2fsprogs() {
        return;
    }
    let extra: u64 = std::env::var("CSUMFS_POWER_CUT_SEEDS").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    let fixed = [(1, "1024", "1"), (2, "4096", "4")];
    let mut totals = [0u64; 5];
    let more = (0..extra).map(|i| if i % 2 == 0 { (100 + i, "1024", "1") } else { (100 + i, "4096", "4") });
    for (seed, block_size, journal) in fixed.into_iter().chain(more) {
        let counts = run(seed, block_size, 500, 2 + seed as usize % 3, journal, false);
        totals.iter_mut().zip(counts).for_each(|(t, n)| *t += n);
    }
    let [cuts, by_e2fsck, by_kernel, checkpoints, _] = totals;
    eprintln!(
        "image journal power cuts: {cuts} recovered by csumfs and compared with the workload, {by_e2fsck} also \
         by e2fsck -fy, {by_kernel} also by the kernel; {checkpoints} checkpoints under cuts"
    );
    assert!(cuts > 200, "only {cuts} power cuts");
    assert!(by_e2fsck * 4 >= cuts - 3, "{by_e2fsck} of {cuts} judged by e2fsck");
    assert!(checkpoints > 2, "{checkpoints} checkpoints under cuts");
}

#[test]
fn every_flush_of_fast_commits_survives_a_power_cut() {
    if !have_e2fsprogs() {
        return;
    }
    let extra: u64 = std::env::var("CSUMFS_POWER_CUT_SEEDS").ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    let mut totals = [0u64; 5];
    let seeds = [(3, "1024", "4"), (4, "4096", "4")].into_iter();
    let more = (0..extra).map(|i| (200 + i, if i % 2 == 0 { "1024" } else { "4096" }, "4"));
    for (seed, block_size, journal) in seeds.chain(more) {
        let counts = run(seed, block_size, 400, 2 + seed as usize % 3, journal, true);
        totals.iter_mut().zip(counts).for_each(|(t, n)| *t += n);
    }
    let [cuts, _, by_kernel, _, fast_commits] = totals;
    eprintln!(
        "fast-commit power cuts: {cuts} recovered by csumfs and compared with the workload, {by_kernel} also by \
         the kernel; {fast_commits} fast commits"
    );
    assert!(cuts > 150 && fast_commits > 20, "only {cuts} power cuts, {fast_commits} fast commits");
    if std::env::var_os("CI").is_some() {
        assert!(by_kernel * 8 >= cuts, "{by_kernel} of {cuts} judged by the kernel");
    }
}

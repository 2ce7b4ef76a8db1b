//! What the power-cut tests share: a simulated disk (writes durable only
//! at its flush, a cut keeping a random subset of the sectors written
//! since), the workload's history of trees, the tree a replayed volume
//! holds and the judgement of it.

use super::model::{pick, Model, Node, Op};
use csumfs::{Backing, SyncHandle, Volume};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

pub const SECTOR: usize = 512;

/// A disk: what reads see now, what is durable, and the writes since the
/// last flush.
pub struct Disk {
    pub current: Vec<u8>,
    pub durable: Vec<u8>,
    pub unsynced: Vec<(usize, usize)>,
}

pub struct SimDisk(pub Arc<Mutex<Disk>>);

impl Backing for SimDisk {
    fn read_at(&self, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let disk = self.0.lock().unwrap();
        buf.copy_from_slice(&disk.current[at as usize..at as usize + buf.len()]);
        Ok(())
    }
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        let mut disk = self.0.lock().unwrap();
        let at = at as usize;
        disk.current[at..at + bytes.len()].copy_from_slice(bytes);
        disk.unsynced.push((at, at + bytes.len()));
        Ok(())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.0.lock().unwrap().flush();
        Ok(())
    }
    fn sync_handle(&self) -> std::io::Result<SyncHandle> {
        let disk = self.0.clone();
        Ok(Box::new(move || {
            disk.lock().unwrap().flush();
            Ok(())
        }))
    }
}

impl Disk {
    pub fn flush(&mut self) {
        let Disk { current, durable, unsynced } = self;
        for (start, end) in unsynced.drain(..) {
            durable[start..end].copy_from_slice(&current[start..end]);
        }
    }

    pub fn new(bytes: Vec<u8>) -> Disk {
        Disk { current: bytes.clone(), durable: bytes, unsynced: Vec::new() }
    }

    /// What a power cut leaves: the durable bytes and a random subset of
    /// the sectors written since the last flush.
    pub fn crash_image(&self, rng: &mut u64) -> Vec<u8> {
        let mut image = self.durable.clone();
        let sectors: Vec<usize> =
            self.unsynced.iter().flat_map(|&(s, e)| (s / SECTOR..e.div_ceil(SECTOR)).collect::<Vec<_>>()).collect();
        for sector in random_subset(rng, &sectors) {
            let (s, e) = (sector * SECTOR, ((sector + 1) * SECTOR).min(image.len()));
            image[s..e].copy_from_slice(&self.current[s..e]);
        }
        image
    }
}

/// The workload's trees: from the last acknowledged `sync` on.
pub struct History {
    pub trees: Vec<Model>,
    /// The file the operation under way writes: a cut inside it (before a
    /// sidecar flush) may find some of its new bytes already in place.
    pub in_flight: Option<String>,
}

/// The file `op` writes data of, picked as `apply` picks it.
pub fn data_target(model: &Model, op: &Op) -> Option<String> {
    match *op {
        Op::Write { file, .. }
        | Op::Truncate { file, .. }
        | Op::Fallocate { file, .. }
        | Op::PunchHole { file, .. }
        | Op::ZeroRange { file, .. } => pick(model, |n| matches!(n, Node::File(_)), file),
        _ => None,
    }
}

/// splitmix64: the cuts' own deterministic choices.
pub fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

pub fn random_subset<T: Copy>(rng: &mut u64, all: &[T]) -> Vec<T> {
    all.iter().copied().filter(|_| next(rng) & 1 == 1).collect()
}

/// The superblock's checksum holds and its free block and inode counts are
/// the sums of the group descriptors' (as e2fsck's pass 5 finds them):
/// checked at every cut, as e2fsck is only at every 8th. A superblock torn
/// between its two sectors, or one that got ahead of the log (or behind
/// it), shows here first.
pub fn superblock_agrees(image: &[u8]) -> Result<(), String> {
    let layout = csumkit::ext4::Layout::parse(image).map_err(|e| e.to_string())?;
    if image[1024 + 0x3FC..2048] != csumkit::crc32c::raw_update(!0, &image[1024..1024 + 0x3FC]).to_le_bytes() {
        return Err("the superblock's checksum fails".into());
    }
    let wide = layout.desc_size >= 64;
    let le16 = |at: usize| u64::from(u16::from_le_bytes([image[at], image[at + 1]]));
    let le32 = |at: usize| u64::from(u32::from_le_bytes(image[at..at + 4].try_into().unwrap()));
    let (mut blocks, mut inodes) = (0, 0);
    for &at in &layout.desc_offsets {
        let at = at as usize;
        blocks += le16(at + 0x0C) | if wide { le16(at + 0x2C) << 16 } else { 0 };
        inodes += le16(at + 0x0E) | if wide { le16(at + 0x2E) << 16 } else { 0 };
    }
    let sb_blocks = le32(1024 + 0x0C) | if wide { le32(1024 + 0x158) << 32 } else { 0 };
    let sb_inodes = le32(1024 + 0x10);
    if (sb_blocks, sb_inodes) != (blocks, inodes) {
        return Err(format!(
            "the superblock counts {sb_blocks} free blocks and {sb_inodes} free inodes; \
             its group descriptors {blocks} and {inodes}"
        ));
    }
    Ok(())
}

/// The tree a volume holds (lost+found left out), as the model writes it.
pub fn tree(v: &Volume) -> Result<Model, csumfs::Error> {
    let mut out = Model::from([("/".to_string(), Node::Dir)]);
    let mut stack = vec!["/".to_string()];
    while let Some(dir) = stack.pop() {
        for entry in v.read_dir(&v.resolve(&dir)?)? {
            let name = String::from_utf8_lossy(&entry.name).into_owned();
            if name == "." || name == ".." || (dir == "/" && name == "lost+found") {
                continue;
            }
            let path = if dir == "/" { format!("/{name}") } else { format!("{dir}/{name}") };
            let inode = v.inode(entry.ino)?;
            let node = if inode.is_dir() {
                stack.push(path.clone());
                Node::Dir
            } else if inode.is_symlink() {
                Node::Link(v.read_link(&inode)?)
            } else {
                Node::File(v.read_all(&inode)?)
            };
            out.insert(path, node);
        }
    }
    Ok(out)
}

/// What a file looks like without its bytes.
pub fn shape(tree: &Model) -> BTreeMap<&str, (u8, usize, &[u8])> {
    tree.iter()
        .map(|(p, n)| {
            let s = match n {
                Node::Dir => (0, 0, &[][..]),
                Node::File(c) => (1, c.len(), &[][..]),
                Node::Link(t) => (2, 0, t.as_slice()),
            };
            (p.as_str(), s)
        })
        .collect()
}

/// `found` has the shape of one of `trees` (names, kinds, sizes, link
/// targets), and every file whose bytes are the same in all of them has
/// those bytes (a file changed after the last `sync` may hold a mix: its
/// data is written in place, as ext4's; so may the file the operation
/// under way writes, `in_flight`).
pub fn judge(found: &Model, trees: &[Model], in_flight: Option<&str>) -> Result<(), String> {
    let Some(k) = trees.iter().position(|t| shape(t) == shape(found)) else {
        let first = &trees[0];
        let missing: Vec<_> = first.keys().filter(|p| !found.contains_key(*p)).take(5).collect();
        let extra: Vec<_> = found.keys().filter(|p| !first.contains_key(*p)).take(5).collect();
        return Err(format!(
            "the replayed tree is none of the {} the workload had since the last sync \
             (against the acknowledged one: missing {missing:?}, extra {extra:?})",
            trees.len()
        ));
    };
    for (path, node) in &trees[k] {
        let Node::File(content) = node else { continue };
        let unchanged = trees.iter().all(|t| t.get(path) == Some(node)) && in_flight != Some(path.as_str());
        if unchanged && found.get(path) != Some(node) {
            return Err(format!("{path}: {} acknowledged bytes not read back", content.len()));
        }
    }
    Ok(())
}

/// `ops` random operations of the model test from `seed`; half the
/// writes made whole pages over a file's first two, which go in place (not
/// through the log): overwrites of checksummed blocks, announced on the
/// sidecar's intent list first.
pub fn random_workload(seed: u64, ops: usize) -> Vec<Op> {
    use proptest::strategy::{Strategy, ValueTree};
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(Config::default(), TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes));
    (0..ops)
        .map(|_| match super::model::op().new_tree(&mut runner).unwrap().current() {
            Op::Write { file, len, .. } if len > 2500 => Op::Write { file, offset: len % 2 * 4096, len: 8192 },
            op => op,
        })
        .collect()
}

/// Runs `workload` on `volume`, a `sync` every `sync_every` operations,
/// keeping `history` to the trees a cut may leave; returns the last tree.
/// Every other sync is split as the mount's group commit splits it: the
/// commit made, one more operation run, then the flushes — that
/// operation's changes (blocks freed before the commit, data written in
/// place) must not reach a cut ahead of the commit.
pub fn run_with_syncs(volume: &mut Volume, workload: &[Op], history: &Mutex<History>, sync_every: usize) -> Model {
    let mut model = Model::from([("/".to_string(), Node::Dir)]);
    // (The sync, and the index of the first tree it acknowledges.)
    let mut split: Option<(csumfs::PendingSync, usize)> = None;
    for (step, op) in workload.iter().enumerate() {
        volume.begin();
        history.lock().unwrap().in_flight = data_target(&model, op);
        let result = super::model::apply(volume, &mut model, op, step);
        result.unwrap_or_else(|e| panic!("step {step}: {e}"));
        // The operation's end may commit (and checkpoint): its tree is one
        // a cut from then on may leave.
        let mut h = history.lock().unwrap();
        h.trees.push(model.clone());
        h.in_flight = None;
        drop(h);
        volume.end(true).unwrap();
        if let Some((pending, first)) = split.take() {
            let durable = pending.wait().unwrap();
            volume.finish_sync(durable).unwrap();
            history.lock().unwrap().trees.drain(..first);
        }
        if step % sync_every == sync_every - 1 {
            if (step / sync_every).is_multiple_of(2) {
                let first = history.lock().unwrap().trees.len() - 1;
                split = Some((volume.start_sync().unwrap(), first));
                continue;
            }
            volume.sync().unwrap();
            // Acknowledged: older trees are no longer acceptable.
            history.lock().unwrap().trees = vec![model.clone()];
        }
    }
    if let Some((pending, _)) = split.take() {
        let durable = pending.wait().unwrap();
        volume.finish_sync(durable).unwrap();
    }
    model
}

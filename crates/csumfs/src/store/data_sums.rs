//! Data checksums (the async data checksums' store): a CRC32C of every file data block
//! csumfs writes, kept in `csumkit::csum_tree`'s copy-on-write tree in a
//! file beside the image (`IMAGE.csums`), committed at every sync after
//! the image's own data is durable — or, with a ByteLog, carried by its
//! commits and committed to the sidecar at checkpoints. Reads of a block with a checksum
//! verify it and fail with `EIO` on a mismatch, as btrfs does; `scrub`
//! verifies every file offline.
//!
//! Data is written in place, so between two commits a block's recorded
//! checksum can be older than its data. Before blocks whose checksum may
//! be durable (they have one, or lost it since the last commit) are
//! written in place, the 1 MiB regions around them go on an intent list in
//! the sidecar's header, made durable (`fdatasync`) before the data write
//! is issued — the page cache may write the data back at any moment after
//! it; a region already listed costs nothing, and blocks without a
//! checksum (new files) need no entry. A commit empties the list (with a
//! ByteLog, a checkpoint, or a log commit once the list spans more than
//! 256 MiB: see `INTENT_KEEP_BYTES`). When the
//! process dies or the power fails in between, the next open forgets the
//! checksum of each listed block whose data no longer matches it (it reads
//! unverified until rewritten) instead of failing good data, and keeps the
//! others.
//!
//! The sidecar's first bytes hold what ties it to the image: the image's
//! UUID, its last mount and write times and its lifetime writes
//! (`s_kbytes_written`). The kernel updates those when it mounts the
//! image; a sidecar that no longer matches is stale, and is started
//! afresh (with a line on stderr) rather than failing good data.

use crate::error::Error;
use crate::ranges::RangeSet;
use crate::stats::Stats;
use csumkit::crc32c;
use csumkit::csum_tree::{ChecksumTree, NodeStore, NODE_BYTES};
use csumkit::le::le64;
use std::os::unix::fs::FileExt;
use std::path::Path;

const MAGIC: &[u8; 8] = b"CSFSDSUM";

/// The tree and its file.
pub(crate) struct DataSums {
    pub(crate) tree: ChecksumTree,
    pub(crate) store: FileStore,
    /// Updates not yet committed.
    pub(crate) dirty: bool,
    /// Runs of blocks written (or about to be) since the last commit, as
    /// also recorded in the sidecar's header before the data is stored: a
    /// process that dies before the next commit leaves their old checksums
    /// behind, and the next open forgets those rather than fail good data.
    pub(crate) intent: Vec<(u64, u64)>,
    /// With a ByteLog: checksum changes (`None`: forgotten) since its last
    /// commit, which carries them; the tree itself is committed at
    /// checkpoints.
    pub(crate) logged: Option<crate::store::logged_sums::LoggedSums>,
    /// Blocks whose checksum was forgotten (freed) since the last commit:
    /// the durable tree or log may still hold it.
    pub(crate) freed: RangeSet,
    /// Bumped whenever `intent` or `freed` grows or a block is written in
    /// place: a ByteLog commit's end empties them only when nothing of
    /// that came after it was staged.
    pub(crate) version: u64,
    /// Checksums a write's whole blocks while the write goes on (the async data
    /// checksums' overlap): started for the first piece large enough.
    pub(crate) helper: Option<std::sync::Arc<crate::store::crc_helper::CrcHelper>>,
    /// Blocks whose checksum this process has seen match (`txn/part_write.rs`).
    pub(crate) known_good: KnownGood,
}

/// The span an intent-list entry covers at least: random overwrites into
/// a region already listed need no new entry (and no flush).
pub(crate) const INTENT_REGION_BYTES: u64 = 1 << 20;

/// How much of the volume a log commit leaves on the intent list (it
/// empties a longer one), so random overwrites in place without a sync do
/// not announce their regions anew after each commit. The price is
/// after a crash only: the listed blocks that no longer match their
/// checksum are forgotten, in regions written up to one checkpoint
/// (`CHECKPOINT_AGE`) ago rather than one commit ago.
const INTENT_KEEP_BYTES: u64 = 256 << 20;

/// Tree nodes at 4 KiB slots of the sidecar; the tree's flushes are
/// `fdatasync`s (its superblock never names nodes that are not durable).
pub(crate) struct FileStore {
    file: Box<dyn csumkit::DurableFile>,
}

/// Node slot where the tree's area starts (its two superblock slots; the
/// slots before are the header: the identity, then the intent list).
const TREE_START: u64 = 16;
/// Where the intent list's count and runs are in the header.
const INTENT_COUNT_AT: u64 = 48;
const INTENT_AT: u64 = 64;
/// Runs (first block u64, blocks u64) the intent list holds.
pub(crate) const INTENT_RUNS: usize = ((TREE_START as usize * NODE_BYTES) - INTENT_AT as usize) / 16;

impl NodeStore for FileStore {
    fn write(&mut self, location: u64, node: &[u8; NODE_BYTES]) -> Result<(), csumkit::Error> {
        let io = |e: std::io::Error| csumkit::Error::Io { context: "checksum sidecar".into(), source: e };
        self.file.write_all_at(node, location * NODE_BYTES as u64).map_err(io)
    }

    fn flush(&mut self) -> Result<(), csumkit::Error> {
        let io = |e: std::io::Error| csumkit::Error::Io { context: "checksum sidecar".into(), source: e };
        self.file.sync_data().map_err(io)
    }

    fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), csumkit::Error> {
        let io = |e: std::io::Error| csumkit::Error::Io { context: "checksum sidecar".into(), source: e };
        self.file.read_exact_at(node, location * NODE_BYTES as u64).map_err(io)
    }
}

impl FileStore {
    /// Stores intent run `i` (and the run count, when given: after the run).
    pub(crate) fn write_intent(&mut self, i: usize, (start, len): (u64, u64), count: Option<u64>) -> Result<(), Error> {
        let io = |source| Error::Io { context: "checksum sidecar intent list".into(), source };
        let mut run = [0u8; 16];
        run[..8].copy_from_slice(&start.to_le_bytes());
        run[8..].copy_from_slice(&len.to_le_bytes());
        self.file.write_all_at(&run, INTENT_AT + 16 * i as u64).map_err(io)?;
        if let Some(count) = count {
            self.file.write_all_at(&count.to_le_bytes(), INTENT_COUNT_AT).map_err(io)?;
        }
        Ok(())
    }

    /// Makes the intent list durable before the data it announces.
    pub(crate) fn flush_intent(&mut self) -> Result<(), Error> {
        let io = |source| Error::Io { context: "checksum sidecar intent list".into(), source };
        self.file.sync_data().map_err(io)
    }

    fn clear_intent(&mut self) -> Result<(), Error> {
        let io = |source| Error::Io { context: "checksum sidecar intent list".into(), source };
        self.file.write_all_at(&0u64.to_le_bytes(), INTENT_COUNT_AT).map_err(io)
    }
}

/// What in the image's superblock ties a sidecar to it.
pub(crate) fn identity(image: &[u8]) -> [u8; 48] {
    let sb = &image[1024..2048];
    let mut id = [0u8; 48];
    id[..8].copy_from_slice(MAGIC);
    id[8..24].copy_from_slice(&sb[0x68..0x78]); // s_uuid
    id[24..28].copy_from_slice(&sb[0x2C..0x30]); // s_mtime
    id[28..32].copy_from_slice(&sb[0x30..0x34]); // s_wtime
    id[32..40].copy_from_slice(&sb[0x178..0x180]); // s_kbytes_written
    id[40..44].copy_from_slice(&sb[0x34..0x38]); // s_mnt_count, s_max_mnt_count
    id
}

/// Marks the data checksum sidecar at `path` stale, if there is one: what
/// a writer that does not keep it (`datasum=off`, a PI mount, `csumkit ext4
/// put`) does before writing, so that no block it rewrites fails an old
/// checksum later (the next open starts the sidecar afresh). True when a
/// sidecar was there.
///
/// # Errors
/// [`Error::Io`].
pub fn forget_data_checksums(path: &Path) -> Result<bool, Error> {
    let io = |source| Error::Io { context: path.display().to_string(), source };
    let file = match std::fs::OpenOptions::new().read(true).write(true).open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(io(e)),
    };
    let mut header = [0u8; 48];
    if file.read_exact_at(&mut header, 0).is_err() || header[..8] != *MAGIC || header[8..].iter().all(|&b| b == 0) {
        return Ok(false);
    }
    file.write_all_at(&[0u8; 40], 8).map_err(io)?;
    file.sync_data().map_err(io)?;
    Ok(true)
}

/// The intent-list runs to add for data at the byte ranges `logged`: the
/// `region`-block regions around their blocks (`bs` bytes each, a volume
/// of `blocks`) that no run of `listed` covers whole, each once, merged
/// with the run before when adjacent.
pub(crate) fn regions_to_list(
    logged: &[(usize, usize)],
    listed: &[(u64, u64)],
    bs: u64,
    region: u64,
    blocks: u64,
) -> Vec<(u64, u64)> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &(start, end) in logged {
        let first = start as u64 / bs / region * region;
        let end = ((end as u64).div_ceil(bs).div_ceil(region) * region).min(blocks);
        for at in (first..end).step_by(region as usize) {
            let len = region.min(end - at);
            if listed.iter().chain(&runs).any(|&(s, l)| s <= at && at + len <= s + l) {
                continue;
            }
            match runs.last_mut() {
                Some(last) if last.0 + last.1 == at => last.1 += len,
                _ => runs.push((at, len)),
            }
        }
    }
    runs
}

impl DataSums {
    /// Opens the sidecar in `file` (named `path` in messages) for the image
    /// `image` of geometry `layout`: created afresh when it belongs to
    /// another image or is stale (`write`; read-only, `None`), with the
    /// checksum changes a ByteLog replay found (`replayed`) set over its
    /// tree and the blocks its intent list names that no longer match
    /// their checksums forgotten. Returns the store, whether the intent
    /// list held anything, and how many checksums were forgotten.
    pub(crate) fn open(
        file: Box<dyn csumkit::DurableFile>,
        path: &Path,
        image: &[u8],
        layout: &csumkit::ext4::Layout,
        write: bool,
        replayed: &[(u64, Option<u32>)],
        logged: bool,
    ) -> Result<Option<(DataSums, bool, u64)>, Error> {
        let (blocks, bs) = (layout.blocks_count, layout.block_size as usize);
        let io = |source| Error::Io { context: path.display().to_string(), source };
        let area = ChecksumTree::area_blocks_for(blocks);
        let len = (TREE_START + area) * NODE_BYTES as u64;
        let id = identity(image);
        let mut header = [0u8; 48];
        let fresh = file.size().map_err(io)? != len || file.read_exact_at(&mut header, 0).is_err() || header != id;
        if fresh {
            let stale = header[..8] == *MAGIC;
            if !write {
                if stale {
                    eprintln!("csumfs: {}: the image was written since by another driver; not used", path.display());
                }
                return Ok(None);
            }
            if stale {
                eprintln!(
                    "csumfs: {}: the image was written since by another driver; data checksums start afresh",
                    path.display()
                );
            }
            file.set_len(0).map_err(io)?;
            file.set_len(len).map_err(io)?;
            file.write_all_at(&id, 0).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        let mut store = FileStore { file };
        let mut tree = ChecksumTree::open(&mut store, blocks, TREE_START, area)?;
        // What a ByteLog replay carried is newer than the tree…
        for &(block, crc) in replayed.iter().filter(|(b, _)| *b < blocks) {
            match crc {
                Some(crc) => tree.update(block, crc),
                None => tree.remove(block),
            }
        }
        // …and blocks a dead process was writing after that have checksums
        // nobody knows.
        let mut count = [0u8; 8];
        store.file.read_exact_at(&mut count, INTENT_COUNT_AT).map_err(io)?;
        let count = (u64::from_le_bytes(count) as usize).min(INTENT_RUNS);
        let mut runs = vec![0u8; count * 16];
        store.file.read_exact_at(&mut runs, INTENT_AT).map_err(io)?;
        let mut forgotten = 0;
        // Each block once, in order, however the runs overlap: a damaged
        // list of long runs would walk the volume once per run.
        let mut listed: Vec<(u64, u64)> = runs
            .chunks_exact(16)
            .map(|run| (le64(run, 0).min(blocks), le64(run, 0).saturating_add(le64(run, 8)).min(blocks)))
            .collect();
        // Kept in memory as on the sidecar, in its order: what empties the
        // list empties the sidecar's too (a checkpoint, at the latest the one
        // after a replay), and a run added goes after these.
        let intent: Vec<(u64, u64)> = listed.iter().map(|&(start, end)| (start, end.saturating_sub(start))).collect();
        listed.sort_unstable();
        let mut next = 0;
        for (start, end) in listed {
            let from = start.max(next);
            next = next.max(end);
            for b in from..end {
                let Some(want) = tree.get(b) else { continue };
                // A block the write never reached (or left as it was)
                // still matches: its checksum stands.
                let data = image.get(b as usize * bs..(b as usize + 1) * bs);
                if data.is_some_and(|d| crc32c::checksum(d) == want) {
                    continue;
                }
                tree.remove(b);
                forgotten += 1;
            }
        }
        let logged = logged.then(crate::store::logged_sums::LoggedSums::default);
        let dirty = count > 0 || !replayed.is_empty();
        let freed = RangeSet::default();
        let known_good = KnownGood::new(blocks);
        let sums = DataSums { tree, store, dirty, intent, logged, freed, version: 0, helper: None, known_good };
        Ok(Some((sums, count > 0, forgotten)))
    }
}

/// Commits the tree to the sidecar, if it changed (the image's data being
/// durable already). Without a ByteLog the intent list empties with it.
/// With one it stays until a log commit is durable
/// ([`DataSums::log_committed`]): until the log is emptied, a replay sets
/// the log's checksums over the tree's, and the list names the blocks
/// whose newer ones the tree holds and the log lacks — rewritten in place
/// since the last commit, written through the log but not yet in the image
/// ([`Volume::list_ahead_of_data`]), forgotten by a recovery.
pub(crate) fn commit(sums: &mut Option<DataSums>, stats: &Stats) -> Result<(), Error> {
    if let Some(sums) = sums {
        if sums.dirty {
            let wrote = sums.tree.commit(&mut sums.store)?;
            sums.dirty = false;
            sums.freed.clear();
            if sums.logged.is_none() {
                sums.intent.clear();
                sums.store.clear_intent()?;
            }
            Stats::bump(&stats.datasum_commits);
            Stats::add(&stats.datasum_commit_bytes, wrote.bytes);
        }
    }
    Ok(())
}

/// New checksums past which a commit writes the tree to the sidecar
/// instead of logging them: 4 KiB of them fill one log record, and each
/// record is made durable on its own (one flush each), where the tree's
/// commit costs two flushes whatever it holds.
const LOGGED_SUMS_MAX: usize = 4 * 1016;

impl DataSums {
    /// The thread that checksums pieces while they are written, started
    /// now if need be; `None` when it cannot be (pieces are then
    /// checksummed in line).
    pub(crate) fn crc_helper(&mut self) -> Option<std::sync::Arc<crate::store::crc_helper::CrcHelper>> {
        if self.helper.is_none() {
            self.helper = crate::store::crc_helper::CrcHelper::new().ok().map(std::sync::Arc::new);
        }
        self.helper.clone()
    }

    /// Adds `run` to the intent list, in memory and in the sidecar's
    /// header (durable at the next [`FileStore::flush_intent`]).
    pub(crate) fn push_intent(&mut self, run: (u64, u64)) -> Result<(), Error> {
        self.intent.push(run);
        self.store.write_intent(self.intent.len() - 1, run, Some(self.intent.len() as u64))
    }

    /// Whether the next commit should write the tree to the sidecar rather
    /// than log the checksum changes: many of them, and none a forgotten
    /// checksum (a block freed by metadata the log has not committed yet
    /// must keep its checksum until that commit).
    pub(crate) fn commits_tree_instead(&mut self) -> bool {
        self.logged.as_mut().is_some_and(|l| {
            let changes = l.changes();
            changes.len() > LOGGED_SUMS_MAX && changes.iter().all(|(_, crc)| crc.is_some())
        })
    }

    /// The checksum changes the next ByteLog commit carries; they stay
    /// until [`clear_logged`](Self::clear_logged) (a commit the log has no
    /// room for leaves them for the next).
    pub(crate) fn logged_changes(&mut self) -> &[(u64, Option<u32>)] {
        self.logged.as_mut().map_or(&[], |l| l.changes())
    }

    /// The changes [`logged_changes`](Self::logged_changes) gave are staged
    /// (the intent list and the freed blocks stay until the commit is
    /// durable: [`log_committed`](Self::log_committed)).
    pub(crate) fn clear_logged(&mut self) {
        if let Some(logged) = &mut self.logged {
            logged.clear();
        }
    }

    /// A count that grows whenever the intent list or the forgotten
    /// blocks do.
    pub(crate) fn version(&self) -> u64 {
        self.version
    }

    /// The ByteLog commit carrying the changes [`logged_changes`](Self::logged_changes) gave is
    /// durable (`checkpointed`: and folded into the image and the tree):
    /// blocks freed before it no longer have a durable checksum, and the
    /// blocks written before it may leave the intent list (their checksums
    /// are in the log). A log commit keeps a list of at most
    /// [`INTENT_KEEP_BYTES`] (and a quarter of its room) all the same, so
    /// that rewrites of the same regions after it need no new entry — each
    /// is a flush — until the next checkpoint empties it.
    pub(crate) fn log_committed(&mut self, checkpointed: bool, block_size: u64) -> Result<(), Error> {
        self.freed.clear();
        let listed: u64 = self.intent.iter().map(|&(_, len)| len).sum();
        let keep = listed.saturating_mul(block_size) <= INTENT_KEEP_BYTES && self.intent.len() <= INTENT_RUNS / 4;
        if !self.intent.is_empty() && (checkpointed || !keep) {
            self.intent.clear();
            self.store.clear_intent()?;
        }
        Ok(())
    }
}

/// Blocks whose recorded checksum this process has seen match their bytes,
/// with that checksum: an entry counts only while the tree still holds the
/// same checksum (any other change of the block's checksum, or its
/// forgetting, ends it without a lookup here). Direct-mapped and bounded:
/// a block whose slot another took is verified again.
pub(crate) struct KnownGood {
    /// `(block + 1, crc)`; `(0, _)` is an empty slot.
    slots: Vec<(u64, u32)>,
}

/// Slots at most: 1 MiB of record, every block of a volume of up to 64 Ki
/// blocks (4 GiB at 64 KiB blocks).
const KNOWN_GOOD_SLOTS: u64 = 1 << 16;

impl KnownGood {
    pub(crate) fn new(blocks: u64) -> Self {
        Self { slots: vec![(0, 0); blocks.clamp(1, KNOWN_GOOD_SLOTS) as usize] }
    }

    fn slot(&self, block: u64) -> usize {
        (block % self.slots.len() as u64) as usize
    }

    pub(crate) fn insert(&mut self, block: u64, crc: u32) {
        let i = self.slot(block);
        self.slots[i] = (block + 1, crc);
    }

    pub(crate) fn holds(&self, block: u64, crc: u32) -> bool {
        self.slots[self.slot(block)] == (block + 1, crc)
    }
}

#[cfg(test)]
mod tests {
    use super::regions_to_list;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Against a model of regions: the runs cover exactly the regions
        /// around the logged blocks that no listed run covers whole —
        /// every logged block covered, nothing else added, no block twice.
        #[test]
        fn the_runs_listed_are_the_uncovered_regions_of_the_logged_blocks(
            bs in prop::sample::select(vec![1024u64, 4096, 65536]),
            region in 1u64..40,
            blocks in 1u64..400,
            logged in prop::collection::vec((0usize..400, 1usize..3), 0..8),
            listed in prop::collection::vec((0u64..400, 1u64..90), 0..5),
        ) {
            let logged: Vec<(usize, usize)> = logged
                .iter()
                .map(|&(b, n)| (b * bs as usize + b % 7, (b + n) * bs as usize - b % 5))
                .filter(|&(s, e)| s < e && (e as u64).div_ceil(bs) <= blocks)
                .collect();
            let runs = regions_to_list(&logged, &listed, bs, region, blocks);
            let span = |r: u64| (r * region, ((r + 1) * region).min(blocks));
            let covered_whole = |r: u64| {
                let (s, e) = span(r);
                listed.iter().any(|&(a, l)| a <= s && e <= a + l)
            };
            let wanted: BTreeSet<u64> = logged
                .iter()
                .flat_map(|&(s, e)| (s as u64 / bs..(e as u64).div_ceil(bs)).map(|b| b / region))
                .filter(|&r| !covered_whole(r))
                .flat_map(|r| { let (s, e) = span(r); s..e })
                .collect();
            let mut got = BTreeSet::new();
            for &(start, len) in &runs {
                prop_assert!(len > 0 && start % region == 0, "run {start}+{len} of {runs:?}");
                for b in start..start + len {
                    prop_assert!(got.insert(b), "block {b} twice in {runs:?}");
                }
            }
            prop_assert_eq!(got, wanted, "runs {:?}", runs);
            // Adjacent regions listed one after the other are one run.
            for pair in runs.windows(2) {
                prop_assert!(pair[0].0 + pair[0].1 != pair[1].0, "{runs:?} not merged");
            }
        }
    }
}

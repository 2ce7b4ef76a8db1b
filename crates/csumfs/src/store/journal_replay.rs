//! What the kernel left in an image's jbd2 journal, put where it belongs.
//! [`plan`] reads the log (`csumkit::ext4::jbd2::recover`) and lists the
//! writes recovery makes, in `e2fsck -E journal_only`'s order: each
//! block's newest committed copy home, a flush, the journal superblock
//! emptied (`s_start` 0, `s_sequence` past the last transaction), a flush,
//! then `needs_recovery` cleared in the superblock, a flush. A crash
//! anywhere in it leaves either the journal as it was — replayed again
//! from the start, its blocks rewritten with the same bytes — or an empty
//! journal under `needs_recovery`, which only has the bit to clear.
//! [`apply`] makes those writes on a [`ReplayMedium`]: a private copy of
//! the image (a read-only open: the file keeps every byte) or the file.
//! Fast commits after the log are found here and replayed above the
//! volume (`txn/journal.rs`).

use crate::error::Error;
use crate::format::features::superblock_with_incompat;
use csumkit::ext4::feature_bits::INCOMPAT_RECOVER;
use csumkit::ext4::fields::{
    BG_FREE_BLOCKS_HI, BG_FREE_BLOCKS_LO, BG_FREE_INODES_HI, BG_FREE_INODES_LO, S_FEATURE_INCOMPAT, S_FREE_BLOCKS_HI,
    S_FREE_BLOCKS_LO, S_FREE_INODES,
};
use csumkit::ext4::jbd2::{fast_commit, superblock_checksum, Journal, Recovery, Replay};
use csumkit::ext4::Layout;
use csumkit::le::{le16, le32, put32};

/// Whether the superblock in `image` says its journal holds transactions
/// not yet written home — or was being marked so or unmarked when a power
/// cut tore it: the flag is in its first 512-byte sector and its checksum
/// in the second, so a superblock without the flag whose checksum is the
/// one it would have with it is one of those (every other byte proven by
/// that checksum). Recovering either is right: it reseals the superblock.
pub(crate) fn needs_recovery(image: &[u8]) -> bool {
    if image.len() < 2048 {
        return false;
    }
    let sb = &image[1024..2048];
    let torn = || le32(sb, 0x3FC) == le32(&superblock_with_incompat(sb, INCOMPAT_RECOVER, 0), 0x3FC);
    le32(sb, S_FEATURE_INCOMPAT) & INCOMPAT_RECOVER != 0 || torn()
}

/// The kernel's journal replayed into an image: how much, and where.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JournalReplayed {
    /// Committed transactions replayed.
    pub transactions: u32,
    /// Filesystem blocks written with their newest logged copy.
    pub blocks: usize,
    /// Fast-commit records replayed after them.
    pub fast_commit_records: usize,
    /// Written into the image file (a read-write open, `csumkit ext4
    /// recover`), not into a private copy of it (a read-only open).
    pub in_place: bool,
}

/// One write of a replay, or a flush between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// A filesystem block's newest copy, read from the log as it is applied.
    Home(u64, Replay),
    /// These bytes at this offset (the journal superblock, the superblock).
    Bytes(u64, Vec<u8>),
    /// Everything written so far made durable before going on.
    Flush,
}

/// A replay worked out before it writes anything.
#[derive(Debug)]
pub(crate) struct Plan {
    journal: Journal,
    pub(crate) recovery: Recovery,
    pub(crate) steps: Vec<Step>,
    block_size: u64,
    /// The fast commits after the log, to replay once its blocks are home
    /// (`txn/fast_commit.rs`).
    pub(crate) fast: Vec<fast_commit::Record>,
}

impl Plan {
    /// What the plan replays.
    pub(crate) fn replayed(&self, in_place: bool) -> JournalReplayed {
        JournalReplayed {
            transactions: self.recovery.transactions(),
            blocks: self.recovery.blocks.len(),
            fast_commit_records: self.fast.len(),
            in_place,
        }
    }

    /// The journal it replays.
    pub(crate) fn journal(&self) -> &Journal {
        &self.journal
    }
}

/// Where a replay writes: the image's bytes, written and flushed.
pub(crate) trait ReplayMedium {
    fn bytes(&self) -> &[u8];
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<(), Error>;
    fn flush(&mut self) -> Result<(), Error>;
}

/// The replay of `image`'s journal, when its superblock says
/// `needs_recovery`.
///
/// # Errors
/// `Error::Format` for a journal recovery must not trust (named by
/// `csumkit::ext4::jbd2`: which journal block, which transaction), or an
/// image without the journal its superblock says it has.
pub(crate) fn plan(image: &[u8]) -> Result<Option<Plan>, Error> {
    if !needs_recovery(image) {
        return Ok(None);
    }
    let layout = Layout::parse(image)?;
    let Some(journal) = Journal::open(image, &layout)? else {
        return Err(crate::error::corrupt("journal", "the superblock says needs_recovery, but there is no journal"));
    };
    let recovery = journal.recover(image, layout.blocks_count)?;
    if let Some(id) = recovery.failed_commit {
        return Err(crate::error::corrupt(
            "journal",
            format!(
                "the commit block of transaction {id} fails its checksum: the kernel refuses this journal (e2fsck \
                 -fy replays the transactions before it and checks the rest)"
            ),
        ));
    }
    // An empty log has no fast commits after it (jbd2_journal_recover
    // returns before looking).
    let fast = if journal.superblock.start == 0 {
        Vec::new()
    } else {
        fast_commit::scan(&journal, image, recovery.end_transaction, layout.inode_size as usize)?.replay
    };
    let bs = layout.block_size;
    let sb_block = 1024 / bs;
    let mut steps = Vec::with_capacity(recovery.blocks.len() + 5);
    // The superblock as recovery leaves it: its logged copy, if any —
    // written home still saying needs_recovery, whatever the copy says, so
    // a replay stopped after it is begun again.
    let mut superblock = image[1024..2048].to_vec();
    for (&block, &replay) in &recovery.blocks {
        if block != sb_block {
            steps.push(Step::Home(block, replay));
            continue;
        }
        let mut copy = journal.replayed(image, replay)?;
        let at = (1024 % bs) as usize;
        superblock.copy_from_slice(&copy[at..at + 1024]);
        copy[at..at + 1024].copy_from_slice(&superblock_with_incompat(&superblock, INCOMPAT_RECOVER, 0));
        steps.push(Step::Bytes(block * bs, copy));
    }
    if journal.superblock.start != 0 {
        steps.push(Step::Flush);
        let at = journal.blocks[0] * bs;
        let mut jsb = image[at as usize..][..bs as usize].to_vec();
        // e2fsck's release of a recovered journal: empty, and the next
        // transaction one past the end of the log (jbd2_journal_recover's
        // `++info.end_transaction`).
        jsb[0x18..0x1C].copy_from_slice(&recovery.end_transaction.wrapping_add(1).to_be_bytes());
        jsb[0x1C..0x20].copy_from_slice(&0u32.to_be_bytes());
        if journal.superblock.csum_v2_or_v3() {
            let crc = superblock_checksum(&jsb);
            jsb[0xFC..0x100].copy_from_slice(&crc.to_be_bytes());
        }
        steps.push(Step::Bytes(at, jsb));
    }
    // The free counts from the replayed descriptors: the kernel keeps the
    // superblock's in memory while mounted (its next mount sums them the
    // same way, and e2fsck -f sets them so).
    let (free_blocks, free_inodes) = free_counts(image, &layout, &journal, &recovery)?;
    put32(&mut superblock, S_FREE_BLOCKS_LO, free_blocks as u32);
    put32(&mut superblock, S_FREE_BLOCKS_HI, (free_blocks >> 32) as u32);
    put32(&mut superblock, S_FREE_INODES, free_inodes as u32);
    steps.push(Step::Flush);
    steps.push(Step::Bytes(1024, superblock_with_incompat(&superblock, 0, INCOMPAT_RECOVER)));
    steps.push(Step::Flush);
    Ok(Some(Plan { journal, recovery, steps, block_size: bs, fast }))
}

/// The sums of the group descriptors' free block and inode counts, as
/// the journal's replay leaves the descriptors.
fn free_counts(image: &[u8], layout: &Layout, journal: &Journal, recovery: &Recovery) -> Result<(u64, u64), Error> {
    let (bs, ds) = (layout.block_size, layout.desc_size as usize);
    let wide = layout.desc_size >= 64;
    let mut replayed: Option<(u64, Vec<u8>)> = None;
    let (mut blocks, mut inodes) = (0u64, 0u64);
    for &at in &layout.desc_offsets {
        let block = at / bs;
        let offset = (at % bs) as usize;
        let desc: &[u8] = match recovery.blocks.get(&block) {
            Some(&replay) => {
                if replayed.as_ref().is_none_or(|(b, _)| *b != block) {
                    replayed = Some((block, journal.replayed(image, replay)?));
                }
                &replayed.as_ref().expect("just read").1[offset..offset + ds]
            }
            None => &image[at as usize..at as usize + ds],
        };
        let hi =
            |lo: usize, hi: usize| u64::from(le16(desc, lo)) | if wide { u64::from(le16(desc, hi)) << 16 } else { 0 };
        blocks += hi(BG_FREE_BLOCKS_LO, BG_FREE_BLOCKS_HI);
        inodes += hi(BG_FREE_INODES_LO, BG_FREE_INODES_HI);
    }
    // Clusters, with bigalloc: the superblock counts blocks.
    Ok((blocks * (layout.blocks_per_group / layout.clusters_per_group), inodes))
}

/// Makes the plan's writes on `medium`, in order.
///
/// # Errors
/// The medium's; `Error::Format` for a log block outside the image.
pub(crate) fn apply(plan: &Plan, medium: &mut (impl ReplayMedium + ?Sized)) -> Result<(), Error> {
    for step in &plan.steps {
        match step {
            Step::Home(block, replay) => {
                let bytes = plan.journal.replayed(medium.bytes(), *replay)?;
                medium.write(block * plan.block_size, &bytes)?;
            }
            Step::Bytes(at, bytes) => medium.write(*at, bytes)?,
            Step::Flush => medium.flush()?,
        }
    }
    Ok(())
}

/// An image in memory (a private copy, a test's buffer): flushes are
/// nothing.
impl ReplayMedium for [u8] {
    fn bytes(&self) -> &[u8] {
        self
    }
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<(), Error> {
        let at = at as usize;
        self.get_mut(at..at + bytes.len())
            .ok_or_else(|| crate::error::corrupt("journal", format!("a replay write at byte {at} is past the image")))?
            .copy_from_slice(bytes);
        Ok(())
    }
    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// The image file, mapped shared: a flush is `msync`, durable on return.
pub(crate) struct FileMedium<'a> {
    pub(crate) map: memmap2::MmapMut,
    pub(crate) path: &'a std::path::Path,
}

impl ReplayMedium for FileMedium<'_> {
    fn bytes(&self) -> &[u8] {
        &self.map
    }
    fn write(&mut self, at: u64, bytes: &[u8]) -> Result<(), Error> {
        self.map[..].write(at, bytes)
    }
    fn flush(&mut self) -> Result<(), Error> {
        self.map.flush().map_err(|source| Error::Io { context: self.path.display().to_string(), source })
    }
}

#[cfg(test)]
mod tests {
    use super::{apply, needs_recovery, plan, ReplayMedium};
    use crate::error::Error;

    fn corpus_image(name: &str) -> Vec<u8> {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../csumkit/tests/data/jbd2/{name}.img.gz"));
        let out = std::process::Command::new("gzip").arg("-dc").arg(&path).output().unwrap();
        assert!(out.status.success(), "gzip -dc {}", path.display());
        out.stdout
    }

    enum Op {
        Write(u64, Vec<u8>),
        Flush,
    }

    /// An image that remembers each write and flush made on it.
    struct Recorder {
        bytes: Vec<u8>,
        ops: Vec<Op>,
    }

    impl ReplayMedium for Recorder {
        fn bytes(&self) -> &[u8] {
            &self.bytes
        }
        fn write(&mut self, at: u64, bytes: &[u8]) -> Result<(), Error> {
            self.bytes.write(at, bytes)?;
            self.ops.push(Op::Write(at, bytes.to_vec()));
            Ok(())
        }
        fn flush(&mut self) -> Result<(), Error> {
            self.ops.push(Op::Flush);
            Ok(())
        }
    }

    fn recovered(mut image: Vec<u8>) -> Vec<u8> {
        if let Some(plan) = plan(&image).unwrap() {
            apply(&plan, &mut image[..]).unwrap();
        }
        image
    }

    /// A power cut at every point of a replay in place near its flushes (a
    /// spread of points among its block writes), with every subset (past
    /// four, a spread of subsets) of the writes since the last flush
    /// reaching the disk: the image still needs recovery or is fully
    /// recovered, and recovering it again gives exactly the image an
    /// uninterrupted replay gives.
    #[test]
    fn a_replay_cut_anywhere_replays_again_to_the_same_image() {
        for name in ["v3-1k", "wrap-1k", "revoke-4k"] {
            let image = corpus_image(name);
            let plan = plan(&image).unwrap().expect("needs recovery");
            let mut recorder = Recorder { bytes: image.clone(), ops: Vec::new() };
            apply(&plan, &mut recorder).unwrap();
            let full = recorder.bytes;
            assert!(!needs_recovery(&full), "{name}");
            let ops = recorder.ops;
            let mut rng = 0x2545_F491_4F6C_DD1Du64;
            let mut states = 0;
            // Every cut near a flush; a spread of cuts among the block
            // writes before the first (each state copies the image).
            let first_flush = ops.iter().position(|o| matches!(o, Op::Flush)).unwrap();
            let spread = (first_flush / 12).max(1);
            let cuts = (0..=ops.len()).filter(|&c| c >= first_flush.saturating_sub(2) || c % spread == 0);
            for cut in cuts {
                let last_flush = ops[..cut].iter().rposition(|o| matches!(o, Op::Flush)).map_or(0, |f| f + 1);
                let mut durable = image.clone();
                for op in &ops[..last_flush] {
                    if let Op::Write(at, bytes) = op {
                        durable.as_mut_slice().write(*at, bytes).unwrap();
                    }
                }
                let pending: Vec<&Op> = ops[last_flush..cut].iter().collect();
                let n = pending.len();
                let subsets: Vec<u64> = if n <= 4 {
                    (0..1u64 << n).collect()
                } else {
                    let all = (1u64 << n.min(63)) - 1;
                    let mut s = vec![0, all, all >> 1, all & !1];
                    s.extend((0..4).map(|_| {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        rng & all
                    }));
                    s
                };
                for subset in subsets {
                    let mut state = durable.clone();
                    for (i, op) in pending.iter().enumerate() {
                        if let Op::Write(at, bytes) = op {
                            if i < 64 && subset >> i & 1 == 1 {
                                state.as_mut_slice().write(*at, bytes).unwrap();
                            }
                        }
                    }
                    assert!(
                        needs_recovery(&state) || state == full,
                        "{name}: cut after {cut} ops (subset {subset:#x}): recovery is not marked, yet the image is \
                         not recovered"
                    );
                    assert!(recovered(state) == full, "{name}: cut after {cut} ops (subset {subset:#x})");
                    states += 1;
                }
            }
            assert!(states > 100, "{name}: {states} crash states");
        }
    }
}

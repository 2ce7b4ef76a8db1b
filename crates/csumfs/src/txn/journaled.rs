//! A volume whose commits go to the image's own jbd2 journal
//! (`store/image_journal.rs`) rather than a ByteLog beside it: opening
//! one, folding its journal home when a commit does not fit, and what the
//! data checksums need when the log cannot carry them.
//!
//! The kernel's and e2fsck's recoveries replay jbd2 transactions, not
//! csumfs's checksum records, so the data checksums' changes stay in
//! memory until a checkpoint commits the sidecar's tree (after the image
//! is synced); until then every block written — in place or through the
//! journal — is on the sidecar's intent list before its new bytes can be
//! durable, so a crash forgets the checksums it made stale instead of
//! failing good data.

use crate::error::Error;
use crate::stats::Stats;
use crate::store::bytes::Bytes;
use crate::store::data_sums::{commit, INTENT_RUNS};
use crate::store::image_journal::ImageJournal;
use crate::store::log_writer::Log;
use crate::store::medium::Backing;
use crate::store::redo_log::{io, log_pending};
use crate::volume::Volume;
use csumkit::ext4::feature_bits::INCOMPAT_RECOVER;
use std::path::Path;
use std::time::Instant;

impl Volume {
    /// Opens the image at `path` for writing with its commits in its own
    /// jbd2 journal: what the journal holds (the kernel's, or a stopped
    /// csumfs's) is recovered first. `sidecar`: data checksums kept there.
    ///
    /// # Errors
    /// As [`Volume::open`]; [`Error::Invalid`] for an image whose ByteLog
    /// still holds changes (`csumkit ext4 checkpoint` first) or whose
    /// journal csumfs does not write (none, external, not `csum_v3`).
    pub fn open_journaled(path: &Path, options: crate::Options, sidecar: Option<&Path>) -> Result<Volume, Error> {
        let io_at = |source| Error::Io { context: path.display().to_string(), source };
        let file = csumkit::file::open_image(path, true)?;
        let image_lock = crate::store::image_lock::ImageLock::take(&file, path, true)?;
        let journal_replayed = crate::txn::journal::recover_held(&file, path)?;
        let map = crate::store::private_map::PrivateMap::new(&file).map_err(io_at)?;
        if log_pending(map.bytes()) {
            return Err(Error::Invalid(format!(
                "{}: its ByteLog holds changes the image lacks: `csumkit ext4 checkpoint {}` replays it first",
                path.display(),
                path.display()
            )));
        }
        let mmp = crate::MultiMountProtection::take(&file, path, map.bytes())?;
        let mut volume = Volume::new(Bytes::Private(map), crate::Options { write: true, ..options })?;
        volume.image_lock = image_lock;
        volume.mmp = mmp;
        volume.journal_replayed = journal_replayed;
        let second = file.try_clone().map_err(io_at)?;
        volume.enable_image_journal(Box::new(file), Box::new(second))?;
        volume.redo.as_mut().expect("enabled above").log_on = Some(crate::store::medium::LOG_IN_IMAGE_JOURNAL);
        if let Some(sidecar) = sidecar {
            volume.enable_data_checksums(sidecar)?;
        }
        Ok(volume)
    }

    /// Commits this writable volume's changes to the journal of its image
    /// from now on, the image file being `backing` and `journal` a second
    /// handle of it (or, in tests, the same simulated disk); the journal
    /// must be empty — recovered — as the volume's bytes show it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a journal csumfs does not write or one that
    /// needs recovery; [`Error::Io`] from the backing.
    pub fn enable_image_journal(&mut self, backing: Box<dyn Backing>, journal: Box<dyn Backing>) -> Result<(), Error> {
        let mut journal = ImageJournal::open(journal, &self.map)?
            .map_err(|reason| Error::Invalid(format!("csumfs cannot write the image's journal: {reason}")))?;
        let mut backing = backing;
        if journal.clear_stale_fast_commits()? {
            backing.sync().map_err(io("fdatasync of the image"))?;
        }
        let log_bytes = journal.log_bytes();
        let superblock = self.map[1024..2048].to_vec();
        self.start_redo(backing, Log::Image(journal), Vec::new(), (false, INCOMPAT_RECOVER), log_bytes, superblock)
    }

    /// Why csumfs would not write the journal of `image` (none, external,
    /// neither `csum_v3` nor metadata_csum, too small); `None` when it would.
    pub fn image_journal_refusal(image: &[u8]) -> Option<String> {
        ImageJournal::writable(image).err()
    }

    /// Whether commits go to the image's own journal.
    pub fn journaled_in_image(&self) -> bool {
        self.redo.as_ref().is_some_and(|r| r.in_image)
    }

    /// Makes room in the image's journal: the newest logged copy of every
    /// block since the tail written home — read back from the journal, not
    /// the map, whose pages may hold changes not committed yet — the image
    /// synced, the data checksums' tree committed, the tail moved to the
    /// head. Pending changes stay pending.
    pub(super) fn fold_image_journal(&mut self) -> Result<bool, Error> {
        let bs = self.layout.block_size as usize;
        let redo = self.redo.as_mut().expect("a journaled volume");
        redo.writer().flush_all()?;
        let copies = redo.writer().image_journal().expect("a journaled volume").logged_copies()?;
        for (block, bytes) in &copies {
            redo.backing.write_at(*block * bs as u64, bytes).map_err(io("image"))?;
            if *block as usize == 1024 / bs {
                let at = 1024 % bs;
                let home =
                    crate::format::features::superblock_with_incompat(&bytes[at..at + 1024], 0, INCOMPAT_RECOVER);
                redo.image_superblock.copy_from_slice(&home);
            }
        }
        redo.backing.sync().map_err(io("fdatasync of the image"))?;
        redo.data_unsynced = false;
        commit(&mut self.datasums, &self.stats)?;
        let redo = self.redo.as_mut().expect("a journaled volume");
        redo.writer().image_journal().expect("a journaled volume").checkpointed(false)?;
        redo.committed.clear();
        redo.last_checkpoint = Instant::now();
        Stats::bump(&self.stats.log_checkpoints);
        self.hand_back_all_but_pending();
        Ok(true)
    }

    /// File data at `[at, at + len)` of the image is to go through the
    /// image's journal: blocks of it with a durable checksum go on the
    /// intent list first (the log cannot carry their new checksums).
    pub(super) fn announce_journaled_data(&mut self, at: usize, len: usize) -> Result<(), Error> {
        if !self.journaled_in_image() || self.datasums.is_none() || len == 0 {
            return Ok(());
        }
        let bs = self.layout.block_size as usize;
        self.data_will_write((at / bs) as u64, ((at + len).div_ceil(bs) - at / bs) as u64)
    }

    /// After a commit to the image's journal is durable: a long intent
    /// list is emptied by committing the data checksums' tree, once the
    /// image's data is durable — not while data waits in memory for the
    /// next commit (the tree would name bytes the disk lacks).
    pub(super) fn after_journal_commit(&mut self) -> Result<(), Error> {
        let redo = self.redo.as_mut().expect("a journaled volume");
        if !redo.logged_data.is_empty() || self.datasums.as_ref().is_none_or(|s| s.intent.len() < INTENT_RUNS / 2) {
            return Ok(());
        }
        redo.backing.sync().map_err(io("fdatasync of the image"))?;
        commit(&mut self.datasums, &self.stats)
    }
}

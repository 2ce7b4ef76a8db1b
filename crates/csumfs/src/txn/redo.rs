//! The ByteLog's operations on the volume: opening an image with its log
//! (replaying what a stopped process left), turning the log on, storing
//! data through it, syncs and checkpoints. The log itself, its record
//! codec and what it holds are `store/redo_log.rs`.

use crate::error::{corrupt, Error};
use crate::format::features::{FC_BYTELOG, LOG_PENDING};
use crate::ranges::RangeSet;
use crate::stats::Stats;
use crate::store::bytes::Bytes;
use crate::store::data_sums::{commit, DataSums};
use crate::store::fc_bytelog::{area_medium, Area};
use crate::store::log_writer::{Log, Writer};
use crate::store::medium::{log_medium, AnyMedium, Backing, LogMedium, Nowhere, TAG_LAST, TAG_PART};
use crate::store::pi_device::{open_device, PiBacking};
use crate::store::private_map::PAGE;
use crate::store::redo_log::resize::{log_length_at_open, LogResize, GROWTH_UNIT};
use crate::store::redo_log::{
    clear_pending_bit, decode, held, io, log_in_fast_commit_area, log_pending, merged, write_committed, Change,
    DurableSync, PendingSync, Redo, Replayed, Versions, CHECKPOINT_AGE, CHECKPOINT_PAGES, COMMIT_AGE, COMMIT_BYTES,
    LOGGED_DATA_BYTES, WRITE_BEHIND_BYTES,
};
use crate::store::undo_log::UndoLog;
use crate::volume::{DataPath, Volume};
use csumkit::bytelog::RING_OFFSET;
use csumkit::bytelog::{ByteLog, Medium, RecordRef};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// Where a logged volume's ByteLog is: a file (and the length it is
/// formatted at), or the image journal's fast-commit area.
#[derive(Clone, Copy)]
enum LogAt<'a> {
    File(&'a Path, u64),
    FastCommitArea,
}

impl Volume {
    /// Opens the image at `path` for writing with its metadata logged in the
    /// ByteLog at `log` (created when missing): a log left by a process that
    /// stopped is replayed into the image first.
    ///
    /// # Errors
    /// As [`Volume::open`]; [`Error::Corrupt`] for a damaged log, or an
    /// image whose log is missing.
    pub fn open_logged(
        path: &Path,
        log: &Path,
        log_bytes: u64,
        options: crate::Options,
        sidecar: Option<&Path>,
    ) -> Result<(Volume, Replayed), Error> {
        Volume::open_logged_on(path, LogAt::File(log, log_bytes), options, sidecar, None).map(|(v, r, _)| (v, r))
    }

    /// [`open_logged`](Self::open_logged) with the ByteLog in the image's
    /// own journal, in its fast-commit area (`-o bytelog`,
    /// `store/fc_bytelog.rs`): no file beside the image.
    ///
    /// # Errors
    /// As `open_logged`; [`Error::Invalid`] naming why the image's
    /// fast-commit area cannot hold it (none, too small, in pieces), or
    /// when the image's log holds changes in a file instead.
    pub fn open_logged_in_fast_commit_area(
        path: &Path,
        options: crate::Options,
        sidecar: Option<&Path>,
    ) -> Result<(Volume, Replayed), Error> {
        Volume::open_logged_on(path, LogAt::FastCommitArea, options, sidecar, None).map(|(v, r, _)| (v, r))
    }

    /// [`open_logged`](Self::open_logged) for an image on a PI device (PI
    /// offload): its PI in `metadata` (created when missing), every write of
    /// the image — checkpoints, data — through the device. `sidecar`: data
    /// checksums kept as well (none on a `pi` mount; `ext4 checkpoint`
    /// passes the sidecar when there is one, so that the checksums a log
    /// carries are not lost whichever kind of mount wrote it).
    ///
    /// # Errors
    /// As `open_logged` and [`enable_pi`](Self::enable_pi).
    pub fn open_logged_pi(
        path: &Path,
        log: &Path,
        log_bytes: u64,
        options: crate::Options,
        metadata: &Path,
        protection: csumkit::pi::Protection,
        sidecar: Option<&Path>,
    ) -> Result<(Volume, Replayed, crate::PiOpened), Error> {
        Volume::open_logged_on(path, LogAt::File(log, log_bytes), options, sidecar, Some((metadata, protection)))
            .map(|(v, r, pi)| (v, r, pi.expect("opened with PI")))
    }

    fn open_logged_on(
        path: &Path,
        at: LogAt<'_>,
        options: crate::Options,
        sidecar: Option<&Path>,
        pi: Option<(&Path, csumkit::pi::Protection)>,
    ) -> Result<(Volume, Replayed, Option<crate::PiOpened>), Error> {
        let io_at = |source| Error::Io { context: path.display().to_string(), source };
        let file = csumkit::file::open_image(path, true)?;
        // Before the log is read: another process may be writing both.
        let image_lock = crate::store::image_lock::ImageLock::take(&file, path, true)?;
        let journal_replayed = crate::txn::journal::recover_held(&file, path)?;
        // Stores stay in this process until a checkpoint writes them to the file.
        let mut map = crate::store::private_map::PrivateMap::new(&file).map_err(io_at)?;
        let was_pending = log_pending(map.bytes());
        let in_area = was_pending && log_in_fast_commit_area(map.bytes());
        match at {
            LogAt::File(..) if in_area => {
                return Err(Error::Invalid(format!(
                    "{}: its ByteLog, in its journal's fast-commit area, holds changes the image lacks: mount it \
                     with -o bytelog (or without log=)",
                    path.display()
                )))
            }
            LogAt::File(log, _) if was_pending && !log.exists() => {
                // Creating an empty log here would lose the changes the real one holds.
                return Err(Error::Invalid(format!(
                    "{}: its ByteLog holds changes the image lacks, but there is no log at {}: name the log the \
                     mount used (-o log=PATH; the default is IMAGE.bytelog)",
                    path.display(),
                    log.display()
                )));
            }
            LogAt::FastCommitArea if was_pending && !in_area => {
                return Err(Error::Invalid(format!(
                    "{}: its ByteLog file (IMAGE.bytelog, or the -o log=PATH its mount used) holds changes the \
                     image lacks: mount it with that log first",
                    path.display()
                )))
            }
            _ => {}
        }
        let area = match at {
            LogAt::File(..) => None,
            LogAt::FastCommitArea => Some(
                Area::locate(map.bytes())
                    .map_err(|reason| Error::Invalid(format!("{}: -o bytelog: {reason}", path.display())))?,
            ),
        };
        clear_pending_bit(map.bytes_mut());
        // Before the replay writes anything; another node's hold is named
        // before what its mount left on disk.
        let mmp = crate::MultiMountProtection::take(&file, path, map.bytes())?;
        let (medium, log_on, mark): (LogMedium, _, _) = match (at, area) {
            (LogAt::File(log, log_bytes), _) => {
                let (medium, on) = log_medium(log, log_length_at_open(log, log_bytes, was_pending)?)?;
                (medium, on, LOG_PENDING)
            }
            (LogAt::FastCommitArea, area) => {
                let (medium, on) = area_medium(path, area.expect("located above"), was_pending)?;
                (medium, on, LOG_PENDING | FC_BYTELOG)
            }
        };
        let mut volume = Volume::new(Bytes::Private(map), crate::Options { write: true, ..options })?;
        volume.image_lock = image_lock;
        volume.mmp = mmp;
        volume.journal_replayed = journal_replayed;
        let (backing, opened): (Box<dyn Backing>, _) = match pi {
            None => (Box::new(file), None),
            Some((metadata, protection)) => {
                let (device, opened) =
                    open_device(path, &volume.map, volume.layout.block_size, metadata, protection, true)?;
                volume.pi = Some(device.clone());
                (Box::new(PiBacking(device)), Some(opened))
            }
        };
        let replayed = volume.enable_log_marked(backing, medium, was_pending, sidecar, mark)?;
        volume.redo.as_mut().expect("enabled above").log_on = Some(log_on);
        if let LogAt::File(log, log_bytes) = at {
            // (The fast-commit area keeps its length: a commit too large
            // for it is written through.)
            let log = log.to_path_buf();
            volume.set_log_resize(Box::new(move |len| log_medium(&log, len).map(|(medium, _)| medium)), log_bytes)?;
        }
        Ok((volume, replayed, opened))
    }

    /// Logs this volume's metadata in a ByteLog on `medium`, its image file
    /// being `backing`: replays what the log holds into the image (and the
    /// data checksums it carries into the sidecar at `sidecar`, which keeps
    /// them from then on), then checkpoints. `expect_log`: the image said
    /// its log holds changes (a blank medium is then an error, not a fresh
    /// log).
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a damaged log; [`Error::Io`] from the backing;
    /// as [`enable_data_checksums`](Self::enable_data_checksums).
    pub fn enable_log(
        &mut self,
        backing: Box<dyn Backing>,
        medium: LogMedium,
        expect_log: bool,
        sidecar: Option<&Path>,
    ) -> Result<Replayed, Error> {
        self.enable_log_marked(backing, medium, expect_log, sidecar, LOG_PENDING)
    }

    /// [`enable_log`](Self::enable_log), the image marked on disk with
    /// `mark` while the log holds what it lacks.
    fn enable_log_marked(
        &mut self,
        backing: Box<dyn Backing>,
        medium: LogMedium,
        expect_log: bool,
        sidecar: Option<&Path>,
        mark: u32,
    ) -> Result<Replayed, Error> {
        let medium = AnyMedium(medium);
        let blank = medium.view(0, 8).map(|m| m != b"CSBYTLOG").unwrap_or(true);
        let mut replayed = Replayed::default();
        let mut applied = Vec::new();
        // The file's, but for the pending bit the map lost at open.
        let image_superblock = self.map[1024..2048].to_vec();
        // An image without the pending bit holds everything: whatever the
        // log has (an old checkpointed log, or one cut while being
        // formatted) is not needed, and it is formatted afresh.
        let log = if !expect_log {
            let generation = ByteLog::next_generation(&medium);
            ByteLog::format(medium, generation)?
        } else if blank {
            return Err(corrupt(
                "ByteLog",
                "the image says its log holds changes it lacks, but the log is blank or missing",
            ));
        } else {
            let image = self.map.writable().ok_or_else(|| Error::Invalid("a logged volume is writable".into()))?;
            // A commit's changes, held until its last record is whole:
            // (image offset, length, what goes there).
            let mut batch: Vec<(usize, usize, Change)> = Vec::new();
            let mut batch_sums: Vec<(u64, Option<u32>)> = Vec::new();
            let sums = &mut self.replayed_sums;
            let blocks = self.layout.blocks_count;
            let log = ByteLog::replay_with(medium, |record: RecordRef<'_>| {
                let location = || format!("ByteLog record {}", record.seq);
                if record.tag != TAG_PART && record.tag != TAG_LAST {
                    return Err(csumkit::Error::Corrupt { location: location(), detail: "not a csumfs record".into() });
                }
                let entries = decode(record.payload)
                    .map_err(|detail| csumkit::Error::Corrupt { location: location(), detail })?;
                for entry in entries {
                    held(entry, image.len(), blocks, &mut batch, &mut batch_sums)
                        .map_err(|detail| csumkit::Error::Corrupt { location: location(), detail })?;
                }
                if record.tag == TAG_LAST {
                    sums.append(&mut batch_sums);
                    for (at, len, change) in batch.drain(..) {
                        let target = &mut image[at..at + len];
                        match change {
                            Change::Bytes(bytes) => target.copy_from_slice(&bytes),
                            Change::Fill(value) => target.fill(value),
                        }
                        applied.push((at, at + len));
                        replayed.bytes += len as u64;
                    }
                    replayed.commits += 1;
                }
                Ok(())
            })?;
            // A commit's superblock bytes are the map's, whose superblock
            // page shows the file's once a checkpoint hands it back — with
            // the pending bit, so its checksum may cover the bit this map
            // lacks: sealed again without it (only when that checksum
            // proves every other byte; damage stays as it is).
            clear_pending_bit(image);
            log
        };
        let log_bytes = log.medium().len();
        self.start_redo(backing, Log::Bytes(log), applied, (expect_log, mark), log_bytes, image_superblock)?;
        if let Some(sidecar) = sidecar {
            self.enable_data_checksums(sidecar)?;
        }
        // Without a sidecar the checksums the log carried are not kept.
        self.replayed_sums.clear();
        if expect_log {
            // (Only then was anything replayed.) The replayed changes go to
            // the file and the log is emptied now, and with it the records
            // of a commit cut before its last: left in the log, the next
            // commit's records would complete it at the next replay.
            self.checkpoint_now(false, false)?;
            // The file now holds every page as the map has it (the
            // superblock's pending bit aside, which is set on disk while a
            // log is open and read from the map only at open): no copy is
            // needed, of the replayed pages nor of the superblock.
            self.hand_back(&[(0, self.map.len())]);
            // What was cached before the replay may be stale.
            self.filters.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        }
        Ok(replayed)
    }

    /// The volume's commits go to `log` from now on, the image file being
    /// `backing`; `committed`: ranges replayed and not yet checkpointed;
    /// `(marked, mark)`: whether the image on disk carries the log's mark,
    /// and its incompat bits; `image_superblock`: the superblock as the
    /// file holds it, the mark aside.
    pub(super) fn start_redo(
        &mut self,
        backing: Box<dyn Backing>,
        log: Log,
        committed: Vec<(usize, usize)>,
        (marked, mark): (bool, u32),
        log_bytes: u64,
        image_superblock: Vec<u8>,
    ) -> Result<(), Error> {
        let image_sync = backing.sync_handle().map_err(io("duplicating the image's descriptor"))?;
        let in_image = matches!(log, Log::Image(_));
        let fast = matches!(&log, Log::Image(j) if j.fast_commits()).then(Default::default);
        let redo = Redo {
            writer: Arc::new(Mutex::new(Writer::new(log, image_sync, self.stats.clone()))),
            staged: 0,
            backing,
            pending: Vec::new(),
            pending_bytes: 0,
            pending_data: 0,
            logged_data: Vec::new(),
            committed,
            sums_in_log: false,
            touched: BTreeSet::new(),
            freed: RangeSet::default(),
            freed_version: 0,
            data_unsynced: false,
            marked,
            held: false,
            image_superblock,
            last_commit: Instant::now(),
            last_checkpoint: Instant::now(),
            log_on: None,
            resize: None,
            log_bytes,
            needs: 0,
            in_image,
            mark,
            fast,
        };
        self.redo = Some(redo);
        self.data_path = DataPath::Log { pi: self.data_path == DataPath::Pi };
        if self.undo.is_none() {
            // Errors roll back in memory: the private copy dies with the process.
            self.undo = Some(UndoLog::in_memory());
        }
        Ok(())
    }

    /// Writes file data at `at` through the log whatever its size: it
    /// reaches the image with the commit that carries it, and is lost
    /// with it.
    pub(crate) fn store_data_in_log(&mut self, at: usize, new: &[u8]) -> Result<(), Error> {
        self.announce_journaled_data(at, new.len())?;
        let redo = log(&mut self.redo);
        redo.pending_data += new.len();
        redo.logged_data.push((at, at + new.len()));
        self.store(at as u64, new)
    }

    /// Writes file data at `at`: through the log when it is at most a
    /// page and little data is pending, and on a page whose metadata
    /// changed since the last checkpoint; straight to the image file
    /// otherwise.
    pub(crate) fn store_logged_data(&mut self, at: usize, new: &[u8]) -> Result<(), Error> {
        let redo = log(&mut self.redo);
        // With fast commits, data goes in place as the kernel's does: a
        // fast commit names blocks, it cannot carry their bytes.
        let small = new.len() <= PAGE && redo.pending_data + new.len() <= LOGGED_DATA_BYTES;
        if small && redo.fast.is_none() {
            return self.store_data_in_log(at, new);
        }
        let mut pieces: Vec<(usize, usize, bool)> = Vec::new();
        let mut start = at;
        while start < at + new.len() {
            let end = ((start / PAGE + 1) * PAGE).min(at + new.len());
            let logged = redo.touched.contains(&(start / PAGE)) || redo.freed.contains(start / PAGE);
            match pieces.last_mut() {
                Some(last) if last.2 == logged => last.1 = end,
                _ => pieces.push((start, end, logged)),
            }
            start = end;
        }
        let in_memory = matches!(self.map, Bytes::Owned(_));
        let bs = self.layout.block_size as usize;
        for (start, end, logged) in pieces {
            let bytes = &new[start - at..end - at];
            if logged {
                self.announce_journaled_data(start, end - start)?;
                log(&mut self.redo).logged_data.push((start, end));
                self.store(start as u64, bytes)?;
                continue;
            }
            // In place, ahead of the log: announced on the intent list first.
            self.data_will_write((start / bs) as u64, (end.div_ceil(bs) - start / bs) as u64)?;
            if self.data_path == (DataPath::Log { pi: true }) {
                self.pi_store_data(start as u64, bytes)?;
            } else {
                let redo = log(&mut self.redo);
                redo.backing.write_at(start as u64, bytes).map_err(io("image"))?;
                if bytes.len() >= WRITE_BEHIND_BYTES {
                    redo.backing.write_behind(start as u64, bytes.len() as u64);
                }
            }
            let redo = log(&mut self.redo);
            redo.data_unsynced = true;
            if in_memory {
                // A private file map sees the file's pages it has not
                // copied; bytes in memory see nothing but themselves.
                let image = self.map.writable().expect("a logged volume is writable");
                image[start..end].copy_from_slice(bytes);
            }
        }
        Ok(())
    }

    /// The log's part of `sync`: one commit, made durable before this
    /// returns.
    pub(crate) fn sync_logged(&mut self) -> Result<(), Error> {
        let durable = self.start_sync_logged(false)?.wait()?;
        self.finish_sync(durable)
    }

    /// The log's part of [`start_sync`](Self::start_sync); `fast`: a fast
    /// commit may carry it (an fsync's, not a commit that time or size
    /// called for: those are full, as the kernel's are).
    fn start_sync_logged(&mut self, fast: bool) -> Result<PendingSync, Error> {
        if !self.logged() {
            return Ok(PendingSync::done());
        }
        if fast && self.stage_fast_commit()? {
            let redo = log_ref(&self.redo);
            let sums_version = self.datasums.as_ref().map_or(0, DataSums::version);
            return Ok(PendingSync {
                writer: Some(redo.writer.clone()),
                number: redo.staged,
                versions: Versions { freed: redo.freed_version, sums: sums_version },
            });
        }
        if !self.stage_commit()? {
            self.checkpoint_now(false, true)?;
            return Ok(PendingSync::done());
        }
        let redo = log_ref(&self.redo);
        let sums_version = self.datasums.as_ref().map_or(0, DataSums::version);
        Ok(PendingSync {
            writer: Some(redo.writer.clone()),
            number: redo.staged,
            versions: Versions { freed: redo.freed_version, sums: sums_version },
        })
    }

    /// The first half of [`sync`](Self::sync), under the volume's lock:
    /// with a ByteLog, the changes since the last commit are encoded
    /// (copied) and staged, and [`PendingSync::wait`] makes them durable
    /// without the volume — other operations may run meanwhile; their
    /// changes go to the next commit. Without a log the whole sync runs
    /// here. Then [`finish_sync`](Self::finish_sync).
    ///
    /// # Errors
    /// As `sync`.
    pub fn start_sync(&mut self) -> Result<PendingSync, Error> {
        match self.data_path {
            DataPath::Log { .. } => self.start_sync_logged(true),
            DataPath::InPlace | DataPath::Pi => {
                self.sync_in_place()?;
                Ok(PendingSync::done())
            }
        }
    }

    /// The last half of [`sync`](Self::sync), under the volume's lock
    /// again: what waited for the commit to be durable — blocks freed
    /// before it may take data in place, the data checksums' intent list
    /// and forgotten blocks are let go — unless more of those came after
    /// it was staged (they wait for the next commit).
    ///
    /// # Errors
    /// [`Error::Io`] emptying the intent list.
    pub fn finish_sync(&mut self, durable: DurableSync) -> Result<(), Error> {
        let (Some(versions), Some(redo)) = (durable.0, self.redo.as_mut()) else { return Ok(()) };
        if redo.freed_version == versions.freed {
            redo.freed.clear();
        }
        if redo.in_image {
            // The journal carried no checksums: the intent list stays.
            return self.after_journal_commit();
        }
        match self.datasums.as_mut() {
            Some(sums) if sums.version() == versions.sums => sums.log_committed(false, self.layout.block_size),
            _ => Ok(()),
        }
    }

    /// At the end of an operation: commit when enough is pending or the
    /// last commit is old; checkpoint when the log is half full, the
    /// private copy has grown large or the last checkpoint is old.
    pub(crate) fn after_operation(&mut self) -> Result<(), Error> {
        let Some(redo) = self.redo.as_ref() else { return Ok(()) };
        let due = redo.pending_bytes >= COMMIT_BYTES || redo.last_commit.elapsed() >= COMMIT_AGE;
        let sums = self.datasums.as_ref().and_then(|s| s.logged.as_ref()).is_some_and(|l| !l.is_empty());
        if due && (!redo.pending.is_empty() || sums) {
            self.sync_logged()?;
        }
        let redo = log_ref(&self.redo);
        // Not while a sync flushes the log (this holds the volume's lock,
        // which every call waits for): the next operation's end looks.
        // A log grown for a large commit goes back to its length too.
        let (ring_half, grown) =
            redo.writer.try_lock().map_or((false, false), |writer| writer.half_full_or_grown(redo.log_bytes));
        let old = !redo.committed.is_empty() && redo.last_checkpoint.elapsed() >= CHECKPOINT_AGE;
        if ring_half || grown || old || redo.touched.len() >= CHECKPOINT_PAGES {
            self.checkpoint_now(false, false)?;
        }
        Ok(())
    }

    /// Marks the image on disk as needing its log ([`LOG_PENDING`](crate::LOG_PENDING)) now,
    /// not at the first commit, and keeps it marked until the final
    /// [`checkpoint`](Self::checkpoint): the kernel and e2fsck then refuse
    /// the image for as long as csumfs may write it — a kernel mount let in
    /// before the first commit would be written over by it. ext4 sets
    /// `needs_recovery` at mount for the same reason. A mount calls it
    /// before it serves; a stopped mount's image needs `csumkit ext4
    /// checkpoint` (or the next mount) even when it changed nothing. No-op
    /// without a log (a `log=off` volume's undo log marks it: `txn/undo.rs`).
    ///
    /// # Errors
    /// [`Error::Io`] writing or syncing the superblock.
    pub fn mark_log_in_use(&mut self) -> Result<(), Error> {
        let Some(redo) = self.redo.as_mut() else { return Ok(()) };
        redo.held = true;
        redo.mark()
    }

    /// Folds everything into the image file and empties the log, leaving
    /// an image the kernel and e2fsck accept (also what unmount does).
    /// Without a log: [`sync`](Self::sync), then the undo log's mark
    /// cleared (`txn/undo.rs`) when no operation is in progress.
    ///
    /// # Errors
    /// [`Error::Io`] from the image or the log.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        match self.data_path {
            DataPath::Log { .. } => self.checkpoint_now(true, false),
            DataPath::InPlace | DataPath::Pi => self.checkpoint_in_place(),
        }
    }

    fn checkpoint_now(&mut self, final_: bool, through: bool) -> Result<(), Error> {
        if !self.logged() {
            return Ok(());
        }
        // Everything a checkpoint writes is committed first; with no room
        // even in the emptied log for that, it is written through (not
        // atomic).
        let through = through || !self.stage_commit()?;
        let redo = log(&mut self.redo);
        if through {
            Stats::bump(&self.stats.log_write_through);
        }
        redo.checkpoint(&self.map, &mut self.datasums, final_, through, &self.stats)?;
        // Everything committed is durable and in the image file now, and
        // the log is empty: the intent list goes.
        if let Some(sums) = self.datasums.as_mut() {
            sums.log_committed(true, self.layout.block_size)?;
        }
        let redo = log(&mut self.redo);
        redo.shrink_log()?;
        let pages = std::mem::take(&mut redo.touched);
        // The file now holds what these copied pages hold.
        let ranges: Vec<(usize, usize)> = pages.iter().map(|&p| (p * PAGE, (p + 1) * PAGE)).collect();
        self.hand_back(&merged(&ranges));
        Ok(())
    }

    /// Stages the changes since the last commit as a fast commit when one
    /// can carry them and the fast-commit area has room (else the caller
    /// makes a full commit). With nothing changed since the last fast
    /// commit, only the data written since waits: its flush alone. Whether
    /// it staged.
    fn stage_fast_commit(&mut self) -> Result<bool, Error> {
        let redo = log_ref(&self.redo);
        if redo.fast.is_none() || redo.pending.is_empty() {
            return Ok(false);
        }
        let Some(records) = self.fast_records()? else {
            Stats::bump(&self.stats.fast_commit_fallbacks);
            return Ok(false);
        };
        let redo = log(&mut self.redo);
        if records.is_empty() {
            if std::mem::take(&mut redo.data_unsynced) {
                redo.staged += 1;
                redo.writer().stage(redo.staged, Vec::new(), Vec::new(), true, 0);
            }
            return Ok(true);
        }
        if !redo.commit_fast(records)? {
            Stats::bump(&self.stats.fast_commit_fallbacks);
            return Ok(false);
        }
        self.fast_committed();
        Ok(true)
    }

    /// Stages the pending changes as one commit, first making room when
    /// the log's free room lacks it ([`fold_log`](Self::fold_log)).
    /// `Ok(false)`: not even the emptied log has room (write through).
    fn stage_commit(&mut self) -> Result<bool, Error> {
        if self.datasums.as_mut().is_some_and(DataSums::commits_tree_instead) {
            // Many new checksums (a large sequential write): the tree goes
            // to the sidecar now, its own two flushes, instead of hundreds
            // of log records each made durable on its own. The image's data
            // is made durable first, and blocks whose data waits in the log
            // are listed ahead of it, so the sidecar never names data the
            // image lacks unannounced (else they are logged after all).
            // A log still holding checksums is folded instead, which
            // commits the tree and then empties the log: a replay would set
            // the log's checksums over the tree's newer ones of the same
            // blocks (a block rewritten in place read back as `EIO`; found
            // by the power-cut test of this path).
            let redo = log(&mut self.redo);
            redo.sync_data()?;
            let logged = redo.logged_data.clone();
            let committed = if redo.sums_in_log {
                self.fold_log()?
            } else if self.list_ahead_of_data(&logged)? {
                commit(&mut self.datasums, &self.stats)?;
                true
            } else {
                false
            };
            if committed {
                self.datasums.as_mut().expect("checked above").clear_logged();
                Stats::bump(&self.stats.datasum_commits_for_log);
            }
        }
        let redo = log(&mut self.redo);
        if redo.commit(&self.map, &mut self.datasums)? {
            return Ok(true);
        }
        if !redo.committed.is_empty() || redo.sums_in_log {
            if !self.fold_log()? {
                return Ok(false);
            }
            Stats::bump(&self.stats.log_folds);
            let redo = log(&mut self.redo);
            if redo.commit(&self.map, &mut self.datasums)? {
                return Ok(true);
            }
        }
        // Not even the empty log has room: a larger one, where it can grow.
        self.grow_log_for_commit()
    }

    /// Makes room in the log for a commit its free room lacks (or empties
    /// a log holding checksums before the tree is committed in place of
    /// logging more, see [`stage_commit`](Self::stage_commit)): every
    /// record the log holds is written into the image file as it was
    /// committed — read back from the log, not taken from the map, whose
    /// pages may hold pending changes too, which must not reach the file
    /// ahead of their commit — the file is synced, the data checksums
    /// committed and the log emptied. Pending changes stay pending, and
    /// the pages they touch stay the map's own. `Ok(false)`: the intent
    /// list has no room for the data waiting in the log (nothing done).
    fn fold_log(&mut self) -> Result<bool, Error> {
        if log_ref(&self.redo).in_image {
            return self.fold_image_journal();
        }
        let redo = log(&mut self.redo);
        // Every staged commit is in the log before it is read back.
        redo.writer().flush_all()?;
        let logged = redo.logged_data.clone();
        if !self.list_ahead_of_data(&logged)? {
            return Ok(false);
        }
        let (len, blocks) = (self.map.len(), self.layout.blocks_count);
        let redo = log(&mut self.redo);
        assert!(redo.marked, "a log holding commits has its image marked");
        let mut superblock = redo.image_superblock.clone();
        let backing = &mut redo.backing;
        let mut batch: Vec<(usize, usize, Change)> = Vec::new();
        let mut ignored_sums = Vec::new();
        redo.writer.lock().unwrap_or_else(PoisonError::into_inner).byte_log().for_each_record(|record| {
            let damaged =
                |detail| csumkit::Error::Corrupt { location: format!("ByteLog record {}", record.seq), detail };
            for entry in decode(record.payload).map_err(damaged)? {
                // (The tree holds these checksums, or newer ones.)
                held(entry, len, blocks, &mut batch, &mut ignored_sums).map_err(damaged)?;
            }
            ignored_sums.clear();
            if record.tag == TAG_LAST {
                for (at, count, change) in batch.drain(..) {
                    write_committed(backing.as_mut(), &mut superblock, at, count, &change)
                        .map_err(|source| csumkit::Error::Io { context: "image".into(), source })?;
                }
            }
            Ok(())
        })?;
        assert!(batch.is_empty(), "every commit in the log is whole");
        let marked = redo.superblock_marked(&superblock, true);
        redo.backing.write_at(1024, &marked).map_err(io("image"))?;
        redo.backing.sync().map_err(io("fdatasync of the image"))?;
        redo.image_superblock = superblock;
        redo.data_unsynced = false;
        // The tree after the data it names is durable (data still in the
        // log listed above), before the log is emptied; the intent list
        // stays until the next commit is durable (see `datasum::commit`).
        commit(&mut self.datasums, &self.stats)?;
        let redo = log(&mut self.redo);
        redo.writer().byte_log().checkpoint()?;
        redo.committed.clear();
        redo.sums_in_log = false;
        redo.last_checkpoint = Instant::now();
        Stats::bump(&self.stats.log_checkpoints);
        self.hand_back_all_but_pending();
        Ok(true)
    }

    /// After a fold: the file holds every page as the map has it but those
    /// the pending changes touch; the others go back to the file.
    pub(super) fn hand_back_all_but_pending(&mut self) {
        let redo = log(&mut self.redo);
        let pending: BTreeSet<usize> = redo.pending.iter().flat_map(|&(s, e)| s / PAGE..=(e - 1) / PAGE).collect();
        let caught_up: Vec<usize> = redo.touched.difference(&pending).copied().collect();
        redo.touched = pending;
        let ranges: Vec<(usize, usize)> = caught_up.iter().map(|&p| (p * PAGE, (p + 1) * PAGE)).collect();
        self.hand_back(&merged(&ranges));
    }

    /// Drops this process's copies of the private map's pages in `ranges`
    /// (page-aligned, sorted): the map reads the file's pages again. Only
    /// for pages the file holds as they are.
    fn hand_back(&mut self, ranges: &[(usize, usize)]) {
        if let Bytes::Private(map) = &mut self.map {
            map.hand_back(ranges);
        }
    }

    /// A volume over an image in memory whose metadata a ByteLog may hold
    /// (a copy of a logged mount's image): the log-pending mark is cleared in
    /// this copy, as [`open_logged`](Self::open_logged) clears it in its
    /// private map, and returned — pass it to [`enable_log`](Self::enable_log)
    /// as `expect_log` before anything else touches the volume.
    ///
    /// # Errors
    /// As [`from_bytes`](Self::from_bytes).
    pub fn from_logged_bytes(image: Vec<u8>, options: crate::Options) -> Result<(Volume, bool), Error> {
        let mut image = image;
        let was_pending = log_pending(&image);
        clear_pending_bit(&mut image);
        Ok((Volume::new(Bytes::Owned(image), options)?, was_pending))
    }

    /// What `image` holds once the ByteLog `log` (a copy of its file) is
    /// replayed into it, without writing either: how `csumkit ext4 check`
    /// judges an image a stopped mount left.
    ///
    /// # Errors
    /// As [`enable_log`](Self::enable_log).
    pub fn replayed_image(image: Vec<u8>, log: Vec<u8>) -> Result<(Vec<u8>, Replayed), Error> {
        let mut log = log;
        log.resize(log.len().next_multiple_of(64), 0);
        let (mut volume, expect_log) =
            Volume::from_logged_bytes(image, crate::Options { write: true, ..crate::Options::default() })?;
        let medium = csumkit::bytelog::SimMedium::from_image(log);
        let replayed = volume.enable_log(Box::new(Nowhere), Box::new(medium), expect_log, None)?;
        let Bytes::Owned(image) = std::mem::replace(&mut volume.map, Bytes::Owned(Vec::new())) else {
            unreachable!("made from bytes above")
        };
        Ok((image, replayed))
    }

    /// Whether metadata goes through a ByteLog.
    pub fn logged(&self) -> bool {
        matches!(self.data_path, DataPath::Log { .. })
    }

    /// Bytes of the image this process holds its own copy of: the pages of
    /// its private map written since they were last checkpointed, as the
    /// kernel counts them (the map's `Anonymous` lines in
    /// `/proc/self/smaps`). `None` without a private map (no log, an image
    /// in memory) or without `/proc`.
    pub fn private_copy_bytes(&self) -> Option<u64> {
        let Bytes::Private(map) = &self.map else { return None };
        let map = map.bytes();
        let (start, end) = (map.as_ptr() as usize, map.as_ptr() as usize + map.len());
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let (mut inside, mut kib) = (false, 0u64);
        for line in smaps.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if let Some((from, to)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
                let range = usize::from_str_radix(from, 16).ok().zip(usize::from_str_radix(to, 16).ok());
                inside = range.is_some_and(|(from, to)| start <= from && to <= end.next_multiple_of(PAGE));
            } else if inside && first == "Anonymous:" {
                kib += words.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            }
        }
        Some(kib * 1024)
    }

    /// Where the ByteLog lives ([`LOG_ON_DAX`](crate::LOG_ON_DAX), [`LOG_ON_TMPFS`](crate::LOG_ON_TMPFS) or
    /// [`LOG_ON_FILE`](crate::LOG_ON_FILE)) when [`open_logged`](Self::open_logged) chose its
    /// medium; `None` without a log or with a medium given by the caller.
    pub fn log_on(&self) -> Option<&'static str> {
        self.redo.as_ref().and_then(|r| r.log_on)
    }
}

impl Volume {
    /// Lets the log grow for a commit too large for it empty (instead of
    /// writing that commit through) by reopening its medium with `resize`;
    /// `log_bytes` is its configured length, to which a grown log returns
    /// at the next checkpoint — at once if it is longer now (a log grown
    /// before a crash, just replayed). No-op without a log.
    ///
    /// # Errors
    /// As [`enable_log`](Self::enable_log) formatting a log.
    pub fn set_log_resize(&mut self, resize: LogResize, log_bytes: u64) -> Result<(), Error> {
        let Some(redo) = self.redo.as_mut() else { return Ok(()) };
        redo.resize = Some(resize);
        redo.log_bytes = log_bytes;
        if redo.committed.is_empty() && !redo.sums_in_log {
            redo.shrink_log()?;
        }
        Ok(())
    }

    /// The pending changes staged as one commit in a log grown for them,
    /// after the log was emptied and still lacked the room. `Ok(false)`:
    /// the log cannot grow (no [`LogResize`], or reopening its medium
    /// failed — the log's filesystem full, say) and is as it was.
    pub(super) fn grow_log_for_commit(&mut self) -> Result<bool, Error> {
        let redo = log(&mut self.redo);
        if redo.resize.is_none() {
            return Ok(false);
        }
        let len = (RING_OFFSET + 2 * redo.needs).next_multiple_of(GROWTH_UNIT);
        if !redo.resize_log(len)? {
            return Ok(false);
        }
        Stats::bump(&self.stats.log_grows);
        let redo = log(&mut self.redo);
        let staged = redo.commit(&self.map, &mut self.datasums)?;
        assert!(staged, "an empty log of {len} bytes holds a commit that needs {}", redo.needs);
        Ok(true)
    }
}

/// The ByteLog of a volume whose data path is the log: reached only on the
/// paths [`DataPath::Log`] chose (a field, not `&mut self`, so the volume's
/// other fields stay free to borrow beside it).
fn log(redo: &mut Option<Redo>) -> &mut Redo {
    redo.as_mut().expect("reached only with DataPath::Log")
}

/// [`log`], to read.
fn log_ref(redo: &Option<Redo>) -> &Redo {
    redo.as_ref().expect("reached only with DataPath::Log")
}

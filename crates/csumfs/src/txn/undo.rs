//! The operation boundary: [`transaction`](crate::Volume::transaction),
//! an all-or-nothing operation over the undo log (`store/undo_log.rs`) —
//! its halves [`begin`](crate::Volume::begin) and
//! [`end`](crate::Volume::end) stay public for tests that stop between
//! them, as a death would — the undo file's mark on the image, and the
//! synchronous-update flags an operation's end obeys.

use crate::error::Error;
use crate::format::features::UNDO_PENDING;
use crate::store::undo_log::{undo_pending, Record, UndoLog};
use crate::volume::Volume;
use csumkit::ext4::fields::S_FEATURE_INCOMPAT;
use csumkit::le::le32;
use std::path::Path;

impl Volume {
    /// Makes every operation between [`begin`](Self::begin) and
    /// [`end`](Self::end) all or nothing, with the undo log at `path`.
    /// Returns whether an operation a dead process left half done was
    /// undone (the image is as it was before that operation).
    ///
    /// The image is marked [`UNDO_PENDING`] from now on, until a
    /// [`checkpoint`](Self::checkpoint).
    ///
    /// # Errors
    /// [`Error::Io`] for the log file; [`Error::Corrupt`] for a damaged log,
    /// or for an image marked [`UNDO_PENDING`] whose log is missing (what
    /// was left half done cannot be undone).
    pub fn enable_undo(&mut self, path: &Path) -> Result<bool, Error> {
        if self.undo_marked() && !path.exists() {
            return Err(crate::error::corrupt(
                path.display().to_string(),
                "the image says a csumkit mount -o log=off stopped with its undo log here, but it is missing",
            ));
        }
        let (mut log, pending) = UndoLog::open(path)?;
        let undone = !pending.is_empty();
        self.put_back(&pending)?;
        // Only now: a death while the bytes went back finds them again.
        log.clear();
        if undone {
            self.sync()?;
        }
        self.undo = Some(log);
        self.mark_undo(true)?;
        Ok(undone)
    }

    /// Whether the image in the map carries [`UNDO_PENDING`].
    pub(crate) fn undo_marked(&self) -> bool {
        undo_pending(&self.map)
    }

    /// Sets or clears [`UNDO_PENDING`] (between operations: the change is
    /// not an operation's to undo), when a file log is in use. Whether it
    /// changed the superblock.
    fn mark_undo(&mut self, on: bool) -> Result<bool, Error> {
        let file_log = self.undo.as_ref().is_some_and(|u| u.file.is_some() && u.depth == 0);
        if !file_log || self.undo_marked() == on {
            return Ok(false);
        }
        let incompat = le32(&self.map, 1024 + S_FEATURE_INCOMPAT) ^ UNDO_PENDING;
        self.patch_superblock(&[(S_FEATURE_INCOMPAT, &incompat.to_le_bytes())])?;
        Ok(true)
    }

    /// `checkpoint` without a ByteLog: everything made durable, then the
    /// undo mark cleared (and made durable) — the image is the kernel's
    /// and e2fsck's again until the next operation.
    pub(crate) fn checkpoint_in_place(&mut self) -> Result<(), Error> {
        self.sync()?;
        if self.mark_undo(false)? {
            self.sync_in_place()?;
        }
        Ok(())
    }

    fn put_back(&mut self, records: &[Record]) -> Result<(), Error> {
        let image = self.map.writable().ok_or_else(|| Error::Invalid("the volume was opened read-only".into()))?;
        for (at, old) in records {
            let end = at.checked_add(old.len()).filter(|&e| e <= image.len());
            let Some(end) = end else {
                return Err(crate::error::corrupt("undo log", format!("a record at {at} past the image")));
            };
            image[*at..end].copy_from_slice(old);
        }
        Ok(())
    }

    /// Runs `op` as one operation, all or nothing — the boundary a jbd2
    /// handle draws around one change (`ext4_journal_start`/`stop`): what
    /// `op` changed is kept when it succeeds (and committed to the ByteLog
    /// when one is due), put back when it fails. Nested transactions join
    /// the outermost. An operation whose end fails (the undo or the commit)
    /// returns that error.
    ///
    /// # Errors
    /// `op`'s error (everything it changed undone), or the end's.
    pub fn transaction<T>(&mut self, op: impl FnOnce(&mut Volume) -> Result<T, Error>) -> Result<T, Error> {
        let (result, ended) = self.transaction_apart(op);
        ended?;
        result
    }

    /// [`transaction`](Self::transaction) with the operation's result and
    /// its end's apart, for a caller that reports them differently (the
    /// FUSE server answers a failed end with `EIO`, whatever `op` said).
    pub fn transaction_apart<T>(
        &mut self,
        op: impl FnOnce(&mut Volume) -> Result<T, Error>,
    ) -> (Result<T, Error>, Result<(), Error>) {
        self.begin();
        let result = op(self);
        let ended = self.end(result.is_ok());
        (result, ended)
    }

    /// Starts an operation (nested calls join the outermost one); the
    /// image is marked again if a [`checkpoint`](Self::checkpoint) cleared
    /// the mark.
    pub fn begin(&mut self) {
        // A 4-byte patch of the superblock in a writable map, no undo record.
        self.mark_undo(true).expect("the superblock of a volume keeping an undo log takes a patch");
        if let Some(undo) = &mut self.undo {
            undo.depth += 1;
        }
    }

    /// Whether an inode marked for synchronous updates (`chattr +S`, a
    /// directory's `+D`) changed since the last call: the operation must
    /// then be made durable ([`sync`](Self::sync)) before it is answered,
    /// as ext4's `ext4_handle_sync` does.
    pub fn take_synchronous(&mut self) -> bool {
        std::mem::take(&mut self.synchronous)
    }

    /// Whether every inode counts as marked `chattr +S` (`mount -o sync`),
    /// and every directory as `+D` (`-o dirsync`), for
    /// [`take_synchronous`](Self::take_synchronous).
    pub fn set_mount_sync(&mut self, sync: bool, dirsync: bool) {
        use csumkit::ext4::format::{FLAG_DIRSYNC, FLAG_SYNC};
        self.mount_sync_flags = if sync { FLAG_SYNC } else { 0 } | if dirsync { FLAG_DIRSYNC } else { 0 };
    }

    /// Ends an operation: kept if `ok`, else every metadata byte it
    /// changed is put back. Only the outermost `end` acts.
    ///
    /// # Errors
    /// [`Error::Corrupt`] if the log cannot be applied.
    pub fn end(&mut self, ok: bool) -> Result<(), Error> {
        let Some(undo) = &mut self.undo else { return Ok(()) };
        undo.depth = undo.depth.saturating_sub(1);
        if undo.depth > 0 {
            return Ok(());
        }
        if !ok {
            let records = undo.pending().map_err(|detail| crate::error::corrupt("undo log", detail))?;
            if !records.is_empty() {
                // What a fast commit would carry may describe what was undone.
                self.fast_ineligible("an operation undone");
            }
            self.put_back(&records)?;
            // Data blocks put back have their old bytes again: their
            // checksums too.
            for block in self.undo.as_mut().map(|u| std::mem::take(&mut u.data_blocks)).unwrap_or_default() {
                self.data_written(block);
            }
            // Cached xattr name filters and free-space trees may describe
            // what was undone.
            self.filters.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
            self.free_space.clear();
            self.free_inodes.clear();
        }
        if let Some(undo) = &mut self.undo {
            undo.clear();
        }
        if ok {
            self.after_operation()?;
        }
        Ok(())
    }
}

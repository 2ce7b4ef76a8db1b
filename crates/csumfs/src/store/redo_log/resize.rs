//! A log that grows for a commit too large for it, and shrinks back.
//!
//! One operation can change more metadata than an empty log holds — a
//! truncate or fallocate across hundreds of block groups, say, whose
//! bitmaps all change. Such a commit used to be written through in place
//! with a checkpoint, which a crash could leave half done. Where the log's
//! medium can be reopened at another length (a file beside the image, a
//! file on DAX or tmpfs: [`LogResize`]), it is formatted afresh at twice
//! what the commit needs and the commit is logged, atomic as any other;
//! the end of the next operation checkpoints and puts the log back at its
//! configured length (the file is cut back at the next clean open). ext4
//! splits such an operation into several transactions instead; csumfs's
//! operations are one commit each.
//!
//! Only an empty log is reformatted, and only after the image's
//! [`LOG_PENDING`](crate::format::features::LOG_PENDING) mark is cleared on disk: a crash
//! in between finds an image that needs nothing from its log, whatever
//! the format left in it. The commit's own append marks the image again
//! (a mount's image, held marked, as soon as the log is formatted).

use super::{superblock_with, Redo};
use crate::error::Error;
use crate::store::medium::{AnyMedium, LogMedium};
use csumkit::bytelog::{ByteLog, Medium};

/// Opens the log's medium again at `len` bytes — the same place, the same
/// kind — keeping what it holds up to there (a file extended with zeros).
pub type LogResize = Box<dyn FnMut(u64) -> Result<LogMedium, Error> + Send + Sync>;

/// A grown log's length is a multiple of this.
pub(crate) const GROWTH_UNIT: u64 = 1 << 20;

impl Redo {
    /// A grown log, empty, put back at its configured length.
    pub(crate) fn shrink_log(&mut self) -> Result<(), Error> {
        if self.in_image {
            return Ok(());
        }
        let len = self.writer().byte_log().medium().len();
        if self.resize.is_some() && len > self.log_bytes {
            self.resize_log(self.log_bytes)?;
        }
        Ok(())
    }

    /// Replaces the log, which holds nothing the image lacks, with an empty
    /// one of `len` bytes on the same medium. `Ok(false)`: the medium could
    /// not be reopened, and the old log stays.
    pub(crate) fn resize_log(&mut self, len: u64) -> Result<bool, Error> {
        self.writer().flush_all()?;
        assert!(self.committed.is_empty() && !self.sums_in_log, "only an empty log is resized");
        if self.marked {
            // The image first says it needs nothing from its log.
            let superblock = superblock_with(&self.image_superblock, false);
            self.backing.write_at(1024, &superblock).map_err(super::io("image"))?;
            self.backing.sync().map_err(super::io("fdatasync of the image"))?;
            self.marked = false;
        }
        let resize = self.resize.as_mut().expect("called with a resize");
        let resized = match resize(len) {
            Ok(medium) => {
                let medium = AnyMedium(medium);
                let generation = ByteLog::next_generation(&medium);
                // From here the old log's file may hold the new header: a
                // failure is the sync's error, never a fall back to the old log.
                let log = ByteLog::format(medium, generation)?;
                *self.writer().byte_log() = log;
                true
            }
            Err(_) => false,
        };
        if self.held {
            // A mount's image is marked again at once, not at its next commit.
            self.mark()?;
        }
        Ok(resized)
    }
}

/// The length to open the log file at `path` with: `configured`, the file
/// cut back to it when longer and not needed (`pending` false: the image
/// holds everything); a longer file that the image still needs — a log
/// grown for a commit before a crash — at its own length, which its
/// header's ring size may fill.
///
/// # Errors
/// [`Error::Io`] cutting the file back.
pub(crate) fn log_length_at_open(path: &std::path::Path, configured: u64, pending: bool) -> Result<u64, Error> {
    let have = std::fs::metadata(path).map_or(0, |m| m.len());
    if pending {
        return Ok(configured.max(have));
    }
    if have > configured {
        let file = std::fs::OpenOptions::new().write(true).open(path);
        file.and_then(|f| f.set_len(configured))
            .map_err(|source| Error::Io { context: format!("{}: cutting the log back", path.display()), source })?;
    }
    Ok(configured)
}

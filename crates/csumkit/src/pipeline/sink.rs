//! Where the data goes: anything with positional writes and a durability
//! barrier. [`FileSink`] is a regular file or device, opened with `O_DIRECT`
//! when the filesystem allows it.

use crate::Error;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A write target.
pub trait Sink: Send {
    /// Writes a prefix of `data` at `offset` and says how long, like
    /// `pwrite(2)` (a short count is not an error).
    ///
    /// # Errors
    /// The I/O error.
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<usize>;

    /// Makes everything written durable (`fdatasync(2)`).
    ///
    /// # Errors
    /// The I/O error.
    fn sync(&mut self) -> io::Result<()>;

    /// The open file writes can be submitted to directly (io_uring), and
    /// whether it bypasses the page cache. `None`, the default, for sinks
    /// that are not one file descriptor: [`Mode::Uring`](super::Mode::Uring)
    /// then runs as [`Mode::Async`](super::Mode::Async).
    fn raw_target(&self) -> Option<(RawFd, bool)> {
        None
    }
}

/// A file written with positional writes.
#[derive(Debug)]
pub struct FileSink {
    file: File,
    path: PathBuf,
    direct: bool,
}

impl FileSink {
    /// Creates (or opens and keeps) `path` for writing, with `O_DIRECT` if
    /// `direct` and the filesystem accepts it; [`is_direct`](Self::is_direct)
    /// says which. Writes through `O_DIRECT` need [`super::AlignedBuf`]s and
    /// block-multiple offsets and lengths.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path.
    pub fn create(path: &Path, direct: bool) -> Result<Self, Error> {
        let open =
            |flags: i32| OpenOptions::new().write(true).create(true).truncate(false).custom_flags(flags).open(path);
        let io_err = |source| Error::Io { context: format!("{}: cannot open for writing", path.display()), source };
        if direct {
            match open(libc::O_DIRECT) {
                Ok(file) => return Ok(FileSink { file, path: path.to_path_buf(), direct: true }),
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {} // no O_DIRECT here: buffered
                Err(e) => return Err(io_err(e)),
            }
        }
        let file = open(0).map_err(io_err)?;
        Ok(FileSink { file, path: path.to_path_buf(), direct: false })
    }

    /// Whether writes bypass the page cache.
    pub fn is_direct(&self) -> bool {
        self.direct
    }

    /// The path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Sink for FileSink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<usize> {
        self.file.write_at(data, offset)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn raw_target(&self) -> Option<(RawFd, bool)> {
        Some((self.file.as_raw_fd(), self.direct))
    }
}

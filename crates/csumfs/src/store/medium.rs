//! Where the image's bytes and its ByteLog go to stay: the image file's
//! backing (or a simulated disk in tests), the log's medium and how it was
//! chosen, and the tags of a commit's records.

use crate::error::Error;
use csumkit::bytelog::Medium;
use std::path::Path;

/// A commit's record that more records follow.
pub const TAG_PART: u16 = 1;
/// A commit's last record.
pub const TAG_LAST: u16 = 2;

/// Makes every write the image file got before it durable; runs while
/// other writes go on (another descriptor of the same file).
pub type SyncHandle = Box<dyn FnMut() -> std::io::Result<()> + Send>;

/// Where the image's bytes go to stay: the image file (or, in tests, a
/// simulated disk with a page cache).
pub trait Backing: Send + Sync {
    /// Writes `bytes` at `at` (durable only after [`sync`](Self::sync)).
    ///
    /// # Errors
    /// What the write reports.
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()>;
    /// Makes every write before it durable.
    ///
    /// # Errors
    /// What the flush reports.
    fn sync(&mut self) -> std::io::Result<()>;
    /// A handle that does what [`sync`](Self::sync) does while writes go
    /// on: a commit's flushes run after the volume's lock is let go.
    ///
    /// # Errors
    /// What duplicating the file's descriptor reports.
    fn sync_handle(&self) -> std::io::Result<SyncHandle>;
    /// Reads `buf.len()` bytes at `at` as the last writes left them: what
    /// a fold of the image's journal reads back (unsupported by default).
    ///
    /// # Errors
    /// What the read reports.
    fn read_at(&self, _at: u64, _buf: &mut [u8]) -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
    /// Starts writing `[at, at + len)` out without waiting for it: a hint
    /// that the next [`sync`](Self::sync) will want it (nothing by default).
    fn write_behind(&self, _at: u64, _len: u64) {}
}

impl Backing for std::fs::File {
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, bytes, at)
    }
    fn read_at(&self, at: u64, buf: &mut [u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, at)
    }
    fn write_behind(&self, at: u64, len: u64) {
        // SAFETY: an open descriptor; the call only starts write-back of
        // the file's dirty pages in the range (no wait, no flush). Errors
        // are the sync's to report.
        unsafe {
            libc::sync_file_range(
                std::os::fd::AsRawFd::as_raw_fd(self),
                at as i64,
                len as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
    fn sync_handle(&self) -> std::io::Result<SyncHandle> {
        let file = self.try_clone()?;
        Ok(Box::new(move || file.sync_data()))
    }
}

/// A backing that keeps nothing: replay into bytes in memory.
pub(crate) struct Nowhere;

impl Backing for Nowhere {
    fn write_at(&mut self, _: u64, _: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_handle(&self) -> std::io::Result<SyncHandle> {
        Ok(Box::new(|| Ok(())))
    }
}

/// A ByteLog medium of any kind (a mapped file, or a simulated one in tests).
pub type LogMedium = Box<dyn Medium + Send + Sync>;

/// Adapter: `ByteLog` wants a sized medium.
pub(crate) struct AnyMedium(pub(crate) LogMedium);

impl Medium for AnyMedium {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn view(&self, offset: u64, len: u64) -> Result<&[u8], csumkit::Error> {
        self.0.view(offset, len)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), csumkit::Error> {
        self.0.write(offset, data)
    }
    fn flush(&mut self, offset: u64, len: u64) -> Result<(), csumkit::Error> {
        self.0.flush(offset, len)
    }
    fn fence(&mut self) -> Result<(), csumkit::Error> {
        self.0.fence()
    }
}

/// Where a log opened by [`Volume::open_logged`](crate::Volume::open_logged) lives: a DAX map, flushed
/// by cache line and durable when fenced; a map on tmpfs, flushed the same
/// way but lost at power-off (the stand-in for persistent memory); or an
/// ordinary file, written with `pwrite` and made durable by `fdatasync` —
/// with direct I/O, in whole device sectors, where its file system takes it.
pub const LOG_ON_DAX: &str = "DAX, flushed by cache line";
/// See [`LOG_ON_DAX`].
pub const LOG_ON_TMPFS: &str = "tmpfs, flushed by cache line (a stand-in for persistent memory: lost at power-off)";
/// See [`LOG_ON_DAX`].
pub const LOG_ON_FILE: &str = "a file, pwrite + fdatasync";
/// Commits as jbd2 transactions in the image's own journal.
pub const LOG_IN_IMAGE_JOURNAL: &str = "the image's jbd2 journal (blocks, fdatasync, commit block, fdatasync)";
/// A ByteLog in the image journal's fast-commit area (`-o bytelog`).
pub const LOG_IN_FAST_COMMIT_AREA: &str = "the image journal's fast-commit area, pwrite + fdatasync";
/// See [`LOG_IN_FAST_COMMIT_AREA`].
pub const LOG_IN_FAST_COMMIT_AREA_DIRECT: &str =
    "the image journal's fast-commit area, direct writes of whole sectors + fdatasync";
/// See [`LOG_IN_FAST_COMMIT_AREA`]: the image on DAX (or tmpfs, the stand-in).
pub const LOG_IN_FAST_COMMIT_AREA_MAPPED: &str = "the image journal's fast-commit area, mapped, flushed by cache line";
/// See [`LOG_ON_DAX`].
pub const LOG_ON_FILE_DIRECT: &str = "a file, direct writes of whole sectors + fdatasync";

/// The log's medium and which of the three it is: on DAX (a `MAP_SYNC`
/// map works) or tmpfs, a shared map flushed by cache line; elsewhere a
/// file written with `pwrite` and `fdatasync`.
pub(crate) fn log_medium(path: &Path, len: u64) -> Result<(LogMedium, &'static str), Error> {
    use csumkit::bytelog::{FileMedium, MmapMedium, Persist};
    if on_tmpfs(path) {
        return Ok((Box::new(MmapMedium::open(path, len, Persist::CacheLines)?), LOG_ON_TMPFS));
    }
    // Written with zeros first, so the DAX probe below never maps holes.
    let file = FileMedium::open(path, len)?;
    let mapped = MmapMedium::open_auto(path, len)?;
    if mapped.persist() == Persist::CacheLines {
        return Ok((Box::new(mapped), LOG_ON_DAX));
    }
    let on = if file.write_unit() > 1 { LOG_ON_FILE_DIRECT } else { LOG_ON_FILE };
    Ok((Box::new(file), on))
}

/// Whether the file at `path` (existing or not) is on tmpfs: its
/// directory's file system.
pub(crate) fn on_tmpfs(path: &Path) -> bool {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str())).ok();
    // SAFETY: statfs fills a zeroed struct (all-zero is a valid value)
    // from a NUL-terminated path.
    c.is_some_and(|c| unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type == libc::TMPFS_MAGIC
    })
}

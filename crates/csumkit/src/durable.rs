//! Files whose writes are durable only after a flush: what the split PI
//! device, the pipeline's checksum file and csumfs's data checksum sidecar
//! keep their bytes in. An ordinary [`File`], or — in the power-cut tests —
//! a simulated disk that keeps written bytes apart from durable ones, so a
//! cut can leave any subset of what was not yet flushed.

use std::fs::File;
use std::io;

/// Positioned reads and writes, and a flush that makes the writes before it
/// durable.
pub trait DurableFile: Send + Sync {
    /// Its size in bytes.
    ///
    /// # Errors
    /// As the file system's.
    fn size(&self) -> io::Result<u64>;
    /// Cuts or extends (new bytes read as zeros) it to `len` bytes.
    ///
    /// # Errors
    /// As the file system's.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Fills `buf` from byte `at`.
    ///
    /// # Errors
    /// As the file system's; `UnexpectedEof` past the end.
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
    /// Writes `buf` at byte `at` (durable only after
    /// [`sync_data`](Self::sync_data)).
    ///
    /// # Errors
    /// As the file system's.
    fn write_all_at(&self, buf: &[u8], at: u64) -> io::Result<()>;
    /// Makes every write and length change before it durable
    /// (`fdatasync`).
    ///
    /// # Errors
    /// As the file system's.
    fn sync_data(&self) -> io::Result<()>;
}

impl DurableFile for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self, buf, at)
    }
    fn write_all_at(&self, buf: &[u8], at: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, buf, at)
    }
    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }
}

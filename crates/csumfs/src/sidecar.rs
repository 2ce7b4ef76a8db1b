//! The file a data checksum sidecar lives in: an ordinary [`File`] beside
//! the image, or — in csumfs's power-cut test — a simulated disk whose
//! writes are durable only at [`sync`](SidecarFile::sync), so that a cut
//! can keep any subset of the rest.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// What [`Volume::enable_data_checksums_on`](crate::Volume::enable_data_checksums_on)
/// keeps a sidecar in.
pub trait SidecarFile: Send + Sync {
    /// The file's length in bytes.
    ///
    /// # Errors
    /// What the file system reports.
    fn size(&self) -> io::Result<u64>;
    /// Cuts or extends (with zeros) the file to `len` bytes.
    ///
    /// # Errors
    /// What the file system reports.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// Fills `buf` from byte `at`; an error if the file ends first.
    ///
    /// # Errors
    /// What the file system reports, or `UnexpectedEof`.
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()>;
    /// Writes `bytes` at byte `at` (durable only after [`sync`](Self::sync)).
    ///
    /// # Errors
    /// What the file system reports.
    fn write_all_at(&mut self, bytes: &[u8], at: u64) -> io::Result<()>;
    /// Makes every write and length change before it durable.
    ///
    /// # Errors
    /// What the flush reports.
    fn sync(&mut self) -> io::Result<()>;
}

impl SidecarFile for File {
    fn size(&self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        FileExt::read_exact_at(self, buf, at)
    }
    fn write_all_at(&mut self, bytes: &[u8], at: u64) -> io::Result<()> {
        FileExt::write_all_at(self, bytes, at)
    }
    fn sync(&mut self) -> io::Result<()> {
        self.sync_data()
    }
}

//! Asynchronous data checksums: a write path that computes the
//! per-block checksums of a large write while the write itself is in
//! flight, and completes the write only when both are done.
//!
//! ```no_run
//! use csumkit::pipeline::{AlignedBuf, ChecksumFile, FileSink, Mode, Writer};
//! use csumkit::Algorithm;
//! use std::path::Path;
//!
//! let sink = FileSink::create(Path::new("data.bin"), true)?;        // O_DIRECT if possible
//! let store = ChecksumFile::create(Path::new("data.bin.csum"))?;
//! let mut writer = Writer::new(sink, store, Mode::Async, 4096, Algorithm::Crc32c)?;
//! let mut buffer = AlignedBuf::zeroed(1 << 20);
//! for i in 0..16u64 {
//!     buffer.fill(i as u8);                                          // the caller's copy
//!     let done = writer.write(i << 20, buffer)?;                     // data + 256 checksums
//!     buffer = done.buffer;                                          // back for reuse
//! }
//! writer.sync()?;
//! # Ok::<(), csumkit::Error>(())
//! ```
//!
//! The model of the async data checksum patch series: with memory-copy, checksum and storage
//! bandwidths M, C and S, a write costs `1/M + 1/C + 1/S` per byte when the
//! checksum comes first ([`Mode::Sync`]) and `1/M + max(1/C, 1/S)` when it
//! overlaps the write ([`Mode::Async`] on a worker thread, [`Mode::Uring`]
//! on the writing thread while io_uring carries the write). `csumkit bench
//! pipeline` measures all three rates and every mode.

mod buffer;
mod sink;
mod store;
#[cfg(target_os = "linux")]
mod uring;
mod writer;

pub use buffer::{AlignedBuf, ALIGN};
pub use sink::{FileSink, Sink};
pub use store::{ChecksumFile, ChecksumStore, MemoryStore};
pub use writer::{Completed, Mode, Writer, DEPTH_MAX};

/// Whether this process can set up an io_uring: where it cannot (not Linux,
/// an old kernel, a seccomp filter such as Docker's default, qemu-user),
/// [`Mode::Uring`] runs as [`Mode::Async`].
pub fn io_uring_available() -> bool {
    #[cfg(target_os = "linux")]
    return uring::Ring::new(1).is_some();
    #[cfg(not(target_os = "linux"))]
    return false;
}

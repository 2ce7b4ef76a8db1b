//! csumkit: checksummed storage building blocks.
//!
//! Three CRC engines with run-time selected hardware paths — [`crc32c`]
//! (Castagnoli; iSCSI, ext4, btrfs), [`crc64nvme`] (NVMe 64-bit guard, S3
//! `x-amz-checksum-crc64nvme`) and [`crc16t10dif`] (T10 DIF / NVMe 16-bit
//! guard) — each with the same API, including the incremental algebra:
//! [`crc32c::combine`], [`crc32c::zero_extend`],
//! [`crc32c::flip_range`] and [`crc32c::splice`].
//!
//! ```
//! let crc = csumkit::crc32c::checksum(b"123456789");
//! assert_eq!(crc, 0xE306_9283);
//! // Flip bits 3..13 of the 9-byte buffer without re-reading it.
//! let mut buf = *b"123456789";
//! for bit in 3..13 { buf[bit / 8] ^= 1 << (bit % 8); }
//! assert_eq!(csumkit::crc32c::flip_range(crc, 72, 3, 10)?, csumkit::crc32c::checksum(&buf));
//! # Ok::<(), csumkit::Error>(())
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod alloc;
mod arch;
pub mod bytelog;
pub mod crc;
pub mod crc16t10dif;
pub mod crc32c;
pub mod crc64nvme;
pub mod csum_tree;
pub mod durable;
pub mod erofs;
mod error;
pub mod ext4;
pub mod file;
pub mod le;
pub mod pi;
#[cfg(unix)]
pub mod pipeline;
pub mod xattr_filter;

pub use arch::{Backend, BACKEND_ENV_VAR};
pub use crc::Algorithm;
pub use durable::DurableFile;
pub use error::Error;

/// The README's Rust example, compiled and run by `cargo test --doc`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExample;

//! What the ByteLog refuses: a record with no room, a range outside its
//! medium. Converts into [`crate::Error`]; damage is `Error::Corrupt` and
//! failed I/O `Error::Io`, as everywhere.

/// A ByteLog refusal.
#[allow(missing_docs)] // variant fields are named for what they hold
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// A log with no room for a record until it is truncated.
    #[error("log full: {needed} bytes needed, {free} free (checkpoint or truncate first)")]
    Full { needed: u64, free: u64 },

    /// A byte range outside the log's medium.
    #[error("byte range [{offset}, {offset} + {len}) is outside the {total_len}-byte log medium")]
    OutOfBounds { offset: u64, len: u64, total_len: u64 },
}

//! What a CRC call can refuse: ranges outside their buffer, and names of
//! algorithms and backends that do not exist or cannot run here. Converts
//! into [`crate::Error`].

/// A CRC operation's refusal.
#[allow(missing_docs)] // variant fields are named for what they hold
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CrcError {
    /// A bit count that must describe whole bytes does not.
    #[error("total_bits {total_bits} is not a multiple of 8")]
    TotalBitsNotWholeBytes { total_bits: u64 },

    /// A buffer longer than the algebra handles.
    #[error("total_bits = {total_bits} exceeds the limit of {max}")]
    TotalBitsTooLarge { total_bits: u64, max: u64 },

    /// A bit range that does not fit in its buffer.
    #[error("bit range [{bit_offset}, {bit_offset} + {bit_len}) is outside the {total_bits}-bit buffer")]
    BitRangeOutOfBounds { bit_offset: u64, bit_len: u64, total_bits: u64 },

    /// A byte range that does not fit in its buffer.
    #[error("byte range [{offset}, {offset} + {len}) is outside the {total_len}-byte buffer")]
    ByteRangeOutOfBounds { offset: u64, len: u64, total_len: u64 },

    /// Old and new contents of a splice differ in length.
    #[error("old region is {old_len} bytes but new region is {new_len} bytes; a splice keeps the length")]
    LengthMismatch { old_len: u64, new_len: u64 },

    /// An algorithm name that does not exist.
    #[error("unknown algorithm {name:?} (expected one of: crc32c, crc64nvme, crc16t10dif)")]
    UnknownAlgorithm { name: String },

    /// A backend name that does not exist.
    #[error("unknown backend {name:?} (expected one of: portable, {})", crate::Backend::ALL.map(|b| b.name()).join(", "))]
    UnknownBackend { name: String },

    /// A backend this CPU cannot run.
    #[error("backend {name} is not supported by this CPU")]
    BackendUnavailable { name: &'static str },
}

//! The one error type of the library. Pure CRC functions cannot fail; every
//! operation on caller-supplied ranges returns `Result<_, Error>`.

/// Everything that can go wrong in csumkit.
#[allow(missing_docs)] // variant fields are named for what they hold
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bit count that must describe whole bytes does not.
    #[error("total_bits {total_bits} is not a multiple of 8")]
    TotalBitsNotWholeBytes { total_bits: u64 },

    /// A bit range that does not fit in its buffer.
    #[error("bit range [{bit_offset}, {bit_offset} + {bit_len}) is outside the {total_bits}-bit buffer")]
    BitRangeOutOfBounds { bit_offset: u64, bit_len: u64, total_bits: u64 },

    /// A byte range that does not fit in its buffer.
    #[error("byte range [{offset}, {offset} + {len}) is outside the {total_len}-byte buffer")]
    ByteRangeOutOfBounds { offset: u64, len: u64, total_len: u64 },

    /// Old and new contents of a splice differ in length.
    #[error("old region is {old_len} bytes but new region is {new_len} bytes; a splice keeps the length")]
    LengthMismatch { old_len: u64, new_len: u64 },

    /// A value above a documented limit.
    #[error("{what} = {value} exceeds the limit of {max}")]
    TooLarge { what: &'static str, value: u64, max: u64 },

    /// An algorithm name that does not exist.
    #[error("unknown algorithm {name:?} (expected one of: crc32c, crc64nvme, crc16t10dif)")]
    UnknownAlgorithm { name: String },

    /// A backend name that does not exist.
    #[error("unknown backend {name:?} (expected one of: portable, {})", crate::Backend::ALL.map(|b| b.name()).join(", "))]
    UnknownBackend { name: String },

    /// A backend this CPU cannot run.
    #[error("backend {name} is not supported by this CPU")]
    BackendUnavailable { name: &'static str },

    /// A file whose size changed while it was being read.
    #[error("{path}: file changed size while being read (expected {expected} bytes, got {actual})")]
    FileChanged { path: String, expected: u64, actual: u64 },

    /// A parameter outside what the component supports (an allocator
    /// geometry ext4 would not build, an unknown strategy name, …).
    #[error("invalid {what}: {detail}")]
    Invalid { what: &'static str, detail: String },

    /// Not enough free blocks for a request.
    #[error("no space: {requested} blocks requested, {free} free")]
    NoSpace { requested: u64, free: u64 },

    /// A block range that is not (entirely) allocated where it must be, or not
    /// inside the volume: freeing it would corrupt the free count.
    #[error("blocks [{start}, {start} + {len}) {problem}")]
    BadBlockRange { start: u64, len: u64, problem: &'static str },

    /// On-media metadata that fails a checksum or consistency check.
    #[error("corrupt {location}: {detail}")]
    Corrupt { location: String, detail: String },

    /// A log with no room for a record until it is truncated.
    #[error("log full: {needed} bytes needed, {free} free (checkpoint or truncate first)")]
    LogFull { needed: u64, free: u64 },

    /// A block whose protection information does not match it.
    #[error("PI check failed: {0}")]
    PiCheck(crate::pi::Failure),

    /// An I/O error, with what was being done.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

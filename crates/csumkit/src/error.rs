//! The library's error type. Pure CRC functions cannot fail; the CRC
//! operations on caller-supplied ranges return [`crate::crc::CrcError`];
//! everything else returns this, which holds the subsystems' own refusals
//! (`CrcError`, `bytelog::LogError`, `alloc::AllocError`, `pi::Failure`)
//! beside what every part shares (damage, I/O, limits, invalid input).

/// Everything that can go wrong in csumkit.
#[allow(missing_docs)] // variant fields are named for what they hold
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CRC operation's refusal (ranges, algorithm and backend names).
    #[error(transparent)]
    Crc(#[from] crate::crc::CrcError),

    /// A ByteLog refusal (no room, a range outside the medium).
    #[error(transparent)]
    Log(#[from] crate::bytelog::LogError),

    /// A block allocator refusal (no space).
    #[error(transparent)]
    Alloc(#[from] crate::alloc::AllocError),

    /// A value above a documented limit.
    #[error("{what} = {value} exceeds the limit of {max}")]
    TooLarge { what: &'static str, value: u64, max: u64 },

    /// A file whose size changed while it was being read.
    #[error("{path}: file changed size while being read (expected {expected} bytes, got {actual})")]
    FileChanged { path: String, expected: u64, actual: u64 },

    /// A parameter outside what the component supports (an allocator
    /// geometry ext4 would not build, an unknown strategy name, …).
    #[error("invalid {what}: {detail}")]
    Invalid { what: &'static str, detail: String },

    /// A block range that is not (entirely) allocated where it must be, or not
    /// inside the volume: freeing it would corrupt the free count.
    #[error("blocks [{start}, {start} + {len}) {problem}")]
    BadBlockRange { start: u64, len: u64, problem: &'static str },

    /// On-media metadata that fails a checksum or consistency check.
    #[error("corrupt {location}: {detail}")]
    Corrupt { location: String, detail: String },

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

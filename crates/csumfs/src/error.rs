//! Errors with the errno a filesystem call returns for them.

/// What went wrong, and the errno (`Error::errno`) a POSIX call reports.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `ENOENT`.
    #[error("{0}: no such file or directory")]
    NotFound(String),
    /// `EEXIST`.
    #[error("{0}: file exists")]
    Exists(String),
    /// `EPERM`.
    #[error("{0}: operation not permitted")]
    Permission(String),
    /// `EMLINK`.
    #[error("{0}: too many links")]
    TooManyLinks(String),
    /// `ENOTEMPTY`.
    #[error("{0}: directory not empty")]
    NotEmpty(String),
    /// `ENOTDIR`.
    #[error("{0}: not a directory")]
    NotDir(String),
    /// `EISDIR`.
    #[error("{0}: is a directory")]
    IsDir(String),
    /// `EINVAL`: e.g. readlink of something that is not a symlink.
    #[error("{0}")]
    Invalid(String),
    /// `ENAMETOOLONG`.
    #[error("{0}: name longer than 255 bytes")]
    NameTooLong(String),
    /// `ENODATA`: no such xattr.
    #[error("{0}: no such attribute")]
    NoData(String),
    /// `EOPNOTSUPP` at open: a feature this volume code does not implement,
    /// with what to do about it.
    #[error("unsupported ext4 feature {feature}: {remedy}")]
    Unsupported {
        /// The feature, as mke2fs/tune2fs name it.
        feature: &'static str,
        /// What a user can do.
        remedy: &'static str,
    },
    /// `EBUSY`: the image is open in another process that excludes this
    /// open (`store/image_lock.rs`).
    #[error("{0}")]
    InUse(String),
    /// `EUCLEAN` (the kernel's `EFSCORRUPTED`): metadata that cannot be right.
    #[error("corrupt {what}: {detail}")]
    Corrupt {
        /// Which structure.
        what: String,
        /// Why.
        detail: String,
    },
    /// `EBADMSG` (the kernel's `EFSBADCRC`): a metadata checksum mismatch.
    #[error("{what}: checksum {stored:#010x} on media, {computed:#010x} computed")]
    Checksum {
        /// Which structure.
        what: String,
        /// Stored.
        stored: u32,
        /// Recomputed.
        computed: u32,
    },
    /// `EIO`: a file data block does not match its checksum.
    #[error("inode {ino} block {logical} (disk block {physical}): data checksum {stored:#010x} stored, {computed:#010x} read")]
    DataChecksum {
        /// The file.
        ino: u32,
        /// Its block.
        logical: u64,
        /// The disk block.
        physical: u64,
        /// Checksum recorded when written.
        stored: u32,
        /// Checksum of what is there now.
        computed: u32,
    },
    /// `EIO`: the PI device found a file data block that does not match
    /// its protection information.
    #[error("inode {ino} block {logical} (disk block {physical}): {detail}")]
    DataPi {
        /// The file.
        ino: u32,
        /// Its block.
        logical: u64,
        /// The disk block.
        physical: u64,
        /// The device's report (which field, both values).
        detail: String,
    },
    /// Errors of the format layer (`csumkit::ext4`).
    #[error(transparent)]
    Format(#[from] csumkit::Error),
    /// `EIO` and friends from the image file.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The OS error.
        source: std::io::Error,
    },
}

/// A CRC refusal where csumfs moves a checksum: a range it computed
/// outside its structure, reported as the library's.
impl From<csumkit::crc::CrcError> for Error {
    fn from(e: csumkit::crc::CrcError) -> Self {
        Error::Format(e.into())
    }
}

impl Error {
    /// The errno a filesystem call reports for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound(_) => libc::ENOENT,
            Error::Exists(_) => libc::EEXIST,
            Error::NotDir(_) => libc::ENOTDIR,
            Error::NotEmpty(_) => libc::ENOTEMPTY,
            Error::Permission(_) => libc::EPERM,
            Error::TooManyLinks(_) => libc::EMLINK,
            Error::IsDir(_) => libc::EISDIR,
            Error::Invalid(_) => libc::EINVAL,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::NoData(_) => libc::ENODATA,
            Error::Unsupported { .. } => libc::EOPNOTSUPP,
            Error::InUse(_) => libc::EBUSY,
            Error::Corrupt { .. } | Error::Format(_) => libc::EUCLEAN,
            Error::Checksum { .. } => libc::EBADMSG,
            Error::DataChecksum { .. } | Error::DataPi { .. } => libc::EIO,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }
}

pub(crate) fn corrupt(what: impl Into<String>, detail: impl Into<String>) -> Error {
    Error::Corrupt { what: what.into(), detail: detail.into() }
}

//! Where the PI sits: the LBA format (data + metadata bytes per block) and
//! the tuple's place in the metadata.

use super::format::PiFormat;
use crate::Error;
use std::fmt;
use std::str::FromStr;

/// Smallest logical-block data size (NVMe LBADS 9).
pub const DATA_BYTES_MIN: u32 = 512;
/// Largest logical-block data size csumkit accepts (64 KiB; NVMe allows more,
/// no drive ships it).
pub const DATA_BYTES_MAX: u32 = 64 * 1024;
/// Largest metadata size per block csumkit accepts.
pub const METADATA_BYTES_MAX: u32 = 4096;
/// Largest single command: 64 MiB of data (NVMe MDTS is far lower).
pub const COMMAND_DATA_BYTES_MAX: usize = 64 << 20;

/// Data and metadata bytes of one logical block, written `4096+8`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LbaFormat {
    data_bytes: u32,
    metadata_bytes: u32,
}

impl LbaFormat {
    /// A format; the data size is a power of two in 512..=64 KiB.
    pub fn new(data_bytes: u32, metadata_bytes: u32) -> Result<Self, Error> {
        if !data_bytes.is_power_of_two() || !(DATA_BYTES_MIN..=DATA_BYTES_MAX).contains(&data_bytes) {
            return Err(Error::Invalid {
                what: "LBA format",
                detail: format!("data size {data_bytes} is not a power of two in {DATA_BYTES_MIN}..={DATA_BYTES_MAX}"),
            });
        }
        if metadata_bytes > METADATA_BYTES_MAX {
            return Err(Error::Invalid {
                what: "LBA format",
                detail: format!("metadata size {metadata_bytes} exceeds {METADATA_BYTES_MAX}"),
            });
        }
        Ok(LbaFormat { data_bytes, metadata_bytes })
    }

    /// Data bytes per block.
    pub const fn data_bytes(self) -> usize {
        self.data_bytes as usize
    }

    /// Metadata bytes per block.
    pub const fn metadata_bytes(self) -> usize {
        self.metadata_bytes as usize
    }

    /// Data + metadata: the size of one block in an extended-LBA buffer.
    pub const fn extended_bytes(self) -> usize {
        self.data_bytes() + self.metadata_bytes()
    }
}

impl FromStr for LbaFormat {
    type Err = Error;

    /// `4096+8`, `512+8`, `4096+64`, or `4096` (no metadata).
    fn from_str(text: &str) -> Result<Self, Error> {
        let bad =
            || Error::Invalid { what: "LBA format", detail: format!("{text:?} (expected DATA+META, e.g. 4096+8)") };
        let (data, meta) = text.trim().split_once('+').unwrap_or((text.trim(), "0"));
        LbaFormat::new(data.parse().map_err(|_| bad())?, meta.parse().map_err(|_| bad())?)
    }
}

impl fmt::Display for LbaFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}+{}", self.data_bytes, self.metadata_bytes)
    }
}

/// Whether the tuple is in the first or the last bytes of the metadata.
/// With PI last, the guard also covers the metadata bytes before it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum PiLocation {
    /// First bytes of the metadata (NVMe PIL = 1).
    First,
    /// Last bytes of the metadata (NVMe PIL = 0, the default).
    #[default]
    Last,
}

/// A PI format placed in an LBA format: everything generate and verify
/// need to find and check each block's tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Protection {
    format: PiFormat,
    lba: LbaFormat,
    location: PiLocation,
}

impl Protection {
    /// The metadata must hold the tuple.
    pub fn new(format: PiFormat, lba: LbaFormat, location: PiLocation) -> Result<Self, Error> {
        if lba.metadata_bytes() < format.tuple_bytes() {
            return Err(Error::Invalid {
                what: "LBA format",
                detail: format!(
                    "{lba} has {} metadata bytes; {}-bit guard PI needs {}",
                    lba.metadata_bytes(),
                    format.guard().bits(),
                    format.tuple_bytes()
                ),
            });
        }
        Ok(Protection { format, lba, location })
    }

    /// The tuple format.
    pub const fn format(&self) -> PiFormat {
        self.format
    }

    /// The LBA format.
    pub const fn lba(&self) -> LbaFormat {
        self.lba
    }

    /// Where in the metadata the tuple is.
    pub const fn location(&self) -> PiLocation {
        self.location
    }

    /// Offset of the tuple inside a block's metadata.
    pub const fn tuple_offset(&self) -> usize {
        match self.location {
            PiLocation::First => 0,
            PiLocation::Last => self.lba.metadata_bytes() - self.format.tuple_bytes(),
        }
    }

    /// Metadata bytes the guard covers after the data (those before the tuple).
    pub const fn guarded_metadata_bytes(&self) -> usize {
        self.tuple_offset()
    }
}

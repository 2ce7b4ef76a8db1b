//! End-to-end protection information (T10 DIF / NVMe PI): the
//! 8- or 16-byte tuple a PI-formatted drive keeps beside every logical
//! block — a guard CRC of the block, an application tag and a reference
//! (and storage) tag — so that data is checked from host memory to the
//! medium and back, and a filesystem can keep its data checksums there
//! instead of in a checksum tree.
//!
//! ```
//! use csumkit::pi::{self, Checks, GuardSize, LbaFormat, PiFormat, PiLocation, PiType, Protection, Tags};
//!
//! let format = PiFormat::new(GuardSize::Crc64, PiType::Type1, 0)?;
//! let p = Protection::new(format, "4096+16".parse()?, PiLocation::Last)?;
//! let mut blocks = vec![0u8; 8 * p.lba().extended_bytes()];     // 8 blocks, data + PI interleaved
//! pi::generate(&p, &mut blocks, &Tags::for_lba(1000))?;          // reference tags 1000..1008
//! pi::verify(&p, &blocks, &Tags::for_lba(1000), Checks::ALL)?;
//! blocks[5] ^= 1;                                                 // bit rot in block 0
//! let err = pi::verify(&p, &blocks, &Tags::for_lba(1000), Checks::ALL).unwrap_err();
//! assert!(err.to_string().starts_with("PI check failed: block 0: guard check failed"));
//! # Ok::<(), csumkit::Error>(())
//! ```
//!
//! [`Device`] is a file-backed emulation of a PI-formatted namespace: host
//! PI checked on write, or PRACT (the device generates PI on write and
//! strips it on read), with error injection.

#[cfg(unix)]
mod device;
mod format;
#[cfg(unix)]
mod intent;
mod layout;
mod protect;
#[cfg(unix)]
mod storage;

#[cfg(unix)]
pub use device::{Device, DeviceStats, Fault, Io, COMMAND_DATA_BYTES_MAX, DEVICE_BLOCKS_MAX};
pub use format::{GuardSize, PiFormat, PiType, Tuple, APP_TAG_ESCAPE};
pub use layout::{LbaFormat, PiLocation, Protection, DATA_BYTES_MAX, DATA_BYTES_MIN, METADATA_BYTES_MAX};
pub use protect::{
    checks_anything, count_escapes, count_escapes_separate, generate, generate_separate, remap_ref_tags,
    remap_ref_tags_separate, verify, verify_each, verify_separate, verify_separate_each, Checks, Failure, Order,
    PiField, Tags,
};
#[cfg(unix)]
pub use storage::{clear_split_owner_tag, split_protection, SplitOpened, OWNER_TAG_BYTES};

//! CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected, init and final
//! XOR 0xFFFFFFFF, check value 0xE3069283. Used by iSCSI, ext4, btrfs, SCTP
//! and S3 (`x-amz-checksum-crc32c`).
//!
//! ext4 and the Linux `crc32c()` helper work on the raw register: a seed goes
//! in, no final inversion comes out. That is [`raw_update`];
//! `update(crc, d) == !raw_update(!crc, d)`.

use crate::crc::spec::Algorithm;

/// The CRC-32C parameter set.
pub use crate::crc::spec::CRC32C as SPEC;

crate::crc::api::crc_api!(u32, SPEC, Algorithm::Crc32c, crc32c, 0xE306_9283);

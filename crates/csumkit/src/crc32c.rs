//! CRC-32C (Castagnoli): polynomial 0x1EDC6F41, reflected, init and final
//! XOR 0xFFFFFFFF, check value 0xE3069283. Used by iSCSI, ext4, btrfs, SCTP
//! and S3 (`x-amz-checksum-crc32c`).
//!
//! ext4 and the Linux `crc32c()` helper work on the raw register: a seed goes
//! in, no final inversion comes out. That is [`raw_update`];
//! `update(crc, d) == !raw_update(!crc, d)`.

use crate::crc::spec::{Algorithm, Spec};

/// The CRC-32C parameter set.
pub static SPEC: Spec = Spec::new(Algorithm::Crc32c, "crc32c", 32, 0x1EDC_6F41, true, 0xFFFF_FFFF, 0xE306_9283);

crate::crc::crc_api!(u32, SPEC, Algorithm::Crc32c, crc32c, 0xE306_9283);

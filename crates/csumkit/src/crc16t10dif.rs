//! CRC-16/T10-DIF: polynomial 0x8BB7, not reflected (MSB first), init 0, no
//! final XOR, check value 0xD0DB. The T10 DIF / NVMe 16-bit guard.

use crate::crc::spec::Algorithm;

/// The CRC-16/T10-DIF parameter set.
pub use crate::crc::spec::CRC16T10DIF as SPEC;

crate::crc::api::crc_api!(u16, SPEC, Algorithm::Crc16T10Dif, crc16t10dif, 0xD0DB);

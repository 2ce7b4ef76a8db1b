//! CRC-64/NVME: polynomial 0xAD93D23594C93659, reflected, init and final XOR
//! all-ones, check value 0xAE8B14860A799888. The NVMe 64-bit guard and S3's
//! `x-amz-checksum-crc64nvme`.

use crate::crc::spec::Algorithm;

/// The CRC-64/NVME parameter set.
pub use crate::crc::spec::CRC64NVME as SPEC;

crate::crc::api::crc_api!(u64, SPEC, Algorithm::Crc64Nvme, crc64nvme, 0xAE8B_1486_0A79_9888);

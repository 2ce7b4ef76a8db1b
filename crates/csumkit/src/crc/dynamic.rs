//! The three CRCs behind one run-time value, for callers that pick the
//! algorithm from user input (the CLI, bindings). Values are widened to `u64`.

use super::spec::{Algorithm, Spec};
use crate::crc::CrcError;
use crate::{crc16t10dif, crc32c, crc64nvme};

/// Parses like [`Algorithm::from_name`]. There are no aliases: `crc64` or
/// `crc16` alone name several different CRCs (ECMA, XZ, NVMe; T10-DIF, CCITT…).
///
/// ```
/// use csumkit::Algorithm;
/// assert_eq!("crc64nvme".parse::<Algorithm>().unwrap(), Algorithm::Crc64Nvme);
/// assert_eq!("CRC-32C".parse::<Algorithm>().unwrap(), Algorithm::Crc32c);
/// assert!("crc64".parse::<Algorithm>().is_err());
/// ```
impl std::str::FromStr for Algorithm {
    type Err = CrcError;

    fn from_str(name: &str) -> Result<Algorithm, CrcError> {
        Algorithm::from_name(name)
    }
}

impl Algorithm {
    /// Every algorithm.
    pub const ALL: [Algorithm; 3] = [Algorithm::Crc32c, Algorithm::Crc64Nvme, Algorithm::Crc16T10Dif];

    /// The parameter set.
    pub fn spec(self) -> &'static Spec {
        match self {
            Algorithm::Crc32c => &super::spec::CRC32C,
            Algorithm::Crc64Nvme => &super::spec::CRC64NVME,
            Algorithm::Crc16T10Dif => &super::spec::CRC16T10DIF,
        }
    }

    /// Short lowercase name: `crc32c`, `crc64nvme`, `crc16t10dif`.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// Checksum width in bits.
    pub fn width(self) -> u32 {
        self.spec().width
    }

    /// Parses a name as printed by [`Algorithm::name`] (case-insensitive,
    /// `-` and `_` ignored, so `CRC64-NVME` works too).
    pub fn from_name(name: &str) -> Result<Algorithm, CrcError> {
        let wanted: String = name.chars().filter(|c| *c != '-' && *c != '_').collect::<String>().to_lowercase();
        Algorithm::ALL
            .into_iter()
            .find(|a| a.name() == wanted)
            .ok_or_else(|| CrcError::UnknownAlgorithm { name: name.to_string() })
    }

    /// Every name [`Algorithm::from_name`] accepts, for help texts.
    pub const NAMES: [&'static str; 3] = ["crc32c", "crc64nvme", "crc16t10dif"];

    /// See [`crc32c::update`].
    #[inline]
    pub fn update(self, crc: u64, data: &[u8]) -> u64 {
        match self {
            Algorithm::Crc32c => crc32c::update(crc as u32, data) as u64,
            Algorithm::Crc64Nvme => crc64nvme::update(crc, data),
            Algorithm::Crc16T10Dif => crc16t10dif::update(crc as u16, data) as u64,
        }
    }

    /// See [`crc32c::checksum`].
    #[inline]
    pub fn checksum(self, data: &[u8]) -> u64 {
        self.update(0, data)
    }

    /// See [`crc32c::combine`].
    #[inline]
    pub fn combine(self, crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
        match self {
            Algorithm::Crc32c => crc32c::combine(crc_a as u32, crc_b as u32, len_b) as u64,
            Algorithm::Crc64Nvme => crc64nvme::combine(crc_a, crc_b, len_b),
            Algorithm::Crc16T10Dif => crc16t10dif::combine(crc_a as u16, crc_b as u16, len_b) as u64,
        }
    }
}

impl std::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_dispatch_matches_modules() {
        for a in Algorithm::ALL {
            assert_eq!(Algorithm::from_name(a.name()).unwrap(), a);
            assert_eq!(a.checksum(b"123456789"), a.spec().check);
        }
        assert_eq!(Algorithm::from_name("CRC64-NVME").unwrap(), Algorithm::Crc64Nvme);
        assert!(matches!(Algorithm::from_name("md5"), Err(CrcError::UnknownAlgorithm { .. })));
        let (a, b) = (b"hello ".as_slice(), b"world".as_slice());
        for alg in Algorithm::ALL {
            assert_eq!(alg.combine(alg.checksum(a), alg.checksum(b), 5), alg.checksum(b"hello world"));
        }
    }
}

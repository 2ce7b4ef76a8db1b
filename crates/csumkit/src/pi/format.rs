//! The protection-information tuple as the NVMe NVM Command Set lays it out
//! (all fields big-endian):
//!
//! | guard | bytes | 0..       | app tag | storage and reference space        |
//! |-------|-------|-----------|---------|------------------------------------|
//! | 16b   | 8     | 0..2 CRC16 T10-DIF | 2..4 | 4..8: 32 bits, STS 0..=32  |
//! | 32b   | 16    | 0..4 CRC32C        | 4..6 | 6..16: 80 bits, STS 16..=64 |
//! | 64b   | 16    | 0..8 CRC64-NVMe    | 8..10| 10..16: 48 bits, STS 0..=48 |
//!
//! The storage and reference space holds the storage tag in its upper STS
//! bits and the reference tag in the rest.

use crate::Error;

/// Which guard (CRC) the PI tuple carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GuardSize {
    /// CRC-16/T10-DIF, 8-byte tuple (the classic T10 DIF layout).
    Crc16,
    /// CRC-32C, 16-byte tuple.
    Crc32,
    /// CRC-64/NVME, 16-byte tuple.
    Crc64,
}

impl GuardSize {
    /// All three, in order of guard width.
    pub const ALL: [GuardSize; 3] = [GuardSize::Crc16, GuardSize::Crc32, GuardSize::Crc64];

    /// Parses `16`, `32` or `64` (the guard width in bits).
    pub fn from_bits(bits: u32) -> Result<Self, Error> {
        match bits {
            16 => Ok(GuardSize::Crc16),
            32 => Ok(GuardSize::Crc32),
            64 => Ok(GuardSize::Crc64),
            _ => Err(Error::Invalid { what: "PI guard size", detail: format!("{bits} bits (expected 16, 32 or 64)") }),
        }
    }

    /// Guard width in bits.
    pub const fn bits(self) -> u32 {
        match self {
            GuardSize::Crc16 => 16,
            GuardSize::Crc32 => 32,
            GuardSize::Crc64 => 64,
        }
    }

    /// Bytes of the whole PI tuple.
    pub const fn tuple_bytes(self) -> usize {
        match self {
            GuardSize::Crc16 => 8,
            GuardSize::Crc32 | GuardSize::Crc64 => 16,
        }
    }

    const fn guard_bytes(self) -> usize {
        self.bits() as usize / 8
    }

    /// Width of the storage and reference space in bits.
    pub const fn space_bits(self) -> u32 {
        match self {
            GuardSize::Crc16 => 32,
            GuardSize::Crc32 => 80,
            GuardSize::Crc64 => 48,
        }
    }

    /// The storage-tag sizes (STS) the NVM Command Set allows.
    pub const fn storage_tag_bits_range(self) -> (u32, u32) {
        match self {
            GuardSize::Crc16 => (0, 32),
            GuardSize::Crc32 => (16, 64),
            GuardSize::Crc64 => (0, 48),
        }
    }

    /// The guard of `data` (standard parameters of each CRC, as the spec's
    /// test vectors use them).
    pub fn checksum(self, data: &[u8]) -> u64 {
        match self {
            GuardSize::Crc16 => crate::crc16t10dif::checksum(data) as u64,
            GuardSize::Crc32 => crate::crc32c::checksum(data) as u64,
            GuardSize::Crc64 => crate::crc64nvme::checksum(data),
        }
    }

    /// The guard of `a || b` from the guards of `a` and `b`, without
    /// touching the bytes again: the guard of a block whose bytes sit in
    /// separate buffers (data and separate metadata, or split iovecs).
    pub fn combine(self, guard_a: u64, guard_b: u64, len_b: u64) -> u64 {
        match self {
            GuardSize::Crc16 => crate::crc16t10dif::combine(guard_a as u16, guard_b as u16, len_b) as u64,
            GuardSize::Crc32 => crate::crc32c::combine(guard_a as u32, guard_b as u32, len_b) as u64,
            GuardSize::Crc64 => crate::crc64nvme::combine(guard_a, guard_b, len_b),
        }
    }

    /// The guard over several buffers taken as one byte string.
    pub fn checksum_parts(self, parts: &[&[u8]]) -> u64 {
        parts.iter().fold(self.checksum(&[]), |acc, part| self.combine(acc, self.checksum(part), part.len() as u64))
    }
}

/// T10/NVMe protection type: what the reference tag means.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PiType {
    /// Reference tag = low bits of the LBA; checked.
    Type1,
    /// Reference tag = the command's initial reference tag + block index; checked.
    Type2,
    /// Reference tag opaque to the device; never checked.
    Type3,
}

impl PiType {
    /// Parses `1`, `2` or `3`.
    pub fn from_number(n: u32) -> Result<Self, Error> {
        match n {
            1 => Ok(PiType::Type1),
            2 => Ok(PiType::Type2),
            3 => Ok(PiType::Type3),
            _ => Err(Error::Invalid { what: "PI type", detail: format!("{n} (expected 1, 2 or 3)") }),
        }
    }

    /// 1, 2 or 3.
    pub const fn number(self) -> u32 {
        match self {
            PiType::Type1 => 1,
            PiType::Type2 => 2,
            PiType::Type3 => 3,
        }
    }
}

/// The application tag value that turns checking off for a block.
pub const APP_TAG_ESCAPE: u16 = 0xFFFF;

/// Guard size, protection type and storage-tag size: everything needed to
/// read and write one tuple.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PiFormat {
    guard: GuardSize,
    pi_type: PiType,
    storage_tag_bits: u32,
}

/// The fields of one PI tuple, decoded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Tuple {
    /// The CRC of the protected bytes (16, 32 or 64 bits used).
    pub guard: u64,
    /// Application tag.
    pub app_tag: u16,
    /// Storage tag (upper STS bits of the space).
    pub storage_tag: u64,
    /// Reference tag (lower bits of the space).
    pub ref_tag: u64,
}

impl PiFormat {
    /// A format; `storage_tag_bits` must be in the range the NVM Command
    /// Set allows for the guard size.
    pub fn new(guard: GuardSize, pi_type: PiType, storage_tag_bits: u32) -> Result<Self, Error> {
        let (lo, hi) = guard.storage_tag_bits_range();
        if storage_tag_bits < lo || storage_tag_bits > hi {
            return Err(Error::Invalid {
                what: "storage tag size",
                detail: format!("{storage_tag_bits} bits; {}-bit guard PI allows {lo}..={hi}", guard.bits()),
            });
        }
        Ok(PiFormat { guard, pi_type, storage_tag_bits })
    }

    /// The guard size.
    pub const fn guard(self) -> GuardSize {
        self.guard
    }

    /// The protection type.
    pub const fn pi_type(self) -> PiType {
        self.pi_type
    }

    /// Storage-tag size (STS) in bits.
    pub const fn storage_tag_bits(self) -> u32 {
        self.storage_tag_bits
    }

    /// Reference-tag size in bits: the space minus the storage tag.
    pub const fn ref_tag_bits(self) -> u32 {
        self.guard.space_bits() - self.storage_tag_bits
    }

    /// Mask of the reference tag's bits (reference tags wrap at this width).
    pub const fn ref_tag_mask(self) -> u64 {
        mask(self.ref_tag_bits())
    }

    /// Mask of the storage tag's bits.
    pub const fn storage_tag_mask(self) -> u64 {
        mask(self.storage_tag_bits)
    }

    /// Tuple size in bytes.
    pub const fn tuple_bytes(self) -> usize {
        self.guard.tuple_bytes()
    }

    /// Writes `tuple` into `out` (exactly [`Self::tuple_bytes`] long).
    /// Tag values wider than their fields are a programmer error.
    pub fn encode(self, tuple: &Tuple, out: &mut [u8]) {
        assert_eq!(out.len(), self.tuple_bytes(), "PI tuple buffer length");
        assert!(tuple.ref_tag <= self.ref_tag_mask(), "reference tag wider than {} bits", self.ref_tag_bits());
        assert!(tuple.storage_tag <= self.storage_tag_mask(), "storage tag wider than {} bits", self.storage_tag_bits);
        let g = self.guard.guard_bytes();
        out[..g].copy_from_slice(&tuple.guard.to_be_bytes()[8 - g..]);
        out[g..g + 2].copy_from_slice(&tuple.app_tag.to_be_bytes());
        let space = ((tuple.storage_tag as u128) << self.ref_tag_bits()) | tuple.ref_tag as u128;
        let space_bytes = out.len() - g - 2;
        out[g + 2..].copy_from_slice(&space.to_be_bytes()[16 - space_bytes..]);
    }

    /// Reads a tuple from `bytes` (exactly [`Self::tuple_bytes`] long).
    pub fn decode(self, bytes: &[u8]) -> Tuple {
        assert_eq!(bytes.len(), self.tuple_bytes(), "PI tuple buffer length");
        let g = self.guard.guard_bytes();
        let mut guard = [0u8; 8];
        guard[8 - g..].copy_from_slice(&bytes[..g]);
        let app_tag = u16::from_be_bytes([bytes[g], bytes[g + 1]]);
        let mut space = [0u8; 16];
        let space_bytes = bytes.len() - g - 2;
        space[16 - space_bytes..].copy_from_slice(&bytes[g + 2..]);
        let space = u128::from_be_bytes(space);
        Tuple {
            guard: u64::from_be_bytes(guard),
            app_tag,
            storage_tag: (space >> self.ref_tag_bits()) as u64 & self.storage_tag_mask(),
            ref_tag: space as u64 & self.ref_tag_mask(),
        }
    }

    /// Whether the tuple turns checking off: application tag FFFFh, and for
    /// type 3 also an all-ones reference tag (the storage tag does not count).
    pub fn is_escape(self, tuple: &Tuple) -> bool {
        // NVM Command Set Specification (revision 1.2), section 5.3.3 "Control
        // of Protection Information Checking - PRCHK": type 1 and 2 checks
        // are disabled when the Application Tag is FFFFh; type 3 checks when
        // the Application Tag and the Logical Block Reference Tag, if
        // defined, have all bits set — the Storage Tag takes no part (with
        // no Reference Tag, STS = the whole space, FFFFh alone escapes).
        tuple.app_tag == APP_TAG_ESCAPE && (self.pi_type != PiType::Type3 || tuple.ref_tag == self.ref_tag_mask())
    }
}

const fn mask(bits: u32) -> u64 {
    if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    }
}

//! The on-media structures of a ByteLog region, little-endian. The table of
//! every field is in `bytelog/mod.rs`.

use crate::le::{le32, le64};
use crate::Error;

/// Cache-line size: records, anchors and the superblock are aligned to it.
pub const LINE_BYTES: u64 = 64;
/// Record header bytes.
pub const HEADER_BYTES: usize = 32;
/// Largest record (header + payload) of the current format, 64 KiB: a
/// commit that carries a 4 KiB block with its metadata is one record, so
/// one flush and one fence (version 1 records were at most a page, and
/// such a commit took two of each). A ring holds records of at most half
/// its size ([`payload_max`]).
pub const RECORD_BYTES_MAX: usize = 64 * 1024;
/// Largest payload of one record.
pub const PAYLOAD_BYTES_MAX: usize = RECORD_BYTES_MAX - HEADER_BYTES;
/// Format version written. Version 1 (records of at most 4 KiB) is read
/// and appended to as it is: a build that reads only version 1 refuses a
/// version 2 log by its superblock instead of taking its first large
/// record for the torn end of the log.
pub const VERSION: u8 = 2;
/// Largest record of format version 1.
const V1_RECORD_BYTES_MAX: usize = 4096;
/// Where the ring starts: after the superblock and the two anchor slots.
pub const RING_OFFSET: u64 = 4 * LINE_BYTES;

pub(super) const SUPER_MAGIC: &[u8; 8] = b"CSBYTLOG";
pub(super) const ANCHOR_MAGIC: u32 = u32::from_le_bytes(*b"BLAN");
pub(super) const RECORD_MAGIC: u32 = u32::from_le_bytes(*b"BLRC");

/// Record flag: the payload is several TLVs committed together.
pub const FLAG_BATCH: u8 = 1;
/// Record tag of a wrap marker: the rest of the ring is skipped.
pub const TAG_WRAP: u16 = 0xFFFF;

/// Bytes a record of `payload_len` occupies in the ring (whole lines).
pub const fn record_span(payload_len: usize) -> u64 {
    (HEADER_BYTES + payload_len).div_ceil(LINE_BYTES as usize) as u64 * LINE_BYTES
}

/// Largest payload a record of format `version` may carry (beyond it the
/// header is not a record's).
pub(super) const fn version_payload_max(version: u8) -> usize {
    match version {
        1 => V1_RECORD_BYTES_MAX - HEADER_BYTES,
        _ => PAYLOAD_BYTES_MAX,
    }
}

/// Largest payload a log of format `version` with a ring of `ring_bytes`
/// takes: its version's limit, and a record of at most half the ring (whole
/// lines), so that one always fits an emptied ring, wrap marker and all.
/// An 8 KiB ring ([`super::RING_BYTES_MIN`]) takes 4 064 bytes either way.
pub const fn payload_max(version: u8, ring_bytes: u64) -> usize {
    let half = (ring_bytes / 2 / LINE_BYTES * LINE_BYTES) as usize;
    let record = if half < HEADER_BYTES + version_payload_max(version) {
        half
    } else {
        HEADER_BYTES + version_payload_max(version)
    };
    record.saturating_sub(HEADER_BYTES)
}

/// Line 0 of the region: what the log is and where its ring is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// Format version (1 or [`VERSION`]); the anchors and records carry it too.
    pub version: u8,
    /// Log generation (epoch), chosen at format; records of another are stale.
    pub generation: u32,
    /// Ring size in bytes (a multiple of 64).
    pub ring_bytes: u64,
}

impl Superblock {
    pub(super) fn encode(&self) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..8].copy_from_slice(SUPER_MAGIC);
        b[8] = self.version;
        b[12..16].copy_from_slice(&self.generation.to_le_bytes());
        b[16..24].copy_from_slice(&RING_OFFSET.to_le_bytes());
        b[24..32].copy_from_slice(&self.ring_bytes.to_le_bytes());
        let crc = crate::crc32c::checksum(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The superblock in line `b`, checked (magic, version, CRC, ring offset).
    pub fn decode(b: &[u8]) -> Result<Self, Error> {
        let bad = |detail: String| Error::Corrupt { location: "ByteLog superblock".into(), detail };
        if &b[0..8] != SUPER_MAGIC {
            return Err(bad("no ByteLog magic (not formatted?)".into()));
        }
        let (stored, actual) = (le32(b, 60), crate::crc32c::checksum(&b[..60]));
        if stored != actual {
            return Err(bad(format!("CRC32C {stored:#010x}, computed {actual:#010x}")));
        }
        if !(1..=VERSION).contains(&b[8]) {
            return Err(bad(format!("format version {} (this build reads 1 to {VERSION})", b[8])));
        }
        if le64(b, 16) != RING_OFFSET {
            return Err(bad(format!("ring offset {}", le64(b, 16))));
        }
        Ok(Superblock { version: b[8], generation: le32(b, 12), ring_bytes: le64(b, 24) })
    }
}

/// One of the two anchor slots: the window a checkpoint left and the CRC
/// of its concatenated payloads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Anchor {
    /// Incremented by every anchor write; the valid slot with the larger wins.
    pub anchor_seq: u64,
    /// Log generation.
    pub generation: u32,
    /// Logical byte position of the first live record (grows forever).
    pub head: u64,
    /// Logical position the checkpoint saw as the end of the log.
    pub tail: u64,
    /// Sequence number of the record at `head`.
    pub head_seq: u64,
    /// CRC32C of the payloads of the records in [head, tail), concatenated.
    pub stream_crc: u32,
}

impl Anchor {
    /// The slot's bytes in a log of format `version`.
    pub(super) fn encode(&self, version: u8) -> [u8; 64] {
        let mut b = [0u8; 64];
        b[0..4].copy_from_slice(&ANCHOR_MAGIC.to_le_bytes());
        b[4] = version;
        b[8..12].copy_from_slice(&self.generation.to_le_bytes());
        b[12..16].copy_from_slice(&self.stream_crc.to_le_bytes());
        b[16..24].copy_from_slice(&self.anchor_seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.head.to_le_bytes());
        b[32..40].copy_from_slice(&self.tail.to_le_bytes());
        b[40..48].copy_from_slice(&self.head_seq.to_le_bytes());
        let crc = crate::crc32c::checksum(&b[..60]);
        b[60..64].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` when the slot is torn, never written, or of another generation
    /// or format version.
    pub fn decode(b: &[u8], generation: u32, version: u8) -> Option<Self> {
        let valid = le32(b, 0) == ANCHOR_MAGIC
            && b[4] == version
            && le32(b, 60) == crate::crc32c::checksum(&b[..60])
            && le32(b, 8) == generation;
        valid.then(|| Anchor {
            generation,
            stream_crc: le32(b, 12),
            anchor_seq: le64(b, 16),
            head: le64(b, 24),
            tail: le64(b, 32),
            head_seq: le64(b, 40),
        })
    }
}

/// The 32-byte header in front of every record's payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordHeader {
    /// Record flags ([`FLAG_BATCH`]).
    pub flags: u8,
    /// Tag of a single-TLV record, 0 for a batch, [`TAG_WRAP`] for a wrap marker.
    pub tag: u16,
    /// Payload bytes after the header.
    pub payload_len: u32,
    /// CRC32C of the payload.
    pub payload_crc: u32,
    /// Sequence number: +1 per record, never reset.
    pub seq: u64,
    /// Log generation.
    pub generation: u32,
}

impl RecordHeader {
    /// The header's bytes in a log of format `version`.
    pub(super) fn encode(&self, version: u8) -> [u8; HEADER_BYTES] {
        let mut b = [0u8; HEADER_BYTES];
        b[0..4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
        b[4] = version;
        b[5] = self.flags;
        b[6..8].copy_from_slice(&self.tag.to_le_bytes());
        b[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.payload_crc.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..28].copy_from_slice(&self.generation.to_le_bytes());
        let crc = crate::crc32c::checksum(&b[..28]);
        b[28..32].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// `None` unless magic, format `version`, CRC and a payload length within
    /// that version's limit all hold.
    pub(super) fn decode(b: &[u8], version: u8) -> Option<Self> {
        let valid = le32(b, 0) == RECORD_MAGIC && b[4] == version && le32(b, 28) == crate::crc32c::checksum(&b[..28]);
        let header = RecordHeader {
            flags: b[5],
            tag: u16::from_le_bytes([b[6], b[7]]),
            payload_len: le32(b, 8),
            payload_crc: le32(b, 12),
            seq: le64(b, 16),
            generation: le32(b, 24),
        };
        (valid && header.payload_len as usize <= version_payload_max(version)).then_some(header)
    }
}

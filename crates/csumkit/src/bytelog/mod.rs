//! ByteLog: a byte-granular, 64-byte-aligned, CRC32C-protected
//! record log for small metadata commits on byte-addressable media (DAX
//! persistent memory, or a memory-mapped file), replacing block-granular
//! commit writes.
//!
//! ```
//! use csumkit::bytelog::{ByteLog, SimMedium, Tlv};
//!
//! let mut log = ByteLog::format(SimMedium::new(64 * 1024), 1)?;
//! log.append_tlvs(&[Tlv { tag: 7, value: b"inode 12 size 4096" }])?;   // durable on return
//! let (log, records) = ByteLog::open(log.into_medium())?;              // replay
//! assert_eq!(records.len(), 1);
//! # Ok::<(), csumkit::Error>(())
//! ```
//!
//! A commit is one record: its lines are written, flushed and fenced, and
//! only then acknowledged — 64 or 128 bytes for one small TLV. Replay walks
//! the ring from the anchor's head while records are whole (header CRC,
//! payload CRC), of this log's generation and in sequence; the first one
//! that is not ends the log, since only the newest record can be in flight
//! at a crash. A damaged record with a later record after it, or anything
//! wrong inside the anchored window (including its payload-stream CRC), is
//! reported as corruption, never replayed.
//!
//! # On-media format (little-endian)
//!
//! The region: line 0 superblock, lines 1–2 anchor slots, line 3 unused,
//! the ring from byte 256 to the end (whole lines).
//!
//! | structure | offset | size | field |
//! |---|---|---|---|
//! | superblock | 0 | 8 | magic `CSBYTLOG` |
//! | | 8 | 1 | format version (2; 1 is read and appended to as it is) |
//! | | 12 | 4 | log generation (epoch; differs per format) |
//! | | 16 | 8 | ring offset (256) |
//! | | 24 | 8 | ring bytes (multiple of 64) |
//! | | 60 | 4 | CRC32C of bytes 0..60 |
//! | anchor (×2, lines 1, 2) | 0 | 4 | magic `BLAN` |
//! | | 4 | 1 | format version |
//! | | 8 | 4 | log generation |
//! | | 12 | 4 | CRC32C of the concatenated payloads of [head, tail) |
//! | | 16 | 8 | anchor sequence (the valid slot with the larger wins) |
//! | | 24 | 8 | head: logical byte position of the first live record |
//! | | 32 | 8 | tail: logical end of the log when the anchor was written |
//! | | 40 | 8 | sequence number of the record at head |
//! | | 60 | 4 | CRC32C of bytes 0..60 |
//! | record header | 0 | 4 | magic `BLRC` |
//! | | 4 | 1 | format version |
//! | | 5 | 1 | flags (1 = batch of TLVs) |
//! | | 6 | 2 | tag (of a single TLV; 0 for a batch; FFFFh = wrap marker) |
//! | | 8 | 4 | payload length (≤ 65 504, and ≤ half the ring less the header; version 1: ≤ 4 064) |
//! | | 12 | 4 | payload CRC32C |
//! | | 16 | 8 | sequence number (+1 per record, never reset) |
//! | | 24 | 4 | log generation |
//! | | 28 | 4 | CRC32C of header bytes 0..28 |
//! | payload | 32 | n | TLVs: tag u16, length u16, value; zero padding to a whole line |
//!
//! Logical positions grow forever; a record lives at `256 + position mod
//! ring bytes` and never straddles the ring's end: a wrap marker (made
//! durable on its own) sends the log back to the start. An anchor is written
//! at every checkpoint/truncate and every 256 KiB of log.

pub mod crash;
#[cfg(unix)]
mod error;
mod file_medium;
mod format;
mod group;
mod log;
mod medium;

#[cfg(unix)]
pub use error::LogError;
pub use file_medium::FileMedium;
pub use format::{
    payload_max, record_span, Anchor, RecordHeader, Superblock, FLAG_BATCH, HEADER_BYTES, LINE_BYTES,
    PAYLOAD_BYTES_MAX, RECORD_BYTES_MAX, RING_OFFSET, TAG_WRAP, VERSION,
};
pub use group::{AppendRecord, GroupCommit};
pub use log::{
    decode_tlvs, encode_tlvs, ByteLog, LogStats, Record, RecordRef, Tlv, ANCHOR_EVERY_BYTES, RING_BYTES_MIN,
};
#[cfg(unix)]
pub use medium::MmapMedium;
pub use medium::{Medium, Persist, SimMedium};

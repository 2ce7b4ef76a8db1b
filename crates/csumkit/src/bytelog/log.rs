//! The log: append (one record, one flush, one fence), replay, anchors,
//! checkpoint/truncate.

use super::format::{
    payload_max, record_span, Anchor, RecordHeader, Superblock, FLAG_BATCH, HEADER_BYTES, LINE_BYTES, RING_OFFSET,
    TAG_WRAP, VERSION,
};
use super::medium::Medium;
use crate::bytelog::LogError;
use crate::Error;
use std::collections::VecDeque;

/// Smallest ring: two records of a page (records take at most half the
/// ring, see [`payload_max`]).
pub const RING_BYTES_MIN: u64 = 8192;
/// An anchor is written after this many bytes of log, so that replay can
/// check the stream CRC of most of the window and report damage in it.
pub const ANCHOR_EVERY_BYTES: u64 = 256 * 1024;

/// A committed record as replay hands it over, borrowing the medium.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Sequence number (never reset).
    pub seq: u64,
    /// Tag of a single-TLV record; 0 for a batch.
    pub tag: u16,
    /// [`FLAG_BATCH`] when the payload is several TLVs.
    pub flags: u8,
    /// The payload bytes, in place on the medium.
    pub payload: &'a [u8],
}

/// A committed record as [`ByteLog::open`] returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Sequence number (never reset).
    pub seq: u64,
    /// Tag of a single-TLV record; 0 for a batch.
    pub tag: u16,
    /// [`FLAG_BATCH`] when the payload is several TLVs.
    pub flags: u8,
    /// The payload bytes.
    pub payload: Vec<u8>,
}

/// One TLV: a tag and up to 65535 value bytes. Encoded as tag (u16 LE),
/// length (u16 LE), value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tlv<'a> {
    /// Tag.
    pub tag: u16,
    /// Value.
    pub value: &'a [u8],
}

/// The payload encoding of `tlvs`: each as tag, length, value.
pub fn encode_tlvs(tlvs: &[Tlv]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::with_capacity(tlvs.iter().map(|t| 4 + t.value.len()).sum());
    for tlv in tlvs {
        let len = u16::try_from(tlv.value.len()).map_err(|_| Error::TooLarge {
            what: "TLV value bytes",
            value: tlv.value.len() as u64,
            max: u16::MAX as u64,
        })?;
        out.extend_from_slice(&tlv.tag.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(tlv.value);
    }
    Ok(out)
}

/// The TLVs of a batch payload, or a typed error for a malformed one.
pub fn decode_tlvs(payload: &[u8]) -> Result<Vec<Tlv<'_>>, Error> {
    let mut out = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(Error::Corrupt {
                location: "TLV batch".into(),
                detail: format!("{} trailing bytes", rest.len()),
            });
        }
        let tag = u16::from_le_bytes([rest[0], rest[1]]);
        let len = u16::from_le_bytes([rest[2], rest[3]]) as usize;
        if rest.len() < 4 + len {
            return Err(Error::Corrupt {
                location: "TLV batch".into(),
                detail: format!("TLV of {len} bytes with {} left", rest.len() - 4),
            });
        }
        out.push(Tlv { tag, value: &rest[4..4 + len] });
        rest = &rest[4 + len..];
    }
    Ok(out)
}

/// Counters of what the log has persisted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Records appended (wrap markers included).
    pub records: u64,
    /// Bytes flushed to the medium (whole lines), anchors included.
    pub bytes_persisted: u64,
    /// Fences issued.
    pub fences: u64,
}

/// What the log keeps in memory of a record: 16 bytes, so that replaying a
/// large window stays bound by checking records, not by growing this list.
#[derive(Clone, Copy, Debug)]
struct WindowEntry {
    payload_crc: u32,
    payload_len: u32,
    /// Logical position after the record.
    end: u64,
}

/// A ByteLog over a medium.
#[derive(Debug)]
pub struct ByteLog<M: Medium> {
    medium: M,
    sb: Superblock,
    head: u64,
    tail: u64,
    head_seq: u64,
    next_seq: u64,
    /// Each record in [head, tail), for the stream CRC and truncation; the
    /// i-th has sequence number `head_seq + i`.
    window: VecDeque<WindowEntry>,
    /// CRC32C of the payloads of the first `folded` window records: the
    /// rest are folded in with `combine` when an anchor needs it, keeping
    /// that work off the commit path and out of replay past the anchor.
    stream_crc: u32,
    folded: usize,
    anchor_seq: u64,
    anchored_tail: u64,
    /// Bytes of log between periodic anchors ([`ANCHOR_EVERY_BYTES`]).
    anchor_every: u64,
    stats: LogStats,
}

fn corrupt(location: String, detail: String) -> Error {
    Error::Corrupt { location, detail }
}

impl<M: Medium> ByteLog<M> {
    /// Formats `medium` as an empty log of generation `generation` (records
    /// of other generations are never replayed; see [`Self::next_generation`])
    /// and returns it.
    pub fn format(mut medium: M, generation: u32) -> Result<Self, Error> {
        let ring_bytes = (medium.len().saturating_sub(RING_OFFSET)) / LINE_BYTES * LINE_BYTES;
        if ring_bytes < RING_BYTES_MIN {
            return Err(Error::Invalid {
                what: "ByteLog region",
                detail: format!("{} bytes; needs at least {}", medium.len(), RING_OFFSET + RING_BYTES_MIN),
            });
        }
        let sb = Superblock { version: VERSION, generation, ring_bytes };
        medium.write(0, &sb.encode())?;
        medium.write(LINE_BYTES, &[0u8; 128])?; // both anchor slots: no anchor of this generation yet
        let mut log = ByteLog {
            medium,
            sb,
            head: 0,
            tail: 0,
            head_seq: 1,
            next_seq: 1,
            window: VecDeque::new(),
            stream_crc: 0,
            folded: 0,
            anchor_seq: 0,
            anchored_tail: 0,
            anchor_every: ANCHOR_EVERY_BYTES,
            stats: LogStats::default(),
        };
        log.medium.flush(0, RING_OFFSET)?;
        log.write_anchor()?;
        Ok(log)
    }

    /// A generation for formatting `medium` again: one more than the one on
    /// it (records of the old log are then stale), or 1 on a blank medium.
    pub fn next_generation(medium: &M) -> u32 {
        let mut line = [0u8; 64];
        match medium.read(0, &mut line).ok().and_then(|()| Superblock::decode(&line).ok()) {
            Some(sb) => sb.generation.wrapping_add(1),
            None => 1,
        }
    }

    /// Opens a formatted medium: replays it and returns the log (ready to
    /// append after the last committed record) and its committed records,
    /// in order. Damage inside the committed window is an error; a torn or
    /// stale record at its end is where the log ends.
    pub fn open(medium: M) -> Result<(Self, Vec<Record>), Error> {
        let mut records = Vec::new();
        let log = ByteLog::replay_with(medium, |r| {
            records.push(Record { seq: r.seq, tag: r.tag, flags: r.flags, payload: r.payload.to_vec() });
            Ok(())
        })?;
        Ok((log, records))
    }

    /// [`Self::open`] without copies: `apply` sees each committed record in
    /// order, its payload borrowed from the medium (the way a file system
    /// replays its commit TLVs); an error from `apply` stops the replay.
    pub fn replay_with(medium: M, apply: impl FnMut(RecordRef<'_>) -> Result<(), Error>) -> Result<Self, Error> {
        let mut line = [0u8; 64];
        medium.read(0, &mut line)?;
        let sb = Superblock::decode(&line)?;
        if sb.ring_bytes < RING_BYTES_MIN || RING_OFFSET + sb.ring_bytes > medium.len() {
            return Err(corrupt(
                "ByteLog superblock".into(),
                format!("ring of {} bytes in a {}-byte region", sb.ring_bytes, medium.len()),
            ));
        }
        let mut anchors = [None, None];
        for (slot, anchor) in anchors.iter_mut().enumerate() {
            medium.read((1 + slot as u64) * LINE_BYTES, &mut line)?;
            *anchor = Anchor::decode(&line, sb.generation, sb.version);
        }
        let anchor = anchors
            .into_iter()
            .flatten()
            .max_by_key(|a| a.anchor_seq)
            .ok_or_else(|| corrupt("ByteLog anchors".into(), "neither anchor slot is valid".into()))?;
        if anchor.tail < anchor.head || anchor.tail - anchor.head > sb.ring_bytes || anchor.head % LINE_BYTES != 0 {
            return Err(corrupt("ByteLog anchor".into(), format!("window [{}, {})", anchor.head, anchor.tail)));
        }
        let mut log = ByteLog {
            medium,
            sb,
            head: anchor.head,
            tail: anchor.head,
            head_seq: anchor.head_seq,
            next_seq: anchor.head_seq,
            window: VecDeque::new(),
            stream_crc: 0,
            folded: 0,
            anchor_seq: anchor.anchor_seq,
            anchored_tail: anchor.tail,
            anchor_every: ANCHOR_EVERY_BYTES,
            stats: LogStats::default(),
        };
        log.replay(&anchor, apply)?;
        Ok(log)
    }

    fn phys(&self, pos: u64) -> u64 {
        RING_OFFSET + pos % self.sb.ring_bytes
    }

    fn replay(
        &mut self,
        anchor: &Anchor,
        mut apply: impl FnMut(RecordRef<'_>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        // The whole ring borrowed once: replay is bound by per-record work,
        // so records are parsed straight from it (fields of `self` other
        // than the medium are updated alongside).
        let ring = self.medium.view(RING_OFFSET, self.sb.ring_bytes)?;
        let ring_bytes = self.sb.ring_bytes;
        // Records average a few hundred bytes: reserving for 256-byte spans
        // spares most of the window's regrowth copies.
        self.window.reserve(((anchor.tail - anchor.head) / 256) as usize);
        loop {
            // Replay starts at the anchor's head, so the window's stream CRC
            // is the anchored stream's when the tail reaches the anchor's.
            if self.tail == anchor.tail {
                let stream = fold_stream(&mut self.stream_crc, &mut self.folded, &self.window);
                if stream != anchor.stream_crc {
                    return Err(corrupt(
                        format!("ByteLog window [{}, {})", anchor.head, anchor.tail),
                        format!("payload stream CRC32C {stream:#010x}, anchor says {:#010x}", anchor.stream_crc),
                    ));
                }
            }
            if self.tail - self.head >= ring_bytes {
                break; // a full ring
            }
            let offset = self.tail % ring_bytes;
            let Some((h, payload)) = parse_record(ring, offset, self.next_seq, &self.sb) else {
                if self.tail < anchor.tail {
                    return Err(corrupt(
                        format!("ByteLog record {} at {}", self.next_seq, self.tail),
                        "damaged inside the anchored window".into(),
                    ));
                }
                return check_nothing_after(ring, self.tail, self.head, self.next_seq, &self.sb);
            };
            let end = if h.tag == TAG_WRAP {
                self.tail - offset + ring_bytes
            } else {
                self.tail + record_span(payload.len())
            };
            if h.tag != TAG_WRAP {
                apply(RecordRef { seq: h.seq, tag: h.tag, flags: h.flags, payload })?;
            }
            // (Not push_window: `ring` borrows the medium.) parse_record bounds payload_len.
            self.window.push_back(WindowEntry { payload_crc: h.payload_crc, payload_len: h.payload_len, end });
            self.tail = end;
            self.next_seq += 1;
        }
        if self.tail < anchor.tail {
            return Err(corrupt(format!("ByteLog window [{}, {})", anchor.head, anchor.tail), "ends early".into()));
        }
        Ok(())
    }

    fn push_window(&mut self, payload_crc: u32, payload_len: usize, end: u64) {
        assert!(payload_len <= self.payload_max());
        debug_assert_eq!(self.head_seq + self.window.len() as u64, self.next_seq);
        self.window.push_back(WindowEntry { payload_crc, payload_len: payload_len as u32, end });
    }

    /// Appends one record holding `payload` (a single TLV with `tag`, or a
    /// batch with `FLAG_BATCH` and tag 0) and makes it durable: its lines are
    /// flushed and fenced before this returns, so a returned sequence number
    /// is an acknowledgement. The payload takes at most
    /// [`payload_max`](Self::payload_max) bytes.
    pub fn append(&mut self, tag: u16, flags: u8, payload: &[u8]) -> Result<u64, Error> {
        let max = self.payload_max();
        if payload.len() > max {
            return Err(Error::TooLarge {
                what: "ByteLog payload bytes",
                value: payload.len() as u64,
                max: max as u64,
            });
        }
        if tag == TAG_WRAP {
            return Err(Error::Invalid { what: "ByteLog tag", detail: format!("{TAG_WRAP:#x} is reserved") });
        }
        let span = record_span(payload.len());
        let room = self.sb.ring_bytes - self.tail % self.sb.ring_bytes;
        let waste = if span > room { room } else { 0 };
        let free = self.free_bytes();
        if waste + span > free {
            return Err(LogError::Full { needed: waste + span, free }.into());
        }
        if waste > 0 {
            // The wrap marker is made durable on its own: at most one record
            // is ever in flight, which replay relies on.
            self.put_record(TAG_WRAP, 0, &[], self.tail + waste)?;
        }
        let seq = self.next_seq;
        let end = self.tail + span;
        self.put_record(tag, flags, payload, end)?;
        if self.tail - self.anchored_tail >= self.anchor_every {
            self.write_anchor()?;
        }
        Ok(seq)
    }

    /// Appends TLVs as one record: a single TLV keeps its tag, several are a batch.
    pub fn append_tlvs(&mut self, tlvs: &[Tlv]) -> Result<u64, Error> {
        let payload = encode_tlvs(tlvs)?;
        match tlvs {
            [one] => self.append(one.tag, 0, &payload),
            _ => self.append(0, FLAG_BATCH, &payload),
        }
    }

    fn put_record(&mut self, tag: u16, flags: u8, payload: &[u8], end: u64) -> Result<(), Error> {
        let payload_crc = crate::crc32c::checksum(payload);
        let header = RecordHeader {
            flags,
            tag,
            payload_len: payload.len() as u32,
            payload_crc,
            seq: self.next_seq,
            generation: self.sb.generation,
        };
        let at = self.phys(self.tail);
        let mut bytes = Vec::with_capacity(record_span(payload.len()) as usize);
        bytes.extend_from_slice(&header.encode(self.sb.version));
        bytes.extend_from_slice(payload);
        bytes.resize(record_span(payload.len()) as usize, 0);
        self.medium.write(at, &bytes)?;
        self.persist(at, bytes.len() as u64)?;
        self.push_window(payload_crc, payload.len(), end);
        self.tail = end;
        self.next_seq += 1;
        self.stats.records += 1;
        Ok(())
    }

    fn persist(&mut self, at: u64, len: u64) -> Result<(), Error> {
        self.medium.flush(at, len)?;
        self.medium.fence()?;
        self.stats.bytes_persisted += len.div_ceil(LINE_BYTES) * LINE_BYTES;
        self.stats.fences += 1;
        Ok(())
    }

    /// Writes the anchor (alternating slots) for the current window.
    fn write_anchor(&mut self) -> Result<(), Error> {
        self.anchor_seq += 1;
        let anchor = Anchor {
            anchor_seq: self.anchor_seq,
            generation: self.sb.generation,
            head: self.head,
            tail: self.tail,
            head_seq: self.head_seq,
            stream_crc: fold_stream(&mut self.stream_crc, &mut self.folded, &self.window),
        };
        let at = (1 + self.anchor_seq % 2) * LINE_BYTES;
        self.medium.write(at, &anchor.encode(self.sb.version))?;
        self.persist(at, LINE_BYTES)?;
        self.anchored_tail = self.tail;
        Ok(())
    }

    /// Drops every record up to and including `seq` (they have been applied
    /// elsewhere), so their space can be reused; durable when this returns.
    pub fn truncate(&mut self, seq: u64) -> Result<(), Error> {
        if seq < self.head_seq || seq >= self.next_seq {
            return Err(Error::Invalid {
                what: "ByteLog truncate",
                detail: format!("record {seq} is not in the log ({}..{})", self.head_seq, self.next_seq),
            });
        }
        while let Some(entry) = self.window.front() {
            if self.head_seq > seq {
                break;
            }
            self.head = entry.end;
            self.head_seq += 1;
            self.window.pop_front();
        }
        // The stream CRC of what is left, from the per-record CRCs kept in
        // memory: never by reading the log back.
        (self.stream_crc, self.folded) = (0, 0);
        self.write_anchor()
    }

    /// Each record the log holds — what a replay would apply — in order,
    /// read back from the medium with its payload CRC checked again: how a
    /// checkpoint folds the records into their home when their changes are
    /// nowhere else as they were committed. An error from `f` stops the walk.
    pub fn for_each_record(&self, mut f: impl FnMut(RecordRef<'_>) -> Result<(), Error>) -> Result<(), Error> {
        let ring = self.medium.view(RING_OFFSET, self.sb.ring_bytes)?;
        let mut start = self.head;
        for (seq, entry) in (self.head_seq..).zip(&self.window) {
            let Some((h, payload)) = parse_record(ring, start % self.sb.ring_bytes, seq, &self.sb) else {
                return Err(corrupt(
                    format!("ByteLog record {seq} at {start}"),
                    "no longer on the medium as it was appended".into(),
                ));
            };
            if h.tag != TAG_WRAP {
                f(RecordRef { seq, tag: h.tag, flags: h.flags, payload })?;
            }
            start = entry.end;
        }
        Ok(())
    }

    /// Drops every record: the whole ring is free again.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        match self.next_seq.checked_sub(1) {
            Some(last) if last >= self.head_seq => self.truncate(last),
            _ => self.write_anchor(),
        }
    }

    /// Writes the periodic anchor every `bytes` of log instead of every
    /// [`ANCHOR_EVERY_BYTES`] (at least one line): a smaller interval makes
    /// replay shorter and commits costlier. The crash harness uses it so that
    /// periodic anchors happen under crash testing.
    pub fn set_anchor_interval(&mut self, bytes: u64) {
        self.anchor_every = bytes.max(LINE_BYTES);
    }

    /// Largest payload one record of this log takes: 65 504 bytes in a ring
    /// of at least 128 KiB; at most half the ring less a header in a smaller
    /// one; 4 064 in a log of format version 1.
    pub fn payload_max(&self) -> usize {
        payload_max(self.sb.version, self.sb.ring_bytes)
    }

    /// The log's format version ([`VERSION`] for a log formatted by this
    /// build; 1 for an older log, which is appended to as version 1).
    pub fn version(&self) -> u8 {
        self.sb.version
    }

    /// Bytes free in the ring.
    pub fn free_bytes(&self) -> u64 {
        self.sb.ring_bytes - (self.tail - self.head)
    }

    /// Sequence number the next record gets.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    /// What the log has persisted since it was formatted or opened.
    pub fn stats(&self) -> LogStats {
        self.stats
    }

    /// The medium (for tests and benchmarks).
    pub fn medium(&self) -> &M {
        &self.medium
    }

    /// Gives the medium back.
    pub fn into_medium(self) -> M {
        self.medium
    }
}

/// Folds the window's records past `folded` into the stream CRC and returns it.
fn fold_stream(stream_crc: &mut u32, folded: &mut usize, window: &VecDeque<WindowEntry>) -> u32 {
    for entry in window.range(*folded..) {
        *stream_crc = crate::crc32c::combine(*stream_crc, entry.payload_crc, u64::from(entry.payload_len));
    }
    *folded = window.len();
    *stream_crc
}

/// The record at `offset` of the ring if it is whole, of the log's format
/// version and generation, has sequence number `seq` and fits before the
/// ring's end.
fn parse_record<'a>(ring: &'a [u8], offset: u64, seq: u64, sb: &Superblock) -> Option<(RecordHeader, &'a [u8])> {
    let at = offset as usize;
    let h = RecordHeader::decode(&ring[at..at + HEADER_BYTES], sb.version)?;
    let room = ring.len() as u64 - offset;
    if h.generation != sb.generation || h.seq != seq || record_span(h.payload_len as usize) > room {
        return None;
    }
    let payload = &ring[at + HEADER_BYTES..at + HEADER_BYTES + h.payload_len as usize];
    (crate::crc32c::checksum(payload) == h.payload_crc).then_some((h, payload))
}

/// After the last valid record (at logical `tail`), no record of this
/// generation with a later sequence number may follow: if one does, the
/// invalid record is damage, not the end of the log (only the newest record
/// can be torn at a crash).
fn check_nothing_after(ring: &[u8], tail: u64, head: u64, next_seq: u64, sb: &Superblock) -> Result<(), Error> {
    let ring_bytes = ring.len() as u64;
    let mut pos = tail + LINE_BYTES;
    while pos < head + ring_bytes {
        let at = (pos % ring_bytes) as usize;
        if let Some(h) = RecordHeader::decode(&ring[at..at + HEADER_BYTES], sb.version) {
            if h.generation == sb.generation && h.seq > next_seq {
                return Err(corrupt(
                    format!("ByteLog record {next_seq} at {tail}"),
                    format!("damaged, but record {} follows at {pos}", h.seq),
                ));
            }
        }
        pos += LINE_BYTES;
    }
    Ok(())
}

#[cfg(test)]
#[path = "log_tests.rs"]
mod tests;

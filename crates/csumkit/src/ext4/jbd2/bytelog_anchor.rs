//! A ByteLog inside the journal's fast-commit area, laid out as the ext4
//! DAX fast-commit ByteLog design lays it: the area's first two blocks are
//! a conventional fast-commit stream — HEAD, an anchor record and TAIL in
//! the first, an anchor record and TAIL in the second — and the blocks
//! after them hold a ByteLog region ([`crate::bytelog`]: superblock, two
//! anchor slots, the ring of 64-byte-aligned CRC32C records). An anchor
//! record names the window and repeats one of the ByteLog's anchors: its
//! head, tail, head sequence and the CRC32C of the payloads between them.
//! The two blocks take the ByteLog's anchors in turn (an even anchor
//! sequence the first), so a rewrite torn by a crash leaves the other.
//!
//! ```text
//! anchor value (le), tag TAG_BYTELOG_ANCHOR, 48 bytes:
//!  0 window_first  u32  journal block where the ByteLog region begins
//!  4 window_blocks u32  its length in journal blocks
//!  8 generation    u32  the ByteLog's generation (its superblock's)
//! 12 stream_crc    u32  CRC32C of the payloads of [head, tail)
//! 16 anchor_seq    u64  the ByteLog anchor's sequence
//! 24 head          u64  logical position of the first live record
//! 32 tail          u64  logical end of the log at that anchor
//! 40 head_seq      u64  sequence number of the record at head
//! ```
//!
//! The tag is csumfs's: a kernel's fast-commit scan refuses it, which is
//! right — the image carries an incompat bit of csumfs's own while the
//! ByteLog holds records the image lacks.

use super::fast_commit::{encode, TAG_HEAD, TAG_TAIL};
use crate::bytelog::Anchor;
use crate::le::{le16, le32, le64};
use crate::{crc32c, Error};

/// The anchor record's tag (`"BL"`, outside the kernel's tags 1–9).
pub const TAG_BYTELOG_ANCHOR: u16 = 0x4C42;
/// Bytes of the anchor record's value.
pub const ANCHOR_VALUE_BYTES: usize = 48;
/// `EXT4_FC_TAG_BASE_LEN`.
const TAG_BASE: usize = 4;

/// Where the ByteLog lives in the fast-commit area and its newest anchor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ByteLogAnchor {
    /// Journal block where the ByteLog region begins.
    pub window_first: u32,
    /// Journal blocks the region takes.
    pub window_blocks: u32,
    /// The ByteLog's anchor (generation included).
    pub anchor: Anchor,
}

impl ByteLogAnchor {
    /// The fast-commit block of transaction `tid` that carries it: HEAD
    /// (when `head`: the stream's first block), the anchor record, TAIL to
    /// the block's end, as the kernel lays a fast commit out.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a block too small for the records.
    pub fn block(&self, block_size: usize, tid: u32, head: bool) -> Result<Vec<u8>, Error> {
        let a = &self.anchor;
        let mut v = Vec::with_capacity(ANCHOR_VALUE_BYTES);
        for word in [self.window_first, self.window_blocks, a.generation, a.stream_crc] {
            v.extend_from_slice(&word.to_le_bytes());
        }
        for word in [a.anchor_seq, a.head, a.tail, a.head_seq] {
            v.extend_from_slice(&word.to_le_bytes());
        }
        let mut blocks = encode(block_size, tid, head, &[(TAG_BYTELOG_ANCHOR, v)])?;
        if blocks.len() != 1 {
            return Err(Error::Invalid { what: "ByteLog anchor", detail: format!("{block_size}-byte blocks") });
        }
        Ok(blocks.remove(0))
    }

    /// The anchor in fast-commit block `block` and its transaction: a
    /// HEAD (no features) when `head`, the anchor record, and a TAIL (of
    /// the HEAD's transaction) whose CRC32C covers them.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming what is not as [`block`](Self::block)
    /// writes it.
    pub fn parse(block: &[u8], head: bool) -> Result<(ByteLogAnchor, u32), Error> {
        let bad = |detail: String| Error::Corrupt { location: "fast-commit ByteLog anchor".into(), detail };
        let record = |at: usize, tag: u16, len: usize| {
            let fits = at + TAG_BASE + len <= block.len();
            if !fits || le16(block, at) != tag || (tag != TAG_TAIL && usize::from(le16(block, at + 2)) != len) {
                return Err(bad(format!("no record {tag:#x} of {len} bytes at offset {at}")));
            }
            Ok(at + TAG_BASE)
        };
        let (anchor_at, head_tid) = if head {
            let value = record(0, TAG_HEAD, 8)?;
            if le32(block, value) != 0 {
                return Err(bad(format!("HEAD features {:#x}", le32(block, value))));
            }
            (value + 8, Some(le32(block, value + 4)))
        } else {
            (0, None)
        };
        let v = record(anchor_at, TAG_BYTELOG_ANCHOR, ANCHOR_VALUE_BYTES)?;
        let tail = record(v + ANCHOR_VALUE_BYTES, TAG_TAIL, 8)?;
        if usize::from(le16(block, tail - 2)) != block.len() - tail {
            return Err(bad(format!("TAIL of {} bytes, not to the block's end", le16(block, tail - 2))));
        }
        let tid = head_tid.unwrap_or(le32(block, tail));
        if le32(block, tail) != tid {
            return Err(bad(format!("TAIL of transaction {} after a HEAD of {tid}", le32(block, tail))));
        }
        let crc = crc32c::raw_update(0, &block[..tail + 4]);
        if le32(block, tail + 4) != crc {
            return Err(bad(format!("TAIL CRC32C {:#010x}, the records give {crc:#010x}", le32(block, tail + 4))));
        }
        let anchor = Anchor {
            generation: le32(block, v + 8),
            stream_crc: le32(block, v + 12),
            anchor_seq: le64(block, v + 16),
            head: le64(block, v + 24),
            tail: le64(block, v + 32),
            head_seq: le64(block, v + 40),
        };
        Ok((ByteLogAnchor { window_first: le32(block, v), window_blocks: le32(block, v + 4), anchor }, tid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ByteLogAnchor {
        let anchor =
            Anchor { anchor_seq: 7, generation: 3, head: 4096, tail: 8192 + 64, head_seq: 11, stream_crc: 0xDEAD_BEEF };
        ByteLogAnchor { window_first: 8193, window_blocks: 127, anchor }
    }

    #[test]
    fn an_anchor_block_parses_back_and_any_flipped_bit_of_its_records_is_refused() {
        for bs in [1024, 4096] {
            for head in [true, false] {
                let block = sample().block(bs, 42, head).unwrap();
                assert_eq!(block.len(), bs);
                assert_eq!(ByteLogAnchor::parse(&block, head).unwrap(), (sample(), 42));
                assert!(ByteLogAnchor::parse(&block, !head).is_err(), "the HEAD is where it should be");
                // HEAD (12), anchor (52), TAIL tag, length, tid and CRC (12).
                let records = if head { 12 + 52 + 12 } else { 52 + 12 };
                for bit in 0..records * 8 {
                    let mut torn = block.clone();
                    torn[bit / 8] ^= 1 << (bit % 8);
                    assert!(ByteLogAnchor::parse(&torn, head).is_err(), "bit {bit} of a {bs}-byte block");
                }
            }
        }
    }

    /// Laid out as the kernel's fast commits are: the tail runs to the
    /// block's end, so the next fast commit of the stream begins a block.
    #[test]
    fn an_anchor_blocks_tail_runs_to_its_end() {
        let block = sample().block(4096, 42, true).unwrap();
        let tail_at = 12 + 52;
        assert_eq!(le16(&block, tail_at), TAG_TAIL);
        assert_eq!(usize::from(le16(&block, tail_at + 2)), 4096 - tail_at - TAG_BASE);
        assert!(block[tail_at + 12..].iter().all(|&b| b == 0));
    }
}

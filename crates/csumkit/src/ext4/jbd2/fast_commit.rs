//! ext4 fast commits (Linux `fs/ext4/fast_commit.c`): after the log, in
//! the journal's last `s_num_fc_blks` blocks, the kernel writes the
//! changes of an fsync as tag-length-value records instead of a full
//! transaction. Each block holds records back to back:
//!
//! ```text
//! ext4_fc_tl: 0x0 fc_tag (le16)  0x2 fc_len (le16), then fc_len bytes of value
//! HEAD (9):      fc_features (le32), fc_tid (le32)       — first record of the area
//! ADD_RANGE (1): fc_ino, an ext4_extent (12 bytes)
//! DEL_RANGE (2): fc_ino, fc_lblk, fc_len
//! CREAT (3), LINK (4), UNLINK (5): fc_parent_ino, fc_ino, then the name (1..=255 bytes)
//! INODE (6):     fc_ino, then the raw inode (128..=s_inode_size bytes)
//! PAD (7):       any length
//! TAIL (8):      fc_tid (le32), fc_crc (le32): CRC32C (from 0, no inversion)
//!                of every record since the last tail, up to fc_crc
//! ```
//!
//! [`scan`] is the kernel's scan pass (`ext4_fc_replay_scan`): the area
//! counts only if it begins with a HEAD of the transaction after the log's
//! last, and only the records up to the last tail whose transaction and
//! checksum match are replayed. A record that cannot be one ends the scan
//! after a good tail, and is an error before one, as in the kernel.

use super::Journal;
use crate::le::{le16, le32};
use crate::{crc32c, Error};

/// `EXT4_FC_TAG_ADD_RANGE`.
pub const TAG_ADD_RANGE: u16 = 1;
/// `EXT4_FC_TAG_DEL_RANGE`.
pub const TAG_DEL_RANGE: u16 = 2;
/// `EXT4_FC_TAG_CREAT`.
pub const TAG_CREAT: u16 = 3;
/// `EXT4_FC_TAG_LINK`.
pub const TAG_LINK: u16 = 4;
/// `EXT4_FC_TAG_UNLINK`.
pub const TAG_UNLINK: u16 = 5;
/// `EXT4_FC_TAG_INODE`.
pub const TAG_INODE: u16 = 6;
/// `EXT4_FC_TAG_PAD`.
pub const TAG_PAD: u16 = 7;
/// `EXT4_FC_TAG_TAIL`.
pub const TAG_TAIL: u16 = 8;
/// `EXT4_FC_TAG_HEAD`.
pub const TAG_HEAD: u16 = 9;

/// `EXT4_FC_TAG_BASE_LEN`: a record's tag and length.
const TAG_BASE: usize = 4;

/// One record to replay.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// Map file blocks `lblk..lblk + len` of inode `ino` to disk blocks
    /// from `pblk` (`unwritten`: allocated, reading as zeros).
    AddRange {
        /// The inode.
        ino: u32,
        /// The first file block.
        lblk: u32,
        /// Blocks.
        len: u32,
        /// The first disk block.
        pblk: u64,
        /// An unwritten extent.
        unwritten: bool,
    },
    /// Unmap file blocks `lblk..lblk + len` of inode `ino`.
    DelRange {
        /// The inode.
        ino: u32,
        /// The first file block.
        lblk: u32,
        /// Blocks.
        len: u32,
    },
    /// A new inode's name in directory `parent` (the inode was replayed
    /// before it).
    Create {
        /// The directory.
        parent: u32,
        /// The inode.
        ino: u32,
        /// The name.
        name: Vec<u8>,
    },
    /// Another name of `ino` in `parent`.
    Link {
        /// The directory.
        parent: u32,
        /// The inode.
        ino: u32,
        /// The name.
        name: Vec<u8>,
    },
    /// A name of `ino` removed from `parent`.
    Unlink {
        /// The directory.
        parent: u32,
        /// The inode.
        ino: u32,
        /// The name.
        name: Vec<u8>,
    },
    /// The inode's bytes as the kernel had them (128 bytes and its
    /// `i_extra_isize`): every field but `i_block` is taken from them.
    Inode {
        /// The inode.
        ino: u32,
        /// Its bytes.
        raw: Vec<u8>,
    },
}

/// What the scan found to replay.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FastCommits {
    /// Fast commits (tails) whose transaction and checksum match.
    pub commits: u32,
    /// Records covered by those tails: what the kernel's replay applies
    /// (heads, pads and tails counted, as the kernel counts them).
    pub records: u32,
    /// Fast-commit blocks read.
    pub blocks: u32,
    /// The records to replay, in order (heads, pads and tails left out).
    pub replay: Vec<Record>,
}

fn corrupt(block: u32, detail: impl Into<String>) -> Error {
    Error::Corrupt { location: format!("fast-commit block {block}"), detail: detail.into() }
}

/// Whether a record of `tag` may have `len` bytes of value
/// (`ext4_fc_value_len_isvalid`).
fn length_ok(tag: u16, len: usize, inode_size: usize) -> bool {
    match tag {
        TAG_ADD_RANGE => len == 16,
        TAG_DEL_RANGE => len == 12,
        TAG_CREAT | TAG_LINK | TAG_UNLINK => (9..=8 + 255).contains(&len),
        TAG_INODE => (4 + 128..=4 + inode_size).contains(&len),
        TAG_PAD => true,
        TAG_TAIL => len >= 8,
        TAG_HEAD => len == 8,
        _ => false,
    }
}

/// The fast commits of `journal` the kernel would replay after the log's
/// last full transaction, `next_tid` being the one after it
/// ([`Recovery::end_transaction`](super::Recovery::end_transaction)).
///
/// # Errors
/// [`Error::Corrupt`] where the kernel's scan fails: a record that cannot
/// be one, or a tail whose checksum fails, before any good tail; a HEAD
/// with features unknown here.
pub fn scan(journal: &Journal, image: &[u8], next_tid: u32, inode_size: usize) -> Result<FastCommits, Error> {
    let sb = &journal.superblock;
    let mut found = FastCommits::default();
    if sb.fast_commit_blocks == 0 {
        return Ok(found);
    }
    if sb.fast_commit_blocks >= sb.max_len {
        return Err(corrupt(0, format!("{} fast-commit blocks in a journal of {}", sb.fast_commit_blocks, sb.max_len)));
    }
    let first = sb.last() + 1;
    let end = sb.max_len.min(journal.blocks.len() as u32);
    let (mut crc, mut seen) = (0u32, 0u32);
    // Records since the last good tail: replayed only once one covers them.
    let mut pending: Vec<Record> = Vec::new();
    for (n, at) in (first..end).enumerate() {
        let block = journal.block(image, at)?;
        if n == 0 && le16(block, 0) != TAG_HEAD {
            return Ok(found); // no fast commit since the last full one
        }
        found.blocks += 1;
        let mut cur = 0usize;
        while cur + TAG_BASE <= block.len() {
            let (tag, len) = (le16(block, cur), usize::from(le16(block, cur + 2)));
            let value = cur + TAG_BASE;
            if len > block.len() - value || !length_ok(tag, len, inode_size) {
                return stop_or(found, corrupt(at, format!("record {tag} of {len} bytes at offset {cur}")));
            }
            match tag {
                TAG_TAIL => {
                    seen += 1;
                    crc = crc32c::raw_update(crc, &block[cur..value + 4]);
                    if le32(block, value) == next_tid && le32(block, value + 4) == crc {
                        found.commits += 1;
                        found.records = seen;
                        found.replay.append(&mut pending);
                    } else {
                        return stop_or(
                            found,
                            corrupt(at, format!("tail of transaction {next_tid} fails its checksum")),
                        );
                    }
                    crc = 0;
                }
                TAG_HEAD => {
                    if le32(block, value) != 0 {
                        return Err(corrupt(
                            at,
                            format!("fast-commit features {:#x} unknown here", le32(block, value)),
                        ));
                    }
                    if le32(block, value + 4) != next_tid {
                        return Ok(found);
                    }
                    seen += 1;
                    crc = crc32c::raw_update(crc, &block[cur..value + len]);
                }
                _ => {
                    seen += 1;
                    crc = crc32c::raw_update(crc, &block[cur..value + len]);
                    pending.extend(record(tag, &block[value..value + len]));
                }
            }
            cur = value + len;
        }
    }
    Ok(found)
}

/// The record a tag's `value` holds (its length already checked); `None`
/// for a pad.
fn record(tag: u16, value: &[u8]) -> Option<Record> {
    let (a, b) = (le32(value, 0), if value.len() >= 8 { le32(value, 4) } else { 0 });
    let name = || value[8..].to_vec();
    Some(match tag {
        TAG_ADD_RANGE => {
            // fc_ino, then an ext4_extent: ee_block, ee_len, ee_start_hi, ee_start_lo.
            let ee_len = u32::from(le16(value, 8));
            let (len, unwritten) = if ee_len > 32768 { (ee_len - 32768, true) } else { (ee_len, false) };
            let pblk = u64::from(le16(value, 10)) << 32 | u64::from(le32(value, 12));
            Record::AddRange { ino: a, lblk: b, len, pblk, unwritten }
        }
        TAG_DEL_RANGE => Record::DelRange { ino: a, lblk: b, len: le32(value, 8) },
        TAG_CREAT => Record::Create { parent: a, ino: b, name: name() },
        TAG_LINK => Record::Link { parent: a, ino: b, name: name() },
        TAG_UNLINK => Record::Unlink { parent: a, ino: b, name: name() },
        TAG_INODE => Record::Inode { ino: a, raw: value[4..].to_vec() },
        _ => return None,
    })
}

/// The kernel's rule for a record it cannot use: the end of the area after
/// a good tail, an error before one.
fn stop_or(found: FastCommits, error: Error) -> Result<FastCommits, Error> {
    if found.commits > 0 {
        Ok(found)
    } else {
        Err(error)
    }
}

/// One record to write: its tag and value.
pub type Tlv = (u16, Vec<u8>);

/// `EXT4_FC_TAG_BASE_LEN` plus a tail's value: the room a fast commit
/// keeps for its tail.
const TAIL_RECORD: usize = TAG_BASE + 8;

/// The fast-commit blocks of one fast commit of transaction `tid`, laid
/// out as the kernel's commit lays them (`ext4_fc_reserve_space`,
/// `ext4_fc_write_tail`): a HEAD first when `head` (the first fast commit
/// since the last full one), then `records` (tag, value) back to back,
/// none split across blocks — every record leaves room for a PAD after
/// it, and one that does not fit the rest of a block follows a PAD to the
/// block's end — then a TAIL whose length runs to the end of its block,
/// carrying `tid` and the CRC32C of everything from the head (or the first
/// record) to it, so that the next fast commit begins a block.
///
/// # Errors
/// [`Error::Invalid`] for a record too large for one block.
pub fn encode(block_size: usize, tid: u32, head: bool, records: &[Tlv]) -> Result<Vec<Vec<u8>>, Error> {
    let mut out = Encoder { block_size, blocks: vec![vec![0u8; block_size]], off: 0, crc: 0 };
    if head {
        let mut value = vec![0u8; 8];
        value[4..8].copy_from_slice(&tid.to_le_bytes());
        out.add(TAG_HEAD, &value)?;
    }
    for (tag, value) in records {
        out.add(*tag, value)?;
    }
    out.tail(tid);
    Ok(out.blocks)
}

struct Encoder {
    block_size: usize,
    blocks: Vec<Vec<u8>>,
    /// Where the next record goes in the last block.
    off: usize,
    crc: u32,
}

impl Encoder {
    /// Room for `len` bytes of record in the last block, a PAD and a new
    /// block first if it lacks them (`ext4_fc_reserve_space`): a record
    /// must leave room for a PAD's tag and length after it.
    fn reserve(&mut self, len: usize) -> Result<(), Error> {
        if len + TAG_BASE > self.block_size {
            return Err(Error::Invalid {
                what: "fast commit",
                detail: format!("a record of {len} bytes does not fit a {}-byte block", self.block_size),
            });
        }
        let pad = self.block_size - TAG_BASE - self.off;
        if len <= pad {
            return Ok(());
        }
        let block = self.blocks.last_mut().expect("one block at least");
        block[self.off..self.off + 2].copy_from_slice(&TAG_PAD.to_le_bytes());
        block[self.off + 2..self.off + 4].copy_from_slice(&(pad as u16).to_le_bytes());
        self.crc = crc32c::raw_update(self.crc, &block[self.off..self.off + TAG_BASE + pad]);
        self.blocks.push(vec![0u8; self.block_size]);
        self.off = 0;
        Ok(())
    }

    fn add(&mut self, tag: u16, value: &[u8]) -> Result<(), Error> {
        assert!(value.len() <= usize::from(u16::MAX), "a record's length fits its le16");
        self.reserve(TAG_BASE + value.len())?;
        let block = self.blocks.last_mut().expect("one block at least");
        let at = self.off;
        block[at..at + 2].copy_from_slice(&tag.to_le_bytes());
        block[at + 2..at + 4].copy_from_slice(&(value.len() as u16).to_le_bytes());
        block[at + TAG_BASE..at + TAG_BASE + value.len()].copy_from_slice(value);
        self.crc = crc32c::raw_update(self.crc, &block[at..at + TAG_BASE + value.len()]);
        self.off += TAG_BASE + value.len();
        Ok(())
    }

    fn tail(&mut self, tid: u32) {
        self.reserve(TAIL_RECORD).expect("a tail fits any block");
        let block = self.blocks.last_mut().expect("one block at least");
        let at = self.off;
        // The value runs to the block's end: the next fast commit begins
        // in a block of its own.
        let len = self.block_size - at - TAG_BASE;
        block[at..at + 2].copy_from_slice(&TAG_TAIL.to_le_bytes());
        block[at + 2..at + 4].copy_from_slice(&(len as u16).to_le_bytes());
        block[at + 4..at + 8].copy_from_slice(&tid.to_le_bytes());
        let crc = crc32c::raw_update(self.crc, &block[at..at + 8]);
        block[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
    }
}

/// An `ADD_RANGE` value: file blocks `lblk..lblk + len` of `ino` at disk
/// blocks from `pblk` (`len` at most 32 768, or 32 767 when `unwritten`).
pub fn add_range(ino: u32, lblk: u32, len: u16, pblk: u64, unwritten: bool) -> Tlv {
    assert!(len > 0 && (len <= 32768 && !unwritten || len < 32768), "an extent's length");
    let mut v = vec![0u8; 16];
    v[0..4].copy_from_slice(&ino.to_le_bytes());
    v[4..8].copy_from_slice(&lblk.to_le_bytes());
    let ee_len = if unwritten { len + 32768 } else { len };
    v[8..10].copy_from_slice(&ee_len.to_le_bytes());
    v[10..12].copy_from_slice(&((pblk >> 32) as u16).to_le_bytes());
    v[12..16].copy_from_slice(&(pblk as u32).to_le_bytes());
    (TAG_ADD_RANGE, v)
}

/// A `DEL_RANGE` value: file blocks `lblk..lblk + len` of `ino` unmapped.
pub fn del_range(ino: u32, lblk: u32, len: u32) -> Tlv {
    let mut v = Vec::with_capacity(12);
    for word in [ino, lblk, len] {
        v.extend_from_slice(&word.to_le_bytes());
    }
    (TAG_DEL_RANGE, v)
}

/// A `CREAT`, `LINK` or `UNLINK` value: `name` of `ino` in `parent`.
pub fn dentry(tag: u16, parent: u32, ino: u32, name: &[u8]) -> Tlv {
    assert!(matches!(tag, TAG_CREAT | TAG_LINK | TAG_UNLINK) && (1..=255).contains(&name.len()));
    let mut v = Vec::with_capacity(8 + name.len());
    v.extend_from_slice(&parent.to_le_bytes());
    v.extend_from_slice(&ino.to_le_bytes());
    v.extend_from_slice(name);
    (tag, v)
}

/// An `INODE` value: inode `ino`'s `raw` bytes (128 and its
/// `i_extra_isize`).
pub fn inode(ino: u32, raw: &[u8]) -> Tlv {
    let mut v = Vec::with_capacity(4 + raw.len());
    v.extend_from_slice(&ino.to_le_bytes());
    v.extend_from_slice(raw);
    (TAG_INODE, v)
}

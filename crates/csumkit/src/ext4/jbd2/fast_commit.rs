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

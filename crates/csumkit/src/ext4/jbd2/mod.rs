//! The jbd2 journal's on-disk format (e2fsprogs `lib/ext2fs/kernel-jbd.h`,
//! Linux `include/linux/jbd2.h`): the journal superblock, block headers,
//! descriptor tags, commit and revoke blocks, and their checksums; and
//! [`recover`], the three recovery passes of `fs/jbd2/recovery.c` over
//! them. Every field is big-endian.
//!
//! ```text
//! journal_header_t (every block but data): 0x00 h_magic  0x04 h_blocktype  0x08 h_sequence
//! journal_superblock_t: 0x0C s_blocksize  0x10 s_maxlen  0x14 s_first  0x18 s_sequence
//!   0x1C s_start  0x20 s_errno  0x24 s_feature_compat  0x28 _incompat  0x2C _ro_compat
//!   0x30 s_uuid[16]  0x40 s_nr_users  0x50 s_checksum_type u8  0x54 s_num_fc_blks
//!   0xFC s_checksum  0x100 s_users[16 * 48]
//! tag (csum_v3, 16 bytes): 0x0 t_blocknr  0x4 t_flags (be32)  0x8 t_blocknr_high  0xC t_checksum
//! tag (otherwise, 8 + 4 with 64bit + 2 with csum_v2): 0x0 t_blocknr  0x4 t_checksum (be16)
//!   0x6 t_flags (be16)  0x8 t_blocknr_high; 16 bytes of UUID follow a tag without SAME_UUID
//! commit_header: 0x0C h_chksum_type u8  0x0D h_chksum_size u8  0x10 h_chksum[0]
//!   0x30 h_commit_sec (be64)  0x38 h_commit_nsec
//! revoke header: 0x0C r_count (bytes used, header included), then be32/be64 block numbers
//! ```

pub mod bytelog_anchor;
pub mod fast_commit;
mod file;
mod recovery;
mod write;

pub use file::{journal_file, JournalFile};
pub use recovery::{recover, Recovery, Replay};
pub use write::transaction;

use crate::ext4::feature_bits::{COMPAT_HAS_JOURNAL, INCOMPAT_JOURNAL_DEV};
use crate::ext4::Layout;
use crate::le::{be32, be64};
use crate::{crc32c, Error};

/// `JBD2_MAGIC_NUMBER`, the first field of every journal block but data.
pub const MAGIC: u32 = 0xC03B_3998;

/// `h_blocktype` values.
pub const DESCRIPTOR_BLOCK: u32 = 1;
/// A commit block.
pub const COMMIT_BLOCK: u32 = 2;
/// A version 1 superblock.
pub const SUPERBLOCK_V1: u32 = 3;
/// A version 2 superblock.
pub const SUPERBLOCK_V2: u32 = 4;
/// A revoke block.
pub const REVOKE_BLOCK: u32 = 5;

/// `JBD2_FEATURE_COMPAT_CHECKSUM`: CRC32 (big-endian) of each transaction in its commit block.
pub const COMPAT_CHECKSUM: u32 = 0x1;
/// `JBD2_FEATURE_INCOMPAT_REVOKE`.
pub const INCOMPAT_REVOKE: u32 = 0x1;
/// `JBD2_FEATURE_INCOMPAT_64BIT`: 64-bit block numbers in tags and revoke records.
pub const INCOMPAT_64BIT: u32 = 0x2;
/// `JBD2_FEATURE_INCOMPAT_ASYNC_COMMIT`.
pub const INCOMPAT_ASYNC_COMMIT: u32 = 0x4;
/// `JBD2_FEATURE_INCOMPAT_CSUM_V2`: 16-bit tag checksums.
pub const INCOMPAT_CSUM_V2: u32 = 0x8;
/// `JBD2_FEATURE_INCOMPAT_CSUM_V3`: 32-bit tag checksums, 16-byte tags.
pub const INCOMPAT_CSUM_V3: u32 = 0x10;
/// `JBD2_FEATURE_INCOMPAT_FAST_COMMIT`: a fast-commit area after the log.
pub const INCOMPAT_FAST_COMMIT: u32 = 0x20;
/// The incompat features a journal may have and still be read here.
pub const KNOWN_INCOMPAT: u32 = INCOMPAT_REVOKE
    | INCOMPAT_64BIT
    | INCOMPAT_ASYNC_COMMIT
    | INCOMPAT_CSUM_V2
    | INCOMPAT_CSUM_V3
    | INCOMPAT_FAST_COMMIT;

/// `JBD2_FLAG_ESCAPE`: the block's first four bytes were the magic.
pub const FLAG_ESCAPE: u16 = 1;
/// `JBD2_FLAG_SAME_UUID`: no UUID follows the tag.
pub const FLAG_SAME_UUID: u16 = 2;
/// `JBD2_FLAG_LAST_TAG`.
pub const FLAG_LAST_TAG: u16 = 8;

/// `JBD2_CRC32C_CHKSUM`, the only `s_checksum_type` of csum v2/v3.
pub const CRC32C_CHKSUM: u8 = 4;
/// `JBD2_CRC32_CHKSUM` in a commit block's `h_chksum_type` (v1 checksums).
pub const CRC32_CHKSUM: u8 = 1;
/// `JBD2_DEFAULT_FAST_COMMIT_BLOCKS`, when `s_num_fc_blks` is 0.
pub const DEFAULT_FAST_COMMIT_BLOCKS: u32 = 256;
/// `JBD2_MIN_JOURNAL_BLOCKS`.
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;

/// Bytes of `journal_header_t`.
pub const HEADER_BYTES: usize = 12;
/// Offset of the superblock's `s_checksum`.
pub const SB_CHECKSUM: usize = 0xFC;
/// Bytes the superblock's checksum covers (`sizeof(journal_superblock_t)`).
pub const SUPERBLOCK_BYTES: usize = 1024;
/// Bytes of a descriptor or revoke block's checksum tail.
pub const TAIL_BYTES: usize = 4;

/// A journal superblock, checked as e2fsck's `e2fsck_journal_load` checks it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Superblock {
    /// 1 or 2.
    pub version: u8,
    /// `s_blocksize`: the filesystem's block size.
    pub block_size: u32,
    /// `s_maxlen`: journal blocks, fast-commit area included.
    pub max_len: u32,
    /// `s_first`: the first block of the log.
    pub first: u32,
    /// `s_sequence`: the first transaction expected in the log.
    pub sequence: u32,
    /// `s_start`: the log's first block; 0 for a journal with nothing to replay.
    pub start: u32,
    /// `s_errno`: an error the kernel recorded (aborted journal).
    pub errno: i32,
    /// `s_feature_compat`.
    pub compat: u32,
    /// `s_feature_incompat`.
    pub incompat: u32,
    /// `s_feature_ro_compat`.
    pub ro_compat: u32,
    /// `s_uuid`.
    pub uuid: [u8; 16],
    /// `s_num_fc_blks` as the kernel reads it (the default for 0), when
    /// the journal has a fast-commit area.
    pub fast_commit_blocks: u32,
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupt { location: "journal superblock".into(), detail: detail.into() }
}

impl Superblock {
    /// Parses and checks the journal superblock in `block` (the journal's
    /// first block), whose filesystem has `fs_block_size`-byte blocks and
    /// whose journal file holds `file_blocks` blocks.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a damaged or inconsistent superblock (bad
    /// magic, checksum, geometry), naming the field; [`Error::Invalid`] for
    /// features or a layout this reader does not know (a newer format, a
    /// journal shared by several filesystems).
    pub fn parse(block: &[u8], fs_block_size: u32, file_blocks: u64) -> Result<Superblock, Error> {
        if block.len() < SUPERBLOCK_BYTES {
            return Err(corrupt(format!("{} bytes, not {SUPERBLOCK_BYTES}", block.len())));
        }
        if be32(block, 0) != MAGIC {
            return Err(corrupt(format!("no jbd2 magic ({:#010x})", be32(block, 0))));
        }
        let version = match be32(block, 4) {
            SUPERBLOCK_V1 => 1,
            SUPERBLOCK_V2 => 2,
            DESCRIPTOR_BLOCK | COMMIT_BLOCK | REVOKE_BLOCK => {
                return Err(corrupt("a log block where the superblock goes"))
            }
            other => {
                return Err(Error::Invalid {
                    what: "journal superblock",
                    detail: format!("block type {other}, a format this reader does not know"),
                })
            }
        };
        // Version 1 has no feature words (e2fsck clears what is there).
        let word = |at: usize| if version == 1 { 0 } else { be32(block, at) };
        let (compat, incompat, ro_compat) = (word(0x24), word(0x28), word(0x2C));
        if incompat & !KNOWN_INCOMPAT != 0 || ro_compat != 0 {
            return Err(Error::Invalid {
                what: "journal features",
                detail: format!("incompat {incompat:#x}, ro_compat {ro_compat:#x}: features this reader does not know"),
            });
        }
        if version == 2 && be32(block, 0x40) > 1 {
            return Err(Error::Invalid {
                what: "journal",
                detail: format!("shared by {} filesystems (an external journal device)", be32(block, 0x40)),
            });
        }
        let csum_v2_or_v3 = incompat & (INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3) != 0;
        if incompat & INCOMPAT_CSUM_V2 != 0 && incompat & INCOMPAT_CSUM_V3 != 0 {
            return Err(corrupt("both checksum v2 and v3"));
        }
        if csum_v2_or_v3 && compat & COMPAT_CHECKSUM != 0 {
            return Err(corrupt("checksum v1 beside v2/v3"));
        }
        if csum_v2_or_v3 {
            if block[0x50] != CRC32C_CHKSUM {
                return Err(corrupt(format!("checksum type {} is not CRC32C ({CRC32C_CHKSUM})", block[0x50])));
            }
            let (stored, computed) = (be32(block, SB_CHECKSUM), superblock_checksum(&block[..SUPERBLOCK_BYTES]));
            if stored != computed {
                return Err(corrupt(format!("checksum {stored:#010x}, computed {computed:#010x}")));
            }
        }
        let block_size = be32(block, 0x0C);
        if block_size != fs_block_size {
            return Err(corrupt(format!("block size {block_size}, the filesystem's is {fs_block_size}")));
        }
        let max_len = be32(block, 0x10);
        if u64::from(max_len) > file_blocks {
            return Err(corrupt(format!("s_maxlen {max_len} blocks, the journal file holds {file_blocks}")));
        }
        let (first, start) = (be32(block, 0x14), be32(block, 0x1C));
        let fast_commit_blocks = if incompat & INCOMPAT_FAST_COMMIT != 0 {
            let n = match be32(block, 0x54) {
                0 => DEFAULT_FAST_COMMIT_BLOCKS,
                n => n,
            };
            if max_len.checked_sub(n).is_none_or(|log| log < MIN_JOURNAL_BLOCKS) {
                return Err(corrupt(format!("{n} fast-commit blocks leave too short a log of {max_len}")));
            }
            n
        } else {
            0
        };
        let last = max_len - fast_commit_blocks;
        if first == 0 || first >= last {
            return Err(corrupt(format!("s_first {first} outside the log [1, {last})")));
        }
        if start != 0 && (start < first || start >= last) {
            return Err(corrupt(format!("s_start {start} outside the log [{first}, {last})")));
        }
        let mut uuid = [0u8; 16];
        uuid.copy_from_slice(&block[0x30..0x40]);
        Ok(Superblock {
            version,
            block_size,
            max_len,
            first,
            sequence: be32(block, 0x18),
            start,
            errno: be32(block, 0x20) as i32,
            compat,
            incompat,
            ro_compat,
            uuid,
            fast_commit_blocks,
        })
    }

    /// One past the log's last block (`j_last`): the fast-commit area follows.
    pub fn last(&self) -> u32 {
        self.max_len - self.fast_commit_blocks
    }

    /// Whether block numbers are 64-bit.
    pub fn wide(&self) -> bool {
        self.incompat & INCOMPAT_64BIT != 0
    }

    /// Whether blocks carry CRC32C checksums (v2 or v3).
    pub fn csum_v2_or_v3(&self) -> bool {
        self.incompat & (INCOMPAT_CSUM_V2 | INCOMPAT_CSUM_V3) != 0
    }

    /// The seed of every block checksum: CRC32C of the UUID.
    pub fn csum_seed(&self) -> u32 {
        crc32c::raw_update(!0, &self.uuid)
    }

    /// Bytes of one descriptor tag, UUID aside (`journal_tag_bytes`).
    pub fn tag_bytes(&self) -> usize {
        if self.incompat & INCOMPAT_CSUM_V3 != 0 {
            return 16;
        }
        let size = 12 + if self.incompat & INCOMPAT_CSUM_V2 != 0 { 2 } else { 0 };
        if self.wide() {
            size
        } else {
            size - 4
        }
    }
}

/// The superblock's CRC32C (seeded with `!0`) over its 1024 bytes with
/// `s_checksum` read as zero.
pub fn superblock_checksum(sb: &[u8]) -> u32 {
    let crc = crc32c::raw_update(!0, &sb[..SB_CHECKSUM]);
    let crc = crc32c::raw_update(crc, &[0; 4]);
    crc32c::raw_update(crc, &sb[SB_CHECKSUM + 4..SUPERBLOCK_BYTES])
}

/// A commit block's `h_commit_sec`.
pub(crate) fn commit_time(block: &[u8]) -> u64 {
    be64(block, 0x30)
}

/// Writes every block recovery of `image`'s journal replays into `image`
/// itself — a private copy: the filesystem as recovery leaves it, the
/// superblock's flags as the log has them (`needs_recovery` is cleared only
/// once the journal is emptied, which a copy does not do). `None` for an
/// image without a journal; nothing written on an error.
///
/// # Errors
/// As [`Journal::open`] and [`Journal::recover`].
pub fn replay_into(image: &mut [u8], layout: &Layout) -> Result<Option<Recovery>, Error> {
    let Some(journal) = Journal::open(image, layout)? else { return Ok(None) };
    let recovery = journal.recover(image, layout.blocks_count)?;
    let copies: Vec<(u64, Vec<u8>)> = recovery
        .blocks
        .iter()
        .map(|(&block, &replay)| Ok((block, journal.replayed(image, replay)?)))
        .collect::<Result<_, Error>>()?;
    let bs = layout.block_size as usize;
    for (block, bytes) in copies {
        image[block as usize * bs..][..bs].copy_from_slice(&bytes);
    }
    Ok(Some(recovery))
}

/// An image's internal journal: its superblock and where its blocks are.
#[derive(Clone, Debug)]
pub struct Journal {
    /// The journal superblock.
    pub superblock: Superblock,
    /// `blocks[i]`: the image block holding journal block `i`.
    pub blocks: Vec<u64>,
    /// The image blocks of the journal inode's mapping (extent tree or
    /// indirect blocks).
    pub mapping: Vec<u64>,
}

impl Journal {
    /// The journal of `image`, or `None` for an image without one.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a journal on another device (`journal_dev`, or
    /// `has_journal` without a journal inode), named; [`Error::Corrupt`] / [`Error::Invalid`] as
    /// [`journal_file`] and [`Superblock::parse`].
    pub fn open(image: &[u8], layout: &Layout) -> Result<Option<Journal>, Error> {
        if layout.features.incompat & INCOMPAT_JOURNAL_DEV != 0 {
            return Err(Error::Invalid {
                what: "journal",
                detail: "the journal is on another device (journal_dev): not read here".into(),
            });
        }
        if layout.features.compat & COMPAT_HAS_JOURNAL == 0 {
            return Ok(None);
        }
        let JournalFile { blocks, mapping } = journal_file(image, layout)?;
        let Some(&first) = blocks.first() else {
            return Err(Error::Invalid {
                what: "journal",
                detail: "has_journal without a journal inode: the journal is on another device (s_journal_dev), not \
                         read here"
                    .into(),
            });
        };
        let bs = layout.block_size as usize;
        let sb = &image[first as usize * bs..][..bs];
        let superblock = Superblock::parse(sb, layout.block_size as u32, blocks.len() as u64)?;
        Ok(Some(Journal { superblock, blocks, mapping }))
    }

    /// The bytes of journal block `i`.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a block past the journal or the image.
    pub fn block<'a>(&self, image: &'a [u8], i: u32) -> Result<&'a [u8], Error> {
        let bs = self.superblock.block_size as usize;
        let at = *self.blocks.get(i as usize).ok_or_else(|| Error::Corrupt {
            location: format!("journal block {i}"),
            detail: format!("past the journal's {} blocks", self.blocks.len()),
        })? as usize;
        image.get(at * bs..(at + 1) * bs).ok_or_else(|| Error::Corrupt {
            location: format!("journal block {i}"),
            detail: "outside the image".into(),
        })
    }

    /// Recovery over the log as `image` holds it.
    ///
    /// # Errors
    /// As [`recover`];
    /// [`Error::Corrupt`] too for a log that would write over the journal
    /// itself (its blocks or their mapping), which a replay interrupted and
    /// begun again must find as it was.
    pub fn recover(&self, image: &[u8], fs_blocks: u64) -> Result<Recovery, Error> {
        let recovery = recover(&self.superblock, fs_blocks, |i| self.block(image, i))?;
        let own: std::collections::HashSet<u64> = self.blocks.iter().chain(&self.mapping).copied().collect();
        if let Some((block, replay)) = recovery.blocks.iter().find(|(block, _)| own.contains(block)) {
            return Err(Error::Corrupt {
                location: format!("journal block {}", replay.journal_block),
                detail: format!("transaction {} logs block {block}, a block of the journal itself", replay.transaction),
            });
        }
        Ok(recovery)
    }

    /// The bytes recovery puts in the filesystem block `replay` describes:
    /// the log's copy, its magic restored if it was escaped.
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a journal block outside the image.
    pub fn replayed(&self, image: &[u8], replay: Replay) -> Result<Vec<u8>, Error> {
        let mut bytes = self.block(image, replay.journal_block)?.to_vec();
        if replay.escaped {
            bytes[..4].copy_from_slice(&MAGIC.to_be_bytes());
        }
        Ok(bytes)
    }
}

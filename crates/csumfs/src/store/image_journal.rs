//! csumfs's commits as jbd2 transactions in the image's own journal, laid
//! out as the kernel's commit lays them (`csumkit::ext4::jbd2::transaction`):
//! after a crash the kernel, e2fsck and csumfs's open each replay them.
//!
//! A commit is the filesystem blocks its changes touched, copied whole.
//! Its descriptor blocks and copies are written first, then one
//! `fdatasync` — the same file holds the data written in place, so this
//! one flush also makes the data durable before the commit that points at
//! it — then the commit block and a second `fdatasync`: a commit block is
//! never durable before its transaction (the kernel's pre-flush). The
//! commit block's place is zeroed before the first flush, so a torn commit
//! block is never seen.
//!
//! The journal superblock says where recovery starts: `s_start` 0 while
//! the log is empty (the journal as recovery left it), else the tail — the
//! first transaction not yet written home — and its sequence. The first
//! commit after an empty log writes `s_start` with its own blocks, before
//! the same flush (a superblock naming a transaction whose commit block is
//! not durable is a log recovery finds empty). A checkpoint, once the
//! blocks are home and synced, moves the tail to the head.
//!
//! On a filesystem with `fast_commit`, an fsync may instead append a fast
//! commit (`csumkit::ext4::jbd2::fast_commit::encode`) to the fast-commit
//! area after the log, which recovery replays after the log's last
//! transaction. The first since a full commit begins the area with a HEAD
//! of the next transaction: its blocks are written with the HEAD's tag
//! zeroed and flushed, then the HEAD, and flushed — an area whose first
//! block does not begin with a HEAD holds nothing to replay, so a crash
//! never leaves a HEAD without the records it covers (which the kernel
//! takes for a corrupt journal and refuses to mount). Later ones follow
//! after the image's data is flushed: a torn one fails its tail's checksum
//! and recovery stops before it.

use crate::error::{corrupt, Error};
use crate::store::medium::Backing;
use csumkit::ext4::feature_bits::{COMPAT_FAST_COMMIT, INCOMPAT_64BIT, RO_COMPAT_METADATA_CSUM};
use csumkit::ext4::jbd2::INCOMPAT_FAST_COMMIT;
use csumkit::ext4::jbd2::{self, fast_commit, superblock_checksum, Journal, Superblock, INCOMPAT_CSUM_V3, MAGIC};
use std::collections::BTreeMap;

/// The image's journal, written by this process.
pub(crate) struct ImageJournal {
    /// The image file (a second handle), or a simulated disk in tests.
    file: Box<dyn Backing>,
    sb: Superblock,
    /// The journal superblock block as the file holds it.
    sb_bytes: Vec<u8>,
    /// `blocks[i]`: the image block holding journal block `i`.
    blocks: Vec<u64>,
    /// Where the next transaction goes.
    head: u32,
    /// The first transaction not yet written home (`== head`: none).
    tail: u32,
    tail_tid: u32,
    next_tid: u32,
    /// `s_start` as the file holds it.
    start_on_disk: u32,
    /// The newest copy in the log of each filesystem block since the tail:
    /// (journal block, escaped).
    copies: BTreeMap<u64, (u32, bool)>,
    /// Seconds of the last commit block (never going back).
    last_time: u64,
    /// Bytes written into the log so far.
    pub(crate) bytes_written: u64,
    /// Blocks of the fast-commit area csumfs writes (0: no fast commits).
    fast_len: u32,
    /// Blocks of it the fast commits of transaction `next_tid` fill.
    fast_used: u32,
    /// Bytes written into the fast-commit area so far.
    pub(crate) fast_bytes_written: u64,
}

impl ImageJournal {
    /// The journal of `image` (the file `file` holds, recovered: `s_start`
    /// 0), ready for csumfs's commits; `Ok(None)` when there is none or it
    /// is not one csumfs writes (an external journal, no `csum_v3`), with
    /// the reason.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a journal that still needs recovery;
    /// [`Error::Io`] duplicating the descriptor.
    pub(crate) fn open(file: Box<dyn Backing>, image: &[u8]) -> Result<Result<ImageJournal, String>, Error> {
        let (layout, journal) = match Self::writable(image) {
            Ok(found) => found,
            Err(reason) => return Ok(Err(reason)),
        };
        let Journal { superblock: sb, blocks, .. } = journal;
        if sb.start != 0 {
            return Err(Error::Invalid("the image's journal still needs recovery".into()));
        }
        let bs = u64::from(sb.block_size);
        let mut sb_bytes = image[(blocks[0] * bs) as usize..][..bs as usize].to_vec();
        let sb = if sb.incompat & INCOMPAT_CSUM_V3 != 0 {
            sb
        } else {
            // What the kernel's mount of a metadata_csum filesystem does to
            // the journal mke2fs made (`set_journal_csum_feature_set`):
            // csum_v3 in place of the older checksums, CRC32C, and 64-bit
            // tags on a 64-bit filesystem; written with the first commit.
            let wide = layout.features.incompat & INCOMPAT_64BIT != 0;
            let incompat = (sb.incompat & !jbd2::INCOMPAT_CSUM_V2)
                | INCOMPAT_CSUM_V3
                | if wide { jbd2::INCOMPAT_64BIT } else { 0 };
            sb_bytes[0x24..0x28].copy_from_slice(&(sb.compat & !jbd2::COMPAT_CHECKSUM).to_be_bytes());
            sb_bytes[0x28..0x2C].copy_from_slice(&incompat.to_be_bytes());
            sb_bytes[0x50] = jbd2::CRC32C_CHKSUM;
            let crc = superblock_checksum(&sb_bytes);
            sb_bytes[0xFC..0x100].copy_from_slice(&crc.to_be_bytes());
            Superblock::parse(&sb_bytes, sb.block_size, blocks.len() as u64)?
        };
        // The kernel's mount of a fast_commit filesystem turns the journal's
        // fast-commit feature on (`s_num_fc_blks` as mke2fs sized it, or the
        // default): written with the first commit, off again when the log
        // is emptied (`write_superblock`).
        let fast = layout.features.compat & COMPAT_FAST_COMMIT != 0;
        let sb = if fast && sb.incompat & INCOMPAT_FAST_COMMIT == 0 {
            let mut with = sb_bytes.clone();
            with[0x28..0x2C].copy_from_slice(&(sb.incompat | INCOMPAT_FAST_COMMIT).to_be_bytes());
            let crc = superblock_checksum(&with);
            with[0xFC..0x100].copy_from_slice(&crc.to_be_bytes());
            match Superblock::parse(&with, sb.block_size, blocks.len() as u64) {
                Ok(parsed) => {
                    sb_bytes = with;
                    parsed
                }
                Err(_) => sb, // a journal too small for the area: full commits only
            }
        } else {
            sb
        };
        // The area's blocks, as the kernel's `jbd2_fc_get_buf` hands them
        // out (from one past the log's last to the journal's end), but the
        // last: the kernel's replay reads on past a block whose fast commit
        // is good, and past the journal's end it fails the whole recovery
        // ("JBD2: corrupted journal superblock") — a block that is not one
        // must end the area.
        let fast_len = if fast && sb.fast_commit_blocks > 1 { sb.max_len - (sb.last() + 1) - 1 } else { 0 };
        Ok(Ok(ImageJournal {
            file,
            head: sb.first,
            tail: sb.first,
            tail_tid: sb.sequence,
            next_tid: sb.sequence,
            start_on_disk: 0,
            sb,
            sb_bytes,
            blocks,
            copies: BTreeMap::new(),
            last_time: 0,
            bytes_written: 0,
            fast_len,
            fast_used: 0,
            fast_bytes_written: 0,
        }))
    }

    /// The journal of `image` when it is one csumfs writes — internal,
    /// `csum_v3` or made so (a version 2 superblock on a metadata_csum
    /// filesystem), a log of more than a few blocks — whether or not it
    /// needs recovery; else why not.
    pub(crate) fn writable(image: &[u8]) -> Result<(csumkit::ext4::Layout, Journal), String> {
        let layout = csumkit::ext4::Layout::parse(image).map_err(|e| e.to_string())?;
        let journal = match Journal::open(image, &layout) {
            Ok(Some(journal)) => journal,
            Ok(None) => return Err("the image has no journal".into()),
            Err(e) => return Err(e.to_string()),
        };
        let sb = &journal.superblock;
        let metadata_csum = layout.features.ro_compat & RO_COMPAT_METADATA_CSUM != 0;
        if sb.incompat & INCOMPAT_CSUM_V3 == 0 && (!metadata_csum || sb.version < 2) {
            return Err("its journal is not csum_v3 and the filesystem lacks metadata_csum".into());
        }
        if sb.last() <= sb.first + 16 {
            return Err(format!("its journal's log of {} blocks is too small", sb.last() - sb.first));
        }
        Ok((layout, journal))
    }

    fn log_len(&self) -> u32 {
        self.sb.last() - self.sb.first
    }

    /// Log blocks free between the head and the tail.
    pub(crate) fn free_blocks(&self) -> u32 {
        let used = (self.head + self.log_len() - self.tail) % self.log_len();
        self.log_len() - used
    }

    /// Log blocks a transaction of `copies` blocks takes.
    pub(crate) fn blocks_for(&self, copies: usize) -> u64 {
        let per_descriptor = (self.sb.block_size as usize - jbd2::HEADER_BYTES - jbd2::TAIL_BYTES - 16) / 16;
        (copies.div_ceil(per_descriptor) + copies + 1) as u64
    }

    /// Bytes of one journal block.
    pub(crate) fn block_bytes(&self) -> u64 {
        u64::from(self.sb.block_size)
    }

    /// The log's length in bytes.
    pub(crate) fn log_bytes(&self) -> u64 {
        u64::from(self.log_len()) * u64::from(self.sb.block_size)
    }

    fn at(&self, journal_block: u32) -> u64 {
        self.blocks[journal_block as usize] * u64::from(self.sb.block_size)
    }

    fn io(context: &'static str) -> impl Fn(std::io::Error) -> Error {
        move |source| Error::Io { context: context.into(), source }
    }

    /// The journal superblock with `s_start` and `s_sequence`, resealed;
    /// the fast-commit feature on while the log is in use, as the kernel
    /// keeps it from mount to unmount.
    fn write_superblock(&mut self, start: u32, sequence: u32) -> Result<(), Error> {
        self.sb_bytes[0x18..0x1C].copy_from_slice(&sequence.to_be_bytes());
        self.sb_bytes[0x1C..0x20].copy_from_slice(&start.to_be_bytes());
        if self.fast_len > 0 {
            let incompat = u32::from_be_bytes(self.sb_bytes[0x28..0x2C].try_into().expect("four bytes"));
            let incompat = if start == 0 { incompat & !INCOMPAT_FAST_COMMIT } else { incompat | INCOMPAT_FAST_COMMIT };
            self.sb_bytes[0x28..0x2C].copy_from_slice(&incompat.to_be_bytes());
        }
        let crc = superblock_checksum(&self.sb_bytes);
        self.sb_bytes[0xFC..0x100].copy_from_slice(&crc.to_be_bytes());
        self.file.write_at(self.at(0), &self.sb_bytes).map_err(Self::io("the journal superblock"))?;
        self.start_on_disk = start;
        Ok(())
    }

    /// Writes one transaction of `copies` (filesystem block, its bytes)
    /// and makes it durable, with every write the file got before it.
    ///
    /// # Errors
    /// [`Error::Invalid`] when it does not fit in the free blocks (callers
    /// check [`free_blocks`](Self::free_blocks) first); [`Error::Io`].
    pub(crate) fn commit(&mut self, copies: &[(u64, Vec<u8>)]) -> Result<(), Error> {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let time = (now.as_secs().max(self.last_time), now.subsec_nanos());
        let tid = self.next_tid;
        let written = jbd2::transaction(&self.sb, self.head, self.free_blocks(), tid, copies, time)
            .map_err(|e| Error::Invalid(format!("a commit does not fit the image's journal: {e}")))?;
        let (commit_block, commit) = written.last().expect("a transaction ends with its commit block");
        if self.start_on_disk == 0 {
            self.write_superblock(self.head, tid)?;
        }
        let body = &written[..written.len() - 1];
        for (at, bytes) in body {
            self.file.write_at(self.at(*at), bytes).map_err(Self::io("the image's journal"))?;
        }
        // The commit block's place zeroed with them: all a commit block
        // holds lies in its first 64 bytes, so its write, torn at any
        // sector, then leaves either the whole block or no block — never a
        // commit block with the stale tail of an earlier lap, which fails
        // its checksum and makes the kernel call the journal corrupt.
        let zeros = vec![0u8; self.sb.block_size as usize];
        self.file.write_at(self.at(*commit_block), &zeros).map_err(Self::io("the image's journal"))?;
        self.file.sync().map_err(Self::io("fdatasync of the image"))?;
        self.file.write_at(self.at(*commit_block), commit).map_err(Self::io("the image's journal"))?;
        self.file.sync().map_err(Self::io("fdatasync of the image"))?;
        // The copies follow their descriptors in the order of `copies`.
        let mut places = body.iter().filter(|(_, bytes)| !is_descriptor(bytes, tid));
        for (block, bytes) in copies {
            let (at, _) = places.next().expect("one log block per copy");
            self.copies.insert(*block, (*at, jbd2_magic(bytes)));
        }
        self.head = (*commit_block + 1 - self.sb.first) % self.log_len() + self.sb.first;
        self.next_tid = tid.wrapping_add(1);
        // The fast commits of `tid` are in it: the area begins again.
        self.fast_used = 0;
        self.last_time = time.0;
        self.bytes_written += written.len() as u64 * u64::from(self.sb.block_size);
        Ok(())
    }

    /// The newest logged copy of every block since the tail, read back from
    /// the file: what a fold writes home.
    ///
    /// # Errors
    /// [`Error::Io`] reading the journal.
    pub(crate) fn logged_copies(&self) -> Result<Vec<(u64, Vec<u8>)>, Error> {
        let bs = self.sb.block_size as usize;
        let mut out = Vec::with_capacity(self.copies.len());
        for (&block, &(at, escaped)) in &self.copies {
            let mut bytes = vec![0u8; bs];
            self.file.read_at(self.at(at), &mut bytes).map_err(Self::io("the image's journal"))?;
            if escaped {
                if bytes[..4] != [0; 4] {
                    return Err(corrupt("journal", format!("the escaped copy of block {block} changed in the log")));
                }
                bytes[..4].copy_from_slice(&MAGIC.to_be_bytes());
            }
            out.push((block, bytes));
        }
        Ok(out)
    }

    /// Everything logged is home and durable: the tail moves to the head
    /// (`empty`: the journal superblock says `s_start` 0, as at unmount),
    /// durable on return.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub(crate) fn checkpointed(&mut self, empty: bool) -> Result<(), Error> {
        if empty && self.fast_used > 0 {
            // Everything is home: the fast commits of `next_tid` must never
            // be replayed, nor continued by new ones after an empty log — a
            // later commit's blocks could end where an old one's began and
            // lead a replay into it. The next transaction takes a new ID.
            self.next_tid = self.next_tid.wrapping_add(1);
            self.fast_used = 0;
        }
        self.tail = self.head;
        self.tail_tid = self.next_tid;
        self.copies.clear();
        let start = if empty { 0 } else { self.head };
        if self.start_on_disk == 0 && start == 0 {
            return Ok(());
        }
        self.write_superblock(start, self.tail_tid)?;
        self.file.sync().map_err(Self::io("fdatasync of the image"))
    }

    /// Zeroes the fast-commit area when it holds anything: e2fsck 1.47.0
    /// fails a recovery whose fast-commit area begins with a stale head
    /// (the kernel's scan ignores it), and a crash of this mount leaves a
    /// log e2fsck must recover; and no fast commit an earlier mount left
    /// under a transaction ID this one reuses may follow this mount's.
    /// Durable at the next flush.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub(crate) fn clear_stale_fast_commits(&mut self) -> Result<bool, Error> {
        if self.sb.fast_commit_blocks == 0 {
            return Ok(false);
        }
        let bs = self.sb.block_size as usize;
        let (mut bytes, zeros) = (vec![0u8; bs], vec![0u8; bs]);
        let mut cleared = false;
        for block in self.sb.last() + 1..self.sb.max_len {
            let at = self.at(block);
            self.file.read_at(at, &mut bytes).map_err(Self::io("the image's journal"))?;
            if bytes != zeros {
                self.file.write_at(at, &zeros).map_err(Self::io("the image's journal"))?;
                cleared = true;
            }
        }
        Ok(cleared)
    }

    /// Whether fast commits go to this journal.
    pub(crate) fn fast_commits(&self) -> bool {
        self.fast_len > 0
    }

    /// Fast-commit blocks free for the rest of transaction `next_tid`.
    pub(crate) fn fast_free_blocks(&self) -> u32 {
        self.fast_len - self.fast_used
    }

    /// Appends one fast commit of `records` to the fast-commit area and
    /// makes it durable; `data_owed`: the image holds data written since
    /// its last flush, which must be durable before the commit is.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a record larger than a block; [`Error::Io`].
    pub(crate) fn fast_commit(&mut self, records: &[fast_commit::Tlv], data_owed: bool) -> Result<(), Error> {
        assert!(self.fast_len > 0, "fast commits need a fast-commit area");
        let bs = self.sb.block_size as usize;
        let head = self.fast_used == 0;
        let blocks = fast_commit::encode(bs, self.next_tid, head, records)
            .map_err(|e| Error::Invalid(format!("a fast commit: {e}")))?;
        assert!(
            blocks.len() as u32 <= self.fast_free_blocks(),
            "the room for a fast commit is checked when it is staged"
        );
        if self.start_on_disk == 0 {
            // Recovery looks for fast commits only after a log in use.
            self.write_superblock(self.head, self.next_tid)?;
        }
        let first = self.sb.last() + 1 + self.fast_used;
        let io = Self::io("the image's journal's fast-commit area");
        if head {
            let mut unheaded = blocks[0].clone();
            unheaded[..4].fill(0);
            self.file.write_at(self.at(first), &unheaded).map_err(&io)?;
        } else {
            if data_owed {
                self.file.sync().map_err(Self::io("fdatasync of the image"))?;
            }
            self.file.write_at(self.at(first), &blocks[0]).map_err(&io)?;
        }
        for (i, block) in blocks.iter().enumerate().skip(1) {
            self.file.write_at(self.at(first + i as u32), block).map_err(&io)?;
        }
        self.file.sync().map_err(Self::io("fdatasync of the image"))?;
        if head {
            self.file.write_at(self.at(first), &blocks[0]).map_err(&io)?;
            self.file.sync().map_err(Self::io("fdatasync of the image"))?;
        }
        self.fast_used += blocks.len() as u32;
        self.fast_bytes_written += (blocks.len() * bs) as u64;
        Ok(())
    }
}

fn jbd2_magic(bytes: &[u8]) -> bool {
    bytes.len() >= 4 && bytes[..4] == MAGIC.to_be_bytes()
}

/// Whether a log block `transaction` wrote is one of its descriptors (a
/// copy whose bytes look like one is escaped, so never reads as one).
fn is_descriptor(bytes: &[u8], tid: u32) -> bool {
    jbd2_magic(bytes) && bytes[4..8] == jbd2::DESCRIPTOR_BLOCK.to_be_bytes() && bytes[8..12] == tid.to_be_bytes()
}

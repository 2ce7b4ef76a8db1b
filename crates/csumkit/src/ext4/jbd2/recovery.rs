//! jbd2 recovery (Linux `fs/jbd2/recovery.c`, shared with e2fsck): a scan
//! pass finds the end of the log — the first block that is not the next
//! transaction's, or a commit whose checksum fails — a revoke pass gathers
//! the revoke records, and a replay pass maps every filesystem block the
//! log holds to its newest unrevoked copy. Nothing is written here: the
//! caller overlays the copies (a read-only open) or writes them home.
//!
//! Every walk is bounded: a valid log never holds more blocks than the log
//! area, so a longer one is corrupt, whatever its blocks say.

use super::{
    commit_time, Superblock, COMMIT_BLOCK, COMPAT_CHECKSUM, CRC32_CHKSUM, DESCRIPTOR_BLOCK, FLAG_ESCAPE, FLAG_LAST_TAG,
    FLAG_SAME_UUID, HEADER_BYTES, INCOMPAT_ASYNC_COMMIT, INCOMPAT_CSUM_V3, MAGIC, REVOKE_BLOCK, TAIL_BYTES,
};
use crate::le::{be16, be32, be64};
use crate::{crc32c, Error};
use std::collections::{BTreeMap, HashMap};

/// Where a filesystem block's newest copy lies in the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Replay {
    /// The journal block (logical, in the journal file) holding the copy.
    pub journal_block: u32,
    /// The copy's first four bytes were the jbd2 magic, stored as zeros
    /// (`JBD2_FLAG_ESCAPE`): the magic goes back when it is replayed.
    pub escaped: bool,
    /// The transaction that logged it.
    pub transaction: u32,
}

/// What recovery found in the log.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Each filesystem block to replay, and where its copy is.
    pub blocks: BTreeMap<u64, Replay>,
    /// The first transaction in the log (`s_sequence`).
    pub first_transaction: u32,
    /// One past the last complete transaction: the journal restarts here.
    pub end_transaction: u32,
    /// Tags replayed (a block logged twice counts twice).
    pub replays: u64,
    /// Revoke records read.
    pub revokes: u64,
    /// Tags skipped for a revoke record.
    pub revoke_hits: u64,
    /// Descriptor, revoke and commit blocks of the replayed transactions.
    pub log_blocks: u64,
    /// The log block after the last replayed transaction's commit: where
    /// the next transaction goes (`s_start` for an empty log).
    pub head: u32,
    /// The last replayed commit's time (seconds): a transaction written
    /// after the log must not commit earlier, or recovery takes it for a
    /// stale one.
    pub last_commit_time: u64,
    /// A transaction whose commit block fails its checksum and is not a
    /// stale one (`j_failed_commit`): the log ends before it, and the
    /// kernel refuses to mount the image (`JBD2: journal transaction N is
    /// corrupt`) once the transactions before it are home.
    pub failed_commit: Option<u32>,
}

impl Recovery {
    /// Transactions to replay.
    pub fn transactions(&self) -> u32 {
        self.end_transaction.wrapping_sub(self.first_transaction)
    }
}

/// `tid_gt`: transaction IDs compared modulo 2^32.
fn tid_gt(x: u32, y: u32) -> bool {
    (x.wrapping_sub(y) as i32) > 0
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pass {
    Scan,
    Revoke,
    Replay,
}

fn corrupt(at: u32, detail: impl Into<String>) -> Error {
    Error::Corrupt { location: format!("journal block {at}"), detail: detail.into() }
}

/// The log of the journal described by `sb`, read through `read` (journal
/// block → its bytes), over a filesystem of `fs_blocks` blocks.
///
/// # Errors
/// [`Error::Corrupt`] for a log recovery must not trust: a block or tag
/// whose checksum fails inside the log (not at its torn end), a tag naming
/// a block outside the filesystem, a revoke block past its size, a log
/// longer than the journal; `read`'s errors.
pub fn recover<'a>(
    sb: &Superblock,
    fs_blocks: u64,
    mut read: impl FnMut(u32) -> Result<&'a [u8], Error>,
) -> Result<Recovery, Error> {
    let mut recovery = Recovery {
        first_transaction: sb.sequence,
        end_transaction: sb.sequence,
        head: sb.start,
        ..Recovery::default()
    };
    if sb.start == 0 {
        return Ok(recovery); // cleanly unmounted: nothing to replay
    }
    let mut walk = Walk { sb, fs_blocks, read: &mut read, revoked: HashMap::new(), end: None };
    walk.pass(Pass::Scan, &mut recovery)?;
    walk.pass(Pass::Revoke, &mut recovery)?;
    walk.pass(Pass::Replay, &mut recovery)?;
    Ok(recovery)
}

struct Walk<'s, R> {
    sb: &'s Superblock,
    fs_blocks: u64,
    read: R,
    /// Block → the newest transaction that revoked it.
    revoked: HashMap<u64, u32>,
    /// The scan's end transaction, once known.
    end: Option<u32>,
}

impl<'a, R: FnMut(u32) -> Result<&'a [u8], Error>> Walk<'_, R> {
    fn read(&mut self, block: u32) -> Result<&'a [u8], Error> {
        if block >= self.sb.max_len {
            return Err(corrupt(block, format!("past the journal's {} blocks", self.sb.max_len)));
        }
        let bytes = (self.read)(block)?;
        if bytes.len() != self.sb.block_size as usize {
            return Err(corrupt(block, format!("read {} bytes, not a block", bytes.len())));
        }
        Ok(bytes)
    }

    /// The log block after `block`, wrapping at the log's end.
    fn next(&self, block: u32) -> u32 {
        let block = block + 1;
        if block >= self.sb.last() {
            block - (self.sb.last() - self.sb.first)
        } else {
            block
        }
    }

    /// CRC32C of a descriptor or revoke block with its tail read as zero.
    fn tail_ok(&self, block: &[u8]) -> bool {
        if !self.sb.csum_v2_or_v3() {
            return true;
        }
        let at = block.len() - TAIL_BYTES;
        let crc = crc32c::raw_update(self.sb.csum_seed(), &block[..at]);
        crc32c::raw_update(crc, &[0; 4]) == be32(block, at)
    }

    fn commit_ok(&self, block: &[u8]) -> bool {
        if !self.sb.csum_v2_or_v3() {
            return true;
        }
        let crc = crc32c::raw_update(self.sb.csum_seed(), &block[..0x10]);
        let crc = crc32c::raw_update(crc, &[0; 4]);
        crc32c::raw_update(crc, &block[0x14..]) == be32(block, 0x10)
    }

    fn tag_ok(&self, tag: &[u8], data: &[u8], sequence: u32) -> bool {
        if !self.sb.csum_v2_or_v3() {
            return true;
        }
        let crc = crc32c::raw_update(self.sb.csum_seed(), &sequence.to_be_bytes());
        let crc = crc32c::raw_update(crc, data);
        if self.sb.incompat & INCOMPAT_CSUM_V3 != 0 {
            be32(tag, 12) == crc
        } else {
            be16(tag, 4) == crc as u16
        }
    }

    /// The tags of a descriptor block: (filesystem block, flags, tag bytes).
    fn tags(&self, block: &'a [u8]) -> Vec<(u64, u16, &'a [u8])> {
        let size = block.len() - if self.sb.csum_v2_or_v3() { TAIL_BYTES } else { 0 };
        let tag_bytes = self.sb.tag_bytes();
        let mut at = HEADER_BYTES;
        let mut tags = Vec::new();
        while at + tag_bytes <= size {
            let tag = &block[at..at + tag_bytes];
            let flags = be16(tag, 6);
            let high = if self.sb.wide() { u64::from(be32(tag, 8)) << 32 } else { 0 };
            tags.push((u64::from(be32(tag, 0)) | high, flags, tag));
            at += tag_bytes + if flags & FLAG_SAME_UUID == 0 { 16 } else { 0 };
            if flags & FLAG_LAST_TAG != 0 {
                break;
            }
        }
        tags
    }

    fn pass(&mut self, pass: Pass, recovery: &mut Recovery) -> Result<(), Error> {
        let mut next_id = self.sb.sequence;
        let mut at = self.sb.start;
        let mut visited: u64 = 0;
        let log_blocks = u64::from(self.sb.last() - self.sb.first);
        // Checksums v1: CRC32 (big-endian) of each transaction's blocks.
        let mut crc32_sum = !0u32;
        let mut check_commit_time = false;
        let mut last_commit_time = 0u64;
        let v1 = self.sb.compat & COMPAT_CHECKSUM != 0;
        loop {
            if pass != Pass::Scan && self.end.is_some_and(|end| !tid_gt(end, next_id)) {
                break;
            }
            visited += 1;
            if visited > log_blocks {
                return Err(corrupt(at, "the log runs past its own start (longer than the journal)"));
            }
            let block_at = at;
            let block = self.read(at)?;
            at = self.next(at);
            if be32(block, 0) != MAGIC || be32(block, 8) != next_id {
                break;
            }
            let kind = be32(block, 4);
            if (pass == Pass::Replay && matches!(kind, DESCRIPTOR_BLOCK | COMMIT_BLOCK))
                || (pass == Pass::Revoke && kind == REVOKE_BLOCK)
            {
                recovery.log_blocks += 1;
            }
            match kind {
                DESCRIPTOR_BLOCK => {
                    if !self.tail_ok(block) {
                        if pass != Pass::Scan {
                            return Err(corrupt(block_at, "descriptor block checksum fails inside the log"));
                        }
                        // Maybe a stale block of an older log: the commit time decides.
                        check_commit_time = true;
                    }
                    let tags = self.tags(block);
                    if pass == Pass::Scan && v1 && !check_commit_time && self.end.is_none() {
                        crc32_sum = crc32_be(crc32_sum, block);
                        for _ in &tags {
                            let data = self.read(at)?;
                            crc32_sum = crc32_be(crc32_sum, data);
                            at = self.next(at);
                            visited += 1;
                        }
                        continue;
                    }
                    if pass != Pass::Replay {
                        for _ in &tags {
                            at = self.next(at);
                            visited += 1;
                        }
                        continue;
                    }
                    for (fs_block, flags, tag) in tags {
                        let data_at = at;
                        at = self.next(at);
                        visited += 1;
                        if self.revoked.get(&fs_block).is_some_and(|&by| !tid_gt(next_id, by)) {
                            recovery.revoke_hits += 1;
                            continue;
                        }
                        if fs_block >= self.fs_blocks {
                            return Err(corrupt(
                                data_at,
                                format!("tag for block {fs_block}, past the filesystem's {}", self.fs_blocks),
                            ));
                        }
                        let data = self.read(data_at)?;
                        if !self.tag_ok(tag, data, next_id) {
                            return Err(corrupt(
                                data_at,
                                format!("checksum of the copy of block {fs_block} (transaction {next_id}) fails"),
                            ));
                        }
                        let escaped = flags & FLAG_ESCAPE != 0;
                        recovery
                            .blocks
                            .insert(fs_block, Replay { journal_block: data_at, escaped, transaction: next_id });
                        recovery.replays += 1;
                    }
                }
                COMMIT_BLOCK => {
                    let time = commit_time(block);
                    if check_commit_time {
                        if time >= last_commit_time {
                            return Err(corrupt(
                                block_at,
                                format!("a block of transaction {next_id} fails its checksum"),
                            ));
                        }
                        break; // a stale block of an older log: the log ends here
                    }
                    if pass == Pass::Scan && v1 {
                        if self.end.is_some() {
                            break;
                        }
                        let (kind, size, found) = (block[0x0C], block[0x0D], be32(block, 0x10));
                        let matches = (crc32_sum == found && kind == CRC32_CHKSUM && size == 4)
                            || (kind == 0 && size == 0 && found == 0);
                        if !matches && self.end_at_bad_commit(next_id, time, last_commit_time, recovery) {
                            break;
                        }
                        crc32_sum = !0;
                    }
                    if pass == Pass::Scan && !self.commit_ok(block) {
                        if time < last_commit_time {
                            break; // stale
                        }
                        if self.end_at_bad_commit(next_id, time, last_commit_time, recovery) {
                            break;
                        }
                    }
                    if pass == Pass::Scan {
                        last_commit_time = time;
                        if self.end.is_none() {
                            recovery.head = at;
                            recovery.last_commit_time = time;
                        }
                    }
                    next_id = next_id.wrapping_add(1);
                }
                REVOKE_BLOCK => {
                    if pass == Pass::Scan && !self.tail_ok(block) {
                        check_commit_time = true;
                    }
                    if pass == Pass::Revoke {
                        self.revoke_records(block, block_at, next_id, recovery)?;
                    }
                }
                _ => break, // not a log block: the log ends
            }
        }
        if pass == Pass::Scan {
            // A bad commit may have set the end already (async commits
            // scan on past it).
            let end = *self.end.get_or_insert(next_id);
            recovery.end_transaction = end;
        } else if let Some(end) = self.end.filter(|&end| end != next_id) {
            return Err(corrupt(at, format!("a recovery pass ended at transaction {next_id}, the scan at {end}")));
        }
        Ok(())
    }

    /// A commit whose checksum fails: the log ends before this
    /// transaction (`Ok(true)`: stop), unless the journal commits
    /// asynchronously, where later transactions still count.
    fn end_at_bad_commit(&mut self, id: u32, time: u64, last: u64, recovery: &mut Recovery) -> bool {
        if time < last {
            return true;
        }
        self.end = Some(id);
        let sync = self.sb.incompat & INCOMPAT_ASYNC_COMMIT == 0;
        if sync {
            recovery.failed_commit = Some(id);
        }
        sync
    }

    fn revoke_records(&mut self, block: &[u8], at: u32, id: u32, recovery: &mut Recovery) -> Result<(), Error> {
        let count = be32(block, HEADER_BYTES) as usize;
        let tail = if self.sb.csum_v2_or_v3() { TAIL_BYTES } else { 0 };
        if count > block.len() - tail {
            return Err(corrupt(at, format!("revoke block says {count} bytes, past its {}", block.len() - tail)));
        }
        let record = if self.sb.wide() { 8 } else { 4 };
        let mut offset = HEADER_BYTES + 4;
        while offset + record <= count {
            let fs_block = if record == 8 { be64(block, offset) } else { u64::from(be32(block, offset)) };
            offset += record;
            let by = self.revoked.entry(fs_block).or_insert(id);
            if tid_gt(id, *by) {
                *by = id;
            }
            recovery.revokes += 1;
        }
        Ok(())
    }
}

/// Linux `crc32_be`: CRC-32 (0x04C11DB7), most significant bit first, no
/// final inversion — the v1 transaction checksum. Bitwise: v1 checksums
/// are rare, and only read.
fn crc32_be(mut crc: u32, data: &[u8]) -> u32 {
    for &byte in data {
        crc ^= u32::from(byte) << 24;
        for _ in 0..8 {
            crc = if crc & 0x8000_0000 != 0 { (crc << 1) ^ 0x04C1_1DB7 } else { crc << 1 };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::{crc32_be, tid_gt};

    #[test]
    fn crc32_be_is_the_msb_first_crc32() {
        // CRC-32/MPEG-2 ("123456789", init !0, no final xor) is 0x0376E6E7.
        assert_eq!(crc32_be(!0, b"123456789"), 0x0376_E6E7);
    }

    #[test]
    fn transaction_ids_compare_across_the_wrap() {
        assert!(tid_gt(1, 0) && tid_gt(0, u32::MAX) && !tid_gt(u32::MAX, 0) && !tid_gt(5, 5));
    }
}

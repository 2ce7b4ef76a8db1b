//! The log's appends, made outside the volume's lock: a sync encodes its
//! commit under the lock (the bytes it carries are copied then) and
//! stages it here; the flushes — the image file's `fdatasync` for data
//! written in place, then the records (a ByteLog's) or the transaction
//! (the image's journal's) — happen after the lock is let go,
//! so other operations go on meanwhile and the `fsync`s they send queue
//! for the next commit (group commit, `txn/group_sync.rs`). Commits are
//! appended in the order they were staged, one at a time.

use crate::error::Error;
use crate::stats::Stats;
use crate::store::image_journal::ImageJournal;
use crate::store::medium::{AnyMedium, SyncHandle, TAG_LAST, TAG_PART};
use csumkit::bytelog::{ByteLog, Medium};
use std::collections::VecDeque;
use std::sync::Arc;

/// Where commits go: a ByteLog (a file beside the image, or persistent
/// memory) or the image's own jbd2 journal.
pub(crate) enum Log {
    Bytes(ByteLog<AnyMedium>),
    Image(ImageJournal),
}

/// A commit encoded and waiting to be appended.
struct Staged {
    number: u64,
    /// A ByteLog's records.
    records: Vec<Vec<u8>>,
    /// The image journal's copies: (filesystem block, its bytes).
    copies: Vec<(u64, Vec<u8>)>,
    /// Or a fast commit's records for its fast-commit area, and the
    /// blocks they take at most.
    fast: Vec<csumkit::ext4::jbd2::fast_commit::Tlv>,
    fast_blocks: u32,
    /// Records already appended (an append that failed resumes here:
    /// replay applies a commit once its last record is whole, and the
    /// parts appended twice carry the same bytes).
    appended: usize,
    /// The image file's data must be durable before its records.
    data_first: bool,
    /// Data checksum changes it carries (for the stats).
    datasums: u64,
}

/// The log, the commits staged for it, and how far it is durable.
pub(crate) struct Writer {
    pub(crate) log: Log,
    staged: VecDeque<Staged>,
    image_sync: SyncHandle,
    /// Commits durable so far, by number (the first staged is 1).
    durable: u64,
    stats: Arc<Stats>,
}

impl Writer {
    pub(crate) fn new(log: Log, image_sync: SyncHandle, stats: Arc<Stats>) -> Writer {
        Writer { log, staged: VecDeque::new(), image_sync, durable: 0, stats }
    }

    /// The ByteLog, on the paths only a ByteLog takes (its folds and
    /// resizes).
    pub(crate) fn byte_log(&mut self) -> &mut ByteLog<AnyMedium> {
        match &mut self.log {
            Log::Bytes(log) => log,
            Log::Image(_) => unreachable!("reached only with a ByteLog"),
        }
    }

    /// The image's journal, when commits go there.
    pub(crate) fn image_journal(&mut self) -> Option<&mut ImageJournal> {
        match &mut self.log {
            Log::Bytes(_) => None,
            Log::Image(journal) => Some(journal),
        }
    }

    /// Bytes free in the log once the staged commits are in it.
    pub(crate) fn free_bytes(&self) -> u64 {
        match &self.log {
            Log::Bytes(log) => {
                let staged: u64 = self
                    .staged
                    .iter()
                    .flat_map(|s| &s.records[s.appended..])
                    .map(|r| csumkit::bytelog::record_span(r.len()))
                    .sum();
                log.free_bytes().saturating_sub(staged)
            }
            Log::Image(journal) => {
                let staged: u64 = self
                    .staged
                    .iter()
                    .filter(|s| !s.copies.is_empty())
                    .map(|s| journal.blocks_for(s.copies.len()))
                    .sum();
                (u64::from(journal.free_blocks()).saturating_sub(staged)) * journal.block_bytes()
            }
        }
    }

    /// Whether the log is more than half full, and whether it is longer
    /// than `configured` bytes (a ByteLog grown for a large commit).
    pub(crate) fn half_full_or_grown(&self, configured: u64) -> (bool, bool) {
        match &self.log {
            Log::Bytes(log) => {
                let len = log.medium().len();
                (self.free_bytes() < (len - csumkit::bytelog::RING_OFFSET) / 2, len > configured)
            }
            Log::Image(journal) => (self.free_bytes() < journal.log_bytes() / 2, false),
        }
    }

    /// Queues commit `number` (one more than the last): `records` for a
    /// ByteLog, `copies` for the image's journal (neither for a sync with
    /// only data to make durable).
    pub(crate) fn stage(
        &mut self,
        number: u64,
        records: Vec<Vec<u8>>,
        copies: Vec<(u64, Vec<u8>)>,
        data_first: bool,
        datasums: u64,
    ) {
        let last = self.staged.back().map_or(self.durable, |s| s.number);
        assert_eq!(number, last + 1, "commits are staged in order");
        let (fast, fast_blocks) = (Vec::new(), 0);
        self.staged.push_back(Staged { number, records, copies, fast, fast_blocks, appended: 0, data_first, datasums });
    }

    /// Queues commit `number` as a fast commit of `records` into the
    /// image journal's fast-commit area, when they fit the room the
    /// commits staged before it leave (counted as if none of them began
    /// the area again). Whether it was staged.
    pub(crate) fn stage_fast(
        &mut self,
        number: u64,
        records: Vec<csumkit::ext4::jbd2::fast_commit::Tlv>,
        data_first: bool,
    ) -> bool {
        let Log::Image(journal) = &self.log else { return false };
        let bs = journal.block_bytes() as usize;
        // Encoded with a head: never fewer blocks than without one.
        let Ok(blocks) = csumkit::ext4::jbd2::fast_commit::encode(bs, 0, true, &records) else { return false };
        let staged: u32 = self.staged.iter().map(|s| s.fast_blocks).sum();
        if staged + blocks.len() as u32 > journal.fast_free_blocks() {
            return false;
        }
        let last = self.staged.back().map_or(self.durable, |s| s.number);
        assert_eq!(number, last + 1, "commits are staged in order");
        let fast_blocks = blocks.len() as u32;
        self.staged.push_back(Staged {
            number,
            records: Vec::new(),
            copies: Vec::new(),
            fast: records,
            fast_blocks,
            appended: 0,
            data_first,
            datasums: 0,
        });
        true
    }

    /// Makes every staged commit up to `number` durable: one image sync
    /// for the data they all need first, then their records in order
    /// (each made durable by its append).
    pub(crate) fn flush_through(&mut self, number: u64) -> Result<(), Error> {
        if self.durable >= number {
            return Ok(());
        }
        let through: Vec<&Staged> = self.staged.iter().take_while(|s| s.number <= number).collect();
        let data_owed = through.iter().any(|s| s.data_first);
        if let Log::Image(_) = self.log {
            return self.flush_image_journal_through(number, data_owed);
        }
        if data_owed {
            (self.image_sync)().map_err(|source| Error::Io { context: "fdatasync of the image".into(), source })?;
            // Every staged commit's data was written before it was staged.
            self.staged.iter_mut().for_each(|s| s.data_first = false);
        }
        let Log::Bytes(log) = &mut self.log else { unreachable!("the image's journal returned above") };
        while let Some(front) = self.staged.front_mut().filter(|s| s.number <= number) {
            let before = log.stats().bytes_persisted;
            let last = front.records.len().wrapping_sub(1);
            while front.appended < front.records.len() {
                let tag = if front.appended == last { TAG_LAST } else { TAG_PART };
                log.append(tag, 0, &front.records[front.appended])?;
                front.appended += 1;
            }
            if !front.records.is_empty() {
                Stats::bump(&self.stats.log_commits);
                Stats::add(&self.stats.log_commit_bytes, log.stats().bytes_persisted - before);
                Stats::add(&self.stats.log_records, front.records.len() as u64);
                Stats::add(&self.stats.log_datasums, front.datasums);
            }
            self.durable = front.number;
            self.staged.pop_front();
        }
        assert!(self.durable >= number, "commit {number} was staged");
        Ok(())
    }

    /// [`flush_through`](Self::flush_through) into the image's journal:
    /// each transaction's first flush, and each fast commit's, makes the
    /// data written before it durable too (every staged commit's data was
    /// written before it was staged); data owed past the last of them is
    /// flushed on its own.
    fn flush_image_journal_through(&mut self, number: u64, mut data_owed: bool) -> Result<(), Error> {
        let Log::Image(journal) = &mut self.log else { unreachable!("called for the image's journal") };
        while let Some(front) = self.staged.front_mut().filter(|s| s.number <= number) {
            if !front.copies.is_empty() {
                let before = journal.bytes_written;
                journal.commit(&front.copies)?;
                data_owed = false;
                Stats::bump(&self.stats.log_commits);
                Stats::add(&self.stats.log_commit_bytes, journal.bytes_written - before);
                Stats::add(&self.stats.log_records, front.copies.len() as u64);
            } else if !front.fast.is_empty() {
                let before = journal.fast_bytes_written;
                journal.fast_commit(&front.fast, data_owed)?;
                data_owed = false;
                Stats::bump(&self.stats.fast_commits);
                Stats::add(&self.stats.log_commit_bytes, journal.fast_bytes_written - before);
                Stats::add(&self.stats.log_records, front.fast.len() as u64);
            }
            self.durable = front.number;
            self.staged.pop_front();
        }
        if data_owed {
            (self.image_sync)().map_err(|source| Error::Io { context: "fdatasync of the image".into(), source })?;
        }
        Ok(())
    }

    /// Makes every staged commit durable.
    pub(crate) fn flush_all(&mut self) -> Result<(), Error> {
        match self.staged.back() {
            Some(last) => self.flush_through(last.number),
            None => Ok(()),
        }
    }
}

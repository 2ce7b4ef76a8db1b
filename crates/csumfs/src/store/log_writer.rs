//! The ByteLog's appends, made outside the volume's lock: a sync encodes
//! its commit under the lock (the bytes it carries are copied then) and
//! stages it here; the flushes — the image file's `fdatasync` for data
//! written in place, then the records — happen after the lock is let go,
//! so other operations go on meanwhile and the `fsync`s they send queue
//! for the next commit (group commit, `txn/group_sync.rs`). Commits are
//! appended in the order they were staged, one at a time.

use crate::error::Error;
use crate::stats::Stats;
use crate::store::medium::{AnyMedium, SyncHandle, TAG_LAST, TAG_PART};
use csumkit::bytelog::ByteLog;
use std::collections::VecDeque;
use std::sync::Arc;

/// A commit encoded and waiting to be appended.
struct Staged {
    number: u64,
    records: Vec<Vec<u8>>,
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
    pub(crate) log: ByteLog<AnyMedium>,
    staged: VecDeque<Staged>,
    image_sync: SyncHandle,
    /// Commits durable so far, by number (the first staged is 1).
    durable: u64,
    stats: Arc<Stats>,
}

impl Writer {
    pub(crate) fn new(log: ByteLog<AnyMedium>, image_sync: SyncHandle, stats: Arc<Stats>) -> Writer {
        Writer { log, staged: VecDeque::new(), image_sync, durable: 0, stats }
    }

    /// Bytes free in the log once the staged commits are in it.
    pub(crate) fn free_bytes(&self) -> u64 {
        let staged: u64 = self
            .staged
            .iter()
            .flat_map(|s| &s.records[s.appended..])
            .map(|r| csumkit::bytelog::record_span(r.len()))
            .sum();
        self.log.free_bytes().saturating_sub(staged)
    }

    /// Queues commit `number` (one more than the last): `records` (none
    /// for a sync with only data to make durable).
    pub(crate) fn stage(&mut self, number: u64, records: Vec<Vec<u8>>, data_first: bool, datasums: u64) {
        let last = self.staged.back().map_or(self.durable, |s| s.number);
        assert_eq!(number, last + 1, "commits are staged in order");
        self.staged.push_back(Staged { number, records, appended: 0, data_first, datasums });
    }

    /// Makes every staged commit up to `number` durable: one image sync
    /// for the data they all need first, then their records in order
    /// (each made durable by its append).
    pub(crate) fn flush_through(&mut self, number: u64) -> Result<(), Error> {
        if self.durable >= number {
            return Ok(());
        }
        if self.staged.iter().take_while(|s| s.number <= number).any(|s| s.data_first) {
            (self.image_sync)().map_err(|source| Error::Io { context: "fdatasync of the image".into(), source })?;
            // Every staged commit's data was written before it was staged.
            self.staged.iter_mut().for_each(|s| s.data_first = false);
        }
        while let Some(front) = self.staged.front_mut().filter(|s| s.number <= number) {
            let before = self.log.stats().bytes_persisted;
            let last = front.records.len().wrapping_sub(1);
            while front.appended < front.records.len() {
                let tag = if front.appended == last { TAG_LAST } else { TAG_PART };
                self.log.append(tag, 0, &front.records[front.appended])?;
                front.appended += 1;
            }
            if !front.records.is_empty() {
                Stats::bump(&self.stats.log_commits);
                Stats::add(&self.stats.log_commit_bytes, self.log.stats().bytes_persisted - before);
                Stats::add(&self.stats.log_records, front.records.len() as u64);
                Stats::add(&self.stats.log_datasums, front.datasums);
            }
            self.durable = front.number;
            self.staged.pop_front();
        }
        assert!(self.durable >= number, "commit {number} was staged");
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

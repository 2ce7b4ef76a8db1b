//! Counters of what the volume did, for `--stats` and the benches.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters, updated with relaxed atomics (they are reports, not locks).
#[derive(Debug, Default)]
pub struct Stats {
    /// Metadata checksum updates moved by `flip_range`/`splice`.
    pub csum_incremental: AtomicU64,
    /// Metadata checksums recomputed over all their bytes (`csum=full`;
    /// group descriptors, which keep 16 bits of their CRC; a bitmap whose
    /// descriptor keeps 16 bits).
    pub csum_full: AtomicU64,
    /// Data blocks checksummed as they were written.
    pub data_checksummed: AtomicU64,
    /// Of those, blocks checksummed on a second thread while their write
    /// was under way (the async checksums' overlap).
    pub data_overlapped: AtomicU64,
    /// Of those, blocks written in part whose checksum was spliced from
    /// their old one and the bytes changed.
    pub data_spliced: AtomicU64,
    /// Checksum-tree commits.
    pub datasum_commits: AtomicU64,
    /// Of those, commits made instead of logging a commit's many new
    /// checksums (a large write): the tree goes to the sidecar ahead of
    /// the log's commit.
    pub datasum_commits_for_log: AtomicU64,
    /// Bytes those commits wrote (nodes and superblock).
    pub datasum_commit_bytes: AtomicU64,
    /// `fdatasync`s of the sidecar's intent list, each before an in-place
    /// write over blocks whose checksums may be durable.
    pub datasum_intent_flushes: AtomicU64,
    /// `getxattr` calls the in-memory name filter answered "absent" without
    /// reading any xattr.
    pub filter_hits: AtomicU64,
    /// `getxattr` calls that searched the xattrs.
    pub xattr_searches: AtomicU64,
    /// External xattr blocks read.
    pub xattr_block_reads: AtomicU64,
    /// Data blocks verified against their checksum on read.
    pub data_verified: AtomicU64,
    /// Data blocks whose checksum did not match (each an `EIO`).
    pub data_mismatches: AtomicU64,
    /// ByteLog commits of metadata.
    pub log_commits: AtomicU64,
    /// Fast commits (the kernel's format) among them, into the image
    /// journal's fast-commit area…
    pub fast_commits: AtomicU64,
    /// …and syncs that could have been one but were full commits (a change
    /// fast commits cannot describe, a full fast-commit area).
    pub fast_commit_fallbacks: AtomicU64,
    /// Records those commits appended.
    pub log_records: AtomicU64,
    /// Data checksum changes those commits carried.
    pub log_datasums: AtomicU64,
    /// Bytes those commits made durable (whole 64-byte lines).
    pub log_commit_bytes: AtomicU64,
    /// `fsync`s through the mount, and the syncs that answered them
    /// (concurrent ones share a sync: group commit).
    pub fsync_requests: AtomicU64,
    /// See [`fsync_requests`](Self::fsync_requests).
    pub fsync_syncs: AtomicU64,
    /// Changes made durable before they were answered — to inodes marked
    /// `chattr +S` (a directory's `+D`), or all with `-o sync` — counted
    /// among the fsyncs too.
    pub synchronous_changes: AtomicU64,
    /// Checkpoints (the image file brought up to the log, the log emptied).
    pub log_checkpoints: AtomicU64,
    /// Of those, checkpoints made to give a commit room (its records would
    /// not fit the log's free room): folded from the log's own records,
    /// the commit under way left pending until the log is empty.
    pub log_folds: AtomicU64,
    /// Commits too large for even an empty log, logged in a log grown for
    /// them (`redo/resize.rs`)…
    pub log_grows: AtomicU64,
    /// …or, where the log cannot grow, written through to the image
    /// instead (not atomic).
    pub log_write_through: AtomicU64,
    /// File data blocks whose PI the device checked on read.
    pub pi_blocks_verified: AtomicU64,
    /// File data blocks read unchecked on a PI device (never written
    /// through it: escape PI; or the ByteLog held newer bytes for their
    /// page than the image file).
    pub pi_blocks_unchecked: AtomicU64,
    /// File data blocks whose PI did not match (each an `EIO`).
    pub pi_mismatches: AtomicU64,
    /// File data blocks written through the PI device with `log=off` (with
    /// the ByteLog, the device's own count says what reached it).
    pub pi_blocks_written: AtomicU64,
}

impl Stats {
    /// One line per component, for `csumkit mount --stats`; `pi`: the PI
    /// device's counters when the volume is on one; `log_on`: where the
    /// ByteLog lives ([`crate::Volume::log_on`]), `None` without one;
    /// `private_copy`: [`crate::Volume::private_copy_bytes`].
    pub fn report(
        &self,
        pi: Option<csumkit::pi::DeviceStats>,
        log_on: Option<&str>,
        private_copy: Option<u64>,
    ) -> String {
        let g = Stats::get;
        format!(
            "metadata checksums: {} updated incrementally (flip_range, splice), {} recomputed in full\n\
             log: {}: {} metadata commits ({} of them fast commits, {} syncs fell back to full ones) of {} records or logged blocks, {} bytes persisted ({} per commit), \
             {} fsyncs ({} of them synchronous changes: chattr +S/+D, -o sync/dirsync) answered by {} syncs (group commit), {} checkpoints ({} of them to give a commit room), {} commits too large for the log logged in a log grown for them and {} written through, {} KiB of the image held in memory until the next checkpoint\n\
             data checksums: {} blocks checksummed on write ({} while their write was under way, {} written in part and spliced), \
             {} verified on read, {} mismatches (EIO), {} carried by ByteLog commits, {} tree commits ({} of them in place of logging a large write's checksums) writing {} bytes, \
             {} flushes of the list of blocks whose new checksums are durable ahead of their data\n\
             xattr name filter: {} absent-name lookups answered from the filter, {} searched the xattrs \
             ({} xattr block reads)\n\
             PI offload: {}\n",
            g(&self.csum_incremental),
            g(&self.csum_full),
            log_on.unwrap_or("none (off: metadata written in place)"),
            g(&self.log_commits) + g(&self.fast_commits),
            g(&self.fast_commits),
            g(&self.fast_commit_fallbacks),
            g(&self.log_records),
            g(&self.log_commit_bytes),
            g(&self.log_commit_bytes).checked_div(g(&self.log_commits) + g(&self.fast_commits)).unwrap_or(0),
            g(&self.fsync_requests),
            g(&self.synchronous_changes),
            g(&self.fsync_syncs),
            g(&self.log_checkpoints),
            g(&self.log_folds),
            g(&self.log_grows),
            g(&self.log_write_through),
            private_copy.map_or("no".to_string(), |bytes| (bytes / 1024).to_string()),
            g(&self.data_checksummed),
            g(&self.data_overlapped),
            g(&self.data_spliced),
            g(&self.data_verified),
            g(&self.data_mismatches),
            g(&self.log_datasums),
            g(&self.datasum_commits),
            g(&self.datasum_commits_for_log),
            g(&self.datasum_commit_bytes),
            g(&self.datasum_intent_flushes),
            g(&self.filter_hits),
            g(&self.xattr_searches),
            g(&self.xattr_block_reads),
            match pi {
                None => "off (no PI device: -o pi)".to_string(),
                Some(d) => format!(
                    "{} data blocks checked by the device on read, {} read unchecked, {} mismatches (EIO); \
                     device: {} write commands, {} data bytes, {} bytes stored with PI, no checksum tree",
                    g(&self.pi_blocks_verified),
                    g(&self.pi_blocks_unchecked),
                    g(&self.pi_mismatches),
                    d.write_commands,
                    d.data_bytes_written,
                    d.medium_bytes_written
                ),
            },
        )
    }

    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

//! Counters of what the volume did, for `--stats` and the benches.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters, updated with relaxed atomics (they are reports, not locks).
#[derive(Debug, Default)]
pub struct Stats {
    /// `getxattr` calls the in-memory name filter answered "absent" without
    /// reading any xattr (seed 003).
    pub filter_hits: AtomicU64,
    /// `getxattr` calls that searched the xattrs.
    pub xattr_searches: AtomicU64,
    /// External xattr blocks read.
    pub xattr_block_reads: AtomicU64,
    /// Data blocks verified against their checksum on read (seed 002).
    pub data_verified: AtomicU64,
    /// Data blocks whose checksum did not match (each an `EIO`).
    pub data_mismatches: AtomicU64,
}

impl Stats {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

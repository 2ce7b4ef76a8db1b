//! The errno a FUSE reply carries for a volume error, and the damage worth
//! a line on stderr (bounded: a damaged file read over and over must not
//! flood the log).

use crate::error::Error;
use fuser::Errno;
use std::sync::atomic::{AtomicU64, Ordering};

/// Damaged data blocks named on stderr at most, per daemon.
const DAMAGE_LINES: u64 = 100;

pub(super) fn errno(e: &Error) -> Errno {
    // Damage, and what csumfs cannot do yet, are worth a line; the
    // errors of ordinary calls (ENOENT, EEXIST, …) are not.
    if matches!(e, Error::Checksum { .. } | Error::Corrupt { .. } | Error::Format(_) | Error::Unsupported { .. }) {
        eprintln!("csumfs: {e}");
    }
    // A damaged data block is named, as btrfs names it ("csum failed"),
    // up to a bound: a damaged file read over and over must not flood
    // the log (`--stats` counts them all, `scrub` lists them).
    if matches!(e, Error::DataChecksum { .. } | Error::DataPi { .. }) {
        static NAMED: AtomicU64 = AtomicU64::new(0);
        match NAMED.fetch_add(1, Ordering::Relaxed) {
            n if n < DAMAGE_LINES => eprintln!("csumfs: {e}"),
            DAMAGE_LINES => eprintln!(
                "csumfs: further damaged data blocks are not named here (csumkit mount --stats counts them, \
                 csumkit scrub lists them)"
            ),
            _ => {}
        }
    }
    Errno::from_i32(e.errno())
}

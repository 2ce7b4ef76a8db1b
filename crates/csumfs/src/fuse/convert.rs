//! Between FUSE's terms and the volume's: inode numbers (FUSE's root is 1,
//! ext4's 2; the two are swapped and every other number passes through),
//! times, and file types.

use crate::format::inode::Timespec;
use crate::inode::table::ROOT;
use fuser::{FileType, INodeNo, TimeOrNow};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub(super) fn to_fuse(ino: u32) -> INodeNo {
    INodeNo(if ino == ROOT { 1 } else { u64::from(ino) })
}

pub(super) fn from_fuse(ino: INodeNo) -> u32 {
    if ino.0 == 1 {
        ROOT
    } else {
        u32::try_from(ino.0).unwrap_or(0)
    }
}

pub(super) fn system_time(t: Timespec) -> SystemTime {
    if t.sec >= 0 {
        UNIX_EPOCH + Duration::new(t.sec as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.sec.unsigned_abs()) + Duration::from_nanos(u64::from(t.nsec))
    }
}

/// A time the kernel sent, as fuser 0.18 hands it over. The kernel sends
/// seconds and nanoseconds (floored: -0.25 s is -1 s + 750 ms); fuser turns
/// negative seconds into the epoch minus seconds *and* nanoseconds (its
/// `system_time_from_time`, marked TODO there), so the pair is read back
/// the way fuser wrote it — not as the instant it names. The mount's
/// syscall test holds this against the kernel's ext4 (times before 1970).
pub(super) fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() },
        Err(before) => Timespec { sec: -(before.duration().as_secs() as i64), nsec: before.duration().subsec_nanos() },
    }
}

pub(super) fn time_or_now(t: TimeOrNow) -> Timespec {
    match t {
        TimeOrNow::SpecificTime(t) => timespec(t),
        TimeOrNow::Now => timespec(SystemTime::now()),
    }
}

pub(super) fn kind(mode: u16) -> FileType {
    match mode & 0o170_000 {
        0o040_000 => FileType::Directory,
        0o120_000 => FileType::Symlink,
        0o020_000 => FileType::CharDevice,
        0o060_000 => FileType::BlockDevice,
        0o010_000 => FileType::NamedPipe,
        0o140_000 => FileType::Socket,
        _ => FileType::RegularFile,
    }
}

pub(super) fn kind_of_entry(file_type: u8) -> FileType {
    match file_type {
        2 => FileType::Directory,
        3 => FileType::CharDevice,
        4 => FileType::BlockDevice,
        5 => FileType::NamedPipe,
        6 => FileType::Socket,
        7 => FileType::Symlink,
        _ => FileType::RegularFile,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_roots_swap_and_every_other_number_passes_through() {
        assert_eq!(to_fuse(ROOT), INodeNo(1));
        assert_eq!(from_fuse(INodeNo(1)), ROOT);
        for ino in [3u32, 11, 12, u32::MAX] {
            assert_eq!(from_fuse(to_fuse(ino)), ino);
        }
        assert_eq!(from_fuse(INodeNo(u64::from(u32::MAX) + 1)), 0, "past ext4's numbers: no inode");
    }

    /// Times after the epoch, and whole seconds before it, round-trip; a
    /// time before it with nanoseconds is read back as fuser encodes the
    /// kernel's pair (the epoch less seconds *and* nanoseconds).
    #[test]
    fn times_round_trip_and_read_fusers_pairs_before_the_epoch() {
        for (sec, nsec) in [(0i64, 0u32), (1_764_000_000, 999_999_999), (-1, 0), (-(1 << 31), 0)] {
            let t = Timespec { sec, nsec };
            assert_eq!(timespec(system_time(t)), t, "{sec} s {nsec} ns");
        }
        let fusers = UNIX_EPOCH - Duration::new(1, 250_000_000);
        assert_eq!(timespec(fusers), Timespec { sec: -1, nsec: 250_000_000 });
        assert_eq!(time_or_now(TimeOrNow::SpecificTime(fusers)), Timespec { sec: -1, nsec: 250_000_000 });
    }
}

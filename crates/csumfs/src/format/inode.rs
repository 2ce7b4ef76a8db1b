//! Inode fields as csumfs reads and writes them: how far the extra fields
//! reach (`i_extra_isize`) and the timestamp encoding with its epoch bits
//! and nanoseconds (`ext4_encode_extra_time`).

use csumkit::ext4::fields::I_EXTRA_ISIZE;
use csumkit::le::{le16, put32};

/// Seconds and nanoseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timespec {
    /// Seconds since the epoch (ext4's 34-bit range with the extra field).
    pub sec: i64,
    /// Nanoseconds.
    pub nsec: u32,
}

/// Where the extra time fields of `raw` end: 128 + `i_extra_isize`, an
/// `i_extra_isize` of 0 in a large inode counting as the 32 bytes of
/// today's fields — `ext4_iget` reads such an inode as if it were 32 (and
/// writes it back so). Each field is there only if it fits
/// (`EXT4_FITS_IN_INODE`).
pub(crate) fn extra_fields_end(raw: &[u8]) -> usize {
    if raw.len() <= 128 {
        return 128;
    }
    match usize::from(le16(raw, I_EXTRA_ISIZE)) {
        0 => 160, // 128 + the 32 bytes of today's fields
        n => 128 + n,
    }
}

/// Seconds since the epoch now, and the inode encoding of a time.
pub(crate) fn now() -> Timespec {
    let d = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    Timespec { sec: d.as_secs() as i64, nsec: d.subsec_nanos() }
}

/// Writes a time into raw inode `r`: its seconds at `base`, its extra
/// field (epoch bits, nanoseconds) at `extra_at` only where the inode has
/// that field — as the kernel's `EXT4_INODE_SET_XTIME` — so an inode with a
/// short `i_extra_isize` keeps the in-inode xattrs that follow it.
pub(crate) fn put_time(r: &mut [u8], base: usize, extra_at: usize, (sec, extra): (u32, u32)) {
    put32(r, base, sec);
    if extra_fields_end(r) >= extra_at + 4 {
        put32(r, extra_at, extra);
    }
}

pub(crate) fn encode_time(t: Timespec) -> (u32, u32) {
    // As ext4_encode_extra_time: the epoch bits count what the signed
    // 32-bit field cannot hold (so 2^31 is -2^31 plus epoch 1).
    let epoch = ((t.sec - i64::from(t.sec as i32)) >> 32 & 3) as u32;
    (t.sec as u32, t.nsec << 2 | epoch)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ext4's extra time field against values worked by hand from the
    /// kernel's `ext4_encode_extra_time`: nanoseconds above two epoch bits
    /// that extend the signed 32-bit seconds (1901–2446).
    #[test]
    fn times_encode_as_the_kernel_encodes_them() {
        for (sec, nsec, want) in [
            (0i64, 0u32, (0u32, 0u32)),
            (1_764_000_000, 999_999_999, (1_764_000_000, 999_999_999 << 2)),
            (-1, 5, (0xFFFF_FFFF, 5 << 2)),
            (-(1 << 31), 0, (0x8000_0000, 0)),
            ((1 << 31) - 1, 1, (0x7FFF_FFFF, 1 << 2)),
            (1 << 31, 0, (0x8000_0000, 1)),
            (1 << 32, 7, (0, 7 << 2 | 1)),
            ((1 << 33) + 12, 0, (12, 2)),
            ((3 << 32) + (1 << 31) - 1, 3, (0x7FFF_FFFF, 3 << 2 | 3)),
        ] {
            assert_eq!(encode_time(Timespec { sec, nsec }), want, "{sec} s {nsec} ns");
        }
    }
}

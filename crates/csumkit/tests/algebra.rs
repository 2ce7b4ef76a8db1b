//! The incremental algebra against recomputation on real buffers, and
//! against algebraic identities beyond what fits in memory.

mod common;

use common::bytes;
use csumkit::crc::CrcError;
use csumkit::crc::FLIP_TOTAL_BITS_MAX;
use csumkit::{crc16t10dif, crc32c, crc64nvme, Backend};
use proptest::prelude::*;

/// Flips bits [off, off+len) in Linux bitmap order, one bit at a time.
fn flip_naive(buf: &mut [u8], off: u64, len: u64) {
    for i in off..off + len {
        buf[(i / 8) as usize] ^= 1 << (i % 8);
    }
}

/// Runs `$body` once per algorithm with `$e` bound to its engine on `$backend`.
macro_rules! for_each_crc {
    ($backend:expr, |$e:ident| $body:block) => {{
        {
            let $e = crc32c::Engine::new($backend).unwrap();
            $body
        }
        {
            let $e = crc64nvme::Engine::new($backend).unwrap();
            $body
        }
        {
            let $e = crc16t10dif::Engine::new($backend).unwrap();
            $body
        }
    }};
}

#[test]
fn flip_range_edge_cases_match_naive() {
    let base = bytes(3, 64);
    let total = 64 * 8;
    let cases: &[(u64, u64)] = &[
        (0, 0),
        (17, 0),
        (0, total),
        (0, 1),
        (total - 1, 1),
        (7, 1),
        (8, 1),
        (3, 4),
        (3, 5),
        (3, 13),
        (8, 8),
        (8, 16),
        (5, 500),
        (1, total - 2),
        (total - 9, 9),
    ];
    for backend in Backend::available() {
        for_each_crc!(backend, |e| {
            let crc = e.checksum(&base);
            for &(off, len) in cases {
                let mut buf = base.clone();
                flip_naive(&mut buf, off, len);
                assert_eq!(e.flip_range(crc, total, off, len).unwrap(), e.checksum(&buf), "{e:?} off {off} len {len}");
            }
        });
    }
}

#[test]
fn flip_range_errors() {
    let c = crc32c::checksum(b"abc");
    for (total, off, len) in [(23, 0, 1), (24, 0, 25), (24, 24, 1), (24, 20, 5), (24, u64::MAX, 2), (24, 1, u64::MAX)] {
        let err = crc32c::flip_range(c, total, off, len).unwrap_err();
        assert!(
            matches!(err, CrcError::TotalBitsNotWholeBytes { .. } | CrcError::BitRangeOutOfBounds { .. }),
            "{total} {off} {len}: {err}"
        );
        assert!(crc64nvme::flip_range(0, total, off, len).is_err());
        assert!(crc16t10dif::flip_range(0, total, off, len).is_err());
    }
    let too_big = FLIP_TOTAL_BITS_MAX + 8;
    assert!(matches!(crc32c::flip_range(c, too_big, 0, 1), Err(CrcError::TotalBitsTooLarge { .. })));
    assert_eq!(crc32c::flip_range(c, 24, 24, 0).unwrap(), c, "empty range at the end is fine");
    assert!(crc32c::flip_range(c, FLIP_TOTAL_BITS_MAX, FLIP_TOTAL_BITS_MAX - 1, 1).is_ok());
}

#[test]
fn splice_errors() {
    let c = crc32c::checksum(b"abcdef");
    assert!(matches!(crc32c::splice(c, 6, 0, b"ab", b"abc"), Err(CrcError::LengthMismatch { .. })));
    assert!(matches!(crc32c::splice(c, 6, 5, b"fg", b"xy"), Err(CrcError::ByteRangeOutOfBounds { .. })));
    assert!(matches!(crc32c::splice(c, 6, u64::MAX, b"f", b"x"), Err(CrcError::ByteRangeOutOfBounds { .. })));
    assert_eq!(crc32c::splice(c, 6, 6, b"", b"").unwrap(), c);
    assert_eq!(crc32c::splice(c, 6, 2, b"cd", b"XY").unwrap(), crc32c::checksum(b"abXYef"));
}

#[test]
fn largest_sizes_against_a_real_2_pow_32_bit_buffer() {
    // 512 MiB = 2^32 bits: the largest bitmap the issue names, checked on
    // the actual buffer (zero pages are cheap to allocate and read).
    let len = 1usize << 29;
    let mut buf = vec![0u8; len];
    let total = (len as u64) * 8;
    for backend in Backend::available() {
        let e = crc32c::Engine::new(backend).unwrap();
        let zeros = e.checksum(&buf);
        assert_eq!(e.zero_extend(0, len as u64), zeros, "{backend}");
        assert_eq!(e.zero_extend(e.checksum(&buf[..12345]), (len - 12345) as u64), zeros);
    }
    let crc = crc32c::checksum(&buf);
    for (off, flip) in [(total - 1, 1u64), (5, total - 77), (1 << 31, 4096 * 8 + 3)] {
        flip_naive(&mut buf, off, flip);
        for backend in Backend::available() {
            let e = crc32c::Engine::new(backend).unwrap();
            assert_eq!(e.flip_range(crc, total, off, flip).unwrap(), e.checksum(&buf), "{backend} {off} {flip}");
        }
        flip_naive(&mut buf, off, flip);
    }
    let e64 = crc64nvme::Engine::active();
    let c64 = e64.checksum(&buf);
    assert_eq!(e64.zero_extend(0, len as u64), c64);
    let mut other = buf;
    flip_naive(&mut other, 3, total - 3);
    assert_eq!(e64.flip_range(c64, total, 3, total - 3).unwrap(), e64.checksum(&other));
}

#[test]
fn combine_and_zero_extend_handle_every_u64_length() {
    // 8 * len overflows u64 above 2^61 bytes; the split path must agree with
    // composing smaller shifts.
    for backend in Backend::available() {
        for_each_crc!(backend, |e| {
            let c = e.checksum(b"seed data");
            for big in [1u64 << 61, (1 << 61) + 12345, u64::MAX, u64::MAX - 7, 3 << 62] {
                let half = big / 2;
                assert_eq!(e.zero_extend(c, big), e.zero_extend(e.zero_extend(c, half), big - half), "{e:?} {big}");
                let zeros_crc = e.zero_extend(0, big);
                assert_eq!(e.combine(c, zeros_crc, big), e.zero_extend(c, big));
            }
        });
    }
}

fn engines_agree_on(f: impl Fn(Backend) -> [u64; 3]) {
    let want = f(Backend::Portable);
    for backend in Backend::available() {
        assert_eq!(f(backend), want, "{backend} vs portable");
    }
}

proptest! {
    #![proptest_config(common::proptest_config(300))]

    #[test]
    fn combine_matches_concatenation(len in 0usize..=70_000, seed: u64, split in 0.0f64..=1.0) {
        let data = bytes(seed, len);
        let cut = ((len as f64) * split) as usize;
        let (a, b) = data.split_at(cut);
        for backend in Backend::available() {
            for_each_crc!(backend, |e| {
                prop_assert_eq!(e.combine(e.checksum(a), e.checksum(b), b.len() as u64), e.checksum(&data));
            });
        }
    }

    #[test]
    fn zero_extend_matches_appended_zeros(len in 0usize..5_000, zeros in 0usize..70_000, seed: u64) {
        let mut data = bytes(seed, len);
        let head = data.clone();
        data.resize(len + zeros, 0);
        for backend in Backend::available() {
            for_each_crc!(backend, |e| {
                prop_assert_eq!(e.zero_extend(e.checksum(&head), zeros as u64), e.checksum(&data));
            });
        }
    }

    #[test]
    fn flip_range_matches_naive(bytes_len in 1usize..=8192, seed: u64, a in 0.0f64..=1.0, b in 0.0f64..=1.0) {
        let total = bytes_len as u64 * 8;
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let off = ((total as f64) * lo) as u64;
        let len = (((total as f64) * hi) as u64).min(total) - off;
        let base = bytes(seed, bytes_len);
        let mut flipped = base.clone();
        flip_naive(&mut flipped, off, len);
        for backend in Backend::available() {
            for_each_crc!(backend, |e| {
                prop_assert_eq!(e.flip_range(e.checksum(&base), total, off, len).unwrap(), e.checksum(&flipped));
            });
        }
    }

    #[test]
    fn flip_range_identities_beyond_memory(total_bytes in 1u64..(1 << 60), seed: u64, a: u64, b: u64, k: u64, z in 0u64..(1 << 40)) {
        // Split a flip in two; flipping before or after zero-extension agrees.
        let total = total_bytes * 8;
        let (off, end) = { let (x, y) = (a % (total + 1), b % (total + 1)); (x.min(y), x.max(y)) };
        let len = end - off;
        let k = if len == 0 { 0 } else { k % len };
        for_each_crc!(Backend::active(), |e| {
            let c = e.checksum(&bytes(seed, 16));
            let whole = e.flip_range(c, total, off, len).unwrap();
            let split = e.flip_range(e.flip_range(c, total, off, k).unwrap(), total, off + k, len - k).unwrap();
            prop_assert_eq!(whole, split);
            if total + 8 * z <= FLIP_TOTAL_BITS_MAX {
                prop_assert_eq!(
                    e.flip_range(e.zero_extend(c, z), total + 8 * z, off, len).unwrap(),
                    e.zero_extend(whole, z)
                );
            }
            // Flipping twice restores the checksum.
            prop_assert_eq!(e.flip_range(whole, total, off, len).unwrap(), c);
        });
    }

    #[test]
    fn splice_matches_recompute(total in 1usize..=70_000, seed: u64, at in 0.0f64..=1.0, region in 0usize..=300) {
        let base = bytes(seed, total);
        let region = region.min(total);
        let off = (((total - region) as f64) * at) as usize;
        let new_bytes = bytes(seed ^ 0xabcdef, region);
        let mut changed = base.clone();
        changed[off..off + region].copy_from_slice(&new_bytes);
        for backend in Backend::available() {
            for_each_crc!(backend, |e| {
                let got = e.splice(e.checksum(&base), total as u64, off as u64, &base[off..off + region], &new_bytes).unwrap();
                prop_assert_eq!(got, e.checksum(&changed));
            });
        }
    }

    #[test]
    fn backends_agree_on_algebra(c1: u64, c2: u64, len: u64, t in 1u64..(1 << 40), o: u64, l: u64) {
        let total = t * 8;
        let off = o % (total + 1);
        let flip = l % (total - off + 1);
        engines_agree_on(|b| [
            crc32c::Engine::new(b).unwrap().combine(c1 as u32, c2 as u32, len) as u64,
            crc64nvme::Engine::new(b).unwrap().zero_extend(c1, len),
            crc16t10dif::Engine::new(b).unwrap().flip_range(c1 as u16, total, off, flip).unwrap() as u64,
        ]);
        engines_agree_on(|b| [
            crc32c::Engine::new(b).unwrap().flip_range(c1 as u32, total, off, flip).unwrap() as u64,
            crc64nvme::Engine::new(b).unwrap().flip_range(c1, total, off, flip).unwrap(),
            crc16t10dif::Engine::new(b).unwrap().combine(c1 as u16, c2 as u16, len) as u64,
        ]);
    }
}

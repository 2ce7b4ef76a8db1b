//! Differential: flip_range, splice and combine against recomputing the
//! checksum of the modified buffer; out-of-range inputs must be errors.
#![no_main]

use csumkit::{crc16t10dif, crc32c, crc64nvme};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: (u32, u32, Vec<u8>, Vec<u8>)| {
    let (x, y, buf, patch) = input;
    let total_bits = buf.len() as u64 * 8;
    let (off, len) = (x as u64 % (total_bits + 16), y as u64 % (total_bits + 16));
    let mut flipped = buf.clone();
    let in_range = off + len <= total_bits;
    if in_range {
        for i in off..off + len {
            flipped[(i / 8) as usize] ^= 1 << (i % 8);
        }
    }
    let r32 = crc32c::flip_range(crc32c::checksum(&buf), total_bits, off, len);
    let r64 = crc64nvme::flip_range(crc64nvme::checksum(&buf), total_bits, off, len);
    let r16 = crc16t10dif::flip_range(crc16t10dif::checksum(&buf), total_bits, off, len);
    if in_range {
        assert_eq!(r32.unwrap(), crc32c::checksum(&flipped));
        assert_eq!(r64.unwrap(), crc64nvme::checksum(&flipped));
        assert_eq!(r16.unwrap(), crc16t10dif::checksum(&flipped));
    } else {
        assert!(r32.is_err() && r64.is_err() && r16.is_err());
    }

    let at = x as usize % (buf.len() + 1);
    let n = patch.len().min(buf.len() - at);
    let mut spliced = buf.clone();
    spliced[at..at + n].copy_from_slice(&patch[..n]);
    let got = crc32c::splice(crc32c::checksum(&buf), buf.len() as u64, at as u64, &buf[at..at + n], &patch[..n]);
    assert_eq!(got.unwrap(), crc32c::checksum(&spliced));
    let (head, tail) = buf.split_at(at);
    assert_eq!(
        crc64nvme::combine(crc64nvme::checksum(head), crc64nvme::checksum(tail), tail.len() as u64),
        crc64nvme::checksum(&buf)
    );
});

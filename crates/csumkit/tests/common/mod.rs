//! Obviously-correct references shared by the integration tests.
#![allow(dead_code)]

pub mod ext4;

use csumkit::{crc16t10dif, crc32c, crc64nvme, Backend};

/// A CRC described the way the CRC catalogue does.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    pub width: u32,
    /// Generator without x^width, natural (MSB-first) order.
    pub poly: u64,
    pub reflected: bool,
    pub init: u64,
    pub xorout: u64,
}

pub const CRC32C: Params =
    Params { width: 32, poly: 0x1EDC_6F41, reflected: true, init: 0xFFFF_FFFF, xorout: 0xFFFF_FFFF };
pub const CRC64NVME: Params =
    Params { width: 64, poly: 0xAD93_D235_94C9_3659, reflected: true, init: u64::MAX, xorout: u64::MAX };
pub const CRC16T10DIF: Params = Params { width: 16, poly: 0x8BB7, reflected: false, init: 0, xorout: 0 };

fn reflect(v: u64, width: u32) -> u64 {
    v.reverse_bits() >> (64 - width)
}

/// Bit-at-a-time CRC: one message bit per step through a natural-order
/// shift register, bytes fed LSB first when the CRC is reflected.
pub fn bitwise(p: Params, data: &[u8]) -> u64 {
    let mask = if p.width == 64 { u64::MAX } else { (1u64 << p.width) - 1 };
    let mut reg = if p.reflected { reflect(p.init, p.width) } else { p.init };
    for &byte in data {
        for i in 0..8 {
            let bit = if p.reflected { (byte >> i) & 1 } else { (byte >> (7 - i)) & 1 } as u64;
            let feedback = ((reg >> (p.width - 1)) & 1) ^ bit;
            reg = (reg << 1) & mask;
            if feedback == 1 {
                reg ^= p.poly;
            }
        }
    }
    let out = if p.reflected { reflect(reg, p.width) } else { reg };
    out ^ p.xorout
}

/// Deterministic pseudo-random bytes (xorshift64*), for inputs too large for proptest.
pub fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        state ^= state >> 12;
        state ^= state << 25;
        state ^= state >> 27;
        out.extend_from_slice(&state.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// Checksum with every available backend of all three algorithms, widened to u64,
/// paired with its reference parameters.
pub fn all_engines(data: &[u8]) -> Vec<(String, Params, u64)> {
    let mut out = Vec::new();
    for backend in Backend::available() {
        out.push((format!("crc32c/{backend}"), CRC32C, crc32c::Engine::new(backend).unwrap().checksum(data) as u64));
        out.push((format!("crc64nvme/{backend}"), CRC64NVME, crc64nvme::Engine::new(backend).unwrap().checksum(data)));
        out.push((
            format!("crc16t10dif/{backend}"),
            CRC16T10DIF,
            crc16t10dif::Engine::new(backend).unwrap().checksum(data) as u64,
        ));
    }
    out
}

/// `cases` proptest cases, or `PROPTEST_CASES` when set (CI lowers it for
/// the emulated aarch64 run, where every instruction is slow).
pub fn proptest_config(cases: u32) -> proptest::test_runner::Config {
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    proptest::test_runner::Config::with_cases(cases)
}

/// Checksum-tree nodes kept in memory (a test double of the medium).
#[derive(Default)]
pub struct MemoryNodes(pub std::collections::HashMap<u64, [u8; csumkit::csum_tree::NODE_BYTES]>);

impl csumkit::csum_tree::NodeStore for MemoryNodes {
    fn write(&mut self, location: u64, node: &[u8; csumkit::csum_tree::NODE_BYTES]) -> Result<(), csumkit::Error> {
        self.0.insert(location, *node);
        Ok(())
    }

    fn read(&mut self, location: u64, node: &mut [u8; csumkit::csum_tree::NODE_BYTES]) -> Result<(), csumkit::Error> {
        // Never written reads as zeros, as on a fresh device.
        *node = self.0.get(&location).copied().unwrap_or([0; csumkit::csum_tree::NODE_BYTES]);
        Ok(())
    }
}

/// Says that the running test skipped itself because `what` is missing, in
/// the normal `cargo test` output: libtest captures `print!`/`eprint!`, not
/// writes to the stderr handle. With `CI` set a missing tool is a failure.
pub fn skip(what: &str, install: &str) {
    use std::io::Write;
    assert!(std::env::var_os("CI").is_none(), "{what} is required in CI ({install})");
    let test = std::thread::current().name().unwrap_or("a test").to_string();
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {what} not found ({install})");
}

//! Every engine (portable and each hardware backend) against the bitwise
//! reference, published check values and the peer crates.

mod common;

use common::{all_engines, bitwise, bytes, CRC16T10DIF, CRC32C, CRC64NVME};
use csumkit::{crc16t10dif, crc32c, crc64nvme, Backend};
use proptest::prelude::*;

#[test]
fn published_check_values() {
    for backend in Backend::available() {
        assert_eq!(crc32c::Engine::new(backend).unwrap().checksum(b"123456789"), 0xE306_9283, "{backend}");
        assert_eq!(crc64nvme::Engine::new(backend).unwrap().checksum(b"123456789"), 0xAE8B_1486_0A79_9888, "{backend}");
        assert_eq!(crc16t10dif::Engine::new(backend).unwrap().checksum(b"123456789"), 0xD0DB, "{backend}");
    }
    assert_eq!(crc32c::spec().check, 0xE306_9283);
    assert_eq!(bitwise(CRC32C, b"123456789"), 0xE306_9283);
    assert_eq!(bitwise(CRC64NVME, b"123456789"), 0xAE8B_1486_0A79_9888);
    assert_eq!(bitwise(CRC16T10DIF, b"123456789"), 0xD0DB);
}

#[test]
fn empty_input_is_the_empty_checksum() {
    assert_eq!(crc32c::checksum(b""), 0);
    assert_eq!(crc64nvme::checksum(b""), 0);
    assert_eq!(crc16t10dif::checksum(b""), 0);
}

#[test]
fn every_length_up_to_1100_on_every_engine() {
    // Covers each kernel's thresholds (16, 32, 64, 256 bytes), every tail
    // length and the 4-accumulator loop boundaries.
    let data = bytes(7, 1100);
    for len in 0..=data.len() {
        for (name, params, got) in all_engines(&data[..len]) {
            assert_eq!(got, bitwise(params, &data[..len]), "{name} len {len}");
        }
    }
}

#[test]
fn every_length_around_the_crc32c_hybrid_threshold() {
    // The x86 128-bit engine switches CRC32C to folding + `crc32` streams at
    // 4 KiB, with an 80-byte step: every step phase and tail length, on
    // either side of the switch and a few steps on, with an odd start.
    let data = bytes(13, 8194);
    for len in (4096 - 200..=4096 + 3 * 80).chain([8191, 8192, 8193]) {
        let slice = &data[1..=len];
        for (name, params, got) in all_engines(slice) {
            assert_eq!(got, bitwise(params, slice), "{name} len {}", slice.len());
        }
    }
}

#[test]
fn misaligned_slices_ending_at_the_allocation_end() {
    let data = bytes(11, 4096 + 64);
    for start in 0..64 {
        let slice = &data[start..];
        for (name, params, got) in all_engines(slice) {
            assert_eq!(got, bitwise(params, slice), "{name} start {start}");
        }
        let boxed: Box<[u8]> = data[start..start + 777].into();
        for (name, params, got) in all_engines(&boxed) {
            assert_eq!(got, bitwise(params, &boxed), "{name} boxed start {start}");
        }
    }
}

/// The AVX-512 engine's own seams at odd starts: every length and step
/// phase around the CRC32C hybrid's lower bound (8 KiB, 328-byte steps),
/// lengths around its upper bound (2 MiB), and every partial last chunk of
/// the vector tail. `build.rs` marks it ignored, with the reason, on hosts
/// without AVX-512 (the `every_length` and proptest suites cover every
/// available backend on every host).
#[test]
#[cfg_attr(
    not(csumkit_avx512_host),
    ignore = "no AVX-512F/VL/BW + VPCLMULQDQ on this CPU: x86_64-vpclmul-avx512 cannot run here"
)]
fn avx512_engine_around_its_thresholds() {
    assert!(
        Backend::X86VpclmulAvx512.is_available(),
        "build.rs saw AVX-512 on the build host, but this CPU lacks it (built elsewhere? `cargo clean -p csumkit`)"
    );
    let b = Backend::X86VpclmulAvx512;
    let (e32, e64, e16) =
        (crc32c::Engine::new(b).unwrap(), crc64nvme::Engine::new(b).unwrap(), crc16t10dif::Engine::new(b).unwrap());
    let check = |slice: &[u8]| {
        assert_eq!(e32.checksum(slice) as u64, bitwise(CRC32C, slice), "crc32c len {}", slice.len());
        assert_eq!(e64.checksum(slice), bitwise(CRC64NVME, slice), "crc64nvme len {}", slice.len());
        assert_eq!(e16.checksum(slice) as u64, bitwise(CRC16T10DIF, slice), "crc16t10dif len {}", slice.len());
    };
    let data = bytes(17, (2 << 20) + 64);
    for len in (8192 - 400..=8192 + 3 * 328).step_by(1) {
        check(&data[3..3 + len]);
    }
    for len in [(2 << 20) - 17, (2 << 20) - 1, 2 << 20, (2 << 20) + 1, (2 << 20) + 33] {
        check(&data[1..1 + len]);
    }
    for len in (64..64 + 16).chain(256..256 + 16).chain(4096..4096 + 16) {
        check(&data[5..5 + len]);
    }
}

#[test]
fn multi_mebibyte_inputs() {
    for (seed, len) in [(1u64, 1 << 20), (2, (3 << 20) + 13), (3, (8 << 20) - 1)] {
        let data = bytes(seed, len);
        let want32 = bitwise(CRC32C, &data);
        let want64 = bitwise(CRC64NVME, &data);
        let want16 = bitwise(CRC16T10DIF, &data);
        for (name, _, got) in all_engines(&data) {
            let want = match name.split('/').next().unwrap() {
                "crc32c" => want32,
                "crc64nvme" => want64,
                _ => want16,
            };
            assert_eq!(got, want, "{name} len {len}");
        }
    }
}

#[test]
fn agrees_with_peer_crates() {
    for len in [0usize, 1, 15, 16, 63, 64, 255, 256, 4096, 65_537, 1 << 20] {
        let data = bytes(len as u64, len);
        assert_eq!(crc32c::checksum(&data), ::crc32c::crc32c(&data), "crc32c crate, len {len}");
        assert_eq!(
            crc32c::checksum(&data) as u64,
            crc_fast::checksum(crc_fast::CrcAlgorithm::Crc32Iscsi, &data),
            "crc-fast crc32c, len {len}"
        );
        assert_eq!(
            crc64nvme::checksum(&data),
            crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &data),
            "crc-fast crc64nvme, len {len}"
        );
        assert_eq!(
            crc16t10dif::checksum(&data) as u64,
            crc_fast::checksum(crc_fast::CrcAlgorithm::Crc16T10Dif, &data),
            "crc-fast crc16t10dif, len {len}"
        );
    }
}

#[test]
fn raw_update_is_the_bare_register() {
    // ext4 stores crc32c_le(seed, data): raw register, no final inversion.
    let data = bytes(5, 1000);
    let seed = 0x1234_5678u32;
    assert_eq!(crc32c::raw_update(seed, &data), !crc32c::update(!seed, &data));
    assert_eq!(crc32c::raw_update(!0, &data), !crc32c::checksum(&data));
    assert_eq!(crc16t10dif::raw_update(0, &data), crc16t10dif::checksum(&data));
}

#[test]
fn digest_is_a_writer_and_a_hasher() {
    use std::hash::Hasher;
    use std::io::Write;
    let data = bytes(9, 10_000);
    let mut d = crc64nvme::Digest::new();
    d.write_all(&data[..3333]).unwrap();
    Hasher::write(&mut d, &data[3333..]);
    assert_eq!(d.finalize(), crc64nvme::checksum(&data));
    assert_eq!(d.finish(), crc64nvme::checksum(&data));
    assert_eq!(d.len(), 10_000);
    d.reset();
    assert!(d.is_empty());
    assert_eq!(d.finalize(), 0);
}

#[test]
fn unknown_and_unavailable_backends_are_errors() {
    assert!(matches!(Backend::from_name("avx9000"), Err(csumkit::crc::CrcError::UnknownBackend { .. })));
    assert_eq!(Backend::from_name("portable").unwrap(), Backend::Portable);
    for b in Backend::ALL {
        assert_eq!(Backend::from_name(b.name()).unwrap(), b);
        assert_eq!(crc32c::Engine::new(b).is_ok(), b.is_available());
    }
}

proptest! {
    #![proptest_config(common::proptest_config(256))]

    #[test]
    fn random_data_matches_bitwise(len in 0usize..=70_000, seed: u64, start in 0usize..32) {
        let data = bytes(seed, len + start);
        let slice = &data[start..];
        for (name, params, got) in all_engines(slice) {
            prop_assert_eq!(got, bitwise(params, slice), "{}", name);
        }
    }

    #[test]
    fn streaming_splits_match_one_shot(len in 0usize..=20_000, seed: u64, cuts in proptest::collection::vec(0usize..20_000, 0..6)) {
        let data = bytes(seed, len);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(len)).collect();
        cuts.sort_unstable();
        for backend in Backend::available() {
            let engine = crc32c::Engine::new(backend).unwrap();
            let mut digest = engine.digest();
            let mut crc = 0;
            let mut prev = 0;
            for &cut in cuts.iter().chain(std::iter::once(&len)) {
                digest.update(&data[prev..cut]);
                crc = engine.update(crc, &data[prev..cut]);
                prev = cut;
            }
            prop_assert_eq!(digest.finalize(), engine.checksum(&data));
            prop_assert_eq!(crc, engine.checksum(&data));
            let e64 = crc64nvme::Engine::new(backend).unwrap();
            let e16 = crc16t10dif::Engine::new(backend).unwrap();
            let mid = cuts.first().copied().unwrap_or(0);
            prop_assert_eq!(e64.update(e64.checksum(&data[..mid]), &data[mid..]), e64.checksum(&data));
            prop_assert_eq!(e16.update(e16.checksum(&data[..mid]), &data[mid..]), e16.checksum(&data));
        }
    }
}

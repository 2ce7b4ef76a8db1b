//! Protection information: spec vectors, every layout against a bit-at-a-time
//! reference, every mutation with its verdict, remapping, the emulated
//! device with injected faults, and the checksum tree it is compared with.

mod common;

use common::{bitwise, bytes, proptest_config, MemoryNodes, CRC16T10DIF, CRC32C, CRC64NVME};
use csumkit::csum_tree::{ChecksumTree, NodeStore, NODE_BYTES};
use csumkit::pi::{
    self, Checks, Device, Fault, GuardSize, Io, LbaFormat, Order, PiField, PiFormat, PiLocation, PiType, Protection,
    Tags,
};
use csumkit::Error;
use proptest::prelude::*;
use std::collections::HashMap;
use std::path::PathBuf;

fn protection(guard: GuardSize, pi_type: PiType, sts: u32, lba: &str, location: PiLocation) -> Protection {
    Protection::new(PiFormat::new(guard, pi_type, sts).unwrap(), lba.parse().unwrap(), location).unwrap()
}

/// The four 4 KiB patterns of the NVM Command Set's guard test cases.
fn spec_patterns() -> [(&'static str, Vec<u8>); 4] {
    [
        ("zeros", vec![0u8; 4096]),
        ("ones", vec![0xFFu8; 4096]),
        ("incrementing", (0..4096).map(|i| i as u8).collect()),
        ("decrementing", (0..4096).map(|i| 255 - i as u8).collect()),
    ]
}

fn guard_after_generate(guard: GuardSize, data: &[u8]) -> u64 {
    let p = protection(guard, PiType::Type1, guard.storage_tag_bits_range().0, "4096+16", PiLocation::First);
    let mut block = data.to_vec();
    block.resize(4096 + 16, 0);
    pi::generate(&p, &mut block, &Tags::for_lba(0)).unwrap();
    p.format().decode(&block[4096..4096 + guard.tuple_bytes()]).guard
}

#[test]
fn nvme_spec_guard_vectors_32b_and_64b() {
    // NVM Command Set 1.0, "32b CRC Test Cases" and "64b CRC Test Cases" (4 KiB blocks).
    let expected_32 = [0x98F9_4189u64, 0x25C1_FE13, 0x9C71_FE32, 0x2149_41A8];
    let expected_64 = [0x6482_D367_EB22_B64Eu64, 0xC0DD_BA73_02EC_A3AC, 0x3E72_9F5F_6750_449C, 0x9A2D_F64B_8E9E_517E];
    for (i, (name, data)) in spec_patterns().iter().enumerate() {
        assert_eq!(guard_after_generate(GuardSize::Crc32, data), expected_32[i], "32b guard, {name}");
        assert_eq!(guard_after_generate(GuardSize::Crc64, data), expected_64[i], "64b guard, {name}");
    }
}

#[test]
fn guard_16b_on_spec_patterns_matches_two_independent_implementations() {
    // The 16b table is not in the material available here; the same four
    // patterns are checked against a bit-at-a-time CRC and crc-fast.
    for (name, data) in spec_patterns() {
        let ours = guard_after_generate(GuardSize::Crc16, &data);
        assert_eq!(ours, bitwise(CRC16T10DIF, &data), "{name}");
        assert_eq!(ours, crc_fast::checksum(crc_fast::CrcAlgorithm::Crc16T10Dif, &data), "{name}");
    }
    assert_eq!(guard_after_generate(GuardSize::Crc16, &[0u8; 4096]), 0, "a zero block has a zero 16b guard");
}

fn reference_params(guard: GuardSize) -> common::Params {
    match guard {
        GuardSize::Crc16 => CRC16T10DIF,
        GuardSize::Crc32 => CRC32C,
        GuardSize::Crc64 => CRC64NVME,
    }
}

/// The tuple bytes a block must carry, built field by field from the spec's
/// layout with a bit-at-a-time CRC, independently of the library's encoder.
fn reference_tuple(p: &Protection, data: &[u8], metadata: &[u8], tags: &Tags, block: u64) -> Vec<u8> {
    let f = p.format();
    let mut covered = data.to_vec();
    covered.extend_from_slice(&metadata[..p.guarded_metadata_bytes()]);
    let guard = bitwise(reference_params(f.guard()), &covered);
    let ref_tag = match f.pi_type() {
        PiType::Type3 => tags.ref_tag,
        _ => (tags.ref_tag + block) & f.ref_tag_mask(),
    };
    let guard_bytes = f.guard().bits() as usize / 8;
    let mut out = guard.to_be_bytes()[8 - guard_bytes..].to_vec();
    out.extend_from_slice(&tags.app_tag.to_be_bytes());
    let space_bits = f.guard().space_bits() as usize;
    for byte in 0..space_bits / 8 {
        let mut value = 0u8;
        for bit in 0..8 {
            let index_from_msb = byte * 8 + bit;
            let lsb_index = space_bits - 1 - index_from_msb;
            let ref_bits = f.ref_tag_bits() as usize;
            let set = if lsb_index < ref_bits {
                ref_tag >> lsb_index & 1
            } else {
                tags.storage_tag >> (lsb_index - ref_bits) & 1
            };
            value |= (set as u8) << (7 - bit);
        }
        out.push(value);
    }
    out
}

fn any_protection() -> impl Strategy<Value = Protection> {
    (
        prop::sample::select(GuardSize::ALL.to_vec()),
        prop::sample::select(vec![PiType::Type1, PiType::Type2, PiType::Type3]),
        prop::sample::select(vec![512u32, 4096]),
        prop::sample::select(vec![8u32, 16, 24, 64]),
        any::<bool>(),
        any::<u32>(),
    )
        .prop_filter_map("metadata holds the tuple", |(guard, t, data, md, first, sts_pick)| {
            let (lo, hi) = guard.storage_tag_bits_range();
            let sts = lo + sts_pick % (hi - lo + 1);
            let location = if first { PiLocation::First } else { PiLocation::Last };
            Protection::new(PiFormat::new(guard, t, sts).ok()?, LbaFormat::new(data, md).ok()?, location).ok()
        })
}

fn any_tags(p: Protection) -> impl Strategy<Value = Tags> {
    let f = p.format();
    (any::<u64>(), any::<u16>(), any::<u64>()).prop_map(move |(r, app, st)| Tags {
        ref_tag: r & f.ref_tag_mask(),
        app_tag: if app == 0xFFFF { 0 } else { app },
        app_tag_mask: 0xFFFF,
        storage_tag: st & f.storage_tag_mask(),
        storage_tag_mask: u64::MAX,
    })
}

fn interleave(p: &Protection, data: &[u8], metadata: &[u8]) -> Vec<u8> {
    let (db, md) = (p.lba().data_bytes(), p.lba().metadata_bytes());
    let mut out = Vec::new();
    for i in 0..data.len() / db {
        out.extend_from_slice(&data[i * db..][..db]);
        out.extend_from_slice(&metadata[i * md..][..md]);
    }
    out
}

proptest! {
    #![proptest_config(proptest_config(96))]

    #[test]
    fn generate_matches_reference_in_both_layouts(
        (p, tags) in any_protection().prop_flat_map(|p| (Just(p), any_tags(p))),
        blocks in 1usize..5,
        seed in any::<u64>(),
    ) {
        let data = bytes(seed, blocks * p.lba().data_bytes());
        let mut metadata = bytes(seed ^ 1, blocks * p.lba().metadata_bytes());
        let mut extended = interleave(&p, &data, &metadata);
        pi::generate(&p, &mut extended, &tags).unwrap();
        pi::generate_separate(&p, &data, &mut metadata, &tags).unwrap();
        prop_assert_eq!(&extended, &interleave(&p, &data, &metadata), "DIF and DIX carry the same tuples");
        let (db, md, at, n) = (p.lba().data_bytes(), p.lba().metadata_bytes(), p.tuple_offset(), p.format().tuple_bytes());
        for i in 0..blocks {
            let block_md = &metadata[i * md..][..md];
            let want = reference_tuple(&p, &data[i * db..][..db], block_md, &tags, i as u64);
            prop_assert_eq!(&block_md[at..at + n], &want[..], "block {}", i);
            let decoded = p.format().decode(&block_md[at..at + n]);
            let mut re = vec![0u8; n];
            p.format().encode(&decoded, &mut re);
            prop_assert_eq!(&re[..], &want[..], "decode/encode round trip");
        }
        pi::verify(&p, &extended, &tags, Checks { storage_tag: true, ..Checks::ALL }).unwrap();
        pi::verify_separate(&p, &data, &metadata, &tags, Checks { storage_tag: true, ..Checks::ALL }).unwrap();
    }

    #[test]
    fn every_flipped_guarded_bit_is_caught_at_its_block(
        p in any_protection(),
        blocks in 1usize..4,
        seed in any::<u64>(),
        pick in any::<u64>(),
    ) {
        let tags = Tags::for_lba(77 & p.format().ref_tag_mask());
        let mut buf = bytes(seed, blocks * p.lba().extended_bytes());
        pi::generate(&p, &mut buf, &tags).unwrap();
        let ext = p.lba().extended_bytes();
        let covered = p.lba().data_bytes() + p.guarded_metadata_bytes();
        let block = (pick % blocks as u64) as usize;
        let bit = (pick >> 8) % (covered as u64 * 8);
        buf[block * ext + (bit / 8) as usize] ^= 1 << (bit % 8);
        match pi::verify(&p, &buf, &tags, Checks::ALL) {
            Err(Error::PiCheck(f)) => {
                prop_assert_eq!(f.block, block as u64);
                prop_assert_eq!(f.field, PiField::Guard);
                prop_assert_ne!(f.expected, f.actual);
            }
            other => prop_assert!(false, "expected a guard failure, got {:?}", other),
        }
        let listed: Vec<_> = pi::verify_each(&p, &buf, &tags, Checks::ALL).collect::<Result<_, _>>().unwrap();
        prop_assert_eq!(listed.len(), 1);
        // The same blocks as DIX (data and metadata apart): the same verdict.
        let (db, ext) = (p.lba().data_bytes(), p.lba().extended_bytes());
        let data: Vec<u8> = buf.chunks_exact(ext).flat_map(|b| b[..db].to_vec()).collect();
        let metadata: Vec<u8> = buf.chunks_exact(ext).flat_map(|b| b[db..].to_vec()).collect();
        match pi::verify_separate(&p, &data, &metadata, &tags, Checks::ALL) {
            Err(Error::PiCheck(f)) => prop_assert_eq!((f.block, f.field), (block as u64, PiField::Guard)),
            other => prop_assert!(false, "DIX: expected a guard failure, got {:?}", other),
        }
    }
}

#[test]
fn escapes_are_counted_where_the_tuple_is() {
    // PI last in 16 bytes of metadata: the tuple starts 8 bytes in.
    for location in [PiLocation::Last, PiLocation::First] {
        let p = protection(GuardSize::Crc16, PiType::Type1, 0, "512+16", location);
        let mut buf = bytes(8, 5 * 528);
        pi::generate(&p, &mut buf, &Tags::for_lba(0)).unwrap();
        assert_eq!(pi::count_escapes(&p, &buf), 0, "{location:?}");
        for block in [1, 3, 4] {
            set_tuple(&p, &mut buf, block, |t| t.app_tag = 0xFFFF);
        }
        assert_eq!(pi::count_escapes(&p, &buf), 3, "{location:?}");
        assert_eq!(pi::count_escapes(&p, &buf[..4 * 528 + 100]), 2, "{location:?}: a partial block is not counted");
        let metadata: Vec<u8> = buf.chunks_exact(528).flat_map(|b| b[512..].to_vec()).collect();
        assert_eq!(pi::count_escapes_separate(&p, &metadata), 3, "{location:?}");
    }
}

#[test]
fn checks_anything_says_whether_any_field_is_compared() {
    let format = p_any(); // type 1, 8-bit storage tag
    let none = Checks { guard: false, app_tag: false, ref_tag: false, storage_tag: false, ..Checks::ALL };
    let tags = Tags { app_tag_mask: 0xFFFF, storage_tag_mask: 0xFF, ..Tags::for_lba(0) };
    let type3 = protection(GuardSize::Crc64, PiType::Type3, 8, "4096+24", PiLocation::Last).format();
    let cases = [
        (format, tags, none, false),
        (format, tags, Checks { guard: true, ..none }, true),
        (format, tags, Checks { app_tag: true, ..none }, true),
        (format, Tags { app_tag_mask: 0, ..tags }, Checks { app_tag: true, ..none }, false),
        (format, tags, Checks { app_tag: true, order: Order::Kernel, ..none }, false),
        (format, tags, Checks { ref_tag: true, ..none }, true),
        (type3, tags, Checks { ref_tag: true, ..none }, false),
        (format, tags, Checks { storage_tag: true, ..none }, true),
        (format, Tags { storage_tag_mask: 0x100, ..tags }, Checks { storage_tag: true, ..none }, false),
        (format, tags, Checks { storage_tag: true, order: Order::Kernel, ..none }, false),
    ];
    for (i, (format, tags, checks, want)) in cases.into_iter().enumerate() {
        assert_eq!(pi::checks_anything(format, &tags, checks), want, "case {i}");
    }
}

/// 4 blocks of 4096+16 with 64b guard and PI last, checked after one change.
fn verdict(
    pi_type: PiType,
    change: impl FnOnce(&Protection, &mut [u8]),
    tags: Tags,
    checks: Checks,
) -> Option<(u64, PiField)> {
    let p = protection(GuardSize::Crc64, pi_type, 8, "4096+24", PiLocation::Last);
    let mut buf = bytes(5, 4 * p.lba().extended_bytes());
    pi::generate(&p, &mut buf, &Tags { app_tag: 0x1234, storage_tag: 0xAB, ..Tags::for_lba(100) }).unwrap();
    change(&p, &mut buf);
    match pi::verify(&p, &buf, &tags, checks) {
        Ok(()) => None,
        Err(Error::PiCheck(f)) => Some((f.block, f.field)),
        Err(e) => panic!("unexpected error {e}"),
    }
}

fn tuple_at(p: &Protection, block: usize) -> std::ops::Range<usize> {
    let start = block * p.lba().extended_bytes() + p.lba().data_bytes() + p.tuple_offset();
    start..start + p.format().tuple_bytes()
}

fn set_tuple(p: &Protection, buf: &mut [u8], block: usize, edit: impl FnOnce(&mut pi::Tuple)) {
    let range = tuple_at(p, block);
    let mut t = p.format().decode(&buf[range.clone()]);
    edit(&mut t);
    p.format().encode(&t, &mut buf[range]);
}

#[test]
fn mutation_verdicts() {
    let tags = Tags { app_tag: 0x1234, storage_tag: 0xAB, ..Tags::for_lba(100) };
    let all = Checks { storage_tag: true, ..Checks::ALL };
    let none = |_: &Protection, _: &mut [u8]| {};
    assert_eq!(verdict(PiType::Type1, none, tags, all), None, "untouched");
    // Data bit, guard bit, the metadata byte before the tuple (covered when PI is last).
    assert_eq!(verdict(PiType::Type1, |_, b| b[3 * 4120 + 7] ^= 0x10, tags, all), Some((3, PiField::Guard)));
    assert_eq!(verdict(PiType::Type1, |p, b| b[tuple_at(p, 1).start] ^= 1, tags, all), Some((1, PiField::Guard)));
    assert_eq!(verdict(PiType::Type1, |p, b| b[tuple_at(p, 2).start - 1] ^= 1, tags, all), Some((2, PiField::Guard)));
    // Tag bits.
    let app = |p: &Protection, b: &mut [u8]| b[tuple_at(p, 2).start + 9] ^= 1;
    assert_eq!(verdict(PiType::Type1, app, tags, all), Some((2, PiField::AppTag)));
    assert_eq!(verdict(PiType::Type1, app, tags, Checks { app_tag: false, ..all }), None, "app tag not checked");
    let masked = Tags { app_tag_mask: 0xFFFE, ..tags };
    assert_eq!(verdict(PiType::Type1, app, masked, all), None, "flipped bit outside the app-tag mask");
    let reftag = |p: &Protection, b: &mut [u8]| b[tuple_at(p, 0).end - 1] ^= 1;
    assert_eq!(verdict(PiType::Type1, reftag, tags, all), Some((0, PiField::RefTag)));
    assert_eq!(verdict(PiType::Type2, reftag, tags, all), Some((0, PiField::RefTag)));
    assert_eq!(verdict(PiType::Type3, reftag, tags, all), None, "type 3 reference tags are opaque");
    let stag = |p: &Protection, b: &mut [u8]| b[tuple_at(p, 3).start + 10] ^= 1;
    assert_eq!(verdict(PiType::Type1, stag, tags, all), Some((3, PiField::StorageTag)));
    assert_eq!(verdict(PiType::Type1, stag, tags, Checks::ALL), None, "storage tag not checked");
    // Wrong expectations.
    assert_eq!(verdict(PiType::Type1, none, Tags { ref_tag: 101, ..tags }, all), Some((0, PiField::RefTag)));
    assert_eq!(verdict(PiType::Type1, none, Tags { app_tag: 0x1235, ..tags }, all), Some((0, PiField::AppTag)));
    assert_eq!(verdict(PiType::Type1, none, Tags { storage_tag: 0xAC, ..tags }, all), Some((0, PiField::StorageTag)));
    // Escapes: app tag FFFFh turns checks off for types 1 and 2 even over bad data ...
    let escape_and_rot = |p: &Protection, b: &mut [u8]| {
        set_tuple(p, b, 1, |t| t.app_tag = 0xFFFF);
        b[p.lba().extended_bytes() + 3] ^= 1;
    };
    assert_eq!(verdict(PiType::Type1, escape_and_rot, tags, all), None);
    assert_eq!(verdict(PiType::Type2, escape_and_rot, tags, all), None);
    // ... but type 3 also needs an all-ones reference tag.
    assert_eq!(verdict(PiType::Type3, escape_and_rot, tags, all), Some((1, PiField::Guard)));
    let full_escape = |p: &Protection, b: &mut [u8]| {
        let f = p.format();
        set_tuple(p, b, 1, |t| {
            t.app_tag = 0xFFFF;
            t.ref_tag = f.ref_tag_mask();
            t.storage_tag = f.storage_tag_mask();
        });
        b[p.lba().extended_bytes() + 3] ^= 1;
    };
    assert_eq!(verdict(PiType::Type3, full_escape, tags, all), None);
}

/// The kernel's rules (block/t10-pi.c `t10_pi_verify`, `ext_pi_crc64_verify`)
/// beside SPDK's: reference tag before guard, application and storage tags
/// never compared, a type-3 escape without the storage tag; and the
/// storage-tag mask.
#[test]
fn kernel_order_and_storage_tag_mask() {
    let tags = Tags { app_tag: 0x1234, storage_tag: 0xAB, ..Tags::for_lba(100) };
    let spdk = Checks { storage_tag: true, ..Checks::ALL };
    let kernel = Checks { order: Order::Kernel, ..spdk };
    // Data and reference tag of block 2 both wrong: each reports its first check.
    let data_and_ref = |p: &Protection, b: &mut [u8]| {
        b[2 * p.lba().extended_bytes() + 5] ^= 1;
        b[tuple_at(p, 2).end - 1] ^= 1;
    };
    assert_eq!(verdict(PiType::Type1, data_and_ref, tags, spdk), Some((2, PiField::Guard)));
    assert_eq!(verdict(PiType::Type1, data_and_ref, tags, kernel), Some((2, PiField::RefTag)));
    let data = |p: &Protection, b: &mut [u8]| b[p.lba().extended_bytes() + 5] ^= 1;
    assert_eq!(verdict(PiType::Type2, data, tags, kernel), Some((1, PiField::Guard)));
    assert_eq!(verdict(PiType::Type3, data, tags, kernel), Some((1, PiField::Guard)));
    // The application and storage tags: SPDK compares them, the kernel never does.
    let app = |p: &Protection, b: &mut [u8]| b[tuple_at(p, 2).start + 9] ^= 1;
    assert_eq!(verdict(PiType::Type1, app, tags, spdk), Some((2, PiField::AppTag)));
    assert_eq!(verdict(PiType::Type1, app, tags, kernel), None);
    let stag = |p: &Protection, b: &mut [u8]| b[tuple_at(p, 3).start + 10] ^= 1;
    assert_eq!(verdict(PiType::Type1, stag, tags, spdk), Some((3, PiField::StorageTag)));
    assert_eq!(verdict(PiType::Type1, stag, tags, kernel), None);
    // The storage-tag mask: a flipped bit outside it is not compared.
    let bit = |p: &Protection, b: &mut [u8]| -> u64 {
        let before = p.format().decode(&b[tuple_at(p, 3)]).storage_tag;
        b[tuple_at(p, 3).start + 10] ^= 1;
        before ^ p.format().decode(&b[tuple_at(p, 3)]).storage_tag
    };
    let mut flipped = 0;
    let probe = |p: &Protection, b: &mut [u8]| flipped = bit(p, b);
    assert_eq!(verdict(PiType::Type1, probe, tags, spdk), Some((3, PiField::StorageTag)));
    assert_ne!(flipped, 0);
    let outside = Tags { storage_tag_mask: !flipped, ..tags };
    assert_eq!(verdict(PiType::Type1, stag, outside, spdk), None, "flipped bit outside the storage-tag mask");
    let inside = Tags { storage_tag_mask: flipped, ..tags };
    assert_eq!(verdict(PiType::Type1, stag, inside, spdk), Some((3, PiField::StorageTag)));
    // Type 3 escape (NVM Command Set spec 5.3.3): app FFFFh and the
    // reference tag all ones over rotten data, whatever the storage tag
    // holds: skipped under both orders.
    let ref_escape = |p: &Protection, b: &mut [u8]| {
        let f = p.format();
        set_tuple(p, b, 1, |t| {
            t.app_tag = 0xFFFF;
            t.ref_tag = f.ref_tag_mask();
        });
        b[p.lba().extended_bytes() + 3] ^= 1;
    };
    assert_eq!(verdict(PiType::Type3, ref_escape, tags, spdk), None);
    assert_eq!(verdict(PiType::Type3, ref_escape, tags, kernel), None);
    // Types 1 and 2: app FFFFh alone is an escape under both.
    let app_escape = |p: &Protection, b: &mut [u8]| {
        set_tuple(p, b, 1, |t| t.app_tag = 0xFFFF);
        b[p.lba().extended_bytes() + 3] ^= 1;
    };
    assert_eq!(verdict(PiType::Type1, app_escape, tags, kernel), None);
    assert!(!pi::checks_anything(p_any(), &tags, Checks { guard: false, ref_tag: false, ..kernel }));
}

fn p_any() -> PiFormat {
    protection(GuardSize::Crc64, PiType::Type1, 8, "4096+24", PiLocation::Last).format()
}

#[test]
fn pi_first_leaves_the_rest_of_the_metadata_unguarded() {
    let p = protection(GuardSize::Crc32, PiType::Type1, 16, "4096+64", PiLocation::First);
    let mut buf = bytes(9, 2 * p.lba().extended_bytes());
    pi::generate(&p, &mut buf, &Tags::for_lba(0)).unwrap();
    buf[4096 + 40] ^= 0xFF; // metadata after the tuple
    pi::verify(&p, &buf, &Tags::for_lba(0), Checks::ALL).unwrap();
    let last = protection(GuardSize::Crc32, PiType::Type1, 16, "4096+64", PiLocation::Last);
    pi::generate(&last, &mut buf, &Tags::for_lba(0)).unwrap();
    buf[4096 + 40] ^= 0xFF; // metadata before the tuple
    assert!(
        matches!(pi::verify(&last, &buf, &Tags::for_lba(0), Checks::ALL), Err(Error::PiCheck(f)) if f.field == PiField::Guard)
    );
}

#[test]
fn reference_tags_wrap_at_their_width() {
    let p = protection(GuardSize::Crc64, PiType::Type1, 40, "512+16", PiLocation::Last); // 8-bit ref tags
    let mut buf = vec![0u8; 4 * 528];
    pi::generate(&p, &mut buf, &Tags::for_lba(254)).unwrap();
    let refs: Vec<u64> = (0..4).map(|i| p.format().decode(&buf[tuple_at(&p, i)]).ref_tag).collect();
    assert_eq!(refs, [254, 255, 0, 1]);
    pi::verify(&p, &buf, &Tags::for_lba(254), Checks::ALL).unwrap();
    pi::verify(&p, &buf[2 * 528..], &Tags::for_lba(254).advanced(p.format(), 2), Checks::ALL).unwrap();
}

#[test]
fn remap_moves_matching_tags_only() {
    let p = protection(GuardSize::Crc16, PiType::Type1, 0, "512+8", PiLocation::Last);
    let mut buf = bytes(3, 6 * 520);
    pi::generate(&p, &mut buf, &Tags::for_lba(0)).unwrap();
    set_tuple(&p, &mut buf, 2, |t| t.app_tag = 0xFFFF); // escaped: left alone
    set_tuple(&p, &mut buf, 4, |t| t.ref_tag = 999); // not the virtual tag: left alone
    let mut dix_md: Vec<u8> = buf.chunks_exact(520).flat_map(|b| b[512..].to_vec()).collect();
    assert_eq!(pi::remap_ref_tags(&p, &mut buf, 0, 5000).unwrap(), 4);
    assert_eq!(pi::remap_ref_tags_separate(&p, &mut dix_md, 0, 5000).unwrap(), 4);
    let refs: Vec<u64> = (0..6).map(|i| p.format().decode(&buf[tuple_at(&p, i)]).ref_tag).collect();
    assert_eq!(refs, [5000, 5001, 2, 5003, 999, 5005]);
    let failures: Vec<_> =
        pi::verify_each(&p, &buf, &Tags::for_lba(5000), Checks::ALL).collect::<Result<_, _>>().unwrap();
    assert_eq!(failures.iter().map(|f| (f.block, f.field)).collect::<Vec<_>>(), [(4, PiField::RefTag)]);
    assert_eq!(dix_md, buf.chunks_exact(520).flat_map(|b| b[512..].to_vec()).collect::<Vec<_>>());
    let t3 = protection(GuardSize::Crc16, PiType::Type3, 0, "512+8", PiLocation::Last);
    assert_eq!(pi::remap_ref_tags(&t3, &mut buf, 0, 1).unwrap(), 0, "type 3 tags are never remapped");
    // PI last in 16 bytes of metadata: the tags are 8 bytes into it.
    let wide = protection(GuardSize::Crc16, PiType::Type1, 0, "512+16", PiLocation::Last);
    let mut buf = bytes(4, 3 * 528);
    pi::generate(&wide, &mut buf, &Tags::for_lba(10)).unwrap();
    assert_eq!(pi::remap_ref_tags(&wide, &mut buf, 10, 70).unwrap(), 3);
    pi::verify(&wide, &buf, &Tags::for_lba(70), Checks::ALL).unwrap();
}

#[test]
fn guard_of_scattered_parts_is_the_guard_of_the_whole() {
    let data = bytes(11, 10_000);
    for guard in GuardSize::ALL {
        let parts: Vec<&[u8]> = vec![&data[..1], &data[1..4096], &data[4096..4097], &data[4097..]];
        assert_eq!(guard.checksum_parts(&parts), guard.checksum(&data));
        assert_eq!(guard.checksum_parts(&[]), guard.checksum(&[]));
    }
}

#[test]
fn bad_parameters_are_typed_errors() {
    let msg = |r: Result<(), Error>| r.unwrap_err().to_string();
    assert!(msg(GuardSize::from_bits(8).map(drop)).contains("8 bits (expected 16, 32 or 64)"));
    assert!(msg(PiType::from_number(4).map(drop)).contains("expected 1, 2 or 3"));
    assert!(msg(PiFormat::new(GuardSize::Crc32, PiType::Type1, 8).map(drop)).contains("allows 16..=64"));
    assert!(msg(PiFormat::new(GuardSize::Crc64, PiType::Type1, 49).map(drop)).contains("allows 0..=48"));
    assert!(msg("4096x8".parse::<LbaFormat>().map(drop)).contains("expected DATA+META"));
    assert!(msg("4000+8".parse::<LbaFormat>().map(drop)).contains("not a power of two"));
    let f = PiFormat::new(GuardSize::Crc64, PiType::Type1, 0).unwrap();
    assert!(msg(Protection::new(f, "4096+8".parse().unwrap(), PiLocation::Last).map(drop)).contains("needs 16"));
    let p = protection(GuardSize::Crc16, PiType::Type3, 0, "512+8", PiLocation::Last);
    assert!(msg(pi::generate(&p, &mut [0u8; 519], &Tags::default())).contains("not a whole number of 520-byte blocks"));
    assert!(msg(pi::generate(&p, &mut [0u8; 520], &Tags { ref_tag: 1 << 32, ..Tags::default() }))
        .contains("wider than 32 bits"));
    assert!(msg(pi::generate_separate(&p, &[0u8; 1024], &mut [0u8; 8], &Tags::default())).contains("16 bytes expected"));
    assert!(pi::verify_each(&p, &[0u8; 7], &Tags::default(), Checks::ALL).next().unwrap().is_err());
}

fn temp_path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("csumkit-pi-{}-{name}", std::process::id()))
}

fn device(name: &str, pi_type: PiType, lba: &str, blocks: u64) -> (Device, std::path::PathBuf) {
    let path = temp_path(name);
    let lba: LbaFormat = lba.parse().unwrap();
    let p = Protection::new(PiFormat::new(GuardSize::Crc16, pi_type, 0).unwrap(), lba, PiLocation::Last).unwrap();
    (Device::create(&path, lba, Some(p), blocks).unwrap(), path)
}

#[test]
fn device_checks_host_pi_and_stores_nothing_on_failure() {
    let (dev, path) = device("host", PiType::Type1, "4096+8", 64);
    let p = *dev.protection().unwrap();
    let data = bytes(1, 2 * 4096);
    let mut md = vec![0u8; 16];
    pi::generate_separate(&p, &data, &mut md, &Tags::for_lba(10)).unwrap();
    dev.write(10, &data, Some(&md), &Io::default()).unwrap();
    // Same PI at the wrong LBA: the device refuses it, naming the LBA.
    let err = dev.write(20, &data, Some(&md), &Io::default()).unwrap_err();
    assert_eq!(err.to_string(), "PI check failed: block 20: reference tag check failed: expected 0x14, found 0xa");
    assert_eq!(dev.stats().write_commands, 1);
    let (mut back, mut back_md) = (vec![0u8; 8192], vec![0u8; 16]);
    dev.read(10, &mut back, Some(&mut back_md), &Io::default()).unwrap();
    assert_eq!((back, back_md), (data, md));
    let mut unwritten = vec![1u8; 4096];
    dev.read(20, &mut unwritten, None, &Io::default()).unwrap();
    assert!(unwritten.iter().all(|&b| b == 0), "never-written blocks read as zeros (escape PI)");
    let s = dev.stats();
    assert_eq!((s.data_bytes_written, s.medium_bytes_written), (8192, 2 * 4104));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn device_pract_generates_and_strips_and_catches_bit_rot_and_misdirection() {
    let (dev, path) = device("pract", PiType::Type1, "4096+8", 64);
    let pract = Io::pract();
    for lba in 0..8 {
        dev.write(lba, &vec![lba as u8; 4096], None, &pract).unwrap();
    }
    let mut block = vec![0u8; 4096];
    dev.read(3, &mut block, None, &pract).unwrap();
    assert_eq!(block, vec![3u8; 4096]);
    let mut md = [0u8; 8];
    assert!(dev.read(3, &mut block, Some(&mut md), &pract).unwrap_err().to_string().contains("strips the PI"));
    assert!(dev.write(3, &block, Some(&md), &pract).unwrap_err().to_string().contains("generates all metadata"));
    dev.read(3, &mut block, Some(&mut md), &Io::default()).unwrap();
    assert_eq!(u32::from_be_bytes(md[4..].try_into().unwrap()), 3, "type 1: reference tag = LBA");

    dev.inject(Fault::BitRot { lba: 5, bit: 12345 }).unwrap();
    let err = dev.read(4, &mut vec![0u8; 3 * 4096], None, &pract).unwrap_err();
    assert!(matches!(err, Error::PiCheck(f) if f.block == 5 && f.field == PiField::Guard), "{err}");

    dev.inject(Fault::MisdirectedWrite { lba: 6, to: 7 }).unwrap();
    dev.write(6, &vec![0x66u8; 4096], None, &pract).unwrap();
    let err = dev.read(7, &mut block, None, &pract).unwrap_err();
    assert!(matches!(err, Error::PiCheck(f) if f.block == 7 && f.field == PiField::RefTag && f.actual == 6), "{err}");
    dev.read(6, &mut block, None, &pract).unwrap();
    assert_eq!(block, vec![6u8; 4096], "the intended block still holds its old data");

    assert!(matches!(dev.inject(Fault::BitRot { lba: 1, bit: 4104 * 8 }), Err(Error::Invalid { .. })));
    assert!(matches!(dev.write(63, &[0u8; 8192], None, &pract), Err(Error::BadBlockRange { .. })));
    assert!(dev.write(0, &[0u8; 100], None, &pract).unwrap_err().to_string().contains("whole 4096-byte blocks"));
    std::fs::remove_file(path).unwrap();
}

/// Data blocks 0..n on the device; checksum-tree nodes after them.
struct DeviceNodes<'a> {
    dev: &'a Device,
}

impl NodeStore for DeviceNodes<'_> {
    fn write(&mut self, location: u64, node: &[u8; NODE_BYTES]) -> Result<(), Error> {
        self.dev.write(location, node, None, &Io::pract())
    }
    fn read(&mut self, location: u64, node: &mut [u8; NODE_BYTES]) -> Result<(), Error> {
        self.dev.read(location, node, None, &Io::pract())
    }
}

#[test]
fn lost_write_passes_pi_but_not_the_checksum_tree() {
    let data_blocks = 32;
    let area = ChecksumTree::area_blocks_for(data_blocks);
    let (dev, path) = device("lost", PiType::Type1, "4096+8", data_blocks + area);
    let mut tree = ChecksumTree::new(data_blocks, data_blocks, area).unwrap();
    let pract = Io::pract();
    let old = vec![1u8; 4096];
    dev.write(9, &old, None, &pract).unwrap();
    tree.update(9, csumkit::crc32c::checksum(&old));
    dev.inject(Fault::LostWrite { lba: 9 }).unwrap();
    let new = vec![2u8; 4096];
    dev.write(9, &new, None, &pract).unwrap(); // acknowledged, never stored
    tree.update(9, csumkit::crc32c::checksum(&new));
    tree.commit(&mut DeviceNodes { dev: &dev }).unwrap();
    let mut block = vec![0u8; 4096];
    dev.read(9, &mut block, None, &pract).unwrap();
    assert_eq!(block, old, "PI alone cannot tell a lost write: the old block is self-consistent");
    let recorded = tree.lookup_persisted(&mut DeviceNodes { dev: &dev }, 9).unwrap().unwrap();
    assert_ne!(recorded, csumkit::crc32c::checksum(&block), "the checksum tree catches it");
    std::fs::remove_file(path).unwrap();
}

proptest! {
    #![proptest_config(proptest_config(24))]

    #[test]
    fn checksum_tree_persists_exactly_what_was_recorded(
        blocks in 1u64..400_000,
        updates in prop::collection::vec((any::<u64>(), any::<u32>()), 0..300),
        commit_every in 1usize..100,
    ) {
        let area = ChecksumTree::area_blocks_for(blocks);
        let mut tree = ChecksumTree::new(blocks, 1 << 40, area).unwrap();
        let mut store = MemoryNodes::default();
        let mut model = HashMap::new();
        for (i, (b, c)) in updates.iter().enumerate() {
            tree.update(b % blocks, *c);
            model.insert(b % blocks, *c);
            if i % commit_every == 0 {
                tree.commit(&mut store).unwrap();
                prop_assert_eq!(tree.dirty_leaves(), 0);
            }
        }
        let stats = tree.commit(&mut store).unwrap();
        prop_assert_eq!(stats.bytes % NODE_BYTES as u64, 0);
        prop_assert!(store.0.keys().all(|&l| l >= 1 << 40 && l < (1 << 40) + area), "nodes stay in their area");
        for probe in model.keys().copied().chain([0, blocks - 1, blocks / 2]) {
            prop_assert_eq!(tree.lookup_persisted(&mut store, probe).unwrap(), model.get(&probe).copied());
            prop_assert_eq!(tree.get(probe), model.get(&probe).copied());
        }
    }
}

#[test]
fn checksum_tree_rejects_corrupt_nodes_and_small_areas() {
    let mut tree = ChecksumTree::new(5000, 0, ChecksumTree::area_blocks_for(5000)).unwrap();
    let mut store = MemoryNodes::default();
    tree.update(4321, 7);
    tree.commit(&mut store).unwrap();
    assert_eq!(tree.lookup_persisted(&mut store, 4321).unwrap(), Some(7));
    for node in store.0.values_mut() {
        node[100] ^= 1;
    }
    let err = tree.lookup_persisted(&mut store, 4321).unwrap_err().to_string();
    assert!(err.contains("node CRC32C"), "{err}");
    assert!(ChecksumTree::new(5000, 0, 3).unwrap_err().to_string().contains("need"));
    assert!(matches!(tree.lookup_persisted(&mut store, 5000), Err(Error::BadBlockRange { .. })));
}

#[test]
fn device_compares_the_whole_app_tag_by_default() {
    let (dev, path) = device("apptag", PiType::Type1, "512+8", 4);
    let p = *dev.protection().unwrap();
    let data = bytes(2, 512);
    let mut md = [0u8; 8];
    pi::generate_separate(&p, &data, &mut md, &Tags { app_tag: 0x0100, ..Tags::for_lba(1) }).unwrap();
    let err = dev.write(1, &data, Some(&md), &Io::default()).unwrap_err();
    assert!(matches!(err, Error::PiCheck(f) if f.field == PiField::AppTag && f.actual == 0x100), "{err}");
    let io = Io { tags: Tags { app_tag: 0x0100, ..Tags::default() }, ..Io::default() };
    dev.write(1, &data, Some(&md), &io).unwrap();
    std::fs::remove_file(path).unwrap();
}

/// Verifying a long buffer in pieces: the tags of the block `n` further on
/// move the reference tag by `n` for types 1 and 2 (wrapping at its width)
/// and keep everything else; a type-3 tag stays.
#[test]
fn tags_advance_for_pieces_of_a_long_buffer() {
    let tags = Tags { app_tag: 0x1234, storage_tag: 0xAB, app_tag_mask: 0xFF00, ..Tags::for_lba(0xFFFF_FFFE) };
    let t1 = PiFormat::new(GuardSize::Crc16, PiType::Type1, 0).unwrap();
    let moved = tags.advanced(t1, 3);
    assert_eq!(moved, Tags { ref_tag: 1, ..tags }, "32-bit reference tags wrap");
    let t3 = PiFormat::new(GuardSize::Crc16, PiType::Type3, 0).unwrap();
    assert_eq!(tags.advanced(t3, 3), tags);
    // Pieces verify like the whole.
    let p = protection(GuardSize::Crc64, PiType::Type1, 0, "512+16", PiLocation::Last);
    let mut buf = bytes(3, 8 * p.lba().extended_bytes());
    let start = Tags::for_lba(1000);
    pi::generate(&p, &mut buf, &start).unwrap();
    let half = 4 * p.lba().extended_bytes();
    pi::verify(&p, &buf[half..], &start.advanced(p.format(), 4), Checks::ALL).unwrap();
    assert!(pi::verify(&p, &buf[half..], &start, Checks::ALL).is_err());
}

/// A split device over a data file of `blocks` blocks holding `fill`.
fn split_device(name: &str, lba: &str, guard: GuardSize, blocks: u64, fill: u8) -> (Device, PathBuf, PathBuf) {
    let (data, metadata) = (temp_path(&format!("{name}.img")), temp_path(&format!("{name}.pi")));
    let _ = std::fs::remove_file(&metadata);
    let lba: LbaFormat = lba.parse().unwrap();
    std::fs::write(&data, vec![fill; blocks as usize * lba.data_bytes()]).unwrap();
    let p = Protection::new(PiFormat::new(guard, PiType::Type1, 0).unwrap(), lba, PiLocation::Last).unwrap();
    let (dev, opened) = Device::open_split(&data, &metadata, p).unwrap();
    let finished = opened.finished_write;
    assert!(!finished);
    (dev, data, metadata)
}

#[test]
fn split_device_keeps_a_plain_data_file_and_catches_rot_in_either_file() {
    for (lba, guard) in [("4096+8", GuardSize::Crc16), ("512+8", GuardSize::Crc16), ("4096+16", GuardSize::Crc64)] {
        let (dev, data, metadata) = split_device("split", lba, guard, 32, 0xAB);
        let db = dev.lba_format().data_bytes();
        let pract = Io::pract();
        // Never written through the device: the data file's bytes, unchecked.
        let mut block = vec![0u8; db];
        dev.read(7, &mut block, None, &pract).unwrap();
        assert_eq!(block, vec![0xAB; db], "{lba}");
        let new: Vec<u8> = (0..3 * db).map(|i| (i * 7 % 251) as u8).collect();
        dev.write(4, &new, None, &pract).unwrap();
        assert_eq!(std::fs::read(&data).unwrap()[4 * db..7 * db], new[..], "{lba}: data in place, plain");
        let mut back = vec![0u8; 3 * db];
        dev.read(4, &mut back, None, &pract).unwrap();
        assert_eq!(back, new);

        // Reopened: the PI is still there and still checked.
        drop(dev);
        let p =
            Protection::new(PiFormat::new(guard, PiType::Type1, 0).unwrap(), lba.parse().unwrap(), PiLocation::Last)
                .unwrap();
        let (dev, opened) = Device::open_split(&data, &metadata, p).unwrap();
        let finished = opened.finished_write;
        assert!(!finished, "{lba}: no command was left in flight");
        dev.read(4, &mut back, None, &pract).unwrap();
        dev.inject(Fault::BitRot { lba: 5, bit: 100 }).unwrap(); // data file
        let err = dev.read(4, &mut back, None, &pract).unwrap_err();
        assert!(matches!(err, Error::PiCheck(f) if f.block == 5 && f.field == PiField::Guard), "{lba}: {err}");
        let md_bits = dev.lba_format().metadata_bytes() as u64 * 8;
        dev.inject(Fault::BitRot { lba: 6, bit: db as u64 * 8 + md_bits - 1 }).unwrap(); // reference tag's last bit
        let err = dev.read(6, &mut block, None, &pract).unwrap_err();
        assert!(matches!(err, Error::PiCheck(f) if f.block == 6 && f.field == PiField::RefTag), "{lba}: {err}");
        dev.inject(Fault::MisdirectedWrite { lba: 10, to: 11 }).unwrap();
        dev.write(10, &new[..db], None, &pract).unwrap();
        let err = dev.read(11, &mut block, None, &pract).unwrap_err();
        assert!(matches!(err, Error::PiCheck(f) if f.block == 11 && f.field == PiField::RefTag), "{lba}: {err}");

        // Asked for another format, or over a data file that changed size:
        // refused, naming both; the metadata file is left as it was.
        let before = std::fs::read(&metadata).unwrap();
        let other = Protection::new(
            PiFormat::new(GuardSize::Crc32, PiType::Type1, 16).unwrap(),
            "4096+16".parse().unwrap(),
            PiLocation::Last,
        )
        .unwrap();
        let err = Device::open_split(&data, &metadata, other).unwrap_err().to_string();
        assert!(
            err.contains(&format!("holds {lba}, {}-bit guard", guard.bits()))
                && err.contains("asked for 4096+16, 32-bit guard"),
            "{err}"
        );
        std::fs::OpenOptions::new().append(true).open(&data).unwrap().set_len(64 * db as u64).unwrap();
        let err = Device::open_split(&data, &metadata, p).unwrap_err().to_string();
        assert!(err.contains("is for 32 blocks") && err.contains("the data file has 64"), "{err}");
        assert_eq!(std::fs::read(&metadata).unwrap(), before);
        std::fs::remove_file(&data).unwrap();
        std::fs::remove_file(&metadata).unwrap();
    }
}

#[test]
fn split_device_finishes_a_write_a_dead_process_left_half_stored() {
    let (dev, data, metadata) = split_device("inflight", "4096+8", GuardSize::Crc16, 16, 0);
    let p = *dev.protection().unwrap();
    dev.write(3, &[1u8; 8192], None, &Io::pract()).unwrap();
    dev.flush().unwrap(); // no region left marked: no power cut to recover from
    drop(dev);
    // The process died after storing new data for blocks 3..5 but before
    // their metadata: the header's command in flight (offset 32: first
    // LBA, blocks, reference tag) names them.
    let new_data = |path: &PathBuf| {
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(path).unwrap().write_all_at(&[2u8; 8192], 3 * 4096).unwrap();
    };
    new_data(&data);
    let (dev, opened) = Device::open_split(&data, &metadata, p).unwrap();
    let finished = opened.finished_write;
    assert!(!finished);
    let mut back = vec![0u8; 8192];
    let err = dev.read(3, &mut back, None, &Io::pract()).unwrap_err();
    assert!(matches!(err, Error::PiCheck(f) if f.field == PiField::Guard), "without the record: {err}");
    drop(dev);
    let mut slot = [0u8; 24];
    slot[..8].copy_from_slice(&3u64.to_le_bytes());
    slot[8..16].copy_from_slice(&2u64.to_le_bytes());
    slot[16..24].copy_from_slice(&3u64.to_le_bytes());
    {
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(&metadata).unwrap().write_all_at(&slot, 32).unwrap();
    }
    let (dev, opened) = Device::open_split(&data, &metadata, p).unwrap();
    let finished = opened.finished_write;
    assert!(finished, "the command in flight was finished");
    dev.read(3, &mut back, None, &Io::pract()).unwrap();
    assert_eq!(back, vec![2u8; 8192], "the new data, with PI that matches it");
    drop(dev);
    let (_, opened) = Device::open_split(&data, &metadata, p).unwrap();
    let finished = opened.finished_write;
    assert!(!finished, "and only once");
    std::fs::remove_file(&data).unwrap();
    std::fs::remove_file(&metadata).unwrap();
}

proptest! {
    #![proptest_config(proptest_config(64))]

    /// A damaged split metadata file (a valid header with bytes changed,
    /// or cut short) gives a typed error or a device whose reads give a
    /// verdict — never a panic. (The fuzz target `pi_split_metadata` does
    /// the same over arbitrary bytes.)
    #[test]
    fn a_damaged_split_metadata_file_is_an_error_or_a_verdict(
        edits in proptest::collection::vec((0usize..4096 + 8 * 8, any::<u8>()), 0..8),
        cut in prop_oneof![Just(None), (0usize..4200).prop_map(Some)],
    ) {
        let (dev, data, metadata) = split_device("damaged", "512+8", GuardSize::Crc16, 8, 0x11);
        let p = *dev.protection().unwrap();
        dev.write(2, &[0x22; 1024], None, &Io::pract()).unwrap();
        drop(dev);
        let mut bytes = std::fs::read(&metadata).unwrap();
        for (at, value) in edits {
            bytes[at] = value;
        }
        if let Some(len) = cut {
            bytes.truncate(len);
        }
        std::fs::write(&metadata, &bytes).unwrap();
        let _ = pi::split_protection(&metadata);
        if let Ok((dev, _)) = Device::open_split(&data, &metadata, p) {
            let mut block = [0u8; 512];
            for lba in 0..dev.blocks() {
                let _ = dev.read(lba, &mut block, None, &Io::pract());
            }
        }
        std::fs::remove_file(&data).unwrap();
        std::fs::remove_file(&metadata).unwrap();
    }
}

#[test]
fn a_split_device_says_its_format_and_refuses_a_metadata_file_cut_short() {
    for location in [PiLocation::Last, PiLocation::First] {
        let (data, metadata) = (temp_path("fmt.img"), temp_path("fmt.pi"));
        let _ = std::fs::remove_file(&metadata);
        std::fs::write(&data, vec![0u8; 16 * 512]).unwrap();
        let p = Protection::new(
            PiFormat::new(GuardSize::Crc32, PiType::Type2, 16).unwrap(),
            "512+16".parse().unwrap(),
            location,
        )
        .unwrap();
        let (dev, _) = Device::open_split(&data, &metadata, p).unwrap();
        assert!(format!("{dev:?}").contains("Split"), "{dev:?}");
        assert_eq!(pi::split_protection(&metadata).unwrap(), Some(p), "the header names the format");
        assert_eq!(std::fs::metadata(&metadata).unwrap().len(), 4096 + 16 * 16, "a header, then 16 bytes per block");
        drop(dev);
        // Cut inside the blocks' metadata, then inside the header.
        std::fs::OpenOptions::new().write(true).open(&metadata).unwrap().set_len(4096 + 100).unwrap();
        let err = Device::open_split(&data, &metadata, p).unwrap_err();
        assert!(matches!(&err, Error::Invalid { .. }) && err.to_string().contains("4196 bytes"), "{err}");
        std::fs::OpenOptions::new().write(true).open(&metadata).unwrap().set_len(100).unwrap();
        let err = Device::open_split(&data, &metadata, p).unwrap_err();
        assert!(matches!(&err, Error::Corrupt { .. }) && err.to_string().contains("shorter than"), "{err}");
        std::fs::remove_file(&data).unwrap();
        std::fs::remove_file(&metadata).unwrap();
    }
    let (dev, path) = device("fmt-interleaved", PiType::Type1, "512+8", 4);
    assert!(format!("{dev:?}").contains("Interleaved"));
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_split_device_formats_again_a_metadata_file_whose_format_a_power_cut_stopped() {
    // A format sizes the file, then writes its header and syncs: a power
    // cut in between leaves a file of zeros (or a shorter one), which no
    // open should refuse for ever.
    let (dev, data, metadata) = split_device("refmt", "512+8", GuardSize::Crc16, 8, 0x5A);
    let p = *dev.protection().unwrap();
    dev.write(0, &[0xC3; 8 * 512], None, &Io::pract()).unwrap();
    dev.flush().unwrap();
    drop(dev);
    let full = std::fs::read(&metadata).unwrap();
    // The header of zeros over the PI the file held (the PI goes too: it
    // is no longer known to be this device's), then files cut short.
    for zeros in [4096, 10, full.len()] {
        let mut file = if zeros == 4096 { full.clone() } else { vec![0u8; zeros] };
        file[..zeros.min(4096)].fill(0);
        std::fs::write(&metadata, &file).unwrap();
        let (dev, opened) = Device::open_split(&data, &metadata, p).unwrap();
        assert!(opened.formatted && opened.forgotten_blocks == 0 && !opened.finished_write, "{zeros}: {opened:?}");
        assert_eq!(std::fs::read(&metadata).unwrap().len(), full.len(), "{zeros} zeros: formatted to full size");
        let (mut block, mut md) = (vec![0u8; 8 * 512], vec![0u8; 8 * 8]);
        dev.read(0, &mut block, Some(&mut md), &Io::default()).unwrap();
        assert_eq!(block, vec![0xC3; 8 * 512], "the data file is left as it was");
        assert!(md.iter().all(|&b| b == 0xFF), "every block's PI is the escape: unchecked until written");
        drop(dev);
        let (_, opened) = Device::open_split(&data, &metadata, p).unwrap();
        assert!(!opened.formatted, "{zeros}: reopened after the format: not formatted again");
    }
    // A header with anything but zeros in it is a file, damaged: refused.
    let mut header = vec![0u8; full.len()];
    header[256] = 1;
    std::fs::write(&metadata, &header).unwrap();
    let err = Device::open_split(&data, &metadata, p).unwrap_err();
    assert!(matches!(&err, Error::Corrupt { .. }) && err.to_string().contains("bad magic"), "{err}");
    std::fs::remove_file(&data).unwrap();
    std::fs::remove_file(&metadata).unwrap();
}

#[test]
fn recovery_forgets_only_blocks_whose_guard_fails_whatever_their_tags() {
    // Type 2: the reference tag is the writer's, not the LBA; an
    // application and a storage tag besides. Written and not flushed, the
    // region stays marked, and the next open checks it.
    let (data, metadata) = (temp_path("marked-tags.img"), temp_path("marked-tags.pi"));
    let _ = std::fs::remove_file(&metadata);
    std::fs::write(&data, vec![0u8; 8 * 512]).unwrap();
    let format = PiFormat::new(GuardSize::Crc32, PiType::Type2, 16).unwrap();
    let p = Protection::new(format, "512+16".parse().unwrap(), PiLocation::Last).unwrap();
    let tags = Tags { ref_tag: 0x7777, app_tag: 0x1234, storage_tag: 0xBEEF, ..Tags::default() };
    let io = Io { pract: true, tags, ..Io::default() };
    let (dev, _) = Device::open_split(&data, &metadata, p).unwrap();
    dev.write(2, &[1u8; 1024], None, &io).unwrap();
    dev.write(6, &[3u8; 512], None, &Io { tags: Tags { ref_tag: 6, ..tags }, ..io }).unwrap();
    drop(dev);
    // Block 6's data changes under its PI: torn, as a cut may leave it.
    std::os::unix::fs::FileExt::write_all_at(
        &std::fs::File::options().write(true).open(&data).unwrap(),
        &[4u8; 512],
        6 * 512,
    )
    .unwrap();
    let (dev, opened) = Device::open_split(&data, &metadata, p).unwrap();
    assert_eq!(opened.forgotten_blocks, 1, "block 6 alone: the others' guards hold");
    let (mut back, mut md) = ([0u8; 1024], [0u8; 32]);
    let checked = Io { pract: false, checks: Checks { storage_tag: true, ..Checks::ALL }, ..io };
    dev.read(2, &mut back, Some(&mut md), &checked).unwrap();
    assert_eq!(back, [1u8; 1024]);
    assert!(md.chunks(16).all(|m| !format.is_escape(&format.decode(m))), "blocks 2 and 3 keep their PI");
    std::fs::remove_file(&data).unwrap();
    std::fs::remove_file(&metadata).unwrap();
}

#[test]
fn a_half_stored_write_is_finished_with_the_tags_it_carried() {
    // Type 2 with an application and a storage tag: none of them is the LBA.
    let (data, metadata) = (temp_path("tags.img"), temp_path("tags.pi"));
    let _ = std::fs::remove_file(&metadata);
    std::fs::write(&data, vec![0u8; 8 * 512]).unwrap();
    let p = Protection::new(
        PiFormat::new(GuardSize::Crc32, PiType::Type2, 16).unwrap(),
        "512+16".parse().unwrap(),
        PiLocation::Last,
    )
    .unwrap();
    let tags = Tags { ref_tag: 0x7777, app_tag: 0x1234, storage_tag: 0xBEEF, ..Tags::default() };
    let io = Io { pract: true, tags, ..Io::default() };
    let (dev, _) = Device::open_split(&data, &metadata, p).unwrap();
    dev.write(2, &[1u8; 1024], None, &io).unwrap();
    drop(dev);
    // New data for blocks 2..4, and the header's record of the command
    // (first LBA, blocks, reference, storage and application tags).
    {
        use std::os::unix::fs::FileExt;
        std::fs::OpenOptions::new().write(true).open(&data).unwrap().write_all_at(&[2u8; 1024], 2 * 512).unwrap();
        let mut slot = [0u8; 34];
        slot[..8].copy_from_slice(&2u64.to_le_bytes());
        slot[8..16].copy_from_slice(&2u64.to_le_bytes());
        slot[16..24].copy_from_slice(&0x7777u64.to_le_bytes());
        slot[24..32].copy_from_slice(&0xBEEFu64.to_le_bytes());
        slot[32..34].copy_from_slice(&0x1234u16.to_le_bytes());
        std::fs::OpenOptions::new().write(true).open(&metadata).unwrap().write_all_at(&slot, 32).unwrap();
    }
    let (dev, opened) = Device::open_split(&data, &metadata, p).unwrap();
    let finished = opened.finished_write;
    assert!(finished);
    let mut back = [0u8; 1024];
    dev.read(2, &mut back, None, &Io { checks: Checks { storage_tag: true, ..Checks::ALL }, ..io }).unwrap();
    assert_eq!(back, [2u8; 1024]);
    drop(dev);
    // A record that ends at the last block is finished; one past it is a
    // damaged header, refused.
    for (n, fits) in [(2u64, true), (3, false)] {
        use std::os::unix::fs::FileExt;
        let mut slot = [0u8; 16];
        slot[..8].copy_from_slice(&6u64.to_le_bytes());
        slot[8..].copy_from_slice(&n.to_le_bytes());
        std::fs::OpenOptions::new().write(true).open(&metadata).unwrap().write_all_at(&slot, 32).unwrap();
        match Device::open_split(&data, &metadata, p) {
            Ok((_, opened)) => assert!(fits && opened.finished_write),
            Err(e) => assert!(!fits && e.to_string().contains("outside the 8-block device"), "{e}"),
        }
    }
    std::fs::remove_file(&data).unwrap();
    std::fs::remove_file(&metadata).unwrap();
}

#[test]
fn a_deallocated_interleaved_device_reads_zeros_and_escapes_for_every_block() {
    let (dev, path) = device("dealloc", PiType::Type1, "512+8", 8);
    dev.write(0, &[0xAB; 4 * 512], None, &Io::pract()).unwrap();
    dev.deallocate_all().unwrap();
    let (mut data, mut md) = ([1u8; 4 * 512], [0u8; 4 * 8]);
    dev.read(0, &mut data, Some(&mut md), &Io::default()).unwrap();
    assert!(data.iter().all(|&b| b == 0) && md.iter().all(|&b| b == 0xFF), "every block, not just the first");
    std::fs::remove_file(path).unwrap();
}

#[test]
fn a_half_stored_write_longer_than_one_command_piece_is_finished_whole() {
    // Finishing works in pieces of the largest command (64 MiB): a record
    // naming more (a damaged header, within the device) is finished piece
    // by piece, up to its last block.
    let per_piece = (pi::COMMAND_DATA_BYTES_MAX / 512) as u64;
    let blocks = per_piece + 8;
    let (dev, data, metadata) = split_device("long", "512+8", GuardSize::Crc16, blocks, 0);
    let p = *dev.protection().unwrap();
    let tail = per_piece + 1;
    dev.write(tail, &[3u8; 3 * 512], None, &Io::pract()).unwrap();
    drop(dev);
    {
        use std::os::unix::fs::FileExt;
        let file = std::fs::OpenOptions::new().write(true).open(&data).unwrap();
        file.write_all_at(&[4u8; 3 * 512], tail * 512).unwrap();
        let mut slot = [0u8; 24];
        slot[8..16].copy_from_slice(&(tail + 3).to_le_bytes()); // blocks 0..tail + 3
        std::fs::OpenOptions::new().write(true).open(&metadata).unwrap().write_all_at(&slot, 32).unwrap();
    }
    let (dev, opened) = Device::open_split(&data, &metadata, p).unwrap();
    let finished = opened.finished_write;
    assert!(finished);
    let mut back = [0u8; 3 * 512];
    dev.read(tail, &mut back, None, &Io::pract()).unwrap();
    assert_eq!(back, [4u8; 3 * 512]);
    std::fs::remove_file(&data).unwrap();
    std::fs::remove_file(&metadata).unwrap();
}

#[test]
fn bit_rot_flips_exactly_the_bit_it_names_in_either_layout() {
    let ext = 512 + 8;
    for bit in [0u64, 7, 8 * 100 + 3, 8 * 511 + 7, 8 * 512, 8 * 519 + 7] {
        let (dev, path) = device("rot", PiType::Type1, "512+8", 8);
        dev.write(0, &[0x5A; 8 * 512], None, &Io::pract()).unwrap();
        let before = std::fs::read(&path).unwrap();
        dev.inject(Fault::BitRot { lba: 5, bit }).unwrap();
        let mut want = before.clone();
        want[5 * ext + (bit / 8) as usize] ^= 1 << (bit % 8);
        assert!(std::fs::read(&path).unwrap() == want, "interleaved, bit {bit}");
        std::fs::remove_file(path).unwrap();

        let (dev, data, metadata) = split_device("rot", "512+8", GuardSize::Crc16, 8, 0x5A);
        dev.write(0, &[0x5A; 8 * 512], None, &Io::pract()).unwrap();
        let (data_before, meta_before) = (std::fs::read(&data).unwrap(), std::fs::read(&metadata).unwrap());
        dev.inject(Fault::BitRot { lba: 5, bit }).unwrap();
        let (mut data_want, mut meta_want) = (data_before, meta_before);
        if bit / 8 < 512 {
            data_want[5 * 512 + (bit / 8) as usize] ^= 1 << (bit % 8);
        } else {
            meta_want[4096 + 5 * 8 + (bit / 8 - 512) as usize] ^= 1 << (bit % 8);
        }
        assert!(std::fs::read(&data).unwrap() == data_want, "split data, bit {bit}");
        assert!(std::fs::read(&metadata).unwrap() == meta_want, "split metadata, bit {bit}");
        std::fs::remove_file(&data).unwrap();
        std::fs::remove_file(&metadata).unwrap();
    }
    // Rot in a block never written is stored, and read as what it is.
    let (dev, path) = device("rot-unwritten", PiType::Type1, "512+8", 8);
    dev.inject(Fault::BitRot { lba: 3, bit: 9 }).unwrap();
    assert!(dev.read(3, &mut [0u8; 512], None, &Io::pract()).is_err(), "no longer reads as a deallocated block");
    std::fs::remove_file(path).unwrap();
}

/// The owner tag a split device's user keeps survives reopening and is
/// cleared by `clear_split_owner_tag`; deallocating forgets every block's
/// PI (the file back to a header and escapes, its length exact) until the
/// block is written again; a metadata path that cannot be opened for a
/// reason other than absence is an error, not "no PI here".
#[test]
fn a_split_devices_owner_tag_and_deallocation_survive_reopening() {
    let (dev, data, metadata) = split_device("owner", "4096+8", GuardSize::Crc16, 16, 0);
    let p = *dev.protection().unwrap();
    assert_eq!(dev.owner_tag().unwrap(), [0u8; pi::OWNER_TAG_BYTES], "never set: zeros");
    let tag: [u8; pi::OWNER_TAG_BYTES] = std::array::from_fn(|i| (i * 37 % 251) as u8 + 1);
    dev.set_owner_tag(&tag).unwrap();
    drop(dev);
    let (dev, _) = Device::open_split(&data, &metadata, p).unwrap();
    assert_eq!(dev.owner_tag().unwrap(), tag, "kept across reopening");
    drop(dev);
    assert!(pi::clear_split_owner_tag(&metadata).unwrap(), "a metadata file was there");
    let (dev, _) = Device::open_split(&data, &metadata, p).unwrap();
    assert_eq!(dev.owner_tag().unwrap(), [0u8; pi::OWNER_TAG_BYTES], "cleared");
    assert!(!pi::clear_split_owner_tag(&temp_path("owner-absent.pi")).unwrap(), "nothing there");

    // Every block written with PI; rot in block 15 is caught; deallocated,
    // the block reads unchecked and the file is a header and escapes.
    let pract = Io::pract();
    let db = dev.lba_format().data_bytes();
    let content: Vec<u8> = (0..16 * db).map(|i| (i * 13 % 253) as u8).collect();
    dev.write(0, &content, None, &pract).unwrap();
    dev.inject(Fault::BitRot { lba: 15, bit: 3 }).unwrap();
    let mut block = vec![0u8; db];
    assert!(dev.read(15, &mut block, None, &pract).is_err(), "rot caught while the PI is kept");
    dev.deallocate_all().unwrap();
    assert_eq!(std::fs::metadata(&metadata).unwrap().len(), 4096 + 16 * 8, "a header, then 8 bytes per block");
    dev.read(15, &mut block, None, &pract).unwrap();
    let mut rotted = content[15 * db..].to_vec();
    rotted[0] ^= 1 << 3;
    assert_eq!(block, rotted, "unchecked: the data file's bytes");
    dev.write(15, &content[15 * db..], None, &pract).unwrap();
    dev.inject(Fault::BitRot { lba: 15, bit: 3 }).unwrap();
    assert!(dev.read(15, &mut block, None, &pract).is_err(), "written again: checked again");
    drop(dev);

    let (interleaved, path) = device("owner-interleaved", PiType::Type1, "512+8", 4);
    assert_eq!(interleaved.owner_tag().unwrap(), [0u8; pi::OWNER_TAG_BYTES]);
    assert!(matches!(interleaved.set_owner_tag(&tag), Err(Error::Invalid { .. })));
    std::fs::remove_file(path).unwrap();

    assert_eq!(pi::split_protection(&temp_path("owner-absent.pi")).unwrap(), None, "absent: no PI");
    let under_a_file = data.join("sub.pi"); // a path through a regular file: ENOTDIR
    assert!(matches!(pi::split_protection(&under_a_file), Err(Error::Io { .. })), "not absent: an error");
    std::fs::remove_file(&data).unwrap();
    std::fs::remove_file(&metadata).unwrap();
}

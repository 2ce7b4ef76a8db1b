//! Tests of the log that need its private formats: superblocks and anchors
//! crafted with valid CRCs but impossible contents, a ring filled to the
//! last byte, the anchor cadence, the exact bytes persisted. Each names the
//! mutant (cargo-mutants, docs/mutants.md) it was written to kill.

use super::*;
use crate::bytelog::LogError;
use crate::bytelog::SimMedium;

const RING: u64 = 8192;

fn formatted() -> ByteLog<SimMedium> {
    ByteLog::format(SimMedium::new((RING_OFFSET + RING) as usize), 7).unwrap()
}

/// The durable bytes of `log` with `line` (64 bytes) written at `at`.
fn with_line(log: ByteLog<SimMedium>, at: u64, line: &[u8; 64]) -> SimMedium {
    let mut image = log.into_medium().durable().to_vec();
    image[at as usize..at as usize + 64].copy_from_slice(line);
    SimMedium::from_image(image)
}

fn reopened(medium: SimMedium) -> Result<Vec<Record>, Error> {
    ByteLog::open(medium).map(|(_, records)| records)
}

fn is_corrupt(result: Result<Vec<Record>, Error>, what: &str) {
    match result {
        Err(Error::Corrupt { .. }) => {}
        other => panic!("{what}: {other:?}"),
    }
}

/// `ring_bytes < RING_BYTES_MIN || RING_OFFSET + ring_bytes > len`: each
/// half alone refuses, and a ring that ends exactly at the medium's end is
/// fine.
#[test]
fn a_superblock_whose_ring_does_not_fit_is_refused() {
    let small = Superblock { version: VERSION, generation: 7, ring_bytes: RING_BYTES_MIN - LINE_BYTES }.encode();
    is_corrupt(reopened(with_line(formatted(), 0, &small)), "ring below the minimum");
    let big = Superblock { version: VERSION, generation: 7, ring_bytes: RING + LINE_BYTES }.encode();
    is_corrupt(reopened(with_line(formatted(), 0, &big)), "ring past the medium");
    let exact = Superblock { version: VERSION, generation: 7, ring_bytes: RING }.encode();
    assert!(reopened(with_line(formatted(), 0, &exact)).is_ok(), "a ring that ends at the medium's end");
}

/// The anchor's window must be ordered, at most a ring long and start on a
/// line: each condition alone refuses (valid CRC, valid generation).
#[test]
fn an_anchor_with_an_impossible_window_is_refused() {
    let anchor = |head: u64, tail: u64| {
        Anchor { anchor_seq: 99, generation: 7, head, tail, head_seq: 1, stream_crc: 0 }.encode(VERSION)
    };
    for (head, tail, why) in [
        (128, 64, "tail before head"),
        (0, RING + LINE_BYTES, "a window longer than the ring"),
        (32, 32, "head not on a line"),
    ] {
        // Slot 1 of 2 (anchor_seq 99 is odd): the larger sequence wins.
        let medium = with_line(formatted(), 2 * LINE_BYTES, &anchor(head, tail));
        is_corrupt(reopened(medium), why);
    }
}

/// Two records of 4 064 payload bytes (the most one takes there) fill an
/// 8 KiB ring exactly: the
/// second needs no wrap marker (`span > room`, not `>=`) and fits the free
/// space exactly (`waste + span > free`, not `>=`); anchored after each
/// record, the reopened window is the whole ring (`tail - head >
/// ring_bytes`, not `>=`; the replay's "ends early" check, not `<=`); one
/// more record is `LogError::Full` with exactly what it needed.
#[test]
fn a_ring_filled_to_its_last_byte_reopens_whole() {
    let mut log = formatted();
    log.set_anchor_interval(LINE_BYTES);
    assert_eq!(log.payload_max(), 4064);
    let payload = vec![0xA5u8; log.payload_max()];
    assert_eq!(record_span(payload.len()), RING / 2);
    log.append(1, 0, &payload).unwrap();
    log.append(2, 0, &payload).unwrap();
    assert_eq!(log.free_bytes(), 0);
    assert_eq!(log.stats().records, 2, "no wrap marker");
    match log.append(3, 0, &[1u8; 64]) {
        Err(Error::Log(LogError::Full { needed, free })) => assert_eq!((needed, free), (record_span(64), 0)),
        other => panic!("{other:?}"),
    }
    let records = reopened(SimMedium::from_image(log.into_medium().durable().to_vec())).unwrap();
    assert_eq!(records.iter().map(|r| r.tag).collect::<Vec<_>>(), [1, 2]);
}

/// A record that needs a wrap marker counts the wasted room in what it
/// needs (`waste + span`).
#[test]
fn log_full_counts_the_room_a_wrap_wastes() {
    let mut log = formatted();
    log.append(1, 0, &[1u8; 3000]).unwrap(); // span 3 072
    log.truncate(1).unwrap(); // head at 3 072
    log.append(2, 0, &[2u8; 4000]).unwrap(); // span 4 032: tail 7 104, 1 088 to the ring's end, 4 160 free
    match log.append(3, 0, &[3u8; 4060]) {
        // Span 4 096 does not fit the 1 088 at the end: those are wasted too.
        Err(Error::Log(LogError::Full { needed, free })) => assert_eq!((needed, free), (1088 + 4096, 4160)),
        other => panic!("{other:?}"),
    }
    log.append(4, 0, &[4u8; 2000]).unwrap(); // 1 088 + 2 048 fit
    let records = reopened(SimMedium::from_image(log.into_medium().durable().to_vec())).unwrap();
    assert_eq!(records.iter().map(|r| r.tag).collect::<Vec<_>>(), [2, 4]);
}

/// The periodic anchor comes after 256 KiB of log (`256 * 1024`; the
/// comparison `tail - anchored_tail`), or as `set_anchor_interval` says.
#[test]
fn anchors_come_at_their_interval() {
    let big = || ByteLog::format(SimMedium::new((RING_OFFSET + (1 << 20)) as usize), 1).unwrap();
    let mut log = big();
    let fences_after_format = log.stats().fences;
    let payload = vec![9u8; 4000]; // span 4 032
    let before_anchor = (256 * 1024 / record_span(payload.len())) as usize; // the documented cadence
    for _ in 0..before_anchor {
        log.append(1, 0, &payload).unwrap();
    }
    assert_eq!(log.stats().fences - fences_after_format, before_anchor as u64, "no anchor before 256 KiB");
    log.append(1, 0, &payload).unwrap();
    assert_eq!(log.stats().fences - fences_after_format, before_anchor as u64 + 2, "the anchor at 256 KiB");

    let mut log = big();
    log.set_anchor_interval(2 * record_span(payload.len()));
    for _ in 0..4 {
        log.append(1, 0, &payload).unwrap();
    }
    assert_eq!(log.stats().fences - fences_after_format, 4 + 2, "an anchor every second record");
}

/// Bytes persisted are whole lines: the format's anchor line, then a
/// 10-byte record's one line (`len.div_ceil(64) * 64`, added).
#[test]
fn bytes_persisted_are_counted_in_whole_lines() {
    let mut log = formatted();
    assert_eq!(log.stats().bytes_persisted, LINE_BYTES);
    log.append(1, 0, &[0u8; 10]).unwrap();
    assert_eq!(log.stats().bytes_persisted, 2 * LINE_BYTES);
    log.append(1, 0, &[0u8; 100]).unwrap(); // 132 bytes: three lines
    assert_eq!(log.stats().bytes_persisted, 5 * LINE_BYTES);
}

/// A TLV that ends exactly at the payload's end is whole (`rest.len() < 4 +
/// len`, not `<=`); one a byte short is an error, not a panic.
#[test]
fn tlvs_that_end_exactly_at_the_payload_end_decode() {
    let payload = encode_tlvs(&[Tlv { tag: 5, value: b"abc" }, Tlv { tag: 6, value: b"" }]).unwrap();
    let tlvs = decode_tlvs(&payload).unwrap();
    assert_eq!(tlvs.len(), 2);
    assert_eq!((tlvs[0].tag, tlvs[0].value), (5, &b"abc"[..]));
    assert!(matches!(decode_tlvs(&payload[..6]), Err(Error::Corrupt { .. })), "a value cut short");
    assert!(matches!(decode_tlvs(&payload[..9]), Err(Error::Corrupt { .. })), "a header cut short");
}

/// A whole, current header in the ring's last line whose payload would run
/// past the ring's end is where the log ends (`ring.len() - offset`, the
/// room left), never a read past the ring.
#[test]
fn a_header_whose_payload_runs_past_the_ring_ends_the_log() {
    let mut log = formatted();
    log.append(1, 0, &[1u8; 4064]).unwrap(); // span 4 096
    log.append(2, 0, &[2u8; 4000]).unwrap(); // span 4 032: tail at 8 128, one line left
    let header = RecordHeader { flags: 0, tag: 3, payload_len: 100, payload_crc: 0, seq: 3, generation: 7 };
    let mut line = [0u8; 64];
    line[..HEADER_BYTES].copy_from_slice(&header.encode(VERSION));
    let medium = with_line(log, RING_OFFSET + RING - LINE_BYTES, &line);
    let records = reopened(medium).unwrap();
    assert_eq!(records.iter().map(|r| r.tag).collect::<Vec<_>>(), [1, 2]);
}

/// A record takes at most half the ring (whole lines) and its version's
/// limit: 4 064 bytes in the smallest ring, 65 504 from a 128 KiB ring on,
/// 4 064 in a log of version 1 whatever its ring; one byte more is
/// `TooLarge` naming the limit, and the largest record reopens whole.
#[test]
fn a_record_takes_at_most_half_the_ring_and_its_versions_limit() {
    for (version, ring, max) in [
        (VERSION, RING_BYTES_MIN, 4064),
        (VERSION, RING_BYTES_MIN + LINE_BYTES, 4064), // half is 4 128: 4 096 in whole lines
        (VERSION, 20 << 10, 10 * 1024 - 32),
        (VERSION, 128 << 10, 65_504),
        (VERSION, 1 << 20, 65_504),
        (1, 1 << 20, 4064),
        (1, RING_BYTES_MIN, 4064),
    ] {
        assert_eq!(payload_max(version, ring), max, "version {version}, ring {ring}");
    }
    for ring in [RING_BYTES_MIN, 20 << 10, 128 << 10, 1 << 20] {
        let mut log = ByteLog::format(SimMedium::new((RING_OFFSET + ring) as usize), 3).unwrap();
        let max = log.payload_max();
        assert_eq!((max, log.version()), (payload_max(VERSION, ring), VERSION));
        let big: Vec<u8> = (0..max).map(|i| (i * 13 + 1) as u8).collect();
        match log.append(1, 0, &[0u8; 65_505][..max + 1]) {
            Err(Error::TooLarge { value, max: limit, .. }) => assert_eq!((value, limit), (max as u64 + 1, max as u64)),
            other => panic!("ring {ring}: {other:?}"),
        }
        // Twice, so that the second wraps where the ring is small.
        for tag in [2, 3] {
            log.append(tag, 0, &big).unwrap();
            log.checkpoint().unwrap();
        }
        log.append(4, 0, &big).unwrap();
        let records = reopened(SimMedium::from_image(log.into_medium().durable().to_vec())).unwrap();
        assert_eq!(records.len(), 1, "ring {ring}");
        assert_eq!((records[0].tag, &records[0].payload), (4, &big));
    }
}

/// Superblocks of versions this build does not know (0, and the one after
/// it) are refused with their version named, never read as a log.
#[test]
fn a_log_of_an_unknown_version_is_refused() {
    for version in [0, VERSION + 1] {
        let sb = Superblock { version, generation: 7, ring_bytes: RING }.encode();
        match reopened(with_line(formatted(), 0, &sb)) {
            Err(Error::Corrupt { detail, .. }) => assert!(detail.contains(&format!("version {version}")), "{detail}"),
            other => panic!("version {version}: {other:?}"),
        }
    }
}

/// Anchors and records carry the log's version: a whole, current record of
/// the right sequence number and generation but another version is where
/// the log ends, and an anchor of another version is no anchor.
#[test]
fn anchors_and_records_of_another_version_are_not_the_logs() {
    let mut log = formatted();
    log.append(1, 0, &[1u8; 100]).unwrap(); // span 192: tail at 192
    let payload = [9u8; 20];
    let header = RecordHeader {
        flags: 0,
        tag: 2,
        payload_len: payload.len() as u32,
        payload_crc: crate::crc32c::checksum(&payload),
        seq: 2,
        generation: 7,
    };
    for (version, replayed) in [(VERSION, 2), (1, 1)] {
        let mut line = [0u8; 64];
        line[..HEADER_BYTES].copy_from_slice(&header.encode(version));
        line[HEADER_BYTES..HEADER_BYTES + payload.len()].copy_from_slice(&payload);
        let image = {
            let mut image = log.medium().durable().to_vec();
            image[(RING_OFFSET + 192) as usize..][..64].copy_from_slice(&line);
            image
        };
        let records = reopened(SimMedium::from_image(image)).unwrap();
        assert_eq!(records.len(), replayed, "a record of version {version}");
    }
    // Slot 1 holds the format's anchor (anchor sequence 1): each replaces it.
    let anchor = Anchor { anchor_seq: 99, generation: 7, head: 0, tail: 0, head_seq: 1, stream_crc: 0 };
    is_corrupt(reopened(with_line(formatted(), 2 * LINE_BYTES, &anchor.encode(1))), "the only anchor of version 1");
    assert!(reopened(with_line(formatted(), 2 * LINE_BYTES, &anchor.encode(VERSION))).is_ok(), "of this version");
}

/// `for_each_record` walks what a reopen replays — across wrap markers,
/// truncations and records of every size — and a record changed on the
/// medium since it was appended is damage, not skipped.
#[test]
fn the_records_read_back_are_the_ones_a_reopen_replays() {
    let mut log = formatted();
    let mut state = 0x5EED_u64;
    let mut next = |n: u64| {
        state = state.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let walked = |log: &ByteLog<SimMedium>| {
        let mut out = Vec::new();
        log.for_each_record(|r| {
            out.push((r.seq, r.tag, r.payload.to_vec()));
            Ok(())
        })
        .unwrap();
        out
    };
    for step in 0..400u64 {
        let len = match next(4) {
            0 => 0,
            1 => 1 + next(64) as usize,
            _ => next(log.payload_max() as u64 + 1) as usize,
        };
        let payload: Vec<u8> = (0..len).map(|i| (i as u64 ^ step) as u8).collect();
        if log.append(1 + (step % 7) as u16, 0, &payload).is_err() || next(5) == 0 {
            let keep = next(3);
            let last = log.next_seq() - 1;
            if last > keep && last - keep >= log.head_seq {
                log.truncate(last - keep).unwrap();
            }
        }
        let image = SimMedium::from_image(log.medium().durable().to_vec());
        let replayed: Vec<_> = reopened(image).unwrap().into_iter().map(|r| (r.seq, r.tag, r.payload)).collect();
        assert_eq!(walked(&log), replayed, "step {step}");
    }
    assert!(log.tail > 10 * RING, "the ring wrapped only {} times", log.tail / RING);
    let Some((seq, _, payload)) = walked(&log).into_iter().find(|(_, _, p)| !p.is_empty()) else {
        panic!("no record with a payload left")
    };
    let ring = log.medium.view(RING_OFFSET, RING).unwrap();
    let at = ring.windows(payload.len()).position(|w| w == payload).unwrap() as u64;
    log.medium.write(RING_OFFSET + at, &[payload[0] ^ 1]).unwrap();
    match log.for_each_record(|_| Ok(())) {
        Err(Error::Corrupt { location, .. }) => assert!(location.contains(&format!("record {seq} ")), "{location}"),
        other => panic!("a damaged record walked: {other:?}"),
    }
}

//! ByteLog: round trips, wrap-around, truncation, errors, media faults, and
//! the crash harness (every store/flush/fence, every subset of dirty lines,
//! torn lines) over at least 10^5 crash states.

mod common;

use common::proptest_config;
use csumkit::bytelog::{
    crash, decode_tlvs, AppendRecord, ByteLog, GroupCommit, Medium, MmapMedium, Persist, SimMedium, Tlv, FLAG_BATCH,
    LINE_BYTES, RING_OFFSET,
};
use csumkit::Error;
use proptest::prelude::*;

fn small_log() -> ByteLog<SimMedium> {
    ByteLog::format(SimMedium::new((RING_OFFSET + 8192) as usize), 1).unwrap()
}

/// What survives a power cut right now: the medium's durable bytes only
/// (replaying the current bytes could not see a missing flush or fence).
fn durable(medium: SimMedium) -> SimMedium {
    SimMedium::from_image(medium.durable().to_vec())
}

#[test]
fn round_trip_single_and_batched_tlvs() {
    let mut log = small_log();
    let a = log.append_tlvs(&[Tlv { tag: 9, value: b"inode 12: size 4096, mtime 1700000000" }]).unwrap();
    let b = log.append_tlvs(&[Tlv { tag: 1, value: b"add range" }, Tlv { tag: 2, value: b"dentry x" }]).unwrap();
    assert_eq!((a, b), (1, 2));
    let (log, records) = ByteLog::open(durable(log.into_medium())).unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!((records[0].tag, records[0].flags), (9, 0));
    assert_eq!(
        decode_tlvs(&records[0].payload).unwrap(),
        [Tlv { tag: 9, value: b"inode 12: size 4096, mtime 1700000000".as_slice() }]
    );
    assert_eq!((records[1].tag, records[1].flags), (0, FLAG_BATCH));
    assert_eq!(decode_tlvs(&records[1].payload).unwrap().len(), 2);
    assert_eq!(log.next_seq(), 3);
}

#[test]
fn a_single_small_tlv_persists_at_most_128_bytes() {
    for len in [24usize, 40, 64] {
        let mut log = small_log();
        let before = log.stats();
        log.append_tlvs(&[Tlv { tag: 3, value: &vec![7u8; len] }]).unwrap();
        let after = log.stats();
        assert!(after.bytes_persisted - before.bytes_persisted <= 128, "{len}-byte TLV");
        assert_eq!(after.fences - before.fences, 1, "one fence per commit");
    }
}

#[test]
fn wraps_many_laps_with_truncation_and_reopens_anywhere() {
    let mut log = small_log();
    let (mut live, mut appended) = (Vec::new(), 0);
    for i in 0..2000u32 {
        let value = vec![(i % 251) as u8; 24 + (i as usize * 7) % 300];
        match log.append_tlvs(&[Tlv { tag: 5, value: &value }]) {
            Ok(seq) => {
                live.push((seq, value));
                appended += 1;
            }
            Err(Error::Log(csumkit::bytelog::LogError::Full { .. })) => {
                let keep = live.len() / 2;
                let through = live[live.len() - keep - 1].0;
                log.truncate(through).unwrap();
                live.drain(..live.len() - keep);
                continue;
            }
            Err(e) => panic!("{e}"),
        }
        if i % 97 == 0 {
            let (reopened, records) = ByteLog::open(durable(log.into_medium())).unwrap();
            assert_eq!(records.iter().map(|r| r.seq).collect::<Vec<_>>(), live.iter().map(|l| l.0).collect::<Vec<_>>());
            for (r, (_, v)) in records.iter().zip(&live) {
                assert_eq!(decode_tlvs(&r.payload).unwrap()[0].value, &v[..]);
            }
            log = reopened;
        }
    }
    assert!(log.next_seq() - 1 > appended + 10, "wrap markers took sequence numbers: the ring wrapped");
}

#[test]
fn errors_are_typed() {
    let mut log = small_log();
    let big = vec![0u8; 5000];
    assert!(matches!(log.append(1, 0, &big), Err(Error::TooLarge { .. })));
    // The largest record is one 4 KiB page: 4064 payload bytes fit, 4065 do not.
    let largest = vec![7u8; 4096 - 32];
    let seq = log.append(1, 0, &largest).unwrap();
    assert!(matches!(log.append(1, 0, &[0u8; 4096 - 31]), Err(Error::TooLarge { max: 4064, .. })));
    let (_, records) = ByteLog::open(durable(log.into_medium())).unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!((records[0].seq, records[0].payload.as_slice()), (seq, largest.as_slice()));
    let mut log = small_log();
    assert!(matches!(log.append(0xFFFF, 0, b"x"), Err(Error::Invalid { .. })));
    assert!(matches!(log.truncate(5), Err(Error::Invalid { .. })));
    let mut filled = 0;
    let err = loop {
        match log.append(1, 0, &[1u8; 1000]) {
            Ok(_) => filled += 1,
            Err(e) => break e,
        }
    };
    assert!(matches!(err, Error::Log(csumkit::bytelog::LogError::Full { .. })) && filled >= 7, "{err} after {filled}");
    assert!(err.to_string().contains("checkpoint or truncate first"));
    log.checkpoint().unwrap();
    log.append(1, 0, &[1u8; 1000]).unwrap();
    assert!(matches!(ByteLog::open(SimMedium::new(16384)), Err(Error::Corrupt { .. })), "blank medium");
    assert!(matches!(ByteLog::format(SimMedium::new(4096), 1), Err(Error::Invalid { .. })), "too small");
}

#[test]
fn records_of_an_earlier_format_are_stale() {
    let mut log = small_log();
    for _ in 0..20 {
        log.append(1, 0, &[9u8; 100]).unwrap();
    }
    let medium = log.into_medium();
    let generation = ByteLog::next_generation(&medium);
    assert_eq!(generation, 2);
    let mut log = ByteLog::format(medium, generation).unwrap();
    log.append(1, 0, b"new").unwrap();
    let (_, records) = ByteLog::open(durable(log.into_medium())).unwrap();
    assert_eq!(records.len(), 1, "the old generation's records are not replayed");
}

/// Equal-sized records across a re-format: the new generation's records
/// end exactly where an old record begins, with the very sequence number
/// replay expects next. Only the generation tells them apart.
#[test]
fn equal_sized_records_of_an_earlier_format_are_stale() {
    let mut log = small_log();
    for i in 0..40u8 {
        log.append(1, 0, &[i; 100]).unwrap();
    }
    let medium = log.into_medium();
    let generation = ByteLog::next_generation(&medium);
    let mut log = ByteLog::format(medium, generation).unwrap();
    let first = log.next_seq();
    for i in 0..5u8 {
        log.append(1, 0, &[0xA0 | i; 100]).unwrap();
    }
    let (_, records) = ByteLog::open(durable(log.into_medium())).unwrap();
    assert_eq!(records.len(), 5, "old records after the new ones must not be replayed");
    assert_eq!(records[0].seq, first);
    assert!(records.iter().all(|r| r.payload[0] & 0xF0 == 0xA0));
}

/// A record that is internally valid (its own CRCs, generation and
/// sequence number right) but not the one the log wrote — other bytes of
/// the same length — is caught by the anchor's payload-stream CRC.
#[test]
fn a_foreign_record_inside_the_anchored_window_is_damage() {
    let write = |second: u8| {
        let mut log = small_log();
        for payload in [[1u8; 60], [second; 60], [3u8; 60], [4u8; 60]] {
            log.append(7, 0, &payload).unwrap();
        }
        let first = log.next_seq() - 4;
        log.truncate(first).unwrap(); // anchors the window of records 2..=4
        log.into_medium().durable().to_vec()
    };
    let (ours, foreign) = (write(2), write(0xEE));
    let (_, records) = ByteLog::open(SimMedium::from_image(ours.clone())).unwrap();
    assert_eq!(records.len(), 3);
    // Record 2's lines from the other log, same offset: a valid record (the
    // anchors differ too, in their stream CRCs: ours stays).
    let differs: Vec<usize> = (RING_OFFSET as usize..ours.len()).filter(|&i| ours[i] != foreign[i]).collect();
    let (lo, hi) = (*differs.first().unwrap(), *differs.last().unwrap());
    let mut image = ours.clone();
    image[lo..=hi].copy_from_slice(&foreign[lo..=hi]);
    let err = ByteLog::open(SimMedium::from_image(image)).map(|_| ()).unwrap_err();
    assert!(err.to_string().contains("payload stream CRC32C"), "{err}");
}

/// Damage in a committed record with later records after it is reported;
/// damage is never replayed as data.
#[test]
fn media_faults_are_reported_never_replayed() {
    let mut rng = 0x1234_5678_9abc_def1u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut reported, mut trials) = (0, 0);
    for trial in 0..400 {
        let mut log = small_log();
        let mut written = Vec::new();
        for i in 0..(10 + trial % 20) {
            let v = vec![(i * 3 + trial) as u8; 24 + (i * 13) % 60];
            written.push((log.append_tlvs(&[Tlv { tag: 2, value: &v }]).unwrap(), v));
        }
        if trial % 3 == 0 {
            log.truncate(written[written.len() / 2].0).unwrap(); // an anchored window
        }
        let mut image = log.into_medium().durable().to_vec();
        let line = (RING_OFFSET / LINE_BYTES) as usize + (next() % 40) as usize;
        if trial % 2 == 0 {
            image[line * 64..line * 64 + 64].fill(0);
        } else {
            let bit = (next() % 512) as usize;
            image[line * 64 + bit / 8] ^= 1 << (bit % 8);
        }
        trials += 1;
        match ByteLog::open(SimMedium::from_image(image)) {
            Err(Error::Corrupt { .. }) => reported += 1,
            Err(e) => panic!("unexpected error {e}"),
            Ok((_, records)) => {
                for r in &records {
                    let (_, v) = written.iter().find(|(s, _)| *s == r.seq).expect("only written records");
                    assert_eq!(&decode_tlvs(&r.payload).unwrap()[0].value, &&v[..], "record {} altered", r.seq);
                }
                // Anything lost must be the newest record (indistinguishable from a torn last write)
                // or a line the log does not use.
                let lost: Vec<u64> =
                    written.iter().map(|w| w.0).filter(|s| !records.iter().any(|r| r.seq == *s)).collect();
                let truncated = if trial % 3 == 0 { written[written.len() / 2].0 } else { 0 };
                let lost: Vec<u64> = lost.into_iter().filter(|&s| s > truncated).collect();
                assert!(lost.is_empty() || lost == [written.last().unwrap().0], "lost {lost:?} silently");
            }
        }
    }
    assert!(reported * 3 > trials, "most faults land in records and are reported ({reported}/{trials})");
}

/// The periodic anchor under crash testing: a large ring, an anchor every
/// 2 KiB of log and few truncations, so that anchors are written between
/// commits many times while every store, flush and fence is crashed.
#[test]
fn crash_harness_covers_periodic_anchors() {
    let mut total = crash::CrashReport::default();
    for seed in 1..=3 {
        let config = crash::Config {
            ops: 2_000,
            seed,
            states_max: 40_000,
            ring_bytes: 256 << 10,
            anchor_every: Some(2048),
            truncate_percent: 1,
            value_bytes_max: 64,
        };
        let report = crash::run_with(config).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        total.states += report.states;
        total.records += report.records;
    }
    // ~100 bytes a record: well over one anchor interval per seed.
    assert!(total.records > 150 && total.states > 60_000, "{total:?}");
}

/// Records of many pages (values up to 40 000 bytes, records up to the
/// 65 504 a 256 KiB ring takes): crashed at every store, flush and fence
/// with random subsets of their hundreds of dirty lines, none is replayed
/// torn and none acknowledged is lost.
#[test]
fn crash_harness_covers_records_of_many_pages() {
    let mut total = crash::CrashReport::default();
    for seed in 1..=2 {
        let config = crash::Config {
            ops: 400,
            seed,
            states_max: 100_000,
            ring_bytes: 256 << 10,
            anchor_every: None,
            truncate_percent: 8,
            value_bytes_max: 40_000,
        };
        let report = crash::run_with(config).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        total.states += report.states;
        total.records += report.records;
        total.wraps += report.wraps;
        total.payload_bytes += report.payload_bytes;
    }
    println!("{total:?}");
    assert!(total.records >= 30 && total.wraps >= 2 && total.states >= 200_000, "{total:?}");
    assert!(total.payload_bytes / total.records > 8192, "records of several pages: {total:?}");
}

/// A log the last build of format version 1 wrote
/// (`tests/data/bytelog/README.md`: an 8 KiB ring, a wrap, two
/// truncations): this build replays its records, and appends to it as
/// version 1 — records of at most 4 064 bytes, the superblock unchanged —
/// so that a build reading only version 1 could still replay it.
#[test]
fn a_version_1_log_from_an_older_build_replays_and_is_appended_to_as_version_1() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/bytelog/v1-ring8k-gen5.bin");
    let image = std::fs::read(path).unwrap();
    let payload = |i: u64, len: usize| -> Vec<u8> { (0..len).map(|k| (i as usize * 31 + k * 7) as u8).collect() };
    let (mut log, records) = ByteLog::open(SimMedium::from_image(image)).unwrap();
    let got: Vec<(u64, u16, Vec<u8>)> = records.into_iter().map(|r| (r.seq, r.tag, r.payload)).collect();
    let want: Vec<(u64, u16, Vec<u8>)> = [(6, 5, 1500), (7, 6, 64), (8, 7, 0), (9, 8, 2000)]
        .map(|(seq, i, len)| (seq, i as u16 * 3, payload(i, len)))
        .to_vec();
    assert_eq!(got, want);
    assert_eq!((log.version(), log.payload_max(), log.next_seq()), (1, 4064, 10));
    assert!(matches!(log.append(1, 0, &[0u8; 4065]), Err(Error::TooLarge { max: 4064, .. })));
    log.checkpoint().unwrap();
    let seq = log.append(30, 0, &payload(10, 4064)).unwrap();
    let medium = durable(log.into_medium());
    assert_eq!(medium.durable()[8], 1, "the superblock still says version 1");
    // Replay takes only records of the superblock's version: this one is version 1.
    let (log, records) = ByteLog::open(medium).unwrap();
    assert_eq!(log.version(), 1);
    assert_eq!(
        records.iter().map(|r| (r.seq, r.tag, r.payload.clone())).collect::<Vec<_>>(),
        [(seq, 30, payload(10, 4064))]
    );
}

#[test]
fn crash_harness_checks_at_least_100k_states() {
    let mut total = crash::CrashReport::default();
    for seed in 1..=4u64 {
        let r = crash::run(4000, seed, 30_000).unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        total.points += r.points;
        total.states += r.states;
        total.records += r.records;
        total.wraps += r.wraps;
    }
    println!("{total:?}");
    assert!(total.states >= 100_000, "{total:?}");
    assert!(total.wraps >= 4, "the workload wraps the ring: {total:?}");
}

#[test]
fn group_commit_batches_writers_and_replays_everything() {
    let group = GroupCommit::new(ByteLog::format(SimMedium::new(1 << 20), 1).unwrap());
    std::thread::scope(|s| {
        for w in 0..8u8 {
            let group = &group;
            s.spawn(move || {
                for i in 0..200u8 {
                    group
                        .commit(&[Tlv {
                            tag: w as u16 + 1,
                            value: &[w, i, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
                        }])
                        .unwrap();
                }
            });
        }
    });
    let log = group.into_inner();
    let records_written = log.stats().records;
    let (_, records) = ByteLog::open(durable(log.into_medium())).unwrap();
    let mut seen: Vec<(u8, u8)> = Vec::new();
    for r in &records {
        for t in decode_tlvs(&r.payload).unwrap() {
            seen.push((t.value[0], t.value[1]));
        }
    }
    assert_eq!(seen.len(), 1600);
    for w in 0..8u8 {
        let mine: Vec<u8> = seen.iter().filter(|x| x.0 == w).map(|x| x.1).collect();
        assert_eq!(mine, (0..200).collect::<Vec<u8>>(), "writer {w}'s commits in order");
    }
    // Every record written is durable and replayed (batches make fewer
    // records than commits, never more).
    assert_eq!(records.len() as u64, records_written);
    assert!(records.len() <= 1600);
}

/// A log whose first append waits until the test lets it go (so writers
/// queue behind it, deterministically: the test watches
/// `GroupCommit::queued`) and whose second append may fail; it counts what
/// is durable.
struct GatedLog {
    records: Vec<(u16, u8, Vec<u8>)>,
    calls: usize,
    fail_second: bool,
    in_first_append: std::sync::Arc<std::sync::atomic::AtomicBool>,
    release: std::sync::Arc<std::sync::atomic::AtomicBool>,
    durable: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl AppendRecord for GatedLog {
    fn append_record(&mut self, tag: u16, flags: u8, payload: &[u8]) -> Result<u64, Error> {
        use std::sync::atomic::Ordering::SeqCst;
        self.calls += 1;
        if self.calls == 1 {
            self.in_first_append.store(true, SeqCst);
            while !self.release.load(SeqCst) {
                std::thread::yield_now();
            }
        }
        if self.calls == 2 && self.fail_second {
            return Err(Error::Invalid { what: "test log", detail: "injected failure".into() });
        }
        self.records.push((tag, flags, payload.to_vec()));
        self.durable.store(self.records.len() as u64, SeqCst);
        Ok(self.records.len() as u64)
    }
}

/// One leader inside its append, `values.len()` writers queued behind it
/// (each committing one TLV of tag 2, 3, …), then the append let go; the
/// outcomes (the leader's first) and the log.
fn queued_commits(fail_second: bool, values: &[Vec<u8>]) -> (Vec<Result<u64, Error>>, GatedLog) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let (in_first_append, release) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let durable = Arc::new(AtomicU64::new(0));
    let group = GroupCommit::new(GatedLog {
        records: Vec::new(),
        calls: 0,
        fail_second,
        in_first_append: Arc::clone(&in_first_append),
        release: Arc::clone(&release),
        durable: Arc::clone(&durable),
    });
    let outcomes: Vec<Result<u64, Error>> = std::thread::scope(|s| {
        let first = s.spawn(|| group.commit(&[Tlv { tag: 1, value: &[0; 24] }]));
        while !in_first_append.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        let rest: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let (group, durable) = (&group, &durable);
                s.spawn(move || {
                    let r = group.commit(&[Tlv { tag: i as u16 + 2, value }]);
                    if let Ok(seq) = r {
                        // Holds without timing: the leader stores `durable`
                        // before it finishes any writer it carried.
                        assert!(seq <= durable.load(Ordering::SeqCst), "acknowledged before durable");
                    }
                    r
                })
            })
            .collect();
        while group.queued() < values.len() {
            std::thread::yield_now();
        }
        release.store(true, Ordering::SeqCst);
        std::iter::once(first).chain(rest).map(|h| h.join().unwrap()).collect()
    });
    (outcomes, group.into_inner())
}

#[test]
fn group_commit_carries_queued_writers_in_one_record_and_acks_only_durable_ones() {
    let values: Vec<Vec<u8>> = (2..9u8).map(|w| vec![w; 32]).collect();
    for fail_second in [false, true] {
        let (outcomes, log) = queued_commits(fail_second, &values);
        assert_eq!(outcomes[0].as_ref().unwrap(), &1);
        if fail_second {
            for r in &outcomes[1..] {
                assert!(matches!(r, Err(Error::Invalid { what: "group commit", .. })), "{r:?}");
            }
            assert_eq!(log.records.len(), 1, "nothing of the failed batch is recorded");
        } else {
            assert!(outcomes[1..].iter().all(|r| r.as_ref().ok() == Some(&2)), "{outcomes:?}");
            assert_eq!(log.records.len(), 2, "the queued writers share one record");
            let (tag, flags, payload) = &log.records[1];
            assert_eq!((*tag, *flags), (0, FLAG_BATCH));
            let mut tags: Vec<u16> = decode_tlvs(payload).unwrap().iter().map(|t| t.tag).collect();
            tags.sort_unstable();
            assert_eq!(tags, (2..9).collect::<Vec<u16>>());
        }
    }
}

/// Queued writers whose TLVs do not fit one record are carried in as many
/// records as needed, each at most one page; every writer
/// is acknowledged with the record that holds its TLV; a lone writer's
/// record is a single TLV, not a batch.
#[test]
fn group_commit_splits_a_queue_larger_than_one_record() {
    // 2028-byte values: 2032 encoded, two fill a 4064-byte record exactly.
    let values: Vec<Vec<u8>> = (0..7u8).map(|w| vec![w; 2028]).collect();
    let (outcomes, log) = queued_commits(false, &values);
    assert_eq!(log.records.len(), 1 + 4, "7 queued writers, two per record");
    for (i, (tag, flags, payload)) in log.records.iter().enumerate() {
        assert!(payload.len() <= 4064, "record {i}: {} bytes", payload.len());
        if (1..4).contains(&i) {
            assert_eq!(payload.len(), 4064, "record {i}: two queued commits fill it exactly");
        }
        let tags: Vec<u16> = decode_tlvs(payload).unwrap().iter().map(|t| t.tag).collect();
        for t in &tags {
            assert_eq!(outcomes[usize::from(*t) - 1].as_ref().ok(), Some(&(i as u64 + 1)), "tag {t}");
        }
        if tags.len() == 1 {
            assert_eq!((*tag, *flags), (tags[0], 0), "record {i}: one TLV is not a batch");
        } else {
            assert_eq!((*tag, *flags), (0, FLAG_BATCH), "record {i}");
        }
    }
    let mut carried: Vec<u16> =
        log.records.iter().flat_map(|r| decode_tlvs(&r.2).unwrap().iter().map(|t| t.tag).collect::<Vec<_>>()).collect();
    carried.sort_unstable();
    assert_eq!(carried, (1..=8).collect::<Vec<u16>>(), "every writer carried once");
}

/// A commit must hold 1.. TLVs that fit one record.
#[test]
fn group_commit_refuses_empty_and_oversized_commits() {
    let group = GroupCommit::new(ByteLog::format(SimMedium::new(1 << 16), 1).unwrap());
    assert!(matches!(group.commit(&[]), Err(Error::Invalid { what: "commit", .. })));
    let fits = vec![1u8; 4064 - 4];
    assert_eq!(group.commit(&[Tlv { tag: 1, value: &fits }]).unwrap(), 1);
    let over = vec![1u8; 4064 - 3];
    assert!(matches!(group.commit(&[Tlv { tag: 1, value: &over }]), Err(Error::Invalid { what: "commit", .. })));
    assert_eq!(group.queued(), 0);
}

#[test]
fn memory_mapped_file_round_trip() {
    let path = std::env::temp_dir().join(format!("csumkit-bytelog-{}", std::process::id()));
    for persist in [Persist::Msync, Persist::CacheLines] {
        let medium = MmapMedium::open(&path, 1 << 20, persist).unwrap();
        let mut log = ByteLog::format(medium, 7).unwrap();
        for i in 0..100u8 {
            log.append_tlvs(&[Tlv { tag: 1, value: &[i; 40] }]).unwrap();
        }
        drop(log);
        let (_, records) = ByteLog::open(MmapMedium::open(&path, 1 << 20, persist).unwrap()).unwrap();
        assert_eq!(records.len(), 100);
        assert_eq!(decode_tlvs(&records[99].payload).unwrap()[0].value, &[99u8; 40]);
        std::fs::remove_file(&path).unwrap();
    }
    let auto = MmapMedium::open_auto(&path, 1 << 20).unwrap();
    assert_eq!(auto.len(), 1 << 20);
    std::fs::remove_file(&path).unwrap();
}

proptest! {
    #![proptest_config(proptest_config(32))]

    #[test]
    fn any_bytes_open_to_records_or_a_typed_error(image in prop::collection::vec(any::<u8>(), 0..20_000), keep_super in any::<bool>()) {
        let mut image = image;
        image.resize((RING_OFFSET + 8192) as usize, 0);
        if keep_super {
            let formatted = small_log().into_medium().durable().to_vec();
            image[..RING_OFFSET as usize].copy_from_slice(&formatted[..RING_OFFSET as usize]);
        }
        match ByteLog::open(SimMedium::from_image(image)) {
            // Whatever replays is a sequence of records in order.
            Ok((_, records)) => prop_assert!(records.windows(2).all(|w| w[0].seq < w[1].seq)),
            Err(e) => prop_assert!(
                matches!(e, Error::Corrupt { .. } | Error::Invalid { .. }),
                "untyped error from arbitrary bytes: {:?}", e
            ),
        }
    }
}

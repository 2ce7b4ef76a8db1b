//! The async-checksum write path: both modes write the same bytes and
//! record the same checksums (equal to a bit-at-a-time reference), on a real
//! file with O_DIRECT and on a sink that injects short writes and errors;
//! and what a power cut leaves of the data and its checksum file.

mod common;

use common::{bitwise, bytes, proptest_config, MemoryNodes, CRC32C};
use csumkit::csum_tree::ChecksumTree;
use csumkit::pipeline::{
    io_uring_available, AlignedBuf, ChecksumFile, ChecksumStore, FileSink, MemoryStore, Mode, Sink, Writer,
};
use csumkit::{Algorithm, DurableFile, Error};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::{Arc, Mutex};

/// An in-memory device that can misbehave.
#[derive(Default)]
struct FaultySink {
    media: Vec<u8>,
    /// Largest count one call accepts (short writes); 0 = no limit.
    max_per_call: usize,
    /// Fail once this many bytes were accepted in total.
    fail_after: Option<usize>,
    /// Accept nothing (`Ok(0)`) once this many bytes were accepted.
    stall_after: Option<usize>,
    /// Every this many calls, fail with `EINTR` (nothing written).
    interrupt_every: usize,
    /// Claim this many bytes more than were written (a device that lies).
    over_report: usize,
    calls: usize,
    accepted: usize,
}

impl Sink for FaultySink {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<usize> {
        self.calls += 1;
        if self.interrupt_every > 0 && self.calls.is_multiple_of(self.interrupt_every) {
            return Err(io::Error::from(io::ErrorKind::Interrupted));
        }
        if self.fail_after.is_some_and(|limit| self.accepted >= limit) {
            return Err(io::Error::other("injected EIO"));
        }
        if self.stall_after.is_some_and(|limit| self.accepted >= limit) {
            return Ok(0);
        }
        let mut n = data.len();
        if self.max_per_call > 0 {
            n = n.min(self.max_per_call);
        }
        if let Some(limit) = self.fail_after {
            n = n.min(limit - self.accepted).max(1);
        }
        let end = offset as usize + n;
        if self.media.len() < end {
            self.media.resize(end, 0);
        }
        self.media[offset as usize..end].copy_from_slice(&data[..n]);
        self.accepted += n;
        Ok(n + self.over_report)
    }

    fn sync(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn buffer_of(data: &[u8]) -> AlignedBuf {
    let mut buffer = AlignedBuf::zeroed(data.len());
    buffer.copy_from_slice(data);
    buffer
}

proptest! {
    #![proptest_config(proptest_config(64))]

    #[test]
    fn sync_and_async_write_the_same_bytes_and_checksums(
        block_shift in 9u32..=14,
        writes in proptest::collection::vec((0u64..64, 1usize..9, any::<u64>()), 1..12),
        max_per_call in prop_oneof![Just(0usize), 1usize..5000],
        algorithm in prop_oneof![Just(Algorithm::Crc32c), Just(Algorithm::Crc64Nvme), Just(Algorithm::Crc16T10Dif)],
    ) {
        let block = 1usize << block_shift;
        let mut results = Vec::new();
        for mode in [Mode::Sync, Mode::Async, Mode::Uring] {
            let sink = FaultySink { max_per_call, ..FaultySink::default() };
            let mut writer = Writer::new(sink, MemoryStore::default(), mode, block, algorithm).unwrap();
            let mut reference = MemoryStore::default();
            for &(first_block, blocks, seed) in &writes {
                let data = bytes(seed, blocks * block);
                let done = writer.write(first_block * block as u64, buffer_of(&data)).unwrap();
                prop_assert_eq!(&done.buffer[..], &data[..], "buffer comes back unchanged");
                let expected: Vec<u64> = data.chunks(block).map(|b| algorithm.checksum(b)).collect();
                prop_assert_eq!(&done.checksums, &expected);
                reference.record(first_block, &expected).unwrap();
            }
            let (sink, store) = writer.into_parts();
            prop_assert_eq!(&store, &reference);
            results.push((sink.media, store));
        }
        prop_assert_eq!(&results[0], &results[1]);
        prop_assert_eq!(&results[0], &results[2]);
    }
}

#[test]
fn checksums_match_the_bitwise_reference() {
    let data = bytes(11, 8 * 4096);
    let mut writer =
        Writer::new(FaultySink::default(), MemoryStore::default(), Mode::Async, 4096, Algorithm::Crc32c).unwrap();
    let done = writer.write(0, buffer_of(&data)).unwrap();
    for (i, block) in data.chunks(4096).enumerate() {
        assert_eq!(done.checksums[i], bitwise(CRC32C, block));
        assert_eq!(writer.store().get(i as u64), Some(bitwise(CRC32C, block)));
    }
}

/// `EINTR` from the device is retried, not an error (every byte lands,
/// with its checksum); a device that claims more than it was given never
/// moves the write past its end — in every mode.
#[test]
fn interrupted_and_over_reported_writes_still_write_everything_once() {
    let data = bytes(9, 6 * 4096);
    for mode in [Mode::Sync, Mode::Async, Mode::Uring] {
        for sink in [
            FaultySink { interrupt_every: 2, max_per_call: 3000, ..FaultySink::default() },
            FaultySink { interrupt_every: 3, ..FaultySink::default() },
            FaultySink { over_report: 5000, max_per_call: 10_000, ..FaultySink::default() },
        ] {
            let mut writer = Writer::new(sink, MemoryStore::default(), mode, 4096, Algorithm::Crc32c).unwrap();
            let done = writer.write(4096, buffer_of(&data)).unwrap_or_else(|e| panic!("{mode:?}: {e}"));
            for (i, block) in data.chunks(4096).enumerate() {
                assert_eq!(done.checksums[i], bitwise(CRC32C, block), "{mode:?}");
            }
            let (sink, _) = writer.into_parts();
            // Nothing is written past the range (a lying device's count is
            // capped at what was left); an honest one holds every byte.
            assert!(sink.media.len() <= 4096 + data.len(), "{mode:?}: written past the end");
            if sink.over_report == 0 {
                assert!(sink.media[4096..] == data[..], "{mode:?}: the device holds other bytes");
            }
        }
    }
}

#[test]
fn failed_and_stalled_writes_record_nothing_and_invalidate_the_range() {
    for mode in [Mode::Sync, Mode::Async, Mode::Uring] {
        for faulty in [
            FaultySink { fail_after: Some(4096 * 3 + 100), ..FaultySink::default() },
            FaultySink { stall_after: Some(4096 * 3 + 100), max_per_call: 1000, ..FaultySink::default() },
        ] {
            let mut writer = Writer::new(faulty, MemoryStore::default(), mode, 4096, Algorithm::Crc32c).unwrap();
            // A first write succeeds: blocks 0 and 1 have checksums.
            let first = writer.write(0, buffer_of(&bytes(1, 2 * 4096))).unwrap();
            assert_eq!(writer.store().len(), 2);
            // Overwriting block 1 and adding 2..4 fails part way (after 3 blocks + 100 bytes in total).
            let err = writer.write(4096, buffer_of(&bytes(2, 4 * 4096))).unwrap_err();
            assert!(matches!(err, Error::Io { .. }), "{mode:?}: {err}");
            assert!(err.to_string().contains("writing blocks [1, 5)"), "{err}");
            assert_eq!(writer.store().get(0), Some(first.checksums[0]), "{mode:?}: untouched block keeps its checksum");
            for block in 1..5 {
                assert_eq!(writer.store().get(block), None, "{mode:?}: block {block} must have no checksum");
            }
        }
    }
}

#[test]
fn bad_requests_are_errors() {
    let mut writer =
        Writer::new(FaultySink::default(), MemoryStore::default(), Mode::Async, 4096, Algorithm::Crc32c).unwrap();
    for (offset, len) in [(1u64, 4096usize), (0, 4095), (0, 0), (4096, 100)] {
        let err = writer.write(offset, AlignedBuf::zeroed(len)).unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err}");
    }
    assert!(writer.store().is_empty());
    for block_size in [0, 100, 256, 3000, 2 << 20] {
        let err = Writer::new(FaultySink::default(), MemoryStore::default(), Mode::Sync, block_size, Algorithm::Crc32c);
        assert!(matches!(err, Err(Error::Invalid { .. })), "{block_size}");
    }
}

#[test]
fn uring_falls_back_to_a_thread_for_sinks_without_a_file() {
    let writer = Writer::new(FaultySink::default(), MemoryStore::default(), Mode::Uring, 4096, Algorithm::Crc32c);
    assert_eq!(writer.unwrap().mode(), Mode::Async);
}

#[test]
fn real_file_with_o_direct_and_checksum_file() {
    let dir = std::env::temp_dir().join(format!("csumkit-pipeline-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // /dev/shm (tmpfs) takes no O_DIRECT: the buffered io_uring path (the write punted to a kernel worker).
    let shm = std::path::Path::new("/dev/shm");
    let dirs = if shm.is_dir() { vec![dir.clone(), shm.to_path_buf()] } else { vec![dir.clone()] };
    for place in &dirs {
        for mode in [Mode::Sync, Mode::Async, Mode::Uring] {
            let (data_path, csum_path) = (
                place.join(format!("csumkit-pipeline-{}-{}", std::process::id(), mode.name())),
                dir.join(format!("data-{}.csum", mode.name())),
            );
            let sink = FileSink::create(&data_path, true).unwrap();
            let direct = sink.is_direct();
            let store = ChecksumFile::create(&csum_path).unwrap();
            let mut writer = Writer::new(sink, store, mode, 4096, Algorithm::Crc64Nvme).unwrap();
            // Each environment checks the path it has: io_uring where the
            // kernel gives one (this project's CI machines), the thread where
            // not (qemu-user in the aarch64 run, Docker's seccomp profile).
            let expected = if mode == Mode::Uring && !io_uring_available() { Mode::Async } else { mode };
            assert_eq!(writer.mode(), expected);
            let mut buffer = AlignedBuf::zeroed(1 << 20);
            for i in 0..8u64 {
                buffer.copy_from_slice(&bytes(i, 1 << 20));
                buffer = writer.write(i << 20, buffer).unwrap().buffer;
            }
            writer.sync().unwrap();
            let (_, store) = writer.into_parts();
            let written = std::fs::read(&data_path).unwrap();
            assert_eq!(written.len(), 8 << 20);
            for (i, piece) in written.chunks(1 << 20).enumerate() {
                assert!(piece == bytes(i as u64, 1 << 20).as_slice(), "{mode:?}: MiB {i} as written");
            }
            for (block, data) in written.chunks(4096).enumerate() {
                assert_eq!(
                    store.get(block as u64).unwrap(),
                    Some(Algorithm::Crc64Nvme.checksum(data)),
                    "block {block}"
                );
            }
            assert_eq!(store.get(8 << 8).unwrap(), None);
            eprintln!("{mode:?} (ran as {expected:?}), O_DIRECT on {}: {direct}", place.display());
            std::fs::remove_file(&data_path).unwrap();
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_write_the_file_refuses_records_nothing_in_every_mode() {
    // An offset past the largest file size: the kernel fails the write
    // (EFBIG/EINVAL), through io_uring as through pwrite.
    let path = std::env::temp_dir().join(format!("csumkit-pipeline-efbig-{}", std::process::id()));
    for mode in [Mode::Sync, Mode::Async, Mode::Uring] {
        let sink = FileSink::create(&path, true).unwrap();
        let mut writer = Writer::new(sink, MemoryStore::default(), mode, 4096, Algorithm::Crc32c).unwrap();
        writer.write(0, buffer_of(&bytes(3, 4096))).unwrap();
        let far = (i64::MAX as u64 + 1) - 4096;
        let err = writer.write(far, buffer_of(&bytes(4, 2 * 4096))).unwrap_err();
        assert!(matches!(&err, Error::Io { source, .. } if source.raw_os_error().is_some()), "{mode:?}: {err}");
        assert_eq!(writer.store().len(), 1, "{mode:?}: only the first write's checksum");
    }
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn checksum_tree_as_the_store() {
    let blocks = 4096u64;
    let tree = || ChecksumTree::new(blocks, 1 << 30, ChecksumTree::area_blocks_for(blocks)).unwrap();
    for mode in [Mode::Sync, Mode::Async, Mode::Uring] {
        let faulty = FaultySink { fail_after: Some(3 * (1 << 20) + 4096), ..FaultySink::default() };
        let mut writer = Writer::new(faulty, tree(), mode, 4096, Algorithm::Crc32c).unwrap();
        for i in 0..3u64 {
            writer.write(i << 20, buffer_of(&bytes(i, 1 << 20))).unwrap();
        }
        // The fourth MiB fails after one block: its range has no checksums.
        writer.write(3 << 20, buffer_of(&bytes(3, 1 << 20))).unwrap_err();
        let (sink, mut tree) = writer.into_parts();
        let mut nodes = MemoryNodes::default();
        tree.commit(&mut nodes).unwrap();
        for block in 0..3 * 256 {
            let data = &sink.media[block as usize * 4096..][..4096];
            let want = csumkit::crc32c::checksum(data);
            assert_eq!(tree.get(block), Some(want), "{mode:?}: block {block}");
            assert_eq!(tree.lookup_persisted(&mut nodes, block).unwrap(), Some(want), "{mode:?}: committed");
        }
        for block in 3 * 256..4 * 256 {
            assert_eq!(tree.lookup_persisted(&mut nodes, block).unwrap(), None, "{mode:?}: block {block}");
        }
    }
    // A block past the tree, and CRC64 (wider than the tree's items): the
    // write fails and records nothing.
    let mut writer = Writer::new(FaultySink::default(), tree(), Mode::Async, 4096, Algorithm::Crc32c).unwrap();
    let err = writer.write(blocks * 4096, buffer_of(&bytes(9, 4096))).unwrap_err();
    assert!(err.to_string().contains("outside a checksum tree"), "{err}");
    let mut writer = Writer::new(FaultySink::default(), tree(), Mode::Sync, 4096, Algorithm::Crc64Nvme).unwrap();
    let err = writer.write(0, buffer_of(&bytes(5, 8192))).unwrap_err();
    assert!(err.to_string().contains("wider than the tree"), "{err}");
    assert_eq!(writer.store().get(0), None);
}

/// Up to `depth` writes in flight: each completes in submission order with
/// its own checksums, the file holds every byte, and a write the kernel
/// refuses fails alone (the others before and after it are recorded).
#[test]
fn writes_in_flight_complete_in_order_and_fail_alone() {
    let shm = std::path::Path::new("/dev/shm");
    let place = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    for (mode, depth) in [(Mode::Uring, 1), (Mode::Uring, 3), (Mode::Uring, 8), (Mode::Async, 4), (Mode::Sync, 2)] {
        let path = place.join(format!("csumkit-pipeline-depth-{}-{}-{depth}", std::process::id(), mode.name()));
        let sink = FileSink::create(&path, true).unwrap();
        let mut writer =
            Writer::with_depth(sink, MemoryStore::default(), mode, 4096, Algorithm::Crc32c, depth).unwrap();
        let expected = if mode == Mode::Uring && !io_uring_available() { Mode::Async } else { mode };
        assert_eq!(writer.mode(), expected);
        let far = (i64::MAX as u64 + 1) - 4096;
        // Write 5 goes past the largest file size; the rest are 64 KiB apart.
        let offset = |i: u64| if i == 5 { far } else { i << 16 };
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        let mut finish = |writer: &mut Writer<FileSink, MemoryStore>, done: &mut Vec<u64>| {
            let i = done.len() as u64 + failed.len() as u64;
            match writer.complete().expect("a write in flight") {
                Ok(c) => {
                    assert_eq!(
                        c.buffer.as_ref(),
                        bytes(i, 1 << 16).as_slice(),
                        "{mode:?}/{depth}: write {i} came back"
                    );
                    assert_eq!(c.checksums[0], bitwise(CRC32C, &bytes(i, 1 << 16)[..4096]));
                    done.push(i);
                }
                Err(e) => {
                    assert!(matches!(&e, Error::Io { source, .. } if source.raw_os_error().is_some()), "{e}");
                    failed.push(i);
                }
            }
        };
        for i in 0..12u64 {
            if writer.in_flight() == depth {
                finish(&mut writer, &mut done);
            }
            writer.submit(offset(i), buffer_of(&bytes(i, 1 << 16))).unwrap();
            assert!(writer.in_flight() <= depth);
        }
        while writer.in_flight() > 0 {
            finish(&mut writer, &mut done);
        }
        assert_eq!(failed, [5], "{mode:?}/{depth}");
        assert_eq!(done, (0..12).filter(|&i| i != 5).collect::<Vec<_>>());
        let (_, store) = writer.into_parts();
        let file = std::fs::read(&path).unwrap();
        for i in (0..12u64).filter(|&i| i != 5) {
            let data = &file[(i << 16) as usize..][..1 << 16];
            assert!(data == bytes(i, 1 << 16).as_slice(), "{mode:?}/{depth}: write {i} on the file");
            for (b, block) in data.chunks(4096).enumerate() {
                assert_eq!(store.get((i << 4) + b as u64), Some(bitwise(CRC32C, block)));
            }
        }
        assert_eq!(store.len(), 11 * 16, "{mode:?}/{depth}: nothing recorded for the failed write");
        std::fs::remove_file(&path).unwrap();
    }
}

/// A checksum is recorded when its write completes, never when it is
/// submitted: until then the device may still fail it (a checksum of data
/// that never reached the medium would bless whatever is there).
#[test]
fn checksums_are_recorded_at_completion_not_at_submission() {
    let shm = std::path::Path::new("/dev/shm");
    let place = if shm.is_dir() { shm.to_path_buf() } else { std::env::temp_dir() };
    for mode in [Mode::Uring, Mode::Async, Mode::Sync] {
        let path = place.join(format!("csumkit-pipeline-record-{}-{}", std::process::id(), mode.name()));
        let sink = FileSink::create(&path, true).unwrap();
        let mut writer = Writer::with_depth(sink, MemoryStore::default(), mode, 4096, Algorithm::Crc32c, 2).unwrap();
        writer.submit(0, buffer_of(&bytes(1, 8192))).unwrap();
        assert!(writer.store().is_empty(), "{mode:?}: recorded at submission");
        writer.submit(1 << 16, buffer_of(&bytes(2, 4096))).unwrap();
        assert!(writer.store().is_empty(), "{mode:?}: recorded at submission");
        writer.complete().unwrap().unwrap();
        assert_eq!(writer.store().len(), 2, "{mode:?}: the first write's two blocks");
        assert_eq!(writer.store().get(0), Some(bitwise(CRC32C, &bytes(1, 8192)[..4096])));
        assert_eq!(writer.store().get(16), None, "{mode:?}: the second write is still in flight");
        writer.complete().unwrap().unwrap();
        assert_eq!(writer.store().get(16), Some(bitwise(CRC32C, &bytes(2, 4096))));
        drop(writer);
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn submissions_past_the_depth_or_over_a_range_in_flight_are_refused() {
    let path = std::env::temp_dir().join(format!("csumkit-pipeline-refuse-{}", std::process::id()));
    for mode in [Mode::Sync, Mode::Async, Mode::Uring] {
        let sink = FileSink::create(&path, true).unwrap();
        let mut writer = Writer::with_depth(sink, MemoryStore::default(), mode, 4096, Algorithm::Crc32c, 2).unwrap();
        writer.submit(0, buffer_of(&bytes(1, 8192))).unwrap();
        let overlap = writer.submit(4096, buffer_of(&bytes(2, 8192))).unwrap_err();
        assert!(overlap.to_string().contains("overlap [0, 8192)"), "{mode:?}: {overlap}");
        let busy = writer.write(16384, buffer_of(&bytes(3, 4096))).unwrap_err();
        assert!(busy.to_string().contains("not completed"), "{mode:?}: {busy}");
        writer.submit(8192, buffer_of(&bytes(4, 4096))).unwrap();
        let full = writer.submit(16384, buffer_of(&bytes(5, 4096))).unwrap_err();
        assert!(full.to_string().contains("2 writes in flight"), "{mode:?}: {full}");
        assert_eq!(writer.in_flight(), 2, "refused submissions leave the queue as it was");
        // into_parts completes both and records their checksums.
        let (_, store) = writer.into_parts();
        assert_eq!(store.len(), 3, "{mode:?}");
        assert_eq!(store.get(2), Some(bitwise(CRC32C, &bytes(4, 4096))));
    }
    for depth in [0, csumkit::pipeline::DEPTH_MAX + 1] {
        let sink = FileSink::create(&path, true).unwrap();
        let err = Writer::with_depth(sink, MemoryStore::default(), Mode::Uring, 4096, Algorithm::Crc32c, depth);
        assert!(matches!(err, Err(Error::Invalid { what: "depth", .. })), "{depth}");
    }
    // Dropped with writes in flight: the ring reaps them before their
    // buffers are freed (a use-after-free here would show under ASan/Miri
    // as a crash or a corrupted file).
    let sink = FileSink::create(&path, true).unwrap();
    let mut writer = Writer::with_depth(sink, MemoryStore::default(), Mode::Uring, 4096, Algorithm::Crc32c, 4).unwrap();
    for i in 0..4u64 {
        writer.submit(i << 20, buffer_of(&bytes(i, 1 << 20))).unwrap();
    }
    drop(writer);
    let file = std::fs::read(&path).unwrap();
    for i in 0..4u64 {
        assert!(file[(i << 20) as usize..][..1 << 20] == *bytes(i, 1 << 20), "MiB {i} landed whole");
    }
    std::fs::remove_file(&path).unwrap();
}

/// A writer, with its ring and worker, can move to another thread.
#[test]
fn a_writer_is_send() {
    fn is_send<T: Send>(_: &T) {}
    let path = std::env::temp_dir().join(format!("csumkit-pipeline-send-{}", std::process::id()));
    let sink = FileSink::create(&path, true).unwrap();
    let mut writer = Writer::with_depth(sink, MemoryStore::default(), Mode::Uring, 4096, Algorithm::Crc32c, 2).unwrap();
    writer.submit(0, buffer_of(&bytes(7, 4096))).unwrap();
    is_send(&writer);
    let store = std::thread::spawn(move || writer.into_parts().1).join().unwrap();
    assert_eq!(store.get(0), Some(bitwise(CRC32C, &bytes(7, 4096))));
    std::fs::remove_file(&path).unwrap();
}

/// Every store records and invalidates exactly the blocks it is given:
/// an invalidation in the middle of a recorded run leaves both sides, the
/// extreme checksum value 0xFFFFFFFF fits the tree, a fresh store is empty.
#[test]
fn every_store_invalidates_exactly_the_range() {
    fn exercise<S: ChecksumStore>(store: &mut S, get: impl Fn(&S, u64) -> Option<u64>, label: &str) {
        let values: Vec<u64> = (0..10).map(|i| 0xFFFF_FFF6 + i).collect();
        store.record(10, &values).unwrap();
        store.invalidate(12, 3).unwrap();
        for b in 8..22u64 {
            let want = ((10..20).contains(&b) && !(12..15).contains(&b)).then(|| values[(b - 10) as usize]);
            assert_eq!(get(store, b), want, "{label}: block {b}");
        }
    }
    let mut memory = MemoryStore::default();
    assert!(memory.is_empty());
    exercise(&mut memory, |s, b| s.get(b), "memory");
    assert!(!memory.is_empty() && memory.len() == 7);
    let path = std::env::temp_dir().join(format!("csumkit-store-{}", std::process::id()));
    let mut file = ChecksumFile::create(&path).unwrap();
    exercise(&mut file, |s, b| s.get(b).unwrap(), "file");
    file.sync().unwrap();
    let _ = std::fs::remove_file(&path);
    let mut tree = ChecksumTree::new(64, 1000, ChecksumTree::area_blocks_for(64)).unwrap();
    exercise(&mut tree, |s, b| s.get(b).map(u64::from), "tree");
    assert!(tree.record(0, &[1u64 << 32]).is_err(), "a 33-bit checksum does not fit the tree");
}

#[test]
fn writers_report_their_mode_and_depth() {
    assert_eq!([Mode::Sync, Mode::Async, Mode::Uring].map(Mode::name), ["sync", "async", "uring"]);
    let path = std::env::temp_dir().join(format!("csumkit-depth-{}", std::process::id()));
    for depth in [1, 3, 8] {
        let sink = FileSink::create(&path, false).unwrap();
        let writer =
            Writer::with_depth(sink, MemoryStore::default(), Mode::Uring, 4096, Algorithm::Crc32c, depth).unwrap();
        assert_eq!(writer.depth(), depth);
    }
    let _ = std::fs::remove_file(&path);
}

const SECTOR: usize = 512;

/// A disk whose writes are durable only at its flush; it grows as written
/// (the new length taken as durable at once: zeros either way).
#[derive(Default)]
struct Disk {
    current: Vec<u8>,
    durable: Vec<u8>,
    dirty: BTreeSet<usize>,
}

impl Disk {
    fn write(&mut self, at: usize, bytes: &[u8]) {
        let end = at + bytes.len();
        if self.current.len() < end {
            self.current.resize(end, 0);
            self.durable.resize(end, 0);
        }
        self.current[at..end].copy_from_slice(bytes);
        self.dirty.extend(at / SECTOR..end.div_ceil(SECTOR));
    }

    fn flush(&mut self) {
        for sector in std::mem::take(&mut self.dirty) {
            let (at, end) = (sector * SECTOR, ((sector + 1) * SECTOR).min(self.current.len()));
            self.durable[at..end].copy_from_slice(&self.current[at..end]);
        }
    }

    /// What a power cut leaves: the durable bytes and a random half of the
    /// sectors written since the last flush.
    fn crash_image(&self, rng: &mut u64) -> Vec<u8> {
        let mut image = self.durable.clone();
        for &sector in &self.dirty {
            if next(rng) % 2 == 1 {
                let (at, end) = (sector * SECTOR, ((sector + 1) * SECTOR).min(image.len()));
                image[at..end].copy_from_slice(&self.current[at..end]);
            }
        }
        image
    }
}

/// One simulated disk, as the writer's sink or as the checksum file's file.
#[derive(Clone, Default)]
struct SimDisk(Arc<Mutex<Disk>>);

impl Sink for SimDisk {
    fn write_at(&mut self, offset: u64, data: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().write(offset as usize, data);
        Ok(data.len())
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.lock().unwrap().flush();
        Ok(())
    }
}

impl DurableFile for SimDisk {
    fn size(&self) -> io::Result<u64> {
        Ok(self.0.lock().unwrap().current.len() as u64)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        let disk = &mut *self.0.lock().unwrap();
        disk.current.resize(len as usize, 0);
        disk.durable.resize(len as usize, 0);
        disk.dirty.retain(|&s| s * SECTOR < len as usize);
        Ok(())
    }
    fn read_exact_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        let disk = self.0.lock().unwrap();
        let src = disk.current.get(at as usize..at as usize + buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(src);
        Ok(())
    }
    fn write_all_at(&self, buf: &[u8], at: u64) -> io::Result<()> {
        self.0.lock().unwrap().write(at as usize, buf);
        Ok(())
    }
    fn sync_data(&self) -> io::Result<()> {
        self.0.lock().unwrap().flush();
        Ok(())
    }
}

fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Random writes (1–8 blocks, each block a fresh pattern) within the
/// first 68 blocks, up to the writer's depth in flight; `blocks` gets
/// each block's newest content.
fn random_writes(
    writer: &mut Writer<SimDisk, ChecksumFile<SimDisk>>,
    rng: &mut u64,
    count: usize,
    blocks: &mut BTreeMap<u64, Vec<u8>>,
) {
    const BS: u64 = 4096;
    let mut flying: Vec<(u64, u64)> = Vec::new();
    for _ in 0..count {
        let (first, len) = (next(rng) % 60, 1 + next(rng) % 8);
        let data = bytes(next(rng), (len * BS) as usize);
        for (i, block) in data.chunks(BS as usize).enumerate() {
            blocks.insert(first + i as u64, block.to_vec());
        }
        // The writer refuses a write over one still in flight: finish them.
        if writer.in_flight() == writer.depth() || flying.iter().any(|&(s, e)| s < first + len && first < e) {
            while let Some(done) = writer.complete() {
                done.unwrap();
            }
            flying.clear();
        }
        writer.submit(first * BS, buffer_of(&data)).unwrap();
        flying.push((first, first + len));
    }
    while let Some(done) = writer.complete() {
        done.unwrap();
    }
}

/// Of `kept` (blocks written before a power cut and not since), how many
/// the cut's disks lost: data not as written, or no matching checksum.
fn lost_after_the_cut(data: &[u8], csums: Vec<u8>, kept: &BTreeMap<u64, Vec<u8>>) -> usize {
    let file = SimDisk::default();
    file.0.lock().unwrap().current = csums;
    let store = ChecksumFile::on(file);
    let lost = |(&block, content): (&u64, &Vec<u8>)| {
        let at = block as usize * content.len();
        data.get(at..at + content.len()) != Some(content.as_slice())
            || store.get(block).unwrap() != Some(Algorithm::Crc32c.checksum(content))
    };
    kept.iter().filter(|&entry| lost(entry)).count()
}

/// Kills a `Writer::sync` that syncs only the data (or nothing) and a
/// `ChecksumFile::sync` that does not flush: after a sync, a power cut at
/// any later point keeps every block written before it and not since,
/// with its checksum. The same writes cut before the sync must lose some
/// (the negative control: the disk model drops unflushed writes).
#[test]
fn a_sync_makes_the_writes_and_their_checksums_durable() {
    let (mut cuts, mut kept_blocks, mut lost_unsynced) = (0, 0, 0);
    for mode in [Mode::Sync, Mode::Async] {
        for seed in 0..32u64 {
            let mut rng = seed;
            let (data, csums) = (SimDisk::default(), SimDisk::default());
            let store = ChecksumFile::on(csums.clone());
            let mut writer = Writer::with_depth(data.clone(), store, mode, 4096, Algorithm::Crc32c, 4).unwrap();
            let crash = |rng: &mut u64| {
                let image = data.0.lock().unwrap().crash_image(rng);
                (image, csums.0.lock().unwrap().crash_image(rng))
            };
            let mut synced = BTreeMap::new();
            random_writes(&mut writer, &mut rng, 6, &mut synced);
            let (image, checksums) = crash(&mut rng);
            lost_unsynced += lost_after_the_cut(&image, checksums, &synced);
            writer.sync().unwrap();
            let mut since = BTreeMap::new();
            random_writes(&mut writer, &mut rng, 3, &mut since);
            synced.retain(|block, _| !since.contains_key(block));
            for _ in 0..4 {
                let (image, checksums) = crash(&mut rng);
                assert_eq!(lost_after_the_cut(&image, checksums, &synced), 0, "{mode:?}, seed {seed}");
                cuts += 1;
            }
            kept_blocks += synced.len();
        }
    }
    eprintln!("{cuts} cuts after a sync, {kept_blocks} synced blocks kept; {lost_unsynced} lost by cuts before it");
    assert!(lost_unsynced > 0, "the negative control: a cut before the sync loses blocks");
}

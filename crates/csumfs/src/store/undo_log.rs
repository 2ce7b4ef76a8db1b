//! Operations that are all or nothing for the daemon's death: before an
//! operation changes metadata bytes of the image, their old bytes are
//! appended to an undo log in a file beside it (`IMAGE.undo`, shared
//! memory-mapped); the operation's end empties the log. Stores to the two
//! maps reach the page cache in program order and stay there when the
//! process dies (kill -9, a panic), so an interrupted operation always
//! finds its undo record complete up to the last byte it changed: the next
//! open puts those bytes back, newest first, and the image is as it was
//! before the operation. An operation that fails with an error is rolled
//! back the same way at once. File data is written in place, not logged
//! (as ext4's `data=writeback`) — but for a truncate's zeroed tail, which
//! is the file's until the truncate is kept. A power cut is not covered. This file
//! log is what `csumkit mount -o log=off` uses; with a ByteLog (the
//! default, `txn/redo.rs`) records are kept in memory only, to roll back an
//! operation that fails, and the ByteLog covers deaths and power cuts.
//!
//! While a file log is in use the image's superblock carries an incompat
//! feature bit of csumfs's own ([`UNDO_PENDING`](crate::format::features::UNDO_PENDING)), as ext4's
//! `needs_recovery` marks a journal in use: an image a dead process left
//! with an operation half done is refused by the kernel, e2fsck and every
//! reader here until a writable open has undone it. Without it e2fsck
//! could repair the half operation its own way, and the next open would
//! then put the undo log's old bytes over that repair. The bit is set in
//! the shared map, which a process's death leaves in the page cache (no
//! flush: a power cut is not covered anyway), and cleared by the
//! volume's [`checkpoint`](crate::Volume::checkpoint) at unmount.
//!
//! Layout: 64-byte header (magic `CSFSUND2`, record count u64 at 8, bytes
//! used u64 at 16), then records: image offset u64, length u32, the
//! CRC32C of those 12 bytes and the old bytes, then the old bytes padded to
//! 8. The count is stored after its record, so a record cut by the
//! process's death is never counted; the CRC refuses a record damaged on
//! the disk, or torn by a power cut (not covered), rather than put its
//! bytes into the image. A log of the first layout (`CSFSUNDO`, the CRC's
//! 4 bytes zero) is still read, unchecked.

use crate::error::Error;
use crate::format::features::UNDO_PENDING;
use csumkit::ext4::fields::S_FEATURE_INCOMPAT;
use csumkit::le::{le32, le64};
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{compiler_fence, Ordering};

const MAGIC: &[u8; 8] = b"CSFSUND2";
/// The first layout's magic: records without a CRC.
const MAGIC_UNCHECKED: &[u8; 8] = b"CSFSUNDO";
const HEADER: usize = 64;
/// The log's first size; it doubles when an operation needs more.
const INITIAL_BYTES: u64 = 1 << 20;

/// (image offset, old bytes) of one change.
pub(crate) type Record = (usize, Vec<u8>);

/// The undo log and the depth of the operation in progress.
pub(crate) struct UndoLog {
    /// The log file and its map; `None`: records are kept in memory only
    /// (a ByteLog volume, whose private copy of the image dies with the
    /// process, needs them only to roll back an operation that failed).
    pub(crate) file: Option<(File, memmap2::MmapMut)>,
    pub(crate) memory: Vec<Record>,
    /// Image byte ranges of the blocks the operation in progress freed: a
    /// store into a block allocated again in the same operation must keep
    /// its old bytes (undoing the operation gives the block back to its
    /// first owner), whatever the store says.
    pub(crate) freed: Vec<(usize, usize)>,
    /// File data blocks whose old bytes the operation in progress keeps
    /// (a truncate's zeroed tail): put back, their checksums are taken
    /// again from the bytes.
    pub(crate) data_blocks: Vec<u64>,
    /// Nested `begin`s; the outermost `end` commits or rolls back.
    pub(crate) depth: u32,
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> Error + '_ {
    move |source| Error::Io { context: path.display().to_string(), source }
}

impl UndoLog {
    /// Opens (or creates) the log at `path`; returns it with the records
    /// an interrupted operation left, in the order to put them back. The
    /// file keeps them until [`clear`](Self::clear), which the caller
    /// calls once they are back in the image (a death before that finds
    /// them again).
    pub(crate) fn open(path: &Path) -> Result<(UndoLog, Vec<Record>), Error> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(io(path))?;
        if file.metadata().map_err(io(path))?.len() < INITIAL_BYTES {
            file.set_len(INITIAL_BYTES).map_err(io(path))?;
        }
        // SAFETY: the file is csumfs's own; nothing else maps it while the volume is open.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.map_err(io(path))?;
        let checked = &map[..8] == MAGIC;
        let pending = if checked || &map[..8] == MAGIC_UNCHECKED {
            pending(&map, checked).map_err(|detail| crate::error::corrupt(path.display().to_string(), detail))?
        } else {
            Vec::new()
        };
        let log = UndoLog {
            file: Some((file, map)),
            memory: Vec::new(),
            freed: Vec::new(),
            data_blocks: Vec::new(),
            depth: 0,
        };
        Ok((log, pending))
    }

    /// A log kept in memory only.
    pub(crate) fn in_memory() -> UndoLog {
        UndoLog { file: None, memory: Vec::new(), freed: Vec::new(), data_blocks: Vec::new(), depth: 0 }
    }

    /// Forgets every record (the operation is complete, or undone).
    pub(crate) fn clear(&mut self) {
        self.memory.clear();
        self.freed.clear();
        self.data_blocks.clear();
        let Some((_, map)) = &mut self.file else { return };
        // The image's stores before this one stay before it.
        compiler_fence(Ordering::SeqCst);
        map[8..16].copy_from_slice(&0u64.to_le_bytes());
        map[16..24].copy_from_slice(&(HEADER as u64).to_le_bytes());
        // Empty, the log is in this layout whatever it was in before.
        map[..8].copy_from_slice(MAGIC);
    }

    /// Notes that the operation in progress freed the image bytes
    /// `[at, at + len)`.
    pub(crate) fn freed(&mut self, at: usize, len: usize) {
        if self.depth > 0 && len > 0 {
            self.freed.push((at, at + len));
        }
    }

    /// Notes that the operation in progress keeps the old bytes of file
    /// data blocks `blocks` for undo.
    pub(crate) fn kept_data(&mut self, blocks: std::ops::Range<u64>) {
        if self.depth > 0 {
            self.data_blocks.extend(blocks);
        }
    }

    /// Whether `[at, at + len)` meets a block the operation in progress freed.
    pub(crate) fn was_freed(&self, at: usize, len: usize) -> bool {
        self.freed.iter().any(|&(start, end)| start < at + len && at < end)
    }

    /// Appends the old bytes at image offset `at`.
    pub(crate) fn record(&mut self, at: usize, old: &[u8]) -> Result<(), Error> {
        let Some((file, map)) = &mut self.file else {
            self.memory.push((at, old.to_vec()));
            return Ok(());
        };
        let used = le64(map, 16) as usize;
        let need = used + 16 + old.len().next_multiple_of(8);
        if need > map.len() {
            let len = (need as u64).next_power_of_two().max(2 * map.len() as u64);
            file.set_len(len).map_err(|source| Error::Io { context: "undo log".into(), source })?;
            // SAFETY: as in `open`; the old map is dropped by the assignment.
            *map = unsafe { memmap2::MmapMut::map_mut(&*file) }
                .map_err(|source| Error::Io { context: "undo log".into(), source })?;
        }
        map[used..used + 8].copy_from_slice(&(at as u64).to_le_bytes());
        map[used + 8..used + 12].copy_from_slice(&(old.len() as u32).to_le_bytes());
        map[used + 16..used + 16 + old.len()].copy_from_slice(old);
        let crc = record_crc(&map[used..used + 12], old);
        map[used + 12..used + 16].copy_from_slice(&crc.to_le_bytes());
        // The record first, then the bytes used, then the count.
        map[16..24].copy_from_slice(&(need as u64).to_le_bytes());
        let count = le64(map, 8) + 1;
        map[8..16].copy_from_slice(&count.to_le_bytes());
        // The record is stored before the image store it protects.
        compiler_fence(Ordering::SeqCst);
        Ok(())
    }

    /// The records of the operation in progress, newest first.
    pub(crate) fn pending(&self) -> Result<Vec<Record>, String> {
        match &self.file {
            Some((_, map)) => pending(map, true),
            None => Ok(self.memory.iter().rev().cloned().collect()),
        }
    }
}

/// Whether the superblock of `image` carries [`UNDO_PENDING`].
pub fn undo_pending(image: &[u8]) -> bool {
    image.len() >= 2048 && le32(image, 1024 + S_FEATURE_INCOMPAT) & UNDO_PENDING != 0
}

/// `image` as a writable open makes it: the records the undo log `log`
/// (a file's bytes) holds put back, newest first — for a check that writes
/// neither file. The mark stays (its checksum is the image's as marked).
///
/// # Errors
/// [`Error::Corrupt`] for a damaged log or a record past the image.
pub fn undone_image(mut image: Vec<u8>, log: &[u8]) -> Result<(Vec<u8>, usize), Error> {
    let damaged = |detail: String| crate::error::corrupt("undo log", detail);
    let checked = log.get(..8) == Some(MAGIC.as_slice());
    let records = if log.len() < HEADER {
        Vec::new()
    } else if checked || log.get(..8) == Some(MAGIC_UNCHECKED.as_slice()) {
        pending(log, checked).map_err(damaged)?
    } else {
        Vec::new()
    };
    for (at, old) in &records {
        let Some(target) = at.checked_add(old.len()).and_then(|end| image.get_mut(*at..end)) else {
            return Err(damaged(format!("a record at {at} past the image")));
        };
        target.copy_from_slice(old);
    }
    Ok((image, records.len()))
}

/// A record's CRC32C: of its offset and length (`head`), then its old bytes.
fn record_crc(head: &[u8], old: &[u8]) -> u32 {
    csumkit::crc32c::update(csumkit::crc32c::checksum(head), old)
}

/// The records a log file's map holds, newest first; `checked`: each
/// record's CRC must match (the layout that has them).
fn pending(map: &[u8], checked: bool) -> Result<Vec<Record>, String> {
    let (count, used, mut at) = (le64(map, 8), le64(map, 16) as usize, HEADER);
    let mut out = Vec::new();
    for _ in 0..count {
        if at + 16 > used.min(map.len()) {
            return Err(format!("record {} of {count} lies past the {used} bytes used", out.len()));
        }
        let (offset, len) = (le64(map, at) as usize, le32(map, at + 8) as usize);
        let old = map.get(at + 16..at + 16 + len).ok_or("a record runs off the log")?;
        if checked && record_crc(&map[at..at + 12], old) != le32(map, at + 12) {
            return Err(format!(
                "record {} of {count} (image offset {offset}) is damaged: its CRC does not match",
                out.len()
            ));
        }
        out.push((offset, old.to_vec()));
        at += 16 + len.next_multiple_of(8);
    }
    out.reverse();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Blocks freed count only while an operation is in progress (outside
    /// one nothing is undone, and the list would only grow), meet a range
    /// exactly at their bounds, and are forgotten when the operation ends.
    #[test]
    fn freed_ranges_belong_to_the_operation_in_progress() {
        let mut log = UndoLog::in_memory();
        log.freed(4096, 4096);
        assert!(log.freed.is_empty() && !log.was_freed(4096, 1), "no operation: nothing noted");
        log.depth = 1;
        log.freed(4096, 4096);
        log.freed(100, 0);
        assert_eq!(log.freed, vec![(4096, 8192)], "an empty range is not noted");
        assert!(log.was_freed(4096, 1) && log.was_freed(8191, 1) && log.was_freed(0, 4097));
        assert!(!log.was_freed(0, 4096) && !log.was_freed(8192, 4096) && !log.was_freed(50, 100));
        log.clear();
        assert!(!log.was_freed(4096, 4096), "the operation's end forgets them");
    }

    /// A log by hand: the header, then each (image offset, old bytes)
    /// record padded to 8 bytes.
    fn log_of(records: &[(u64, &[u8])]) -> Vec<u8> {
        let mut log = vec![0u8; HEADER];
        log[..8].copy_from_slice(MAGIC);
        for (at, old) in records {
            let mut head = at.to_le_bytes().to_vec();
            head.extend_from_slice(&(old.len() as u32).to_le_bytes());
            let crc = csumkit::crc32c::checksum(&[&head[..], old].concat());
            log.extend_from_slice(&head);
            log.extend_from_slice(&crc.to_le_bytes());
            log.extend_from_slice(old);
            log.resize(log.len().next_multiple_of(8), 0);
        }
        let used = log.len() as u64;
        log[8..16].copy_from_slice(&(records.len() as u64).to_le_bytes());
        log[16..24].copy_from_slice(&used.to_le_bytes());
        log.resize(used as usize + 64, 0);
        log
    }

    #[test]
    fn a_record_of_no_bytes_is_a_record_like_any_other() {
        let log = log_of(&[(100, b"abc"), (200, b"")]);
        assert_eq!(pending(&log, true).unwrap(), [(200, Vec::new()), (100, b"abc".to_vec())]);
        let log = log_of(&[(300, b""), (100, b"12345678")]);
        assert_eq!(pending(&log, true).unwrap(), [(100, b"12345678".to_vec()), (300, Vec::new())]);
    }

    /// Any byte of a record changed — its offset, length, CRC or old
    /// bytes — and the log is refused, not put back; a log of the first
    /// layout (no CRCs: those 4 bytes zero) is read unchecked.
    #[test]
    fn a_damaged_record_is_refused() {
        let log = log_of(&[(100, b"abc"), (4096, b"metadata")]);
        let used = le64(&log, 16) as usize;
        for at in HEADER..used {
            if (HEADER + 19..HEADER + 24).contains(&at) {
                continue; // the first record's padding
            }
            for bit in [0x01u8, 0x80] {
                let mut damaged = log.clone();
                damaged[at] ^= bit;
                assert!(pending(&damaged, true).is_err(), "byte {at} ^ {bit:#x} passed");
            }
        }
        let mut first_layout = log.clone();
        first_layout[HEADER + 12..HEADER + 16].fill(0);
        assert!(pending(&first_layout, true).is_err());
        assert_eq!(pending(&first_layout, false).unwrap(), [(4096, b"metadata".to_vec()), (100, b"abc".to_vec())]);
    }
}

//! Metadata made durable through a ByteLog: an operation's
//! metadata bytes change only the volume's private copy of the image (a
//! `MAP_PRIVATE` map, or bytes in memory); `sync` appends the byte ranges
//! changed since the last commit to the log, as records of
//! (image offset, bytes), and `fsync` waits for that append alone. The
//! image file itself receives metadata only at a checkpoint, which writes
//! every committed range in place, `fdatasync`s it and only then empties
//! the log — so whatever the image holds on disk is a checkpoint, plus
//! pieces of the next one that replay writes again. A commit that does not
//! fit the log's free room folds the log into the image first, from the
//! log's own records (the map may hold that commit's bytes too), and is
//! then logged; only one too large for an empty log is written through.
//!
//! File data is written to the image file at once (as ext4's `data=ordered`:
//! `fdatasync` of the image precedes the commit of metadata that points
//! at it), except where it is logged like metadata: writes of up to a
//! page (a small file's fsync, or a rewritten page's, is then one append);
//! data on a page whose metadata changed since the last checkpoint
//! (replaying that metadata after the data would overwrite it; ext4 has
//! revoke records for it); and
//! data on blocks freed since the last commit (a crash before the free
//! commits brings their file back; ext4 does not reuse such blocks).
//!
//! A commit may span several records (one holds 65 504 bytes in a log
//! formatted now, 4 064 in one of ByteLog's version 1): all but the
//! last are tagged [`TAG_PART`], the last [`TAG_LAST`]; replay applies a
//! commit only when its last record is whole, and the checkpoint that
//! follows every replay drops an incomplete one from the log. While the
//! log holds anything not in the image, the image's superblock on disk
//! carries an incompat feature bit of csumfs's own ([`LOG_PENDING`]), so
//! the kernel and e2fsck refuse it until `csumkit ext4 checkpoint`; a
//! mount sets it before it serves and keeps it to its unmount
//! ([`Volume::mark_log_in_use`]).
//!
//! Record payload: entries of image offset u64, length u32, then the bytes.

use crate::datasum::DataSums;
use crate::error::{corrupt, Error};
use crate::le::le32;
use crate::log_writer::{SyncHandle, Writer};
use crate::private_map::PAGE;
use crate::ranges::RangeSet;
use crate::stats::Stats;
use crate::volume::{Bytes, Volume};
use csumkit::bytelog::{ByteLog, Medium, RecordRef};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

mod resize;
pub use resize::LogResize;

/// Incompat feature bit csumfs sets on disk while its log holds changes
/// the image lacks, or a mount may write it (no ext4 feature uses it).
pub const LOG_PENDING: u32 = 0x4000_0000;
/// A commit's record that more records follow.
pub const TAG_PART: u16 = 1;
/// A commit's last record.
pub const TAG_LAST: u16 = 2;
const ENTRY_HEADER: usize = 12;
/// File data written in place in pieces of at least this many bytes
/// starts for the disk at once: a stream's fsync then waits for its tail
/// only, not for all it wrote (a 512 MiB write + fsync, 1 MiB at a time:
/// the fsync alone took 0.27 s of 0.75). Smaller writes wait in the page
/// cache, where rewrites of the same pages cost nothing.
const WRITE_BEHIND_BYTES: usize = 256 << 10;
/// Commit at the end of an operation once this many bytes are pending…
const COMMIT_BYTES: usize = 1 << 20;
/// …or once the last commit is this old (ext4's default commit interval).
const COMMIT_AGE: Duration = Duration::from_secs(5);
/// Writes of up to a page are logged with the metadata, up to this many
/// bytes per commit: a small file's `fsync`, or a database's after a page
/// rewritten, is then one append to the log and one flush, not a write of
/// the image and a record, each flushed (4 KiB rewritten + `fdatasync`,
/// 4 KiB blocks: 0.18–0.20 ms and 9.7 KiB on the disk per call when the
/// page went to the image). Larger writes go to the image file directly:
/// logged, their bytes would reach the disk twice (log, then checkpoint).
const LOGGED_DATA_BYTES: usize = 64 << 10;
/// Checkpoint once this many pages of the private map differ from the file…
const CHECKPOINT_PAGES: usize = 16 << 10;
/// …or once the last checkpoint is this old and something was committed since.
const CHECKPOINT_AGE: Duration = Duration::from_secs(30);

/// Where the image's bytes go to stay: the image file (or, in tests, a
/// simulated disk with a page cache).
pub trait Backing: Send + Sync {
    /// Writes `bytes` at `at` (durable only after [`sync`](Self::sync)).
    ///
    /// # Errors
    /// What the write reports.
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()>;
    /// Makes every write before it durable.
    ///
    /// # Errors
    /// What the flush reports.
    fn sync(&mut self) -> std::io::Result<()>;
    /// A handle that does what [`sync`](Self::sync) does while writes go
    /// on: a commit's flushes run after the volume's lock is let go.
    ///
    /// # Errors
    /// What duplicating the file's descriptor reports.
    fn sync_handle(&self) -> std::io::Result<SyncHandle>;
    /// Starts writing `[at, at + len)` out without waiting for it: a hint
    /// that the next [`sync`](Self::sync) will want it (nothing by default).
    fn write_behind(&self, _at: u64, _len: u64) {}
}

impl Backing for std::fs::File {
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(self, bytes, at)
    }
    fn write_behind(&self, at: u64, len: u64) {
        // SAFETY: an open descriptor; the call only starts write-back of
        // the file's dirty pages in the range (no wait, no flush). Errors
        // are the sync's to report.
        unsafe {
            libc::sync_file_range(
                std::os::fd::AsRawFd::as_raw_fd(self),
                at as i64,
                len as i64,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.sync_data()
    }
    fn sync_handle(&self) -> std::io::Result<SyncHandle> {
        let file = self.try_clone()?;
        Ok(Box::new(move || file.sync_data()))
    }
}

/// A backing that keeps nothing: replay into bytes in memory.
struct Nowhere;

impl Backing for Nowhere {
    fn write_at(&mut self, _: u64, _: &[u8]) -> std::io::Result<()> {
        Ok(())
    }
    fn sync(&mut self) -> std::io::Result<()> {
        Ok(())
    }
    fn sync_handle(&self) -> std::io::Result<SyncHandle> {
        Ok(Box::new(|| Ok(())))
    }
}

/// A ByteLog medium of any kind (a mapped file, or a simulated one in tests).
pub type LogMedium = Box<dyn Medium + Send + Sync>;

/// Adapter: `ByteLog` wants a sized medium.
pub(crate) struct AnyMedium(LogMedium);

impl Medium for AnyMedium {
    fn len(&self) -> u64 {
        self.0.len()
    }
    fn view(&self, offset: u64, len: u64) -> Result<&[u8], csumkit::Error> {
        self.0.view(offset, len)
    }
    fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), csumkit::Error> {
        self.0.write(offset, data)
    }
    fn flush(&mut self, offset: u64, len: u64) -> Result<(), csumkit::Error> {
        self.0.flush(offset, len)
    }
    fn fence(&mut self) -> Result<(), csumkit::Error> {
        self.0.fence()
    }
}

/// The log and what the image file lacks.
pub(crate) struct Redo {
    /// The log and the commits staged for it, flushed outside the volume's lock.
    writer: Arc<Mutex<Writer>>,
    /// The number of the last commit staged.
    staged: u64,
    backing: Box<dyn Backing>,
    /// Ranges changed since the last commit.
    pending: Vec<(usize, usize)>,
    pending_bytes: usize,
    /// File data among the pending ranges…
    pending_data: usize,
    /// …and where it is (bytes of the image): in the map only until its
    /// commit is checkpointed.
    logged_data: Vec<(usize, usize)>,
    /// Ranges committed since the last checkpoint.
    committed: Vec<(usize, usize)>,
    /// A commit since the last checkpoint carried data checksums. A replay
    /// applies them over the sidecar's tree, as newer than it: the tree
    /// must not be committed with newer checksums of their blocks that the
    /// log lacks while the log still holds them (see
    /// [`Volume::stage_commit`]).
    sums_in_log: bool,
    /// Pages of the map changed since the last checkpoint.
    touched: BTreeSet<usize>,
    /// Pages holding blocks freed since the last commit: until the free is
    /// durable, the blocks may still be a file's after a crash, so data
    /// for them goes through the log (ext4 does not reuse such blocks).
    /// Emptied once the commit carrying the frees is durable.
    freed: RangeSet,
    /// Bumped by every free: a commit's end empties `freed` only when
    /// nothing was freed after it was staged.
    freed_version: u64,
    /// Data written to the backing since its last sync.
    data_unsynced: bool,
    /// The superblock on disk carries [`LOG_PENDING`].
    marked: bool,
    /// The mark stays from now until the final checkpoint, commits or
    /// not ([`Volume::mark_log_in_use`]: a mount's).
    held: bool,
    /// The superblock as the image file holds it (the last checkpoint's):
    /// what the mark writes back, with the pending bit — the map's may
    /// hold the commit under way, which the image must not get ahead of
    /// its log (a cut before that commit is durable would leave, say, the
    /// free counts or the orphan list's head of an operation that never
    /// happened).
    image_superblock: Vec<u8>,
    last_commit: Instant,
    last_checkpoint: Instant,
    /// Which medium [`log_medium`] chose ([`LOG_ON_DAX`]…); `None` for one
    /// a caller of [`Volume::enable_log`] gave.
    log_on: Option<&'static str>,
    /// Reopens the log's medium at another length: a commit too large for
    /// the empty log grows it (`resize.rs`); `None`, it is written through.
    resize: Option<LogResize>,
    /// The log's configured length, which a grown log returns to.
    log_bytes: u64,
    /// The room the last commit that did not fit the log needed.
    needs: u64,
}

/// A sync begun by [`Volume::start_sync`]: wait for it without the
/// volume, then hand what the wait returns to [`Volume::finish_sync`].
#[must_use = "a started sync is durable only once waited for"]
pub struct PendingSync {
    writer: Option<Arc<Mutex<Writer>>>,
    /// The commit to wait for.
    number: u64,
    versions: Versions,
}

/// A sync whose commit is durable: what [`Volume::finish_sync`] takes
/// (only [`PendingSync::wait`] makes one).
#[must_use = "finish_sync lets go of what waited for the commit"]
pub struct DurableSync(Option<Versions>);

/// How many frees and intents there had been when a commit was staged.
#[derive(Clone, Copy)]
struct Versions {
    freed: u64,
    sums: u64,
}

impl PendingSync {
    fn done() -> PendingSync {
        PendingSync { writer: None, number: 0, versions: Versions { freed: 0, sums: 0 } }
    }

    /// Makes the commit durable (and every one staged before it): the
    /// image file's data first, then the records. One caller at a time
    /// flushes; the others wait for it and find their commit durable.
    ///
    /// # Errors
    /// [`Error::Io`] from the image file or the log; the commit stays
    /// staged, and the next wait tries it again.
    pub fn wait(self) -> Result<DurableSync, Error> {
        match &self.writer {
            Some(writer) => {
                writer.lock().unwrap_or_else(PoisonError::into_inner).flush_through(self.number)?;
                Ok(DurableSync(Some(self.versions)))
            }
            None => Ok(DurableSync(None)),
        }
    }
}

/// What opening the log found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Replayed {
    /// Commits replayed into the image.
    pub commits: u64,
    /// Bytes of metadata they wrote.
    pub bytes: u64,
}

fn io(context: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Io { context: context.into(), source }
}

/// Sorted, merged ranges (touching ones joined).
fn merged(ranges: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<(usize, usize)> = Vec::with_capacity(sorted.len());
    for (start, end) in sorted {
        match out.last_mut() {
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => out.push((start, end)),
        }
    }
    out
}

/// Entry offsets with this bit name data blocks, not image bytes: the
/// entry's bytes are the CRC32Cs of the blocks from the offset's low bits on.
const ENTRY_SUMS: u64 = 1 << 63;
/// With this bit the entry's bytes are a u64 count of blocks, from the
/// offset's low bits on, whose data checksums are forgotten (freed).
const ENTRY_FORGET: u64 = 1 << 62;
/// With this bit the entry's bytes are a u64 count of bytes at the image
/// offset in the low bits that all hold one value: the byte after the
/// count, or zero when there is none. Zeroed blocks (new directory and
/// extent blocks) and bitmap runs taken whole (0xFF: a large fallocate
/// takes 64 KiB of bitmap for 2 GiB) cost 20 or 21 bytes, not pages.
const ENTRY_FILL: u64 = 1 << 61;
/// Runs of one byte value at least this long become fill entries.
const FILL_RUN_MIN: usize = 64;

/// Records of at most `max` payload bytes being filled.
struct Encoder {
    records: Vec<Vec<u8>>,
    max: usize,
}

impl Encoder {
    /// Bytes the current record still takes after an entry header, starting
    /// a new record when fewer than `at_least` are left.
    fn room(&mut self, at_least: usize) -> usize {
        let left = self.max - self.records.last().map_or(self.max, Vec::len);
        if left < ENTRY_HEADER + at_least {
            self.records.push(Vec::new());
            return self.max - ENTRY_HEADER;
        }
        left - ENTRY_HEADER
    }

    fn entry(&mut self, offset: u64, bytes: &[u8]) {
        let record = self.records.last_mut().expect("room() made one");
        record.extend_from_slice(&offset.to_le_bytes());
        record.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        record.extend_from_slice(bytes);
    }
}

/// The payloads of one commit, each at most `max` bytes (the log's
/// [`ByteLog::payload_max`]): `ranges` of `image`, then the data checksum
/// changes `sums` (block, CRC or forgotten), as runs.
fn encode(ranges: &[(usize, usize)], image: &[u8], sums: &[(u64, Option<u32>)], max: usize) -> Vec<Vec<u8>> {
    assert!(max > ENTRY_HEADER + 8, "a record takes an entry");
    let mut out = Encoder { records: Vec::new(), max };
    for &(start, end) in ranges {
        for (from, to, fill) in fill_split(&image[start..end]) {
            let (from, to) = (start + from, start + to);
            if let Some(value) = fill {
                let count = ((to - from) as u64).to_le_bytes();
                if value == 0 {
                    out.room(8);
                    out.entry(ENTRY_FILL | from as u64, &count);
                } else {
                    out.room(9);
                    out.entry(ENTRY_FILL | from as u64, &[&count[..], &[value]].concat());
                }
                continue;
            }
            let mut at = from;
            while at < to {
                let n = (to - at).min(out.room(1));
                out.entry(at as u64, &image[at..at + n]);
                at += n;
            }
        }
    }
    let mut i = 0;
    while i < sums.len() {
        let first = sums[i].0;
        let run = sums[i..]
            .iter()
            .enumerate()
            .take_while(|(k, (b, c))| *b == first + *k as u64 && c.is_some() == sums[i].1.is_some())
            .count();
        if sums[i].1.is_none() {
            out.room(8);
            out.entry(ENTRY_FORGET | first, &(run as u64).to_le_bytes());
            i += run;
            continue;
        }
        let mut done = 0;
        while done < run {
            let n = (run - done).min(out.room(4) / 4);
            let crcs: Vec<u8> =
                sums[i + done..i + done + n].iter().flat_map(|(_, c)| c.expect("a set run").to_le_bytes()).collect();
            out.entry(ENTRY_SUMS | (first + done as u64), &crcs);
            done += n;
        }
        i += run;
    }
    if out.records.is_empty() {
        out.records.push(Vec::new());
    }
    out.records
}

/// `bytes` cut into (start, end, fill) pieces: fill pieces are runs of at
/// least [`FILL_RUN_MIN`] bytes of one value (`Some(value)`), the rest
/// (`None`) lies between them.
fn fill_split(bytes: &[u8]) -> Vec<(usize, usize, Option<u8>)> {
    let mut out: Vec<(usize, usize, Option<u8>)> = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let run = run_len(bytes, at);
        if run >= FILL_RUN_MIN {
            out.push((at, at + run, Some(bytes[at])));
            at += run;
            continue;
        }
        let end = next_fill_run(bytes, at + run);
        match out.last_mut() {
            Some(last) if last.2.is_none() => last.1 = end,
            _ => out.push((at, end, None)),
        }
        at = end;
    }
    out
}

/// Where the first run of at least [`FILL_RUN_MIN`] equal bytes at or after
/// `from` starts (`bytes.len()` if there is none); `from` starts a run (the
/// byte before it, if any, differs). Such a run holds whole 8-byte words at
/// any phase, so only words of one repeated byte are looked at closer: a
/// commit's inode and directory bytes scanned a run at a time took half of
/// the daemon's own samples in (1) with 15 jobs.
fn next_fill_run(bytes: &[u8], from: usize) -> usize {
    const WORD: usize = 8;
    const { assert!(FILL_RUN_MIN >= 2 * WORD) };
    let mut word = from.div_ceil(WORD) * WORD;
    while word + WORD <= bytes.len() {
        let value = bytes[word];
        if bytes[word..word + WORD] != [value; WORD] {
            word += WORD;
            continue;
        }
        let mut start = word;
        while start > from && bytes[start - 1] == value {
            start -= 1;
        }
        let len = word - start + run_len(bytes, word);
        if len >= FILL_RUN_MIN {
            return start;
        }
        word = (start + len).div_ceil(WORD) * WORD;
    }
    bytes.len()
}

/// How many bytes from `at` equal `bytes[at]`: a commit scans every byte
/// its ranges hold (a large fallocate's block bitmaps, 64 KiB each at
/// 64 KiB blocks). Whole 64-byte blocks are compared
/// without an exit inside (vector compares: eight bytes at a time the scan
/// took ~5% of the daemon's samples in a loop of 16 GiB fallocates), then
/// eight at a time to find where the run stops.
fn run_len(bytes: &[u8], at: usize) -> usize {
    const BLOCK: usize = 64;
    let value = bytes[at];
    let end = bytes.len();
    let mut i = at;
    while i + BLOCK <= end && bytes[i..i + BLOCK].iter().fold(0, |differs, &b| differs | (b ^ value)) == 0 {
        i += BLOCK;
    }
    let pattern = u64::from_le_bytes([value; 8]);
    while i + 8 <= end {
        let differs = u64::from_le_bytes(bytes[i..i + 8].try_into().expect("8 bytes")) ^ pattern;
        if differs != 0 {
            return i + differs.trailing_zeros() as usize / 8 - at;
        }
        i += 8;
    }
    i + bytes[i..end].iter().take_while(|&&b| b == value).count() - at
}

/// A record's entry, decoded.
enum Entry<'a> {
    Image(usize, &'a [u8]),
    /// (image offset, count, value).
    Fill(usize, u64, u8),
    Sums(u64, &'a [u8]),
    Forget(u64, u64),
}

/// The entries of a record's payload.
fn decode(payload: &[u8]) -> Result<Vec<Entry<'_>>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < payload.len() {
        let head = payload.get(at..at + ENTRY_HEADER).ok_or("an entry header is cut short")?;
        let offset = u64::from_le_bytes(head[..8].try_into().expect("8 bytes"));
        let len = le32(head, 8) as usize;
        let bytes = payload.get(at + ENTRY_HEADER..at + ENTRY_HEADER + len).ok_or("an entry runs off its record")?;
        out.push(if offset & ENTRY_SUMS != 0 {
            if !len.is_multiple_of(4) {
                return Err("a data checksum entry is not whole CRCs".into());
            }
            Entry::Sums(offset & !ENTRY_SUMS, bytes)
        } else if offset & ENTRY_FILL != 0 {
            let (count, value) = match bytes.len() {
                8 | 9 => {
                    (u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")), bytes.get(8).copied().unwrap_or(0))
                }
                _ => return Err("a fill entry without its count".into()),
            };
            let at = usize::try_from(offset & !ENTRY_FILL).map_err(|_| "an offset past the address space")?;
            Entry::Fill(at, count, value)
        } else if offset & ENTRY_FORGET != 0 {
            let count = bytes.try_into().map(u64::from_le_bytes).map_err(|_| "a forget entry without its count")?;
            Entry::Forget(offset & !ENTRY_FORGET, count)
        } else {
            Entry::Image(usize::try_from(offset).map_err(|_| "an offset past the address space")?, bytes)
        });
        at += ENTRY_HEADER + len;
    }
    Ok(out)
}

/// What replay writes at an offset of the image.
enum Change {
    Bytes(Vec<u8>),
    /// Every byte this value.
    Fill(u8),
}

/// `count` as a length when `[at, at + count)` lies inside an image of
/// `len` bytes; else why the entry is damaged.
fn inside(at: usize, count: u64, len: usize) -> Result<usize, String> {
    let end = usize::try_from(count).ok().and_then(|count| at.checked_add(count)).filter(|&end| end <= len);
    end.map(|end| end - at).ok_or_else(|| format!("{count} bytes at {at} lie past the image"))
}

/// Adds what `entry` changes to a commit's held changes: image bytes to
/// `batch`, data checksums (a forget as `None`) to `sums`, block by block.
/// An entry reaching past the image (`len` bytes) or the volume (`blocks`)
/// is damage, refused before anything is held: no count from the log sizes
/// an allocation (a fill is applied in place, a forget's blocks are
/// bounded by the volume).
fn held(
    entry: Entry<'_>,
    len: usize,
    blocks: u64,
    batch: &mut Vec<(usize, usize, Change)>,
    sums: &mut Vec<(u64, Option<u32>)>,
) -> Result<(), String> {
    let past_volume = |first: u64, count: u64| first.checked_add(count).is_none_or(|end| end > blocks);
    match entry {
        Entry::Image(at, bytes) => {
            let count = inside(at, bytes.len() as u64, len)?;
            batch.push((at, count, Change::Bytes(bytes.to_vec())));
        }
        Entry::Fill(at, count, value) => {
            let count = inside(at, count, len)?;
            batch.push((at, count, Change::Fill(value)));
        }
        Entry::Sums(first, crcs) => {
            let count = (crcs.len() / 4) as u64;
            if past_volume(first, count) {
                return Err(format!("checksums of blocks {first}+{count}, past the volume"));
            }
            sums.extend(crcs.chunks_exact(4).enumerate().map(|(k, c)| (first + k as u64, Some(le32(c, 0)))));
        }
        Entry::Forget(first, count) => {
            if past_volume(first, count) {
                return Err(format!("forgotten blocks {first}+{count}, past the volume"));
            }
            sums.extend((first..first + count).map(|b| (b, None)));
        }
    }
    Ok(())
}

/// Writes one committed change into the image file, its superblock part
/// into `superblock` instead (written once, with the pending mark, after).
fn write_committed(
    backing: &mut dyn Backing,
    superblock: &mut [u8],
    at: usize,
    count: usize,
    change: &Change,
) -> std::io::Result<()> {
    const FILL_CHUNK: usize = 64 << 10;
    let piece = |from: usize, to: usize| -> std::borrow::Cow<'_, [u8]> {
        match change {
            Change::Bytes(bytes) => bytes[from - at..to - at].into(),
            Change::Fill(value) => vec![*value; to - from].into(),
        }
    };
    let (sb_start, sb_end) = (at.clamp(1024, 2048), (at + count).clamp(1024, 2048));
    if sb_start < sb_end {
        superblock[sb_start - 1024..sb_end - 1024].copy_from_slice(&piece(sb_start, sb_end));
    }
    for (from, to) in [(at, (at + count).min(1024)), (at.max(2048), at + count)] {
        let mut start = from;
        while start < to {
            let end = to.min(start + FILL_CHUNK);
            backing.write_at(start as u64, &piece(start, end))?;
            start = end;
        }
    }
    Ok(())
}

/// The superblock (1024 bytes) with `incompat` and its checksum set.
fn superblock_with(sb: &[u8], pending: bool) -> Vec<u8> {
    let mut sb = sb[..1024].to_vec();
    let incompat = le32(&sb, 0x60);
    let incompat = if pending { incompat | LOG_PENDING } else { incompat & !LOG_PENDING };
    sb[0x60..0x64].copy_from_slice(&incompat.to_le_bytes());
    let crc = csumkit::crc32c::raw_update(!0, &sb[..0x3FC]);
    sb[0x3FC..].copy_from_slice(&crc.to_le_bytes());
    sb
}

/// Whether the superblock in `image` says a log may hold changes it lacks
/// (a mount has it, or one stopped before its final checkpoint) —
/// or was being marked or unmarked when a power cut tore it: the bit is
/// in its first 512-byte sector and its checksum in the second, which
/// land apart, so a superblock without the bit whose checksum is the one
/// it would have with it is one of those (every other byte proven by that
/// checksum; a CRC tells any one-bit change, so it does not match as it
/// stands). Replaying the log is right for both: the mark is durable
/// before the log's first record, and the log is emptied only after the
/// unmark is durable.
pub fn log_pending(image: &[u8]) -> bool {
    if image.len() < 2048 {
        return false;
    }
    let sb = &image[1024..2048];
    let torn_mark = || le32(sb, 0x3FC) == le32(&superblock_with(sb, true), 0x3FC);
    le32(sb, 0x60) & LOG_PENDING != 0 || torn_mark()
}

/// Clears [`LOG_PENDING`] in the superblock of `image` (the private copy a
/// logged volume opens: the bit belongs on disk only), and re-seals it.
pub(crate) fn clear_pending_bit(image: &mut [u8]) {
    if log_pending(image) {
        let sb = superblock_with(&image[1024..2048], false);
        image[1024..2048].copy_from_slice(&sb);
    }
}

/// Where a log opened by [`Volume::open_logged`] lives: a DAX map, flushed
/// by cache line and durable when fenced; a map on tmpfs, flushed the same
/// way but lost at power-off (the stand-in for persistent memory); or an
/// ordinary file, written with `pwrite` and made durable by `fdatasync` —
/// with direct I/O, in whole device sectors, where its file system takes it.
pub const LOG_ON_DAX: &str = "DAX, flushed by cache line";
/// See [`LOG_ON_DAX`].
pub const LOG_ON_TMPFS: &str = "tmpfs, flushed by cache line (a stand-in for persistent memory: lost at power-off)";
/// See [`LOG_ON_DAX`].
pub const LOG_ON_FILE: &str = "a file, pwrite + fdatasync";
/// See [`LOG_ON_DAX`].
pub const LOG_ON_FILE_DIRECT: &str = "a file, direct writes of whole sectors + fdatasync";

/// The log's medium and which of the three it is: on DAX (a `MAP_SYNC`
/// map works) or tmpfs, a shared map flushed by cache line; elsewhere a
/// file written with `pwrite` and `fdatasync`.
fn log_medium(path: &Path, len: u64) -> Result<(LogMedium, &'static str), Error> {
    use csumkit::bytelog::{FileMedium, MmapMedium, Persist};
    let on_tmpfs = {
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let c = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(dir.as_os_str())).ok();
        // SAFETY: statfs fills a zeroed struct (all-zero is a valid value)
        // from a NUL-terminated path.
        c.is_some_and(|c| unsafe {
            let mut st: libc::statfs = std::mem::zeroed();
            libc::statfs(c.as_ptr(), &mut st) == 0 && st.f_type == libc::TMPFS_MAGIC
        })
    };
    if on_tmpfs {
        return Ok((Box::new(MmapMedium::open(path, len, Persist::CacheLines)?), LOG_ON_TMPFS));
    }
    // Written with zeros first, so the DAX probe below never maps holes.
    let file = FileMedium::open(path, len)?;
    let mapped = MmapMedium::open_auto(path, len)?;
    if mapped.persist() == Persist::CacheLines {
        return Ok((Box::new(mapped), LOG_ON_DAX));
    }
    let on = if file.write_unit() > 1 { LOG_ON_FILE_DIRECT } else { LOG_ON_FILE };
    Ok((Box::new(file), on))
}

impl Redo {
    /// Notes that `[at, at + len)` of the map changed.
    pub(crate) fn note(&mut self, at: usize, len: usize) {
        if len == 0 {
            return;
        }
        self.pending.push((at, at + len));
        self.pending_bytes += len;
        self.touched.extend(at / PAGE..=(at + len - 1) / PAGE);
    }

    /// Whether the page holding byte `at` holds newer bytes in the map
    /// than in the image file (changed since the last checkpoint).
    pub(crate) fn page_newer_than_file(&self, at: u64) -> bool {
        self.touched.contains(&(at as usize / PAGE))
    }

    /// Notes that the blocks at `[at, at + len)` were freed.
    pub(crate) fn freed(&mut self, at: usize, len: usize) {
        if len > 0 {
            self.freed.insert(at / PAGE, (at + len - 1) / PAGE + 1);
            self.freed_version += 1;
        }
    }

    fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets [`LOG_PENDING`] on disk before the first record the image lacks.
    fn mark(&mut self) -> Result<(), Error> {
        if !self.marked {
            self.backing.write_at(1024, &superblock_with(&self.image_superblock, true)).map_err(io("image"))?;
            self.backing.sync().map_err(io("fdatasync of the image"))?;
            self.marked = true;
        }
        Ok(())
    }

    /// Makes the data written so far durable (before metadata that points at it).
    pub(crate) fn sync_data(&mut self) -> Result<(), Error> {
        if self.data_unsynced {
            self.backing.sync().map_err(io("fdatasync of the image"))?;
            self.data_unsynced = false;
        }
        Ok(())
    }

    /// Stages the pending ranges of `image` as one commit (copied now,
    /// appended by [`Writer::flush_through`], which first makes the data
    /// written in place durable). `Ok(false)`: the log's free room lacks
    /// it, and nothing changed ([`Volume::stage_commit`] makes room).
    fn commit(&mut self, image: &[u8], sums: &mut Option<DataSums>) -> Result<bool, Error> {
        self.last_commit = Instant::now();
        let has_sums = sums.as_ref().and_then(|s| s.logged.as_ref()).is_some_and(|l| !l.is_empty());
        if self.pending.is_empty() && !has_sums {
            if std::mem::take(&mut self.data_unsynced) {
                // Data alone (overwrites in place): its sync, no records.
                self.staged += 1;
                self.writer().stage(self.staged, Vec::new(), true, 0);
            }
            return Ok(true);
        }
        let ranges = merged(&self.pending);
        let max = self.writer().log.payload_max();
        let changes = sums.as_mut().map_or(&[][..], DataSums::logged_changes);
        let records = encode(&ranges, image, changes, max);
        let changes = changes.len() as u64;
        // Room for every record plus a wrap marker's worth of waste: less
        // than the largest record's span (it is the room left at the ring's
        // end that a record does not fit).
        let spans = records.iter().map(|r| csumkit::bytelog::record_span(r.len()));
        let need: u64 = spans.clone().sum::<u64>() + spans.max().unwrap_or(0);
        if need > self.writer().free_bytes() {
            self.needs = need;
            return Ok(false);
        }
        if let Some(sums) = sums.as_mut() {
            sums.clear_logged();
        }
        self.mark()?;
        self.staged += 1;
        let data_first = std::mem::take(&mut self.data_unsynced);
        self.writer().stage(self.staged, records, data_first, changes);
        self.sums_in_log |= changes > 0;
        self.committed.extend(ranges);
        self.pending.clear();
        self.pending_bytes = 0;
        self.pending_data = 0;
        self.logged_data.clear();
        Ok(true)
    }

    /// Writes what the image file lacks into it (every committed range, or
    /// with `through` the pending ones too), syncs it, then empties the log.
    fn checkpoint(
        &mut self,
        image: &[u8],
        sums: &mut Option<DataSums>,
        final_: bool,
        through: bool,
        stats: &Stats,
    ) -> Result<(), Error> {
        // Every staged commit is in the log before the log is emptied: one
        // appended after would replay bytes older than the image's.
        self.writer().flush_all()?;
        let mut ranges = std::mem::take(&mut self.committed);
        if through {
            ranges.append(&mut self.pending);
            self.pending_bytes = 0;
            self.pending_data = 0;
            self.logged_data.clear();
        }
        // The image file now gets every change: nothing freed is pending.
        self.freed.clear();
        for (start, end) in merged(&ranges) {
            self.backing.write_at(start as u64, &image[start..end]).map_err(io("image"))?;
        }
        // The mark stays until the data checksums the log carried are in
        // the tree: an image cut before that, unmarked, would have its log
        // ignored, and blocks rewritten in place since the tree's last
        // commit would fail their old checksums (the intent list that
        // named them was emptied by the log's commit).
        self.backing.write_at(1024, &superblock_with(&image[1024..2048], self.marked)).map_err(io("image"))?;
        self.backing.sync().map_err(io("fdatasync of the image"))?;
        self.image_superblock.copy_from_slice(&image[1024..2048]);
        self.data_unsynced = false;
        // The tree after the data it names is durable, before the log is
        // emptied or the mark goes (the intent list stays until the caller
        // empties it after this, the log empty).
        crate::datasum::commit(sums, stats)?;
        if self.marked && final_ {
            self.backing.write_at(1024, &superblock_with(&image[1024..2048], false)).map_err(io("image"))?;
            self.backing.sync().map_err(io("fdatasync of the image"))?;
            self.marked = false;
        }
        self.held &= !final_;
        self.writer().log.checkpoint()?;
        self.sums_in_log = false;
        self.last_checkpoint = Instant::now();
        Stats::bump(&stats.log_checkpoints);
        Ok(())
    }
}

impl Volume {
    /// Opens the image at `path` for writing with its metadata logged in the
    /// ByteLog at `log` (created when missing): a log left by a process that
    /// stopped is replayed into the image first.
    ///
    /// # Errors
    /// As [`Volume::open`]; [`Error::Corrupt`] for a damaged log, or an
    /// image whose log is missing.
    pub fn open_logged(
        path: &Path,
        log: &Path,
        log_bytes: u64,
        options: crate::Options,
        sidecar: Option<&Path>,
    ) -> Result<(Volume, Replayed), Error> {
        Volume::open_logged_on(path, log, log_bytes, options, sidecar, None).map(|(v, r, _)| (v, r))
    }

    /// [`open_logged`](Self::open_logged) for an image on a PI device (seed
    /// 004): its PI in `metadata` (created when missing), every write of
    /// the image — checkpoints, data — through the device. `sidecar`: data
    /// checksums kept as well (none on a `pi` mount; `ext4 checkpoint`
    /// passes the sidecar when there is one, so that the checksums a log
    /// carries are not lost whichever kind of mount wrote it).
    ///
    /// # Errors
    /// As `open_logged` and [`enable_pi`](Self::enable_pi).
    pub fn open_logged_pi(
        path: &Path,
        log: &Path,
        log_bytes: u64,
        options: crate::Options,
        metadata: &Path,
        protection: csumkit::pi::Protection,
        sidecar: Option<&Path>,
    ) -> Result<(Volume, Replayed, crate::PiOpened), Error> {
        Volume::open_logged_on(path, log, log_bytes, options, sidecar, Some((metadata, protection)))
            .map(|(v, r, pi)| (v, r, pi.expect("opened with PI")))
    }

    fn open_logged_on(
        path: &Path,
        log: &Path,
        log_bytes: u64,
        options: crate::Options,
        sidecar: Option<&Path>,
        pi: Option<(&Path, csumkit::pi::Protection)>,
    ) -> Result<(Volume, Replayed, Option<crate::PiOpened>), Error> {
        let io_at = |source| Error::Io { context: path.display().to_string(), source };
        let file = csumkit::file::open_image(path, true)?;
        // Before the log is read: another process may be writing both.
        let image_lock = crate::image_lock::ImageLock::take(&file, path, true)?;
        // Stores stay in this process until a checkpoint writes them to the file.
        let mut map = crate::private_map::PrivateMap::new(&file).map_err(io_at)?;
        let was_pending = log_pending(map.bytes());
        if was_pending && !log.exists() {
            // Creating an empty log here would lose the changes the real one holds.
            return Err(Error::Invalid(format!(
                "{}: its ByteLog holds changes the image lacks, but there is no log at {}: name the log the \
                 mount used (-o log=PATH; the default is IMAGE.bytelog)",
                path.display(),
                log.display()
            )));
        }
        clear_pending_bit(map.bytes_mut());
        // Before the replay writes anything; another node's hold is named
        // before what its mount left on disk.
        let mmp = crate::MultiMountProtection::take(&file, path, map.bytes())?;
        let log_len = resize::log_length_at_open(log, log_bytes, was_pending)?;
        let (medium, log_on) = log_medium(log, log_len)?;
        let mut volume = Volume::new(Bytes::Private(map), crate::Options { write: true, ..options })?;
        volume.image_lock = image_lock;
        volume.mmp = mmp;
        let (backing, opened): (Box<dyn Backing>, _) = match pi {
            None => (Box::new(file), None),
            Some((metadata, protection)) => {
                let (device, opened) =
                    crate::pi::open_device(path, &volume.map, volume.layout.block_size, metadata, protection, true)?;
                volume.pi = Some(device.clone());
                (Box::new(crate::pi::PiBacking(device)), Some(opened))
            }
        };
        let replayed = volume.enable_log(backing, medium, was_pending, sidecar)?;
        volume.redo.as_mut().expect("enabled above").log_on = Some(log_on);
        let log = log.to_path_buf();
        volume.set_log_resize(Box::new(move |len| log_medium(&log, len).map(|(medium, _)| medium)), log_bytes)?;
        Ok((volume, replayed, opened))
    }

    /// Logs this volume's metadata in a ByteLog on `medium`, its image file
    /// being `backing`: replays what the log holds into the image (and the
    /// data checksums it carries into the sidecar at `sidecar`, which keeps
    /// them from then on), then checkpoints. `expect_log`: the image said
    /// its log holds changes (a blank medium is then an error, not a fresh
    /// log).
    ///
    /// # Errors
    /// [`Error::Corrupt`] for a damaged log; [`Error::Io`] from the backing;
    /// as [`enable_data_checksums`](Self::enable_data_checksums).
    pub fn enable_log(
        &mut self,
        backing: Box<dyn Backing>,
        medium: LogMedium,
        expect_log: bool,
        sidecar: Option<&Path>,
    ) -> Result<Replayed, Error> {
        let medium = AnyMedium(medium);
        let blank = medium.view(0, 8).map(|m| m != b"CSBYTLOG").unwrap_or(true);
        let mut replayed = Replayed::default();
        let mut applied = Vec::new();
        // The file's, but for the pending bit the map lost at open.
        let image_superblock = self.map[1024..2048].to_vec();
        // An image without the pending bit holds everything: whatever the
        // log has (an old checkpointed log, or one cut while being
        // formatted) is not needed, and it is formatted afresh.
        let log = if !expect_log {
            let generation = ByteLog::next_generation(&medium);
            ByteLog::format(medium, generation)?
        } else if blank {
            return Err(corrupt(
                "ByteLog",
                "the image says its log holds changes it lacks, but the log is blank or missing",
            ));
        } else {
            let image = self.map.writable().ok_or_else(|| Error::Invalid("a logged volume is writable".into()))?;
            // A commit's changes, held until its last record is whole:
            // (image offset, length, what goes there).
            let mut batch: Vec<(usize, usize, Change)> = Vec::new();
            let mut batch_sums: Vec<(u64, Option<u32>)> = Vec::new();
            let sums = &mut self.replayed_sums;
            let blocks = self.layout.blocks_count;
            let log = ByteLog::replay_with(medium, |record: RecordRef<'_>| {
                let location = || format!("ByteLog record {}", record.seq);
                if record.tag != TAG_PART && record.tag != TAG_LAST {
                    return Err(csumkit::Error::Corrupt { location: location(), detail: "not a csumfs record".into() });
                }
                let entries = decode(record.payload)
                    .map_err(|detail| csumkit::Error::Corrupt { location: location(), detail })?;
                for entry in entries {
                    held(entry, image.len(), blocks, &mut batch, &mut batch_sums)
                        .map_err(|detail| csumkit::Error::Corrupt { location: location(), detail })?;
                }
                if record.tag == TAG_LAST {
                    sums.append(&mut batch_sums);
                    for (at, len, change) in batch.drain(..) {
                        let target = &mut image[at..at + len];
                        match change {
                            Change::Bytes(bytes) => target.copy_from_slice(&bytes),
                            Change::Fill(value) => target.fill(value),
                        }
                        applied.push((at, at + len));
                        replayed.bytes += len as u64;
                    }
                    replayed.commits += 1;
                }
                Ok(())
            })?;
            // A commit's superblock bytes are the map's, whose superblock
            // page shows the file's once a checkpoint hands it back — with
            // the pending bit, so its checksum may cover the bit this map
            // lacks: sealed again without it (only when that checksum
            // proves every other byte; damage stays as it is).
            clear_pending_bit(image);
            log
        };
        let image_sync = backing.sync_handle().map_err(io("duplicating the image's descriptor"))?;
        let log_bytes = log.medium().len();
        let redo = Redo {
            writer: Arc::new(Mutex::new(Writer::new(log, image_sync, self.stats.clone()))),
            staged: 0,
            backing,
            pending: Vec::new(),
            pending_bytes: 0,
            pending_data: 0,
            logged_data: Vec::new(),
            committed: applied,
            sums_in_log: false,
            touched: BTreeSet::new(),
            freed: RangeSet::default(),
            freed_version: 0,
            data_unsynced: false,
            marked: expect_log,
            held: false,
            image_superblock,
            last_commit: Instant::now(),
            last_checkpoint: Instant::now(),
            log_on: None,
            resize: None,
            log_bytes,
            needs: 0,
        };
        self.redo = Some(redo);
        if self.undo.is_none() {
            // Errors roll back in memory: the private copy dies with the process.
            self.undo = Some(crate::undo::UndoLog::in_memory());
        }
        if let Some(sidecar) = sidecar {
            self.enable_data_checksums(sidecar)?;
        }
        // Without a sidecar the checksums the log carried are not kept.
        self.replayed_sums.clear();
        if expect_log {
            // (Only then was anything replayed.) The replayed changes go to
            // the file and the log is emptied now, and with it the records
            // of a commit cut before its last: left in the log, the next
            // commit's records would complete it at the next replay.
            self.checkpoint_now(false, false)?;
            // The file now holds every page as the map has it (the
            // superblock's pending bit aside, which is set on disk while a
            // log is open and read from the map only at open): no copy is
            // needed, of the replayed pages nor of the superblock.
            self.hand_back(&[(0, self.map.len())]);
            // What was cached before the replay may be stale.
            self.filters.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
        }
        Ok(replayed)
    }

    /// Writes file data at `at` through the log whatever its size: it
    /// reaches the image with the commit that carries it, and is lost
    /// with it.
    pub(crate) fn store_data_in_log(&mut self, at: usize, new: &[u8]) -> Result<(), Error> {
        let redo = self.redo.as_mut().expect("called with a log");
        redo.pending_data += new.len();
        redo.logged_data.push((at, at + new.len()));
        self.store(at as u64, new)
    }

    /// Writes file data at `at`: through the log when it is at most a
    /// page and little data is pending, and on a page whose metadata
    /// changed since the last checkpoint; straight to the image file
    /// otherwise.
    pub(crate) fn store_logged_data(&mut self, at: usize, new: &[u8]) -> Result<(), Error> {
        let redo = self.redo.as_mut().expect("called with a log");
        if new.len() <= PAGE && redo.pending_data + new.len() <= LOGGED_DATA_BYTES {
            return self.store_data_in_log(at, new);
        }
        let mut pieces: Vec<(usize, usize, bool)> = Vec::new();
        let mut start = at;
        while start < at + new.len() {
            let end = ((start / PAGE + 1) * PAGE).min(at + new.len());
            let logged = redo.touched.contains(&(start / PAGE)) || redo.freed.contains(start / PAGE);
            match pieces.last_mut() {
                Some(last) if last.2 == logged => last.1 = end,
                _ => pieces.push((start, end, logged)),
            }
            start = end;
        }
        let in_memory = matches!(self.map, Bytes::Owned(_));
        let bs = self.layout.block_size as usize;
        for (start, end, logged) in pieces {
            let bytes = &new[start - at..end - at];
            if logged {
                self.redo.as_mut().expect("called with a log").logged_data.push((start, end));
                self.store(start as u64, bytes)?;
                continue;
            }
            // In place, ahead of the log: announced on the intent list first.
            self.data_will_write((start / bs) as u64, (end.div_ceil(bs) - start / bs) as u64)?;
            if self.pi.is_some() {
                self.pi_store_data(start as u64, bytes)?;
            } else {
                let redo = self.redo.as_mut().expect("called with a log");
                redo.backing.write_at(start as u64, bytes).map_err(io("image"))?;
                if bytes.len() >= WRITE_BEHIND_BYTES {
                    redo.backing.write_behind(start as u64, bytes.len() as u64);
                }
            }
            let redo = self.redo.as_mut().expect("called with a log");
            redo.data_unsynced = true;
            if in_memory {
                // A private file map sees the file's pages it has not
                // copied; bytes in memory see nothing but themselves.
                let image = self.map.writable().expect("a logged volume is writable");
                image[start..end].copy_from_slice(bytes);
            }
        }
        Ok(())
    }

    /// The log's part of `sync`: one commit, made durable before this
    /// returns.
    pub(crate) fn sync_logged(&mut self) -> Result<(), Error> {
        let durable = self.start_sync_logged()?.wait()?;
        self.finish_sync(durable)
    }

    /// The log's part of [`start_sync`](Self::start_sync).
    fn start_sync_logged(&mut self) -> Result<PendingSync, Error> {
        if self.redo.is_none() {
            return Ok(PendingSync::done());
        }
        if !self.stage_commit()? {
            self.checkpoint_now(false, true)?;
            return Ok(PendingSync::done());
        }
        let redo = self.redo.as_ref().expect("checked above");
        let sums_version = self.datasums.as_ref().map_or(0, DataSums::version);
        Ok(PendingSync {
            writer: Some(redo.writer.clone()),
            number: redo.staged,
            versions: Versions { freed: redo.freed_version, sums: sums_version },
        })
    }

    /// The first half of [`sync`](Self::sync), under the volume's lock:
    /// with a ByteLog, the changes since the last commit are encoded
    /// (copied) and staged, and [`PendingSync::wait`] makes them durable
    /// without the volume — other operations may run meanwhile; their
    /// changes go to the next commit. Without a log the whole sync runs
    /// here. Then [`finish_sync`](Self::finish_sync).
    ///
    /// # Errors
    /// As `sync`.
    pub fn start_sync(&mut self) -> Result<PendingSync, Error> {
        if self.redo.is_some() {
            return self.start_sync_logged();
        }
        self.sync_in_place()?;
        Ok(PendingSync::done())
    }

    /// The last half of [`sync`](Self::sync), under the volume's lock
    /// again: what waited for the commit to be durable — blocks freed
    /// before it may take data in place, the data checksums' intent list
    /// and forgotten blocks are let go — unless more of those came after
    /// it was staged (they wait for the next commit).
    ///
    /// # Errors
    /// [`Error::Io`] emptying the intent list.
    pub fn finish_sync(&mut self, durable: DurableSync) -> Result<(), Error> {
        let (Some(versions), Some(redo)) = (durable.0, self.redo.as_mut()) else { return Ok(()) };
        if redo.freed_version == versions.freed {
            redo.freed.clear();
        }
        match self.datasums.as_mut() {
            Some(sums) if sums.version() == versions.sums => sums.log_committed(false, self.layout.block_size),
            _ => Ok(()),
        }
    }

    /// At the end of an operation: commit when enough is pending or the
    /// last commit is old; checkpoint when the log is half full, the
    /// private copy has grown large or the last checkpoint is old.
    pub(crate) fn after_operation(&mut self) -> Result<(), Error> {
        let Some(redo) = self.redo.as_ref() else { return Ok(()) };
        let due = redo.pending_bytes >= COMMIT_BYTES || redo.last_commit.elapsed() >= COMMIT_AGE;
        let sums = self.datasums.as_ref().and_then(|s| s.logged.as_ref()).is_some_and(|l| !l.is_empty());
        if due && (!redo.pending.is_empty() || sums) {
            self.sync_logged()?;
        }
        let redo = self.redo.as_ref().expect("checked above");
        // Not while a sync flushes the log (this holds the volume's lock,
        // which every call waits for): the next operation's end looks.
        // A log grown for a large commit goes back to its length too.
        let (ring_half, grown) = redo.writer.try_lock().map_or((false, false), |writer| {
            let len = writer.log.medium().len();
            (writer.free_bytes() < (len - csumkit::bytelog::RING_OFFSET) / 2, len > redo.log_bytes)
        });
        let old = !redo.committed.is_empty() && redo.last_checkpoint.elapsed() >= CHECKPOINT_AGE;
        if ring_half || grown || old || redo.touched.len() >= CHECKPOINT_PAGES {
            self.checkpoint_now(false, false)?;
        }
        Ok(())
    }

    /// Marks the image on disk as needing its log ([`LOG_PENDING`]) now,
    /// not at the first commit, and keeps it marked until the final
    /// [`checkpoint`](Self::checkpoint): the kernel and e2fsck then refuse
    /// the image for as long as csumfs may write it — a kernel mount let in
    /// before the first commit would be written over by it. ext4 sets
    /// `needs_recovery` at mount for the same reason. A mount calls it
    /// before it serves; a stopped mount's image needs `csumkit ext4
    /// checkpoint` (or the next mount) even when it changed nothing. No-op
    /// without a log (a `log=off` volume's undo log marks it: `undo.rs`).
    ///
    /// # Errors
    /// [`Error::Io`] writing or syncing the superblock.
    pub fn mark_log_in_use(&mut self) -> Result<(), Error> {
        let Some(redo) = self.redo.as_mut() else { return Ok(()) };
        redo.held = true;
        redo.mark()
    }

    /// Folds everything into the image file and empties the log, leaving
    /// an image the kernel and e2fsck accept (also what unmount does).
    /// Without a log: [`sync`](Self::sync), then the undo log's mark
    /// cleared (`undo.rs`) when no operation is in progress.
    ///
    /// # Errors
    /// [`Error::Io`] from the image or the log.
    pub fn checkpoint(&mut self) -> Result<(), Error> {
        if self.redo.is_none() {
            return self.checkpoint_in_place();
        }
        self.checkpoint_now(true, false)
    }

    fn checkpoint_now(&mut self, final_: bool, through: bool) -> Result<(), Error> {
        if self.redo.is_none() {
            return Ok(());
        }
        // Everything a checkpoint writes is committed first; with no room
        // even in the emptied log for that, it is written through (not
        // atomic).
        let through = through || !self.stage_commit()?;
        let redo = self.redo.as_mut().expect("checked above");
        if through {
            Stats::bump(&self.stats.log_write_through);
        }
        redo.checkpoint(&self.map, &mut self.datasums, final_, through, &self.stats)?;
        // Everything committed is durable and in the image file now, and
        // the log is empty: the intent list goes.
        if let Some(sums) = self.datasums.as_mut() {
            sums.log_committed(true, self.layout.block_size)?;
        }
        let redo = self.redo.as_mut().expect("checked above");
        redo.shrink_log()?;
        let pages = std::mem::take(&mut redo.touched);
        // The file now holds what these copied pages hold.
        let ranges: Vec<(usize, usize)> = pages.iter().map(|&p| (p * PAGE, (p + 1) * PAGE)).collect();
        self.hand_back(&merged(&ranges));
        Ok(())
    }

    /// Stages the pending changes as one commit, first making room when
    /// the log's free room lacks it ([`fold_log`](Self::fold_log)).
    /// `Ok(false)`: not even the emptied log has room (write through).
    fn stage_commit(&mut self) -> Result<bool, Error> {
        if self.datasums.as_mut().is_some_and(DataSums::commits_tree_instead) {
            // Many new checksums (a large sequential write): the tree goes
            // to the sidecar now, its own two flushes, instead of hundreds
            // of log records each made durable on its own. The image's data
            // is made durable first, and blocks whose data waits in the log
            // are listed ahead of it, so the sidecar never names data the
            // image lacks unannounced (else they are logged after all).
            // A log still holding checksums is folded instead, which
            // commits the tree and then empties the log: a replay would set
            // the log's checksums over the tree's newer ones of the same
            // blocks (a block rewritten in place read back as `EIO`; found
            // by the power-cut test of this path).
            let redo = self.redo.as_mut().expect("called with a log");
            redo.sync_data()?;
            let logged = redo.logged_data.clone();
            let committed = if redo.sums_in_log {
                self.fold_log()?
            } else if self.list_ahead_of_data(&logged)? {
                crate::datasum::commit(&mut self.datasums, &self.stats)?;
                true
            } else {
                false
            };
            if committed {
                self.datasums.as_mut().expect("checked above").clear_logged();
                Stats::bump(&self.stats.datasum_commits_for_log);
            }
        }
        let redo = self.redo.as_mut().expect("called with a log");
        if redo.commit(&self.map, &mut self.datasums)? {
            return Ok(true);
        }
        if !redo.committed.is_empty() || redo.sums_in_log {
            if !self.fold_log()? {
                return Ok(false);
            }
            Stats::bump(&self.stats.log_folds);
            let redo = self.redo.as_mut().expect("called with a log");
            if redo.commit(&self.map, &mut self.datasums)? {
                return Ok(true);
            }
        }
        // Not even the empty log has room: a larger one, where it can grow.
        self.grow_log_for_commit()
    }

    /// Makes room in the log for a commit its free room lacks (or empties
    /// a log holding checksums before the tree is committed in place of
    /// logging more, see [`stage_commit`](Self::stage_commit)): every
    /// record the log holds is written into the image file as it was
    /// committed — read back from the log, not taken from the map, whose
    /// pages may hold pending changes too, which must not reach the file
    /// ahead of their commit — the file is synced, the data checksums
    /// committed and the log emptied. Pending changes stay pending, and
    /// the pages they touch stay the map's own. `Ok(false)`: the intent
    /// list has no room for the data waiting in the log (nothing done).
    fn fold_log(&mut self) -> Result<bool, Error> {
        let redo = self.redo.as_mut().expect("called with a log");
        // Every staged commit is in the log before it is read back.
        redo.writer().flush_all()?;
        let logged = redo.logged_data.clone();
        if !self.list_ahead_of_data(&logged)? {
            return Ok(false);
        }
        let (len, blocks) = (self.map.len(), self.layout.blocks_count);
        let redo = self.redo.as_mut().expect("called with a log");
        assert!(redo.marked, "a log holding commits has its image marked");
        let mut superblock = redo.image_superblock.clone();
        let backing = &mut redo.backing;
        let mut batch: Vec<(usize, usize, Change)> = Vec::new();
        let mut ignored_sums = Vec::new();
        redo.writer.lock().unwrap_or_else(PoisonError::into_inner).log.for_each_record(|record| {
            let damaged =
                |detail| csumkit::Error::Corrupt { location: format!("ByteLog record {}", record.seq), detail };
            for entry in decode(record.payload).map_err(damaged)? {
                // (The tree holds these checksums, or newer ones.)
                held(entry, len, blocks, &mut batch, &mut ignored_sums).map_err(damaged)?;
            }
            ignored_sums.clear();
            if record.tag == TAG_LAST {
                for (at, count, change) in batch.drain(..) {
                    write_committed(backing.as_mut(), &mut superblock, at, count, &change)
                        .map_err(|source| csumkit::Error::Io { context: "image".into(), source })?;
                }
            }
            Ok(())
        })?;
        assert!(batch.is_empty(), "every commit in the log is whole");
        redo.backing.write_at(1024, &superblock_with(&superblock, true)).map_err(io("image"))?;
        redo.backing.sync().map_err(io("fdatasync of the image"))?;
        redo.image_superblock = superblock;
        redo.data_unsynced = false;
        // The tree after the data it names is durable (data still in the
        // log listed above), before the log is emptied; the intent list
        // stays until the next commit is durable (see `datasum::commit`).
        crate::datasum::commit(&mut self.datasums, &self.stats)?;
        let redo = self.redo.as_mut().expect("called with a log");
        redo.writer().log.checkpoint()?;
        redo.committed.clear();
        redo.sums_in_log = false;
        redo.last_checkpoint = Instant::now();
        Stats::bump(&self.stats.log_checkpoints);
        // The file now holds every page as the map has it but those the
        // pending changes touch.
        let pending: BTreeSet<usize> = redo.pending.iter().flat_map(|&(s, e)| s / PAGE..=(e - 1) / PAGE).collect();
        let caught_up: Vec<usize> = redo.touched.difference(&pending).copied().collect();
        redo.touched = pending;
        let ranges: Vec<(usize, usize)> = caught_up.iter().map(|&p| (p * PAGE, (p + 1) * PAGE)).collect();
        self.hand_back(&merged(&ranges));
        Ok(true)
    }

    /// Drops this process's copies of the private map's pages in `ranges`
    /// (page-aligned, sorted): the map reads the file's pages again. Only
    /// for pages the file holds as they are.
    fn hand_back(&mut self, ranges: &[(usize, usize)]) {
        if let Bytes::Private(map) = &mut self.map {
            map.hand_back(ranges);
        }
    }

    /// A volume over an image in memory whose metadata a ByteLog may hold
    /// (a copy of a logged mount's image): the log-pending mark is cleared in
    /// this copy, as [`open_logged`](Self::open_logged) clears it in its
    /// private map, and returned — pass it to [`enable_log`](Self::enable_log)
    /// as `expect_log` before anything else touches the volume.
    ///
    /// # Errors
    /// As [`from_bytes`](Self::from_bytes).
    pub fn from_logged_bytes(image: Vec<u8>, options: crate::Options) -> Result<(Volume, bool), Error> {
        let mut image = image;
        let was_pending = log_pending(&image);
        clear_pending_bit(&mut image);
        Ok((Volume::new(Bytes::Owned(image), options)?, was_pending))
    }

    /// What `image` holds once the ByteLog `log` (a copy of its file) is
    /// replayed into it, without writing either: how `csumkit ext4 check`
    /// judges an image a stopped mount left.
    ///
    /// # Errors
    /// As [`enable_log`](Self::enable_log).
    pub fn replayed_image(image: Vec<u8>, log: Vec<u8>) -> Result<(Vec<u8>, Replayed), Error> {
        let mut log = log;
        log.resize(log.len().next_multiple_of(64), 0);
        let (mut volume, expect_log) =
            Volume::from_logged_bytes(image, crate::Options { write: true, ..crate::Options::default() })?;
        let medium = csumkit::bytelog::SimMedium::from_image(log);
        let replayed = volume.enable_log(Box::new(Nowhere), Box::new(medium), expect_log, None)?;
        let Bytes::Owned(image) = std::mem::replace(&mut volume.map, Bytes::Owned(Vec::new())) else {
            unreachable!("made from bytes above")
        };
        Ok((image, replayed))
    }

    /// Whether metadata goes through a ByteLog.
    pub fn logged(&self) -> bool {
        self.redo.is_some()
    }

    /// Bytes of the image this process holds its own copy of: the pages of
    /// its private map written since they were last checkpointed, as the
    /// kernel counts them (the map's `Anonymous` lines in
    /// `/proc/self/smaps`). `None` without a private map (no log, an image
    /// in memory) or without `/proc`.
    pub fn private_copy_bytes(&self) -> Option<u64> {
        let Bytes::Private(map) = &self.map else { return None };
        let map = map.bytes();
        let (start, end) = (map.as_ptr() as usize, map.as_ptr() as usize + map.len());
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let (mut inside, mut kib) = (false, 0u64);
        for line in smaps.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if let Some((from, to)) = first.split_once('-').filter(|_| !first.ends_with(':')) {
                let range = usize::from_str_radix(from, 16).ok().zip(usize::from_str_radix(to, 16).ok());
                inside = range.is_some_and(|(from, to)| start <= from && to <= end.next_multiple_of(PAGE));
            } else if inside && first == "Anonymous:" {
                kib += words.next().and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
            }
        }
        Some(kib * 1024)
    }

    /// Where the ByteLog lives ([`LOG_ON_DAX`], [`LOG_ON_TMPFS`] or
    /// [`LOG_ON_FILE`]) when [`open_logged`](Self::open_logged) chose its
    /// medium; `None` without a log or with a medium given by the caller.
    pub fn log_on(&self) -> Option<&'static str> {
        self.redo.as_ref().and_then(|r| r.log_on)
    }
}

use std::path::Path;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_when_they_touch() {
        assert_eq!(merged(&[(10, 20), (0, 5), (5, 8), (15, 30), (40, 41)]), vec![(0, 8), (10, 30), (40, 41)]);
        assert_eq!(merged(&[]), vec![]);
    }

    /// Each replayed entry holds exactly its bytes and blocks: checksums
    /// block after block, a forget of each block of its run, a run ending
    /// at the volume's last block taken, one block further refused.
    #[test]
    fn replayed_entries_are_held_block_by_block() {
        let (len, blocks) = (40_960, 10);
        let (mut batch, mut sums) = (Vec::new(), Vec::new());
        let crcs: Vec<u8> = [11u32, 22, 33].iter().flat_map(|c| c.to_le_bytes()).collect();
        for entry in [
            Entry::Sums(7, &crcs),
            Entry::Forget(4, 3),
            Entry::Forget(9, 1),
            Entry::Image(len - 2, &[5, 6]),
            Entry::Fill(100, 4, 0xAB),
        ] {
            held(entry, len, blocks, &mut batch, &mut sums).unwrap();
        }
        assert_eq!(sums, [(7, Some(11)), (8, Some(22)), (9, Some(33)), (4, None), (5, None), (6, None), (9, None)],);
        assert_eq!(batch.len(), 2);
        assert!(matches!(&batch[0], (at, 2, Change::Bytes(b)) if *at == len - 2 && b[..] == [5, 6]));
        assert!(matches!(batch[1], (100, 4, Change::Fill(0xAB))));
        for (entry, what) in [
            (Entry::Sums(8, &crcs), "checksums one block past the end"),
            (Entry::Forget(9, 2), "a forget one block past the end"),
            (Entry::Forget(u64::MAX, 1), "a forget whose end overflows"),
            (Entry::Image(len - 1, &[5, 6]), "bytes one past the image"),
            (Entry::Fill(len, 1, 0), "a fill past the image"),
        ] {
            let err = held(entry, len, blocks, &mut batch, &mut sums).expect_err(what);
            assert!(err.contains("past the"), "{what}: {err}");
        }
        assert_eq!((batch.len(), sums.len()), (2, 7), "nothing held from a refused entry");
    }

    #[test]
    fn records_round_trip_and_fill_to_the_limit() {
        let mut image: Vec<u8> = (0..20_000u32).map(|i| (i * 7) as u8 | 1).collect();
        // Zero runs: one long (a zero entry), one too short to be one, one at a range's end.
        image[1000..5000].fill(0);
        image[6000..6063].fill(0);
        image[19_900..19_999].fill(0);
        image[7000..8000].fill(0xFF); // a bitmap run taken whole
        let ranges = [(3, 9000), (9001, 9002), (12_000, 19_999)];
        // 1500 checksums in one run (split across records), a forgotten
        // run, a lone checksum, then a run after a gap.
        let mut sums: Vec<(u64, Option<u32>)> = (100..1600).map(|b| (b, Some(b as u32 * 3))).collect();
        sums.extend((1600..1700).map(|b| (b, None)));
        sums.push((5000, Some(7)));
        sums.extend((5002..5010).map(|b| (b, Some(b as u32))));
        // A version-1 log's records, many to the commit; and today's, one.
        for (max, count) in [(4064, 5), (65_504, 1)] {
            let records = encode(&ranges, &image, &sums, max);
            assert_eq!(records.len(), count, "records of at most {max} bytes");
            assert!(records.iter().all(|r| r.len() <= max));
            assert!(records[..records.len() - 1].iter().all(|r| r.len() > max - ENTRY_HEADER - 4));
            let mut back = vec![0u8; image.len()];
            let (mut covered, mut sums_back, mut fill_entries) = (0, Vec::new(), 0);
            // Every byte is 0xFF before decoding, so a byte nothing covered shows.
            back.fill(0xFF);
            for record in &records {
                let mut batch = Vec::new();
                for entry in decode(record).unwrap() {
                    held(entry, image.len(), u64::MAX, &mut batch, &mut sums_back).unwrap();
                }
                for (at, n, change) in batch {
                    covered += n;
                    match change {
                        Change::Bytes(bytes) => back[at..at + n].copy_from_slice(&bytes),
                        Change::Fill(value) => {
                            back[at..at + n].fill(value);
                            fill_entries += 1;
                        }
                    }
                }
            }
            assert_eq!(covered, ranges.iter().map(|(s, e)| e - s).sum::<usize>());
            for &(s, e) in &ranges {
                assert_eq!(back[s..e], image[s..e]);
            }
            assert_eq!(sums_back, sums);
            assert_eq!(fill_entries, 3, "the 4000- and 99-byte zero runs and the 0xFF run, not the 63-byte one");
            assert!(decode(&records[0][..11]).is_err());
            assert!(decode(&records[0][..100]).is_err());
            assert_eq!(encode(&[], &image, &[], max), vec![Vec::<u8>::new()]);
        }
    }

    /// The entries of each record: (offset, length) of an image entry, or
    /// (offset with its kind bit, bytes) of the others.
    fn layout(records: &[Vec<u8>]) -> Vec<Vec<(u64, usize)>> {
        records
            .iter()
            .map(|r| {
                decode(r)
                    .unwrap()
                    .into_iter()
                    .map(|e| match e {
                        Entry::Image(at, bytes) => (at as u64, bytes.len()),
                        Entry::Fill(at, n, _) => (ENTRY_FILL | at as u64, n as usize),
                        Entry::Sums(first, crcs) => (ENTRY_SUMS | first, crcs.len()),
                        Entry::Forget(first, n) => (ENTRY_FORGET | first, n as usize),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn records_are_packed_to_the_byte() {
        let max = 4064; // a version-1 log's records: several to a commit
        let image: Vec<u8> = (0..40_000u32).map(|i| (i % 251) as u8 | 1).collect();
        // One long range: each record one entry filling it whole.
        let one = max - ENTRY_HEADER;
        assert_eq!(
            layout(&encode(&[(0, 10_000)], &image, &[], max)),
            vec![vec![(0, one)], vec![(one as u64, one)], vec![(2 * one as u64, 10_000 - 2 * one)]]
        );
        // After a 100-byte entry the next one takes exactly what is left.
        let rest = max - (ENTRY_HEADER + 100) - ENTRY_HEADER;
        assert_eq!(layout(&encode(&[(0, 100), (200, 10_000)], &image, &[], max))[0], vec![(0, 100), (200, rest)]);
        // Left with exactly a header and one byte: a one-byte entry ends the
        // record; with a header and no byte, it starts the next one.
        let first = max - 2 * ENTRY_HEADER - 1;
        let records = encode(&[(0, first), (20_000, 20_001)], &image, &[], max);
        assert_eq!(layout(&records), vec![vec![(0, first), (20_000, 1)]]);
        assert_eq!(records[0].len(), max);
        let records = encode(&[(0, first + 1), (20_000, 20_002)], &image, &[], max);
        assert_eq!(layout(&records), vec![vec![(0, first + 1)], vec![(20_000, 2)]]);
        // Left with a header and 8 bytes: a zero fill's count fits; a
        // 0xFF fill (count and value) does not.
        let mut filled = image.clone();
        filled[30_000..30_100].fill(0);
        filled[31_000..31_100].fill(0xFF);
        let first = max - 2 * ENTRY_HEADER - 8;
        let records = encode(&[(0, first), (30_000, 30_100)], &filled, &[], max);
        assert_eq!(layout(&records), vec![vec![(0, first), (ENTRY_FILL | 30_000, 100)]]);
        let records = encode(&[(0, first), (31_000, 31_100)], &filled, &[], max);
        assert_eq!(layout(&records), vec![vec![(0, first)], vec![(ENTRY_FILL | 31_000, 100)]]);
        // Checksums: as many whole CRCs as fit.
        let sums: Vec<(u64, Option<u32>)> = (0..2000).map(|b| (b, Some(b as u32))).collect();
        let per = (max - ENTRY_HEADER) / 4;
        assert_eq!(
            layout(&encode(&[], &image, &sums, max)),
            vec![vec![(ENTRY_SUMS, 4 * per)], vec![(ENTRY_SUMS | per as u64, 4 * (2000 - per))]]
        );
    }

    /// A `Redo` over a simulated log and a backing that keeps nothing.
    fn bare_redo() -> Redo {
        let medium = AnyMedium(Box::new(csumkit::bytelog::SimMedium::new(64 << 10)));
        let log = ByteLog::format(medium, 1).unwrap();
        Redo {
            writer: Arc::new(Mutex::new(Writer::new(log, Box::new(|| Ok(())), Arc::default()))),
            staged: 0,
            backing: Box::new(Nowhere),
            pending: Vec::new(),
            pending_bytes: 0,
            pending_data: 0,
            logged_data: Vec::new(),
            committed: Vec::new(),
            sums_in_log: false,
            touched: BTreeSet::new(),
            freed: RangeSet::default(),
            freed_version: 0,
            data_unsynced: false,
            marked: false,
            held: false,
            image_superblock: vec![0; 1024],
            last_commit: Instant::now(),
            last_checkpoint: Instant::now(),
            log_on: None,
            resize: None,
            log_bytes: 64 << 10,
            needs: 0,
        }
    }

    #[test]
    fn notes_cover_exactly_the_pages_changed() {
        let mut redo = bare_redo();
        redo.note(4095, 1);
        redo.note(4096, 4096);
        redo.note(3 * 4096 - 2, 2);
        redo.note(9 * 4096 + 5, 0);
        assert_eq!(redo.touched.iter().copied().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(redo.pending, vec![(4095, 4096), (4096, 8192), (12_286, 12_288)]);
        assert_eq!(redo.pending_bytes, 4099);
        assert!(redo.page_newer_than_file(0) && redo.page_newer_than_file(8192) && !redo.page_newer_than_file(12_288));
        redo.freed(5 * 4096 - 1, 1);
        redo.freed(6 * 4096, 4096);
        redo.freed(9 * 4096 + 5, 0);
        let freed: Vec<usize> = (0..12).filter(|&p| redo.freed.contains(p)).collect();
        assert_eq!(freed, vec![4, 6]);
    }

    #[test]
    fn fill_runs_split_exactly() {
        for (bytes, want) in [
            (vec![], vec![]),
            (vec![0; 63], vec![(0, 63, None)]),
            (vec![0; 64], vec![(0, 64, Some(0))]),
            (vec![0xFF; 64], vec![(0, 64, Some(0xFF))]),
            ([vec![1], vec![0; 64], vec![2]].concat(), vec![(0, 1, None), (1, 65, Some(0)), (65, 66, None)]),
            ([vec![0; 63], vec![5], vec![0; 63]].concat(), vec![(0, 127, None)]),
            ([vec![0; 64], vec![0xFF; 70]].concat(), vec![(0, 64, Some(0)), (64, 134, Some(0xFF))]),
            (
                [vec![7; 10], vec![0xFF; 64], vec![7; 3]].concat(),
                vec![(0, 10, None), (10, 74, Some(0xFF)), (74, 77, None)],
            ),
        ] {
            assert_eq!(fill_split(&bytes), want, "{bytes:?}");
        }
    }

    proptest::proptest! {
        /// The block- and word-wise run length equals a byte-by-byte count,
        /// at every start and alignment (runs past two 64-byte blocks).
        #[test]
        fn run_len_counts_as_bytes_do(runs in proptest::collection::vec((0u8..3, 0usize..200), 1..12),
                                     offset in 0usize..9, at in 0usize..2000) {
            let bytes: Vec<u8> = runs.iter().flat_map(|&(v, n)| std::iter::repeat_n(v, n + 1)).collect();
            let bytes = &bytes[offset.min(bytes.len() - 1)..];
            let at = at % bytes.len();
            proptest::prop_assert_eq!(run_len(bytes, at), bytes[at..].iter().take_while(|&&b| b == bytes[at]).count());
        }

        /// The word-wise split equals one made a byte at a time: maximal
        /// runs of one value, those of `FILL_RUN_MIN` bytes or more filled,
        /// the pieces between them merged — runs just under, at and over the
        /// minimum, at every phase.
        #[test]
        fn fill_split_cuts_as_bytes_do(runs in proptest::collection::vec((0u8..3, 0usize..80), 0..14),
                                       offset in 0usize..9) {
            let bytes: Vec<u8> = runs.iter().flat_map(|&(v, n)| std::iter::repeat_n(v, n + 1)).collect();
            let bytes = &bytes[offset.min(bytes.len())..];
            let mut want: Vec<(usize, usize, Option<u8>)> = Vec::new();
            let mut at = 0;
            while at < bytes.len() {
                let run = bytes[at..].iter().take_while(|&&b| b == bytes[at]).count();
                match want.last_mut() {
                    _ if run >= FILL_RUN_MIN => want.push((at, at + run, Some(bytes[at]))),
                    Some(last) if last.2.is_none() => last.1 = at + run,
                    _ => want.push((at, at + run, None)),
                }
                at += run;
            }
            proptest::prop_assert_eq!(fill_split(bytes), want);
        }
    }

    /// Every write an image file got: where, what.
    type Writes = std::sync::Arc<std::sync::Mutex<Vec<(u64, Vec<u8>)>>>;

    /// An image file that keeps every write.
    struct Recorder(Writes);

    impl Backing for Recorder {
        fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
            self.0.lock().unwrap().push((at, bytes.to_vec()));
            Ok(())
        }
        fn sync(&mut self) -> std::io::Result<()> {
            Ok(())
        }
        fn sync_handle(&self) -> std::io::Result<SyncHandle> {
            Ok(Box::new(|| Ok(())))
        }
    }

    #[test]
    fn the_mark_writes_the_files_superblock_not_the_commit_under_way() {
        // The commit changes the superblock's free count; the mark, on disk
        // before the commit is, must not carry it: a cut between them would
        // leave the count of an operation the replayed log never had.
        let writes = Writes::default();
        let mut redo = bare_redo();
        redo.backing = Box::new(Recorder(writes.clone()));
        let mut image = vec![0u8; 8192];
        image[1024 + 0x0C..1024 + 0x10].copy_from_slice(&500u32.to_le_bytes());
        redo.image_superblock.copy_from_slice(&image[1024..2048]);
        image[1024 + 0x0C..1024 + 0x10].copy_from_slice(&480u32.to_le_bytes());
        redo.note(1024 + 0x0C, 4);
        assert!(redo.commit(&image, &mut None).unwrap());
        let seen = writes.lock().unwrap();
        assert_eq!(seen.len(), 1, "one write: the mark");
        let (at, mark) = &seen[0];
        assert_eq!((*at, le32(mark, 0x0C)), (1024, 500), "the mark carries the file's free count");
        assert_eq!(le32(mark, 0x60) & LOG_PENDING, LOG_PENDING);
        // After a checkpoint the file holds the committed superblock, still
        // marked: the next commit needs no mark (one write and sync fewer).
        drop(seen);
        redo.checkpoint(&image, &mut None, false, false, &Stats::default()).unwrap();
        assert_eq!(le32(&redo.image_superblock, 0x0C), 480);
        let written = |writes: &Writes| writes.lock().unwrap().iter().filter(|(at, _)| *at == 1024).count();
        let superblocks = written(&writes);
        redo.note(4096, 8);
        assert!(redo.commit(&image, &mut None).unwrap());
        assert_eq!(written(&writes), superblocks, "the mark outlives a checkpoint that is not the last");
    }

    #[test]
    fn a_mark_torn_between_the_superblocks_sectors_still_says_pending() {
        let mut clean = vec![0u8; 4096];
        clean[1024 + 0x0C] = 77;
        let sealed = superblock_with(&clean[1024..2048], false);
        clean[1024..2048].copy_from_slice(&sealed);
        let marked = superblock_with(&clean[1024..2048], true);
        let with = |first: &[u8], second: &[u8]| {
            let mut image = clean.clone();
            image[1024..1536].copy_from_slice(&first[..512]);
            image[1536..2048].copy_from_slice(&second[512..]);
            image
        };
        assert!(!log_pending(&clean));
        // The bit's sector old, the checksum's new (a mark cut short, or an
        // unmark's other half): pending, and re-sealed as it was.
        let mut torn = with(&sealed, &marked);
        assert!(log_pending(&torn), "the checksum proves the bit was being set");
        clear_pending_bit(&mut torn);
        assert_eq!(torn, clean);
        assert!(log_pending(&with(&marked, &sealed)), "the bit itself landed");
        // Any other damage is not a torn mark.
        let mut rotten = with(&sealed, &marked);
        rotten[1024 + 0x0C] ^= 1;
        assert!(!log_pending(&rotten), "a superblock damaged elsewhere is not read as pending");
        assert!(log_pending(&with(&marked, &marked)[..2048]) && !log_pending(&clean[..2047]));
    }

    #[test]
    fn the_pending_bit_sets_and_clears_with_a_valid_checksum() {
        let mut image = vec![0u8; 4096];
        image[1024 + 0x60..1024 + 0x64].copy_from_slice(&0x2C2u32.to_le_bytes());
        let marked = superblock_with(&image[1024..2048], true);
        image[1024..2048].copy_from_slice(&marked);
        assert!(log_pending(&image));
        assert_eq!(le32(&image, 1024 + 0x3FC), csumkit::crc32c::raw_update(!0, &image[1024..1024 + 0x3FC]));
        clear_pending_bit(&mut image);
        assert!(!log_pending(&image));
        assert_eq!(le32(&image, 1024 + 0x60), 0x2C2);
        assert_eq!(le32(&image, 1024 + 0x3FC), csumkit::crc32c::raw_update(!0, &image[1024..1024 + 0x3FC]));
    }
}

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
//! ([`Volume::mark_log_in_use`](crate::Volume::mark_log_in_use)).
//!
//! Record payload: entries of image offset u64, length u32, then the bytes.

use crate::error::Error;
use crate::format::features::{superblock_with_incompat, FC_BYTELOG, LOG_PENDING};
use crate::ranges::RangeSet;
use crate::stats::Stats;
use crate::store::data_sums::DataSums;
use crate::store::log_writer::{Log, Writer};
use crate::store::medium::Backing;
use crate::store::private_map::PAGE;
use csumkit::ext4::feature_bits::INCOMPAT_RECOVER;
use csumkit::le::le32;
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub(crate) mod resize;
use csumkit::ext4::fields::{S_CHECKSUM, S_FEATURE_INCOMPAT};
use resize::LogResize;

const ENTRY_HEADER: usize = 12;
/// File data written in place in pieces of at least this many bytes
/// starts for the disk at once: a stream's fsync then waits for its tail
/// only, not for all it wrote. Smaller writes wait in the page
/// cache, where rewrites of the same pages cost nothing.
pub(crate) const WRITE_BEHIND_BYTES: usize = 256 << 10;
/// Commit at the end of an operation once this many bytes are pending…
pub(crate) const COMMIT_BYTES: usize = 1 << 20;
/// …or once the last commit is this old (ext4's default commit interval).
pub(crate) const COMMIT_AGE: Duration = Duration::from_secs(5);
/// Writes of up to a page are logged with the metadata, up to this many
/// bytes per commit: a small file's `fsync`, or a database's after a page
/// rewritten, is then one append to the log and one flush, not a write of
/// the image and a record, each flushed. Larger writes go to the image file directly:
/// logged, their bytes would reach the disk twice (log, then checkpoint).
pub(crate) const LOGGED_DATA_BYTES: usize = 64 << 10;
/// Checkpoint once this many pages of the private map differ from the file…
pub(crate) const CHECKPOINT_PAGES: usize = 16 << 10;
/// …or once the last checkpoint is this old and something was committed since.
pub(crate) const CHECKPOINT_AGE: Duration = Duration::from_secs(30);

/// The log and what the image file lacks.
pub(crate) struct Redo {
    /// The log and the commits staged for it, flushed outside the volume's lock.
    pub(crate) writer: Arc<Mutex<Writer>>,
    /// The number of the last commit staged.
    pub(crate) staged: u64,
    pub(crate) backing: Box<dyn Backing>,
    /// Ranges changed since the last commit.
    pub(crate) pending: Vec<(usize, usize)>,
    pub(crate) pending_bytes: usize,
    /// File data among the pending ranges…
    pub(crate) pending_data: usize,
    /// …and where it is (bytes of the image): in the map only until its
    /// commit is checkpointed.
    pub(crate) logged_data: Vec<(usize, usize)>,
    /// Ranges committed since the last checkpoint.
    pub(crate) committed: Vec<(usize, usize)>,
    /// A commit since the last checkpoint carried data checksums. A replay
    /// applies them over the sidecar's tree, as newer than it: the tree
    /// must not be committed with newer checksums of their blocks that the
    /// log lacks while the log still holds them (see
    /// [`Volume::stage_commit`](crate::Volume::stage_commit)).
    pub(crate) sums_in_log: bool,
    /// Pages of the map changed since the last checkpoint.
    pub(crate) touched: BTreeSet<usize>,
    /// Pages holding blocks freed since the last commit: until the free is
    /// durable, the blocks may still be a file's after a crash, so data
    /// for them goes through the log (ext4 does not reuse such blocks).
    /// Emptied once the commit carrying the frees is durable.
    pub(crate) freed: RangeSet,
    /// Bumped by every free: a commit's end empties `freed` only when
    /// nothing was freed after it was staged.
    pub(crate) freed_version: u64,
    /// Data written to the backing since its last sync.
    pub(crate) data_unsynced: bool,
    /// The bits that mark the image on disk: [`LOG_PENDING`] (with
    /// [`FC_BYTELOG`] for the ByteLog in the journal's fast-commit area),
    /// or `needs_recovery` for the image's journal.
    pub(crate) mark: u32,
    /// The superblock on disk carries the mark: [`LOG_PENDING`] with a
    /// ByteLog, `needs_recovery` with the image's journal.
    pub(crate) marked: bool,
    /// The mark stays from now until the final checkpoint, commits or
    /// not ([`Volume::mark_log_in_use`](crate::Volume::mark_log_in_use): a mount's).
    pub(crate) held: bool,
    /// The superblock as the image file holds it (the last checkpoint's):
    /// what the mark writes back, with the pending bit — the map's may
    /// hold the commit under way, which the image must not get ahead of
    /// its log (a cut before that commit is durable would leave, say, the
    /// free counts or the orphan list's head of an operation that never
    /// happened).
    pub(crate) image_superblock: Vec<u8>,
    pub(crate) last_commit: Instant,
    pub(crate) last_checkpoint: Instant,
    /// Which medium [`log_medium`] chose ([`LOG_ON_DAX`]…); `None` for one
    /// a caller of [`Volume::enable_log`](crate::Volume::enable_log) gave.
    pub(crate) log_on: Option<&'static str>,
    /// Reopens the log's medium at another length: a commit too large for
    /// the empty log grows it (`redo_log/resize.rs`); `None`, it is written through.
    pub(crate) resize: Option<LogResize>,
    /// The log's configured length, which a grown log returns to.
    pub(crate) log_bytes: u64,
    /// The room the last commit that did not fit the log needed.
    pub(crate) needs: u64,
    /// Commits go to the image's own journal, not a ByteLog.
    pub(crate) in_image: bool,
    /// With fast commits into the image journal's fast-commit area: what
    /// the next one carries (`txn/fast_commit_write.rs`).
    pub(crate) fast: Option<crate::txn::fast_commit_write::FastTrack>,
}

/// A sync begun by [`Volume::start_sync`](crate::Volume::start_sync): wait for it without the
/// volume, then hand what the wait returns to [`Volume::finish_sync`](crate::Volume::finish_sync).
#[must_use = "a started sync is durable only once waited for"]
pub struct PendingSync {
    pub(crate) writer: Option<Arc<Mutex<Writer>>>,
    /// The commit to wait for.
    pub(crate) number: u64,
    pub(crate) versions: Versions,
}

/// A sync whose commit is durable: what [`Volume::finish_sync`](crate::Volume::finish_sync) takes
/// (only [`PendingSync::wait`] makes one).
#[must_use = "finish_sync lets go of what waited for the commit"]
pub struct DurableSync(pub(crate) Option<Versions>);

/// How many frees and intents there had been when a commit was staged.
#[derive(Clone, Copy)]
pub(crate) struct Versions {
    pub(crate) freed: u64,
    pub(crate) sums: u64,
}

impl PendingSync {
    pub(crate) fn done() -> PendingSync {
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

pub(crate) fn io(context: &'static str) -> impl Fn(std::io::Error) -> Error {
    move |source| Error::Io { context: context.into(), source }
}

/// Sorted, merged ranges (touching ones joined).
pub(crate) fn merged(ranges: &[(usize, usize)]) -> Vec<(usize, usize)> {
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
pub(crate) enum Entry<'a> {
    Image(usize, &'a [u8]),
    /// (image offset, count, value).
    Fill(usize, u64, u8),
    Sums(u64, &'a [u8]),
    Forget(u64, u64),
}

/// The entries of a record's payload.
pub(crate) fn decode(payload: &[u8]) -> Result<Vec<Entry<'_>>, String> {
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
pub(crate) enum Change {
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
pub(crate) fn held(
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
pub(crate) fn write_committed(
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

/// The superblock (1024 bytes) with `LOG_PENDING` set, or it and
/// [`FC_BYTELOG`] cleared, resealed.
pub(crate) fn superblock_with(sb: &[u8], pending: bool) -> Vec<u8> {
    if pending {
        superblock_with_incompat(sb, LOG_PENDING, 0)
    } else {
        superblock_with_incompat(sb, 0, LOG_PENDING | FC_BYTELOG)
    }
}

/// Whether `sb` carries `bits`, or its checksum is the one it would have
/// with them (a mark torn: see [`log_pending`]).
fn marked_or_torn(sb: &[u8], bits: u32) -> bool {
    le32(sb, S_FEATURE_INCOMPAT) & bits == bits
        || le32(sb, S_CHECKSUM) == le32(&superblock_with_incompat(sb, bits, 0), S_CHECKSUM)
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
    marked_or_torn(sb, LOG_PENDING) || marked_or_torn(sb, LOG_PENDING | FC_BYTELOG)
}

/// Whether the log [`log_pending`] says `image` needs is the ByteLog in
/// its journal's fast-commit area ([`FC_BYTELOG`] set, or being set).
pub fn log_in_fast_commit_area(image: &[u8]) -> bool {
    image.len() >= 2048 && marked_or_torn(&image[1024..2048], LOG_PENDING | FC_BYTELOG)
}

/// Clears [`LOG_PENDING`] in the superblock of `image` (the private copy a
/// logged volume opens: the bit belongs on disk only), and re-seals it.
pub(crate) fn clear_pending_bit(image: &mut [u8]) {
    if log_pending(image) {
        let sb = superblock_with(&image[1024..2048], false);
        image[1024..2048].copy_from_slice(&sb);
    }
}

impl Redo {
    /// Notes that `[at, at + len)` of the map changed.
    pub(crate) fn note(&mut self, at: usize, len: usize) {
        if len == 0 {
            return;
        }
        self.pending.push((at, at + len));
        self.pending_bytes += len;
        if let Some(fast) = &mut self.fast {
            fast.noted();
        }
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

    pub(crate) fn writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets [`LOG_PENDING`] on disk before the first record the image lacks.
    /// Whether commits go to the image's own journal (not asked of the
    /// writer: a sync may hold it while it flushes).
    pub(crate) fn in_image_journal(&self) -> bool {
        self.in_image
    }

    /// `sb` (1024 bytes) with this log's mark set or cleared, resealed.
    pub(crate) fn superblock_marked(&self, sb: &[u8], marked: bool) -> Vec<u8> {
        if marked {
            superblock_with_incompat(sb, self.mark, 0)
        } else {
            superblock_with_incompat(sb, 0, self.mark)
        }
    }

    /// [`commit`](Self::commit) into the image's journal: every block the
    /// pending `ranges` touch, copied whole from `image` — the superblock's
    /// with `needs_recovery` set, so that a replay writing it home keeps
    /// the journal in use until it is emptied.
    fn commit_to_journal(&mut self, image: &[u8], ranges: Vec<(usize, usize)>) -> Result<bool, Error> {
        let bs = self.writer().image_journal().expect("checked by the caller").block_bytes() as usize;
        let mut blocks: Vec<usize> = ranges.iter().flat_map(|&(start, end)| start / bs..end.div_ceil(bs)).collect();
        blocks.dedup();
        let need = (self.writer().image_journal().expect("checked").blocks_for(blocks.len()) + 1) * bs as u64;
        if need > self.writer().free_bytes() {
            self.needs = need;
            return Ok(false);
        }
        let superblock = 1024 / bs;
        let copies: Vec<(u64, Vec<u8>)> = blocks
            .into_iter()
            .map(|b| {
                let mut copy = image[b * bs..(b + 1) * bs].to_vec();
                if b == superblock {
                    let at = 1024 % bs;
                    let marked = superblock_with_incompat(&copy[at..at + 1024], INCOMPAT_RECOVER, 0);
                    copy[at..at + 1024].copy_from_slice(&marked);
                }
                (b as u64, copy)
            })
            .collect();
        if let Some(fast) = &mut self.fast {
            fast.full_commit();
        }
        self.stage(ranges, Vec::new(), copies, 0)
    }

    /// Stages a fast commit of `records` into the image journal's
    /// fast-commit area: the pending ranges stay pending — the next full
    /// commit logs their blocks — as do the frees, durable with it.
    /// `Ok(false)`: the area's room lacks it (nothing changed).
    pub(crate) fn commit_fast(&mut self, records: Vec<csumkit::ext4::jbd2::fast_commit::Tlv>) -> Result<bool, Error> {
        assert!(self.logged_data.is_empty(), "data that went through the journal needs a full commit");
        self.mark()?;
        let data_first = self.data_unsynced;
        if !self.writer().stage_fast(self.staged + 1, records, data_first) {
            return Ok(false);
        }
        self.staged += 1;
        self.data_unsynced = false;
        Ok(true)
    }

    /// Marks the image, stages commit `staged + 1` (a ByteLog's `records`
    /// carrying `changes` checksum changes, or the journal's `copies`), and
    /// moves the pending `ranges` to the committed ones.
    fn stage(
        &mut self,
        ranges: Vec<(usize, usize)>,
        records: Vec<Vec<u8>>,
        copies: Vec<(u64, Vec<u8>)>,
        changes: u64,
    ) -> Result<bool, Error> {
        self.mark()?;
        self.staged += 1;
        let data_first = std::mem::take(&mut self.data_unsynced);
        self.writer().stage(self.staged, records, copies, data_first, changes);
        self.sums_in_log |= changes > 0;
        self.committed.extend(ranges);
        self.pending.clear();
        self.pending_bytes = 0;
        self.pending_data = 0;
        self.logged_data.clear();
        Ok(true)
    }

    pub(crate) fn mark(&mut self) -> Result<(), Error> {
        if !self.marked {
            let marked = self.superblock_marked(&self.image_superblock, true);
            self.backing.write_at(1024, &marked).map_err(io("image"))?;
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
    /// it, and nothing changed ([`Volume::stage_commit`](crate::Volume::stage_commit) makes room).
    pub(crate) fn commit(&mut self, image: &[u8], sums: &mut Option<DataSums>) -> Result<bool, Error> {
        self.last_commit = Instant::now();
        let has_sums = sums.as_ref().and_then(|s| s.logged.as_ref()).is_some_and(|l| !l.is_empty());
        if self.pending.is_empty() && !has_sums {
            if std::mem::take(&mut self.data_unsynced) {
                // Data alone (overwrites in place): its sync, no records.
                self.staged += 1;
                self.writer().stage(self.staged, Vec::new(), Vec::new(), true, 0);
            }
            return Ok(true);
        }
        let ranges = merged(&self.pending);
        if self.in_image_journal() {
            return self.commit_to_journal(image, ranges);
        }
        let max = self.writer().byte_log().payload_max();
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
        self.stage(ranges, records, Vec::new(), changes)
    }

    /// Writes what the image file lacks into it (every committed range, or
    /// with `through` the pending ones too), syncs it, then empties the log.
    pub(crate) fn checkpoint(
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
        let superblock = self.superblock_marked(&image[1024..2048], self.marked);
        self.backing.write_at(1024, &superblock).map_err(io("image"))?;
        self.backing.sync().map_err(io("fdatasync of the image"))?;
        self.image_superblock.copy_from_slice(&image[1024..2048]);
        self.data_unsynced = false;
        // The tree after the data it names is durable, before the log is
        // emptied or the mark goes (the intent list stays until the caller
        // empties it after this, the log empty).
        crate::store::data_sums::commit(sums, stats)?;
        // The image's journal is emptied before `needs_recovery` goes, as
        // recovery leaves it; a ByteLog after its mark (an unmarked image's
        // log is ignored).
        if let Some(journal) = self.writer().image_journal() {
            journal.checkpointed(final_)?;
        }
        if self.marked && final_ {
            let superblock = self.superblock_marked(&image[1024..2048], false);
            self.backing.write_at(1024, &superblock).map_err(io("image"))?;
            self.backing.sync().map_err(io("fdatasync of the image"))?;
            self.marked = false;
        }
        self.held &= !final_;
        if let Log::Bytes(log) = &mut self.writer().log {
            log.checkpoint()?;
        }
        self.sums_in_log = false;
        self.last_checkpoint = Instant::now();
        Stats::bump(&stats.log_checkpoints);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::medium::{AnyMedium, Nowhere, SyncHandle};
    use csumkit::bytelog::ByteLog;
    use csumkit::ext4::fields::S_FREE_BLOCKS_LO;

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
            writer: Arc::new(Mutex::new(Writer::new(Log::Bytes(log), Box::new(|| Ok(())), Arc::default()))),
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
            in_image: false,
            mark: LOG_PENDING,
            fast: None,
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
        assert_eq!((*at, le32(mark, S_FREE_BLOCKS_LO)), (1024, 500), "the mark carries the file's free count");
        assert_eq!(le32(mark, S_FEATURE_INCOMPAT) & LOG_PENDING, LOG_PENDING);
        // After a checkpoint the file holds the committed superblock, still
        // marked: the next commit needs no mark (one write and sync fewer).
        drop(seen);
        redo.checkpoint(&image, &mut None, false, false, &Stats::default()).unwrap();
        assert_eq!(le32(&redo.image_superblock, S_FREE_BLOCKS_LO), 480);
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
        assert_eq!(le32(&image, 1024 + S_CHECKSUM), csumkit::crc32c::raw_update(!0, &image[1024..1024 + 0x3FC]));
        clear_pending_bit(&mut image);
        assert!(!log_pending(&image));
        assert_eq!(le32(&image, 1024 + S_FEATURE_INCOMPAT), 0x2C2);
        assert_eq!(le32(&image, 1024 + S_CHECKSUM), csumkit::crc32c::raw_update(!0, &image[1024..1024 + 0x3FC]));
    }
}

//! Where an emulated namespace keeps its blocks: data and metadata
//! interleaved in one file (the extended-LBA layout), or split — the data
//! in one file, which then stays a plain image other tools can read, and
//! the metadata in a second file.
//!
//! The split metadata file starts with a 4 KiB header (the format, the
//! block count, the command in flight and a tag its user owns); then each
//! block's metadata, stored inverted so that a hole of the sparse file
//! reads as all-FFh — the escape a deallocated block reports, checked by
//! nobody. A block the device never wrote keeps whatever the data file
//! holds, unchecked, until it is written.
//!
//! A command is one `pwrite` of its data and one of its metadata, so a
//! process that dies in between would leave blocks whose PI does not match
//! them: each write first records itself in the header, and opening the
//! device again regenerates the PI of the blocks it names from the data
//! they hold — each block ends either old or new, never failing its guard,
//! as a real drive's atomic block write ends. A power cut reorders pages:
//! the regions being written are marked durably first (`intent.rs`), and
//! opening the device forgets the PI of blocks there whose guard fails.
//!
//! The two files are [`DurableFile`]s: `File`s, or a test's simulated disk.

use super::format::{GuardSize, PiFormat, PiType};
use super::intent::{self, Intent};
use super::layout::{LbaFormat, PiLocation, Protection};
use super::protect::{self, Checks, Tags};
use crate::{DurableFile, Error};
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Bytes of the split metadata file's header.
pub(super) const SPLIT_HEADER_BYTES: u64 = 4096;
/// Bytes of the tag a split device's user keeps in its header.
pub const OWNER_TAG_BYTES: usize = 64;

const MAGIC: &[u8; 8] = b"CSKITPI1";
const BLOCKS_AT: usize = 24;
/// The command in flight: first LBA, blocks (0: none), reference tag,
/// storage tag, application tag.
const IN_FLIGHT_AT: usize = 32;
const OWNER_AT: usize = 128;
const _: () = assert!(IN_FLIGHT_AT + 34 <= OWNER_AT && OWNER_AT + OWNER_TAG_BYTES <= intent::BITMAP_AT);
const _: () = assert!(intent::BITMAP_AT + intent::BITMAP_BYTES <= SPLIT_HEADER_BYTES as usize);

/// What opening a split device found and did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SplitOpened {
    /// A write a stopped process left half stored was finished (its
    /// blocks' PI regenerated from their data).
    pub finished_write: bool,
    /// Blocks whose PI a power cut may have torn from their data and
    /// whose guard failed: their PI was forgotten (unchecked until
    /// written again).
    pub forgotten_blocks: u64,
    /// The metadata file was formatted by this open: it was empty, or a
    /// power cut stopped its formatting before the header landed (a header
    /// of zeros) — every block's PI the escape.
    pub formatted: bool,
}

pub(super) enum Storage {
    /// `lba × extended_bytes` in one file; which blocks were ever written
    /// is kept in memory (unwritten blocks read as zeros and all-FFh).
    Interleaved { file: File, written: Vec<AtomicU64> },
    /// Data at `lba × data_bytes` of `data`; metadata, inverted, after the
    /// header of `metadata`. Commands are serialised by `command` (the
    /// header holds one command in flight), which guards the regions
    /// marked as being written.
    Split { data: Box<dyn DurableFile>, metadata: Box<dyn DurableFile>, command: Mutex<Intent> },
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Storage::Interleaved { .. } => "Interleaved",
            Storage::Split { .. } => "Split",
        })
    }
}

fn io_err<'a>(path: &'a Path, context: &str) -> impl Fn(std::io::Error) -> Error + 'a {
    let context = context.to_string();
    move |source| Error::Io { context: format!("{}: {context}", path.display()), source }
}

fn invert(bytes: &mut [u8]) {
    bytes.iter_mut().for_each(|b| *b = !*b);
}

/// The header fields that say what format a split metadata file is for.
fn format_bytes(p: &Protection) -> [u8; 12] {
    let mut b = [0u8; 12];
    b[..4].copy_from_slice(&(p.lba().data_bytes() as u32).to_le_bytes());
    b[4..8].copy_from_slice(&(p.lba().metadata_bytes() as u32).to_le_bytes());
    b[8] = p.format().guard().bits() as u8;
    b[9] = p.format().pi_type().number() as u8;
    b[10] = p.format().storage_tag_bits() as u8;
    b[11] = u8::from(p.location() == PiLocation::First);
    b
}

/// The protection a split metadata file's header describes, for messages.
fn describe(header: &[u8]) -> String {
    let le32 = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let lba = LbaFormat::new(le32(8), le32(12)).map_or_else(|_| "?".to_string(), |l| l.to_string());
    let guard = GuardSize::from_bits(u32::from(header[16])).map_or(0, GuardSize::bits);
    format!("{lba}, {guard}-bit guard, type {}, {}-bit storage tag", header[17], header[18])
}

/// Whether the metadata file of `len` bytes has a header of zeros (as much
/// of it as the file holds): made, but its format cut short.
fn never_formatted(metadata: &dyn DurableFile, len: u64) -> std::io::Result<bool> {
    let mut header = vec![0u8; len.min(SPLIT_HEADER_BYTES) as usize];
    metadata.read_exact_at(&mut header, 0)?;
    Ok(header.iter().all(|&b| b == 0))
}

impl Storage {
    pub(super) fn interleaved(file: File, blocks: u64) -> Storage {
        Storage::Interleaved { file, written: (0..blocks.div_ceil(64)).map(|_| AtomicU64::new(0)).collect() }
    }

    /// Opens the metadata file `metadata` (named `metadata_path`; empty, or
    /// a header of zeros — a format cut short: formatted here) of a split
    /// device whose data file has `blocks` blocks; finishes a command a
    /// stopped process left in flight and forgets the PI a power cut tore
    /// from its data.
    pub(super) fn open_split(
        data: Box<dyn DurableFile>,
        metadata: Box<dyn DurableFile>,
        metadata_path: &Path,
        p: &Protection,
        blocks: u64,
    ) -> Result<(Storage, SplitOpened), Error> {
        let io = |context| io_err(metadata_path, context);
        let len = SPLIT_HEADER_BYTES + blocks * p.lba().metadata_bytes() as u64;
        let mut header = vec![0u8; SPLIT_HEADER_BYTES as usize];
        let existing = metadata.size().map_err(io("stat metadata file"))?;
        let formatted = existing == 0 || never_formatted(&*metadata, existing).map_err(io("read header"))?;
        if formatted {
            // The header is the one thing a format writes (the rest is
            // zeros: inverted escapes), last and in one sector, which a
            // power cut leaves old or new; a header still zero means no
            // format finished, and no PI was ever kept in the file.
            metadata.set_len(0).map_err(io("size metadata file"))?;
            header[..8].copy_from_slice(MAGIC);
            header[8..20].copy_from_slice(&format_bytes(p));
            header[BLOCKS_AT..BLOCKS_AT + 8].copy_from_slice(&blocks.to_le_bytes());
            metadata.set_len(len).map_err(io("size metadata file"))?;
            metadata.write_all_at(&header, 0).map_err(io("write header"))?;
            metadata.sync_data().map_err(io("sync metadata file"))?;
        } else {
            metadata.read_exact_at(&mut header, 0).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => Error::Corrupt {
                    location: metadata_path.display().to_string(),
                    detail: format!("{existing} bytes: shorter than the {SPLIT_HEADER_BYTES}-byte header"),
                },
                _ => io("read header")(e),
            })?;
            if header[..8] != *MAGIC {
                return Err(Error::Corrupt {
                    location: metadata_path.display().to_string(),
                    detail: "not a csumkit PI metadata file (bad magic)".into(),
                });
            }
            if header[8..20] != format_bytes(p) {
                return Err(Error::Invalid {
                    what: "PI metadata file",
                    detail: format!(
                        "{} holds {}; asked for {}",
                        metadata_path.display(),
                        describe(&header),
                        describe(&[&[0u8; 8][..], &format_bytes(p)].concat())
                    ),
                });
            }
            let stored = u64::from_le_bytes(header[BLOCKS_AT..BLOCKS_AT + 8].try_into().expect("8 bytes"));
            if stored != blocks || existing != len {
                return Err(Error::Invalid {
                    what: "PI metadata file",
                    detail: format!(
                        "{} is for {stored} blocks ({existing} bytes); the data file has {blocks}",
                        metadata_path.display()
                    ),
                });
            }
        }
        let storage = Storage::Split { data, metadata, command: Mutex::new(Intent::new(blocks)) };
        let finished_write = storage.finish_in_flight(p, &header)?;
        let bitmap = &header[intent::BITMAP_AT..][..intent::BITMAP_BYTES];
        let forgotten_blocks = storage.forget_torn(p, &intent::marked_ranges(bitmap, blocks)).map_err(io("recover"))?;
        Ok((storage, SplitOpened { finished_write, forgotten_blocks, formatted }))
    }

    /// Sets the PI of each block in `ranges` whose guard fails to the
    /// escape, then unmarks every region durably; the count forgotten.
    fn forget_torn(&self, p: &Protection, ranges: &[(u64, u64)]) -> std::io::Result<u64> {
        let Storage::Split { metadata, .. } = self else { unreachable!("only split storage marks regions") };
        if ranges.is_empty() {
            return Ok(0);
        }
        let (format, at, md) = (p.format(), p.tuple_offset(), p.lba().metadata_bytes());
        // The guard alone says whether a cut tore a block from its PI; its
        // tags are the writer's (type 2's reference tag is not the LBA).
        let checks = Checks { guard: true, ..Checks::NONE };
        let per_piece = (super::layout::COMMAND_DATA_BYTES_MAX / p.lba().data_bytes()) as u64;
        let mut forgotten = 0;
        for &(first, end) in ranges {
            let mut lba = first;
            while lba < end {
                let n = per_piece.min(end - lba);
                let mut data = vec![0u8; n as usize * p.lba().data_bytes()];
                let mut meta = self.read(p.lba(), lba, &mut data).map_err(std::io::Error::other)?;
                let failed: Vec<u64> = protect::verify_separate_each(p, &data, &meta, &Tags::for_lba(lba), checks)
                    .filter_map(|f| f.ok().map(|f| f.block))
                    .collect();
                for &block in &failed {
                    let i = block as usize * md + at;
                    meta[i..i + format.tuple_bytes()].fill(0xFF);
                }
                if !failed.is_empty() {
                    invert(&mut meta);
                    metadata.write_all_at(&meta, SPLIT_HEADER_BYTES + lba * md as u64)?;
                }
                forgotten += failed.len() as u64;
                lba += n;
            }
        }
        metadata.sync_data()?;
        metadata.write_all_at(&[0u8; intent::BITMAP_BYTES], intent::BITMAP_AT as u64)?;
        metadata.sync_data()?;
        Ok(forgotten)
    }

    /// Regenerates the PI of the command the header names, if any, from
    /// the data it left; true when there was one.
    fn finish_in_flight(&self, p: &Protection, header: &[u8]) -> Result<bool, Error> {
        let le64 = |at: usize| u64::from_le_bytes(header[at..at + 8].try_into().expect("8 bytes"));
        let (lba, n) = (le64(IN_FLIGHT_AT), le64(IN_FLIGHT_AT + 8));
        if n == 0 {
            return Ok(false);
        }
        let tags = Tags {
            ref_tag: le64(IN_FLIGHT_AT + 16),
            storage_tag: le64(IN_FLIGHT_AT + 24),
            app_tag: u16::from_le_bytes([header[IN_FLIGHT_AT + 32], header[IN_FLIGHT_AT + 33]]),
            ..Tags::for_lba(lba)
        };
        let blocks = match self {
            Storage::Split { data, .. } => {
                data.size().map_err(|e| Error::Io { context: "stat data file".into(), source: e })?
                    / p.lba().data_bytes() as u64
            }
            Storage::Interleaved { .. } => unreachable!("only split storage records commands"),
        };
        if lba.checked_add(n).is_none_or(|end| end > blocks) {
            return Err(Error::Corrupt {
                location: "PI metadata file header".into(),
                detail: format!("command in flight at blocks {lba}+{n} is outside the {blocks}-block device"),
            });
        }
        // Bounded pieces: a command is at most COMMAND_DATA_BYTES_MAX.
        let per_piece = (super::layout::COMMAND_DATA_BYTES_MAX / p.lba().data_bytes()) as u64;
        let mut done = 0;
        while done < n {
            let k = per_piece.min(n - done);
            let mut data = vec![0u8; k as usize * p.lba().data_bytes()];
            let mut metadata = self.read(p.lba(), lba + done, &mut data)?;
            protect::generate_separate(p, &data, &mut metadata, &tags.advanced(p.format(), done))?;
            self.write_raw(p.lba(), lba + done, &data, &metadata)?;
            done += k;
        }
        self.set_in_flight(None)?;
        Ok(true)
    }

    /// Records the command about to be stored (split storage only).
    pub(super) fn set_in_flight(&self, command: Option<(u64, u64, &Tags)>) -> Result<(), Error> {
        let Storage::Split { metadata, .. } = self else { return Ok(()) };
        let mut slot = [0u8; 34];
        if let Some((lba, n, tags)) = command {
            slot[..8].copy_from_slice(&lba.to_le_bytes());
            slot[8..16].copy_from_slice(&n.to_le_bytes());
            slot[16..24].copy_from_slice(&tags.ref_tag.to_le_bytes());
            slot[24..32].copy_from_slice(&tags.storage_tag.to_le_bytes());
            slot[32..34].copy_from_slice(&tags.app_tag.to_le_bytes());
        }
        metadata
            .write_all_at(&slot, IN_FLIGHT_AT as u64)
            .map_err(|e| Error::Io { context: "PI metadata file: record the command in flight".into(), source: e })
    }

    /// The lock a split device's commands hold while stored.
    pub(super) fn command_lock(&self) -> Option<std::sync::MutexGuard<'_, Intent>> {
        match self {
            Storage::Split { command, .. } => Some(command.lock().unwrap_or_else(|e| e.into_inner())),
            Storage::Interleaved { .. } => None,
        }
    }

    /// Marks the regions of blocks `lba..lba + n` as being written (split
    /// storage, under its command lock `intent`), durably before the write
    /// when one was not marked: a power cut can then only tear blocks in
    /// marked regions.
    pub(super) fn mark_written(&self, intent: Option<&mut Intent>, lba: u64, n: u64) -> Result<(), Error> {
        let (Storage::Split { metadata, .. }, Some(intent)) = (self, intent) else { return Ok(()) };
        if intent.note_write(lba, n) {
            let io = |source| Error::Io { context: "PI metadata file: mark the regions being written".into(), source };
            metadata.write_all_at(intent.bitmap(), intent::BITMAP_AT as u64).map_err(io)?;
            metadata.sync_data().map_err(io)?;
        }
        Ok(())
    }

    /// Reads blocks at `lba` into `data` (whole blocks) and returns their
    /// metadata. Never-written blocks of an interleaved device read as
    /// zeros with all-FFh metadata.
    pub(super) fn read(&self, lba_format: LbaFormat, lba: u64, data: &mut [u8]) -> Result<Vec<u8>, Error> {
        let (db, md, ext) = (lba_format.data_bytes(), lba_format.metadata_bytes(), lba_format.extended_bytes());
        let n = data.len() / db;
        let io = |source| Error::Io { context: "PI device: read".into(), source };
        let mut meta = vec![0u8; n * md];
        match self {
            Storage::Interleaved { file, written } => {
                let mut extended = vec![0u8; n * ext];
                file.read_exact_at(&mut extended, lba * ext as u64).map_err(io)?;
                for (i, block) in extended.chunks_exact(ext).enumerate() {
                    let b = lba + i as u64;
                    if written[(b / 64) as usize].load(Ordering::Relaxed) & (1 << (b % 64)) == 0 {
                        data[i * db..][..db].fill(0);
                        meta[i * md..][..md].fill(0xFF);
                    } else {
                        data[i * db..][..db].copy_from_slice(&block[..db]);
                        meta[i * md..][..md].copy_from_slice(&block[db..]);
                    }
                }
            }
            Storage::Split { data: file, metadata, .. } => {
                file.read_exact_at(data, lba * db as u64).map_err(io)?;
                metadata.read_exact_at(&mut meta, SPLIT_HEADER_BYTES + lba * md as u64).map_err(io)?;
                invert(&mut meta);
            }
        }
        Ok(meta)
    }

    /// Stores whole blocks at `lba`: `data` and their `metadata` (no
    /// faults, no counting).
    pub(super) fn write_raw(&self, lba_format: LbaFormat, lba: u64, data: &[u8], metadata: &[u8]) -> Result<(), Error> {
        let (db, md, ext) = (lba_format.data_bytes(), lba_format.metadata_bytes(), lba_format.extended_bytes());
        let n = data.len() / db;
        let io = |source| Error::Io { context: "PI device: write".into(), source };
        match self {
            Storage::Interleaved { file, written } => {
                let mut extended = vec![0u8; n * ext];
                for (i, block) in extended.chunks_exact_mut(ext).enumerate() {
                    block[..db].copy_from_slice(&data[i * db..][..db]);
                    block[db..].copy_from_slice(&metadata[i * md..][..md]);
                }
                file.write_all_at(&extended, lba * ext as u64).map_err(io)?;
                for b in lba..lba + n as u64 {
                    written[(b / 64) as usize].fetch_or(1 << (b % 64), Ordering::Relaxed);
                }
            }
            Storage::Split { data: file, metadata: meta_file, .. } => {
                let mut inverted = metadata.to_vec();
                invert(&mut inverted);
                file.write_all_at(data, lba * db as u64).map_err(io)?;
                meta_file.write_all_at(&inverted, SPLIT_HEADER_BYTES + lba * md as u64).map_err(io)?;
            }
        }
        Ok(())
    }

    /// Flips stored bit `bit` of block `lba` (bits past the data are metadata).
    pub(super) fn flip_bit(&self, lba_format: LbaFormat, lba: u64, bit: u64) -> Result<(), Error> {
        let (db, md) = (lba_format.data_bytes() as u64, lba_format.metadata_bytes() as u64);
        let (file, offset): (&dyn DurableFile, u64) = match self {
            Storage::Interleaved { file, written } => {
                written[(lba / 64) as usize].fetch_or(1 << (lba % 64), Ordering::Relaxed);
                (file, lba * (db + md) + bit / 8)
            }
            Storage::Split { data, .. } if bit / 8 < db => (data.as_ref(), lba * db + bit / 8),
            Storage::Split { metadata, .. } => (metadata.as_ref(), SPLIT_HEADER_BYTES + lba * md + bit / 8 - db),
        };
        let io = |source| Error::Io { context: "PI device: inject bit rot".into(), source };
        let mut byte = [0u8];
        file.read_exact_at(&mut byte, offset).map_err(io)?;
        byte[0] ^= 1 << (bit % 8);
        file.write_all_at(&byte, offset).map_err(io)
    }

    /// `fdatasync` of every file; a split device then unmarks the regions
    /// not written since the flush began (durable at the next flush or
    /// mark: a region left marked only costs a check at the next open).
    pub(super) fn flush(&self) -> std::io::Result<()> {
        match self {
            Storage::Interleaved { file, .. } => file.sync_data(),
            Storage::Split { data, metadata, command } => {
                let epoch = command.lock().unwrap_or_else(|e| e.into_inner()).begin_flush();
                data.sync_data()?;
                metadata.sync_data()?;
                let mut intent = command.lock().unwrap_or_else(|e| e.into_inner());
                if intent.end_flush(epoch) {
                    metadata.write_all_at(intent.bitmap(), intent::BITMAP_AT as u64)?;
                }
                Ok(())
            }
        }
    }

    /// The owner tag of a split device.
    pub(super) fn owner_tag(&self) -> Result<[u8; OWNER_TAG_BYTES], Error> {
        let mut tag = [0u8; OWNER_TAG_BYTES];
        if let Storage::Split { metadata, .. } = self {
            metadata
                .read_exact_at(&mut tag, OWNER_AT as u64)
                .map_err(|e| Error::Io { context: "PI metadata file: read owner tag".into(), source: e })?;
        }
        Ok(tag)
    }

    /// Sets the owner tag of a split device (durably).
    pub(super) fn set_owner_tag(&self, tag: &[u8; OWNER_TAG_BYTES]) -> Result<(), Error> {
        let Storage::Split { metadata, .. } = self else {
            return Err(Error::Invalid { what: "owner tag", detail: "only a split device has one".into() });
        };
        let io = |source| Error::Io { context: "PI metadata file: write owner tag".into(), source };
        metadata.write_all_at(tag, OWNER_AT as u64).map_err(io)?;
        metadata.sync_data().map_err(io)
    }

    /// Forgets every block's metadata (all read as the escape again).
    pub(super) fn deallocate_all(&self, lba_format: LbaFormat, blocks: u64) -> Result<(), Error> {
        let io = |source| Error::Io { context: "PI device: deallocate".into(), source };
        match self {
            Storage::Interleaved { written, .. } => {
                written.iter().for_each(|w| w.store(0, Ordering::Relaxed));
            }
            Storage::Split { metadata, .. } => {
                let len = SPLIT_HEADER_BYTES + blocks * lba_format.metadata_bytes() as u64;
                metadata.set_len(SPLIT_HEADER_BYTES).map_err(io)?;
                metadata.set_len(len).map_err(io)?;
                metadata.sync_data().map_err(io)?;
            }
        }
        Ok(())
    }
}

/// The protection a split metadata file was made for; `None` when there
/// is no file at `metadata`.
///
/// # Errors
/// [`Error::Io`]; [`Error::Corrupt`] when it is not a split metadata file
/// or names an impossible format.
pub fn split_protection(metadata: &Path) -> Result<Option<Protection>, Error> {
    let file = match File::open(metadata) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(metadata, "open metadata file")(e)),
    };
    let mut header = [0u8; 20];
    let corrupt = |detail: String| Error::Corrupt { location: metadata.display().to_string(), detail };
    file.read_exact_at(&mut header, 0).map_err(|_| corrupt("shorter than its header".into()))?;
    if header[..8] != *MAGIC {
        return Err(corrupt("not a csumkit PI metadata file (bad magic)".into()));
    }
    let le32 = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    let bad = |e: Error| corrupt(format!("its header names no valid format: {e}"));
    let format = PiFormat::new(
        GuardSize::from_bits(u32::from(header[16])).map_err(bad)?,
        PiType::from_number(u32::from(header[17])).map_err(bad)?,
        u32::from(header[18]),
    )
    .map_err(bad)?;
    let location = if header[19] == 1 { PiLocation::First } else { PiLocation::Last };
    let lba = LbaFormat::new(le32(8), le32(12)).map_err(bad)?;
    Protection::new(format, lba, location).map(Some).map_err(bad)
}

/// Clears the owner tag of the split metadata file at `metadata`, if there
/// is one: what a writer that does not keep its PI does before changing
/// the data file, so that its user knows the PI is stale. True when a
/// file was there.
///
/// # Errors
/// [`Error::Io`]; [`Error::Corrupt`] when it is not a split metadata file.
pub fn clear_split_owner_tag(metadata: &Path) -> Result<bool, Error> {
    if split_protection(metadata)?.is_none() {
        return Ok(false);
    }
    let io = io_err(metadata, "clear owner tag");
    let file = std::fs::OpenOptions::new().write(true).open(metadata).map_err(&io)?;
    file.write_all_at(&[0u8; OWNER_TAG_BYTES], OWNER_AT as u64).map_err(&io)?;
    file.sync_data().map_err(&io)?;
    Ok(true)
}

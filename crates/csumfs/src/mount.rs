//! Opening an image the way `csumkit mount` does, for any caller: where its
//! companion files live, the order recovery runs in (an undo log a
//! `log=off` mount left, then the ByteLog's replay, then the orphans a
//! stopped writer left), which data integrity store is kept, and marking
//! the one not kept stale so that it never fails good data later.
//!
//! ```no_run
//! use csumfs::mount::{mount, MountConfig};
//! let image = std::path::Path::new("disk.img");
//! let (volume, events) = mount(image, &MountConfig::new(image))?;
//! for event in &events {
//!     eprintln!("{event}");
//! }
//! # Ok::<(), csumfs::mount::MountError>(())
//! ```

use crate::store::pi_device::PiOpened;
use crate::store::redo_log::Replayed;
use crate::volume::{Checksums, Options, Volume};
use crate::Error;
use csumkit::pi::Protection;
use std::path::{Path, PathBuf};

/// The ByteLog's length: room for a burst of commits between checkpoints
/// (a commit larger than the empty log grows it for that commit).
pub const LOG_BYTES: u64 = 16 << 20;

/// `image` + `suffix`: where a companion file of the image lives.
pub fn with_suffix(image: &Path, suffix: &str) -> PathBuf {
    let mut name = image.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

/// The files that live beside an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Companions {
    /// The ByteLog (`IMAGE.bytelog`, or where `-o log=PATH` put it).
    pub log: PathBuf,
    /// The undo log of a `log=off` mount (`IMAGE.undo`).
    pub undo: PathBuf,
    /// The data checksum sidecar (`IMAGE.csums`).
    pub data_checksums: PathBuf,
    /// The PI of the emulated PI device (`IMAGE.pi`).
    pub pi: PathBuf,
}

impl Companions {
    /// Each beside `image`, by its suffix.
    pub fn beside(image: &Path) -> Companions {
        Companions {
            log: with_suffix(image, ".bytelog"),
            undo: with_suffix(image, ".undo"),
            data_checksums: with_suffix(image, ".csums"),
            pi: with_suffix(image, ".pi"),
        }
    }
}

/// Where a logged mount's commits go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogPlace {
    /// The image's journal when it has one csumfs writes (every
    /// metadata_csum image mke2fs makes by default), else the ByteLog file.
    Auto,
    /// The image's journal, or an error naming why not (`log=journal`).
    ImageJournal,
    /// The ByteLog file named by [`Companions::log`] (`log=PATH`).
    ByteLog,
    /// The ByteLog in the image journal's fast-commit area (`bytelog`).
    FastCommitArea,
}

/// How [`MountEvent::Replayed`] names a ByteLog in the image itself.
pub const FAST_COMMIT_AREA: &str = "the journal's fast-commit area";

/// How to mount.
#[derive(Clone, Debug)]
pub struct MountConfig {
    /// Read-write (the default) or read-only.
    pub write: bool,
    /// How metadata checksums are kept current.
    pub checksums: Checksums,
    /// Metadata through a log (the default); `false`: written in place
    /// behind the undo log (`log=off`).
    pub logged: bool,
    /// Which log: the image's own journal or a ByteLog file.
    pub log_place: LogPlace,
    /// Keep data checksums in the sidecar (the default).
    pub data_checksums: bool,
    /// Keep data integrity in the PI of an emulated device instead.
    pub pi: Option<Protection>,
    /// Where the companion files live.
    pub companions: Companions,
    /// The ByteLog's length.
    pub log_bytes: u64,
}

impl MountConfig {
    /// The defaults for `image`: read-write, logged, data checksums kept,
    /// every companion beside the image.
    pub fn new(image: &Path) -> MountConfig {
        MountConfig {
            write: true,
            checksums: Checksums::Incremental,
            logged: true,
            log_place: LogPlace::Auto,
            data_checksums: true,
            pi: None,
            companions: Companions::beside(image),
            log_bytes: LOG_BYTES,
        }
    }

    fn options(&self) -> Options {
        Options { write: self.write, checksums: self.checksums, ..Options::default() }
    }
}

/// What mounting found and did, for the caller to tell its user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountEvent {
    /// The sidecar is not kept by this mount and was marked stale.
    DataChecksumsForgotten(PathBuf),
    /// The PI file is not kept by this mount and was marked stale.
    PiForgotten(PathBuf),
    /// An operation a stopped `log=off` mount left half done was undone.
    OperationUndone(PathBuf),
    /// The ByteLog's commits were replayed into the image.
    Replayed(PathBuf, Replayed),
    /// A read-only mount of an image whose log is in use: served as the log
    /// makes it, replayed in memory, the image unchanged.
    ServedInMemory(String),
    /// What opening the PI device found.
    PiOpened(PathBuf, PiOpened),
    /// Inodes a stopped writer left unlinked but open were freed.
    OrphansFreed(u64),
    /// The kernel's journal held committed transactions: replayed into
    /// the image (a writable mount) or in memory (a read-only one).
    JournalReplayed(crate::JournalReplayed),
}

impl std::fmt::Display for MountEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MountEvent::DataChecksumsForgotten(path) => write!(
                f,
                "{}: not kept by this write; its data checksums start afresh at the next mount",
                path.display()
            ),
            MountEvent::PiForgotten(path) => {
                write!(f, "{}: not kept by this write; its PI starts afresh at the next pi mount", path.display())
            }
            MountEvent::OperationUndone(undo) => {
                write!(f, "{}: an operation a stopped csumkit mount left half done was undone", undo.display())
            }
            MountEvent::Replayed(log, replayed) => write!(
                f,
                "replayed {} commits ({} bytes of metadata) from {}",
                replayed.commits,
                replayed.bytes,
                log.display()
            ),
            MountEvent::ServedInMemory(how) => write!(
                f,
                "served read-only as {how}, in memory; the image is unchanged (`csumkit ext4 checkpoint` folds the \
                 log in)"
            ),
            MountEvent::PiOpened(pi, opened) => {
                let mut said = Vec::new();
                if opened.finished_write {
                    said.push("finished a write a stopped mount left half stored".to_string());
                }
                if opened.forgotten_blocks > 0 {
                    said.push(format!(
                        "{} blocks written before a power cut hold PI that does not match their data; their PI is \
                         forgotten (unchecked until rewritten)",
                        opened.forgotten_blocks
                    ));
                }
                if opened.started_afresh {
                    said.push(
                        "the image was written since without it; its PI starts afresh (blocks unchecked until \
                         rewritten)"
                            .to_string(),
                    );
                }
                write!(f, "{}: {}", pi.display(), said.join("; "))
            }
            MountEvent::JournalReplayed(r) => {
                let into = if r.in_place { "into the image" } else { "in memory; the image is unchanged" };
                write!(
                    f,
                    "its jbd2 journal replayed {into} ({} transactions, {} blocks, {} fast-commit records), as \
                     its recovery would",
                    r.transactions, r.blocks, r.fast_commit_records
                )
            }
            MountEvent::OrphansFreed(n) => {
                let what = if *n == 1 { "an inode" } else { "inodes" };
                write!(f, "freed {what} left unlinked but open by a stopped mount or kernel ({n})")
            }
        }
    }
}

impl MountEvent {
    /// The companion file the event's message names, if it names one (the
    /// others are about the image).
    pub fn file(&self) -> Option<&Path> {
        match self {
            MountEvent::DataChecksumsForgotten(path)
            | MountEvent::PiForgotten(path)
            | MountEvent::OperationUndone(path)
            | MountEvent::PiOpened(path, _) => Some(path),
            MountEvent::Replayed(..)
            | MountEvent::ServedInMemory(_)
            | MountEvent::OrphansFreed(_)
            | MountEvent::JournalReplayed(_) => None,
        }
    }

    /// Whether there is anything to tell (a PI device opened as it was
    /// left is not news).
    pub fn worth_telling(&self) -> bool {
        !matches!(self, MountEvent::PiOpened(_, o) if *o == PiOpened::default())
    }
}

/// A mount that failed, and the file it failed on.
#[derive(Debug, thiserror::Error)]
#[error("{}", named(.file, .detail.as_deref(), .source))]
pub struct MountError {
    /// The image or the companion the error concerns.
    pub file: PathBuf,
    /// More of where: the log beside the image, say.
    pub detail: Option<String>,
    /// What went wrong.
    #[source]
    pub source: Error,
}

/// `file (detail): message`, without naming the file twice.
fn named(file: &Path, detail: Option<&str>, source: &Error) -> String {
    let shown = file.display().to_string();
    let message = source.to_string();
    match detail {
        Some(detail) => format!("{shown} ({detail}): {message}"),
        None if message.starts_with(&shown) || message.contains(&format!(" {shown}")) => message,
        None => format!("{shown}: {message}"),
    }
}

fn at(file: &Path) -> impl Fn(Error) -> MountError + '_ {
    move |source| MountError { file: file.to_path_buf(), detail: None, source }
}

/// Opens `image` as `config` says, recovering what a stopped writer left
/// first: an undo log put back, the ByteLog replayed, orphans freed. A
/// read-only mount of an image whose logs are in use is served as they
/// make it, in memory, writing neither.
///
/// # Errors
/// [`MountError`] naming the file that failed: the image (not ext4 with
/// `metadata_csum`, a feature refused, open elsewhere), its log, undo log,
/// sidecar or PI file.
pub fn mount(image: &Path, config: &MountConfig) -> Result<(Volume, Vec<MountEvent>), MountError> {
    let c = &config.companions;
    let mut events = Vec::new();
    if config.write {
        events.extend(forget_unkept(c, config.data_checksums && config.pi.is_none(), config.pi.is_some())?);
    }
    let options = config.options();
    let logged = config.write && config.logged;
    let in_area = logged && config.log_place == LogPlace::FastCommitArea;
    if in_area && config.pi.is_some() {
        return Err(at(image)(Error::Invalid(
            "pi keeps its commits in a ByteLog file: give log=PATH or leave bytelog out".into(),
        )));
    }
    let journaled = logged && !in_area && uses_image_journal(image, config).map_err(at(image))?;
    let mut volume = match (logged, config.pi) {
        (true, None) if journaled => open_journaled(image, c, options, config.data_checksums, &mut events)?,
        (true, pi) => {
            // The log's replay carries data checksums into the sidecar.
            let sidecar = (config.data_checksums && pi.is_none()).then_some(c.data_checksums.as_path());
            let log = LogIn { companions: c, log_bytes: config.log_bytes, fast_commit_area: in_area };
            open_logged(image, &log, options, sidecar, pi, &mut events)?.0
        }
        (false, None) if !config.write => open_read_only(image, c, options, &mut events)?,
        (false, None) => open_in_place(image, c, options, &mut events)?,
        (false, Some(p)) => {
            let mut volume = open_in_place(image, c, options, &mut events)?;
            let opened = volume.enable_pi(image, &c.pi, p).map_err(at(image))?;
            events.push(MountEvent::PiOpened(c.pi.clone(), opened));
            volume
        }
    };
    if let Some(replayed) = volume.journal_replayed() {
        events.push(MountEvent::JournalReplayed(replayed));
    }
    if config.write {
        let freed = free_orphans_left(&mut volume).map_err(at(image))?;
        if freed > 0 {
            events.push(MountEvent::OrphansFreed(freed));
        }
    }
    if config.data_checksums && config.pi.is_none() && !(config.write && config.logged) {
        volume.enable_data_checksums(&c.data_checksums).map_err(at(&c.data_checksums))?;
    }
    events.retain(MountEvent::worth_telling);
    Ok((volume, events))
}

/// Finishes the orphans a stopped mount or kernel left (files unlinked
/// while open: on the orphan list or in the orphan file), as the kernel
/// does at mount, in one operation. How many were freed.
///
/// # Errors
/// A damaged orphan list (the operation is undone).
pub fn free_orphans_left(volume: &mut Volume) -> Result<u64, Error> {
    let (freed, ended) = volume.transaction_apart(Volume::release_orphans_left);
    ended?;
    freed.map(u64::from).map_err(|e| Error::Invalid(format!("orphan list: {e}")))
}

/// Before the image is written by something that keeps neither its data
/// checksums (`keeps_data_checksums`) nor its PI (`keeps_pi`): each one not
/// kept is marked stale, so that no block rewritten now fails an old
/// checksum or PI later.
///
/// # Errors
/// The sidecar or PI file cannot be read or written.
pub fn forget_unkept(
    companions: &Companions,
    keeps_data_checksums: bool,
    keeps_pi: bool,
) -> Result<Vec<MountEvent>, MountError> {
    let mut events = Vec::new();
    if !keeps_data_checksums {
        let sidecar = &companions.data_checksums;
        if crate::forget_data_checksums(sidecar).map_err(at(sidecar))? {
            events.push(MountEvent::DataChecksumsForgotten(sidecar.clone()));
        }
    }
    if !keeps_pi {
        let pi = &companions.pi;
        let cleared = csumkit::pi::clear_split_owner_tag(pi).map_err(|e| at(pi)(Error::Invalid(e.to_string())))?;
        if cleared {
            events.push(MountEvent::PiForgotten(pi.clone()));
        }
    }
    Ok(events)
}

/// What a `log=off` mount left: an operation it left half done undone
/// from the undo log, the image's undo mark cleared (so that the kernel and
/// e2fsck take it again) and the file removed. Whether there was any.
///
/// # Errors
/// As [`mount`].
pub fn finish_undo_left(image: &Path, companions: &Companions, options: Options) -> Result<bool, MountError> {
    let marked = image_bytes(image).map(|bytes| crate::undo_pending(&bytes)).unwrap_or(false);
    if !companions.undo.exists() && !marked {
        return Ok(false);
    }
    let mut events = Vec::new();
    let mut volume = open_in_place(image, companions, Options { write: true, ..options }, &mut events)?;
    volume.checkpoint().map_err(at(image))?;
    drop(volume);
    let _ = std::fs::remove_file(&companions.undo);
    Ok(true)
}

/// The image's bytes, mapped read-only.
fn image_bytes(image: &Path) -> Result<memmap2::Mmap, Error> {
    let io = |source| Error::Io { context: image.display().to_string(), source };
    let file = csumkit::file::open_image(image, false)?;
    // SAFETY: a read-only map whose bytes are only read and bounds-checked;
    // a writer changing the file underneath gives wrong bytes, not
    // undefined behaviour in the safe code that reads them.
    unsafe { memmap2::Mmap::map(&file) }.map_err(io)
}

/// A read-only volume. An image a stopped mount left with its log (or undo
/// log) in use is served as that log makes it, replayed in memory: neither
/// file is written, and the kernel and e2fsck still see the mark.
fn open_read_only(
    image: &Path,
    c: &Companions,
    options: Options,
    events: &mut Vec<MountEvent>,
) -> Result<Volume, MountError> {
    let bytes = image_bytes(image).map_err(at(image))?;
    let (log_pending, undo_pending) = (crate::log_pending(&bytes), crate::undo_pending(&bytes));
    if !log_pending && !undo_pending {
        drop(bytes);
        return open_in_place(image, c, options, events);
    }
    let read = |path: &Path| {
        std::fs::read(path).map_err(|source| at(path)(Error::Io { context: path.display().to_string(), source }))
    };
    let (replayed, how) = if undo_pending {
        let (undone, records) = crate::undone_image(bytes.to_vec(), &read(&c.undo)?).map_err(at(image))?;
        (undone, format!("its undo log {} ({records} records put back)", c.undo.display()))
    } else if crate::log_in_fast_commit_area(&bytes) {
        let log = crate::fast_commit_area_log(&bytes).map_err(at(image))?;
        let (replayed, commits) = Volume::replayed_image(bytes.to_vec(), log).map_err(at(image))?;
        (replayed, format!("its ByteLog in {FAST_COMMIT_AREA} ({} commits replayed)", commits.commits))
    } else {
        let (replayed, commits) = Volume::replayed_image(bytes.to_vec(), read(&c.log)?).map_err(at(image))?;
        (replayed, format!("its ByteLog {} ({} commits replayed)", c.log.display(), commits.commits))
    };
    events.push(MountEvent::ServedInMemory(how));
    Volume::from_bytes(replayed, options).map_err(at(image))
}

/// The volume with its metadata written in place (`log=off`, or `ro`): an
/// operation a stopped mount left half done is undone from the undo log.
fn open_in_place(
    image: &Path,
    c: &Companions,
    options: Options,
    events: &mut Vec<MountEvent>,
) -> Result<Volume, MountError> {
    let mut volume = Volume::open(image, options).map_err(at(image))?;
    if options.write && volume.enable_undo(&c.undo).map_err(at(&c.undo))? {
        events.push(MountEvent::OperationUndone(c.undo.clone()));
    }
    Ok(volume)
}

/// Whether a logged mount of `image` as `config` says writes the image's
/// own journal.
///
/// # Errors
/// [`Error::Invalid`] for `log=journal` on an image whose journal csumfs
/// does not write, naming why.
fn uses_image_journal(image: &Path, config: &MountConfig) -> Result<bool, Error> {
    if matches!(config.log_place, LogPlace::ByteLog | LogPlace::FastCommitArea)
        || config.pi.is_some() && config.log_place == LogPlace::Auto
    {
        return Ok(false);
    }
    if config.pi.is_some() {
        return Err(Error::Invalid("pi keeps its commits in the ByteLog: give log=PATH or leave log= out".into()));
    }
    match Volume::image_journal_refusal(&image_bytes(image)?) {
        None => Ok(true),
        Some(_) if config.log_place == LogPlace::Auto => Ok(false),
        Some(reason) => Err(Error::Invalid(format!("log=journal: {reason}"))),
    }
}

/// The volume with its commits in the image's own journal: an undo log a
/// `log=off` mount left applied first, and a ByteLog a ByteLog mount left
/// replayed and folded in (`csumkit ext4 checkpoint`'s recipe).
fn open_journaled(
    image: &Path,
    c: &Companions,
    options: Options,
    data_checksums: bool,
    events: &mut Vec<MountEvent>,
) -> Result<Volume, MountError> {
    let done = checkpoint(image, c).map_err(|e| match e {
        CheckpointError::Mount(e) => e,
        missing @ CheckpointError::LogMissing(_) => {
            MountError { file: image.to_path_buf(), detail: None, source: Error::Invalid(missing.to_string()) }
        }
    })?;
    if let Some(replayed) = done.replayed.filter(|r| r.commits > 0) {
        let log = if done.from_fast_commit_area { PathBuf::from(FAST_COMMIT_AREA) } else { c.log.clone() };
        events.push(MountEvent::Replayed(log, replayed));
    }
    let sidecar = data_checksums.then_some(c.data_checksums.as_path());
    Volume::open_journaled(image, options, sidecar).map_err(at(image))
}

/// Where a logged mount's ByteLog is: the file [`Companions::log`] names
/// (formatted at `log_bytes`), or the journal's fast-commit area.
struct LogIn<'a> {
    companions: &'a Companions,
    log_bytes: u64,
    fast_commit_area: bool,
}

impl LogIn<'_> {
    fn shown(&self) -> String {
        if self.fast_commit_area {
            FAST_COMMIT_AREA.to_string()
        } else {
            self.companions.log.display().to_string()
        }
    }
}

/// The volume with its metadata logged: an undo log a `log=off` mount left
/// applied first (it restores metadata only, through the map: no data
/// checksum or PI it keeps), then the log replayed. On a PI device every
/// write of the image goes through it.
fn open_logged(
    image: &Path,
    log: &LogIn<'_>,
    options: Options,
    sidecar: Option<&Path>,
    pi: Option<Protection>,
    events: &mut Vec<MountEvent>,
) -> Result<(Volume, Replayed), MountError> {
    let c = log.companions;
    finish_undo_left(image, c, options)?;
    let shown = |source| MountError { file: image.to_path_buf(), detail: Some(format!("log {}", log.shown())), source };
    let (volume, replayed) = match pi {
        None if log.fast_commit_area => {
            Volume::open_logged_in_fast_commit_area(image, options, sidecar).map_err(shown)?
        }
        None => Volume::open_logged(image, &c.log, log.log_bytes, options, sidecar).map_err(shown)?,
        Some(p) => {
            let (volume, replayed, opened) =
                Volume::open_logged_pi(image, &c.log, log.log_bytes, options, &c.pi, p, sidecar).map_err(shown)?;
            events.push(MountEvent::PiOpened(c.pi.clone(), opened));
            (volume, replayed)
        }
    };
    if replayed.commits > 0 {
        events.push(MountEvent::Replayed(PathBuf::from(log.shown()), replayed));
    }
    Ok((volume, replayed))
}

/// `csumkit ext4 checkpoint`'s recipe: what a `log=off` mount left put
/// back, then — when the image says its log holds changes — the log
/// replayed (data checksums into the sidecar when there is one, through the
/// PI device when there is one), orphans freed and the log folded in.
///
/// # Errors
/// As [`mount`]; [`CheckpointError::LogMissing`] when the image's log is
/// not where `companions` says.
pub fn checkpoint(image: &Path, companions: &Companions) -> Result<Checkpointed, CheckpointError> {
    let options = Options::default();
    let (pending, in_area) = {
        let bytes = image_bytes(image).map_err(at(image))?;
        (crate::log_pending(&bytes), crate::log_in_fast_commit_area(&bytes))
    };
    let undo_put_back = finish_undo_left(image, companions, options)?;
    if !pending {
        return Ok(Checkpointed { undo_put_back, replayed: None, from_fast_commit_area: false });
    }
    if !in_area && !companions.log.exists() {
        return Err(CheckpointError::LogMissing(companions.log.clone()));
    }
    let sidecar = companions.data_checksums.exists().then_some(companions.data_checksums.as_path());
    let pi =
        csumkit::pi::split_protection(&companions.pi).map_err(|e| at(&companions.pi)(Error::Invalid(e.to_string())))?;
    let log = LogIn { companions, log_bytes: LOG_BYTES, fast_commit_area: in_area };
    let (mut volume, replayed) = open_logged(image, &log, options, sidecar, pi, &mut Vec::new())?;
    let shown = |source| MountError { file: image.to_path_buf(), detail: Some(format!("log {}", log.shown())), source };
    // What the kernel would do at mount: free what a stopped mount left.
    free_orphans_left(&mut volume).map_err(shown)?;
    volume.checkpoint().map_err(shown)?;
    Ok(Checkpointed { undo_put_back, replayed: Some(replayed), from_fast_commit_area: in_area })
}

/// What [`checkpoint`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Checkpointed {
    /// An undo log a `log=off` mount left was put back and removed.
    pub undo_put_back: bool,
    /// The log's replay, when the image said its log held changes.
    pub replayed: Option<Replayed>,
    /// That log was the ByteLog in the journal's fast-commit area (else
    /// the file [`Companions::log`] names).
    pub from_fast_commit_area: bool,
}

/// Why [`checkpoint`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// The image, a companion, or the replay failed.
    #[error(transparent)]
    Mount(#[from] MountError),
    /// The image says its log holds changes, and there is no log there.
    #[error("its ByteLog is not at {}", .0.display())]
    LogMissing(PathBuf),
}

/// The PI format a `pi` mount uses when none is asked for: what the PI
/// file holds, else 8 bytes of PI (CRC16 guard, type 1) per 4 KiB — or per
/// filesystem block when blocks are smaller (a device block must not span
/// two).
///
/// # Errors
/// A PI file that cannot be read.
pub fn default_protection(image: &Path, companions: &Companions) -> Result<Protection, MountError> {
    use csumkit::pi::{GuardSize, LbaFormat, PiFormat, PiLocation, PiType};
    let stored =
        csumkit::pi::split_protection(&companions.pi).map_err(|e| at(&companions.pi)(Error::Invalid(e.to_string())))?;
    if let Some(p) = stored {
        return Ok(p);
    }
    // `s_log_block_size`, read alone: the PI format is chosen before the
    // volume opens (and refuses, by name, what it refuses).
    let block = image_bytes(image)
        .ok()
        .and_then(|b| (b.len() >= 2048).then(|| csumkit::le::le32(&b, 1024 + 24)))
        .filter(|&log| log <= 6)
        .map_or(4096, |log| 1024u32 << log)
        .min(4096);
    let invalid = |e: csumkit::Error| at(image)(Error::Invalid(e.to_string()));
    let lba = LbaFormat::new(block, 8).map_err(invalid)?;
    let guard = GuardSize::Crc16;
    let format = PiFormat::new(guard, PiType::Type1, guard.storage_tag_bits_range().0).map_err(invalid)?;
    Protection::new(format, lba, PiLocation::Last).map_err(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn companions_sit_beside_the_image_by_suffix() {
        let c = Companions::beside(Path::new("/x/disk.img"));
        assert_eq!(c.log, Path::new("/x/disk.img.bytelog"));
        assert_eq!(c.undo, Path::new("/x/disk.img.undo"));
        assert_eq!(c.data_checksums, Path::new("/x/disk.img.csums"));
        assert_eq!(c.pi, Path::new("/x/disk.img.pi"));
    }

    #[test]
    fn an_error_names_its_file_once() {
        let e = MountError { file: "disk.img".into(), detail: None, source: Error::Invalid("disk.img: bad".into()) };
        assert_eq!(e.to_string(), "disk.img: bad");
        let e = MountError { file: "disk.img".into(), detail: None, source: Error::Invalid("bad".into()) };
        assert_eq!(e.to_string(), "disk.img: bad");
        let e =
            MountError { file: "d".into(), detail: Some("log d.bytelog".into()), source: Error::Invalid("x".into()) };
        assert_eq!(e.to_string(), "d (log d.bytelog): x");
    }
}

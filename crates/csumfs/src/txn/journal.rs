//! An image the kernel left needing recovery, recovered at open: the
//! journal's full transactions put home (`store/journal_replay.rs`), then
//! the fast commits after them replayed through a volume
//! (`txn/fast_commit.rs`).
//!
//! - In memory (a read-only open): both over a private copy; the file
//!   keeps every byte.
//! - In place (a writable open, `csumkit ext4 recover`): the fast commits'
//!   changes are worked out over a private copy, then written into the log
//!   as one more full jbd2 transaction — the one the fast commits belong
//!   to, after the log's last — and made durable. From then on the log
//!   holds everything, and its replay in place is crash-safe as any
//!   other: the kernel and e2fsck replay that transaction too, and the fast
//!   commits, of an older transaction now, are ignored.

use crate::error::Error;
use crate::ranges::RangeSet;
use crate::store::bytes::Bytes;
use crate::store::journal_replay::{self, apply, needs_recovery, plan, FileMedium, JournalReplayed, Plan};
use crate::store::private_map::PrivateMap;
use crate::volume::{Options, Volume};
use csumkit::ext4::jbd2;

impl Volume {
    /// A volume over `bytes` — a private copy or an image in memory that
    /// needs recovery — recovered there: the journal's blocks home, its
    /// fast commits replayed. The copy is then read as `options` say.
    ///
    /// # Errors
    /// As `journal_replay::plan`; an image csumfs cannot write when fast
    /// commits are to be replayed into it; the replay's errors.
    pub(crate) fn recovered_in_memory(mut bytes: Bytes, options: Options) -> Result<Volume, Error> {
        let writable = bytes.writable().expect("a private copy or an owned image");
        let Some(plan) = plan(writable)? else { return Volume::new(bytes, options) };
        apply(&plan, writable)?;
        let fast = !plan.fast.is_empty();
        let mut volume = Volume::new(bytes, Options { write: options.write || fast, ..options })?;
        if fast {
            volume.replay_fast_commits(&plan.fast)?;
            volume.options.write = options.write;
        }
        volume.journal_replayed = Some(plan.replayed(false));
        Ok(volume)
    }
}

/// The blocks the fast commits of `plan` change, over the image open as
/// `file` with the log's blocks home: (block, new bytes), the superblock
/// left out (its free counts are summed again when the journal is
/// emptied, and a logged superblock must not clear `needs_recovery`
/// before then).
fn fast_commit_blocks(file: &std::fs::File, path: &std::path::Path, plan: &Plan) -> Result<Vec<(u64, Vec<u8>)>, Error> {
    let io = |source| Error::Io { context: path.display().to_string(), source };
    let mut copy = PrivateMap::new(file).map_err(io)?;
    apply(plan, copy.bytes_mut())?;
    let mut volume = Volume::new(Bytes::Private(copy), Options { write: true, ..Options::default() })?;
    volume.written = Some(RangeSet::default());
    volume.replay_fast_commits(&plan.fast)?;
    let bs = volume.layout.block_size as usize;
    let superblock = 1024 / bs;
    let written = volume.written.take().expect("set above");
    let mut blocks: Vec<usize> = written.iter().flat_map(|(start, end)| start / bs..end.div_ceil(bs)).collect();
    blocks.dedup();
    Ok(blocks
        .into_iter()
        .filter(|&b| b != superblock)
        .map(|b| (b as u64, volume.map[b * bs..(b + 1) * bs].to_vec()))
        .collect())
}

/// Replays the journal of the image open as `file` (writable, its lock —
/// [`ImageLock`](crate::ImageLock) — held by the caller) into the file,
/// when its superblock says `needs_recovery`; durable on return. Another
/// node's MMP hold is refused before anything is written.
///
/// # Errors
/// As `journal_replay::plan`; [`Error::Invalid`] for fast commits whose
/// transaction does not fit in the log's free blocks; [`Error::Io`] for a
/// write or flush that fails (the image still needs recovery: what was
/// written is rewritten by the next one).
pub fn recover_held(file: &std::fs::File, path: &std::path::Path) -> Result<Option<JournalReplayed>, Error> {
    let io = |source| Error::Io { context: path.display().to_string(), source };
    // SAFETY: the caller holds the image lock; another process changing
    // the file underneath gives wrong bytes, which every read bounds-checks.
    let map = unsafe { memmap2::MmapMut::map_mut(file) }.map_err(io)?;
    if !needs_recovery(&map) {
        return Ok(None);
    }
    let _mmp = crate::MultiMountProtection::take(file, path, &map)?;
    let Some(mut plan) = plan(&map)? else { return Ok(None) };
    let mut medium = FileMedium { map, path };
    let fast_records = plan.fast.len();
    if fast_records > 0 {
        let blocks = fast_commit_blocks(file, path, &plan)?;
        log_transaction(&mut medium, &plan, &blocks)?;
        plan = journal_replay::plan(&medium.map)?.expect("still needs recovery");
        assert!(plan.fast.is_empty(), "the fast commits' transaction is in the log");
    }
    apply(&plan, &mut medium)?;
    let mut replayed = plan.replayed(true);
    if fast_records > 0 {
        // The transaction written here stands for the fast commits.
        replayed.transactions -= 1;
        replayed.fast_commit_records = fast_records;
    }
    Ok(Some(replayed))
}

/// Writes `blocks` into the log after its last transaction, as the
/// transaction the fast commits belong to, and makes it durable; then
/// empties the fast-commit area.
fn log_transaction(medium: &mut FileMedium<'_>, plan: &Plan, blocks: &[(u64, Vec<u8>)]) -> Result<(), Error> {
    use journal_replay::ReplayMedium;
    let journal = plan.journal();
    let sb = &journal.superblock;
    let r = &plan.recovery;
    let log = sb.last() - sb.first;
    let used = (r.head + log - sb.start) % log;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let time = (now.as_secs().max(r.last_commit_time), now.subsec_nanos());
    let written = jbd2::transaction(sb, r.head, log - used, r.end_transaction, blocks, time)
        .map_err(|e| Error::Invalid(format!("the fast commits cannot be logged: {e}")))?;
    let bs = u64::from(sb.block_size);
    for (at, bytes) in written {
        medium.write(journal.blocks[at as usize] * bs, &bytes)?;
    }
    medium.flush()?;
    // The fast commits, of an older transaction now, are ignored by the
    // kernel's scan; e2fsck 1.47.0 fails on the stale HEAD ("Invalid
    // argument while recovering"). The area's first block zeroed once the
    // transaction is durable leaves both nothing to scan.
    let area = journal.blocks[(sb.last() + 1) as usize] * bs;
    medium.write(area, &vec![0; bs as usize])?;
    medium.flush()
}

/// Replays the kernel's journal of the image at `path` into it, as
/// `e2fsck -E journal_only` does, when its superblock says
/// `needs_recovery`; `None` when it does not. Durable on return.
///
/// # Errors
/// [`Error::Io`] when the image cannot be opened, written or flushed; the
/// refusal of an image another process holds (its lock, another node's
/// MMP); `Error::Format` for a journal recovery must not trust, naming the
/// journal block and transaction.
pub fn recover(path: &std::path::Path) -> Result<Option<JournalReplayed>, Error> {
    let file = csumkit::file::open_image(path, true)?;
    let _lock = crate::store::image_lock::ImageLock::take(&file, path, true)?;
    recover_held(&file, path)
}

#[cfg(test)]
mod tests {
    use super::{fast_commit_blocks, log_transaction};
    use crate::store::journal_replay::{plan, FileMedium};
    use std::path::Path;
    use std::process::Command;

    /// A recovery in place stopped right after it logged the fast commits
    /// as a full transaction (the power cut the order is built for): the
    /// log now holds that transaction and recovery finds no fast commits
    /// to replay; e2fsck's recovery of a copy gives an image it finds
    /// clean; the kernel's own recovery of the image (a loop mount, as
    /// root) replays it and shows the tree the fast commits made — with
    /// the link counts e2fsck wants, which its own fast-commit replay does
    /// not set.
    #[test]
    fn fast_commits_logged_as_a_transaction_are_replayed_by_the_kernel() {
        let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../csumkit/tests/data/jbd2");
        let dir = std::env::temp_dir().join(format!("csumfs-fc-logged-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("image");
        let out = Command::new("gzip").arg("-dc").arg(corpus.join("fastcommit-noflush-4k.img.gz")).output().unwrap();
        std::fs::write(&image, out.stdout).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&image).unwrap();
        // SAFETY: the test's own file.
        let map = unsafe { memmap2::MmapMut::map_mut(&file) }.unwrap();
        let before = plan(&map).unwrap().unwrap();
        assert!(!before.fast.is_empty());
        let blocks = fast_commit_blocks(&file, &image, &before).unwrap();
        assert!(!blocks.is_empty());
        let mut medium = FileMedium { map, path: &image };
        log_transaction(&mut medium, &before, &blocks).unwrap();
        let after = plan(&medium.map).unwrap().unwrap();
        assert!(after.fast.is_empty(), "the fast commits now belong to an older transaction");
        assert_eq!(after.recovery.transactions(), before.recovery.transactions() + 1);
        drop(medium);

        // e2fsck recovers the image csumfs left, too (1.47.0 fails on the
        // kernel's own stale fast-commit heads; the area is emptied here).
        let e2fsck = ["/usr/sbin/e2fsck", "/sbin/e2fsck"].into_iter().find(|p| Path::new(p).exists());
        if let Some(e2fsck) = e2fsck {
            let copy = dir.join("e2fsck-copy");
            std::fs::copy(&image, &copy).unwrap();
            let out = Command::new(e2fsck).args(["-fy", "-E", "journal_only"]).arg(&copy).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.code().is_some_and(|c| c <= 1), "e2fsck -E journal_only: {text}");
            let out = Command::new(e2fsck).arg("-fn").arg(&copy).output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success() && !text.contains("? no"), "e2fsck -fn after its recovery: {text}");
            let v = crate::Volume::open(&copy, crate::Options::default()).unwrap();
            assert_eq!(v.read_all(&v.resolve("/d/sub/g").unwrap()).unwrap(), b"inside\n");
        } else {
            assert!(std::env::var_os("CI").is_none(), "e2fsck is required in CI");
            eprintln!("SKIPPED e2fsck's recovery of a logged fast commit: e2fsck not found");
        }

        let device = Command::new("losetup").args(["-f", "--show"]).arg(&image).output().unwrap();
        if !device.status.success() {
            assert!(std::env::var_os("CI").is_none(), "CI runs as root: losetup refused");
            eprintln!("SKIPPED the kernel's recovery of a logged fast commit: losetup refused (not root)");
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
        let device = String::from_utf8(device.stdout).unwrap().trim().to_string();
        let mnt = dir.join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let mounted = Command::new("mount").args(["-t", "ext4", "-o", "ro", &device]).arg(&mnt).output().unwrap();
        let view = mounted.status.success().then(|| {
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kernel-view.py");
            let out = Command::new("python3").arg(script).arg(&mnt).output().unwrap();
            let _ = Command::new("umount").arg(&mnt).status();
            out
        });
        let _ = Command::new("losetup").args(["-d", &device]).status();
        assert!(mounted.status.success(), "the kernel refused the logged transaction: {mounted:?}");
        let view: serde_json::Value = serde_json::from_slice(&view.unwrap().stdout).unwrap();
        let entry = |path: &str| view.as_array().unwrap().iter().find(|e| e["path"] == path).cloned();
        let g = entry("/d/sub/g").expect("the fast-commit file");
        assert_eq!(g["size"], 7);
        assert_eq!(entry("/d/sub").unwrap()["nlink"], 2);
        assert_eq!(entry("/d").unwrap()["nlink"], 3);
        assert_eq!(entry("/d/f5.link").unwrap()["nlink"], 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

//! Multiple-mount protection: ext4's `mmp` feature, as the kernel keeps it
//! (`fs/ext4/mmp.c`). The image lock (`store/image_lock.rs`) keeps other
//! csumfs processes off an image; the kernel and e2fsprogs do not look at
//! it, but they do read the MMP block, so an image made with `mke2fs -O
//! mmp` is kept from a kernel mount (and `e2fsck`, `tune2fs`, `debugfs
//! -w`) while csumfs writes it, and csumfs waits for theirs.
//!
//! The block holds a sequence number. A writer that finds it `CLEAN`
//! writes a random one and goes on, as the kernel (6.18) does. One that
//! finds another waits twice the check interval plus a second (11 s or
//! more): if the number changed meanwhile, a live node holds the image and
//! the open is refused (`EBUSY`); if not, its writer died, and this one
//! writes its own, waits as long again and reads it back — another node
//! that found the same stale number has changed it. The writer then bumps
//! it every update interval (5 s) until it closes the image, when it writes
//! `CLEAN`.

use crate::error::Error;
use csumkit::crc32c;
use csumkit::ext4::feature_bits::INCOMPAT_MMP;
use csumkit::ext4::fields::{S_MMP_BLOCK, S_MMP_UPDATE_INTERVAL};
use csumkit::ext4::Layout;
use csumkit::le::{le16, le32, le64};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

const MAGIC: u32 = 0x004D_4D50;
const SEQ_CLEAN: u32 = 0xFF4D_4D50;
const SEQ_FSCK: u32 = 0xE24D_4D50;
const SEQ_MAX: u32 = 0xE24D_4D4F;
/// Seconds: the shortest check interval (`EXT4_MMP_MIN_CHECK_INTERVAL`),
/// and the one csumfs announces (the kernel's, once its writes are quick).
const MIN_CHECK_INTERVAL: u16 = 5;
/// Seconds: the longest check interval a writer announces
/// (`EXT4_MMP_MAX_CHECK_INTERVAL`); a larger one read is damage, and is
/// not waited for (at most 6 minutes then).
const MAX_CHECK_INTERVAL: u16 = 300;
/// The block's fields used here, and its checksum's place.
const SEQ_AT: usize = 4;
const TIME_AT: usize = 8;
const NODENAME_AT: usize = 16;
const BDEVNAME_AT: usize = 80;
const CHECK_INTERVAL_AT: usize = 112;
const CHECKSUM_AT: usize = 0x3FC;
const STRUCT_BYTES: usize = 1024;

/// The protection while the image is written (by a volume, or `csumkit
/// ext4 check --repair`): the thread that bumps the sequence, told to write
/// `CLEAN` and stop when this is dropped.
pub struct MultiMountProtection {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for MultiMountProtection {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The image's MMP block, read and written through its own descriptor.
struct Block {
    file: std::fs::File,
    path: PathBuf,
    at: u64,
    /// The checksum seed (csumfs opens `metadata_csum` images only).
    seed: u32,
}

impl Block {
    fn read(&self) -> Result<[u8; STRUCT_BYTES], Error> {
        let mut b = [0u8; STRUCT_BYTES];
        self.file
            .read_exact_at(&mut b, self.at)
            .map_err(|source| Error::Io { context: format!("{}: MMP block", self.path.display()), source })?;
        if le32(&b, 0) != MAGIC {
            return Err(crate::error::corrupt("MMP block", format!("magic {:#010x}", le32(&b, 0))));
        }
        let stored = le32(&b, CHECKSUM_AT);
        if stored != crc32c::raw_update(self.seed, &b[..CHECKSUM_AT]) {
            return Err(crate::error::corrupt("MMP block", "checksum does not match"));
        }
        Ok(b)
    }

    /// Writes `seq` (with the time, and its checksum) and makes it durable:
    /// the other node may read the device under the page cache.
    fn write(&self, b: &mut [u8; STRUCT_BYTES], seq: u32) -> Result<(), Error> {
        b[SEQ_AT..SEQ_AT + 4].copy_from_slice(&seq.to_le_bytes());
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        b[TIME_AT..TIME_AT + 8].copy_from_slice(&now.to_le_bytes());
        let crc = crc32c::raw_update(self.seed, &b[..CHECKSUM_AT]);
        b[CHECKSUM_AT..].copy_from_slice(&crc.to_le_bytes());
        let io = |source| Error::Io { context: format!("{}: MMP block", self.path.display()), source };
        self.file.write_all_at(b, self.at).map_err(io)?;
        self.file.sync_data().map_err(io)
    }
}

impl MultiMountProtection {
    /// Takes the protection of the image at `path` — `file` a descriptor
    /// of it open for writing, `image` its bytes — when it has the `mmp`
    /// feature; `Ok(None)` without it. Waits 22 s or more (saying so on
    /// stderr) for an image not closed cleanly.
    ///
    /// # Errors
    /// [`Error::InUse`] when another node holds the image (or `e2fsck` runs
    /// on it); [`Error::Format`] for an image that is not ext4;
    /// [`Error::Corrupt`] for a damaged MMP block; [`Error::Io`].
    pub fn take(file: &std::fs::File, path: &Path, image: &[u8]) -> Result<Option<Self>, Error> {
        let layout = Layout::parse(image)?;
        let io = |source| Error::Io { context: path.display().to_string(), source };
        protect(file.try_clone().map_err(io)?, path, &layout, &image[1024..2048])
    }
}

/// Who wrote the block last, as the kernel names it ("node, device").
fn holder(b: &[u8; STRUCT_BYTES]) -> String {
    let text = |r: std::ops::Range<usize>| {
        let bytes = &b[r];
        let end = bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    };
    format!(
        "last written by node {:?}, device {:?}",
        text(NODENAME_AT..BDEVNAME_AT),
        text(BDEVNAME_AT..CHECK_INTERVAL_AT)
    )
}

fn random_seq() -> u32 {
    loop {
        let mut seq = [0u8; 4];
        // SAFETY: getrandom writes at most 4 bytes into the 4-byte buffer.
        let got = unsafe { libc::getrandom(seq.as_mut_ptr().cast(), 4, 0) };
        let seq = if got == 4 {
            u32::from_le_bytes(seq)
        } else {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.subsec_nanos())
        };
        if (1..=SEQ_MAX).contains(&seq) {
            return seq;
        }
    }
}

/// Takes the protection of the image at `path` (`file`: a descriptor of it) for
/// writing, when it has the `mmp` feature — after 22 s or more, with a
/// line on stderr, when it was not closed cleanly. `Ok(None)` without the
/// feature.
///
/// # Errors
/// [`Error::InUse`] when another node holds the image (or `e2fsck` runs on
/// it); [`Error::Corrupt`] for a damaged MMP block; [`Error::Io`].
pub(crate) fn protect(
    file: std::fs::File,
    path: &Path,
    layout: &Layout,
    sb: &[u8],
) -> Result<Option<MultiMountProtection>, Error> {
    if layout.features.incompat & INCOMPAT_MMP == 0 {
        return Ok(None);
    }
    let update_interval = le16(sb, S_MMP_UPDATE_INTERVAL);
    let number = le64(sb, S_MMP_BLOCK);
    if number < layout.first_data_block || number >= layout.blocks_count {
        return Err(crate::error::corrupt("superblock", format!("s_mmp_block {number} is outside the filesystem")));
    }
    let io = |source| Error::Io { context: path.display().to_string(), source };
    let block = Block { file, path: path.to_path_buf(), at: number * layout.block_size, seed: layout.csum_seed };
    let mut b = block.read()?;
    let announced = u16::from_le_bytes([b[CHECK_INTERVAL_AT], b[CHECK_INTERVAL_AT + 1]]);
    let interval = u64::from(update_interval.max(MIN_CHECK_INTERVAL).max(announced).min(MAX_CHECK_INTERVAL));
    let wait = Duration::from_secs((2 * interval + 1).min(interval + 60));
    let seq = le32(&b, SEQ_AT);
    if seq == SEQ_FSCK {
        return Err(Error::InUse(format!("e2fsck is running on it (multiple-mount protection; {})", holder(&b))));
    }
    let taken = |b: &[u8; STRUCT_BYTES]| {
        Error::InUse(format!(
            "in use by another node (multiple-mount protection; {}); unmount it there first",
            holder(b)
        ))
    };
    let clean = seq == SEQ_CLEAN;
    if !clean {
        eprintln!(
            "csumfs: {}: multiple-mount protection: the image was not closed cleanly or is in use; waiting {} s to \
             see which",
            path.display(),
            wait.as_secs()
        );
        std::thread::sleep(wait);
        b = block.read()?;
        if le32(&b, SEQ_AT) != seq {
            return Err(taken(&b));
        }
    }
    let mut seq = random_seq();
    let mut name = [0u8; 64];
    // SAFETY: gethostname writes at most 63 bytes into the 64-byte buffer
    // (the last stays 0).
    unsafe { libc::gethostname(name.as_mut_ptr().cast(), 63) };
    b[NODENAME_AT..BDEVNAME_AT].copy_from_slice(&name);
    let device = format!("csumfs pid {}", std::process::id());
    b[BDEVNAME_AT..CHECK_INTERVAL_AT].fill(0);
    b[BDEVNAME_AT..BDEVNAME_AT + device.len()].copy_from_slice(device.as_bytes());
    b[CHECK_INTERVAL_AT..CHECK_INTERVAL_AT + 2].copy_from_slice(&MIN_CHECK_INTERVAL.to_le_bytes());
    block.write(&mut b, seq)?;
    if !clean {
        // Another node may have found the same stale sequence and written
        // its own meanwhile.
        eprintln!("csumfs: {}: multiple-mount protection: waiting {} s more", path.display(), wait.as_secs());
        std::thread::sleep(wait);
        let now = block.read()?;
        if le32(&now, SEQ_AT) != seq {
            return Err(taken(&now));
        }
    }
    let (stop, stopped) = mpsc::channel::<()>();
    let every = Duration::from_secs(u64::from(update_interval.max(1)));
    let thread = std::thread::Builder::new()
        .name("csumfs-mmp".into())
        .spawn(move || loop {
            let done = match stopped.recv_timeout(every) {
                Err(RecvTimeoutError::Timeout) => false,
                Ok(()) | Err(RecvTimeoutError::Disconnected) => true,
            };
            // Still ours? Another node that took it is not overwritten (the
            // kernel's kmmpd stops the same way, and reports it).
            match block.read() {
                Ok(now) if le32(&now, SEQ_AT) == seq => {}
                Ok(now) => {
                    eprintln!(
                        "csumfs: {}: multiple-mount protection: the MMP block was taken over ({}): the image \
                         seems to be in use twice",
                        block.path.display(),
                        holder(&now)
                    );
                    return;
                }
                Err(e) => eprintln!("csumfs: {}: multiple-mount protection: {e}", block.path.display()),
            }
            seq = if done { SEQ_CLEAN } else { seq % SEQ_MAX + 1 };
            if let Err(e) = block.write(&mut b, seq) {
                eprintln!("csumfs: {}: multiple-mount protection: {e}", block.path.display());
            }
            if done {
                return;
            }
        })
        .map_err(io)?;
    Ok(Some(MultiMountProtection { stop: Some(stop), thread: Some(thread) }))
}

//! Data integrity inline in protection information (btrfs's
//! checksum offload, the cover letter's config 3): the image is the data
//! of an emulated PI-formatted namespace (`csumkit::pi::Device`, split
//! storage: the image stays a plain ext4 image, the PI is in a file beside
//! it, `IMAGE.pi`). Every write of the image goes through the device with
//! PRACT — the device generates each block's guard and reference tag — and
//! reads of file data go through it too, so the device checks them: no
//! checksum tree, no checksum I/O of csumfs's own.
//!
//! Which writes: file data (in place, or through the ByteLog's backing
//! when logged: its checkpoints and direct data writes); with `log=off`
//! metadata is stored through a shared map the device does not see, so
//! its blocks' PI is stale — harmless, as only file data blocks are read
//! through the device, and a block becomes file data only by being
//! written whole through it. Reads of a page the ByteLog holds newer bytes
//! for than the image file are not checked (the log's own CRCs cover them).
//!
//! The device's owner tag holds the image's identity (as the data
//! checksum sidecar does): a PI file made before another driver wrote the
//! image is stale and starts afresh — every block unchecked until written.

use crate::error::Error;
use crate::inode::Inode;
use crate::redo::{Backing, LogMedium, Replayed};
use crate::stats::Stats;
use crate::volume::{Bytes, Volume};
use csumkit::pi::{Checks, Device, Io, Protection, SplitOpened, OWNER_TAG_BYTES};
use csumkit::DurableFile;
use std::path::Path;
use std::sync::Arc;

/// Largest piece written or read through the device in one command.
const COMMAND_BYTES: usize = 16 << 20;

/// What opening the PI device found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PiOpened {
    /// A write a stopped process left half stored was finished.
    pub finished_write: bool,
    /// The PI file belonged to the image before another driver wrote it,
    /// and was started afresh.
    pub started_afresh: bool,
    /// Blocks a power cut may have left with PI torn from their data,
    /// whose guard failed: their PI was forgotten (unchecked until
    /// rewritten), as a drive's atomic block write would have left them
    /// old or new.
    pub forgotten_blocks: u64,
}

fn owner_tag(image: &[u8]) -> [u8; OWNER_TAG_BYTES] {
    let mut tag = [0u8; OWNER_TAG_BYTES];
    let id = crate::datasum::identity(image);
    tag[..id.len()].copy_from_slice(&id);
    tag
}

/// Opens the split device over the image at `path` (bytes `image`) with
/// its PI in `metadata` (created when missing); a stale PI file is started
/// afresh.
pub(crate) fn open_device(
    path: &Path,
    image: &[u8],
    block_size: u64,
    metadata: &Path,
    protection: Protection,
    write: bool,
) -> Result<(Arc<Device>, PiOpened), Error> {
    let open = || Device::open_split(path, metadata, protection);
    open_device_with(open, metadata, image, block_size, protection, write)
}

/// [`open_device`] with the device opened by `open` (over files already
/// open, for a test's simulated disks), its PI file named `metadata` in
/// messages; the LBA format is checked before anything is opened.
pub(crate) fn open_device_with(
    open: impl FnOnce() -> Result<(Device, SplitOpened), csumkit::Error>,
    metadata: &Path,
    image: &[u8],
    block_size: u64,
    protection: Protection,
    write: bool,
) -> Result<(Arc<Device>, PiOpened), Error> {
    let lba = protection.lba().data_bytes() as u64;
    if lba > block_size {
        return Err(Error::Invalid(format!(
            "PI LBA format {} has larger blocks than the filesystem's {block_size}-byte blocks \
             (a block would hold bytes of two filesystem blocks): pick one of at most {block_size} data bytes",
            protection.lba()
        )));
    }
    let (device, split) = open()?;
    let ours = owner_tag(image);
    let mut started_afresh = false;
    if device.owner_tag()? != ours {
        if !write {
            return Err(Error::Invalid(format!(
                "{}: this PI is stale (the image was written since without it); a read-write PI mount starts it afresh",
                metadata.display()
            )));
        }
        if !split.formatted {
            device.deallocate_all()?;
            started_afresh = true;
        }
        device.set_owner_tag(&ours)?;
    }
    let (finished_write, forgotten_blocks) = (split.finished_write, split.forgotten_blocks);
    Ok((Arc::new(device), PiOpened { finished_write, started_afresh, forgotten_blocks }))
}

/// Writes `bytes` at byte `at` of the device's data, whole blocks at a
/// time: the blocks at either end are read first — checked when `checked`
/// (file data: a write never re-seals a damaged block); not for metadata,
/// whose PI is stale after `log=off` and which has checksums of its own.
pub(crate) fn write_through(device: &Device, at: u64, bytes: &[u8], checked: bool) -> Result<(), csumkit::Error> {
    let edge_io = if checked { Io::pract() } else { Io { checks: Checks::NONE, ..Io::pract() } };
    let lb = device.lba_format().data_bytes() as u64;
    let end = at + bytes.len() as u64;
    let (start, stop) = (at / lb * lb, end.div_ceil(lb) * lb);
    let mut piece_at = start;
    while piece_at < stop {
        let piece_end = (piece_at + COMMAND_BYTES as u64).min(stop);
        let (from, to) = (piece_at.max(at), piece_end.min(end));
        let src = &bytes[(from - at) as usize..(to - at) as usize];
        if (from, to) == (piece_at, piece_end) {
            device.write(piece_at / lb, src, None, &Io::pract())?;
        } else {
            let mut buf = vec![0u8; (piece_end - piece_at) as usize];
            for edge in [piece_at, piece_end - lb] {
                if edge < from || edge + lb > to {
                    let i = (edge - piece_at) as usize;
                    device.read(edge / lb, &mut buf[i..i + lb as usize], None, &edge_io)?;
                }
            }
            buf[(from - piece_at) as usize..(to - piece_at) as usize].copy_from_slice(src);
            device.write(piece_at / lb, &buf, None, &Io::pract())?;
        }
        piece_at = piece_end;
    }
    Ok(())
}

/// The ByteLog's backing when the image is on a PI device: what a
/// checkpoint writes goes through the device, which generates its PI.
pub(crate) struct PiBacking(pub(crate) Arc<Device>);

impl Backing for PiBacking {
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        write_through(&self.0, at, bytes, false).map_err(into_io)
    }
    fn sync(&mut self) -> std::io::Result<()> {
        self.0.flush().map_err(into_io)
    }
    fn sync_handle(&self) -> std::io::Result<crate::SyncHandle> {
        let device = self.0.clone();
        Ok(Box::new(move || device.flush().map_err(into_io)))
    }
}

fn into_io(e: csumkit::Error) -> std::io::Error {
    match e {
        csumkit::Error::Io { source, .. } => source,
        other => std::io::Error::other(other.to_string()),
    }
}

impl Volume {
    /// Keeps this volume's data integrity in the PI of an emulated device
    /// over its image file at `path`, the PI in `metadata` (created when
    /// missing) — instead of data checksums. Opened without a ByteLog
    /// (`log=off`, or read-only); [`open_logged_pi`](Self::open_logged_pi)
    /// is the logged form.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a volume in memory, one keeping data
    /// checksums, or an LBA format larger than a block; as
    /// `csumkit::pi::Device::open_split`.
    pub fn enable_pi(&mut self, path: &Path, metadata: &Path, protection: Protection) -> Result<PiOpened, Error> {
        if matches!(self.map, Bytes::Owned(_)) {
            return Err(Error::Invalid("a volume in memory has no PI device".into()));
        }
        if self.datasums.is_some() {
            return Err(Error::Invalid("data checksums and PI are alternatives: keep one".into()));
        }
        let write = self.options.write;
        let (device, opened) = open_device(path, &self.map, self.layout.block_size, metadata, protection, write)?;
        self.pi = Some(device);
        Ok(opened)
    }

    /// [`open_logged_pi`](Self::open_logged_pi) for a volume in memory
    /// ([`from_logged_bytes`](Self::from_logged_bytes)) whose image file and
    /// PI file are given open — a test's simulated disks: the device over
    /// `data` (the image) and `metadata` (its PI; empty: a new one), then
    /// the ByteLog on `medium` replayed and checkpointed through it.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a volume keeping data checksums, or an LBA
    /// format larger than a block; as `csumkit::pi::Device::open_split_on`
    /// and [`enable_log`](Self::enable_log).
    pub fn enable_logged_pi_on(
        &mut self,
        (data, metadata): (Box<dyn DurableFile>, Box<dyn DurableFile>),
        protection: Protection,
        medium: LogMedium,
        expect_log: bool,
    ) -> Result<(Replayed, PiOpened), Error> {
        if self.datasums.is_some() {
            return Err(Error::Invalid("data checksums and PI are alternatives: keep one".into()));
        }
        let (image_path, pi_path) = (Path::new("image"), Path::new("image.pi"));
        let open = || Device::open_split_on(data, metadata, image_path, pi_path, protection);
        let (device, opened) = open_device_with(open, pi_path, &self.map, self.layout.block_size, protection, true)?;
        self.pi = Some(Arc::clone(&device));
        let replayed = self.enable_log(Box::new(PiBacking(device)), medium, expect_log, None)?;
        Ok((replayed, opened))
    }

    /// The PI device's counters, when the volume is on one.
    pub fn pi_device_stats(&self) -> Option<csumkit::pi::DeviceStats> {
        self.pi.as_ref().map(|d| d.stats())
    }

    /// Writes file data through the PI device, in place (the map sees the
    /// file's pages: shared with `log=off`, not copied by the ByteLog).
    pub(crate) fn pi_store_data(&mut self, at: u64, new: &[u8]) -> Result<(), Error> {
        let device = self.pi.as_ref().expect("called with a PI device");
        write_through(device, at, new, true)?;
        Stats::add(&self.stats.pi_blocks_written, new.len().div_ceil(self.layout.block_size as usize) as u64);
        Ok(())
    }

    /// Checks data block `physical` of `inode` (file block `logical`)
    /// through the device: `EIO` when its PI does not match.
    /// `Ok(false)`: the block carries no PI to check (never written
    /// through the device, or newer in the log than in the file).
    pub(crate) fn pi_verify(&self, device: &Device, inode: &Inode, logical: u64, physical: u64) -> Result<bool, Error> {
        let bs = self.layout.block_size;
        if !inode.is_file() || self.redo.as_ref().is_some_and(|r| r.page_newer_than_file(physical * bs)) {
            Stats::bump(&self.stats.pi_blocks_unchecked);
            return Ok(false);
        }
        let (lb, md) = (device.lba_format().data_bytes() as u64, device.lba_format().metadata_bytes());
        let protection = device.protection().expect("a PI device");
        let mut block = vec![0u8; bs as usize];
        let mut metadata = vec![0u8; (bs / lb) as usize * md];
        // Without PRACT, to see the stored tuples: a block whose every
        // tuple is the escape (never written through the device) was not
        // checked, and is counted so.
        match device.read(physical * bs / lb, &mut block, Some(&mut metadata), &Io::default()) {
            Ok(()) => {
                let format = protection.format();
                let at = protection.tuple_offset();
                let unchecked = metadata.chunks_exact(md).all(|m| format.is_escape(&format.decode(&m[at..])));
                Stats::bump(if unchecked { &self.stats.pi_blocks_unchecked } else { &self.stats.pi_blocks_verified });
                Ok(!unchecked)
            }
            Err(csumkit::Error::PiCheck(failure)) => {
                Stats::bump(&self.stats.pi_mismatches);
                Err(Error::DataPi { ino: inode.ino, logical, physical, detail: failure.to_string() })
            }
            Err(e) => Err(e.into()),
        }
    }
}

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
use crate::store::medium::{Backing, SyncHandle};
use csumkit::pi::{Checks, Device, Io, Protection, SplitOpened, OWNER_TAG_BYTES};
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
    let id = crate::store::data_sums::identity(image);
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
    fn sync_handle(&self) -> std::io::Result<SyncHandle> {
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

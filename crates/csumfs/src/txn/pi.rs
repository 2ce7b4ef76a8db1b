//! Data integrity in protection information, on the volume: turning it
//! on, storing file data through the device and verifying reads against
//! it. The device and its owner tag are `store/pi_device.rs`.

use crate::error::Error;
use crate::inode::table::Inode;
use crate::stats::Stats;
use crate::store::bytes::Bytes;
use crate::store::medium::LogMedium;
use crate::store::pi_device::{open_device, open_device_with, write_through, PiBacking, PiOpened};
use crate::store::redo_log::Replayed;
use crate::volume::{DataPath, Volume};
use csumkit::pi::{Device, Io, Protection};
use csumkit::DurableFile;
use std::path::Path;
use std::sync::Arc;

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
        self.data_path = DataPath::Pi;
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
        self.data_path = DataPath::Pi;
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

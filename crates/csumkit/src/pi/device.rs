//! A file-backed emulation of a PI-formatted NVMe namespace.
//!
//! Each logical block is stored as `data + metadata` at `lba × (data +
//! metadata)` in the backing file. A write either carries host-generated PI,
//! which the device checks before storing anything (PRACT = 0), or sets
//! PRACT, so that the device generates the PI itself; a read checks the
//! stored PI and, with PRACT on a format whose metadata is only the tuple,
//! strips it. Blocks never written read as zeros with all-FFh metadata (an
//! escape), as drives report deallocated blocks.
//!
//! [`Device::open_split`] keeps the data in one file (an image other tools
//! read as it is) and the metadata in another; see `storage.rs`.
//!
//! Faults can be injected: bit rot (a stored bit flips), a misdirected
//! write (the next write of one LBA lands on another) and a lost write (the
//! next write of an LBA is acknowledged but never stored). PI catches the
//! first two on read (guard, reference tag); a lost write leaves an older
//! block whose PI is still self-consistent — only a checksum kept elsewhere
//! (a checksum tree) catches it.

use super::format::PiType;
use super::layout::{LbaFormat, Protection};
use super::protect::{self, Checks, Tags};
use super::storage::{SplitOpened, Storage, OWNER_TAG_BYTES};
use crate::{DurableFile, Error};
use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Largest namespace the emulation creates: 2^40 blocks.
pub const DEVICE_BLOCKS_MAX: u64 = 1 << 40;
pub use super::layout::COMMAND_DATA_BYTES_MAX;

/// Per-command PI controls: PRACT, the PRCHK checks and the tags.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Io {
    /// Protection-information action: the device generates PI on write
    /// and strips it on read (when the metadata is only the tuple).
    pub pract: bool,
    /// Which fields the device checks.
    pub checks: Checks,
    /// Tag values. For type 1 the reference tag is the LBA, whatever this says.
    pub tags: Tags,
}

impl Io {
    /// PRACT = 1 with every check.
    pub fn pract() -> Io {
        Io { pract: true, ..Io::default() }
    }
}

/// A fault to inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Flip one stored bit of block `lba` now; `bit` counts from the start
    /// of its data (bits past the data are metadata).
    BitRot {
        /// The block.
        lba: u64,
        /// Bit index inside `data + metadata`.
        bit: u64,
    },
    /// The next write of `lba` is stored at `to` instead.
    MisdirectedWrite {
        /// The block the host writes.
        lba: u64,
        /// Where it lands.
        to: u64,
    },
    /// The next write of `lba` is acknowledged but not stored.
    LostWrite {
        /// The block.
        lba: u64,
    },
}

/// What the device has done, in bytes and commands.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeviceStats {
    /// Write commands completed.
    pub write_commands: u64,
    /// Logical-block data bytes written (what `iostat` counts).
    pub data_bytes_written: u64,
    /// Data and metadata bytes stored on the medium.
    pub medium_bytes_written: u64,
    /// Read commands completed.
    pub read_commands: u64,
}

/// The emulated namespace.
#[derive(Debug)]
pub struct Device {
    storage: Storage,
    path: PathBuf,
    lba: LbaFormat,
    protection: Option<Protection>,
    blocks: u64,
    faults: Mutex<Vec<Fault>>,
    faults_pending: AtomicBool,
    write_commands: AtomicU64,
    data_bytes_written: AtomicU64,
    medium_bytes_written: AtomicU64,
    read_commands: AtomicU64,
}

impl Device {
    /// Creates (or truncates) `path` as a namespace of `blocks` blocks of
    /// `lba` format, PI-formatted when `protection` is given (its LBA format
    /// must be `lba`). The file is sparse until written.
    pub fn create(path: &Path, lba: LbaFormat, protection: Option<Protection>, blocks: u64) -> Result<Self, Error> {
        if let Some(p) = &protection {
            if p.lba() != lba {
                return Err(Error::Invalid {
                    what: "device format",
                    detail: format!("protection is for {} but the device is {lba}", p.lba()),
                });
            }
        }
        if blocks == 0 || blocks > DEVICE_BLOCKS_MAX {
            return Err(Error::Invalid {
                what: "device size",
                detail: format!("{blocks} blocks (1..={DEVICE_BLOCKS_MAX})"),
            });
        }
        let io_err = |context: &str, source| Error::Io { context: format!("{}: {context}", path.display()), source };
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| io_err("create device file", e))?;
        file.set_len(blocks * lba.extended_bytes() as u64).map_err(|e| io_err("size device file", e))?;
        Ok(Device::with_storage(Storage::interleaved(file, blocks), path, lba, protection, blocks))
    }

    /// Opens a PI-formatted namespace whose data is the file at `data` (its
    /// whole blocks: an existing image stays readable by other tools as it
    /// is) and whose metadata is the file at `metadata`, created when
    /// missing (every block's PI the escape: unchecked until written).
    /// Returns the device and what opening it finished: a write a stopped
    /// process left half stored (its blocks' PI regenerated from their
    /// data), and blocks a power cut left with PI torn from their data
    /// (forgotten: unchecked until written).
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::Invalid`] when the metadata file is for
    /// another format or size (it names both); [`Error::Corrupt`] when it
    /// is not one.
    pub fn open_split(data: &Path, metadata: &Path, protection: Protection) -> Result<(Self, SplitOpened), Error> {
        let io_err = |path: &Path, context: &str, source| Error::Io {
            context: format!("{}: {context}", path.display()),
            source,
        };
        let file =
            OpenOptions::new().read(true).write(true).open(data).map_err(|e| io_err(data, "open data file", e))?;
        let metadata_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(metadata)
            .map_err(|e| io_err(metadata, "open metadata file", e))?;
        Device::open_split_on(Box::new(file), Box::new(metadata_file), data, metadata, protection)
    }

    /// [`open_split`](Self::open_split) over files given as [`DurableFile`]s
    /// (a test's simulated disk); `data_path` and `metadata_path` name them
    /// in messages. An empty metadata file is formatted.
    ///
    /// # Errors
    /// As [`open_split`](Self::open_split).
    pub fn open_split_on(
        data: Box<dyn DurableFile>,
        metadata: Box<dyn DurableFile>,
        data_path: &Path,
        metadata_path: &Path,
        protection: Protection,
    ) -> Result<(Self, SplitOpened), Error> {
        let lba = protection.lba();
        let len = data
            .size()
            .map_err(|e| Error::Io { context: format!("{}: stat data file", data_path.display()), source: e })?;
        let blocks = len / lba.data_bytes() as u64;
        if blocks == 0 || blocks > DEVICE_BLOCKS_MAX {
            return Err(Error::Invalid {
                what: "device size",
                detail: format!("{}: {blocks} blocks of {lba} (1..={DEVICE_BLOCKS_MAX})", data_path.display()),
            });
        }
        let (storage, opened) = Storage::open_split(data, metadata, metadata_path, &protection, blocks)?;
        Ok((Device::with_storage(storage, data_path, lba, Some(protection), blocks), opened))
    }

    fn with_storage(
        storage: Storage,
        path: &Path,
        lba: LbaFormat,
        protection: Option<Protection>,
        blocks: u64,
    ) -> Device {
        Device {
            storage,
            path: path.to_path_buf(),
            lba,
            protection,
            blocks,
            faults: Mutex::new(Vec::new()),
            faults_pending: AtomicBool::new(false),
            write_commands: AtomicU64::new(0),
            data_bytes_written: AtomicU64::new(0),
            medium_bytes_written: AtomicU64::new(0),
            read_commands: AtomicU64::new(0),
        }
    }

    /// The tag the user of a split device keeps in its metadata file (all
    /// zeros when never set; always zeros for an interleaved device).
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn owner_tag(&self) -> Result<[u8; OWNER_TAG_BYTES], Error> {
        self.storage.owner_tag()
    }

    /// Sets the owner tag, durably.
    ///
    /// # Errors
    /// [`Error::Io`]; [`Error::Invalid`] for an interleaved device.
    pub fn set_owner_tag(&self, tag: &[u8; OWNER_TAG_BYTES]) -> Result<(), Error> {
        self.storage.set_owner_tag(tag)
    }

    /// Deallocates every block's metadata: all PI reads as the escape
    /// (unchecked) until written again (what a user does when the data
    /// changed behind the device's back).
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn deallocate_all(&self) -> Result<(), Error> {
        self.storage.deallocate_all(self.lba, self.blocks)
    }

    /// The LBA format.
    pub fn lba_format(&self) -> LbaFormat {
        self.lba
    }

    /// The PI format, if the namespace has one.
    pub fn protection(&self) -> Option<&Protection> {
        self.protection.as_ref()
    }

    /// Number of logical blocks.
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// Counters since creation.
    pub fn stats(&self) -> DeviceStats {
        DeviceStats {
            write_commands: self.write_commands.load(Ordering::Relaxed),
            data_bytes_written: self.data_bytes_written.load(Ordering::Relaxed),
            medium_bytes_written: self.medium_bytes_written.load(Ordering::Relaxed),
            read_commands: self.read_commands.load(Ordering::Relaxed),
        }
    }

    /// Makes every completed write durable (`fdatasync` of the backing file).
    pub fn flush(&self) -> Result<(), Error> {
        self.storage.flush().map_err(|e| self.io_err("flush", e))
    }

    /// Injects a fault. Bit rot happens now; the others wait for the write
    /// they describe.
    pub fn inject(&self, fault: Fault) -> Result<(), Error> {
        match fault {
            Fault::BitRot { lba, bit } => {
                self.check_range(lba, 1)?;
                let ext = self.lba.extended_bytes() as u64;
                if bit >= ext * 8 {
                    return Err(Error::Invalid {
                        what: "bit rot",
                        detail: format!("bit {bit} is outside the {ext}-byte block"),
                    });
                }
                self.storage.flip_bit(self.lba, lba, bit)?;
            }
            Fault::MisdirectedWrite { lba, to } => {
                self.check_range(lba, 1)?;
                self.check_range(to, 1)?;
                self.push_fault(fault);
            }
            Fault::LostWrite { lba } => {
                self.check_range(lba, 1)?;
                self.push_fault(fault);
            }
        }
        Ok(())
    }

    fn push_fault(&self, fault: Fault) {
        self.faults.lock().unwrap_or_else(|e| e.into_inner()).push(fault);
        self.faults_pending.store(true, Ordering::Release);
    }

    /// Writes `data` (whole blocks) at `lba`. `metadata` is the host's
    /// metadata, `metadata_bytes` per block: required without PRACT on a
    /// PI format (the device checks the PI in it before storing anything),
    /// not accepted with PRACT when the metadata is only the PI tuple.
    pub fn write(&self, lba: u64, data: &[u8], metadata: Option<&[u8]>, io: &Io) -> Result<(), Error> {
        let n = self.command_blocks(lba, data.len())?;
        let md = self.lba.metadata_bytes();
        if let Some(m) = metadata {
            if m.len() != n * md {
                return Err(Error::Invalid {
                    what: "write metadata",
                    detail: format!("{} bytes for {n} blocks of {}; expected {}", m.len(), self.lba, n * md),
                });
            }
        }
        // Data stays in the caller's buffer; metadata beside it (the
        // storage interleaves them if its layout does).
        let mut meta = metadata.map_or_else(|| vec![0u8; n * md], <[u8]>::to_vec);
        match (&self.protection, io.pract) {
            (None, true) => {
                return Err(Error::Invalid { what: "write", detail: "PRACT needs a PI-formatted namespace".into() })
            }
            (None, false) => {}
            (Some(p), true) => {
                if metadata.is_some() && md == p.format().tuple_bytes() {
                    return Err(Error::Invalid {
                        what: "write",
                        detail: format!("with PRACT on {} the device generates all metadata; pass none", self.lba),
                    });
                }
                protect::generate_separate(p, data, &mut meta, &self.tags(p, lba, io))?;
            }
            (Some(p), false) => {
                if metadata.is_none() {
                    return Err(Error::Invalid {
                        what: "write",
                        detail: format!("{} namespace without PRACT needs host metadata with PI", self.lba),
                    });
                }
                self.device_check(p, lba, data, &meta, io)?;
            }
        }
        let tags = self.protection.as_ref().map_or(io.tags, |p| self.tags(p, lba, io));
        self.store(lba, data, &meta, &tags)?;
        self.write_commands.fetch_add(1, Ordering::Relaxed);
        self.data_bytes_written.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    }

    /// Reads whole blocks at `lba` into `data`, and the stored metadata into
    /// `metadata` when given. The device checks the PI first (per
    /// `io.checks`); with PRACT on a format whose metadata is only the
    /// tuple, the PI is stripped and `metadata` must be `None`.
    pub fn read(&self, lba: u64, data: &mut [u8], metadata: Option<&mut [u8]>, io: &Io) -> Result<(), Error> {
        let n = self.command_blocks(lba, data.len())?;
        let md = self.lba.metadata_bytes();
        if let Some(p) = &self.protection {
            if io.pract && metadata.is_some() && md == p.format().tuple_bytes() {
                return Err(Error::Invalid {
                    what: "read",
                    detail: format!("with PRACT on {} the device strips the PI; pass no metadata buffer", self.lba),
                });
            }
        }
        if let Some(m) = &metadata {
            if m.len() != n * md {
                return Err(Error::Invalid {
                    what: "read metadata",
                    detail: format!("{} bytes for {n} blocks of {}; expected {}", m.len(), self.lba, n * md),
                });
            }
        }
        let meta = self.storage.read(self.lba, lba, data)?;
        if let Some(p) = &self.protection {
            self.device_check(p, lba, data, &meta, io)?;
        }
        if let Some(m) = metadata {
            m.copy_from_slice(&meta);
        }
        self.read_commands.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    fn tags(&self, p: &Protection, lba: u64, io: &Io) -> Tags {
        match p.format().pi_type() {
            PiType::Type1 => Tags { ref_tag: lba & p.format().ref_tag_mask(), ..io.tags },
            PiType::Type2 | PiType::Type3 => io.tags,
        }
    }

    /// Checks the PI of blocks starting at `lba`; a failure names the LBA.
    fn device_check(&self, p: &Protection, lba: u64, data: &[u8], metadata: &[u8], io: &Io) -> Result<(), Error> {
        if io.checks == Checks::NONE {
            return Ok(());
        }
        let tags = self.tags(p, lba, io);
        let first = protect::verify_separate_each(p, data, metadata, &tags, io.checks).next();
        match first {
            Some(Ok(mut failure)) => {
                failure.block += lba;
                Err(Error::PiCheck(failure))
            }
            Some(Err(e)) => Err(e),
            None => Ok(()),
        }
    }

    /// Puts blocks on the medium, applying pending misdirected and lost
    /// writes; a split device records the command first (`tags`: its PI's).
    fn store(&self, lba: u64, data: &[u8], metadata: &[u8], tags: &Tags) -> Result<(), Error> {
        let (db, md) = (self.lba.data_bytes(), self.lba.metadata_bytes());
        let n = (data.len() / db) as u64;
        let mut targets: Vec<Option<u64>> = (lba..lba + n).map(Some).collect();
        if self.faults_pending.load(Ordering::Acquire) {
            let mut faults = self.faults.lock().unwrap_or_else(|e| e.into_inner());
            for target in targets.iter_mut() {
                let Some(block) = *target else { continue };
                if let Some(k) = faults.iter().position(|f| match *f {
                    Fault::MisdirectedWrite { lba, .. } | Fault::LostWrite { lba } => lba == block,
                    Fault::BitRot { .. } => false,
                }) {
                    *target = match faults.remove(k) {
                        Fault::MisdirectedWrite { to, .. } => Some(to),
                        _ => None,
                    };
                }
            }
            self.faults_pending.store(!faults.is_empty(), Ordering::Release);
        }
        let mut command = self.storage.command_lock();
        if targets.iter().enumerate().all(|(i, t)| *t == Some(lba + i as u64)) {
            self.storage.mark_written(command.as_deref_mut(), lba, n)?;
            self.storage.set_in_flight(Some((lba, n, tags)))?;
            self.storage.write_raw(self.lba, lba, data, metadata)?;
            self.storage.set_in_flight(None)?;
            self.medium_bytes_written.fetch_add((data.len() + metadata.len()) as u64, Ordering::Relaxed);
            return Ok(());
        }
        for (i, target) in targets.into_iter().enumerate() {
            if let Some(to) = target {
                // A misdirected block carries the PI of where it was meant
                // to go (that is what its reference tag catches).
                self.storage.mark_written(command.as_deref_mut(), to, 1)?;
                self.storage.write_raw(self.lba, to, &data[i * db..][..db], &metadata[i * md..][..md])?;
                self.medium_bytes_written.fetch_add((db + md) as u64, Ordering::Relaxed);
            }
        }
        Ok(())
    }

    fn command_blocks(&self, lba: u64, data_len: usize) -> Result<usize, Error> {
        let db = self.lba.data_bytes();
        if data_len == 0 || !data_len.is_multiple_of(db) || data_len > COMMAND_DATA_BYTES_MAX {
            return Err(Error::Invalid {
                what: "command length",
                detail: format!(
                    "{data_len} bytes; expected whole {db}-byte blocks, 1..={COMMAND_DATA_BYTES_MAX} bytes"
                ),
            });
        }
        let n = data_len / db;
        self.check_range(lba, n as u64)?;
        Ok(n)
    }

    fn check_range(&self, lba: u64, n: u64) -> Result<(), Error> {
        match lba.checked_add(n) {
            Some(end) if end <= self.blocks => Ok(()),
            _ => Err(Error::BadBlockRange { start: lba, len: n, problem: "is outside the namespace" }),
        }
    }

    fn io_err(&self, context: &str, source: std::io::Error) -> Error {
        Error::Io { context: format!("{}: {context}", self.path.display()), source }
    }
}

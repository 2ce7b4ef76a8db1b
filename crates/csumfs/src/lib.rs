//! csumfs: the ext4 on-disk format (`metadata_csum`) served in user space
//! on csumkit's checksum techniques.
//!
//! The crate is built in floors, each importing only those below it:
//!
//! - `format/` — the on-disk format as csumfs writes it: feature bits,
//!   inode fields and flag rules, directory blocks, xattr and ACL encodings
//!   (the structures the checker shares are `csumkit::ext4`);
//! - `store/` — what the volume keeps on media: the image's bytes, the
//!   ByteLog (medium, record codec, writer), the undo log, the data
//!   checksum sidecar, the PI device;
//! - `volume.rs` — opening an image: geometry, refused features, bounded
//!   block access;
//! - `inode/`, `space/`, `file/`, `xattr/`, `dir/` — the operations, each
//!   an `impl Volume` over the floors below;
//! - `txn/` — durability: the operation boundary (`transaction`), every
//!   store to the image, ByteLog commits, syncs and checkpoints, data
//!   checksums, PI offload;
//! - `mount` — the mount recipe (recovery order, companion files);
//! - `fuse` — the FUSE server over all of it.
//!
//! Every metadata checksum is verified as its structure is read, as the
//! kernel verifies it; lookups in indexed directories hash the name and
//! read one leaf; absent-xattr lookups are answered from a per-inode name
//! filter. Errors carry the errno a filesystem call reports.
//!
//! ```no_run
//! use csumfs::{Options, Volume};
//! let volume = Volume::open("disk.img".as_ref(), Options::default())?;
//! let inode = volume.resolve("/etc/hostname")?;
//! let text = volume.read_all(&inode)?;
//! for entry in volume.read_dir(&volume.resolve("/etc")?)? {
//!     println!("{}", String::from_utf8_lossy(&entry.name));
//! }
//! # Ok::<(), csumfs::Error>(())
//! ```

mod dir;
mod error;
mod file;
mod format;
pub mod fuse;
mod inode;
pub mod mount;
mod ranges;
mod space;
mod splice;
mod stats;
mod store;
mod txn;
mod volume;
mod xattr;
pub use csumkit::ext4::hash;

pub use dir::namespace::RenameMode;
pub use dir::read::{DirEntry, SYMLINK_HOPS_MAX};
pub use error::Error;
pub use format::features::{cleanly_unmounted, FC_BYTELOG, LOG_PENDING, UNDO_PENDING};
pub use format::inode::Timespec;
pub use inode::attr::SetAttr;
pub use inode::table::{Inode, NewInode, ROOT};
pub use space::map::Run;
pub use space::reserve::StatFs;
pub use stats::Stats;
pub use store::data_sums::forget_data_checksums;
pub use store::fc_bytelog::fast_commit_area_log;
pub use store::image_lock::ImageLock;
pub use store::journal_replay::JournalReplayed;
pub use store::medium::{
    Backing, LogMedium, SyncHandle, LOG_IN_FAST_COMMIT_AREA, LOG_IN_FAST_COMMIT_AREA_DIRECT,
    LOG_IN_FAST_COMMIT_AREA_MAPPED, LOG_IN_IMAGE_JOURNAL, LOG_ON_DAX, LOG_ON_FILE, LOG_ON_FILE_DIRECT, LOG_ON_TMPFS,
    TAG_LAST, TAG_PART,
};
pub use store::mmp::MultiMountProtection;
pub use store::pi_device::PiOpened;
pub use store::redo_log::resize::LogResize;
pub use store::redo_log::{log_in_fast_commit_area, log_pending, DurableSync, PendingSync, Replayed};
pub use store::undo_log::{undo_pending, undone_image};
pub use txn::datasum::ScrubReport;
pub use txn::journal::{recover, recover_held};
pub use volume::{Caller, Checksums, Options, Volume};
pub use xattr::acl::InheritedAcls;
pub use xattr::write::XattrMode;

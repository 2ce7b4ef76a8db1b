//! csumfs: the ext4 on-disk format (`metadata_csum`) served in user space
//! on csumkit's checksum techniques.
//!
//! This is the read side of the volume: an image is opened with its
//! geometry parsed by `csumkit::ext4::Layout` (the same module the checker
//! uses), features it does not read refused by name, and every metadata
//! structure's checksum verified as it is read — inodes, extent blocks,
//! directory leaf blocks, xattr blocks — as the kernel verifies them.
//! Lookups in indexed directories hash the name (half-MD4, TEA or the
//! legacy hash, signed or unsigned) and read one leaf. Absent-xattr
//! lookups are answered from a per-inode name filter kept in memory.
//! Errors carry the errno a filesystem call reports.
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

mod acl;
mod attr;
mod data;
mod datasum;
mod dir;
mod dir_write;
mod ea_inode;
mod error;
mod extent_tree;
mod extents;
mod format;
pub mod fuse;
mod group_sync;
mod htree;
mod immutable;
mod inline;
mod inode;
mod map;
mod migrate;
mod namespace;
mod orphan;
mod part_write;
mod pi;
mod ranges;
mod redo;
mod remove;
mod reserve;
mod seek;
mod stats;
mod store;
mod undo;
mod volume;
mod write;
mod xattr;
mod xattr_write;
pub use csumkit::ext4::hash;

pub use acl::InheritedAcls;
pub use attr::SetAttr;
pub use datasum::ScrubReport;
pub use dir::{DirEntry, SYMLINK_HOPS_MAX};
pub use error::Error;
pub use format::features::{cleanly_unmounted, LOG_PENDING, UNDO_PENDING};
pub use inode::{Inode, Timespec, ROOT};
pub use map::Run;
pub use namespace::RenameMode;
pub use reserve::StatFs;
pub use stats::Stats;
pub use store::data_sums::forget_data_checksums;
pub use store::image_lock::ImageLock;
pub use store::medium::{
    Backing, LogMedium, SyncHandle, LOG_ON_DAX, LOG_ON_FILE, LOG_ON_FILE_DIRECT, LOG_ON_TMPFS, TAG_LAST, TAG_PART,
};
pub use store::mmp::MultiMountProtection;
pub use store::pi_device::PiOpened;
pub use store::redo_log::resize::LogResize;
pub use store::redo_log::{log_pending, DurableSync, PendingSync, Replayed};
pub use store::undo_log::{undo_pending, undone_image};
pub use volume::{Caller, Checksums, Options, Volume};
pub use write::NewInode;
pub use xattr_write::XattrMode;

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
mod crc_helper;
mod data;
mod datasum;
mod dir;
mod dir_write;
mod ea_inode;
mod error;
mod extent_tree;
mod extents;
pub mod fuse;
mod group_sync;
pub use csumkit::ext4::hash;
mod htree;
mod image_lock;
mod immutable;
mod inline;
mod inode;
mod kernel_mounts;
mod le;
mod log_writer;
mod logged_sums;
mod map;
mod migrate;
mod mmp;
mod namespace;
mod orphan;
mod part_write;
mod pi;
mod private_map;
mod ranges;
mod redo;
mod remove;
mod reserve;
mod seek;
mod stats;
mod undo;
mod volume;
mod write;
mod xattr;
mod xattr_write;

pub use acl::InheritedAcls;
pub use attr::SetAttr;
pub use datasum::{forget_data_checksums, ScrubReport};
pub use dir::{DirEntry, SYMLINK_HOPS_MAX};
pub use error::Error;
pub use image_lock::ImageLock;
pub use inode::{Inode, Timespec, ROOT};
pub use log_writer::SyncHandle;
pub use map::Run;
pub use mmp::MultiMountProtection;
pub use namespace::RenameMode;
pub use pi::PiOpened;
pub use redo::{
    log_pending, Backing, DurableSync, LogMedium, LogResize, PendingSync, Replayed, LOG_ON_DAX, LOG_ON_FILE,
    LOG_ON_FILE_DIRECT, LOG_ON_TMPFS, LOG_PENDING, TAG_LAST, TAG_PART,
};
pub use reserve::Caller;
pub use stats::Stats;
pub use undo::{undo_pending, undone_image, UNDO_PENDING};
pub use volume::{Checksums, Options, StatFs, Volume};
pub use write::{cleanly_unmounted, NewInode};
pub use xattr_write::XattrMode;

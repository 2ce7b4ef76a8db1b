//! The immutable (`chattr +i`) and append-only (`chattr +a`) flags, kept
//! as ext4 and the VFS keep them. A FUSE file system's inodes carry no
//! `S_IMMUTABLE`/`S_APPEND` for the kernel to check, so csumfs refuses
//! with `EPERM` what `may_open`, `may_create`, `may_delete`, `vfs_link`,
//! `notify_change`/`ext4_setattr`, `xattr_permission`, `vfs_fallocate`
//! and `ext4_write_checks` refuse:
//!
//! | on the inode      | immutable            | append-only                          |
//! |-------------------|----------------------|--------------------------------------|
//! | open for writing  | refused              | only with `O_APPEND`, never `O_TRUNC` |
//! | write, fallocate  | refused              | allowed (punch and zero refused)     |
//! | truncate, chmod, chown, set times | refused | refused (times "now" allowed)  |
//! | xattrs, ACLs, a new link | refused       | refused                              |
//! | its name removed or moved | refused      | refused                              |
//! | a directory: names added | refused       | allowed                              |
//! | a directory: names removed | refused     | refused                              |
//!
//! The library refuses them for every caller (the CLI's `ext4 rm` too);
//! who may set or clear the flags (`CAP_LINUX_IMMUTABLE`) is the FUSE
//! layer's question, as it is the VFS's.

use crate::error::Error;
use crate::inode::table::Inode;

pub(crate) use csumkit::ext4::format::{FLAG_APPEND, FLAG_IMMUTABLE};

impl Inode {
    /// `chattr +i`: nothing of it changes, and no name of it.
    #[must_use]
    pub fn is_immutable(&self) -> bool {
        self.flags & FLAG_IMMUTABLE != 0
    }

    /// `chattr +a`: data may only be added at its end.
    #[must_use]
    pub fn is_append_only(&self) -> bool {
        self.flags & FLAG_APPEND != 0
    }

    /// Whether an open with `flags` (`open(2)`'s) is refused: write access
    /// or `O_TRUNC` on an immutable inode; on an append-only one, write
    /// access without `O_APPEND`, or `O_TRUNC` (`may_open`).
    #[must_use]
    pub fn open_refused(&self, flags: i32) -> bool {
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let truncates = flags & libc::O_TRUNC != 0;
        (self.is_immutable() && (writes || truncates))
            || (self.is_append_only() && (truncates || writes && flags & libc::O_APPEND == 0))
    }
}

fn refused(inode: &Inode, what: &str) -> Error {
    let flag = if inode.is_immutable() { "immutable" } else { "append-only" };
    Error::Permission(format!("inode {} is {flag}: {what}", inode.ino))
}

/// Its data written or space allocated (`ext4_write_checks`, `vfs_fallocate`).
pub(crate) fn may_write(inode: &Inode) -> Result<(), Error> {
    if inode.is_immutable() {
        return Err(refused(inode, "no write"));
    }
    Ok(())
}

/// Anything but its data added at the end: size, mode, owner, chosen
/// times, xattrs, a new link, a hole punched or a range zeroed.
pub(crate) fn may_modify(inode: &Inode, what: &str) -> Result<(), Error> {
    if inode.is_immutable() || inode.is_append_only() {
        return Err(refused(inode, what));
    }
    Ok(())
}

/// A name added to directory `dir` (`may_create`).
pub(crate) fn may_add_name(dir: &Inode) -> Result<(), Error> {
    if dir.is_immutable() {
        return Err(refused(dir, "no name added to it"));
    }
    Ok(())
}

/// The name of `victim` removed from (or moved out of) `dir` (`may_delete`).
pub(crate) fn may_remove_name(dir: &Inode, victim: &Inode) -> Result<(), Error> {
    may_modify(dir, "no name removed from it")?;
    may_modify(victim, "its name stays")
}

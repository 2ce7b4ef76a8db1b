//! Extended attributes: reads behind the per-inode name filter, writes to
//! the inode's area, an xattr block or an EA inode, and POSIX ACLs kept in
//! step with the mode.

pub(crate) mod acl;
pub(crate) mod ea_inode;
pub(crate) mod read;
pub(crate) mod write;

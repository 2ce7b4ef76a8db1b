//! The ext4 on-disk format as csumfs writes it, apart from the volume that
//! serves it: feature bits, inode flag rules, directory blocks, xattr and ACL
//! encodings, and little-endian field access. The structures
//! the checker shares (layout, inode flags, checksums) are
//! `csumkit::ext4`.

pub(crate) mod acl;
pub(crate) mod dir_block;
pub(crate) mod features;
pub(crate) mod flags;
pub(crate) mod inode;
pub(crate) mod xattr;

//! Extended attributes on disk: the magic that opens an xattr block and
//! the in-inode area (`EXT4_XATTR_MAGIC`), and where an EA inode keeps its
//! value's hash (`i_atime`, as `ext4_xattr_inode_set_hash` stores it).

/// `EXT4_XATTR_MAGIC`.
pub(crate) const MAGIC: u32 = 0xEA02_0000;
/// `i_atime` of an EA inode: the value's hash.
pub(crate) const EA_INODE_HASH: usize = 0x08;

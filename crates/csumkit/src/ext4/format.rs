//! ext4 inode constants as the kernel's `fs/ext4/ext4.h` names them, one
//! definition for the checker and csumfs: the `i_flags` bits
//! (`EXT4_*_FL`) and the file types of `i_mode`.

/// `EXT4_SYNC_FL` (`chattr +S`): every change is durable before its call returns.
pub const FLAG_SYNC: u32 = 0x8;
/// `EXT4_IMMUTABLE_FL` (`chattr +i`).
pub const FLAG_IMMUTABLE: u32 = 0x10;
/// `EXT4_APPEND_FL` (`chattr +a`).
pub const FLAG_APPEND: u32 = 0x20;
/// `EXT4_ENCRYPT_FL`.
pub const FLAG_ENCRYPT: u32 = 0x800;
/// `EXT4_INDEX_FL`: an htree directory.
pub const FLAG_INDEX: u32 = 0x1000;
/// `EXT4_IMAGIC_FL`.
pub const FLAG_IMAGIC: u32 = 0x2000;
/// `EXT4_JOURNAL_DATA_FL` (`chattr +j`).
pub const FLAG_JOURNAL_DATA: u32 = 0x4000;
/// `EXT4_DIRSYNC_FL` (`chattr +D`).
pub const FLAG_DIRSYNC: u32 = 0x1_0000;
/// `EXT4_HUGE_FILE_FL`: `i_blocks` counts file-system blocks.
pub const FLAG_HUGE_FILE: u32 = 0x4_0000;
/// `EXT4_EXTENTS_FL`.
pub const FLAG_EXTENTS: u32 = 0x8_0000;
/// `EXT4_VERITY_FL`.
pub const FLAG_VERITY: u32 = 0x10_0000;
/// `EXT4_EA_INODE_FL`: the inode holds one large xattr value.
pub const FLAG_EA_INODE: u32 = 0x20_0000;
/// `EXT4_DAX_FL` (`chattr +x`).
pub const FLAG_DAX: u32 = 0x200_0000;
/// `EXT4_INLINE_DATA_FL`.
pub const FLAG_INLINE_DATA: u32 = 0x1000_0000;
/// `EXT4_CASEFOLD_FL`.
pub const FLAG_CASEFOLD: u32 = 0x4000_0000;

/// `S_IFMT`: the file-type bits of `i_mode`.
pub const MODE_TYPE: u16 = 0xF000;
/// A FIFO.
pub const S_IFIFO: u16 = 0x1000;
/// A character device.
pub const S_IFCHR: u16 = 0x2000;
/// A directory.
pub const S_IFDIR: u16 = 0x4000;
/// A block device.
pub const S_IFBLK: u16 = 0x6000;
/// A regular file.
pub const S_IFREG: u16 = 0x8000;
/// A symbolic link.
pub const S_IFLNK: u16 = 0xA000;
/// A socket.
pub const S_IFSOCK: u16 = 0xC000;

//! Inodes: the fields a filesystem call reports, read from the inode table
//! with the inode checksum verified (as the kernel's `ext4_iget` does).

use crate::error::{corrupt, Error};
use crate::format::inode::{extra_fields_end, Timespec};
use crate::volume::Volume;
use csumkit::ext4::checksum;
use csumkit::ext4::feature_bits::INCOMPAT_64BIT;
use csumkit::ext4::fields::{
    I_ATIME, I_ATIME_EXTRA, I_BLOCK, I_BLOCKS_HIGH, I_BLOCKS_LO, I_CRTIME, I_CRTIME_EXTRA, I_CTIME, I_CTIME_EXTRA,
    I_EXTRA_ISIZE, I_FILE_ACL_HIGH, I_FILE_ACL_LO, I_FLAGS, I_GENERATION, I_GID, I_GID_HIGH, I_LINKS_COUNT, I_MODE,
    I_MTIME, I_MTIME_EXTRA, I_SIZE_HIGH, I_SIZE_LO, I_UID, I_UID_HIGH,
};
use csumkit::le::{le16, le32};

/// `i_flags` bits this code looks at.
pub(crate) use csumkit::ext4::format::{FLAG_EA_INODE, FLAG_EXTENTS, FLAG_INDEX, FLAG_INLINE_DATA};

/// The root directory's inode number.
pub const ROOT: u32 = 2;

/// What a new inode is.
#[derive(Clone, Copy, Debug)]
pub struct NewInode {
    /// Type and permission bits.
    pub mode: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
}

/// One inode as read from the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inode {
    /// Its number.
    pub ino: u32,
    /// Type and permission bits.
    pub mode: u16,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Hard links.
    pub links: u16,
    /// `i_flags`.
    pub flags: u32,
    /// Last access.
    pub atime: Timespec,
    /// Last change of the data.
    pub mtime: Timespec,
    /// Last change of the inode.
    pub ctime: Timespec,
    /// Creation (zero where the inode has no room for it).
    pub crtime: Timespec,
    /// `i_generation`.
    pub generation: u32,
    /// External xattr block (0: none).
    pub file_acl: u64,
    /// 512-byte sectors (or blocks with `huge_file`'s flag) allocated.
    pub blocks: u64,
    /// Device number of a character or block device.
    pub rdev: u32,
    /// `i_block`: extent root, block map, inline data or fast symlink.
    pub i_block: [u8; 60],
    /// The raw inode (`s_inode_size` bytes): in-inode xattrs live after
    /// `i_extra_isize`.
    pub raw: Vec<u8>,
    /// Seed of this inode's checksums: CRC of the number and generation.
    pub csum_seed: u32,
}

impl Inode {
    /// The file type bits (`S_IFMT`).
    pub fn file_type(&self) -> u16 {
        self.mode & 0o170_000
    }

    /// A directory.
    pub fn is_dir(&self) -> bool {
        self.file_type() == 0o040_000
    }

    /// A regular file.
    pub fn is_file(&self) -> bool {
        self.file_type() == 0o100_000
    }

    /// A symbolic link.
    pub fn is_symlink(&self) -> bool {
        self.file_type() == 0o120_000
    }

    /// A symbolic link whose target lives in `i_block` (under 60 bytes),
    /// whatever else it has — an xattr block makes `i_blocks` non-zero —
    /// as the kernel's `ext4_inode_is_fast_symlink` decides.
    pub fn is_fast_symlink(&self) -> bool {
        self.is_symlink() && self.size < 60 && self.flags & FLAG_INLINE_DATA == 0
    }

    /// `i_extra_isize` as stored (0 for 128-byte inodes): where in-inode
    /// xattrs begin.
    pub(crate) fn extra_isize(&self) -> usize {
        if self.raw.len() > 128 {
            usize::from(le16(&self.raw, I_EXTRA_ISIZE))
        } else {
            0
        }
    }
}

impl Volume {
    /// Inode `ino`, its checksum verified.
    ///
    /// # Errors
    /// [`Error::NotFound`] for a number outside the table or an inode not
    /// in use (links 0 and no mode); [`Error::Checksum`] for a wrong
    /// checksum; [`Error::Corrupt`] for a table outside the image.
    pub fn inode(&self, ino: u32) -> Result<Inode, Error> {
        let l = &self.layout;
        if ino == 0 || u64::from(ino) > l.inodes_count {
            return Err(Error::NotFound(format!("inode {ino}")));
        }
        let (group, index) = l.inode_group(u64::from(ino));
        let g = l.group(&self.map, group)?;
        if g.inode_uninit() {
            return Err(Error::NotFound(format!("inode {ino} (uninitialised group {group})")));
        }
        let at = g.inode_table.saturating_mul(l.block_size).saturating_add(index * l.inode_size);
        let raw = self.bytes(at, l.inode_size as usize, &|| format!("inode {ino}"))?;
        let seed = checksum::inode_seed(l.csum_seed, ino, raw);
        let (stored, computed) = checksum::inode_checksum(raw, seed);
        self.verify(&|| format!("inode {ino}"), stored, computed)?;
        self.inode_from(ino, raw.to_vec(), seed)
    }

    /// Inode `ino` from its raw bytes, whose checksum was verified or just
    /// computed by the writer (as the kernel keeps an inode in memory once
    /// `ext4_iget` verified it, rather than reading it back).
    pub(crate) fn inode_from(&self, ino: u32, bytes: Vec<u8>, seed: u32) -> Result<Inode, Error> {
        let l = &self.layout;
        let raw = &bytes[..];
        let hi = |lo: usize, hi: usize| u32::from(le16(raw, lo)) | u32::from(le16(raw, hi)) << 16;
        let extra = if raw.len() > 128 { usize::from(le16(raw, I_EXTRA_ISIZE)) } else { 0 };
        if raw.len() > 128 && extra > raw.len() - 128 {
            return Err(corrupt(format!("inode {ino}"), format!("i_extra_isize {extra} overruns the inode")));
        }
        let fields_end = extra_fields_end(raw);
        let time = |base: usize, extra_at: usize| {
            let sec = i64::from(le32(raw, base) as i32);
            if fields_end >= extra_at + 4 {
                let e = le32(raw, extra_at);
                Timespec { sec: sec + (i64::from(e & 3) << 32), nsec: e >> 2 }
            } else {
                Timespec { sec, nsec: 0 }
            }
        };
        let crtime = if fields_end >= I_CRTIME + 4 { time(I_CRTIME, I_CRTIME_EXTRA) } else { Timespec::default() };
        let mut i_block = [0u8; 60];
        i_block.copy_from_slice(&raw[I_BLOCK..I_BLOCK + 60]);
        let wide_acl = l.features.incompat & INCOMPAT_64BIT != 0;
        let mode = le16(raw, I_MODE);
        let is_dev = matches!(mode & 0o170_000, 0o020_000 | 0o060_000);
        let rdev = if is_dev {
            match le32(raw, I_BLOCK) {
                0 => le32(raw, I_BLOCK + 4), // new encoding in i_block[1]
                old => old,
            }
        } else {
            0
        };
        let inode = Inode {
            ino,
            mode,
            uid: hi(I_UID, I_UID_HIGH),
            gid: hi(I_GID, I_GID_HIGH),
            size: u64::from(le32(raw, I_SIZE_LO)) | u64::from(le32(raw, I_SIZE_HIGH)) << 32,
            links: le16(raw, I_LINKS_COUNT),
            flags: le32(raw, I_FLAGS),
            atime: time(I_ATIME, I_ATIME_EXTRA),
            ctime: time(I_CTIME, I_CTIME_EXTRA),
            mtime: time(I_MTIME, I_MTIME_EXTRA),
            crtime,
            generation: le32(raw, I_GENERATION),
            file_acl: u64::from(le32(raw, I_FILE_ACL_LO))
                | if wide_acl { u64::from(le16(raw, I_FILE_ACL_HIGH)) << 32 } else { 0 },
            blocks: u64::from(le32(raw, I_BLOCKS_LO)) | u64::from(le16(raw, I_BLOCKS_HIGH)) << 32,
            rdev,
            i_block,
            raw: bytes,
            csum_seed: seed,
        };
        if inode.mode == 0 && inode.links == 0 {
            return Err(Error::NotFound(format!("inode {ino} (not in use)")));
        }
        Ok(inode)
    }
}

//! The superblock's feature bits (`s_feature_compat`, `_ro_compat`,
//! `_incompat`), named as e2fsprogs' `ext2_fs.h` names them without its
//! `EXT4_FEATURE_` prefix: one definition for the checker and csumfs.

/// `dir_prealloc`.
pub const COMPAT_DIR_PREALLOC: u32 = 0x1;
/// `imagic_inodes`.
pub const COMPAT_IMAGIC_INODES: u32 = 0x2;
/// `has_journal`.
pub const COMPAT_HAS_JOURNAL: u32 = 0x4;
/// `ext_attr`.
pub const COMPAT_EXT_ATTR: u32 = 0x8;
/// `resize_inode`.
pub const COMPAT_RESIZE_INODE: u32 = 0x10;
/// `dir_index`.
pub const COMPAT_DIR_INDEX: u32 = 0x20;
/// `sparse_super2`.
pub const COMPAT_SPARSE_SUPER2: u32 = 0x200;
/// `fast_commit`.
pub const COMPAT_FAST_COMMIT: u32 = 0x400;
/// `stable_inodes`.
pub const COMPAT_STABLE_INODES: u32 = 0x800;
/// `orphan_file`.
pub const COMPAT_ORPHAN_FILE: u32 = 0x1000;

/// `sparse_super`.
pub const RO_COMPAT_SPARSE_SUPER: u32 = 0x1;
/// `large_file`.
pub const RO_COMPAT_LARGE_FILE: u32 = 0x2;
/// `huge_file`.
pub const RO_COMPAT_HUGE_FILE: u32 = 0x8;
/// `gdt_csum`.
pub const RO_COMPAT_GDT_CSUM: u32 = 0x10;
/// `dir_nlink`.
pub const RO_COMPAT_DIR_NLINK: u32 = 0x20;
/// `extra_isize`.
pub const RO_COMPAT_EXTRA_ISIZE: u32 = 0x40;
/// `quota`.
pub const RO_COMPAT_QUOTA: u32 = 0x100;
/// `bigalloc`.
pub const RO_COMPAT_BIGALLOC: u32 = 0x200;
/// `metadata_csum`.
pub const RO_COMPAT_METADATA_CSUM: u32 = 0x400;
/// `read-only`.
pub const RO_COMPAT_READONLY: u32 = 0x1000;
/// `project`.
pub const RO_COMPAT_PROJECT: u32 = 0x2000;
/// `shared_blocks`.
pub const RO_COMPAT_SHARED_BLOCKS: u32 = 0x4000;
/// `verity`.
pub const RO_COMPAT_VERITY: u32 = 0x8000;
/// `orphan_present`: the orphan file may hold entries.
pub const RO_COMPAT_ORPHAN_PRESENT: u32 = 0x1_0000;

/// `compression`.
pub const INCOMPAT_COMPRESSION: u32 = 0x1;
/// `filetype`.
pub const INCOMPAT_FILETYPE: u32 = 0x2;
/// `needs_recovery`: the journal holds transactions not yet replayed.
pub const INCOMPAT_RECOVER: u32 = 0x4;
/// `journal_dev`: the journal is on another device.
pub const INCOMPAT_JOURNAL_DEV: u32 = 0x8;
/// `meta_bg`.
pub const INCOMPAT_META_BG: u32 = 0x10;
/// `extent`.
pub const INCOMPAT_EXTENTS: u32 = 0x40;
/// `64bit`: 64-bit block numbers.
pub const INCOMPAT_64BIT: u32 = 0x80;
/// `mmp`: multiple-mount protection.
pub const INCOMPAT_MMP: u32 = 0x100;
/// `flex_bg`.
pub const INCOMPAT_FLEX_BG: u32 = 0x200;
/// `ea_inode`: large xattr values in inodes of their own.
pub const INCOMPAT_EA_INODE: u32 = 0x400;
/// `dirdata`.
pub const INCOMPAT_DIRDATA: u32 = 0x1000;
/// `metadata_csum_seed`.
pub const INCOMPAT_CSUM_SEED: u32 = 0x2000;
/// `large_dir`: directories over 2 GiB and htrees of 3 index levels.
pub const INCOMPAT_LARGEDIR: u32 = 0x4000;
/// `inline_data`.
pub const INCOMPAT_INLINE_DATA: u32 = 0x8000;
/// `encrypt`.
pub const INCOMPAT_ENCRYPT: u32 = 0x1_0000;
/// `casefold`.
pub const INCOMPAT_CASEFOLD: u32 = 0x2_0000;

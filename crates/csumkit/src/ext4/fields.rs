//! Byte offsets of the ext4 on-disk fields csumkit and csumfs read and
//! write, named as `fs/ext4/ext4.h` and e2fsprogs' `ext2_fs.h` name them:
//! one definition for the checker and csumfs. Each table is a byte map of
//! its structure (offsets in hex, widths in the comments).

// struct ext4_inode
//
//   0x00 i_mode u16          0x02 i_uid u16           0x04 i_size_lo u32
//   0x08 i_atime u32         0x0C i_ctime u32         0x10 i_mtime u32
//   0x14 i_dtime u32         0x18 i_gid u16           0x1A i_links_count u16
//   0x1C i_blocks_lo u32     0x20 i_flags u32         0x24 l_i_version u32
//   0x28 i_block[60]         0x64 i_generation u32    0x68 i_file_acl_lo u32
//   0x6C i_size_high u32     0x70 i_obso_faddr u32    0x74 l_i_blocks_high u16
//   0x76 l_i_file_acl_high u16  0x78 l_i_uid_high u16  0x7A l_i_gid_high u16
//   0x7C l_i_checksum_lo u16 0x7E l_i_reserved u16    0x80 i_extra_isize u16
//   0x82 i_checksum_hi u16   0x84 i_ctime_extra u32   0x88 i_mtime_extra u32
//   0x8C i_atime_extra u32   0x90 i_crtime u32        0x94 i_crtime_extra u32
//   0x98 i_version_hi u32    0x9C i_projid u32

/// `i_mode` (u16).
pub const I_MODE: usize = 0x00;
/// `i_uid` (u16, low half).
pub const I_UID: usize = 0x02;
/// `i_size_lo` (u32).
pub const I_SIZE_LO: usize = 0x04;
/// `i_atime` (u32).
pub const I_ATIME: usize = 0x08;
/// `i_ctime` (u32).
pub const I_CTIME: usize = 0x0C;
/// `i_mtime` (u32).
pub const I_MTIME: usize = 0x10;
/// `i_dtime` (u32): the deletion time, or the next orphan's number.
pub const I_DTIME: usize = 0x14;
/// `i_gid` (u16, low half).
pub const I_GID: usize = 0x18;
/// `i_links_count` (u16).
pub const I_LINKS_COUNT: usize = 0x1A;
/// `i_blocks_lo` (u32).
pub const I_BLOCKS_LO: usize = 0x1C;
/// `i_flags` (u32).
pub const I_FLAGS: usize = 0x20;
/// `osd1.linux1.l_i_version` (u32).
pub const I_VERSION: usize = 0x24;
/// `i_block` (60 bytes: the extent root, block map, inline data or fast symlink).
pub const I_BLOCK: usize = 0x28;
/// `i_generation` (u32).
pub const I_GENERATION: usize = 0x64;
/// `i_file_acl_lo` (u32).
pub const I_FILE_ACL_LO: usize = 0x68;
/// `i_size_high` (u32).
pub const I_SIZE_HIGH: usize = 0x6C;
/// `osd2.linux2.l_i_blocks_high` (u16).
pub const I_BLOCKS_HIGH: usize = 0x74;
/// `osd2.linux2.l_i_file_acl_high` (u16).
pub const I_FILE_ACL_HIGH: usize = 0x76;
/// `osd2.linux2.l_i_uid_high` (u16).
pub const I_UID_HIGH: usize = 0x78;
/// `osd2.linux2.l_i_gid_high` (u16).
pub const I_GID_HIGH: usize = 0x7A;
/// `i_extra_isize` (u16).
pub const I_EXTRA_ISIZE: usize = 0x80;
/// `i_ctime_extra` (u32).
pub const I_CTIME_EXTRA: usize = 0x84;
/// `i_mtime_extra` (u32).
pub const I_MTIME_EXTRA: usize = 0x88;
/// `i_atime_extra` (u32).
pub const I_ATIME_EXTRA: usize = 0x8C;
/// `i_crtime` (u32).
pub const I_CRTIME: usize = 0x90;
/// `i_crtime_extra` (u32).
pub const I_CRTIME_EXTRA: usize = 0x94;

// struct ext4_group_desc (64 bytes with 64bit; the first 32 without)
//
//   0x00 bg_block_bitmap_lo u32   0x04 bg_inode_bitmap_lo u32
//   0x08 bg_inode_table_lo u32    0x0C bg_free_blocks_count_lo u16
//   0x0E bg_free_inodes_count_lo u16  0x10 bg_used_dirs_count_lo u16
//   0x12 bg_flags u16             0x14 bg_exclude_bitmap_lo u32
//   0x18 bg_block_bitmap_csum_lo u16  0x1A bg_inode_bitmap_csum_lo u16
//   0x1C bg_itable_unused_lo u16  0x1E bg_checksum u16
//   0x20 bg_block_bitmap_hi u32   0x24 bg_inode_bitmap_hi u32
//   0x28 bg_inode_table_hi u32    0x2C bg_free_blocks_count_hi u16
//   0x2E bg_free_inodes_count_hi u16  0x30 bg_used_dirs_count_hi u16
//   0x32 bg_itable_unused_hi u16  0x34 bg_exclude_bitmap_hi u32
//   0x38 bg_block_bitmap_csum_hi u16  0x3A bg_inode_bitmap_csum_hi u16

/// `bg_block_bitmap_lo` (u32).
pub const BG_BLOCK_BITMAP_LO: usize = 0x00;
/// `bg_inode_bitmap_lo` (u32).
pub const BG_INODE_BITMAP_LO: usize = 0x04;
/// `bg_inode_table_lo` (u32).
pub const BG_INODE_TABLE_LO: usize = 0x08;
/// `bg_free_blocks_count_lo` (u16).
pub const BG_FREE_BLOCKS_LO: usize = 0x0C;
/// `bg_free_inodes_count_lo` (u16).
pub const BG_FREE_INODES_LO: usize = 0x0E;
/// `bg_used_dirs_count_lo` (u16).
pub const BG_USED_DIRS_LO: usize = 0x10;
/// `bg_flags` (u16).
pub const BG_FLAGS: usize = 0x12;
/// `bg_block_bitmap_csum_lo` (u16).
pub const BG_BLOCK_BITMAP_CSUM_LO: usize = 0x18;
/// `bg_inode_bitmap_csum_lo` (u16).
pub const BG_INODE_BITMAP_CSUM_LO: usize = 0x1A;
/// `bg_itable_unused_lo` (u16).
pub const BG_ITABLE_UNUSED_LO: usize = 0x1C;
/// `bg_checksum` (u16).
pub const BG_CHECKSUM: usize = 0x1E;
/// `bg_block_bitmap_hi` (u32).
pub const BG_BLOCK_BITMAP_HI: usize = 0x20;
/// `bg_inode_bitmap_hi` (u32).
pub const BG_INODE_BITMAP_HI: usize = 0x24;
/// `bg_inode_table_hi` (u32).
pub const BG_INODE_TABLE_HI: usize = 0x28;
/// `bg_free_blocks_count_hi` (u16).
pub const BG_FREE_BLOCKS_HI: usize = 0x2C;
/// `bg_free_inodes_count_hi` (u16).
pub const BG_FREE_INODES_HI: usize = 0x2E;
/// `bg_used_dirs_count_hi` (u16).
pub const BG_USED_DIRS_HI: usize = 0x30;
/// `bg_itable_unused_hi` (u16).
pub const BG_ITABLE_UNUSED_HI: usize = 0x32;
/// `bg_block_bitmap_csum_hi` (u16).
pub const BG_BLOCK_BITMAP_CSUM_HI: usize = 0x38;
/// `bg_inode_bitmap_csum_hi` (u16).
pub const BG_INODE_BITMAP_CSUM_HI: usize = 0x3A;

// struct ext4_super_block (at byte 1024 of the image), the fields read here
//
//   0x00 s_inodes_count u32          0x04 s_blocks_count_lo u32
//   0x0C s_free_blocks_count_lo u32  0x10 s_free_inodes_count u32
//   0x14 s_first_data_block u32      0x18 s_log_block_size u32
//   0x1C s_log_cluster_size u32      0x20 s_blocks_per_group u32
//   0x24 s_clusters_per_group u32    0x28 s_inodes_per_group u32
//   0x38 s_magic u16                 0x3A s_state u16
//   0x54 s_first_ino u32             0x58 s_inode_size u16
//   0x5C s_feature_compat u32        0x60 s_feature_incompat u32
//   0x64 s_feature_ro_compat u32     0x68 s_uuid[16]
//   0xCE s_reserved_gdt_blocks u16   0xE0 s_journal_inum u32
//   0xE8 s_last_orphan u32
//   0xFE s_desc_size u16             0x104 s_first_meta_bg u32
//   0x150 s_blocks_count_hi u32      0x158 s_free_blocks_count_hi u32
//   0x168 s_mmp_block u64            0x24C s_backup_bgs[2] u32
//   0x270 s_checksum_seed u32        0x280 s_orphan_file_inum u32
//   0x3FC s_checksum u32

/// `s_inodes_count` (u32).
pub const S_INODES_COUNT: usize = 0x00;
/// `s_blocks_count_lo` (u32).
pub const S_BLOCKS_COUNT_LO: usize = 0x04;
/// `s_first_data_block` (u32).
pub const S_FIRST_DATA_BLOCK: usize = 0x14;
/// `s_log_block_size` (u32): the block size is 1024 << it.
pub const S_LOG_BLOCK_SIZE: usize = 0x18;
/// `s_log_cluster_size` (u32).
pub const S_LOG_CLUSTER_SIZE: usize = 0x1C;
/// `s_blocks_per_group` (u32).
pub const S_BLOCKS_PER_GROUP: usize = 0x20;
/// `s_clusters_per_group` (u32).
pub const S_CLUSTERS_PER_GROUP: usize = 0x24;
/// `s_inodes_per_group` (u32).
pub const S_INODES_PER_GROUP: usize = 0x28;
/// `s_magic` (u16): 0xEF53.
pub const S_MAGIC: usize = 0x38;
/// `s_inode_size` (u16).
pub const S_INODE_SIZE: usize = 0x58;
/// `s_feature_compat` (u32).
pub const S_FEATURE_COMPAT: usize = 0x5C;
/// `s_feature_ro_compat` (u32).
pub const S_FEATURE_RO_COMPAT: usize = 0x64;
/// `s_uuid` (16 bytes).
pub const S_UUID: usize = 0x68;
/// `s_reserved_gdt_blocks` (u16).
pub const S_RESERVED_GDT_BLOCKS: usize = 0xCE;
/// `s_journal_inum` (u32).
pub const S_JOURNAL_INUM: usize = 0xE0;
/// `s_last_orphan` (u32): the head of the orphan chain.
pub const S_LAST_ORPHAN: usize = 0xE8;
/// `s_desc_size` (u16).
pub const S_DESC_SIZE: usize = 0xFE;
/// `s_first_meta_bg` (u32).
pub const S_FIRST_META_BG: usize = 0x104;
/// `s_blocks_count_hi` (u32).
pub const S_BLOCKS_COUNT_HI: usize = 0x150;
/// `s_mmp_block` (u64).
pub const S_MMP_BLOCK: usize = 0x168;
/// `s_backup_bgs` (two u32).
pub const S_BACKUP_BGS: usize = 0x24C;
/// `s_checksum_seed` (u32).
pub const S_CHECKSUM_SEED: usize = 0x270;
/// `s_orphan_file_inum` (u32).
pub const S_ORPHAN_FILE_INUM: usize = 0x280;

/// `s_free_blocks_count_lo` (u32).
pub const S_FREE_BLOCKS_LO: usize = 0x0C;
/// `s_free_inodes_count` (u32).
pub const S_FREE_INODES: usize = 0x10;
/// `s_state` (u16): `EXT2_VALID_FS` 0x1, `EXT2_ERROR_FS` 0x2.
pub const S_STATE: usize = 0x3A;
/// `s_r_blocks_count_lo` (u32): the reserved blocks.
pub const S_R_BLOCKS_COUNT_LO: usize = 0x08;
/// `s_def_resuid` (u16): who may use the reserved blocks.
pub const S_DEF_RESUID: usize = 0x50;
/// `s_def_resgid` (u16).
pub const S_DEF_RESGID: usize = 0x52;
/// `s_first_ino` (u32).
pub const S_FIRST_INO: usize = 0x54;
/// `s_feature_incompat` (u32).
pub const S_FEATURE_INCOMPAT: usize = 0x60;
/// `s_free_blocks_count_hi` (u32).
pub const S_FREE_BLOCKS_HI: usize = 0x158;
/// `s_r_blocks_count_hi` (u32).
pub const S_R_BLOCKS_COUNT_HI: usize = 0x154;
/// `s_flags` (u32): signed or unsigned directory hashes.
pub const S_FLAGS: usize = 0x160;
/// `s_hash_seed` (4 × u32).
pub const S_HASH_SEED: usize = 0xEC;
/// `s_overhead_clusters` (u32).
pub const S_OVERHEAD_CLUSTERS: usize = 0x248;
/// `s_mmp_update_interval` (u16, seconds).
pub const S_MMP_UPDATE_INTERVAL: usize = 0x166;
/// `s_checksum` (u32): CRC32C of the 1020 bytes before it.
pub const S_CHECKSUM: usize = 0x3FC;

// struct ext4_extent_header, then 12-byte entries: ext4_extent in a leaf
// (depth 0), ext4_extent_idx above; a block's tail holds its checksum
//
//   header: 0x00 eh_magic u16   0x02 eh_entries u16   0x04 eh_max u16
//           0x06 eh_depth u16   0x08 eh_generation u32
//   extent: 0x00 ee_block u32   0x04 ee_len u16   0x06 ee_start_hi u16   0x08 ee_start_lo u32
//   index:  0x00 ei_block u32   0x04 ei_leaf_lo u32   0x08 ei_leaf_hi u16

/// `EXT4_EXT_MAGIC`.
pub const EXT_MAGIC: u16 = 0xF30A;
/// Bytes of the header and of each entry.
pub const EXT_ENTRY_BYTES: usize = 12;
/// `eh_magic` (u16).
pub const EH_MAGIC: usize = 0x00;
/// `eh_entries` (u16).
pub const EH_ENTRIES: usize = 0x02;
/// `eh_max` (u16).
pub const EH_MAX: usize = 0x04;
/// `eh_depth` (u16).
pub const EH_DEPTH: usize = 0x06;
/// `ee_block` (u32): the first logical block.
pub const EE_BLOCK: usize = 0x00;
/// `ee_len` (u16): over 32 768 for an unwritten extent.
pub const EE_LEN: usize = 0x04;
/// `ee_start_hi` (u16).
pub const EE_START_HI: usize = 0x06;
/// `ee_start_lo` (u32).
pub const EE_START_LO: usize = 0x08;
/// `ei_block` (u32).
pub const EI_BLOCK: usize = 0x00;
/// `ei_leaf_lo` (u32).
pub const EI_LEAF_LO: usize = 0x04;
/// `ei_leaf_hi` (u16).
pub const EI_LEAF_HI: usize = 0x08;

// struct dx_root (an htree's first block): its `.` and `..` entries, then
//
//   0x18 dx_root_info.reserved_zero u32   0x1C hash_version u8
//   0x1D info_length u8 (8)               0x1E indirect_levels u8
//   0x1F unused_flags u8                  0x20 limit u16, count u16, block u32, entries

/// `dx_root_info.reserved_zero` (u32).
pub const DX_ROOT_RESERVED_ZERO: usize = 0x18;
/// `dx_root_info.hash_version` (u8).
pub const DX_ROOT_HASH_VERSION: usize = 0x1C;
/// `dx_root_info.info_length` (u8): 8, the info's own size.
pub const DX_ROOT_INFO_LENGTH: usize = 0x1D;
/// `dx_root_info.indirect_levels` (u8).
pub const DX_ROOT_INDIRECT_LEVELS: usize = 0x1E;
/// `dx_root_info.unused_flags` (u8).
pub const DX_ROOT_UNUSED_FLAGS: usize = 0x1F;

// struct ext4_xattr_header (an xattr block's first 32 bytes)
//
//   0x00 h_magic u32   0x04 h_refcount u32   0x08 h_blocks u32
//   0x0C h_hash u32    0x10 h_checksum u32   0x14 h_reserved[3]

/// `h_refcount` (u32).
pub const XATTR_H_REFCOUNT: usize = 0x04;
/// `h_hash` (u32).
pub const XATTR_H_HASH: usize = 0x0C;
/// `h_checksum` (u32).
pub const XATTR_H_CHECKSUM: usize = 0x10;

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets against the byte maps above: each field ends where the
    /// next begins.
    #[test]
    fn fields_follow_one_another_as_the_structures_lay_them_out() {
        let inode = [
            (I_MODE, 2),
            (I_UID, 2),
            (I_SIZE_LO, 4),
            (I_ATIME, 4),
            (I_CTIME, 4),
            (I_MTIME, 4),
            (I_DTIME, 4),
            (I_GID, 2),
            (I_LINKS_COUNT, 2),
            (I_BLOCKS_LO, 4),
            (I_FLAGS, 4),
            (I_VERSION, 4),
            (I_BLOCK, 60),
            (I_GENERATION, 4),
            (I_FILE_ACL_LO, 4),
            (I_SIZE_HIGH, 4),
        ];
        for pair in inode.windows(2) {
            assert_eq!(pair[0].0 + pair[0].1, pair[1].0, "{:#x}", pair[1].0);
        }
        let osd2 = [(I_BLOCKS_HIGH, 2), (I_FILE_ACL_HIGH, 2), (I_UID_HIGH, 2), (I_GID_HIGH, 2)];
        for pair in osd2.windows(2) {
            assert_eq!(pair[0].0 + pair[0].1, pair[1].0);
        }
        let extra = [(I_CTIME_EXTRA, 4), (I_MTIME_EXTRA, 4), (I_ATIME_EXTRA, 4), (I_CRTIME, 4), (I_CRTIME_EXTRA, 4)];
        for pair in extra.windows(2) {
            assert_eq!(pair[0].0 + pair[0].1, pair[1].0);
        }
        assert_eq!(I_EXTRA_ISIZE + 4, I_CTIME_EXTRA, "i_extra_isize, then i_checksum_hi");
        assert_eq!(BG_FREE_BLOCKS_LO + 2, BG_FREE_INODES_LO);
        assert_eq!(BG_FREE_BLOCKS_HI + 2, BG_FREE_INODES_HI);
        assert_eq!(BG_FREE_BLOCKS_LO + 0x20, BG_FREE_BLOCKS_HI, "each _hi half 32 bytes past its _lo");
        assert_eq!(BG_USED_DIRS_LO + 0x20, BG_USED_DIRS_HI);
        assert_eq!(BG_ITABLE_UNUSED_LO + 0x16, BG_ITABLE_UNUSED_HI);
        assert_eq!(BG_BLOCK_BITMAP_CSUM_LO + 0x20, BG_BLOCK_BITMAP_CSUM_HI);
        assert_eq!(BG_INODE_BITMAP_CSUM_LO + 0x20, BG_INODE_BITMAP_CSUM_HI);
        assert_eq!(S_CHECKSUM + 4, 1024);
    }
}

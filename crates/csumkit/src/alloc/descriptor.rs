//! The 64-byte ext4 group descriptor (`struct ext4_group_desc` with the
//! 64bit feature), kept as its on-media little-endian bytes.
//!
//! | offset | size | field                         |
//! |-------:|-----:|-------------------------------|
//! | 0x00   | 4    | `bg_block_bitmap_lo`          |
//! | 0x0C   | 2    | `bg_free_blocks_count_lo`     |
//! | 0x12   | 2    | `bg_flags`                    |
//! | 0x18   | 2    | `bg_block_bitmap_csum_lo`     |
//! | 0x1E   | 2    | `bg_checksum`                 |
//! | 0x20   | 4    | `bg_block_bitmap_hi`          |
//! | 0x2C   | 2    | `bg_free_blocks_count_hi`     |
//! | 0x38   | 2    | `bg_block_bitmap_csum_hi`     |
//!
//! The other fields (inode bitmap and table, inode counts) are carried but
//! not used by the block allocator. `bg_checksum` is ext4's metadata_csum
//! rule: the low 16 bits of the raw CRC32C, seeded with the volume seed,
//! over the little-endian group number and the descriptor with the checksum
//! field read as zero.

use crate::ext4::fields::{
    BG_BLOCK_BITMAP_CSUM_HI, BG_BLOCK_BITMAP_CSUM_LO, BG_BLOCK_BITMAP_HI, BG_BLOCK_BITMAP_LO, BG_CHECKSUM, BG_FLAGS,
    BG_FREE_BLOCKS_HI, BG_FREE_BLOCKS_LO,
};

/// Descriptor size on media.
pub const DESC_SIZE: usize = 64;

/// `EXT4_BG_BLOCK_UNINIT`: the block bitmap is not initialized on media.
/// Cleared the first time the group is allocated from.
pub const BG_BLOCK_UNINIT: u16 = 0x0002;

/// One group descriptor.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Descriptor {
    bytes: [u8; DESC_SIZE],
}

impl Descriptor {
    /// A descriptor with the given bitmap location; all else zero.
    pub fn new(block_bitmap: u64) -> Self {
        let mut desc = Descriptor { bytes: [0; DESC_SIZE] };
        desc.put32(BG_BLOCK_BITMAP_LO, block_bitmap as u32);
        desc.put32(BG_BLOCK_BITMAP_HI, (block_bitmap >> 32) as u32);
        desc
    }

    /// A descriptor from its on-media bytes.
    pub fn from_media(bytes: [u8; DESC_SIZE]) -> Self {
        Descriptor { bytes }
    }

    /// The on-media bytes.
    pub fn as_media(&self) -> &[u8; DESC_SIZE] {
        &self.bytes
    }

    /// Block number of the group's block bitmap.
    pub fn block_bitmap(&self) -> u64 {
        u64::from(self.get32(BG_BLOCK_BITMAP_LO)) | u64::from(self.get32(BG_BLOCK_BITMAP_HI)) << 32
    }

    fn get32(&self, at: usize) -> u32 {
        u32::from_le_bytes(self.bytes[at..at + 4].try_into().expect("4 bytes"))
    }

    fn get16(&self, at: usize) -> u16 {
        u16::from_le_bytes([self.bytes[at], self.bytes[at + 1]])
    }

    fn put16(&mut self, at: usize, value: u16) {
        self.bytes[at..at + 2].copy_from_slice(&value.to_le_bytes());
    }

    fn put32(&mut self, at: usize, value: u32) {
        self.bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// Free blocks in the group (lo and hi halves).
    pub fn free_blocks(&self) -> u32 {
        u32::from(self.get16(BG_FREE_BLOCKS_LO)) | u32::from(self.get16(BG_FREE_BLOCKS_HI)) << 16
    }

    /// Sets the free-blocks count.
    pub fn set_free_blocks(&mut self, free: u32) {
        self.put16(BG_FREE_BLOCKS_LO, free as u16);
        self.put16(BG_FREE_BLOCKS_HI, (free >> 16) as u16);
    }

    /// `bg_flags`.
    pub fn flags(&self) -> u16 {
        self.get16(BG_FLAGS)
    }

    /// Sets `bg_flags`.
    pub fn set_flags(&mut self, flags: u16) {
        self.put16(BG_FLAGS, flags);
    }

    /// The stored block bitmap checksum (lo and hi halves).
    pub fn bitmap_csum(&self) -> u32 {
        u32::from(self.get16(BG_BLOCK_BITMAP_CSUM_LO)) | u32::from(self.get16(BG_BLOCK_BITMAP_CSUM_HI)) << 16
    }

    /// Stores the block bitmap checksum.
    pub fn set_bitmap_csum(&mut self, csum: u32) {
        self.put16(BG_BLOCK_BITMAP_CSUM_LO, csum as u16);
        self.put16(BG_BLOCK_BITMAP_CSUM_HI, (csum >> 16) as u16);
    }

    /// The stored `bg_checksum`.
    pub fn checksum(&self) -> u16 {
        self.get16(BG_CHECKSUM)
    }

    /// `bg_checksum` as it should be for group `group` of a volume with
    /// checksum seed `csum_seed`.
    pub fn compute_checksum(&self, csum_seed: u32, group: u32) -> u16 {
        crate::ext4::checksum::descriptor_checksum(csum_seed, group, &self.bytes) as u16
    }

    /// Recomputes and stores `bg_checksum`.
    pub fn seal(&mut self, csum_seed: u32, group: u32) {
        let checksum = self.compute_checksum(csum_seed, group);
        self.put16(BG_CHECKSUM, checksum);
    }
}

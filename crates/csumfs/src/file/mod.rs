//! File data: reads, `SEEK_DATA`/`SEEK_HOLE`, and the writer — new
//! inodes, data blocks, bitmaps, descriptors and the superblock, each
//! checksum moved over what changed.

pub(crate) mod data;
pub(crate) mod seek;
pub(crate) mod write;

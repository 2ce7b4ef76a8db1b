//! ext4 `metadata_csum` checking and repair: every checksum an ext4 image
//! carries, recomputed from the bytes and compared with what is stored —
//! superblock, group descriptors, block and inode bitmaps, inodes, extent
//! tree blocks, directory leaf blocks and htree index blocks.
//!
//! All of them are the raw CRC32C (Linux `crc32c()`: no final inversion)
//! seeded with the volume's checksum seed — `s_checksum_seed` with the
//! `csum_seed` feature, else the CRC of the UUID — except the superblock,
//! seeded with `!0`. Per-inode structures (extent blocks, directory blocks)
//! are seeded with the inode's seed: the CRC of its number and generation.
//! Block sizes 1–64 KiB, 32- and 64-byte descriptors, `meta_bg`, bigalloc
//! (cluster bitmaps) and uninitialised groups are handled; images without
//! `metadata_csum` are refused with a clear error.
//!
//! A damaged image never panics: every read is bounds-checked and reported
//! as [`Error::Corrupt`] (fuzzed by the `ext4_image` target).

mod check;
mod layout;
mod structure;

pub use check::{check, Checked, Finding, Report};
pub use layout::{Group, Layout};

use crate::Error;

fn corrupt(location: &str, detail: String) -> Error {
    Error::Corrupt { location: format!("ext4 {location}"), detail }
}

/// `len` bytes at `offset` of `image`, or a corruption error naming `what()`.
fn bytes<'a>(image: &'a [u8], offset: u64, len: usize, what: &dyn Fn() -> String) -> Result<&'a [u8], Error> {
    usize::try_from(offset)
        .ok()
        .and_then(|start| image.get(start..start.checked_add(len)?))
        .ok_or_else(|| corrupt(&what(), format!("bytes [{offset}, +{len}) are outside the {}-byte image", image.len())))
}

//! ext4 `metadata_csum` checking and repair: every checksum an ext4 image
//! carries, recomputed from the bytes and compared with what is stored —
//! superblock, group descriptors, block and inode bitmaps, inodes, extent
//! tree blocks, directory leaf blocks and htree index blocks (extent-mapped
//! and block-mapped directories), external xattr blocks, the values held
//! in ea_inodes (their hash), the jbd2 superblock, the orphan file's blocks
//! and the MMP block.
//!
//! All of them but the superblock's and the journal's are the raw CRC32C
//! (Linux `crc32c()`: no final inversion) seeded with the volume's
//! checksum seed — `s_checksum_seed` with the `csum_seed` feature, else the
//! CRC of the UUID; the superblock and the jbd2 superblock are seeded with
//! `!0`. Per-inode structures (extent blocks, directory blocks, orphan
//! blocks) are seeded with the inode's seed: the CRC of its number and
//! generation. Block sizes 1–64 KiB, 32- and 64-byte descriptors,
//! `meta_bg`, `sparse_super2`, bigalloc (cluster bitmaps) and uninitialised
//! groups are handled; images without `metadata_csum` are refused with a
//! clear error. What is found but not verified (a journal awaiting
//! replay, an external journal) is listed in
//! [`Report::unchecked`], never passed over in silence.
//!
//! A damaged image never panics: every read is bounds-checked and reported
//! as [`Error::Corrupt`] (fuzzed by the `ext4_image` target).

mod check;
mod checker;
pub mod checksum;
pub mod feature_bits;
pub mod fields;
pub mod format;
pub mod hash;
mod inode_rules;
pub mod jbd2;
mod layout;
mod leaves;
mod report;
mod special;
mod structure;
mod tree_rules;
mod xattr;
mod xattr_entries;

pub use check::{check, check_recovering};
pub use layout::{Features, Group, Layout};
pub use report::{Checked, Finding, JournalCheck, Report, Unchecked};

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

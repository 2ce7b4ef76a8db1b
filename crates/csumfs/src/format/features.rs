//! The superblock's feature bits as csumfs reads them: the two incompat
//! bits of its own that keep the kernel and e2fsck off an image whose
//! logs hold changes, the features it refuses to read or to write, and the
//! clean-unmount state a writer needs.

use crate::error::Error;
use csumkit::ext4::feature_bits::{
    INCOMPAT_64BIT, INCOMPAT_CASEFOLD, INCOMPAT_CSUM_SEED, INCOMPAT_DIRDATA, INCOMPAT_EA_INODE, INCOMPAT_ENCRYPT,
    INCOMPAT_EXTENTS, INCOMPAT_FILETYPE, INCOMPAT_FLEX_BG, INCOMPAT_INLINE_DATA, INCOMPAT_JOURNAL_DEV,
    INCOMPAT_LARGEDIR, INCOMPAT_META_BG, INCOMPAT_MMP, INCOMPAT_RECOVER, RO_COMPAT_BIGALLOC, RO_COMPAT_PROJECT,
    RO_COMPAT_QUOTA, RO_COMPAT_READONLY,
};
use csumkit::ext4::fields::{S_CHECKSUM, S_FEATURE_INCOMPAT, S_STATE};
use csumkit::ext4::Layout;
use csumkit::le::{le32, put32};

/// Incompat feature bit csumfs sets on disk while its log holds changes
/// the image lacks, or a mount may write it (no ext4 feature uses it).
pub const LOG_PENDING: u32 = 0x4000_0000;

/// Incompat feature bit csumfs sets on disk beside [`LOG_PENDING`] when
/// that log is the ByteLog in the journal's fast-commit area (`-o
/// bytelog`; the `INCOMPAT_DAX_FC_BYTELOG` of the ext4 ByteLog design):
/// whoever opens the image next finds its log there, not in a file.
pub const FC_BYTELOG: u32 = 0x1000_0000;

/// Incompat feature bit csumfs sets on disk while an undo file is in use
/// (`txn/undo.rs`); [`LOG_PENDING`] is the ByteLog's.
pub const UNDO_PENDING: u32 = 0x2000_0000;

/// A copy of the 1024-byte superblock `sb` with the incompat bits `set`
/// set and `clear` cleared, its checksum resealed.
pub(crate) fn superblock_with_incompat(sb: &[u8], set: u32, clear: u32) -> Vec<u8> {
    let mut sb = sb[..1024].to_vec();
    let incompat = (le32(&sb, S_FEATURE_INCOMPAT) | set) & !clear;
    put32(&mut sb, S_FEATURE_INCOMPAT, incompat);
    let crc = csumkit::crc32c::raw_update(!0, &sb[..S_CHECKSUM]);
    put32(&mut sb, S_CHECKSUM, crc);
    sb
}

/// Refuses, by name, images this writer would damage.
pub(crate) fn refuse_for_writing(layout: &Layout, image: &[u8]) -> Result<(), Error> {
    let f = layout.features;
    let refusals: [(bool, &'static str, &'static str); 6] = [
        (f.incompat & INCOMPAT_EXTENTS == 0, "^extent", "csumfs writes extent-mapped files only: open it read-only"),
        (f.ro_compat & RO_COMPAT_QUOTA != 0, "quota", "quota files are not updated by csumfs: open it read-only"),
        (
            f.ro_compat & RO_COMPAT_PROJECT != 0,
            "project",
            "project quotas are not updated by csumfs: open it read-only",
        ),
        (f.ro_compat & RO_COMPAT_BIGALLOC != 0, "bigalloc", "cluster allocation is not implemented: open it read-only"),
        (f.ro_compat & RO_COMPAT_READONLY != 0, "read-only", "the image is marked read-only"),
        (
            layout.inode_size < 256,
            "128-byte inodes",
            "no room for 32-bit inode checksums and nanoseconds: open it read-only",
        ),
    ];
    if let Some((_, feature, remedy)) = refusals.iter().find(|r| r.0) {
        return Err(Error::Unsupported { feature, remedy });
    }
    // s_state's EXT2_ERROR_FS (0x2, in its low byte).
    if image[1024 + S_STATE] & 0x2 != 0 {
        return Err(Error::Unsupported { feature: "errors", remedy: "the kernel recorded errors: run e2fsck first" });
    }
    if !cleanly_unmounted(image) {
        return Err(Error::Unsupported {
            feature: "not clean",
            remedy: "the kernel has it mounted read-write, or stopped without unmounting it: unmount it, or run \
                     e2fsck first",
        });
    }
    Ok(())
}

/// Whether `image`'s superblock has `s_state`'s `EXT2_VALID_FS` (0x1).
/// The kernel clears it on disk when it mounts a journal-less image
/// read-write (one with a journal it marks `needs_recovery` instead) and
/// sets it again at unmount; e2fsck checks an image without it in full,
/// and sets it.
/// csumfs never clears it: its own mounts are marked by its incompat bits
/// (`txn/redo.rs`, `txn/undo.rs`). Without it, a writer here would write under
/// the kernel's mount — each overwriting the other's metadata — or over
/// what a crashed kernel left unchecked.
pub fn cleanly_unmounted(image: &[u8]) -> bool {
    image.len() >= 2048 && image[1024 + S_STATE] & 0x1 != 0
}

/// (feature bit, name, remedy) of the incompat features this code refuses.
pub(crate) const REFUSED_INCOMPAT: [(u32, &str, &str); 6] = [
    (
        LOG_PENDING,
        "csumfs_log",
        "a csumkit mount has it, or stopped before its ByteLog (IMAGE.bytelog) was folded in (the log may hold \
         changes the image lacks): unmount it, or run `csumkit ext4 checkpoint IMAGE` (or mount it with csumkit \
         mount again)",
    ),
    (
        UNDO_PENDING,
        "csumfs_undo",
        "a csumkit mount -o log=off has it, or stopped with IMAGE.undo in use (an operation may be half done): \
         unmount it, or run `csumkit ext4 checkpoint IMAGE` (or mount it with csumkit mount again)",
    ),
    (
        INCOMPAT_RECOVER,
        "needs_recovery",
        "its journal holds transactions not yet replayed, or the kernel has it mounted read-write: unmount it, \
         or run `csumkit ext4 recover IMAGE`",
    ),
    (INCOMPAT_DIRDATA, "dirdata", "directory entries with extra data are not read here"),
    (INCOMPAT_ENCRYPT, "encrypt", "encrypted names and data are not read here"),
    (INCOMPAT_CASEFOLD, "casefold", "case-insensitive lookups are not implemented here"),
];
/// Incompat features read here: filetype, journal_dev, meta_bg, extents,
/// 64bit, mmp, flex_bg, ea_inode, csum_seed, large_dir, inline_data.
pub(crate) const KNOWN_INCOMPAT: u32 = INCOMPAT_FILETYPE
    | INCOMPAT_JOURNAL_DEV
    | INCOMPAT_META_BG
    | INCOMPAT_EXTENTS
    | INCOMPAT_64BIT
    | INCOMPAT_MMP
    | INCOMPAT_FLEX_BG
    | INCOMPAT_EA_INODE
    | INCOMPAT_CSUM_SEED
    | INCOMPAT_LARGEDIR
    | INCOMPAT_INLINE_DATA;

//! Inode flag rules, as `fs/ext4/ext4.h` states them: which flags a caller
//! may change, which a new inode inherits from its directory, which its
//! type keeps, which exclude each other, and which make a change
//! synchronous.

use csumkit::ext4::format::{FLAG_DAX, FLAG_DIRSYNC, FLAG_JOURNAL_DATA, FLAG_SYNC};

/// `chattr +C` (`FS_NOCOW_FL`): a btrfs flag, not ext4's.
pub(crate) const FLAG_NOCOW: u32 = 0x80_0000;
/// `EXT4_FL_USER_MODIFIABLE`: the flags a caller may ask to change.
pub(crate) const FLAGS_MODIFIABLE: u32 = 0x624B_C0FF;
/// What [`Volume::set_flags`] stores: the modifiable flags but data
/// journaling (stored only on an image with a journal; the extents flag is
/// the mapping's, changed before; casefold is refused before). The former
/// EOFBLOCKS bit is stored, as ext4 stores it.
pub(crate) const FLAGS_SETTABLE: u32 = FLAGS_MODIFIABLE & !FLAG_JOURNAL_DATA;
pub(crate) const SETTABLE_REMEDY: &str = "casefold needs a feature csumfs refuses";

/// Whether DAX and the flags it excludes (`EXT4_DAX_MUT_EXCL`: verity,
/// encryption, data journaling, inline data — a directory's inline data
/// aside) stay apart when an inode of type `mode` goes from flags `old`
/// to `new` (`dax_compatible`).
pub(crate) fn dax_compatible(mode: u16, old: u32, new: u32) -> bool {
    let inline = if mode & 0o170_000 == 0o040_000 { 0 } else { 0x1000_0000 };
    let excluded = 0x10_0000 | 0x800 | FLAG_JOURNAL_DATA | inline;
    !(new & FLAG_DAX != 0 && old & excluded != 0 || new & excluded != 0 && old & FLAG_DAX != 0)
}
/// `EXT4_FL_INHERITED`: the flags a new inode takes from its directory
/// (secure deletion, undelete, compression, sync, nodump, noatime, no
/// compression, data journaling, no tail merging, dirsync, DAX, project
/// inheritance, casefold), less those its type drops ([`mask_flags`]).
pub(crate) const FLAGS_INHERITED: u32 = 0x1
    | 0x2
    | 0x4
    | FLAG_SYNC
    | 0x40
    | 0x80
    | 0x400
    | 0x4000
    | 0x8000
    | FLAG_DIRSYNC
    | 0x200_0000
    | 0x2000_0000
    | 0x4000_0000;

/// `ext4_mask_flags`: a directory keeps every flag; a regular file drops
/// dirsync, top-of-hierarchy, casefold and project inheritance; any other
/// inode keeps only nodump and noatime.
pub(crate) fn mask_flags(mode: u16, flags: u32) -> u32 {
    match mode & 0o170_000 {
        0o040_000 => flags,
        0o100_000 => flags & !(FLAG_DIRSYNC | 0x2_0000 | 0x4000_0000 | 0x2000_0000),
        _ => flags & (0x40 | 0x80),
    }
}

/// The flags a new inode of type `mode` takes from directory `dir_flags`
/// (`__ext4_new_inode`).
pub(crate) fn inherited_flags(dir_flags: u32, mode: u16) -> u32 {
    mask_flags(mode, dir_flags & FLAGS_INHERITED)
}

/// Whether a change to an inode of type `mode` with `flags` must be
/// durable before the call that made it returns: ext4's `IS_SYNC`, and
/// `IS_DIRSYNC` for a directory — whose entries change with it.
pub(crate) fn is_synchronous(mode: u16, flags: u32) -> bool {
    flags & FLAG_SYNC != 0 || flags & FLAG_DIRSYNC != 0 && mode & 0o170_000 == 0o040_000
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `dax_compatible` as ext4's: DAX is not set beside verity,
    /// encryption, data journaling or inline data, nor they beside DAX —
    /// a directory's inline data aside; other flags do not matter.
    #[test]
    fn dax_stays_apart_from_the_flags_it_excludes() {
        const FILE: u16 = 0o100_644;
        const DIR: u16 = 0o040_755;
        for excluded in [0x10_0000, 0x800, FLAG_JOURNAL_DATA, 0x1000_0000] {
            assert!(!dax_compatible(FILE, excluded, FLAG_DAX), "{excluded:#x}, then DAX");
            assert!(!dax_compatible(FILE, FLAG_DAX, FLAG_DAX | excluded), "DAX, then {excluded:#x}");
            assert!(dax_compatible(FILE, 0, FLAG_DAX | excluded), "both at once from neither");
            assert!(dax_compatible(FILE, excluded, excluded | 0x1), "{excluded:#x} kept, no DAX asked");
        }
        assert!(dax_compatible(DIR, 0x1000_0000, FLAG_DAX), "a directory's inline data");
        assert!(!dax_compatible(DIR, 0x800, FLAG_DAX));
        assert!(dax_compatible(FILE, FLAGS_MODIFIABLE & !FLAG_JOURNAL_DATA, FLAG_DAX));
        assert!(dax_compatible(FILE, FLAG_DAX, FLAGS_MODIFIABLE & !FLAG_JOURNAL_DATA));
    }
}

//! The inode-flag ioctls as ext4 answers them: who may change which flags
//! (`FS_IOC_SETFLAGS`), and the `fsxattr` the kernel asks for before a set
//! (`FS_IOC_FSGETXATTR`, as `ext4_fileattr_get` fills it).

use csumkit::ext4::format::{FLAG_APPEND, FLAG_IMMUTABLE, FLAG_JOURNAL_DATA};

/// `_IOR('X', 31, struct fsxattr)`.
pub(super) const FS_IOC_FSGETXATTR: u32 = 0x801C_581F;

/// Inode flag → `FS_XFLAG_*` (sync, immutable, append, nodump, noatime,
/// project inherit, DAX), as `fileattr_fill_flags` maps them.
const XFLAGS: [(u32, u32); 7] =
    [(0x8, 0x20), (0x10, 0x8), (0x20, 0x10), (0x40, 0x80), (0x80, 0x40), (0x2000_0000, 0x200), (0x200_0000, 0x8000)];

/// Whether a caller (`uid`) may change an inode's flags from `old` to
/// `new`: the owner or root may set flags; only root
/// (`CAP_LINUX_IMMUTABLE`) changes immutable and append-only — the VFS's
/// `fileattr_set_prepare` checks that too — and data journaling needs
/// `CAP_SYS_RESOURCE`, as `ext4_ioctl_setflags` asks (`holds_sys_resource`,
/// asked only then: it may read `/proc`).
pub(super) fn may_set_flags(
    uid: u32,
    owner: u32,
    old: u32,
    new: u32,
    holds_sys_resource: impl FnOnce() -> bool,
) -> bool {
    let root = uid == 0;
    let changes_root_only = (old ^ new) & (FLAG_IMMUTABLE | FLAG_APPEND) != 0;
    if !root && (owner != uid || changes_root_only) {
        return false;
    }
    (old ^ new) & FLAG_JOURNAL_DATA == 0 || holds_sys_resource()
}

/// The `struct fsxattr` (28 bytes) for an inode whose visible flags are
/// `flags`: only `fsx_xflags`, the flags as XFS names them.
pub(super) fn fsxattr(flags: u32) -> [u8; 28] {
    let xflags = XFLAGS.iter().filter(|(fl, _)| flags & fl != 0).fold(0u32, |x, (_, xf)| x | xf);
    let mut fsxattr = [0u8; 28];
    fsxattr[..4].copy_from_slice(&xflags.to_le_bytes());
    fsxattr
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_change_by_owner_or_root_and_some_by_root_alone() {
        let never = || -> bool { panic!("not asked") };
        assert!(may_set_flags(1000, 1000, 0, 0x40, never), "the owner sets nodump");
        assert!(!may_set_flags(1001, 1000, 0, 0x40, never), "another user may not");
        assert!(may_set_flags(0, 1000, 0, FLAG_IMMUTABLE, never), "root sets immutable");
        assert!(!may_set_flags(1000, 1000, 0, FLAG_APPEND, never), "the owner may not set append-only");
        assert!(!may_set_flags(1000, 1000, FLAG_IMMUTABLE, 0, never), "nor clear immutable");
        assert!(may_set_flags(1000, 1000, 0, FLAG_JOURNAL_DATA, || true), "data journaling with CAP_SYS_RESOURCE");
        assert!(!may_set_flags(0, 0, 0, FLAG_JOURNAL_DATA, || false), "and not without, root or not");
    }

    #[test]
    fn fsxattr_names_the_flags_as_xfs_does() {
        assert_eq!(fsxattr(0), [0; 28]);
        let x = fsxattr(0x8 | 0x10 | 0x20 | 0x40 | 0x80 | 0x2000_0000 | 0x200_0000);
        assert_eq!(u32::from_le_bytes(x[..4].try_into().unwrap()), 0x20 | 0x8 | 0x10 | 0x80 | 0x40 | 0x200 | 0x8000);
        assert!(x[4..].iter().all(|&b| b == 0));
    }
}

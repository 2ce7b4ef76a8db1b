//! Leaf runs of an inode's block mapping, as extent leaves and block maps
//! both yield them.

/// A run of blocks an inode maps: (logical, physical, length).
pub(super) type Leaf = (u32, u64, u16);

/// The physical block of `logical` among leaf runs (logical, physical, length).
pub(super) fn physical(leaves: &[(u32, u64, u16)], logical: u64) -> Option<u64> {
    leaves.iter().find_map(|&(first, start, len)| {
        let first = u64::from(first);
        (first..first + u64::from(len)).contains(&logical).then(|| start + logical - first)
    })
}

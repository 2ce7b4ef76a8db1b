//! Space: block mapping reads (extents and indirect blocks), the extent
//! tree's writer, allocation and freeing of file blocks, and the blocks
//! ext4 holds back from each caller (with `statfs`).

pub(crate) mod alloc;
pub(crate) mod extent_tree;
pub(crate) mod extents;
pub(crate) mod grow;
pub(crate) mod map;
pub(crate) mod reserve;

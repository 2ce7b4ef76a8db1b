//! The checker's state while it walks an image: the checks themselves are
//! `impl Checker` blocks in `check.rs` (groups, inodes, extent trees,
//! directories), `special.rs` (journal superblock, orphan file, MMP, block
//! maps) and `xattr.rs`.

use super::hash::HashSetup;
use super::layout::Layout;
use super::report::Report;
use super::structure::Claim;
use super::tree_rules::Tree;
use super::xattr_entries::XattrBlocks;
use std::collections::{HashMap, HashSet};

/// One check of one image.
pub(super) struct Checker<'a> {
    pub(super) image: &'a [u8],
    pub(super) layout: Layout,
    pub(super) report: Report,
    /// Blocks each inode's extent trees claim (overlaps found after the scan).
    pub(super) claims: Vec<Claim>,
    /// Inodes whose extents are out of range or not marked in use.
    pub(super) inode_damage: HashMap<u64, String>,
    /// External xattr blocks, checked once each (they may be shared).
    pub(super) xattr_blocks: XattrBlocks,
    /// The journal inode (an internal journal) and the orphan file's.
    pub(super) journal_inum: Option<u64>,
    pub(super) orphan_inum: Option<u64>,
    /// `s_first_ino`: inodes below it (but the root) are the kernel's own.
    pub(super) first_ino: u64,
    /// Inodes not named by any directory: journal, orphan file, quota files.
    pub(super) unnamed: HashSet<u64>,
    /// The directory tree, for the link-count judgement after the scan.
    pub(super) tree: Tree,
    /// The superblock's htree hash seed and flavour.
    pub(super) hash: HashSetup,
}

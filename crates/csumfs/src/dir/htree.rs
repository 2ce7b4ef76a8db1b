//! The htree index of a directory: the walk from the root to the leaf that
//! holds a name's hash (the kernel's `dx_probe`), and on through the leaves
//! of a run of names sharing that hash (`ext4_htree_next_block`). One walk
//! serves lookups and the writer that adds names: every node on the way is
//! checked as the kernel checks it — its limit the one the block size
//! gives, 1 to limit entries, its dx tail's checksum — so a damaged index
//! is an error, never a wrong leaf (a name reported absent, or added twice).

use crate::error::{corrupt, Error};
use crate::inode::table::Inode;
use crate::space::map::Run;
use crate::volume::Volume;
use csumkit::crc32c;
use csumkit::ext4::feature_bits::INCOMPAT_LARGEDIR;
use csumkit::ext4::fields::{
    DX_ROOT_HASH_VERSION, DX_ROOT_INDIRECT_LEVELS, DX_ROOT_INFO_LENGTH, DX_ROOT_RESERVED_ZERO, DX_ROOT_UNUSED_FLAGS,
};
use csumkit::le::{le16, le32};

/// Where an interior node's count/limit sit: after its fake dirent.
pub(crate) const NODE_COUNT_AT: usize = 8;
/// Where the root's count/limit sit: after ".", ".." and the 8-byte root info.
pub(crate) const ROOT_COUNT_AT: usize = 0x20;
/// `struct dx_tail`: reserved word, checksum.
const DX_TAIL_LEN: usize = 8;

/// One step of an index path: a node (the root or an interior node), the
/// offset of its count/limit, and the entry chosen for the hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexStep {
    pub physical: u64,
    pub count_at: usize,
    pub chosen: usize,
}

/// An index `dx_probe` calls bad (`ERR_BAD_DX_DIR`) though its checksums
/// are right: why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BadIndex(pub String);

/// A walk's outcome: an error (I/O, a checksum, a damaged frame), or what
/// the index says, or that it is bad.
pub(crate) type Probed<T> = Result<Result<T, BadIndex>, Error>;

/// The path from the root to the leaf for a name's hash.
#[derive(Clone, Debug)]
pub(crate) struct IndexPath {
    /// The name's hash (low bit clear, as the kernel's major hash).
    pub hash: u32,
    /// The root's hash version.
    pub version: u8,
    /// Root first, one step a level.
    pub steps: Vec<IndexStep>,
    /// The leaf's logical block.
    pub leaf: u64,
    /// The leaf's physical block, found with the runs the walk read.
    pub leaf_physical: u64,
}

/// The entries' limit of an index node whose count/limit sit at `count_at`
/// in a block of `bs` bytes (`dx_root_limit`/`dx_node_limit` with a dx tail).
pub(crate) fn index_limit(bs: usize, count_at: usize) -> usize {
    (bs - count_at - DX_TAIL_LEN) / 8
}

/// The dx tail checksum of an index node: its header and entries up to
/// `count`, then the tail's reserved word and a zero checksum
/// (`ext4_dx_csum`).
pub(crate) fn index_csum(seed: u32, node: &[u8], count_at: usize) -> u32 {
    let (limit, count) = (usize::from(le16(node, count_at)), usize::from(le16(node, count_at + 2)));
    let tail = count_at + 8 * limit;
    let crc = crc32c::raw_update(seed, &node[..count_at + 8 * count]);
    let crc = crc32c::raw_update(crc, &node[tail..tail + 4]);
    crc32c::raw_update(crc, &[0; 4])
}

/// A block of the index: the root (logical 0) or an interior node (one
/// empty entry spanning the block).
pub(crate) fn is_index_block(block: &[u8], logical: u64, bs: u64) -> bool {
    logical == 0 || le32(block, 0) == 0 && rec_len_at(block, 4, bs) == bs
}

/// A record length as stored (a 64 KiB record does not fit 16 bits).
fn rec_len_at(block: &[u8], at: usize, bs: u64) -> u64 {
    let raw = le16(block, at);
    if raw == 0 || raw == 65535 && bs == 65536 {
        65536
    } else {
        u64::from(raw)
    }
}

/// The physical block of a directory's logical block, from its runs.
pub(crate) fn physical_in(runs: &[Run], dir: &Inode, logical: u64) -> Result<u64, Error> {
    runs.iter()
        .find(|r| (r.logical..r.logical + r.len).contains(&logical))
        .map(|r| r.physical + logical - r.logical)
        .ok_or_else(|| corrupt(format!("directory {}", dir.ino), format!("no block {logical}")))
}

/// The block an index entry points to (its top 4 bits are not the block's).
fn entry_block(node: &[u8], count_at: usize, entry: usize) -> u64 {
    u64::from(le32(node, count_at + 8 * entry + 4)) & 0x0FFF_FFFF
}

impl Volume {
    /// The htree hash of `name` under a root's hash `version`, signed or
    /// unsigned as the superblock says. None for a version the kernel's
    /// `dx_probe` does not accept in a root: legacy, half-MD4 and TEA only
    /// (the unsigned variants 3–5 are never stored, the superblock's flag
    /// implies them; siphash belongs to casefolded directories, refused).
    pub(crate) fn name_hash(&self, version: u8, name: &[u8]) -> Option<u32> {
        self.hash.hash(version, name).map(|(hash, _)| hash)
    }

    /// Index levels a tree may have (the kernel's `ext4_dir_htree_level`).
    pub(crate) fn htree_levels(&self) -> u8 {
        if self.layout.features.incompat & INCOMPAT_LARGEDIR != 0 {
            3
        } else {
            2
        }
    }

    /// The physical block of a directory's logical block.
    pub(crate) fn dir_block(&self, dir: &Inode, logical: u64) -> Result<u64, Error> {
        physical_in(&self.runs(dir)?, dir, logical)
    }

    /// The index path to the leaf that covers `name`'s hash: in each node
    /// the last entry whose hash is not above it (entry 0 covers hash 0).
    pub(crate) fn htree_path(&self, dir: &Inode, name: &[u8]) -> Probed<IndexPath> {
        let runs = self.runs(dir)?;
        let root_physical = physical_in(&runs, dir, 0)?;
        let root = match self.index_node(dir, root_physical, ROOT_COUNT_AT)? {
            Ok(root) => root,
            Err(bad) => return Ok(Err(bad)),
        };
        let (version, levels, flags) =
            (root[DX_ROOT_HASH_VERSION], root[DX_ROOT_INDIRECT_LEVELS], root[DX_ROOT_UNUSED_FLAGS]);
        let hash = match self.name_hash(version, name) {
            _ if levels >= self.htree_levels() => return Ok(Err(BadIndex(format!("{levels} indirect levels")))),
            _ if flags & 1 != 0 => return Ok(Err(BadIndex(format!("hash flags {flags:#x}")))),
            None => return Ok(Err(BadIndex(format!("hash version {version}")))),
            Some(hash) => hash,
        };
        let mut steps = Vec::with_capacity(usize::from(levels) + 1);
        let (mut node, mut physical, mut count_at) = (root, root_physical, ROOT_COUNT_AT);
        loop {
            let count = usize::from(le16(node, count_at + 2));
            let chosen = (1..count).take_while(|&e| le32(node, count_at + 8 * e) <= hash).last().unwrap_or(0);
            let child = entry_block(node, count_at, chosen);
            steps.push(IndexStep { physical, count_at, chosen });
            physical = physical_in(&runs, dir, child)?;
            if steps.len() > usize::from(levels) {
                return Ok(Ok(IndexPath { hash, version, steps, leaf: child, leaf_physical: physical }));
            }
            count_at = NODE_COUNT_AT;
            node = match self.index_node(dir, physical, count_at)? {
                Ok(node) => node,
                Err(bad) => return Ok(Err(bad)),
            };
        }
    }

    /// Moves `path` on to the next leaf of its hash's collision run: the
    /// next index entry — at the deepest level that has one — carries the
    /// same hash (with the continuation bit, as the writer sets it when a
    /// split falls inside a run of equal hashes). False when the run ends.
    pub(crate) fn next_colliding_leaf(&self, dir: &Inode, path: &mut IndexPath) -> Probed<bool> {
        let what = || format!("directory {} htree", dir.ino);
        let mut depth = path.steps.len();
        loop {
            let Some(up) = depth.checked_sub(1) else { return Ok(Ok(false)) };
            depth = up;
            let step = path.steps[depth];
            let count = usize::from(le16(self.block(step.physical, &what)?, step.count_at + 2));
            if step.chosen + 1 < count {
                break;
            }
        }
        let step = &mut path.steps[depth];
        step.chosen += 1;
        let node = self.block(step.physical, &what)?;
        if le32(node, step.count_at + 8 * step.chosen) & !1 != path.hash {
            return Ok(Ok(false));
        }
        let mut child = entry_block(node, step.count_at, step.chosen);
        let runs = self.runs(dir)?;
        for below in &mut path.steps[depth + 1..] {
            let physical = physical_in(&runs, dir, child)?;
            let node = match self.index_node(dir, physical, NODE_COUNT_AT)? {
                Ok(node) => node,
                Err(bad) => return Ok(Err(bad)),
            };
            *below = IndexStep { physical, count_at: NODE_COUNT_AT, chosen: 0 };
            child = entry_block(node, NODE_COUNT_AT, 0);
        }
        path.leaf_physical = physical_in(&runs, dir, child)?;
        path.leaf = child;
        Ok(Ok(true))
    }

    /// An index node, checked in the kernel's order. First its frame, as
    /// `ext4_dx_csum_verify` finds the count/limit: the root's "." and
    /// ".." records spanning what they must, its info 8 bytes with the
    /// reserved word zero (or a node's one empty record over the block),
    /// the entries and tail inside the block — then the dx tail's
    /// checksum; both are errors. Then, as `dx_probe`: the limit the block
    /// size gives and at least one entry, else [`BadIndex`].
    fn index_node(&self, dir: &Inode, physical: u64, count_at: usize) -> Probed<&[u8]> {
        let what = || format!("directory {} htree block {physical}", dir.ino);
        let node = self.block(physical, &what)?;
        let bs = node.len();
        let framed = if count_at == ROOT_COUNT_AT {
            let dotdot_spans = rec_len_at(node, 12 + 4, bs as u64) == bs as u64 - 12;
            rec_len_at(node, 4, bs as u64) == 12
                && dotdot_spans
                && le32(node, DX_ROOT_RESERVED_ZERO) == 0
                && node[DX_ROOT_INFO_LENGTH] == 8
        } else {
            is_index_block(node, 1, bs as u64)
        };
        let (limit, count) = (usize::from(le16(node, count_at)), usize::from(le16(node, count_at + 2)));
        if !framed || count_at + 8 * limit + DX_TAIL_LEN > bs || count > limit {
            return Err(corrupt(what(), format!("index frame: count {count}, limit {limit} in a block of {bs} bytes")));
        }
        if !self.verified_dir_block(physical, dir.csum_seed) {
            let stored = le32(node, count_at + 8 * limit + 4);
            self.verify(&what, stored, index_csum(dir.csum_seed, node, count_at))?;
            self.remember_verified_dir_block(physical, dir.csum_seed);
        }
        let want = index_limit(bs, count_at);
        if limit != want || count == 0 {
            return Ok(Err(BadIndex(format!("block {physical}: count {count}, limit {limit} where {want} fit"))));
        }
        Ok(Ok(node))
    }
}

#[cfg(test)]
mod tests {
    use super::{index_limit, is_index_block};

    /// A block whose first record is (inode, stored record length).
    fn block(bs: usize, ino: u32, raw_rec_len: u16) -> Vec<u8> {
        let mut b = vec![0u8; bs];
        b[..4].copy_from_slice(&ino.to_le_bytes());
        b[4..6].copy_from_slice(&raw_rec_len.to_le_bytes());
        b
    }

    /// Interior nodes are told from leaves as the kernel's
    /// `get_dx_countlimit` tells them: one record of inode 0 over the whole
    /// block, whose length at 64 KiB is stored as 0 (the kernel) or 65535
    /// (e2fsprogs). A leaf whose first name was removed (inode 0, its own
    /// length) is a leaf; block 0 of an indexed directory is its root.
    #[test]
    fn index_blocks_are_told_from_leaves_as_the_kernel_tells_them() {
        assert!(is_index_block(&block(1024, 0, 1024), 1, 1024));
        assert!(is_index_block(&block(4096, 0, 4096), 7, 4096));
        assert!(is_index_block(&block(65536, 0, 0), 1, 65536));
        assert!(is_index_block(&block(65536, 0, 65535), 1, 65536));
        assert!(!is_index_block(&block(1024, 0, 12), 1, 1024), "a leaf whose first name was removed");
        assert!(!is_index_block(&block(1024, 5, 1024), 1, 1024), "a record in use");
        assert!(!is_index_block(&block(65536, 5, 0), 1, 65536), "a record in use");
        assert!(!is_index_block(&block(65536, 0, 65532), 1, 65536), "a record short of the block");
        assert!(is_index_block(&block(1024, 5, 12), 0, 1024), "the root, whatever its first record");
        // Entries between the count/limit and a dx tail: the kernel's limits.
        assert_eq!(index_limit(1024, 0x20), 123);
        assert_eq!(index_limit(4096, 8), 510);
        assert_eq!(index_limit(65536, 8), 8190);
    }
}

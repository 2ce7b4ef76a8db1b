//! Structural consistency of the structures whose checksums the checker
//! recomputes. A checksum is only worth rewriting when the bytes it covers
//! are otherwise sound: a wrong checksum over wrong content (an extent
//! pointed at another file's block, a bitmap that disagrees with its
//! descriptor's counts, dirents that run off their block) is damage for
//! e2fsck, and re-sealing it would hide it from the kernel and e2fsck alike.
//! Each check returns why a structure is damaged, or `None`.

use super::layout::Layout;
use std::collections::HashMap;

/// One run of blocks an inode claims: a leaf extent or an extent tree block;
/// or, with `inode` [`METADATA`], the filesystem's own blocks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Claim {
    pub start: u64,
    pub len: u64,
    pub inode: u64,
}

/// The owner of the superblock copies, descriptor blocks, bitmaps and inode
/// tables (no inode is numbered 0).
pub(super) const METADATA: u64 = 0;

/// A run outside the filesystem's data blocks.
pub(super) fn out_of_range(layout: &Layout, start: u64, len: u64) -> Option<String> {
    let end = start.checked_add(len)?;
    if start < layout.first_data_block || end > layout.blocks_count {
        return Some(format!(
            "blocks {start}..{end} lie outside the filesystem's blocks {}..{}",
            layout.first_data_block, layout.blocks_count
        ));
    }
    None
}

/// Every inode whose claimed blocks overlap another claim (its own
/// included), with the first overlap found.
pub(super) fn shared_blocks(claims: &mut [Claim]) -> HashMap<u64, String> {
    claims.sort_unstable_by_key(|c| (c.start, c.len));
    let mut damaged = HashMap::new();
    // The claim reaching furthest so far; any later start before its end overlaps.
    let mut reach: Option<Claim> = None;
    for &claim in claims.iter() {
        if let Some(prev) = reach {
            let prev_end = prev.start.saturating_add(prev.len);
            if claim.start < prev_end {
                let text = |other: u64| {
                    let owner =
                        if other == METADATA { "the filesystem's metadata".into() } else { format!("inode {other}") };
                    format!("blocks from {} are also claimed by {owner}", claim.start.max(prev.start))
                };
                damaged.entry(claim.inode).or_insert_with(|| text(prev.inode));
                damaged.entry(prev.inode).or_insert_with(|| text(claim.inode));
            }
            if claim.start.saturating_add(claim.len) <= prev_end {
                continue;
            }
        }
        reach = Some(claim);
    }
    damaged
}

/// An htree node's limit must be what its block holds (the kernel's
/// `dx_root_limit` / `dx_node_limit`), and it must have entries.
pub(super) fn htree_counts(block_size: usize, count_offset: usize, limit: usize, count: usize) -> Option<String> {
    // The limit counts 8-byte entries from the count/limit header (which
    // takes the first entry's place) to the 8-byte dx_tail.
    let expected = (block_size - count_offset - 8) / 8;
    if limit != expected || count == 0 {
        return Some(format!("htree count {count} / limit {limit}: a block of {block_size} holds {expected}"));
    }
    None
}

/// Zero bits among the first `bits` bits of a bitmap: whole bytes, as
/// `Layout::parse` admits only groups of a multiple of 8 clusters and inodes.
pub(super) fn free_bits(bitmap: &[u8], bits: u64) -> u64 {
    assert!(bits.is_multiple_of(8), "{bits} bits: Layout::parse admits whole bytes only");
    bitmap[..(bits / 8) as usize].iter().map(|b| u64::from(b.count_zeros())).sum()
}

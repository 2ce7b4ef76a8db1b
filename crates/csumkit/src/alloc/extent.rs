//! ext4 extent-tree leaf blocks: a 12-byte header, 12-byte entries, and a
//! 4-byte checksum tail right after the last possible entry.
//!
//! | offset        | size | field                                           |
//! |--------------:|-----:|-------------------------------------------------|
//! | 0             | 2    | `eh_magic` = 0xF30A                             |
//! | 2             | 2    | `eh_entries`                                    |
//! | 4             | 2    | `eh_max` = (block size - 12) / 12               |
//! | 6             | 2    | `eh_depth` = 0 (leaf)                           |
//! | 8             | 4    | `eh_generation`                                 |
//! | 12 + 12 i     | 4    | `ee_block`: first logical block                 |
//! | 12 + 12 i + 4 | 2    | `ee_len`: length, + 32768 if unwritten          |
//! | 12 + 12 i + 6 | 2    | `ee_start_hi`                                   |
//! | 12 + 12 i + 8 | 4    | `ee_start_lo`                                   |
//! | 12 + 12 max   | 4    | `et_checksum`: raw CRC32C, per-inode seed, over |
//! |               |      | bytes `[0, 12 + 12 max)`                        |
//!
//! Every change rewrites a small region — one entry when an extent grows,
//! an entry and the count when one is added, the shifted tail of the
//! entries on an insert — and updates the checksum either by recomputing it
//! over the whole block or with [`crc32c::splice`] over the changed bytes.

use super::{LeafCsum, Phase, Probe};
use crate::crc32c;
use crate::Error;

/// `eh_magic`.
pub const EXTENT_MAGIC: u16 = 0xF30A;
/// Longest unwritten extent (what fallocate creates): ee_len 32768 + 32767.
pub const MAX_UNWRITTEN_LEN: u32 = 32767;
const EXT_INIT_MAX_LEN: u32 = 32768;
const HEADER: usize = 12;
const ENTRY: usize = 12;

/// One extent: logical blocks `[logical, logical + len)` at physical
/// `[physical, physical + len)`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Extent {
    /// First logical block.
    pub logical: u32,
    /// Length in blocks (1..=32767 when unwritten, 1..=32768 otherwise).
    pub len: u32,
    /// First physical block (48 bits).
    pub physical: u64,
    /// Allocated but not written (fallocate).
    pub unwritten: bool,
}

impl Extent {
    /// One past the last logical block.
    pub fn logical_end(&self) -> u32 {
        self.logical + self.len
    }

    /// One past the last physical block.
    pub fn physical_end(&self) -> u64 {
        self.physical + u64::from(self.len)
    }

    fn encode(&self) -> [u8; ENTRY] {
        debug_assert!(self.len >= 1 && self.len <= if self.unwritten { MAX_UNWRITTEN_LEN } else { EXT_INIT_MAX_LEN });
        let ee_len = if self.unwritten { self.len + EXT_INIT_MAX_LEN } else { self.len };
        let mut out = [0; ENTRY];
        out[0..4].copy_from_slice(&self.logical.to_le_bytes());
        out[4..6].copy_from_slice(&(ee_len as u16).to_le_bytes());
        out[6..8].copy_from_slice(&((self.physical >> 32) as u16).to_le_bytes());
        out[8..12].copy_from_slice(&(self.physical as u32).to_le_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Extent {
        let logical = u32::from_le_bytes(bytes[0..4].try_into().expect("4 bytes"));
        let ee_len = u32::from(u16::from_le_bytes([bytes[4], bytes[5]]));
        let hi = u64::from(u16::from_le_bytes([bytes[6], bytes[7]]));
        let lo = u64::from(u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes")));
        let unwritten = ee_len > EXT_INIT_MAX_LEN;
        let len = if unwritten { ee_len - EXT_INIT_MAX_LEN } else { ee_len };
        Extent { logical, len, physical: hi << 32 | lo, unwritten }
    }
}

/// Entries that fit in a leaf of `block_size` bytes.
pub fn leaf_capacity(block_size: u32) -> usize {
    (block_size as usize - HEADER) / ENTRY
}

/// One extent leaf block and where it lives.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Leaf {
    /// Physical block holding this leaf.
    pub block: u64,
    bytes: Vec<u8>,
}

impl Leaf {
    /// A new leaf of `block_size` bytes at `block` holding `extents`,
    /// checksummed once over the whole block.
    pub fn new(block: u64, block_size: u32, generation: u32, seed: u32, extents: &[Extent]) -> Self {
        assert!(extents.len() <= leaf_capacity(block_size), "more extents than a leaf holds");
        let mut bytes = vec![0; block_size as usize];
        bytes[0..2].copy_from_slice(&EXTENT_MAGIC.to_le_bytes());
        bytes[2..4].copy_from_slice(&(extents.len() as u16).to_le_bytes());
        bytes[4..6].copy_from_slice(&(leaf_capacity(block_size) as u16).to_le_bytes());
        bytes[8..12].copy_from_slice(&generation.to_le_bytes());
        for (i, e) in extents.iter().enumerate() {
            bytes[HEADER + ENTRY * i..HEADER + ENTRY * (i + 1)].copy_from_slice(&e.encode());
        }
        let mut leaf = Leaf { block, bytes };
        let csum = leaf.compute_checksum(seed);
        leaf.store_checksum(csum);
        leaf
    }

    /// A leaf read from media, validated: magic, depth, counts, checksum,
    /// entries sorted and non-overlapping.
    ///
    /// # Errors
    /// [`Error::Corrupt`] naming the block and the failed check.
    pub fn parse(block: u64, bytes: &[u8], seed: u32) -> Result<Leaf, Error> {
        let corrupt = |detail: String| Error::Corrupt { location: format!("extent leaf at block {block}"), detail };
        if bytes.len() < 1024 || !bytes.len().is_power_of_two() || bytes.len() > 65536 {
            return Err(corrupt(format!("{} bytes is not a block size (1 KiB..64 KiB, power of two)", bytes.len())));
        }
        let field = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
        if field(0) != EXTENT_MAGIC {
            return Err(corrupt(format!("magic {:#06x}, expected {EXTENT_MAGIC:#06x}", field(0))));
        }
        let max = leaf_capacity(bytes.len() as u32);
        if usize::from(field(4)) != max {
            return Err(corrupt(format!("eh_max {} but a {}-byte block holds {max}", field(4), bytes.len())));
        }
        if field(6) != 0 {
            return Err(corrupt(format!("eh_depth {} in a leaf", field(6))));
        }
        if usize::from(field(2)) > max {
            return Err(corrupt(format!("eh_entries {} above eh_max {max}", field(2))));
        }
        let leaf = Leaf { block, bytes: bytes.to_vec() };
        let (stored, computed) = (leaf.stored_checksum(), leaf.compute_checksum(seed));
        if stored != computed {
            return Err(corrupt(format!("checksum {stored:#010x}, computed {computed:#010x}")));
        }
        let mut prev_end = 0u64;
        for i in 0..leaf.len() {
            let e = leaf.get(i);
            let max_len = if e.unwritten { MAX_UNWRITTEN_LEN } else { EXT_INIT_MAX_LEN };
            if e.len == 0 || e.len > max_len {
                return Err(corrupt(format!("entry {i} has length {}", e.len)));
            }
            if u64::from(e.logical) < prev_end || u64::from(e.logical) + u64::from(e.len) > 1 << 32 {
                return Err(corrupt(format!("entry {i} (logical {}) overlaps or is out of order", e.logical)));
            }
            if e.physical + u64::from(e.len) > 1 << 48 {
                return Err(corrupt(format!("entry {i} runs past the 48-bit block space")));
            }
            prev_end = u64::from(e.logical) + u64::from(e.len);
        }
        Ok(leaf)
    }

    /// The on-media bytes.
    pub fn as_media(&self) -> &[u8] {
        &self.bytes
    }

    fn tail(&self) -> usize {
        HEADER + ENTRY * self.capacity()
    }

    /// Entries this leaf can hold.
    pub fn capacity(&self) -> usize {
        leaf_capacity(self.bytes.len() as u32)
    }

    /// Entries in use.
    pub fn len(&self) -> usize {
        usize::from(u16::from_le_bytes([self.bytes[2], self.bytes[3]]))
    }

    /// Whether the leaf holds no extent.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Entry `i`.
    ///
    /// # Panics
    /// If `i >= self.len()`, like slice indexing.
    pub fn get(&self, i: usize) -> Extent {
        assert!(i < self.len(), "extent {i} of a leaf holding {}", self.len());
        Extent::decode(&self.bytes[HEADER + ENTRY * i..HEADER + ENTRY * (i + 1)])
    }

    /// The last entry.
    pub fn last(&self) -> Option<Extent> {
        (!self.is_empty()).then(|| self.get(self.len() - 1))
    }

    /// Index of the first entry whose logical start is above `logical`
    /// (binary search over the entries).
    pub fn upper_bound(&self, logical: u32) -> usize {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.get(mid).logical <= logical {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The stored `et_checksum`.
    pub fn stored_checksum(&self) -> u32 {
        let t = self.tail();
        u32::from_le_bytes(self.bytes[t..t + 4].try_into().expect("4 bytes"))
    }

    fn store_checksum(&mut self, csum: u32) {
        let t = self.tail();
        self.bytes[t..t + 4].copy_from_slice(&csum.to_le_bytes());
    }

    /// The checksum recomputed over the block.
    pub fn compute_checksum(&self, seed: u32) -> u32 {
        crc32c::raw_update(seed, &self.bytes[..self.tail()])
    }

    /// Rewrites `[offset, offset + len)` with `edit`, then brings the checksum
    /// up to date the way `mode` says.
    fn modify<P: Probe>(
        &mut self,
        offset: usize,
        len: usize,
        mode: LeafCsum,
        seed: u32,
        probe: &mut P,
        edit: impl FnOnce(&mut [u8]),
    ) {
        debug_assert!(offset + len <= self.tail());
        // The old bytes are only needed for a splice; the common 12- and
        // 2-byte regions are copied to the stack.
        let mut small = [0u8; 64];
        let large: Vec<u8>;
        let old: &[u8] = match mode {
            LeafCsum::Full => &[],
            LeafCsum::Splice if len <= small.len() => {
                small[..len].copy_from_slice(&self.bytes[offset..offset + len]);
                &small[..len]
            }
            LeafCsum::Splice => {
                large = self.bytes[offset..offset + len].to_vec();
                &large
            }
        };
        edit(&mut self.bytes[offset..offset + len]);
        probe.enter(Phase::Checksum);
        let csum = match mode {
            LeafCsum::Full => self.compute_checksum(seed),
            LeafCsum::Splice => {
                let new = &self.bytes[offset..offset + len];
                crc32c::splice(self.stored_checksum(), self.tail() as u64, offset as u64, old, new)
                    .expect("region inside the checksummed span")
            }
        };
        self.store_checksum(csum);
        debug_assert_eq!(csum, self.compute_checksum(seed), "leaf checksum out of date");
        probe.enter(Phase::Extent);
    }

    fn set_len_field<P: Probe>(&mut self, n: usize, mode: LeafCsum, seed: u32, probe: &mut P) {
        self.modify(2, 2, mode, seed, probe, |b| b.copy_from_slice(&(n as u16).to_le_bytes()));
    }

    /// Overwrites entry `i` (an extent grew or shrank).
    pub(super) fn set<P: Probe>(&mut self, i: usize, extent: Extent, mode: LeafCsum, seed: u32, probe: &mut P) {
        debug_assert!(i < self.len());
        self.modify(HEADER + ENTRY * i, ENTRY, mode, seed, probe, |b| b.copy_from_slice(&extent.encode()));
    }

    /// Inserts `extent` at index `i`, shifting the later entries up: a
    /// 12-byte change when appending, up to the whole entry area otherwise.
    pub(super) fn insert<P: Probe>(&mut self, i: usize, extent: Extent, mode: LeafCsum, seed: u32, probe: &mut P) {
        let n = self.len();
        assert!(n < self.capacity() && i <= n, "insert into a full leaf or past its end");
        self.modify(HEADER + ENTRY * i, ENTRY * (n + 1 - i), mode, seed, probe, |b| {
            b.copy_within(0..ENTRY * (n - i), ENTRY);
            b[..ENTRY].copy_from_slice(&extent.encode());
        });
        self.set_len_field(n + 1, mode, seed, probe);
    }

    /// Drops entries `[keep, len)`, zeroing their slots.
    pub(super) fn truncate<P: Probe>(&mut self, keep: usize, mode: LeafCsum, seed: u32, probe: &mut P) {
        let n = self.len();
        if keep >= n {
            return;
        }
        self.modify(HEADER + ENTRY * keep, ENTRY * (n - keep), mode, seed, probe, |b| b.fill(0));
        self.set_len_field(keep, mode, seed, probe);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alloc::NoProbe;

    #[test]
    fn splice_and_full_agree_and_parse_round_trips() {
        let seed = 0x1234_5678;
        for mode in [LeafCsum::Full, LeafCsum::Splice] {
            let mut leaf = Leaf::new(7, 1024, 3, seed, &[]);
            let e = |logical, physical| Extent { logical, len: 4, physical, unwritten: true };
            leaf.insert(0, e(0, 100), mode, seed, &mut NoProbe);
            leaf.insert(1, e(20, 200), mode, seed, &mut NoProbe);
            leaf.insert(1, e(10, 1 << 40), mode, seed, &mut NoProbe);
            leaf.set(2, Extent { len: 32767, ..e(20, 200) }, mode, seed, &mut NoProbe);
            assert_eq!(leaf.stored_checksum(), leaf.compute_checksum(seed));
            let parsed = Leaf::parse(7, leaf.as_media(), seed).unwrap();
            assert_eq!(parsed.get(1), e(10, 1 << 40));
            assert_eq!(parsed.get(2).len, 32767);
            assert_eq!(leaf.upper_bound(15), 2);
            leaf.truncate(1, mode, seed, &mut NoProbe);
            assert_eq!(leaf.len(), 1);
            assert!(Leaf::parse(7, leaf.as_media(), seed).is_ok());
            let mut bad = leaf.as_media().to_vec();
            bad[20] ^= 1;
            assert!(matches!(Leaf::parse(7, &bad, seed), Err(Error::Corrupt { .. })));
            assert!(matches!(Leaf::parse(7, &bad[..1000], seed), Err(Error::Corrupt { .. })));
        }
    }
}

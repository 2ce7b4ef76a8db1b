//! The data checksum changes the next ByteLog commit carries: the last
//! change of each block (`None`: its checksum forgotten), in block order.
//!
//! A write's blocks arrive in order, so they are appended to a vector; a
//! change out of order marks it unsorted, and it is sorted (last change
//! wins) when read or when it has doubled since its last sort: a
//! `BTreeMap` insert per block cost a measurable share of a large
//! sequential write at 4 KiB blocks.

/// Below this many entries an unsorted vector is not sorted on insert.
const SORT_FLOOR: usize = 4096;

#[derive(Debug, Default)]
pub(crate) struct LoggedSums {
    entries: Vec<(u64, Option<u32>)>,
    /// A block came out of order (or again): `entries` is sorted before
    /// it is read.
    unsorted: bool,
    /// Entries after the last sort.
    sorted_len: usize,
}

impl LoggedSums {
    /// Notes `crc` as block `block`'s checksum from now on.
    pub(crate) fn insert(&mut self, block: u64, crc: Option<u32>) {
        if self.entries.last().is_some_and(|&(last, _)| last >= block) {
            self.unsorted = true;
        }
        self.entries.push((block, crc));
        if self.unsorted && self.entries.len() > 2 * self.sorted_len.max(SORT_FLOOR) {
            self.entries = sorted(&self.entries);
            self.unsorted = false;
            self.sorted_len = self.entries.len();
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub(crate) fn clear(&mut self) {
        *self = LoggedSums::default();
    }

    /// The changes, one per block, in block order (sorted in place, once,
    /// if need be).
    pub(crate) fn changes(&mut self) -> &[(u64, Option<u32>)] {
        if self.unsorted {
            self.entries = sorted(&self.entries);
            self.unsorted = false;
            self.sorted_len = self.entries.len();
        }
        &self.entries
    }
}

/// `entries` by block, the last of each block's kept.
fn sorted(entries: &[(u64, Option<u32>)]) -> Vec<(u64, Option<u32>)> {
    let mut all = entries.to_vec();
    // Stable: a block's changes keep their order.
    all.sort_by_key(|&(block, _)| block);
    let mut out: Vec<(u64, Option<u32>)> = Vec::with_capacity(all.len());
    for entry in all {
        match out.last_mut() {
            Some(last) if last.0 == entry.0 => *last = entry,
            _ => out.push(entry),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        /// The changes are a map's (last insert wins, block order) for any
        /// mix of in-order runs and scattered blocks, before and after the
        /// sorts on insert, and after a clear.
        #[test]
        fn changes_are_the_last_of_each_block_in_order(
            steps in prop::collection::vec(
                (0u64..20_000, 1usize..3000, any::<bool>(), any::<bool>(), prop::option::of(any::<u32>())), 1..12),
            clear_at in 0usize..12,
        ) {
            let mut logged = LoggedSums::default();
            let mut model = BTreeMap::new();
            for (i, &(start, count, run, twice, crc)) in steps.iter().enumerate() {
                if i == clear_at {
                    logged.clear();
                    model.clear();
                }
                for k in 0..count as u64 {
                    // A run of blocks in order, or blocks scattered over a
                    // range; each changed once, or twice in a row.
                    let block = if run { start + k } else { (start + k * 7919) % 20_000 };
                    for again in 0..=u32::from(twice) {
                        let crc = crc.map(|c| c ^ k as u32 ^ again);
                        logged.insert(block, crc);
                        model.insert(block, crc);
                    }
                }
                let want: Vec<(u64, Option<u32>)> = model.iter().map(|(&b, &c)| (b, c)).collect();
                prop_assert_eq!(logged.changes(), &want[..]);
                prop_assert_eq!(logged.is_empty(), model.is_empty());
            }
        }
    }
}

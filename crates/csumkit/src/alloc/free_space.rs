//! The per-group free-space tree of the incremental bitmap checksums: the group's free
//! extents indexed by start (to find the run at or after a goal) and by
//! length (to know at once whether any run can satisfy a request), so that a
//! search costs O(log n) instead of a bitmap scan. Positions are
//! group-relative block numbers.

use std::collections::{BTreeMap, BTreeSet};

/// The free extents of one group.
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub struct FreeSpace {
    by_start: BTreeMap<u32, u32>,
    by_len: BTreeSet<(u32, u32)>,
}

impl FreeSpace {
    /// The index of the given maximal free runs.
    pub fn from_runs(runs: impl IntoIterator<Item = (u32, u32)>) -> Self {
        let mut tree = FreeSpace::default();
        for (start, len) in runs {
            tree.add(start, len);
        }
        tree
    }

    fn add(&mut self, start: u32, len: u32) {
        debug_assert!(len > 0);
        self.by_start.insert(start, len);
        self.by_len.insert((len, start));
    }

    fn remove_extent(&mut self, start: u32, len: u32) {
        let removed = self.by_start.remove(&start);
        debug_assert_eq!(removed, Some(len));
        self.by_len.remove(&(len, start));
    }

    /// The free extents in order of start, as `(start, len)`.
    #[cfg(test)]
    pub fn runs(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.by_start.iter().map(|(&s, &l)| (s, l))
    }

    /// Length of the longest free extent (0 when full).
    #[cfg(test)]
    pub fn max_len(&self) -> u32 {
        self.by_len.last().map_or(0, |&(len, _)| len)
    }

    /// The free extent containing block `at`, as `(start, len)`.
    pub fn containing(&self, at: u32) -> Option<(u32, u32)> {
        let (&start, &len) = self.by_start.range(..=at).next_back()?;
        (at < start + len).then_some((start, len))
    }

    /// The first free extent starting in `[from, to)`.
    pub fn first_in(&self, from: u32, to: u32) -> Option<(u32, u32)> {
        self.by_start.range(from..to).next().map(|(&s, &l)| (s, l))
    }

    /// The first free extent starting in `[from, to)` at least `want` long.
    ///
    /// Walks two indexes in lockstep: extents in start order from `from`
    /// (done at the first long enough) and extents at least `want` long
    /// (done when exhausted: the answer is the least start among them). The
    /// cost is twice the shorter walk, so many small holes before the first
    /// fit cost no more than the few extents that could fit.
    pub fn first_fit_in(&self, from: u32, to: u32, want: u32) -> Option<(u32, u32)> {
        let mut in_order = self.by_start.range(from..to).map(|(&s, &l)| (s, l));
        let mut long_enough = self.by_len.range((want, 0)..).map(|&(l, s)| (s, l));
        let mut best: Option<(u32, u32)> = None;
        loop {
            match in_order.next() {
                Some((s, l)) if l >= want => return Some((s, l)),
                Some(_) => {}
                None => return None,
            }
            match long_enough.next() {
                Some((s, l)) => {
                    if (from..to).contains(&s) && best.is_none_or(|(b, _)| s < b) {
                        best = Some((s, l));
                    }
                }
                None => return best,
            }
        }
    }

    /// Marks `[start, start + len)` used; it lies inside one free extent.
    pub fn allocate(&mut self, start: u32, len: u32) {
        let (ext_start, ext_len) = self.containing(start).expect("allocating a block that is not free");
        debug_assert!(start + len <= ext_start + ext_len, "allocation runs past a free extent");
        self.remove_extent(ext_start, ext_len);
        if start > ext_start {
            self.add(ext_start, start - ext_start);
        }
        let tail = ext_start + ext_len - (start + len);
        if tail > 0 {
            self.add(start + len, tail);
        }
    }

    /// Marks `[start, start + len)` free, merging with free neighbours.
    pub fn free(&mut self, start: u32, len: u32) {
        let mut new_start = start;
        let mut new_len = len;
        if let Some((&prev_start, &prev_len)) = self.by_start.range(..start).next_back() {
            debug_assert!(prev_start + prev_len <= start, "freeing a block that is already free");
            if prev_start + prev_len == start {
                self.remove_extent(prev_start, prev_len);
                new_start = prev_start;
                new_len += prev_len;
            }
        }
        if let Some(next_len) = self.by_start.get(&(start + len)).copied() {
            self.remove_extent(start + len, next_len);
            new_len += next_len;
        }
        self.add(new_start, new_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_splits_and_free_merges() {
        let mut tree = FreeSpace::from_runs([(0, 100)]);
        tree.allocate(10, 5);
        assert_eq!(tree.runs().collect::<Vec<_>>(), vec![(0, 10), (15, 85)]);
        assert_eq!(tree.max_len(), 85);
        assert_eq!(tree.containing(12), None);
        assert_eq!(tree.containing(15), Some((15, 85)));
        assert_eq!(tree.first_fit_in(0, 100, 11), Some((15, 85)));
        assert_eq!(tree.first_fit_in(0, 15, 11), None);
        tree.allocate(0, 10);
        tree.allocate(90, 10);
        assert_eq!(tree.runs().collect::<Vec<_>>(), vec![(15, 75)]);
        tree.free(10, 5);
        tree.free(0, 10);
        tree.free(90, 10);
        assert_eq!(tree.runs().collect::<Vec<_>>(), vec![(0, 100)]);
        assert_eq!(tree.by_len.len(), 1);
    }
}

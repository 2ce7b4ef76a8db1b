//! A set of integers kept as disjoint half-open ranges: what a large free
//! or write notes in one entry instead of one per page or block.

use std::collections::BTreeMap;

/// Disjoint, non-adjacent `[start, end)` ranges, by start.
#[derive(Debug, Default)]
pub(crate) struct RangeSet {
    ranges: BTreeMap<usize, usize>,
}

impl RangeSet {
    /// Adds `[start, end)`, merging it with the ranges it overlaps or touches.
    pub(crate) fn insert(&mut self, mut start: usize, mut end: usize) {
        if start >= end {
            return;
        }
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let absorbed: Vec<usize> = self.ranges.range(start..=end).map(|(&s, _)| s).collect();
        for s in absorbed {
            let e = self.ranges.remove(&s).expect("listed above");
            end = end.max(e);
        }
        self.ranges.insert(start, end);
    }

    pub(crate) fn contains(&self, x: usize) -> bool {
        self.ranges.range(..=x).next_back().is_some_and(|(_, &e)| x < e)
    }

    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
    }

    /// The ranges, by start.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.ranges.iter().map(|(&s, &e)| (s, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        /// Against the obvious set of every member.
        #[test]
        fn agrees_with_a_set_of_members(ranges in proptest::collection::vec((0usize..200, 0usize..20), 0..40)) {
            let (mut set, mut members) = (RangeSet::default(), BTreeSet::new());
            for (start, len) in ranges {
                set.insert(start, start + len);
                members.extend(start..start + len);
            }
            for x in 0..230 {
                prop_assert_eq!(set.contains(x), members.contains(&x), "{}", x);
            }
            let pairs: Vec<(usize, usize)> = set.ranges.iter().map(|(&s, &e)| (s, e)).collect();
            for w in pairs.windows(2) {
                prop_assert!(w[0].1 < w[1].0, "disjoint and not touching: {:?}", w);
            }
        }
    }
}

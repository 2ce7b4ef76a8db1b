//! How a changed structure's checksum is moved rather than recomputed:
//! the byte runs two versions differ in, and CRC32C `splice` over each.

use csumkit::crc32c;

/// The smallest structure whose checksum is moved by splice: at 1 KiB a
/// full CRC32C costs what a
/// splice does, below it less. Inodes, descriptors and the superblock are
/// recomputed; bitmaps (always `flip_range`), directory, extent and xattr
/// blocks are moved.
pub(crate) const SPLICE_MIN_BYTES: usize = 1024;

/// Equal bytes between two changes that still join them into one run: a
/// splice costs about as much as a CRC over this many bytes.
const RUN_GAP_MAX: usize = 64;

/// The changed byte runs of two equal-length buffers: (offset, old, new),
/// runs closer than [`RUN_GAP_MAX`] joined. Compared eight bytes at a time.
pub(crate) fn changes<'a>(old: &'a [u8], new: &'a [u8]) -> Vec<(usize, &'a [u8], &'a [u8])> {
    debug_assert_eq!(old.len(), new.len());
    let word = |b: &[u8], i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut note = |i: usize| match runs.last_mut() {
        Some((_, end)) if i <= *end + RUN_GAP_MAX => *end = i + 1,
        _ => runs.push((i, i + 1)),
    };
    let words = old.len() / 8 * 8;
    for i in (0..words).step_by(8) {
        let diff = word(old, i) ^ word(new, i);
        if diff != 0 {
            // The first and last differing bytes of the word.
            note(i + diff.trailing_zeros() as usize / 8);
            note(i + 7 - diff.leading_zeros() as usize / 8);
        }
    }
    for i in (words..old.len()).filter(|&i| old[i] != new[i]) {
        note(i);
    }
    runs.into_iter().map(|(s, e)| (s, &old[s..e], &new[s..e])).collect()
}

/// `crc` of a `total`-byte buffer moved by `splice` over every change.
pub(crate) fn splice_all(mut crc: u32, total: usize, old: &[u8], new: &[u8]) -> u32 {
    for (at, o, n) in changes(old, new) {
        crc = crc32c::splice(crc, total as u64, at as u64, o, n).expect("changes lie inside the buffer");
    }
    crc
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        /// The changed runs cover every changed byte and nothing outside
        /// them differs; the checksum moved over them is the recomputed one.
        #[test]
        fn changes_cover_every_changed_byte(old in proptest::collection::vec(any::<u8>(), 0..600),
                                            edits in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..12)) {
            let mut new = old.clone();
            for (at, byte) in edits {
                if !new.is_empty() {
                    let at = at % new.len();
                    new[at] = byte;
                }
            }
            let runs = super::changes(&old, &new);
            let mut covered = vec![false; old.len()];
            for (at, o, n) in &runs {
                prop_assert_eq!(&old[*at..*at + o.len()], *o);
                prop_assert_eq!(&new[*at..*at + n.len()], *n);
                covered[*at..*at + o.len()].iter_mut().for_each(|c| *c = true);
                prop_assert!(o.first() != n.first() && o.last() != n.last(), "a run starts and ends on a change");
            }
            for i in 0..old.len() {
                prop_assert!(covered[i] || old[i] == new[i], "byte {} changed outside every run", i);
            }
            // Runs are joined exactly when few equal bytes part them: one
            // splice each, never a splice over a long equal stretch.
            for pair in runs.windows(2) {
                let (end, next) = (pair[0].0 + pair[0].1.len(), pair[1].0);
                prop_assert!(next > end + super::RUN_GAP_MAX, "runs at {} and {} should be one", end, next);
            }
            for (at, o, n) in &runs {
                let mut equal = 0;
                for i in 0..o.len() {
                    equal = if o[i] == n[i] { equal + 1 } else { 0 };
                    prop_assert!(equal <= super::RUN_GAP_MAX, "{} equal bytes inside the run at {}", equal, at);
                }
            }
            let crc = csumkit::crc32c::raw_update(7, &old);
            prop_assert_eq!(super::splice_all(crc, old.len(), &old, &new), csumkit::crc32c::raw_update(7, &new));
        }
    }
}

//! A block bitmap in Linux bit order (bit `i` is bit `i % 8` of byte `i / 8`),
//! kept as the on-media bytes. Searches go a 64-bit word at a time, like the
//! kernel's `find_next_zero_bit`; words are read little-endian so the order is
//! the same on every host.

/// The bytes of one group's block bitmap. The length is padded to a whole
/// number of 64-bit words; only the first `bits / 8` bytes are on media.
#[derive(Clone, PartialEq, Eq, Debug)]
pub struct Bitmap {
    bytes: Vec<u8>,
    bits: u64,
}

impl Bitmap {
    /// An all-zero (all free) bitmap of `bits` bits; `bits` is a multiple of 8.
    pub fn new(bits: u64) -> Self {
        assert!(bits.is_multiple_of(8), "bitmap of {bits} bits is not whole bytes");
        let words = bits.div_ceil(64) as usize;
        Bitmap { bytes: vec![0; words * 8], bits }
    }

    /// A bitmap over `bytes` (exactly `bits / 8` of them).
    pub fn from_media(bytes: &[u8]) -> Self {
        let mut bitmap = Bitmap::new(bytes.len() as u64 * 8);
        bitmap.bytes[..bytes.len()].copy_from_slice(bytes);
        bitmap
    }

    /// Number of bits.
    pub fn bits(&self) -> u64 {
        self.bits
    }

    /// The on-media bytes (what the checksum covers).
    pub fn as_media(&self) -> &[u8] {
        &self.bytes[..(self.bits / 8) as usize]
    }

    fn word(&self, w: usize) -> u64 {
        u64::from_le_bytes(self.bytes[w * 8..w * 8 + 8].try_into().expect("8 bytes"))
    }

    fn set_word(&mut self, w: usize, value: u64) {
        self.bytes[w * 8..w * 8 + 8].copy_from_slice(&value.to_le_bytes());
    }

    /// Whether bit `i` is set.
    pub fn test(&self, i: u64) -> bool {
        debug_assert!(i < self.bits);
        self.bytes[(i / 8) as usize] >> (i % 8) & 1 == 1
    }

    /// Inverts bits `[start, start + len)`.
    pub fn flip(&mut self, start: u64, len: u64) {
        debug_assert!(start + len <= self.bits);
        for (w, mask) in word_masks(start, start + len) {
            self.set_word(w, self.word(w) ^ mask);
        }
    }

    /// First bit in `[start, end)` equal to `value`, or `end`.
    fn find_next(&self, start: u64, end: u64, value: bool) -> u64 {
        debug_assert!(end <= self.bits);
        if start >= end {
            return end;
        }
        let invert = if value { 0 } else { u64::MAX };
        let mut w = (start / 64) as usize;
        let mut word = (self.word(w) ^ invert) & (u64::MAX << (start % 64));
        loop {
            if word != 0 {
                let found = w as u64 * 64 + u64::from(word.trailing_zeros());
                return found.min(end);
            }
            w += 1;
            if w as u64 * 64 >= end {
                return end;
            }
            word = self.word(w) ^ invert;
        }
    }

    /// First clear bit in `[start, end)`, or `end`.
    pub fn find_next_zero(&self, start: u64, end: u64) -> u64 {
        self.find_next(start, end, false)
    }

    /// First set bit in `[start, end)`, or `end`.
    pub fn find_next_one(&self, start: u64, end: u64) -> u64 {
        self.find_next(start, end, true)
    }

    /// Number of clear bits in `[start, end)`.
    pub fn count_zeros(&self, start: u64, end: u64) -> u64 {
        word_masks(start, end).map(|(w, mask)| u64::from((!self.word(w) & mask).count_ones())).sum()
    }

    /// The maximal runs of clear bits, as `(start, len)`, in order.
    pub fn free_runs(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let start = self.find_next_zero(at, self.bits);
            if start == self.bits {
                return None;
            }
            let end = self.find_next_one(start, self.bits);
            at = end;
            Some((start, end - start))
        })
    }
}

/// The words covering bits `[start, end)`, each with the mask of its bits
/// in the range.
fn word_masks(start: u64, end: u64) -> impl Iterator<Item = (usize, u64)> {
    let mut i = start;
    std::iter::from_fn(move || {
        if i >= end {
            return None;
        }
        let lo = i % 64;
        let n = (end - i).min(64 - lo);
        let mask = if n == 64 { u64::MAX } else { ((1u64 << n) - 1) << lo };
        let word = (i / 64) as usize;
        i += n;
        Some((word, mask))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_and_count_match_bit_by_bit() {
        let mut bitmap = Bitmap::new(200);
        bitmap.flip(3, 70);
        bitmap.flip(130, 1);
        bitmap.flip(140, 60);
        let naive: Vec<bool> = (0..200).map(|i| bitmap.test(i)).collect();
        for start in 0..200 {
            for end in start..=200 {
                let zero = (start..end).find(|&i| !naive[i as usize]).unwrap_or(end);
                let one = (start..end).find(|&i| naive[i as usize]).unwrap_or(end);
                assert_eq!(bitmap.find_next_zero(start, end), zero);
                assert_eq!(bitmap.find_next_one(start, end), one);
                let zeros = (start..end).filter(|&i| !naive[i as usize]).count() as u64;
                assert_eq!(bitmap.count_zeros(start, end), zeros);
            }
        }
        assert_eq!(bitmap.free_runs().collect::<Vec<_>>(), vec![(0, 3), (73, 57), (131, 9)]);
        assert_eq!(bitmap.as_media().len(), 25);
    }
}

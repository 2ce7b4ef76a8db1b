//! Page-aligned heap buffers: what `O_DIRECT` requires of user memory, and
//! what the kernel copies fastest. No `unsafe`: the storage is over-allocated
//! and the aligned window is found once; moving the buffer moves only the
//! `Vec` header, so the window stays aligned.

use std::ops::{Deref, DerefMut};

/// Alignment of every [`AlignedBuf`] (the page size, and what `O_DIRECT`
/// needs on the usual 512- and 4096-byte sector devices).
pub const ALIGN: usize = 4096;

/// A zero-initialized, [`ALIGN`]-aligned byte buffer of fixed length.
#[derive(Debug)]
pub struct AlignedBuf {
    storage: Vec<u8>,
    start: usize,
    len: usize,
}

impl AlignedBuf {
    /// `len` zero bytes starting at an [`ALIGN`]-aligned address.
    pub fn zeroed(len: usize) -> Self {
        let storage = vec![0u8; len + ALIGN];
        let start = storage.as_ptr().align_offset(ALIGN);
        assert!(start < ALIGN, "a byte pointer can always be aligned");
        AlignedBuf { storage, start, len }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.storage[self.start..self.start + self.len]
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.storage[self.start..self.start + self.len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_after_moves() {
        let buffers: Vec<AlignedBuf> = (0..8).map(|i| AlignedBuf::zeroed(i * 1000 + 1)).collect();
        let moved: Vec<AlignedBuf> = buffers.into_iter().rev().collect();
        for b in &moved {
            assert_eq!(b.as_ptr() as usize % ALIGN, 0);
            assert!(b.iter().all(|&x| x == 0));
        }
    }
}

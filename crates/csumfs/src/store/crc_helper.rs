//! The async-checksum overlap: the CRC32Cs of a write's whole blocks computed on a
//! helper thread while the request thread writes those blocks to the image.
//!
//! The helper lives as long as the volume's data checksums, so a piece
//! costs the helper a wake-up and the request thread a notify, not a
//! thread's start and join per piece (tens of µs with
//! `std::thread::scope`; `file/write.rs`'s `overlap_pays` says when it pays).

use csumkit::crc32c;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// What the helper is asked to do, or has done.
enum Slot {
    Empty,
    /// Bytes to checksum: borrowed from a caller of
    /// [`CrcHelper::checksum_while`], which does not return (nor unwind)
    /// before the helper has put [`Slot::Done`] back.
    Piece {
        at: *const u8,
        len: usize,
        block: usize,
    },
    Done(Vec<u32>),
    Exit,
}

// SAFETY: a `Piece`'s bytes are only read, by the helper, while the caller
// that lent them waits (see `Slot::Piece`); nothing else is shared.
unsafe impl Send for Slot {}

struct Shared {
    slot: Mutex<Slot>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits for the helper's result and empties the slot.
    fn take_done(&self) -> Vec<u32> {
        let mut slot = self.lock();
        loop {
            if let Slot::Done(_) = &*slot {
                let Slot::Done(crcs) = std::mem::replace(&mut *slot, Slot::Empty) else { unreachable!() };
                return crcs;
            }
            slot = self.changed.wait(slot).unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// A thread that checksums one piece at a time for the volume's writes.
pub(crate) struct CrcHelper {
    shared: std::sync::Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// One piece at a time.
    busy: Mutex<()>,
}

impl CrcHelper {
    /// Starts the helper thread.
    ///
    /// # Errors
    /// The thread could not be started.
    pub(crate) fn new() -> std::io::Result<CrcHelper> {
        let shared = std::sync::Arc::new(Shared { slot: Mutex::new(Slot::Empty), changed: Condvar::new() });
        let theirs = std::sync::Arc::clone(&shared);
        let thread = std::thread::Builder::new().name("csumfs-crc".into()).spawn(move || serve(&theirs))?;
        Ok(CrcHelper { shared, thread: Some(thread), busy: Mutex::new(()) })
    }

    /// Runs `work` on this thread while the helper checksums `bytes`, a
    /// `block` at a time (`bytes` is whole blocks); returns the checksums
    /// and what `work` returned. `bytes` is read by the helper only until
    /// this returns — it waits for the helper even when `work` panics.
    pub(crate) fn checksum_while<R>(&self, bytes: &[u8], block: usize, work: impl FnOnce() -> R) -> (Vec<u32>, R) {
        assert!(
            block > 0 && bytes.len().is_multiple_of(block),
            "{} bytes are not whole {block}-byte blocks",
            bytes.len()
        );
        let _one = self.busy.lock().unwrap_or_else(PoisonError::into_inner);
        *self.shared.lock() = Slot::Piece { at: bytes.as_ptr(), len: bytes.len(), block };
        self.shared.changed.notify_all();
        let lent = Lent { shared: &self.shared, returned: false };
        let result = work();
        (lent.take(), result)
    }
}

/// Bytes lent to the helper: dropped without [`Lent::take`] (`work`
/// unwinding), it still waits until the helper is done with them.
struct Lent<'a> {
    shared: &'a Shared,
    returned: bool,
}

impl Lent<'_> {
    fn take(mut self) -> Vec<u32> {
        self.returned = true;
        self.shared.take_done()
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if !self.returned {
            self.shared.take_done();
        }
    }
}

fn serve(shared: &Shared) {
    let mut slot = shared.lock();
    loop {
        match std::mem::replace(&mut *slot, Slot::Empty) {
            Slot::Piece { at, len, block } => {
                drop(slot);
                // SAFETY: the caller that lent these bytes waits for the
                // `Done` below before its borrow ends (`Slot::Piece`).
                let bytes = unsafe { std::slice::from_raw_parts(at, len) };
                let crcs = bytes.chunks_exact(block).map(crc32c::checksum).collect();
                slot = shared.lock();
                *slot = Slot::Done(crcs);
                shared.changed.notify_all();
            }
            Slot::Exit => return,
            other => {
                *slot = other;
                slot = shared.changed.wait(slot).unwrap_or_else(PoisonError::into_inner);
            }
        }
    }
}

impl Drop for CrcHelper {
    fn drop(&mut self) {
        *self.shared.lock() = Slot::Exit;
        self.shared.changed.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The helper's checksums are each block's, in order, for any
        /// number of blocks of any size (one helper, many pieces); `work`
        /// runs and its result comes back.
        #[test]
        fn the_helpers_checksums_are_each_blocks(
            pieces in prop::collection::vec((1usize..70, 1usize..5000, any::<u8>()), 1..12),
        ) {
            let helper = CrcHelper::new().unwrap();
            for (blocks, block, seed) in pieces {
                let bytes: Vec<u8> = (0..blocks * block).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
                let (crcs, ran) = helper.checksum_while(&bytes, block, || seed);
                let want: Vec<u32> = bytes.chunks_exact(block).map(crc32c::checksum).collect();
                prop_assert_eq!(crcs, want);
                prop_assert_eq!(ran, seed);
            }
        }
    }

    /// A `work` that panics: the unwinding waits for the helper (which then
    /// takes the next piece as usual).
    #[test]
    fn a_panicking_work_still_waits_for_the_helper() {
        let helper = CrcHelper::new().unwrap();
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let bytes = vec![7u8; 1 << 20];
            helper.checksum_while(&bytes, 4096, || panic!("work failed"))
        }));
        assert!(caught.is_err());
        let bytes = vec![9u8; 8192];
        let (crcs, ()) = helper.checksum_while(&bytes, 4096, || ());
        assert_eq!(crcs, vec![crc32c::checksum(&[9u8; 4096]); 2]);
    }
}

//! Writes submitted through io_uring, so that the submitting thread itself
//! checksums the buffer while the device reads it (seed 002 without a
//! worker thread): the write goes in, the checksums are computed, then the
//! completion is reaped.

use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::RawFd;

/// One ring, for one write in flight at a time.
pub(super) struct Ring {
    /// `None` once a submission failed: the ring is dropped (closing it
    /// discards any entry the kernel did not take) and writes fall back.
    ring: Option<IoUring>,
}

/// What became of a write handed to [`Ring::write_during`].
pub(super) enum Outcome<T> {
    /// The kernel took the write: its result (a short count is the
    /// caller's to continue) and `meanwhile`'s value.
    Submitted(io::Result<usize>, T),
    /// The ring could not take it (and is gone): write another way.
    NotSubmitted(T),
}

impl Ring {
    /// A ring, or `None` where the kernel (or a seccomp filter) refuses one.
    pub(super) fn new() -> Option<Ring> {
        IoUring::new(2).ok().map(|ring| Ring { ring: Some(ring) })
    }

    /// Writes a prefix of `data` at `offset` through the ring, running
    /// `meanwhile` while the write is in flight.
    ///
    /// `punt` asks the kernel to run the write on one of its workers: a
    /// buffered write would otherwise copy inline, inside the submission,
    /// and nothing would overlap. (An `O_DIRECT` write only queues the I/O.)
    pub(super) fn write_during<T>(
        &mut self,
        fd: RawFd,
        offset: u64,
        data: &[u8],
        punt: bool,
        meanwhile: impl FnOnce() -> T,
    ) -> Outcome<T> {
        let Some(ring) = self.ring.as_mut() else {
            return Outcome::NotSubmitted(meanwhile());
        };
        // One submission carries at most 1 GiB; the caller continues the rest.
        let len = data.len().min(1 << 30) as u32;
        let flags = if punt { squeue::Flags::ASYNC } else { squeue::Flags::empty() };
        let entry = opcode::Write::new(types::Fd(fd), data.as_ptr(), len).offset(offset).build().flags(flags);
        // SAFETY: `data` stays borrowed (alive, unmodified) until the
        // completion is reaped below — `InFlight` reaps it even if
        // `meanwhile` unwinds — or, if the kernel never took the entry,
        // until the ring is closed; so the kernel never reads freed memory.
        let pushed = unsafe { ring.submission().push(&entry) }.is_ok();
        let submitted = pushed
            && loop {
                match ring.submit() {
                    Ok(n) => break n == 1,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(_) => break false,
                }
            };
        if !submitted {
            self.ring = None;
            return Outcome::NotSubmitted(meanwhile());
        }
        let mut in_flight = InFlight { ring, pending: true };
        let value = meanwhile();
        Outcome::Submitted(in_flight.reap(), value)
    }
}

/// A submitted write whose completion has not been reaped yet.
struct InFlight<'a> {
    ring: &'a mut IoUring,
    pending: bool,
}

impl InFlight<'_> {
    fn reap(&mut self) -> io::Result<usize> {
        loop {
            if let Some(cqe) = self.ring.completion().next() {
                self.pending = false;
                let res = cqe.result();
                return if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as usize) };
            }
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The write's fate is unknown and its memory may still be
                    // read: this cannot be recovered from safely.
                    panic!("io_uring: waiting for a write in flight failed: {e}");
                }
            }
        }
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.pending {
            let _ = self.reap();
        }
    }
}

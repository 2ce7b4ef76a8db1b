//! Writes submitted through io_uring, so that the submitting thread itself
//! checksums a buffer while the device reads it (async data checksums without a worker
//! thread), and can go on to fill the next buffer while up to `depth`
//! writes are in flight.
//!
//! The ring owns every buffer the kernel may still read: a buffer goes in
//! with its submission and comes back only when its completion is reaped,
//! and dropping the ring reaps whatever is still in flight first. No
//! borrow can outlive the kernel's use of the memory.

use super::{AlignedBuf, DEPTH_MAX};
use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::RawFd;

/// `io_uring_enter(2)`: wait for completions.
const IORING_ENTER_GETEVENTS: u32 = 1;

/// One ring with up to `depth` writes in flight.
pub(super) struct Ring {
    /// `None` once a submission failed: nothing is in flight any more, and
    /// writes fall back to the sink.
    ring: Option<IoUring>,
    depth: usize,
    /// Submitted writes: the submission's id and the buffer it reads.
    in_flight: Vec<(u64, AlignedBuf)>,
    /// Results reaped while waiting for another id.
    reaped: Vec<(u64, i32)>,
    next_id: u64,
}

impl Ring {
    /// A ring for `depth` (1..=[`DEPTH_MAX`]) writes in flight, or `None`
    /// where the kernel (or a seccomp filter) refuses one.
    pub(super) fn new(depth: usize) -> Option<Ring> {
        assert!((1..=DEPTH_MAX).contains(&depth), "depth {depth} outside 1..={DEPTH_MAX}");
        let entries = depth.next_power_of_two().max(2) as u32;
        let ring = IoUring::new(entries).ok()?;
        Some(Ring { ring: Some(ring), depth, in_flight: Vec::with_capacity(depth), reaped: Vec::new(), next_id: 0 })
    }

    /// Whether another write can be submitted without reaping one first.
    pub(super) fn has_room(&self) -> bool {
        self.ring.is_some() && self.in_flight.len() < self.depth
    }

    /// Submits a write of a prefix of `buffer` at `offset`; the ring keeps
    /// the buffer until [`reap`](Self::reap) returns it. `Err` hands the
    /// buffer back when the write could not be submitted (the ring is then
    /// closed, after reaping what was in flight): write it another way.
    ///
    /// `punt` asks the kernel to run the write on one of its workers: a
    /// buffered write would otherwise copy inline, inside the submission,
    /// and nothing would overlap. (An `O_DIRECT` write only queues the I/O.)
    pub(super) fn submit(&mut self, fd: RawFd, offset: u64, buffer: AlignedBuf, punt: bool) -> Result<u64, AlignedBuf> {
        assert!(self.in_flight.len() < self.depth, "submit past the ring's depth");
        let Some(ring) = self.ring.as_mut() else {
            return Err(buffer);
        };
        let id = self.next_id;
        // One submission carries at most 1 GiB; the caller continues the rest.
        let len = buffer.len().min(1 << 30) as u32;
        let flags = if punt { squeue::Flags::ASYNC } else { squeue::Flags::empty() };
        let entry =
            opcode::Write::new(types::Fd(fd), buffer.as_ptr(), len).offset(offset).build().flags(flags).user_data(id);
        // SAFETY: the buffer moves into `in_flight` below and leaves it only
        // through `reap`, after its completion; if the kernel never takes
        // the entry, the ring is closed (discarding it) before the buffer is
        // handed back. Moving an `AlignedBuf` does not move its heap memory.
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
            self.close();
            return Err(buffer);
        }
        self.next_id += 1;
        self.in_flight.push((id, buffer));
        Ok(id)
    }

    /// The data of the write `id`, still in flight (the kernel only reads it).
    pub(super) fn data(&self, id: u64) -> &[u8] {
        &self.in_flight.iter().find(|(i, _)| *i == id).expect("a write in flight").1
    }

    /// Waits for the write `id` and hands back its result (a short count is
    /// the caller's to continue) and its buffer.
    pub(super) fn reap(&mut self, id: u64) -> (io::Result<usize>, AlignedBuf) {
        let res = loop {
            if let Some(at) = self.reaped.iter().position(|(i, _)| *i == id) {
                break self.reaped.swap_remove(at).1;
            }
            self.wait_one();
        };
        let at = self.in_flight.iter().position(|(i, _)| *i == id).expect("a write in flight");
        let (_, buffer) = self.in_flight.swap_remove(at);
        let result = if res < 0 { Err(io::Error::from_raw_os_error(-res)) } else { Ok(res as usize) };
        (result, buffer)
    }

    /// Moves one completion into `reaped`, waiting for it if need be.
    fn wait_one(&mut self) {
        let ring = self.ring.as_mut().expect("writes in flight keep the ring open");
        loop {
            if let Some(cqe) = ring.completion().next() {
                self.reaped.push((cqe.user_data(), cqe.result()));
                return;
            }
            // Wait without submitting: an entry pushed by a `submit` that
            // failed must never reach the kernel after its buffer went back.
            // SAFETY: no submissions, wait for one completion, no argument.
            match unsafe { ring.submitter().enter::<libc::sigset_t>(0, 1, IORING_ENTER_GETEVENTS, None) } {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // The writes' fate is unknown and their memory may still
                    // be read: this cannot be recovered from safely.
                    panic!("io_uring: waiting for a write in flight failed: {e}");
                }
            }
        }
    }

    /// Reaps everything in flight (results kept for `reap`), then drops
    /// the ring, discarding any entry the kernel did not take.
    fn close(&mut self) {
        while self.reaped.len() < self.in_flight.len() {
            self.wait_one();
        }
        self.ring = None;
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.ring.is_some() {
            self.close();
        }
    }
}

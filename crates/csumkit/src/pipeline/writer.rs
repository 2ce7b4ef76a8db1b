//! The write path: per-block checksums computed before the write (`Sync`),
//! or while the write is in flight: by a worker thread (`Async`)
//! or by the writing thread itself while io_uring carries the write (`Uring`).

use super::{AlignedBuf, ChecksumStore, Sink};
use crate::{Algorithm, Error};
use std::collections::VecDeque;
use std::io;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;

/// When the checksums are computed.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Checksum, then write: the time is the sum of both.
    Sync,
    /// Checksum on a worker thread while the write runs; the write completes
    /// when both have: the time is the longer of the two.
    Async,
    /// Submit the write through io_uring and checksum on the calling thread
    /// while it runs; no worker thread. Where io_uring is unavailable (not
    /// Linux, refused by the kernel or a seccomp filter) or the sink is not
    /// one file ([`Sink::raw_target`]), the writer runs as `Async`:
    /// [`Writer::mode`] says which.
    Uring,
}

impl Mode {
    /// `sync` or `async`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Sync => "sync",
            Mode::Async => "async",
            Mode::Uring => "uring",
        }
    }
}

/// A finished write: the buffer, returned for reuse, and its checksums.
#[derive(Debug)]
pub struct Completed {
    /// The caller's buffer, now free to refill.
    pub buffer: AlignedBuf,
    /// One checksum per block, as recorded in the store.
    pub checksums: Vec<u64>,
}

/// One checksum job: the worker holds a reference to the write's buffer
/// until it has finished reading it.
struct Job {
    buffer: Arc<AlignedBuf>,
    block_size: usize,
    algorithm: Algorithm,
}

struct Worker {
    jobs: Option<mpsc::Sender<Job>>,
    results: mpsc::Receiver<Vec<u64>>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    fn spawn() -> Result<Worker, Error> {
        let (jobs, job_rx) = mpsc::channel::<Job>();
        let (result_tx, results) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("csumkit-checksum".into())
            .spawn(move || {
                while let Some(job) = receive(&job_rx) {
                    let checksums = block_checksums(&job.buffer, job.block_size, job.algorithm);
                    // Let go of the buffer *before* replying: when the writer
                    // hears back, it is again the buffer's only owner.
                    drop(job.buffer);
                    if result_tx.send(checksums).is_err() {
                        break;
                    }
                }
            })
            .map_err(|source| Error::Io { context: "cannot start the checksum worker".into(), source })?;
        Ok(Worker { jobs: Some(jobs), results, thread: Some(thread) })
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        drop(self.jobs.take()); // ends the worker's loop
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// How long a waiting thread spins before it sleeps. Waking a sleeping
/// thread costs tens of microseconds on a VM, a tenth of a 1 MiB write at
/// memory speed; a write arrives (or its checksums come back) sooner than
/// that in a busy pipeline, and an idle one sleeps after this.
const SPIN: std::time::Duration = std::time::Duration::from_micros(50);

/// The next message, spinning briefly before blocking; `None` once the
/// other side is gone.
fn receive<M>(rx: &mpsc::Receiver<M>) -> Option<M> {
    let start = std::time::Instant::now();
    loop {
        match rx.try_recv() {
            Ok(message) => return Some(message),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) if start.elapsed() < SPIN => std::hint::spin_loop(),
            Err(mpsc::TryRecvError::Empty) => return rx.recv().ok(),
        }
    }
}

fn block_checksums(data: &[u8], block_size: usize, algorithm: Algorithm) -> Vec<u64> {
    data.chunks(block_size).map(|block| algorithm.checksum(block)).collect()
}

/// Writes whole blocks to a [`Sink`] and records one checksum per block in
/// a [`ChecksumStore`].
///
/// Why the patch series' use-after-free cannot happen here: [`write`](Self::write)
/// and [`submit`](Self::submit) take the buffer by value, so the caller
/// cannot touch or free it while the write is in flight. In `Async` mode the
/// buffer is shared with the checksum worker through an `Arc`; the worker
/// drops its reference before it replies, the writer waits for that reply
/// even when the I/O failed, and only then takes the buffer back
/// (`Arc::try_unwrap`, which cannot succeed while the worker still holds
/// it). In `Uring` mode the ring owns the buffer from submission until its
/// completion is reaped, and reaps everything in flight before it is
/// dropped. The buffer comes back in [`Completed`]. The borrow checker and
/// ownership, not a convention, keep the buffer alive for as long as anyone
/// reads it.
///
/// Touching a buffer that was handed to a write does not compile:
///
/// ```compile_fail,E0382
/// use csumkit::pipeline::{AlignedBuf, FileSink, MemoryStore, Mode, Writer};
/// let sink = FileSink::create(std::path::Path::new("/tmp/x"), false)?;
/// let mut writer = Writer::new(sink, MemoryStore::default(), Mode::Async, 4096, csumkit::Algorithm::Crc32c)?;
/// let mut buffer = AlignedBuf::zeroed(4096);
/// let done = writer.write(0, buffer)?;
/// buffer[0] = 1; // error[E0382]: the write owns it; use `done.buffer`
/// # Ok::<(), csumkit::Error>(())
/// ```
pub struct Writer<S: Sink, T: ChecksumStore> {
    sink: S,
    store: T,
    mode: Mode,
    block_size: usize,
    algorithm: Algorithm,
    worker: Option<Worker>,
    /// Writes submitted and not yet completed, oldest first.
    queue: VecDeque<Submitted>,
    depth: usize,
    #[cfg(target_os = "linux")]
    ring: Option<super::uring::Ring>,
}

/// Largest [`Writer::with_depth`]: writes in flight at once.
pub const DEPTH_MAX: usize = 64;

/// A submitted write awaiting [`Writer::complete`].
enum Submitted {
    /// Written already (every mode but `Uring`, or its fallback).
    Finished { offset: u64, buffer: AlignedBuf, written: io::Result<()>, checksums: io::Result<Vec<u64>> },
    /// In the ring, its checksums computed.
    #[cfg(target_os = "linux")]
    InRing { offset: u64, len: u64, id: u64, checksums: Vec<u64> },
}

impl Submitted {
    fn range(&self) -> (u64, u64) {
        match self {
            Submitted::Finished { offset, buffer, .. } => (*offset, *offset + buffer.len() as u64),
            #[cfg(target_os = "linux")]
            Submitted::InRing { offset, len, .. } => (*offset, *offset + len),
        }
    }
}

impl<S: Sink, T: ChecksumStore> Writer<S, T> {
    /// A writer of `block_size`-byte blocks (a power of two from 512 B to
    /// 1 MiB) checksummed with `algorithm`, one write in flight at a time.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad block size; [`Error::Io`] if the worker
    /// thread cannot start.
    pub fn new(sink: S, store: T, mode: Mode, block_size: usize, algorithm: Algorithm) -> Result<Self, Error> {
        Self::with_depth(sink, store, mode, block_size, algorithm, 1)
    }

    /// As [`new`](Self::new), with up to `depth` (1 to [`DEPTH_MAX`]) writes
    /// [`submit`](Self::submit)ted and not yet [`complete`](Self::complete)d.
    /// In `Uring` mode they are in flight together: the caller fills its
    /// next buffer while the device still writes the last ones. The other
    /// modes finish each write inside `submit`. A writer dropped with writes
    /// in flight waits for them but records nothing, as after a crash: their
    /// blocks keep their old checksums, which no longer match if the data
    /// landed. [`into_parts`](Self::into_parts) completes them.
    ///
    /// # Errors
    /// As [`new`](Self::new), and [`Error::Invalid`] for a bad depth.
    pub fn with_depth(
        sink: S,
        store: T,
        mode: Mode,
        block_size: usize,
        algorithm: Algorithm,
        depth: usize,
    ) -> Result<Self, Error> {
        if !block_size.is_power_of_two() || !(512..=1 << 20).contains(&block_size) {
            return Err(Error::Invalid {
                what: "block size",
                detail: format!("{block_size} is not a power of two from 512 to 1048576"),
            });
        }
        if !(1..=DEPTH_MAX).contains(&depth) {
            return Err(Error::Invalid { what: "depth", detail: format!("{depth} is not from 1 to {DEPTH_MAX}") });
        }
        #[cfg(target_os = "linux")]
        let ring = match (mode, sink.raw_target()) {
            (Mode::Uring, Some(_)) => super::uring::Ring::new(depth),
            _ => None,
        };
        #[cfg(not(target_os = "linux"))]
        let ring: Option<()> = None;
        let mode = if mode == Mode::Uring && ring.is_none() { Mode::Async } else { mode };
        let worker = match mode {
            Mode::Async => Some(Worker::spawn()?),
            Mode::Sync | Mode::Uring => None,
        };
        Ok(Writer {
            sink,
            store,
            mode,
            block_size,
            algorithm,
            worker,
            queue: VecDeque::with_capacity(depth),
            depth,
            #[cfg(target_os = "linux")]
            ring,
        })
    }

    /// The mode in effect ([`Mode::Uring`] falls back to [`Mode::Async`]).
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// The store.
    pub fn store(&self) -> &T {
        &self.store
    }

    /// How many writes may be submitted and not yet completed.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Writes submitted and not yet completed.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }

    /// The sink and the store, after completing every submitted write
    /// (recording its checksums, or invalidating its range if it failed).
    pub fn into_parts(mut self) -> (S, T) {
        while self.complete().is_some() {}
        drop(self.worker.take());
        let Writer { sink, store, .. } = self;
        (sink, store)
    }

    /// Writes `buffer` at byte `offset` (both whole blocks), then records its
    /// blocks' checksums: [`submit`](Self::submit) and
    /// [`complete`](Self::complete) in one, with nothing else in flight.
    /// A failed write records none and invalidates the range's old ones: the
    /// media under them may have changed.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an offset or length that is not whole blocks,
    /// an empty buffer, or writes still in flight; [`Error::Io`] if the data
    /// or checksums cannot be written (a write that makes no progress is
    /// `WriteZero`).
    pub fn write(&mut self, offset: u64, buffer: AlignedBuf) -> Result<Completed, Error> {
        if !self.queue.is_empty() {
            return Err(Error::Invalid {
                what: "write",
                detail: format!("{} submitted writes are not completed yet", self.queue.len()),
            });
        }
        self.submit(offset, buffer)?;
        self.complete().expect("the write just submitted")
    }

    /// Starts writing `buffer` at byte `offset` (both whole blocks) and
    /// computes its checksums; [`complete`](Self::complete) finishes the
    /// oldest submitted write. In `Uring` mode the write is still in flight
    /// when this returns; the other modes finish it here.
    ///
    /// # Errors
    /// [`Error::Invalid`], handing nothing to the device, for an offset or
    /// length that is not whole blocks, an empty buffer, `depth` writes
    /// already in flight, or a range that overlaps one in flight (the
    /// device may write them in any order).
    pub fn submit(&mut self, offset: u64, buffer: AlignedBuf) -> Result<(), Error> {
        let bs = self.block_size as u64;
        let invalid = |detail: String| Err(Error::Invalid { what: "write", detail });
        if buffer.is_empty() || !offset.is_multiple_of(bs) || !(buffer.len() as u64).is_multiple_of(bs) {
            return invalid(format!("{} bytes at offset {offset}: must be whole {bs}-byte blocks", buffer.len()));
        }
        if self.queue.len() == self.depth {
            return invalid(format!("{} writes in flight already: complete one first", self.depth));
        }
        let Some(end) = offset.checked_add(buffer.len() as u64) else {
            return invalid(format!("{} bytes at offset {offset} pass the largest offset", buffer.len()));
        };
        if let Some((from, to)) = self.queue.iter().map(Submitted::range).find(|&(from, to)| offset < to && from < end)
        {
            return invalid(format!("bytes [{offset}, {end}) overlap [{from}, {to}), still in flight"));
        }
        #[cfg(target_os = "linux")]
        let buffer = match (self.ring.as_mut(), self.sink.raw_target()) {
            (Some(ring), Some((fd, direct))) if ring.has_room() => match ring.submit(fd, offset, buffer, !direct) {
                Ok(id) => {
                    let checksums = block_checksums(ring.data(id), self.block_size, self.algorithm);
                    let len = end - offset;
                    self.queue.push_back(Submitted::InRing { offset, len, id, checksums });
                    return Ok(());
                }
                Err(buffer) => buffer, // the ring is closed: write it here
            },
            _ => buffer,
        };
        let (written, buffer, checksums) = match &self.worker {
            None => {
                let checksums = block_checksums(&buffer, self.block_size, self.algorithm);
                let written = write_all_at(&mut self.sink, offset, &buffer);
                (written, buffer, Ok(checksums))
            }
            Some(worker) => {
                let shared = Arc::new(buffer);
                let job = Job { buffer: Arc::clone(&shared), block_size: self.block_size, algorithm: self.algorithm };
                let sent = worker.jobs.as_ref().expect("worker running").send(job).is_ok();
                let written = write_all_at(&mut self.sink, offset, &shared);
                // Wait for the worker even if the write failed: it is still reading.
                let checksums = if sent { receive(&worker.results) } else { None };
                let buffer = Arc::try_unwrap(shared).expect("the worker releases the buffer before replying");
                (written, buffer, checksums.ok_or_else(|| io::Error::other("the checksum worker stopped")))
            }
        };
        self.queue.push_back(Submitted::Finished { offset, buffer, written, checksums });
        Ok(())
    }

    /// Finishes the oldest submitted write: waits for its I/O, then records
    /// its checksums (or, if it failed, invalidates its range's). `None`
    /// when nothing is in flight.
    ///
    /// # Errors
    /// [`Error::Io`] if the data or checksums could not be written.
    pub fn complete(&mut self) -> Option<Result<Completed, Error>> {
        let (offset, buffer, written, checksums) = match self.queue.pop_front()? {
            Submitted::Finished { offset, buffer, written, checksums } => (offset, buffer, written, checksums),
            #[cfg(target_os = "linux")]
            Submitted::InRing { offset, id, checksums, .. } => {
                let (result, buffer) = self.ring.as_mut().expect("writes in flight keep the ring").reap(id);
                let written = match result {
                    Ok(0) => Err(io::Error::new(io::ErrorKind::WriteZero, "the device accepted no bytes")),
                    // A short write is continued, as write_all_at does.
                    Ok(n) => write_all_at(&mut self.sink, offset + n as u64, &buffer[n.min(buffer.len())..]),
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => write_all_at(&mut self.sink, offset, &buffer),
                    Err(e) => Err(e),
                };
                (offset, buffer, written, Ok(checksums))
            }
        };
        Some(self.finish(offset, buffer, written, checksums))
    }

    /// Records the checksums of a write that succeeded, or invalidates the
    /// range's old ones after one that failed.
    fn finish(
        &mut self,
        offset: u64,
        buffer: AlignedBuf,
        written: io::Result<()>,
        checksums: io::Result<Vec<u64>>,
    ) -> Result<Completed, Error> {
        let bs = self.block_size as u64;
        let (first_block, blocks) = (offset / bs, buffer.len() as u64 / bs);
        let context = |what: &str| format!("{what} blocks [{first_block}, {})", first_block + blocks);
        let result = written.map_err(|e| (context("writing"), e)).and_then(|()| {
            let checksums = checksums.map_err(|e| (context("checksumming"), e))?;
            self.store.record(first_block, &checksums).map_err(|e| (context("recording checksums of"), e))?;
            Ok(checksums)
        });
        match result {
            Ok(checksums) => Ok(Completed { buffer, checksums }),
            Err((context, source)) => {
                // Best effort: the write's own error is the one to report.
                let _ = self.store.invalidate(first_block, blocks);
                Err(Error::Io { context, source })
            }
        }
    }

    /// Makes the completed writes durable: the data ([`Sink::sync`]), then
    /// their checksums ([`ChecksumStore::sync`]), in that order, as a file
    /// system commits data before the checksums naming it. Writes still in
    /// flight are not covered: complete them first.
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn sync(&mut self) -> Result<(), Error> {
        self.sink.sync().map_err(|source| Error::Io { context: "syncing written data".into(), source })?;
        self.store.sync().map_err(|source| Error::Io { context: "syncing checksums".into(), source })
    }
}

/// Writes all of `data`, continuing after short writes; a write that makes
/// no progress is an error rather than a loop.
fn write_all_at<S: Sink>(sink: &mut S, offset: u64, data: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < data.len() {
        match sink.write_at(offset + done as u64, &data[done..]) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "the device accepted no bytes")),
            Ok(n) => done += n.min(data.len() - done),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

//! The write path: per-block checksums computed before the write (`Sync`),
//! or while the write is in flight (seed 002): by a worker thread (`Async`)
//! or by the writing thread itself while io_uring carries the write (`Uring`).

use super::{AlignedBuf, ChecksumStore, Sink};
use crate::{Algorithm, Error};
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
/// Why the seed's use-after-free cannot happen here: [`write`](Self::write)
/// takes the buffer by value, so the caller cannot touch or free it while
/// the write is in flight. In `Async` mode the buffer is shared with the
/// checksum worker through an `Arc`; the worker drops its reference before
/// it replies, the writer waits for that reply even when the I/O failed,
/// and only then takes the buffer back (`Arc::try_unwrap`, which cannot
/// succeed while the worker still holds it) to hand it to the caller in
/// [`Completed`]. The borrow checker and the reference count, not a
/// convention, keep the buffer alive for as long as anyone reads it.
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
    #[cfg(target_os = "linux")]
    ring: Option<super::uring::Ring>,
}

impl<S: Sink, T: ChecksumStore> Writer<S, T> {
    /// A writer of `block_size`-byte blocks (a power of two from 512 B to
    /// 1 MiB) checksummed with `algorithm`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad block size; [`Error::Io`] if the worker
    /// thread cannot start.
    pub fn new(sink: S, store: T, mode: Mode, block_size: usize, algorithm: Algorithm) -> Result<Self, Error> {
        if !block_size.is_power_of_two() || !(512..=1 << 20).contains(&block_size) {
            return Err(Error::Invalid {
                what: "block size",
                detail: format!("{block_size} is not a power of two from 512 to 1048576"),
            });
        }
        #[cfg(target_os = "linux")]
        let ring = match (mode, sink.raw_target()) {
            (Mode::Uring, Some(_)) => super::uring::Ring::new(),
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

    /// The sink and the store.
    pub fn into_parts(mut self) -> (S, T) {
        drop(self.worker.take());
        let Writer { sink, store, .. } = self;
        (sink, store)
    }

    /// Writes `buffer` at byte `offset` (both whole blocks), then records its
    /// blocks' checksums. A failed write records none and invalidates the
    /// range's old ones: the media under them may have changed.
    ///
    /// # Errors
    /// [`Error::Invalid`] for an offset or length that is not whole blocks or
    /// an empty buffer; [`Error::Io`] if the data or checksums cannot be
    /// written (a write that makes no progress is `WriteZero`).
    pub fn write(&mut self, offset: u64, buffer: AlignedBuf) -> Result<Completed, Error> {
        let bs = self.block_size as u64;
        if buffer.is_empty() || !offset.is_multiple_of(bs) || !(buffer.len() as u64).is_multiple_of(bs) {
            return Err(Error::Invalid {
                what: "write",
                detail: format!("{} bytes at offset {offset}: must be whole {bs}-byte blocks", buffer.len()),
            });
        }
        #[cfg(target_os = "linux")]
        if let (Some(ring), Some((fd, direct))) = (self.ring.as_mut(), self.sink.raw_target()) {
            let (bs, algorithm) = (self.block_size, self.algorithm);
            let outcome = ring.write_during(fd, offset, &buffer, !direct, || block_checksums(&buffer, bs, algorithm));
            let (written, checksums) = match outcome {
                super::uring::Outcome::Submitted(Ok(0), checksums) => {
                    (Err(io::Error::new(io::ErrorKind::WriteZero, "the device accepted no bytes")), checksums)
                }
                super::uring::Outcome::Submitted(Ok(n), checksums) => {
                    // A short write is continued, as write_all_at does.
                    (write_all_at(&mut self.sink, offset + n as u64, &buffer[n.min(buffer.len())..]), checksums)
                }
                super::uring::Outcome::Submitted(Err(e), checksums) if e.kind() == io::ErrorKind::Interrupted => {
                    (write_all_at(&mut self.sink, offset, &buffer), checksums)
                }
                super::uring::Outcome::Submitted(Err(e), checksums) => (Err(e), checksums),
                super::uring::Outcome::NotSubmitted(checksums) => {
                    (write_all_at(&mut self.sink, offset, &buffer), checksums)
                }
            };
            return self.finish(offset, buffer, written, Ok(checksums));
        }
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
        self.finish(offset, buffer, written, checksums)
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

    /// Makes the data durable ([`Sink::sync`]).
    ///
    /// # Errors
    /// [`Error::Io`].
    pub fn sync(&mut self) -> Result<(), Error> {
        self.sink.sync().map_err(|source| Error::Io { context: "syncing written data".into(), source })
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

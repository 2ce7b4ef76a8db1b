//! Group commit: concurrent writers' TLVs go into one record and one
//! flush. A writer that finds no commit in progress becomes the leader:
//! it takes everything queued (up to one record, its own entry first),
//! appends it, hands each writer it carried that record's result, and hands
//! leadership to the first writer still queued.
//!
//! Every writer waits on its own slot, never on a shared condition: the
//! leader wakes exactly the writers it carried, and a waiter first spins
//! for about as long as recent commits took (an adaptive mutex's rule)
//! before it parks — when a commit costs less than a sleep and a wake-up
//! (a ByteLog record is one or two cache lines), the futex round trip, not
//! the log, would be the latency.

use super::format::{FLAG_BATCH, HEADER_BYTES};
use super::log::{encode_tlvs, Tlv};
use crate::Error;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

/// Waiters spin only while commits are expected to finish within this;
/// slower commits (an fdatasync) are waited for parked.
const SPIN_MAX: Duration = Duration::from_micros(50);
/// Shortest spin: a waiter also waits for the batch ahead of its own, and
/// on a loaded machine for the leader to be scheduled.
const SPIN_MIN: Duration = Duration::from_micros(20);
/// A waiter spins this many times the recent commit duration: the batch
/// in flight, then its own.
const SPIN_COMMITS: u64 = 3;
/// Most payload bytes one batch carries: a record of a page, which every
/// ByteLog ring takes (see `payload_max`) and which the block-granular log
/// it is compared with writes as one block.
const BATCH_BYTES_MAX: usize = 4096 - HEADER_BYTES;

/// Anything that appends one durable record: a ByteLog, or a
/// block-granular log to compare it with.
pub trait AppendRecord {
    /// Appends a record and makes it durable; returns its sequence number.
    fn append_record(&mut self, tag: u16, flags: u8, payload: &[u8]) -> Result<u64, Error>;
}

impl<M: super::Medium> AppendRecord for super::ByteLog<M> {
    fn append_record(&mut self, tag: u16, flags: u8, payload: &[u8]) -> Result<u64, Error> {
        self.append(tag, flags, payload)
    }
}

/// Slot states.
const WAITING: u8 = 0;
const DONE: u8 = 1;
const LEAD: u8 = 2;

/// Where the leader leaves one writer's outcome.
struct Slot {
    state: AtomicU8,
    /// The record's sequence number, or the append error; set before DONE.
    result: OnceLock<Result<u64, String>>,
    writer: Thread,
}

impl Slot {
    fn finish(&self, result: Result<u64, String>) {
        let _ = self.result.set(result);
        self.state.store(DONE, Ordering::Release);
        self.writer.unpark();
    }

    fn make_leader(&self) {
        self.state.store(LEAD, Ordering::Release);
        self.writer.unpark();
    }
}

/// A queued commit: first tag, TLV count, encoded TLVs, its writer's slot.
struct Pending {
    tag: u16,
    tlvs: usize,
    bytes: Vec<u8>,
    slot: Arc<Slot>,
}

#[derive(Default)]
struct Queue {
    pending: VecDeque<Pending>,
    /// Invariant: a leader exists whenever `pending` is not empty.
    leader: bool,
}

/// A log shared by threads, committing their TLVs in groups.
pub struct GroupCommit<L: AppendRecord> {
    log: Mutex<L>,
    queue: Mutex<Queue>,
    /// Recent commit duration (exponential average), in nanoseconds.
    commit_ns: AtomicU64,
}

impl<L: AppendRecord> GroupCommit<L> {
    /// Shares `log`.
    pub fn new(log: L) -> Self {
        GroupCommit { log: Mutex::new(log), queue: Mutex::new(Queue::default()), commit_ns: AtomicU64::new(0) }
    }

    /// Commits `tlvs` (together, in one record, possibly with other
    /// writers'); returns that record's sequence number once it is durable.
    pub fn commit(&self, tlvs: &[Tlv]) -> Result<u64, Error> {
        let bytes = encode_tlvs(tlvs)?;
        if bytes.len() > BATCH_BYTES_MAX || tlvs.is_empty() {
            return Err(Error::Invalid {
                what: "commit",
                detail: format!(
                    "{} TLVs in {} bytes (1.. TLVs, at most {BATCH_BYTES_MAX} bytes)",
                    tlvs.len(),
                    bytes.len()
                ),
            });
        }
        let slot =
            Arc::new(Slot { state: AtomicU8::new(WAITING), result: OnceLock::new(), writer: std::thread::current() });
        let lead = {
            let mut q = self.lock_queue();
            q.pending.push_back(Pending { tag: tlvs[0].tag, tlvs: tlvs.len(), bytes, slot: Arc::clone(&slot) });
            !std::mem::replace(&mut q.leader, true)
        };
        if lead || self.wait(&slot) == LEAD {
            self.lead();
        }
        let result = slot.result.get().expect("a finished slot holds its result").clone();
        result.map_err(|detail| Error::Invalid { what: "group commit", detail })
    }

    /// Waits until the slot is finished or made leader; returns which.
    fn wait(&self, slot: &Slot) -> u8 {
        let expected = Duration::from_nanos(self.commit_ns.load(Ordering::Relaxed).saturating_mul(SPIN_COMMITS));
        if expected <= SPIN_MAX {
            let budget = expected.max(SPIN_MIN);
            let start = Instant::now();
            while start.elapsed() < budget {
                for _ in 0..64 {
                    let state = slot.state.load(Ordering::Acquire);
                    if state != WAITING {
                        return state;
                    }
                    std::hint::spin_loop();
                }
            }
        }
        loop {
            let state = slot.state.load(Ordering::Acquire);
            if state != WAITING {
                return state;
            }
            std::thread::park(); // returns at once if unparked meanwhile
        }
    }

    /// Commits the front of the queue (which holds this writer's own entry)
    /// as one record, finishes the writers it carried and passes leadership on.
    fn lead(&self) {
        let batch: Vec<Pending> = {
            let mut q = self.lock_queue();
            let mut bytes = 0;
            let mut take = 0;
            for p in &q.pending {
                if take > 0 && bytes + p.bytes.len() > BATCH_BYTES_MAX {
                    break;
                }
                bytes += p.bytes.len();
                take += 1;
            }
            q.pending.drain(..take).collect()
        };
        assert!(!batch.is_empty(), "a leader's own entry heads the queue");
        let started = Instant::now();
        let tlv_count: usize = batch.iter().map(|p| p.tlvs).sum();
        let (tag, flags) = if tlv_count == 1 { (batch[0].tag, 0) } else { (0, FLAG_BATCH) };
        let payload = match batch.as_slice() {
            [only] => std::borrow::Cow::Borrowed(&only.bytes[..]),
            many => {
                let mut joined = Vec::with_capacity(many.iter().map(|p| p.bytes.len()).sum());
                for p in many {
                    joined.extend_from_slice(&p.bytes);
                }
                std::borrow::Cow::Owned(joined)
            }
        };
        let result = self
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .append_record(tag, flags, &payload)
            .map_err(|e| e.to_string());
        let took = started.elapsed().as_nanos().min(u128::from(u64::MAX)) as u64;
        let average = self.commit_ns.load(Ordering::Relaxed);
        self.commit_ns.store(average - average / 8 + took / 8, Ordering::Relaxed);
        {
            let mut q = self.lock_queue();
            match q.pending.front() {
                Some(next) => next.slot.make_leader(),
                None => q.leader = false,
            }
        }
        for p in batch {
            p.slot.finish(result.clone());
        }
    }

    fn lock_queue(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Commits waiting for a leader to carry them (not counting one being
    /// appended): what a caller or a test can watch to see writers queue.
    pub fn queued(&self) -> usize {
        self.lock_queue().pending.len()
    }

    /// Runs `f` on the log (no commit in progress meanwhile).
    pub fn with_log<T>(&self, f: impl FnOnce(&mut L) -> T) -> T {
        f(&mut self.log.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// The log back.
    pub fn into_inner(self) -> L {
        self.log.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

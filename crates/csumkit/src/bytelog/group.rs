//! Group commit: concurrent writers' TLVs go into one record and one
//! flush. The first writer to find no commit in progress becomes the
//! leader, takes everything queued (up to one record), appends it and wakes
//! the writers it carried; writers arriving meanwhile queue for the next one.

use super::format::{FLAG_BATCH, PAYLOAD_BYTES_MAX};
use super::log::{encode_tlvs, Tlv};
use crate::Error;
use std::collections::VecDeque;
use std::sync::{Condvar, Mutex};

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

#[derive(Default)]
struct Queue {
    /// Encoded TLVs per waiting ticket: (ticket, first tag, TLV count, bytes).
    pending: VecDeque<(u64, u16, usize, Vec<u8>)>,
    next_ticket: u64,
    leader: bool,
    /// Finished batches not yet picked up by all their writers: (tickets,
    /// writers still to pick up, the record's sequence number or error).
    results: Vec<(std::ops::Range<u64>, usize, Result<u64, String>)>,
}

/// A log shared by threads, committing their TLVs in groups.
pub struct GroupCommit<L: AppendRecord> {
    log: Mutex<L>,
    queue: Mutex<Queue>,
    done: Condvar,
}

impl<L: AppendRecord> GroupCommit<L> {
    /// Shares `log`.
    pub fn new(log: L) -> Self {
        GroupCommit { log: Mutex::new(log), queue: Mutex::new(Queue::default()), done: Condvar::new() }
    }

    /// Commits `tlvs` (together, in one record, possibly with other
    /// writers'); returns that record's sequence number once it is durable.
    pub fn commit(&self, tlvs: &[Tlv]) -> Result<u64, Error> {
        let bytes = encode_tlvs(tlvs)?;
        if bytes.len() > PAYLOAD_BYTES_MAX || tlvs.is_empty() {
            return Err(Error::Invalid {
                what: "commit",
                detail: format!(
                    "{} TLVs in {} bytes (1.. TLVs, at most {PAYLOAD_BYTES_MAX} bytes)",
                    tlvs.len(),
                    bytes.len()
                ),
            });
        }
        let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let ticket = q.next_ticket;
        q.next_ticket += 1;
        q.pending.push_back((ticket, tlvs[0].tag, tlvs.len(), bytes));
        loop {
            if let Some(i) = q.results.iter().position(|(tickets, _, _)| tickets.contains(&ticket)) {
                let result = q.results[i].2.clone();
                q.results[i].1 -= 1;
                if q.results[i].1 == 0 {
                    drop(q.results.swap_remove(i));
                }
                return result.map_err(|detail| Error::Invalid { what: "group commit", detail });
            }
            if q.leader {
                q = self.done.wait(q).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            q.leader = true;
            let start = q.pending.front().map_or(ticket, |p| p.0);
            let (mut payload, mut tlv_count, mut first_tag, mut end) = (Vec::new(), 0, 0, start);
            while let Some((t, tag, n, b)) = q.pending.front() {
                if payload.len() + b.len() > PAYLOAD_BYTES_MAX {
                    break;
                }
                if tlv_count == 0 {
                    first_tag = *tag;
                }
                payload.extend_from_slice(b);
                tlv_count += n;
                end = t + 1;
                q.pending.pop_front();
            }
            drop(q);
            let (tag, flags) = if tlv_count == 1 { (first_tag, 0) } else { (0, FLAG_BATCH) };
            let result = self
                .log
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .append_record(tag, flags, &payload)
                .map_err(|e| e.to_string());
            q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.results.push((start..end, (end - start) as usize, result));
            q.leader = false;
            self.done.notify_all();
        }
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

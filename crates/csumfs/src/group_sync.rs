//! Group commit of `fsync`s (seed 001: "group commit across threads").
//!
//! A sync makes every change made before it began durable, whoever made
//! it — one ByteLog commit and its flushes. So `fsync`s that arrive while
//! a sync is under way need not each flush again: they wait, and the next
//! sync answers all of them at once. The caller whose `fsync` finds no
//! sync running leads: it syncs for itself and then for whatever queued
//! meanwhile, until the queue is empty — no thread hand-off when `fsync`s
//! come one at a time, one flush per batch when they come together (the
//! kernel's jbd2 commits concurrent fsyncs the same way).
//!
//! Why a waiter may be answered by a sync it did not start: its own
//! change was complete before it queued (FUSE sends `FSYNC` after the
//! calls it covers have been answered), and every batch's sync begins
//! after its waiters queued.

use std::sync::{Mutex, PoisonError};

/// What answers one `fsync` once a sync has covered it.
pub(crate) type Waiter<E> = Box<dyn FnOnce(Result<(), E>) + Send>;

struct Queue<E> {
    waiting: Vec<Waiter<E>>,
    /// A caller is leading: it takes the queue when its sync ends.
    leading: bool,
}

/// `fsync`s waiting for a sync, and whether one is under way.
pub(crate) struct GroupSync<E> {
    queue: Mutex<Queue<E>>,
}

/// Gives up the lead if the sync panics, so that later `fsync`s are not
/// queued behind a leader that is gone (the batch it held is dropped:
/// fuser answers a dropped reply with `EIO`).
struct Lead<'a, E>(&'a Mutex<Queue<E>>);

impl<E> Drop for Lead<'_, E> {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).leading = false;
    }
}

impl<E: Clone> GroupSync<E> {
    pub(crate) fn new() -> Self {
        GroupSync { queue: Mutex::new(Queue { waiting: Vec::new(), leading: false }) }
    }

    /// Queues `done`; unless another caller leads, leads: runs `sync(n)`
    /// for the `n` waiters queued when it starts and answers them with
    /// its result, until none are left. Returns once `done` is queued
    /// behind another leader, or once the queue is empty.
    pub(crate) fn submit(&self, done: Waiter<E>, mut sync: impl FnMut(usize) -> Result<(), E>) {
        let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.waiting.push(done);
        if queue.leading {
            return;
        }
        queue.leading = true;
        drop(queue);
        let lead = Lead(&self.queue);
        loop {
            let batch = {
                let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                if queue.waiting.is_empty() {
                    // Cleared under the same lock that saw the queue
                    // empty: a waiter queued after it leads for itself.
                    queue.leading = false;
                    std::mem::forget(lead);
                    return;
                }
                std::mem::take(&mut queue.waiting)
            };
            let result = sync(batch.len());
            for waiter in batch {
                waiter(result.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, Barrier};

    /// Each waiter is answered once, by a sync that began after its
    /// change was made, and concurrent callers share syncs.
    #[test]
    fn every_fsync_is_answered_by_a_sync_that_began_after_its_change() {
        const THREADS: usize = 8;
        const ROUNDS: usize = 50;
        let group = Arc::new(GroupSync::<String>::new());
        // Changes made so far, and the count the running sync began at
        // (one leader at a time: it answers its batch before the next
        // sync begins, so a waiter reads the sync that answers it).
        let changes = Arc::new(AtomicU64::new(0));
        let began_at = Arc::new(AtomicU64::new(0));
        let (syncs, answered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (group, changes, began_at, syncs, answered, start) =
                    (group.clone(), changes.clone(), began_at.clone(), syncs.clone(), answered.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for _ in 0..ROUNDS {
                        let mine = changes.fetch_add(1, Ordering::SeqCst) + 1;
                        let (tx, rx) = std::sync::mpsc::channel();
                        let (seen, answered) = (began_at.clone(), answered.clone());
                        group.submit(
                            Box::new(move |result: Result<(), String>| {
                                result.expect("the sync succeeded");
                                answered.fetch_add(1, Ordering::SeqCst);
                                tx.send(seen.load(Ordering::SeqCst)).expect("the caller waits");
                            }),
                            |n| {
                                assert!(n >= 1);
                                syncs.fetch_add(1, Ordering::SeqCst);
                                began_at.store(changes.load(Ordering::SeqCst), Ordering::SeqCst);
                                std::thread::sleep(std::time::Duration::from_millis(1));
                                Ok(())
                            },
                        );
                        let covered = rx.recv().expect("answered");
                        assert!(covered >= mine, "change {mine} answered by a sync that began at {covered}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("no panic");
        }
        let total = (THREADS * ROUNDS) as u64;
        assert_eq!(answered.load(Ordering::SeqCst), total);
        // While a leader sleeps in its sync the other seven queue.
        let syncs = syncs.load(Ordering::SeqCst);
        assert!(syncs <= total / 2, "{syncs} syncs for {total} fsyncs: none shared");
    }

    /// A sync that fails fails every waiter of its batch, and the next
    /// caller leads again.
    #[test]
    fn a_failed_sync_fails_its_batch_and_the_next_caller_leads() {
        let group = GroupSync::<&'static str>::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let tx2 = tx.clone();
        group.submit(Box::new(move |r| tx.send(r).unwrap()), |n| {
            assert_eq!(n, 1);
            Err("flush failed")
        });
        assert_eq!(rx.recv().unwrap(), Err("flush failed"));
        group.submit(Box::new(move |r| tx2.send(r).unwrap()), |_| Ok(()));
        assert_eq!(rx.recv().unwrap(), Ok(()));
    }

    /// A sync that panics gives up the lead: the next fsync is answered.
    #[test]
    fn a_leader_that_panics_does_not_strand_later_fsyncs() {
        let group = Arc::new(GroupSync::<()>::new());
        let g = group.clone();
        let died = std::thread::spawn(move || g.submit(Box::new(|_| {}), |_| panic!("a sync panicked"))).join();
        assert!(died.is_err());
        let (tx, rx) = std::sync::mpsc::channel();
        group.submit(Box::new(move |r| tx.send(r).unwrap()), |_| Ok(()));
        assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(5)), Ok(Ok(())));
    }
}

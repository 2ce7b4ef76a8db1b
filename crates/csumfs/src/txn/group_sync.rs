//! Group commit of `fsync`s ("group commit across threads").
//!
//! A sync makes every change made before it began durable, whoever made
//! it — one ByteLog commit and its flushes. So `fsync`s that arrive while
//! a sync is under way need not each flush again: they wait, and the next
//! sync answers all of them at once. The caller whose `fsync` finds no
//! sync running leads: it syncs for itself — no thread hand-off when
//! `fsync`s come one at a time — and if more queued meanwhile, hands the
//! lead to a helper thread, which syncs batch after batch until the queue
//! is empty: one flush per batch when they come together (the kernel's
//! jbd2 commits concurrent fsyncs the same way). The caller is the thread
//! serving its CPU's FUSE queue; leading on itself, it left the requests
//! on that queue waiting for flush after flush (with 15 jobs of (1) at
//! 4 KiB a fifth of the CPU time was idle, 14% with the helper: +3%).
//! While `fsync`s come together — the last lead ran more than one sync —
//! a caller hands even its own sync to the helper at once, so that no
//! queue waits out a flush (idle 12–14% → 7–10%, +3%); a lead of one sync
//! ends that.
//!
//! Why a waiter may be answered by a sync it did not start: its own
//! change was complete before it queued (FUSE sends `FSYNC` after the
//! calls it covers have been answered), and every batch's sync begins
//! after its waiters queued.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

/// What answers one `fsync` once a sync has covered it.
pub(crate) type Waiter<E> = Box<dyn FnOnce(Result<(), E>) + Send>;

/// The sync itself, given how many waiters it answers: makes every change
/// made before it began durable.
pub(crate) type SyncFn<E> = Box<dyn Fn(usize) -> Result<(), E> + Send + Sync>;

struct Queue<E> {
    waiting: Vec<Waiter<E>>,
    /// A sync is under way: whoever runs it takes the queue when it ends.
    leading: bool,
    /// The lead was handed to the helper, which has not taken it yet:
    /// the syncs already run in it (0 or 1).
    handed: Option<usize>,
    /// The last lead ran more than one sync — `fsync`s come together —
    /// so the next caller hands its own sync to the helper too.
    contended: bool,
    /// The group is being dropped: the helper ends once it has no lead.
    closed: bool,
}

struct Shared<E> {
    queue: Mutex<Queue<E>>,
    /// Wakes the helper for a hand-off or the close.
    wake: Condvar,
    sync: SyncFn<E>,
}

impl<E: Clone> Shared<E> {
    fn lock(&self) -> MutexGuard<'_, Queue<E>> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs one sync for `batch` and answers it.
    fn run(&self, batch: Vec<Waiter<E>>) {
        let result = (self.sync)(batch.len());
        for waiter in batch {
            waiter(result.clone());
        }
    }
}

/// `fsync`s waiting for a sync, whether one is under way, and the helper
/// thread a leader hands the lead to.
pub(crate) struct GroupSync<E: Clone + Send + 'static> {
    shared: Arc<Shared<E>>,
    /// None if it could not be started: leaders then keep the lead.
    helper: Option<std::thread::JoinHandle<()>>,
}

/// Gives up the lead if the sync panics, so that later `fsync`s are not
/// queued behind a leader that is gone (the batch it held is dropped:
/// fuser answers a dropped reply with `EIO`).
struct Lead<'a, E: Clone>(&'a Shared<E>);

impl<E: Clone> Drop for Lead<'_, E> {
    fn drop(&mut self) {
        self.0.lock().leading = false;
    }
}

impl<E: Clone + Send + 'static> GroupSync<E> {
    pub(crate) fn new(sync: SyncFn<E>) -> Self {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue {
                waiting: Vec::new(),
                leading: false,
                handed: None,
                contended: false,
                closed: false,
            }),
            wake: Condvar::new(),
            sync,
        });
        let helper = {
            let shared = shared.clone();
            std::thread::Builder::new().name("csumfs-sync".into()).spawn(move || help(&shared)).ok()
        };
        GroupSync { shared, helper }
    }

    /// Queues `done`; unless a sync is under way, leads: runs one sync for
    /// the waiters queued then (`done` among them) and answers them. If
    /// more queued meanwhile, the helper thread leads on and this returns:
    /// the caller — a thread serving the FUSE queue of its CPU — goes back
    /// to serving requests instead of waiting for flush after flush while
    /// they pile up on its queue. While `fsync`s come together (the last
    /// lead ran more than one sync) the helper runs this caller's sync too.
    /// Returns once `done` is queued behind another sync or handed to the
    /// helper, or once its own sync has answered it.
    pub(crate) fn submit(&self, done: Waiter<E>) {
        let shared = &*self.shared;
        let mut queue = shared.lock();
        queue.waiting.push(done);
        if queue.leading {
            return;
        }
        queue.leading = true;
        if queue.contended && self.helper.is_some() {
            queue.handed = Some(0);
            drop(queue);
            self.shared.wake.notify_one();
            return;
        }
        let mut batch = std::mem::take(&mut queue.waiting);
        drop(queue);
        let lead = Lead(shared);
        loop {
            shared.run(batch);
            let mut queue = shared.lock();
            queue.contended = !queue.waiting.is_empty();
            if queue.waiting.is_empty() {
                // Cleared under the same lock that saw the queue empty:
                // a waiter queued after it leads for itself.
                queue.leading = false;
                std::mem::forget(lead);
                return;
            }
            if self.helper.is_some() {
                queue.handed = Some(1);
                drop(queue);
                std::mem::forget(lead);
                shared.wake.notify_one();
                return;
            }
            batch = std::mem::take(&mut queue.waiting);
        }
    }
}

/// The helper: leads each time a leader hands it the lead, until the
/// queue is empty. A sync that panics drops its batch (answered `EIO`) and
/// the helper leads on.
fn help<E: Clone>(shared: &Shared<E>) {
    let mut queue = shared.lock();
    loop {
        while queue.handed.is_none() && !queue.closed {
            queue = shared.wake.wait(queue).unwrap_or_else(PoisonError::into_inner);
        }
        let Some(mut syncs) = queue.handed.take() else { return };
        while !queue.waiting.is_empty() {
            let batch = std::mem::take(&mut queue.waiting);
            drop(queue);
            if catch_unwind(AssertUnwindSafe(|| shared.run(batch))).is_err() {
                eprintln!("csumfs: a sync panicked; the fsyncs it answered get EIO");
            }
            syncs += 1;
            queue = shared.lock();
        }
        queue.contended = syncs > 1;
        queue.leading = false;
    }
}

impl<E: Clone + Send + 'static> Drop for GroupSync<E> {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        if let Some(helper) = self.helper.take() {
            // The helper ends once the lead it holds, if any, is done.
            let _ = helper.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
    use std::sync::{Arc, Barrier};
    use std::time::Duration;

    const PATIENCE: Duration = Duration::from_secs(10);

    /// A waiter that sends its answer to the returned receiver.
    fn waiter<E: Send + 'static>() -> (Waiter<E>, Receiver<Result<(), E>>) {
        let (tx, rx) = channel();
        (Box::new(move |result| tx.send(result).expect("the test waits")), rx)
    }

    /// Each waiter is answered once, by a sync that began after its
    /// change was made, and concurrent callers share syncs.
    #[test]
    fn every_fsync_is_answered_by_a_sync_that_began_after_its_change() {
        const THREADS: usize = 8;
        const ROUNDS: usize = 50;
        // Changes made so far, and the count the running sync began at
        // (one sync at a time, by the leader or the helper: it answers its
        // batch before the next sync begins, so a waiter reads the sync
        // that answers it).
        let changes = Arc::new(AtomicU64::new(0));
        let began_at = Arc::new(AtomicU64::new(0));
        let (syncs, answered) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let group = {
            let (changes, began_at, syncs) = (changes.clone(), began_at.clone(), syncs.clone());
            Arc::new(GroupSync::<String>::new(Box::new(move |n| {
                assert!(n >= 1);
                syncs.fetch_add(1, Ordering::SeqCst);
                began_at.store(changes.load(Ordering::SeqCst), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(1));
                Ok(())
            })))
        };
        let start = Arc::new(Barrier::new(THREADS));
        let threads: Vec<_> = (0..THREADS)
            .map(|_| {
                let (group, changes, began_at, answered, start) =
                    (group.clone(), changes.clone(), began_at.clone(), answered.clone(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    for _ in 0..ROUNDS {
                        let mine = changes.fetch_add(1, Ordering::SeqCst) + 1;
                        let (tx, rx) = channel();
                        let (seen, answered) = (began_at.clone(), answered.clone());
                        group.submit(Box::new(move |result: Result<(), String>| {
                            result.expect("the sync succeeded");
                            answered.fetch_add(1, Ordering::SeqCst);
                            tx.send(seen.load(Ordering::SeqCst)).expect("the caller waits");
                        }));
                        let covered = rx.recv_timeout(PATIENCE).expect("answered");
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
        // While a sync sleeps the other seven queue.
        let syncs = syncs.load(Ordering::SeqCst);
        assert!(syncs <= total / 2, "{syncs} syncs for {total} fsyncs: none shared");
    }

    /// A leader whose sync ends with more `fsync`s queued hands the lead
    /// to the helper and returns to its caller (a FUSE queue's thread)
    /// without waiting for their sync; the helper answers them.
    #[test]
    fn a_leader_returns_after_its_own_sync_and_the_helper_leads_on() {
        let (release_tx, release_rx) = channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let syncs = Arc::new(AtomicU64::new(0));
        let group = {
            let syncs = syncs.clone();
            Arc::new(GroupSync::<()>::new(Box::new(move |n| {
                assert_eq!(n, 1);
                syncs.fetch_add(1, Ordering::SeqCst);
                release_rx.lock().unwrap().recv_timeout(PATIENCE).expect("released");
                Ok(())
            })))
        };
        let (first, first_answer) = waiter();
        let (returned_tx, returned) = channel();
        let leader = {
            let group = group.clone();
            std::thread::spawn(move || {
                group.submit(first);
                returned_tx.send(()).unwrap();
            })
        };
        while syncs.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        // Queued behind the leader's sync: returns at once.
        let (second, second_answer) = waiter();
        group.submit(second);
        release_tx.send(()).unwrap();
        assert_eq!(first_answer.recv_timeout(PATIENCE), Ok(Ok(())));
        // The second sync is still held, yet the leader has returned.
        assert_eq!(returned.recv_timeout(PATIENCE), Ok(()), "the leader waited for the sync after its own");
        leader.join().unwrap();
        assert_eq!(second_answer.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty));
        release_tx.send(()).unwrap();
        assert_eq!(second_answer.recv_timeout(PATIENCE), Ok(Ok(())));
        assert_eq!(syncs.load(Ordering::SeqCst), 2);
        // The next fsync is answered too.
        let (third, third_answer) = waiter();
        release_tx.send(()).unwrap();
        group.submit(third);
        assert_eq!(third_answer.recv_timeout(PATIENCE), Ok(Ok(())));
    }

    /// After a lead of more than one sync, the next caller hands even its
    /// own sync to the helper and returns before it runs; a lead of one
    /// sync ends that, and the caller after it syncs on its own thread.
    #[test]
    fn while_fsyncs_come_together_callers_hand_their_own_sync_to_the_helper() {
        let (release_tx, release_rx) = channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let ran_on = Arc::new(Mutex::new(Vec::new()));
        let group = {
            let ran_on = ran_on.clone();
            Arc::new(GroupSync::<()>::new(Box::new(move |_| {
                ran_on.lock().unwrap().push(std::thread::current().id());
                release_rx.lock().unwrap().recv_timeout(PATIENCE).expect("released");
                Ok(())
            })))
        };
        let syncs = || ran_on.lock().unwrap().len();
        // A lead of two syncs: the leader's, then the helper's.
        let (first, first_answer) = waiter();
        let leader = std::thread::spawn({
            let group = group.clone();
            move || group.submit(first)
        });
        while syncs() == 0 {
            std::thread::yield_now();
        }
        let (second, second_answer) = waiter();
        group.submit(second);
        release_tx.send(()).unwrap();
        leader.join().unwrap();
        release_tx.send(()).unwrap();
        assert_eq!(first_answer.recv_timeout(PATIENCE), Ok(Ok(())));
        assert_eq!(second_answer.recv_timeout(PATIENCE), Ok(Ok(())));
        while group.shared.lock().leading {
            std::thread::yield_now();
        }
        assert!(group.shared.lock().contended);
        // Contended: this caller returns with its sync not yet run (held).
        let (third, third_answer) = waiter();
        group.submit(third);
        assert_eq!(third_answer.try_recv(), Err(std::sync::mpsc::TryRecvError::Empty));
        release_tx.send(()).unwrap();
        assert_eq!(third_answer.recv_timeout(PATIENCE), Ok(Ok(())));
        let helper = ran_on.lock().unwrap()[1];
        assert_eq!(ran_on.lock().unwrap()[2], helper, "the helper ran the contended caller's sync");
        // That lead ran one sync: once the helper has let it go, the next
        // caller syncs on its own thread.
        while group.shared.lock().leading {
            std::thread::yield_now();
        }
        assert!(!group.shared.lock().contended);
        release_tx.send(()).unwrap();
        let (fourth, fourth_answer) = waiter();
        group.submit(fourth);
        assert_eq!(fourth_answer.try_recv(), Ok(Ok(())), "answered before submit returned");
        assert_eq!(ran_on.lock().unwrap()[3], std::thread::current().id());
    }

    /// A sync that fails fails every waiter of its batch, and the next
    /// caller leads again.
    #[test]
    fn a_failed_sync_fails_its_batch_and_the_next_caller_leads() {
        let failed = AtomicBool::new(false);
        let group = GroupSync::<&'static str>::new(Box::new(move |n| {
            assert_eq!(n, 1);
            if failed.swap(true, Ordering::SeqCst) {
                Ok(())
            } else {
                Err("flush failed")
            }
        }));
        let (first, first_answer) = waiter();
        group.submit(first);
        assert_eq!(first_answer.recv_timeout(PATIENCE), Ok(Err("flush failed")));
        let (second, second_answer) = waiter();
        group.submit(second);
        assert_eq!(second_answer.recv_timeout(PATIENCE), Ok(Ok(())));
    }

    /// A leader whose sync panics gives up the lead: its batch is dropped
    /// (fuser answers `EIO`), the next fsync leads and is answered.
    #[test]
    fn a_leader_that_panics_does_not_strand_later_fsyncs() {
        let panicked = AtomicBool::new(false);
        let group = Arc::new(GroupSync::<()>::new(Box::new(move |_| {
            assert!(panicked.swap(true, Ordering::SeqCst), "a sync panicked");
            Ok(())
        })));
        let (first, first_answer) = waiter();
        let died = std::thread::spawn({
            let group = group.clone();
            move || group.submit(first)
        });
        assert!(died.join().is_err());
        assert_eq!(first_answer.recv_timeout(PATIENCE), Err(RecvTimeoutError::Disconnected));
        let (next, next_answer) = waiter();
        group.submit(next);
        assert_eq!(next_answer.recv_timeout(PATIENCE), Ok(Ok(())));
    }

    /// A sync the helper runs that panics drops its batch; the helper
    /// lives on, gives the lead up, and later fsyncs are answered.
    #[test]
    fn a_helper_sync_that_panics_does_not_strand_later_fsyncs() {
        let (release_tx, release_rx) = channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let syncs = Arc::new(AtomicU64::new(0));
        let group = {
            let syncs = syncs.clone();
            Arc::new(GroupSync::<()>::new(Box::new(move |_| match syncs.fetch_add(1, Ordering::SeqCst) {
                0 => {
                    release_rx.lock().unwrap().recv_timeout(PATIENCE).expect("released");
                    Ok(())
                }
                1 => panic!("the helper's sync panicked"),
                _ => Ok(()),
            })))
        };
        let (first, first_answer) = waiter();
        let leader = std::thread::spawn({
            let group = group.clone();
            move || group.submit(first)
        });
        while syncs.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let (second, second_answer) = waiter();
        group.submit(second);
        release_tx.send(()).unwrap();
        leader.join().expect("the leader's sync succeeded");
        assert_eq!(first_answer.recv_timeout(PATIENCE), Ok(Ok(())));
        assert_eq!(second_answer.recv_timeout(PATIENCE), Err(RecvTimeoutError::Disconnected));
        for _ in 0..3 {
            let (next, next_answer) = waiter();
            group.submit(next);
            assert_eq!(next_answer.recv_timeout(PATIENCE), Ok(Ok(())));
        }
    }
}

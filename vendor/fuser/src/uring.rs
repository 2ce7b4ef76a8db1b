//! FUSE over io_uring (Linux 6.14+, `/sys/module/fuse/parameters/enable_uring`).
//!
//! Added for csumkit (see `CSUMKIT.md`). After the INIT handshake has
//! negotiated `FUSE_OVER_IO_URING`, one thread per kernel queue (one queue per
//! possible CPU) registers `depth` ring entries with
//! `FUSE_IO_URING_CMD_REGISTER`. A request arrives as the completion of one of
//! them: its `fuse_in_header` and per-operation header in the entry's header
//! buffer, the rest (names, write data) in its payload buffer. The thread puts
//! the two headers right in front of the payload, so the request is in the
//! layout a read of `/dev/fuse` gives and the usual dispatch parses it; the
//! reply goes back with `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which also waits
//! for the entry's next request — one system call per request, where
//! `/dev/fuse` takes a read and a write. A handler may also reply later from
//! another thread; the reply then wakes the queue thread through an eventfd
//! its ring polls, and the entry waits for it meanwhile.
//!
//! Forgets and interrupts still come through `/dev/fuse` (the kernel sends
//! them no other way), so the channel threads keep running beside these. The
//! kernel serves requests through `/dev/fuse` until every queue has an entry;
//! if a registration fails, this thread logs it and ends, and everything
//! stays on `/dev/fuse`.

use std::io;
use std::io::IoSlice;
use std::os::fd::AsRawFd;
use std::os::fd::FromRawFd;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use io_uring::IoUring;
use io_uring::cqueue;
use io_uring::opcode;
use io_uring::squeue;
use io_uring::types;
use log::error;
use log::warn;
use parking_lot::Mutex;

use crate::Filesystem;
use crate::ll::Operation;
use crate::reply::ReplyEmpty;
use crate::reply::ReplySender;
use crate::request::RequestWithSender;
use crate::session::SessionEventLoop;

/// `enum fuse_uring_cmd` (include/uapi/linux/fuse.h).
const FUSE_IO_URING_CMD_REGISTER: u32 = 1;
const FUSE_IO_URING_CMD_COMMIT_AND_FETCH: u32 = 2;

/// `struct fuse_uring_req_header`: `in_out` (the in or out header), `op_in`
/// (the operation's own header), then `struct fuse_uring_ent_in_out`.
const IN_OUT_OFFSET: usize = 0;
const OP_IN_OFFSET: usize = 128;
const OP_IN_MAX: usize = 128;
const ENT_IN_OUT_OFFSET: usize = 256;
const ENT_IN_OUT_COMMIT_ID: usize = ENT_IN_OUT_OFFSET + 8;
const ENT_IN_OUT_PAYLOAD_SZ: usize = ENT_IN_OUT_OFFSET + 16;
const REQ_HEADER_SIZE: usize = ENT_IN_OUT_OFFSET + 32;

const IN_HEADER_SIZE: usize = 40;
const OUT_HEADER_SIZE: usize = 16;

const PAGE: usize = 4096;
/// Room in front of the payload for the two request headers (at most
/// 40 + 128 bytes), so the request reads as one slice without moving the
/// payload.
const PREFIX: usize = PAGE;

/// Requests served through io_uring since the process started (all sessions).
static REQUESTS: AtomicU64 = AtomicU64::new(0);

/// How many requests have been served through io_uring so far.
pub fn io_uring_requests() -> u64 {
    REQUESTS.load(Ordering::Relaxed)
}

/// Page-aligned memory the kernel reads and writes through the entry's iovecs.
struct PageBuf {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

// SAFETY: the buffer is plain memory owned by one queue thread.
unsafe impl Send for PageBuf {}

impl PageBuf {
    fn new(len: usize) -> io::Result<PageBuf> {
        let layout = std::alloc::Layout::from_size_align(len.next_multiple_of(PAGE), PAGE)
            .map_err(|_| io::Error::other("io_uring buffer size"))?;
        // SAFETY: the layout is not zero-sized (len > 0 at every caller).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        }
        Ok(PageBuf { ptr, layout })
    }

    fn len(&self) -> usize {
        self.layout.size()
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr` holds `len` initialised bytes; the kernel writes them
        // only while the entry is registered and not being processed here.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len()) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `bytes`, and `&mut self` makes this the only view.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len()) }
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

/// Where the reply to an entry's request stands.
#[derive(Debug)]
enum ReplyState {
    /// The handler is running (a reply now is picked up when it returns).
    Dispatching,
    /// The handler returned without replying: a reply comes later from
    /// another thread (csumfs's group commit answers the `fsync`s queued
    /// behind a sync from the thread that ran it).
    Waiting,
    /// The whole reply, as it would be written to `/dev/fuse`.
    Replied(Vec<u8>),
}

/// Entries whose late replies have arrived, and the eventfd that wakes
/// their queue thread for them.
#[derive(Debug)]
struct LateReplies {
    ready: Mutex<Vec<usize>>,
    wake: std::os::fd::OwnedFd,
}

/// The reply to the request one entry holds. It is kept apart from the
/// payload buffer because the request's own bytes there (write data, names)
/// may still be borrowed by the handler when it replies; the queue thread
/// copies it in once the handler has returned.
#[derive(Debug)]
pub(crate) struct UringReply {
    index: usize,
    state: Mutex<ReplyState>,
    late: Arc<LateReplies>,
}

impl UringReply {
    pub(crate) fn send(&self, data: &[IoSlice<'_>]) -> io::Result<()> {
        let mut bytes = Vec::with_capacity(data.iter().map(|s| s.len()).sum());
        for slice in data {
            bytes.extend_from_slice(slice);
        }
        let mut state = self.state.lock();
        match *state {
            ReplyState::Dispatching => *state = ReplyState::Replied(bytes),
            ReplyState::Waiting => {
                *state = ReplyState::Replied(bytes);
                drop(state);
                self.late.ready.lock().push(self.index);
                let one = 1u64.to_ne_bytes();
                // SAFETY: writes 8 bytes from a live buffer to our eventfd.
                let written = unsafe {
                    libc::write(self.late.wake.as_raw_fd(), one.as_ptr().cast(), one.len())
                };
                if written != 8 {
                    return Err(io::Error::last_os_error());
                }
            }
            ReplyState::Replied(_) => {
                return Err(io::Error::other("a second reply to one FUSE request"));
            }
        }
        Ok(())
    }
}

/// One ring entry: its header and payload buffers, the iovecs naming them
/// (the kernel reads the iovecs at registration), and its request's reply.
struct Entry {
    header: PageBuf,
    payload: PageBuf,
    iov: Box<[libc::iovec; 2]>,
    commit_id: u64,
    unique: u64,
    reply: Arc<UringReply>,
}

impl Entry {
    fn new(index: usize, payload_size: usize, late: &Arc<LateReplies>) -> io::Result<Entry> {
        let mut header = PageBuf::new(REQ_HEADER_SIZE)?;
        let mut payload = PageBuf::new(PREFIX + payload_size)?;
        let iov = Box::new([
            libc::iovec {
                iov_base: header.bytes_mut().as_mut_ptr().cast(),
                iov_len: REQ_HEADER_SIZE,
            },
            libc::iovec {
                // SAFETY: PREFIX is inside the allocation.
                iov_base: unsafe { payload.bytes_mut().as_mut_ptr().add(PREFIX) }.cast(),
                iov_len: payload_size,
            },
        ]);
        let reply = Arc::new(UringReply {
            index,
            state: Mutex::new(ReplyState::Waiting),
            late: late.clone(),
        });
        Ok(Entry {
            header,
            payload,
            iov,
            commit_id: 0,
            unique: 0,
            reply,
        })
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// The `IORING_OP_URING_CMD` for `cmd_op` on entry `index`: `struct
/// fuse_uring_cmd_req` (flags, commit id, queue id) in the command area and,
/// for a registration, the iovecs in `addr`/`len`.
fn command(
    fd: RawFd,
    cmd_op: u32,
    qid: u16,
    commit_id: u64,
    index: usize,
    iov: Option<&[libc::iovec; 2]>,
) -> squeue::Entry128 {
    let mut cmd = [0u8; 80];
    cmd[8..16].copy_from_slice(&commit_id.to_le_bytes());
    cmd[16..18].copy_from_slice(&qid.to_le_bytes());
    let mut op = opcode::UringCmd80::new(types::Fd(fd), cmd_op).cmd(cmd);
    if let Some(iov) = iov {
        op = op.addr(Some(iov.as_ptr() as u64));
    }
    let entry = op.build().user_data(index as u64);
    match iov {
        None => entry,
        Some(iov) => {
            // The crate sets no `len` for this opcode; FUSE wants the iovec
            // count there (offset 24 of `struct io_uring_sqe`).
            const _: () = assert!(size_of::<squeue::Entry128>() == 128);
            // SAFETY: `Entry128` is `repr(C)`, the 128 bytes of an SQE128.
            let mut raw: [u8; 128] = unsafe { std::mem::transmute(entry) };
            raw[24..28].copy_from_slice(&(iov.len() as u32).to_le_bytes());
            // SAFETY: as above; every byte pattern is a valid SQE.
            unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
        }
    }
}

/// `user_data` of the eventfd poll (entries use their index).
const WAKE: u64 = u64::MAX;

/// Serves kernel queue `qid` until the connection ends.
pub(crate) fn serve_queue<FS: Filesystem>(
    qid: u16,
    depth: usize,
    payload_size: usize,
    fd: RawFd,
    se: &SessionEventLoop<FS>,
) -> io::Result<()> {
    pin_to_cpu(qid);
    // SAFETY: eventfd has no memory arguments; the result is checked.
    let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if wake < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nothing else owns.
    let wake = unsafe { std::os::fd::OwnedFd::from_raw_fd(wake) };
    let late = Arc::new(LateReplies {
        ready: Mutex::new(Vec::new()),
        wake,
    });
    let mut ring: IoUring<squeue::Entry128, cqueue::Entry> =
        IoUring::builder().build((depth + 1).next_power_of_two() as u32)?;
    let mut entries = (0..depth)
        .map(|index| Entry::new(index, payload_size, &late))
        .collect::<io::Result<Vec<_>>>()?;
    let mut queued = Vec::with_capacity(depth + 1);
    for (index, entry) in entries.iter().enumerate() {
        queued.push(command(
            fd,
            FUSE_IO_URING_CMD_REGISTER,
            qid,
            0,
            index,
            Some(&entry.iov),
        ));
    }
    queued.push(wake_poll(&late));
    let yield_on_commit = can_leave_sched_idle();
    // A reply is among the commands about to go.
    let mut committed = false;
    loop {
        for sqe in queued.drain(..) {
            // SAFETY: the iovecs and buffers live in `entries`, and the
            // eventfd in `late`, until this function returns, after the
            // connection has ended.
            unsafe { ring.submission().push(&sqe) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        if yield_on_commit && committed {
            // The caller a reply wakes ran on this CPU, where this thread
            // is still running when it wakes: the scheduler then puts the
            // caller on an idle CPU, its next request lands on that CPU's
            // queue, and every round trip wakes an idle CPU and migrates.
            // A thread of SCHED_IDLE does not count as running there, so
            // the caller stays and this thread yields to it; it waits for
            // the next request at its usual policy.
            set_policy(libc::SCHED_IDLE);
            let submitted = ring.submit();
            set_policy(libc::SCHED_OTHER);
            submitted?;
        }
        committed = false;
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e),
        }
        let completed: Vec<(u64, i32)> = ring
            .completion()
            .map(|cqe| (cqe.user_data(), cqe.result()))
            .collect();
        for (user_data, result) in completed {
            if user_data == WAKE {
                let mut count = [0u8; 8];
                // SAFETY: reads 8 bytes into a live buffer (resets the
                // counter; EAGAIN when another wake-up took it).
                unsafe { libc::read(late.wake.as_raw_fd(), count.as_mut_ptr().cast(), 8) };
                let ready = std::mem::take(&mut *late.ready.lock());
                for index in ready {
                    if let Some(sqe) = commit(&mut entries[index], qid, fd, payload_size) {
                        queued.push(sqe);
                        committed = true;
                    }
                }
                queued.push(wake_poll(&late));
                continue;
            }
            let index = user_data as usize;
            let entry = &mut entries[index];
            if result == -libc::EAGAIN || result == -libc::EINTR {
                let (op, iov) = if entry.commit_id == 0 {
                    (FUSE_IO_URING_CMD_REGISTER, Some(&*entry.iov))
                } else {
                    (FUSE_IO_URING_CMD_COMMIT_AND_FETCH, None)
                };
                queued.push(command(fd, op, qid, entry.commit_id, index, iov));
                continue;
            }
            if result == -libc::ENOTCONN || result == -libc::ENODEV {
                return Ok(()); // unmounted
            }
            if result < 0 {
                let err = io::Error::from_raw_os_error(-result);
                if entry.commit_id == 0 {
                    warn!(
                        "FUSE over io_uring: queue {qid} not registered ({err}); requests stay on /dev/fuse"
                    );
                    return Ok(());
                }
                return Err(err);
            }
            dispatch_entry(entry, payload_size, se);
            if let Some(sqe) = commit(entry, qid, fd, payload_size) {
                queued.push(sqe);
                committed = true;
            }
        }
    }
}

/// Sets this thread's scheduling policy (priority 0); whether it could.
fn set_policy(policy: i32) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: pid 0 is this thread; `param` outlives the call.
    unsafe { libc::sched_setscheduler(0, policy, &param) == 0 }
}

/// Whether a thread may go back from SCHED_IDLE to SCHED_OTHER (root,
/// CAP_SYS_NICE, or an RLIMIT_NICE that allows nice 0): tried once on a
/// thread of its own, so no serving thread is left stuck at SCHED_IDLE.
fn can_leave_sched_idle() -> bool {
    static ALLOWED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALLOWED.get_or_init(|| {
        std::thread::spawn(|| set_policy(libc::SCHED_IDLE) && set_policy(libc::SCHED_OTHER))
            .join()
            .unwrap_or(false)
    })
}

/// A one-shot poll of the eventfd that late replies write to.
fn wake_poll(late: &LateReplies) -> squeue::Entry128 {
    opcode::PollAdd::new(types::Fd(late.wake.as_raw_fd()), libc::POLLIN as u32)
        .build()
        .user_data(WAKE)
        .into()
}

/// Dispatches the request `entry` holds; the reply, now or later, lands in
/// `entry.reply`.
fn dispatch_entry<FS: Filesystem>(entry: &mut Entry, payload_size: usize, se: &SessionEventLoop<FS>) {
    REQUESTS.fetch_add(1, Ordering::Relaxed);
    *entry.reply.state.lock() = ReplyState::Dispatching;
    let header = entry.header.bytes();
    entry.commit_id = u64_at(header, ENT_IN_OUT_COMMIT_ID);
    entry.unique = u64_at(header, IN_OUT_OFFSET + 8);
    let unique = entry.unique;
    let payload_len = u32_at(header, ENT_IN_OUT_PAYLOAD_SZ) as usize;
    let len = u32_at(header, IN_OUT_OFFSET) as usize;
    // The in header's length counts every argument; what the payload does
    // not hold is the operation's header.
    let op_len = len.checked_sub(IN_HEADER_SIZE + payload_len);
    let range = match op_len {
        Some(op_len) if op_len <= OP_IN_MAX && payload_len <= payload_size => {
            let start = PREFIX - IN_HEADER_SIZE - op_len;
            let mut head = [0u8; IN_HEADER_SIZE + OP_IN_MAX];
            head[..IN_HEADER_SIZE]
                .copy_from_slice(&header[IN_OUT_OFFSET..IN_OUT_OFFSET + IN_HEADER_SIZE]);
            head[IN_HEADER_SIZE..IN_HEADER_SIZE + op_len]
                .copy_from_slice(&header[OP_IN_OFFSET..OP_IN_OFFSET + op_len]);
            entry.payload.bytes_mut()[start..PREFIX]
                .copy_from_slice(&head[..IN_HEADER_SIZE + op_len]);
            start..PREFIX + payload_len
        }
        _ => {
            error!(
                "FUSE over io_uring: request {unique} of {len} bytes with a {payload_len}-byte payload"
            );
            *entry.reply.state.lock() = ReplyState::Replied(error_reply(unique, libc::EIO));
            return;
        }
    };
    let bytes = &entry.payload.bytes()[range];
    match RequestWithSender::new(ReplySender::Uring(entry.reply.clone()), bytes) {
        Some(req) => {
            if let Ok(Operation::Destroy(_)) = req.request.operation() {
                req.reply::<ReplyEmpty>().ok();
            } else {
                req.dispatch(se);
            }
        }
        None => {
            error!("FUSE over io_uring: unparsable request {unique}");
            *entry.reply.state.lock() = ReplyState::Replied(error_reply(unique, libc::EIO));
        }
    }
}

/// Once the entry's reply is there: copies it into the entry's buffers and
/// returns the command sending it back (and fetching the next request).
/// Without a reply yet, marks the entry waiting for a late one.
fn commit(entry: &mut Entry, qid: u16, fd: RawFd, payload_size: usize) -> Option<squeue::Entry128> {
    let message = {
        let mut state = entry.reply.state.lock();
        match std::mem::replace(&mut *state, ReplyState::Waiting) {
            ReplyState::Replied(message) => message,
            ReplyState::Dispatching | ReplyState::Waiting => return None,
        }
    };
    let unique = entry.unique;
    let message = if message.len() < OUT_HEADER_SIZE || message.len() - OUT_HEADER_SIZE > payload_size {
        error!(
            "FUSE over io_uring: a reply of {} bytes does not fit; replying EIO",
            message.len()
        );
        error_reply(unique, libc::EIO)
    } else {
        message
    };
    let body = message.len() - OUT_HEADER_SIZE;
    entry.payload.bytes_mut()[PREFIX..PREFIX + body].copy_from_slice(&message[OUT_HEADER_SIZE..]);
    let header = entry.header.bytes_mut();
    header[IN_OUT_OFFSET..IN_OUT_OFFSET + OUT_HEADER_SIZE].copy_from_slice(&message[..OUT_HEADER_SIZE]);
    header[ENT_IN_OUT_PAYLOAD_SZ..ENT_IN_OUT_PAYLOAD_SZ + 4].copy_from_slice(&(body as u32).to_le_bytes());
    let index = entry.reply.index;
    Some(command(
        fd,
        FUSE_IO_URING_CMD_COMMIT_AND_FETCH,
        qid,
        entry.commit_id,
        index,
        None,
    ))
}

/// `struct fuse_out_header` with `-errno` and no body.
fn error_reply(unique: u64, errno: i32) -> Vec<u8> {
    let mut out = Vec::with_capacity(OUT_HEADER_SIZE);
    out.extend_from_slice(&(OUT_HEADER_SIZE as u32).to_le_bytes());
    out.extend_from_slice(&(-errno).to_le_bytes());
    out.extend_from_slice(&unique.to_le_bytes());
    out
}

/// Requests reach the queue of the CPU their caller runs on; serving them on
/// that CPU keeps the reply's wake-up local, as libfuse does.
fn pin_to_cpu(qid: u16) {
    // SAFETY: a zeroed cpu_set_t is an empty set; the calls only read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(qid as usize, &mut set);
        if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) != 0 {
            warn!(
                "FUSE over io_uring: queue {qid} not pinned to its CPU: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// The kernel's queue count: one per possible CPU (`num_possible_cpus`),
/// from `/sys/devices/system/cpu/possible` ("0-3", "0,2-5").
pub(crate) fn queue_count() -> io::Result<usize> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let last = list
        .trim()
        .split([',', '-'])
        .filter_map(|n| n.parse::<usize>().ok())
        .max()
        .ok_or_else(|| io::Error::other(format!("possible CPUs: {list:?}")))?;
    Ok(last + 1)
}

//! One writer per image. A volume holds an advisory lock (`flock`) on its
//! image file while it is open — exclusive for writing, shared for reading
//! — so that a second `csumkit mount`, `ext4 put`, `ext4 checkpoint` or
//! `scrub` of an image that another process has open for writing is
//! refused, rather than two processes each writing (or judging) their own
//! view of it. The kernel's ext4 does not take the lock: the
//! incompat marks a csumfs mount sets keep the kernel off the image
//! (`txn/redo.rs`, `txn/undo.rs`), `store/mmp.rs` too where the image has ext4's
//! multiple-mount protection; a lock for writing is refused while the
//! kernel has the image mounted through a loop device (`store/kernel_mounts.rs`).

use crate::error::Error;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// How long a lock held elsewhere is waited for: `fusermount3 -u` returns
/// before the daemon has checkpointed and let go of the image, and a
/// command run right after it should not fail for that.
const WAIT: Duration = Duration::from_secs(3);

/// The lock, held as long as this descriptor of the image is open.
pub struct ImageLock(#[allow(dead_code)] std::fs::File);

impl ImageLock {
    /// Takes the lock on `file` (the image at `path`), exclusive when
    /// `write`, waiting up to three seconds for one held elsewhere.
    /// `Ok(None)` where the file system has no such locks. (What opens a
    /// [`Volume`](crate::Volume) takes it; this is for other writers and
    /// readers of an image.)
    ///
    /// # Errors
    /// [`Error::InUse`] when another open description holds a lock that
    /// excludes this one; [`Error::Io`] otherwise.
    pub fn take(file: &std::fs::File, path: &Path, write: bool) -> Result<Option<ImageLock>, Error> {
        let io = |source| Error::Io { context: path.display().to_string(), source };
        // Its own open file description would be a second lock; a
        // duplicate shares the one `file` has, and keeps it when `file`
        // is closed.
        let held = file.try_clone().map_err(io)?;
        let operation = if write { libc::LOCK_EX } else { libc::LOCK_SH } | libc::LOCK_NB;
        let start = Instant::now();
        loop {
            // SAFETY: a descriptor this function owns; flock reads no memory.
            if unsafe { libc::flock(held.as_raw_fd(), operation) } == 0 {
                if let Some(place) = crate::store::kernel_mounts::kernel_mount_of(file).filter(|_| write) {
                    return Err(Error::InUse(format!("the kernel has it mounted {place}: unmount it first")));
                }
                return Ok(Some(ImageLock(held)));
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EWOULDBLOCK) if start.elapsed() < WAIT => {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Some(libc::EWOULDBLOCK) => {
                    let why = if write {
                        "open in another process (a csumkit mount, or a command under way); unmount it or let \
                         the command finish first"
                    } else {
                        "open for writing in another process (a csumkit mount?); unmount it first"
                    };
                    return Err(Error::InUse(why.into()));
                }
                Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::EINVAL) => return Ok(None),
                _ => return Err(io(e)),
            }
        }
    }
}
